//! File-system helpers shared by the simulated kernel and the profiles: relative links,
//! atomic attribute updates, and existence checks that do not follow links.

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
        Ok(_) => fs::remove_file(link)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::symlink(content, link)
}

/// Removes a file or link, treating "already gone" as success.
pub(crate) fn remove_quiet(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes a directory tree, treating "already gone" as success.
pub(crate) fn remove_dir_quiet(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
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
    let tmp = dir.join(format!(".{name}.vgpud-{}-{n}", std::process::id()));
    let result = fs::write(&tmp, content)
        .and_then(|()| fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)))
        .and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Reads a file if it exists; `None` when it does not or cannot be read.
pub(crate) fn read_opt(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// Names of the entries of a directory, sorted; empty when it does not exist.
pub(crate) fn list(path: &Path) -> io::Result<Vec<String>> {
    let entries = match fs::read_dir(path) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
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
}
