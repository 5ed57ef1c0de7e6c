//! DashMap plus timer wheels: the peer a Rust developer builds when the sweep of the plain
//! DashMap peer ([`super::dash`]) costs too much at scale, with this crate's own
//! [`TimerWheel`] standing in for any hierarchical wheel (tokio-util's `DelayQueue` is the
//! same structure behind an async face).
//!
//! `DashMap<u64, Entry>` (default shard count, the bench's hasher) holds each root's value,
//! payload, held fail, start time and the [`TimerKey`] of its timeout; beside it one
//! `Mutex<TimerWheel<u64>>` per shard (4 x cores, chosen by the root's hash) holds the
//! roots' deadlines. The entry's first message schedules its timer (under the map's entry
//! lock, so the key is stored before anyone can complete the entry); a completion removes
//! the entry under that lock and then cancels the timer. A ticker thread advances every
//! wheel every millisecond and, for each timer that fired, removes the root's entry if it
//! still holds that very key (a later entry of the same root has another), delivering an
//! initialized tree `TimedOut` and dropping an orphan silently. A timer cancelled after it
//! fired is a stale key: a no-op.
//!
//! Lock order: an entry's lock, then a wheel's; the ticker never holds a wheel's lock while
//! it takes an entry's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackwheel::{Completion, InitError, Outcome, TimerKey, TimerWheel};
use dashmap::mapref::entry::Entry as DashEntry;
use dashmap::DashMap;

use super::{elapsed, now, Sink, Ticker, Tracker, U64Hasher};

/// A root's state in the map.
#[derive(Clone, Copy, Debug)]
struct Entry {
    val: u64,
    /// `Some` once init has been seen.
    payload: Option<u32>,
    failed: bool,
    /// The first message's time, for `elapsed`.
    start: u64,
    /// The root's timeout in its wheel.
    timer: TimerKey,
}

struct Shared {
    map: DashMap<u64, Entry, U64Hasher>,
    wheels: Box<[Mutex<TimerWheel<u64>>]>,
    sink: Sink,
    timeout: u64,
}

impl Shared {
    fn wheel(&self, root: u64) -> &Mutex<TimerWheel<u64>> {
        // The top bits of the hash: DashMap picks its shard from the top bits too, so roots
        // of one map shard share a wheel.
        let hash = root.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.wheels[(hash >> 32) as usize % self.wheels.len()]
    }

    fn schedule(&self, root: u64, now: u64) -> TimerKey {
        let mut wheel = self.wheel(root).lock().unwrap();
        wheel.schedule(now.wrapping_add(self.timeout), root)
    }

    fn cancel(&self, root: u64, timer: TimerKey) {
        self.wheel(root).lock().unwrap().cancel(timer);
    }

    fn deliver(&self, root: u64, entry: &Entry, outcome: Outcome) {
        let payload = entry.payload.expect("only initialized trees complete");
        (self.sink)(Completion {
            root,
            payload,
            outcome,
            elapsed: elapsed(entry.start, now()),
        });
    }

    /// A completed entry, removed from the map: its timer is cancelled, its completion
    /// delivered (both outside the entry's lock).
    fn complete(&self, root: u64, entry: Entry, outcome: Outcome) {
        self.cancel(root, entry.timer);
        self.deliver(root, &entry, outcome);
    }

    fn new_entry(
        &self,
        root: u64,
        now: u64,
        val: u64,
        payload: Option<u32>,
        failed: bool,
    ) -> Entry {
        Entry {
            val,
            payload,
            failed,
            start: now,
            timer: self.schedule(root, now),
        }
    }

    fn tick(&self) {
        let now = now();
        let mut fired = Vec::new();
        for wheel in self.wheels.iter() {
            let mut wheel = wheel.lock().unwrap();
            fired.extend(wheel.advance(now).map(|e| (e.value, e.key)));
        }
        for (root, timer) in fired {
            let DashEntry::Occupied(slot) = self.map.entry(root) else {
                continue; // completed in the meantime
            };
            if slot.get().timer != timer {
                continue; // a later entry of the same root
            }
            let (_, entry) = slot.remove_entry();
            if entry.payload.is_some() {
                self.deliver(root, &entry, Outcome::TimedOut);
            }
        }
    }
}

/// The DashMap + timer wheels peer. See the module docs.
pub(crate) struct DashWheelTracker {
    shared: Arc<Shared>,
    _ticker: Ticker,
}

impl Tracker for DashWheelTracker {
    fn build(timeout: Duration, _pending: usize, sink: Sink) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let start = now();
        let shared = Arc::new(Shared {
            map: DashMap::with_hasher(U64Hasher(0)),
            wheels: (0..4 * cores)
                .map(|_| Mutex::new(TimerWheel::with_resolution(start, Duration::from_millis(1))))
                .collect(),
            sink,
            timeout: timeout.as_nanos() as u64,
        });
        let ticking = Arc::clone(&shared);
        DashWheelTracker {
            shared,
            _ticker: Ticker::spawn("dashmap-wheel", Duration::from_millis(1), move || {
                ticking.tick()
            }),
        }
    }

    fn init(&self, root: u64, xor: u64, payload: u32) -> Result<(), InitError<u32>> {
        let s = &*self.shared;
        let (entry, outcome) = match s.map.entry(root) {
            DashEntry::Vacant(slot) => {
                if xor == 0 {
                    // A tree without edges is done at once: no timer.
                    let now = now();
                    (s.sink)(Completion {
                        root,
                        payload,
                        outcome: Outcome::Acked,
                        elapsed: elapsed(now, now),
                    });
                    return Ok(());
                }
                slot.insert(s.new_entry(root, now(), xor, Some(payload), false));
                return Ok(());
            }
            DashEntry::Occupied(mut slot) => {
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
        s.complete(root, entry, outcome);
        Ok(())
    }

    fn ack(&self, root: u64, xor: u64) -> bool {
        let s = &*self.shared;
        let entry = match s.map.entry(root) {
            DashEntry::Occupied(mut slot) => {
                let entry = slot.get_mut();
                entry.val ^= xor;
                if entry.val != 0 || entry.payload.is_none() {
                    return false;
                }
                slot.remove_entry().1
            }
            DashEntry::Vacant(slot) => {
                slot.insert(s.new_entry(root, now(), xor, None, false));
                return false;
            }
        };
        s.complete(root, entry, Outcome::Acked);
        true
    }

    fn fail(&self, root: u64) -> bool {
        let s = &*self.shared;
        let entry = match s.map.entry(root) {
            DashEntry::Occupied(mut slot) => {
                let entry = slot.get_mut();
                entry.failed = true;
                if entry.payload.is_none() {
                    return false; // held until init
                }
                slot.remove_entry().1
            }
            DashEntry::Vacant(slot) => {
                slot.insert(s.new_entry(root, now(), 0, None, true));
                return false;
            }
        };
        s.complete(root, entry, Outcome::Failed);
        true
    }

    const PER_TREE_TIMEOUT: bool = false;
}
