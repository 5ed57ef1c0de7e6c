//! A moka tracker: `moka::sync::Cache<u64, Entry>` with `time_to_live` and an
//! `eviction_listener`, the Caffeine-style cache a Rust developer would reach for to get
//! expiry with notification.
//!
//! Every operation is one `entry(root).and_compute_with(..)`, which moka runs under a
//! per-key lock (its documented guarantee: compute calls on one key are serialized), so the
//! XOR, the zero check and the removal of a root are atomic: `Op::Put` stores the new value,
//! `Op::Remove` removes the completed tree and hands it back as `CompResult::Removed`, and the
//! completing thread delivers it, as the Acker does. `get` + `insert` would race.
//!
//! Timeouts: entries expire `time_to_live` after their last write; the eviction listener gets
//! `RemovalCause::Expired` and delivers initialized trees `TimedOut` (orphans are dropped).
//! Completions removed by `Op::Remove` reach the listener as `Explicit` and are ignored there
//! (the compute caller already delivered them), and every `Op::Put` update reaches it as
//! `Replaced`, also ignored: that per-update notification is part of what a listener costs in
//! moka. moka 0.12 has no background threads and runs its housekeeping (and so the listener)
//! only from cache calls, so, as moka's maintainer advises (moka-rs/moka#379), a thread calls
//! `run_pending_tasks` every 100 ms so a timed-out tree is reported even when the cache is
//! otherwise idle.
//!
//! Semantic difference, kept on purpose: moka's TTL counts from an entry's last write, so
//! every ack (an `Op::Put`) restarts the tree's timeout, where the Acker's deadline is fixed
//! at the first message. Getting the Acker's behaviour needs a per-entry `Expiry` policy
//! (moka's own timer wheel), which is slower than plain TTL; the bench gives moka the
//! cheaper configuration. No tree in the measured workload times out, so the results do not
//! depend on it. `max_capacity` is left unbounded (no size eviction), as the other peers.

use std::sync::Arc;
use std::time::Duration;

use ackwheel::{Completion, InitError, Outcome};
use moka::notification::RemovalCause;
use moka::ops::compute::{CompResult, Op};
use moka::sync::Cache;

use super::{elapsed, now, Sink, Ticker, Tracker, U64Hasher};

#[derive(Clone, Copy, Debug)]
struct Entry {
    val: u64,
    /// `Some` once init has been seen.
    payload: Option<u32>,
    failed: bool,
    /// First message, ns since the tracker's epoch (for `elapsed`).
    start: u64,
}

struct Shared {
    sink: Sink,
}

impl Shared {
    fn deliver(&self, root: u64, entry: &Entry, outcome: Outcome) {
        let payload = entry.payload.expect("only initialized trees complete");
        (self.sink)(Completion {
            root,
            payload,
            outcome,
            elapsed: elapsed(entry.start, now()),
        });
    }

    /// Delivers `outcome` for the tree an ack or a fail removed; `true` iff there was one.
    fn deliver_if_removed(
        &self,
        root: u64,
        result: CompResult<u64, Entry>,
        outcome: Outcome,
    ) -> bool {
        match result {
            CompResult::Removed(removed) => {
                self.deliver(root, &removed.into_value(), outcome);
                true
            }
            _ => false,
        }
    }
}

/// The moka peer. See the module docs.
pub(crate) struct MokaTracker {
    cache: Cache<u64, Entry, U64Hasher>,
    shared: Arc<Shared>,
    _housekeeper: Ticker,
}

impl MokaTracker {
    /// The outcome a held state calls for once init has been seen (Acked wins).
    fn settled(entry: &Entry) -> Option<Outcome> {
        match entry.payload {
            Some(_) if entry.val == 0 => Some(Outcome::Acked),
            Some(_) if entry.failed => Some(Outcome::Failed),
            _ => None,
        }
    }

    fn orphan(&self, val: u64, failed: bool) -> Entry {
        Entry {
            val,
            payload: None,
            failed,
            start: now(),
        }
    }
}

impl Tracker for MokaTracker {
    fn build(timeout: Duration, _pending: usize, sink: Sink) -> Self {
        let shared = Arc::new(Shared { sink });
        let listening = Arc::clone(&shared);
        let cache = Cache::builder()
            .time_to_live(timeout)
            .eviction_listener(move |root: Arc<u64>, entry: Entry, cause| {
                if cause == RemovalCause::Expired && entry.payload.is_some() {
                    listening.deliver(*root, &entry, Outcome::TimedOut);
                }
            })
            .build_with_hasher(U64Hasher(0));
        let housekeeping = cache.clone();
        MokaTracker {
            cache,
            shared,
            _housekeeper: Ticker::spawn(
                "moka-housekeeping",
                Duration::from_millis(100),
                move || housekeeping.run_pending_tasks(),
            ),
        }
    }

    fn init(&self, root: u64, xor: u64, payload: u32) -> Result<(), InitError<u32>> {
        let mut duplicate = false;
        let result = self.cache.entry(root).and_compute_with(|current| {
            let mut entry = match current {
                Some(current) => current.into_value(),
                None => self.orphan(0, false),
            };
            if entry.payload.is_some() {
                duplicate = true;
                return Op::Nop;
            }
            entry.val ^= xor;
            entry.payload = Some(payload);
            match Self::settled(&entry) {
                Some(_) => Op::Remove,
                None => Op::Put(entry),
            }
        });
        if duplicate {
            return Err(InitError::Duplicate(payload));
        }
        match result {
            // The removed value is the one stored before this init: the orphan's.
            CompResult::Removed(removed) => {
                let mut entry = removed.into_value();
                entry.val ^= xor;
                entry.payload = Some(payload);
                let outcome = Self::settled(&entry).expect("removed because settled");
                self.shared.deliver(root, &entry, outcome);
            }
            // A fresh tree whose init XOR is 0 (no edges): Remove on an absent key.
            CompResult::StillNone(_) => {
                let mut entry = self.orphan(xor, false);
                entry.payload = Some(payload);
                self.shared.deliver(root, &entry, Outcome::Acked);
            }
            _ => {}
        }
        Ok(())
    }

    fn ack(&self, root: u64, xor: u64) -> bool {
        let result = self
            .cache
            .entry(root)
            .and_compute_with(|current| match current {
                Some(current) => {
                    let mut entry = current.into_value();
                    entry.val ^= xor;
                    if entry.val == 0 && entry.payload.is_some() {
                        Op::Remove
                    } else {
                        Op::Put(entry)
                    }
                }
                None => Op::Put(self.orphan(xor, false)),
            });
        self.shared.deliver_if_removed(root, result, Outcome::Acked)
    }

    fn fail(&self, root: u64) -> bool {
        let result = self
            .cache
            .entry(root)
            .and_compute_with(|current| match current {
                Some(current) => {
                    let mut entry = current.into_value();
                    if entry.payload.is_some() {
                        Op::Remove
                    } else {
                        entry.failed = true;
                        Op::Put(entry) // held until init
                    }
                }
                None => Op::Put(self.orphan(0, true)),
            });
        self.shared
            .deliver_if_removed(root, result, Outcome::Failed)
    }
}
