//! Authorization against a written spec: tests/common/authorization.rs, a table written by
//! hand from the API's documentation, says what every method needs.
//!
//! - The table names exactly the methods of dbus/org.vgpud1.xml and of the running daemon's
//!   introspection (every object, every interface), no more, no fewer.
//! - Under the real polkitd (tests/polkit/read_only.sh, in a private mount namespace), a caller
//!   that a polkit rule of this test grants `org.vgpud1.read` only is allowed every read and
//!   refused every change, by vgpud's own check naming the table's action, and nothing
//!   changes. A second caller, which the bus lets through but polkit grants nothing, is
//!   refused every read and change too (only introspection and `Peer` stay open).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::authorization::{self, Need, DEV};
use common::daemon::TestHost;
use common::proxy::opts;
use common::setup::Setup;

#[test]
fn the_table_names_every_documented_method() {
    let documented = authorization::documented_methods();
    let table = authorization::table_methods();
    let vgpud: BTreeSet<_> = table
        .iter()
        .filter(|(i, _)| i.starts_with("org.vgpud1."))
        .cloned()
        .collect();
    assert!(
        documented.len() >= 26,
        "dbus/org.vgpud1.xml parsed: {documented:?}"
    );
    let missing: Vec<_> = documented.difference(&vgpud).collect();
    let extra: Vec<_> = vgpud.difference(&documented).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "tests/common/authorization.rs must name every method of dbus/org.vgpud1.xml: missing \
         {missing:?}; not in the API {extra:?}"
    );
}

#[tokio::test]
async fn the_table_names_every_method_the_daemon_introspects() {
    let s = Setup::new(&["mtty"]).await;
    let m = s.manager().await;
    let (_, dev_path) = m
        .create_device("mtty-1", opts(&[("uuid", DEV)]))
        .await
        .expect("create");
    let gpu_path = m.list_gpus().await.expect("gpus")[0].4.clone();
    let mut live = BTreeSet::new();
    for path in [
        "/org/vgpud1",
        "/org/vgpud1/nvidia",
        "/org/vgpud1/layouts",
        gpu_path.as_str(),
        dev_path.as_str(),
    ] {
        let xml = common::introspection::introspect(&s.conn, path).await;
        live.extend(authorization::methods_of(&xml));
    }
    let table = authorization::table_methods();
    assert!(
        live.contains(&("org.freedesktop.DBus.Properties".into(), "GetAll".into())),
        "introspection parsed: {live:?}"
    );
    let missing: Vec<_> = live.difference(&table).collect();
    let extra: Vec<_> = table.difference(&live).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "tests/common/authorization.rs must name every method the daemon serves: missing \
         {missing:?}; not served {extra:?}"
    );
}

/// The test's polkit rule: the reader gets `org.vgpud1.read` and no other org.vgpud1 action;
/// the denied user gets none. Read before the project's 50-org.vgpud1.rules, which would let
/// the group vgpud manage devices.
const READ_ONLY_RULE: &str = r#"// tests/authorization_spec.rs: vgpud-reader may read, and do nothing else.
polkit.addRule(function(action, subject) {
    if (action.id.indexOf("org.vgpud1.") != 0) {
        return polkit.Result.NOT_HANDLED;
    }
    if (subject.user == "vgpud-reader") {
        return action.id == "org.vgpud1.read" ? polkit.Result.YES : polkit.Result.NO;
    }
    if (subject.user == "vgpud-denied") {
        return polkit.Result.NO;
    }
});
"#;

#[test]
fn callers_granted_only_read_or_nothing_get_exactly_that() {
    const TEST: &str = "callers_granted_only_read_or_nothing_get_exactly_that";
    if !common::skip::require_root(
        TEST,
        "to make a mount namespace, bind-mount polkit's files and call as another user",
    ) {
        return;
    }
    let polkitd = std::path::Path::new("/usr/lib/polkit-1/polkitd");
    assert!(
        polkitd.exists(),
        "the real polkitd is needed (Debian package polkitd; tools/install-deps installs it)"
    );
    let host = TestHost::new(&["mtty"]);
    let work = tempfile::tempdir().expect("tempdir");
    let calls = work.path().join("calls");
    std::fs::write(&calls, authorization::calls()).expect("calls");
    let setup = work.path().join("setup");
    std::fs::write(
        &setup,
        format!(
            "Manager.CreateDevice\torg.vgpud1.Manager.CreateDevice\t/org/vgpud1\tmtty-1 \"{{'uuid': <'{DEV}'>}}\"\n"
        ),
    )
    .expect("setup");
    let rules = work.path().join("10-vgpud-test-read-only.rules");
    std::fs::write(&rules, READ_ONLY_RULE).expect("rules");
    let run =
        authorization::run_in_namespace("read_only.sh", &host.root, &[&calls, &rules, &setup]);
    let (got, stdout) = (&run.results, &run.stdout);
    let mut state: BTreeMap<String, (serde_json::Value, serde_json::Value)> = BTreeMap::new();
    for line in stdout.lines() {
        if let ["STATE", when, objects, devices] = line.split('\t').collect::<Vec<_>>()[..] {
            let json = |s: &str| serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"));
            state.insert(when.to_string(), (json(objects), json(devices)));
        }
    }
    let setup_result = got.get(&("setup".into(), "Manager.CreateDevice".into()));
    assert!(
        matches!(setup_result, Some((o, _)) if o == "ok"),
        "root makes the device {DEV}: {setup_result:?}\n{stdout}"
    );

    let mut wrong = Vec::new();
    let (mut allowed, mut refused) = (0, 0);
    for &(interface, member, need, ..) in authorization::SPEC {
        let label = authorization::label(interface, member);
        for caller in ["reader", "denied"] {
            let Some((outcome, message)) = got.get(&(caller.to_string(), label.clone())) else {
                wrong.push(format!("{caller} {label}: no answer"));
                continue;
            };
            if matches!((caller, need), (_, Need::Open) | ("reader", Need::Read)) {
                allowed += 1;
                if outcome == "org.freedesktop.DBus.Error.AccessDenied"
                    || outcome == "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
                {
                    wrong.push(format!("{caller} {label} is allowed, refused: {message}"));
                }
                continue;
            }
            refused += 1;
            let action = need.action().unwrap_or_default();
            // vgpud's own refusal, for the table's action (not the bus's, not another
            // action's): "uid 64910 (…) is not authorized for ACTION (MEMBER)".
            if outcome != "org.freedesktop.DBus.Error.AccessDenied"
                || !message.contains(&format!("is not authorized for {action} ({member})"))
            {
                wrong.push(format!(
                    "{caller} {label} needs {action}: expected vgpud's AccessDenied for it, got \
                     {outcome}: {message}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the answers differ from tests/common/authorization.rs:\n{}\n\n{stdout}",
        wrong.join("\n")
    );
    assert!(
        allowed >= 15 && refused >= 30,
        "{allowed} allowed and {refused} refused calls"
    );
    let (before, after) = (state.get("before"), state.get("after"));
    assert!(
        before.is_some_and(|b| b.1.to_string().contains(DEV)),
        "the state before shows the device: {before:?}"
    );
    assert_eq!(before, after, "the refused changes changed nothing");
}

/// The test's polkit rule for the counted user: every org.vgpud1 action is allowed but
/// configuring the host, which needs the administrator's password; each question polkitd
/// answers appends the action to a file (polkit.spawn runs as polkitd).
const COUNTING_RULE: &str = r#"// tests/authorization_spec.rs: vgpud-counted may do anything; each question is counted.
polkit.addRule(function(action, subject) {
    if (action.id.indexOf("org.vgpud1.") != 0 || subject.user != "vgpud-counted") {
        return polkit.Result.NOT_HANDLED;
    }
    polkit.spawn(["/bin/sh", "-c", "echo \"$0\" >> @ASKS@", action.id]);
    return action.id == "org.vgpud1.configure-host" ? polkit.Result.AUTH_ADMIN : polkit.Result.YES;
});
"#;

/// vgpud keeps polkit's answer for a connection and an action (5 s), so a connection's
/// calls cost one question each action (tests/polkit_answers.rs checks bursts and kept
/// refusals with a stand-in), and the bus is asked the connection's credentials once; a call that allows interaction is asked every time
/// (the user may be asked a password), and its yes is kept for the calls that do not. A call
/// that authenticating would let in is told so (`InteractiveAuthorizationRequired`). Without
/// polkitd, only root is let in.
#[test]
fn the_real_polkitd_is_asked_once_per_action_and_connection_and_the_bus_once_per_connection() {
    const TEST: &str =
        "the_real_polkitd_is_asked_once_per_action_and_connection_and_the_bus_once_per_connection";
    if !common::skip::require_root(
        TEST,
        "to make a mount namespace, bind-mount polkit's files and call as another user",
    ) {
        return;
    }
    assert!(
        std::path::Path::new("/usr/lib/polkit-1/polkitd").exists(),
        "the real polkitd is needed (Debian package polkitd; tools/install-deps installs it)"
    );
    let host = TestHost::new(&["mtty"]);
    let work = tempfile::tempdir().expect("tempdir");
    let rules = work.path().join("10-vgpud-test-counted.rules");
    std::fs::write(&rules, COUNTING_RULE).expect("rules");
    let client =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/kept_answers.py");
    let run = authorization::run_in_namespace("kept_answers.sh", &host.root, &[&rules, &client]);
    let stdout = &run.stdout;
    let field = |tag: &str| -> Vec<String> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix(tag))
            .map(str::to_string)
            .collect()
    };
    let calls = field("CALL\t");
    assert_eq!(calls.len(), 6, "every call answered:\n{stdout}");
    for call in &calls {
        let (label, outcome) = call.split_once('\t').expect("label and outcome");
        let expected = match label {
            l if l.starts_with("read") => "ok",
            "configure" => "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
            // Let in, then refused for the unknown device.
            _ => "org.vgpud1.Error.NotFound",
        };
        assert_eq!(outcome, expected, "{label}:\n{stdout}");
    }
    assert_eq!(
        field("ASK\t"),
        [
            "org.vgpud1.read",
            "org.vgpud1.manage-devices",
            "org.vgpud1.manage-devices",
            "org.vgpud1.configure-host"
        ],
        "polkit's questions: one for the two reads, one for each interactive call, none for \
         the change after an interactive yes:\n{stdout}"
    );
    // The bus is asked for the client's credentials once, by vgpud, for its six calls.
    let (vgpud, client) = (field("VGPUD\t"), field("CLIENT\t"));
    assert!(
        vgpud.len() == 1 && client.len() == 1 && vgpud[0].starts_with(':'),
        "vgpud's and the client's names on the bus:\n{stdout}"
    );
    let looked_up = field("MONITOR\t")
        .iter()
        .filter(|l| **l == format!("{}\t{}", vgpud[0], client[0]))
        .count();
    assert_eq!(
        looked_up, 1,
        "vgpud's GetConnectionCredentials for the client's connection:\n{stdout}"
    );
    // The refused StopDevice's audit line names the client's unit, from its cgroup.
    let unit = field("UNIT\t");
    let audit = field("AUDIT\t");
    let stop = audit
        .iter()
        .find(|l| l.contains("by StopDevice of uid 64920"));
    assert!(
        unit.len() == 1 && stop.is_some_and(|l| l.contains(&format!("caller_unit=\"{}\"", unit[0]))),
        "the audit line of the refused StopDevice names the caller's unit {unit:?}: {stop:?}\n{stdout}"
    );
    let gone = field("GONE\t");
    let user = gone.iter().find_map(|l| l.strip_prefix("user\t"));
    assert!(
        user.is_some_and(|m| m.contains("AccessDenied")
            && m.contains("polkit cannot be asked (org.freedesktop.PolicyKit1 is not on the bus)")
            && m.contains("is not root")),
        "without polkitd, the user is refused: {user:?}\n{stdout}"
    );
    let root = gone.iter().find_map(|l| l.strip_prefix("root\t"));
    assert_eq!(
        root,
        Some("ok"),
        "without polkitd, root is let in:\n{stdout}"
    );
}
