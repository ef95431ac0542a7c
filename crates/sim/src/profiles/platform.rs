//! The part every profile but `qemu-vm` shares: top-level directories, the PCI and mdev buses
//! (with `drivers_probe`, `drivers_autoprobe` and the `vfio-pci` and `pci-pf-stub` drivers),
//! an IOMMU, the host bridge and a dual-port 10 GbE NIC behind a root port (a non-GPU device
//! that discovery must ignore). `qemu-vm`, a whole host of its own, takes only [`base`] (the
//! directories, buses, IOMMU and `vfio-pci`) and writes its own PCI devices.
//!
//! Directories outside `sys` (`etc`, `etc/mdevctl.d`, `usr/lib/mdevctl/scripts.d/{callouts,
//! notifiers}`, `run`, `var/lib/vgpud`, `dev/vfio`, `dev/vfio/devices`) are only created when
//! missing: what is in
//! them survives writing a profile again, as configuration and state survive a reboot.
//!
//! | BDF          | device                          | class    | driver   | group | NUMA |
//! |--------------|---------------------------------|----------|----------|-------|------|
//! | 0000:00:00.0 | 8086:2020 host bridge           | 0x060000 | none     | 0     | 0    |
//! | 0000:00:03.0 | 8086:2030 PCIe root port        | 0x060400 | pcieport | 2     | 0    |
//! | 0000:02:00.0 | 8086:10fb 82599ES 10 GbE        | 0x020000 | ixgbe    | 3     | 0    |
//! | 0000:02:00.1 | 8086:10fb 82599ES 10 GbE        | 0x020000 | ixgbe    | 3     | 0    |
//!
//! The NIC's functions carry the interfaces ixgbe registers (`net/eth<N>`).

use super::tree::{write_pci, write_root_complex, Bar, PciFn, Tree, IO, MEM64_PREF};
use crate::SimError;

/// Intel's PCI vendor id.
const INTEL: u16 = 0x8086;

pub(super) fn write(tree: &Tree) -> Result<(), SimError> {
    base(tree)?;
    tree.driver("pci", "pci-pf-stub")?;
    devices(tree)
}

/// The directories, the PCI and mdev buses with `drivers_probe`, `drivers_autoprobe` and the
/// `vfio-pci` driver, and the IOMMU `dmar0`: what any host vgpud runs on has.
pub(super) fn base(tree: &Tree) -> Result<(), SimError> {
    for d in [
        "etc",
        // mdevctl 1.4 refuses to run without these below its MDEVCTL_ENV_ROOT.
        "etc/mdevctl.d",
        "usr/lib/mdevctl/scripts.d/callouts",
        "usr/lib/mdevctl/scripts.d/notifiers",
        "run",
        "var/lib/vgpud",
        "dev/vfio",
        // vfio's device cdevs (CONFIG_VFIO_DEVICE_CDEV) and their class: vfio-pci is loaded.
        "dev/vfio/devices",
        "sys/class/vfio-dev",
        "sys/bus/pci/devices",
        "sys/bus/pci/drivers",
        "sys/bus/mdev/devices",
        "sys/bus/mdev/drivers",
        "sys/class/mdev_bus",
        "sys/kernel/iommu_groups",
        "sys/devices/virtual/iommu/dmar0",
    ] {
        tree.dir(d)?;
    }
    tree.link("sys/class/iommu/dmar0", "sys/devices/virtual/iommu/dmar0")?;
    tree.driver("pci", "vfio-pci")?;
    tree.file_if_missing("sys/bus/pci/drivers_probe", "", 0o200)?;
    tree.file_if_missing("sys/bus/pci/drivers_autoprobe", "1\n", 0o644)?;
    Ok(())
}

/// The platform's PCI devices: host bridge, root port, NIC.
fn devices(tree: &Tree) -> Result<(), SimError> {
    write_root_complex(tree, 0, 0)?;

    let host_bridge = PciFn {
        path: "pci0000:00/0000:00:00.0".into(),
        vendor: INTEL,
        device: 0x2020,
        subsystem: (INTEL, 0x0000),
        class: 0x060000,
        revision: 0x04,
        numa_node: 0,
        driver: None,
        iommu_group: Some(0),
        bars: vec![],
        secondary_bus: None,
    };
    write_pci(tree, &host_bridge)?;
    let port = root_port("pci0000:00/0000:00:03.0", 0x02, 2, 0);
    write_pci(tree, &port)?;
    for func in 0..2u64 {
        let nic = PciFn {
            path: format!("pci0000:00/0000:00:03.0/0000:02:00.{func}"),
            vendor: INTEL,
            device: 0x10fb,
            subsystem: (INTEL, 0x000c),
            class: 0x020000,
            revision: 0x01,
            numa_node: 0,
            driver: Some("ixgbe"),
            iommu_group: Some(3),
            bars: vec![
                Bar {
                    index: 0,
                    start: 0x3800_0000_0000 + func * 0x80_0000,
                    size: 0x40_0000,
                    flags: MEM64_PREF,
                },
                Bar {
                    index: 2,
                    start: 0xe000 + func * 0x20,
                    size: 0x20,
                    flags: IO,
                },
                Bar {
                    index: 4,
                    start: 0x3800_0040_0000 + func * 0x80_0000,
                    size: 0x4000,
                    flags: MEM64_PREF,
                },
            ],
            secondary_bus: None,
        };
        let rel = write_pci(tree, &nic)?;
        netdev(tree, &rel)?;
    }
    Ok(())
}

/// The interface a network driver registered on the function at `rel` (`binding.rs`), unless
/// it has one (the profile is written again).
pub(super) fn netdev(tree: &Tree, rel: &str) -> Result<(), SimError> {
    let has =
        std::fs::read_dir(tree.path(&format!("{rel}/net"))).is_ok_and(|mut d| d.next().is_some());
    if has {
        return Ok(());
    }
    crate::binding::netdev_register(&tree.path("sys"), &tree.path(rel))
        .map(|_| ())
        .map_err(|source| SimError::Io {
            path: tree.path(rel),
            source,
        })
}

/// An Intel PCIe root port (8086:2030, driver `pcieport`) at `path` bridging to `secondary`.
pub(super) fn root_port(path: &str, secondary: u8, group: u32, numa_node: i32) -> PciFn {
    PciFn {
        path: path.to_string(),
        vendor: INTEL,
        device: 0x2030,
        subsystem: (INTEL, 0x0000),
        class: 0x060400,
        revision: 0x04,
        numa_node,
        driver: Some("pcieport"),
        iommu_group: Some(group),
        bars: vec![],
        secondary_bus: Some(secondary),
    }
}
