//! The `vgpud-sim` crate's simulator behind the host's seam ([`SimulatedKernel`]): each call
//! is the simulator's own, its tool output turned into vgpud's [`ToolOutput`], and its CPU
//! time counted apart from vgpud's ([`crate::metrics::cpu`]).

use std::io;
use std::path::Path;

use super::{SimulatedKernel, ToolOutput};
use crate::metrics::cpu::{measure, Part::SimulatedKernel as Kernel};

impl SimulatedKernel for vgpud_sim::Simulator {
    fn write(&self, root: &Path, path: &Path, value: &str) -> io::Result<()> {
        measure(Kernel, || {
            vgpud_sim::Simulator::write(self, root, path, value)
        })
    }

    fn before_read(&self, root: &Path, path: &Path) -> io::Result<()> {
        measure(Kernel, || {
            vgpud_sim::Simulator::before_read(self, root, path)
        })
    }

    fn run_tool(&self, root: &Path, program: &Path, args: &[&str]) -> io::Result<ToolOutput> {
        let out = measure(Kernel, || {
            vgpud_sim::Simulator::run_tool(self, root, program, args)
        })?;
        Ok(ToolOutput {
            status: out.status,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }

    fn recover(&self, root: &Path) -> io::Result<()> {
        measure(Kernel, || vgpud_sim::Simulator::recover(self, root))
    }
}
