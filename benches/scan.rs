//! Benchmark program (reports figures; asserts nothing about time):
//! 1. the scan of a simulated 16-GPU host, empty and full of devices;
//! 2. the latency of CreateDevice and RemoveDevice over a private bus to a real vgpud process,
//!    next to the latency of `org.freedesktop.DBus.Peer.Ping` to the same process in the same
//!    run, so the cost of vgpud's own work can be read off the difference.
//!
//! Run: `cargo bench --bench scan` (`VGPUD_BENCH_ROUNDS` sets the rounds, `VGPUD_BENCH_DIR`
//! where the simulated tree goes; default /dev/shm).

#[path = "common/bus.rs"]
mod bus;

use std::collections::HashMap;

use bus::{start_bus, Bus};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use vgpud::discovery;
use vgpud::host::Host;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn time_scans(host: &Host, rounds: usize) -> (f64, f64, usize, usize) {
    let mut gpu_ms = Vec::new();
    let mut dev_ms = Vec::new();
    let mut gpus = 0;
    let mut devices = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        gpus = discovery::scan_gpus(host).expect("scan gpus").len();
        gpu_ms.push(ms(t.elapsed()));
        let t = Instant::now();
        devices = discovery::scan_devices(host).expect("scan devices").len();
        dev_ms.push(ms(t.elapsed()));
    }
    (median(&mut gpu_ms), median(&mut dev_ms), gpus, devices)
}

/// Fills every NVIDIA GPU with its smallest Q type, as many as the driver allows, up to
/// `limit` devices in all.
fn fill(host: &Host, limit: usize) -> usize {
    let mut made = 0;
    for (gpu, loc) in discovery::scan_gpus(host).expect("scan") {
        if gpu.driver != "nvidia" {
            continue;
        }
        let Some(ty) = gpu.types.iter().find(|t| t.name.ends_with("-1Q")) else {
            continue;
        };
        let create = loc
            .dir
            .join("mdev_supported_types")
            .join(&ty.id)
            .join("create");
        while made < limit {
            let uuid = uuid::Uuid::new_v4().to_string();
            if host.write_attr(&create, &uuid).is_err() {
                break;
            }
            made += 1;
        }
    }
    made
}

use vgpud_client::ManagerProxy;

async fn bus_latency(root: &Path, bus: &Bus, rounds: usize) {
    let started = Instant::now();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_vgpud"))
        .arg("--root")
        .arg(root)
        .arg("--simulate")
        .arg("--bus-address")
        .arg(&bus.1)
        .env("VGPUD_LOG", "warn")
        .spawn()
        .expect("vgpud");
    let conn = zbus::connection::Builder::address(bus.1.as_str())
        .build()
        .await
        .expect("connect");
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.expect("dbus");
    let name = zbus::names::BusName::try_from("org.vgpud1").expect("name");
    while !dbus.name_has_owner(name.clone()).await.unwrap_or(false) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let ready_ms = ms(started.elapsed());
    let manager = ManagerProxy::new(&conn).await.expect("proxy");
    let peer = zbus::fdo::PeerProxy::builder(&conn)
        .destination("org.vgpud1")
        .path("/org/vgpud1")
        .build()
        .await
        .expect("peer");
    let (mut ping, mut create, mut remove) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        peer.ping().await.expect("Ping");
        ping.push(ms(t.elapsed()));
        let t = Instant::now();
        let (uuid, _) = manager
            .create_device("RTX8000-1Q", HashMap::new())
            .await
            .expect("CreateDevice");
        create.push(ms(t.elapsed()));
        let t = Instant::now();
        manager
            .remove_device(&uuid, HashMap::new())
            .await
            .expect("RemoveDevice");
        remove.push(ms(t.elapsed()));
    }
    println!("start to name owned (16 GPUs, empty):   {ready_ms:8.2} ms");
    println!(
        "Peer.Ping          median {:6.3} ms  p99 {:6.3} ms  ({rounds} calls)",
        median(&mut ping),
        percentile(&mut ping, 0.99)
    );
    println!(
        "CreateDevice       median {:6.3} ms  p99 {:6.3} ms  ({:.1}x Ping)",
        median(&mut create),
        percentile(&mut create, 0.99),
        median(&mut create) / median(&mut ping)
    );
    println!(
        "RemoveDevice       median {:6.3} ms  p99 {:6.3} ms  ({:.1}x Ping)",
        median(&mut remove),
        percentile(&mut remove, 0.99),
        median(&mut remove) / median(&mut ping)
    );
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(daemon.id().to_string())
        .status();
    let _ = daemon.wait();
}

/// Time to reconcile 500 persistent devices at start: after a restart (all active) and after
/// a reboot (all to be started again from their definitions).
fn reconcile(root: &Path, rounds: usize) {
    println!("\n== reconcile 500 persistent devices at start (median of {rounds})");
    let host = Host::simulated(root);
    let engine = vgpud::engine::Engine::new(host.clone()).expect("engine");
    for _ in 0..500 {
        let req = vgpud::engine::CreateRequest {
            type_query: "RTX8000-1Q".into(),
            ..Default::default()
        };
        engine.create_device(&req).expect("create");
    }
    drop(engine);
    let (mut restart, mut reboot) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let engine = vgpud::engine::Engine::new(host.clone()).expect("engine");
        let report = engine.restore(Duration::from_secs(5));
        restart.push(ms(t.elapsed()));
        assert_eq!(engine.list_devices().len(), 500);
        assert!(report.started.is_empty());
        drop(engine);

        for dir in ["sys", "dev", "run"] {
            std::fs::remove_dir_all(root.join(dir)).expect("clear kernel state");
        }
        vgpud_sim::write_profile("large", root).expect("fresh tree");
        let t = Instant::now();
        let engine = vgpud::engine::Engine::new(host.clone()).expect("engine");
        let report = engine.restore(Duration::from_secs(5));
        reboot.push(ms(t.elapsed()));
        assert_eq!(report.started.len(), 500, "{:?}", report.failed.first());
    }
    println!(
        "after a restart (500 active, adopted):       {:8.2} ms",
        median(&mut restart)
    );
    println!(
        "after a reboot (500 started from definitions): {:8.2} ms",
        median(&mut reboot)
    );
    let engine = vgpud::engine::Engine::new(host.clone()).expect("engine");
    for d in engine.list_devices() {
        engine.remove_device(&d.uuid).expect("remove");
    }
}

/// What a PCI uevent reads (the GPU of the function it names, [`discovery::scan_gpu_family`])
/// next to the whole scan it used to read: on `host`, and on a host of its own with two L40S
/// whose 32 VFs each are on beside the same sixteen GPUs (the VF events of an `SetVfCount`
/// each read one L40S).
fn one_gpu_scans(host: &Host, rounds: usize) {
    let one = |host: &Host, address: &str| {
        let mut t_ms = Vec::new();
        let mut found = 0;
        for _ in 0..rounds {
            let t = Instant::now();
            found = discovery::scan_gpu_family(host, address)
                .expect("scan one GPU")
                .len();
            t_ms.push(ms(t.elapsed()));
        }
        (median(&mut t_ms), found)
    };
    let first = discovery::scan_gpus(host).expect("scan")[0]
        .0
        .address
        .clone();
    let (g, n) = one(host, &first);
    println!("one GPU ({first}, {n} function(s)), what its uevent reads: {g:7.3} ms");
    let dir =
        tempfile::tempdir_in(host.root().parent().expect("the tree's folder")).expect("tempdir");
    for profile in ["large", "nvidia-l40s"] {
        vgpud_sim::write_profile(profile, dir.path()).expect("profile");
    }
    let with_vfs = Host::simulated(dir.path());
    let engine = vgpud::engine::Engine::new(with_vfs.clone()).expect("engine");
    let l40s: Vec<String> = engine
        .list_gpus()
        .into_iter()
        .filter(|g| g.model.ends_with("L40S"))
        .map(|g| g.address)
        .collect();
    for pf in &l40s {
        engine.set_vf_count(pf, 32, false).expect("L40S VFs");
    }
    let (whole, _, gpus, _) = time_scans(&with_vfs, rounds);
    let (g, n) = one(&with_vfs, &l40s[0]);
    println!(
        "with {} L40S at 32 VFs each: the whole scan ({gpus} GPUs) {whole:7.3} ms; one L40S ({n} function(s)) {g:7.3} ms; ratio {:.1}",
        l40s.len(),
        whole / g
    );
}

fn main() {
    let rounds: usize = std::env::var("VGPUD_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    // sysfs lives in memory: the tree goes on tmpfs where there is one, so the figures are
    // vgpud's and the simulator's, not the disk's (VGPUD_BENCH_DIR overrides).
    let base = std::env::var("VGPUD_BENCH_DIR").unwrap_or_else(|_| {
        if Path::new("/dev/shm").is_dir() {
            "/dev/shm".into()
        } else {
            std::env::temp_dir().display().to_string()
        }
    });
    let dir = tempfile::tempdir_in(&base).expect("tempdir");
    println!("tree in {base}");
    let root = dir.path().join("host");
    vgpud_sim::write_profile("large", &root).expect("large profile");
    let host = Host::simulated(&root);

    println!("== scan of the simulated 'large' host (median of {rounds} scans)");
    let (g, d, gpus, devices) = time_scans(&host, rounds);
    println!("empty: {gpus} GPUs: GPUs+types {g:7.3} ms, devices {d:7.3} ms ({devices} devices)");
    let made = fill(&host, 500);
    let (g, d, gpus, devices) = time_scans(&host, rounds);
    println!(
        "full:  {gpus} GPUs: GPUs+types {g:7.3} ms, devices {d:7.3} ms ({devices} devices, {made} made)"
    );
    one_gpu_scans(&host, rounds);
    let t = Instant::now();
    let engine = vgpud::engine::Engine::new(host.clone()).expect("engine");
    println!(
        "engine start (scan + adopt {} devices): {:7.3} ms",
        engine.list_devices().len(),
        ms(t.elapsed())
    );
    for dev in discovery::scan_devices(&host).expect("scan") {
        let remove = host.sys("bus/mdev/devices").join(&dev.uuid).join("remove");
        host.write_attr(&remove, "1").expect("remove");
    }

    println!("\n== engine calls without the bus (median of {rounds})");
    let engine = vgpud::engine::Engine::new(host.clone()).expect("engine");
    let (mut create, mut remove) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let req = vgpud::engine::CreateRequest {
            type_query: "RTX8000-1Q".into(),
            ..Default::default()
        };
        let t = Instant::now();
        let dev = engine.create_device(&req).expect("create");
        create.push(ms(t.elapsed()));
        let t = Instant::now();
        engine.remove_device(&dev.uuid).expect("remove");
        remove.push(ms(t.elapsed()));
    }
    println!(
        "create {:6.3} ms, remove {:6.3} ms (simulated kernel included)",
        median(&mut create),
        median(&mut remove)
    );
    drop(engine);

    reconcile(&root, rounds.min(20));

    println!("\n== D-Bus latency, sequential, through a private dbus-daemon");
    let bus = start_bus(dir.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bus_latency(&root, &bus, rounds));
}
