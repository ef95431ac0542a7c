//! The audit log: every change of state is logged once, with who asked for it (uid, pid,
//! systemd unit and method, when a client did), what it was about (device, GPU) and the
//! outcome. Changes come from the core's event stream ([`spawn`]); calls that changed nothing
//! because they were refused or failed are logged by the D-Bus dispatch ([`refused`]).
//!
//! Refusals are rate-limited per uid: past [`REFUSALS_PER_WINDOW`] in [`REFUSAL_WINDOW`],
//! they are counted instead, and one line says how many were dropped
//! (`N refusals of uid U dropped in the last T s`), so a flood of refused calls cannot flood
//! the journal.
//!
//! Lines go to the target `vgpud::audit`; under systemd they are journald entries whose
//! fields (`AUDIT_EVENT`, `DEVICE`, `GPU`, `CALLER_UID`, `CALLER_PID`, `CALLER_UNIT`, `METHOD`,
//! `OUTCOME`) can be queried, e.g. `journalctl -u vgpud CALLER_UID=1000`. A field that does not
//! apply (no device, an unknown caller) is left out, of the entry and of its text.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::engine::{Cause, Engine, Event, Record};

/// How many refusals of one uid are logged per [`REFUSAL_WINDOW`]; the rest are counted.
pub const REFUSALS_PER_WINDOW: u32 = 20;
/// The window of the refusals' rate limit.
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(5);

/// The refusals of one uid in its current window.
#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    logged: u32,
    dropped: u64,
}

/// What to do with one refusal.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Log it, after the summary of the window before (its count of dropped refusals and
    /// its length) when some were dropped.
    Log(Option<(u64, Duration)>),
    /// Drop it; `true` for the window's first drop (the summary is then scheduled).
    Drop(bool),
}

/// Counts one refusal of `uid` at `now`.
fn count(windows: &mut HashMap<i64, Window>, uid: i64, now: Instant) -> Verdict {
    if windows.len() > 4096 {
        windows.retain(|_, w| now.duration_since(w.started) < REFUSAL_WINDOW || w.dropped > 0);
    }
    let w = windows.entry(uid).or_insert(Window {
        started: now,
        logged: 0,
        dropped: 0,
    });
    let mut summary = None;
    if now.duration_since(w.started) >= REFUSAL_WINDOW {
        if w.dropped > 0 {
            summary = Some((w.dropped, now.duration_since(w.started)));
        }
        *w = Window {
            started: now,
            logged: 0,
            dropped: 0,
        };
    }
    if w.logged < REFUSALS_PER_WINDOW {
        w.logged += 1;
        Verdict::Log(summary)
    } else {
        w.dropped += 1;
        Verdict::Drop(w.dropped == 1)
    }
}

/// Takes the count of dropped refusals of `uid` when its window is over: (count, length).
fn take_dropped(
    windows: &mut HashMap<i64, Window>,
    uid: i64,
    now: Instant,
) -> Option<(u64, Duration)> {
    let w = windows.get_mut(&uid)?;
    let age = now.duration_since(w.started);
    if w.dropped == 0 || age < REFUSAL_WINDOW {
        return None;
    }
    let dropped = w.dropped;
    windows.remove(&uid);
    Some((dropped, age))
}

static WINDOWS: Mutex<Option<HashMap<i64, Window>>> = Mutex::new(None);

fn with_windows<T>(f: impl FnOnce(&mut HashMap<i64, Window>) -> T) -> T {
    let mut guard = WINDOWS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(guard.get_or_insert_with(HashMap::new))
}

/// The line that stands for the refusals of `uid` that were not logged.
fn dropped_line(uid: i64, dropped: u64, over: Duration) {
    tracing::info!(
        target: "vgpud::audit",
        audit_event = "refusals-dropped",
        caller_uid = uid,
        dropped,
        "audit: {dropped} refusals of uid {uid} dropped in the last {} s",
        over.as_secs().max(1)
    );
}

/// Logs the summary of `uid`'s window once it is over, unless a later refusal did.
fn schedule_summary(uid: i64) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        tokio::time::sleep(REFUSAL_WINDOW + Duration::from_millis(50)).await;
        if let Some((n, over)) = with_windows(|w| take_dropped(w, uid, Instant::now())) {
            dropped_line(uid, n, over);
        }
    });
}

/// What an event is, for the log: `None` for events that are no change of their own.
fn name_of(event: &Event) -> Option<(&'static str, String, String)> {
    Some(match event {
        Event::DeviceAdded { device, .. } => {
            ("device-added", device.uuid.clone(), device.parent.clone())
        }
        Event::DeviceChanged { after, .. } => {
            ("device-changed", after.uuid.clone(), after.parent.clone())
        }
        Event::DeviceRemoved { device } => {
            ("device-removed", device.uuid.clone(), device.parent.clone())
        }
        Event::Drift(d) => ("drift", d.uuid.clone(), String::new()),
        Event::DeviceReclaimed { device, .. } => (
            "device-reclaimed",
            device.uuid.clone(),
            device.parent.clone(),
        ),
        Event::GpuAdded { gpu } => ("gpu-added", String::new(), gpu.address.clone()),
        Event::GpuChanged { after, .. } => ("gpu-changed", String::new(), after.address.clone()),
        Event::GpuModeChanged { gpu, .. } => ("gpu-mode-changed", String::new(), gpu.clone()),
        Event::GpuRemoved { address } => ("gpu-removed", String::new(), address.clone()),
        Event::GpuDrift { gpu, .. } => ("gpu-drift", String::new(), gpu.clone()),
        Event::CapacityChanged { .. } => return None,
    })
}

/// The text of one audit line; an absent device, GPU, caller or detail is left out, never
/// printed empty.
fn text(
    event: &str,
    device: &str,
    gpu: &str,
    cause: Option<&Cause>,
    outcome: &str,
    detail: &str,
) -> String {
    let mut s = format!("audit: {event}");
    match (device.is_empty(), gpu.is_empty()) {
        (false, false) => s += &format!(" {device} on {gpu}"),
        (false, true) => s += &format!(" {device}"),
        (true, false) => s += &format!(" {gpu}"),
        (true, true) => {}
    }
    match cause.filter(|c| !c.method.is_empty()) {
        None => s += " by vgpud",
        Some(c) => {
            s += &format!(" by {}", c.method);
            let who: Vec<String> = [("uid", c.uid), ("pid", c.pid)]
                .into_iter()
                .filter_map(|(what, n)| n.map(|n| format!("{what} {n}")))
                .collect();
            if !who.is_empty() {
                s += &format!(" of {}", who.join(" "));
            }
        }
    }
    s += &format!(" ({outcome})");
    if !detail.is_empty() {
        s += &format!(": {detail}");
    }
    s
}

/// One audit line; its structured fields leave out what is absent.
fn line(event: &str, device: &str, gpu: &str, cause: Option<&Cause>, outcome: &str, detail: &str) {
    let given = |s: &str| (!s.is_empty()).then_some(s.to_owned());
    let method = cause.and_then(|c| given(&c.method));
    let unit = cause.and_then(|c| c.unit.as_deref()).and_then(given);
    let uid = cause.and_then(|c| c.uid).map(i64::from);
    let pid = cause.and_then(|c| c.pid).map(i64::from);
    tracing::info!(
        target: "vgpud::audit",
        audit_event = event,
        device = given(device),
        gpu = given(gpu),
        method,
        caller_uid = uid,
        caller_pid = pid,
        caller_unit = unit,
        outcome,
        "{}",
        text(event, device, gpu, cause, outcome, detail)
    );
}

/// Logs one change.
pub fn record(r: &Record) {
    let Some((event, device, gpu)) = name_of(&r.event) else {
        return;
    };
    let detail = match &r.event {
        Event::Drift(d) => format!("{}: {}", d.event, d.detail),
        Event::DeviceReclaimed { reason, .. } => reason.clone(),
        _ => String::new(),
    };
    line(event, &device, &gpu, r.cause.as_deref(), "ok", &detail);
}

/// Logs a call that changed nothing: refused (`AccessDenied`) or failed (the error's name),
/// within the rate limit of its uid.
pub fn refused(cause: &Cause, device: &str, outcome: &str, message: &str) {
    let uid = cause.uid.map(i64::from).unwrap_or(-1);
    match with_windows(|w| count(w, uid, Instant::now())) {
        Verdict::Drop(first) => {
            if first {
                schedule_summary(uid);
            }
        }
        Verdict::Log(summary) => {
            if let Some((n, over)) = summary {
                dropped_line(uid, n, over);
            }
            let detail: String = message.chars().take(200).collect();
            line("refused", device, "", Some(cause), outcome, &detail);
        }
    }
}

/// Subscribes to the engine's events and logs them as they come, on a task of its own.
pub fn spawn(engine: &Engine) -> tokio::task::JoinHandle<()> {
    crate::engine::events::spawn_consumer(engine.events(), record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_past_the_limit_are_counted_and_summed_up_once() {
        let mut w = HashMap::new();
        let t0 = Instant::now();
        for _ in 0..REFUSALS_PER_WINDOW {
            assert_eq!(count(&mut w, 65534, t0), Verdict::Log(None));
        }
        assert_eq!(count(&mut w, 65534, t0), Verdict::Drop(true));
        for _ in 0..99 {
            assert_eq!(count(&mut w, 65534, t0), Verdict::Drop(false));
        }
        // Another uid has its own window.
        assert_eq!(count(&mut w, 0, t0), Verdict::Log(None));
        // Not before the window is over.
        assert_eq!(take_dropped(&mut w, 65534, t0), None);
        let later = t0 + REFUSAL_WINDOW;
        // The next refusal after the window carries the summary, and it is given once.
        let mut again = w.clone();
        assert_eq!(
            count(&mut again, 65534, later),
            Verdict::Log(Some((100, REFUSAL_WINDOW)))
        );
        assert_eq!(take_dropped(&mut again, 65534, later), None);
        // Or the scheduled summary takes it first.
        assert_eq!(
            take_dropped(&mut w, 65534, later),
            Some((100, REFUSAL_WINDOW))
        );
        assert_eq!(count(&mut w, 65534, later), Verdict::Log(None));
    }

    #[test]
    fn capacity_is_no_change_of_its_own() {
        assert!(name_of(&Event::CapacityChanged { gpu: "g".into() }).is_none());
        let (name, device, gpu) = name_of(&Event::GpuRemoved {
            address: "0000:41:00.0".into(),
        })
        .expect("logged");
        assert_eq!(
            (name, device.as_str(), gpu.as_str()),
            ("gpu-removed", "", "0000:41:00.0")
        );
    }

    #[test]
    fn absent_fields_are_left_out_of_the_line() {
        let caller = |uid, pid| Cause {
            method: "CreateDevice".into(),
            uid,
            pid,
            unit: None,
        };
        let known = caller(Some(0), Some(4242));
        // A refusal names no device: no empty field, no double space.
        assert_eq!(
            text("refused", "", "", Some(&known), "org.vgpud1.Error.NotFound", "no type NOPE"),
            "audit: refused by CreateDevice of uid 0 pid 4242 (org.vgpud1.Error.NotFound): no type NOPE"
        );
        assert_eq!(
            text(
                "device-added",
                "u-1",
                "0000:41:00.0",
                Some(&known),
                "ok",
                ""
            ),
            "audit: device-added u-1 on 0000:41:00.0 by CreateDevice of uid 0 pid 4242 (ok)"
        );
        assert_eq!(
            text("gpu-added", "", "0000:41:00.0", None, "ok", ""),
            "audit: gpu-added 0000:41:00.0 by vgpud (ok)"
        );
        assert_eq!(
            text("drift", "u-1", "", None, "ok", "removed: gone"),
            "audit: drift u-1 by vgpud (ok): removed: gone"
        );
        // A caller whose credentials are not known yet is no `uid -1`.
        assert_eq!(
            text(
                "refused",
                "u-1",
                "",
                Some(&caller(None, Some(7))),
                "Busy",
                ""
            ),
            "audit: refused u-1 by CreateDevice of pid 7 (Busy)"
        );
        assert_eq!(
            text("refused", "", "", Some(&caller(None, None)), "Busy", ""),
            "audit: refused by CreateDevice (Busy)"
        );
    }
}
