//! Crash atomicity of the simulated kernel: writers killed between any two file operations
//! (staged with `fsx::crash`), writers in other processes killed with SIGKILL, and two
//! processes writing one tree.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::fsx::crash;
use super::journal::{JOURNAL_FILE, STATE_DIR};
use super::tests::{
    all_available, avail, create, host, remove, snapshot, GPU0, GPU1, IGPU, MTTY, U1, U2,
};
use super::*;

/// Runs `op` with the writer killed after `k` file operations; whether it died, and what
/// `op` returned.
fn killed_after<T>(k: usize, op: impl FnOnce() -> T) -> (bool, T) {
    crash::arm(k);
    let result = op();
    (crash::disarm(), result)
}

/// Asserts two snapshots are equal, showing only what differs.
fn assert_tree(
    now: &BTreeMap<PathBuf, String>,
    expected: &BTreeMap<PathBuf, String>,
    what: impl std::fmt::Display,
) {
    if now == expected {
        return;
    }
    let mut diff = Vec::new();
    for key in now
        .keys()
        .chain(expected.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (a, b) = (now.get(key), expected.get(key));
        if a != b {
            diff.push(format!("  {}: {a:?}, expected {b:?}", key.display()));
        }
    }
    panic!("{what}: the tree differs\n{}", diff.join("\n"));
}

fn journal(host: &SimHost) -> PathBuf {
    host.root().join(STATE_DIR).join(JOURNAL_FILE)
}

/// Whether a journal is there: the tree's, or a parent's (`journal.<parent>`).
fn any_journal(host: &SimHost) -> bool {
    journal(host).exists()
        || !super::journal::parent_journals(&host.root().join(STATE_DIR))
            .expect("list")
            .is_empty()
}

/// A hand-made mdpy-like parent (no driver link, no rule: the mdev core's counter model) next
/// to the profile's, with two types at 2 each, and its mdev driver registered.
fn mdpy_parent(root: &Path) -> String {
    fs::create_dir_all(root.join("sys/bus/mdev/drivers/mdpy")).expect("mkdir");
    mdpy_parent_without_driver(root)
}

/// [`mdpy_parent`] without the driver's directory, which the first create makes.
fn mdpy_parent_without_driver(root: &Path) -> String {
    let parent = root.join("sys/devices/virtual/mdpy/mdpy");
    for t in ["mdpy-vga", "mdpy-xga"] {
        let td = parent.join("mdev_supported_types").join(t);
        fs::create_dir_all(td.join("devices")).expect("mkdir");
        fs::write(td.join("available_instances"), "2\n").expect("write");
        fs::write(td.join("create"), "").expect("write");
    }
    format!("{}", parent.display())
}

/// Kills a create of `type_id` on `parent` after every possible number of file operations,
/// recovers each time and checks the tree is exactly as before the create; then checks the
/// same for a recovery killed part-way (and recovered again) at every step, for a few of the
/// torn creates. Returns how many torn trees were seen.
fn torn_creates_are_undone(host: &SimHost, parent: &str, type_id: &str) -> usize {
    let sim = Simulator::new();
    let root = host.root().to_path_buf();
    let before = snapshot(&root);
    let mut torn = 0;
    for k in 0.. {
        let (died, result) = killed_after(k, || create(host, parent, type_id, U1));
        if !died {
            result.expect("create with nobody killed");
            break;
        }
        assert!(result.is_err(), "a killed create fails");
        let torn_tree = snapshot(&root);
        if torn_tree != before {
            torn += 1;
            assert!(any_journal(host), "step {k}: a torn tree has a journal");
        }
        if k % 7 == 3 {
            // The recovery itself is killed at every step, then run again.
            for j in 0.. {
                let (died, result) = killed_after(j, || sim.recover(host.root()));
                if !died {
                    result.expect("recover");
                    break;
                }
            }
        } else {
            sim.recover(host.root()).expect("recover");
        }
        assert_tree(
            &snapshot(&root),
            &before,
            format!("create killed after {k} steps"),
        );
    }
    assert!(!any_journal(host));
    remove(host, U1).expect("remove");
    assert_tree(&snapshot(&root), &before, "");
    torn
}

/// Kills a remove of a device of `type_id` on `parent` after every possible number of file
/// operations, recovers, and checks the tree is exactly as after a remove that ran through.
fn torn_removes_are_completed(host: &SimHost, parent: &str, type_id: &str) -> usize {
    let sim = Simulator::new();
    let root = host.root().to_path_buf();
    create(host, parent, type_id, U1).expect("create");
    let with = snapshot(&root);
    remove(host, U1).expect("remove");
    let after = snapshot(&root);
    create(host, parent, type_id, U1).expect("create again");
    assert_tree(&snapshot(&root), &with, "creates are reproducible");
    let mut torn = 0;
    for k in 0.. {
        let (died, result) = killed_after(k, || remove(host, U1));
        if !died {
            result.expect("remove with nobody killed");
            assert_tree(&snapshot(&root), &after, "");
            break;
        }
        if !any_journal(host) {
            // Killed before its first side effect: the remove never happened.
            assert_tree(
                &snapshot(&root),
                &with,
                format!("remove killed after {k} steps"),
            );
            continue;
        }
        if snapshot(&root) != with {
            torn += 1;
        }
        if k % 5 == 2 {
            for j in 0.. {
                let (died, result) = killed_after(j, || sim.recover(host.root()));
                if !died {
                    result.expect("recover");
                    break;
                }
            }
        } else {
            sim.recover(host.root()).expect("recover");
        }
        assert_tree(
            &snapshot(&root),
            &after,
            format!("remove killed after {k} steps"),
        );
        create(host, parent, type_id, U1).expect("create again");
        assert_tree(&snapshot(&root), &with, "");
    }
    torn
}

/// Torn creates and removes of each type on its parent, each torn at every step.
fn torn_operations_are_finished(host: &SimHost, cases: &[(&str, &str)]) {
    for (parent, type_id) in cases {
        let torn = torn_creates_are_undone(host, parent, type_id);
        assert!(torn >= 15, "{type_id}: only {torn} torn creates");
        let torn = torn_removes_are_completed(host, parent, type_id);
        assert!(torn >= 5, "{type_id}: only {torn} torn removes");
    }
}

#[test]
fn killed_nvidia_creates_and_removes_are_finished() {
    let (_dir, host) = host("nvidia-turing");
    // A device already on the parent makes the create change only some counts.
    create(&host, GPU1, "nvidia-259", U2).expect("neighbour");
    torn_operations_are_finished(&host, &[(GPU0, "nvidia-259"), (GPU1, "nvidia-343")]);
    assert_eq!(avail(&host, GPU1, "nvidia-259"), 5);
}

#[test]
fn killed_gvtg_creates_and_removes_are_finished() {
    let (_dir, host) = host("intel-gvtg");
    torn_operations_are_finished(&host, &[(IGPU, "i915-GVTg_V5_8")]);
    create(&host, IGPU, "i915-GVTg_V5_8", U2).expect("neighbour");
    torn_operations_are_finished(&host, &[(IGPU, "i915-GVTg_V5_8")]);
    assert_eq!(avail(&host, IGPU, "i915-GVTg_V5_8"), 1);
}

#[test]
fn killed_mtty_and_counter_model_creates_and_removes_are_finished() {
    let (dir, host) = host("mtty");
    let mdpy = mdpy_parent(dir.path());
    create(&host, &mdpy, "mdpy-xga", U2).expect("neighbour");
    torn_operations_are_finished(&host, &[(MTTY, "mtty-2"), (mdpy.as_str(), "mdpy-vga")]);
    assert_eq!(avail(&host, &mdpy, "mdpy-vga"), 1);
    assert_eq!(avail(&host, MTTY, "mtty-1"), 24);
}

#[test]
fn an_undone_create_takes_away_the_directories_it_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_profile("mtty", dir.path()).expect("profile");
    let mdpy = mdpy_parent_without_driver(dir.path());
    fs::remove_dir_all(dir.path().join("sys/bus/mdev/devices")).expect("rm");
    let host = SimHost::new(dir.path());
    let sim = Simulator::new();
    let before = snapshot(dir.path());
    for k in 0.. {
        let (died, result) = killed_after(k, || create(&host, &mdpy, "mdpy-xga", U1));
        if !died {
            result.expect("create");
            break;
        }
        sim.recover(host.root()).expect("recover");
        assert_tree(
            &snapshot(dir.path()),
            &before,
            format!("create killed after {k} steps"),
        );
    }
    assert!(host.sys("bus/mdev/drivers/mdpy").is_dir());
    assert!(host.sys(&format!("bus/mdev/devices/{U1}")).exists());
    assert_eq!(avail(&host, &mdpy, "mdpy-vga"), 1);
}

#[test]
fn the_next_write_finishes_a_killed_one() {
    let (dir, host) = host("nvidia-turing");
    let before = snapshot(dir.path());
    create(&host, GPU0, "nvidia-256", U1).expect("create");
    let clean = snapshot(dir.path());
    remove(&host, U1).expect("remove");
    // Killed half-way: the device directory exists, the bus link does not.
    let (died, _) = killed_after(12, || create(&host, GPU0, "nvidia-256", U1));
    assert!(died);
    assert!(dir.path().join(GPU0).join(U1).exists());
    assert!(!host.sys(&format!("bus/mdev/devices/{U1}")).exists());
    // The same UUID again: without recovery EEXIST, with it a clean create.
    create(&host, GPU0, "nvidia-256", U1).expect("create after the kill");
    assert_tree(&snapshot(dir.path()), &clean, "");
    // A remove killed half-way is completed by a write to an unrelated attribute.
    let (died, _) = killed_after(4, || remove(&host, U1));
    assert!(died);
    let params = dir.path().join(GPU1).join("driver_override");
    host.write_attr(&params, "(null)\n").expect("plain write");
    assert_tree(&snapshot(dir.path()), &before, "");
}

#[test]
fn killed_plain_writes_keep_a_whole_value() {
    let (dir, host) = host("nvidia-turing");
    create(&host, GPU0, "nvidia-256", U1).expect("create");
    let params = host.sys(&format!("bus/mdev/devices/{U1}/nvidia/vgpu_params"));
    host.write_attr(&params, "frame_rate_limiter=0")
        .expect("write");
    let old = snapshot(dir.path());
    let mut new = old.clone();
    let key = Path::new(GPU0).join(U1).join("nvidia/vgpu_params");
    assert!(old.contains_key(&key));
    new.insert(key, "644 \"disable_vnc=1\"".to_string());
    let sim = Simulator::new();
    let mut seen_old = false;
    for k in 0.. {
        host.write_attr(&params, "frame_rate_limiter=0")
            .expect("reset");
        let (died, result) = killed_after(k, || host.write_attr(&params, "disable_vnc=1"));
        if !died {
            result.expect("write");
            break;
        }
        sim.recover(host.root()).expect("recover");
        // Whole, and nothing left behind: the old value or the new one.
        let now = snapshot(dir.path());
        if now == old {
            seen_old = true;
        } else {
            assert_tree(&now, &new, format!("write killed after {k} steps"));
        }
    }
    assert!(seen_old);
    assert_eq!(fs::read_to_string(&params).expect("read"), "disable_vnc=1");
    let mode = fs::metadata(&params).expect("meta").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o644
    );
}

#[test]
fn torn_journals_are_dropped_and_recovery_needs_no_tree() {
    let (dir, host) = host("nvidia-turing");
    let before = snapshot(dir.path());
    let sim = Simulator::new();
    sim.recover(host.root()).expect("nothing to do");
    assert_tree(&snapshot(dir.path()), &before, "");
    // A journal cut short while being written: no side effect had started.
    fs::write(
        journal(&host),
        format!("vgpud-simulator journal 1\nop=create\npid=1\nuuid={U1}\n"),
    )
    .expect("write");
    sim.recover(host.root()).expect("recover");
    assert_tree(&snapshot(dir.path()), &before, "");
    // A journal that survived its tree (sys gone) is dropped.
    fs::write(journal(&host), "vgpud-simulator journal 1\nop=create\n").expect("write");
    fs::remove_dir_all(dir.path().join("sys")).expect("rm sys");
    sim.recover(host.root()).expect("recover without sys");
    assert!(!any_journal(&host));
    // And a root with nothing in it at all.
    let empty = tempfile::tempdir().expect("tempdir");
    sim.recover(empty.path()).expect("empty root");
}

#[test]
fn simulators_of_different_hosts_on_one_tree_serialize() {
    let (dir, _host) = host("nvidia-turing");
    let root = dir.path().to_path_buf();
    // Each thread has its own SimHost and so its own Simulator.
    let created = super::tests::race_4q_creates(6, 3, || Arc::new(SimHost::new(&root)));
    assert_eq!(created, 6);
}

// ---- other processes ----------------------------------------------------------------------

/// Environment of a child test process: the root, what to do, and a tag for its UUIDs.
const CHILD_ROOT: &str = "VGPUD_SIM_TEST_CHILD_ROOT";
const CHILD_MODE: &str = "VGPUD_SIM_TEST_CHILD_MODE";
const CHILD_TAG: &str = "VGPUD_SIM_TEST_CHILD_TAG";

/// Starts this test binary again, running only [`child_writer`] with `mode` on `root`.
fn spawn_child(root: &Path, mode: &str, tag: u32) -> std::process::Child {
    let exe = std::env::current_exe().expect("test binary");
    Command::new(exe)
        .args([
            "--exact",
            "crash_tests::child_writer",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ROOT, root)
        .env(CHILD_MODE, mode)
        .env(CHILD_TAG, tag.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child")
}

/// What the child prints before its messages (libtest may print on the same line first).
const MARK: &str = "vgpud-child: ";

/// Reads the child's stdout up to its message starting with `prefix`; returns the message.
fn wait_for_line(child: &mut std::process::Child, prefix: &str) -> String {
    let out = child.stdout.as_mut().expect("stdout");
    let mut reader = BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).expect("read child");
        assert!(n > 0, "child ended before printing {prefix:?}");
        if let Some((_, message)) = line.split_once(MARK) {
            if message.starts_with(prefix) {
                return message.trim().to_string();
            }
        }
    }
}

/// The work of a child process; does nothing unless started by [`spawn_child`].
/// - `fill`: prints `ready`, waits for `ROOT/go`, then tries 40 creates of RTX6000-1Q on GPU0
///   and prints `created=N`;
/// - `churn`: creates, parametrizes and removes devices of every vendor of the `mixed`
///   profile until killed, printing `ready` after its first create.
#[test]
#[ignore = "run by other tests in a child process"]
fn child_writer() {
    let (Ok(root), Ok(mode)) = (std::env::var(CHILD_ROOT), std::env::var(CHILD_MODE)) else {
        return;
    };
    let tag: u32 = std::env::var(CHILD_TAG)
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let host = SimHost::new(&root);
    match mode.as_str() {
        "fill" => {
            println!("{MARK}ready");
            let waiting = Instant::now();
            while !Path::new(&root).join("go").exists() {
                if waiting.elapsed() > Duration::from_secs(20) {
                    return;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            let mut ok = 0;
            for i in 0..40 {
                let uuid = format!("{tag:08x}-0000-4000-8000-{i:012x}");
                if create(&host, GPU0, "nvidia-256", &uuid).is_ok() {
                    ok += 1;
                }
            }
            println!("{MARK}created={ok}");
        }
        "churn" => {
            let types = [
                (GPU0, "nvidia-259"),
                (GPU1, "nvidia-256"),
                (IGPU, "i915-GVTg_V5_8"),
                (MTTY, "mtty-1"),
            ];
            // Until killed, or for a while should the parent be gone.
            let running = Instant::now();
            for i in 0u64.. {
                if running.elapsed() > Duration::from_secs(30) {
                    return;
                }
                let (parent, type_id) = types[(i % 4) as usize];
                let uuid = format!("{tag:08x}-0000-4000-8000-{i:012x}");
                if create(&host, parent, type_id, &uuid).is_ok() && type_id.starts_with("nvidia") {
                    let params = host.sys(&format!("bus/mdev/devices/{uuid}/nvidia/vgpu_params"));
                    let _ = host.write_attr(&params, "frame_rate_limiter=0");
                }
                if i == 0 {
                    println!("{MARK}ready");
                }
                let devices = host
                    .list_dir(&host.sys("bus/mdev/devices"))
                    .unwrap_or_default();
                if devices.len() > 3 {
                    let victim = &devices[(i as usize * 7) % devices.len()];
                    let _ = remove(&host, victim);
                }
            }
        }
        _ => {}
    }
}

#[test]
fn two_processes_writing_one_tree_never_overcommit() {
    let (dir, host) = host("nvidia-turing");
    let mut child = spawn_child(dir.path(), "fill", 0xc);
    wait_for_line(&mut child, "ready");
    fs::write(dir.path().join("go"), "").expect("go");
    let mut ok = 0;
    for i in 0..40 {
        let uuid = format!("0000000a-0000-4000-8000-{i:012x}");
        match create(&host, GPU0, "nvidia-256", &uuid) {
            Ok(()) => ok += 1,
            Err(errno) => assert_eq!(errno, Some(Errno::ENOSPC as i32)),
        }
    }
    let line = wait_for_line(&mut child, "created=");
    let theirs: u32 = line.trim_start_matches("created=").parse().expect("count");
    assert!(child.wait().expect("wait").success());
    assert_eq!(ok + theirs, 24, "mine {ok}, the child's {theirs}");
    let devices = host.list_dir(&host.sys("bus/mdev/devices")).expect("list");
    assert_eq!(devices.len(), 24);
    assert_eq!(avail(&host, GPU0, "nvidia-256"), 0);
    let before = all_available(&host);
    refresh_available(&dir.path().join(GPU0)).expect("refresh");
    assert_eq!(all_available(&host), before);
}

/// Checks a tree where no write is in flight: every device is whole and published everywhere,
/// nothing half-made is left, no temporary file, and every count agrees with the rules.
fn assert_consistent(host: &SimHost) {
    let root = host.root();
    assert!(!any_journal(host));
    let devices = host.list_dir(&host.sys("bus/mdev/devices")).expect("list");
    for u in &devices {
        let dev = host
            .resolve(&host.sys(&format!("bus/mdev/devices/{u}")))
            .expect("bus link resolves");
        for f in ["remove", "uevent"] {
            assert!(dev.join(f).is_file(), "{u}/{f}");
        }
        let t = host
            .link_name(&dev.join("mdev_type"))
            .expect("read")
            .expect("mdev_type");
        let type_link = dev.join("mdev_type/devices").join(u);
        assert_eq!(host.resolve(&type_link).expect("type link"), dev, "{t}");
        let g = host
            .link_name(&dev.join("iommu_group"))
            .expect("read")
            .expect("group");
        let member = host.sys(&format!("kernel/iommu_groups/{g}/devices/{u}"));
        assert_eq!(host.resolve(&member).expect("group member"), dev);
        assert!(host.dev(&format!("vfio/{g}")).is_file(), "vfio node {g}");
        let d = host
            .link_name(&dev.join("driver"))
            .expect("read")
            .expect("driver");
        let bound = host.sys(&format!("bus/mdev/drivers/{d}/{u}"));
        assert_eq!(host.resolve(&bound).expect("driver entry"), dev);
    }
    // Nothing outside the published devices: device directories, type links, group members,
    // driver entries and vfio nodes all belong to a device on the bus.
    let mut groups = Vec::new();
    for path in snapshot(root).into_keys() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        assert!(
            !name.contains(".vgpud-"),
            "temporary file {}",
            path.display()
        );
        if crate::kernel::guid_parse(&name).is_some() {
            assert!(devices.contains(&name), "{} is left over", path.display());
        }
        // dev/vfio holds the group nodes, and the directory of the device cdevs.
        if path.parent() == Some(Path::new("dev/vfio")) && name != "devices" {
            groups.push(name);
        }
    }
    for g in groups {
        let members = host.sys(&format!("kernel/iommu_groups/{g}/devices"));
        assert!(
            !host.list_dir(&members).expect("list").is_empty(),
            "dev/vfio/{g} without a group"
        );
    }
    let counts = all_available(host);
    for parent in host.list_dir(&host.sys("class/mdev_bus")).expect("list") {
        let dir = host
            .resolve(&host.sys(&format!("class/mdev_bus/{parent}")))
            .expect("dir");
        refresh_available(&dir).expect("refresh");
    }
    assert_eq!(all_available(host), counts, "counts follow the rules");
}

#[test]
fn processes_killed_with_sigkill_leave_no_torn_device() {
    let (dir, host) = host("mixed");
    let sim = Simulator::new();
    let clean = snapshot(dir.path());
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id());
    let mut journals = 0;
    let started = Instant::now();
    for round in 0..30u32 {
        let mut child = spawn_child(dir.path(), "churn", round);
        wait_for_line(&mut child, "ready");
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        std::thread::sleep(Duration::from_micros((seed >> 33) % 20_000));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        if any_journal(&host) {
            journals += 1;
        }
        sim.recover(host.root()).expect("recover");
        assert_consistent(&host);
    }
    assert!(journals > 0, "no kill landed inside a write");
    // Everything the children left is an ordinary device: removing them all restores the tree.
    for u in host.list_dir(&host.sys("bus/mdev/devices")).expect("list") {
        remove(&host, &u).expect("remove");
    }
    assert_tree(&snapshot(dir.path()), &clean, "");
    assert!(started.elapsed() < Duration::from_secs(120));
}

#[test]
fn creates_on_different_parents_do_not_wait_for_each_other() {
    let (dir, host) = host("nvidia-turing");
    let host = Arc::new(host);
    // Somebody holds GPU0's lock (a create in progress there, in whatever process).
    let held = super::journal::lock_dir(&dir.path().join(GPU0)).expect("lock GPU0");
    let on_gpu0 = {
        let host = Arc::clone(&host);
        std::thread::spawn(move || create(&host, GPU0, "nvidia-256", U1))
    };
    // A create on GPU1 goes through meanwhile.
    let started = Instant::now();
    create(&host, GPU1, "nvidia-256", U2).expect("create on GPU1");
    assert!(started.elapsed() < Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !on_gpu0.is_finished(),
        "GPU0's create waits for GPU0's lock"
    );
    assert!(!dir.path().join(GPU0).join(U1).exists());
    drop(held);
    on_gpu0.join().expect("join").expect("create on GPU0");
    assert!(host.sys(&format!("bus/mdev/devices/{U1}")).exists());
    assert_consistent(&host);
}

#[test]
fn a_create_on_another_parent_finishes_a_killed_one() {
    let (dir, host) = host("nvidia-turing");
    let before = snapshot(dir.path());
    create(&host, GPU1, "nvidia-256", U2).expect("create");
    remove(&host, U2).expect("remove");
    // Killed half-way on GPU0: its parent's journal stays, the tree's lock is not needed.
    let (died, _) = killed_after(12, || create(&host, GPU0, "nvidia-256", U1));
    assert!(died);
    assert!(dir.path().join(GPU0).join(U1).exists());
    assert!(any_journal(&host) && !journal(&host).exists());
    // The same UUID on GPU1: the bus lock's holder finishes GPU0's journal first.
    create(&host, GPU1, "nvidia-256", U1).expect("create on GPU1");
    assert!(!dir.path().join(GPU0).join(U1).exists());
    assert!(dir.path().join(GPU1).join(U1).exists());
    assert_consistent(&host);
    remove(&host, U1).expect("remove");
    assert_tree(&snapshot(dir.path()), &before, "");
}
