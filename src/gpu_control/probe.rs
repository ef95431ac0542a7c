//! `vgpud nvml-probe`: what the NVIDIA driver's NVML says about every GPU, to see on a real
//! host what the driver answers and which calls it refuses.
//!
//! **Read-only.** The probe calls only NVML queries (`nvml*Get*`, the list calls, the
//! scheduler log): it never sets a mode or the scheduler, never creates or destroys a GPU or
//! compute instance or a vGPU, and never resets a GPU. It is safe on a production host.
//!
//! For each GPU it prints: name, UUID, PCI id, memory, virtualization and host vGPU mode, MIG
//! mode (current/pending), every GPU-instance profile (NVML index, profile ID, name, slices,
//! memory, max instances, placements, remaining capacity), the GPU instances, heterogeneous
//! mode, the scheduler state and capabilities, the supported and creatable vGPU types, the
//! active vGPUs, telemetry, and every call that failed with its NVML return code. With
//! [`compare_with_simulator`] each MIG profile is printed next to the simulator's table
//! (`vgpud_sim_driver::mig_profiles`) and differences are flagged.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::vgpu::VgpuType;
use nvml_wrapper::Device;
use vgpud_nvml_raw as raw;

use super::nvml::{
    host_vgpu_mode_name, normalize_bus_id, return_code, virtualization_mode_name, NvmlControl,
};
use super::{GpuControl, SchedulerPolicy};

/// Prints what NVML says about every GPU to `out` (see the module doc). Read-only: no set,
/// create, destroy or reset call is made. `library`: the NVML library to load (`None`: the
/// default `libnvidia-ml.so.1`). Fails only when NVML cannot be loaded or `out` cannot be
/// written; a refused query is printed with its return code.
pub fn run(library: Option<&Path>, out: &mut dyn Write) -> Result<(), String> {
    probe(library, false, out)
}

/// [`run`], and next to each MIG profile the simulator's table value for the GPU's PCI device
/// ID (`vgpud_sim_driver::mig_profiles`), flagging each difference (`DIFFERS`), and the
/// simulator's profiles NVML does not list. Read-only as [`run`].
pub fn compare_with_simulator(library: Option<&Path>, out: &mut dyn Write) -> Result<(), String> {
    probe(library, true, out)
}

struct Probe {
    text: String,
    failures: Vec<String>,
}

impl Probe {
    fn line(&mut self, indent: usize, s: impl AsRef<str>) {
        let _ = writeln!(self.text, "{:indent$}{}", "", s.as_ref(), indent = indent);
    }

    fn fail(&mut self, call: &str, code: u32, detail: &str) -> String {
        let s = format!("{call}: return code {code} ({detail})");
        self.failures.push(s.clone());
        format!("failed: {s}")
    }

    /// A wrapper call's result; `None` (recorded) on failure.
    fn w<T>(&mut self, call: &str, r: Result<T, NvmlError>) -> Result<T, String> {
        r.map_err(|e| self.fail(call, return_code(&e), &e.to_string()))
    }

    /// A raw call's result.
    fn r<T>(&mut self, r: raw::RawResult<T>) -> Result<T, String> {
        r.map_err(|e| {
            let code = e.code().unwrap_or(return_code(&e.to_nvml_error()));
            let detail = e.to_nvml_error().to_string();
            self.fail(e.call(), code, &detail)
        })
    }
}

fn show<T: std::fmt::Display>(r: &Result<T, String>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(e) => e.clone(),
    }
}

fn onoff(v: u32) -> &'static str {
    if v == 1 {
        "on"
    } else {
        "off"
    }
}

fn mib(bytes: u64) -> u64 {
    bytes / (1024 * 1024)
}

fn probe(library: Option<&Path>, compare: bool, out: &mut dyn Write) -> Result<(), String> {
    let control = NvmlControl::open(library)?;
    let nvml = control.nvml();
    let mut p = Probe {
        text: String::new(),
        failures: Vec::new(),
    };
    p.line(
        0,
        format!(
            "NVML probe of {} (read-only: no set, create, destroy or reset calls)",
            control.library()
        ),
    );
    let driver = p.w("nvmlSystemGetDriverVersion", nvml.sys_driver_version());
    p.line(0, format!("driver version: {}", show(&driver)));
    let version = p.w("nvmlSystemGetNVMLVersion", nvml.sys_nvml_version());
    p.line(0, format!("NVML version: {}", show(&version)));
    let count = p.w("nvmlDeviceGetCount_v2", nvml.device_count());
    p.line(0, format!("GPUs: {}", show(&count)));
    let global_failures = std::mem::take(&mut p.failures);
    if !global_failures.is_empty() {
        p.line(0, "failed calls:");
        for f in &global_failures {
            p.line(2, f);
        }
    }
    out.write_all(p.text.as_bytes())
        .map_err(|e| format!("cannot write: {e}"))?;
    p.text.clear();
    for i in 0..count.unwrap_or(0) {
        p.line(0, "");
        match p.w("nvmlDeviceGetHandleByIndex_v2", nvml.device_by_index(i)) {
            Ok(d) => probe_gpu(&mut p, &control, &d, i, compare),
            Err(e) => p.line(0, format!("GPU index {i}: {e}")),
        }
        if !p.failures.is_empty() {
            p.line(2, "failed calls:");
            for f in std::mem::take(&mut p.failures) {
                p.line(4, f);
            }
        } else {
            p.line(2, "failed calls: none");
        }
        out.write_all(p.text.as_bytes())
            .map_err(|e| format!("cannot write: {e}"))?;
        p.text.clear();
    }
    out.flush().map_err(|e| format!("cannot write: {e}"))
}

fn probe_gpu(p: &mut Probe, control: &NvmlControl, d: &Device<'_>, index: u32, compare: bool) {
    let pci = p.w("nvmlDeviceGetPciInfo_v3", d.pci_info());
    let (address, device_id) = match &pci {
        Ok(pci) => (
            normalize_bus_id(&pci.bus_id),
            (pci.pci_device_id >> 16) as u16,
        ),
        Err(_) => (format!("index {index}"), 0),
    };
    p.line(0, format!("GPU {address} (index {index})"));
    let name = p.w("nvmlDeviceGetName", d.name());
    p.line(2, format!("name: {}", show(&name)));
    let uuid = p.w("nvmlDeviceGetUUID", d.uuid());
    p.line(2, format!("uuid: {}", show(&uuid)));
    match &pci {
        Ok(pci) => p.line(
            2,
            format!(
                "pci: {address} device 0x{:04x} vendor 0x{:04x} subsystem {}",
                pci.pci_device_id >> 16,
                pci.pci_device_id & 0xffff,
                pci.pci_sub_system_id
                    .map(|s| format!("0x{s:08x}"))
                    .unwrap_or_else(|| "-".into())
            ),
        ),
        Err(e) => p.line(2, format!("pci: {e}")),
    }
    match p.w("nvmlDeviceGetMemoryInfo", d.memory_info()) {
        Ok(m) => p.line(
            2,
            format!(
                "memory: total {} MiB, used {} MiB, free {} MiB",
                mib(m.total),
                mib(m.used),
                mib(m.free)
            ),
        ),
        Err(e) => p.line(2, format!("memory: {e}")),
    }
    let virt = p
        .w("nvmlDeviceGetVirtualizationMode", d.virtualization_mode())
        .map(|m| virtualization_mode_name(&m));
    p.line(2, format!("virtualization mode: {}", show(&virt)));
    let host = p
        .w("nvmlDeviceGetHostVgpuMode", d.vgpu_host_mode())
        .map(|m| host_vgpu_mode_name(&m));
    p.line(2, format!("host vGPU mode: {}", show(&host)));
    match p.w("nvmlDeviceGetMigMode", d.mig_mode()) {
        Ok(m) => p.line(
            2,
            format!(
                "MIG mode: current {}, pending {}",
                onoff(m.current),
                onoff(m.pending)
            ),
        ),
        Err(e) => p.line(2, format!("MIG mode: {e}")),
    }

    probe_profiles(p, d, device_id, compare);

    p.line(2, "GPU instances:");
    match p.r(raw::all_gpu_instances(d)) {
        Ok(gis) if gis.is_empty() => p.line(4, "none"),
        Ok(gis) => {
            for gi in &gis {
                let info = p.r(raw::gpu_instance_info(gi));
                let cis = p.r(raw::compute_instances(gi));
                match info {
                    Ok(i) => p.line(
                        4,
                        format!(
                            "id {} profile {} placement {}:{} compute instances {}",
                            i.id,
                            i.profile_id,
                            i.placement.start,
                            i.placement.size,
                            cis.map(|c| c.len().to_string()).unwrap_or_else(|e| e)
                        ),
                    ),
                    Err(e) => p.line(4, e),
                }
            }
        }
        Err(e) => p.line(4, e),
    }

    let het = p
        .r(raw::heterogeneous_mode(d))
        .map(|h| if h { "on" } else { "off" });
    p.line(2, format!("heterogeneous mode: {}", show(&het)));

    match p.w("nvmlDeviceGetVgpuSchedulerState", d.vgpu_scheduler_state()) {
        Ok(s) => p.line(
            2,
            format!(
                "scheduler state: policy {} ({}) arr mode {}",
                s.scheduler_policy,
                policy_name(s.scheduler_policy),
                s.arr_mode
            ),
        ),
        Err(e) => p.line(2, format!("scheduler state: {e}")),
    }
    match p.r(raw::vgpu_scheduler_log(d)) {
        Ok(l) => p.line(
            2,
            format!(
                "scheduler log: engine {} policy {} arr mode {} time slice {} ns avg factor {} entries {}",
                l.engine_id,
                l.policy,
                l.arr_mode,
                l.timeslice_ns,
                l.avg_factor,
                l.entries.len()
            ),
        ),
        Err(e) => p.line(2, format!("scheduler log: {e}")),
    }
    match p.w(
        "nvmlDeviceGetVgpuSchedulerCapabilities",
        d.vgpu_scheduler_capabilities(),
    ) {
        Ok(c) => p.line(
            2,
            format!(
                "scheduler capabilities: policies {:?} time slice {}-{} ns arr {} frequency {}-{} Hz avg factor {}-{}",
                c.supported_schedulers,
                c.min_time_slice,
                c.max_time_slice,
                c.is_arr_mode_supported,
                c.min_freq_for_arr,
                c.max_freq_for_arr,
                c.min_avg_factor_for_arr,
                c.max_avg_factor_for_arr
            ),
        ),
        Err(e) => p.line(2, format!("scheduler capabilities: {e}")),
    }

    p.line(2, "supported vGPU types:");
    match p.w("nvmlDeviceGetSupportedVgpus", d.vgpu_supported_types()) {
        Ok(types) => vgpu_types(p, &types),
        Err(e) => p.line(4, e),
    }
    p.line(2, "creatable vGPU types:");
    match p.w("nvmlDeviceGetCreatableVgpus", d.vgpu_creatable_types()) {
        Ok(types) => vgpu_types(p, &types),
        Err(e) => p.line(4, e),
    }

    p.line(2, "active vGPUs:");
    match pci.as_ref().ok().map(|_| control.active_vgpus(&address)) {
        Some(Ok(list)) if list.is_empty() => p.line(4, "none"),
        Some(Ok(list)) => {
            for v in list {
                p.line(
                    4,
                    format!(
                        "type {} mdev {} pci {} gpu instance {} fb used {} MiB utilization {}",
                        v.type_id,
                        if v.mdev_uuid.is_empty() {
                            "-"
                        } else {
                            &v.mdev_uuid
                        },
                        if v.pci_address.is_empty() {
                            "-"
                        } else {
                            &v.pci_address
                        },
                        v.gpu_instance_id
                            .map(|g| g.to_string())
                            .unwrap_or_else(|| "-".into()),
                        mib(v.fb_used),
                        v.utilization
                            .map(|u| format!(
                                "sm {}% memory {}% encoder {}% decoder {}%",
                                u.gpu, u.memory, u.encoder, u.decoder
                            ))
                            .unwrap_or_else(|| "-".into())
                    ),
                );
            }
        }
        Some(Err(e)) => {
            let s = e.to_string();
            p.failures.push(s.clone());
            p.line(4, format!("failed: {s}"));
        }
        None => p.line(4, "no PCI address"),
    }

    p.line(2, "telemetry:");
    let util = p.w("nvmlDeviceGetUtilizationRates", d.utilization_rates());
    p.line(
        4,
        format!(
            "utilization: {}",
            match &util {
                Ok(u) => format!("gpu {}% memory {}%", u.gpu, u.memory),
                Err(e) => e.clone(),
            }
        ),
    );
    let enc = p
        .w("nvmlDeviceGetEncoderUtilization", d.encoder_utilization())
        .map(|u| format!("{}%", u.utilization));
    p.line(4, format!("encoder: {}", show(&enc)));
    let dec = p
        .w("nvmlDeviceGetDecoderUtilization", d.decoder_utilization())
        .map(|u| format!("{}%", u.utilization));
    p.line(4, format!("decoder: {}", show(&dec)));
    let temp = p
        .w(
            "nvmlDeviceGetTemperature",
            d.temperature(TemperatureSensor::Gpu),
        )
        .map(|t| format!("{t} C"));
    p.line(4, format!("temperature: {}", show(&temp)));
    let power = p
        .w("nvmlDeviceGetPowerUsage", d.power_usage())
        .map(|w| format!("{w} mW"));
    p.line(4, format!("power: {}", show(&power)));
    let corr = p.w(
        "nvmlDeviceGetTotalEccErrors",
        d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
    );
    let uncorr = p.w(
        "nvmlDeviceGetTotalEccErrors",
        d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
    );
    p.line(
        4,
        format!(
            "ecc (volatile): corrected {} uncorrected {}",
            show(&corr),
            show(&uncorr)
        ),
    );
    match control.metrics(&address) {
        Ok(_) => {}
        Err(e) => p.line(4, format!("metrics as the core reads them: {e}")),
    }
}

fn policy_name(p: u32) -> &'static str {
    match p {
        1 => SchedulerPolicy::BestEffort.name(),
        2 => SchedulerPolicy::EqualShare.name(),
        3 => SchedulerPolicy::FixedShare.name(),
        _ => "unknown",
    }
}

fn vgpu_types(p: &mut Probe, types: &[VgpuType<'_>]) {
    if types.is_empty() {
        p.line(4, "none");
    }
    for t in types {
        let name = p.w("nvmlVgpuTypeGetName", t.name());
        let fb = p.w("nvmlVgpuTypeGetFramebufferSize", t.framebuffer_size());
        let max = p.w("nvmlVgpuTypeGetMaxInstances", t.max_instances());
        let gi = p
            .w(
                "nvmlVgpuTypeGetGpuInstanceProfileId",
                t.instance_profile_id(),
            )
            .map(|g| {
                if g == 0xFFFF_FFFF {
                    "none (time-sliced)".to_string()
                } else {
                    g.to_string()
                }
            });
        p.line(
            4,
            format!(
                "{} \"{}\" fb {} max {} GI profile {}",
                t.id(),
                show(&name),
                fb.map(|b| format!("{} MiB", mib(b))).unwrap_or_else(|e| e),
                show(&max),
                show(&gi)
            ),
        );
    }
}

fn probe_profiles(p: &mut Probe, d: &Device<'_>, device_id: u16, compare: bool) {
    p.line(2, "GPU-instance profiles:");
    let sim = vgpud_sim_driver::mig_profiles(device_id);
    if compare {
        p.line(
            4,
            format!(
                "(compared with the simulator's table for device 0x{device_id:04x}: {} profiles)",
                sim.len()
            ),
        );
    }
    let mut seen_sim = Vec::new();
    let mut any = false;
    let mut unsupported = Vec::new();
    for index in 0..raw::GPU_INSTANCE_PROFILE_COUNT {
        let info = match raw::gpu_instance_profile_info(d, index) {
            Ok(info) => info,
            Err(e) if e.is_not_supported() => {
                unsupported.push(index.to_string());
                continue;
            }
            Err(e) => {
                if let Err(e) = p.r::<()>(Err(e)) {
                    p.line(4, format!("index {index}: {e}"));
                }
                continue;
            }
        };
        any = true;
        let placements = p.r(raw::gpu_instance_possible_placements(d, info.id));
        let remaining = p.r(raw::gpu_instance_remaining_capacity(d, info.id));
        let placements_text = match &placements {
            Ok(list) if list.is_empty() => "none".to_string(),
            Ok(list) => list
                .iter()
                .map(|pl| format!("{}:{}", pl.start, pl.size))
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => e.clone(),
        };
        p.line(
            4,
            format!(
                "index {index} id {} \"{}\" slices {} memory {} MiB max {} SMs {} placements [{}] remaining {}",
                info.id,
                info.name,
                info.slice_count,
                info.memory_size_mib,
                info.instance_count,
                info.multiprocessor_count,
                placements_text,
                show(&remaining)
            ),
        );
        if compare {
            match sim.iter().find(|s| s.index == index) {
                None => p.line(
                    6,
                    "sim: DIFFERS: the simulator has no profile at this index",
                ),
                Some(s) => {
                    seen_sim.push(s.index);
                    let mut diffs = Vec::new();
                    let sim_name = format!("MIG {}", s.name);
                    if s.id != info.id {
                        diffs.push(format!("id {} vs {}", s.id, info.id));
                    }
                    if sim_name != info.name {
                        diffs.push(format!("name \"{sim_name}\" vs \"{}\"", info.name));
                    }
                    if s.compute_slices != info.slice_count {
                        diffs.push(format!(
                            "slices {} vs {}",
                            s.compute_slices, info.slice_count
                        ));
                    }
                    if s.memory_mib != info.memory_size_mib {
                        diffs.push(format!(
                            "memory {} vs {} MiB",
                            s.memory_mib, info.memory_size_mib
                        ));
                    }
                    if s.max_instances != info.instance_count {
                        diffs.push(format!(
                            "max {} vs {}",
                            s.max_instances, info.instance_count
                        ));
                    }
                    if s.multiprocessors != info.multiprocessor_count {
                        diffs.push(format!(
                            "SMs {} vs {}",
                            s.multiprocessors, info.multiprocessor_count
                        ));
                    }
                    let sim_pl: Vec<raw::Placement> = s
                        .starts
                        .iter()
                        .map(|&start| raw::Placement {
                            start,
                            size: s.memory_slices,
                        })
                        .collect();
                    if let Ok(pl) = &placements {
                        let mut a = sim_pl.clone();
                        let mut b = pl.clone();
                        a.sort();
                        b.sort();
                        if a != b {
                            diffs.push(format!(
                                "placements [{}] vs [{}]",
                                sim_pl
                                    .iter()
                                    .map(|pl| format!("{}:{}", pl.start, pl.size))
                                    .collect::<Vec<_>>()
                                    .join(" "),
                                placements_text
                            ));
                        }
                    }
                    let table = format!(
                        "id {} \"{}\" slices {} memory {} MiB max {} SMs {}",
                        s.id,
                        sim_name,
                        s.compute_slices,
                        s.memory_mib,
                        s.max_instances,
                        s.multiprocessors
                    );
                    if diffs.is_empty() {
                        p.line(6, format!("sim: same ({table})"));
                    } else {
                        p.line(
                            6,
                            format!("sim: DIFFERS: {} (sim: {table})", diffs.join(", ")),
                        );
                    }
                }
            }
        }
    }
    if !any {
        p.line(4, "none");
    }
    if !unsupported.is_empty() {
        p.line(
            4,
            format!(
                "not supported (return code 3) at index: {}",
                unsupported.join(" ")
            ),
        );
    }
    if compare {
        for s in sim.iter().filter(|s| !seen_sim.contains(&s.index)) {
            p.line(
                4,
                format!(
                    "sim: DIFFERS: the simulator has index {} id {} \"MIG {}\", NVML does not",
                    s.index, s.id, s.name
                ),
            );
        }
    }
}
