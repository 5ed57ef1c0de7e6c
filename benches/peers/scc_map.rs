//! An `scc::HashMap` tracker: the DashMap peer's design on the other concurrent map a Rust
//! developer would reach for, the one built for contention.
//!
//! `scc::HashMap<u64, Entry>` is one resizable array of small buckets (32 entries each, an
//! overflow list beyond), each with its own read-write lock, instead of DashMap's handful of
//! locked shards; resizing is incremental and never blocks other threads. So it is the
//! strongest off-the-shelf answer to "just use a concurrent map", and it belongs beside
//! DashMap so that the comparison is not against the slowest map at hand.
//!
//! The tracker mirrors [`super::dash`] line for line, so the two differ only in the map:
//! `Entry { val, payload, failed, deadline }`, and every operation is one `entry_sync()`
//! call, which holds the root's bucket lock until the entry is dropped. The XOR, the check
//! for 0 and `remove_entry` happen under that one lock; `update_sync` followed by a separate
//! `remove_if_sync` would take it twice and race exactly as DashMap's `and_modify` + `remove`
//! would (two acks both seeing 0, or an ack between the XOR and the removal).
//!
//! The deadline is fixed at the first message (`now + timeout`), as the Acker's; the start
//! time for `elapsed` is `deadline - timeout`, so the entry needs no fourth word.
//!
//! Timeouts: as DashMap's, a sweeper thread runs every `timeout / 10` (at least 1 ms, at most
//! 1 s) and `retain_sync`s the map, locking one bucket at a time, dropping due entries and
//! delivering the initialized ones `TimedOut` after the scan, outside every lock (the sink is
//! user code). A tree times out at most a tenth of its timeout (and never more than 1 s)
//! late, and a scan is O(pending), as DashMap's.
//!
//! The map starts empty (`with_hasher`, like the DashMap peer) and grows as needed: neither
//! unbounded peer is given a size hint the other lacks.

use std::sync::Arc;
use std::time::Duration;

use ackwheel::{Completion, InitError, Outcome};
use scc::hash_map::Entry as Slot;
use scc::HashMap;

use super::{elapsed, is_due, now, Sink, Ticker, Tracker, U64Hasher};

#[derive(Clone, Copy, Debug)]
struct Entry {
    val: u64,
    /// `Some` once init has been seen.
    payload: Option<u32>,
    failed: bool,
    /// First message + timeout, ns since the tracker's epoch.
    deadline: u64,
}

struct Shared {
    map: HashMap<u64, Entry, U64Hasher>,
    sink: Sink,
    timeout: u64,
}

impl Shared {
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
        // `retain_sync` visits every entry present when it starts under its bucket's lock, so
        // a root cannot be acked between the deadline check and its removal. An entry may be
        // visited twice if a concurrent resize moves it, but only kept entries can be: a
        // removed one is gone, so no tree is delivered twice.
        self.map.retain_sync(|root, entry| {
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

/// The `scc::HashMap` peer. See the module docs.
pub(crate) struct SccTracker {
    shared: Arc<Shared>,
    _sweeper: Ticker,
}

impl Tracker for SccTracker {
    fn build(timeout: Duration, _pending: usize, sink: Sink) -> Self {
        let shared = Arc::new(Shared {
            map: HashMap::with_hasher(U64Hasher(0)),
            sink,
            timeout: timeout.as_nanos() as u64,
        });
        let sweeping = Arc::clone(&shared);
        let period = (timeout / 10).clamp(Duration::from_millis(1), Duration::from_secs(1));
        SccTracker {
            shared,
            _sweeper: Ticker::spawn("scc-sweep", period, move || sweeping.sweep()),
        }
    }

    fn init(&self, root: u64, xor: u64, payload: u32) -> Result<(), InitError<u32>> {
        let s = &*self.shared;
        let now = now();
        let (entry, outcome) = match s.map.entry_sync(root) {
            Slot::Vacant(slot) => {
                let entry = Entry {
                    val: xor,
                    payload: Some(payload),
                    failed: false,
                    deadline: now.wrapping_add(s.timeout),
                };
                if xor != 0 {
                    // The returned `OccupiedEntry` holds the bucket lock; dropping it here
                    // releases the lock before returning.
                    slot.insert_entry(entry);
                    return Ok(());
                }
                (entry, Outcome::Acked) // a tree without edges is done at once
            }
            Slot::Occupied(mut slot) => {
                let entry = slot.get_mut();
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
                (slot.remove_entry().1, outcome)
            }
        };
        // Delivered after the entry (and so the bucket lock) is gone, as the DashMap peer.
        s.deliver(root, &entry, outcome);
        Ok(())
    }

    fn ack(&self, root: u64, xor: u64) -> bool {
        let s = &*self.shared;
        let entry = match s.map.entry_sync(root) {
            Slot::Occupied(mut slot) => {
                let entry = slot.get_mut();
                entry.val ^= xor;
                if entry.val != 0 || entry.payload.is_none() {
                    return false;
                }
                slot.remove_entry().1
            }
            Slot::Vacant(slot) => {
                slot.insert_entry(s.orphan(now(), xor, false));
                return false;
            }
        };
        s.deliver(root, &entry, Outcome::Acked);
        true
    }

    fn fail(&self, root: u64) -> bool {
        let s = &*self.shared;
        let entry = match s.map.entry_sync(root) {
            Slot::Occupied(mut slot) => {
                let entry = slot.get_mut();
                entry.failed = true;
                if entry.payload.is_none() {
                    return false; // held until init
                }
                slot.remove_entry().1
            }
            Slot::Vacant(slot) => {
                slot.insert_entry(s.orphan(now(), 0, true));
                return false;
            }
        };
        s.deliver(root, &entry, Outcome::Failed);
        true
    }
}
