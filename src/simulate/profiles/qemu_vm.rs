//! `qemu-vm`: the host of the real-kernel suite (`tests/vm/run`), exactly: a q35 machine under
//! qemu 7.2 with an emulated Intel IOMMU (`dmar0`) running Debian's 6.1 kernel, the kernel's
//! mtty sample loaded (its parent as the `mtty` profile writes it), the PCI drivers built into
//! the kernel (`pcieport` among them) and those the VM's initramfs loads: `e1000e`, `vfio-pci`
//! (no `pci-pf-stub`). A whole host of its own: it
//! does not write the common platform's devices (its addresses and IOMMU groups would collide,
//! and the VM has none of them), and no other profile should be written next to it.
//!
//! | address      | device                                    | class  | group | driver   |
//! |--------------|-------------------------------------------|--------|-------|----------|
//! | 0000:00:00.0 | 8086:29c0 q35 host bridge                 | 060000 | 0     | none     |
//! | 0000:00:01.0 | 1b36:000c PCIe root port (rp1)            | 060400 | 1     | pcieport |
//! | 0000:00:02.0 | 1b36:000c PCIe root port (rp2)            | 060400 | 2     | pcieport |
//! | 0000:00:1f.0 | 8086:2918 ICH9 LPC bridge                 | 060100 | 3     | none     |
//! | 0000:00:1f.2 | 8086:2922 ICH9 AHCI                       | 010601 | 3     | none     |
//! | 0000:00:1f.3 | 8086:2930 ICH9 SMBus                      | 0c0500 | 3     | none     |
//! | 0000:01:00.0 | 1234:1111 std VGA (boot VGA, no fbdev)    | 030000 | 4     | none     |
//! | 0000:01:00.1 | 8086:10d3 82574L, interface `eth0`         | 020000 | 4     | e1000e   |
//! | 0000:02:00.0 | 1b36:000e PCIe-to-PCI bridge              | 060400 | 5     | none     |
//! | 0000:03:01.0 | 1234:1111 secondary VGA                   | 038000 | 5     | none     |
//! | 0000:03:02.0 | 1234:11e8 edu                             | 00ff00 | 5     | none     |
//!
//! Nothing is on a NUMA node (-1). The mdevs' IOMMU groups are the lowest free numbers, from 6
//! on. The VM's AHCI and SMBus functions stay unbound (their modules are not in the initramfs),
//! and neither VGA has a driver (no bochs-drm: `sys/class/graphics` has only `fbcon`).

use super::platform;
use super::tree::{write_pci, write_root_complex, Bar, PciFn, Tree, IO, MEM32, MEM64};
use crate::model::VENDOR_INTEL;
use crate::simulate::SimError;

/// qemu's vendor ids: the std VGA and edu (0x1234), Red Hat's bridges (0x1b36), and the
/// subsystem ids qemu gives its devices by default (1af4:1100).
const QEMU: u16 = 0x1234;
const REDHAT: u16 = 0x1b36;
const QEMU_SUBSYSTEM: (u16, u16) = (0x1af4, 0x1100);

/// The PCI drivers built into Debian's 6.1 kernel (`sys/bus/pci/drivers` in the VM before any
/// module is loaded). None of them claims a device of this VM (the simulator's id tables do
/// not know them: they match nothing).
const BUILT_IN_DRIVERS: &[&str] = &[
    "8250_mid",
    "8250_pericom",
    "agpgart-intel",
    "agpgart-sis",
    "agpgart-via",
    "iosf_mbi_pci",
    "pcieport",
    "serial",
    "shpchp",
    "xen-platform-pci",
];

fn mem(index: usize, start: u64, size: u64, flags: u64) -> Bar {
    Bar {
        index,
        start,
        size,
        flags,
    }
}

/// `resource` flags of a 32-bit prefetchable memory BAR (the VGAs' framebuffers).
const MEM32_PREF: u64 = 0x0004_2208;

/// A root port's or bridge's resources as the VM's kernel assigned them: BAR 0 (4 KiB of
/// MMIO, `bar0` 0 for none), and the I/O, memory and prefetchable windows (lines 13 to 15 of
/// `resource`).
fn bridge_bars(bar0: u64, io: u64, mem_start: u64, mem_size: u64, pref: u64) -> Vec<Bar> {
    let mut bars = vec![
        mem(13, io, 0x1000, 0x100),
        mem(14, mem_start, mem_size, 0x200),
        mem(15, pref, 16 << 20, 0x0010_2201),
    ];
    if bar0 != 0 {
        bars.insert(0, mem(0, bar0, 0x1000, MEM32));
    }
    bars
}

/// Writes `qemu-vm`.
pub(super) fn write(tree: &Tree) -> Result<(), SimError> {
    platform::base(tree)?;
    for d in BUILT_IN_DRIVERS.iter().chain(["e1000e"].iter()) {
        tree.driver("pci", d)?;
    }
    write_root_complex(tree, 0, 0)?;
    let root = "pci0000:00";
    let rp1 = format!("{root}/0000:00:01.0");
    let rp2 = format!("{root}/0000:00:02.0");
    let bridge = format!("{rp2}/0000:02:00.0");
    let fns = [
        PciFn {
            path: format!("{root}/0000:00:00.0"),
            vendor: VENDOR_INTEL,
            device: 0x29c0,
            subsystem: QEMU_SUBSYSTEM,
            class: 0x060000,
            revision: 0x00,
            numa_node: -1,
            driver: None,
            iommu_group: Some(0),
            bars: vec![],
            secondary_bus: None,
        },
        PciFn {
            path: rp1.clone(),
            vendor: REDHAT,
            device: 0x000c,
            subsystem: (REDHAT, 0x0000),
            class: 0x060400,
            revision: 0x00,
            numa_node: -1,
            driver: Some("pcieport"),
            iommu_group: Some(1),
            bars: bridge_bars(0xfea0_0000, 0xd000, 0xfe80_0000, 2 << 20, 0xfd00_0000),
            secondary_bus: Some(0x01),
        },
        PciFn {
            path: rp2.clone(),
            vendor: REDHAT,
            device: 0x000c,
            subsystem: (REDHAT, 0x0000),
            class: 0x060400,
            revision: 0x00,
            numa_node: -1,
            driver: Some("pcieport"),
            iommu_group: Some(2),
            bars: bridge_bars(0xfea0_1000, 0xc000, 0xfe40_0000, 4 << 20, 0xfc00_0000),
            secondary_bus: Some(0x02),
        },
        PciFn {
            path: format!("{root}/0000:00:1f.0"),
            vendor: VENDOR_INTEL,
            device: 0x2918,
            subsystem: QEMU_SUBSYSTEM,
            class: 0x060100,
            revision: 0x02,
            numa_node: -1,
            driver: None,
            iommu_group: Some(3),
            bars: vec![],
            secondary_bus: None,
        },
        PciFn {
            path: format!("{root}/0000:00:1f.2"),
            vendor: VENDOR_INTEL,
            device: 0x2922,
            subsystem: QEMU_SUBSYSTEM,
            class: 0x010601,
            revision: 0x02,
            numa_node: -1,
            driver: None,
            iommu_group: Some(3),
            bars: vec![mem(4, 0xe040, 0x20, IO), mem(5, 0xfea0_2000, 0x1000, MEM32)],
            secondary_bus: None,
        },
        PciFn {
            path: format!("{root}/0000:00:1f.3"),
            vendor: VENDOR_INTEL,
            device: 0x2930,
            subsystem: QEMU_SUBSYSTEM,
            class: 0x0c0500,
            revision: 0x02,
            numa_node: -1,
            driver: None,
            iommu_group: Some(3),
            bars: vec![mem(4, 0x0700, 0x40, IO)],
            secondary_bus: None,
        },
        PciFn {
            path: format!("{rp1}/0000:01:00.0"),
            vendor: QEMU,
            device: 0x1111,
            subsystem: QEMU_SUBSYSTEM,
            class: 0x030000,
            revision: 0x02,
            numa_node: -1,
            driver: None,
            iommu_group: Some(4),
            bars: vec![
                mem(0, 0xfd00_0000, 16 << 20, MEM32_PREF),
                mem(2, 0xfe84_4000, 0x1000, MEM32),
                // The VGA's shadowed legacy ROM (boot VGA).
                mem(6, 0xc_0000, 128 << 10, 0x212),
            ],
            secondary_bus: None,
        },
        PciFn {
            path: format!("{rp1}/0000:01:00.1"),
            vendor: VENDOR_INTEL,
            device: 0x10d3,
            subsystem: (VENDOR_INTEL, 0x0000),
            class: 0x020000,
            revision: 0x00,
            numa_node: -1,
            driver: Some("e1000e"),
            iommu_group: Some(4),
            bars: vec![
                mem(0, 0xfe80_0000, 128 << 10, MEM32),
                mem(1, 0xfe82_0000, 128 << 10, MEM32),
                mem(2, 0xd000, 0x20, IO),
                mem(3, 0xfe84_0000, 16 << 10, MEM32),
            ],
            secondary_bus: None,
        },
        PciFn {
            path: bridge.clone(),
            vendor: REDHAT,
            device: 0x000e,
            subsystem: (0x0000, 0x0000),
            class: 0x060400,
            revision: 0x00,
            numa_node: -1,
            driver: None,
            iommu_group: Some(5),
            bars: {
                let mut bars = bridge_bars(0, 0xc000, 0xfe40_0000, 2 << 20, 0xfc00_0000);
                bars.insert(0, mem(0, 0xfe60_0000, 0x100, MEM64));
                bars
            },
            secondary_bus: Some(0x03),
        },
        PciFn {
            path: format!("{bridge}/0000:03:01.0"),
            vendor: QEMU,
            device: 0x1111,
            subsystem: QEMU_SUBSYSTEM,
            class: 0x038000,
            revision: 0x02,
            numa_node: -1,
            driver: None,
            iommu_group: Some(5),
            bars: vec![
                mem(0, 0xfc00_0000, 16 << 20, MEM32_PREF),
                mem(2, 0xfe50_0000, 0x1000, MEM32),
            ],
            secondary_bus: None,
        },
        PciFn {
            path: format!("{bridge}/0000:03:02.0"),
            vendor: QEMU,
            device: 0x11e8,
            subsystem: QEMU_SUBSYSTEM,
            class: 0x00ff00,
            revision: 0x10,
            numa_node: -1,
            driver: None,
            iommu_group: Some(5),
            bars: vec![mem(0, 0xfe40_0000, 1 << 20, MEM32)],
            secondary_bus: None,
        },
    ];
    for f in &fns {
        let rel = write_pci(tree, f)?;
        if f.class >> 8 == 0x0300 {
            // Only VGA-class functions have `boot_vga`; the std VGA on rp1 is the only one.
            tree.file(&format!("{rel}/boot_vga"), "1\n", 0o444)?;
        }
        if f.driver == Some("e1000e") {
            // The kernel names it eth0: the initramfs has no udev to rename it.
            platform::netdev(tree, &rel)?;
        }
    }
    // fbcon's device: the console has no framebuffer (no fbN), so no function draws it.
    let fbcon = "sys/devices/virtual/graphics/fbcon";
    tree.file(&format!("{fbcon}/uevent"), "", 0o644)?;
    tree.file(&format!("{fbcon}/cursor_blink"), "1\n", 0o644)?;
    tree.file(&format!("{fbcon}/rotate"), "0\n", 0o644)?;
    tree.dir(&format!("{fbcon}/power"))?;
    tree.link(&format!("{fbcon}/subsystem"), "sys/class/graphics")?;
    tree.link("sys/class/graphics/fbcon", fbcon)?;
    super::mtty::write(tree)
}
