//! The flood of refused calls (reports figures; asserts nothing about time): `nobody` opens
//! many connections to a bus with the system bus's policy and pipelines `CreateDevice` calls
//! with a long owner on each, all of which vgpud refuses (no polkitd: only root is let in),
//! while root calls `ListGpus` in a loop. Reported: vgpud's RSS idle, at its peak and 10 s
//! after the flood; root's `ListGpus` latency during the flood (p50, p99, max); the answers
//! nobody got by name; and the audit lines vgpud wrote.
//!
//! Run as root (the flood runs as uid 65534 through `setpriv`): `cargo bench --bench flood`.
//! `VGPUD_FLOOD_CONNECTIONS` (default 200) and `VGPUD_FLOOD_CALLS` (per connection, default
//! 128) size the flood; `VGPUD_FLOOD_OWNERS` (default `4096,200`) the owners' lengths, one
//! flood each; `VGPUD_BENCH_BASELINE=<a vgpud binary>` floods it first, in the same run, for a
//! comparison side by side. `VGPUD_FLOOD_TRACE=1` prints each of root's calls as it ends
//! (its latency, and when it ended from the flood's start).

#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod daemon;
/// The tests' private bus: its system policy lets every user connect and call vgpud.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod test_daemon;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon::{bench_host, median, ms, percentile, rss_kib, start_daemon_bin};
use test_daemon::{Policy, TestBus};
use vgpud_client::ManagerProxy;

/// The argument that makes this program the flood's client (run as nobody).
const CLIENT: &str = "--flood-client";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn manager(address: &str) -> ManagerProxy<'static> {
    let conn = zbus::connection::Builder::address(address)
        .build()
        .await
        .expect("connect");
    ManagerProxy::builder(&conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("proxy")
}

/// The flood itself, as nobody: `connections` connections, `calls` pipelined calls on each.
/// Prints the answers by error name.
fn flood_client(address: &str, connections: usize, calls: usize, owner_len: usize) {
    let rt = runtime();
    rt.block_on(async {
        let mut managers = Vec::new();
        for _ in 0..connections {
            managers.push(manager(address).await);
        }
        let owner: Arc<str> = "o".repeat(owner_len).into();
        let started = Instant::now();
        let mut all = tokio::task::JoinSet::new();
        for m in managers {
            for _ in 0..calls {
                let (m, owner) = (m.clone(), owner.clone());
                all.spawn(async move {
                    let opts = [("owner", zbus::Variant::from(&*owner))].into();
                    match m.create_device("mtty-1", opts).await {
                        Ok(_) => "ok".to_string(),
                        Err(e) => e.to_string().split(':').next().unwrap_or("?").to_string(),
                    }
                });
            }
        }
        let mut answers: BTreeMap<String, usize> = BTreeMap::new();
        while let Some(a) = all.join_next().await {
            *answers.entry(a.expect("task")).or_default() += 1;
        }
        println!(
            "flood answered in {:.1} s: {answers:?}",
            started.elapsed().as_secs_f64()
        );
    });
}

/// One flood against the vgpud `bin`; prints one block of figures.
fn flood(bin: &Path, connections: usize, calls: usize, owner_len: usize) {
    let host = bench_host("large");
    let dir = tempfile::tempdir().expect("tempdir");
    let bus = TestBus::start(Policy::System);
    let log = dir.path().join("vgpud.log");
    let (daemon, _) = start_daemon_bin(
        bin,
        &host.root,
        &bus.address,
        dir.path(),
        "warn,vgpud::audit=info",
        Some(&log),
    );
    let pid = daemon.0.id();
    std::thread::sleep(Duration::from_secs(1));
    let idle = rss_kib(pid);
    let peak = Arc::new(AtomicU64::new(idle));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let rt = runtime();
    let (latencies, client) = rt.block_on(async {
        let root = manager(&bus.address).await;
        root.list_gpus()
            .await
            .expect("root's ListGpus before the flood");
        let mut flood = Command::new("setpriv");
        flood
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(std::env::current_exe().expect("this program"))
            .args([CLIENT, &bus.address])
            .args([connections, calls, owner_len].map(|n| n.to_string()));
        let flood = tokio::task::spawn_blocking(move || flood.output().expect("setpriv"));
        let mut latencies = Vec::new();
        let trace = std::env::var_os("VGPUD_FLOOD_TRACE").is_some();
        let started = Instant::now();
        let mut refused: BTreeMap<String, usize> = BTreeMap::new();
        while !flood.is_finished() {
            let t = Instant::now();
            match root.list_gpus().await {
                Ok(_) => {
                    latencies.push(ms(t.elapsed()));
                    if trace {
                        println!(
                            "  root's ListGpus: {:.1} ms, ended at {:.2} s",
                            ms(t.elapsed()),
                            started.elapsed().as_secs_f64()
                        );
                    }
                }
                Err(e) => *refused.entry(e.to_string()).or_default() += 1,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !refused.is_empty() {
            println!("  root's ListGpus refused during the flood: {refused:?}");
        }
        (latencies, flood.await.expect("flood task"))
    });
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let peak = peak.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(10));
    let after = rss_kib(pid);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let audit = text.lines().filter(|l| l.contains("audit: ")).count();
    let out = String::from_utf8_lossy(&client.stdout);
    let answered = out
        .lines()
        .find(|l| l.starts_with("flood answered"))
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "the flood failed ({}): {}",
                client.status,
                String::from_utf8_lossy(&client.stderr)
            )
        });
    let mut l = latencies;
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "{connections} connections × {calls} CreateDevice with a {owner_len}-byte owner: {answered}"
    );
    println!(
        "  RSS: idle {:.1} MiB, peak {:.1} MiB, 10 s after {:.1} MiB (target: within 64 MiB of idle)",
        mib(idle),
        mib(peak),
        mib(after)
    );
    if l.is_empty() {
        println!("  root's ListGpus: no call finished during the flood");
    } else {
        println!(
            "  root's ListGpus during the flood: {} calls, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (target: p99 < 200 ms)",
            l.len(),
            median(&mut l),
            percentile(&mut l, 0.99),
            percentile(&mut l, 1.0)
        );
    }
    println!("  audit lines written: {audit}");
    drop(daemon);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CLIENT) {
        let n = |i: usize| args.get(i).and_then(|v| v.parse().ok()).expect("a count");
        flood_client(&args[2], n(3), n(4), n(5));
        return;
    }
    if !nix::unistd::Uid::effective().is_root() {
        println!("flood: needs root (the flood runs as nobody through setpriv); nothing measured");
        return;
    }
    let connections = env_or("VGPUD_FLOOD_CONNECTIONS", 200);
    let calls = env_or("VGPUD_FLOOD_CALLS", 128);
    let owners: Vec<usize> = std::env::var("VGPUD_FLOOD_OWNERS")
        .unwrap_or_else(|_| "4096,200".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let mut bins = Vec::new();
    if let Some(baseline) = std::env::var_os("VGPUD_BENCH_BASELINE") {
        bins.push(("baseline", PathBuf::from(baseline)));
    }
    bins.push(("this build", PathBuf::from(env!("CARGO_BIN_EXE_vgpud"))));
    for (what, bin) in bins {
        println!("== {what}: {}", bin.display());
        for &owner in &owners {
            flood(&bin, connections, calls, owner);
        }
    }
}
