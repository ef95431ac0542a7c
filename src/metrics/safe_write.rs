//! Replacing a file in a directory that vgpud does not keep itself (node_exporter's textfile
//! directory), safely as root: the directory is opened once, without following a link, and
//! refused unless root or vgpud owns it and no one else can write it; the temporary file is
//! created exclusively (never through a planted link) under an unpredictable name, relative
//! to that directory, with a fixed mode, then fsynced and renamed into place.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// Why a file was not written.
#[derive(Debug, thiserror::Error)]
pub enum SafeWriteError {
    /// The directory is a symbolic link: whoever owns the link's directory could point it
    /// elsewhere.
    #[error(
        "refusing to write into {}: it is a symbolic link; name the directory it leads to",
        dir.display()
    )]
    Link {
        /// The directory.
        dir: PathBuf,
    },
    /// Another user can write the directory, and so plant links or files in it.
    #[error(
        "refusing to write into {}: it is writable by group or others (mode {mode:04o}); \
         make it writable by its owner alone (chmod go-w)",
        dir.display()
    )]
    OpenToOthers {
        /// The directory.
        dir: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// Neither root nor vgpud owns the directory.
    #[error(
        "refusing to write into {}: it is owned by uid {owner}, not by root or vgpud (uid \
         {own}); use a directory root owns (node_exporter only reads it)",
        dir.display()
    )]
    ForeignOwner {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// vgpud's uid.
        own: u32,
    },
    /// The system refused a step.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
}

fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> SafeWriteError + 'a {
    move |source| SafeWriteError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// A directory opened by descriptor and found safe to write in.
#[derive(Debug)]
pub struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl TrustedDir {
    /// Opens `path` (not through a link) and checks its owner and mode.
    pub fn open(path: &Path) -> Result<Self, SafeWriteError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match nix::fcntl::open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
                    return Err(SafeWriteError::Link {
                        dir: path.to_path_buf(),
                    });
                }
                return Err(io_err("opening the directory", path)(e.into()));
            }
        };
        let dir = File::from(fd);
        let meta = dir
            .metadata()
            .map_err(io_err("reading the owner of", path))?;
        let own = nix::unistd::geteuid().as_raw();
        if meta.uid() != 0 && meta.uid() != own {
            return Err(SafeWriteError::ForeignOwner {
                dir: path.to_path_buf(),
                owner: meta.uid(),
                own,
            });
        }
        if meta.mode() & 0o022 != 0 {
            return Err(SafeWriteError::OpenToOthers {
                dir: path.to_path_buf(),
                mode: meta.mode() & 0o7777,
            });
        }
        Ok(TrustedDir {
            fd: dir.into(),
            path: path.to_path_buf(),
        })
    }

    /// Replaces the file `name` of the directory with `content` and `mode`: a new file under
    /// a random name, fsynced, renamed over `name` (a link there is replaced, not followed).
    pub fn replace(&self, name: &str, content: &[u8], mode: u32) -> Result<(), SafeWriteError> {
        let target = self.path.join(name);
        // Not `*.prom` (node_exporter reads only those); a new name each time, so no one can
        // prepare it, and an existing entry makes the create fail instead of being followed.
        let tmp = format!(".{name}.vgpud-tmp-{}", uuid::Uuid::new_v4().simple());
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let file = nix::fcntl::openat(
            &self.fd,
            tmp.as_str(),
            flags,
            Mode::from_bits_truncate(mode),
        )
        .map_err(|e| io_err("creating a temporary file for", &target)(e.into()))?;
        let mut file = File::from(file);
        let written = (|| {
            // The mode exactly, whatever the umask (the unit's is 0077).
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(io_err("setting the mode of", &target))?;
            file.write_all(content)
                .map_err(io_err("writing", &target))?;
            file.sync_all().map_err(io_err("syncing", &target))?;
            drop(file);
            nix::fcntl::renameat(&self.fd, tmp.as_str(), &self.fd, name)
                .map_err(|e| io_err("renaming into place", &target)(e.into()))
        })();
        if written.is_err() {
            let _ = nix::unistd::unlinkat(
                &self.fd,
                tmp.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_as_the_directory_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("dir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("link");
        let err = TrustedDir::open(&link).expect_err("a link");
        assert!(matches!(err, SafeWriteError::Link { .. }), "{err}");
        assert!(TrustedDir::open(&real).is_ok());
    }

    #[test]
    fn a_link_at_the_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "mine").expect("victim");
        std::os::unix::fs::symlink(&victim, dir.path().join("x.prom")).expect("link");
        let d = TrustedDir::open(dir.path()).expect("open");
        d.replace("x.prom", b"new", 0o644).expect("replace");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "mine");
        let meta = std::fs::symlink_metadata(dir.path().join("x.prom")).expect("meta");
        assert!(meta.is_file());
        assert_eq!(meta.mode() & 0o7777, 0o644);
        // Nothing else is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 1);
    }
}
