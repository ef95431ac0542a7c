//! Kernel uevents applied as the smallest update of what the engine knows: an mdev's event
//! reads that one device again (and its parent's types); a parent's registration, a VF's
//! arrival or departure and a driver's bind or unbind read that function's GPU again (its
//! physical function and VFs, not the whole inventory), and the vgpud devices on that
//! function. The changes go out through the event stream as a look's
//! do. A uevent is only a hint of where to look: what is applied is always read from the
//! host, never taken from the message.

use std::collections::{BTreeMap, BTreeSet};

use super::reconcile::Merged;
use super::{lock, DeviceChanges, DeviceInfo, Engine, EngineError, EngineResult};
use crate::discovery;
use crate::host::uevent::Uevent;
use crate::model::DeviceKind;
use crate::persist::state;

/// What a uevent led to, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UeventUpdate {
    /// One mdev read again.
    Device {
        /// Its UUID.
        uuid: String,
        /// What changed: `added`, `removed`, `updated` or `unchanged`.
        change: &'static str,
    },
    /// The function's GPU read again (a parent registered or went, a VF came or went, a
    /// function changed drivers), and with it the vgpud devices on that function.
    Gpus {
        /// GPUs that appeared.
        added: Vec<String>,
        /// GPUs that went.
        removed: Vec<String>,
        /// vgpud devices on the function read again.
        devices: usize,
    },
    /// To be applied again once vgpud's own operations in flight are done (they publish
    /// the state they leave; a reading in the middle would publish one they pass through).
    Deferred,
    /// An mdev that an operation of vgpud's own is on (its create, start, stop or removal,
    /// whose uevents these usually are): the operation publishes the state it leaves, so the
    /// device is not read now (its GPU's types are forgotten as for any mdev event).
    Own {
        /// Its UUID.
        uuid: String,
    },
    /// Nothing vgpud manages.
    Ignored,
}

impl std::fmt::Display for UeventUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UeventUpdate::Device { uuid, change } => write!(f, "device {uuid} read again: {change}"),
            UeventUpdate::Gpus {
                added,
                removed,
                devices,
            } => write!(
                f,
                "its GPU read again (added {added:?}, removed {removed:?}); {devices} device(s) on the function read again"
            ),
            UeventUpdate::Deferred => f.write_str("deferred until vgpud's own operation is done"),
            UeventUpdate::Own { uuid } => {
                write!(f, "device {uuid}: vgpud's own operation publishes its outcome")
            }
            UeventUpdate::Ignored => f.write_str("nothing vgpud manages"),
        }
    }
}

impl Engine {
    /// Applies one uevent (see the module's documentation).
    pub fn apply_uevent(&self, ev: &Uevent) -> EngineResult<UeventUpdate> {
        match ev.subsystem() {
            Some("mdev") => {
                let Some(uuid) = crate::model::normalize_uuid(ev.name()) else {
                    return Ok(UeventUpdate::Ignored);
                };
                // A reading now would be thrown away: a look leaves a device in flight to its
                // operation.
                let own = lock(&self.registry).in_flight.contains(&uuid);
                let change = if own {
                    None
                } else {
                    Some(self.refresh_device(&uuid)?)
                };
                // Its GPU's room changed all the same (also when the operation fails after
                // the kernel's part).
                if let Some(parent) = ev.parent_name() {
                    self.forget_types_of(parent);
                }
                Ok(match change {
                    Some(change) => UeventUpdate::Device { uuid, change },
                    None => UeventUpdate::Own { uuid },
                })
            }
            Some("pci") => self.pci_uevent(ev),
            // A parent of another bus or class (mtty's) registering or going.
            _ if ev.get("MDEV_STATE").is_some() => self.pci_uevent(ev),
            _ => Ok(UeventUpdate::Ignored),
        }
    }

    /// Reads one mdev again (sysfs, and its definition when vgpud does not know it) and
    /// applies it as a look would, leaving it alone while an operation of vgpud's own is on
    /// it (that operation publishes its own outcome).
    fn refresh_device(&self, uuid: &str) -> EngineResult<&'static str> {
        let _one_at_a_time = self.begin_refresh();
        let known = self.device(uuid);
        let active = discovery::read_device_settled(&self.host, uuid)
            .map_err(|e| EngineError::host(format!("reading device {uuid}"), e))?;
        let from_disk = |parent: &str| self.info_from_disk(uuid, parent);
        let info = match (active, &known) {
            (Some(dev), Some(k)) => Some(self.describe_active(dev, Some(k))),
            (Some(dev), None) => {
                let def = from_disk(&dev.parent);
                let mut info = self.describe_active(dev, def.as_ref());
                info.persistent = def.is_some();
                Some(info)
            }
            (None, Some(k)) if k.persistent => Some(
                from_disk(&k.parent)
                    .map(|mut d| {
                        d.owner = k.owner.clone();
                        d.created = k.created;
                        d
                    })
                    .unwrap_or_else(|| DeviceInfo {
                        active: false,
                        iommu_group: None,
                        ..k.clone()
                    }),
            ),
            // Gone and not defined, or never known: nothing to list (a definition alone
            // comes through the definitions' watcher, not a uevent).
            (None, _) => None,
        };
        let change = match (&known, &info) {
            (None, Some(_)) => "added",
            (Some(_), None) => "removed",
            (Some(a), Some(b)) if a != b => "updated",
            _ => "unchanged",
        };
        let devices: BTreeMap<String, DeviceInfo> =
            info.into_iter().map(|i| (uuid.to_string(), i)).collect();
        let scope: BTreeSet<String> = [uuid.to_string()].into_iter().collect();
        let changes = self.apply_in(
            Merged {
                devices,
                stale_records: Vec::new(),
            },
            false,
            Some(&scope),
        );
        self.publish_drift(&changes);
        Ok(change)
    }

    fn publish_drift(&self, changes: &DeviceChanges) {
        self.events
            .send_all(changes.drift.iter().cloned().map(super::Event::Drift));
    }

    /// A PCI function's event: its GPU is read again when the function is (or becomes) a
    /// GPU, a VF or an mdev parent, and the vgpud devices on it are read again.
    fn pci_uevent(&self, ev: &Uevent) -> EngineResult<UeventUpdate> {
        let function = ev.name();
        let known = self.gpus().contains_key(function);
        let relevant = known
            || ev.get("MDEV_STATE").is_some()
            || matches!(ev.action.as_str(), "add" | "remove")
            || ev.get("PCI_CLASS").is_some_and(|c| c.starts_with('3'))
            || ev.get("DRIVER").is_some_and(|d| d == "nvidia");
        let on_devices: BTreeSet<String> = lock(&self.registry)
            .devices
            .values()
            .filter(|d| d.kind != DeviceKind::Mdev)
            .filter(|d| {
                d.address.as_deref() == Some(function)
                    || d.functions.iter().any(|f| f.address == function)
            })
            .map(|d| d.uuid.clone())
            .collect();
        if !relevant && on_devices.is_empty() {
            return Ok(UeventUpdate::Ignored);
        }
        // An operation of vgpud's own on that GPU (a passthrough taking or giving back its
        // functions) holds the GPU's lock and publishes its outcome itself: a reading in the
        // middle of it would publish a state it only passes through. The reading waits for
        // it, and no operation starts on the GPU while the reading runs.
        let mut gpus: BTreeSet<String> = [self.gpu_of_parent(function)].into_iter().collect();
        {
            let reg = lock(&self.registry);
            gpus.extend(
                on_devices
                    .iter()
                    .filter_map(|u| reg.devices.get(u).map(|d| self.gpu_of_parent(&d.parent))),
            );
        }
        let mut locks: Vec<std::sync::Arc<std::sync::Mutex<()>>> = Vec::new();
        for l in gpus.iter().filter_map(|g| self.gpu_lock(g)) {
            // A VF shares its GPU's lock.
            if !locks.iter().any(|k| std::sync::Arc::ptr_eq(k, &l)) {
                locks.push(l);
            }
        }
        let held: Vec<_> = locks.iter().map(|l| lock(l)).collect();
        // An operation that moved functions publishes the GPU with its device once it is
        // done, after the GPU's lock: until then the event waits.
        let busy = {
            let reg = lock(&self.registry);
            reg.in_flight.iter().any(|u| match reg.devices.get(u) {
                Some(d) => {
                    d.kind != DeviceKind::Mdev && gpus.contains(&self.gpu_of_parent(&d.parent))
                }
                // A create: its GPU is not known yet.
                None => true,
            })
        };
        if busy {
            return Ok(UeventUpdate::Deferred);
        }
        let (added, removed) = self.rescan_gpu_of(function)?;
        self.forget_types_of(function);
        // (A look takes the GPUs' locks after its own: released first.)
        drop(held);
        // NVML's view of that GPU may have changed with it (a driver bound or gone).
        self.refresh_nvidia_of(&self.gpu_of_parent(function));
        if !on_devices.is_empty() {
            self.refresh_pci_devices(&on_devices)?;
        }
        let mut changes = DeviceChanges::default();
        self.start_autostart_of(&added, &mut changes);
        Ok(UeventUpdate::Gpus {
            added,
            removed,
            devices: on_devices.len(),
        })
    }

    /// Reads the SR-IOV vGPUs and passthrough devices `uuids` again from their records and
    /// the host.
    fn refresh_pci_devices(&self, uuids: &BTreeSet<String>) -> EngineResult<()> {
        let _one_at_a_time = self.begin_refresh();
        let records = state::read_all(&self.host)
            .map_err(|e| EngineError::persist("reading device records", e))?;
        let records: Vec<&state::DeviceRecord> =
            records.iter().filter(|r| uuids.contains(&r.uuid)).collect();
        let mut devices = BTreeMap::new();
        self.merge_pci(&records, &mut devices)?;
        devices.retain(|u, _| uuids.contains(u));
        let changes = self.apply_in(
            Merged {
                devices,
                stale_records: Vec::new(),
            },
            false,
            Some(uuids),
        );
        self.publish_drift(&changes);
        Ok(())
    }
}
