//! Elastic pools: the spares a layout keeps made, handed out at once, filled again in the
//! background, and sized from the forecast of demand.
//!
//! - **Spares.** A layout's device entry keeps `count` (or `spares`) devices of its type
//!   tagged with the pool's owner tag on each GPU it matches: made, unassigned, ready.
//! - **Hand-out.** `CreateDevice(type, {pool: TAG, owner: …})` gives the caller the oldest
//!   spare of the type at once, by changing its owner: no kernel create, no wait for the
//!   GPU's lock ([`crate::engine::Engine::create_device`]). With no spare left it makes one,
//!   as without `pool`. The demand record counts the first as served warm, the second cold.
//! - **The active layout.** The layout applied last (`ApplyLayout`, not a dry run, or the one
//!   applied at start) is the one pools are filled from. Its name is kept in
//!   `var/lib/vgpud/active-layout`, so a restart or a reboot goes on with it.
//! - **Refill.** After a hand-out, once no other has come for [`REFILL_SETTLE`], the refill
//!   thread applies the active layout again: the same plan and steps as `ApplyLayout`, so the
//!   creates take their turn like any other and never take a device in use. A layout with
//!   forecast entries is also applied every [`SIZING_INTERVAL`], so spares grow before a
//!   predicted peak and shrink after it.
//! - **Sizing.** A pool with `forecast = true` keeps, for the busier of the forecast of this
//!   hour and of the next once it is [`LOOK_AHEAD`] away, the spares that cover the logins
//!   of one refill's lead time (from a hand-out to the end of the refill that replaces it,
//!   measured: the longest of the last 16 refills) with 99.9 % confidence ([`covering`]),
//!   never more than ⌈forecast⌉; ⌈forecast⌉ until a refill has been timed. Spread over the
//!   GPUs its entries match, those with room for another device first, at least `min` and
//!   at most `max` on each ([`wanted_spares`], [`ranks`], [`sized`]). A storm's spares are
//!   thus a handful, not an hour of logins: the refill replaces each in milliseconds here.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use crate::engine::Engine;
use crate::host::Host;

use super::file::Layout;
use super::plan::{self, HostView};
use super::reshape::PoolReshaper;

/// How long hand-outs must pause before the refill starts, unless the daemon is told
/// otherwise (`--refill-settle-ms`): a storm's hand-outs come first.
pub const REFILL_SETTLE: Duration = Duration::from_secs(1);
/// How often a layout with forecast entries is applied again.
pub const SIZING_INTERVAL: Duration = Duration::from_secs(300);
/// How far ahead a forecast pool looks: the next hour's forecast counts once the hour is
/// this close. Pools are sized every [`SIZING_INTERVAL`] and a refill makes hundreds of
/// spares a second (docs/benchmarks.md), so ten minutes covers a sizing look and the refill
/// after it; looking a whole hour ahead held an hour of idle spares before every peak.
pub const LOOK_AHEAD: Duration = Duration::from_secs(600);

/// The forecast a pool is sized for at `now_s`: this hour's, and the next hour's once it is
/// less than [`LOOK_AHEAD`] away (Unix hours, as the forecast's).
pub fn looked_ahead(now_s: u64, this_hour: f64, next_hour: f64) -> (f64, f64) {
    let next_is_near = now_s % 3600 + LOOK_AHEAD.as_secs() >= 3600;
    (this_hour, if next_is_near { next_hour } else { 0.0 })
}

/// The file that names the active layout, below the state directory.
const ACTIVE: &str = "active-layout";

/// How sure a forecast pool is to have a spare for every login while the refill replaces
/// those handed out: its spares cover the logins that come, at the forecast's rate, within
/// one refill's lead time with this probability ([`covering`]). Higher than the share of
/// warm logins wanted (95 %): the hour's forecast misses a peak within the hour and errs
/// (the week's replay: 0.99 served 91 % of a day's storm logins warm, 0.999 96 %).
pub const SPARE_CONFIDENCE: f64 = 0.999;

/// The fewest spares that cover, with probability [`SPARE_CONFIDENCE`], the logins that
/// come within `lead` at `per_hour` logins an hour, as a Poisson process: the smallest `k`
/// with P(N ≤ k) ≥ [`SPARE_CONFIDENCE`] for N Poisson of mean `per_hour × lead`.
pub fn covering(per_hour: f64, lead: Duration) -> u64 {
    let mean = per_hour * lead.as_secs_f64() / 3600.0;
    if mean.is_nan() || mean <= 0.0 {
        return 0;
    }
    if mean > 100.0 {
        // Far past what a host holds; the normal approximation (3.09: the standard normal's
        // 0.999 quantile) avoids e^-mean underflowing, and max caps it anyway.
        return (mean + 3.09 * mean.sqrt()).ceil().min(1e15) as u64;
    }
    let (mut p, mut k) = ((-mean).exp(), 0u64);
    let mut cdf = p;
    while cdf < SPARE_CONFIDENCE {
        k += 1;
        p *= mean / k as f64;
        cdf += p;
    }
    k
}

/// The spares a forecast pool keeps on the `rank`-th (from 0) of the `gpus` GPUs its
/// entries match, at least `min` and at most `max`. In all, for the busier of this hour's
/// and the next hour's forecast: the logins of a refill's lead time ([`covering`]) once the
/// refill's `lead` has been measured, never more than ⌈forecast⌉; ⌈forecast⌉ before that.
/// Spread evenly: the first `total mod gpus` GPUs, in address order, keep one more.
pub fn wanted_spares(
    this_hour: f64,
    next_hour: f64,
    lead: Option<Duration>,
    gpus: usize,
    rank: usize,
    min: u32,
    max: u32,
) -> u32 {
    let per_hour = this_hour.max(next_hour).max(0.0);
    let ahead = per_hour.ceil();
    let gpus = gpus.max(1) as u64;
    // A forecast beyond what any host holds is capped by max anyway.
    let hour = if ahead >= 1e15 { 1 << 50 } else { ahead as u64 };
    let total = lead.map_or(hour, |lead| covering(per_hour, lead).min(hour));
    let per_gpu = total / gpus + u64::from((rank as u64) < total % gpus);
    u32::try_from(per_gpu)
        .unwrap_or(u32::MAX)
        .clamp(min.min(max), max)
}

/// The ranks of a pool's GPUs (given in address order, `full[i]` for the i-th) for
/// [`wanted_spares`]: those with room for another device of the pool's type first, then the
/// full ones, in address order within each. A pool's spares are kept where the refill can
/// make them: with few spares in all, the first GPUs by address fill with the guests that
/// took them (and, under the `pack` policy, with every cold create) and would keep none.
pub fn ranks(full: &[bool]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..full.len()).collect();
    order.sort_by_key(|&i| full[i]);
    let mut rank = vec![0; full.len()];
    for (r, i) in order.into_iter().enumerate() {
        rank[i] = r;
    }
    rank
}

/// The layout with each forecast entry's count sized from the forecast at `now_s`; a type
/// the forecast cannot name keeps `min`. A pool (a type and an owner) may have entries on
/// several GPUs, one per address or one per model: its forecast is spread over all the GPUs
/// they match ([`wanted_spares`]), those with room first ([`ranks`]), and an entry that
/// matches several GPUs keeps the most any of them is given.
pub fn sized(engine: &Engine, layout: &Layout, view: &HostView, now_s: u64) -> Layout {
    let mut out = layout.clone();
    if !has_forecast(layout) {
        return out;
    }
    let matched = plan::entries_by_gpu(layout, view);
    let lead = engine.hand_outs().lead();
    let mut forecasts = std::collections::HashMap::new();
    // Each pool's GPUs (their index in the view) with their ranks.
    let mut pools: std::collections::HashMap<(String, String), Vec<(usize, usize)>> =
        std::collections::HashMap::new();
    for (gi, entry) in out.gpus.iter_mut().enumerate() {
        // The GPUs this entry matches.
        let own: Vec<usize> = matched
            .iter()
            .filter(|(e, _)| std::ptr::eq(*e, &layout.gpus[gi]))
            .map(|(_, g)| *g)
            .collect();
        for d in entry.devices.iter_mut().filter(|d| d.forecast) {
            let (min, max) = (d.min.unwrap_or(0), d.max.unwrap_or(0));
            let pool = pools
                .entry((d.owner.clone(), d.type_query.clone()))
                .or_insert_with(|| pool_gpus(engine, &matched, view, &d.owner, &d.type_query));
            let forecast = forecasts
                .entry(d.type_query.clone())
                .or_insert_with(|| engine.forecast_of(&d.type_query, now_s, 2).ok());
            d.count = match forecast {
                Some(f) => {
                    let at = |i: usize| f.ahead.get(i).map_or(0.0, |(_, v)| *v);
                    let (this, next) = looked_ahead(now_s, at(0), at(1));
                    pool.iter()
                        .filter(|(g, _)| own.contains(g))
                        .map(|(_, rank)| {
                            wanted_spares(this, next, lead, pool.len(), *rank, min, max)
                        })
                        .max()
                        .unwrap_or(min.min(max))
                }
                None => min.min(max),
            };
        }
    }
    out
}

/// The pool of `layout` (already [`sized`]) that takes back `device`, released on GPU `gpu`
/// of `view`: an entry for that GPU with `keep_released`, of the device's type, another tag
/// than the device's owner, holding fewer active spares there than it wants. The first such
/// entry, in the layout's order; `None` when no pool wants it.
pub fn pool_for_released(
    layout: &Layout,
    view: &HostView,
    gpu: &str,
    device: &plan::DeviceView,
) -> Option<String> {
    let (entry, gi) = plan::entries_by_gpu(layout, view)
        .into_iter()
        .find(|(_, gi)| view.gpus[*gi].address == gpu)?;
    let on_gpu = &view.gpus[gi].devices;
    entry
        .devices
        .iter()
        .filter(|d| d.keep_released && d.owner != device.owner)
        .filter(|d| plan::type_matches(&d.type_query, device))
        .find(|d| {
            let have = on_gpu
                .iter()
                .filter(|s| s.active && s.owner == d.owner && plan::type_matches(&d.type_query, s))
                .count();
            have < d.count as usize
        })
        .map(|d| d.owner.clone())
}

/// The GPUs of the pool `owner` keeps of `type_query` (the view's indexes of those that
/// `matched` gives a forecast entry of it), in address order, each with its rank
/// ([`ranks`]): a GPU is full when it keeps none of the pool's spares and can take no
/// more of the type.
fn pool_gpus(
    engine: &Engine,
    matched: &[(&super::file::GpuEntry, usize)],
    view: &HostView,
    owner: &str,
    type_query: &str,
) -> Vec<(usize, usize)> {
    let mut gpus: Vec<usize> = matched
        .iter()
        .filter(|(e, _)| {
            e.devices
                .iter()
                .any(|o| o.forecast && o.owner == owner && o.type_query == type_query)
        })
        .map(|(_, g)| *g)
        .collect();
    gpus.sort_by(|a, b| view.gpus[*a].address.cmp(&view.gpus[*b].address));
    gpus.dedup();
    let full: Vec<bool> = gpus
        .iter()
        .map(|&g| {
            let gpu = &view.gpus[g];
            let keeps = gpu
                .devices
                .iter()
                .any(|s| s.active && s.owner == owner && plan::type_matches(type_query, s));
            !keeps && !engine.has_room_for(&gpu.address, type_query)
        })
        .collect();
    gpus.into_iter().zip(ranks(&full)).collect()
}

/// Whether a layout has entries sized from the forecast.
pub fn has_forecast(layout: &Layout) -> bool {
    layout
        .gpus
        .iter()
        .any(|g| g.devices.iter().any(|d| d.forecast))
}

/// Records `name` as the active layout (durably): pools are filled from it from now on.
pub fn remember(host: &Host, name: &str) -> crate::persist::PersistResult<()> {
    crate::persist::write_state_file(&host.state(ACTIVE), format!("{name}\n").as_bytes())
}

/// Records `name` as the active layout, as [`remember`], and tells `engine`'s reshaper, so
/// what it kept of the last active layout is read again.
pub fn activate(engine: &Engine, name: &str) -> crate::persist::PersistResult<()> {
    let written = remember(engine.host(), name);
    engine.layout_activated();
    written
}

/// The active layout's name; a file that is bad or names no plain layout is set aside.
pub fn active(host: &Host) -> Option<String> {
    let path = host.state(ACTIVE);
    match crate::persist::read_state_file(&path, 1024) {
        Ok(None) => None,
        Ok(Some(text)) => {
            let name = text.trim_end_matches('\n');
            match super::file::check_name(name) {
                Ok(()) => Some(name.to_string()),
                Err(e) => {
                    let bad = crate::persist::BadFile::new(&path, e.to_string());
                    crate::persist::set_aside(&bad, "active layout file");
                    None
                }
            }
        }
        Err(bad) => {
            crate::persist::set_aside(&bad, "active layout file");
            None
        }
    }
}

/// The active layout as read from its files.
#[derive(Debug)]
pub struct Active {
    /// Its name.
    pub name: String,
    /// The layout, as its file says (not [`sized`]).
    pub layout: Layout,
    /// The tags of its pools.
    pub pools: BTreeSet<String>,
    /// The tags of its pools that take released devices back (`keep_released`).
    pub keeping: BTreeSet<String>,
}

impl Active {
    fn new(name: String, layout: Layout) -> Self {
        let entries = || layout.gpus.iter().flat_map(|g| g.devices.iter());
        let pools = entries().map(|d| d.owner.clone()).collect();
        let keeping = entries()
            .filter(|d| d.keep_released)
            .map(|d| d.owner.clone())
            .collect();
        Active {
            name,
            layout,
            pools,
            keeping,
        }
    }
}

/// How recently a file may have changed for what was read of it not to be kept: a change
/// within the file system's clock tick could leave its times and size as they were.
const RACY: Duration = Duration::from_secs(1);

/// What a file looked like, to tell a change without reading it: a write in place sets
/// the change time (and mostly the size), a rename or a new link gives another inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// `None` for a file that is not there or cannot be looked at.
    fn of(meta: std::io::Result<std::fs::Metadata>) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        meta.ok().map(|m| Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// Whether the file changed less than [`RACY`] before `now` (or after it).
    fn racy(stamp: Option<Stamp>, now: SystemTime) -> bool {
        let Some(Stamp { ctime: (s, ns), .. }) = stamp else {
            return false;
        };
        let (Ok(s), Ok(ns)) = (u64::try_from(s), u32::try_from(ns)) else {
            return true;
        };
        let changed = SystemTime::UNIX_EPOCH + Duration::new(s, ns);
        now.duration_since(changed).map_or(true, |d| d < RACY)
    }
}

/// What was read of the active layout, and what its files looked like then.
#[derive(Debug)]
struct Kept {
    marker: Option<Stamp>,
    name: Option<String>,
    file: Option<Stamp>,
    active: Option<Arc<Active>>,
}

/// The active layout kept in memory, so that a call that asks it (a released device's pool)
/// reads no file: it is read again only when `active-layout` or the layout's file changed
/// (a look at each, no read) or another layout was activated ([`ActiveCache::forget`]).
/// Files changed in the last second are read each time.
#[derive(Debug, Default)]
pub struct ActiveCache {
    kept: Mutex<Option<Kept>>,
    reads: AtomicU64,
}

impl ActiveCache {
    /// The active layout of `host`; `None` when none is, or its file cannot be used.
    pub fn get(&self, host: &Host) -> Option<Arc<Active>> {
        let now = SystemTime::now();
        let marker = Stamp::of(std::fs::symlink_metadata(host.state(ACTIVE)));
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let same_marker = kept
            .as_ref()
            .filter(|k| k.marker == marker && !Stamp::racy(marker, now));
        let name = match same_marker {
            Some(k) => k.name.clone(),
            None => {
                self.reads.fetch_add(1, Ordering::Relaxed);
                active(host)
            }
        };
        let file = name
            .as_deref()
            .and_then(|n| Stamp::of(std::fs::metadata(super::file::path_of(host.root(), n))));
        if let Some(k) = same_marker.filter(|k| k.file == file && !Stamp::racy(file, now)) {
            return k.active.clone();
        }
        let active = name.as_ref().and_then(|n| {
            self.reads.fetch_add(1, Ordering::Relaxed);
            super::file::load(host.root(), n)
                .ok()
                .map(|layout| Arc::new(Active::new(n.clone(), layout)))
        });
        *kept = (!Stamp::racy(marker, now) && !Stamp::racy(file, now)).then(|| Kept {
            marker,
            name,
            file,
            active: active.clone(),
        });
        active
    }

    /// Forgets what was read: the next [`ActiveCache::get`] reads the files.
    pub fn forget(&self) {
        *self.kept.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// How many times a file of the active layout was read (its name or the layout).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

/// Applies layout `name` from its file, as a call of `method` (its cause in the audit log
/// and events), its events in one batch.
pub fn apply_named(
    engine: &Engine,
    name: &str,
    method: &str,
) -> Result<Vec<super::Outcome>, super::LayoutError> {
    let layout = super::file::load(engine.host().root(), name)?;
    let cause = crate::engine::Cause {
        method: method.into(),
        ..crate::engine::Cause::default()
    };
    crate::engine::with_cause(cause, || {
        engine
            .events()
            .batch(|| super::apply(engine, &layout, false))
    })
}

/// Applies the active layout again (the refill); every step that is not done is logged.
pub fn refill(engine: &Engine, reshaper: &PoolReshaper, why: &str) {
    let Some(name) = active(engine.host()) else {
        return;
    };
    match apply_named(engine, &name, "RefillPools") {
        Ok(outcomes) => {
            let done = outcomes
                .iter()
                .filter(|o| o.status == super::Status::Done)
                .count();
            for o in outcomes.iter().filter(|o| o.status != super::Status::Done) {
                tracing::info!(layout = %name, status = o.status.name(), gpu = %o.gpu,
                    action = %o.action, subject = %o.subject, detail = %o.detail,
                    "pool refill step");
            }
            if done > 0 {
                crate::metrics::counters().pool("refill");
                tracing::info!(layout = %name, steps = done, why, "pools refilled");
            }
            reshaper.toward_forecast(engine, &name, &outcomes);
        }
        Err(e) => tracing::warn!(layout = %name, "the active layout cannot be used: {e}"),
    }
}

/// Runs the refill loop on a thread of its own: after hand-outs (once they pause for
/// `settle`, by default [`REFILL_SETTLE`]), and every [`SIZING_INTERVAL`] while the active
/// layout has forecast entries.
pub fn spawn_refill(
    engine: Arc<Engine>,
    reshaper: Arc<PoolReshaper>,
    settle: Duration,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("vgpud-refill".into())
        .spawn(move || loop {
            if let Some(first) = engine.hand_outs().wait(SIZING_INTERVAL) {
                // Let the storm's hand-outs gather: refill once they pause.
                while engine.hand_outs().wait(settle).is_some() {}
                refill(&engine, &reshaper, "spares were handed out");
                engine.hand_outs().refilled(first);
            } else if reshaper
                .active_layout(engine.host())
                .is_some_and(|a| has_forecast(&a.layout))
            {
                refill(&engine, &reshaper, "the forecast was looked at again");
            }
        })
}

#[cfg(test)]
mod tests {
    use super::{active, pool_for_released, remember, wanted_spares, Layout, ACTIVE};
    use crate::host::Host;
    use crate::layout::plan::{DeviceView, GpuView, HostView};

    fn dev(uuid: &str, ty: &str, owner: &str) -> DeviceView {
        DeviceView {
            uuid: uuid.into(),
            type_id: ty.into(),
            type_name: ty.into(),
            owner: owner.into(),
            active: true,
            created: 1,
        }
    }

    #[test]
    fn a_released_device_goes_to_a_pool_of_its_type_that_keeps_released_and_is_short() {
        let layout: crate::layout::Layout = toml::from_str(
            r#"
[[gpu]]
address = "0000:01:00.0"
devices = [
  { type = "nvidia-2q", count = 2, owner = "pool-off" },
  { type = "nvidia-2q", count = 2, owner = "pool-keep", keep_released = true },
]
"#,
        )
        .expect("layout");
        let host = |devices: Vec<DeviceView>| HostView {
            gpus: vec![
                GpuView {
                    address: "0000:01:00.0".into(),
                    devices,
                    ..GpuView::default()
                },
                GpuView {
                    address: "0000:02:00.0".into(),
                    ..GpuView::default()
                },
            ],
        };
        let released = dev("r", "nvidia-2q", "vm-a");
        let one = host(vec![dev("s1", "nvidia-2q", "pool-keep"), released.clone()]);
        // The pool that keeps released devices and is short takes it; pool-off never does.
        assert_eq!(
            pool_for_released(&layout, &one, "0000:01:00.0", &released).as_deref(),
            Some("pool-keep")
        );
        // A full pool does not.
        let full = host(vec![
            dev("s1", "nvidia-2q", "pool-keep"),
            dev("s2", "nvidia-2q", "pool-keep"),
            released.clone(),
        ]);
        assert_eq!(
            pool_for_released(&layout, &full, "0000:01:00.0", &released),
            None
        );
        // An inactive spare does not count as one.
        let mut stopped = dev("s2", "nvidia-2q", "pool-keep");
        stopped.active = false;
        let short = host(vec![dev("s1", "nvidia-2q", "pool-keep"), stopped]);
        assert!(pool_for_released(&layout, &short, "0000:01:00.0", &released).is_some());
        // Another type, another GPU, or the pool's own spare: no.
        let other = dev("o", "nvidia-4q", "vm-a");
        assert_eq!(
            pool_for_released(&layout, &one, "0000:01:00.0", &other),
            None
        );
        assert_eq!(
            pool_for_released(&layout, &one, "0000:02:00.0", &released),
            None
        );
        let spare = dev("s1", "nvidia-2q", "pool-keep");
        assert_eq!(
            pool_for_released(&layout, &one, "0000:01:00.0", &spare),
            None
        );
    }

    #[test]
    fn the_active_layout_is_kept_and_a_bad_file_is_set_aside_never_a_hang() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::simulated(dir.path());
        assert_eq!(active(&host), None);
        remember(&host, "vdi-day").expect("remember");
        assert_eq!(active(&host).as_deref(), Some("vdi-day"));
        let path = host.state(ACTIVE);
        let bad = host.state("active-layout.bad");
        // A name that is not a plain layout name (it would name a path elsewhere).
        std::fs::write(&path, "../../etc/passwd\n").expect("write");
        assert_eq!(active(&host), None);
        assert!(bad.exists() && !path.exists());
        std::fs::remove_file(&bad).expect("rm");
        // A FIFO is set aside at once, never read.
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        assert_eq!(active(&host), None);
        assert!(bad.exists() && !path.exists());
        std::fs::remove_file(&bad).expect("rm");
        // A link is set aside too; so is a huge file.
        std::os::unix::fs::symlink("/etc/hostname", &path).expect("symlink");
        assert_eq!(active(&host), None);
        assert!(!path.exists());
        std::fs::remove_file(&bad).expect("rm");
        std::fs::write(&path, "a".repeat(4096)).expect("write");
        assert_eq!(active(&host), None);
        assert!(bad.exists());
    }

    #[test]
    fn spares_cover_the_busier_of_this_hour_and_the_next_spread_over_the_gpus() {
        let all = |this, next, gpus, min, max| -> Vec<u32> {
            (0..gpus)
                .map(|rank| wanted_spares(this, next, None, gpus, rank, min, max))
                .collect()
        };
        // A peak of 40 logins next hour on 16 GPUs: 40 spares, the first 8 GPUs keep 3.
        let peak = all(2.0, 40.0, 16, 0, 8);
        assert_eq!(peak.iter().sum::<u32>(), 40);
        assert_eq!((peak[0], peak[7], peak[8], peak[15]), (3, 3, 2, 2));
        // After the peak, the hour under way still counts.
        assert_eq!(all(40.0, 0.0, 16, 0, 8), peak);
        // Bounded by max, raised to min.
        assert_eq!(all(1000.0, 0.0, 4, 0, 8), vec![8; 4]);
        assert_eq!(all(0.0, 0.0, 4, 2, 8), vec![2; 4]);
        // A fraction of a login asks for one spare on the host, not one per GPU.
        assert_eq!(all(0.2, 0.0, 4, 0, 8), vec![1, 0, 0, 0]);
        assert_eq!(all(4.5, 0.0, 4, 0, 8), vec![2, 1, 1, 1]);
        // No GPU matched counts as one; nonsense forecasts are nothing.
        assert_eq!(wanted_spares(3.0, -5.0, None, 0, 0, 0, 8), 3);
        assert_eq!(all(f64::NAN, -1.0, 2, 1, 8), vec![1, 1]);
        assert_eq!(all(f64::INFINITY, 0.0, 2, 0, 8), vec![8, 8]);
        // min above max never happens in a checked layout; max wins.
        assert_eq!(wanted_spares(0.0, 0.0, None, 1, 0, 9, 4), 4);
    }

    #[test]
    fn spares_cover_the_logins_of_a_refills_lead_time_with_99_9_percent() {
        use super::covering;
        use std::time::Duration;
        let s = Duration::from_secs;
        // The 0.999 quantiles of a Poisson count, from a table: mean 0.46 → 4 (P(N ≤ 3) is
        // 0.9984), 1 → 5, 5 → 13, 10 → 21, 50 → 73.
        assert_eq!(covering(92.0, s(18)), 4);
        assert_eq!(covering(3600.0, s(1)), 5);
        assert_eq!(covering(360.0, s(50)), 13);
        assert_eq!(covering(36.0, s(1000)), 21);
        assert_eq!(covering(180.0, s(1000)), 73);
        // A quiet hour needs none; nonsense is none; a huge mean stays finite.
        assert_eq!(covering(0.2, s(12)), 0);
        assert_eq!(covering(0.0, s(60)), 0);
        assert_eq!(covering(f64::NAN, s(60)), 0);
        assert_eq!(covering(f64::INFINITY, s(60)), 1_000_000_000_000_000);
        let big = covering(3_600_000.0, s(1));
        assert!((1090..1100).contains(&big), "{big}");

        let all = |this, lead, gpus| -> Vec<u32> {
            (0..gpus)
                .map(|rank| wanted_spares(this, 0.0, Some(lead), gpus, rank, 0, 32))
                .collect()
        };
        // A storm of 92 logins an hour on 6 GPUs, refilled 18 s after a hand-out: 4 spares
        // in all, not 92.
        assert_eq!(all(92.0, s(18), 6), vec![1, 1, 1, 1, 0, 0]);
        // A slower refill keeps more.
        assert_eq!(all(92.0, s(600), 6).iter().sum::<u32>(), 29);
        // Never more than the hour's forecast: a refill as slow as the hour changes nothing.
        assert_eq!(all(0.2, s(7200), 4), vec![1, 0, 0, 0]);
        assert_eq!(all(92.0, s(7200), 6), all_hour(92.0, 6));
        // A quiet night keeps none (a pool's min is the floor an operator wants).
        assert_eq!(all(0.2, s(12), 6), vec![0; 6]);
        assert_eq!(wanted_spares(0.2, 0.0, Some(s(12)), 6, 0, 1, 32), 1);

        fn all_hour(this: f64, gpus: usize) -> Vec<u32> {
            (0..gpus)
                .map(|rank| wanted_spares(this, 0.0, None, gpus, rank, 0, 32))
                .collect()
        }
    }

    #[test]
    fn a_pools_forecast_is_spread_over_its_gpus_and_looks_ten_minutes_ahead() {
        use crate::demand::record::Note;
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("nvidia-turing", dir.path()).expect("profile");
        let e = crate::engine::Engine::new(Host::simulated(dir.path())).expect("engine");
        let mut gpus = e.list_gpus();
        gpus.sort_by(|a, b| a.address.cmp(&b.address));
        let id = gpus[0]
            .types
            .iter()
            .find(|t| t.matches("RTX6000-1Q"))
            .expect("a 1Q type")
            .id
            .clone();
        // Three weeks of 7 requests in the hour from 09:00 on Mondays.
        let monday_9 = 1_764_579_600;
        for week in 0..3 {
            for i in 0..7 {
                e.demand()
                    .note_at(&id, Note::Request, monday_9 + week * 7 * 86_400 + i * 60);
            }
        }
        let now = monday_9 + 3 * 7 * 86_400;
        let f = e.forecast_of(&id, now, 2).expect("forecast");
        let ahead = f.ahead[0].1.max(f.ahead[1].1);
        assert!(ahead > 1.0, "the forecast learnt the Mondays: {ahead}");
        let entry = |gpu: &str| {
            format!(
                "[[gpu]]\n{gpu}\ndevices = [{{ type = \"RTX6000-1Q\", owner = \"pool-task\", forecast = true, max = 16 }}]\n"
            )
        };
        let view = crate::layout::apply::host_view(&e);
        // One entry per GPU: the pool's forecast is spread over both, not given to each.
        let per_address: Layout = toml::from_str(&format!(
            "{}{}",
            entry(&format!("address = \"{}\"", gpus[0].address)),
            entry(&format!("address = \"{}\"", gpus[1].address))
        ))
        .expect("layout");
        let counts: Vec<u32> = super::sized(&e, &per_address, &view, now)
            .gpus
            .iter()
            .map(|g| g.devices[0].count)
            .collect();
        assert_eq!(
            counts.iter().sum::<u32>(),
            ahead.ceil() as u32,
            "{counts:?}"
        );
        assert!(
            counts[0] >= counts[1] && counts[0] - counts[1] <= 1,
            "{counts:?}"
        );
        // Early in the hour before, the next hour does not count yet; ten minutes before, it
        // does.
        let hour_before = now - 3600;
        let early: u32 = super::sized(&e, &per_address, &view, hour_before + 600)
            .gpus
            .iter()
            .map(|g| g.devices[0].count)
            .sum();
        let f8 = e.forecast_of(&id, hour_before, 2).expect("forecast");
        assert_eq!(
            early,
            f8.ahead[0].1.max(0.0).ceil() as u32,
            "only 8:00's forecast"
        );
        assert!(early < counts.iter().sum::<u32>(), "{early}");
        let near: u32 = super::sized(&e, &per_address, &view, now - 600)
            .gpus
            .iter()
            .map(|g| g.devices[0].count)
            .sum();
        assert_eq!(near, f8.ahead[0].1.max(f8.ahead[1].1).ceil() as u32);
        assert!(near > early, "{near} {early}");
        // One entry for the model, on both GPUs: the most either is given.
        let by_model: Layout =
            toml::from_str(&entry(&format!("model = \"{}\"", gpus[0].model))).expect("layout");
        let sized = super::sized(&e, &by_model, &view, now);
        assert_eq!(sized.gpus[0].devices[0].count, counts[0]);

        // The first GPU full of guests' 1Q and none of the pool's: the second ranks first
        // and keeps the larger share.
        assert!(counts[0] > counts[1], "an odd forecast: {counts:?}");
        let on_first = |owner: &str| crate::engine::CreateRequest {
            type_query: "RTX6000-1Q".into(),
            parent: Some(gpus[0].address.clone()),
            owner: owner.into(),
            ..Default::default()
        };
        let mut last = None;
        while let Ok(d) = e.create_device(&on_first(&format!("vm-{}", e.list_devices().len()))) {
            last = Some(d.uuid);
        }
        let counts_now = |e: &crate::engine::Engine| -> Vec<u32> {
            let view = crate::layout::apply::host_view(e);
            super::sized(e, &per_address, &view, now)
                .gpus
                .iter()
                .map(|g| g.devices[0].count)
                .collect()
        };
        assert_eq!(counts_now(&e), vec![counts[1], counts[0]]);
        // A full GPU that keeps a spare of the pool keeps its rank: the refill keeps it there.
        let last = last.expect("the GPU took some");
        e.remove_device(&last).expect("remove");
        e.create_device(&on_first("pool-task")).expect("a spare");
        assert_eq!(counts_now(&e), counts);
        // Once a refill has been timed (in microseconds here), a forecast of a few logins
        // an hour asks for no spare: the refill replaces a hand-out long before the next.
        e.hand_outs().note();
        let first = e
            .hand_outs()
            .wait(std::time::Duration::ZERO)
            .expect("noted");
        e.hand_outs().refilled(first);
        assert_eq!(counts_now(&e), vec![0, 0]);
    }

    #[test]
    fn a_pools_gpus_with_room_rank_first_in_address_order() {
        use super::ranks;
        assert_eq!(ranks(&[]), Vec::<usize>::new());
        assert_eq!(ranks(&[false, false, false]), vec![0, 1, 2]);
        assert_eq!(ranks(&[true, false, false]), vec![2, 0, 1]);
        assert_eq!(ranks(&[false, true, false, true]), vec![0, 2, 1, 3]);
        assert_eq!(ranks(&[true, true]), vec![0, 1]);
    }
}
