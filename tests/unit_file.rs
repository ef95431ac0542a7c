//! The systemd unit as installed: `tools/install` into a DESTDIR, then systemd's own checks
//! on that copy (`systemd-analyze verify`, and `systemd-analyze security --offline=true`
//! with an exposure of at most 2.0), the bus activation file as dbus-daemon reads it, and
//! the watchdog pings of a real vgpud through a notification socket like systemd's.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::daemon::{vgpud_bin, Daemon, Policy, TestBus, TestHost};

/// The highest exposure the unit may have.
const MAX_EXPOSURE: f64 = 2.0;

/// `systemd-analyze` when installed; otherwise `SKIPPED` (with `VGPUD_ALLOW_SKIP=1`) or a
/// failure.
fn systemd_analyze(test: &str) -> Option<&'static str> {
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("systemd-analyze");
    }
    common::skip::cannot_run(
        test,
        "systemd-analyze is missing (apt-get install systemd; Debian 12's has it)",
    );
    None
}

/// `tools/install` into a fresh DESTDIR, with the test build of vgpud as the binary.
fn install() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("dest");
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/install"))
        .env("DESTDIR", &dest)
        .env("VGPUD_BINARY", vgpud_bin())
        .env("VGPUD_KUBEVIRT_BINARY", kubevirt_bin())
        .output()
        .expect("run tools/install");
    assert!(
        out.status.success(),
        "tools/install failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, dest)
}

/// vgpud-kubevirt (a package of its own), built once per test binary.
fn kubevirt_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    if let Err(e) = BUILT.get_or_init(|| common::nvml::cargo_build("vgpud-kubevirt")) {
        panic!("{e}");
    }
    Path::new(vgpud_bin()).with_file_name("vgpud-kubevirt")
}

/// The installed unit, in the DESTDIR.
fn unit(dest: &Path) -> PathBuf {
    dest.join("usr/lib/systemd/system/vgpud.service")
}

/// What `--root` needs besides vgpud's own files: the host's systemd units (sysinit.target,
/// dbus.service, …) the unit's dependencies name. vgpud's installed unit is never replaced.
fn add_host_units(dest: &Path) {
    let system = dest.join("usr/lib/systemd/system");
    for entry in std::fs::read_dir("/usr/lib/systemd/system").expect("host units") {
        let entry = entry.expect("entry");
        let to = system.join(entry.file_name());
        if to.exists() || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        std::fs::copy(entry.path(), &to).expect("copy a host unit");
    }
}

fn verify(analyze: &str, dest: &Path) -> Output {
    Command::new(analyze)
        .arg("verify")
        .arg(format!("--root={}", dest.display()))
        .arg("/usr/lib/systemd/system/vgpud.service")
        .output()
        .expect("run systemd-analyze verify")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_installed_unit_verifies() {
    let Some(analyze) = systemd_analyze("the_installed_unit_verifies") else {
        return;
    };
    let (_dir, dest) = install();
    assert!(unit(&dest).is_file());
    add_host_units(&dest);
    let out = verify(analyze, &dest);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}",
        text(&out)
    );
    // The check is real: verify looks for ExecStart in the DESTDIR.
    std::fs::remove_file(dest.join("usr/sbin/vgpud")).expect("remove the binary");
    let out = verify(analyze, &dest);
    assert!(
        !out.status.success() && text(&out).contains("/usr/sbin/vgpud"),
        "verify without the binary: {}",
        text(&out)
    );
}

/// The overall exposure `systemd-analyze security` prints:
/// `→ Overall exposure level for vgpud.service: 1.5 OK 🙂`.
fn exposure(report: &str) -> Option<f64> {
    let line = report
        .lines()
        .find(|l| l.contains("Overall exposure level"))?;
    let (_, rest) = line.rsplit_once(": ")?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn the_installed_unit_is_exposed_at_most_2_0() {
    let Some(analyze) = systemd_analyze("the_installed_unit_is_exposed_at_most_2_0") else {
        return;
    };
    let (_dir, dest) = install();
    let out = Command::new(analyze)
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit(&dest))
        .output()
        .expect("run systemd-analyze security");
    let report = text(&out);
    let score =
        exposure(&report).unwrap_or_else(|| panic!("no overall exposure in the report:\n{report}"));
    eprintln!("exposure of the installed vgpud.service: {score}");
    assert!(
        score <= MAX_EXPOSURE,
        "exposure {score} > {MAX_EXPOSURE}:\n{report}"
    );
    // Allowances the daemon cannot work without are still there.
    let unit_text = std::fs::read_to_string(unit(&dest)).expect("unit");
    for needed in [
        "ReadWritePaths=/sys/devices /sys/bus/pci",
        "ReadWritePaths=/etc/mdevctl.d",
        "ReadWritePaths=-/etc/modprobe.d",
        "DeviceAllow=char-nvidia-caps rw",
        "StateDirectory=vgpud",
        "RestrictAddressFamilies=AF_UNIX",
        "BusName=org.vgpud1",
        "WatchdogSec=",
    ] {
        assert!(unit_text.contains(needed), "the unit lost {needed:?}");
    }
}

/// vgpud-kubevirt's unit, installed beside vgpud's: it verifies (its binary and vgpud.service,
/// which it requires, are there) and is exposed at most 2.0 too.
#[test]
fn the_kubevirt_unit_verifies_and_is_exposed_at_most_2_0() {
    let test = "the_kubevirt_unit_verifies_and_is_exposed_at_most_2_0";
    let Some(analyze) = systemd_analyze(test) else {
        return;
    };
    let (_dir, dest) = install();
    let kv = dest.join("usr/lib/systemd/system/vgpud-kubevirt.service");
    add_host_units(&dest);
    let out = Command::new(analyze)
        .arg("verify")
        .arg(format!("--root={}", dest.display()))
        .arg("/usr/lib/systemd/system/vgpud-kubevirt.service")
        .output()
        .expect("run systemd-analyze verify");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}",
        text(&out)
    );
    let out = Command::new(analyze)
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&kv)
        .output()
        .expect("run systemd-analyze security");
    let report = text(&out);
    let score =
        exposure(&report).unwrap_or_else(|| panic!("no overall exposure in the report:\n{report}"));
    eprintln!("exposure of the installed vgpud-kubevirt.service: {score}");
    assert!(
        score <= MAX_EXPOSURE,
        "exposure {score} > {MAX_EXPOSURE}:\n{report}"
    );
    let unit_text = std::fs::read_to_string(&kv).expect("unit");
    for needed in [
        "Requires=vgpud.service",
        "After=vgpud.service",
        "ExecStart=/usr/sbin/vgpud-kubevirt",
        "ReadWritePaths=-/var/lib/kubelet/device-plugins",
    ] {
        assert!(unit_text.contains(needed), "the unit lost {needed:?}");
    }
}

#[test]
fn exposure_lines_are_parsed() {
    assert_eq!(
        exposure("x\n→ Overall exposure level for vgpud.service: 1.5 OK 🙂\n"),
        Some(1.5)
    );
    assert_eq!(
        exposure("→ Overall exposure level for a.service: 9.6 UNSAFE 😨"),
        Some(9.6)
    );
    assert_eq!(exposure("no score"), None);
}

#[tokio::test]
async fn the_bus_can_activate_vgpud_through_systemd() {
    let (_dir, dest) = install();
    let file = dest.join("usr/share/dbus-1/system-services/org.vgpud1.service");
    let service = std::fs::read_to_string(&file).expect("activation file installed");
    let keys: Vec<&str> = service
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .collect();
    for want in [
        "Name=org.vgpud1",
        "Exec=/bin/false",
        "User=root",
        "SystemdService=vgpud.service",
    ] {
        assert!(keys.contains(&want), "{want} missing in {service}");
    }
    // dbus-daemon itself reads the file: the name becomes activatable.
    let bus = TestBus::start_with_services(Policy::Open, file.parent());
    let conn = bus.connect().await;
    let names = zbus::fdo::DBusProxy::new(&conn)
        .await
        .expect("proxy")
        .list_activatable_names()
        .await
        .expect("ListActivatableNames");
    assert!(
        names.iter().any(|n| n.as_str() == "org.vgpud1"),
        "{names:?}"
    );
}

/// Reads the notifications vgpud sends for `wait`.
fn notifications(socket: &UnixDatagram, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        socket
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        match socket.recv(&mut buf) {
            Ok(n) => out.extend(
                String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .map(str::to_string),
            ),
            Err(_) => break,
        }
    }
    out
}

#[tokio::test]
async fn the_daemon_pings_the_watchdog_at_half_its_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&path).expect("notification socket");
    let host = TestHost::new(&["mtty"]);
    let bus = TestBus::start(Policy::Open);
    let notify = path.display().to_string();
    // 400 ms: a ping every 200 ms.
    let mut daemon = Daemon::start_with(
        &bus,
        &host,
        &[("NOTIFY_SOCKET", &notify), ("WATCHDOG_USEC", "400000")],
        &[],
    )
    .await;
    let seen = notifications(&socket, Duration::from_millis(2000));
    assert!(seen.iter().any(|l| l == "READY=1"), "{seen:?}");
    let pings = seen.iter().filter(|l| *l == "WATCHDOG=1").count();
    // About 10 in 2 s; a loaded machine may delay some, but never most.
    assert!((4..=14).contains(&pings), "{pings} pings: {seen:?}");
    assert!(daemon.log_text().contains("systemd watchdog enabled"));
    let status = stop(&mut daemon);
    assert!(status.success(), "{status}");
    drop(daemon);

    // No WATCHDOG_USEC, no pings. A socket of its own: the first vgpud's last pings and its
    // STOPPING=1 may still wait unread in the first one.
    let path = dir.path().join("notify-2");
    let socket = UnixDatagram::bind(&path).expect("second notification socket");
    let notify = path.display().to_string();
    let mut daemon = Daemon::start_with(&bus, &host, &[("NOTIFY_SOCKET", &notify)], &[]).await;
    let seen = notifications(&socket, Duration::from_millis(800));
    assert!(seen.iter().any(|l| l == "READY=1"), "{seen:?}");
    assert!(!seen.iter().any(|l| l == "WATCHDOG=1"), "{seen:?}");
    stop(&mut daemon);
}

/// SIGTERM, then at most 10 s for the daemon to exit.
fn stop(daemon: &mut Daemon) -> std::process::ExitStatus {
    daemon
        .stop_within(Duration::from_secs(10))
        .unwrap_or_else(|| {
            panic!(
                "vgpud did not stop within 10 s of SIGTERM:\n{}",
                daemon.log_text()
            )
        })
}
