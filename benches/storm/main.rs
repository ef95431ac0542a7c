//! The login-storm benchmark (reports figures; asserts nothing about time). In one run:
//! 1. storm: 400 concurrent CreateDevice (persistent) from 20 clients on a simulated host of
//!    16 GPUs (room for 384 RTX8000-2Q, so 16 are refused), then concurrent RemoveDevice of
//!    all that were made: throughput, p50/p99 latency and vgpud's CPU time per create, for
//!    ten consecutive storms in one daemon (the first, the last, the median);
//! 2. the bus's own limit: `org.freedesktop.DBus.Peer.Ping` to vgpud with the same concurrency,
//!    before each storm;
//! 3. baseline: the real mdevctl 1.4, one process per device, on the same kind of tree;
//! 4. packing: a seeded day of 10,000 VDI requests replayed with each policy and first-fit,
//!    against an upper bound on what any placement could accept;
//! 5. footprint: start to READY, idle RSS, and scan time as the host grows 1×, 4×, 16×.
//!
//! Run: `cargo bench --bench storm`. `VGPUD_BENCH_ROUNDS` (default 10) sets how many storms
//! one daemon serves; `VGPUD_BENCH_BASELINE=<a vgpud binary>` runs the same storms on it first,
//! in the same run, for a comparison side by side. The simulated sysfs lives on tmpfs (`/dev/shm`), as the real one lives
//! in memory; vgpud's durable files (`etc`, `var`) go to disk (`VGPUD_BENCH_DISK`, default the
//! system's temporary directory), so the storm pays for real syncs; the file system of each is
//! reported.

mod packing;
mod trace;

#[path = "../common/bus.rs"]
mod bus;
#[path = "../common/daemon.rs"]
#[allow(dead_code)]
mod daemon;

use std::collections::HashMap;

use bus::{start_bus, Bus};
use daemon::{
    bench_host, cpu_ms, median, ms, percentile, rss_kib, start_daemon_bin, BenchHost, Daemon,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vgpud::host::Host;
use vgpud_client::ManagerProxy;

const STORM: usize = 400;
const CLIENTS: usize = 20;
/// 24 per GPU: 384 fit on the 16 GPUs.
const TYPE: &str = "RTX8000-2Q";
/// Mean session of the packing trace: a working day's peaks overload the 16 GPUs by about
/// a sixth, so placement decides what is refused.
const MEAN_SESSION_HOURS: f64 = 0.2;

/// The vgpud the storms run instead of this build's (the baseline's, for a while).
static DAEMON: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// The vgpud the storm runs: this build's, unless a baseline is being measured.
fn daemon_bin() -> PathBuf {
    DAEMON
        .lock()
        .ok()
        .and_then(|d| d.clone())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vgpud")))
}

fn set_daemon(path: Option<PathBuf>) {
    if let Ok(mut d) = DAEMON.lock() {
        *d = path;
    }
}

/// Starts the vgpud the storms run and waits for READY=1: (daemon, ms to READY).
fn start_daemon(root: &Path, bus: &Bus, dir: &Path) -> (Daemon, f64) {
    start_daemon_bin(&daemon_bin(), root, &bus.1, dir, "warn", None)
}

struct Storm {
    wall_ms: f64,
    latencies: Vec<f64>,
    made: Vec<String>,
    refused: usize,
}

/// One proxy per connection, made once, as a client keeps it.
async fn managers(conns: &[zbus::Connection]) -> Vec<ManagerProxy<'static>> {
    let mut out = Vec::new();
    for conn in conns {
        out.push(
            ManagerProxy::builder(conn)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
                .expect("proxy"),
        );
    }
    out
}

async fn create_storm(managers: &[ManagerProxy<'static>]) -> Storm {
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(STORM);
    for i in 0..STORM {
        let m = managers[i % managers.len()].clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = m.create_device(TYPE, HashMap::new()).await;
            (ms(t.elapsed()), r.map(|(u, _)| u))
        }));
    }
    let mut storm = Storm {
        wall_ms: 0.0,
        latencies: Vec::new(),
        made: Vec::new(),
        refused: 0,
    };
    for t in tasks {
        let (lat, r) = t.await.expect("task");
        storm.latencies.push(lat);
        match r {
            Ok(uuid) => storm.made.push(uuid),
            Err(zbus::Error::MethodError(name, _, _))
                if name.as_str() == "org.vgpud1.Error.NoCapacity" =>
            {
                storm.refused += 1
            }
            Err(e) => panic!("unexpected error in the storm: {e}"),
        }
    }
    storm.wall_ms = ms(started.elapsed());
    storm
}

/// Runs `call` once per item at once, the calls spread over the connections; the wall time
/// and each call's latency (what `call` measures).
async fn timed<C, T, F, Fut>(conns: &[C], items: Vec<T>, call: F) -> Storm
where
    C: Clone,
    T: Send + 'static,
    F: Fn(C, T) -> Fut,
    Fut: std::future::Future<Output = f64> + Send + 'static,
{
    let started = Instant::now();
    let tasks: Vec<_> = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| tokio::spawn(call(conns[i % conns.len()].clone(), item)))
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.push(t.await.expect("task"));
    }
    Storm {
        wall_ms: ms(started.elapsed()),
        latencies,
        made: Vec::new(),
        refused: 0,
    }
}

async fn remove_storm(managers: &[ManagerProxy<'static>], uuids: Vec<String>) -> Storm {
    timed(managers, uuids, |m, uuid| async move {
        let t = Instant::now();
        m.remove_device(&uuid, HashMap::new())
            .await
            .expect("RemoveDevice");
        ms(t.elapsed())
    })
    .await
}

async fn ping_storm(peers: &[zbus::fdo::PeerProxy<'static>]) -> Storm {
    timed(peers, vec![(); STORM], |peer, ()| async move {
        let t = Instant::now();
        peer.ping().await.expect("Ping");
        ms(t.elapsed())
    })
    .await
}

fn per_s(calls: usize, wall_ms: f64) -> f64 {
    calls as f64 / (wall_ms / 1000.0)
}

/// The file system a path lives on, by name.
fn fs_name(path: &Path) -> String {
    let Ok(st) = nix::sys::statfs::statfs(path) else {
        return "unknown".into();
    };
    let t = st.filesystem_type().0;
    match t {
        0xef53 => "ext4".into(),
        0x0102_1994 => "tmpfs".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683e => "btrfs".into(),
        0x794c_7630 => "overlayfs".into(),
        other => format!("type {other:#x}"),
    }
}

/// What one storm measured.
struct Round {
    ping: f64,
    ping50: f64,
    ping99: f64,
    create: f64,
    create50: f64,
    create99: f64,
    starvation: f64,
    remove: f64,
    remove50: f64,
    remove99: f64,
    made: usize,
    refused: usize,
    cpu_ms_per_create: f64,
    cpu_ms_per_remove: f64,
    ms_per_device: f64,
}

/// Sections 1, 2 and the READY/RSS part of 5.
fn bus_sections(rounds: usize) -> (f64, f64, f64) {
    let host = bench_host("large");
    println!(
        "== 1, 2: {rounds} storms of {STORM} concurrent calls from {CLIENTS} clients, 16 GPUs, one daemon; sysfs on {}, vgpud's files on {}",
        fs_name(&host.root.join("sys")),
        fs_name(&host.root.join("var/"))
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let bus = start_bus(dir.path());
    let (daemon, ready_ms) = start_daemon(&host.root, &bus, dir.path());
    std::thread::sleep(Duration::from_millis(500));
    let pid = daemon.0.id();
    let idle_rss = rss_kib(pid);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut all: Vec<Round> = Vec::new();
    rt.block_on(async {
        let mut conns = Vec::new();
        for _ in 0..CLIENTS {
            conns.push(
                zbus::connection::Builder::address(bus.1.as_str())
                    .build()
                    .await
                    .expect("connect"),
            );
        }
        let managers = managers(&conns).await;
        let mut peers = Vec::new();
        for conn in &conns {
            peers.push(
                zbus::fdo::PeerProxy::builder(conn)
                    .destination("org.vgpud1")
                    .path("/org/vgpud1")
                    .cache_properties(zbus::proxy::CacheProperties::No)
                    .build()
                    .await
                    .expect("peer"),
            );
        }
        for round in 0..rounds {
            let mut ping = ping_storm(&peers).await;
            let cpu0 = cpu_ms(pid);
            let mut create = create_storm(&managers).await;
            let cpu1 = cpu_ms(pid);
            let made = std::mem::take(&mut create.made);
            let n = made.len();
            let mut remove = remove_storm(&managers, made).await;
            let cpu2 = cpu_ms(pid);
            let tp = per_s(STORM, create.wall_ms);
            let c99 = percentile(&mut create.latencies, 0.99);
            let r = Round {
                ping: per_s(STORM, ping.wall_ms),
                ping50: median(&mut ping.latencies),
                ping99: percentile(&mut ping.latencies, 0.99),
                create: tp,
                create50: median(&mut create.latencies),
                create99: c99,
                starvation: c99 / (1.5 * STORM as f64 / tp * 1000.0),
                remove: per_s(n, remove.wall_ms),
                remove50: median(&mut remove.latencies),
                remove99: percentile(&mut remove.latencies, 0.99),
                made: n,
                refused: create.refused,
                cpu_ms_per_create: (cpu1 - cpu0) / STORM as f64,
                cpu_ms_per_remove: (cpu2 - cpu1) / n.max(1) as f64,
                ms_per_device: create.wall_ms / n.max(1) as f64,
            };
            println!(
                "storm {:2}: Ping {:7.0}/s  CreateDevice {:6.0}/s (p50 {:6.1} ms, p99 {:6.1} ms, {} made, {} refused, vgpud CPU {:.3} ms per call)  RemoveDevice {:6.0}/s (vgpud CPU {:.3} ms per call)",
                round + 1,
                r.ping,
                r.create,
                r.create50,
                r.create99,
                r.made,
                r.refused,
                r.cpu_ms_per_create,
                r.remove,
                r.cpu_ms_per_remove
            );
            all.push(r);
        }
    });
    let med = |f: fn(&Round) -> f64| median(&mut all.iter().map(f).collect::<Vec<_>>());
    let (first, last) = (&all[0], &all[all.len() - 1]);
    println!("medians of {} storms:", all.len());
    println!(
        "Peer.Ping       {:8.0} calls/s   p50 {:7.2} ms  p99 {:7.2} ms",
        med(|r| r.ping),
        med(|r| r.ping50),
        med(|r| r.ping99)
    );
    println!(
        "CreateDevice    {:8.0} calls/s   p50 {:7.2} ms  p99 {:7.2} ms  ({} made, {} refused: NoCapacity)  = {:.2} × Ping throughput (target ≥ 0.25)",
        med(|r| r.create),
        med(|r| r.create50),
        med(|r| r.create99),
        first.made,
        first.refused,
        med(|r| r.create / r.ping)
    );
    println!(
        "RemoveDevice    {:8.0} calls/s   p50 {:7.2} ms  p99 {:7.2} ms  = {:.2} × Ping throughput",
        med(|r| r.remove),
        med(|r| r.remove50),
        med(|r| r.remove99),
        med(|r| r.remove / r.ping)
    );
    println!(
        "vgpud CPU per persistent create (simulated kernel included): {:.3} ms (target ≤ 0.5); per remove {:.3} ms",
        med(|r| r.cpu_ms_per_create),
        med(|r| r.cpu_ms_per_remove)
    );
    println!(
        "no slowdown: storm {} creates at {:.0}/s, storm 1 at {:.0}/s: last ÷ first = {:.2} (target ≥ 0.9)",
        all.len(),
        last.create,
        first.create,
        last.create / first.create
    );
    println!(
        "starvation check: create p99 / (1.5 × requests ÷ throughput) = {:.2} (target ≤ 1)",
        med(|r| r.starvation)
    );
    drop(daemon);
    (ready_ms, idle_rss as f64 / 1024.0, med(|r| r.ms_per_device))
}

fn mdevctl_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("VGPUD_MDEVCTL") {
        return Some(PathBuf::from(p));
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/tools/bin/mdevctl");
    if local.exists() {
        return Some(local);
    }
    Command::new("mdevctl")
        .arg("--version")
        .output()
        .ok()
        .map(|_| PathBuf::from("mdevctl"))
}

/// Section 3: per device, `mdevctl define --auto` + `mdevctl start` to make it, `mdevctl
/// undefine` (its stop has nothing to stop on a tree without a kernel) to remove it.
fn mdevctl_section(vgpud_ms_per_device: f64) {
    println!("\n== 3: the real mdevctl, one process per call, same kind of tree (100 devices)");
    let Some(bin) = mdevctl_bin() else {
        println!("mdevctl not found (tools/install-deps --mdevctl builds it): skipped");
        return;
    };
    let host = bench_host("large");
    let parent = "0000:1a:00.0";
    let run = |args: &[&str]| {
        let out = Command::new(&bin)
            .env("MDEVCTL_ENV_ROOT", &host.root)
            .args(args)
            .output()
            .expect("mdevctl");
        assert!(
            out.status.success(),
            "mdevctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let n = 100;
    let uuids: Vec<String> = (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let t = Instant::now();
    for u in &uuids {
        run(&[
            "define",
            "-u",
            u,
            "-p",
            parent,
            "-t",
            "nvidia-264",
            "--auto",
        ]);
        run(&["start", "-u", u]);
    }
    let create = ms(t.elapsed()) / n as f64;
    let t = Instant::now();
    for u in &uuids {
        run(&["undefine", "-u", u]);
    }
    let remove = ms(t.elapsed()) / n as f64;
    println!("mdevctl: create {create:6.2} ms per device (define + start), remove {remove:6.2} ms (undefine)");
    println!(
        "vgpud in the storm: {vgpud_ms_per_device:6.3} ms per device made (storm time ÷ devices) = {:.1} × faster than mdevctl's create (target ≥ 30)",
        create / vgpud_ms_per_device
    );
}

/// Hides all but the first `keep` GPUs of a `large` tree (their bus and class links), so
/// discovery sees a host of that size.
fn keep_gpus(root: &Path, keep: usize) {
    let host = Host::new(root);
    let gpus = vgpud::discovery::scan_gpus(&host).expect("scan");
    for (gpu, _) in gpus.iter().skip(keep) {
        let _ = std::fs::remove_file(root.join("sys/bus/pci/devices").join(&gpu.address));
        let _ = std::fs::remove_file(root.join("sys/class/mdev_bus").join(&gpu.address));
    }
}

fn footprint_section(ready_ms: f64, idle_rss_mib: f64) {
    println!("\n== 5: footprint");
    let mut readies = vec![ready_ms];
    let host = bench_host("large");
    let dir = tempfile::tempdir().expect("tempdir");
    let bus = start_bus(dir.path());
    for _ in 0..4 {
        let (d, r) = start_daemon(&host.root, &bus, dir.path());
        readies.push(r);
        drop(d);
    }
    println!(
        "start to READY (16 GPUs, empty): median {:6.2} ms of {} starts (target < 50)",
        median(&mut readies),
        readies.len()
    );
    println!("idle RSS: {idle_rss_mib:6.2} MiB (target < 10)");
    let mut per_gpu = Vec::new();
    for keep in [1usize, 4, 16] {
        let h = bench_host("large");
        keep_gpus(&h.root, keep);
        let host = Host::new(&h.root);
        let mut t = Vec::new();
        for _ in 0..50 {
            let s = Instant::now();
            let n = vgpud::discovery::scan_gpus(&host).expect("scan").len();
            assert_eq!(n, keep);
            t.push(ms(s.elapsed()));
        }
        let m = median(&mut t);
        per_gpu.push(m / keep as f64);
        println!(
            "scan of {keep:2} GPUs ({:2}×): {m:7.3} ms  ({:6.3} ms per GPU)",
            keep,
            m / keep as f64
        );
    }
}

fn main() {
    let rounds: usize = std::env::var("VGPUD_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    // VGPUD_BENCH_ONLY=storm|packing runs one part (while working on it).
    let only = std::env::var("VGPUD_BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "storm" {
        // VGPUD_BENCH_BASELINE=<another vgpud binary>: its storms first, in the same run.
        if let Some(baseline) = std::env::var_os("VGPUD_BENCH_BASELINE") {
            println!("== baseline: {}", Path::new(&baseline).display());
            set_daemon(Some(PathBuf::from(&baseline)));
            bus_sections(rounds);
            set_daemon(None);
            println!("== this build");
        }
        let (ready_ms, idle_rss, vgpud_ms_per_call) = bus_sections(rounds);
        if only.is_empty() {
            mdevctl_section(vgpud_ms_per_call);
            packing::packing_section();
            footprint_section(ready_ms, idle_rss);
        }
    } else if only == "packing" {
        packing::packing_section();
    }
}
