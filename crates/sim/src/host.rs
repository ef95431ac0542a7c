//! [`SimHost`]: a simulated host's root as the simulator's tools and tests see it, the
//! simulator's own counterpart of vgpud's `Host` (paths built from the root, reads straight
//! from the tree, writes with the simulated kernel's side effects).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::{Simulator, ToolOutput};

/// A simulated tree at a root directory, written through the [`Simulator`].
#[derive(Debug)]
pub struct SimHost {
    root: PathBuf,
    sim: Simulator,
}

impl SimHost {
    /// The simulated host whose tree is at `root` (a profile's, see [`crate::write_profile`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SimHost {
            root: root.into(),
            sim: Simulator::new(),
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

    /// `ROOT/dev/<rel>`.
    pub fn dev(&self, rel: &str) -> PathBuf {
        self.root.join("dev").join(rel)
    }

    /// Writes `value` to `path` as the simulated kernel does ([`Simulator::write`]).
    pub fn write_attr(&self, path: &Path, value: &str) -> io::Result<()> {
        self.sim.write(&self.root, path, value)
    }

    /// Reads an attribute without its trailing newlines, computed first when the driver
    /// computes it on read ([`Simulator::before_read`]).
    pub fn read_attr(&self, path: &Path) -> io::Result<String> {
        self.sim.before_read(&self.root, path)?;
        let s = fs::read_to_string(path)?;
        Ok(s.trim_end_matches('\n').to_string())
    }

    /// [`SimHost::read_attr`], `None` when the file does not exist.
    pub fn read_attr_opt(&self, path: &Path) -> io::Result<Option<String>> {
        match self.read_attr(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            other => other.map(Some),
        }
    }

    /// The last component of a link's target, `None` when there is no link.
    pub fn link_name(&self, path: &Path) -> io::Result<Option<String>> {
        match fs::read_link(path) {
            Ok(t) => Ok(t.file_name().map(|n| n.to_string_lossy().into_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `path` with every link resolved.
    pub fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        fs::canonicalize(path)
    }

    /// The sorted names in a directory; none when it does not exist.
    pub fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let entries = match fs::read_dir(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            other => other?,
        };
        let mut names = entries
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<io::Result<Vec<_>>>()?;
        names.sort();
        Ok(names)
    }

    /// Runs a host tool as the simulator carries it out ([`Simulator::run_tool`]); the
    /// program must exist below the root, as on a real host.
    pub fn run_tool(&self, program: &Path, args: &[&str]) -> io::Result<ToolOutput> {
        fs::metadata(program)?;
        self.sim.run_tool(&self.root, program, args)
    }

    /// Finishes a write a killed process left half-done ([`Simulator::recover`]).
    pub fn recover(&self) -> io::Result<()> {
        self.sim.recover(&self.root)
    }
}
