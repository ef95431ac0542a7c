//! The fake libnvidia-ml driven through the real nvml-wrapper 0.13 (its public API, plus raw
//! `nvml.lib()` field calls where the wrapper has none), over a hand-built simulated sysfs.

#![allow(clippy::unwrap_used, unsafe_code)]

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::*;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Tests share the process environment (the root variable): one at a time.
static ENV: Mutex<()> = Mutex::new(());

const PF: &str = "0000:41:00.0";
const H200: u16 = 0x2335;

fn lib_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let lib = target.join("debug/libnvidia_ml.so");
    if !lib.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "vgpud-fake-nvml"])
            .status()
            .unwrap();
        assert!(status.success());
    }
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}

fn write(p: &Path, s: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, s).unwrap();
}

/// A PF of PCI device `device` with `vfs` VFs (vendor VFIO layout) under `root`.
fn add_gpu(root: &Path, pf: &str, device: u16, vfs: u32) {
    let devs = root.join("sys/bus/pci/devices");
    let d = devs.join(pf);
    write(&d.join("vendor"), "0x10de\n");
    write(&d.join("device"), &format!("0x{device:04x}\n"));
    write(&d.join("class"), "0x030200\n");
    write(&d.join("subsystem_vendor"), "0x10de\n");
    write(&d.join("subsystem_device"), "0x18be\n");
    write(&d.join("sriov_totalvfs"), "16\n");
    write(&d.join("sriov_numvfs"), &format!("{vfs}\n"));
    fs::create_dir_all(root.join("sys/bus/pci/drivers/nvidia")).unwrap();
    symlink("../../../bus/pci/drivers/nvidia", d.join("driver")).unwrap();
    let prefix = &pf[..pf.len() - 4];
    for i in 0..vfs {
        let vf = format!("{prefix}{:02x}.{}", (4 + i) / 8, (4 + i) % 8);
        let v = devs.join(&vf);
        write(&v.join("vendor"), "0x10de\n");
        write(&v.join("class"), "0x030200\n");
        write(&v.join("nvidia/current_vgpu_type"), "0\n");
        symlink(format!("../{pf}"), v.join("physfn")).unwrap();
        symlink("../../../bus/pci/drivers/nvidia", v.join("driver")).unwrap();
        symlink(format!("../{vf}"), d.join(format!("virtfn{i}"))).unwrap();
    }
}

fn vf(i: u32) -> String {
    format!("0000:41:{:02x}.{}", (4 + i) / 8, (4 + i) % 8)
}

struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
    _guard: std::sync::MutexGuard<'static, ()>,
}

fn host(vfs: u32) -> Host {
    let guard = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    add_gpu(&root, PF, H200, vfs);
    // an Ampere GPU, a non-NVIDIA device and a VF-less non-GPU NVIDIA function
    add_gpu(&root, "0000:81:00.0", 0x20b5, 0);
    let nic = root.join("sys/bus/pci/devices/0000:03:00.0");
    write(&nic.join("vendor"), "0x8086\n");
    write(&nic.join("class"), "0x020000\n");
    std::env::set_var("VGPUD_FAKE_NVML_ROOT", &root);
    std::env::remove_var("VGPUD_FAKE_NVML_ENFORCE_ROOT");
    Host {
        _dir: dir,
        root,
        _guard: guard,
    }
}

fn init() -> Nvml {
    Nvml::builder()
        .lib_path(lib_path().as_os_str())
        .init()
        .unwrap()
}

fn mig_on(nvml: &Nvml) {
    let d = nvml.device_by_pci_bus_id(PF).unwrap();
    assert_eq!(d.set_mig_mode(true).unwrap(), 0);
}

/// Raw GI creation (nvml-wrapper has no call): (code, handle).
fn create_gi(nvml: &Nvml, pf: &str, profile_id: u32, at: Option<u32>) -> (u32, nvmlGpuInstance_t) {
    let d = nvml.device_by_pci_bus_id(pf).unwrap();
    let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: a live device handle and a writable out pointer.
    let code = unsafe {
        match at {
            None => (nvml.lib().nvmlDeviceCreateGpuInstance.as_ref().unwrap())(
                d.handle(),
                profile_id,
                &mut gi,
            ),
            Some(start) => {
                let size = match profile_id {
                    19 | 20 => 1,
                    15 | 14 => 2,
                    9 | 5 => 4,
                    _ => 8,
                };
                let p = nvmlGpuInstancePlacement_t { start, size };
                (nvml
                    .lib()
                    .nvmlDeviceCreateGpuInstanceWithPlacement
                    .as_ref()
                    .unwrap())(d.handle(), profile_id, &p, &mut gi)
            }
        }
    };
    (code, gi)
}

fn gi_info(nvml: &Nvml, gi: nvmlGpuInstance_t) -> (u32, nvmlGpuInstanceInfo_t) {
    // SAFETY: an all-zero info is valid; the handle came from the library.
    unsafe {
        let mut info: nvmlGpuInstanceInfo_t = std::mem::zeroed();
        let code = (nvml.lib().nvmlGpuInstanceGetInfo.as_ref().unwrap())(gi, &mut info);
        (code, info)
    }
}

fn destroy_gi(nvml: &Nvml, gi: nvmlGpuInstance_t) -> u32 {
    // SAFETY: a handle from the library.
    unsafe { (nvml.lib().nvmlGpuInstanceDestroy.as_ref().unwrap())(gi) }
}

#[test]
fn init_needs_root_env() {
    let _h = host(0);
    std::env::remove_var("VGPUD_FAKE_NVML_ROOT");
    let e = Nvml::builder()
        .lib_path(lib_path().as_os_str())
        .init()
        .unwrap_err();
    assert!(matches!(e, NvmlError::DriverNotLoaded), "{e:?}");
}

#[test]
fn devices_names_pci() {
    let _h = host(2);
    let nvml = init();
    assert_eq!(nvml.device_count().unwrap(), 2);
    assert!(nvml.sys_driver_version().unwrap().starts_with("550."));
    let d = nvml.device_by_index(0).unwrap();
    assert_eq!(d.name().unwrap(), "NVIDIA H200");
    let pci = d.pci_info().unwrap();
    assert_eq!(pci.bus_id, "00000000:41:00.0");
    assert_eq!(pci.pci_device_id, 0x2335_10de);
    assert_eq!(
        nvml.device_by_index(1).unwrap().name().unwrap(),
        "NVIDIA A100 80GB PCIe"
    );
    for id in [
        "0000:41:00.0",
        "00000000:41:00.0",
        "00000000:41:00.0".to_uppercase().as_str(),
    ] {
        assert_eq!(
            nvml.device_by_pci_bus_id(id).unwrap().name().unwrap(),
            "NVIDIA H200"
        );
    }
    assert!(matches!(
        nvml.device_by_pci_bus_id("0000:42:00.0"),
        Err(NvmlError::NotFound)
    ));
    // a VF is not an NVML device
    assert!(nvml.device_by_pci_bus_id(vf(0).as_str()).is_err());
    assert!(d.uuid().unwrap().starts_with("GPU-"));
    let m = d.memory_info().unwrap();
    assert_eq!(m.total, 143771 << 20);
    assert_eq!(m.used, 0);
    assert_eq!(
        d.virtualization_mode().unwrap(),
        nvml_wrapper::enum_wrappers::device::GpuVirtualizationMode::HostVgpu
    );
    assert_eq!(
        d.vgpu_host_mode().unwrap(),
        nvml_wrapper::enum_wrappers::device::HostVgpuMode::Sriov
    );
}

#[test]
fn mig_mode_and_profiles() {
    let _h = host(0);
    let nvml = init();
    let d = nvml.device_by_pci_bus_id(PF).unwrap();
    let m = d.mig_mode().unwrap();
    assert_eq!((m.current, m.pending), (0, 0));
    // profile info by *index*: 1g double memory is index 9, ID 15
    let p = d
        .profile_info(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
        .unwrap();
    assert_eq!((p.id, p.slice_count, p.instance_count), (15, 1, 4));
    let p = d.profile_info(NVML_GPU_INSTANCE_PROFILE_7_SLICE).unwrap();
    assert_eq!(p.id, 0);
    assert!(matches!(
        d.profile_info(NVML_GPU_INSTANCE_PROFILE_6_SLICE),
        Err(NvmlError::NotSupported)
    ));
    // create with MIG off
    assert_eq!(
        create_gi(&nvml, PF, 19, None).0,
        nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
    );
    // Hopper: at once
    assert_eq!(d.set_mig_mode(true).unwrap(), nvmlReturn_enum_NVML_SUCCESS);
    let m = d.mig_mode().unwrap();
    assert_eq!((m.current, m.pending), (1, 1));
    // Ampere: pending, reset required
    let a = nvml.device_by_pci_bus_id("0000:81:00.0").unwrap();
    assert_eq!(
        a.set_mig_mode(true).unwrap(),
        nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED
    );
    let m = a.mig_mode().unwrap();
    assert_eq!((m.current, m.pending), (0, 1));
    // V struct with a wrong version
    // SAFETY: zeroed struct, live handle.
    unsafe {
        let mut info: nvmlGpuInstanceProfileInfo_v2_t = std::mem::zeroed();
        let f = nvml
            .lib()
            .nvmlDeviceGetGpuInstanceProfileInfoV
            .as_ref()
            .unwrap();
        assert_eq!(
            f(d.handle(), 0, &mut info),
            nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        );
        info.version = (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32) | (2 << 24);
        assert_eq!(f(d.handle(), 0, &mut info), 0);
        assert_eq!(info.id, 19);
        let name = std::ffi::CStr::from_ptr(info.name.as_ptr())
            .to_str()
            .unwrap();
        assert_eq!(name, "MIG 1g.18gb");
    }
    // placements raw (the wrapper's possible_placements is broken, hardware.md §6.3)
    // SAFETY: null array asks for the count; then a buffer of that count.
    unsafe {
        let f = nvml
            .lib()
            .nvmlDeviceGetGpuInstancePossiblePlacements_v2
            .as_ref()
            .unwrap();
        let mut n = 0;
        assert_eq!(f(d.handle(), 14, std::ptr::null_mut(), &mut n), 0);
        assert_eq!(n, 3);
        let mut buf = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; 3];
        let mut small = 2;
        assert_eq!(
            f(d.handle(), 14, buf.as_mut_ptr(), &mut small),
            nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert_eq!(small, 3);
        assert_eq!(f(d.handle(), 14, buf.as_mut_ptr(), &mut n), 0);
        let starts: Vec<(u32, u32)> = buf.iter().map(|p| (p.start, p.size)).collect();
        assert_eq!(starts, [(0, 2), (2, 2), (4, 2)]);
    }
}

#[test]
fn gpu_instances_lifecycle() {
    let h = host(0);
    let nvml = init();
    mig_on(&nvml);
    let d = nvml.device_by_pci_bus_id(PF).unwrap();
    let (c, gi3) = create_gi(&nvml, PF, 9, Some(0));
    assert_eq!(c, 0);
    assert_eq!(gi_info(&nvml, gi3).1.id, 1);
    // 4g refused after 3g at 0
    assert_eq!(
        create_gi(&nvml, PF, 5, None).0,
        nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES
    );
    // a start that is not a possible one
    assert_eq!(
        create_gi(&nvml, PF, 14, Some(1)).0,
        nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
    );
    // unknown profile ID
    assert_eq!(
        create_gi(&nvml, PF, 47, None).0,
        nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
    );
    let (c, gi1) = create_gi(&nvml, PF, 19, None);
    assert_eq!(c, 0);
    let (_, info) = gi_info(&nvml, gi1);
    assert_eq!(
        (
            info.id,
            info.profileId,
            info.placement.start,
            info.placement.size
        ),
        (11, 19, 4, 1)
    );
    // taken placement
    assert_eq!(
        create_gi(&nvml, PF, 19, Some(4)).0,
        nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES
    );
    // SAFETY: raw list/capacity calls with buffers of the profile's instance count.
    unsafe {
        let mut n = 0;
        let f = nvml
            .lib()
            .nvmlDeviceGetGpuInstanceRemainingCapacity
            .as_ref()
            .unwrap();
        assert_eq!(f(d.handle(), 19, &mut n), 0);
        // memory slices 5 and 6 (7 is no 1g start); 3 compute slices left
        assert_eq!(n, 2);
        let mut buf = vec![std::ptr::null_mut(); 7];
        let mut count = 0;
        let f = nvml.lib().nvmlDeviceGetGpuInstances.as_ref().unwrap();
        assert_eq!(f(d.handle(), 19, buf.as_mut_ptr(), &mut count), 0);
        assert_eq!(count, 1);
        assert_eq!(buf[0], gi1);
        let mut by_id = std::ptr::null_mut();
        let f = nvml.lib().nvmlDeviceGetGpuInstanceById.as_ref().unwrap();
        assert_eq!(f(d.handle(), 11, &mut by_id), 0);
        assert_eq!(by_id, gi1);
        assert_eq!(
            f(d.handle(), 12, &mut by_id),
            nvmlReturn_enum_NVML_ERROR_NOT_FOUND
        );
    }
    // compute instance: GI destroy IN_USE until it is gone
    // SAFETY: handles from the library, writable outputs.
    unsafe {
        let mut ci = std::ptr::null_mut();
        let f = nvml
            .lib()
            .nvmlGpuInstanceCreateComputeInstance
            .as_ref()
            .unwrap();
        assert_eq!(f(gi3, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &mut ci), 0);
        let mut cinfo: nvmlComputeInstanceInfo_t = std::mem::zeroed();
        assert_eq!(
            (nvml.lib().nvmlComputeInstanceGetInfo_v2.as_ref().unwrap())(ci, &mut cinfo),
            0
        );
        assert_eq!((cinfo.id, cinfo.placement.size), (0, 3));
        assert_eq!(cinfo.gpuInstance, gi3);
        let mut cis = vec![std::ptr::null_mut(); 1];
        let mut n = 0;
        let f = nvml
            .lib()
            .nvmlGpuInstanceGetComputeInstances
            .as_ref()
            .unwrap();
        assert_eq!(
            f(
                gi3,
                NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                cis.as_mut_ptr(),
                &mut n
            ),
            0
        );
        assert_eq!(n, 1);
        assert_eq!(destroy_gi(&nvml, gi3), nvmlReturn_enum_NVML_ERROR_IN_USE);
        assert_eq!(
            (nvml.lib().nvmlComputeInstanceDestroy.as_ref().unwrap())(ci),
            0
        );
    }
    // a vGPU on the 1g GI: IN_USE
    vgpud_sim_driver::update(&h.root, PF, |s| s.assign_vgpu(&vf(0), 19).unwrap()).unwrap();
    assert_eq!(destroy_gi(&nvml, gi1), nvmlReturn_enum_NVML_ERROR_IN_USE);
    vgpud_sim_driver::update(&h.root, PF, |s| s.release_vgpu(&vf(0))).unwrap();
    assert_eq!(destroy_gi(&nvml, gi1), 0);
    assert_eq!(destroy_gi(&nvml, gi3), 0);
    assert_eq!(
        destroy_gi(&nvml, gi3),
        nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
    );
    // MIG off again now that no GI exists; with a client it is IN_USE
    vgpud_sim_driver::update(&h.root, PF, |s| {
        s.clients.push("nvidia-persistenced".into())
    })
    .unwrap();
    assert!(matches!(d.set_mig_mode(false), Err(NvmlError::InUse)));
    vgpud_sim_driver::update(&h.root, PF, |s| s.clients.clear()).unwrap();
    d.set_mig_mode(false).unwrap();
    assert_eq!(d.mig_mode().unwrap().current, 0);
}

#[test]
fn mig_mode_refused_with_vfs_and_gis() {
    let _h = host(2);
    let nvml = init();
    let d = nvml.device_by_pci_bus_id(PF).unwrap();
    assert!(matches!(d.set_mig_mode(true), Err(NvmlError::InUse)));
}

#[test]
fn no_permission_when_enforced() {
    let _h = host(0);
    let nvml = init();
    std::env::set_var("VGPUD_FAKE_NVML_ENFORCE_ROOT", "1");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { geteuid() } == 0;
    let d = nvml.device_by_pci_bus_id(PF).unwrap();
    let r = d.set_mig_mode(true);
    std::env::remove_var("VGPUD_FAKE_NVML_ENFORCE_ROOT");
    if root {
        assert!(r.is_ok());
    } else {
        assert!(matches!(r, Err(NvmlError::NoPermission)), "{r:?}");
    }
}

extern "C" {
    fn geteuid() -> u32;
}

#[test]
fn vgpu_types_and_instances() {
    let h = host(3);
    let nvml = init();
    let d = nvml.device_by_pci_bus_id(PF).unwrap();
    let supported = d.vgpu_supported_types().unwrap();
    assert!(!supported.is_empty());
    let creatable = d.vgpu_creatable_types().unwrap();
    // MIG off: only time-sliced types
    for t in &creatable {
        assert_eq!(
            t.instance_profile_id().unwrap(),
            INVALID_GPU_INSTANCE_PROFILE_ID,
            "{}",
            t.name().unwrap()
        );
    }
    let t = creatable
        .iter()
        .find(|t| t.name().unwrap().ends_with("-141C"))
        .unwrap();
    assert_eq!(t.class_name().unwrap(), "Compute");
    assert!(t.license().unwrap().contains("vComputeServer"));
    assert_eq!(t.framebuffer_size().unwrap(), 141 * 1024 * 1024 * 1024);
    assert_eq!(t.max_instances().unwrap(), 1);
    assert_eq!(t.max_instances_per_vm().unwrap(), 1);
    assert_eq!(t.num_display_heads().unwrap(), 1);
    assert!(t.resolution(0).is_ok());
    assert!(t.resolution(1).is_err());
    let _ = t.frame_rate_limit();
    // a running time-sliced vGPU on VF 0
    let small = supported
        .iter()
        .find(|t| t.name().unwrap().ends_with("-4C"))
        .unwrap();
    let small_id = small.id();
    write(
        &h.root.join(format!(
            "sys/bus/pci/devices/{}/nvidia/current_vgpu_type",
            vf(0)
        )),
        &format!("{small_id}\n"),
    );
    let active = d.active_vgpus().unwrap();
    assert_eq!(active.len(), 1);
    let v = &active[0];
    assert_eq!(v.instance_type().unwrap().id(), small_id);
    assert_eq!(v.uuid().unwrap().len(), 36);
    assert_eq!(v.mdev_uuid().unwrap(), "");
    assert_eq!(v.gpu_instance_id().unwrap(), u32::MAX);
    assert_eq!(v.fb_usage().unwrap(), 0);
    assert_eq!(v.gpu_pci_id().unwrap(), "00000000:00:00.0");
    // wrapper leaves the placement struct's version 0: mismatch, as in nvml.h
    assert!(matches!(
        v.placement_id(),
        Err(NvmlError::UnexpectedVariant(25))
    ));
    assert_eq!(
        d.memory_info().unwrap().used,
        small.framebuffer_size().unwrap()
    );
    // equal-size mode: only the running size is creatable now
    for t in d.vgpu_creatable_types().unwrap() {
        assert_eq!(
            t.framebuffer_size().unwrap(),
            small.framebuffer_size().unwrap()
        );
    }
    // MIG on: MIG-backed types only where a free GI of their profile exists
    write(
        &h.root.join(format!(
            "sys/bus/pci/devices/{}/nvidia/current_vgpu_type",
            vf(0)
        )),
        "0\n",
    );
    vgpud_sim_driver::update(&h.root, PF, |s| {
        s.set_mig_mode(H200, true, false).unwrap();
        s.create_gpu_instance(H200, 19, None).unwrap();
    })
    .unwrap();
    let c = d.vgpu_creatable_types().unwrap();
    assert!(!c.is_empty());
    for t in &c {
        assert_eq!(
            t.instance_profile_id().unwrap(),
            19,
            "{}",
            t.name().unwrap()
        );
    }
    // the vGPU takes the GI: nothing creatable, and its GI id is reported
    let mig_type = c[0].id();
    vgpud_sim_driver::update(&h.root, PF, |s| s.assign_vgpu(&vf(1), 19).unwrap()).unwrap();
    write(
        &h.root.join(format!(
            "sys/bus/pci/devices/{}/nvidia/current_vgpu_type",
            vf(1)
        )),
        &format!("{mig_type}\n"),
    );
    assert!(d.vgpu_creatable_types().unwrap().is_empty());
    let active = d.active_vgpus().unwrap();
    assert_eq!(active[0].gpu_instance_id().unwrap(), 7);
}

#[test]
fn scheduler_and_heterogeneous() {
    use nvml_wrapper::struct_wrappers::device::{VgpuSchedulerSetParams, VgpuSchedulerSetState};
    let h = host(2);
    let nvml = init();
    let d = nvml.device_by_pci_bus_id(PF).unwrap();
    let s = d.vgpu_scheduler_state().unwrap();
    assert_eq!(
        (s.scheduler_policy, s.arr_mode),
        (NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT, 0)
    );
    let caps = d.vgpu_scheduler_capabilities().unwrap();
    assert_eq!(caps.min_time_slice, 1_000_000);
    let set = |policy, arr, avg, freq_or_slice| VgpuSchedulerSetState {
        scheduler_policy: policy,
        enable_arr_mode: arr,
        scheduler_params: VgpuSchedulerSetParams {
            avg_factor: avg,
            frequency_or_timeslice: freq_or_slice,
        },
    };
    d.set_vgpu_scheduler_state(set(
        NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE,
        NVML_VGPU_SCHEDULER_ARR_DISABLE,
        None,
        5_000_000,
    ))
    .unwrap();
    let s = d.vgpu_scheduler_state().unwrap();
    assert_eq!(s.scheduler_policy, NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE);
    // the time slice only in the log
    // SAFETY: zeroed log; live handle.
    unsafe {
        let mut log: nvmlVgpuSchedulerLog_t = std::mem::zeroed();
        assert_eq!(
            (nvml.lib().nvmlDeviceGetVgpuSchedulerLog.as_ref().unwrap())(d.handle(), &mut log),
            0
        );
        assert_eq!(log.schedulerParams.vgpuSchedData.timeslice, 5_000_000);
        assert_eq!(log.entriesCount, 0);
    }
    d.set_vgpu_scheduler_state(set(
        NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE,
        NVML_VGPU_SCHEDULER_ARR_ENABLE,
        Some(40),
        960,
    ))
    .unwrap();
    let s = d.vgpu_scheduler_state().unwrap();
    assert_eq!(s.arr_mode, NVML_VGPU_SCHEDULER_ARR_ENABLE);
    assert!(d
        .set_vgpu_scheduler_state(set(
            NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE,
            NVML_VGPU_SCHEDULER_ARR_ENABLE,
            Some(61),
            960
        ))
        .is_err());
    // heterogeneous mode, raw
    let hm = |mode| nvmlVgpuHeterogeneousMode_t {
        version: (std::mem::size_of::<nvmlVgpuHeterogeneousMode_t>() as u32) | (1 << 24),
        mode,
    };
    // SAFETY: versioned structs, live handle.
    unsafe {
        let set_f = nvml
            .lib()
            .nvmlDeviceSetVgpuHeterogeneousMode
            .as_ref()
            .unwrap();
        let get_f = nvml
            .lib()
            .nvmlDeviceGetVgpuHeterogeneousMode
            .as_ref()
            .unwrap();
        assert_eq!(set_f(d.handle(), &hm(1)), 0);
        let mut m = hm(0);
        assert_eq!(get_f(d.handle(), &mut m), 0);
        assert_eq!(m.mode, 1);
        let mut bad = nvmlVgpuHeterogeneousMode_t {
            version: 1,
            mode: 0,
        };
        assert_eq!(
            get_f(d.handle(), &mut bad),
            nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        );
    }
    // a running vGPU: scheduler set refused (NOT_SUPPORTED per nvml.h), heterogeneous IN_USE
    let id = d.vgpu_supported_types().unwrap()[0].id();
    write(
        &h.root.join(format!(
            "sys/bus/pci/devices/{}/nvidia/current_vgpu_type",
            vf(0)
        )),
        &format!("{id}\n"),
    );
    assert!(matches!(
        d.set_vgpu_scheduler_state(set(
            NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT,
            NVML_VGPU_SCHEDULER_ARR_DISABLE,
            None,
            0
        )),
        Err(NvmlError::NotSupported)
    ));
    // SAFETY: as above.
    unsafe {
        let set_f = nvml
            .lib()
            .nvmlDeviceSetVgpuHeterogeneousMode
            .as_ref()
            .unwrap();
        assert_eq!(set_f(d.handle(), &hm(0)), nvmlReturn_enum_NVML_ERROR_IN_USE);
        let mut log: nvmlVgpuSchedulerLog_t = std::mem::zeroed();
        assert_eq!(
            (nvml.lib().nvmlDeviceGetVgpuSchedulerLog.as_ref().unwrap())(d.handle(), &mut log),
            0
        );
        assert_eq!(log.entriesCount, 1);
    }
    // MIG on: the scheduler is not supported
    write(
        &h.root.join(format!(
            "sys/bus/pci/devices/{}/nvidia/current_vgpu_type",
            vf(0)
        )),
        "0\n",
    );
    vgpud_sim_driver::update(&h.root, PF, |s| {
        s.heterogeneous = false;
        s.set_mig_mode(H200, true, false).unwrap()
    })
    .unwrap();
    assert!(matches!(
        d.vgpu_scheduler_state(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d.set_vgpu_scheduler_state(set(
            NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE,
            NVML_VGPU_SCHEDULER_ARR_DISABLE,
            None,
            2_000_000
        )),
        Err(NvmlError::NotSupported)
    ));
}

#[test]
fn telemetry() {
    use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
    let h = host(1);
    let nvml = init();
    let d = nvml.device_by_pci_bus_id(PF).unwrap();
    let u = d.utilization_rates().unwrap();
    assert!(u.gpu > 0);
    vgpud_sim_driver::update(&h.root, PF, |s| {
        s.telemetry.gpu_util = 55;
        s.telemetry.mem_util = 44;
        s.telemetry.enc_util = 3;
        s.telemetry.dec_util = 4;
        s.telemetry.temperature_c = 71;
        s.telemetry.power_mw = 350_000;
        s.telemetry.ecc_corrected = 9;
        s.telemetry.ecc_uncorrected = 1;
        s.telemetry.vgpu_utilization.insert(
            vf(0),
            vgpud_sim_driver::VgpuUtilization {
                sm: 80,
                mem: 20,
                enc: 1,
                dec: 2,
            },
        );
    })
    .unwrap();
    let u = d.utilization_rates().unwrap();
    assert_eq!((u.gpu, u.memory), (55, 44));
    assert_eq!(d.encoder_utilization().unwrap().utilization, 3);
    assert_eq!(d.decoder_utilization().unwrap().utilization, 4);
    assert_eq!(d.temperature(TemperatureSensor::Gpu).unwrap(), 71);
    assert_eq!(d.power_usage().unwrap(), 350_000);
    assert_eq!(
        d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .unwrap(),
        9
    );
    assert_eq!(
        d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
            .unwrap(),
        1
    );
    // per-vGPU utilization, raw: none → NOT_FOUND; then one sample
    // SAFETY: writable outputs, a buffer of the returned count.
    unsafe {
        let f = nvml.lib().nvmlDeviceGetVgpuUtilization.as_ref().unwrap();
        let mut ty = 0;
        let mut n = 0;
        assert_eq!(
            f(d.handle(), 0, &mut ty, &mut n, std::ptr::null_mut()),
            nvmlReturn_enum_NVML_ERROR_NOT_FOUND
        );
        let id = d.vgpu_supported_types().unwrap()[0].id();
        write(
            &h.root.join(format!(
                "sys/bus/pci/devices/{}/nvidia/current_vgpu_type",
                vf(0)
            )),
            &format!("{id}\n"),
        );
        assert_eq!(f(d.handle(), 0, &mut ty, &mut n, std::ptr::null_mut()), 0);
        assert_eq!(n, 1);
        let mut buf: Vec<nvmlVgpuInstanceUtilizationSample_t> = vec![std::mem::zeroed(); 1];
        assert_eq!(f(d.handle(), 0, &mut ty, &mut n, buf.as_mut_ptr()), 0);
        assert_eq!(ty, nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT);
        assert_eq!(buf[0].smUtil.uiVal, 80);
        assert_ne!(buf[0].vgpuInstance, 0);
    }
}

#[test]
fn uninitialized_and_bad_args() {
    let _h = host(0);
    let nvml = init();
    let d = nvml.device_by_pci_bus_id(PF).unwrap();
    // SAFETY: deliberately NULL outputs, and a too-short name buffer.
    unsafe {
        let f = nvml.lib().nvmlDeviceGetMemoryInfo.as_ref().unwrap();
        assert_eq!(
            f(d.handle(), std::ptr::null_mut()),
            nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );
        let f = nvml.lib().nvmlDeviceGetName.as_ref().unwrap();
        let mut buf = [0 as std::ffi::c_char; 4];
        assert_eq!(
            f(d.handle(), buf.as_mut_ptr(), 4),
            nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );
        let f = nvml.lib().nvmlDeviceGetSupportedVgpus.as_ref().unwrap();
        let mut n = 0;
        assert_eq!(
            f(d.handle(), &mut n, std::ptr::null_mut()),
            nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert!(n > 0);
        let f = nvml.lib().nvmlDeviceGetCount_v2.as_ref().unwrap();
        let shutdown = nvml.lib().nvmlShutdown.as_ref().unwrap();
        let init = nvml.lib().nvmlInit_v2.as_ref().unwrap();
        assert_eq!(shutdown(), 0);
        let mut c = 0;
        assert_eq!(f(&mut c), nvmlReturn_enum_NVML_ERROR_UNINITIALIZED);
        assert_eq!(init(), 0);
    }
}
