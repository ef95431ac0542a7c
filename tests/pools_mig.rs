//! Re-shaping free MIG instances (issue #25): on a simulated H200 in MIG mode whose slices
//! are all taken by GPU instances that hold nothing or only a pool's spares, a create of a
//! larger MIG-backed type frees the cheapest placement (the spares in its way removed, its
//! instances destroyed) and is made there; a GPU with anyone else's device is never
//! touched, nor an instance vgpud did not record; the forecast path waits for the
//! hysteresis.

mod common;

use std::collections::HashMap;

use common::nvml::fake_library;
use common::proxy::{error_name, gpu_proxy, opts, NvidiaProxy};
use common::setup::{owned_by, Setup};
use vgpud_client::Client;
use zbus::Variant;

const ONE_G: &str = "H200X-1-18C";
const THREE_G: &str = "H200X-3-71C";

/// vgpud on a simulated two-H200 host with the fake NVML library, MIG and 32 VFs on both
/// GPUs: the setup, a client, the NVIDIA proxy and the GPUs' addresses in order.
async fn mig_host() -> (Setup, Client, NvidiaProxy<'static>, Vec<String>) {
    let lib = fake_library().to_string_lossy().into_owned();
    let s = Setup::with_args(&["nvidia-h200"], &["--nvml-library", &lib]).await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    let n = NvidiaProxy::new(&s.conn).await.expect("nvidia proxy");
    let m = s.manager().await;
    let mut gpus = s.gpus_with_driver("nvidia").await;
    gpus.sort();
    assert_eq!(gpus.len(), 2, "{gpus:?}");
    for pf in &gpus {
        n.set_mig_mode(pf, true, opts(&[])).await.expect("MIG on");
        m.set_vf_count(pf, 32, opts(&[])).await.expect("VFs on");
    }
    std::fs::create_dir_all(s.host.path("etc/vgpud/layouts")).expect("layouts dir");
    (s, c, n, gpus)
}

/// A free 1g instance at slice `start`, made through vgpud (recorded, no compute instance,
/// as a vGPU's).
async fn free_1g(n: &NvidiaProxy<'_>, pf: &str, start: u32) {
    let o: HashMap<&str, Variant<'_>> = [
        ("placement", Variant::from(start)),
        ("compute_instance", Variant::from(false)),
    ]
    .into_iter()
    .collect();
    n.create_gpu_instance(pf, "1g.18gb", o)
        .await
        .expect("CreateGpuInstance");
}

/// The GPU's instances by first slice: (id, profile, device).
async fn instances(s: &Setup, pf: &str) -> Vec<(u32, u32, String, String)> {
    let mut v: Vec<(u32, u32, String, String)> = gpu_proxy(&s.conn, pf)
        .await
        .gpu_instances()
        .await
        .expect("GpuInstances")
        .into_iter()
        .map(|(id, _, profile, start, _, device)| (start, id, profile, device))
        .collect();
    v.sort();
    v
}

/// The device in the instance at slice `start`, if any.
async fn device_at(s: &Setup, pf: &str, start: u32) -> String {
    instances(s, pf)
        .await
        .into_iter()
        .find(|i| i.0 == start)
        .map(|i| i.3)
        .unwrap_or_default()
}

/// Writes layout `name` with `entries` (TOML device entries) on `pf`.
fn layout(s: &Setup, name: &str, pf: &str, entries: &str, more: &str) {
    std::fs::write(
        s.host.path(&format!("etc/vgpud/layouts/{name}.toml")),
        format!("[[gpu]]\naddress = \"{pf}\"\ndevices = [{entries}]\n{more}"),
    )
    .expect("layout");
}

/// Creates bob's 3g on `pf` and checks that a MIG re-shape freed [4,8) for it: the 3g at
/// slice 4, the instances below as they were (`before`).
async fn three_g_made_at_4(s: &Setup, pf: &str, before: &[(u32, u32, String, String)]) {
    let made = s
        .busctl_create(THREE_G, &[("parent", pf), ("owner", "bob-vm")])
        .expect("a 3g after a MIG re-shape");
    let after = instances(s, pf).await;
    assert_eq!(after[..4], before[..4], "{after:?}");
    assert_eq!(
        (after[4].0, after[4].2.as_str(), after[4].3.as_str()),
        (4, "3g.71gb", made.as_str()),
        "{after:?}"
    );
}

/// Applies layout `name`; asserts every step done.
async fn apply(c: &Client, name: &str) {
    let steps = c.apply_layout(name, false).await.expect("ApplyLayout");
    assert!(steps.iter().all(|st| st.status == "done"), "{steps:?}");
}

#[tokio::test]
async fn a_larger_mig_type_frees_the_cheapest_placement_of_free_instances_and_spares() {
    let (s, c, n, gpus) = mig_host().await;
    let pf = &gpus[0];
    layout(
        &s,
        "mig",
        pf,
        &format!("{{ type = \"{ONE_G}\", spares = 4, owner = \"pool-1g\" }}"),
        "",
    );
    apply(&c, "mig").await;
    // The pool's four 1g spares take 3..=6 (where vgpud places them on an empty GPU);
    // free 1g instances made through vgpud take 0, 1 and 2.
    let spares = owned_by(&c, "pool-1g").await;
    for start in 3..=6 {
        let d = device_at(&s, pf, start).await;
        assert!(spares.contains(&d), "{:?}", instances(&s, pf).await);
    }
    for start in [0, 1, 2] {
        free_1g(&n, pf, start).await;
    }
    let s3 = device_at(&s, pf, 3).await;
    let before = instances(&s, pf).await;

    // No placement of a 3g is free: [0,4) holds one spare and three free instances, [4,8)
    // three spares. The first is freed and the 3g made there.
    let made = s
        .busctl_create(THREE_G, &[("parent", pf), ("owner", "bob-vm")])
        .expect("a 3g after a MIG re-shape");
    let after = instances(&s, pf).await;
    assert_eq!(
        (after[0].0, after[0].2.as_str(), after[0].3.as_str()),
        (0, "3g.71gb", made.as_str()),
        "{after:?}"
    );
    // The spares out of the way stay, in their instances.
    assert_eq!(after[1..], before[4..], "{after:?}");
    let left = owned_by(&c, "pool-1g").await;
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(!left.contains(&s3), "{left:?}");
    let log = s.daemon.log_text();
    assert!(log.contains("MIG: placement 0 freed"), "{log}");
    assert!(log.contains("re-shaped a GPU of spares"), "{log}");
}

#[tokio::test]
async fn an_instance_with_anyone_elses_device_is_never_touched() {
    let (s, c, _n, gpus) = mig_host().await;
    let pf = &gpus[0];
    // Alice's 1g (at 6, where vgpud places it on an empty GPU), then the pool's six spares
    // at 0..=5: [4,8) (two spares and Alice) would be cheaper to free than [0,4) (four).
    let m = s.manager().await;
    let (alice, _) = m
        .create_device(
            ONE_G,
            [
                ("parent", Variant::from(pf.as_str())),
                ("owner", Variant::from("alice-vm")),
            ]
            .into_iter()
            .collect(),
        )
        .await
        .expect("alice's 1g");
    let alice = alice.to_string();
    assert_eq!(device_at(&s, pf, 6).await, alice);
    layout(
        &s,
        "mig",
        pf,
        &format!("{{ type = \"{ONE_G}\", spares = 6, owner = \"pool-1g\" }}"),
        "",
    );
    apply(&c, "mig").await;
    let before = instances(&s, pf).await;
    assert_eq!(before.len(), 7, "{before:?}");
    let spares = owned_by(&c, "pool-1g").await;

    let e = m
        .create_device(
            THREE_G,
            [
                ("parent", Variant::from(pf.as_str())),
                ("owner", Variant::from("bob-vm")),
            ]
            .into_iter()
            .collect(),
        )
        .await
        .expect_err("no room, and nothing freed");
    assert_eq!(error_name(&e), "org.vgpud1.Error.NoCapacity", "{e}");
    assert_eq!(instances(&s, pf).await, before);
    assert_eq!(owned_by(&c, "pool-1g").await, spares);
    assert_eq!(
        c.device(&alice).await.expect("alice's device").owner,
        "alice-vm"
    );
    assert!(
        !s.daemon.log_text().contains("re-shaped"),
        "{}",
        s.daemon.log_text()
    );
}

#[tokio::test]
async fn the_forecast_re_shapes_mig_instances_and_not_back_within_the_hour() {
    let (s, c, n, gpus) = mig_host().await;
    let pf = &gpus[0];
    // A forecast pool of four 1g takes 3..=6; then free 1g instances take 0, 1 and 2, and
    // the layout gains a forecast pool of one 3g, which finds no room. The second GPU: a
    // pool to hand out from, whose hand-outs wake the refill.
    let one =
        format!("{{ type = \"{ONE_G}\", owner = \"pool-1g\", forecast = true, min = 4, max = 4 }}");
    let task = format!(
        "[[gpu]]\naddress = \"{}\"\ndevices = [{{ type = \"{ONE_G}\", spares = 3, owner = \"pool-task\" }}]\n",
        gpus[1]
    );
    layout(&s, "shift", pf, &one, &task);
    apply(&c, "shift").await;
    for start in [0, 1, 2] {
        free_1g(&n, pf, start).await;
    }
    let both = format!(
        "{one},\n  {{ type = \"{THREE_G}\", owner = \"pool-3g\", forecast = true, min = 1, max = 1 }}"
    );
    layout(&s, "shift", pf, &both, &task);
    let steps = c.apply_layout("shift", false).await.expect("ApplyLayout");
    assert!(
        steps
            .iter()
            .any(|st| st.status == "refused" && st.subject.contains("pool-3g")),
        "{steps:?}"
    );
    assert_eq!(owned_by(&c, "pool-1g").await.len(), 4);

    // A hand-out wakes the refill: the 3g pool finds no room, and [0,4) (three free
    // instances and one spare, against three spares in [4,8)) is freed for it.
    s.busctl_create(ONE_G, &[("pool", "pool-task"), ("owner", "vm-a")])
        .expect("a spare");
    s.daemon.wait_for_log("re-shaped a GPU of spares", 1).await;
    let log = s.daemon.log_text();
    assert!(log.contains("MIG: placement 0 freed"), "{log}");
    assert!(
        log.contains("reason=\"forecast\"") || log.contains("reason=forecast"),
        "{log}"
    );
    let three = owned_by(&c, "pool-3g").await;
    assert_eq!(three.len(), 1, "the forecast pool's spare is made at once");
    assert_eq!(device_at(&s, pf, 0).await, three[0]);
    assert_eq!(owned_by(&c, "pool-1g").await.len(), 3);

    // The next refill finds the 1g pool one short with no room: within the hour the 3g
    // is not swapped back for 1g.
    s.busctl_create(ONE_G, &[("pool", "pool-task"), ("owner", "vm-b")])
        .expect("a spare");
    s.daemon
        .wait_for_log("the GPU was re-shaped less than an hour ago", 1)
        .await;
    assert_eq!(
        s.daemon
            .log_text()
            .matches("re-shaped a GPU of spares")
            .count(),
        1
    );
    assert_eq!(owned_by(&c, "pool-3g").await, three);
    assert_eq!(owned_by(&c, "pool-1g").await.len(), 3);
}

#[tokio::test]
async fn an_instance_vgpud_did_not_record_is_never_destroyed_even_free() {
    let (s, c, n, gpus) = mig_host().await;
    let pf = &gpus[0];
    layout(
        &s,
        "mig",
        pf,
        &format!("{{ type = \"{ONE_G}\", spares = 4, owner = \"pool-1g\" }}"),
        "",
    );
    apply(&c, "mig").await;
    // Spares at 3..=6; free instances at 0 and 1 recorded, at 2 not (not persistent: as
    // one nvidia-smi made, vgpud keeps no record of it).
    for start in [0, 1] {
        free_1g(&n, pf, start).await;
    }
    let o: HashMap<&str, Variant<'_>> = [
        ("placement", Variant::from(2u32)),
        ("compute_instance", Variant::from(false)),
        ("persistent", Variant::from(false)),
    ]
    .into_iter()
    .collect();
    n.create_gpu_instance(pf, "1g.18gb", o)
        .await
        .expect("CreateGpuInstance");
    let before = instances(&s, pf).await;

    // [0,4) would cost one spare, but holds the unrecorded instance: [4,8) is freed, its
    // three spares removed, and the instance at 2 stays.
    three_g_made_at_4(&s, pf, &before).await;
    assert_eq!(owned_by(&c, "pool-1g").await.len(), 1);
    assert!(s.daemon.log_text().contains("MIG: placement 4 freed"));
}

#[tokio::test]
async fn spares_in_instances_not_made_for_them_are_named_and_re_shaped() {
    let (s, c, n, gpus) = mig_host().await;
    let pf = &gpus[0];
    // Seven free 1g instances made through vgpud (recorded), then five 1g spares, which the
    // driver puts into free instances: no instance is made for them, so only their VFs
    // (`nvidia/gpu_instance_id`) say which instance each runs in.
    for start in 0..=6 {
        free_1g(&n, pf, start).await;
    }
    layout(
        &s,
        "mig",
        pf,
        &format!("{{ type = \"{ONE_G}\", spares = 5, owner = \"pool-1g\" }}"),
        "",
    );
    apply(&c, "mig").await;
    let spares = owned_by(&c, "pool-1g").await;
    assert_eq!(spares.len(), 5, "{spares:?}");
    let before = instances(&s, pf).await;
    let used: Vec<&String> = before
        .iter()
        .map(|i| &i.3)
        .filter(|d| !d.is_empty())
        .collect();
    assert_eq!(used.len(), 5, "{before:?}");
    assert!(
        used.iter().all(|d| spares.contains(d)),
        "each used instance is named by its spare's UUID: {before:?}"
    );
    // [0,4) holds four spares, [4,8) one and two free instances: [4,8) is freed.
    let at4 = device_at(&s, pf, 4).await;
    assert!(spares.contains(&at4), "{before:?}");
    three_g_made_at_4(&s, pf, &before).await;
    let left = owned_by(&c, "pool-1g").await;
    assert!(left.len() == 4 && !left.contains(&at4), "{left:?}");
    assert!(s.daemon.log_text().contains("MIG: placement 4 freed"));
}

/// A persistent vGPU whose VF another tool gave another MIG-backed type keeps its record but
/// not its VF's instance: after a restart the instance the driver put the other tool's vGPU
/// into is named by that vGPU (adopted), never by the stopped record that still names the
/// VF, even when the record's UUID comes first.
#[tokio::test]
async fn an_instance_on_a_vf_is_named_by_the_vgpu_running_there_not_by_a_stopped_record() {
    let (mut s, _c, n, gpus) = mig_host().await;
    let pf = gpus[0].clone();
    free_1g(&n, &pf, 0).await;
    const FIRST: &str = "00000000-0000-4000-8000-000000000001";
    // Not started at boot: after the restart it stays stopped.
    let o: HashMap<&str, Variant<'_>> = [
        ("parent", Variant::from(pf.as_str())),
        ("uuid", Variant::from(FIRST)),
        ("owner", Variant::from("vm-a")),
        ("autostart", Variant::from(false)),
    ]
    .into_iter()
    .collect();
    s.manager()
        .await
        .create_device(ONE_G, o)
        .await
        .expect("a persistent 1g vGPU");
    let vf = common::proxy::device_proxy(&s.conn, FIRST)
        .await
        .address()
        .await
        .expect("Address");
    assert_eq!(device_at(&s, &pf, 0).await, FIRST);
    // A free 1g.35gb instance, and another tool moves the VF to that instance's type.
    let o: HashMap<&str, Variant<'_>> = [("compute_instance", Variant::from(false))]
        .into_iter()
        .collect();
    n.create_gpu_instance(&pf, "1g.35gb", o)
        .await
        .expect("CreateGpuInstance 1g.35gb");
    let host = vgpud::host::Host::simulated(&s.host.root);
    let current = s.host.path(&format!(
        "sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
    ));
    host.write_attr(&current, "0")
        .expect("released by another tool");
    host.write_attr(&current, "1415")
        .expect("H200X-1-35C on the same VF, by another tool");
    drop(n);
    let lib = fake_library().to_string_lossy().into_owned();
    s.restart_with_args(&["--nvml-library", &lib]).await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    let devices = c.list_devices().await.expect("ListDevices");
    let other = devices
        .iter()
        .find(|d| d.type_id == "nvidia-1415")
        .map(|d| d.uuid.clone())
        .unwrap_or_else(|| panic!("the other tool's vGPU is adopted: {devices:?}"));
    let mine = common::proxy::device_proxy(&s.conn, FIRST).await;
    assert!(
        !mine.active().await.expect("Active"),
        "the record's VF runs another type"
    );
    // NVML is read shortly after the start.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut named = instances(&s, &pf).await;
    while named.len() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        named = instances(&s, &pf).await;
    }
    let at = named
        .iter()
        .find(|i| i.2 == "1g.35gb")
        .unwrap_or_else(|| panic!("the 1g.35gb instance: {named:?}"));
    assert_eq!(at.3, other, "{named:?}");
    assert!(
        named.iter().all(|i| i.3 != FIRST),
        "the stopped record names no instance: {named:?}"
    );
}
