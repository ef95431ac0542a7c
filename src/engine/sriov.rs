//! SR-IOV virtual functions: enabling and disabling them on a physical function (through
//! `sriov_numvfs` with the kernel's rules, or NVIDIA's `sriov-manage` for NVIDIA GPUs, whose
//! driver refuses direct writes), persisting the count and restoring it first at boot; and
//! NVIDIA's heterogeneous (mixed-size) vGPU mode of such a GPU (`nvidia-smi vgpu -shm`), set
//! after the VFs and before any vGPU, restored in that order.

use super::{libc_errno, lock, DeviceKind, Engine, EngineError, EngineResult};
use crate::discovery::sriov;
use crate::persist;
use crate::plan::{self, VfMethod};

impl Engine {
    /// Sets the number of VFs of physical function `pf` and, with `persistent`, records it so
    /// that it is set again at boot (0 forgets it). Refuses to disable or change VFs that
    /// carry devices, and to enable the VFs of an NVIDIA GPU that has GPU instances (the
    /// enable destroys them). Returns the number of VFs enabled now.
    pub fn set_vf_count(&self, pf: &str, count: u32, persistent: bool) -> EngineResult<u32> {
        self.set_vf_count_with(pf, count, persistent, false)
    }

    /// [`Engine::set_vf_count`]; with `force`, the VFs of an NVIDIA GPU are enabled also when
    /// that destroys its GPU instances (none may carry a device), and their records are
    /// forgotten.
    pub fn set_vf_count_with(
        &self,
        pf: &str,
        count: u32,
        persistent: bool,
        force: bool,
    ) -> EngineResult<u32> {
        let gpu_lock = self.physical_gpu_lock(pf)?;
        let held = lock(&gpu_lock);
        let now = self.apply_vf_count_locked(pf, count, force)?;
        drop(held);
        if persistent {
            let mut settings = self.settings(pf)?;
            settings.num_vfs = count;
            persist::sriov::write(&self.host, &settings)
                .map_err(|e| EngineError::persist(format!("recording the VF count of {pf}"), e))?;
        }
        Ok(now)
    }

    /// The lock of a physical GPU named by a caller (checked as a name first).
    pub(super) fn physical_gpu_lock(
        &self,
        pf: &str,
    ) -> EngineResult<std::sync::Arc<std::sync::Mutex<()>>> {
        super::request::check_name("gpu", pf)?;
        self.gpu_lock(pf)
            .filter(|_| self.with_gpu(pf, |g| g.is_physical()).unwrap_or(false))
            .ok_or_else(|| EngineError::NotFound(format!("no GPU {pf} on this host")))
    }

    pub(super) fn settings(&self, pf: &str) -> EngineResult<persist::sriov::GpuSettings> {
        persist::sriov::read(&self.host, pf)
            .map_err(|e| EngineError::persist(format!("reading the settings of {pf}"), e))
    }

    /// Records a GPU's heterogeneous mode and tells the event stream when it changed. The
    /// mode the driver is in is also kept under `run/vgpud/modes/` (gone at a reboot, as the
    /// mode is), so a restarted vgpud knows it also when it was not set persistently.
    pub(super) fn set_mode(&self, pf: &str, enabled: bool) {
        self.forget_types_of(pf);
        let mut modes = lock(&self.modes);
        if modes.insert(pf.to_string(), enabled).unwrap_or(false) != enabled {
            self.events.send(super::Event::GpuModeChanged {
                gpu: pf.to_string(),
                heterogeneous: enabled,
            });
        }
        let file = runtime_mode_path(&self.host, pf);
        let kept = if enabled {
            std::fs::create_dir_all(self.host.run(RUNTIME_MODES))
                .and_then(|()| std::fs::write(&file, "heterogeneous\n"))
        } else {
            std::fs::remove_file(&file).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
        };
        if let Err(e) = kept {
            tracing::warn!(%pf, path = %file.display(), error = %e, "could not keep the vGPU mode for a restart");
        }
    }

    /// The GPUs whose driver is in heterogeneous mode as vgpud last set it since the boot.
    pub(super) fn runtime_modes(&self) -> Vec<String> {
        let dir = self.host.run(RUNTIME_MODES);
        self.host
            .list_dir(&dir)
            .unwrap_or_default()
            .into_iter()
            .filter(|pf| {
                matches!(
                    persist::read_state_file(&dir.join(pf), 64),
                    Ok(Some(text)) if text.trim() == "heterogeneous"
                )
            })
            .collect()
    }

    /// Whether a GPU is in NVIDIA's heterogeneous (mixed-size) vGPU mode, as vgpud set it.
    pub fn is_heterogeneous(&self, pf: &str) -> bool {
        lock(&self.modes).get(pf).copied().unwrap_or(false)
    }

    /// In heterogeneous mode, the board's framebuffer (GiB) and where each vGPU of `pf` sits
    /// ([`VfPlacement`]), the size from the vGPU's type by
    /// [`crate::catalog::nvidia_placement`]. `None` when the GPU is not in that mode, its
    /// board is unknown, or a vGPU's type or placement cannot be told.
    pub fn mixed_placements(&self, pf: &str) -> Option<(u64, Vec<VfPlacement>)> {
        if !self.is_heterogeneous(pf) {
            return None;
        }
        let model = self.with_gpu(pf, |g| g.model.clone())?;
        let board = crate::catalog::nvidia_board_framebuffer_gib(&model)?;
        let mut placed = Vec::new();
        for vf in self.vf_states(pf).ok()?.iter().filter(|v| v.current != 0) {
            let gib = crate::catalog::nvidia_type_by_id(vf.current)?.framebuffer_mib / 1024;
            let (size, _) = crate::catalog::nvidia_placement(board, gib)?;
            placed.push((vf.vf.clone(), vf.placement_id?, size));
        }
        Some((board, placed))
    }

    /// Turns NVIDIA's heterogeneous (mixed-size) vGPU mode of a GPU on or off with
    /// `nvidia-smi vgpu -i <gpu> -shm <1|0>`, and with `persistent` records it so that it is
    /// set again at boot, after the VFs and before any vGPU. The GPU must share through
    /// vGPUs on VFs (enabled) and carry none.
    pub fn set_heterogeneous(&self, pf: &str, enabled: bool, persistent: bool) -> EngineResult<()> {
        let gpu_lock = self.physical_gpu_lock(pf)?;
        let held = lock(&gpu_lock);
        if !self.offers_sriov_vgpu(pf) {
            return Err(EngineError::NotSupported(format!(
                "{pf} has no NVIDIA vGPU on SR-IOV VFs (enable its VFs with SetVfCount first): heterogeneous mode is a mode of those"
            )));
        }
        let busy: Vec<String> = self
            .devices_of(pf)
            .into_iter()
            .filter(|d| d.active)
            .map(|d| d.uuid)
            .collect();
        if !busy.is_empty() {
            return Err(EngineError::Busy(format!(
                "{pf} runs vGPUs ({}); NVIDIA's vGPU mode changes only on a GPU without any",
                busy.join(", ")
            )));
        }
        self.run_nvidia_smi(pf, enabled)?;
        drop(held);
        if persistent {
            let mut settings = self.settings(pf)?;
            settings.heterogeneous = enabled;
            persist::sriov::write(&self.host, &settings)
                .map_err(|e| EngineError::persist(format!("recording the vGPU mode of {pf}"), e))?;
        }
        Ok(())
    }

    /// Runs `nvidia-smi vgpu -i <pf> -shm <0|1>` and records the mode the GPU is in now.
    fn run_nvidia_smi(&self, pf: &str, enabled: bool) -> EngineResult<()> {
        let bus_id = format!("0000{}", pf.to_ascii_uppercase());
        let steps = [plan::Step::RunTool {
            program: self.host.root().join(&self.nvidia_smi),
            args: [
                "vgpu",
                "-i",
                &bus_id,
                "-shm",
                if enabled { "1" } else { "0" },
            ]
            .map(str::to_string)
            .to_vec(),
        }];
        if let Err((_, e)) = plan::execute(&self.host, &steps) {
            return Err(match e {
                plan::StepError::Tool { .. } => EngineError::NotSupported(format!(
                    "{pf}: the NVIDIA driver refused the heterogeneous mode change ({e})"
                )),
                plan::StepError::Host(h) => {
                    EngineError::host(format!("changing the vGPU mode of {pf}"), h)
                }
            });
        }
        self.set_mode(pf, enabled);
        tracing::info!(%pf, heterogeneous = enabled, "vGPU mode changed");
        Ok(())
    }

    /// At boot: sets the recorded heterogeneous mode again, unless the GPU already runs vGPUs
    /// (then the mode it was given before is still in force: only a reboot or a driver reload
    /// ends it, and those end the vGPUs too).
    pub(super) fn apply_heterogeneous(&self, pf: &str) -> EngineResult<()> {
        let gpu_lock = self
            .gpu_lock(pf)
            .ok_or_else(|| EngineError::NotFound(format!("no GPU {pf} on this host")))?;
        let _held = lock(&gpu_lock);
        if self.devices_of(pf).iter().any(|d| d.active) {
            self.set_mode(pf, true);
            return Ok(());
        }
        self.run_nvidia_smi(pf, true)
    }

    /// Sets the VF count (the restore at boot, which keeps the record as it is).
    pub(super) fn apply_vf_count(&self, pf: &str, count: u32) -> EngineResult<u32> {
        let gpu_lock = self
            .gpu_lock(pf)
            .ok_or_else(|| EngineError::NotFound(format!("no GPU {pf} on this host")))?;
        let _held = lock(&gpu_lock);
        self.apply_vf_count_locked(pf, count, false)
    }

    fn apply_vf_count_locked(&self, pf: &str, count: u32, force: bool) -> EngineResult<u32> {
        let state = sriov::read_sriov(&self.host, pf)
            .map_err(|e| EngineError::host(format!("reading SR-IOV state of {pf}"), e))?
            .ok_or_else(|| {
                EngineError::NotSupported(format!(
                    "{pf} has no SR-IOV capability (no sriov_totalvfs)"
                ))
            })?;
        // The count is checked first: a count the GPU cannot have is wrong whatever it runs.
        if count > state.total_vfs {
            return Err(EngineError::InvalidArgument(format!(
                "{pf} has at most {} VFs (sriov_totalvfs); {count} asked",
                state.total_vfs
            )));
        }
        let driver = self
            .host
            .link_name(&sriov::pci_dir(&self.host, pf).join("driver"))
            .map_err(|e| EngineError::host(format!("reading the driver of {pf}"), e))?
            .unwrap_or_default();
        if count != state.num_vfs {
            self.refuse_passed_through(pf, &driver)?;
            self.refuse_busy_vfs(pf, &state.vfs)?;
        }
        let method = if driver == "nvidia" {
            VfMethod::SriovManage(self.host.root().join(&self.sriov_manage))
        } else {
            VfMethod::Sysfs
        };
        let steps = plan::plan_vf_count(pf, &method, state.num_vfs, state.total_vfs, count)
            .map_err(EngineError::InvalidArgument)?;
        // NVIDIA's driver destroys a GPU's instances when its VFs are enabled
        // (`sriov-manage -e`, hardware.md §3.1).
        let wiped = if matches!(method, VfMethod::SriovManage(_)) && state.num_vfs == 0 && count > 0
        {
            self.named_instances(pf)
        } else {
            Vec::new()
        };
        if !wiped.is_empty() && !force {
            let named: Vec<String> = wiped
                .iter()
                .map(|(i, name)| super::mig::describe_instance(i, name))
                .collect();
            return Err(EngineError::Busy(format!(
                "enabling the VFs of {pf} (sriov-manage -e) destroys its GPU instances: {}; destroy them first (DestroyGpuInstance) and make them after, or pass option \"force\" to let them go",
                named.join(", ")
            )));
        }
        let executed = plan::execute(&self.host, &steps);
        // What the step did to NVML's view (instances gone) is this call's doing, not drift.
        self.refresh_nvidia(pf, false);
        self.forget_wiped(pf, &wiped);
        if let Err((_, e)) = executed {
            return Err(self.vf_count_error(pf, &driver, &state, count, e));
        }
        if let Err(e) = self.rescan_gpu_of(pf) {
            tracing::warn!(error = %e, %pf, "could not scan the GPU again after changing its VFs");
        }
        if matches!(method, VfMethod::SriovManage(_)) && !steps.is_empty() {
            // sriov-manage starts the driver afresh: the GPU is back in equal-size mode.
            self.set_mode(pf, false);
            if count > 0 && self.settings(pf)?.heterogeneous {
                self.run_nvidia_smi(pf, true)?;
            }
        }
        let now = sriov::read_sriov(&self.host, pf)
            .map_err(|e| EngineError::host(format!("reading SR-IOV state of {pf}"), e))?
            .map_or(0, |s| s.num_vfs);
        tracing::info!(%pf, from = state.num_vfs, to = now, "VF count changed");
        Ok(now)
    }

    /// After a forced VF enable: logs the GPU instances of `wiped` that are gone, as this
    /// call's doing, and forgets their records.
    fn forget_wiped(&self, pf: &str, wiped: &[(crate::gpu_control::GpuInstance, String)]) {
        if wiped.is_empty() {
            return;
        }
        let left = self.named_instances(pf);
        for (i, name) in wiped {
            let here = left.iter().any(|(l, _)| {
                l.placement.start == i.placement.start && l.profile_id == i.profile_id
            });
            if here {
                continue;
            }
            tracing::warn!(
                %pf,
                id = i.id,
                "{} of {pf} destroyed by SetVfCount with force: enabling the VFs wipes a GPU's instances",
                super::mig::describe_instance(i, name)
            );
            if let Err(e) = self.forget_instance(pf, i.placement) {
                tracing::warn!(%pf, error = %e, "could not update the recorded MIG layout");
            }
        }
    }

    /// Refuses when the GPU itself is given to a guest (on vfio-pci): its VFs would change
    /// under the guest, and the passthrough would not come back at boot.
    fn refuse_passed_through(&self, pf: &str, driver: &str) -> EngineResult<()> {
        let holder = lock(&self.registry)
            .devices
            .values()
            .find(|d| {
                d.active
                    && d.kind == crate::model::DeviceKind::Passthrough
                    && d.functions.iter().any(|f| f.address == pf)
            })
            .map(|d| d.uuid.clone());
        match holder {
            Some(uuid) => Err(EngineError::Busy(format!(
                "{pf} is passed through to a guest (device {uuid}); remove that device first"
            ))),
            None if driver == "vfio-pci" => Err(EngineError::Busy(format!(
                "{pf} is bound to vfio-pci (given to a guest by another tool); its VFs are not changed"
            ))),
            None => Ok(()),
        }
    }

    /// Refuses when a VF of `pf` carries a device vgpud knows (an SR-IOV vGPU, an mdev on the
    /// VF, a VF passed through).
    fn refuse_busy_vfs(&self, pf: &str, vfs: &[String]) -> EngineResult<()> {
        let reg = lock(&self.registry);
        let busy: Vec<String> = reg
            .devices
            .values()
            .filter(|d| d.active)
            .filter(|d| match d.kind {
                DeviceKind::SriovVgpu => d.parent == pf,
                DeviceKind::Mdev => vfs.contains(&d.parent),
                DeviceKind::Passthrough => d.address.as_ref().is_some_and(|a| vfs.contains(a)),
            })
            .map(|d| format!("{} ({})", d.uuid, d.type_name))
            .collect();
        if busy.is_empty() {
            return Ok(());
        }
        Err(EngineError::Busy(format!(
            "the VFs of {pf} carry devices: {}; remove them first",
            busy.join(", ")
        )))
    }

    fn vf_count_error(
        &self,
        pf: &str,
        driver: &str,
        state: &crate::model::Sriov,
        count: u32,
        e: plan::StepError,
    ) -> EngineError {
        match e.errno() {
            Some(libc_errno::ERANGE) => EngineError::InvalidArgument(format!(
                "{pf} has at most {} VFs, not {count} ({e})",
                state.total_vfs
            )),
            Some(libc_errno::EBUSY) => EngineError::Busy(format!(
                "{pf} has {} VFs enabled and the kernel changes a non-zero count only through 0: set 0 first ({e})",
                state.num_vfs
            )),
            Some(libc_errno::ENOENT) => EngineError::NotSupported(format!(
                "the driver of {pf} ({}) cannot change its VF count through sysfs ({e}); AMD's GIM sets it when it loads (module parameter vf_num)",
                if driver.is_empty() { "none" } else { driver }
            )),
            _ => match e {
                plan::StepError::Host(h) => EngineError::host(format!("setting {count} VFs on {pf}"), h),
                other => EngineError::host(
                    format!("setting {count} VFs on {pf}"),
                    crate::host::HostError::Parse {
                        path: sriov::pci_dir(&self.host, pf),
                        reason: other.to_string(),
                    },
                ),
            },
        }
    }

    /// What to restore per physical function: the recorded settings with the host's current
    /// VF count.
    pub(super) fn recorded_settings(&self) -> Vec<super::GpuRestore> {
        let records = match persist::sriov::read_all(&self.host) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the recorded GPU settings");
                return Vec::new();
            }
        };
        records
            .into_iter()
            .map(|r| {
                let current = sriov::read_sriov(&self.host, &r.pf)
                    .ok()
                    .flatten()
                    .map_or(0, |s| s.num_vfs);
                super::GpuRestore {
                    pf: r.pf,
                    num_vfs: r.num_vfs,
                    current_vfs: current,
                    heterogeneous: r.heterogeneous,
                    mig_mode: r.mig_mode,
                    gpu_instances: !r.gpu_instances.is_empty(),
                    scheduler: r.scheduler.is_some(),
                }
            })
            .collect()
    }
}

/// A vGPU's VF, its placement id and its placement size (GiB), in heterogeneous mode.
pub type VfPlacement = (String, u64, u64);

/// Where the heterogeneous mode of each GPU is kept while the host runs (below `run/`).
const RUNTIME_MODES: &str = "vgpud/modes";

fn runtime_mode_path(host: &crate::host::Host, pf: &str) -> std::path::PathBuf {
    host.run(RUNTIME_MODES).join(pf)
}
