//! A simulated host and a vgpud on it for the benchmark programs: the host's trees, the
//! daemon started and waited for (READY=1), its resident memory, and the figures' helpers.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median (sorts `v`).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `p` percentile (sorts `v`).
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// A simulated host: `sys`, `dev`, `run` on tmpfs; `etc`, `var` on disk.
pub struct BenchHost {
    /// The tmpfs part.
    pub _mem: tempfile::TempDir,
    /// The disk part.
    pub _disk: tempfile::TempDir,
    /// The root (`--root`).
    pub root: PathBuf,
}

/// A simulated host of `profile`.
pub fn bench_host(profile: &str) -> BenchHost {
    let mem_base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let disk_base = std::env::var("VGPUD_BENCH_DISK")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let mem = tempfile::tempdir_in(mem_base).expect("tmpfs dir");
    let disk = tempfile::tempdir_in(disk_base).expect("disk dir");
    let root = mem.path().join("host");
    std::fs::create_dir_all(&root).expect("root");
    for d in ["etc", "var"] {
        std::fs::create_dir_all(disk.path().join(d)).expect("disk dir");
        std::os::unix::fs::symlink(disk.path().join(d), root.join(d)).expect("link");
    }
    vgpud_sim::write_profile(profile, &root).expect("profile");
    BenchHost {
        _mem: mem,
        _disk: disk,
        root,
    }
}

/// A running vgpud, stopped with SIGTERM when dropped.
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let _ = self.0.wait();
    }
}

/// Starts the vgpud `bin` on `root` and the bus at `address`, its log (`VGPUD_LOG=log`) to
/// `log_file` (else inherited), and waits for READY=1 on a notify socket of our own in `dir`:
/// (daemon, ms to READY).
pub fn start_daemon_bin(
    bin: &Path,
    root: &Path,
    address: &str,
    dir: &Path,
    log: &str,
    log_file: Option<&Path>,
) -> (Daemon, f64) {
    start_daemon_args(bin, root, address, dir, log, log_file, &[])
}

/// [`start_daemon_bin`] with more arguments for vgpud (`--nvml-library PATH`).
pub fn start_daemon_args(
    bin: &Path,
    root: &Path,
    address: &str,
    dir: &Path,
    log: &str,
    log_file: Option<&Path>,
    args: &[&std::ffi::OsStr],
) -> (Daemon, f64) {
    let notify = dir.join(format!("notify-{}", uuid::Uuid::new_v4()));
    let sock = UnixDatagram::bind(&notify).expect("notify socket");
    sock.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let started = Instant::now();
    let child = Command::new(bin)
        .arg("--root")
        .arg(root)
        .arg("--simulate")
        .arg("--bus-address")
        .arg(address)
        .args(args)
        .env("VGPUD_LOG", log)
        .env("NOTIFY_SOCKET", &notify)
        .stderr(match log_file {
            Some(f) => std::fs::File::create(f).expect("log file").into(),
            None => std::process::Stdio::inherit(),
        })
        .spawn()
        .expect("vgpud");
    let mut buf = [0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).expect("READY from vgpud");
        if String::from_utf8_lossy(&buf[..n]).contains("READY=1") {
            break;
        }
    }
    (Daemon(child), ms(started.elapsed()))
}

/// The resident memory of a process, in KiB (`VmRSS`; 0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user and system, all threads) a process has used so far, in ms.
pub fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces): utime is the 14th field, stime the 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    // In USER_HZ ticks, which Linux fixes at 100 per second for /proc.
    f.iter().sum::<f64>() * 10.0
}
