//! The fake NVML library (`crates/fake-nvml`) for tests of the real NVML backend: built once
//! per test binary, and a simulated host it serves.
//!
//! The fake reads the simulated host's root from `VGPUD_FAKE_NVML_ROOT` at every call, and the
//! environment is the process's, so a [`FakeHost`] holds a process-wide lock for its life:
//! tests using it run one at a time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The environment variable the fake reads the simulated host's root from.
pub const ROOT_ENV: &str = "VGPUD_FAKE_NVML_ROOT";

static LIBRARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
static HOST_LOCK: Mutex<()> = Mutex::new(());

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
    }
}

/// Builds a workspace package (`cargo build -p NAME`, the same profile as the tests) and
/// returns cargo's error output when it fails. Test binaries call it once per package, for
/// what `cargo test` of this crate does not rebuild: the fake NVML library, vgpuctl.
pub fn cargo_build(package: &str) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--quiet", "-p", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cargo build -p {package} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Builds the fake library (`cargo build -p vgpud-fake-nvml`, once per test binary) and
/// returns the path of `libnvidia_ml.so`. Panics with cargo's output when the build fails.
pub fn fake_library() -> PathBuf {
    LIBRARY
        .get_or_init(|| {
            cargo_build("vgpud-fake-nvml")?;
            let lib = target_dir().join("debug").join("libnvidia_ml.so");
            if lib.is_file() {
                Ok(lib)
            } else {
                Err(format!("{} was not built", lib.display()))
            }
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A simulated host the fake NVML library serves; `VGPUD_FAKE_NVML_ROOT` points at it while
/// this lives (other hosts wait).
pub struct FakeHost {
    /// The simulated host's root.
    pub root: tempfile::TempDir,
    /// The fake library.
    pub library: PathBuf,
    _lock: MutexGuard<'static, ()>,
}

impl FakeHost {
    /// A simulated host of `profile` (`nvidia-h200`) served by the fake library.
    pub fn new(profile: &str) -> FakeHost {
        let lock = HOST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let library = fake_library();
        let root = tempfile::tempdir().expect("temporary directory");
        vgpud_sim::write_profile(profile, root.path())
            .unwrap_or_else(|e| panic!("simulated host {profile}: {e}"));
        // Only tests holding HOST_LOCK read or change this variable.
        std::env::set_var(ROOT_ENV, root.path());
        FakeHost {
            root,
            library,
            _lock: lock,
        }
    }

    /// The root's path.
    pub fn path(&self) -> &Path {
        self.root.path()
    }

    /// Every file of the simulated driver's state (`run/nvidia-sim`, `var/lib/nvidia-sim`)
    /// with its contents, to show a read-only call changed nothing. The lock file is left out.
    pub fn driver_state(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        for dir in ["run/nvidia-sim", "var/lib/nvidia-sim"] {
            collect(&self.path().join(dir), &mut out);
        }
        out.retain(|(p, _)| p.file_name().is_none_or(|n| n != "lock"));
        out.sort();
        out
    }
}

impl Drop for FakeHost {
    fn drop(&mut self) {
        std::env::remove_var(ROOT_ENV);
    }
}

fn collect(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if let Ok(data) = std::fs::read(&p) {
            out.push((p, data));
        }
    }
}
