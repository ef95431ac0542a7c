//! Tests of PCI binding, SR-IOV, the NVIDIA vendor-VFIO files, `sriov-manage` and the
//! profiles with SR-IOV and passthrough GPUs.

use std::fs;
use std::path::PathBuf;

use nix::errno::Errno;

use super::tests::{avail, create, e, host, remove, snapshot, GPU0, U1, U2};
use super::*;

pub(super) const L40S0: &str = "0000:41:00.0";
pub(super) const L40S1: &str = "0000:c1:00.0";
pub(super) const A40: &str = "0000:e8:00.0";
pub(super) const MI300X: &str = "0000:71:00.0";
/// passthrough (a), (b) and (c).
pub(super) const CLEAN: &str = "0000:21:00.0";
pub(super) const CONSOLE: &str = "0000:2d:00.0";
pub(super) const SHARED: &str = "0000:33:00.0";

pub(super) fn dev(host: &SimHost, bdf: &str) -> PathBuf {
    host.sys(&format!("bus/pci/devices/{bdf}"))
}

pub(super) fn write(host: &SimHost, rel: &str, value: &str) -> Result<(), Option<i32>> {
    host.write_attr(&host.sys(rel), value)
        .map_err(|e| e.raw_os_error())
}

pub(super) fn bind(host: &SimHost, driver: &str, bdf: &str) -> Result<(), Option<i32>> {
    write(
        host,
        &format!("bus/pci/drivers/{driver}/bind"),
        &format!("{bdf}\n"),
    )
}

pub(super) fn unbind(host: &SimHost, driver: &str, bdf: &str) -> Result<(), Option<i32>> {
    write(host, &format!("bus/pci/drivers/{driver}/unbind"), bdf)
}

pub(super) fn driver(host: &SimHost, bdf: &str) -> Option<String> {
    host.link_name(&dev(host, bdf).join("driver"))
        .expect("link")
}

fn attr(host: &SimHost, bdf: &str, name: &str) -> String {
    fs::read_to_string(dev(host, bdf).join(name)).expect(name)
}

fn numvfs(host: &SimHost, bdf: &str, value: &str) -> Result<(), Option<i32>> {
    write(host, &format!("bus/pci/devices/{bdf}/sriov_numvfs"), value)
}

/// Runs `sriov-manage ARGS` on the simulated host.
pub(super) fn sriov_manage(host: &SimHost, args: &[&str]) -> ToolOutput {
    host.run_tool(&host.root().join("usr/lib/nvidia/sriov-manage"), args)
        .expect("run")
}

/// The VF addresses of an L40S/A40 PF on bus `bus` (offset 4, stride 1, 32 VFs).
pub(super) fn vfs_of(bus: &str) -> Vec<String> {
    (4..36)
        .map(|rid| format!("0000:{bus}:{:02x}.{}", rid >> 3, rid & 7))
        .collect()
}

/// Asserts two snapshots are equal, showing only what differs.
pub(super) fn assert_same(
    now: &std::collections::BTreeMap<PathBuf, String>,
    expected: &std::collections::BTreeMap<PathBuf, String>,
    what: &str,
) {
    let mut diff = Vec::new();
    for key in now
        .keys()
        .chain(expected.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (a, b) = (now.get(key), expected.get(key));
        if a != b {
            let short = |v: Option<&String>| v.map(|s| s.chars().take(120).collect::<String>());
            diff.push(format!(
                "  {}: {:?}, expected {:?}",
                key.display(),
                short(a),
                short(b)
            ));
        }
    }
    assert!(
        diff.is_empty(),
        "{what}: the tree differs\n{}",
        diff.join("\n")
    );
}

fn vfio_groups(host: &SimHost) -> Vec<String> {
    host.list_dir(&host.root().join("dev/vfio"))
        .expect("list")
        .into_iter()
        .filter(|n| n != "devices")
        .collect()
}

// ---- binding ------------------------------------------------------------------------------

#[test]
fn unbind_and_bind_refuse_like_the_driver_core() {
    let (_dir, host) = host("passthrough");
    assert_eq!(unbind(&host, "nvidia", "0000:99:00.0"), e(Errno::ENODEV));
    assert_eq!(
        unbind(&host, "vfio-pci", CLEAN),
        e(Errno::ENODEV),
        "not bound there"
    );
    assert_eq!(bind(&host, "nvidia", "0000:99:00.0"), e(Errno::ENODEV));
    // Bound: EBUSY for a driver that matches, ENODEV for one that does not.
    assert_eq!(bind(&host, "nvidia", CLEAN), e(Errno::EBUSY));
    assert_eq!(bind(&host, "snd_hda_intel", CLEAN), e(Errno::ENODEV));
    unbind(&host, "nvidia", CLEAN).expect("unbind");
    assert_eq!(driver(&host, CLEAN), None);
    assert!(!host
        .sys(&format!("bus/pci/drivers/nvidia/{CLEAN}"))
        .exists());
    assert!(!attr(&host, CLEAN, "uevent").contains("DRIVER="));
    // vfio-pci has no id table: without an override or a dynamic id it does not match.
    assert_eq!(bind(&host, "vfio-pci", CLEAN), e(Errno::ENODEV));
    assert_eq!(bind(&host, "snd_hda_intel", CLEAN), e(Errno::ENODEV));
    bind(&host, "nvidia", CLEAN).expect("bind back");
    assert_eq!(driver(&host, CLEAN).as_deref(), Some("nvidia"));
    assert!(attr(&host, CLEAN, "uevent").starts_with("DRIVER=nvidia\n"));
    let back = host
        .resolve(&host.sys(&format!("bus/pci/drivers/nvidia/{CLEAN}")))
        .expect("driver link");
    assert_eq!(back, host.resolve(&dev(&host, CLEAN)).expect("dev"));
}

#[test]
fn a_drm_drivers_framebuffer_goes_with_its_device_and_fbcon_follows() {
    let (_dir, host) = host("passthrough");
    let graphics = || host.list_dir(&host.sys("class/graphics")).expect("list");
    let vt_bind = |id: &str| {
        fs::read_to_string(host.sys(&format!("class/vtconsole/{id}/bind"))).expect("bind")
    };
    assert_eq!(graphics(), vec!["fb0", "fb1", "fb2"]);
    // A GPU fbcon does not draw on: its framebuffer goes, fbcon stays.
    unbind(&host, "nvidia", CLEAN).expect("unbind");
    assert_eq!(graphics(), vec!["fb1", "fb2"]);
    assert!(!dev(&host, CLEAN).join("graphics").exists());
    assert_eq!(vt_bind("vtcon1"), "1\n");
    bind(&host, "nvidia", CLEAN).expect("bind");
    assert_eq!(
        graphics(),
        vec!["fb0", "fb1", "fb2"],
        "the lowest free index"
    );
    // The console's: every console was on it, they go back to the dummy console.
    unbind(&host, "nvidia", CONSOLE).expect("unbind");
    assert_eq!(graphics(), vec!["fb0", "fb2"]);
    assert_eq!(
        (vt_bind("vtcon0"), vt_bind("vtcon1")),
        ("1\n".into(), "0\n".into())
    );
    // Bound again, the primary display's framebuffer makes fbcon take the consoles over.
    bind(&host, "nvidia", CONSOLE).expect("bind");
    assert_eq!(graphics(), vec!["fb0", "fb1", "fb2"]);
    assert_eq!(
        (vt_bind("vtcon0"), vt_bind("vtcon1")),
        ("0\n".into(), "1\n".into())
    );
}

#[test]
fn driver_override_reads_null_when_unset() {
    let (_dir, host) = host("passthrough");
    let rel = format!("bus/pci/devices/{CLEAN}/driver_override");
    assert_eq!(attr(&host, CLEAN, "driver_override"), "(null)\n");
    write(&host, &rel, "vfio-pci\n").expect("set");
    assert_eq!(attr(&host, CLEAN, "driver_override"), "vfio-pci\n");
    write(&host, &rel, "vfio-pci").expect("set without newline");
    assert_eq!(attr(&host, CLEAN, "driver_override"), "vfio-pci\n");
    // Only the override's driver matches now.
    unbind(&host, "nvidia", CLEAN).expect("unbind");
    assert_eq!(bind(&host, "nvidia", CLEAN), e(Errno::ENODEV));
    write(&host, &rel, "\n").expect("clear");
    assert_eq!(attr(&host, CLEAN, "driver_override"), "(null)\n");
    write(&host, &rel, "vfio-pci").expect("set");
    write(&host, &rel, "").expect("clear with nothing");
    assert_eq!(attr(&host, CLEAN, "driver_override"), "(null)\n");
    assert_eq!(write(&host, &rel, &"x".repeat(5000)), e(Errno::EINVAL));
    bind(&host, "nvidia", CLEAN).expect("matches again");
}

/// Sets each function's `driver_override` to vfio-pci and unbinds it from its driver.
fn override_to_vfio_pci(host: &SimHost, bdfs: &[&str]) {
    for bdf in bdfs {
        write(
            host,
            &format!("bus/pci/devices/{bdf}/driver_override"),
            "vfio-pci",
        )
        .expect("override");
        write(host, &format!("bus/pci/devices/{bdf}/driver/unbind"), bdf).expect("unbind");
    }
}

#[test]
fn vfio_pci_binds_by_override_and_owns_the_group_node() {
    let (dir, host) = host("passthrough");
    let before = snapshot(dir.path());
    let audio = "0000:21:00.1";
    override_to_vfio_pci(&host, &[CLEAN, audio]);
    assert!(vfio_groups(&host).is_empty());
    write(&host, "bus/pci/drivers_probe", CLEAN).expect("probe");
    assert_eq!(driver(&host, CLEAN).as_deref(), Some("vfio-pci"));
    assert_eq!(vfio_groups(&host), vec!["77"]);
    let vdev = dev(&host, CLEAN).join("vfio-dev/vfio0");
    assert_eq!(
        fs::read_to_string(vdev.join("dev")).expect("dev"),
        "508:0\n"
    );
    assert!(host.root().join("dev/vfio/devices/vfio0").is_file());
    assert_eq!(
        host.resolve(&host.sys("class/vfio-dev/vfio0"))
            .expect("class"),
        host.resolve(&vdev).expect("vdev")
    );
    bind(&host, "vfio-pci", audio).expect("bind audio");
    assert!(dev(&host, audio).join("vfio-dev/vfio1").is_dir());
    // The node stays while one device of the group is bound.
    unbind(&host, "vfio-pci", CLEAN).expect("unbind");
    assert!(!dev(&host, CLEAN).join("vfio-dev").exists());
    assert!(!host.root().join("dev/vfio/devices/vfio0").exists());
    assert_eq!(vfio_groups(&host), vec!["77"]);
    // The lowest free number is reused.
    bind(&host, "vfio-pci", CLEAN).expect("rebind");
    assert!(dev(&host, CLEAN).join("vfio-dev/vfio0").is_dir());
    for (bdf, drv) in [(CLEAN, "nvidia"), (audio, "snd_hda_intel")] {
        unbind(&host, "vfio-pci", bdf).expect("unbind");
        write(
            &host,
            &format!("bus/pci/devices/{bdf}/driver_override"),
            "\n",
        )
        .expect("clear");
        write(&host, "bus/pci/drivers_probe", bdf).expect("probe");
        assert_eq!(driver(&host, bdf).as_deref(), Some(drv));
    }
    assert!(vfio_groups(&host).is_empty());
    assert_same(&snapshot(dir.path()), &before, "after unbinding");
}

#[test]
fn a_vfio_pci_bind_announces_the_group_node_and_the_vfio_device_before_the_bind() {
    let (_dir, host) = host("passthrough");
    let audio = "0000:21:00.1";
    override_to_vfio_pci(&host, &[CLEAN, audio]);
    let listener = super::tests::uevent_listener(&host);
    let of = |bdf: &str| {
        let d = host.resolve(&dev(&host, bdf)).expect("device");
        let rel = d
            .strip_prefix(host.resolve(&host.sys("")).expect("sys"))
            .expect("below sys");
        format!("/{}", rel.display())
    };
    let (clean, sound) = (of(CLEAN), of(audio));
    let seen = |l: &std::os::unix::net::UnixDatagram| -> Vec<String> {
        super::tests::uevents_sent(l)
            .into_iter()
            .map(|(a, s, p, n)| format!("{a} {s} {p} {n}").trim_end().to_string())
            .collect()
    };
    bind(&host, "vfio-pci", CLEAN).expect("bind");
    assert_eq!(
        seen(&listener),
        [
            "add vfio /devices/virtual/vfio/77 vfio/77".to_string(),
            format!("add vfio-dev {clean}/vfio-dev/vfio0 vfio/devices/vfio0"),
            format!("bind pci {clean}"),
        ]
    );
    // The group's node is there already: only the second function's vfio device comes.
    bind(&host, "vfio-pci", audio).expect("bind audio");
    assert_eq!(
        seen(&listener),
        [
            format!("add vfio-dev {sound}/vfio-dev/vfio1 vfio/devices/vfio1"),
            format!("bind pci {sound}"),
        ]
    );
    unbind(&host, "vfio-pci", CLEAN).expect("unbind");
    assert_eq!(
        seen(&listener),
        [
            format!("remove vfio-dev {clean}/vfio-dev/vfio0 vfio/devices/vfio0"),
            format!("unbind pci {clean}"),
        ]
    );
    // The last registered function of the group takes the node with it.
    unbind(&host, "vfio-pci", audio).expect("unbind audio");
    assert_eq!(
        seen(&listener),
        [
            format!("remove vfio-dev {sound}/vfio-dev/vfio1 vfio/devices/vfio1"),
            "remove vfio /devices/virtual/vfio/77 vfio/77".to_string(),
            format!("unbind pci {sound}"),
        ]
    );
}

#[test]
fn drivers_probe_needs_a_known_device_and_leaves_unmatched_ones_alone() {
    let (_dir, host) = host("passthrough");
    assert_eq!(
        write(&host, "bus/pci/drivers_probe", "0000:99:00.0"),
        e(Errno::ENODEV)
    );
    // Bound already: nothing to do.
    write(&host, "bus/pci/drivers_probe", CLEAN).expect("bound");
    // The NIC's driver is gone (say, unloaded): nothing matches, and that is no error.
    let nic = "0000:34:00.0";
    write(&host, "bus/pci/drivers/e1000e/unbind", nic).expect("unbind");
    fs::remove_dir_all(host.sys("bus/pci/drivers/e1000e")).expect("rmmod");
    write(&host, "bus/pci/drivers_probe", nic).expect("no driver");
    assert_eq!(driver(&host, nic), None);
}

#[test]
fn vfio_pci_refuses_devices_without_a_group_and_bridges() {
    let (_dir, host) = host("passthrough");
    let rel = |bdf: &str| format!("bus/pci/devices/{bdf}/driver_override");
    // A device whose IOMMU group is gone (no IOMMU for it).
    unbind(&host, "nvidia", CLEAN).expect("unbind");
    fs::remove_file(dev(&host, CLEAN).join("iommu_group")).expect("rm group link");
    write(&host, &rel(CLEAN), "vfio-pci").expect("override");
    assert_eq!(bind(&host, "vfio-pci", CLEAN), e(Errno::EINVAL));
    assert_eq!(driver(&host, CLEAN), None);
    // drivers_probe tries and fails quietly.
    write(&host, "bus/pci/drivers_probe", CLEAN).expect("probe");
    assert_eq!(driver(&host, CLEAN), None);
    let port = "0000:32:01.0";
    unbind(&host, "pcieport", port).expect("unbind");
    write(&host, &rel(port), "vfio-pci").expect("override");
    assert_eq!(bind(&host, "vfio-pci", port), e(Errno::EINVAL));
}

#[test]
fn new_id_adds_a_dynamic_id_and_binds_what_it_matches() {
    let (dir, host) = host("passthrough");
    let before = snapshot(dir.path());
    let new_id = "bus/pci/drivers/vfio-pci/new_id";
    let remove_id = "bus/pci/drivers/vfio-pci/remove_id";
    assert_eq!(write(&host, new_id, "10de"), e(Errno::EINVAL));
    assert_eq!(write(&host, remove_id, "10de 24b0"), e(Errno::ENODEV));
    unbind(&host, "nvidia", CLEAN).expect("unbind");
    write(&host, new_id, "10de 24b0\n").expect("new_id");
    // The unbound A4000 is taken at once; the bound ones stay where they are.
    assert_eq!(driver(&host, CLEAN).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&host, CONSOLE).as_deref(), Some("nvidia"));
    assert_eq!(write(&host, new_id, "0x10de 0x24b0"), e(Errno::EEXIST));
    // A static id of a driver's table is a duplicate too.
    assert_eq!(
        write(&host, "bus/pci/drivers/e1000e/new_id", "8086 10d3"),
        e(Errno::EEXIST)
    );
    unbind(&host, "nvidia", CONSOLE).expect("unbind");
    bind(&host, "vfio-pci", CONSOLE).expect("matches by dynamic id");
    write(&host, remove_id, "10de 24b0").expect("remove_id");
    assert_eq!(write(&host, remove_id, "10de 24b0"), e(Errno::ENODEV));
    for bdf in [CLEAN, CONSOLE] {
        unbind(&host, "vfio-pci", bdf).expect("unbind");
        assert_eq!(bind(&host, "vfio-pci", bdf), e(Errno::ENODEV));
        bind(&host, "nvidia", bdf).expect("bind");
    }
    // What is left: the (now empty) dynamic-id file of vfio-pci, below the simulator's state.
    fs::remove_dir_all(dir.path().join("run/vgpud-simulator/dynids")).expect("rm");
    let mut now = snapshot(dir.path());
    now.retain(|p, _| !p.starts_with("run"));
    let mut was = before;
    was.retain(|p, _| !p.starts_with("run"));
    assert_same(&now, &was, "after remove_id");
}

#[test]
fn unbinding_nvidia_removes_the_mdev_parent_and_binding_restores_it() {
    let (dir, host) = host("nvidia-turing");
    let before = snapshot(dir.path());
    let bdf = "0000:3b:00.0";
    create(&host, GPU0, "nvidia-259", U1).expect("create");
    create(&host, GPU0, "nvidia-259", U2).expect("create");
    unbind(&host, "nvidia", bdf).expect("unbind");
    let gpu = host.root().join(GPU0);
    assert!(!gpu.join("mdev_supported_types").exists());
    assert!(!host.sys(&format!("class/mdev_bus/{bdf}")).exists());
    assert!(host
        .list_dir(&host.sys("bus/mdev/devices"))
        .expect("list")
        .is_empty());
    assert!(!gpu.join(U1).exists());
    bind(&host, "nvidia", bdf).expect("bind");
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 24);
    assert_same(&snapshot(dir.path()), &before, "after binding back");
}

// ---- SR-IOV -------------------------------------------------------------------------------

#[test]
fn sriov_numvfs_refuses_like_iov_c() {
    let (_dir, host) = host("nvidia-l40s");
    assert_eq!(attr(&host, L40S0, "sriov_numvfs"), "0\n");
    assert_eq!(numvfs(&host, L40S0, "33"), e(Errno::ERANGE));
    assert_eq!(numvfs(&host, L40S0, "70000"), e(Errno::ERANGE));
    assert_eq!(numvfs(&host, L40S0, "four"), e(Errno::EINVAL));
    numvfs(&host, L40S0, "0").expect("same value: no-op, even on nvidia");
    // The NVIDIA driver has no sriov_configure.
    assert_eq!(numvfs(&host, L40S0, "4"), e(Errno::ENOENT));
    unbind(&host, "nvidia", L40S0).expect("unbind");
    assert_eq!(numvfs(&host, L40S0, "4"), e(Errno::ENOENT), "no driver");
    write(
        &host,
        &format!("bus/pci/devices/{L40S0}/driver_override"),
        "pci-pf-stub",
    )
    .expect("override");
    bind(&host, "pci-pf-stub", L40S0).expect("pf-stub");
    numvfs(&host, L40S0, "4\n").expect("enable");
    assert_eq!(attr(&host, L40S0, "sriov_numvfs"), "4\n");
    assert_eq!(numvfs(&host, L40S0, "8"), e(Errno::EBUSY));
    numvfs(&host, L40S0, "0x4").expect("kstrtou16 base 0: same value");
    numvfs(&host, L40S0, "0").expect("disable");
    assert_eq!(attr(&host, L40S0, "sriov_numvfs"), "0\n");
    assert!(!dev(&host, L40S0).join("virtfn0").exists());
}

#[test]
fn gim_made_its_vfs_and_configures_no_others() {
    let (_dir, host) = host("amd-mxgpu");
    assert_eq!(attr(&host, MI300X, "sriov_numvfs"), "8\n");
    assert_eq!(attr(&host, MI300X, "sriov_totalvfs"), "8\n");
    assert_eq!(driver(&host, MI300X).as_deref(), Some("gim"));
    numvfs(&host, MI300X, "8").expect("same value");
    assert_eq!(numvfs(&host, MI300X, "0"), e(Errno::ENOENT));
    assert_eq!(numvfs(&host, MI300X, "4"), e(Errno::ENOENT));
    assert_eq!(numvfs(&host, MI300X, "9"), e(Errno::ERANGE));
    let mut groups = Vec::new();
    for i in 0..8u32 {
        let vf = format!("0000:71:02.{i}");
        let link = dev(&host, MI300X).join(format!("virtfn{i}"));
        assert_eq!(
            fs::read_link(&link).expect("virtfn"),
            PathBuf::from(format!("../{vf}"))
        );
        assert_eq!(attr(&host, &vf, "device"), "0x74b5\n");
        assert_eq!(attr(&host, &vf, "vendor"), "0x1002\n");
        assert_eq!(driver(&host, &vf), None, "amdgpu is blacklisted");
        assert_eq!(
            fs::read_link(dev(&host, &vf).join("physfn")).expect("physfn"),
            PathBuf::from(format!("../{MI300X}"))
        );
        let g = host
            .link_name(&dev(&host, &vf).join("iommu_group"))
            .expect("g")
            .expect("group");
        assert_eq!(g, (68 + i).to_string());
        groups.push(g);
    }
    // A VF goes to vfio-pci by override, alone in its group.
    let vf = "0000:71:02.3";
    write(
        &host,
        &format!("bus/pci/devices/{vf}/driver_override"),
        "vfio-pci",
    )
    .expect("o");
    write(&host, "bus/pci/drivers_probe", vf).expect("probe");
    assert_eq!(driver(&host, vf).as_deref(), Some("vfio-pci"));
    assert_eq!(vfio_groups(&host), vec!["71"]);
}

#[test]
fn thirty_two_vfs_appear_where_offset_and_stride_say() {
    let (dir, host) = host("nvidia-l40s");
    let root = fs::canonicalize(dir.path()).expect("root");
    let out = sriov_manage(&host, &["-e", L40S0]);
    assert_eq!(out.stderr, "");
    assert_eq!(out.status, 0);
    let vfs = vfs_of("41");
    assert_eq!(vfs.first().map(String::as_str), Some("0000:41:00.4"));
    assert_eq!(vfs.last().map(String::as_str), Some("0000:41:04.3"));
    let pf = root.join("sys/devices/pci0000:40/0000:40:01.1").join(L40S0);
    let mut groups = std::collections::BTreeSet::new();
    for (i, vf) in vfs.iter().enumerate() {
        assert_eq!(
            fs::read_link(pf.join(format!("virtfn{i}"))).expect("virtfn"),
            PathBuf::from(format!("../{vf}"))
        );
        let d = pf.parent().expect("port").join(vf);
        assert_eq!(
            host.resolve(&dev(&host, vf)).expect("bus link"),
            d,
            "a sibling of the PF"
        );
        assert_eq!(
            fs::read_link(d.join("physfn")).expect("physfn"),
            PathBuf::from(format!("../{L40S0}"))
        );
        for (name, value) in [
            ("vendor", "0x10de\n"),
            ("device", "0x26b9\n"),
            ("class", "0x030200\n"),
            ("subsystem_vendor", "0x10de\n"),
            ("subsystem_device", "0x1851\n"),
            ("numa_node", "0\n"),
            ("driver_override", "(null)\n"),
        ] {
            assert_eq!(
                fs::read_to_string(d.join(name)).expect(name),
                value,
                "{vf} {name}"
            );
        }
        assert!(fs::read_to_string(d.join("uevent"))
            .expect("uevent")
            .contains(&format!("PCI_SLOT_NAME={vf}\n")));
        assert_eq!(
            host.link_name(&d.join("subsystem")).expect("s").as_deref(),
            Some("pci")
        );
        let res = fs::read_to_string(d.join("resource")).expect("resource");
        assert_eq!(res.lines().count(), 13);
        assert_eq!(rules::bar_size_mib(&res, 0), Some(16));
        assert_eq!(rules::bar_size_mib(&res, 1), Some(1024));
        let g = host
            .link_name(&d.join("iommu_group"))
            .expect("g")
            .expect("group");
        assert!(groups.insert(g.clone()), "{vf}: its own group");
        let members = host
            .list_dir(&host.sys(&format!("kernel/iommu_groups/{g}/devices")))
            .expect("members");
        assert_eq!(members, vec![vf.clone()]);
        // sriov-manage bound every VF to nvidia: a vendor-VFIO VF with a vfio device.
        assert_eq!(driver(&host, vf).as_deref(), Some("nvidia"));
        assert!(d.join("nvidia/current_vgpu_type").is_file());
        assert_eq!(fsx::list(&d.join("vfio-dev")).expect("vfio-dev").len(), 1);
    }
    // Groups are the lowest free numbers: 4 … 9, then from 14 on, skipping the profile's.
    assert!(groups.contains("4") && groups.contains("14"));
    assert!(!groups.contains("61"));
    assert_eq!(attr(&host, L40S0, "sriov_numvfs"), "32\n");
    assert_eq!(driver(&host, L40S0).as_deref(), Some("nvidia"));
    assert!(
        !dev(&host, L40S0).join("nvidia").exists(),
        "no nvidia/ on the PF"
    );
    assert_eq!(
        fsx::list(&root.join("dev/vfio/devices"))
            .expect("list")
            .len(),
        32
    );
    // The other GPU is untouched.
    assert_eq!(attr(&host, L40S1, "sriov_numvfs"), "0\n");
}

// ---- sriov-manage -------------------------------------------------------------------------

#[test]
fn sriov_manage_enables_and_disables_idempotently() {
    let (dir, host) = host("nvidia-l40s");
    let before = snapshot(dir.path());
    let out = sriov_manage(&host, &["-e", L40S0]);
    assert_eq!(
        (out.status, out.stdout.as_str(), out.stderr.as_str()),
        (0, "Enabling VFs on 0000:41:00.0\n", "")
    );
    let enabled = snapshot(dir.path());
    let out = sriov_manage(&host, &["-e", "41:00.0"]);
    assert_eq!(
        (out.status, out.stdout.as_str()),
        (0, "GPU at 0000:41:00.0 already has VFs enabled.\n")
    );
    assert_eq!(snapshot(dir.path()), enabled);
    let out = sriov_manage(&host, &["-d", L40S0]);
    assert_eq!(
        (out.status, out.stdout.as_str(), out.stderr.as_str()),
        (0, "Disabling VFs on 0000:41:00.0\n", "")
    );
    let out = sriov_manage(&host, &["-d", L40S0]);
    assert_eq!(
        (out.status, out.stdout.as_str()),
        (0, "GPU at 0000:41:00.0 already has VFs disabled.\n")
    );
    // Back where it started (the simulator's state aside: pci-pf-stub's dynamic ids are gone).
    let strip = |mut s: std::collections::BTreeMap<PathBuf, String>| {
        s.retain(|p, _| !p.starts_with("run"));
        s
    };
    assert_same(&strip(snapshot(dir.path())), &strip(before), "after -d");
    // ALL: both GPUs.
    let out = sriov_manage(&host, &["-e", "ALL"]);
    assert_eq!(
        out.stdout,
        "Enabling VFs on 0000:41:00.0\nEnabling VFs on 0000:c1:00.0\n"
    );
    assert_eq!(attr(&host, L40S1, "sriov_numvfs"), "32\n");
    assert_eq!(driver(&host, "0000:c1:04.3").as_deref(), Some("nvidia"));
    let out = sriov_manage(&host, &["-d", "all"]);
    assert_eq!(out.status, 0);
    assert_eq!(attr(&host, L40S0, "sriov_numvfs"), "0\n");
    assert_eq!(attr(&host, L40S1, "sriov_numvfs"), "0\n");
}

#[test]
fn sriov_manage_checks_its_input() {
    let (_dir, host) = host("passthrough");
    write_profile("nvidia-l40s", host.root()).expect("l40s too");
    // Not an NVIDIA function, or no such function: exit 1, silently.
    let out = sriov_manage(&host, &["-e", "0000:34:00.0"]);
    assert_eq!((out.status, out.stdout.as_str()), (1, ""));
    let out = sriov_manage(&host, &["-e", "0000:99:00.0"]);
    assert_eq!(out.status, 1);
    // An NVIDIA function without SR-IOV: exit 0, silently.
    let out = sriov_manage(&host, &["-e", CLEAN]);
    assert_eq!(
        (out.status, out.stdout.as_str(), out.stderr.as_str()),
        (0, "", "")
    );
    // The audio function of an SR-IOV GPU would be refused by class (made SR-IOV here).
    fs::write(dev(&host, "0000:21:00.1").join("sriov_numvfs"), "0\n").expect("fake");
    let out = sriov_manage(&host, &["-e", "0000:21:00.1"]);
    assert_eq!(
        (out.status, out.stderr.as_str()),
        (1, "This is not a VGA or 3D controller. Exiting.\n")
    );
    let out = sriov_manage(&host, &[]);
    assert_eq!(out.status, 1);
    assert!(out.stderr.starts_with("Usage:"));
    let out = sriov_manage(&host, &["-h"]);
    assert_eq!(out.status, 0);
    // Only sriov-manage is known.
    let other = host.root().join("usr/lib/nvidia/other-tool");
    fs::write(&other, "").expect("write");
    let err = host.run_tool(&other, &[]).expect_err("unsupported");
    assert!(err.to_string().contains("does not emulate"), "{err}");
    // ALL skips the GPUs without SR-IOV and does the others.
    let out = sriov_manage(&host, &["-e", "ALL"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "Enabling VFs on 0000:41:00.0\nEnabling VFs on 0000:c1:00.0\n"
    );
}

#[test]
fn sriov_manage_reports_a_refused_write() {
    let (_dir, host) = host("nvidia-l40s");
    assert_eq!(sriov_manage(&host, &["-e", L40S0]).status, 0);
    let vf = "0000:41:00.4";
    write(
        &host,
        &format!("bus/pci/devices/{vf}/nvidia/current_vgpu_type"),
        "1150",
    )
    .expect("4Q");
    // Disabling unbinds the VFs from nvidia first: their vGPU goes with them.
    let out = sriov_manage(&host, &["-d", L40S0]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(sriov_manage(&host, &["-e", L40S0]).status, 0);
    // A PF that cannot leave its driver: pci-pf-stub is gone.
    fs::remove_dir_all(host.sys("bus/pci/drivers/pci-pf-stub")).expect("rmmod");
    let out = sriov_manage(&host, &["-d", L40S0]);
    assert_eq!(out.status, 1);
    assert!(out.stderr.contains("pci-pf-stub"), "{}", out.stderr);
}

#[test]
fn disabling_vfs_with_a_vgpu_type_set_is_refused() {
    let (_dir, host) = host("nvidia-l40s");
    assert_eq!(sriov_manage(&host, &["-e", L40S0]).status, 0);
    let vf = "0000:41:00.4";
    write(
        &host,
        &format!("bus/pci/devices/{vf}/nvidia/current_vgpu_type"),
        "1150",
    )
    .expect("4Q");
    // The PF moved to pci-pf-stub by hand, the VFs left on nvidia.
    unbind(&host, "nvidia", L40S0).expect("unbind");
    write(
        &host,
        &format!("bus/pci/devices/{L40S0}/driver_override"),
        "pci-pf-stub",
    )
    .expect("override");
    bind(&host, "pci-pf-stub", L40S0).expect("bind");
    assert_eq!(numvfs(&host, L40S0, "0"), e(Errno::EBUSY));
    write(
        &host,
        &format!("bus/pci/devices/{vf}/nvidia/current_vgpu_type"),
        "0",
    )
    .expect("release");
    numvfs(&host, L40S0, "0").expect("disable");
    assert!(!dev(&host, L40S0).join("virtfn0").exists());
    assert!(host
        .list_dir(&host.root().join("dev/vfio/devices"))
        .expect("list")
        .is_empty());
}

// ---- vendor-specific VFIO -----------------------------------------------------------------

fn creatable(host: &SimHost, vf: &str) -> Vec<u32> {
    let text = attr(host, vf, "nvidia/creatable_vgpu_types");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("ID    : vGPU Name"));
    lines
        .map(|l| {
            let (id, name) = l.split_once(" : ").expect("line");
            assert!(name.starts_with("NVIDIA L40S-"), "{l}");
            id.trim().parse().expect("id")
        })
        .collect()
}

fn set_type(host: &SimHost, vf: &str, value: &str) -> Result<(), Option<i32>> {
    write(
        host,
        &format!("bus/pci/devices/{vf}/nvidia/current_vgpu_type"),
        value,
    )
}

#[test]
fn current_vgpu_type_follows_the_driver() {
    let (dir, host) = host("nvidia-l40s");
    assert_eq!(sriov_manage(&host, &["-e", L40S0]).status, 0);
    let enabled = snapshot(dir.path());
    let vfs = vfs_of("41");
    let (vf0, vf1) = (vfs[0].as_str(), vfs[1].as_str());
    assert_eq!(attr(&host, vf0, "nvidia/current_vgpu_type"), "0\n");
    let text = attr(&host, vf0, "nvidia/creatable_vgpu_types");
    assert!(text.starts_with("ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1146  : NVIDIA L40S-2B\n"));
    assert!(text.ends_with("1166  : NVIDIA L40S-48A\n2164  : NVIDIA L40S-3B\n"));
    assert_eq!(creatable(&host, vf0).len(), 23);
    assert_eq!(
        set_type(&host, vf0, "0"),
        e(Errno::EPERM),
        "nothing to release"
    );
    assert_eq!(set_type(&host, vf0, "4Q"), e(Errno::EINVAL));
    assert_eq!(set_type(&host, vf0, "0x47e"), e(Errno::EINVAL));
    assert_eq!(set_type(&host, vf0, "558"), e(Errno::EIO), "an A40 type");
    set_type(&host, vf0, "1150\n").expect("L40S-4Q");
    assert_eq!(attr(&host, vf0, "nvidia/current_vgpu_type"), "1150\n");
    assert_eq!(
        set_type(&host, vf0, "1150"),
        e(Errno::EPERM),
        "one at a time"
    );
    assert_eq!(set_type(&host, vf0, "1147"), e(Errno::EPERM));
    // The VF lists only the header; its siblings only the 4 GiB types.
    assert!(creatable(&host, vf0).is_empty());
    assert_eq!(creatable(&host, vf1), vec![1150, 1160]);
    assert_eq!(
        set_type(&host, vf1, "1147"),
        e(Errno::EIO),
        "1Q: another size"
    );
    // The other GPU is independent.
    assert_eq!(attr(&host, L40S1, "sriov_numvfs"), "0\n");
    write(
        &host,
        &format!("bus/pci/devices/{vf0}/nvidia/vgpu_params"),
        "frame_rate_limiter=0",
    )
    .expect("params");
    set_type(&host, vf0, "0").expect("release");
    assert_eq!(attr(&host, vf0, "nvidia/vgpu_params"), "");
    assert_eq!(creatable(&host, vf1).len(), 23);
    assert_same(&snapshot(dir.path()), &enabled, "after release");
}

#[test]
fn test_options_make_the_driver_refuse_or_delay_type_and_params_writes() {
    let (_dir, host) = host("nvidia-l40s");
    assert_eq!(sriov_manage(&host, &["-e", L40S0]).status, 0);
    let vfs = vfs_of("41");
    let vf0 = vfs[0].as_str();
    let state = host.root().join(journal::STATE_DIR);
    let option = |name: &str, value: &str| fs::write(state.join(name), value).expect("option");
    let params = format!("bus/pci/devices/{vf0}/nvidia/vgpu_params");
    // Every type write fails with the errno named, until the file goes.
    option(kernel::FAIL_VF_TYPE_FILE, "EINVAL\n");
    for _ in 0..2 {
        assert_eq!(set_type(&host, vf0, "1150"), e(Errno::EINVAL));
    }
    assert_eq!(attr(&host, vf0, "nvidia/current_vgpu_type"), "0\n");
    // `once`: the next one only.
    option(kernel::FAIL_VF_TYPE_FILE, "EPERM once");
    assert_eq!(set_type(&host, vf0, "1150"), e(Errno::EPERM));
    assert!(!state.join(kernel::FAIL_VF_TYPE_FILE).exists());
    set_type(&host, vf0, "1150").expect("4Q");
    // A release is never refused by it; nor is a name it does not know a refusal.
    option(kernel::FAIL_VF_TYPE_FILE, "EIO");
    option(kernel::FAIL_VGPU_PARAMS_FILE, "EIO once");
    assert_eq!(write(&host, &params, "frame_rate_limiter=0"), e(Errno::EIO));
    assert_eq!(attr(&host, vf0, "nvidia/vgpu_params"), "");
    write(&host, &params, "frame_rate_limiter=0").expect("params");
    set_type(&host, vf0, "0").expect("release");
    option(kernel::FAIL_VF_TYPE_FILE, "ENOSUCH");
    set_type(&host, vf0, "1150").expect("4Q again");
    // A release refused: EBUSY changes nothing; EPERM comes after a release got there first.
    option(kernel::FAIL_VF_RELEASE_FILE, "EBUSY once");
    assert_eq!(set_type(&host, vf0, "0"), e(Errno::EBUSY));
    assert_eq!(attr(&host, vf0, "nvidia/current_vgpu_type"), "1150\n");
    option(kernel::FAIL_VF_RELEASE_FILE, "EPERM once");
    assert_eq!(set_type(&host, vf0, "0"), e(Errno::EPERM));
    assert_eq!(attr(&host, vf0, "nvidia/current_vgpu_type"), "0\n");
    assert!(!state.join(kernel::FAIL_VF_RELEASE_FILE).exists());
    set_type(&host, vf0, "1150").expect("4Q once more");
    // A slow driver: type writes take their time, releases do not wait. The delay is long
    // (2 s) so that a release slowed by a busy machine (one took over 300 ms in a CI run) is
    // not taken for one that waited.
    let delay = std::time::Duration::from_millis(2000);
    option(kernel::VF_TYPE_DELAY_FILE, &delay.as_millis().to_string());
    let start = std::time::Instant::now();
    set_type(&host, vf0, "0").expect("release");
    let release = start.elapsed();
    assert!(release < delay, "the release waited {release:?}");
    let start = std::time::Instant::now();
    set_type(&host, vf0, "1150").expect("4Q, slowly");
    assert!(
        start.elapsed() >= delay,
        "the type write took {:?}",
        start.elapsed()
    );
}

fn nvidia_smi(host: &SimHost, args: &[&str]) -> ToolOutput {
    host.run_tool(&host.root().join("usr/bin/nvidia-smi"), args)
        .expect("run")
}

#[test]
fn heterogeneous_mode_places_mixed_sizes_without_overlap() {
    let (_dir, host) = host("nvidia-l40s");
    let shm = |on: &str| nvidia_smi(&host, &["vgpu", "-i", "00000000:41:00.0", "-shm", on]);
    assert_eq!(shm("1").status, 3, "no VFs yet: not supported");
    assert_eq!(sriov_manage(&host, &["-e", L40S0]).status, 0);
    let out = shm("1");
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "Enabled vGPU heterogeneous mode for GPU 00000000:41:00.0\n"
    );
    let vfs = vfs_of("41");
    let placement = |vf: &str| attr(&host, vf, "nvidia/placement_id");
    // 8Q: placement size 12 of 48; 4Q: 6; 1Q: 3.
    set_type(&host, &vfs[0], "1152").expect("8Q");
    assert_eq!(placement(&vfs[0]), "0\n");
    assert!(creatable(&host, &vfs[1]).contains(&1150), "4Q next to 8Q");
    assert!(creatable(&host, &vfs[1]).contains(&1147), "1Q next to 8Q");
    set_type(&host, &vfs[1], "1150").expect("4Q");
    assert_eq!(
        placement(&vfs[1]),
        "12\n",
        "the lowest free 6 GiB placement"
    );
    write(
        &host,
        &format!("bus/pci/devices/{}/nvidia/vgpu_params", vfs[2]),
        "vgpu-placement-id=13",
    )
    .expect("params");
    assert_eq!(
        set_type(&host, &vfs[2], "1150"),
        e(Errno::EIO),
        "not aligned"
    );
    write(
        &host,
        &format!("bus/pci/devices/{}/nvidia/vgpu_params", vfs[2]),
        "vgpu-placement-id=30",
    )
    .expect("params");
    set_type(&host, &vfs[2], "1150").expect("4Q at 30");
    assert_eq!(placement(&vfs[2]), "30\n");
    assert!(
        !creatable(&host, &vfs[3]).contains(&1156),
        "48Q needs the whole GPU"
    );
    assert_eq!(shm("0").status, 3, "vGPUs are active");
    // Releasing frees the placement.
    set_type(&host, &vfs[0], "0").expect("release 8Q");
    assert!(!dev(&host, &vfs[0]).join("nvidia/placement_id").exists());
    set_type(&host, &vfs[3], "1152").expect("8Q again");
    assert_eq!(placement(&vfs[3]), "0\n");
    for vf in [&vfs[1], &vfs[2], &vfs[3]] {
        set_type(&host, vf, "0").expect("release");
    }
    // sriov-manage starts the driver afresh: back to equal-size mode.
    assert_eq!(sriov_manage(&host, &["-d", L40S0]).status, 0);
    assert_eq!(sriov_manage(&host, &["-e", L40S0]).status, 0);
    set_type(&host, &vfs[0], "1152").expect("8Q");
    assert_eq!(
        creatable(&host, &vfs[1]),
        vec![1152, 1162],
        "equal size again"
    );
}

#[test]
fn a_full_gpu_lists_only_the_header() {
    let (_dir, host) = host("nvidia-l40s");
    assert_eq!(sriov_manage(&host, &["-e", L40S0]).status, 0);
    let vfs = vfs_of("41");
    // 12 × 4Q fill the 48 GB.
    for (i, vf) in vfs.iter().enumerate().take(12) {
        assert!(creatable(&host, vf).contains(&1150), "{i}");
        set_type(&host, vf, "1150").expect("4Q");
    }
    for vf in &vfs {
        assert!(creatable(&host, vf).is_empty(), "{vf}");
    }
    assert_eq!(set_type(&host, &vfs[12], "1150"), e(Errno::EIO));
    set_type(&host, &vfs[3], "0").expect("release one");
    assert_eq!(creatable(&host, &vfs[12]), vec![1150, 1160]);
    assert!(creatable(&host, &vfs[3]).contains(&1150));
    // 48Q is one per GPU.
    for vf in vfs.iter().take(12) {
        let _ = set_type(&host, vf, "0");
    }
    assert_eq!(creatable(&host, &vfs[0]).len(), 23);
    set_type(&host, &vfs[5], "1156").expect("48Q");
    assert!(vfs.iter().all(|vf| creatable(&host, vf).is_empty()));
    // Unbinding the VF from nvidia takes its vGPU: the others grow back.
    unbind(&host, "nvidia", &vfs[5]).expect("unbind");
    assert!(!dev(&host, &vfs[5]).join("nvidia").exists());
    assert!(!dev(&host, &vfs[5]).join("vfio-dev").exists());
    assert_eq!(creatable(&host, &vfs[6]).len(), 23);
    bind(&host, "nvidia", &vfs[5]).expect("bind");
    assert_eq!(attr(&host, &vfs[5], "nvidia/current_vgpu_type"), "0\n");
    assert_eq!(creatable(&host, &vfs[5]).len(), 23);
}

// ---- A40: mdev on VFs ---------------------------------------------------------------------

fn vf_avail(host: &SimHost, vf: &str, type_id: &str) -> u32 {
    let parent = host.resolve(&dev(host, vf)).expect("vf");
    avail(host, &format!("{}", parent.display()), type_id)
}

fn vf_create(host: &SimHost, vf: &str, type_id: &str, uuid: &str) -> Result<(), Option<i32>> {
    let parent = host.resolve(&dev(host, vf)).expect("vf");
    create(host, &format!("{}", parent.display()), type_id, uuid)
}

#[test]
fn a40_vfs_share_the_gpu_budget() {
    let (_dir, host) = host("nvidia-a40");
    assert!(!dev(&host, A40).join("mdev_supported_types").exists());
    assert_eq!(sriov_manage(&host, &["-e", A40]).status, 0);
    let vfs = vfs_of("e8");
    let parents = host.list_dir(&host.sys("class/mdev_bus")).expect("list");
    assert_eq!(parents, vfs, "each VF is an mdev parent, the PF is not");
    let types = host
        .list_dir(&dev(&host, &vfs[0]).join("mdev_supported_types"))
        .expect("types");
    assert_eq!(types.len(), 29);
    assert_eq!(
        fs::read_to_string(dev(&host, &vfs[0]).join("mdev_supported_types/nvidia-558/name"))
            .expect("name"),
        "NVIDIA A40-2Q\n"
    );
    assert_eq!(vf_avail(&host, &vfs[0], "nvidia-558"), 1);
    // One 24Q (max 2 per GPU) on VF 0: VF 0 is full, the others offer only 24Q types.
    vf_create(&host, &vfs[0], "nvidia-565", U1).expect("24Q");
    assert_eq!(vf_avail(&host, &vfs[0], "nvidia-565"), 0);
    assert_eq!(vf_avail(&host, &vfs[1], "nvidia-565"), 1);
    assert_eq!(
        vf_avail(&host, &vfs[1], "nvidia-575"),
        1,
        "24A, the same size"
    );
    assert_eq!(
        vf_avail(&host, &vfs[1], "nvidia-558"),
        0,
        "2Q: another size"
    );
    assert_eq!(
        vf_create(&host, &vfs[1], "nvidia-558", U2),
        e(Errno::ENOSPC)
    );
    vf_create(&host, &vfs[1], "nvidia-565", U2).expect("second 24Q");
    // max_instance 2 reached over the GPU: no VF offers anything.
    for vf in &vfs {
        for t in ["nvidia-565", "nvidia-575", "nvidia-557"] {
            assert_eq!(vf_avail(&host, vf, t), 0, "{vf} {t}");
        }
    }
    remove(&host, U1).expect("remove");
    assert_eq!(vf_avail(&host, &vfs[0], "nvidia-565"), 1);
    assert_eq!(vf_avail(&host, &vfs[0], "nvidia-557"), 0);
    remove(&host, U2).expect("remove");
    assert_eq!(vf_avail(&host, &vfs[7], "nvidia-557"), 1);
    // Unbinding a VF with an mdev removes the mdev and the parent; binding brings it back.
    vf_create(&host, &vfs[2], "nvidia-558", U1).expect("2Q");
    unbind(&host, "nvidia", &vfs[2]).expect("unbind");
    assert!(!host.sys(&format!("bus/mdev/devices/{U1}")).exists());
    assert!(!host.sys(&format!("class/mdev_bus/{}", vfs[2])).exists());
    assert_eq!(vf_avail(&host, &vfs[3], "nvidia-557"), 1);
    bind(&host, "nvidia", &vfs[2]).expect("bind");
    assert_eq!(vf_avail(&host, &vfs[2], "nvidia-557"), 1);
    // Disabling takes the parents away.
    assert_eq!(sriov_manage(&host, &["-d", A40]).status, 0);
    assert!(host
        .list_dir(&host.sys("class/mdev_bus"))
        .expect("list")
        .is_empty());
}

// ---- profiles -----------------------------------------------------------------------------

#[test]
fn the_passthrough_profile_has_its_three_cases() {
    let (_dir, host) = host("passthrough");
    for (bdf, boot, group) in [
        (CLEAN, "0\n", "77"),
        (CONSOLE, "1\n", "79"),
        (SHARED, "0\n", "81"),
    ] {
        assert_eq!(attr(&host, bdf, "boot_vga"), boot);
        assert_eq!(attr(&host, bdf, "device"), "0x24b0\n");
        assert_eq!(attr(&host, bdf, "class"), "0x030000\n");
        assert_eq!(attr(&host, bdf, "driver_override"), "(null)\n");
        assert_eq!(driver(&host, bdf).as_deref(), Some("nvidia"));
        assert_eq!(
            host.link_name(&dev(&host, bdf).join("iommu_group"))
                .expect("g")
                .as_deref(),
            Some(group)
        );
    }
    let members = |g: &str| {
        host.list_dir(&host.sys(&format!("kernel/iommu_groups/{g}/devices")))
            .expect("members")
    };
    assert_eq!(members("77"), vec!["0000:21:00.0", "0000:21:00.1"]);
    assert_eq!(
        members("81"),
        vec![
            "0000:31:00.0",
            "0000:32:01.0",
            "0000:32:03.0",
            "0000:33:00.0",
            "0000:33:00.1",
            "0000:34:00.0"
        ]
    );
    assert_eq!(driver(&host, "0000:34:00.0").as_deref(), Some("e1000e"));
    // nvidia-drm's framebuffers on every GPU, in bus order; fbcon is bound.
    for (fb, bdf) in [("fb0", CLEAN), ("fb1", CONSOLE), ("fb2", SHARED)] {
        let on = host
            .resolve(&host.sys(&format!("class/graphics/{fb}/device")))
            .expect(fb);
        assert_eq!(on, host.resolve(&dev(&host, bdf)).expect("gpu"), "{fb}");
        assert_eq!(
            attr(&host, bdf, &format!("graphics/{fb}/name")),
            "nvidia-drmdrmfb\n"
        );
    }
    assert_eq!(
        fs::read_to_string(host.sys("class/vtconsole/vtcon1/name")).expect("fbcon"),
        "(M) frame buffer device\n"
    );
    assert_eq!(
        fs::read_to_string(host.sys("class/vtconsole/vtcon1/bind")).expect("bind"),
        "1\n"
    );
    assert_eq!(
        fs::read_to_string(host.sys("class/tty/tty0/active")).expect("tty0"),
        "tty1\n"
    );
    assert_eq!(
        driver(&host, "0000:21:00.1").as_deref(),
        Some("snd_hda_intel")
    );
}

#[test]
fn sr_iov_profiles_start_with_their_vfs_off() {
    for (profile, pfs) in [
        ("nvidia-l40s", vec![L40S0, L40S1]),
        ("nvidia-a40", vec![A40]),
    ] {
        let (_dir, host) = host(profile);
        for pf in pfs {
            for (name, value) in [
                ("sriov_totalvfs", "32\n"),
                ("sriov_numvfs", "0\n"),
                ("sriov_offset", "4\n"),
                ("sriov_stride", "1\n"),
                ("sriov_drivers_autoprobe", "1\n"),
                ("class", "0x030200\n"),
            ] {
                assert_eq!(attr(&host, pf, name), value, "{profile} {pf} {name}");
            }
            assert_eq!(driver(&host, pf).as_deref(), Some("nvidia"));
            assert!(!dev(&host, pf).join("nvidia").exists());
            assert!(
                !dev(&host, pf).join("boot_vga").exists(),
                "3D controllers have none"
            );
        }
        let tool = host.root().join("usr/lib/nvidia/sriov-manage");
        let text = fs::read_to_string(&tool).expect("stand-in");
        assert!(text.starts_with("#!/bin/sh\n"));
        let mode = fs::metadata(&tool).expect("meta");
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o755
        );
        assert!(host.sys("bus/pci/drivers/pci-pf-stub/new_id").is_file());
        assert!(host.sys("bus/pci/drivers_probe").is_file());
        assert_eq!(
            fs::read_to_string(host.sys("bus/pci/drivers_autoprobe")).expect("autoprobe"),
            "1\n"
        );
    }
    let (_dir, host) = host("nvidia-l40s");
    assert_eq!(attr(&host, L40S0, "sriov_vf_device"), "26b9\n");
    assert_eq!(attr(&host, L40S1, "numa_node"), "1\n");
}

#[test]
fn all_profiles_combine_in_one_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    // qemu-vm is a whole host of its own (the real-kernel suite's VM): it shares addresses and
    // group numbers with the platform, and is not meant to combine; intel-sriov's iGPU takes
    // intel-gvtg's address.
    for name in profile_names()
        .iter()
        .filter(|n| **n != "qemu-vm" && **n != "intel-sriov")
    {
        write_profile(name, dir.path()).expect(name);
    }
    let host = SimHost::new(dir.path());
    // Group numbers and addresses are disjoint: every group's members are the profile's.
    assert_eq!(
        host.list_dir(&host.sys("kernel/iommu_groups/61/devices"))
            .expect("61"),
        vec![L40S0]
    );
    assert_eq!(sriov_manage(&host, &["-e", "ALL"]).status, 0);
    assert_eq!(attr(&host, A40, "sriov_numvfs"), "32\n");
    assert_eq!(attr(&host, L40S1, "sriov_numvfs"), "32\n");
    create(&host, GPU0, "nvidia-259", U1).expect("turing still works");
    let again = snapshot(dir.path());
    for name in ["nvidia-l40s", "amd-mxgpu", "passthrough"] {
        write_profile(name, dir.path()).expect(name);
    }
    let mut after = snapshot(dir.path());
    let mut before = again;
    // Rewriting resets nothing a profile does not own (VFs and bindings stay).
    after.retain(|p, _| !p.starts_with("run"));
    before.retain(|p, _| !p.starts_with("run"));
    assert_same(&after, &before, "after rewriting");
}

#[test]
fn qemu_vm_is_the_real_kernel_suites_vm() {
    let (dir, host) = host("qemu-vm");
    // Only the VM's functions, in the VM's groups (as its kernel showed them).
    let groups: Vec<(String, Option<String>, Option<String>)> = host
        .list_dir(&host.sys("bus/pci/devices"))
        .expect("list")
        .into_iter()
        .map(|b| {
            let g = host
                .link_name(&dev(&host, &b).join("iommu_group"))
                .expect("group");
            let d = driver(&host, &b);
            (b, g, d)
        })
        .collect();
    let want = [
        ("0000:00:00.0", "0", None),
        ("0000:00:01.0", "1", Some("pcieport")),
        ("0000:00:02.0", "2", Some("pcieport")),
        ("0000:00:03.0", "3", Some("bochs-drm")),
        ("0000:00:1f.0", "4", None),
        ("0000:00:1f.2", "4", None),
        ("0000:00:1f.3", "4", None),
        ("0000:01:00.0", "5", Some("bochs-drm")),
        ("0000:01:00.1", "5", Some("e1000e")),
        ("0000:02:00.0", "6", None),
        ("0000:03:01.0", "6", None),
        ("0000:03:02.0", "6", None),
    ]
    .map(|(b, g, d)| (b.to_string(), Some(g.to_string()), d.map(str::to_string)));
    assert_eq!(groups, want);
    assert!(!host.sys("bus/pci/drivers/pci-pf-stub").exists());
    let mtty = host.sys("devices/virtual/mtty/mtty");
    assert!(!mtty.join("dev").exists());
    assert_eq!(fs::read_to_string(mtty.join("uevent")).expect("uevent"), "");

    // bochs-drm's framebuffers, fbcon on the boot VGA device's fb0, as the VM showed them.
    let fbs: Vec<(String, String)> = host
        .list_dir(&host.sys("class/graphics"))
        .expect("graphics")
        .into_iter()
        .filter(|f| f.starts_with("fb") && f != "fbcon")
        .map(|f| {
            let d = host
                .resolve(&host.sys(&format!("class/graphics/{f}/device")))
                .expect("device");
            (
                f,
                d.file_name().expect("name").to_string_lossy().into_owned(),
            )
        })
        .collect();
    assert_eq!(
        fbs,
        [("fb0", "0000:00:03.0"), ("fb1", "0000:01:00.0")].map(|(f, d)| (f.into(), d.into()))
    );

    // An mdev takes the lowest free group (7) and is registered with vfio.
    create(&host, "sys/class/mdev_bus/mtty", "mtty-2", U1).expect("create");
    let m = host.sys(&format!("bus/mdev/devices/{U1}"));
    assert_eq!(
        host.link_name(&m.join("iommu_group")).expect("g"),
        Some("7".into())
    );
    assert!(m.join("power").is_dir());
    assert!(m.join("vfio-dev/vfio0").is_dir());
    remove(&host, U1).expect("remove");
    assert!(!host.sys("class/vfio-dev/vfio0").exists());

    // The e1000e's interface goes with its driver and comes back with it.
    let nic = "0000:01:00.1";
    assert!(host.sys("class/net/eth0").exists());
    let before = snapshot(dir.path());
    unbind(&host, "e1000e", nic).expect("unbind");
    assert!(!dev(&host, nic).join("net").exists());
    assert!(!host.sys("class/net/eth0").exists());
    bind(&host, "e1000e", nic).expect("bind");
    assert_eq!(
        host.list_dir(&dev(&host, nic).join("net")).expect("net"),
        vec!["eth0"]
    );
    let mut after = snapshot(dir.path());
    // The simulator keeps no state: the index is one above the highest in use (the kernel's
    // per-namespace counter would give 3), so the tree is as it was.
    let ifindex = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.1/net/eth0/ifindex";
    assert_eq!(
        fs::read_to_string(dir.path().join(ifindex)).expect("ifindex"),
        "2\n"
    );
    after.retain(|p, _| !p.starts_with("run"));
    let mut before = before;
    before.retain(|p, _| !p.starts_with("run"));
    assert_same(&after, &before, "after rebinding the NIC");
}
