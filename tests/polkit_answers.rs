//! How often vgpud asks polkit: once per connection and action for the calls that want an
//! answer at the same time, a no kept like a yes (so a flood of refused calls costs one
//! question), and every time for a call that allows interactive authorization (the user may
//! authenticate now). polkit is a stand-in here, on a private bus, that counts the questions
//! and refuses everything, root included (the real polkitd is in tests/polkit.rs).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::daemon::{Daemon, Policy, TestBus, TestHost};
use common::proxy::ManagerProxy;
use zbus::OwnedVariant as OwnedValue;

/// polkit's authority, refusing every action after a short think, and counting questions.
struct RefusingAuthority {
    asked: Arc<AtomicUsize>,
}

#[zbus::interface(name = "org.freedesktop.PolicyKit1.Authority")]
impl RefusingAuthority {
    async fn check_authorization(
        &self,
        _subject: (String, HashMap<String, OwnedValue>),
        _action_id: String,
        _details: HashMap<String, String>,
        _flags: u32,
        _cancellation_id: String,
    ) -> (bool, bool, HashMap<String, String>) {
        self.asked.fetch_add(1, Ordering::SeqCst);
        // Long enough for every call of a burst to arrive while the question is open.
        tokio::time::sleep(Duration::from_millis(300)).await;
        (false, false, HashMap::new())
    }
}

/// The D-Bus error name of a failed call (zbus gives the standard ones a type of their own).
fn error_name(e: &zbus::Error) -> String {
    match e {
        zbus::Error::FDO(e) => zbus::DBusError::name(&**e).to_string(),
        zbus::Error::MethodError(name, _, _) => name.to_string(),
        other => format!("not a method error: {other}"),
    }
}

async fn create(m: &ManagerProxy<'_>) -> String {
    let e = m
        .create_device("mtty-1", HashMap::new())
        .await
        .expect_err("polkit refuses everything");
    error_name(&e)
}

#[tokio::test]
async fn polkit_is_asked_once_per_connection_and_action_and_again_when_interaction_is_allowed() {
    let host = TestHost::new(&["mixed"]);
    // A policy that lets the stand-in own polkit's name.
    let bus = TestBus::start(Policy::Everyone);
    let asked = Arc::new(AtomicUsize::new(0));
    let _polkit = zbus::connection::Builder::address(bus.address.as_str())
        .serve_at(
            "/org/freedesktop/PolicyKit1/Authority",
            RefusingAuthority {
                asked: asked.clone(),
            },
        )
        .name("org.freedesktop.PolicyKit1")
        .build()
        .await
        .expect("the stand-in polkit on the bus");
    let _daemon = Daemon::start(&bus, &host).await;

    // A burst of 40 calls on one connection: one question, 40 refusals.
    let first = ManagerProxy::new(&bus.connect().await)
        .await
        .expect("proxy");
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..40 {
        let m = first.clone();
        burst.spawn(async move { create(&m).await });
    }
    let answers = burst.join_all().await;
    assert!(
        answers
            .iter()
            .all(|n| n == "org.freedesktop.DBus.Error.AccessDenied"),
        "{answers:?}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1, "questions for the burst");
    // The no is kept: the same connection's next call asks nothing.
    assert_eq!(
        create(&first).await,
        "org.freedesktop.DBus.Error.AccessDenied"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1, "questions after a kept no");

    // Another connection has its own answer.
    let second = ManagerProxy::new(&bus.connect().await)
        .await
        .expect("proxy");
    assert_eq!(
        create(&second).await,
        "org.freedesktop.DBus.Error.AccessDenied"
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "questions of two connections"
    );

    // A call that allows interactive authorization asks again, the kept no notwithstanding.
    let reply = first
        .inner()
        .call_with_flags::<_, _, ()>(
            "CreateDevice",
            zbus::proxy::MethodFlags::ALLOW_INTERACTIVE_AUTH,
            &("mtty-1", HashMap::<String, OwnedValue>::new()),
        )
        .await;
    let e = reply.expect_err("polkit refuses an interactive call too");
    assert_eq!(error_name(&e), "org.freedesktop.DBus.Error.AccessDenied");
    assert_eq!(asked.load(Ordering::SeqCst), 3, "an interactive call asks");
}
