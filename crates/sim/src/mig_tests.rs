//! Tests of the Hopper profiles and of MIG on the simulated vendor-VFIO driver: the creatable
//! lists follow the simulated driver's MIG mode and GPU instances (also when those change with
//! no sysfs write), a MIG-backed type takes and gives back a GPU instance, `sriov-manage -e`
//! wipes the GPU instances, and heterogeneous mode lives in the simulated driver's state.

use std::fs;

use nix::errno::Errno;
use vgpud_sim_driver::{self as driver, GpuState};

use super::fsx::crash;
use super::pci_tests::{dev, sriov_manage, vfs_of, write};
use super::tests::{e, host};
use super::*;

const H200_0: &str = "0000:49:00.0";
const H200_1: &str = "0000:c9:00.0";
const H200_DEVICE: u16 = 0x2335;
/// GI profile ids of the H200 (hardware.md §3.2: as H100's).
const GI_1G_18GB: u32 = 19;
const GI_2G_35GB: u32 = 14;

/// H200X ids: 1-18C, 2-35C, 4C (time-sliced), 141C (time-sliced).
const T_1_18C: u32 = 1414;
const T_2_35C: u32 = 1416;
const T_4C: u32 = 1420;

/// `creatable_vgpu_types` of a VF read as vgpud reads it (through [`SimHost::read_attr`], so the
/// simulator computes it first): the ids listed.
fn listed(host: &SimHost, vf: &str) -> Vec<u32> {
    let text = host
        .read_attr(&dev(host, vf).join("nvidia/creatable_vgpu_types"))
        .expect("read");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("ID    : vGPU Name"));
    lines
        .map(|l| {
            let (id, name) = l.split_once(" : ").expect("line");
            assert!(name.starts_with("NVIDIA H200X-"), "{l}");
            id.trim().parse().expect("id")
        })
        .collect()
}

fn set_type(host: &SimHost, vf: &str, value: &str) -> Result<(), Option<i32>> {
    write(
        host,
        &format!("bus/pci/devices/{vf}/nvidia/current_vgpu_type"),
        value,
    )
}

fn state(host: &SimHost, pf: &str) -> GpuState {
    driver::load(host.root(), pf).expect("load")
}

fn update<T>(host: &SimHost, pf: &str, f: impl FnOnce(&mut GpuState) -> T) -> T {
    driver::update(host.root(), pf, f).expect("update")
}

fn mig_on(host: &SimHost, pf: &str) {
    let m = update(host, pf, |s| s.set_mig_mode(H200_DEVICE, true, false)).expect("MIG on");
    assert!(m.current, "Hopper: at once");
}

fn create_gi(host: &SimHost, pf: &str, profile: u32) -> u32 {
    update(host, pf, |s| {
        s.create_gpu_instance(H200_DEVICE, profile, None)
    })
    .expect("GI")
}

fn nvidia_smi(host: &SimHost, args: &[&str]) -> ToolOutput {
    host.run_tool(&host.root().join("usr/bin/nvidia-smi"), args)
        .expect("run")
}

#[test]
fn mig_on_without_gpu_instances_offers_nothing() {
    let (_dir, host) = host("nvidia-h200");
    mig_on(&host, H200_0);
    assert_eq!(sriov_manage(&host, &["-e", H200_0]).status, 0);
    let vfs = vfs_of("49");
    for vf in &vfs {
        assert!(listed(&host, vf).is_empty(), "{vf}");
    }
    assert_eq!(
        set_type(&host, &vfs[0], &T_1_18C.to_string()),
        e(Errno::EIO)
    );
    assert_eq!(
        set_type(&host, &vfs[0], &T_4C.to_string()),
        e(Errno::EIO),
        "time-sliced under MIG"
    );
    assert!(state(&host, H200_0).vgpus.is_empty());
    // The other GPU has MIG off: time-sliced types only.
    assert_eq!(sriov_manage(&host, &["-e", H200_1]).status, 0);
    let other = listed(&host, &vfs_of("c9")[0]);
    assert_eq!(other, (1420..=1428).collect::<Vec<_>>());
    assert_eq!(
        set_type(&host, &vfs_of("c9")[0], &T_1_18C.to_string()),
        e(Errno::EIO),
        "MIG-backed with MIG off"
    );
}

#[test]
fn gpu_instances_made_through_the_driver_show_on_every_free_vf() {
    let (_dir, host) = host("nvidia-h200");
    mig_on(&host, H200_0);
    assert_eq!(sriov_manage(&host, &["-e", H200_0]).status, 0);
    let vfs = vfs_of("49");
    // A GPU instance made the NVML way: no sysfs write, yet the next read lists its type.
    let gi = create_gi(&host, H200_0, GI_1G_18GB);
    for vf in &vfs {
        assert_eq!(listed(&host, vf), vec![T_1_18C], "{vf}");
    }
    let second = create_gi(&host, H200_0, GI_1G_18GB);
    let big = create_gi(&host, H200_0, GI_2G_35GB);
    assert_eq!(listed(&host, &vfs[7]), vec![T_1_18C, T_2_35C]);
    // Setting the type: the driver picks the free GI with the lowest id.
    set_type(&host, &vfs[0], &T_1_18C.to_string()).expect("1-18C");
    let lowest = gi.min(second);
    assert_eq!(
        state(&host, H200_0).vgpus.get(&vfs[0]).copied(),
        Some(lowest)
    );
    assert_eq!(
        fs::read_to_string(dev(&host, &vfs[0]).join("nvidia/gpu_instance_id")).expect("gi"),
        format!("{lowest}\n")
    );
    assert!(listed(&host, &vfs[0]).is_empty(), "the VF has its vGPU");
    assert_eq!(listed(&host, &vfs[1]), vec![T_1_18C, T_2_35C]);
    set_type(&host, &vfs[1], &T_1_18C.to_string()).expect("the second 1-18C");
    // No free 1g GI left: the type is gone from every free VF, and a write fails.
    for vf in &vfs[2..] {
        assert_eq!(listed(&host, vf), vec![T_2_35C], "{vf}");
    }
    assert_eq!(
        set_type(&host, &vfs[2], &T_1_18C.to_string()),
        e(Errno::EIO)
    );
    set_type(&host, &vfs[2], &T_2_35C.to_string()).expect("2-35C");
    assert_eq!(state(&host, H200_0).vgpus.get(&vfs[2]).copied(), Some(big));
    for vf in &vfs[3..] {
        assert!(listed(&host, vf).is_empty(), "{vf}");
    }
    // A GI with a vGPU cannot be destroyed; releasing the type gives the GI back.
    assert!(update(&host, H200_0, |s| s.destroy_gpu_instance(big)).is_err());
    set_type(&host, &vfs[0], "0").expect("release");
    assert!(!dev(&host, &vfs[0]).join("nvidia/gpu_instance_id").exists());
    assert_eq!(state(&host, H200_0).vgpus.len(), 2);
    assert_eq!(listed(&host, &vfs[5]), vec![T_1_18C]);
    assert_eq!(listed(&host, &vfs[0]), vec![T_1_18C]);
    // A GI destroyed the NVML way disappears from the lists at the next read.
    set_type(&host, &vfs[2], "0").expect("release 2-35C");
    assert_eq!(listed(&host, &vfs[5]), vec![T_1_18C, T_2_35C]);
    update(&host, H200_0, |s| s.destroy_gpu_instance(big)).expect("destroy");
    assert_eq!(listed(&host, &vfs[5]), vec![T_1_18C]);
}

#[test]
fn sriov_manage_enable_wipes_the_gpu_instances() {
    let (_dir, host) = host("nvidia-h200");
    mig_on(&host, H200_0);
    create_gi(&host, H200_0, GI_1G_18GB);
    create_gi(&host, H200_0, GI_2G_35GB);
    assert_eq!(state(&host, H200_0).gpu_instances.len(), 2);
    assert_eq!(sriov_manage(&host, &["-e", H200_0]).status, 0);
    let s = state(&host, H200_0);
    assert!(s.gpu_instances.is_empty());
    assert!(s.mig.current, "the MIG mode stays");
    assert!(listed(&host, &vfs_of("49")[3]).is_empty());
    // GIs made after enablement are kept by an `-e` that finds the VFs enabled already.
    create_gi(&host, H200_0, GI_1G_18GB);
    let out = sriov_manage(&host, &["-e", H200_0]);
    assert!(out.stdout.contains("already has VFs enabled"), "{out:?}");
    assert_eq!(state(&host, H200_0).gpu_instances.len(), 1);
    // Disable and enable again: gone.
    assert_eq!(sriov_manage(&host, &["-d", H200_0]).status, 0);
    assert_eq!(sriov_manage(&host, &["-e", H200_0]).status, 0);
    assert!(state(&host, H200_0).gpu_instances.is_empty());
    // The other GPU's are its own.
    mig_on(&host, H200_1);
    create_gi(&host, H200_1, GI_1G_18GB);
    assert_eq!(sriov_manage(&host, &["-e", H200_0]).status, 0);
    assert_eq!(state(&host, H200_1).gpu_instances.len(), 1);
}

#[test]
fn heterogeneous_mode_lives_in_the_driver_state() {
    let (dir, host) = host("nvidia-h200");
    let shm = |gpu: &str, on: &str| nvidia_smi(&host, &["vgpu", "-i", gpu, "-shm", on]);
    assert_eq!(sriov_manage(&host, &["-e", H200_0]).status, 0);
    let out = shm("00000000:49:00.0", "1");
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(state(&host, H200_0).heterogeneous);
    assert!(!state(&host, H200_1).heterogeneous);
    assert!(!dir
        .path()
        .join("run/vgpud-simulator/nvidia-heterogeneous")
        .exists());
    // The mode set the NVML way (the fake library) is what the lists follow too: off again,
    // equal size: after a 4C only 4C is offered.
    let vfs = vfs_of("49");
    set_type(&host, &vfs[0], &T_4C.to_string()).expect("4C");
    assert!(
        listed(&host, &vfs[1]).len() > 1,
        "mixed sizes in heterogeneous mode"
    );
    set_type(&host, &vfs[0], "0").expect("release");
    update(&host, H200_0, |s| s.set_heterogeneous(false, false)).expect("off");
    set_type(&host, &vfs[0], &T_4C.to_string()).expect("4C");
    assert_eq!(listed(&host, &vfs[1]), vec![T_4C]);
    set_type(&host, &vfs[0], "0").expect("release");
    assert_eq!(shm("0000:49:00.0", "1").status, 0);
    assert!(state(&host, H200_0).heterogeneous);
    assert_eq!(shm("0000:49:00.0", "0").status, 0);
    assert!(!state(&host, H200_0).heterogeneous);
    assert_eq!(shm("0000:49:00.0", "1").status, 0);
    // sriov-manage resets it.
    assert_eq!(sriov_manage(&host, &["-d", H200_0]).status, 0);
    assert!(!state(&host, H200_0).heterogeneous);
    // Not with MIG on: the driver refuses.
    mig_on(&host, H200_0);
    assert_eq!(sriov_manage(&host, &["-e", H200_0]).status, 0);
    let out = shm("0000:49:00.0", "1");
    assert_eq!(out.status, 3, "{out:?}");
    assert!(!state(&host, H200_0).heterogeneous);
    // Turning off a mode never set leaves no driver state behind on a GPU without any.
    assert_eq!(sriov_manage(&host, &["-e", H200_1]).status, 0);
    assert_eq!(shm("0000:c9:00.0", "0").status, 0);
    assert!(!dir.path().join("run/nvidia-sim/0000:c9:00.0.json").exists());
}

#[test]
fn reads_of_other_gpus_leave_the_driver_state_alone() {
    // An L40S host never asked about MIG: reading its lists creates no driver state.
    let (dir, host) = host("nvidia-l40s");
    assert_eq!(sriov_manage(&host, &["-e", "0000:41:00.0"]).status, 0);
    let vf = &vfs_of("41")[0];
    let text = host
        .read_attr(&dev(&host, vf).join("nvidia/creatable_vgpu_types"))
        .expect("read");
    assert_eq!(text.lines().count(), 24);
    assert!(!dir.path().join("run/nvidia-sim").exists());
    assert!(!dir.path().join("var/lib/nvidia-sim").exists());
    // A missing list reads as missing.
    let gone = dev(&host, "0000:41:00.0").join("nvidia/creatable_vgpu_types");
    assert!(host.read_attr_opt(&gone).expect("opt").is_none());
}

#[test]
fn a_killed_mig_backed_set_gives_its_gpu_instance_back() {
    let (_dir, host) = host("nvidia-h200");
    mig_on(&host, H200_0);
    assert_eq!(sriov_manage(&host, &["-e", H200_0]).status, 0);
    create_gi(&host, H200_0, GI_1G_18GB);
    let vfs = vfs_of("49");
    let vf = vfs[4].as_str();
    let sim = Simulator::new();
    let mut killed = 0;
    for k in 0.. {
        crash::arm(k);
        let result = set_type(&host, vf, &T_1_18C.to_string());
        let died = crash::disarm();
        if !died {
            result.expect("the set with nobody killed");
            break;
        }
        killed += 1;
        sim.recover(host.root()).expect("recover");
        // Undone: no type, no assignment, the GI free for every VF.
        assert_eq!(
            fs::read_to_string(dev(&host, vf).join("nvidia/current_vgpu_type")).expect("type"),
            "0\n",
            "killed after {k}"
        );
        assert!(state(&host, H200_0).vgpus.is_empty(), "killed after {k}");
        assert!(!dev(&host, vf).join("nvidia/gpu_instance_id").exists());
        assert_eq!(listed(&host, &vfs[9]), vec![T_1_18C], "killed after {k}");
    }
    assert!(killed > 3, "only {killed} kills");
    assert_eq!(state(&host, H200_0).vgpus.get(vf).copied(), Some(7));
    // A killed release is completed, the GI given back.
    for k in 0.. {
        crash::arm(k);
        let result = set_type(&host, vf, "0");
        let died = crash::disarm();
        if !died {
            result.expect("the release with nobody killed");
            break;
        }
        sim.recover(host.root()).expect("recover");
        let now =
            fs::read_to_string(dev(&host, vf).join("nvidia/current_vgpu_type")).expect("type");
        if now == "0\n" {
            assert!(state(&host, H200_0).vgpus.is_empty(), "killed after {k}");
        } else {
            // Killed before the journal: nothing happened.
            assert_eq!(state(&host, H200_0).vgpus.len(), 1, "killed after {k}");
            continue;
        }
        set_type(&host, vf, &T_1_18C.to_string()).expect("set again");
    }
    assert!(state(&host, H200_0).vgpus.is_empty());
    assert_eq!(listed(&host, vf), vec![T_1_18C]);
}
