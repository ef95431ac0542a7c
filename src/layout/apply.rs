//! Applying a layout: the host as the plan sees it ([`host_view`]), then each planned step
//! through the engine's own operations (the same locks, checks, journal and events as the
//! D-Bus methods), each with its outcome. A step that does not succeed skips the later
//! structural steps of its GPU (VFs, MIG, GPU instances) and those that depend on them;
//! other GPUs go on. An apply holds the layout lock of each GPU its layout touches from the
//! plan to its last step, so two applies never plan from the same state of a GPU; applies on
//! other GPUs do not wait.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::engine::{CreateRequest, Engine, EngineError};
use crate::gpu_control::SchedulerSetting;

use super::file::{Layout, LayoutError};
use super::plan::{self, Action, DeviceView, GpuView, HostView, InstanceView, Step};

/// What came of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Dry run: it would be taken.
    Planned,
    /// Taken.
    Done,
    /// The host failed it.
    Failed,
    /// Something is in the way (named in the detail: a device, an instance in use, no room
    /// left); nothing was changed.
    Refused,
    /// An earlier step of the GPU did not succeed.
    Skipped,
}

impl Status {
    /// The name in answers.
    pub fn name(self) -> &'static str {
        match self {
            Status::Planned => "planned",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Refused => "refused",
            Status::Skipped => "skipped",
        }
    }
}

/// A step and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `planned`, `done`, `failed`, `refused`, `skipped`.
    pub status: Status,
    /// The GPU (or the selector that matched nothing).
    pub gpu: String,
    /// The action's name (`create-device`), or `match`.
    pub action: String,
    /// What it acts on or sets.
    pub subject: String,
    /// What came of it (a new device's UUID, an instance's ID), or why not.
    pub detail: String,
}

/// A device as a layout sees it.
pub(super) fn device_view(d: &crate::engine::DeviceInfo) -> DeviceView {
    DeviceView {
        uuid: d.uuid.clone(),
        type_id: d.type_id.clone(),
        type_name: d.type_name.clone(),
        owner: d.owner.clone(),
        active: d.active,
        created: d.created,
    }
}

/// The host as the plan sees it: every physical GPU with its VFs, MIG state, instances,
/// modes, scheduler and devices.
pub fn host_view(engine: &Engine) -> HostView {
    // Each device under its physical GPU, looked up once.
    let mut devices: std::collections::HashMap<String, Vec<DeviceView>> = Default::default();
    for d in engine.list_devices() {
        devices
            .entry(engine.gpu_of_parent(&d.parent))
            .or_default()
            .push(device_view(&d));
    }
    let gpus = engine
        .list_gpus()
        .into_iter()
        .filter(|g| g.is_physical())
        .map(|g| {
            let nvidia = g.nvidia.clone().unwrap_or_default();
            let recorded = crate::persist::sriov::read(engine.host(), &g.address)
                .ok()
                .and_then(|s| s.scheduler)
                .map(|r| crate::engine::scheduler::setting_of(&r));
            let reported = nvidia.scheduler.map(|s| SchedulerSetting {
                policy: s.policy,
                arr: s.arr,
                timeslice_ms: s.timeslice_ms,
                avg_factor: s.avg_factor,
                frequency_hz: s.frequency_hz,
            });
            GpuView {
                address: g.address.clone(),
                model: g.model.clone(),
                vfs: g.sriov.as_ref().map(|s| (s.num_vfs, s.total_vfs)),
                mig: nvidia.mig.map(|m| (m.current, m.pending)),
                profiles: nvidia
                    .profiles
                    .iter()
                    .map(|p| (p.id, crate::engine::mig::profile_name(p), p.slices))
                    .collect(),
                instances: nvidia
                    .gpu_instances
                    .iter()
                    .map(|v| InstanceView {
                        id: v.instance.id,
                        profile_id: v.instance.profile_id,
                        profile: v.profile.clone(),
                        device: v.device.clone(),
                    })
                    .collect(),
                heterogeneous: engine.is_heterogeneous(&g.address),
                scheduler: recorded.or(reported),
                devices: devices.remove(&g.address).unwrap_or_default(),
            }
        })
        .collect();
    HostView { gpus }
}

/// The GPUs (by host root and address) whose layout lock an apply holds, and the signal
/// that one was let go.
static HELD: Mutex<BTreeSet<(PathBuf, String)>> = Mutex::new(BTreeSet::new());
static RELEASED: Condvar = Condvar::new();

fn held() -> MutexGuard<'static, BTreeSet<(PathBuf, String)>> {
    // Every update is one insert or remove: a poisoned lock still holds consistent data.
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The layout locks of some GPUs, taken all at once (so two applies never wait for each
/// other in a cycle) and let go on drop.
pub(super) struct LayoutLock(Vec<(PathBuf, String)>);

impl LayoutLock {
    /// Waits until no other apply holds any of `gpus`, then holds them.
    pub(super) fn hold(root: &std::path::Path, gpus: Vec<String>) -> Self {
        let keys: Vec<(PathBuf, String)> =
            gpus.into_iter().map(|g| (root.to_path_buf(), g)).collect();
        let mut set = held();
        while keys.iter().any(|k| set.contains(k)) {
            set = RELEASED
                .wait(set)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        set.extend(keys.iter().cloned());
        LayoutLock(keys)
    }

    fn covers(&self, gpus: &[String]) -> bool {
        gpus.iter().all(|g| self.0.iter().any(|(_, a)| a == g))
    }
}

impl Drop for LayoutLock {
    fn drop(&mut self) {
        let mut set = held();
        for k in &self.0 {
            set.remove(k);
        }
        RELEASED.notify_all();
    }
}

/// The GPUs a layout applies to on the host.
fn touched(layout: &Layout, view: &HostView) -> Vec<String> {
    plan::entries_by_gpu(layout, view)
        .into_iter()
        .map(|(_, gi)| view.gpus[gi].address.clone())
        .collect()
}

/// Plans the layout on the host now and, unless `dry_run`, takes the steps in order, under
/// the layout lock of each GPU it touches. A plan longer than one answer may hold
/// ([`plan::MAX_ROWS`]) is refused before any step.
pub fn apply(engine: &Engine, layout: &Layout, dry_run: bool) -> Result<Vec<Outcome>, LayoutError> {
    let mut view = host_view(engine);
    let _lock = if dry_run {
        None
    } else {
        // Planned again once held: another apply may have changed the GPUs meanwhile.
        Some(loop {
            let lock = LayoutLock::hold(engine.host().root(), touched(layout, &view));
            view = host_view(engine);
            if lock.covers(&touched(layout, &view)) {
                break lock;
            }
        })
    };
    // Forecast entries get their count now ([`super::pools`]).
    let layout = &super::pools::sized(engine, layout, &view, crate::persist::now_unix());
    let plan = plan::plan(layout, &view);
    plan::within_answer(plan.unmatched.len() + plan.steps.len())?;
    let mut out: Vec<Outcome> = plan
        .unmatched
        .iter()
        .map(|u| Outcome {
            status: Status::Refused,
            gpu: u.selector.clone(),
            action: "match".into(),
            subject: String::new(),
            detail: u.reason.clone(),
        })
        .collect();
    // The owner each device had when planned: a pool device is removed only if it still has
    // it (one handed out meanwhile is its new owner's).
    let owners: std::collections::HashMap<&str, &str> = view
        .gpus
        .iter()
        .flat_map(|g| g.devices.iter())
        .map(|d| (d.uuid.as_str(), d.owner.as_str()))
        .collect();
    // The GPU whose structure (VFs, MIG, instances) a step failed to change.
    let mut broken: Vec<String> = Vec::new();
    for step in &plan.steps {
        let mut o = Outcome {
            status: Status::Planned,
            gpu: step.gpu.clone(),
            action: step.action.name().into(),
            subject: step.action.subject(),
            detail: String::new(),
        };
        if let Some(why) = &step.refused {
            o.status = Status::Refused;
            o.detail = why.clone();
        } else if broken.contains(&step.gpu) && !matches!(step.action, Action::RemoveDevice(_)) {
            o.status = Status::Skipped;
            o.detail = "an earlier step on this GPU did not succeed".into();
        } else if !dry_run {
            match take(engine, step, &owners) {
                Ok(detail) => {
                    o.status = Status::Done;
                    o.detail = detail;
                }
                Err(e) => {
                    o.status = match e {
                        EngineError::Busy(_)
                        | EngineError::NeedsReset(_)
                        | EngineError::NoCapacity { .. } => Status::Refused,
                        _ => Status::Failed,
                    };
                    o.detail = e.to_string();
                }
            }
        }
        if matches!(o.status, Status::Refused | Status::Failed) && step.action.is_structural() {
            broken.push(step.gpu.clone());
        }
        out.push(o);
    }
    Ok(out)
}

/// Takes one step; what came of it in words.
fn take(
    engine: &Engine,
    step: &Step,
    owners: &std::collections::HashMap<&str, &str>,
) -> Result<String, EngineError> {
    let gpu = step.gpu.as_str();
    Ok(match &step.action {
        Action::SetVfCount(n) => {
            let now = engine.set_vf_count(gpu, *n, true)?;
            format!("{now} VFs enabled")
        }
        Action::SetMigMode(on) => {
            let m = engine.set_mig_mode(gpu, *on, true)?;
            format!("MIG {}", if m.current { "on" } else { "off" })
        }
        Action::DestroyGpuInstance(id) => {
            engine.destroy_gpu_instance(gpu, *id)?;
            String::new()
        }
        Action::CreateGpuInstance(profile) => {
            let made = engine.create_gpu_instance(gpu, profile, None, true, true)?;
            format!("GPU instance {}", made.id)
        }
        Action::SetHeterogeneousMode(on) => {
            engine.set_heterogeneous(gpu, *on, true)?;
            String::new()
        }
        Action::SetScheduler(s) => engine.set_scheduler(gpu, s, true, true)?.note,
        Action::RemoveDevice(uuid) => {
            let owner = owners.get(uuid.as_str()).copied().unwrap_or_default();
            engine.remove_spare(uuid, owner)?;
            String::new()
        }
        Action::CreateDevice {
            type_query,
            owner,
            params,
        } => {
            let req = CreateRequest {
                type_query: type_query.clone(),
                parent: Some(gpu.to_string()),
                owner: owner.clone(),
                params: params.clone(),
                stocking_pool: true,
                ..CreateRequest::default()
            };
            engine.create_device(&req)?.uuid
        }
    })
}
