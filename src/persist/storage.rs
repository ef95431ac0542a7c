//! The seam through which the journal ([`super::journal`]) reaches the disk: its appends, the
//! group commit's `fdatasync`, and the syncs and the rewrite of a checkpoint or a recovery.
//! [`Disk`] is the real one; tests put a double in its place to count the syncs and to cut
//! the power (dropping whatever was not synced), so that a missing sync fails a test.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use super::{FileWrite, PersistResult};

/// How the journal writes and syncs. Every method does what [`Disk`]'s does, or fails.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Appends `line` to the journal, open for appending as `file`.
    fn append(&self, file: &fs::File, line: &[u8]) -> io::Result<()>;

    /// Makes what was appended to the journal durable (`fdatasync`): the one wait for the
    /// disk that a group of `commits` concurrent commits shares.
    fn sync_journal(&self, file: &fs::File, commits: usize) -> io::Result<()>;

    /// Makes the file written at `path`, open as `file`, durable (`fsync`).
    fn sync_file(&self, path: &Path, file: &fs::File) -> io::Result<()>;

    /// Makes the entries of the directory `dir` durable (`fsync` of the directory).
    fn sync_dir(&self, dir: &Path) -> PersistResult<()>;

    /// Replaces the journal at `path` by `content`, atomically and durably.
    fn replace(&self, path: &Path, content: Vec<u8>) -> PersistResult<()>;
}

/// The real storage: writes and syncs the files.
#[derive(Debug, Default, Clone, Copy)]
pub struct Disk;

impl Storage for Disk {
    fn append(&self, mut file: &fs::File, line: &[u8]) -> io::Result<()> {
        file.write_all(line)
    }

    fn sync_journal(&self, file: &fs::File, _commits: usize) -> io::Result<()> {
        file.sync_data()
    }

    fn sync_file(&self, _path: &Path, file: &fs::File) -> io::Result<()> {
        file.sync_all()
    }

    fn sync_dir(&self, dir: &Path) -> PersistResult<()> {
        super::sync_dir(dir)
    }

    fn replace(&self, path: &Path, content: Vec<u8>) -> PersistResult<()> {
        super::write_files(
            &[FileWrite {
                path: path.to_path_buf(),
                content,
                mode: 0o600,
            }],
            true,
        )
    }
}
