//! The core's event stream as clients see it, through a real dbus-daemon and a real vgpud on
//! simulated hosts: every change of state gives the signals it should, once, and the
//! properties clients cache never go stale.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use zbus::fdo::{PropertiesChanged, PropertiesProxy};

use common::proxy::{bool_opts, device_proxy, error_name, gpu_proxy, opts};
use common::setup::Setup;

/// The `passthrough` profile's GPU that is alone in its IOMMU group with its audio function.
const CLEAN: &str = "0000:21:00.0";

async fn properties(s: &Setup, path: &str) -> PropertiesProxy<'static> {
    PropertiesProxy::builder(&s.conn)
        .destination("org.vgpud1")
        .path(path.to_string())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("properties proxy")
}

/// The names of the properties a PropertiesChanged carries.
fn names(sig: &PropertiesChanged) -> Vec<String> {
    let args = sig.args().expect("args");
    let mut names: Vec<String> = args
        .changed_properties()
        .keys()
        .map(|k| k.to_string())
        .collect();
    names.sort();
    names
}

/// Every PropertiesChanged that arrives within `quiet` of the previous one (at most 5 s in
/// all).
async fn collect(
    stream: &mut zbus::fdo::PropertiesChangedStream,
    quiet: Duration,
) -> Vec<PropertiesChanged> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while let Ok(Some(sig)) = tokio::time::timeout(quiet, stream.next()).await {
        got.push(sig);
        if tokio::time::Instant::now() > deadline {
            break;
        }
    }
    got
}

#[tokio::test]
async fn the_gpu_driver_follows_a_passthrough_with_one_signal_each_way() {
    let s = Setup::new(&["passthrough"]).await;
    let m = s.manager().await;
    let gpu_path = vgpud::dbus::paths::gpu_path(CLEAN).to_string();
    let gpu = gpu_proxy(&s.conn, CLEAN).await;
    assert_eq!(gpu.driver().await.expect("Driver"), "nvidia");
    let mut changes = properties(&s, &gpu_path)
        .await
        .receive_properties_changed()
        .await
        .expect("subscribe");

    let (uuid, _) = m
        .create_device("passthrough", opts(&[("parent", CLEAN)]))
        .await
        .expect("passthrough");
    // The reply comes after the signals: what the client caches is already current.
    let got = collect(&mut changes, Duration::from_millis(500)).await;
    assert_eq!(got.len(), 1, "one PropertiesChanged for the GPU");
    assert!(
        names(&got[0]).contains(&"Driver".to_string()),
        "{:?}",
        names(&got[0])
    );
    assert!(names(&got[0]).contains(&"Devices".to_string()));
    let uncached = gpu_proxy(&s.conn, CLEAN).await;
    assert_eq!(uncached.driver().await.expect("Driver"), "vfio-pci");
    let listed = m.list_gpus().await.expect("ListGpus");
    let row = listed.iter().find(|g| g.0 == CLEAN).expect("listed");
    assert_eq!(
        row.2, "vfio-pci",
        "ListGpus says the driver the GPU has now"
    );

    m.remove_device(&uuid, HashMap::new())
        .await
        .expect("give back");
    let got = collect(&mut changes, Duration::from_millis(500)).await;
    assert_eq!(got.len(), 1, "one PropertiesChanged for the GPU");
    assert!(names(&got[0]).contains(&"Driver".to_string()));
    assert_eq!(
        gpu_proxy(&s.conn, CLEAN)
            .await
            .driver()
            .await
            .expect("Driver"),
        "nvidia"
    );
}

#[tokio::test]
async fn one_change_gives_one_signal_with_only_the_changed_properties() {
    let s = Setup::new(&["mtty"]).await;
    let m = s.manager().await;
    let (uuid, path) = m.create_device("mtty-1", opts(&[])).await.expect("create");
    let gpu_path = vgpud::dbus::paths::gpu_path("mtty").to_string();
    let mut device_changes = properties(&s, path.as_str())
        .await
        .receive_properties_changed()
        .await
        .expect("subscribe");
    let mut gpu_changes = properties(&s, &gpu_path)
        .await
        .receive_properties_changed()
        .await
        .expect("subscribe");

    m.modify_device(&uuid, bool_opts(&[("autostart", false)]))
        .await
        .expect("modify");
    let got = collect(&mut device_changes, Duration::from_millis(400)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(names(&got[0]), vec!["Autostart"]);

    m.stop_device(&uuid, HashMap::new()).await.expect("stop");
    let got = collect(&mut device_changes, Duration::from_millis(400)).await;
    assert_eq!(got.len(), 1, "one signal for the stop");
    let changed = names(&got[0]);
    assert!(changed.contains(&"Active".to_string()), "{changed:?}");
    assert!(!changed.contains(&"Persistent".to_string()), "{changed:?}");
    assert!(!changed.contains(&"TypeId".to_string()), "{changed:?}");

    m.start_device(&uuid, HashMap::new()).await.expect("start");
    let got = collect(&mut device_changes, Duration::from_millis(400)).await;
    assert_eq!(got.len(), 1, "one signal for the start");
    // The GPU's Devices did not change through any of it.
    assert!(collect(&mut gpu_changes, Duration::from_millis(200))
        .await
        .is_empty());

    m.remove_device(&uuid, HashMap::new())
        .await
        .expect("remove");
    let got = collect(&mut gpu_changes, Duration::from_millis(400)).await;
    assert_eq!(got.len(), 1, "the GPU's Devices changed once");
    assert_eq!(names(&got[0]), vec!["Devices"]);
}

#[tokio::test]
async fn a_device_started_by_another_tool_is_reported() {
    let s = Setup::new(&["mtty"]).await;
    let m = s.manager().await;
    let mut drift = m.receive_device_drift().await.expect("subscribe");
    let (uuid, _) = m.create_device("mtty-2", opts(&[])).await.expect("create");
    m.stop_device(&uuid, HashMap::new()).await.expect("stop");
    let dev = device_proxy(&s.conn, &uuid).await;
    assert!(!dev.active().await.expect("Active"));

    // Another tool (mdevctl start) writes the UUID to the type's create.
    let sim = vgpud::host::Host::simulated(&s.host.root);
    let create = s
        .host
        .path("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create");
    sim.write_attr(&create, &uuid).expect("external start");
    // Its uevent makes vgpud read the device again (no call is needed).
    let sig = tokio::time::timeout(Duration::from_secs(10), drift.next())
        .await
        .expect("a DeviceDrift in time")
        .expect("signal");
    let args = sig.args().expect("args");
    assert_eq!(args.uuid, uuid);
    assert_eq!(args.event, "started-externally");
    assert!(
        device_proxy(&s.conn, &uuid)
            .await
            .active()
            .await
            .expect("Active"),
        "the device is active again"
    );
}

#[tokio::test]
async fn capacity_answers_for_every_type_create_takes() {
    let s = Setup::new(&["passthrough"]).await;
    let m = s.manager().await;
    let err = m
        .get_capacity("NoSuchType", HashMap::new())
        .await
        .expect_err("unknown type");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound");
    let free = m
        .get_capacity("passthrough", opts(&[("parent", CLEAN)]))
        .await
        .expect("passthrough capacity");
    assert_eq!(free, 1, "the GPU can be given whole");
    let (uuid, _) = m
        .create_device("passthrough", opts(&[("parent", CLEAN)]))
        .await
        .expect("passthrough");
    let taken = m
        .get_capacity("passthrough", opts(&[("parent", CLEAN)]))
        .await
        .expect("passthrough capacity");
    assert_eq!(taken, 0, "the GPU is given already");
    m.remove_device(&uuid, HashMap::new())
        .await
        .expect("remove");
}

#[tokio::test]
async fn every_change_is_audited_once_with_its_caller_and_outcome() {
    let s = Setup::new(&["mtty"]).await;
    let m = s.manager().await;
    let (uuid, _) = m.create_device("mtty-1", opts(&[])).await.expect("create");
    m.remove_device(&uuid, HashMap::new())
        .await
        .expect("remove");
    let err = m
        .remove_device(&uuid, HashMap::new())
        .await
        .expect_err("gone");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound");
    let me = std::process::id();
    let lines = |log: &str, what: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains(&format!("audit: {what} {uuid}")))
            .map(str::to_string)
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = s.daemon.log_text();
        if !lines(&log, "refused").is_empty() || std::time::Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let added = lines(&log, "device-added");
    assert_eq!(added.len(), 1, "{log}");
    assert!(
        added[0].contains("by CreateDevice of uid 0") && added[0].contains("(ok)"),
        "{}",
        added[0]
    );
    let removed = lines(&log, "device-removed");
    assert_eq!(removed.len(), 1, "{log}");
    assert!(
        removed[0].contains("by RemoveDevice of uid 0"),
        "{}",
        removed[0]
    );
    let refused = lines(&log, "refused");
    assert_eq!(refused.len(), 1, "{log}");
    assert!(
        refused[0].contains("org.vgpud1.Error.NotFound")
            && refused[0].contains("RemoveDevice")
            && refused[0].contains("caller_pid"),
        "{}",
        refused[0]
    );
    // The caller's pid is this test process's: the bus told vgpud who called.
    assert!(
        added[0].contains(&format!("pid {me}")),
        "{} (this test is pid {me})",
        added[0]
    );
}
