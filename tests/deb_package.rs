//! The Debian package (`tools/build-deb`), built from this test build's vgpud and vgpuctl,
//! then installed with `dpkg --root` into a copy-on-write copy of this host (overlayfs over
//! `/`, in a private mount namespace, with fresh `/run` and `/tmp`, so no systemd, bus or
//! vgpud of the host is seen and nothing outside changes). There dpkg resolves the package's
//! dependencies against the host's real packages and runs the maintainer scripts chrooted,
//! as on a real install, with no `--force-*` at all; outside a booted systemd they must
//! still succeed. Then every file is checked where its consumer looks for it, by the
//! consumer where one can run in the root: `systemd-analyze verify` and `systemctl
//! is-enabled` on the unit, the system bus's own dbus-daemon listing org.vgpud1 as
//! activatable without a complaint about the policy, the real polkitd granting the group
//! vgpud what the rules grant, `man -w`, bash's completion loader, the binaries run in the
//! root. Last, remove and purge leave nothing of the package behind.
//!
//! Needs root, mount namespaces and overlayfs (as `tests/polkit.rs`), dpkg-dev, systemd,
//! xmllint, dbus and polkitd: on Debian 12, `tools/install-deps` installs them.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::daemon::vgpud_bin;

/// The package's files, each where its consumer looks for it: path, mode, consumer.
const FILES: &[(&str, u32, &str)] = &[
    (
        "/usr/sbin/vgpud",
        0o755,
        "the unit's ExecStart and the libvirt hook",
    ),
    ("/usr/bin/vgpuctl", 0o755, "the operator's PATH"),
    (
        "/usr/sbin/vgpud-kubevirt",
        0o755,
        "vgpud-kubevirt.service's ExecStart",
    ),
    (
        "/usr/lib/systemd/system/vgpud-kubevirt.service",
        0o644,
        "systemd's unit directory for packages",
    ),
    (
        "/usr/share/doc/vgpud/examples/kubevirt.toml",
        0o644,
        "the operator writing /etc/vgpud/kubevirt.toml",
    ),
    (
        "/usr/lib/systemd/system/vgpud.service",
        0o644,
        "systemd's unit directory for packages",
    ),
    (
        "/usr/lib/modules-load.d/vgpud.conf",
        0o644,
        "systemd-modules-load",
    ),
    ("/usr/lib/sysusers.d/vgpud.conf", 0o644, "systemd-sysusers"),
    (
        "/usr/share/dbus-1/system.d/org.vgpud1.conf",
        0o644,
        "the system bus's policy directory",
    ),
    (
        "/usr/share/dbus-1/system-services/org.vgpud1.service",
        0o644,
        "the system bus's activation directory",
    ),
    (
        "/usr/share/dbus-1/interfaces/org.vgpud1.xml",
        0o644,
        "introspection data for tools",
    ),
    (
        "/usr/share/polkit-1/actions/org.vgpud1.policy",
        0o644,
        "polkitd's actions",
    ),
    (
        "/usr/share/polkit-1/rules.d/50-org.vgpud1.rules",
        0o644,
        "polkitd's rules",
    ),
    (
        "/etc/libvirt/hooks/qemu.d/vgpud",
        0o755,
        "libvirt's qemu hook directory",
    ),
    ("/etc/vgpud/vgpud.toml", 0o644, "vgpud's configuration file"),
    ("/usr/share/man/man1/vgpuctl.1.gz", 0o644, "man"),
    (
        "/usr/share/bash-completion/completions/vgpuctl",
        0o644,
        "bash-completion's loader",
    ),
    (
        "/usr/share/zsh/vendor-completions/_vgpuctl",
        0o644,
        "Debian's zsh fpath",
    ),
    (
        "/usr/share/fish/vendor_completions.d/vgpuctl.fish",
        0o644,
        "fish's vendor completions",
    ),
    ("/usr/share/doc/vgpud/copyright", 0o644, "Debian policy"),
    (
        "/usr/share/cockpit/vgpud/manifest.json",
        0o644,
        "cockpit-bridge's packages",
    ),
    ("/usr/share/cockpit/vgpud/index.html", 0o644, "Cockpit"),
    ("/usr/share/cockpit/vgpud/vgpud.js", 0o644, "Cockpit"),
    ("/usr/share/cockpit/vgpud/vgpud.css", 0o644, "Cockpit"),
];

/// The conffiles: every file under /etc.
const CONFFILES: &[&str] = &["/etc/libvirt/hooks/qemu.d/vgpud", "/etc/vgpud/vgpud.toml"];

/// The environment variable that hands the .deb to the part run in the mount namespace.
const INNER_ENV: &str = "VGPUD_DEB_PACKAGE_INNER";
/// That part's name.
const INNER: &str = "installed_in_a_copy_on_write_root";

/// The tools the test needs, with the Debian package of each.
const TOOLS: &[(&str, &str)] = &[
    ("dpkg-deb", "dpkg"),
    ("dpkg-shlibdeps", "dpkg-dev"),
    ("strip", "binutils"),
    ("systemd-analyze", "systemd"),
    ("xmllint", "libxml2-utils"),
    ("unshare", "util-linux"),
    ("dbus-daemon", "dbus-daemon"),
    ("/usr/lib/polkit-1/polkitd", "polkitd"),
];

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `program args`, panicking with its output unless it succeeds.
fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n{}",
        out.status,
        text(&out)
    );
    out
}

/// A path as an argument (the test's paths are UTF-8).
fn s(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn found(tool: &str) -> bool {
    if tool.starts_with('/') {
        return Path::new(tool).exists();
    }
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The vgpuctl binary next to vgpud (a package of its own: `cargo build --workspace`).
fn vgpuctl_bin() -> PathBuf {
    let path = Path::new(vgpud_bin()).with_file_name("vgpuctl");
    assert!(
        path.exists(),
        "{} is missing: vgpuctl is a package of its own; run `cargo build --workspace` first \
         (tests/run does)",
        path.display()
    );
    path
}

/// The vgpud-kubevirt binary next to vgpud (a package of its own, like vgpuctl).
fn kubevirt_bin() -> PathBuf {
    let path = Path::new(vgpud_bin()).with_file_name("vgpud-kubevirt");
    assert!(
        path.exists(),
        "{} is missing: vgpud-kubevirt is a package of its own; run `cargo build --workspace` \
         first (tests/run does)",
        path.display()
    );
    path
}

/// The control field `name` of `deb`.
fn field(deb: &Path, name: &str) -> String {
    stdout(&run("dpkg-deb", &["--field", s(deb), name]))
        .trim()
        .to_string()
}

#[test]
fn the_package_installs_where_its_consumers_look_and_purges_cleanly() {
    let test = "the_package_installs_where_its_consumers_look_and_purges_cleanly";
    if !common::skip::require_root(
        test,
        "dpkg installs into a copy-on-write root made in a mount namespace and runs the \
         maintainer scripts chrooted",
    ) {
        return;
    }
    for (tool, package) in TOOLS {
        if !found(tool) {
            common::skip::cannot_run(
                test,
                &format!("{tool} is missing (apt-get install {package}; tools/install-deps)"),
            );
            return;
        }
    }
    let started = Instant::now();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(repo.join("tools/build-deb"))
        .arg("--output")
        .arg(dir.path())
        // gzip: xz takes half a minute on the debug build's vgpud.
        .args(["--compress", "gzip"])
        .env("VGPUD_BINARY", vgpud_bin())
        .env("VGPUCTL_BINARY", vgpuctl_bin())
        .env("VGPUD_KUBEVIRT_BINARY", kubevirt_bin())
        .output()
        .expect("run tools/build-deb");
    assert!(
        out.status.success(),
        "tools/build-deb failed:\n{}",
        text(&out)
    );
    let deb = PathBuf::from(stdout(&out).lines().last().expect("the .deb's path"));
    assert!(deb.is_file(), "tools/build-deb names {}", deb.display());

    // The control data.
    let arch = stdout(&run("dpkg", &["--print-architecture"]))
        .trim()
        .to_string();
    assert_eq!(field(&deb, "Package"), "vgpud");
    assert_eq!(field(&deb, "Version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field(&deb, "Architecture"), arch);
    let depends = field(&deb, "Depends");
    for needed in [
        "libc6 (>= ",
        "libvirt0 (>= ",
        "default-dbus-system-bus | dbus-system-bus",
        "polkitd | policykit-1",
        "systemd",
    ] {
        assert!(
            depends.contains(needed),
            "Depends lacks {needed}: {depends}"
        );
    }
    assert_eq!(field(&deb, "Recommends"), "mdevctl");
    let info = stdout(&run("dpkg-deb", &["--info", s(&deb)]));
    for script in ["postinst", "prerm", "postrm", "conffiles", "md5sums"] {
        assert!(
            info.contains(&format!(" {script} ")),
            "no {script} in:\n{info}"
        );
    }

    // The files: root's, with their modes; every /etc file a conffile.
    let contents = stdout(&run("dpkg-deb", &["--contents", s(&deb)]));
    let mut listed = Vec::new();
    for line in contents.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (mode, owner, path) = (cols[0], cols[1], cols[5]);
        assert_eq!(owner, "root/root", "{line}");
        listed.push((path.trim_start_matches('.').to_string(), mode.to_string()));
    }
    for (path, mode, consumer) in FILES {
        let want = format!("-{}", mode_string(*mode));
        assert!(
            listed.iter().any(|(p, m)| p == path && *m == want),
            "{path} ({consumer}) is not in the package as {want}:\n{contents}"
        );
    }
    let etc_files: BTreeSet<&str> = listed
        .iter()
        .filter(|(p, m)| p.starts_with("/etc/") && m.starts_with('-'))
        .map(|(p, _)| p.as_str())
        .collect();
    let conffiles = stdout(&run("dpkg-deb", &["--info", s(&deb), "conffiles"]));
    let conffiles: BTreeSet<&str> = conffiles.lines().collect();
    assert_eq!(
        conffiles, etc_files,
        "every file under /etc, and only those, is a conffile"
    );
    for conffile in CONFFILES {
        assert!(conffiles.contains(conffile), "{conffile} is not a conffile");
    }

    // The install, in a mount namespace of its own: this test binary again, for its other
    // test.
    let out = Command::new("timeout")
        // A PID namespace too: when the run ends, however it ends, the kernel kills what it
        // started (the bus and polkitd in the root).
        .args(["240", "unshare", "--mount", "--propagation", "private"])
        .args(["--pid", "--fork", "--kill-child"])
        .arg(std::env::current_exe().expect("this test binary"))
        .args([
            INNER,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(INNER_ENV, &deb)
        .stdin(Stdio::null())
        .output()
        .expect("unshare (util-linux)");
    assert!(
        out.status.success(),
        "the install in the copy-on-write root failed ({}):\n{}",
        out.status,
        text(&out)
    );
    assert!(
        stdout(&out).contains("1 passed"),
        "the inner test did not run:\n{}",
        text(&out)
    );
    eprintln!("{}", text(&out));
    eprintln!("deb_package: {:.0?} in all", started.elapsed());
}

/// `rwxr-xr-x` for 0o755.
fn mode_string(mode: u32) -> String {
    (0..9)
        .map(|i| {
            let bit = 1 << (8 - i);
            if mode & bit == 0 {
                '-'
            } else {
                ['r', 'w', 'x'][i % 3]
            }
        })
        .collect()
}

/// A process killed when dropped (also when a check panics).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let rw = self.dir.join("rw");
        let unmounted = Command::new("umount")
            .args(["--recursive", "--lazy"])
            .arg(&rw)
            .status()
            .is_ok_and(|s| s.success());
        // Never recursive: once unmounted, `rw` is an empty directory.
        if unmounted {
            let _ = std::fs::remove_dir(&rw);
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// The copy-on-write root, mounted in this process's own mount namespace (gone with it).
struct Root {
    /// A directory of its own, with the tmpfs of the writable layer mounted on `rw` in it.
    dir: PathBuf,
    /// Where the root is mounted.
    path: PathBuf,
    /// Its writable layer: what the install changed.
    upper: PathBuf,
}

impl Root {
    fn mount() -> Root {
        // Kept, not a TempDir: a recursive removal would walk into the mounts (the root's
        // /dev is the host's). Drop unmounts, then removes only empty directories.
        let dir = tempfile::tempdir().expect("tempdir").keep();
        let rw = dir.join("rw");
        std::fs::create_dir(&rw).expect("mkdir rw");
        // The writable layer on a tmpfs: overlayfs takes no upper layer on overlayfs, which
        // a container's / may be.
        run("mount", &["-t", "tmpfs", "tmpfs", s(&rw)]);
        let (upper, work, path) = (rw.join("upper"), rw.join("work"), rw.join("root"));
        for d in [&upper, &work, &path] {
            std::fs::create_dir(d).expect("mkdir");
        }
        let options = format!(
            "lowerdir=/,upperdir={},workdir={}",
            upper.display(),
            work.display()
        );
        run(
            "mount",
            &["-t", "overlay", "overlay", "-o", &options, s(&path)],
        );
        assert!(
            path.join("usr/bin/dpkg").exists() && path.join("var/lib/dpkg/status").exists(),
            "the copy of / lacks /usr or /var/lib/dpkg (separate mounts?): this test needs \
             them on the root file system"
        );
        // /dev for the scripts' /dev/null, /proc for polkitd; /run and /tmp fresh, so nothing
        // in the root sees a booted systemd, the host's bus or its temporary files.
        run("mount", &["--rbind", "/dev", s(&path.join("dev"))]);
        run("mount", &["-t", "proc", "proc", s(&path.join("proc"))]);
        for fresh in ["run", "tmp"] {
            run("mount", &["-t", "tmpfs", "tmpfs", s(&path.join(fresh))]);
        }
        std::fs::set_permissions(path.join("tmp"), std::fs::Permissions::from_mode(0o1777))
            .expect("chmod /tmp");
        Root { dir, path, upper }
    }

    /// `rel` (absolute inside the root) as a path here.
    fn at(&self, rel: &str) -> PathBuf {
        self.path.join(rel.trim_start_matches('/'))
    }

    /// `dpkg --root=ROOT args`.
    fn dpkg(&self, args: &[&str]) -> Output {
        let root = format!("--root={}", s(&self.path));
        run("dpkg", &[&[root.as_str()], args].concat())
    }

    /// `chroot ROOT args`, unchecked.
    fn chroot(&self, args: &[&str]) -> Output {
        Command::new("chroot")
            .arg(&self.path)
            .args(args)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::null())
            .output()
            .expect("chroot")
    }

    /// `chroot ROOT args`, which must succeed.
    fn chroot_ok(&self, args: &[&str]) -> String {
        let out = self.chroot(args);
        assert!(
            out.status.success(),
            "in the root: {args:?} failed ({}):\n{}",
            out.status,
            text(&out)
        );
        stdout(&out)
    }

    /// `chroot ROOT args` in the background.
    fn spawn(&self, args: &[&str], log: &Path) -> Running {
        let log = std::fs::File::create(log).expect("log");
        Running(
            Command::new("chroot")
                .arg(&self.path)
                .args(args)
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .spawn()
                .expect("chroot"),
        )
    }

    /// The status dpkg has for vgpud, or `None` when it knows nothing of it.
    fn status(&self) -> Option<String> {
        let out = Command::new("dpkg-query")
            .arg(format!("--root={}", self.path.display()))
            .args(["-W", "-f", "${Status}", "vgpud"])
            .output()
            .expect("dpkg-query");
        let status = stdout(&out);
        (out.status.success() && !status.ends_with("not-installed")).then_some(status)
    }
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The second half of the test, run by the first in a mount namespace of its own.
#[test]
#[ignore = "run by the_package_installs_where_its_consumers_look_and_purges_cleanly in a mount namespace"]
fn installed_in_a_copy_on_write_root() {
    let Some(deb) = std::env::var_os(INNER_ENV).map(PathBuf::from) else {
        return;
    };
    let root = Root::mount();
    let contents = stdout(&run("dpkg-deb", &["--contents", s(&deb)]));
    let package_files: Vec<String> = contents
        .lines()
        .filter(|l| l.starts_with('-'))
        .map(|l| {
            l.split_whitespace()
                .nth(5)
                .expect("path")
                .trim_start_matches('.')
                .to_string()
        })
        .collect();

    // A fresh root for vgpud: no package of it, none of its files (a host that ran
    // tools/install has them, owned by no package).
    if root.status().is_some() {
        root.dpkg(&["--purge", "vgpud"]);
    }
    for path in &package_files {
        let _ = std::fs::remove_file(root.at(path));
    }
    let _ = std::fs::remove_dir_all(root.at("/etc/vgpud"));
    let _ = std::fs::remove_dir_all(root.at("/var/lib/vgpud"));

    // The install: dependencies from the host's packages, maintainer scripts chrooted, no
    // systemd running, no forcing.
    let out = root.dpkg(&["--install", s(&deb)]);
    println!("dpkg --install:\n{}", text(&out));
    assert!(text(&out).contains("Setting up vgpud"), "{}", text(&out));
    assert_eq!(root.status().as_deref(), Some("install ok installed"));
    let verify = root.dpkg(&["--verify", "vgpud"]);
    assert!(text(&verify).is_empty(), "dpkg --verify: {}", text(&verify));
    let conffiles = stdout(&run(
        "dpkg-query",
        &[
            &format!("--root={}", s(&root.path)),
            "-W",
            "-f",
            "${Conffiles}",
            "vgpud",
        ],
    ));
    for conffile in CONFFILES {
        assert!(
            conffiles
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{conffile} "))),
            "{conffile} is not a conffile of the installed package: {conffiles}"
        );
    }

    // Every file where its consumer looks, with its mode.
    for (path, mode, consumer) in FILES {
        let meta = std::fs::symlink_metadata(root.at(path))
            .unwrap_or_else(|e| panic!("{path} ({consumer}) is not installed: {e}"));
        assert!(meta.is_file(), "{path} is not a file");
        assert_eq!(meta.permissions().mode() & 0o7777, *mode, "{path}'s mode");
    }
    let state = std::fs::metadata(root.at("/var/lib/vgpud")).expect("/var/lib/vgpud");
    assert_eq!(
        state.permissions().mode() & 0o777,
        0o700,
        "/var/lib/vgpud's mode"
    );

    // systemd: the unit verifies against this root (ExecStart's binary included), is enabled
    // by the postinst, and the group is made from sysusers.d.
    let unit =
        std::fs::read_to_string(root.at("/usr/lib/systemd/system/vgpud.service")).expect("unit");
    assert!(
        unit.lines().any(|l| l == "ExecStart=/usr/sbin/vgpud"),
        "ExecStart: {unit}"
    );
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.path.display()))
        .arg("/usr/lib/systemd/system/vgpud.service")
        .output()
        .expect("systemd-analyze");
    println!(
        "systemd-analyze verify --root=ROOT /usr/lib/systemd/system/vgpud.service: {} {:?}",
        out.status,
        text(&out)
    );
    assert!(
        out.status.success() && text(&out).is_empty(),
        "systemd-analyze verify: {}",
        text(&out)
    );
    let enabled = Command::new("systemctl")
        .arg(format!("--root={}", root.path.display()))
        .args(["is-enabled", "vgpud.service"])
        .output()
        .expect("systemctl");
    assert_eq!(stdout(&enabled).trim(), "enabled", "{}", text(&enabled));
    let group = root.chroot_ok(&["getent", "group", "vgpud"]);
    assert!(group.starts_with("vgpud:x:"), "{group}");
    let modules =
        std::fs::read_to_string(root.at("/usr/lib/modules-load.d/vgpud.conf")).expect("modules");
    assert!(modules.lines().any(|l| l == "pci-pf-stub"), "{modules}");

    // The binaries run in the root, with its libraries.
    let version = env!("CARGO_PKG_VERSION");
    for (binary, name) in [
        ("/usr/sbin/vgpud", "vgpud"),
        ("/usr/bin/vgpuctl", "vgpuctl"),
    ] {
        root.chroot_ok(&[binary, "--help"]);
        let v = root.chroot_ok(&[binary, "--version"]);
        assert_eq!(v.trim(), format!("{name} {version}"));
    }
    let hook = std::fs::read_to_string(root.at("/etc/libvirt/hooks/qemu.d/vgpud")).expect("hook");
    assert!(hook.contains("exec /usr/sbin/vgpud libvirt-hook"), "{hook}");

    // The XML files: the polkit actions valid against polkit's DTD (through the XML catalog
    // polkitd installs); the bus policy well-formed (Debian 12 ships no copy of the bus
    // configuration DTD; the bus itself reads it below).
    run(
        "xmllint",
        &[
            "--noout",
            "--valid",
            "--nonet",
            s(&root.at("/usr/share/polkit-1/actions/org.vgpud1.policy")),
        ],
    );
    run(
        "xmllint",
        &[
            "--noout",
            "--nonet",
            s(&root.at("/usr/share/dbus-1/system.d/org.vgpud1.conf")),
        ],
    );

    // The system bus as the host runs it (its own system.conf), in the root: it reads the
    // policy without a complaint and finds the activation file.
    std::fs::create_dir_all(root.at("/run/dbus")).expect("/run/dbus");
    let bus_log = root.at("/tmp/dbus.log");
    let bus = root.spawn(
        &["dbus-daemon", "--system", "--nofork", "--nopidfile"],
        &bus_log,
    );
    let socket = root.at("/run/dbus/system_bus_socket");
    wait_until("the system bus's socket", Duration::from_secs(10), || {
        socket.exists()
    });
    let address = format!("unix:path={}", socket.display());
    let names = stdout(&run(
        "busctl",
        &[
            format!("--address={address}").as_str(),
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "ListActivatableNames",
        ],
    ));
    assert!(
        names.contains("\"org.vgpud1\""),
        "org.vgpud1 is not activatable: {names}"
    );

    // polkitd, on that bus: it knows the actions, and the rules let a member of the group
    // vgpud manage devices but not configure the host, and nobody else anything.
    let polkit_log = root.at("/tmp/polkitd.log");
    let polkitd = root.spawn(&["/usr/lib/polkit-1/polkitd", "--no-debug"], &polkit_log);
    wait_until("polkitd on the bus", Duration::from_secs(20), || {
        Command::new("busctl")
            .arg(format!("--address={address}"))
            .args(["status", "org.freedesktop.PolicyKit1"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let bus_text = std::fs::read_to_string(&bus_log).unwrap_or_default();
    assert!(
        !bus_text.contains("org.vgpud1"),
        "the bus complains about vgpud's files: {bus_text}"
    );
    for action in [
        "org.vgpud1.read",
        "org.vgpud1.manage-devices",
        "org.vgpud1.configure-host",
    ] {
        let listed = root.chroot_ok(&["pkaction", "--action-id", action]);
        assert_eq!(listed.trim(), action);
    }
    root.chroot_ok(&[
        "useradd",
        "--system",
        "--no-create-home",
        "--groups",
        "vgpud",
        "vgpud-deb-test",
    ]);
    let pkcheck = |user: &str, group: &str, action: &str| {
        let groups = if user == "nobody" {
            "--clear-groups"
        } else {
            "--init-groups"
        };
        let check = format!("exec pkcheck --action-id {action} --process $$");
        root.chroot(&[
            "setpriv",
            &format!("--reuid={user}"),
            &format!("--regid={group}"),
            groups,
            "sh",
            "-c",
            &check,
        ])
        .status
        .success()
    };
    assert!(
        pkcheck("vgpud-deb-test", "vgpud-deb-test", "org.vgpud1.read"),
        "the group may read: {}",
        std::fs::read_to_string(&polkit_log).unwrap_or_default()
    );
    assert!(
        pkcheck(
            "vgpud-deb-test",
            "vgpud-deb-test",
            "org.vgpud1.manage-devices"
        ),
        "the group may manage devices"
    );
    assert!(
        !pkcheck(
            "vgpud-deb-test",
            "vgpud-deb-test",
            "org.vgpud1.configure-host"
        ),
        "the group may not configure the host"
    );
    assert!(
        !pkcheck("nobody", "nogroup", "org.vgpud1.manage-devices"),
        "nobody may not manage devices"
    );

    // The man page where man looks, and readable; the completions where the shells load them.
    let manpath = root.chroot(&["man", "-w", "vgpuctl"]);
    if manpath.status.success() {
        assert_eq!(stdout(&manpath).trim(), "/usr/share/man/man1/vgpuctl.1.gz");
        let page = root.chroot_ok(&[
            "env",
            "MANPAGER=cat",
            "MANWIDTH=80",
            "man",
            "-l",
            "/usr/share/man/man1/vgpuctl.1.gz",
        ]);
        assert!(page.contains("vgpuctl"), "{page}");
    } else {
        println!("man-db is not installed: the man page is read with zcat");
        let page = root.chroot_ok(&["zcat", "/usr/share/man/man1/vgpuctl.1.gz"]);
        assert!(
            page.lines().any(|l| l.starts_with(".TH ")),
            "no .TH in the man page"
        );
    }
    let complete = root.chroot_ok(&[
        "bash",
        "-c",
        ". /usr/share/bash-completion/completions/vgpuctl && complete -p vgpuctl",
    ]);
    assert!(complete.contains("vgpuctl"), "{complete}");
    let zsh = std::fs::read_to_string(root.at("/usr/share/zsh/vendor-completions/_vgpuctl"))
        .expect("zsh");
    assert!(
        zsh.starts_with("#compdef vgpuctl"),
        "zsh completion: {}",
        &zsh[..zsh.len().min(80)]
    );
    let fish =
        std::fs::read_to_string(root.at("/usr/share/fish/vendor_completions.d/vgpuctl.fish"))
            .expect("fish");
    assert!(fish.contains("complete -c vgpuctl"), "fish completion");
    drop(polkitd);
    drop(bus);
    // No bus runs in the root again (dbus's trigger would try to reach the socket).
    std::fs::remove_dir_all(root.at("/run/dbus")).expect("rm /run/dbus");

    // An upgrade (this package over itself): the operator's change to a conffile and the
    // unit they disabled are kept, without a question.
    let config = root.at("/etc/vgpud/vgpud.toml");
    let changed = std::fs::read_to_string(&config).expect("config") + "# the operator's\n";
    std::fs::write(&config, &changed).expect("change the config");
    let systemctl_root = format!("--root={}", s(&root.path));
    run("systemctl", &[&systemctl_root, "disable", "vgpud.service"]);
    let out = root.dpkg(&["--install", s(&deb)]);
    println!("dpkg --install (upgrade):\n{}", text(&out));
    assert_eq!(root.status().as_deref(), Some("install ok installed"));
    assert_eq!(
        std::fs::read_to_string(&config).expect("config"),
        changed,
        "the operator's configuration is kept"
    );
    let enabled = Command::new("systemctl")
        .args([&systemctl_root, "is-enabled", "vgpud.service"])
        .output()
        .expect("systemctl");
    assert_eq!(
        stdout(&enabled).trim(),
        "disabled",
        "the operator's disable is kept"
    );

    // Remove: the files go, the conffiles stay, the unit is masked (debhelper's way).
    let out = root.dpkg(&["--remove", "vgpud"]);
    println!("dpkg --remove:\n{}", text(&out));
    assert_eq!(root.status().as_deref(), Some("deinstall ok config-files"));
    assert!(!root.at("/usr/sbin/vgpud").exists());
    assert!(
        root.at("/etc/vgpud/vgpud.toml").exists(),
        "a conffile stays until the purge"
    );
    let mask = std::fs::read_link(root.at("/etc/systemd/system/vgpud.service"));
    assert_eq!(
        mask.ok().as_deref(),
        Some(Path::new("/dev/null")),
        "the removed unit is masked"
    );

    // Purge: nothing of the package is left, but the group (Debian leaves system groups).
    let out = root.dpkg(&["--purge", "vgpud"]);
    println!("dpkg --purge:\n{}", text(&out));
    assert_eq!(root.status(), None, "dpkg still knows vgpud");
    for path in &package_files {
        assert!(!root.at(path).exists(), "{path} is left after the purge");
    }
    for dir in ["/etc/vgpud", "/var/lib/vgpud", "/usr/share/doc/vgpud"] {
        assert!(!root.at(dir).exists(), "{dir} is left after the purge");
    }
    // What the install changed in the root, by name: nothing named vgpud is left but the
    // whiteouts of the host's own unowned copies removed above.
    let left = stdout(&run(
        "find",
        &[s(&root.upper), "-name", "*vgpud*", "!", "-type", "c"],
    ));
    assert!(left.is_empty(), "left after the purge:\n{left}");
    let group = root.chroot_ok(&["getent", "group", "vgpud"]);
    assert!(group.starts_with("vgpud:"), "{group}");
}
