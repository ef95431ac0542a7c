//! Multi-step host changes, planned as a list of steps by pure functions (unit-tested for
//! order) and then executed through [`Host`]: moving PCI functions to vfio-pci and back, and
//! changing the number of SR-IOV virtual functions.

use std::path::PathBuf;

use crate::discovery::pci::PciFunction;
use crate::host::{Host, HostError, ToolOutput};
use crate::model::MovedFunction;

/// The driver passthrough binds functions to.
pub const VFIO_PCI: &str = "vfio-pci";

/// One write to the host (or one run of a host tool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Writes `driver_override` of a function (`None` clears it).
    SetOverride {
        /// The function.
        address: String,
        /// The only driver that may bind it, or `None` for any.
        driver: Option<String>,
    },
    /// Unbinds a function from its driver (`drivers/<driver>/unbind`).
    Unbind {
        /// The function.
        address: String,
        /// The driver it is bound to.
        driver: String,
    },
    /// Binds a function to a driver (`drivers/<driver>/bind`).
    Bind {
        /// The function.
        address: String,
        /// The driver.
        driver: String,
    },
    /// Asks the kernel to bind a function to a matching driver (`drivers_probe`).
    Probe {
        /// The function.
        address: String,
    },
    /// Writes `sriov_numvfs` of a physical function.
    SetNumVfs {
        /// The physical function.
        pf: String,
        /// The number of VFs.
        count: u32,
    },
    /// Runs a host tool (NVIDIA's `sriov-manage`).
    RunTool {
        /// The program, a path below the host's root.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
    },
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The kernel refused a write.
    #[error("{0}")]
    Host(#[from] HostError),
    /// A tool exited with a failure.
    #[error("{program} {args} failed with status {status}: {message}")]
    Tool {
        /// The program.
        program: String,
        /// Its arguments, joined.
        args: String,
        /// Its exit status.
        status: i32,
        /// What it printed on standard error, else on standard output.
        message: String,
    },
}

impl StepError {
    /// The errno of a refused write.
    pub fn errno(&self) -> Option<i32> {
        match self {
            StepError::Host(e) => e.errno(),
            StepError::Tool { .. } => None,
        }
    }
}

/// Plans moving `functions` (every non-bridge function of an IOMMU group) to vfio-pci: first
/// `driver_override` on each, then each is unbound from its driver, then each is probed, so
/// that no function is ever probed by its old driver again and the group is never half
/// bound longer than needed. Functions already on vfio-pci are left alone.
pub fn plan_bind_vfio(functions: &[PciFunction]) -> Vec<Step> {
    let moving: Vec<&PciFunction> = functions
        .iter()
        .filter(|f| !f.is_bridge && f.driver.as_deref() != Some(VFIO_PCI))
        .collect();
    let mut steps: Vec<Step> = moving
        .iter()
        .map(|f| Step::SetOverride {
            address: f.address.clone(),
            driver: Some(VFIO_PCI.to_string()),
        })
        .collect();
    steps.extend(moving.iter().filter_map(|f| {
        f.driver.as_ref().map(|d| Step::Unbind {
            address: f.address.clone(),
            driver: d.clone(),
        })
    }));
    steps.extend(moving.iter().map(|f| Step::Probe {
        address: f.address.clone(),
    }));
    steps
}

/// What [`plan_bind_vfio`] changes, as the record of the drivers to give back.
pub fn moved_functions(functions: &[PciFunction]) -> Vec<MovedFunction> {
    functions
        .iter()
        .filter(|f| !f.is_bridge && f.driver.as_deref() != Some(VFIO_PCI))
        .map(|f| MovedFunction {
            address: f.address.clone(),
            driver: f.driver.clone(),
        })
        .collect()
}

/// Plans giving functions back to the drivers they had, in reverse order of
/// [`plan_bind_vfio`]: clear `driver_override`, unbind from vfio-pci, bind the old driver
/// (functions that had none stay unbound). `bound` says which functions are on vfio-pci now.
pub fn plan_restore_drivers(moved: &[MovedFunction], bound: &[String]) -> Vec<Step> {
    let mut steps: Vec<Step> = moved
        .iter()
        .rev()
        .map(|m| Step::SetOverride {
            address: m.address.clone(),
            driver: None,
        })
        .collect();
    steps.extend(
        moved
            .iter()
            .rev()
            .filter(|m| bound.contains(&m.address))
            .map(|m| Step::Unbind {
                address: m.address.clone(),
                driver: VFIO_PCI.to_string(),
            }),
    );
    steps.extend(moved.iter().rev().filter_map(|m| {
        m.driver.as_ref().map(|d| Step::Bind {
            address: m.address.clone(),
            driver: d.clone(),
        })
    }));
    steps
}

/// How a physical function's VF count is changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VfMethod {
    /// `sriov_numvfs`, with the kernel's rules.
    Sysfs,
    /// NVIDIA's `sriov-manage` at this path (below the host's root): all VFs or none.
    SriovManage(PathBuf),
}

/// Plans setting the VF count of `pf` from `current` to `wanted`. `sriov-manage` only enables
/// all `total` VFs or disables them, so other counts are an error naming what it can do.
/// Through sysfs the kernel's rules apply as they are (a change between two non-zero counts
/// is refused with EBUSY), so the plan is one write.
pub fn plan_vf_count(
    pf: &str,
    method: &VfMethod,
    current: u32,
    total: u32,
    wanted: u32,
) -> Result<Vec<Step>, String> {
    if wanted == current {
        return Ok(Vec::new());
    }
    match method {
        VfMethod::Sysfs => Ok(vec![Step::SetNumVfs {
            pf: pf.to_string(),
            count: wanted,
        }]),
        VfMethod::SriovManage(program) => {
            let flag = if wanted == 0 {
                "-d"
            } else if wanted == total {
                "-e"
            } else {
                return Err(format!(
                    "{pf} is an NVIDIA GPU: sriov-manage enables all {total} VFs or none, not {wanted}"
                ));
            };
            Ok(vec![Step::RunTool {
                program: program.clone(),
                args: vec![flag.to_string(), pf.to_string()],
            }])
        }
    }
}

/// Executes steps in order; stops at the first that fails and returns how many succeeded
/// with the error.
pub fn execute(host: &Host, steps: &[Step]) -> Result<(), (usize, StepError)> {
    for (i, step) in steps.iter().enumerate() {
        run_step(host, step).map_err(|e| (i, e))?;
    }
    Ok(())
}

fn run_step(host: &Host, step: &Step) -> Result<(), StepError> {
    let devices = host.sys("bus/pci/devices");
    let drivers = host.sys("bus/pci/drivers");
    match step {
        Step::SetOverride { address, driver } => host.write_attr(
            &devices.join(address).join("driver_override"),
            &format!("{}\n", driver.as_deref().unwrap_or("")),
        )?,
        Step::Unbind { address, driver } => {
            host.write_attr(&drivers.join(driver).join("unbind"), address)?
        }
        Step::Bind { address, driver } => {
            host.write_attr(&drivers.join(driver).join("bind"), address)?
        }
        Step::Probe { address } => host.write_attr(&host.sys("bus/pci/drivers_probe"), address)?,
        Step::SetNumVfs { pf, count } => host.write_attr(
            &devices.join(pf).join("sriov_numvfs"),
            &format!("{count}\n"),
        )?,
        Step::RunTool { program, args } => {
            let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let out: ToolOutput = host.run_tool(program, &arg_refs)?;
            if !out.success() {
                let message = if out.stderr.trim().is_empty() {
                    out.stdout.trim().to_string()
                } else {
                    out.stderr.trim().to_string()
                };
                return Err(StepError::Tool {
                    program: program.display().to_string(),
                    args: args.join(" "),
                    status: out.status,
                    message,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(address: &str, driver: Option<&str>, bridge: bool) -> PciFunction {
        PciFunction {
            address: address.into(),
            vendor_id: 0x10de,
            device_id: 0x24b0,
            class: if bridge { 0x060400 } else { 0x030000 },
            driver: driver.map(str::to_string),
            driver_override: None,
            iommu_group: Some(7),
            is_bridge: bridge,
            boot_vga: false,
            physical_function: None,
        }
    }

    #[test]
    fn binding_sets_every_override_then_unbinds_then_probes() {
        let fns = [
            function("0000:41:00.0", Some("nvidia"), false),
            function("0000:41:00.1", Some("snd_hda_intel"), false),
            function("0000:40:01.0", Some("pcieport"), true),
            function("0000:41:00.2", None, false),
        ];
        let steps = plan_bind_vfio(&fns);
        let o = |a: &str| Step::SetOverride {
            address: a.into(),
            driver: Some(VFIO_PCI.into()),
        };
        let u = |a: &str, d: &str| Step::Unbind {
            address: a.into(),
            driver: d.into(),
        };
        let p = |a: &str| Step::Probe { address: a.into() };
        assert_eq!(
            steps,
            vec![
                o("0000:41:00.0"),
                o("0000:41:00.1"),
                o("0000:41:00.2"),
                u("0000:41:00.0", "nvidia"),
                u("0000:41:00.1", "snd_hda_intel"),
                p("0000:41:00.0"),
                p("0000:41:00.1"),
                p("0000:41:00.2"),
            ]
        );
        let moved = moved_functions(&fns);
        assert_eq!(moved.len(), 3, "the bridge stays");
        assert_eq!(moved[2].driver, None);
    }

    #[test]
    fn functions_already_on_vfio_are_left_alone() {
        let fns = [function("0000:41:00.0", Some(VFIO_PCI), false)];
        assert!(plan_bind_vfio(&fns).is_empty());
        assert!(moved_functions(&fns).is_empty());
    }

    #[test]
    fn restoring_runs_in_reverse_and_binds_the_old_drivers() {
        let moved = vec![
            MovedFunction {
                address: "0000:41:00.0".into(),
                driver: Some("nvidia".into()),
            },
            MovedFunction {
                address: "0000:41:00.1".into(),
                driver: Some("snd_hda_intel".into()),
            },
            MovedFunction {
                address: "0000:41:00.2".into(),
                driver: None,
            },
        ];
        let bound = vec!["0000:41:00.0".to_string(), "0000:41:00.1".to_string()];
        let steps = plan_restore_drivers(&moved, &bound);
        let c = |a: &str| Step::SetOverride {
            address: a.into(),
            driver: None,
        };
        let u = |a: &str| Step::Unbind {
            address: a.into(),
            driver: VFIO_PCI.into(),
        };
        let b = |a: &str, d: &str| Step::Bind {
            address: a.into(),
            driver: d.into(),
        };
        assert_eq!(
            steps,
            vec![
                c("0000:41:00.2"),
                c("0000:41:00.1"),
                c("0000:41:00.0"),
                u("0000:41:00.1"),
                u("0000:41:00.0"),
                b("0000:41:00.1", "snd_hda_intel"),
                b("0000:41:00.0", "nvidia"),
            ]
        );
    }

    #[test]
    fn vf_counts_follow_the_method() {
        let tool = VfMethod::SriovManage("/r/usr/lib/nvidia/sriov-manage".into());
        let run = |flag: &str| {
            vec![Step::RunTool {
                program: "/r/usr/lib/nvidia/sriov-manage".into(),
                args: vec![flag.into(), "0000:41:00.0".into()],
            }]
        };
        assert_eq!(
            plan_vf_count("0000:41:00.0", &tool, 0, 32, 32),
            Ok(run("-e"))
        );
        assert_eq!(
            plan_vf_count("0000:41:00.0", &tool, 32, 32, 0),
            Ok(run("-d"))
        );
        assert_eq!(plan_vf_count("0000:41:00.0", &tool, 32, 32, 32), Ok(vec![]));
        let err = plan_vf_count("0000:41:00.0", &tool, 0, 32, 8).expect_err("8 of 32");
        assert!(err.contains("all 32 VFs or none"), "{err}");
        assert_eq!(
            plan_vf_count("0000:00:02.0", &VfMethod::Sysfs, 2, 7, 4),
            Ok(vec![Step::SetNumVfs {
                pf: "0000:00:02.0".into(),
                count: 4
            }])
        );
    }
}
