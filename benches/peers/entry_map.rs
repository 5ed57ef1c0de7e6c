//! The tracker shared by the concurrent-map peers ([`super::dash`], [`super::scc_map`]): a
//! map from root to [`Entry`] whose every operation locks the root's entry once.
//!
//! `Entry { val, payload, failed, deadline }`. Every operation is one [`EntryMap::lock`]
//! call, which finds the root's entry (or the place it would go) and holds the map's lock on
//! it until the returned [`Slot`] is consumed or dropped, so the read-modify-write of a root
//! (XOR, check for 0, remove) happens under one lock in one go. Taking the lock twice (modify,
//! then a separate remove) would race: two acks could both see 0, or an ack could slip between
//! the XOR and the removal. Completions are delivered after the slot, and so the lock, is gone
//! (the sink is user code).
//!
//! The deadline is fixed at the first message (`now + timeout`), as the Acker's; the start
//! time for `elapsed` is `deadline - timeout`, so the entry needs no fourth word.
//!
//! Timeouts: a sweeper thread runs every `timeout / 10` (at least 1 ms, at most 1 s) and
//! retains the map ([`EntryMap::retain_each`]), dropping due entries and delivering the
//! initialized ones `TimedOut` after the scan, outside every lock. So a tree times out at most
//! a tenth of its timeout (and never more than 1 s) late; a scan is O(pending).
//!
//! The tracker is generic over the map, so each peer compiles to its own code with the map's
//! calls inlined, as if written out by hand for that map.

use std::sync::Arc;
use std::time::Duration;

use ackwheel::{Completion, InitError, Outcome};

use super::{elapsed, is_due, now, Sink, Ticker, Tracker};

/// A root's state in the map.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    val: u64,
    /// `Some` once init has been seen.
    payload: Option<u32>,
    failed: bool,
    /// First message + timeout, ns since the tracker's epoch.
    deadline: u64,
}

/// A root's place in the map, locked until this (or what it is turned into) is dropped.
pub(crate) enum Slot<O, V> {
    /// The root has an entry.
    Occupied(O),
    /// The root has none; the lock is on the place it would go.
    Vacant(V),
}

/// A locked entry that is present.
pub(crate) trait OccupiedSlot {
    /// The entry, to change in place under the lock.
    fn entry_mut(&mut self) -> &mut Entry;
    /// Removes the entry, releasing the lock, and returns it.
    fn take(self) -> Entry;
}

/// A locked place with no entry.
pub(crate) trait VacantSlot {
    /// Inserts `entry` there and releases the lock.
    fn put(self, entry: Entry);
}

/// What a concurrent map provides to be a peer: one locked entry operation, and a sweep.
pub(crate) trait EntryMap: Send + Sync + 'static {
    /// The sweeper thread's name.
    const SWEEPER: &'static str;

    /// See [`Slot::Occupied`].
    type Occupied<'a>: OccupiedSlot
    where
        Self: 'a;
    /// See [`Slot::Vacant`].
    type Vacant<'a>: VacantSlot
    where
        Self: 'a;

    /// An empty map (no size hint: the peers grow as needed).
    fn empty() -> Self;
    /// Locks `root`'s entry, or the place it would go: one lock per message.
    fn lock(&self, root: u64) -> Slot<Self::Occupied<'_>, Self::Vacant<'_>>;
    /// Visits every entry under its lock, removing those for which `keep` is false.
    fn retain_each(&self, keep: impl FnMut(&u64, &mut Entry) -> bool);
}

struct Shared<M> {
    map: M,
    sink: Sink,
    timeout: u64,
}

impl<M: EntryMap> Shared<M> {
    fn deliver(&self, root: u64, entry: &Entry, outcome: Outcome) {
        let payload = entry.payload.expect("only initialized trees complete");
        let start = entry.deadline.wrapping_sub(self.timeout);
        (self.sink)(Completion {
            root,
            payload,
            outcome,
            elapsed: elapsed(start, now()),
        });
    }

    fn orphan(&self, now: u64, val: u64, failed: bool) -> Entry {
        Entry {
            val,
            payload: None,
            failed,
            deadline: now.wrapping_add(self.timeout),
        }
    }

    fn sweep(&self) {
        let now = now();
        let mut expired = Vec::new();
        self.map.retain_each(|root, entry| {
            if !is_due(entry.deadline, now) {
                return true;
            }
            if entry.payload.is_some() {
                expired.push((*root, *entry));
            }
            false // orphans are dropped silently
        });
        for (root, entry) in &expired {
            self.deliver(*root, entry, Outcome::TimedOut);
        }
    }
}

/// A peer: the tracker over the map `M`. See the module docs.
pub(crate) struct EntryMapTracker<M> {
    shared: Arc<Shared<M>>,
    _sweeper: Ticker,
}

impl<M: EntryMap> Tracker for EntryMapTracker<M> {
    fn build(timeout: Duration, _pending: usize, sink: Sink) -> Self {
        let shared = Arc::new(Shared {
            map: M::empty(),
            sink,
            timeout: timeout.as_nanos() as u64,
        });
        let sweeping = Arc::clone(&shared);
        let period = (timeout / 10).clamp(Duration::from_millis(1), Duration::from_secs(1));
        EntryMapTracker {
            shared,
            _sweeper: Ticker::spawn(M::SWEEPER, period, move || sweeping.sweep()),
        }
    }

    fn init(&self, root: u64, xor: u64, payload: u32) -> Result<(), InitError<u32>> {
        let s = &*self.shared;
        let now = now();
        let (entry, outcome) = match s.map.lock(root) {
            Slot::Vacant(slot) => {
                let entry = Entry {
                    val: xor,
                    payload: Some(payload),
                    failed: false,
                    deadline: now.wrapping_add(s.timeout),
                };
                if xor != 0 {
                    slot.put(entry);
                    return Ok(());
                }
                (entry, Outcome::Acked) // a tree without edges is done at once
            }
            Slot::Occupied(mut slot) => {
                let entry = slot.entry_mut();
                if entry.payload.is_some() {
                    return Err(InitError::Duplicate(payload));
                }
                entry.val ^= xor;
                entry.payload = Some(payload);
                let outcome = if entry.val == 0 {
                    Outcome::Acked
                } else if entry.failed {
                    Outcome::Failed
                } else {
                    return Ok(());
                };
                (slot.take(), outcome)
            }
        };
        // Delivered after the slot (and so the lock) is gone.
        s.deliver(root, &entry, outcome);
        Ok(())
    }

    fn ack(&self, root: u64, xor: u64) -> bool {
        let s = &*self.shared;
        let entry = match s.map.lock(root) {
            Slot::Occupied(mut slot) => {
                let entry = slot.entry_mut();
                entry.val ^= xor;
                if entry.val != 0 || entry.payload.is_none() {
                    return false;
                }
                slot.take()
            }
            Slot::Vacant(slot) => {
                slot.put(s.orphan(now(), xor, false));
                return false;
            }
        };
        s.deliver(root, &entry, Outcome::Acked);
        true
    }

    fn fail(&self, root: u64) -> bool {
        let s = &*self.shared;
        let entry = match s.map.lock(root) {
            Slot::Occupied(mut slot) => {
                let entry = slot.entry_mut();
                entry.failed = true;
                if entry.payload.is_none() {
                    return false; // held until init
                }
                slot.take()
            }
            Slot::Vacant(slot) => {
                slot.put(s.orphan(now(), 0, true));
                return false;
            }
        };
        s.deliver(root, &entry, Outcome::Failed);
        true
    }
}
