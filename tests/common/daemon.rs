//! Real parts for integration tests: a simulated host written by `vgpud sim-host`, a private
//! dbus-daemon, a real vgpud process, and the real busctl and gdbus clients.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The vgpud binary cargo built for these tests.
pub fn vgpud_bin() -> &'static str {
    env!("CARGO_BIN_EXE_vgpud")
}

/// A simulated host tree in a temporary directory.
pub struct TestHost {
    _dir: TempDir,
    /// The tree's root (`--root`).
    pub root: PathBuf,
}

impl TestHost {
    /// Writes the given profiles with `vgpud sim-host`.
    pub fn new(profiles: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("host");
        let host = TestHost { _dir: dir, root };
        host.write_profiles(profiles);
        host
    }

    /// Runs `vgpud sim-host` for the profiles on this root.
    pub fn write_profiles(&self, profiles: &[&str]) {
        let mut cmd = Command::new(vgpud_bin());
        cmd.arg("sim-host").arg("--root").arg(&self.root);
        for p in profiles {
            cmd.args(["--profile", p]);
        }
        let out = cmd.output().expect("run vgpud sim-host");
        assert!(
            out.status.success(),
            "vgpud sim-host failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A simulated reboot: the kernel's state (sys, dev, run) is gone and rebuilt fresh with
    /// the given profiles; etc and var/lib are kept.
    pub fn reboot(&self, profiles: &[&str]) {
        for dir in ["sys", "dev", "run"] {
            let path = self.root.join(dir);
            if path.exists() {
                std::fs::remove_dir_all(&path).expect("clear kernel state");
            }
        }
        self.write_profiles(profiles);
    }

    /// `ROOT/<rel>`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Runs the real mdevctl 1.4 on this tree (`MDEVCTL_ENV_ROOT`).
    pub fn mdevctl(&self, args: &[&str]) -> Output {
        Command::new(mdevctl_bin())
            .env("MDEVCTL_ENV_ROOT", &self.root)
            .args(args)
            .output()
            .expect("run mdevctl")
    }

    /// `mdevctl … --dumpjson` parsed; panics with mdevctl's stderr if it fails.
    pub fn mdevctl_json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.mdevctl(args);
        assert!(
            out.status.success(),
            "mdevctl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return serde_json::Value::Array(Vec::new());
        }
        serde_json::from_slice(&out.stdout).expect("mdevctl prints JSON")
    }
}

/// The real mdevctl 1.4: `VGPUD_MDEVCTL`, else what `tools/install-deps` installed in
/// `.cache/tools`. Fails (never skips) when it is missing.
pub fn mdevctl_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("VGPUD_MDEVCTL") {
        return PathBuf::from(p);
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/tools/bin/mdevctl");
    assert!(
        p.exists(),
        "mdevctl 1.4 is not installed at {}: run tools/install-deps (it runs `RST2MAN=/bin/true cargo install mdevctl --version 1.4.0 --root .cache/tools`)",
        p.display()
    );
    p
}

/// Which policy the private bus enforces.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Everyone may own and call everything.
    Open,
    /// Like the system bus: default deny, with vgpud's own `dbus/org.vgpud1.conf` included.
    System,
    /// Every user may connect, own and call everything: the bus leaves every check to vgpud.
    Everyone,
}

/// A private dbus-daemon.
pub struct TestBus {
    child: Child,
    _dir: TempDir,
    /// The address clients connect to.
    pub address: String,
}

impl TestBus {
    /// Starts a dbus-daemon on a socket in a temporary directory.
    pub fn start(policy: Policy) -> Self {
        Self::start_with_services(policy, None)
    }

    /// Like [`TestBus::start`], reading bus activation files from `services` when given.
    pub fn start_with_services(policy: Policy, services: Option<&Path>) -> Self {
        Self::start_with_limits(policy, services, &[])
    }

    /// Like [`TestBus::start_with_services`], with dbus-daemon `<limit>`s (name, value) on top.
    pub fn start_with_limits(
        policy: Policy,
        services: Option<&Path>,
        limits: &[(&str, u64)],
    ) -> Self {
        let limits: String = limits
            .iter()
            .map(|(name, value)| format!("<limit name=\"{name}\">{value}</limit>\n  "))
            .collect();
        let services = services
            .map(|d| format!("<servicedir>{}</servicedir>", d.display()))
            .unwrap_or_default();
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("bus");
        let policy_xml = match policy {
            Policy::Open => r#"<policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>"#
                .to_string(),
            Policy::Everyone => r#"<policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>"#
                .to_string(),
            Policy::System => format!(
                r#"<policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_destination="org.freedesktop.DBus"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
  <include>{}</include>"#,
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("dbus/org.vgpud1.conf")
                    .display()
            ),
        };
        let config = format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  {services}
  {policy_xml}
  {limits}<limit name="max_replies_per_connection">50000</limit>
  <limit name="max_connections_per_user">10000</limit>
</busconfig>
"#,
            socket.display()
        );
        let config_path = dir.path().join("bus.conf");
        std::fs::write(&config_path, config).expect("write bus config");
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config_path.display()))
            .args(["--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon must be installed (apt-get install dbus-daemon)");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read bus address");
        let address = line.trim().to_string();
        assert!(!address.is_empty(), "dbus-daemon printed no address");
        TestBus {
            child,
            _dir: dir,
            address,
        }
    }

    /// A zbus connection to this bus.
    pub async fn connect(&self) -> zbus::Connection {
        zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
            .expect("connect to the private bus")
    }

    /// Runs busctl against this bus.
    pub fn busctl(&self, args: &[&str]) -> Output {
        Command::new("busctl")
            .arg(format!("--address={}", self.address))
            .args(args)
            .output()
            .expect("busctl must be installed (apt-get install systemd)")
    }

    /// Runs `busctl --json=short call org.vgpud1 PATH IFACE METHOD SIG ARGS…` and returns
    /// the parsed reply, or the error text.
    pub fn busctl_call(
        &self,
        path: &str,
        iface: &str,
        method: &str,
        args: &[&str],
    ) -> Result<serde_json::Value, String> {
        let mut all = vec!["--json=short", "call", "org.vgpud1", path, iface, method];
        all.extend_from_slice(args);
        let out = self.busctl(&all);
        if out.status.success() && out.stdout.iter().all(u8::is_ascii_whitespace) {
            Ok(serde_json::Value::Null)
        } else if out.status.success() {
            Ok(serde_json::from_slice(&out.stdout).expect("busctl prints JSON"))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs `gdbus call` on the manager and returns stdout, or the error text.
    pub fn gdbus_call(&self, method: &str, args: &[&str]) -> Result<String, String> {
        self.gdbus_call_on("/org/vgpud1", &format!("org.vgpud1.Manager.{method}"), args)
    }

    /// Runs `gdbus call` of `method` (`iface.Method`) on the object at `path`.
    pub fn gdbus_call_on(&self, path: &str, method: &str, args: &[&str]) -> Result<String, String> {
        let out = Command::new("gdbus")
            .args(["call", "--address", &self.address, "--dest", "org.vgpud1"])
            .args(["--object-path", path, "--method", method])
            .args(args)
            .output()
            .expect("gdbus must be installed (apt-get install libglib2.0-bin)");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running vgpud process.
pub struct Daemon {
    child: Child,
    /// Where its log goes.
    pub log: PathBuf,
    _log_dir: TempDir,
}

impl Daemon {
    /// Starts `vgpud --root ROOT --simulate --bus-address ADDR` and waits until it owns
    /// org.vgpud1.
    pub async fn start(bus: &TestBus, host: &TestHost) -> Self {
        Self::start_with(bus, host, &[], &[]).await
    }

    /// Like [`Daemon::start`], with extra command-line arguments.
    pub async fn start_args(bus: &TestBus, host: &TestHost, args: &[&str]) -> Self {
        Self::start_with(bus, host, &[], args).await
    }

    /// Like [`Daemon::start`], with extra environment and arguments.
    pub async fn start_with(
        bus: &TestBus,
        host: &TestHost,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Self {
        let log_dir = tempfile::tempdir().expect("tempdir");
        let log = log_dir.path().join("vgpud.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(vgpud_bin());
        // NVML only where a test asks for it (the fake library may or may not be built).
        if !args.contains(&"--nvml-library") {
            cmd.args(["--nvml-library", "none"]);
        }
        cmd.arg("--root")
            .arg(&host.root)
            .arg("--simulate")
            .arg("--bus-address")
            .arg(&bus.address)
            .args(args)
            .env("VGPUD_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(log_file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start vgpud");
        let mut daemon = Daemon {
            child,
            log,
            _log_dir: log_dir,
        };
        daemon.wait_ready(bus).await;
        daemon
    }

    async fn wait_ready(&mut self, bus: &TestBus) {
        let conn = bus.connect().await;
        let dbus = zbus::fdo::DBusProxy::new(&conn).await.expect("DBus proxy");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let name = zbus::names::BusName::try_from("org.vgpud1").expect("name");
            if dbus.name_has_owner(name).await.unwrap_or(false) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "vgpud exited with {status} before taking its name:\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "vgpud did not take its name in time:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to 15 s for `what` to appear `n` times in the log; fails with the log.
    pub async fn wait_for_log(&self, what: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.log_text().matches(what).count() < n {
            assert!(
                Instant::now() < deadline,
                "no {what:?} (#{n}): {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the daemon with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The exit status once the process has ended by itself, or `None` when it is still
    /// running after `limit`.
    pub fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the daemon with SIGTERM and returns its exit status, or `None` when it is still
    /// running after `limit` (it is then left running, for the caller to report).
    pub fn stop_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        self.exit_within(limit)
    }

    /// Stops the daemon with SIGTERM and returns its exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        self.child.wait().expect("wait for vgpud")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A snapshot of every file, directory and link below `root`, for proving that an operation
/// wrote nothing it should not have.
pub fn snapshot(root: &Path) -> HashMap<PathBuf, String> {
    let mut out = HashMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            let rel = path.strip_prefix(root).expect("prefix").to_path_buf();
            if meta.file_type().is_symlink() {
                out.insert(
                    rel,
                    format!("-> {}", std::fs::read_link(&path).expect("link").display()),
                );
            } else if meta.is_dir() {
                out.insert(rel, "dir".into());
                stack.push(path);
            } else {
                out.insert(
                    rel,
                    std::fs::read_to_string(&path).unwrap_or_else(|_| "<binary>".into()),
                );
            }
        }
    }
    out
}
