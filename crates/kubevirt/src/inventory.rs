//! What each resource advertises, computed from vgpud's objects and capacity: its device IDs,
//! their health and NUMA node, and for each the vgpud device behind it (if made).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use vgpud_client::{Client, Options, Tree};

use crate::config::{Config, Mode, Prefixes, ResourceConfig};
use crate::naming;
use crate::pb::deviceplugin as dp;

/// How virt-launcher is told a resource's devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// mdevs: `MDEV_PCI_RESOURCE_<NAME>=<uuid,…>`.
    Mdev,
    /// PCI functions (SR-IOV vGPU VFs, whole GPUs): `PCI_RESOURCE_<NAME>=<BDF,…>`.
    Pci,
}

/// A configured resource, resolved against vgpud's types.
#[derive(Debug, Clone)]
pub struct Resource {
    /// The kubelet resource name (`nvidia.com/GRID_RTX6000-4Q`).
    pub name: String,
    /// vgpud's type id (`nvidia-259`, or `passthrough`).
    pub type_id: String,
    /// mdev or PCI.
    pub kind: Kind,
    /// Pool or on demand.
    pub mode: Mode,
    /// Pool mode: the pool's owner tag.
    pub pool: Option<String>,
    /// On demand: most IDs.
    pub max_devices: u32,
    /// On demand: the UUID of each slot, and back.
    pub slots: HashMap<String, u32>,
}

impl Resource {
    /// The environment variable virt-launcher reads for this resource.
    pub fn env_var(&self) -> String {
        let prefix = match self.kind {
            Kind::Mdev => naming::MDEV_PREFIX,
            Kind::Pci => naming::PCI_PREFIX,
        };
        naming::env_var(prefix, &self.name)
    }
}

/// A configured resource that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// vgpud could not be asked.
    #[error("resolving resource type {ty}: {source}")]
    Vgpud {
        /// The configured type.
        ty: String,
        /// vgpud's answer.
        source: vgpud_client::Error,
    },
    /// No GPU offers the type.
    #[error("resolving resource type {ty}: no GPU offers it")]
    Unknown {
        /// The configured type.
        ty: String,
    },
    /// The resource name is not one kubelet takes.
    #[error("resource {name}: {why}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        why: &'static str,
    },
}

/// Resolves the configured resources: type id, resource name, kind.
pub async fn resolve(client: &Client, config: &Config) -> Result<Vec<Resource>, ResolveError> {
    let vgpud = |ty: &str| {
        let ty = ty.to_string();
        move |source| ResolveError::Vgpud { ty, source }
    };
    let mut out = Vec::new();
    for rc in &config.resources {
        let tree = client.tree().await.map_err(vgpud(&rc.ty))?;
        let (type_id, type_name, gpu) = if rc.ty == "passthrough" {
            let gpu = tree
                .gpus
                .iter()
                .find(|g| g.sharing_modes.iter().any(|m| m == "passthrough"))
                .ok_or_else(|| ResolveError::Unknown { ty: rc.ty.clone() })?;
            ("passthrough".to_string(), gpu.model.clone(), gpu.clone())
        } else {
            let types = client.list_types().await.map_err(vgpud(&rc.ty))?;
            let row = types
                .iter()
                .find(|t| t.id == rc.ty || t.name.eq_ignore_ascii_case(&rc.ty))
                .ok_or_else(|| ResolveError::Unknown { ty: rc.ty.clone() })?;
            let gpu = tree
                .gpus
                .iter()
                .find(|g| g.address == row.gpu)
                .ok_or_else(|| ResolveError::Unknown { ty: rc.ty.clone() })?;
            (row.id.clone(), row.name.clone(), gpu.clone())
        };
        // mdev types are those of a GPU that shares by mdev (on the GPU or, A40, on its VFs);
        // the rest are PCI functions: SR-IOV vGPU VFs (L40S), whole GPUs.
        let kind = if type_id != "passthrough" && gpu.sharing_modes.iter().any(|m| m == "mdev") {
            Kind::Mdev
        } else {
            Kind::Pci
        };
        let name = rc.name.clone().unwrap_or_else(|| {
            naming::resource_name(prefix(&config.prefix, gpu.vendor_id), &type_name)
        });
        check_name(&name)?;
        out.push(resource(rc, name, type_id, kind));
    }
    Ok(out)
}

fn resource(rc: &ResourceConfig, name: String, type_id: String, kind: Kind) -> Resource {
    let slots = if rc.mode == Mode::OnDemand {
        (0..rc.max_devices)
            .map(|n| (naming::on_demand_uuid(&name, n), n))
            .collect()
    } else {
        HashMap::new()
    };
    Resource {
        name,
        type_id,
        kind,
        mode: rc.mode,
        pool: rc.pool.clone(),
        max_devices: rc.max_devices,
        slots,
    }
}

fn prefix(p: &Prefixes, vendor: u16) -> &str {
    match vendor {
        0x10de => &p.nvidia,
        0x8086 => &p.intel,
        0x1002 => &p.amd,
        _ => &p.other,
    }
}

/// Kubernetes' extended resource names: `<domain>/<name>`, the name at most 63 characters of
/// `[A-Za-z0-9._-]`.
fn check_name(name: &str) -> Result<(), ResolveError> {
    let bad = |why| ResolveError::BadName {
        name: name.to_string(),
        why,
    };
    let (domain, rest) = name.split_once('/').ok_or_else(|| bad("no `<domain>/`"))?;
    if domain.is_empty() || rest.is_empty() || rest.len() > 63 {
        return Err(bad("the name after `/` must be 1 to 63 characters"));
    }
    if !rest
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(bad("only letters, digits, `.`, `_` and `-` after `/`"));
    }
    Ok(())
}

/// One advertised device ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The vgpud device's UUID (made or to be made).
    pub uuid: String,
    /// The GPU it is (or would be) on.
    pub gpu: String,
    /// That GPU's NUMA node (-1: unknown).
    pub numa: i32,
    /// Whether kubelet may hand it out.
    pub healthy: bool,
    /// Whether the vgpud device exists.
    pub made: bool,
}

/// A resource's advertised devices, by ID.
pub type Listing = BTreeMap<String, Entry>;

/// What the plugin remembers across refreshes for a resource.
#[derive(Debug, Default, Clone)]
pub struct Memory {
    /// IDs kubelet was given (Allocate answered), until no pod holds them for the grace.
    pub allocated: BTreeSet<String>,
    /// The last listing (a pool device that vanishes stays, unhealthy, while allocated).
    pub last: Listing,
}

/// Capacity per GPU for an on-demand type: GPU address → how many more. The GPUs are asked
/// at once (one `GetCapacity` each, in parallel).
pub async fn capacity(client: &Client, tree: &Tree, r: &Resource) -> BTreeMap<String, u32> {
    let gpus = tree.gpus.iter().filter(|g| {
        if r.type_id == "passthrough" {
            g.sharing_modes.iter().any(|m| m == "passthrough")
        } else {
            g.types.contains(&r.type_id)
        }
    });
    let asks = gpus.map(|g| async move {
        let opts = Options::new().str("parent", g.address.clone());
        match client.capacity(&r.type_id, &opts).await {
            Ok(n) => Some((g.address.clone(), n)),
            Err(e) => {
                tracing::debug!(resource = %r.name, gpu = %g.address, error = %e, "GetCapacity");
                None
            }
        }
    });
    futures_util::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// The listing of `r` from vgpud's tree and the capacity per GPU.
pub fn listing(
    r: &Resource,
    tree: &Tree,
    capacity: &BTreeMap<String, u32>,
    memory: &Memory,
) -> Listing {
    let numa: HashMap<&str, i32> = tree
        .gpus
        .iter()
        .map(|g| (g.address.as_str(), g.numa_node))
        .collect();
    let numa_of = |gpu: &str| numa.get(gpu).copied().unwrap_or(-1);
    let mut out = Listing::new();
    match r.mode {
        Mode::Pool => {
            let pool = r.pool.as_deref().unwrap_or_default();
            for d in &tree.devices {
                if d.owner != pool
                    || !(d.type_id == r.type_id
                        || r.type_id == "passthrough" && d.kind == "passthrough")
                {
                    continue;
                }
                let id = match r.kind {
                    Kind::Pci if !d.address.is_empty() => d.address.clone(),
                    _ => d.uuid.clone(),
                };
                out.insert(
                    id,
                    Entry {
                        uuid: d.uuid.clone(),
                        gpu: d.gpu.clone(),
                        numa: numa_of(&d.gpu),
                        healthy: d.active,
                        made: true,
                    },
                );
            }
            // A device kubelet handed out that vanished behind vgpud's back (or with its
            // GPU) stays listed, unhealthy, until no pod holds it.
            for id in &memory.allocated {
                if let (false, Some(old)) = (out.contains_key(id), memory.last.get(id)) {
                    out.insert(
                        id.clone(),
                        Entry {
                            healthy: false,
                            made: false,
                            ..old.clone()
                        },
                    );
                }
            }
        }
        Mode::OnDemand => {
            for d in &tree.devices {
                if d.type_id != r.type_id {
                    continue;
                }
                if let Some(&n) = r.slots.get(&d.uuid) {
                    out.insert(
                        naming::on_demand_id(&r.type_id, n),
                        Entry {
                            uuid: d.uuid.clone(),
                            gpu: d.gpu.clone(),
                            numa: numa_of(&d.gpu),
                            healthy: d.active,
                            made: true,
                        },
                    );
                }
            }
            for id in &memory.allocated {
                if out.contains_key(id) {
                    continue;
                }
                if let Some(n) = naming::on_demand_slot(&r.type_id, id, r.max_devices) {
                    let old = memory.last.get(id);
                    out.insert(
                        id.clone(),
                        Entry {
                            uuid: naming::on_demand_uuid(&r.name, n),
                            gpu: old.map(|e| e.gpu.clone()).unwrap_or_default(),
                            numa: old.map(|e| e.numa).unwrap_or(-1),
                            healthy: false,
                            made: false,
                        },
                    );
                }
            }
            // Free slots, as many as vgpud can still make, GPU by GPU: the GPU with the
            // most devices of the type first (vgpud's own preference: pack).
            let used = used_per_gpu(&out);
            let mut gpus: Vec<(&String, &u32)> = capacity.iter().collect();
            gpus.sort_by_key(|(g, _)| {
                std::cmp::Reverse(used.get(g.as_str()).copied().unwrap_or(0))
            });
            let mut n = 0u32;
            for (gpu, &free) in gpus {
                for _ in 0..free {
                    let id = loop {
                        if n >= r.max_devices {
                            return out;
                        }
                        let id = naming::on_demand_id(&r.type_id, n);
                        n += 1;
                        if !out.contains_key(&id) {
                            break id;
                        }
                    };
                    out.insert(
                        id,
                        Entry {
                            uuid: naming::on_demand_uuid(&r.name, n - 1),
                            gpu: gpu.clone(),
                            numa: numa_of(gpu),
                            healthy: true,
                            made: false,
                        },
                    );
                }
            }
        }
    }
    out
}

fn used_per_gpu(l: &Listing) -> HashMap<&str, u32> {
    let mut used = HashMap::new();
    for e in l.values().filter(|e| e.made) {
        *used.entry(e.gpu.as_str()).or_insert(0) += 1;
    }
    used
}

/// The device plugin API's view of a listing.
pub fn to_devices(l: &Listing) -> Vec<dp::Device> {
    l.iter()
        .map(|(id, e)| dp::Device {
            id: id.clone(),
            health: if e.healthy { "Healthy" } else { "Unhealthy" }.into(),
            topology: (e.numa >= 0).then(|| dp::TopologyInfo {
                nodes: vec![dp::NumaNode {
                    id: i64::from(e.numa),
                }],
            }),
        })
        .collect()
}

/// `GetPreferredAllocation` for one container: the `must` IDs, then the available ones on
/// the GPUs with the most devices made already (pack, vgpud's default placement), made
/// devices before free slots, in ID order.
pub fn preferred(l: &Listing, available: &[String], must: &[String], size: usize) -> Vec<String> {
    let used = used_per_gpu(l);
    let mut out: Vec<String> = must.iter().take(size).cloned().collect();
    let mut rest: Vec<&String> = available.iter().filter(|id| !out.contains(id)).collect();
    rest.sort_by_key(|id| {
        let e = l.get(id.as_str());
        let gpu = e.map(|e| e.gpu.as_str()).unwrap_or("");
        (
            std::cmp::Reverse(used.get(gpu).copied().unwrap_or(0)),
            gpu.to_string(),
            !e.is_some_and(|e| e.made),
            slot_order(id),
        )
    });
    for id in rest {
        if out.len() >= size {
            break;
        }
        out.push(id.clone());
    }
    out
}

/// IDs in numeric order of their trailing number (`x-2` before `x-10`).
fn slot_order(id: &str) -> (u64, String) {
    let n = id
        .rsplit('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX);
    (n, id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(gpu: &str, made: bool) -> Entry {
        Entry {
            uuid: String::new(),
            gpu: gpu.into(),
            numa: 0,
            healthy: true,
            made,
        }
    }

    #[test]
    fn preferred_packs_onto_the_busiest_gpu() {
        let mut l = Listing::new();
        l.insert("t-0".into(), entry("a", true));
        l.insert("t-1".into(), entry("b", true));
        l.insert("t-2".into(), entry("b", true));
        l.insert("t-3".into(), entry("a", false));
        l.insert("t-4".into(), entry("b", false));
        l.insert("t-10".into(), entry("b", false));
        let avail: Vec<String> = ["t-3", "t-10", "t-4"].map(String::from).to_vec();
        assert_eq!(preferred(&l, &avail, &[], 2), ["t-4", "t-10"]);
        assert_eq!(preferred(&l, &avail, &["t-3".into()], 2), ["t-3", "t-4"]);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("nvidia.com/GRID_RTX6000-4Q").is_ok());
        assert!(check_name("GRID_RTX6000-4Q").is_err());
        assert!(check_name("nvidia.com/GRID RTX6000").is_err());
    }
}
