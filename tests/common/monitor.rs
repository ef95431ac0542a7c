//! The method calls a private bus carries to vgpud, seen by a monitor connection
//! (`org.freedesktop.DBus.Monitoring.BecomeMonitor`): how many calls a client made, and which.

use std::time::Duration;

use futures_util::StreamExt;

use super::daemon::TestBus;

/// A monitor of every method call on a bus.
pub struct CallMonitor {
    stream: zbus::MessageStream,
    /// The name the marker calls are made with (see [`CallMonitor::calls_to_vgpud`]).
    marker: zbus::Connection,
}

/// The member a marker call asks for: nothing answers it, and nothing else calls it.
const MARKER: &str = "CallMonitorMarker";

impl CallMonitor {
    /// Starts monitoring `bus`: every method call sent after this returns is seen.
    pub async fn start(bus: &TestBus) -> Self {
        let conn = bus.connect().await;
        // The stream first, so that nothing that arrives after BecomeMonitor's reply is lost.
        let stream = zbus::MessageStream::from(&conn);
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::MethodCall)
            .build()
            .expect("a match rule of method calls");
        zbus::fdo::MonitoringProxy::new(&conn)
            .await
            .expect("Monitoring proxy")
            .become_monitor(&[rule], 0)
            .await
            .expect("BecomeMonitor (the test bus lets everyone eavesdrop)");
        CallMonitor {
            stream,
            marker: bus.connect().await,
        }
    }

    /// The calls to `org.vgpud1` seen since the last look, as `interface.member`, in order.
    /// A marker call sent now ends the look: the bus passes calls to the monitor in the order
    /// it routes them, so every call a finished client made comes before it.
    pub async fn calls_to_vgpud(&mut self) -> Vec<String> {
        let owner = zbus::fdo::DBusProxy::new(&self.marker)
            .await
            .expect("DBus proxy")
            .get_name_owner(zbus::names::BusName::try_from("org.vgpud1").expect("name"))
            .await
            .expect("vgpud owns org.vgpud1")
            .to_string();
        // No reply is waited for: the marker is an unknown method, answered with an error.
        let _ = self
            .marker
            .call_method(
                Some("org.vgpud1"),
                "/org/vgpud1",
                Some("org.vgpud1.Test"),
                MARKER,
                &(),
            )
            .await;
        let mut calls = Vec::new();
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(10), self.stream.next())
                .await
                .expect("the marker call reaches the monitor within 10 s")
                .expect("the monitor's stream is open")
                .expect("a message");
            let header = msg.header();
            let to_vgpud = header
                .destination()
                .is_some_and(|d| d.as_str() == "org.vgpud1" || d.as_str() == owner);
            if !to_vgpud {
                continue;
            }
            let member = header.member().map(|m| m.to_string()).unwrap_or_default();
            if member == MARKER {
                return calls;
            }
            let interface = header
                .interface()
                .map(|i| i.to_string())
                .unwrap_or_default();
            calls.push(format!("{interface}.{member}"));
        }
    }
}
