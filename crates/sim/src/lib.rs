//! The simulated host: the kernel's and drivers' side effects of sysfs writes, applied by vgpud
//! itself on a tree laid out like real sysfs (`vgpud --simulate`), and the profiles that write
//! such trees (`vgpud sim-host`).
//!
//! A crate of its own, a test double that knows nothing of the daemon: vgpud reaches it
//! through the seam its `Host` defines (the trait `SimulatedKernel`, whose calls are
//! [`Simulator`]'s and [`TreeWrites`]'), and it has its own root-path helper ([`SimHost`]),
//! its own UUID parsing (the kernel's `guid_parse`) and PCI vendor ids, so a wrong rule of
//! the daemon cannot be mirrored here. It shares only data with vgpud: the hardware tables
//! (`vgpud-catalog`) and the simulated NVIDIA driver's state (`vgpud-sim-driver`).
//!
//! The simulator keeps no state: every decision is derived from the tree, so it works on any
//! tree with the real layout (a profile, a copy of a real host's sysfs, a tree another process
//! changed). The only thing kept between writes is the text of static attribute files (a type's
//! `description`), given back only while the file is provably the one it was read from (see
//! `fsx::read_static`). Side effects are serialized by locks shared by every process working on
//! the tree (`flock`s below `ROOT/run/vgpud-simulator`, see `journal.rs`), the counterparts of
//! the kernel's: mdev creates and removes hold the tree's lock shared and their parent's lock
//! (mdev_core's per-parent lock), so those on different parents run in parallel, and take a
//! short bus lock for what all devices share (UUIDs, IOMMU group and vfio numbers); every other
//! write with side effects holds the tree's lock exclusive.
//!
//! A simulated write is atomic like a syscall, even when the writing process is killed in the
//! middle of its side effects: a journal (`ROOT/run/vgpud-simulator/journal`, or
//! `journal.<parent>` for an mdev create or remove, see `journal.rs`) names the operation in
//! flight, and whoever takes its lock next (any write to the tree, or to that parent, or
//! [`Simulator::recover`] at start-up) undoes a create, completes a remove, or drops a plain
//! write's temporary file, then recomputes the parent's `available_instances`.
//!
//! What a write does (hardware.md §1):
//! - `<parent>/mdev_supported_types/<type>/create`: 36 or 37 bytes else `EINVAL`; a malformed
//!   UUID `EINVAL`; a UUID that exists (`sys/bus/mdev/devices/<uuid>`) `EEXIST`; no capacity
//!   `ENOSPC` (`EUSERS` for unknown vendors, see `rules.rs`). On success the device directory
//!   `<parent>/<uuid>/` (`remove`, `uevent`, `mdev_type`, `iommu_group`, `driver`, `subsystem`,
//!   `power/`, vendor attributes, and its vfio registration `vfio-dev/vfio<M>` as in
//!   `binding.rs`), a new IOMMU group `sys/kernel/iommu_groups/<N>/devices/<uuid>` (lowest
//!   free N), `dev/vfio/<N>` (a regular empty file standing in for the vfio group character
//!   device), `sys/bus/mdev/devices/<uuid>`, `sys/bus/mdev/drivers/<drv>/<uuid>` and
//!   `<type>/devices/<uuid>`, all links relative; then `available_instances` of every type of
//!   the parent is recomputed.
//! - `<mdev>/remove`: parsed as `kstrtoul`, `0` is a no-op, other numbers undo all of the above.
//!   These two are also applied when another process writes them straight into the tree (a
//!   shell's `echo`, `mdevctl start`): [`TreeWrites`] watches them.
//! - `sys/bus/pci/drivers/<drv>/bind` ← BDF: unknown device `ENODEV`; a driver that does not
//!   match it `ENODEV`; a bound device `EBUSY`; a failing probe its errno (vfio-pci without an
//!   IOMMU group `EINVAL`; a VF whose PF has `sriov_drivers_autoprobe` 0 and no override
//!   `ENODEV`); else bound with the driver's probe effects. `unbind` ← BDF: `ENODEV` unless
//!   bound to that driver; the remove effects never fail. `new_id`/`remove_id` ← `vvvv dddd`:
//!   a dynamic id (`EEXIST` if the driver matches it already; `ENODEV` to remove one that is
//!   not there; `EINVAL` for fewer than two hex fields); `new_id` binds every unbound device it
//!   now matches. `sys/bus/pci/drivers_probe` ← BDF: an unbound device gets the first driver
//!   that takes it (none: still success); unknown `ENODEV`. `<dev>/driver_override`: up to the
//!   first newline, empty clears it (`(null)`). Matching, probe order and effects (vfio devices,
//!   `dev/vfio/<group>`, NVIDIA mdev parents and vendor-VFIO files): `binding.rs`.
//! - `<pf>/sriov_numvfs` ← N (`kstrtou16`, base 0): above `sriov_totalvfs` `ERANGE`; the
//!   current count a no-op; no driver or one without `sriov_configure` (`nvidia`, `gim`)
//!   `ENOENT`; N → M both non-zero `EBUSY`; 0 while an NVIDIA VF holds a vGPU type `EBUSY`
//!   (assumed); else VFs made (probed while `sriov_drivers_autoprobe` is 1) or destroyed
//!   (unbound first). Layout: `sriov.rs`.
//! - `<vf>/nvidia/current_vgpu_type` ← id (`kstrtol`, base 10): `EINVAL`, `EPERM` (0 with none
//!   set, non-zero with one set), `EIO` (not in the VF's `creatable_vgpu_types`; a MIG-backed
//!   type with no free GPU instance); every VF's `creatable_vgpu_types` follows (`vgpu.rs`).
//! - any other file: the value is stored as written, replacing the file by a rename (`ENOENT`
//!   when the file does not exist, `EISDIR` for a directory, `EACCES` for a file without write
//!   permission bits, as kernfs refuses writes to attributes with no store method).
//!
//! Test options, off by default, each a file in `ROOT/run/vgpud-simulator/` (gone with a
//! simulated reboot, like the rest of `run/`), read at every write they concern:
//! - `lenient-capacity` (present): a lenient kernel. A create on a type whose
//!   `available_instances` reads 0 succeeds anyway (the count stays 0), so only the daemon's
//!   own accounting stands between a storm and an over-committed GPU.
//! - `create-delay-ms` (a number, at most 10000): every mdev create takes that long, with the
//!   parent's lock held, like a slow driver; concurrent requests then overlap in a known way.
//! - `vf-type-delay-ms` (a number, at most 10000): every write of a vGPU type to a VF
//!   (`<vf>/nvidia/current_vgpu_type` ← non-zero) waits that long before the driver looks at
//!   the VF, holding no lock, like a slow driver: whatever changes meanwhile (another write)
//!   is what the write finds.
//! - `fail-vf-type-write` (an errno name: `EPERM`, `EIO`, `EINVAL`, `ENOSPC`, `EBUSY`, `ENODEV`,
//!   `EACCES`, `EEXIST`, `ENOENT`, `ENXIO`, `EAGAIN` or `ENOMEM`, optionally followed by
//!   `once`): a driver that refuses. A write of a vGPU type to a VF without one
//!   (`<vf>/nvidia/current_vgpu_type` ← non-zero) fails with that errno and changes nothing;
//!   with `once` the file is removed as it fires, so only the next such write fails. Releases
//!   (← 0) are never refused by it; a name not listed is no option.
//! - `fail-vf-release` (the same form): a release of a VF's vGPU type
//!   (`<vf>/nvidia/current_vgpu_type` ← 0) fails with that errno and changes nothing; with
//!   `EPERM`, which the driver answers only for a VF without a vGPU, the vGPU is released
//!   first, as by another release that got there between the caller's look and its write.
//! - `fail-vgpu-params-write` (the same form): every write to a `nvidia/vgpu_params` (of a VF
//!   or an mdev) fails with that errno, or the next one only.
//!
//! [`Simulator::run_tool`] carries out NVIDIA's `sriov-manage` as the sequence of such writes
//! the real script makes, each one atomic (`-e` also wipes the GPU's GPU instances in the
//! simulated driver, as the real one's reload does), and `nvidia-smi vgpu -i <gpu> -shm <0|1>`,
//! the switch of a GPU's heterogeneous vGPU mode, kept in the simulated driver (`tool.rs`).
//!
//! Every write with more than one side effect is journaled: a bind (also by `drivers_probe` or
//! `new_id`), VF enablement and setting a vGPU type are undone by recovery; an unbind, VF
//! disablement and releasing a vGPU type are completed. The only state outside `sys/` and
//! `dev/` (besides the simulated driver's) is the dynamic ids of `new_id`
//! (`ROOT/run/vgpud-simulator/dynids/<drv>`), which the tree cannot say and which, like the
//! kernel's, do not survive a reboot, and the fingerprint of the driver state a GPU's VF lists
//! follow (`ROOT/run/vgpud-simulator/nvidia-lists/<pf>`, a cache; see `vgpu.rs`).

mod binding;
mod fbdev;
mod fsx;
mod host;
mod journal;
mod kernel;
mod profiles;
mod rules;
mod sriov;
mod tool;
mod tree_writes;
pub mod uevent;
mod vgpu;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use host::SimHost;
pub use profiles::{profile_names, profiles, write_profile};
pub use rules::refresh_available;
pub use tool::ToolOutput;
pub use tree_writes::{TreeWrite, TreeWrites};

/// PCI vendor ids (the PCI-SIG's assignments) the profiles write and the simulated drivers
/// match: the simulator's own, not the daemon's.
pub(crate) const VENDOR_NVIDIA: u16 = 0x10de;
pub(crate) const VENDOR_AMD: u16 = 0x1002;
pub(crate) const VENDOR_INTEL: u16 = 0x8086;

/// An error writing a simulated tree, naming the path.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// No profile has this name.
    #[error("unknown simulator profile {name:?} (known: {known})")]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The names there are, comma-separated.
        known: String,
    },
    /// A file, directory or link of the tree could not be written.
    #[error("cannot write simulated tree at {path}: {source}")]
    Io {
        /// The path being written.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
}

/// Applies the kernel's side effects of writes below `ROOT/sys` on a simulated host.
#[derive(Debug, Default)]
pub struct Simulator {}

/// What a write reaches once its path is resolved.
enum Target {
    Create(PathBuf),
    Remove(PathBuf),
    Plain(PathBuf),
    /// `sys/bus/pci/drivers/<drv>/{bind,unbind,new_id,remove_id}`: the driver's directory.
    Bind(PathBuf),
    Unbind(PathBuf),
    NewId(PathBuf),
    RemoveId(PathBuf),
    /// `sys/bus/pci/drivers_probe`.
    DriversProbe,
    /// `<pci dev>/driver_override`.
    Override(PathBuf),
    /// `<pci dev>/sriov_numvfs`.
    NumVfs(PathBuf),
    /// `<pci dev>/nvidia/current_vgpu_type`.
    VgpuType(PathBuf),
}

impl Simulator {
    /// A simulator with no state of its own: all state lives in the tree.
    pub fn new() -> Self {
        Simulator {}
    }

    /// Performs a write to `path` as the kernel would, with its side effects, or fails with
    /// the errno the kernel would return. Takes the tree's lock and first finishes an
    /// operation a killed writer left half-done (see [`Simulator::recover`]).
    pub fn write(&self, root: &Path, path: &Path, value: &str) -> io::Result<()> {
        if let Some(done) = write_mdev_shared(root, path, value)? {
            return done;
        }
        // A slow driver takes its time before it looks at the VF (nothing is locked yet).
        if path.ends_with("nvidia/current_vgpu_type") && value.trim() != "0" {
            let state = root.join(journal::STATE_DIR);
            if let Some(delay) = kernel::delay_option(&state.join(kernel::VF_TYPE_DELAY_FILE)) {
                std::thread::sleep(delay);
            }
        }
        let _guard = journal::lock(&root.join(journal::STATE_DIR))?;
        recover_locked(root)?;
        let roots = kernel::Roots::new(root)?;
        // Writes may come through links (sys/bus/mdev/devices/<uuid>/remove).
        let resolved = fs::canonicalize(path)?;
        match classify(&roots, resolved) {
            Target::Create(type_dir) => kernel::create(&roots, &type_dir, value),
            Target::Remove(dev_dir) => kernel::remove(&roots, &dev_dir, value),
            Target::Plain(file) => kernel::write_plain(&roots, &file, value),
            Target::Bind(drv) => binding::bind(&roots, &drv, value),
            Target::Unbind(drv) => binding::unbind(&roots, &drv, value),
            Target::NewId(drv) => binding::new_id(&roots, &drv, value),
            Target::RemoveId(drv) => binding::remove_id(&roots, &drv, value),
            Target::DriversProbe => binding::drivers_probe(&roots, value),
            Target::Override(file) => binding::driver_override(&roots, &file, value),
            Target::NumVfs(file) => sriov::write_numvfs(&roots, &file, value),
            Target::VgpuType(file) => vgpu::write_current(&roots, &file, value),
        }
    }

    /// Carries out what host tool `program` does when run with `args`, as simulated sysfs
    /// writes (each one atomic, through [`Simulator::write`]), and returns what the tool would
    /// print and its exit status. Known tools: NVIDIA's `sriov-manage` (by basename; see
    /// `tool.rs`); others are an `Unsupported` error.
    pub fn run_tool(&self, root: &Path, program: &Path, args: &[&str]) -> io::Result<ToolOutput> {
        let host = SimHost::new(root);
        match program.file_name().and_then(|n| n.to_str()) {
            Some("sriov-manage") => tool::sriov_manage(self, &host, args),
            Some("nvidia-smi") => {
                // The driver's state changes: serialized with every other simulated write.
                let _guard = lock_tree(root)?;
                tool::nvidia_smi(&host, args)
            }
            _ => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the simulator does not emulate {}", program.display()),
            )),
        }
    }

    /// Before a read of `path`: when it is a VF's `nvidia/creatable_vgpu_types`, recomputes
    /// the lists of every VF of that VF's GPU from the tree and the simulated driver's state
    /// (the real driver computes the list when it is read; GPU instances change through NVML
    /// with no sysfs write). Other paths: nothing. Takes the tree's lock (then, inside it, the
    /// simulated driver's) and finishes an interrupted write first.
    pub fn before_read(&self, root: &Path, path: &Path) -> io::Result<()> {
        if !path.ends_with("nvidia/creatable_vgpu_types") {
            return Ok(());
        }
        let _guard = journal::lock(&root.join(journal::STATE_DIR))?;
        recover_locked(root)?;
        let file = match fs::canonicalize(path) {
            Ok(f) => f,
            // Nothing to compute: the read reports what is there (or is not).
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        vgpu::refresh_on_read(&file)
    }

    /// Finishes the simulated write a killed process left half-done on the host's tree, as
    /// if the kernel had run it to the end: a create is undone (whatever part of the device
    /// exists is torn down), a remove is completed, a plain write keeps the old or the new
    /// value whole; then the parent's `available_instances` are recomputed and the journal is
    /// deleted. Does nothing when no write was interrupted. Every [`Simulator::write`] does
    /// this first; a daemon calls it once at start, before it reads the tree.
    pub fn recover(&self, root: &Path) -> io::Result<()> {
        let _guard = journal::lock(&root.join(journal::STATE_DIR))?;
        recover_locked(root)
    }
}

/// An mdev `create` or `remove` under the tree's lock taken shared (and the parent's, see
/// `journal.rs`): `None` when `path` is something else, or cannot be resolved before the
/// journals are finished, or the tree's journal needs finishing (the caller then takes the
/// lock exclusive); else the write's result.
fn write_mdev_shared(root: &Path, path: &Path, value: &str) -> io::Result<Option<io::Result<()>>> {
    let state = root.join(journal::STATE_DIR);
    let _guard = journal::lock_shared(&state)?;
    if journal::exists(&journal::tree_journal(&state)) {
        return Ok(None);
    }
    let Ok(roots) = kernel::Roots::new(root) else {
        return Ok(None);
    };
    let Ok(resolved) = fs::canonicalize(path) else {
        return Ok(None);
    };
    let roots = roots.shared();
    Ok(match classify(&roots, resolved) {
        Target::Create(type_dir) => Some(kernel::create(&roots, &type_dir, value)),
        Target::Remove(dev_dir) => Some(kernel::remove(&roots, &dev_dir, value)),
        _ => None,
    })
}

/// [`Simulator::recover`] with the lock held exclusive: every journal is finished. Journals
/// left on a root without `sys` (the tree they spoke of is gone) are dropped.
pub(crate) fn recover_locked(root: &Path) -> io::Result<()> {
    let state = root.join(journal::STATE_DIR);
    let parents = journal::parent_journals(&state)?;
    let tree = journal::tree_journal(&state);
    if parents.is_empty() && !journal::exists(&tree) {
        return Ok(());
    }
    match kernel::Roots::new(root) {
        Ok(roots) => kernel::recover_all(&roots),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            for p in parents {
                journal::end(&p)?;
            }
            journal::end(&tree)
        }
        Err(e) => Err(e),
    }
}

/// Takes the simulator's lock of the tree at `root`, for writers other than [`Simulator`]
/// (the profiles), and finishes an interrupted write first.
pub(crate) fn lock_tree(root: &Path) -> io::Result<journal::Guard> {
    let guard = journal::lock(&root.join(journal::STATE_DIR))?;
    recover_locked(root)?;
    Ok(guard)
}

fn classify(roots: &kernel::Roots, path: PathBuf) -> Target {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let dir = path.parent();
    let pci_drivers = roots.sys.join("bus/pci/drivers");
    if let Some(d) = dir.filter(|d| d.parent() == Some(pci_drivers.as_path())) {
        let d = d.to_path_buf();
        match name {
            "bind" => return Target::Bind(d),
            "unbind" => return Target::Unbind(d),
            "new_id" => return Target::NewId(d),
            "remove_id" => return Target::RemoveId(d),
            _ => {}
        }
    }
    if path == roots.sys.join("bus/pci/drivers_probe") {
        return Target::DriversProbe;
    }
    let in_pci_dev = dir.is_some_and(binding::is_pci_dev);
    match name {
        "driver_override" if in_pci_dev => return Target::Override(path),
        "sriov_numvfs" if in_pci_dev => return Target::NumVfs(path),
        "current_vgpu_type"
            if dir.and_then(Path::file_name) == Some("nvidia".as_ref())
                && dir.and_then(Path::parent).is_some_and(binding::is_pci_dev) =>
        {
            return Target::VgpuType(path)
        }
        _ => {}
    }
    match (name, dir) {
        ("create", Some(type_dir))
            if type_dir.parent().and_then(Path::file_name)
                == Some("mdev_supported_types".as_ref()) =>
        {
            Target::Create(type_dir.to_path_buf())
        }
        ("remove", Some(dev_dir)) if fsx::exists_nofollow(&dev_dir.join("mdev_type")) => {
            Target::Remove(dev_dir.to_path_buf())
        }
        _ => Target::Plain(path),
    }
}

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod mig_tests;
#[cfg(test)]
mod pci_crash_tests;
#[cfg(test)]
mod pci_tests;
#[cfg(test)]
mod tests;
