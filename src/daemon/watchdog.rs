//! The systemd watchdog: with `WatchdogSec=` in the unit, systemd passes `WATCHDOG_USEC` and
//! restarts vgpud when no `WATCHDOG=1` arrives in that time. vgpud pings at half of it, and
//! each ping is earned: it is sent only after a probe went through the tokio runtime, its
//! blocking pool and the engine's locks (the look at the host's and the registry's, in the
//! order a look takes them). A deadlocked engine, a look that hangs or a starved runtime
//! stops the pings, and systemd restarts the daemon.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;

/// The ping interval for a watchdog timeout: half of it (systemd's advice), at least 1 ms;
/// `None` when there is no watchdog (no `WATCHDOG_USEC`, or 0).
pub fn ping_interval(timeout: Option<Duration>) -> Option<Duration> {
    let timeout = timeout.filter(|t| !t.is_zero())?;
    Some((timeout / 2).max(Duration::from_millis(1)))
}

/// Pings systemd every `interval` for as long as the engine answers; runs until its task is
/// dropped.
pub async fn run(engine: Arc<Engine>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let e = engine.clone();
        match tokio::task::spawn_blocking(move || e.check_alive()).await {
            Ok(_) => super::notify(&[sd_notify::NotifyState::Watchdog]),
            Err(e) => {
                tracing::error!(error = %e, "the watchdog's probe of the engine failed; no ping")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_come_at_half_the_timeout() {
        assert_eq!(
            ping_interval(Some(Duration::from_secs(30))),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            ping_interval(Some(Duration::from_micros(3_000_001))),
            Some(Duration::from_nanos(1_500_000_500))
        );
        // A tiny timeout still gets a usable (non-zero) interval.
        assert_eq!(
            ping_interval(Some(Duration::from_micros(1))),
            Some(Duration::from_millis(1))
        );
        assert_eq!(ping_interval(Some(Duration::ZERO)), None);
        assert_eq!(ping_interval(None), None);
    }
}
