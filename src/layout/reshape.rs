//! Re-shaping idle capacity toward what is asked for: when a `CreateDevice` finds no room for
//! its type, a GPU that offers the type and holds nothing but spares of the active layout's
//! pools, of other types, is emptied of them, and the create is tried once more.
//!
//! This is how NVIDIA's equal-size (time-sliced) vGPU mode works: a GPU runs one vGPU size at
//! a time, and takes another size only once it holds no vGPU ([`crate::engine`]'s placement
//! rules). So a GPU full of unused 4Q spares cannot serve a 2Q login until the spares go.
//!
//! In NVIDIA's heterogeneous (mixed-size) mode room depends on placements, not on emptiness:
//! a vGPU takes an aligned run of its type's placement size, so a create can fail with
//! enough framebuffer free in pieces. There only the spares in the way of the run that
//! costs the fewest are removed ([`plan_placements`]); the GPU's other spares stay.
//!
//! On a GPU in MIG mode a MIG-backed type needs a GPU instance of its profile; instances of
//! other profiles, free or holding only spares, may cover every placement it could take.
//! There the placement that costs the fewest spares, then instances, is freed
//! ([`plan_mig`]): the spares in it removed, its instances destroyed, and the create makes
//! the instance it needs. Only instances vgpud recorded are destroyed: one made behind its
//! back is left alone even when free (vgpud cannot tell who is about to use it).
//!
//! - Only spares go: devices whose owner is the tag of one of the active layout's pools. A
//!   GPU with any other device (a desktop, a device of no pool) is never touched, in either
//!   mode, nor a mixed-size GPU whose placements cannot be read.
//! - The GPU with the fewest spares to remove is chosen (the least work thrown away), then
//!   by address.
//! - Each spare goes through [`crate::engine::Engine::remove_spare`]: one handed out since the
//!   plan is its new owner's and stays (the re-shape then stops short, and the create tries
//!   its luck).
//! - The GPU's layout lock is held from the plan until the create tried again, so the refill
//!   does not fill the GPU again in between; layouts' own creates never re-shape.
//! - The pool makes its spares again where they fit, at the next refill.
//!
//! The forecast asks too ([`PoolReshaper::toward_forecast`]): after a refill, a GPU where a
//! forecast entry's create was refused is re-shaped the same way and the entry's spares made
//! there at once, but only if the GPU was not re-shaped in the last hour ([`may_reshape`],
//! the hysteresis);
//! a refused `CreateDevice` always may, and stamps the GPU too. The times are the
//! [`PoolReshaper`]'s, kept in a state file so a restart keeps them ([`super::hysteresis`]).
//!
//! [`PoolReshaper`] also says which pool takes a released device back (`keep_released`),
//! asking libvirt that no running guest holds it. It keeps the active layout in memory
//! ([`ActiveCache`]): a release reads no file, and with no `keep_released` pool does nothing
//! more.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::engine::{CreateRequest, DeviceInfo, Engine, Reshaper};
use crate::gpu_control::Placement;
use crate::host::Host;
use crate::libvirt::{holders, LibvirtError, LibvirtOps};
use crate::model::MdevType;

use super::plan::DeviceView;

use super::apply::LayoutLock;
use super::file::{DeviceEntry, Layout};
use super::hysteresis::LastReshapes;
use super::plan::{entries_by_gpu, GpuView, HostView};
use super::pools::{Active, ActiveCache};
use super::{Outcome, Status};

/// A GPU as a re-shape sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeGpu {
    /// Its address.
    pub address: String,
    /// In NVIDIA's mixed-size mode.
    pub heterogeneous: bool,
    /// Its active devices (on it or its VFs): (UUID, type id, owner).
    pub devices: Vec<(String, String, String)>,
    /// In mixed-size mode: its vGPUs' placements and the run the type asked for needs;
    /// `None` when they cannot be told (the GPU is then never touched).
    pub mixed: Option<Mixed>,
    /// In MIG mode, for a MIG-backed type asked for: its GPU instances and where the
    /// type's profile may go ([`plan_mig`] plans, not the rules above).
    pub mig: Option<MigShape>,
}

/// A GPU instance as a MIG re-shape sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigSlot {
    /// Its instance id.
    pub id: u32,
    /// Its profile id.
    pub profile_id: u32,
    /// Its first slice and how many it spans.
    pub placement: Placement,
    /// The device in it: (UUID, owner tag; empty for one vgpud does not know); `None`: free.
    pub device: Option<(String, String)>,
    /// Whether vgpud recorded it (made it for a device, or persistently).
    pub recorded: bool,
}

/// A GPU in MIG mode as a re-shape toward a MIG-backed type sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigShape {
    /// The profile the type asked for needs.
    pub profile_id: u32,
    /// Where that profile may go.
    pub placements: Vec<Placement>,
    /// The GPU's instances.
    pub instances: Vec<MigSlot>,
}

/// A vGPU at its placement on a GPU in mixed-size mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Its UUID (a vGPU vgpud does not know: its VF's address).
    pub uuid: String,
    /// Its type id.
    pub type_id: String,
    /// Its owner tag (empty for a vGPU vgpud does not know).
    pub owner: String,
    /// Its placement id (the first GiB of its placement).
    pub start: u64,
    /// Its placement size, GiB.
    pub size: u64,
}

/// A mixed-size GPU as a re-shape sees it: what sits where, and where the type asked for
/// may go (a run of `size` GiB starting at one of `starts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mixed {
    /// Its vGPUs.
    pub placed: Vec<Placed>,
    /// The placement size of the type asked for, GiB.
    pub size: u64,
    /// The placement ids the type may take.
    pub starts: Vec<u64>,
}

/// What a re-shape does: spares (UUID, owner) removed in order; on a GPU in equal-size mode
/// all of them (the GPU emptied), in mixed-size mode only those in the way of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reshape {
    /// The GPU.
    pub gpu: String,
    /// The spares removed, (UUID, pool tag).
    pub remove: Vec<(String, String)>,
    /// In mixed-size mode: the placement id freed for the type asked for; in MIG mode the
    /// first slice of the placement freed.
    pub freed: Option<u64>,
    /// In MIG mode: the GPU instances destroyed after the spares went (id, placement), in
    /// order; each only if still there, free and vgpud's (its spare's removal may have
    /// destroyed it already).
    pub destroy: Vec<(u32, Placement)>,
    /// Whether it is a MIG re-shape.
    pub mig: bool,
}

/// Plans a re-shape toward `type_ids` (the type the create asked for, as each GPU names it)
/// among `gpus` (those that offer it): a GPU in equal-size mode that holds only spares of
/// `pools`, none of the type, at least one, is emptied; a GPU in mixed-size mode that holds
/// only spares has the spares in the way of one run removed ([`plan_placements`]); a GPU in
/// MIG mode, for a MIG-backed type, frees one placement of its profile ([`plan_mig`]). The GPU
/// with the fewest spares to remove first, then by address. `None` when no GPU can be.
pub fn plan(gpus: &[ShapeGpu], pools: &BTreeSet<String>, type_ids: &[String]) -> Option<Reshape> {
    gpus.iter()
        .filter_map(|g| plan_gpu(g, pools, type_ids))
        .min_by(|a, b| (a.remove.len(), &a.gpu).cmp(&(b.remove.len(), &b.gpu)))
}

/// The re-shape of one GPU, if it can be re-shaped (see [`plan`]).
fn plan_gpu(g: &ShapeGpu, pools: &BTreeSet<String>, type_ids: &[String]) -> Option<Reshape> {
    if let Some(m) = &g.mig {
        // Only a GPU of spares: a device of anyone else anywhere on it leaves it alone.
        if g.devices.iter().any(|(_, _, owner)| !pools.contains(owner)) {
            return None;
        }
        let (freed, remove, destroy) = plan_mig(m, pools)?;
        return Some(Reshape {
            gpu: g.address.clone(),
            remove,
            freed: Some(u64::from(freed)),
            destroy,
            mig: true,
        });
    }
    if g.heterogeneous {
        let m = g.mixed.as_ref()?;
        // A device the placements do not show (not a vGPU on a VF): the GPU is left alone.
        if g.devices.len() > m.placed.len() {
            return None;
        }
        let (freed, remove) = plan_placements(&m.placed, pools, type_ids, m.size, &m.starts)?;
        return Some(Reshape {
            gpu: g.address.clone(),
            remove,
            freed: Some(freed),
            destroy: Vec::new(),
            mig: false,
        });
    }
    let only_spares = g
        .devices
        .iter()
        .all(|(_, ty, owner)| pools.contains(owner) && !type_ids.contains(ty));
    (only_spares && !g.devices.is_empty()).then(|| Reshape {
        gpu: g.address.clone(),
        remove: g
            .devices
            .iter()
            .map(|(uuid, _, owner)| (uuid.clone(), owner.clone()))
            .collect(),
        freed: None,
        destroy: Vec::new(),
        mig: false,
    })
}

/// A MIG re-shape's plan: the first slice freed, the spares removed (UUID, pool tag) and
/// the GPU instances destroyed (id, placement), each in placement order.
pub type MigPlan = (u32, Vec<(String, String)>, Vec<(u32, Placement)>);

/// Plans room on a GPU in MIG mode for an instance of `m.profile_id`: among the profile's
/// placements, one whose overlapping instances may all go, the cheapest: the fewest spares
/// removed, then the fewest instances destroyed, then the lowest start. An instance may go
/// when vgpud recorded it and it is free or holds a spare of `pools`; one vgpud did not
/// make (made by nvidia-smi, say) is never touched, even free.
///
/// `None` when an instance holds a device of anyone else (even out of the way: only a GPU
/// of spares is re-shaped), a free instance of the profile exists or a placement is free
/// (the create failed for another reason), or no placement can be freed. A placement
/// filled by one instance of the profile is not freed: it would be swapped for its like.
pub fn plan_mig(m: &MigShape, pools: &BTreeSet<String>) -> Option<MigPlan> {
    let others = |s: &MigSlot| s.device.as_ref().is_some_and(|(_, o)| !pools.contains(o));
    if m.instances.iter().any(others) {
        return None;
    }
    if m.instances
        .iter()
        .any(|s| s.profile_id == m.profile_id && s.device.is_none())
    {
        return None;
    }
    let overlaps =
        |a: Placement, b: Placement| a.start < b.start + b.size && b.start < a.start + a.size;
    // (spares, instances, start) of the cheapest placement yet, and its instances.
    type Cost = (usize, usize, u32);
    let mut best: Option<(Cost, Vec<&MigSlot>)> = None;
    for &p in &m.placements {
        let mut in_way: Vec<&MigSlot> = m
            .instances
            .iter()
            .filter(|s| overlaps(s.placement, p))
            .collect();
        if in_way.is_empty() {
            return None;
        }
        if in_way.iter().any(|s| !s.recorded) {
            continue;
        }
        if let [s] = in_way[..] {
            if s.profile_id == m.profile_id && s.placement == p {
                continue;
            }
        }
        in_way.sort_by_key(|s| s.placement.start);
        let spares = in_way.iter().filter(|s| s.device.is_some()).count();
        let cost = (spares, in_way.len(), p.start);
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, in_way));
        }
    }
    let ((_, _, start), in_way) = best?;
    let remove = in_way.iter().filter_map(|s| s.device.clone()).collect();
    let destroy = in_way.iter().map(|s| (s.id, s.placement)).collect();
    Some((start, remove, destroy))
}

/// Plans room on a GPU in mixed-size mode whose vGPUs sit at `placed`, for a type (one of
/// `type_ids`) of placement size `size` that may start at `starts`: the run whose freeing
/// removes the fewest vGPUs (the lowest start on a tie, where the driver puts a new vGPU),
/// and the spares in its way (UUID, pool tag), by placement.
///
/// `None` when the GPU holds anything but spares of `pools` (even out of the way: only a
/// GPU of spares is re-shaped), holds nothing, already has a free run (the create failed
/// for another reason), or no run can be freed. A run filled by a spare of the type asked
/// for is not freed: it would be swapped for its like.
pub fn plan_placements(
    placed: &[Placed],
    pools: &BTreeSet<String>,
    type_ids: &[String],
    size: u64,
    starts: &[u64],
) -> Option<(u64, Vec<(String, String)>)> {
    if size == 0 || placed.is_empty() || placed.iter().any(|p| !pools.contains(&p.owner)) {
        return None;
    }
    let mut best: Option<(usize, u64, Vec<&Placed>)> = None;
    for &start in starts {
        let end = start.checked_add(size)?;
        let mut in_way: Vec<&Placed> = placed
            .iter()
            .filter(|p| p.start < end && start < p.start.saturating_add(p.size))
            .collect();
        if in_way.is_empty() {
            return None;
        }
        if let [p] = in_way[..] {
            if p.start == start && p.size == size && type_ids.contains(&p.type_id) {
                continue;
            }
        }
        in_way.sort_by_key(|p| p.start);
        if best
            .as_ref()
            .is_none_or(|(n, s, _)| (in_way.len(), start) < (*n, *s))
        {
            best = Some((in_way.len(), start, in_way));
        }
    }
    best.map(|(_, start, in_way)| {
        let remove = in_way
            .into_iter()
            .map(|p| (p.uuid.clone(), p.owner.clone()))
            .collect();
        (start, remove)
    })
}

impl Reshape {
    /// Its kind in log lines: the GPU emptied, or a placement freed at an id.
    pub fn mode(&self) -> String {
        match self.freed {
            Some(at) if self.mig => format!("MIG: placement {at} freed"),
            None => "equal-size: emptied".into(),
            Some(at) => format!("mixed-size: placement {at} freed"),
        }
    }
}

/// How long a GPU re-shaped is left as it is by re-shapes for the forecast.
pub const HYSTERESIS_S: u64 = 3600;

/// Why a GPU is re-shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A `CreateDevice` found no room for its type.
    Refused,
    /// The forecast sizes a pool that found no room.
    Forecast,
}

impl Reason {
    /// Its name in log lines.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Refused => "refused",
            Reason::Forecast => "forecast",
        }
    }
}

/// The hysteresis: whether a GPU last re-shaped at `last` (Unix seconds) may be re-shaped at
/// `now` for `reason`. A refusal always may; the forecast only once [`HYSTERESIS_S`] have
/// passed since the last re-shape of the GPU, whatever its reason (a clock that went back
/// counts as no time passed).
pub fn may_reshape(last: Option<u64>, now: u64, reason: Reason) -> bool {
    match reason {
        Reason::Refused => true,
        Reason::Forecast => last.is_none_or(|t| now.saturating_sub(t) >= HYSTERESIS_S),
    }
}

/// `gpus` as a re-shape sees them, and the ids they name `type_query` by.
fn shapes_of(engine: &Engine, gpus: &[String], type_query: &str) -> (Vec<ShapeGpu>, Vec<String>) {
    let devices = engine.list_devices();
    let listed = engine.list_gpus();
    let shapes = gpus
        .iter()
        .map(|gpu| {
            let on_gpu: Vec<&DeviceInfo> = devices
                .iter()
                .filter(|d| d.active && engine.gpu_of_parent(&d.parent) == *gpu)
                .collect();
            let wanted = listed
                .iter()
                .filter(|g| g.address == *gpu)
                .flat_map(|g| g.types.iter())
                .find(|t| t.matches(type_query));
            ShapeGpu {
                address: gpu.clone(),
                heterogeneous: engine.is_heterogeneous(gpu),
                devices: on_gpu
                    .iter()
                    .map(|d| (d.uuid.clone(), d.type_id.clone(), d.owner.clone()))
                    .collect(),
                mixed: wanted.and_then(|t| mixed_of(engine, gpu, &on_gpu, t)),
                mig: wanted.and_then(|t| mig_of(engine, gpu, &on_gpu, t)),
            }
        })
        .collect();
    let ids = listed
        .iter()
        .filter(|g| gpus.contains(&g.address))
        .flat_map(|g| g.types.iter())
        .filter(|t| t.matches(type_query))
        .map(|t| t.id.clone())
        .collect();
    (shapes, ids)
}

/// A GPU in mixed-size mode as a re-shape toward `wanted` sees it; `None` when its
/// placements or the type's cannot be told. A vGPU vgpud does not know has no owner.
fn mixed_of(
    engine: &Engine,
    gpu: &str,
    devices: &[&DeviceInfo],
    wanted: &MdevType,
) -> Option<Mixed> {
    let (board, vfs) = engine.mixed_placements(gpu)?;
    let (size, slots) = crate::catalog::nvidia_placement(board, wanted.framebuffer_bytes() >> 30)?;
    let placed = vfs
        .into_iter()
        .map(|(vf, start, size)| {
            let known = devices
                .iter()
                .find(|d| d.address.as_deref() == Some(vf.as_str()));
            Placed {
                uuid: known.map_or_else(|| vf.clone(), |d| d.uuid.clone()),
                type_id: known.map(|d| d.type_id.clone()).unwrap_or_default(),
                owner: known.map(|d| d.owner.clone()).unwrap_or_default(),
                start,
                size,
            }
        })
        .collect();
    Some(Mixed {
        placed,
        size,
        starts: (0..slots).map(|i| i * size).collect(),
    })
}

/// A GPU in MIG mode as a re-shape toward the MIG-backed type `wanted` sees it; `None` for
/// another type or with MIG off. A device vgpud does not know has no owner.
fn mig_of(
    engine: &Engine,
    gpu: &str,
    devices: &[&DeviceInfo],
    wanted: &MdevType,
) -> Option<MigShape> {
    let view = engine.mig_shape(gpu, &wanted.id)?;
    let instances = view
        .instances
        .into_iter()
        .map(|(i, uuid, recorded)| MigSlot {
            id: i.id,
            profile_id: i.profile_id,
            placement: i.placement,
            device: (!uuid.is_empty()).then(|| {
                let owner = devices
                    .iter()
                    .find(|d| d.uuid == uuid)
                    .map(|d| d.owner.clone())
                    .unwrap_or_default();
                (uuid, owner)
            }),
            recorded,
        })
        .collect();
    Some(MigShape {
        profile_id: view.profile_id,
        placements: view.placements,
        instances,
    })
}

/// Takes a re-shape's steps through the engine's own operations: its spares removed (each
/// only while still the pool's), then its GPU instances destroyed (each only while still
/// there, free and vgpud's). Stops at the first step refused. Returns (spares removed,
/// instances destroyed, whether every step was taken).
fn take_steps(engine: &Engine, reshape: &Reshape) -> (usize, usize, bool) {
    let mut removed = 0;
    for (uuid, owner) in &reshape.remove {
        match engine.remove_spare(uuid, owner) {
            Ok(_) => removed += 1,
            Err(e) => {
                tracing::info!(gpu = %reshape.gpu, %uuid, error = %e, "re-shape stopped short");
                return (removed, 0, false);
            }
        }
    }
    let mut destroyed = 0;
    for (id, placement) in &reshape.destroy {
        match engine.destroy_free_instance(&reshape.gpu, *id, *placement) {
            Ok(true) => destroyed += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::info!(gpu = %reshape.gpu, instance = id, error = %e, "re-shape stopped short");
                return (removed, destroyed, false);
            }
        }
    }
    (removed, destroyed, true)
}

/// A forecast entry whose creates were refused on a GPU: (GPU, the entry, how many).
pub type Short = (String, DeviceEntry, usize);

/// The forecast entries of `layout` whose creates an apply on `view` refused (`outcomes`),
/// by GPU, with how many were refused; in the order of the outcomes.
pub fn refused_forecast_creates(
    layout: &Layout,
    view: &HostView,
    outcomes: &[Outcome],
) -> Vec<Short> {
    let mut out: Vec<Short> = Vec::new();
    let entries = entries_by_gpu(layout, view);
    for o in outcomes
        .iter()
        .filter(|o| o.status == Status::Refused && o.action == "create-device")
    {
        let Some((entry, _)) = entries
            .iter()
            .find(|(_, gi)| view.gpus[*gi].address == o.gpu)
        else {
            continue;
        };
        let Some(d) = entry
            .devices
            .iter()
            .find(|d| d.forecast && format!("{} owner={}", d.type_query, d.owner) == o.subject)
        else {
            continue;
        };
        match out.iter_mut().find(|(g, e, _)| *g == o.gpu && e == d) {
            Some((_, _, n)) => *n += 1,
            None => out.push((o.gpu.clone(), d.clone(), 1)),
        }
    }
    out
}

/// Takes a re-shape's steps ([`take_steps`]), then makes `missing` spares of `entry` on
/// the GPU; (removed, made).
fn execute(
    engine: &Engine,
    reshape: &Reshape,
    entry: &DeviceEntry,
    missing: usize,
) -> (usize, usize) {
    let (removed, _, all) = take_steps(engine, reshape);
    if !all {
        return (removed, 0);
    }
    let mut made = 0;
    for _ in 0..missing {
        let req = CreateRequest {
            type_query: entry.type_query.clone(),
            parent: Some(reshape.gpu.clone()),
            owner: entry.owner.clone(),
            params: entry.params.clone(),
            stocking_pool: true,
            ..CreateRequest::default()
        };
        match engine.create_device(&req) {
            Ok(_) => made += 1,
            Err(e) => {
                tracing::info!(gpu = %reshape.gpu, error = %e, "a spare after a re-shape was not made");
                break;
            }
        }
    }
    (removed, made)
}

/// The pools' side of the engine: the active layout says which devices are spares, and
/// which pool takes a released device back; libvirt says whether a running guest holds it.
pub struct PoolReshaper {
    libvirt: Option<Arc<dyn LibvirtOps>>,
    active: ActiveCache,
    last: LastReshapes,
}

impl PoolReshaper {
    /// The reshaper of `host`, with the re-shape times its state directory keeps. Without
    /// `libvirt` no released device is kept: whether a running guest holds it cannot be told.
    pub fn new(host: &Host, libvirt: Option<Arc<dyn LibvirtOps>>) -> Self {
        PoolReshaper {
            libvirt,
            active: ActiveCache::default(),
            last: LastReshapes::load(host),
        }
    }

    /// Sets a new one ([`PoolReshaper::new`]) as `engine`'s; the refill takes it too.
    pub fn install(engine: &Engine, libvirt: Option<Arc<dyn LibvirtOps>>) -> Arc<Self> {
        let reshaper = Arc::new(Self::new(engine.host(), libvirt));
        engine.set_reshaper(reshaper.clone());
        reshaper
    }

    /// The active layout of `host`, as kept in memory ([`ActiveCache`]).
    pub fn active_layout(&self, host: &Host) -> Option<Arc<Active>> {
        self.active.get(host)
    }

    /// How many times a file of the active layout was read.
    pub fn active_reads(&self) -> u64 {
        self.active.reads()
    }

    /// Re-shapes ahead of the forecast, after the refill applied the active layout `name`
    /// (`outcomes`): each GPU where a forecast entry found no room, if it holds only spares of
    /// other types (the rules of [`plan`]) and was not re-shaped in the last [`HYSTERESIS_S`],
    /// is emptied of them and the entry's spares are made there at once, under the GPU's
    /// layout lock, through the engine's own operations (one batch of events, audited as
    /// `RefillPools`). Returns the GPUs re-shaped.
    pub fn toward_forecast(
        &self,
        engine: &Engine,
        name: &str,
        outcomes: &[Outcome],
    ) -> Vec<String> {
        let Some(active) = self.active_layout(engine.host()).filter(|a| a.name == name) else {
            return Vec::new();
        };
        let (layout, pools) = (&active.layout, &active.pools);
        if !super::pools::has_forecast(layout) {
            return Vec::new();
        }
        let view = super::apply::host_view(engine);
        let mut done = Vec::new();
        for (gpu, entry, missing) in refused_forecast_creates(layout, &view, outcomes) {
            let _held = LayoutLock::hold(engine.host().root(), vec![gpu.clone()]);
            let now = crate::persist::now_unix();
            if !may_reshape(self.last.of(&gpu), now, Reason::Forecast) {
                tracing::info!(%gpu, toward = %entry.type_query, pool = %entry.owner,
                    "a re-shape for the forecast waits: the GPU was re-shaped less than an hour ago");
                continue;
            }
            let (shapes, ids) = shapes_of(engine, std::slice::from_ref(&gpu), &entry.type_query);
            let Some(reshape) = plan(&shapes, pools, &ids) else {
                continue;
            };
            self.last.stamp(&gpu, now);
            let cause = crate::engine::Cause {
                method: "RefillPools".into(),
                ..crate::engine::Cause::default()
            };
            let (removed, made) = crate::engine::with_cause(cause, || {
                engine
                    .events()
                    .batch(|| execute(engine, &reshape, &entry, missing))
            });
            tracing::info!(%gpu, toward = %entry.type_query, pool = %entry.owner, removed, made,
                layout = %name, reason = Reason::Forecast.name(), mode = reshape.mode(),
                "re-shaped a GPU of spares toward a type that had no room");
            crate::metrics::counters().pool("reshape");
            done.push(gpu);
        }
        done
    }

    /// Why `device` is held by a running guest, or cannot be told not to be: its owner's
    /// domain is active, or an active domain holds it in its definition, or libvirt did
    /// not answer. `None`: no running guest holds it.
    fn held_by_running_guest(&self, device: &DeviceInfo) -> Option<String> {
        let Some(ops) = self.libvirt.as_deref() else {
            return Some("no libvirt connection to ask".into());
        };
        if !device.owner.is_empty() {
            match ops.domain_state(&device.owner) {
                Ok(s) if s.active => return Some(format!("domain {:?} runs", device.owner)),
                Ok(_) | Err(LibvirtError::NoDomain { .. }) => {}
                Err(e) => return Some(format!("libvirt did not answer: {e}")),
            }
        }
        match holders(ops, device) {
            Ok(domains) => domains
                .into_iter()
                .find(|d| ops.domain_state(d).is_ok_and(|s| s.active))
                .map(|d| format!("running domain {d:?} holds it")),
            Err(e) => Some(format!("libvirt did not answer: {e}")),
        }
    }
}

impl Reshaper for PoolReshaper {
    fn make_room(
        &self,
        engine: &Engine,
        req: &CreateRequest,
        gpus: &[String],
    ) -> Option<Box<dyn std::any::Any>> {
        let active = self.active.get(engine.host())?;
        let (pools, name) = (&active.pools, &active.name);
        let (shapes, ids) = shapes_of(engine, gpus, &req.type_query);
        let first = plan(&shapes, pools, &ids)?;
        // Planned again under the GPU's layout lock: a refill may have changed it meanwhile.
        let held = LayoutLock::hold(engine.host().root(), vec![first.gpu.clone()]);
        let (shapes, ids) = shapes_of(engine, gpus, &req.type_query);
        let reshape = plan(&shapes, pools, &ids).filter(|r| r.gpu == first.gpu)?;
        // A refusal may always re-shape; it stamps the GPU all the same.
        self.last.stamp(&reshape.gpu, crate::persist::now_unix());
        let (removed, destroyed, _) = take_steps(engine, &reshape);
        tracing::info!(
            gpu = %reshape.gpu,
            toward = %req.type_query,
            removed,
            destroyed,
            layout = %name,
            reason = Reason::Refused.name(),
            mode = reshape.mode(),
            "re-shaped a GPU of spares toward a type that had no room"
        );
        crate::metrics::counters().pool("reshape");
        Some(Box::new(held))
    }

    fn pool_for_released(&self, engine: &Engine, device: &DeviceInfo) -> Option<String> {
        let active = self.active.get(engine.host())?;
        if active.keeping.is_empty() {
            return None;
        }
        let gpu = engine.gpu_of_parent(&device.parent);
        let view = keeping_view(engine, &gpu, &active.keeping);
        let layout = super::pools::sized(engine, &active.layout, &view, crate::persist::now_unix());
        let pool = super::pools::pool_for_released(
            &layout,
            &view,
            &gpu,
            &super::apply::device_view(device),
        )?;
        if let Some(why) = self.held_by_running_guest(device) {
            tracing::info!(uuid = %device.uuid, %pool, "a released device is not kept for its pool ({why}): it is removed");
            return None;
        }
        Some(pool)
    }

    fn layout_activated(&self) {
        self.active.forget();
    }
}

/// The host as [`super::pools::pool_for_released`] and [`super::pools::sized`] need it for a
/// device released on `gpu`: every physical GPU's address and model (which entry matches
/// it), and on `gpu` only the devices of the `keeping` pools (the only ones counted), not a
/// look at the whole host.
fn keeping_view(engine: &Engine, gpu: &str, keeping: &BTreeSet<String>) -> HostView {
    let mut devices: Vec<DeviceView> = engine
        .devices_owned_on(gpu, keeping)
        .iter()
        .map(super::apply::device_view)
        .collect();
    HostView {
        gpus: engine
            .gpu_models()
            .into_iter()
            .map(|(address, model)| GpuView {
                devices: if address == gpu {
                    std::mem::take(&mut devices)
                } else {
                    Vec::new()
                },
                address,
                model,
                ..GpuView::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read calls this thread made so far (its I/O accounting).
    fn reads_of_this_thread() -> u64 {
        std::fs::read_to_string("/proc/thread-self/io")
            .expect("/proc/thread-self/io")
            .lines()
            .find_map(|l| l.strip_prefix("syscr:")?.trim().parse().ok())
            .expect("syscr")
    }

    /// The read calls `f` makes on this thread (those of the look itself taken off).
    fn reads_during(f: impl FnOnce()) -> u64 {
        let (a, b) = (reads_of_this_thread(), reads_of_this_thread());
        f();
        let c = reads_of_this_thread();
        (c - b).saturating_sub(b - a)
    }

    #[test]
    fn a_release_reads_no_file_until_the_active_layout_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("nvidia-turing", dir.path()).expect("profile");
        let engine = Engine::new(Host::simulated(dir.path())).expect("engine");
        let mut gpus: Vec<String> = engine
            .list_gpus()
            .into_iter()
            .filter(|g| g.driver == "nvidia")
            .map(|g| g.address)
            .collect();
        gpus.sort();
        let layouts = dir.path().join("etc/vgpud/layouts");
        std::fs::create_dir_all(&layouts).expect("layouts");
        let write = |keep: &str| {
            let text = format!(
                "[[gpu]]\naddress = \"{}\"\ndevices = [{{ type = \"RTX6000-2Q\", count = 2, owner = \"pool-k\", keep_released = {keep} }}]\n",
                gpus[0]
            );
            std::fs::write(layouts.join("keep.toml"), text).expect("layout");
        };
        write("true ");
        super::super::pools::apply_named(&engine, "keep", "ApplyLayout").expect("apply");
        super::super::pools::remember(engine.host(), "keep").expect("remember");
        let made = |owner: &str| {
            let req = CreateRequest {
                type_query: "RTX6000-2Q".into(),
                parent: Some(gpus[0].clone()),
                owner: owner.into(),
                ..CreateRequest::default()
            };
            engine.create_device(&req).expect("create")
        };
        let released = made("vm-a");
        // The pool one short: a release would be kept.
        let spare = engine
            .list_devices()
            .into_iter()
            .find(|d| d.owner == "pool-k")
            .expect("a spare");
        engine.remove_device(&spare.uuid).expect("remove");
        let libvirt: Arc<dyn LibvirtOps> =
            Arc::new(crate::libvirt::testing::FakeLibvirt::default());
        let r = PoolReshaper::new(engine.host(), Some(libvirt));
        let keeps = || r.pool_for_released(&engine, &released);
        // Files changed in the last second are read each time.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert_eq!(keeps().as_deref(), Some("pool-k"));
        let reads = reads_during(|| {
            for _ in 0..20 {
                assert_eq!(keeps().as_deref(), Some("pool-k"));
            }
        });
        assert_eq!(reads, 0, "{reads} reads for 20 releases");

        // The file changed in place (same size, at once): keep_released off is seen.
        write("false");
        assert_eq!(keeps(), None);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert_eq!(keeps(), None);
        let before = r.active_reads();
        let reads = reads_during(|| {
            for _ in 0..20 {
                assert_eq!(keeps(), None);
            }
        });
        assert_eq!(reads, 0, "{reads} reads for 20 releases");
        assert_eq!(r.active_reads(), before, "a release read the layout again");

        // Another layout activated, or the active one forgotten: read again.
        write("true ");
        r.layout_activated();
        assert_eq!(keeps().as_deref(), Some("pool-k"));
        assert!(r.active_reads() > before);
        std::fs::remove_file(engine.host().state("active-layout")).expect("rm");
        assert_eq!(keeps(), None);
        assert_eq!(r.active_layout(engine.host()).map(|a| a.name.clone()), None);
    }

    fn gpu(address: &str, devices: &[(&str, &str, &str)]) -> ShapeGpu {
        ShapeGpu {
            address: address.into(),
            heterogeneous: false,
            mixed: None,
            mig: None,
            devices: devices
                .iter()
                .map(|(u, t, o)| (u.to_string(), t.to_string(), o.to_string()))
                .collect(),
        }
    }

    fn pools() -> BTreeSet<String> {
        ["pool-a".to_string(), "pool-b".to_string()].into()
    }

    #[test]
    fn the_forecast_re_shapes_a_gpu_at_most_once_an_hour_a_refusal_always() {
        let t = 1_000_000;
        // Never re-shaped: either may.
        assert!(may_reshape(None, t, Reason::Forecast));
        assert!(may_reshape(None, t, Reason::Refused));
        // Re-shaped a second short of an hour ago: only a refusal may.
        let last = Some(t - HYSTERESIS_S + 1);
        assert!(!may_reshape(last, t, Reason::Forecast));
        assert!(may_reshape(last, t, Reason::Refused));
        // An hour on, the forecast may again.
        assert!(may_reshape(Some(t - HYSTERESIS_S), t, Reason::Forecast));
        // A clock that went back counts as no time passed.
        assert!(!may_reshape(Some(t + 60), t, Reason::Forecast));
        assert_eq!(
            (Reason::Refused.name(), Reason::Forecast.name()),
            ("refused", "forecast")
        );
    }

    #[test]
    fn only_refused_creates_of_forecast_entries_ask_for_a_re_shape() {
        let layout: Layout = toml::from_str(
            r#"
[[gpu]]
address = "0000:01:00.0"
devices = [
  { type = "A-4Q", count = 2, owner = "pool-4q" },
  { type = "A-2Q", owner = "pool-2q", forecast = true, min = 1, max = 4 },
]
"#,
        )
        .expect("layout");
        let view = HostView {
            gpus: ["0000:01:00.0", "0000:02:00.0"]
                .iter()
                .map(|a| crate::layout::plan::GpuView {
                    address: a.to_string(),
                    ..Default::default()
                })
                .collect(),
        };
        let o = |status: Status, gpu: &str, subject: &str| Outcome {
            status,
            gpu: gpu.into(),
            action: "create-device".into(),
            subject: subject.into(),
            detail: String::new(),
        };
        let outcomes = [
            o(Status::Refused, "0000:01:00.0", "A-2Q owner=pool-2q"),
            o(Status::Refused, "0000:01:00.0", "A-2Q owner=pool-2q"),
            // Not a forecast entry: a count entry waits for its refusals.
            o(Status::Refused, "0000:01:00.0", "A-4Q owner=pool-4q"),
            // Done, or on a GPU the layout does not name: nothing to do.
            o(Status::Done, "0000:01:00.0", "A-2Q owner=pool-2q"),
            o(Status::Refused, "0000:02:00.0", "A-2Q owner=pool-2q"),
        ];
        let short = refused_forecast_creates(&layout, &view, &outcomes);
        assert_eq!(short.len(), 1, "{short:?}");
        let (gpu, entry, n) = &short[0];
        assert_eq!(
            (gpu.as_str(), entry.owner.as_str(), *n),
            ("0000:01:00.0", "pool-2q", 2)
        );
        assert!(refused_forecast_creates(&layout, &view, &outcomes[2..]).is_empty());
    }

    #[test]
    fn the_gpu_with_the_fewest_spares_of_other_types_is_emptied() {
        let gpus = [
            gpu(
                "0000:01:00.0",
                &[("a1", "nvidia-4q", "pool-a"), ("a2", "nvidia-4q", "pool-a")],
            ),
            gpu("0000:02:00.0", &[("b1", "nvidia-8q", "pool-b")]),
            gpu(
                "0000:03:00.0",
                &[("c1", "nvidia-8q", "pool-b"), ("c2", "nvidia-8q", "pool-a")],
            ),
        ];
        let r = plan(&gpus, &pools(), &["nvidia-2q".into()]).expect("a re-shape");
        assert_eq!(r.gpu, "0000:02:00.0");
        assert_eq!(r.remove, [("b1".to_string(), "pool-b".to_string())]);
        // Ties go by address; the order of removal is the devices' order.
        let r = plan(&gpus[..1], &pools(), &["nvidia-2q".into()]).expect("a re-shape");
        assert_eq!(r.remove.len(), 2);
        assert_eq!(r.remove[0].0, "a1");
    }

    #[test]
    fn a_gpu_with_anything_but_spares_of_other_types_is_never_touched() {
        let want = ["nvidia-2q".to_string()];
        for g in [
            // A desktop among the spares.
            gpu(
                "0000:01:00.0",
                &[
                    ("a1", "nvidia-4q", "pool-a"),
                    ("d", "nvidia-4q", "alice-vm"),
                ],
            ),
            // A device of no owner (another tool's).
            gpu("0000:01:00.0", &[("x", "nvidia-4q", "")]),
            // Spares of the type asked for: the GPU is full of it, not of another size.
            gpu("0000:01:00.0", &[("s", "nvidia-2q", "pool-a")]),
            // Nothing at all: nothing to re-shape (a create that found no room there had
            // another reason).
            gpu("0000:01:00.0", &[]),
        ] {
            assert_eq!(
                plan(std::slice::from_ref(&g), &pools(), &want),
                None,
                "{g:?}"
            );
        }
        let mut mixed = gpu("0000:01:00.0", &[("a1", "nvidia-4q", "pool-a")]);
        mixed.heterogeneous = true;
        assert_eq!(plan(&[mixed], &pools(), &want), None);
        // No pools: no spares.
        let g = gpu("0000:01:00.0", &[("a1", "nvidia-4q", "pool-a")]);
        assert_eq!(plan(&[g], &BTreeSet::new(), &want), None);
    }

    /// A vGPU at placement `start` of `size` GiB.
    fn at(uuid: &str, ty: &str, owner: &str, start: u64, size: u64) -> Placed {
        Placed {
            uuid: uuid.into(),
            type_id: ty.into(),
            owner: owner.into(),
            start,
            size,
        }
    }

    /// A 48 GiB board (an L40S) in mixed-size mode: 4Q spares (6 GiB placements) at 0, 6,
    /// 12, 18, 24 and 36; 12 GiB free at 30 and 42, so no 12 GiB run (an 8Q) is free.
    fn fragmented() -> Vec<Placed> {
        [0, 6, 12, 18, 24, 36]
            .iter()
            .map(|&s| at(&format!("s{s}"), "nvidia-4q", "pool-a", s, 6))
            .collect()
    }

    const EIGHT_Q: (u64, [u64; 4]) = (12, [0, 12, 24, 36]);

    #[test]
    fn a_mixed_size_gpu_frees_the_run_with_the_fewest_spares_in_the_way_and_keeps_the_rest() {
        let want = ["nvidia-8q".to_string()];
        let placed = fragmented();
        // Runs of 12: [0,12) holds 2 spares, [12,24) 2, [24,36) 1, [36,48) 1: the lowest of
        // the cheapest, where the driver puts the new vGPU.
        let (freed, remove) =
            plan_placements(&placed, &pools(), &want, EIGHT_Q.0, &EIGHT_Q.1).expect("room");
        assert_eq!(freed, 24);
        assert_eq!(remove, [("s24".to_string(), "pool-a".to_string())]);
        // A 24 GiB type (runs [0,24) and [24,48)): the two spares of the second run, in
        // placement order, the four of the first kept.
        let mut shuffled = placed.clone();
        shuffled.reverse();
        let (freed, remove) =
            plan_placements(&shuffled, &pools(), &want, 24, &[0, 24]).expect("room");
        assert_eq!(freed, 24);
        let uuids: Vec<&str> = remove.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(uuids, ["s24", "s36"]);
        // A spare larger than the run is in the way of it too.
        let big = [
            at("big", "nvidia-24q", "pool-b", 0, 24),
            at("x", "nvidia-4q", "pool-a", 24, 6),
            at("y", "nvidia-4q", "pool-a", 30, 6),
            at("z", "nvidia-4q", "pool-a", 42, 6),
        ];
        let (freed, remove) =
            plan_placements(&big, &pools(), &want, EIGHT_Q.0, &EIGHT_Q.1).expect("room");
        assert_eq!((freed, remove.len()), (0, 1));
        assert_eq!(remove[0], ("big".to_string(), "pool-b".to_string()));
        // Spares of the type asked for in the way of a larger run go too (the GPU is
        // fragmented by them): 8Q at 0 and 24, a 4Q at 12: a 24 GiB run needs two.
        let same = [
            at("a", "nvidia-8q", "pool-a", 0, 12),
            at("b", "nvidia-4q", "pool-a", 12, 6),
            at("c", "nvidia-8q", "pool-a", 24, 12),
            at("d", "nvidia-4q", "pool-a", 36, 6),
        ];
        let (_, remove) =
            plan_placements(&same, &pools(), &["nvidia-24q".into()], 24, &[0, 24]).expect("room");
        let uuids: Vec<&str> = remove.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(uuids, ["a", "b"]);
    }

    #[test]
    fn a_mixed_size_gpu_with_anything_but_spares_or_no_run_to_free_is_never_touched() {
        let want = ["nvidia-8q".to_string()];
        let plan8 =
            |placed: &[Placed]| plan_placements(placed, &pools(), &want, 12, &[0, 12, 24, 36]);
        // A desktop in the way of the cheapest run, or out of every run's way: untouched.
        for (i, owner) in [(4, "alice-vm"), (0, "alice-vm"), (4, "")] {
            let mut placed = fragmented();
            placed[i].owner = owner.into();
            assert_eq!(plan8(&placed), None, "{:?}", placed[i]);
        }
        // A free run already: the create failed for another reason.
        let mut placed = fragmented();
        placed.retain(|p| p.start != 24);
        assert_eq!(plan8(&placed), None);
        // Nothing on the GPU, a size of nothing, no start the type may take.
        assert_eq!(plan8(&[]), None);
        assert_eq!(
            plan_placements(&fragmented(), &pools(), &want, 0, &[0]),
            None
        );
        assert_eq!(
            plan_placements(&fragmented(), &pools(), &want, 12, &[]),
            None
        );
        // Every run filled by a spare of the type asked for: it would swap one for its like.
        let full: Vec<Placed> = [0, 12, 24, 36]
            .iter()
            .map(|&s| at(&format!("e{s}"), "nvidia-8q", "pool-a", s, 12))
            .collect();
        assert_eq!(plan8(&full), None);
        // No pools: no spares.
        assert_eq!(
            plan_placements(&fragmented(), &BTreeSet::new(), &want, 12, &[0, 12, 24, 36]),
            None
        );
    }

    #[test]
    fn the_gpu_with_the_fewest_spares_to_remove_is_re_shaped_whatever_its_mode() {
        let want = ["nvidia-8q".to_string()];
        let mixed_gpu = |address: &str, placed: Vec<Placed>| ShapeGpu {
            address: address.into(),
            heterogeneous: true,
            devices: placed
                .iter()
                .map(|p| (p.uuid.clone(), p.type_id.clone(), p.owner.clone()))
                .collect(),
            mixed: Some(Mixed {
                placed,
                size: EIGHT_Q.0,
                starts: EIGHT_Q.1.to_vec(),
            }),
            mig: None,
        };
        let equal = gpu(
            "0000:01:00.0",
            &[("a1", "nvidia-4q", "pool-a"), ("a2", "nvidia-4q", "pool-a")],
        );
        let mixed = mixed_gpu("0000:02:00.0", fragmented());
        let r = plan(&[equal.clone(), mixed.clone()], &pools(), &want).expect("a re-shape");
        assert_eq!((r.gpu.as_str(), r.freed), ("0000:02:00.0", Some(24)));
        assert_eq!(r.remove.len(), 1);
        assert_eq!(r.mode(), "mixed-size: placement 24 freed");
        // One spare on the equal-size GPU: emptying it removes as few.
        let one = gpu("0000:01:00.0", &[("a1", "nvidia-4q", "pool-a")]);
        let r = plan(&[mixed.clone(), one], &pools(), &want).expect("a re-shape");
        assert_eq!((r.gpu.as_str(), r.freed), ("0000:01:00.0", None));
        assert_eq!(r.mode(), "equal-size: emptied");
        // Placements that cannot be told, or a device they do not show: untouched.
        let mut blind = mixed.clone();
        blind.mixed = None;
        assert_eq!(plan(&[blind], &pools(), &want), None);
        let mut hidden = mixed;
        hidden
            .devices
            .push(("gvt".into(), "nvidia-4q".into(), "pool-a".into()));
        assert_eq!(plan(&[hidden], &pools(), &want), None);
    }

    /// A GPU instance of `profile_id` at `start` spanning `size` slices, recorded by vgpud,
    /// holding `device` (UUID, owner) if any.
    fn slot(
        id: u32,
        profile_id: u32,
        start: u32,
        size: u32,
        device: Option<(&str, &str)>,
    ) -> MigSlot {
        MigSlot {
            id,
            profile_id,
            placement: Placement { start, size },
            device: device.map(|(u, o)| (u.to_string(), o.to_string())),
            recorded: true,
        }
    }

    /// An H200 in MIG mode with seven free 1g instances (profile 19) at slices 0..=6, asked
    /// for a 3g (profile 9: 4 slices at 0 or 4).
    fn sevens() -> MigShape {
        MigShape {
            profile_id: 9,
            placements: vec![
                Placement { start: 0, size: 4 },
                Placement { start: 4, size: 4 },
            ],
            instances: (0..7).map(|i| slot(i + 1, 19, i, 1, None)).collect(),
        }
    }

    fn ids(destroy: &[(u32, Placement)]) -> Vec<u32> {
        destroy.iter().map(|(id, _)| *id).collect()
    }

    #[test]
    fn a_mig_gpu_frees_the_placement_with_the_fewest_spares_then_instances_in_the_way() {
        // All free: [4,8) holds three instances, [0,4) four.
        let (at, remove, destroy) = plan_mig(&sevens(), &pools()).expect("room");
        assert_eq!((at, remove.len()), (4, 0));
        assert_eq!(ids(&destroy), [5, 6, 7]);
        assert_eq!(destroy[0].1, Placement { start: 4, size: 1 });
        // A spare at slice 5: the four free instances of [0,4) go rather than a spare.
        let mut m = sevens();
        m.instances[5].device = Some(("s5".into(), "pool-a".into()));
        let (at, remove, destroy) = plan_mig(&m, &pools()).expect("room");
        assert_eq!((at, remove.len()), (0, 0));
        assert_eq!(ids(&destroy), [1, 2, 3, 4]);
        // Spares at 1, 2 and 5: the run with one spare; the spare removed first, then the
        // instances destroyed in placement order (listed in any order).
        m.instances[1].device = Some(("s1".into(), "pool-a".into()));
        m.instances[2].device = Some(("s2".into(), "pool-b".into()));
        m.instances.reverse();
        let (at, remove, destroy) = plan_mig(&m, &pools()).expect("room");
        assert_eq!(at, 4);
        assert_eq!(remove, [("s5".to_string(), "pool-a".to_string())]);
        assert_eq!(ids(&destroy), [5, 6, 7]);
        // A larger instance in the way counts once: a 2g (profile 14) at 0 and 1g at 2 and
        // 3 against 1g at 4, 5, 6 and a 1g spare at 4.
        let mut m = sevens();
        m.instances.drain(0..2);
        m.instances.push(slot(20, 14, 0, 2, None));
        let (at, _, destroy) = plan_mig(&m, &pools()).expect("room");
        assert_eq!(at, 0);
        assert_eq!(ids(&destroy), [20, 3, 4]);
        let r = plan(
            &[ShapeGpu {
                address: "0000:01:00.0".into(),
                heterogeneous: false,
                devices: Vec::new(),
                mixed: None,
                mig: Some(sevens()),
            }],
            &pools(),
            &["nvidia-1416".into()],
        )
        .expect("a re-shape");
        assert_eq!(
            (r.mode(), r.destroy.len()),
            ("MIG: placement 4 freed".to_string(), 3)
        );
    }

    #[test]
    fn a_mig_gpu_with_a_device_of_anyone_else_or_instances_vgpud_did_not_make_is_left_alone() {
        // A desktop, or a vGPU vgpud does not know, in the way or not: untouched.
        for (i, owner) in [(5, "alice-vm"), (1, "alice-vm"), (5, "")] {
            let mut m = sevens();
            m.instances[i].device = Some(("d".into(), owner.into()));
            assert_eq!(plan_mig(&m, &pools()), None, "{:?}", m.instances[i]);
        }
        // A device of anyone else the instances do not show (the GPU's devices): untouched.
        let g = ShapeGpu {
            address: "0000:01:00.0".into(),
            heterogeneous: false,
            devices: vec![("d".into(), "nvidia-1414".into(), "alice-vm".into())],
            mixed: None,
            mig: Some(sevens()),
        };
        assert_eq!(plan(&[g], &pools(), &["nvidia-1416".into()]), None);
        // An instance vgpud did not make, free, keeps its placement as it is.
        let mut m = sevens();
        m.instances[6].recorded = false;
        let (at, _, destroy) = plan_mig(&m, &pools()).expect("room");
        assert_eq!((at, ids(&destroy)), (0, vec![1, 2, 3, 4]));
        m.instances[0].recorded = false;
        assert_eq!(plan_mig(&m, &pools()), None);
        // A free placement, or a free instance of the profile: the create failed otherwise.
        let mut m = sevens();
        m.instances.drain(4..);
        assert_eq!(plan_mig(&m, &pools()), None);
        let mut m = sevens();
        m.instances.drain(4..);
        m.instances.push(slot(9, 9, 4, 4, None));
        assert_eq!(plan_mig(&m, &pools()), None);
        // Every placement of a 1g filled by a spare of its own profile: no swap.
        let mut m = sevens();
        m.profile_id = 19;
        m.placements = (0..7).map(|start| Placement { start, size: 1 }).collect();
        for (i, s) in m.instances.iter_mut().enumerate() {
            s.device = Some((format!("s{i}"), "pool-a".into()));
        }
        assert_eq!(plan_mig(&m, &pools()), None);
        // No pools: the spares are anyone else's.
        let mut m = sevens();
        m.instances[5].device = Some(("s5".into(), "pool-a".into()));
        assert_eq!(plan_mig(&m, &BTreeSet::new()), None);
    }
}
