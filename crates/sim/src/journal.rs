//! Crash atomicity of the simulated kernel. A real sysfs write cannot be cut in half by killing
//! the writer (SIGKILL waits for the syscall to return), but the simulator applies a write's
//! side effects with many file operations inside the writing process, which can die between
//! any two of them. Two things make the simulated write atomic again:
//!
//! - locks every process working on the tree shares (all `flock`s, held for the whole operation
//!   and released by the kernel when the holder dies; each taken on a file description of its
//!   own, so threads of one process exclude each other as processes do):
//!   - the tree's lock, `ROOT/run/vgpud-simulator/lock`, inside a process-wide reader-writer
//!     lock: taken shared by an mdev `create` or `remove`, exclusive by every other write with
//!     side effects (binding, `sriov_numvfs`, `current_vgpu_type`, plain attributes, the tools,
//!     the profiles) and by [`super::Simulator::recover`];
//!   - under the shared tree lock, the lock of the mdev parent (the directory itself; for an
//!     SR-IOV VF its PF's, whose VFs share one budget), the counterpart of mdev_core's
//!     per-parent lock: creates and removes on different parents run in parallel, on one
//!     parent one after the other;
//!   - under a parent's lock, for the short parts of a create or remove that touch what all
//!     devices share (UUIDs on the bus, IOMMU group and vfio device numbers, the bus and driver
//!     directories), the bus lock: `flock` on the directory `ROOT/run/vgpud-simulator`. The
//!     order is always tree, parent, bus; a parent's lock is only ever tried (never waited
//!     for) by a holder of the bus lock;
//! - a journal written before an operation's first side effect and deleted after its last: an
//!   mdev create or remove writes one per parent lock, `ROOT/run/vgpud-simulator/journal.<key>`
//!   (the key: the path of the locked directory below `sys`, `%`-escaped), every other write the
//!   tree's, `ROOT/run/vgpud-simulator/journal`. Whoever takes a lock next and finds a journal
//!   finishes the dead writer's job: a create is undone (the syscall never returned, so it
//!   never happened), a remove is completed, a plain write loses its temporary file (the rename
//!   that publishes the value is atomic). The holder of a parent's lock finishes that parent's
//!   journal; the holder of the bus lock, before it allocates anything, every parent journal
//!   whose lock it gets at once (a journal whose lock is held belongs to a live writer, or to a
//!   dead one that the holder is about to finish: its UUID counts as taken); the holder of the
//!   tree's lock exclusive every journal there is. A shared taker that finds the tree's journal
//!   takes the lock exclusive first, to finish it.
//!
//! The journal is text, one `key=value` per line, between a header and an `end` line:
//!
//! ```text
//! vgpud-simulator journal 1
//! op=create                  create | remove | write | bind | unbind | sriov-enable |
//!                            sriov-disable | vgpu-type
//! pid=4242                   the writer, whose temporary files (`.NAME.vgpud-PID-N`) are swept
//! uuid=11111111-2222-4333-8444-555555555555
//! parent=devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0   below ROOT/sys (absolute if outside)
//! type=nvidia-259            the device's type, IOMMU group and mdev driver, where known
//! group=4
//! driver=nvidia-vgpu-vfio
//! avail=2 mdpy-vga           per type, available_instances before the operation (only for
//!                            drivers whose count the simulator keeps in the files)
//! made=bus/mdev/drivers/mdpy (op=create) a directory the create makes that did not exist
//! path=devices/…/nvidia/vgpu_params                     (op=write) the attribute written
//! end
//! ```
//!
//! PCI operations (`binding.rs`, `sriov.rs`, `vgpu.rs`) name their devices instead:
//!
//! ```text
//! op=bind                    bind (a bind, drivers_probe or new_id write: undone) | unbind
//!                            (completed) | sriov-enable (undone) | sriov-disable (completed) |
//!                            vgpu-type (a set undone, a clear completed)
//! pid=4242
//! driver=vfio-pci            bind/unbind: the driver
//! dev=devices/pci0000:40/0000:40:01.1/0000:41:00.0      one line per device concerned
//! count=32                   sriov-*: the number of VFs made or destroyed
//! id=10de 26b9               bind from new_id: the dynamic id added (removed by the undo)
//! old=0                      vgpu-type: current_vgpu_type before and after
//! new=1150
//! made=dev/vfio/devices      directories the operation makes that did not exist
//! end
//! ```
//!
//! A journal without its `end` line was cut short while being written, before any side effect:
//! it is dropped. No fsync: this models the death of a process, not of the machine.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::fsx;

/// The simulator's state directory below the root.
pub(crate) const STATE_DIR: &str = "run/vgpud-simulator";
/// The lock file's name in [`STATE_DIR`].
pub(crate) const LOCK_FILE: &str = "lock";
/// The journal's name in [`STATE_DIR`].
pub(crate) const JOURNAL_FILE: &str = "journal";

const HEADER: &str = "vgpud-simulator journal 1";
const END: &str = "end";

/// The tree lock within this process: the threads of a process (and the simulators it holds,
/// whatever tree they work on) take it, in the same mode, before the file lock, so writers
/// that exclude each other wait here rather than on the file.
static TREE_LOCK: RwLock<()> = RwLock::new(());

/// The process-wide half of a tree lock (held only to be dropped).
#[allow(dead_code)]
enum Held {
    Shared(RwLockReadGuard<'static, ()>),
    Exclusive(RwLockWriteGuard<'static, ()>),
}

/// Both tree locks, held until dropped.
pub(crate) struct Guard {
    // Field order is drop order: the file lock goes before the process lock.
    _flock: Flock<File>,
    _held: Held,
}

/// Takes the tree's lock exclusive: the process-wide lock, then `flock` on `state_dir/lock`
/// (both created if missing). A lock file deleted and re-created meanwhile (a simulated reboot
/// removes `run/`) is noticed by comparing inodes, and locked again.
pub(crate) fn lock(state_dir: &Path) -> io::Result<Guard> {
    let held = Held::Exclusive(TREE_LOCK.write().unwrap_or_else(PoisonError::into_inner));
    lock_file(state_dir, held, FlockArg::LockExclusive)
}

/// Takes the tree's lock shared (see [`lock`]).
pub(crate) fn lock_shared(state_dir: &Path) -> io::Result<Guard> {
    let held = Held::Shared(TREE_LOCK.read().unwrap_or_else(PoisonError::into_inner));
    lock_file(state_dir, held, FlockArg::LockShared)
}

fn lock_file(state_dir: &Path, held: Held, mode: FlockArg) -> io::Result<Guard> {
    let path = state_dir.join(LOCK_FILE);
    let mut tries = 0;
    loop {
        fs::create_dir_all(state_dir)?;
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let flock = flock_wait(file, mode)?;
        let meta = flock.metadata()?;
        let same = fs::metadata(&path)
            .map(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
            .unwrap_or(false);
        tries += 1;
        if same || tries >= 16 {
            return Ok(Guard {
                _flock: flock,
                _held: held,
            });
        }
    }
}

/// `flock` in `mode`, waiting as long as it takes; retried when a signal interrupts the wait.
fn flock_wait(mut file: File, mode: FlockArg) -> io::Result<Flock<File>> {
    loop {
        match Flock::lock(file, mode) {
            Ok(l) => return Ok(l),
            Err((f, Errno::EINTR)) => file = f,
            Err((_, e)) => return Err(io::Error::from(e)),
        }
    }
}

/// An mdev parent's lock (see the module doc), held until dropped.
pub(crate) struct DirLock {
    _flock: Flock<File>,
}

/// Takes the exclusive `flock` of directory `dir`, waiting for it.
pub(crate) fn lock_dir(dir: &Path) -> io::Result<DirLock> {
    let file = File::open(dir)?;
    Ok(DirLock {
        _flock: flock_wait(file, FlockArg::LockExclusive)?,
    })
}

/// Takes the exclusive `flock` of directory `dir` if nobody holds it; `None` if somebody does
/// (or the directory is gone).
pub(crate) fn try_lock_dir(dir: &Path) -> io::Result<Option<DirLock>> {
    let file = match File::open(dir) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(Some(DirLock { _flock: l })),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io::Error::from(e)),
    }
}

thread_local! {
    /// How many [`BusLock`]s this thread holds (the bus lock is re-entrant within a thread).
    static BUS_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The bus lock (see the module doc), held until dropped; re-entrant within a thread.
pub(crate) struct BusLock {
    flock: Option<Flock<File>>,
}

impl BusLock {
    /// Whether this is the thread's outermost hold (the one that swept the journals).
    pub(crate) fn is_outermost(&self) -> bool {
        self.flock.is_some()
    }
}

impl Drop for BusLock {
    fn drop(&mut self) {
        BUS_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        // The flock goes with `self.flock`.
    }
}

/// Takes the bus lock of the tree whose state directory is `state_dir`.
pub(crate) fn lock_bus(state_dir: &Path) -> io::Result<BusLock> {
    if BUS_DEPTH.with(std::cell::Cell::get) > 0 {
        BUS_DEPTH.with(|d| d.set(d.get() + 1));
        return Ok(BusLock { flock: None });
    }
    fs::create_dir_all(state_dir)?;
    let flock = flock_wait(File::open(state_dir)?, FlockArg::LockExclusive)?;
    BUS_DEPTH.with(|d| d.set(1));
    Ok(BusLock { flock: Some(flock) })
}

/// What the journal says is in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// A UUID written to `<type>/create`.
    Create,
    /// `1` written to `<mdev>/remove`.
    Remove,
    /// A value written to a plain attribute.
    Write,
    /// Devices bound to a driver (`bind`, `drivers_probe`, `new_id`): undone by recovery.
    Bind,
    /// Devices unbound from a driver: completed by recovery.
    Unbind,
    /// VFs made by a `sriov_numvfs` write: undone by recovery.
    SriovEnable,
    /// VFs destroyed by a `sriov_numvfs` write: completed by recovery.
    SriovDisable,
    /// A `current_vgpu_type` write: a set is undone, a clear completed.
    VgpuType,
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Remove => "remove",
            Op::Write => "write",
            Op::Bind => "bind",
            Op::Unbind => "unbind",
            Op::SriovEnable => "sriov-enable",
            Op::SriovDisable => "sriov-disable",
            Op::VgpuType => "vgpu-type",
        }
    }

    fn parse(s: &str) -> Option<Op> {
        [
            Op::Create,
            Op::Remove,
            Op::Write,
            Op::Bind,
            Op::Unbind,
            Op::SriovEnable,
            Op::SriovDisable,
            Op::VgpuType,
        ]
        .into_iter()
        .find(|op| op.name() == s)
    }

    /// Whether the op is about PCI devices (its record names `dev`s).
    fn is_pci(&self) -> bool {
        !matches!(self, Op::Create | Op::Remove | Op::Write)
    }
}

/// One journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) op: Op,
    /// The writing process.
    pub(crate) pid: u32,
    /// Device operations: the device's UUID.
    pub(crate) uuid: String,
    /// Device operations: the mdev parent's directory (absolute).
    pub(crate) parent: PathBuf,
    /// Device operations: what is known of the device.
    pub(crate) type_id: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) driver: Option<String>,
    /// Device operations on counter-model parents: `available_instances` before, per type.
    pub(crate) avail: Vec<(String, u32)>,
    /// `Create`: directories the create makes that did not exist, parents first (absolute).
    pub(crate) made: Vec<PathBuf>,
    /// `Write`: the attribute file (absolute).
    pub(crate) path: PathBuf,
    /// PCI operations: the device directories concerned (absolute).
    pub(crate) devs: Vec<PathBuf>,
    /// `SriovEnable`/`SriovDisable`: the number of VFs.
    pub(crate) count: Option<u32>,
    /// `Bind` from `new_id`: the dynamic id added.
    pub(crate) id: Option<String>,
    /// `VgpuType`: the value before and after.
    pub(crate) old: Option<String>,
    pub(crate) new: Option<String>,
    /// `VgpuType` in heterogeneous mode: the placement id the new vGPU takes.
    pub(crate) placement: Option<u64>,
}

impl Entry {
    /// A device operation by this process.
    pub(crate) fn device(op: Op, uuid: &str, parent: &Path) -> Entry {
        Entry {
            op,
            pid: std::process::id(),
            uuid: uuid.to_string(),
            parent: parent.to_path_buf(),
            type_id: None,
            group: None,
            driver: None,
            avail: Vec::new(),
            made: Vec::new(),
            path: PathBuf::new(),
            devs: Vec::new(),
            count: None,
            id: None,
            old: None,
            new: None,
            placement: None,
        }
    }

    /// A PCI operation by this process on `devs`.
    pub(crate) fn pci(op: Op, devs: Vec<PathBuf>) -> Entry {
        Entry {
            devs,
            ..Entry::device(op, "", Path::new(""))
        }
    }

    /// A plain attribute write by this process.
    pub(crate) fn write(path: &Path) -> Entry {
        Entry {
            path: path.to_path_buf(),
            ..Entry::device(Op::Write, "", Path::new(""))
        }
    }

    /// The record as text, paths relative to `sys` where they are below it. `EINVAL` for a
    /// value with a newline, which the line format cannot carry.
    fn render(&self, sys: &Path) -> io::Result<String> {
        let rel = |p: &Path| -> String {
            p.strip_prefix(sys)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned()
        };
        let mut lines = vec![HEADER.to_string()];
        lines.push(format!("op={}", self.op.name()));
        lines.push(format!("pid={}", self.pid));
        if self.op.is_pci() {
            if let Some(d) = &self.driver {
                lines.push(format!("driver={d}"));
            }
            for d in &self.devs {
                lines.push(format!("dev={}", rel(d)));
            }
            if let Some(n) = self.count {
                lines.push(format!("count={n}"));
            }
            if let Some(at) = self.placement {
                lines.push(format!("placement={at}"));
            }
            for (key, value) in [("id", &self.id), ("old", &self.old), ("new", &self.new)] {
                if let Some(v) = value {
                    lines.push(format!("{key}={v}"));
                }
            }
            for d in &self.made {
                lines.push(format!("made={}", rel(d)));
            }
        } else if self.op == Op::Write {
            lines.push(format!("path={}", rel(&self.path)));
        } else {
            lines.push(format!("uuid={}", self.uuid));
            lines.push(format!("parent={}", rel(&self.parent)));
            for (key, value) in [
                ("type", &self.type_id),
                ("group", &self.group),
                ("driver", &self.driver),
            ] {
                if let Some(v) = value {
                    lines.push(format!("{key}={v}"));
                }
            }
            for (t, n) in &self.avail {
                lines.push(format!("avail={n} {t}"));
            }
            for d in &self.made {
                lines.push(format!("made={}", rel(d)));
            }
        }
        lines.push(END.to_string());
        if lines.iter().any(|l| l.contains('\n')) {
            return Err(fsx::errno(Errno::EINVAL));
        }
        let mut text = lines.join("\n");
        text.push('\n');
        Ok(text)
    }

    /// Reads a record back; `None` for a journal cut short or not understood.
    fn parse(text: &str, sys: &Path) -> Option<Entry> {
        let mut lines = text.lines();
        if lines.next()? != HEADER {
            return None;
        }
        let mut entry = Entry::device(Op::Write, "", Path::new(""));
        let (mut op, mut pid, mut complete) = (None, None, false);
        for line in lines {
            if line == END {
                complete = true;
                break;
            }
            let (key, value) = line.split_once('=')?;
            match key {
                "op" => op = Some(Op::parse(value)?),
                "pid" => pid = value.parse().ok(),
                "uuid" => entry.uuid = value.to_string(),
                "parent" => entry.parent = sys.join(value),
                "type" => entry.type_id = Some(value.to_string()),
                "group" => entry.group = Some(value.to_string()),
                "driver" => entry.driver = Some(value.to_string()),
                "avail" => {
                    let (n, t) = value.split_once(' ')?;
                    entry.avail.push((t.to_string(), n.parse().ok()?));
                }
                "made" => entry.made.push(sys.join(value)),
                "path" => entry.path = sys.join(value),
                "dev" => entry.devs.push(sys.join(value)),
                "count" => entry.count = Some(value.parse().ok()?),
                "placement" => entry.placement = Some(value.parse().ok()?),
                "id" => entry.id = Some(value.to_string()),
                "old" => entry.old = Some(value.to_string()),
                "new" => entry.new = Some(value.to_string()),
                _ => {}
            }
        }
        entry.op = op?;
        entry.pid = pid?;
        let usable = match entry.op {
            Op::Write => entry.path.file_name().is_some(),
            Op::Create | Op::Remove => {
                !entry.uuid.is_empty() && !entry.uuid.contains('/') && entry.parent.is_absolute()
            }
            Op::Bind | Op::Unbind => entry.driver.is_some(),
            Op::SriovEnable | Op::SriovDisable => entry.devs.len() == 1 && entry.count.is_some(),
            Op::VgpuType => entry.devs.len() == 1 && entry.old.is_some() && entry.new.is_some(),
        };
        (complete && usable).then_some(entry)
    }
}

/// Where the tree's journal is.
pub(crate) fn tree_journal(state_dir: &Path) -> PathBuf {
    state_dir.join(JOURNAL_FILE)
}

/// Where the journal of the parent lock on `dir` (below `sys`) is.
pub(crate) fn parent_journal(state_dir: &Path, sys: &Path, dir: &Path) -> PathBuf {
    let rel = dir.strip_prefix(sys).unwrap_or(dir).to_string_lossy();
    let mut key = String::with_capacity(rel.len());
    for c in rel.chars() {
        match c {
            '%' => key.push_str("%25"),
            '/' => key.push_str("%2F"),
            c => key.push(c),
        }
    }
    state_dir.join(format!("{JOURNAL_FILE}.{key}"))
}

/// The parent journals there are.
pub(crate) fn parent_journals(state_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let prefix = format!("{JOURNAL_FILE}.");
    Ok(fsx::list(state_dir)?
        .into_iter()
        .filter(|n| n.starts_with(&prefix) && !n.starts_with(&format!("{prefix}vgpud-")))
        .map(|n| state_dir.join(n))
        .collect())
}

/// Writes the journal `path`: the operation may start its side effects once this returns.
pub(crate) fn begin(path: &Path, sys: &Path, entry: &Entry) -> io::Result<()> {
    let text = entry.render(sys)?;
    fsx::step()?;
    fs::write(path, text)?;
    fsx::step()
}

/// Deletes the journal `path`: the operation is complete.
pub(crate) fn end(path: &Path) -> io::Result<()> {
    fsx::step()?;
    fsx::remove_quiet(path)
}

/// What the journal holds: nothing, a record to finish, or a torn record to drop.
pub(crate) enum Pending {
    None,
    Torn,
    Entry(Box<Entry>),
}

/// Reads the journal `path`, if there is one.
pub(crate) fn pending(path: &Path, sys: &Path) -> io::Result<Pending> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(match Entry::parse(&text, sys) {
            Some(e) => Pending::Entry(Box::new(e)),
            None => Pending::Torn,
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Pending::None),
        // Not valid UTF-8: not a journal this simulator wrote completely.
        Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(Pending::Torn),
        Err(e) => Err(e),
    }
}

/// Whether the journal `path` exists (cheap check before parsing).
pub(crate) fn exists(path: &Path) -> bool {
    fsx::exists_nofollow(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Entry {
        let mut e = Entry::device(
            Op::Create,
            "11111111-2222-4333-8444-555555555555",
            Path::new("/r/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"),
        );
        e.pid = 4242;
        e.type_id = Some("nvidia-259".into());
        e.group = Some("4".into());
        e.driver = Some("nvidia-vgpu-vfio".into());
        e.avail = vec![("mdpy-vga".into(), 2), ("mdpy xga".into(), 0)];
        e.made = vec![
            PathBuf::from("/r/sys/bus/mdev/drivers/mdpy"),
            PathBuf::from("/r/dev/vfio"),
        ];
        e
    }

    #[test]
    fn records_round_trip() {
        let sys = Path::new("/r/sys");
        let e = sample();
        let text = e.render(sys).expect("render");
        assert!(text.starts_with(
            "vgpud-simulator journal 1\nop=create\npid=4242\n\
             uuid=11111111-2222-4333-8444-555555555555\n\
             parent=devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0\ntype=nvidia-259\n"
        ));
        assert!(text.ends_with(
            "avail=2 mdpy-vga\navail=0 mdpy xga\nmade=bus/mdev/drivers/mdpy\nmade=/r/dev/vfio\nend\n"
        ));
        assert_eq!(Entry::parse(&text, sys), Some(e));
        // The tree may have moved since: paths are read relative to the sys given now.
        let moved = Entry::parse(&text, Path::new("/m/sys")).expect("parse");
        assert!(moved.parent.starts_with("/m/sys/devices"));

        let mut w = Entry::write(Path::new("/r/sys/devices/x/u/nvidia/vgpu_params"));
        w.pid = 7;
        let text = w.render(sys).expect("render");
        assert_eq!(
            text,
            "vgpud-simulator journal 1\nop=write\npid=7\npath=devices/x/u/nvidia/vgpu_params\nend\n"
        );
        assert_eq!(Entry::parse(&text, sys), Some(w));
    }

    #[test]
    fn pci_records_round_trip() {
        let sys = Path::new("/r/sys");
        let mut e = Entry::pci(
            Op::Bind,
            vec![
                PathBuf::from("/r/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0"),
                PathBuf::from("/r/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.4"),
            ],
        );
        e.pid = 9;
        e.driver = Some("pci-pf-stub".into());
        e.id = Some("10de 26b9".into());
        e.made = vec![PathBuf::from("/r/dev/vfio/devices")];
        let text = e.render(sys).expect("render");
        assert_eq!(
            text,
            "vgpud-simulator journal 1\nop=bind\npid=9\ndriver=pci-pf-stub\n\
             dev=devices/pci0000:40/0000:40:01.1/0000:41:00.0\n\
             dev=devices/pci0000:40/0000:40:01.1/0000:41:00.4\nid=10de 26b9\n\
             made=/r/dev/vfio/devices\nend\n"
        );
        assert_eq!(Entry::parse(&text, sys), Some(e));
        let mut v = Entry::pci(Op::VgpuType, vec![PathBuf::from("/r/sys/devices/x")]);
        v.old = Some("0".into());
        v.new = Some("1150".into());
        let text = v.render(sys).expect("render");
        assert_eq!(Entry::parse(&text, sys), Some(v.clone()));
        v.old = None;
        let text = v.render(sys).expect("render");
        assert_eq!(Entry::parse(&text, sys), None, "incomplete");
        let mut s = Entry::pci(Op::SriovEnable, vec![PathBuf::from("/r/sys/devices/x")]);
        s.count = Some(32);
        let text = s.render(sys).expect("render");
        assert!(text.contains("op=sriov-enable\n"));
        assert_eq!(Entry::parse(&text, sys), Some(s));
    }

    #[test]
    fn torn_and_foreign_records_are_not_used() {
        let sys = Path::new("/r/sys");
        let text = sample().render(sys).expect("render");
        // Every prefix short of the end line is a record cut short.
        let end = text.len() - "end\n".len();
        for cut in 0..end {
            assert_eq!(Entry::parse(&text[..cut], sys), None, "{cut}");
        }
        assert!(Entry::parse(&text[..text.len() - 1], sys).is_some());
        assert_eq!(Entry::parse("something else\nend\n", sys), None);
        assert_eq!(
            Entry::parse("vgpud-simulator journal 1\nop=rename\npid=1\nend\n", sys),
            None
        );
        let mut bad = sample();
        bad.type_id = Some("a\nb".into());
        assert_eq!(
            bad.render(sys).expect_err("newline").raw_os_error(),
            Some(Errno::EINVAL as i32)
        );
    }

    #[test]
    fn the_lock_file_is_flocked_while_held() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join(STATE_DIR);
        let guard = lock(&state).expect("lock");
        let other = File::open(state.join(LOCK_FILE)).expect("open");
        let (other, errno) =
            Flock::lock(other, FlockArg::LockExclusiveNonblock).expect_err("held elsewhere");
        assert_eq!(errno, Errno::EWOULDBLOCK);
        drop(guard);
        let held = Flock::lock(other, FlockArg::LockExclusiveNonblock).expect("released");
        drop(held);
        // A lock file deleted under the holder's feet is replaced and locked anew.
        fs::remove_dir_all(dir.path().join("run")).expect("rm run");
        let guard = lock(&state).expect("lock again");
        let other = File::open(state.join(LOCK_FILE)).expect("open");
        assert!(Flock::lock(other, FlockArg::LockExclusiveNonblock).is_err());
        drop(guard);
    }
}
