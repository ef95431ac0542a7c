//! The NVIDIA driver's control plane (NVML) as the core sees it: MIG mode and GPU instances,
//! the vGPU scheduler, the heterogeneous vGPU mode, and telemetry, behind [`GpuControl`].
//!
//! The engine never knows which backend answers. [`nvml::NvmlControl`] is the real one (the
//! `nvml-wrapper` crate over `libnvidia-ml.so.1`, or over the fake library of the workspace on
//! a simulated host); [`Unavailable`] answers every call with the reason NVML cannot be used
//! (no library, no NVIDIA driver), so vgpud starts and serves without NVML and reports the
//! NVML features unavailable. GPUs are named by their PCI address (`0000:41:00.0`, the PF).

pub mod nvml;
pub mod probe;
pub mod timed;

use std::fmt;

/// An error of the NVML control plane, naming the operation and the GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// NVML cannot be used on this host (no library, no driver, init failed).
    #[error("NVML is unavailable: {0}")]
    Unavailable(String),
    /// The GPU or driver does not support the operation (`NVML_ERROR_NOT_SUPPORTED`).
    #[error("{op} on {gpu}: not supported ({detail})")]
    NotSupported {
        /// What was being done.
        op: String,
        /// The GPU's PCI address.
        gpu: String,
        /// What NVML said.
        detail: String,
    },
    /// Something uses what the operation would change (`NVML_ERROR_IN_USE`).
    #[error("{op} on {gpu}: in use ({detail})")]
    InUse {
        /// What was being done.
        op: String,
        /// The GPU's PCI address.
        gpu: String,
        /// What NVML said.
        detail: String,
    },
    /// No room: no free placement, slices or instances (`NVML_ERROR_INSUFFICIENT_RESOURCES`).
    #[error("{op} on {gpu}: insufficient resources ({detail})")]
    InsufficientResources {
        /// What was being done.
        op: String,
        /// The GPU's PCI address.
        gpu: String,
        /// What NVML said.
        detail: String,
    },
    /// No such GPU, GPU instance or profile (`NVML_ERROR_NOT_FOUND`, an unknown PCI address).
    #[error("{op} on {gpu}: not found ({detail})")]
    NotFound {
        /// What was being done.
        op: String,
        /// The GPU's PCI address.
        gpu: String,
        /// What NVML said.
        detail: String,
    },
    /// NVML refused an argument (`NVML_ERROR_INVALID_ARGUMENT`).
    #[error("{op} on {gpu}: invalid argument ({detail})")]
    InvalidArgument {
        /// What was being done.
        op: String,
        /// The GPU's PCI address.
        gpu: String,
        /// What NVML said.
        detail: String,
    },
    /// The caller may not do this (`NVML_ERROR_NO_PERMISSION`).
    #[error("{op} on {gpu}: no permission ({detail})")]
    NoPermission {
        /// What was being done.
        op: String,
        /// The GPU's PCI address.
        gpu: String,
        /// What NVML said.
        detail: String,
    },
    /// The change waits for a GPU reset (`NVML_ERROR_RESET_REQUIRED`, a pending MIG mode).
    #[error("{op} on {gpu}: needs a GPU reset ({detail})")]
    ResetRequired {
        /// What was being done.
        op: String,
        /// The GPU's PCI address.
        gpu: String,
        /// What NVML said.
        detail: String,
    },
    /// Any other NVML failure, with its return code.
    #[error("{op} on {gpu}: NVML error {code} ({detail})")]
    Other {
        /// What was being done.
        op: String,
        /// The GPU's PCI address.
        gpu: String,
        /// The `nvmlReturn_t` value.
        code: u32,
        /// What NVML said.
        detail: String,
    },
}

/// Result of the control plane.
pub type ControlResult<T> = Result<T, ControlError>;

/// What NVML says about a GPU (the PF).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuFacts {
    /// `nvmlDeviceGetName` (`NVIDIA H200`).
    pub name: String,
    /// `nvmlDeviceGetUUID` (`GPU-…`).
    pub uuid: String,
    /// Total framebuffer memory in bytes.
    pub memory_total: u64,
    /// `nvmlDeviceGetVirtualizationMode`: `none`, `passthrough`, `vgpu`, `host-vgpu`,
    /// `host-vsga`, or `unknown`.
    pub virtualization_mode: String,
    /// `nvmlDeviceGetHostVgpuMode`: `sriov`, `non-sriov`, or empty when not supported.
    pub host_vgpu_mode: String,
    /// Whether the GPU supports MIG (`nvmlDeviceGetMigMode` answered).
    pub mig_capable: bool,
}

/// A GPU's MIG mode (`nvmlDeviceGetMigMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MigMode {
    /// Whether MIG is on now.
    pub current: bool,
    /// The mode after the next GPU reset (equals `current` when nothing is pending).
    pub pending: bool,
}

/// A placement of a GPU instance: the first memory slice and how many it spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Placement {
    /// The first slice.
    pub start: u32,
    /// The number of slices.
    pub size: u32,
}

/// A GPU-instance profile (`nvmlDeviceGetGpuInstanceProfileInfoV` and its placements).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigProfile {
    /// The profile ID that creates take (`nvidia-smi mig -lgip` ID column, `info.id`), not
    /// the NVML profile index.
    pub id: u32,
    /// The NVML profile index (`NVML_GPU_INSTANCE_PROFILE_*`) it was read with.
    pub index: u32,
    /// `MIG 1g.18gb`, as the driver names it.
    pub name: String,
    /// Compute slices.
    pub slices: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// How many instances of this profile the GPU can hold.
    pub max_instances: u32,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Every placement the profile has (`…PossiblePlacements_v2`).
    pub placements: Vec<Placement>,
    /// How many more instances fit now (`…GetGpuInstanceRemainingCapacity`).
    pub remaining: u32,
}

/// A GPU instance that exists (`nvmlDeviceGetGpuInstances` + `nvmlGpuInstanceGetInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuInstance {
    /// The GPU instance ID.
    pub id: u32,
    /// The profile ID it was made with.
    pub profile_id: u32,
    /// Where it sits.
    pub placement: Placement,
    /// How many compute instances it holds.
    pub compute_instances: u32,
}

/// A vGPU that runs on a GPU (`nvmlDeviceGetActiveVgpus` and the per-instance queries).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActiveVgpu {
    /// The vGPU type's ID (`nvidia-<id>`, the vendor-VFIO type number).
    pub type_id: u32,
    /// The mdev UUID (legacy mdev), or empty on vendor-specific VFIO.
    pub mdev_uuid: String,
    /// The vGPU's PCI address as the guest sees it (`nvmlVgpuInstanceGetGpuPciId`); empty
    /// until the guest driver runs. Not the host's VF.
    pub pci_address: String,
    /// The GPU instance it runs in, for a MIG-backed vGPU.
    pub gpu_instance_id: Option<u32>,
    /// Framebuffer in use, bytes.
    pub fb_used: u64,
    /// Utilization in percent, when NVML has a sample (`nvmlDeviceGetVgpuUtilization`).
    pub utilization: Option<VgpuUtilization>,
}

/// The per-vGPU utilization NVML samples, in percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VgpuUtilization {
    /// Graphics / compute engine.
    pub gpu: u32,
    /// Framebuffer memory controller.
    pub memory: u32,
    /// Video encoder.
    pub encoder: u32,
    /// Video decoder.
    pub decoder: u32,
}

/// What a vGPU type is in NVML's view (`nvmlVgpuType*`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VgpuTypeFacts {
    /// The type ID.
    pub id: u32,
    /// `NVIDIA H200X-1-18C`.
    pub name: String,
    /// Framebuffer in bytes.
    pub framebuffer: u64,
    /// Instances per GPU.
    pub max_instances: u32,
    /// The GPU-instance profile ID a MIG-backed type needs; `None` for a time-sliced type.
    pub gpu_instance_profile: Option<u32>,
}

/// The vGPU scheduler's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchedulerPolicy {
    /// Round robin, a vGPU may use idle cycles (the default).
    #[default]
    BestEffort,
    /// Equal shares among the running vGPUs.
    EqualShare,
    /// Shares fixed by type (1 / max instances).
    FixedShare,
}

impl SchedulerPolicy {
    /// The API's name: `best-effort`, `equal-share`, `fixed-share`.
    pub fn name(self) -> &'static str {
        match self {
            SchedulerPolicy::BestEffort => "best-effort",
            SchedulerPolicy::EqualShare => "equal-share",
            SchedulerPolicy::FixedShare => "fixed-share",
        }
    }

    /// Parses an API name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "best-effort" => Some(SchedulerPolicy::BestEffort),
            "equal-share" => Some(SchedulerPolicy::EqualShare),
            "fixed-share" => Some(SchedulerPolicy::FixedShare),
            _ => None,
        }
    }
}

impl fmt::Display for SchedulerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The scheduler's state as NVML reports it (`nvmlDeviceGetVgpuSchedulerState`; the time slice,
/// averaging factor and frequency come from the scheduler log, since the state call drops
/// them, hardware.md §6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerState {
    /// The policy.
    pub policy: SchedulerPolicy,
    /// Adaptive round robin (strict RR) on.
    pub arr: bool,
    /// The time slice in milliseconds, when known (0: the driver's default).
    pub timeslice_ms: u32,
    /// ARR averaging factor, when known (0: default).
    pub avg_factor: u32,
    /// ARR scheduling frequency in Hz, when known (0: default).
    pub frequency_hz: u32,
}

/// What the scheduler supports (`nvmlDeviceGetVgpuSchedulerCapabilities`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchedulerCapabilities {
    /// The policies the GPU offers.
    pub policies: Vec<SchedulerPolicy>,
    /// Time slice bounds in milliseconds.
    pub min_timeslice_ms: u32,
    /// Time slice bounds in milliseconds.
    pub max_timeslice_ms: u32,
    /// Whether ARR can be turned on.
    pub arr_supported: bool,
    /// ARR frequency bounds in Hz.
    pub min_frequency_hz: u32,
    /// ARR frequency bounds in Hz.
    pub max_frequency_hz: u32,
    /// ARR averaging factor bounds.
    pub min_avg_factor: u32,
    /// ARR averaging factor bounds.
    pub max_avg_factor: u32,
}

/// A scheduler change (`nvmlDeviceSetVgpuSchedulerState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerSetting {
    /// The policy.
    pub policy: SchedulerPolicy,
    /// Turn ARR on (`enableARRMode`).
    pub arr: bool,
    /// Time slice in milliseconds (without ARR); 0 for the default.
    pub timeslice_ms: u32,
    /// ARR averaging factor; 0 for the default.
    pub avg_factor: u32,
    /// ARR frequency in Hz; 0 for the default.
    pub frequency_hz: u32,
}

/// A GPU's telemetry; a field is `None` where NVML does not report it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuMetrics {
    /// GPU (compute/graphics) utilization, percent.
    pub gpu_utilization: Option<u32>,
    /// Memory controller utilization, percent.
    pub memory_utilization: Option<u32>,
    /// Encoder utilization, percent.
    pub encoder_utilization: Option<u32>,
    /// Decoder utilization, percent.
    pub decoder_utilization: Option<u32>,
    /// Framebuffer used, bytes.
    pub memory_used: Option<u64>,
    /// Framebuffer total, bytes.
    pub memory_total: Option<u64>,
    /// GPU temperature, °C.
    pub temperature_c: Option<u32>,
    /// Power draw, milliwatts.
    pub power_mw: Option<u32>,
    /// Corrected ECC errors since the driver loaded (volatile).
    pub ecc_corrected: Option<u64>,
    /// Uncorrected ECC errors since the driver loaded (volatile).
    pub ecc_uncorrected: Option<u64>,
}

/// The NVIDIA driver's control plane. Every method names the GPU by the PF's PCI address.
/// Implementations are thread-safe; calls on different GPUs do not wait for each other beyond
/// what the driver does.
pub trait GpuControl: Send + Sync {
    /// `Ok` when NVML is usable; the reason otherwise (what the features report).
    fn availability(&self) -> Result<(), String>;
    /// The driver version (`nvmlSystemGetDriverVersion`).
    fn driver_version(&self) -> ControlResult<String>;
    /// What NVML knows of the GPU.
    fn gpu(&self, gpu: &str) -> ControlResult<GpuFacts>;
    /// The MIG mode; `NotSupported` for a GPU without MIG.
    fn mig_mode(&self, gpu: &str) -> ControlResult<MigMode>;
    /// Sets the MIG mode; returns the mode after the call (pending differs from current when
    /// a reset is needed).
    fn set_mig_mode(&self, gpu: &str, enabled: bool) -> ControlResult<MigMode>;
    /// The GPU-instance profiles, with all and remaining placements.
    fn mig_profiles(&self, gpu: &str) -> ControlResult<Vec<MigProfile>>;
    /// The GPU instances that exist.
    fn gpu_instances(&self, gpu: &str) -> ControlResult<Vec<GpuInstance>>;
    /// Makes a GPU instance of profile ID `profile_id` at `placement` (or where the driver
    /// chooses), and with `compute_instance` one compute instance spanning it.
    fn create_gpu_instance(
        &self,
        gpu: &str,
        profile_id: u32,
        placement: Option<Placement>,
        compute_instance: bool,
    ) -> ControlResult<GpuInstance>;
    /// Destroys GPU instance `id` and its compute instances.
    fn destroy_gpu_instance(&self, gpu: &str, id: u32) -> ControlResult<()>;
    /// The vGPU types the GPU supports, with their GPU-instance profile.
    fn vgpu_types(&self, gpu: &str) -> ControlResult<Vec<VgpuTypeFacts>>;
    /// The vGPUs running on the GPU.
    fn active_vgpus(&self, gpu: &str) -> ControlResult<Vec<ActiveVgpu>>;
    /// The heterogeneous (mixed-size) vGPU mode.
    fn heterogeneous_mode(&self, gpu: &str) -> ControlResult<bool>;
    /// The scheduler's state.
    fn scheduler(&self, gpu: &str) -> ControlResult<SchedulerState>;
    /// What the scheduler supports.
    fn scheduler_capabilities(&self, gpu: &str) -> ControlResult<SchedulerCapabilities>;
    /// Sets the scheduler at runtime (lost when the driver reloads).
    fn set_scheduler(&self, gpu: &str, setting: &SchedulerSetting) -> ControlResult<()>;
    /// The GPU's telemetry.
    fn metrics(&self, gpu: &str) -> ControlResult<GpuMetrics>;
}

/// The backend of a host without NVML: every call fails with the reason.
#[derive(Debug, Clone)]
pub struct Unavailable {
    reason: String,
}

impl Unavailable {
    /// A backend that answers every call with `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Unavailable {
            reason: reason.into(),
        }
    }

    fn err<T>(&self) -> ControlResult<T> {
        Err(ControlError::Unavailable(self.reason.clone()))
    }
}

impl GpuControl for Unavailable {
    fn availability(&self) -> Result<(), String> {
        Err(self.reason.clone())
    }
    fn driver_version(&self) -> ControlResult<String> {
        self.err()
    }
    fn gpu(&self, _: &str) -> ControlResult<GpuFacts> {
        self.err()
    }
    fn mig_mode(&self, _: &str) -> ControlResult<MigMode> {
        self.err()
    }
    fn set_mig_mode(&self, _: &str, _: bool) -> ControlResult<MigMode> {
        self.err()
    }
    fn mig_profiles(&self, _: &str) -> ControlResult<Vec<MigProfile>> {
        self.err()
    }
    fn gpu_instances(&self, _: &str) -> ControlResult<Vec<GpuInstance>> {
        self.err()
    }
    fn create_gpu_instance(
        &self,
        _: &str,
        _: u32,
        _: Option<Placement>,
        _: bool,
    ) -> ControlResult<GpuInstance> {
        self.err()
    }
    fn destroy_gpu_instance(&self, _: &str, _: u32) -> ControlResult<()> {
        self.err()
    }
    fn vgpu_types(&self, _: &str) -> ControlResult<Vec<VgpuTypeFacts>> {
        self.err()
    }
    fn active_vgpus(&self, _: &str) -> ControlResult<Vec<ActiveVgpu>> {
        self.err()
    }
    fn heterogeneous_mode(&self, _: &str) -> ControlResult<bool> {
        self.err()
    }
    fn scheduler(&self, _: &str) -> ControlResult<SchedulerState> {
        self.err()
    }
    fn scheduler_capabilities(&self, _: &str) -> ControlResult<SchedulerCapabilities> {
        self.err()
    }
    fn set_scheduler(&self, _: &str, _: &SchedulerSetting) -> ControlResult<()> {
        self.err()
    }
    fn metrics(&self, _: &str) -> ControlResult<GpuMetrics> {
        self.err()
    }
}
