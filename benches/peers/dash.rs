//! A DashMap tracker: what a Rust developer would write first with the usual concurrent map.
//!
//! `DashMap<u64, Entry>` (sharded `RwLock<HashMap>`s, default shard count: 4 x cores) with
//! `Entry { val, payload, failed, deadline }`. Every operation is one `entry()` call, so the
//! read-modify-write of a root (XOR, check for 0, remove) happens under that root's shard
//! lock in one go: `entry().and_modify(..)` followed by a separate `remove` would take the
//! lock twice and race (two acks could both see 0, or an ack could slip between the XOR and
//! the removal), so the bench uses the `Entry::Occupied` / `Entry::Vacant` form of the same
//! API, which does the XOR, the zero check and `remove_entry` under one lock.
//!
//! The deadline is fixed at the first message (`now + timeout`), as the Acker's; the start
//! time for `elapsed` is `deadline - timeout`, so the entry needs no fourth word.
//!
//! Timeouts: a sweeper thread runs every `timeout / 10` (at least 1 ms, at most 1 s) and
//! `retain`s the map, taking each shard's write lock in turn, dropping due entries and
//! delivering the initialized ones `TimedOut` after the scan. So a tree times out at most a
//! tenth of its timeout (and never more than 1 s) late; a scan is O(pending), which is why it
//! cannot run at the Acker's 1 ms resolution without costing a core at 1M pending.

use std::sync::Arc;
use std::time::Duration;

use ackwheel::{Completion, InitError, Outcome};
use dashmap::mapref::entry::Entry as Slot;
use dashmap::DashMap;

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
    map: DashMap<u64, Entry, U64Hasher>,
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
        self.map.retain(|root, entry| {
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

/// The DashMap peer. See the module docs.
pub(crate) struct DashTracker {
    shared: Arc<Shared>,
    _sweeper: Ticker,
}

impl Tracker for DashTracker {
    fn build(timeout: Duration, _pending: usize, sink: Sink) -> Self {
        let shared = Arc::new(Shared {
            map: DashMap::with_hasher(U64Hasher(0)),
            sink,
            timeout: timeout.as_nanos() as u64,
        });
        let sweeping = Arc::clone(&shared);
        let period = (timeout / 10).clamp(Duration::from_millis(1), Duration::from_secs(1));
        DashTracker {
            shared,
            _sweeper: Ticker::spawn("dashmap-sweep", period, move || sweeping.sweep()),
        }
    }

    fn init(&self, root: u64, xor: u64, payload: u32) -> Result<(), InitError<u32>> {
        let s = &*self.shared;
        let now = now();
        let (entry, outcome) = match s.map.entry(root) {
            Slot::Vacant(slot) => {
                let entry = Entry {
                    val: xor,
                    payload: Some(payload),
                    failed: false,
                    deadline: now.wrapping_add(s.timeout),
                };
                if xor != 0 {
                    slot.insert(entry);
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
        s.deliver(root, &entry, outcome);
        Ok(())
    }

    fn ack(&self, root: u64, xor: u64) -> bool {
        let s = &*self.shared;
        let entry = match s.map.entry(root) {
            Slot::Occupied(mut slot) => {
                let entry = slot.get_mut();
                entry.val ^= xor;
                if entry.val != 0 || entry.payload.is_none() {
                    return false;
                }
                slot.remove_entry().1
            }
            Slot::Vacant(slot) => {
                slot.insert(s.orphan(now(), xor, false));
                return false;
            }
        };
        s.deliver(root, &entry, Outcome::Acked);
        true
    }

    fn fail(&self, root: u64) -> bool {
        let s = &*self.shared;
        let entry = match s.map.entry(root) {
            Slot::Occupied(mut slot) => {
                let entry = slot.get_mut();
                entry.failed = true;
                if entry.payload.is_none() {
                    return false; // held until init
                }
                slot.remove_entry().1
            }
            Slot::Vacant(slot) => {
                slot.insert(s.orphan(now(), 0, true));
                return false;
            }
        };
        s.deliver(root, &entry, Outcome::Failed);
        true
    }
}
