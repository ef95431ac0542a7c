//! [`NvmlControl`]: the control plane over `nvml-wrapper` (and, for the calls it lacks, the
//! `vgpud-nvml-raw` crate).
//!
//! The wrapper's safe API answers where it is correct (names, memory, MIG mode, vGPU types and
//! instances, the scheduler state, telemetry); `vgpud_nvml_raw` answers where the wrapper has
//! no call or a wrong one (GPU-instance profiles and placements, the GPU-instance lifecycle,
//! heterogeneous mode, the scheduler log's parameters, per-vGPU utilization). Devices are
//! looked up per call by PCI bus id, so the backend holds only the `Nvml` (which is
//! `Send + Sync`) and no borrowed handle.

use std::path::Path;

use nvml_wrapper::enum_wrappers::device::{
    EccCounter, GpuVirtualizationMode, HostVgpuMode, MemoryError, TemperatureSensor,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::{VgpuSchedulerSetParams, VgpuSchedulerSetState};
use nvml_wrapper::vgpu::VgpuInstance;
use nvml_wrapper::{Device, Nvml};
use vgpud_nvml_raw as raw;
use vgpud_nvml_raw::nvml_wrapper_sys::bindings as sys;

use super::{
    ActiveVgpu, ControlError, ControlResult, GpuControl, GpuFacts, GpuInstance, GpuMetrics,
    MigMode, MigProfile, Placement, SchedulerCapabilities, SchedulerPolicy, SchedulerSetting,
    SchedulerState, VgpuTypeFacts, VgpuUtilization,
};

/// The library NVML loads by default.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// `INVALID_GPU_INSTANCE_PROFILE_ID` / `INVALID_GPU_INSTANCE_ID` of nvml.h: not MIG-backed.
const INVALID_ID: u32 = 0xFFFF_FFFF;

/// The control plane over the NVIDIA driver's NVML library.
pub struct NvmlControl {
    nvml: Nvml,
    library: String,
}

impl std::fmt::Debug for NvmlControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlControl")
            .field("library", &self.library)
            .finish_non_exhaustive()
    }
}

/// The NVML return code of a wrapper error (`NVML_ERROR_UNKNOWN` for the wrapper's own).
pub fn return_code(e: &NvmlError) -> u32 {
    use NvmlError as E;
    #[allow(deprecated)]
    match e {
        E::FailedToLoadSymbol(_) => sys::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND,
        E::Uninitialized => sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED,
        E::InvalidArg => sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        E::NotSupported => sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        E::NoPermission => sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION,
        E::NotFound => sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
        E::InsufficientSize(_) => sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
        E::DriverNotLoaded => sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
        E::FunctionNotFound => sys::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND,
        E::GpuLost => sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
        E::ResetRequired => sys::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED,
        E::InUse => sys::nvmlReturn_enum_NVML_ERROR_IN_USE,
        E::InsufficientMemory => sys::nvmlReturn_enum_NVML_ERROR_MEMORY,
        E::NoData => sys::nvmlReturn_enum_NVML_ERROR_NO_DATA,
        E::UnexpectedVariant(code) => *code,
        _ => sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN,
    }
}

/// Maps an NVML error of operation `op` on GPU `gpu` to the core's error: `NOT_SUPPORTED` and a
/// missing function → `NotSupported`, `IN_USE` → `InUse`, `INSUFFICIENT_RESOURCES` (which the
/// wrapper knows only as an unexpected variant) → `InsufficientResources`, `NOT_FOUND` →
/// `NotFound`, `INVALID_ARGUMENT` → `InvalidArgument`, `NO_PERMISSION` → `NoPermission`,
/// `RESET_REQUIRED` → `ResetRequired`, anything else → `Other` with the return code.
pub fn map_error(op: &str, gpu: &str, e: &NvmlError) -> ControlError {
    let code = return_code(e);
    let detail = e.to_string();
    let (op, gpu) = (op.to_string(), gpu.to_string());
    match e {
        NvmlError::NotSupported
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::FunctionNotFound => ControlError::NotSupported { op, gpu, detail },
        NvmlError::InUse => ControlError::InUse { op, gpu, detail },
        NvmlError::NotFound => ControlError::NotFound { op, gpu, detail },
        NvmlError::InvalidArg => ControlError::InvalidArgument { op, gpu, detail },
        NvmlError::NoPermission => ControlError::NoPermission { op, gpu, detail },
        NvmlError::ResetRequired => ControlError::ResetRequired { op, gpu, detail },
        NvmlError::UnexpectedVariant(c)
            if *c == sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES =>
        {
            ControlError::InsufficientResources {
                op,
                gpu,
                detail: "insufficient resources".into(),
            }
        }
        _ => ControlError::Other {
            op,
            gpu,
            code,
            detail,
        },
    }
}

/// [`map_error`] for a raw call; the detail names the NVML function.
pub fn map_raw_error(op: &str, gpu: &str, e: &raw::RawError) -> ControlError {
    let mut mapped = map_error(op, gpu, &e.to_nvml_error());
    let text = e.to_string();
    match &mut mapped {
        ControlError::NotSupported { detail, .. }
        | ControlError::InUse { detail, .. }
        | ControlError::InsufficientResources { detail, .. }
        | ControlError::NotFound { detail, .. }
        | ControlError::InvalidArgument { detail, .. }
        | ControlError::NoPermission { detail, .. }
        | ControlError::ResetRequired { detail, .. }
        | ControlError::Other { detail, .. } => *detail = text,
        ControlError::Unavailable(_) => {}
    }
    mapped
}

fn is_not_supported(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound
    )
}

/// `Ok(None)` where NVML does not report the value (not supported, no data yet).
fn optional<T>(r: Result<T, NvmlError>, op: &str, gpu: &str) -> ControlResult<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_not_supported(&e) || matches!(e, NvmlError::NoData) => Ok(None),
        Err(e) => Err(map_error(op, gpu, &e)),
    }
}

/// The name of a virtualization mode as [`GpuFacts`] has it.
pub fn virtualization_mode_name(m: &GpuVirtualizationMode) -> &'static str {
    match m {
        GpuVirtualizationMode::Bare => "none",
        GpuVirtualizationMode::PassThrough => "passthrough",
        GpuVirtualizationMode::Vgpu => "vgpu",
        GpuVirtualizationMode::HostVgpu => "host-vgpu",
        GpuVirtualizationMode::HostVsga => "host-vsga",
    }
}

/// The name of a host vGPU mode as [`GpuFacts`] has it.
pub fn host_vgpu_mode_name(m: &HostVgpuMode) -> &'static str {
    match m {
        HostVgpuMode::NonSriov => "non-sriov",
        HostVgpuMode::Sriov => "sriov",
    }
}

/// A PCI bus id as NVML prints it (`00000000:41:00.0`) in the kernel's form (`0000:41:00.0`).
pub fn normalize_bus_id(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    match id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            let d = u32::from_str_radix(domain, 16).unwrap_or(0);
            format!("{d:04x}:{rest}")
        }
        _ => id,
    }
}

fn policy_from_nvml(p: u32) -> SchedulerPolicy {
    match p {
        sys::NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE => SchedulerPolicy::EqualShare,
        sys::NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE => SchedulerPolicy::FixedShare,
        _ => SchedulerPolicy::BestEffort,
    }
}

fn policy_to_nvml(p: SchedulerPolicy) -> u32 {
    match p {
        SchedulerPolicy::BestEffort => sys::NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT,
        SchedulerPolicy::EqualShare => sys::NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE,
        SchedulerPolicy::FixedShare => sys::NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE,
    }
}

impl NvmlControl {
    /// Loads NVML: the default `libnvidia-ml.so.1` (`library` `None`), or the library at
    /// `library` (the fake library in tests). The error says why: the library cannot be
    /// loaded (no NVIDIA driver installed), the driver is not loaded, or init failed.
    pub fn open(library: Option<&Path>) -> Result<Self, String> {
        let name = library
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| DEFAULT_LIBRARY.to_string());
        if let Some(p) = library {
            if !p.exists() {
                return Err(format!("cannot load NVML: {name} does not exist"));
            }
        }
        let result = match library {
            Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
            None => Nvml::init(),
        };
        match result {
            Ok(nvml) => Ok(NvmlControl {
                nvml,
                library: name,
            }),
            Err(NvmlError::LibloadingError(e)) => Err(format!(
                "cannot load NVML ({name}): {e} (is the NVIDIA driver installed?)"
            )),
            Err(NvmlError::DriverNotLoaded) => Err(format!(
                "NVML ({name}) is installed but the NVIDIA kernel driver is not loaded"
            )),
            Err(NvmlError::FailedToLoadSymbol(e)) => {
                Err(format!("{name} is not a usable NVML library: {e}"))
            }
            Err(e) => Err(format!("NVML ({name}) failed to initialize: {e}")),
        }
    }

    /// The loaded library (for read-only tools such as the probe).
    pub fn nvml(&self) -> &Nvml {
        &self.nvml
    }

    /// The library's path or name, as given to [`Self::open`].
    pub fn library(&self) -> &str {
        &self.library
    }

    /// The NVML device of the PF at `gpu` (`0000:41:00.0`).
    pub fn device(&self, op: &str, gpu: &str) -> ControlResult<Device<'_>> {
        self.nvml
            .device_by_pci_bus_id(gpu)
            .map_err(|e| map_error(op, gpu, &e))
    }

    fn profiles_of(&self, device: &Device<'_>, gpu: &str) -> ControlResult<Vec<MigProfile>> {
        const OP: &str = "list MIG profiles";
        let mut out = Vec::new();
        for index in 0..raw::GPU_INSTANCE_PROFILE_COUNT {
            let info = match raw::gpu_instance_profile_info(device, index) {
                Ok(info) => info,
                // A profile the GPU lacks; INVALID_ARGUMENT: an index older drivers do not know.
                Err(e)
                    if e.is_not_supported()
                        || e.code() == Some(sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT) =>
                {
                    continue
                }
                Err(e) => return Err(map_raw_error(OP, gpu, &e)),
            };
            let placements = match raw::gpu_instance_possible_placements(device, info.id) {
                Ok(p) => p,
                Err(e) if e.is_not_supported() => Vec::new(),
                Err(e) => return Err(map_raw_error(OP, gpu, &e)),
            };
            let remaining = match raw::gpu_instance_remaining_capacity(device, info.id) {
                Ok(n) => n,
                Err(e) if e.is_not_supported() => 0,
                Err(e) => return Err(map_raw_error(OP, gpu, &e)),
            };
            out.push(MigProfile {
                id: info.id,
                index,
                name: info.name,
                slices: info.slice_count,
                memory_mib: info.memory_size_mib,
                max_instances: info.instance_count,
                multiprocessors: info.multiprocessor_count,
                placements: placements
                    .into_iter()
                    .map(|p| Placement {
                        start: p.start,
                        size: p.size,
                    })
                    .collect(),
                remaining,
            });
        }
        Ok(out)
    }

    fn instance_of(op: &str, gpu: &str, gi: &raw::GpuInstance<'_>) -> ControlResult<GpuInstance> {
        let info = raw::gpu_instance_info(gi).map_err(|e| map_raw_error(op, gpu, &e))?;
        let cis = match raw::compute_instances(gi) {
            Ok(cis) => cis.len() as u32,
            Err(e) if e.is_not_supported() => 0,
            Err(e) => return Err(map_raw_error(op, gpu, &e)),
        };
        Ok(GpuInstance {
            id: info.id,
            profile_id: info.profile_id,
            placement: Placement {
                start: info.placement.start,
                size: info.placement.size,
            },
            compute_instances: cis,
        })
    }
}

impl GpuControl for NvmlControl {
    fn availability(&self) -> Result<(), String> {
        Ok(())
    }

    fn driver_version(&self) -> ControlResult<String> {
        self.nvml
            .sys_driver_version()
            .map_err(|e| map_error("read the driver version", "-", &e))
    }

    fn gpu(&self, gpu: &str) -> ControlResult<GpuFacts> {
        const OP: &str = "read GPU facts";
        let d = self.device(OP, gpu)?;
        let name = d.name().map_err(|e| map_error(OP, gpu, &e))?;
        let uuid = d.uuid().map_err(|e| map_error(OP, gpu, &e))?;
        let memory_total = d.memory_info().map_err(|e| map_error(OP, gpu, &e))?.total;
        let virtualization_mode = match optional(d.virtualization_mode(), OP, gpu)? {
            Some(m) => virtualization_mode_name(&m).to_string(),
            None => "unknown".to_string(),
        };
        let host_vgpu_mode = optional(d.vgpu_host_mode(), OP, gpu)?
            .map(|m| host_vgpu_mode_name(&m).to_string())
            .unwrap_or_default();
        let mig_capable = d.mig_mode().is_ok();
        Ok(GpuFacts {
            name,
            uuid,
            memory_total,
            virtualization_mode,
            host_vgpu_mode,
            mig_capable,
        })
    }

    fn mig_mode(&self, gpu: &str) -> ControlResult<MigMode> {
        const OP: &str = "read the MIG mode";
        let d = self.device(OP, gpu)?;
        let m = d.mig_mode().map_err(|e| map_error(OP, gpu, &e))?;
        Ok(MigMode {
            current: m.current == sys::NVML_DEVICE_MIG_ENABLE,
            pending: m.pending == sys::NVML_DEVICE_MIG_ENABLE,
        })
    }

    fn set_mig_mode(&self, gpu: &str, enabled: bool) -> ControlResult<MigMode> {
        const OP: &str = "set the MIG mode";
        let d = self.device(OP, gpu)?;
        let status = d
            .set_mig_mode(enabled)
            .map_err(|e| map_error(OP, gpu, &e))?;
        // The activation status: SUCCESS, or RESET_REQUIRED when the mode is only pending
        // (not an error of the call: the mode read back says so); anything else failed.
        if status != sys::nvmlReturn_enum_NVML_SUCCESS
            && status != sys::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED
        {
            return Err(map_error(OP, gpu, &NvmlError::from(status)));
        }
        self.mig_mode(gpu)
    }

    fn mig_profiles(&self, gpu: &str) -> ControlResult<Vec<MigProfile>> {
        let d = self.device("list MIG profiles", gpu)?;
        self.profiles_of(&d, gpu)
    }

    fn gpu_instances(&self, gpu: &str) -> ControlResult<Vec<GpuInstance>> {
        const OP: &str = "list GPU instances";
        let d = self.device(OP, gpu)?;
        let gis = raw::all_gpu_instances(&d).map_err(|e| map_raw_error(OP, gpu, &e))?;
        let mut out = gis
            .iter()
            .map(|gi| Self::instance_of(OP, gpu, gi))
            .collect::<ControlResult<Vec<_>>>()?;
        out.sort_by_key(|g| g.id);
        Ok(out)
    }

    fn create_gpu_instance(
        &self,
        gpu: &str,
        profile_id: u32,
        placement: Option<Placement>,
        compute_instance: bool,
    ) -> ControlResult<GpuInstance> {
        const OP: &str = "create a GPU instance";
        let d = self.device(OP, gpu)?;
        let gi = match placement {
            Some(p) => raw::create_gpu_instance_with_placement(
                &d,
                profile_id,
                raw::Placement {
                    start: p.start,
                    size: p.size,
                },
            ),
            None => raw::create_gpu_instance(&d, profile_id),
        }
        .map_err(|e| map_raw_error(OP, gpu, &e))?;
        if compute_instance {
            if let Err(e) = raw::create_full_compute_instance(&gi) {
                let err = map_raw_error("create a compute instance", gpu, &e);
                // Leave nothing half made: the GPU instance goes again.
                if let Err(undo) = raw::destroy_gpu_instance(gi) {
                    tracing::warn!(gpu, error = %undo, "could not destroy the GPU instance again");
                }
                return Err(err);
            }
        }
        Self::instance_of(OP, gpu, &gi)
    }

    fn destroy_gpu_instance(&self, gpu: &str, id: u32) -> ControlResult<()> {
        const OP: &str = "destroy a GPU instance";
        let d = self.device(OP, gpu)?;
        let gi = raw::gpu_instance_by_id(&d, id).map_err(|e| map_raw_error(OP, gpu, &e))?;
        match raw::compute_instances(&gi) {
            Ok(cis) => {
                for ci in cis {
                    raw::destroy_compute_instance(ci).map_err(|e| map_raw_error(OP, gpu, &e))?;
                }
            }
            Err(e) if e.is_not_supported() => {}
            Err(e) => return Err(map_raw_error(OP, gpu, &e)),
        }
        raw::destroy_gpu_instance(gi).map_err(|e| map_raw_error(OP, gpu, &e))
    }

    fn vgpu_types(&self, gpu: &str) -> ControlResult<Vec<VgpuTypeFacts>> {
        const OP: &str = "list vGPU types";
        let d = self.device(OP, gpu)?;
        let types = d
            .vgpu_supported_types()
            .map_err(|e| map_error(OP, gpu, &e))?;
        types
            .iter()
            .map(|t| {
                let profile = optional(t.instance_profile_id(), OP, gpu)?;
                Ok(VgpuTypeFacts {
                    id: t.id(),
                    name: t.name().map_err(|e| map_error(OP, gpu, &e))?,
                    framebuffer: t.framebuffer_size().map_err(|e| map_error(OP, gpu, &e))?,
                    max_instances: t.max_instances().map_err(|e| map_error(OP, gpu, &e))?,
                    gpu_instance_profile: profile.filter(|&p| p != INVALID_ID),
                })
            })
            .collect()
    }

    fn active_vgpus(&self, gpu: &str) -> ControlResult<Vec<ActiveVgpu>> {
        const OP: &str = "list active vGPUs";
        let d = self.device(OP, gpu)?;
        let ids = raw::active_vgpu_ids(&d).map_err(|e| map_raw_error(OP, gpu, &e))?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // The newest sample of each instance.
        let mut samples: std::collections::BTreeMap<u32, raw::VgpuUtilizationSample> =
            Default::default();
        match raw::vgpu_utilization(&d, 0) {
            Ok(list) => {
                for s in list {
                    let keep = samples
                        .get(&s.instance)
                        .is_none_or(|old| old.timestamp <= s.timestamp);
                    if keep {
                        samples.insert(s.instance, s);
                    }
                }
            }
            Err(e) if e.is_not_supported() => {}
            Err(e) => return Err(map_raw_error(OP, gpu, &e)),
        }
        let pct = |v: u64| v.min(u64::from(u32::MAX)) as u32;
        let mut out = Vec::new();
        for id in ids {
            let v = VgpuInstance::new(id, &d);
            let type_id = v.instance_type().map_err(|e| map_error(OP, gpu, &e))?.id();
            out.push(ActiveVgpu {
                type_id,
                mdev_uuid: optional(v.mdev_uuid(), OP, gpu)?.unwrap_or_default(),
                // The address as the guest sees it; all zeroes until the guest driver runs.
                pci_address: optional(v.gpu_pci_id(), OP, gpu)?
                    .map(|s| normalize_bus_id(&s))
                    .filter(|s| !s.is_empty() && s != "0000:00:00.0")
                    .unwrap_or_default(),
                gpu_instance_id: optional(v.gpu_instance_id(), OP, gpu)?
                    .filter(|&g| g != INVALID_ID),
                fb_used: optional(v.fb_usage(), OP, gpu)?.unwrap_or(0),
                utilization: samples.get(&id).map(|s| VgpuUtilization {
                    gpu: pct(s.sm),
                    memory: pct(s.memory),
                    encoder: pct(s.encoder),
                    decoder: pct(s.decoder),
                }),
            });
        }
        Ok(out)
    }

    fn heterogeneous_mode(&self, gpu: &str) -> ControlResult<bool> {
        const OP: &str = "read the heterogeneous vGPU mode";
        let d = self.device(OP, gpu)?;
        raw::heterogeneous_mode(&d).map_err(|e| map_raw_error(OP, gpu, &e))
    }

    fn scheduler(&self, gpu: &str) -> ControlResult<SchedulerState> {
        const OP: &str = "read the vGPU scheduler";
        let d = self.device(OP, gpu)?;
        let state = d
            .vgpu_scheduler_state()
            .map_err(|e| map_error(OP, gpu, &e))?;
        let arr = state.arr_mode == sys::NVML_VGPU_SCHEDULER_ARR_ENABLE;
        let mut out = SchedulerState {
            policy: policy_from_nvml(state.scheduler_policy),
            arr,
            ..Default::default()
        };
        // The state call drops the parameters; the log has them.
        match raw::vgpu_scheduler_log(&d) {
            Ok(log) => {
                out.timeslice_ms = log.timeslice_ns / 1_000_000;
                if arr {
                    out.avg_factor = log.avg_factor;
                    if log.timeslice_ns > 0 {
                        out.frequency_hz = ((1_000_000_000u64 + u64::from(log.timeslice_ns) / 2)
                            / u64::from(log.timeslice_ns))
                            as u32;
                    }
                }
            }
            Err(e) if e.is_not_supported() => {}
            Err(e) => return Err(map_raw_error(OP, gpu, &e)),
        }
        Ok(out)
    }

    fn scheduler_capabilities(&self, gpu: &str) -> ControlResult<SchedulerCapabilities> {
        const OP: &str = "read the vGPU scheduler capabilities";
        let d = self.device(OP, gpu)?;
        let c = d
            .vgpu_scheduler_capabilities()
            .map_err(|e| map_error(OP, gpu, &e))?;
        let mut policies = Vec::new();
        for p in c.supported_schedulers {
            if p == sys::NVML_VGPU_SCHEDULER_POLICY_UNKNOWN {
                continue;
            }
            let p = policy_from_nvml(p);
            if !policies.contains(&p) {
                policies.push(p);
            }
        }
        Ok(SchedulerCapabilities {
            policies,
            min_timeslice_ms: c.min_time_slice / 1_000_000,
            max_timeslice_ms: c.max_time_slice / 1_000_000,
            arr_supported: c.is_arr_mode_supported,
            min_frequency_hz: c.min_freq_for_arr,
            max_frequency_hz: c.max_freq_for_arr,
            min_avg_factor: c.min_avg_factor_for_arr,
            max_avg_factor: c.max_avg_factor_for_arr,
        })
    }

    fn set_scheduler(&self, gpu: &str, setting: &SchedulerSetting) -> ControlResult<()> {
        const OP: &str = "set the vGPU scheduler";
        let d = self.device(OP, gpu)?;
        let scheduler_params = if setting.arr {
            VgpuSchedulerSetParams {
                avg_factor: Some(setting.avg_factor),
                frequency_or_timeslice: setting.frequency_hz,
            }
        } else {
            VgpuSchedulerSetParams {
                avg_factor: None,
                frequency_or_timeslice: setting.timeslice_ms.saturating_mul(1_000_000),
            }
        };
        let state = VgpuSchedulerSetState {
            scheduler_policy: policy_to_nvml(setting.policy),
            enable_arr_mode: if setting.arr {
                sys::NVML_VGPU_SCHEDULER_ARR_ENABLE
            } else {
                sys::NVML_VGPU_SCHEDULER_ARR_DISABLE
            },
            scheduler_params,
        };
        d.set_vgpu_scheduler_state(state)
            .map_err(|e| map_error(OP, gpu, &e))
    }

    fn metrics(&self, gpu: &str) -> ControlResult<GpuMetrics> {
        const OP: &str = "read GPU metrics";
        let d = self.device(OP, gpu)?;
        let util = optional(d.utilization_rates(), OP, gpu)?;
        let memory = optional(d.memory_info(), OP, gpu)?;
        Ok(GpuMetrics {
            gpu_utilization: util.as_ref().map(|u| u.gpu),
            memory_utilization: util.as_ref().map(|u| u.memory),
            encoder_utilization: optional(d.encoder_utilization(), OP, gpu)?.map(|u| u.utilization),
            decoder_utilization: optional(d.decoder_utilization(), OP, gpu)?.map(|u| u.utilization),
            memory_used: memory.as_ref().map(|m| m.used),
            memory_total: memory.as_ref().map(|m| m.total),
            temperature_c: optional(d.temperature(TemperatureSensor::Gpu), OP, gpu)?,
            power_mw: optional(d.power_usage(), OP, gpu)?,
            ecc_corrected: optional(
                d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
                OP,
                gpu,
            )?,
            ecc_uncorrected: optional(
                d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
                OP,
                gpu,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_the_core_variants() {
        let m = |e: NvmlError| map_error("op", "0000:41:00.0", &e);
        assert!(matches!(
            m(NvmlError::NotSupported),
            ControlError::NotSupported { .. }
        ));
        assert!(matches!(
            m(NvmlError::FailedToLoadSymbol("x".into())),
            ControlError::NotSupported { .. }
        ));
        assert!(matches!(m(NvmlError::InUse), ControlError::InUse { .. }));
        assert!(matches!(
            m(NvmlError::UnexpectedVariant(23)),
            ControlError::InsufficientResources { .. }
        ));
        assert!(matches!(
            m(NvmlError::NotFound),
            ControlError::NotFound { .. }
        ));
        assert!(matches!(
            m(NvmlError::InvalidArg),
            ControlError::InvalidArgument { .. }
        ));
        assert!(matches!(
            m(NvmlError::NoPermission),
            ControlError::NoPermission { .. }
        ));
        assert!(matches!(
            m(NvmlError::ResetRequired),
            ControlError::ResetRequired { .. }
        ));
        match m(NvmlError::GpuLost) {
            ControlError::Other { code, op, gpu, .. } => {
                assert_eq!(code, 15);
                assert_eq!(op, "op");
                assert_eq!(gpu, "0000:41:00.0");
            }
            other => panic!("{other:?}"),
        }
        let raw_err = raw::check("nvmlDeviceCreateGpuInstance", 23).expect_err("error");
        match map_raw_error("create", "g", &raw_err) {
            ControlError::InsufficientResources { detail, .. } => {
                assert!(detail.contains("nvmlDeviceCreateGpuInstance"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bus_ids_are_normalized() {
        assert_eq!(normalize_bus_id("00000000:41:00.0"), "0000:41:00.0");
        assert_eq!(normalize_bus_id("0000:41:00.0"), "0000:41:00.0");
        assert_eq!(normalize_bus_id("00000001:C1:00.0"), "0001:c1:00.0");
    }

    #[test]
    fn nvml_control_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<NvmlControl>();
    }
}
