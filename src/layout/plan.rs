//! The plan of a layout: a pure function from a layout and what the host has now
//! ([`HostView`]) to the ordered steps that make the host look like the layout, and to what
//! differs ([`diff`]). Nothing here touches the host; `apply` executes the steps.
//!
//! Per GPU, in address order: pool devices the layout no longer wants are removed first
//! (only the pool's own: owner tag = the pool's, never a device given to a guest); then, as
//! the boot restore orders them, VFs off for a MIG mode change, the MIG mode, the VF count,
//! GPU instances (destroyed where unwanted and free, then made, largest first), the
//! heterogeneous mode, the scheduler; devices are made last. A step that something else on
//! the GPU stands in the way of is `Refused`, naming it: a layout never removes or changes a
//! device that is not the pool's, or a GPU instance a device uses.

use std::collections::BTreeMap;

use crate::gpu_control::{SchedulerPolicy, SchedulerSetting};

use super::file::{GpuEntry, Layout, LayoutError};

/// What the plan needs to know of the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostView {
    /// Every physical GPU.
    pub gpus: Vec<GpuView>,
}

/// One physical GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuView {
    /// PCI address.
    pub address: String,
    /// Model name.
    pub model: String,
    /// `(enabled, total)` for a GPU with SR-IOV.
    pub vfs: Option<(u32, u32)>,
    /// `(current, pending)` for a GPU with MIG.
    pub mig: Option<(bool, bool)>,
    /// GPU-instance profiles: (ID, name, compute slices).
    pub profiles: Vec<(u32, String, u32)>,
    /// GPU instances.
    pub instances: Vec<InstanceView>,
    /// Heterogeneous mode.
    pub heterogeneous: bool,
    /// The scheduler as recorded by vgpud, or as the driver reports it.
    pub scheduler: Option<SchedulerSetting>,
    /// Its devices (on it, its VFs, its instances).
    pub devices: Vec<DeviceView>,
}

/// A GPU instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceView {
    /// Instance ID.
    pub id: u32,
    /// Profile ID.
    pub profile_id: u32,
    /// Profile name (`3g.71gb`).
    pub profile: String,
    /// The device using it; empty when free.
    pub device: String,
}

/// A device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceView {
    /// UUID.
    pub uuid: String,
    /// Type id.
    pub type_id: String,
    /// Type name.
    pub type_name: String,
    /// Owner tag.
    pub owner: String,
    /// Exists on the host now.
    pub active: bool,
    /// When vgpud made it.
    pub created: u64,
}

/// One change to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `SetVfCount`.
    SetVfCount(u32),
    /// `SetMigMode`.
    SetMigMode(bool),
    /// `DestroyGpuInstance` of this instance ID.
    DestroyGpuInstance(u32),
    /// `CreateGpuInstance` of this profile.
    CreateGpuInstance(String),
    /// `SetHeterogeneousMode`.
    SetHeterogeneousMode(bool),
    /// `SetScheduler`.
    SetScheduler(SchedulerSetting),
    /// `RemoveDevice` of a pool device.
    RemoveDevice(String),
    /// `CreateDevice` of a type for a pool.
    CreateDevice {
        /// The layout's type.
        type_query: String,
        /// The pool's tag.
        owner: String,
        /// vGPU parameters.
        params: Option<String>,
    },
}

impl Action {
    /// The name used in answers.
    pub fn name(&self) -> &'static str {
        match self {
            Action::SetVfCount(_) => "set-vf-count",
            Action::SetMigMode(_) => "set-mig-mode",
            Action::DestroyGpuInstance(_) => "destroy-gpu-instance",
            Action::CreateGpuInstance(_) => "create-gpu-instance",
            Action::SetHeterogeneousMode(_) => "set-heterogeneous-mode",
            Action::SetScheduler(_) => "set-scheduler",
            Action::RemoveDevice(_) => "remove-device",
            Action::CreateDevice { .. } => "create-device",
        }
    }

    /// What it acts on or sets, in words.
    pub fn subject(&self) -> String {
        match self {
            Action::SetVfCount(n) => n.to_string(),
            Action::SetMigMode(b) | Action::SetHeterogeneousMode(b) => on_off(*b).into(),
            Action::DestroyGpuInstance(id) => id.to_string(),
            Action::CreateGpuInstance(p) => p.clone(),
            Action::SetScheduler(s) => scheduler_words(s),
            Action::RemoveDevice(uuid) => uuid.clone(),
            Action::CreateDevice {
                type_query, owner, ..
            } => format!("{type_query} owner={owner}"),
        }
    }

    /// Whether later steps of the GPU depend on it (the GPU's structure: VFs, MIG mode,
    /// GPU instances): when it does not succeed they are skipped.
    pub fn is_structural(&self) -> bool {
        matches!(
            self,
            Action::SetVfCount(_)
                | Action::SetMigMode(_)
                | Action::DestroyGpuInstance(_)
                | Action::CreateGpuInstance(_)
        )
    }
}

/// A planned step: an action on a GPU, or the reason it cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The GPU.
    pub gpu: String,
    /// What to do.
    pub action: Action,
    /// `Some(why)`: refused, naming what is in the way.
    pub refused: Option<String>,
}

/// Most rows one answer holds (planned steps, differences): more would not fit a D-Bus
/// message, and the bus would drop vgpud.
pub const MAX_ROWS: usize = 4096;

/// Refuses an answer of more than [`MAX_ROWS`] rows.
pub fn within_answer(rows: usize) -> Result<(), LayoutError> {
    if rows > MAX_ROWS {
        return Err(LayoutError::TooLarge {
            rows,
            max: MAX_ROWS,
        });
    }
    Ok(())
}

/// A layout entry's selector that matched no GPU, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmatched {
    /// The selector (`address 0000:41:00.0`, `model H200`).
    pub selector: String,
    /// How a difference names it: the address, or the selector of a model.
    pub name: String,
    /// Why nothing matched: for a model, the models the host has.
    pub reason: String,
    /// The host's side of the difference: `absent`, with the models for a model.
    pub actual: String,
}

/// The steps, in order, and the selectors that matched nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The steps.
    pub steps: Vec<Step>,
    /// Selectors (an address, a model) that matched no GPU.
    pub unmatched: Vec<Unmatched>,
}

/// The layout's selectors that match no GPU of the host, in the layout's order.
pub fn unmatched(layout: &Layout, host: &HostView) -> Vec<Unmatched> {
    let mut out = Vec::new();
    for e in &layout.gpus {
        if let Some(a) = &e.address {
            if !host.gpus.iter().any(|g| g.address.eq_ignore_ascii_case(a)) {
                out.push(Unmatched {
                    selector: format!("address {a}"),
                    name: a.clone(),
                    reason: "no GPU of the host matches".into(),
                    actual: "absent".into(),
                });
            }
        } else if let Some(m) = &e.model {
            if !host.gpus.iter().any(|g| model_is(m, &g.model)) {
                let models = models(host);
                out.push(Unmatched {
                    selector: format!("model {m}"),
                    name: format!("model {m}"),
                    reason: format!("no GPU of the host is of this model ({models})"),
                    actual: format!("absent ({models})"),
                });
            }
        }
    }
    out
}

/// Whether a layout's model names a GPU's (the whole name, in any case).
fn model_is(wanted: &str, model: &str) -> bool {
    wanted.to_lowercase() == model.to_lowercase()
}

/// The host's models in words: `the host's models: "H200 SXM 141GB", "L40S"`.
fn models(host: &HostView) -> String {
    let mut all: Vec<&str> = host.gpus.iter().map(|g| g.model.as_str()).collect();
    all.sort_unstable();
    all.dedup();
    if all.is_empty() {
        return "the host has no GPU".into();
    }
    let more = all.len().saturating_sub(8);
    let mut words: Vec<String> = all.iter().take(8).map(|m| format!("{m:?}")).collect();
    if more > 0 {
        words.push(format!("and {more} more"));
    }
    format!("the host's models: {}", words.join(", "))
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// A scheduler setting in words: `equal-share timeslice_ms=3`.
pub fn scheduler_words(s: &SchedulerSetting) -> String {
    let mut out = s.policy.name().to_string();
    if s.arr {
        out.push_str(" arr");
    }
    for (k, v) in [
        ("timeslice_ms", s.timeslice_ms),
        ("avg_factor", s.avg_factor),
        ("frequency_hz", s.frequency_hz),
    ] {
        if v != 0 {
            out.push_str(&format!(" {k}={v}"));
        }
    }
    out
}

/// Whether a type query names a device's type, as `CreateDevice` matches types.
pub fn type_matches(query: &str, d: &DeviceView) -> bool {
    crate::model::type_query_matches(query, &d.type_id, &d.type_name)
}

/// The entry that applies to each GPU: an address entry wins over a model entry.
pub fn entries_by_gpu<'a>(layout: &'a Layout, host: &HostView) -> Vec<(&'a GpuEntry, usize)> {
    let mut out = Vec::new();
    for (gi, g) in host.gpus.iter().enumerate() {
        let by_address = layout.gpus.iter().find(|e| {
            e.address
                .as_deref()
                .is_some_and(|a| a.eq_ignore_ascii_case(&g.address))
        });
        let by_model = || {
            layout
                .gpus
                .iter()
                .find(|e| e.model.as_deref().is_some_and(|m| model_is(m, &g.model)))
        };
        if let Some(e) = by_address.or_else(by_model) {
            out.push((e, gi));
        }
    }
    out
}

/// Plans the layout on the host.
pub fn plan(layout: &Layout, host: &HostView) -> Plan {
    let mut host = host.clone();
    host.gpus.sort_by(|a, b| a.address.cmp(&b.address));
    let mut plan = Plan {
        steps: Vec::new(),
        unmatched: unmatched(layout, &host),
    };
    for (entry, gi) in entries_by_gpu(layout, &host) {
        plan.steps.extend(plan_gpu(entry, &host.gpus[gi]));
    }
    plan
}

/// The pool devices of one GPU by the entry that wants them, and those of the layout's
/// pools that no entry wants (by pool tag, same GPU).
fn pool_members<'a>(
    entry: &GpuEntry,
    gpu: &'a GpuView,
) -> (Vec<Vec<&'a DeviceView>>, Vec<&'a DeviceView>) {
    let mut wanted: Vec<Vec<&DeviceView>> = vec![Vec::new(); entry.devices.len()];
    let mut unwanted = Vec::new();
    let pools: Vec<&str> = entry.devices.iter().map(|d| d.owner.as_str()).collect();
    for d in &gpu.devices {
        if !pools.contains(&d.owner.as_str()) {
            continue;
        }
        match entry
            .devices
            .iter()
            .position(|e| e.owner == d.owner && type_matches(&e.type_query, d))
        {
            Some(i) => wanted[i].push(d),
            None => unwanted.push(d),
        }
    }
    (wanted, unwanted)
}

fn list_devices(devices: &[&DeviceView]) -> String {
    let mut names: Vec<String> = devices
        .iter()
        .map(|d| {
            if d.owner.is_empty() {
                d.uuid.clone()
            } else {
                format!("{} (owner {})", d.uuid, d.owner)
            }
        })
        .collect();
    if names.len() > 8 {
        let more = names.len() - 8;
        names.truncate(8);
        names.push(format!("and {more} more"));
    }
    names.join(", ")
}

fn plan_gpu(entry: &GpuEntry, gpu: &GpuView) -> Vec<Step> {
    let mut steps = Vec::new();
    let step = |action: Action, refused: Option<String>| Step {
        gpu: gpu.address.clone(),
        action,
        refused,
    };

    // Pool devices beyond what the layout wants: inactive ones first, then the newest.
    let (members, unwanted) = pool_members(entry, gpu);
    let mut removed: Vec<&str> = Vec::new();
    for (i, have) in members.iter().enumerate() {
        let want = entry.devices[i].count as usize;
        if have.len() > want {
            let mut extra = have.clone();
            extra.sort_by_key(|d| (d.active, std::cmp::Reverse(d.created), d.uuid.clone()));
            for d in extra.into_iter().take(have.len() - want) {
                removed.push(&d.uuid);
                steps.push(step(Action::RemoveDevice(d.uuid.clone()), None));
            }
        }
    }
    for d in unwanted {
        removed.push(&d.uuid);
        steps.push(step(Action::RemoveDevice(d.uuid.clone()), None));
    }
    let remaining: Vec<&DeviceView> = gpu
        .devices
        .iter()
        .filter(|d| !removed.contains(&d.uuid.as_str()))
        .collect();
    let active: Vec<&DeviceView> = remaining.iter().copied().filter(|d| d.active).collect();
    let in_the_way = |what: &str, devices: &[&DeviceView]| -> Option<String> {
        (!devices.is_empty()).then(|| format!("{what}: {} on the GPU", list_devices(devices)))
    };

    // MIG mode, with VFs off while it changes.
    let mut vfs_now = gpu.vfs.map(|(n, _)| n);
    let mut instances: Vec<&InstanceView> = gpu.instances.iter().collect();
    let mut mig_on = gpu.mig.map(|(cur, _)| cur).unwrap_or(false);
    if let Some(want) = entry.mig {
        match gpu.mig {
            None if want => steps.push(step(
                Action::SetMigMode(true),
                Some("the GPU has no MIG".into()),
            )),
            None => {}
            Some((cur, pending)) if cur != want || pending != want => {
                let blockers = in_the_way("a MIG mode change needs no device", &remaining);
                let used: Vec<String> = instances
                    .iter()
                    .filter(|i| !i.device.is_empty())
                    .map(|i| format!("GPU instance {} ({}) used by {}", i.id, i.profile, i.device))
                    .collect();
                let refused = blockers.or_else(|| {
                    (!used.is_empty()).then(|| {
                        format!(
                            "a MIG mode change needs no GPU instance in use: {}",
                            used.join(", ")
                        )
                    })
                });
                if refused.is_none() {
                    if vfs_now.unwrap_or(0) > 0 {
                        steps.push(step(Action::SetVfCount(0), None));
                        vfs_now = Some(0);
                    }
                    for i in instances.drain(..) {
                        steps.push(step(Action::DestroyGpuInstance(i.id), None));
                    }
                    mig_on = want;
                }
                steps.push(step(Action::SetMigMode(want), refused));
            }
            Some(_) => {}
        }
    }

    // The VF count (a non-zero count changes only through 0).
    if let (Some(want), Some((_, total))) = (entry.vfs, gpu.vfs) {
        let now = vfs_now.unwrap_or(0);
        if want > total {
            steps.push(step(
                Action::SetVfCount(want),
                Some(format!("the GPU has {total} VFs at most")),
            ));
        } else if want != now {
            let refused = in_the_way("VFs change only without devices", &remaining);
            if refused.is_none() && now != 0 && want != 0 {
                steps.push(step(Action::SetVfCount(0), None));
            }
            steps.push(step(Action::SetVfCount(want), refused));
        }
    } else if let (Some(want), None) = (entry.vfs, gpu.vfs) {
        if want != 0 {
            steps.push(step(
                Action::SetVfCount(want),
                Some("the GPU has no SR-IOV".into()),
            ));
        }
    }

    // GPU instances: unwanted free ones destroyed, missing ones made (largest first).
    if let Some(wanted) = &entry.gpu_instances {
        if !mig_on && !wanted.is_empty() {
            steps.push(step(
                Action::CreateGpuInstance(wanted.join(",")),
                Some("MIG is off on the GPU".into()),
            ));
        } else {
            let profile_of = |q: &str| -> Option<&(u32, String, u32)> {
                gpu.profiles.iter().find(|(id, name, _)| {
                    name.eq_ignore_ascii_case(q) || q.parse::<u32>().ok() == Some(*id)
                })
            };
            let mut missing: Vec<(u32, String)> = Vec::new();
            let mut keep = vec![false; instances.len()];
            for q in wanted {
                let Some((pid, name, slices)) = profile_of(q) else {
                    steps.push(step(
                        Action::CreateGpuInstance(q.clone()),
                        Some(format!("the GPU has no GPU-instance profile {q}")),
                    ));
                    continue;
                };
                // Prefer an instance in use, so a free one is what gets destroyed.
                let found = (0..instances.len())
                    .filter(|&i| !keep[i] && instances[i].profile_id == *pid)
                    .max_by_key(|&i| !instances[i].device.is_empty());
                match found {
                    Some(i) => keep[i] = true,
                    None => missing.push((*slices, name.clone())),
                }
            }
            for (i, inst) in instances.iter().enumerate() {
                if keep[i] {
                    continue;
                }
                let refused = (!inst.device.is_empty()).then(|| {
                    format!(
                        "GPU instance {} ({}) is used by device {}",
                        inst.id, inst.profile, inst.device
                    )
                });
                steps.push(step(Action::DestroyGpuInstance(inst.id), refused));
            }
            missing.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            for (_, name) in missing {
                steps.push(step(Action::CreateGpuInstance(name), None));
            }
        }
    }

    if let Some(want) = entry.heterogeneous {
        if want != gpu.heterogeneous {
            let refused = in_the_way("the mode changes only while no vGPU runs", &active);
            steps.push(step(Action::SetHeterogeneousMode(want), refused));
        }
    }

    if let Some(setting) = entry.scheduler.as_ref().and_then(|s| s.setting()) {
        if !scheduler_is(gpu.scheduler.as_ref(), &setting) {
            let refused = in_the_way("the scheduler changes only while no vGPU runs", &active);
            steps.push(step(Action::SetScheduler(setting), refused));
        }
    }

    for (i, d) in entry.devices.iter().enumerate() {
        let have = members[i].len().min(d.count as usize);
        for _ in have..d.count as usize {
            steps.push(step(
                Action::CreateDevice {
                    type_query: d.type_query.clone(),
                    owner: d.owner.clone(),
                    params: d.params.clone(),
                },
                None,
            ));
        }
    }
    steps
}

/// Whether the scheduler is as wanted: the policy and ARR, and each number the layout gives
/// (0 is the driver's default, which any reported value satisfies).
fn scheduler_is(now: Option<&SchedulerSetting>, want: &SchedulerSetting) -> bool {
    let default = SchedulerSetting::default();
    let now = now.unwrap_or(&default);
    let num = |w: u32, n: u32| w == 0 || w == n;
    now.policy == want.policy
        && now.arr == want.arr
        && num(want.timeslice_ms, now.timeslice_ms)
        && num(want.avg_factor, now.avg_factor)
        && num(want.frequency_hz, now.frequency_hz)
}

/// One difference between a layout and the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The GPU (or the selector that matched nothing).
    pub gpu: String,
    /// What.
    pub item: String,
    /// The layout's.
    pub wanted: String,
    /// The host's.
    pub actual: String,
}

/// What differs between the layout and the host, item by item; empty when the host is as
/// the layout says.
pub fn diff(layout: &Layout, host: &HostView) -> Vec<Difference> {
    let mut host = host.clone();
    host.gpus.sort_by(|a, b| a.address.cmp(&b.address));
    let mut out: Vec<Difference> = unmatched(layout, &host)
        .into_iter()
        .map(|u| Difference {
            gpu: u.name,
            actual: u.actual,
            item: "gpu".into(),
            wanted: "present".into(),
        })
        .collect();
    for (e, gi) in entries_by_gpu(layout, &host) {
        let g = &host.gpus[gi];
        let mut add = |item: &str, wanted: String, actual: String| {
            if wanted != actual {
                out.push(Difference {
                    gpu: g.address.clone(),
                    item: item.into(),
                    wanted,
                    actual,
                });
            }
        };
        if let Some(want) = e.mig {
            let actual = match g.mig {
                None => "unsupported".to_string(),
                Some((c, p)) if c == p => on_off(c).to_string(),
                Some((c, p)) => format!("{} (pending {})", on_off(c), on_off(p)),
            };
            add("mig", on_off(want).into(), actual);
        }
        if let Some(want) = e.vfs {
            add(
                "vfs",
                want.to_string(),
                g.vfs
                    .map(|(n, _)| n.to_string())
                    .unwrap_or_else(|| "no SR-IOV".into()),
            );
        }
        if let Some(want) = &e.gpu_instances {
            let canon = |q: &String| {
                g.profiles
                    .iter()
                    .find(|(id, name, _)| {
                        name.eq_ignore_ascii_case(q) || q.parse::<u32>().ok() == Some(*id)
                    })
                    .map(|(_, n, _)| n.clone())
                    .unwrap_or_else(|| q.clone())
            };
            let mut w: Vec<String> = want.iter().map(canon).collect();
            let mut a: Vec<String> = g.instances.iter().map(|i| i.profile.clone()).collect();
            w.sort();
            a.sort();
            add("gpu-instances", w.join(","), a.join(","));
        }
        if let Some(want) = e.heterogeneous {
            add(
                "heterogeneous",
                on_off(want).into(),
                on_off(g.heterogeneous).into(),
            );
        }
        if let Some(want) = e.scheduler.as_ref().and_then(|s| s.setting()) {
            if !scheduler_is(g.scheduler.as_ref(), &want) {
                add(
                    "scheduler",
                    scheduler_words(&want),
                    g.scheduler
                        .as_ref()
                        .map(scheduler_words)
                        .unwrap_or_else(|| SchedulerPolicy::default().name().into()),
                );
            }
        }
        let (members, unwanted) = pool_members(e, g);
        for (i, d) in e.devices.iter().enumerate() {
            add(
                &format!("devices {} owner {}", d.type_query, d.owner),
                d.count.to_string(),
                members[i].len().to_string(),
            );
        }
        let mut others: BTreeMap<(String, String), usize> = BTreeMap::new();
        for d in unwanted {
            *others
                .entry((d.type_name.clone(), d.owner.clone()))
                .or_default() += 1;
        }
        for ((ty, owner), n) in others {
            add(
                &format!("devices {ty} owner {owner}"),
                "0".into(),
                n.to_string(),
            );
        }
    }
    out
}
