//! The command line's output against golden files (`tests/golden/cli/`); regenerate with
//! `VGPUD_REGENERATE_GOLDEN=1 cargo test --test cli`.

mod common;

use std::process::Command;

use common::daemon::vgpud_bin;
use common::golden::assert_golden;

fn stdout(args: &[&str]) -> String {
    let out = Command::new(vgpud_bin())
        .args(args)
        .output()
        .expect("run vgpud");
    assert!(
        out.status.success(),
        "vgpud {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn sim_host_lists_its_profiles() {
    assert_golden("cli/sim-host-list.txt", stdout(&["sim-host", "--list"]));
}

#[test]
fn help_describes_every_flag() {
    assert_golden("cli/help.txt", stdout(&["--help"]));
    assert_golden(
        "cli/libvirt-hook-help.txt",
        stdout(&["libvirt-hook", "--help"]),
    );
}

#[test]
fn sim_host_refuses_the_real_root_and_unknown_profiles() {
    let out = Command::new(vgpud_bin())
        .args(["sim-host", "--profile", "mtty"])
        .output()
        .expect("run");
    assert!(!out.status.success(), "never over /");
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing"));
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(vgpud_bin())
        .arg("sim-host")
        .arg("--root")
        .arg(dir.path())
        .args(["--profile", "nvidia-hopper-9000"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown simulator profile"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
