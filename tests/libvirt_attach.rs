//! Attach and detach: the logic against a test double of libvirt (libvirt's test driver does
//! not support attach), with the XML that would be sent validated by libvirt's schema; and
//! the D-Bus methods against a real vgpud talking to libvirt's test driver and to no libvirt
//! at all.

mod common;

use std::collections::HashMap;

use common::daemon::{Daemon, Policy, TestBus, TestHost};
use common::libvirtd::Libvirtd;
use common::proxy::{error_message, error_name, opts, ManagerProxy};
use vgpud::engine::{CreateRequest, Engine};
use vgpud::host::Host;
use vgpud::libvirt::testing::FakeLibvirt;
use vgpud::libvirt::{
    attach, detach, AttachError, AttachOptions, DomainState, LibvirtError, VirtConnection,
};

const RUNNING: DomainState = DomainState {
    active: true,
    persistent: true,
};
const SHUT_OFF: DomainState = DomainState {
    active: false,
    persistent: true,
};

fn engine() -> (TestHost, Engine, String) {
    let host = TestHost::new(&["mtty"]);
    let engine = Engine::new(Host::simulated(&host.root)).expect("engine");
    let dev = engine
        .create_device(&CreateRequest {
            type_query: "mtty-1".into(),
            ..Default::default()
        })
        .expect("device");
    (host, engine, dev.uuid)
}

#[test]
fn attach_to_a_running_domain_goes_live_and_into_its_config() {
    let (_h, engine, uuid) = engine();
    let libvirt = FakeLibvirt::default().with_domain("vdi-1", RUNNING);
    let dev = attach(&engine, &libvirt, &uuid, "vdi-1", AttachOptions::default()).expect("attach");
    assert_eq!(dev.owner, "vdi-1");
    assert_eq!(engine.device(&uuid).expect("known").owner, "vdi-1");
    let calls = libvirt.calls();
    assert_eq!(calls.len(), 1);
    assert!(calls[0].impact.live && calls[0].impact.config);
    assert!(calls[0].xml.contains(&uuid), "{}", calls[0].xml);
    common::libvirt::assert_valid_hostdev(&calls[0].xml);
    // The owner is kept in vgpud's record: a restarted engine still knows it.
    drop(engine);
    let again = Engine::new(Host::simulated(&_h.root)).expect("engine");
    assert_eq!(again.device(&uuid).expect("known").owner, "vdi-1");
}

#[test]
fn a_passthrough_device_goes_in_function_by_function_and_out_in_reverse() {
    let host = TestHost::new(&["passthrough"]);
    let engine = Engine::new(Host::simulated(&host.root)).expect("engine");
    let dev = engine
        .create_device(&CreateRequest {
            type_query: "passthrough".into(),
            parent: Some("0000:21:00.0".into()),
            ..Default::default()
        })
        .expect("passthrough");
    let libvirt = FakeLibvirt::default()
        .with_domain("vdi-1", RUNNING)
        .with_domain("vdi-2", RUNNING);
    attach(
        &engine,
        &libvirt,
        &dev.uuid,
        "vdi-1",
        AttachOptions::default(),
    )
    .expect("attach");
    // vdi-1 holds its functions: vdi-2 does not get them.
    let err = attach(
        &engine,
        &libvirt,
        &dev.uuid,
        "vdi-2",
        AttachOptions::default(),
    )
    .expect_err("held by vdi-1");
    assert!(
        matches!(err, AttachError::OwnedByOther { ref owner, .. } if owner == "vdi-1"),
        "{err}"
    );
    detach(
        &engine,
        &libvirt,
        &dev.uuid,
        "vdi-1",
        AttachOptions::default(),
    )
    .expect("detach");
    let calls = libvirt.calls();
    let seen: Vec<(&str, bool)> = calls
        .iter()
        .map(|c| (c.op, c.xml.contains(r#"function="0x0" multifunction="on""#)))
        .collect();
    // Function 0 last in (the guest scans the slot when it appears) and first out.
    assert_eq!(
        seen,
        vec![
            ("attach", false),
            ("attach", true),
            ("detach", true),
            ("detach", false)
        ]
    );
    for c in &calls {
        assert!(c.xml.contains(r#"managed="no""#), "{}", c.xml);
        common::libvirt::assert_valid_hostdev(&c.xml);
    }
}

#[test]
fn a_shut_off_domain_gets_config_only_and_live_is_refused() {
    let (_h, engine, uuid) = engine();
    let libvirt = FakeLibvirt::default().with_domain("off", SHUT_OFF);
    let err = attach(
        &engine,
        &libvirt,
        &uuid,
        "off",
        AttachOptions {
            live: Some(true),
            config: None,
        },
    )
    .expect_err("live on a shut-off domain");
    assert!(matches!(err, AttachError::InvalidArgument(_)), "{err}");
    attach(&engine, &libvirt, &uuid, "off", AttachOptions::default()).expect("attach");
    let calls = libvirt.calls();
    assert_eq!(calls.len(), 1);
    assert!(!calls[0].impact.live && calls[0].impact.config);
}

#[test]
fn a_device_of_another_domain_is_refused_and_nothing_is_sent() {
    let (_h, engine, uuid) = engine();
    let libvirt = FakeLibvirt::default()
        .with_domain("a", RUNNING)
        .with_domain("b", RUNNING);
    attach(&engine, &libvirt, &uuid, "a", AttachOptions::default()).expect("attach to a");
    let err = attach(&engine, &libvirt, &uuid, "b", AttachOptions::default()).expect_err("b");
    assert!(matches!(err, AttachError::OwnedByOther { .. }), "{err}");
    let err = detach(&engine, &libvirt, &uuid, "b", AttachOptions::default()).expect_err("b");
    assert!(matches!(err, AttachError::OwnedByOther { .. }), "{err}");
    assert_eq!(libvirt.calls().len(), 1);
    let dev = detach(&engine, &libvirt, &uuid, "a", AttachOptions::default()).expect("detach");
    assert_eq!(dev.owner, "");
    assert_eq!(libvirt.calls()[1].op, "detach");
    common::libvirt::assert_valid_hostdev(&libvirt.calls()[1].xml);
    attach(&engine, &libvirt, &uuid, "b", AttachOptions::default()).expect("free again");
}

fn device_owned_by(engine: &Engine, owner: &str) -> String {
    engine
        .create_device(&CreateRequest {
            type_query: "mtty-1".into(),
            owner: owner.into(),
            ..Default::default()
        })
        .expect("device")
        .uuid
}

/// Issue #22 item 5: the owner tag is a tag, not an attachment. Which domain holds a device
/// is libvirt's to say.
#[test]
fn an_owner_tag_is_no_attachment_and_a_pools_device_goes_to_its_guest() {
    let (_h, engine, _) = engine();
    let libvirt = FakeLibvirt::default()
        .with_domain("win10-vm", RUNNING)
        .with_domain("vdi-1", RUNNING)
        .with_domain("vdi-2", RUNNING);

    // docs/api.md's AttachDevice: created for a domain, then attached to it.
    let tagged = device_owned_by(&engine, "win10-vm");
    let dev = attach(
        &engine,
        &libvirt,
        &tagged,
        "win10-vm",
        AttachOptions::default(),
    )
    .expect("attach to the domain of the owner tag");
    assert_eq!(dev.owner, "win10-vm");

    // A layout pool's device is handed to a guest: its owner moves to the guest.
    let pooled = device_owned_by(&engine, "pool-day");
    let dev = attach(
        &engine,
        &libvirt,
        &pooled,
        "vdi-1",
        AttachOptions::default(),
    )
    .expect("a pool's device attaches to a guest");
    assert_eq!(dev.owner, "vdi-1");
    assert_eq!(engine.device(&pooled).expect("known").owner, "vdi-1");

    // Attached to vdi-1, it is never taken away by another domain, whatever its tag says.
    engine
        .set_owner(&pooled, "pool-day")
        .expect("tag changed back");
    let sent = libvirt.calls().len();
    let err = attach(
        &engine,
        &libvirt,
        &pooled,
        "vdi-2",
        AttachOptions::default(),
    )
    .expect_err("held by vdi-1");
    match &err {
        AttachError::OwnedByOther { owner, .. } => assert_eq!(owner, "vdi-1", "{err}"),
        other => panic!("expected OwnedByOther, got {other}"),
    }
    let err = detach(
        &engine,
        &libvirt,
        &pooled,
        "vdi-2",
        AttachOptions::default(),
    )
    .expect_err("not vdi-2's");
    assert!(matches!(err, AttachError::OwnedByOther { .. }), "{err}");
    assert_eq!(libvirt.calls().len(), sent, "nothing sent to libvirt");

    // Detached, it is free; then it goes to vdi-2.
    let dev = detach(
        &engine,
        &libvirt,
        &pooled,
        "vdi-1",
        AttachOptions::default(),
    )
    .expect("detach");
    assert_eq!(dev.owner, "");
    let dev = attach(
        &engine,
        &libvirt,
        &pooled,
        "vdi-2",
        AttachOptions::default(),
    )
    .expect("free again");
    assert_eq!(dev.owner, "vdi-2");
}

/// The same through libvirt itself (its test driver, with a node file that holds a domain
/// with the device as a hostdev): vgpud asks libvirt which domain holds a device.
#[test]
fn libvirt_says_which_domain_holds_a_device() {
    let (h, engine, _) = engine();
    let held = device_owned_by(&engine, "pool-day");
    let free = device_owned_by(&engine, "holder");
    let node = h.path("libvirt-test-node.xml");
    let domain = |name: &str, n: u32, hostdev: &str| {
        format!(
            "<domain type='test'><name>{name}</name>\
             <uuid>6f1a9c2e-8b3d-4e5f-a061-00000000000{n}</uuid>\
             <memory>1048576</memory><vcpu>1</vcpu><os><type>hvm</type></os>\
             <devices>{hostdev}</devices></domain>"
        )
    };
    let hostdev = format!(
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>\
         <source><address uuid='{held}'/></source></hostdev>"
    );
    std::fs::write(
        &node,
        format!(
            "<node>{}{}{}</node>",
            domain("holder", 1, &hostdev),
            domain("other", 2, ""),
            // Defined, shut off (the test driver's own run state, 5: VIR_DOMAIN_SHUTOFF).
            domain("stopped", 3, "").replace(
                "<domain type='test'>",
                "<domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'><test:runstate>5</test:runstate>"
            )
        ),
    )
    .expect("node file");
    let libvirt = VirtConnection::new(&format!("test://{}", node.display()));
    // The domains that run, in one call (the reclaim's look): not the one shut off.
    let running = vgpud::libvirt::LibvirtOps::active_domains(&libvirt).expect("list");
    assert_eq!(
        running,
        ["holder", "other"].map(String::from).into_iter().collect(),
        "{running:?}"
    );
    let err = attach(&engine, &libvirt, &held, "other", AttachOptions::default())
        .expect_err("held by domain holder");
    match &err {
        AttachError::OwnedByOther { owner, .. } => assert_eq!(owner, "holder", "{err}"),
        other => panic!("expected OwnedByOther, got {other}"),
    }
    assert_eq!(engine.device(&held).expect("known").owner, "pool-day");
    // A device tagged "holder" that no domain holds goes on to libvirt's attach (which the
    // test driver does not support): the tag is no attachment.
    let err = attach(&engine, &libvirt, &free, "other", AttachOptions::default())
        .expect_err("the test driver cannot attach");
    assert!(
        matches!(err, AttachError::Libvirt(LibvirtError::Refused { .. })),
        "{err}"
    );
}

#[test]
fn libvirt_errors_keep_libvirts_message_and_change_nothing() {
    let (_h, engine, uuid) = engine();
    let libvirt = FakeLibvirt::default().with_domain("vdi-1", RUNNING);
    let err =
        attach(&engine, &libvirt, &uuid, "nope", AttachOptions::default()).expect_err("no domain");
    assert!(
        matches!(err, AttachError::Libvirt(LibvirtError::NoDomain { .. })),
        "{err}"
    );
    libvirt.refuse_with("Requested operation is not valid: mdev device is in use");
    let err =
        attach(&engine, &libvirt, &uuid, "vdi-1", AttachOptions::default()).expect_err("refused");
    assert!(err.to_string().contains("mdev device is in use"), "{err}");
    assert_eq!(engine.device(&uuid).expect("known").owner, "");
    let err =
        attach(&engine, &libvirt, "bad", "vdi-1", AttachOptions::default()).expect_err("bad uuid");
    assert!(matches!(err, AttachError::InvalidArgument(_)), "{err}");
    let err =
        attach(&engine, &libvirt, &uuid, "", AttachOptions::default()).expect_err("bad domain");
    assert!(matches!(err, AttachError::InvalidArgument(_)), "{err}");
    // The domain becomes the owner: the owner rule holds (nothing that shows as another name).
    for hidden in ["vdi-1 ", "vdi\u{202e}1", "vdi\u{200b}-1"] {
        let err = attach(&engine, &libvirt, &uuid, hidden, AttachOptions::default())
            .expect_err("a name that shows as another");
        assert!(
            matches!(err, AttachError::InvalidArgument(_)),
            "{hidden:?}: {err}"
        );
    }
    assert_eq!(engine.device(&uuid).expect("known").owner, "");
}

#[tokio::test]
async fn over_dbus_libvirt_errors_are_named_and_the_daemon_serves_without_libvirt() {
    let host = TestHost::new(&["mtty"]);
    let bus = TestBus::start(Policy::Open);
    // libvirt's test driver: the domain "test" exists, attach is not supported.
    let mut daemon = Daemon::start_args(&bus, &host, &["--libvirt-uri", "test:///default"]).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    let (uuid, _) = m.create_device("mtty-1", opts(&[])).await.expect("create");
    let attach_to = |domain: &'static str| {
        let m = m.clone();
        let uuid = uuid.clone();
        async move { m.attach_device(&uuid, domain, HashMap::new()).await }
    };
    let err = attach_to("test")
        .await
        .expect_err("the test driver cannot attach");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Libvirt", "{err}");
    assert!(error_message(&err).contains("libvirt refused"), "{err}");
    let err = attach_to("no-such-domain").await.expect_err("no domain");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound", "{err}");
    daemon.stop();

    // No libvirt at all: vgpud serves, and attach says why it cannot.
    let _daemon = Daemon::start_args(
        &bus,
        &host,
        &[
            "--libvirt-uri",
            "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
        ],
    )
    .await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    assert!(!m.list_gpus().await.expect("serves").is_empty());
    let err = m
        .attach_device(&uuid, "vdi-1", HashMap::new())
        .await
        .expect_err("no libvirt");
    assert_eq!(
        error_name(&err),
        "org.vgpud1.Error.LibvirtUnavailable",
        "{err}"
    );
}

#[tokio::test]
async fn vgpud_reconnects_when_libvirtd_comes_back() {
    if !common::skip::require_root(
        "vgpud_reconnects_when_libvirtd_comes_back",
        "a private libvirtd runs only as root",
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut libvirtd = Libvirtd::start(dir.path());
    let host = TestHost::new(&["mtty"]);
    let bus = TestBus::start(Policy::Open);
    let uri = Libvirtd::uri(dir.path());
    let _daemon = Daemon::start_args(&bus, &host, &["--libvirt-uri", &uri]).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    let (uuid, _) = m.create_device("mtty-1", opts(&[])).await.expect("create");
    let attach = || m.attach_device(&uuid, "test", HashMap::new());

    // Through libvirtd to its test driver: the domain is found, attach is not supported.
    let err = attach().await.expect_err("the test driver cannot attach");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Libvirt", "{err}");

    libvirtd.kill();
    let err = attach().await.expect_err("libvirtd is gone");
    assert_eq!(
        error_name(&err),
        "org.vgpud1.Error.LibvirtUnavailable",
        "{err}"
    );

    let _back = Libvirtd::start(dir.path());
    let err = attach()
        .await
        .expect_err("the test driver still cannot attach");
    assert_eq!(
        error_name(&err),
        "org.vgpud1.Error.Libvirt",
        "vgpud connected again: {err}"
    );
    assert!(error_message(&err).contains("test"), "{err}");
}
