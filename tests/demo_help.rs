//! `demo/run --help` (and `-h`) says what the demo does and needs, and installs and builds
//! nothing: the real script, with stand-ins for every installer and build tool first on
//! PATH that leave a mark when called.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// What the demo would install or build with.
const TOOLS: &[&str] = &["cargo", "rustup", "apt-get", "apt", "dpkg", "sudo"];

/// Stand-ins for [`TOOLS`] in `dir`/bin that append their name to `dir`/called and fail.
fn stand_ins(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let called = dir.join("called");
    for tool in TOOLS {
        let path = bin.join(tool);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho {tool} >>'{}'\nexit 1\n", called.display()),
        )
        .expect("stand-in");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    bin
}

fn demo(arg: &str, dir: &Path) -> Output {
    let bin = stand_ins(dir);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::process::Command::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("demo/run"))
        .arg(arg)
        .env("PATH", path)
        .output()
        .expect("demo/run")
}

fn called(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("called")).unwrap_or_default()
}

#[test]
fn help_says_what_the_demo_does_and_needs_and_runs_nothing() {
    for arg in ["--help", "-h"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = demo(arg, dir.path());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "demo/run {arg}: {out:?}");
        assert!(
            called(dir.path()).is_empty(),
            "demo/run {arg} ran {}",
            called(dir.path())
        );
        for needed in [
            "Usage: demo/run [--keep]",
            "--keep",
            "DBUS_SYSTEM_BUS_ADDRESS",
            "Rust 1.89",
            "apt-get",
            "installs and builds nothing",
        ] {
            assert!(
                stdout.contains(needed),
                "demo/run {arg} lacks {needed}:\n{stdout}"
            );
        }
    }
}

#[test]
fn an_unknown_argument_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = demo("--frobnicate", dir.path());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(called(dir.path()).is_empty(), "ran {}", called(dir.path()));
    assert!(String::from_utf8_lossy(&out.stderr).contains("demo/run --help"));
}
