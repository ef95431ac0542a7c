//! Leases end to end (issue #25): a device created with `lease_s` is reclaimed once the
//! libvirt domain its owner names has not been running for longer than the lease, with a
//! `DeviceReclaimed` signal and an audit line; a running domain's device never is; the lease
//! outlives a `kill -9`. libvirt is its own test driver (`test:///default`, whose domain
//! `test` runs).

mod common;

use std::time::{Duration, Instant};

use futures_util::StreamExt;

use common::daemon::{Daemon, Policy, TestBus, TestHost};
use common::proxy::{error_name, opts, ManagerProxy};
use zbus::Variant;

const ARGS: &[&str] = &[
    "--libvirt-uri",
    "test:///default",
    "--reclaim-interval-s",
    "1",
];

async fn leased(m: &ManagerProxy<'_>, owner: &str, lease: u32) -> String {
    let mut o = opts(&[("owner", owner)]);
    o.insert("persistent", Variant::from(false));
    o.insert("lease_s", Variant::from(lease));
    m.create_device("mtty-1", o).await.expect("create").0
}

async fn listed(m: &ManagerProxy<'_>, uuid: &str) -> bool {
    m.list_devices()
        .await
        .expect("ListDevices")
        .iter()
        .any(|d| d.0 == uuid)
}

#[tokio::test]
async fn a_device_is_reclaimed_when_its_domain_has_not_run_for_its_lease_and_never_while_it_runs() {
    let host = TestHost::new(&["mtty"]);
    let bus = TestBus::start(Policy::Open);
    let mut daemon = Daemon::start_args(&bus, &host, ARGS).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("proxy");
    let mut reclaimed = m.receive_device_reclaimed().await.expect("subscribe");

    // Refused before any work: no owner to watch, a lease out of range.
    let mut o = opts(&[]);
    o.insert("lease_s", Variant::from(60u32));
    let e = m.create_device("mtty-1", o).await.expect_err("no owner");
    assert_eq!(error_name(&e), "org.vgpud1.Error.InvalidArgument");
    let mut o = opts(&[("owner", "test")]);
    o.insert("lease_s", Variant::from(0u32));
    let e = m.create_device("mtty-1", o).await.expect_err("lease 0");
    assert_eq!(error_name(&e), "org.vgpud1.Error.InvalidArgument");

    let kept = leased(&m, "test", 1).await; // the test driver's running domain
    let ghost = leased(&m, "ghost-vm", 2).await; // no such domain
    let t0 = Instant::now();
    let sig = tokio::time::timeout(Duration::from_secs(10), reclaimed.next())
        .await
        .expect("a DeviceReclaimed within 10 s")
        .expect("stream");
    let args = sig.args().expect("args");
    assert_eq!(args.uuid, ghost);
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "not before its lease: {:?}",
        t0.elapsed()
    );
    assert!(
        args.reason.contains("ghost-vm") && args.reason.contains("does not exist"),
        "{}",
        args.reason
    );
    assert!(!listed(&m, &ghost).await, "reclaimed devices are removed");
    assert!(
        daemon
            .log_text()
            .contains(&format!("audit: device-reclaimed {ghost}")),
        "{}",
        daemon.log_text()
    );
    // The running domain's device stays, lease or not.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        listed(&m, &kept).await,
        "a running domain's device is never reclaimed"
    );

    // A lease outlives kill -9: the device is reclaimed after the restart.
    let orphan = leased(&m, "never-started-vm", 3).await;
    daemon.kill9();
    let _daemon = Daemon::start_args(&bus, &host, ARGS).await;
    let restarted = Instant::now();
    let m = ManagerProxy::new(&conn).await.expect("proxy");
    let mut reclaimed = m.receive_device_reclaimed().await.expect("subscribe");
    assert!(listed(&m, &orphan).await, "adopted after the restart");
    let sig = tokio::time::timeout(Duration::from_secs(12), reclaimed.next())
        .await
        .expect("a DeviceReclaimed after the restart")
        .expect("stream");
    assert_eq!(sig.args().expect("args").uuid, orphan);
    assert!(
        restarted.elapsed() >= Duration::from_secs(3),
        "the clock starts again after a restart"
    );
    assert!(listed(&m, &kept).await);
}
