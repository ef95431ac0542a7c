//! SR-IOV end to end on simulated hosts, through a real dbus-daemon and a real vgpud, driven by
//! busctl and zbus: NVIDIA vGPU on VFs with the vendor-specific VFIO framework (L40S), mdevs on
//! VFs (A40), and AMD MxGPU VFs given whole.

mod common;

use common::libvirt::{assert_valid_hostdev, require_tools};
use common::proxy::{bool_opts, device_proxy, error_message, error_name, gpu_proxy, opts};
use common::setup::Setup;

const L40S: &[&str] = &["nvidia-l40s"];

/// GPUs whose model is `model`.
async fn gpus_of_model(s: &Setup, model: &str) -> Vec<String> {
    s.manager()
        .await
        .list_gpus()
        .await
        .expect("ListGpus")
        .into_iter()
        .filter(|g| g.1 == model)
        .map(|g| g.0)
        .collect()
}

/// `ListTypes` availability of `type_name` on `gpu`.
async fn available(s: &Setup, gpu: &str, type_name: &str) -> u32 {
    common::proxy::listed_room(&s.manager().await, gpu, type_name).await
}

fn sys(s: &Setup, rel: &str) -> String {
    std::fs::read_to_string(s.host.path(&format!("sys/bus/pci/devices/{rel}")))
        .unwrap_or_else(|e| panic!("read {rel}: {e}"))
        .trim()
        .to_string()
}

/// busctl SetVfCount; the count it returns.
fn busctl_set_vfs(s: &Setup, gpu: &str, count: u32) -> Result<u64, String> {
    s.busctl_manager("SetVfCount", &["sua{sv}", gpu, &count.to_string(), "0"])
        .map(|d| d[0].as_u64().expect("a count"))
}

#[tokio::test]
async fn l40s_vgpus_live_on_vfs_enabled_through_sriov_manage() {
    let s = Setup::new(L40S).await;
    let m = s.manager().await;
    let gpus = gpus_of_model(&s, "L40S").await;
    assert_eq!(gpus.len(), 2, "two L40S");
    let pf = gpus[0].clone();
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert_eq!(gpu.total_vfs().await.expect("TotalVfs"), 32);
    assert_eq!(gpu.num_vfs().await.expect("NumVfs"), 0);

    // Before the VFs exist the board's types are listed, none available, and a create says
    // why.
    assert_eq!(available(&s, &pf, "L40S-4Q").await, 0);
    let err = m
        .create_device("L40S-4Q", opts(&[("parent", &pf)]))
        .await
        .expect_err("no VFs");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NoCapacity");
    assert!(error_message(&err).contains("SetVfCount"), "{err}");

    // sriov-manage enables all VFs or none; direct sriov_numvfs writes the driver refuses.
    let err = m
        .set_vf_count(&pf, 8, opts(&[]))
        .await
        .expect_err("8 of 32");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    assert!(error_message(&err).contains("all 32 VFs or none"), "{err}");
    assert_eq!(busctl_set_vfs(&s, &pf, 32), Ok(32));
    assert_eq!(gpu.num_vfs().await.expect("NumVfs"), 32);
    let vfs = gpu.vfs().await.expect("Vfs");
    assert_eq!(vfs.len(), 32);
    assert!(gpu
        .sharing_modes()
        .await
        .expect("modes")
        .contains(&"sriov-vgpu".to_string()));
    assert!(
        s.host
            .path("var/lib/vgpud/sriov")
            .join(format!("{pf}.json"))
            .exists(),
        "the count is persisted"
    );
    // ListGpus lists physical GPUs only, not 32 VFs.
    assert_eq!(gpus_of_model(&s, "L40S").await.len(), 2);
    assert_eq!(available(&s, &pf, "L40S-4Q").await, 12);

    // A vGPU: a free VF gets the type id and the params; the uuid is vgpud's handle.
    let uuid = s
        .busctl_create(
            "L40S-4Q",
            &[("parent", &pf), ("params", "frame_rate_limiter=0")],
        )
        .expect("busctl CreateDevice");
    let dev = device_proxy(&s.conn, &uuid).await;
    assert_eq!(dev.kind().await.expect("Kind"), "sriov-vgpu");
    assert_eq!(dev.parent().await.expect("Parent"), pf);
    let vf = dev.address().await.expect("Address");
    assert!(vfs.contains(&vf), "{vf} is a VF of {pf}");
    assert_eq!(sys(&s, &format!("{vf}/nvidia/current_vgpu_type")), "1150");
    assert_eq!(
        sys(&s, &format!("{vf}/nvidia/vgpu_params")),
        "frame_rate_limiter=0"
    );
    assert_eq!(available(&s, &pf, "L40S-4Q").await, 11);
    assert_eq!(available(&s, &pf, "L40S-8Q").await, 0, "one size at a time");
    let err = m
        .create_device("L40S-8Q", opts(&[("parent", &pf)]))
        .await
        .expect_err("equal size");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NoCapacity");

    // The hostdev is the VF itself, unmanaged (libvirt must not rebind it).
    let xml = s
        .busctl_manager("GetHostdevXml", &["s", &uuid])
        .expect("busctl GetHostdevXml")[0]
        .as_str()
        .expect("xml")
        .to_string();
    assert!(xml.contains(r#"type="pci" managed="no""#), "{xml}");
    let (bus, rest) = vf[5..].split_once(':').expect("bdf");
    let (slot, func) = rest.split_once('.').expect("bdf");
    assert!(
        xml.contains(&format!(
            r#"bus="0x{bus}" slot="0x{slot}" function="0x{func}""#
        )),
        "{xml}"
    );
    require_tools();
    assert_valid_hostdev(&xml);

    // VFs that carry devices stay.
    let err = m
        .set_vf_count(&pf, 0, opts(&[]))
        .await
        .expect_err("busy VFs");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");
    assert!(error_message(&err).contains(&uuid), "{err}");

    s.busctl_manager("RemoveDevice", &["sa{sv}", &uuid, "0"])
        .expect("busctl RemoveDevice");
    assert_eq!(sys(&s, &format!("{vf}/nvidia/current_vgpu_type")), "0");
    assert_eq!(available(&s, &pf, "L40S-8Q").await, 6);
    assert_eq!(busctl_set_vfs(&s, &pf, 0), Ok(0));
    assert!(!s
        .host
        .path("var/lib/vgpud/sriov")
        .join(format!("{pf}.json"))
        .exists());
}

#[tokio::test]
async fn a_late_remove_never_clears_a_vf_given_to_someone_else() {
    let s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("enable");
    let (old, _) = m
        .create_device("L40S-48Q", opts(&[("parent", &pf)]))
        .await
        .expect("the whole GPU");
    let vf = device_proxy(&s.conn, &old)
        .await
        .address()
        .await
        .expect("Address");
    m.remove_device(&old, opts(&[])).await.expect("remove");
    let (new, _) = m
        .create_device("L40S-48Q", opts(&[("parent", &pf)]))
        .await
        .expect("again");
    let new_vf = device_proxy(&s.conn, &new)
        .await
        .address()
        .await
        .expect("Address");
    assert_eq!(
        new_vf, vf,
        "the one free VF of its kind goes to the new uuid"
    );
    let err = m
        .remove_device(&old, opts(&[]))
        .await
        .expect_err("the old uuid is gone");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound");
    assert_eq!(sys(&s, &format!("{vf}/nvidia/current_vgpu_type")), "1156");
    assert!(device_proxy(&s.conn, &new)
        .await
        .active()
        .await
        .expect("Active"));
}

#[tokio::test]
async fn vf_counts_and_vgpus_come_back_after_a_reboot() {
    let mut s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[1].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("enable");
    let (kept, _) = m
        .create_device(
            "L40S-2B",
            opts(&[("parent", &pf), ("params", "disable_vnc=1")]),
        )
        .await
        .expect("persistent by default");
    let mut transient = opts(&[("parent", &pf)]);
    transient.extend(bool_opts(&[("persistent", false), ("autostart", false)]));
    let (gone, _) = m
        .create_device("L40S-2B", transient)
        .await
        .expect("transient");
    drop(m);

    s.daemon.stop();
    s.host.reboot(L40S);
    assert_eq!(
        sys(&s, &format!("{pf}/sriov_numvfs")),
        "0",
        "VFs die with a reboot"
    );
    s.restart().await;
    let m = s.manager().await;
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert_eq!(gpu.num_vfs().await.expect("NumVfs"), 32, "restored first");
    let dev = device_proxy(&s.conn, &kept).await;
    assert!(
        dev.active().await.expect("Active"),
        "restored after the VFs"
    );
    let vf = dev.address().await.expect("Address");
    assert_eq!(sys(&s, &format!("{vf}/nvidia/current_vgpu_type")), "1146");
    assert_eq!(
        sys(&s, &format!("{vf}/nvidia/vgpu_params")),
        "disable_vnc=1"
    );
    let listed: Vec<String> = m
        .list_devices()
        .await
        .expect("ListDevices")
        .into_iter()
        .map(|d| d.0)
        .collect();
    assert!(listed.contains(&kept));
    assert!(
        !listed.contains(&gone),
        "a transient vGPU is gone after a reboot"
    );

    // A stop frees the VF and keeps the record; a start takes any free VF.
    m.stop_device(&kept, opts(&[])).await.expect("stop");
    assert_eq!(sys(&s, &format!("{vf}/nvidia/current_vgpu_type")), "0");
    assert_eq!(dev.address().await.expect("Address"), "");
    m.start_device(&kept, opts(&[])).await.expect("start");
    assert!(dev.active().await.expect("Active"));
}

#[tokio::test]
async fn vgpus_other_tools_wrote_are_adopted_under_a_stable_uuid() {
    let mut s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("enable");
    let vf = gpu_proxy(&s.conn, &pf).await.vfs().await.expect("Vfs")[3].clone();
    // What NVIDIA's own tools do: write the type id to the VF.
    vgpud::host::Host::simulated(&s.host.root)
        .write_attr(
            &s.host.path(&format!(
                "sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
            )),
            "1147",
        )
        .expect("write the type");
    let find = |rows: Vec<(String, String, String, String, zbus::OwnedObjectPath)>| {
        rows.into_iter().find(|d| d.2 == "nvidia-1147").map(|d| d.0)
    };
    // Such a write sends no uevent (nor does the driver's): vgpud sees it at its next full
    // look, here the one at start.
    drop(m);
    s.restart().await;
    let m = s.manager().await;
    let adopted = find(m.list_devices().await.expect("ListDevices")).expect("adopted");
    assert_eq!(
        device_proxy(&s.conn, &adopted)
            .await
            .address()
            .await
            .expect("Address"),
        vf
    );
    drop(m);
    s.restart().await;
    let m = s.manager().await;
    assert_eq!(
        find(m.list_devices().await.expect("ListDevices")),
        Some(adopted.clone()),
        "the same uuid after a restart"
    );
    m.remove_device(&adopted, opts(&[])).await.expect("remove");
    assert_eq!(sys(&s, &format!("{vf}/nvidia/current_vgpu_type")), "0");
}

#[tokio::test]
async fn a40_mdevs_live_on_its_vfs_and_the_gpu_lists_them_as_one() {
    let s = Setup::new(&["nvidia-a40"]).await;
    let m = s.manager().await;
    let gpus = gpus_of_model(&s, "A40").await;
    assert_eq!(gpus.len(), 1);
    let pf = gpus[0].clone();
    assert_eq!(busctl_set_vfs(&s, &pf, 32), Ok(32));
    assert_eq!(gpus_of_model(&s, "A40").await.len(), 1, "VFs are not GPUs");
    assert_eq!(
        available(&s, &pf, "A40-2Q").await,
        24,
        "capped at the type's maximum"
    );
    let uuid = s
        .busctl_create("A40-2Q", &[("parent", &pf)])
        .expect("create");
    let dev = device_proxy(&s.conn, &uuid).await;
    assert_eq!(dev.kind().await.expect("Kind"), "mdev");
    let parent = dev.parent().await.expect("Parent");
    assert_ne!(parent, pf, "the mdev parent is a VF");
    assert_eq!(
        dev.parent_gpu().await.expect("ParentGpu"),
        vgpud::dbus::paths::gpu_path(&pf)
    );
    let on_gpu = gpu_proxy(&s.conn, &pf)
        .await
        .devices()
        .await
        .expect("Devices");
    assert_eq!(on_gpu, vec![vgpud::dbus::paths::device_path(&uuid)]);
    assert_eq!(available(&s, &pf, "A40-2Q").await, 23);
    assert_eq!(available(&s, &pf, "A40-4Q").await, 0);
    assert!(s
        .host
        .path(&format!("etc/mdevctl.d/{parent}/{uuid}"))
        .exists());
    let xml = m.get_hostdev_xml(&uuid).await.expect("xml");
    assert!(xml.contains(r#"type="mdev""#), "{xml}");
    let err = m.set_vf_count(&pf, 0, opts(&[])).await.expect_err("busy");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");
    m.remove_device(&uuid, opts(&[])).await.expect("remove");
    assert_eq!(busctl_set_vfs(&s, &pf, 0), Ok(0));
}

#[tokio::test]
async fn amd_vfs_are_given_whole_and_their_count_is_the_drivers() {
    let s = Setup::new(&["amd-mxgpu"]).await;
    let m = s.manager().await;
    let pf = s.gpus_with_driver("gim").await[0].clone();
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert_eq!(gpu.num_vfs().await.expect("NumVfs"), 8);
    assert!(gpu
        .sharing_modes()
        .await
        .expect("modes")
        .contains(&"sriov-vf".to_string()));
    let err = m
        .set_vf_count(&pf, 4, opts(&[]))
        .await
        .expect_err("GIM has no sriov_configure");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotSupported");
    assert!(error_message(&err).contains("vf_num"), "{err}");

    let vf = gpu.vfs().await.expect("Vfs")[2].clone();
    let uuid = s
        .busctl_create("passthrough", &[("parent", &vf)])
        .expect("create");
    let dev = device_proxy(&s.conn, &uuid).await;
    assert_eq!(dev.kind().await.expect("Kind"), "passthrough");
    assert_eq!(dev.address().await.expect("Address"), vf);
    assert_eq!(dev.parent().await.expect("Parent"), pf);
    let driver = std::fs::read_link(s.host.path(&format!("sys/bus/pci/devices/{vf}/driver")))
        .expect("bound");
    assert!(driver.ends_with("vfio-pci"), "{driver:?}");
    let group = dev.iommu_group().await.expect("IommuGroup");
    assert!(s.host.path(&format!("dev/vfio/{group}")).exists());
    let xml = m.get_hostdev_xml(&uuid).await.expect("xml");
    assert!(xml.contains(r#"managed="no""#), "{xml}");
    assert_eq!(xml.matches("<hostdev").count(), 1, "{xml}");
    m.remove_device(&uuid, opts(&[])).await.expect("remove");
    assert!(
        !s.host
            .path(&format!("sys/bus/pci/devices/{vf}/driver"))
            .exists(),
        "back to no driver, as it was"
    );
}

#[tokio::test]
async fn sriov_numvfs_follows_the_kernels_rules_and_intel_vfs_are_given_whole() {
    let s = Setup::new(&["intel-sriov"]).await;
    let m = s.manager().await;
    let pf = "0000:00:02.0";
    let gpu = gpu_proxy(&s.conn, pf).await;
    assert_eq!(gpu.total_vfs().await.expect("TotalVfs"), 7);
    let err = m
        .set_vf_count(pf, 8, opts(&[]))
        .await
        .expect_err("above sriov_totalvfs");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    assert!(error_message(&err).contains("at most 7"), "{err}");
    assert_eq!(busctl_set_vfs(&s, pf, 2), Ok(2));
    assert_eq!(sys(&s, &format!("{pf}/sriov_numvfs")), "2");
    let err = m
        .set_vf_count(pf, 4, opts(&[]))
        .await
        .expect_err("non-zero to non-zero");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");
    assert!(error_message(&err).contains("set 0 first"), "{err}");
    assert_eq!(
        busctl_set_vfs(&s, pf, 2),
        Ok(2),
        "the same count is no change"
    );

    let vf = gpu.vfs().await.expect("Vfs")[1].clone();
    assert_eq!(vf, "0000:00:02.2");
    let uuid = s
        .busctl_create("passthrough", &[("parent", &vf)])
        .expect("a VF given whole");
    let err = m
        .set_vf_count(pf, 0, opts(&[]))
        .await
        .expect_err("a VF is in use");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");
    m.remove_device(&uuid, opts(&[])).await.expect("remove");
    assert_eq!(busctl_set_vfs(&s, pf, 0), Ok(0));
    assert_eq!(busctl_set_vfs(&s, pf, 4), Ok(4));
}

#[tokio::test]
async fn heterogeneous_mode_mixes_sizes_at_placements_and_comes_back_after_a_reboot() {
    let mut s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    let err = m
        .set_heterogeneous_mode(&pf, true, opts(&[]))
        .await
        .expect_err("no VFs yet");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotSupported");
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs");
    s.busctl_manager("SetHeterogeneousMode", &["sba{sv}", &pf, "true", "0"])
        .expect("busctl SetHeterogeneousMode");
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert!(gpu.heterogeneous_mode().await.expect("HeterogeneousMode"));
    // The lower maxima of the mode: 4 GiB types take 6 GiB placements, 8 GiB ones 12.
    assert_eq!(available(&s, &pf, "L40S-4Q").await, 8);
    assert_eq!(available(&s, &pf, "L40S-8Q").await, 4);
    let big = s.busctl_create("L40S-8Q", &[("parent", &pf)]).expect("8Q");
    let small = s
        .busctl_create("L40S-4Q", &[("parent", &pf)])
        .expect("4Q next to the 8Q");
    let tiny = s
        .busctl_create("L40S-1Q", &[("parent", &pf)])
        .expect("1Q next to both");
    let placement = |uuid: String| {
        let s = &s;
        async move {
            let vf = device_proxy(&s.conn, &uuid)
                .await
                .address()
                .await
                .expect("Address");
            sys(s, &format!("{vf}/nvidia/placement_id"))
        }
    };
    assert_eq!(placement(big.clone()).await, "0");
    assert_eq!(placement(small.clone()).await, "12");
    assert_eq!(placement(tiny.clone()).await, "18");
    // 8Q placements left: 24 and 36; 4Q: 24, 30, 36, 42.
    assert_eq!(available(&s, &pf, "L40S-8Q").await, 2);
    assert_eq!(available(&s, &pf, "L40S-4Q").await, 4);
    let err = m
        .set_heterogeneous_mode(&pf, false, opts(&[]))
        .await
        .expect_err("vGPUs run");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");

    // After a reboot: the VFs first, then the mode, then the vGPUs (mixed sizes need it).
    drop(m);
    s.daemon.stop();
    s.host.reboot(L40S);
    s.restart().await;
    let m = s.manager().await;
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert_eq!(gpu.num_vfs().await.expect("NumVfs"), 32);
    assert!(gpu.heterogeneous_mode().await.expect("HeterogeneousMode"));
    for uuid in [&big, &small, &tiny] {
        assert!(
            device_proxy(&s.conn, uuid)
                .await
                .active()
                .await
                .expect("Active"),
            "{uuid} restored: {}",
            s.daemon.log_text()
        );
    }
    for uuid in [&big, &small, &tiny] {
        m.remove_device(uuid, opts(&[])).await.expect("remove");
    }
    m.set_heterogeneous_mode(&pf, false, opts(&[]))
        .await
        .expect("back to equal size");
    assert_eq!(available(&s, &pf, "L40S-4Q").await, 12);
}

#[tokio::test]
async fn a_placement_asked_for_is_checked_against_the_mode_the_type_and_what_is_taken() {
    let s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs");
    let at = |ty: &str, id: u32| {
        s.busctl_create(
            ty,
            &[
                ("parent", &pf),
                ("params", &format!("vgpu-placement-id={id}")),
            ],
        )
    };
    // Equal-size mode has no placements to ask for.
    let e = at("L40S-8Q", 24).expect_err("equal-size mode");
    assert!(e.contains("applies in heterogeneous mode"), "{e}");
    m.set_heterogeneous_mode(&pf, true, opts(&[]))
        .await
        .expect("mixed-size on");
    // 8 GiB types sit at 0, 12, 24 and 36 (12 GiB placements): 6 is none of them.
    let e = at("L40S-8Q", 6).expect_err("not an 8Q placement");
    assert!(
        e.contains("is no placement of NVIDIA L40S-8Q") && e.contains("0, 12, 24, 36"),
        "{e}"
    );
    let big = at("L40S-8Q", 24).expect("8Q at 24");
    let vf = device_proxy(&s.conn, &big)
        .await
        .address()
        .await
        .expect("Address");
    assert_eq!(sys(&s, &format!("{vf}/nvidia/placement_id")), "24");
    // Taken: the same placement, and a 4Q's (6 GiB placements) inside the 8Q's run.
    let e = at("L40S-8Q", 24).expect_err("24 is taken");
    assert!(
        e.contains("placement 24 is taken (free for NVIDIA L40S-8Q: 0, 12, 36)"),
        "{e}"
    );
    let e = at("L40S-4Q", 30).expect_err("30 is inside the 8Q");
    assert!(e.contains("placement 30 is taken"), "{e}");
    let small = at("L40S-4Q", 42).expect("4Q at 42");
    let vf = device_proxy(&s.conn, &small)
        .await
        .address()
        .await
        .expect("Address");
    assert_eq!(sys(&s, &format!("{vf}/nvidia/placement_id")), "42");
}

#[tokio::test]
async fn a_full_vf_refusal_says_what_runs_on_the_gpu() {
    let s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs");
    for _ in 0..2 {
        s.busctl_create("L40S-4Q", &[("parent", &pf)]).expect("4Q");
    }
    let e = s
        .busctl_create("L40S-8Q", &[("parent", &pf)])
        .expect_err("one size at a time");
    assert!(
        e.contains("runs 2× NVIDIA L40S-4Q, and the driver offers no NVIDIA L40S-8Q next to them"),
        "{e}"
    );
}

/// A VF that carries a vGPU, or its GPU, is never passed through: vgpud's own check names
/// the device (before the GPU's enabled VFs, a later check, could say anything); nor a GPU
/// with VFs enabled, or one whose VFs carry mdevs (A40).
#[tokio::test]
async fn a_vf_with_a_vgpu_and_its_gpu_are_not_passed_through_and_the_device_is_named() {
    let s = Setup::new(&["nvidia-l40s", "nvidia-a40"]).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs");
    let e = m
        .create_device("passthrough", opts(&[("parent", pf.as_str())]))
        .await
        .expect_err("a GPU with VFs");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Busy", "{e}");
    assert!(
        error_message(&e).contains(&format!("{pf} has 32 SR-IOV VFs enabled")),
        "{}",
        error_message(&e)
    );
    // An A40's mdevs live on its VFs: the GPU carries them.
    let a40 = gpus_of_model(&s, "A40").await[0].clone();
    assert_eq!(busctl_set_vfs(&s, &a40, 32), Ok(32));
    let mdev = s
        .busctl_create("A40-2Q", &[("parent", &a40)])
        .expect("an A40 mdev");
    let e = m
        .create_device("passthrough", opts(&[("parent", a40.as_str())]))
        .await
        .expect_err("an A40 with an mdev");
    assert!(
        error_message(&e).contains(&format!("{a40} carries device {mdev}")),
        "{}",
        error_message(&e)
    );
    let uuid = s
        .busctl_create("L40S-4Q", &[("parent", &pf), ("owner", "vm-a")])
        .expect("4Q");
    let vf = device_proxy(&s.conn, &uuid)
        .await
        .address()
        .await
        .expect("Address");
    for (what, parent) in [("its VF", vf.as_str()), ("its GPU", pf.as_str())] {
        let e = m
            .create_device("passthrough", opts(&[("parent", parent)]))
            .await
            .expect_err(what);
        assert_eq!(error_name(&e), "org.vgpud1.Error.Busy", "{what}: {e}");
        assert!(
            error_message(&e).contains(&format!("{parent} carries device {uuid}")),
            "{what}: {}",
            error_message(&e)
        );
    }
    assert_eq!(
        std::fs::read_to_string(s.host.path(&format!(
            "sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
        )))
        .expect("the VF's type")
        .trim(),
        "1150",
        "the vGPU stays"
    );
}

/// A release the driver refuses with EBUSY (a guest holds the VF) is `Busy` and keeps the
/// device, any other refusal `Failed`; one it answers EPERM (no vGPU on the VF: another
/// release came first) is done.
#[tokio::test]
async fn a_release_refused_busy_keeps_the_device_and_one_already_done_is_done() {
    let s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs");
    let uuid = s
        .busctl_create("L40S-4Q", &[("parent", &pf), ("owner", "vm-a")])
        .expect("4Q");
    let vf = device_proxy(&s.conn, &uuid)
        .await
        .address()
        .await
        .expect("Address");
    let current = || sys(&s, &format!("{vf}/nvidia/current_vgpu_type"));
    sim_option(&s, "fail-vf-release", "EBUSY once");
    let e = m
        .remove_device(&uuid, opts(&[]))
        .await
        .expect_err("a guest holds it");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Busy", "{e}");
    assert!(
        error_message(&e).contains(&format!("the vGPU on VF {vf} is in use by a guest")),
        "{}",
        error_message(&e)
    );
    assert_eq!(current(), "1150");
    assert_eq!(
        device_proxy(&s.conn, &uuid)
            .await
            .owner()
            .await
            .expect("the device stays"),
        "vm-a"
    );
    // Any other refusal is the host's failure, named, and the device stays too.
    sim_option(&s, "fail-vf-release", "EIO once");
    let e = m
        .remove_device(&uuid, opts(&[]))
        .await
        .expect_err("the driver fails");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Failed", "{e}");
    assert!(
        error_message(&e).contains(&format!("clearing the vGPU of {vf}")),
        "{}",
        error_message(&e)
    );
    assert_eq!(current(), "1150");
    sim_option(&s, "fail-vf-release", "EPERM once");
    m.remove_device(&uuid, opts(&[]))
        .await
        .expect("released by someone else first: done");
    assert_eq!(current(), "0");
    assert!(
        m.remove_device(&uuid, opts(&[])).await.is_err(),
        "the device is gone"
    );
}

/// Sets a test option of the simulated host (see `crates/sim/src/lib.rs`).
fn sim_option(s: &Setup, name: &str, value: &str) {
    let dir = s.host.path("run/vgpud-simulator");
    std::fs::create_dir_all(&dir).expect("state dir");
    std::fs::write(dir.join(name), value).expect("write option");
}

fn sim_option_off(s: &Setup, name: &str) {
    std::fs::remove_file(s.host.path("run/vgpud-simulator").join(name)).expect("option off");
}

/// The vGPU types of every VF of `pf` (`current_vgpu_type`), and their params.
async fn vf_types(s: &Setup, pf: &str) -> Vec<(String, String)> {
    let vfs = gpu_proxy(&s.conn, pf).await.vfs().await.expect("Vfs");
    vfs.iter()
        .map(|vf| {
            (
                sys(s, &format!("{vf}/nvidia/current_vgpu_type")),
                sys(s, &format!("{vf}/nvidia/vgpu_params")),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_driver_refusing_a_vf_type_is_answered_by_its_errno() {
    let s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs");
    let untouched = vec![("0".to_string(), String::new()); 32];
    // EPERM: another writer set a type on the VF first; EIO: the driver cannot place the
    // type. Both are a GPU without room, said with the driver's answer.
    for (errno, says) in [
        ("EPERM", "was given a vGPU by someone else meanwhile"),
        ("EIO", "the driver refused NVIDIA L40S-4Q on VF"),
    ] {
        sim_option(&s, "fail-vf-type-write", errno);
        let err = m
            .create_device("L40S-4Q", opts(&[("parent", &pf)]))
            .await
            .expect_err(errno);
        assert_eq!(
            error_name(&err),
            "org.vgpud1.Error.NoCapacity",
            "{errno}: {err}"
        );
        assert!(error_message(&err).contains(says), "{errno}: {err}");
        assert_eq!(vf_types(&s, &pf).await, untouched, "{errno}");
    }
    // EINVAL: the driver does not take the type at all.
    sim_option(&s, "fail-vf-type-write", "EINVAL");
    let err = m
        .create_device("L40S-4Q", opts(&[("parent", &pf)]))
        .await
        .expect_err("EINVAL");
    assert_eq!(
        error_name(&err),
        "org.vgpud1.Error.InvalidArgument",
        "{err}"
    );
    assert!(
        error_message(&err).contains("the driver rejected type nvidia-1150 on VF"),
        "{err}"
    );
    // In heterogeneous mode the params go first: a refused type takes them back.
    sim_option_off(&s, "fail-vf-type-write");
    m.set_heterogeneous_mode(&pf, true, opts(&[]))
        .await
        .expect("mixed-size on");
    sim_option(&s, "fail-vf-type-write", "EINVAL");
    let err = m
        .create_device(
            "L40S-4Q",
            opts(&[("parent", &pf), ("params", "frame_rate_limiter=0")]),
        )
        .await
        .expect_err("EINVAL with params");
    assert_eq!(
        error_name(&err),
        "org.vgpud1.Error.InvalidArgument",
        "{err}"
    );
    assert_eq!(vf_types(&s, &pf).await, untouched, "the params are cleared");
    assert!(m.list_devices().await.expect("ListDevices").is_empty());
    // Once the driver takes it, the same create lands.
    sim_option_off(&s, "fail-vf-type-write");
    let (uuid, _) = m
        .create_device(
            "L40S-4Q",
            opts(&[("parent", &pf), ("params", "frame_rate_limiter=0")]),
        )
        .await
        .expect("the driver takes it");
    let vf = device_proxy(&s.conn, &uuid)
        .await
        .address()
        .await
        .expect("Address");
    assert_eq!(sys(&s, &format!("{vf}/nvidia/current_vgpu_type")), "1150");
    assert_eq!(
        sys(&s, &format!("{vf}/nvidia/vgpu_params")),
        "frame_rate_limiter=0"
    );
}

#[tokio::test]
async fn a_driver_refusing_the_params_leaves_no_half_made_vgpu() {
    let s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs");
    // In equal-size mode the params follow the type: refused, the type goes again.
    sim_option(&s, "fail-vgpu-params-write", "EINVAL");
    let err = m
        .create_device(
            "L40S-4Q",
            opts(&[("parent", &pf), ("params", "frame_rate_limiter=0")]),
        )
        .await
        .expect_err("params refused");
    assert_eq!(
        error_name(&err),
        "org.vgpud1.Error.InvalidArgument",
        "{err}"
    );
    assert!(
        error_message(&err)
            .contains("the driver rejected nvidia/vgpu_params=\"frame_rate_limiter=0\" on VF")
            && error_message(&err).contains("so the vGPU was not kept"),
        "{err}"
    );
    assert_eq!(
        vf_types(&s, &pf).await,
        vec![("0".to_string(), String::new()); 32],
        "no VF keeps the type"
    );
    assert_eq!(available(&s, &pf, "L40S-8Q").await, 6, "every size is free");
    assert!(m.list_devices().await.expect("ListDevices").is_empty());
    // Without params there is nothing to refuse; a persistent device asked not to start at
    // boot does not.
    let mut o = opts(&[("parent", &pf)]);
    o.extend(bool_opts(&[("persistent", true), ("autostart", false)]));
    let (uuid, _) = m.create_device("L40S-4Q", o).await.expect("no params");
    let dev = device_proxy(&s.conn, &uuid).await;
    assert!(dev.active().await.expect("Active"));
    assert!(dev.persistent().await.expect("Persistent"));
    assert!(!dev.autostart().await.expect("Autostart"));
}

/// A persistent SR-IOV vGPU that lost its VF: defined, inactive, no VF, no IOMMU group.
async fn holds_no_vf(s: &Setup, uuid: &str, when: &str) {
    let dev = device_proxy(&s.conn, uuid).await;
    assert_eq!(dev.address().await.expect("Address"), "", "{when}");
    assert!(!dev.active().await.expect("Active"), "{when}");
    assert_eq!(dev.iommu_group().await.expect("IommuGroup"), -1, "{when}");
    assert!(dev.persistent().await.expect("Persistent"), "{when}");
}

#[tokio::test]
async fn a_vf_given_to_a_new_vgpu_is_taken_from_the_record_that_named_it() {
    let mut s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs");
    // Not started at boot: an autostart device that vgpud sees stopped behind its back is
    // started again ("repaired"), and vgpud may see the release below before the 8Q create
    // (the VFs' uevents of SetVfCount can still be in its queue), so the 4Q would be back.
    let mut o = opts(&[("parent", &pf)]);
    o.extend(bool_opts(&[("persistent", true), ("autostart", false)]));
    let (old, _) = m
        .create_device("L40S-4Q", o)
        .await
        .expect("a persistent 4Q");
    let dev = device_proxy(&s.conn, &old).await;
    let vf = dev.address().await.expect("Address");
    assert!(dev.iommu_group().await.expect("IommuGroup") >= 0);
    // Another tool releases the VF (no uevent: vgpud does not know yet), and a create of
    // another size lands on it.
    vgpud::host::Host::simulated(&s.host.root)
        .write_attr(
            &s.host.path(&format!(
                "sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
            )),
            "0",
        )
        .expect("release behind vgpud's back");
    let (new, _) = m
        .create_device("L40S-8Q", opts(&[("parent", &pf)]))
        .await
        .expect("8Q on the free GPU");
    assert_eq!(
        device_proxy(&s.conn, &new)
            .await
            .address()
            .await
            .expect("Address"),
        vf,
        "the first free VF"
    );
    holds_no_vf(&s, &old, "at once").await;
    drop(m);
    s.restart().await;
    holds_no_vf(&s, &old, "after a restart").await;
    let dev = device_proxy(&s.conn, &new).await;
    assert!(dev.active().await.expect("Active"));
    assert_eq!(dev.address().await.expect("Address"), vf);
}

#[tokio::test]
async fn of_two_sizes_asked_at_once_the_second_finds_the_first_running_and_no_vf_for_it() {
    let s = Setup::new(L40S).await;
    let m = s.manager().await;
    let pf = gpus_of_model(&s, "L40S").await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs");
    // A slow driver: both creates find every VF free before either's type lands; the
    // second, under the GPU's lock, then finds the VFs offering only the first one's size.
    sim_option(&s, "vf-type-delay-ms", "1500");
    let (big, small) = tokio::join!(
        m.create_device("L40S-8Q", opts(&[("parent", &pf)])),
        m.create_device("L40S-4Q", opts(&[("parent", &pf)])),
    );
    let (err, made, other) = match (big, small) {
        (Ok(_), Err(e)) => (e, "NVIDIA L40S-8Q", "NVIDIA L40S-4Q"),
        (Err(e), Ok(_)) => (e, "NVIDIA L40S-4Q", "NVIDIA L40S-8Q"),
        other => panic!("one size only: {other:?}"),
    };
    assert_eq!(error_name(&err), "org.vgpud1.Error.NoCapacity", "{err}");
    assert!(
        error_message(&err).contains(&format!(
            "runs 1× {made}, and the driver offers no {other} next to them"
        )),
        "no VF was given the other size: {err}"
    );
    let types: Vec<String> = vf_types(&s, &pf)
        .await
        .into_iter()
        .map(|(t, _)| t)
        .filter(|t| t != "0")
        .collect();
    assert_eq!(types.len(), 1, "{types:?}");
}
