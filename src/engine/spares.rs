//! Spares handed out: a create that names a pool gets a device the pool keeps ready (owner
//! tag = the pool's) at once, by an ownership change under the device's claim; two requests
//! never get the same spare. Each hand-out wakes the refill ([`crate::layout::pools`]).
//!
//! And room made: a create with no room left may ask the [`Reshaper`] (the pools' side,
//! which knows which devices are spares) to free a GPU that holds only spares of other
//! types, then tries once more.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::lifecycle::VGPU_PARAMS;
use super::request::CreateRequest;
use super::{lock, DeviceInfo, Engine, EngineError, EngineResult};
use crate::discovery;
use crate::model::MdevType;
use crate::persist::{self, mdevctl, state};

/// How a released device is made clean for its next tenant before a pool keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reset {
    /// An NVIDIA vGPU (an mdev, or time-sliced on an SR-IOV VF): its vGPU parameters cleared
    /// through this `nvidia/vgpu_params` (a single space: NVIDIA's way; they apply at the
    /// next VM start, so the next tenant never runs with the last one's).
    ClearParams(std::path::PathBuf),
    /// An Intel GVT-g vGPU: nothing for vgpud to write. kvmgt answers the `VFIO_DEVICE_RESET`
    /// that QEMU issues when the next VM starts with a device-model-level reset of the whole
    /// vGPU (`intel_gvt_reset_vgpu`: its GTT back to the scratch page, fences cleared,
    /// MMIO, PVINFO, display and configuration space reset), and what the guest drew lives in
    /// the guest's own memory, not in the vGPU.
    ByTheKernelAtNextStart,
}

impl Reset {
    /// For the log.
    fn what(&self) -> &'static str {
        match self {
            Reset::ClearParams(_) => "vGPU parameters cleared",
            Reset::ByTheKernelAtNextStart => "reset by the kernel when the next VM starts",
        }
    }
}

/// Whether an mdev type is Intel GVT-g's (`i915-GVTg_V<gen>_<n>`).
fn is_gvtg(type_id: &str) -> bool {
    type_id.starts_with("i915-GVTg_")
}

/// How many refills' lead times are kept ([`HandOuts::lead`]).
const LEADS_KEPT: usize = 16;

/// Hand-outs since the refill last looked, the signal that one happened, and how long the
/// last refills took to answer them.
#[derive(Debug, Default)]
pub struct HandOuts {
    /// When the first hand-out the refill has not taken yet came.
    first: Mutex<Option<Instant>>,
    signal: Condvar,
    leads: Mutex<VecDeque<Duration>>,
}

impl HandOuts {
    /// Counts a hand-out and wakes the refill.
    pub fn note(&self) {
        lock(&self.first).get_or_insert_with(Instant::now);
        self.signal.notify_all();
    }

    /// Waits up to `timeout` for a hand-out; when the first came, if any came since the
    /// last wait.
    pub fn wait(&self, timeout: Duration) -> Option<Instant> {
        let first = lock(&self.first);
        let (mut first, _) = self
            .signal
            .wait_timeout_while(first, timeout, |f| f.is_none())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        first.take()
    }

    /// A refill that answered hand-outs ended; the first of them came at `first`. Its lead
    /// time (from that hand-out, through the wait for hand-outs to pause, to the refill's
    /// end) is kept.
    pub fn refilled(&self, first: Instant) {
        let lead = first.elapsed();
        crate::metrics::counters().refill_lead(lead.as_secs_f64());
        let mut leads = lock(&self.leads);
        if leads.len() == LEADS_KEPT {
            leads.pop_front();
        }
        leads.push_back(lead);
    }

    /// The longest lead time of the last refills (up to [`LEADS_KEPT`]): how long a pool
    /// stays short after a hand-out. `None` until a refill has answered a hand-out.
    pub fn lead(&self) -> Option<Duration> {
        lock(&self.leads).iter().max().copied()
    }
}

/// Frees room for a type no GPU has room for, by removing spares; what it holds while the
/// create tries again (a lock that keeps the refill off the freed GPU) is dropped after.
pub trait Reshaper: Send + Sync {
    /// Called after a create of `req` found no room on any of the GPUs (`gpus`: the physical
    /// GPUs that offer the type); `None` when nothing was freed.
    fn make_room(
        &self,
        engine: &Engine,
        req: &CreateRequest,
        gpus: &[String],
    ) -> Option<Box<dyn std::any::Any>>;

    /// The pool that takes `device` back when it is released (`RemoveDevice`, or
    /// `StopDevice` of a transient one) instead of its removal: a pool that wants it, and
    /// only when no running guest holds it. `None`: it is removed as always.
    fn pool_for_released(&self, _engine: &Engine, _device: &DeviceInfo) -> Option<String> {
        None
    }

    /// Another layout was made the active one: what was kept of the last is stale.
    fn layout_activated(&self) {}
}

/// The engine's reshaper, set once by the daemon.
#[derive(Default)]
pub struct ReshaperSlot(OnceLock<Arc<dyn Reshaper>>);

impl std::fmt::Debug for ReshaperSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "ReshaperSlot(set)"
        } else {
            "ReshaperSlot(none)"
        })
    }
}

impl Engine {
    /// Sets what frees room for creates that find none (once; later calls are ignored).
    pub fn set_reshaper(&self, reshaper: Arc<dyn Reshaper>) {
        let _ = self.reshaper.0.set(reshaper);
    }

    /// Asks the reshaper to free room for `req` on one of `candidates`' GPUs.
    pub(super) fn make_room(
        &self,
        req: &CreateRequest,
        candidates: &[(String, MdevType)],
    ) -> Option<Box<dyn std::any::Any>> {
        let reshaper = self.reshaper.0.get()?;
        let mut gpus: Vec<String> = candidates
            .iter()
            .map(|(parent, _)| self.gpu_of_parent(parent))
            .collect();
        gpus.dedup();
        reshaper.make_room(self, req, &gpus)
    }

    /// Tells the reshaper that another layout was made the active one.
    pub fn layout_activated(&self) {
        if let Some(r) = self.reshaper.0.get() {
            r.layout_activated();
        }
    }

    /// The pool a released device goes back to, if the reshaper names one.
    pub(super) fn pool_for_released(&self, device: &DeviceInfo) -> Option<String> {
        self.reshaper.0.get()?.pool_for_released(self, device)
    }

    /// How a released device is made clean for its next tenant, if it can be kept (see
    /// [`Reset`]); `None` for the kinds no reset is known safe for: MIG-backed vGPUs (a
    /// tenant may have made compute instances in its GPU instance from inside the guest) and
    /// whole GPUs given through (their memory is the guest's to clear).
    pub(super) fn reset_of(&self, info: &DeviceInfo) -> Option<Reset> {
        if !info.active || self.is_mig_backed(info) {
            return None;
        }
        let file = match info.kind {
            super::DeviceKind::Mdev if is_gvtg(&info.type_id) => {
                return Some(Reset::ByTheKernelAtNextStart)
            }
            super::DeviceKind::Mdev => {
                discovery::mdev_device_dir(&self.host, &info.uuid).join(VGPU_PARAMS)
            }
            super::DeviceKind::SriovVgpu => {
                discovery::sriov::pci_dir(&self.host, info.address.as_deref()?).join(VGPU_PARAMS)
            }
            super::DeviceKind::Passthrough => return None,
        };
        file.is_file().then_some(Reset::ClearParams(file))
    }

    /// Gives a released device to the pool that wants it, if one does, as a spare reset for
    /// its next tenant as [`Reset`] says for its kind (an NVIDIA vGPU's parameters cleared;
    /// nothing written for GVT-g, which the kernel resets at the next VM's start), its owner
    /// the pool's tag, persistent and autostart like the layout's own spares, its
    /// lease dropped; the definition and record in one commit, one `PropertiesChanged` in
    /// the caller's batch. The pool (and libvirt, through it) is asked under the device's
    /// claim, so no other call changes the device meanwhile. `None` when no pool takes it
    /// or it cannot be reset: the caller removes it.
    pub(super) fn return_to_pool(&self, uuid: &str) -> EngineResult<Option<DeviceInfo>> {
        let claim = self.claim(uuid, false)?;
        let Ok(info) = self.known(uuid) else {
            return Ok(None);
        };
        let Some(reset) = self.reset_of(&info) else {
            return Ok(None);
        };
        let Some(pool) = self.pool_for_released(&info).filter(|p| *p != info.owner) else {
            return Ok(None);
        };
        let pool = pool.as_str();
        if let Reset::ClearParams(params) = &reset {
            if let Err(e) = self.host.write_attr(params, " ") {
                tracing::warn!(%uuid, %pool, error = %e, "could not clear the vGPU parameters of a released device: it is removed instead");
                return Ok(None);
            }
        }
        let read_again = match (&info.kind, info.address.as_deref()) {
            (super::DeviceKind::SriovVgpu, Some(vf)) => {
                discovery::sriov::read_vf_vgpu(&self.host, vf)
                    .ok()
                    .flatten()
                    .map(|s| super::pci_devices::vf_attributes(&s))
            }
            _ => discovery::read_device(&self.host, uuid)
                .ok()
                .flatten()
                .map(|dev| dev.attributes),
        };
        let attributes = read_again.unwrap_or_else(|| info.attributes.clone());
        let released_by = info.owner.clone();
        let kept = DeviceInfo {
            owner: pool.to_string(),
            attributes,
            persistent: true,
            autostart: true,
            ..info
        };
        // An mdev is defined for mdevctl too; a vGPU on a VF has its record alone.
        let mut files = Vec::new();
        if kept.kind == super::DeviceKind::Mdev {
            files.push(mdevctl::file(
                &self.host,
                &mdevctl::Definition {
                    parent: kept.parent.clone(),
                    uuid: kept.uuid.clone(),
                    mdev_type: kept.type_id.clone(),
                    autostart: true,
                    attrs: Vec::new(),
                },
            ));
        }
        files.push(state::file(
            &self.host,
            &super::lifecycle::record_of(&kept, None),
        ));
        persist::commit(&self.host, &files, &[])
            .map_err(|e| EngineError::persist(format!("keeping {uuid} as a spare of {pool}"), e))?;
        self.forget_lease(uuid);
        claim.finish(Some(kept.clone()));
        crate::metrics::counters().pool("return");
        tracing::info!(%uuid, %pool, %released_by, reset = reset.what(), "released device reset and kept as a spare");
        Ok(Some(kept))
    }

    /// The hand-outs, for the refill thread.
    pub fn hand_outs(&self) -> &HandOuts {
        &self.hand_outs
    }

    /// Hands out a spare of `pool` of one of `candidates`' types (on the GPU `req` pins, if
    /// any): the oldest first, its owner set to `req.owner`. `None` when the pool has none.
    pub(super) fn take_spare(
        &self,
        req: &CreateRequest,
        pool: &str,
        candidates: &[(String, MdevType)],
    ) -> EngineResult<Option<DeviceInfo>> {
        // Only the pool's devices are copied out of the registry, not every device.
        let pooled: Vec<DeviceInfo> = lock(&self.registry)
            .devices
            .values()
            .filter(|d| d.owner == pool && d.active)
            .filter(|d| candidates.iter().any(|(_, t)| t.id == d.type_id))
            .cloned()
            .collect();
        let mut spares: Vec<DeviceInfo> = pooled
            .into_iter()
            .filter(|d| {
                req.parent
                    .as_deref()
                    .is_none_or(|p| self.gpu_of_parent(&d.parent) == p || d.parent == p)
            })
            .collect();
        spares.sort_by(|a, b| (a.created, &a.uuid).cmp(&(b.created, &b.uuid)));
        for spare in &spares {
            if let Some(given) = self.hand_out(spare, pool, req)? {
                return Ok(Some(given));
            }
        }
        Ok(None)
    }

    /// Gives `spare` (as a look at the devices saw it) to `req.owner`, if it is still the
    /// pool's when claimed: another request may have taken it since the look (`None`).
    pub(super) fn hand_out(
        &self,
        spare: &DeviceInfo,
        pool: &str,
        req: &CreateRequest,
    ) -> EngineResult<Option<DeviceInfo>> {
        // Another request working on it (taking it too) is passed by.
        let Ok(claim) = self.claim(&spare.uuid, false) else {
            return Ok(None);
        };
        // Looked at again under the claim: the first look came before it.
        let Ok(info) = self.known(&spare.uuid) else {
            return Ok(None);
        };
        if info.owner != pool || !info.active {
            return Ok(None);
        }
        let params = self.params_of(&info);
        let updated = DeviceInfo {
            owner: req.owner.clone(),
            ..info
        };
        self.write_record(&updated, params)?;
        claim.finish(Some(updated.clone()));
        self.hand_outs.note();
        tracing::info!(uuid = %updated.uuid, pool, owner = %updated.owner, "spare handed out");
        Ok(Some(updated))
    }
}

#[cfg(test)]
mod tests {
    use super::HandOuts;
    use std::time::Duration;

    #[test]
    fn a_refills_lead_is_timed_from_the_first_hand_out_it_answers_and_the_longest_recent_counts() {
        let h = HandOuts::default();
        assert_eq!(h.lead(), None, "nothing timed yet");
        assert!(h.wait(Duration::ZERO).is_none());
        h.note();
        std::thread::sleep(Duration::from_millis(200));
        h.note();
        let first = h.wait(Duration::ZERO).expect("handed out");
        assert!(
            first.elapsed() >= Duration::from_millis(200),
            "timed from the first hand-out"
        );
        assert!(h.wait(Duration::ZERO).is_none(), "taken by the wait");
        h.refilled(first);
        let slow = h.lead().expect("timed");
        assert!(slow >= Duration::from_millis(200), "{slow:?}");
        // Fifteen quick refills later the slow one is still the longest of the last 16;
        // one more and it has gone.
        let quick = || {
            h.note();
            let f = h.wait(Duration::ZERO).expect("handed out");
            h.refilled(f);
        };
        (0..15).for_each(|_| quick());
        assert_eq!(h.lead(), Some(slow));
        quick();
        assert!(h.lead().expect("timed") < slow, "{:?}", h.lead());
    }
}
