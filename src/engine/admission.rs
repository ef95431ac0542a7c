//! First come, first served admission of creates: one FIFO queue per type, so that under a
//! login storm an earlier request for a type is never refused while a later one for the same
//! type gets a device. Requests for different types do not wait for each other, and neither
//! do requests pinned to different GPUs (their queue is the type's on that GPU), so a busy
//! GPU never holds back a call on another.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use super::{lock, Engine};
use crate::model::MdevType;

/// A ticket queue: tickets are handed out in arrival order and served in that order.
#[derive(Debug, Default)]
pub(super) struct FairQueue {
    /// (next ticket to hand out, ticket being served).
    state: Mutex<(u64, u64)>,
    turn: Condvar,
}

/// Being served; the next ticket's turn comes when this is dropped.
pub(super) struct Turn {
    queue: Arc<FairQueue>,
}

impl FairQueue {
    /// Takes a ticket and waits until it is served.
    pub(super) fn wait_turn(self: &Arc<Self>) -> Turn {
        let mut state = lock(&self.state);
        let ticket = state.0;
        state.0 += 1;
        while state.1 != ticket {
            state = self
                .turn
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        Turn {
            queue: self.clone(),
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        lock(&self.queue.state).1 += 1;
        self.queue.turn.notify_all();
    }
}

/// The queues, by type.
#[derive(Debug, Default)]
pub(super) struct Admissions {
    queues: Mutex<HashMap<String, Arc<FairQueue>>>,
}

impl Engine {
    /// The queue of the type the candidates offer (named by its name, as every GPU offering
    /// it names it), on `pinned` GPU when the request names one.
    pub(super) fn admission(
        &self,
        candidates: &[(String, MdevType)],
        pinned: Option<&str>,
    ) -> Arc<FairQueue> {
        let mut key = candidates
            .first()
            .map(|(_, t)| t.name.to_ascii_lowercase())
            .unwrap_or_default();
        if let Some(gpu) = pinned {
            key = format!("{key}@{gpu}");
        }
        lock(&self.admissions.queues)
            .entry(key)
            .or_default()
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn turns_come_in_ticket_order() {
        let queue = Arc::new(FairQueue::default());
        let first = queue.wait_turn();
        let (tx, rx) = mpsc::channel();
        let mut threads = Vec::new();
        for i in 0..5 {
            let q = queue.clone();
            let tx = tx.clone();
            threads.push(std::thread::spawn(move || {
                let _turn = q.wait_turn();
                tx.send(i).expect("send");
            }));
            // Each thread has its ticket before the next starts.
            while lock(&queue.state).0 != i + 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert!(rx.try_recv().is_err(), "nobody passes the one being served");
        drop(first);
        for t in threads {
            t.join().expect("join");
        }
        let order: Vec<u64> = rx.try_iter().collect();
        assert_eq!(order, vec![0, 1, 2, 3, 4]);
    }
}
