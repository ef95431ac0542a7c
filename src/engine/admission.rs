//! First come, first served admission of creates: one FIFO queue per type, so that under a
//! login storm an earlier request for a type is never refused while a later one for the same
//! type gets a device. Requests for different types do not wait for each other, and neither
//! do requests pinned to different GPUs (their queue is the type's on that GPU), so a busy
//! GPU never holds back a call on another.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use super::{lock, Engine, EngineResult};
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

/// The queues, by type, and the room reserved on GPUs.
#[derive(Debug, Default)]
pub(super) struct Admissions {
    queues: Mutex<HashMap<String, Arc<FairQueue>>>,
    /// Creates admitted on a GPU (its address and the type id) that have not yet made their
    /// device: the kernel's `available_instances` does not count them yet.
    reserved: Mutex<HashMap<(String, String), u32>>,
}

/// What a look at a GPU's room for one more device of a type found.
pub(super) enum Reserve<'a> {
    /// Room, now held for this request until the guard is dropped.
    Reserved(Reservation<'a>),
    /// The room left is held by requests admitted before: look again, exactly, at the end.
    Taken,
    /// Not a GPU whose room is reserved this way (a VF parent, SR-IOV vGPU), or no room at
    /// all: the create is tried under the GPU's lock, as the kernel decides.
    NotReservable,
}

/// Room held on a GPU for one create; released when dropped (once the kernel counts the
/// device, or the create failed).
pub(super) struct Reservation<'a> {
    engine: &'a Engine,
    key: (String, String),
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut reserved = lock(&self.engine.admissions.reserved);
        if let Some(n) = reserved.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                reserved.remove(&self.key);
            }
        }
    }
}

impl Engine {
    /// Reserves room for one more `ty` on `gpu` when the GPU is its own mdev parent and the
    /// kernel shows more room than is already reserved. Called with the type's turn.
    pub(super) fn reserve_room(&self, gpu: &str, ty: &MdevType) -> EngineResult<Reserve<'_>> {
        let own_parent = self
            .gpus()
            .get(gpu)
            .is_some_and(|e| e.location.is_mdev_parent);
        if !own_parent || self.offers_sriov_vgpu(gpu) {
            return Ok(Reserve::NotReservable);
        }
        let available = self.available(gpu, &ty.id)?;
        let key = (gpu.to_string(), ty.id.clone());
        let mut reserved = lock(&self.admissions.reserved);
        let held = reserved.get(&key).copied().unwrap_or(0);
        if available > held {
            reserved.insert(key.clone(), held + 1);
            return Ok(Reserve::Reserved(Reservation { engine: self, key }));
        }
        Ok(if held > 0 {
            Reserve::Taken
        } else {
            Reserve::NotReservable
        })
    }

    /// With the GPU's lock held (no create of it half done): whether the kernel shows room
    /// for one more `ty` beyond what requests admitted before hold.
    pub(super) fn unreserved_room(&self, gpu: &str, ty: &MdevType) -> EngineResult<bool> {
        let held = lock(&self.admissions.reserved)
            .get(&(gpu.to_string(), ty.id.clone()))
            .copied()
            .unwrap_or(0);
        if held == 0 {
            // Nothing reserved: the create itself asks the kernel.
            return Ok(true);
        }
        Ok(self.available(gpu, &ty.id)? > held)
    }

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
