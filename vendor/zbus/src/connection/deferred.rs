//! vgpud patch: messages sent without waiting for the socket.
//!
//! [`Connection::send`] waits for the socket's write lock and then for the peer to take the
//! bytes. The object server answers some calls itself (unknown object, a call its dispatch
//! limit refuses); answered that way, a flood of calls whose replies wait on a busy bus stops
//! the object server from reading anything else, so a caller behind the flood waits for all
//! of it. Those replies are queued here instead and written by one task, a few at a time,
//! so other messages take turns with them. The queue is bounded in bytes: past
//! [`MAX_QUEUED_BYTES`] a sender waits for room, as it would have waited for the socket.

use std::{
    collections::VecDeque,
    sync::{Mutex, OnceLock},
};

use zruntime::Event;

use super::{Connection, WeakConnection};
use crate::{Message, runtime::Task};

/// The most bytes of messages waiting in the queue.
pub(crate) const MAX_QUEUED_BYTES: usize = 16 << 20;
/// The most bytes written in one turn of the socket's write lock.
const TURN_BYTES: usize = 4 << 10;

#[derive(Debug, Default)]
pub(crate) struct Deferred {
    queue: Mutex<(VecDeque<Message>, usize)>,
    queued: Event,
    room: Event,
    writer: OnceLock<Task<()>>,
}

impl Deferred {
    fn lock(&self) -> std::sync::MutexGuard<'_, (VecDeque<Message>, usize)> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The messages of one turn: up to [`TURN_BYTES`] (at least one message), and their size.
    fn turn(&self) -> (Vec<Message>, usize) {
        let mut q = self.lock();
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(m) = q.0.front() {
            let len = m.data().len();
            if !batch.is_empty() && bytes + len > TURN_BYTES {
                break;
            }
            bytes += len;
            batch.extend(q.0.pop_front());
        }
        (batch, bytes)
    }

    fn release(&self, bytes: usize) {
        let mut q = self.lock();
        q.1 = q.1.saturating_sub(bytes);
        drop(q);
        self.room.notify(usize::MAX);
    }
}

impl Connection {
    /// Queues `msg` to be sent after the messages queued before it, and returns once it is
    /// queued (vgpud patch): the socket is written by a task of the connection, in turns
    /// with other senders. Waits only while [`MAX_QUEUED_BYTES`] are queued already. A
    /// message that cannot be sent because the connection closed is dropped.
    pub async fn send_deferred(&self, msg: Message) {
        let deferred = &self.inner.deferred;
        let len = msg.data().len();
        let fits = |q: &(VecDeque<Message>, usize)| q.0.is_empty() || q.1 + len <= MAX_QUEUED_BYTES;
        loop {
            {
                let mut q = deferred.lock();
                if fits(&q) {
                    q.0.push_back(msg);
                    q.1 += len;
                    break;
                }
            }
            if self.inner.is_closed() {
                return;
            }
            // Listen, then look again, so that room made in between is not missed.
            let room = deferred.room.listen();
            let full = !fits(&deferred.lock());
            if full {
                room.await;
            }
        }
        deferred
            .writer
            .get_or_init(|| self.spawn_deferred_writer());
        deferred.queued.notify(1);
    }

    fn spawn_deferred_writer(&self) -> Task<()> {
        let weak = WeakConnection::from(self);
        self.inner.runtime.spawn("deferred writer", async move {
            loop {
                let Some(conn) = weak.upgrade() else { return };
                let deferred = &conn.inner.deferred;
                let (batch, bytes) = deferred.turn();
                if batch.is_empty() {
                    // Listen, then look again, so that a message queued in between is not missed.
                    let queued = deferred.queued.listen();
                    let empty = deferred.lock().0.is_empty();
                    if empty {
                        drop(conn);
                        queued.await;
                    }
                    continue;
                }
                let sent = conn.send_all(&batch).await;
                deferred.release(bytes);
                if sent.is_err() {
                    // The connection is gone: what is queued can never be sent.
                    let mut q = deferred.lock();
                    q.0.clear();
                    q.1 = 0;
                    drop(q);
                    deferred.room.notify(usize::MAX);
                    return;
                }
            }
        })
    }
}
