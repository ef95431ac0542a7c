//! Whole-GPU passthrough end to end on the simulated `passthrough` host, through a real
//! dbus-daemon and a real vgpud, driven by busctl and zbus: vgpud's planned move to vfio-pci
//! and back, and every refusal with its named error.

mod common;

use common::libvirt::{assert_valid_hostdev, require_tools};
use common::proxy::{bool_opts, device_proxy, error_message, error_name, opts};
use common::setup::Setup;

const PASSTHROUGH: &[&str] = &["passthrough"];
/// (a): alone in its IOMMU group with its audio function; nvidia-drm's fb0 is on it, but
/// fbcon does not draw there.
const CLEAN: &str = "0000:21:00.0";
const CLEAN_AUDIO: &str = "0000:21:00.1";
/// (b): the boot VGA device; fbcon draws the console on its framebuffer, fb1.
const CONSOLE: &str = "0000:2d:00.0";
/// (c): behind a switch without ACS, its group holds a NIC.
const SHARED: &str = "0000:33:00.0";
const NIC: &str = "0000:34:00.0";

fn driver(s: &Setup, address: &str) -> Option<String> {
    std::fs::read_link(
        s.host
            .path(&format!("sys/bus/pci/devices/{address}/driver")),
    )
    .ok()
    .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

fn override_of(s: &Setup, address: &str) -> String {
    std::fs::read_to_string(
        s.host
            .path(&format!("sys/bus/pci/devices/{address}/driver_override")),
    )
    .expect("driver_override")
    .trim()
    .to_string()
}

#[tokio::test]
async fn a_gpu_and_its_audio_function_go_to_vfio_pci_and_back() {
    let s = Setup::new(PASSTHROUGH).await;
    let m = s.manager().await;
    assert_eq!(driver(&s, CLEAN).as_deref(), Some("nvidia"));
    let uuid = s
        .busctl_create("passthrough", &[("parent", CLEAN)])
        .expect("busctl CreateDevice passthrough");
    let dev = device_proxy(&s.conn, &uuid).await;
    assert_eq!(dev.kind().await.expect("Kind"), "passthrough");
    assert_eq!(dev.address().await.expect("Address"), CLEAN);
    assert_eq!(
        dev.functions().await.expect("Functions"),
        vec![
            (CLEAN.to_string(), "nvidia".to_string()),
            (CLEAN_AUDIO.to_string(), "snd_hda_intel".to_string())
        ]
    );
    for f in [CLEAN, CLEAN_AUDIO] {
        assert_eq!(driver(&s, f).as_deref(), Some("vfio-pci"), "{f}");
        assert_eq!(override_of(&s, f), "vfio-pci", "{f}");
    }
    let group = dev.iommu_group().await.expect("IommuGroup");
    assert!(s.host.path(&format!("dev/vfio/{group}")).exists());

    // One hostdev per function: a multi-function device in the guest, vgpud-managed.
    let xml = s
        .busctl_manager("GetHostdevXml", &["s", &uuid])
        .expect("busctl GetHostdevXml")[0]
        .as_str()
        .expect("xml")
        .to_string();
    assert_eq!(xml.matches("<hostdev").count(), 2, "{xml}");
    assert_eq!(xml.matches(r#"managed="no""#).count(), 2, "{xml}");
    assert!(
        xml.contains(r#"function="0x0" multifunction="on""#),
        "{xml}"
    );
    assert!(xml.contains(r#"slot="0x00" function="0x1""#), "{xml}");
    require_tools();
    for fragment in xml
        .split_inclusive("</hostdev>")
        .filter(|f| f.contains("<hostdev"))
    {
        assert_valid_hostdev(fragment.trim());
    }
    let moved = m
        .render_hostdev_xml(&uuid, {
            let mut o = std::collections::HashMap::new();
            o.insert("guest_bus", zbus::Variant::from(5u32));
            o
        })
        .await
        .expect("RenderHostdevXml guest_bus");
    assert_eq!(moved.matches(r#"bus="0x05""#).count(), 2, "{moved}");

    // The same GPU twice is refused: it is on vfio-pci already.
    let err = m
        .create_device("passthrough", opts(&[("parent", CLEAN)]))
        .await
        .expect_err("taken");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");

    s.busctl_manager("RemoveDevice", &["sa{sv}", &uuid, "0"])
        .expect("busctl RemoveDevice");
    assert_eq!(driver(&s, CLEAN).as_deref(), Some("nvidia"));
    assert_eq!(driver(&s, CLEAN_AUDIO).as_deref(), Some("snd_hda_intel"));
    assert_eq!(override_of(&s, CLEAN), "(null)");
    assert!(!s.host.path(&format!("dev/vfio/{group}")).exists());
}

#[tokio::test]
async fn every_refusal_has_its_named_error() {
    let s = Setup::new(&["passthrough", "nvidia-turing"]).await;
    let m = s.manager().await;
    let refuse = |parent: &'static str, force: bool| {
        let m = m.clone();
        async move {
            let mut o = opts(&[("parent", parent)]);
            o.extend(bool_opts(&[("force", force)]));
            m.create_device("passthrough", o).await.expect_err(parent)
        }
    };

    // The host console draws on it, and the message says how vgpud knows.
    let err = refuse(CONSOLE, false).await;
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");
    let msg = error_message(&err);
    assert!(
        msg.contains(
            "draws the host's console (fbcon draws tty1 on fb1 (nvidia-drmdrmfb), which is on it"
        ),
        "{err}"
    );
    assert!(msg.contains("\"force\": true insists"), "{err}");
    assert_eq!(driver(&s, CONSOLE).as_deref(), Some("nvidia"), "untouched");

    // Its IOMMU group holds a NIC.
    let err = refuse(SHARED, false).await;
    assert_eq!(error_name(&err), "org.vgpud1.Error.Unsafe");
    assert!(error_message(&err).contains(NIC), "{err}");
    assert_eq!(driver(&s, NIC).as_deref(), Some("e1000e"), "untouched");

    // Not a GPU.
    let err = refuse(NIC, false).await;
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    let err = refuse("0000:99:00.0", false).await;
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound");
    let err = m
        .create_device("passthrough", opts(&[]))
        .await
        .expect_err("no parent");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");

    // A GPU that carries vGPUs.
    let turing = s.gpus_with_driver("nvidia").await;
    let (vgpu, _) = m
        .create_device("RTX6000-4Q", opts(&[("parent", "0000:3b:00.0")]))
        .await
        .expect("a vGPU");
    assert!(turing.contains(&"0000:3b:00.0".to_string()));
    let err = refuse("0000:3b:00.0", false).await;
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");
    assert!(error_message(&err).contains(&vgpu), "{err}");

    // No IOMMU on the host.
    std::fs::remove_file(s.host.path("sys/class/iommu/dmar0")).expect("take the IOMMU away");
    let err = refuse(CLEAN, false).await;
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotSupported");
    assert!(error_message(&err).contains("intel_iommu=on"), "{err}");
    assert_eq!(driver(&s, CLEAN).as_deref(), Some("nvidia"), "untouched");
}

#[tokio::test]
async fn force_takes_the_whole_group_and_gives_every_driver_back() {
    let s = Setup::new(PASSTHROUGH).await;
    let m = s.manager().await;
    let mut o = opts(&[("parent", SHARED)]);
    o.extend(bool_opts(&[("force", true)]));
    let (uuid, _) = m.create_device("passthrough", o).await.expect("forced");
    let functions = device_proxy(&s.conn, &uuid)
        .await
        .functions()
        .await
        .expect("Functions");
    assert!(
        functions.contains(&(NIC.to_string(), "e1000e".to_string())),
        "{functions:?}"
    );
    assert_eq!(driver(&s, NIC).as_deref(), Some("vfio-pci"));
    assert_eq!(
        driver(&s, "0000:32:01.0").as_deref(),
        Some("pcieport"),
        "bridges stay"
    );
    m.remove_device(&uuid, opts(&[])).await.expect("remove");
    assert_eq!(driver(&s, NIC).as_deref(), Some("e1000e"));
    assert_eq!(driver(&s, SHARED).as_deref(), Some("nvidia"));
}

#[tokio::test]
async fn force_takes_the_console_gpu_and_gives_it_back() {
    let s = Setup::new(PASSTHROUGH).await;
    let m = s.manager().await;
    let fb1 = || s.host.path("sys/class/graphics/fb1").exists();
    let fbcon_bound = || {
        std::fs::read_to_string(s.host.path("sys/class/vtconsole/vtcon1/bind"))
            .expect("fbcon's bind")
            .trim()
            == "1"
    };
    assert!(fb1() && fbcon_bound());
    let mut o = opts(&[("parent", CONSOLE)]);
    o.extend(bool_opts(&[("force", true)]));
    let (uuid, _) = m
        .create_device("passthrough", o)
        .await
        .expect("force insists past the console");
    assert_eq!(driver(&s, CONSOLE).as_deref(), Some("vfio-pci"));
    assert!(!fb1(), "nvidia-drm's framebuffer went with the driver");
    assert!(
        !fbcon_bound(),
        "the consoles went back to the dummy console"
    );
    m.remove_device(&uuid, opts(&[])).await.expect("remove");
    assert_eq!(driver(&s, CONSOLE).as_deref(), Some("nvidia"));
    assert!(fb1() && fbcon_bound(), "framebuffer and console are back");
}

#[tokio::test]
async fn a_persistent_passthrough_is_bound_again_after_a_reboot() {
    let mut s = Setup::new(PASSTHROUGH).await;
    let m = s.manager().await;
    let (uuid, _) = m
        .create_device("passthrough", opts(&[("parent", CLEAN)]))
        .await
        .expect("persistent by default");
    drop(m);
    s.daemon.stop();
    s.host.reboot(PASSTHROUGH);
    assert_eq!(driver(&s, CLEAN).as_deref(), Some("nvidia"), "a fresh boot");
    s.restart().await;
    let dev = device_proxy(&s.conn, &uuid).await;
    assert!(dev.active().await.expect("Active"));
    assert_eq!(driver(&s, CLEAN).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&s, CLEAN_AUDIO).as_deref(), Some("vfio-pci"));
    let m = s.manager().await;
    m.stop_device(&uuid, opts(&[])).await.expect("stop");
    assert_eq!(driver(&s, CLEAN).as_deref(), Some("nvidia"));
    assert!(!dev.active().await.expect("Active"));
    m.remove_device(&uuid, opts(&[])).await.expect("remove");
}

#[tokio::test]
async fn vdi_domains_take_passthrough_and_sriov_vgpu_devices() {
    let s = Setup::new(&["passthrough", "nvidia-l40s"]).await;
    let m = s.manager().await;
    let (pt, _) = m
        .create_device("passthrough", opts(&[("parent", CLEAN)]))
        .await
        .expect("passthrough");
    m.set_vf_count("0000:41:00.0", 32, opts(&[]))
        .await
        .expect("VFs");
    let (vgpu, _) = m
        .create_device("L40S-8Q", opts(&[("parent", "0000:41:00.0")]))
        .await
        .expect("a vGPU on a VF");
    let xml = m
        .render_domain("vdi-pci", &[&vgpu, &pt], opts(&[]))
        .await
        .expect("RenderDomain");
    assert_eq!(
        xml.matches(r#"<hostdev mode="subsystem" type="pci" managed="no">"#)
            .count(),
        3,
        "{xml}"
    );
    for address in [
        r#"bus="0x41" slot="0x00" function="0x4""#,
        r#"bus="0x21" slot="0x00" function="0x0""#,
        r#"bus="0x21" slot="0x00" function="0x1""#,
    ] {
        assert!(xml.contains(address), "{address} in {xml}");
    }
    common::libvirt::assert_valid_domain(&xml);
    common::libvirt::assert_defines(&xml);
}

#[tokio::test]
async fn capacity_counts_the_gpus_a_create_would_give_whole() {
    let s = Setup::new(PASSTHROUGH).await;
    let m = s.manager().await;
    let capacity = |parent: &'static str| {
        let m = m.clone();
        async move {
            let o = if parent.is_empty() {
                opts(&[])
            } else {
                opts(&[("parent", parent)])
            };
            m.get_capacity("passthrough", o).await.expect(parent)
        }
    };
    // (a) can go; (b) draws the console and (c) shares its group with a NIC: without force
    // a create refuses them, so they are not counted.
    assert_eq!(capacity(CLEAN).await, 1);
    assert_eq!(capacity(CONSOLE).await, 0);
    assert_eq!(capacity(SHARED).await, 0);
    assert_eq!(capacity("").await, 1, "the host's GPUs");
    let (uuid, _) = m
        .create_device("passthrough", opts(&[("parent", CLEAN)]))
        .await
        .expect("passthrough");
    assert_eq!(capacity(CLEAN).await, 0, "given already");
    assert_eq!(capacity("").await, 0);
    m.remove_device(&uuid, opts(&[])).await.expect("remove");
    assert_eq!(capacity(CLEAN).await, 1);
}

/// When the move to vfio-pci fails half-way (here vfio-pci is not loaded: its driver
/// directory is gone), the functions already moved are given back and the error says so.
#[tokio::test]
async fn a_move_to_vfio_pci_that_fails_gives_the_functions_back_and_says_so() {
    let s = Setup::new(PASSTHROUGH).await;
    let m = s.manager().await;
    std::fs::remove_dir_all(s.host.path("sys/bus/pci/drivers/vfio-pci"))
        .expect("vfio-pci unloaded");
    let e = m
        .create_device("passthrough", opts(&[("parent", CLEAN)]))
        .await
        .expect_err("no vfio-pci");
    let message = error_message(&e);
    assert!(
        message.contains(&format!("moving {CLEAN} to vfio-pci"))
            && message.contains("the drivers were given back"),
        "{}: {message}",
        error_name(&e)
    );
    assert_eq!(driver(&s, CLEAN).as_deref(), Some("nvidia"));
    assert_eq!(driver(&s, CLEAN_AUDIO).as_deref(), Some("snd_hda_intel"));
    assert_eq!(override_of(&s, CLEAN), "(null)");
}
