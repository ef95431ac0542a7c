//! The libvirt hook, fed recorded invocations (libvirt's argument order, the domain XML as
//! libvirt stores it on stdin) against a running vgpud on a simulated host, over a private
//! bus given as DBUS_SYSTEM_BUS_ADDRESS.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use common::daemon::{vgpud_bin, Daemon, Policy, TestBus, TestHost};
use common::proxy::{bool_opts, opts, ManagerProxy};

const DEV1: &str = "8e8e8e8e-0000-4000-8000-000000000001";
const DEV2: &str = "8e8e8e8e-0000-4000-8000-000000000002";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/hook")
            .join(name),
    )
    .expect("fixture")
}

/// Runs `vgpud libvirt-hook ARGS` with `xml` on stdin; returns the output and the time.
fn hook(bus: &TestBus, args: &[&str], xml: &str) -> (Output, f64) {
    let started = Instant::now();
    let mut child = Command::new(vgpud_bin())
        .arg("libvirt-hook")
        .args(args)
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the hook");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(xml.as_bytes());
    }
    let out = child.wait_with_output().expect("hook output");
    (out, started.elapsed().as_secs_f64() * 1000.0)
}

/// Runs the hook and checks it succeeded silently (nothing on stdout); returns the time.
fn hook_ok(bus: &TestBus, args: &[&str], xml: &str) -> f64 {
    let (out, ms) = hook(bus, args, xml);
    assert!(
        out.status.success(),
        "hook {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "a hook prints nothing on stdout");
    ms
}

async fn listed(m: &ManagerProxy<'_>) -> HashMap<String, (String, String)> {
    m.list_devices()
        .await
        .expect("ListDevices")
        .into_iter()
        .map(|d| (d.0, (d.1, d.3)))
        .collect()
}

#[tokio::test]
async fn prepare_creates_the_domains_vgpus_and_release_removes_them() {
    let host = TestHost::new(&["nvidia-turing"]);
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start(&bus, &host).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    let xml = fixture("vdi-2.xml");

    // Operations the hook does not act on change nothing.
    for (op, sub) in [("start", "begin"), ("started", "begin"), ("stopped", "end")] {
        hook_ok(&bus, &["vdi-2", op, sub, "-"], &xml);
    }
    assert!(listed(&m).await.is_empty());

    let ms = hook_ok(&bus, &["vdi-2", "prepare", "begin", "-"], &xml);
    eprintln!("libvirt-hook prepare begin (two vGPUs created): {ms:.1} ms");
    let devices = listed(&m).await;
    for uuid in [DEV1, DEV2] {
        let (parent, owner) = devices.get(uuid).expect("created with the uuid of the XML");
        assert_eq!(parent, "0000:3b:00.0", "on the GPU the metadata names");
        assert_eq!(owner, "vdi-2");
        assert!(host.path(&format!("sys/bus/mdev/devices/{uuid}")).exists());
        assert!(
            !host
                .path(&format!("etc/mdevctl.d/0000:3b:00.0/{uuid}"))
                .exists(),
            "just-in-time devices are transient"
        );
    }

    // A second prepare (a restart of the domain) finds them there.
    hook_ok(&bus, &["vdi-2", "prepare", "begin", "-"], &xml);

    let ms = hook_ok(&bus, &["vdi-2", "release", "end", "-"], &xml);
    eprintln!("libvirt-hook release end (two vGPUs removed): {ms:.1} ms");
    assert!(listed(&m).await.is_empty());
}

#[tokio::test]
async fn defined_devices_are_started_and_kept_and_a_full_gpu_is_avoided() {
    let host = TestHost::new(&["nvidia-turing"]);
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start(&bus, &host).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    // DEV1 is a persistent device on the second GPU, defined and stopped; DEV2 does not
    // exist, and the GPU its metadata names is full of another size.
    let mut o = opts(&[
        ("uuid", DEV1),
        ("parent", "0000:d8:00.0"),
        ("owner", "vdi-2"),
    ]);
    o.extend(bool_opts(&[("autostart", false)]));
    m.create_device("RTX6000-4Q", o).await.expect("persistent");
    m.stop_device(DEV1, HashMap::new()).await.expect("stop");
    m.create_device("RTX6000-1Q", opts(&[("parent", "0000:3b:00.0")]))
        .await
        .expect("1Q fills the GPU for 4Q");

    let xml = fixture("vdi-2.xml");
    hook_ok(&bus, &["vdi-2", "prepare", "begin", "-"], &xml);
    let devices = listed(&m).await;
    assert_eq!(
        devices[DEV1].0, "0000:d8:00.0",
        "started where it is defined"
    );
    assert_eq!(devices[DEV2].0, "0000:d8:00.0", "any GPU with room");
    assert!(host.path(&format!("sys/bus/mdev/devices/{DEV1}")).exists());

    hook_ok(&bus, &["vdi-2", "release", "end", "-"], &xml);
    let devices = listed(&m).await;
    assert!(devices.contains_key(DEV1), "persistent devices are kept");
    assert!(!devices.contains_key(DEV2), "the transient one is removed");
}

#[tokio::test]
async fn a_device_the_hook_cannot_provide_stops_the_domain_with_a_message() {
    let host = TestHost::new(&["nvidia-turing"]);
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start(&bus, &host).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");

    let (out, _) = hook(
        &bus,
        &["vdi-nometa", "prepare", "begin", "-"],
        &fixture("vdi-nometa.xml"),
    );
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(DEV1) && err.contains("metadata"), "{err}");

    // Both GPUs full of 1Q: no room for a 4Q anywhere.
    for _ in 0..48 {
        m.create_device("RTX6000-1Q", opts(&[]))
            .await
            .expect("fill");
    }
    let (out, _) = hook(
        &bus,
        &["vdi-2", "prepare", "begin", "-"],
        &fixture("vdi-2.xml"),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NoCapacity"), "{err}");
    assert!(!listed(&m).await.contains_key(DEV1));

    let (out, _) = hook(&bus, &["vdi-2", "prepare"], "");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("usage: vgpud libvirt-hook") && err.contains("got 2 arguments"),
        "{err}"
    );
    let (out, _) = hook(&bus, &["vdi-2", "prepare", "begin", "-"], "<domain><name>");
    assert!(!out.status.success(), "malformed XML is refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reading the domain XML of vdi-2"), "{err}");
}

#[tokio::test]
async fn without_vgpud_the_hook_fails_clearly() {
    let bus = TestBus::start(Policy::Open);
    let (out, _) = hook(
        &bus,
        &["vdi-2", "prepare", "begin", "-"],
        &fixture("vdi-2.xml"),
    );
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    // Every message of the hook names vgpud: check that this one says the bus has no vgpud.
    assert!(
        err.contains("cannot reach vgpud on the system bus")
            && err.contains("org.freedesktop.DBus.Error.ServiceUnknown")
            && err.contains("org.vgpud1"),
        "{err}"
    );
}

/// The walkthrough of docs/integrations.md ("A walkthrough"): render a VDI domain for two
/// vGPUs, validate it with libvirt's schema and its test driver (through virsh), then let
/// the hook recreate and remove the devices from the rendered XML alone.
#[tokio::test]
async fn a_rendered_domain_validates_in_libvirt_and_drives_the_hook() {
    let host = TestHost::new(&["nvidia-turing"]);
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start(&bus, &host).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    let (a, _) = m.create_device("RTX6000-2Q", opts(&[])).await.expect("a");
    let (b, _) = m.create_device("RTX6000-2Q", opts(&[])).await.expect("b");
    let mut o: HashMap<&str, zbus::Variant<'_>> = HashMap::new();
    o.insert("memory_mib", zbus::Variant::from(8192u32));
    o.insert("vcpus", zbus::Variant::from(4u32));
    o.insert(
        "disk",
        zbus::Variant::from("/var/lib/libvirt/images/vdi-7.qcow2"),
    );
    o.insert("network", zbus::Variant::from("default"));
    o.insert("uefi", zbus::Variant::from(true));
    o.insert("graphics", zbus::Variant::from("spice"));
    let xml = m
        .render_domain("vdi-7", &[a.as_str(), b.as_str()], o)
        .await
        .expect("RenderDomain");
    common::libvirt::assert_valid_domain(&xml);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("vdi-7.xml");
    std::fs::write(&file, &xml).expect("write");
    let virsh = Command::new("virsh")
        .args(["-c", "test:///default"])
        .arg(format!(
            "define --validate {}; dumpxml vdi-7",
            file.display()
        ))
        .output()
        .expect("virsh (apt-get install libvirt-clients)");
    let dumped = String::from_utf8_lossy(&virsh.stdout);
    assert!(
        virsh.status.success(),
        "{}",
        String::from_utf8_lossy(&virsh.stderr)
    );
    assert!(dumped.contains(&a) && dumped.contains(&b), "{dumped}");
    assert!(
        dumped.contains("http://vgpud.org/xmlns/domain/1"),
        "metadata kept: {dumped}"
    );

    // The devices go away; at the next start of the domain the hook brings them back.
    for u in [&a, &b] {
        m.remove_device(u, HashMap::new()).await.expect("remove");
    }
    hook_ok(&bus, &["vdi-7", "prepare", "begin", "-"], &dumped);
    let devices = listed(&m).await;
    assert!(
        devices.contains_key(&a) && devices.contains_key(&b),
        "{devices:?}"
    );
    hook_ok(&bus, &["vdi-7", "release", "end", "-"], &dumped);
    assert!(listed(&m).await.is_empty());

    // Bad options and unknown devices are named errors.
    for (options, device, expected) in [
        (opts(&[("graphics", "rdp")]), None, "InvalidArgument"),
        (
            opts(&[("template", "../../etc/passwd")]),
            None,
            "InvalidArgument",
        ),
        (
            opts(&[]),
            Some("0d0d0d0d-0000-4000-8000-000000000001"),
            "NotFound",
        ),
    ] {
        let uuids: Vec<&str> = device.into_iter().collect();
        let err = m
            .render_domain("vdi-7", &uuids, options)
            .await
            .expect_err("refused");
        assert_eq!(
            common::proxy::error_name(&err),
            format!("org.vgpud1.Error.{expected}")
        );
    }
}

#[tokio::test]
async fn user_templates_in_etc_vgpud_templates_are_used_by_name() {
    let host = TestHost::new(&["nvidia-turing"]);
    let dir = host.path("etc/vgpud/templates");
    std::fs::create_dir_all(&dir).expect("dir");
    let builtin = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("xml-templates/domain-vdi.xml"),
    )
    .expect("built-in template");
    let mine = builtin.replace("<clock offset=\"utc\"/>", "<clock offset=\"localtime\"/>");
    assert_ne!(mine, builtin, "the edit applies");
    std::fs::write(dir.join("windows.xml"), mine).expect("write");
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start(&bus, &host).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    let (a, _) = m.create_device("RTX6000-2Q", opts(&[])).await.expect("a");
    let mut o: HashMap<&str, zbus::Variant<'_>> = HashMap::new();
    o.insert("template", zbus::Variant::from("windows"));
    let xml = m
        .render_domain("win-1", &[a.as_str()], o)
        .await
        .expect("RenderDomain with a user template");
    assert!(xml.contains("localtime"), "{xml}");
    common::libvirt::assert_valid_domain(&xml);
    let mut o: HashMap<&str, zbus::Variant<'_>> = HashMap::new();
    o.insert("template", zbus::Variant::from("nope"));
    let err = m
        .render_domain("win-1", &[a.as_str()], o)
        .await
        .expect_err("unknown template");
    assert_eq!(common::proxy::error_name(&err), "org.vgpud1.Error.NotFound");
}

/// A domain with `n` RTX6000-1Q hostdevs (metadata naming the first GPU), the UUIDs
/// `9e9e9e9e-0000-4000-8000-00000000NNNN`.
fn domain_with_hostdevs(name: &str, n: u32) -> (String, Vec<String>) {
    let uuids: Vec<String> = (1..=n)
        .map(|i| format!("9e9e9e9e-0000-4000-8000-{i:012}"))
        .collect();
    let meta: String = uuids
        .iter()
        .map(|u| {
            format!(
                "<vgpud:device uuid='{u}' kind='mdev' type='nvidia-256' parent='0000:3b:00.0'/>"
            )
        })
        .collect();
    let hostdevs: String = uuids
        .iter()
        .map(|u| {
            format!(
                "<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'>\
                 <source><address uuid='{u}'/></source></hostdev>"
            )
        })
        .collect();
    let xml = format!(
        "<domain type='kvm'><name>{name}</name><metadata>\
         <vgpud:devices xmlns:vgpud=\"http://vgpud.org/xmlns/domain/1\">{meta}</vgpud:devices>\
         </metadata><devices>{hostdevs}</devices></domain>"
    );
    (xml, uuids)
}

/// Issue #22 item 7: a prepare that fails takes back the devices it made; what existed
/// before (another guest's device, a device of this domain that was there) is untouched.
#[tokio::test]
async fn a_failed_prepare_removes_what_it_made() {
    let host = TestHost::new(&["nvidia-turing"]);
    let bus = TestBus::start(Policy::Open);
    let _d = Daemon::start(&bus, &host).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    // 60 hostdevs of 1Q; the two GPUs take 48 in all.
    let (xml, uuids) = domain_with_hostdevs("vdi-big", 60);
    let (other, _) = m
        .create_device("RTX6000-1Q", opts(&[("owner", "someone-else")]))
        .await
        .expect("another guest's device");
    let mut o = opts(&[("uuid", uuids[0].as_str()), ("owner", "vdi-big")]);
    o.extend(bool_opts(&[("persistent", false)]));
    m.create_device("RTX6000-1Q", o)
        .await
        .expect("one of the domain's devices, there before the hook");
    // And one defined and stopped: the hook starts it, and stops it again when it fails.
    let mut o = opts(&[("uuid", uuids[1].as_str()), ("owner", "vdi-big")]);
    o.extend(bool_opts(&[("autostart", false)]));
    m.create_device("RTX6000-1Q", o).await.expect("defined");
    m.stop_device(&uuids[1], HashMap::new())
        .await
        .expect("stopped");
    let before = listed(&m).await;
    assert_eq!(before.len(), 3);

    let (out, ms) = hook(&bus, &["vdi-big", "prepare", "begin", "-"], &xml);
    eprintln!("libvirt-hook prepare begin that fails (45 made, then taken back): {ms:.1} ms");
    assert!(!out.status.success(), "48 1Q cannot hold 60");
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NoCapacity"), "{err}");
    let after = listed(&m).await;
    let left: Vec<&String> = after.keys().filter(|u| !before.contains_key(*u)).collect();
    assert!(
        left.is_empty(),
        "{} devices the failed prepare made are left: {left:?}",
        left.len()
    );
    assert_eq!(after, before, "what was there before is untouched");
    assert!(after.contains_key(&other) && after.contains_key(&uuids[0]));
    assert!(host
        .path(&format!("sys/bus/mdev/devices/{}", uuids[0]))
        .exists());
    for u in &uuids[1..] {
        assert!(!host.path(&format!("sys/bus/mdev/devices/{u}")).exists());
    }
}
