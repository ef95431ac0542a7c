//! `amd-mxgpu`: one AMD Instinct MI300X under GIM (hardware.md §5.8). GIM owns the PF and made
//! its VFs at module load (`vf_num=8`, the CPX/NPS4 split), so the VFs are already there and
//! `sriov_numvfs` reads 8 = `sriov_totalvfs`; GIM has no `sriov_configure`, so writes of
//! another count fail with `ENOENT`. `amdgpu` is blacklisted (not loaded): the VFs are unbound,
//! ready for `vfio-pci`.
//!
//! | BDF          | device                              | driver | group | NUMA |
//! |--------------|-------------------------------------|--------|-------|------|
//! | 0000:70:01.1 | 8086:2030 root port                 | pcieport | 66  | 0    |
//! | 0000:71:00.0 | 1002:74a1 MI300X PF (sub 1002:74a1) | gim    | 67    | 0    |
//! | 0000:71:02.0 … 0000:71:02.7 | 1002:74b5 MI300X VF  | none   | 68 … 75 | 0  |
//!
//! Assumptions [?]: class 0x038000 (display controller; some MI300X report class 0x1200,
//! processing accelerator); `sriov_offset` 16 and `sriov_stride` 1 (the VF addresses are not
//! documented); `sriov_drivers_autoprobe` 1 (the kernel's default).

use super::nvidia::write_sriov_pf;
use super::platform::root_port;
use super::tree::{write_pci, write_root_complex, Bar, PciFn, Tree, MEM32, MEM64_PREF};
use crate::kernel::Roots;
use crate::VENDOR_AMD;
use crate::{fsx, sriov, SimError};

/// VFs GIM makes (`vf_num`).
const VFS: u32 = 8;

/// Writes `amd-mxgpu`.
pub(super) fn mxgpu(tree: &Tree) -> Result<(), SimError> {
    let (r, numa, port_group) = (0x70_u8, 0, 66_u32);
    write_root_complex(tree, 0, r)?;
    let port = format!("pci0000:{r:02x}/0000:{r:02x}:01.1");
    write_pci(tree, &root_port(&port, r + 1, port_group, numa))?;
    let vfs = u64::from(VFS);
    let pf = PciFn {
        path: format!("{port}/0000:{:02x}:00.0", r + 1),
        vendor: VENDOR_AMD,
        device: 0x74a1,
        subsystem: (VENDOR_AMD, 0x74a1),
        class: 0x038000,
        revision: 0x00,
        numa_node: numa,
        driver: Some("gim"),
        iommu_group: Some(port_group + 1),
        bars: vec![
            Bar {
                index: 0,
                start: 0x4000_0000_0000,
                size: 1 << 38,
                flags: MEM64_PREF,
            },
            Bar {
                index: 2,
                start: 0x4100_0000_0000,
                size: 2 << 20,
                flags: MEM64_PREF,
            },
            Bar {
                index: 5,
                start: 0xb000_0000,
                size: 512 << 10,
                flags: MEM32,
            },
            Bar {
                index: 7,
                start: 0x4200_0000_0000,
                size: vfs << 35,
                flags: MEM64_PREF,
            },
            Bar {
                index: 9,
                start: 0x4300_0000_0000,
                size: vfs * (2 << 20),
                flags: MEM64_PREF,
            },
            Bar {
                index: 12,
                start: 0xb010_0000,
                size: vfs * (512 << 10),
                flags: MEM32,
            },
        ],
        secondary_bus: None,
    };
    let rel = write_pci(tree, &pf)?;
    write_sriov_pf(tree, &rel, VFS, 16, 1, 0x74b5, 1)?;
    tree.file(&format!("{rel}/sriov_numvfs"), &format!("{VFS}\n"), 0o644)?;
    let io = |source| SimError::Io {
        path: tree.path(&rel),
        source,
    };
    let roots = Roots::new(tree.root()).map_err(io)?;
    let pf_dir = tree.path(&rel);
    for i in 0..VFS {
        let dir = sriov::vf_dir(&pf_dir, i).map_err(io)?;
        if !fsx::exists_nofollow(&dir) {
            sriov::add_vf(&roots, &pf_dir, i, port_group + 2 + i).map_err(io)?;
        }
    }
    Ok(())
}
