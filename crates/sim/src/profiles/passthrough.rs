//! `passthrough`: a host for whole-GPU passthrough, with one clean candidate and two that must
//! not be taken lightly. Every GPU is an NVIDIA RTX A4000 (10de:24b0, subsystem 10de:14ad, VGA
//! class, driver `nvidia`, `boot_vga`) with its HD-audio function (10de:228b, `snd_hda_intel`).
//!
//! | path below sys/devices                                   | what                 | group |
//! |----------------------------------------------------------|----------------------|-------|
//! | pci0000:20/0000:20:01.1                                  | root port            | 76    |
//! | pci0000:20/0000:20:01.1/0000:21:00.0, …:21:00.1          | (a) GPU + audio      | 77    |
//! | pci0000:2c/0000:2c:01.1                                  | root port            | 78    |
//! | pci0000:2c/0000:2c:01.1/0000:2d:00.0, …:2d:00.1          | (b) console GPU      | 79    |
//! | pci0000:30/0000:30:01.1                                  | root port            | 80    |
//! | …/0000:31:00.0                                           | switch upstream port | 81    |
//! | …/0000:31:00.0/0000:32:01.0, …/0000:32:03.0              | downstream ports     | 81    |
//! | …/0000:32:01.0/0000:33:00.0, …:33:00.1                   | (c) GPU + audio      | 81    |
//! | …/0000:32:03.0/0000:34:00.0                              | 8086:10d3 NIC, e1000e| 81    |
//!
//! (a) is alone in its group with its audio function. (b) is the boot VGA device (its
//! `boot_vga` reads 1) and the console runs on it. nvidia-drm runs with `modeset=1 fbdev=1`
//! (`sys/module/nvidia_drm/parameters/{modeset,fbdev}` read `Y`), so, as on a real host, it
//! registered a framebuffer on every GPU, in bus order: fb0 on (a), fb1 on (b), fb2 on (c)
//! (`sys/class/graphics/fb<N>`, `name` `nvidia-drmdrmfb`). fbcon took the consoles over on fb0
//! and moved them to fb1 when (b), the primary display, registered
//! (`CONFIG_FRAMEBUFFER_CONSOLE_DETECT_PRIMARY`): `sys/class/vtconsole/vtcon1` is fbcon, bound,
//! over `vtcon0`, the dummy console (a UEFI boot, no VGA text mode); the foreground console is
//! `tty1` (`sys/class/tty/tty0/active`). So only (b) draws the console, and (a) and (c) have a
//! framebuffer that is not the console's. (c) sits behind an ASMedia ASM1182e switch (1b21:1182)
//! without ACS, so the switch, the GPU, its audio function and an Intel 82574L NIC share one
//! IOMMU group: passing the GPU through takes the NIC with it. All on NUMA node 0.

use super::platform::root_port;
use super::tree::{write_pci, write_root_complex, Bar, PciFn, Tree, IO, MEM32, MEM64_PREF};
use crate::{fbdev, SimError};
use crate::{VENDOR_INTEL, VENDOR_NVIDIA};

/// An RTX A4000 at `path`, in `group`, with its audio function; returns the GPU's path.
fn a4000(tree: &Tree, path: &str, group: u32, boot_vga: bool) -> Result<String, SimError> {
    let bus = path
        .rsplit('/')
        .next()
        .and_then(|bdf| bdf.get(5..7))
        .and_then(|b| u64::from_str_radix(b, 16).ok())
        .unwrap_or(0);
    let gpu = PciFn {
        path: path.to_string(),
        vendor: VENDOR_NVIDIA,
        device: 0x24b0,
        subsystem: (VENDOR_NVIDIA, 0x14ad),
        class: 0x030000,
        revision: 0xa1,
        numa_node: 0,
        driver: Some("nvidia"),
        iommu_group: Some(group),
        bars: vec![
            Bar {
                index: 0,
                start: 0xd000_0000 + (bus % 0x10) * 0x0100_0000,
                size: 16 << 20,
                flags: MEM32,
            },
            Bar {
                index: 1,
                start: 0x5000_0000_0000 + bus * 0x4_0000_0000,
                size: 256 << 20,
                flags: MEM64_PREF,
            },
            Bar {
                index: 3,
                start: 0x5000_1000_0000 + bus * 0x4_0000_0000,
                size: 32 << 20,
                flags: MEM64_PREF,
            },
            Bar {
                index: 5,
                start: 0x3000 + (bus % 0x10) * 0x100,
                size: 0x80,
                flags: IO,
            },
        ],
        secondary_bus: None,
    };
    let rel = write_pci(tree, &gpu)?;
    tree.file(
        &format!("{rel}/boot_vga"),
        if boot_vga { "1\n" } else { "0\n" },
        0o444,
    )?;
    let audio = PciFn {
        path: format!("{}.1", &path[..path.len() - 2]),
        device: 0x228b,
        class: 0x040300,
        driver: Some("snd_hda_intel"),
        bars: vec![Bar {
            index: 0,
            start: 0xd800_0000 + bus * 0x4000,
            size: 0x4000,
            flags: MEM32,
        }],
        ..gpu
    };
    write_pci(tree, &audio)?;
    Ok(rel)
}

/// The ASMedia ASM1182e switch port at `path` (no ACS).
fn switch_port(path: String, secondary: u8, group: u32) -> PciFn {
    PciFn {
        path,
        vendor: 0x1b21,
        device: 0x1182,
        subsystem: (0x1b21, 0x118f),
        class: 0x060400,
        revision: 0x00,
        numa_node: 0,
        driver: Some("pcieport"),
        iommu_group: Some(group),
        bars: vec![],
        secondary_bus: Some(secondary),
    }
}

/// Writes `passthrough`.
pub(super) fn write(tree: &Tree) -> Result<(), SimError> {
    fbdev::write_consoles(tree, "(S) dummy device")?;
    for p in ["modeset", "fbdev"] {
        tree.file(
            &format!("sys/module/nvidia_drm/parameters/{p}"),
            "Y\n",
            0o444,
        )?;
    }
    let mut gpus = Vec::new();
    // (a) and (b): a GPU behind its own root port.
    for (r, group, boot_vga) in [(0x20_u8, 76_u32, false), (0x2c, 78, true)] {
        write_root_complex(tree, 0, r)?;
        let port = format!("pci0000:{r:02x}/0000:{r:02x}:01.1");
        write_pci(tree, &root_port(&port, r + 1, group, 0))?;
        gpus.push(a4000(
            tree,
            &format!("{port}/0000:{:02x}:00.0", r + 1),
            group + 1,
            boot_vga,
        )?);
    }

    // (c): behind a switch without ACS, with a NIC in the same group.
    let (r, group) = (0x30_u8, 80_u32);
    write_root_complex(tree, 0, r)?;
    let port = format!("pci0000:{r:02x}/0000:{r:02x}:01.1");
    write_pci(tree, &root_port(&port, 0x31, group, 0))?;
    let up = format!("{port}/0000:31:00.0");
    write_pci(tree, &switch_port(up.clone(), 0x32, group + 1))?;
    let down_gpu = format!("{up}/0000:32:01.0");
    let down_nic = format!("{up}/0000:32:03.0");
    write_pci(tree, &switch_port(down_gpu.clone(), 0x33, group + 1))?;
    write_pci(tree, &switch_port(down_nic.clone(), 0x34, group + 1))?;
    gpus.push(a4000(
        tree,
        &format!("{down_gpu}/0000:33:00.0"),
        group + 1,
        false,
    )?);
    // nvidia-drm's framebuffers, in bus order (fbcon follows).
    for rel in &gpus {
        fbdev::profile_probe(tree, rel, "nvidia")?;
    }
    let nic = PciFn {
        path: format!("{down_nic}/0000:34:00.0"),
        vendor: VENDOR_INTEL,
        device: 0x10d3,
        subsystem: (VENDOR_INTEL, 0xa01f),
        class: 0x020000,
        revision: 0x00,
        numa_node: 0,
        driver: Some("e1000e"),
        iommu_group: Some(group + 1),
        bars: vec![
            Bar {
                index: 0,
                start: 0xdc00_0000,
                size: 128 << 10,
                flags: MEM32,
            },
            Bar {
                index: 2,
                start: 0x4000,
                size: 0x20,
                flags: IO,
            },
            Bar {
                index: 3,
                start: 0xdc02_0000,
                size: 16 << 10,
                flags: MEM32,
            },
        ],
        secondary_bus: None,
    };
    let rel = write_pci(tree, &nic)?;
    super::platform::netdev(tree, &rel)
}
