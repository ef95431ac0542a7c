//! Elastic pools end to end (issue #25): a real vgpud on a simulated host keeps a layout's
//! spares made, hands one out at once to a create that names the pool (busctl and the client
//! library), never the same one twice in a storm, fills the pool again in the background, and
//! goes on filling it from the same layout after a restart. The demand record counts the
//! hand-outs as served warm. A GPU of spares is re-shaped for a refused create and for a
//! forecast pool with no room (not back within the hour), and a `keep_released` pool takes
//! back a released device, reset, never one a running libvirt domain holds.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::setup::{owned_by, Setup};
use vgpud_client::{Client, Options};

const TYPE: &str = "RTX6000-2Q";
const POOL: &str = "pool-vdi";

/// Waits up to 15 s for the pool to hold `n` spares, none of `not`; fails with what it holds.
async fn wait_spares(c: &Client, n: usize, not: &[String]) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = owned_by(c, POOL).await;
        if now.len() == n && now.iter().all(|u| !not.contains(u)) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "the pool holds {now:?}, not {n} new spares (handed out: {not:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// vgpud on a simulated host of `profile`, which has two NVIDIA GPUs: the client, the GPUs'
/// addresses in order and the layouts folder (made).
async fn two_gpus(profile: &str) -> (Setup, Client, Vec<String>, std::path::PathBuf) {
    let s = Setup::new(&[profile]).await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    let mut gpus = s.gpus_with_driver("nvidia").await;
    gpus.sort();
    assert_eq!(gpus.len(), 2, "{gpus:?}");
    let dir = s.host.path("etc/vgpud/layouts");
    std::fs::create_dir_all(&dir).expect("layouts dir");
    (s, c, gpus, dir)
}

/// A Turing host with the layout `vdi`: two spares of RTX6000-2Q on the first GPU, and a
/// forecast entry of RTX6000-1Q on the second (no history yet: its min, 1; a GPU in
/// equal-size mode holds one type).
async fn host() -> (Setup, Client) {
    let (s, c, gpus, dir) = two_gpus("nvidia-turing").await;
    std::fs::write(
        dir.join("vdi.toml"),
        format!(
            r#"
description = "VDI pools"
[[gpu]]
address = "{}"
devices = [{{ type = "{TYPE}", spares = 2, owner = "{POOL}" }}]
[[gpu]]
address = "{}"
devices = [{{ type = "RTX6000-1Q", owner = "pool-task", forecast = true, min = 1, max = 4 }}]
"#,
            gpus[0], gpus[1]
        ),
    )
    .expect("layout");
    (s, c)
}

#[tokio::test]
async fn a_spare_is_handed_out_at_once_never_twice_and_the_pool_is_filled_again() {
    let (s, c) = host().await;
    let steps = c.apply_layout("vdi", false).await.expect("ApplyLayout");
    assert!(steps.iter().all(|st| st.status == "done"), "{steps:?}");
    let first = owned_by(&c, POOL).await;
    assert_eq!(first.len(), 2, "{steps:?}");
    let task: Vec<_> = c
        .list_devices()
        .await
        .expect("ListDevices")
        .into_iter()
        .filter(|d| d.owner == "pool-task")
        .collect();
    assert_eq!(task.len(), 1, "the forecast entry keeps its min: {task:?}");

    // No refill has answered a hand-out yet: no lead time to size forecast pools by.
    let lead = || async {
        let (_, _, figures) = c
            .forecast(TYPE, &Options::new())
            .await
            .expect("GetForecast");
        figures.get("refill_lead_s").and_then(|v| v.as_f64())
    };
    assert_eq!(lead().await, None);

    // busctl, a client we did not write: the oldest spare, now vm-a's.
    let got = s
        .busctl_create(TYPE, &[("pool", POOL), ("owner", "vm-a")])
        .expect("CreateDevice from the pool");
    assert!(
        first.contains(&got),
        "{got} is not one of the spares {first:?}"
    );
    assert_eq!(c.device(&got).await.expect("device").owner, "vm-a");

    // The refill makes the pool whole again in the background, with new devices.
    let refilled = wait_spares(&c, 2, std::slice::from_ref(&got)).await;
    // ... and times it: from the hand-out to the refill's end, at least its 1 s settle.
    let mut timed = None;
    for _ in 0..100 {
        timed = lead().await;
        if timed.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let timed = timed.expect("GetForecast's refill_lead_s after a refill");
    assert!((1.0..30.0).contains(&timed), "refill lead {timed} s");
    let out = std::process::Command::new(common::vgpuctl::bin())
        .args(["--address", s.bus.address.as_str()])
        .args(["demand", "--forecast", TYPE, "--hours", "1"])
        .output()
        .expect("vgpuctl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains("forecast pools keep the spares for a refill's lead of "),
        "vgpuctl demand --forecast: {out:?}"
    );

    // A storm of 6 through the pool (the GPU holds 12 2Q): each caller gets its own
    // device, the two spares among them.
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                let o = Options::new()
                    .str("pool", POOL)
                    .str("owner", format!("vm-{i}"));
                c.create_device(TYPE, &o).await.map(|(u, _)| (i, u))
            })
        })
        .collect();
    let mut got: Vec<(usize, String)> = Vec::new();
    for call in calls {
        got.push(
            call.await
                .expect("join")
                .expect("every create of the storm"),
        );
    }
    let uuids: BTreeSet<&String> = got.iter().map(|(_, u)| u).collect();
    assert_eq!(uuids.len(), 6, "a device was handed out twice: {got:?}");
    for (i, u) in &got {
        assert_eq!(c.device(u).await.expect("device").owner, format!("vm-{i}"));
    }
    let warm = got.iter().filter(|(_, u)| refilled.contains(u)).count();
    assert_eq!(
        warm, 2,
        "both spares served the storm: {got:?} {refilled:?}"
    );
    let handed: Vec<String> = got.into_iter().map(|(_, u)| u).collect();
    wait_spares(&c, 2, &handed).await;

    // The demand record: 7 requests, the 3 spares served warm (more if a refill came in
    // the storm), the rest cold.
    let rows = c
        .demand(TYPE, &Options::new().u64("from", 0).u64("step", 604_800))
        .await
        .expect("GetDemand");
    let sum = rows.iter().fold((0, 0, 0), |(r, w, k), row| {
        (r + row.1, w + row.2, k + row.3)
    });
    assert_eq!(sum.0, 7, "{rows:?}");
    assert!(sum.1 >= 3 && sum.1 + sum.2 == 7, "{rows:?}");
    assert!(
        s.daemon.log_text().contains("spare handed out"),
        "{}",
        s.daemon.log_text()
    );
}

#[tokio::test]
async fn the_active_layout_keeps_filling_its_pools_after_a_restart() {
    let (mut s, c) = host().await;
    c.apply_layout("vdi", false).await.expect("ApplyLayout");
    let before = owned_by(&c, POOL).await;
    s.restart().await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    let got = s
        .busctl_create(TYPE, &[("pool", POOL), ("owner", "vm-a")])
        .expect("CreateDevice from the pool");
    assert!(before.contains(&got), "{got} {before:?}");
    wait_spares(&c, 2, &[got]).await;
}

#[tokio::test]
async fn a_pool_with_no_spare_of_the_type_makes_one_and_bad_pool_options_are_refused() {
    let (s, c) = host().await;
    // No layout applied: nothing to hand out, so the create makes a device.
    let made = s
        .busctl_create(TYPE, &[("pool", POOL), ("owner", "vm-a")])
        .expect("a cold create");
    assert_eq!(c.device(&made).await.expect("device").owner, "vm-a");
    for (options, says) in [
        (vec![("pool", "")], "pool must name a pool"),
        (vec![("pool", "pool\u{202e}x")], "U+202E"),
        (
            vec![
                ("pool", POOL),
                ("uuid", "5a1e0000-0000-4000-8000-000000000001"),
            ],
            "exclude each other",
        ),
    ] {
        let e = s.busctl_create(TYPE, &options).expect_err("refused");
        assert!(e.contains(says), "{options:?}: {e}");
    }
    let long = "p".repeat(300);
    let e = s
        .busctl_create(TYPE, &[("pool", long.as_str())])
        .expect_err("too long");
    assert!(e.contains("pool"), "{e}");
}

#[tokio::test]
async fn a_type_with_no_room_empties_a_gpu_of_spares_never_one_with_a_desktop() {
    let (s, c) = host().await;
    let mut gpus = s.gpus_with_driver("nvidia").await;
    gpus.sort();
    // Spares of 4Q on both GPUs; a GPU runs one size at a time (equal-size mode).
    let entry = |gpu: &str| {
        format!(
            "[[gpu]]\naddress = \"{gpu}\"\ndevices = [{{ type = \"RTX6000-4Q\", spares = 2, owner = \"pool-4q\" }}]\n"
        )
    };
    std::fs::write(
        s.host.path("etc/vgpud/layouts/four.toml"),
        entry(&gpus[0]) + &entry(&gpus[1]),
    )
    .expect("layout");
    let steps = c.apply_layout("four", false).await.expect("ApplyLayout");
    assert!(steps.iter().all(|st| st.status == "done"), "{steps:?}");
    // A desktop of 4Q on the first GPU: that GPU is never emptied.
    let desktop = s
        .busctl_create("RTX6000-4Q", &[("parent", &gpus[0]), ("owner", "alice-vm")])
        .expect("a desktop");
    let spares_on = |gpu: &str| {
        let gpu = gpu.to_string();
        let c = c.clone();
        async move {
            c.list_devices()
                .await
                .expect("ListDevices")
                .into_iter()
                .filter(|d| d.owner == "pool-4q" && d.gpu == gpu)
                .count()
        }
    };
    assert_eq!(
        (spares_on(&gpus[0]).await, spares_on(&gpus[1]).await),
        (2, 2)
    );

    // A 2Q login (gdbus, another client we did not write): no GPU has room for 2Q, so the
    // second GPU's spares go and the 2Q is made there.
    let out = s
        .bus
        .gdbus_call("CreateDevice", &["RTX6000-2Q", "{'owner': <'bob-vm'>}"])
        .expect("a 2Q after a re-shape");
    let made = c
        .list_devices()
        .await
        .expect("ListDevices")
        .into_iter()
        .find(|d| d.owner == "bob-vm")
        .unwrap_or_else(|| panic!("no bob-vm device: {out}"));
    assert_eq!(made.gpu, gpus[1]);
    assert_eq!(spares_on(&gpus[1]).await, 0);
    assert_eq!(
        spares_on(&gpus[0]).await,
        2,
        "the desktop's GPU keeps its spares"
    );
    assert_eq!(c.device(&desktop).await.expect("desktop").owner, "alice-vm");
    assert!(
        s.daemon.log_text().contains("re-shaped a GPU of spares"),
        "{}",
        s.daemon.log_text()
    );
    // Now no GPU holds only spares: a 1Q is refused, and nothing is removed for it.
    let before = c.list_devices().await.expect("ListDevices").len();
    let e = s
        .busctl_create("RTX6000-1Q", &[("owner", "carol-vm")])
        .expect_err("no room for 1Q");
    assert!(e.contains("no GPU can take a RTX6000-1Q"), "{e}");
    assert_eq!(c.list_devices().await.expect("ListDevices").len(), before);
}

/// The simulated kernel's `nvidia/vgpu_params` of a device.
fn vgpu_params(s: &Setup, uuid: &str) -> String {
    std::fs::read_to_string(
        s.host
            .path(&format!("sys/bus/mdev/devices/{uuid}/nvidia/vgpu_params")),
    )
    .unwrap_or_else(|e| panic!("vgpu_params of {uuid}: {e}"))
}

#[tokio::test]
async fn a_released_device_is_reset_and_kept_by_a_short_pool_never_one_a_running_vm_holds() {
    // libvirt's test driver: its domain `test` runs, no other domain exists.
    let mut s = Setup::with_args(&["nvidia-turing"], &["--libvirt-uri", "test:///default"]).await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    let mut gpus = s.gpus_with_driver("nvidia").await;
    gpus.sort();
    let dir = s.host.path("etc/vgpud/layouts");
    std::fs::create_dir_all(&dir).expect("layouts dir");
    std::fs::write(
        dir.join("keep.toml"),
        format!(
            "[[gpu]]\naddress = \"{}\"\ndevices = [{{ type = \"{TYPE}\", spares = 2, owner = \"{POOL}\", keep_released = true }}]\n",
            gpus[0]
        ),
    )
    .expect("layout");
    let steps = c.apply_layout("keep", false).await.expect("ApplyLayout");
    assert!(steps.iter().all(|st| st.status == "done"), "{steps:?}");
    // The GPU holds 12 2Q: 2 spares and 10 desktops fill it, so nothing more can be made
    // there and whatever the pool hands out later is a spare it kept.
    let desktop = |owner: &str, params: Option<&str>| {
        let mut o = vec![("parent", gpus[0].as_str()), ("owner", owner)];
        if let Some(p) = params {
            o.push(("params", p));
        }
        s.busctl_create(TYPE, &o).expect("a desktop")
    };
    let running = desktop("test", Some("frame_rate_limiter=0"));
    let released = desktop("vm-a", Some("frame_rate_limiter=0, disable_vnc=1"));
    let extra = desktop("vm-b", None);
    let fill: Vec<String> = (0..7)
        .map(|i| desktop(&format!("vm-fill-{i}"), None))
        .collect();
    assert!(vgpu_params(&s, &released).contains("disable_vnc=1"));
    // A spare handed out: the pool is one short, and its refill finds no room.
    let first = s
        .busctl_create(TYPE, &[("pool", POOL), ("owner", "vm-x")])
        .expect("a spare");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !s.daemon.log_text().contains("pool refill step") {
        assert!(Instant::now() < deadline, "no refill was tried");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = owned_by(&c, POOL).await;
    assert_eq!(left.len(), 1, "{left:?}");

    // The device of the running domain is never taken: it is removed as always.
    s.busctl_manager("RemoveDevice", &["sa{sv}", &running, "0"])
        .expect("RemoveDevice of the running domain's device");
    assert_eq!(
        owned_by(&c, POOL).await,
        left,
        "a running VM's device was taken"
    );
    assert!(
        c.device(&running).await.is_err(),
        "the running VM's device was kept somewhere"
    );

    // vm-a's device goes back to the pool: reset (its parameters cleared) and kept.
    s.busctl_manager("RemoveDevice", &["sa{sv}", &released, "0"])
        .expect("RemoveDevice");
    let kept = c
        .device(&released)
        .await
        .expect("the released device is kept");
    assert_eq!(kept.owner, POOL);
    assert_eq!(
        vgpu_params(&s, &released).trim(),
        "",
        "its vGPU parameters are cleared"
    );
    let mut pool = owned_by(&c, POOL).await;
    pool.sort();
    let mut want = vec![left[0].clone(), released.clone()];
    want.sort();
    assert_eq!(pool, want);
    let log = s.daemon.log_text();
    assert!(
        log.contains("released device reset and kept as a spare"),
        "{log}"
    );

    // The pool is whole: the next release is removed.
    s.busctl_manager("RemoveDevice", &["sa{sv}", &extra, "0"])
        .expect("RemoveDevice");
    assert!(c.device(&extra).await.is_err(), "a full pool kept {extra}");
    assert_eq!(owned_by(&c, POOL).await.len(), 2);

    // Kept across a restart like any spare (its record and definition say so).
    s.restart_with_args(&["--libvirt-uri", "test:///default"])
        .await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    assert_eq!(c.device(&released).await.expect("kept").owner, POOL);

    // Both spares are handed out warm; the GPU has no room for a cold one.
    let mut got = Vec::new();
    for owner in ["vm-y", "vm-z"] {
        got.push(
            s.busctl_create(TYPE, &[("pool", POOL), ("owner", owner)])
                .expect("a spare"),
        );
    }
    got.sort();
    assert_eq!(got, want, "the kept device is handed out");
    assert_ne!(first, released);
    let rows = c
        .demand(TYPE, &Options::new().u64("from", 0).u64("step", 604_800))
        .await
        .expect("GetDemand");
    let (warm, released_n) = rows
        .iter()
        .fold((0, 0), |(w, r), row| (w + row.2, r + row.5));
    assert_eq!(warm, 3, "three hand-outs, all warm: {rows:?}");
    assert_eq!(released_n, 3, "every release counts, kept or not: {rows:?}");

    // The pool refilled, then one short with no room: a release is kept (vgpud keeps the
    // active layout in memory from now on)...
    wait_spares(&c, 2, &got).await;
    let short = |owner: &'static str| {
        let s = &s;
        async move {
            let refills = s.daemon.log_text().matches("pool refill step").count();
            s.busctl_create(TYPE, &[("pool", POOL), ("owner", owner)])
                .expect("a spare");
            let deadline = Instant::now() + Duration::from_secs(15);
            while s.daemon.log_text().matches("pool refill step").count() == refills {
                assert!(Instant::now() < deadline, "no refill was tried");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    short("vm-w").await;
    assert_eq!(owned_by(&c, POOL).await.len(), 1);
    s.busctl_manager("RemoveDevice", &["sa{sv}", &fill[0], "0"])
        .expect("RemoveDevice");
    assert_eq!(c.device(&fill[0]).await.expect("kept").owner, POOL);
    // ...until its file changes: with keep_released off, the next release is removed.
    short("vm-v").await;
    let file = dir.join("keep.toml");
    let text = std::fs::read_to_string(&file).expect("layout");
    std::fs::write(
        &file,
        text.replace("keep_released = true", "keep_released = false"),
    )
    .expect("layout");
    s.busctl_manager("RemoveDevice", &["sa{sv}", &fill[1], "0"])
        .expect("RemoveDevice");
    assert!(
        c.device(&fill[1]).await.is_err(),
        "a pool whose layout no longer keeps released devices kept {}",
        fill[1]
    );
    assert_eq!(owned_by(&c, POOL).await.len(), 1);
}

#[tokio::test]
async fn the_forecast_re_shapes_a_gpu_of_spares_and_not_again_within_the_hour() {
    let (mut s, c) = host().await;
    let mut gpus = s.gpus_with_driver("nvidia").await;
    gpus.sort();
    // The first GPU: spares of 4Q, then a forecast pool of 2Q (no history yet: its min,
    // 1) that finds no room beside them (equal-size mode). The second: a pool to hand
    // out from, whose refills apply the whole layout.
    std::fs::write(
        s.host.path("etc/vgpud/layouts/shift.toml"),
        format!(
            r#"
[[gpu]]
address = "{}"
devices = [
  {{ type = "RTX6000-4Q", owner = "pool-4q", forecast = true, min = 2, max = 2 }},
  {{ type = "{TYPE}", owner = "pool-2q", forecast = true, min = 1, max = 1 }},
]
[[gpu]]
address = "{}"
devices = [{{ type = "RTX6000-1Q", spares = 4, owner = "pool-task" }}]
"#,
            gpus[0], gpus[1]
        ),
    )
    .expect("layout");
    let steps = c.apply_layout("shift", false).await.expect("ApplyLayout");
    assert!(
        steps
            .iter()
            .any(|st| st.status == "refused" && st.subject.contains("pool-2q")),
        "{steps:?}"
    );
    assert_eq!(owned_by(&c, "pool-4q").await.len(), 2);
    let log_count = |s: &Setup, what: &str| s.daemon.log_text().matches(what).count();

    // A hand-out wakes the refill: the forecast pool finds no room, so the GPU of 4Q
    // spares is re-shaped toward it.
    s.busctl_create("RTX6000-1Q", &[("pool", "pool-task"), ("owner", "vm-a")])
        .expect("a spare");
    s.daemon.wait_for_log("re-shaped a GPU of spares", 1).await;
    let log = s.daemon.log_text();
    assert!(
        log.contains("reason=\"forecast\"") || log.contains("reason=forecast"),
        "{log}"
    );
    assert_eq!(owned_by(&c, "pool-4q").await, Vec::<String>::new());
    let two = owned_by(&c, "pool-2q").await;
    assert_eq!(two.len(), 1, "the forecast pool's spare is made at once");

    // After a restart (the time of the re-shape is kept) the next refill finds the 4Q pool
    // short, with no room: within the hour the GPU is not re-shaped back.
    s.restart().await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    s.busctl_create("RTX6000-1Q", &[("pool", "pool-task"), ("owner", "vm-b")])
        .expect("a spare");
    s.daemon
        .wait_for_log("the GPU was re-shaped less than an hour ago", 1)
        .await;
    assert_eq!(log_count(&s, "re-shaped a GPU of spares"), 0);
    assert_eq!(owned_by(&c, "pool-2q").await, two);
    assert_eq!(owned_by(&c, "pool-4q").await, Vec::<String>::new());
}

/// The placement id of a device's vGPU (its VF's `nvidia/placement_id`).
async fn placement_of(s: &Setup, c: &Client, uuid: &str) -> String {
    let vf = c.device(uuid).await.expect("device").address;
    std::fs::read_to_string(
        s.host
            .path(&format!("sys/bus/pci/devices/{vf}/nvidia/placement_id")),
    )
    .unwrap_or_else(|e| panic!("placement of {uuid} ({vf}): {e}"))
    .trim()
    .to_string()
}

#[tokio::test]
async fn a_fragmented_mixed_size_gpu_of_spares_frees_one_run_never_one_with_a_desktop() {
    let (s, c, gpus, dir) = two_gpus("nvidia-l40s").await;
    let layout = |counts: [u32; 2]| {
        gpus.iter()
            .zip(counts)
            .map(|(gpu, n)| {
                format!(
                    "[[gpu]]\naddress = \"{gpu}\"\nvfs = 32\nheterogeneous = true\ndevices = [{{ type = \"L40S-4Q\", count = {n}, owner = \"pool-4q\" }}]\n"
                )
            })
            .collect::<String>()
    };
    // VFs on and mixed sizes, no spares yet.
    std::fs::write(dir.join("prep.toml"), layout([0, 0])).expect("layout");
    let steps = c.apply_layout("prep", false).await.expect("ApplyLayout");
    assert!(steps.iter().all(|st| st.status == "done"), "{steps:?}");
    // 4Q (6 GiB placements of the 48 GiB board) where we put them: on the first GPU a
    // desktop at 0 and spares at 12, 24 and 36; on the second spares at 0, 6, 12, 18, 24
    // and 36. Neither has a free run of 12 GiB for an 8Q, though 12 to 24 GiB are free.
    let place = |gpu: &str, owner: &str, at: u64| {
        let params = format!("vgpu-placement-id={at}");
        s.busctl_create(
            "L40S-4Q",
            &[("parent", gpu), ("owner", owner), ("params", &params)],
        )
        .unwrap_or_else(|e| panic!("a 4Q at {at} on {gpu}: {e}"))
    };
    let desktop = place(&gpus[0], "alice-vm", 0);
    let mut first: Vec<String> = [12, 24, 36]
        .iter()
        .map(|&at| place(&gpus[0], "pool-4q", at))
        .collect();
    first.push(desktop.clone());
    let second: Vec<(u64, String)> = [0, 6, 12, 18, 24, 36]
        .iter()
        .map(|&at| (at, place(&gpus[1], "pool-4q", at)))
        .collect();
    assert_eq!(placement_of(&s, &c, &second[4].1).await, "24");
    // The layout of those spares, active: applying it changes nothing.
    std::fs::write(dir.join("mixed.toml"), layout([3, 6])).expect("layout");
    let steps = c.apply_layout("mixed", false).await.expect("ApplyLayout");
    assert!(steps.is_empty(), "{steps:?}");
    let on = |gpu: &str| {
        let gpu = gpu.to_string();
        let c = c.clone();
        async move {
            let mut v: Vec<String> = c
                .list_devices()
                .await
                .expect("ListDevices")
                .into_iter()
                .filter(|d| d.gpu == gpu)
                .map(|d| d.uuid)
                .collect();
            v.sort();
            v
        }
    };
    first.sort();
    assert_eq!(on(&gpus[0]).await, first);

    // An 8Q: the second GPU's cheapest run is 24..36 (one spare; 0..12 and 12..24 hold
    // two each), so that spare alone goes and the 8Q takes its place.
    let bob = s
        .busctl_create("L40S-8Q", &[("owner", "bob-vm")])
        .expect("an 8Q after a re-shape");
    let made = c.device(&bob).await.expect("bob's device");
    assert_eq!(made.gpu, gpus[1], "{}", s.daemon.log_text());
    assert_eq!(placement_of(&s, &c, &bob).await, "24");
    let mut want: Vec<String> = second
        .iter()
        .filter(|(at, _)| *at != 24)
        .map(|(_, u)| u.clone())
        .chain([bob.clone()])
        .collect();
    want.sort();
    assert_eq!(on(&gpus[1]).await, want, "only the spare in the way goes");
    assert_eq!(
        on(&gpus[0]).await,
        first,
        "the desktop's GPU is never touched"
    );
    let log = s.daemon.log_text();
    assert!(log.contains("re-shaped a GPU of spares"), "{log}");
    assert!(log.contains("placement 24 freed"), "{log}");
    assert_eq!(log.matches("re-shaped a GPU of spares").count(), 1, "{log}");

    // A second 8Q: the first GPU has a desktop, the second now bob's 8Q; no GPU holds only
    // spares, so it is refused and nothing is removed.
    let before = c.list_devices().await.expect("ListDevices").len();
    let e = s
        .busctl_create("L40S-8Q", &[("owner", "carol-vm")])
        .expect_err("no room for another 8Q");
    assert!(e.contains("L40S-8Q"), "{e}");
    assert_eq!(c.list_devices().await.expect("ListDevices").len(), before);
    assert_eq!(on(&gpus[0]).await, first);
}

/// A time-sliced vGPU on an SR-IOV VF is kept like an mdev: its VF's `nvidia/vgpu_params`
/// cleared, its type left on the VF, its record the pool's (and persistent) across a restart.
#[tokio::test]
async fn a_released_vgpu_on_a_vf_is_reset_and_kept_by_a_short_pool() {
    const VF_TYPE: &str = "L40S-4Q";
    const VF_POOL: &str = "pool-vf";
    let mut s = Setup::with_args(&["nvidia-l40s"], &["--libvirt-uri", "test:///default"]).await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    let mut gpus = s.gpus_with_driver("nvidia").await;
    gpus.sort();
    let pf = gpus[0].clone();
    let dir = s.host.path("etc/vgpud/layouts");
    std::fs::create_dir_all(&dir).expect("layouts dir");
    std::fs::write(
        dir.join("keep.toml"),
        format!(
            "[[gpu]]\naddress = \"{pf}\"\nvfs = 32\ndevices = [{{ type = \"{VF_TYPE}\", spares = 1, owner = \"{VF_POOL}\", keep_released = true }}]\n"
        ),
    )
    .expect("layout");
    let steps = c.apply_layout("keep", false).await.expect("ApplyLayout");
    assert!(steps.iter().all(|st| st.status == "done"), "{steps:?}");
    // An L40S holds 12 4Q: the spare and 11 desktops fill it, so the pool cannot refill.
    let desktops: Vec<String> = (0..11)
        .map(|i| {
            let owner = format!("vm-{i}");
            let mut o = vec![("parent", pf.as_str()), ("owner", owner.as_str())];
            if i == 0 {
                o.push(("params", "frame_rate_limiter=0"));
            }
            s.busctl_create(VF_TYPE, &o).expect("a desktop")
        })
        .collect();
    let released = &desktops[0];
    let vf = c.device(released).await.expect("the desktop").address;
    let params = s
        .host
        .path(&format!("sys/bus/pci/devices/{vf}/nvidia/vgpu_params"));
    let read = |p: &std::path::Path| std::fs::read_to_string(p).expect("vgpu_params");
    assert!(read(&params).contains("frame_rate_limiter=0"));
    s.busctl_create(VF_TYPE, &[("pool", VF_POOL), ("owner", "vm-x")])
        .expect("the spare handed out");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !s.daemon.log_text().contains("pool refill step") {
        assert!(Instant::now() < deadline, "no refill was tried");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(owned_by(&c, VF_POOL).await.is_empty());

    s.busctl_manager("RemoveDevice", &["sa{sv}", released, "0"])
        .expect("RemoveDevice");
    let kept = c.device(released).await.expect("the released vGPU is kept");
    assert_eq!(
        (
            kept.owner.as_str(),
            kept.kind.as_str(),
            kept.address.as_str()
        ),
        (VF_POOL, "sriov-vgpu", vf.as_str())
    );
    assert!(kept.persistent && kept.autostart, "{kept:?}");
    assert_eq!(
        read(&params).trim(),
        "",
        "its VF's vGPU parameters are cleared"
    );
    assert!(
        !kept.attributes.contains_key("nvidia/vgpu_params"),
        "{:?}",
        kept.attributes
    );
    let current = s.host.path(&format!(
        "sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
    ));
    assert_ne!(
        read(&current).trim(),
        "0",
        "the VF keeps its vGPU: no release, no new create"
    );
    assert!(s
        .daemon
        .log_text()
        .contains("released device reset and kept as a spare"));

    // The pool is whole: the next release is removed, its VF freed.
    let other = &desktops[1];
    let other_vf = c.device(other).await.expect("a desktop").address;
    s.busctl_manager("RemoveDevice", &["sa{sv}", other, "0"])
        .expect("RemoveDevice");
    assert!(c.device(other).await.is_err(), "a full pool kept {other}");
    let other_current = s.host.path(&format!(
        "sys/bus/pci/devices/{other_vf}/nvidia/current_vgpu_type"
    ));
    assert_eq!(read(&other_current).trim(), "0");

    // Kept across a restart, and handed out warm.
    s.restart_with_args(&["--libvirt-uri", "test:///default"])
        .await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    assert_eq!(c.device(released).await.expect("kept").owner, VF_POOL);
    let got = s
        .busctl_create(VF_TYPE, &[("pool", VF_POOL), ("owner", "vm-y")])
        .expect("the kept vGPU handed out");
    assert_eq!(&got, released);
}

/// An Intel GVT-g vGPU is kept too: vgpud writes nothing (the kernel resets the whole vGPU
/// when the next VM's QEMU resets the device), the mdev stays as it was, and its definition
/// becomes the pool's, as mdevctl reads it.
#[tokio::test]
async fn a_released_gvtg_vgpu_is_kept_by_a_short_pool_as_it_is() {
    const GVT_TYPE: &str = "GVTg_V5_8";
    const GVT_POOL: &str = "pool-igpu";
    let s = Setup::with_args(&["intel-gvtg"], &["--libvirt-uri", "test:///default"]).await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    let igpu = "0000:00:02.0";
    let dir = s.host.path("etc/vgpud/layouts");
    std::fs::create_dir_all(&dir).expect("layouts dir");
    std::fs::write(
        dir.join("keep.toml"),
        format!(
            "[[gpu]]\naddress = \"{igpu}\"\ndevices = [{{ type = \"{GVT_TYPE}\", spares = 1, owner = \"{GVT_POOL}\", keep_released = true }}]\n"
        ),
    )
    .expect("layout");
    let steps = c.apply_layout("keep", false).await.expect("ApplyLayout");
    assert!(steps.iter().all(|st| st.status == "done"), "{steps:?}");
    // The 256 MB aperture holds two V5_8: the spare and one desktop fill it.
    let desktop = s
        .busctl_create(GVT_TYPE, &[("owner", "vm-0")])
        .expect("a desktop");
    s.busctl_create(GVT_TYPE, &[("pool", GVT_POOL), ("owner", "vm-x")])
        .expect("the spare handed out");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !s.daemon.log_text().contains("pool refill step") {
        assert!(Instant::now() < deadline, "no refill was tried");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(owned_by(&c, GVT_POOL).await.is_empty(), "the iGPU is full");

    let sysfs = s.host.path(&format!("sys/bus/mdev/devices/{desktop}"));
    let listing = |dir: &std::path::Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .expect("the mdev's directory")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    let before = listing(&sysfs);
    s.busctl_manager("RemoveDevice", &["sa{sv}", &desktop, "0"])
        .expect("RemoveDevice");
    let kept = c.device(&desktop).await.expect("the released vGPU is kept");
    assert_eq!(
        (kept.owner.as_str(), kept.kind.as_str()),
        (GVT_POOL, "mdev")
    );
    assert!(kept.active && kept.persistent && kept.autostart, "{kept:?}");
    assert_eq!(listing(&sysfs), before, "the mdev is left as it was");
    let log = s.daemon.log_text();
    assert!(
        log.contains("released device reset and kept as a spare")
            && log.contains("reset by the kernel when the next VM starts"),
        "{log}"
    );
    let definition = s.host.path(&format!("etc/mdevctl.d/{igpu}/{desktop}"));
    let text = std::fs::read_to_string(&definition).expect("its mdevctl definition");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(json["mdev_type"], "i915-GVTg_V5_8", "{text}");
    assert_eq!(json["start"], "auto", "{text}");
    // The pool is whole again: handed out warm, no create.
    let got = s
        .busctl_create(GVT_TYPE, &[("pool", GVT_POOL), ("owner", "vm-y")])
        .expect("the kept vGPU handed out");
    assert_eq!(got, desktop);
}
