//! Client libraries nobody on the project wrote, used the way integrators use them, against a
//! real vgpud on a simulated host (the `mixed` profile: two NVIDIA Quadro RTX 6000 on NUMA
//! nodes 0 and 1, an Intel GVT-g iGPU, the mtty sample) over a private dbus-daemon:
//!
//! - python3-dbus, as an oVirt VDSM hook (`tests/clients/python3_dbus.py`);
//! - dbus-next (`tests/clients/dbus_next_client.py`);
//! - Gio's GDBusObjectManagerClient (`tests/clients/gio_object_manager.py`);
//! - libxml2's parser (`xmllint`) on the introspection data of every kind of object.
//!
//! The scripts run under Debian's own `/usr/bin/python3` (a `python3` earlier on PATH may be
//! a build without Debian's modules), get the bus address as their argument and in
//! `DBUS_SESSION_BUS_ADDRESS`, print each check, and exit non-zero when one fails. A missing
//! interpreter, module or tool fails the test with what to install (`tools/install-deps`
//! installs all of them); nothing here is skipped.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::proxy::opts;
use common::setup::Setup;

/// Debian's interpreter, with python3-dbus, python3-dbus-next and python3-gi.
const PYTHON: &str = "/usr/bin/python3";

/// How long one client script may run.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);

/// The largest introspection document a client should have to read, but for the lists of
/// names below: a fixed size, whatever the number of devices (the manager's, the largest,
/// is about 9 KiB with its methods, signals and their comments).
const MAX_INTROSPECTION: usize = 12 * 1024;

/// What the parents of GPUs and devices (`/org/vgpud1/gpu`, `/org/vgpud1/device`) may add
/// per child: its name alone, `  <node name="<escaped UUID>"/>` and a newline (62 bytes, 64
/// for a UUID that starts with a digit), as sd-bus and GDBus list children and as
/// `busctl tree` reads them.
const PER_CHILD: usize = 64;

/// The two parents that list their children, and what each answer is besides.
const PARENTS: &[&str] = &["/org/vgpud1/gpu", "/org/vgpud1/device"];
const PARENT_BASE: usize = 2048;

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Fails, never skips, when `/usr/bin/python3` or one of the modules is missing.
/// `modules`: (Python import statement, Debian package that has it).
fn require_python(modules: &[(&str, &str)]) {
    assert!(
        Path::new(PYTHON).exists(),
        "{PYTHON} (Debian's python3) is missing: install it with `apt-get install python3` \
         (tools/install-deps does)"
    );
    for (import, package) in modules {
        let out = Command::new(PYTHON)
            .args(["-c", import])
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {PYTHON}: {e}"));
        assert!(
            out.status.success(),
            "`{import}` fails under {PYTHON}: install the Debian package {package} \
             (tools/install-deps does):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Fails, never skips, when `xmllint` is missing.
fn require_xmllint() {
    match Command::new("xmllint").arg("--version").output() {
        Ok(_) => {}
        Err(e) => panic!(
            "xmllint cannot run ({e}): install it with `apt-get install libxml2-utils` \
             (tools/install-deps does)"
        ),
    }
}

/// Runs `/usr/bin/python3 tests/clients/SCRIPT ADDRESS`; returns its exit status and its
/// output (stdout and stderr interleaved), killing it after [`CLIENT_TIMEOUT`].
fn run_client(script: &str, address: &str) -> (Option<i32>, String) {
    let log = tempfile::NamedTempFile::new().expect("temp file");
    // One open file for both (a dup shares the offset), so neither overwrites the other.
    let out = log.reopen().expect("log for stdout");
    let err = out.try_clone().expect("log for stderr");
    let mut child = Command::new(PYTHON)
        .arg(clients_dir().join(script))
        .arg(address)
        .env("DBUS_SESSION_BUS_ADDRESS", address)
        // Nothing written into the source tree, output as it happens, Debian's modules only.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {PYTHON} {script}: {e}"));
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the client") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(log.path()).unwrap_or_default();
    match status {
        Some(s) => (s.code(), text),
        None => (
            None,
            format!("{text}\n(killed: still running after {CLIENT_TIMEOUT:?})"),
        ),
    }
}

/// Runs a client script against the setup's bus and fails with its output unless it exits 0.
async fn assert_client_passes(s: &Setup, script: &'static str) {
    let address = s.bus.address.clone();
    let (code, output) = tokio::task::spawn_blocking(move || run_client(script, &address))
        .await
        .expect("client task");
    assert!(
        code == Some(0),
        "{script} failed (exit {code:?}); its output:\n{output}\n--- vgpud's log (tail) ---\n{}",
        tail(&s.daemon.log_text(), 40)
    );
    eprintln!("{output}");
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[tokio::test]
async fn python3_dbus_client_as_a_vdsm_hook_uses_it() {
    require_python(&[
        ("import dbus", "python3-dbus"),
        ("import dbus.mainloop.glib", "python3-dbus"),
        ("import gi; gi.require_version('GLib', '2.0')", "python3-gi"),
    ]);
    let s = Setup::new(&["mixed"]).await;
    assert_client_passes(&s, "python3_dbus.py").await;
}

#[tokio::test]
async fn dbus_next_client_introspects_and_drives_the_api() {
    require_python(&[("import dbus_next.aio", "python3-dbus-next")]);
    let s = Setup::new(&["mixed"]).await;
    assert_client_passes(&s, "dbus_next_client.py").await;
}

#[tokio::test]
async fn gio_object_manager_client_sees_only_objects_with_interfaces() {
    require_python(&[
        ("import gi; gi.require_version('Gio', '2.0')", "python3-gi"),
        (
            "import gi; gi.require_version('Gio', '2.0'); from gi.repository import Gio",
            "gir1.2-glib-2.0",
        ),
    ]);
    let s = Setup::new(&["mixed"]).await;
    assert_client_passes(&s, "gio_object_manager.py").await;
}

/// `xmllint --noout -` on `xml`: `Err(xmllint's complaint)` when it is not well-formed.
fn xmllint_stdin(xml: &str) -> Result<(), String> {
    let mut child = Command::new("xmllint")
        .args(["--noout", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xmllint (apt-get install libxml2-utils)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(xml.as_bytes())
        .expect("feed xmllint");
    let out = child.wait_with_output().expect("xmllint");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Introspects every kind of object (the root `/`, `/org`, the manager, the GPU and device
/// parents, every GPU, every device) and checks each document with libxml2 and its size.
async fn check_every_introspection(s: &Setup, label: &str) -> Vec<String> {
    let m = s.manager().await;
    let mut paths: Vec<String> = [
        "/",
        "/org",
        "/org/vgpud1",
        "/org/vgpud1/gpu",
        "/org/vgpud1/device",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    paths.extend(
        m.list_gpus()
            .await
            .expect("ListGpus")
            .into_iter()
            .map(|g| g.4.to_string()),
    );
    paths.extend(
        m.list_devices()
            .await
            .expect("ListDevices")
            .into_iter()
            .map(|d| d.4.to_string()),
    );
    let mut failures = Vec::new();
    let mut sizes = Vec::new();
    for path in &paths {
        let proxy = zbus::fdo::IntrospectableProxy::builder(&s.conn)
            .destination("org.vgpud1")
            .path(path.as_str())
            .build()
            .await
            .expect("introspectable proxy");
        let xml = match proxy.introspect().await {
            Ok(xml) => xml,
            Err(e) => {
                failures.push(format!("{label}: Introspect of {path} failed: {e}"));
                continue;
            }
        };
        sizes.push(format!("{path}: {} bytes", xml.len()));
        if let Err(complaint) = xmllint_stdin(&xml) {
            failures.push(format!(
                "{label}: the introspection of {path} is not well-formed XML (xmllint):\n{}",
                tail(&complaint, 12)
            ));
        }
        let limit = if PARENTS.contains(&path.as_str()) {
            let children = xml.matches("<node name=").count();
            PARENT_BASE + PER_CHILD * children
        } else {
            MAX_INTROSPECTION
        };
        if PARENTS.contains(&path.as_str()) && xml.contains("<interface name=\"org.vgpud1.") {
            failures.push(format!(
                "{label}: {path} describes its children instead of naming them"
            ));
        }
        if xml.len() >= limit {
            failures.push(format!(
                "{label}: the introspection of {path} is {} bytes, not under {limit}",
                xml.len()
            ));
        }
    }
    eprintln!("{label}:\n  {}", sizes.join("\n  "));
    failures
}

#[tokio::test]
async fn every_objects_introspection_is_well_formed_and_small() {
    require_xmllint();
    let s = Setup::new(&["mixed"]).await;
    let m = s.manager().await;
    m.create_device("mtty-1", opts(&[("owner", "one")]))
        .await
        .expect("create one device");
    let mut failures = check_every_introspection(&s, "with one device").await;
    // Twenty devices of two kinds: parents' documents must not grow with their children's
    // descriptions.
    for i in 1..10 {
        let owner = format!("mtty-{i}");
        m.create_device("mtty-1", opts(&[("owner", owner.as_str())]))
            .await
            .expect("create an mtty device");
    }
    for i in 0..10 {
        let owner = format!("vdi-{i}");
        m.create_device("RTX6000-2Q", opts(&[("owner", owner.as_str())]))
            .await
            .expect("create a vGPU");
    }
    let devices = m.list_devices().await.expect("ListDevices");
    assert_eq!(devices.len(), 20, "{devices:?}");
    failures.extend(check_every_introspection(&s, "with twenty devices").await);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for d in devices {
        m.remove_device(&d.0, HashMap::new()).await.expect("remove");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_hundred_devices_grow_only_the_list_of_names_and_busctl_tree_lists_them() {
    require_xmllint();
    // Sixteen RTX 8000 take 512 RTX8000-1Q: 500 devices, made over eight connections.
    let s = Setup::new(&["large"]).await;
    let mut conns = Vec::new();
    for _ in 0..8 {
        conns.push(s.bus.connect().await);
    }
    let mut calls = Vec::new();
    for i in 0..500 {
        let conn = conns[i % conns.len()].clone();
        calls.push(tokio::spawn(async move {
            let m = common::proxy::ManagerProxy::new(&conn)
                .await
                .expect("proxy");
            m.create_device("RTX8000-1Q", opts(&[("owner", "vdi-pool")]))
                .await
                .map(|(uuid, _)| uuid)
        }));
    }
    for c in calls {
        c.await.expect("task").expect("create a vGPU");
    }
    let failures = check_every_introspection(&s, "with 500 devices").await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every device is found the way a person looks: busctl tree, from the introspection.
    let out = s.bus.busctl(&["tree", "--list", "org.vgpud1"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    let devices = listed
        .lines()
        .filter(|l| l.trim().starts_with("/org/vgpud1/device/"))
        .count();
    assert!(
        out.status.success() && devices == 500,
        "busctl tree lists {devices} of 500 devices: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_checked_in_introspection_xml_is_well_formed() {
    require_xmllint();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("dbus/org.vgpud1.xml");
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg(&file)
        .output()
        .expect("xmllint");
    assert!(
        out.status.success(),
        "xmllint --noout {} fails:\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
