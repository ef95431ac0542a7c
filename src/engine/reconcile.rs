//! Reconciling what should exist (mdevctl definitions and vgpud's records) with what does
//! (sysfs): replaying the intents a crash left open, restoring devices at start in boot order,
//! and noticing drift, new definitions and GPUs that come and go while running.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::lifecycle::{attr_map, VGPU_PARAMS};
use super::{lock, DeviceChanges, DeviceInfo, Drift, Engine, EngineError, EngineResult, Origin};
use crate::discovery;
use crate::model::{DeviceKind, MdevDevice};
use crate::persist::intent::{self, Operation};
use crate::persist::{self, mdevctl, state};

/// The stages of a restore, in boot order. Each waits for the devices the previous stage
/// makes (VFs are the parents of SR-IOV vGPUs, GPU instances back MIG vGPUs, …). Only
/// [`Stage::Mdevs`] has steps so far; the others are where later kinds of device go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// SR-IOV virtual functions.
    SriovVfs,
    /// MIG GPU and compute instances.
    MigInstances,
    /// vGPU modes (heterogeneous mode and the like).
    VgpuModes,
    /// The time-slice scheduler.
    Scheduler,
    /// vGPU types written to SR-IOV functions.
    SriovVgpuTypes,
    /// Mediated devices.
    Mdevs,
    /// Passthrough bindings.
    Passthrough,
}

/// What is recorded for a physical function, and its VF count now: the input of the first
/// stages of [`plan_restore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRestore {
    /// The physical function.
    pub pf: String,
    /// The recorded VF count.
    pub num_vfs: u32,
    /// The VF count now.
    pub current_vfs: u32,
    /// NVIDIA's heterogeneous vGPU mode is recorded.
    pub heterogeneous: bool,
    /// The MIG mode recorded, if vgpud set one.
    pub mig_mode: Option<bool>,
    /// GPU instances are recorded.
    pub gpu_instances: bool,
    /// A scheduler setting is recorded.
    pub scheduler: bool,
}

/// One step of a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreStep {
    /// Enable (or disable) the recorded number of VFs on a physical function.
    SetVfCount {
        /// The physical function.
        pf: String,
        /// The recorded count.
        count: u32,
    },
    /// Check that a GPU is in the recorded MIG mode (the GPU keeps the mode across reboots;
    /// a difference is reported).
    CheckMigMode {
        /// The physical function.
        pf: String,
        /// The recorded mode.
        enabled: bool,
    },
    /// Make the recorded GPU instances again at their placements (after the VFs, whose
    /// enablement destroys GPU instances, and before the vGPUs in them).
    RestoreGpuInstances {
        /// The physical function.
        pf: String,
    },
    /// Apply the recorded vGPU scheduler at runtime (before any vGPU runs).
    SetScheduler {
        /// The physical function.
        pf: String,
    },
    /// Set NVIDIA's heterogeneous vGPU mode of a GPU (after its VFs, before its vGPUs).
    SetHeterogeneous {
        /// The physical function.
        pf: String,
    },
    /// Wait (bounded) until these parents exist.
    WaitForParents {
        /// The stage the parents are needed for.
        stage: Stage,
        /// Parent device names.
        parents: Vec<String>,
    },
    /// Start a recorded device.
    Start {
        /// The stage it belongs to.
        stage: Stage,
        /// The device.
        uuid: String,
        /// Its parent.
        parent: String,
    },
}

/// The stage a device of a kind is started in.
pub fn stage_of(kind: DeviceKind) -> Stage {
    match kind {
        DeviceKind::SriovVgpu => Stage::SriovVgpuTypes,
        DeviceKind::Mdev => Stage::Mdevs,
        DeviceKind::Passthrough => Stage::Passthrough,
    }
}

/// Plans the restore at start, in boot order: the recorded VF counts that differ from the
/// host's; the MIG mode checks; the GPU instances (after the VFs: `sriov-manage -e` destroys
/// them); the recorded vGPU modes; the scheduler settings; then every persistent, autostart
/// device that is not active, stage by stage (SR-IOV vGPUs, mdevs, passthrough); within a
/// stage, first the wait for its parents, then the devices by parent and UUID. A pure
/// function: the order is unit-tested.
pub fn plan_restore(devices: &[DeviceInfo], gpus: &[GpuRestore]) -> Vec<RestoreStep> {
    let mut steps: Vec<RestoreStep> = gpus
        .iter()
        .filter(|g| g.num_vfs != g.current_vfs)
        .map(|g| RestoreStep::SetVfCount {
            pf: g.pf.clone(),
            count: g.num_vfs,
        })
        .collect();
    steps.extend(gpus.iter().filter_map(|g| {
        g.mig_mode.map(|enabled| RestoreStep::CheckMigMode {
            pf: g.pf.clone(),
            enabled,
        })
    }));
    steps.extend(
        gpus.iter()
            .filter(|g| g.gpu_instances && g.mig_mode != Some(false))
            .map(|g| RestoreStep::RestoreGpuInstances { pf: g.pf.clone() }),
    );
    steps.extend(
        gpus.iter()
            .filter(|g| g.heterogeneous && g.num_vfs > 0)
            .map(|g| RestoreStep::SetHeterogeneous { pf: g.pf.clone() }),
    );
    steps.extend(
        gpus.iter()
            .filter(|g| g.scheduler)
            .map(|g| RestoreStep::SetScheduler { pf: g.pf.clone() }),
    );
    let mut by_stage: BTreeMap<Stage, Vec<(String, String)>> = BTreeMap::new();
    for d in devices
        .iter()
        .filter(|d| d.persistent && d.autostart && !d.active)
    {
        by_stage
            .entry(stage_of(d.kind))
            .or_default()
            .push((d.parent.clone(), d.uuid.clone()));
    }
    for (stage, mut starts) in by_stage {
        starts.sort();
        let parents: BTreeSet<String> = starts.iter().map(|(p, _)| p.clone()).collect();
        steps.push(RestoreStep::WaitForParents {
            stage,
            parents: parents.into_iter().collect(),
        });
        steps.extend(starts.into_iter().map(|(parent, uuid)| RestoreStep::Start {
            stage,
            uuid,
            parent,
        }));
    }
    steps
}

/// What a restore did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Devices started.
    pub started: Vec<String>,
    /// Devices that could not be started, and why.
    pub failed: Vec<(String, String)>,
    /// Parents that did not appear in time; their devices start when they do.
    pub missing_parents: Vec<String>,
    /// VF counts set again, by physical function.
    pub vf_counts: Vec<(String, u32)>,
    /// GPU instances made again, by physical function.
    pub gpu_instances: Vec<(String, usize)>,
}

/// The devices that should be known: active ones, defined ones, recorded ones; and the
/// records of devices that neither exist nor are defined (transient devices that are gone).
pub(super) struct Merged {
    pub(super) devices: BTreeMap<String, DeviceInfo>,
    pub(super) stale_records: Vec<String>,
}

/// The rule for forgetting a record: a record is dropped only when its device is really
/// gone, that is when the look at the host found no device of that UUID to list (none is
/// active, it has no definition, it is not a persistent SR-IOV vGPU or passthrough device,
/// whose record is their definition) and no definition of that UUID was set aside as bad.
/// A record whose definition cannot be read is never dropped: the device stays known,
/// inactive, and the operator decides. (Devices in flight are spared by the caller.)
pub(super) fn stale_records<'a>(
    records: impl IntoIterator<Item = &'a str>,
    devices: &BTreeMap<String, DeviceInfo>,
    set_aside: &BTreeSet<String>,
) -> Vec<String> {
    records
        .into_iter()
        .filter(|u| !devices.contains_key(*u) && !set_aside.contains(*u))
        .map(str::to_string)
        .collect()
}

impl Engine {
    /// Completes or rolls back every intent a crash left open, then sweeps temporary files.
    pub(super) fn replay_intents(&self) -> EngineResult<()> {
        let intents = intent::read_all(&self.host)
            .map_err(|e| EngineError::persist("reading the intent journal", e))?;
        for open in intents {
            let uuid = open.uuid.clone();
            let device = discovery::read_device(&self.host, &uuid)
                .map_err(|e| EngineError::host(format!("reading {uuid}"), e))?;
            let outcome = self.replay_one(&uuid, &open.operation, device);
            match &outcome {
                Ok(what) => tracing::info!(%uuid, "intent left by a crash: {what}"),
                Err(e) => tracing::error!(%uuid, error = %e, "could not replay an intent"),
            }
            outcome?;
            intent::close_replayed(&self.host, &uuid)
                .map_err(|e| EngineError::persist(format!("closing the intent of {uuid}"), e))?;
        }
        let mut dirs = vec![
            state::dir(&self.host),
            intent::dir(&self.host),
            persist::sriov::dir(&self.host),
        ];
        let base = mdevctl::base_dir(&self.host);
        dirs.push(base.clone());
        if let Ok(parents) = std::fs::read_dir(&base) {
            dirs.extend(parents.flatten().map(|e| e.path()));
        }
        persist::forget_spares(self.host.root());
        for dir in dirs {
            if let Err(e) = persist::sweep_temporaries(&dir) {
                tracing::warn!(error = %e, "could not sweep temporary files");
            }
        }
        Ok(())
    }

    fn replay_one(
        &self,
        uuid: &str,
        op: &Operation,
        device: Option<MdevDevice>,
    ) -> EngineResult<&'static str> {
        let persist_err = |what: &str| {
            let what = format!("{what} {uuid}");
            move |e| EngineError::persist(what, e)
        };
        match (op, device) {
            (
                Operation::Create {
                    owner,
                    params,
                    persistent,
                    autostart,
                    ..
                },
                Some(dev),
            ) => {
                if let Some(p) = params {
                    let path = discovery::mdev_device_dir(&self.host, uuid).join(VGPU_PARAMS);
                    if let Err(e) = self.host.write_attr(&path, p) {
                        tracing::warn!(%uuid, error = %e, "could not rewrite vgpu_params");
                    }
                }
                self.persist_new(dev, owner, params.as_deref(), *persistent, *autostart)?;
                Ok("the device exists, so the create was completed")
            }
            // Its commit landed (acknowledged, and synced), and then the host lost the device:
            // a power cut, whose reboot takes the device but not what was committed.
            (
                Operation::Create {
                    persistent: true, ..
                },
                None,
            ) if self.committed(uuid) => {
                Ok("the device was defined and recorded before the host lost it; it stays defined")
            }
            (Operation::Create { .. }, None) => {
                self.remove_definitions_of(uuid)?;
                state::remove(&self.host, uuid).map_err(persist_err("forgetting"))?;
                Ok("the device does not exist, so the create was rolled back")
            }
            (Operation::Remove { parent }, device) => {
                if device.is_some() {
                    self.write_remove(uuid)?;
                }
                mdevctl::remove(&self.host, parent, uuid).map_err(persist_err("undefining"))?;
                self.remove_definitions_of(uuid)?;
                state::remove(&self.host, uuid).map_err(persist_err("forgetting"))?;
                Ok("the removal was completed")
            }
            (Operation::Start { parent }, Some(_)) => {
                let info = self.info_from_disk(uuid, parent);
                let attrs = info.map(|i| self.definition_attrs(&i)).unwrap_or_default();
                for (key, value) in attrs {
                    let path = discovery::mdev_device_dir(&self.host, uuid).join(&key);
                    if let Err(e) = self.host.write_attr(&path, &value) {
                        tracing::warn!(%uuid, %key, error = %e, "could not rewrite an attribute");
                    }
                }
                Ok("the device was started, its attributes were written again")
            }
            (Operation::Start { .. }, None) => Ok("the device did not start; it stays defined"),
            (Operation::Assign { .. }, _) => self.replay_assign(uuid, op),
            (
                Operation::Release {
                    kind,
                    address,
                    type_id,
                    functions,
                    keep,
                    ..
                },
                _,
            ) => {
                let kind: DeviceKind = (*kind).into();
                self.finish_release(kind, address, type_id, functions)?;
                if !*keep {
                    state::remove(&self.host, uuid).map_err(persist_err("forgetting"))?;
                } else if kind == DeviceKind::SriovVgpu {
                    self.forget_vf_of(uuid)?;
                }
                Ok("the release was completed")
            }
            (Operation::Stop { .. }, Some(_)) => {
                self.write_remove(uuid)?;
                Ok("the stop was completed")
            }
            (Operation::Stop { .. }, None) => Ok("the device was already stopped"),
            (
                Operation::Modify {
                    parent,
                    persistent,
                    autostart,
                },
                device,
            ) => {
                let info = match device {
                    Some(dev) => Some(self.describe_active(dev, None)),
                    None => self.info_from_disk(uuid, parent),
                };
                match info {
                    Some(info) => {
                        let owner = state::read_all(&self.host)
                            .ok()
                            .and_then(|r| r.into_iter().find(|r| r.uuid == uuid))
                            .map(|r| r.owner)
                            .unwrap_or_default();
                        self.apply_persistence(
                            &DeviceInfo { owner, ..info },
                            *persistent,
                            *autostart,
                        )?;
                        Ok("the persistence change was applied again")
                    }
                    None => Ok("the device is gone; nothing to change"),
                }
            }
        }
    }

    /// A device described from its definition on disk, if it has one.
    pub(super) fn info_from_disk(&self, uuid: &str, parent: &str) -> Option<DeviceInfo> {
        let def = mdevctl::read(&self.host, parent, uuid).ok().flatten()?;
        Some(self.describe_defined(&def, None))
    }

    /// Whether a create's commit landed: the device's definition and record are on disk.
    fn committed(&self, uuid: &str) -> bool {
        std::fs::symlink_metadata(state::path(&self.host, uuid)).is_ok()
            && mdevctl::read_all(&self.host).is_ok_and(|d| d.defined.iter().any(|d| d.uuid == uuid))
    }

    fn remove_definitions_of(&self, uuid: &str) -> EngineResult<()> {
        let defs = mdevctl::read_all(&self.host)
            .map_err(|e| EngineError::persist("reading definitions", e))?;
        for def in defs.defined.iter().filter(|d| d.uuid == uuid) {
            mdevctl::remove(&self.host, &def.parent, uuid)
                .map_err(|e| EngineError::persist(format!("undefining {uuid}"), e))?;
        }
        Ok(())
    }

    fn describe_defined(
        &self,
        def: &mdevctl::Definition,
        record: Option<&state::DeviceRecord>,
    ) -> DeviceInfo {
        DeviceInfo {
            uuid: def.uuid.clone(),
            parent: def.parent.clone(),
            type_name: self.type_name(&def.parent, &def.mdev_type),
            type_id: def.mdev_type.clone(),
            owner: record.map(|r| r.owner.clone()).unwrap_or_default(),
            iommu_group: None,
            attributes: attr_map(&def.attrs),
            active: false,
            persistent: true,
            autostart: def.autostart,
            created: record.map_or(0, |r| r.created),
            kind: crate::model::DeviceKind::Mdev,
            address: None,
            functions: Vec::new(),
        }
    }

    /// An mdev known only from its record, its definition set aside as bad.
    fn describe_set_aside(&self, rec: &state::DeviceRecord) -> DeviceInfo {
        let def = mdevctl::Definition {
            parent: rec.parent.clone(),
            uuid: rec.uuid.clone(),
            mdev_type: rec.type_id.clone(),
            autostart: false,
            attrs: rec
                .params
                .iter()
                .map(|p| (VGPU_PARAMS.to_string(), p.clone()))
                .collect(),
        };
        self.describe_defined(&def, Some(rec))
    }

    /// Reads sysfs, the definitions and the records, and merges them by UUID.
    pub(super) fn merge(&self, initial: bool) -> EngineResult<Merged> {
        let active = discovery::scan_devices(&self.host)
            .map_err(|e| EngineError::host("scanning mdev devices", e))?;
        // Bad definitions are set aside (and reported once) by the reader.
        let definitions = mdevctl::read_all(&self.host)
            .map_err(|e| EngineError::persist("reading definitions", e))?;
        let defs = &definitions.defined;
        let set_aside = &definitions.set_aside;
        let records = match state::read_all(&self.host) {
            Ok(r) => r,
            Err(e) if initial => return Err(EngineError::persist("reading device records", e)),
            Err(e) => {
                tracing::warn!(error = %e, "could not read device records; keeping what is known");
                return Err(EngineError::persist("reading device records", e));
            }
        };
        let records: BTreeMap<&str, &state::DeviceRecord> =
            records.iter().map(|r| (r.uuid.as_str(), r)).collect();
        let mut defs_by_uuid: BTreeMap<&str, &mdevctl::Definition> = BTreeMap::new();
        for d in defs {
            defs_by_uuid.entry(d.uuid.as_str()).or_insert(d);
        }
        let mut devices = BTreeMap::new();
        for dev in active {
            let uuid = dev.uuid.clone();
            let def = defs_by_uuid.get(uuid.as_str()).copied();
            let rec = records.get(uuid.as_str()).copied();
            let mut info = self.describe_active(dev, None);
            info.owner = rec.map(|r| r.owner.clone()).unwrap_or_default();
            info.created = rec.map_or(0, |r| r.created);
            // A definition set aside is still a definition, though not one to start from.
            info.persistent = def.is_some() || set_aside.contains(&uuid);
            info.autostart = def.is_some_and(|d| d.autostart);
            devices.insert(uuid, info);
        }
        for (uuid, def) in &defs_by_uuid {
            if !devices.contains_key(*uuid) {
                let rec = records.get(uuid).copied();
                devices.insert(uuid.to_string(), self.describe_defined(def, rec));
            }
        }
        // An mdev whose definition was set aside stays known from its record: inactive,
        // persistent, never started on its own (until its definition is repaired, or
        // rewritten by ModifyDevice, or the device is started or removed by UUID).
        for rec in records
            .values()
            .filter(|r| r.kind == state::DeviceKind::Mdev)
        {
            if set_aside.contains(&rec.uuid) && !devices.contains_key(&rec.uuid) {
                devices.insert(rec.uuid.clone(), self.describe_set_aside(rec));
            }
        }
        let pci_records: Vec<&state::DeviceRecord> = records
            .values()
            .copied()
            .filter(|r| r.kind != state::DeviceKind::Mdev)
            .collect();
        self.merge_pci(&pci_records, &mut devices)?;
        let stale_records = stale_records(records.keys().copied(), &devices, set_aside);
        Ok(Merged {
            devices,
            stale_records,
        })
    }

    /// Compares the registry with the host and the definitions. At start (`initial`) it only
    /// fills the registry; while running it reports what changed and repairs drift.
    pub(super) fn refresh(&self, initial: bool) -> EngineResult<DeviceChanges> {
        let _one_at_a_time = self.begin_refresh();
        let merged = self.merge(initial)?;
        let changes = self.apply(merged, initial);
        self.events
            .send_all(changes.drift.iter().cloned().map(super::Event::Drift));
        Ok(changes)
    }

    /// Starts a refresh: one at a time, and from here on every finished operation is marked,
    /// since the snapshot about to be taken may predate it.
    pub(super) fn begin_refresh(&self) -> std::sync::MutexGuard<'_, ()> {
        let guard = lock(&self.refreshing);
        let mut reg = lock(&self.registry);
        reg.touched.clear();
        reg.touched_functions.clear();
        drop(reg);
        guard
    }

    /// Applies a snapshot of the host to the registry, leaving alone the devices that are in
    /// flight or changed since the snapshot was taken.
    pub(super) fn apply(&self, merged: Merged, initial: bool) -> DeviceChanges {
        self.apply_in(merged, initial, None)
    }

    /// [`Engine::apply`] of a snapshot of only the devices in `scope` (`None`: all): a
    /// device outside it is never taken for gone.
    pub(super) fn apply_in(
        &self,
        merged: Merged,
        initial: bool,
        scope: Option<&BTreeSet<String>>,
    ) -> DeviceChanges {
        let in_scope = |uuid: &str| scope.is_none_or(|s| s.contains(uuid));
        let mut changes = DeviceChanges::default();
        let mut repair = Vec::new();
        {
            let mut reg = lock(&self.registry);
            let busy = |reg: &super::Registry, uuid: &str| {
                reg.in_flight.contains(uuid) || reg.touched.contains(uuid)
            };
            for uuid in &merged.stale_records {
                if busy(&reg, uuid) {
                    continue;
                }
                match state::remove(&self.host, uuid) {
                    Ok(true) => tracing::info!(
                        %uuid,
                        "forgot the record of a device that is gone: not on the host, not \
                         defined, no definition set aside, not a persistent PCI device"
                    ),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(%uuid, error = %e, "could not drop the record of a gone device")
                    }
                }
            }
            let gone: Vec<String> = reg
                .devices
                .keys()
                .filter(|u| in_scope(u) && !merged.devices.contains_key(*u) && !busy(&reg, u))
                .cloned()
                .collect();
            for uuid in gone {
                if let Some(old) = reg.devices.get(&uuid).cloned() {
                    self.record(&mut reg, &uuid, None, Origin::Host);
                    if old.active && !initial {
                        changes.drift.push(Drift {
                            uuid: uuid.clone(),
                            event: "removed-externally",
                            detail: format!(
                                "device {uuid} on {} was removed by another tool or the kernel",
                                old.parent
                            ),
                        });
                    }
                    changes.removed.push(old);
                }
            }
            // A vGPU on a VF that an operation in flight or finished since the snapshot works
            // on belongs to that operation's device, whatever the snapshot made of it.
            let busy_function = |reg: &super::Registry, info: &DeviceInfo| {
                info.kind == DeviceKind::SriovVgpu
                    && info.address.as_ref().is_some_and(|vf| {
                        reg.touched_functions.contains(vf)
                            || reg.in_flight.iter().any(|u| {
                                reg.devices
                                    .get(u)
                                    .is_some_and(|d| d.address.as_ref() == Some(vf))
                            })
                    })
            };
            for (uuid, info) in merged.devices {
                if busy(&reg, &uuid) {
                    continue;
                }
                if !reg.devices.contains_key(&uuid) && busy_function(&reg, &info) {
                    continue;
                }
                match reg.devices.get(&uuid) {
                    None => {
                        if !initial && info.active {
                            changes.drift.push(Drift {
                                uuid: uuid.clone(),
                                event: "adopted",
                                detail: format!(
                                    "device {uuid} on {} was made by another tool; vgpud lists it",
                                    info.parent
                                ),
                            });
                        }
                        changes.added.push(info.clone());
                        self.record(&mut reg, &uuid, Some(info), Origin::Host);
                    }
                    Some(old) if *old != info => {
                        if !old.active && info.active && !initial {
                            changes.drift.push(Drift {
                                uuid: uuid.clone(),
                                event: "started-externally",
                                detail: format!(
                                    "device {uuid} on {} was started by another tool",
                                    info.parent
                                ),
                            });
                        }
                        if old.active && !info.active && !initial {
                            if info.autostart && self.gpus().contains_key(&info.parent) {
                                repair.push(uuid.clone());
                            } else {
                                changes.drift.push(Drift {
                                    uuid: uuid.clone(),
                                    event: "stopped-externally",
                                    detail: format!("device {uuid} was stopped by another tool; its definition stays"),
                                });
                            }
                        }
                        changes.updated.push(info.clone());
                        self.record(&mut reg, &uuid, Some(info), Origin::Host);
                    }
                    Some(_) => {}
                }
            }
        }
        for uuid in repair {
            self.repair(&uuid, &mut changes);
        }
        changes
    }

    /// Starts again an autostart device that vanished while running.
    fn repair(&self, uuid: &str, changes: &mut DeviceChanges) {
        let Ok(claim) = self.claim(uuid, false) else {
            return;
        };
        let Some(info) = self.device(uuid) else {
            return;
        };
        match self.start_defined(&info) {
            Ok(started) => {
                changes.drift.push(Drift {
                    uuid: uuid.to_string(),
                    event: "repaired",
                    detail: format!("autostart device {uuid} vanished and was started again"),
                });
                changes.updated.retain(|d| d.uuid != uuid);
                changes.updated.push(started.clone());
                claim.finish(Some(started));
            }
            Err(e) => changes.drift.push(Drift {
                uuid: uuid.to_string(),
                event: "repair-failed",
                detail: format!(
                    "autostart device {uuid} vanished and could not be started again: {e}"
                ),
            }),
        }
    }

    /// Starts the persistent autostart devices in boot order, waiting up to `parent_timeout`
    /// for the parents each stage needs.
    pub fn restore(&self, parent_timeout: Duration) -> RestoreReport {
        let mut report = RestoreReport::default();
        let mut missing: BTreeSet<String> = BTreeSet::new();
        let gpus = self.recorded_settings();
        // Devices stopped on request since the boot stay stopped across a restart of vgpud.
        let stopped = self.stopped_on_request();
        let devices: Vec<DeviceInfo> = self
            .list_devices()
            .into_iter()
            .filter(|d| !stopped.contains(&d.uuid))
            .collect();
        for step in plan_restore(&devices, &gpus) {
            match step {
                RestoreStep::SetVfCount { pf, count } => match self.apply_vf_count(&pf, count) {
                    Ok(_) => report.vf_counts.push((pf, count)),
                    Err(e) => {
                        tracing::warn!(%pf, count, error = %e, "could not restore a VF count");
                        report.failed.push((pf, e.to_string()));
                    }
                },
                RestoreStep::WaitForParents { stage, parents } => {
                    missing = self.wait_for_parents(stage, &parents, parent_timeout);
                    report.missing_parents.extend(missing.iter().cloned());
                }
                RestoreStep::CheckMigMode { pf, enabled } => {
                    if let Err(e) = self.check_mig_mode(&pf, enabled) {
                        tracing::warn!(%pf, error = %e, "the GPU is not in its recorded MIG mode");
                        report.failed.push((pf, e.to_string()));
                    }
                }
                RestoreStep::RestoreGpuInstances { pf } => match self.restore_instances(&pf) {
                    Ok(n) => report.gpu_instances.push((pf, n)),
                    Err(e) => {
                        tracing::warn!(%pf, error = %e, "could not restore the MIG layout");
                        report.failed.push((pf, e.to_string()));
                    }
                },
                RestoreStep::SetScheduler { pf } => {
                    if let Err(e) = self.restore_scheduler(&pf) {
                        tracing::warn!(%pf, error = %e, "could not restore the vGPU scheduler");
                        report.failed.push((pf, e.to_string()));
                    }
                }
                RestoreStep::SetHeterogeneous { pf } => {
                    if let Err(e) = self.apply_heterogeneous(&pf) {
                        tracing::warn!(%pf, error = %e, "could not restore the heterogeneous vGPU mode");
                        report.failed.push((pf, e.to_string()));
                    }
                }
                RestoreStep::Start { uuid, parent, .. } => {
                    if missing.contains(&parent) {
                        continue;
                    }
                    match self.start_device(&uuid) {
                        Ok(_) => report.started.push(uuid),
                        Err(e) => {
                            tracing::warn!(%uuid, %parent, error = %e, "could not restore a device");
                            report.failed.push((uuid, e.to_string()));
                        }
                    }
                }
            }
        }
        report
    }

    /// Waits until the parents exist; returns those that did not appear in time.
    fn wait_for_parents(
        &self,
        stage: Stage,
        parents: &[String],
        timeout: Duration,
    ) -> BTreeSet<String> {
        let deadline = Instant::now() + timeout;
        let missing = |e: &Engine| -> BTreeSet<String> {
            parents
                .iter()
                .filter(|p| {
                    let dir = match stage {
                        Stage::Mdevs => discovery::mdev_parent_dir(&e.host, p),
                        _ => discovery::sriov::pci_dir(&e.host, p),
                    };
                    !dir.exists()
                })
                .cloned()
                .collect()
        };
        let mut left = missing(self);
        if left.is_empty() {
            return left;
        }
        tracing::info!(?stage, parents = ?left, timeout_s = timeout.as_secs_f64(), "waiting for parent devices to appear");
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            left = missing(self);
        }
        if let Err(e) = self.rescan_gpus() {
            tracing::warn!(error = %e, "could not rescan GPUs");
        }
        if !left.is_empty() {
            tracing::warn!(?stage, parents = ?left, "parent devices did not appear in time; their devices start when they do");
        }
        left
    }

    /// One look at the host while running: GPUs that came or went, devices that changed
    /// behind vgpud's back (repaired if autostart), new or changed definitions; and the
    /// autostart devices of GPUs that appeared are started.
    pub fn poll(&self) -> EngineResult<DeviceChanges> {
        let (gpus_added, gpus_removed) = if self.parents_changed() {
            self.rescan_gpus()?
        } else {
            (Vec::new(), Vec::new())
        };
        let mut changes = self.refresh(false)?;
        // GPU instances made or destroyed by other tools are drift.
        self.refresh_nvidia_all(true);
        self.start_autostart_of(&gpus_added, &mut changes);
        changes.gpus_added = gpus_added;
        changes.gpus_removed = gpus_removed;
        Ok(changes)
    }

    /// Starts the autostart devices of GPUs that appeared (`gpus_added`); one whose start
    /// failed (a driver still registering its types, say) is tried again at every look and
    /// every uevent of a GPU until it starts or stops being an autostart device of a present
    /// GPU.
    pub(super) fn start_autostart_of(&self, gpus_added: &[String], changes: &mut DeviceChanges) {
        let retry = std::mem::take(&mut *lock(&self.autostart_pending));
        // (A GPU that appears starts its autostart devices also when one was stopped on
        // request: to the device, its parent appearing is a boot, as for mdevctl's udev rule.)
        let inactive: Vec<DeviceInfo> = self
            .list_devices()
            .into_iter()
            .filter(|d| d.persistent && d.autostart && !d.active)
            .collect();
        let waiting: Vec<(String, bool)> = {
            // Taken after the registry's lock is released: the registry's comes first.
            let gpus = self.gpus();
            inactive
                .into_iter()
                .filter(|d| gpus.contains_key(&d.parent))
                .filter_map(|d| {
                    let again = retry.contains(&d.uuid);
                    (again || gpus_added.contains(&d.parent)).then_some((d.uuid, again))
                })
                .collect()
        };
        for (uuid, again) in waiting {
            match self.start_device(&uuid) {
                Ok(started) => {
                    changes.updated.retain(|d| d.uuid != uuid);
                    changes.updated.push(started);
                }
                Err(e) => {
                    if !again {
                        tracing::warn!(%uuid, error = %e, "could not start a device on a GPU that appeared; trying again at every look");
                    }
                    lock(&self.autostart_pending).insert(uuid);
                }
            }
        }
    }

    /// The watchdog's probe ([`crate::daemon::watchdog`]): takes the lock of the look at
    /// the host and the registry's, in the order a look takes them, and returns how many
    /// devices are known. It returns only when a look can run, so a look that hangs or a
    /// deadlocked registry stops the pings.
    pub fn check_alive(&self) -> usize {
        let _look = lock(&self.refreshing);
        lock(&self.registry).devices.len()
    }

    /// Whether the set of possible parents differs from the inventory (cheap: two directory
    /// listings).
    fn parents_changed(&self) -> bool {
        let listed = |rel: &str| self.host.list_dir(&self.host.sys(rel)).unwrap_or_default();
        let mdev_parents = listed("class/mdev_bus");
        let gpus = self.gpus();
        if mdev_parents.iter().any(|p| !gpus.contains_key(p)) {
            return true;
        }
        if gpus
            .values()
            .filter(|e| e.location.is_mdev_parent)
            .any(|e| !mdev_parents.contains(&e.gpu.address))
        {
            return true;
        }
        let pci = listed("bus/pci/devices");
        gpus.keys()
            .filter(|a| a.contains(':'))
            .any(|a| !pci.contains(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{CreateRequest, ModifyRequest};
    use crate::host::Host;

    fn listed(uuid: &str) -> (String, DeviceInfo) {
        let info = DeviceInfo {
            uuid: uuid.into(),
            parent: "mtty".into(),
            type_id: "mtty-1".into(),
            type_name: "mtty-1".into(),
            owner: String::new(),
            iommu_group: None,
            attributes: BTreeMap::new(),
            active: false,
            persistent: true,
            autostart: false,
            created: 0,
            kind: DeviceKind::Mdev,
            address: None,
            functions: Vec::new(),
        };
        (uuid.to_string(), info)
    }

    #[test]
    fn a_record_is_stale_only_when_its_device_is_really_gone() {
        let devices: BTreeMap<String, DeviceInfo> = [listed("listed")].into_iter().collect();
        let set_aside: BTreeSet<String> = ["unreadable".to_string()].into_iter().collect();
        assert_eq!(
            stale_records(["listed", "unreadable", "gone"], &devices, &set_aside),
            vec!["gone".to_string()]
        );
        assert!(stale_records(["listed"], &devices, &BTreeSet::new()).is_empty());
    }

    fn boot(dir: &std::path::Path) -> Engine {
        Engine::new(Host::simulated(dir)).expect("engine")
    }

    /// The kernel's state is gone, `etc` and `var` are kept.
    fn reboot(dir: &std::path::Path) {
        for d in ["sys", "dev", "run"] {
            let _ = std::fs::remove_dir_all(dir.join(d));
        }
        vgpud_sim::write_profile("mtty", dir).expect("profile");
    }

    #[test]
    fn a_record_next_to_a_truncated_definition_survives_a_reboot() {
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("mtty", dir.path()).expect("profile");
        let e = boot(dir.path());
        let kept = e
            .create_device(&CreateRequest {
                type_query: "mtty-1".into(),
                owner: "vm-kept".into(),
                ..CreateRequest::default()
            })
            .expect("persistent");
        let transient = e
            .create_device(&CreateRequest {
                type_query: "mtty-1".into(),
                persistent: false,
                autostart: false,
                ..CreateRequest::default()
            })
            .expect("transient");
        drop(e);
        reboot(dir.path());
        let host = Host::simulated(dir.path());
        let def = mdevctl::path(&host, "mtty", &kept.uuid);
        let text = std::fs::read_to_string(&def).expect("definition");
        std::fs::write(&def, &text[..text.len() / 2]).expect("truncate");

        let e = boot(dir.path());
        let dev = e.device(&kept.uuid).expect("still known");
        assert!(!dev.active && dev.persistent && !dev.autostart, "{dev:?}");
        assert_eq!(dev.owner, "vm-kept");
        assert!(state::path(&host, &kept.uuid).exists(), "record kept");
        assert!(def.with_file_name(format!("{}.bad", kept.uuid)).exists());
        assert!(!def.exists());
        // The transient device's record goes: that device is really gone.
        assert!(e.device(&transient.uuid).is_none());
        assert!(!state::path(&host, &transient.uuid).exists());
        // Later looks and restarts keep it too.
        e.poll().expect("poll");
        drop(e);
        let e = boot(dir.path());
        assert!(e.device(&kept.uuid).is_some());
        assert!(state::path(&host, &kept.uuid).exists());
        // The operator's way back: a fresh definition from what vgpud recorded.
        let repaired = e
            .modify_device(
                &kept.uuid,
                &ModifyRequest {
                    persistent: Some(true),
                    autostart: Some(true),
                },
            )
            .expect("modify");
        assert!(repaired.autostart);
        assert_eq!(
            mdevctl::read(&host, "mtty", &kept.uuid)
                .expect("read")
                .map(|d| d.mdev_type),
            Some(kept.type_id.clone())
        );
        e.start_device(&kept.uuid).expect("start");
    }

    /// A power cut after a persistent create was acknowledged, before its intent's close
    /// reached the disk: the reboot takes the device, the committed definition and record
    /// stay, and the intent comes back open. Its replay keeps the device defined; a create
    /// whose commit never landed is still rolled back.
    #[test]
    fn an_acknowledged_create_whose_device_a_power_cut_took_stays_defined() {
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("mtty", dir.path()).expect("profile");
        let host = Host::simulated(dir.path());
        let e = boot(dir.path());
        let acked = e
            .create_device(&CreateRequest {
                type_query: "mtty-1".into(),
                owner: "vm-acked".into(),
                autostart: false,
                ..CreateRequest::default()
            })
            .expect("create");
        drop(e);
        let create = |uuid: &str, parent: Option<&str>| intent::Intent {
            version: intent::VERSION,
            uuid: uuid.into(),
            started: 1,
            operation: Operation::Create {
                parent: parent.map(str::to_string),
                type_id: Some(acked.type_id.clone()),
                owner: "vm-acked".into(),
                params: None,
                persistent: true,
                autostart: false,
            },
        };
        // The close of its intent was lost with the power; so was a create in flight, whose
        // commit never landed (no definition, no record).
        let unfinished = "a1b2c3d4-0000-4000-8000-0000000000ff";
        intent::open(&host, &create(&acked.uuid, Some(&acked.parent))).expect("intent");
        intent::open(&host, &create(unfinished, None)).expect("intent");
        reboot(dir.path());

        let e = boot(dir.path());
        let dev = e
            .device(&acked.uuid)
            .expect("the acknowledged device is still known");
        assert!(!dev.active && dev.persistent, "{dev:?}");
        assert_eq!(dev.owner, "vm-acked");
        assert!(
            mdevctl::path(&host, &acked.parent, &acked.uuid).exists(),
            "definition kept"
        );
        assert!(state::path(&host, &acked.uuid).exists(), "record kept");
        assert!(e.device(unfinished).is_none());
        assert!(!state::path(&host, unfinished).exists());
        assert!(
            intent::read_all(&host).expect("intents").is_empty(),
            "both replayed"
        );
        // It starts as any defined device does.
        e.start_device(&acked.uuid).expect("start");
    }
}
