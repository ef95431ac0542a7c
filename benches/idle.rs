//! What a full host costs vgpud while nobody calls, and how fast reads answer (reports
//! figures; asserts nothing about time). On a simulated host of sixteen Quadro RTX 8000
//! (the `large` profile: sysfs on tmpfs, vgpud's state on disk), for each vgpud binary and
//! each number of persistent devices (made by storms of at most 384 concurrent creates of
//! RTX8000-1Q; past what the GPUs hold, earlier storms' devices are stopped, their
//! definitions kept):
//!
//! - vgpud's CPU over `VGPUD_IDLE_SECS` (default 60) with no callers, as % of a core
//!   (`/proc/PID/stat` utime + stime);
//! - `ListDevices`: p50 and p95 of 100 calls through the client's proxy;
//! - `vgpuctl devices` as a whole process: median of 10 runs;
//! - a device made by another tool (a write to its type's `create` through the simulated
//!   host, from this process): time until vgpud's `InterfacesAdded` or `DeviceCreated`
//!   arrives, median of 20, 5 s at most each (more: `>5 s`);
//!
//! and once per binary, on a host of its own: ten storms of 384 concurrent persistent
//! creates of RTX8000-2Q (each removed again): the first storm's creates/s, the tenth's over
//! the first's, and vgpud's CPU per create (process CPU during the storm ÷ creates, from
//! `vgpud_process_cpu_seconds_total` in the same scrapes as the parts, else `/proc`; the
//! simulated kernel runs in vgpud's process and is included), and of that the parts vgpud
//! counts apart with each thread's CPU clock (`vgpud_PART_cpu_seconds_total` from its metrics
//! endpoint, read before and after each storm; the read after includes one rendering of the
//! host's metrics): the simulated kernel's and NVML's, the rest being vgpud's own, and of
//! that persistence (the journal, definitions and records), the engine's own work in the
//! calls, applying uevents, and what no part counts (the bus, the async runtime, publishing
//! signals); and vgpud's CPU per `Peer.Ping` in a storm of as many concurrent pings before
//! each storm (its threads' `schedstat`), the bus's floor under any call.
//!
//! Run: `cargo bench --bench idle`. `VGPUD_BENCH_BEFORE=<a vgpud binary>` (and
//! `VGPUD_BENCH_BEFORE_CTL=<its vgpuctl>`; without it this build's vgpuctl serves both) are
//! measured first, in the same run. `VGPUD_IDLE_SIZES` (default `0,384,1536`),
//! `VGPUD_IDLE_SECS`, `VGPUD_IDLE_STORMS` (default 10) size a quicker run (an empty
//! `VGPUD_IDLE_SIZES=` measures the storms only):
//! `VGPUD_IDLE_SIZES=0,24 VGPUD_IDLE_SECS=5 VGPUD_IDLE_STORMS=2 cargo bench --bench idle`.
//! The table goes to stdout and to `target/bench/idle.md`.

#[path = "common/bus.rs"]
mod bus;
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod daemon;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use vgpud_client::ManagerProxy;

use bus::start_bus;
use daemon::{bench_host, cpu_ms, median, ms, percentile, start_daemon_args};

/// The most creates in one storm: 24 RTX8000-2Q on each of the 16 GPUs.
const STORM: usize = 384;
/// Connections a storm's calls are spread over.
const CLIENTS: usize = 20;
/// The type the sizes are made of: 32 fit on a GPU, so 128 places stay free at 384.
const FILL_TYPE: &str = "RTX8000-1Q";
/// The storm section's type: 384 fill the host.
const STORM_TYPE: &str = "RTX8000-2Q";
/// How long a device made by another tool may take to appear on the bus.
const APPEAR_LIMIT: Duration = Duration::from_secs(5);

/// A vgpud and the vgpuctl measured with it.
struct Binaries {
    label: String,
    vgpud: PathBuf,
    vgpuctl: PathBuf,
    nvml: PathBuf,
}

/// A vgpud on a fresh `large` host and a bus of its own; all gone when dropped (in this
/// order: the daemon first).
struct Running {
    vgpud: daemon::Daemon,
    bus: bus::Bus,
    _dir: tempfile::TempDir,
    host: daemon::BenchHost,
    /// Its metrics endpoint (`--metrics-listen`).
    metrics: std::net::SocketAddr,
}

/// The parts of its CPU time vgpud counts apart (`vgpud_PART_cpu_seconds_total`), in the
/// order of the storm table's columns, and last the whole process's (read in the same scrape
/// as the parts, so that the two agree).
const PARTS: [&str; 6] = [
    "simulated_kernel",
    "nvml",
    "persistence",
    "engine_call",
    "uevent",
    "process",
];

/// The CPU seconds vgpud counted in each of [`PARTS`], from its metrics (`None` for a part
/// the vgpud does not count); `None` when the metrics cannot be read.
fn cpu_apart(metrics: std::net::SocketAddr) -> Option<Vec<Option<f64>>> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(metrics).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let value = |name: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<f64>()
                .ok()
        })
    };
    Some(
        PARTS
            .iter()
            .map(|part| value(&format!("vgpud_{part}_cpu_seconds_total")))
            .collect(),
    )
}

impl Binaries {
    /// Starts this vgpud on a fresh host and bus, and waits for READY=1.
    fn start(&self) -> Running {
        let host = bench_host("large");
        let dir = tempfile::tempdir().expect("tempdir");
        let bus = start_bus(dir.path());
        // A free port for the metrics endpoint.
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let listen = metrics.to_string();
        let args = [
            OsStr::new("--nvml-library"),
            self.nvml.as_os_str(),
            OsStr::new("--metrics-listen"),
            OsStr::new(listen.as_str()),
        ];
        let (vgpud, _) = start_daemon_args(
            &self.vgpud,
            &host.root,
            &bus.1,
            dir.path(),
            "warn",
            None,
            &args,
        );
        Running {
            vgpud,
            bus,
            _dir: dir,
            host,
            metrics,
        }
    }
}

/// One row of the table: one binary on one host size.
struct Row {
    devices: usize,
    idle_cpu_pct: f64,
    list_p50: f64,
    list_p95: f64,
    vgpuctl_ms: f64,
    /// ms until the device made by another tool was on the bus; `None`: not within the limit.
    appear: Vec<Option<f64>>,
}

/// The storm section of one binary.
struct Storms {
    rates: Vec<f64>,
    cpu_ms_per_create: Vec<f64>,
    /// Of that, ms in each of [`PARTS`], per storm (empty: the binary does not count it).
    parts_ms_per_create: [Vec<f64>; PARTS.len()],
    /// vgpud's CPU per `Peer.Ping` in as many concurrent pings, before each storm.
    ping_cpu_ms: Vec<f64>,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sizes() -> Vec<usize> {
    let text = std::env::var("VGPUD_IDLE_SIZES").unwrap_or_else(|_| "0,384,1536".into());
    // Empty (`VGPUD_IDLE_SIZES=`): the storms only.
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("VGPUD_IDLE_SIZES: {s:?} is not a number"))
        })
        .collect()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Builds a workspace package in the bench's own profile (`cargo bench` of this package does
/// not build the others) and returns the file `name` it left next to vgpud.
fn built(package: &str, name: &str) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("run cargo");
    assert!(status.success(), "cargo build -p {package} failed");
    let path = Path::new(env!("CARGO_BIN_EXE_vgpud")).with_file_name(name);
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// The `--nvml-library` every vgpud gets, the same for all: `VGPUD_IDLE_NVML` (`none`, or a
/// library), else this build's fake NVML. A simulated vgpud left to itself loads the fake
/// only when it lies next to its binary, so a binary copied elsewhere would run without.
fn nvml_library() -> PathBuf {
    std::env::var_os("VGPUD_IDLE_NVML")
        .map(PathBuf::from)
        .unwrap_or_else(|| built("vgpud-fake-nvml", "libnvidia_ml.so"))
}

async fn connect(address: &str) -> zbus::Connection {
    zbus::connection::Builder::address(address)
        .build()
        .await
        .expect("connect to the bench's bus")
}

async fn managers(address: &str, n: usize) -> Vec<ManagerProxy<'static>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let conn = connect(address).await;
        out.push(
            ManagerProxy::builder(&conn)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
                .expect("manager proxy"),
        );
    }
    out
}

/// `n` concurrent persistent creates of `ty`, spread over the proxies: the UUIDs made and the
/// wall time in ms. Any refusal is a failure of the bench's arithmetic.
async fn create_storm(
    managers: &[ManagerProxy<'static>],
    ty: &str,
    n: usize,
) -> (Vec<String>, f64) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let m = managers[i % managers.len()].clone();
            let ty = ty.to_string();
            tokio::spawn(async move { m.create_device(&ty, HashMap::new()).await })
        })
        .collect();
    let mut made = Vec::with_capacity(n);
    for t in tasks {
        let (uuid, _) = t.await.expect("task").expect("CreateDevice in a storm");
        made.push(uuid);
    }
    (made, ms(started.elapsed()))
}

/// The CPU time of a process's threads in ms, to the nanosecond (the first field of each
/// thread's `schedstat`; a thread gone meanwhile is not counted).
fn threads_cpu_ms(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .sum::<f64>()
        / 1e6
}

/// `n` concurrent `Peer.Ping` calls to vgpud spread over the proxies' connections, as the
/// storm spreads its creates: the bus's floor under a call that does nothing.
async fn ping_storm(managers: &[ManagerProxy<'static>], n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let conn = managers[i % managers.len()].inner().connection().clone();
            tokio::spawn(async move {
                conn.call_method(
                    Some("org.vgpud1"),
                    "/org/vgpud1",
                    Some("org.freedesktop.DBus.Peer"),
                    "Ping",
                    &(),
                )
                .await
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task").expect("Peer.Ping");
    }
}

/// Calls `RemoveDevice` (`stop`: `StopDevice`, the definition stays) on every UUID at once.
async fn each_device(managers: &[ManagerProxy<'static>], uuids: &[String], stop: bool) {
    let tasks: Vec<_> = uuids
        .iter()
        .enumerate()
        .map(|(i, uuid)| {
            let m = managers[i % managers.len()].clone();
            let uuid = uuid.clone();
            tokio::spawn(async move {
                if stop {
                    m.stop_device(&uuid, HashMap::new()).await
                } else {
                    m.remove_device(&uuid, HashMap::new()).await
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task").expect("StopDevice or RemoveDevice");
    }
}

/// Makes `size` persistent devices of [`FILL_TYPE`]: storms of at most [`STORM`]; when more
/// are to come, a storm's devices are stopped (defined, not running) to make room.
async fn fill(managers: &[ManagerProxy<'static>], size: usize) {
    let mut made = 0;
    while made < size {
        let n = (size - made).min(STORM);
        let (uuids, _) = create_storm(managers, FILL_TYPE, n).await;
        made += n;
        if made < size {
            each_device(managers, &uuids, true).await;
        }
    }
}

/// The GPUs' free places for [`FILL_TYPE`]: (GPU, type id), one entry per place.
async fn free_places(m: &ManagerProxy<'static>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (gpu, id, name, _, _, available) in m.list_types().await.expect("ListTypes") {
        if name.ends_with(FILL_TYPE) {
            for _ in 0..available {
                out.push((gpu.clone(), id.clone()));
            }
        }
    }
    out
}

/// Devices made by another tool, one at a time: each written to its type's `create` through
/// the simulated host; the ms until vgpud announced it (`InterfacesAdded` of its object or
/// `DeviceCreated`), `None` past [`APPEAR_LIMIT`].
async fn made_elsewhere(root: &Path, address: &str, count: usize) -> Vec<Option<f64>> {
    let conn = connect(address).await;
    let manager = ManagerProxy::builder(&conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("manager proxy");
    let places = free_places(&manager).await;
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.vgpud1")
        .path("/org/vgpud1")
        .build()
        .expect("a match rule of vgpud's signals");
    let mut signals =
        zbus::MessageStream::for_match_rule(rule, &conn, std::num::NonZeroUsize::new(4096))
            .await
            .expect("signal subscription");
    let host = vgpud::host::Host::simulated(root);
    let mut out = Vec::with_capacity(count);
    for (gpu, ty) in places.into_iter().take(count) {
        let uuid = uuid::Uuid::new_v4().to_string();
        let path = vgpud_client::paths::device_path(&uuid);
        let create = host.sys(&format!(
            "class/mdev_bus/{gpu}/mdev_supported_types/{ty}/create"
        ));
        let started = Instant::now();
        host.write_attr(&create, &uuid)
            .unwrap_or_else(|e| panic!("another tool's create on {gpu}: {e}"));
        let deadline = started + APPEAR_LIMIT;
        let mut seen = None;
        while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline.into(), signals.next()).await
        {
            let announced = match msg.header().member().map(|m| m.as_str()) {
                Some("InterfacesAdded") => msg
                    .body()
                    .deserialize::<(
                        zbus::OwnedObjectPath,
                        HashMap<String, HashMap<String, zbus::OwnedVariant>>,
                    )>()
                    .is_ok_and(|(p, _)| p == path),
                Some("DeviceCreated") => msg
                    .body()
                    .deserialize::<(String, zbus::OwnedObjectPath)>()
                    .is_ok_and(|(u, _)| u == uuid),
                _ => false,
            };
            if announced {
                seen = Some(ms(started.elapsed()));
                break;
            }
        }
        out.push(seen);
    }
    out
}

/// One binary on a fresh host of `size` devices: the row's figures.
fn measure_size(rt: &tokio::runtime::Runtime, bins: &Binaries, size: usize, idle: Duration) -> Row {
    let r = bins.start();
    let (address, pid) = (r.bus.1.as_str(), r.vgpud.0.id());
    rt.block_on(async {
        let managers = managers(address, CLIENTS).await;
        fill(&managers, size).await;
        // Whatever the storms left to publish or write is done before the quiet starts.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu0 = cpu_ms(pid);
        tokio::time::sleep(idle).await;
        let idle_cpu_pct = (cpu_ms(pid) - cpu0) / ms(idle) * 100.0;

        let m = &managers[0];
        let mut list = Vec::with_capacity(100);
        for _ in 0..100 {
            let t = Instant::now();
            let rows = m.list_devices().await.expect("ListDevices");
            list.push(ms(t.elapsed()));
            assert!(rows.len() >= size, "ListDevices: {} of {size}", rows.len());
        }
        let mut ctl = Vec::with_capacity(10);
        for _ in 0..10 {
            let t = Instant::now();
            let status = Command::new(&bins.vgpuctl)
                .args(["--address", address, "devices"])
                .stdout(Stdio::null())
                .status()
                .expect("run vgpuctl");
            ctl.push(ms(t.elapsed()));
            assert!(status.success(), "vgpuctl devices failed");
        }
        let appear = made_elsewhere(&r.host.root, address, 20).await;
        Row {
            devices: size,
            idle_cpu_pct,
            list_p50: percentile(&mut list, 0.5),
            list_p95: percentile(&mut list, 0.95),
            vgpuctl_ms: median(&mut ctl),
            appear,
        }
    })
}

/// One binary's storms on a host of its own: each 384 persistent creates, then removed.
fn measure_storms(rt: &tokio::runtime::Runtime, bins: &Binaries, rounds: usize) -> Storms {
    let r = bins.start();
    let (address, pid) = (r.bus.1.as_str(), r.vgpud.0.id());
    rt.block_on(async {
        let managers = managers(address, CLIENTS).await;
        let mut storms = Storms {
            rates: Vec::new(),
            cpu_ms_per_create: Vec::new(),
            parts_ms_per_create: Default::default(),
            ping_cpu_ms: Vec::new(),
        };
        for _ in 0..rounds {
            let before = threads_cpu_ms(pid);
            ping_storm(&managers, STORM).await;
            storms
                .ping_cpu_ms
                .push((threads_cpu_ms(pid) - before) / STORM as f64);
            let apart0 = cpu_apart(r.metrics);
            let cpu0 = cpu_ms(pid);
            let (made, wall) = create_storm(&managers, STORM_TYPE, STORM).await;
            let cpu = cpu_ms(pid) - cpu0;
            let n = made.len() as f64;
            storms.rates.push(n / (wall / 1000.0));
            storms.cpu_ms_per_create.push(cpu / n);
            if let (Some(a), Some(b)) = (apart0, cpu_apart(r.metrics)) {
                for (i, (a, b)) in a.iter().zip(&b).enumerate() {
                    if let (Some(a), Some(b)) = (a, b) {
                        storms.parts_ms_per_create[i].push((b - a) * 1000.0 / n);
                    }
                }
            }
            each_device(&managers, &made, false).await;
        }
        storms
    })
}

/// The median of what appeared in time, or `>5 s` when most did not.
fn appear_text(appear: &[Option<f64>]) -> String {
    if appear.is_empty() {
        return "no room".into();
    }
    let mut v: Vec<f64> = appear.iter().map(|a| a.unwrap_or(f64::INFINITY)).collect();
    let late = appear.iter().filter(|a| a.is_none()).count();
    let m = median(&mut v);
    let text = if m.is_finite() {
        format!("{m:.1}")
    } else {
        format!(">{} s", APPEAR_LIMIT.as_secs())
    };
    if late > 0 {
        format!(
            "{text} ({late} of {} >{} s)",
            appear.len(),
            APPEAR_LIMIT.as_secs()
        )
    } else {
        text
    }
}

fn main() {
    let sizes = sizes();
    let idle = Duration::from_secs(env_or("VGPUD_IDLE_SECS", 60));
    let rounds: usize = env_or("VGPUD_IDLE_STORMS", 10).max(1);
    let this_ctl = built("vgpuctl", "vgpuctl");
    let nvml = nvml_library();
    let mut all = Vec::new();
    if let Some(before) = std::env::var_os("VGPUD_BENCH_BEFORE") {
        all.push(Binaries {
            label: "before".into(),
            vgpud: PathBuf::from(before),
            vgpuctl: std::env::var_os("VGPUD_BENCH_BEFORE_CTL")
                .map(PathBuf::from)
                .unwrap_or_else(|| this_ctl.clone()),
            nvml: nvml.clone(),
        });
    }
    all.push(Binaries {
        label: "this build".into(),
        vgpud: PathBuf::from(env!("CARGO_BIN_EXE_vgpud")),
        vgpuctl: this_ctl,
        nvml: nvml.clone(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");

    let mut out = String::new();
    out.push_str(&format!(
        "# idle bench: 16 simulated Quadro RTX 8000 (sysfs on tmpfs, state on disk), {} build\n\n",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    ));
    for b in &all {
        out.push_str(&format!(
            "- {}: vgpud {}, vgpuctl {}\n",
            b.label,
            b.vgpud.display(),
            b.vgpuctl.display()
        ));
    }
    out.push_str(&format!("- NVML for both: {}\n", nvml.display()));
    out.push_str(&format!(
        "\n| vgpud | devices | CPU idle {} s (% of a core) | ListDevices p50 (ms) | ListDevices p95 (ms) | `vgpuctl devices` (ms, median of 10) | another tool's create → on the bus (ms, median of 20) |\n|---|---|---|---|---|---|---|\n",
        idle.as_secs()
    ));
    for b in &all {
        for &size in &sizes {
            eprintln!("{}: {size} devices…", b.label);
            let r = measure_size(&rt, b, size, idle);
            out.push_str(&format!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {} |\n",
                b.label,
                r.devices,
                r.idle_cpu_pct,
                r.list_p50,
                r.list_p95,
                r.vgpuctl_ms,
                appear_text(&r.appear)
            ));
        }
    }
    out.push_str(&format!(
        "\n| vgpud | storm of {STORM} persistent creates (creates/s, first) | storm {rounds} ÷ storm 1 | vgpud's process CPU per create (ms, median of {rounds}) | of which the simulated kernel | of which NVML | vgpud's own | own: persistence | own: engine | own: uevents | own: the bus, the runtime, publishing | a `Peer.Ping`'s CPU in as many concurrent pings (the bus's floor per call) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    ));
    for b in &all {
        eprintln!("{}: {rounds} storms…", b.label);
        let mut s = measure_storms(&rt, b, rounds);
        let first = s.rates[0];
        let last = s.rates[s.rates.len() - 1];
        // The process's CPU from the same scrapes as the parts where vgpud counts it (a
        // scrape's rendering of the host is then in both), else from /proc.
        let total = if s.parts_ms_per_create[5].is_empty() {
            median(&mut s.cpu_ms_per_create)
        } else {
            median(&mut s.parts_ms_per_create[5])
        };
        // Each part's median over the storms; the rest is the process's less every part.
        let parts: Vec<Option<f64>> = s
            .parts_ms_per_create
            .iter_mut()
            .map(|v| (!v.is_empty()).then(|| median(v)))
            .collect();
        let cell = |v: Option<f64>| v.map_or("not counted".to_string(), |v| format!("{v:.3}"));
        let own = match (parts[0], parts[1]) {
            (Some(k), Some(n)) => Some(total - k - n),
            _ => None,
        };
        let rest = match (own, parts[2], parts[3], parts[4]) {
            (Some(own), Some(p), Some(e), Some(u)) => Some(own - p - e - u),
            _ => None,
        };
        let apart = [parts[0], parts[1], own, parts[2], parts[3], parts[4], rest]
            .map(cell)
            .join(" | ");
        out.push_str(&format!(
            "| {} | {first:.0} | {:.2} | {total:.3} | {apart} | {:.3} |\n",
            b.label,
            last / first,
            median(&mut s.ping_cpu_ms),
        ));
    }
    print!("{out}");
    let dir = target_dir().join("bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    std::fs::write(dir.join("idle.md"), &out).expect("target/bench/idle.md");
    println!("\n(written to {})", dir.join("idle.md").display());
}
