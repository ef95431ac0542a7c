//! The real NVML backend (`gpu_control::nvml::NvmlControl`, nvml-wrapper and vgpud-nvml-raw)
//! against the fake libnvidia-ml (`crates/fake-nvml`) on a simulated two-H200 host: init and
//! GPU facts, MIG mode, GPU-instance profiles (index and ID apart, placements), creating and
//! destroying GPU instances, refusals mapped to `ControlError`, the scheduler, metrics, vGPU
//! types, and the read-only probe.

mod common;

use std::path::Path;

use common::nvml::FakeHost;
use vgpud::gpu_control::nvml::NvmlControl;
use vgpud::gpu_control::{
    probe, ControlError, GpuControl, MigProfile, Placement, SchedulerPolicy, SchedulerSetting,
};

const PROFILE: &str = "nvidia-h200";

fn open(host: &FakeHost) -> NvmlControl {
    NvmlControl::open(Some(&host.library)).expect("the fake NVML library loads")
}

/// The PCI addresses of the host's GPUs, as NVML lists them.
fn gpus(c: &NvmlControl) -> Vec<String> {
    let nvml = c.nvml();
    let n = nvml.device_count().expect("device count");
    (0..n)
        .map(|i| {
            let d = nvml.device_by_index(i).expect("device by index");
            vgpud::gpu_control::nvml::normalize_bus_id(&d.pci_info().expect("pci info").bus_id)
        })
        .collect()
}

fn first_gpu(c: &NvmlControl) -> String {
    gpus(c).into_iter().next().expect("a GPU")
}

fn profile<'a>(profiles: &'a [MigProfile], name: &str) -> &'a MigProfile {
    profiles
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("profile {name} in {profiles:#?}"))
}

#[test]
fn open_names_the_reason_when_the_library_is_missing() {
    let err = NvmlControl::open(Some(Path::new("/nonexistent/libnvidia-ml.so.1")))
        .expect_err("no library there");
    assert!(err.contains("/nonexistent/libnvidia-ml.so.1"), "{err}");
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn open_without_a_root_says_the_driver_is_not_loaded() {
    let host = FakeHost::new(PROFILE);
    std::env::remove_var(common::nvml::ROOT_ENV);
    let err = NvmlControl::open(Some(&host.library)).expect_err("no driver");
    assert!(err.contains("driver is not loaded"), "{err}");
}

#[test]
fn init_and_gpu_facts() {
    let host = FakeHost::new(PROFILE);
    let c = open(&host);
    assert!(c.availability().is_ok());
    assert!(!c.driver_version().expect("driver version").is_empty());
    let all = gpus(&c);
    assert_eq!(all.len(), 2, "{all:?}");
    for gpu in &all {
        let f = c.gpu(gpu).expect("GPU facts");
        assert_eq!(f.name, "NVIDIA H200", "{f:?}");
        assert!(f.uuid.starts_with("GPU-"), "{f:?}");
        assert!(f.memory_total > 140 * 1000 * 1000 * 1000, "{f:?}");
        assert!(f.mig_capable, "{f:?}");
        assert_eq!(f.host_vgpu_mode, "sriov", "{f:?}");
        assert_ne!(f.virtualization_mode, "unknown", "{f:?}");
        let m = c.mig_mode(gpu).expect("MIG mode");
        assert!(!m.current && !m.pending, "{m:?}");
    }
    // The 8-digit domain NVML prints is accepted too; an unknown GPU is NotFound.
    let long = format!("0000{}", all[0]);
    assert_eq!(c.gpu(&long).expect("long bus id").name, "NVIDIA H200");
    match c.gpu("0000:01:00.0") {
        Err(ControlError::NotFound { op, gpu, .. }) => {
            assert_eq!(gpu, "0000:01:00.0");
            assert!(!op.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn mig_profiles_keep_index_and_id_apart() {
    let host = FakeHost::new(PROFILE);
    let c = open(&host);
    let gpu = first_gpu(&c);
    let m = c.set_mig_mode(&gpu, true).expect("MIG on");
    assert!(m.current && m.pending, "Hopper applies at once: {m:?}");
    let profiles = c.mig_profiles(&gpu).expect("profiles");
    assert!(profiles.len() >= 7, "{profiles:#?}");
    let small = profile(&profiles, "MIG 1g.18gb");
    assert_eq!((small.index, small.id), (0, 19), "{small:?}");
    assert_eq!(small.max_instances, 7);
    assert_eq!(small.slices, 1);
    assert_eq!(small.placements.len(), 7, "{small:?}");
    assert_eq!(small.remaining, 7);
    let full = profile(&profiles, "MIG 7g.141gb");
    assert_eq!((full.index, full.id), (4, 0), "{full:?}");
    assert_eq!(full.placements, vec![Placement { start: 0, size: 8 }]);
    assert!(profiles.iter().any(|p| p.index != p.id));
    for p in &profiles {
        assert!(!p.placements.is_empty(), "{p:?}");
        assert!(p.memory_mib > 0, "{p:?}");
    }
}

#[test]
fn gpu_instances_are_made_and_destroyed() {
    let host = FakeHost::new(PROFILE);
    let c = open(&host);
    let gpu = first_gpu(&c);
    c.set_mig_mode(&gpu, true).expect("MIG on");
    assert!(c.gpu_instances(&gpu).expect("none yet").is_empty());
    let before = c.mig_profiles(&gpu).expect("profiles");
    let small = profile(&before, "MIG 1g.18gb").clone();
    let two = profile(&before, "MIG 2g.35gb").clone();

    // Where the driver chooses, with a compute instance.
    let a = c
        .create_gpu_instance(&gpu, small.id, None, true)
        .expect("create 1g.18gb");
    assert_eq!(a.profile_id, small.id);
    assert_eq!(a.compute_instances, 1, "{a:?}");
    assert!(small.placements.contains(&a.placement), "{a:?}");

    // At a placement, without a compute instance.
    let at = *two.placements.last().expect("a placement");
    let b = c
        .create_gpu_instance(&gpu, two.id, Some(at), false)
        .expect("create 2g.35gb at a placement");
    assert_eq!(b.placement, at, "{b:?}");
    assert_eq!(b.compute_instances, 0);

    let after = c.mig_profiles(&gpu).expect("profiles");
    assert!(profile(&after, "MIG 1g.18gb").remaining < small.remaining);
    assert!(profile(&after, "MIG 2g.35gb").remaining < two.remaining);
    let list = c.gpu_instances(&gpu).expect("list");
    assert_eq!(list.len(), 2, "{list:?}");
    assert!(list.contains(&a) && list.contains(&b), "{list:?}");

    c.destroy_gpu_instance(&gpu, a.id)
        .expect("destroy with its CI");
    c.destroy_gpu_instance(&gpu, b.id).expect("destroy");
    assert!(c.gpu_instances(&gpu).expect("list").is_empty());
    let again = c.mig_profiles(&gpu).expect("profiles");
    assert_eq!(profile(&again, "MIG 1g.18gb").remaining, small.remaining);
    assert_eq!(profile(&again, "MIG 2g.35gb").remaining, two.remaining);
    // MIG off again, with nothing left.
    let m = c.set_mig_mode(&gpu, false).expect("MIG off");
    assert!(!m.current && !m.pending);
}

#[test]
fn refusals_map_to_control_errors() {
    let host = FakeHost::new(PROFILE);
    let c = open(&host);
    let gpu = first_gpu(&c);
    // MIG off: no GPU instance.
    match c.create_gpu_instance(&gpu, 19, None, false) {
        Err(ControlError::NotSupported { op, gpu: g, detail }) => {
            assert_eq!(g, gpu);
            assert!(op.contains("GPU instance"), "{op}");
            assert!(detail.contains("nvmlDeviceCreateGpuInstance"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    c.set_mig_mode(&gpu, true).expect("MIG on");
    let full = c
        .create_gpu_instance(&gpu, 0, None, false)
        .expect("7g.141gb");
    // No room for a second one.
    assert!(
        matches!(
            c.create_gpu_instance(&gpu, 0, None, false),
            Err(ControlError::InsufficientResources { .. })
        ),
        "a second full instance"
    );
    // A placement the profile cannot take.
    assert!(matches!(
        c.create_gpu_instance(&gpu, 19, Some(Placement { start: 3, size: 4 }), false),
        Err(ControlError::InvalidArgument { .. })
    ));
    // MIG off while a GPU instance exists.
    assert!(matches!(
        c.set_mig_mode(&gpu, false),
        Err(ControlError::InUse { .. })
    ));
    // The scheduler under MIG.
    assert!(matches!(
        c.scheduler(&gpu),
        Err(ControlError::NotSupported { .. })
    ));
    // No such GPU instance.
    assert!(matches!(
        c.destroy_gpu_instance(&gpu, 4242),
        Err(ControlError::NotFound { .. })
    ));
    c.destroy_gpu_instance(&gpu, full.id).expect("destroy");
}

#[test]
fn scheduler_is_set_and_read_back_with_the_log_parameters() {
    let host = FakeHost::new(PROFILE);
    let c = open(&host);
    let gpu = first_gpu(&c);
    let caps = c.scheduler_capabilities(&gpu).expect("capabilities");
    assert!(
        caps.policies.contains(&SchedulerPolicy::EqualShare),
        "{caps:?}"
    );
    assert!(caps.min_timeslice_ms >= 1 && caps.max_timeslice_ms >= caps.min_timeslice_ms);
    let s = c.scheduler(&gpu).expect("state");
    assert_eq!(s.policy, SchedulerPolicy::BestEffort, "{s:?}");

    c.set_scheduler(
        &gpu,
        &SchedulerSetting {
            policy: SchedulerPolicy::EqualShare,
            arr: false,
            timeslice_ms: 5,
            ..Default::default()
        },
    )
    .expect("equal share, 5 ms");
    let s = c.scheduler(&gpu).expect("state");
    assert_eq!(s.policy, SchedulerPolicy::EqualShare, "{s:?}");
    assert!(!s.arr, "{s:?}");
    assert_eq!(
        s.timeslice_ms, 5,
        "the time slice comes from the log: {s:?}"
    );

    c.set_scheduler(
        &gpu,
        &SchedulerSetting {
            policy: SchedulerPolicy::FixedShare,
            arr: true,
            avg_factor: 40,
            frequency_hz: 960,
            ..Default::default()
        },
    )
    .expect("fixed share with ARR");
    let s = c.scheduler(&gpu).expect("state");
    assert_eq!(s.policy, SchedulerPolicy::FixedShare, "{s:?}");
    assert!(s.arr, "{s:?}");
    assert_eq!((s.avg_factor, s.frequency_hz), (40, 960), "{s:?}");

    // Out of range.
    assert!(matches!(
        c.set_scheduler(
            &gpu,
            &SchedulerSetting {
                policy: SchedulerPolicy::EqualShare,
                timeslice_ms: 50,
                ..Default::default()
            },
        ),
        Err(ControlError::InvalidArgument { .. })
    ));
}

#[test]
fn metrics_types_and_modes() {
    let host = FakeHost::new(PROFILE);
    let c = open(&host);
    let gpu = first_gpu(&c);
    vgpud_sim_driver::update(host.path(), &gpu, |s| {
        s.telemetry.gpu_util = 57;
        s.telemetry.temperature_c = 61;
        s.telemetry.ecc_corrected = 3;
    })
    .expect("telemetry");
    let m = c.metrics(&gpu).expect("metrics");
    assert_eq!(m.gpu_utilization, Some(57), "{m:?}");
    assert!(m.memory_utilization.is_some(), "{m:?}");
    assert!(m.encoder_utilization.is_some() && m.decoder_utilization.is_some());
    assert_eq!(m.temperature_c, Some(61), "{m:?}");
    assert!(m.power_mw.is_some_and(|p| p > 0), "{m:?}");
    assert_eq!(m.ecc_corrected, Some(3), "{m:?}");
    assert_eq!(m.ecc_uncorrected, Some(0), "{m:?}");
    assert!(m.memory_total.is_some_and(|t| t > 140 * 1000 * 1000 * 1000));
    assert_eq!(m.memory_used, Some(0), "no vGPU runs: {m:?}");

    assert!(!c.heterogeneous_mode(&gpu).expect("heterogeneous mode"));
    let types = c.vgpu_types(&gpu).expect("vGPU types");
    let mig_backed = types
        .iter()
        .find(|t| t.name.ends_with("H200X-1-18C"))
        .unwrap_or_else(|| panic!("H200X-1-18C in {types:#?}"));
    assert_eq!(mig_backed.gpu_instance_profile, Some(19), "{mig_backed:?}");
    assert!(
        types.iter().any(|t| t.gpu_instance_profile.is_none()),
        "time-sliced types too: {types:#?}"
    );
    assert!(c.active_vgpus(&gpu).expect("active vGPUs").is_empty());
}

#[test]
fn probe_prints_every_section_and_changes_nothing() {
    let host = FakeHost::new(PROFILE);
    let gpu;
    {
        let c = open(&host);
        gpu = first_gpu(&c);
        c.set_mig_mode(&gpu, true).expect("MIG on");
        c.create_gpu_instance(&gpu, 19, None, true).expect("a GI");
    }
    let before = host.driver_state();
    assert!(!before.is_empty(), "the driver state is stored");
    let mut out = Vec::new();
    probe::run(Some(&host.library), &mut out).expect("probe");
    let text = String::from_utf8(out).expect("UTF-8");
    for section in [
        "read-only",
        "driver version:",
        &format!("GPU {gpu}"),
        "name: NVIDIA H200",
        "uuid: GPU-",
        "memory: total",
        "virtualization mode:",
        "host vGPU mode: sriov",
        "MIG mode: current on, pending on",
        "GPU-instance profiles:",
        "index 0 id 19 \"MIG 1g.18gb\"",
        "GPU instances:",
        "profile 19 placement",
        "heterogeneous mode:",
        "scheduler state:",
        "scheduler capabilities:",
        "supported vGPU types:",
        "creatable vGPU types:",
        "active vGPUs:",
        "telemetry:",
        "temperature:",
        "failed calls:",
        // The scheduler log is refused under MIG, with its return code.
        "nvmlDeviceGetVgpuSchedulerLog: return code 3",
    ] {
        assert!(text.contains(section), "no {section:?} in:\n{text}");
    }
    assert_eq!(
        host.driver_state(),
        before,
        "the probe changed the driver state"
    );

    let mut out = Vec::new();
    probe::compare_with_simulator(Some(&host.library), &mut out).expect("compare");
    let text = String::from_utf8(out).expect("UTF-8");
    assert!(text.contains("sim: same"), "{text}");
    assert!(!text.contains("DIFFERS"), "{text}");
    assert_eq!(
        host.driver_state(),
        before,
        "the comparison changed the driver state"
    );
    eprintln!("{text}");
}

#[test]
fn active_vgpus_carry_their_utilization() {
    let host = FakeHost::new(PROFILE);
    let c = open(&host);
    let gpu = first_gpu(&c);
    // An mdev of the time-sliced H200X-4C (1420) on the PF, as the fake finds active vGPUs.
    let uuid = "1b7f0e32-5a1c-4c39-9d3e-0c1f5e2b7a10";
    let dir = host
        .path()
        .join("sys/bus/pci/devices")
        .join(&gpu)
        .join(uuid);
    std::fs::create_dir_all(&dir).expect("mdev directory");
    std::os::unix::fs::symlink("../mdev_supported_types/nvidia-1420", dir.join("mdev_type"))
        .expect("mdev_type link");
    vgpud_sim_driver::update(host.path(), &gpu, |s| {
        s.telemetry.vgpu_utilization.insert(
            uuid.to_string(),
            vgpud_sim_driver::VgpuUtilization {
                sm: 42,
                mem: 17,
                enc: 5,
                dec: 2,
            },
        );
    })
    .expect("vGPU utilization");
    let list = c.active_vgpus(&gpu).expect("active vGPUs");
    assert_eq!(list.len(), 1, "{list:?}");
    let v = &list[0];
    assert_eq!(v.type_id, 1420, "{v:?}");
    assert_eq!(v.mdev_uuid, uuid, "{v:?}");
    assert_eq!(v.gpu_instance_id, None, "time-sliced: {v:?}");
    assert_eq!(v.pci_address, "", "no guest driver yet: {v:?}");
    let u = v.utilization.expect("a sample");
    assert_eq!(
        (u.gpu, u.memory, u.encoder, u.decoder),
        (42, 17, 5, 2),
        "{v:?}"
    );
}
