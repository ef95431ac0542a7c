//! A fake `libnvidia-ml.so` (test double) over vgpud's simulated host.
//!
//! Built as `target/<profile>/libnvidia_ml.so`; the unmodified `nvml-wrapper` 0.13 loads it
//! with `Nvml::builder().lib_path(path).init()` (hardware.md §6.5), so vgpud's NVML backend
//! runs in CI without a GPU. Every struct and constant comes from `nvml_wrapper_sys::bindings`,
//! so layouts and struct versions are the real ones.
//!
//! # Where the state comes from
//!
//! `VGPUD_FAKE_NVML_ROOT` names the simulated host's root `ROOT` (unset or not a directory:
//! `nvmlInit*` returns `NVML_ERROR_DRIVER_NOT_LOADED`).
//! - Devices: the NVIDIA PFs in `ROOT/sys/bus/pci/devices/*` (`vendor` `0x10de`, `class`
//!   `0x03xxxx`, no `physfn`, a `driver` link named `nvidia`), indexed in PCI-address order.
//! - The driver state (MIG mode, GPU/compute instances, scheduler, heterogeneous mode,
//!   telemetry, other clients) is `vgpud_sim_driver`'s, read and changed through its
//!   `load`/`update`.
//! - vGPU types from `vgpud_catalog` (`nvidia_board(device, subsystem)`); names, memory from
//!   `vgpud_sim_driver::gpu_model` (`NVIDIA H200`, 143771 MiB, …).
//! - Active vGPUs: VFs (`virtfnN` links) whose `nvidia/current_vgpu_type` is non-zero, and
//!   mdevs (a UUID directory with an `mdev_type` link `nvidia-<id>`) on the PF or its VFs;
//!   their GPU instance from the driver state's `vgpus`.
//!
//! # Symbols
//!
//! nvmlInit_v2, nvmlInitWithFlags, nvmlShutdown, nvmlErrorString, nvmlSystemGetDriverVersion,
//! nvmlSystemGetNVMLVersion, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
//! nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetName, nvmlDeviceGetUUID,
//! nvmlDeviceGetPciInfo_v3, nvmlDeviceGetMemoryInfo(_v2), nvmlDeviceGetVirtualizationMode,
//! nvmlDeviceGetHostVgpuMode, nvmlDevice{Get,Set}MigMode,
//! nvmlDeviceGetGpuInstanceProfileInfo(V), nvmlDeviceGetGpuInstancePossiblePlacements_v2,
//! nvmlDeviceGetGpuInstanceRemainingCapacity, nvmlDeviceCreateGpuInstance(WithPlacement),
//! nvmlDeviceGetGpuInstances, nvmlDeviceGetGpuInstanceById, nvmlGpuInstanceGetInfo,
//! nvmlGpuInstanceDestroy, nvmlGpuInstanceGetComputeInstanceProfileInfo(V),
//! nvmlGpuInstanceCreateComputeInstance, nvmlGpuInstanceGetComputeInstances,
//! nvmlComputeInstanceDestroy, nvmlComputeInstanceGetInfo_v2, nvmlDeviceGet{Supported,
//! Creatable}Vgpus, nvmlVgpuTypeGet{Name,Class,License,FramebufferSize,MaxInstances,
//! MaxInstancesPerVm,NumDisplayHeads,Resolution,FrameRateLimit,GpuInstanceProfileId},
//! nvmlDeviceGetActiveVgpus, nvmlVgpuInstanceGet{Type,UUID,MdevUUID,VmID,FbUsage,
//! GpuInstanceId,GpuPciId,PlacementId}, nvmlDevice{Get,Set}VgpuSchedulerState,
//! nvmlDeviceGetVgpuSchedulerCapabilities, nvmlDeviceGetVgpuSchedulerLog,
//! nvmlDevice{Get,Set}VgpuHeterogeneousMode, nvmlDeviceGetUtilizationRates,
//! nvmlDeviceGet{Encoder,Decoder}Utilization, nvmlDeviceGetTemperature,
//! nvmlDeviceGetPowerUsage, nvmlDeviceGetTotalEccErrors, nvmlDeviceGetVgpuUtilization.
//! Anything else is absent, so nvml-wrapper reports `FailedToLoadSymbol` when it is called.
//!
//! # Rules (return codes)
//!
//! - Before init or after the last shutdown: `UNINITIALIZED`. A NULL output pointer, a stale
//!   or foreign handle: `INVALID_ARGUMENT`. A versioned struct whose `version` is not
//!   `sizeof | ver << 24` of the expected version: `ARGUMENT_VERSION_MISMATCH` (nvml-wrapper
//!   0.13's `VgpuInstance::placement_id` leaves it 0, so it fails here as nvml.h says).
//! - Strings: a buffer shorter than the text and its NUL: `INSUFFICIENT_SIZE` (in/out length
//!   parameters then carry the size needed). Lists with an in/out count (supported, creatable
//!   and active vGPUs, placements, vGPU utilization): a count below what there is sets the
//!   count and returns `INSUFFICIENT_SIZE` without writing; placements with a NULL array return
//!   the count. `GetGpuInstances`/`GetComputeInstances` count out only (the caller sizes the
//!   buffer by the profile's instance count, as nvml.h says).
//! - MIG: no MIG on the GPU: `NOT_SUPPORTED`; profile *index* (GetGpuInstanceProfileInfo) and
//!   profile *ID* (Create, placements, capacity) kept apart; an index out of range:
//!   `INVALID_ARGUMENT`, one the GPU lacks: `NOT_SUPPORTED`. Create with MIG off:
//!   `NOT_SUPPORTED` (nvml.h: "If device doesn't have MIG mode enabled"); unknown profile ID:
//!   `NOT_SUPPORTED`; placement start not a possible start (or wrong size): `INVALID_ARGUMENT`;
//!   no room: `INSUFFICIENT_RESOURCES`. GI destroy while a vGPU sits on it or CIs exist:
//!   `IN_USE`. MIG mode set while other clients hold the GPU, VFs are enabled or GIs exist:
//!   `IN_USE`; Hopper applies at once (activation status `SUCCESS`), Ampere returns
//!   `SUCCESS` with activation status `RESET_REQUIRED` and a pending mode.
//! - Lenient: with `VGPUD_FAKE_NVML_LENIENT=1` (for tests of the caller's own checks), GI
//!   destroy never answers `IN_USE`: the GI goes, with its compute instances and its vGPU's
//!   assignment.
//! - Root: with `VGPUD_FAKE_NVML_ENFORCE_ROOT=1` and an effective uid not 0, MIG mode set,
//!   GI/CI create/destroy, scheduler set and heterogeneous mode set return `NO_PERMISSION`.
//! - Scheduler: `NOT_SUPPORTED` while MIG is on (get, set, log) and, for set, while any vGPU
//!   exists on the GPU (nvml.h: "or if any vGPU instance currently exists on the device");
//!   out-of-range policy, ARR mode, time slice (1–30 ms, in ns), averaging factor (1–60) or
//!   frequency (63–960 Hz): `INVALID_ARGUMENT`. The time slice, averaging factor and frequency
//!   are stored and reported by the log (the state has no field for them).
//! - Heterogeneous mode set while a vGPU exists: `IN_USE`; under MIG: `NOT_SUPPORTED`.
//! - Creatable vGPUs: MIG-backed types only with MIG on and a free GI of their profile;
//!   time-sliced ones only with MIG off (equal-size: only the running size until full;
//!   heterogeneous: where a placement is free).
//! - Memory used: the sum of the active vGPUs' framebuffers.
//!
//! Nothing panics across the FFI boundary: every export runs under `catch_unwind` and answers
//! `NVML_ERROR_UNKNOWN` (or NULL for `nvmlErrorString`) if anything did.
//!
//! # Safety
//!
//! Every export is `unsafe extern "C"` with nvml.h's contract: pointer arguments are NULL or
//! valid for writes (reads for `const` ones) of their type, string buffers of the length
//! passed, arrays of the count passed.

#![allow(non_snake_case, non_upper_case_globals)]
#![allow(clippy::missing_safety_doc)]

use nvml_wrapper_sys::bindings::*;
use std::ffi::{c_char, c_uint, c_ulonglong, CStr};
use std::fs;
use std::io::Read;
use std::mem;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use vgpud_catalog::NvidiaTypeInfo;
use vgpud_sim_driver::{self as sim, DriverError, GpuState};

type R = Result<(), nvmlReturn_t>;

const OK: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;
const E_UNINIT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
const E_ARG: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const E_NOTSUP: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const E_PERM: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
const E_NOTFOUND: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
const E_SIZE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const E_DRIVER: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
const E_RESET: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED;
const E_INUSE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_IN_USE;
const E_RES: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;
const E_VERSION: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
const E_UNKNOWN: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// The environment variable naming the simulated host's root.
pub const ROOT_ENV: &str = "VGPUD_FAKE_NVML_ROOT";
/// With `1`, privileged calls need an effective uid of 0.
pub const ENFORCE_ROOT_ENV: &str = "VGPUD_FAKE_NVML_ENFORCE_ROOT";
/// With `1`, a driver that guards nothing: `nvmlGpuInstanceDestroy` destroys a GPU instance
/// in use (its vGPU's assignment and compute instances go with it), so only the caller's own
/// check keeps an instance in use.
pub const LENIENT_ENV: &str = "VGPUD_FAKE_NVML_LENIENT";
/// The driver version reported (a vGPU 17 host driver) [I].
pub const DRIVER_VERSION: &str = "550.54.16";
/// The NVML version reported.
pub const NVML_VERSION: &str = "12.550.54.16";

/// `NVML_STRUCT_VERSION(T, ver)` of nvml.h.
const fn struct_version<T>(ver: u32) -> u32 {
    (mem::size_of::<T>() as u32) | (ver << 24)
}

static INIT_COUNT: AtomicU32 = AtomicU32::new(0);

/// Runs an export's body, turning a panic into `NVML_ERROR_UNKNOWN`.
fn guard(f: impl FnOnce() -> R) -> nvmlReturn_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => OK,
        Ok(Err(code)) => code,
        Err(_) => E_UNKNOWN,
    }
}

fn root_from_env() -> Option<PathBuf> {
    let root = PathBuf::from(std::env::var_os(ROOT_ENV)?);
    root.is_dir().then_some(root)
}

/// The simulated root, once initialized.
fn root() -> Result<PathBuf, nvmlReturn_t> {
    if INIT_COUNT.load(Ordering::SeqCst) == 0 {
        return Err(E_UNINIT);
    }
    root_from_env().ok_or(E_DRIVER)
}

extern "C" {
    fn geteuid() -> u32;
}

fn need_root() -> R {
    if std::env::var(ENFORCE_ROOT_ENV).is_ok_and(|v| v == "1") {
        // SAFETY: geteuid has no preconditions and cannot fail (POSIX).
        let uid = unsafe { geteuid() };
        if uid != 0 {
            return Err(E_PERM);
        }
    }
    Ok(())
}

fn driver_code(e: &DriverError) -> nvmlReturn_t {
    match e {
        DriverError::InUse(_) => E_INUSE,
        DriverError::InsufficientResources(_) => E_RES,
        DriverError::InvalidArgument(_) => E_ARG,
        DriverError::NotSupported(_) => E_NOTSUP,
        DriverError::NotFound(_) => E_NOTFOUND,
        DriverError::ResetRequired(_) => E_RESET,
    }
}

fn drv<T>(r: Result<T, DriverError>) -> Result<T, nvmlReturn_t> {
    r.map_err(|e| driver_code(&e))
}

// ---------------------------------------------------------------------------------------------
// Output helpers

/// Writes `v` through `p`.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
unsafe fn put<T>(p: *mut T, v: T) -> R {
    if p.is_null() {
        return Err(E_ARG);
    }
    // SAFETY: non-null, and valid for a write of T by the caller's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Copies `s` and a NUL into `buf` of `len` bytes.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes.
unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> R {
    if buf.is_null() {
        return Err(E_ARG);
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return Err(E_SIZE);
    }
    // SAFETY: `buf` holds `len` > bytes.len() bytes; the source is a distinct Rust string.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// As [`put_str`] with an in/out length: too small → the size needed and `INSUFFICIENT_SIZE`.
///
/// # Safety
/// `len` is NULL or valid for reads and writes; `buf` NULL or valid for `*len` bytes.
unsafe fn put_str_inout(buf: *mut c_char, len: *mut c_uint, s: &str) -> R {
    if len.is_null() {
        return Err(E_ARG);
    }
    let needed = (s.len() + 1) as c_uint;
    // SAFETY: `len` is non-null and valid by contract.
    let have = unsafe { len.read() };
    if have < needed {
        // SAFETY: as above.
        unsafe { len.write(needed) };
        return Err(E_SIZE);
    }
    // SAFETY: `buf` is valid for `have` >= needed bytes by contract.
    unsafe { put_str(buf, have, s)? };
    // SAFETY: as above.
    unsafe { len.write(needed) };
    Ok(())
}

/// Writes a list with an in/out count: a count below `items.len()` gets the length and
/// `INSUFFICIENT_SIZE`, nothing written.
///
/// # Safety
/// `count` NULL or valid for reads and writes; `arr` NULL or valid for `*count` writes of T.
unsafe fn put_list_inout<T: Copy>(count: *mut c_uint, arr: *mut T, items: &[T]) -> R {
    if count.is_null() {
        return Err(E_ARG);
    }
    let n = items.len() as c_uint;
    // SAFETY: non-null and valid by contract.
    let have = unsafe { count.read() };
    // SAFETY: as above.
    unsafe { count.write(n) };
    if have < n {
        return Err(E_SIZE);
    }
    if n == 0 {
        return Ok(());
    }
    if arr.is_null() {
        return Err(E_ARG);
    }
    // SAFETY: `arr` holds `have` >= n elements by contract.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), arr, items.len()) };
    Ok(())
}

/// Writes a list whose count is output only (the caller sized `arr` by the profile's
/// instance count, as nvml.h requires).
///
/// # Safety
/// `count` NULL or valid for a write; `arr` NULL or valid for `items.len()` writes of T.
unsafe fn put_list_out<T: Copy>(count: *mut c_uint, arr: *mut T, items: &[T]) -> R {
    if count.is_null() || (arr.is_null() && !items.is_empty()) {
        return Err(E_ARG);
    }
    if !items.is_empty() {
        // SAFETY: the caller's buffer holds the profile's instance count, at least this many.
        unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), arr, items.len()) };
    }
    // SAFETY: non-null and valid by contract.
    unsafe { count.write(items.len() as c_uint) };
    Ok(())
}

/// Reads a versioned struct's `version` (its first field) and checks it.
///
/// # Safety
/// `p` is NULL or valid for a read of a `u32` at its start.
unsafe fn check_version<T>(p: *const T, want: u32) -> R {
    if p.is_null() {
        return Err(E_ARG);
    }
    // SAFETY: every versioned NVML struct starts with `unsigned int version`.
    let v = unsafe { p.cast::<c_uint>().read() };
    if v != want {
        return Err(E_VERSION);
    }
    Ok(())
}

fn c_name<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N.saturating_sub(1))) {
        *o = b as c_char;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The simulated sysfs

fn read_small(path: &Path) -> Option<String> {
    let meta = fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut s = String::new();
    fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim().to_string())
}

fn read_hex(path: &Path) -> Option<u32> {
    let s = read_small(path)?;
    u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

fn link_name(path: &Path) -> Option<String> {
    Some(fs::read_link(path).ok()?.file_name()?.to_str()?.to_string())
}

fn devices_dir(root: &Path) -> PathBuf {
    root.join("sys/bus/pci/devices")
}

/// A physical NVIDIA GPU of the simulated host.
#[derive(Debug, Clone)]
struct Gpu {
    addr: String,
    dir: PathBuf,
    device_id: u16,
    subsystem_vendor: u16,
    subsystem_device: u16,
}

/// (domain, bus, slot, function) of a PCI address `dddd:bb:ss.f` or `bb:ss.f`.
fn parse_bdf(s: &str) -> Option<(u32, u32, u32, u32)> {
    let s = s.trim();
    let (dbs, f) = s.rsplit_once('.')?;
    let parts: Vec<&str> = dbs.split(':').collect();
    let (d, b, sl) = match parts.as_slice() {
        [d, b, sl] => (*d, *b, *sl),
        [b, sl] => ("0", *b, *sl),
        _ => return None,
    };
    let hex = |x: &str, max: usize| {
        (!x.is_empty() && x.len() <= max)
            .then(|| u32::from_str_radix(x, 16).ok())
            .flatten()
    };
    Some((hex(d, 8)?, hex(b, 2)?, hex(sl, 2)?, hex(f, 1)?))
}

impl Gpu {
    fn read(root: &Path, addr: &str) -> Option<Gpu> {
        let dir = devices_dir(root).join(addr);
        if read_hex(&dir.join("vendor"))? != 0x10de {
            return None;
        }
        if (read_hex(&dir.join("class"))? >> 16) != 0x03 {
            return None;
        }
        if fs::symlink_metadata(dir.join("physfn")).is_ok() {
            return None;
        }
        if link_name(&dir.join("driver")).as_deref() != Some("nvidia") {
            return None;
        }
        parse_bdf(addr)?;
        Some(Gpu {
            addr: addr.to_string(),
            device_id: read_hex(&dir.join("device"))? as u16,
            subsystem_vendor: read_hex(&dir.join("subsystem_vendor")).unwrap_or(0x10de) as u16,
            subsystem_device: read_hex(&dir.join("subsystem_device")).unwrap_or(0) as u16,
            dir,
        })
    }

    fn bdf(&self) -> (u32, u32, u32, u32) {
        parse_bdf(&self.addr).unwrap_or_default()
    }

    fn model_name(&self) -> String {
        sim::gpu_model(self.device_id)
            .map(|m| m.name.to_string())
            .unwrap_or_else(|| format!("NVIDIA Device {:04X}", self.device_id))
    }

    fn memory_mib(&self) -> u64 {
        sim::gpu_model(self.device_id)
            .map(|m| m.memory_mib)
            .or_else(|| {
                self.board()
                    .and_then(vgpud_catalog::nvidia_board_framebuffer_gib)
                    .map(|g| g * 1024)
            })
            .unwrap_or(16384)
    }

    fn board(&self) -> Option<&'static str> {
        vgpud_catalog::nvidia_board(self.device_id, self.subsystem_device).map(|(b, _)| b)
    }

    fn types(&self) -> Vec<&'static NvidiaTypeInfo> {
        self.board()
            .map(vgpud_catalog::nvidia_board_types)
            .unwrap_or_default()
    }

    fn vfs(&self, root: &Path) -> Vec<(String, PathBuf)> {
        let mut out: Vec<(u32, String)> = Vec::new();
        if let Ok(rd) = fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(n) = name.strip_prefix("virtfn").and_then(|n| n.parse().ok()) {
                    if let Some(vf) = link_name(&e.path()) {
                        out.push((n, vf));
                    }
                }
            }
        }
        out.sort();
        out.into_iter()
            .map(|(_, vf)| {
                let dir = devices_dir(root).join(&vf);
                (vf, dir)
            })
            .collect()
    }

    fn vfs_enabled(&self, root: &Path) -> bool {
        read_small(&self.dir.join("sriov_numvfs"))
            .and_then(|s| s.parse::<u32>().ok())
            .is_some_and(|n| n > 0)
            || !self.vfs(root).is_empty()
    }

    fn state(&self, root: &Path) -> Result<GpuState, nvmlReturn_t> {
        sim::load(root, &self.addr).map_err(|_| E_UNKNOWN)
    }

    fn update<T>(
        &self,
        root: &Path,
        f: impl FnOnce(&mut GpuState) -> T,
    ) -> Result<T, nvmlReturn_t> {
        sim::update(root, &self.addr, f).map_err(|_| E_UNKNOWN)
    }

    fn mig_capable(&self) -> bool {
        !sim::mig_profiles(self.device_id).is_empty()
    }
}

fn scan(root: &Path) -> Vec<Gpu> {
    let mut gpus: Vec<Gpu> = fs::read_dir(devices_dir(root))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| Gpu::read(root, e.file_name().to_str()?))
                .collect()
        })
        .unwrap_or_default();
    gpus.sort_by_key(|g| g.bdf());
    gpus
}

/// A vGPU running on a GPU.
#[derive(Debug, Clone)]
struct ActiveVgpu {
    /// The VF (vendor VFIO) or the mdev UUID.
    key: String,
    /// The function carrying it (VF or PF address).
    function: String,
    type_id: u32,
    mdev_uuid: Option<String>,
    placement: Option<u32>,
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| {
            if [8, 13, 18, 23].contains(&i) {
                b == b'-'
            } else {
                b.is_ascii_hexdigit()
            }
        })
}

fn placement_of(dir: &Path) -> Option<u32> {
    if let Some(p) = read_small(&dir.join("placement_id")).and_then(|s| s.parse().ok()) {
        return Some(p);
    }
    let params = read_small(&dir.join("vgpu_params"))?;
    params
        .split([',', ' ', '\n'])
        .find_map(|kv| kv.trim().strip_prefix("vgpu-placement-id=")?.parse().ok())
}

fn active_vgpus(root: &Path, gpu: &Gpu) -> Vec<ActiveVgpu> {
    let mut out = Vec::new();
    let mut parents = vec![(gpu.addr.clone(), gpu.dir.clone())];
    parents.extend(gpu.vfs(root));
    for (func, dir) in &parents {
        let nv = dir.join("nvidia");
        if let Some(t) =
            read_small(&nv.join("current_vgpu_type")).and_then(|s| s.parse::<u32>().ok())
        {
            if t != 0 {
                out.push(ActiveVgpu {
                    key: func.clone(),
                    function: func.clone(),
                    type_id: t,
                    mdev_uuid: None,
                    placement: placement_of(&nv),
                });
            }
        }
        let Ok(rd) = fs::read_dir(dir) else { continue };
        let mut mdevs: Vec<(String, u32)> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                if !is_uuid(&name) {
                    return None;
                }
                let t = link_name(&e.path().join("mdev_type"))?;
                let id = t.strip_prefix("nvidia-")?.parse().ok()?;
                Some((name, id))
            })
            .collect();
        mdevs.sort();
        for (uuid, id) in mdevs {
            out.push(ActiveVgpu {
                key: uuid.clone(),
                function: func.clone(),
                type_id: id,
                placement: placement_of(&dir.join(&uuid)),
                mdev_uuid: Some(uuid),
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Handles: small integers into process-wide registries (never dereferenced).

static DEVICES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static GIS: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());
static CIS: Mutex<Vec<(String, u32, u32)>> = Mutex::new(Vec::new());
static VGPUS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn intern<T: PartialEq + Clone>(reg: &Mutex<Vec<T>>, v: T) -> usize {
    let mut r = reg.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = r.iter().position(|x| *x == v) {
        return i + 1;
    }
    r.push(v);
    r.len()
}

fn lookup<T: Clone>(reg: &Mutex<Vec<T>>, h: usize) -> Option<T> {
    let r = reg.lock().unwrap_or_else(|e| e.into_inner());
    h.checked_sub(1).and_then(|i| r.get(i).cloned())
}

fn device_handle(gpu: &Gpu) -> nvmlDevice_t {
    std::ptr::without_provenance_mut(intern(&DEVICES, gpu.addr.clone()))
}

fn gpu_of(root: &Path, device: nvmlDevice_t) -> Result<Gpu, nvmlReturn_t> {
    let addr = lookup(&DEVICES, device.addr()).ok_or(E_ARG)?;
    Gpu::read(root, &addr).ok_or(E_ARG)
}

fn gi_handle(gpu: &Gpu, id: u32) -> nvmlGpuInstance_t {
    std::ptr::without_provenance_mut(intern(&GIS, (gpu.addr.clone(), id)))
}

/// The GPU, its state and the GI id of a GI handle that still names a GI.
fn gi_of(root: &Path, gi: nvmlGpuInstance_t) -> Result<(Gpu, GpuState, u32), nvmlReturn_t> {
    let (addr, id) = lookup(&GIS, gi.addr()).ok_or(E_ARG)?;
    let gpu = Gpu::read(root, &addr).ok_or(E_ARG)?;
    let state = gpu.state(root)?;
    if state.gpu_instance(id).is_none() || !state.mig.current {
        return Err(E_ARG);
    }
    Ok((gpu, state, id))
}

fn ci_handle(gpu: &Gpu, gi: u32, ci: u32) -> nvmlComputeInstance_t {
    std::ptr::without_provenance_mut(intern(&CIS, (gpu.addr.clone(), gi, ci)))
}

fn vgpu_handle(gpu: &Gpu, v: &ActiveVgpu) -> nvmlVgpuInstance_t {
    intern(&VGPUS, (gpu.addr.clone(), v.key.clone())) as nvmlVgpuInstance_t
}

fn vgpu_of(root: &Path, inst: nvmlVgpuInstance_t) -> Result<(Gpu, ActiveVgpu), nvmlReturn_t> {
    let (addr, key) = lookup(&VGPUS, inst as usize).ok_or(E_NOTFOUND)?;
    let gpu = Gpu::read(root, &addr).ok_or(E_NOTFOUND)?;
    let v = active_vgpus(root, &gpu)
        .into_iter()
        .find(|v| v.key == key)
        .ok_or(E_NOTFOUND)?;
    Ok((gpu, v))
}

/// A stable pseudo-UUID (FNV-1a of `seed`), formatted as NVML prints UUIDs.
fn pseudo_uuid(seed: &str) -> String {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for b in seed.bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    let x = format!("{h:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &x[0..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..32]
    )
}

fn type_info(id: nvmlVgpuTypeId_t) -> Result<&'static NvidiaTypeInfo, nvmlReturn_t> {
    vgpud_catalog::nvidia_type_by_id(id).ok_or(E_ARG)
}

/// The GI profile ID of a MIG-backed type (profile names are unique across the MIG tables).
fn type_profile_id(t: &NvidiaTypeInfo) -> Option<u32> {
    let name = t.mig_profile?;
    [0x20b5u16, 0x2330, 0x2331, 0x2335]
        .iter()
        .find_map(|d| sim::mig_profile_by_name(*d, name))
        .map(|p| p.id)
}

fn type_gib(t: &NvidiaTypeInfo) -> u64 {
    t.framebuffer_mib / 1024
}

// ---------------------------------------------------------------------------------------------
// Init and system

/// `nvmlInit_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    guard(|| {
        root_from_env().ok_or(E_DRIVER)?;
        INIT_COUNT.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

/// `nvmlInitWithFlags` (flags ignored).
#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    // SAFETY: no arguments to uphold.
    unsafe { nvmlInit_v2() }
}

/// `nvmlShutdown`.
#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    guard(|| {
        INIT_COUNT
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| E_UNINIT)
    })
}

/// `nvmlErrorString`: a static NUL-terminated text.
#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let s: &'static CStr = match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        15 => c"GPU is lost",
        16 => c"GPU requires reset",
        19 => c"In use by another client",
        23 => c"Insufficient resources",
        25 => c"Argument version mismatch",
        29 => c"Invalid state",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

/// `nvmlSystemGetDriverVersion`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        // SAFETY: caller's buffer of `length` bytes.
        unsafe { put_str(version, length, DRIVER_VERSION) }
    })
}

/// `nvmlSystemGetNVMLVersion` (works before init, as real NVML).
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: caller's buffer of `length` bytes.
    guard(|| unsafe { put_str(version, length, NVML_VERSION) })
}

// ---------------------------------------------------------------------------------------------
// Devices

/// `nvmlDeviceGetCount_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        // SAFETY: caller's pointer.
        unsafe { put(count, scan(&root).len() as c_uint) }
    })
}

/// `nvmlDeviceGetHandleByIndex_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let gpu = scan(&root).into_iter().nth(index as usize).ok_or(E_ARG)?;
        // SAFETY: caller's pointer.
        unsafe { put(device, device_handle(&gpu)) }
    })
}

/// `nvmlDeviceGetHandleByPciBusId_v2`: `0000:41:00.0`, `00000000:41:00.0` or `41:00.0`,
/// any case.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    pciBusId: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        if pciBusId.is_null() || device.is_null() {
            return Err(E_ARG);
        }
        // SAFETY: a non-null, NUL-terminated string by contract.
        let s = unsafe { CStr::from_ptr(pciBusId) };
        let want = parse_bdf(s.to_str().map_err(|_| E_ARG)?).ok_or(E_ARG)?;
        let gpu = scan(&root)
            .into_iter()
            .find(|g| g.bdf() == want)
            .ok_or(E_NOTFOUND)?;
        // SAFETY: checked non-null; caller's pointer.
        unsafe { put(device, device_handle(&gpu)) }
    })
}

/// `nvmlDeviceGetName`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        // SAFETY: caller's buffer.
        unsafe { put_str(name, length, &gpu.model_name()) }
    })
}

/// `nvmlDeviceGetUUID`: a stable `GPU-…` from the PCI address.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        let u = format!("GPU-{}", pseudo_uuid(&gpu.addr));
        // SAFETY: caller's buffer.
        unsafe { put_str(uuid, length, &u) }
    })
}

/// `nvmlDeviceGetPciInfo_v3`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        let (d, b, s, _) = gpu.bdf();
        let info = nvmlPciInfo_t {
            busIdLegacy: c_name(&format!("{d:04X}:{b:02X}:{s:02X}.0")),
            domain: d,
            bus: b,
            device: s,
            pciDeviceId: (u32::from(gpu.device_id) << 16) | 0x10de,
            pciSubSystemId: (u32::from(gpu.subsystem_device) << 16)
                | u32::from(gpu.subsystem_vendor),
            busId: c_name(&format!("{d:08X}:{b:02X}:{s:02X}.0")),
        };
        // SAFETY: caller's pointer.
        unsafe { put(pci, info) }
    })
}

fn memory(root: &Path, gpu: &Gpu) -> (u64, u64) {
    let total = gpu.memory_mib() << 20;
    let used: u64 = active_vgpus(root, gpu)
        .iter()
        .filter_map(|v| vgpud_catalog::nvidia_type_by_id(v.type_id))
        .map(|t| t.framebuffer_mib << 20)
        .sum();
    (total, used.min(total))
}

/// `nvmlDeviceGetMemoryInfo`: used = the active vGPUs' framebuffers.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    mem_: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let gpu = gpu_of(&root, device)?;
        let (total, used) = memory(&root, &gpu);
        // SAFETY: caller's pointer.
        unsafe {
            put(
                mem_,
                nvmlMemory_t {
                    total,
                    free: total - used,
                    used,
                },
            )
        }
    })
}

/// `nvmlDeviceGetMemoryInfo_v2` (version `nvmlMemory_v2`, reserved 0).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    mem_: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let gpu = gpu_of(&root, device)?;
        let want = struct_version::<nvmlMemory_v2_t>(2);
        // SAFETY: caller's pointer to a versioned struct.
        unsafe { check_version(mem_, want)? };
        let (total, used) = memory(&root, &gpu);
        // SAFETY: checked non-null; caller's pointer.
        unsafe {
            put(
                mem_,
                nvmlMemory_v2_t {
                    version: want,
                    total,
                    reserved: 0,
                    free: total - used,
                    used,
                },
            )
        }
    })
}

/// `nvmlDeviceGetVirtualizationMode`: HOST_VGPU for a vGPU board, NONE otherwise.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVirtualizationMode(
    device: nvmlDevice_t,
    pVirtualMode: *mut nvmlGpuVirtualizationMode_t,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        let mode = if gpu.board().is_some() {
            nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU
        } else {
            nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_NONE
        };
        // SAFETY: caller's pointer.
        unsafe { put(pVirtualMode, mode) }
    })
}

/// `nvmlDeviceGetHostVgpuMode`: SRIOV when the PF has `sriov_totalvfs`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHostVgpuMode(
    device: nvmlDevice_t,
    pHostVgpuMode: *mut nvmlHostVgpuMode_t,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        if gpu.board().is_none() {
            return Err(E_NOTSUP);
        }
        let mode = if gpu.dir.join("sriov_totalvfs").exists() {
            nvmlHostVgpuMode_enum_NVML_HOST_VGPU_MODE_SRIOV
        } else {
            nvmlHostVgpuMode_enum_NVML_HOST_VGPU_MODE_NON_SRIOV
        };
        // SAFETY: caller's pointer.
        unsafe { put(pHostVgpuMode, mode) }
    })
}

// ---------------------------------------------------------------------------------------------
// MIG

/// `nvmlDeviceGetMigMode`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    currentMode: *mut c_uint,
    pendingMode: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let gpu = gpu_of(&root, device)?;
        if currentMode.is_null() || pendingMode.is_null() {
            return Err(E_ARG);
        }
        if !gpu.mig_capable() {
            return Err(E_NOTSUP);
        }
        let m = gpu.state(&root)?.mig;
        // SAFETY: caller's pointers, checked non-null.
        unsafe {
            put(currentMode, c_uint::from(m.current))?;
            put(pendingMode, c_uint::from(m.pending))
        }
    })
}

/// `nvmlDeviceSetMigMode`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceSetMigMode(
    device: nvmlDevice_t,
    mode: c_uint,
    activationStatus: *mut nvmlReturn_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let gpu = gpu_of(&root, device)?;
        if activationStatus.is_null() || mode > 1 {
            return Err(E_ARG);
        }
        if !gpu.mig_capable() {
            return Err(E_NOTSUP);
        }
        need_root()?;
        let vfs = gpu.vfs_enabled(&root);
        let dev = gpu.device_id;
        let m = drv(gpu.update(&root, |s| s.set_mig_mode(dev, mode == 1, vfs))?)?;
        let status = if m.reset_required() { E_RESET } else { OK };
        // SAFETY: caller's pointer, checked non-null.
        unsafe { put(activationStatus, status) }
    })
}

fn gi_profile_info(p: &sim::GiProfile) -> nvmlGpuInstanceProfileInfo_t {
    let whole = p.compute_slices == 7;
    let media = p.media_extensions() || whole;
    nvmlGpuInstanceProfileInfo_t {
        id: p.id,
        isP2pSupported: 0,
        sliceCount: p.compute_slices,
        instanceCount: p.max_instances,
        multiprocessorCount: p.multiprocessors,
        copyEngineCount: p.compute_slices.max(1),
        decoderCount: p.compute_slices.min(7),
        encoderCount: 0,
        jpegCount: u32::from(media),
        ofaCount: u32::from(media),
        memorySizeMB: p.memory_mib,
    }
}

fn profile_by_index(gpu: &Gpu, index: c_uint) -> Result<&'static sim::GiProfile, nvmlReturn_t> {
    if !gpu.mig_capable() {
        return Err(E_NOTSUP);
    }
    if index >= NVML_GPU_INSTANCE_PROFILE_COUNT {
        return Err(E_ARG);
    }
    sim::mig_profile_by_index(gpu.device_id, index).ok_or(E_NOTSUP)
}

/// `nvmlDeviceGetGpuInstanceProfileInfo`: by profile *index* (works with MIG off, as
/// `nvidia-smi mig -lgip` does on newer drivers).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        if info.is_null() {
            return Err(E_ARG);
        }
        let p = profile_by_index(&gpu, profile)?;
        // SAFETY: caller's pointer.
        unsafe { put(info, gi_profile_info(p)) }
    })
}

/// `nvmlDeviceGetGpuInstanceProfileInfoV` (version `nvmlGpuInstanceProfileInfo_v2`).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        let want = struct_version::<nvmlGpuInstanceProfileInfo_v2_t>(2);
        // SAFETY: caller's pointer to a versioned struct.
        unsafe { check_version(info, want)? };
        let p = profile_by_index(&gpu, profile)?;
        let i = gi_profile_info(p);
        let v2 = nvmlGpuInstanceProfileInfo_v2_t {
            version: want,
            id: i.id,
            isP2pSupported: i.isP2pSupported,
            sliceCount: i.sliceCount,
            instanceCount: i.instanceCount,
            multiprocessorCount: i.multiprocessorCount,
            copyEngineCount: i.copyEngineCount,
            decoderCount: i.decoderCount,
            encoderCount: i.encoderCount,
            jpegCount: i.jpegCount,
            ofaCount: i.ofaCount,
            memorySizeMB: i.memorySizeMB,
            name: c_name(&format!("MIG {}", p.name)),
        };
        // SAFETY: checked non-null; caller's pointer.
        unsafe { put(info, v2) }
    })
}

/// `nvmlDeviceGetGpuInstancePossiblePlacements_v2`: every placement of the profile ID
/// (regardless of what is taken), NULL array → the count.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: nvmlDevice_t,
    profileId: c_uint,
    placements: *mut nvmlGpuInstancePlacement_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        if count.is_null() {
            return Err(E_ARG);
        }
        if !gpu.mig_capable() {
            return Err(E_NOTSUP);
        }
        let p = sim::mig_profile_by_id(gpu.device_id, profileId).ok_or(E_NOTSUP)?;
        let list: Vec<nvmlGpuInstancePlacement_t> = p
            .starts
            .iter()
            .map(|s| nvmlGpuInstancePlacement_t {
                start: *s,
                size: p.memory_slices,
            })
            .collect();
        if placements.is_null() {
            // SAFETY: checked non-null; caller's pointer.
            return unsafe { put(count, list.len() as c_uint) };
        }
        // SAFETY: caller's count and array of `*count` placements.
        unsafe { put_list_inout(count, placements, &list) }
    })
}

fn mig_gpu(root: &Path, device: nvmlDevice_t) -> Result<(Gpu, GpuState), nvmlReturn_t> {
    let gpu = gpu_of(root, device)?;
    if !gpu.mig_capable() {
        return Err(E_NOTSUP);
    }
    let state = gpu.state(root)?;
    if !state.mig.current {
        return Err(E_NOTSUP);
    }
    Ok((gpu, state))
}

/// `nvmlDeviceGetGpuInstanceRemainingCapacity` (MIG off: NOT_SUPPORTED).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    device: nvmlDevice_t,
    profileId: c_uint,
    count: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, state) = mig_gpu(&root()?, device)?;
        if count.is_null() {
            return Err(E_ARG);
        }
        sim::mig_profile_by_id(gpu.device_id, profileId).ok_or(E_NOTSUP)?;
        // SAFETY: caller's pointer.
        unsafe { put(count, state.remaining_capacity(gpu.device_id, profileId)) }
    })
}

fn create_gi(
    device: nvmlDevice_t,
    profile_id: u32,
    start: Option<(u32, u32)>,
    out: *mut nvmlGpuInstance_t,
) -> R {
    let root = root()?;
    let gpu = gpu_of(&root, device)?;
    if out.is_null() {
        return Err(E_ARG);
    }
    if !gpu.mig_capable() {
        return Err(E_NOTSUP);
    }
    need_root()?;
    let dev = gpu.device_id;
    if let (Some((_, size)), Some(p)) = (start, sim::mig_profile_by_id(dev, profile_id)) {
        if size != p.memory_slices {
            return Err(E_ARG);
        }
    }
    let id = drv(gpu.update(&root, |s| {
        s.create_gpu_instance(dev, profile_id, start.map(|p| p.0))
    })?)?;
    // SAFETY: checked non-null; caller's pointer.
    unsafe { put(out, gi_handle(&gpu, id)) }
}

/// `nvmlDeviceCreateGpuInstance`: by profile *ID*, at the lowest free placement.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstance(
    device: nvmlDevice_t,
    profileId: c_uint,
    gpuInstance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    guard(|| create_gi(device, profileId, None, gpuInstance))
}

/// `nvmlDeviceCreateGpuInstanceWithPlacement`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: nvmlDevice_t,
    profileId: c_uint,
    placement: *const nvmlGpuInstancePlacement_t,
    gpuInstance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    guard(|| {
        if placement.is_null() {
            return Err(E_ARG);
        }
        // SAFETY: non-null and readable by contract.
        let p = unsafe { placement.read() };
        create_gi(device, profileId, Some((p.start, p.size)), gpuInstance)
    })
}

/// `nvmlDeviceGetGpuInstances`: the GIs of a profile ID (count out only).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    device: nvmlDevice_t,
    profileId: c_uint,
    gpuInstances: *mut nvmlGpuInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, state) = mig_gpu(&root()?, device)?;
        let p = sim::mig_profile_by_id(gpu.device_id, profileId).ok_or(E_ARG)?;
        let mut ids: Vec<u32> = state
            .gpu_instances
            .iter()
            .filter(|g| g.profile_id == profileId)
            .map(|g| g.id)
            .collect();
        ids.sort_unstable();
        ids.truncate(p.max_instances as usize);
        let handles: Vec<nvmlGpuInstance_t> = ids.iter().map(|i| gi_handle(&gpu, *i)).collect();
        // SAFETY: caller's buffer sized by the profile's instance count.
        unsafe { put_list_out(count, gpuInstances, &handles) }
    })
}

/// `nvmlDeviceGetGpuInstanceById`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    gpuInstance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, state) = mig_gpu(&root()?, device)?;
        if gpuInstance.is_null() {
            return Err(E_ARG);
        }
        state.gpu_instance(id).ok_or(E_NOTFOUND)?;
        // SAFETY: caller's pointer.
        unsafe { put(gpuInstance, gi_handle(&gpu, id)) }
    })
}

/// `nvmlGpuInstanceGetInfo`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpuInstance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, state, id) = gi_of(&root()?, gpuInstance)?;
        let gi = state.gpu_instance(id).ok_or(E_ARG)?;
        let v = nvmlGpuInstanceInfo_t {
            device: device_handle(&gpu),
            id,
            profileId: gi.profile_id,
            placement: nvmlGpuInstancePlacement_t {
                start: gi.start,
                size: gi.size,
            },
        };
        // SAFETY: caller's pointer.
        unsafe { put(info, v) }
    })
}

/// `nvmlGpuInstanceDestroy`: IN_USE while a vGPU sits on it or it has compute instances.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceDestroy(gpuInstance: nvmlGpuInstance_t) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let (gpu, _, id) = gi_of(&root, gpuInstance)?;
        need_root()?;
        let lenient = std::env::var(LENIENT_ENV).is_ok_and(|v| v == "1");
        drv(gpu.update(&root, |s| {
            if lenient {
                s.vgpus.retain(|_, gi| *gi != id);
                if let Some(gi) = s.gpu_instances.iter_mut().find(|gi| gi.id == id) {
                    gi.compute_instances.clear();
                }
            }
            s.destroy_gpu_instance(id)
        })?)
    })
}

fn ci_profile_info(
    gi_profile: &sim::GiProfile,
    profile: c_uint,
) -> Result<nvmlComputeInstanceProfileInfo_t, nvmlReturn_t> {
    if profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        return Err(E_ARG);
    }
    let slices = sim::ci_profile_slices(profile)
        .filter(|s| *s <= gi_profile.compute_slices)
        .ok_or(E_NOTSUP)?;
    let gi = gi_profile_info(gi_profile);
    let count = if slices == 3 && gi_profile.compute_slices == 7 {
        2
    } else {
        gi_profile.compute_slices / slices
    };
    Ok(nvmlComputeInstanceProfileInfo_t {
        id: profile,
        sliceCount: slices,
        instanceCount: count,
        multiprocessorCount: gi_profile.multiprocessors * slices / gi_profile.compute_slices.max(1),
        sharedCopyEngineCount: gi.copyEngineCount,
        sharedDecoderCount: gi.decoderCount,
        sharedEncoderCount: gi.encoderCount,
        sharedJpegCount: gi.jpegCount,
        sharedOfaCount: gi.ofaCount,
    })
}

fn gi_profile_of(
    gpu: &Gpu,
    state: &GpuState,
    id: u32,
) -> Result<&'static sim::GiProfile, nvmlReturn_t> {
    let gi = state.gpu_instance(id).ok_or(E_ARG)?;
    sim::mig_profile_by_id(gpu.device_id, gi.profile_id).ok_or(E_UNKNOWN)
}

/// `nvmlGpuInstanceGetComputeInstanceProfileInfo` (engine profile must be SHARED).
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpuInstance: nvmlGpuInstance_t,
    profile: c_uint,
    engProfile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, state, id) = gi_of(&root()?, gpuInstance)?;
        if info.is_null() || engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
            return Err(E_ARG);
        }
        let v = ci_profile_info(gi_profile_of(&gpu, &state, id)?, profile)?;
        // SAFETY: caller's pointer.
        unsafe { put(info, v) }
    })
}

/// `nvmlGpuInstanceGetComputeInstanceProfileInfoV` (version `nvmlComputeInstanceProfileInfo_v2`).
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    gpuInstance: nvmlGpuInstance_t,
    profile: c_uint,
    engProfile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, state, id) = gi_of(&root()?, gpuInstance)?;
        let want = struct_version::<nvmlComputeInstanceProfileInfo_v2_t>(2);
        // SAFETY: caller's pointer to a versioned struct.
        unsafe { check_version(info, want)? };
        if engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
            return Err(E_ARG);
        }
        let gp = gi_profile_of(&gpu, &state, id)?;
        let v = ci_profile_info(gp, profile)?;
        let name = if v.sliceCount == gp.compute_slices {
            gp.name.to_string()
        } else {
            format!("{}c.{}", v.sliceCount, gp.name)
        };
        let v2 = nvmlComputeInstanceProfileInfo_v2_t {
            version: want,
            id: v.id,
            sliceCount: v.sliceCount,
            instanceCount: v.instanceCount,
            multiprocessorCount: v.multiprocessorCount,
            sharedCopyEngineCount: v.sharedCopyEngineCount,
            sharedDecoderCount: v.sharedDecoderCount,
            sharedEncoderCount: v.sharedEncoderCount,
            sharedJpegCount: v.sharedJpegCount,
            sharedOfaCount: v.sharedOfaCount,
            name: c_name(&format!("MIG {name}")),
        };
        // SAFETY: checked non-null; caller's pointer.
        unsafe { put(info, v2) }
    })
}

/// `nvmlGpuInstanceCreateComputeInstance`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gpuInstance: nvmlGpuInstance_t,
    profileId: c_uint,
    computeInstance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let (gpu, _, gi) = gi_of(&root, gpuInstance)?;
        if computeInstance.is_null() {
            return Err(E_ARG);
        }
        need_root()?;
        let dev = gpu.device_id;
        let ci = drv(gpu.update(&root, |s| s.create_compute_instance(gi, profileId, dev))?)?;
        // SAFETY: caller's pointer.
        unsafe { put(computeInstance, ci_handle(&gpu, gi, ci)) }
    })
}

/// `nvmlGpuInstanceGetComputeInstances`: the CIs of a CI profile (count out only).
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gpuInstance: nvmlGpuInstance_t,
    profileId: c_uint,
    computeInstances: *mut nvmlComputeInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, state, gi) = gi_of(&root()?, gpuInstance)?;
        let gp = gi_profile_of(&gpu, &state, gi)?;
        let max = ci_profile_info(gp, profileId)?.instanceCount as usize;
        let g = state.gpu_instance(gi).ok_or(E_ARG)?;
        let mut ids: Vec<u32> = g
            .compute_instances
            .iter()
            .filter(|c| c.profile_id == profileId)
            .map(|c| c.id)
            .collect();
        ids.sort_unstable();
        ids.truncate(max);
        let handles: Vec<nvmlComputeInstance_t> =
            ids.iter().map(|c| ci_handle(&gpu, gi, *c)).collect();
        // SAFETY: caller's buffer sized by the CI profile's instance count.
        unsafe { put_list_out(count, computeInstances, &handles) }
    })
}

fn ci_of(
    root: &Path,
    ci: nvmlComputeInstance_t,
) -> Result<(Gpu, GpuState, u32, u32), nvmlReturn_t> {
    let (addr, gi, id) = lookup(&CIS, ci.addr()).ok_or(E_ARG)?;
    let gpu = Gpu::read(root, &addr).ok_or(E_ARG)?;
    let state = gpu.state(root)?;
    let ok = state.mig.current
        && state
            .gpu_instance(gi)
            .is_some_and(|g| g.compute_instances.iter().any(|c| c.id == id));
    if !ok {
        return Err(E_ARG);
    }
    Ok((gpu, state, gi, id))
}

/// `nvmlComputeInstanceDestroy`.
#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceDestroy(
    computeInstance: nvmlComputeInstance_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let (gpu, _, gi, ci) = ci_of(&root, computeInstance)?;
        need_root()?;
        drv(gpu.update(&root, |s| s.destroy_compute_instance(gi, ci))?)
    })
}

/// `nvmlComputeInstanceGetInfo_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    computeInstance: nvmlComputeInstance_t,
    info: *mut nvmlComputeInstanceInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, state, gi, ci) = ci_of(&root()?, computeInstance)?;
        let c = state
            .gpu_instance(gi)
            .and_then(|g| g.compute_instances.iter().find(|c| c.id == ci))
            .ok_or(E_ARG)?;
        let v = nvmlComputeInstanceInfo_t {
            device: device_handle(&gpu),
            gpuInstance: gi_handle(&gpu, gi),
            id: ci,
            profileId: c.profile_id,
            placement: nvmlComputeInstancePlacement_t {
                start: c.start,
                size: c.size,
            },
        };
        // SAFETY: caller's pointer.
        unsafe { put(info, v) }
    })
}

// ---------------------------------------------------------------------------------------------
// vGPU types

/// `nvmlDeviceGetSupportedVgpus`: every type of the board (time-sliced and MIG-backed).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedVgpus(
    device: nvmlDevice_t,
    vgpuCount: *mut c_uint,
    vgpuTypeIds: *mut nvmlVgpuTypeId_t,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        let ids: Vec<u32> = gpu.types().iter().map(|t| t.id).collect();
        // SAFETY: caller's count and array.
        unsafe { put_list_inout(vgpuCount, vgpuTypeIds, &ids) }
    })
}

fn creatable(root: &Path, gpu: &Gpu) -> Result<Vec<u32>, nvmlReturn_t> {
    let state = gpu.state(root)?;
    let types = gpu.types();
    if state.mig.current {
        return Ok(types
            .iter()
            .filter(|t| type_profile_id(t).is_some_and(|p| !state.free_gpu_instances(p).is_empty()))
            .map(|t| t.id)
            .collect());
    }
    let active: Vec<(ActiveVgpu, &'static NvidiaTypeInfo)> = active_vgpus(root, gpu)
        .into_iter()
        .filter_map(|v| {
            let t = vgpud_catalog::nvidia_type_by_id(v.type_id)?;
            Some((v, t))
        })
        .collect();
    let sliced = types.iter().filter(|t| !t.is_mig_backed());
    if state.heterogeneous {
        let board_gib = gpu
            .board()
            .and_then(vgpud_catalog::nvidia_board_framebuffer_gib)
            .unwrap_or(0);
        let taken: Vec<(u64, u64)> = active
            .iter()
            .map(|(v, t)| (u64::from(v.placement.unwrap_or(0)), type_gib(t)))
            .collect();
        return Ok(sliced
            .filter(|t| {
                !vgpud_catalog::nvidia_free_placements(board_gib, type_gib(t), &taken).is_empty()
            })
            .map(|t| t.id)
            .collect());
    }
    Ok(match active.first() {
        None => sliced.map(|t| t.id).collect(),
        Some((_, first)) => {
            let n = active.len() as u32;
            sliced
                .filter(|t| t.framebuffer_mib == first.framebuffer_mib && n < t.max_instances)
                .map(|t| t.id)
                .collect()
        }
    })
}

/// `nvmlDeviceGetCreatableVgpus`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCreatableVgpus(
    device: nvmlDevice_t,
    vgpuCount: *mut c_uint,
    vgpuTypeIds: *mut nvmlVgpuTypeId_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let gpu = gpu_of(&root, device)?;
        let ids = creatable(&root, &gpu)?;
        // SAFETY: caller's count and array.
        unsafe { put_list_inout(vgpuCount, vgpuTypeIds, &ids) }
    })
}

fn class_of(t: &NvidiaTypeInfo) -> &'static str {
    match t.series() {
        'Q' => "Quadro",
        'B' => "NVS",
        'A' => "GRID",
        _ => "Compute",
    }
}

fn license_of(t: &NvidiaTypeInfo) -> &'static str {
    match t.series() {
        'Q' => "Quadro-Virtual-DWS,5.0;GRID-Virtual-WS,2.0;GRID-Virtual-WS-Ext,2.0",
        'B' => {
            "GRID-Virtual-PC,2.0;Quadro-Virtual-DWS,5.0;GRID-Virtual-WS,2.0;GRID-Virtual-WS-Ext,2.0"
        }
        'A' => "GRID-Virtual-Apps,3.0",
        _ => "NVIDIA-vComputeServer,9.0;Quadro-Virtual-DWS,5.0",
    }
}

/// `nvmlVgpuTypeGetName`.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetName(
    vgpuTypeId: nvmlVgpuTypeId_t,
    vgpuTypeName: *mut c_char,
    size: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        let t = type_info(vgpuTypeId)?;
        // SAFETY: caller's buffer and in/out size.
        unsafe { put_str_inout(vgpuTypeName, size, t.name) }
    })
}

/// `nvmlVgpuTypeGetClass`: Q `Quadro`, B `NVS`, A `GRID`, C `Compute`.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetClass(
    vgpuTypeId: nvmlVgpuTypeId_t,
    vgpuTypeClass: *mut c_char,
    size: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        let t = type_info(vgpuTypeId)?;
        // SAFETY: caller's buffer and in/out size.
        unsafe { put_str_inout(vgpuTypeClass, size, class_of(t)) }
    })
}

/// `nvmlVgpuTypeGetLicense`.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetLicense(
    vgpuTypeId: nvmlVgpuTypeId_t,
    vgpuTypeLicenseString: *mut c_char,
    size: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        let t = type_info(vgpuTypeId)?;
        // SAFETY: caller's buffer of `size` bytes.
        unsafe { put_str(vgpuTypeLicenseString, size, license_of(t)) }
    })
}

/// `nvmlVgpuTypeGetFramebufferSize` (bytes).
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetFramebufferSize(
    vgpuTypeId: nvmlVgpuTypeId_t,
    fbSize: *mut c_ulonglong,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        let t = type_info(vgpuTypeId)?;
        // SAFETY: caller's pointer.
        unsafe { put(fbSize, t.framebuffer_mib << 20) }
    })
}

/// `nvmlVgpuTypeGetMaxInstances` (per GPU; the type must be one of the device's).
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetMaxInstances(
    device: nvmlDevice_t,
    vgpuTypeId: nvmlVgpuTypeId_t,
    vgpuInstanceCount: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let gpu = gpu_of(&root()?, device)?;
        let t = gpu
            .types()
            .into_iter()
            .find(|t| t.id == vgpuTypeId)
            .ok_or(E_ARG)?;
        // SAFETY: caller's pointer.
        unsafe { put(vgpuInstanceCount, t.max_instances) }
    })
}

/// `nvmlVgpuTypeGetMaxInstancesPerVm` (1).
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetMaxInstancesPerVm(
    vgpuTypeId: nvmlVgpuTypeId_t,
    vgpuInstanceCountPerVm: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        type_info(vgpuTypeId)?;
        // SAFETY: caller's pointer.
        unsafe { put(vgpuInstanceCountPerVm, 1) }
    })
}

/// `nvmlVgpuTypeGetNumDisplayHeads`.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetNumDisplayHeads(
    vgpuTypeId: nvmlVgpuTypeId_t,
    numDisplayHeads: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        let t = type_info(vgpuTypeId)?;
        // SAFETY: caller's pointer.
        unsafe { put(numDisplayHeads, t.heads) }
    })
}

/// `nvmlVgpuTypeGetResolution` (a head past the last: INVALID_ARGUMENT).
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetResolution(
    vgpuTypeId: nvmlVgpuTypeId_t,
    displayIndex: c_uint,
    xdim: *mut c_uint,
    ydim: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        let t = type_info(vgpuTypeId)?;
        if displayIndex >= t.heads || xdim.is_null() || ydim.is_null() {
            return Err(E_ARG);
        }
        // SAFETY: caller's pointers, checked non-null.
        unsafe {
            put(xdim, t.max_resolution.0)?;
            put(ydim, t.max_resolution.1)
        }
    })
}

/// `nvmlVgpuTypeGetFrameRateLimit` (NOT_SUPPORTED when the type has none).
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetFrameRateLimit(
    vgpuTypeId: nvmlVgpuTypeId_t,
    frameRateLimit: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        let t = type_info(vgpuTypeId)?;
        if frameRateLimit.is_null() {
            return Err(E_ARG);
        }
        if t.frl == 0 {
            return Err(E_NOTSUP);
        }
        // SAFETY: caller's pointer.
        unsafe { put(frameRateLimit, t.frl) }
    })
}

/// `nvmlVgpuTypeGetGpuInstanceProfileId`: the GI profile ID, or
/// `INVALID_GPU_INSTANCE_PROFILE_ID` for a time-sliced type.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuTypeGetGpuInstanceProfileId(
    vgpuTypeId: nvmlVgpuTypeId_t,
    gpuInstanceProfileId: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        root()?;
        let t = type_info(vgpuTypeId)?;
        let id = type_profile_id(t).unwrap_or(INVALID_GPU_INSTANCE_PROFILE_ID);
        // SAFETY: caller's pointer.
        unsafe { put(gpuInstanceProfileId, id) }
    })
}

// ---------------------------------------------------------------------------------------------
// vGPU instances

/// `nvmlDeviceGetActiveVgpus`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetActiveVgpus(
    device: nvmlDevice_t,
    vgpuCount: *mut c_uint,
    vgpuInstances: *mut nvmlVgpuInstance_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let gpu = gpu_of(&root, device)?;
        let ids: Vec<nvmlVgpuInstance_t> = active_vgpus(&root, &gpu)
            .iter()
            .map(|v| vgpu_handle(&gpu, v))
            .collect();
        // SAFETY: caller's count and array.
        unsafe { put_list_inout(vgpuCount, vgpuInstances, &ids) }
    })
}

/// `nvmlVgpuInstanceGetType`.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuInstanceGetType(
    vgpuInstance: nvmlVgpuInstance_t,
    vgpuTypeId: *mut nvmlVgpuTypeId_t,
) -> nvmlReturn_t {
    guard(|| {
        let (_, v) = vgpu_of(&root()?, vgpuInstance)?;
        // SAFETY: caller's pointer.
        unsafe { put(vgpuTypeId, v.type_id) }
    })
}

fn vgpu_uuid(gpu: &Gpu, v: &ActiveVgpu) -> String {
    v.mdev_uuid
        .clone()
        .unwrap_or_else(|| pseudo_uuid(&format!("{}/{}", gpu.addr, v.key)))
}

/// `nvmlVgpuInstanceGetUUID`: the mdev UUID, or a stable one from the VF address.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuInstanceGetUUID(
    vgpuInstance: nvmlVgpuInstance_t,
    uuid: *mut c_char,
    size: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, v) = vgpu_of(&root()?, vgpuInstance)?;
        // SAFETY: caller's buffer.
        unsafe { put_str(uuid, size, &vgpu_uuid(&gpu, &v)) }
    })
}

/// `nvmlVgpuInstanceGetMdevUUID`: the mdev's UUID; empty for a vGPU on a VF (no mdev).
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuInstanceGetMdevUUID(
    vgpuInstance: nvmlVgpuInstance_t,
    mdevUuid: *mut c_char,
    size: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let (_, v) = vgpu_of(&root()?, vgpuInstance)?;
        // SAFETY: caller's buffer.
        unsafe { put_str(mdevUuid, size, v.mdev_uuid.as_deref().unwrap_or("")) }
    })
}

/// `nvmlVgpuInstanceGetVmID`: the vGPU's UUID, type `NVML_VGPU_VM_ID_UUID`.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuInstanceGetVmID(
    vgpuInstance: nvmlVgpuInstance_t,
    vmId: *mut c_char,
    size: c_uint,
    vmIdType: *mut nvmlVgpuVmIdType_t,
) -> nvmlReturn_t {
    guard(|| {
        let (gpu, v) = vgpu_of(&root()?, vgpuInstance)?;
        if vmIdType.is_null() {
            return Err(E_ARG);
        }
        // SAFETY: caller's buffer and pointer.
        unsafe {
            put_str(vmId, size, &vgpu_uuid(&gpu, &v))?;
            put(vmIdType, nvmlVgpuVmIdType_NVML_VGPU_VM_ID_UUID)
        }
    })
}

/// `nvmlVgpuInstanceGetFbUsage`: 0 (no guest runs in the simulation).
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuInstanceGetFbUsage(
    vgpuInstance: nvmlVgpuInstance_t,
    fbUsage: *mut c_ulonglong,
) -> nvmlReturn_t {
    guard(|| {
        vgpu_of(&root()?, vgpuInstance)?;
        // SAFETY: caller's pointer.
        unsafe { put(fbUsage, 0) }
    })
}

/// `nvmlVgpuInstanceGetGpuInstanceId`: the GI of a MIG-backed vGPU, else
/// `INVALID_GPU_INSTANCE_ID` (0xFFFFFFFF).
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuInstanceGetGpuInstanceId(
    vgpuInstance: nvmlVgpuInstance_t,
    gpuInstanceId: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let (gpu, v) = vgpu_of(&root, vgpuInstance)?;
        let state = gpu.state(&root)?;
        let id = state.vgpus.get(&v.function).copied().unwrap_or(u32::MAX);
        // SAFETY: caller's pointer.
        unsafe { put(gpuInstanceId, id) }
    })
}

/// `nvmlVgpuInstanceGetGpuPciId`: `00000000:00:00.0` (no guest driver in the simulation),
/// in/out length.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuInstanceGetGpuPciId(
    vgpuInstance: nvmlVgpuInstance_t,
    vgpuPciId: *mut c_char,
    length: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        vgpu_of(&root()?, vgpuInstance)?;
        // SAFETY: caller's buffer and in/out length.
        unsafe { put_str_inout(vgpuPciId, length, "00000000:00:00.0") }
    })
}

/// `nvmlVgpuInstanceGetPlacementId` (version `nvmlVgpuPlacementId_v1`): the placement from
/// `placement_id` or `vgpu-placement-id=` in `vgpu_params`, else 0.
#[no_mangle]
pub unsafe extern "C" fn nvmlVgpuInstanceGetPlacementId(
    vgpuInstance: nvmlVgpuInstance_t,
    pPlacement: *mut nvmlVgpuPlacementId_t,
) -> nvmlReturn_t {
    guard(|| {
        let (_, v) = vgpu_of(&root()?, vgpuInstance)?;
        let want = struct_version::<nvmlVgpuPlacementId_t>(1);
        // SAFETY: caller's pointer to a versioned struct.
        unsafe { check_version(pPlacement, want)? };
        let p = nvmlVgpuPlacementId_t {
            version: want,
            placementId: v.placement.unwrap_or(0),
        };
        // SAFETY: checked non-null; caller's pointer.
        unsafe { put(pPlacement, p) }
    })
}

// ---------------------------------------------------------------------------------------------
// Scheduler and heterogeneous mode

fn vgpu_gpu(root: &Path, device: nvmlDevice_t) -> Result<(Gpu, GpuState), nvmlReturn_t> {
    let gpu = gpu_of(root, device)?;
    if gpu.board().is_none() {
        return Err(E_NOTSUP);
    }
    let state = gpu.state(root)?;
    Ok((gpu, state))
}

const NS_PER_MS: u32 = 1_000_000;

fn sched_params(s: &sim::SchedulerState) -> nvmlVgpuSchedulerParams_t {
    if s.arr_mode == sim::arr::ENABLE {
        nvmlVgpuSchedulerParams_t {
            vgpuSchedDataWithARR: nvmlVgpuSchedulerParams_t__bindgen_ty_1 {
                avgFactor: s.avg_factor,
                timeslice: 1_000_000_000 / s.frequency_hz.max(1),
            },
        }
    } else {
        nvmlVgpuSchedulerParams_t {
            vgpuSchedData: nvmlVgpuSchedulerParams_t__bindgen_ty_2 {
                timeslice: s.timeslice_ms.saturating_mul(NS_PER_MS),
            },
        }
    }
}

/// `nvmlDeviceGetVgpuSchedulerState` (NOT_SUPPORTED under MIG).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVgpuSchedulerState(
    device: nvmlDevice_t,
    pSchedulerState: *mut nvmlVgpuSchedulerGetState_t,
) -> nvmlReturn_t {
    guard(|| {
        let (_, state) = vgpu_gpu(&root()?, device)?;
        if pSchedulerState.is_null() {
            return Err(E_ARG);
        }
        if state.mig.current {
            return Err(E_NOTSUP);
        }
        let s = state.scheduler;
        let v = nvmlVgpuSchedulerGetState_t {
            schedulerPolicy: s.policy,
            arrMode: s.arr_mode,
            schedulerParams: sched_params(&s),
        };
        // SAFETY: caller's pointer.
        unsafe { put(pSchedulerState, v) }
    })
}

/// `nvmlDeviceGetVgpuSchedulerCapabilities`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVgpuSchedulerCapabilities(
    device: nvmlDevice_t,
    pCapabilities: *mut nvmlVgpuSchedulerCapabilities_t,
) -> nvmlReturn_t {
    guard(|| {
        vgpu_gpu(&root()?, device)?;
        use sim::scheduler_limits::*;
        let v = nvmlVgpuSchedulerCapabilities_t {
            supportedSchedulers: [
                NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT,
                NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE,
                NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE,
            ],
            maxTimeslice: MAX_TIMESLICE_MS * NS_PER_MS,
            minTimeslice: MIN_TIMESLICE_MS * NS_PER_MS,
            isArrModeSupported: 1,
            maxFrequencyForARR: MAX_FREQUENCY_HZ,
            minFrequencyForARR: MIN_FREQUENCY_HZ,
            maxAvgFactorForARR: MAX_AVG_FACTOR,
            minAvgFactorForARR: MIN_AVG_FACTOR,
        };
        // SAFETY: caller's pointer.
        unsafe { put(pCapabilities, v) }
    })
}

/// `nvmlDeviceSetVgpuSchedulerState`: NOT_SUPPORTED under MIG or while any vGPU exists.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceSetVgpuSchedulerState(
    device: nvmlDevice_t,
    pSchedulerState: *mut nvmlVgpuSchedulerSetState_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let (gpu, state) = vgpu_gpu(&root, device)?;
        if pSchedulerState.is_null() {
            return Err(E_ARG);
        }
        // SAFETY: non-null and readable by contract.
        let req = unsafe { pSchedulerState.read() };
        if state.mig.current {
            return Err(E_NOTSUP);
        }
        need_root()?;
        if !active_vgpus(&root, &gpu).is_empty() {
            return Err(E_NOTSUP);
        }
        let mut new = state.scheduler;
        new.policy = req.schedulerPolicy;
        new.arr_mode = req.enableARRMode;
        if req.enableARRMode == NVML_VGPU_SCHEDULER_ARR_ENABLE {
            // SAFETY: with ARR enabled the caller filled the ARR member; both members are
            // plain integers, valid for any bit pattern.
            let p = unsafe { req.schedulerParams.vgpuSchedDataWithARR };
            new.avg_factor = p.avgFactor;
            new.frequency_hz = p.frequency;
        } else {
            // SAFETY: as above, the time-slice member.
            let p = unsafe { req.schedulerParams.vgpuSchedData };
            if p.timeslice % NS_PER_MS != 0
                && req.schedulerPolicy != NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT
            {
                return Err(E_ARG);
            }
            new.timeslice_ms = p.timeslice / NS_PER_MS;
        }
        drv(gpu.update(&root, |s| s.set_scheduler(new, false))?)
    })
}

/// `nvmlDeviceGetVgpuSchedulerLog`: the setting, and one entry per active vGPU.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVgpuSchedulerLog(
    device: nvmlDevice_t,
    pSchedulerLog: *mut nvmlVgpuSchedulerLog_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let (gpu, state) = vgpu_gpu(&root, device)?;
        if pSchedulerLog.is_null() {
            return Err(E_ARG);
        }
        if state.mig.current {
            return Err(E_NOTSUP);
        }
        let s = state.scheduler;
        let slice_ns = if s.arr_mode == sim::arr::ENABLE {
            1_000_000_000 / u64::from(s.frequency_hz.max(1))
        } else {
            u64::from(s.timeslice_ms) * u64::from(NS_PER_MS)
        };
        // SAFETY: the log is plain integers and unions of them; all-zero is a valid value.
        let mut log: nvmlVgpuSchedulerLog_t = unsafe { mem::zeroed() };
        log.engineId = NVML_VGPU_SCHEDULER_ENGINE_TYPE_GRAPHICS;
        log.schedulerPolicy = s.policy;
        log.arrMode = s.arr_mode;
        log.schedulerParams = sched_params(&s);
        let active = active_vgpus(&root, &gpu);
        let n = active.len().min(log.logEntries.len());
        for (i, e) in log.logEntries.iter_mut().take(n).enumerate() {
            let k = i as u64 + 1;
            e.timestamp = 1_700_000_000_000_000 + k * slice_ns / 1000;
            e.timeRunTotal = k * slice_ns * 100;
            e.timeRun = slice_ns;
            e.swRunlistId = i as c_uint;
            e.targetTimeSlice = slice_ns;
            e.cumulativePreemptionTime = 0;
        }
        log.entriesCount = n as c_uint;
        // SAFETY: caller's pointer.
        unsafe { put(pSchedulerLog, log) }
    })
}

/// `nvmlDeviceGetVgpuHeterogeneousMode` (version `nvmlVgpuHeterogeneousMode_v1`).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVgpuHeterogeneousMode(
    device: nvmlDevice_t,
    pHeterogeneousMode: *mut nvmlVgpuHeterogeneousMode_t,
) -> nvmlReturn_t {
    guard(|| {
        let (_, state) = vgpu_gpu(&root()?, device)?;
        let want = struct_version::<nvmlVgpuHeterogeneousMode_t>(1);
        // SAFETY: caller's pointer to a versioned struct.
        unsafe { check_version(pHeterogeneousMode, want)? };
        let v = nvmlVgpuHeterogeneousMode_t {
            version: want,
            mode: c_uint::from(state.heterogeneous),
        };
        // SAFETY: checked non-null; caller's pointer.
        unsafe { put(pHeterogeneousMode, v) }
    })
}

/// `nvmlDeviceSetVgpuHeterogeneousMode`: IN_USE while a vGPU exists, NOT_SUPPORTED under MIG.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceSetVgpuHeterogeneousMode(
    device: nvmlDevice_t,
    pHeterogeneousMode: *const nvmlVgpuHeterogeneousMode_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let (gpu, _) = vgpu_gpu(&root, device)?;
        let want = struct_version::<nvmlVgpuHeterogeneousMode_t>(1);
        // SAFETY: caller's pointer to a versioned struct.
        unsafe { check_version(pHeterogeneousMode, want)? };
        // SAFETY: checked non-null; readable by contract.
        let m = unsafe { pHeterogeneousMode.read() };
        if m.mode > 1 {
            return Err(E_ARG);
        }
        need_root()?;
        let busy = !active_vgpus(&root, &gpu).is_empty();
        drv(gpu.update(&root, |s| s.set_heterogeneous(m.mode == 1, busy))?)
    })
}

// ---------------------------------------------------------------------------------------------
// Telemetry

fn telemetry(device: nvmlDevice_t) -> Result<(Gpu, GpuState), nvmlReturn_t> {
    let root = root()?;
    let gpu = gpu_of(&root, device)?;
    let state = gpu.state(&root)?;
    Ok((gpu, state))
}

/// `nvmlDeviceGetUtilizationRates`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    guard(|| {
        let (_, s) = telemetry(device)?;
        let v = nvmlUtilization_t {
            gpu: s.telemetry.gpu_util,
            memory: s.telemetry.mem_util,
        };
        // SAFETY: caller's pointer.
        unsafe { put(utilization, v) }
    })
}

/// `nvmlDeviceGetEncoderUtilization` (sampling period 167 ms).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    samplingPeriodUs: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let (_, s) = telemetry(device)?;
        if utilization.is_null() || samplingPeriodUs.is_null() {
            return Err(E_ARG);
        }
        // SAFETY: caller's pointers, checked non-null.
        unsafe {
            put(utilization, s.telemetry.enc_util)?;
            put(samplingPeriodUs, 167_000)
        }
    })
}

/// `nvmlDeviceGetDecoderUtilization` (sampling period 167 ms).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    samplingPeriodUs: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let (_, s) = telemetry(device)?;
        if utilization.is_null() || samplingPeriodUs.is_null() {
            return Err(E_ARG);
        }
        // SAFETY: caller's pointers, checked non-null.
        unsafe {
            put(utilization, s.telemetry.dec_util)?;
            put(samplingPeriodUs, 167_000)
        }
    })
}

/// `nvmlDeviceGetTemperature` (only `NVML_TEMPERATURE_GPU`).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensorType: nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let (_, s) = telemetry(device)?;
        if sensorType != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return Err(E_ARG);
        }
        // SAFETY: caller's pointer.
        unsafe { put(temp, s.telemetry.temperature_c) }
    })
}

/// `nvmlDeviceGetPowerUsage` (mW).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let (_, s) = telemetry(device)?;
        // SAFETY: caller's pointer.
        unsafe { put(power, s.telemetry.power_mw) }
    })
}

/// `nvmlDeviceGetTotalEccErrors` (volatile and aggregate alike).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    errorType: nvmlMemoryErrorType_t,
    counterType: nvmlEccCounterType_t,
    eccCounts: *mut c_ulonglong,
) -> nvmlReturn_t {
    guard(|| {
        let (_, s) = telemetry(device)?;
        if counterType > nvmlEccCounterType_enum_NVML_AGGREGATE_ECC {
            return Err(E_ARG);
        }
        let n = match errorType {
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED => s.telemetry.ecc_corrected,
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED => {
                s.telemetry.ecc_uncorrected
            }
            _ => return Err(E_ARG),
        };
        // SAFETY: caller's pointer.
        unsafe { put(eccCounts, n) }
    })
}

/// `nvmlDeviceGetVgpuUtilization`: one sample per active vGPU (values unsigned int, from
/// `telemetry.vgpu_utilization` by the vGPU's function or mdev UUID); NULL array → the count;
/// no vGPU → NOT_FOUND.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVgpuUtilization(
    device: nvmlDevice_t,
    lastSeenTimeStamp: c_ulonglong,
    sampleValType: *mut nvmlValueType_t,
    vgpuInstanceSamplesCount: *mut c_uint,
    utilizationSamples: *mut nvmlVgpuInstanceUtilizationSample_t,
) -> nvmlReturn_t {
    guard(|| {
        let root = root()?;
        let gpu = gpu_of(&root, device)?;
        if sampleValType.is_null() || vgpuInstanceSamplesCount.is_null() {
            return Err(E_ARG);
        }
        let state = gpu.state(&root)?;
        let active = active_vgpus(&root, &gpu);
        if active.is_empty() {
            return Err(E_NOTFOUND);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
            .max(lastSeenTimeStamp + 1);
        let uv = |x: u32| nvmlValue_t { uiVal: x };
        let samples: Vec<nvmlVgpuInstanceUtilizationSample_t> = active
            .iter()
            .map(|v| {
                let u = state
                    .telemetry
                    .vgpu_utilization
                    .get(&v.key)
                    .or_else(|| state.telemetry.vgpu_utilization.get(&v.function))
                    .copied()
                    .unwrap_or_default();
                nvmlVgpuInstanceUtilizationSample_t {
                    vgpuInstance: vgpu_handle(&gpu, v),
                    timeStamp: now,
                    smUtil: uv(u.sm),
                    memUtil: uv(u.mem),
                    encUtil: uv(u.enc),
                    decUtil: uv(u.dec),
                }
            })
            .collect();
        // SAFETY: caller's pointers, checked non-null.
        unsafe {
            put(
                sampleValType,
                nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT,
            )?
        };
        if utilizationSamples.is_null() {
            // SAFETY: as above.
            return unsafe { put(vgpuInstanceSamplesCount, samples.len() as c_uint) };
        }
        // SAFETY: caller's count and array.
        unsafe { put_list_inout(vgpuInstanceSamplesCount, utilizationSamples, &samples) }
    })
}
