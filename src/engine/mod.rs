//! The core: what GPUs and devices exist, where a new device goes, and creating and removing
//! devices safely under concurrency. It knows nothing of D-Bus; the adapter in
//! [`crate::dbus`] calls it and maps [`EngineError`] to bus errors.
//!
//! Concurrency: every GPU has its own lock, held while its capacity is read and its device is
//! created or removed, so two calls never over-commit a GPU and calls on different GPUs never
//! wait for each other. The device registry has a short-held lock of its own; a UUID being
//! created or removed is marked in flight, so a second call for it fails cleanly instead of
//! racing.

mod error;
mod request;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::discovery::{self, GpuLocation};
use crate::host::Host;
use crate::model::{Gpu, MdevDevice, MdevType, TypeDetails};
use crate::xml;

pub use error::{EngineError, EngineResult, Refusal};
pub use request::{CreateRequest, HostdevOptions};

/// A device as vgpud reports it.
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
    /// IOMMU group of the device.
    pub iommu_group: Option<u32>,
    /// Vendor attributes (`nvidia/vgpu_params`).
    pub attributes: BTreeMap<String, String>,
}

/// Devices that appeared or vanished since the last look at the host.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DeviceChanges {
    /// Devices found that vgpud did not know (created by another tool), now adopted.
    pub added: Vec<DeviceInfo>,
    /// Devices vgpud knew that no longer exist.
    pub removed: Vec<DeviceInfo>,
}

struct GpuEntry {
    gpu: Gpu,
    location: GpuLocation,
    lock: Arc<Mutex<()>>,
}

#[derive(Default)]
struct Registry {
    devices: BTreeMap<String, DeviceInfo>,
    in_flight: BTreeSet<String>,
}

/// The engine: inventory, registry and the operations on them.
pub struct Engine {
    host: Host,
    gpus: RwLock<BTreeMap<String, GpuEntry>>,
    registry: Mutex<Registry>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves consistent data (every update is a
    // single insert or remove), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Engine {
    /// Scans the host and adopts every device found on it.
    pub fn new(host: Host) -> EngineResult<Self> {
        let engine = Engine {
            host,
            gpus: RwLock::new(BTreeMap::new()),
            registry: Mutex::new(Registry::default()),
        };
        engine.rescan_gpus()?;
        engine.refresh_devices()?;
        Ok(engine)
    }

    /// The host this engine manages.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Scans the GPUs and their types again.
    pub fn rescan_gpus(&self) -> EngineResult<()> {
        let scanned =
            discovery::scan_gpus(&self.host).map_err(|e| EngineError::host("scanning GPUs", e))?;
        let mut gpus = self.gpus.write().unwrap_or_else(|e| e.into_inner());
        let mut next = BTreeMap::new();
        for (gpu, location) in scanned {
            let lock = gpus
                .get(&gpu.address)
                .map(|e| e.lock.clone())
                .unwrap_or_default();
            next.insert(
                gpu.address.clone(),
                GpuEntry {
                    gpu,
                    location,
                    lock,
                },
            );
        }
        *gpus = next;
        Ok(())
    }

    fn gpus(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, GpuEntry>> {
        self.gpus.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Every GPU, with its types as discovered (available counts as of the last scan).
    pub fn list_gpus(&self) -> Vec<Gpu> {
        self.gpus().values().map(|e| e.gpu.clone()).collect()
    }

    /// One GPU by address.
    pub fn gpu(&self, address: &str) -> Option<Gpu> {
        self.gpus().get(address).map(|e| e.gpu.clone())
    }

    /// The sysfs directory of a GPU.
    pub fn gpu_dir(&self, address: &str) -> Option<PathBuf> {
        self.gpus().get(address).map(|e| e.location.dir.clone())
    }

    /// Every type of every GPU, with available instances read from the host now.
    pub fn list_types(&self) -> EngineResult<Vec<(String, MdevType)>> {
        let gpus = self.gpus();
        let mut out = Vec::new();
        for entry in gpus.values() {
            for ty in &entry.gpu.types {
                let mut ty = ty.clone();
                ty.available_instances = self.available(&entry.gpu.address, &ty.id)?;
                out.push((entry.gpu.address.clone(), ty));
            }
        }
        Ok(out)
    }

    fn available(&self, parent: &str, type_id: &str) -> EngineResult<u32> {
        discovery::read_available(
            &self.host,
            &discovery::mdev_type_dir(&self.host, parent, type_id),
        )
        .map_err(|e| EngineError::host(format!("reading capacity of {type_id} on {parent}"), e))
    }

    /// Every known device.
    pub fn list_devices(&self) -> Vec<DeviceInfo> {
        lock(&self.registry).devices.values().cloned().collect()
    }

    /// One device by UUID (any case).
    pub fn device(&self, uuid: &str) -> Option<DeviceInfo> {
        let uuid = crate::model::normalize_uuid(uuid)?;
        lock(&self.registry).devices.get(&uuid).cloned()
    }

    /// Devices of one GPU.
    pub fn devices_of(&self, parent: &str) -> Vec<DeviceInfo> {
        lock(&self.registry)
            .devices
            .values()
            .filter(|d| d.parent == parent)
            .cloned()
            .collect()
    }

    /// Compares the registry with the host: adopts devices created by other tools (with an
    /// empty owner) and forgets devices that vanished. Devices in flight are left alone.
    pub fn refresh_devices(&self) -> EngineResult<DeviceChanges> {
        let found = discovery::scan_devices(&self.host)
            .map_err(|e| EngineError::host("scanning mdev devices", e))?;
        let found: Vec<DeviceInfo> = found
            .into_iter()
            .map(|d| self.describe(d, String::new()))
            .collect();
        let mut reg = lock(&self.registry);
        let mut changes = DeviceChanges::default();
        let present: BTreeSet<&str> = found.iter().map(|d| d.uuid.as_str()).collect();
        let vanished: Vec<String> = reg
            .devices
            .keys()
            .filter(|u| !present.contains(u.as_str()) && !reg.in_flight.contains(*u))
            .cloned()
            .collect();
        for uuid in vanished {
            if let Some(d) = reg.devices.remove(&uuid) {
                changes.removed.push(d);
            }
        }
        for dev in found {
            if reg.in_flight.contains(&dev.uuid) {
                continue;
            }
            match reg.devices.get_mut(&dev.uuid) {
                Some(known) => {
                    let owner = std::mem::take(&mut known.owner);
                    *known = DeviceInfo { owner, ..dev };
                }
                None => {
                    changes.added.push(dev.clone());
                    reg.devices.insert(dev.uuid.clone(), dev);
                }
            }
        }
        Ok(changes)
    }

    fn describe(&self, dev: MdevDevice, owner: String) -> DeviceInfo {
        let type_name = self
            .gpus()
            .get(&dev.parent)
            .and_then(|e| e.gpu.types.iter().find(|t| t.id == dev.type_id))
            .map(|t| t.name.clone())
            .unwrap_or_else(|| dev.type_id.clone());
        DeviceInfo {
            uuid: dev.uuid,
            parent: dev.parent,
            type_id: dev.type_id,
            type_name,
            owner,
            iommu_group: dev.iommu_group,
            attributes: dev.attributes,
        }
    }

    /// Marks a UUID in flight; fails if it exists or another call holds it.
    fn claim(&self, uuid: &str, creating: bool) -> EngineResult<InFlight<'_>> {
        let mut reg = lock(&self.registry);
        if reg.in_flight.contains(uuid) {
            return Err(EngineError::Busy(format!(
                "another call is creating or removing device {uuid}"
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

    /// Creates a device of the requested type on a GPU that can take it.
    pub fn create_device(&self, req: &CreateRequest) -> EngineResult<DeviceInfo> {
        let req = &req.clone().normalized()?;
        req.validate()?;
        let candidates = self.candidates(req)?;
        let uuid = match &req.uuid {
            Some(u) => u.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let claim = self.claim(&uuid, true)?;
        let mut refusals = Vec::new();
        for (parent, ty) in &candidates {
            let gpu_lock = match self.gpus().get(parent) {
                Some(e) => e.lock.clone(),
                None => continue,
            };
            let _held = lock(&gpu_lock);
            match self.try_create_on(parent, ty, &uuid, req)? {
                Attempt::Created(dev) => {
                    let info = self.describe(dev, req.owner.clone());
                    claim.finish(Some(info.clone()));
                    return Ok(info);
                }
                Attempt::Refused(reason) => refusals.push(Refusal {
                    gpu: parent.clone(),
                    reason,
                }),
            }
        }
        Err(EngineError::NoCapacity {
            type_query: req.type_query.clone(),
            refusals,
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
        let mut matches: Vec<(String, MdevType)> = gpus
            .values()
            .filter(|e| req.parent.as_ref().is_none_or(|p| *p == e.gpu.address))
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
            let place = req
                .parent
                .as_ref()
                .map(|p| format!("GPU {p}"))
                .unwrap_or_else(|| "any GPU on this host".to_string());
            return Err(EngineError::NotFound(format!(
                "{place} offers no type {:?}",
                req.type_query
            )));
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
        let reg = lock(&self.registry);
        let running = |parent: &str, ty: &str| {
            reg.devices
                .values()
                .any(|d| d.parent == parent && d.type_id == ty)
        };
        matches.sort_by_key(|(parent, ty)| (!running(parent, &ty.id), parent.clone()));
        Ok(matches)
    }

    /// One attempt on one GPU, with its lock held.
    fn try_create_on(
        &self,
        parent: &str,
        ty: &MdevType,
        uuid: &str,
        req: &CreateRequest,
    ) -> EngineResult<Attempt> {
        let available = self.available(parent, &ty.id)?;
        if available == 0 {
            return Ok(Attempt::Refused(self.why_full(parent, ty)));
        }
        let create = discovery::mdev_type_dir(&self.host, parent, &ty.id).join("create");
        if let Err(e) = self.host.write_attr(&create, uuid) {
            return match e.errno() {
                Some(
                    libc_errno::ENOSPC
                    | libc_errno::EUSERS
                    | libc_errno::EBUSY
                    | libc_errno::EAGAIN,
                ) => Ok(Attempt::Refused(format!(
                    "the driver refused a {} ({e})",
                    ty.name
                ))),
                Some(libc_errno::ENODEV) => {
                    Ok(Attempt::Refused(format!("the GPU went away ({e})")))
                }
                Some(libc_errno::EEXIST) => Err(EngineError::Exists(format!(
                    "device {uuid} already exists ({e})"
                ))),
                Some(libc_errno::EINVAL) => Err(EngineError::InvalidArgument(format!(
                    "the kernel rejected device {uuid} ({e})"
                ))),
                _ => Err(EngineError::host(format!("creating {uuid} on {parent}"), e)),
            };
        }
        if let Some(params) = &req.params {
            let path = discovery::mdev_device_dir(&self.host, uuid).join("nvidia/vgpu_params");
            if let Err(e) = self.host.write_attr(&path, params) {
                self.undo_create(uuid);
                return Err(EngineError::InvalidArgument(format!(
                    "the driver rejected params {params:?} for {uuid}, so the device was not kept ({e})"
                )));
            }
        }
        match discovery::read_device(&self.host, uuid) {
            Ok(Some(dev)) => Ok(Attempt::Created(dev)),
            Ok(None) => Err(EngineError::host(
                format!("reading back {uuid}"),
                crate::host::HostError::Parse {
                    path: discovery::mdev_device_dir(&self.host, uuid),
                    reason: "the device did not appear after create".into(),
                },
            )),
            Err(e) => {
                self.undo_create(uuid);
                Err(EngineError::host(format!("reading back {uuid}"), e))
            }
        }
    }

    fn undo_create(&self, uuid: &str) {
        let remove = discovery::mdev_device_dir(&self.host, uuid).join("remove");
        if let Err(e) = self.host.write_attr(&remove, "1") {
            tracing::error!(%uuid, error = %e, "could not remove a half-made device");
        }
    }

    /// Explains why a GPU has no room for a type.
    fn why_full(&self, parent: &str, ty: &MdevType) -> String {
        let on_gpu = self.devices_of(parent);
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

    /// Removes a device by UUID.
    pub fn remove_device(&self, uuid: &str) -> EngineResult<DeviceInfo> {
        let uuid = request::parse_uuid(uuid)?;
        let claim = self.claim(&uuid, false)?;
        let dev = discovery::read_device(&self.host, &uuid)
            .map_err(|e| EngineError::host(format!("reading {uuid}"), e))?
            .ok_or_else(|| EngineError::NotFound(format!("no device {uuid} on this host")))?;
        let owner = self.device(&uuid).map(|d| d.owner).unwrap_or_default();
        let info = self.describe(dev, owner);
        let gpu_lock = self.gpus().get(&info.parent).map(|e| e.lock.clone());
        let _held = gpu_lock.as_ref().map(|l| lock(l));
        let remove = discovery::mdev_device_dir(&self.host, &uuid).join("remove");
        if let Err(e) = self.host.write_attr(&remove, "1") {
            return Err(match e.errno() {
                Some(libc_errno::EBUSY) => {
                    EngineError::Busy(format!("device {uuid} is in use ({e})"))
                }
                Some(libc_errno::ENOENT) => {
                    EngineError::NotFound(format!("device {uuid} vanished ({e})"))
                }
                _ => EngineError::host(format!("removing {uuid}"), e),
            });
        }
        claim.finish(None);
        Ok(info)
    }

    /// The libvirt `<hostdev>` element for a device.
    pub fn hostdev_xml(&self, uuid: &str, opts: &HostdevOptions) -> EngineResult<String> {
        let uuid = request::parse_uuid(uuid)?;
        if self.device(&uuid).is_none() {
            return Err(EngineError::NotFound(format!(
                "no device {uuid} on this host"
            )));
        }
        xml::render_mdev_hostdev(&xml::MdevHostdev {
            uuid: uuid.clone(),
            display: opts.display,
            ramfb: opts.ramfb,
        })
        .map_err(|e| match e {
            xml::XmlError::InvalidInput { .. } => EngineError::InvalidArgument(e.to_string()),
            other => EngineError::Xml {
                uuid,
                message: other.to_string(),
            },
        })
    }
}

enum Attempt {
    Created(MdevDevice),
    Refused(String),
}

/// A UUID held in flight; dropping it without [`InFlight::finish`] releases it unchanged.
struct InFlight<'a> {
    engine: &'a Engine,
    uuid: String,
}

impl InFlight<'_> {
    /// Releases the UUID, recording the device as it now is (`None`: it no longer exists).
    fn finish(self, device: Option<DeviceInfo>) {
        let mut reg = lock(&self.engine.registry);
        match device {
            Some(d) => {
                reg.devices.insert(d.uuid.clone(), d);
            }
            None => {
                reg.devices.remove(&self.uuid);
            }
        }
        reg.in_flight.remove(&self.uuid);
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
    pub const ENODEV: i32 = nix::errno::Errno::ENODEV as i32;
    pub const ENOENT: i32 = nix::errno::Errno::ENOENT as i32;
    pub const ENOSPC: i32 = nix::errno::Errno::ENOSPC as i32;
    pub const EUSERS: i32 = nix::errno::Errno::EUSERS as i32;
}
