//! `qemu-vm`: the host of the real-kernel suite (`tests/vm/run`), exactly: a q35 machine under
//! qemu 7.2 with an emulated Intel IOMMU (`dmar0`) running Debian's 6.1 kernel, the kernel's
//! mtty sample loaded (its parent as the `mtty` profile writes it), the PCI drivers built into
//! the kernel (`pcieport` among them) and those the VM's initramfs loads: `bochs-drm`,
//! `e1000e`, `vfio-pci` (no `pci-pf-stub`). A whole host of its own: it
//! does not write the common platform's devices (its addresses and IOMMU groups would collide,
//! and the VM has none of them), and no other profile should be written next to it.
//!
//! | address      | device                                    | class  | group | driver    |
//! |--------------|-------------------------------------------|--------|-------|-----------|
//! | 0000:00:00.0 | 8086:29c0 q35 host bridge                 | 060000 | 0     | none      |
//! | 0000:00:01.0 | 1b36:000c PCIe root port (rp1)            | 060400 | 1     | pcieport  |
//! | 0000:00:02.0 | 1b36:000c PCIe root port (rp2)            | 060400 | 2     | pcieport  |
//! | 0000:00:03.0 | 1234:1111 std VGA, boot VGA, fb0: console | 030000 | 3     | bochs-drm |
//! | 0000:00:1f.0 | 8086:2918 ICH9 LPC bridge                 | 060100 | 4     | none      |
//! | 0000:00:1f.2 | 8086:2922 ICH9 AHCI                       | 010601 | 4     | none      |
//! | 0000:00:1f.3 | 8086:2930 ICH9 SMBus                      | 0c0500 | 4     | none      |
//! | 0000:01:00.0 | 1234:1111 std VGA, fb1                    | 030000 | 5     | bochs-drm |
//! | 0000:01:00.1 | 8086:10d3 82574L, interface `eth0`        | 020000 | 5     | e1000e    |
//! | 0000:02:00.0 | 1b36:000e PCIe-to-PCI bridge              | 060400 | 6     | none      |
//! | 0000:03:01.0 | 1b36:0100 qxl (secondary)                 | 038000 | 6     | none      |
//! | 0000:03:02.0 | 1234:11e8 edu                             | 00ff00 | 6     | none      |
//!
//! Nothing is on a NUMA node (-1). The mdevs' IOMMU groups are the lowest free numbers, from 7
//! on. The VM's AHCI and SMBus functions stay unbound (their modules are not in the initramfs),
//! and so does the qxl (no qxl module). bochs-drm registered a framebuffer on each std VGA in
//! bus order (fb0 on 00:03.0, fb1 on 01:00.0, `name` `bochs-drmdrmfb`); fbcon took the
//! consoles over on fb0, the boot VGA device's (`fbcon: bochs-drmdrmfb (fb0) is primary
//! device`): `sys/class/vtconsole` has `vtcon0` `(S) dummy device` (the direct PVH boot leaves
//! no VGA text mode), unbound, and `vtcon1` `(M) frame buffer device`, bound; the foreground
//! console is `tty1`.

use super::platform;
use super::tree::{write_pci, write_root_complex, Bar, PciFn, Tree, IO, MEM32, MEM64};
use crate::VENDOR_INTEL;
use crate::{fbdev, SimError};

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
fn bridge_bars(
    bar0: u64,
    io: u64,
    (mem_start, mem_size): (u64, u64),
    (pref, pref_size): (u64, u64),
) -> Vec<Bar> {
    let mut bars = vec![
        mem(13, io, 0x1000, 0x100),
        mem(14, mem_start, mem_size, 0x200),
        mem(15, pref, pref_size, 0x0010_2201),
    ];
    if bar0 != 0 {
        bars.insert(0, mem(0, bar0, 0x1000, MEM32));
    }
    bars
}

/// Writes `qemu-vm`.
pub(super) fn write(tree: &Tree) -> Result<(), SimError> {
    platform::base(tree)?;
    fbdev::write_consoles(tree, "(S) dummy device")?;
    for d in BUILT_IN_DRIVERS
        .iter()
        .chain(["bochs-drm", "e1000e"].iter())
    {
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
            bars: bridge_bars(
                0xf820_0000,
                0xd000,
                (0xf800_0000, 2 << 20),
                (0xfd00_0000, 16 << 20),
            ),
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
            bars: bridge_bars(
                0xf820_1000,
                0xc000,
                (0xe800_0000, 256 << 20),
                (0xfe00_0000, 2 << 20),
            ),
            secondary_bus: Some(0x02),
        },
        PciFn {
            path: format!("{root}/0000:00:03.0"),
            vendor: QEMU,
            device: 0x1111,
            subsystem: QEMU_SUBSYSTEM,
            class: 0x030000,
            revision: 0x02,
            numa_node: -1,
            driver: Some("bochs-drm"),
            iommu_group: Some(3),
            bars: vec![
                mem(0, 0xfc00_0000, 16 << 20, MEM32_PREF),
                mem(2, 0xf820_2000, 0x1000, MEM32),
                // The boot VGA's shadowed legacy ROM.
                mem(6, 0xc_0000, 128 << 10, 0x212),
            ],
            secondary_bus: None,
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
            iommu_group: Some(4),
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
            iommu_group: Some(4),
            bars: vec![mem(4, 0xe040, 0x20, IO), mem(5, 0xf820_3000, 0x1000, MEM32)],
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
            iommu_group: Some(4),
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
            driver: Some("bochs-drm"),
            iommu_group: Some(5),
            bars: vec![
                mem(0, 0xfd00_0000, 16 << 20, MEM32_PREF),
                mem(2, 0xf804_4000, 0x1000, MEM32),
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
            iommu_group: Some(5),
            bars: vec![
                mem(0, 0xf800_0000, 128 << 10, MEM32),
                mem(1, 0xf802_0000, 128 << 10, MEM32),
                mem(2, 0xd000, 0x20, IO),
                mem(3, 0xf804_0000, 16 << 10, MEM32),
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
            iommu_group: Some(6),
            bars: {
                let mut bars =
                    bridge_bars(0, 0xc000, (0xe800_0000, 192 << 20), (0xfe00_0000, 2 << 20));
                bars.insert(0, mem(0, 0xf400_0000, 0x100, MEM64));
                bars
            },
            secondary_bus: Some(0x03),
        },
        PciFn {
            path: format!("{bridge}/0000:03:01.0"),
            vendor: REDHAT,
            device: 0x0100,
            subsystem: QEMU_SUBSYSTEM,
            class: 0x038000,
            revision: 0x05,
            numa_node: -1,
            driver: None,
            iommu_group: Some(6),
            bars: vec![
                mem(0, 0xe800_0000, 64 << 20, MEM32),
                mem(1, 0xec00_0000, 64 << 20, MEM32),
                mem(2, 0xf010_0000, 8 << 10, MEM32),
                mem(3, 0xc000, 0x20, IO),
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
            iommu_group: Some(6),
            bars: vec![mem(0, 0xf000_0000, 1 << 20, MEM32)],
            secondary_bus: None,
        },
    ];
    // fbcon's device, there before any framebuffer.
    let fbcon = "sys/devices/virtual/graphics/fbcon";
    tree.file(&format!("{fbcon}/uevent"), "", 0o644)?;
    tree.file(&format!("{fbcon}/cursor_blink"), "1\n", 0o644)?;
    tree.file(&format!("{fbcon}/rotate"), "0\n", 0o644)?;
    tree.file(&format!("{fbcon}/rotate_all"), "", 0o200)?;
    tree.dir(&format!("{fbcon}/power"))?;
    tree.link(&format!("{fbcon}/subsystem"), "sys/class/graphics")?;
    tree.link("sys/class/graphics/fbcon", fbcon)?;
    for f in &fns {
        let rel = write_pci(tree, f)?;
        if f.class >> 8 == 0x0300 {
            // Only VGA-class functions have `boot_vga`; the one on the root bus is the boot
            // VGA device.
            let boot = f.bdf() == "0000:00:03.0";
            tree.file(
                &format!("{rel}/boot_vga"),
                if boot { "1\n" } else { "0\n" },
                0o444,
            )?;
        }
        if f.driver == Some("e1000e") {
            // The kernel names it eth0: the initramfs has no udev to rename it.
            platform::netdev(tree, &rel)?;
        }
    }
    // bochs-drm's framebuffers, in bus order (fbcon follows).
    for f in fns.iter().filter(|f| f.driver == Some("bochs-drm")) {
        fbdev::profile_probe(tree, &f.rel(), "bochs-drm")?;
    }
    super::mtty::write(tree)
}
