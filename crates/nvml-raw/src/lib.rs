//! The NVML calls that `nvml-wrapper` 0.13 does not wrap, or wraps wrongly (hardware.md §6.3),
//! called through the wrapper's loaded library (`Nvml::lib()`), each one documented and checked.
//! This is the only crate of vgpud that may use `unsafe`.
//!
//! Every function takes the wrapper's safe handles (`&Device`, `&Nvml`) and returns owned
//! Rust values. Symbols are read through the **fields** of `NvmlLib` (`lib.nvmlX.as_ref()`),
//! never through the convenience methods of the same name, which panic when a symbol is
//! missing: an older driver without a call gives [`RawError::MissingSymbol`]. A return code
//! other than `NVML_SUCCESS` gives [`RawError::Call`] with the code and the wrapper's
//! [`NvmlError`] for it.
//!
//! What is here:
//! - GPU-instance profiles and placements: [`gpu_instance_profile_info`] (by profile
//!   *index*, versioned struct), [`gpu_instance_possible_placements`] (the wrapper's
//!   `possible_placements` always returns an empty list), [`gpu_instance_remaining_capacity`].
//! - GPU-instance lifecycle: [`create_gpu_instance`], [`create_gpu_instance_with_placement`],
//!   [`gpu_instances`], [`gpu_instance_by_id`], [`gpu_instance_info`],
//!   [`destroy_gpu_instance`].
//! - Compute instances: [`create_full_compute_instance`], [`compute_instances`],
//!   [`destroy_compute_instance`].
//! - vGPU: [`heterogeneous_mode`], [`set_heterogeneous_mode`], [`vgpu_utilization`],
//!   [`vgpu_scheduler_log`] (with the real entry count; the wrapper's always has 200),
//!   [`active_vgpu_ids`] (the raw instance numbers, which the wrapper keeps private).

use std::ffi::{c_char, c_uint};
use std::mem;
use std::ptr;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t,
    nvmlComputeInstanceProfileInfo_v2_t, nvmlComputeInstance_t, nvmlDevice_t,
    nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_v2_t,
    nvmlGpuInstance_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE, nvmlReturn_enum_NVML_SUCCESS,
    nvmlReturn_t, nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE,
    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT,
    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT, nvmlValueType_t, nvmlValue_t,
    nvmlVgpuHeterogeneousMode_t, nvmlVgpuInstanceUtilizationSample_t, nvmlVgpuInstance_t,
    nvmlVgpuSchedulerLog_t, NvmlLib, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT, NVML_GPU_INSTANCE_PROFILE_COUNT,
    NVML_SCHEDULER_SW_MAX_LOG_ENTRIES, NVML_VGPU_SCHEDULER_ARR_ENABLE,
};

pub use nvml_wrapper;
pub use nvml_wrapper_sys;

/// `NVML_STRUCT_VERSION(T, ver)` of nvml.h: the size of the struct in the low 24 bits, the
/// version in the high 8. Versioned structs (`…_v2_t` with a `version` field) must carry it.
pub const fn struct_version<T>(ver: u32) -> u32 {
    (mem::size_of::<T>() as u32) | (ver << 24)
}

/// `nvmlGpuInstanceProfileInfo_v2` of nvml.h.
pub const GPU_INSTANCE_PROFILE_INFO_V2: u32 = struct_version::<nvmlGpuInstanceProfileInfo_v2_t>(2);
/// `nvmlComputeInstanceProfileInfo_v2` of nvml.h.
pub const COMPUTE_INSTANCE_PROFILE_INFO_V2: u32 =
    struct_version::<nvmlComputeInstanceProfileInfo_v2_t>(2);
/// `nvmlVgpuHeterogeneousMode_v1` of nvml.h.
pub const VGPU_HETEROGENEOUS_MODE_V1: u32 = struct_version::<nvmlVgpuHeterogeneousMode_t>(1);

/// The NVML profile-index count this crate knows (`NVML_GPU_INSTANCE_PROFILE_COUNT`).
pub const GPU_INSTANCE_PROFILE_COUNT: u32 = NVML_GPU_INSTANCE_PROFILE_COUNT;

/// The code of `NVML_ERROR_NOT_SUPPORTED`.
pub const NOT_SUPPORTED: u32 = nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;

/// A failed raw call, naming the NVML function.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    /// The loaded library has no such function (an older driver, or a fake without it).
    #[error("{call}: the library does not have this function ({detail})")]
    MissingSymbol {
        /// The NVML function.
        call: &'static str,
        /// What the loader said.
        detail: String,
    },
    /// The function returned an error code.
    #[error("{call} failed: {error} (NVML return code {code})")]
    Call {
        /// The NVML function.
        call: &'static str,
        /// The `nvmlReturn_t`.
        code: u32,
        /// The wrapper's error for the code.
        #[source]
        error: NvmlError,
    },
    /// The function answered something impossible (a count beyond the buffer, a bad string).
    #[error("{call}: unexpected answer: {detail}")]
    Unexpected {
        /// The NVML function.
        call: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl RawError {
    /// The NVML function that failed.
    pub fn call(&self) -> &'static str {
        match self {
            RawError::MissingSymbol { call, .. }
            | RawError::Call { call, .. }
            | RawError::Unexpected { call, .. } => call,
        }
    }

    /// The return code, for [`RawError::Call`].
    pub fn code(&self) -> Option<u32> {
        match self {
            RawError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the driver said `NVML_ERROR_NOT_SUPPORTED` (or lacks the function).
    pub fn is_not_supported(&self) -> bool {
        matches!(self, RawError::MissingSymbol { .. }) || self.code() == Some(NOT_SUPPORTED)
    }

    /// The wrapper's error of the same meaning: `FailedToLoadSymbol` for a missing function,
    /// the code's variant for a failed call, `Unknown` for an impossible answer.
    pub fn to_nvml_error(&self) -> NvmlError {
        match self {
            RawError::MissingSymbol { detail, .. } => NvmlError::FailedToLoadSymbol(detail.clone()),
            RawError::Call { code, .. } => NvmlError::from(*code),
            RawError::Unexpected { .. } => NvmlError::Unknown,
        }
    }
}

/// Result of a raw call.
pub type RawResult<T> = Result<T, RawError>;

/// Maps a return code: `NVML_SUCCESS` is `Ok`, anything else [`RawError::Call`].
pub fn check(call: &'static str, code: nvmlReturn_t) -> RawResult<()> {
    if code == nvmlReturn_enum_NVML_SUCCESS {
        Ok(())
    } else {
        Err(RawError::Call {
            call,
            code,
            error: NvmlError::from(code),
        })
    }
}

/// Reads a symbol from the library's field, turning a missing one into an error.
fn sym<'a, T, E: std::fmt::Display>(
    call: &'static str,
    field: Result<&'a T, &E>,
) -> RawResult<&'a T> {
    field.map_err(|e| RawError::MissingSymbol {
        call,
        detail: e.to_string(),
    })
}

fn lib(nvml: &Nvml) -> &NvmlLib {
    nvml.lib()
}

fn handle(device: &Device<'_>) -> nvmlDevice_t {
    // SAFETY: `handle` only copies the opaque device pointer out of the wrapper; the pointer
    // stays valid while `device` (and so its `Nvml`) lives, which outlives every call below.
    unsafe { device.handle() }
}

fn c_name(call: &'static str, buf: &[c_char]) -> RawResult<String> {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    if bytes.len() == buf.len() {
        return Err(RawError::Unexpected {
            call,
            detail: "the name is not NUL-terminated".into(),
        });
    }
    String::from_utf8(bytes).map_err(|e| RawError::Unexpected {
        call,
        detail: format!("the name is not UTF-8: {e}"),
    })
}

/// A GPU-instance profile as `nvmlDeviceGetGpuInstanceProfileInfoV` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuInstanceProfileInfo {
    /// The profile ID (what creates take; `nvidia-smi mig -lgip`'s ID column).
    pub id: u32,
    /// Peer-to-peer support.
    pub is_p2p_supported: bool,
    /// Compute slices (GPCs).
    pub slice_count: u32,
    /// How many instances of the profile the GPU can hold.
    pub instance_count: u32,
    /// Streaming multiprocessors.
    pub multiprocessor_count: u32,
    /// Copy engines.
    pub copy_engine_count: u32,
    /// Video decoders.
    pub decoder_count: u32,
    /// Video encoders.
    pub encoder_count: u32,
    /// JPEG engines.
    pub jpeg_count: u32,
    /// Optical-flow engines.
    pub ofa_count: u32,
    /// Memory in MiB.
    pub memory_size_mib: u64,
    /// The driver's name (`MIG 1g.18gb`).
    pub name: String,
}

/// A placement: the first slice and the number of slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Placement {
    /// The first slice.
    pub start: u32,
    /// How many slices.
    pub size: u32,
}

/// `nvmlDeviceGetGpuInstanceProfileInfoV`: the profile at NVML profile **index** `index`
/// (`NVML_GPU_INSTANCE_PROFILE_1_SLICE` = 0 …, below [`GPU_INSTANCE_PROFILE_COUNT`]), with
/// the v2 struct (`version` = [`GPU_INSTANCE_PROFILE_INFO_V2`]). The returned `id` is what
/// the create calls take; it differs from the index on real hardware. A profile the GPU does
/// not have answers `NVML_ERROR_NOT_SUPPORTED` (see [`RawError::is_not_supported`]); a GPU
/// without MIG answers it for every index. Works with MIG off on current drivers.
pub fn gpu_instance_profile_info(
    device: &Device<'_>,
    index: u32,
) -> RawResult<GpuInstanceProfileInfo> {
    const CALL: &str = "nvmlDeviceGetGpuInstanceProfileInfoV";
    let f = sym(
        CALL,
        lib(device.nvml())
            .nvmlDeviceGetGpuInstanceProfileInfoV
            .as_ref(),
    )?;
    // SAFETY: the struct is plain old data (integers and a char array); all zeroes is valid.
    let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { mem::zeroed() };
    info.version = GPU_INSTANCE_PROFILE_INFO_V2;
    // SAFETY: `f` is the library's function of this signature; the device handle is valid
    // while `device` lives; `info` is a writable struct of the size its version announces.
    check(CALL, unsafe { f(handle(device), index, &mut info) })?;
    Ok(GpuInstanceProfileInfo {
        id: info.id,
        is_p2p_supported: info.isP2pSupported != 0,
        slice_count: info.sliceCount,
        instance_count: info.instanceCount,
        multiprocessor_count: info.multiprocessorCount,
        copy_engine_count: info.copyEngineCount,
        decoder_count: info.decoderCount,
        encoder_count: info.encoderCount,
        jpeg_count: info.jpegCount,
        ofa_count: info.ofaCount,
        memory_size_mib: info.memorySizeMB,
        name: c_name(CALL, &info.name)?,
    })
}

/// `nvmlDeviceGetGpuInstancePossiblePlacements_v2`: every placement profile **ID**
/// `profile_id` can take, free or not. Called twice: with a null buffer for the count, then
/// with a buffer of that size. (The wrapper's `possible_placements` never sets the length of
/// its buffer and so always returns an empty list.) Needs MIG on on some drivers.
pub fn gpu_instance_possible_placements(
    device: &Device<'_>,
    profile_id: u32,
) -> RawResult<Vec<Placement>> {
    const CALL: &str = "nvmlDeviceGetGpuInstancePossiblePlacements_v2";
    let f = sym(
        CALL,
        lib(device.nvml())
            .nvmlDeviceGetGpuInstancePossiblePlacements_v2
            .as_ref(),
    )?;
    let mut count: c_uint = 0;
    // SAFETY: a null placements pointer asks for the count only (nvml.h); `count` is writable.
    let code = unsafe { f(handle(device), profile_id, ptr::null_mut(), &mut count) };
    if code != nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
        check(CALL, code)?;
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    let capacity = count;
    let mut buf = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; capacity as usize];
    // SAFETY: `buf` holds `count` writable placements, as the call was told in `count`.
    check(CALL, unsafe {
        f(handle(device), profile_id, buf.as_mut_ptr(), &mut count)
    })?;
    if count > capacity {
        return Err(RawError::Unexpected {
            call: CALL,
            detail: format!("{count} placements for a buffer of {capacity}"),
        });
    }
    buf.truncate(count as usize);
    Ok(buf
        .into_iter()
        .map(|p| Placement {
            start: p.start,
            size: p.size,
        })
        .collect())
}

/// `nvmlDeviceGetGpuInstanceRemainingCapacity`: how many more GPU instances of profile
/// **ID** `profile_id` fit now (0 with MIG off on most drivers, or `NOT_SUPPORTED`).
pub fn gpu_instance_remaining_capacity(device: &Device<'_>, profile_id: u32) -> RawResult<u32> {
    const CALL: &str = "nvmlDeviceGetGpuInstanceRemainingCapacity";
    let f = sym(
        CALL,
        lib(device.nvml())
            .nvmlDeviceGetGpuInstanceRemainingCapacity
            .as_ref(),
    )?;
    let mut count: c_uint = 0;
    // SAFETY: valid device handle, writable `count`.
    check(CALL, unsafe { f(handle(device), profile_id, &mut count) })?;
    Ok(count)
}

/// A GPU instance handle, borrowed from the library that made it. Valid until the instance
/// is destroyed (by [`destroy_gpu_instance`] or anyone else); using a stale one makes NVML
/// answer `NVML_ERROR_INVALID_ARGUMENT` or `NOT_FOUND`, not undefined behaviour, since the
/// handle is an opaque token the driver checks.
#[derive(Debug)]
pub struct GpuInstance<'nvml> {
    handle: nvmlGpuInstance_t,
    nvml: &'nvml Nvml,
}

/// A compute instance handle (see [`GpuInstance`]).
#[derive(Debug)]
pub struct ComputeInstance<'nvml> {
    handle: nvmlComputeInstance_t,
    nvml: &'nvml Nvml,
}

/// `nvmlDeviceCreateGpuInstance`: makes a GPU instance of profile **ID** `profile_id` (not
/// the index) where the driver chooses. Needs MIG on and root; `INSUFFICIENT_RESOURCES` when
/// it does not fit, `NOT_SUPPORTED` with MIG off, `IN_USE` while the GPU is busy in ways the
/// driver forbids. GPU instances do not survive a reboot or driver reload.
pub fn create_gpu_instance<'nvml>(
    device: &Device<'nvml>,
    profile_id: u32,
) -> RawResult<GpuInstance<'nvml>> {
    const CALL: &str = "nvmlDeviceCreateGpuInstance";
    let nvml = device.nvml();
    let f = sym(CALL, lib(nvml).nvmlDeviceCreateGpuInstance.as_ref())?;
    let mut gi: nvmlGpuInstance_t = ptr::null_mut();
    // SAFETY: valid device handle; `gi` is a writable handle slot.
    check(CALL, unsafe { f(handle(device), profile_id, &mut gi) })?;
    Ok(GpuInstance { handle: gi, nvml })
}

/// `nvmlDeviceCreateGpuInstanceWithPlacement`: as [`create_gpu_instance`] at `placement`,
/// which must be one of [`gpu_instance_possible_placements`] and free
/// (`INSUFFICIENT_RESOURCES` otherwise, `INVALID_ARGUMENT` for one the profile cannot take).
pub fn create_gpu_instance_with_placement<'nvml>(
    device: &Device<'nvml>,
    profile_id: u32,
    placement: Placement,
) -> RawResult<GpuInstance<'nvml>> {
    const CALL: &str = "nvmlDeviceCreateGpuInstanceWithPlacement";
    let nvml = device.nvml();
    let f = sym(
        CALL,
        lib(nvml).nvmlDeviceCreateGpuInstanceWithPlacement.as_ref(),
    )?;
    let p = nvmlGpuInstancePlacement_t {
        start: placement.start,
        size: placement.size,
    };
    let mut gi: nvmlGpuInstance_t = ptr::null_mut();
    // SAFETY: valid device handle; `p` is read only during the call; `gi` is writable.
    check(CALL, unsafe { f(handle(device), profile_id, &p, &mut gi) })?;
    Ok(GpuInstance { handle: gi, nvml })
}

/// How many handles to offer a list call at least: no GPU holds more instances of one
/// profile, and a larger buffer is always safe.
const MIN_LIST_CAPACITY: u32 = 64;

/// `nvmlDeviceGetGpuInstances`: the GPU instances of profile **ID** `profile_id`. nvml.h asks
/// for a buffer "large enough to accommodate the instances supported by the profile"; this
/// looks the profile's `instanceCount` up by its ID first (over every profile index) and
/// offers at least [`MIN_LIST_CAPACITY`] slots. A profile the GPU lacks gives an empty list.
pub fn gpu_instances<'nvml>(
    device: &Device<'nvml>,
    profile_id: u32,
) -> RawResult<Vec<GpuInstance<'nvml>>> {
    const CALL: &str = "nvmlDeviceGetGpuInstances";
    let nvml = device.nvml();
    let f = sym(CALL, lib(nvml).nvmlDeviceGetGpuInstances.as_ref())?;
    let mut capacity = MIN_LIST_CAPACITY;
    for index in 0..GPU_INSTANCE_PROFILE_COUNT {
        if let Ok(info) = gpu_instance_profile_info(device, index) {
            if info.id == profile_id {
                capacity = capacity.max(info.instance_count);
            }
        }
    }
    let mut buf: Vec<nvmlGpuInstance_t> = vec![ptr::null_mut(); capacity as usize];
    let mut count: c_uint = 0;
    // SAFETY: `buf` has `capacity` writable handle slots, more than the profile can hold.
    check(CALL, unsafe {
        f(handle(device), profile_id, buf.as_mut_ptr(), &mut count)
    })?;
    if count > capacity {
        return Err(RawError::Unexpected {
            call: CALL,
            detail: format!("{count} instances for a buffer of {capacity}"),
        });
    }
    buf.truncate(count as usize);
    Ok(buf
        .into_iter()
        .map(|handle| GpuInstance { handle, nvml })
        .collect())
}

/// Every GPU instance of the GPU: [`gpu_instances`] over the profile IDs of every profile
/// index the GPU has (a profile ID shared by two indexes is asked once).
pub fn all_gpu_instances<'nvml>(device: &Device<'nvml>) -> RawResult<Vec<GpuInstance<'nvml>>> {
    let mut ids = Vec::new();
    for index in 0..GPU_INSTANCE_PROFILE_COUNT {
        match gpu_instance_profile_info(device, index) {
            Ok(info) if !ids.contains(&info.id) => ids.push(info.id),
            Ok(_) => {}
            // A profile index the GPU lacks (NOT_SUPPORTED) or the driver does not know
            // (INVALID_ARGUMENT); a missing function is an error.
            Err(e) if e.code().is_some() => {}
            Err(e) => return Err(e),
        }
    }
    let mut out = Vec::new();
    for id in ids {
        out.extend(gpu_instances(device, id)?);
    }
    Ok(out)
}

/// `nvmlDeviceGetGpuInstanceById`: the GPU instance of ID `id` (`NOT_FOUND` if none).
pub fn gpu_instance_by_id<'nvml>(device: &Device<'nvml>, id: u32) -> RawResult<GpuInstance<'nvml>> {
    const CALL: &str = "nvmlDeviceGetGpuInstanceById";
    let nvml = device.nvml();
    let f = sym(CALL, lib(nvml).nvmlDeviceGetGpuInstanceById.as_ref())?;
    let mut gi: nvmlGpuInstance_t = ptr::null_mut();
    // SAFETY: valid device handle; `gi` is writable.
    check(CALL, unsafe { f(handle(device), id, &mut gi) })?;
    Ok(GpuInstance { handle: gi, nvml })
}

/// What `nvmlGpuInstanceGetInfo` says of a GPU instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuInstanceInfo {
    /// The GPU instance ID.
    pub id: u32,
    /// The profile ID it was made with.
    pub profile_id: u32,
    /// Where it sits.
    pub placement: Placement,
}

/// `nvmlGpuInstanceGetInfo`: the instance's ID, profile ID and placement.
pub fn gpu_instance_info(gi: &GpuInstance<'_>) -> RawResult<GpuInstanceInfo> {
    const CALL: &str = "nvmlGpuInstanceGetInfo";
    let f = sym(CALL, lib(gi.nvml).nvmlGpuInstanceGetInfo.as_ref())?;
    // SAFETY: plain old data (a pointer and integers); all zeroes is valid.
    let mut info: nvmlGpuInstanceInfo_t = unsafe { mem::zeroed() };
    // SAFETY: the handle came from this library; `info` is writable.
    check(CALL, unsafe { f(gi.handle, &mut info) })?;
    Ok(GpuInstanceInfo {
        id: info.id,
        profile_id: info.profileId,
        placement: Placement {
            start: info.placement.start,
            size: info.placement.size,
        },
    })
}

/// `nvmlGpuInstanceDestroy`: destroys the GPU instance. Its compute instances must be gone
/// first (`IN_USE` otherwise; see [`destroy_compute_instance`]), and no vGPU or process may
/// use it. Consumes the handle.
pub fn destroy_gpu_instance(gi: GpuInstance<'_>) -> RawResult<()> {
    const CALL: &str = "nvmlGpuInstanceDestroy";
    let f = sym(CALL, lib(gi.nvml).nvmlGpuInstanceDestroy.as_ref())?;
    // SAFETY: the handle came from this library and is not used after this call.
    check(CALL, unsafe { f(gi.handle) })
}

/// A compute-instance profile (`nvmlGpuInstanceGetComputeInstanceProfileInfo[V]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ComputeInstanceProfileInfo {
    /// The profile ID (what the create takes).
    pub id: u32,
    /// Compute slices.
    pub slice_count: u32,
    /// How many fit in the GPU instance.
    pub instance_count: u32,
    /// Streaming multiprocessors.
    pub multiprocessor_count: u32,
}

/// `nvmlGpuInstanceGetComputeInstanceProfileInfoV` (v2 struct), or, where the library lacks
/// it, `nvmlGpuInstanceGetComputeInstanceProfileInfo`: the compute-instance profile at
/// **index** `index` (`NVML_COMPUTE_INSTANCE_PROFILE_*`) with the shared engine profile.
pub fn compute_instance_profile_info(
    gi: &GpuInstance<'_>,
    index: u32,
) -> RawResult<ComputeInstanceProfileInfo> {
    const CALL_V: &str = "nvmlGpuInstanceGetComputeInstanceProfileInfoV";
    const CALL: &str = "nvmlGpuInstanceGetComputeInstanceProfileInfo";
    let l = lib(gi.nvml);
    let eng = NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED;
    if let Ok(f) = l.nvmlGpuInstanceGetComputeInstanceProfileInfoV.as_ref() {
        // SAFETY: plain old data; all zeroes is valid.
        let mut info: nvmlComputeInstanceProfileInfo_v2_t = unsafe { mem::zeroed() };
        info.version = COMPUTE_INSTANCE_PROFILE_INFO_V2;
        // SAFETY: the handle came from this library; `info` is writable and versioned.
        check(CALL_V, unsafe { f(gi.handle, index, eng, &mut info) })?;
        return Ok(ComputeInstanceProfileInfo {
            id: info.id,
            slice_count: info.sliceCount,
            instance_count: info.instanceCount,
            multiprocessor_count: info.multiprocessorCount,
        });
    }
    let f = sym(
        CALL,
        l.nvmlGpuInstanceGetComputeInstanceProfileInfo.as_ref(),
    )?;
    // SAFETY: plain old data; all zeroes is valid.
    let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { mem::zeroed() };
    // SAFETY: the handle came from this library; `info` is writable.
    check(CALL, unsafe { f(gi.handle, index, eng, &mut info) })?;
    Ok(ComputeInstanceProfileInfo {
        id: info.id,
        slice_count: info.sliceCount,
        instance_count: info.instanceCount,
        multiprocessor_count: info.multiprocessorCount,
    })
}

/// The compute-instance profiles a GPU instance has (those not `NOT_SUPPORTED`).
pub fn compute_instance_profiles(
    gi: &GpuInstance<'_>,
) -> RawResult<Vec<ComputeInstanceProfileInfo>> {
    let mut out = Vec::new();
    for index in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        match compute_instance_profile_info(gi, index) {
            Ok(p) => out.push(p),
            Err(e) if e.code().is_some() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// `nvmlGpuInstanceCreateComputeInstance` with the profile spanning the whole GPU instance
/// (the compute-instance profile with the most slices, `nvidia-smi mig -cgi … -C`).
pub fn create_full_compute_instance<'nvml>(
    gi: &GpuInstance<'nvml>,
) -> RawResult<ComputeInstance<'nvml>> {
    const CALL: &str = "nvmlGpuInstanceCreateComputeInstance";
    let profiles = compute_instance_profiles(gi)?;
    let Some(full) = profiles.iter().max_by_key(|p| p.slice_count) else {
        return Err(RawError::Call {
            call: CALL,
            code: NOT_SUPPORTED,
            error: NvmlError::NotSupported,
        });
    };
    let f = sym(
        CALL,
        lib(gi.nvml).nvmlGpuInstanceCreateComputeInstance.as_ref(),
    )?;
    let mut ci: nvmlComputeInstance_t = ptr::null_mut();
    // SAFETY: the GI handle came from this library; `ci` is writable.
    check(CALL, unsafe { f(gi.handle, full.id, &mut ci) })?;
    Ok(ComputeInstance {
        handle: ci,
        nvml: gi.nvml,
    })
}

/// `nvmlGpuInstanceGetComputeInstances` over every compute-instance profile of the GPU
/// instance, each with a buffer of at least the profile's `instanceCount` (nvml.h's rule).
pub fn compute_instances<'nvml>(gi: &GpuInstance<'nvml>) -> RawResult<Vec<ComputeInstance<'nvml>>> {
    const CALL: &str = "nvmlGpuInstanceGetComputeInstances";
    let f = sym(
        CALL,
        lib(gi.nvml).nvmlGpuInstanceGetComputeInstances.as_ref(),
    )?;
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for p in compute_instance_profiles(gi)? {
        if seen.contains(&p.id) {
            continue;
        }
        seen.push(p.id);
        let capacity = p.instance_count.max(MIN_LIST_CAPACITY);
        let mut buf: Vec<nvmlComputeInstance_t> = vec![ptr::null_mut(); capacity as usize];
        let mut count: c_uint = 0;
        // SAFETY: `buf` has `capacity` writable slots, at least what the profile can hold.
        check(CALL, unsafe {
            f(gi.handle, p.id, buf.as_mut_ptr(), &mut count)
        })?;
        if count > capacity {
            return Err(RawError::Unexpected {
                call: CALL,
                detail: format!("{count} instances for a buffer of {capacity}"),
            });
        }
        buf.truncate(count as usize);
        out.extend(buf.into_iter().map(|handle| ComputeInstance {
            handle,
            nvml: gi.nvml,
        }));
    }
    Ok(out)
}

/// `nvmlComputeInstanceGetInfo_v2`: the compute instance's ID and profile ID.
pub fn compute_instance_id(ci: &ComputeInstance<'_>) -> RawResult<(u32, u32)> {
    const CALL: &str = "nvmlComputeInstanceGetInfo_v2";
    let f = sym(CALL, lib(ci.nvml).nvmlComputeInstanceGetInfo_v2.as_ref())?;
    // SAFETY: plain old data (pointers and integers); all zeroes is valid.
    let mut info: nvmlComputeInstanceInfo_t = unsafe { mem::zeroed() };
    // SAFETY: the handle came from this library; `info` is writable.
    check(CALL, unsafe { f(ci.handle, &mut info) })?;
    Ok((info.id, info.profileId))
}

/// `nvmlComputeInstanceDestroy`: destroys the compute instance (`IN_USE` while a process
/// runs on it). Consumes the handle.
pub fn destroy_compute_instance(ci: ComputeInstance<'_>) -> RawResult<()> {
    const CALL: &str = "nvmlComputeInstanceDestroy";
    let f = sym(CALL, lib(ci.nvml).nvmlComputeInstanceDestroy.as_ref())?;
    // SAFETY: the handle came from this library and is not used after this call.
    check(CALL, unsafe { f(ci.handle) })
}

/// `nvmlDeviceGetVgpuHeterogeneousMode` (v1 struct): whether the GPU runs vGPUs of
/// different framebuffer sizes at once (mixed-size mode). `NOT_SUPPORTED` before vGPU 17 or
/// on GPUs without it.
pub fn heterogeneous_mode(device: &Device<'_>) -> RawResult<bool> {
    const CALL: &str = "nvmlDeviceGetVgpuHeterogeneousMode";
    let f = sym(
        CALL,
        lib(device.nvml())
            .nvmlDeviceGetVgpuHeterogeneousMode
            .as_ref(),
    )?;
    let mut mode = nvmlVgpuHeterogeneousMode_t {
        version: VGPU_HETEROGENEOUS_MODE_V1,
        mode: 0,
    };
    // SAFETY: valid device handle; `mode` is writable and versioned.
    check(CALL, unsafe { f(handle(device), &mut mode) })?;
    Ok(mode.mode != 0)
}

/// `nvmlDeviceSetVgpuHeterogeneousMode` (v1 struct): turns mixed-size mode on or off. Root
/// only; `IN_USE` while a vGPU runs on the GPU; lost when the driver reloads.
pub fn set_heterogeneous_mode(device: &Device<'_>, enabled: bool) -> RawResult<()> {
    const CALL: &str = "nvmlDeviceSetVgpuHeterogeneousMode";
    let f = sym(
        CALL,
        lib(device.nvml())
            .nvmlDeviceSetVgpuHeterogeneousMode
            .as_ref(),
    )?;
    let mode = nvmlVgpuHeterogeneousMode_t {
        version: VGPU_HETEROGENEOUS_MODE_V1,
        mode: u32::from(enabled),
    };
    // SAFETY: valid device handle; `mode` is read only during the call.
    check(CALL, unsafe { f(handle(device), &mode) })
}

/// `nvmlDeviceGetActiveVgpus`: the raw instance numbers of the running vGPUs (the wrapper's
/// `active_vgpus` keeps them private; `VgpuInstance::new(id, &device)` makes wrapper objects
/// of them). Called twice, for the count and then the list.
pub fn active_vgpu_ids(device: &Device<'_>) -> RawResult<Vec<u32>> {
    const CALL: &str = "nvmlDeviceGetActiveVgpus";
    let f = sym(CALL, lib(device.nvml()).nvmlDeviceGetActiveVgpus.as_ref())?;
    let mut count: c_uint = 0;
    // SAFETY: a count of 0 with a null buffer asks for the count (INSUFFICIENT_SIZE if any).
    let code = unsafe { f(handle(device), &mut count, ptr::null_mut()) };
    if code != nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
        check(CALL, code)?;
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    let capacity = count;
    let mut buf: Vec<nvmlVgpuInstance_t> = vec![0; capacity as usize];
    // SAFETY: `buf` has `count` writable slots, as `count` tells the call.
    check(CALL, unsafe {
        f(handle(device), &mut count, buf.as_mut_ptr())
    })?;
    if count > capacity {
        return Err(RawError::Unexpected {
            call: CALL,
            detail: format!("{count} vGPUs for a buffer of {capacity}"),
        });
    }
    buf.truncate(count as usize);
    Ok(buf)
}

/// One vGPU's utilization sample (`nvmlVgpuInstanceUtilizationSample_t`), in percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VgpuUtilizationSample {
    /// The vGPU instance number (as [`active_vgpu_ids`] gives).
    pub instance: u32,
    /// The sample's CPU timestamp in microseconds.
    pub timestamp: u64,
    /// SM (3D/compute) utilization.
    pub sm: u64,
    /// Frame-buffer memory utilization.
    pub memory: u64,
    /// Encoder utilization.
    pub encoder: u64,
    /// Decoder utilization.
    pub decoder: u64,
}

/// Reads an `nvmlValue_t` of type `ty` as an unsigned integer (negative and NaN as 0).
fn value_u64(ty: nvmlValueType_t, v: nvmlValue_t) -> u64 {
    // SAFETY: every member of the union is a plain number valid for any bit pattern, and the
    // union is at least as large as each member, so reading any of them is defined; `ty`
    // picks the one the driver wrote.
    unsafe {
        #[allow(non_upper_case_globals)]
        match ty {
            nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE => {
                if v.dVal.is_finite() && v.dVal > 0.0 {
                    v.dVal as u64
                } else {
                    0
                }
            }
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => u64::from(v.uiVal),
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG => v.ulVal,
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => v.ullVal,
            nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG => v.sllVal.max(0) as u64,
            nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT => v.siVal.max(0) as u64,
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT => u64::from(v.usVal),
            _ => u64::from(v.uiVal),
        }
    }
}

/// `nvmlDeviceGetVgpuUtilization`: the per-vGPU utilization samples newer than
/// `last_seen_timestamp` (0: every sample the driver keeps). Called twice: with a null
/// buffer for the count, then with a buffer of that size. `NOT_FOUND` when there is no
/// sample yet (no vGPU, or none sampled) is answered as an empty list.
pub fn vgpu_utilization(
    device: &Device<'_>,
    last_seen_timestamp: u64,
) -> RawResult<Vec<VgpuUtilizationSample>> {
    const CALL: &str = "nvmlDeviceGetVgpuUtilization";
    let not_found = nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
    let f = sym(
        CALL,
        lib(device.nvml()).nvmlDeviceGetVgpuUtilization.as_ref(),
    )?;
    let mut ty: nvmlValueType_t = 0;
    let mut count: c_uint = 0;
    // SAFETY: a null sample buffer with a count of 0 asks for the count (nvml.h).
    let code = unsafe {
        f(
            handle(device),
            last_seen_timestamp,
            &mut ty,
            &mut count,
            ptr::null_mut(),
        )
    };
    if code == not_found {
        return Ok(Vec::new());
    }
    if code != nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
        check(CALL, code)?;
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    let capacity = count;
    // SAFETY: plain old data (integers and unions of numbers); all zeroes is valid.
    let zero: nvmlVgpuInstanceUtilizationSample_t = unsafe { mem::zeroed() };
    let mut buf = vec![zero; capacity as usize];
    // SAFETY: `buf` has `count` writable samples, as `count` tells the call.
    let code = unsafe {
        f(
            handle(device),
            last_seen_timestamp,
            &mut ty,
            &mut count,
            buf.as_mut_ptr(),
        )
    };
    if code == not_found {
        return Ok(Vec::new());
    }
    check(CALL, code)?;
    if count > capacity {
        return Err(RawError::Unexpected {
            call: CALL,
            detail: format!("{count} samples for a buffer of {capacity}"),
        });
    }
    buf.truncate(count as usize);
    Ok(buf
        .into_iter()
        .map(|s| VgpuUtilizationSample {
            instance: s.vgpuInstance,
            timestamp: s.timeStamp,
            sm: value_u64(ty, s.smUtil),
            memory: value_u64(ty, s.memUtil),
            encoder: value_u64(ty, s.encUtil),
            decoder: value_u64(ty, s.decUtil),
        })
        .collect())
}

/// One entry of the scheduler log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerLogEntry {
    /// When (ns).
    pub timestamp: u64,
    /// Total run time of the software run list (ns).
    pub time_run_total: u64,
    /// Run time in this slice (ns).
    pub time_run: u64,
    /// The software run list.
    pub sw_runlist_id: u32,
    /// The target time slice (ns).
    pub target_time_slice: u64,
    /// Preemption time so far (ns).
    pub cumulative_preemption_time: u64,
}

/// The scheduler log (`nvmlVgpuSchedulerLog_t`) with only the entries the driver filled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchedulerLog {
    /// The engine.
    pub engine_id: u32,
    /// `NVML_VGPU_SCHEDULER_POLICY_*`.
    pub policy: u32,
    /// `NVML_VGPU_SCHEDULER_ARR_*`.
    pub arr_mode: u32,
    /// The ARR averaging factor (0 without ARR).
    pub avg_factor: u32,
    /// The time slice in ns (with ARR: the slice the frequency gives).
    pub timeslice_ns: u32,
    /// The entries, `entriesCount` of them (at most 200).
    pub entries: Vec<SchedulerLogEntry>,
}

/// `nvmlDeviceGetVgpuSchedulerLog`: the scheduler's policy, ARR mode, parameters (which the
/// state call drops: only the log has the time slice and averaging factor) and its entries,
/// as many as `entriesCount` says (clamped to `NVML_SCHEDULER_SW_MAX_LOG_ENTRIES`; the
/// wrapper's log always has 200). `NOT_SUPPORTED` with MIG on or before Pascal.
pub fn vgpu_scheduler_log(device: &Device<'_>) -> RawResult<SchedulerLog> {
    const CALL: &str = "nvmlDeviceGetVgpuSchedulerLog";
    let f = sym(
        CALL,
        lib(device.nvml()).nvmlDeviceGetVgpuSchedulerLog.as_ref(),
    )?;
    // SAFETY: plain old data (integers, arrays of integers, a union of integers).
    let mut log: nvmlVgpuSchedulerLog_t = unsafe { mem::zeroed() };
    // SAFETY: valid device handle; `log` is a writable struct of the full size.
    check(CALL, unsafe { f(handle(device), &mut log) })?;
    let (avg_factor, timeslice_ns) = if log.arrMode == NVML_VGPU_SCHEDULER_ARR_ENABLE {
        // SAFETY: both union members are plain u32 fields, valid for any bit pattern.
        let p = unsafe { log.schedulerParams.vgpuSchedDataWithARR };
        (p.avgFactor, p.timeslice)
    } else {
        // SAFETY: as above.
        (0, unsafe { log.schedulerParams.vgpuSchedData.timeslice })
    };
    let n = (log.entriesCount as usize).min(NVML_SCHEDULER_SW_MAX_LOG_ENTRIES as usize);
    let entries = log.logEntries[..n]
        .iter()
        .map(|e| SchedulerLogEntry {
            timestamp: e.timestamp,
            time_run_total: e.timeRunTotal,
            time_run: e.timeRun,
            sw_runlist_id: e.swRunlistId,
            target_time_slice: e.targetTimeSlice,
            cumulative_preemption_time: e.cumulativePreemptionTime,
        })
        .collect();
    Ok(SchedulerLog {
        engine_id: log.engineId,
        policy: log.schedulerPolicy,
        arr_mode: log.arrMode,
        avg_factor,
        timeslice_ns,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper_sys::bindings::{
        nvmlReturn_enum_NVML_ERROR_IN_USE, nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
    };

    #[test]
    fn struct_versions_match_nvml_h() {
        // nvml.h: #define NVML_STRUCT_VERSION(data, ver) (sizeof(nvml##data##_v##ver##_t) | (ver << 24U))
        assert_eq!(mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>(), 152);
        assert_eq!(GPU_INSTANCE_PROFILE_INFO_V2, 0x0200_0098);
        assert_eq!(VGPU_HETEROGENEOUS_MODE_V1, 0x0100_0008);
        assert_eq!(struct_version::<u64>(3), 0x0300_0008);
        assert_eq!(COMPUTE_INSTANCE_PROFILE_INFO_V2 >> 24, 2);
    }

    #[test]
    fn return_codes_map() {
        assert!(check("nvmlX", nvmlReturn_enum_NVML_SUCCESS).is_ok());
        let e = check(
            "nvmlDeviceCreateGpuInstance",
            nvmlReturn_enum_NVML_ERROR_IN_USE,
        )
        .expect_err("IN_USE is an error");
        assert_eq!(e.call(), "nvmlDeviceCreateGpuInstance");
        assert_eq!(e.code(), Some(nvmlReturn_enum_NVML_ERROR_IN_USE));
        assert!(matches!(e.to_nvml_error(), NvmlError::InUse));
        assert!(e.to_string().contains("nvmlDeviceCreateGpuInstance"));
        let ns = check("nvmlY", nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED).expect_err("error");
        assert!(ns.is_not_supported());
        let odd = check("nvmlZ", 4242).expect_err("error");
        assert!(matches!(
            odd.to_nvml_error(),
            NvmlError::UnexpectedVariant(4242)
        ));
        let missing = RawError::MissingSymbol {
            call: "nvmlW",
            detail: "undefined symbol".into(),
        };
        assert!(missing.is_not_supported());
        assert!(matches!(
            missing.to_nvml_error(),
            NvmlError::FailedToLoadSymbol(_)
        ));
    }

    #[test]
    fn values_read_by_type() {
        let v = nvmlValue_t { ullVal: 0 };
        assert_eq!(
            value_u64(nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT, v),
            0
        );
        let v = nvmlValue_t { uiVal: 42 };
        assert_eq!(
            value_u64(nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT, v),
            42
        );
        let v = nvmlValue_t { dVal: 12.7 };
        assert_eq!(value_u64(nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE, v), 12);
        let v = nvmlValue_t { siVal: -3 };
        assert_eq!(
            value_u64(nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT, v),
            0
        );
    }

    #[test]
    fn names_are_checked() {
        let mut buf = [0 as c_char; 8];
        for (i, b) in b"MIG 1g".iter().enumerate() {
            buf[i] = *b as c_char;
        }
        assert_eq!(c_name("x", &buf).expect("name"), "MIG 1g");
        let full = [b'a' as c_char; 4];
        assert!(c_name("x", &full).is_err());
    }
}
