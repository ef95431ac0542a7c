#![allow(clippy::unwrap_used)]

use super::*;

const H200: u16 = 0x2335;
const A100: u16 = 0x20b5;
const PF: &str = "0000:41:00.0";

fn mig_on(dev: u16) -> GpuState {
    let mut s = GpuState::default();
    s.set_mig_mode(dev, true, false).unwrap();
    s.reset();
    assert!(s.mig.current);
    s
}

fn id(dev: u16, name: &str) -> u32 {
    mig_profile_by_name(dev, name).unwrap().id
}

#[test]
fn tables() {
    for dev in [A100, 0x2330, 0x2331, H200] {
        let ps = mig_profiles(dev);
        assert_eq!(ps.len(), 7);
        let ids: Vec<u32> = ps.iter().map(|p| p.id).collect();
        assert_eq!(ids, [19, 20, 15, 14, 9, 5, 0]);
        let idx: Vec<u32> = ps.iter().map(|p| p.index).collect();
        assert_eq!(idx, [0, 7, 9, 1, 2, 3, 4]);
        for p in ps {
            assert!(p
                .starts
                .iter()
                .all(|s| s + p.memory_slices <= MEMORY_SLICES));
        }
    }
    assert!(mig_profiles(0x26b9).is_empty());
    assert_eq!(mig_profile_by_name(H200, "MIG 1g.18gb+me").unwrap().id, 20);
    assert_eq!(mig_profile_by_id(H200, 0).unwrap().name, "7g.141gb");
    assert_eq!(mig_profile_by_index(H200, 9).unwrap().name, "1g.35gb");
    assert_eq!(gpu_model(H200).unwrap().name, "NVIDIA H200");
}

#[test]
fn mig_off_or_unsupported() {
    let mut s = GpuState::default();
    assert!(matches!(
        s.create_gpu_instance(H200, 19, None),
        Err(DriverError::NotSupported(_))
    ));
    assert!(matches!(
        s.set_mig_mode(0x26b9, true, false),
        Err(DriverError::NotSupported(_))
    ));
    let mut s = mig_on(H200);
    assert!(matches!(
        s.create_gpu_instance(H200, 47, None),
        Err(DriverError::NotSupported(_))
    ));
}

#[test]
fn three_g_then_four_g_refused() {
    let mut s = mig_on(H200);
    assert_eq!(s.create_gpu_instance(H200, 9, Some(0)).unwrap(), 1);
    assert!(matches!(
        s.create_gpu_instance(H200, 5, None),
        Err(DriverError::InsufficientResources(_))
    ));
    // the other 3g fits at 4
    assert_eq!(s.create_gpu_instance(H200, 9, None).unwrap(), 2);
    assert!(matches!(
        s.create_gpu_instance(H200, 9, None),
        Err(DriverError::InsufficientResources(_))
    ));
}

#[test]
fn four_g_and_three_g() {
    let mut s = mig_on(H200);
    assert_eq!(s.create_gpu_instance(H200, 5, None).unwrap(), 1);
    assert_eq!(s.create_gpu_instance(H200, 9, None).unwrap(), 2);
    assert_eq!(s.used_compute_slices(H200), 7);
    assert!(s.create_gpu_instance(H200, 19, None).is_err());
}

#[test]
fn seven_1g_fill() {
    let mut s = mig_on(H200);
    let p = id(H200, "1g.18gb");
    let ids: Vec<u32> = (0..7)
        .map(|_| s.create_gpu_instance(H200, p, None).unwrap())
        .collect();
    assert_eq!(ids, [7, 8, 9, 10, 11, 12, 13]);
    assert!(matches!(
        s.create_gpu_instance(H200, p, None),
        Err(DriverError::InsufficientResources(_))
    ));
    assert_eq!(s.remaining_capacity(H200, p), 0);
    assert!(s.free_placements(H200, p).is_empty());
}

#[test]
fn me_only_once() {
    let mut s = mig_on(H200);
    let me = id(H200, "1g.18gb+me");
    assert_eq!(s.create_gpu_instance(H200, me, None).unwrap(), 7);
    assert!(matches!(
        s.create_gpu_instance(H200, me, None),
        Err(DriverError::InsufficientResources(_))
    ));
    // plain 1g still fits
    assert_eq!(s.create_gpu_instance(H200, 19, None).unwrap(), 8);
}

#[test]
fn requested_start() {
    let mut s = mig_on(H200);
    let p2 = id(H200, "2g.35gb");
    assert!(matches!(
        s.create_gpu_instance(H200, p2, Some(1)),
        Err(DriverError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.create_gpu_instance(H200, p2, Some(6)),
        Err(DriverError::InvalidArgument(_))
    ));
    assert_eq!(s.create_gpu_instance(H200, p2, Some(2)).unwrap(), 4);
    let gi = s.gpu_instance(4).unwrap();
    assert_eq!((gi.start, gi.size), (2, 2));
    assert!(matches!(
        s.create_gpu_instance(H200, 19, Some(3)),
        Err(DriverError::InsufficientResources(_))
    ));
    assert_eq!(s.free_placements(H200, 19), [0, 1, 4, 5, 6]);
    // 1g double memory at 6 (size 2), then the 1g at 6 is taken
    assert_eq!(s.create_gpu_instance(H200, 15, Some(6)).unwrap(), 6);
    assert_eq!(s.free_placements(H200, 19), [0, 1, 4, 5]);
    assert_eq!(s.remaining_capacity(H200, 15), 2);
}

#[test]
fn four_double_memory_1g() {
    let mut s = mig_on(A100);
    for want in [3, 4, 5, 6] {
        assert_eq!(s.create_gpu_instance(A100, 15, None).unwrap(), want);
    }
    assert!(s.create_gpu_instance(A100, 15, None).is_err());
    assert!(s.create_gpu_instance(A100, 19, None).is_err());
}

#[test]
fn seven_g() {
    let mut s = mig_on(H200);
    assert_eq!(s.remaining_capacity(H200, 0), 1);
    assert_eq!(s.create_gpu_instance(H200, 0, None).unwrap(), 0);
    for p in [19, 20, 15, 14, 9, 5, 0] {
        assert_eq!(s.remaining_capacity(H200, p), 0);
    }
}

#[test]
fn destroy_rules_and_compute_instances() {
    let mut s = mig_on(H200);
    let gi = s.create_gpu_instance(H200, 9, None).unwrap();
    let ci = s.create_compute_instance(gi, 2, H200).unwrap();
    assert_eq!(ci, 0);
    assert!(matches!(
        s.create_compute_instance(gi, 0, H200),
        Err(DriverError::InsufficientResources(_))
    ));
    assert!(matches!(
        s.create_compute_instance(gi, 4, H200),
        Err(DriverError::NotSupported(_))
    ));
    assert!(matches!(
        s.destroy_gpu_instance(gi),
        Err(DriverError::InUse(_))
    ));
    s.destroy_compute_instance(gi, ci).unwrap();
    assert!(matches!(
        s.destroy_compute_instance(gi, ci),
        Err(DriverError::NotFound(_))
    ));
    // three 1-slice CIs
    for want in 0..3 {
        assert_eq!(s.create_compute_instance(gi, 0, H200).unwrap(), want);
    }
    for c in 0..3 {
        s.destroy_compute_instance(gi, c).unwrap();
    }
    assert_eq!(s.assign_vgpu("0000:41:00.4", 9).unwrap(), gi);
    assert!(matches!(
        s.destroy_gpu_instance(gi),
        Err(DriverError::InUse(_))
    ));
    s.release_vgpu("0000:41:00.4");
    s.destroy_gpu_instance(gi).unwrap();
    assert!(matches!(
        s.destroy_gpu_instance(gi),
        Err(DriverError::NotFound(_))
    ));
}

#[test]
fn assign_lowest_free() {
    let mut s = mig_on(H200);
    assert!(matches!(
        s.assign_vgpu("0000:41:00.4", 19),
        Err(DriverError::InsufficientResources(_))
    ));
    s.create_gpu_instance(H200, 19, Some(3)).unwrap(); // id 10
    s.create_gpu_instance(H200, 19, Some(1)).unwrap(); // id 8
    assert_eq!(s.free_gpu_instances(19), [8, 10]);
    assert_eq!(s.assign_vgpu("0000:41:00.4", 19).unwrap(), 8);
    assert!(matches!(
        s.assign_vgpu("0000:41:00.4", 19),
        Err(DriverError::InUse(_))
    ));
    assert_eq!(s.assign_vgpu("0000:41:00.5", 19).unwrap(), 10);
    assert!(s.free_gpu_instances(19).is_empty());
    assert!(s.assign_vgpu("0000:41:00.6", 19).is_err());
    s.wipe_gpu_instances();
    assert!(s.gpu_instances.is_empty() && s.vgpus.is_empty());
}

#[test]
fn mig_mode_rules() {
    // Hopper: at once
    let mut s = GpuState::default();
    let m = s.set_mig_mode(H200, true, false).unwrap();
    assert!(m.current && m.pending && !m.reset_required());
    // Ampere: pending until reset
    let mut a = GpuState::default();
    let m = a.set_mig_mode(A100, true, false).unwrap();
    assert!(!m.current && m.pending && m.reset_required());
    assert!(a.create_gpu_instance(A100, 19, None).is_err());
    a.reset();
    assert!(a.mig.current && !a.mig.reset_required());
    // in use
    let mut s = mig_on(H200);
    s.clients.push("nvidia-persistenced".into());
    assert!(matches!(
        s.set_mig_mode(H200, false, false),
        Err(DriverError::InUse(_))
    ));
    s.clients.clear();
    assert!(matches!(
        s.set_mig_mode(H200, false, true),
        Err(DriverError::InUse(_))
    ));
    let gi = s.create_gpu_instance(H200, 0, None).unwrap();
    assert!(matches!(
        s.set_mig_mode(H200, false, false),
        Err(DriverError::InUse(_))
    ));
    s.destroy_gpu_instance(gi).unwrap();
    let m = s.set_mig_mode(H200, false, false).unwrap();
    assert!(!m.current && !m.pending);
    // no-op even with a client
    s.clients.push("x".into());
    assert!(s.set_mig_mode(H200, false, false).is_ok());
}

#[test]
fn scheduler_rules() {
    let mut s = GpuState::default();
    assert_eq!(s.scheduler.policy, policy::BEST_EFFORT);
    assert_eq!(s.scheduler.arr_mode, arr::DEFAULT);
    let eq = SchedulerState {
        policy: policy::EQUAL_SHARE,
        arr_mode: arr::DISABLE,
        timeslice_ms: 5,
        ..SchedulerState::default()
    };
    assert!(matches!(
        s.set_scheduler(eq, true),
        Err(DriverError::InUse(_))
    ));
    // 0 asks for the driver's default (NVML: "0 or unspecified uses default").
    s.set_scheduler(
        SchedulerState {
            timeslice_ms: 0,
            ..eq
        },
        false,
    )
    .unwrap();
    assert_eq!(s.scheduler.timeslice_ms, 2);
    s.set_scheduler(eq, false).unwrap();
    assert_eq!(s.scheduler.timeslice_ms, 5);
    let bad = SchedulerState {
        timeslice_ms: 31,
        ..eq
    };
    assert!(matches!(
        s.set_scheduler(bad, false),
        Err(DriverError::InvalidArgument(_))
    ));
    let arr_on = SchedulerState {
        policy: policy::FIXED_SHARE,
        arr_mode: arr::ENABLE,
        avg_factor: 60,
        frequency_hz: 960,
        timeslice_ms: 0,
    };
    s.set_scheduler(arr_on, false).unwrap();
    assert_eq!(s.scheduler.timeslice_ms, 5);
    assert_eq!(
        (s.scheduler.avg_factor, s.scheduler.frequency_hz),
        (60, 960)
    );
    s.heterogeneous = true;
    assert!(matches!(
        s.set_scheduler(arr_on, false),
        Err(DriverError::NotSupported(_))
    ));
    let mut m = mig_on(H200);
    assert!(matches!(
        m.set_scheduler(eq, false),
        Err(DriverError::NotSupported(_))
    ));
}

#[test]
fn storage_and_reboot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    assert_eq!(load(root, PF).unwrap(), GpuState::default());
    update(root, PF, |s| {
        s.set_mig_mode(H200, true, false).unwrap();
        s.create_gpu_instance(H200, 0, None).unwrap();
        s.heterogeneous = true;
        s.telemetry.gpu_util = 77;
    })
    .unwrap();
    let s = load(root, PF).unwrap();
    assert!(s.mig.current);
    assert_eq!(s.gpu_instances.len(), 1);
    assert_eq!(s.telemetry.gpu_util, 77);
    assert!(root.join("run/nvidia-sim/0000:41:00.0.json").is_file());
    assert!(root.join("var/lib/nvidia-sim/0000:41:00.0.json").is_file());
    // reboot
    fs::remove_dir_all(root.join("run")).unwrap();
    let s = load(root, PF).unwrap();
    assert!(s.mig.current && s.gpu_instances.is_empty() && !s.heterogeneous);
    assert_eq!(s.telemetry, Telemetry::default());

    // Ampere pending mode is applied by the reboot
    let a = "0000:81:00.0";
    let m = update(root, a, |s| s.set_mig_mode(A100, true, false))
        .unwrap()
        .unwrap();
    assert!(m.reset_required());
    assert!(!load(root, a).unwrap().mig.current);
    fs::remove_dir_all(root.join("run")).unwrap();
    let s = load(root, a).unwrap();
    assert!(s.mig.current && s.mig.pending);
}

#[test]
fn bad_files_do_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    assert!(load(root, "../etc").is_err());
    let vol = root.join("run/nvidia-sim");
    fs::create_dir_all(&vol).unwrap();
    let f = vol.join(format!("{PF}.json"));
    fs::write(&f, b"{not json").unwrap();
    assert_eq!(
        load(root, PF).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
    assert!(update(root, PF, |_| ()).is_err());
    fs::write(&f, vec![b' '; (MAX_STATE_FILE + 1) as usize]).unwrap();
    assert_eq!(
        load(root, PF).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
    fs::remove_file(&f).unwrap();
    fs::create_dir(&f).unwrap();
    assert!(load(root, PF).is_err());
    fs::remove_dir(&f).unwrap();
    // partial JSON fills defaults
    fs::write(&f, br#"{"heterogeneous": true}"#).unwrap();
    let s = load(root, PF).unwrap();
    assert!(s.heterogeneous);
    assert_eq!(s.scheduler, SchedulerState::default());
}

#[test]
fn concurrent_updates() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let root = root.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    update(&root, PF, |s| s.telemetry.ecc_corrected += 1).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(load(&root, PF).unwrap().telemetry.ecc_corrected, 160);
}
