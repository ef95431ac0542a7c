//! Property test of the engine: random sequences of API calls against simulated hosts, in
//! process (`Engine` on `Host::simulated`), with the host's state checked after every step.
//!
//! Calls: create (a random type by id, name or short name, pinned to its GPU, another one or
//! none, a policy, a NUMA node, persistent or not, a UUID or not, vGPU parameters or not),
//! remove, start, stop, modify, set_vf_count, set_heterogeneous, poll, and restarts (the
//! engine dropped and a new one opened on the same tree, then `restore`, as a daemon restart
//! without a reboot). Profiles: `mixed`, `nvidia-l40s`, `nvidia-a40`, one test each.
//!
//! After each step, read from the simulated tree itself (not through vgpud's discovery):
//! - no over-commit: per GPU and type, the active devices never exceed the type's maximum,
//!   `available_instances` is within 0 and the maximum (also with the devices active added),
//!   an NVIDIA GPU outside heterogeneous mode runs one framebuffer size, and no GPU more
//!   framebuffer than it has;
//! - no leaked or phantom device: every mdev in `sys/bus/mdev/devices` and every VF with a
//!   nonzero `current_vgpu_type` is a device the engine lists as active, with its parent, VF
//!   and type, and every device the engine lists as active is on the host; nothing is adopted
//!   (only vgpud touches these hosts); a listed inactive device is persistent;
//! - records match the host: each `var/lib/vgpud/devices/<uuid>.json` is a listed device with
//!   its kind, type, flags, and for an active one the parent or VF the host shows; every
//!   persistent mdev has its mdevctl definition at `etc/mdevctl.d/<parent>/<uuid>` (type and
//!   `start` matching) and no other definition exists; no intent is left open; nothing was set
//!   aside as bad;
//! - each call's result holds what it says (a created device is active with the type and
//!   flags asked, a removed one is gone, …), `GetCapacity` agrees with the create that follows
//!   it (without `numa_node`, which it counts strictly and a create only prefers), a poll
//!   finds no drift, a restart lists the same devices and modes, and its restore neither
//!   fails on nor starts a device that was active (it does start autostart devices that were
//!   stopped: the count is printed);
//! - errors are only the caller's kinds: never `Host`, `Persist` or `Xml` on a healthy
//!   simulated host.
//!
//! Engine bugs it found, all fixed (each seed fails on the engine before its fix):
//! - a GPU defined as a stopped passthrough device was passed through again by another
//!   create, and both then held it (seed 0x766770756470000a, nvidia-l40s);
//! - a heterogeneous mode set without `persistent` was forgotten by a restart while the
//!   driver stayed in it (seed 0x2007, nvidia-l40s);
//! - a GPU recorded in heterogeneous mode read as in it after a restart although disabling
//!   its VFs had ended the mode (seed 0x1007, nvidia-l40s).
//!
//! Environment: `VGPUD_PROPTEST_SEED` (the first case's seed, decimal or 0x hex, or `random`;
//! case i runs seed + i), `VGPUD_PROPTEST_CASES` (cases per profile; by default 16, 14 and 10,
//! 40 in all), `VGPUD_PROPTEST_STEPS` (steps per case, default 60), `VGPUD_PROPTEST_VERBOSE`
//! (print every case's steps with their times). A failure prints the case's seed, the command that replays it and
//! every step so far. `VGPUD_FUZZ_SEEDS=DIR` also collects the host files the cases see
//! (descriptions, creatable types, definitions, records, intents built from the records) as
//! seeds for the fuzz targets (`fuzz/seed-corpus` uses it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vgpud::engine::{CreateRequest, DeviceInfo, Engine, EngineError, ModifyRequest, Policy};
use vgpud::host::Host;
use vgpud::model::DeviceKind;
use vgpud::persist::mdevctl::Definition;
use vgpud::persist::state::DeviceRecord;

const DEFAULT_SEED: u64 = 0x7667_7075_6470_0001;
/// Cases per profile by default: 40 in all, fewer on the A40, whose 32 mdev-parent VFs make
/// each change of its VFs cost a quarter second.
const DEFAULT_CASES: &[(&str, u64)] = &[("mixed", 16), ("nvidia-l40s", 14), ("nvidia-a40", 10)];
const DEFAULT_STEPS: usize = 60;

// ---------------------------------------------------------------------------------------
// The random source: xorshift64*, seeded through splitmix64.

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True with `percent` % chance.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            Some(&items[self.below(items.len())])
        }
    }

    fn uuid(&mut self) -> String {
        let a = self.next();
        let b = self.next();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }
}

// ---------------------------------------------------------------------------------------
// Steps.

#[derive(Debug, Clone)]
enum Step {
    Create {
        req: CreateRequest,
        /// Ask `capacity` first and check the create against it.
        check_capacity: bool,
    },
    Remove(String),
    Start(String),
    Stop(String),
    Modify(String, ModifyRequest),
    SetVfCount {
        pf: String,
        count: u32,
        persistent: bool,
    },
    SetHeterogeneous {
        pf: String,
        enabled: bool,
        persistent: bool,
    },
    Poll,
    Restart,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Create {
                req,
                check_capacity,
            } => {
                write!(f, "create {:?}", req.type_query)?;
                if let Some(p) = &req.parent {
                    write!(f, " parent={p}")?;
                }
                if let Some(u) = &req.uuid {
                    write!(f, " uuid={u}")?;
                }
                if let Some(p) = req.policy {
                    write!(f, " policy={}", p.as_str())?;
                }
                if let Some(n) = req.numa_node {
                    write!(f, " numa_node={n}")?;
                }
                if let Some(p) = &req.params {
                    write!(f, " params={p:?}")?;
                }
                write!(
                    f,
                    " persistent={} autostart={} owner={:?}",
                    req.persistent, req.autostart, req.owner
                )?;
                if *check_capacity {
                    write!(f, " (capacity first)")?;
                }
                Ok(())
            }
            Step::Remove(u) => write!(f, "remove {u}"),
            Step::Start(u) => write!(f, "start {u}"),
            Step::Stop(u) => write!(f, "stop {u}"),
            Step::Modify(u, m) => write!(
                f,
                "modify {u} persistent={:?} autostart={:?}",
                m.persistent, m.autostart
            ),
            Step::SetVfCount {
                pf,
                count,
                persistent,
            } => write!(f, "set_vf_count {pf} {count} persistent={persistent}"),
            Step::SetHeterogeneous {
                pf,
                enabled,
                persistent,
            } => write!(
                f,
                "set_heterogeneous {pf} {enabled} persistent={persistent}"
            ),
            Step::Poll => write!(f, "poll"),
            Step::Restart => write!(f, "restart (new engine on the same tree, then restore)"),
        }
    }
}

/// What a case knows between steps: the UUIDs seen, in the order first seen (so that a
/// replay picks the same devices although UUIDs made by the engine are random).
#[derive(Default)]
struct World {
    uuids: Vec<String>,
}

impl World {
    fn learn(&mut self, engine: &Engine) {
        let mut new: Vec<String> = engine
            .list_devices()
            .into_iter()
            .map(|d| d.uuid)
            .filter(|u| !self.uuids.contains(u))
            .collect();
        new.sort();
        self.uuids.extend(new);
    }

    fn some_uuid(&self, rng: &mut Rng) -> String {
        match rng.pick(&self.uuids) {
            Some(u) if !rng.chance(8) => u.clone(),
            _ => rng.uuid(),
        }
    }
}

/// The physical GPUs with SR-IOV: address and `sriov_totalvfs`.
fn sriov_gpus(engine: &Engine) -> Vec<(String, u32)> {
    engine
        .list_gpus()
        .into_iter()
        .filter(|g| g.is_physical())
        .filter_map(|g| g.sriov.map(|s| (g.address, s.total_vfs)))
        .filter(|(_, total)| *total > 0)
        .collect()
}

fn choose(rng: &mut Rng, engine: &Engine, world: &World, profile: &str) -> Step {
    let pfs = sriov_gpus(engine);
    loop {
        let roll = rng.below(100);
        return match roll {
            0..=41 => create_step(rng, engine, world),
            42..=53 => Step::Remove(world.some_uuid(rng)),
            54..=61 => Step::Start(world.some_uuid(rng)),
            62..=69 => Step::Stop(world.some_uuid(rng)),
            70..=77 => {
                let persistent = [None, Some(true), Some(false)][rng.below(3)];
                let autostart = [None, Some(true), Some(false)][rng.below(3)];
                Step::Modify(
                    world.some_uuid(rng),
                    ModifyRequest {
                        persistent,
                        autostart,
                    },
                )
            }
            // Rarer than the others: on the A40 each change of its VFs takes a quarter
            // second (32 mdev parents come and go).
            78..=82 => {
                let Some((pf, total)) = rng.pick(&pfs).cloned() else {
                    continue;
                };
                let count = match rng.below(10) {
                    0..=4 => total,
                    5..=8 => 0,
                    _ => rng.below(total as usize + 2) as u32,
                };
                Step::SetVfCount {
                    pf,
                    count,
                    persistent: rng.chance(70),
                }
            }
            83..=88 => {
                if profile != "nvidia-l40s" && !rng.chance(20) {
                    continue;
                }
                // Mostly a GPU that runs no vGPU, the only kind whose mode changes.
                let idle: Vec<(String, u32)> = pfs
                    .iter()
                    .filter(|(pf, _)| engine.devices_of(pf).iter().all(|d| !d.active))
                    .cloned()
                    .collect();
                let from = if idle.is_empty() || rng.chance(25) {
                    &pfs
                } else {
                    &idle
                };
                let Some((pf, _)) = rng.pick(from).cloned() else {
                    continue;
                };
                Step::SetHeterogeneous {
                    pf,
                    enabled: rng.chance(60),
                    persistent: rng.chance(70),
                }
            }
            89..=94 => Step::Poll,
            _ => Step::Restart,
        };
    }
}

fn create_step(rng: &mut Rng, engine: &Engine, world: &World) -> Step {
    let gpus = engine.list_gpus();
    // Half the time a type the inventory last saw room for, so that GPUs fill up.
    let open_only = rng.chance(50);
    let offers: Vec<(String, String, String, String)> = gpus
        .iter()
        .flat_map(|g| {
            g.types
                .iter()
                .filter(move |t| !open_only || t.available_instances > 0)
                .map(move |t| {
                    (
                        g.address.clone(),
                        t.id.clone(),
                        t.name.clone(),
                        t.short_name().to_string(),
                    )
                })
        })
        .collect();
    let mut req = CreateRequest {
        owner: format!("vm-{}", rng.below(8)),
        ..CreateRequest::default()
    };
    let pinned_gpu = match rng.pick(&offers) {
        Some((gpu, id, name, short)) if !rng.chance(6) => {
            req.type_query = match rng.below(10) {
                0..=5 => id.clone(),
                6..=7 => short.clone(),
                8 => name.to_ascii_lowercase(),
                _ => short.to_ascii_uppercase(),
            };
            Some(gpu.clone())
        }
        _ if rng.chance(50) => {
            req.type_query = "passthrough".into();
            None
        }
        _ => {
            req.type_query = "no-such-type-4Q".into();
            None
        }
    };
    req.parent = match rng.below(10) {
        0..=3 => pinned_gpu.or_else(|| rng.pick(&gpus).map(|g| g.address.clone())),
        4 => rng.pick(&gpus).map(|g| g.address.clone()),
        5 if rng.chance(20) => Some("0000:ff:1f.7".into()),
        _ => None,
    };
    req.policy = [None, Some(Policy::Pack), Some(Policy::Spread)][rng.below(3)];
    if rng.chance(20) {
        req.numa_node = Some(rng.below(2) as u32);
    }
    req.persistent = rng.chance(60);
    req.autostart = req.persistent && rng.chance(70);
    if rng.chance(3) {
        // Refused: autostart needs persistent.
        req.persistent = false;
        req.autostart = true;
    }
    req.uuid = match rng.below(100) {
        0..=39 => Some(rng.uuid()),
        40..=44 => rng.pick(&world.uuids).cloned(),
        _ => None,
    };
    req.params = match rng.below(100) {
        0..=11 => Some("frame_rate_limiter=0".into()),
        12..=16 => Some(format!("vgpu-placement-id={}", rng.below(16))),
        _ => None,
    };
    Step::Create {
        check_capacity: rng.chance(50),
        req,
    }
}

// ---------------------------------------------------------------------------------------
// The host as the simulated tree shows it, read without vgpud's discovery.

fn link_name(path: &Path) -> Option<String> {
    fs::read_link(path)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// A removed file kept for reuse (`persist::retire`): expected, and empty.
fn spare(path: &Path, problems: &mut Vec<String>) -> bool {
    let is_spare = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(".spare.vgpud-tmp-"));
    if is_spare && fs::metadata(path).map_or(0, |m| m.len()) != 0 {
        problems.push(format!(
            "a spare file that is not empty: {}",
            path.display()
        ));
    }
    is_spare
}

fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct HostMdev {
    uuid: String,
    parent: String,
    type_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct HostVgpu {
    vf: String,
    pf: String,
    type_id: String,
}

struct HostView {
    root: PathBuf,
    mdevs: Vec<HostMdev>,
    vgpus: Vec<HostVgpu>,
}

impl HostView {
    fn read(root: &Path) -> Result<Self, String> {
        let sys = root.join("sys");
        let mut mdevs = Vec::new();
        let bus = sys.join("bus/mdev/devices");
        for uuid in names(&bus) {
            let link = bus.join(&uuid);
            let target = fs::read_link(&link).map_err(|e| format!("{}: {e}", link.display()))?;
            let parent = target
                .parent()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| {
                    format!("{} -> {} names no parent", link.display(), target.display())
                })?;
            if !link.is_dir() {
                return Err(format!("{} is a dangling link", link.display()));
            }
            let type_id = link_name(&link.join("mdev_type"))
                .ok_or_else(|| format!("mdev {uuid} has no mdev_type link"))?;
            mdevs.push(HostMdev {
                uuid,
                parent,
                type_id,
            });
        }
        let mut vgpus = Vec::new();
        let pci = sys.join("bus/pci/devices");
        for vf in names(&pci) {
            let Some(current) = read_trim(&pci.join(&vf).join("nvidia/current_vgpu_type")) else {
                continue;
            };
            let n: u32 = current
                .parse()
                .map_err(|_| format!("{vf}: current_vgpu_type {current:?}"))?;
            if n == 0 {
                continue;
            }
            let pf = link_name(&pci.join(&vf).join("physfn"))
                .ok_or_else(|| format!("VF {vf} with a vGPU has no physfn"))?;
            vgpus.push(HostVgpu {
                vf,
                pf,
                type_id: format!("nvidia-{n}"),
            });
        }
        Ok(HostView {
            root: root.to_path_buf(),
            mdevs,
            vgpus,
        })
    }

    /// The physical GPU of a device name: its `physfn`, else itself.
    fn gpu_of(&self, dev: &str) -> String {
        link_name(
            &self
                .root
                .join("sys/bus/pci/devices")
                .join(dev)
                .join("physfn"),
        )
        .unwrap_or_else(|| dev.to_string())
    }

    /// `driver` of a PCI function.
    fn driver(&self, address: &str) -> Option<String> {
        link_name(
            &self
                .root
                .join("sys/bus/pci/devices")
                .join(address)
                .join("driver"),
        )
    }
}

// ---------------------------------------------------------------------------------------
// Invariants.

/// Checks every invariant; `full` also reads every type's `available_instances` (the
/// engine's live view and each type directory on the host), which costs tens of
/// milliseconds on a GPU with 32 mdev-parent VFs.
fn check_invariants(engine: &Engine, root: &Path, full: bool) -> Result<(), String> {
    let host = HostView::read(root)?;
    let devices: BTreeMap<String, DeviceInfo> = engine
        .list_devices()
        .into_iter()
        .map(|d| (d.uuid.clone(), d))
        .collect();
    let mut problems = Vec::new();
    check_capacity_rules(engine, &host, full, &mut problems);
    check_no_leaks(&host, &devices, &mut problems);
    check_files(root, &host, &devices, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The most devices of type `t` one GPU holds, from hardware facts rather than the engine's
/// inventory: NVIDIA types from the catalog transcribed from NVIDIA's tables (by type id), other
/// vendors from the `max_instance=` of the type's description as the test reads it in the tree;
/// the engine's figure only where neither says (GVT-g, whose description has none).
fn hardware_max(root: &Path, gpu: &str, t: &vgpud::model::MdevType) -> u32 {
    if let Some(info) =
        t.id.strip_prefix("nvidia-")
            .and_then(|n| n.parse().ok())
            .and_then(vgpud_catalog::nvidia_type_by_id)
    {
        return info.max_instances;
    }
    let description = root
        .join("sys/class/mdev_bus")
        .join(gpu)
        .join("mdev_supported_types")
        .join(&t.id)
        .join("description");
    read_trim(&description)
        .and_then(|d| {
            d.split(',')
                .find_map(|kv| kv.trim().strip_prefix("max_instance=")?.parse().ok())
        })
        .unwrap_or_else(|| t.max_instances())
}

fn check_capacity_rules(engine: &Engine, host: &HostView, full: bool, problems: &mut Vec<String>) {
    // Active devices on the host by physical GPU and type.
    let mut active: BTreeMap<String, BTreeMap<String, u32>> = BTreeMap::new();
    for m in &host.mdevs {
        *active
            .entry(host.gpu_of(&m.parent))
            .or_default()
            .entry(m.type_id.clone())
            .or_default() += 1;
    }
    for v in &host.vgpus {
        *active
            .entry(v.pf.clone())
            .or_default()
            .entry(v.type_id.clone())
            .or_default() += 1;
    }
    for gpu in engine.list_gpus().into_iter().filter(|g| g.is_physical()) {
        // Maxima and sizes are the same in the engine's inventory; what is available now
        // only in a live look.
        let types = if full {
            match engine.live_types(&gpu.address) {
                Ok(t) => t,
                Err(e) => {
                    problems.push(format!("live_types({}) fails: {e:?}", gpu.address));
                    continue;
                }
            }
        } else {
            gpu.types.clone()
        };
        let here = active.remove(&gpu.address).unwrap_or_default();
        let by_id: BTreeMap<&str, &vgpud::model::MdevType> =
            types.iter().map(|t| (t.id.as_str(), t)).collect();
        let max_of = |t: &vgpud::model::MdevType| hardware_max(&host.root, &gpu.address, t);
        let total_fb = types
            .iter()
            .map(|t| t.framebuffer_bytes() * u64::from(max_of(t)))
            .max()
            .unwrap_or(0);
        let mut sizes = BTreeSet::new();
        let mut fb_used = 0u64;
        for (type_id, count) in &here {
            let Some(t) = by_id.get(type_id.as_str()) else {
                // mtty and GVT-g list every type; an NVIDIA device of a type its GPU does
                // not offer is a violation.
                if gpu.vendor_id == 0x10de {
                    problems.push(format!(
                        "{}: {count} active {type_id}, a type the GPU does not list",
                        gpu.address
                    ));
                }
                continue;
            };
            let max = max_of(t);
            if max > 0 && *count > max {
                problems.push(format!(
                    "over-commit: {} runs {count} {type_id} ({}), at most {max}",
                    gpu.address, t.name
                ));
            }
            if t.framebuffer_bytes() > 0 {
                sizes.insert(t.framebuffer_bytes());
                fb_used += t.framebuffer_bytes() * u64::from(*count);
            }
        }
        for t in types.iter().filter(|_| full) {
            let max = max_of(t);
            let running = here.get(&t.id).copied().unwrap_or(0);
            if max > 0 && t.available_instances + running > max {
                problems.push(format!(
                    "{} {} ({}): {} available with {running} running, at most {max}",
                    gpu.address, t.id, t.name, t.available_instances
                ));
            }
        }
        if gpu.vendor_id == 0x10de && !engine.is_heterogeneous(&gpu.address) && sizes.len() > 1 {
            problems.push(format!(
                "{} is not in heterogeneous mode but runs framebuffer sizes {sizes:?} ({here:?})",
                gpu.address
            ));
        }
        if total_fb > 0 && fb_used > total_fb {
            problems.push(format!(
                "{} runs {fb_used} bytes of framebuffer, more than its {total_fb} ({here:?})",
                gpu.address
            ));
        }
    }
    for (gpu, types) in active {
        problems.push(format!(
            "devices {types:?} on {gpu}, which the engine does not list as a GPU"
        ));
    }
    if !full {
        return;
    }
    // Every type directory of every mdev parent (VFs included).
    let bus = host.root.join("sys/class/mdev_bus");
    for parent in names(&bus) {
        let types_dir = bus.join(&parent).join("mdev_supported_types");
        for type_id in names(&types_dir) {
            let dir = types_dir.join(&type_id);
            let Some(text) = read_trim(&dir.join("available_instances")) else {
                continue;
            };
            let available: i64 = match text.parse() {
                Ok(n) => n,
                Err(_) => {
                    problems.push(format!("{parent} {type_id}: available_instances {text:?}"));
                    continue;
                }
            };
            let max = read_trim(&dir.join("description")).and_then(|d| {
                d.split(',')
                    .find_map(|kv| kv.trim().strip_prefix("max_instance=")?.parse::<i64>().ok())
            });
            let running = names(&dir.join("devices")).len() as i64;
            if available < 0 {
                problems.push(format!(
                    "{parent} {type_id}: available_instances {available}"
                ));
            }
            if let Some(max) = max {
                if available + running > max {
                    problems.push(format!(
                        "{parent} {type_id}: {available} available with {running} running, at most {max}"
                    ));
                }
            }
        }
    }
}

fn check_no_leaks(
    host: &HostView,
    devices: &BTreeMap<String, DeviceInfo>,
    problems: &mut Vec<String>,
) {
    for m in &host.mdevs {
        match devices.get(&m.uuid) {
            Some(d) if d.active && d.kind == DeviceKind::Mdev => {
                if d.parent != m.parent || d.type_id != m.type_id {
                    problems.push(format!(
                        "mdev {} is {} on {} on the host, the engine says {} on {}",
                        m.uuid, m.type_id, m.parent, d.type_id, d.parent
                    ));
                }
            }
            other => problems.push(format!(
                "leaked mdev: {} ({} on {}) is on the host, the engine lists {other:?}",
                m.uuid, m.type_id, m.parent
            )),
        }
    }
    for v in &host.vgpus {
        let holders: Vec<&DeviceInfo> = devices
            .values()
            .filter(|d| d.active && d.address.as_deref() == Some(v.vf.as_str()))
            .collect();
        match holders.as_slice() {
            [d] if d.kind == DeviceKind::SriovVgpu
                && d.type_id == v.type_id
                && d.parent == v.pf => {}
            _ => problems.push(format!(
                "leaked vGPU: VF {} of {} runs {}, the engine lists {holders:?} on it",
                v.vf, v.pf, v.type_id
            )),
        }
    }
    // A PCI function (a VF, a GPU passed through) belongs to one active device at a time.
    let mut holders: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for d in devices.values().filter(|d| d.active) {
        if let Some(a) = d.address.as_deref() {
            holders.entry(a).or_default().push(&d.uuid);
        }
    }
    for (address, uuids) in holders.iter().filter(|(_, u)| u.len() > 1) {
        problems.push(format!(
            "{address} is held by {} active devices: {uuids:?}",
            uuids.len()
        ));
    }
    for d in devices.values() {
        if d.created == 0 {
            problems.push(format!(
                "{} was adopted (created 0): vgpud lost track of its own device: {d:?}",
                d.uuid
            ));
        }
        if !d.active && !d.persistent {
            problems.push(format!(
                "{} is listed inactive and not persistent: {d:?}",
                d.uuid
            ));
        }
        if !d.active {
            continue;
        }
        let on_host = match d.kind {
            DeviceKind::Mdev => host.mdevs.iter().any(|m| m.uuid == d.uuid),
            DeviceKind::SriovVgpu => host
                .vgpus
                .iter()
                .any(|v| Some(v.vf.as_str()) == d.address.as_deref() && v.type_id == d.type_id),
            DeviceKind::Passthrough => d
                .address
                .as_deref()
                .is_some_and(|a| host.driver(a).as_deref() == Some("vfio-pci")),
        };
        if !on_host {
            problems.push(format!(
                "phantom device: the engine lists {d:?} active, the host has no such device"
            ));
        }
    }
}

fn check_files(
    root: &Path,
    host: &HostView,
    devices: &BTreeMap<String, DeviceInfo>,
    problems: &mut Vec<String>,
) {
    let state = root.join("var/lib/vgpud");
    let mut recorded = BTreeSet::new();
    for name in names(&state.join("devices")) {
        let path = state.join("devices").join(&name);
        if spare(&path, problems) {
            continue;
        }
        let Some(uuid) = name.strip_suffix(".json") else {
            problems.push(format!("unexpected file {}", path.display()));
            continue;
        };
        let record: DeviceRecord = match fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        recorded.insert(uuid.to_string());
        let Some(d) = devices.get(uuid) else {
            problems.push(format!(
                "record of a device the engine does not list: {record:?}"
            ));
            continue;
        };
        let kind: DeviceKind = record.kind.into();
        if record.uuid != uuid
            || kind != d.kind
            || record.type_id != d.type_id
            || record.persistent != d.persistent
            || record.autostart != d.autostart
        {
            problems.push(format!(
                "record {record:?} disagrees with the engine's {d:?}"
            ));
        }
        if !d.active {
            continue;
        }
        match kind {
            DeviceKind::Mdev => {
                if let Some(m) = host.mdevs.iter().find(|m| m.uuid == uuid) {
                    if m.parent != record.parent || m.type_id != record.type_id {
                        problems.push(format!("record {record:?}, the host has {m:?}"));
                    }
                }
            }
            DeviceKind::SriovVgpu => {
                let vf = record.address.as_deref().unwrap_or("(none)");
                match host.vgpus.iter().find(|v| v.vf == vf) {
                    Some(v) if v.type_id == record.type_id && v.pf == record.parent => {}
                    other => problems.push(format!(
                        "record {record:?} names VF {vf}, the host has {other:?} there"
                    )),
                }
            }
            DeviceKind::Passthrough => {}
        }
    }
    for d in devices.values() {
        if !recorded.contains(&d.uuid) {
            problems.push(format!(
                "{} has no record in var/lib/vgpud/devices: {d:?}",
                d.uuid
            ));
        }
    }
    // mdevctl definitions: exactly the persistent mdevs.
    let defs = root.join("etc/mdevctl.d");
    let mut defined = BTreeSet::new();
    for parent in names(&defs) {
        for name in names(&defs.join(&parent)) {
            let path = defs.join(&parent).join(&name);
            if spare(&path, problems) {
                continue;
            }
            let text = fs::read_to_string(&path).unwrap_or_default();
            match Definition::parse(&parent, &name, &text, &path) {
                Ok(def) => {
                    defined.insert(name.clone());
                    match devices.get(&name) {
                        Some(d)
                            if d.kind == DeviceKind::Mdev
                                && d.persistent
                                && d.parent == parent
                                && d.type_id == def.mdev_type
                                && d.autostart == def.autostart => {}
                        other => problems.push(format!(
                            "definition {} ({} start {}) for {other:?}",
                            path.display(),
                            def.mdev_type,
                            if def.autostart { "auto" } else { "manual" }
                        )),
                    }
                }
                Err(e) => problems.push(format!("bad definition: {e}")),
            }
        }
    }
    for d in devices.values() {
        if d.kind == DeviceKind::Mdev && d.persistent && !defined.contains(&d.uuid) {
            problems.push(format!(
                "persistent mdev {} has no definition at etc/mdevctl.d/{}/{}",
                d.uuid, d.parent, d.uuid
            ));
        }
    }
    let intents = names(&state.join("intents"));
    if !intents.is_empty() {
        problems.push(format!("intents left open: {intents:?}"));
    }
    let open = vgpud::persist::journal::of(&vgpud::host::Host::new(root)).open_intents();
    if !open.is_empty() {
        problems.push(format!("intents left open in the journal: {open:?}"));
    }
    for dir in [
        state.join("devices"),
        state.join("sriov"),
        state.join("intents"),
    ] {
        for name in names(&dir) {
            if name.ends_with(".bad") {
                problems.push(format!("set aside as bad: {}", dir.join(name).display()));
            }
        }
    }
    for parent in names(&defs) {
        for name in names(&defs.join(&parent)) {
            if name.ends_with(".bad") {
                problems.push(format!("set aside as bad: etc/mdevctl.d/{parent}/{name}"));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Running steps.

/// Errors a healthy simulated host never gives: the host or vgpud's files failing.
fn unexpected(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Host { .. } | EngineError::Persist { .. } | EngineError::Xml { .. }
    )
}

fn outcome<T>(r: &Result<T, EngineError>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => {
            let kind = format!("{e:?}");
            let kind = kind
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or("?")
                .to_string();
            let text = e.to_string();
            let short: String = text.chars().take(140).collect();
            format!("{kind}: {short}")
        }
    }
}

/// What a restart must keep of a device.
#[derive(Debug, PartialEq, Eq)]
struct Kept {
    uuid: String,
    parent: String,
    type_id: String,
    owner: String,
    active: bool,
    persistent: bool,
    autostart: bool,
    kind: DeviceKind,
    address: Option<String>,
}

fn summary(d: &DeviceInfo) -> Kept {
    Kept {
        uuid: d.uuid.clone(),
        parent: d.parent.clone(),
        type_id: d.type_id.clone(),
        owner: d.owner.clone(),
        active: d.active,
        persistent: d.persistent,
        autostart: d.autostart,
        kind: d.kind,
        address: d.address.clone(),
    }
}

struct Case {
    root: PathBuf,
    engine: Option<Engine>,
    /// Stopped autostart devices that a restart's restore started again.
    restarted_stopped: usize,
}

impl Case {
    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("an engine")
    }

    /// Runs one step; returns its outcome for the log, or a violation.
    fn run(&mut self, step: &Step) -> Result<String, String> {
        let engine = self.engine();
        let unexpected_err = |what: &str, e: &EngineError| {
            if unexpected(e) {
                Err(format!(
                    "{what} failed with an error a healthy host never gives: {e:?}"
                ))
            } else {
                Ok(())
            }
        };
        match step {
            Step::Create {
                req,
                check_capacity,
            } => {
                let capacity = check_capacity.then(|| engine.capacity(req));
                if let Some(Err(e)) = &capacity {
                    unexpected_err("capacity", e)?;
                }
                let r = engine.create_device(req);
                let text = outcome(&r);
                match &r {
                    Ok(d) => {
                        let uuid_ok = req.uuid.as_ref().is_none_or(|u| *u == d.uuid);
                        let pin_ok = req.parent.as_ref().is_none_or(|p| {
                            *p == d.parent || engine.gpu_of_parent(&d.parent) == *p
                        });
                        if !d.active
                            || !uuid_ok
                            || !pin_ok
                            || d.persistent != req.persistent
                            || d.autostart != req.autostart
                        {
                            return Err(format!("create gave {d:?}"));
                        }
                        if engine.device(&d.uuid).as_ref() != Some(d) {
                            return Err(format!(
                                "create returned {d:?}, the engine then lists {:?}",
                                engine.device(&d.uuid)
                            ));
                        }
                    }
                    Err(e) => unexpected_err("create", e)?,
                }
                if req.params.is_none() {
                    match (&capacity, &r) {
                        // With numa_node, capacity counts that node's GPUs; a create
                        // only prefers them.
                        (Some(Ok(0)), Ok(d)) if req.numa_node.is_none() => {
                            return Err(format!("capacity said 0, the create then made {d:?}"))
                        }
                        (Some(Ok(n)), Err(EngineError::NoCapacity { .. })) if *n > 0 => {
                            return Err(format!(
                                "capacity said {n}, the create then found no room: {text}"
                            ))
                        }
                        _ => {}
                    }
                }
                Ok(match capacity {
                    Some(c) => format!(
                        "{text} (capacity {})",
                        outcome(&c).replace("ok", &format!("{:?}", c.ok()))
                    ),
                    None => text,
                })
            }
            Step::Remove(uuid) => {
                let r = engine.remove_device(uuid);
                match &r {
                    Ok(_) if engine.device(uuid).is_some() => {
                        return Err(format!("removed, still listed: {:?}", engine.device(uuid)))
                    }
                    Err(e) => unexpected_err("remove", e)?,
                    Ok(_) => {}
                }
                Ok(outcome(&r))
            }
            Step::Start(uuid) => {
                let r = engine.start_device(uuid);
                match &r {
                    Ok(d) if !d.active || !engine.device(uuid).is_some_and(|d| d.active) => {
                        return Err(format!("started, not active: {d:?}"))
                    }
                    Err(e) => unexpected_err("start", e)?,
                    Ok(_) => {}
                }
                Ok(outcome(&r))
            }
            Step::Stop(uuid) => {
                let before = engine.device(uuid);
                let r = engine.stop_device(uuid);
                match &r {
                    Ok(_) => {
                        let after = engine.device(uuid);
                        let persistent = before.as_ref().is_some_and(|d| d.persistent);
                        let ok = match &after {
                            Some(d) => persistent && !d.active,
                            None => !persistent,
                        };
                        if !ok {
                            return Err(format!("stopped {before:?}, now {after:?}"));
                        }
                    }
                    Err(e) => unexpected_err("stop", e)?,
                }
                Ok(outcome(&r))
            }
            Step::Modify(uuid, m) => {
                let r = engine.modify_device(uuid, m);
                match &r {
                    Ok(d) => {
                        let listed = engine.device(uuid);
                        let persistent_ok = m.persistent.is_none_or(|p| p == d.persistent);
                        let autostart_ok = m
                            .autostart
                            .is_none_or(|a| a == d.autostart || !d.persistent);
                        if !persistent_ok || !autostart_ok || (!d.persistent && d.autostart) {
                            return Err(format!("modify gave {d:?}"));
                        }
                        match &listed {
                            Some(l) if l == d => {}
                            None if !d.active && !d.persistent => {}
                            _ => {
                                return Err(format!(
                                    "modify returned {d:?}, the engine then lists {listed:?}"
                                ))
                            }
                        }
                    }
                    Err(e) => unexpected_err("modify", e)?,
                }
                Ok(outcome(&r))
            }
            Step::SetVfCount {
                pf,
                count,
                persistent,
            } => {
                let r = engine.set_vf_count(pf, *count, *persistent);
                match &r {
                    Ok(n) => {
                        let numvfs = read_trim(
                            &self
                                .root
                                .join("sys/bus/pci/devices")
                                .join(pf)
                                .join("sriov_numvfs"),
                        );
                        if numvfs.as_deref() != Some(n.to_string().as_str()) {
                            return Err(format!(
                                "set_vf_count says {n}, sriov_numvfs reads {numvfs:?}"
                            ));
                        }
                    }
                    Err(e) => unexpected_err("set_vf_count", e)?,
                }
                Ok(match &r {
                    Ok(n) => format!("ok: {n} VFs"),
                    Err(_) => outcome(&r),
                })
            }
            Step::SetHeterogeneous {
                pf,
                enabled,
                persistent,
            } => {
                let r = engine.set_heterogeneous(pf, *enabled, *persistent);
                match &r {
                    Ok(()) if engine.is_heterogeneous(pf) != *enabled => {
                        return Err("set_heterogeneous: the mode did not change".into())
                    }
                    Err(e) => unexpected_err("set_heterogeneous", e)?,
                    Ok(()) => {}
                }
                Ok(outcome(&r))
            }
            Step::Poll => {
                let r = engine.poll();
                match &r {
                    Ok(c) => {
                        if !c.drift.is_empty() || !c.added.is_empty() || !c.removed.is_empty() {
                            return Err(format!(
                                "a poll of a host only vgpud touches found changes: {c:?}"
                            ));
                        }
                    }
                    Err(e) => {
                        unexpected_err("poll", e)?;
                        return Err(format!("poll failed: {e:?}"));
                    }
                }
                Ok(outcome(&r))
            }
            Step::Restart => {
                let before: Vec<_> = engine.list_devices().iter().map(summary).collect();
                let heterogeneous: Vec<(String, bool)> = engine
                    .list_gpus()
                    .into_iter()
                    .map(|g| {
                        let h = engine.is_heterogeneous(&g.address);
                        (g.address, h)
                    })
                    .collect();
                self.engine = None;
                let engine = Engine::new(Host::simulated(&self.root))
                    .map_err(|e| format!("the engine does not open again: {e:?}"))?;
                let after: Vec<_> = engine.list_devices().iter().map(summary).collect();
                if before != after {
                    return Err(format!(
                        "a restart changed the devices:\nbefore {before:#?}\nafter {after:#?}"
                    ));
                }
                for (gpu, h) in heterogeneous {
                    if engine.is_heterogeneous(&gpu) != h {
                        return Err(format!(
                            "a restart changed the heterogeneous mode of {gpu} (was {h})"
                        ));
                    }
                }
                // The daemon restores at every start, so an autostart device stopped with
                // StopDevice is started again (and may fail to find room); one that was
                // active must be left alone.
                let report = engine.restore(Duration::ZERO);
                self.engine = Some(engine);
                let was_active = |u: &str| before.iter().any(|k| k.uuid == u && k.active);
                if let Some((uuid, why)) = report.failed.iter().find(|(u, _)| was_active(u)) {
                    return Err(format!(
                        "the restore after a restart failed on active device {uuid}: {why}"
                    ));
                }
                if let Some(u) = report.started.iter().find(|u| was_active(u)) {
                    return Err(format!("the restore started {u}, which was active"));
                }
                self.restarted_stopped += report.started.len();
                Ok(format!(
                    "ok: restore started {:?}, failed {:?}",
                    report.started, report.failed
                ))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Seeds for the fuzz targets.

fn harvest(root: &Path, out: &Path) {
    fn put(out: &Path, target: &str, text: &str) {
        if text.is_empty() || text.len() > 16 * 1024 {
            return;
        }
        // FNV-1a: a stable name, so the same content is one file.
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let dir = out.join(target);
        let _ = fs::create_dir_all(&dir);
        let _ = fs::write(dir.join(format!("{hash:016x}")), text);
    }
    let bus = root.join("sys/class/mdev_bus");
    for parent in names(&bus) {
        let types = bus.join(&parent).join("mdev_supported_types");
        for t in names(&types) {
            if let Ok(d) = fs::read_to_string(types.join(&t).join("description")) {
                put(out, "description", &d);
            }
        }
    }
    let pci = root.join("sys/bus/pci/devices");
    for dev in names(&pci) {
        if let Ok(c) = fs::read_to_string(pci.join(&dev).join("nvidia/creatable_vgpu_types")) {
            put(out, "creatable", &c);
        }
    }
    let defs = root.join("etc/mdevctl.d");
    for parent in names(&defs) {
        for name in names(&defs.join(&parent)) {
            if let Ok(t) = fs::read_to_string(defs.join(&parent).join(&name)) {
                put(out, "mdevctl", &t);
            }
        }
    }
    let state = root.join("var/lib/vgpud");
    for dir in ["devices", "sriov"] {
        for name in names(&state.join(dir)) {
            if let Ok(t) = fs::read_to_string(state.join(dir).join(&name)) {
                put(out, "record", &t);
                if let Ok(r) = serde_json::from_str::<DeviceRecord>(&t) {
                    for text in intents_of(&r) {
                        put(out, "intent", &text);
                    }
                }
            }
        }
    }
    if let Ok(c) = fs::read_to_string(root.join("proc/cmdline")) {
        put(out, "fbcon_cmdline", &c);
    }
}

/// The intents the engine would open for a recorded device, one of each operation.
fn intents_of(r: &DeviceRecord) -> Vec<String> {
    use vgpud::persist::intent::{Intent, Operation, VERSION};
    let address = r.address.clone().unwrap_or_else(|| r.parent.clone());
    let ops = vec![
        Operation::Create {
            parent: Some(r.parent.clone()),
            type_id: Some(r.type_id.clone()),
            owner: r.owner.clone(),
            params: r.params.clone(),
            persistent: r.persistent,
            autostart: r.autostart,
        },
        Operation::Create {
            parent: None,
            type_id: None,
            owner: r.owner.clone(),
            params: None,
            persistent: false,
            autostart: false,
        },
        Operation::Remove {
            parent: r.parent.clone(),
        },
        Operation::Start {
            parent: r.parent.clone(),
        },
        Operation::Stop {
            parent: r.parent.clone(),
        },
        Operation::Assign {
            kind: r.kind,
            parent: r.parent.clone(),
            address: address.clone(),
            type_id: r.type_id.clone(),
            functions: r.functions.clone(),
            owner: r.owner.clone(),
            params: r.params.clone(),
            persistent: r.persistent,
            autostart: r.autostart,
            created: r.created,
            new: true,
        },
        Operation::Release {
            kind: r.kind,
            parent: r.parent.clone(),
            address,
            type_id: r.type_id.clone(),
            functions: r.functions.clone(),
            keep: r.persistent,
        },
        Operation::Modify {
            parent: r.parent.clone(),
            persistent: !r.persistent,
            autostart: false,
        },
    ];
    ops.into_iter()
        .filter_map(|operation| {
            serde_json::to_string(&Intent {
                version: VERSION,
                uuid: r.uuid.clone(),
                started: r.created,
                operation,
            })
            .ok()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The driver.

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

fn base_seed() -> u64 {
    match std::env::var("VGPUD_PROPTEST_SEED").as_deref() {
        Ok("random") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        Ok(_) => env_u64("VGPUD_PROPTEST_SEED").unwrap_or(DEFAULT_SEED),
        Err(_) => DEFAULT_SEED,
    }
}

/// A directory for a case's tree: in memory when the machine has `/dev/shm` (the simulated
/// sysfs is in memory on a real host too), else the default temporary directory.
fn case_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new()
            .prefix("vgpud-prop")
            .tempdir_in(shm)
        {
            return d;
        }
    }
    tempfile::tempdir().expect("tempdir")
}

fn profile_hash(profile: &str) -> u64 {
    profile.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Runs one case; returns how many stopped devices restarts started again, or on a
/// violation the report to print.
fn run_case(profile: &str, seed: u64, steps: usize, test: &str) -> Result<usize, String> {
    let dir = case_dir();
    let root = dir.path().to_path_buf();
    vgpud_sim::write_profile(profile, &root).expect("profile");
    let engine = Engine::new(Host::simulated(&root)).expect("engine");
    let mut case = Case {
        root: root.clone(),
        engine: Some(engine),
        restarted_stopped: 0,
    };
    let mut rng = Rng::new(seed ^ profile_hash(profile));
    let mut world = World::default();
    let mut log: Vec<String> = Vec::new();
    let seeds_dir = std::env::var_os("VGPUD_FUZZ_SEEDS").map(PathBuf::from);
    let verbose = std::env::var_os("VGPUD_PROPTEST_VERBOSE").is_some();
    let fail = |log: &[String], step: usize, what: &str| -> String {
        format!(
            "engine_properties: invariant violated on profile {profile}, seed {seed:#x}, step {step}:\n  {what}\n\
             replay: VGPUD_PROPTEST_SEED={seed:#x} VGPUD_PROPTEST_CASES=1 VGPUD_PROPTEST_STEPS={} \
             cargo test --test engine_properties {test}\nsteps:\n{}",
            step + 1,
            log.join("\n")
        )
    };
    if let Err(e) = check_invariants(case.engine(), &root, true) {
        return Err(fail(&log, 0, &format!("before any step: {e}")));
    }
    for i in 0..steps {
        world.learn(case.engine());
        let step = choose(&mut rng, case.engine(), &world, profile);
        let t0 = Instant::now();
        let result = case.run(&step);
        let t1 = Instant::now();
        let text = match &result {
            Ok(o) => o.clone(),
            Err(e) => format!("VIOLATION: {e}"),
        };
        log.push(format!("  {i:3}. {step} -> {text}"));
        if let Err(e) = &result {
            return Err(fail(&log, i, e));
        }
        // The full check after every change and every 8th step; the rest after each.
        let changed = result.as_ref().is_ok_and(|o| o.starts_with("ok"))
            && !matches!(step, Step::Poll | Step::Modify(..));
        if let Err(e) = check_invariants(
            case.engine(),
            &root,
            changed || i % 8 == 7 || i + 1 == steps,
        ) {
            return Err(fail(&log, i, &e));
        }
        if verbose {
            let (run, check) = (t1 - t0, t1.elapsed());
            if let Some(last) = log.last_mut() {
                last.push_str(&format!(
                    " [{} ms, check {} ms]",
                    run.as_millis(),
                    check.as_millis()
                ));
            }
        }
        if let Some(out) = &seeds_dir {
            harvest(&root, out);
        }
    }
    if verbose {
        eprintln!("profile {profile}, seed {seed:#x}:\n{}", log.join("\n"));
    }
    Ok(case.restarted_stopped)
}

fn run_profile(profile: &str, test: &str) {
    let seed = base_seed();
    let default_cases = DEFAULT_CASES
        .iter()
        .find(|(p, _)| *p == profile)
        .map_or(10, |(_, n)| *n);
    let cases = env_u64("VGPUD_PROPTEST_CASES").unwrap_or(default_cases);
    let steps = env_u64("VGPUD_PROPTEST_STEPS").map_or(DEFAULT_STEPS, |s| s as usize);
    let started = Instant::now();
    eprintln!(
        "engine_properties {profile}: seed {seed:#x}, {cases} cases x {steps} steps \
         (VGPUD_PROPTEST_SEED, VGPUD_PROPTEST_CASES, VGPUD_PROPTEST_STEPS)"
    );
    let mut restarted = 0;
    for case in 0..cases {
        let case_seed = seed.wrapping_add(case);
        match run_case(profile, case_seed, steps, test) {
            Ok(n) => restarted += n,
            Err(report) => panic!("{report}"),
        }
    }
    eprintln!(
        "engine_properties {profile}: {cases} cases x {steps} steps passed in {:.1} s \
         ({restarted} stopped autostart devices started again by a restart's restore)",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn mixed() {
    run_profile("mixed", "mixed");
}

#[test]
fn nvidia_l40s() {
    run_profile("nvidia-l40s", "nvidia_l40s");
}

#[test]
fn nvidia_a40() {
    run_profile("nvidia-a40", "nvidia_a40");
}
