//! The simulated kernel side of mdev: `create` and `remove` (drivers/vfio/mdev/mdev_sysfs.c,
//! mdev_core.c) with the vendor drivers' effects, applied to the tree.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::fsx::{self, errno};
use super::journal::{self, Entry, Op, Pending};
use super::rules::{self, Change, Rules, Vendor};
use super::{binding, vgpu};

/// In the simulator's state directory, a file whose presence makes creates succeed beyond
/// the type's capacity (a lenient kernel, for tests of the daemon's own accounting).
pub(crate) const LENIENT_FILE: &str = "lenient-capacity";
/// In the simulator's state directory, a file holding the milliseconds every mdev create
/// takes (a slow driver, for tests of the order in which concurrent requests are served).
pub(crate) const CREATE_DELAY_FILE: &str = "create-delay-ms";
/// In the simulator's state directory, a file holding the milliseconds every write of a vGPU
/// type to a VF takes before the driver looks at the VF (a slow driver, for tests of what
/// vgpud does when the VFs change between its look and its write).
pub(crate) const VF_TYPE_DELAY_FILE: &str = "vf-type-delay-ms";
/// In the simulator's state directory, a file naming the errno (`EIO`, optionally followed by
/// `once`) with which the driver refuses the writes of a vGPU type to a VF's
/// `nvidia/current_vgpu_type` (a driver refusing, for tests of how the refusal is answered).
pub(crate) const FAIL_VF_TYPE_FILE: &str = "fail-vf-type-write";
/// In the simulator's state directory, a file naming the errno (optionally followed by
/// `once`) with which the driver refuses a release (`0`) of a VF's vGPU type; `EPERM`, which
/// the driver answers only for a VF with no vGPU, comes after a release that got there first.
pub(crate) const FAIL_VF_RELEASE_FILE: &str = "fail-vf-release";
/// In the simulator's state directory, a file naming the errno (optionally followed by
/// `once`) with which the driver refuses writes to `nvidia/vgpu_params`.
pub(crate) const FAIL_VGPU_PARAMS_FILE: &str = "fail-vgpu-params-write";

/// The kernel's `UUID_STRING_LEN`.
const UUID_STRING_LEN: usize = 36;

/// Where the simulated host keeps its trees: the canonical `sys`, the vfio group nodes
/// (`dev/vfio`), and the simulator's locks and journals (`run/vgpud-simulator`); and how the
/// operation at hand holds the tree: exclusive (the tree's journal), or shared under a
/// parent's lock (that parent's journal, and the bus lock for what all devices share).
#[derive(Clone)]
pub(crate) struct Roots {
    pub(crate) sys: PathBuf,
    pub(crate) dev: PathBuf,
    pub(crate) state: PathBuf,
    /// The journal of the operation at hand.
    pub(crate) journal: PathBuf,
    /// Whether the tree's lock is held shared (see `journal.rs`).
    pub(crate) shared: bool,
}

impl Roots {
    /// The roots of the host at `root`, for an operation holding the tree exclusive; fails
    /// when `root/sys` does not exist.
    pub(crate) fn new(root: &Path) -> io::Result<Roots> {
        let state = root.join(journal::STATE_DIR);
        Ok(Roots {
            sys: fs::canonicalize(root.join("sys"))?,
            dev: root.join("dev/vfio"),
            journal: journal::tree_journal(&state),
            state,
            shared: false,
        })
    }

    /// The roots for an operation holding the tree shared.
    pub(crate) fn shared(mut self) -> Roots {
        self.shared = true;
        self
    }

    /// These roots with the journal of the parent lock on `dir`.
    fn for_parent(&self, dir: &Path) -> Roots {
        Roots {
            journal: journal::parent_journal(&self.state, &self.sys, dir),
            ..self.clone()
        }
    }
}

/// The directory whose lock an mdev operation on `parent` takes: an SR-IOV VF's PF (its VFs
/// share one budget), else the parent itself.
fn lock_dir_of(parent: &Path) -> PathBuf {
    binding::physfn(parent).unwrap_or_else(|| parent.to_path_buf())
}

/// What an mdev operation holds of `parent`: under the shared tree lock, the parent's lock,
/// with the roots whose journal is the parent's, a journal a dead writer left there finished
/// first; under the exclusive one, nothing more (the tree's journal).
struct ParentHold {
    roots: Roots,
    _lock: Option<journal::DirLock>,
}

fn hold_parent(roots: &Roots, parent: &Path) -> io::Result<ParentHold> {
    if !roots.shared {
        return Ok(ParentHold {
            roots: roots.clone(),
            _lock: None,
        });
    }
    let dir = lock_dir_of(parent);
    let lock = journal::lock_dir(&dir)?;
    let roots = roots.for_parent(&dir);
    if journal::exists(&roots.journal) {
        recover(&roots)?;
    }
    Ok(ParentHold {
        roots,
        _lock: Some(lock),
    })
}

/// What the holder of the bus lock learnt of the operations in flight on other parents.
#[derive(Default)]
struct InFlight {
    /// UUIDs and IOMMU groups named by the journals of live writers (or of dead ones whose
    /// parent another thread is about to recover).
    uuids: Vec<String>,
    groups: Vec<String>,
}

/// Takes the bus lock (under the shared tree lock; nothing under the exclusive one) and, on
/// the thread's outermost hold, finishes every other parent's journal whose lock it gets at
/// once: a journal is only begun under the bus lock, so one found there whose parent's lock is
/// free was left by a dead writer.
fn hold_bus(roots: &Roots) -> io::Result<(Option<journal::BusLock>, InFlight)> {
    let mut in_flight = InFlight::default();
    if !roots.shared {
        return Ok((None, in_flight));
    }
    let bus = journal::lock_bus(&roots.state)?;
    if !bus.is_outermost() {
        return Ok((Some(bus), in_flight));
    }
    for path in journal::parent_journals(&roots.state)? {
        if path == roots.journal {
            continue;
        }
        let entry = match journal::pending(&path, &roots.sys)? {
            Pending::None => continue,
            // Cut short while being written (under the bus lock, so by a dead writer).
            Pending::Torn => {
                journal::end(&path)?;
                continue;
            }
            Pending::Entry(e) => e,
        };
        let dir = lock_dir_of(&entry.parent);
        let other = Roots {
            journal: path.clone(),
            ..roots.clone()
        };
        if !fsx::exists_nofollow(&dir) {
            // The parent is gone: nobody can hold its lock.
            recover(&other)?;
            continue;
        }
        match journal::try_lock_dir(&dir)? {
            Some(_lock) => recover(&other)?,
            None => {
                in_flight.uuids.push(entry.uuid.clone());
                in_flight.groups.extend(entry.group.clone());
            }
        }
    }
    Ok((Some(bus), in_flight))
}

/// Runs `apply`, an operation whose journal `entry` is written, to its end: on success the
/// journal goes; on failure the operation is finished as recovery would finish it (a create
/// undone, a remove completed), and the journal goes once that worked. `keep_going` says
/// whether a completed recovery turns the failure into success (a remove that recovery
/// completed did happen). A staged death (unit tests) returns at once, like a dead process.
pub(crate) fn journaled(
    roots: &Roots,
    entry: &Entry,
    keep_going: bool,
    apply: impl FnOnce() -> io::Result<()>,
) -> io::Result<()> {
    journal::begin(&roots.journal, &roots.sys, entry)?;
    match apply() {
        Ok(()) => journal::end(&roots.journal),
        Err(e) if fsx::is_crash(&e) => Err(e),
        Err(e) => {
            let finished = finish(roots, entry).and_then(|()| journal::end(&roots.journal));
            match finished {
                Ok(()) if keep_going => Ok(()),
                // The error that stopped the operation is what counts; if finishing failed too,
                // the journal stays for the next write to try again.
                _ => Err(e),
            }
        }
    }
}

/// The test option that turns off the capacity refusal of creates (see the crate doc):
/// [`LENIENT_FILE`] exists in the simulator's state directory.
fn lenient(roots: &Roots) -> bool {
    roots.state.join(LENIENT_FILE).exists()
}

/// The test option that slows every mdev create down: [`CREATE_DELAY_FILE`] holds a number of
/// milliseconds (at most 10 s; anything else is no delay).
fn create_delay(roots: &Roots) -> Option<std::time::Duration> {
    delay_option(&roots.state.join(CREATE_DELAY_FILE))
}

/// The delay a test option file holds: a number of milliseconds, at most 10 s (anything else
/// is no delay).
pub(crate) fn delay_option(file: &Path) -> Option<std::time::Duration> {
    let ms: u64 = fsx::read_small(file)?.trim().parse().ok()?;
    (ms > 0).then(|| std::time::Duration::from_millis(ms.min(10_000)))
}

/// A test option that makes a write fail (see the crate doc): the errno the file `name` in the
/// simulator's state directory names, if it names one of the errnos below; a file whose
/// second word is `once` is removed as it fires, so only the next such write fails.
pub(crate) fn injected_failure(roots: &Roots, name: &str) -> io::Result<Option<io::Error>> {
    let file = roots.state.join(name);
    let Some(text) = fsx::read_small(&file) else {
        return Ok(None);
    };
    let mut words = text.split_whitespace();
    let e = match words.next() {
        Some("EPERM") => Errno::EPERM,
        Some("ENOENT") => Errno::ENOENT,
        Some("EIO") => Errno::EIO,
        Some("ENXIO") => Errno::ENXIO,
        Some("EAGAIN") => Errno::EAGAIN,
        Some("ENOMEM") => Errno::ENOMEM,
        Some("EACCES") => Errno::EACCES,
        Some("EBUSY") => Errno::EBUSY,
        Some("EEXIST") => Errno::EEXIST,
        Some("ENODEV") => Errno::ENODEV,
        Some("EINVAL") => Errno::EINVAL,
        Some("ENOSPC") => Errno::ENOSPC,
        _ => return Ok(None),
    };
    if words.next() == Some("once") {
        fsx::remove_quiet(&file)?;
    }
    Ok(Some(errno(e)))
}

/// `create_store`: exactly 36 or 37 bytes (the kernel ignores what the 37th byte is, normally
/// a newline), a valid UUID, unique on the system, and capacity on the type.
pub(crate) fn create(roots: &Roots, type_dir: &Path, value: &str) -> io::Result<()> {
    let bytes = value.as_bytes();
    if bytes.len() != UUID_STRING_LEN && bytes.len() != UUID_STRING_LEN + 1 {
        return Err(errno(Errno::EINVAL));
    }
    let text = std::str::from_utf8(&bytes[..UUID_STRING_LEN]).map_err(|_| errno(Errno::EINVAL))?;
    let uuid = guid_parse(text).ok_or_else(|| errno(Errno::EINVAL))?;

    let type_id = name_of(type_dir)?;
    let parent = type_dir
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| errno(Errno::EINVAL))?
        .to_path_buf();
    let hold = hold_parent(roots, &parent)?;
    let roots = &hold.roots;
    let bus_link = roots.sys.join("bus/mdev/devices").join(&uuid);
    let dev_dir = parent.join(&uuid);
    if fsx::exists_nofollow(&bus_link) || fsx::exists_nofollow(&dev_dir) {
        return Err(errno(Errno::EEXIST));
    }
    let vendor = Vendor::of(&parent)?;
    // The parent's types and figures, read once: the capacity now, and the counts after.
    let mut rules = Rules::read(&parent, &vendor)?;
    if rules.available(&type_id) == 0 && !lenient(roots) {
        return Err(errno(vendor.no_capacity()));
    }
    if let Some(delay) = create_delay(roots) {
        // A slow driver: the parent's lock is held meanwhile, as mdev_core holds it.
        std::thread::sleep(delay);
    }
    let mut entry = Entry::device(Op::Create, &uuid, &parent);
    entry.type_id = Some(type_id.clone());
    entry.driver = Some(vendor.mdev_driver().to_string());
    entry.avail = rules.counters();

    let (bus, in_flight) = hold_bus(roots)?;
    // Another parent may have made the UUID since the first look.
    if fsx::exists_nofollow(&bus_link) || in_flight.uuids.contains(&uuid) {
        return Err(errno(Errno::EEXIST));
    }
    let group = free_group(&roots.sys.join("kernel/iommu_groups"), &in_flight.groups)?;
    entry.group = Some(group.to_string());
    // Directories a tree may lack, which the create makes and an undo must take away again.
    for dir in [
        roots
            .sys
            .join("bus/mdev/drivers")
            .join(vendor.mdev_driver()),
        roots.dev.clone(),
        type_dir.join("devices"),
        roots.sys.join("bus/mdev/devices"),
        roots.sys.join("class/vfio-dev"),
        roots.dev.join("devices"),
    ] {
        missing_dirs(&dir, &mut entry.made);
    }
    let mut bus = bus;
    journaled(roots, &entry, false, || {
        build(roots, &parent, type_dir, &type_id, &uuid, &vendor, group)?;
        // What all devices share is done with: other parents may go on.
        drop(bus.take());
        rules.apply(&type_id, Change::Created);
        rules.store(Change::Created)?;
        refresh_siblings(&parent)
    })?;
    super::uevent::mdev_added(roots, &dev_dir, &type_id, vendor.mdev_driver());
    Ok(())
}

/// Makes the device: its directory and links, then the entries that publish it elsewhere.
/// Every entry outside the device directory is made after the device's own link that names
/// it, so [`teardown`] finds everything from the device directory alone.
fn build(
    roots: &Roots,
    parent: &Path,
    type_dir: &Path,
    type_id: &str,
    uuid: &str,
    vendor: &Vendor,
    group: u32,
) -> io::Result<()> {
    let sys = &roots.sys;
    let group_dir = sys.join("kernel/iommu_groups").join(group.to_string());
    let driver = vendor.mdev_driver();
    let driver_dir = sys.join("bus/mdev/drivers").join(driver);
    let dev_dir = parent.join(uuid);

    fsx::create_dir(&dev_dir)?;
    fsx::write_atomic(&dev_dir.join("remove"), "", 0o200)?;
    fsx::write_atomic(
        &dev_dir.join("uevent"),
        &format!("DRIVER={driver}\nMDEV_TYPE={type_id}\n"),
        0o644,
    )?;
    fsx::symlink_exact(
        &dev_dir.join("mdev_type"),
        &Path::new("../mdev_supported_types").join(type_id),
    )?;
    fsx::symlink_rel(&dev_dir.join("iommu_group"), &group_dir)?;
    fsx::symlink_rel(&dev_dir.join("driver"), &driver_dir)?;
    fsx::symlink_rel(&dev_dir.join("subsystem"), &sys.join("bus/mdev"))?;
    fsx::create_dir(&dev_dir.join("power"))?;
    vendor_attributes(parent, &dev_dir, uuid, vendor)?;

    fsx::create_dir_all(&group_dir.join("devices"))?;
    fsx::symlink_rel(&group_dir.join("devices").join(uuid), &dev_dir)?;
    fsx::create_dir_all(&roots.dev)?;
    fsx::write_atomic(&roots.dev.join(group.to_string()), "", 0o600)?;
    // Bound to its vendor's mdev driver, a vfio driver: registered with vfio like a PCI
    // function bound to vfio-pci (`vfio-dev/vfio<N>`).
    binding::vfio_register(roots, &dev_dir)?;
    fsx::create_dir_all(&driver_dir)?;
    fsx::symlink_rel(&driver_dir.join(uuid), &dev_dir)?;
    fsx::create_dir_all(&type_dir.join("devices"))?;
    fsx::symlink_exact(
        &type_dir.join("devices").join(uuid),
        &Path::new("../../..").join(uuid),
    )?;
    let bus_devices = sys.join("bus/mdev/devices");
    fsx::create_dir_all(&bus_devices)?;
    fsx::symlink_rel(&bus_devices.join(uuid), &dev_dir)
}

/// The vendor attribute groups of a new device: NVIDIA `nvidia/vgpu_params`, GVT-g
/// `intel_vgpu/vgpu_id` (lowest free id from 1, as GVT's idr), mtty `vendor/sample_mdev_dev`.
fn vendor_attributes(parent: &Path, dev_dir: &Path, uuid: &str, vendor: &Vendor) -> io::Result<()> {
    match vendor {
        Vendor::Nvidia => {
            fsx::create_dir(&dev_dir.join("nvidia"))?;
            fsx::write_atomic(&dev_dir.join("nvidia/vgpu_params"), "", 0o644)
        }
        Vendor::Gvtg => {
            let mut used = BTreeSet::new();
            for child in fsx::list(parent)? {
                let id = fsx::read_opt(&parent.join(&child).join("intel_vgpu/vgpu_id"));
                if let Some(n) = id.and_then(|s| s.trim().parse::<u32>().ok()) {
                    used.insert(n);
                }
            }
            let id = (1..).find(|n| !used.contains(n)).unwrap_or(1);
            fsx::create_dir(&dev_dir.join("intel_vgpu"))?;
            fsx::write_atomic(
                &dev_dir.join("intel_vgpu/vgpu_id"),
                &format!("{id}\n"),
                0o444,
            )
        }
        Vendor::Mtty => {
            fsx::create_dir(&dev_dir.join("vendor"))?;
            fsx::write_atomic(
                &dev_dir.join("vendor/sample_mdev_dev"),
                &format!("This is MDEV {uuid}\n"),
                0o444,
            )
        }
        Vendor::Other(_) => Ok(()),
    }
}

/// Adds `dir` and those of its ancestors that do not exist to `made`, outermost first.
pub(crate) fn missing_dirs(dir: &Path, made: &mut Vec<PathBuf>) {
    let mut missing = Vec::new();
    let mut d = Some(dir);
    while let Some(p) = d {
        if fsx::exists_nofollow(p) || made.iter().any(|m| m == p) {
            break;
        }
        missing.push(p.to_path_buf());
        d = p.parent();
    }
    made.extend(missing.into_iter().rev());
}

/// The lowest unused IOMMU group number (the kernel allocates groups with an IDA), not one of
/// `taken` (named by operations in flight).
fn free_group(groups: &Path, taken: &[String]) -> io::Result<u32> {
    let used: BTreeSet<u32> = fsx::list(groups)?
        .iter()
        .chain(taken)
        .filter_map(|n| n.parse().ok())
        .collect();
    (0..=u32::MAX)
        .find(|n| !used.contains(n))
        .ok_or_else(|| errno(Errno::ENOSPC))
}

/// `remove_store`: `kstrtoul(buf, 0)`; 0 does nothing, any other number removes the device.
pub(crate) fn remove(roots: &Roots, dev_dir: &Path, value: &str) -> io::Result<()> {
    if kstrtoul(value)? == 0 {
        return Ok(());
    }
    let parent = dev_dir.parent().ok_or_else(|| errno(Errno::EINVAL))?;
    let hold = hold_parent(roots, parent)?;
    let roots = &hold.roots;
    if !fsx::exists_nofollow(&dev_dir.join("mdev_type")) {
        // Gone with the recovery of a create its writer did not finish.
        return Err(errno(Errno::ENOENT));
    }
    let vendor = Vendor::of(parent)?;
    let mut rules = Rules::read(parent, &vendor)?;
    let mut entry = Entry::device(Op::Remove, &name_of(dev_dir)?, parent);
    entry.type_id = fsx::link_basename(&dev_dir.join("mdev_type"));
    entry.group = fsx::link_basename(&dev_dir.join("iommu_group"));
    entry.driver = fsx::link_basename(&dev_dir.join("driver"));
    entry.avail = rules.counters();
    let (mut bus, _) = hold_bus(roots)?;
    let vfio = super::uevent::VfioState::of(roots, dev_dir);
    journaled(roots, &entry, true, || {
        teardown(roots, &entry)?;
        drop(bus.take());
        if let Some(t) = &entry.type_id {
            rules.apply(t, Change::Removed);
        }
        rules.store(Change::Removed)?;
        refresh_siblings(parent)
    })?;
    super::uevent::mdev_removed(roots, dev_dir, entry.type_id.as_deref(), &vfio);
    Ok(())
}

/// A plain attribute write: the value replaces the content, published by a rename so that no
/// reader (and no death of the writer) ever sees half of it; never creates a file.
pub(crate) fn write_plain(roots: &Roots, path: &Path, value: &str) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::metadata(path)?;
    if meta.is_dir() {
        return Err(errno(Errno::EISDIR));
    }
    let mode = meta.permissions().mode();
    if mode & 0o222 == 0 {
        return Err(errno(Errno::EACCES));
    }
    if path.ends_with("nvidia/vgpu_params") {
        if let Some(e) = injected_failure(roots, FAIL_VGPU_PARAMS_FILE)? {
            return Err(e);
        }
    }
    journaled(roots, &Entry::write(path), false, || {
        fsx::write_atomic(path, value, mode & 0o7777)
    })
}

/// Undoes everything [`build`] made for the device of `entry`, reading what to undo from the
/// device's own links, else from the journal entry. Missing pieces are skipped, so this also
/// cleans up after a half-made or half-removed device.
pub(crate) fn teardown(roots: &Roots, entry: &Entry) -> io::Result<()> {
    let sys = &roots.sys;
    let uuid = &entry.uuid;
    let parent = &entry.parent;
    let dev_dir = parent.join(uuid);
    let known = |link: &str, hint: &Option<String>| {
        fsx::link_basename(&dev_dir.join(link)).or_else(|| hint.clone())
    };
    let type_id = known("mdev_type", &entry.type_id);
    let group = known("iommu_group", &entry.group);
    let driver = known("driver", &entry.driver);

    fsx::remove_quiet(&sys.join("bus/mdev/devices").join(uuid))?;
    binding::vfio_unregister(roots, &dev_dir)?;
    if let Some(t) = type_id {
        fsx::remove_quiet(
            &parent
                .join("mdev_supported_types")
                .join(t)
                .join("devices")
                .join(uuid),
        )?;
    }
    if let Some(d) = driver {
        fsx::remove_quiet(&sys.join("bus/mdev/drivers").join(d).join(uuid))?;
    }
    if let Some(g) = group {
        let group_dir = sys.join("kernel/iommu_groups").join(&g);
        fsx::remove_quiet(&group_dir.join("devices").join(uuid))?;
        if fsx::list(&group_dir.join("devices"))?.is_empty() {
            // The group dies with its last device, and so does its vfio node.
            fsx::remove_dir_quiet(&group_dir)?;
            fsx::remove_quiet(&roots.dev.join(&g))?;
        }
    }
    fsx::remove_dir_quiet(&dev_dir)
}

/// Finishes an operation its writer did not: a create is undone (the write never returned, so
/// it never happened), a remove completed, a plain write's temporary file removed; then the
/// parent's `available_instances` are recomputed.
fn finish(roots: &Roots, entry: &Entry) -> io::Result<()> {
    match entry.op {
        Op::Write => match entry.path.parent() {
            Some(dir) => fsx::remove_temps(dir, entry.pid),
            None => Ok(()),
        },
        Op::Create | Op::Remove => {
            let _bus = hold_bus(roots)?;
            teardown(roots, entry)?;
            for dir in entry.made.iter().rev() {
                fsx::remove_empty_dir(dir)?;
            }
            let parent = &entry.parent;
            for t in rules::types(parent)? {
                fsx::remove_temps(&t.dir, entry.pid)?;
            }
            fsx::remove_temps(&roots.dev, entry.pid)?;
            fsx::remove_temps(&roots.dev.join("devices"), entry.pid)?;
            let vendor = Vendor::of(parent)?;
            rules::settle(parent, &vendor, &entry.avail, entry.op == Op::Remove)?;
            settle_siblings(parent, entry.pid)
        }
        _ => binding::finish(roots, entry),
    }
}

/// An mdev parent that is an SR-IOV VF shares its GPU's budget with its sibling VFs: their
/// counts follow each create and remove.
fn refresh_siblings(parent: &Path) -> io::Result<()> {
    if binding::physfn(parent).is_some() {
        vgpu::refresh_pf(parent)?;
    }
    Ok(())
}

/// [`refresh_siblings`] after a write cut short: first the writer's temporary files go.
fn settle_siblings(parent: &Path, pid: u32) -> io::Result<()> {
    if binding::physfn(parent).is_some() {
        vgpu::remove_pf_temps(parent, pid)?;
    }
    refresh_siblings(parent)
}

/// Finishes the operation the journal of `roots` names, if any, and deletes the journal.
/// Called with the journal's lock held, before anything else touches what it covers.
pub(crate) fn recover(roots: &Roots) -> io::Result<()> {
    match journal::pending(&roots.journal, &roots.sys)? {
        Pending::None => return Ok(()),
        // Cut short while being written: no side effect had started.
        Pending::Torn => {}
        Pending::Entry(entry) => finish(roots, &entry)?,
    }
    journal::end(&roots.journal)
}

/// Finishes every operation a dead writer left, the tree's journal and every parent's; called
/// with the tree's lock held exclusive.
pub(crate) fn recover_all(roots: &Roots) -> io::Result<()> {
    for path in journal::parent_journals(&roots.state)? {
        recover(&Roots {
            journal: path,
            ..roots.clone()
        })?;
    }
    recover(roots)
}

fn name_of(path: &Path) -> io::Result<String> {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| errno(Errno::EINVAL))
}

/// The kernel's `kstrtoul(s, 0)`: optional `+`, base from the prefix (`0x` hex, `0` octal,
/// else decimal), one trailing newline allowed; `EINVAL` for anything else, `ERANGE` on
/// overflow.
pub(crate) fn kstrtoul(s: &str) -> io::Result<u64> {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_prefix('+').unwrap_or(s);
    let b = s.as_bytes();
    let (radix, digits) =
        if b.len() > 2 && b[0] == b'0' && (b[1] | 0x20) == b'x' && b[2].is_ascii_hexdigit() {
            (16, &s[2..])
        } else if b.first() == Some(&b'0') {
            (8, s)
        } else {
            (10, s)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(errno(Errno::EINVAL));
    }
    u64::from_str_radix(digits, radix).map_err(|_| errno(Errno::ERANGE))
}

/// The kernel's `guid_parse` (lib/uuid.c) and the `%pUl` mdev_core names the device with:
/// the 16 bytes of an `8-4-4-4-12` text of hex digits, printed back in lowercase; `None`
/// for any other text.
pub(crate) fn guid_parse(text: &str) -> Option<String> {
    /// Where each byte's two hex digits sit in the text (lib/uuid.c's `si`).
    const SI: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let t = text.as_bytes();
    if t.len() != 36 || [8, 13, 18, 23].iter().any(|&i| t[i] != b'-') {
        return None;
    }
    let hex = |i: usize| char::from(t[i]).to_digit(16);
    let mut name = String::with_capacity(36);
    for (k, &i) in SI.iter().enumerate() {
        let byte = (hex(i)? << 4) | hex(i + 1)?;
        if matches!(k, 4 | 6 | 8 | 10) {
            name.push('-');
        }
        name.push_str(&format!("{byte:02x}"));
    }
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kstrtoul_parses_like_the_kernel() {
        let ok = |s: &str| kstrtoul(s).expect(s);
        let err = |s: &str| kstrtoul(s).expect_err(s).raw_os_error();
        assert_eq!(ok("1"), 1);
        assert_eq!(ok("1\n"), 1);
        assert_eq!(ok("0"), 0);
        assert_eq!(ok("0x10"), 16);
        assert_eq!(ok("010"), 8);
        assert_eq!(ok("+3"), 3);
        assert_eq!(err(""), Some(libc_einval()));
        assert_eq!(err("yes"), Some(libc_einval()));
        assert_eq!(err("1\n\n"), Some(libc_einval()));
        assert_eq!(err(" 1"), Some(libc_einval()));
        assert_eq!(err("-1"), Some(libc_einval()));
        assert_eq!(err("09"), Some(libc_einval()));
        assert_eq!(err("99999999999999999999999"), Some(Errno::ERANGE as i32));
    }

    #[test]
    fn guid_parse_takes_what_the_kernel_takes() {
        let u = "11111111-2222-4333-8444-555555555555";
        assert_eq!(guid_parse(u).as_deref(), Some(u));
        assert_eq!(
            guid_parse("AAAAAAAA-bbbb-4CCC-8ddd-EEEEEEEEEEEE").as_deref(),
            Some("aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee")
        );
        for bad in [
            "",
            "11111111-2222-4333-8444-55555555555",
            "11111111-2222-4333-8444-5555555555555",
            "11111111+2222-4333-8444-555555555555",
            "1111111g-2222-4333-8444-555555555555",
            "+1111111-2222-4333-8444-555555555555",
            "111111111222204333084440555555555555",
        ] {
            assert_eq!(guid_parse(bad), None, "{bad:?}");
        }
    }

    fn libc_einval() -> i32 {
        Errno::EINVAL as i32
    }
}
