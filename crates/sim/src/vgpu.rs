//! NVIDIA vGPU capacity across the VFs of one GPU: the vendor-specific VFIO files of a VF
//! (hardware.md §2.2) and the PF-wide budget of VF mdev parents, both derived from the tree.
//!
//! A VF bound to `nvidia` on a vendor-VFIO board has `nvidia/creatable_vgpu_types` (ro),
//! `nvidia/current_vgpu_type` (rw) and `nvidia/vgpu_params` (rw, plain).
//!
//! `creatable_vgpu_types` is `ID    : vGPU Name` then one `format!("{:<5} : {}", id, name)`
//! line per type, ascending by id. A VF with a type set lists only the header. What a free VF
//! lists depends on the GPU's MIG mode, kept with the rest of the driver's state in the
//! simulated driver (`vgpud-sim-driver`, `ROOT/run/nvidia-sim/<pf>.json`; the fake NVML library
//! reads and changes the same state):
//!
//! - MIG off (the default): the board's time-sliced types allowed by the equal-size rule over
//!   the whole PF: with no vGPU on the PF every type; otherwise only types of the framebuffer
//!   size in use, and only while the PF's vGPU count is below the type's max_instance (so a
//!   full GPU lists only the header on every VF).
//! - MIG on (`GpuState::mig.current`): only MIG-backed types ([`NvidiaTypeInfo::mig_profile`]),
//!   each only while a GPU instance of its profile is free (`GpuState::free_gpu_instances`).
//!   With no GPU instance every list is the header alone, and every type write fails `EIO`
//!   (hardware.md §2.2, §6.6 item 4). Time-sliced types are never listed.
//!
//! Every VF's list is recomputed after every change, like `available_instances`, and also when
//! a list is read through vgpud's `Host::read_attr` (`Simulator::before_read`): GPU
//! instances and modes change through NVML, another process or thread, with no sysfs write, and
//! the real driver prints the list when it is read. That recomputes the lists of the read VF's
//! GPU only, and only when the driver's state differs from the one they were computed from
//! (a fingerprint in `ROOT/run/vgpud-simulator/nvidia-lists/<pf>`, absent for the defaults), so
//! a read costs a load of the driver's state; with the tree's lock held, the simulated
//! driver's lock taken inside it (lock order: tree, then driver; the fake library takes only
//! the driver's). A GPU the simulated driver stores nothing for is in the defaults (MIG off, no
//! GPU instance, equal-size mode), and its state files are not created by reading it.
//!
//! Heterogeneous (mixed-size) mode (hardware.md §2.4), which `nvidia-smi vgpu -i <gpu> -shm 1`
//! turns on for a GPU with no vGPU and MIG off (see `tool.rs`): the driver keeps the setting,
//! not sysfs, so the simulated driver keeps it (`GpuState::heterogeneous`; gone with a reboot,
//! as the setting is; `sriov-manage` resets it too). In that mode a free VF lists every
//! time-sliced type that has a free placement: the board is cut into placements as
//! [`catalog::nvidia_placement`] says, a vGPU takes the lowest free placement of its type's
//! size (or the one `vgpu-placement-id=<id>` in `vgpu_params` names: `EIO` if that one is not
//! free), and the VF's `nvidia/placement_id` reads its id (the file is absent while the VF has
//! no vGPU, where the real driver's read fails with `ENXIO` [3P]).
//!
//! `current_vgpu_type` reads `"%d\n"` (`0` when none). A write is `kstrtol(buf, 10)`
//! (`EINVAL` for anything else): `0` with no type set `EPERM`; non-zero while a type is set
//! `EPERM`; an id the VF's creatable list does not offer `EIO`; otherwise the type is set.
//! Setting a MIG-backed type has the driver put the vGPU on the free GPU instance of its profile
//! with the lowest id (`GpuState::assign_vgpu`; none free: `EIO`), which the VF's
//! `nvidia/gpu_instance_id` then reads (absent without a MIG-backed vGPU, like `placement_id`).
//! `0` with a type set clears it, empties `vgpu_params` and lets the GPU instance go
//! (`GpuState::release_vgpu`). A set that recovery undoes (the writer was killed) releases the
//! GPU instance too, and a release it completes does as well: the driver's assignment follows
//! `current_vgpu_type` whichever step the writer died at.

use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use vgpud_sim_driver::GpuState;

use super::binding::{self, hex_attr, physfn};
use super::fsx::{self, errno};
use super::journal::{Entry, Op};
use super::kernel::{self, Roots};
use super::rules::{self, Change, Vendor};
use vgpud_catalog::{self as catalog, NvidiaTypeInfo};

/// The header line of `creatable_vgpu_types`.
pub(crate) const HEADER: &str = "ID    : vGPU Name\n";

/// The PCI device id of a PF.
fn device_id(pf: &Path) -> u16 {
    u16::try_from(hex_attr(pf, "device").unwrap_or(0)).unwrap_or(0)
}

/// The board types of GPU `pf`, ascending by id.
fn board_types(pf: &Path) -> Vec<&'static NvidiaTypeInfo> {
    let sub = u16::try_from(hex_attr(pf, "subsystem_device").unwrap_or(0)).unwrap_or(0);
    let mut types = catalog::nvidia_board(device_id(pf), sub)
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

/// The simulated host's root and the PCI address of `pf`, as the simulated driver
/// (`vgpud-sim-driver`) keys its state.
fn driver_key(pf: &Path) -> Option<(PathBuf, String)> {
    let sys = pf
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "sys"))?;
    let root = sys.parent()?.to_path_buf();
    let address = pf.file_name()?.to_str()?.to_string();
    Some((root, address))
}

/// Whether the simulated driver stores anything for `pf`. Its state files are read only then:
/// reading creates its lock file, and a GPU nobody asked the driver about (no MIG mode, no GPU
/// instance, no heterogeneous mode set) is in the defaults. (A workaround: the sim-driver has
/// no read that leaves the tree alone; its storage is documented in its crate doc.)
fn driver_has_state(root: &Path, address: &str) -> bool {
    let file = format!("{address}.json");
    root.join("run/nvidia-sim").join(&file).exists()
        || root.join("var/lib/nvidia-sim").join(&file).exists()
}

/// The simulated driver's state of GPU `pf`: the defaults when it stores none.
pub(crate) fn driver_state(pf: &Path) -> io::Result<GpuState> {
    match driver_key(pf) {
        Some((root, address)) if driver_has_state(&root, &address) => {
            vgpud_sim_driver::load(&root, &address)
        }
        _ => Ok(GpuState::default()),
    }
}

/// Changes the simulated driver's state of GPU `pf` (a locked read-modify-write). With
/// `only_if_stored`, a GPU the driver stores nothing for is left alone (`None`).
pub(crate) fn update_driver<T>(
    pf: &Path,
    only_if_stored: bool,
    f: impl FnOnce(&mut GpuState) -> T,
) -> io::Result<Option<T>> {
    let (root, address) = driver_key(pf).ok_or_else(|| errno(Errno::EINVAL))?;
    if only_if_stored && !driver_has_state(&root, &address) {
        return Ok(None);
    }
    vgpud_sim_driver::update(&root, &address, f).map(Some)
}

/// Releases the GPU instance the driver has `vf`'s MIG-backed vGPU on, if it has one.
fn release_gpu_instance(pf: &Path, vf: &Path) -> io::Result<()> {
    let Some(name) = vf.file_name().and_then(|n| n.to_str()) else {
        return Ok(());
    };
    if !driver_state(pf)?.vgpus.contains_key(name) {
        return Ok(());
    }
    update_driver(pf, true, |s| s.release_vgpu(name)).map(|_| ())
}

/// The GI profile id (`nvidia-smi mig -cgi <id>`) that backs MIG-backed type `t` on GPU
/// `device`.
fn gi_profile_id(device: u16, t: &NvidiaTypeInfo) -> Option<u32> {
    let name = t.mig_profile?;
    vgpud_sim_driver::mig_profile_by_name(device, name).map(|p| p.id)
}

/// What the lists of one GPU's VFs are computed from, read once per GPU.
struct PfView {
    device: u16,
    types: Vec<&'static NvidiaTypeInfo>,
    driver: GpuState,
    /// One per VF with a type set.
    vgpus: Vec<VfVgpu>,
}

/// A vGPU on one VF of the GPU.
struct VfVgpu {
    /// Its framebuffer (MiB), if the type is known.
    fb: Option<u64>,
    /// Its placement (placement id, type GiB), if it has one.
    placed: Option<(u64, u64)>,
}

impl PfView {
    fn read(pf: &Path) -> io::Result<PfView> {
        let mut vgpus = Vec::new();
        for vf in binding::virtfns(pf)? {
            let id = current(&vf);
            if id == 0 {
                continue;
            }
            let info = u32::try_from(id).ok().and_then(catalog::nvidia_type_by_id);
            let fb = info.map(|t| t.framebuffer_mib);
            let at = fsx::read_opt(&vf.join("nvidia/placement_id"))
                .and_then(|s| s.trim().parse::<u64>().ok());
            let placed = match (at, fb) {
                (Some(at), Some(fb)) => Some((at, fb / 1024)),
                _ => None,
            };
            vgpus.push(VfVgpu { fb, placed });
        }
        Ok(PfView {
            device: device_id(pf),
            types: board_types(pf),
            driver: driver_state(pf)?,
            vgpus,
        })
    }

    /// MIG mode is in effect on the GPU.
    fn mig(&self) -> bool {
        self.driver.mig.current
    }

    /// Heterogeneous mode (never with MIG on: MIG-backed vGPUs are not time-sliced).
    fn heterogeneous(&self) -> bool {
        self.driver.heterogeneous && !self.mig()
    }

    /// The board's framebuffer in GiB (its largest type's).
    fn board_gib(&self) -> u64 {
        self.types
            .iter()
            .map(|t| t.framebuffer_mib / 1024)
            .max()
            .unwrap_or(0)
    }

    fn taken(&self) -> Vec<(u64, u64)> {
        self.vgpus.iter().filter_map(|v| v.placed).collect()
    }

    /// The free placement ids of a type in heterogeneous mode, lowest first.
    fn free_placements(&self, t: &NvidiaTypeInfo) -> Vec<u64> {
        catalog::nvidia_free_placements(self.board_gib(), t.framebuffer_mib / 1024, &self.taken())
    }

    /// Whether a MIG-backed type has a free GPU instance of its profile.
    fn has_free_gi(&self, t: &NvidiaTypeInfo) -> bool {
        gi_profile_id(self.device, t).is_some_and(|p| !self.driver.free_gpu_instances(p).is_empty())
    }

    /// The types a free VF of the GPU offers now (see the module doc).
    fn creatable(&self) -> Vec<&'static NvidiaTypeInfo> {
        if self.mig() {
            return self
                .types
                .iter()
                .copied()
                .filter(|t| t.is_mig_backed() && self.has_free_gi(t))
                .collect();
        }
        let time_sliced = self.types.iter().copied().filter(|t| !t.is_mig_backed());
        if self.heterogeneous() {
            return time_sliced
                .filter(|t| !self.free_placements(t).is_empty())
                .collect();
        }
        let count = u32::try_from(self.vgpus.len()).unwrap_or(u32::MAX);
        time_sliced
            .filter(|t| {
                t.max_instances > 0
                    && (self.vgpus.is_empty()
                        || (self.vgpus.iter().all(|v| v.fb == Some(t.framebuffer_mib))
                            && count < t.max_instances))
            })
            .collect()
    }

    /// The text of `vf`'s `creatable_vgpu_types`.
    fn text(&self, vf: &Path) -> String {
        let mut out = HEADER.to_string();
        if current(vf) == 0 {
            for t in self.creatable() {
                out.push_str(&format!("{:<5} : {}\n", t.id, t.name));
            }
        }
        out
    }
}

/// The types a VF offers now (see the module doc).
pub(crate) fn creatable(vf: &Path) -> io::Result<Vec<&'static NvidiaTypeInfo>> {
    if current(vf) != 0 {
        return Ok(Vec::new());
    }
    let Some(pf) = physfn(vf) else {
        return Ok(Vec::new());
    };
    Ok(PfView::read(&pf)?.creatable())
}

/// The text of a VF's `creatable_vgpu_types`.
pub(crate) fn creatable_text(vf: &Path) -> io::Result<String> {
    let Some(pf) = physfn(vf) else {
        return Ok(HEADER.to_string());
    };
    Ok(PfView::read(&pf)?.text(vf))
}

/// Rewrites the `creatable_vgpu_types` of every VF of GPU `pf` that differs from what it
/// should list now (the view read once), then records which driver state they follow.
fn refresh_lists(pf: &Path, vfs: &[PathBuf]) -> io::Result<()> {
    let mut view = None;
    for vf in vfs {
        let file = vf.join("nvidia/creatable_vgpu_types");
        if !file.is_file() {
            continue;
        }
        let view = match &view {
            Some(v) => v,
            None => view.insert(PfView::read(pf)?),
        };
        let text = view.text(vf);
        if fsx::read_opt(&file).as_deref() != Some(text.as_str()) {
            fsx::write_atomic(&file, &text, 0o444)?;
        }
    }
    match view {
        Some(v) => record_fingerprint(pf, &v.driver),
        None => Ok(()),
    }
}

/// What the lists take from the simulated driver's state, hashed; `None` for the defaults
/// (MIG off, no GPU instance or MIG-backed vGPU, equal-size mode).
fn driver_fingerprint(s: &GpuState) -> Option<String> {
    use std::hash::{Hash, Hasher};
    if !s.mig.current && s.gpu_instances.is_empty() && s.vgpus.is_empty() && !s.heterogeneous {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (s.mig.current, s.heterogeneous, &s.vgpus).hash(&mut h);
    for gi in &s.gpu_instances {
        (gi.id, gi.profile_id, gi.start, gi.size).hash(&mut h);
    }
    Some(format!("{:016x}\n", h.finish()))
}

/// `ROOT/run/vgpud-simulator/nvidia-lists/<pf>`: the fingerprint of the driver state the VF
/// lists of GPU `pf` were last computed from; absent for the defaults.
fn fingerprint_file(pf: &Path) -> Option<PathBuf> {
    let (root, address) = driver_key(pf)?;
    Some(root.join("run/vgpud-simulator/nvidia-lists").join(address))
}

/// Records that the lists of GPU `pf` follow driver state `s` (written after the lists, so a
/// writer killed in between leaves an old fingerprint, and the next read computes again).
fn record_fingerprint(pf: &Path, s: &GpuState) -> io::Result<()> {
    let Some(file) = fingerprint_file(pf) else {
        return Ok(());
    };
    match driver_fingerprint(s) {
        None if fsx::exists_nofollow(&file) => fsx::remove_quiet(&file),
        None => Ok(()),
        Some(f) if fsx::read_opt(&file).as_deref() == Some(f.as_str()) => Ok(()),
        Some(f) => {
            if let Some(dir) = file.parent() {
                fsx::create_dir_all(dir)?;
            }
            fsx::write_atomic(&file, &f, 0o644)
        }
    }
}

/// Recomputes what depends on the vGPUs of the GPU of `dev` (a PF or a VF): every VF's
/// `creatable_vgpu_types`, and the `available_instances` of every VF that is an mdev parent.
pub(crate) fn refresh_pf(dev: &Path) -> io::Result<()> {
    let pf = physfn(dev).unwrap_or_else(|| dev.to_path_buf());
    let vfs = binding::virtfns(&pf)?;
    refresh_lists(&pf, &vfs)?;
    let mut nvidia_parents = Vec::new();
    for vf in vfs {
        if vf.join("mdev_supported_types").is_dir() {
            match Vendor::of(&vf)? {
                Vendor::Nvidia => nvidia_parents.push(vf),
                vendor => rules::refresh(&vf, &vendor, Change::None)?,
            }
        }
    }
    rules::refresh_nvidia_vfs(&pf, &nvidia_parents)
}

/// What a read of `<vf>/nvidia/creatable_vgpu_types` computes first (the real driver prints
/// the list when it is read): the lists of every VF of the VF's GPU, as the simulated driver's
/// state is now. GPU instances, the MIG mode and heterogeneous mode change through NVML (the
/// fake library) without any sysfs write; every sysfs change recomputes the lists itself. So
/// the lists are computed again only when the driver's state differs from the one they were
/// last computed from (its fingerprint, kept in `run/vgpud-simulator/nvidia-lists/<pf>`): a
/// read costs the driver state's load, not the GPU's VFs. Called with the tree's lock held.
pub(crate) fn refresh_on_read(file: &Path) -> io::Result<()> {
    let Some(vf) = file.parent().and_then(Path::parent) else {
        return Ok(());
    };
    let Some(pf) = physfn(vf) else {
        return Ok(());
    };
    let now = driver_fingerprint(&driver_state(&pf)?);
    let recorded = fingerprint_file(&pf).and_then(|f| fsx::read_opt(&f));
    if now == recorded {
        return Ok(());
    }
    refresh_lists(&pf, &binding::virtfns(&pf)?)
}

/// Removes the temporary files process `pid` left (a write cut short) wherever a refresh of the
/// GPU of `dev` writes: each VF's directory, `nvidia/` and mdev type directories.
pub(crate) fn remove_pf_temps(dev: &Path, pid: u32) -> io::Result<()> {
    let pf = physfn(dev).unwrap_or_else(|| dev.to_path_buf());
    fsx::remove_temps(&pf, pid)?;
    if let Some(dir) = fingerprint_file(&pf).as_deref().and_then(Path::parent) {
        if dir.is_dir() {
            fsx::remove_temps(dir, pid)?;
        }
    }
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
        let release = || {
            kernel::journaled(roots, &entry, true, || {
                if let Some(pf) = physfn(vf) {
                    release_gpu_instance(&pf, vf)?;
                }
                apply(&entry, true)
            })
        };
        if let Some(e) = kernel::injected_failure(roots, kernel::FAIL_VF_RELEASE_FILE)? {
            // EPERM means "no vGPU on this VF": another release came first.
            if e.raw_os_error() == Some(Errno::EPERM as i32) {
                release()?;
            }
            return Err(e);
        }
        return release();
    }
    if now != 0 {
        return Err(errno(Errno::EPERM));
    }
    if let Some(e) = kernel::injected_failure(roots, kernel::FAIL_VF_TYPE_FILE)? {
        return Err(e);
    }
    let Some(t) = creatable(vf)?
        .into_iter()
        .find(|t| i64::from(t.id) == value)
    else {
        return Err(errno(Errno::EIO));
    };
    if t.is_mig_backed() {
        let pf = physfn(vf).ok_or_else(|| errno(Errno::EIO))?;
        return kernel::journaled(roots, &entry, false, || {
            assign_gpu_instance(&pf, vf, t)?;
            apply(&entry, false)
        });
    }
    entry.placement = placement_for(vf, value)?;
    kernel::journaled(roots, &entry, false, || apply(&entry, false))
}

/// The driver puts a MIG-backed vGPU of `t` on VF `vf`: the free GPU instance of the type's
/// profile with the lowest id (`EIO` when there is none), which `nvidia/gpu_instance_id` then
/// reads. An assignment the driver still has for a VF with no type set (one nobody released)
/// is dropped first.
fn assign_gpu_instance(pf: &Path, vf: &Path, t: &NvidiaTypeInfo) -> io::Result<()> {
    let name = vf
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| errno(Errno::EINVAL))?;
    let profile = gi_profile_id(device_id(pf), t).ok_or_else(|| errno(Errno::EIO))?;
    let gi = update_driver(pf, false, |s| {
        s.release_vgpu(name);
        s.assign_vgpu(name, profile)
    })?
    .ok_or_else(|| errno(Errno::EIO))?
    .map_err(|_| errno(Errno::EIO))?;
    fsx::write_atomic(
        &vf.join("nvidia/gpu_instance_id"),
        &format!("{gi}\n"),
        0o444,
    )
}

/// Sets `current_vgpu_type` to the entry's new value (clearing `vgpu_params`, `placement_id`
/// and `gpu_instance_id` with it on a release) and recomputes the GPU's lists.
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
        let gi = dir.join("gpu_instance_id");
        if fsx::exists_nofollow(&gi) {
            fsx::remove_quiet(&gi)?;
        }
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
    let Some(pf) = physfn(vf) else {
        return Ok(None);
    };
    let view = PfView::read(&pf)?;
    if !view.heterogeneous() {
        return Ok(None);
    }
    let Some(t) = u32::try_from(id).ok().and_then(catalog::nvidia_type_by_id) else {
        return Err(errno(Errno::EIO));
    };
    let free = view.free_placements(t);
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

/// Recovery: a set is undone (the old value, 0, back), a release completed; either way the
/// driver lets go of the GPU instance of the VF's MIG-backed vGPU, if it had taken one.
pub(crate) fn finish(_roots: &Roots, entry: &Entry) -> io::Result<()> {
    let Some(vf) = entry.devs.first() else {
        return Ok(());
    };
    remove_pf_temps(vf, entry.pid)?;
    if let Some(pf) = physfn(vf) {
        release_gpu_instance(&pf, vf)?;
    }
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
