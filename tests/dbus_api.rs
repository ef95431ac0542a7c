//! The org.vgpud1 API end to end: a real dbus-daemon, a real vgpud process on a simulated
//! host, driven by a zbus proxy, busctl and gdbus.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::daemon::{snapshot, Daemon, Policy, TestBus, TestHost};
use common::proxy::{error_message, error_name, opts, DeviceProxy, GpuProxy, ManagerProxy};
use common::setup::Setup;
use zbus::Variant;

const MIXED: &[&str] = &["mixed"];

#[tokio::test]
async fn discovery_lists_gpus_types_and_ignores_other_pci_devices() {
    let s = Setup::new(MIXED).await;
    let m = s.manager().await;
    let gpus = m.list_gpus().await.expect("ListGpus");
    let nvidia: Vec<_> = gpus.iter().filter(|g| g.2 == "nvidia").collect();
    assert_eq!(nvidia.len(), 2, "two NVIDIA GPUs: {gpus:?}");
    assert!(nvidia.iter().all(|g| g.1.contains("RTX 6000")), "{gpus:?}");
    assert!(nvidia.iter().all(|g| g.3 == "mdev,passthrough"), "{gpus:?}");
    assert!(
        gpus.iter().any(|g| g.2 == "i915"),
        "Intel iGPU listed: {gpus:?}"
    );
    assert!(
        gpus.iter().any(|g| g.0 == "mtty"),
        "mtty parent listed: {gpus:?}"
    );
    for g in &gpus {
        assert_ne!(g.2, "e1000e", "a NIC is not a GPU: {gpus:?}");
        assert!(g.4.as_str().starts_with("/org/vgpud1/gpu/"), "{g:?}");
    }

    // Gpu objects carry the PCI facts.
    let gpu = GpuProxy::builder(&s.conn)
        .path(nvidia[0].4.clone())
        .build()
        .await
        .expect("gpu proxy");
    assert_eq!(gpu.address().await.expect("Address"), nvidia[0].0);
    assert_eq!(gpu.vendor_id().await.expect("VendorId"), 0x10de);
    assert!(gpu.numa_node().await.expect("NumaNode") >= 0);
    assert!(gpu.iommu_group().await.expect("IommuGroup") >= 0);
    let numa: std::collections::BTreeSet<i32> = {
        let mut set = std::collections::BTreeSet::new();
        for g in &nvidia {
            let p = GpuProxy::builder(&s.conn)
                .path(g.4.clone())
                .build()
                .await
                .expect("gpu");
            set.insert(p.numa_node().await.expect("NumaNode"));
        }
        set
    };
    assert_eq!(numa.len(), 2, "the two NVIDIA GPUs sit on two NUMA nodes");

    // Types: framebuffer in bytes, vendor max and live availability.
    let types = m.list_types().await.expect("ListTypes");
    let q4: Vec<_> = types
        .iter()
        .filter(|t| t.2.ends_with("RTX6000-4Q"))
        .collect();
    assert_eq!(q4.len(), 2, "{types:?}");
    for t in &q4 {
        assert!(t.1.starts_with("nvidia-"));
        assert_eq!(t.3, 4 << 30, "4Q has 4 GiB of framebuffer");
        assert_eq!(t.4, 6, "24 GiB / 4 GiB");
        assert_eq!(t.5, 6);
    }
    let gvt: Vec<_> = types
        .iter()
        .filter(|t| t.1.starts_with("i915-GVTg"))
        .collect();
    assert_eq!(
        gvt.len(),
        2,
        "a 256 MB aperture shows V5_4 and V5_8 only: {gvt:?}"
    );
    let mtty: Vec<_> = types.iter().filter(|t| t.0 == "mtty").collect();
    assert_eq!(mtty.len(), 2);
    assert!(
        mtty.iter().all(|t| t.3 == 0 && t.4 == 0),
        "unknown vendor: fields empty"
    );
}

#[tokio::test]
async fn create_list_render_remove_with_zbus() {
    let s = Setup::new(MIXED).await;
    let m = s.manager().await;
    let mut created = m.receive_device_created().await.expect("signal stream");
    let mut removed = m.receive_device_removed().await.expect("signal stream");

    let (uuid, path) = m
        .create_device(
            "rtx6000-4q",
            opts(&[("owner", "vm-17"), ("params", "frame_rate_limiter=0")]),
        )
        .await
        .expect("CreateDevice");
    assert!(path.as_str().starts_with("/org/vgpud1/device/"));
    assert!(s
        .host
        .path(&format!("sys/bus/mdev/devices/{uuid}"))
        .exists());

    let sig = tokio::time::timeout(Duration::from_secs(5), futures_next(&mut created))
        .await
        .expect("DeviceCreated arrives");
    let args = sig.args().expect("args");
    assert_eq!(args.uuid, uuid);
    assert_eq!(args.path, path);

    let dev = DeviceProxy::builder(&s.conn)
        .path(path.clone())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("device");
    assert_eq!(dev.uuid().await.expect("Uuid"), uuid);
    assert_eq!(dev.owner().await.expect("Owner"), "vm-17");
    assert!(dev
        .type_name()
        .await
        .expect("TypeName")
        .ends_with("RTX6000-4Q"));
    assert!(dev.iommu_group().await.expect("IommuGroup") >= 0);
    let attrs = dev.attributes().await.expect("Attributes");
    assert_eq!(
        attrs.get("nvidia/vgpu_params").map(String::as_str),
        Some("frame_rate_limiter=0")
    );

    let listed = m.list_devices().await.expect("ListDevices");
    let mine: Vec<_> = listed.iter().filter(|d| d.0 == uuid).collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].3, "vm-17");
    assert_eq!(mine[0].4, path);

    let xml = m.get_hostdev_xml(&uuid).await.expect("GetHostdevXml");
    assert!(xml.contains("type=\"mdev\""), "{xml}");
    assert!(xml.contains(&format!("uuid=\"{uuid}\"")), "{xml}");
    common::libvirt::assert_valid_hostdev(&xml);
    let mut display = HashMap::new();
    display.insert("display", Variant::from(true));
    display.insert("ramfb", Variant::from(true));
    let xml = m
        .render_hostdev_xml(&uuid, display)
        .await
        .expect("RenderHostdevXml");
    assert!(
        xml.contains("display=\"on\"") && xml.contains("ramfb=\"on\""),
        "{xml}"
    );
    common::libvirt::assert_valid_hostdev(&xml);
    let mut bad = HashMap::new();
    bad.insert("ramfb", Variant::from(true));
    let err = m
        .render_hostdev_xml(&uuid, bad)
        .await
        .expect_err("ramfb needs display");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");

    m.remove_device(&uuid, HashMap::new())
        .await
        .expect("RemoveDevice");
    assert!(!s
        .host
        .path(&format!("sys/bus/mdev/devices/{uuid}"))
        .exists());
    let sig = tokio::time::timeout(Duration::from_secs(5), futures_next(&mut removed))
        .await
        .expect("DeviceRemoved arrives");
    assert_eq!(sig.args().expect("args").uuid, uuid);
    assert!(m
        .list_devices()
        .await
        .expect("ListDevices")
        .iter()
        .all(|d| d.0 != uuid));
    let gone = dev.uuid().await;
    assert!(gone.is_err(), "the device object is gone");
}

async fn futures_next<S: futures_util::Stream + Unpin>(s: &mut S) -> S::Item {
    use futures_util::StreamExt;
    s.next().await.expect("stream ended")
}

#[tokio::test]
async fn busctl_and_gdbus_drive_the_api() {
    let s = Setup::new(MIXED).await;
    let reply = s
        .bus
        .busctl_call(
            "/org/vgpud1",
            "org.vgpud1.Manager",
            "CreateDevice",
            &["sa{sv}", "RTX6000-2B", "1", "owner", "s", "busctl-vm"],
        )
        .expect("busctl CreateDevice");
    let uuid = reply["data"][0].as_str().expect("uuid").to_string();
    let path = reply["data"][1].as_str().expect("path").to_string();

    let devices = s
        .bus
        .busctl_call("/org/vgpud1", "org.vgpud1.Manager", "ListDevices", &[])
        .expect("busctl ListDevices");
    let rows = devices["data"][0].as_array().expect("array");
    assert!(
        rows.iter()
            .any(|r| r[0] == uuid.as_str() && r[3] == "busctl-vm"),
        "{devices}"
    );

    let owner = s.bus.busctl(&[
        "--json=short",
        "get-property",
        "org.vgpud1",
        &path,
        "org.vgpud1.Device",
        "Owner",
    ]);
    assert!(owner.status.success());
    let owner: serde_json::Value = serde_json::from_slice(&owner.stdout).expect("json");
    assert_eq!(owner["data"], "busctl-vm");

    let xml = s
        .bus
        .busctl_call(
            "/org/vgpud1",
            "org.vgpud1.Manager",
            "GetHostdevXml",
            &["s", &uuid],
        )
        .expect("busctl GetHostdevXml");
    assert!(xml["data"][0].as_str().expect("xml").contains(&uuid));

    // gdbus: GVariant text syntax.
    let out = s
        .bus
        .gdbus_call("CreateDevice", &["GVTg_V5_4", "{'owner': <'gdbus-vm'>}"])
        .expect("gdbus CreateDevice");
    assert!(out.contains("/org/vgpud1/device/"), "{out}");
    let gdbus_uuid = out.split('\'').nth(1).expect("uuid in reply").to_string();
    s.bus
        .gdbus_call("RemoveDevice", &[&gdbus_uuid, "{}"])
        .expect("gdbus RemoveDevice");

    // Errors come out named for busctl too.
    let err = s
        .bus
        .busctl_call(
            "/org/vgpud1",
            "org.vgpud1.Manager",
            "RemoveDevice",
            &["sa{sv}", "not-a-uuid", "0"],
        )
        .expect_err("malformed uuid");
    assert!(err.contains("not a UUID"), "{err}");
    s.bus
        .busctl_call(
            "/org/vgpud1",
            "org.vgpud1.Manager",
            "RemoveDevice",
            &["sa{sv}", &uuid, "0"],
        )
        .expect("busctl RemoveDevice");
}

#[tokio::test]
async fn nvidia_equal_size_rule_and_placement() {
    let s = Setup::new(MIXED).await;
    let m = s.manager().await;
    let nvidia = s.gpus_with_driver("nvidia").await;
    assert_eq!(nvidia.len(), 2);

    // Without a pin, a second 4Q goes to the GPU already running 4Q.
    let (a, _) = m
        .create_device("RTX6000-4Q", opts(&[]))
        .await
        .expect("first 4Q");
    let (b, _) = m
        .create_device("RTX6000-4Q", opts(&[]))
        .await
        .expect("second 4Q");
    let devices = m.list_devices().await.expect("ListDevices");
    let parent = |u: &str| {
        devices
            .iter()
            .find(|d| d.0 == u)
            .map(|d| d.1.clone())
            .expect("listed")
    };
    let busy_gpu = parent(&a);
    assert_eq!(
        parent(&b),
        busy_gpu,
        "packs onto the GPU already running the type"
    );
    let free_gpu = nvidia
        .iter()
        .find(|g| **g != busy_gpu)
        .expect("other gpu")
        .clone();

    // That GPU now only offers 4Q-sized types.
    let types = m.list_types().await.expect("ListTypes");
    let on_busy: Vec<_> = types.iter().filter(|t| t.0 == busy_gpu).collect();
    assert!(
        on_busy.iter().any(|t| t.3 == 4 << 30) && on_busy.iter().any(|t| t.3 != 4 << 30),
        "the busy GPU lists its 4 GiB type and other sizes: {on_busy:?}"
    );
    for t in on_busy {
        if t.3 == 4 << 30 {
            assert_eq!(t.5, t.4 - 2, "{t:?}");
        } else {
            assert_eq!(
                t.5, 0,
                "other sizes read 0 under the equal-size rule: {t:?}"
            );
        }
    }

    // A 1Q pinned there is refused with a reason; unpinned it lands on the free GPU.
    let err = m
        .create_device("RTX6000-1Q", opts(&[("parent", busy_gpu.as_str())]))
        .await
        .expect_err("1Q next to 4Q");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NoCapacity");
    let msg = error_message(&err);
    assert!(
        msg.contains(&busy_gpu) && msg.contains("framebuffer size"),
        "{msg}"
    );
    let (c, _) = m
        .create_device("RTX6000-1Q", opts(&[]))
        .await
        .expect("1Q elsewhere");
    let devices = m.list_devices().await.expect("ListDevices");
    assert_eq!(
        devices.iter().find(|d| d.0 == c).map(|d| d.1.clone()),
        Some(free_gpu.clone())
    );

    // Now no GPU can take a 2Q: the message names both GPUs and why.
    let err = m
        .create_device("RTX6000-2Q", opts(&[]))
        .await
        .expect_err("2Q");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NoCapacity");
    let msg = error_message(&err);
    assert!(msg.contains(&busy_gpu) && msg.contains(&free_gpu), "{msg}");

    // Removing the last vGPU of a GPU frees every size again.
    m.remove_device(&c, HashMap::new())
        .await
        .expect("remove 1Q");
    m.create_device("RTX6000-2Q", opts(&[]))
        .await
        .expect("2Q fits once the 1Q is gone");
}

#[tokio::test]
async fn concurrent_creates_never_over_commit() {
    let s = Setup::new(MIXED).await;
    let m = s.manager().await;
    let mut calls = Vec::new();
    for i in 0..40 {
        let m = m.clone();
        calls.push(tokio::spawn(async move {
            let owner = format!("vm-{i}");
            m.create_device("RTX6000-4Q", opts(&[("owner", owner.as_str())]))
                .await
        }));
    }
    let mut ok = 0;
    for c in calls {
        match c.await.expect("task") {
            Ok(_) => ok += 1,
            Err(e) => assert_eq!(error_name(&e), "org.vgpud1.Error.NoCapacity", "{e}"),
        }
    }
    assert_eq!(ok, 12, "two GPUs of six 4Q each");
    let on_disk = std::fs::read_dir(s.host.path("sys/bus/mdev/devices"))
        .expect("dir")
        .count();
    assert_eq!(on_disk, 12);
    let types = m.list_types().await.expect("ListTypes");
    assert!(types
        .iter()
        .filter(|t| t.2.ends_with("RTX6000-4Q"))
        .all(|t| t.5 == 0));
}

#[tokio::test]
async fn bad_input_gets_named_errors_and_writes_nothing() {
    let s = Setup::new(MIXED).await;
    let m = s.manager().await;
    let before = snapshot(&s.host.root);
    let huge = "x".repeat(1 << 20);
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("", vec![]),
        ("../nvidia-259", vec![]),
        ("nvidia-259/create", vec![]),
        ("..", vec![]),
        (huge.as_str(), vec![]),
        ("RTX6000-4Q", vec![("parent", "../../../../etc")]),
        ("RTX6000-4Q", vec![("parent", "/")]),
        ("RTX6000-4Q", vec![("parent", "")]),
        ("RTX6000-4Q", vec![("parent", huge.as_str())]),
        ("RTX6000-4Q", vec![("uuid", "not-a-uuid")]),
        (
            "RTX6000-4Q",
            vec![("uuid", "../../../../../../../../../../../../tmp/x")],
        ),
        ("RTX6000-4Q", vec![("uuid", "")]),
        ("RTX6000-4Q", vec![("owner", huge.as_str())]),
        ("RTX6000-4Q", vec![("params", "a=1\nb=2")]),
        ("RTX6000-4Q", vec![("color", "blue")]),
        ("GVTg_V5_4", vec![("params", "frame_rate_limiter=0")]),
    ];
    for (ty, o) in &cases {
        let err = m
            .create_device(ty, opts(o))
            .await
            .expect_err("bad input must fail");
        assert_eq!(
            error_name(&err),
            "org.vgpud1.Error.InvalidArgument",
            "type {:?} options {:?}: {err}",
            ty.chars().take(30).collect::<String>(),
            o.iter()
                .map(|(k, v)| (k, v.chars().take(30).collect::<String>()))
                .collect::<Vec<_>>()
        );
        assert!(
            error_message(&err).len() < 1000,
            "messages never echo huge input"
        );
    }
    // A wrongly typed option is refused too.
    let mut typed = HashMap::new();
    typed.insert("owner", Variant::from(7u32));
    let err = m
        .create_device("RTX6000-4Q", typed)
        .await
        .expect_err("typed");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    // Unknown things are NotFound, not InvalidArgument.
    let err = m
        .create_device("RTX9999-1Q", opts(&[]))
        .await
        .expect_err("unknown type");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound");
    let err = m
        .create_device("RTX6000-4Q", opts(&[("parent", "0000:ff:00.0")]))
        .await
        .expect_err("unknown parent");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound");
    let err = m
        .remove_device("a1b2c3d4-0000-4000-8000-000000000001", HashMap::new())
        .await
        .expect_err("unknown device");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound");
    let err = m
        .remove_device("../../x", HashMap::new())
        .await
        .expect_err("bad uuid");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    let err = m.get_hostdev_xml(&huge).await.expect_err("bad uuid");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    let err = m
        .remove_device(
            "a1b2c3d4-0000-4000-8000-000000000001",
            opts(&[("force", "yes")]),
        )
        .await
        .expect_err("unknown option");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");

    assert_eq!(snapshot(&s.host.root), before, "failed calls wrote nothing");
    let mut d = s.daemon;
    assert!(d.is_running(), "the daemon stays up");
}

#[tokio::test]
async fn duplicate_uuids_are_refused_as_exists() {
    let s = Setup::new(MIXED).await;
    let m = s.manager().await;
    let uuid = "a1b2c3d4-0000-4000-8000-0000000000aa";
    m.create_device("RTX6000-4Q", opts(&[("uuid", uuid)]))
        .await
        .expect("first");
    let err = m
        .create_device("mtty-1", opts(&[("uuid", uuid)]))
        .await
        .expect_err("dup");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Exists");
    // Upper case is the same UUID to the kernel.
    let err = m
        .create_device("RTX6000-4Q", opts(&[("uuid", &uuid.to_uppercase())]))
        .await
        .expect_err("dup upper");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Exists");
}

#[tokio::test]
async fn devices_made_by_other_tools_are_listed_and_adopted() {
    let host = TestHost::new(MIXED);
    // Another tool (mdevctl, say) made a device before vgpud started: write the kernel
    // interface the way it would, through the simulated kernel.
    let sim = vgpud::host::Host::simulated(&host.root);
    let before_uuid = "11111111-2222-4333-8444-555555555555";
    let create = host.path("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create");
    sim.write_attr(&create, before_uuid)
        .expect("external create");

    let bus = TestBus::start(Policy::Open);
    let _daemon = Daemon::start(&bus, &host).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("proxy");
    let listed = m.list_devices().await.expect("ListDevices");
    let found = listed
        .iter()
        .find(|d| d.0 == before_uuid)
        .expect("pre-existing device listed");
    assert_eq!(
        (found.1.as_str(), found.2.as_str(), found.3.as_str()),
        ("mtty", "mtty-2", "")
    );

    // One made while vgpud runs shows up in ListDevices (vgpud learns of it from its
    // uevent), with a signal.
    let mut created = m.receive_device_created().await.expect("stream");
    let during_uuid = "11111111-2222-4333-8444-666666666666";
    sim.write_attr(&create, during_uuid)
        .expect("external create");
    list_until(&m, |l| l.iter().any(|d| d.0 == during_uuid)).await;
    let sig = tokio::time::timeout(Duration::from_secs(5), futures_next(&mut created))
        .await
        .expect("signal");
    assert_eq!(sig.args().expect("args").uuid, during_uuid);

    // And vanishes when removed behind vgpud's back.
    sim.write_attr(
        &host.path(&format!("sys/bus/mdev/devices/{during_uuid}/remove")),
        "1",
    )
    .expect("external remove");
    list_until(&m, |l| l.iter().all(|d| d.0 != during_uuid)).await;
}

type Listed = Vec<(String, String, String, String, zbus::OwnedObjectPath)>;

/// Calls ListDevices until `check` holds; fails after 5 s.
async fn list_until(m: &ManagerProxy<'_>, check: impl Fn(&Listed) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let listed = m.list_devices().await.expect("ListDevices");
        if check(&listed) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "ListDevices never showed it: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

#[tokio::test]
async fn object_manager_and_properties_changed() {
    let s = Setup::new(MIXED).await;
    let om = zbus::fdo::ObjectManagerProxy::builder(&s.conn)
        .destination("org.vgpud1")
        .path("/org/vgpud1")
        .build()
        .await
        .expect("om");
    let objects = om.get_managed_objects().await.expect("GetManagedObjects");
    let gpu_objects = objects
        .values()
        .filter(|ifaces| ifaces.keys().any(|i| i.as_str() == "org.vgpud1.Gpu"))
        .count();
    assert!(
        gpu_objects >= 4,
        "two NVIDIA, one Intel, mtty: {gpu_objects}"
    );

    let mut added = om.receive_interfaces_added().await.expect("stream");
    let m = s.manager().await;
    let nvidia = s.gpus_with_driver("nvidia").await;
    let gpu_path = m
        .list_gpus()
        .await
        .expect("gpus")
        .into_iter()
        .find(|g| g.0 == nvidia[0])
        .expect("gpu")
        .4;
    let gpu = GpuProxy::builder(&s.conn)
        .path(gpu_path)
        .build()
        .await
        .expect("gpu");
    assert!(gpu.devices().await.expect("Devices").is_empty());
    let mut changes = gpu.receive_devices_changed().await;
    let (_, path) = m
        .create_device("RTX6000-4Q", opts(&[("parent", nvidia[0].as_str())]))
        .await
        .expect("create");
    let sig = tokio::time::timeout(Duration::from_secs(5), futures_next(&mut added))
        .await
        .expect("InterfacesAdded");
    assert_eq!(
        sig.args().expect("args").object_path.as_str(),
        path.as_str()
    );
    tokio::time::timeout(Duration::from_secs(5), futures_next(&mut changes))
        .await
        .expect("PropertiesChanged for Devices");
    assert_eq!(gpu.devices().await.expect("Devices"), vec![path]);
}

#[tokio::test]
async fn introspection_matches_the_checked_in_xml() {
    let s = Setup::new(MIXED).await;
    let expected_path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dbus/org.vgpud1.xml");
    let m = s.manager().await;
    let (uuid, dev_path) = m.create_device("mtty-1", opts(&[])).await.expect("create");
    let gpu_path = m.list_gpus().await.expect("gpus")[0].4.clone();
    let mut actual = String::new();
    for (path, iface) in [
        ("/org/vgpud1", "org.vgpud1.Manager"),
        ("/org/vgpud1/nvidia", "org.vgpud1.Nvidia"),
        ("/org/vgpud1/layouts", "org.vgpud1.Layouts"),
        (gpu_path.as_str(), "org.vgpud1.Gpu"),
        (dev_path.as_str(), "org.vgpud1.Device"),
    ] {
        let xml = common::introspection::introspect(&s.conn, path).await;
        actual.push_str(&common::introspection::interface_block(&xml, iface));
    }
    let actual = common::introspection::document(&actual);
    m.remove_device(&uuid, HashMap::new())
        .await
        .expect("remove");
    if common::golden::regenerating() {
        std::fs::write(&expected_path, &actual).expect("write dbus/org.vgpud1.xml");
        return;
    }
    let expected = std::fs::read_to_string(&expected_path).expect("dbus/org.vgpud1.xml exists");
    assert_eq!(
        actual, expected,
        "the running daemon's interfaces differ from dbus/org.vgpud1.xml; if the change is intended (extend, never break), regenerate with VGPUD_REGENERATE_GOLDEN=1"
    );
}

#[tokio::test]
async fn without_polkitd_only_root_is_let_in() {
    if !common::skip::require_root(
        "without_polkitd_only_root_is_let_in",
        "to own org.vgpud1 under dbus/org.vgpud1.conf and to call as another user with setpriv",
    ) {
        return;
    }
    // The project's bus policy, and no polkitd on the bus: root may do everything, others
    // nothing but introspect (tests/polkit.rs has the real polkitd).
    let host = TestHost::new(MIXED);
    let bus = TestBus::start(Policy::System);
    let _daemon = Daemon::start(&bus, &host).await;
    let as_nobody = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "busctl"])
            .arg(format!("--address={}", bus.address))
            .args(args)
            .output()
            .expect("setpriv (util-linux) and busctl")
    };
    let gdbus_as_nobody = |method: &str, args: &[&str]| {
        std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "gdbus",
                "call",
            ])
            .arg(format!("--address={}", bus.address))
            .args([
                "--dest",
                "org.vgpud1",
                "--object-path",
                "/org/vgpud1",
                "--method",
            ])
            .arg(format!("org.vgpud1.Manager.{method}"))
            .args(args)
            .output()
            .expect("setpriv (util-linux) and gdbus")
    };
    let dev = "a1b2c3d4-0000-4000-8000-000000000001";
    let none = "@a{sv} {}";
    let calls: [(&str, &[&str]); 10] = [
        ("ListGpus", &[]),
        ("ListDevices", &[]),
        ("GetCapacity", &["mtty-1", none]),
        ("RenderDomain", &["vm", "@as []", none]),
        ("CreateDevice", &["mtty-1", none]),
        ("RemoveDevice", &[dev, none]),
        ("StartDevice", &[dev, none]),
        ("ModifyDevice", &[dev, none]),
        ("AttachDevice", &[dev, "vm", none]),
        ("SetVfCount", &["mtty", "uint32 0", none]),
    ];
    for (method, args) in calls {
        let out = gdbus_as_nobody(method, args);
        assert!(!out.status.success(), "{method}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("org.freedesktop.DBus.Error.AccessDenied")
                && err.contains("polkit cannot be asked")
                && err.contains("only root"),
            "{method}: vgpud refuses, saying why: {err}"
        );
    }
    let props = as_nobody(&[
        "call",
        "org.vgpud1",
        "/org/vgpud1/gpu/mtty",
        "org.freedesktop.DBus.Properties",
        "GetAll",
        "s",
        "org.vgpud1.Gpu",
    ]);
    let err = String::from_utf8_lossy(&props.stderr);
    assert!(
        !props.status.success() && err.contains("Access denied"),
        "the bus keeps device owners and parameters from others: {err}"
    );
    let introspect = as_nobody(&[
        "call",
        "org.vgpud1",
        "/org/vgpud1",
        "org.freedesktop.DBus.Introspectable",
        "Introspect",
    ]);
    assert!(
        introspect.status.success(),
        "{}",
        String::from_utf8_lossy(&introspect.stderr)
    );
    // Signals carry owners too: nobody, subscribed, receives none of them while root
    // creates a device.
    let monitor = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "timeout",
            "3",
            // Line-buffered: the monitor's lines reach the pipe before timeout kills it.
            "stdbuf",
            "-oL",
            "gdbus",
        ])
        .args(["monitor", "--address", &bus.address, "--dest", "org.vgpud1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv, timeout and gdbus");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // root may.
    bus.busctl_call(
        "/org/vgpud1",
        "org.vgpud1.Manager",
        "CreateDevice",
        &["sa{sv}", "mtty-1", "0"],
    )
    .expect("root creates");
    let watched = monitor.wait_with_output().expect("gdbus monitor");
    let seen = String::from_utf8_lossy(&watched.stdout);
    // It ran and found vgpud (else "none received" would prove nothing).
    assert!(
        seen.contains("Monitoring signals") && seen.contains("org.vgpud1 is owned by"),
        "the monitor ran: {seen} {}",
        String::from_utf8_lossy(&watched.stderr)
    );
    assert!(
        !seen.contains("DeviceCreated") && !seen.contains("InterfacesAdded"),
        "nobody received vgpud's signals: {seen}"
    );
}

#[tokio::test]
async fn ready_is_sent_to_systemd_once_the_name_is_owned() {
    let host = TestHost::new(MIXED);
    let bus = TestBus::start(Policy::Open);
    let dir = tempfile::tempdir().expect("tempdir");
    let socket_path = dir.path().join("notify");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).expect("bind");
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut child = std::process::Command::new(common::daemon::vgpud_bin())
        .arg("--root")
        .arg(&host.root)
        .arg("--simulate")
        .arg("--bus-address")
        .arg(&bus.address)
        .env("NOTIFY_SOCKET", &socket_path)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("vgpud");
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).expect("a notification arrives");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.contains("READY=1"), "{msg}");
    // By the time READY arrives, the name is owned and the objects are there.
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("proxy");
    assert!(!m
        .list_gpus()
        .await
        .expect("ListGpus right after READY")
        .is_empty());
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let n = socket.recv(&mut buf).expect("STOPPING arrives");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    assert!(
        child.wait().expect("exit").success(),
        "clean exit on SIGTERM"
    );
}

#[test]
fn a_root_without_sys_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(common::daemon::vgpud_bin())
        .arg("--root")
        .arg(dir.path())
        .args(["--bus-address", "unix:path=/nonexistent"])
        .output()
        .expect("vgpud");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no sys directory"), "{err}");
}

#[tokio::test]
async fn property_reads_and_managed_objects_pass_the_methods_check() {
    if !common::skip::require_root(
        "property_reads_and_managed_objects_pass_the_methods_check",
        "to call as nobody with setpriv",
    ) {
        return;
    }
    // A bus whose policy lets everyone call everything, and no polkitd: vgpud's own check is
    // all there is. nobody is refused the owners through Properties and the ObjectManager as
    // through the methods; root reads them.
    let host = TestHost::new(MIXED);
    let bus = TestBus::start(Policy::Everyone);
    let _daemon = Daemon::start(&bus, &host).await;
    let owner = "owner-nobody-may-read";
    let created = bus
        .busctl_call(
            "/org/vgpud1",
            "org.vgpud1.Manager",
            "CreateDevice",
            &["sa{sv}", "mtty-1", "1", "owner", "s", owner],
        )
        .expect("root creates");
    let device = created["data"][1].as_str().expect("path").to_string();
    let gdbus = |as_nobody: bool, path: &str, method: &str, args: &[&str]| {
        let mut cmd = if as_nobody {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "gdbus"]);
            c
        } else {
            std::process::Command::new("gdbus")
        };
        cmd.args(["call", "--address", &bus.address, "--dest", "org.vgpud1"])
            .args(["--object-path", path, "--method", method])
            .args(args)
            .output()
            .expect("setpriv (util-linux) and gdbus")
    };
    let reads: [(&str, &str, &[&str]); 3] = [
        (
            &device,
            "org.freedesktop.DBus.Properties.Get",
            &["org.vgpud1.Device", "Owner"],
        ),
        (
            &device,
            "org.freedesktop.DBus.Properties.GetAll",
            &["org.vgpud1.Device"],
        ),
        (
            "/org/vgpud1",
            "org.freedesktop.DBus.ObjectManager.GetManagedObjects",
            &[],
        ),
    ];
    let method_refusal = gdbus(true, "/org/vgpud1", "org.vgpud1.Manager.ListDevices", &[]);
    let method_err = String::from_utf8_lossy(&method_refusal.stderr).into_owned();
    assert!(
        method_err.contains("org.freedesktop.DBus.Error.AccessDenied"),
        "nobody may not list devices: {method_err}"
    );
    for (path, method, args) in reads {
        let out = gdbus(true, path, method, args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && !stdout.contains(owner),
            "{method} as nobody read the device's owner: {stdout}"
        );
        assert!(
            err.contains("org.freedesktop.DBus.Error.AccessDenied")
                && err.contains("org.vgpud1.read")
                && err.contains("uid 65534"),
            "{method} as nobody: the methods' refusal, saying why: {err}"
        );
        let out = gdbus(false, path, method, args);
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(owner),
            "{method} as root reads the owner: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Introspection stays open: it names objects, never their properties' values.
    let introspect = gdbus(
        true,
        &device,
        "org.freedesktop.DBus.Introspectable.Introspect",
        &[],
    );
    assert!(
        introspect.status.success() && !String::from_utf8_lossy(&introspect.stdout).contains(owner),
        "{}",
        String::from_utf8_lossy(&introspect.stderr)
    );
}
