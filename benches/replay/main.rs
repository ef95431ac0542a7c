//! The week replayed (issue #25): a trace of logins (`week.rs`, a seeded generator and its
//! CSV format, or any trace file) replayed with accelerated time against a real vgpud on a
//! simulated host of sixteen Quadro RTX 8000 and two H200 with MIG, under three policies,
//! beside a fourth computed in hindsight (`hindsight.rs`):
//!
//! 1. `static`: a hand-sized layout: each Quadro GPU given to one class, keeping a fixed
//!    number of spares, sized once for the busiest hour of the history;
//! 2. `demand`: no layout, every login a `CreateDevice` made then (vgpud today without pools);
//! 3. `elastic`: the same GPUs' pools sized every simulated hour from the forecast, with
//!    vgpud's own model (`vgpud::demand::forecast`) and sizing rule
//!    (`vgpud::layout::pools::wanted_spares`) run on the trace's hours;
//! 4. `hindsight`: knows every login in advance (offline; no daemon).
//!
//! It reports per policy the login wait p50/p99 (a `CreateDevice` call's wall time), the
//! refusals, the GPU-hours held by idle spares and by the broker's orphans and forgotten
//! devices, the logins served from a spare, the re-shapes, and the forecast's error; the
//! table goes to stdout and `target/bench/replay.md`, the forecast against the actual to
//! `target/bench/replay-forecast.csv` and, when python3 has matplotlib, `forecast-week.png`.
//!
//! Run: `cargo bench --bench replay`. `VGPUD_REPLAY_TRACE` (a CSV trace; else a generated
//! one, `VGPUD_REPLAY_SEED`, default 25, two weeks), `VGPUD_REPLAY_SPEED` (wall seconds per
//! simulated hour, default 1), `VGPUD_REPLAY_HOURS` (hours replayed from the start of the
//! trace's last week, default 168), `VGPUD_REPLAY_POLICIES` (default
//! `static,demand,elastic`; empty: the hindsight and the forecast only). Weeks before the last are history: the forecast learns them
//! and the static layout is sized from them.

mod hindsight;
mod week;

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

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vgpud::demand::forecast::{accuracy, Forecaster};
use vgpud::layout::pools::wanted_spares;
use vgpud_client::{Client, ManagerProxy, Options};

use daemon::{bench_host, ms, percentile, start_daemon_args};
use week::{class_of, Class, Event, Kind, CLASSES, HOUR, WEEK};

/// The Quadro GPUs each class's pool lives on (16 in all; the AI class uses the H200s).
const SPLIT: [usize; 3] = [6, 7, 3];
/// MIG slices for the AI class: two H200, seven 1g.18gb each.
const MIG_SLOTS: usize = 14;
/// The Unix hour of a Monday 00:00 (1970-01-05), so the forecast's hours of the week line
/// up with the trace's.
const MONDAY_HOUR: u64 = 96;
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
    made: usize,
    refused: usize,
    errors: usize,
    spare_gpu_hours: f64,
    broker_gpu_hours: f64,
    warm: usize,
    reshapes: usize,
    wall_s: f64,
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
        out[i] = wanted_spares(peak, 0.0, SPLIT[i], 0, c.max_per_gpu);
    }
    out
}

fn layout_text(quadro: &[String], counts: [u32; 3]) -> String {
    let mut s = String::from("description = \"replay bench pools\"\n");
    let mut gpus = quadro.iter();
    for (i, c) in CLASSES[..3].iter().enumerate() {
        for gpu in gpus.by_ref().take(SPLIT[i]) {
            let _ = write!(
                s,
                "\n[[gpu]]\naddress = \"{gpu}\"\ndevices = [{{ type = \"{}\", count = {}, owner = \"pool-{}\" }}]\n",
                c.type_name, counts[i], c.name
            );
        }
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
        let (daemon, _) = start_daemon_args(
            Path::new(env!("CARGO_BIN_EXE_vgpud")),
            &host.root,
            &bus.1,
            dir.path(),
            "info",
            Some(&log),
            &["--nvml-library".as_ref(), nvml],
        );
        let mut m = rt.block_on(self.drive(policy, &bus.1, &host.root));
        drop(daemon);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        m.reshapes = text
            .matches("re-shaped a GPU of spares toward a type that had no room")
            .count();
        m.warm = text.matches("spare handed out").count();
        m
    }

    async fn drive(&self, policy: Policy, address: &str, root: &Path) -> Measured {
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
        let apply = |counts: [u32; 3]| {
            let client = &client;
            let text = layout_text(&quadro, counts);
            let path = layouts.join("replay.toml");
            async move {
                std::fs::write(&path, text).expect("layout");
                client
                    .apply_layout("replay", false)
                    .await
                    .expect("ApplyLayout");
            }
        };
        let sized = |h: usize| -> [u32; 3] {
            let mut out = [0; 3];
            if let Some(row) = self.forecast.get(h) {
                for (i, c) in CLASSES[..3].iter().enumerate() {
                    out[i] = wanted_spares(row[i].0, row[i].1, SPLIT[i], 0, c.max_per_gpu);
                }
            }
            out
        };
        match policy {
            Policy::Static => apply(self.static_spares).await,
            Policy::Elastic => apply(sized(0)).await,
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
                    let share: f64 = devices
                        .iter()
                        .filter_map(|d| pool_class(&d.owner))
                        .map(|c| 1.0 / f64::from(c.max_per_gpu))
                        .sum();
                    if let Ok(mut o) = out.lock() {
                        o.spare_gpu_hours += share * SAMPLE_H;
                    }
                }
            })
        };
        // The elastic pools sized at each simulated hour.
        let sizer = (policy == Policy::Elastic).then(|| {
            let counts: Vec<[u32; 3]> = (0..self.hours as usize).map(sized).collect();
            let text: Vec<String> = counts.iter().map(|c| layout_text(&quadro, *c)).collect();
            let client = client.clone();
            let path = layouts.join("replay.toml");
            let step = self.wall(HOUR as f64);
            tokio::spawn(async move {
                for (h, t) in text.into_iter().enumerate().skip(1) {
                    tokio::time::sleep_until(start + step * h as u32).await;
                    std::fs::write(&path, t).expect("layout");
                    if let Err(e) = client.apply_layout("replay", false).await {
                        eprintln!("hour {h}: ApplyLayout: {e}");
                    }
                }
            })
        });

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
            let mut opts = Options::new().str("owner", e.user.clone());
            if policy != Policy::Demand && !class.type_name.starts_with("H200") {
                opts = opts.str("pool", format!("pool-{}", class.name));
            }
            let used_until = (at + e.duration as f64).min(end_s);
            let release = start + self.wall(used_until);
            let (kind, out) = (e.kind, out.clone());
            let type_name = e.type_name.clone();
            let share = 1.0 / f64::from(class.max_per_gpu);
            let pending = pending.clone();
            pending.fetch_add(1, Ordering::SeqCst);
            tasks.push(tokio::spawn(async move {
                let t = Instant::now();
                let r = m.create_device(&type_name, opts.to_opts()).await;
                let wait = ms(t.elapsed());
                let uuid = {
                    let mut o = out.lock().expect("measured");
                    pending.fetch_sub(1, Ordering::SeqCst);
                    o.waits_ms.push(wait);
                    match r {
                        Ok((uuid, _)) => {
                            o.made += 1;
                            let idle_from = match kind {
                                Kind::Login => end_s,
                                Kind::Orphan => at,
                                Kind::Forgotten => used_until,
                            };
                            o.broker_gpu_hours += share * (end_s - idle_from) / HOUR as f64;
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
                if kind == Kind::Login && used_until < end_s {
                    tokio::time::sleep_until(release).await;
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
        let mut m = std::mem::take(&mut *out.lock().expect("measured"));
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
    let replay = Replay {
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
    let h = hindsight::hindsight(&replay.events, from, hours, 16, MIG_SLOTS, 2_000_000);

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
    out.push_str("| policy | requests | login wait p50 / p99 (ms) | refused | from a spare | spares idle (GPU-h) | orphans + forgotten (GPU-h) | re-shapes | forecast error |\n|---|---|---|---|---|---|---|---|---|\n");
    for (p, m) in &mut rows {
        let n = m.waits_ms.len();
        let (p50, p99) = if n == 0 {
            (0.0, 0.0)
        } else {
            (
                percentile(&mut m.waits_ms, 0.5),
                percentile(&mut m.waits_ms, 0.99),
            )
        };
        let _ = writeln!(
            out,
            "| {} | {n} | {p50:.1} / {p99:.1} | {}{} | {} | {:.1} | {:.1} | {} | {} |",
            p.name(),
            m.refused,
            if m.errors > 0 {
                format!(" (+{} errors)", m.errors)
            } else {
                String::new()
            },
            m.warm,
            m.spare_gpu_hours,
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
        "| hindsight | {} | hand-out only (made ahead) | {}{} | all | 0 | {:.1} | - | 0 (knows the trace) |",
        h.requests,
        if h.exact { "" } else { "≥ " },
        h.refused,
        h.broker_idle_gpu_hours,
    );
    print!("{out}");
    std::fs::write(out_dir.join("replay.md"), &out).expect("target/bench/replay.md");
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
