//! A private dbus-daemon for the benchmark programs.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running dbus-daemon and its address; killed when dropped.
pub struct Bus(pub Child, pub String);

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a dbus-daemon listening on `dir/bus`.
#[allow(dead_code)]
pub fn start_bus(dir: &Path) -> Bus {
    let socket = dir.join("bus");
    spawn(
        Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address=unix:path={}", socket.display())),
    )
}

/// Starts a dbus-daemon on `dir/bus` with the system bus's limits (128 replies pending per
/// connection, 256 connections per user) that every user may connect to and call anything
/// on, as vgpud's policy lets them call vgpud. `dir` must be open to them.
#[allow(dead_code)]
pub fn start_system_bus(dir: &Path) -> Bus {
    let config = dir.join("bus.conf");
    std::fs::write(
        &config,
        format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
</busconfig>
"#,
            dir.join("bus").display()
        ),
    )
    .expect("bus config");
    spawn(
        Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address=1"]),
    )
}

fn spawn(cmd: &mut Command) -> Bus {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dbus-daemon (apt-get install dbus-daemon)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("address");
    Bus(child, line.trim().to_string())
}
