//! MIG through the NVIDIA driver's control plane ([`crate::gpu_control`]): the mode, GPU
//! instances made and destroyed without ever taking one a device uses, the layout recorded
//! (profile ID and placement) and made again at boot, instances made or destroyed behind
//! vgpud's back reported as drift, and the NVML snapshot each NVIDIA GPU's properties show.
//!
//! Placement of a new instance is a pure function ([`choose_placement`]): among the free
//! placements of the profile, the one that leaves the most room for the other profiles
//! (weighted by their size), so whole-GPU and large profiles stay possible as long as they can.

use std::collections::BTreeMap;

use super::{lock, DeviceInfo, DeviceKind, Engine, EngineError, EngineResult, Event};
use crate::gpu_control::{ActiveVgpu, ControlError, GpuInstance, MigMode, MigProfile, Placement};
use crate::model::{GpuInstanceView, NvidiaState, VENDOR_NVIDIA};
use crate::persist::{self, sriov::RecordedInstance};

/// The longest profile argument accepted (`MIG 1g.18gb+me`, `19`).
pub const MAX_PROFILE_LEN: usize = 64;

/// Whether two placements share a memory slice.
fn overlaps(a: Placement, b: Placement) -> bool {
    a.start < b.start + b.size && b.start < a.start + a.size
}

/// The placements of `profile` that no instance in `instances` overlaps.
pub fn free_placements(profile: &MigProfile, instances: &[GpuInstance]) -> Vec<Placement> {
    profile
        .placements
        .iter()
        .copied()
        .filter(|p| !instances.iter().any(|i| overlaps(*p, i.placement)))
        .collect()
}

/// How many more instances of `profile` fit, placing them greedily (lowest start first) and
/// bounded by the profile's remaining count.
pub fn room_for_more(profile: &MigProfile, instances: &[GpuInstance]) -> u32 {
    let mut taken: Vec<GpuInstance> = instances.to_vec();
    let mut n = 0;
    while n < profile.remaining {
        let Some(p) = free_placements(profile, &taken).into_iter().next() else {
            break;
        };
        taken.push(GpuInstance {
            placement: p,
            ..GpuInstance::default()
        });
        n += 1;
    }
    n
}

/// Where a new instance of `profile_id` goes: the free placement after which the other
/// profiles keep the most room (the count of their free placements, weighted by size), the
/// highest start on a tie. `None` when no placement is free.
pub fn choose_placement(
    profiles: &[MigProfile],
    profile_id: u32,
    instances: &[GpuInstance],
) -> Option<Placement> {
    let profile = profiles.iter().find(|p| p.id == profile_id)?;
    let score = |candidate: Placement| -> u64 {
        let mut after = instances.to_vec();
        after.push(GpuInstance {
            placement: candidate,
            ..GpuInstance::default()
        });
        profiles
            .iter()
            .map(|p| free_placements(p, &after).len() as u64 * u64::from(p.slices.max(1)))
            .sum()
    };
    free_placements(profile, instances)
        .into_iter()
        .max_by_key(|c| (score(*c), c.start))
}

/// Finds a profile by ID (`19`), by name (`1g.18gb`, `MIG 1g.18gb`), any case.
pub fn find_profile<'a>(profiles: &'a [MigProfile], query: &str) -> Option<&'a MigProfile> {
    let q = query.trim();
    if let Ok(id) = q.parse::<u32>() {
        return profiles.iter().find(|p| p.id == id);
    }
    let bare = |s: &str| {
        s.trim()
            .trim_start_matches("MIG ")
            .trim_start_matches("mig ")
            .to_ascii_lowercase()
    };
    profiles.iter().find(|p| bare(&p.name) == bare(q))
}

/// The profile's name as vgpud shows it (`1g.18gb`).
pub fn profile_name(profile: &MigProfile) -> String {
    profile.name.trim_start_matches("MIG ").to_string()
}

/// The engine's error for a control-plane error.
pub(super) fn control_error(e: ControlError) -> EngineError {
    let msg = e.to_string();
    match e {
        ControlError::Unavailable(_) => EngineError::NotSupported(msg),
        ControlError::NotSupported { .. } => EngineError::NotSupported(msg),
        ControlError::InUse { .. } => EngineError::Busy(msg),
        ControlError::InsufficientResources { .. } => EngineError::NoRoom(msg),
        ControlError::NotFound { .. } => EngineError::NotFound(msg),
        ControlError::InvalidArgument { .. } => EngineError::InvalidArgument(msg),
        ControlError::ResetRequired { .. } => EngineError::NeedsReset(msg),
        ControlError::NoPermission { .. } | ControlError::Other { .. } => EngineError::Control(msg),
    }
}

impl Engine {
    /// Checks that `gpu` names a physical NVIDIA GPU vgpud knows.
    pub(super) fn nvidia_gpu(&self, gpu: &str) -> EngineResult<()> {
        super::request::check_name("gpu", gpu)?;
        match self.with_gpu(gpu, |g| g.is_physical() && g.vendor_id == VENDOR_NVIDIA) {
            Some(true) => Ok(()),
            Some(false) => Err(EngineError::NotSupported(format!(
                "{gpu} is not an NVIDIA GPU: MIG and the vGPU scheduler are NVIDIA's"
            ))),
            None => Err(EngineError::NotFound(format!("no GPU {gpu} on this host"))),
        }
    }

    /// Whether NVML answers; the reason otherwise.
    pub fn nvml_status(&self) -> Result<(), String> {
        self.control.availability()
    }

    /// The NVIDIA GPUs (physical), by address.
    fn nvidia_gpus(&self) -> Vec<String> {
        self.gpus()
            .values()
            .filter(|e| e.gpu.is_physical() && e.gpu.vendor_id == VENDOR_NVIDIA)
            .map(|e| e.gpu.address.clone())
            .collect()
    }

    /// Reads what NVML says of `pf` now. `None` when NVML is unavailable or does not know it.
    fn read_nvidia_state(&self, pf: &str) -> Option<NvidiaState> {
        self.read_nvidia_state_with(pf, None)
    }

    /// [`Engine::read_nvidia_state`], with `making`, a device made but not yet recorded,
    /// among vgpud's devices (so the instance it runs in is named after it).
    fn read_nvidia_state_with(&self, pf: &str, making: Option<&DeviceInfo>) -> Option<NvidiaState> {
        let c = &*self.control;
        if c.availability().is_err() {
            return None;
        }
        c.gpu(pf).ok()?;
        let mig = c.mig_mode(pf).ok();
        let (profiles, instances) = match mig {
            Some(m) if m.current => (
                c.mig_profiles(pf).unwrap_or_default(),
                c.gpu_instances(pf).unwrap_or_default(),
            ),
            Some(_) => (c.mig_profiles(pf).unwrap_or_default(), Vec::new()),
            None => (Vec::new(), Vec::new()),
        };
        let active = c.active_vgpus(pf).unwrap_or_default();
        let mut known = self.devices_of(pf);
        known.extend(making.cloned());
        let devices: Vec<&str> = known.iter().map(|d| d.uuid.as_str()).collect();
        let made_for: Vec<(u32, u32, String)> = self
            .settings(pf)
            .map(|s| {
                s.gpu_instances
                    .into_iter()
                    .filter(|r| !r.for_device.is_empty())
                    .map(|r| (r.start, r.profile_id, r.for_device))
                    .collect()
            })
            .unwrap_or_default();
        // The instance each of vgpud's SR-IOV vGPUs runs in, as its VF says: read only when
        // a vGPU without an mdev UUID runs in an instance (vendor-specific VFIO).
        let on_vfs: Vec<(u32, String)> = if active
            .iter()
            .any(|v| v.gpu_instance_id.is_some() && v.mdev_uuid.is_empty())
        {
            known
                .iter()
                .filter(|d| d.kind == DeviceKind::SriovVgpu && d.active)
                .filter_map(|d| {
                    let vf = d.address.as_deref()?;
                    let gi = crate::discovery::sriov::read_vf_gpu_instance(&self.host, vf)?;
                    Some((gi, d.uuid.clone()))
                })
                .collect()
        } else {
            Vec::new()
        };
        let user_of = |i: &GpuInstance| instance_user(i, &active, &devices, &on_vfs, &made_for);
        let gpu_instances = instances
            .into_iter()
            .map(|i| GpuInstanceView {
                profile: profiles
                    .iter()
                    .find(|p| p.id == i.profile_id)
                    .map(profile_name)
                    .unwrap_or_else(|| format!("profile {}", i.profile_id)),
                device: user_of(&i),
                instance: i,
            })
            .collect();
        Some(NvidiaState {
            mig,
            profiles,
            gpu_instances,
            vgpu_types: c.vgpu_types(pf).unwrap_or_default(),
            scheduler: c.scheduler(pf).ok(),
            heterogeneous: c.heterogeneous_mode(pf).ok(),
        })
    }

    /// Reads NVML's view of `pf` again and publishes what changed. With `external`, GPU
    /// instances that appeared or vanished are drift (vgpud did not do it), and what is found
    /// is nobody's call (no cause, also when the look is made during a call); vgpud's own
    /// operations call this with `false` under the GPU's lock.
    pub(super) fn refresh_nvidia(&self, pf: &str, external: bool) {
        let state = self.read_nvidia_state(pf);
        self.publish_nvidia(pf, state, external);
    }

    /// [`Engine::refresh_nvidia`] for vgpud's own operation, right after it made `device`
    /// (GPU lock held), before the device is recorded.
    pub(super) fn refresh_nvidia_making(&self, pf: &str, device: &DeviceInfo) {
        let state = self.read_nvidia_state_with(pf, Some(device));
        self.publish_nvidia(pf, state, false);
    }

    /// Applies NVML's view `state` of `pf` and publishes what changed (see
    /// [`Engine::refresh_nvidia`]).
    fn publish_nvidia(&self, pf: &str, state: Option<NvidiaState>, external: bool) {
        self.nvml_published
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut events = Vec::new();
        {
            let mut gpus = self.gpus.write().unwrap_or_else(|e| e.into_inner());
            let Some(entry) = gpus.get_mut(pf) else {
                return;
            };
            if entry.gpu.nvidia == state {
                return;
            }
            let before = entry.gpu.clone();
            entry.gpu.nvidia = state.clone();
            if external {
                events.extend(instance_drift(pf, before.nvidia.as_ref(), state.as_ref()));
            }
            events.push(Event::GpuChanged {
                before,
                after: entry.gpu.clone(),
            });
            events.push(Event::CapacityChanged {
                gpu: pf.to_string(),
            });
            // (Under the inventory's lock: `pf` is a physical GPU, no look-up needed.)
            self.forget_types_of_gpu(pf);
            if external {
                super::events::without_cause(|| self.events.send_all(events));
            } else {
                self.events.send_all(events);
            }
        }
        // A mode set by another tool is seen (NVML says what the driver is in).
        if let Some(h) = state.and_then(|s| s.heterogeneous) {
            if h != self.is_heterogeneous(pf) {
                self.set_mode(pf, h);
            }
        }
    }

    /// Refreshes every NVIDIA GPU's NVML view (at start, and at a full look at the host),
    /// or with `only_mig` those of MIG-capable GPUs (the slow timer: GPU instances made by
    /// `nvidia-smi` send no uevent). NVML is read without the GPU's lock, so a create never
    /// waits for it; what was read is applied only when no operation holds the GPU now and
    /// none published NVML's view since the reading (an operation of vgpud's own in flight is
    /// not drift, and a reading older than its outcome is not kept).
    pub fn refresh_nvidia_all(&self, external: bool) {
        self.refresh_nvidia_where(external, |_| true);
    }

    /// [`Engine::refresh_nvidia_all`] of the MIG-capable GPUs only.
    pub fn refresh_nvidia_mig(&self) {
        self.refresh_nvidia_where(true, |g| g.nvidia.as_ref().is_some_and(|n| n.mig.is_some()));
    }

    /// [`Engine::refresh_nvidia_all`] of one GPU (after a uevent of it), as another tool's
    /// doing.
    pub(super) fn refresh_nvidia_of(&self, pf: &str) {
        self.refresh_nvidia_where(true, |g| g.address == pf);
    }

    fn refresh_nvidia_where(&self, external: bool, which: impl Fn(&crate::model::Gpu) -> bool) {
        use std::sync::atomic::Ordering;
        if self.control.availability().is_err() {
            return;
        }
        for pf in self.nvidia_gpus() {
            if !self.with_gpu(&pf, &which).unwrap_or(false) {
                continue;
            }
            let published = self.nvml_published.load(Ordering::Acquire);
            let state = self.read_nvidia_state(&pf);
            let gpu_lock = self.gpu_lock(&pf);
            let held = match &gpu_lock {
                Some(l) => match l.try_lock() {
                    Ok(g) => Some(g),
                    Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                    // An operation runs on the GPU: it reads NVML itself when it is done.
                    Err(std::sync::TryLockError::WouldBlock) => continue,
                },
                None => None,
            };
            if self.nvml_published.load(Ordering::Acquire) != published {
                continue;
            }
            self.publish_nvidia(&pf, state, external);
            drop(held);
        }
    }

    /// NVML's view of a GPU as last read.
    pub fn nvidia_state(&self, pf: &str) -> Option<NvidiaState> {
        self.with_gpu(pf, |g| g.nvidia.clone()).flatten()
    }

    /// The GPU-instance profiles of `gpu`, with what is free now.
    pub fn mig_profiles(&self, gpu: &str) -> EngineResult<Vec<(MigProfile, Vec<Placement>)>> {
        self.nvidia_gpu(gpu)?;
        let profiles = self.control.mig_profiles(gpu).map_err(control_error)?;
        let instances = match self.control.mig_mode(gpu).map_err(control_error)? {
            m if m.current => self.control.gpu_instances(gpu).map_err(control_error)?,
            _ => Vec::new(),
        };
        Ok(profiles
            .into_iter()
            .map(|p| {
                let free = free_placements(&p, &instances);
                (p, free)
            })
            .collect())
    }

    /// Turns MIG on or off. Refused while VFs are enabled, GPU instances exist or a device
    /// runs on the GPU (`Busy`); a GPU without MIG is `NotSupported`; a mode that waits for a
    /// reset is `NeedsReset` (the mode is pending). With `persistent` the mode is recorded and
    /// checked at boot.
    pub fn set_mig_mode(
        &self,
        gpu: &str,
        enabled: bool,
        persistent: bool,
    ) -> EngineResult<MigMode> {
        self.nvidia_gpu(gpu)?;
        let gpu_lock = self.physical_gpu_lock(gpu)?;
        let held = lock(&gpu_lock);
        let now = self.control.mig_mode(gpu).map_err(control_error)?;
        let result = if now.current == enabled && now.pending == enabled {
            Ok(now)
        } else {
            self.refuse_mig_change(gpu, enabled)?;
            match self.control.set_mig_mode(gpu, enabled) {
                Ok(m) if m.current == enabled => Ok(m),
                Ok(m) => Err(EngineError::NeedsReset(format!(
                    "MIG mode of {gpu} is pending {} until the GPU is reset (the driver applies it at the next GPU reset or reboot)",
                    if m.pending { "on" } else { "off" }
                ))),
                Err(e) => Err(control_error(e)),
            }
        };
        self.refresh_nvidia(gpu, false);
        drop(held);
        if persistent && !matches!(result, Err(ref e) if !matches!(e, EngineError::NeedsReset(_))) {
            let mut settings = self.settings(gpu)?;
            settings.mig_mode = Some(enabled);
            if !enabled {
                settings.gpu_instances.clear();
            }
            persist::sriov::write(&self.host, &settings)
                .map_err(|e| EngineError::persist(format!("recording the MIG mode of {gpu}"), e))?;
        }
        result
    }

    fn refuse_mig_change(&self, gpu: &str, enabled: bool) -> EngineResult<()> {
        let vfs = self
            .with_gpu(gpu, |g| g.sriov.as_ref().map_or(0, |s| s.num_vfs))
            .unwrap_or(0);
        if vfs > 0 {
            return Err(EngineError::Busy(format!(
                "{gpu} has {vfs} SR-IOV VFs enabled; the driver changes the MIG mode only with VFs off (SetVfCount {gpu} 0 first, then enable them again after)"
            )));
        }
        let busy: Vec<String> = self
            .devices_of(gpu)
            .into_iter()
            .filter(|d| d.active)
            .map(|d| format!("{} ({})", d.uuid, d.type_name))
            .collect();
        if !busy.is_empty() {
            return Err(EngineError::Busy(format!(
                "{gpu} runs devices: {}; MIG mode changes only on an idle GPU",
                busy.join(", ")
            )));
        }
        if !enabled {
            let instances = self.control.gpu_instances(gpu).unwrap_or_default();
            if !instances.is_empty() {
                let ids: Vec<String> = instances.iter().map(|i| i.id.to_string()).collect();
                return Err(EngineError::Busy(format!(
                    "{gpu} has GPU instances {}; destroy them first (DestroyGpuInstance)",
                    ids.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Makes a GPU instance of `profile` (ID or name) at placement start `placement` (or the
    /// one [`choose_placement`] picks), with one compute instance if `compute_instance`.
    /// With `persistent` it is recorded and made again at boot at the same placement.
    pub fn create_gpu_instance(
        &self,
        gpu: &str,
        profile: &str,
        placement: Option<u32>,
        compute_instance: bool,
        persistent: bool,
    ) -> EngineResult<GpuInstance> {
        super::request::check_len("profile", profile, MAX_PROFILE_LEN)?;
        self.nvidia_gpu(gpu)?;
        let gpu_lock = self.physical_gpu_lock(gpu)?;
        let held = lock(&gpu_lock);
        let made = self.make_instance_locked(gpu, profile, placement, compute_instance)?;
        self.refresh_nvidia(gpu, false);
        drop(held);
        if persistent {
            self.record_instance(gpu, &made, compute_instance, "")?;
        }
        Ok(made)
    }

    /// [`Engine::create_gpu_instance`] with the GPU's lock held; refreshes nothing.
    pub(super) fn make_instance_locked(
        &self,
        gpu: &str,
        profile: &str,
        placement: Option<u32>,
        compute_instance: bool,
    ) -> EngineResult<GpuInstance> {
        let mode = self.control.mig_mode(gpu).map_err(control_error)?;
        if !mode.current {
            return Err(EngineError::NotSupported(format!(
                "MIG is off on {gpu}{}; SetMigMode {gpu} true first",
                if mode.pending {
                    " (on is pending a GPU reset)"
                } else {
                    ""
                }
            )));
        }
        let profiles = self.control.mig_profiles(gpu).map_err(control_error)?;
        let Some(p) = find_profile(&profiles, profile) else {
            let known: Vec<String> = profiles
                .iter()
                .map(|p| format!("{} ({})", profile_name(p), p.id))
                .collect();
            return Err(EngineError::NotFound(format!(
                "{gpu} has no GPU-instance profile {profile:?} (it has: {})",
                known.join(", ")
            )));
        };
        let instances = self.control.gpu_instances(gpu).map_err(control_error)?;
        let at = match placement {
            Some(start) => {
                let Some(want) = p.placements.iter().copied().find(|q| q.start == start) else {
                    let starts: Vec<String> =
                        p.placements.iter().map(|q| q.start.to_string()).collect();
                    return Err(EngineError::InvalidArgument(format!(
                        "{} has no placement starting at {start} on {gpu} (its starts: {})",
                        profile_name(p),
                        starts.join(", ")
                    )));
                };
                if let Some(i) = instances.iter().find(|i| overlaps(i.placement, want)) {
                    return Err(EngineError::NoRoom(format!(
                        "placement {start} of {} on {gpu} is taken by GPU instance {} ({}:{})",
                        profile_name(p),
                        i.id,
                        i.placement.start,
                        i.placement.size
                    )));
                }
                Some(want)
            }
            None => Some(
                choose_placement(&profiles, p.id, &instances).ok_or_else(|| {
                    EngineError::NoRoom(format!(
                        "no free placement of {} on {gpu} ({} instances exist)",
                        profile_name(p),
                        instances.len()
                    ))
                })?,
            ),
        };
        self.control
            .create_gpu_instance(gpu, p.id, at, compute_instance)
            .map_err(control_error)
    }

    fn record_instance(
        &self,
        gpu: &str,
        made: &GpuInstance,
        compute_instance: bool,
        for_device: &str,
    ) -> EngineResult<()> {
        let mut settings = self.settings(gpu)?;
        settings
            .gpu_instances
            .retain(|r| (r.start, r.size) != (made.placement.start, made.placement.size));
        settings.gpu_instances.push(RecordedInstance {
            profile_id: made.profile_id,
            start: made.placement.start,
            size: made.placement.size,
            compute_instance,
            id: made.id,
            for_device: for_device.to_string(),
        });
        persist::sriov::write(&self.host, &settings)
            .map_err(|e| EngineError::persist(format!("recording the MIG layout of {gpu}"), e))
    }

    /// Destroys GPU instance `id` of `gpu`; refused (`Busy`) while a device uses it.
    pub fn destroy_gpu_instance(&self, gpu: &str, id: u32) -> EngineResult<()> {
        self.nvidia_gpu(gpu)?;
        let gpu_lock = self.physical_gpu_lock(gpu)?;
        let held = lock(&gpu_lock);
        self.refresh_nvidia(gpu, false);
        let state = self.nvidia_state(gpu).unwrap_or_default();
        let Some(view) = state.gpu_instances.iter().find(|v| v.instance.id == id) else {
            return Err(EngineError::NotFound(format!(
                "{gpu} has no GPU instance {id}"
            )));
        };
        if !view.device.is_empty() {
            return Err(EngineError::Busy(format!(
                "GPU instance {id} ({}) of {gpu} is used by {}; remove that device first",
                view.profile, view.device
            )));
        }
        let placement = view.instance.placement;
        self.control
            .destroy_gpu_instance(gpu, id)
            .map_err(control_error)?;
        self.refresh_nvidia(gpu, false);
        drop(held);
        self.forget_instance(gpu, placement)
    }

    /// The GPU instances of `gpu` as NVML lists them now, each with its profile's name;
    /// none when MIG is off or NVML cannot say.
    pub(super) fn named_instances(&self, gpu: &str) -> Vec<(GpuInstance, String)> {
        let c = &*self.control;
        if !c.mig_mode(gpu).is_ok_and(|m| m.current) {
            return Vec::new();
        }
        let profiles = c.mig_profiles(gpu).unwrap_or_default();
        c.gpu_instances(gpu)
            .unwrap_or_default()
            .into_iter()
            .map(|i| {
                let name = profiles
                    .iter()
                    .find(|p| p.id == i.profile_id)
                    .map(profile_name)
                    .unwrap_or_else(|| format!("profile {}", i.profile_id));
                (i, name)
            })
            .collect()
    }

    /// For a MIG-backed vGPU type (`type_id`, `nvidia-1414`) on `gpu` in MIG mode, as a MIG
    /// re-shape sees it: the type's GPU-instance profile and its placements, and each GPU
    /// instance now with the UUID of the device in it (empty: free) and whether vgpud
    /// recorded it (made it, for a device or persistently). `None` for other types, with
    /// MIG off, or when NVML cannot say.
    pub fn mig_shape(&self, gpu: &str, type_id: &str) -> Option<MigShapeView> {
        let number = crate::discovery::sriov::nvidia_type_number(type_id)?;
        let profile_id = self.mig_profile_of_type(gpu, number)?;
        self.refresh_nvidia(gpu, true);
        let state = self.nvidia_state(gpu)?;
        if !state.mig.is_some_and(|m| m.current) {
            return None;
        }
        let placements = state
            .profiles
            .iter()
            .find(|p| p.id == profile_id)?
            .placements
            .clone();
        let recorded = self
            .settings(gpu)
            .map(|s| s.gpu_instances)
            .unwrap_or_default();
        let instances = state
            .gpu_instances
            .into_iter()
            .map(|v| {
                let known = is_recorded(&recorded, &v.instance);
                (v.instance, v.device, known)
            })
            .collect();
        Some(MigShapeView {
            profile_id,
            placements,
            instances,
        })
    }

    /// Destroys GPU instance `id` of `gpu` for a MIG re-shape, only while it is still the one
    /// at `placement`, free, and recorded by vgpud; `Ok(false)` when it is gone already (its
    /// spare's removal destroyed it). Otherwise as [`Engine::destroy_gpu_instance`].
    pub fn destroy_free_instance(
        &self,
        gpu: &str,
        id: u32,
        placement: Placement,
    ) -> EngineResult<bool> {
        self.nvidia_gpu(gpu)?;
        let gpu_lock = self.physical_gpu_lock(gpu)?;
        let held = lock(&gpu_lock);
        self.refresh_nvidia(gpu, false);
        let state = self.nvidia_state(gpu).unwrap_or_default();
        let Some(view) = instance_still_at(&state.gpu_instances, id, placement) else {
            return Ok(false);
        };
        if !view.device.is_empty() {
            return Err(EngineError::Busy(format!(
                "GPU instance {id} ({}) of {gpu} is used by {}",
                view.profile, view.device
            )));
        }
        if !is_recorded(&self.settings(gpu)?.gpu_instances, &view.instance) {
            return Err(EngineError::Busy(format!(
                "GPU instance {id} of {gpu} was not made by vgpud; it is left alone"
            )));
        }
        self.control
            .destroy_gpu_instance(gpu, id)
            .map_err(control_error)?;
        self.refresh_nvidia(gpu, false);
        drop(held);
        self.forget_instance(gpu, placement)?;
        Ok(true)
    }

    pub(super) fn forget_instance(&self, gpu: &str, placement: Placement) -> EngineResult<()> {
        let mut settings = self.settings(gpu)?;
        let before = settings.gpu_instances.len();
        settings
            .gpu_instances
            .retain(|r| (r.start, r.size) != (placement.start, placement.size));
        if settings.gpu_instances.len() == before {
            return Ok(());
        }
        persist::sriov::write(&self.host, &settings)
            .map_err(|e| EngineError::persist(format!("recording the MIG layout of {gpu}"), e))
    }

    /// The GPU-instance profile a vGPU type needs on `pf` (`None`: time-sliced, or NVML does
    /// not say).
    pub(super) fn mig_profile_of_type(&self, pf: &str, type_number: u32) -> Option<u32> {
        self.with_gpu(pf, |g| {
            g.nvidia
                .as_ref()?
                .vgpu_types
                .iter()
                .find(|t| t.id == type_number)?
                .gpu_instance_profile
        })
        .flatten()
    }

    /// For a MIG-backed type on a GPU in MIG mode: how many more vGPUs of it the GPU's MIG
    /// layout allows (free instances of its profile, plus instances that could be made when
    /// `create_instance`). `None` for other types and GPUs.
    pub(super) fn mig_room(
        &self,
        pf: &str,
        type_number: u32,
        create_instance: bool,
    ) -> Option<u32> {
        mig_room_in(&self.nvidia_state(pf)?, type_number, create_instance)
    }

    /// Why a MIG-backed type has no room on `pf`.
    pub(super) fn why_no_instance(
        &self,
        pf: &str,
        type_number: u32,
        create_instance: bool,
    ) -> String {
        let state = self.nvidia_state(pf).unwrap_or_default();
        if !state.mig.is_some_and(|m| m.current) {
            return format!("MIG is off (a MIG-backed type needs SetMigMode {pf} true)");
        }
        let profile = self
            .mig_profile_of_type(pf, type_number)
            .and_then(|id| state.profiles.iter().find(|p| p.id == id))
            .map(profile_name)
            .unwrap_or_default();
        if create_instance {
            format!("no free GPU instance of {profile} and no room to make one")
        } else {
            format!("no free GPU instance of {profile} (create_instance is false)")
        }
    }

    /// Before a MIG-backed vGPU is written to a VF of `pf` (GPU lock held): makes a GPU
    /// instance of the type's profile when none is free and `create_instance` allows.
    /// Returns the instance made, if one was.
    pub(super) fn instance_for_vgpu(
        &self,
        pf: &str,
        type_number: u32,
        create_instance: bool,
    ) -> EngineResult<Option<GpuInstance>> {
        let Some(profile_id) = self.mig_profile_of_type(pf, type_number) else {
            return Ok(None);
        };
        self.refresh_nvidia(pf, true);
        let state = self.nvidia_state(pf).unwrap_or_default();
        if !state.mig.is_some_and(|m| m.current) {
            return Ok(None);
        }
        let free = state
            .gpu_instances
            .iter()
            .any(|v| v.instance.profile_id == profile_id && v.device.is_empty());
        if free || !create_instance {
            return Ok(None);
        }
        let made = self.make_instance_locked(pf, &profile_id.to_string(), None, false)?;
        self.refresh_nvidia(pf, false);
        Ok(Some(made))
    }

    /// Records that `made` was made for device `uuid` (destroyed when it is removed).
    pub(super) fn record_instance_for(&self, pf: &str, made: &GpuInstance, uuid: &str) {
        if let Err(e) = self.record_instance(pf, made, false, uuid) {
            tracing::warn!(%pf, %uuid, error = %e, "could not record the GPU instance made for a device");
        }
    }

    /// Undoes [`Engine::instance_for_vgpu`] when the vGPU could not be made (GPU lock held).
    /// The GPU's known types are forgotten even when NVML's view ends as it was published:
    /// types read from sysfs while the instance was there would be kept.
    pub(super) fn drop_instance(&self, pf: &str, made: &GpuInstance) {
        if let Err(e) = self.control.destroy_gpu_instance(pf, made.id) {
            tracing::warn!(%pf, id = made.id, error = %e, "could not destroy the GPU instance made for a vGPU that failed");
        }
        self.refresh_nvidia(pf, false);
        self.forget_types_of_gpu(pf);
    }

    /// After device `uuid` of `pf` is gone: destroys the GPU instance vgpud made for it, if
    /// no other vGPU has moved into it.
    pub(super) fn release_instance_of(&self, pf: &str, uuid: &str) {
        let Ok(settings) = self.settings(pf) else {
            return;
        };
        let Some(rec) = settings
            .gpu_instances
            .iter()
            .find(|r| r.for_device == uuid)
            .cloned()
        else {
            return;
        };
        let gpu_lock = self.gpu_lock(pf);
        let _held = gpu_lock.as_ref().map(|l| lock(l));
        self.refresh_nvidia(pf, false);
        let state = self.nvidia_state(pf).unwrap_or_default();
        match leftover_instance(&state.gpu_instances, &rec) {
            Leftover::Free(id) => {
                if let Err(e) = self.control.destroy_gpu_instance(pf, id) {
                    tracing::warn!(%pf, id, error = %e, "could not destroy the GPU instance of a removed vGPU");
                    return;
                }
                self.refresh_nvidia(pf, false);
            }
            Leftover::UsedBy(id, user) => {
                tracing::info!(%pf, id, %user, "the GPU instance made for a removed vGPU is used by another; it stays");
            }
            Leftover::Gone => {}
        }
        let placement = Placement {
            start: rec.start,
            size: rec.size,
        };
        if let Err(e) = self.forget_instance(pf, placement) {
            tracing::warn!(%pf, error = %e, "could not update the recorded MIG layout");
        }
    }

    /// Boot: checks the recorded MIG mode of `pf` (it survives reboots on the GPU; a
    /// difference is reported, not forced).
    pub(super) fn check_mig_mode(&self, pf: &str, enabled: bool) -> EngineResult<()> {
        let mode = self.control.mig_mode(pf).map_err(control_error)?;
        if mode.current == enabled {
            return Ok(());
        }
        Err(EngineError::Busy(format!(
            "{pf} is recorded with MIG {} but is {} (pending {}); SetMigMode sets it",
            on_off(enabled),
            on_off(mode.current),
            on_off(mode.pending)
        )))
    }

    /// Boot: makes the recorded GPU instances of `pf` again, at their placements, in the
    /// recorded order; those of devices that are gone are forgotten.
    pub(super) fn restore_instances(&self, pf: &str) -> EngineResult<usize> {
        let gpu_lock = self.physical_gpu_lock(pf)?;
        let held = lock(&gpu_lock);
        let mut settings = self.settings(pf)?;
        let existing = self.control.gpu_instances(pf).map_err(control_error)?;
        let mut made = 0;
        let mut failures = Vec::new();
        let mut keep = Vec::new();
        for mut rec in std::mem::take(&mut settings.gpu_instances) {
            if !rec.for_device.is_empty()
                && !self
                    .device(&rec.for_device)
                    .is_some_and(|d| d.persistent || d.active)
            {
                continue;
            }
            if let Some(i) = existing
                .iter()
                .find(|i| i.placement.start == rec.start && i.profile_id == rec.profile_id)
            {
                rec.id = i.id;
                keep.push(rec);
                continue;
            }
            let placement = Some(Placement {
                start: rec.start,
                size: rec.size,
            });
            match self.control.create_gpu_instance(
                pf,
                rec.profile_id,
                placement,
                rec.compute_instance,
            ) {
                Ok(i) => {
                    rec.id = i.id;
                    made += 1;
                }
                Err(e) => {
                    failures.push(format!("profile {} at {}: {e}", rec.profile_id, rec.start))
                }
            }
            keep.push(rec);
        }
        settings.gpu_instances = keep;
        self.refresh_nvidia(pf, false);
        drop(held);
        persist::sriov::write(&self.host, &settings)
            .map_err(|e| EngineError::persist(format!("recording the MIG layout of {pf}"), e))?;
        if failures.is_empty() {
            Ok(made)
        } else {
            Err(EngineError::Busy(format!(
                "GPU instances of {pf} not made again: {}",
                failures.join("; ")
            )))
        }
    }
}

/// A MIG GPU as [`Engine::mig_shape`] shows it to a re-shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigShapeView {
    /// The GPU-instance profile of the type asked for.
    pub profile_id: u32,
    /// That profile's placements.
    pub placements: Vec<Placement>,
    /// The GPU's instances: (instance, UUID of the device in it or empty, recorded by vgpud).
    pub instances: Vec<(GpuInstance, String, bool)>,
}

/// [`Engine::mig_room`] on a GPU's NVML view: `None` for a type that is not MIG-backed,
/// 0 with MIG off, else the free instances of its profile plus, with `create_instance`, how
/// many more the layout has room for.
pub(super) fn mig_room_in(
    state: &NvidiaState,
    type_number: u32,
    create_instance: bool,
) -> Option<u32> {
    let profile_id = state
        .vgpu_types
        .iter()
        .find(|t| t.id == type_number)?
        .gpu_instance_profile?;
    if !state.mig.is_some_and(|m| m.current) {
        return Some(0);
    }
    let free = state
        .gpu_instances
        .iter()
        .filter(|v| v.instance.profile_id == profile_id && v.device.is_empty())
        .count();
    let more = if create_instance {
        let instances: Vec<GpuInstance> = state.gpu_instances.iter().map(|v| v.instance).collect();
        state
            .profiles
            .iter()
            .find(|p| p.id == profile_id)
            .map_or(0, |p| room_for_more(p, &instances))
    } else {
        0
    };
    Some(u32::try_from(free).unwrap_or(u32::MAX) + more)
}

/// The GPU instance that is still instance `id` at `placement` among `instances` (`None`: it
/// went, or the driver gave its ID or its placement to another since).
fn instance_still_at(
    instances: &[GpuInstanceView],
    id: u32,
    placement: Placement,
) -> Option<&GpuInstanceView> {
    instances
        .iter()
        .find(|v| v.instance.id == id && v.instance.placement == placement)
}

/// What is left of the GPU instance vgpud made for a removed device.
#[derive(Debug, PartialEq, Eq)]
enum Leftover<'a> {
    /// Instance `.0` is still there and free: it is destroyed.
    Free(u32),
    /// Instance `.0` is used by device `.1`, which moved into it: it stays.
    UsedBy(u32, &'a str),
    /// It is gone.
    Gone,
}

/// [`Leftover`] of the instance `rec` records (found by its placement's start and its
/// profile; IDs change) among `instances`.
fn leftover_instance<'a>(instances: &'a [GpuInstanceView], rec: &RecordedInstance) -> Leftover<'a> {
    let here = instances.iter().find(|v| {
        v.instance.placement.start == rec.start && v.instance.profile_id == rec.profile_id
    });
    match here {
        Some(v) if v.device.is_empty() => Leftover::Free(v.instance.id),
        Some(v) => Leftover::UsedBy(v.instance.id, &v.device),
        None => Leftover::Gone,
    }
}

/// Whether vgpud recorded GPU instance `i` (made it, for a device or persistently): a record
/// of its placement and profile.
fn is_recorded(recorded: &[RecordedInstance], i: &GpuInstance) -> bool {
    recorded.iter().any(|r| {
        (r.start, r.size, r.profile_id) == (i.placement.start, i.placement.size, i.profile_id)
    })
}

/// Who uses GPU instance `i`, as the GPU's `GpuInstances` name it: NVML says which instance a
/// vGPU runs in, not which VF it is on (its PCI id is the guest's), so the device is named by
/// the vGPU's mdev UUID among `devices`, else by the VF that says it runs in `i`
/// (`on_vfs`: instance ID and the UUID of vgpud's device on the VF, from the VF's
/// `nvidia/gpu_instance_id`), else by vgpud's record of the instance it made for a device
/// (`made_for`: start, profile, UUID), else by the vGPU's type; empty when no vGPU runs in it.
fn instance_user(
    i: &GpuInstance,
    active: &[ActiveVgpu],
    devices: &[&str],
    on_vfs: &[(u32, String)],
    made_for: &[(u32, u32, String)],
) -> String {
    let Some(v) = active.iter().find(|v| v.gpu_instance_id == Some(i.id)) else {
        return String::new();
    };
    let by_mdev = devices
        .iter()
        .find(|d| !v.mdev_uuid.is_empty() && d.eq_ignore_ascii_case(&v.mdev_uuid));
    let by_vf = on_vfs
        .iter()
        .find(|(gi, _)| *gi == i.id)
        .map(|(_, uuid)| uuid.clone());
    let by_record = made_for
        .iter()
        .find(|(start, profile, _)| *start == i.placement.start && *profile == i.profile_id)
        .map(|(_, _, uuid)| uuid.clone());
    by_mdev
        .map(|d| d.to_string())
        .or(by_vf)
        .or(by_record)
        .unwrap_or_else(|| format!("(vGPU type {})", v.type_id))
}

/// `GPU instance 3 (3g.71gb at placement 4)`.
pub(super) fn describe_instance(i: &GpuInstance, profile: &str) -> String {
    format!(
        "GPU instance {} ({profile} at placement {})",
        i.id, i.placement.start
    )
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The drift of GPU instances between two NVML views of `pf`.
fn instance_drift(
    pf: &str,
    before: Option<&NvidiaState>,
    after: Option<&NvidiaState>,
) -> Vec<Event> {
    let ids = |s: Option<&NvidiaState>| -> BTreeMap<(u32, u32), String> {
        s.map(|s| {
            s.gpu_instances
                .iter()
                .map(|v| {
                    (
                        (v.instance.placement.start, v.instance.profile_id),
                        v.profile.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
    };
    let (b, a) = (ids(before), ids(after));
    // Without a view before (NVML just became available), nothing is drift.
    if before.is_none() || after.is_none() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for ((start, _), name) in a.iter().filter(|(k, _)| !b.contains_key(k)) {
        out.push(Event::GpuDrift {
            gpu: pf.to_string(),
            event: "gpu-instance-created-externally",
            detail: format!(
                "a GPU instance {name} at placement {start} appeared on {pf}, not made by vgpud"
            ),
        });
    }
    for ((start, _), name) in b.iter().filter(|(k, _)| !a.contains_key(k)) {
        out.push(Event::GpuDrift {
            gpu: pf.to_string(),
            event: "gpu-instance-destroyed-externally",
            detail: format!("the GPU instance {name} at placement {start} of {pf} was destroyed by another tool"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(id: u32, slices: u32, size: u32, starts: &[u32], max: u32) -> MigProfile {
        MigProfile {
            id,
            name: format!("MIG {slices}g.{id}gb"),
            slices,
            max_instances: max,
            remaining: max,
            placements: starts
                .iter()
                .map(|&start| Placement { start, size })
                .collect(),
            ..MigProfile::default()
        }
    }

    /// The H100/H200 table of hardware.md §3.2 with the driver's placements.
    fn hopper() -> Vec<MigProfile> {
        vec![
            profile(19, 1, 1, &[0, 1, 2, 3, 4, 5, 6], 7),
            profile(15, 1, 2, &[0, 2, 4, 6], 4),
            profile(14, 2, 2, &[0, 2, 4], 3),
            profile(9, 3, 4, &[0, 4], 2),
            profile(5, 4, 4, &[0], 1),
            profile(0, 7, 8, &[0], 1),
        ]
    }

    fn at(start: u32, size: u32, profile_id: u32) -> GpuInstance {
        GpuInstance {
            id: start + 1,
            profile_id,
            placement: Placement { start, size },
            compute_instances: 0,
        }
    }

    #[test]
    fn an_instance_is_named_by_its_vgpus_mdev_then_its_vf_then_vgpuds_record_then_the_vgpus_type() {
        const DEV: &str = "5eed0000-0000-4000-8000-00000000000a";
        let gi = at(4, 4, 9);
        let vgpu = |instance: u32, mdev: &str| ActiveVgpu {
            type_id: 1417,
            mdev_uuid: mdev.into(),
            gpu_instance_id: Some(instance),
            ..ActiveVgpu::default()
        };
        let record = vec![(4, 9, "recorded".to_string())];
        // No vGPU runs in it: nobody.
        let none: &[(u32, String)] = &[];
        assert_eq!(
            instance_user(&gi, &[vgpu(1, "")], &[DEV], none, &record),
            ""
        );
        // The mdev UUID names a device (in any case) before the record does.
        let upper = DEV.to_uppercase();
        let vf_says = [(5, "on-the-vf".to_string())];
        assert_eq!(
            instance_user(&gi, &[vgpu(5, &upper)], &[DEV], &vf_says, &record),
            DEV
        );
        // Without an mdev UUID, the VF whose gpu_instance_id is this instance's ID names it
        // before the record does; a VF in another instance does not.
        assert_eq!(
            instance_user(&gi, &[vgpu(5, "")], &[DEV], &vf_says, &record),
            "on-the-vf"
        );
        let elsewhere = [(6, "on-the-vf".to_string())];
        assert_eq!(
            instance_user(&gi, &[vgpu(5, "")], &[DEV], &elsewhere, &record),
            "recorded"
        );
        // An mdev UUID of no device, or none (vendor-specific VFIO): the record, where it is
        // of this instance's start and profile.
        for mdev in ["5eed0000-0000-4000-8000-0000000000ff", ""] {
            assert_eq!(
                instance_user(&gi, &[vgpu(5, mdev)], &[DEV, ""], none, &record),
                "recorded"
            );
        }
        for other in [(0, 9), (4, 14)] {
            let record = vec![(other.0, other.1, "recorded".to_string())];
            assert_eq!(
                instance_user(&gi, &[vgpu(5, "")], &[DEV, ""], none, &record),
                "(vGPU type 1417)"
            );
        }
    }

    #[test]
    fn free_placements_leave_out_taken_slices() {
        let p = hopper();
        let taken = [at(0, 4, 9)];
        let free: Vec<u32> = free_placements(&p[3], &taken)
            .iter()
            .map(|p| p.start)
            .collect();
        assert_eq!(free, vec![4]);
        assert!(free_placements(&p[5], &taken).is_empty());
        assert_eq!(room_for_more(&p[0], &taken), 3);
    }

    #[test]
    fn a_small_instance_goes_where_it_keeps_large_ones_possible() {
        let p = hopper();
        // On an empty GPU a 1g instance does not go to slice 0 (that would rule out 4g and
        // one 3g); the highest start keeps the 4g and a 3g placement.
        let first = choose_placement(&p, 19, &[]).expect("room");
        assert_eq!(first.start, 6);
        let after = [at(6, 1, 19)];
        assert!(!free_placements(&p[4], &after).is_empty(), "4g still fits");
        // A second 1g packs next to the first, still keeping 4g at 0.
        let second = choose_placement(&p, 19, &after).expect("room");
        assert_eq!(second.start, 5);
        // A 3g on a GPU with a 1g at 6 takes 0 (4 overlaps the 1g).
        assert_eq!(choose_placement(&p, 9, &after).map(|p| p.start), Some(0));
        // Nothing left for 7g.
        assert_eq!(choose_placement(&p, 0, &after), None);
    }

    #[test]
    fn profiles_are_found_by_id_and_by_name() {
        let mut p = hopper();
        p[0].name = "MIG 1g.18gb".into();
        assert_eq!(find_profile(&p, "19").map(|p| p.id), Some(19));
        assert_eq!(find_profile(&p, "1g.18gb").map(|p| p.id), Some(19));
        assert_eq!(find_profile(&p, "MIG 1G.18GB").map(|p| p.id), Some(19));
        assert!(find_profile(&p, "8g.1tb").is_none());
    }

    #[test]
    fn instances_that_appear_or_vanish_are_drift() {
        let view = |starts: &[u32]| NvidiaState {
            gpu_instances: starts
                .iter()
                .map(|&s| GpuInstanceView {
                    instance: at(s, 1, 19),
                    profile: "1g.18gb".into(),
                    device: String::new(),
                })
                .collect(),
            ..NvidiaState::default()
        };
        let d = instance_drift("g", Some(&view(&[0, 1])), Some(&view(&[1, 2])));
        let names: Vec<&str> = d
            .iter()
            .map(|e| match e {
                Event::GpuDrift { event, .. } => *event,
                _ => "",
            })
            .collect();
        assert_eq!(
            names,
            vec![
                "gpu-instance-created-externally",
                "gpu-instance-destroyed-externally"
            ]
        );
        let details: Vec<&str> = d
            .iter()
            .map(|e| match e {
                Event::GpuDrift { detail, .. } => detail.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(
            details,
            vec![
                "a GPU instance 1g.18gb at placement 2 appeared on g, not made by vgpud",
                "the GPU instance 1g.18gb at placement 0 of g was destroyed by another tool"
            ]
        );
        assert!(instance_drift("g", None, Some(&view(&[0]))).is_empty());
        assert!(instance_drift("g", Some(&view(&[0])), None).is_empty());
    }

    fn pl(start: u32, size: u32) -> Placement {
        Placement { start, size }
    }

    #[test]
    fn placements_overlap_only_when_they_share_a_slice() {
        // Adjacent placements, either way round, share nothing.
        assert!(!overlaps(pl(0, 1), pl(1, 1)));
        assert!(!overlaps(pl(1, 1), pl(0, 1)));
        assert!(!overlaps(pl(0, 4), pl(4, 4)));
        assert!(!overlaps(pl(4, 4), pl(0, 4)));
        // Far apart.
        assert!(!overlaps(pl(0, 1), pl(6, 1)));
        assert!(!overlaps(pl(6, 1), pl(0, 1)));
        // The same slice, one inside the other, a partial overlap.
        assert!(overlaps(pl(2, 1), pl(2, 1)));
        assert!(overlaps(pl(5, 1), pl(5, 1)));
        assert!(overlaps(pl(0, 2), pl(1, 1)));
        assert!(overlaps(pl(1, 1), pl(0, 2)));
        assert!(overlaps(pl(0, 8), pl(6, 1)));
        assert!(overlaps(pl(6, 1), pl(0, 8)));
        assert!(overlaps(pl(3, 2), pl(4, 4)));
        assert!(overlaps(pl(4, 4), pl(3, 2)));
    }

    #[test]
    fn room_for_more_mig_instances_is_bounded_by_the_remaining_count() {
        let mut p = hopper();
        // Seven 1g placements free, but the driver says only two more may be made.
        p[0].remaining = 2;
        assert_eq!(room_for_more(&p[0], &[]), 2);
        p[0].remaining = 0;
        assert_eq!(room_for_more(&p[0], &[]), 0);
        // Every free placement counts when the count allows it.
        p[0].remaining = 7;
        assert_eq!(room_for_more(&p[0], &[at(0, 4, 9)]), 3);
        assert_eq!(room_for_more(&p[3], &[at(6, 1, 19)]), 1);
        assert_eq!(room_for_more(&p[5], &[at(6, 1, 19)]), 0);
    }

    #[test]
    fn a_mig_placement_is_scored_by_the_room_it_leaves() {
        let p = hopper();
        // A 1g at slice 0 already rules out everything at 0; a second 1g at 1 rules out
        // nothing more, where the highest start (6) would rule out the 3g at 4.
        assert_eq!(
            choose_placement(&p, 19, &[at(0, 1, 19)]).map(|p| p.start),
            Some(1)
        );
        // Room is weighted by size: a placement that takes one 4-slice placement loses more
        // than one that takes three 1-slice ones.
        let q = vec![
            profile(1, 1, 1, &[0, 1, 2], 3),
            profile(2, 4, 2, &[0], 1),
            profile(3, 1, 1, &[2], 1),
            profile(4, 1, 1, &[2], 1),
        ];
        assert_eq!(choose_placement(&q, 1, &[]).map(|p| p.start), Some(2));
        // An unknown profile has no placement.
        assert_eq!(choose_placement(&q, 9, &[]), None);
    }

    #[test]
    fn mig_profile_names_drop_the_mig_prefix() {
        let mut p = hopper();
        p[0].name = "MIG 1g.18gb".into();
        assert_eq!(profile_name(&p[0]), "1g.18gb");
        p[0].name = "1g.18gb+me".into();
        assert_eq!(profile_name(&p[0]), "1g.18gb+me");
        assert_eq!(find_profile(&p, " 1G.18GB+ME ").map(|p| p.id), Some(19));
        assert_eq!(find_profile(&p, "mig 1g.18gb+me").map(|p| p.id), Some(19));
        assert_eq!(find_profile(&p, "9").map(|p| p.id), Some(9));
        assert!(find_profile(&p, "20").is_none());
    }

    #[test]
    fn mig_instances_and_modes_are_described() {
        assert_eq!(
            describe_instance(&at(4, 4, 9), "3g.71gb"),
            "GPU instance 5 (3g.71gb at placement 4)"
        );
        assert_eq!(on_off(true), "on");
        assert_eq!(on_off(false), "off");
        let e = control_error(ControlError::InUse {
            op: "destroy".into(),
            gpu: "g".into(),
            detail: "busy".into(),
        });
        assert!(matches!(e, EngineError::Busy(ref m) if m == "destroy on g: in use (busy)"));
    }

    #[test]
    fn mig_room_counts_free_instances_and_room_for_more() {
        let view = |i: GpuInstance, device: &str| GpuInstanceView {
            instance: i,
            profile: String::new(),
            device: device.into(),
        };
        let ty = |id: u32, profile: Option<u32>| crate::gpu_control::VgpuTypeFacts {
            id,
            gpu_instance_profile: profile,
            ..Default::default()
        };
        let mut state = NvidiaState {
            mig: Some(MigMode {
                current: true,
                pending: true,
            }),
            profiles: hopper(),
            gpu_instances: vec![
                view(at(0, 1, 19), ""),
                view(at(1, 1, 19), "some-vgpu"),
                view(at(2, 1, 19), ""),
                view(at(4, 4, 9), ""),
            ],
            vgpu_types: vec![ty(10, Some(19)), ty(11, Some(9)), ty(12, None)],
            ..NvidiaState::default()
        };
        // Two free 1g instances; one more 1g fits at slice 3.
        assert_eq!(mig_room_in(&state, 10, false), Some(2));
        assert_eq!(mig_room_in(&state, 10, true), Some(3));
        // One free 3g instance; no room for another.
        assert_eq!(mig_room_in(&state, 11, false), Some(1));
        assert_eq!(mig_room_in(&state, 11, true), Some(1));
        // A type without a profile, an unknown type.
        assert_eq!(mig_room_in(&state, 12, true), None);
        assert_eq!(mig_room_in(&state, 99, true), None);
        // MIG off (or pending only): no room.
        state.mig = Some(MigMode {
            current: false,
            pending: true,
        });
        assert_eq!(mig_room_in(&state, 10, true), Some(0));
        state.mig = None;
        assert_eq!(mig_room_in(&state, 10, true), Some(0));
    }

    fn instance_view(
        id: u32,
        start: u32,
        size: u32,
        profile_id: u32,
        device: &str,
    ) -> GpuInstanceView {
        GpuInstanceView {
            instance: GpuInstance {
                id,
                profile_id,
                placement: Placement { start, size },
                compute_instances: 0,
            },
            profile: String::new(),
            device: device.into(),
        }
    }

    fn record(start: u32, size: u32, profile_id: u32) -> RecordedInstance {
        RecordedInstance {
            profile_id,
            start,
            size,
            compute_instance: true,
            id: 0,
            for_device: "gone-device".into(),
        }
    }

    #[test]
    fn a_re_shape_destroys_only_the_instance_still_with_its_id_at_its_placement() {
        let two = Placement { start: 2, size: 2 };
        // Instance 3 went; the driver gave ID 3 to a new instance at slice 4, and a new
        // instance 5 sits at the old placement: neither is the one planned for.
        let now = [
            instance_view(3, 4, 2, 14, ""),
            instance_view(5, 2, 2, 14, ""),
        ];
        assert_eq!(instance_still_at(&now, 3, two), None);
        assert_eq!(
            instance_still_at(&now, 5, two).map(|v| v.instance.id),
            Some(5)
        );
        let moved = Placement { start: 4, size: 2 };
        assert_eq!(
            instance_still_at(&now, 3, moved).map(|v| v.instance.placement),
            Some(moved)
        );
        assert_eq!(instance_still_at(&[], 3, two), None);
    }

    #[test]
    fn a_removed_devices_instance_is_destroyed_only_when_free() {
        let rec = record(2, 2, 14);
        // Found by start and profile (IDs change at boot), not by ID.
        let free = [
            instance_view(1, 0, 2, 14, "x"),
            instance_view(9, 2, 2, 14, ""),
        ];
        assert_eq!(leftover_instance(&free, &rec), Leftover::Free(9));
        let moved_in = [instance_view(9, 2, 2, 14, "other-vgpu")];
        assert_eq!(
            leftover_instance(&moved_in, &rec),
            Leftover::UsedBy(9, "other-vgpu")
        );
        // Another profile at the same start is not it; neither is another start.
        let others = [
            instance_view(9, 2, 2, 15, ""),
            instance_view(4, 4, 2, 14, ""),
        ];
        assert_eq!(leftover_instance(&others, &rec), Leftover::Gone);
        assert_eq!(leftover_instance(&[], &rec), Leftover::Gone);
    }

    #[test]
    fn an_instance_is_recorded_only_with_its_start_size_and_profile() {
        let i = at(2, 2, 14);
        let recorded = [record(0, 1, 19), record(2, 2, 14)];
        assert!(is_recorded(&recorded, &i));
        assert!(!is_recorded(&recorded[..1], &i));
        assert!(!is_recorded(&[], &i));
        for other in [record(3, 2, 14), record(2, 1, 14), record(2, 2, 15)] {
            assert!(!is_recorded(std::slice::from_ref(&other), &i), "{other:?}");
        }
    }
}
