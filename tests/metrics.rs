//! Prometheus metrics end to end: a real vgpud on a simulated host with its metrics listener
//! and textfile on, driven over D-Bus, scraped over HTTP and parsed by the Prometheus
//! project's own Python parser (`prometheus_client.parser`, Debian's
//! python3-prometheus-client).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use common::metrics::{http, listener};
use common::setup::Setup;
use vgpud_client::{Client, Options};

/// Every sample, parsed by prometheus_client's text-format parser: `name{k="v",...}` →
/// value (labels sorted), or `None` when the parser is not installed (then the caller skips,
/// loudly).
fn parse(text: &str) -> Option<BTreeMap<String, f64>> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join('%s="%s"' % kv for kv in sorted(s.labels.items()))
        out["%s{%s}" % (s.name, labels)] = s.value
print(json.dumps(out))
"#;
    let probe = Command::new("/usr/bin/python3")
        .args(["-c", "import prometheus_client.parser"])
        .output()
        .ok()?;
    if !probe.status.success() {
        return None;
    }
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("parser");
    assert!(
        out.status.success(),
        "the Prometheus parser refused vgpud's metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("parser output"))
}

fn sample(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("no sample {key} in {:#?}", m.keys().collect::<Vec<_>>()))
}

#[tokio::test]
async fn metrics_count_calls_devices_capacity_and_telemetry_and_parse_as_prometheus() {
    let textfile = tempfile::tempdir().expect("tempdir");
    let prom = textfile.path().join("vgpud.prom");
    let prom_arg = prom.to_string_lossy().into_owned();
    let lib = common::nvml::fake_library().to_string_lossy().into_owned();
    let s = Setup::with_args(
        &["nvidia-turing"],
        &[
            "--nvml-library",
            &lib,
            "--metrics-listen",
            "127.0.0.1:0",
            "--metrics-textfile",
            &prom_arg,
        ],
    )
    .await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    let addr = listener(&s);
    let gpu = c
        .list_gpus()
        .await
        .expect("ListGpus")
        .into_iter()
        .find(|g| g.driver == "nvidia")
        .expect("an NVIDIA GPU")
        .address;
    let before = c
        .capacity("RTX6000-4Q", &Options::new().str("parent", gpu.as_str()))
        .await
        .expect("capacity");
    let mut made = Vec::new();
    for i in 0..3 {
        let (uuid, _) = c
            .create_device(
                "RTX6000-4Q",
                &Options::new()
                    .str("parent", gpu.as_str())
                    .str("owner", format!("vm{i}")),
            )
            .await
            .expect("create");
        made.push(uuid);
    }
    c.remove_device(&made[2], &Options::new())
        .await
        .expect("remove");
    let e = c
        .create_device("no-such-type", &Options::new())
        .await
        .expect_err("NotFound");
    assert_eq!(e.name(), "org.vgpud1.Error.NotFound");
    // A bit more than the renderer's one-second reuse.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let (status, body) = http(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let Some(m) = parse(&body) else {
        common::skip::cannot_run(
            "metrics_count_calls_devices_capacity_and_telemetry_and_parse_as_prometheus",
            "python3-prometheus-client (the Prometheus text parser) is not installed",
        );
        return;
    };
    assert_eq!(
        sample(
            &m,
            r#"vgpud_operations_total{error="ok",method="CreateDevice"}"#
        ),
        3.0
    );
    assert_eq!(
        sample(
            &m,
            r#"vgpud_operations_total{error="org.vgpud1.Error.NotFound",method="CreateDevice"}"#
        ),
        1.0
    );
    assert_eq!(
        sample(
            &m,
            r#"vgpud_operations_total{error="ok",method="RemoveDevice"}"#
        ),
        1.0
    );
    assert_eq!(
        sample(
            &m,
            r#"vgpud_operation_duration_seconds_count{method="CreateDevice"}"#
        ),
        4.0
    );
    assert_eq!(
        sample(&m, r#"vgpud_changes_total{event="device-added"}"#),
        3.0
    );
    assert_eq!(
        sample(&m, r#"vgpud_changes_total{event="device-removed"}"#),
        1.0
    );
    assert_eq!(
        sample(
            &m,
            &format!(
                r#"vgpud_devices{{gpu="{gpu}",kind="mdev",state="active",type="GRID RTX6000-4Q"}}"#
            )
        ),
        2.0
    );
    assert_eq!(
        sample(
            &m,
            &format!(r#"vgpud_available_instances{{gpu="{gpu}",type="GRID RTX6000-4Q"}}"#)
        ),
        f64::from(before - 2)
    );
    assert_eq!(sample(&m, "vgpud_engine_queue_waiting{}"), 0.0);
    assert_eq!(sample(&m, "vgpud_engine_queue_running{}"), 0.0);
    // Telemetry through the fake libnvidia-ml vgpud loads on a simulated host.
    let total = sample(
        &m,
        &format!(r#"vgpud_gpu_memory_total_bytes{{gpu="{gpu}"}}"#),
    );
    assert_eq!(total, 24.0 * 1024.0 * 1024.0 * 1024.0);
    let used = sample(
        &m,
        &format!(r#"vgpud_gpu_memory_used_bytes{{gpu="{gpu}"}}"#),
    );
    assert!(used > 0.0 && used <= total, "{used}");
    assert!(
        sample(
            &m,
            &format!(r#"vgpud_gpu_temperature_celsius{{gpu="{gpu}"}}"#)
        ) > 0.0
    );

    // Where the process's CPU went, by part: each part counted once (a part inside another
    // is left out of the outer one), so together they are at most the process's time. On a
    // simulated host every sysfs write is the simulator's, none the kernel's.
    let part = |p: &str| sample(&m, &format!("vgpud_{p}_cpu_seconds_total{{}}"));
    let parts = [
        "simulated_kernel",
        "nvml",
        "kernel_write",
        "persistence",
        "engine_call",
        "uevent",
    ]
    .map(part);
    for (name, v) in [
        ("simulated kernel", parts[0]),
        ("persistence", parts[3]),
        ("engine calls", parts[4]),
    ] {
        assert!(v > 0.0, "no CPU counted for {name}: {parts:?}");
    }
    assert_eq!(
        parts[2], 0.0,
        "a simulated host's write counted as the kernel's"
    );
    let process = sample(&m, "vgpud_process_cpu_seconds_total{}");
    assert!(
        parts.iter().sum::<f64>() <= process,
        "the parts {parts:?} add up to more than the process's {process} s"
    );

    // The textfile, for node_exporter, holds the same families.
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        if let Ok(t) = std::fs::read_to_string(&prom) {
            if t.contains("RemoveDevice") {
                break t;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no textfile at {}",
            prom.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let t = parse(&text).expect("parser");
    assert!(t.keys().any(|k| k.starts_with("vgpud_devices{")), "{t:?}");
    assert!(
        !std::fs::read_dir(textfile.path())
            .expect("dir")
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().contains("tmp")
                && e.file_name().to_string_lossy().ends_with(".prom")),
        "a temporary file node_exporter would read"
    );

    // Anything but GET /metrics is refused; a request head over 8 KiB too.
    assert_eq!(
        http(&addr, b"GET / HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        http(&addr, b"POST /metrics HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 20_000));
    let (status, _) = http(&addr, &huge);
    assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");
}

#[tokio::test]
async fn the_metrics_listener_serves_only_this_host() {
    let host = common::daemon::TestHost::new(&["mtty"]);
    let out = Command::new(common::daemon::vgpud_bin())
        .args([
            "--simulate",
            "--session",
            "--metrics-listen",
            "0.0.0.0:9835",
            "--root",
        ])
        .arg(&host.root)
        .output()
        .expect("vgpud");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("loopback") && err.contains("0.0.0.0:9835"),
        "{err}"
    );
    // The configuration file's key is checked the same way.
    std::fs::create_dir_all(host.path("etc/vgpud")).expect("etc");
    std::fs::write(
        host.path("etc/vgpud/vgpud.toml"),
        "[metrics]\nlisten = \"192.0.2.1:9835\"\n",
    )
    .expect("vgpud.toml");
    let out = Command::new(common::daemon::vgpud_bin())
        .args(["--simulate", "--session", "--root"])
        .arg(&host.root)
        .output()
        .expect("vgpud");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
}

/// A victim file outside the textfile's directory: root's, 0600, with known content.
fn victim(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, "root's own file, not metrics\n").expect("victim");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("mode");
    path
}

/// Waits up to 20 s for `done`; fails saying `what`, with vgpud's log.
async fn wait_for(s: &Setup, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what}:\n{}",
            s.daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn assert_untouched(victim: &std::path::Path) {
    assert_eq!(
        std::fs::read_to_string(victim).expect("victim"),
        "root's own file, not metrics\n",
        "vgpud wrote through a link into {}",
        victim.display()
    );
}

#[tokio::test]
async fn the_metrics_textfile_never_writes_through_a_link_planted_in_its_directory() {
    let outside = tempfile::tempdir().expect("tempdir");
    let textfile = tempfile::tempdir().expect("tempdir");
    let by_tmp = victim(outside.path(), "by-temporary-name");
    let by_name = victim(outside.path(), "by-textfile-name");
    // Whoever can write the directory plants links at the names vgpud uses (the temporary
    // name main used, and the textfile's own name).
    std::os::unix::fs::symlink(&by_tmp, textfile.path().join(".vgpud.prom.vgpud-tmp"))
        .expect("link");
    let prom = textfile.path().join("vgpud.prom");
    std::os::unix::fs::symlink(&by_name, &prom).expect("link");
    let prom_arg = prom.to_string_lossy().into_owned();
    let s = Setup::with_args(&["mtty"], &["--metrics-textfile", &prom_arg]).await;

    wait_for(&s, "no textfile written", || {
        std::fs::symlink_metadata(&prom).is_ok_and(|m| m.is_file())
            || std::fs::read_to_string(&by_tmp).is_ok_and(|t| t.contains("vgpud_"))
    })
    .await;
    let written = std::fs::symlink_metadata(&prom).expect("textfile");
    assert_untouched(&by_tmp);
    assert_untouched(&by_name);
    assert!(written.is_file(), "{prom:?} is still a link");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        written.permissions().mode() & 0o7777,
        0o644,
        "node_exporter (another user) reads the textfile"
    );
    let text = std::fs::read_to_string(&prom).expect("textfile");
    assert!(text.contains("vgpud_available_instances"), "{text}");
}

/// Plants a link to a victim (in `outside`) at the temporary name main used in `dir`.
fn plant(dir: &std::path::Path, outside: &std::path::Path) -> std::path::PathBuf {
    let by_tmp = victim(outside, "victim");
    std::os::unix::fs::symlink(&by_tmp, dir.join(".vgpud.prom.vgpud-tmp")).expect("link");
    by_tmp
}

/// Starts vgpud with its textfile in `dir`, written every second, and its listener on;
/// returns once it wrote the textfile or said something about it.
async fn with_textfile_in(dir: &std::path::Path) -> Setup {
    use common::daemon::{Daemon, Policy, TestBus, TestHost};
    let prom = dir.join("vgpud.prom");
    let prom_arg = prom.to_string_lossy().into_owned();
    let host = TestHost::new(&["mtty"]);
    std::fs::create_dir_all(host.path("etc/vgpud")).expect("etc");
    std::fs::write(
        host.path("etc/vgpud/vgpud.toml"),
        "[metrics]\ntextfile_interval_s = 1\n",
    )
    .expect("vgpud.toml");
    let bus = TestBus::start(Policy::Open);
    let args = [
        "--metrics-textfile",
        &prom_arg,
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let daemon = Daemon::start_args(&bus, &host, &args).await;
    let conn = bus.connect().await;
    let s = Setup {
        bus,
        host,
        daemon,
        conn,
    };
    wait_for(&s, "neither a textfile nor a word about it", || {
        s.daemon.log_text().contains("metrics textfile") || std::fs::symlink_metadata(&prom).is_ok()
    })
    .await;
    s
}

#[tokio::test]
async fn a_textfile_directory_another_user_can_write_is_refused_and_the_listener_still_serves() {
    use std::os::unix::fs::PermissionsExt;
    let outside = tempfile::tempdir().expect("tempdir");
    let open = tempfile::tempdir().expect("tempdir");
    let by_tmp = plant(open.path(), outside.path());
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).expect("0777");
    let s = with_textfile_in(open.path()).await;
    assert_untouched(&by_tmp);
    assert!(
        !open.path().join("vgpud.prom").exists(),
        "a textfile in a 0777 directory"
    );
    let (status, body) = http(&listener(&s), b"GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("vgpud_available_instances"), "{body}");
    let log = s.daemon.log_text();
    assert!(
        log.contains("refusing") && log.contains("writable by group or others"),
        "{log}"
    );
    // Said once, not at every interval (one a second here).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = s.daemon.log_text();
    assert_eq!(log.matches("refusing").count(), 1, "{log}");
    // Once the directory is fixed, the textfile is written again.
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).expect("0755");
    wait_for(&s, "no textfile once the directory is 0755", || {
        open.path().join("vgpud.prom").is_file()
    })
    .await;
    assert_untouched(&by_tmp);
}

#[tokio::test]
async fn a_textfile_directory_of_another_owner_is_refused() {
    let test = "a_textfile_directory_of_another_owner_is_refused";
    if !common::skip::require_root(test, "hands the directory to nobody (uid 65534)") {
        return;
    }
    let outside = tempfile::tempdir().expect("tempdir");
    let theirs = tempfile::tempdir().expect("tempdir");
    let by_tmp = plant(theirs.path(), outside.path());
    std::os::unix::fs::chown(theirs.path(), Some(65534), Some(65534)).expect("chown");
    let s = with_textfile_in(theirs.path()).await;
    assert_untouched(&by_tmp);
    assert!(
        !theirs.path().join("vgpud.prom").exists(),
        "a textfile in nobody's directory"
    );
    let log = s.daemon.log_text();
    assert!(
        log.contains("refusing") && log.contains("owned by uid 65534"),
        "{log}"
    );
}

#[tokio::test]
async fn idle_connections_do_not_starve_a_scrape() {
    let s = Setup::with_args(&["mtty"], &["--metrics-listen", "127.0.0.1:0"]).await;
    let addr = listener(&s);
    // 300 connections that never finish a request: half send nothing, half half a line.
    let mut idle = Vec::new();
    for i in 0..300 {
        let mut c = std::net::TcpStream::connect(&addr).expect("connect");
        if i % 2 == 1 {
            c.write_all(b"GET /metr").expect("half a line");
        }
        idle.push(c);
    }
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    let mut answer = String::new();
    let read = stream.read_to_string(&mut answer);
    let took = started.elapsed();
    assert!(
        read.is_ok() && answer.starts_with("HTTP/1.1 200 OK") && answer.contains("vgpud_available_instances"),
        "no answer to a scrape within 5 s behind 300 idle connections ({took:?}, {read:?}): {answer:?}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    drop(idle);
}
