//! The simulated host: the kernel's and drivers' side effects of sysfs writes, applied by vgpud
//! itself on a tree laid out like real sysfs (`vgpud --simulate`), and the profiles that write
//! such trees (`vgpud sim-host`).
//!
//! The simulator keeps no state: every decision is derived from the tree, so it works on any
//! tree with the real layout (a profile, a copy of a real host's sysfs, a tree another process
//! changed). Side effects are serialized by one process-wide lock, the counterpart of the
//! kernel's mdev lock.
//!
//! What a write does (hardware.md §1):
//! - `<parent>/mdev_supported_types/<type>/create`: 36 or 37 bytes else `EINVAL`; a malformed
//!   UUID `EINVAL`; a UUID that exists (`sys/bus/mdev/devices/<uuid>`) `EEXIST`; no capacity
//!   `ENOSPC` (`EUSERS` for unknown vendors, see `rules.rs`). On success the device directory
//!   `<parent>/<uuid>/` (`remove`, `uevent`, `mdev_type`, `iommu_group`, `driver`, `subsystem`,
//!   vendor attributes), a new IOMMU group `sys/kernel/iommu_groups/<N>/devices/<uuid>` (lowest
//!   free N), `dev/vfio/<N>` (a regular empty file standing in for the vfio group character
//!   device), `sys/bus/mdev/devices/<uuid>`, `sys/bus/mdev/drivers/<drv>/<uuid>` and
//!   `<type>/devices/<uuid>`, all links relative; then `available_instances` of every type of
//!   the parent is recomputed.
//! - `<mdev>/remove`: parsed as `kstrtoul`, `0` is a no-op, other numbers undo all of the above.
//! - any other file: the value is stored as written (`ENOENT` when the file does not exist,
//!   `EISDIR` for a directory, `EACCES` for a file without write permission bits, as kernfs
//!   refuses writes to attributes with no store method).

mod fsx;
mod kernel;
mod profiles;
mod rules;

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use nix::errno::Errno;

use crate::host::Host;

pub use profiles::{profile_names, profiles, write_profile};
pub use rules::refresh_available;

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

/// The kernel's mdev lock: serializes every simulated write and its side effects, across all
/// simulators of the process (two hosts on the same tree share it too).
static MDEV_LOCK: Mutex<()> = Mutex::new(());

/// Applies the kernel's side effects of writes below `ROOT/sys` on a simulated host.
#[derive(Debug, Default)]
pub struct Simulator {}

/// What a write reaches once its path is resolved.
enum Target {
    Create(PathBuf),
    Remove(PathBuf),
    Plain(PathBuf),
}

impl Simulator {
    /// A simulator with no state of its own: all state lives in the tree.
    pub fn new() -> Self {
        Simulator {}
    }

    /// Performs a write to `path` as the kernel would, with its side effects, or fails with
    /// the errno the kernel would return.
    pub fn write(&self, host: &Host, path: &Path, value: &str) -> io::Result<()> {
        let _guard = MDEV_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        // Writes may come through links (sys/bus/mdev/devices/<uuid>/remove).
        let resolved = fs::canonicalize(path)?;
        let roots = kernel::Roots {
            sys: fs::canonicalize(host.sys(""))?,
            dev: host.dev("vfio"),
        };
        match classify(resolved) {
            Target::Create(type_dir) => kernel::create(&roots, &type_dir, value),
            Target::Remove(dev_dir) => kernel::remove(&roots, &dev_dir, value),
            Target::Plain(file) => write_plain(&file, value),
        }
    }
}

fn classify(path: PathBuf) -> Target {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let dir = path.parent();
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

/// A plain attribute write: the value replaces the content; never creates a file.
fn write_plain(path: &Path, value: &str) -> io::Result<()> {
    let meta = fs::metadata(path)?;
    if meta.is_dir() {
        return Err(fsx::errno(Errno::EISDIR));
    }
    if meta.permissions().mode() & 0o222 == 0 {
        return Err(fsx::errno(Errno::EACCES));
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(value.as_bytes())
}

#[cfg(test)]
mod tests;
