//! Tests of the simulated kernel and the profiles, on temporary trees.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;

use super::*;

pub(super) const GPU0: &str = "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0";
pub(super) const GPU1: &str = "sys/devices/pci0000:d7/0000:d7:00.0/0000:d8:00.0";
pub(super) const IGPU: &str = "sys/devices/pci0000:00/0000:00:02.0";
pub(super) const MTTY: &str = "sys/devices/virtual/mtty/mtty";

pub(super) const U1: &str = "11111111-2222-4333-8444-555555555555";
pub(super) const U2: &str = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee";

pub(super) fn host(profile: &str) -> (tempfile::TempDir, SimHost) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_profile(profile, dir.path()).expect("profile");
    let host = SimHost::new(dir.path());
    (dir, host)
}

/// Every path below the root with what it is: a directory, a link and its target, or a file
/// with its mode and content.
pub(super) fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let rel = p.strip_prefix(root).expect("below root").to_path_buf();
            let meta = fs::symlink_metadata(&p).expect("meta");
            let what = if meta.file_type().is_symlink() {
                format!("-> {}", fs::read_link(&p).expect("link").display())
            } else if meta.is_dir() {
                walk(root, &p, out);
                "dir".to_string()
            } else {
                format!(
                    "{:o} {:?}",
                    meta.permissions().mode() & 0o777,
                    fs::read_to_string(&p).expect("read")
                )
            };
            out.insert(rel, what);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

pub(super) fn type_path(host: &SimHost, parent: &str, type_id: &str, file: &str) -> PathBuf {
    host.root()
        .join(parent)
        .join("mdev_supported_types")
        .join(type_id)
        .join(file)
}

pub(super) fn create(
    host: &SimHost,
    parent: &str,
    type_id: &str,
    uuid: &str,
) -> Result<(), Option<i32>> {
    host.write_attr(&type_path(host, parent, type_id, "create"), uuid)
        .map_err(|e| e.raw_os_error())
}

pub(super) fn remove(host: &SimHost, uuid: &str) -> Result<(), Option<i32>> {
    host.write_attr(&host.sys(&format!("bus/mdev/devices/{uuid}/remove")), "1\n")
        .map_err(|e| e.raw_os_error())
}

pub(super) fn avail(host: &SimHost, parent: &str, type_id: &str) -> u32 {
    let s = fs::read_to_string(type_path(host, parent, type_id, "available_instances"))
        .expect("available_instances");
    assert!(s.ends_with('\n'), "{s:?} has no newline");
    s.trim().parse().expect("number")
}

pub(super) fn e(errno: Errno) -> Result<(), Option<i32>> {
    Err(Some(errno as i32))
}

#[test]
fn create_and_remove_leave_the_tree_as_it_was() {
    let (dir, host) = host("mixed");
    let before = snapshot(dir.path());
    create(&host, GPU0, "nvidia-259", U1).expect("nvidia create");
    create(&host, IGPU, "i915-GVTg_V5_8", U2).expect("gvt create");
    let u3 = "33333333-3333-4333-8333-333333333333";
    create(&host, MTTY, "mtty-2", &format!("{u3}\n")).expect("mtty create");
    assert_ne!(snapshot(dir.path()), before);
    for u in [U1, U2, u3] {
        remove(&host, u).expect("remove");
    }
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_created_device_is_laid_out_like_the_kernel_does() {
    let (dir, host) = host("nvidia-turing");
    create(&host, GPU1, "nvidia-259", &U1.to_uppercase()).expect("create");
    let root = fs::canonicalize(dir.path()).expect("root");
    let dev = root.join(GPU1).join(U1);
    // The bus link resolves to the device, and every link is relative.
    let bus = host.sys(&format!("bus/mdev/devices/{U1}"));
    assert_eq!(fs::canonicalize(&bus).expect("bus link"), dev);
    assert!(fs::read_link(&bus).expect("link").is_relative());
    assert_eq!(
        fs::read_link(dev.join("mdev_type")).expect("mdev_type"),
        PathBuf::from("../mdev_supported_types/nvidia-259")
    );
    let group = fs::read_link(dev.join("iommu_group")).expect("group");
    assert!(group.is_relative());
    // Groups 0, 2, 3 and 10..=13 exist: the kernel's IDA hands out the lowest free number.
    assert_eq!(group.file_name().and_then(|n| n.to_str()), Some("1"));
    assert_eq!(
        fs::canonicalize(root.join("sys/kernel/iommu_groups/1/devices").join(U1)).expect("g"),
        dev
    );
    assert!(root.join("dev/vfio/1").is_file());
    assert_eq!(
        fs::canonicalize(dev.join("driver")).expect("driver"),
        root.join("sys/bus/mdev/drivers/nvidia-vgpu-vfio")
    );
    assert_eq!(
        fs::canonicalize(dev.join("subsystem")).expect("subsystem"),
        root.join("sys/bus/mdev")
    );
    assert_eq!(
        fs::canonicalize(
            root.join(GPU1)
                .join("mdev_supported_types/nvidia-259/devices")
                .join(U1)
        )
        .expect("type link"),
        dev
    );
    assert_eq!(
        fs::read_to_string(dev.join("nvidia/vgpu_params")).expect("params"),
        ""
    );
    assert!(dev.join("remove").is_file());
    // A second device gets the next group.
    create(&host, GPU1, "nvidia-259", U2).expect("create");
    assert_eq!(
        host.link_name(&root.join(GPU1).join(U2).join("iommu_group"))
            .expect("link"),
        Some("4".to_string())
    );
    // The tree stays valid when moved: links are relative.
    let moved = tempfile::tempdir().expect("tempdir");
    let new_root = moved.path().join("moved");
    fs::rename(dir.path(), &new_root).expect("rename");
    let host = SimHost::new(&new_root);
    remove(&host, U1).expect("remove after move");
    assert!(!new_root.join(GPU1).join(U1).exists());
    fs::rename(&new_root, dir.path()).expect("rename back");
}

#[test]
fn create_checks_the_buffer_like_create_store() {
    let (_dir, host) = host("nvidia-turing");
    let t = "nvidia-256";
    assert_eq!(create(&host, GPU0, t, &U1[..35]), e(Errno::EINVAL));
    assert_eq!(
        create(&host, GPU0, t, &format!("{U1}\n\n")),
        e(Errno::EINVAL)
    );
    assert_eq!(create(&host, GPU0, t, &format!("{U1}xy")), e(Errno::EINVAL));
    assert_eq!(
        create(&host, GPU0, t, "1111111x-2222-4333-8444-555555555555"),
        e(Errno::EINVAL)
    );
    assert_eq!(
        create(&host, GPU0, t, "11111111_2222-4333-8444-555555555555"),
        e(Errno::EINVAL)
    );
    // A multi-byte character across the 36th byte is no UUID, and no panic.
    assert_eq!(
        create(&host, GPU0, t, "11111111-2222-4333-8444-55555555555é"),
        e(Errno::EINVAL)
    );
    assert_eq!(avail(&host, GPU0, t), 24);
    assert!(host
        .list_dir(&host.sys("bus/mdev/devices"))
        .expect("list")
        .is_empty());
    create(&host, GPU0, t, &format!("{U1}\n")).expect("37 bytes");
    assert_eq!(avail(&host, GPU0, t), 23);
}

#[test]
fn a_uuid_exists_once_on_the_system() {
    let (_dir, host) = host("mixed");
    create(&host, GPU0, "nvidia-256", U1).expect("create");
    assert_eq!(create(&host, GPU0, "nvidia-256", U1), e(Errno::EEXIST));
    assert_eq!(
        create(&host, GPU0, "nvidia-256", &U1.to_uppercase()),
        e(Errno::EEXIST)
    );
    assert_eq!(create(&host, GPU1, "nvidia-256", U1), e(Errno::EEXIST));
    assert_eq!(create(&host, MTTY, "mtty-1", U1), e(Errno::EEXIST));
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 23);
    assert_eq!(avail(&host, MTTY, "mtty-1"), 24);
}

#[test]
fn a_full_type_refuses_with_enospc() {
    let (_dir, host) = host("nvidia-turing");
    create(&host, GPU0, "nvidia-263", U1).expect("24Q");
    assert_eq!(avail(&host, GPU0, "nvidia-263"), 0);
    assert_eq!(create(&host, GPU0, "nvidia-263", U2), e(Errno::ENOSPC));
    assert_eq!(create(&host, GPU0, "nvidia-256", U2), e(Errno::ENOSPC));
    // The other GPU is independent.
    create(&host, GPU1, "nvidia-256", U2).expect("other GPU");
}

#[test]
fn nvidia_keeps_one_framebuffer_size_per_gpu() {
    let (dir, host) = host("nvidia-turing");
    let before = snapshot(dir.path());
    create(&host, GPU0, "nvidia-259", U1).expect("4Q");
    assert_eq!(avail(&host, GPU0, "nvidia-259"), 5); // 4Q
    assert_eq!(avail(&host, GPU0, "nvidia-343"), 5); // 4C
    assert_eq!(avail(&host, GPU0, "nvidia-440"), 5); // 4A
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 0); // 1Q
    assert_eq!(avail(&host, GPU0, "nvidia-263"), 0); // 24Q
    assert_eq!(avail(&host, GPU1, "nvidia-256"), 24);
    assert_eq!(create(&host, GPU0, "nvidia-256", U2), e(Errno::ENOSPC));
    create(&host, GPU0, "nvidia-343", U2).expect("4C next to 4Q");
    assert_eq!(avail(&host, GPU0, "nvidia-259"), 4);
    remove(&host, U1).expect("remove");
    remove(&host, U2).expect("remove");
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 24);
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn nvidia_figures_fall_back_to_the_catalog() {
    let (dir, host) = host("nvidia-turing");
    let desc = dir
        .path()
        .join(GPU0)
        .join("mdev_supported_types/nvidia-260/description");
    fs::remove_file(desc).expect("rm description");
    refresh_available(&dir.path().join(GPU0)).expect("refresh");
    assert_eq!(avail(&host, GPU0, "nvidia-260"), 4); // 6Q from the catalog
    create(&host, GPU0, "nvidia-260", U1).expect("6Q");
    assert_eq!(avail(&host, GPU0, "nvidia-260"), 3);
    assert_eq!(avail(&host, GPU0, "nvidia-344"), 3); // 6C
    assert_eq!(avail(&host, GPU0, "nvidia-259"), 0);
}

#[test]
fn gvtg_follows_the_resource_formula() {
    let (dir, host) = host("intel-gvtg");
    let types = host
        .list_dir(&dir.path().join(IGPU).join("mdev_supported_types"))
        .expect("types");
    assert_eq!(types, vec!["i915-GVTg_V5_4", "i915-GVTg_V5_8"]);
    assert_eq!(avail(&host, IGPU, "i915-GVTg_V5_8"), 2);
    assert_eq!(avail(&host, IGPU, "i915-GVTg_V5_4"), 1);
    // One V5_4 takes all 128 MiB of aperture left to guests.
    create(&host, IGPU, "i915-GVTg_V5_4", U1).expect("V5_4");
    assert_eq!(avail(&host, IGPU, "i915-GVTg_V5_8"), 0);
    assert_eq!(avail(&host, IGPU, "i915-GVTg_V5_4"), 0);
    assert_eq!(create(&host, IGPU, "i915-GVTg_V5_8", U2), e(Errno::ENOSPC));
    let id = dir.path().join(IGPU).join(U1).join("intel_vgpu/vgpu_id");
    assert_eq!(fs::read_to_string(id).expect("vgpu_id"), "1\n");
    remove(&host, U1).expect("remove");
    // One V5_8: 64 MiB of aperture left → one more V5_8, no V5_4.
    create(&host, IGPU, "i915-GVTg_V5_8", U1).expect("V5_8");
    assert_eq!(avail(&host, IGPU, "i915-GVTg_V5_8"), 1);
    assert_eq!(avail(&host, IGPU, "i915-GVTg_V5_4"), 0);
    create(&host, IGPU, "i915-GVTg_V5_8", U2).expect("second V5_8");
    assert_eq!(avail(&host, IGPU, "i915-GVTg_V5_8"), 0);
    let id = dir.path().join(IGPU).join(U2).join("intel_vgpu/vgpu_id");
    assert_eq!(fs::read_to_string(id).expect("vgpu_id"), "2\n");
}

#[test]
fn mtty_shares_24_ports() {
    let (_dir, host) = host("mtty");
    assert_eq!(avail(&host, MTTY, "mtty-1"), 24);
    assert_eq!(avail(&host, MTTY, "mtty-2"), 12);
    create(&host, MTTY, "mtty-2", U1).expect("dual");
    assert_eq!(
        (avail(&host, MTTY, "mtty-1"), avail(&host, MTTY, "mtty-2")),
        (22, 11)
    );
    create(&host, MTTY, "mtty-1", U2).expect("single");
    assert_eq!(
        (avail(&host, MTTY, "mtty-1"), avail(&host, MTTY, "mtty-2")),
        (21, 10)
    );
    let dev = host.sys(&format!("bus/mdev/devices/{U1}/vendor/sample_mdev_dev"));
    assert_eq!(
        fs::read_to_string(dev).expect("attr"),
        format!("This is MDEV {U1}\n")
    );
    for i in 0..10 {
        create(
            &host,
            MTTY,
            "mtty-2",
            &format!("00000000-0000-4000-8000-0000000000{i:02}"),
        )
        .expect("fill");
    }
    assert_eq!(
        (avail(&host, MTTY, "mtty-1"), avail(&host, MTTY, "mtty-2")),
        (1, 0)
    );
    assert_eq!(
        create(
            &host,
            MTTY,
            "mtty-2",
            "00000000-0000-4000-8000-000000000099"
        ),
        e(Errno::ENOSPC)
    );
    remove(&host, U1).expect("remove");
    assert_eq!(
        (avail(&host, MTTY, "mtty-1"), avail(&host, MTTY, "mtty-2")),
        (3, 1)
    );
}

#[test]
fn remove_parses_like_kstrtoul() {
    let (_dir, host) = host("nvidia-turing");
    create(&host, GPU0, "nvidia-256", U1).expect("create");
    let remove_file = host.sys(&format!("bus/mdev/devices/{U1}/remove"));
    host.write_attr(&remove_file, "0").expect("0 is a no-op");
    host.write_attr(&remove_file, "0\n").expect("0 is a no-op");
    assert!(remove_file.exists());
    let err = host
        .write_attr(&remove_file, "yes")
        .expect_err("not a number");
    assert_eq!(err.raw_os_error(), Some(Errno::EINVAL as i32));
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 23);
    host.write_attr(&remove_file, "1\n").expect("remove");
    assert!(!host.sys(&format!("bus/mdev/devices/{U1}")).exists());
    let err = host.write_attr(&remove_file, "1").expect_err("gone");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 24);
}

#[test]
fn plain_attributes_are_stored_and_never_created() {
    let (dir, host) = host("nvidia-turing");
    create(&host, GPU0, "nvidia-256", U1).expect("create");
    let params = host.sys(&format!("bus/mdev/devices/{U1}/nvidia/vgpu_params"));
    host.write_attr(&params, "frame_rate_limiter=0, disable_vnc=1\n")
        .expect("params");
    assert_eq!(
        fs::read_to_string(&params).expect("read"),
        "frame_rate_limiter=0, disable_vnc=1\n"
    );
    host.write_attr(&params, " ").expect("clear");
    assert_eq!(fs::read_to_string(&params).expect("read"), " ");

    let missing = host.sys("bus/mdev/devices/nope");
    let err = host.write_attr(&missing, "1").expect_err("missing");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(!missing.exists());
    let err = host
        .write_attr(&dir.path().join(GPU0).join("nvidia/vgpu_params"), "x")
        .expect_err("missing dir");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);

    let ro = type_path(&host, GPU0, "nvidia-256", "available_instances");
    let err = host.write_attr(&ro, "99").expect_err("read-only");
    assert_eq!(err.raw_os_error(), Some(Errno::EACCES as i32));
    let err = host
        .write_attr(&type_path(&host, GPU0, "nvidia-256", "devices"), "1")
        .expect_err("directory");
    assert_eq!(err.raw_os_error(), Some(Errno::EISDIR as i32));
}

/// `threads` threads each try `per_thread` RTX6000-4Q creates on [`GPU0`], each with the
/// host `host_for_thread` gives it; returns how many succeeded (the others must get ENOSPC).
pub(super) fn race_4q_creates(
    threads: u32,
    per_thread: u32,
    host_for_thread: impl Fn() -> Arc<SimHost>,
) -> u32 {
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let host = host_for_thread();
            std::thread::spawn(move || {
                let mut ok = 0;
                for i in 0..per_thread {
                    let uuid = format!("{t:08x}-0000-4000-8000-{i:012x}");
                    match create(&host, GPU0, "nvidia-259", &uuid) {
                        Ok(()) => ok += 1,
                        Err(errno) => assert_eq!(errno, Some(Errno::ENOSPC as i32)),
                    }
                }
                ok
            })
        })
        .collect();
    workers.into_iter().map(|t| t.join().expect("thread")).sum()
}

#[test]
fn concurrent_creates_never_exceed_max_instance() {
    let (_dir, host) = host("nvidia-turing");
    let host = Arc::new(host);
    let shared = Arc::clone(&host);
    let created = race_4q_creates(8, 4, move || Arc::clone(&shared));
    assert_eq!(created, 6);
    assert_eq!(avail(&host, GPU0, "nvidia-259"), 0);
    let devices = host.list_dir(&host.sys("bus/mdev/devices")).expect("list");
    assert_eq!(devices.len(), 6);
    // Every device has its own IOMMU group.
    let mut groups: Vec<_> = devices
        .iter()
        .map(|u| {
            host.link_name(&host.sys(&format!("bus/mdev/devices/{u}/iommu_group")))
                .expect("link")
        })
        .collect();
    groups.sort();
    groups.dedup();
    assert_eq!(groups.len(), 6);
    // And concurrent removes bring everything back.
    let threads: Vec<_> = devices
        .into_iter()
        .map(|u| {
            let host = Arc::clone(&host);
            std::thread::spawn(move || remove(&host, &u))
        })
        .collect();
    for t in threads {
        t.join().expect("thread").expect("remove");
    }
    assert_eq!(avail(&host, GPU0, "nvidia-259"), 6);
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 24);
}

/// Every mdev parent of a tree and the `available_instances` of its types.
pub(super) fn all_available(host: &SimHost) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for parent in host.list_dir(&host.sys("class/mdev_bus")).expect("list") {
        let dir = host
            .resolve(&host.sys(&format!("class/mdev_bus/{parent}")))
            .expect("resolve");
        for t in host
            .list_dir(&dir.join("mdev_supported_types"))
            .expect("types")
        {
            let v = host
                .read_attr(
                    &dir.join("mdev_supported_types")
                        .join(&t)
                        .join("available_instances"),
                )
                .expect("read");
            out.insert((parent.clone(), t), v);
        }
    }
    out
}

#[test]
fn profiles_start_where_the_rules_say() {
    for name in profile_names() {
        let (_dir, host) = host(name);
        let before = all_available(&host);
        // The SR-IOV and passthrough hosts have no mdev parent (the SR-IOV ones not until VFs
        // are enabled, and then only the A40).
        let without = [
            "nvidia-l40s",
            "nvidia-a40",
            "amd-mxgpu",
            "passthrough",
            "intel-sriov",
            "nvidia-h200",
            "nvidia-h100",
            "nvidia-a100",
        ];
        assert_eq!(before.is_empty(), without.contains(name), "{name}");
        for parent in host.list_dir(&host.sys("class/mdev_bus")).expect("list") {
            let dir = host
                .resolve(&host.sys(&format!("class/mdev_bus/{parent}")))
                .expect("dir");
            refresh_available(&dir).expect("refresh");
        }
        assert_eq!(all_available(&host), before, "{name}");
    }
}

#[test]
fn profiles_have_the_documented_layout() {
    let (dir, host) = host("mixed");
    let parents = host.list_dir(&host.sys("class/mdev_bus")).expect("list");
    assert_eq!(
        parents,
        vec!["0000:00:02.0", "0000:3b:00.0", "0000:d8:00.0", "mtty"]
    );
    for (bdf, numa, group) in [("0000:3b:00.0", "0", "11"), ("0000:d8:00.0", "1", "13")] {
        let dev = host.sys(&format!("bus/pci/devices/{bdf}"));
        assert_eq!(
            host.read_attr(&dev.join("vendor")).expect("vendor"),
            "0x10de"
        );
        assert_eq!(
            host.read_attr(&dev.join("device")).expect("device"),
            "0x1e30"
        );
        assert_eq!(
            host.read_attr(&dev.join("class")).expect("class"),
            "0x030000"
        );
        assert_eq!(host.read_attr(&dev.join("numa_node")).expect("numa"), numa);
        assert_eq!(
            host.link_name(&dev.join("driver")).expect("d"),
            Some("nvidia".into())
        );
        assert_eq!(
            host.link_name(&dev.join("iommu_group")).expect("g"),
            Some(group.into())
        );
        let members = host
            .list_dir(&host.sys(&format!("kernel/iommu_groups/{group}/devices")))
            .expect("members");
        assert_eq!(members.len(), 2, "GPU and its audio function");
        assert_eq!(
            avail(&host, &format!("{}", dev.display()), "nvidia-256"),
            24
        );
    }
    let types = host
        .list_dir(&dir.path().join(GPU0).join("mdev_supported_types"))
        .expect("types");
    assert_eq!(types.len(), 23);
    assert_eq!(
        host.read_attr(&type_path(&host, GPU0, "nvidia-256", "name"))
            .expect("name"),
        "GRID RTX6000-1Q"
    );
    assert_eq!(
        host.read_attr(&type_path(&host, GPU0, "nvidia-256", "description"))
            .expect("desc"),
        "num_heads=4, frl_config=60, framebuffer=1024M, max_resolution=5120x2880, max_instance=24"
    );
    let nic = host.sys("bus/pci/devices/0000:02:00.0");
    assert_eq!(
        host.read_attr(&nic.join("class")).expect("class"),
        "0x020000"
    );
    assert_eq!(
        host.link_name(&nic.join("driver")).expect("d"),
        Some("ixgbe".into())
    );
    assert!(!nic.join("mdev_supported_types").exists());
    let igpu = host.sys("bus/pci/devices/0000:00:02.0");
    assert_eq!(host.read_attr(&igpu.join("numa_node")).expect("numa"), "-1");
    assert_eq!(
        host.read_attr(&type_path(&host, IGPU, "i915-GVTg_V5_4", "description"))
            .expect("desc"),
        "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4"
    );
    assert!(!host
        .root()
        .join(MTTY)
        .join("mdev_supported_types/mtty-1/description")
        .exists());
    for d in [
        "etc",
        "run",
        "var/lib/vgpud",
        "dev/vfio",
        "sys/bus/mdev/devices",
    ] {
        assert!(host.root().join(d).is_dir(), "{d}");
    }
    // mdevctl 1.4 needs these below its MDEVCTL_ENV_ROOT; they start empty.
    for d in [
        "etc/mdevctl.d",
        "usr/lib/mdevctl/scripts.d/callouts",
        "usr/lib/mdevctl/scripts.d/notifiers",
    ] {
        let p = host.root().join(d);
        assert!(p.is_dir(), "{d}");
        assert!(host.list_dir(&p).expect("list").is_empty(), "{d}");
    }
    // Every link in the tree is relative and resolves.
    for (path, what) in snapshot(dir.path()) {
        if let Some(target) = what.strip_prefix("-> ") {
            assert!(Path::new(target).is_relative(), "{}", path.display());
            assert!(
                dir.path().join(&path).exists(),
                "{} dangles",
                path.display()
            );
        }
    }
}

#[test]
fn the_large_profile_has_sixteen_gpus_on_two_nodes() {
    let (_dir, host) = host("large");
    let parents = host.list_dir(&host.sys("class/mdev_bus")).expect("list");
    assert_eq!(parents.len(), 16);
    let mut per_node = BTreeMap::new();
    for p in &parents {
        let dev = host.sys(&format!("bus/pci/devices/{p}"));
        let attr = |name: &str| host.read_attr(&dev.join(name)).expect(name);
        assert_eq!(attr("vendor"), "0x10de");
        assert_eq!(attr("device"), "0x1e30");
        assert_eq!(attr("subsystem_vendor"), "0x10de");
        assert_eq!(attr("subsystem_device"), "0x129e");
        assert_eq!(attr("class"), "0x030000");
        assert_eq!(
            host.link_name(&dev.join("driver")).expect("driver"),
            Some("nvidia".into())
        );
        *per_node.entry(attr("numa_node")).or_insert(0) += 1;
    }
    assert_eq!(per_node.get("0"), Some(&8));
    assert_eq!(per_node.get("1"), Some(&8));
    let gpu = host
        .resolve(&host.sys("bus/pci/devices/0000:1a:00.0"))
        .expect("resolve");
    assert!(gpu.ends_with("pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:08.0/0000:1a:00.0"));
    assert_eq!(
        host.link_name(&gpu.join("iommu_group")).expect("group"),
        Some("26".into())
    );
    let last = host
        .resolve(&host.sys("bus/pci/devices/0000:b4:00.0"))
        .expect("resolve");
    assert!(last.ends_with("pci0000:ae/0000:ae:00.0/0000:af:00.0/0000:b0:0b.0/0000:b4:00.0"));
    assert_eq!(host.read_attr(&last.join("numa_node")).expect("numa"), "1");
    let path = format!("{}", gpu.display());
    let types = host
        .list_dir(&gpu.join("mdev_supported_types"))
        .expect("types");
    assert_eq!(types.len(), 29);
    assert_eq!(
        host.read_attr(&type_path(&host, &path, "nvidia-264", "name"))
            .expect("name"),
        "GRID RTX8000-1Q"
    );
    assert_eq!(avail(&host, &path, "nvidia-264"), 32); // 1Q
    assert_eq!(avail(&host, &path, "nvidia-265"), 24); // 2Q
    assert_eq!(avail(&host, &path, "nvidia-273"), 1); // 48Q
    assert_eq!(avail(&host, &path, "nvidia-348"), 12); // 4C
    assert_eq!(avail(&host, &path, "nvidia-445"), 32); // 1B
    assert_eq!(avail(&host, &path, "nvidia-456"), 1); // 48A
}

#[test]
fn the_large_profile_holds_512_devices() {
    let (_dir, host) = host("large");
    let parents = host.list_dir(&host.sys("class/mdev_bus")).expect("list");
    let started = std::time::Instant::now();
    for (g, p) in parents.iter().enumerate() {
        let dir = host
            .resolve(&host.sys(&format!("class/mdev_bus/{p}")))
            .expect("parent");
        let path = format!("{}", dir.display());
        for i in 0..32 {
            let uuid = format!("{g:08x}-0000-4000-8000-{i:012x}");
            create(&host, &path, "nvidia-264", &uuid).expect("1Q");
        }
        assert_eq!(avail(&host, &path, "nvidia-264"), 0);
        assert_eq!(avail(&host, &path, "nvidia-445"), 0); // 1B, the same size
        assert_eq!(
            create(
                &host,
                &path,
                "nvidia-264",
                "ffffffff-0000-4000-8000-000000000000"
            ),
            e(Errno::ENOSPC)
        );
    }
    let devices = host.list_dir(&host.sys("bus/mdev/devices")).expect("list");
    assert_eq!(devices.len(), 512);
    assert!(
        started.elapsed().as_secs() < 120,
        "512 creates took {:?}",
        started.elapsed()
    );
}

#[test]
fn unknown_vendors_count_down_and_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_profile("mtty", dir.path()).expect("base");
    // A hand-made mdpy-like parent: no driver link, types with a parent-level count.
    let parent = dir.path().join("sys/devices/virtual/mdpy/mdpy");
    for t in ["mdpy-vga", "mdpy-xga"] {
        let td = parent.join("mdev_supported_types").join(t);
        fs::create_dir_all(td.join("devices")).expect("mkdir");
        fs::write(td.join("available_instances"), "2\n").expect("write");
        fs::write(td.join("create"), "").expect("write");
    }
    let host = SimHost::new(dir.path());
    let p = format!("{}", parent.display());
    create(&host, &p, "mdpy-vga", U1).expect("create");
    assert_eq!(
        (avail(&host, &p, "mdpy-vga"), avail(&host, &p, "mdpy-xga")),
        (1, 1)
    );
    let dev = host.sys(&format!("bus/mdev/devices/{U1}"));
    assert_eq!(
        host.link_name(&dev.join("driver")).expect("d"),
        Some("mdpy".into())
    );
    create(&host, &p, "mdpy-xga", U2).expect("create");
    assert_eq!(
        create(
            &host,
            &p,
            "mdpy-xga",
            "00000000-0000-4000-8000-000000000001"
        ),
        e(Errno::EUSERS)
    );
    remove(&host, U1).expect("remove");
    assert_eq!(
        (avail(&host, &p, "mdpy-vga"), avail(&host, &p, "mdpy-xga")),
        (1, 1)
    );
}

#[test]
fn profiles_compose_and_rewrite_idempotently() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_profile("nvidia-turing", dir.path()).expect("turing");
    write_profile("mixed", dir.path()).expect("mixed");
    let once = snapshot(dir.path());
    write_profile("mixed", dir.path()).expect("mixed again");
    assert_eq!(snapshot(dir.path()), once);
    let started = std::time::Instant::now();
    write_profile("large", dir.path()).expect("large");
    assert!(started.elapsed().as_secs() < 30);
    let host = SimHost::new(dir.path());
    let parents = host.list_dir(&host.sys("class/mdev_bus")).expect("list");
    assert_eq!(parents.len(), 20);
    // Writing a profile over a tree with devices keeps them and their accounting.
    create(&host, GPU0, "nvidia-259", U1).expect("create");
    write_profile("nvidia-turing", dir.path()).expect("rewrite");
    assert_eq!(avail(&host, GPU0, "nvidia-259"), 5);
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 0);
    remove(&host, U1).expect("remove");
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 24);
}

#[test]
fn a_simulated_reboot_keeps_configuration_and_state() {
    let (dir, host) = host("mixed");
    let root = dir.path();
    create(&host, GPU0, "nvidia-259", U1).expect("create");
    create(&host, MTTY, "mtty-2", U2).expect("create");
    // What mdevctl and vgpud keep across reboots.
    let definition = root.join("etc/mdevctl.d/0000:3b:00.0").join(U1);
    fs::create_dir_all(definition.parent().expect("dir")).expect("mkdir");
    let json = "{\"mdev_type\":\"nvidia-259\",\"start\":\"auto\",\"attrs\":[]}\n";
    fs::write(&definition, json).expect("write");
    fs::set_permissions(&definition, fs::Permissions::from_mode(0o600)).expect("chmod");
    let record = root.join("var/lib/vgpud/x");
    fs::write(&record, "state\n").expect("write");
    let kept = |p: &Path| {
        let meta = fs::metadata(p).expect("meta");
        (
            fs::read_to_string(p).expect("read"),
            meta.permissions().mode() & 0o7777,
            meta.modified().expect("mtime"),
            std::os::unix::fs::MetadataExt::ino(&meta),
        )
    };
    let (definition_before, record_before) = (kept(&definition), kept(&record));
    let etc_before = snapshot(&root.join("etc"));
    let var_before = snapshot(&root.join("var"));

    // Reboot: the kernel's trees and run/ are gone; the profile is written again.
    for d in ["sys", "dev", "run"] {
        fs::remove_dir_all(root.join(d)).expect("rm");
    }
    write_profile("mixed", root).expect("profile after reboot");

    assert_eq!(kept(&definition), definition_before);
    assert_eq!(kept(&record), record_before);
    assert_eq!(snapshot(&root.join("etc")), etc_before);
    assert_eq!(snapshot(&root.join("var")), var_before);
    // The kernel side is fresh: no devices, every count back at its start.
    let fresh = tempfile::tempdir().expect("tempdir");
    write_profile("mixed", fresh.path()).expect("fresh profile");
    for d in ["sys", "dev", "run"] {
        assert_eq!(
            snapshot(&root.join(d)),
            snapshot(&fresh.path().join(d)),
            "{d}"
        );
    }
    assert!(host
        .list_dir(&host.sys("bus/mdev/devices"))
        .expect("list")
        .is_empty());
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 24);
    assert_eq!(avail(&host, MTTY, "mtty-1"), 24);
    // And the host works as before.
    create(&host, GPU0, "nvidia-259", U1).expect("create after reboot");
    assert_eq!(avail(&host, GPU0, "nvidia-259"), 5);
}

/// A listener on the simulated host's uevent socket, as a daemon on it listens.
pub(super) fn uevent_listener(host: &SimHost) -> std::os::unix::net::UnixDatagram {
    let (socket, _) = uevent::paths(host.root());
    fs::create_dir_all(socket.parent().expect("state dir")).expect("state dir");
    let listener = std::os::unix::net::UnixDatagram::bind(&socket).expect("bind");
    listener
        .set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .expect("timeout");
    listener
}

/// Every event waiting on `listener`, each as (ACTION, SUBSYSTEM, DEVPATH, DEVNAME).
pub(super) fn uevents_sent(
    listener: &std::os::unix::net::UnixDatagram,
) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    let mut buf = vec![0_u8; 8192];
    while let Ok(n) = listener.recv(&mut buf) {
        let vars: BTreeMap<String, String> = buf[..n]
            .split(|b| *b == 0)
            .skip(1)
            .filter_map(|f| {
                let (k, v) = std::str::from_utf8(f).ok()?.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect();
        let var = |k: &str| vars.get(k).cloned().unwrap_or_default();
        out.push((
            var("ACTION"),
            var("SUBSYSTEM"),
            var("DEVPATH"),
            var("DEVNAME"),
        ));
    }
    out
}

#[test]
fn an_mdev_sends_the_kernels_four_uevents_when_made_and_when_removed() {
    // What Linux 6.1 sends for an mtty device (the real-kernel suite counts them): the mdev's
    // `add`, its new IOMMU group's vfio node, its vfio device, then the driver's `bind`.
    let (_dir, host) = host("mtty");
    let listener = uevent_listener(&host);
    create(&host, MTTY, "mtty-1", U1).expect("create");
    let dev = format!("/devices/virtual/mtty/mtty/{U1}");
    let group =
        fs::read_link(host.sys(&format!("bus/mdev/devices/{U1}/iommu_group"))).expect("group");
    let group = group.file_name().and_then(|g| g.to_str()).expect("name");
    let vfio = format!("/devices/virtual/vfio/{group}");
    let t = |a: &str, s: &str, p: &str, n: &str| {
        (a.to_string(), s.to_string(), p.to_string(), n.to_string())
    };
    let made = vec![
        t("add", "mdev", &dev, ""),
        t("add", "vfio", &vfio, &format!("vfio/{group}")),
        t(
            "add",
            "vfio-dev",
            &format!("{dev}/vfio-dev/vfio0"),
            "vfio/devices/vfio0",
        ),
        t("bind", "mdev", &dev, ""),
    ];
    assert_eq!(uevents_sent(&listener), made);
    remove(&host, U1).expect("remove");
    let removed = vec![
        t(
            "remove",
            "vfio-dev",
            &format!("{dev}/vfio-dev/vfio0"),
            "vfio/devices/vfio0",
        ),
        t("remove", "vfio", &vfio, &format!("vfio/{group}")),
        t("unbind", "mdev", &dev, ""),
        t("remove", "mdev", &dev, ""),
    ];
    assert_eq!(uevents_sent(&listener), removed);
}
