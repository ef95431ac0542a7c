//! The changes vgpud makes itself to a directory someone watches (`etc/mdevctl.d`, which the
//! daemon watches with inotify for definitions that mdevctl or an operator change): each one
//! is noted before it is made, and the watcher takes the note back when the event arrives, so
//! that vgpud's own writes never make it look at the whole host again. Only changes to
//! watched directories are noted, and only while a watcher is on; a note older than
//! [`EXPIRY`] no longer hides anything (its event was lost, or never came).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a note waits for its event.
pub const EXPIRY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Notes {
    /// The directories being watched, by the watcher.
    watched: Vec<PathBuf>,
    /// Per file: changes expected, and when the last was noted.
    expected: HashMap<PathBuf, (u32, Instant)>,
}

static NOTES: Mutex<Option<Notes>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Notes) -> T) -> T {
    let mut g = NOTES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(g.get_or_insert_with(Notes::default))
}

/// A watcher watches `dir` and the directories below it from now on.
pub fn watching(dir: &Path) {
    with(|n| {
        if !n.watched.iter().any(|w| w == dir) {
            n.watched.push(dir.to_path_buf());
        }
    });
}

/// vgpud is about to create, replace or remove `path` (one event).
pub fn note(path: &Path) {
    with(|n| {
        if !n.watched.iter().any(|w| path.starts_with(w)) {
            return;
        }
        let now = Instant::now();
        let e = n.expected.entry(path.to_path_buf()).or_insert((0, now));
        if now.duration_since(e.1) > EXPIRY {
            e.0 = 0;
        }
        e.0 += 1;
        e.1 = now;
    });
}

/// The change noted for `path` did not happen after all.
pub fn cancel(path: &Path) {
    with(|n| {
        if let Some(e) = n.expected.get_mut(path) {
            e.0 = e.0.saturating_sub(1);
            if e.0 == 0 {
                n.expected.remove(path);
            }
        }
    });
}

/// For the watcher: whether an event on `path` is one vgpud noted (and takes the note).
pub fn take(path: &Path) -> bool {
    with(|n| {
        let Some(e) = n.expected.get_mut(path) else {
            return false;
        };
        let fresh = e.1.elapsed() <= EXPIRY;
        e.0 = e.0.saturating_sub(1);
        if e.0 == 0 || !fresh {
            n.expected.remove(path);
        }
        fresh
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noted_changes_of_watched_directories_are_taken_once_each() {
        let dir = tempfile::tempdir().expect("tempdir");
        let watched = dir.path().join("watched");
        let file = watched.join("p/u");
        let other = dir.path().join("other/u");
        note(&file);
        assert!(!take(&file), "not watched yet: nothing noted");
        watching(&watched);
        note(&file);
        note(&file);
        note(&other);
        assert!(take(&file));
        assert!(take(&file));
        assert!(!take(&file), "each note hides one event");
        assert!(!take(&other), "outside the watched directory");
        note(&file);
        cancel(&file);
        assert!(!take(&file));
    }
}
