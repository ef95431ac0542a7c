//! The simulated NVIDIA driver's state (test double).
//!
//! What the real NVIDIA host driver keeps per physical GPU (PF) and sysfs does not show: the
//! MIG mode, the GPU instances (GIs) and their compute instances (CIs), which GI each MIG-backed
//! vGPU sits on, heterogeneous (mixed-size) mode, the vGPU scheduler setting, telemetry, and the
//! other processes holding the GPU. vgpud's simulated host (`sim-host`, the simulated
//! `nvidia-smi`/`sriov-manage`) and the fake `libnvidia-ml.so` (`crates/fake-nvml`) share it
//! through [`load`] and [`update`].
//!
//! Storage, below the simulated host's root `ROOT` (hardware.md §3.1, §6.6 item 1):
//! - `ROOT/run/nvidia-sim/<pf>.json`: the volatile state (GIs, vGPU assignments, heterogeneous
//!   mode, scheduler, telemetry, clients, MIG mode too). A simulated reboot deletes `ROOT/run`,
//!   so all of it is lost, as on real hardware.
//! - `ROOT/var/lib/nvidia-sim/<pf>.json`: the MIG mode (`current`, `pending`), which real GPUs
//!   keep across reboots. When the volatile file is missing (a boot), the state is the defaults
//!   plus the persistent MIG mode with `current = pending` (the boot is the reset that applies
//!   an Ampere GPU's pending mode).
//! - `ROOT/run/nvidia-sim/lock`: one `flock` for every GPU; [`update`] holds it exclusively,
//!   [`load`] shared.
//!
//! Files are replaced atomically (write a temporary file, rename). A state file that is not a
//! regular file, larger than [`MAX_STATE_FILE`] or not valid JSON of the state is an
//! `InvalidData` error, never a panic.
//!
//! MIG tables ([`mig_profiles`]): A100 PCIe 80GB (PCI device `0x20b5`), H100 SXM5 80GB
//! (`0x2330`), H100 PCIe 80GB (`0x2331`), H200 141GB SXM (`0x2335`, an assumed id).
//! Profile IDs (what `nvmlDeviceCreateGpuInstance` and `nvidia-smi mig -cgi` take) and NVML
//! profile *indexes* (what `nvmlDeviceGetGpuInstanceProfileInfo` takes) differ, as on hardware
//! (hardware.md §3.2). GI ids are the driver's "swizzle" ids, fixed by placement: the whole
//! GPU is 0, halves 1–2, quarters 3–6, eighths 7–14 (`7g` → 0, `3g` at 4 → 2, `1g` at 3 → 10),
//! as real A100/H100 drivers number them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The largest state file read (bytes); a larger one is `InvalidData`.
pub const MAX_STATE_FILE: u64 = 4 << 20;

/// Memory slices of a MIG-capable GPU (A100/H100/H200).
pub const MEMORY_SLICES: u32 = 8;
/// Compute slices of a MIG-capable GPU (A100/H100/H200).
pub const COMPUTE_SLICES: u32 = 7;

/// NVIDIA vGPU scheduler policy values (NVML `NVML_VGPU_SCHEDULER_POLICY_*`).
pub mod policy {
    /// Best effort (the default).
    pub const BEST_EFFORT: u32 = 1;
    /// Equal share.
    pub const EQUAL_SHARE: u32 = 2;
    /// Fixed share.
    pub const FIXED_SHARE: u32 = 3;
}

/// NVML ARR mode values (`NVML_VGPU_SCHEDULER_ARR_*`).
pub mod arr {
    /// The driver's default.
    pub const DEFAULT: u32 = 0;
    /// Adaptive round robin disabled.
    pub const DISABLE: u32 = 1;
    /// Adaptive round robin enabled.
    pub const ENABLE: u32 = 2;
}

/// A GPU-instance profile as `nvidia-smi mig -lgip` lists it (hardware.md §3.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiProfile {
    /// The profile ID (`nvmlGpuInstanceProfileInfo_t.id`, `nvidia-smi mig -cgi <id>`).
    pub id: u32,
    /// The NVML profile index (`NVML_GPU_INSTANCE_PROFILE_*`), which
    /// `nvmlDeviceGetGpuInstanceProfileInfo` takes.
    pub index: u32,
    /// The name without `MIG `: `1g.18gb`, `1g.18gb+me`.
    pub name: &'static str,
    /// Compute slices (of 7).
    pub compute_slices: u32,
    /// Memory slices (of 8): the placement size.
    pub memory_slices: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// The most instances of the profile on one GPU.
    pub max_instances: u32,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// The possible placement starts (in memory slices), as `nvidia-smi mig -lgipp` lists them.
    pub starts: &'static [u32],
}

impl GiProfile {
    /// Whether the profile carries the media extensions once per GPU (`+me`).
    pub fn media_extensions(&self) -> bool {
        self.name.ends_with("+me")
    }

    /// The GI id the driver gives an instance of this profile at `start` (the swizzle id).
    pub fn instance_id(&self, start: u32) -> u32 {
        let size = self.memory_slices.max(1);
        MEMORY_SLICES / size - 1 + start / size
    }
}

const S1: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
const S2: &[u32] = &[0, 2, 4, 6];
const S2G: &[u32] = &[0, 2, 4];
const S3G: &[u32] = &[0, 4];
const S0: &[u32] = &[0];

#[allow(clippy::too_many_arguments)]
const fn p(
    id: u32,
    index: u32,
    name: &'static str,
    compute_slices: u32,
    memory_slices: u32,
    memory_mib: u64,
    max_instances: u32,
    multiprocessors: u32,
    starts: &'static [u32],
) -> GiProfile {
    GiProfile {
        id,
        index,
        name,
        compute_slices,
        memory_slices,
        memory_mib,
        max_instances,
        multiprocessors,
        starts,
    }
}

// NVML profile indexes (nvml-wrapper-sys 0.10): 1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3,
// 7_SLICE 4, 1_SLICE_REV1 (+me) 7, 1_SLICE_REV2 (1g double memory) 9.

/// A100 PCIe 80GB: memory and SM counts as the MIG user guide gives them for A100 80GB [I: not
/// verified against a dump here].
static A100_80GB: [GiProfile; 7] = [
    p(19, 0, "1g.10gb", 1, 1, 9728, 7, 14, S1),
    p(20, 7, "1g.10gb+me", 1, 1, 9728, 1, 14, S1),
    p(15, 9, "1g.20gb", 1, 2, 19968, 4, 14, S2),
    p(14, 1, "2g.20gb", 2, 2, 19968, 3, 28, S2G),
    p(9, 2, "3g.40gb", 3, 4, 40192, 2, 42, S3G),
    p(5, 3, "4g.40gb", 4, 4, 40192, 1, 56, S0),
    p(0, 4, "7g.80gb", 7, 8, 80896, 1, 98, S0),
];

/// H100 80GB: the `nvidia-smi mig -lgip` dump of hardware.md §3.2 (GiB × 1024); used for the
/// SXM5 and the PCIe board alike [I for PCIe].
static H100_80GB: [GiProfile; 7] = [
    p(19, 0, "1g.10gb", 1, 1, 9984, 7, 16, S1),
    p(20, 7, "1g.10gb+me", 1, 1, 9984, 1, 16, S1),
    p(15, 9, "1g.20gb", 1, 2, 20096, 4, 26, S2),
    p(14, 1, "2g.20gb", 2, 2, 20096, 3, 32, S2G),
    p(9, 2, "3g.40gb", 3, 4, 40448, 2, 60, S3G),
    p(5, 3, "4g.40gb", 4, 4, 40448, 1, 64, S0),
    p(0, 4, "7g.80gb", 7, 8, 81152, 1, 132, S0),
];

/// H200 141GB: names and counts from hardware.md §3.2; IDs as H100 [I]; memory is H100's
/// scaled by 143771/81559 MiB and SMs as H100 SXM5 [I].
static H200_141GB: [GiProfile; 7] = [
    p(19, 0, "1g.18gb", 1, 1, 17536, 7, 16, S1),
    p(20, 7, "1g.18gb+me", 1, 1, 17536, 1, 16, S1),
    p(15, 9, "1g.35gb", 1, 2, 35328, 4, 26, S2),
    p(14, 1, "2g.35gb", 2, 2, 35328, 3, 32, S2G),
    p(9, 2, "3g.71gb", 3, 4, 71296, 2, 60, S3G),
    p(5, 3, "4g.71gb", 4, 4, 71296, 1, 64, S0),
    p(0, 4, "7g.141gb", 7, 8, 142976, 1, 132, S0),
];

/// The GPU architecture, as far as the simulated driver cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Ampere: a MIG mode change is pending until a GPU reset (or reboot).
    Ampere,
    /// Hopper: a MIG mode change applies at once.
    Hopper,
    /// Anything else (no MIG).
    Other,
}

/// What the simulated driver tells about a GPU model (NVML name and memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuModel {
    /// PCI device id.
    pub device_id: u16,
    /// The NVML device name (`nvmlDeviceGetName`).
    pub name: &'static str,
    /// Total framebuffer in MiB as `nvidia-smi` reports it.
    pub memory_mib: u64,
    /// The architecture.
    pub architecture: Architecture,
}

/// NVML names and memory of the NVIDIA GPUs the simulated hosts carry. Names are NVML's;
/// memory as `nvidia-smi` prints it on these boards [I: 81920 A100 80GB, 81559 H100, 143771
/// H200, 46068 L40S/A40 from public dumps, not verified here].
static MODELS: &[GpuModel] = &[
    m(0x20b5, "NVIDIA A100 80GB PCIe", 81920, Architecture::Ampere),
    m(0x20f1, "NVIDIA A100-PCIE-40GB", 40960, Architecture::Ampere),
    m(0x2330, "NVIDIA H100 80GB HBM3", 81559, Architecture::Hopper),
    m(0x2331, "NVIDIA H100 PCIe", 81559, Architecture::Hopper),
    m(0x2335, "NVIDIA H200", 143771, Architecture::Hopper),
    m(0x2235, "NVIDIA A40", 46068, Architecture::Other),
    m(0x2236, "NVIDIA A10", 23028, Architecture::Other),
    m(0x25b6, "NVIDIA A16", 15356, Architecture::Other),
    m(0x26b9, "NVIDIA L40S", 46068, Architecture::Other),
    m(0x26b5, "NVIDIA L40", 46068, Architecture::Other),
    m(0x27b8, "NVIDIA L4", 23034, Architecture::Other),
    m(0x1eb8, "Tesla T4", 15360, Architecture::Other),
    m(0x1e30, "Quadro RTX 6000", 24576, Architecture::Other),
];

const fn m(device_id: u16, name: &'static str, memory_mib: u64, a: Architecture) -> GpuModel {
    GpuModel {
        device_id,
        name,
        memory_mib,
        architecture: a,
    }
}

/// The simulated driver's model facts of a PCI device id, if it knows the GPU.
pub fn gpu_model(device_id: u16) -> Option<&'static GpuModel> {
    MODELS.iter().find(|m| m.device_id == device_id)
}

/// The GPU-instance profiles of a GPU by PCI device id; empty for a GPU without MIG.
pub fn mig_profiles(device_id: u16) -> &'static [GiProfile] {
    match device_id {
        0x20b5 => &A100_80GB,
        0x2330 | 0x2331 => &H100_80GB,
        0x2335 => &H200_141GB,
        _ => &[],
    }
}

/// A GPU-instance profile by name (`1g.18gb`, also `MIG 1g.18gb`), case-insensitive.
pub fn mig_profile_by_name(device_id: u16, name: &str) -> Option<&'static GiProfile> {
    let name = name.trim();
    let name = name.strip_prefix("MIG ").unwrap_or(name);
    mig_profiles(device_id)
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name))
}

/// A GPU-instance profile by profile ID (19 for `1g.*`).
pub fn mig_profile_by_id(device_id: u16, id: u32) -> Option<&'static GiProfile> {
    mig_profiles(device_id).iter().find(|p| p.id == id)
}

/// A GPU-instance profile by NVML profile index (`NVML_GPU_INSTANCE_PROFILE_1_SLICE` = 0).
pub fn mig_profile_by_index(device_id: u16, index: u32) -> Option<&'static GiProfile> {
    mig_profiles(device_id).iter().find(|p| p.index == index)
}

/// Compute-instance profiles: (profile id = NVML index, compute slices). The 6- and 8-slice
/// ones do not exist on A100/H100/H200.
pub const CI_PROFILES: &[(u32, u32)] = &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 7)];

/// The compute slices of a compute-instance profile id, if it is one.
pub fn ci_profile_slices(profile_id: u32) -> Option<u32> {
    CI_PROFILES
        .iter()
        .find(|(id, _)| *id == profile_id)
        .map(|(_, s)| *s)
}

/// The MIG mode: `current` is in effect, `pending` applies at the next GPU reset. They differ
/// only on Ampere after a change (NVML's activation status `NVML_ERROR_RESET_REQUIRED`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigState {
    /// MIG mode in effect.
    pub current: bool,
    /// MIG mode after the next reset.
    pub pending: bool,
}

impl MigState {
    /// Whether a GPU reset is needed for the pending mode to take effect.
    pub fn reset_required(&self) -> bool {
        self.current != self.pending
    }
}

/// A compute instance inside a GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeInstanceState {
    /// The CI id, unique within its GI (lowest free first).
    pub id: u32,
    /// The compute-instance profile id ([`CI_PROFILES`]).
    pub profile_id: u32,
    /// The first compute slice within the GI.
    pub start: u32,
    /// Compute slices.
    pub size: u32,
}

/// A GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInstanceState {
    /// The GI id (the driver's swizzle id, [`GiProfile::instance_id`]).
    pub id: u32,
    /// The GI profile ID.
    pub profile_id: u32,
    /// The placement start (memory slices).
    pub start: u32,
    /// The placement size (memory slices).
    pub size: u32,
    /// Its compute instances.
    #[serde(default)]
    pub compute_instances: Vec<ComputeInstanceState>,
}

/// The vGPU scheduler setting (hardware.md §4). Lost at reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerState {
    /// `NVML_VGPU_SCHEDULER_POLICY_*`: 1 best effort, 2 equal share, 3 fixed share.
    pub policy: u32,
    /// `NVML_VGPU_SCHEDULER_ARR_*`: 0 default, 1 disabled, 2 enabled.
    pub arr_mode: u32,
    /// Time slice in ms (without ARR).
    pub timeslice_ms: u32,
    /// ARR averaging factor.
    pub avg_factor: u32,
    /// ARR scheduling frequency in Hz.
    pub frequency_hz: u32,
}

impl Default for SchedulerState {
    fn default() -> Self {
        SchedulerState {
            policy: policy::BEST_EFFORT,
            arr_mode: arr::DEFAULT,
            timeslice_ms: 2,
            avg_factor: 33,
            frequency_hz: 480,
        }
    }
}

/// Scheduler limits the simulated driver reports and enforces (hardware.md §4.2):
/// time slice 1–30 ms, averaging factor 1–60, frequency 63–960 Hz.
pub mod scheduler_limits {
    /// Shortest time slice, ms.
    pub const MIN_TIMESLICE_MS: u32 = 1;
    /// Longest time slice, ms.
    pub const MAX_TIMESLICE_MS: u32 = 30;
    /// Smallest averaging factor.
    pub const MIN_AVG_FACTOR: u32 = 1;
    /// Largest averaging factor.
    pub const MAX_AVG_FACTOR: u32 = 60;
    /// Lowest ARR frequency, Hz.
    pub const MIN_FREQUENCY_HZ: u32 = 63;
    /// Highest ARR frequency, Hz.
    pub const MAX_FREQUENCY_HZ: u32 = 960;
}

/// One vGPU's utilization sample, percent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VgpuUtilization {
    /// SM (3D/compute) utilization.
    pub sm: u32,
    /// Memory (framebuffer bandwidth) utilization.
    pub mem: u32,
    /// Encoder utilization.
    pub enc: u32,
    /// Decoder utilization.
    pub dec: u32,
}

/// Telemetry the driver reports; tests edit it through [`update`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Telemetry {
    /// GPU utilization, percent.
    pub gpu_util: u32,
    /// Memory utilization, percent.
    pub mem_util: u32,
    /// Encoder utilization, percent.
    pub enc_util: u32,
    /// Decoder utilization, percent.
    pub dec_util: u32,
    /// GPU temperature, °C.
    pub temperature_c: u32,
    /// Power draw, mW.
    pub power_mw: u32,
    /// Corrected (single-bit) ECC errors, volatile count.
    pub ecc_corrected: u64,
    /// Uncorrected (double-bit) ECC errors, volatile count.
    pub ecc_uncorrected: u64,
    /// Per-vGPU utilization by VF (or mdev parent) address.
    #[serde(default)]
    pub vgpu_utilization: BTreeMap<String, VgpuUtilization>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            gpu_util: 3,
            mem_util: 1,
            enc_util: 0,
            dec_util: 0,
            temperature_c: 34,
            power_mw: 62_000,
            ecc_corrected: 0,
            ecc_uncorrected: 0,
            vgpu_utilization: BTreeMap::new(),
        }
    }
}

/// The simulated driver's state of one physical GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuState {
    /// MIG mode (persists across reboots).
    pub mig: MigState,
    /// GPU instances, in creation order.
    pub gpu_instances: Vec<GpuInstanceState>,
    /// MIG-backed vGPUs: VF address → the GI id it sits on.
    pub vgpus: BTreeMap<String, u32>,
    /// Heterogeneous (mixed-size) vGPU mode.
    pub heterogeneous: bool,
    /// The vGPU scheduler setting.
    pub scheduler: SchedulerState,
    /// Telemetry.
    pub telemetry: Telemetry,
    /// Other processes holding the GPU (`nvidia-persistenced`): MIG mode changes fail IN_USE.
    pub clients: Vec<String>,
}

/// What the simulated driver refuses, as NVML return codes name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverError {
    /// `NVML_ERROR_IN_USE`.
    InUse(String),
    /// `NVML_ERROR_INSUFFICIENT_RESOURCES`.
    InsufficientResources(String),
    /// `NVML_ERROR_INVALID_ARGUMENT`.
    InvalidArgument(String),
    /// `NVML_ERROR_NOT_SUPPORTED`.
    NotSupported(String),
    /// `NVML_ERROR_NOT_FOUND`.
    NotFound(String),
    /// `NVML_ERROR_RESET_REQUIRED`.
    ResetRequired(String),
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, msg) = match self {
            DriverError::InUse(m) => ("in use", m),
            DriverError::InsufficientResources(m) => ("insufficient resources", m),
            DriverError::InvalidArgument(m) => ("invalid argument", m),
            DriverError::NotSupported(m) => ("not supported", m),
            DriverError::NotFound(m) => ("not found", m),
            DriverError::ResetRequired(m) => ("reset required", m),
        };
        write!(f, "{kind}: {msg}")
    }
}

impl std::error::Error for DriverError {}

fn overlaps(a_start: u32, a_size: u32, b_start: u32, b_size: u32) -> bool {
    a_start < b_start + b_size && b_start < a_start + a_size
}

impl GpuState {
    fn mig_on(&self, device_id: u16) -> Result<&'static [GiProfile], DriverError> {
        let profiles = mig_profiles(device_id);
        if profiles.is_empty() {
            return Err(DriverError::NotSupported(format!(
                "GPU 0x{device_id:04x} does not support MIG"
            )));
        }
        if !self.mig.current {
            return Err(DriverError::NotSupported("MIG mode is not enabled".into()));
        }
        Ok(profiles)
    }

    /// Compute slices the GIs take.
    pub fn used_compute_slices(&self, device_id: u16) -> u32 {
        self.gpu_instances
            .iter()
            .map(|gi| mig_profile_by_id(device_id, gi.profile_id).map_or(0, |p| p.compute_slices))
            .sum()
    }

    /// A GI by id.
    pub fn gpu_instance(&self, id: u32) -> Option<&GpuInstanceState> {
        self.gpu_instances.iter().find(|gi| gi.id == id)
    }

    /// Why a GI of `profile` could not be placed at `start` now (`None`: it could). Does not
    /// check the MIG mode.
    fn placement_refusal(&self, device_id: u16, profile: &GiProfile, start: u32) -> Option<String> {
        if self
            .gpu_instances
            .iter()
            .any(|gi| overlaps(start, profile.memory_slices, gi.start, gi.size))
        {
            return Some(format!(
                "placement {start}:{} of {} overlaps a GPU instance",
                profile.memory_slices, profile.name
            ));
        }
        if self.used_compute_slices(device_id) + profile.compute_slices > COMPUTE_SLICES {
            return Some(format!(
                "not enough compute slices left for {}",
                profile.name
            ));
        }
        let same = self
            .gpu_instances
            .iter()
            .filter(|gi| gi.profile_id == profile.id)
            .count();
        if same as u32 >= profile.max_instances {
            return Some(format!(
                "{} allows {} instance(s) per GPU",
                profile.name, profile.max_instances
            ));
        }
        if profile.media_extensions()
            && self.gpu_instances.iter().any(|gi| {
                mig_profile_by_id(device_id, gi.profile_id).is_some_and(|p| p.media_extensions())
            })
        {
            return Some("the media extensions are already taken by a +me instance".into());
        }
        None
    }

    /// The placement starts of a profile that are free now, lowest first (empty when MIG is
    /// off or the profile unknown).
    pub fn free_placements(&self, device_id: u16, profile_id: u32) -> Vec<u32> {
        let Some(profile) = mig_profile_by_id(device_id, profile_id) else {
            return Vec::new();
        };
        if !self.mig.current {
            return Vec::new();
        }
        profile
            .starts
            .iter()
            .copied()
            .filter(|s| self.placement_refusal(device_id, profile, *s).is_none())
            .collect()
    }

    /// How many more GIs of the profile could be created now (NVML's remaining capacity).
    pub fn remaining_capacity(&self, device_id: u16, profile_id: u32) -> u32 {
        let mut probe = self.clone();
        let mut n = 0;
        while probe
            .create_gpu_instance(device_id, profile_id, None)
            .is_ok()
        {
            n += 1;
        }
        n
    }

    /// Creates a GPU instance of profile ID `profile_id`, at `start` or at the lowest free
    /// placement; returns its GI id. NotSupported: no MIG, MIG off, or a profile the GPU lacks;
    /// InvalidArgument: `start` is not one of the profile's starts; InsufficientResources: no
    /// room (placement taken, compute slices, instance count, media extensions).
    pub fn create_gpu_instance(
        &mut self,
        device_id: u16,
        profile_id: u32,
        start: Option<u32>,
    ) -> Result<u32, DriverError> {
        self.mig_on(device_id)?;
        let profile = mig_profile_by_id(device_id, profile_id).ok_or_else(|| {
            DriverError::NotSupported(format!("no GPU instance profile {profile_id}"))
        })?;
        let start = match start {
            Some(s) => {
                if !profile.starts.contains(&s) {
                    return Err(DriverError::InvalidArgument(format!(
                        "{} cannot start at memory slice {s} (possible: {:?})",
                        profile.name, profile.starts
                    )));
                }
                if let Some(why) = self.placement_refusal(device_id, profile, s) {
                    return Err(DriverError::InsufficientResources(why));
                }
                s
            }
            None => {
                let mut found = None;
                let mut last = None;
                for s in profile.starts {
                    match self.placement_refusal(device_id, profile, *s) {
                        None => {
                            found = Some(*s);
                            break;
                        }
                        Some(why) => last = Some(why),
                    }
                }
                found.ok_or_else(|| {
                    DriverError::InsufficientResources(
                        last.unwrap_or_else(|| format!("no placement for {}", profile.name)),
                    )
                })?
            }
        };
        let id = profile.instance_id(start);
        self.gpu_instances.push(GpuInstanceState {
            id,
            profile_id,
            start,
            size: profile.memory_slices,
            compute_instances: Vec::new(),
        });
        Ok(id)
    }

    /// Destroys a GPU instance. NotFound: no such GI; InUse: a vGPU sits on it, or it has
    /// compute instances (real NVML refuses those too; destroy the CIs first).
    pub fn destroy_gpu_instance(&mut self, id: u32) -> Result<(), DriverError> {
        let pos = self
            .gpu_instances
            .iter()
            .position(|gi| gi.id == id)
            .ok_or_else(|| DriverError::NotFound(format!("no GPU instance {id}")))?;
        if let Some((vf, _)) = self.vgpus.iter().find(|(_, gi)| **gi == id) {
            return Err(DriverError::InUse(format!(
                "GPU instance {id} carries the vGPU on {vf}"
            )));
        }
        if !self.gpu_instances[pos].compute_instances.is_empty() {
            return Err(DriverError::InUse(format!(
                "GPU instance {id} has compute instances"
            )));
        }
        self.gpu_instances.remove(pos);
        Ok(())
    }

    /// Creates a compute instance of CI profile `ci_profile_id` (= its NVML index) in GI
    /// `gi_id` at the lowest free start; returns its CI id (lowest free).
    pub fn create_compute_instance(
        &mut self,
        gi_id: u32,
        ci_profile_id: u32,
        device_id: u16,
    ) -> Result<u32, DriverError> {
        let gi_profile = self
            .gpu_instance(gi_id)
            .and_then(|gi| mig_profile_by_id(device_id, gi.profile_id))
            .ok_or_else(|| DriverError::NotFound(format!("no GPU instance {gi_id}")))?;
        let gi_slices = gi_profile.compute_slices;
        let size = ci_profile_slices(ci_profile_id)
            .filter(|s| *s <= gi_slices)
            .ok_or_else(|| {
                DriverError::NotSupported(format!(
                    "no compute instance profile {ci_profile_id} in {}",
                    gi_profile.name
                ))
            })?;
        let Some(gi) = self.gpu_instances.iter_mut().find(|gi| gi.id == gi_id) else {
            return Err(DriverError::NotFound(format!("no GPU instance {gi_id}")));
        };
        let starts: Vec<u32> = ci_starts(gi_slices, size);
        let start = starts
            .into_iter()
            .find(|s| {
                gi.compute_instances
                    .iter()
                    .all(|ci| !overlaps(*s, size, ci.start, ci.size))
            })
            .ok_or_else(|| {
                DriverError::InsufficientResources(format!(
                    "no room for a {size}-slice compute instance in GPU instance {gi_id}"
                ))
            })?;
        let id = (0..)
            .find(|i| gi.compute_instances.iter().all(|ci| ci.id != *i))
            .unwrap_or(0);
        gi.compute_instances.push(ComputeInstanceState {
            id,
            profile_id: ci_profile_id,
            start,
            size,
        });
        Ok(id)
    }

    /// Destroys compute instance `ci_id` of GI `gi_id`.
    pub fn destroy_compute_instance(&mut self, gi_id: u32, ci_id: u32) -> Result<(), DriverError> {
        let gi = self
            .gpu_instances
            .iter_mut()
            .find(|gi| gi.id == gi_id)
            .ok_or_else(|| DriverError::NotFound(format!("no GPU instance {gi_id}")))?;
        let pos = gi
            .compute_instances
            .iter()
            .position(|ci| ci.id == ci_id)
            .ok_or_else(|| {
                DriverError::NotFound(format!(
                    "no compute instance {ci_id} in GPU instance {gi_id}"
                ))
            })?;
        gi.compute_instances.remove(pos);
        Ok(())
    }

    /// The GIs of a profile that no vGPU uses, lowest id first.
    pub fn free_gpu_instances(&self, profile_id: u32) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .gpu_instances
            .iter()
            .filter(|gi| gi.profile_id == profile_id && !self.vgpus.values().any(|v| *v == gi.id))
            .map(|gi| gi.id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Puts a MIG-backed vGPU of GI profile `profile_id` on VF `vf`: the driver chooses the free
    /// GI of the profile with the lowest id. NotSupported: MIG off; InUse: the VF already has a
    /// vGPU; InsufficientResources: no free GI of the profile.
    pub fn assign_vgpu(&mut self, vf: &str, profile_id: u32) -> Result<u32, DriverError> {
        if !self.mig.current {
            return Err(DriverError::NotSupported("MIG mode is not enabled".into()));
        }
        if let Some(gi) = self.vgpus.get(vf) {
            return Err(DriverError::InUse(format!(
                "{vf} already has a vGPU (on GPU instance {gi})"
            )));
        }
        let gi = *self.free_gpu_instances(profile_id).first().ok_or_else(|| {
            DriverError::InsufficientResources(format!(
                "no free GPU instance of profile {profile_id}"
            ))
        })?;
        self.vgpus.insert(vf.to_string(), gi);
        Ok(gi)
    }

    /// Takes the vGPU off VF `vf` (nothing if it has none).
    pub fn release_vgpu(&mut self, vf: &str) {
        self.vgpus.remove(vf);
    }

    /// What `sriov-manage -e` does to MIG (hardware.md §3.1, §6.6 item 4): every GPU instance
    /// (with its compute instances) is destroyed, so no vGPU sits on one.
    pub fn wipe_gpu_instances(&mut self) {
        self.gpu_instances.clear();
        self.vgpus.clear();
    }

    /// Everything `sriov-manage -e` resets: the GPU instances ([`Self::wipe_gpu_instances`]) and
    /// heterogeneous mode (hardware.md §2.4).
    pub fn sriov_enabled(&mut self) {
        self.wipe_gpu_instances();
        self.heterogeneous = false;
    }

    /// Sets the MIG mode. NotSupported: a GPU without MIG; InUse: other clients hold the GPU,
    /// VFs are enabled (`vfs_enabled`) or GPU instances exist. Hopper applies the mode at once;
    /// Ampere only sets `pending` (the returned state has `reset_required()`, NVML's activation
    /// status `NVML_ERROR_RESET_REQUIRED`) until [`Self::reset`]. Setting the mode in effect
    /// with nothing pending is a no-op.
    pub fn set_mig_mode(
        &mut self,
        device_id: u16,
        enabled: bool,
        vfs_enabled: bool,
    ) -> Result<MigState, DriverError> {
        if mig_profiles(device_id).is_empty() {
            return Err(DriverError::NotSupported(format!(
                "GPU 0x{device_id:04x} does not support MIG"
            )));
        }
        if self.mig.current == enabled && self.mig.pending == enabled {
            return Ok(self.mig);
        }
        if let Some(c) = self.clients.first() {
            return Err(DriverError::InUse(format!(
                "the GPU is in use by another client ({c})"
            )));
        }
        if vfs_enabled {
            return Err(DriverError::InUse(
                "SR-IOV VFs are enabled; disable them first".into(),
            ));
        }
        if !self.gpu_instances.is_empty() {
            return Err(DriverError::InUse("GPU instances exist".into()));
        }
        self.mig.pending = enabled;
        let hopper = gpu_model(device_id).is_some_and(|m| m.architecture == Architecture::Hopper);
        if hopper {
            self.mig.current = enabled;
        }
        Ok(self.mig)
    }

    /// A GPU reset: the pending MIG mode takes effect; GPU instances, vGPU assignments,
    /// heterogeneous mode and the scheduler setting are gone.
    pub fn reset(&mut self) {
        self.mig.current = self.mig.pending;
        self.gpu_instances.clear();
        self.vgpus.clear();
        self.heterogeneous = false;
        self.scheduler = SchedulerState::default();
    }

    /// Sets the vGPU scheduler. `vms_running`: a vGPU runs on the GPU (the caller knows from
    /// sysfs). NotSupported: MIG on (MIG-backed vGPUs are not time-sliced), or fixed share in
    /// heterogeneous mode; InUse: a VM runs on the GPU; InvalidArgument: policy, ARR mode or a
    /// parameter out of range ([`scheduler_limits`]). Parameters not used by the setting keep
    /// their stored values. A time slice, averaging factor or frequency of 0 asks for the
    /// driver's default (NVML's `nvmlVgpuSchedulerSetParams_t`: "0 or unspecified uses
    /// default"), the values of [`SchedulerState::default`].
    pub fn set_scheduler(
        &mut self,
        mut new: SchedulerState,
        vms_running: bool,
    ) -> Result<(), DriverError> {
        use scheduler_limits::*;
        let defaults = SchedulerState::default();
        let or_default = |v: u32, d: u32| if v == 0 { d } else { v };
        new.timeslice_ms = or_default(new.timeslice_ms, defaults.timeslice_ms);
        new.avg_factor = or_default(new.avg_factor, defaults.avg_factor);
        new.frequency_hz = or_default(new.frequency_hz, defaults.frequency_hz);
        if self.mig.current {
            return Err(DriverError::NotSupported(
                "the vGPU scheduler cannot be set while MIG is enabled".into(),
            ));
        }
        if !(1..=3).contains(&new.policy) {
            return Err(DriverError::InvalidArgument(format!(
                "scheduler policy {}",
                new.policy
            )));
        }
        if new.arr_mode > 2 {
            return Err(DriverError::InvalidArgument(format!(
                "ARR mode {}",
                new.arr_mode
            )));
        }
        if self.heterogeneous && new.policy == policy::FIXED_SHARE {
            return Err(DriverError::NotSupported(
                "fixed share is not supported in heterogeneous mode".into(),
            ));
        }
        if new.arr_mode == arr::ENABLE {
            if !(MIN_AVG_FACTOR..=MAX_AVG_FACTOR).contains(&new.avg_factor) {
                return Err(DriverError::InvalidArgument(format!(
                    "averaging factor {}",
                    new.avg_factor
                )));
            }
            if !(MIN_FREQUENCY_HZ..=MAX_FREQUENCY_HZ).contains(&new.frequency_hz) {
                return Err(DriverError::InvalidArgument(format!(
                    "frequency {} Hz",
                    new.frequency_hz
                )));
            }
        } else if new.policy != policy::BEST_EFFORT
            && !(MIN_TIMESLICE_MS..=MAX_TIMESLICE_MS).contains(&new.timeslice_ms)
        {
            return Err(DriverError::InvalidArgument(format!(
                "time slice {} ms",
                new.timeslice_ms
            )));
        }
        if vms_running {
            return Err(DriverError::InUse(
                "the scheduler can be set only while no VM runs on the GPU".into(),
            ));
        }
        let mut s = self.scheduler;
        s.policy = new.policy;
        s.arr_mode = new.arr_mode;
        if new.arr_mode == arr::ENABLE {
            s.avg_factor = new.avg_factor;
            s.frequency_hz = new.frequency_hz;
        } else if new.policy != policy::BEST_EFFORT {
            s.timeslice_ms = new.timeslice_ms;
        }
        self.scheduler = s;
        Ok(())
    }

    /// Sets heterogeneous mode. InUse: a vGPU exists on the GPU (`vgpus_exist`, from sysfs);
    /// NotSupported: MIG is on.
    pub fn set_heterogeneous(
        &mut self,
        enabled: bool,
        vgpus_exist: bool,
    ) -> Result<(), DriverError> {
        if self.mig.current {
            return Err(DriverError::NotSupported(
                "heterogeneous mode is per GPU instance under MIG".into(),
            ));
        }
        if self.heterogeneous == enabled {
            return Ok(());
        }
        if vgpus_exist {
            return Err(DriverError::InUse(
                "heterogeneous mode can change only while the GPU has no vGPU".into(),
            ));
        }
        self.heterogeneous = enabled;
        Ok(())
    }
}

/// Starts of a `size`-slice compute instance in a GI of `gi_slices` compute slices.
fn ci_starts(gi_slices: u32, size: u32) -> Vec<u32> {
    if size == 0 || size > gi_slices {
        return Vec::new();
    }
    if size == 3 && gi_slices == 7 {
        return vec![0, 4];
    }
    (0..=gi_slices - size).step_by(size as usize).collect()
}

fn volatile_dir(root: &Path) -> PathBuf {
    root.join("run/nvidia-sim")
}

fn persistent_dir(root: &Path) -> PathBuf {
    root.join("var/lib/nvidia-sim")
}

fn check_pf(pf: &str) -> io::Result<()> {
    let ok = !pf.is_empty()
        && pf.len() <= 64
        && pf
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "not a PCI address: {:?}",
                pf.chars().take(80).collect::<String>()
            ),
        ))
    }
}

/// Reads a JSON file: `None` when absent; `InvalidData` when not a regular file, too large or
/// not valid.
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> io::Result<Option<T>> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    if !meta.is_file() {
        return Err(bad(format!("{} is not a regular file", path.display())));
    }
    if meta.len() > MAX_STATE_FILE {
        return Err(bad(format!("{} is too large", path.display())));
    }
    let mut buf = Vec::new();
    fs::File::open(path)?
        .take(MAX_STATE_FILE + 1)
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_STATE_FILE {
        return Err(bad(format!("{} is too large", path.display())));
    }
    serde_json::from_slice(&buf)
        .map(Some)
        .map_err(|e| bad(format!("{}: {e}", path.display())))
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent directory"))?;
    fs::create_dir_all(dir)?;
    let data = serde_json::to_vec_pretty(value)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&data)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

fn lock(root: &Path, exclusive: bool) -> io::Result<fs::File> {
    let dir = volatile_dir(root);
    fs::create_dir_all(&dir)?;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))?;
    if exclusive {
        f.lock()?;
    } else {
        f.lock_shared()?;
    }
    Ok(f)
}

fn read_state(root: &Path, pf: &str) -> io::Result<GpuState> {
    let file = format!("{pf}.json");
    let persistent: Option<MigState> = read_json(&persistent_dir(root).join(&file))?;
    match read_json::<GpuState>(&volatile_dir(root).join(&file))? {
        Some(mut s) => {
            if let Some(m) = persistent {
                s.mig = m;
            }
            Ok(s)
        }
        None => {
            // A boot: the persisted MIG mode, with a pending one applied.
            let mig = persistent.unwrap_or_default();
            Ok(GpuState {
                mig: MigState {
                    current: mig.pending,
                    pending: mig.pending,
                },
                ..GpuState::default()
            })
        }
    }
}

/// The driver state of PF `pf` (`0000:41:00.0`) on the simulated host at `root`; the defaults
/// (and the persisted MIG mode) when nothing is stored.
pub fn load(root: &Path, pf: &str) -> io::Result<GpuState> {
    check_pf(pf)?;
    let _lock = lock(root, false)?;
    read_state(root, pf)
}

/// A locked read-modify-write of PF `pf`'s state: `f` changes it, both files are replaced
/// atomically, and `f`'s result is returned. The state is written even when `f` reports a
/// refusal through its result (a refused call changes nothing).
pub fn update<T>(root: &Path, pf: &str, f: impl FnOnce(&mut GpuState) -> T) -> io::Result<T> {
    check_pf(pf)?;
    let _lock = lock(root, true)?;
    let mut state = read_state(root, pf)?;
    let before = state.clone();
    let out = f(&mut state);
    let file = format!("{pf}.json");
    let volatile = volatile_dir(root).join(&file);
    if state != before || !volatile.exists() {
        write_json(&persistent_dir(root).join(&file), &state.mig)?;
        write_json(&volatile, &state)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
