//! vgpud's log as a reader sees it (the demo prints it): a real vgpud on a simulated host,
//! through a real dbus-daemon. Figures are rounded, and no line carries an empty field.

mod common;

use std::time::{Duration, Instant};

use common::proxy::{error_name, opts};
use common::setup::Setup;

/// The log once it holds a line containing `what`, or after 5 s.
async fn log_with(s: &Setup, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = s.daemon.log_text();
        if log.contains(what) || Instant::now() > deadline {
            return log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn start_up_times_are_rounded_to_a_tenth_of_a_millisecond() {
    let s = Setup::new(&["mtty"]).await;
    // The name is on the bus a moment before the "ready" line is written: wait for the line.
    let log = log_with(&s, "ready name=").await;
    let figures: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split("elapsed_ms=").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap_or(""))
        .collect();
    assert!(figures.len() >= 3, "host opened, restored, ready:\n{log}");
    for f in figures {
        let decimals = f.split_once('.').map_or(0, |(_, d)| d.len());
        assert!(
            f.parse::<f64>().is_ok() && decimals <= 1,
            "elapsed_ms={f}: not a figure to one decimal\n{log}"
        );
    }
}

#[tokio::test]
async fn a_refused_call_without_a_device_leaves_no_empty_field() {
    let s = Setup::new(&["mtty"]).await;
    let m = s.manager().await;
    let err = m
        .create_device("NOPE-1Q", opts(&[]))
        .await
        .expect_err("no such type");
    assert_eq!(error_name(&err), "org.vgpud1.Error.NotFound");
    let log = log_with(&s, "audit: refused").await;
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("audit: refused"))
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    // From the message on (the level is padded before it).
    let line = &refused[0][refused[0].find("audit: ").unwrap_or(0)..];
    assert!(
        line.contains("audit: refused by CreateDevice of uid 0 pid "),
        "{line}"
    );
    assert!(!line.contains("  "), "a field printed empty: {line}");
    assert!(!line.contains("=\"\""), "a field printed empty: {line}");
    assert!(
        !line.contains("device="),
        "the call named no device: {line}"
    );
    for l in log.lines() {
        assert!(!l.contains("=\"\""), "a field printed empty: {l}");
    }
}
