//! The `vgpud-sim` crate's simulator behind the host's seam ([`SimulatedKernel`]): each call
//! is the simulator's own, its tool output turned into vgpud's [`ToolOutput`], and its CPU
//! time counted apart from vgpud's ([`crate::metrics::cpu`]).

use std::io;
use std::path::Path;

use super::{SimulatedKernel, ToolOutput, TreeWrite, TreeWriteReport};
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

    fn follow_tree_writes(&self, root: &Path, report: TreeWriteReport) -> io::Result<()> {
        let (mut writes, before) = measure(Kernel, || vgpud_sim::TreeWrites::watch(root))?;
        let tell = move |w: vgpud_sim::TreeWrite| {
            report(TreeWrite {
                path: w.path,
                value: w.value,
                result: w.result,
            });
        };
        before.into_iter().for_each(&tell);
        std::thread::Builder::new()
            .name("vgpud-sim-writes".into())
            .spawn(move || {
                // Blocked in its read, the thread spends no CPU: what it counts is the
                // simulated kernel's work.
                while let Ok(applied) = measure(Kernel, || writes.wait()) {
                    applied.into_iter().for_each(&tell);
                }
            })?;
        Ok(())
    }
}
