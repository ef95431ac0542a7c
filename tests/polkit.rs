//! Authorization with the real polkitd: in a private mount namespace (tests/polkit/
//! namespace.sh), polkitd reads the project's action and rules files, a system-type
//! dbus-daemon runs the project's bus policy, and every method of the manager is called as
//! root, as a broker user in the group vgpud, and as nobody, through gdbus. Each answer must
//! be what the method's polkit action says: root may do everything; the group may read and
//! manage devices but not configure the host; nobody may do nothing but introspect.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::daemon::TestHost;

const DEV: &str = "a1b2c3d4-0000-4000-8000-000000000001";

/// Every call made, as (method, member, object, gdbus arguments).
fn calls() -> Vec<(&'static str, String, &'static str, String)> {
    let m = |name: &'static str, args: &str| {
        (
            name,
            format!("org.vgpud1.Manager.{name}"),
            "/org/vgpud1",
            args.to_string(),
        )
    };
    let none = "'@a{sv} {}'";
    vec![
        m("ListGpus", ""),
        m("ListTypes", ""),
        m("ListDevices", ""),
        m("CreateDevice", &format!("mtty-1 {none}")),
        m("GetCapacity", &format!("mtty-1 {none}")),
        m("GetTypeInfo", &format!("mtty-1 {none}")),
        m("RemoveDevice", &format!("{DEV} {none}")),
        m("ModifyDevice", &format!("{DEV} {none}")),
        m("StartDevice", &format!("{DEV} {none}")),
        m("StopDevice", &format!("{DEV} {none}")),
        m("AttachDevice", &format!("{DEV} vm1 {none}")),
        m("DetachDevice", &format!("{DEV} vm1 {none}")),
        m("RenderDomain", &format!("vm1 '@as []' {none}")),
        m("SetVfCount", &format!("mtty 'uint32 0' {none}")),
        m("SetHeterogeneousMode", &format!("mtty false {none}")),
        m("GetHostdevXml", DEV),
        m("RenderHostdevXml", &format!("{DEV} {none}")),
        (
            "Layouts.ListLayouts",
            "org.vgpud1.Layouts.ListLayouts".into(),
            "/org/vgpud1/layouts",
            String::new(),
        ),
        (
            "Layouts.DiffLayout",
            "org.vgpud1.Layouts.DiffLayout".into(),
            "/org/vgpud1/layouts",
            "absent".into(),
        ),
        (
            "Layouts.ApplyLayout",
            "org.vgpud1.Layouts.ApplyLayout".into(),
            "/org/vgpud1/layouts",
            format!("absent {none}"),
        ),
        (
            "Properties.GetAll",
            "org.freedesktop.DBus.Properties.GetAll".into(),
            "/org/vgpud1/gpu/mtty",
            "org.vgpud1.Gpu".into(),
        ),
        (
            "Introspect",
            "org.freedesktop.DBus.Introspectable.Introspect".into(),
            "/org/vgpud1",
            String::new(),
        ),
    ]
}

/// The manager's methods in the checked-in introspection data.
fn api_methods() -> BTreeSet<String> {
    let xml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dbus/org.vgpud1.xml"),
    )
    .expect("dbus/org.vgpud1.xml");
    let manager = xml
        .split("<interface name=\"org.vgpud1.Manager\">")
        .nth(1)
        .and_then(|s| s.split("</interface>").next())
        .expect("the Manager interface");
    manager
        .split("<method name=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(str::to_string)
        .collect()
}

/// What each caller may do with each call: `None` means allowed (any answer but a refusal).
fn expected(caller: &str, method: &str) -> Option<&'static str> {
    const DENIED: Option<&str> = Some("org.freedesktop.DBus.Error.AccessDenied");
    // `Layouts.ApplyLayout`: a method of another interface, by its member name.
    let action = vgpud::dbus::access::action_of(method.rsplit('.').next().unwrap_or(method));
    match (caller, method) {
        (_, "Introspect") => None,
        ("root", _) => None,
        ("broker", "Properties.GetAll") => None,
        ("broker", _) if action != vgpud::dbus::access::Action::ConfigureHost => None,
        _ => DENIED,
    }
}

#[test]
fn polkit_decides_every_method_for_root_the_group_and_nobody() {
    if !common::skip::require_root(
        "polkit_decides_every_method_for_root_the_group_and_nobody",
        "to make a mount namespace, bind-mount polkit's files and call as other users",
    ) {
        return;
    }
    let polkitd = std::path::Path::new("/usr/lib/polkit-1/polkitd");
    assert!(
        polkitd.exists(),
        "the real polkitd is needed (Debian package polkitd; tools/install-deps installs it)"
    );
    let covered: BTreeSet<String> = calls()
        .iter()
        .map(|c| c.0.to_string())
        .filter(|m| !m.contains('.') && m != "Introspect")
        .collect();
    assert_eq!(
        covered,
        api_methods(),
        "every method of org.vgpud1.Manager is called as each user"
    );

    let host = TestHost::new(&["mtty"]);
    let work = tempfile::tempdir().expect("tempdir");
    let calls_file = work.path().join("calls");
    let text: String = calls()
        .iter()
        .map(|(method, member, object, args)| format!("{method}\t{member}\t{object}\t{args}\n"))
        .collect();
    std::fs::write(&calls_file, text).expect("calls");
    let ns_work = work.path().join("ns");
    std::fs::create_dir(&ns_work).expect("ns dir");
    let repo = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("timeout")
        .args([
            "120",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "bash",
        ])
        .arg(format!("{repo}/tests/polkit/namespace.sh"))
        .arg(repo)
        .arg(&ns_work)
        .arg(common::daemon::vgpud_bin())
        .arg(&host.root)
        .arg(&calls_file)
        .output()
        .expect("unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the namespace run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let mut got: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
    for line in stdout.lines().filter(|l| l.starts_with("RESULT\t")) {
        let f: Vec<&str> = line.splitn(5, '\t').collect();
        got.insert(
            (f[1].to_string(), f[2].to_string()),
            (f[3].to_string(), f.get(4).unwrap_or(&"").to_string()),
        );
    }
    let mut wrong = Vec::new();
    for caller in ["root", "broker", "nobody"] {
        for (method, ..) in calls() {
            let Some((outcome, message)) = got.get(&(caller.to_string(), method.to_string()))
            else {
                wrong.push(format!("{caller} {method}: no answer"));
                continue;
            };
            let refused = outcome == "org.freedesktop.DBus.Error.AccessDenied"
                || outcome == "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired";
            match expected(caller, method) {
                None if refused => wrong.push(format!("{caller} {method}: refused: {message}")),
                Some(name) if outcome != name => wrong.push(format!(
                    "{caller} {method}: expected {name}, got {outcome}: {message}"
                )),
                _ => {}
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "answers differ from the polkit actions:\n{}\n\n{stdout}",
        wrong.join("\n")
    );
    // vgpud's own refusals name the action and the caller.
    let (_, message) = &got[&("nobody".to_string(), "CreateDevice".to_string())];
    assert!(
        message.contains("org.vgpud1.manage-devices") && message.contains("uid 65534"),
        "{message}"
    );
    let (_, message) = &got[&("broker".to_string(), "SetVfCount".to_string())];
    assert!(message.contains("org.vgpud1.configure-host"), "{message}");
}
