//! Authorization with the real polkitd: in a private mount namespace (tests/polkit/
//! namespace.sh), polkitd reads the project's action and rules files, a system-type
//! dbus-daemon runs the project's bus policy, and every method of the API (the hand-written
//! table of tests/common/authorization.rs) is called as root, as a broker user in the group
//! vgpud, and as nobody, through gdbus. Each answer must be what the table's polkit action
//! says: root may do everything; the group may read and manage devices but not configure the
//! host; nobody may do nothing but introspect.

mod common;

use common::authorization::{self, Need};
use common::daemon::TestHost;

/// What each caller may do: `None` means allowed (any answer but a refusal). The action a
/// method needs comes from the hand-written table (tests/common/authorization.rs), not from
/// the code under test.
fn expected(caller: &str, need: Need) -> Option<&'static str> {
    const DENIED: Option<&str> = Some("org.freedesktop.DBus.Error.AccessDenied");
    match (caller, need) {
        (_, Need::Open) | ("root", _) => None,
        ("broker", Need::Read | Need::ManageDevices) => None,
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
    assert_eq!(
        authorization::table_methods()
            .into_iter()
            .filter(|(i, _)| i.starts_with("org.vgpud1."))
            .collect::<std::collections::BTreeSet<_>>(),
        authorization::documented_methods(),
        "every method of dbus/org.vgpud1.xml is called as each user"
    );

    let host = TestHost::new(&["mtty"]);
    let work = tempfile::tempdir().expect("tempdir");
    let calls_file = work.path().join("calls");
    std::fs::write(&calls_file, authorization::calls()).expect("calls");
    let run = authorization::run_in_namespace("namespace.sh", &host.root, &[&calls_file]);
    let (got, stdout) = (&run.results, &run.stdout);
    let mut wrong = Vec::new();
    for caller in ["root", "broker", "nobody"] {
        for &(interface, member, need, ..) in authorization::SPEC {
            let method = authorization::label(interface, member);
            let Some((outcome, message)) = got.get(&(caller.to_string(), method.clone())) else {
                wrong.push(format!("{caller} {method}: no answer"));
                continue;
            };
            let refused = outcome == "org.freedesktop.DBus.Error.AccessDenied"
                || outcome == "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired";
            // A refusal of vgpud's own names the table's action.
            let action = need.action().unwrap_or("no action");
            if message.contains("is not authorized for")
                && !message.contains(&format!("is not authorized for {action} ({member})"))
            {
                wrong.push(format!(
                    "{caller} {method}: refused for another action than {action}: {message}"
                ));
            }
            match expected(caller, need) {
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
    let (_, message) = &got[&("nobody".to_string(), "Manager.CreateDevice".to_string())];
    assert!(
        message.contains("org.vgpud1.manage-devices") && message.contains("uid 65534"),
        "{message}"
    );
    let (_, message) = &got[&("broker".to_string(), "Manager.SetVfCount".to_string())];
    assert!(message.contains("org.vgpud1.configure-host"), "{message}");
}
