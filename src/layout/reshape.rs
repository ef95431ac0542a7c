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
//!
//! The forecast asks too ([`toward_forecast`]): after a refill, a GPU where a forecast entry's
//! create was refused is re-shaped the same way and the entry's spares made there at once,
//! but only if the GPU was not re-shaped in the last hour ([`may_reshape`], the hysteresis);
//! a refused `CreateDevice` always may, and stamps the GPU too.
//!
//! [`PoolReshaper`] also says which pool takes a released device back (`keep_released`),
//! asking libvirt that no running guest holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::engine::{CreateRequest, DeviceInfo, Engine, Reshaper};
use crate::libvirt::{holders, LibvirtError, LibvirtOps};

use super::plan::DeviceView;

use super::apply::LayoutLock;
use super::file::{DeviceEntry, Layout};
use super::plan::{entries_by_gpu, HostView};
use super::{Outcome, Status};

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

/// How long a GPU re-shaped is left as it is by re-shapes for the forecast.
pub const HYSTERESIS_S: u64 = 3600;

/// Why a GPU is re-shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A `CreateDevice` found no room for its type.
    Refused,
    /// The forecast sizes a pool that found no room.
    Forecast,
}

impl Reason {
    /// Its name in log lines.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Refused => "refused",
            Reason::Forecast => "forecast",
        }
    }
}

/// The hysteresis: whether a GPU last re-shaped at `last` (Unix seconds) may be re-shaped at
/// `now` for `reason`. A refusal always may; the forecast only once [`HYSTERESIS_S`] have
/// passed since the last re-shape of the GPU, whatever its reason (a clock that went back
/// counts as no time passed).
pub fn may_reshape(last: Option<u64>, now: u64, reason: Reason) -> bool {
    match reason {
        Reason::Refused => true,
        Reason::Forecast => last.is_none_or(|t| now.saturating_sub(t) >= HYSTERESIS_S),
    }
}

/// When each GPU (by host root and address) was last re-shaped, Unix seconds; in memory
/// (a restart forgets it, so it may allow one more re-shape per GPU).
static LAST_RESHAPE: Mutex<BTreeMap<(PathBuf, String), u64>> = Mutex::new(BTreeMap::new());

fn last_reshapes() -> MutexGuard<'static, BTreeMap<(PathBuf, String), u64>> {
    // Every update is one insert: a poisoned lock still holds consistent data.
    LAST_RESHAPE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn stamp(engine: &Engine, gpu: &str, now: u64) {
    last_reshapes().insert((engine.host().root().to_path_buf(), gpu.to_string()), now);
}

fn last_reshape(engine: &Engine, gpu: &str) -> Option<u64> {
    last_reshapes()
        .get(&(engine.host().root().to_path_buf(), gpu.to_string()))
        .copied()
}

/// The tags of a layout's pools.
fn pool_tags(layout: &Layout) -> BTreeSet<String> {
    layout
        .gpus
        .iter()
        .flat_map(|g| g.devices.iter().map(|d| d.owner.clone()))
        .collect()
}

/// `gpus` as a re-shape sees them, and the ids they name `type_query` by.
fn shapes_of(engine: &Engine, gpus: &[String], type_query: &str) -> (Vec<ShapeGpu>, Vec<String>) {
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
        .filter(|t| t.matches(type_query))
        .map(|t| t.id.clone())
        .collect();
    (shapes, ids)
}

/// A forecast entry whose creates were refused on a GPU: (GPU, the entry, how many).
pub type Short = (String, DeviceEntry, usize);

/// The forecast entries of `layout` whose creates an apply on `view` refused (`outcomes`),
/// by GPU, with how many were refused; in the order of the outcomes.
pub fn refused_forecast_creates(
    layout: &Layout,
    view: &HostView,
    outcomes: &[Outcome],
) -> Vec<Short> {
    let mut out: Vec<Short> = Vec::new();
    let entries = entries_by_gpu(layout, view);
    for o in outcomes
        .iter()
        .filter(|o| o.status == Status::Refused && o.action == "create-device")
    {
        let Some((entry, _)) = entries
            .iter()
            .find(|(_, gi)| view.gpus[*gi].address == o.gpu)
        else {
            continue;
        };
        let Some(d) = entry
            .devices
            .iter()
            .find(|d| d.forecast && format!("{} owner={}", d.type_query, d.owner) == o.subject)
        else {
            continue;
        };
        match out.iter_mut().find(|(g, e, _)| *g == o.gpu && e == d) {
            Some((_, _, n)) => *n += 1,
            None => out.push((o.gpu.clone(), d.clone(), 1)),
        }
    }
    out
}

/// Re-shapes ahead of the forecast, after the refill applied the active layout `name`
/// (`outcomes`): each GPU where a forecast entry found no room, if it holds only spares of
/// other types (the rules of [`plan`]) and was not re-shaped in the last [`HYSTERESIS_S`],
/// is emptied of them and the entry's spares are made there at once, under the GPU's
/// layout lock, through the engine's own operations (one batch of events, audited as
/// `RefillPools`). Returns the GPUs re-shaped.
pub fn toward_forecast(engine: &Engine, name: &str, outcomes: &[Outcome]) -> Vec<String> {
    let Ok(layout) = super::file::load(engine.host().root(), name) else {
        return Vec::new();
    };
    if !super::pools::has_forecast(&layout) {
        return Vec::new();
    }
    let pools = pool_tags(&layout);
    let view = super::apply::host_view(engine);
    let mut done = Vec::new();
    for (gpu, entry, missing) in refused_forecast_creates(&layout, &view, outcomes) {
        let _held = LayoutLock::hold(engine.host().root(), vec![gpu.clone()]);
        let now = crate::persist::now_unix();
        if !may_reshape(last_reshape(engine, &gpu), now, Reason::Forecast) {
            tracing::info!(%gpu, toward = %entry.type_query, pool = %entry.owner,
                "a re-shape for the forecast waits: the GPU was re-shaped less than an hour ago");
            continue;
        }
        let (shapes, ids) = shapes_of(engine, std::slice::from_ref(&gpu), &entry.type_query);
        let Some(reshape) = plan(&shapes, &pools, &ids) else {
            continue;
        };
        stamp(engine, &gpu, now);
        let cause = crate::engine::Cause {
            method: "RefillPools".into(),
            ..crate::engine::Cause::default()
        };
        let (removed, made) = crate::engine::with_cause(cause, || {
            engine
                .events()
                .batch(|| execute(engine, &reshape, &entry, missing))
        });
        tracing::info!(%gpu, toward = %entry.type_query, pool = %entry.owner, removed, made,
            layout = %name, reason = Reason::Forecast.name(),
            "re-shaped a GPU of spares toward a type that had no room");
        crate::metrics::counters().pool("reshape");
        done.push(gpu);
    }
    done
}

/// Takes a re-shape's steps: its spares removed (each only while still the pool's), then
/// `missing` spares of `entry` made on the GPU; (removed, made).
fn execute(
    engine: &Engine,
    reshape: &Reshape,
    entry: &DeviceEntry,
    missing: usize,
) -> (usize, usize) {
    let mut removed = 0;
    for (uuid, owner) in &reshape.remove {
        match engine.remove_spare(uuid, owner) {
            Ok(_) => removed += 1,
            Err(e) => {
                tracing::info!(gpu = %reshape.gpu, %uuid, error = %e, "re-shape stopped short");
                return (removed, 0);
            }
        }
    }
    let mut made = 0;
    for _ in 0..missing {
        let req = CreateRequest {
            type_query: entry.type_query.clone(),
            parent: Some(reshape.gpu.clone()),
            owner: entry.owner.clone(),
            params: entry.params.clone(),
            stocking_pool: true,
            ..CreateRequest::default()
        };
        match engine.create_device(&req) {
            Ok(_) => made += 1,
            Err(e) => {
                tracing::info!(gpu = %reshape.gpu, error = %e, "a spare after a re-shape was not made");
                break;
            }
        }
    }
    (removed, made)
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
        let pools = pool_tags(&layout);
        let (shapes, ids) = shapes_of(engine, gpus, &req.type_query);
        let first = plan(&shapes, &pools, &ids)?;
        // Planned again under the GPU's layout lock: a refill may have changed it meanwhile.
        let held = LayoutLock::hold(engine.host().root(), vec![first.gpu.clone()]);
        let (shapes, ids) = shapes_of(engine, gpus, &req.type_query);
        let reshape = plan(&shapes, &pools, &ids).filter(|r| r.gpu == first.gpu)?;
        // A refusal may always re-shape; it stamps the GPU all the same.
        stamp(engine, &reshape.gpu, crate::persist::now_unix());
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
            reason = Reason::Refused.name(),
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
    fn the_forecast_re_shapes_a_gpu_at_most_once_an_hour_a_refusal_always() {
        let t = 1_000_000;
        // Never re-shaped: either may.
        assert!(may_reshape(None, t, Reason::Forecast));
        assert!(may_reshape(None, t, Reason::Refused));
        // Re-shaped a second short of an hour ago: only a refusal may.
        let last = Some(t - HYSTERESIS_S + 1);
        assert!(!may_reshape(last, t, Reason::Forecast));
        assert!(may_reshape(last, t, Reason::Refused));
        // An hour on, the forecast may again.
        assert!(may_reshape(Some(t - HYSTERESIS_S), t, Reason::Forecast));
        // A clock that went back counts as no time passed.
        assert!(!may_reshape(Some(t + 60), t, Reason::Forecast));
        assert_eq!(
            (Reason::Refused.name(), Reason::Forecast.name()),
            ("refused", "forecast")
        );
    }

    #[test]
    fn only_refused_creates_of_forecast_entries_ask_for_a_re_shape() {
        let layout: Layout = toml::from_str(
            r#"
[[gpu]]
address = "0000:01:00.0"
devices = [
  { type = "A-4Q", count = 2, owner = "pool-4q" },
  { type = "A-2Q", owner = "pool-2q", forecast = true, min = 1, max = 4 },
]
"#,
        )
        .expect("layout");
        let view = HostView {
            gpus: ["0000:01:00.0", "0000:02:00.0"]
                .iter()
                .map(|a| crate::layout::plan::GpuView {
                    address: a.to_string(),
                    ..Default::default()
                })
                .collect(),
        };
        let o = |status: Status, gpu: &str, subject: &str| Outcome {
            status,
            gpu: gpu.into(),
            action: "create-device".into(),
            subject: subject.into(),
            detail: String::new(),
        };
        let outcomes = [
            o(Status::Refused, "0000:01:00.0", "A-2Q owner=pool-2q"),
            o(Status::Refused, "0000:01:00.0", "A-2Q owner=pool-2q"),
            // Not a forecast entry: a count entry waits for its refusals.
            o(Status::Refused, "0000:01:00.0", "A-4Q owner=pool-4q"),
            // Done, or on a GPU the layout does not name: nothing to do.
            o(Status::Done, "0000:01:00.0", "A-2Q owner=pool-2q"),
            o(Status::Refused, "0000:02:00.0", "A-2Q owner=pool-2q"),
        ];
        let short = refused_forecast_creates(&layout, &view, &outcomes);
        assert_eq!(short.len(), 1, "{short:?}");
        let (gpu, entry, n) = &short[0];
        assert_eq!(
            (gpu.as_str(), entry.owner.as_str(), *n),
            ("0000:01:00.0", "pool-2q", 2)
        );
        assert!(refused_forecast_creates(&layout, &view, &outcomes[2..]).is_empty());
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
