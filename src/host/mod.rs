//! All access to the host goes through [`Host`]: one object rooted at a path, from which every
//! sysfs, `/etc`, `/run`, `/var/lib` and `/dev` path is built (mdevctl's `Environment`).
//!
//! Reads go straight to the file system. Writes below `sys/` go through [`Host::write_attr`],
//! the single place where the real host and the simulated one differ: on a real host the write
//! reaches the kernel, on a simulated host a [`SimulatedKernel`] (the `vgpud-sim` crate's
//! simulator, see `simulated.rs`) applies the kernel's and the driver's side effects.

mod simulated;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::metrics::cpu::{measure, Part::KernelWrites};

/// The seam between vgpud and a simulated host: what the kernel and the drivers do there,
/// each call given the host's root. Implemented for the `vgpud-sim` crate's simulator, which
/// knows nothing of vgpud (so the trait lives here, its types are the standard library's and
/// [`ToolOutput`], and the impl is vgpud's, in `simulated.rs`).
pub trait SimulatedKernel: Send + Sync {
    /// A write of `value` to `path` below `ROOT/sys`, with the kernel's side effects, or the
    /// errno the kernel would return.
    fn write(&self, root: &Path, path: &Path, value: &str) -> io::Result<()>;

    /// Before a read of `path`: computes an attribute the driver computes when it is read.
    fn before_read(&self, root: &Path, path: &Path) -> io::Result<()>;

    /// What host tool `program` does when run with `args`, and what it prints.
    fn run_tool(&self, root: &Path, program: &Path, args: &[&str]) -> io::Result<ToolOutput>;

    /// Finishes an operation a killed process left half-done.
    fn recover(&self, root: &Path) -> io::Result<()>;

    /// From now on, applies the writes other processes make straight into the tree's mdev
    /// attributes (`echo UUID > create`, `mdevctl start`), as a kernel runs them, and tells
    /// `report` of each; the writes made before are applied first.
    fn follow_tree_writes(&self, root: &Path, report: TreeWriteReport) -> io::Result<()>;
}

/// Where [`SimulatedKernel::follow_tree_writes`] tells of each write it applied.
pub type TreeWriteReport = Box<dyn Fn(TreeWrite) + Send + Sync>;

/// A write another process made into a simulated tree, and what the simulated kernel made of
/// it (the errno a real kernel would have given the writer, who got none).
#[derive(Debug)]
pub struct TreeWrite {
    /// The attribute written.
    pub path: PathBuf,
    /// What was written.
    pub value: String,
    /// What the simulated kernel made of it.
    pub result: io::Result<()>,
}

pub mod uevent;

/// An error of host access, naming the path and carrying the OS error.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A file or link could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path that was read.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// A write was refused by the kernel (or the simulated kernel) or the file system.
    #[error("writing {value:?} to {path} failed: {source}")]
    Write {
        /// The attribute written.
        path: PathBuf,
        /// What was written, shortened for the message.
        value: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// A file held something vgpud could not parse.
    #[error("unexpected content in {path}: {reason}")]
    Parse {
        /// The file read.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

impl HostError {
    /// The errno the kernel returned, if this error carries one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            HostError::Read { source, .. } | HostError::Write { source, .. } => {
                source.raw_os_error()
            }
            HostError::Parse { .. } => None,
        }
    }

    /// Whether the error says the file does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            HostError::Read { source, .. } | HostError::Write { source, .. } => {
                source.kind() == io::ErrorKind::NotFound
            }
            HostError::Parse { .. } => false,
        }
    }
}

/// Result of host access.
pub type HostResult<T> = Result<T, HostError>;

/// How a host tool (NVIDIA's `sriov-manage`) exited and what it printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutput {
    /// Exit status; -1 when the tool was killed by a signal.
    pub status: i32,
    /// What it printed on standard output.
    pub stdout: String,
    /// What it printed on standard error.
    pub stderr: String,
}

impl ToolOutput {
    /// Whether the tool exited with status 0.
    pub fn success(&self) -> bool {
        self.status == 0
    }
}

/// The host vgpud manages: a root directory and, on a simulated host, the simulator hook.
#[derive(Clone)]
pub struct Host {
    root: PathBuf,
    simulator: Option<Arc<dyn SimulatedKernel>>,
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("root", &self.root)
            .field("simulated", &self.simulator.is_some())
            .finish()
    }
}

impl Host {
    /// A real host rooted at `root` (`/` in production).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Host {
            root: root.into(),
            simulator: None,
        }
    }

    /// A simulated host: writes below `sys/` get the kernel's side effects from the simulator
    /// (`vgpud-sim`).
    pub fn simulated(root: impl Into<PathBuf>) -> Self {
        Host::with_kernel(root, Arc::new(vgpud_sim::Simulator::new()))
    }

    /// A simulated host whose kernel and drivers `kernel` stands in for.
    pub fn with_kernel(root: impl Into<PathBuf>, kernel: Arc<dyn SimulatedKernel>) -> Self {
        Host {
            root: root.into(),
            simulator: Some(kernel),
        }
    }

    /// Whether the kernel side effects are simulated.
    pub fn is_simulated(&self) -> bool {
        self.simulator.is_some()
    }

    /// On a simulated host, finishes a simulated kernel operation that a killed process left
    /// half-done (the real kernel's writes cannot be interrupted that way). Nothing to do on a
    /// real host.
    pub fn recover_simulation(&self) -> io::Result<()> {
        match &self.simulator {
            Some(sim) => sim.recover(&self.root),
            None => Ok(()),
        }
    }

    /// On a simulated host, applies from now on the writes other processes make straight
    /// into the tree (see [`SimulatedKernel::follow_tree_writes`]); `false` on a real host,
    /// whose kernel runs them itself.
    pub fn follow_tree_writes(&self, report: TreeWriteReport) -> io::Result<bool> {
        match &self.simulator {
            Some(sim) => sim.follow_tree_writes(&self.root, report).map(|()| true),
            None => Ok(false),
        }
    }

    /// The root directory every path is built from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `ROOT/sys/<rel>`.
    pub fn sys(&self, rel: &str) -> PathBuf {
        self.root.join("sys").join(rel)
    }

    /// `ROOT/etc/<rel>`.
    pub fn etc(&self, rel: &str) -> PathBuf {
        self.root.join("etc").join(rel)
    }

    /// `ROOT/run/<rel>`.
    pub fn run(&self, rel: &str) -> PathBuf {
        self.root.join("run").join(rel)
    }

    /// `ROOT/var/lib/vgpud/<rel>`: vgpud's own state.
    pub fn state(&self, rel: &str) -> PathBuf {
        self.root.join("var/lib/vgpud").join(rel)
    }

    /// `ROOT/dev/<rel>`.
    pub fn dev(&self, rel: &str) -> PathBuf {
        self.root.join("dev").join(rel)
    }

    /// Reads a sysfs attribute and strips the trailing newline. On a simulated host, an
    /// attribute the real driver computes when it is read (a VF's
    /// `nvidia/creatable_vgpu_types`) is computed first ([`SimulatedKernel::before_read`]).
    pub fn read_attr(&self, path: &Path) -> HostResult<String> {
        if let Some(sim) = &self.simulator {
            sim.before_read(&self.root, path)
                .map_err(|source| HostError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
        }
        let mut s = fs::read_to_string(path).map_err(|source| HostError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        while s.ends_with('\n') {
            s.pop();
        }
        Ok(s)
    }

    /// Reads a sysfs attribute if it exists.
    pub fn read_attr_opt(&self, path: &Path) -> HostResult<Option<String>> {
        match self.read_attr(path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads an attribute holding a number in decimal or `0x` hexadecimal.
    pub fn read_number(&self, path: &Path) -> HostResult<i64> {
        let s = self.read_attr(path)?;
        parse_number(s.trim()).ok_or_else(|| HostError::Parse {
            path: path.to_path_buf(),
            reason: format!("{s:?} is not a number"),
        })
    }

    /// The basename of a symlink's target (`driver`, `iommu_group`, `mdev_type`), or `None`
    /// when the link does not exist.
    pub fn link_name(&self, path: &Path) -> HostResult<Option<String>> {
        match fs::read_link(path) {
            Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(HostError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Resolves every link in `path`; relative links stay inside the root.
    pub fn resolve(&self, path: &Path) -> HostResult<PathBuf> {
        fs::canonicalize(path).map_err(|source| HostError::Read {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Names of the entries of a directory, sorted; empty if the directory does not exist.
    pub fn list_dir(&self, path: &Path) -> HostResult<Vec<String>> {
        let entries = match fs::read_dir(path) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(HostError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| HostError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// Writes a sysfs attribute. This is the only write to `sys/` vgpud makes: on a real host
    /// it reaches the kernel; on a simulated host the simulator applies the kernel's effects.
    pub fn write_attr(&self, path: &Path, value: &str) -> HostResult<()> {
        let result = match &self.simulator {
            Some(sim) if path.starts_with(self.root.join("sys")) => {
                sim.write(&self.root, path, value)
            }
            _ => measure(KernelWrites, || write_kernel(path, value)),
        };
        result.map_err(|source| HostError::Write {
            path: path.to_path_buf(),
            value: shorten(value),
            source,
        })
    }
}

impl Host {
    /// Runs a host tool at `program` (a path below the root, such as
    /// `ROOT/usr/lib/nvidia/sriov-manage`) with `args`. The program must exist on either host.
    /// On a real host it is executed; on a simulated host the simulator carries out what the
    /// tool does as simulated sysfs writes (the only other place real and simulated differ).
    pub fn run_tool(&self, program: &Path, args: &[&str]) -> HostResult<ToolOutput> {
        let read_err = |source: io::Error| HostError::Read {
            path: program.to_path_buf(),
            source,
        };
        fs::metadata(program).map_err(read_err)?;
        match &self.simulator {
            Some(sim) => sim.run_tool(&self.root, program, args).map_err(read_err),
            None => {
                let out = std::process::Command::new(program)
                    .args(args)
                    .stdin(std::process::Stdio::null())
                    .output()
                    .map_err(read_err)?;
                Ok(ToolOutput {
                    status: out.status.code().unwrap_or(-1),
                    stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                })
            }
        }
    }
}

/// Writes `value` to a kernel attribute the way `echo -n value > path` does: one write call on
/// an existing file, never creating it.
fn write_kernel(path: &Path, value: &str) -> io::Result<()> {
    use std::io::Write;
    let mut f = fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

fn shorten(value: &str) -> String {
    const MAX: usize = 64;
    if value.len() <= MAX {
        return value.to_string();
    }
    let mut end = MAX;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &value[..end], value.len())
}

/// Parses a decimal or `0x` hexadecimal number as sysfs prints them.
pub fn parse_number(s: &str) -> Option<i64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(hex, 16).ok()
    } else {
        s.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_as_sysfs_prints_them() {
        assert_eq!(parse_number("0x030000"), Some(0x030000));
        assert_eq!(parse_number("-1"), Some(-1));
        assert_eq!(parse_number("24"), Some(24));
        assert_eq!(parse_number("x"), None);
    }

    #[test]
    fn paths_are_built_from_the_root() {
        let h = Host::new("/tmp/r");
        assert_eq!(h.sys("bus/pci"), PathBuf::from("/tmp/r/sys/bus/pci"));
        assert_eq!(
            h.state("state.json"),
            PathBuf::from("/tmp/r/var/lib/vgpud/state.json")
        );
        assert_eq!(h.etc("mdevctl.d"), PathBuf::from("/tmp/r/etc/mdevctl.d"));
    }

    #[test]
    fn long_values_are_shortened_in_messages() {
        let s = "a".repeat(1000);
        assert!(shorten(&s).len() < 100);
        assert_eq!(shorten("abc"), "abc");
    }

    /// A simulated kernel that records what reaches it.
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<String>>);

    impl Recorder {
        fn note(&self, what: String) {
            self.0.lock().expect("lock").push(what);
        }
    }

    impl SimulatedKernel for Recorder {
        fn write(&self, _root: &Path, path: &Path, value: &str) -> io::Result<()> {
            self.note(format!("write {} {value}", path.display()));
            Ok(())
        }
        fn before_read(&self, _root: &Path, path: &Path) -> io::Result<()> {
            self.note(format!("read {}", path.display()));
            Ok(())
        }
        fn run_tool(&self, _root: &Path, program: &Path, args: &[&str]) -> io::Result<ToolOutput> {
            self.note(format!("run {} {}", program.display(), args.join(" ")));
            Ok(ToolOutput {
                status: 3,
                ..ToolOutput::default()
            })
        }
        fn recover(&self, root: &Path) -> io::Result<()> {
            self.note(format!("recover {}", root.display()));
            Ok(())
        }
        fn follow_tree_writes(&self, root: &Path, _report: TreeWriteReport) -> io::Result<()> {
            self.note(format!("follow {}", root.display()));
            Ok(())
        }
    }

    #[test]
    fn the_seam_gets_writes_below_sys_reads_and_tool_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        fs::create_dir_all(root.join("sys")).expect("sys");
        fs::write(root.join("sys/attr"), "1\n").expect("attr");
        fs::create_dir_all(root.join("etc")).expect("etc");
        fs::write(root.join("etc/conf"), "").expect("conf");
        fs::write(root.join("tool"), "").expect("tool");
        let kernel = Arc::new(Recorder::default());
        let h = Host::with_kernel(root, kernel.clone());
        assert!(h.is_simulated());
        h.write_attr(&root.join("sys/attr"), "2")
            .expect("sys write");
        h.write_attr(&root.join("etc/conf"), "x")
            .expect("etc write");
        assert_eq!(h.read_attr(&root.join("sys/attr")).expect("read"), "1");
        assert_eq!(
            h.run_tool(&root.join("tool"), &["-e"]).expect("run").status,
            3
        );
        assert!(h.run_tool(&root.join("none"), &[]).is_err(), "no program");
        h.recover_simulation().expect("recover");
        let r = root.display();
        assert_eq!(
            *kernel.0.lock().expect("lock"),
            [
                format!("write {r}/sys/attr 2"),
                format!("read {r}/sys/attr"),
                format!("run {r}/tool -e"),
                format!("recover {r}"),
            ]
        );
        // Outside sys/ the write reached the file itself.
        assert_eq!(
            fs::read_to_string(root.join("etc/conf")).expect("conf"),
            "x"
        );
    }

    #[test]
    fn real_writes_never_create_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = Host::new(dir.path());
        let err = h
            .write_attr(&dir.path().join("sys/nope"), "1")
            .expect_err("must fail");
        assert!(err.is_not_found());
        assert!(!dir.path().join("sys/nope").exists());
    }
}
