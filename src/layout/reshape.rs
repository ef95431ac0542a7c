//! Re-shaping idle capacity toward what is asked for: when a `CreateDevice` finds no room for
//! its type, a GPU that offers the type and holds nothing but spares of the active layout's
//! pools, of other types, is emptied of them, and the create is tried once more.
//!
//! This is how NVIDIA's equal-size (time-sliced) vGPU mode works: a GPU runs one vGPU size at
//! a time, and takes another size only once it holds no vGPU ([`crate::engine`]'s placement
//! rules). So a GPU full of unused 4Q spares cannot serve a 2Q login until the spares go.
//!
//! - Only spares go: devices whose owner is the tag of one of the active layout's pools. A
//!   GPU with any other device (a desktop, a device of no pool) is never touched, nor is a GPU
//!   in heterogeneous (mixed-size) mode, whose room depends on placements, not on emptiness.
//! - The GPU with the fewest spares is chosen (the least work thrown away), then by address.
//! - Each spare goes through [`crate::engine::Engine::remove_spare`]: one handed out since the
//!   plan is its new owner's and stays (the re-shape then stops short, and the create tries
//!   its luck).
//! - The GPU's layout lock is held from the plan until the create tried again, so the refill
//!   does not fill the GPU again in between; layouts' own creates never re-shape.
//! - The pool makes its spares again where they fit, at the next refill.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::engine::{CreateRequest, DeviceInfo, Engine, Reshaper};
use crate::libvirt::{holders, LibvirtError, LibvirtOps};

use super::plan::DeviceView;

use super::apply::LayoutLock;

/// A GPU as a re-shape sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeGpu {
    /// Its address.
    pub address: String,
    /// In NVIDIA's mixed-size mode.
    pub heterogeneous: bool,
    /// Its active devices (on it or its VFs): (UUID, type id, owner).
    pub devices: Vec<(String, String, String)>,
}

/// What a re-shape does: the GPU emptied, and its spares (UUID, owner) removed in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reshape {
    /// The GPU.
    pub gpu: String,
    /// The spares removed, (UUID, pool tag).
    pub remove: Vec<(String, String)>,
}

/// Plans a re-shape toward `type_ids` (the type the create asked for, as each GPU names it):
/// among `gpus` (those that offer it), one that holds only spares of `pools`, none of the
/// type, at least one; the fewest spares first, then by address. `None` when no GPU can be.
pub fn plan(gpus: &[ShapeGpu], pools: &BTreeSet<String>, type_ids: &[String]) -> Option<Reshape> {
    gpus.iter()
        .filter(|g| !g.heterogeneous && !g.devices.is_empty())
        .filter(|g| {
            g.devices
                .iter()
                .all(|(_, ty, owner)| pools.contains(owner) && !type_ids.contains(ty))
        })
        .min_by(|a, b| (a.devices.len(), &a.address).cmp(&(b.devices.len(), &b.address)))
        .map(|g| Reshape {
            gpu: g.address.clone(),
            remove: g
                .devices
                .iter()
                .map(|(uuid, _, owner)| (uuid.clone(), owner.clone()))
                .collect(),
        })
}

/// The pools' side of the engine: the active layout says which devices are spares, and
/// which pool takes a released device back; libvirt says whether a running guest holds it.
pub struct PoolReshaper {
    libvirt: Option<Arc<dyn LibvirtOps>>,
}

impl PoolReshaper {
    /// Sets it as `engine`'s. Without `libvirt` no released device is kept: whether a
    /// running guest holds it cannot be told.
    pub fn install(engine: &Engine, libvirt: Option<Arc<dyn LibvirtOps>>) {
        engine.set_reshaper(Arc::new(PoolReshaper { libvirt }));
    }

    /// Why `device` is held by a running guest, or cannot be told not to be: its owner's
    /// domain is active, or an active domain holds it in its definition, or libvirt did
    /// not answer. `None`: no running guest holds it.
    fn held_by_running_guest(&self, device: &DeviceInfo) -> Option<String> {
        let Some(ops) = self.libvirt.as_deref() else {
            return Some("no libvirt connection to ask".into());
        };
        if !device.owner.is_empty() {
            match ops.domain_state(&device.owner) {
                Ok(s) if s.active => return Some(format!("domain {:?} runs", device.owner)),
                Ok(_) | Err(LibvirtError::NoDomain { .. }) => {}
                Err(e) => return Some(format!("libvirt did not answer: {e}")),
            }
        }
        match holders(ops, device) {
            Ok(domains) => domains
                .into_iter()
                .find(|d| ops.domain_state(d).is_ok_and(|s| s.active))
                .map(|d| format!("running domain {d:?} holds it")),
            Err(e) => Some(format!("libvirt did not answer: {e}")),
        }
    }
}

impl Reshaper for PoolReshaper {
    fn make_room(
        &self,
        engine: &Engine,
        req: &CreateRequest,
        gpus: &[String],
    ) -> Option<Box<dyn std::any::Any>> {
        let name = super::pools::active(engine.host())?;
        let layout = super::file::load(engine.host().root(), &name).ok()?;
        let pools: BTreeSet<String> = layout
            .gpus
            .iter()
            .flat_map(|g| g.devices.iter().map(|d| d.owner.clone()))
            .collect();
        let view = |engine: &Engine| -> (Vec<ShapeGpu>, Vec<String>) {
            let devices = engine.list_devices();
            let shapes = gpus
                .iter()
                .map(|gpu| ShapeGpu {
                    address: gpu.clone(),
                    heterogeneous: engine.is_heterogeneous(gpu),
                    devices: devices
                        .iter()
                        .filter(|d| d.active && engine.gpu_of_parent(&d.parent) == *gpu)
                        .map(|d| (d.uuid.clone(), d.type_id.clone(), d.owner.clone()))
                        .collect(),
                })
                .collect();
            let ids = engine
                .list_gpus()
                .iter()
                .filter(|g| gpus.contains(&g.address))
                .flat_map(|g| g.types.iter())
                .filter(|t| t.matches(&req.type_query))
                .map(|t| t.id.clone())
                .collect();
            (shapes, ids)
        };
        let (shapes, ids) = view(engine);
        let first = plan(&shapes, &pools, &ids)?;
        // Planned again under the GPU's layout lock: a refill may have changed it meanwhile.
        let held = LayoutLock::hold(engine.host().root(), vec![first.gpu.clone()]);
        let (shapes, ids) = view(engine);
        let reshape = plan(&shapes, &pools, &ids).filter(|r| r.gpu == first.gpu)?;
        let mut removed = 0;
        for (uuid, owner) in &reshape.remove {
            match engine.remove_spare(uuid, owner) {
                Ok(_) => removed += 1,
                Err(e) => {
                    tracing::info!(gpu = %reshape.gpu, %uuid, error = %e, "re-shape stopped short");
                    break;
                }
            }
        }
        tracing::info!(
            gpu = %reshape.gpu,
            toward = %req.type_query,
            removed,
            layout = %name,
            "re-shaped a GPU of spares toward a type that had no room"
        );
        crate::metrics::counters().pool("reshape");
        Some(Box::new(held))
    }

    fn pool_for_released(&self, engine: &Engine, device: &DeviceInfo) -> Option<String> {
        let name = super::pools::active(engine.host())?;
        let layout = super::file::load(engine.host().root(), &name).ok()?;
        if !layout
            .gpus
            .iter()
            .any(|g| g.devices.iter().any(|d| d.keep_released))
        {
            return None;
        }
        let view = super::apply::host_view(engine);
        let layout = super::pools::sized(engine, &layout, &view, crate::persist::now_unix());
        let released = DeviceView {
            uuid: device.uuid.clone(),
            type_id: device.type_id.clone(),
            type_name: device.type_name.clone(),
            owner: device.owner.clone(),
            active: device.active,
            created: device.created,
        };
        let gpu = engine.gpu_of_parent(&device.parent);
        let pool = super::pools::pool_for_released(&layout, &view, &gpu, &released)?;
        if let Some(why) = self.held_by_running_guest(device) {
            tracing::info!(uuid = %device.uuid, %pool, "a released device is not kept for its pool ({why}): it is removed");
            return None;
        }
        Some(pool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(address: &str, devices: &[(&str, &str, &str)]) -> ShapeGpu {
        ShapeGpu {
            address: address.into(),
            heterogeneous: false,
            devices: devices
                .iter()
                .map(|(u, t, o)| (u.to_string(), t.to_string(), o.to_string()))
                .collect(),
        }
    }

    fn pools() -> BTreeSet<String> {
        ["pool-a".to_string(), "pool-b".to_string()].into()
    }

    #[test]
    fn the_gpu_with_the_fewest_spares_of_other_types_is_emptied() {
        let gpus = [
            gpu(
                "0000:01:00.0",
                &[("a1", "nvidia-4q", "pool-a"), ("a2", "nvidia-4q", "pool-a")],
            ),
            gpu("0000:02:00.0", &[("b1", "nvidia-8q", "pool-b")]),
            gpu(
                "0000:03:00.0",
                &[("c1", "nvidia-8q", "pool-b"), ("c2", "nvidia-8q", "pool-a")],
            ),
        ];
        let r = plan(&gpus, &pools(), &["nvidia-2q".into()]).expect("a re-shape");
        assert_eq!(r.gpu, "0000:02:00.0");
        assert_eq!(r.remove, [("b1".to_string(), "pool-b".to_string())]);
        // Ties go by address; the order of removal is the devices' order.
        let r = plan(&gpus[..1], &pools(), &["nvidia-2q".into()]).expect("a re-shape");
        assert_eq!(r.remove.len(), 2);
        assert_eq!(r.remove[0].0, "a1");
    }

    #[test]
    fn a_gpu_with_anything_but_spares_of_other_types_is_never_touched() {
        let want = ["nvidia-2q".to_string()];
        for g in [
            // A desktop among the spares.
            gpu(
                "0000:01:00.0",
                &[
                    ("a1", "nvidia-4q", "pool-a"),
                    ("d", "nvidia-4q", "alice-vm"),
                ],
            ),
            // A device of no owner (another tool's).
            gpu("0000:01:00.0", &[("x", "nvidia-4q", "")]),
            // Spares of the type asked for: the GPU is full of it, not of another size.
            gpu("0000:01:00.0", &[("s", "nvidia-2q", "pool-a")]),
            // Nothing at all: nothing to re-shape (a create that found no room there had
            // another reason).
            gpu("0000:01:00.0", &[]),
        ] {
            assert_eq!(
                plan(std::slice::from_ref(&g), &pools(), &want),
                None,
                "{g:?}"
            );
        }
        let mut mixed = gpu("0000:01:00.0", &[("a1", "nvidia-4q", "pool-a")]);
        mixed.heterogeneous = true;
        assert_eq!(plan(&[mixed], &pools(), &want), None);
        // No pools: no spares.
        let g = gpu("0000:01:00.0", &[("a1", "nvidia-4q", "pool-a")]);
        assert_eq!(plan(&[g], &BTreeSet::new(), &want), None);
    }
}
