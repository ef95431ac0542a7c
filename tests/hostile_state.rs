//! Hostile state files on the simulated host, as root could leave them: a malformed, empty,
//! non-UTF-8 or huge record, a garbage intent, an unexpected file in `intents/`, a directory
//! or a symlink where a record should be, a bad SR-IOV settings file, FIFOs in
//! `etc/mdevctl.d/<parent>/` and `var/lib/vgpud/devices/` at start and created while vgpud
//! runs, and a truncated mdevctl definition next to a valid record across a reboot. In each
//! case the real vgpud (on a private dbus-daemon) starts or keeps running, answers
//! `ListDevices` within a bounded time, sets the bad file aside as `<name>.bad`, names it
//! once in its log, still lists every good device, and stops on SIGTERM; and the real
//! mdevctl 1.4 lists the definitions after vgpud set a bad one aside. Every wait is bounded.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, Policy, TestBus, TestHost};
use common::proxy::{bool_opts, opts, ManagerProxy};

const PROFILES: &[&str] = &["mtty"];
const FAST: &[&str] = &["--poll-interval-ms", "100"];
/// How long a call may take before the daemon counts as hung.
const CALL_LIMIT: Duration = Duration::from_secs(5);

/// A simulated host with three devices made by vgpud (persistent autostart, persistent
/// manual, transient), and vgpud stopped.
struct Host {
    host: TestHost,
    bus: TestBus,
    /// uuid → owner.
    devices: BTreeMap<String, String>,
    auto: String,
    manual: String,
}

impl Host {
    async fn new() -> Self {
        let host = TestHost::new(PROFILES);
        let bus = TestBus::start(Policy::Open);
        let mut daemon = Daemon::start_args(&bus, &host, FAST).await;
        let conn = bus.connect().await;
        let m = ManagerProxy::new(&conn).await.expect("manager");
        let (auto, _) = m
            .create_device("mtty-1", opts(&[("owner", "vm-auto")]))
            .await
            .expect("persistent");
        let mut manual_opts = bool_opts(&[("autostart", false)]);
        manual_opts.insert("owner", zbus::Variant::from("vm-manual"));
        let (manual, _) = m
            .create_device("mtty-2", manual_opts)
            .await
            .expect("manual");
        let mut transient_opts = bool_opts(&[("persistent", false)]);
        transient_opts.insert("owner", zbus::Variant::from("vm-transient"));
        let (transient, _) = m
            .create_device("mtty-1", transient_opts)
            .await
            .expect("transient");
        stop(&mut daemon);
        let devices = [
            (auto.clone(), "vm-auto".to_string()),
            (manual.clone(), "vm-manual".to_string()),
            (transient, "vm-transient".to_string()),
        ]
        .into_iter()
        .collect();
        Host {
            host,
            bus,
            devices,
            auto,
            manual,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.host.path(rel)
    }

    fn record(&self, uuid: &str) -> PathBuf {
        self.path(&format!("var/lib/vgpud/devices/{uuid}.json"))
    }

    fn definition(&self, uuid: &str) -> PathBuf {
        self.path(&format!("etc/mdevctl.d/mtty/{uuid}"))
    }

    async fn start(&self) -> Daemon {
        Daemon::start_args(&self.bus, &self.host, FAST).await
    }

    /// The UUIDs `mdevctl list --defined` prints; panics if mdevctl fails.
    fn mdevctl_defined(&self) -> Vec<String> {
        let json = self.host.mdevctl_json(&["list", "--defined", "--dumpjson"]);
        let mut out = Vec::new();
        for parent in json.as_array().expect("array") {
            for devices in parent.as_object().expect("object").values() {
                for dev in devices.as_array().expect("devices") {
                    out.extend(dev.as_object().expect("device").keys().cloned());
                }
            }
        }
        out.sort();
        out
    }

    fn persistent(&self) -> Vec<String> {
        let mut v = vec![self.auto.clone(), self.manual.clone()];
        v.sort();
        v
    }
}

/// SIGTERM and at most 10 s for vgpud to exit.
fn stop(daemon: &mut Daemon) {
    let status = daemon.stop_within(Duration::from_secs(10));
    assert!(
        status.is_some(),
        "vgpud is still running 10 s after SIGTERM:\n{}",
        daemon.log_text()
    );
}

/// `ListDevices`, which must answer within [`CALL_LIMIT`]: uuid → owner.
async fn list(bus: &TestBus, daemon: &Daemon) -> BTreeMap<String, String> {
    let conn = tokio::time::timeout(CALL_LIMIT, bus.connect())
        .await
        .expect("connecting in time");
    let m = ManagerProxy::new(&conn).await.expect("manager");
    match tokio::time::timeout(CALL_LIMIT, m.list_devices()).await {
        Ok(reply) => reply
            .expect("ListDevices")
            .into_iter()
            .map(|d| (d.0, d.3))
            .collect(),
        Err(_) => panic!(
            "ListDevices did not answer within {CALL_LIMIT:?}:\n{}",
            daemon.log_text()
        ),
    }
}

/// Several `ListDevices` calls over 450 ms (looks at the host may come by meanwhile), each
/// answered in time.
async fn look_a_few_times(bus: &TestBus, daemon: &Daemon) -> BTreeMap<String, String> {
    let mut last = BTreeMap::new();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        last = list(bus, daemon).await;
    }
    last
}

/// Waits (at most 10 s) until `check` holds.
async fn eventually(what: &str, daemon: &Daemon, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting: {what}\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `<path>.bad`.
fn bad(path: &Path) -> PathBuf {
    let mut name = path.file_name().expect("name").to_os_string();
    name.push(".bad");
    path.with_file_name(name)
}

/// The bad file is gone from its place, kept as `<name>.bad` (not followed if a link), and
/// named in exactly one warning of the log.
fn assert_set_aside_once(daemon: &Daemon, path: &Path) {
    assert!(
        std::fs::symlink_metadata(path).is_err(),
        "{} is still in place",
        path.display()
    );
    assert!(
        std::fs::symlink_metadata(bad(path)).is_ok(),
        "{} was not set aside as .bad",
        path.display()
    );
    let log = daemon.log_text();
    let shown = path.display().to_string();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&shown) && l.contains("set aside"))
        .collect();
    assert_eq!(lines.len(), 1, "one log line names {shown}:\n{log}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
}

/// Writes a bad file at `path`, making its directory if need be.
fn plant(path: &Path, content: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
    std::fs::write(path, content).expect("write");
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

/// Starts vgpud on `h` after `plant` made a bad file at `path`, and checks that it serves
/// every device with its owner (but those in `owner_lost`, listed with an empty owner: their
/// record was the bad file), set the file aside once, and stops on SIGTERM.
async fn survives(h: &Host, path: &Path, owner_lost: &[&str]) -> Daemon {
    let mut daemon = h.start().await;
    let listed = look_a_few_times(&h.bus, &daemon).await;
    let mut expected = h.devices.clone();
    for uuid in owner_lost {
        expected.insert(uuid.to_string(), String::new());
    }
    assert_eq!(listed, expected, "{}", daemon.log_text());
    assert_set_aside_once(&daemon, path);
    assert_eq!(h.mdevctl_defined(), h.persistent());
    stop(&mut daemon);
    daemon
}

#[tokio::test]
async fn a_malformed_record() {
    let h = Host::new().await;
    let path = h.record(&h.manual);
    plant(&path, r#"{"version": 1, "uuid": "#);
    survives(&h, &path, &[&h.manual]).await;
}

#[tokio::test]
async fn an_empty_record() {
    let h = Host::new().await;
    let path = h.record(&h.manual);
    plant(&path, "");
    survives(&h, &path, &[&h.manual]).await;
}

#[tokio::test]
async fn a_record_that_is_not_utf8() {
    let h = Host::new().await;
    let path = h.record(&h.manual);
    let mut bytes = std::fs::read(&path).expect("record");
    bytes.extend_from_slice(b"\xff\xfe");
    std::fs::write(&path, bytes).expect("write");
    survives(&h, &path, &[&h.manual]).await;
}

#[tokio::test]
async fn a_huge_record() {
    let h = Host::new().await;
    // Valid JSON, a valid record even, padded past the 1 MiB limit.
    let path = h.record(&h.manual);
    let mut text = std::fs::read_to_string(&path).expect("record");
    text.push_str(&" ".repeat(2 << 20));
    std::fs::write(&path, text).expect("write");
    survives(&h, &path, &[&h.manual]).await;
}

#[tokio::test]
async fn a_record_of_another_uuid() {
    let h = Host::new().await;
    // A copy under a name that is not its UUID: removing the device would leave it behind.
    let stray = "5f5f5f5f-0000-4000-8000-000000000001";
    let path = h.record(stray);
    std::fs::copy(h.record(&h.auto), &path).expect("copy");
    survives(&h, &path, &[]).await;
}

#[tokio::test]
async fn a_garbage_intent() {
    let h = Host::new().await;
    let path = h.path(&format!("var/lib/vgpud/intents/{}.json", h.auto));
    plant(&path, "\x00garbage\x07");
    survives(&h, &path, &[]).await;
}

#[tokio::test]
async fn an_unexpected_file_in_intents() {
    let h = Host::new().await;
    let path = h.path("var/lib/vgpud/intents/notes.json");
    plant(&path, r#"{"hello": "world"}"#);
    survives(&h, &path, &[]).await;
}

#[tokio::test]
async fn a_directory_where_a_record_should_be() {
    let h = Host::new().await;
    let path = h.record("6e6e6e6e-0000-4000-8000-000000000001");
    std::fs::create_dir(&path).expect("dir");
    std::fs::write(path.join("inside"), "x").expect("write");
    survives(&h, &path, &[]).await;
    assert!(bad(&path).join("inside").exists(), "moved whole");
}

#[tokio::test]
async fn a_symlink_where_a_record_should_be() {
    let h = Host::new().await;
    let path = h.record(&h.manual);
    // A link to a perfectly valid record elsewhere: still not a state file.
    let elsewhere = h.path("elsewhere.json");
    std::fs::rename(&path, &elsewhere).expect("move the record");
    std::os::unix::fs::symlink(&elsewhere, &path).expect("link");
    survives(&h, &path, &[&h.manual]).await;
    assert!(
        std::fs::symlink_metadata(bad(&path))
            .expect("set aside")
            .file_type()
            .is_symlink(),
        "the link itself was moved"
    );
    assert!(elsewhere.is_file(), "what it pointed to is untouched");
}

#[tokio::test]
async fn a_bad_sriov_settings_file() {
    let h = Host::new().await;
    let path = h.path("var/lib/vgpud/sriov/0000:41:00.0.json");
    plant(&path, "[");
    survives(&h, &path, &[]).await;
}

#[tokio::test]
async fn a_fifo_in_a_definition_directory_at_start() {
    let h = Host::new().await;
    let path = h.definition("7a7a7a7a-0000-4000-8000-000000000001");
    mkfifo(&path);
    // mdevctl skips what is not a regular file.
    assert_eq!(h.mdevctl_defined(), h.persistent());
    survives(&h, &path, &[]).await;
}

#[tokio::test]
async fn a_fifo_where_a_record_should_be_at_start() {
    let h = Host::new().await;
    let path = h.record("7b7b7b7b-0000-4000-8000-000000000001");
    mkfifo(&path);
    survives(&h, &path, &[]).await;
}

/// vgpud runs; a FIFO appears at `path`; the next looks must neither hang nor lose anything.
async fn fifo_while_running(h: &Host, path: &Path, daemon: Daemon) {
    let mut daemon = daemon;
    assert_eq!(list(&h.bus, &daemon).await, h.devices);
    mkfifo(path);
    // A look comes by (the definitions' watcher's, or the periodic one without uevents).
    let listed = look_a_few_times(&h.bus, &daemon).await;
    assert_eq!(listed, h.devices, "{}", daemon.log_text());
    eventually("the FIFO is set aside", &daemon, || {
        std::fs::symlink_metadata(bad(path)).is_ok()
    })
    .await;
    look_a_few_times(&h.bus, &daemon).await;
    assert_set_aside_once(&daemon, path);
    assert_eq!(h.mdevctl_defined(), h.persistent());
    stop(&mut daemon);
}

#[tokio::test]
async fn a_fifo_in_a_definition_directory_while_running() {
    let h = Host::new().await;
    let path = h.definition("7c7c7c7c-0000-4000-8000-000000000001");
    // The definitions' watcher makes vgpud look.
    let daemon = h.start().await;
    fifo_while_running(&h, &path, daemon).await;
}

#[tokio::test]
async fn a_fifo_where_a_record_should_be_while_running() {
    let h = Host::new().await;
    let path = h.record("7d7d7d7d-0000-4000-8000-000000000001");
    // vgpud's records change by no uevent and are not watched: a full look meets the FIFO
    // (at start, after lost uevents, or, as here, periodically without a uevent socket).
    let mut args = FAST.to_vec();
    args.push("--no-uevents");
    let daemon = Daemon::start_args(&h.bus, &h.host, &args).await;
    fifo_while_running(&h, &path, daemon).await;
}

#[tokio::test]
async fn a_truncated_definition_next_to_a_valid_record_across_a_reboot() {
    let h = Host::new().await;
    let path = h.definition(&h.auto);
    let text = std::fs::read_to_string(&path).expect("definition");
    std::fs::write(&path, &text[..text.len() / 2]).expect("truncate");
    h.host.reboot(PROFILES);
    // What breaks without vgpud: mdevctl lists no definition at all.
    let before = h.host.mdevctl(&["list", "--defined", "--dumpjson"]);
    assert!(!before.status.success(), "mdevctl fails on a torn file");

    let mut daemon = h.start().await;
    let listed = look_a_few_times(&h.bus, &daemon).await;
    // The transient device is gone with the reboot; the manual one is defined, inactive;
    // the one whose definition is torn is still known, from its record, with its owner.
    let expected: BTreeMap<String, String> = [
        (h.auto.clone(), "vm-auto".to_string()),
        (h.manual.clone(), "vm-manual".to_string()),
    ]
    .into_iter()
    .collect();
    assert_eq!(listed, expected, "{}", daemon.log_text());
    assert!(h.record(&h.auto).is_file(), "the record is kept");
    assert_set_aside_once(&daemon, &path);
    assert_eq!(h.mdevctl_defined(), vec![h.manual.clone()]);
    let conn = h.bus.connect().await;
    let dev = common::proxy::device_proxy(&conn, &h.auto).await;
    assert!(!dev.active().await.expect("Active"));
    assert!(dev.persistent().await.expect("Persistent"));
    assert!(!dev.autostart().await.expect("Autostart"));
    stop(&mut daemon);

    // And at the next start, and the next reboot.
    h.host.reboot(PROFILES);
    let mut daemon = h.start().await;
    assert_eq!(look_a_few_times(&h.bus, &daemon).await, expected);
    assert!(h.record(&h.auto).is_file(), "the record is still kept");
    stop(&mut daemon);
}

/// zlib's CRC-32, as the journal's lines carry it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                0xedb8_8320 ^ (crc >> 1)
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Appends `entries` to the journal (`var/lib/vgpud/journal`) as lines with valid checksums.
fn append_to_journal(h: &Host, entries: &[serde_json::Value]) {
    use std::io::Write;
    let path = h.path("var/lib/vgpud/journal");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("journal");
    for entry in entries {
        let json = entry.to_string();
        writeln!(file, "{:08x} {json}", crc32(json.as_bytes())).expect("append");
    }
}

/// Every file and directory below `dir` whose mode is set-uid, set-gid or writable by
/// anyone (links are not followed).
fn special_modes(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        let mode = meta.permissions().mode();
        if !meta.file_type().is_symlink() && mode & 0o6002 != 0 {
            out.push(format!("{} {:o}", entry.path().display(), mode & 0o7777));
        }
        if meta.is_dir() {
            out.extend(special_modes(&entry.path()));
        }
    }
    out
}

/// Issue #22 item 11: a crafted journal commit writes through a symbolic link to a
/// directory outside the root, placed under `etc/mdevctl.d`. vgpud follows no link, says so,
/// and serves every device.
#[tokio::test]
async fn a_journal_commit_through_a_linked_directory_writes_nothing_outside_the_root() {
    let h = Host::new().await;
    let outside = h.path("../outside");
    std::fs::create_dir(&outside).expect("outside");
    std::os::unix::fs::symlink(&outside, h.path("etc/mdevctl.d/evil")).expect("link");
    let def = std::fs::read_to_string(h.definition(&h.auto)).expect("definition");
    let uuid = "5e5e5e5e-0000-4000-8000-000000000001";
    append_to_journal(
        &h,
        &[serde_json::json!({"entry": "commit",
            "write": [{"path": format!("etc/mdevctl.d/evil/{uuid}"), "mode": 0o644,
                       "content": def}]})],
    );
    let mut daemon = h.start().await;
    let listed = look_a_few_times(&h.bus, &daemon).await;
    assert_eq!(listed, h.devices, "{}", daemon.log_text());
    let written: Vec<_> = std::fs::read_dir(&outside)
        .expect("outside")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        written.is_empty(),
        "written outside the root: {written:?}\n{}",
        daemon.log_text()
    );
    let log = daemon.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("etc/mdevctl.d/evil")),
        "the link is reported:\n{log}"
    );
    stop(&mut daemon);
}

/// Issue #22 item 11: crafted journal commits give a definition and a record mode 6777.
/// vgpud writes each with the mode of its kind (0644, 0600), never the line's.
#[tokio::test]
async fn a_journal_commit_of_mode_6777_writes_the_fixed_modes() {
    let h = Host::new().await;
    let rel_def = format!("etc/mdevctl.d/mtty/{}", h.auto);
    let rel_rec = format!("var/lib/vgpud/devices/{}.json", h.manual);
    let def = std::fs::read_to_string(h.path(&rel_def)).expect("definition");
    let rec = std::fs::read_to_string(h.path(&rel_rec)).expect("record");
    append_to_journal(
        &h,
        &[serde_json::json!({"entry": "commit",
            "write": [{"path": rel_def, "mode": 0o6777, "content": def},
                      {"path": rel_rec, "mode": 0o6777, "content": rec}]})],
    );
    let mut daemon = h.start().await;
    let listed = look_a_few_times(&h.bus, &daemon).await;
    assert_eq!(listed, h.devices, "{}", daemon.log_text());
    let special: Vec<String> = ["etc", "var/lib/vgpud"]
        .iter()
        .flat_map(|d| special_modes(&h.path(d)))
        .collect();
    assert!(special.is_empty(), "special modes: {special:?}");
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(p)
            .expect("file")
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode(&h.path(&rel_def)), 0o644);
    assert_eq!(mode(&h.path(&rel_rec)), 0o600);
    stop(&mut daemon);
}

/// Issue #22 item 11: the journal holds an intent of format version 99, which would remove
/// a device. vgpud replays nothing of it, sets the journal aside whole as `journal.bad` (a
/// newer vgpud's entries are not lost) with one warning that names the version, and serves
/// every device.
#[tokio::test]
async fn a_journal_intent_of_an_unknown_version_is_set_aside_not_replayed() {
    let h = Host::new().await;
    append_to_journal(
        &h,
        &[
            serde_json::json!({"entry": "intent", "version": 99, "uuid": h.auto,
            "started": 1, "op": "remove", "parent": "mtty"}),
        ],
    );
    let mut daemon = h.start().await;
    let listed = look_a_few_times(&h.bus, &daemon).await;
    assert_eq!(listed, h.devices, "{}", daemon.log_text());
    let journal = h.path("var/lib/vgpud/journal");
    let kept = std::fs::read_to_string(bad(&journal)).unwrap_or_default();
    assert!(
        kept.contains("\"version\":99"),
        "the journal is set aside whole: {kept:?}\n{}",
        daemon.log_text()
    );
    let log = daemon.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("version 99"))
        .collect();
    assert_eq!(lines.len(), 1, "one warning names the version:\n{log}");
    assert!(daemon.is_running());
    stop(&mut daemon);
}
