//! NVIDIA vGPU capacity across the VFs of one GPU: the vendor-specific VFIO files of a VF
//! (hardware.md §2.2) and the PF-wide budget of VF mdev parents, both derived from the tree.
//!
//! A VF bound to `nvidia` on a vendor-VFIO board has `nvidia/creatable_vgpu_types` (ro),
//! `nvidia/current_vgpu_type` (rw) and `nvidia/vgpu_params` (rw, plain).
//!
//! `creatable_vgpu_types` is `ID    : vGPU Name` then one `format!("{:<5} : {}", id, name)`
//! line per type, ascending by id. A VF with a type set lists only the header. A free VF lists
//! the board's types allowed by the equal-size rule over the whole PF: with no vGPU on the PF
//! every type; otherwise only types of the framebuffer size in use, and only while the PF's
//! vGPU count is below the type's max_instance (so a full GPU lists only the header on every
//! VF). Every VF's list is recomputed after every change, like `available_instances`.
//!
//! Heterogeneous (mixed-size) mode (hardware.md §2.4), which `nvidia-smi vgpu -i <gpu> -shm 1`
//! turns on for a GPU with no vGPU (see `tool.rs`): the driver keeps the setting, not sysfs, so
//! the simulated driver keeps it in `ROOT/run/vgpud-simulator/nvidia-heterogeneous/<pf>` (gone
//! with a reboot, as the setting is; `sriov-manage` resets it too). In that mode a free VF
//! lists every type that has a free placement: the board is cut into placements as
//! [`catalog::nvidia_placement`] says, a vGPU takes the lowest free placement of its type's
//! size (or the one `vgpu-placement-id=<id>` in `vgpu_params` names: `EIO` if that one is not
//! free), and the VF's `nvidia/placement_id` reads its id (the file is absent while the VF has
//! no vGPU, where the real driver's read fails with `ENXIO` [3P]).
//!
//! `current_vgpu_type` reads `"%d\n"` (`0` when none). A write is `kstrtol(buf, 10)`
//! (`EINVAL` for anything else): `0` with no type set `EPERM`; non-zero while a type is set
//! `EPERM`; an id the VF's creatable list does not offer `EIO`; otherwise the type is set.
//! `0` with a type set clears it and empties `vgpu_params`.

use std::io;
use std::path::Path;

use nix::errno::Errno;

use super::binding::{self, hex_attr, physfn};
use super::fsx::{self, errno};
use super::journal::{Entry, Op};
use super::kernel::{self, Roots};
use super::rules::{self, Change, Vendor};
use crate::catalog::{self, NvidiaTypeInfo};

/// The header line of `creatable_vgpu_types`.
pub(crate) const HEADER: &str = "ID    : vGPU Name\n";

/// The board types of the GPU a VF belongs to, ascending by id.
fn board_types(vf: &Path) -> Vec<&'static NvidiaTypeInfo> {
    let pf = physfn(vf).unwrap_or_else(|| vf.to_path_buf());
    let device = u16::try_from(hex_attr(&pf, "device").unwrap_or(0)).unwrap_or(0);
    let sub = u16::try_from(hex_attr(&pf, "subsystem_device").unwrap_or(0)).unwrap_or(0);
    let mut types = catalog::nvidia_board(device, sub)
        .map(|(board, _)| catalog::nvidia_board_types(board))
        .unwrap_or_default();
    types.sort_by_key(|t| t.id);
    types
}

/// `current_vgpu_type` of a VF: 0 when none (or not a vendor-VFIO VF).
fn current(vf: &Path) -> i64 {
    fsx::read_opt(&vf.join("nvidia/current_vgpu_type"))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Framebuffer sizes (MiB) of the vGPUs on the PF of `vf`, one per VF with a type set.
fn pf_vgpus(pf: &Path) -> io::Result<Vec<Option<u64>>> {
    let mut out = Vec::new();
    for vf in binding::virtfns(pf)? {
        let id = current(&vf);
        if id != 0 {
            let info = u32::try_from(id).ok().and_then(catalog::nvidia_type_by_id);
            out.push(info.map(|t| t.framebuffer_mib));
        }
    }
    Ok(out)
}

/// The file that says a GPU is in heterogeneous mode (see the module doc).
pub(crate) fn mode_marker(pf: &Path) -> Option<std::path::PathBuf> {
    let sys = pf
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "sys"))?;
    Some(
        sys.parent()?
            .join("run/vgpud-simulator/nvidia-heterogeneous")
            .join(pf.file_name()?),
    )
}

/// Whether the GPU of `pf` is in heterogeneous mode.
pub(crate) fn heterogeneous(pf: &Path) -> bool {
    mode_marker(pf).is_some_and(|m| m.exists())
}

/// The board's framebuffer in GiB (its largest type's).
fn board_gib(vf: &Path) -> u64 {
    board_types(vf)
        .iter()
        .map(|t| t.framebuffer_mib / 1024)
        .max()
        .unwrap_or(0)
}

/// The placements taken on the GPU of `pf`: (placement id, type GiB) of each VF's vGPU.
fn taken(pf: &Path) -> io::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    for vf in binding::virtfns(pf)? {
        let id = current(&vf);
        if id == 0 {
            continue;
        }
        let at = fsx::read_opt(&vf.join("nvidia/placement_id"))
            .and_then(|s| s.trim().parse::<u64>().ok());
        let gib = u32::try_from(id)
            .ok()
            .and_then(catalog::nvidia_type_by_id)
            .map(|t| t.framebuffer_mib / 1024);
        if let (Some(at), Some(gib)) = (at, gib) {
            out.push((at, gib));
        }
    }
    Ok(out)
}

/// The free placement ids of a type on a GPU in heterogeneous mode, lowest first.
fn free_placements(board: u64, t: &NvidiaTypeInfo, taken: &[(u64, u64)]) -> Vec<u64> {
    catalog::nvidia_free_placements(board, t.framebuffer_mib / 1024, taken)
}

/// The types a VF offers now (see the module doc).
pub(crate) fn creatable(vf: &Path) -> io::Result<Vec<&'static NvidiaTypeInfo>> {
    if current(vf) != 0 {
        return Ok(Vec::new());
    }
    let Some(pf) = physfn(vf) else {
        return Ok(Vec::new());
    };
    if heterogeneous(&pf) {
        let board = board_gib(vf);
        let taken = taken(&pf)?;
        return Ok(board_types(vf)
            .into_iter()
            .filter(|t| !free_placements(board, t, &taken).is_empty())
            .collect());
    }
    let used = pf_vgpus(&pf)?;
    let count = u32::try_from(used.len()).unwrap_or(u32::MAX);
    Ok(board_types(vf)
        .into_iter()
        .filter(|t| {
            t.max_instances > 0
                && (used.is_empty()
                    || (used.iter().all(|u| *u == Some(t.framebuffer_mib))
                        && count < t.max_instances))
        })
        .collect())
}

/// The text of a VF's `creatable_vgpu_types`.
pub(crate) fn creatable_text(vf: &Path) -> io::Result<String> {
    let mut out = HEADER.to_string();
    for t in creatable(vf)? {
        out.push_str(&format!("{:<5} : {}\n", t.id, t.name));
    }
    Ok(out)
}

/// Recomputes what depends on the vGPUs of the GPU of `dev` (a PF or a VF): every VF's
/// `creatable_vgpu_types`, and the `available_instances` of every VF that is an mdev parent.
pub(crate) fn refresh_pf(dev: &Path) -> io::Result<()> {
    let pf = physfn(dev).unwrap_or_else(|| dev.to_path_buf());
    let mut nvidia_parents = Vec::new();
    for vf in binding::virtfns(&pf)? {
        let file = vf.join("nvidia/creatable_vgpu_types");
        if file.is_file() {
            let text = creatable_text(&vf)?;
            if fsx::read_opt(&file).as_deref() != Some(text.as_str()) {
                fsx::write_atomic(&file, &text, 0o444)?;
            }
        }
        if vf.join("mdev_supported_types").is_dir() {
            match Vendor::of(&vf)? {
                Vendor::Nvidia => nvidia_parents.push(vf),
                vendor => rules::refresh(&vf, &vendor, Change::None)?,
            }
        }
    }
    rules::refresh_nvidia_vfs(&pf, &nvidia_parents)
}

/// Removes the temporary files process `pid` left (a write cut short) wherever a refresh of the
/// GPU of `dev` writes: each VF's directory, `nvidia/` and mdev type directories.
pub(crate) fn remove_pf_temps(dev: &Path, pid: u32) -> io::Result<()> {
    let pf = physfn(dev).unwrap_or_else(|| dev.to_path_buf());
    fsx::remove_temps(&pf, pid)?;
    for vf in binding::virtfns(&pf)? {
        fsx::remove_temps(&vf, pid)?;
        fsx::remove_temps(&vf.join("nvidia"), pid)?;
        for t in rules::types(&vf)? {
            fsx::remove_temps(&t.dir, pid)?;
        }
    }
    Ok(())
}

/// The kernel's `kstrtol(s, 10)`: optional sign, decimal digits, one trailing newline.
fn kstrtol10(s: &str) -> io::Result<i64> {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(errno(Errno::EINVAL));
    }
    let v: i64 = digits.parse().map_err(|_| errno(Errno::ERANGE))?;
    Ok(if neg { -v } else { v })
}

/// A write to `<vf>/nvidia/current_vgpu_type` (see the module doc).
pub(crate) fn write_current(roots: &Roots, file: &Path, value: &str) -> io::Result<()> {
    let vf = file
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| errno(Errno::EINVAL))?;
    let value = kstrtol10(value)?;
    let now = current(vf);
    let mut entry = Entry::pci(Op::VgpuType, vec![vf.to_path_buf()]);
    entry.old = Some(now.to_string());
    entry.new = Some(value.to_string());
    if value == 0 {
        if now == 0 {
            return Err(errno(Errno::EPERM));
        }
        return kernel::journaled(roots, &entry, true, || apply(&entry, true));
    }
    if now != 0 {
        return Err(errno(Errno::EPERM));
    }
    if !creatable(vf)?.iter().any(|t| i64::from(t.id) == value) {
        return Err(errno(Errno::EIO));
    }
    entry.placement = placement_for(vf, value)?;
    kernel::journaled(roots, &entry, false, || apply(&entry, false))
}

/// Sets `current_vgpu_type` to the entry's new value (clearing `vgpu_params` with it on a
/// release) and recomputes the GPU's lists.
fn apply(entry: &Entry, release: bool) -> io::Result<()> {
    let Some(vf) = entry.devs.first() else {
        return Ok(());
    };
    let new = entry.new.as_deref().unwrap_or("0");
    let dir = vf.join("nvidia");
    if release {
        fsx::write_atomic(&dir.join("vgpu_params"), "", 0o644)?;
    }
    let placement = dir.join("placement_id");
    if new == "0" {
        fsx::remove_quiet(&placement)?;
    } else if let Some(at) = entry.placement {
        fsx::write_atomic(&placement, &format!("{at}\n"), 0o444)?;
    }
    fsx::write_atomic(&dir.join("current_vgpu_type"), &format!("{new}\n"), 0o644)?;
    refresh_pf(vf)
}

/// Where a new vGPU of type `id` goes on a GPU in heterogeneous mode: the placement
/// `vgpu-placement-id=` in the VF's `vgpu_params` names, else the lowest free one; `EIO` when
/// that placement is not free. `None` in equal-size mode.
fn placement_for(vf: &Path, id: i64) -> io::Result<Option<u64>> {
    let Some(pf) = physfn(vf).filter(|pf| heterogeneous(pf)) else {
        return Ok(None);
    };
    let board = board_gib(vf);
    let Some(t) = u32::try_from(id).ok().and_then(catalog::nvidia_type_by_id) else {
        return Err(errno(Errno::EIO));
    };
    let free = free_placements(board, t, &taken(&pf)?);
    let asked = fsx::read_opt(&vf.join("nvidia/vgpu_params")).and_then(|p| {
        p.split([',', ' ', '\n'])
            .find_map(|kv| kv.trim().strip_prefix("vgpu-placement-id="))
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    match asked {
        Some(at) if free.contains(&at) => Ok(Some(at)),
        Some(_) => Err(errno(Errno::EIO)),
        None => free
            .first()
            .copied()
            .map(Some)
            .ok_or_else(|| errno(Errno::EIO)),
    }
}

/// Recovery: a set is undone (the old value, 0, back), a release completed.
pub(crate) fn finish(_roots: &Roots, entry: &Entry) -> io::Result<()> {
    let Some(vf) = entry.devs.first() else {
        return Ok(());
    };
    remove_pf_temps(vf, entry.pid)?;
    if !vf.join("nvidia").is_dir() {
        return refresh_pf(vf);
    }
    let release = entry.new.as_deref() == Some("0");
    let mut undo = entry.clone();
    if !release {
        undo.new = entry.old.clone();
    }
    apply(&undo, release)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kstrtol_base_10() {
        assert_eq!(kstrtol10("1150\n").expect("n"), 1150);
        assert_eq!(kstrtol10("0").expect("0"), 0);
        assert_eq!(kstrtol10("-3").expect("neg"), -3);
        for bad in ["", "0x10", "abc", "1 ", " 1", "1\n\n"] {
            assert_eq!(
                kstrtol10(bad).expect_err(bad).raw_os_error(),
                Some(Errno::EINVAL as i32),
                "{bad:?}"
            );
        }
        assert_eq!(
            kstrtol10("99999999999999999999")
                .expect_err("big")
                .raw_os_error(),
            Some(Errno::ERANGE as i32)
        );
    }
}
