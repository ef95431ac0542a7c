//! Devices that are PCI functions rather than mdevs: NVIDIA vGPUs on SR-IOV virtual functions
//! (the vendor-specific VFIO framework: a type id written to the VF's
//! `nvidia/current_vgpu_type`) and passthrough (functions moved to vfio-pci).
//!
//! vgpud's UUID is the handle of such a device; its record names the VF or the functions.
//! A VF is held by one UUID at a time: giving it to a UUID takes it from every other record,
//! and a release writes to the VF only while the host still shows that UUID's type on it, so
//! a late remove of an old UUID never clears a VF given to someone since.

use std::collections::BTreeMap;

use super::lifecycle::VGPU_PARAMS;
use super::{libc_errno, lock, CreateRequest, DeviceInfo, Engine, EngineError, EngineResult};
use crate::discovery::pci::{self, PciFunction};
use crate::discovery::sriov::{self, VfVgpu};
use crate::discovery::{self, console};
use crate::model::{DeviceKind, MdevType, MovedFunction, PASSTHROUGH_TYPE};
use crate::persist::intent::Operation;
use crate::persist::{self, state};
use crate::plan::{self, VFIO_PCI};

/// The file an NVIDIA vGPU type is written to, below the VF.
const CURRENT_TYPE: &str = "nvidia/current_vgpu_type";

/// How a device is being made: new (a create) or from its record (a start).
pub(super) struct Making<'a> {
    pub(super) uuid: &'a str,
    pub(super) owner: &'a str,
    pub(super) params: Option<&'a str>,
    pub(super) persistent: bool,
    pub(super) autostart: bool,
    /// `Some(created)` for a start of a recorded device.
    pub(super) existing: Option<u64>,
}

impl Making<'_> {
    pub(super) fn from_request<'a>(uuid: &'a str, req: &'a CreateRequest) -> Making<'a> {
        Making {
            uuid,
            owner: &req.owner,
            params: req.params.as_deref(),
            persistent: req.persistent,
            autostart: req.persistent && req.autostart,
            existing: None,
        }
    }

    pub(super) fn from_info(info: &DeviceInfo) -> Making<'_> {
        Making {
            uuid: &info.uuid,
            owner: &info.owner,
            params: info.attributes.get(VGPU_PARAMS).map(String::as_str),
            persistent: info.persistent,
            autostart: info.autostart,
            existing: Some(info.created),
        }
    }
}

/// The result of one attempt on one GPU.
pub(super) enum Outcome {
    /// The device exists and is recorded.
    Made(DeviceInfo),
    /// This GPU cannot take it; why.
    Refused(String),
}

impl Engine {
    // ---- SR-IOV vGPU ----------------------------------------------------------------------

    /// The vGPU state of every VF of a physical function.
    pub(super) fn vf_states(&self, pf: &str) -> EngineResult<Vec<VfVgpu>> {
        let Some(sr) = sriov::read_sriov(&self.host, pf)
            .map_err(|e| EngineError::host(format!("reading SR-IOV state of {pf}"), e))?
        else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for vf in &sr.vfs {
            if let Some(s) = sriov::read_vf_vgpu(&self.host, vf)
                .map_err(|e| EngineError::host(format!("reading vGPU files of {vf}"), e))?
            {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// Gives a free VF of `pf` the type `ty`, with the GPU's lock held. The intent it records
    /// is closed by the caller's guard ([`Engine::intent_guard`]).
    pub(super) fn assign_vf(
        &self,
        pf: &str,
        ty: &MdevType,
        making: &Making<'_>,
    ) -> EngineResult<Outcome> {
        let Some(number) = sriov::nvidia_type_number(&ty.id) else {
            return Err(EngineError::InvalidArgument(format!(
                "{} is not an NVIDIA vGPU type",
                ty.id
            )));
        };
        let states = self.vf_states(pf)?;
        if states.is_empty() {
            return Ok(Outcome::Refused(
                "its SR-IOV virtual functions are not enabled (SetVfCount enables them)".into(),
            ));
        }
        let Some(vf) = states
            .iter()
            .find(|s| s.current == 0 && s.creatable.iter().any(|c| c.id == number))
            .map(|s| s.vf.clone())
        else {
            return Ok(Outcome::Refused(self.why_vfs_full(pf, ty, &states)));
        };
        // In heterogeneous mode the driver takes the placement from vgpu_params when the
        // type is written, so they go first; a placement asked for is checked here.
        let heterogeneous = self.is_heterogeneous(pf);
        if let Some(at) = making.params.map(placement_asked).transpose()?.flatten() {
            if !heterogeneous {
                return Err(EngineError::InvalidArgument(format!(
                    "vgpu-placement-id={at} applies in heterogeneous mode, and {pf} is in equal-size mode (SetHeterogeneousMode)"
                )));
            }
            let model = self.with_gpu(pf, |g| g.model.clone()).unwrap_or_default();
            let type_gib = ty.framebuffer_bytes() >> 30;
            let all = discovery::free_placement_ids(&model, type_gib, &[]).unwrap_or_default();
            if !all.contains(&at) {
                return Err(EngineError::InvalidArgument(format!(
                    "vgpu-placement-id={at} is no placement of {} on {model} (its placements are {})",
                    ty.name,
                    all.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                )));
            }
            let free = discovery::free_placement_ids(&model, type_gib, &states).unwrap_or_default();
            if !free.contains(&at) {
                return Ok(Outcome::Refused(format!(
                    "placement {at} is taken (free for {}: {})",
                    ty.name,
                    if free.is_empty() {
                        "none".to_string()
                    } else {
                        free.iter()
                            .map(u64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )));
            }
        }
        let params_first = heterogeneous && making.params.is_some();
        let created = making.existing.unwrap_or_else(persist::now_unix);
        self.record_intent(
            making.uuid,
            Operation::Assign {
                kind: state::DeviceKind::SriovVgpu,
                parent: pf.to_string(),
                address: vf.clone(),
                type_id: ty.id.clone(),
                functions: Vec::new(),
                owner: making.owner.to_string(),
                params: making.params.map(str::to_string),
                persistent: making.persistent,
                autostart: making.autostart,
                created,
                new: making.existing.is_none(),
            },
        )?;
        let dir = sriov::pci_dir(&self.host, &vf);
        if let (true, Some(p)) = (params_first, making.params) {
            if let Err(e) = self.host.write_attr(&dir.join(VGPU_PARAMS), p) {
                return Err(EngineError::InvalidArgument(format!(
                    "the driver rejected {VGPU_PARAMS}={p:?} on VF {vf} ({e})"
                )));
            }
        }
        if let Err(e) = self
            .host
            .write_attr(&dir.join(CURRENT_TYPE), &number.to_string())
        {
            if params_first {
                if let Err(e) = self.host.write_attr(&dir.join(VGPU_PARAMS), " ") {
                    tracing::warn!(%vf, error = %e, "could not clear vgpu_params");
                }
            }
            return match e.errno() {
                Some(libc_errno::EPERM) => Ok(Outcome::Refused(format!(
                    "VF {vf} was given a vGPU by someone else meanwhile ({e})"
                ))),
                Some(libc_errno::EIO) => Ok(Outcome::Refused(format!(
                    "the driver refused {} on VF {vf} ({e})",
                    ty.name
                ))),
                Some(libc_errno::EINVAL) => Err(EngineError::InvalidArgument(format!(
                    "the driver rejected type {} on VF {vf} ({e})",
                    ty.id
                ))),
                _ => Err(EngineError::host(format!("writing {} to {vf}", ty.id), e)),
            };
        }
        let mut attributes = BTreeMap::new();
        attributes.insert(CURRENT_TYPE.to_string(), number.to_string());
        if let Some(p) = making.params {
            if !params_first {
                if let Err(e) = self.host.write_attr(&dir.join(VGPU_PARAMS), p) {
                    self.clear_vf(pf, &vf);
                    return Err(EngineError::InvalidArgument(format!(
                        "the driver rejected {VGPU_PARAMS}={p:?} on VF {vf}, so the vGPU was not kept ({e})"
                    )));
                }
            }
            attributes.insert(VGPU_PARAMS.to_string(), p.to_string());
        }
        let info = DeviceInfo {
            uuid: making.uuid.to_string(),
            parent: pf.to_string(),
            type_id: ty.id.clone(),
            type_name: ty.name.clone(),
            owner: making.owner.to_string(),
            iommu_group: self.group_of(&vf),
            attributes,
            active: true,
            persistent: making.persistent,
            autostart: making.autostart,
            created,
            kind: DeviceKind::SriovVgpu,
            address: Some(vf.clone()),
            functions: Vec::new(),
        };
        if let Err(e) = self.write_record(&info, making.params.map(str::to_string)) {
            self.clear_vf(pf, &vf);
            return Err(e);
        }
        self.take_vf_from_others(&vf, making.uuid);
        Ok(Outcome::Made(info))
    }

    /// Writes 0 to a VF's type (undoing a half-made vGPU on GPU `pf`), logging a failure.
    /// The GPU's known types are forgotten after it: a VF's type write sends no uevent, and
    /// types read while the half-made vGPU was there (a warm-up after other events) would be
    /// kept.
    pub(super) fn clear_vf(&self, pf: &str, vf: &str) {
        let path = sriov::pci_dir(&self.host, vf).join(CURRENT_TYPE);
        if let Err(e) = self.host.write_attr(&path, "0") {
            tracing::error!(%vf, error = %e, "could not clear a half-made vGPU");
        }
        self.forget_types_of_gpu(pf);
    }

    /// Every other record that names `vf` loses it: one UUID holds a VF at a time. Each such
    /// device is recorded as changed by vgpud (its events go out) and marked touched, so that
    /// a look whose snapshot read its record before this does not give it the VF back.
    fn take_vf_from_others(&self, vf: &str, holder: &str) {
        let others: Vec<DeviceInfo> = lock(&self.registry)
            .devices
            .values()
            .filter(|d| {
                d.kind == DeviceKind::SriovVgpu
                    && d.uuid != holder
                    && d.address.as_deref() == Some(vf)
            })
            .cloned()
            .collect();
        for other in others {
            let updated = DeviceInfo {
                address: None,
                active: false,
                iommu_group: None,
                ..other
            };
            let params = updated.attributes.get(VGPU_PARAMS).cloned();
            if let Err(e) = self.write_record(&updated, params) {
                tracing::warn!(uuid = %updated.uuid, error = %e, "could not update a record");
            }
            let uuid = updated.uuid.clone();
            let mut reg = lock(&self.registry);
            self.record(&mut reg, &uuid, Some(updated), super::events::Origin::Vgpud);
            reg.touched.insert(uuid);
        }
    }

    pub(super) fn why_vfs_full(&self, pf: &str, ty: &MdevType, states: &[VfVgpu]) -> String {
        let used: Vec<String> = states
            .iter()
            .filter(|s| s.current != 0)
            .map(|s| format!("nvidia-{}", s.current))
            .collect();
        if used.is_empty() {
            return format!("none of its {} VFs can take a {}", states.len(), ty.name);
        }
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for u in &used {
            *counts.entry(self.type_name(pf, u)).or_default() += 1;
        }
        let running = counts
            .iter()
            .map(|(n, c)| format!("{c}× {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        if used.len() == states.len() {
            format!(
                "every one of its {} VFs has a vGPU (runs {running})",
                states.len()
            )
        } else {
            format!(
                "runs {running}, and the driver offers no {} next to them (one framebuffer size at a time, up to the type's maximum)",
                ty.name
            )
        }
    }

    fn group_of(&self, address: &str) -> Option<u32> {
        self.host
            .link_name(&sriov::pci_dir(&self.host, address).join("iommu_group"))
            .ok()
            .flatten()
            .and_then(|g| g.parse().ok())
    }

    // ---- passthrough ----------------------------------------------------------------------

    /// Whether `address` can be given to a guest now, as a create without `force` would
    /// find it (the console, devices on it or its VFs, its IOMMU group).
    pub(super) fn can_pass_through(&self, address: &str) -> bool {
        self.passthrough_functions(address, false).is_ok()
    }

    /// The checks of a passthrough: the physical function and the functions that would move
    /// to vfio-pci, or why the GPU or VF cannot be given to a guest now.
    fn passthrough_functions(
        &self,
        address: &str,
        force: bool,
    ) -> EngineResult<(String, Vec<PciFunction>)> {
        let target = self.pci_function(address)?;
        let pf = target
            .physical_function
            .clone()
            .unwrap_or_else(|| address.to_string());
        if !pci::iommu_present(&self.host)
            .map_err(|e| EngineError::host("looking for an IOMMU", e))?
        {
            return Err(EngineError::NotSupported(format!(
                "this host has no IOMMU (/sys/class/iommu is empty), so {address} cannot be given to a guest: enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on or amd_iommu=on"
            )));
        }
        let Some(group) = target.iommu_group else {
            return Err(EngineError::NotSupported(format!(
                "{address} is in no IOMMU group, so it cannot be given to a guest"
            )));
        };
        let mut members = Vec::new();
        for name in pci::group_members(&self.host, group)
            .map_err(|e| EngineError::host(format!("reading IOMMU group {group}"), e))?
        {
            members.push(self.pci_function(&name)?);
        }
        let part_of_target = |f: &PciFunction| {
            if target.physical_function.is_some() {
                f.address == target.address
            } else {
                f.slot() == target.slot() && f.physical_function.is_none()
            }
        };
        let foreign: Vec<&PciFunction> = members
            .iter()
            .filter(|f| !f.is_bridge && !part_of_target(f))
            .collect();
        if !foreign.is_empty() && !force {
            let list = foreign
                .iter()
                .map(|f| {
                    format!(
                        "{} (class {:06x}, driver {})",
                        f.address,
                        f.class,
                        f.driver.as_deref().unwrap_or("none")
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            return Err(EngineError::Unsafe(format!(
                "IOMMU group {group} of {address} also holds {list}, which would go to the guest's vfio-pci too; pass \"force\": true to move them as well"
            )));
        }
        let moving: Vec<PciFunction> = members.into_iter().filter(|f| !f.is_bridge).collect();
        self.refuse_in_use(address, &pf, &moving, force)?;
        Ok((pf, moving))
    }

    /// Moves a GPU (every non-bridge function of its IOMMU group) or a VF to vfio-pci, with
    /// the GPU's lock held; refuses, naming the reason, what is unsafe or in use. The intent
    /// it records is closed by the caller's guard ([`Engine::intent_guard`]).
    pub(super) fn assign_passthrough(
        &self,
        address: &str,
        force: bool,
        making: &Making<'_>,
    ) -> EngineResult<DeviceInfo> {
        let (pf, moving) = self.passthrough_functions(address, force)?;
        let moved = plan::moved_functions(&moving);
        let steps = plan::plan_bind_vfio(&moving);
        let created = making.existing.unwrap_or_else(persist::now_unix);
        self.record_intent(
            making.uuid,
            Operation::Assign {
                kind: state::DeviceKind::Passthrough,
                parent: pf.clone(),
                address: address.to_string(),
                type_id: PASSTHROUGH_TYPE.to_string(),
                functions: moved.clone(),
                owner: making.owner.to_string(),
                params: None,
                persistent: making.persistent,
                autostart: making.autostart,
                created,
                new: making.existing.is_none(),
            },
        )?;
        if let Err((done, e)) = plan::execute(&self.host, &steps) {
            let undone = self.undo_binding(&moved);
            return Err(EngineError::Host {
                context: format!(
                    "moving {address} to vfio-pci (step {} of {}: {:?}); {undone}",
                    done + 1,
                    steps.len(),
                    steps[done]
                ),
                source: match e {
                    plan::StepError::Host(h) => h,
                    other => crate::host::HostError::Parse {
                        path: sriov::pci_dir(&self.host, address),
                        reason: other.to_string(),
                    },
                },
            });
        }
        let not_bound: Vec<String> = moving
            .iter()
            .filter(|f| self.driver_of(&f.address).as_deref() != Some(VFIO_PCI))
            .map(|f| f.address.clone())
            .collect();
        if !not_bound.is_empty() {
            let undone = self.undo_binding(&moved);
            return Err(EngineError::Host {
                context: format!("moving {address} to vfio-pci"),
                source: crate::host::HostError::Parse {
                    path: sriov::pci_dir(&self.host, &not_bound[0]),
                    reason: format!(
                        "{} did not bind to vfio-pci (is the vfio-pci module loaded?); {undone}",
                        not_bound.join(", ")
                    ),
                },
            });
        }
        let info = DeviceInfo {
            uuid: making.uuid.to_string(),
            parent: pf,
            type_id: PASSTHROUGH_TYPE.to_string(),
            type_name: PASSTHROUGH_TYPE.to_string(),
            owner: making.owner.to_string(),
            iommu_group: moving
                .iter()
                .find(|f| f.address == address)
                .and_then(|f| f.iommu_group),
            attributes: BTreeMap::new(),
            active: true,
            persistent: making.persistent,
            autostart: making.autostart,
            created,
            kind: DeviceKind::Passthrough,
            address: Some(address.to_string()),
            functions: moving
                .iter()
                .map(|f| MovedFunction {
                    address: f.address.clone(),
                    driver: moved
                        .iter()
                        .find(|m| m.address == f.address)
                        .and_then(|m| m.driver.clone())
                        .or_else(|| f.driver.clone().filter(|d| d != VFIO_PCI)),
                })
                .collect(),
        };
        if let Err(e) = self.write_record(&info, None) {
            let undone = self.undo_binding(&moved);
            tracing::warn!(%address, "{undone}");
            return Err(e);
        }
        Ok(info)
    }

    /// Refuses functions the host uses: the one that draws the host's console (unless
    /// `force`), devices vgpud made on the GPU, enabled VFs, another passthrough device,
    /// vfio-pci bindings of other tools.
    fn refuse_in_use(
        &self,
        address: &str,
        pf: &str,
        moving: &[PciFunction],
        force: bool,
    ) -> EngineResult<()> {
        let console = console::console(&self.host)
            .map_err(|e| EngineError::host("finding the host's console", e))?;
        if let Some(console) = console {
            if let Some(f) = moving.iter().find(|f| f.address == console.function) {
                if !force {
                    return Err(EngineError::Busy(format!(
                        "{} draws the host's console ({}); giving it to a guest would take the host's display; \"force\": true insists",
                        f.address, console.reason
                    )));
                }
                tracing::warn!(
                    address = %f.address,
                    reason = %console.reason,
                    "taking the function that draws the host's console: force insists"
                );
            }
        }
        let addresses: Vec<&str> = moving.iter().map(|f| f.address.as_str()).collect();
        let reg = lock(&self.registry);
        if let Some(d) = reg.devices.values().find(|d| {
            d.active
                && match d.kind {
                    DeviceKind::Passthrough => d
                        .functions
                        .iter()
                        .any(|m| addresses.contains(&m.address.as_str())),
                    // On the GPU asked for, or on a VF that would move (the VF a vGPU is
                    // on is its address).
                    DeviceKind::SriovVgpu => {
                        d.parent == address
                            || d.address
                                .as_deref()
                                .is_some_and(|vf| addresses.contains(&vf))
                    }
                    DeviceKind::Mdev => {
                        addresses.contains(&d.parent.as_str())
                            || self.gpu_of_parent(&d.parent) == address
                    }
                }
        }) {
            return Err(EngineError::Busy(format!(
                "{address} carries device {} ({}); remove it first",
                d.uuid, d.type_name
            )));
        }
        drop(reg);
        if pf == address {
            if let Some(sr) = sriov::read_sriov(&self.host, address)
                .map_err(|e| EngineError::host(format!("reading SR-IOV state of {address}"), e))?
            {
                if sr.num_vfs > 0 {
                    return Err(EngineError::Busy(format!(
                        "{address} has {} SR-IOV VFs enabled; disable them (SetVfCount 0) before giving the whole GPU to a guest",
                        sr.num_vfs
                    )));
                }
            }
        }
        if let Some(f) = moving
            .iter()
            .find(|f| f.driver.as_deref() == Some(VFIO_PCI))
        {
            return Err(EngineError::Busy(format!(
                "{} is already bound to vfio-pci by another tool or guest",
                f.address
            )));
        }
        Ok(())
    }

    /// Gives moved functions back on the way out of an error; says how that went.
    fn undo_binding(&self, moved: &[MovedFunction]) -> String {
        match self.give_back(moved) {
            Ok(()) => "the drivers were given back".to_string(),
            Err(why) => format!("giving the drivers back failed too: {why}"),
        }
    }

    /// Gives moved functions back to their drivers, logging failures (the way out of an
    /// error, and the release of a passthrough device).
    fn give_back(&self, moved: &[MovedFunction]) -> Result<(), String> {
        let bound: Vec<String> = moved
            .iter()
            .filter(|m| self.driver_of(&m.address).as_deref() == Some(VFIO_PCI))
            .map(|m| m.address.clone())
            .collect();
        let steps = plan::plan_restore_drivers(moved, &bound);
        let mut failures = Vec::new();
        // Every step is tried: a function that cannot go back must not keep the others.
        for step in &steps {
            if let Err((_, e)) = plan::execute(&self.host, std::slice::from_ref(step)) {
                tracing::error!(?step, error = %e, "could not give a function back to its driver");
                failures.push(format!("{step:?}: {e}"));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    pub(super) fn pci_function(&self, address: &str) -> EngineResult<PciFunction> {
        pci::read_function(&self.host, address)
            .map_err(|e| EngineError::host(format!("reading {address}"), e))?
            .ok_or_else(|| EngineError::NotFound(format!("no PCI function {address} on this host")))
    }

    fn driver_of(&self, address: &str) -> Option<String> {
        self.host
            .link_name(&sriov::pci_dir(&self.host, address).join("driver"))
            .ok()
            .flatten()
    }

    // ---- both -----------------------------------------------------------------------------

    /// Whether the host shows the device as given: its type on its VF, or every function on
    /// vfio-pci.
    pub(super) fn pci_device_active(&self, info: &DeviceInfo) -> bool {
        match info.kind {
            DeviceKind::SriovVgpu => match &info.address {
                Some(vf) => sriov::read_vf_vgpu(&self.host, vf)
                    .ok()
                    .flatten()
                    .is_some_and(|s| holds_type(&s, &info.type_id)),
                None => false,
            },
            DeviceKind::Passthrough => {
                !info.functions.is_empty()
                    && info
                        .functions
                        .iter()
                        .all(|m| self.driver_of(&m.address).as_deref() == Some(VFIO_PCI))
            }
            DeviceKind::Mdev => false,
        }
    }

    /// Takes a PCI device back from its guest's side: clears the VF's type, or gives the
    /// functions back to their drivers. The caller holds the claim; the GPU's lock is taken
    /// here. A VF that shows another type now belongs to someone else and is left alone.
    /// The intent it records is closed by the caller's guard ([`Engine::intent_guard`]).
    pub(super) fn release_pci(&self, info: &DeviceInfo, keep: bool) -> EngineResult<()> {
        let gpu_lock = self.gpu_lock(&info.parent);
        let _held = gpu_lock.as_ref().map(|l| lock(l));
        if !info.active || !self.pci_device_active(info) {
            return Ok(());
        }
        let address = info.address.clone().unwrap_or_default();
        self.record_intent(
            &info.uuid,
            Operation::Release {
                kind: info.kind.into(),
                parent: info.parent.clone(),
                address: address.clone(),
                type_id: info.type_id.clone(),
                functions: info.functions.clone(),
                keep,
            },
        )?;
        self.finish_release(info.kind, &address, &info.type_id, &info.functions)
    }

    /// The host side of a release; also what a replay of a release runs.
    pub(super) fn finish_release(
        &self,
        kind: DeviceKind,
        address: &str,
        type_id: &str,
        functions: &[MovedFunction],
    ) -> EngineResult<()> {
        match kind {
            DeviceKind::SriovVgpu => {
                let state = sriov::read_vf_vgpu(&self.host, address)
                    .map_err(|e| EngineError::host(format!("reading {address}"), e))?;
                let ours = state.is_some_and(|s| holds_type(&s, type_id));
                if !ours {
                    return Ok(());
                }
                let path = sriov::pci_dir(&self.host, address).join(CURRENT_TYPE);
                match self.host.write_attr(&path, "0") {
                    Ok(()) => Ok(()),
                    // Nothing on the VF any more: what a release wants.
                    Err(e) if e.errno() == Some(libc_errno::EPERM) => Ok(()),
                    Err(e) if e.errno() == Some(libc_errno::EBUSY) => Err(EngineError::Busy(
                        format!("the vGPU on VF {address} is in use by a guest ({e})"),
                    )),
                    Err(e) => Err(EngineError::host(
                        format!("clearing the vGPU of {address}"),
                        e,
                    )),
                }
            }
            DeviceKind::Passthrough => self.give_back(functions).map_err(|why| {
                EngineError::host(
                    format!("giving {address} back to its drivers"),
                    crate::host::HostError::Parse {
                        path: sriov::pci_dir(&self.host, address),
                        reason: why,
                    },
                )
            }),
            DeviceKind::Mdev => Ok(()),
        }
    }

    /// Replays an assign a crash interrupted: done when the host shows it and no other record
    /// holds the VF; else rolled back.
    pub(super) fn replay_assign(&self, uuid: &str, op: &Operation) -> EngineResult<&'static str> {
        let Operation::Assign {
            kind,
            parent,
            address,
            type_id,
            functions,
            owner,
            params,
            persistent,
            autostart,
            created,
            new,
        } = op
        else {
            return Ok("not an assign");
        };
        let kind: DeviceKind = (*kind).into();
        let info = DeviceInfo {
            uuid: uuid.to_string(),
            parent: parent.clone(),
            type_id: type_id.clone(),
            type_name: self.type_name(parent, type_id),
            owner: owner.clone(),
            iommu_group: self.group_of(address),
            attributes: params
                .iter()
                .map(|p| (VGPU_PARAMS.to_string(), p.clone()))
                .collect(),
            active: true,
            persistent: *persistent,
            autostart: *autostart,
            created: *created,
            kind,
            address: Some(address.clone()),
            functions: functions.clone(),
        };
        let held_by_other = state::read_all(&self.host)
            .map_err(|e| EngineError::persist("reading device records", e))?
            .iter()
            .any(|r| {
                r.uuid != uuid
                    && r.address.as_deref() == Some(address.as_str())
                    && r.kind == state::DeviceKind::from(kind)
            });
        if self.pci_device_active(&info) && !held_by_other {
            self.write_record(&info, params.clone())?;
            return Ok("the device was given, so the assign was completed");
        }
        if kind == DeviceKind::Passthrough {
            if let Err(why) = self.give_back(functions) {
                tracing::warn!(%uuid, %why, "could not give every function back");
            }
        }
        if *new {
            state::remove(&self.host, uuid)
                .map_err(|e| EngineError::persist(format!("forgetting {uuid}"), e))?;
            Ok("the device was not given, so the create was rolled back")
        } else {
            Ok("the device was not given; it stays recorded, inactive")
        }
    }

    /// A device as its record describes it, inactive.
    fn describe_record(&self, rec: &state::DeviceRecord) -> DeviceInfo {
        DeviceInfo {
            uuid: rec.uuid.clone(),
            parent: rec.parent.clone(),
            type_id: rec.type_id.clone(),
            type_name: if rec.kind == state::DeviceKind::Passthrough {
                PASSTHROUGH_TYPE.to_string()
            } else {
                self.type_name(&rec.parent, &rec.type_id)
            },
            owner: rec.owner.clone(),
            iommu_group: None,
            attributes: rec
                .params
                .iter()
                .map(|p| (VGPU_PARAMS.to_string(), p.clone()))
                .collect(),
            active: false,
            persistent: rec.persistent,
            autostart: rec.autostart,
            created: rec.created,
            kind: rec.kind.into(),
            address: rec.address.clone(),
            functions: rec.functions.clone(),
        }
    }

    /// Adds the PCI devices to a snapshot: each record, active when the host shows it (a VF
    /// counts for the one record that holds it), listed when active or persistent; and the
    /// vGPUs of VFs no record holds (made by another tool), adopted under a UUID derived from
    /// the VF and type so that it stays the same from one look to the next.
    pub(super) fn merge_pci(
        &self,
        records: &[&state::DeviceRecord],
        devices: &mut BTreeMap<String, DeviceInfo>,
    ) -> EngineResult<()> {
        // Every VF of the GPUs sharing through vGPUs on VFs, read once for this look.
        let pfs: Vec<String> = self
            .gpus()
            .values()
            .filter(|e| {
                e.gpu
                    .sharing_modes
                    .contains(&crate::model::SharingMode::SriovVgpu)
            })
            .map(|e| e.gpu.address.clone())
            .collect();
        let mut vfs: BTreeMap<String, (String, VfVgpu)> = BTreeMap::new();
        for pf in &pfs {
            for s in self.vf_states(pf)? {
                vfs.insert(s.vf.clone(), (pf.clone(), s));
            }
        }
        // A record may name a VF of a GPU the inventory does not show sharing that way (yet).
        let vf_state = |vf: &str| -> Option<VfVgpu> {
            match vfs.get(vf) {
                Some((_, s)) => Some(s.clone()),
                None => sriov::read_vf_vgpu(&self.host, vf).ok().flatten(),
            }
        };
        let mut holders: BTreeMap<String, (u64, String)> = BTreeMap::new();
        let mut infos = Vec::new();
        for rec in records {
            let mut info = self.describe_record(rec);
            let state = match (info.kind, &info.address) {
                (DeviceKind::SriovVgpu, Some(vf)) => {
                    vf_state(vf).filter(|s| holds_type(s, &info.type_id))
                }
                _ => None,
            };
            info.active = match info.kind {
                DeviceKind::SriovVgpu => state.is_some(),
                _ => self.pci_device_active(&info),
            };
            if let (Some(_), Some(vf)) = (&state, &info.address) {
                let key = (info.created, info.uuid.clone());
                let best = holders.entry(vf.clone()).or_insert_with(|| key.clone());
                if key > *best {
                    *best = key;
                }
            }
            infos.push((info, state));
        }
        for (mut info, state) in infos {
            if info.active && info.kind == DeviceKind::SriovVgpu {
                let holds = info
                    .address
                    .as_ref()
                    .and_then(|vf| holders.get(vf))
                    .is_some_and(|(_, u)| *u == info.uuid);
                if !holds {
                    info.active = false;
                    info.address = None;
                }
            }
            if info.active {
                info.iommu_group = info.address.as_deref().and_then(|a| self.group_of(a));
                if let Some(s) = &state {
                    info.attributes = vf_attributes(s);
                }
            }
            if info.active || info.persistent {
                devices.insert(info.uuid.clone(), info);
            }
        }
        for (vf, (pf, s)) in &vfs {
            if s.current == 0 || holders.contains_key(vf) {
                continue;
            }
            let type_id = format!("nvidia-{}", s.current);
            let uuid = adopted_uuid(vf, &type_id);
            devices.insert(
                uuid.clone(),
                DeviceInfo {
                    uuid,
                    type_name: self.type_name(pf, &type_id),
                    parent: pf.clone(),
                    type_id,
                    owner: String::new(),
                    iommu_group: self.group_of(vf),
                    attributes: vf_attributes(s),
                    active: true,
                    persistent: false,
                    autostart: false,
                    created: 0,
                    kind: DeviceKind::SriovVgpu,
                    address: Some(vf.clone()),
                    functions: Vec::new(),
                },
            );
        }
        Ok(())
    }

    /// A stopped SR-IOV vGPU holds no VF: its record forgets the VF it had.
    pub(super) fn forget_vf_of(&self, uuid: &str) -> EngineResult<()> {
        let records = state::read_all(&self.host)
            .map_err(|e| EngineError::persist("reading device records", e))?;
        if let Some(rec) = records.into_iter().find(|r| r.uuid == uuid) {
            let info = DeviceInfo {
                address: None,
                ..self.describe_record(&rec)
            };
            self.write_record(&info, rec.params)?;
        }
        Ok(())
    }
}

/// Whether a VF's vGPU is of `type_id` (`nvidia-<id>`).
fn holds_type(s: &VfVgpu, type_id: &str) -> bool {
    s.current != 0 && Some(s.current) == sriov::nvidia_type_number(type_id)
}

/// The vendor attributes of a VF vGPU as the Device reports them.
pub(super) fn vf_attributes(s: &VfVgpu) -> BTreeMap<String, String> {
    let mut attrs = BTreeMap::new();
    attrs.insert(CURRENT_TYPE.to_string(), s.current.to_string());
    if !s.params.is_empty() {
        attrs.insert(VGPU_PARAMS.to_string(), s.params.clone());
    }
    attrs
}

/// The UUID vgpud lists a vGPU it did not make under: derived from the VF and the type, so it
/// is the same on every look and after a restart.
pub fn adopted_uuid(vf: &str, type_id: &str) -> String {
    const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x7667_7075_6400_4000_8000_0000_0000_0001);
    uuid::Uuid::new_v5(&NAMESPACE, format!("{vf}/{type_id}").as_bytes()).to_string()
}

/// The placement `vgpu-placement-id=` in vgpu_params asks for: `None` when it asks none; a
/// value that is no placement id (negative, not a number) is refused.
fn placement_asked(params: &str) -> EngineResult<Option<u64>> {
    let Some(value) = params
        .split(',')
        .find_map(|kv| kv.trim().strip_prefix("vgpu-placement-id="))
    else {
        return Ok(None);
    };
    let value = value.trim();
    value.parse::<u64>().map(Some).map_err(|_| {
        EngineError::InvalidArgument(format!(
            "vgpu-placement-id={:?} is no placement id (a whole number, 0 or more)",
            value.chars().take(24).collect::<String>()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::placement_asked;

    #[test]
    fn the_placement_asked_for_is_read_from_vgpu_params() {
        assert_eq!(placement_asked("frame_rate_limiter=0").expect("none"), None);
        assert_eq!(
            placement_asked("frame_rate_limiter=0, vgpu-placement-id=6").expect("6"),
            Some(6)
        );
        for bad in [
            "vgpu-placement-id=-1",
            "vgpu-placement-id=abc",
            "vgpu-placement-id=",
        ] {
            assert!(placement_asked(bad).is_err(), "{bad}");
        }
    }

    /// A VF holds a type only while it has a vGPU of exactly that type; its attributes are
    /// the type written and, when set, its parameters.
    #[test]
    fn a_vf_holds_only_its_own_type_and_reports_it_with_its_params() {
        use super::{holds_type, vf_attributes, CURRENT_TYPE, VGPU_PARAMS};
        let vf = |current: u32, params: &str| crate::discovery::sriov::VfVgpu {
            vf: "0000:41:00.4".into(),
            current,
            creatable: Vec::new(),
            params: params.into(),
            placement_id: None,
        };
        assert!(holds_type(&vf(1150, ""), "nvidia-1150"));
        assert!(!holds_type(&vf(1148, ""), "nvidia-1150"));
        assert!(!holds_type(&vf(0, ""), "nvidia-0"));
        assert!(!holds_type(&vf(1150, ""), "1150"));
        let plain: Vec<(String, String)> = vf_attributes(&vf(1150, "")).into_iter().collect();
        assert_eq!(plain, [(CURRENT_TYPE.to_string(), "1150".to_string())]);
        let with_params = vf_attributes(&vf(1150, "frame_rate_limiter=0"));
        assert_eq!(
            with_params.get(VGPU_PARAMS).map(String::as_str),
            Some("frame_rate_limiter=0")
        );
        assert_eq!(with_params.len(), 2);
    }
}
