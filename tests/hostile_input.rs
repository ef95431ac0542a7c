//! What a hostile local caller (or a careless script) sends, through a real dbus-daemon and a
//! real vgpud: every argument is bounded before any work, errors quote little of what they
//! got, and no request takes a device that serves a guest.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use zbus::Variant;

use common::daemon::{Daemon, Policy, TestBus, TestHost};
use common::proxy::{error_message, error_name, opts, ManagerProxy};
use common::setup::Setup;

/// vgpud's resident memory in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test]
async fn huge_arguments_are_refused_before_any_work_and_not_echoed() {
    let s = Setup::new(&["mixed"]).await;
    let m = s.manager().await;
    let before = rss_kib(s.daemon.pid());
    let huge = "n".repeat(8 << 20);
    let started = Instant::now();
    for _ in 0..8 {
        let err = m
            .render_domain(&huge, &[], HashMap::new())
            .await
            .expect_err("an 8 MiB name");
        assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
        assert!(
            error_message(&err).len() < 300,
            "the error quotes little: {} bytes",
            error_message(&err).len()
        );
    }
    let err = m
        .create_device(&huge, HashMap::new())
        .await
        .expect_err("an 8 MiB type");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    let long_owner = "o".repeat(5000);
    let err = m
        .create_device("mtty-1", opts(&[("owner", long_owner.as_str())]))
        .await
        .expect_err("a 5000-byte owner");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    let many: HashMap<String, Variant<'_>> = (0..100)
        .map(|i| (format!("k{i}"), Variant::from(true)))
        .collect();
    let many_ref: HashMap<&str, Variant<'_>> =
        many.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let err = m
        .create_device("mtty-1", many_ref)
        .await
        .expect_err("100 options");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    let nested: HashMap<&str, Variant<'_>> =
        [("owner", Variant::from(vec!["a".repeat(1000); 1000]))].into();
    let err = m
        .create_device("mtty-1", nested)
        .await
        .expect_err("a nested option");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    let after = rss_kib(s.daemon.pid());
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    // Meanwhile the daemon serves: a create still works, and quickly.
    let (uuid, _) = m
        .create_device("mtty-1", HashMap::new())
        .await
        .expect("create");
    m.remove_device(&uuid, HashMap::new())
        .await
        .expect("remove");
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// A subscriber to every signal of vgpud that never reads them (a `gdbus monitor` stopped with
/// SIGSTOP) holds up nobody: the bus queues its signals or drops it, vgpud's memory stays put
/// over 300 creates and removes, each with its signals, and calls keep being answered.
#[tokio::test]
async fn a_subscriber_that_never_reads_does_not_grow_vgpud() {
    let s = Setup::new(&["mtty"]).await;
    let m = s.manager().await;
    let cycle = |n: usize| {
        let m = m.clone();
        async move {
            for _ in 0..n {
                let (uuid, _) = m
                    .create_device("mtty-1", HashMap::new())
                    .await
                    .expect("create");
                m.remove_device(&uuid, HashMap::new())
                    .await
                    .expect("remove");
            }
        }
    };
    let mut subscriber = std::process::Command::new("gdbus")
        .args([
            "monitor",
            "--address",
            &s.bus.address,
            "--dest",
            "org.vgpud1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("gdbus (apt-get install libglib2.0-bin)");
    // Subscribed once it reports the first of vgpud's signals; then it stops reading.
    let stdout = subscriber.stdout.take().expect("stdout");
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("DeviceCreated") {
                let _ = seen_tx.send(());
                break;
            }
        }
        // The pipe stays open and unread from here on.
        std::thread::sleep(Duration::from_secs(3600));
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen_rx.try_recv().is_err() {
        assert!(
            Instant::now() < deadline,
            "gdbus monitor saw no DeviceCreated"
        );
        cycle(1).await;
    }
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &subscriber.id().to_string()])
        .status()
        .expect("kill -STOP");
    assert!(stopped.success(), "kill -STOP");
    let state = std::fs::read_to_string(format!("/proc/{}/status", subscriber.id()))
        .expect("the subscriber's status");
    assert!(
        state
            .lines()
            .any(|l| l.starts_with("State:") && l.contains("stopped")),
        "the subscriber is stopped: {state}"
    );
    cycle(30).await;
    let before = rss_kib(s.daemon.pid());
    let started = Instant::now();
    cycle(300).await;
    let after = rss_kib(s.daemon.pid());
    let _ = subscriber.kill();
    let _ = subscriber.wait();
    eprintln!("vgpud's RSS: {before} KiB before 300 creates and removes, {after} KiB after");
    assert!(
        after < before + 16 * 1024,
        "vgpud's RSS grew from {before} KiB to {after} KiB with a subscriber that never reads"
    );
    let t = Instant::now();
    m.list_gpus().await.expect("ListGpus");
    assert!(
        t.elapsed() < Duration::from_secs(5) && started.elapsed() < Duration::from_secs(120),
        "vgpud kept answering"
    );
}

#[tokio::test]
async fn domain_names_and_sizes_a_host_cannot_have_are_invalid_arguments() {
    let s = Setup::new(&["mixed"]).await;
    let m = s.manager().await;
    let rtl = "vm\u{202e}gpj.exe";
    let long = "v".repeat(1 << 20);
    for name in [" ", "", ".", "..", " vm", "vm\t", "a/b", rtl, long.as_str()] {
        let err = m
            .render_domain(name, &[], HashMap::new())
            .await
            .expect_err(name);
        assert_eq!(
            error_name(&err),
            "org.vgpud1.Error.InvalidArgument",
            "{name:?}: {}",
            error_message(&err)
        );
    }
    for (key, value) in [
        ("memory_mib", Variant::from(u64::MAX)),
        ("vcpus", Variant::from(u32::MAX)),
        ("memory_mib", Variant::from(0u64)),
    ] {
        let err = m
            .render_domain("vm1", &[], [(key, value)].into())
            .await
            .expect_err(key);
        assert_eq!(
            error_name(&err),
            "org.vgpud1.Error.InvalidArgument",
            "{key}"
        );
    }
    m.render_domain("vm-1_ok", &[], HashMap::new())
        .await
        .expect("a plain name renders");
}

#[tokio::test]
async fn a_vf_count_a_gpu_cannot_have_is_invalid_even_when_it_is_busy() {
    let (s, gpu) = l40s_with_vfs().await;
    let m = s.manager().await;
    m.create_device("L40S-4Q", opts(&[("parent", gpu)]))
        .await
        .expect("a vGPU");
    let err = m
        .set_vf_count(gpu, u32::MAX, HashMap::new())
        .await
        .expect_err("out of range");
    assert_eq!(
        error_name(&err),
        "org.vgpud1.Error.InvalidArgument",
        "{}",
        error_message(&err)
    );
}

#[tokio::test]
async fn the_vfs_of_a_gpu_passed_through_are_not_changed() {
    let s = Setup::new(&["nvidia-l40s"]).await;
    let m = s.manager().await;
    let gpu = "0000:41:00.0";
    let (uuid, _) = m
        .create_device("passthrough", opts(&[("parent", gpu)]))
        .await
        .expect("pass the GPU through");
    let err = m
        .set_vf_count(gpu, 4, HashMap::new())
        .await
        .expect_err("VFs of a GPU a guest has");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");
    assert!(
        error_message(&err).contains(&uuid),
        "{}",
        error_message(&err)
    );
    assert!(
        !s.host
            .path(&format!("var/lib/vgpud/sriov/{gpu}.json"))
            .exists(),
        "nothing was recorded for the next boot"
    );
    m.remove_device(&uuid, HashMap::new())
        .await
        .expect("give back");
    m.set_vf_count(gpu, 32, HashMap::new())
        .await
        .expect("VFs once the GPU is back");
}

/// The L40S host with its VFs enabled, and its GPU.
async fn l40s_with_vfs() -> (Setup, &'static str) {
    let s = Setup::new(&["nvidia-l40s"]).await;
    let gpu = "0000:41:00.0";
    s.manager()
        .await
        .set_vf_count(gpu, 32, HashMap::new())
        .await
        .expect("enable VFs");
    (s, gpu)
}

/// The device's VF (its `Address`).
async fn vf_of(s: &Setup, uuid: &str) -> String {
    common::proxy::device_proxy(&s.conn, uuid)
        .await
        .address()
        .await
        .expect("Address")
}

#[tokio::test]
async fn a_vf_that_carries_another_tenants_vgpu_is_not_passed_through() {
    let (s, gpu) = l40s_with_vfs().await;
    let m = s.manager().await;
    let (tenant, _) = m
        .create_device("L40S-4Q", opts(&[("parent", gpu), ("owner", "tenant-a")]))
        .await
        .expect("a vGPU");
    let vf = vf_of(&s, &tenant).await;
    let err = m
        .create_device("passthrough", opts(&[("parent", vf.as_str())]))
        .await
        .expect_err("the VF serves a guest");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");
    assert!(
        error_message(&err).contains(&tenant),
        "{}",
        error_message(&err)
    );
    let err = m
        .create_device(
            "passthrough",
            [
                ("parent", Variant::from(vf.as_str())),
                ("force", Variant::from(true)),
            ]
            .into(),
        )
        .await
        .expect_err("force does not take another tenant's vGPU");
    assert_eq!(error_name(&err), "org.vgpud1.Error.Busy");
    let current = std::fs::read_to_string(s.host.path(&format!(
        "sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
    )))
    .expect("current_vgpu_type");
    assert_ne!(current.trim(), "0", "the tenant's vGPU is still there");
    let free = m
        .get_capacity("passthrough", opts(&[("parent", vf.as_str())]))
        .await
        .expect("capacity");
    assert_eq!(free, 0, "GetCapacity agrees");
}

#[tokio::test]
async fn a_placement_asked_for_is_checked_and_taken() {
    let (s, gpu) = l40s_with_vfs().await;
    let m = s.manager().await;
    let at = |id: &str| format!("frame_rate_limiter=0,vgpu-placement-id={id}");
    // Equal-size mode places nothing.
    let err = m
        .create_device("L40S-4Q", opts(&[("parent", gpu), ("params", &at("6"))]))
        .await
        .expect_err("no placements in equal-size mode");
    assert_eq!(error_name(&err), "org.vgpud1.Error.InvalidArgument");
    m.set_heterogeneous_mode(gpu, true, HashMap::new())
        .await
        .expect("heterogeneous mode");
    // 4Q vGPUs sit on 6 GiB placements: 0, 6, ... 42.
    let (uuid, _) = m
        .create_device("L40S-4Q", opts(&[("parent", gpu), ("params", &at("6"))]))
        .await
        .expect("at placement 6");
    let vf = vf_of(&s, &uuid).await;
    let placed = std::fs::read_to_string(
        s.host
            .path(&format!("sys/bus/pci/devices/{vf}/nvidia/placement_id")),
    )
    .expect("placement_id");
    assert_eq!(placed.trim(), "6", "the vGPU is where it was asked to be");
    let err = m
        .create_device("L40S-4Q", opts(&[("parent", gpu), ("params", &at("6"))]))
        .await
        .expect_err("6 is taken");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NoCapacity");
    assert!(
        error_message(&err).contains("placement 6 is taken"),
        "{}",
        error_message(&err)
    );
    for bad in ["-1", "abc", "99", "3"] {
        let err = m
            .create_device("L40S-4Q", opts(&[("parent", gpu), ("params", &at(bad))]))
            .await
            .expect_err(bad);
        assert_eq!(
            error_name(&err),
            "org.vgpud1.Error.InvalidArgument",
            "{bad}: {}",
            error_message(&err)
        );
    }
}

/// The environment variable that hands the flood's bus to [`a_flood_from_nobody`].
const FLOOD_ENV: &str = "VGPUD_TEST_FLOOD_BUS";
/// How many calls nobody pipelines on one connection.
const FLOOD_CALLS: usize = 600;

#[tokio::test]
async fn a_flood_of_refused_calls_is_bounded_in_flight_and_summed_up_in_the_audit() {
    if !common::skip::require_root(
        "a_flood_of_refused_calls_is_bounded_in_flight_and_summed_up_in_the_audit",
        "to call as nobody with setpriv",
    ) {
        return;
    }
    // The system bus's policy, which lets every user connect and call vgpud, and no polkitd:
    // vgpud refuses every user but root.
    let host = TestHost::new(&["mixed"]);
    let bus = TestBus::start(Policy::System);
    let daemon = Daemon::start(&bus, &host).await;
    // This test binary again, as nobody, for its other test: the flood itself.
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().expect("this test binary"))
        .args([
            "a_flood_from_nobody",
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FLOOD_ENV, &bus.address)
        .output()
        .expect("setpriv (util-linux)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "the flood did not run as nobody:\n{text}"
    );
    let busy: usize = text
        .lines()
        .find_map(|l| l.split("flood busy: ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .expect("the flood's count");
    eprintln!("{FLOOD_CALLS} calls of nobody: {busy} answered Busy at once");
    // Root is served meanwhile and after.
    ManagerProxy::new(&bus.connect().await)
        .await
        .expect("proxy")
        .list_gpus()
        .await
        .expect("root's ListGpus");
    // Each refusal is either logged, within the rate limit of its user, or counted in one
    // summary line (calls refused before their connection's credentials were known count
    // as an unknown user's).
    let count = |log: &str| {
        let logged = log.lines().filter(|l| l.contains("audit: refused")).count();
        let dropped: usize = log
            .lines()
            .filter_map(|l| l.split("audit: ").nth(1))
            .filter_map(|l| l.split_once(" refusals of uid "))
            .map(|(n, _)| n.parse::<usize>().expect("a count"))
            .sum();
        (logged, dropped)
    };
    let deadline = Instant::now() + vgpud::audit::REFUSAL_WINDOW + Duration::from_secs(5);
    let (logged, dropped) = loop {
        let (logged, dropped) = count(&daemon.log_text());
        if logged + dropped >= FLOOD_CALLS || Instant::now() > deadline {
            break (logged, dropped);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        logged <= 2 * vgpud::audit::REFUSALS_PER_WINDOW as usize,
        "{logged} audit lines for {FLOOD_CALLS} refused calls of one user"
    );
    assert_eq!(
        logged + dropped,
        FLOOD_CALLS,
        "every refusal is logged or counted as dropped ({logged} logged, {dropped} dropped)"
    );
}

#[tokio::test]
#[ignore = "run as nobody by a_flood_of_refused_calls_is_bounded_in_flight_and_summed_up_in_the_audit"]
async fn a_flood_from_nobody() {
    let Ok(address) = std::env::var(FLOOD_ENV) else {
        return;
    };
    let conn = zbus::connection::Builder::address(address.as_str())
        .build()
        .await
        .expect("nobody connects");
    let m = ManagerProxy::builder(&conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("proxy");
    // A long owner, yet within a name's length: refused for who calls, not for its size.
    let owner = "pool-".repeat(50);
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..FLOOD_CALLS {
        let (m, owner) = (m.clone(), owner.clone());
        calls.spawn(async move {
            m.create_device("mtty-1", opts(&[("owner", owner.as_str())]))
                .await
                .map(drop)
        });
    }
    let mut busy = 0;
    while let Some(r) = calls.join_next().await {
        let err = r.expect("task").expect_err("nobody is refused");
        if error_name(&err) == "org.vgpud1.Error.Busy" {
            busy += 1;
            assert!(
                error_message(&err).contains("call again when one is answered"),
                "{}",
                error_message(&err)
            );
        } else {
            // zbus folds the standard names into its own error type.
            assert!(
                matches!(err, zbus::Error::FDO(ref e) if matches!(**e, zbus::fdo::Error::AccessDenied(_))),
                "{err}"
            );
        }
    }
    println!("flood busy: {busy}");
}

#[tokio::test]
async fn owners_that_would_show_as_another_are_invalid_arguments_naming_the_character() {
    let s = Setup::new(&["mixed"]).await;
    let m = s.manager().await;
    for (owner, code, at) in [
        ("pool-day ", "U+0020", 9),
        ("\u{2003}pool-day", "U+2003", 1),
        ("pool-\u{202e}yad", "U+202E", 6),
        ("pool\u{200b}-day", "U+200B", 5),
        ("\u{feff}pool-day", "U+FEFF", 1),
        ("pool\u{2028}day", "U+2028", 5),
    ] {
        let err = m
            .create_device("mtty-1", opts(&[("owner", owner)]))
            .await
            .expect_err(owner);
        assert_eq!(
            error_name(&err),
            "org.vgpud1.Error.InvalidArgument",
            "{owner:?}: {}",
            error_message(&err)
        );
        assert!(
            error_message(&err).contains(&format!("{code} at character {at}")),
            "{owner:?}: {}",
            error_message(&err)
        );
    }
    assert!(
        m.list_devices().await.expect("ListDevices").is_empty(),
        "no device was made"
    );
    let (uuid, _) = m
        .create_device("mtty-1", opts(&[("owner", "pool day-é")]))
        .await
        .expect("an owner with inner spaces and accents is fine");
    m.remove_device(&uuid, HashMap::new())
        .await
        .expect("remove");
}
