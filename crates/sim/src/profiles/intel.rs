//! `intel-gvtg`: an Intel UHD Graphics 630 (8086:3e92, Coffee Lake GT2, driver `i915`, VGA
//! class) at `sys/devices/pci0000:00/0000:00:02.0`, IOMMU group 1, no NUMA affinity (-1), with a
//! 256 MiB aperture (BAR 2). As i915 does, only the types whose aperture share fits at least
//! once into aperture − 128 MiB are registered: GVTg_V5_8 and GVTg_V5_4; their available
//! counts (2 and 1) come from the simulator's own formula.

use super::tree::{
    write_mdev_parent, write_pci, Bar, PciFn, Tree, TypeSpec, IO, MEM64, MEM64_PREF,
};
use crate::SimError;
use crate::VENDOR_INTEL;
use vgpud_catalog::GVTG_TYPES;

/// Aperture size of the simulated iGPU, MiB.
const APERTURE_MIB: u64 = 256;
/// i915 `HOST_LOW_GM_SIZE`, MiB.
const HOST_LOW_GM_MIB: u64 = 128;

/// Writes `intel-gvtg`.
pub(super) fn gvtg(tree: &Tree) -> Result<(), SimError> {
    let igpu = PciFn {
        path: "pci0000:00/0000:00:02.0".into(),
        vendor: VENDOR_INTEL,
        device: 0x3e92,
        subsystem: (VENDOR_INTEL, 0x2212),
        class: 0x030000,
        revision: 0x00,
        numa_node: -1,
        driver: Some("i915"),
        iommu_group: Some(1),
        bars: vec![
            Bar {
                index: 0,
                start: 0xf600_0000,
                size: 16 << 20,
                flags: MEM64,
            },
            Bar {
                index: 2,
                start: 0xe000_0000,
                size: APERTURE_MIB << 20,
                flags: MEM64_PREF,
            },
            Bar {
                index: 4,
                start: 0xf000,
                size: 0x40,
                flags: IO,
            },
        ],
        secondary_bus: None,
    };
    let rel = write_pci(tree, &igpu)?;
    // intel_gvt_init_vgpu_types: stop at the first type that does not fit once.
    let types: Vec<TypeSpec> = GVTG_TYPES
        .iter()
        .take_while(|t| (APERTURE_MIB - HOST_LOW_GM_MIB) / t.low_gm_mib > 0)
        .map(|t| TypeSpec {
            id: format!("i915-GVTg_V5_{}", t.suffix),
            name: format!("GVTg_V5_{}", t.suffix),
            description: Some(t.description()),
        })
        .collect();
    write_mdev_parent(tree, &rel, igpu.bdf(), "intel_vgpu_mdev", &types)
}

/// Writes `intel-sriov`: an Intel UHD Graphics 770 (8086:4680, Alder Lake-S GT1, driver
/// `i915` built with SR-IOV support, `i915.enable_guc=3 i915.max_vfs=7`; hardware.md §5.9) at
/// `0000:00:02.0`, IOMMU group 1, with `sriov_totalvfs` 7, `sriov_numvfs` 0, VFs at
/// `00:02.1` … `00:02.7` (offset 1, stride 1, device 0x4680) once enabled through
/// `sriov_numvfs` (i915 has `sriov_configure`). `sriov_drivers_autoprobe` is 0, as the
/// i915-sriov guides set it, so new VFs stay unbound for vfio-pci. It takes the address of
/// `intel-gvtg`'s iGPU: the two profiles do not go into one root.
pub(super) fn sriov(tree: &Tree) -> Result<(), SimError> {
    let igpu = PciFn {
        path: "pci0000:00/0000:00:02.0".into(),
        vendor: VENDOR_INTEL,
        device: 0x4680,
        subsystem: (VENDOR_INTEL, 0x2212),
        class: 0x030000,
        revision: 0x0c,
        numa_node: -1,
        driver: Some("i915"),
        iommu_group: Some(1),
        bars: vec![
            Bar {
                index: 0,
                start: 0x0060_0000_0000,
                size: 16 << 20,
                flags: MEM64,
            },
            Bar {
                index: 2,
                start: 0x0040_0000_0000,
                size: 256 << 20,
                flags: MEM64_PREF,
            },
            Bar {
                index: 4,
                start: 0xf000,
                size: 0x40,
                flags: IO,
            },
            Bar {
                index: 7,
                start: 0x0061_0000_0000,
                size: 7 * (16 << 20),
                flags: MEM64,
            },
            Bar {
                index: 9,
                start: 0x0041_0000_0000,
                size: 7 * (256 << 20),
                flags: MEM64_PREF,
            },
        ],
        secondary_bus: None,
    };
    let rel = write_pci(tree, &igpu)?;
    super::nvidia::write_sriov_pf(tree, &rel, 7, 1, 1, 0x4680, 0)?;
    tree.file_if_missing(&format!("{rel}/sriov_numvfs"), "0\n", 0o644)
}
