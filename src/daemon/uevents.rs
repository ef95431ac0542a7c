//! Listening to the kernel's uevents: on a real host a `NETLINK_KOBJECT_UEVENT` socket bound
//! to the kernel's group (1), on a simulated host the unix datagram socket the simulated
//! kernel sends the same bytes to (`ROOT/run/vgpud-simulator/uevents`). A thread reads the
//! socket into a bounded queue; the task here applies what it read in batches
//! ([`Engine::apply_uevent`], through the engine's event stream), then looks at the whole
//! host once when an event was lost: the netlink socket overran (`ENOBUFS`), or the simulated
//! kernel left its overrun marker. Such looks are at most one per `full_look_interval`.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::engine::Engine;
use crate::host::uevent::{self, Uevent, MAX_MESSAGE};
use crate::host::Host;
use crate::metrics::cpu::{measure, Part::Uevents};

/// What the reader thread hands over.
enum Message {
    Event(Uevent),
    /// The socket overran: events were lost.
    Overrun,
}

/// An open uevent socket.
pub struct Listener {
    fd: OwnedFd,
    netlink: bool,
    /// On a simulated host: the marker the simulated kernel leaves when it dropped an event.
    overrun_marker: Option<PathBuf>,
    /// Where it listens, for the log.
    pub what: String,
}

/// Opens the host's uevent socket.
pub fn open(host: &Host) -> std::io::Result<Listener> {
    if host.is_simulated() {
        let (path, marker) = vgpud_sim::uevent::paths(host.root());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // A socket left by an earlier vgpud (a socket file cannot be bound again).
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let socket = std::os::unix::net::UnixDatagram::bind(&path)?;
        // Events lost before this start are covered by the look at start.
        let _ = std::fs::remove_file(&marker);
        return Ok(Listener {
            fd: socket.into(),
            netlink: false,
            overrun_marker: Some(marker),
            what: path.display().to_string(),
        });
    }
    use nix::sys::socket::{
        bind, setsockopt, socket, sockopt, AddressFamily, NetlinkAddr, SockFlag, SockProtocol,
        SockType,
    };
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkKObjectUEvent,
    )?;
    // A large buffer, so that a storm of events does not overrun it (as udevd's 128 MiB).
    const BUFFER: usize = 16 << 20;
    if setsockopt(&fd, sockopt::RcvBufForce, &BUFFER).is_err() {
        setsockopt(&fd, sockopt::RcvBuf, &BUFFER)?;
    }
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 1))?;
    Ok(Listener {
        fd,
        netlink: true,
        overrun_marker: None,
        what: "the kernel's uevent netlink socket".into(),
    })
}

/// What one read of the socket gave.
#[derive(Debug)]
pub enum Read {
    /// A kernel uevent.
    Event(Uevent),
    /// A message to drop quietly: udev's, or not from the kernel.
    Skipped,
    /// A message that is not a uevent.
    Refused(uevent::UeventError),
}

impl Listener {
    /// Reads one message, waiting for it. `ENOBUFS`: the socket overran, events were lost.
    pub fn read(&self, buf: &mut [u8]) -> nix::Result<Read> {
        Ok(match receive(&self.fd, self.netlink, buf)? {
            Some(n) => match uevent::parse(&buf[..n.min(buf.len())]) {
                Ok(Some(ev)) => Read::Event(ev),
                Ok(None) => Read::Skipped,
                Err(e) => Read::Refused(e),
            },
            None => Read::Skipped,
        })
    }

    /// The same socket, for a reader of its own.
    pub fn try_clone(&self) -> std::io::Result<Listener> {
        Ok(Listener {
            fd: self.fd.try_clone()?,
            netlink: self.netlink,
            overrun_marker: self.overrun_marker.clone(),
            what: self.what.clone(),
        })
    }
}

/// Reads the socket on a thread of its own until the queue closes. A message that is not a
/// kernel uevent (too large, malformed, not from the kernel) is dropped with a warning.
fn spawn_reader(listener: &Listener, tx: mpsc::Sender<Message>) -> std::io::Result<()> {
    let listener = listener.try_clone()?;
    std::thread::Builder::new()
        .name("vgpud-uevents".into())
        .spawn(move || {
            let mut buf = vec![0u8; MAX_MESSAGE + 1];
            loop {
                let message = match listener.read(&mut buf) {
                    Ok(Read::Event(ev)) => Message::Event(ev),
                    Ok(Read::Skipped) => continue,
                    Ok(Read::Refused(e)) => {
                        tracing::warn!(error = %e, "dropped a uevent");
                        continue;
                    }
                    Err(nix::errno::Errno::ENOBUFS) => Message::Overrun,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "the uevent listener stopped");
                        return;
                    }
                };
                if tx.blocking_send(message).is_err() {
                    return;
                }
            }
        })?;
    Ok(())
}

/// One datagram: its length, or `None` for one that did not come from the kernel.
fn receive(fd: &OwnedFd, netlink: bool, buf: &mut [u8]) -> nix::Result<Option<usize>> {
    use nix::sys::socket::{recv, recvfrom, MsgFlags, NetlinkAddr};
    if netlink {
        let (n, from) = recvfrom::<NetlinkAddr>(fd.as_raw_fd(), buf)?;
        // Only the kernel sends with port id 0.
        Ok(from.is_some_and(|a| a.pid() == 0).then_some(n))
    } else {
        recv(fd.as_raw_fd(), buf, MsgFlags::empty()).map(Some)
    }
}

/// Applies the uevents of `listener` until the task is dropped.
pub async fn run(engine: Arc<Engine>, listener: Listener, full_look_interval: Duration) {
    let (tx, mut rx) = mpsc::channel::<Message>(4096);
    if let Err(e) = spawn_reader(&listener, tx) {
        tracing::warn!(error = %e, "cannot read uevents; looking at the host periodically instead");
        return;
    }
    let marker = listener.overrun_marker.clone();
    let mut last_look: Option<Instant> = None;
    let mut look_owed = false;
    // Events that wait for vgpud's own operations to end, retried in order.
    let mut deferred: Vec<Uevent> = Vec::new();
    // Since when the GPUs whose types events made vgpud forget wait to be read again, and
    // when the last batch came: they are read once the events are quiet for WARM_QUIET, or
    // WARM_LONGEST after the first, so a storm's events do not read a GPU's every type
    // once each (a read call in between reads what it needs itself).
    let mut warm_owed: Option<Instant> = None;
    let mut last_batch = Instant::now();
    loop {
        let mut wait: Option<Duration> = None;
        let mut until = |d: Duration| wait = Some(wait.map_or(d, |w: Duration| w.min(d)));
        if !deferred.is_empty() {
            until(RETRY);
        }
        if look_owed {
            until(last_look.map_or(Duration::ZERO, |t| {
                full_look_interval.saturating_sub(t.elapsed())
            }));
        }
        if let Some(since) = warm_owed {
            until(warm_wait(since, last_batch, Instant::now()));
        }
        let first = match wait {
            None => rx.recv().await,
            Some(wait) => match tokio::time::timeout(wait, rx.recv()).await {
                Ok(m) => m,
                Err(_) => {
                    if !deferred.is_empty() {
                        deferred = apply_batch(&engine, std::mem::take(&mut deferred)).await;
                        warm_owed.get_or_insert_with(Instant::now);
                    }
                    if warm_owed
                        .is_some_and(|since| warm_wait(since, last_batch, Instant::now()).is_zero())
                    {
                        warm_owed = None;
                        engine_warm(&engine).await;
                    }
                    let look_due = last_look.is_none_or(|t| t.elapsed() >= full_look_interval);
                    if look_owed && look_due {
                        look_owed = false;
                        last_look = Some(Instant::now());
                        super::watch::full_look(&engine, "overrun").await;
                    }
                    continue;
                }
            },
        };
        let Some(first) = first else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < 1024 {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let mut overran = batch.iter().any(|m| matches!(m, Message::Overrun));
        let mut events = std::mem::take(&mut deferred);
        events.extend(batch.into_iter().filter_map(|m| match m {
            Message::Event(ev) => Some(ev),
            Message::Overrun => None,
        }));
        deferred = apply_batch(&engine, events).await;
        last_batch = Instant::now();
        let since = *warm_owed.get_or_insert(last_batch);
        // Events that come without pause (each already waiting when the loop asks) never
        // let the wait above time out: they hold the reading back no longer than the longest.
        if last_batch >= since + WARM_LONGEST {
            warm_owed = None;
            engine_warm(&engine).await;
        }
        if deferred.len() > MAX_DEFERRED {
            // An operation that does not end: what waits is dropped, and looked for again.
            deferred.clear();
            overran = true;
        }
        // The simulated kernel's ENOBUFS: taken away before the look, so that an event lost
        // during the look is seen again.
        if let Some(marker) = &marker {
            if std::fs::remove_file(marker).is_ok() {
                overran = true;
            }
        }
        if overran {
            let spaced = last_look.is_none_or(|t| t.elapsed() >= full_look_interval);
            if spaced {
                last_look = Some(Instant::now());
                look_owed = false;
                tracing::warn!("uevents were lost (the socket overran): looking at the whole host");
                super::watch::full_look(&engine, "overrun").await;
            } else if !look_owed {
                look_owed = true;
                tracing::warn!(
                    interval_s = full_look_interval.as_secs(),
                    "uevents were lost (the socket overran): the whole host is looked at when the full-look interval has passed"
                );
            }
        }
    }
}

/// The most events kept waiting for vgpud's own operations.
const MAX_DEFERRED: usize = 4096;

/// How soon an event deferred for an operation of vgpud's own is tried again.
const RETRY: Duration = Duration::from_millis(20);

/// How long the uevents must be quiet before the GPUs whose types they made vgpud forget are
/// read again ([`Engine::warm_types`]), so that the read calls that follow answer from memory.
const WARM_QUIET: Duration = Duration::from_millis(25);

/// The longest forgotten types wait for the uevents to be quiet.
const WARM_LONGEST: Duration = Duration::from_millis(250);

/// How long forgotten types, owed a reading `since` then, still wait at `now` when the last
/// batch of uevents came at `last_batch`: until the events were quiet for [`WARM_QUIET`],
/// or [`WARM_LONGEST`] after `since`.
fn warm_wait(since: Instant, last_batch: Instant, now: Instant) -> Duration {
    let quiet = (last_batch + WARM_QUIET).saturating_duration_since(now);
    let longest = (since + WARM_LONGEST).saturating_duration_since(now);
    quiet.min(longest)
}

/// Applies `events` in order; returns those deferred (from the first one deferred on: the
/// order of a device's events is kept).
async fn apply_batch(engine: &Arc<Engine>, events: Vec<Uevent>) -> Vec<Uevent> {
    if events.is_empty() {
        return events;
    }
    let e = engine.clone();
    let applied = tokio::task::spawn_blocking(move || {
        measure(Uevents, || {
            let mut rest = Vec::new();
            e.events().batch(|| {
                let mut events = events.into_iter();
                for ev in events.by_ref() {
                    if !apply(&e, &ev) {
                        rest.push(ev);
                        break;
                    }
                }
                rest.extend(events);
            });
            rest
        })
    })
    .await;
    applied.unwrap_or_else(|e| {
        tracing::error!(error = %e, "the uevent task failed");
        Vec::new()
    })
}

/// [`Engine::warm_types`] off the runtime's threads.
async fn engine_warm(engine: &Arc<Engine>) {
    let e = engine.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || measure(Uevents, || e.warm_types())).await {
        tracing::error!(error = %e, "the uevent task failed");
    }
}

/// Applies one uevent and says in the log what it led to; `false` when it was deferred.
fn apply(engine: &Engine, ev: &Uevent) -> bool {
    let subsystem = ev.subsystem().unwrap_or_default();
    let seqnum = ev.seqnum().unwrap_or_default();
    match engine.apply_uevent(ev) {
        Ok(crate::engine::uevents::UeventUpdate::Deferred) => {
            tracing::debug!(seqnum, action = %ev.action, %subsystem, devpath = %ev.devpath, "uevent deferred until vgpud's own operation is done");
            return false;
        }
        Ok(update) => {
            crate::metrics::counters().uevent(subsystem, &ev.action);
            let quiet = matches!(
                update,
                crate::engine::uevents::UeventUpdate::Ignored
                    | crate::engine::uevents::UeventUpdate::Own { .. }
                    | crate::engine::uevents::UeventUpdate::Device {
                        change: "unchanged",
                        ..
                    }
            );
            if quiet {
                tracing::debug!(seqnum, action = %ev.action, %subsystem, devpath = %ev.devpath, update = %update, "uevent");
            } else {
                tracing::info!(seqnum, action = %ev.action, %subsystem, devpath = %ev.devpath, update = %update, "uevent");
            }
        }
        Err(e) => {
            tracing::warn!(seqnum, action = %ev.action, %subsystem, devpath = %ev.devpath, error = %e, "could not apply a uevent")
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forgotten types are read once the uevents are quiet for WARM_QUIET, and never later
    /// than WARM_LONGEST after they were first owed, however busy the events.
    #[test]
    fn forgotten_types_wait_for_quiet_events_but_not_longer_than_the_longest() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // One batch, then quiet.
        assert_eq!(warm_wait(t0, t0, t0), WARM_QUIET);
        assert_eq!(warm_wait(t0, t0, t0 + ms(10)), WARM_QUIET - ms(10));
        assert!(warm_wait(t0, t0, t0 + WARM_QUIET).is_zero());
        // Batches keep coming: each pushes the reading back, up to the longest wait.
        assert_eq!(
            warm_wait(t0, t0 + ms(100), t0 + ms(110)),
            WARM_QUIET - ms(10)
        );
        let late = t0 + WARM_LONGEST - ms(5);
        assert_eq!(warm_wait(t0, late, late), ms(5));
        assert!(warm_wait(t0, late, t0 + WARM_LONGEST).is_zero());
        assert!(warm_wait(t0, late, t0 + WARM_LONGEST + ms(1)).is_zero());
    }
}
