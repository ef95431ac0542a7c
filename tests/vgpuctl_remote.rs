//! `vgpuctl --host [USER@]HOST` reaches another host's vgpud over ssh, as `busctl -H` does:
//! `ssh -xT -- HOST systemd-stdio-bridge`. No second host is here, so `ssh` is a stand-in
//! first on PATH that records its arguments and runs the real systemd-stdio-bridge against
//! the test's bus: everything but the network is the real path (zbus's unixexec transport,
//! the bridge, the bus, vgpud).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::setup::Setup;

fn bridge() -> Option<&'static str> {
    [
        "/usr/bin/systemd-stdio-bridge",
        "/usr/lib/systemd/systemd-stdio-bridge",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
}

#[tokio::test]
async fn host_reaches_vgpud_over_ssh_and_systemd_stdio_bridge_with_the_same_output() {
    let Some(bridge) = bridge() else {
        common::skip::cannot_run(
            "host_reaches_vgpud_over_ssh_and_systemd_stdio_bridge_with_the_same_output",
            "systemd-stdio-bridge (package systemd) is not installed",
        );
        return;
    };
    let s = Setup::new(&["mtty", "nvidia-turing"]).await;
    let fake = tempfile::tempdir().expect("tempdir");
    let args_file = fake.path().join("args");
    std::fs::write(
        fake.path().join("ssh"),
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\nexec {bridge} --bus-path={}\n",
            args_file.display(),
            s.bus.address
        ),
    )
    .expect("fake ssh");
    std::fs::set_permissions(
        fake.path().join("ssh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    let path = format!(
        "{}:{}",
        fake.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let vgpuctl = |bus: &[&str], args: &[&str]| {
        let out = Command::new(common::vgpuctl::bin())
            .args(bus)
            .args(args)
            .env("PATH", &path)
            .env("TZ", "UTC")
            .output()
            .expect("vgpuctl");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let local = ["--address", s.bus.address.as_str()];
    let remote = ["--host", "admin@gpu-host-7"];
    for args in [&["gpus"][..], &["types", "--available"], &["devices"]] {
        let (code, out, err) = vgpuctl(&remote, args);
        assert_eq!(code, Some(0), "vgpuctl --host {args:?}: {err}");
        assert_eq!(
            out,
            vgpuctl(&local, args).1,
            "{args:?}: the same output over ssh"
        );
    }
    let (code, out, err) = vgpuctl(&["-H", "gpu-host-7"], &["create", "mtty-1", "--quiet"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        vgpuctl(&local, &["devices"]).1.contains(out.trim()),
        "made on that host's vgpud"
    );
    let recorded = std::fs::read_to_string(&args_file).expect("ssh ran");
    assert_eq!(
        recorded, "-xT\n--\ngpu-host-7\nsystemd-stdio-bridge\n",
        "ssh's arguments as busctl -H gives them"
    );
    // A host that could be an option or a command line is refused before ssh runs.
    std::fs::remove_file(&args_file).expect("rm");
    for bad in ["-oProxyCommand=x", "a b", "h;reboot"] {
        let (code, _, err) = vgpuctl(&[&format!("--host={bad}")], &["gpus"]);
        assert_eq!(code, Some(2), "{bad:?}: {err}");
        assert!(err.contains("is not [USER@]HOST"), "{bad:?}: {err}");
    }
    assert!(!args_file.exists(), "ssh never ran for a bad host");
}
