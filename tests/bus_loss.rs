//! A vgpud the bus lets go of stops, so that systemd starts it again: dbus-daemon disconnects
//! a peer that sends a message over its size limit, and a stopped bus drops everyone. Its
//! name cannot be taken from it either: a nameless vgpud serves no one.

mod common;

use std::time::Duration;

use common::daemon::{Daemon, Policy, TestBus, TestHost};
use common::proxy::ManagerProxy;

const MIXED: &[&str] = &["mixed"];

/// vgpud's exit status when the bus closed its connection (`EX_TEMPFAIL`).
const EXIT_BUS_LOST: i32 = 75;

/// How long vgpud may take to notice.
const NOTICE: Duration = Duration::from_secs(5);

/// Asserts that the daemon ended by itself within [`NOTICE`], with the bus-lost status and
/// the log lines that say why.
fn assert_stopped_for_the_lost_bus(daemon: &mut Daemon, what: &str) {
    let status = daemon.exit_within(NOTICE);
    let log = daemon.log_text();
    let Some(status) = status else {
        panic!(
            "vgpud is still running {NOTICE:?} after {what}; its log:\n{}",
            log
        );
    };
    assert_eq!(
        status.code(),
        Some(EXIT_BUS_LOST),
        "vgpud exits with its bus-lost status after {what} ({status}); its log:\n{log}"
    );
    assert!(
        log.contains("the bus closed vgpud's connection")
            && log
                .contains("closed vgpud's connection: exiting so that systemd starts vgpud again"),
        "the log says the bus dropped vgpud:\n{log}"
    );
}

#[tokio::test]
async fn vgpud_exits_when_the_bus_drops_it_for_an_oversized_reply() {
    // A bus that takes messages of up to 4 KiB: the manager's introspection (about 7 KB with
    // its method docs) is over it, so answering it gets vgpud disconnected.
    let host = TestHost::new(MIXED);
    let bus = TestBus::start_with_limits(Policy::Open, None, &[("max_message_size", 4096)]);
    let mut daemon = Daemon::start(&bus, &host).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("proxy");
    m.list_gpus().await.expect("a small answer goes through");

    let proxy = zbus::fdo::IntrospectableProxy::builder(&conn)
        .destination("org.vgpud1")
        .path("/org/vgpud1")
        .build()
        .await
        .expect("introspectable proxy");
    let answer = proxy.introspect().await;
    assert!(
        answer.is_err(),
        "the bus let an answer over its limit through: {} bytes",
        answer.map(|x| x.len()).unwrap_or_default()
    );
    assert_stopped_for_the_lost_bus(&mut daemon, "the bus dropped it for an oversized answer");
    assert!(
        daemon.log_text().contains(&bus.address),
        "the log names the bus:\n{}",
        daemon.log_text()
    );
}

#[tokio::test]
async fn vgpud_exits_when_the_bus_stops() {
    let host = TestHost::new(MIXED);
    let bus = TestBus::start(Policy::Open);
    let mut daemon = Daemon::start(&bus, &host).await;
    drop(bus);
    assert_stopped_for_the_lost_bus(&mut daemon, "dbus-daemon stopped");
}

#[tokio::test]
async fn another_connection_cannot_take_the_name_from_a_running_vgpud() {
    let host = TestHost::new(MIXED);
    let bus = TestBus::start(Policy::Open);
    let mut daemon = Daemon::start(&bus, &host).await;
    let intruder = bus.connect().await;
    let dbus = zbus::fdo::DBusProxy::new(&intruder)
        .await
        .expect("DBus proxy");
    let reply = dbus
        .request_name(
            "org.vgpud1".try_into().expect("name"),
            zbus::fdo::RequestNameFlags::REPLACE_EXISTING
                | zbus::fdo::RequestNameFlags::DO_NOT_QUEUE,
        )
        .await
        .expect("RequestName");
    assert_eq!(
        reply,
        zbus::fdo::RequestNameReply::Exists,
        "another connection took org.vgpud1 from the running vgpud"
    );
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("proxy");
    m.list_gpus()
        .await
        .expect("vgpud still answers at org.vgpud1");
    assert!(daemon.is_running());
}
