//! Writes another process makes straight into the tree's mdev attributes: `echo UUID >
//! <type>/create` from a shell, `mdevctl start` with `MDEVCTL_ENV_ROOT` (which writes the
//! UUID to `create`), `echo 1 > <mdev>/remove` or `mdevctl stop`.
//!
//! On a real host such a write runs the attribute's store method in the kernel. A simulated
//! tree is plain files, so the write only changes a file; [`TreeWrites`] watches the files with
//! inotify and, when a writer closes `create` or `remove` with something in it, empties the
//! file again and runs the write through the simulated kernel: its side effects, and the
//! uevents a daemon on the host hears. Watched: the `create` of every type of every mdev
//! parent and the `remove` of every mdev (the files themselves, not their directories, where
//! the simulator's own writes would wake the watcher at every create); parents and mdevs that
//! come later are watched as they appear (`sys/class/mdev_bus` and `sys/bus/mdev/devices`).
//! Writes through the simulator itself ([`crate::Simulator::write`], `vgpud sim-host
//! --poke`) never touch these files, so they are not applied twice.
//!
//! What a file cannot do: give the writer the kernel's errno (its write succeeded on a file;
//! a refusal is only given to [`TreeWrites`]' caller, and `--poke` is the way to get the
//! errno), and keep two writes to one file that land before the first is read (the second
//! replaces the first).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

/// The most of a watched file that is read: a UUID and a newline is 37 bytes, so a value cut
/// at this length is refused by the simulated kernel as the whole one would be.
const MAX_VALUE: u64 = 4096;

/// One write another process made into the tree, run through the simulated kernel.
#[derive(Debug)]
pub struct TreeWrite {
    /// The attribute written (`…/create` or `…/remove`).
    pub path: PathBuf,
    /// What the writer wrote.
    pub value: String,
    /// What the kernel made of it: the errno a real kernel would have given the writer.
    pub result: io::Result<()>,
}

/// What a watch is on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Watched {
    /// `sys/class`, `sys/bus`, `sys/bus/mdev`: where the two below may come.
    Top,
    /// `sys/class/mdev_bus`: new parents.
    Parents,
    /// `sys/bus/mdev/devices`: new mdevs.
    Devices,
    /// A type's `create` or an mdev's `remove`: the file itself, so that nothing else
    /// written in its directory (the simulator's own temporary files) wakes the watcher.
    Attribute(PathBuf),
}

/// The inotify instance and what each of its watches is.
struct Watches {
    inotify: Inotify,
    root: PathBuf,
    by_wd: HashMap<WatchDescriptor, Watched>,
}

impl Watches {
    fn add(&mut self, path: &Path, what: Watched) {
        let mask = match what {
            Watched::Top | Watched::Parents | Watched::Devices => {
                AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_ONLYDIR
            }
            Watched::Attribute(_) => AddWatchFlags::IN_CLOSE_WRITE,
        };
        // A path that went meanwhile, or the user's watch limit: not watched.
        if let Ok(wd) = self.inotify.add_watch(path, mask) {
            self.by_wd.insert(wd, what);
        }
    }

    /// Watches `path` (`create` or `remove`; reached through links, as a writer reaches it)
    /// and applies what was written into it before (a writer quicker than the watch).
    fn add_attribute(&mut self, path: PathBuf) -> Option<TreeWrite> {
        self.add(&path, Watched::Attribute(path.clone()));
        apply(&self.root, &path)
    }

    /// Watches the `create` of every type of the parent at `parent`.
    fn add_parent(&mut self, parent: &Path) -> Vec<TreeWrite> {
        let base = parent.join("mdev_supported_types");
        crate::fsx::list(&base)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|ty| self.add_attribute(base.join(ty).join("create")))
            .collect()
    }

    /// Watches the `remove` of the mdev whose bus link is `link`.
    fn add_mdev(&mut self, link: &Path) -> Option<TreeWrite> {
        self.add_attribute(link.join("remove"))
    }

    /// Watches everything there is now, and applies what was written before.
    fn add_all(&mut self) -> Vec<TreeWrite> {
        for top in ["sys/class", "sys/bus", "sys/bus/mdev"] {
            self.add(&self.root.join(top), Watched::Top);
        }
        let parents = self.root.join("sys/class/mdev_bus");
        let devices = self.root.join("sys/bus/mdev/devices");
        self.add(&parents, Watched::Parents);
        self.add(&devices, Watched::Devices);
        let mut applied = Vec::new();
        for p in crate::fsx::list(&parents).unwrap_or_default() {
            applied.extend(self.add_parent(&parents.join(p)));
        }
        for d in crate::fsx::list(&devices).unwrap_or_default() {
            applied.extend(self.add_mdev(&devices.join(d)));
        }
        applied
    }
}

/// The writes other processes make into a simulated tree, applied as they are made (see the
/// module's doc).
pub struct TreeWrites {
    watches: Watches,
}

impl TreeWrites {
    /// Watches the tree at `root`; gives back too what was written into it before, applied.
    pub fn watch(root: &Path) -> io::Result<(TreeWrites, Vec<TreeWrite>)> {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).map_err(io::Error::from)?;
        let mut watches = Watches {
            inotify,
            root: root.to_path_buf(),
            by_wd: HashMap::new(),
        };
        let before = watches.add_all();
        Ok((TreeWrites { watches }, before))
    }

    /// Waits for the next writes and applies them; empty when what came was no such write.
    pub fn wait(&mut self) -> io::Result<Vec<TreeWrite>> {
        let events = match self.watches.inotify.read_events() {
            Ok(events) => events,
            Err(nix::errno::Errno::EINTR) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut applied = Vec::new();
        for event in events {
            if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                // Events were lost: look at everything again.
                applied.extend(self.watches.add_all());
                continue;
            }
            let Some(what) = self.watches.by_wd.get(&event.wd).cloned() else {
                continue;
            };
            if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                self.watches.by_wd.remove(&event.wd);
                continue;
            }
            let root = self.watches.root.clone();
            let name = event.name.as_ref().and_then(|n| n.to_str());
            match (what, name) {
                (Watched::Attribute(path), _) => applied.extend(apply(&root, &path)),
                (Watched::Top, _) => applied.extend(self.watches.add_all()),
                (Watched::Parents, Some(name)) => {
                    let parent = root.join("sys/class/mdev_bus").join(name);
                    applied.extend(self.watches.add_parent(&parent));
                }
                (Watched::Devices, Some(name)) => {
                    let link = root.join("sys/bus/mdev/devices").join(name);
                    applied.extend(self.watches.add_mdev(&link));
                }
                (Watched::Parents | Watched::Devices, None) => {}
            }
        }
        Ok(applied)
    }
}

/// Runs what a writer left in the attribute at `path` through the simulated kernel, after
/// emptying the file; nothing when it is empty (as the simulator leaves it), not a regular
/// file, or gone.
fn apply(root: &Path, path: &Path) -> Option<TreeWrite> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Most looks find the file empty (a new mdev's `remove`, or one just emptied): a `stat`
    // tells, and the file is not opened. It must not be: closing a file opened for writing is
    // itself an IN_CLOSE_WRITE, so a look that opened an empty file would wake the watcher
    // again, without end.
    let seen = fs::symlink_metadata(path).ok()?;
    if !seen.is_file() || seen.size() == 0 {
        return None;
    }
    // Never through a link put in its place, never waiting on a FIFO.
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.size() == 0 {
        return None;
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_VALUE + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    // Emptied through the same descriptor before the write runs, so that the next writer's
    // value is not taken for this one's.
    file.set_len(0).ok()?;
    drop(file);
    if bytes.is_empty() {
        return None;
    }
    let value = String::from_utf8_lossy(&bytes).into_owned();
    let result = crate::Simulator::new().write(root, path, &value);
    Some(TreeWrite {
        path: path.to_path_buf(),
        value,
        result,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATE: &str = "sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create";
    const ONE: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
    const TWO: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002";

    /// The next writes applied, waiting past events that were none.
    fn next_applied(writes: &mut TreeWrites) -> Vec<TreeWrite> {
        loop {
            let applied = writes.wait().expect("wait");
            if !applied.is_empty() {
                return applied;
            }
        }
    }

    #[test]
    fn a_quiet_tree_leaves_the_watcher_asleep_and_an_applied_write_wakes_it_once_more_at_most() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        crate::write_profile("mtty", &root).expect("profile");
        let (mut writes, before) = TreeWrites::watch(&root).expect("watch");
        assert!(before.is_empty());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            while let Ok(applied) = writes.wait() {
                if tx.send(applied.len()).is_err() {
                    return;
                }
            }
        });
        let quiet = std::time::Duration::from_millis(300);
        std::thread::sleep(quiet);
        assert_eq!(rx.try_iter().count(), 0, "woken with nothing written");
        fs::write(root.join(CREATE), ONE).expect("write");
        let first = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the write applied");
        assert_eq!(first, 1);
        std::thread::sleep(quiet);
        // The emptying of the file may wake it once (a close after a write), no more.
        let after: Vec<usize> = rx.try_iter().collect();
        assert!(
            after.len() <= 1 && after.iter().all(|n| *n == 0),
            "{after:?}"
        );
    }

    #[test]
    fn a_link_or_a_fifo_in_place_of_an_attribute_is_neither_followed_nor_waited_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        crate::write_profile("mtty", &root).expect("profile");
        let outside = root.join("outside");
        fs::write(&outside, format!("{ONE}\n")).expect("outside");
        let create = root.join(CREATE);
        fs::remove_file(&create).expect("rm");
        std::os::unix::fs::symlink(&outside, &create).expect("link");
        let other = root.join("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create");
        fs::remove_file(&other).expect("rm");
        nix::unistd::mkfifo(&other, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        let (tx, rx) = std::sync::mpsc::channel();
        let watched = root.clone();
        std::thread::spawn(move || {
            let _ = tx.send(TreeWrites::watch(&watched).map(|(_, before)| before.len()));
        });
        let applied = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("no hang on the FIFO")
            .expect("watch");
        assert_eq!(applied, 0);
        assert_eq!(
            fs::read_to_string(&outside).expect("outside"),
            format!("{ONE}\n"),
            "the link's target is left as it was"
        );
        assert!(!root.join(format!("sys/bus/mdev/devices/{ONE}")).exists());
    }

    #[test]
    fn writes_into_create_and_remove_run_through_the_simulated_kernel() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        crate::write_profile("mtty", &root).expect("profile");
        // Written before anybody watched: applied when the watch starts.
        fs::write(root.join(CREATE), format!("{ONE}\n")).expect("echo");
        let (mut writes, before) = TreeWrites::watch(&root).expect("watch");
        assert_eq!(before.len(), 1, "{before:?}");
        assert!(before[0].result.is_ok(), "{before:?}");
        assert!(root.join(format!("sys/bus/mdev/devices/{ONE}")).exists());
        assert_eq!(fs::read(root.join(CREATE)).expect("create"), b"");

        let (tx, rx) = std::sync::mpsc::channel();
        let worker = root.clone();
        std::thread::spawn(move || {
            // mdevctl's start: the UUID alone, 36 bytes.
            fs::write(worker.join(CREATE), TWO).expect("write");
            let made = next_applied(&mut writes);
            // A UUID the kernel refuses (it exists): the kernel's errno, and nothing made.
            fs::write(worker.join(CREATE), TWO).expect("write");
            let refused = next_applied(&mut writes);
            // mdevctl's stop, through the bus link.
            fs::write(
                worker.join(format!("sys/bus/mdev/devices/{ONE}/remove")),
                "1",
            )
            .expect("write");
            let removed = next_applied(&mut writes);
            let _ = tx.send((made, refused, removed));
        });
        let (made, refused, removed) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the writes applied within 10 s");
        assert_eq!(made.len(), 1);
        assert_eq!(made[0].value, TWO);
        assert!(made[0].result.is_ok(), "{made:?}");
        assert!(root.join(format!("sys/bus/mdev/devices/{TWO}")).exists());
        assert_eq!(
            refused[0].result.as_ref().map_err(io::Error::raw_os_error),
            Err(Some(nix::libc::EEXIST)),
            "{refused:?}"
        );
        assert!(removed[0].path.ends_with("remove"), "{removed:?}");
        assert!(removed[0].result.is_ok(), "{removed:?}");
        assert!(!root.join(format!("sys/bus/mdev/devices/{ONE}")).exists());
    }
}
