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
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use crate::engine::CreateRequest;
    use crate::host::Host;

    /// How long a turn may take to come: a broken queue fails the test instead of hanging it.
    const WAIT: Duration = Duration::from_secs(30);

    /// Waits until `done`, failing after [`WAIT`].
    fn within(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Runs `f`, and ends the whole test run when it has not finished within [`WAIT`]: a
    /// queue that never serves a turn would hang every create of the suite, which is slower
    /// to notice than a failure.
    fn or_abort<T>(what: &str, f: impl FnOnce() -> T) -> T {
        let done = Arc::new(AtomicBool::new(false));
        let watched = done.clone();
        let what = what.to_string();
        std::thread::spawn(move || {
            std::thread::sleep(WAIT);
            if !watched.load(Ordering::SeqCst) {
                eprintln!("{what}: not done within {WAIT:?}; ending the test run");
                std::process::abort();
            }
        });
        let out = f();
        done.store(true, Ordering::SeqCst);
        out
    }

    #[test]
    fn turns_come_in_ticket_order() {
        or_abort("turns in ticket order", || {
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
                within("a ticket for each request", || {
                    lock(&queue.state).0 == i + 2
                });
            }
            assert!(rx.try_recv().is_err(), "nobody passes the one being served");
            drop(first);
            for t in threads {
                t.join().expect("join");
            }
            let order: Vec<u64> = rx.try_iter().collect();
            assert_eq!(order, vec![0, 1, 2, 3, 4]);
            // Once everyone was served, the next comes at once.
            drop(queue.wait_turn());
        });
    }

    /// An engine on two Quadro RTX 6000 (24 GB), the first of them, and its `RTX6000-12Q`
    /// type: room for 24 / 12 = 2 on an empty GPU (hardware.md §1.3).
    fn turing() -> (tempfile::TempDir, Engine, String, MdevType) {
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("nvidia-turing", dir.path()).expect("profile");
        let e = Engine::new(Host::simulated(dir.path())).expect("engine");
        let gpu = e
            .list_gpus()
            .into_iter()
            .find(|g| g.driver == "nvidia")
            .expect("a Quadro RTX 6000");
        let ty = gpu
            .types
            .iter()
            .find(|t| t.name.ends_with("RTX6000-12Q"))
            .cloned()
            .expect("RTX6000-12Q");
        (dir, e, gpu.address, ty)
    }

    fn outcome(r: &Reserve<'_>) -> &'static str {
        match r {
            Reserve::Reserved(_) => "reserved",
            Reserve::Taken => "taken",
            Reserve::NotReservable => "not reservable",
        }
    }

    /// What a look at the room finds (a reservation made is given back at once).
    fn look(e: &Engine, gpu: &str, ty: &MdevType) -> &'static str {
        outcome(&e.reserve_room(gpu, ty).expect("look"))
    }

    fn reserved<'a>(e: &'a Engine, gpu: &str, ty: &MdevType) -> Reservation<'a> {
        match e.reserve_room(gpu, ty).expect("look") {
            Reserve::Reserved(r) => r,
            other => panic!("no reservation: {}", outcome(&other)),
        }
    }

    #[test]
    fn reservations_never_promise_more_room_than_the_gpu_has_and_give_it_back() {
        let (_d, e, gpu, ty) = turing();
        let unreserved = || e.unreserved_room(&gpu, &ty).expect("room");
        assert_eq!(e.available(&gpu, &ty.id).expect("room"), 2);
        let first = reserved(&e, &gpu, &ty);
        assert!(unreserved(), "one of two places held");
        let second = reserved(&e, &gpu, &ty);
        assert_eq!(look(&e, &gpu, &ty), "taken", "both places are promised");
        assert!(!unreserved(), "both places are promised");
        // A reservation given back is promised again, once.
        drop(first);
        assert!(unreserved(), "one place given back");
        let third = reserved(&e, &gpu, &ty);
        assert_eq!(look(&e, &gpu, &ty), "taken");
        drop(second);
        drop(third);
        assert!(
            lock(&e.admissions.reserved).is_empty(),
            "nothing held any more"
        );
        // Nothing held and the GPU really full: not "taken", the create asks the kernel.
        for _ in 0..2 {
            e.create_device(&CreateRequest {
                type_query: ty.id.clone(),
                parent: Some(gpu.clone()),
                ..CreateRequest::default()
            })
            .expect("create");
        }
        assert_eq!(e.available(&gpu, &ty.id).expect("room"), 0);
        assert_eq!(look(&e, &gpu, &ty), "not reservable");
        assert!(unreserved(), "nothing held: the kernel decides");
    }

    #[test]
    fn one_queue_per_type_and_per_pinned_gpu() {
        let (_d, e, gpu, ty) = turing();
        let named = |name: &str| {
            vec![(
                gpu.clone(),
                MdevType {
                    name: name.into(),
                    ..ty.clone()
                },
            )]
        };
        let queue = e.admission(&named("GRID RTX6000-12Q"), None);
        let same = e.admission(&named("grid rtx6000-12q"), None);
        assert!(
            Arc::ptr_eq(&queue, &same),
            "one type, one queue, whatever the case"
        );
        let other = e.admission(&named("GRID RTX6000-6Q"), None);
        assert!(!Arc::ptr_eq(&queue, &other), "another type does not wait");
        let pinned = e.admission(&named("GRID RTX6000-12Q"), Some(&gpu));
        assert!(
            !Arc::ptr_eq(&queue, &pinned),
            "a pinned request has its GPU's queue"
        );
        let again = e.admission(&named("GRID RTX6000-12Q"), Some(&gpu));
        assert!(Arc::ptr_eq(&pinned, &again));
    }
}
