//! Storm's acker, ported: one `Mutex` around a rotating map of `AckObject`s.
//!
//! Storm's `Acker` bolt (storm-client `org.apache.storm.daemon.Acker`) keeps
//! `RotatingMap<Object, AckObject> pending` and handles one tuple at a time in `execute`:
//!
//! ```text
//! tick tuple           -> pending.rotate()          (the dropped bucket = timed-out trees)
//! ACKER_INIT(id, x, t) -> curr = pending.get(id); if null { curr = new; pending.put(id, curr) }
//!                         curr.updateAck(x); curr.spoutTask = t
//! ACKER_ACK(id, x)     -> same get-or-create; curr.updateAck(x)
//! ACKER_FAIL(id)       -> get-or-new; curr.failed = true; pending.put(id, curr)
//! then, if curr.spoutTask >= 0 (init seen) and (curr.val == 0 || curr.failed):
//!     pending.remove(id); emit ack (val == 0 wins) or fail to the spout, with the time
//!     since curr.startTime
//! ```
//!
//! The port keeps that shape exactly: [`AckObject`] is Storm's (`val`, `failed`, `startTime`,
//! and `spoutTask >= 0` as `payload: Some(_)`), objects are mutated in place in whichever
//! bucket holds them (Storm's `get` returns the live object; only creation and fail `put`),
//! buckets are searched newest to oldest, and completion removes the object. Storm's bolt is
//! single-threaded (one executor thread); to share it between threads, as the Acker is
//! shared, the port puts the whole `execute` under one `Mutex` — the natural port, and what
//! `RotatingMap`'s own lock would amount to anyway. Completions are delivered after the lock
//! is released (Storm emits inside `execute`; delivering outside only helps the port).
//!
//! Timeouts: Storm rotates on a tick tuple that arrives through the same queue as the acks,
//! so rotation is serialized with `execute`. Here a ticker thread takes the same lock and
//! rotates every `timeout / 2`, with 3 buckets (Storm's TimeCacheMap arithmetic: an entry
//! survives 2 rotations after its creation and is dropped by the 3rd, so it times out between
//! `timeout` and `1.5 x timeout` after its first message, never early). The dropped bucket is
//! handed out of the lock and its initialized trees are delivered `TimedOut`; orphans (no
//! init) are dropped silently. Storm's acker drops both silently and lets the spout's own
//! pending map time the tuple out; delivering from the acker gives the same semantics as the
//! other trackers.
//!
//! The one addition to Storm's logic: a second init of a pending root is refused
//! (`Duplicate`) instead of XORed in, as the Acker's contract requires.
//!
//! The bucket ring is local rather than `ackwheel::RotatingMap` because Storm mutates the
//! object in place, which needs `get_mut`; `RotatingMap::get` clones and `put` moves the key
//! to the newest bucket (which would also reset the tree's timeout on every ack).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackwheel::{Completion, InitError, Outcome};

use super::{elapsed, now, Sink, Ticker, Tracker, U64Hasher};

/// Storm's `TIMEOUT_BUCKET_NUM`-style ring size: 3 buckets rotated every timeout / 2.
const BUCKETS: usize = 3;

/// Storm's `Acker.AckObject`.
#[derive(Clone, Copy, Debug)]
struct AckObject {
    /// XOR of init and every ack.
    val: u64,
    /// Storm's `spoutTask` (-1 until init): `Some` once init has been seen.
    payload: Option<u32>,
    failed: bool,
    /// Storm's `startTime`: when the first message for the root arrived, ns.
    start: u64,
}

impl AckObject {
    fn new(start: u64) -> Self {
        AckObject {
            val: 0,
            payload: None,
            failed: false,
            start,
        }
    }
}

/// What `execute`'s tail decides for the object just updated.
enum Verdict {
    Keep,
    /// Storm's FAIL path re-`put`s the object (moving it to the newest bucket).
    KeepNewest,
    Complete(Outcome),
    Duplicate,
}

/// Storm's check after every message: init seen, then val == 0 wins over failed.
fn tail(obj: &AckObject) -> Verdict {
    match obj.payload {
        Some(_) if obj.val == 0 => Verdict::Complete(Outcome::Acked),
        Some(_) if obj.failed => Verdict::Complete(Outcome::Failed),
        _ => Verdict::Keep,
    }
}

type Bucket = HashMap<u64, AckObject, U64Hasher>;

/// Storm's `RotatingMap`: buckets newest first.
struct Pending {
    buckets: VecDeque<Bucket>,
}

impl Pending {
    fn new() -> Self {
        Pending {
            buckets: (0..BUCKETS)
                .map(|_| Bucket::with_hasher(U64Hasher(0)))
                .collect(),
        }
    }

    /// `execute` for one root: finds the live object newest bucket first (Storm's `get`),
    /// creating it in the newest bucket if absent (Storm's `new AckObject(); put`), applies
    /// `update`, and removes the object if the verdict completes it.
    fn execute(
        &mut self,
        id: u64,
        start: impl FnOnce() -> u64,
        update: impl FnOnce(&mut AckObject) -> Verdict,
    ) -> (Verdict, AckObject) {
        for index in 0..self.buckets.len() {
            if let Entry::Occupied(mut slot) = self.buckets[index].entry(id) {
                let verdict = update(slot.get_mut());
                let obj = *slot.get();
                match verdict {
                    Verdict::Complete(_) => {
                        slot.remove();
                    }
                    Verdict::KeepNewest if index != 0 => {
                        slot.remove();
                        self.buckets[0].insert(id, obj);
                    }
                    _ => {}
                }
                return (verdict, obj);
            }
        }
        let mut obj = AckObject::new(start());
        let verdict = update(&mut obj);
        if !matches!(verdict, Verdict::Complete(_)) {
            self.buckets[0].insert(id, obj);
        }
        (verdict, obj)
    }

    /// Storm's `rotate`: drop the oldest bucket, add an empty newest one.
    fn rotate(&mut self) -> Bucket {
        let dropped = self.buckets.pop_back().expect("BUCKETS >= 2");
        self.buckets.push_front(Bucket::with_hasher(U64Hasher(0)));
        dropped
    }
}

struct Shared {
    pending: Mutex<Pending>,
    sink: Sink,
}

impl Shared {
    fn deliver(&self, root: u64, obj: &AckObject, outcome: Outcome) {
        let payload = obj.payload.expect("only initialized trees complete");
        (self.sink)(Completion {
            root,
            payload,
            outcome,
            elapsed: elapsed(obj.start, now()),
        });
    }

    /// An ack or fail: `execute` under the lock, delivery outside it. `true` iff the
    /// message completed the tree with `outcome`.
    fn update(
        &self,
        root: u64,
        outcome: Outcome,
        update: impl FnOnce(&mut AckObject) -> Verdict,
    ) -> bool {
        let (verdict, obj) = self.pending.lock().unwrap().execute(root, now, update);
        match verdict {
            Verdict::Complete(done) => {
                self.deliver(root, &obj, done);
                done == outcome
            }
            _ => false,
        }
    }

    /// A tick: rotate under the lock, deliver the dropped trees outside it.
    fn tick(&self) {
        let dropped = self.pending.lock().unwrap().rotate();
        for (root, obj) in &dropped {
            if obj.payload.is_some() {
                self.deliver(*root, obj, Outcome::TimedOut);
            }
            // else: an orphan whose init never came; dropped silently.
        }
    }
}

/// The Storm-design peer. See the module docs.
pub(crate) struct StormAcker {
    shared: Arc<Shared>,
    _ticker: Ticker,
}

impl Tracker for StormAcker {
    fn build(timeout: Duration, _pending: usize, sink: Sink) -> Self {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::new()),
            sink,
        });
        let ticking = Arc::clone(&shared);
        let period = timeout / (BUCKETS as u32 - 1);
        StormAcker {
            shared,
            _ticker: Ticker::spawn("storm-tick", period, move || ticking.tick()),
        }
    }

    fn init(&self, root: u64, xor: u64, payload: u32) -> Result<(), InitError<u32>> {
        // Read before locking: most inits create their object (Storm reads the time in the
        // AckObject constructor, inside execute; hoisting it only shortens the lock).
        let now = now();
        let (verdict, obj) = self.shared.pending.lock().unwrap().execute(
            root,
            || now,
            |curr| {
                if curr.payload.is_some() {
                    return Verdict::Duplicate;
                }
                curr.val ^= xor; // updateAck
                curr.payload = Some(payload); // spoutTask = ...
                tail(curr)
            },
        );
        match verdict {
            Verdict::Duplicate => Err(InitError::Duplicate(payload)),
            Verdict::Complete(outcome) => {
                self.shared.deliver(root, &obj, outcome);
                Ok(())
            }
            Verdict::Keep | Verdict::KeepNewest => Ok(()),
        }
    }

    fn ack(&self, root: u64, xor: u64) -> bool {
        self.shared.update(root, Outcome::Acked, |curr| {
            curr.val ^= xor;
            tail(curr)
        })
    }

    fn fail(&self, root: u64) -> bool {
        self.shared.update(root, Outcome::Failed, |curr| {
            curr.failed = true;
            match tail(curr) {
                Verdict::Keep => Verdict::KeepNewest,
                other => other,
            }
        })
    }
}
