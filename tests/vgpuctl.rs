//! vgpuctl, the operator's command line, as a real process against a real vgpud on a private
//! bus and a simulated host: every command with its effect checked through busctl or vgpuctl
//! itself, the tables and the JSON against golden files (`tests/golden/vgpuctl/`; regenerate
//! with `VGPUD_REGENERATE_GOLDEN=1 cargo test --test vgpuctl`), the exit code of each error
//! class, events, completions, the man page and the install.
//!
//! vgpuctl is its own package: the tests build it (`cargo build -p vgpuctl`) next to vgpud
//! before the first run.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::daemon::{vgpud_bin, Policy, TestBus};
use common::golden::assert_golden;
use common::monitor::CallMonitor;
use common::nvml::fake_library;
use common::setup::Setup;
use serde_json::Value;

fn vgpuctl() -> PathBuf {
    common::vgpuctl::bin()
}

/// What a vgpuctl run left.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs vgpuctl with `args` as they are, in UTC (`TZ=UTC`: times in golden files).
fn run_raw(args: &[&str]) -> Run {
    run_in_zone("UTC", args)
}

/// Runs vgpuctl with `args` as they are, with `TZ` set to `zone`.
fn run_in_zone(zone: &str, args: &[&str]) -> Run {
    let out = Command::new(vgpuctl())
        .args(args)
        .env("TZ", zone)
        .output()
        .expect("run vgpuctl");
    Run {
        code: out.status.code().expect("vgpuctl exited, not killed"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    }
}

/// Runs `vgpuctl --address BUS args…`.
fn ctl(s: &Setup, args: &[&str]) -> Run {
    let mut all = vec!["--address", s.bus.address.as_str()];
    all.extend_from_slice(args);
    run_raw(&all)
}

/// stdout of a run that must succeed.
#[track_caller]
fn ok(s: &Setup, args: &[&str]) -> String {
    let r = ctl(s, args);
    assert_eq!(
        r.code, 0,
        "vgpuctl {args:?} failed: {}{}",
        r.stderr, r.stdout
    );
    r.stdout
}

/// The `--json` document of a run that must succeed.
#[track_caller]
fn json(s: &Setup, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let text = ok(s, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("vgpuctl {all:?}: {e}:\n{text}"))
}

/// stderr of a run that must fail with `code`, printing nothing on stdout.
#[track_caller]
fn fails(s: &Setup, args: &[&str], code: i32) -> String {
    let r = ctl(s, args);
    assert_eq!(
        r.code, code,
        "vgpuctl {args:?}: expected exit {code}; stdout {:?}, stderr {:?}",
        r.stdout, r.stderr
    );
    assert!(r.stdout.is_empty(), "nothing on stdout: {:?}", r.stdout);
    assert!(
        r.stderr.starts_with("vgpuctl: "),
        "the error is named: {:?}",
        r.stderr
    );
    r.stderr
}

/// A failing run as a golden-file entry: the command, the exit code and stderr.
fn error_entry(s: &Setup, args: &[&str], code: i32) -> String {
    let stderr = fails(s, args, code);
    format!("$ vgpuctl {}\nexit {code}\n{stderr}\n", args.join(" "))
}

/// vgpuctl's JSON text with what changes from run to run (the digits of `"created"`) as 0,
/// byte for byte otherwise; it must parse.
fn normalized(text: &str) -> String {
    serde_json::from_str::<Value>(text).unwrap_or_else(|e| panic!("not JSON: {e}:\n{text}"));
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("\"created\": ") {
                zeroed(l)
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A line with its digits as 0: a time's shape without the time.
fn zeroed(line: &str) -> String {
    line.chars()
        .map(|c| if c.is_ascii_digit() { '0' } else { c })
        .collect()
}

/// `--json` output of a run that must succeed, normalized.
#[track_caller]
fn json_text(s: &Setup, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.push("--json");
    normalized(&ok(s, &all))
}

/// A device listing with the digits of its `created:` time as 0, alignment kept.
fn normalized_text(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with("created:") {
                zeroed(l)
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The UUIDs `busctl … ListDevices` reports.
fn busctl_devices(s: &Setup) -> Vec<String> {
    let data = s.busctl_manager("ListDevices", &[]).expect("ListDevices");
    data[0]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row[0].as_str().expect("uuid").to_string())
        .collect()
}

/// `busctl get-property` of a GPU's property, as JSON `data`.
fn busctl_gpu_property(s: &Setup, gpu: &str, property: &str) -> Value {
    let path = vgpud_client::paths::gpu_path(gpu).to_string();
    busctl_property(s, &path, "org.vgpud1.Gpu", property)
}

/// `busctl get-property` of an object's property, as JSON `data`.
fn busctl_property(s: &Setup, path: &str, interface: &str, property: &str) -> Value {
    let out = s.bus.busctl(&[
        "--json=short",
        "get-property",
        "org.vgpud1",
        path,
        interface,
        property,
    ]);
    assert!(
        out.status.success(),
        "busctl get-property {property}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("busctl prints JSON");
    v["data"].clone()
}

/// The UUIDs `vgpuctl devices --json` lists.
fn listed(s: &Setup) -> Vec<String> {
    json(s, &["devices"])
        .as_array()
        .expect("an array")
        .iter()
        .map(|d| d["uuid"].as_str().expect("uuid").to_string())
        .collect()
}

const U1: &str = "11111111-2222-4333-8444-000000000001";
const U2: &str = "11111111-2222-4333-8444-000000000002";
const U3: &str = "11111111-2222-4333-8444-000000000003";
const UNKNOWN: &str = "11111111-2222-4333-8444-00000000ffff";

/// PARENT means one thing everywhere: the device an mdev or vGPU sits on (a GPU or a VF), the
/// same in the `devices` table, in `device` and in `--json`.
#[track_caller]
fn parents_agree(s: &Setup) {
    let table = ok(s, &["devices"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    let column = header
        .iter()
        .position(|h| *h == "PARENT")
        .expect("a PARENT column");
    let mut seen = 0;
    for line in lines {
        // The columns before TYPE have no spaces.
        let cells: Vec<&str> = line.split_whitespace().collect();
        let uuid = cells[0];
        let parent = json(s, &["device", uuid])["parent"].clone();
        assert_eq!(cells[column], parent, "devices and device --json: {line}");
        let text = ok(s, &["device", uuid]);
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().eq(["parent:", cells[column]])),
            "device shows parent {}: {text}",
            cells[column]
        );
        seen += 1;
    }
    assert!(seen > 0, "no device to compare: {table}");
}

/// `date`'s rendering of a Unix time in a time zone: the oracle for vgpuctl's times.
fn date_in(zone: &str, seconds: u64, format: &str) -> String {
    let out = Command::new("date")
        .env("TZ", zone)
        .arg("-d")
        .arg(format!("@{seconds}"))
        .arg(format)
        .output()
        .expect("run date");
    assert!(out.status.success(), "date {format}");
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim_end()
        .to_string()
}

#[test]
fn help_lists_every_command_and_the_exit_codes() {
    let help = run_raw(&["--help"]);
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("Exit status:"), "{}", help.stdout);
    assert_golden("vgpuctl/help.txt", &help.stdout);
    for (sub, file) in [
        (&["create", "--help"][..], "vgpuctl/help-create.txt"),
        (&["mig", "--help"][..], "vgpuctl/help-mig.txt"),
        (
            &["scheduler", "set", "--help"][..],
            "vgpuctl/help-scheduler-set.txt",
        ),
    ] {
        let r = run_raw(sub);
        assert_eq!(r.code, 0, "{sub:?}: {}", r.stderr);
        assert_golden(file, &r.stdout);
    }
    // clap's own usage errors are 2, like vgpud's InvalidArgument.
    for args in [
        &["create"][..],
        &["--system", "--session", "gpus"],
        &["modify", U1, "--persistent", "maybe"],
        &["modify", U1, "--autostart", "--no-autostart"],
        &["create", "mtty-1", "--autostart", "--no-autostart"],
        &["scheduler", "set", "0000:01:00.0", "--arr", "--no-arr"],
        &["heterogeneous", "0000:01:00.0", "sideways"],
        &["no-such-command"],
    ] {
        let r = run_raw(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stdout.is_empty());
    }
}

#[test]
fn an_unreachable_vgpud_exits_6() {
    let mut golden = String::new();
    // No bus at all.
    let args = [
        "--address",
        "unix:path=/nonexistent/vgpuctl-test-bus",
        "gpus",
    ];
    let r = run_raw(&args);
    assert_eq!(r.code, 6, "{}", r.stderr);
    // Plain words: which bus, that its socket is missing, and what else to check.
    for says in [
        "cannot reach the bus at unix:path=/nonexistent/vgpuctl-test-bus",
        "/nonexistent/vgpuctl-test-bus does not exist",
        "systemctl status vgpud",
        "--session",
    ] {
        assert!(r.stderr.contains(says), "{says:?} in {}", r.stderr);
    }
    assert!(
        !r.stderr.contains("org.freedesktop.zbus.Error"),
        "no made-up D-Bus error name: {}",
        r.stderr
    );
    golden.push_str(&format!(
        "$ vgpuctl {}\nexit 6\n{}\n",
        args.join(" "),
        r.stderr
    ));
    // The system bus, where none is (DBUS_SYSTEM_BUS_ADDRESS is how zbus and vgpuctl find it).
    let out = Command::new(vgpuctl())
        .arg("gpus")
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            "unix:path=/nonexistent/system-bus",
        )
        .output()
        .expect("run vgpuctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    for says in [
        "cannot reach the system bus (unix:path=/nonexistent/system-bus)",
        "systemctl status dbus",
        "systemctl status vgpud",
        "--session, or --address ADDRESS",
    ] {
        assert!(stderr.contains(says), "{says:?} in {stderr}");
    }
    golden.push_str(&format!(
        "$ DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/system-bus vgpuctl gpus\nexit 6\n{stderr}\n"
    ));
    // A bus where nobody owns org.vgpud1.
    let bus = TestBus::start(Policy::Open);
    for cmd in [
        &["gpus"][..],
        &["devices", "--json"],
        &["mig", "profiles", "0000:01:00.0"],
    ] {
        let mut all = vec!["--address", bus.address.as_str()];
        all.extend_from_slice(cmd);
        let r = run_raw(&all);
        assert_eq!(r.code, 6, "{cmd:?}: {}", r.stderr);
        assert!(r.stdout.is_empty());
        let stderr = r.stderr.replace(&bus.address, "<bus>");
        assert!(
            stderr.starts_with("vgpuctl: vgpud is not running on the bus at <bus>")
                && stderr.contains("systemctl status vgpud"),
            "{cmd:?}: {stderr}"
        );
        golden.push_str(&format!(
            "$ vgpuctl --address <bus> {}\nexit 6\n{stderr}\n",
            cmd.join(" "),
        ));
    }
    assert_golden("vgpuctl/errors-unreachable.txt", golden);
}

#[tokio::test]
async fn tables_and_json_of_a_mixed_host() {
    let s = Setup::new(&["mixed"]).await;
    assert_golden("vgpuctl/gpus.txt", ok(&s, &["gpus"]));
    assert_golden("vgpuctl/gpus.json", json_text(&s, &["gpus"]));
    assert_golden("vgpuctl/types.txt", ok(&s, &["types"]));
    assert_golden("vgpuctl/types.json", json_text(&s, &["types"]));
    assert_golden(
        "vgpuctl/types-available-mtty.txt",
        ok(&s, &["types", "--available", "--gpu", "mtty"]),
    );
    let rtx = "0000:3b:00.0";
    assert_golden("vgpuctl/gpu.txt", ok(&s, &["gpu", rtx]));
    assert_eq!(
        ok(&s, &["gpus", "show", rtx]),
        ok(&s, &["gpu", rtx]),
        "gpus show is gpu"
    );
    assert_golden("vgpuctl/gpu.json", json_text(&s, &["gpu", rtx]));
    assert_golden(
        "vgpuctl/type-info.txt",
        ok(&s, &["type-info", "RTX6000-4Q"]),
    );
    assert_golden(
        "vgpuctl/type-info.json",
        json_text(&s, &["type-info", "RTX6000-4Q", "--parent", rtx]),
    );
    assert_eq!(
        ok(&s, &["capacity", "RTX6000-4Q"]),
        "12\n",
        "two RTX 6000, 6 each"
    );
    assert_eq!(
        json(
            &s,
            &[
                "capacity",
                "RTX6000-4Q",
                "--parent",
                rtx,
                "--numa-node",
                "0"
            ]
        ),
        serde_json::json!({"type": "RTX6000-4Q", "capacity": 6})
    );

    // Two devices with fixed UUIDs, then the device tables.
    assert_eq!(
        ok(
            &s,
            &[
                "create",
                "RTX6000-4Q",
                "--parent",
                rtx,
                "--owner",
                "vm1",
                "--uuid",
                U1
            ]
        ),
        format!("created mdev {U1} (GRID RTX6000-4Q) on {rtx}\n")
    );
    let made = json(
        &s,
        &[
            "create",
            "mtty-2",
            "--uuid",
            U2,
            "--transient",
            "--no-autostart",
            "--policy",
            "spread",
        ],
    );
    assert_eq!(made["uuid"], U2, "{made}");
    assert_eq!(
        made["path"],
        vgpud_client::paths::device_path(U2).to_string()
    );
    assert_golden("vgpuctl/devices.txt", ok(&s, &["devices"]));
    assert_golden("vgpuctl/devices.json", json_text(&s, &["devices"]));
    parents_agree(&s);
    assert_golden(
        "vgpuctl/device.txt",
        normalized_text(&ok(&s, &["device", U1])),
    );
    assert_golden("vgpuctl/device.json", json_text(&s, &["device", U1]));
    let transient = json(&s, &["device", U2]);
    assert_eq!(
        (&transient["persistent"], &transient["autostart"]),
        (&Value::Bool(false), &Value::Bool(false)),
        "{transient}"
    );
    assert_eq!(ok(&s, &["capacity", "RTX6000-4Q", "--parent", rtx]), "5\n");
    assert_eq!(
        json(&s, &["gpu", rtx])["devices"],
        serde_json::json!([vgpud_client::paths::device_path(U1).to_string()])
    );
}

#[tokio::test]
async fn a_device_is_made_changed_rendered_and_removed() {
    let s = Setup::new(&["nvidia-turing"]).await;
    let gpu = "0000:3b:00.0";
    assert_eq!(
        ok(
            &s,
            &[
                "create",
                "RTX6000-2Q",
                "--parent",
                gpu,
                "--uuid",
                U1,
                "--owner",
                "vm1"
            ]
        ),
        format!("created mdev {U1} (GRID RTX6000-2Q) on {gpu}\n")
    );
    // vgpuctl and busctl both see it.
    assert_eq!(listed(&s), vec![U1.to_string()]);
    assert_eq!(busctl_devices(&s), vec![U1.to_string()]);
    let d = json(&s, &["device", U1]);
    assert_eq!(d["owner"], "vm1");
    assert_eq!(d["type_name"], "GRID RTX6000-2Q");
    assert_eq!(d["active"], true);
    assert!(s.host.path("etc/mdevctl.d").exists());

    // A retry with --exist-ok is the same device; --quiet prints only its UUID.
    assert_eq!(
        ok(
            &s,
            &["-q", "create", "RTX6000-2Q", "--uuid", U1, "--exist-ok"]
        ),
        format!("{U1}\n")
    );

    // Its creation time, local: ISO 8601 in --json, a human form in `device`, as `date`
    // renders the daemon's Created in each zone.
    let created = busctl_property(
        &s,
        &vgpud_client::paths::device_path(U1).to_string(),
        "org.vgpud1.Device",
        "Created",
    )
    .as_u64()
    .expect("Created is a number");
    assert!(created > 0, "vgpud made it, so it knows when");
    for zone in ["UTC", "Asia/Kolkata", "America/New_York"] {
        if zone != "UTC" && !Path::new("/usr/share/zoneinfo").join(zone).exists() {
            common::skip::cannot_run(
                "a_device_is_made_changed_rendered_and_removed",
                &format!("no time zone {zone} in /usr/share/zoneinfo (apt-get install tzdata)"),
            );
            continue;
        }
        let address = s.bus.address.as_str();
        let r = run_in_zone(zone, &["--address", address, "device", U1, "--json"]);
        let d: Value = serde_json::from_str(&r.stdout).expect("JSON");
        assert_eq!(
            d["created"],
            date_in(zone, created, "+%Y-%m-%dT%H:%M:%S%:z"),
            "{zone}"
        );
        let r = run_in_zone(zone, &["--address", address, "device", U1]);
        let human = date_in(zone, created, "+%Y-%m-%d %H:%M:%S %Z");
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with("created:") && l.trim_end().ends_with(&human)),
            "{zone}: created {human} in {}",
            r.stdout
        );
    }

    // Every change says what it did in a line, and nothing with --quiet.
    let mut changes = String::new();
    let mut change = |args: &[&str]| {
        let out = ok(&s, args);
        assert_eq!(out.lines().count(), 1, "one line: {out:?}");
        changes.push_str(&format!("$ vgpuctl {}\n{out}", args.join(" ")));
    };
    change(&["stop", U1]);
    assert_eq!(json(&s, &["device", U1])["active"], false);
    change(&["start", U1]);
    assert_eq!(json(&s, &["device", U1])["active"], true);
    change(&["modify", U1, "--no-autostart"]);
    assert_eq!(json(&s, &["device", U1])["autostart"], false);
    change(&["modify", U1, "--no-persistent"]);
    assert_eq!(json(&s, &["device", U1])["persistent"], false);
    change(&["modify", U1, "--persistent", "--autostart"]);
    let d = json(&s, &["device", U1]);
    assert_eq!(
        (&d["persistent"], &d["autostart"]),
        (&Value::Bool(true), &Value::Bool(true))
    );
    for quiet in [
        &["-q", "stop", U1][..],
        &["start", U1, "--quiet"],
        &["-q", "modify", U1, "--autostart"],
    ] {
        assert_eq!(ok(&s, quiet), "", "{quiet:?}");
    }
    assert_eq!(json(&s, &["device", U1])["active"], true);

    // Modify.
    assert_eq!(
        json(
            &s,
            &["modify", U1, "--persistent", "true", "--autostart", "false"]
        ),
        serde_json::json!({"uuid": U1, "persistent": true, "autostart": false})
    );
    let d = json(&s, &["device", U1]);
    assert_eq!(
        (&d["persistent"], &d["autostart"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    ok(&s, &["modify", U1, "--persistent", "false"]);
    assert_eq!(json(&s, &["device", U1])["persistent"], false);

    // XML: as is, and with options.
    assert_golden("vgpuctl/xml.txt", ok(&s, &["xml", U1]));
    let xml = ok(&s, &["xml", U1, "--display", "--ramfb"]);
    assert!(
        xml.contains(r#"display="on""#) && xml.contains(r#"ramfb="on""#),
        "{xml}"
    );
    assert_eq!(
        json(&s, &["xml", U1])["xml"].as_str().map(|x| x.trim_end()),
        Some(ok(&s, &["xml", U1]).trim_end())
    );
    // A domain for it.
    let domain = ok(
        &s,
        &[
            "domain",
            "vdi-1",
            U1,
            "--memory-mib",
            "8192",
            "--vcpus",
            "4",
            "--uefi",
            "--graphics",
            "spice",
            "--domain-uuid",
            U3,
        ],
    );
    assert_golden("vgpuctl/domain.xml", &domain);
    assert!(
        domain.contains("<name>vdi-1</name>") && domain.contains(U3),
        "{domain}"
    );
    let minimal = ok(
        &s,
        &[
            "domain",
            "vdi-2",
            U1,
            "--template",
            "minimal",
            "--no-display",
        ],
    );
    assert!(minimal.contains("<name>vdi-2</name>"), "{minimal}");

    // Errors, each with its class's exit code, in plain words with what to try.
    let mut errors = String::new();
    for (args, code) in [
        (&["create", "RTX6000-2Q", "--uuid", U1][..], 4),
        (&["create", "RTX6000-24Q", "--parent", gpu], 4),
        (&["create", "no-such-type"], 3),
        (&["create", "mtty-1", "--parent", gpu], 3),
        (&["create", "RTX6000-2Q", "--parent", "0000:99:00.0"], 3),
        (&["create", "RTX6000-2Q", "--uuid", "not-a-uuid"], 2),
        (&["device", "not-a-uuid"], 2),
        (&["start", "not-a-uuid"], 2),
        (&["device", UNKNOWN], 3),
        (&["gpu", "0000:99:00.0"], 3),
        (&["start", UNKNOWN], 3),
        (&["capacity", "no-such-type"], 3),
        (&["type-info", "no-such-type"], 3),
        (&["xml", UNKNOWN], 3),
        (&["vfs", gpu, "4"], 1),
        (&["mig", "mode", gpu, "on"], 1),
    ] {
        errors.push_str(&error_entry(&s, args, code));
    }
    assert_golden("vgpuctl/errors.txt", errors);
    let e = fails(&s, &["create", "NOPE-1Q"], 3);
    assert!(
        e.contains("no GPU on this host offers type \"NOPE-1Q\"") && e.contains("vgpuctl types"),
        "{e}"
    );
    // A malformed UUID is InvalidArgument for every client: the daemon's methods (busctl)
    // and the client crate's property reads alike.
    let e = s
        .busctl_manager("StartDevice", &["sa{sv}", "not-a-uuid", "0"])
        .expect_err("StartDevice of not-a-uuid");
    assert!(e.contains("not a UUID"), "{e}");
    let client =
        vgpud_client::Client::connect(&vgpud_client::BusChoice::Address(s.bus.address.clone()))
            .await
            .expect("connect");
    match client.device("not-a-uuid").await {
        Err(vgpud_client::Error::InvalidArgument(m)) => assert!(m.contains("not a UUID"), "{m}"),
        other => panic!("device(not-a-uuid): {other:?}"),
    }

    // Remove: gone for vgpuctl and busctl; a second remove is not found.
    change(&["remove", U1]);
    assert_golden("vgpuctl/changes.txt", changes);
    assert!(listed(&s).is_empty());
    assert!(busctl_devices(&s).is_empty());
    fails(&s, &["remove", U1], 3);
    assert_eq!(
        ok(&s, &["devices"]),
        "UUID  KIND  GPU  PARENT  TYPE  OWNER  ACTIVE  PERSISTENT  AUTOSTART\n"
    );
    assert_eq!(json(&s, &["devices"]), serde_json::json!([]));
}

/// The listings read the whole tree in one call (`GetManagedObjects`), and `device` and `gpu`
/// one object in one call (`GetAll`), however many objects there are: before, `devices` asked
/// `ListDevices` and then each property of each device with a call of its own (15 a device).
#[tokio::test]
async fn listings_read_the_whole_tree_in_one_call() {
    let s = Setup::new(&["mixed"]).await;
    let rtx = "0000:3b:00.0";
    ok(&s, &["create", "RTX6000-4Q", "--parent", rtx, "--uuid", U1]);
    ok(&s, &["create", "mtty-2", "--uuid", U2, "--transient"]);
    ok(&s, &["create", "mtty-1", "--uuid", U3]);
    let tree = "org.freedesktop.DBus.ObjectManager.GetManagedObjects";
    let get_all = "org.freedesktop.DBus.Properties.GetAll";
    let mut monitor = CallMonitor::start(&s.bus).await;
    for (args, want) in [
        (&["devices"][..], tree),
        (&["devices", "--json"], tree),
        (&["gpus"], tree),
        (&["gpus", "--json"], tree),
        (&["device", U1], get_all),
        (&["gpu", rtx], get_all),
    ] {
        let out = ok(&s, args);
        if args[0] == "devices" {
            assert!(
                [U1, U2, U3].iter().all(|u| out.contains(u)),
                "{args:?} lists every device: {out}"
            );
        }
        assert_eq!(
            monitor.calls_to_vgpud().await,
            vec![want.to_string()],
            "vgpuctl {args:?} asks vgpud once"
        );
    }
}

#[tokio::test]
async fn attach_and_detach_reach_libvirt() {
    // libvirt's test driver: the domain "test" exists and cannot attach.
    let s = Setup::with_args(&["mtty"], &["--libvirt-uri", "test:///default"]).await;
    ok(&s, &["create", "mtty-1", "--uuid", U1]);
    for verb in ["attach", "detach"] {
        let e = fails(&s, &[verb, U1, "test", "--live", "--config"], 1);
        assert!(e.contains("org.vgpud1.Error.Libvirt"), "{e}");
        let e = fails(&s, &[verb, U1, "no-such-domain"], 3);
        assert!(e.contains("org.vgpud1.Error.NotFound"), "{e}");
    }
    fails(&s, &["attach", UNKNOWN, "test"], 3);
}

/// A simulated H200 host with vgpud using the fake NVML library.
async fn h200() -> Setup {
    let lib = fake_library().to_string_lossy().into_owned();
    Setup::with_args(&["nvidia-h200"], &["--nvml-library", &lib]).await
}

#[tokio::test]
async fn mig_vfs_scheduler_and_heterogeneous_mode_on_an_h200() {
    let s = h200().await;
    let (mig, other) = ("0000:49:00.0", "0000:c9:00.0");
    assert_golden("vgpuctl/gpus-h200.txt", ok(&s, &["gpus"]));

    // MIG on, then the profiles.
    assert_eq!(
        json(&s, &["mig", "mode", mig, "on"]),
        serde_json::json!({"gpu": mig, "mig_current": true, "mig_pending": true})
    );
    assert_eq!(
        busctl_gpu_property(&s, mig, "MigMode"),
        serde_json::json!([true, true])
    );
    assert_golden(
        "vgpuctl/mig-profiles.txt",
        ok(&s, &["mig", "profiles", mig]),
    );
    assert_golden(
        "vgpuctl/mig-profiles.json",
        json_text(&s, &["mig", "profiles", mig]),
    );

    // VFs.
    assert_eq!(
        ok(&s, &["vfs", mig, "32"]),
        format!("{mig}: 32 VFs enabled\n")
    );
    assert_eq!(busctl_gpu_property(&s, mig, "NumVfs"), 32);

    // A GPU instance at placement 4, seen by busctl, then destroyed.
    let make_instance = || -> u32 {
        ok(
            &s,
            &[
                "-q",
                "mig",
                "create",
                mig,
                "3g.71gb",
                "--placement",
                "4",
                "--transient",
            ],
        )
        .trim()
        .parse()
        .expect("an instance id")
    };
    let id = make_instance();
    let instances = json(&s, &["mig", "instances", mig]);
    assert_eq!(
        instances,
        serde_json::json!([{"id": id, "profile_id": 9, "profile": "3g.71gb", "start": 4, "size": 4, "device": ""}])
    );
    assert_eq!(
        busctl_gpu_property(&s, mig, "GpuInstances"),
        serde_json::json!([[id, 9, "3g.71gb", 4, 4, ""]])
    );
    let table = ok(&s, &["mig", "instances", mig]);
    assert_eq!(
        table,
        format!("ID  PROFILE  PROFILE_ID  PLACEMENT  DEVICE\n{id:<2}  3g.71gb  9           4+4        -\n")
    );
    // The same placement again: no room, exit 4.
    fails(
        &s,
        &["mig", "create", mig, "3g.71gb", "--placement", "4"],
        4,
    );
    // Enabling VFs again (through 0) would wipe the instance: refused (exit 4) naming it,
    // until --force.
    ok(&s, &["vfs", mig, "0"]);
    let refused = fails(&s, &["vfs", mig, "32"], 4);
    assert!(refused.contains("3g.71gb"), "{refused}");
    assert_eq!(
        json(&s, &["mig", "instances", mig])
            .as_array()
            .map(Vec::len),
        Some(1),
        "the instance is still there"
    );
    ok(&s, &["vfs", mig, "0"]);
    ok(&s, &["vfs", mig, "32", "--force"]);
    assert_eq!(
        json(&s, &["mig", "instances", mig]),
        serde_json::json!([]),
        "--force let it go"
    );
    let id = make_instance();
    assert_eq!(
        json(&s, &["mig", "destroy", mig, &id.to_string()]),
        serde_json::json!({"gpu": mig, "id": id, "destroyed": true})
    );
    assert_eq!(
        busctl_gpu_property(&s, mig, "GpuInstances"),
        serde_json::json!([])
    );
    fails(&s, &["mig", "destroy", mig, &id.to_string()], 3);
    // Without --quiet, each says what it did.
    let made = ok(&s, &["mig", "create", mig, "3g.71gb", "--transient"]);
    let id = made
        .strip_prefix(&format!("{mig}: made GPU instance "))
        .and_then(|rest| rest.strip_suffix(" (3g.71gb)\n"))
        .unwrap_or_else(|| panic!("a confirmation: {made:?}"));
    assert_eq!(
        ok(&s, &["mig", "destroy", mig, id]),
        format!("{mig}: destroyed GPU instance {id}\n")
    );

    // A MIG-backed vGPU makes its instance; capacity counts it; metrics of both.
    assert_golden(
        "vgpuctl/capacity-mig.json",
        json_text(&s, &["capacity", "H200X-1-18C", "--parent", mig]),
    );
    ok(
        &s,
        &["create", "H200X-1-18C", "--parent", mig, "--uuid", U1],
    );
    let instances = json(&s, &["mig", "instances", mig]);
    assert_eq!(instances[0]["device"], U1, "{instances}");
    // A vGPU on a VF: its parent is the VF, its GPU the physical one.
    parents_agree(&s);
    assert_eq!(ok(&s, &["capacity", "H200X-1-18C", "--parent", mig]), "6\n");
    let gpu_metrics = json(&s, &["metrics", mig]);
    for key in [
        "gpu_utilization",
        "memory_used",
        "memory_total",
        "temperature",
    ] {
        assert!(gpu_metrics.get(key).is_some(), "{key} in {gpu_metrics}");
    }
    // For a human, each figure with its unit: W, °C, %, GiB.
    let text = ok(&s, &["metrics", mig]);
    let line = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("{key} in {text}"))
            .to_string()
    };
    assert!(line("memory_total").ends_with(" GiB"), "{text}");
    assert!(line("temperature").ends_with(" °C"), "{text}");
    assert!(line("gpu_utilization").ends_with('%'), "{text}");
    let mw = gpu_metrics["power_mw"]
        .as_u64()
        .expect("power_mw in --json");
    assert!(
        line("power").ends_with(&format!("{:.1} W", mw as f64 / 1000.0)),
        "{text}"
    );
    assert!(!text.contains("power_mw"), "{text}");
    let vgpu_metrics = json(&s, &["metrics", U1]);
    assert_eq!(
        vgpu_metrics["gpu_instance"], instances[0]["id"],
        "{vgpu_metrics}"
    );
    // Its instance is in use: Busy, exit 4; the scheduler under MIG: NotSupported, exit 1.
    let busy = instances[0]["id"].to_string();
    let e = fails(&s, &["mig", "destroy", mig, &busy], 4);
    assert!(e.contains("org.vgpud1.Error.Busy") && e.contains(U1), "{e}");
    let e = fails(&s, &["scheduler", "set", mig, "--policy", "equal-share"], 1);
    assert!(e.contains("org.vgpud1.Error.NotSupported"), "{e}");
    ok(&s, &["remove", U1]);
    assert_eq!(json(&s, &["mig", "instances", mig]), serde_json::json!([]));

    // The scheduler of the other GPU: set, shown, and in busctl's Scheduler property.
    assert_golden(
        "vgpuctl/scheduler-show.txt",
        ok(&s, &["scheduler", "show", other]),
    );
    let root = s.host.root.to_string_lossy().into_owned();
    let set = ok(
        &s,
        &[
            "scheduler",
            "set",
            other,
            "--policy",
            "equal-share",
            "--timeslice-ms",
            "3",
        ],
    );
    assert_golden("vgpuctl/scheduler-set.txt", set.replace(&root, "<root>"));
    let shown = json(&s, &["scheduler", "show", other]);
    assert_eq!(shown["policy"], "equal-share", "{shown}");
    assert_eq!(shown["timeslice_ms"], 3, "{shown}");
    let sched = busctl_gpu_property(&s, other, "Scheduler");
    assert_eq!(sched["policy"]["data"], "equal-share", "{sched}");
    let later = json(
        &s,
        &[
            "scheduler",
            "set",
            other,
            "--policy",
            "equal-share",
            "--arr",
            "true",
            "--avg-factor",
            "2",
            "--frequency-hz",
            "80",
            "--no-runtime",
        ],
    );
    assert_eq!(later["applied"], false, "{later}");
    // Neither now nor later: nothing to do, a usage error.
    let e = fails(
        &s,
        &["scheduler", "set", other, "--no-runtime", "--transient"],
        2,
    );
    assert!(e.contains("org.vgpud1.Error.InvalidArgument"), "{e}");
    fails(&s, &["scheduler", "set", other, "--timeslice-ms", "31"], 2);

    // Heterogeneous mode needs VFs: NotSupported (1), then on and off.
    fails(&s, &["heterogeneous", other, "on"], 1);
    assert_eq!(
        json(&s, &["vfs", other, "32", "--transient"])["num_vfs"],
        32
    );
    assert_eq!(
        ok(&s, &["heterogeneous", other, "on"]),
        format!("{other}: heterogeneous mode on\n")
    );
    assert_eq!(busctl_gpu_property(&s, other, "HeterogeneousMode"), true);
    assert_eq!(json(&s, &["gpu", other])["heterogeneous_mode"], true);
    assert_eq!(
        json(&s, &["heterogeneous", other, "off", "--transient"]),
        serde_json::json!({"gpu": other, "heterogeneous_mode": false})
    );
    assert_eq!(busctl_gpu_property(&s, other, "HeterogeneousMode"), false);
    // VFs off again; MIG off on the first GPU once its VFs are off.
    assert_eq!(
        ok(&s, &["vfs", other, "0"]),
        format!("{other}: VFs disabled\n")
    );
    assert_eq!(busctl_gpu_property(&s, other, "NumVfs"), 0);
    fails(&s, &["mig", "mode", mig, "off"], 4);
    ok(&s, &["vfs", mig, "0"]);
    assert_eq!(
        ok(&s, &["mig", "mode", mig, "off"]),
        format!("{mig}: MIG off\n")
    );
    assert_eq!(
        busctl_gpu_property(&s, mig, "MigMode"),
        serde_json::json!([false, false])
    );
}

/// Spawns `vgpuctl --address BUS watch ARGS…` and waits until it has subscribed; its stdout
/// lines come through the channel.
fn spawn_watch(s: &Setup, args: &[&str]) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new(vgpuctl())
        .args(["--address", &s.bus.address, "watch"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vgpuctl watch");
    let stderr = child.stderr.take().expect("stderr");
    let mut first = String::new();
    BufReader::new(stderr)
        .read_line(&mut first)
        .expect("read the watch's stderr");
    assert!(
        first.contains("watching"),
        "the watch subscribed: {first:?}"
    );
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Waits for a child's exit code, killing it after `limit`.
fn wait_exit(child: &mut std::process::Child, limit: Duration) -> i32 {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code().expect("an exit code, not a signal");
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("vgpuctl watch did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every line from a watch's reader thread up to the end of the output, which comes once
/// vgpuctl has exited; panics after `limit`.
fn all_lines(lines: &mpsc::Receiver<String>, limit: Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + limit;
    let mut all = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) => all.push(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => return all,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("the watch's output did not end within {limit:?}; read {all:?}")
            }
        }
    }
}

#[tokio::test]
async fn watch_prints_events_as_they_come() {
    let s = Setup::new(&["mtty"]).await;

    // --json --count 2: a create's DeviceCreated and the GPU's PropertiesChanged.
    let (mut child, lines) = spawn_watch(&s, &["--count", "2", "--json"]);
    ok(&s, &["create", "mtty-1", "--uuid", U1]);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
    // Every line it printed, read to the end of its output (not only what the reader thread
    // has passed on so far: under load that was nothing yet).
    let events: Vec<Value> = all_lines(&lines, Duration::from_secs(10))
        .into_iter()
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    let created = events
        .iter()
        .find(|e| e["event"] == "device-created")
        .unwrap_or_else(|| panic!("no device-created in {events:?}"));
    assert_eq!(created["uuid"], U1);
    assert_eq!(
        created["path"],
        vgpud_client::paths::device_path(U1).to_string()
    );
    let props = events
        .iter()
        .find(|e| e["event"] == "properties-changed")
        .unwrap_or_else(|| panic!("no properties-changed in {events:?}"));
    assert_eq!(props["interface"], "org.vgpud1.Gpu", "{props}");
    assert!(props["changed"]["Devices"].is_array(), "{props}");

    // Human lines until SIGINT, which exits 0.
    let (mut child, lines) = spawn_watch(&s, &[]);
    ok(&s, &["remove", U1]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.starts_with("device-removed"))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(_) => panic!("no device-removed line; saw {seen:?}"),
        }
    }
    assert!(seen.contains(&format!("device-removed {U1}")), "{seen:?}");
    let props = seen
        .iter()
        .find(|l| l.starts_with("properties "))
        .map(String::as_str)
        .unwrap_or_default();
    let gpu_path = vgpud_client::paths::gpu_path("mtty").to_string();
    if !props.is_empty() {
        assert_eq!(
            props,
            format!("properties {gpu_path} org.vgpud1.Gpu Devices=[]")
        );
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(kill.success());
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
}

#[test]
fn completions_parse_and_the_man_page_renders() {
    let bash = run_raw(&["completions", "bash"]);
    assert_eq!(bash.code, 0);
    assert!(bash.stdout.contains("vgpuctl"), "{}", bash.stdout);
    let mut check = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(bash.stdout.as_bytes())
        .expect("write");
    let out = check.wait_with_output().expect("bash -n");
    assert!(
        out.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for shell in ["zsh", "fish"] {
        let r = run_raw(&["completions", shell]);
        assert_eq!(r.code, 0, "{shell}: {}", r.stderr);
        assert!(
            r.stdout.contains("vgpuctl") && r.stdout.contains("scheduler"),
            "{shell}"
        );
    }
    let r = run_raw(&["completions", "tcsh"]);
    assert_eq!(r.code, 2, "an unknown shell is a usage error");

    let page = run_raw(&["man"]);
    assert_eq!(page.code, 0, "{}", page.stderr);
    assert!(page.stdout.starts_with(".ie") || page.stdout.starts_with(".TH"));
    assert!(page.stdout.contains(".SH \"EXIT STATUS\""));
    // groff with every warning on renders it without one; man reads it too.
    let Some(text) = render_man(&page.stdout) else {
        return;
    };
    for needle in [
        "EXIT STATUS",
        "vgpuctl mig create GPU PROFILE",
        "NoCapacity",
        "--address",
        "--quiet",
        "--no-autostart",
        "removed device UUID",
        "2026-12-03T08:43:36+01:00",
        "utilization in %",
    ] {
        assert!(text.contains(needle), "{needle} in the man page:\n{text}");
    }
}

/// The man page as text through groff (warnings are failures), or `None` after reporting
/// that groff is missing.
fn render_man(page: &str) -> Option<String> {
    let child = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-P-cbou", "-rLL=200n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            common::skip::cannot_run(
                "completions_parse_and_the_man_page_renders",
                &format!("groff cannot run ({e}); apt-get install groff-base"),
            );
            return None;
        }
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("write the page");
    let out = child.wait_with_output().expect("groff");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "groff warns: {stderr}"
    );
    // Plain text: overstrikes and hyphenation marks gone.
    let text = String::from_utf8_lossy(&out.stdout).replace(['\u{2010}', '\u{2212}'], "-");
    Some(text)
}

#[test]
fn install_adds_vgpuctl_its_completions_and_man_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("dest");
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/install"))
        .env("DESTDIR", &dest)
        .env("VGPUD_BINARY", vgpud_bin())
        .env("VGPUCTL_BINARY", vgpuctl())
        .output()
        .expect("run tools/install");
    assert!(
        out.status.success(),
        "tools/install failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = dest.join("usr/bin/vgpuctl");
    let installed = Command::new(&bin)
        .arg("--version")
        .output()
        .expect("run the installed vgpuctl");
    assert!(installed.status.success());
    assert!(String::from_utf8_lossy(&installed.stdout).starts_with("vgpuctl "));
    for (path, needle) in [
        ("usr/share/bash-completion/completions/vgpuctl", "_vgpuctl"),
        (
            "usr/share/zsh/vendor-completions/_vgpuctl",
            "#compdef vgpuctl",
        ),
        (
            "usr/share/fish/vendor_completions.d/vgpuctl.fish",
            "complete -c vgpuctl",
        ),
    ] {
        let text =
            std::fs::read_to_string(dest.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(text.contains(needle), "{path} lacks {needle}");
    }
    let man = dest.join("usr/share/man/man1/vgpuctl.1.gz");
    let unzipped = Command::new("gzip")
        .arg("-dc")
        .arg(&man)
        .output()
        .expect("gzip");
    assert!(unzipped.status.success(), "{} is gzip", man.display());
    assert_eq!(
        String::from_utf8_lossy(&unzipped.stdout),
        run_raw(&["man"]).stdout,
        "the installed page is vgpuctl's"
    );
}

/// Writes `etc/vgpud/layouts/NAME.toml` on the simulated host.
fn write_layout(s: &Setup, name: &str, text: &str) {
    let dir = s.host.path("etc/vgpud/layouts");
    std::fs::create_dir_all(&dir).expect("layouts dir");
    std::fs::write(dir.join(format!("{name}.toml")), text).expect("layout");
}

#[tokio::test]
async fn layouts_are_listed_compared_planned_applied_and_refused() {
    let s = Setup::new(&["nvidia-l40s"]).await;
    let gpus: Vec<String> = json(&s, &["gpus"])
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| g["address"].as_str().expect("address").to_string())
        .collect();
    let (day_gpu, night_gpu) = (&gpus[0], &gpus[1]);
    write_layout(
        &s,
        "day",
        &format!(
            "description = \"day shift\"\n[[gpu]]\naddress = \"{day_gpu}\"\nvfs = 32\n\
             devices = [{{ type = \"L40S-4Q\", count = 2, owner = \"pool-day\" }}]\n"
        ),
    );
    write_layout(
        &s,
        "night",
        &format!("description = \"night\"\n[[gpu]]\naddress = \"{night_gpu}\"\nvfs = 0\n"),
    );
    assert_golden("vgpuctl/layouts.txt", ok(&s, &["layouts"]));
    assert_golden("vgpuctl/layouts.json", json_text(&s, &["layouts"]));
    assert_golden("vgpuctl/layout-diff.txt", ok(&s, &["diff", "day"]));
    assert_golden(
        "vgpuctl/layout-plan.txt",
        ok(&s, &["apply", "day", "--dry-run"]),
    );
    assert!(listed(&s).is_empty(), "a dry run makes nothing");

    let steps = json(&s, &["apply", "day"]);
    let steps = steps.as_array().expect("steps");
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert!(steps.iter().all(|s| s["status"] == "done"), "{steps:?}");
    let made: Vec<String> = steps[1..]
        .iter()
        .map(|s| s["detail"].as_str().expect("uuid").to_string())
        .collect();
    let mut seen = busctl_devices(&s);
    seen.sort();
    let mut want = made.clone();
    want.sort();
    assert_eq!(seen, want, "busctl sees the pool's devices");
    assert_eq!(busctl_gpu_property(&s, day_gpu, "NumVfs"), 32);
    assert_golden("vgpuctl/layout-apply-again.txt", ok(&s, &["apply", "day"]));
    assert_eq!(
        ok(&s, &["apply", "day", "--quiet"]),
        "",
        "--quiet: no table"
    );
    assert_golden("vgpuctl/layout-diff-none.txt", ok(&s, &["diff", "day"]));

    // A running desktop that is not the layout's stands in the way: exit 4, named, untouched.
    ok(&s, &["vfs", night_gpu, "32"]);
    let alice = "11111111-2222-4333-8444-0000000000a1";
    ok(
        &s,
        &[
            "create", "L40S-4Q", "--parent", night_gpu, "--uuid", alice, "--owner", "alice-vm",
        ],
    );
    let r = ctl(&s, &["apply", "night"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert_golden("vgpuctl/layout-refused.txt", &r.stdout);
    assert!(r.stdout.contains(alice) && r.stdout.contains("alice-vm"));
    assert!(busctl_devices(&s).contains(&alice.to_string()));
    assert_eq!(busctl_gpu_property(&s, night_gpu, "NumVfs"), 32);
    // The NotFound message names the file looked for, below the simulated host's root.
    let root = s.host.root.to_string_lossy().into_owned();
    assert_golden(
        "vgpuctl/errors-layouts.txt",
        [
            error_entry(&s, &["apply", "absent"], 3),
            error_entry(&s, &["diff", "../etc/passwd"], 2),
        ]
        .concat()
        .replace(&root, "<root>"),
    );
}

/// `vgpuctl export nova` is nova.conf as Python's configparser (oslo.config's format) reads
/// it, naming the types of the devices vgpud made and the GPUs that hold them; `export
/// placement` is the inventory per GPU.
#[tokio::test]
async fn export_nova_and_placement_describe_the_devices_made() {
    let s = Setup::new(&["nvidia-turing"]).await;
    let gpus = s.gpus_with_driver("nvidia").await;
    let (first, second) = (gpus[0].as_str(), gpus[1].as_str());
    for _ in 0..2 {
        ok(&s, &["create", "RTX6000-4Q", "--parent", first]);
    }
    let type_of = |short: &str| {
        json(&s, &["types"])
            .as_array()
            .expect("types")
            .iter()
            .find(|t| t["gpu"] == first && t["name"].as_str().is_some_and(|n| n.ends_with(short)))
            .map(|t| t["id"].as_str().expect("id").to_string())
            .expect("the type")
    };
    let (q4, q2) = (type_of("RTX6000-4Q"), type_of("RTX6000-2Q"));
    let conf = ok(&s, &["export", "nova", "--type", "RTX6000-2Q"]);
    const READ: &str = r#"
import configparser, json, sys
c = configparser.ConfigParser(interpolation=None)
c.read_string(sys.stdin.read())
print(json.dumps({s: dict(c[s]) for s in c.sections()}))
"#;
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args(["-c", READ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(conf.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("configparser");
    assert!(out.status.success(), "configparser refused:\n{conf}");
    let sections: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mut enabled: Vec<String> = sections["devices"]["enabled_mdev_types"]
        .as_str()
        .expect("enabled_mdev_types")
        .split(", ")
        .map(str::to_string)
        .collect();
    enabled.sort();
    let mut want = vec![q4.clone(), q2.clone()];
    want.sort();
    assert_eq!(enabled, want, "{conf}");
    assert_eq!(
        sections[format!("mdev_{q4}")]["device_addresses"],
        first,
        "{conf}"
    );
    assert_eq!(
        sections[format!("mdev_{q2}")]["device_addresses"],
        second,
        "the GPU without devices serves the type asked for: {conf}"
    );

    let placement = json(&s, &["export", "placement", "--node", "compute-7"]);
    let providers = placement["resource_providers"]
        .as_array()
        .expect("providers");
    assert_eq!(
        providers.len(),
        1,
        "only the GPU with devices, without --type: {placement:#}"
    );
    let p = &providers[0];
    assert_eq!(
        p["name"],
        format!("compute-7_pci_{}", first.replace([':', '.'], "_"))
    );
    let available = json(&s, &["types"])
        .as_array()
        .expect("types")
        .iter()
        .find(|t| t["gpu"] == first && t["id"] == q4.as_str())
        .and_then(|t| t["available"].as_u64())
        .expect("available");
    assert_eq!(
        p["inventories"]["VGPU"]["total"],
        available + 2,
        "made plus what can still be made"
    );
    assert!(
        p["traits"][0]
            .as_str()
            .is_some_and(|t| t.starts_with("CUSTOM_") && t.ends_with("RTX6000_4Q")),
        "{p}"
    );
}
