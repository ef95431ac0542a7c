//! `examples/broker.py`, the VDI broker's login storm (issue #16), run as CI runs it: Debian's
//! `/usr/bin/python3` with python3-dbus and python3-libvirt, a real vgpud on a simulated host
//! (two Quadro RTX 6000) on a private bus, and libvirt's test driver (`test:///default`, in
//! the broker's own process; it does not check that an mdev exists, so the domains start).
//!
//! Forty users log in eight at a time for RTX6000-4Q and log out. The test checks the
//! broker's exit status and summary against what vgpud said the host could take before the
//! run (not a number written here), watches the simulated sysfs during the whole run for an
//! over-committed GPU, and checks that nothing is left after the logout.
//!
//! Without `/usr/bin/python3`, python3-dbus or python3-libvirt the test cannot run: it says
//! so (`SKIPPED: …` and a failure, or only the line with `VGPUD_ALLOW_SKIP=1`, as
//! `common::skip` does), naming the Debian package to install.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::proxy::opts;
use common::setup::Setup;
use common::skip::cannot_run;

const TEST: &str = "broker_example";
/// Debian's interpreter (a `python3` earlier on PATH may lack Debian's modules).
const PYTHON: &str = "/usr/bin/python3";
const USERS: u32 = 40;
const CONCURRENCY: u32 = 8;
const TYPE: &str = "RTX6000-4Q";
/// How long the whole storm may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(240);

/// Whether Debian's python3 has the modules the broker needs; otherwise says why (and which
/// package to install) through [`cannot_run`] and returns `false`.
fn python_ready() -> bool {
    if !Path::new(PYTHON).exists() {
        cannot_run(
            TEST,
            &format!("{PYTHON} is missing: install the Debian package python3"),
        );
        return false;
    }
    // Run outside the repository: its `libvirt/` directory would pass for a module.
    let cwd = std::env::temp_dir();
    for (import, package) in [
        ("import dbus", "python3-dbus"),
        ("import libvirt; libvirt.open", "python3-libvirt"),
    ] {
        let out = Command::new(PYTHON)
            .args(["-c", import])
            .current_dir(&cwd)
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {PYTHON}: {e}"));
        if !out.status.success() {
            cannot_run(
                TEST,
                &format!(
                    "`{import}` fails under {PYTHON}: install the Debian package {package}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            );
            return false;
        }
    }
    true
}

/// The most devices seen at once on each parent (sysfs, `mdev_supported_types/*/devices`),
/// and the parents seen running more than one type at once.
#[derive(Default, Debug)]
struct Peak {
    per_gpu: BTreeMap<String, usize>,
    total: usize,
    mixed: Vec<String>,
    samples: usize,
}

/// Counts the devices of each type on each mdev parent of the simulated host.
fn devices_now(root: &Path) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut out = BTreeMap::new();
    // A missing directory is a broken simulated host, never "no devices".
    let class = root.join("sys/class/mdev_bus");
    let parents: Vec<_> = std::fs::read_dir(&class)
        .unwrap_or_else(|e| panic!("{}: {e}", class.display()))
        .flatten()
        .collect();
    assert!(!parents.is_empty(), "{} lists no parent", class.display());
    for parent in parents {
        let mut per_type = BTreeMap::new();
        let types = parent.path().join("mdev_supported_types");
        let types =
            std::fs::read_dir(&types).unwrap_or_else(|e| panic!("{}: {e}", types.display()));
        for ty in types.flatten() {
            let devices = ty.path().join("devices");
            let n = std::fs::read_dir(&devices)
                .unwrap_or_else(|e| panic!("{}: {e}", devices.display()))
                .count();
            if n > 0 {
                per_type.insert(ty.file_name().to_string_lossy().into_owned(), n);
            }
        }
        out.insert(parent.file_name().to_string_lossy().into_owned(), per_type);
    }
    out
}

/// Samples the host's devices until `stop`.
fn watch(root: PathBuf, stop: Arc<AtomicBool>, peak: Arc<Mutex<Peak>>) {
    while !stop.load(Ordering::Relaxed) {
        let now = devices_now(&root);
        let mut p = peak
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut total = 0;
        for (gpu, per_type) in &now {
            let n: usize = per_type.values().sum();
            total += n;
            let max = p.per_gpu.entry(gpu.clone()).or_default();
            *max = (*max).max(n);
            if per_type.len() > 1 {
                p.mixed.push(format!("{gpu}: {per_type:?}"));
            }
        }
        p.total = p.total.max(total);
        p.samples += 1;
        drop(p);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs the broker as CI does; its exit code (`None`: killed at the timeout) and its output.
fn run_broker(address: &str) -> (Option<i32>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/broker.py");
    let log = tempfile::NamedTempFile::new().expect("temp file");
    let out = log.reopen().expect("log for stdout");
    let err = out.try_clone().expect("log for stderr");
    let users = USERS.to_string();
    let concurrency = CONCURRENCY.to_string();
    let mut child = Command::new(PYTHON)
        .arg(&script)
        .args(["--users", &users, "--concurrency", &concurrency])
        .args(["--type", TYPE, "--bus-address", address])
        .args(["--libvirt-uri", "test:///default", "--logout"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {PYTHON} {}: {e}", script.display()));
    let deadline = Instant::now() + BROKER_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the broker") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(log.path()).unwrap_or_default();
    (status.and_then(|s| s.code()), text)
}

/// The summary's `  key: value` lines.
fn summary(output: &str) -> HashMap<String, String> {
    output
        .lines()
        .skip_while(|l| *l != "summary:")
        .skip(1)
        .filter_map(|l| l.trim().split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn number(summary: &HashMap<String, String>, key: &str, output: &str) -> u32 {
    summary
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("the summary has no number `{key}`:\n{output}"))
}

#[tokio::test]
async fn a_login_storm_of_forty_users_is_served_up_to_capacity_and_logs_out_clean() {
    if !python_ready() {
        return;
    }
    let s = Setup::new(&["nvidia-turing"]).await;
    let m = s.manager().await;

    // What the host can take, from vgpud, before the storm.
    let capacity = m.get_capacity(TYPE, opts(&[])).await.expect("GetCapacity");
    let types = m.list_types().await.expect("ListTypes");
    let max_per_gpu: BTreeMap<String, u32> = types
        .iter()
        .filter(|t| t.2.ends_with(TYPE))
        .map(|t| (t.0.clone(), t.4))
        .collect();
    assert!(
        !max_per_gpu.is_empty() && max_per_gpu.values().all(|&n| n > 0),
        "ListTypes has no {TYPE} with a maximum: {types:?}"
    );
    assert_eq!(
        capacity,
        max_per_gpu.values().sum::<u32>(),
        "an empty host can take each GPU's maximum"
    );
    assert!(
        capacity > 0 && capacity < USERS,
        "the storm must exhaust the host ({capacity} of {USERS})"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(Mutex::new(Peak::default()));
    let watcher = {
        let (root, stop, peak) = (s.host.root.clone(), stop.clone(), peak.clone());
        std::thread::spawn(move || watch(root, stop, peak))
    };
    let address = s.bus.address.clone();
    let started = Instant::now();
    let (code, output) = tokio::task::spawn_blocking(move || run_broker(&address))
        .await
        .expect("broker task");
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    let peak = std::mem::take(
        &mut *peak
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    eprintln!(
        "{output}\n(broker ran {took:?}; host sampled {} times; peak {peak:?})",
        peak.samples
    );

    assert_eq!(
        code,
        Some(0),
        "broker.py failed; its output:\n{output}\n--- vgpud's log (tail) ---\n{}",
        tail(&s.daemon.log_text(), 40)
    );
    let sum = summary(&output);
    let n = |key: &str| number(&sum, key, &output);
    assert_eq!(n("users"), USERS, "{output}");
    assert_eq!(n("errors"), 0, "{output}");
    assert_eq!(n("logout errors"), 0, "{output}");
    assert_eq!(
        n("served") + n("refused for capacity"),
        USERS,
        "every user is served or refused for capacity:\n{output}"
    );
    assert_eq!(
        n("served"),
        capacity,
        "every device the host could take went to a user, no more:\n{output}"
    );
    assert_eq!(n("capacity before"), capacity, "{output}");
    assert_eq!(n("capacity after logins"), 0, "{output}");
    assert_eq!(n("devices held after logins"), capacity, "{output}");
    assert_eq!(n("devices left after logout"), 0, "{output}");
    assert_eq!(n("capacity after logout"), capacity, "{output}");
    for key in ["login p50", "login p99", "logout p50", "logout p99"] {
        assert!(
            sum.get(key).is_some_and(|v| v.ends_with(" ms")),
            "no `{key}` time in the summary:\n{output}"
        );
    }
    // Refusals under the race between GetCapacity and CreateDevice are NoCapacity, nothing
    // else; a refused user got nothing.
    assert_eq!(
        output.matches(": refused: no capacity").count() as u32,
        USERS - capacity,
        "{output}"
    );

    // No over-commit at any moment of the storm.
    assert!(peak.samples > 0, "the host was never sampled");
    assert!(
        peak.mixed.is_empty(),
        "a GPU ran two vGPU types at once: {:?}",
        peak.mixed
    );
    assert!(
        peak.total <= capacity as usize,
        "{} devices at once on a host that could take {capacity}",
        peak.total
    );
    for (gpu, seen) in &peak.per_gpu {
        let max = max_per_gpu.get(gpu).copied().unwrap_or(0) as usize;
        assert!(
            *seen <= max,
            "{gpu} held {seen} devices at once, its maximum is {max}"
        );
    }

    // Nothing is left: not in vgpud, not in sysfs, not in mdevctl's definitions.
    let left = m.list_devices().await.expect("ListDevices");
    assert!(left.is_empty(), "devices left after the logout: {left:?}");
    let in_sysfs: usize = devices_now(&s.host.root)
        .values()
        .flat_map(|t| t.values())
        .sum();
    assert_eq!(in_sysfs, 0, "mdevs left in sysfs after the logout");
    let mdev_bus = s.host.path("sys/bus/mdev/devices");
    let entries = std::fs::read_dir(&mdev_bus)
        .unwrap_or_else(|e| panic!("{}: {e}", mdev_bus.display()))
        .count();
    assert_eq!(entries, 0, "{} is not empty", mdev_bus.display());
    let defs = s.host.path("etc/mdevctl.d");
    let defined: Vec<_> = walk(&defs);
    assert!(
        defined.is_empty(),
        "transient devices left mdevctl definitions: {defined:?}"
    );
    assert_eq!(
        m.get_capacity(TYPE, opts(&[])).await.expect("GetCapacity"),
        capacity,
        "the host can take as many as before the storm"
    );
}

/// Every file below `dir` (none when it does not exist).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
