//! MIG, MIG-backed vGPUs, the vGPU scheduler and telemetry end to end: a real dbus-daemon, a
//! real vgpud on a simulated H200 host, and the real nvml-wrapper path inside vgpud loading
//! the workspace's fake libnvidia-ml (crates/fake-nvml). Driven by busctl, gdbus and zbus.

mod common;

use std::time::Duration;

use common::daemon::Daemon;
use common::nvml::fake_library;
use common::proxy::{bool_opts, error_message, error_name, gpu_proxy, opts};
use common::setup::Setup;
use futures_util::StreamExt;
use zbus::Variant;

const H200: &[&str] = &["nvidia-h200"];
/// The H200's PCI device id in the simulator (crates/catalog, assumed).
const H200_DEVICE: u16 = 0x2335;

/// A simulated H200 host with vgpud using the fake NVML library.
async fn h200() -> Setup {
    h200_with(&[]).await
}

/// [`h200`] with more vgpud arguments.
async fn h200_with(args: &[&str]) -> Setup {
    let lib = fake_library().to_string_lossy().into_owned();
    let mut all = vec!["--nvml-library", lib.as_str()];
    all.extend_from_slice(args);
    Setup::with_args(H200, &all).await
}

async fn restart_with_nvml(s: &mut Setup) {
    if s.daemon.is_running() {
        s.daemon.stop();
    }
    let lib = fake_library().to_string_lossy().into_owned();
    s.daemon = Daemon::start_args(&s.bus, &s.host, &["--nvml-library", &lib]).await;
}

/// The H200 GPUs, by address.
async fn h200_gpus(s: &Setup) -> Vec<String> {
    let gpus: Vec<String> = s
        .manager()
        .await
        .list_gpus()
        .await
        .expect("ListGpus")
        .into_iter()
        .filter(|g| g.1.contains("H200"))
        .map(|g| g.0)
        .collect();
    assert_eq!(gpus.len(), 2, "the profile has two H200");
    gpus
}

/// The NVIDIA control object's proxy.
async fn nvidia(s: &Setup) -> common::proxy::NvidiaProxy<'static> {
    common::proxy::NvidiaProxy::new(&s.conn)
        .await
        .expect("nvidia proxy")
}

/// `busctl call` on `/org/vgpud1/nvidia`; the reply's `data`, or the error text.
fn busctl_nvidia(s: &Setup, method: &str, args: &[&str]) -> Result<serde_json::Value, String> {
    s.bus
        .busctl_call("/org/vgpud1/nvidia", "org.vgpud1.Nvidia", method, args)
        .map(|v| v["data"].clone())
}

fn u32_of(v: &zbus::OwnedVariant) -> u32 {
    u32::try_from(v).expect("a u32")
}

#[tokio::test]
async fn a_mig_layout_is_made_and_refused_through_busctl() {
    let s = h200().await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    assert_eq!(n.nvml().await.expect("Nvml"), "available");
    let pf = h200_gpus(&s).await[0].clone();
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert_eq!(gpu.mig_mode().await.expect("MigMode"), (false, false));

    // busctl, a client we did not write: MIG on.
    let on = busctl_nvidia(&s, "SetMigMode", &["sba{sv}", &pf, "true", "0"]).expect("SetMigMode");
    assert_eq!(on, serde_json::json!([true, true]));
    assert_eq!(gpu.mig_mode().await.expect("MigMode"), (true, true));

    // Profiles: IDs are what creates take, not the NVML indexes.
    let profiles = n.list_mig_profiles(&pf).await.expect("ListMigProfiles");
    let one = profiles.iter().find(|p| p.2 == "1g.18gb").expect("1g.18gb");
    assert_eq!((one.0, one.1), (19, 0), "1g.18gb is ID 19 at index 0");
    assert_eq!(one.5, 7, "seven 1g instances fit");
    assert_eq!(one.7.len(), 7, "seven placements");
    let three = profiles.iter().find(|p| p.2 == "3g.71gb").expect("3g.71gb");
    assert_eq!(three.0, 9);
    assert_ne!(three.0, three.1, "profile ID and index differ");
    assert_eq!(three.7, vec![(0, 4), (4, 4)]);

    // gdbus, another client: a 3g instance at placement 0.
    let out = s
        .bus
        .gdbus_call_on(
            "/org/vgpud1/nvidia",
            "org.vgpud1.Nvidia.CreateGpuInstance",
            &[&pf, "3g.71gb", "{'placement': <uint32 0>}"],
        )
        .expect("CreateGpuInstance");
    let id: u32 = out
        .trim()
        .trim_start_matches("(uint32 ")
        .trim_end_matches(",)")
        .parse()
        .unwrap_or_else(|_| panic!("an id in {out:?}"));
    let instances = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(instances.len(), 1);
    assert_eq!(
        (
            instances[0].0,
            instances[0].1,
            instances[0].2.as_str(),
            instances[0].3,
            instances[0].4
        ),
        (id, 9, "3g.71gb", 0, 4)
    );
    assert_eq!(instances[0].5, "", "no device uses it");

    // The 4g profile needs slices 0-3: no room, named.
    let e = n
        .create_gpu_instance(&pf, "4g.71gb", opts(&[]))
        .await
        .expect_err("no room for 4g");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NoCapacity", "{e}");
    // A placement that is taken names the instance in the way.
    let e = n
        .create_gpu_instance(&pf, "1g.18gb", placement(2))
        .await
        .expect_err("taken");
    assert!(
        error_message(&e).contains(&format!("GPU instance {id}")),
        "{e}"
    );
    // A placement the profile does not have.
    let e = n
        .create_gpu_instance(&pf, "3g.71gb", placement(2))
        .await
        .expect_err("no such placement");
    assert_eq!(error_name(&e), "org.vgpud1.Error.InvalidArgument", "{e}");
    // Unknown profile.
    let e = n
        .create_gpu_instance(&pf, "9g.1tb", opts(&[]))
        .await
        .expect_err("unknown");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NotFound", "{e}");

    // MIG off while an instance exists: Busy, with the reason.
    let e = n
        .set_mig_mode(&pf, false, opts(&[]))
        .await
        .expect_err("instances exist");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Busy", "{e}");
    assert!(error_message(&e).contains("GPU instances"), "{e}");

    n.destroy_gpu_instance(&pf, id, opts(&[]))
        .await
        .expect("DestroyGpuInstance");
    assert!(gpu.gpu_instances().await.expect("GpuInstances").is_empty());
    let e = n
        .destroy_gpu_instance(&pf, id, opts(&[]))
        .await
        .expect_err("gone");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NotFound", "{e}");

    // MIG mode changes are refused while VFs are on (sriov-manage).
    n.set_mig_mode(&pf, false, opts(&[]))
        .await
        .expect("MIG off");
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs on");
    let e = n
        .set_mig_mode(&pf, true, opts(&[]))
        .await
        .expect_err("VFs on");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Busy", "{e}");
    assert!(error_message(&e).contains("VFs"), "{e}");
}

fn placement(start: u32) -> std::collections::HashMap<&'static str, Variant<'static>> {
    [("placement", Variant::from(start))].into_iter().collect()
}

#[tokio::test]
async fn a_mig_backed_vgpu_gets_an_instance_and_gives_it_back() {
    let s = h200().await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    let gpu = gpu_proxy(&s.conn, &pf).await;
    n.set_mig_mode(&pf, true, opts(&[])).await.expect("MIG on");
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs on");

    // Capacity counts what free placements allow: seven 1g instances.
    let parent = opts(&[("parent", pf.as_str())]);
    assert_eq!(
        m.get_capacity("H200X-1-18C", parent.clone())
            .await
            .expect("GetCapacity"),
        7
    );
    // Without instances and without create_instance, no room, and why.
    let e = m
        .create_device(
            "H200X-1-18C",
            [
                ("parent", Variant::from(pf.as_str())),
                ("create_instance", Variant::from(false)),
            ]
            .into_iter()
            .collect(),
        )
        .await
        .expect_err("no instance");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NoCapacity", "{e}");
    assert!(error_message(&e).contains("1g.18gb"), "{e}");

    // busctl CreateDevice: the instance is made on demand.
    let uuid = s
        .busctl_create("H200X-1-18C", &[("parent", &pf)])
        .expect("CreateDevice");
    let instances = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert_eq!(instances[0].2, "1g.18gb");
    assert_eq!(instances[0].5, uuid, "the instance names its device");
    assert_eq!(
        m.get_capacity("H200X-1-18C", parent.clone())
            .await
            .expect("GetCapacity"),
        6
    );
    // The instance a device uses is never destroyed.
    let e = n
        .destroy_gpu_instance(&pf, instances[0].0, opts(&[]))
        .await
        .expect_err("in use");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Busy", "{e}");
    assert!(error_message(&e).contains(&uuid), "{e}");
    // The device's telemetry comes from NVML's vGPU instance.
    let metrics = n.get_metrics(&uuid).await.expect("GetMetrics of a vGPU");
    assert_eq!(u32_of(&metrics["gpu_instance"]), instances[0].0);
    assert_eq!(u32_of(&metrics["type_id"]), 1414);

    // A second one gets its own instance; a whole-GPU 7g no longer fits.
    let second = s
        .busctl_create("H200X-1-18C", &[("parent", &pf)])
        .expect("CreateDevice");
    assert_eq!(gpu.gpu_instances().await.expect("GpuInstances").len(), 2);
    let e = m
        .create_device("H200X-7-141C", parent.clone())
        .await
        .expect_err("no room for 7g");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NoCapacity", "{e}");

    // Removing the device destroys the instance vgpud made for it.
    m.remove_device(&uuid, opts(&[])).await.expect("remove");
    let left = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].5, second);
    m.remove_device(&second, opts(&[])).await.expect("remove");
    assert!(gpu.gpu_instances().await.expect("GpuInstances").is_empty());
    assert_eq!(
        m.get_capacity("H200X-7-141C", parent)
            .await
            .expect("GetCapacity"),
        1
    );
}

#[tokio::test]
async fn the_scheduler_is_set_now_or_for_the_next_driver_load() {
    let s = h200().await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    let gpu = gpu_proxy(&s.conn, &pf).await;
    let sched = gpu.scheduler().await.expect("Scheduler");
    assert_eq!(
        String::try_from(sched["policy"].clone()).expect("policy"),
        "best-effort"
    );
    // busctl: equal share with a 3 ms slice, persistent.
    let out = busctl_nvidia(
        &s,
        "SetScheduler",
        &[
            "sa{sv}",
            &pf,
            "2",
            "policy",
            "s",
            "equal-share",
            "timeslice_ms",
            "u",
            "3",
        ],
    )
    .expect("SetScheduler");
    let result = &out[0];
    assert_eq!(result["applied"]["data"], serde_json::json!(true), "{out}");
    assert_eq!(
        result["rm_pvmrl"]["data"],
        serde_json::json!(0x0003_0001),
        "{out}"
    );
    let sched = gpu.scheduler().await.expect("Scheduler");
    assert_eq!(
        String::try_from(sched["policy"].clone()).expect("policy"),
        "equal-share"
    );
    assert_eq!(u32_of(&sched["timeslice_ms"]), 3);
    let conf = std::fs::read_to_string(s.host.path("etc/modprobe.d/vgpud-scheduler.conf"))
        .expect("modprobe.d file");
    assert!(
        conf.contains(&format!(
            "options nvidia NVreg_RegistryDwordsPerDevice=\"pci={pf};RmPVMRL=0x00030001\""
        )),
        "{conf}"
    );

    // Out of the driver's range.
    let e = n
        .set_scheduler(
            &pf,
            [
                ("policy", Variant::from("equal-share")),
                ("timeslice_ms", Variant::from(31_u32)),
            ]
            .into_iter()
            .collect(),
        )
        .await
        .expect_err("31 ms");
    assert_eq!(error_name(&e), "org.vgpud1.Error.InvalidArgument", "{e}");

    // With a vGPU running the driver refuses: Busy, naming it; runtime false records it.
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs on");
    let uuid = s
        .busctl_create("H200X-4C", &[("parent", &pf)])
        .expect("CreateDevice");
    let fixed = |runtime: bool| -> std::collections::HashMap<&str, Variant<'_>> {
        [
            ("policy", Variant::from("fixed-share")),
            ("timeslice_ms", Variant::from(24_u32)),
            ("runtime", Variant::from(runtime)),
        ]
        .into_iter()
        .collect()
    };
    let e = n
        .set_scheduler(&pf, fixed(true))
        .await
        .expect_err("running");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Busy", "{e}");
    assert!(error_message(&e).contains(&uuid), "{e}");
    let later = n.set_scheduler(&pf, fixed(false)).await.expect("next load");
    assert!(!bool::try_from(later["applied"].clone()).expect("applied"));
    let conf = std::fs::read_to_string(s.host.path("etc/modprobe.d/vgpud-scheduler.conf"))
        .expect("modprobe.d file");
    assert!(conf.contains("RmPVMRL=0x00180011"), "{conf}");

    // Neither now nor at the next load: nothing to do.
    let nowhere: std::collections::HashMap<&str, Variant<'_>> = [
        ("policy", Variant::from("equal-share")),
        ("runtime", Variant::from(false)),
        ("persistent", Variant::from(false)),
    ]
    .into_iter()
    .collect();
    let e = n
        .set_scheduler(&pf, nowhere)
        .await
        .expect_err("nothing to do");
    assert_eq!(error_name(&e), "org.vgpud1.Error.InvalidArgument", "{e}");
    assert!(error_message(&e).contains("nothing to do"), "{e}");

    // In mixed-size mode the driver offers no fixed share: vgpud refuses it in its own words
    // before asking the driver (which would refuse too); equal share still goes, at the
    // driver's default time slice (none given: 0, which NVML takes as "the default").
    let other = h200_gpus(&s).await[1].clone();
    m.set_vf_count(&other, 32, opts(&[])).await.expect("VFs on");
    m.set_heterogeneous_mode(&other, true, opts(&[]))
        .await
        .expect("mixed-size on");
    let e = n
        .set_scheduler(&other, fixed(true))
        .await
        .expect_err("fixed share in mixed-size mode");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NotSupported", "{e}");
    assert!(
        error_message(&e).contains("where the driver offers only best-effort and equal-share"),
        "{e}"
    );
    let equal: std::collections::HashMap<&str, Variant<'_>> =
        [("policy", Variant::from("equal-share"))]
            .into_iter()
            .collect();
    let r = n
        .set_scheduler(&other, equal)
        .await
        .expect("equal share in mixed-size mode");
    assert!(bool::try_from(r["applied"].clone()).expect("applied"));
    m.set_heterogeneous_mode(&other, false, opts(&[]))
        .await
        .expect("mixed-size off");
    m.set_vf_count(&other, 0, opts(&[])).await.expect("VFs off");

    // Under MIG there is no time-slice scheduler.
    n.set_mig_mode(&other, true, opts(&[]))
        .await
        .expect("MIG on");
    let e = n.set_scheduler(&other, fixed(true)).await.expect_err("MIG");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NotSupported", "{e}");
}

/// An H200 host whose first GPU's scheduler vgpud recorded as equal share with 5 ms slices
/// (no ARR), rebooted with vgpud stopped: the driver is back at best effort. Returns the
/// GPU's address.
async fn equal_share_recorded_then_rebooted() -> (Setup, String) {
    let mut s = h200().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    let equal: std::collections::HashMap<&str, Variant<'_>> = [
        ("policy", Variant::from("equal-share")),
        ("timeslice_ms", Variant::from(5_u32)),
    ]
    .into_iter()
    .collect();
    n.set_scheduler(&pf, equal).await.expect("SetScheduler");
    drop(n);
    s.daemon.stop();
    s.host.reboot(H200);
    (s, pf)
}

/// Starts vgpud again (with the fake NVML) and checks that GPU `pf`'s scheduler is the one
/// [`equal_share_recorded_then_rebooted`] recorded; returns the Scheduler property.
async fn restart_expecting_equal_share_of_5_ms(
    s: &mut Setup,
    pf: &str,
) -> std::collections::HashMap<String, zbus::OwnedVariant> {
    restart_with_nvml(s).await;
    let sched = gpu_proxy(&s.conn, pf)
        .await
        .scheduler()
        .await
        .expect("Scheduler");
    assert_eq!(
        String::try_from(sched["policy"].clone()).expect("policy"),
        "equal-share",
        "{sched:?}\n{}",
        s.daemon.log_text()
    );
    assert_eq!(u32_of(&sched["timeslice_ms"]), 5, "{sched:?}");
    sched
}

#[tokio::test]
async fn a_persistent_scheduler_is_set_again_after_a_reboot() {
    // The simulated driver loads without vgpud's modprobe.d file (as a driver loaded by hand
    // would), at best effort: vgpud sets the recorded scheduler again at start.
    let (mut s, pf) = equal_share_recorded_then_rebooted().await;
    restart_expecting_equal_share_of_5_ms(&mut s, &pf).await;
}

/// Sets a GPU's vGPU scheduler through NVML's C API from Python's ctypes, as an operator's
/// boot script would, behind vgpud's back: equal share with ARR (averaging factor 60,
/// 960 Hz). NVML's constants: policy 2 equal share, ARR mode 2 enabled.
const SET_EQUAL_SHARE_WITH_ARR: &str = r#"
import ctypes, sys
nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0, "nvmlInit_v2"
dev = ctypes.c_void_p()
rc = nvml.nvmlDeviceGetHandleByPciBusId_v2(sys.argv[2].encode(), ctypes.byref(dev))
assert rc == 0, f"nvmlDeviceGetHandleByPciBusId_v2: {rc}"
class Arr(ctypes.Structure):
    _fields_ = [("avgFactor", ctypes.c_uint), ("frequency", ctypes.c_uint)]
class Slice(ctypes.Structure):
    _fields_ = [("timeslice", ctypes.c_uint)]
class Params(ctypes.Union):
    _fields_ = [("vgpuSchedDataWithARR", Arr), ("vgpuSchedData", Slice)]
class SetState(ctypes.Structure):
    _fields_ = [("schedulerPolicy", ctypes.c_uint), ("enableARRMode", ctypes.c_uint),
                ("schedulerParams", Params)]
state = SetState(2, 2)
state.schedulerParams.vgpuSchedDataWithARR = Arr(60, 960)
rc = nvml.nvmlDeviceSetVgpuSchedulerState(dev, ctypes.byref(state))
assert rc == 0, f"nvmlDeviceSetVgpuSchedulerState: {rc}"
print("set")
"#;

#[tokio::test]
async fn a_recorded_scheduler_is_set_again_when_the_driver_loads_with_its_policy_but_not_its_arr() {
    // vgpud records equal share without ARR (5 ms slices). After the reboot, a boot script
    // sets equal share WITH ARR before vgpud starts: the policy matches, the ARR mode does
    // not, and vgpud must put its own setting back.
    const TEST: &str =
        "a_recorded_scheduler_is_set_again_when_the_driver_loads_with_its_policy_but_not_its_arr";
    let python = std::path::Path::new("/usr/bin/python3");
    if !python.exists() {
        common::skip::cannot_run(
            TEST,
            "no /usr/bin/python3 to set the scheduler behind vgpud's back (apt-get install python3)",
        );
        return;
    }
    if !common::skip::require_root(TEST, "NVML sets a vGPU scheduler only for root") {
        return;
    }
    let (mut s, pf) = equal_share_recorded_then_rebooted().await;
    let out = std::process::Command::new(python)
        .args(["-c", SET_EQUAL_SHARE_WITH_ARR])
        .arg(fake_library())
        .arg(&pf)
        .env("VGPUD_FAKE_NVML_ROOT", &s.host.root)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "the boot script failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let sched = restart_expecting_equal_share_of_5_ms(&mut s, &pf).await;
    assert!(
        !bool::try_from(&sched["arr"]).expect("arr"),
        "the boot script's ARR is still on: {sched:?}\n{}",
        s.daemon.log_text()
    );
}

#[tokio::test]
async fn a_persistent_layout_comes_back_after_a_reboot_at_the_same_placements() {
    let mut s = h200().await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    n.set_mig_mode(&pf, true, opts(&[])).await.expect("MIG on");
    n.create_gpu_instance(&pf, "2g.35gb", placement(4))
        .await
        .expect("2g at 4");
    n.create_gpu_instance(&pf, "1g.18gb", placement(1))
        .await
        .expect("1g at 1");
    n.create_gpu_instance(&pf, "1g.18gb", bool_opts(&[("persistent", false)]))
        .await
        .expect("a transient one");
    // A persistent MIG-backed vGPU on the second GPU, with the instance made for it.
    let second = h200_gpus(&s).await[1].clone();
    n.set_mig_mode(&second, true, opts(&[]))
        .await
        .expect("MIG on");
    m.set_vf_count(&second, 32, opts(&[]))
        .await
        .expect("VFs on");
    let vgpu = s
        .busctl_create("H200X-3-71C", &[("parent", &second)])
        .expect("a MIG-backed vGPU");
    drop(m);
    // Reboot: GPU instances are gone (run/, sys/), the MIG mode is kept by the GPU.
    s.daemon.stop();
    s.host.reboot(H200);
    restart_with_nvml(&mut s).await;
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert_eq!(gpu.mig_mode().await.expect("MigMode"), (true, true));
    let mut layout: Vec<(String, u32, u32)> = gpu
        .gpu_instances()
        .await
        .expect("GpuInstances")
        .into_iter()
        .map(|i| (i.2, i.3, i.4))
        .collect();
    layout.sort();
    assert_eq!(
        layout,
        vec![("1g.18gb".to_string(), 1, 1), ("2g.35gb".to_string(), 4, 2)],
        "the persistent instances, where they were; not the transient one"
    );
    // The vGPU came back in stages: VFs, then its instance, then the vGPU in it.
    let m = s.manager().await;
    let device = common::proxy::device_proxy(&s.conn, &vgpu).await;
    assert!(
        device.active().await.expect("Active"),
        "the vGPU was restored"
    );
    let other = gpu_proxy(&s.conn, &second).await;
    let instances = other.gpu_instances().await.expect("GpuInstances");
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert_eq!(
        (instances[0].2.as_str(), instances[0].5.as_str()),
        ("3g.71gb", vgpu.as_str())
    );
    m.remove_device(&vgpu, opts(&[])).await.expect("remove");
    assert!(other
        .gpu_instances()
        .await
        .expect("GpuInstances")
        .is_empty());
}

#[tokio::test]
async fn instances_made_or_destroyed_behind_vgpuds_back_are_drift() {
    // GPU instances made through NVML send no uevent: vgpud reads NVML for its MIG-capable
    // GPUs on a slow timer (30 s by default), here every second.
    let s = h200_with(&["--nvml-interval-s", "1"]).await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    n.set_mig_mode(&pf, true, opts(&[])).await.expect("MIG on");
    let mut drift = m.receive_gpu_drift().await.expect("subscribe");
    // Another tool (the driver's own state, as nvidia-smi mig -cgi changes it).
    vgpud_sim_driver::update(&s.host.root, &pf, |state| {
        state.create_gpu_instance(H200_DEVICE, 19, None)
    })
    .expect("driver state")
    .expect("GI made behind vgpud's back");
    // The next reading of NVML, with no call.
    let signal = tokio::time::timeout(Duration::from_secs(10), drift.next())
        .await
        .expect("a GpuDrift signal")
        .expect("stream");
    let args = signal.args().expect("args");
    assert_eq!(args.gpu, pf);
    assert_eq!(args.event, "gpu-instance-created-externally");
    let gpu = gpu_proxy(&s.conn, &pf).await;
    let instances = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(instances.len(), 1);
    // And destroyed behind its back.
    vgpud_sim_driver::update(&s.host.root, &pf, |state| state.wipe_gpu_instances())
        .expect("driver state");
    let signal = tokio::time::timeout(Duration::from_secs(10), drift.next())
        .await
        .expect("a GpuDrift signal")
        .expect("stream");
    assert_eq!(
        signal.args().expect("args").event,
        "gpu-instance-destroyed-externally"
    );
}

#[tokio::test]
async fn telemetry_is_read_from_nvml_and_least_busy_placement_uses_it() {
    let s = h200().await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let gpus = h200_gpus(&s).await;
    // busctl GetMetrics on a GPU.
    let out = busctl_nvidia(&s, "GetMetrics", &["s", &gpus[0]]).expect("GetMetrics");
    let metrics = &out[0];
    for key in [
        "gpu_utilization",
        "memory_utilization",
        "encoder_utilization",
        "decoder_utilization",
        "memory_used",
        "memory_total",
        "temperature",
        "power_mw",
        "ecc_corrected",
        "ecc_uncorrected",
    ] {
        assert!(metrics.get(key).is_some(), "GetMetrics has no {key}: {out}");
    }
    // The first GPU is busy, the second idle: least-busy takes the second.
    for (gpu, util) in [(&gpus[0], 90), (&gpus[1], 5)] {
        vgpud_sim_driver::update(&s.host.root, gpu, |state| state.telemetry.gpu_util = util)
            .expect("driver state");
        m.set_vf_count(gpu, 32, opts(&[])).await.expect("VFs on");
    }
    let busy = n.get_metrics(&gpus[0]).await.expect("GetMetrics");
    assert_eq!(u32_of(&busy["gpu_utilization"]), 90);
    let uuid = s
        .busctl_create("H200X-4C", &[("policy", "least-busy")])
        .expect("CreateDevice");
    let placed = m
        .list_devices()
        .await
        .expect("ListDevices")
        .into_iter()
        .find(|d| d.0 == uuid)
        .expect("listed");
    assert_eq!(placed.1, gpus[1], "least-busy placed it on the idle GPU");
}

#[tokio::test]
async fn without_nvml_vgpud_serves_and_says_why() {
    let s = Setup::new(H200).await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let why = n.nvml().await.expect("Nvml");
    assert_ne!(why, "available");
    assert!(why.contains("disabled"), "{why}");
    let pf = h200_gpus(&s).await[0].clone();
    let e = n
        .set_mig_mode(&pf, true, opts(&[]))
        .await
        .expect_err("no NVML");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NotSupported", "{e}");
    assert!(error_message(&e).contains("NVML"), "{e}");
    // Everything else works: time-sliced vGPUs on VFs.
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs on");
    s.busctl_create("H200X-4C", &[("parent", &pf)])
        .expect("CreateDevice without NVML");
}

#[tokio::test]
async fn a_missing_library_is_reported_not_fatal() {
    let host = common::daemon::TestHost::new(H200);
    let bus = common::daemon::TestBus::start(common::daemon::Policy::Open);
    let daemon = Daemon::start_args(
        &bus,
        &host,
        &["--nvml-library", "/nonexistent/libnvidia-ml.so.1"],
    )
    .await;
    let conn = bus.connect().await;
    let n = common::proxy::NvidiaProxy::new(&conn).await.expect("proxy");
    let m = common::proxy::ManagerProxy::new(&conn)
        .await
        .expect("proxy");
    let why = n.nvml().await.expect("Nvml");
    assert!(
        why.contains("nonexistent"),
        "the reason names the library: {why}"
    );
    assert!(!m.list_gpus().await.expect("ListGpus").is_empty());
    drop(daemon);
}

#[test]
fn the_probe_command_reads_and_changes_nothing() {
    let library = fake_library();
    let host = common::daemon::TestHost::new(H200);
    let before = common::daemon::snapshot(&host.root);
    let out = std::process::Command::new(common::daemon::vgpud_bin())
        .arg("nvml-probe")
        .arg("--compare")
        .arg("--nvml-library")
        .arg(&library)
        .env("VGPUD_FAKE_NVML_ROOT", &host.root)
        .output()
        .expect("run vgpud nvml-probe");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for section in [
        "NVIDIA H200",
        "MIG mode",
        "GPU-instance profiles",
        "1g.18gb",
        "scheduler",
        "telemetry",
    ] {
        assert!(
            text.contains(section),
            "the probe prints no {section:?}:\n{text}"
        );
    }
    assert!(
        !text.contains("DIFFERS"),
        "the fake and the simulator's table agree:\n{text}"
    );
    // Nothing changed but the simulated driver's lock file, which a read takes.
    let mut after = common::daemon::snapshot(&host.root);
    after.retain(|p, _| !p.ends_with("run/nvidia-sim/lock") && !p.ends_with("run/nvidia-sim"));
    let changed: Vec<_> = after
        .iter()
        .filter(|(p, v)| before.get(*p) != Some(*v))
        .map(|(p, _)| p.display().to_string())
        .chain(
            before
                .keys()
                .filter(|p| !after.contains_key(*p))
                .map(|p| p.display().to_string()),
        )
        .collect();
    assert!(changed.is_empty(), "the probe changed {changed:?}");
    // Without a library it says why and fails.
    let out = std::process::Command::new(common::daemon::vgpud_bin())
        .args([
            "nvml-probe",
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
        ])
        .output()
        .expect("run vgpud nvml-probe");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nonexistent"));
}

#[tokio::test]
async fn an_ampere_mig_mode_waits_for_a_reset_and_applies_after_a_reboot() {
    let lib = fake_library().to_string_lossy().into_owned();
    let mut s = Setup::with_args(&["nvidia-a100"], &["--nvml-library", &lib]).await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let pf = m
        .list_gpus()
        .await
        .expect("ListGpus")
        .into_iter()
        .find(|g| g.1.contains("A100"))
        .expect("an A100")
        .0;
    // busctl: the driver takes the mode but applies it at the next GPU reset.
    let e = busctl_nvidia(&s, "SetMigMode", &["sba{sv}", &pf, "true", "0"]).expect_err("pending");
    assert!(e.contains("pending on until the GPU is reset"), "{e}");
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert_eq!(gpu.mig_mode().await.expect("MigMode"), (false, true));
    // Asked again while pending: still not on, and said so (pending is not current).
    let e = n
        .set_mig_mode(&pf, true, opts(&[]))
        .await
        .expect_err("still pending");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NeedsReset", "{e}");
    assert!(error_message(&e).contains("pending on"), "{e}");
    let e = n
        .create_gpu_instance(&pf, "1g.10gb", opts(&[]))
        .await
        .expect_err("MIG is not on yet");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NotSupported", "{e}");
    assert!(error_message(&e).contains("pending"), "{e}");
    // After a reboot the mode is on, and it is what vgpud recorded.
    drop((m, n, gpu));
    s.daemon.stop();
    s.host.reboot(&["nvidia-a100"]);
    restart_with_nvml(&mut s).await;
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert_eq!(gpu.mig_mode().await.expect("MigMode"), (true, true));
    assert!(
        !s.daemon.log_text().contains("not in its recorded MIG mode"),
        "{}",
        s.daemon.log_text()
    );
    let n = nvidia(&s).await;
    n.create_gpu_instance(&pf, "1g.10gb", opts(&[]))
        .await
        .expect("a 1g instance on the A100");
}

/// Issue #22 item 6: enabling the VFs of an NVIDIA GPU (`sriov-manage -e`) wipes its GPU
/// instances, so `SetVfCount` refuses with Busy naming them; with `force` it goes on, and the
/// loss is told as SetVfCount's doing, never as another tool's.
#[tokio::test]
async fn set_vf_count_refuses_to_wipe_gpu_instances_unless_forced() {
    let s = h200().await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    let gpu = gpu_proxy(&s.conn, &pf).await;
    n.set_mig_mode(&pf, true, opts(&[])).await.expect("MIG on");
    let id = n
        .create_gpu_instance(&pf, "3g.71gb", placement(0))
        .await
        .expect("3g at 0");
    let mut drift = m.receive_gpu_drift().await.expect("subscribe");

    // demo/run's sequence: refused, naming the instance; nothing changed.
    let e = m
        .set_vf_count(&pf, 32, opts(&[]))
        .await
        .expect_err("enabling VFs would wipe the GPU instance");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Busy", "{e}");
    let msg = error_message(&e);
    assert!(
        msg.contains(&format!("GPU instance {id}")) && msg.contains("3g.71gb"),
        "{msg}"
    );
    assert!(msg.contains("force"), "says how to go on: {msg}");
    assert_eq!(gpu.gpu_instances().await.expect("GpuInstances").len(), 1);
    let e = s
        .busctl_manager("SetVfCount", &["sua{sv}", &pf, "32", "0"])
        .expect_err("busctl, as demo/run calls it");
    assert!(e.contains("3g.71gb"), "{e}");
    assert_eq!(gpu.gpu_instances().await.expect("GpuInstances").len(), 1);

    // With force: done, the instance is gone, and it is SetVfCount's doing.
    let now = m
        .set_vf_count(&pf, 32, bool_opts(&[("force", true)]))
        .await
        .expect("forced");
    assert_eq!(now, 32);
    assert!(gpu.gpu_instances().await.expect("GpuInstances").is_empty());
    // Later looks at the host find no drift.
    tokio::time::sleep(Duration::from_millis(150)).await;
    m.list_devices().await.expect("ListDevices");
    let uuid = s
        .busctl_create("H200X-1-18C", &[("parent", &pf)])
        .expect("a MIG-backed vGPU after");
    m.remove_device(&uuid, opts(&[])).await.expect("remove");
    if let Ok(Some(signal)) = tokio::time::timeout(Duration::from_millis(500), drift.next()).await {
        panic!(
            "vgpud's own SetVfCount reported as drift: {:?}",
            signal.args().map(|a| a.detail.to_string())
        );
    }
    let log = s.daemon.log_text();
    assert!(
        !log.contains("destroyed by another tool"),
        "vgpud's own step blamed on another tool:\n{log}"
    );
    assert!(
        log.contains(&format!(
            "GPU instance {id} (3g.71gb at placement 0) of {pf} destroyed by SetVfCount"
        )),
        "the log says what SetVfCount destroyed:\n{log}"
    );
    assert!(
        log.contains(&format!("gpu-changed {pf} by SetVfCount")),
        "the audit names SetVfCount:\n{log}"
    );
    assert!(
        !log.contains(&format!("gpu-drift {pf} by")),
        "no drift in the audit:\n{log}"
    );
}

/// A mode asked for again is no change (none of a change's refusals apply, the recorded
/// layout stays); the free placements a profile lists leave out the instances that exist.
#[tokio::test]
async fn mig_on_again_changes_nothing_and_free_placements_leave_out_instances() {
    let mut s = h200().await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    n.set_mig_mode(&pf, true, opts(&[])).await.expect("MIG on");
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs on");
    n.create_gpu_instance(&pf, "3g.71gb", placement(0))
        .await
        .expect("3g at 0");
    let profiles = n.list_mig_profiles(&pf).await.expect("ListMigProfiles");
    let three = profiles.iter().find(|p| p.2 == "3g.71gb").expect("3g.71gb");
    assert_eq!(three.7, vec![(0, 4), (4, 4)], "its placements");
    assert_eq!(three.8, vec![(4, 4)], "free: 0 is taken");
    let one = profiles.iter().find(|p| p.2 == "1g.18gb").expect("1g.18gb");
    assert_eq!(one.8.iter().map(|p| p.0).collect::<Vec<_>>(), vec![4, 5, 6]);

    // With VFs on (a change would be refused), MIG on again is no change: done.
    let gpu = gpu_proxy(&s.conn, &pf).await;
    n.set_mig_mode(&pf, true, opts(&[]))
        .await
        .expect("MIG on again");
    assert_eq!(gpu.mig_mode().await.expect("MigMode"), (true, true));
    assert_eq!(gpu.gpu_instances().await.expect("GpuInstances").len(), 1);

    // A persistent instance destroyed is forgotten; the others stay recorded.
    let gone = n
        .create_gpu_instance(&pf, "1g.18gb", placement(6))
        .await
        .expect("1g at 6");
    n.destroy_gpu_instance(&pf, gone, opts(&[]))
        .await
        .expect("DestroyGpuInstance");

    // The recorded layout is kept: the instance comes back after a reboot.
    drop((m, n, gpu));
    s.daemon.stop();
    s.host.reboot(H200);
    restart_with_nvml(&mut s).await;
    let gpu = gpu_proxy(&s.conn, &pf).await;
    let layout: Vec<(String, u32, u32)> = gpu
        .gpu_instances()
        .await
        .expect("GpuInstances")
        .into_iter()
        .map(|i| (i.2, i.3, i.4))
        .collect();
    assert_eq!(
        layout,
        vec![("3g.71gb".to_string(), 0, 4)],
        "{}",
        s.daemon.log_text()
    );

    // A 1g vGPU gets an instance of its own: the free 3g one is not its profile's.
    let one = s
        .busctl_create("H200X-1-18C", &[("parent", &pf)])
        .expect("a 1g vGPU");
    let instances = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(instances.len(), 2, "{instances:?}");
    assert!(
        instances.iter().any(|i| i.2 == "1g.18gb" && i.5 == one),
        "{instances:?}"
    );
    // A 3g vGPU takes the free 3g instance rather than making one. (vgpud did not make
    // that instance for it, and NVML names no mdev for a VF's vGPU: it is named by type.)
    s.busctl_create("H200X-3-71C", &[("parent", &pf)])
        .expect("a 3g vGPU");
    let instances = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(instances.len(), 2, "{instances:?}");
    assert!(
        instances
            .iter()
            .any(|i| (i.2.as_str(), i.3) == ("3g.71gb", 0) && !i.5.is_empty()),
        "{instances:?}"
    );
    // A second 1g vGPU gets an instance of its own (next to the first); the first removed,
    // its instance goes, not the second one's.
    let two = s
        .busctl_create("H200X-1-18C", &[("parent", &pf)])
        .expect("a second 1g vGPU");
    let instances = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(instances.len(), 3, "{instances:?}");
    // Each instance made for a vGPU names its own.
    for uuid in [&one, &two] {
        assert_eq!(
            instances.iter().filter(|i| &i.5 == uuid).count(),
            1,
            "{uuid}: {instances:?}"
        );
    }
    s.manager()
        .await
        .remove_device(&one, opts(&[]))
        .await
        .expect("remove");
    let left = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().any(|i| i.5 == two), "{left:?}");
    assert!(left.iter().all(|i| !i.5.is_empty()), "{left:?}");
}

/// MIG is NVIDIA's: asked of another vendor's GPU, vgpud says so in its own words (it does not
/// ask NVML about it).
#[tokio::test]
async fn mig_of_another_vendors_gpu_is_not_supported() {
    let lib = fake_library().to_string_lossy().into_owned();
    let s = Setup::with_args(&["nvidia-h200", "amd-mxgpu"], &["--nvml-library", &lib]).await;
    let n = nvidia(&s).await;
    let gpus = s.manager().await.list_gpus().await.expect("ListGpus");
    let amd = gpus
        .iter()
        .find(|g| !g.1.contains("H200"))
        .unwrap_or_else(|| panic!("an AMD GPU in {gpus:?}"))
        .0
        .clone();
    let e = n
        .set_mig_mode(&amd, true, opts(&[]))
        .await
        .expect_err("not NVIDIA");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NotSupported", "{e}");
    assert!(
        error_message(&e).contains(&format!("{amd} is not an NVIDIA GPU")),
        "{e}"
    );
    // An NVIDIA GPU next to it is one. With MIG off its profiles are listed, all free.
    let pf = h200_gpus(&s).await[0].clone();
    let profiles = n
        .list_mig_profiles(&pf)
        .await
        .expect("ListMigProfiles, MIG off");
    let one = profiles.iter().find(|p| p.2 == "1g.18gb").expect("1g.18gb");
    assert_eq!(one.8.len(), 7, "{one:?}");
    n.set_mig_mode(&pf, true, opts(&[])).await.expect("MIG on");
}

/// At a restart without a reboot the recorded instances that still exist are kept as they
/// are (matched by placement and profile), and only the one gone is made again.
#[tokio::test]
async fn a_restart_keeps_the_instances_that_exist_and_makes_the_missing_one() {
    let mut s = h200().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    n.set_mig_mode(&pf, true, opts(&[])).await.expect("MIG on");
    let kept = n
        .create_gpu_instance(&pf, "1g.18gb", placement(1))
        .await
        .expect("1g at 1");
    // (Without a compute instance, so that the driver's own tools may destroy it.)
    let lost = n
        .create_gpu_instance(
            &pf,
            "1g.18gb",
            [
                ("placement", Variant::from(2_u32)),
                ("compute_instance", Variant::from(false)),
            ]
            .into_iter()
            .collect(),
        )
        .await
        .expect("1g at 2");
    drop(n);
    s.daemon.stop();
    // While vgpud is down, another tool destroys one of them.
    vgpud_sim_driver::update(&s.host.root, &pf, |state| state.destroy_gpu_instance(lost))
        .expect("driver state")
        .expect("GI destroyed");
    restart_with_nvml(&mut s).await;
    let gpu = gpu_proxy(&s.conn, &pf).await;
    let mut layout: Vec<(u32, String, u32)> = gpu
        .gpu_instances()
        .await
        .expect("GpuInstances")
        .into_iter()
        .map(|i| (i.3, i.2, i.0))
        .collect();
    layout.sort();
    let log = s.daemon.log_text();
    assert_eq!(layout.len(), 2, "{layout:?}\n{log}");
    assert_eq!(
        (layout[0].0, layout[0].1.as_str(), layout[0].2),
        (1, "1g.18gb", kept),
        "the one that exists is kept as it is: {layout:?}"
    );
    assert_eq!((layout[1].0, layout[1].1.as_str()), (2, "1g.18gb"));
    assert!(!log.contains("could not restore the MIG layout"), "{log}");
}

/// A heterogeneous (mixed-size) mode set by another tool is seen at the next reading of NVML:
/// the GPU's property follows what the driver is in.
#[tokio::test]
async fn a_heterogeneous_mode_set_behind_vgpuds_back_is_seen() {
    let s = h200_with(&["--nvml-interval-s", "1"]).await;
    let m = s.manager().await;
    let pf = h200_gpus(&s).await[0].clone();
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs on");
    assert!(!gpu_proxy(&s.conn, &pf)
        .await
        .heterogeneous_mode()
        .await
        .expect("HeterogeneousMode"));
    vgpud_sim_driver::update(&s.host.root, &pf, |state| state.heterogeneous = true)
        .expect("driver state");
    heterogeneous_is_seen(&s, &pf, "the mode set by another tool is never seen").await;
}

/// Waits up to 10 s for GPU `pf` to show the heterogeneous mode; fails saying `why`.
async fn heterogeneous_is_seen(s: &Setup, pf: &str, why: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let gpu = gpu_proxy(&s.conn, pf).await;
        if gpu.heterogeneous_mode().await.expect("HeterogeneousMode") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{why}:\n{}",
            s.daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// NVML is read again on a uevent of the GPU (here its driver unbound and bound by another
/// process), not only at the slow timer: a mode the driver took meanwhile is seen at once.
#[tokio::test]
async fn nvml_is_read_again_on_a_uevent_of_the_gpu() {
    let s = h200_with(&["--nvml-interval-s", "3600"]).await;
    let pf = h200_gpus(&s).await[0].clone();
    assert!(!gpu_proxy(&s.conn, &pf)
        .await
        .heterogeneous_mode()
        .await
        .expect("HeterogeneousMode"));
    vgpud_sim_driver::update(&s.host.root, &pf, |state| state.heterogeneous = true)
        .expect("driver state");
    let write = |rel: &str| {
        vgpud::host::Host::simulated(&s.host.root)
            .write_attr(&s.host.path(rel), &pf)
            .unwrap_or_else(|e| panic!("writing {pf} to {rel}: {e}"));
    };
    write("sys/bus/pci/drivers/nvidia/unbind");
    write("sys/bus/pci/drivers/nvidia/bind");
    heterogeneous_is_seen(&s, &pf, "NVML was not read again on the GPU's uevents").await;
}

/// SetMigMode records the mode for the boot check only with `persistent` (the default): a
/// mode changed with `persistent` false leaves the recorded one, which the boot check then
/// finds the GPU out of.
#[tokio::test]
async fn only_a_persistent_mig_mode_is_recorded_for_the_boot_check() {
    let mut s = h200().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    n.set_mig_mode(&pf, true, opts(&[]))
        .await
        .expect("MIG on, recorded");
    n.set_mig_mode(&pf, false, bool_opts(&[("persistent", false)]))
        .await
        .expect("MIG off, not recorded");
    drop(n);
    s.daemon.stop();
    s.host.reboot(H200);
    restart_with_nvml(&mut s).await;
    let gpu = gpu_proxy(&s.conn, &pf).await;
    assert_eq!(gpu.mig_mode().await.expect("MigMode"), (false, false));
    let log = s.daemon.log_text();
    assert!(
        log.contains("not in its recorded MIG mode") && log.contains("recorded with MIG on"),
        "{log}"
    );
}

/// A MIG-backed vGPU that the driver refuses leaves no GPU instance behind: the one made for
/// it is destroyed again.
#[tokio::test]
async fn a_mig_backed_vgpu_the_driver_refuses_leaves_no_instance_behind() {
    let s = h200().await;
    let m = s.manager().await;
    let n = nvidia(&s).await;
    let pf = h200_gpus(&s).await[0].clone();
    n.set_mig_mode(&pf, true, opts(&[])).await.expect("MIG on");
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs on");
    let options = s.host.path("run/vgpud-simulator");
    std::fs::create_dir_all(&options).expect("options");
    std::fs::write(options.join("fail-vf-type-write"), "EIO once").expect("option");
    let e = s
        .busctl_create("H200X-3-71C", &[("parent", &pf)])
        .expect_err("the driver refuses the VF's type");
    assert!(e.contains("the driver refused"), "{e}");
    let left = gpu_proxy(&s.conn, &pf)
        .await
        .gpu_instances()
        .await
        .expect("GpuInstances");
    assert!(left.is_empty(), "{left:?}");
    // The next one is made, in an instance of its own.
    s.busctl_create("H200X-3-71C", &[("parent", &pf)])
        .expect("a MIG-backed vGPU");
}
