//! Declarative layouts end to end: a real dbus-daemon, a real vgpud on a simulated host
//! (two L40S and two H200, the fake libnvidia-ml for MIG and the scheduler), layout files in
//! etc/vgpud/layouts, driven through the client library and busctl.

mod common;

use common::daemon::Daemon;
use common::nvml::fake_library;
use common::setup::{owned_by, Setup};
use vgpud_client::{Client, LayoutStep, Options};

const HOST: &[&str] = &["nvidia-l40s", "nvidia-h200"];

async fn host() -> (Setup, Client) {
    let lib = fake_library().to_string_lossy().into_owned();
    let s = Setup::with_args(HOST, &["--nvml-library", &lib]).await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    (s, c)
}

async fn restart(s: &mut Setup) -> Client {
    if s.daemon.is_running() {
        s.daemon.stop();
    }
    let lib = fake_library().to_string_lossy().into_owned();
    s.daemon = Daemon::start_args(&s.bus, &s.host, &["--nvml-library", &lib]).await;
    Client::from_connection(s.conn.clone())
        .await
        .expect("client")
}

fn write_layout(s: &Setup, name: &str, text: &str) {
    let dir = s.host.path("etc/vgpud/layouts");
    std::fs::create_dir_all(&dir).expect("layouts dir");
    std::fs::write(dir.join(format!("{name}.toml")), text).expect("write layout");
}

/// Addresses of the GPUs whose model contains `model`, in order.
async fn gpus_of(c: &Client, model: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = c
        .list_gpus()
        .await
        .expect("ListGpus")
        .into_iter()
        .filter(|g| g.model.contains(model))
        .map(|g| (g.address, g.model))
        .collect();
    v.sort();
    v
}

fn summary(steps: &[LayoutStep]) -> Vec<String> {
    steps
        .iter()
        .map(|s| format!("{} {} {} {}", s.status, s.gpu, s.action, s.subject))
        .collect()
}

/// The day layout of this host: every L40S with VFs and a pool of 3, the first H200 in MIG
/// with two 3g instances, the second with VFs, the equal-share scheduler and a pool of 2.
async fn day_layout(s: &Setup, c: &Client) -> (Vec<(String, String)>, Vec<(String, String)>) {
    let l40s = gpus_of(c, "L40S").await;
    let h200 = gpus_of(c, "H200").await;
    assert_eq!((l40s.len(), h200.len()), (2, 2), "{l40s:?} {h200:?}");
    write_layout(
        s,
        "day",
        &format!(
            r#"
description = "day shift"
[[gpu]]
model = "{l40s_model}"
vfs = 32
devices = [{{ type = "L40S-4Q", count = 3, owner = "pool-day" }}]
[[gpu]]
address = "{mig}"
mig = true
vfs = 32
gpu_instances = ["3g.71gb", "3g.71gb"]
[[gpu]]
address = "{sched}"
vfs = 32
scheduler = {{ policy = "equal-share", timeslice_ms = 3 }}
devices = [{{ type = "H200X-4C", count = 2, owner = "pool-h200" }}]
"#,
            l40s_model = l40s[0].1.to_uppercase(),
            mig = h200[0].0,
            sched = h200[1].0,
        ),
    );
    (l40s, h200)
}

#[tokio::test]
async fn a_layout_is_planned_then_applied_and_applying_it_again_changes_nothing() {
    let (s, c) = host().await;
    let (l40s, h200) = day_layout(&s, &c).await;
    assert_eq!(
        c.list_layouts().await.expect("ListLayouts"),
        [vgpud_client::LayoutSummary {
            name: "day".into(),
            description: "day shift".into()
        }]
    );

    // A dry run through busctl (a client this project did not write) plans, changes nothing.
    let dry = s
        .bus
        .busctl_call(
            "/org/vgpud1/layouts",
            "org.vgpud1.Layouts",
            "ApplyLayout",
            &["sa{sv}", "day", "1", "dry_run", "b", "true"],
        )
        .expect("ApplyLayout dry run");
    let rows = dry["data"][0].as_array().expect("a(sssss)").clone();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r[0] == "planned"), "{rows:?}");
    assert!(c.list_devices().await.expect("ListDevices").is_empty());
    let diff = c.diff_layout("day").await.expect("DiffLayout");
    assert!(
        diff.iter()
            .any(|d| d.gpu == l40s[0].0 && d.item == "vfs" && d.wanted == "32" && d.actual == "0"),
        "{diff:?}"
    );

    let steps = c.apply_layout("day", false).await.expect("ApplyLayout");
    let got = summary(&steps);
    assert!(steps.iter().all(|s| s.status == "done"), "{got:#?}");
    // The plan's order per GPU: MIG mode, VFs, instances (largest first), scheduler, devices.
    let (mig, sched) = (&h200[0].0, &h200[1].0);
    let of = |gpu: &str| -> Vec<String> {
        steps
            .iter()
            .filter(|s| s.gpu == gpu)
            .map(|s| format!("{} {}", s.action, s.subject))
            .collect()
    };
    assert_eq!(
        of(mig),
        [
            "set-mig-mode on",
            "set-vf-count 32",
            "create-gpu-instance 3g.71gb",
            "create-gpu-instance 3g.71gb"
        ]
    );
    assert_eq!(
        of(sched),
        [
            "set-vf-count 32",
            "set-scheduler equal-share timeslice_ms=3",
            "create-device H200X-4C owner=pool-h200",
            "create-device H200X-4C owner=pool-h200"
        ]
    );
    assert_eq!(of(&l40s[1].0).len(), 4, "{got:#?}");

    // The host is as the layout says, seen through the API.
    assert_eq!(owned_by(&c, "pool-day").await.len(), 6);
    assert_eq!(owned_by(&c, "pool-h200").await.len(), 2);
    for (gpu, _) in l40s.iter().chain(&h200) {
        assert_eq!(c.gpu(gpu).await.expect("Gpu").num_vfs, 32, "{gpu}");
    }
    let g = c.gpu(mig).await.expect("Gpu");
    assert!(g.mig_current);
    let profiles: Vec<&str> = g.gpu_instances.iter().map(|i| i.profile.as_str()).collect();
    assert_eq!(profiles, ["3g.71gb", "3g.71gb"]);
    let sch = c.gpu(sched).await.expect("Gpu").scheduler;
    assert_eq!(
        sch.get("policy").and_then(|v| v.as_str()),
        Some("equal-share")
    );
    // Pool devices are persistent, and mdevctl-style autostart, like any CreateDevice.
    let first = owned_by(&c, "pool-h200").await;
    let d = c.device(&first[0]).await.expect("Device");
    assert!(d.active && d.persistent && d.autostart, "{d:?}");

    assert_eq!(c.diff_layout("day").await.expect("DiffLayout"), []);
    let before = owned_by(&c, "pool-day").await;
    let again = c
        .apply_layout("day", false)
        .await
        .expect("ApplyLayout again");
    assert_eq!(again, [], "applied twice, the second makes no change");
    assert_eq!(owned_by(&c, "pool-day").await, before);
}

#[tokio::test]
async fn a_layout_that_conflicts_with_a_running_device_leaves_it_untouched_and_names_it() {
    let (s, c) = host().await;
    let l40s = gpus_of(&c, "L40S").await;
    let gpu = &l40s[0].0;
    c.set_vf_count(gpu, 32, &Options::new()).await.expect("VFs");
    let (alice, _) = c
        .create_device(
            "L40S-4Q",
            &Options::new()
                .str("parent", gpu.as_str())
                .str("owner", "alice-vm"),
        )
        .await
        .expect("alice's desktop");
    write_layout(
        &s,
        "pool",
        &format!(
            "[[gpu]]\naddress = \"{gpu}\"\ndevices = [{{ type = \"L40S-4Q\", count = 2, owner = \"pool\" }}]\n"
        ),
    );
    let made = c.apply_layout("pool", false).await.expect("ApplyLayout");
    assert_eq!(made.len(), 2, "{made:?}");
    // The night layout: VFs off, mixed sizes, no pool.
    write_layout(
        &s,
        "night",
        &format!(
            "[[gpu]]\naddress = \"{gpu}\"\nvfs = 0\nheterogeneous = true\ndevices = [{{ type = \"L40S-4Q\", count = 0, owner = \"pool\" }}]\n"
        ),
    );
    let plan = c.apply_layout("night", true).await.expect("dry run");
    let shape: Vec<String> = plan
        .iter()
        .map(|s| format!("{} {} {}", s.status, s.gpu, s.action))
        .collect();
    assert_eq!(
        shape,
        [
            format!("planned {gpu} remove-device"),
            format!("planned {gpu} remove-device"),
            format!("refused {gpu} set-vf-count"),
            format!("refused {gpu} set-heterogeneous-mode"),
        ]
    );
    assert_eq!(
        c.list_devices().await.expect("ListDevices").len(),
        3,
        "a dry run changes nothing"
    );
    let steps = c.apply_layout("night", false).await.expect("ApplyLayout");
    let got = summary(&steps);
    let removed: Vec<&LayoutStep> = steps
        .iter()
        .filter(|s| s.action == "remove-device")
        .collect();
    assert_eq!(removed.len(), 2, "{got:#?}");
    assert!(removed.iter().all(|s| s.status == "done"), "{got:#?}");
    let mut removed_uuids: Vec<String> = removed.iter().map(|s| s.subject.clone()).collect();
    let mut made_uuids: Vec<String> = made.iter().map(|s| s.detail.clone()).collect();
    removed_uuids.sort();
    made_uuids.sort();
    assert_eq!(
        removed_uuids, made_uuids,
        "only the pool's devices are removed"
    );
    for action in ["set-vf-count", "set-heterogeneous-mode"] {
        let step = steps
            .iter()
            .find(|s| s.action == action)
            .unwrap_or_else(|| panic!("{action} in {got:#?}"));
        assert_eq!(step.status, "refused", "{got:#?}");
        assert!(
            step.detail.contains(&alice) && step.detail.contains("alice-vm"),
            "the refusal names the device in the way: {step:?}"
        );
    }
    // Alice's desktop is untouched: active, on its VF, the VFs still on.
    let d = c.device(&alice).await.expect("alice's device");
    assert!(d.active, "{d:?}");
    assert_eq!(d.owner, "alice-vm");
    assert_eq!(c.gpu(gpu).await.expect("Gpu").num_vfs, 32);
    assert!(!c.gpu(gpu).await.expect("Gpu").heterogeneous_mode);
}

#[tokio::test]
async fn bad_layouts_are_refused_with_their_reason_and_never_hang() {
    let (s, c) = host().await;
    let err = |r: vgpud_client::Result<Vec<LayoutStep>>| {
        let e = r.expect_err("refused");
        (e.name().to_string(), e.message())
    };
    let (name, msg) = err(c.apply_layout("absent", true).await);
    assert_eq!(name, "org.vgpud1.Error.NotFound", "{msg}");
    let (name, msg) = err(c.apply_layout("../../etc/passwd", true).await);
    assert_eq!(name, "org.vgpud1.Error.InvalidArgument", "{msg}");
    write_layout(&s, "typo", "[[gpu]]\nmodel = \"x\"\nvsf = 2\n");
    let (name, msg) = err(c.apply_layout("typo", false).await);
    assert_eq!(name, "org.vgpud1.Error.InvalidArgument");
    assert!(msg.contains("typo.toml") && msg.contains("vsf"), "{msg}");
    let (name, msg) = err(c
        .layouts()
        .apply_layout("typo", vgpud_client::bool_opts(&[("dry_runn", true)]))
        .await
        .map(|_| Vec::new())
        .map_err(Into::into));
    assert_eq!(name, "org.vgpud1.Error.InvalidArgument", "{msg}");
    // A FIFO where a layout should be is an error at once, not a hang.
    let fifo = s.host.path("etc/vgpud/layouts/fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let started = std::time::Instant::now();
    let (name, msg) = err(c.apply_layout("fifo", true).await);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(name, "org.vgpud1.Error.Failed", "{msg}");
    assert!(msg.contains("FIFO"), "{msg}");
    let listed = c.list_layouts().await.expect("ListLayouts");
    let names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["fifo", "typo"]);
    assert!(
        listed
            .iter()
            .all(|l| l.description.starts_with("unusable: ")),
        "{listed:?}"
    );
    // A name at the size limit is checked before any work.
    let (name, _) = err(c.apply_layout(&"x".repeat(100_000), true).await);
    assert_eq!(name, "org.vgpud1.Error.InvalidArgument");
}

#[tokio::test]
async fn a_layout_named_in_the_configuration_is_applied_at_every_start() {
    let (mut s, c) = host().await;
    day_layout(&s, &c).await;
    let conf = s.host.path("etc/vgpud/vgpud.toml");
    std::fs::write(&conf, "[layouts]\napply_at_boot = \"day\"\n").expect("vgpud.toml");
    let c = restart(&mut s).await;
    let first = owned_by(&c, "pool-day").await;
    assert_eq!(first.len(), 6, "applied at start");
    assert_eq!(c.diff_layout("day").await.expect("DiffLayout"), []);
    // A restart finds the host as the layout says: the same devices, none made again.
    let c = restart(&mut s).await;
    assert_eq!(owned_by(&c, "pool-day").await, first);
    assert!(s.daemon.log_text().contains("layout applied at start"));
}

/// A legal layout whose plan would not fit one D-Bus reply (the bus then drops vgpud): the
/// dry run, the apply and the diff answer a named error at once, and vgpud stays on the bus.
#[tokio::test]
async fn a_layout_too_large_for_one_reply_is_refused_and_vgpud_stays_on_the_bus() {
    let (s, c) = host().await;
    let model = gpus_of(&c, "L40S").await[0].1.clone();
    // One model, 64 entries of count = 1024; owners of 250 bytes make each row long.
    let mut text = format!("[[gpu]]\nmodel = \"{model}\"\ndevices = [\n");
    for i in 0..64 {
        let owner = format!("pool-{i:02}-{}", "o".repeat(242));
        text.push_str(&format!(
            "  {{ type = \"L40S-4Q\", count = 1024, owner = \"{owner}\" }},\n"
        ));
    }
    text.push_str("]\n");
    write_layout(&s, "huge", &text);
    for dry_run in [true, false] {
        let started = std::time::Instant::now();
        let e = c
            .apply_layout("huge", dry_run)
            .await
            .expect_err("a reply too large is refused");
        assert_eq!(
            e.name(),
            "org.vgpud1.Error.InvalidArgument",
            "dry_run={dry_run}: {e}"
        );
        assert!(e.message().contains("huge.toml"), "{e}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    let e = c.diff_layout("huge").await.expect_err("DiffLayout refused");
    assert_eq!(e.name(), "org.vgpud1.Error.InvalidArgument", "{e}");
    assert!(c.list_devices().await.expect("ListDevices").is_empty());
    assert_eq!(
        gpus_of(&c, "L40S").await.len(),
        2,
        "vgpud keeps its bus name"
    );
}

/// Applies of one layout at the same time make the pool once, not once per apply.
#[tokio::test]
async fn concurrent_applies_of_a_layout_make_its_pool_once() {
    let (s, c) = host().await;
    let gpu = gpus_of(&c, "L40S").await[0].0.clone();
    c.set_vf_count(&gpu, 32, &Options::new())
        .await
        .expect("VFs");
    write_layout(
        &s,
        "four",
        &format!(
            "[[gpu]]\naddress = \"{gpu}\"\ndevices = [{{ type = \"L40S-4Q\", count = 4, owner = \"pool-four\" }}]\n"
        ),
    );
    let mut clients = Vec::new();
    for _ in 0..4 {
        let conn = s.bus.connect().await;
        clients.push(Client::from_connection(conn).await.expect("client"));
    }
    let results = tokio::join!(
        clients[0].apply_layout("four", false),
        clients[1].apply_layout("four", false),
        clients[2].apply_layout("four", false),
        clients[3].apply_layout("four", false),
    );
    let steps: Vec<LayoutStep> = [results.0, results.1, results.2, results.3]
        .into_iter()
        .flat_map(|r| r.expect("ApplyLayout"))
        .collect();
    let got = summary(&steps);
    assert_eq!(
        owned_by(&c, "pool-four").await.len(),
        4,
        "four applies at once: {got:#?}"
    );
    assert_eq!(got.len(), 4, "made once between them: {got:#?}");
    assert!(steps.iter().all(|s| s.status == "done"), "{got:#?}");
    assert_eq!(c.diff_layout("four").await.expect("DiffLayout"), []);
}

/// A model selector that matches no GPU is a refused `match` row and a difference, naming
/// the models the host has.
#[tokio::test]
async fn a_model_that_matches_no_gpu_is_refused_naming_the_models() {
    let (s, c) = host().await;
    let h200 = gpus_of(&c, "H200").await;
    assert_ne!(h200[0].1, "H200", "the host's model is longer: {h200:?}");
    write_layout(&s, "short", "[[gpu]]\nmodel = \"H200\"\nvfs = 32\n");
    for dry_run in [true, false] {
        let steps = c.apply_layout("short", dry_run).await.expect("ApplyLayout");
        assert_eq!(steps.len(), 1, "{steps:?}");
        let row = &steps[0];
        assert_eq!(
            (row.status.as_str(), row.gpu.as_str(), row.action.as_str()),
            ("refused", "model H200", "match"),
            "{row:?}"
        );
        assert!(row.detail.contains(&h200[0].1), "names the models: {row:?}");
    }
    let diff = c.diff_layout("short").await.expect("DiffLayout");
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert_eq!(
        (
            diff[0].gpu.as_str(),
            diff[0].item.as_str(),
            diff[0].wanted.as_str()
        ),
        ("model H200", "gpu", "present"),
        "{diff:?}"
    );
    assert!(diff[0].actual.contains(&h200[0].1), "{diff:?}");
    assert_eq!(c.gpu(&h200[0].0).await.expect("Gpu").num_vfs, 0);
}
