//! Host tools the simulator carries out itself: NVIDIA's `sriov-manage`
//! (`/usr/lib/nvidia/sriov-manage <-e|-d> <ssss:bb:dd.f|ALL>`), as the sequence of sysfs writes
//! the real script makes, each one a [`Simulator::write`] (so each is atomic and takes the
//! same code path as any other write).
//!
//! `-e BDF`: a function that is not an NVIDIA device exits 1 silently (the script's
//! `sanitize_gpu_sbdf`); one without `sriov_numvfs` exits 0 silently; one whose base class is
//! not 0x03 prints `This is not a VGA or 3D controller. Exiting.` on stderr and exits 1. With
//! VFs already enabled it prints `GPU at BDF already has VFs enabled.` and exits 0. Otherwise
//! it prints `Enabling VFs on BDF` and: unbinds the PF from its driver (the NVIDIA unbindLock
//! is assumed to be granted: no NVML client holds a simulated GPU), writes the PF's
//! `vvvv dddd` to `pci-pf-stub/new_id` (which binds it, and `EEXIST` is only reported), binds
//! it to `pci-pf-stub` unless that happened, writes `sriov_totalvfs` to `sriov_numvfs`,
//! unbinds it from `pci-pf-stub`, writes `remove_id`, binds it to `nvidia`; then binds every
//! other function on the PF's bus to `nvidia`, unbinding it from another driver first. Before
//! the writes, the simulated driver (`vgpud-sim-driver`) forgets the GPU's GPU instances and
//! heterogeneous mode (`GpuState::sriov_enabled`), as the real script's driver reload does
//! (hardware.md §3.1: "this wipes existing GIs"; §2.4); the MIG mode stays.
//!
//! `-d BDF`: the same checks; `GPU at BDF already has VFs disabled.` when there are none; else
//! `Disabling VFs on BDF`, every other function on the bus is unbound from `vfio-pci` and from
//! `nvidia`, then the same `pci-pf-stub` sequence writes 0 (heterogeneous mode is forgotten).
//!
//! `ALL`: every NVIDIA function `x:00.0` of class 0x0300 or 0x0302, in address order, each as
//! its own run; the first failure ends it with its status.
//!
//! Where the real script goes on after a failed write (it has no `set -e`), the emulation stops
//! at the first failed write, prints what failed on stderr, and exits 1.

use std::io;

use super::binding::{hex_attr, ids};
use super::{SimHost, Simulator};

/// How a simulated host tool exited and what it printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutput {
    /// Exit status.
    pub status: i32,
    /// What it printed on standard output.
    pub stdout: String,
    /// What it printed on standard error.
    pub stderr: String,
}

const USAGE: &str = "Usage:
    /usr/lib/nvidia/sriov-manage <-e|-d> <ssss:bb:dd.f|ALL>
        Enable/disable Virtual functions on the GPU specified by the PCI_ID=ssss:bb:dd.f.
        If 'ALL' is specified in place of PCI_ID, operate on all the nvidia GPUs in the system.

    /usr/lib/nvidia/sriov-manage -h
        Print this help.
";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Enable,
    Disable,
}

/// `sriov-manage ARGS` on the simulated host.
pub(crate) fn sriov_manage(
    sim: &Simulator,
    host: &SimHost,
    args: &[&str],
) -> io::Result<ToolOutput> {
    let mut mode = None;
    let mut gpu = String::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.strip_prefix('-') {
            Some(rest) if !rest.is_empty() => (rest.as_bytes()[0], &rest[1..]),
            _ => break,
        };
        match flag {
            b'h' => {
                return Ok(ToolOutput {
                    status: 0,
                    stderr: USAGE.to_string(),
                    ..ToolOutput::default()
                })
            }
            b'e' | b'd' => {
                let value = if inline.is_empty() {
                    match it.next() {
                        Some(v) => (*v).to_string(),
                        None => return Ok(usage(1)),
                    }
                } else {
                    inline.to_string()
                };
                mode = Some(if flag == b'e' {
                    Mode::Enable
                } else {
                    Mode::Disable
                });
                gpu = value;
            }
            _ => return Ok(usage(1)),
        }
    }
    let Some(mode) = mode else {
        return Ok(usage(1));
    };
    if gpu.eq_ignore_ascii_case("all") {
        let mut out = ToolOutput::default();
        for bdf in all_gpus(host)? {
            let one = run_one(sim, host, mode, &bdf)?;
            out.stdout.push_str(&one.stdout);
            out.stderr.push_str(&one.stderr);
            if one.status != 0 {
                out.status = one.status;
                return Ok(out);
            }
        }
        return Ok(out);
    }
    run_one(sim, host, mode, &gpu)
}

fn usage(status: i32) -> ToolOutput {
    ToolOutput {
        status,
        stderr: USAGE.to_string(),
        ..ToolOutput::default()
    }
}

/// `lspci -Dd 10de: -s 0.0 -n | awk '$2 ~ /030[02]/'`.
fn all_gpus(host: &SimHost) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for bdf in host.list_dir(&host.sys("bus/pci/devices"))? {
        let dir = host.sys(&format!("bus/pci/devices/{bdf}"));
        let (v, _, class) = ids(&dir);
        if v == 0x10de && bdf.ends_with(":00.0") && matches!(class >> 8, 0x0300 | 0x0302) {
            out.push(bdf);
        }
    }
    Ok(out)
}

/// `lspci -D -d 10de: -s GPU`: the full address of an NVIDIA function, if there is one.
fn sanitize(host: &SimHost, gpu: &str) -> Option<String> {
    let gpu = gpu.to_ascii_lowercase();
    let full = match gpu.matches(':').count() {
        2 => gpu,
        1 => format!("0000:{gpu}"),
        _ => return None,
    };
    let dir = host.sys(&format!("bus/pci/devices/{full}"));
    (dir.exists() && ids(&dir).0 == 0x10de).then_some(full)
}

/// One run of the script for one GPU.
struct Run<'a> {
    sim: &'a Simulator,
    host: &'a SimHost,
    out: ToolOutput,
}

impl Run<'_> {
    /// `echo VALUE > PATH` (below `ROOT/sys`); a refusal ends the run with status 1.
    fn echo(&mut self, rel: &str, value: &str) -> Result<(), ()> {
        self.try_echo(rel, value)
            .map_err(|e| self.fail(rel, value, &e))
    }

    fn try_echo(&self, rel: &str, value: &str) -> io::Result<()> {
        self.sim
            .write(self.host.root(), &self.host.sys(rel), &format!("{value}\n"))
    }

    fn fail(&mut self, rel: &str, value: &str, e: &io::Error) {
        self.out.stderr.push_str(&format!(
            "sriov-manage: echo {value} > /sys/{rel}: write error: {}\n",
            strerror(e)
        ));
        self.out.status = 1;
    }

    fn exists(&self, rel: &str) -> bool {
        std::fs::symlink_metadata(self.host.sys(rel)).is_ok()
    }

    fn driver(&self, bdf: &str) -> Option<String> {
        self.host
            .link_name(&self.host.sys(&format!("bus/pci/devices/{bdf}/driver")))
            .ok()
            .flatten()
    }

    /// `set_numvfs GPU N`: through `pci-pf-stub`, back to `nvidia`. The GPU's driver starts
    /// afresh, so its heterogeneous mode is gone (hardware.md §2.4: sriov-manage resets it).
    fn set_numvfs(&mut self, gpu: &str, n: u32) -> Result<(), ()> {
        let dev = self.host.sys(&format!("bus/pci/devices/{gpu}"));
        if let Err(e) = self.reset_driver(&dev, n > 0) {
            self.out.stderr.push_str(&format!(
                "sriov-manage: cannot reset the driver state of {gpu}: {e}\n"
            ));
            self.out.status = 1;
            return Err(());
        }
        if let Some(d) = self.driver(gpu) {
            self.echo(&format!("bus/pci/drivers/{d}/unbind"), gpu)?;
        }
        let dev = self.host.sys(&format!("bus/pci/devices/{gpu}"));
        let (v, d, _) = ids(&dev);
        let id = format!("{v:04x} {d:04x}");
        let new_id = "bus/pci/drivers/pci-pf-stub/new_id";
        match self.try_echo(new_id, &id) {
            Ok(()) => {}
            // The script carries on: the id is there already.
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EEXIST as i32) => {
                self.fail(new_id, &id, &e);
                self.out.status = 0;
            }
            Err(e) => {
                self.fail(new_id, &id, &e);
                return Err(());
            }
        }
        if !self.exists(&format!("bus/pci/drivers/pci-pf-stub/{gpu}")) {
            self.echo("bus/pci/drivers/pci-pf-stub/bind", gpu)?;
        }
        self.echo(
            &format!("bus/pci/devices/{gpu}/sriov_numvfs"),
            &n.to_string(),
        )?;
        self.echo("bus/pci/drivers/pci-pf-stub/unbind", gpu)?;
        self.echo("bus/pci/drivers/pci-pf-stub/remove_id", &id)?;
        self.echo("bus/pci/drivers/nvidia/bind", gpu)
    }

    /// What the driver forgets when sriov-manage reloads it on the GPU at `dev`: heterogeneous
    /// mode, and on enablement (`enable`) every GPU instance too (hardware.md §3.1, §6.6
    /// item 4). Under the tree's lock (tree lock, then the simulated driver's); a GPU the
    /// simulated driver stores nothing for is in its defaults already.
    fn reset_driver(&self, dev: &std::path::Path, enable: bool) -> io::Result<()> {
        let Ok(pf) = std::fs::canonicalize(dev) else {
            return Ok(());
        };
        let _guard = super::lock_tree(self.host.root())?;
        super::vgpu::update_driver(&pf, true, |s| {
            if enable {
                s.sriov_enabled();
            } else {
                s.heterogeneous = false;
            }
        })
        .map(|_| ())
    }

    /// The other functions on the GPU's bus (`lspci -D -s ${gpu/00.0}`).
    fn bus_functions(&self, gpu: &str) -> io::Result<Vec<String>> {
        let prefix = match gpu.rsplit_once(':') {
            Some((bus, _)) => format!("{bus}:"),
            None => return Ok(Vec::new()),
        };
        Ok(self
            .host
            .list_dir(&self.host.sys("bus/pci/devices"))?
            .into_iter()
            .filter(|b| b.starts_with(&prefix) && b != gpu)
            .collect())
    }

    fn enable(&mut self, gpu: &str) -> io::Result<Result<(), ()>> {
        let dev = self.host.sys(&format!("bus/pci/devices/{gpu}"));
        self.out
            .stdout
            .push_str(&format!("Enabling VFs on {gpu}\n"));
        let total = u32::try_from(dec_file(&dev, "sriov_totalvfs")).unwrap_or(0);
        if self.set_numvfs(gpu, total).is_err() {
            return Ok(Err(()));
        }
        for vf in self.bus_functions(gpu)? {
            if self.exists(&format!("bus/pci/drivers/nvidia/{vf}")) {
                continue;
            }
            if self.driver(&vf).is_some() {
                let r = self.echo(&format!("bus/pci/devices/{vf}/driver/unbind"), &vf);
                if r.is_err() {
                    return Ok(r);
                }
            }
            let r = self.echo("bus/pci/drivers/nvidia/bind", &vf);
            if r.is_err() {
                return Ok(r);
            }
        }
        Ok(Ok(()))
    }

    fn disable(&mut self, gpu: &str) -> io::Result<Result<(), ()>> {
        self.out
            .stdout
            .push_str(&format!("Disabling VFs on {gpu}\n"));
        for vf in self.bus_functions(gpu)? {
            for drv in ["vfio-pci", "nvidia"] {
                if self.exists(&format!("bus/pci/drivers/{drv}/{vf}")) {
                    let r = self.echo(&format!("bus/pci/drivers/{drv}/unbind"), &vf);
                    if r.is_err() {
                        return Ok(r);
                    }
                }
            }
        }
        Ok(self.set_numvfs(gpu, 0))
    }
}

/// A decimal attribute (`sriov_totalvfs`, `sriov_numvfs`); 0 when unreadable.
/// `nvidia-smi vgpu -i <gpu> -shm <0|1>` on the simulated host: turns the heterogeneous
/// (mixed-size) vGPU mode of one GPU on or off in the simulated driver's state
/// (`vgpud_sim_driver::GpuState::heterogeneous`, which the fake NVML library reports too; see
/// `vgpu.rs`). `<gpu>` is a PCI bus id (`00000000:41:00.0` or `0000:41:00.0`). It refuses,
/// exiting 3 ("not supported") for a GPU whose VFs do not use the vendor-specific VFIO
/// framework or have none enabled, or whose MIG mode is on (the driver's refusal), and exiting
/// 3 while any VF has a vGPU (an assumption: NVIDIA documents that the mode is set before any
/// vGPU is made). Other arguments: exit 2.
pub(crate) fn nvidia_smi(host: &SimHost, args: &[&str]) -> io::Result<ToolOutput> {
    let bad = |status: i32, message: String| ToolOutput {
        status,
        stderr: message,
        ..ToolOutput::default()
    };
    let (gpu, on) = match args {
        ["vgpu", "-i", gpu, "-shm", v] if *v == "0" || *v == "1" => (*gpu, *v == "1"),
        _ => {
            return Ok(bad(
                2,
                format!(
                    "Invalid combination of input arguments: {}\n",
                    args.join(" ")
                ),
            ))
        }
    };
    let address = match gpu.matches(':').count() {
        2 => gpu
            .rsplit_once(':')
            .map_or(gpu.to_string(), |(domain_bus, f)| {
                let (domain, bus) = domain_bus.split_once(':').unwrap_or(("0", domain_bus));
                let domain = u32::from_str_radix(domain, 16).unwrap_or(0);
                format!("{domain:04x}:{bus}:{f}").to_ascii_lowercase()
            }),
        _ => return Ok(bad(2, format!("Invalid PCI bus id {gpu}\n"))),
    };
    let dir = host.sys(&format!("bus/pci/devices/{address}"));
    let Ok(pf) = std::fs::canonicalize(&dir) else {
        return Ok(bad(6, format!("No GPU with PCI bus id {gpu} is found.\n")));
    };
    let vfs = super::binding::virtfns(&pf)?;
    let vendor_vfio = vfs
        .iter()
        .any(|vf| vf.join("nvidia/current_vgpu_type").is_file());
    if ids(&pf).0 != 0x10de || !vendor_vfio {
        return Ok(bad(
            3,
            format!("vGPU heterogeneous mode is not supported for GPU {gpu}.\n"),
        ));
    }
    let busy = vfs.iter().any(|vf| {
        std::fs::read_to_string(vf.join("nvidia/current_vgpu_type")).is_ok_and(|s| s.trim() != "0")
    });
    if busy {
        return Ok(bad(
            3,
            format!("Unable to change vGPU heterogeneous mode for GPU {gpu}: vGPU instances are active.\n"),
        ));
    }
    let changed = super::vgpu::update_driver(&pf, !on, |s| s.set_heterogeneous(on, false))?;
    match changed {
        Some(Err(vgpud_sim_driver::DriverError::NotSupported(why))) => {
            return Ok(bad(
                3,
                format!("vGPU heterogeneous mode is not supported for GPU {gpu}: {why}.\n"),
            ))
        }
        Some(Err(e)) => {
            return Ok(bad(
                3,
                format!("Unable to change vGPU heterogeneous mode for GPU {gpu}: {e}.\n"),
            ))
        }
        // Turning off a mode the driver never had on.
        None | Some(Ok(())) => {}
    }
    super::vgpu::refresh_pf(&pf)?;
    Ok(ToolOutput {
        status: 0,
        stdout: format!(
            "{} vGPU heterogeneous mode for GPU 0000{}\n",
            if on { "Enabled" } else { "Disabled" },
            address.to_ascii_uppercase()
        ),
        ..ToolOutput::default()
    })
}

fn dec_file(dir: &std::path::Path, name: &str) -> u64 {
    std::fs::read_to_string(dir.join(name))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn strerror(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => nix::errno::Errno::from_raw(n).desc().to_string(),
        None => e.to_string(),
    }
}

fn run_one(sim: &Simulator, host: &SimHost, mode: Mode, gpu: &str) -> io::Result<ToolOutput> {
    let mut run = Run {
        sim,
        host,
        out: ToolOutput::default(),
    };
    let Some(gpu) = sanitize(host, gpu) else {
        run.out.status = 1;
        return Ok(run.out);
    };
    let dev = host.sys(&format!("bus/pci/devices/{gpu}"));
    if !dev.join("sriov_numvfs").exists() {
        return Ok(run.out);
    }
    if hex_attr(&dev, "class").unwrap_or(0) >> 16 != 0x03 {
        run.out
            .stderr
            .push_str("This is not a VGA or 3D controller. Exiting.\n");
        run.out.status = 1;
        return Ok(run.out);
    }
    if !run.exists("bus/pci/drivers/pci-pf-stub") {
        run.out
            .stderr
            .push_str("modprobe: FATAL: Module pci-pf-stub not found.\n");
        run.out.status = 1;
        return Ok(run.out);
    }
    let numvfs = dec_file(&dev, "sriov_numvfs");
    let result = match mode {
        Mode::Enable if numvfs != 0 => {
            run.out
                .stdout
                .push_str(&format!("GPU at {gpu} already has VFs enabled.\n"));
            return Ok(run.out);
        }
        Mode::Disable if numvfs == 0 => {
            run.out
                .stdout
                .push_str(&format!("GPU at {gpu} already has VFs disabled.\n"));
            return Ok(run.out);
        }
        Mode::Enable => run.enable(&gpu)?,
        Mode::Disable => run.disable(&gpu)?,
    };
    if result.is_err() {
        run.out.status = 1;
    }
    Ok(run.out)
}
