//! SR-IOV (drivers/pci/iov.c): `sriov_numvfs` writes, and the VFs they make and destroy.
//!
//! A PF has `sriov_totalvfs`, `sriov_numvfs` (rw), `sriov_offset`, `sriov_stride`,
//! `sriov_vf_device` and `sriov_drivers_autoprobe` (rw). VF i has routing id
//! `(bus << 8 | devfn) + offset + i * stride` of its PF, and its directory is the PF's sibling
//! (`<parent bridge>/<vf bdf>`): `vendor`, `device` (= `sriov_vf_device`), the PF's class,
//! revision, subsystem ids and `numa_node`, `resource` (its share of the PF's SR-IOV BARs),
//! `enable`, `driver_override`, `uevent`, `subsystem` → the PCI bus, `physfn` → `../<pf>`,
//! `iommu_group` → its own new group (lowest free number); the PF gets `virtfn<i>` →
//! `../<vf>`, the bus `sys/bus/pci/devices/<vf>`. While the PF's `sriov_drivers_autoprobe` is
//! 1, each new VF is probed like `drivers_probe` does.

use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::binding::{self, dec_attr, driver_of, hex_attr};
use super::fsx::{self, errno};
use super::journal::{Entry, Op};
use super::kernel::{self, kstrtoul, Roots};
use super::vgpu;

/// The address of VF `index` of the PF at `pf_bdf` (`dddd:bb:dd.f`).
pub(crate) fn vf_bdf(pf_bdf: &str, offset: u32, stride: u32, index: u32) -> Option<String> {
    let (domain, rest) = pf_bdf.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (slot, func) = rest.split_once('.')?;
    let bus = u32::from_str_radix(bus, 16).ok()?;
    let slot = u32::from_str_radix(slot, 16).ok()?;
    let func = u32::from_str_radix(func, 16).ok()?;
    let rid = (bus << 8 | slot << 3 | func) + offset + index * stride;
    if rid > 0xffff {
        return None;
    }
    Some(format!(
        "{domain}:{:02x}:{:02x}.{}",
        rid >> 8,
        (rid >> 3) & 0x1f,
        rid & 7
    ))
}

/// The directory VF `index` of `pf` has (or would have).
pub(crate) fn vf_dir(pf: &Path, index: u32) -> io::Result<PathBuf> {
    let offset = dec_attr(pf, "sriov_offset").unwrap_or(1);
    let stride = dec_attr(pf, "sriov_stride").unwrap_or(1);
    let bdf =
        vf_bdf(&binding::bdf_of(pf), offset, stride, index).ok_or_else(|| errno(Errno::ERANGE))?;
    let parent = pf.parent().ok_or_else(|| errno(Errno::EINVAL))?;
    Ok(parent.join(bdf))
}

/// The `resource` file of VF `index`: BAR k is the index-th share of the PF's SR-IOV BAR k
/// (resource lines 7 … 12), split evenly over `sriov_totalvfs`.
fn vf_resource(pf: &Path, index: u32) -> String {
    let total = u64::from(dec_attr(pf, "sriov_totalvfs").unwrap_or(1).max(1));
    let pf_res = fsx::read_opt(&pf.join("resource")).unwrap_or_default();
    let lines: Vec<&str> = pf_res.lines().collect();
    let mut out = String::new();
    for k in 0..13 {
        let (mut start, mut end, mut flags) = (0u64, 0u64, 0u64);
        if k < 6 {
            if let Some(line) = lines.get(7 + k) {
                let f: Vec<u64> = line
                    .split_whitespace()
                    .filter_map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok())
                    .collect();
                if let [s, e, fl] = f[..] {
                    if e > s {
                        let share = (e - s + 1) / total;
                        start = s + u64::from(index) * share;
                        end = start + share - 1;
                        flags = fl;
                    }
                }
            }
        }
        out.push_str(&format!("0x{start:016x} 0x{end:016x} 0x{flags:016x}\n"));
    }
    out
}

/// Makes VF `index` of `pf` in IOMMU group `group` (no driver). The VF's own links come before
/// the entries that publish it elsewhere, so [`destroy_vf`] finds everything from the VF.
pub(crate) fn add_vf(roots: &Roots, pf: &Path, index: u32, group: u32) -> io::Result<PathBuf> {
    let dir = vf_dir(pf, index)?;
    let bdf = binding::bdf_of(&dir);
    let pf_bdf = binding::bdf_of(pf);
    let h = |n: &str| hex_attr(pf, n).unwrap_or(0);
    let vendor = h("vendor");
    let device = hex_attr(pf, "sriov_vf_device").unwrap_or_else(|| h("device"));
    let (sv, sd, class) = (h("subsystem_vendor"), h("subsystem_device"), h("class"));
    let numa = fsx::read_opt(&pf.join("numa_node")).unwrap_or_else(|| "-1\n".into());
    fsx::create_dir(&dir)?;
    for (name, value) in [
        ("vendor", format!("0x{vendor:04x}\n")),
        ("device", format!("0x{device:04x}\n")),
        ("subsystem_vendor", format!("0x{sv:04x}\n")),
        ("subsystem_device", format!("0x{sd:04x}\n")),
        ("class", format!("0x{class:06x}\n")),
        ("revision", format!("0x{:02x}\n", h("revision"))),
        ("numa_node", numa),
        ("resource", vf_resource(pf, index)),
        ("enable", "0\n".to_string()),
    ] {
        fsx::write_atomic(&dir.join(name), &value, 0o444)?;
    }
    fsx::write_atomic(&dir.join("driver_override"), "(null)\n", 0o644)?;
    let modalias = format!(
        "pci:v{vendor:08X}d{device:08X}sv{sv:08X}sd{sd:08X}bc{:02X}sc{:02X}i{:02X}",
        class >> 16,
        (class >> 8) & 0xff,
        class & 0xff
    );
    fsx::write_atomic(
        &dir.join("uevent"),
        &format!(
            "PCI_CLASS={class:X}\nPCI_ID={vendor:04X}:{device:04X}\nPCI_SUBSYS_ID={sv:04X}:{sd:04X}\nPCI_SLOT_NAME={bdf}\nMODALIAS={modalias}\n"
        ),
        0o644,
    )?;
    fsx::symlink_rel(&dir.join("subsystem"), &roots.sys.join("bus/pci"))?;
    fsx::symlink_exact(&dir.join("physfn"), &Path::new("..").join(&pf_bdf))?;
    let group_dir = roots
        .sys
        .join("kernel/iommu_groups")
        .join(group.to_string());
    fsx::symlink_rel(&dir.join("iommu_group"), &group_dir)?;
    fsx::create_dir_all(&group_dir.join("devices"))?;
    fsx::write_atomic(&group_dir.join("type"), "DMA\n", 0o644)?;
    fsx::write_atomic(
        &group_dir.join("reserved_regions"),
        "0x00000000fee00000 0x00000000feefffff msi\n",
        0o444,
    )?;
    fsx::symlink_rel(&group_dir.join("devices").join(&bdf), &dir)?;
    fsx::symlink_rel(&roots.sys.join("bus/pci/devices").join(&bdf), &dir)?;
    fsx::symlink_exact(
        &pf.join(format!("virtfn{index}")),
        &Path::new("..").join(&bdf),
    )?;
    super::uevent::pci_device_added(roots, &dir);
    Ok(dir)
}

/// Destroys VF `index` of `pf`, whatever part of it exists: its driver's remove effects and
/// binding, its group (and vfio group node), its links and directory.
pub(crate) fn destroy_vf(roots: &Roots, pf: &Path, index: u32) -> io::Result<()> {
    let dir = vf_dir(pf, index)?;
    let bdf = binding::bdf_of(&dir);
    if let Some(d) = driver_of(&dir) {
        binding::detach(roots, &dir, &d)?;
    }
    fsx::remove_quiet(&pf.join(format!("virtfn{index}")))?;
    fsx::remove_quiet(&roots.sys.join("bus/pci/devices").join(&bdf))?;
    if let Some(g) = binding::group_of(&dir) {
        let group_dir = roots.sys.join("kernel/iommu_groups").join(&g);
        fsx::remove_quiet(&group_dir.join("devices").join(&bdf))?;
        if fsx::list(&group_dir.join("devices"))?.is_empty() {
            fsx::remove_dir_quiet(&group_dir)?;
            fsx::remove_quiet(&roots.dev.join(&g))?;
        }
    }
    let own = super::uevent::device_env(&dir);
    fsx::remove_dir_quiet(&dir)?;
    super::uevent::pci_device_removed(roots, &dir, own);
    Ok(())
}

/// The lowest IOMMU group number not in use.
fn free_group(roots: &Roots) -> io::Result<u32> {
    let used: std::collections::BTreeSet<u32> = fsx::list(&roots.sys.join("kernel/iommu_groups"))?
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    (0..=u32::MAX)
        .find(|n| !used.contains(n))
        .ok_or_else(|| errno(Errno::ENOSPC))
}

/// Whether a VF of `pf` holds an NVIDIA vGPU (vendor-VFIO type set, or an mdev).
fn vgpu_in_use(pf: &Path) -> io::Result<bool> {
    for vf in binding::virtfns(pf)? {
        let current = fsx::read_opt(&vf.join("nvidia/current_vgpu_type"));
        if current.is_some_and(|c| c.trim() != "0") {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `sriov_numvfs_store` (hardware.md §5.10): `kstrtou16(buf, 0)`; more than `sriov_totalvfs`
/// `ERANGE`; the current count a no-op; no driver, or a driver without `sriov_configure`,
/// `ENOENT`; N → M both non-zero `EBUSY`; 0 destroys the VFs (each unbound first). Assumed:
/// 0 while a VF holds an NVIDIA vGPU type `EBUSY` (the NVIDIA driver refuses; its errno is not
/// public).
pub(crate) fn write_numvfs(roots: &Roots, file: &Path, value: &str) -> io::Result<()> {
    let pf = file.parent().ok_or_else(|| errno(Errno::EINVAL))?;
    let n = kstrtoul(value)?;
    let n = u32::try_from(n)
        .ok()
        .filter(|n| *n <= u32::from(u16::MAX))
        .ok_or_else(|| errno(Errno::ERANGE))?;
    let total = dec_attr(pf, "sriov_totalvfs").unwrap_or(0);
    if n > total {
        return Err(errno(Errno::ERANGE));
    }
    let current = dec_attr(pf, "sriov_numvfs").unwrap_or(0);
    if n == current {
        return Ok(());
    }
    match driver_of(pf) {
        Some(d) if binding::has_sriov_configure(&d) => {}
        _ => return Err(errno(Errno::ENOENT)),
    }
    if n == 0 {
        if vgpu_in_use(pf)? {
            return Err(errno(Errno::EBUSY));
        }
        let mut entry = Entry::pci(Op::SriovDisable, vec![pf.to_path_buf()]);
        entry.count = Some(current);
        return kernel::journaled(roots, &entry, true, || disable(roots, &entry));
    }
    if current != 0 {
        return Err(errno(Errno::EBUSY));
    }
    let mut entry = Entry::pci(Op::SriovEnable, vec![pf.to_path_buf()]);
    entry.count = Some(n);
    // Autoprobe may bind VFs to any driver: count every directory a probe can make.
    binding::bind_made(roots, "nvidia", &mut entry.made);
    kernel::journaled(roots, &entry, false, || {
        let autoprobe = dec_attr(pf, "sriov_drivers_autoprobe").unwrap_or(1) != 0;
        for i in 0..n {
            let vf = add_vf(roots, pf, i, free_group(roots)?)?;
            if autoprobe {
                if let Some(drv) = binding::probe_driver(roots, &vf)? {
                    binding::attach(roots, &vf, &drv)?;
                }
            }
        }
        fsx::write_atomic(&pf.join("sriov_numvfs"), &format!("{n}\n"), 0o644)?;
        vgpu::refresh_pf(pf)
    })
}

/// Destroys the VFs of the entry's PF, last first, and sets `sriov_numvfs` to 0.
fn disable(roots: &Roots, entry: &Entry) -> io::Result<()> {
    let Some(pf) = entry.devs.first() else {
        return Ok(());
    };
    for i in (0..entry.count.unwrap_or(0)).rev() {
        destroy_vf(roots, pf, i)?;
    }
    fsx::write_atomic(&pf.join("sriov_numvfs"), "0\n", 0o644)?;
    vgpu::refresh_pf(pf)
}

/// Recovery: VFs being made are destroyed again (the write never returned), VFs being
/// destroyed are destroyed to the end.
pub(crate) fn finish(roots: &Roots, entry: &Entry) -> io::Result<()> {
    if let Some(pf) = entry.devs.first() {
        vgpu::remove_pf_temps(pf, entry.pid)?;
        let groups = roots.sys.join("kernel/iommu_groups");
        for g in fsx::list(&groups)? {
            fsx::remove_temps(&groups.join(g), entry.pid)?;
        }
    }
    disable(roots, entry)?;
    if entry.op == Op::SriovEnable {
        binding::unmake(roots, entry)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vf_addresses_follow_offset_and_stride() {
        let at = |i| vf_bdf("0000:41:00.0", 4, 1, i).expect("bdf");
        assert_eq!(at(0), "0000:41:00.4");
        assert_eq!(at(3), "0000:41:00.7");
        assert_eq!(at(4), "0000:41:01.0");
        assert_eq!(at(31), "0000:41:04.3");
        assert_eq!(
            vf_bdf("0000:00:02.0", 1, 1, 6).as_deref(),
            Some("0000:00:02.7")
        );
        assert_eq!(
            vf_bdf("0000:71:00.0", 16, 1, 7).as_deref(),
            Some("0000:71:02.7")
        );
        assert_eq!(vf_bdf("0000:ff:1f.7", 1, 1, 0), None);
    }
}
