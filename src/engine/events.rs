//! The core's event stream: every change of state the engine makes or finds is one typed
//! [`Event`], sent to every subscriber in the order the changes happened. D-Bus signals and
//! property changes, the audit log and metrics all come from it, so no path that changes
//! state can forget to tell them.
//!
//! Events are produced where the state is written (the device registry and the GPU
//! inventory), under the lock that guards it. One call's events are delivered together
//! ([`EventBus::batch`]); a device's are delivered before its UUID is released, so a later
//! call's events about it come after. A subscriber gets its own queue and a wake-up call; it
//! drains the queue when it likes.
//! Sending never blocks and never fails: a subscriber that went away is dropped.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use super::{lock, DeviceInfo, Drift};
use crate::model::Gpu;

/// Who made a device known to vgpud.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A call to vgpud made it.
    Vgpud,
    /// It was found on the host or in the definitions (another tool made or defined it).
    Host,
}

/// One change of state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// vgpud knows a device it did not know before.
    DeviceAdded {
        /// The device as it is now.
        device: DeviceInfo,
        /// Who made it.
        origin: Origin,
    },
    /// A known device changed (active, persistence, owner, attributes, address...).
    DeviceChanged {
        /// As it was.
        before: DeviceInfo,
        /// As it is now.
        after: DeviceInfo,
    },
    /// A device is gone: removed, and without a definition.
    DeviceRemoved {
        /// As it was last.
        device: DeviceInfo,
    },
    /// Something happened to a device behind vgpud's back.
    Drift(Drift),
    /// A device's lease ran out: the domain its owner names has not been running for
    /// longer than the lease. Its removal follows.
    DeviceReclaimed {
        /// The device as it was.
        device: DeviceInfo,
        /// Why, in a sentence (the domain, its state, how long).
        reason: String,
    },
    /// A GPU appeared (or was found at start).
    GpuAdded {
        /// The GPU.
        gpu: Gpu,
    },
    /// A GPU changed: its driver, VFs, sharing modes or types.
    GpuChanged {
        /// As it was.
        before: Gpu,
        /// As it is now.
        after: Gpu,
    },
    /// A GPU's NVIDIA heterogeneous (mixed-size) vGPU mode changed.
    GpuModeChanged {
        /// The GPU's address.
        gpu: String,
        /// The mode now.
        heterogeneous: bool,
    },
    /// Something happened to a GPU behind vgpud's back (a GPU instance made or destroyed by
    /// another tool).
    GpuDrift {
        /// The GPU's address.
        gpu: String,
        /// `gpu-instance-created-externally`, `gpu-instance-destroyed-externally`.
        event: &'static str,
        /// A sentence for the log and the signal.
        detail: String,
    },
    /// A GPU went away.
    GpuRemoved {
        /// Its address.
        address: String,
    },
    /// How many devices a GPU can take may have changed (a device on it came or went, was
    /// started or stopped, or the GPU changed).
    CapacityChanged {
        /// The physical GPU's address.
        gpu: String,
    },
}

impl Event {
    /// The device an event is about, if any.
    pub fn device(&self) -> Option<&DeviceInfo> {
        match self {
            Event::DeviceAdded { device, .. }
            | Event::DeviceRemoved { device }
            | Event::DeviceReclaimed { device, .. } => Some(device),
            Event::DeviceChanged { after, .. } => Some(after),
            _ => None,
        }
    }
}

/// Who asked for a change: the client a call was made for. Events sent while an engine call
/// runs inside [`with_cause`] carry it, so the audit log can say who did what.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cause {
    /// The method (`CreateDevice`).
    pub method: String,
    /// The caller's uid.
    pub uid: Option<u32>,
    /// The caller's process id.
    pub pid: Option<u32>,
    /// The systemd unit of the caller's process.
    pub unit: Option<String>,
}

thread_local! {
    static CAUSE: RefCell<Option<Arc<Cause>>> = const { RefCell::new(None) };
    /// The events of the batch this thread is in ([`EventBus::batch`]), not sent yet.
    static BATCH: RefCell<Option<Vec<Record>>> = const { RefCell::new(None) };
}

/// Puts back, when dropped, the cause a thread had before.
struct RestoreCause(Option<Arc<Cause>>);

impl Drop for RestoreCause {
    fn drop(&mut self) {
        let previous = self.0.take();
        CAUSE.with(|c| *c.borrow_mut() = previous);
    }
}

/// Runs `f` (engine work, on this thread) with `cause` attached to every event it sends.
pub fn with_cause<T>(cause: Cause, f: impl FnOnce() -> T) -> T {
    let _reset = RestoreCause(CAUSE.with(|c| c.borrow_mut().replace(Arc::new(cause))));
    f()
}

/// Runs `f` with no cause attached to the events it sends: what a look at the host finds
/// (drift) is nobody's call, even when the look is made during one.
pub fn without_cause<T>(f: impl FnOnce() -> T) -> T {
    let _reset = RestoreCause(CAUSE.with(|c| c.borrow_mut().take()));
    f()
}

/// An event as a subscriber gets it: what changed, and who asked for it (`None`: found on
/// the host, or done by vgpud itself, as a restore or a repair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// What changed.
    pub event: Event,
    /// Who asked.
    pub cause: Option<Arc<Cause>>,
}

struct Queue {
    events: Mutex<VecDeque<Record>>,
    wake: Box<dyn Fn() + Send + Sync>,
}

/// A subscriber's end of the stream: events queue here until drained. Dropping it
/// unsubscribes.
pub struct Subscription {
    queue: Arc<Queue>,
}

impl Subscription {
    /// Takes every event queued so far, oldest first.
    pub fn drain(&self) -> Vec<Record> {
        lock(&self.queue.events).drain(..).collect()
    }
}

/// The stream: a list of subscribers.
#[derive(Default)]
pub struct EventBus {
    subscribers: Mutex<Vec<Weak<Queue>>>,
    /// How many batches of events were delivered: what a memo of state derived from the
    /// devices compares to know it is still current.
    delivered: std::sync::atomic::AtomicU64,
}

/// Spawns a task that hands every event of the stream to `f`, oldest first, until the
/// runtime ends: the audit log and the metrics subscribe so.
pub fn spawn_consumer(
    bus: &EventBus,
    mut f: impl FnMut(&Record) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let woken = Arc::new(tokio::sync::Notify::new());
    let wake = woken.clone();
    let events = bus.subscribe(move || wake.notify_one());
    tokio::spawn(async move {
        loop {
            woken.notified().await;
            for r in events.drain() {
                f(&r);
            }
        }
    })
}

impl EventBus {
    /// Subscribes: from now on every event is queued for the subscriber, and `wake` is called
    /// after each (it must not block: set a flag, notify a task).
    pub fn subscribe(&self, wake: impl Fn() + Send + Sync + 'static) -> Subscription {
        let queue = Arc::new(Queue {
            events: Mutex::new(VecDeque::new()),
            wake: Box::new(wake),
        });
        lock(&self.subscribers).push(Arc::downgrade(&queue));
        Subscription { queue }
    }

    /// Sends events to every subscriber, in order (within a batch, when the batch is
    /// flushed).
    pub fn send_all(&self, events: impl IntoIterator<Item = Event>) {
        let cause = CAUSE.with(|c| c.borrow().clone());
        let mut records: Vec<Record> = events
            .into_iter()
            .map(|event| Record {
                event,
                cause: cause.clone(),
            })
            .collect();
        if records.is_empty() {
            return;
        }
        let batched = BATCH.with(|b| match b.borrow_mut().as_mut() {
            Some(pending) => {
                pending.append(&mut records);
                true
            }
            None => false,
        });
        if !batched {
            self.deliver(records);
        }
    }

    /// Runs `f` with the events it sends held back and delivered together when it ends (or
    /// at [`EventBus::flush`]), so that subscribers see one call's changes as one batch: a
    /// client gets one PropertiesChanged per object for them. Nested batches are one.
    pub fn batch<T>(&self, f: impl FnOnce() -> T) -> T {
        if BATCH.with(|b| b.borrow().is_some()) {
            return f();
        }
        struct End<'a>(&'a EventBus);
        impl Drop for End<'_> {
            fn drop(&mut self) {
                let pending = BATCH.with(|b| b.borrow_mut().take()).unwrap_or_default();
                self.0.deliver(pending);
            }
        }
        BATCH.with(|b| *b.borrow_mut() = Some(Vec::new()));
        let _end = End(self);
        f()
    }

    /// Delivers what the running batch holds now (the batch goes on). A change that other
    /// calls may act on at once (a device whose UUID is released) is flushed under the lock
    /// that guards it, so its events come before theirs.
    pub fn flush(&self) {
        let pending = BATCH.with(|b| b.borrow_mut().as_mut().map(std::mem::take));
        if let Some(records) = pending {
            self.deliver(records);
        }
    }

    /// How many batches of events were delivered so far; it changes with every change of
    /// state published.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(std::sync::atomic::Ordering::Acquire)
    }

    fn deliver(&self, records: Vec<Record>) {
        if records.is_empty() {
            return;
        }
        self.delivered
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut subscribers = lock(&self.subscribers);
        subscribers.retain(|w| w.strong_count() > 0);
        for queue in subscribers.iter().filter_map(Weak::upgrade) {
            lock(&queue.events).extend(records.iter().cloned());
            (queue.wake)();
        }
    }

    /// Sends one event.
    pub fn send(&self, event: Event) {
        self.send_all([event]);
    }
}

/// The events that turn the device `before` into `after` (`None`: unknown), on the physical
/// GPU `gpu`.
pub(super) fn device_transition(
    before: Option<&DeviceInfo>,
    after: Option<&DeviceInfo>,
    origin: Origin,
    gpu: impl FnOnce() -> String,
) -> Vec<Event> {
    let mut out = match (before, after) {
        (None, Some(d)) => vec![Event::DeviceAdded {
            device: d.clone(),
            origin,
        }],
        (Some(b), Some(a)) if b != a => vec![Event::DeviceChanged {
            before: b.clone(),
            after: a.clone(),
        }],
        (Some(b), None) => vec![Event::DeviceRemoved { device: b.clone() }],
        _ => Vec::new(),
    };
    let active = |d: Option<&DeviceInfo>| d.is_some_and(|d| d.active);
    if !out.is_empty() && active(before) != active(after) {
        out.push(Event::CapacityChanged { gpu: gpu() });
    }
    out
}

/// A GPU as events compare it: without the availability counts of its types, which are a
/// reading of the host, not its state.
pub(super) fn gpu_shape(gpu: &Gpu) -> Gpu {
    let mut g = gpu.clone();
    for t in &mut g.types {
        t.available_instances = 0;
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn device(active: bool) -> DeviceInfo {
        DeviceInfo {
            uuid: "u".into(),
            parent: "p".into(),
            type_id: "t".into(),
            type_name: "t".into(),
            owner: String::new(),
            iommu_group: None,
            attributes: Default::default(),
            active,
            persistent: false,
            autostart: false,
            created: 0,
            kind: crate::model::DeviceKind::Mdev,
            address: None,
            functions: Vec::new(),
        }
    }

    #[test]
    fn subscribers_get_every_event_in_order_and_are_woken() {
        let bus = EventBus::default();
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        let sub = bus.subscribe(move || {
            w.fetch_add(1, Ordering::SeqCst);
        });
        bus.send(Event::GpuRemoved {
            address: "a".into(),
        });
        bus.send(Event::GpuRemoved {
            address: "b".into(),
        });
        let got: Vec<Event> = sub.drain().into_iter().map(|r| r.event).collect();
        assert_eq!(
            got,
            vec![
                Event::GpuRemoved {
                    address: "a".into()
                },
                Event::GpuRemoved {
                    address: "b".into()
                }
            ]
        );
        assert_eq!(woken.load(Ordering::SeqCst), 2);
        assert!(sub.drain().is_empty());
    }

    #[test]
    fn events_carry_the_cause_of_the_call_they_come_from() {
        let bus = EventBus::default();
        let sub = bus.subscribe(|| {});
        let cause = Cause {
            method: "CreateDevice".into(),
            uid: Some(1000),
            pid: Some(42),
            unit: None,
        };
        with_cause(cause.clone(), || {
            bus.send(Event::GpuRemoved {
                address: "a".into(),
            })
        });
        bus.send(Event::GpuRemoved {
            address: "b".into(),
        });
        let got = sub.drain();
        assert_eq!(got[0].cause.as_deref(), Some(&cause));
        assert_eq!(got[1].cause, None, "the cause ends with the call");
    }

    #[test]
    fn what_a_look_finds_during_a_call_is_not_the_calls() {
        let bus = EventBus::default();
        let sub = bus.subscribe(|| {});
        let cause = Cause {
            method: "CreateDevice".into(),
            ..Default::default()
        };
        let gone = |a: &str| Event::GpuRemoved { address: a.into() };
        with_cause(cause.clone(), || {
            without_cause(|| bus.send(gone("drift")));
            bus.send(gone("made"));
        });
        let got = sub.drain();
        assert_eq!(got[0].cause, None, "drift found during the call");
        assert_eq!(got[1].cause.as_deref(), Some(&cause), "the cause is back");
    }

    #[test]
    fn a_batch_is_delivered_at_once_when_it_ends_or_is_flushed() {
        let bus = EventBus::default();
        let sub = bus.subscribe(|| {});
        let gone = |a: &str| Event::GpuRemoved { address: a.into() };
        bus.batch(|| {
            bus.send(gone("a"));
            bus.batch(|| bus.send(gone("b")));
            assert!(sub.drain().is_empty(), "held back, also by the inner batch");
            bus.flush();
            assert_eq!(sub.drain().len(), 2, "flushed");
            bus.send(gone("c"));
        });
        assert_eq!(sub.drain().len(), 1, "delivered when the batch ends");
        bus.send(gone("d"));
        assert_eq!(sub.drain().len(), 1, "outside a batch at once");
    }

    #[test]
    fn a_dropped_subscription_is_forgotten() {
        let bus = EventBus::default();
        drop(bus.subscribe(|| {}));
        bus.send(Event::GpuRemoved {
            address: "a".into(),
        });
        assert!(lock(&bus.subscribers).is_empty());
    }

    #[test]
    fn transitions_name_what_changed() {
        let gpu = || "g".to_string();
        let (on, off) = (device(true), device(false));
        let added = device_transition(None, Some(&on), Origin::Vgpud, gpu);
        assert!(matches!(
            added[0],
            Event::DeviceAdded {
                origin: Origin::Vgpud,
                ..
            }
        ));
        assert_eq!(added[1], Event::CapacityChanged { gpu: "g".into() });
        let stopped = device_transition(Some(&on), Some(&off), Origin::Host, gpu);
        assert!(matches!(stopped[0], Event::DeviceChanged { .. }));
        assert_eq!(stopped.len(), 2);
        assert!(device_transition(Some(&on), Some(&on), Origin::Host, gpu).is_empty());
        let mut owned = on.clone();
        owned.owner = "vm".into();
        assert_eq!(
            device_transition(Some(&on), Some(&owned), Origin::Host, gpu).len(),
            1,
            "no capacity change when only the owner changes"
        );
        let removed = device_transition(Some(&off), None, Origin::Host, gpu);
        assert_eq!(removed, vec![Event::DeviceRemoved { device: off }]);
    }
}
