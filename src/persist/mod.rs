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
//! target, and the directory is fsynced; removals fsync the directory too.

pub mod intent;
pub mod mdevctl;
pub mod sriov;
pub mod state;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
    move |source| PersistError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn sync_dir(dir: &Path) -> PersistResult<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing directory", dir))
}

/// Creates `dir` and its missing ancestors, syncing each parent of a new directory.
fn create_dirs(dir: &Path) -> PersistResult<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(io_err("creating directory", dir)(e)),
    }
    match dir.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// One file of a batch of atomic writes.
#[derive(Debug, Clone)]
pub struct FileWrite {
    /// Where it goes.
    pub path: PathBuf,
    /// What it holds.
    pub content: Vec<u8>,
    /// Its mode.
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

/// Writes several files, each atomically, and all durably with as few waits for the disk as
/// the file system allows: every temporary file is written first, then all are fsynced,
/// renamed into place, and each directory fsynced once. ext4 commits fsyncs that are issued
/// together in one journal transaction, so a batch costs about one commit, and the
/// concurrent batches of other requests join the same commits (group commit). A crash leaves
/// each file either old or new, never torn.
pub fn write_all_atomic(files: &[FileWrite]) -> PersistResult<()> {
    use std::os::unix::fs::OpenOptionsExt;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut staged: Vec<(PathBuf, &Path, fs::File)> = Vec::with_capacity(files.len());
    let cleanup = |staged: &[(PathBuf, &Path, fs::File)]| {
        for (tmp, _, _) in staged {
            let _ = fs::remove_file(tmp);
        }
    };
    for file in files {
        let path = file.path.as_path();
        let dir = path.parent().ok_or_else(|| PersistError::Malformed {
            path: path.to_path_buf(),
            reason: "no parent directory".into(),
        })?;
        if let Err(e) = create_dirs(dir) {
            cleanup(&staged);
            return Err(e);
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.vgpud-tmp-{}-{n}", std::process::id()));
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(file.mode)
            .open(&tmp)
            .map_err(io_err("creating", &tmp))
            .and_then(|mut f| {
                f.write_all(&file.content)
                    .map_err(io_err("writing", &tmp))
                    .map(|()| f)
            });
        match written {
            Ok(f) => staged.push((tmp, path, f)),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                cleanup(&staged);
                return Err(e);
            }
        }
    }
    for (tmp, _, f) in &staged {
        if let Err(e) = f.sync_all() {
            cleanup(&staged);
            return Err(io_err("syncing", tmp)(e));
        }
    }
    for (i, (tmp, path, _)) in staged.iter().enumerate() {
        if let Err(e) = fs::rename(tmp, path) {
            cleanup(&staged[i..]);
            return Err(io_err("renaming into place", path)(e));
        }
    }
    sync_parents(staged.iter().map(|(_, path, _)| *path))
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
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err("removing", path)(e)),
    }
}

/// Removes `path` durably; a missing file is not an error. Returns whether it existed.
pub fn remove_durable(path: &Path) -> PersistResult<bool> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err("removing", path)(e)),
    }
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(true)
}

/// Removes temporary files a crash left behind in `dir` (names vgpud gives them only).
pub fn sweep_temporaries(dir: &Path) -> PersistResult<usize> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err("listing", dir)(e)),
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.contains(".vgpud-tmp-") {
            let _ = fs::remove_file(entry.path());
            removed += 1;
        }
    }
    Ok(removed)
}

/// Reads every `*.json` file of `dir` as a `T`; a missing directory holds none. A file
/// that does not parse is an error naming it.
/// Every file of `dir` read by [`read_json_dir`], refusing one whose format `version` is
/// newer than `supported`, so vgpud never silently drops what a newer vgpud wrote.
pub(crate) fn read_versioned_dir<T: serde::de::DeserializeOwned>(
    dir: &Path,
    supported: u32,
    version: impl Fn(&T) -> u32,
) -> PersistResult<Vec<T>> {
    let mut out = Vec::new();
    for (file, record) in read_json_dir::<T>(dir)? {
        let v = version(&record);
        if v > supported {
            return Err(PersistError::Malformed {
                path: file,
                reason: format!("format version {v} is newer than this vgpud's {supported}"),
            });
        }
        out.push(record);
    }
    Ok(out)
}

pub(crate) fn read_json_dir<T: serde::de::DeserializeOwned>(
    dir: &Path,
) -> PersistResult<Vec<(PathBuf, T)>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("listing", dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let file = entry.path();
        if file.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = match fs::read_to_string(&file) {
            Ok(t) => t,
            // Removed between the listing and the read: it is simply gone.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("reading", &file)(e)),
        };
        let value = serde_json::from_str(&text).map_err(|e| PersistError::Malformed {
            path: file.clone(),
            reason: e.to_string(),
        })?;
        out.push((file, value));
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
    fn temporaries_left_by_a_crash_are_swept() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(".x.vgpud-tmp-1-2"), "torn").expect("write");
        fs::write(dir.path().join("keep"), "k").expect("write");
        assert_eq!(sweep_temporaries(dir.path()).expect("sweep"), 1);
        assert!(dir.path().join("keep").exists());
    }
}
