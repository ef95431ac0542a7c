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
pub fn start_bus(dir: &Path) -> Bus {
    let socket = dir.join("bus");
    let mut child = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--print-address=1"])
        .arg(format!("--address=unix:path={}", socket.display()))
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
