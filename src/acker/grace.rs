//! Grace periods: when a completed slot may be freed for another root.
//!
//! Every operation that looks a root up runs *pinned*. A slot that completes is retired by
//! the reaper, and freed (back to EMPTY) only once every operation that was pinned when it
//! was retired has unpinned. An operation that starts later can still find the tombstone's
//! key, but it reads DONE and skips it; it can never hold the slot index across a reuse.
//! This is what keeps a late ack from XORing into a newer tree.
//!
//! ## The protocol
//!
//! Each thread has, per acker it has used, a [`Participant`]: one word that only that
//! thread writes. It is even while the thread is not pinned and odd while it is; the thread
//! adds one at its outermost pin and again at the matching unpin, so a word that has changed
//! since the reaper read it odd means that pin has ended. The reaper keeps retired slots in a
//! [`Limbo`]: it takes a *snapshot* of the participants pinned now (after the heavy fence
//! below) for the slots retired so far, and frees those slots once every participant in the
//! snapshot has changed its word. One snapshot is outstanding at a time; slots retired
//! meanwhile wait for the next.
//!
//! Why that is enough: a slot was marked DONE before the reaper heard of it, so before the
//! snapshot's fence. An operation whose pin the snapshot misses pinned after that fence, and
//! so reads DONE on the slot and skips it. Any other is in the snapshot, and the slot waits
//! for its unpin. The pin's store and the unpin's are Release and the snapshot's loads
//! Acquire, so everything an operation did with a slot happens before the slot's free.
//!
//! ## Asymmetric fences
//!
//! "The snapshot misses a pin only if the pin is after the fence" needs a StoreLoad barrier
//! on both sides: between the pin's store and the operation's first read of a slot, and
//! between the reaper's fence and its reads of the words. A SeqCst fence in every pin costs a
//! locked instruction per operation (crossbeam-epoch's pin measured 37 % of an in-cache
//! ack). The barrier is wanted by the reaper, a few hundred times a second, not by the
//! millions of operations, so it is moved there: on Linux the reaper calls
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which runs a full memory barrier on every
//! CPU running a thread of this process (and a thread not running has passed through a
//! context switch, itself a barrier), and the pin keeps only a compiler fence. Either a
//! thread's pin store was drained to memory by that barrier, and the snapshot sees it, or
//! the barrier ran before the store, and everything after it, the slot reads included,
//! sees what preceded the barrier: DONE. This is the scheme of Linux's own RCU flavours and
//! of folly's `asymmetricLightBarrier`.
//!
//! Where `membarrier` is missing (not Linux, an old kernel, a seccomp filter that refuses
//! it) and under Miri and loom, pins use a SeqCst fence and the snapshot another
//! ([`Fences::Symmetric`]): the same protocol in the plain C++ model. Loom checks that form
//! (`loom-tests`, `grace_*` models); Miri runs the acker's tests on it.
//!
//! ## Threads come and go
//!
//! A thread registers once per acker, at its first pin there, and keeps its participant in a
//! thread-local list. The list holds the acker's registry weakly, so an acker's registry
//! cannot be freed and another allocated at its address while the list names it; entries for
//! ackers that are gone are dropped at the thread's next registration. The registry holds
//! every participant too, and the reaper drops those whose thread has gone (nobody else holds
//! them, and they are not pinned). During thread-local teardown a pin registers a one-off
//! participant and owns it.
//!
//! ## Under loom
//!
//! The acker's own models use a stand-in with the same guarantee, which keeps their state
//! space small: `pin` counts the operations in flight on a loom atomic, and retired slots
//! wait in a limbo list until the reaper sees that count at zero. The protocol above is
//! checked on its own by the `grace_*` models, through the same [`Registry`], [`Participant`]
//! and [`Limbo`] the acker uses.

#[cfg(not(loom))]
use std::marker::PhantomData;
#[cfg(not(loom))]
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

pub use super::fences::Fences;
use crate::sync::{Arc, AtomicU32, AtomicU64, Mutex, Ordering};

/// One thread's pin word for one acker (module docs).
#[derive(Debug, Default)]
pub struct Participant {
    /// Odd while pinned; its thread adds one at the outermost pin and at the unpin.
    word: CachePadded<AtomicU64>,
    /// Pins nested on this thread now.
    depth: AtomicU32,
}

impl Participant {
    /// Pins the calling thread, which must be this participant's.
    #[inline]
    pub fn pin(&self, fences: Fences) {
        // Relaxed: only this participant's thread reads or writes `depth`.
        let depth = self.depth.load(Ordering::Relaxed);
        // Relaxed: as above, this thread's own counter.
        self.depth.store(depth + 1, Ordering::Relaxed);
        if depth == 0 {
            // Relaxed: only this thread writes the word, so it reads its own last store.
            let word = self.word.load(Ordering::Relaxed);
            // Release: a snapshot that reads this (later) word must also see everything
            // this thread did before, its last operation included (module docs).
            self.word.store(word + 1, Ordering::Release);
            fences.light();
        }
    }

    /// Ends the matching [`pin`](Self::pin).
    #[inline]
    pub fn unpin(&self) {
        // Relaxed: only this participant's thread reads or writes `depth`.
        let depth = self.depth.load(Ordering::Relaxed);
        debug_assert!(depth > 0, "unpin without pin");
        // Relaxed: as above, this thread's own counter.
        self.depth.store(depth - 1, Ordering::Relaxed);
        if depth == 1 {
            // Relaxed: only this thread writes the word, so it reads its own last store.
            let word = self.word.load(Ordering::Relaxed);
            // Release: the operation's accesses happen before a free that reads this word.
            self.word.store(word + 1, Ordering::Release);
        }
    }
}

/// Every participant of one acker, and the acker's choice of fences.
#[derive(Debug)]
pub struct Registry {
    participants: Mutex<Vec<Arc<Participant>>>,
    fences: Fences,
    /// Heavy fences that could not be run (`membarrier` refused after it was registered,
    /// say by a seccomp filter installed later). Each leaves the retired slots waiting; if
    /// it persists, tombstones fill the table and inits are refused `Full`. The stress
    /// harness fails on any.
    barrier_failures: AtomicU64,
}

impl Registry {
    /// An empty registry using `fences`.
    pub fn new(fences: Fences) -> Self {
        Registry {
            participants: Mutex::new(Vec::new()),
            fences,
            barrier_failures: AtomicU64::new(0),
        }
    }

    /// The fences pins on this registry use.
    #[inline]
    pub fn fences(&self) -> Fences {
        self.fences
    }

    /// Snapshots that could not run their heavy fence (see the field).
    pub fn barrier_failures(&self) -> u64 {
        self.barrier_failures.load(Ordering::SeqCst)
    }

    /// A new participant for the calling thread.
    pub fn register(&self) -> Arc<Participant> {
        let participant = Arc::new(Participant::default());
        self.participants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&participant));
        participant
    }

    /// Participants registered and not yet dropped (threads that have used the acker and are
    /// still running, as far as the last snapshot knows).
    #[cfg_attr(not(any(test, loom)), allow(dead_code))]
    pub fn participants(&self) -> usize {
        self.participants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Runs the heavy fence, then appends the participants pinned now, with their words, to
    /// `into`; drops those whose thread has gone. `false` (and nothing appended) if the
    /// fence could not be run.
    fn snapshot(&self, into: &mut Vec<(Arc<Participant>, u64)>) -> bool {
        if !self.fences.heavy() {
            // Relaxed: a statistic only.
            self.barrier_failures.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut participants = self.participants.lock().unwrap_or_else(|e| e.into_inner());
        participants.retain(|participant| {
            // Acquire: an even word read here is an unpin, whose operation is then over.
            let word = participant.word.load(Ordering::Acquire);
            let pinned = word & 1 == 1;
            if pinned {
                into.push((Arc::clone(participant), word));
            }
            // Nobody else holds it: its thread's list is gone, and with it the thread. (A
            // stale count can only be too high, which keeps the entry one snapshot longer.)
            pinned || Arc::strong_count(participant) > 1
        });
        true
    }
}

/// Entries a drained list keeps room for. A mass completion (a million trees timing out in
/// one pass) fills the lists with as many; keeping that room would hold 8 B per slot ever
/// retired at once (measured: +16 MiB at 1M slots) after the trees are gone.
const KEEP: usize = 4096;

/// Retired items waiting for their grace period (module docs). Owned by the reaper.
#[derive(Debug)]
pub struct Limbo<I> {
    /// Retired since the outstanding snapshot was taken.
    waiting: Vec<I>,
    /// Retired before the outstanding snapshot.
    covered: Vec<I>,
    /// The outstanding snapshot: participants pinned when it was taken, and their words.
    snapshot: Vec<(Arc<Participant>, u64)>,
}

impl<I> Default for Limbo<I> {
    fn default() -> Self {
        Limbo {
            waiting: Vec::new(),
            covered: Vec::new(),
            snapshot: Vec::new(),
        }
    }
}

impl<I> Limbo<I> {
    /// Adds items that no operation starting from now can find live.
    pub fn retire(&mut self, items: impl IntoIterator<Item = I>) {
        self.waiting.extend(items);
    }

    /// Items waiting.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.waiting.len() + self.covered.len()
    }

    /// Hands to `free` every item whose grace period has ended, and, if `snapshot` allows
    /// and none is outstanding, takes the next snapshot. Returns how many items were freed,
    /// and whether a snapshot was taken.
    pub fn advance(
        &mut self,
        registry: &Registry,
        snapshot: bool,
        mut free: impl FnMut(I),
    ) -> (usize, bool) {
        let mut freed = self.free_if_passed(&mut free);
        let took = snapshot
            && self.covered.is_empty()
            && !self.waiting.is_empty()
            && registry.snapshot(&mut self.snapshot);
        if took {
            std::mem::swap(&mut self.waiting, &mut self.covered);
            // A snapshot that found nobody pinned has passed already.
            freed += self.free_if_passed(&mut free);
        }
        (freed, took)
    }

    /// Frees the covered items if every participant of their snapshot has changed its word
    /// since (at once if none was pinned). Returns how many were freed.
    fn free_if_passed(&mut self, free: &mut impl FnMut(I)) -> usize {
        if self.covered.is_empty()
            || !self
                .snapshot
                .iter()
                // Acquire: the changed word is a later store of that thread (both are
                // Release), after the unpin that ended the pinned operation.
                .all(|(participant, word)| participant.word.load(Ordering::Acquire) != *word)
        {
            return 0;
        }
        self.snapshot.clear();
        let freed = self.covered.len();
        self.covered.drain(..).for_each(free);
        self.covered.shrink_to(KEEP);
        freed
    }
}

/// Proof that the current operation is pinned; dropping it unpins.
#[cfg(not(loom))]
#[derive(Debug)]
pub(super) struct Pin<'a> {
    participant: NonNull<Participant>,
    /// A participant of this pin's own, when the thread-local list was unavailable.
    _owned: Option<Arc<Participant>>,
    _grace: PhantomData<&'a Grace>,
}

#[cfg(not(loom))]
impl Drop for Pin<'_> {
    #[inline]
    fn drop(&mut self) {
        // Safety: the participant is alive: either `_owned` holds it, or this thread's list
        // does, and the list drops an entry only for an acker that is gone (this pin borrows
        // the acker) or at thread exit (after every operation on the thread has ended).
        unsafe { self.participant.as_ref() }.unpin();
    }
}

/// Proof that the current operation is pinned; dropping it unpins.
#[cfg(loom)]
#[derive(Debug)]
pub(super) struct Pin<'a>(&'a crate::sync::AtomicUsize);

#[cfg(loom)]
impl Drop for Pin<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(not(loom))]
thread_local! {
    /// This thread's participants, one per acker it has used, each beside its acker's
    /// registry (held weakly: see the module docs).
    static PARTICIPANTS: std::cell::RefCell<Vec<(std::sync::Weak<Registry>, Arc<Participant>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The acker's grace-period state.
#[derive(Debug)]
pub(super) struct Grace {
    /// This acker's participants.
    #[cfg(not(loom))]
    registry: Arc<Registry>,
    /// Operations pinned now (the loom stand-in).
    #[cfg(loom)]
    active: crate::sync::AtomicUsize,
    /// Retired `(shard, slot)`s, and when the last snapshot was taken (real time, not the
    /// acker's clock, which a test may hold still). Only the reaper's pass touches it, under
    /// the acker's wheel lock, so this lock is never contended; it is std's even under loom,
    /// where the wheel lock already orders every access.
    limbo: std::sync::Mutex<(Limbo<Retired>, Option<std::time::Instant>)>,
}

/// A retired slot: `(shard, slot)`.
type Retired = (u32, u32);

/// The least time between two snapshots of a threaded acker.
///
/// A snapshot's `membarrier` interrupts every CPU running one of the process's threads
/// (about 1.6 µs on the caller here, and a pipeline flush on each of them). A busy reaper
/// runs passes back to back, and with a snapshot each one measured 155k barriers a second,
/// which cost the acking threads half their speed (96 -> 150 ns per operation). One
/// snapshot per 100 µs bounds that at 10k a second, and a retired slot waits at most a few
/// hundred microseconds more.
pub(super) const SNAPSHOT_INTERVAL: std::time::Duration = std::time::Duration::from_micros(100);

impl Grace {
    /// Grace periods with [`Fences::detect`]'s fences.
    pub(super) fn new() -> Self {
        Self::with_fences(Fences::detect())
    }

    /// Grace periods with the given fences (tests run both).
    #[cfg_attr(loom, allow(unused_variables))]
    pub(super) fn with_fences(fences: Fences) -> Self {
        Grace {
            #[cfg(not(loom))]
            registry: Arc::new(Registry::new(fences)),
            #[cfg(loom)]
            active: crate::sync::AtomicUsize::new(0),
            limbo: std::sync::Mutex::new((Limbo::default(), None)),
        }
    }

    /// The fences this acker's pins use.
    #[cfg(not(loom))]
    pub(super) fn fences(&self) -> Fences {
        self.registry.fences()
    }

    /// Snapshots whose heavy fence failed.
    #[cfg(not(loom))]
    pub(super) fn barrier_failures(&self) -> u64 {
        self.registry.barrier_failures()
    }

    /// Pins the current thread for one operation.
    #[inline]
    pub(super) fn pin(&self) -> Pin<'_> {
        #[cfg(not(loom))]
        {
            let registry = Arc::as_ptr(&self.registry);
            let found = PARTICIPANTS.try_with(|list| {
                list.borrow()
                    .iter()
                    .find(|(owner, _)| std::ptr::eq(owner.as_ptr(), registry))
                    .map(|(_, participant)| NonNull::from(&**participant))
            });
            match found {
                Ok(Some(participant)) => {
                    // Safety: this thread's list holds it (see `Pin`'s drop).
                    unsafe { participant.as_ref() }.pin(self.registry.fences());
                    Pin {
                        participant,
                        _owned: None,
                        _grace: PhantomData,
                    }
                }
                _ => self.pin_first(),
            }
        }
        #[cfg(loom)]
        {
            self.active.fetch_add(1, Ordering::SeqCst);
            Pin(&self.active)
        }
    }

    /// The first pin of this thread on this acker: registers, then pins.
    #[cfg(not(loom))]
    #[cold]
    fn pin_first(&self) -> Pin<'_> {
        let participant = self.registry.register();
        participant.pin(self.registry.fences());
        let pointer = NonNull::from(&*participant);
        let kept = PARTICIPANTS.try_with(|list| {
            let mut list = list.borrow_mut();
            // Entries for ackers that are gone.
            list.retain(|(owner, _)| owner.strong_count() > 0);
            list.push((Arc::downgrade(&self.registry), Arc::clone(&participant)));
        });
        Pin {
            participant: pointer,
            // During thread-local teardown the list is gone: this pin keeps its participant.
            _owned: kept.is_err().then_some(participant),
            _grace: PhantomData,
        }
    }

    /// Hands retired slots of `shard` to the grace period.
    pub(super) fn retire(&self, shard: usize, slots: &mut Vec<u32>) {
        if slots.is_empty() {
            return;
        }
        let mut limbo = self.limbo.lock().unwrap_or_else(|e| e.into_inner());
        limbo
            .0
            .retire(slots.drain(..).map(|slot| (shard as u32, slot)));
        // The caller's list is reused every pass; see `KEEP`.
        slots.shrink_to(KEEP);
    }

    /// Reaper only: frees (through `free(shard, slot)`) the retired slots whose grace period
    /// has ended. Takes a new snapshot at most every [`SNAPSHOT_INTERVAL`], unless `eager`
    /// (manual mode, where passes are the caller's and cost is no concern). Returns how many
    /// slots were freed, and how many still wait.
    #[cfg_attr(loom, allow(unused_variables))]
    pub(super) fn advance(
        &self,
        eager: bool,
        mut free: impl FnMut(usize, usize),
    ) -> (usize, usize) {
        let mut guard = self.limbo.lock().unwrap_or_else(|e| e.into_inner());
        let (limbo, last) = &mut *guard;
        #[cfg(not(loom))]
        let freed = {
            let snapshot = eager || last.map_or(true, |last| last.elapsed() >= SNAPSHOT_INTERVAL);
            let (freed, took) = limbo.advance(&self.registry, snapshot, |(shard, slot)| {
                free(shard as usize, slot as usize)
            });
            if took && !eager {
                *last = Some(std::time::Instant::now());
            }
            freed
        };
        #[cfg(loom)]
        let freed = {
            // Everything in limbo was retired before this read: zero pinned now means every
            // operation that could have found those slots live has finished. An RMW read: a
            // pin after it reads from it, so that operation sees the slots' DONE.
            let mut freed = 0;
            if !limbo.waiting.is_empty() && self.active.fetch_add(0, Ordering::SeqCst) == 0 {
                freed = limbo.waiting.len();
                for (shard, slot) in limbo.waiting.drain(..) {
                    free(shard as usize, slot as usize);
                }
            }
            freed
        };
        (freed, limbo.len())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_slot_waits_for_the_operations_pinned_when_it_retired() {
        for fences in [Fences::Symmetric, Fences::detect()] {
            let registry = Registry::new(fences);
            let early = registry.register();
            let late = registry.register();
            let mut limbo = Limbo::default();
            let mut freed = Vec::new();

            early.pin(fences);
            limbo.retire([1]);
            assert_eq!(limbo.advance(&registry, true, |i| freed.push(i)).0, 0);
            // A pin after the snapshot does not hold the slot back.
            late.pin(fences);
            assert_eq!(
                limbo.advance(&registry, true, |i| freed.push(i)),
                (0, false),
                "early still pinned"
            );
            // Retired now, behind the outstanding snapshot.
            limbo.retire([2]);
            early.unpin();
            assert_eq!(limbo.advance(&registry, true, |i| freed.push(i)).0, 1);
            assert_eq!(freed, [1]);
            // Item 2's snapshot (taken in that call) saw `late` pinned.
            assert_eq!(limbo.advance(&registry, true, |i| freed.push(i)).0, 0);
            late.unpin();
            assert_eq!(limbo.advance(&registry, true, |i| freed.push(i)).0, 1);
            assert_eq!(freed, [1, 2]);
            assert_eq!(limbo.len(), 0);
        }
    }

    #[test]
    fn a_repin_ends_the_grace_period_and_nested_pins_hold_it() {
        let fences = Fences::Symmetric;
        let registry = Registry::new(fences);
        let thread = registry.register();
        let mut limbo = Limbo::default();
        let mut freed = 0;

        thread.pin(fences);
        thread.pin(fences); // nested
        limbo.retire([7]);
        assert_eq!(limbo.advance(&registry, true, |_| freed += 1).0, 0);
        thread.unpin(); // the inner pin ends: the outer operation goes on
        assert_eq!(limbo.advance(&registry, true, |_| freed += 1).0, 0);
        thread.unpin();
        thread.pin(fences); // a new operation, begun after the snapshot
        assert_eq!(limbo.advance(&registry, true, |_| freed += 1).0, 1);
        assert_eq!(freed, 1);
        thread.unpin();
    }

    #[test]
    fn participants_of_finished_threads_are_dropped() {
        let grace = Arc::new(Grace::with_fences(Fences::Symmetric));
        drop(grace.pin());
        let other = Arc::clone(&grace);
        std::thread::spawn(move || drop(other.pin()))
            .join()
            .unwrap();
        assert_eq!(grace.registry.participants(), 2);
        // A snapshot (started by a retirement) prunes the finished thread's participant.
        grace.retire(0, &mut vec![3]);
        let mut freed = Vec::new();
        assert_eq!(
            grace.advance(true, |shard, slot| freed.push((shard, slot))),
            (1, 0)
        );
        assert_eq!(freed, [(0, 3)]);
        assert_eq!(grace.registry.participants(), 1);
    }

    #[test]
    fn each_thread_pins_its_own_participant_once_per_acker() {
        let a = Grace::with_fences(Fences::Symmetric);
        let b = Grace::with_fences(Fences::Symmetric);
        for _ in 0..3 {
            let _pa = a.pin();
            let _pb = b.pin();
            let _nested = a.pin();
        }
        assert_eq!(a.registry.participants(), 1);
        assert_eq!(b.registry.participants(), 1);
        // Both unpinned: a retirement is freed by the first advance.
        a.retire(1, &mut vec![9]);
        assert_eq!(a.advance(true, |_, _| {}), (1, 0));
    }
}
