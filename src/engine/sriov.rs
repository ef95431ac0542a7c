//! SR-IOV virtual functions: enabling and disabling them on a physical function (through
//! `sriov_numvfs` with the kernel's rules, or NVIDIA's `sriov-manage` for NVIDIA GPUs, whose
//! driver refuses direct writes), persisting the count and restoring it first at boot.

use super::{libc_errno, lock, DeviceKind, Engine, EngineError, EngineResult};
use crate::discovery::sriov;
use crate::persist;
use crate::plan::{self, VfMethod};

impl Engine {
    /// Sets the number of VFs of physical function `pf` and, with `persistent`, records it so
    /// that it is set again at boot (0 forgets it). Refuses to disable or change VFs that
    /// carry devices. Returns the number of VFs enabled now.
    pub fn set_vf_count(&self, pf: &str, count: u32, persistent: bool) -> EngineResult<u32> {
        super::request::check_name("gpu", pf)?;
        let gpu_lock = self
            .gpu_lock(pf)
            .filter(|_| self.with_gpu(pf, |g| g.is_physical()).unwrap_or(false))
            .ok_or_else(|| EngineError::NotFound(format!("no GPU {pf} on this host")))?;
        let held = lock(&gpu_lock);
        let now = self.apply_vf_count_locked(pf, count)?;
        drop(held);
        if persistent {
            let result = if count == 0 {
                persist::sriov::remove(&self.host, pf).map(|_| ())
            } else {
                persist::sriov::write(&self.host, pf, count)
            };
            result
                .map_err(|e| EngineError::persist(format!("recording the VF count of {pf}"), e))?;
        }
        Ok(now)
    }

    /// Sets the VF count (the restore at boot, which keeps the record as it is).
    pub(super) fn apply_vf_count(&self, pf: &str, count: u32) -> EngineResult<u32> {
        let gpu_lock = self
            .gpu_lock(pf)
            .ok_or_else(|| EngineError::NotFound(format!("no GPU {pf} on this host")))?;
        let _held = lock(&gpu_lock);
        self.apply_vf_count_locked(pf, count)
    }

    fn apply_vf_count_locked(&self, pf: &str, count: u32) -> EngineResult<u32> {
        let state = sriov::read_sriov(&self.host, pf)
            .map_err(|e| EngineError::host(format!("reading SR-IOV state of {pf}"), e))?
            .ok_or_else(|| {
                EngineError::NotSupported(format!(
                    "{pf} has no SR-IOV capability (no sriov_totalvfs)"
                ))
            })?;
        if count != state.num_vfs {
            self.refuse_busy_vfs(pf, &state.vfs)?;
        }
        let driver = self
            .host
            .link_name(&sriov::pci_dir(&self.host, pf).join("driver"))
            .map_err(|e| EngineError::host(format!("reading the driver of {pf}"), e))?
            .unwrap_or_default();
        let method = if driver == "nvidia" {
            VfMethod::SriovManage(self.host.root().join(&self.sriov_manage))
        } else {
            VfMethod::Sysfs
        };
        let steps = plan::plan_vf_count(pf, &method, state.num_vfs, state.total_vfs, count)
            .map_err(EngineError::InvalidArgument)?;
        if let Err((_, e)) = plan::execute(&self.host, &steps) {
            return Err(self.vf_count_error(pf, &driver, &state, count, e));
        }
        if let Err(e) = self.rescan_gpus() {
            tracing::warn!(error = %e, "could not rescan GPUs after changing VFs");
        }
        let now = sriov::read_sriov(&self.host, pf)
            .map_err(|e| EngineError::host(format!("reading SR-IOV state of {pf}"), e))?
            .map_or(0, |s| s.num_vfs);
        tracing::info!(%pf, from = state.num_vfs, to = now, "VF count changed");
        Ok(now)
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

    /// The recorded VF counts with the host's current count: (pf, recorded, current).
    pub(super) fn recorded_vf_counts(&self) -> Vec<(String, u32, u32)> {
        let records = match persist::sriov::read_all(&self.host) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the recorded VF counts");
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
                (r.pf, r.num_vfs, current)
            })
            .collect()
    }
}
