//! File-system helpers shared by the simulated kernel and the profiles: relative links,
//! atomic attribute updates, and existence checks that do not follow links.
//!
//! Every helper that changes the tree first calls [`step`], where the unit tests can make the
//! simulated writer die between any two file operations (see `journal.rs`).

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;

/// An `io::Error` carrying `errno`, as the kernel returns it from a write.
pub(crate) fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// A point between two file operations of a simulated write. In unit tests a writer can be
/// made to die here (see [`crash`]); otherwise it does nothing.
#[inline]
pub(crate) fn step() -> io::Result<()> {
    #[cfg(test)]
    crash::step()?;
    Ok(())
}

/// Whether `e` is the death of the writer staged by [`crash`].
#[cfg(test)]
pub(crate) fn is_crash(e: &io::Error) -> bool {
    crash::is_crash(e)
}

/// Whether `e` is the death of a writer staged by the unit tests: never, outside them.
#[cfg(not(test))]
pub(crate) fn is_crash(_e: &io::Error) -> bool {
    false
}

/// Staged deaths of a simulated writer, for the unit tests: after `arm(k)`, the k+1-th
/// [`step`] of this thread fails with a crash error, and so does every later one until
/// `disarm()`: a dead process does no more work, not even clean-up.
#[cfg(test)]
pub(crate) mod crash {
    use std::cell::Cell;
    use std::io;

    thread_local! {
        static LEFT: Cell<Option<usize>> = const { Cell::new(None) };
        static DEAD: Cell<bool> = const { Cell::new(false) };
    }

    /// The error a staged death produces.
    #[derive(Debug)]
    struct Crash;

    impl std::fmt::Display for Crash {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("simulated writer killed")
        }
    }

    impl std::error::Error for Crash {}

    /// Lets `k` more steps happen on this thread, then kills the writer.
    pub(crate) fn arm(k: usize) {
        LEFT.with(|l| l.set(Some(k)));
        DEAD.with(|d| d.set(false));
    }

    /// Stops staging deaths on this thread; returns whether the armed one happened.
    pub(crate) fn disarm() -> bool {
        LEFT.with(|l| l.set(None));
        DEAD.with(|d| d.replace(false))
    }

    pub(super) fn step() -> io::Result<()> {
        LEFT.with(|l| match l.get() {
            Some(0) => {
                DEAD.with(|d| d.set(true));
                Err(io::Error::other(Crash))
            }
            Some(n) => {
                l.set(Some(n - 1));
                Ok(())
            }
            None => Ok(()),
        })
    }

    pub(super) fn is_crash(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<Crash>())
    }
}

/// Creates a directory (its parent must exist).
pub(crate) fn create_dir(path: &Path) -> io::Result<()> {
    step()?;
    fs::create_dir(path)
}

/// Creates a directory and its parents, unless it exists.
pub(crate) fn create_dir_all(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    step()?;
    fs::create_dir_all(path)
}

/// Whether anything (file, directory, or link, dangling or not) is at `path`.
pub(crate) fn exists_nofollow(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// The relative path that leads from directory `from` to `to`; both absolute and free of
/// `.`/`..` (canonical paths below the same root).
pub(crate) fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component<'_>> = from.components().collect();
    let to: Vec<Component<'_>> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut rel = PathBuf::new();
    for _ in common..from.len() {
        rel.push("..");
    }
    for c in &to[common..] {
        rel.push(c.as_os_str());
    }
    rel
}

/// Makes `link` a relative symlink to the absolute path `target`, replacing whatever link was
/// there (a real file or directory in the way is an error).
pub(crate) fn symlink_rel(link: &Path, target: &Path) -> io::Result<()> {
    let dir = link.parent().ok_or_else(|| errno(Errno::EINVAL))?;
    let rel = relative(dir, target);
    symlink_exact(link, &rel)
}

/// Makes `link` a symlink whose content is exactly `content`, replacing an existing link.
pub(crate) fn symlink_exact(link: &Path, content: &Path) -> io::Result<()> {
    match fs::read_link(link) {
        Ok(old) if old == content => return Ok(()),
        Ok(_) => {
            step()?;
            fs::remove_file(link)?
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    step()?;
    std::os::unix::fs::symlink(content, link)
}

/// `Ok` for success or "already gone".
fn gone(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes a file or link, treating "already gone" as success.
pub(crate) fn remove_quiet(path: &Path) -> io::Result<()> {
    step()?;
    gone(fs::remove_file(path))
}

/// Removes a directory tree (links are removed, never followed), treating "already gone" as
/// success; one entry at a time, so a writer can die half-way as with `rm -r`.
pub(crate) fn remove_dir_quiet(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.is_dir() {
        for name in list(path)? {
            remove_dir_quiet(&path.join(name))?;
        }
        step()?;
        gone(fs::remove_dir(path))
    } else {
        remove_quiet(path)
    }
}

/// Removes a directory if it is empty; one that is gone or not empty is left as it is.
pub(crate) fn remove_empty_dir(path: &Path) -> io::Result<()> {
    step()?;
    match fs::remove_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => Ok(()),
        other => other,
    }
}

/// The prefix and infix of [`write_atomic`]'s temporary files: `.NAME.vgpud-PID-N`.
fn temp_name(name: &str, pid: u32, n: u64) -> String {
    format!(".{name}.vgpud-{pid}-{n}")
}

/// Whether `name` is a temporary file of [`write_atomic`] made by process `pid`.
fn is_temp_of(name: &str, pid: u32) -> bool {
    let infix = format!(".vgpud-{pid}-");
    name.starts_with('.')
        && name
            .rsplit_once(&infix)
            .is_some_and(|(head, n)| head.len() > 1 && n.parse::<u64>().is_ok())
}

/// Removes the temporary files process `pid` left in `dir` when it died inside
/// [`write_atomic`].
pub(crate) fn remove_temps(dir: &Path, pid: u32) -> io::Result<()> {
    for name in list(dir)? {
        if is_temp_of(&name, pid) {
            remove_quiet(&dir.join(name))?;
        }
    }
    Ok(())
}

/// Replaces the content of the file at `path` atomically (write a sibling, rename over), so a
/// concurrent reader sees the old or the new value, never a torn one. The file keeps its mode;
/// a new file gets `mode`. Works on read-only (0444) attribute files whoever runs it.
pub(crate) fn write_atomic(path: &Path, content: &str, mode: u32) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().ok_or_else(|| errno(Errno::EINVAL))?;
    let name = path
        .file_name()
        .ok_or_else(|| errno(Errno::EINVAL))?
        .to_string_lossy();
    let mode = match fs::symlink_metadata(path) {
        Ok(m) => m.permissions().mode() & 0o7777,
        Err(_) => mode,
    };
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(temp_name(&name, std::process::id(), n));
    step()?;
    let result = fs::write(&tmp, content)
        .and_then(|()| step())
        .and_then(|()| fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)))
        .and_then(|()| step())
        .and_then(|()| fs::rename(&tmp, path));
    match result {
        Err(e) if is_crash(&e) => Err(e),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
        Ok(()) => Ok(()),
    }
}

/// Reads a file if it exists; `None` when it does not or cannot be read.
pub(crate) fn read_opt(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// Names of the entries of a directory, sorted; empty when it does not exist.
pub(crate) fn list(path: &Path) -> io::Result<Vec<String>> {
    list_where(path, |_| Ok(true))
}

/// Names of the entries of a directory that are directories (links followed), sorted; empty
/// when it does not exist. Uses the entries' types from the directory listing, so it costs no
/// `stat` per entry where the file system reports them.
pub(crate) fn list_dirs(path: &Path) -> io::Result<Vec<String>> {
    list_where(path, |entry| {
        let kind = entry.file_type()?;
        Ok(kind.is_dir() || (kind.is_symlink() && entry.path().is_dir()))
    })
}

/// Names of the entries of a directory that `keep` keeps, sorted; empty when it does not
/// exist.
fn list_where(
    path: &Path,
    keep: impl Fn(&fs::DirEntry) -> io::Result<bool>,
) -> io::Result<Vec<String>> {
    let entries = match fs::read_dir(path) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry?;
        if keep(&entry)? {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Reads a small file (an attribute) if it exists, in as few calls as the file allows: open,
/// one read that comes back short (the end of a regular file), close.
pub(crate) fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut file = fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 256];
    let mut len = 0;
    loop {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len < buf.len() {
                    // Short: the end of the file (a regular file reads short only there).
                    break;
                }
                buf.resize(buf.len() * 2, 0);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

/// What identifies one version of a file: device, inode, size, modification and change time.
type FileKey = (u64, u64, u64, i64, i64, i64, i64);

/// Texts of static attribute files read before, by path, with the version they were read from.
static STATIC_TEXTS: std::sync::Mutex<
    Option<std::collections::HashMap<PathBuf, (FileKey, String)>>,
> = std::sync::Mutex::new(None);

/// How many texts [`read_static`] keeps at most (a host has a few hundred type descriptions).
const STATIC_TEXTS_MAX: usize = 4096;

/// How long after its last change a file's text is not kept: longer than the file-system
/// clock's granularity, so that any later change of the file shows in its times.
const STATIC_SETTLE_NS: i128 = 100_000_000;

/// [`read_opt`] for files that do not change while the kernel runs (a type's `description`,
/// a device's `resource`): the text read last time is given back, for the cost of one `stat`,
/// while the file is the same version (same device, inode, size, modification and change
/// times). A text is only kept when the file's last change is older than the file-system
/// clock's granularity, so that a change made later cannot leave the times as they were. A file
/// replaced (a new inode), rewritten, touched or removed is read again.
pub(crate) fn read_static(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).ok()?;
    if !meta.is_file() {
        return read_opt(path);
    }
    let key: FileKey = (
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    );
    let mut cache = STATIC_TEXTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((k, text)) = cache.as_ref().and_then(|c| c.get(path)) {
        if *k == key {
            return Some(text.clone());
        }
    }
    drop(cache);
    let text = read_small(path)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    let last = ns(key.3, key.4).max(ns(key.5, key.6));
    if now - last > STATIC_SETTLE_NS {
        cache = STATIC_TEXTS.lock().unwrap_or_else(|p| p.into_inner());
        let map = cache.get_or_insert_with(Default::default);
        if map.len() >= STATIC_TEXTS_MAX {
            map.clear();
        }
        map.insert(path.to_path_buf(), (key, text.clone()));
    }
    Some(text)
}

/// The basename of a link's target, if `path` is a link.
pub(crate) fn link_basename(path: &Path) -> Option<String> {
    fs::read_link(path)
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_to_the_common_ancestor() {
        assert_eq!(
            relative(
                Path::new("/r/sys/bus/mdev/devices"),
                Path::new("/r/sys/devices/pci0000:00/0000:00:02.0/u")
            ),
            PathBuf::from("../../../devices/pci0000:00/0000:00:02.0/u")
        );
        assert_eq!(
            relative(Path::new("/r/a/b"), Path::new("/r/a/b/c")),
            PathBuf::from("c")
        );
    }

    #[test]
    fn atomic_writes_keep_the_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("available_instances");
        write_atomic(&p, "3\n", 0o444).expect("create");
        write_atomic(&p, "2\n", 0o644).expect("replace");
        assert_eq!(fs::read_to_string(&p).expect("read"), "2\n");
        let mode = fs::metadata(&p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o444);
        assert_eq!(list(dir.path()).expect("list"), vec!["available_instances"]);
    }

    #[test]
    fn temporary_files_are_told_apart() {
        let name = temp_name("available_instances", 42, 7);
        assert_eq!(name, ".available_instances.vgpud-42-7");
        assert!(is_temp_of(&name, 42));
        assert!(!is_temp_of(&name, 4));
        assert!(!is_temp_of("available_instances", 42));
        assert!(!is_temp_of(".vgpud-42-7", 42));
        assert!(!is_temp_of(".x.vgpud-42-", 42));
        assert!(is_temp_of(&temp_name("a.vgpud-42-1", 42, 3), 42));
    }

    #[test]
    fn a_writer_dying_inside_an_atomic_write_leaves_the_old_value() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("vgpu_params");
        write_atomic(&p, "old", 0o644).expect("create");
        for k in 0.. {
            crash::arm(k);
            let result = write_atomic(&p, "new", 0o644);
            let died = crash::disarm();
            if !died {
                result.expect("write");
                break;
            }
            assert!(is_crash(&result.expect_err("died")));
            assert_eq!(fs::read_to_string(&p).expect("read"), "old");
            remove_temps(dir.path(), std::process::id()).expect("sweep");
            assert_eq!(list(dir.path()).expect("list"), vec!["vgpu_params"]);
        }
        assert_eq!(fs::read_to_string(&p).expect("read"), "new");
    }

    #[test]
    fn static_texts_follow_their_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("description");
        fs::write(&p, "max_instance=24\n").expect("write");
        // Too fresh to keep: read again, and seen at once after an in-place rewrite.
        assert_eq!(read_static(&p).as_deref(), Some("max_instance=24\n"));
        fs::write(&p, "max_instance=12\n").expect("rewrite");
        assert_eq!(read_static(&p).as_deref(), Some("max_instance=12\n"));
        std::thread::sleep(std::time::Duration::from_millis(150));
        assert_eq!(read_static(&p).as_deref(), Some("max_instance=12\n"));
        assert_eq!(read_static(&p).as_deref(), Some("max_instance=12\n"));
        // Replaced, rewritten or removed: read again.
        write_atomic(&p, "max_instance=8\n", 0o444).expect("replace");
        assert_eq!(read_static(&p).as_deref(), Some("max_instance=8\n"));
        std::thread::sleep(std::time::Duration::from_millis(150));
        assert_eq!(read_static(&p).as_deref(), Some("max_instance=8\n"));
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).expect("chmod");
        fs::write(&p, "max_instance=4\n").expect("rewrite");
        assert_eq!(read_static(&p).as_deref(), Some("max_instance=4\n"));
        fs::remove_file(&p).expect("rm");
        assert_eq!(read_static(&p), None);
        assert_eq!(read_small(&p), None);
        let big = "x".repeat(1000);
        fs::write(&p, &big).expect("big");
        assert_eq!(read_small(&p).as_deref(), Some(big.as_str()));
    }

    #[test]
    fn trees_are_removed_without_following_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keep = dir.path().join("keep");
        fs::create_dir_all(keep.join("inner")).expect("mkdir");
        let gone_dir = dir.path().join("gone");
        fs::create_dir_all(gone_dir.join("a/b")).expect("mkdir");
        fs::write(gone_dir.join("a/b/f"), "x").expect("write");
        std::os::unix::fs::symlink("../keep", gone_dir.join("link")).expect("link");
        remove_dir_quiet(&gone_dir).expect("rm");
        assert!(!gone_dir.exists());
        assert!(keep.join("inner").is_dir());
        remove_dir_quiet(&gone_dir).expect("already gone");
    }
}
