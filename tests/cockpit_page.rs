//! vgpud's Cockpit page (`cockpit/`, issue #27) in a real browser: in a private mount
//! namespace, a system-type dbus-daemon with the project's bus policy, the real polkitd and
//! vgpud on a simulated host (tests/polkit/system-bus.sh); cockpit-ws with a local session on
//! loopback whose cockpit-bridge has that bus as its system bus, as root, as a broker user in
//! the group vgpud and as nobody; and headless Chromium through chromium-driver, driven by
//! Selenium (tests/cockpit/page.py) as a person would: the GPUs and types as the bus lists
//! them, a device made through the dialog (only what GetCapacity says fits is offered) and
//! seen with busctl, one made and one removed with vgpuctl and shown without a reload, the
//! filter, the hostdev XML, stop, start, remove, the scheduler changed in its dialog, a GPU
//! instance made by vgpuctl on the MIG bar, a layout's diff, dry-run plan and apply, an error
//! with its D-Bus name, vgpud stopped (said, nothing stale) and started again (followed
//! without a reload); for the group member its data live and the scheduler refused with what
//! it lacks; for nobody the access error with what is lacking and no data. Any error in the
//! page's console fails. Screenshots go to target/cockpit-screenshots/.

mod common;

use std::path::Path;
use std::process::Command;

use common::daemon::{vgpud_bin, TestHost};

const TEST: &str = "the_cockpit_page_shows_and_changes_the_host_live_in_a_real_browser";

/// What the test needs that a host may lack: (path, Debian package).
const NEEDS: &[(&str, &str)] = &[
    ("/usr/lib/cockpit/cockpit-ws", "cockpit-ws"),
    ("/usr/bin/cockpit-bridge", "cockpit-bridge"),
    ("/usr/bin/chromium", "chromium"),
    ("/usr/bin/chromedriver", "chromium-driver"),
    ("/usr/lib/polkit-1/polkitd", "polkitd"),
];

/// A free TCP port on loopback (free when asked; cockpit-ws takes it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn the_cockpit_page_shows_and_changes_the_host_live_in_a_real_browser() {
    if !common::skip::require_root(
        TEST,
        "to make a mount namespace for the private system bus and polkit, and run cockpit-ws as nobody",
    ) {
        return;
    }
    let missing: Vec<&str> = NEEDS
        .iter()
        .filter(|(path, _)| !Path::new(path).exists())
        .map(|(_, package)| *package)
        .collect();
    let selenium = Command::new("/usr/bin/python3")
        .args(["-I", "-c", "import selenium.webdriver"])
        .env_remove("PYTHONPATH")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut missing = missing;
    if !selenium {
        missing.push("python3-selenium");
    }
    if !missing.is_empty() {
        common::skip::cannot_run(
            TEST,
            &format!(
                "missing {} (tools/install-deps installs them)",
                missing.join(", ")
            ),
        );
        return;
    }

    let vgpuctl = common::vgpuctl::bin();
    // The fake NVML next to vgpud answers GetMetrics, so the GPUs show their bars.
    common::nvml::fake_library();
    let host = TestHost::new(&["mixed", "nvidia-h200"]);
    let layouts = host.root.join("etc/vgpud/layouts");
    std::fs::create_dir_all(&layouts).expect("layouts dir");
    std::fs::write(
        layouts.join("cockpit-test.toml"),
        "description = \"Two spares of GRID RTX6000-2Q on the first GPU\"\n\n[[gpu]]\n\
         address = \"0000:3b:00.0\"\n\
         devices = [{ type = \"GRID RTX6000-2Q\", count = 2, owner = \"pool-cockpit\" }]\n",
    )
    .expect("layout");

    let repo = env!("CARGO_MANIFEST_DIR");
    let shots = Path::new(repo).join("target/cockpit-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    let work = tempfile::tempdir().expect("tempdir");
    let (port_root, port_broker, port_nobody) = (free_port(), free_port(), free_port());
    let out = Command::new("timeout")
        .args([
            "300",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "bash",
        ])
        .arg(format!("{repo}/tests/cockpit/run.sh"))
        .arg(repo)
        .arg(work.path())
        .arg(vgpud_bin())
        .arg(&host.root)
        .arg(&vgpuctl)
        .arg(&shots)
        .arg(port_root.to_string())
        .arg(port_broker.to_string())
        .arg(port_nobody.to_string())
        .output()
        .expect("unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("ALL CHECKS PASSED"),
        "the page failed in the browser ({}); screenshots in {}:\n{stdout}\n{stderr}",
        out.status,
        shots.display()
    );
    for check in [
        "CHECK manifest",
        "CHECK gpus",
        "CHECK create through the dialog",
        "CHECK vgpuctl's device",
        "CHECK scheduler set through its dialog",
        "CHECK MIG bar",
        "CHECK remove",
        "CHECK layout diff",
        "CHECK layout dry run",
        "CHECK layout applied",
        "CHECK vgpud stopped",
        "CHECK a member of the group vgpud sees the GPUs and a new device live",
        "CHECK a member of the group vgpud is refused the scheduler",
        "CHECK access denied outside the group vgpud",
        "CHECK no console errors (nobody)",
    ] {
        assert!(stdout.contains(check), "{check} did not run:\n{stdout}");
    }
    for shot in ["gpus.png", "create-dialog.png", "access-denied.png"] {
        assert!(shots.join(shot).is_file(), "no screenshot {shot}");
    }
}
