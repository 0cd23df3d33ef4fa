//! The write queue: writers take turns, and the one at the front leads a commit group.
//!
//! The writer at the front becomes the leader, takes the batches queued behind it (up to a byte
//! limit) and writes them as one group; work that must not interleave with writes (freezing a
//! memtable, a transaction's conflict check, column-family changes) runs as an exclusive entry
//! the leader executes alone. Only a leader writes the log, inserts into the memtables or
//! replaces them.
//!
//! It does not know what a write does: the [`Leader`] (the database) does that. It guarantees
//! that a turn always ends — a leader that panics hands every writer of its group an
//! `Error::Panicked` and stops the database — that a closed queue drains:
//! [`WriteQueue::close_and_drain`] refuses new writers and waits for those already in it — and
//! that it stays bounded: at most [`MAX_WAITING`] writers wait in it, a writer beyond them
//! waits for room before it joins.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use cairn_sstable::SeqNo;

use crate::error::{Error, Result};
use crate::log_record::BatchOp;

/// A commit group carries at most this many bytes of batches (a larger batch leads alone).
const MAX_GROUP_BYTES: usize = 1 << 20;

/// At most this many writers wait in the queue; more wait for room before they join it, so a
/// flood of writers behind a stalled leader holds a bounded queue.
pub(crate) const MAX_WAITING: usize = 4096;

/// What the queue's leader does with the work it leads: the database.
pub(crate) trait Leader {
    /// Writes `ops` as one log record and applies them; returns the first op's sequence number.
    fn write_ops(&self, ops: &[&BatchOp], sync: bool) -> Result<SeqNo>;

    /// The first column family `ops` names that the database does not have.
    fn unknown_family(&self, ops: &[BatchOp]) -> Option<u32>;

    /// Stops the database after a failure that leaves its state uncertain.
    fn stop_with(&self, error: &Error);
}

/// Work done by the leader alone, between commit groups.
pub(crate) type Exclusive<L> = Box<dyn FnOnce(&L) -> Result<SeqNo> + Send>;

pub(crate) enum Work<L> {
    /// Writes applied together, with their approximate size in bytes.
    Batch(Vec<BatchOp>, usize),
    Exclusive(Exclusive<L>),
}

struct Pending<L> {
    work: Mutex<Option<Work<L>>>,
    sync: bool,
    /// A batch holding range deletes: it leads alone, so the memory its fragments may need is
    /// judged (and, past the limit, refused) for it and nobody else.
    range_deletes: bool,
    result: Mutex<Option<Result<SeqNo>>>,
}

impl<L> Pending<L> {
    fn take_work(&self) -> Option<Work<L>> {
        lock(&self.work).take()
    }

    fn finish(&self, result: Result<SeqNo>) {
        *lock(&self.result) = Some(result);
    }

    fn take_result(&self) -> Option<Result<SeqNo>> {
        lock(&self.result).take()
    }

    fn has_result(&self) -> bool {
        lock(&self.result).is_some()
    }

    fn is_exclusive(&self) -> bool {
        matches!(*lock(&self.work), Some(Work::Exclusive(_)))
    }

    fn bytes(&self) -> usize {
        match &*lock(&self.work) {
            Some(Work::Batch(_, bytes)) => *bytes,
            _ => 0,
        }
    }
}

/// Locks `m`, taking over a lock a panicking holder left poisoned.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writers waiting their turn.
pub(crate) struct WriteQueue<L> {
    queue: Mutex<QueueState<L>>,
    /// [`MAX_WAITING`], smaller in tests.
    max_waiting: usize,
    /// Signalled when a turn ends.
    turn: Condvar,
}

impl<L> Default for WriteQueue<L> {
    fn default() -> Self {
        Self::with_max_waiting(MAX_WAITING)
    }
}

impl<L> WriteQueue<L> {
    fn with_max_waiting(max_waiting: usize) -> Self {
        Self {
            max_waiting,
            queue: Mutex::new(QueueState {
                leading: false,
                waiting: VecDeque::new(),
                closed: false,
                waiting_for_room: 0,
            }),
            turn: Condvar::new(),
        }
    }
}

struct QueueState<L> {
    /// A leader is writing (from the queue, or a writer that found it empty).
    leading: bool,
    /// Writers waiting; the first becomes the next leader.
    waiting: VecDeque<Arc<Pending<L>>>,
    /// Closed by shutdown: new writers are refused.
    closed: bool,
    /// Writers waiting for room to join (the queue holds its bound).
    waiting_for_room: usize,
}

impl<L> std::fmt::Debug for WriteQueue<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteQueue").finish_non_exhaustive()
    }
}

/// A turn at the head of the queue, taken by [`WriteQueue::try_lead`]; it ends when dropped.
pub(crate) struct Turn<'a, L> {
    queue: &'a WriteQueue<L>,
}

impl<L> Drop for Turn<'_, L> {
    fn drop(&mut self) {
        self.queue.end_turn(self.queue.lock(), false);
    }
}

impl<L> WriteQueue<L> {
    fn lock(&self) -> MutexGuard<'_, QueueState<L>> {
        lock(&self.queue)
    }

    /// Ends a leader's turn and wakes whoever waits: the group just served, the next leader,
    /// or a shutdown draining the queue.
    fn end_turn(&self, mut queue: MutexGuard<'_, QueueState<L>>, served_others: bool) {
        queue.leading = false;
        let wake = served_others
            || !queue.waiting.is_empty()
            || queue.closed
            || queue.waiting_for_room > 0;
        drop(queue);
        if wake {
            self.turn.notify_all();
        }
    }

    /// Takes the lead if nobody leads or waits: for background work, which must never wait on
    /// writers (a writer stalled on level 0 waits for that very work). `None` if the queue is
    /// busy or closed.
    pub(crate) fn try_lead(&self) -> Option<Turn<'_, L>> {
        let mut queue = self.lock();
        if queue.leading || !queue.waiting.is_empty() || queue.closed {
            return None;
        }
        queue.leading = true;
        Some(Turn { queue: self })
    }

    /// True if nobody leads or waits.
    pub(crate) fn is_idle(&self) -> bool {
        let queue = self.lock();
        !queue.leading && queue.waiting.is_empty()
    }

    /// Refuses new writers from now on (they get `Stopped`) and waits until the writers already
    /// in the queue are done: a write in flight finishes before the log's last sync.
    pub(crate) fn close_and_drain(&self) {
        let mut queue = self.lock();
        queue.closed = true;
        while queue.leading || !queue.waiting.is_empty() {
            queue = self
                .turn
                .wait(queue)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl<L: Leader> WriteQueue<L> {
    /// Queues `work` and returns its result, leading a group for `leader` if it comes to the
    /// front.
    pub(crate) fn submit(&self, leader: &L, work: Work<L>, sync: bool) -> Result<SeqNo> {
        let mut queue = self.lock();
        while queue.waiting.len() >= self.max_waiting && !queue.closed {
            queue.waiting_for_room += 1;
            queue = self
                .turn
                .wait(queue)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            queue.waiting_for_room -= 1;
        }
        if queue.closed {
            return Err(Error::closed());
        }
        if !queue.leading && queue.waiting.is_empty() {
            // Nobody to group with: write directly, with no queue entry to allocate and no one
            // to wake unless somebody queued meanwhile.
            queue.leading = true;
            drop(queue);
            let result = self.unwind_safely(leader, &[], || lead_alone(leader, work, sync));
            self.end_turn(self.lock(), false);
            return result;
        }
        let range_deletes =
            matches!(&work, Work::Batch(ops, _) if ops.iter().any(BatchOp::is_range_delete));
        let me = Arc::new(Pending {
            work: Mutex::new(Some(work)),
            sync,
            range_deletes,
            result: Mutex::new(None),
        });
        queue.waiting.push_back(Arc::clone(&me));
        loop {
            if let Some(result) = me.take_result() {
                return result;
            }
            if !queue.leading
                && queue
                    .waiting
                    .front()
                    .is_some_and(|front| Arc::ptr_eq(front, &me))
            {
                break;
            }
            queue = self
                .turn
                .wait(queue)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        queue.leading = true;
        let group = take_group(&queue.waiting);
        drop(queue);
        self.unwind_safely(leader, &group, || lead(leader, &group));
        let mut queue = self.lock();
        for _ in 0..group.len() {
            queue.waiting.pop_front();
        }
        self.end_turn(queue, group.len() > 1);
        me.take_result()
            .unwrap_or_else(|| Err(Error::Panicked("a write's result was lost".into())))
    }

    /// Runs a leader's work. If it panics, the log may hold part of a group the memtables lack:
    /// the database stops, every writer of the group gets `Panicked`, the turn ends, and the
    /// panic goes on in the leader's thread.
    fn unwind_safely<T>(
        &self,
        leader: &L,
        group: &[Arc<Pending<L>>],
        lead: impl FnOnce() -> T,
    ) -> T {
        match std::panic::catch_unwind(AssertUnwindSafe(lead)) {
            Ok(value) => value,
            Err(panic) => {
                let why = "a writer panicked while leading a commit group; whether its writes \
                           were applied is unknown";
                leader.stop_with(&Error::Panicked(why.into()));
                for pending in group.iter().filter(|p| !p.has_result()) {
                    pending.finish(Err(Error::Panicked(why.into())));
                }
                if !group.is_empty() {
                    let mut queue = self.lock();
                    for _ in 0..group.len() {
                        queue.waiting.pop_front();
                    }
                    drop(queue);
                }
                self.end_turn(self.lock(), true);
                std::panic::resume_unwind(panic)
            }
        }
    }
}

/// Executes one writer's work as a leader with no group; returns the last seqno written.
fn lead_alone<L: Leader>(leader: &L, work: Work<L>, sync: bool) -> Result<SeqNo> {
    match work {
        Work::Exclusive(work) => work(leader),
        Work::Batch(ops, _) => {
            let refs: Vec<&BatchOp> = ops.iter().collect();
            let first = leader.write_ops(&refs, sync)?;
            Ok(first + ops.len() as u64 - 1)
        }
    }
}

/// Executes a group as its leader and stores every member's result.
fn lead<L: Leader>(leader: &L, group: &[Arc<Pending<L>>]) {
    let mut all = Vec::with_capacity(group.len());
    for pending in group {
        match pending.take_work() {
            // `take_group` serves an exclusive entry alone.
            Some(Work::Exclusive(work)) => return pending.finish(work(leader)),
            Some(Work::Batch(ops, _)) => all.push((Arc::clone(pending), ops)),
            None => {}
        }
    }
    // A batch naming a family the database lacks fails alone, not with its group.
    all.retain(|(pending, ops)| match leader.unknown_family(ops) {
        Some(cf) => {
            pending.finish(Err(Error::ColumnFamilyNotFound(format!("id {cf}"))));
            false
        }
        None => true,
    });
    if all.is_empty() {
        return;
    }
    let sync = all.iter().any(|(p, _)| p.sync);
    let refs: Vec<&BatchOp> = all.iter().flat_map(|(_, ops)| ops.iter()).collect();
    let result = leader.write_ops(&refs, sync);
    let mut next = match &result {
        Ok(first_seqno) => *first_seqno,
        Err(_) => 0,
    };
    for (pending, ops) in &all {
        next += ops.len() as u64;
        pending.finish(match &result {
            Ok(_) => Ok(next - 1),
            Err(e) => Err(e.duplicate()),
        });
    }
}

/// The queued writers a leader serves: itself, then batches behind it while the group stays
/// within the byte limit (so a group never grows past what one log record may hold: a batch
/// near that limit always leads alone). An exclusive entry is always served alone, and a sync
/// write never joins a group whose leader does not sync (so a non-sync leader never pays for a
/// sync it did not ask for... nor delays it). A batch holding range deletes is served alone too.
fn take_group<L>(queue: &VecDeque<Arc<Pending<L>>>) -> Vec<Arc<Pending<L>>> {
    let Some(leader) = queue.front() else {
        return Vec::new();
    };
    let mut group = vec![Arc::clone(leader)];
    if leader.is_exclusive() || leader.range_deletes {
        return group;
    }
    let mut bytes = leader.bytes();
    for pending in queue.iter().skip(1) {
        bytes += pending.bytes();
        if pending.is_exclusive()
            || pending.range_deletes
            || (pending.sync && !leader.sync)
            || bytes > MAX_GROUP_BYTES
        {
            break;
        }
        group.push(Arc::clone(pending));
    }
    group
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

    use bytes::Bytes;

    use super::*;

    /// A leader that counts the writes it leads and blocks them while `hold` is set.
    #[derive(Default)]
    struct Fake {
        hold: AtomicBool,
        next_seqno: AtomicU64,
        most_waiting: AtomicUsize,
        queue: WriteQueue<Fake>,
    }

    impl Leader for Fake {
        fn write_ops(&self, ops: &[&BatchOp], _sync: bool) -> Result<SeqNo> {
            while self.hold.load(Ordering::Acquire) {
                let waiting = self.queue.lock().waiting.len();
                self.most_waiting.fetch_max(waiting, Ordering::AcqRel);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Ok(self
                .next_seqno
                .fetch_add(ops.len() as u64, Ordering::AcqRel)
                + 1)
        }

        fn unknown_family(&self, _ops: &[BatchOp]) -> Option<u32> {
            None
        }

        fn stop_with(&self, _error: &Error) {}
    }

    fn put() -> Work<Fake> {
        let op = BatchOp::Put {
            cf: 0,
            key: Bytes::from_static(b"k"),
            value: Bytes::new(),
            ttl: None,
        };
        let bytes = op.approximate_bytes();
        Work::Batch(vec![op], bytes)
    }

    fn queued(range_deletes: bool) -> Arc<Pending<Fake>> {
        Arc::new(Pending {
            work: Mutex::new(Some(put())),
            sync: false,
            range_deletes,
            result: Mutex::new(None),
        })
    }

    #[test]
    fn a_batch_with_range_deletes_is_served_alone() {
        let plain = || queued(false);
        let ranged = || queued(true);
        let sizes = |queue: Vec<Arc<Pending<Fake>>>| take_group(&VecDeque::from(queue)).len();
        assert_eq!(sizes(vec![plain(), plain(), plain()]), 3);
        assert_eq!(sizes(vec![ranged(), plain(), plain()]), 1, "it leads alone");
        assert_eq!(
            sizes(vec![plain(), plain(), ranged(), plain()]),
            2,
            "it joins no group"
        );
    }

    #[test]
    fn writers_beyond_the_bound_wait_outside_the_queue_and_all_finish() {
        for bound in [1, 4] {
            writers_beyond(bound);
        }
    }

    fn writers_beyond(bound: usize) {
        let fake = Fake {
            queue: WriteQueue::with_max_waiting(bound),
            ..Fake::default()
        };
        fake.hold.store(true, Ordering::Release);
        let seqnos = std::thread::scope(|s| {
            let writers: Vec<_> = (0..32)
                .map(|_| s.spawn(|| fake.queue.submit(&fake, put(), false)))
                .collect();
            // Every writer has arrived: one leads (held), the rest wait in or outside the queue.
            std::thread::sleep(std::time::Duration::from_millis(200));
            fake.hold.store(false, Ordering::Release);
            writers
                .into_iter()
                .map(|w| w.join().expect("writer").expect("write"))
                .collect::<Vec<_>>()
        });
        let most = fake.most_waiting.load(Ordering::Acquire);
        assert!(
            most <= bound,
            "{most} writers waited in a queue bounded at {bound}"
        );
        assert!(
            most >= 1,
            "nobody queued behind the held leader: the test saw nothing"
        );
        let mut sorted = seqnos.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            32,
            "every writer got its own sequence number: {seqnos:?}"
        );
    }
}
