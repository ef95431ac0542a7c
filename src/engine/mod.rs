//! The core: what GPUs and devices exist, where a new device goes, creating and removing
//! devices safely under concurrency, and keeping them across restarts, crashes and reboots.
//! It knows nothing of D-Bus; the adapter in [`crate::dbus`] calls it and maps
//! [`EngineError`] to bus errors.
//!
//! Concurrency: every GPU has its own lock, held while its capacity is read and its device is
//! created or removed, so two calls never over-commit a GPU and calls on different GPUs never
//! wait for each other. The device registry has a short-held lock of its own; a UUID being
//! worked on is marked in flight, so a second call for it fails cleanly instead of racing.
//!
//! Durability: every change to the host is recorded as an intent before it starts and closed
//! when it ends ([`crate::persist::intent`]); [`Engine::new`] replays what a crash left open
//! before anything else. Persistent devices are mdevctl definitions; what mdevctl cannot hold
//! is in vgpud's own records ([`crate::persist::state`]).

mod admission;
pub mod demand_queries;
mod error;
pub mod events;
pub mod leases;
mod lifecycle;
pub mod mig;
mod pci_devices;
mod reconcile;
mod request;
pub mod scheduler;
mod spares;
pub use spares::{HandOuts, Reshaper};
mod sriov;
pub mod telemetry;
#[cfg(test)]
mod tests;
mod type_info;
pub mod uevents;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::discovery::{self, GpuLocation};
use crate::host::Host;
use crate::model::{DeviceKind, Gpu, MdevType, MovedFunction, TypeDetails};
use crate::xml;

pub use error::{EngineError, EngineResult, Refusal};
pub use events::{with_cause, Cause, Event, EventBus, Origin, Record, Subscription};
pub use reconcile::{plan_restore, GpuRestore, RestoreReport, RestoreStep, Stage};
pub use request::{
    check_owner, is_invisible, parse_uuid, CreateRequest, HostdevOptions, ModifyRequest, Policy,
    MAX_NAME_LEN, MAX_PARAMS_LEN,
};
pub use type_info::{GvtgInfo, TypeInfo};

/// A device as vgpud reports it: active on the host, defined persistently, or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Lowercase UUID.
    pub uuid: String,
    /// Parent GPU address.
    pub parent: String,
    /// Type id (`nvidia-259`).
    pub type_id: String,
    /// Type name (`GRID RTX6000-4Q`), the id when unknown.
    pub type_name: String,
    /// Free tag given at creation (a libvirt domain name, say); empty for adopted devices.
    pub owner: String,
    /// IOMMU group of the device, while active.
    pub iommu_group: Option<u32>,
    /// Vendor attributes (`nvidia/vgpu_params`): read from the device while active, from the
    /// definition otherwise.
    pub attributes: BTreeMap<String, String>,
    /// The device exists on the host now.
    pub active: bool,
    /// The device has a persistent (mdevctl) definition.
    pub persistent: bool,
    /// The device is started whenever its parent appears (`start: auto`).
    pub autostart: bool,
    /// When vgpud created it, seconds since the Unix epoch; 0 if not created by vgpud.
    pub created: u64,
    /// What the device is on the host.
    pub kind: DeviceKind,
    /// The PCI function it is: the VF an SR-IOV vGPU is on (while it has one), the function
    /// passed through. `None` for mdevs.
    pub address: Option<String>,
    /// Passthrough: the functions moved to vfio-pci and the drivers they had.
    pub functions: Vec<MovedFunction>,
}

impl DeviceInfo {
    /// The VF an SR-IOV vGPU is on; `NotFound` while it is not active (it holds none).
    pub fn held_vf(&self) -> EngineResult<String> {
        self.address.clone().filter(|_| self.active).ok_or_else(|| {
            EngineError::NotFound(format!(
                "device {} holds no VF while it is not active: start it first",
                self.uuid
            ))
        })
    }

    /// A passthrough device's functions in guest order: the function asked for first (it is
    /// function 0 in the guest), then the others by address.
    pub fn passthrough_functions(&self) -> Vec<String> {
        let mut addresses: Vec<String> = self.functions.iter().map(|f| f.address.clone()).collect();
        addresses.sort();
        if let Some(main) = &self.address {
            addresses.retain(|a| a != main);
            addresses.insert(0, main.clone());
        }
        addresses
    }
}

/// Something that happened to a device behind vgpud's back, and what vgpud did about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// The device.
    pub uuid: String,
    /// `removed-externally`, `stopped-externally`, `repaired`, `repair-failed`, `adopted`.
    pub event: &'static str,
    /// A sentence for the log and the signal.
    pub detail: String,
}

/// What changed since the last look at the host.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DeviceChanges {
    /// Devices vgpud did not know (created or defined by another tool), now listed.
    pub added: Vec<DeviceInfo>,
    /// Devices that no longer exist and have no definition.
    pub removed: Vec<DeviceInfo>,
    /// Devices whose state changed (active, persistence, autostart, owner, type).
    pub updated: Vec<DeviceInfo>,
    /// Drift found and what was done about it.
    pub drift: Vec<Drift>,
    /// GPUs that appeared.
    pub gpus_added: Vec<String>,
    /// GPUs that went away.
    pub gpus_removed: Vec<String>,
}

impl DeviceChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.updated.is_empty()
            && self.drift.is_empty()
            && self.gpus_added.is_empty()
            && self.gpus_removed.is_empty()
    }
}

struct GpuEntry {
    gpu: Gpu,
    location: GpuLocation,
    lock: Arc<Mutex<()>>,
}

/// The physical GPU that `address` belongs to in the inventory `gpus`: its physical function
/// when it is a VF listed there, else `address` itself. Borrows, so that a loop over every
/// device copies nothing.
fn gpu_address_in<'a>(gpus: &'a BTreeMap<String, GpuEntry>, address: &'a str) -> &'a str {
    gpus.get(address)
        .and_then(|e| e.gpu.physical_function.as_deref())
        .unwrap_or(address)
}

/// [`Engine::known_types`]: the cached types, and a count of forgets so that a reading that
/// raced with a change is not kept.
#[derive(Default)]
struct KnownTypes {
    by_gpu: BTreeMap<String, Vec<MdevType>>,
    generation: u64,
    /// Whether each GPU could be given whole to a guest now, as last read, with the event
    /// stream's [`EventBus::delivered`](events::EventBus::delivered) count it was read at:
    /// gone with any forget (a uevent of a GPU, an operation's change) or any published
    /// change of state.
    passthrough: BTreeMap<String, bool>,
    passthrough_at: u64,
}

#[derive(Default)]
struct Registry {
    devices: BTreeMap<String, DeviceInfo>,
    in_flight: BTreeSet<String>,
    /// UUIDs whose operation finished since the running refresh took its snapshot of the
    /// host: the snapshot may predate them, so that refresh leaves them alone.
    touched: BTreeSet<String>,
    /// The VFs whose SR-IOV vGPU such an operation made or released: a snapshot that saw the
    /// vGPU but not (or no longer) its record must not adopt it under another UUID.
    touched_functions: BTreeSet<String>,
}

/// The engine: inventory, registry and the operations on them.
pub struct Engine {
    host: Host,
    gpus: RwLock<BTreeMap<String, GpuEntry>>,
    registry: Mutex<Registry>,
    /// One refresh at a time, so a refresh's snapshot and `touched` belong together.
    refreshing: Mutex<()>,
    /// Each physical GPU's types with their capacity, as last read: what the read calls
    /// answer from. An entry goes when a change on that GPU may have changed it, and is read
    /// again at the next use ([`Engine::warm_types`] after a batch of uevents).
    known_types: Mutex<KnownTypes>,
    /// How many times NVML's view of a GPU was applied: a reading made before another was
    /// applied is older than it and is dropped ([`Engine::refresh_nvidia_all`]).
    nvml_published: std::sync::atomic::AtomicU64,
    /// NVIDIA's `sriov-manage`, relative to the host's root.
    sriov_manage: PathBuf,
    /// Placement defaults.
    placement: Placement,
    /// First come, first served queues of creates, per type.
    admissions: admission::Admissions,
    /// NVIDIA's `nvidia-smi`, relative to the host's root.
    nvidia_smi: PathBuf,
    /// The heterogeneous vGPU mode of each GPU, as vgpud set it (or its record says it is).
    modes: Mutex<BTreeMap<String, bool>>,
    /// Autostart devices whose start on a GPU that appeared failed: tried again at every look.
    autostart_pending: Mutex<BTreeSet<String>>,
    /// Every change of state, for the D-Bus adapter, the audit log and metrics.
    events: EventBus,
    /// The NVIDIA driver's control plane (NVML), or the backend that says why there is none.
    control: Arc<dyn crate::gpu_control::GpuControl>,
    /// What is asked for, per type ([`crate::demand`]).
    demand: crate::demand::Demand,
    /// The devices' leases ([`leases`]).
    leases: leases::Leases,
    /// Spares handed out, for the refill ([`spares`]).
    hand_outs: spares::HandOuts,
    /// What frees room by removing spares ([`spares::Reshaper`]), when the daemon set one.
    reshaper: spares::ReshaperSlot,
}

impl Drop for Engine {
    /// A clean end: the files the journal wrote are made durable and the journal emptied of
    /// them, so the next start has nothing to apply again.
    fn drop(&mut self) {
        if let Err(e) = crate::persist::journal::of(&self.host).checkpoint_if_dirty() {
            tracing::warn!(error = %e, "could not checkpoint the journal");
        }
        if let Err(e) = self.demand.flush() {
            tracing::warn!(error = %e, "could not write the demand record");
        }
    }
}

/// Where NVIDIA installs `nvidia-smi`, relative to the root.
pub const DEFAULT_NVIDIA_SMI: &str = "usr/bin/nvidia-smi";

/// Where NVIDIA installs `sriov-manage`, relative to the root.
pub const DEFAULT_SRIOV_MANAGE: &str = "usr/lib/nvidia/sriov-manage";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves consistent data (every update is a
    // single insert or remove), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Engine {
    /// Opens the host: replays the intents a crash left open, then reads what exists (sysfs),
    /// what is defined (mdevctl) and vgpud's records, and adopts devices of other tools. It
    /// starts nothing: [`Engine::restore`] does, in boot order.
    pub fn new(host: Host) -> EngineResult<Self> {
        let demand = crate::demand::Demand::load(&host);
        let leases = leases::Leases::load(&host);
        let engine = Engine {
            host,
            gpus: RwLock::new(BTreeMap::new()),
            registry: Mutex::new(Registry::default()),
            refreshing: Mutex::new(()),
            known_types: Mutex::new(KnownTypes::default()),
            nvml_published: std::sync::atomic::AtomicU64::new(0),
            sriov_manage: PathBuf::from(DEFAULT_SRIOV_MANAGE),
            placement: Placement::default(),
            admissions: admission::Admissions::default(),
            nvidia_smi: PathBuf::from(DEFAULT_NVIDIA_SMI),
            modes: Mutex::new(BTreeMap::new()),
            autostart_pending: Mutex::new(BTreeSet::new()),
            events: EventBus::default(),
            control: Arc::new(crate::gpu_control::Unavailable::new(
                "no NVML backend was configured",
            )),
            demand,
            leases,
            hand_outs: spares::HandOuts::default(),
            reshaper: spares::ReshaperSlot::default(),
        };
        engine.rescan_gpus()?;
        // A GPU recorded in heterogeneous mode whose VFs are enabled is still in it (only a
        // driver start ends the mode, and sriov-manage or a reboot leave the VFs off); the
        // restore sets it again otherwise, when it enables the VFs.
        // The same for a mode set without `persistent`, kept under run/ until a reboot.
        let mut heterogeneous = engine.runtime_modes();
        if let Ok(records) = crate::persist::sriov::read_all(&engine.host) {
            heterogeneous.extend(
                records
                    .into_iter()
                    .filter(|r| r.heterogeneous)
                    .map(|r| r.pf),
            );
        }
        for pf in heterogeneous {
            let vfs_on = engine
                .with_gpu(&pf, |g| g.sriov.as_ref().is_some_and(|s| s.num_vfs > 0))
                .unwrap_or(false);
            if vfs_on {
                lock(&engine.modes).insert(pf, true);
            }
        }
        engine.replay_intents()?;
        engine.refresh(true)?;
        Ok(engine)
    }

    /// Uses NVIDIA's `sriov-manage` at `path` (absolute paths are taken below the host's
    /// root, as every path vgpud uses).
    pub fn with_sriov_manage(mut self, path: impl Into<PathBuf>) -> Self {
        let path: PathBuf = path.into();
        self.sriov_manage = path.strip_prefix("/").map(PathBuf::from).unwrap_or(path);
        self
    }

    /// Uses NVIDIA's `nvidia-smi` at `path` (absolute paths are taken below the host's root).
    pub fn with_nvidia_smi(mut self, path: impl Into<PathBuf>) -> Self {
        let path: PathBuf = path.into();
        self.nvidia_smi = path.strip_prefix("/").map(PathBuf::from).unwrap_or(path);
        self
    }

    /// Uses this NVIDIA control plane (NVML) and reads what it says of every NVIDIA GPU.
    /// Its calls' CPU time is counted as NVML's ([`crate::metrics::cpu`]).
    pub fn with_control(mut self, control: Arc<dyn crate::gpu_control::GpuControl>) -> Self {
        self.control = Arc::new(crate::gpu_control::timed::Timed(control));
        self.refresh_nvidia_all(false);
        self
    }

    /// The NVIDIA control plane.
    pub fn control(&self) -> &dyn crate::gpu_control::GpuControl {
        &*self.control
    }

    /// Uses these placement defaults for requests that name no policy or NUMA node.
    pub fn with_placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// The placement defaults.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The host this engine manages.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// What is asked for, per type ([`crate::demand`]).
    pub fn demand(&self) -> &crate::demand::Demand {
        &self.demand
    }

    /// The event stream: every change of state, in order.
    pub fn events(&self) -> &EventBus {
        &self.events
    }

    /// Records a device in the registry as it is now (`None`: forgets it) and sends the
    /// events of the change, under the registry's lock so that they are in the order of the
    /// changes.
    fn record(&self, reg: &mut Registry, uuid: &str, device: Option<DeviceInfo>, origin: Origin) {
        let before = match device {
            Some(d) => reg.devices.insert(uuid.to_string(), d),
            None => reg.devices.remove(uuid),
        };
        let after = reg.devices.get(uuid);
        let parent = after.or(before.as_ref()).map(|d| d.parent.clone());
        let events = events::device_transition(before.as_ref(), after, origin, || {
            self.gpu_of_parent(parent.as_deref().unwrap_or_default())
        });
        if let Some(parent) = &parent {
            self.forget_types_of(parent);
        }
        self.events.send_all(events);
    }

    /// Forgets the known types of the GPU of `parent` (a GPU, or a VF of one), to be read
    /// again at their next use.
    pub(crate) fn forget_types_of(&self, parent: &str) {
        let gpu = self.gpu_of_parent(parent);
        self.forget_types_of_gpu(&gpu);
        if gpu != parent {
            self.forget_types_of_gpu(parent);
        }
    }

    /// [`Engine::forget_types_of`] a physical GPU, without looking at the inventory.
    pub(crate) fn forget_types_of_gpu(&self, gpu: &str) {
        let mut known = lock(&self.known_types);
        known.generation += 1;
        known.by_gpu.remove(gpu);
        known.passthrough.clear();
    }

    fn forget_all_types(&self) {
        let mut known = lock(&self.known_types);
        known.generation += 1;
        known.by_gpu.clear();
        known.passthrough.clear();
    }

    /// Whether the GPU or VF at `address` could be given whole to a guest now: as known,
    /// else read now (and kept unless a change raced with the reading). A create checks it
    /// all again on the host; this answers capacity questions from memory.
    fn can_pass_through_now(&self, address: &str) -> bool {
        let (generation, delivered) = {
            let mut known = lock(&self.known_types);
            let delivered = self.events.delivered();
            if known.passthrough_at != delivered {
                known.passthrough.clear();
                known.passthrough_at = delivered;
            }
            if let Some(&free) = known.passthrough.get(address) {
                return free;
            }
            (known.generation, delivered)
        };
        let free = self.can_pass_through(address);
        let mut known = lock(&self.known_types);
        if known.generation == generation
            && known.passthrough_at == delivered
            && self.events.delivered() == delivered
        {
            known.passthrough.insert(address.to_string(), free);
        }
        free
    }

    /// The types of a physical GPU with their capacity: as known, else read now (and kept
    /// unless a change raced with the reading).
    fn types_now(&self, address: &str) -> EngineResult<Vec<MdevType>> {
        let generation = {
            let known = lock(&self.known_types);
            if let Some(types) = known.by_gpu.get(address) {
                return Ok(types.clone());
            }
            known.generation
        };
        let types = self.live_types(address)?;
        let mut known = lock(&self.known_types);
        if known.generation == generation {
            known.by_gpu.insert(address.to_string(), types.clone());
        }
        Ok(types)
    }

    /// The addresses of the physical GPUs.
    fn physical_addresses(&self) -> Vec<String> {
        self.gpus()
            .values()
            .filter(|e| e.gpu.is_physical())
            .map(|e| e.gpu.address.clone())
            .collect()
    }

    /// Reads the types of every physical GPU whose known types were forgotten, so that the
    /// read calls that follow find them in memory. Called off the read path (after a batch
    /// of uevents).
    pub fn warm_types(&self) {
        for address in self.physical_addresses() {
            // Known ones are not copied out only to be dropped.
            if lock(&self.known_types).by_gpu.contains_key(&address) {
                continue;
            }
            if let Err(e) = self.types_now(&address) {
                tracing::debug!(gpu = %address, error = %e, "could not read a GPU's types");
            }
        }
    }

    /// Scans the GPUs and their types again; returns the addresses added and removed.
    pub fn rescan_gpus(&self) -> EngineResult<(Vec<String>, Vec<String>)> {
        let scanned =
            discovery::scan_gpus(&self.host).map_err(|e| EngineError::host("scanning GPUs", e))?;
        Ok(self.replace_gpus(scanned, |_| true))
    }

    /// Scans again only the GPU that the PCI function (or non-PCI mdev parent) `function`
    /// belongs to: the physical function and its VFs ([`discovery::scan_gpu_family`]). What
    /// a kernel event on one function changes, at a cost that does not grow with the host.
    /// Returns the addresses added and removed.
    pub fn rescan_gpu_of(&self, function: &str) -> EngineResult<(Vec<String>, Vec<String>)> {
        let root = self.family_root(function);
        let scanned = discovery::scan_gpu_family(&self.host, &root)
            .map_err(|e| EngineError::host(format!("scanning GPU {root}"), e))?;
        Ok(self.replace_gpus(scanned, |gpu| {
            gpu.address == root || gpu.physical_function.as_deref() == Some(root.as_str())
        }))
    }

    /// The physical function (or non-PCI parent) whose GPU `function` is part of: as known,
    /// else as its `physfn` link says, else the known GPU that listed it as a VF (a VF gone).
    fn family_root(&self, function: &str) -> String {
        {
            let gpus = self.gpus();
            if gpus.contains_key(function) {
                return gpu_address_in(&gpus, function).to_string();
            }
        }
        if let Ok(Some(pf)) = discovery::sriov::physical_function(&self.host, function) {
            return pf;
        }
        self.gpus()
            .values()
            .find(|e| {
                e.gpu
                    .sriov
                    .as_ref()
                    .is_some_and(|s| s.vfs.iter().any(|vf| vf == function))
            })
            .map_or_else(|| function.to_string(), |e| e.gpu.address.clone())
    }

    /// Puts `scanned` in place of the known GPUs that `in_scope` selects, keeping each GPU's
    /// lock and NVML view, and sends the GPU events of the difference (under the inventory's
    /// lock, so that they are in the order of the scans). Returns the addresses added and
    /// removed.
    fn replace_gpus(
        &self,
        scanned: Vec<(Gpu, GpuLocation)>,
        in_scope: impl Fn(&Gpu) -> bool,
    ) -> (Vec<String>, Vec<String>) {
        let mut gpus = self.gpus.write().unwrap_or_else(|e| e.into_inner());
        let mut next = BTreeMap::new();
        for (mut gpu, location) in scanned {
            let lock = gpus
                .get(&gpu.address)
                .map(|e| e.lock.clone())
                .unwrap_or_default();
            // NVML's view is read by refresh_nvidia, not by the sysfs scan: it carries over.
            gpu.nvidia = gpus.get(&gpu.address).and_then(|e| e.gpu.nvidia.clone());
            next.insert(
                gpu.address.clone(),
                GpuEntry {
                    gpu,
                    location,
                    lock,
                },
            );
        }
        let before: Vec<String> = gpus
            .values()
            .filter(|e| in_scope(&e.gpu))
            .map(|e| e.gpu.address.clone())
            .collect();
        // A VF that is an mdev parent is part of its physical GPU: it takes that GPU's lock.
        let pf_locks: Vec<(String, Arc<Mutex<()>>)> = next
            .values()
            .filter_map(|e: &GpuEntry| {
                let pf = e.gpu.physical_function.as_ref()?;
                let pf_lock = next.get(pf).or_else(|| gpus.get(pf))?.lock.clone();
                Some((e.gpu.address.clone(), pf_lock))
            })
            .collect();
        for (vf, pf_lock) in pf_locks {
            if let Some(e) = next.get_mut(&vf) {
                e.lock = pf_lock;
            }
        }
        let added: Vec<String> = next
            .keys()
            .filter(|a| !gpus.contains_key(*a))
            .cloned()
            .collect();
        let removed: Vec<String> = before
            .iter()
            .filter(|a| !next.contains_key(*a))
            .cloned()
            .collect();
        let mut events = Vec::new();
        for (address, entry) in &next {
            match gpus.get(address) {
                None => events.push(Event::GpuAdded {
                    gpu: entry.gpu.clone(),
                }),
                Some(old) if events::gpu_shape(&old.gpu) != events::gpu_shape(&entry.gpu) => {
                    events.push(Event::GpuChanged {
                        before: old.gpu.clone(),
                        after: entry.gpu.clone(),
                    });
                    let gpu = entry.gpu.physical_function.clone();
                    events.push(Event::CapacityChanged {
                        gpu: gpu.unwrap_or_else(|| address.clone()),
                    });
                }
                Some(_) => {}
            }
        }
        events.extend(
            removed
                .iter()
                .map(|a| Event::GpuRemoved { address: a.clone() }),
        );
        // A scan of the whole inventory forgets every GPU's types; one GPU's scan forgets only
        // those of its functions.
        let whole = before.len() == gpus.len();
        let touched: Vec<String> = before.into_iter().chain(next.keys().cloned()).collect();
        for address in &touched {
            gpus.remove(address);
        }
        gpus.extend(next);
        if whole {
            self.forget_all_types();
        } else {
            for address in &touched {
                self.forget_types_of_gpu(address);
            }
        }
        self.events.send_all(events);
        (added, removed)
    }

    fn gpus(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, GpuEntry>> {
        self.gpus.read().unwrap_or_else(|e| e.into_inner())
    }

    fn gpu_lock(&self, address: &str) -> Option<Arc<Mutex<()>>> {
        self.gpus().get(address).map(|e| e.lock.clone())
    }

    /// Every physical GPU, with its types as discovered (available counts as of the last
    /// scan). VFs that are mdev parents are part of their GPU, not listed.
    pub fn list_gpus(&self) -> Vec<Gpu> {
        self.gpus()
            .values()
            .filter(|e| e.gpu.is_physical())
            .map(|e| e.gpu.clone())
            .collect()
    }

    /// One GPU by address.
    pub fn gpu(&self, address: &str) -> Option<Gpu> {
        self.gpus().get(address).map(|e| e.gpu.clone())
    }

    /// Reads one GPU in place, without copying it (property getters).
    pub fn with_gpu<T>(&self, address: &str, f: impl FnOnce(&Gpu) -> T) -> Option<T> {
        self.gpus().get(address).map(|e| f(&e.gpu))
    }

    /// Reads one device in place, without copying it (property getters).
    pub fn with_device<T>(&self, uuid: &str, f: impl FnOnce(&DeviceInfo) -> T) -> Option<T> {
        lock(&self.registry).devices.get(uuid).map(f)
    }

    /// The sysfs directory of a GPU.
    pub fn gpu_dir(&self, address: &str) -> Option<PathBuf> {
        self.gpus().get(address).map(|e| e.location.dir.clone())
    }

    /// Every type of every physical GPU, with how many more the GPU can take: an mdev type's
    /// `available_instances` (summed over the VFs of a GPU whose VFs are the mdev parents),
    /// or the free VFs that list an SR-IOV vGPU type; from memory, read from the host again
    /// only after a change on that GPU.
    pub fn list_types(&self) -> EngineResult<Vec<(String, MdevType)>> {
        let mut out = Vec::new();
        for address in self.physical_addresses() {
            for ty in self.types_now(&address)? {
                out.push((address.clone(), ty));
            }
        }
        Ok(out)
    }

    /// The types of one physical GPU with their capacity now.
    pub fn live_types(&self, address: &str) -> EngineResult<Vec<MdevType>> {
        let Some((gpu, is_mdev_parent)) = self
            .gpus()
            .get(address)
            .map(|e| (e.gpu.clone(), e.location.is_mdev_parent))
        else {
            return Ok(Vec::new());
        };
        if gpu
            .sharing_modes
            .contains(&crate::model::SharingMode::SriovVgpu)
        {
            let states = self.vf_states(address)?;
            let mut types =
                discovery::vgpu_types(&gpu.model, &states, self.is_heterogeneous(address));
            // A MIG-backed type counts the GPU instances that are free or could be made,
            // bounded by the free VFs.
            let free_vfs =
                u32::try_from(states.iter().filter(|s| s.current == 0).count()).unwrap_or(u32::MAX);
            let nvidia = gpu.nvidia.as_ref();
            for t in &mut types {
                let room = discovery::sriov::nvidia_type_number(&t.id)
                    .zip(nvidia)
                    .and_then(|(n, state)| mig::mig_room_in(state, n, true));
                if let Some(room) = room {
                    t.available_instances = room.min(free_vfs);
                }
            }
            return Ok(types);
        }
        if is_mdev_parent {
            let mut types = gpu.types;
            for ty in &mut types {
                ty.available_instances = self.available(address, &ty.id)?;
            }
            return Ok(types);
        }
        let vfs = self.vf_parents(address);
        if vfs.is_empty() {
            return Ok(gpu.types);
        }
        let mut per_vf = Vec::new();
        for (vf, types) in vfs {
            let mut types = types;
            for ty in &mut types {
                ty.available_instances = self.available(&vf, &ty.id)?;
            }
            per_vf.push(types);
        }
        let refs: Vec<&Vec<MdevType>> = per_vf.iter().collect();
        // Each VF shows 0 or 1; the GPU's maximum counts the vGPUs already on its VFs.
        let used = u32::try_from(
            self.map_devices_of(address, |d| d.active)
                .into_iter()
                .filter(|active| *active)
                .count(),
        )
        .unwrap_or(u32::MAX);
        let mut types = discovery::sum_vf_types(&refs);
        for t in &mut types {
            let max = t.max_instances();
            if max > 0 {
                t.available_instances = t.available_instances.min(max.saturating_sub(used));
            }
        }
        Ok(types)
    }

    /// The VFs of a physical GPU that are mdev parents, with their types, in address order.
    fn vf_parents(&self, pf: &str) -> Vec<(String, Vec<MdevType>)> {
        self.gpus()
            .values()
            .filter(|e| e.gpu.physical_function.as_deref() == Some(pf))
            .map(|e| (e.gpu.address.clone(), e.gpu.types.clone()))
            .collect()
    }

    /// Whether the physical GPU `gpu` can take one more device of `type_query` now, by its
    /// types as known (an SR-IOV GPU's count its VFs'): what [`Engine::capacity`] answers
    /// for one GPU, without ranking the candidates.
    pub fn has_room_for(&self, gpu: &str, type_query: &str) -> bool {
        if type_query.eq_ignore_ascii_case(crate::model::PASSTHROUGH_TYPE) {
            return self.can_pass_through_now(gpu);
        }
        self.types_now(gpu).is_ok_and(|types| {
            types
                .iter()
                .any(|t| t.matches(type_query) && t.available_instances > 0)
        })
    }

    /// The mdev parent of a GPU that can take one more of a type now: the GPU itself, or the
    /// first of its VFs with room. `None` when none has room.
    pub(super) fn free_mdev_parent(
        &self,
        gpu: &str,
        type_id: &str,
    ) -> EngineResult<Option<String>> {
        let is_parent = self
            .gpus()
            .get(gpu)
            .is_some_and(|e| e.location.is_mdev_parent);
        if is_parent {
            return Ok((self.available(gpu, type_id)? > 0).then(|| gpu.to_string()));
        }
        for (vf, types) in self.vf_parents(gpu) {
            if types.iter().any(|t| t.id == type_id) && self.available(&vf, type_id)? > 0 {
                return Ok(Some(vf));
            }
        }
        Ok(None)
    }

    fn available(&self, parent: &str, type_id: &str) -> EngineResult<u32> {
        discovery::read_available(
            &self.host,
            &discovery::mdev_type_dir(&self.host, parent, type_id),
        )
        .map_err(|e| EngineError::host(format!("reading capacity of {type_id} on {parent}"), e))
    }

    /// Every known device: active, defined, or both.
    pub fn list_devices(&self) -> Vec<DeviceInfo> {
        lock(&self.registry).devices.values().cloned().collect()
    }

    /// One device by UUID (any case).
    pub fn device(&self, uuid: &str) -> Option<DeviceInfo> {
        let uuid = crate::model::normalize_uuid(uuid)?;
        lock(&self.registry).devices.get(&uuid).cloned()
    }

    /// Devices of one GPU, also those on its VFs.
    pub fn devices_of(&self, parent: &str) -> Vec<DeviceInfo> {
        self.map_devices_of(parent, DeviceInfo::clone)
    }

    /// What `f` takes of each device on `parent` (on it or on its VFs that are mdev
    /// parents), in UUID order; nothing else is copied out of the registry.
    pub fn map_devices_of<T>(&self, parent: &str, f: impl Fn(&DeviceInfo) -> T) -> Vec<T> {
        let vfs: BTreeSet<String> = self
            .gpus()
            .values()
            .filter(|e| e.gpu.physical_function.as_deref() == Some(parent))
            .map(|e| e.gpu.address.clone())
            .collect();
        lock(&self.registry)
            .devices
            .values()
            .filter(|d| d.parent == parent || vfs.contains(&d.parent))
            .map(f)
            .collect()
    }

    /// The devices on physical GPU `gpu` (on it or its VFs) whose owner is one of `owners`;
    /// only those are copied out of the registry.
    pub fn devices_owned_on(&self, gpu: &str, owners: &BTreeSet<String>) -> Vec<DeviceInfo> {
        let owned: Vec<DeviceInfo> = lock(&self.registry)
            .devices
            .values()
            .filter(|d| owners.contains(&d.owner))
            .cloned()
            .collect();
        owned
            .into_iter()
            .filter(|d| self.gpu_of_parent(&d.parent) == gpu)
            .collect()
    }

    /// Every physical GPU's address and model (nothing else copied).
    pub fn gpu_models(&self) -> Vec<(String, String)> {
        self.gpus()
            .values()
            .filter(|e| e.gpu.is_physical())
            .map(|e| (e.gpu.address.clone(), e.gpu.model.clone()))
            .collect()
    }

    /// The physical GPU a device's parent belongs to (the parent itself unless it is a VF).
    pub fn gpu_of_parent(&self, parent: &str) -> String {
        gpu_address_in(&self.gpus(), parent).to_string()
    }

    fn type_name(&self, parent: &str, type_id: &str) -> String {
        self.gpus()
            .get(parent)
            .and_then(|e| e.gpu.types.iter().find(|t| t.id == type_id))
            .map(|t| t.name.clone())
            .unwrap_or_else(|| type_id.to_string())
    }

    /// Marks a UUID in flight; fails if another call holds it, or (when `creating`) if the
    /// UUID is already in use.
    fn claim(&self, uuid: &str, creating: bool) -> EngineResult<InFlight<'_>> {
        let mut reg = lock(&self.registry);
        if reg.in_flight.contains(uuid) {
            return Err(EngineError::Busy(format!(
                "another call is working on device {uuid}"
            )));
        }
        if creating
            && (reg.devices.contains_key(uuid)
                || discovery::mdev_device_dir(&self.host, uuid).exists())
        {
            return Err(EngineError::Exists(format!("device {uuid} already exists")));
        }
        reg.in_flight.insert(uuid.to_string());
        Ok(InFlight {
            engine: self,
            uuid: uuid.to_string(),
        })
    }

    /// The (GPU, type) pairs that match the request, best first: GPUs already running the
    /// type, then the others, each in address order.
    fn candidates(&self, req: &CreateRequest) -> EngineResult<Vec<(String, MdevType)>> {
        let gpus = self.gpus();
        if let Some(parent) = &req.parent {
            if !gpus.contains_key(parent) {
                return Err(EngineError::NotFound(format!(
                    "no GPU {parent} on this host"
                )));
            }
        }
        let matches: Vec<(String, MdevType)> = gpus
            .values()
            .filter(|e| match &req.parent {
                Some(p) => *p == e.gpu.address,
                None => e.gpu.is_physical(),
            })
            .flat_map(|e| {
                e.gpu
                    .types
                    .iter()
                    .filter(|t| t.matches(&req.type_query))
                    .map(|t| (e.gpu.address.clone(), t.clone()))
            })
            .collect();
        drop(gpus);
        if matches.is_empty() {
            let query = &req.type_query;
            return Err(EngineError::NotFound(match &req.parent {
                Some(p) => format!("GPU {p} does not offer type {query:?}"),
                None => format!("no GPU on this host offers type {query:?}"),
            }));
        }
        if req.params.is_some() {
            if let Some((parent, ty)) = matches
                .iter()
                .find(|(_, t)| !matches!(t.details, TypeDetails::Nvidia { .. }))
            {
                return Err(EngineError::InvalidArgument(format!(
                    "option \"params\" applies to NVIDIA vGPUs only, and {} on {parent} is not one",
                    ty.id
                )));
            }
        }
        let policy = req.policy.unwrap_or(self.placement.policy);
        let numa = req.numa_node.or(self.placement.numa_node);
        // Each candidate's GPU (a VF parent counts with its physical GPU).
        let candidate_gpu: Vec<String> = matches
            .iter()
            .map(|(parent, _)| self.gpu_of_parent(parent))
            .collect();
        // least-busy: the GPUs' measured utilization, read once per GPU (no lock held).
        let mut busy: BTreeMap<&str, Option<u32>> = BTreeMap::new();
        if policy == Policy::LeastBusy {
            for gpu in &candidate_gpu {
                busy.entry(gpu.as_str()).or_insert_with(|| {
                    self.control
                        .metrics(gpu)
                        .ok()
                        .and_then(|m| m.gpu_utilization)
                });
            }
        }
        // Each candidate's key, computed once: its GPU's active devices and how many of them
        // run the requested framebuffer size (or type, where the size is unknown). Only the
        // candidates' GPUs are counted, and nothing is copied per device. (The registry's
        // lock before the inventory's, as everywhere.)
        let keys: Vec<(bool, u8, usize, String)> = {
            let registry = lock(&self.registry);
            let gpus = self.gpus();
            let mut of_gpu: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            for (i, gpu) in candidate_gpu.iter().enumerate() {
                of_gpu.entry(gpu.as_str()).or_default().push(i);
            }
            let wanted_fb: Vec<u64> = matches.iter().map(|(_, t)| t.framebuffer_bytes()).collect();
            // A device's framebuffer size, from its parent's types or its GPU's.
            let fb_of = |parent: &str, gpu: &str, type_id: &str| -> u64 {
                [parent, gpu]
                    .iter()
                    .filter_map(|a| gpus.get(*a))
                    .find_map(|e| e.gpu.types.iter().find(|t| t.id == type_id))
                    .map_or(0, MdevType::framebuffer_bytes)
            };
            let mut active = vec![0usize; matches.len()];
            let mut alike = vec![0usize; matches.len()];
            for d in registry.devices.values().filter(|d| d.active) {
                let gpu = gpu_address_in(&gpus, &d.parent);
                let Some(indexes) = of_gpu.get(gpu) else {
                    continue;
                };
                let fb = fb_of(&d.parent, gpu, &d.type_id);
                for &i in indexes {
                    active[i] += 1;
                    if d.type_id == matches[i].1.id || (wanted_fb[i] > 0 && fb == wanted_fb[i]) {
                        alike[i] += 1;
                    }
                }
            }
            let numa_of = |address: &str| gpus.get(address).and_then(|e| e.gpu.numa_node);
            matches
                .iter()
                .enumerate()
                .map(|(i, (parent, _))| {
                    let off_node = numa.is_some() && numa_of(parent) != numa;
                    let utilization = busy.get(candidate_gpu[i].as_str()).copied().flatten();
                    placement_key(policy, off_node, active[i], alike[i], utilization, parent)
                })
                .collect()
        };
        let mut keyed: Vec<_> = keys.into_iter().zip(matches).collect();
        // Stable: candidates with equal keys keep the inventory's order.
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let matches: Vec<(String, MdevType)> = keyed.into_iter().map(|(_, m)| m).collect();
        Ok(matches)
    }

    /// How many more devices of a type the host can take now under the vendors' rules: the
    /// sum over the GPUs offering it (only `req.parent`, and only GPUs on `req.numa_node`
    /// when given) of what each can take.
    pub fn capacity(&self, req: &CreateRequest) -> EngineResult<u32> {
        if req
            .type_query
            .eq_ignore_ascii_case(crate::model::PASSTHROUGH_TYPE)
        {
            return self.passthrough_capacity(req);
        }
        // A type no GPU offers is NotFound, as CreateDevice says, not a capacity of 0.
        let candidates = self.candidates(req)?;
        let mut total: u32 = 0;
        for (gpu, ty) in candidates {
            let on_node = self.with_gpu(&gpu, |g| g.numa_node).flatten();
            if req.numa_node.is_some() && on_node != req.numa_node {
                continue;
            }
            let now = self
                .types_now(&gpu)?
                .into_iter()
                .find(|t| t.id == ty.id)
                .map_or(0, |t| t.available_instances);
            total = total.saturating_add(now);
        }
        Ok(total)
    }

    /// How many GPUs (or the one `req.parent` names, a GPU or a VF) could be given whole to a
    /// guest now.
    fn passthrough_capacity(&self, req: &CreateRequest) -> EngineResult<u32> {
        let addresses: Vec<String> = match &req.parent {
            Some(p) => {
                // A GPU or VF of the inventory is there; anything else is looked for.
                if !self.gpus().contains_key(p) {
                    self.pci_function(p)?;
                }
                vec![p.clone()]
            }
            None => self
                .list_gpus()
                .into_iter()
                .filter(|g| g.class >> 16 == 0x03)
                .filter(|g| req.numa_node.is_none() || g.numa_node == req.numa_node)
                .map(|g| g.address)
                .collect(),
        };
        let free = addresses
            .iter()
            .filter(|a| self.can_pass_through_now(a))
            .count();
        Ok(u32::try_from(free).unwrap_or(u32::MAX))
    }

    /// Explains why a GPU has no room for a type.
    fn why_full(&self, parent: &str, ty: &MdevType) -> String {
        let vfs_off = self
            .with_gpu(parent, |g| {
                g.sriov.as_ref().is_some_and(|s| s.num_vfs == 0) && !g.types.is_empty()
            })
            .unwrap_or(false)
            && !self
                .gpus()
                .get(parent)
                .is_some_and(|e| e.location.is_mdev_parent);
        if vfs_off {
            return "its SR-IOV virtual functions are not enabled (SetVfCount enables them)"
                .to_string();
        }
        let on_gpu: Vec<DeviceInfo> = self
            .devices_of(parent)
            .into_iter()
            .filter(|d| d.active)
            .collect();
        if on_gpu.is_empty() {
            return format!("no {} available", ty.name);
        }
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for d in &on_gpu {
            *counts.entry(d.type_name.as_str()).or_default() += 1;
        }
        let running = counts
            .iter()
            .map(|(name, n)| format!("{n}× {name}"))
            .collect::<Vec<_>>()
            .join(", ");
        let other_type = counts.keys().any(|n| *n != ty.name);
        if other_type && matches!(ty.details, TypeDetails::Nvidia { .. }) {
            format!(
                "runs {running}, and an NVIDIA GPU runs one framebuffer size at a time, so no {} fits",
                ty.name
            )
        } else {
            format!("all capacity for {} in use (runs {running})", ty.name)
        }
    }

    /// The libvirt `<hostdev>` element for a device; for a passthrough device of several
    /// functions, one element per function, one after the other.
    pub fn hostdev_xml(&self, uuid: &str, opts: &HostdevOptions) -> EngineResult<String> {
        Ok(self.hostdev_fragments(uuid, opts)?.join("\n"))
    }

    /// The libvirt `<hostdev>` elements of a device: one for an mdev or an SR-IOV vGPU's VF
    /// (`managed='no'`: the VF stays on the NVIDIA driver), one per function of a passthrough
    /// device (`managed='no'`: vgpud bound them to vfio-pci; several functions are one
    /// multi-function device in the guest).
    pub fn hostdev_fragments(
        &self,
        uuid: &str,
        opts: &HostdevOptions,
    ) -> EngineResult<Vec<String>> {
        let uuid = request::parse_uuid(uuid)?;
        let Some(info) = self.device(&uuid) else {
            return Err(EngineError::NotFound(format!(
                "no device {uuid} on this host"
            )));
        };
        if info.kind != DeviceKind::Mdev && (opts.display.is_some() || opts.ramfb.is_some()) {
            return Err(EngineError::InvalidArgument(format!(
                "options \"display\" and \"ramfb\" apply to mdevs; device {uuid} is {}",
                info.kind
            )));
        }
        let rendered = match info.kind {
            DeviceKind::Mdev => xml::render_mdev_hostdev(&xml::MdevHostdev {
                uuid: uuid.clone(),
                display: opts.display,
                ramfb: opts.ramfb,
            })
            .map(|x| vec![x]),
            DeviceKind::SriovVgpu => xml::render_pci_functions(&[info.held_vf()?], opts.guest_bus),
            DeviceKind::Passthrough => {
                xml::render_pci_functions(&info.passthrough_functions(), opts.guest_bus)
            }
        };
        rendered.map_err(|e| match e {
            xml::XmlError::InvalidInput { .. } => EngineError::InvalidArgument(e.to_string()),
            other => EngineError::Xml {
                uuid,
                message: other.to_string(),
            },
        })
    }
}

/// The sort key of a candidate GPU (smaller goes first). Off the preferred NUMA node goes
/// last under either policy. `pack` takes GPUs running the type or its framebuffer size
/// (`alike` devices; NVIDIA runs one size at a time) first, fullest first, then GPUs with
/// other devices, then empty ones; `spread` takes the least loaded first; `least-busy` the
/// lowest measured `utilization` first (unmeasured GPUs after, as `spread` orders them).
pub fn placement_key(
    policy: Policy,
    off_node: bool,
    active: usize,
    alike: usize,
    utilization: Option<u32>,
    address: &str,
) -> (bool, u8, usize, String) {
    match policy {
        Policy::Pack => {
            let tier = if alike > 0 {
                0
            } else if active > 0 {
                1
            } else {
                2
            };
            (off_node, tier, usize::MAX - active, address.to_string())
        }
        Policy::Spread => (off_node, 0, active, address.to_string()),
        Policy::LeastBusy => match utilization {
            Some(u) => (off_node, 0, u as usize, address.to_string()),
            None => (off_node, 1, active, address.to_string()),
        },
    }
}

/// The placement defaults of the engine (from the configuration file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placement {
    /// The policy when a request names none.
    pub policy: Policy,
    /// The NUMA node preferred when a request names none.
    pub numa_node: Option<u32>,
}

/// A UUID held in flight; dropping it without [`InFlight::finish`] releases it unchanged.
struct InFlight<'a> {
    engine: &'a Engine,
    uuid: String,
}

impl InFlight<'_> {
    /// Releases the UUID, recording the device as it now is (`None`: vgpud no longer knows
    /// it).
    ///
    /// The change's events (the device's, and the GPU's when a passthrough moved functions
    /// between drivers) are delivered together, before the UUID is released.
    fn finish(self, device: Option<DeviceInfo>) {
        let engine = self.engine;
        engine.events.batch(|| {
            let mut reg = lock(&engine.registry);
            let passthrough =
                |d: Option<&DeviceInfo>| d.is_some_and(|d| d.kind == DeviceKind::Passthrough);
            // The GPU's driver, and what it offers, changed with the functions. (The
            // inventory's lock comes after the registry's.)
            if passthrough(device.as_ref()) || passthrough(reg.devices.get(&self.uuid)) {
                if let Err(e) = engine.rescan_gpus() {
                    tracing::warn!(uuid = %self.uuid, error = %e, "could not scan the GPUs again");
                }
            }
            let functions: Vec<String> = [reg.devices.get(&self.uuid), device.as_ref()]
                .into_iter()
                .flatten()
                .filter(|d| d.kind == DeviceKind::SriovVgpu)
                .filter_map(|d| d.address.clone())
                .collect();
            engine.record(&mut reg, &self.uuid, device, events::Origin::Vgpud);
            engine.events.flush();
            reg.in_flight.remove(&self.uuid);
            reg.touched.insert(self.uuid.clone());
            reg.touched_functions.extend(functions);
        });
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        lock(&self.engine.registry).in_flight.remove(&self.uuid);
    }
}

/// The errno values the engine tells apart.
mod libc_errno {
    pub const EAGAIN: i32 = nix::errno::Errno::EAGAIN as i32;
    pub const EBUSY: i32 = nix::errno::Errno::EBUSY as i32;
    pub const EEXIST: i32 = nix::errno::Errno::EEXIST as i32;
    pub const EINVAL: i32 = nix::errno::Errno::EINVAL as i32;
    pub const EIO: i32 = nix::errno::Errno::EIO as i32;
    pub const EPERM: i32 = nix::errno::Errno::EPERM as i32;
    pub const ERANGE: i32 = nix::errno::Errno::ERANGE as i32;
    pub const ENODEV: i32 = nix::errno::Errno::ENODEV as i32;
    pub const ENOENT: i32 = nix::errno::Errno::ENOENT as i32;
    pub const ENOSPC: i32 = nix::errno::Errno::ENOSPC as i32;
    pub const EUSERS: i32 = nix::errno::Errno::EUSERS as i32;
}
