//! Surviving restarts and reboots, interoperating with the real mdevctl 1.4, and noticing
//! drift: a real vgpud process on a simulated tree, a private dbus-daemon, and mdevctl run
//! with MDEVCTL_ENV_ROOT on the same tree.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, Policy, TestBus, TestHost};
use common::proxy::{bool_opts, device_proxy, error_name, opts, ManagerProxy};

const PROFILES: &[&str] = &["mixed"];
const FAST: &[&str] = &["--poll-interval-ms", "100"];

async fn manager(bus: &TestBus) -> (zbus::Connection, ManagerProxy<'static>) {
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    (conn, m)
}

/// Waits until `check` holds, polling; panics with `what` after 10 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One device as mdevctl lists it: parent, type, start, attrs.
type MdevctlDevice = (String, String, String, Vec<(String, String)>);

/// `mdevctl list [--defined] --dumpjson` by uuid.
fn mdevctl_devices(host: &TestHost, defined: bool) -> BTreeMap<String, MdevctlDevice> {
    let mut args = vec!["list", "--dumpjson"];
    if defined {
        args.push("--defined");
    }
    let json = host.mdevctl_json(&args);
    let mut out = BTreeMap::new();
    for parent_obj in json.as_array().expect("array") {
        for (parent, devices) in parent_obj.as_object().expect("object") {
            for dev in devices.as_array().expect("devices") {
                for (uuid, def) in dev.as_object().expect("device") {
                    let attrs = def["attrs"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .flat_map(|o| o.as_object().into_iter().flatten())
                                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                                .collect()
                        })
                        .unwrap_or_default();
                    out.insert(
                        uuid.clone(),
                        (
                            parent.clone(),
                            def["mdev_type"].as_str().unwrap_or("").to_string(),
                            def["start"].as_str().unwrap_or("").to_string(),
                            attrs,
                        ),
                    );
                }
            }
        }
    }
    out
}

#[tokio::test]
async fn mdevctl_sees_what_vgpud_sees_device_by_device() {
    let host = TestHost::new(PROFILES);
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start_args(&bus, &host, FAST).await;
    let (conn, m) = manager(&bus).await;
    let (persistent, _) = m
        .create_device(
            "RTX6000-4Q",
            opts(&[("owner", "vm-a"), ("params", "frame_rate_limiter=0")]),
        )
        .await
        .expect("persistent");
    let mut manual = bool_opts(&[("autostart", false)]);
    manual.insert("owner", zbus::Variant::from("vm-b"));
    let (manual, _) = m.create_device("mtty-2", manual).await.expect("manual");
    let (transient, _) = m
        .create_device("GVTg_V5_4", bool_opts(&[("persistent", false)]))
        .await
        .expect("transient");

    let defined = mdevctl_devices(&host, true);
    assert_eq!(defined.len(), 2, "{defined:?}");
    let (parent, ty, start, attrs) = &defined[&persistent];
    assert!(parent.starts_with("0000:"));
    assert!(ty.starts_with("nvidia-"));
    assert_eq!(start, "auto");
    assert_eq!(
        attrs,
        &vec![(
            "nvidia/vgpu_params".to_string(),
            "frame_rate_limiter=0".to_string()
        )]
    );
    assert_eq!(defined[&manual].2, "manual");
    assert!(!defined.contains_key(&transient));

    let active = mdevctl_devices(&host, false);
    let listed = m.list_devices().await.expect("ListDevices");
    assert_eq!(active.len(), 3);
    for (uuid, (parent, ty, _, _)) in &active {
        let row = listed
            .iter()
            .find(|d| &d.0 == uuid)
            .unwrap_or_else(|| panic!("vgpud lists {uuid}"));
        assert_eq!((&row.1, &row.2), (parent, ty), "{uuid}");
    }
    for (uuid, persistent_expected, autostart_expected) in [
        (&persistent, true, true),
        (&manual, true, false),
        (&transient, false, false),
    ] {
        let dev = device_proxy(&conn, uuid).await;
        assert!(dev.active().await.expect("Active"));
        assert_eq!(
            dev.persistent().await.expect("Persistent"),
            persistent_expected
        );
        assert_eq!(
            dev.autostart().await.expect("Autostart"),
            autostart_expected
        );
        assert!(dev.created().await.expect("Created") > 0);
    }
}

#[tokio::test]
async fn definitions_are_byte_identical_to_mdevctls() {
    let host = TestHost::new(&["mtty"]);
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start_args(&bus, &host, FAST).await;
    let (_conn, m) = manager(&bus).await;
    let (ours, _) = m.create_device("mtty-1", opts(&[])).await.expect("create");
    let theirs = "3a3a3a3a-0000-4000-8000-000000000001";
    let out = host.mdevctl(&[
        "define", "--uuid", theirs, "--parent", "mtty", "--type", "mtty-1", "--auto",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read =
        |u: &str| std::fs::read(host.path(&format!("etc/mdevctl.d/mtty/{u}"))).expect("definition");
    assert_eq!(
        String::from_utf8_lossy(&read(&ours)),
        String::from_utf8_lossy(&read(theirs))
    );
    let mode = |u: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(host.path(&format!("etc/mdevctl.d/mtty/{u}")))
            .expect("meta")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&ours), mode(theirs));
}

#[tokio::test]
async fn a_definition_made_by_mdevctl_is_listed_at_once_and_started_after_a_reboot() {
    let host = TestHost::new(PROFILES);
    let bus = TestBus::start(Policy::Open);
    // A long poll interval: only inotify can make this test pass in time.
    let mut daemon = Daemon::start_args(&bus, &host, &["--poll-interval-ms", "600000"]).await;
    let (conn, m) = manager(&bus).await;
    let mut created = m.receive_device_created().await.expect("stream");
    let uuid = "4b4b4b4b-0000-4000-8000-000000000001";
    let out = host.mdevctl(&[
        "define", "--uuid", uuid, "--parent", "mtty", "--type", "mtty-2", "--auto",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sig = tokio::time::timeout(Duration::from_secs(5), async {
        use futures_util::StreamExt;
        created.next().await.expect("signal")
    })
    .await
    .expect("DeviceCreated for the new definition, through inotify");
    assert_eq!(sig.args().expect("args").uuid, uuid);
    let dev = device_proxy(&conn, uuid).await;
    assert!(!dev.active().await.expect("Active"));
    assert!(dev.persistent().await.expect("Persistent"));
    assert!(dev.autostart().await.expect("Autostart"));
    assert_eq!(dev.owner().await.expect("Owner"), "");

    daemon.stop();
    host.reboot(PROFILES);
    let _daemon = Daemon::start_args(&bus, &host, FAST).await;
    let (conn, _m) = manager(&bus).await;
    let dev = device_proxy(&conn, uuid).await;
    assert!(dev.active().await.expect("Active"), "started at boot");
    assert!(host.path(&format!("sys/bus/mdev/devices/{uuid}")).exists());
    assert_eq!(mdevctl_devices(&host, false)[uuid].1, "mtty-2");
}

#[tokio::test]
async fn a_reboot_brings_back_persistent_autostart_devices_only() {
    let host = TestHost::new(PROFILES);
    let bus = TestBus::start(Policy::Open);
    let mut daemon = Daemon::start_args(&bus, &host, FAST).await;
    let (_conn, m) = manager(&bus).await;
    let (auto, _) = m
        .create_device(
            "RTX6000-2Q",
            opts(&[("owner", "vm-auto"), ("params", "frame_rate_limiter=0")]),
        )
        .await
        .expect("auto");
    let (manual, _) = m
        .create_device("mtty-1", bool_opts(&[("autostart", false)]))
        .await
        .expect("manual");
    let (transient, _) = m
        .create_device("RTX6000-2Q", bool_opts(&[("persistent", false)]))
        .await
        .expect("transient");
    let before = m.list_devices().await.expect("list");
    let before_auto = before.iter().find(|d| d.0 == auto).expect("auto").clone();

    daemon.stop();
    host.reboot(PROFILES);
    assert!(!host.path(&format!("sys/bus/mdev/devices/{auto}")).exists());
    let _daemon = Daemon::start_args(&bus, &host, FAST).await;
    let (conn, m) = manager(&bus).await;
    let after = m.list_devices().await.expect("list");
    let after_auto = after
        .iter()
        .find(|d| d.0 == auto)
        .expect("auto is back")
        .clone();
    assert_eq!(
        (&after_auto.1, &after_auto.2, &after_auto.3),
        (&before_auto.1, &before_auto.2, &before_auto.3),
        "same parent, type and owner"
    );
    let dev = device_proxy(&conn, &auto).await;
    assert!(dev.active().await.expect("Active"));
    assert_eq!(
        dev.attributes()
            .await
            .expect("Attributes")
            .get("nvidia/vgpu_params")
            .map(String::as_str),
        Some("frame_rate_limiter=0")
    );
    let manual_dev = device_proxy(&conn, &manual).await;
    assert!(
        !manual_dev.active().await.expect("Active"),
        "manual devices wait"
    );
    assert!(manual_dev.persistent().await.expect("Persistent"));
    assert!(
        after.iter().all(|d| d.0 != transient),
        "transient devices are gone"
    );
    assert!(
        !host
            .path(&format!("var/lib/vgpud/devices/{transient}.json"))
            .exists(),
        "and so is their record"
    );

    // A manual device starts on request, and stops keeping its definition.
    m.start_device(&manual, HashMap::new())
        .await
        .expect("StartDevice");
    assert!(manual_dev.active().await.expect("Active"));
    m.stop_device(&manual, HashMap::new())
        .await
        .expect("StopDevice");
    assert!(!manual_dev.active().await.expect("Active"));
    assert!(host.path(&format!("etc/mdevctl.d/mtty/{manual}")).exists());
    let err = m
        .stop_device("not-a-uuid", HashMap::new())
        .await
        .expect_err("bad");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
}

#[tokio::test]
async fn a_restart_keeps_devices_owners_and_active_state() {
    let host = TestHost::new(PROFILES);
    let bus = TestBus::start(Policy::Open);
    let mut daemon = Daemon::start_args(&bus, &host, FAST).await;
    let (_conn, m) = manager(&bus).await;
    let (persistent, _) = m
        .create_device("RTX6000-4Q", opts(&[("owner", "vm-p")]))
        .await
        .expect("p");
    let mut o = bool_opts(&[("persistent", false)]);
    o.insert("owner", zbus::Variant::from("vm-t"));
    let (transient, _) = m.create_device("RTX6000-4Q", o).await.expect("t");
    daemon.stop();
    let _daemon = Daemon::start_args(&bus, &host, FAST).await;
    let (conn, m) = manager(&bus).await;
    let listed = m.list_devices().await.expect("list");
    let owner = |u: &str| listed.iter().find(|d| d.0 == u).map(|d| d.3.clone());
    assert_eq!(owner(&persistent).as_deref(), Some("vm-p"));
    assert_eq!(
        owner(&transient).as_deref(),
        Some("vm-t"),
        "transient devices survive a restart"
    );
    assert!(device_proxy(&conn, &transient)
        .await
        .active()
        .await
        .expect("Active"));
}

#[tokio::test]
async fn a_device_stopped_on_request_stays_stopped_across_a_restart_until_the_next_boot() {
    let host = TestHost::new(PROFILES);
    let bus = TestBus::start(Policy::Open);
    let mut daemon = Daemon::start_args(&bus, &host, FAST).await;
    let (_conn, m) = manager(&bus).await;
    let (stopped, _) = m
        .create_device("RTX6000-4Q", opts(&[("owner", "vm-s")]))
        .await
        .expect("create");
    let (running, _) = m
        .create_device("RTX6000-4Q", opts(&[("owner", "vm-r")]))
        .await
        .expect("create");
    m.stop_device(&stopped, HashMap::new()).await.expect("stop");
    daemon.stop();
    // A restart of vgpud (not a boot): the operator's stop holds, the other device runs.
    let mut daemon = Daemon::start_args(&bus, &host, FAST).await;
    let (conn, m) = manager(&bus).await;
    let active = |conn: zbus::Connection, uuid: String| async move {
        device_proxy(&conn, &uuid)
            .await
            .active()
            .await
            .expect("Active")
    };
    assert!(
        !active(conn.clone(), stopped.clone()).await,
        "a device stopped with StopDevice is not started again by a restart"
    );
    assert!(active(conn.clone(), running.clone()).await);
    // Started again, it is an autostart device like the others.
    m.start_device(&stopped, HashMap::new())
        .await
        .expect("start");
    m.stop_device(&stopped, HashMap::new()).await.expect("stop");
    daemon.stop();
    // A boot forgets the stop: autostart devices start.
    host.reboot(PROFILES);
    let _daemon = Daemon::start_args(&bus, &host, FAST).await;
    let (conn, _m) = manager(&bus).await;
    assert!(
        active(conn.clone(), stopped.clone()).await,
        "after a boot the autostart device starts"
    );
}

#[tokio::test]
async fn modify_device_writes_and_drops_the_definition() {
    let host = TestHost::new(&["mtty"]);
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start_args(&bus, &host, FAST).await;
    let (conn, m) = manager(&bus).await;
    let (uuid, _) = m
        .create_device("mtty-1", bool_opts(&[("persistent", false)]))
        .await
        .expect("create");
    let def = host.path(&format!("etc/mdevctl.d/mtty/{uuid}"));
    assert!(!def.exists());
    m.modify_device(&uuid, bool_opts(&[("persistent", true)]))
        .await
        .expect("persist");
    assert!(def.exists());
    let dev = device_proxy(&conn, &uuid).await;
    assert!(dev.persistent().await.expect("Persistent"));
    assert!(!dev.autostart().await.expect("Autostart"));
    m.modify_device(&uuid, bool_opts(&[("autostart", true)]))
        .await
        .expect("autostart");
    assert_eq!(mdevctl_devices(&host, true)[&uuid].2, "auto");
    let err = m
        .modify_device(
            &uuid,
            bool_opts(&[("persistent", false), ("autostart", true)]),
        )
        .await
        .expect_err("autostart needs persistence");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    let err = m
        .modify_device(&uuid, opts(&[("persistent", "yes")]))
        .await
        .expect_err("typed");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    m.modify_device(&uuid, bool_opts(&[("persistent", false)]))
        .await
        .expect("drop");
    assert!(!def.exists());
    assert!(!dev.persistent().await.expect("Persistent"));
    let err = m
        .modify_device("5c5c5c5c-0000-4000-8000-000000000001", HashMap::new())
        .await
        .expect_err("unknown");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound");
}

#[tokio::test]
async fn drift_is_reported_and_autostart_devices_are_repaired() {
    let host = TestHost::new(PROFILES);
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start_args(&bus, &host, FAST).await;
    let (conn, m) = manager(&bus).await;
    let mut drift = m.receive_device_drift().await.expect("stream");
    let (auto, _) = m.create_device("mtty-1", opts(&[])).await.expect("auto");
    let (transient, _) = m
        .create_device("mtty-1", bool_opts(&[("persistent", false)]))
        .await
        .expect("transient");

    // Another tool removes both devices behind vgpud's back.
    let sim = vgpud::host::Host::simulated(&host.root);
    for u in [&auto, &transient] {
        sim.write_attr(&host.path(&format!("sys/bus/mdev/devices/{u}/remove")), "1")
            .expect("external remove");
    }
    let mut events = BTreeMap::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        use futures_util::StreamExt;
        while events.len() < 2 {
            let sig = drift.next().await.expect("signal");
            let args = sig.args().expect("args");
            events.insert(args.uuid.clone(), args.event.clone());
        }
    })
    .await
    .expect("two DeviceDrift signals");
    assert_eq!(events[&auto], "repaired");
    assert_eq!(events[&transient], "removed-externally");
    assert!(device_proxy(&conn, &auto)
        .await
        .active()
        .await
        .expect("Active"));
    assert!(host.path(&format!("sys/bus/mdev/devices/{auto}")).exists());
    let listed = m.list_devices().await.expect("list");
    assert!(listed.iter().all(|d| d.0 != transient));
}

#[tokio::test]
async fn a_gpu_that_appears_later_gets_its_autostart_devices() {
    let host = TestHost::new(PROFILES);
    let bus = TestBus::start(Policy::Open);
    let mut daemon = Daemon::start_args(&bus, &host, FAST).await;
    let (_conn, m) = manager(&bus).await;
    let (uuid, _) = m.create_device("mtty-2", opts(&[])).await.expect("create");
    daemon.stop();

    // Reboot without the mtty driver loaded: the parent is missing at start.
    host.reboot(&["nvidia-turing", "intel-gvtg"]);
    let started = Instant::now();
    let _daemon = Daemon::start_args(
        &bus,
        &host,
        &["--poll-interval-ms", "100", "--restore-timeout-s", "1"],
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the restore waited for the parent"
    );
    let (conn, m) = manager(&bus).await;
    let dev = device_proxy(&conn, &uuid).await;
    assert!(!dev.active().await.expect("Active"));
    assert!(
        dev.persistent().await.expect("Persistent"),
        "a vanished parent never deletes definitions"
    );

    // The driver loads: the parent appears, and the device is started.
    host.write_profiles(&["mtty"]);
    eventually("the device starts on the new parent", || async {
        dev.active().await.unwrap_or(false)
    })
    .await;
    let gpus = m.list_gpus().await.expect("gpus");
    assert!(gpus.iter().any(|g| g.0 == "mtty"), "the new GPU is listed");
}

/// Issue #22 item 13: a storm of persistent creates and removes leaves nothing in
/// `etc/mdevctl.d/<parent>/` that mdevctl reads and warns about (vgpud's spare files live
/// in its own directory), and the real mdevctl lists the definitions without a warning.
#[tokio::test]
async fn a_create_remove_storm_leaves_nothing_for_mdevctl_to_warn_about() {
    let host = TestHost::new(&["mtty"]);
    let bus = TestBus::start(Policy::Open);
    let d = Daemon::start_args(&bus, &host, FAST).await;
    let (_conn, m) = manager(&bus).await;
    let mut kept = Vec::new();
    for round in 0..8 {
        let mut made = Vec::new();
        for _ in 0..4 {
            let (uuid, _) = m
                .create_device("mtty-1", opts(&[("owner", "storm")]))
                .await
                .expect("persistent create");
            made.push(uuid);
        }
        // One of each round stays, so that mdevctl has definitions to list.
        kept.extend(made.pop().filter(|_| round % 4 == 0));
        for uuid in made {
            m.remove_device(&uuid, HashMap::new())
                .await
                .expect("remove");
        }
    }
    let out = host.mdevctl(&["list", "--defined"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mdevctl failed: {stderr}");
    assert!(
        !stderr.contains("WARN"),
        "mdevctl list --defined warns:\n{stderr}\n{}",
        d.log_text()
    );
    let dir = host.path("etc/mdevctl.d/mtty");
    let strays: Vec<String> = std::fs::read_dir(&dir)
        .expect("definitions")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        strays.is_empty(),
        "vgpud's files in {}: {strays:?}",
        dir.display()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    for uuid in &kept {
        assert!(
            stdout.contains(uuid.as_str()),
            "{uuid} is listed:\n{stdout}"
        );
    }
}
