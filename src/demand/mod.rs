//! Demand: what is asked for, per device type in 5-minute buckets ([`record`]), and the
//! forecast made from it ([`forecast`]).
//!
//! [`Demand`] is this host's record, kept in `var/lib/vgpud/demand`. Notes are counted in
//! memory and written out (atomically and durably, pruned to 8 weeks) by [`Demand::flush`],
//! which the daemon calls every [`FLUSH_S`] seconds while something changed and at a clean
//! stop: a crash loses at most the last [`FLUSH_S`] seconds of counts, never the file. A
//! record file that is bad (a link, a FIFO, too large, not the format) is set aside as
//! `demand.bad` and reported, and counting starts afresh.

pub mod forecast;
pub mod record;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::host::Host;
use crate::persist::{self, PersistResult};
use record::{Note, NoteError, Record};

/// How often a changed record is written out, in seconds.
pub const FLUSH_S: u64 = 60;

/// This host's demand record.
#[derive(Debug)]
pub struct Demand {
    path: PathBuf,
    record: Mutex<Record>,
    dirty: AtomicBool,
}

impl Demand {
    /// The record kept for `host`, read from its file; a bad file is set aside.
    pub fn load(host: &Host) -> Demand {
        let path = host.state("demand");
        let record = match persist::read_state_file(&path, record::MAX_FILE_BYTES) {
            Ok(None) => Record::default(),
            Ok(Some(text)) => Record::decode(&text).unwrap_or_else(|reason| {
                persist::set_aside(&persist::BadFile::new(&path, reason), "demand record");
                Record::default()
            }),
            Err(bad) => {
                persist::set_aside(&bad, "demand record");
                Record::default()
            }
        };
        Demand {
            path,
            record: Mutex::new(record),
            dirty: AtomicBool::new(false),
        }
    }

    /// Counts `note` for `type_id` now.
    pub fn note(&self, type_id: &str, note: Note) {
        self.note_at(type_id, note, persist::now_unix());
    }

    /// Counts `note` for `type_id` at `unix_s`. A type the record cannot keep is logged once
    /// per call at debug level and not counted.
    pub fn note_at(&self, type_id: &str, note: Note, unix_s: u64) {
        let counted: Result<(), NoteError> = self.lock().note(type_id, note, unix_s);
        match counted {
            Ok(()) => self.dirty.store(true, Ordering::Release),
            Err(e) => tracing::debug!(error = %e, "a request not counted in the demand record"),
        }
    }

    /// Reads the record.
    pub fn with<T>(&self, f: impl FnOnce(&Record) -> T) -> T {
        f(&self.lock())
    }

    /// Writes the record out if it changed since the last flush, pruned to 8 weeks before
    /// `now`; whether it wrote.
    pub fn flush(&self) -> PersistResult<bool> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(false);
        }
        let text = {
            let mut record = self.lock();
            record.prune(persist::now_unix());
            record.encode()
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| persist::PersistError::Io {
                action: "creating",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        persist::write_atomic(&self.path, text.as_bytes(), 0o644).inspect_err(|_| {
            // Tried again at the next flush.
            self.dirty.store(true, Ordering::Release);
        })?;
        Ok(true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_survives_a_restart_and_a_bad_file_is_set_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let d = Demand::load(&host);
        assert!(
            !d.flush().expect("nothing to write"),
            "an unchanged record is not written"
        );
        d.note("nvidia-259", Note::Request);
        d.note("nvidia-259", Note::Cold);
        assert!(d.flush().expect("flush"));
        assert!(!d.flush().expect("flush"), "written once");
        let again = Demand::load(&host);
        let now = persist::now_unix();
        let total = again.with(|r| r.total("nvidia-259", now - 600, now + 600));
        assert_eq!((total.requests, total.cold), (1, 1));

        // A FIFO where the record was: set aside, never waited on; counting starts afresh.
        let path = host.state("demand");
        std::fs::remove_file(&path).expect("rm");
        nix::unistd::mkfifo(
            &path,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .expect("mkfifo");
        let fresh = Demand::load(&host);
        assert_eq!(fresh.with(|r| r.entries()), 0);
        assert!(host.state("demand.bad").exists());
        // Text that is not the format: set aside too.
        std::fs::write(&path, "not a record").expect("write");
        let fresh = Demand::load(&host);
        assert_eq!(fresh.with(|r| r.entries()), 0);
        assert!(host.state("demand.bad.2").exists());
        fresh.note("nvidia-259", Note::Refused);
        assert!(fresh.flush().expect("a new file"));
        assert_eq!(Demand::load(&host).with(|r| r.entries()), 1);
    }
}
