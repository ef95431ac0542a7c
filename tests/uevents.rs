//! Kernel uevents end to end: a real vgpud on a simulated host learns of devices made,
//! removed, bound and unbound by other processes from the uevents the simulated kernel
//! sends, without any call looking at the host; and a lost uevent (a full socket) leads to
//! exactly one full look.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::metrics::{listener, sample};
use common::proxy::ManagerProxy;
use common::setup::Setup;
use futures_util::StreamExt;

const MTTY_CREATE: &str = "sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create";

/// A vgpud with its metrics listener on.
async fn setup(profiles: &[&str]) -> (Setup, String) {
    let s = Setup::with_args(profiles, &["--metrics-listen", "127.0.0.1:0"]).await;
    let addr = listener(&s);
    (s, addr)
}

/// How many full looks vgpud made for `reason`.
fn full_looks(addr: &str, reason: &str) -> f64 {
    sample(
        addr,
        &format!("vgpud_full_looks_total{{reason=\"{reason}\"}}"),
    )
}

/// Every full look vgpud made, whatever the reason.
fn all_full_looks(addr: &str) -> f64 {
    ["start", "overrun", "no-listener", "definitions"]
        .iter()
        .map(|r| full_looks(addr, r))
        .sum()
}

/// Another process's write through the simulated kernel (mdevctl, an operator's echo).
fn external_write(s: &Setup, rel: &str, value: &str) {
    vgpud::host::Host::simulated(&s.host.root)
        .write_attr(&s.host.path(rel), value)
        .unwrap_or_else(|e| panic!("external write of {value:?} to {rel}: {e}"));
}

fn uuid(n: u32) -> String {
    format!("5eed0000-0000-4000-8000-{n:012x}")
}

async fn listed(m: &ManagerProxy<'_>) -> Vec<String> {
    m.list_devices()
        .await
        .expect("ListDevices")
        .into_iter()
        .map(|d| d.0)
        .collect()
}

#[tokio::test]
async fn a_device_made_and_removed_by_another_process_is_announced_within_a_second() {
    let (s, addr) = setup(&["mtty"]).await;
    let m = s.manager().await;
    let mut created = m.receive_device_created().await.expect("DeviceCreated");
    let mut removed = m.receive_device_removed().await.expect("DeviceRemoved");
    let om = zbus::fdo::ObjectManagerProxy::builder(&s.conn)
        .destination("org.vgpud1")
        .path("/org/vgpud1")
        .build()
        .await
        .expect("ObjectManager");
    let mut added = om
        .receive_interfaces_added()
        .await
        .expect("InterfacesAdded");
    let looks = all_full_looks(&addr);

    let id = uuid(1);
    let written = Instant::now();
    external_write(&s, MTTY_CREATE, &id);
    let sig = tokio::time::timeout(Duration::from_secs(1), created.next())
        .await
        .expect("DeviceCreated within 1 s of the write, with no call")
        .expect("stream");
    let args = sig.args().expect("args");
    assert_eq!(args.uuid, id);
    let sig = tokio::time::timeout(Duration::from_secs(1), added.next())
        .await
        .expect("InterfacesAdded within 1 s")
        .expect("stream");
    assert_eq!(
        sig.args().expect("args").object_path.as_str(),
        args.path.as_str()
    );
    let latency = written.elapsed();
    let log = s.daemon.log_text();
    assert!(
        log.lines().any(|l| l.contains("uevent")
            && l.contains("action=add")
            && l.contains("subsystem=mdev")
            && l.contains(&format!("device {id} read again: added"))),
        "the log names the uevent:\n{log}"
    );

    external_write(&s, &format!("sys/bus/mdev/devices/{id}/remove"), "1");
    let sig = tokio::time::timeout(Duration::from_secs(1), removed.next())
        .await
        .expect("DeviceRemoved within 1 s of the write")
        .expect("stream");
    assert_eq!(sig.args().expect("args").uuid, id);
    // The first of its uevents read after the removal (the add's bind, when the removal
    // came that soon; else its unbind or remove) finds it gone: a uevent says where to look,
    // the host says what is there.
    let log = s.daemon.log_text();
    assert!(
        log.lines().any(|l| l.contains("uevent")
            && l.contains("subsystem=mdev")
            && l.contains(&format!("device {id} read again: removed"))),
        "{log}"
    );
    assert_eq!(all_full_looks(&addr), looks, "no full look was needed");
    eprintln!("from the write to DeviceCreated and InterfacesAdded: {latency:?}");
}

#[tokio::test]
async fn list_devices_answers_from_memory() {
    let (s, addr) = setup(&["mtty"]).await;
    let m = s.manager().await;
    let before = all_full_looks(&addr);
    assert_eq!(full_looks(&addr, "start"), 1.0);
    for _ in 0..50 {
        listed(&m).await;
        m.list_types().await.expect("ListTypes");
        m.list_gpus().await.expect("ListGpus");
    }
    assert_eq!(all_full_looks(&addr), before, "50 list calls made no look");

    // A device made in the tree with plain file writes (no kernel, so no uevent) is not
    // listed: a list call does not look.
    let id = uuid(2);
    let parent = s.host.path("sys/devices/virtual/mtty/mtty");
    let dev = parent.join(&id);
    std::fs::create_dir(&dev).expect("device dir");
    std::os::unix::fs::symlink("../mdev_supported_types/mtty-1", dev.join("mdev_type"))
        .expect("mdev_type");
    std::os::unix::fs::symlink(&dev, s.host.path(&format!("sys/bus/mdev/devices/{id}")))
        .expect("bus link");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!listed(&m).await.contains(&id), "listed without a uevent");

    // Capacity too: a figure changed in the tree with a plain write (no event) is not seen
    // by ListTypes or GetCapacity.
    let available = |types: &[(String, String, String, u64, u32, u32)]| {
        types
            .iter()
            .find(|t| t.0 == "mtty" && t.1 == "mtty-1")
            .map(|t| t.5)
            .expect("mtty-1 listed")
    };
    let known = available(&m.list_types().await.expect("ListTypes"));
    let capacity = m
        .get_capacity("mtty-1", common::proxy::opts(&[]))
        .await
        .expect("GetCapacity");
    assert_eq!(capacity, known);
    std::fs::write(
        s.host
            .path("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/available_instances"),
        "3\n",
    )
    .expect("plain write");
    assert_eq!(available(&m.list_types().await.expect("ListTypes")), known);
    assert_eq!(
        m.get_capacity("mtty-1", common::proxy::opts(&[]))
            .await
            .expect("GetCapacity"),
        known
    );

    // Its uevent (as the kernel would have sent it) makes vgpud read that one device.
    let (socket, _) = vgpud_sim::uevent::paths(&s.host.root);
    let devpath = format!("/devices/virtual/mtty/mtty/{id}");
    let message = format!(
        "add@{devpath}\0ACTION=add\0DEVPATH={devpath}\0SUBSYSTEM=mdev\0MDEV_TYPE=mtty-1\0SEQNUM=999\0"
    );
    std::os::unix::net::UnixDatagram::unbound()
        .expect("socket")
        .send_to(message.as_bytes(), &socket)
        .expect("send the uevent");
    let deadline = Instant::now() + Duration::from_secs(2);
    while !listed(&m).await.contains(&id) {
        assert!(Instant::now() < deadline, "not listed after its uevent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        all_full_looks(&addr),
        before,
        "one device read, no full look"
    );
    // And its parent's types again.
    assert_eq!(available(&m.list_types().await.expect("ListTypes")), 3);
    assert!(
        sample(
            &addr,
            "vgpud_uevents_total{subsystem=\"mdev\",action=\"add\"}"
        ) >= 1.0
    );
}

#[tokio::test]
async fn lost_uevents_lead_to_exactly_one_full_look_and_nothing_is_missed() {
    let (s, addr) = setup(&["mtty"]).await;
    let m = s.manager().await;
    assert_eq!(full_looks(&addr, "overrun"), 0.0);
    let (_, marker) = vgpud_sim::uevent::paths(&s.host.root);
    let pid = s.daemon.pid().to_string();
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|st| st.success());
        assert!(ok, "kill {sig} {pid}");
    };
    // A stopped vgpud reads nothing: its socket's queue fills, and the kernel drops events.
    signal("-STOP");
    let ids: Vec<String> = (0..24).map(|n| uuid(100 + n)).collect();
    for id in &ids {
        external_write(&s, MTTY_CREATE, id);
    }
    signal("-CONT");
    assert!(
        marker.exists() || full_looks(&addr, "overrun") > 0.0,
        "the queue overran"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = listed(&m).await;
        if ids.iter().all(|id| now.contains(id)) && full_looks(&addr, "overrun") >= 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every device is listed after the overrun: {now:?}\n{}",
            s.daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(full_looks(&addr, "overrun"), 1.0, "exactly one full look");
    assert!(!marker.exists());
    let log = s.daemon.log_text();
    assert!(log.contains("uevents were lost"), "{log}");
}

#[tokio::test]
async fn passthrough_capacity_is_read_once_after_a_change_and_then_answered_from_memory() {
    let (s, _addr) = setup(&["passthrough"]).await;
    let m = s.manager().await;
    let capacity = |parent: Option<&'static str>| {
        let m = &m;
        async move {
            let o: &[(&str, &str)] = match parent {
                Some(p) => &[("parent", p)],
                None => &[],
            };
            m.get_capacity("passthrough", common::proxy::opts(o))
                .await
                .expect("GetCapacity passthrough")
        }
    };
    // The clean GPU and its audio function can go; the console's and the one sharing its
    // group with a NIC cannot.
    let whole = capacity(None).await;
    assert!(whole >= 1, "{whole}");
    assert_eq!(capacity(Some("0000:21:00.0")).await, 1);
    // The IOMMU taken away with plain file writes, which no kernel sends a uevent for (nor
    // makes at run time): the answer comes from memory, so it does not change.
    let iommus = s.host.path("sys/class/iommu");
    for e in std::fs::read_dir(&iommus).expect("sys/class/iommu") {
        let p = e.expect("entry").path();
        std::fs::remove_file(&p)
            .or_else(|_| std::fs::remove_dir_all(&p))
            .expect("remove an IOMMU");
    }
    for _ in 0..3 {
        assert_eq!(capacity(None).await, whole, "answered from memory");
        assert_eq!(capacity(Some("0000:21:00.0")).await, 1);
    }
    // A uevent of the GPU (its driver unbound and bound by another process) makes vgpud
    // read it again: now no GPU can go, and the answer says so.
    external_write(&s, "sys/bus/pci/drivers/nvidia/unbind", "0000:21:00.0");
    external_write(&s, "sys/bus/pci/drivers/nvidia/bind", "0000:21:00.0");
    let deadline = Instant::now() + Duration::from_secs(2);
    while capacity(Some("0000:21:00.0")).await != 0 {
        assert!(
            Instant::now() < deadline,
            "the GPU's uevents did not make vgpud read its passthrough checks again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(capacity(None).await, 0);
}

#[tokio::test]
async fn a_driver_unbind_and_bind_behind_vgpuds_back_is_seen_through_its_uevent() {
    let (s, addr) = setup(&["passthrough"]).await;
    let m = s.manager().await;
    let gpu = "0000:21:00.0";
    let driver_of = |gpus: &[(String, String, String, String, zbus::OwnedObjectPath)]| {
        gpus.iter().find(|g| g.0 == gpu).map(|g| g.2.clone())
    };
    let gpus = m.list_gpus().await.expect("ListGpus");
    assert_eq!(driver_of(&gpus).as_deref(), Some("nvidia"), "{gpus:?}");
    let looks = all_full_looks(&addr);

    external_write(&s, "sys/bus/pci/drivers/nvidia/unbind", gpu);
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let gpus = m.list_gpus().await.expect("ListGpus");
        if driver_of(&gpus).as_deref() != Some("nvidia") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the unbind was not seen in 1 s: {gpus:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    external_write(&s, "sys/bus/pci/drivers/nvidia/bind", gpu);
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let gpus = m.list_gpus().await.expect("ListGpus");
        if driver_of(&gpus).as_deref() == Some("nvidia") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bind was not seen in 1 s: {gpus:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = s.daemon.log_text();
    for action in ["action=unbind", "action=bind"] {
        assert!(
            log.lines()
                .any(|l| l.contains("uevent") && l.contains(action) && l.contains(gpu)),
            "{action}:\n{log}"
        );
    }
    assert_eq!(all_full_looks(&addr), looks, "no full look was needed");
}

#[tokio::test]
async fn without_a_uevent_socket_vgpud_looks_at_the_whole_host_periodically() {
    let s = Setup::with_args(
        &["mtty"],
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--no-uevents",
            "--poll-interval-ms",
            "100",
        ],
    )
    .await;
    let addr = listener(&s);
    let m = s.manager().await;
    let log = s.daemon.log_text();
    assert!(log.contains("cannot listen to uevents"), "{log}");
    let id = uuid(3);
    external_write(&s, MTTY_CREATE, &id);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !listed(&m).await.contains(&id) {
        assert!(
            Instant::now() < deadline,
            "the periodic look did not find it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(full_looks(&addr, "no-listener") >= 1.0);
    assert_eq!(
        sample(
            &addr,
            "vgpud_uevents_total{subsystem=\"mdev\",action=\"add\"}"
        ),
        0.0
    );
}

#[tokio::test]
async fn a_shell_write_through_sim_host_poke_is_announced_like_the_kernels() {
    let s = Setup::new(&["mtty"]).await;
    let m = s.manager().await;
    let mut created = m.receive_device_created().await.expect("DeviceCreated");
    let id = uuid(4);
    let root = s.host.root.display().to_string();
    let poke = |path: &str, value: &str| {
        Command::new(common::daemon::vgpud_bin())
            .args(["--root", &root, "sim-host", "--poke", path, value])
            .output()
            .expect("vgpud sim-host --poke")
    };
    let out = poke(MTTY_CREATE, &id);
    assert!(out.status.success(), "{out:?}");
    let sig = tokio::time::timeout(Duration::from_secs(1), created.next())
        .await
        .expect("DeviceCreated within 1 s")
        .expect("stream");
    assert_eq!(sig.args().expect("args").uuid, id);
    // The kernel's errno, as a shell's echo would report it: the UUID exists.
    let again = poke(MTTY_CREATE, &id);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("File exists"), "{err}");
    // Only the kernel's files.
    assert_eq!(poke("etc/passwd", "x").status.code(), Some(2));
}

/// What a stream gives next, within 1 s (with no call to vgpud meanwhile).
async fn within_a_second<T>(
    stream: &mut (impl futures_util::Stream<Item = T> + Unpin),
    what: &str,
) -> T {
    tokio::time::timeout(Duration::from_secs(1), stream.next())
        .await
        .unwrap_or_else(|_| panic!("{what} within 1 s, with no call"))
        .expect("stream")
}

#[tokio::test]
async fn writes_into_the_simulated_tree_by_the_real_mdevctl_and_a_shell_are_applied_and_announced()
{
    let (s, addr) = setup(&["mtty"]).await;
    let m = s.manager().await;
    let mut created = m.receive_device_created().await.expect("DeviceCreated");
    let mut removed = m.receive_device_removed().await.expect("DeviceRemoved");
    let looks = all_full_looks(&addr);
    let create = s.host.path(MTTY_CREATE);
    let sh = |command: String| {
        let out = Command::new("sh")
            .args(["-c", &command])
            .output()
            .expect("sh");
        assert!(out.status.success(), "{command}: {out:?}");
    };
    let mut created = (&mut created).map(|sig| sig.args().expect("args").uuid.to_string());
    let mut removed = (&mut removed).map(|sig| sig.args().expect("args").uuid.to_string());

    // mdevctl 1.4 starts a device by writing its UUID to the type's `create` file.
    let one = uuid(11);
    let out = s
        .host
        .mdevctl(&["start", "-u", &one, "-p", "mtty", "-t", "mtty-1"]);
    assert!(out.status.success(), "mdevctl start: {out:?}");
    assert_eq!(within_a_second(&mut created, "DeviceCreated").await, one);
    assert!(s
        .host
        .path(&format!("sys/bus/mdev/devices/{one}/mdev_type"))
        .exists());
    assert_eq!(
        std::fs::read(&create).expect("create"),
        b"",
        "emptied again"
    );
    let active = s.host.mdevctl_json(&["list", "--dumpjson"]).to_string();
    assert!(active.contains(&one), "mdevctl lists it: {active}");
    // And stops it by writing 1 to its `remove`.
    let out = s.host.mdevctl(&["stop", "-u", &one]);
    assert!(out.status.success(), "mdevctl stop: {out:?}");
    assert_eq!(within_a_second(&mut removed, "DeviceRemoved").await, one);

    // A shell's echo: the UUID and its newline (37 bytes, as the kernel takes them).
    let two = uuid(12);
    sh(format!("echo {two} > '{}'", create.display()));
    assert_eq!(within_a_second(&mut created, "DeviceCreated").await, two);
    let remove = s.host.path(&format!("sys/bus/mdev/devices/{two}/remove"));
    sh(format!("echo 1 > '{}'", remove.display()));
    assert_eq!(within_a_second(&mut removed, "DeviceRemoved").await, two);

    // What the kernel refuses makes nothing; the writer got no error, vgpud's log says why.
    sh(format!("echo not-a-uuid > '{}'", create.display()));
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let log = s.daemon.log_text();
        if log.lines().any(|l| {
            l.contains("refused a write another process made")
                && l.contains("value=not-a-uuid")
                && l.contains("Invalid argument")
        }) {
            break;
        }
        assert!(Instant::now() < deadline, "the refusal is logged:\n{log}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(listed(&m).await.is_empty());
    assert_eq!(all_full_looks(&addr), looks, "the uevents told it all");
    // Watching the tree costs nothing while nobody writes into it.
    let cpu = || sample(&addr, "vgpud_process_cpu_seconds_total");
    let before = cpu();
    assert!(before > 0.0, "vgpud's process CPU is read from its metrics");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = cpu() - before;
    assert!(idle < 0.25, "{idle} s of CPU in 1 s with nobody writing");
}

#[test]
fn the_real_kernels_uevents_are_read_from_netlink_and_parsed() {
    const TEST: &str = "the_real_kernels_uevents_are_read_from_netlink_and_parsed";
    if !common::skip::require_root(TEST, "writes /sys/class/mem/null/uevent") {
        return;
    }
    // The real host's listener (a NETLINK_KOBJECT_UEVENT socket bound to the kernel's group).
    let listener = match vgpud::daemon::uevents::open(&vgpud::host::Host::new("/")) {
        Ok(l) => l,
        Err(e) => return common::skip::cannot_run(TEST, &format!("no uevent socket: {e}")),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; vgpud::host::uevent::MAX_MESSAGE + 1];
        while let Ok(read) = listener.read(&mut buf) {
            if tx.send(read).is_err() {
                return;
            }
        }
    });
    // A synthetic uevent of a device vgpud never manages: harmless to the host.
    if let Err(e) = std::fs::write("/sys/class/mem/null/uevent", "change") {
        return common::skip::cannot_run(TEST, &format!("cannot ask the kernel for a uevent: {e}"));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(vgpud::daemon::uevents::Read::Event(ev))
                if ev.devpath == "/devices/virtual/mem/null" =>
            {
                assert_eq!(ev.action, "change");
                assert_eq!(ev.subsystem(), Some("mem"));
                assert!(ev.seqnum().is_some(), "{ev:?}");
                return;
            }
            Ok(_) => {}
            Err(e) => panic!("no uevent of /dev/null within 5 s: {e}"),
        }
    }
}

/// The number of the last uevent the simulated kernel sent (its counter file).
fn last_seqnum(s: &Setup) -> u64 {
    let path = s.host.path("run/vgpud-simulator/uevent-seqnum");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .expect("a number")
}

#[tokio::test]
async fn a_vf_taken_from_the_nvidia_driver_behind_vgpuds_back_leaves_its_gpu_one_vgpu_fewer() {
    // An L40S's SR-IOV vGPUs each need a VF bound to nvidia: 32 VFs hold 32 of its 1 GB
    // type (its 48 GB would hold 48). A VF unbound by another process (driverctl, an echo)
    // sends a uevent of the VF, which is no GPU vgpud lists: the room of its GPU must
    // follow, without a call looking at the host.
    let (s, addr) = setup(&["nvidia-l40s"]).await;
    let m = s.manager().await;
    let pf = "0000:41:00.0";
    m.set_vf_count(pf, 32, std::collections::HashMap::new())
        .await
        .expect("VFs on");
    // SetVfCount's own uevents (an add and a bind per VF) are all applied first: each of
    // them forgets the types too, and would hide an unbind passed over.
    s.daemon
        .wait_for_log(&format!("uevent seqnum={} ", last_seqnum(&s)), 1)
        .await;
    assert_eq!(
        common::proxy::listed_room(&m, pf, "L40S-1Q").await,
        32,
        "one per VF"
    );
    let looks = all_full_looks(&addr);
    let vf = "0000:41:00.4";
    // The 1Q room ListTypes gives reaches `want` within 1 s of `what`.
    let room_becomes = |want: u32, what: &'static str| {
        let (s, m) = (&s, &m);
        async move {
            let deadline = Instant::now() + Duration::from_secs(1);
            loop {
                let now = common::proxy::listed_room(m, pf, "L40S-1Q").await;
                if now == want {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the room is still {now}, not {want}, 1 s after {what} of {vf}:\n{}",
                    s.daemon.log_text()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    external_write(&s, "sys/bus/pci/drivers/nvidia/unbind", vf);
    room_becomes(31, "the unbind from nvidia").await;
    external_write(&s, "sys/bus/pci/drivers/nvidia/bind", vf);
    room_becomes(32, "the bind to nvidia").await;
    // The unbind itself was applied (its event says the function is a display controller,
    // PCI_CLASS, though no driver any more), not only some other event that came near it.
    let log = s.daemon.log_text();
    let unbind = log.lines().find(|l| {
        l.contains("uevent") && l.contains("action=unbind") && l.contains(&format!("/{vf} "))
    });
    let unbind = unbind.unwrap_or_else(|| panic!("no uevent line of the unbind of {vf}:\n{log}"));
    assert!(
        !unbind.contains("nothing vgpud manages"),
        "the VF's unbind was passed over: {unbind}"
    );
    assert_eq!(all_full_looks(&addr), looks, "no full look was needed");
}
