//! What each thread keeps per acker, and the protocols built on it.
//!
//! Every thread that operates on an acker has one record for it, a [`Record`], registered
//! in the acker's [`Threads`] and found again through a thread-local lookup: each thread
//! keeps its record for every acker it operated on (`LOCAL`), and the last one it used
//! (`LAST`) answers the common case, one acker on many calls, with one thread-local read.
//! Under loom, where the models pass records explicitly, nothing is per-thread. The record
//! serves three purposes, each with its own rules:
//!
//! * the marks of the thread's operations in progress ([`marks`]): shutdown's closing of
//!   the callback, the grace periods that retire tables and re-anchoring all wait on them;
//! * its hand of `max_pending` credits ([`bound`](crate::acker::bound), "Hands");
//! * its counts for the stats ([`stats`](crate::acker::stats)).
//!
//! The last two have one writer, the owner, with plain loads and stores, until the owner
//! ends: its thread-locals' destructor marks its records abandoned, and the reaper's pass
//! moves an abandoned record's hand back to the stripes and folds its counts into the
//! shared set (under the records' lock, which the stats' sum takes too) before the record
//! goes. The owner's last writes happen before its `abandoned` store, which the reaper's
//! load reads (both SeqCst), so nothing it counted or held is lost.
//!
//! The acker's [`Threads`] also keeps the reaper's wake-up ([`wake`]): an operation that
//! registers a root due at the reaper sooner than anything registered since its last scan
//! ([`dirty`](crate::acker::timers::dirty)) wakes a reaper asleep past that tick. The
//! marks' protocols are Dekker pairs through asymmetric fences
//! ([`fences`](crate::sync::fences)): the thread's side is plain stores and a compiler
//! fence, the rare side (shutdown, a re-anchorer, a grace period) a heavy fence.

#[cfg(not(loom))]
use std::cell::{Cell, RefCell};

use crate::acker::stats::{Counters, Tally};
use crate::acker::timers::dirty::DirtySince;
use crate::sync::fences::Fences;
use crate::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Mutex, Ordering};

pub(super) mod marks;
pub(super) mod wake;

pub use marks::{Active, Grace};
pub use wake::Registered;

/// One thread's record for one acker: the marks of its operations ([`marks`]), its hand of
/// credits and its counts.
#[derive(Debug)]
pub struct Record {
    /// The owner's operations, two counts in one word ([`marks`]): in the low half its
    /// *depth*, the acker operations in progress on its thread (nested when a callback
    /// calls back into the acker, "Closing the callback"); in the high half the outermost
    /// operations it has begun, wrapping (a grace period sees a thread that was inside one
    /// leave it when this changes, "Grace periods"). Written only by the owner.
    active: AtomicU64,
    /// The depth of the operation the owner has paused (in a callback, or a wait that holds
    /// nothing), 0 when none: the thread is quiescent while this equals its depth
    /// ("Re-anchoring"). Written only by the owner.
    paused: AtomicU32,
    /// The owner's thread has ended (or dropped its handle): the reaper may drop the
    /// record once its hand is reclaimed ([`Threads::prune_ended`]).
    abandoned: AtomicBool,
    /// The owner's hand of `max_pending` credits ([`bound`](crate::acker::bound), "Hands"):
    /// written by the owner alone while it lives, and by whoever reclaims it once
    /// `abandoned` is set.
    hand: AtomicUsize,
    /// The owner's counts ([`stats`](crate::acker::stats)): written by the owner alone,
    /// folded into the shared set before the record goes.
    counters: Counters,
}

impl Record {
    /// The owner's hand of credits, for the loom models, which pass hands explicitly.
    #[cfg(loom)]
    pub fn hand(&self) -> &AtomicUsize {
        &self.hand
    }

    /// Counts `n` trees acked in the owner's counters, as an operation of the owner's
    /// does: for the loom models, which pass records explicitly.
    #[cfg(loom)]
    pub fn count_acked(&self, n: u64) {
        Tally::new(&self.counters, true).add(|c| &c.acked, n);
    }

    fn new() -> Self {
        Record {
            active: AtomicU64::new(0),
            paused: AtomicU32::new(0),
            abandoned: AtomicBool::new(false),
            hand: AtomicUsize::new(0),
            counters: Counters::default(),
        }
    }
}

/// Entries a scratch vector keeps room for whatever it held (about 8 KiB).
pub(crate) const KEEP_ROOM: usize = 1024;

/// Gives back the room of a vector that held far more than it holds now: it keeps twice
/// its length, at least [`KEEP_ROOM`], so a steady flow does not reallocate.
pub(crate) fn trim<E>(v: &mut Vec<E>) {
    let keep = (2 * v.len()).max(KEEP_ROOM);
    if v.capacity() > 2 * keep {
        v.shrink_to(keep);
    }
}

/// Every thread's record for one acker, and the summary of its dirty groups.
#[derive(Debug)]
pub struct Threads {
    /// This acker among all of the process's, for the per-thread lookup (not under loom,
    /// whose models pass each thread's record explicitly).
    #[cfg_attr(loom, allow(dead_code))]
    id: usize,
    fences: Fences,
    all: Mutex<Vec<Arc<Record>>>,
    /// Whether a group was marked dirty since the reaper's last scan, and the tick by which
    /// it must scan ([`dirty`](crate::acker::timers::dirty)).
    dirty: DirtySince,
    /// The reaper is about to sleep past the next tick, or asleep so ([`wake`]).
    idle: AtomicBool,
    /// What an entering operation must heed, read in one load ([`marks`]): `CLOSED` once
    /// shutdown has closed the callback ("Closing the callback"), `MOVING` while time is
    /// being re-anchored ("Re-anchoring": operations wait at their entry).
    gates: AtomicU8,
    /// Operations in progress on threads that have no record (exiting threads; under
    /// loom, every thread): a count, as a record's depth, in a word of the same width.
    shared: AtomicU64,
    /// Heavy fences whose barrier could not be run (see [`Threads::heavy`]).
    barrier_failures: AtomicU64,
    /// The counts of threads without a record, and of records gone
    /// ([`stats`](crate::acker::stats)).
    counters: Counters,
}

impl Threads {
    /// No records yet; `fences` for the marks' Dekker pairs ([`marks`]).
    pub fn new(fences: Fences) -> Self {
        static NEXT_ID: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        Threads {
            // Relaxed: a unique number; nothing is published through it.
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            fences,
            all: Mutex::new(Vec::new()),
            dirty: DirtySince::default(),
            idle: AtomicBool::new(false),
            gates: AtomicU8::new(0),
            shared: AtomicU64::new(0),
            barrier_failures: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    /// A new record for a thread; its handle must be used by that thread only.
    pub fn register(&self) -> Arc<Record> {
        let record = Arc::new(Record::new());
        self.all.lock().unwrap().push(Arc::clone(&record));
        record
    }

    /// The heavy fence; a barrier that could not be run is counted (`false`). A registered
    /// process's `membarrier` has no documented way to fail, but if it does, the callers
    /// wait rather than trust a depth read without it.
    fn heavy(&self) -> bool {
        let ran = self.fences.heavy();
        if !ran {
            // Relaxed: a statistic.
            self.barrier_failures.fetch_add(1, Ordering::Relaxed);
        }
        ran
    }

    /// Heavy fences whose barrier could not be run, since the acker was built.
    pub fn barrier_failures(&self) -> u64 {
        self.barrier_failures.load(Ordering::Relaxed) // Relaxed: a statistic.
    }

    /// Marks a thread's record abandoned (the thread is done with it).
    pub fn abandon(record: &Record) {
        record.abandoned.store(true, Ordering::SeqCst);
    }

    /// The credits in every record's hand ([`bound`](crate::acker::bound), "Hands"): a
    /// hint, exact when no thread is taking or giving credits.
    pub fn in_hands(&self) -> usize {
        // Relaxed: a hint, as the stripes' loads beside it.
        self.all
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.hand.load(Ordering::Relaxed))
            .sum()
    }

    /// Empties the hands of abandoned records (their threads are gone): how many credits
    /// they held, which the caller now holds. A record is dropped only with an empty hand
    /// ([`prune_ended`](Self::prune_ended)), so none is lost.
    pub fn reclaim_hands(&self) -> usize {
        let all = self.all.lock().unwrap();
        // SeqCst (both): the owner's last write of its hand happens before its store of
        // `abandoned` (SeqCst), which this load reads, so the swap sees that write.
        all.iter()
            .filter(|r| r.abandoned.load(Ordering::SeqCst))
            .map(|r| r.hand.swap(0, Ordering::SeqCst))
            .sum()
    }

    /// The calling thread's counters: its record's, or the shared set for a thread without
    /// one.
    #[inline]
    pub(crate) fn tally(&self) -> Tally<'_> {
        match self.own() {
            Some(record) => Tally::new(&record.counters, true),
            None => Tally::new(&self.counters, false),
        }
    }

    /// [`tally`](Self::tally) of the thread inside the operation `active`, without a
    /// lookup.
    #[inline]
    pub(crate) fn tally_in<'a>(&'a self, active: &'a Active) -> Tally<'a> {
        match active.record() {
            Some(record) => Tally::new(&record.counters, true),
            None => Tally::new(&self.counters, false),
        }
    }

    /// The trees acked, summed over every record and the shared set: for the loom models.
    #[cfg(loom)]
    pub fn acked(&self) -> u64 {
        let mut acked = 0;
        // SeqCst: the models' final check, after their threads joined.
        self.each_counters(&mut |c| acked += c.acked.load(Ordering::SeqCst));
        acked
    }

    /// The hand of credits of the thread inside the operation `active`, without a lookup;
    /// `None` for a thread without a record.
    #[inline]
    pub fn hand_in<'a>(&'a self, active: &'a Active) -> Option<&'a AtomicUsize> {
        active.record().map(|record| &record.hand)
    }

    /// Calls `each` with every record's counters and the shared set, under the records'
    /// lock (a record's set is folded into the shared one under it before the record
    /// goes: each count is seen once).
    pub(crate) fn each_counters(&self, each: &mut dyn FnMut(&Counters)) {
        let all = self.all.lock().unwrap();
        all.iter().for_each(|record| each(&record.counters));
        each(&self.counters);
    }

    /// A re-anchoring is under way: between `begin_moving` and `end_moving`.
    #[cfg(test)]
    pub fn moving(&self) -> bool {
        self.gates.load(Ordering::SeqCst) & marks::MOVING != 0
    }

    /// Records registered and not yet dropped.
    #[cfg(any(test, loom))] // the tests and loom models only
    pub fn records(&self) -> usize {
        self.all.lock().unwrap().len()
    }

    /// Drops the records of threads that ended, once their hands are reclaimed
    /// ([`reclaim_hands`](Self::reclaim_hands)); their counts stay, folded into the shared
    /// set under the records' lock.
    pub fn prune_ended(&self) {
        let mut all = self.all.lock().unwrap();
        all.retain(|b| {
            // SeqCst (both): the owner's last writes happen before its `abandoned` store.
            let goes = b.abandoned.load(Ordering::SeqCst) && b.hand.load(Ordering::SeqCst) == 0;
            if goes {
                self.counters.fold(&b.counters);
            }
            !goes
        });
    }
}

/// A thread's records, one per acker it operated on. Dropping it (thread exit) abandons
/// them; the reaper reclaims their hands and drops them.
#[cfg(not(loom))]
#[derive(Default)]
struct Local {
    threads: Vec<(usize, Arc<Record>)>,
}

#[cfg(not(loom))]
impl Drop for Local {
    fn drop(&mut self) {
        // `LAST` must not name a record this drop may free (an acker id is never
        // reused, so nothing else can make it name a freed one).
        LAST.set((0, std::ptr::null()));
        self.threads.iter().for_each(|(_, b)| Threads::abandon(b));
    }
}

#[cfg(not(loom))]
thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
    /// The last lookup: an acker's id and its record (kept alive by `LOCAL`).
    static LAST: Cell<(usize, *const Record)> = const { Cell::new((0, std::ptr::null())) };
}

#[cfg(not(loom))]
impl Threads {
    /// Marks an acker operation in progress on the calling thread until the returned
    /// `Active` drops; its `open` says whether the operation may call the callback.
    // Always: every operation's first step, and a call here costs more than its body.
    #[inline(always)]
    pub fn enter(&self) -> Active {
        self.cached(|record| self.enter_with(record), || self.enter_looked_up())
    }

    /// [`enter`](Self::enter) when `LAST` names another acker's record (or none): a
    /// thread's first operation on this acker, or an exiting thread's. Out of line.
    #[cold]
    #[inline(never)]
    fn enter_looked_up(&self) -> Active {
        match self.own() {
            Some(record) => self.enter_with(record),
            // The thread is exiting (a thread-local's destructor acks): it has no record to
            // mark, so it counts in the shared count, which shutdown's close waits for as
            // it waits for a record's depth. Its completions go to the
            // callback like any.
            None => self.enter_shared(),
        }
    }

    /// Whether the calling thread is in an acker operation (a callback calling shutdown).
    pub fn caller_active(&self) -> bool {
        // Relaxed: this thread's own counter.
        self.own()
            .is_some_and(|b| marks::depth(b.active.load(Ordering::Relaxed)) > 0)
    }

    /// The calling thread's hand of credits ([`bound`](crate::acker::bound), "Hands"),
    /// `None` for a thread without a record (an exiting one): for the tests (operations
    /// take theirs from their record, [`hand_in`](Self::hand_in)).
    #[cfg(test)]
    pub fn own_hand(&self) -> Option<&AtomicUsize> {
        self.own().map(|record| &record.hand)
    }

    /// The calling thread's record for this acker (registered at its first use).
    #[inline]
    pub(super) fn own(&self) -> Option<&Record> {
        self.cached(Some, || {
            let record = self.local()?;
            LAST.set((self.id, Arc::as_ptr(&record)));
            // Safety: `LOCAL` holds an `Arc` of it for as long as this thread runs, and
            // the reference is used only while this thread runs the caller.
            Some(unsafe { &*Arc::as_ptr(&record) })
        })
    }

    /// `hit` on the calling thread's record for this acker when `LAST` names it (a
    /// thread-local read and a compare), else `miss`. A continuation, not an `Option`:
    /// `enter` through `Option<&Record>` tested the pointer for null on every operation.
    #[inline(always)]
    fn cached<'a, R>(&'a self, hit: impl FnOnce(&'a Record) -> R, miss: impl FnOnce() -> R) -> R {
        let (id, last) = LAST.get();
        if id == self.id {
            // Safety: `LAST` names a record that this thread's `LOCAL` holds an `Arc` of
            // (it is set only from there, and `LOCAL` drops no record while `LAST` names
            // it), and the reference is used only while this thread runs the
            // caller.
            return hit(unsafe { &*last });
        }
        miss()
    }

    #[cold]
    fn local(&self) -> Option<Arc<Record>> {
        LOCAL
            .try_with(|local| {
                let mut local = local.borrow_mut();
                if let Some((_, record)) = local.threads.iter().find(|(id, _)| *id == self.id) {
                    return Arc::clone(record);
                }
                // Records of ackers that are gone (only this thread still holds them) go
                // now.
                local.threads.retain(|(_, b)| Arc::strong_count(b) > 1);
                let record = self.register();
                local.threads.push((self.id, Arc::clone(&record)));
                record
            })
            .ok()
    }
}

#[cfg(loom)]
impl Threads {
    /// Under loom: one shared count of operations in progress.
    pub fn enter(&self) -> Active {
        self.enter_shared()
    }

    /// Under loom nothing is per-thread.
    pub fn caller_active(&self) -> bool {
        false
    }

    /// Under loom nothing is per-thread.
    pub(super) fn own(&self) -> Option<&Record> {
        None
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
