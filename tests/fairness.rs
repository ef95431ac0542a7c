//! Fairness you can see: the daemon's own accounting of a GPU's room, under a lenient
//! simulated kernel that never refuses an over-commit itself (`lenient-capacity`, see the
//! `simulate` module doc), and the order in which concurrent creates of one type are served
//! (a slow simulated driver, `create-delay-ms`, makes requests overlap in a known way).
//!
//! Rooms are the test's own arithmetic from hardware facts, not the daemon's answers: the
//! `nvidia-turing` profile is two Quadro RTX 6000 boards of 24 GB (24576 MiB), and an
//! `RTX6000-<n>Q` vGPU has n GiB of framebuffer (hardware.md §1.3: `RTX6000-1Q` is 1024M with
//! max_instance 24), so a GPU has room for 24 / n of them in equal-size mode.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::proxy::{opts, ManagerProxy};
use common::setup::Setup;

const TURING: &[&str] = &["nvidia-turing"];
/// Framebuffer of one Quadro RTX 6000, in GiB.
const RTX6000_GIB: u32 = 24;
/// What a daemon's refusal never says: that is the kernel's (`ENOSPC` from the create).
const KERNEL_REFUSAL: &str = "the driver refused";

/// Room for `RTX6000-<n>Q` on one empty GPU: the board's framebuffer over the type's.
fn room(ty: &str) -> usize {
    let gib: u32 = ty
        .strip_prefix("RTX6000-")
        .and_then(|p| p.strip_suffix('Q'))
        .and_then(|n| n.parse().ok())
        .expect("an RTX6000-<n>Q type");
    (RTX6000_GIB / gib) as usize
}

/// Turns a simulator test option on: `name` in the simulator's state directory.
fn sim_option(s: &Setup, name: &str, value: &str) {
    let dir = s.host.path("run/vgpud-simulator");
    std::fs::create_dir_all(&dir).expect("state dir");
    std::fs::write(dir.join(name), value).expect("write option");
}

/// mdevs the simulated kernel holds on `gpu`, counted in its sysfs tree.
fn mdevs_on(root: &Path, gpu: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(root.join("sys/bus/mdev/devices")) else {
        return 0;
    };
    entries
        .filter_map(|e| std::fs::canonicalize(e.ok()?.path()).ok())
        .filter(|dev| {
            dev.parent()
                .and_then(Path::file_name)
                .is_some_and(|p| p == gpu)
        })
        .count()
}

/// The error name and message of a failed call.
fn refusal(e: &zbus::Error) -> (String, String) {
    match e {
        zbus::Error::MethodError(name, msg, _) => {
            (name.to_string(), msg.clone().unwrap_or_default())
        }
        other => (format!("not a method error: {other}"), String::new()),
    }
}

async fn nvidia_gpus(s: &Setup) -> Vec<String> {
    let mut gpus = s.gpus_with_driver("nvidia").await;
    gpus.sort();
    assert_eq!(gpus.len(), 2, "nvidia-turing has two RTX 6000: {gpus:?}");
    gpus
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_on_a_lenient_kernel_makes_no_more_devices_than_the_gpu_has_room_for() {
    let s = Setup::new(TURING).await;
    sim_option(&s, "lenient-capacity", "");
    let gpu = nvidia_gpus(&s).await[0].clone();
    let ty = "RTX6000-2Q";
    let room = room(ty);
    let requests = 4 * room;
    let mut conns = Vec::new();
    for _ in 0..6 {
        conns.push(s.bus.connect().await);
    }
    let mut calls = Vec::new();
    for i in 0..requests {
        let conn = conns[i % conns.len()].clone();
        let gpu = gpu.clone();
        calls.push(tokio::spawn(async move {
            let m = ManagerProxy::new(&conn).await.expect("proxy");
            m.create_device(ty, opts(&[("owner", "storm"), ("parent", &gpu)]))
                .await
                .map(|(uuid, _)| uuid)
        }));
    }
    let mut made = 0;
    let mut refusals = Vec::new();
    for c in calls {
        match c.await.expect("task") {
            Ok(_) => made += 1,
            Err(e) => refusals.push(refusal(&e)),
        }
    }
    let held = mdevs_on(s.host.path("").as_path(), &gpu);
    assert_eq!(
        held, room,
        "{gpu} holds {held} {ty} in the kernel; it has room for {room} (24 GiB / 2 GiB)"
    );
    assert_eq!(made, room, "{made} creates succeeded for {room} places");
    for (name, msg) in &refusals {
        assert_eq!(name, "org.vgpud1.Error.NoCapacity", "{msg}");
        assert!(
            !msg.contains(KERNEL_REFUSAL),
            "the lenient kernel refuses nothing, so the daemon must: {msg}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_lenient_kernel_the_daemon_itself_refuses_a_full_gpu() {
    let s = Setup::new(TURING).await;
    sim_option(&s, "lenient-capacity", "");
    let gpu = nvidia_gpus(&s).await[0].clone();
    let m = s.manager().await;
    let ty = "RTX6000-12Q";
    for i in 0..room(ty) {
        m.create_device(ty, opts(&[("parent", &gpu)]))
            .await
            .unwrap_or_else(|e| panic!("create {i} of {}: {e}", room(ty)));
    }
    let e = m
        .create_device(ty, opts(&[("parent", &gpu)]))
        .await
        .expect_err("a full GPU takes no more");
    let (name, msg) = refusal(&e);
    assert_eq!(name, "org.vgpud1.Error.NoCapacity", "{msg}");
    assert!(
        msg.contains(&gpu) && !msg.contains(KERNEL_REFUSAL),
        "the daemon's own refusal, naming the GPU: {msg}"
    );
    assert_eq!(mdevs_on(&s.host.path(""), &gpu), room(ty));
}

/// Creates of `ty`, request `i` sent `i × gap` after the first (the arrival stamp is `i`):
/// per request, its outcome and when its reply came.
async fn spaced_creates(
    s: &Setup,
    ty: &'static str,
    count: usize,
    gap: Duration,
) -> Vec<(Result<String, (String, String)>, Duration)> {
    let conn = s.bus.connect().await;
    let start = Instant::now();
    let mut calls = Vec::new();
    for i in 0..count {
        let conn = conn.clone();
        calls.push(tokio::spawn(async move {
            let m = ManagerProxy::new(&conn).await.expect("proxy");
            tokio::time::sleep_until((start + gap * i as u32).into()).await;
            let r = m
                .create_device(ty, opts(&[("owner", "fifo")]))
                .await
                .map(|(uuid, _)| uuid)
                .map_err(|e| refusal(&e));
            (r, start.elapsed())
        }));
    }
    let mut out = Vec::new();
    for c in calls {
        out.push(c.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_of_one_type_are_granted_in_arrival_order_and_go_on_to_the_next_gpu_at_once() {
    let s = Setup::new(TURING).await;
    sim_option(&s, "lenient-capacity", "");
    // Each create takes 800 ms with its GPU's lock held; requests arrive 60 ms apart, so all
    // of them are waiting while the first devices are made.
    sim_option(&s, "create-delay-ms", "800");
    let gpus = nvidia_gpus(&s).await;
    let ty = "RTX6000-12Q";
    let per_gpu = room(ty);
    let total = per_gpu * gpus.len();
    let results = spaced_creates(&s, ty, total + 3, Duration::from_millis(60)).await;
    let outcome: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(i, (r, t))| match r {
            Ok(_) => format!("#{i} made at {t:?}"),
            Err((name, msg)) => format!("#{i} {name} at {t:?}: {msg}"),
        })
        .collect();
    for (i, (r, _)) in results.iter().enumerate() {
        if i < total {
            assert!(
                r.is_ok(),
                "arrival #{i} is among the first {total} (room {per_gpu} on each of 2 GPUs) and must be served:\n{}",
                outcome.join("\n")
            );
        } else {
            let (name, msg) = r.as_ref().err().unwrap_or_else(|| {
                panic!(
                    "arrival #{i} came after the room ran out:\n{}",
                    outcome.join("\n")
                )
            });
            assert_eq!(name, "org.vgpud1.Error.NoCapacity", "{msg}");
        }
    }
    for gpu in &gpus {
        assert_eq!(mdevs_on(&s.host.path(""), gpu), per_gpu, "{gpu} is full");
    }
    // Arrival #per_gpu finds the first GPU's room all promised: it goes to the second GPU at
    // once, and is served there while the first still makes arrival #(per_gpu − 1)'s device
    // (one create after the other, 800 ms each).
    let (next, last_on_first) = (&results[per_gpu].1, &results[per_gpu - 1].1);
    assert!(
        next < last_on_first,
        "arrival #{per_gpu} waited behind the full first GPU:\n{}",
        outcome.join("\n")
    );
}
