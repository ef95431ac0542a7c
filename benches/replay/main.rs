//! The week replayed (issue #25): a trace of logins (`week.rs`, a seeded generator and its
//! CSV format, or any trace file) replayed with accelerated time against a real vgpud on a
//! simulated host of sixteen Quadro RTX 8000 and two H200 with MIG, under three policies,
//! beside a fourth computed in hindsight (`hindsight.rs`):
//!
//! 1. `static`: a hand-sized layout: each Quadro GPU given to one class, keeping a fixed
//!    number of spares, sized once for the busiest hour of the history;
//! 2. `demand`: no layout, every login a `CreateDevice` made then (vgpud today without pools);
//! 3. `elastic`: the same GPUs' pools sized after each login and every 5 simulated minutes
//!    from the forecast, with vgpud's own model (`vgpud::demand::forecast`, run on the
//!    trace's hours), sizing rule (`vgpud::layout::pools::wanted_spares`, `ranks`) and
//!    measured refill lead time (`GetForecast`'s `refill_lead_s`);
//! 4. `hindsight`: knows every login in advance (offline; no daemon).
//!
//! It reports per policy the login wait p50/p99 (a `CreateDevice` call's wall time), over
//! all requests and over the weekday storms' (`week::in_storm`), the share of the storms'
//! logins served from a spare, the refusals, the GPU-hours held by idle spares (and their
//! share of all device-hours) and by the broker's orphans and forgotten devices, the logins
//! served from a spare, the devices reclaimed by leases, the re-shapes, and the forecast's
//! error; the table goes to stdout and `target/bench/replay.md`, the forecast against the
//! actual to `target/bench/replay-forecast.csv` and, when python3 has matplotlib,
//! `forecast-week.png`; each policy's vgpud log to `target/bench/replay-POLICY.log`.
//!
//! Leases: run as root with libvirtd installed, each device is created with a lease
//! (`VGPUD_REPLAY_LEASE_MIN` simulated minutes, default 30; 0: none) and its owner is a
//! libvirt domain of a private libvirtd's test driver, which the replay starts when the
//! session begins and destroys when it ends (an orphan's is never started, a forgotten
//! device's is destroyed when its use ends), so vgpud's reclaim is what frees the broker's
//! devices. Elsewhere the replay says why leases are off and runs without them.
//!
//! Run: `cargo bench --bench replay`. `VGPUD_REPLAY_TRACE` (a CSV trace; else a generated
//! one, `VGPUD_REPLAY_SEED`, default 25, two weeks), `VGPUD_REPLAY_SPEED` (wall seconds per
//! simulated hour, default 1), `VGPUD_REPLAY_HOURS` (hours replayed from the start of the
//! trace's last week, default 168), `VGPUD_REPLAY_POLICIES` (default
//! `static,demand,elastic`; empty: the hindsight and the forecast only). Weeks before the last are history: the forecast learns them
//! and the static layout is sized from them.

mod hindsight;
mod week;

#[path = "../../tests/common/libvirtd.rs"]
mod libvirtd;

#[path = "../storm/optimum.rs"]
#[allow(dead_code)]
mod optimum;
#[path = "../storm/trace.rs"]
#[allow(dead_code)]
mod trace;

#[path = "../common/bus.rs"]
mod bus;
#[path = "../common/daemon.rs"]
#[allow(dead_code)]
mod daemon;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use vgpud::demand::forecast::{accuracy, Forecaster};
use vgpud::layout::pools::{looked_ahead, ranks, wanted_spares, SIZING_INTERVAL, SPARE_CONFIDENCE};
use vgpud_client::{Client, ManagerProxy, Options};

use daemon::{bench_host, ms, percentile, start_daemon_args};
use libvirtd::Libvirtd;
use week::{class_of, in_storm, Class, Event, Kind, CLASSES, HOUR, WEEK};

/// The Quadro GPUs each class's pool lives on (16 in all; the AI class uses the H200s).
const SPLIT: [usize; 3] = [6, 7, 3];
/// MIG slices for the AI class: two H200, seven 1g.18gb each.
const MIG_SLOTS: usize = 14;
/// The Unix hour of a Monday 00:00 (1970-01-05), so the forecast's hours of the week line
/// up with the trace's.
const MONDAY_HOUR: u64 = 96;
/// vgpud's reclaim look in the replay (`--reclaim-interval-s`), in wall seconds.
const RECLAIM_LOOK_S: &str = "1";
/// How often (simulated hours) the spares are counted.
const SAMPLE_H: f64 = 0.25;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Policy {
    Static,
    Demand,
    Elastic,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Static => "static",
            Policy::Demand => "demand",
            Policy::Elastic => "elastic",
        }
    }
}

/// What one policy's replay measured.
#[derive(Debug, Default)]
struct Measured {
    waits_ms: Vec<f64>,
    /// The waits of the requests in a weekday storm window.
    storm_waits_ms: Vec<f64>,
    /// The devices made for storm requests (served from a spare or made then).
    storm_uuids: Vec<String>,
    made: usize,
    refused: usize,
    errors: usize,
    spare_gpu_hours: f64,
    /// Device-hours of spares and of all devices (each device counted as one).
    spare_device_hours: f64,
    device_hours: f64,
    broker_gpu_hours: f64,
    warm: usize,
    storm_warm: usize,
    reshapes: usize,
    /// The refill lead times vgpud reported when the elastic pools were sized (wall s).
    leads_s: Vec<f64>,
    reclaim: Reclaims,
    wall_s: f64,
}

/// What the leases took back.
#[derive(Debug, Default)]
struct Reclaims {
    orphans: usize,
    forgotten: usize,
    /// Devices whose domain was running when they were reclaimed (must stay 0).
    of_running: usize,
    /// Login devices reclaimed (their domain runs until the broker removes them: must stay 0).
    logins: usize,
    /// The longest wait from the lease's start (the domain's last stop, or an orphan's
    /// creation) to the reclaim, in simulated seconds.
    longest_s: f64,
    /// Orphans and forgotten devices still there at the end that were due by then.
    overdue: usize,
    domain_errors: usize,
    /// The longest reclaim look of vgpud's that reclaimed a device (its `look_ms`), wall ms.
    longest_look_ms: f64,
}

/// Leases in the replay: the lease each device gets, in wall seconds and simulated hours.
#[derive(Debug, Clone, Copy)]
struct Lease {
    wall_s: u32,
    sim_h: f64,
}

/// A broker's device the leases may reclaim.
#[derive(Debug, Clone)]
struct Held {
    kind: Kind,
    domain: String,
    share: f64,
    /// When the device stops being used (simulated seconds from the replay's start).
    idle_from: f64,
}

/// The replay's libvirt domains, one per session, on the private libvirtd's test driver:
/// started and destroyed in order by a thread of their own (libvirt's calls block), with the
/// set of those running.
struct Domains {
    tx: mpsc::Sender<(String, bool)>,
    running: Arc<Mutex<HashSet<String>>>,
    errors: Arc<AtomicUsize>,
}

impl Domains {
    fn open(uri: &str) -> Domains {
        let (tx, rx) = mpsc::channel::<(String, bool)>();
        let running = Arc::new(Mutex::new(HashSet::new()));
        let errors = Arc::new(AtomicUsize::new(0));
        let conn =
            virt::connect::Connect::open(Some(uri)).expect("connect to the private libvirtd");
        let (r, e) = (running.clone(), errors.clone());
        std::thread::spawn(move || {
            for (name, start) in rx {
                let done = if start {
                    let xml = format!(
                        "<domain type='test'><name>{name}</name><memory>1048576</memory><os><type>hvm</type></os></domain>"
                    );
                    let made = conn.create_domain_xml(&xml, 0).map(|_| ());
                    if made.is_ok() {
                        r.lock().expect("running").insert(name.clone());
                    }
                    made
                } else {
                    r.lock().expect("running").remove(&name);
                    conn.lookup_domain_by_name(&name).and_then(|d| d.destroy())
                };
                if let Err(err) = done {
                    e.fetch_add(1, Ordering::SeqCst);
                    eprintln!("domain {name}: {err}");
                }
            }
        });
        Domains {
            tx,
            running,
            errors,
        }
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: {v:?} is not a number"))
        })
        .unwrap_or(default)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Builds the fake NVML in the bench's own profile and returns it (next to vgpud).
fn fake_nvml() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "vgpud-fake-nvml"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    assert!(
        cmd.status().expect("run cargo").success(),
        "cargo build -p vgpud-fake-nvml failed"
    );
    let path = Path::new(env!("CARGO_BIN_EXE_vgpud")).with_file_name("libnvidia_ml.so");
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// The forecast of each class for each replayed hour, made just before it (and the one of
/// the hour after, made at the same time), by vgpud's model fed the trace's hours: the
/// weeks before `from` first, then each replayed hour once it has passed.
fn forecasts(events: &[Event], from: u64, hours: u64) -> Vec<[(f64, f64); 4]> {
    let history = from / HOUR;
    let mut models: Vec<Forecaster> = CLASSES.iter().map(|_| Forecaster::default()).collect();
    let actual: Vec<Vec<f64>> = CLASSES
        .iter()
        .map(|c| week::hourly(events, c.type_name, 0, history + hours + 1))
        .collect();
    let mut out = Vec::with_capacity(hours as usize);
    for h in 0..history + hours {
        if h >= history {
            let mut row = [(0.0, 0.0); 4];
            for (i, m) in models.iter().enumerate() {
                row[i] = (m.predict(MONDAY_HOUR + h), m.predict(MONDAY_HOUR + h + 1));
            }
            out.push(row);
        }
        for (i, m) in models.iter_mut().enumerate() {
            m.observe(MONDAY_HOUR + h, actual[i][h as usize]);
        }
    }
    out
}

/// The spares per GPU of each Quadro class: `static` from the busiest hour of `sizing`
/// (the history, or the replayed week when there is none), `elastic` from the forecast.
fn spares_static(events: &[Event], from: u64, hours: u64) -> [u32; 3] {
    let mut out = [0; 3];
    for (i, c) in CLASSES[..3].iter().enumerate() {
        let peak = week::hourly(events, c.type_name, from, hours)
            .into_iter()
            .fold(0.0, f64::max);
        // ⌈peak ÷ GPUs⌉ on each: the most any of the class's GPUs is given.
        out[i] = wanted_spares(peak, 0.0, None, SPLIT[i], 0, 0, c.max_per_gpu);
    }
    out
}

/// The elastic spares of each Quadro GPU (in address order) at simulated second `at`: each
/// class's forecast (this hour's, and the next hour's once it is vgpud's look-ahead away)
/// for a refill's `lead` (simulated; `None` before vgpud has timed one), spread over the
/// class's GPUs with room first (`full[g]`: GPU `g` can take no more and keeps no spare),
/// as vgpud sizes a forecast pool.
fn sized(forecast: &[[(f64, f64); 4]], at: u64, lead: Option<Duration>, full: &[bool]) -> Vec<u32> {
    let h = (at / HOUR) as usize;
    let mut first = 0;
    let mut out = Vec::new();
    for (i, n) in SPLIT.into_iter().enumerate() {
        let ranks = ranks(&full[first..first + n]);
        first += n;
        for rank in ranks {
            out.push(forecast.get(h).map_or(0, |row| {
                let (this, next) = looked_ahead(at, row[i].0, row[i].1);
                wanted_spares(this, next, lead, n, rank, 0, CLASSES[i].max_per_gpu)
            }));
        }
    }
    out
}

/// Which Quadro GPUs (in address order) are full for their class's pool: they keep none of
/// its spares and hold as many devices as they can.
fn full_gpus(quadro: &[String], devices: &[vgpud_client::DeviceSummary]) -> Vec<bool> {
    quadro
        .iter()
        .zip(quadro_classes())
        .map(|(gpu, (i, _))| {
            let on: Vec<_> = devices.iter().filter(|d| &d.gpu == gpu).collect();
            let pool = format!("pool-{}", CLASSES[i].name);
            !on.iter().any(|d| d.owner == pool) && on.len() >= CLASSES[i].max_per_gpu as usize
        })
        .collect()
}

/// The class (its index in [`CLASSES`]) of each Quadro GPU, in address order, and the GPU's
/// rank among the class's GPUs.
fn quadro_classes() -> impl Iterator<Item = (usize, usize)> {
    SPLIT
        .into_iter()
        .enumerate()
        .flat_map(|(i, n)| (0..n).map(move |rank| (i, rank)))
}

/// The layout of the Quadro GPUs (in address order) with `counts[g]` spares on GPU `g`.
fn layout_text(quadro: &[String], counts: &[u32]) -> String {
    let mut s = String::from("description = \"replay bench pools\"\n");
    for ((gpu, (i, _)), count) in quadro.iter().zip(quadro_classes()).zip(counts) {
        let c = &CLASSES[i];
        let _ = write!(
            s,
            "\n[[gpu]]\naddress = \"{gpu}\"\ndevices = [{{ type = \"{}\", count = {count}, owner = \"pool-{}\" }}]\n",
            c.type_name, c.name
        );
    }
    s
}

fn pool_class(owner: &str) -> Option<&'static Class> {
    let name = owner.strip_prefix("pool-")?;
    CLASSES.iter().find(|c| c.name == name)
}

fn is_no_capacity(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _) if name.as_str() == "org.vgpud1.Error.NoCapacity")
}

struct Replay {
    events: Vec<Event>,
    lease: Option<Lease>,
    from: u64,
    hours: u64,
    speed: f64,
    nvml: PathBuf,
    forecast: Vec<[(f64, f64); 4]>,
    static_spares: [u32; 3],
}

impl Replay {
    /// The wall time of simulated second `t` (from the replay's start).
    fn wall(&self, t: f64) -> Duration {
        Duration::from_secs_f64(t / HOUR as f64 * self.speed)
    }

    fn run(&self, rt: &tokio::runtime::Runtime, policy: Policy) -> Measured {
        let host = bench_host("large");
        vgpud_sim::write_profile("nvidia-h200", &host.root).expect("the H200 profile");
        let dir = tempfile::tempdir().expect("tempdir");
        let bus = bus::start_bus(dir.path());
        let log = dir.path().join("vgpud.log");
        let nvml = self.nvml.as_os_str();
        let libvirt = self.lease.map(|_| {
            let at = dir.path().join("libvirt");
            (Libvirtd::start(&at), Libvirtd::uri(&at))
        });
        // The refill's settle (1 s of a real storm's quiet between hand-outs) on the
        // replay's clock.
        let settle = refill_settle_ms(self.speed).to_string();
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "--nvml-library".as_ref(),
            nvml,
            "--refill-settle-ms".as_ref(),
            settle.as_ref(),
        ];
        if let Some((_, uri)) = &libvirt {
            args.extend(
                [
                    "--libvirt-uri",
                    uri.as_str(),
                    "--reclaim-interval-s",
                    RECLAIM_LOOK_S,
                ]
                .map(std::ffi::OsStr::new),
            );
        }
        let (daemon, _) = start_daemon_args(
            Path::new(env!("CARGO_BIN_EXE_vgpud")),
            &host.root,
            &bus.1,
            dir.path(),
            "info",
            Some(&log),
            &args,
        );
        let domains = libvirt.as_ref().map(|(_, uri)| Domains::open(uri));
        let mut m = rt.block_on(self.drive(policy, &bus.1, &host.root, domains.as_ref()));
        drop(daemon);
        drop(libvirt);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let kept = target_dir().join(format!("bench/replay-{}.log", policy.name()));
        if let Err(e) = std::fs::write(&kept, &text) {
            eprintln!("{}: {e}", kept.display());
        }
        m.reshapes = text
            .matches("re-shaped a GPU of spares toward a type that had no room")
            .count();
        let handed_out: HashSet<&str> = text
            .lines()
            .filter(|l| l.contains("spare handed out"))
            .filter_map(|l| l.split("uuid=").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .collect();
        m.warm = handed_out.len();
        m.reclaim.longest_look_ms = text
            .lines()
            .filter(|l| l.contains("reclaimed a device"))
            .filter_map(|l| l.split("look_ms=").nth(1))
            .filter_map(|rest| rest.trim_start_matches('"').split(['"', ' ']).next())
            .filter_map(|v| v.parse::<f64>().ok())
            .fold(0.0, f64::max);
        m.storm_warm = m
            .storm_uuids
            .iter()
            .filter(|u| handed_out.contains(u.as_str()))
            .count();
        m
    }

    async fn drive(
        &self,
        policy: Policy,
        address: &str,
        root: &Path,
        domains: Option<&Domains>,
    ) -> Measured {
        let conn = zbus::connection::Builder::address(address)
            .build()
            .await
            .expect("connect");
        let client = Client::from_connection(conn).await.expect("client");
        let gpus = client.list_gpus().await.expect("ListGpus");
        let mut quadro: Vec<String> = gpus
            .iter()
            .filter(|g| g.model.contains("RTX 8000"))
            .map(|g| g.address.clone())
            .collect();
        quadro.sort();
        assert_eq!(quadro.len(), 16, "the large profile has 16 Quadro RTX 8000");
        for g in gpus.iter().filter(|g| g.model.contains("H200")) {
            client
                .set_mig_mode(&g.address, true, &Options::new())
                .await
                .expect("MIG on");
            client
                .set_vf_count(&g.address, 32, &Options::new())
                .await
                .expect("VFs on");
        }
        let layouts = root.join("etc/vgpud/layouts");
        std::fs::create_dir_all(&layouts).expect("layouts dir");
        let apply = |counts: Vec<u32>| {
            let client = &client;
            let text = layout_text(&quadro, &counts);
            let path = layouts.join("replay.toml");
            async move {
                std::fs::write(&path, text).expect("layout");
                client
                    .apply_layout("replay", false)
                    .await
                    .expect("ApplyLayout");
            }
        };
        let uniform: Vec<u32> = quadro_classes()
            .map(|(i, _)| self.static_spares[i])
            .collect();
        match policy {
            Policy::Static => apply(uniform).await,
            Policy::Elastic => apply(sized(&self.forecast, 0, None, &[false; 16])).await,
            Policy::Demand => {}
        }
        let mut managers = Vec::new();
        for _ in 0..8 {
            let conn = zbus::connection::Builder::address(address)
                .build()
                .await
                .expect("connect");
            managers.push(
                ManagerProxy::builder(&conn)
                    .cache_properties(zbus::proxy::CacheProperties::No)
                    .build()
                    .await
                    .expect("proxy"),
            );
        }
        let out = Arc::new(Mutex::new(Measured::default()));
        let start = tokio::time::Instant::now();
        let end_s = (self.hours * HOUR) as f64;
        let mut tasks = Vec::new();
        let pending = Arc::new(AtomicUsize::new(0));

        // The spares counted every SAMPLE_H simulated hours.
        let sampler = {
            let out = out.clone();
            let client = client.clone();
            let step = self.wall(SAMPLE_H * HOUR as f64);
            tokio::spawn(async move {
                let mut next = start;
                loop {
                    next += step;
                    tokio::time::sleep_until(next).await;
                    let Ok(devices) = client.list_devices().await else {
                        continue;
                    };
                    let spares: Vec<&Class> = devices
                        .iter()
                        .filter_map(|d| pool_class(&d.owner))
                        .collect();
                    let share: f64 = spares.iter().map(|c| 1.0 / f64::from(c.max_per_gpu)).sum();
                    if let Ok(mut o) = out.lock() {
                        o.spare_gpu_hours += share * SAMPLE_H;
                        o.spare_device_hours += spares.len() as f64 * SAMPLE_H;
                        o.device_hours += devices.len() as f64 * SAMPLE_H;
                    }
                }
            })
        };
        // The elastic pools sized as vgpud sizes a forecast pool: after each login (vgpud
        // sizes at each refill, and a hand-out starts one) and every SIZING_INTERVAL of
        // simulated time. The forecast of the hour (and of the next once it is LOOK_AHEAD
        // away), for the refill's lead time vgpud measured (GetForecast's `refill_lead_s`,
        // wall seconds) on the replay's clock, spread over each class's GPUs with room
        // first (`ranks`, from the devices now).
        let resize = Arc::new(tokio::sync::Notify::new());
        let sizer = (policy == Policy::Elastic).then(|| {
            let (client, out, resize) = (client.clone(), out.clone(), resize.clone());
            let (forecast, quadro, speed) = (self.forecast.clone(), quadro.clone(), self.speed);
            let tick = self.wall(SIZING_INTERVAL.as_secs_f64());
            let end = start + self.wall(end_s);
            let path = layouts.join("replay.toml");
            tokio::spawn(async move {
                let mut next = start + tick;
                while tokio::time::Instant::now() < end {
                    tokio::select! {
                        _ = tokio::time::sleep_until(next) => next += tick,
                        _ = resize.notified() => {}
                    }
                    let at = (start.elapsed().as_secs_f64() / speed * HOUR as f64) as u64;
                    let lead = match client.forecast(CLASSES[0].type_name, &Options::new()).await {
                        Ok((_, _, figures)) => {
                            figures.get("refill_lead_s").and_then(|v| v.as_f64())
                        }
                        Err(e) => {
                            eprintln!("at {at} s: GetForecast: {e}");
                            None
                        }
                    };
                    let lead = lead.map(|wall_s| {
                        out.lock().expect("measured").leads_s.push(wall_s);
                        Duration::from_secs_f64(wall_s * HOUR as f64 / speed)
                    });
                    let full = match client.list_devices().await {
                        Ok(devices) => full_gpus(&quadro, &devices),
                        Err(e) => {
                            eprintln!("at {at} s: ListDevices: {e}");
                            vec![false; quadro.len()]
                        }
                    };
                    let text = layout_text(&quadro, &sized(&forecast, at, lead, &full));
                    std::fs::write(&path, text).expect("layout");
                    if let Err(e) = client.apply_layout("replay", false).await {
                        eprintln!("at {at} s: ApplyLayout: {e}");
                    }
                }
            })
        });

        // The broker's devices the leases may reclaim, and what the reclaims were.
        let held: Arc<Mutex<HashMap<String, Held>>> = Arc::default();
        let running: Arc<Mutex<HashSet<String>>> =
            domains.map(|d| d.running.clone()).unwrap_or_default();
        let per_s = HOUR as f64 / self.speed;
        let listener = {
            let (held, out, running) = (held.clone(), out.clone(), running.clone());
            let mut signals = client
                .manager()
                .receive_device_reclaimed()
                .await
                .expect("subscribe to DeviceReclaimed");
            tokio::spawn(async move {
                while let Some(sig) = signals.next().await {
                    let Ok(args) = sig.args() else { continue };
                    let now = start.elapsed().as_secs_f64() * per_s;
                    let Some(h) = held.lock().expect("held").remove(args.uuid()) else {
                        continue;
                    };
                    let runs = running.lock().expect("running").contains(&h.domain);
                    let mut o = out.lock().expect("measured");
                    let r = &mut o.reclaim;
                    if runs {
                        r.of_running += 1;
                    }
                    match h.kind {
                        Kind::Orphan => r.orphans += 1,
                        Kind::Forgotten => r.forgotten += 1,
                        Kind::Login => r.logins += 1,
                    }
                    r.longest_s = r.longest_s.max(now - h.idle_from);
                    o.broker_gpu_hours += h.share * (now - h.idle_from).max(0.0) / HOUR as f64;
                }
            })
        };
        let lease = self.lease;

        let window: Vec<&Event> = self
            .events
            .iter()
            .filter(|e| e.time >= self.from && e.time < self.from + self.hours * HOUR)
            .collect();
        eprintln!(
            "{}: {} requests over {} simulated hours, {:.1} s each",
            policy.name(),
            window.len(),
            self.hours,
            self.speed
        );
        let wall_start = Instant::now();
        for (i, e) in window.into_iter().enumerate() {
            let Some(class) = class_of(&e.type_name) else {
                continue;
            };
            let at = (e.time - self.from) as f64;
            tokio::time::sleep_until(start + self.wall(at)).await;
            let m = managers[i % managers.len()].clone();
            // With leases the owner is the session's own libvirt domain.
            let owner = match lease {
                Some(_) => format!("{}-r{i}", e.user),
                None => e.user.clone(),
            };
            let mut opts = Options::new().str("owner", owner.clone());
            if policy != Policy::Demand && !class.type_name.starts_with("H200") {
                opts = opts.str("pool", format!("pool-{}", class.name));
            }
            if let Some(l) = lease {
                opts = opts.u32("lease_s", l.wall_s);
            }
            let used_until = (at + e.duration as f64).min(end_s);
            let release = start + self.wall(used_until);
            let (kind, out) = (e.kind, out.clone());
            let type_name = e.type_name.clone();
            let share = 1.0 / f64::from(class.max_per_gpu);
            let pending = pending.clone();
            let storm = in_storm(e.time - self.from);
            let held = held.clone();
            let domains = domains.map(|d| d.tx.clone());
            let resize = resize.clone();
            pending.fetch_add(1, Ordering::SeqCst);
            tasks.push(tokio::spawn(async move {
                let t = Instant::now();
                let r = m.create_device(&type_name, opts.to_opts()).await;
                let wait = ms(t.elapsed());
                resize.notify_one();
                let uuid = {
                    let mut o = out.lock().expect("measured");
                    pending.fetch_sub(1, Ordering::SeqCst);
                    o.waits_ms.push(wait);
                    if storm {
                        o.storm_waits_ms.push(wait);
                    }
                    match r {
                        Ok((uuid, _)) => {
                            o.made += 1;
                            if storm {
                                o.storm_uuids.push(uuid.clone());
                            }
                            // An orphan's lease runs from the answer: the device exists
                            // from then, and its VM never starts.
                            let answered = start.elapsed().as_secs_f64() * per_s;
                            let idle_from = match kind {
                                Kind::Login => end_s,
                                Kind::Orphan => answered.max(at),
                                Kind::Forgotten => used_until,
                            };
                            if lease.is_some() && kind != Kind::Login {
                                // Counted when reclaimed, or at the end.
                                let h = Held {
                                    kind,
                                    domain: owner.clone(),
                                    share,
                                    idle_from,
                                };
                                held.lock().expect("held").insert(uuid.clone(), h);
                            } else {
                                o.broker_gpu_hours += share * (end_s - idle_from) / HOUR as f64;
                            }
                            uuid
                        }
                        Err(e) if is_no_capacity(&e) => {
                            o.refused += 1;
                            return;
                        }
                        Err(e) => {
                            o.errors += 1;
                            eprintln!("CreateDevice {type_name}: {e}");
                            return;
                        }
                    }
                };
                // The broker starts the session's VM, and destroys it when the session ends.
                if let Some(tx) = &domains {
                    if kind != Kind::Orphan {
                        let _ = tx.send((owner.clone(), true));
                    }
                }
                if kind == Kind::Orphan || used_until >= end_s {
                    return;
                }
                tokio::time::sleep_until(release).await;
                if let Some(tx) = &domains {
                    let _ = tx.send((owner.clone(), false));
                }
                if kind == Kind::Login {
                    if let Err(e) = m.remove_device(&uuid, Options::new().to_opts()).await {
                        eprintln!("RemoveDevice {uuid}: {e}");
                    }
                }
            }));
        }
        tokio::time::sleep_until(start + self.wall(end_s)).await;
        sampler.abort();
        if let Some(s) = sizer {
            s.abort();
        }
        // Creates still under way are waited for (up to a minute); removals after the
        // window are not made.
        let late = Instant::now();
        while pending.load(Ordering::SeqCst) > 0 && late.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        listener.abort();
        // The broker's devices not reclaimed hold their room to the end.
        let look_s = per_s; // one reclaim look: RECLAIM_LOOK_S, 1 s of wall time
        for h in held.lock().expect("held").values() {
            let mut o = out.lock().expect("measured");
            o.broker_gpu_hours += h.share * (end_s - h.idle_from) / HOUR as f64;
            if let Some(l) = lease {
                if h.idle_from + l.sim_h * HOUR as f64 + 2.0 * look_s < end_s {
                    o.reclaim.overdue += 1;
                }
            }
        }
        let mut m = std::mem::take(&mut *out.lock().expect("measured"));
        m.reclaim.domain_errors = domains.map_or(0, |d| d.errors.load(Ordering::SeqCst));
        m.wall_s = wall_start.elapsed().as_secs_f64();
        m
    }
}

fn main() {
    let speed: f64 = env_or("VGPUD_REPLAY_SPEED", 1.0);
    let seed: u64 = env_or("VGPUD_REPLAY_SEED", 25);
    let out_dir = target_dir().join("bench");
    std::fs::create_dir_all(&out_dir).expect("target/bench");
    let (events, source) = match std::env::var_os("VGPUD_REPLAY_TRACE") {
        Some(path) => {
            let text = std::fs::read_to_string(&path).expect("the trace file");
            let events = week::from_csv(&text).expect("a trace in the documented format");
            (events, PathBuf::from(path).display().to_string())
        }
        None => {
            let events = week::generate(seed, 2);
            let path = out_dir.join("replay-trace.csv");
            std::fs::write(&path, week::to_csv(&events)).expect("write the trace");
            (
                events,
                format!("generated, seed {seed}: {}", path.display()),
            )
        }
    };
    let last = events.last().map_or(0, |e| e.time);
    let from = last / WEEK * WEEK;
    let hours: u64 = env_or("VGPUD_REPLAY_HOURS", 168).min(168);
    let history_from = if from > 0 { 0 } else { from };
    let history_hours = if from > 0 { from / HOUR } else { hours };
    let lease = lease_setting(speed);
    let replay = Replay {
        lease,
        forecast: forecasts(&events, from, hours),
        static_spares: spares_static(&events, history_from, history_hours),
        nvml: fake_nvml(),
        events,
        from,
        hours,
        speed,
    };
    let policies: Vec<Policy> = std::env::var("VGPUD_REPLAY_POLICIES")
        .unwrap_or_else(|_| "static,demand,elastic".into())
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.trim() {
            "static" => Policy::Static,
            "demand" => Policy::Demand,
            "elastic" => Policy::Elastic,
            other => panic!("VGPUD_REPLAY_POLICIES: unknown policy {other:?}"),
        })
        .collect();

    // The forecast against what came, summed over the classes.
    let actual: Vec<Vec<f64>> = CLASSES
        .iter()
        .map(|c| week::hourly(&replay.events, c.type_name, from, hours))
        .collect();
    let mut pairs = Vec::new();
    let mut csv = String::from("hour,forecast,actual\n");
    for (h, row) in replay.forecast.iter().enumerate() {
        let hour: Vec<(f64, f64)> = row
            .iter()
            .zip(&actual)
            .map(|(f, a)| (f.0, a.get(h).copied().unwrap_or(0.0)))
            .collect();
        let f: f64 = hour.iter().map(|p| p.0).sum();
        let a: f64 = hour.iter().map(|p| p.1).sum();
        pairs.extend(hour);
        let _ = writeln!(csv, "{h},{f:.3},{a}");
    }
    let acc = accuracy(&pairs);
    let csv_path = out_dir.join("replay-forecast.csv");
    std::fs::write(&csv_path, &csv).expect("forecast csv");
    plot(&csv_path, &out_dir.join("forecast-week.png"));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    for p in policies {
        let m = replay.run(&rt, p);
        eprintln!("{}: {:?} (waits not shown)", p.name(), (m.made, m.refused));
        rows.push((p, m));
    }
    let h = hindsight::hindsight(
        &replay.events,
        from,
        hours,
        16,
        MIG_SLOTS,
        2_000_000,
        lease.map(|l| l.sim_h),
    );

    let mut out = String::new();
    let _ = writeln!(
        out,
        "# replay: {} simulated hours from the trace's last week, {speed} s a simulated hour, {} build\n\n- trace: {source}\n- host: 16 Quadro RTX 8000 (large) and 2 H200 with MIG (nvidia-h200); classes on GPUs: {:?} (1Q, 2Q, 4Q), AI on 14 MIG slices\n- static spares per GPU: {:?}\n- forecast error over the replayed hours (per class and hour): mean |forecast − actual| {:.2} requests, {:.1} % of the {} requests\n",
        hours,
        if cfg!(debug_assertions) { "debug" } else { "release" },
        SPLIT,
        replay.static_spares,
        acc.mean_abs_error,
        acc.relative.unwrap_or(0.0) * 100.0,
        acc.actual,
    );
    let _ = writeln!(
        out,
        "- the pools' refill waits for hand-outs to pause {} ms of wall time (`--refill-settle-ms`; 1 s of the week's time is {:.2} ms)",
        refill_settle_ms(speed),
        1000.0 * speed / HOUR as f64
    );
    let _ = writeln!(
        out,
        "- leases: {}\n",
        match lease {
            Some(l) => format!(
                "{} s of wall time ({:.0} simulated minutes) on every device, reclaim looks every {RECLAIM_LOOK_S} s ({:.0} simulated minutes); the sessions' domains on a private libvirtd's test driver",
                l.wall_s,
                l.sim_h * 60.0,
                60.0 / speed
            ),
            None => format!("off ({})", lease_off_reason().unwrap_or_default()),
        }
    );
    out.push_str("| policy | requests | login wait p50 / p99 (ms) | storm logins from a spare | storm wait p50 / p99 (ms) | refused | from a spare | spares idle (GPU-h; share of device-hours) | orphans + forgotten (GPU-h) | re-shapes | forecast error |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    let p50_p99 = |v: &mut Vec<f64>| {
        if v.is_empty() {
            "-".to_string()
        } else {
            format!("{:.1} / {:.1}", percentile(v, 0.5), percentile(v, 0.99))
        }
    };
    let share = |part: f64, whole: f64| {
        if whole > 0.0 {
            format!("{:.1} %", 100.0 * part / whole)
        } else {
            "-".into()
        }
    };
    for (p, m) in &mut rows {
        let n = m.waits_ms.len();
        let storms = m.storm_waits_ms.len();
        let _ = writeln!(
            out,
            "| {} | {n} | {} | {} of {storms} ({}) | {} | {} ({}){} | {} | {:.1} ({}) | {:.1} | {} | {} |",
            p.name(),
            p50_p99(&mut m.waits_ms),
            m.storm_warm,
            share(m.storm_warm as f64, storms as f64),
            p50_p99(&mut m.storm_waits_ms),
            m.refused,
            share(m.refused as f64, n as f64),
            if m.errors > 0 {
                format!(" (+{} errors)", m.errors)
            } else {
                String::new()
            },
            m.warm,
            m.spare_gpu_hours,
            share(m.spare_device_hours, m.device_hours),
            m.broker_gpu_hours,
            m.reshapes,
            if *p == Policy::Elastic {
                format!("{:.1} %", acc.relative.unwrap_or(0.0) * 100.0)
            } else {
                "-".into()
            },
        );
        eprintln!("{}: replayed in {:.0} s", p.name(), m.wall_s);
    }
    let _ = writeln!(
        out,
        "| hindsight | {} | hand-out only (made ahead) | all | - | {}{} ({}) | all | 0 | {:.1} | - | 0 (knows the trace) |",
        h.requests,
        if h.exact { "" } else { "≥ " },
        h.refused,
        share(h.refused as f64, h.requests as f64),
        h.broker_idle_gpu_hours,
    );
    for (p, m) in rows.iter_mut().filter(|(_, m)| !m.leads_s.is_empty()) {
        let n = m.leads_s.len();
        let (p50, max) = (
            percentile(&mut m.leads_s, 0.5),
            percentile(&mut m.leads_s, 1.0),
        );
        let _ = writeln!(
            out,
            "\n{}: the refill's lead time vgpud measured (the longest of its last 16 refills, at {n} sizings): median {:.0} ms, most {:.0} ms of wall time ({:.0} / {:.0} simulated s); the pools kept the spares that cover a lead's logins with {:.1} % confidence.",
            p.name(),
            p50 * 1000.0,
            max * 1000.0,
            p50 * HOUR as f64 / speed,
            max * HOUR as f64 / speed,
            SPARE_CONFIDENCE * 100.0,
        );
    }
    if lease.is_some() {
        let look_min = |ms: f64| ms / 1000.0 * HOUR as f64 / speed / 60.0;
        let _ = write!(
            out,
            "\nA reclaim comes up to the lease, one look's interval ({:.0} simulated min) and the look's own time after its lease's start.\n\n| policy | orphans reclaimed | forgotten reclaimed | reclaimed while their domain ran | login devices reclaimed | longest from the lease's start to the reclaim (simulated min) | the longest look that reclaimed (wall ms; simulated min) | due but not reclaimed at the end | domain errors |\n|---|---|---|---|---|---|---|---|---|\n",
            look_min(1000.0 * RECLAIM_LOOK_S.parse::<f64>().unwrap_or(1.0)),
        );
        for (p, m) in &rows {
            let r = &m.reclaim;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.0} | {:.0}; {:.1} | {} | {} |",
                p.name(),
                r.orphans,
                r.forgotten,
                r.of_running,
                r.logins,
                r.longest_s / 60.0,
                r.longest_look_ms,
                look_min(r.longest_look_ms),
                r.overdue,
                r.domain_errors,
            );
        }
    }
    print!("{out}");
    std::fs::write(out_dir.join("replay.md"), &out).expect("target/bench/replay.md");
}

/// vgpud's refill settle (1 s) in wall milliseconds at `speed` (at least 1).
fn refill_settle_ms(speed: f64) -> u64 {
    ((1000.0 * speed / HOUR as f64).round() as u64).max(1)
}

/// Why leases cannot run here, if they cannot: a private libvirtd runs only as root.
fn lease_off_reason() -> Option<String> {
    if env_or("VGPUD_REPLAY_LEASE_MIN", 30.0) <= 0.0 {
        return Some("VGPUD_REPLAY_LEASE_MIN=0".into());
    }
    if !nix::unistd::geteuid().is_root() {
        return Some("a private libvirtd runs only as root".into());
    }
    Command::new("libvirtd")
        .arg("--version")
        .output()
        .err()
        .map(|e| format!("libvirtd cannot run: {e} (apt-get install libvirt-daemon)"))
}

/// The lease of `VGPUD_REPLAY_LEASE_MIN` simulated minutes at `speed` wall seconds per
/// simulated hour, in whole wall seconds (at least 1); `None`, said loudly, when leases
/// cannot run here.
fn lease_setting(speed: f64) -> Option<Lease> {
    if let Some(why) = lease_off_reason() {
        eprintln!("replay: leases are off: {why}; orphans and forgotten devices stay to the end");
        return None;
    }
    let minutes: f64 = env_or("VGPUD_REPLAY_LEASE_MIN", 30.0);
    let wall_s = ((minutes / 60.0 * speed).round() as u32).max(1);
    Some(Lease {
        wall_s,
        sim_h: f64::from(wall_s) / speed,
    })
}

/// Plots the forecast against the actual with python3's matplotlib, if it is there.
fn plot(csv: &Path, png: &Path) {
    let script = format!(
        r##"
import csv, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open({csv:?})))
h = [int(r["hour"]) for r in rows]
fig, ax = plt.subplots(figsize=(11, 3.6), dpi=100)
ax.step(h, [float(r["actual"]) for r in rows], where="post", label="actual requests", color="#444")
ax.step(h, [float(r["forecast"]) for r in rows], where="post", label="forecast (made before the hour)", color="#d62728")
ax.set_xticks(range(0, len(h) + 1, 24))
ax.set_xticklabels(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", ""][: len(range(0, len(h) + 1, 24))])
ax.set_ylabel("logins per hour")
ax.set_title("vgpud's forecast against the replayed week (all four classes)")
ax.legend(loc="upper right")
fig.tight_layout()
fig.savefig({png:?})
"##
    );
    // The system's python3 first: Debian's python3-matplotlib is there.
    for python in ["/usr/bin/python3", "python3"] {
        let ran = Command::new(python)
            .arg("-c")
            .arg(&script)
            .stderr(std::process::Stdio::null())
            .status();
        if ran.is_ok_and(|s| s.success()) {
            eprintln!("plot: {}", png.display());
            return;
        }
    }
    eprintln!("no plot (python3 with matplotlib is needed)");
}
