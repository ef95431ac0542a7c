//! NVIDIA legacy-mdev hosts (Turing: the mdev parent is the physical function).
//!
//! `nvidia-turing`: two Quadro RTX 6000 (10de:1e30, subsystem 10de:12ba, VGA class), each with
//! its HD-audio function (10de:10f7, `snd_hda_intel`) in the same IOMMU group:
//!
//! | path below sys/devices                        | NUMA | group |
//! |-----------------------------------------------|------|-------|
//! | pci0000:3a/0000:3a:00.0 (root port)           | 0    | 10    |
//! | pci0000:3a/0000:3a:00.0/0000:3b:00.0 (GPU)    | 0    | 11    |
//! | pci0000:3a/0000:3a:00.0/0000:3b:00.1 (audio)  | 0    | 11    |
//! | pci0000:d7/0000:d7:00.0 (root port)           | 1    | 12    |
//! | pci0000:d7/0000:d7:00.0/0000:d8:00.0 (GPU)    | 1    | 13    |
//! | pci0000:d7/0000:d7:00.0/0000:d8:00.1 (audio)  | 1    | 13    |
//!
//! Each GPU offers the 23 RTX6000 types of the catalog (`nvidia-256` … `nvidia-444`).
//!
//! `large`: sixteen Quadro RTX 8000 (48 GB, Turing; 10de:1e30, subsystem 10de:129e, VGA class,
//! driver `nvidia`) behind four PLX PEX 8747 switches (10b5:8747). Complex k (root bus R = 0x17,
//! 0x5d on NUMA 0; 0x85, 0xae on NUMA 1) is `pciDDDD:R/R:00.0` (root port) → `R+1:00.0` (switch
//! upstream port) → `R+2:08.0 … R+2:0b.0` (downstream ports) → GPUs `R+3:00.0 … R+6:00.0`; its
//! IOMMU groups are 20+10k (root port), 21+10k (upstream), 22+10k … 25+10k (downstream),
//! 26+10k … 29+10k (GPUs). Each GPU offers the 29 RTX8000 types of the catalog (`nvidia-264` …
//! `nvidia-456`), up to 32 RTX8000-1Q each: 512 devices on the host. The boards' audio and USB
//! functions and I/O BARs (often unassigned behind switches) are left out.
//!
//! SR-IOV hosts (hardware.md §2, §5.2, §5.3), VFs not enabled yet (`sriov_numvfs` 0; vgpud
//! enables them with `sriov-manage -e`, which these profiles install as a placeholder
//! `usr/lib/nvidia/sriov-manage` that the simulator carries out itself):
//!
//! `nvidia-l40s`: two L40S (10de:26b9, subsystem 10de:1851 [?], 3D controller 0x030200,
//! driver `nvidia`, vendor-VFIO scheme), `sriov_totalvfs` 32, offset 4, stride 1, VF device
//! 0x26b9, `sriov_drivers_autoprobe` 1 (the kernel's default):
//!
//! | path below sys/devices                        | NUMA | group |
//! |-----------------------------------------------|------|-------|
//! | pci0000:40/0000:40:01.1 (root port)           | 0    | 60    |
//! | pci0000:40/0000:40:01.1/0000:41:00.0 (GPU)    | 0    | 61    |
//! | pci0000:c0/0000:c0:01.1 (root port)           | 1    | 62    |
//! | pci0000:c0/0000:c0:01.1/0000:c1:00.0 (GPU)    | 1    | 63    |
//!
//! VFs appear at 41:00.4 … 41:04.3 and c1:00.4 … c1:04.3, each in a new IOMMU group.
//!
//! `nvidia-a40`: one A40 (10de:2235, subsystem 10de:145a, 0x030200, driver `nvidia`,
//! mdev-on-VF scheme), 32 VFs (offset 4, stride 1, VF device 0x2235), behind root port
//! `pci0000:e7/0000:e7:01.0` (group 64): the GPU is `0000:e8:00.0`, group 65, NUMA 1.
//!
//! Hopper hosts, written as `nvidia-l40s` is (3D controller, driver `nvidia`, vendor-VFIO
//! scheme, `sriov_totalvfs` 32, offset 4, stride 1, VF device = the PF's, autoprobe 1, VFs off).
//! 32 VFs is assumed [I] (hardware.md gives no Hopper `sriov_totalvfs`): it is the most
//! time-sliced vGPUs the catalog gives either board (H200X-4C 32), and the A40's and L40S's
//! count. MIG mode is off and the GPUs hold no GPU instances: the simulated driver's state
//! (`vgpud-sim-driver`) starts empty, and `nvidia-smi -mig 1` (the fake NVML library) turns it
//! on.
//!
//! `nvidia-h200`: two H200 SXM 141GB (10de:2335 [I], subsystem 10de:18be [?]):
//!
//! | path below sys/devices                        | NUMA | group |
//! |-----------------------------------------------|------|-------|
//! | pci0000:48/0000:48:01.1 (root port)           | 0    | 84    |
//! | pci0000:48/0000:48:01.1/0000:49:00.0 (GPU)    | 0    | 85    |
//! | pci0000:c8/0000:c8:01.1 (root port)           | 1    | 86    |
//! | pci0000:c8/0000:c8:01.1/0000:c9:00.0 (GPU)    | 1    | 87    |
//!
//! `nvidia-h100`: one H100 PCIe 80GB (10de:2331, subsystem 10de:1626 [?]) behind root port
//! `pci0000:50/0000:50:01.1` (group 88): the GPU is `0000:51:00.0`, group 89, NUMA 0.

use super::platform::root_port;
use super::tree::{
    write_mdev_parent, write_pci, write_root_complex, Bar, PciFn, Tree, TypeSpec, IO, MEM32,
    MEM64_PREF,
};
use crate::SimError;
use crate::VENDOR_NVIDIA;
use vgpud_catalog as catalog;

/// The NVIDIA mdev driver (`sys/bus/mdev/drivers/nvidia-vgpu-vfio`).
const MDEV_DRIVER: &str = "nvidia-vgpu-vfio";

/// The mdev types of a board from the catalog: `nvidia-<id>` with name and description. Only
/// time-sliced types: the simulator keeps MIG state for vendor-VFIO boards only, so an mdev
/// parent (an A100D VF) offers what it offers with MIG off.
pub(crate) fn board_types(board: &str) -> Vec<TypeSpec> {
    catalog::nvidia_board_types(board)
        .into_iter()
        .filter(|t| !t.is_mig_backed())
        .map(|t| TypeSpec {
            id: format!("nvidia-{}", t.id),
            name: t.name.to_string(),
            description: Some(t.description()),
        })
        .collect()
}

/// BARs of a Turing GPU on bus `bus`: 16 MiB registers, 256 MiB BAR1, 32 MiB BAR3, and with
/// `io` an I/O BAR.
fn turing_bars(bus: u8, io: bool) -> Vec<Bar> {
    let b = u64::from(bus);
    let mut bars = vec![
        Bar {
            index: 0,
            start: 0x9000_0000 + (b % 0x60) * 0x0100_0000,
            size: 16 << 20,
            flags: MEM32,
        },
        Bar {
            index: 1,
            start: 0x3c00_0000_0000 + b * 0x1_0000_0000,
            size: 256 << 20,
            flags: MEM64_PREF,
        },
        Bar {
            index: 3,
            start: 0x3c00_1000_0000 + b * 0x1_0000_0000,
            size: 32 << 20,
            flags: MEM64_PREF,
        },
    ];
    if io {
        bars.push(Bar {
            index: 5,
            start: 0x1000 * (b % 0x10 + 1),
            size: 0x80,
            flags: IO,
        });
    }
    bars
}

/// Writes `nvidia-turing`.
pub(super) fn turing(tree: &Tree) -> Result<(), SimError> {
    let types = board_types("RTX6000");
    for (root_bus, numa, group) in [(0x3a_u8, 0, 10_u32), (0xd7, 1, 12)] {
        let gpu_bus = root_bus + 1;
        write_root_complex(tree, 0, root_bus)?;
        let port_path = format!("pci0000:{root_bus:02x}/0000:{root_bus:02x}:00.0");
        write_pci(tree, &root_port(&port_path, gpu_bus, group, numa))?;
        let gpu = PciFn {
            path: format!("{port_path}/0000:{gpu_bus:02x}:00.0"),
            vendor: VENDOR_NVIDIA,
            device: 0x1e30,
            subsystem: (VENDOR_NVIDIA, 0x12ba),
            class: 0x030000,
            revision: 0xa1,
            numa_node: numa,
            driver: Some("nvidia"),
            iommu_group: Some(group + 1),
            bars: turing_bars(gpu_bus, true),
            secondary_bus: None,
        };
        let rel = write_pci(tree, &gpu)?;
        let audio = PciFn {
            path: format!("{port_path}/0000:{gpu_bus:02x}:00.1"),
            device: 0x10f7,
            class: 0x040300,
            driver: Some("snd_hda_intel"),
            bars: vec![Bar {
                index: 0,
                start: 0x8000_0000 + u64::from(gpu_bus) * 0x4000,
                size: 0x4000,
                flags: MEM32,
            }],
            ..gpu.clone()
        };
        write_pci(tree, &audio)?;
        write_mdev_parent(tree, &rel, gpu.bdf(), MDEV_DRIVER, &types)?;
    }
    Ok(())
}

/// The PLX PEX 8747 switch port at `path` bridging to `secondary`.
fn switch_port(path: String, secondary: u8, group: u32, numa_node: i32) -> PciFn {
    PciFn {
        path,
        vendor: 0x10b5,
        device: 0x8747,
        subsystem: (0x10b5, 0x8747),
        class: 0x060400,
        revision: 0xca,
        numa_node,
        driver: Some("pcieport"),
        iommu_group: Some(group),
        bars: vec![],
        secondary_bus: Some(secondary),
    }
}

/// Writes `large`.
pub(super) fn large(tree: &Tree) -> Result<(), SimError> {
    let types = board_types("RTX8000");
    let complexes = [(0x17_u8, 0), (0x5d, 0), (0x85, 1), (0xae, 1)];
    for (k, (r, numa)) in complexes.into_iter().enumerate() {
        let g = 20 + 10 * u32::try_from(k).unwrap_or(0);
        write_root_complex(tree, 0, r)?;
        let port = format!("pci0000:{r:02x}/0000:{r:02x}:00.0");
        write_pci(tree, &root_port(&port, r + 1, g, numa))?;
        let up = format!("{port}/0000:{:02x}:00.0", r + 1);
        write_pci(tree, &switch_port(up.clone(), r + 2, g + 1, numa))?;
        for i in 0..4u8 {
            let bus = r + 3 + i;
            let down = format!("{up}/0000:{:02x}:{:02x}.0", r + 2, 8 + i);
            write_pci(
                tree,
                &switch_port(down.clone(), bus, g + 2 + u32::from(i), numa),
            )?;
            let gpu = PciFn {
                path: format!("{down}/0000:{bus:02x}:00.0"),
                vendor: VENDOR_NVIDIA,
                device: 0x1e30,
                subsystem: (VENDOR_NVIDIA, 0x129e),
                class: 0x030000,
                revision: 0xa1,
                numa_node: numa,
                driver: Some("nvidia"),
                iommu_group: Some(g + 6 + u32::from(i)),
                bars: turing_bars(bus, false),
                secondary_bus: None,
            };
            let rel = write_pci(tree, &gpu)?;
            write_mdev_parent(tree, &rel, gpu.bdf(), MDEV_DRIVER, &types)?;
        }
    }
    Ok(())
}

/// The placeholder a profile with NVIDIA SR-IOV GPUs installs as
/// `usr/lib/nvidia/sriov-manage`: vgpud's simulator carries the tool out itself.
const SRIOV_MANAGE_STANDIN: &str = "#!/bin/sh
# vgpud simulated host: a stand-in for NVIDIA's sriov-manage. vgpud --simulate carries out
# what the real tool does itself (crates/sim/src/tool.rs); running this file does nothing.
echo \"sriov-manage: vgpud's simulated stand-in; run through vgpud --simulate\" >&2
exit 1
";

/// The stand-in for `nvidia-smi` (its `vgpu -i <gpu> -shm <0|1>` is carried out by the
/// simulator).
const NVIDIA_SMI_STANDIN: &str = "#!/bin/sh
# vgpud simulated host: a stand-in for nvidia-smi. vgpud --simulate carries out
# `nvidia-smi vgpu -i <gpu> -shm <0|1>` itself (crates/sim/src/tool.rs); running this file does nothing.
echo \"nvidia-smi: vgpud's simulated stand-in; run through vgpud --simulate\" >&2
exit 1
";

/// An NVIDIA SR-IOV GPU behind its own root port.
struct SriovGpu {
    root_bus: u8,
    numa: i32,
    port_group: u32,
    device: u16,
    subsystem: u16,
    /// log2 of BAR1's size.
    bar1_shift: u32,
}

/// BARs of an SR-IOV GPU on bus `bus`: 16 MiB registers, BAR1, 32 MiB BAR3; SR-IOV BARs
/// (resource lines 7, 8, 10) sized for `vfs` VFs of 16 MiB, 1 GiB and 32 MiB.
fn sriov_bars(bus: u8, bar1_shift: u32, vfs: u64) -> Vec<Bar> {
    let b = u64::from(bus);
    let base = 0x2000_0000_0000 + b * 0x40_0000_0000;
    vec![
        Bar {
            index: 0,
            start: 0xa000_0000 + (b % 0x40) * 0x0100_0000,
            size: 16 << 20,
            flags: MEM32,
        },
        Bar {
            index: 1,
            start: base,
            size: 1 << bar1_shift,
            flags: MEM64_PREF,
        },
        Bar {
            index: 3,
            start: base + (1 << bar1_shift),
            size: 32 << 20,
            flags: MEM64_PREF,
        },
        Bar {
            index: 7,
            start: 0xc000_0000 + (b % 0x08) * 0x2000_0000,
            size: vfs * (16 << 20),
            flags: MEM32,
        },
        Bar {
            index: 8,
            start: base + 0x20_0000_0000,
            size: vfs << 30,
            flags: MEM64_PREF,
        },
        Bar {
            index: 10,
            start: base + 0x30_0000_0000,
            size: vfs * (32 << 20),
            flags: MEM64_PREF,
        },
    ]
}

/// Writes an NVIDIA SR-IOV PF (VFs disabled) behind its own root port; returns its path.
fn sriov_gpu(tree: &Tree, g: &SriovGpu) -> Result<String, SimError> {
    let r = g.root_bus;
    let gpu_bus = r + 1;
    write_root_complex(tree, 0, r)?;
    let port_path = format!("pci0000:{r:02x}/0000:{r:02x}:01.1");
    write_pci(tree, &root_port(&port_path, gpu_bus, g.port_group, g.numa))?;
    let gpu = PciFn {
        path: format!("{port_path}/0000:{gpu_bus:02x}:00.0"),
        vendor: VENDOR_NVIDIA,
        device: g.device,
        subsystem: (VENDOR_NVIDIA, g.subsystem),
        class: 0x030200,
        revision: 0xa1,
        numa_node: g.numa,
        driver: Some("nvidia"),
        iommu_group: Some(g.port_group + 1),
        bars: sriov_bars(gpu_bus, g.bar1_shift, 32),
        secondary_bus: None,
    };
    let rel = write_pci(tree, &gpu)?;
    write_sriov_pf(tree, &rel, 32, 4, 1, g.device, 1)?;
    tree.file_if_missing(&format!("{rel}/sriov_numvfs"), "0\n", 0o644)?;
    Ok(rel)
}

/// The SR-IOV attributes of a PF (`sriov_numvfs` is the caller's: it is state).
pub(super) fn write_sriov_pf(
    tree: &Tree,
    rel: &str,
    total: u32,
    offset: u32,
    stride: u32,
    vf_device: u16,
    autoprobe: u32,
) -> Result<(), SimError> {
    for (name, value) in [
        ("sriov_totalvfs", format!("{total}\n")),
        ("sriov_offset", format!("{offset}\n")),
        ("sriov_stride", format!("{stride}\n")),
        ("sriov_vf_device", format!("{vf_device:x}\n")),
    ] {
        tree.file(&format!("{rel}/{name}"), &value, 0o444)?;
    }
    tree.file_if_missing(
        &format!("{rel}/sriov_drivers_autoprobe"),
        &format!("{autoprobe}\n"),
        0o644,
    )
}

fn sriov_manage_standin(tree: &Tree) -> Result<(), SimError> {
    tree.file("usr/lib/nvidia/sriov-manage", SRIOV_MANAGE_STANDIN, 0o755)?;
    tree.file("usr/bin/nvidia-smi", NVIDIA_SMI_STANDIN, 0o755)
}

/// Writes `nvidia-l40s`.
pub(super) fn l40s(tree: &Tree) -> Result<(), SimError> {
    for (root_bus, numa, port_group) in [(0x40_u8, 0, 60_u32), (0xc0, 1, 62)] {
        sriov_gpu(
            tree,
            &SriovGpu {
                root_bus,
                numa,
                port_group,
                device: 0x26b9,
                subsystem: 0x1851,
                bar1_shift: 36,
            },
        )?;
    }
    sriov_manage_standin(tree)
}

/// Writes `nvidia-a40`.
pub(super) fn a40(tree: &Tree) -> Result<(), SimError> {
    sriov_gpu(
        tree,
        &SriovGpu {
            root_bus: 0xe7,
            numa: 1,
            port_group: 64,
            device: 0x2235,
            subsystem: 0x145a,
            bar1_shift: 36,
        },
    )?;
    sriov_manage_standin(tree)
}

/// Writes `nvidia-h200`.
pub(super) fn h200(tree: &Tree) -> Result<(), SimError> {
    for (root_bus, numa, port_group) in [(0x48_u8, 0, 84_u32), (0xc8, 1, 86)] {
        sriov_gpu(
            tree,
            &SriovGpu {
                root_bus,
                numa,
                port_group,
                device: 0x2335,
                subsystem: 0x18be,
                bar1_shift: 36,
            },
        )?;
    }
    sriov_manage_standin(tree)
}

/// Writes `nvidia-a100`: an A100 PCIe 80GB (PCI 0x20b5, subsystem 0x1533 assumed), whose MIG
/// mode change waits for a GPU reset as Ampere's does (the simulated driver's rule).
pub(super) fn a100(tree: &Tree) -> Result<(), SimError> {
    sriov_gpu(
        tree,
        &SriovGpu {
            root_bus: 0x58,
            numa: 0,
            port_group: 90,
            device: 0x20b5,
            subsystem: 0x1533,
            bar1_shift: 37,
        },
    )?;
    sriov_manage_standin(tree)
}

/// Writes `nvidia-h100`.
pub(super) fn h100(tree: &Tree) -> Result<(), SimError> {
    sriov_gpu(
        tree,
        &SriovGpu {
            root_bus: 0x50,
            numa: 0,
            port_group: 88,
            device: 0x2331,
            subsystem: 0x1626,
            bar1_shift: 36,
        },
    )?;
    sriov_manage_standin(tree)
}
