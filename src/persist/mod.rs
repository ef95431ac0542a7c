//! What vgpud keeps on disk, and how it writes it so that a crash or power loss never leaves a
//! torn file:
//! - [`mdevctl`]: persistent mdev definitions in mdevctl's own format (`etc/mdevctl.d`), so
//!   mdevctl and libvirt see them;
//! - [`state`]: what mdevctl cannot express (owner, creation time), one versioned file per
//!   device under `var/lib/vgpud/devices/`;
//! - [`intent`]: the journal of host changes in progress (`var/lib/vgpud/intents/`), replayed
//!   at start so that a `kill -9` at any instant is completed or rolled back.
//!
//! Every write goes to a temporary name that is not a UUID, is fsynced, renamed over the
//! target, and the directory is fsynced; removals fsync the directory too. Files are
//! created (exclusively, `O_NOFOLLOW`), renamed and removed relative to a directory opened
//! without following a link at any of vgpud's own directories ([`open_dir_in`]): a link
//! there is refused and reported, never followed out of the tree. A file system mounted
//! read-only is [`PersistError::ReadOnly`]: vgpud serves what it read and refuses changes.
//!
//! Every read goes through one defensive reader, [`read_state_file`]: no links followed, no
//! blocking (a FIFO never hangs vgpud), regular files of at most [`MAX_STATE_FILE_BYTES`],
//! UTF-8 only. A file that fails it, or does not parse, is moved aside to `<name>.bad` by
//! [`set_aside`] and reported once, and the rest is served: one bad file never stops vgpud.

pub mod intent;
pub mod journal;
pub mod mdevctl;
pub mod own_changes;
#[cfg(test)]
mod power_cut;
pub mod sriov;
pub mod state;
pub mod storage;

use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// An error of the persistence layer, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// A file or directory could not be read, written or removed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// A file could not be written because its file system is mounted read-only: vgpud
    /// serves what it knows and refuses every change.
    #[error(
        "{action} {path}: the file system is read-only; vgpud serves reads and refuses \
         changes until it is writable"
    )]
    ReadOnly {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// A file could not be parsed.
    #[error("{path} is malformed: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Result of persistence operations.
pub type PersistResult<T> = Result<T, PersistError>;

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PersistError + 'a {
    move |source| match source.raw_os_error() {
        Some(code) if code == Errno::EROFS as i32 => PersistError::ReadOnly {
            action,
            path: path.to_path_buf(),
        },
        _ => PersistError::Io {
            action,
            path: path.to_path_buf(),
            source,
        },
    }
}

fn sync_dir(dir: &Path) -> PersistResult<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing directory", dir))
}

/// How vgpud opens a directory it writes in.
const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Where vgpud's own directories start below an ancestor of theirs: everything below
/// `var/lib` (`var/lib/vgpud` and its directories) and below `etc/mdevctl.d` (the parents'
/// directories of definitions). Of any other directory, only the last component is vgpud's.
const OWN_BELOW: [&str; 2] = ["var/lib", "etc/mdevctl.d"];

/// The ancestor of `dir` below which every directory is vgpud's own ([`OWN_BELOW`]), and
/// the components from there to `dir`.
fn own_part(dir: &Path) -> (&Path, Vec<&std::ffi::OsStr>) {
    let anchor = dir
        .ancestors()
        .skip(1)
        .find(|a| OWN_BELOW.iter().any(|own| a.ends_with(own)))
        .or_else(|| dir.parent())
        .unwrap_or(dir);
    let below = dir
        .strip_prefix(anchor)
        .map(|rel| rel.iter().collect())
        .unwrap_or_default();
    (anchor, below)
}

/// Opens the directory `dir` to write in it (creating it first when `create`), without
/// following a link at any of vgpud's own components ([`own_part`]): those are never links,
/// and one that is is refused, never followed out of the tree. The ancestors above them
/// (`/etc`, `/var/lib`, a test's root) are the operator's and may be links. The files are
/// then made, renamed and removed relative to the descriptor.
fn open_dir_in(dir: &Path, create: bool) -> PersistResult<OwnedFd> {
    let (anchor, below) = own_part(dir);
    if create {
        create_dirs(anchor)?;
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut fd = nix::fcntl::open(anchor, flags, Mode::empty())
        .map_err(|e| io_err("opening directory", anchor)(e.into()))?;
    let mut at = anchor.to_path_buf();
    for name in below {
        at.push(name);
        let mut opened = nix::fcntl::openat(&fd, name, DIR_FLAGS, Mode::empty());
        if create && matches!(opened, Err(Errno::ENOENT)) {
            make_dir(&fd, name, &at)?;
            opened = nix::fcntl::openat(&fd, name, DIR_FLAGS, Mode::empty());
        }
        fd = match opened {
            Ok(next) => next,
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(PersistError::Malformed {
                    path: at,
                    reason: "a symbolic link or another file where a directory should be \
                             (refused, not followed)"
                        .into(),
                })
            }
            Err(e) => return Err(io_err("opening directory", &at)(e.into())),
        };
    }
    Ok(fd)
}

/// Makes the directory `name` in `parent` (at `path`), mode 0755 whatever the umask (the
/// unit sets UMask=0077), as mdevctl's own directories are, and syncs `parent`.
fn make_dir(parent: &OwnedFd, name: &std::ffi::OsStr, path: &Path) -> PersistResult<()> {
    own_changes::note(path);
    match nix::sys::stat::mkdirat(parent, name, Mode::from_bits_truncate(0o755)) {
        Ok(()) => {}
        // Made meanwhile (or a link, which the caller refuses).
        Err(Errno::EEXIST) => {
            own_changes::cancel(path);
            return Ok(());
        }
        Err(e) => {
            own_changes::cancel(path);
            return Err(io_err("creating directory", path)(e.into()));
        }
    }
    let made = nix::fcntl::openat(parent, name, DIR_FLAGS, Mode::empty())
        .and_then(|fd| nix::sys::stat::fchmod(fd, Mode::from_bits_truncate(0o755)));
    made.and_then(|()| nix::unistd::fsync(parent))
        .map_err(|e| io_err("setting up directory", path)(e.into()))
}

/// [`open_dir_in`] of a directory that exists.
fn open_dir(dir: &Path) -> PersistResult<OwnedFd> {
    open_dir_in(dir, false)
}

/// [`open_dir_in`], creating the directory and its missing ancestors first.
fn open_or_create_dir(dir: &Path) -> PersistResult<OwnedFd> {
    open_dir_in(dir, true)
}

/// Creates `dir` (an ancestor of vgpud's directories, see [`open_dir_in`]) and its missing
/// ancestors, syncing each parent of a new directory.
fn create_dirs(dir: &Path) -> PersistResult<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent)?;
    }
    own_changes::note(dir);
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            own_changes::cancel(dir);
            return Ok(());
        }
        Err(e) => {
            own_changes::cancel(dir);
            return Err(io_err("creating directory", dir)(e));
        }
    }
    // 0755 whatever the umask (the unit sets UMask=0077), as mdevctl's own directories are.
    fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(io_err("setting the mode of", dir))?;
    match dir.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// The directory and file name of `path`.
fn split(path: &Path) -> PersistResult<(&Path, &std::ffi::OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok((dir, name)),
        _ => Err(PersistError::Malformed {
            path: path.to_path_buf(),
            reason: "no parent directory".into(),
        }),
    }
}

/// One file of a batch of atomic writes.
#[derive(Debug, Clone)]
pub struct FileWrite {
    /// Where it goes.
    pub path: PathBuf,
    /// What it holds.
    pub content: Vec<u8>,
    /// Its mode (permission bits only: set-uid, set-gid and sticky bits are dropped).
    pub mode: u32,
}

/// Writes `content` to `path` atomically and durably: a temporary file named
/// `.<name>.vgpud-tmp-<pid>-<n>` (never a UUID, so mdevctl skips it) in the same directory,
/// fsync, rename over `path`, fsync of the directory.
pub fn write_atomic(path: &Path, content: &[u8], mode: u32) -> PersistResult<()> {
    write_all_atomic(&[FileWrite {
        path: path.to_path_buf(),
        content: content.to_vec(),
        mode,
    }])
}

/// Writes a state file of vgpud's (mode 0644) atomically and durably, making its directory
/// first if need be.
pub fn write_state_file(path: &Path, content: &[u8]) -> PersistResult<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| PersistError::Io {
            action: "creating",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    write_atomic(path, content, 0o644)
}

/// Writes several files, each atomically, and all durably with as few waits for the disk as
/// the file system allows: every temporary file is written first, then all are fsynced,
/// renamed into place, and each directory fsynced once. ext4 commits fsyncs that are issued
/// together in one journal transaction, so a batch costs about one commit, and the
/// concurrent batches of other requests join the same commits (group commit). A crash leaves
/// each file either old or new, never torn.
pub fn write_all_atomic(files: &[FileWrite]) -> PersistResult<()> {
    write_files(files, true)
}

/// Writes and removes vgpud's definitions and records as one durable change, through the
/// journal ([`journal::Journal::commit`]): concurrent callers share one sync of the disk.
/// Every path must be below `etc/mdevctl.d` or `var/lib/vgpud/devices` of `host`.
pub fn commit(
    host: &crate::host::Host,
    write: &[FileWrite],
    remove: &[PathBuf],
) -> PersistResult<()> {
    journal::of(host).commit(write, remove)
}

/// [`write_all_atomic`]; `durable` false skips the syncs (each file is still replaced whole,
/// by a rename), for files whose durability the journal provides.
pub(crate) fn write_files(files: &[FileWrite], durable: bool) -> PersistResult<()> {
    write_files_reusing(files, durable, None)
}

/// A file written under its temporary name in its directory, not yet renamed into place.
struct Staged<'a> {
    dir: OwnedFd,
    tmp: String,
    path: &'a Path,
    file: Option<fs::File>,
}

impl Staged<'_> {
    fn tmp_path(&self) -> PathBuf {
        self.path.with_file_name(&self.tmp)
    }

    fn discard(&self) {
        let _ = nix::unistd::unlinkat(
            &self.dir,
            self.tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
}

/// [`write_files`], taking the temporary files from the spares of `spares` (a directory, see
/// [`SPARES`]) where it has one on the same file system.
pub(crate) fn write_files_reusing(
    files: &[FileWrite],
    durable: bool,
    spares: Option<&Path>,
) -> PersistResult<()> {
    let mut staged: Vec<Staged<'_>> = Vec::with_capacity(files.len());
    let discard = |staged: &[Staged<'_>]| staged.iter().for_each(Staged::discard);
    for file in files {
        match stage(file, spares) {
            Ok(s) => staged.push(s),
            Err(e) => {
                discard(&staged);
                return Err(e);
            }
        }
    }
    for s in staged.iter().filter(|_| durable) {
        if let Some(Err(e)) = s.file.as_ref().map(fs::File::sync_all) {
            discard(&staged);
            return Err(io_err("syncing", &s.tmp_path())(e));
        }
    }
    // Closed before the renames: a close after one would be an event on the file's new name.
    for s in &mut staged {
        s.file = None;
    }
    for (i, s) in staged.iter().enumerate() {
        own_changes::note(s.path);
        let name = s.path.file_name().unwrap_or_default();
        if let Err(e) = nix::fcntl::renameat(&s.dir, s.tmp.as_str(), &s.dir, name) {
            own_changes::cancel(s.path);
            discard(&staged[i..]);
            return Err(io_err("renaming into place", s.path)(e.into()));
        }
    }
    if !durable {
        return Ok(());
    }
    sync_parents(staged.iter().map(|s| s.path))
}

/// Writes `file` under a temporary name of its directory: created exclusively without
/// following a link (or a spare renamed there), given its mode exactly, and filled.
fn stage<'a>(file: &'a FileWrite, spares: Option<&Path>) -> PersistResult<Staged<'a>> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (dir, name) = split(&file.path)?;
    let dir_fd = open_or_create_dir(dir)?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = format!(
        ".{}.vgpud-tmp-{}-{n}",
        name.to_string_lossy(),
        std::process::id()
    );
    let mode = file.mode & 0o777;
    let reused = spares.and_then(|s| reuse_spare(s, &dir_fd, &tmp));
    let fresh = reused.is_none();
    let opened = match reused {
        Some(f) => Ok(f),
        None => nix::fcntl::openat(
            &dir_fd,
            tmp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )
        .map(fs::File::from)
        .map_err(io::Error::from),
    };
    let mut staged = Staged {
        dir: dir_fd,
        tmp,
        path: &file.path,
        file: None,
    };
    let written = opened
        .map_err(io_err("creating", &staged.tmp_path()))
        .and_then(|mut f| {
            // The mode exactly, whatever the umask (the unit sets UMask=0077, which leaves
            // 0600 as it is) or the spare's mode.
            if !fresh || mode != 0o600 {
                f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
                    .map_err(io_err("setting the mode of", &staged.tmp_path()))?;
            }
            f.write_all(&file.content)
                .map_err(io_err("writing", &staged.tmp_path()))
                .map(|()| f)
        });
    match written {
        Ok(f) => {
            staged.file = Some(f);
            Ok(staged)
        }
        Err(e) => {
            staged.discard();
            Err(e)
        }
    }
}

/// Files vgpud removed, kept to be written again instead of a new file: on ext4 a storm that
/// creates and deletes a file per device makes every new inode's allocation scan past the
/// recently deleted ones (`recently_deleted`), slower with each storm; a reused file
/// allocates nothing. They are kept in vgpud's own directory (`var/lib/vgpud/spares`, see
/// [`SPARES_DIR`]), never next to the files other tools read (mdevctl warns about every
/// file of `etc/mdevctl.d/<parent>/` that is not a definition), and renamed from there into
/// the directory of a write: so only directories on the same file system as it reuse them
/// (where `/etc` and `/var` are apart, definitions are new files each time). A spare is
/// emptied when it is retired. At most [`MAX_SPARES`]; the start's sweep removes them
/// ([`forget_spares`]). By spares directory, the names of its spares.
static SPARES: std::sync::Mutex<Vec<(PathBuf, Vec<String>)>> = std::sync::Mutex::new(Vec::new());

/// The most removed files kept for reuse.
pub const MAX_SPARES: usize = 1024;

/// Where the spares of a root are, below it.
pub(crate) const SPARES_DIR: &str = "var/lib/vgpud/spares";

/// Whether two open files are on one file system (a rename between them is possible).
fn same_fs(a: &OwnedFd, b: &OwnedFd) -> bool {
    match (nix::sys::stat::fstat(a), nix::sys::stat::fstat(b)) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev,
        _ => false,
    }
}

/// A spare of `spares`, renamed to `tmp` in the directory `dir`, opened for writing and
/// emptied, if there is one and the two directories are on one file system.
fn reuse_spare(spares: &Path, dir: &OwnedFd, tmp: &str) -> Option<fs::File> {
    let spares_fd = open_dir(spares).ok()?;
    if !same_fs(&spares_fd, dir) {
        return None;
    }
    loop {
        let spare = {
            let mut all = SPARES.lock().unwrap_or_else(|e| e.into_inner());
            all.iter_mut().find(|(d, _)| d == spares)?.1.pop()?
        };
        if nix::fcntl::renameat(&spares_fd, spare.as_str(), dir, tmp).is_err() {
            // Gone: take the next, or make a new file.
            continue;
        }
        let opened = nix::fcntl::openat(
            dir,
            tmp,
            OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map(fs::File::from);
        match opened {
            Ok(f)
                if f.metadata().is_ok_and(|m| {
                    use std::os::unix::fs::MetadataExt;
                    m.is_file() && m.nlink() == 1
                }) && f.set_len(0).is_ok() =>
            {
                return Some(f)
            }
            // Replaced by something else: not written to.
            _ => {
                let _ = nix::unistd::unlinkat(dir, tmp, nix::unistd::UnlinkatFlags::NoRemoveDir);
            }
        }
    }
}

/// Removes `path` as [`remove_lazy`] does, but keeps its file for reuse by a later write
/// (moved to `spares`, see [`SPARES`]) while there are fewer than [`MAX_SPARES`] and the two
/// directories are on one file system. For the files the journal writes, whose removal it
/// makes durable.
pub(crate) fn retire(path: &Path, spares: &Path) -> PersistResult<bool> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (dir, name) = split(path)?;
    let room = {
        let all = SPARES.lock().unwrap_or_else(|e| e.into_inner());
        all.iter()
            .find(|(d, _)| d == spares)
            .is_none_or(|(_, s)| s.len() < MAX_SPARES)
    };
    let dirs = open_dir(dir).and_then(|d| Ok((d, open_or_create_dir(spares)?)));
    let Some((dir_fd, spares_fd)) = dirs.ok().filter(|(d, s)| room && same_fs(d, s)) else {
        return remove_lazy(path);
    };
    let regular = nix::sys::stat::fstatat(&dir_fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|st| {
            use nix::sys::stat::SFlag;
            st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits() && st.st_nlink == 1
        });
    if !regular {
        return remove_lazy(path);
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let spare = format!(".spare.vgpud-tmp-{}-{n}", std::process::id());
    own_changes::note(path);
    match nix::fcntl::renameat(&dir_fd, name, &spares_fd, spare.as_str()) {
        Ok(()) => {
            // What the removed file said does not linger in its spare.
            let emptied = nix::fcntl::openat(
                &spares_fd,
                spare.as_str(),
                OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map(fs::File::from)
            .is_ok_and(|f| f.set_len(0).is_ok());
            if emptied {
                let mut all = SPARES.lock().unwrap_or_else(|e| e.into_inner());
                match all.iter_mut().find(|(d, _)| d == spares) {
                    Some((_, s)) => s.push(spare),
                    None => all.push((spares.to_path_buf(), vec![spare])),
                }
            }
            Ok(true)
        }
        Err(Errno::ENOENT) => {
            own_changes::cancel(path);
            Ok(false)
        }
        Err(e) => {
            own_changes::cancel(path);
            Err(io_err("removing", path)(e.into()))
        }
    }
}

/// Forgets the spares of `root` and removes their files (at start, with the other
/// temporary files).
pub(crate) fn forget_spares(root: &Path) {
    let dir = root.join(SPARES_DIR);
    SPARES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(d, _)| *d != dir);
    if let Err(e) = sweep_temporaries(&dir) {
        tracing::warn!(error = %e, "could not sweep the spare files");
    }
}

/// Syncs the directory of each path, each directory once.
fn sync_parents<'a>(paths: impl Iterator<Item = &'a Path>) -> PersistResult<()> {
    let mut dirs: Vec<&Path> = Vec::new();
    for dir in paths.filter_map(Path::parent) {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    for dir in dirs {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Removes every file of `paths` that exists, then syncs each directory once.
pub fn remove_all_durable(paths: &[PathBuf]) -> PersistResult<()> {
    let mut removed = Vec::new();
    for path in paths {
        if remove_lazy(path)? {
            removed.push(path.as_path());
        }
    }
    sync_parents(removed.into_iter())
}

/// Removes `path`; it is gone for good at the next sync of its directory (any later durable
/// write there, or the next start's sweep). For files whose reappearance after a power cut is
/// harmless, such as a closed intent whose replay finds the work done.
pub fn remove_lazy(path: &Path) -> PersistResult<bool> {
    let (dir, name) = split(path)?;
    let dir_fd = match open_dir(dir) {
        Ok(fd) => fd,
        Err(PersistError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(false)
        }
        Err(e) => return Err(e),
    };
    own_changes::note(path);
    match nix::unistd::unlinkat(&dir_fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
        Ok(()) => Ok(true),
        Err(Errno::ENOENT) => {
            own_changes::cancel(path);
            Ok(false)
        }
        Err(e) => {
            own_changes::cancel(path);
            Err(io_err("removing", path)(e.into()))
        }
    }
}

/// Removes `path` durably; a missing file is not an error. Returns whether it existed.
pub fn remove_durable(path: &Path) -> PersistResult<bool> {
    if !remove_lazy(path)? {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(true)
}

/// Removes temporary files a crash left behind in `dir` (names vgpud gives them only). A
/// `dir` that is a link is refused ([`open_dir`]), and the files are removed relative to it.
pub fn sweep_temporaries(dir: &Path) -> PersistResult<usize> {
    let dir_fd = match open_dir(dir) {
        Ok(fd) => fd,
        Err(PersistError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(0)
        }
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for (name, _) in list_dir(dir)? {
        if name.starts_with('.') && name.contains(".vgpud-tmp-") {
            let _ = nix::unistd::unlinkat(
                &dir_fd,
                name.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
            removed += 1;
        }
    }
    Ok(removed)
}

/// The largest state file vgpud reads (definitions, records, intents, settings, the
/// configuration): 1 MiB, a thousand times what vgpud writes. Anything larger is refused
/// before it is read.
pub const MAX_STATE_FILE_BYTES: u64 = 1 << 20;

/// Whether a reader follows a symbolic link at the path it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Refuse it (`O_NOFOLLOW`): state files, which vgpud and mdevctl only ever write as
    /// regular files.
    Refuse,
    /// Follow it: the operator's files (configuration, templates), which configuration
    /// management tools often install as links. What the link leads to must still be a
    /// regular file of bounded size.
    Follow,
}

/// Identifies the file a reader judged, so that a file that was replaced since (a fresh
/// atomic write renamed over it) or changed since (the same inode, retired as a spare and
/// written again: see [`SPARES`]) is never the one set aside. The change time tells the
/// second: a rename, a truncation and a write each set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl FileId {
    fn of(meta: &fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A file vgpud will not read, and why: not a regular file, a link, too large, unreadable,
/// not UTF-8, or (found by the caller) not parseable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct BadFile {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
    id: Option<FileId>,
}

impl BadFile {
    /// A file whose content the caller could not use.
    pub fn new(path: &Path, reason: impl Into<String>) -> Self {
        BadFile {
            path: path.to_path_buf(),
            reason: reason.into(),
            id: None,
        }
    }
}

const LINK: &str = "a symbolic link (state files are never links)";

/// What a file is, in words, for a file that is not a regular one.
fn kind_of(file_type: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        LINK
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// Reads a state file defensively: without following a link at `path`, without blocking
/// (`O_NONBLOCK`, so a FIFO never hangs the reader), only if it is a regular file (checked
/// before it is opened and again on the open file) of at most `limit` bytes, and only if it
/// is UTF-8. `Ok(None)`: there is no such file. This is the one reader of every file vgpud
/// keeps; [`read_file`] is the same for the operator's files.
pub fn read_state_file(path: &Path, limit: u64) -> Result<Option<String>, BadFile> {
    read_file(path, limit, Links::Refuse)
}

/// [`read_state_file`] with a choice about links.
pub fn read_file(path: &Path, limit: u64, links: Links) -> Result<Option<String>, BadFile> {
    read_judged(path, limit, links).map(|r| r.map(|(text, _)| text))
}

fn read_judged(path: &Path, limit: u64, links: Links) -> Result<Option<(String, FileId)>, BadFile> {
    use nix::fcntl::OFlag;
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let bad = |reason: String, id: Option<FileId>| BadFile {
        path: path.to_path_buf(),
        reason,
        id,
    };
    let judge = |meta: &fs::Metadata| -> Result<FileId, BadFile> {
        let id = FileId::of(meta);
        if !meta.file_type().is_file() {
            return Err(bad(kind_of(meta.file_type()).to_string(), Some(id)));
        }
        if meta.len() > limit {
            return Err(bad(
                format!("{} bytes, more than the limit of {limit}", meta.len()),
                Some(id),
            ));
        }
        Ok(id)
    };
    // A look first, without opening: a device node or a FIFO is never opened at all.
    let first = match links {
        Links::Refuse => fs::symlink_metadata(path),
        Links::Follow => fs::metadata(path),
    };
    match first {
        Ok(meta) => {
            judge(&meta)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Only a link can be there and lead nowhere. A file made there since the look
            // (a write racing this read) is not judged: it is read at the next look, never
            // set aside for the file that was gone.
            return match fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => Err(bad(
                    "a symbolic link to nothing".into(),
                    Some(FileId::of(&m)),
                )),
                _ => Ok(None),
            };
        }
        Err(e) => return Err(bad(format!("cannot be examined: {e}"), None)),
    }
    let mut flags = OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    if links == Links::Refuse {
        flags |= OFlag::O_NOFOLLOW;
    }
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
    {
        Ok(f) => f,
        // Removed between the look and the open: it is simply gone.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            let id = fs::symlink_metadata(path).ok().map(|m| FileId::of(&m));
            return Err(bad(LINK.into(), id));
        }
        Err(e) => return Err(bad(format!("cannot be opened: {e}"), None)),
    };
    // Again on what was opened: the path may have been replaced since the look.
    let meta = file
        .metadata()
        .map_err(|e| bad(format!("cannot be examined: {e}"), None))?;
    let id = judge(&meta)?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(format!("cannot be read: {e}"), Some(id)))?;
    if bytes.len() as u64 > limit {
        return Err(bad(
            format!("more than the limit of {limit} bytes"),
            Some(id),
        ));
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Some((text, id))),
        Err(e) => Err(bad(
            format!(
                "not UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            Some(id),
        )),
    }
}

/// Paths already reported as bad that could not be moved aside: reported once, not at every
/// look. The lock also serializes the choice of a free `.bad` name.
static REPORTED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The suffix a bad file is renamed with.
pub const BAD_SUFFIX: &str = ".bad";

/// Moves a bad file aside, to `<name>.bad` (`<name>.bad.2`, … when that is taken), and logs
/// one warning naming it, the reason and `what` it was. The entry itself is renamed, never
/// what a link points to; a directory or a FIFO is moved like a file. A path whose inode
/// changed since it was judged is left alone (a fresh write replaced it). Returns the new
/// name, or `None` when nothing was moved.
pub fn set_aside(bad: &BadFile, what: &str) -> Option<PathBuf> {
    let mut reported = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    let path = bad.path.as_path();
    let now = match fs::symlink_metadata(path) {
        Ok(meta) => FileId::of(&meta),
        Err(_) => return None,
    };
    if bad.id.is_some_and(|id| id != now) {
        return None;
    }
    let name = path.file_name()?.to_string_lossy().into_owned();
    let target = (1..=100)
        .map(|n| {
            let suffix = if n == 1 {
                BAD_SUFFIX.to_string()
            } else {
                format!("{BAD_SUFFIX}.{n}")
            };
            path.with_file_name(format!("{name}{suffix}"))
        })
        .find(|t| fs::symlink_metadata(t).is_err());
    let moved = match &target {
        // Within a directory that is not a link (see `open_dir_in`).
        Some(t) => split(path)
            .and_then(|(dir, name)| Ok((open_dir(dir)?, name)))
            .map_err(|e| e.to_string())
            .and_then(|(dir, name)| {
                let to = t.file_name().unwrap_or_default();
                nix::fcntl::renameat(&dir, name, &dir, to).map_err(|e| e.to_string())
            }),
        None => Err("every name up to .bad.100 is taken".into()),
    };
    match moved {
        Ok(()) => {
            reported.retain(|p| p != path);
            if let Some(dir) = path.parent() {
                let _ = sync_dir(dir);
            }
            let target = target.unwrap_or_default();
            tracing::warn!(
                path = %path.display(),
                reason = %bad.reason,
                moved_to = %target.display(),
                "set aside a bad {what}: {}: {}; the rest is served",
                path.display(),
                bad.reason
            );
            Some(target)
        }
        Err(e) => {
            if !reported.iter().any(|p| p == path) {
                reported.push(path.to_path_buf());
                tracing::warn!(
                    path = %path.display(),
                    reason = %bad.reason,
                    error = %e,
                    "skipping a bad {what} that could not be moved aside: {}: {}",
                    path.display(),
                    bad.reason
                );
            }
            None
        }
    }
}

/// Why a loader refuses a file's content.
pub(crate) enum Refused {
    /// The file is bad: it is set aside and the rest is served.
    Bad(String),
    /// vgpud must not go on (a record of a newer format, which it must never drop).
    Stop(PersistError),
}

/// What [`load`] found.
pub(crate) enum Loaded<T> {
    /// No such file.
    Absent,
    /// The file, parsed.
    Good(T),
    /// A bad file, now set aside and reported.
    Bad,
}

/// Reads a state file with [`read_state_file`] and parses it; a bad file is set aside
/// ([`set_aside`]) as a bad `what`.
pub(crate) fn load<T>(
    path: &Path,
    what: &str,
    parse: impl FnOnce(&str) -> Result<T, Refused>,
) -> PersistResult<Loaded<T>> {
    let (text, id) = match read_judged(path, MAX_STATE_FILE_BYTES, Links::Refuse) {
        Ok(None) => return Ok(Loaded::Absent),
        Ok(Some(read)) => read,
        Err(bad) => {
            set_aside(&bad, what);
            return Ok(Loaded::Bad);
        }
    };
    match parse(&text) {
        Ok(value) => Ok(Loaded::Good(value)),
        Err(Refused::Stop(e)) => Err(e),
        Err(Refused::Bad(reason)) => {
            let bad = BadFile {
                path: path.to_path_buf(),
                reason,
                id: Some(id),
            };
            set_aside(&bad, what);
            Ok(Loaded::Bad)
        }
    }
}

/// The entries of `dir` by name, sorted; a missing directory has none.
pub(crate) fn list_dir(dir: &Path) -> PersistResult<Vec<(String, fs::FileType)>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("listing", dir)(e)),
    };
    let mut out: Vec<(String, fs::FileType)> = entries
        .flatten()
        .filter_map(|e| {
            Some((
                e.file_name().to_string_lossy().into_owned(),
                e.file_type().ok()?,
            ))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Checks that `value`, which becomes one component of a path (a parent's name, a PCI
/// address, a driver), is a plain file name: never empty, `.`, `..`, or holding a `/`.
pub(crate) fn plain_name(field: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || value == "." || value == ".." || value.contains(['/', '\0']) {
        return Err(format!("its {field} {value:?} is not a plain name"));
    }
    Ok(())
}

/// [`plain_name`] for the addresses and drivers of passthrough functions.
pub(crate) fn plain_functions(functions: &[crate::model::MovedFunction]) -> Result<(), String> {
    for f in functions {
        plain_name("function", &f.address)?;
        if let Some(driver) = &f.driver {
            plain_name("driver", driver)?;
        }
    }
    Ok(())
}

/// Checks that a file names itself as its file name (`<key>.json`) does.
pub(crate) fn names_its_file(named: &str, key: &str) -> Result<(), String> {
    if named != key {
        return Err(format!("it names {named:?}, its file name {key:?}"));
    }
    Ok(())
}

/// Checks that a file of a device names it by its UUID, lowercase, as its file name does.
pub(crate) fn names_its_uuid(uuid: &str, key: &str) -> Result<(), String> {
    names_its_file(uuid, key)?;
    match crate::model::normalize_uuid(uuid) {
        Some(u) if u == uuid => Ok(()),
        _ => Err(format!("{uuid:?} is not a lowercase UUID")),
    }
}

/// Why the text of a JSON state file is not a `T` ([`parse_state_json`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateTextError {
    /// Not a JSON object of the right shape: the file is bad.
    #[error("{0}")]
    Bad(String),
    /// An object of a newer format, which this vgpud must neither read nor drop.
    #[error("format version {version} is newer than this vgpud's {supported}")]
    Newer {
        /// The file's format version.
        version: u64,
        /// The newest this vgpud reads.
        supported: u32,
    },
}

/// Parses the text of one JSON state file (a device record, an intent, SR-IOV settings) as
/// a `T`: it must be a JSON object (serde would also take a struct's fields as an array, and
/// an array has no `version` to check) whose `version`, if any, is at most `supported`.
pub fn parse_state_json<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
    supported: u32,
) -> Result<T, StateTextError> {
    if text.trim().is_empty() {
        return Err(StateTextError::Bad("empty".into()));
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| StateTextError::Bad(format!("not JSON: {e}")))?;
    let Some(object) = value.as_object() else {
        return Err(StateTextError::Bad(format!(
            "not a {what}: not a JSON object"
        )));
    };
    let version = object.get("version").and_then(serde_json::Value::as_u64);
    if let Some(version) = version.filter(|v| *v > u64::from(supported)) {
        return Err(StateTextError::Newer { version, supported });
    }
    serde_json::from_value(value).map_err(|e| StateTextError::Bad(format!("not a {what}: {e}")))
}

/// Reads every `<key>.json` file of `dir` as a `T` (a missing directory holds none): each
/// must be JSON of format `version` at most `supported`, a `T`, and pass `check` (given the
/// key: it names itself as its file name does, and every name it holds that vgpud puts in
/// a path is plain). A bad file is set aside as a bad `what` and the others are read; a file
/// of a newer format is an error, so vgpud never drops what a newer vgpud wrote. Other names
/// (temporary files, files set aside) are not vgpud's to read.
pub(crate) fn read_json_dir<T: serde::de::DeserializeOwned>(
    dir: &Path,
    what: &str,
    supported: u32,
    check: impl Fn(&T, &str) -> Result<(), String>,
) -> PersistResult<Vec<T>> {
    let mut out = Vec::new();
    for (name, _) in list_dir(dir)? {
        let Some(key) = name.strip_suffix(".json") else {
            continue;
        };
        if key.is_empty() || name.starts_with('.') {
            continue;
        }
        let file = dir.join(&name);
        let parsed = load(&file, what, |text| {
            let record: T = parse_state_json(text, what, supported).map_err(|e| match e {
                StateTextError::Bad(reason) => Refused::Bad(reason),
                newer @ StateTextError::Newer { .. } => Refused::Stop(PersistError::Malformed {
                    path: file.clone(),
                    reason: newer.to_string(),
                }),
            })?;
            check(&record, key).map_err(Refused::Bad)?;
            Ok(record)
        })?;
        if let Loaded::Good(record) = parsed {
            out.push(record);
        }
    }
    Ok(out)
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file judged bad and then written again in place (a spare reused for a new file keeps
    /// its inode) is the new file: it is not set aside for what the reader saw before.
    #[test]
    fn a_file_changed_since_it_was_judged_is_not_set_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("definition");
        fs::write(&path, "half a defin").expect("write");
        let (_, id) = read_judged(&path, 1024, Links::Refuse)
            .expect("readable")
            .expect("there");
        std::thread::sleep(std::time::Duration::from_millis(20));
        // The same inode, written again whole.
        let mut f = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .expect("open");
        std::io::Write::write_all(&mut f, b"{}").expect("rewrite");
        drop(f);
        let judged = BadFile {
            path: path.clone(),
            reason: "not JSON".into(),
            id: Some(id),
        };
        assert_eq!(set_aside(&judged, "test file"), None);
        assert!(path.exists(), "the rewritten file stays");
        // Unchanged since it was judged, it goes.
        let (_, id) = read_judged(&path, 1024, Links::Refuse)
            .expect("readable")
            .expect("there");
        let judged = BadFile {
            path: path.clone(),
            reason: "not a definition".into(),
            id: Some(id),
        };
        assert!(set_aside(&judged, "test file").is_some());
        assert!(!path.exists());
    }
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn atomic_writes_create_dirs_replace_and_leave_no_temporaries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a/b/file");
        write_atomic(&path, b"one", 0o644).expect("write");
        write_atomic(&path, b"two", 0o644).expect("rewrite");
        assert_eq!(fs::read_to_string(&path).expect("read"), "two");
        let mode = fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let names: Vec<_> = fs::read_dir(dir.path().join("a/b"))
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(remove_durable(&path).expect("remove"));
        assert!(!remove_durable(&path).expect("remove again"));
    }

    #[test]
    fn no_write_or_removal_goes_through_a_linked_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).expect("outside");
        fs::write(outside.join("victim"), "mine").expect("victim");
        fs::write(outside.join(".x.vgpud-tmp-1-1"), "mine too").expect("temporary");
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(&outside, &linked).expect("link");
        let refused = write_atomic(&linked.join("victim"), b"overwritten", 0o644)
            .expect_err("a linked directory")
            .to_string();
        assert!(refused.contains("symbolic link"), "{refused}");
        assert!(remove_lazy(&linked.join("victim")).is_err());
        assert!(sweep_temporaries(&linked).is_err());
        let spares = dir.path().join("spares");
        assert!(retire(&linked.join("victim"), &spares).is_err());
        assert_eq!(
            fs::read_to_string(outside.join("victim")).expect("kept"),
            "mine"
        );
        assert!(outside.join(".x.vgpud-tmp-1-1").exists());
        assert_eq!(fs::read_dir(&outside).expect("outside").count(), 2);
    }

    #[test]
    fn no_spare_is_kept_across_file_systems() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let Ok(other) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("SKIPPED: no_spare_is_kept_across_file_systems: no /dev/shm");
            return;
        };
        let dev = |p: &Path| fs::metadata(p).expect("meta").dev();
        if dev(dir.path()) == dev(other.path()) {
            eprintln!("SKIPPED: no_spare_is_kept_across_file_systems: /dev/shm is not apart");
            return;
        }
        let spares = other.path().join(SPARES_DIR);
        let file = dir.path().join("d/file");
        write_atomic(&file, b"x", 0o644).expect("write");
        assert!(retire(&file, &spares).expect("removed"));
        assert!(!file.exists());
        assert!(!spares.exists() || fs::read_dir(&spares).expect("spares").count() == 0);
        write_files_reusing(
            &[FileWrite {
                path: file.clone(),
                content: b"y".to_vec(),
                mode: 0o644,
            }],
            false,
            Some(&spares),
        )
        .expect("a new file");
        assert_eq!(fs::read_to_string(&file).expect("file"), "y");
    }

    #[test]
    fn vgpuds_own_directories_are_never_followed_the_operators_ancestors_are() {
        let dir = tempfile::tempdir().expect("tempdir");
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir(&elsewhere).expect("elsewhere");
        // The root's `var/lib/vgpud` is a link: no record goes through it.
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("var/lib")).expect("var/lib");
        std::os::unix::fs::symlink(&elsewhere, root.join("var/lib/vgpud")).expect("link");
        let record = root.join("var/lib/vgpud/devices/u.json");
        assert!(write_atomic(&record, b"{}", 0o600).is_err());
        assert_eq!(fs::read_dir(&elsewhere).expect("elsewhere").count(), 0);
        // An operator's `etc/mdevctl.d` may be a link; its parents' directories may not.
        let etc = root.join("etc");
        fs::create_dir(&etc).expect("etc");
        std::os::unix::fs::symlink(&elsewhere, etc.join("mdevctl.d")).expect("link");
        write_atomic(&etc.join("mdevctl.d/mtty/u"), b"{}", 0o644).expect("through the link");
        assert!(elsewhere.join("mtty/u").is_file());
        assert_eq!(
            own_part(&etc.join("mdevctl.d/mtty")).0,
            etc.join("mdevctl.d")
        );
        assert_eq!(
            own_part(&root.join("var/lib/vgpud")).0,
            root.join("var/lib")
        );
        assert_eq!(own_part(&etc.join("modprobe.d")).0, etc);
    }

    #[test]
    fn spares_live_in_their_own_directory_and_serve_any_directory_of_their_file_system() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let spares = dir.path().join(SPARES_DIR);
        let a = dir.path().join("a/file");
        let b = dir.path().join("b/file");
        write_files_reusing(
            &[FileWrite {
                path: a.clone(),
                content: b"secret".to_vec(),
                mode: 0o644,
            }],
            false,
            Some(&spares),
        )
        .expect("write");
        let inode = fs::metadata(&a).expect("a").ino();
        assert!(retire(&a, &spares).expect("retire"));
        assert!(!a.exists());
        let kept: Vec<_> = fs::read_dir(&spares).expect("spares").flatten().collect();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].metadata().expect("spare").len(), 0, "emptied");
        assert_eq!(fs::read_dir(dir.path().join("a")).expect("a").count(), 0);
        write_files_reusing(
            &[FileWrite {
                path: b.clone(),
                content: b"new".to_vec(),
                mode: 0o600,
            }],
            false,
            Some(&spares),
        )
        .expect("reuse");
        let meta = fs::metadata(&b).expect("b");
        assert_eq!(meta.ino(), inode, "the spare was reused");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        assert_eq!(fs::read_to_string(&b).expect("b"), "new");
        assert_eq!(fs::read_dir(&spares).expect("spares").count(), 0);
        // The start forgets them and sweeps their files.
        assert!(retire(&b, &spares).expect("retire"));
        forget_spares(dir.path());
        assert_eq!(fs::read_dir(&spares).expect("spares").count(), 0);
        write_files_reusing(
            &[FileWrite {
                path: a.clone(),
                content: b"x".to_vec(),
                mode: 0o644,
            }],
            false,
            Some(&spares),
        )
        .expect("write");
        assert_eq!(fs::read_to_string(&a).expect("a"), "x");
    }

    #[test]
    fn temporaries_left_by_a_crash_are_swept() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(".x.vgpud-tmp-1-2"), "torn").expect("write");
        fs::write(dir.path().join("keep"), "k").expect("write");
        assert_eq!(sweep_temporaries(dir.path()).expect("sweep"), 1);
        assert!(dir.path().join("keep").exists());
    }

    fn reason(r: Result<Option<String>, BadFile>) -> String {
        r.expect_err("refused").reason
    }

    #[test]
    fn the_state_reader_reads_only_regular_files_of_bounded_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let good = d.join("good");
        fs::write(&good, "text").expect("write");
        assert_eq!(
            read_state_file(&good, 100).expect("good").as_deref(),
            Some("text")
        );
        assert_eq!(
            read_state_file(&d.join("absent"), 100).expect("absent"),
            None
        );
        std::os::unix::fs::symlink(&good, d.join("link")).expect("link");
        assert!(reason(read_state_file(&d.join("link"), 100)).contains("symbolic link"));
        assert_eq!(
            read_file(&d.join("link"), 100, Links::Follow)
                .expect("followed")
                .as_deref(),
            Some("text")
        );
        std::os::unix::fs::symlink(d.join("nothing"), d.join("dangling")).expect("link");
        assert!(reason(read_state_file(&d.join("dangling"), 100)).contains("symbolic link"));
        assert!(reason(read_file(&d.join("dangling"), 100, Links::Follow)).contains("nothing"));
        fs::create_dir(d.join("dir")).expect("dir");
        assert_eq!(reason(read_state_file(&d.join("dir"), 100)), "a directory");
        // A FIFO with no writer would block an ordinary open forever.
        nix::unistd::mkfifo(
            &d.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .expect("mkfifo");
        assert_eq!(reason(read_state_file(&d.join("fifo"), 100)), "a FIFO");
        std::os::unix::fs::symlink(d.join("fifo"), d.join("to-fifo")).expect("link");
        assert_eq!(
            reason(read_file(&d.join("to-fifo"), 100, Links::Follow)),
            "a FIFO"
        );
        fs::write(d.join("big"), vec![b'x'; 101]).expect("write");
        assert!(reason(read_state_file(&d.join("big"), 100)).contains("more than the limit"));
        fs::write(d.join("latin1"), b"caf\xe9").expect("write");
        assert!(reason(read_state_file(&d.join("latin1"), 100)).contains("not UTF-8"));
    }

    #[test]
    fn bad_files_are_set_aside_without_following_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let target = d.join("target");
        fs::write(&target, "not mine").expect("write");
        let link = d.join("x.json");
        std::os::unix::fs::symlink(&target, &link).expect("link");
        let bad = read_state_file(&link, 100).expect_err("a link");
        assert_eq!(set_aside(&bad, "test file"), Some(d.join("x.json.bad")));
        assert!(fs::symlink_metadata(d.join("x.json.bad"))
            .expect("moved")
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(&target).expect("target"), "not mine");
        // The next bad file of that name does not replace the first.
        fs::create_dir(&link).expect("dir");
        let bad = read_state_file(&link, 100).expect_err("a directory");
        assert_eq!(set_aside(&bad, "test file"), Some(d.join("x.json.bad.2")));
        assert!(d.join("x.json.bad.2").is_dir());
        // A file replaced since it was judged (a fresh write) is left alone.
        fs::write(&link, "{torn").expect("write");
        let judged = read_judged(&link, 100, Links::Refuse).expect("read");
        assert!(judged.is_some());
        let stale = BadFile {
            path: link.clone(),
            reason: "malformed".into(),
            id: judged.map(|(_, id)| id),
        };
        fs::write(d.join("fresh"), "{}").expect("write");
        fs::rename(d.join("fresh"), &link).expect("replace");
        assert_eq!(set_aside(&stale, "test file"), None);
        assert_eq!(fs::read_to_string(&link).expect("kept"), "{}");
        // Nothing to move: nothing happens.
        assert_eq!(
            set_aside(&BadFile::new(&d.join("gone"), "x"), "test file"),
            None
        );
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Rec {
        version: u32,
        key: String,
    }

    #[test]
    fn json_dirs_serve_the_good_files_and_set_the_bad_ones_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let write = |name: &str, text: &str| fs::write(d.join(name), text).expect("write");
        write("a.json", r#"{"version":1,"key":"a"}"#);
        write("empty.json", "");
        write("torn.json", r#"{"version":1,"ke"#);
        write("other.json", r#"{"version":1,"key":"a"}"#);
        write("shape.json", r#"{"hello":1}"#);
        // A record's fields as an array (serde reads a struct from one), of a newer
        // format: it has no "version" key to check, so it is bad, not read.
        write("array.json", r#"[7777,"array"]"#);
        write("notes.txt", "not json, not ours");
        write(".b.json.vgpud-tmp-1-2", "temporary");
        fs::write(d.join("latin1.json"), b"\xff").expect("write");
        let read = |d: &Path| {
            read_json_dir(d, "test record", 1, |r: &Rec, key| {
                names_its_file(&r.key, key)?;
                plain_name("key", &r.key)
            })
        };
        let good = read(d).expect("read");
        assert_eq!(
            good,
            vec![Rec {
                version: 1,
                key: "a".into()
            }]
        );
        for name in ["empty", "torn", "other", "shape", "array", "latin1"] {
            assert!(d.join(format!("{name}.json.bad")).exists(), "{name}");
            assert!(!d.join(format!("{name}.json")).exists(), "{name}");
        }
        assert!(d.join("notes.txt").exists());
        assert!(d.join(".b.json.vgpud-tmp-1-2").exists());
        assert_eq!(read(d).expect("again").len(), 1);
        // A newer format is never dropped: it stops the reader, and stays where it is.
        write("new.json", r#"{"version":2,"key":"new","extra":true}"#);
        assert!(read(d).expect_err("newer").to_string().contains("newer"));
        assert!(d.join("new.json").exists());
    }
}
