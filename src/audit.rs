//! The audit log: every change of state is logged once, with who asked for it (uid, pid,
//! systemd unit and method, when a client did), what it was about (device, GPU) and the
//! outcome. Changes come from the core's event stream ([`spawn`]); calls that changed nothing
//! because they were refused or failed are logged by the D-Bus dispatch ([`refused`]).
//!
//! Lines go to the target `vgpud::audit`; under systemd they are journald entries whose
//! fields (`AUDIT_EVENT`, `DEVICE`, `GPU`, `CALLER_UID`, `CALLER_PID`, `CALLER_UNIT`, `METHOD`,
//! `OUTCOME`) can be queried, e.g. `journalctl -u vgpud CALLER_UID=1000`.

use crate::engine::{Cause, Engine, Event, Record};

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
        Event::GpuAdded { gpu } => ("gpu-added", String::new(), gpu.address.clone()),
        Event::GpuChanged { after, .. } => ("gpu-changed", String::new(), after.address.clone()),
        Event::GpuModeChanged { gpu, .. } => ("gpu-mode-changed", String::new(), gpu.clone()),
        Event::GpuRemoved { address } => ("gpu-removed", String::new(), address.clone()),
        Event::GpuDrift { gpu, .. } => ("gpu-drift", String::new(), gpu.clone()),
        Event::CapacityChanged { .. } => return None,
    })
}

/// One audit line.
fn line(event: &str, device: &str, gpu: &str, cause: Option<&Cause>, outcome: &str, detail: &str) {
    let method = cause.map_or("", |c| c.method.as_str());
    let unit = cause.and_then(|c| c.unit.as_deref()).unwrap_or("");
    let uid = cause.and_then(|c| c.uid).map(i64::from).unwrap_or(-1);
    let pid = cause.and_then(|c| c.pid).map(i64::from).unwrap_or(-1);
    tracing::info!(
        target: "vgpud::audit",
        audit_event = event,
        device,
        gpu,
        method,
        caller_uid = uid,
        caller_pid = pid,
        caller_unit = unit,
        outcome,
        "audit: {event} {device}{}{gpu} by {} ({outcome}){}{detail}",
        if device.is_empty() || gpu.is_empty() { "" } else { " on " },
        if method.is_empty() {
            "vgpud".to_string()
        } else {
            format!("{method} of uid {uid} pid {pid}")
        },
        if detail.is_empty() { "" } else { ": " },
    );
}

/// Logs one change.
pub fn record(r: &Record) {
    let Some((event, device, gpu)) = name_of(&r.event) else {
        return;
    };
    let detail = match &r.event {
        Event::Drift(d) => format!("{}: {}", d.event, d.detail),
        _ => String::new(),
    };
    line(event, &device, &gpu, r.cause.as_deref(), "ok", &detail);
}

/// Logs a call that changed nothing: refused (`AccessDenied`) or failed (the error's name).
pub fn refused(cause: &Cause, device: &str, outcome: &str, message: &str) {
    let detail: String = message.chars().take(200).collect();
    line("refused", device, "", Some(cause), outcome, &detail);
}

/// Subscribes to the engine's events and logs them as they come, on a task of its own.
pub fn spawn(engine: &Engine) -> tokio::task::JoinHandle<()> {
    crate::engine::events::spawn_consumer(engine.events(), record)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
