//! Each layer alone: a check of the daemon's tested with the layer below it made lenient, so
//! that the daemon's own check is the only one that can refuse. (The room check with a lenient
//! simulated kernel is in tests/fairness.rs.)
//!
//! Here: the MIG in-use check (`Engine::destroy_gpu_instance`) with the fake NVML library in
//! its lenient mode (`VGPUD_FAKE_NVML_LENIENT=1`, see crates/fake-nvml), which destroys a GPU
//! instance in use when asked.

mod common;

use common::nvml::fake_library;
use common::proxy::{error_message, error_name, gpu_proxy, opts, NvidiaProxy};
use common::setup::Setup;

#[tokio::test]
async fn only_the_daemon_keeps_a_gpu_instance_in_use_from_being_destroyed() {
    let lib = fake_library().to_string_lossy().into_owned();
    let s = Setup::with_env(
        &["nvidia-h200"],
        &[("VGPUD_FAKE_NVML_LENIENT", "1")],
        &["--nvml-library", &lib],
    )
    .await;
    let m = s.manager().await;
    let n = NvidiaProxy::new(&s.conn).await.expect("nvidia proxy");
    let mut gpus = s.gpus_with_driver("nvidia").await;
    gpus.sort();
    let pf = gpus.first().expect("an H200").clone();
    let gpu = gpu_proxy(&s.conn, &pf).await;
    n.set_mig_mode(&pf, true, opts(&[])).await.expect("MIG on");
    m.set_vf_count(&pf, 32, opts(&[])).await.expect("VFs on");
    let uuid = s
        .busctl_create("H200X-1-18C", &[("parent", &pf)])
        .expect("CreateDevice");
    let instances = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(instances.len(), 1, "{instances:?}");
    let id = instances[0].0;

    let e = n
        .destroy_gpu_instance(&pf, id, opts(&[]))
        .await
        .expect_err("the instance carries a vGPU");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Busy", "{e}");
    let msg = error_message(&e);
    assert!(
        msg.contains(&uuid) && msg.contains("remove that device first"),
        "the daemon's own refusal, naming the device: {msg}"
    );
    let after = gpu.gpu_instances().await.expect("GpuInstances");
    assert_eq!(after.len(), 1, "the instance is still there: {after:?}");
    assert_eq!(after[0].0, id);
    assert_eq!(after[0].5, uuid, "and still carries the device");
}
