//! The daemon's discovery rules read on trees the simulator (`vgpud-sim`) wrote and changed:
//! the tests of the simulator that also asked a rule of the daemon, kept here so the
//! simulator's crate uses none (a wrong rule cannot be mirrored by the simulator it is
//! tested on).

use super::console::console;
use super::scan_gpus;
use crate::host::{Host, ToolOutput};
use crate::model::SharingMode;

const CONSOLE: &str = "0000:2d:00.0";
const H200_0: &str = "0000:49:00.0";
const H200_1: &str = "0000:c9:00.0";
const H100: &str = "0000:51:00.0";
const H200_DEVICE: u16 = 0x2335;

fn simulated(profile: &str) -> (tempfile::TempDir, Host) {
    let dir = tempfile::tempdir().expect("tempdir");
    vgpud_sim::write_profile(profile, dir.path()).expect("profile");
    let host = Host::simulated(dir.path());
    (dir, host)
}

fn write(host: &Host, rel: &str, value: &str) {
    host.write_attr(&host.sys(rel), value).expect(rel);
}

fn sriov_manage(host: &Host, args: &[&str]) -> ToolOutput {
    host.run_tool(&host.root().join("usr/lib/nvidia/sriov-manage"), args)
        .expect("run")
}

#[test]
fn the_console_follows_fbcon_when_its_gpus_driver_goes_and_comes_back() {
    let (_dir, host) = simulated("passthrough");
    // The console's GPU: every console was on it, they go back to the dummy console.
    write(&host, "bus/pci/drivers/nvidia/unbind", CONSOLE);
    let found = console(&host).expect("read");
    assert_eq!(found, None, "only the dummy console is bound");
    // Bound again, the primary display's framebuffer makes fbcon take the consoles over.
    write(
        &host,
        "bus/pci/drivers/nvidia/bind",
        &format!("{CONSOLE}\n"),
    );
    let found = console(&host).expect("read");
    assert_eq!(found.expect("console").function, CONSOLE);
}

#[test]
fn the_qemu_vms_console_is_the_boot_vga_devices_framebuffer() {
    let (_dir, host) = simulated("qemu-vm");
    let found = console(&host).expect("read").expect("a console");
    assert_eq!(found.function, "0000:00:03.0");
    assert_eq!(
        found.reason.to_string(),
        "fbcon draws tty1 on fb0 (bochs-drmdrmfb), which is on it; it is the boot VGA device's framebuffer, which fbcon takes as its primary display"
    );
}

#[test]
fn the_h200_profile_is_discovered_with_its_types() {
    let (_dir, host) = simulated("nvidia-h200");
    let gpus = scan_gpus(&host).expect("scan");
    let h200: Vec<_> = gpus
        .iter()
        .map(|(g, _)| g)
        .filter(|g| g.device_id == H200_DEVICE)
        .collect();
    assert_eq!(h200.len(), 2);
    for (g, addr, numa) in [(h200[0], H200_0, 0), (h200[1], H200_1, 1)] {
        assert_eq!(g.address, addr);
        assert_eq!(g.model, "H200 SXM 141GB");
        assert_eq!(g.numa_node, Some(numa));
        assert_eq!(g.driver, "nvidia");
        // VFs off: every type of the board, none available yet.
        assert_eq!(g.types.len(), 16, "{:?}", g.types);
        assert!(g.types.iter().all(|t| t.available_instances == 0));
        let sriov = g.sriov.as_ref().expect("SR-IOV");
        assert_eq!((sriov.total_vfs, sriov.num_vfs), (32, 0));
    }
    assert_eq!(sriov_manage(&host, &["-e", H200_0]).status, 0);
    let gpus = scan_gpus(&host).expect("scan");
    let g = &gpus
        .iter()
        .find(|(g, _)| g.address == H200_0)
        .expect("H200")
        .0;
    assert!(g.sharing_modes.contains(&SharingMode::SriovVgpu));
    let avail = |id: u32| {
        g.types
            .iter()
            .find(|t| t.id == format!("nvidia-{id}"))
            .map(|t| t.available_instances)
    };
    // MIG off: the time-sliced types, each capped by its maximum; the MIG-backed ones none.
    assert_eq!(avail(1420), Some(32), "H200X-4C");
    assert_eq!(avail(1428), Some(1), "H200X-141C");
    assert_eq!(avail(1422), Some(16), "H200X-8C");
    assert_eq!(avail(1414), Some(0), "H200X-1-18C");
    // The first VF's list, read as discovery reads it (the simulator computes it first): a
    // header and the nine time-sliced types.
    let list = host
        .read_attr(&host.sys("bus/pci/devices/0000:49:00.4/nvidia/creatable_vgpu_types"))
        .expect("read");
    assert_eq!(list.lines().next(), Some("ID    : vGPU Name"));
    let names: Vec<&str> = list.lines().skip(1).collect();
    assert_eq!(names.len(), 9, "{list}");
    assert!(
        names.iter().all(|l| l.contains(" : NVIDIA H200X-")),
        "{list}"
    );
    // The H100 profile: one PF on NUMA node 0, its own groups.
    let (_dir, host) = simulated("nvidia-h100");
    let gpus = scan_gpus(&host).expect("scan");
    let g = &gpus
        .iter()
        .find(|(g, _)| g.address == H100)
        .expect("H100")
        .0;
    assert_eq!((g.model.as_str(), g.numa_node), ("H100 PCIe", Some(0)));
    assert_eq!(g.types.len(), 15);
    assert_eq!(g.iommu_group, Some(89));
}
