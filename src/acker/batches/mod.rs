//! Lazy timer registration: each thread files the entries it creates in its own batch,
//! and only the entries that outlive a hand-off age ever reach the reaper.
//!
//! Most trees complete soon after their first message. Registering a timer for each at
//! creation (a ring cell, a wheel node, a lock) costs every tree the reaper's attention and
//! lines shared with the reaper's core. Instead a thread that creates an entry (a new
//! root's claim, an orphan, a carried twin) appends `(slot, tag)` and the tick by
//! which the reaper must have it (its *hand-off* tick: the acker's hand-off age after the
//! first message, or the tick before the deadline if that is sooner) to its batch for this
//! acker, with plain stores. When its tick moves on (seen at its next push) the owner
//! filters the batch: it drops the entries filed in the tick before whose slot no longer
//! holds their root (they completed; their lines are most likely still in this core's
//! cache), and hands those whose hand-off tick has come to the reaper's inbox under one
//! lock, once a tick per busy thread. Each entry is looked at twice at most: in its first
//! filter (most trees are gone by then), and when its hand-off tick comes. (Looking at
//! every entry every tick made a thread that creates long-lived trees fast check each of
//! them up to the hand-off age's 64 times.) Survivors wait in hand-off order; one filed
//! with an earlier hand-off than those before it (a tree with a short timeout of its own)
//! goes to the reaper at its first filter. A tree that completes within the hand-off age
//! never reaches the reaper, which does no work for it (handing it every tree older than
//! one tick would make a lifecycle of a millisecond cost the reaper's reads of lines the
//! workers are writing). The reaper reads its line only when a long-lived group mate
//! comes due ([`groups`](crate::acker::timers::groups)).
//!
//! ## A thread that goes quiet
//!
//! A thread that stops pushing would strand its batch, so the reaper takes over batches
//! whose entries are older than its tick. Owner and reaper meet in a Dekker pair through
//! asymmetric fences ([`fences`](crate::sync::fences)):
//!
//! ```text
//!   owner (every push)                     reaper (a quiet batch, rarely)
//!   pin = true          (plain store)      taken = true
//!   light fence         (compiler fence)   heavy fence (membarrier)
//!   if taken: hand the entry to the inbox  if pin: taken = false, leave it (owner active)
//!   else: touch the batch                  else: take the entries, taken = false
//!   pin = false         (release store)
//! ```
//!
//! Either the owner sees `taken` and keeps off its batch, or the reaper sees the pin and
//! keeps off it: never both in it at once. The reaper's load of an unset pin reads the
//! owner's last `pin = false` (release), so the entries the owner wrote before it are
//! visible to the reaper; the owner's load of an unset `taken` reads the reaper's
//! `taken = false` (release) if the reaper was ever there, so the owner sees the batch the
//! reaper emptied. The owner's cost per push: two plain stores, a compiler fence, a load.
//!
//! ## Closing the callback
//!
//! Shutdown must be able to drop the acker's `on_complete` (a callback that holds a handle
//! of its own acker otherwise keeps the acker alive in a cycle), but not while a thread
//! may still call it. Each operation therefore marks its thread *active* in its batch for
//! its length (a depth counter, plain stores, and a light fence), then reads `closed`; the
//! callback may be called only by an operation that found it open. Shutdown stores
//! `closed`, runs the heavy fence, and waits until no other thread is active: the same
//! Dekker pair as the takeover's, so an operation either finished (or will finish) with the
//! callback before shutdown drops it, or saw it closed.
//!
//! ## Grace periods
//!
//! The same marks retire tables ([`tables`](crate::acker::engine::tables)): after a
//! promotion makes an old table unreachable, [`Batches::grace`] runs the heavy fence and
//! notes every thread inside an operation, with the count of outermost operations it has
//! begun; the old table is freed once each of those threads was seen outside that operation
//! (its depth 0, or its count moved on). A thread stores its depth before it loads a table,
//! so one seen at depth 0 after the fence loads the new table. Threads without a batch
//! (exiting ones) count in a shared counter with an RMW, and a grace period waits for it to
//! read 0.
//!
//! ## Re-anchoring
//!
//! The acker's stored ticks are `u32`s read against a published anchor
//! ([`anchor`](crate::acker::engine::anchor)); after a stall the anchor must move and the
//! stored ticks with it, while no operation reads or writes them. The re-anchoring thread
//! stores `moving`, runs the heavy fence and waits until every other thread is *quiescent*:
//! outside any operation, or inside the callback of one ([`Batches::pause`]: its depth
//! stored in `paused`), holding nothing of the tables. Each step that leaves quiescence (an
//! operation's entry, nested or not, and a callback's return) stores its depth (or clears
//! `paused`), runs the light fence and reads `moving`; if it is set, it undoes its store
//! and waits until it is clear. The same Dekker pair again: the re-anchorer sees the thread
//! busy and waits for it, or the thread sees `moving` and waits for the re-anchorer.
//! Waiting only ever for threads inside the acker's own code, which finish without waiting
//! on anyone (but a stranded entry's wait for room, which pauses too), it cannot deadlock
//! with a callback that calls the acker.
//!
//! ## Waking the reaper
//!
//! The reaper parks with no deadline only when nothing is pending anywhere. A push that
//! makes an empty batch non-empty stores the batch's length, fences, and reads `idle`; the
//! reaper stores `idle`, fences, and reads every batch's length before it parks. Of the
//! two, one sees the other: no entry waits for a reaper that sleeps forever. That fence is
//! paid once per tick per busy thread, not per tree.

use crate::sync::fences::Fences;
use crate::sync::{
    fence, Arc, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering, UnsafeCell,
};

use crate::acker::table::{reached, Tick};

/// A new entry, for the reaper to find again: its slot (across the acker's tables) and a
/// tag: its table's generation and 18 bits of its root's key, which tell nearly every
/// stale entry apart cheaply (the reaper re-reads the slot's word and times anyway, so a
/// tag that matches a later root costs a look, never a wrong timeout). The tag's top bits
/// are zero, and lent to the reaper's wheel while the entry waits there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The slot, numbered across the acker's tables.
    pub slot: u32,
    /// Bits of the root's key (`Key::tag`, below `TAG_CHECK_BITS`) with the generation in
    /// the lowest; the rest zero.
    pub tag: u32,
}

/// An entry in a batch, with the tick by which it must reach the reaper.
#[derive(Clone, Copy, Debug)]
struct Held {
    entry: Entry,
    hand_off: Tick,
}

/// One thread's batch for one acker.
#[derive(Debug)]
pub struct Batch {
    /// The owner is inside (module docs).
    pin: AtomicBool,
    /// The reaper is taking the entries over (module docs).
    taken: AtomicBool,
    /// The tick at which the entries were filed; the reaper reads it to spot a quiet batch.
    tick: AtomicU32,
    /// `entries.len()`, for the reaper's checks without entering the batch.
    len: AtomicUsize,
    /// Acker operations of the owner's thread in progress (nested when a callback calls
    /// back into the acker); written only by the owner ("Closing the callback").
    active: AtomicU32,
    /// Outermost operations the owner has begun (wrapping): a grace period sees a thread
    /// that was inside one leave it when this changes ("Grace periods").
    begun: AtomicU32,
    /// The depth of the operation whose callback the owner is in, 0 when none: the thread
    /// is quiescent while this equals `active` ("Re-anchoring"). Written only by the owner.
    paused: AtomicU32,
    /// The owner's thread has ended (or dropped its handle): the reaper may drop the batch
    /// once it is empty.
    abandoned: AtomicBool,
    /// Written by the owner while pinned, or by the reaper while it holds `taken` with the
    /// owner unpinned (module docs).
    entries: UnsafeCell<Entries>,
}

/// A batch's entries: those filed since the last filter, and the survivors of their first
/// filter, in hand-off order.
#[derive(Debug, Default)]
struct Entries {
    fresh: Vec<Held>,
    aged: std::collections::VecDeque<Held>,
}

impl Entries {
    fn len(&self) -> usize {
        self.fresh.len() + self.aged.len()
    }

    fn drain(&mut self) -> impl Iterator<Item = Held> + '_ {
        self.aged.drain(..).chain(self.fresh.drain(..))
    }

    /// Gives back the room of a burst (a thread that filed a million entries in a tick
    /// keeps 12 MiB otherwise): each part keeps twice its length, at least [`KEEP_ROOM`].
    fn trim(&mut self) {
        let keep = |len: usize| (2 * len).max(KEEP_ROOM);
        if self.fresh.capacity() > 2 * keep(self.fresh.len()) {
            self.fresh.shrink_to(keep(self.fresh.len()));
        }
        if self.aged.capacity() > 2 * keep(self.aged.len()) {
            self.aged.shrink_to(keep(self.aged.len()));
        }
    }
}

// Safety: `entries` is the only non-Sync part, and the pin protocol (module docs) gives it
// one accessor at a time.
unsafe impl Sync for Batch {}

impl Batch {
    fn new() -> Self {
        Batch {
            pin: AtomicBool::new(false),
            taken: AtomicBool::new(false),
            tick: AtomicU32::new(0),
            len: AtomicUsize::new(0),
            active: AtomicU32::new(0),
            begun: AtomicU32::new(0),
            paused: AtomicU32::new(0),
            abandoned: AtomicBool::new(false),
            entries: UnsafeCell::new(Entries::default()),
        }
    }
}

/// Entries a scratch or batch vector keeps room for whatever it held (about 8 KiB).
pub(crate) const KEEP_ROOM: usize = 1024;

/// Gives back the room of a vector that held far more than it holds now: it keeps twice
/// its length, at least [`KEEP_ROOM`], so a steady flow does not reallocate.
pub(crate) fn trim<E>(v: &mut Vec<E>) {
    let keep = (2 * v.len()).max(KEEP_ROOM);
    if v.capacity() > 2 * keep {
        v.shrink_to(keep);
    }
}

/// Every batch of one acker, and the reaper's inbox.
#[derive(Debug)]
pub struct Batches {
    /// This acker among all of the process's, for the per-thread lookup.
    id: usize,
    fences: Fences,
    all: Mutex<Vec<Arc<Batch>>>,
    /// Survivors handed off by owners, and entries pushed while the reaper held a batch.
    inbox: Mutex<Vec<Entry>>,
    /// `inbox.len()`, for the reaper's idle check.
    inbox_len: AtomicUsize,
    /// The reaper is about to park, or parked, with no deadline.
    idle: AtomicBool,
    /// Shutdown has closed the callback ("Closing the callback").
    closed: AtomicBool,
    /// Time is being re-anchored ("Re-anchoring"): operations wait at their entry.
    moving: AtomicBool,
    /// Operations in progress on threads that have no batch (exiting threads; under loom,
    /// every thread).
    shared: AtomicU32,
    /// Heavy fences whose barrier could not be run (see [`Batches::heavy`]).
    barrier_failures: AtomicU64,
}

/// An acker operation in progress on the calling thread; see [`Batches::enter`].
#[derive(Debug)]
pub struct Active {
    /// The thread's depth counter, or [`Batches::shared`].
    depth: *const AtomicU32,
    /// `depth` is the count shared by threads without a batch.
    shared: bool,
    /// The callback was open when the operation began: it may call it.
    pub open: bool,
}

impl Drop for Active {
    fn drop(&mut self) {
        // Safety: the counter is in a batch this thread's `LOCAL` keeps alive, or in the
        // `Batches` of the acker the operation runs on, and an `Active` lives within one
        // operation on this thread (it is not `Send`).
        let depth = unsafe { &*self.depth };
        if self.shared {
            depth.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        // Relaxed load: only this thread writes it. Release: the operation (its callback
        // included) happens before a shutdown or a grace period that reads the lower depth.
        depth.store(depth.load(Ordering::Relaxed) - 1, Ordering::Release);
    }
}

/// The calling thread quiescent (see [`Batches::pause`]) until this drops.
#[derive(Debug)]
pub struct Paused<'a> {
    batches: &'a Batches,
    batch: Option<&'a Batch>,
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let Some(batch) = self.batch else {
            return;
        };
        // Relaxed load: only this thread writes it.
        let depth = batch.active.load(Ordering::Relaxed);
        loop {
            // Relaxed: ordered before the `moving` load by the light fence (module docs).
            batch.paused.store(0, Ordering::Relaxed);
            self.batches.fences.light();
            // Acquire: as in `enter_with`, a sweep that ended happens before what follows.
            if !self.batches.moving.load(Ordering::Acquire) {
                return;
            }
            // Release: as in `pause`.
            batch.paused.store(depth, Ordering::Release);
            self.batches.wait_moved();
        }
    }
}

/// A grace period under way: the threads that were inside an operation when it began.
/// See [`Batches::grace`].
#[derive(Debug)]
pub struct Grace {
    busy: Vec<(Arc<Batch>, u32)>,
    /// Threads without a batch were inside operations.
    shared: bool,
    /// The barrier failed: nothing is known yet; the next check snapshots again.
    unfenced: bool,
}

/// What a push asks of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Nothing.
    Filed,
    /// The reaper may be parked with no deadline: wake it.
    WakeReaper,
}

impl Batches {
    /// No batches yet; `fences` for the owners' pins and the reaper's takeovers.
    pub fn new(fences: Fences) -> Self {
        static NEXT_ID: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        Batches {
            // Relaxed: a unique number; nothing is published through it.
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            fences,
            all: Mutex::new(Vec::new()),
            inbox: Mutex::new(Vec::new()),
            inbox_len: AtomicUsize::new(0),
            idle: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            moving: AtomicBool::new(false),
            shared: AtomicU32::new(0),
            barrier_failures: AtomicU64::new(0),
        }
    }

    /// A new batch for a thread; its handle must be used by that thread only.
    pub fn register(&self) -> Arc<Batch> {
        let batch = Arc::new(Batch::new());
        self.all.lock().unwrap().push(Arc::clone(&batch));
        batch
    }

    /// Files `entry`, created at tick `now` and due at the reaper by tick `hand_off`, in
    /// `batch`, which must be the calling thread's. When the batch was last filtered at an
    /// earlier tick, first drops the entries `live` says are not live and hands those whose
    /// hand-off tick has come to the reaper.
    #[inline]
    pub fn push_to(
        &self,
        batch: &Batch,
        entry: Entry,
        hand_off: Tick,
        now: Tick,
        live: impl FnMut(&Entry) -> bool,
    ) -> Pushed {
        // Relaxed: ordered before the `taken` load by the light fence (module docs).
        batch.pin.store(true, Ordering::Relaxed);
        self.fences.light();
        // Acquire: reads the reaper's release of `taken`, so the entries it emptied are
        // seen.
        if batch.taken.load(Ordering::Acquire) {
            batch.pin.store(false, Ordering::Release); // Release: as at the end below.
            self.hand_off(std::iter::once(entry));
            return Pushed::Filed;
        }
        let mut pushed = Pushed::Filed;
        batch.entries.with_mut(|entries| {
            // Safety: pinned, and `taken` was unset after the pin: the reaper keeps off the
            // entries until we unpin (module docs).
            let entries = unsafe { &mut *entries };
            // Relaxed: only this thread writes `tick`; the reaper's reading it stale only
            // delays a takeover.
            let filed = batch.tick.load(Ordering::Relaxed);
            if filed != now {
                if entries.len() > 0 {
                    self.filter(entries, now, live);
                }
                batch.tick.store(now, Ordering::Relaxed); // Relaxed: as above.
            }
            entries.fresh.push(Held { entry, hand_off });
            // Relaxed: a hint for the reaper's checks; the fence below orders the one
            // that matters (empty to non-empty) before the `idle` load.
            batch.len.store(entries.len(), Ordering::Relaxed);
            if entries.len() == 1 {
                pushed = self.wake_check();
            }
        });
        // Release: the entries written above happen before a takeover that reads this.
        batch.pin.store(false, Ordering::Release);
        pushed
    }

    /// The tick's filter (module docs): the fresh entries `live` says are not live are
    /// dropped, the others join the aged ones (or go to the reaper now, if due before the
    /// last aged one); then the aged ones whose hand-off tick has come by `now` and are
    /// still live go to the reaper.
    #[cold]
    fn filter(&self, entries: &mut Entries, now: Tick, mut live: impl FnMut(&Entry) -> bool) {
        let mut due = Vec::new();
        for held in entries.fresh.drain(..) {
            if !live(&held.entry) {
                continue;
            }
            let in_order = entries
                .aged
                .back()
                .map_or(true, |last| reached(last.hand_off, held.hand_off));
            if in_order && !reached(held.hand_off, now) {
                entries.aged.push_back(held);
            } else {
                due.push(held.entry);
            }
        }
        while let Some(held) = entries.aged.front().filter(|h| reached(h.hand_off, now)) {
            if live(&held.entry) {
                due.push(held.entry);
            }
            entries.aged.pop_front();
        }
        if !due.is_empty() {
            self.hand_off(due.into_iter());
        }
        entries.trim();
    }

    fn hand_off(&self, entries: impl Iterator<Item = Entry>) {
        let mut inbox = self.inbox.lock().unwrap();
        inbox.extend(entries);
        // Relaxed: a hint; see `wake_check` for the ordering that matters.
        self.inbox_len.store(inbox.len(), Ordering::Relaxed);
    }

    /// After a batch became non-empty: whether the reaper may be parked with no deadline.
    fn wake_check(&self) -> Pushed {
        fence(Ordering::SeqCst); // orders the length store before the `idle` load (docs)
        if self.idle.load(Ordering::Relaxed) {
            Pushed::WakeReaper
        } else {
            Pushed::Filed
        }
    }

    /// The reaper: moves into `into` everything handed off, and the entries of every batch
    /// filed before tick `now` whose owner is not inside it (all batches' entries when
    /// `everything`: manual mode, where the caller's own batch must be seen too). Drops
    /// abandoned, empty batches.
    pub fn collect(&self, now: Tick, everything: bool, into: &mut Vec<Entry>) {
        {
            let mut inbox = self.inbox.lock().unwrap();
            into.append(&mut inbox);
            trim(&mut inbox);
            self.inbox_len.store(0, Ordering::Relaxed); // Relaxed: a hint, under the lock.
        }
        let mut all = self.all.lock().unwrap();
        // Relaxed (both loads): hints; the takeover below decides under the protocol.
        // Quiet: not pushed to for a whole tick. (Its tick merely older than `now` is not
        // enough: a reaper woken at a tick's start would take the batch of a thread busy
        // in it, whose next push was a few nanoseconds away, and then read the lines of
        // its trees, which mostly complete a moment later.)
        let quiet = |b: &Arc<Batch>| {
            b.len.load(Ordering::Relaxed) > 0
                && (everything || reached(b.tick.load(Ordering::Relaxed).wrapping_add(2), now))
        };
        if all.iter().any(quiet) {
            for batch in all.iter().filter(|b| quiet(b)) {
                // Relaxed: ordered before the pin loads by the heavy fence below.
                batch.taken.store(true, Ordering::Relaxed);
            }
            let fenced = self.heavy();
            for batch in all.iter().filter(|b| b.taken.load(Ordering::Relaxed)) {
                // Acquire: reads the owner's last unpin, after its entries' writes.
                // (Without the barrier a pin may not be visible yet: the batch stays with
                // its owner.)
                if fenced && !batch.pin.load(Ordering::Acquire) {
                    batch.entries.with_mut(|entries| {
                        // Safety: `taken` was set before the heavy fence and the owner is
                        // not pinned after it, so it keeps off until we unset `taken`.
                        let entries = unsafe { &mut *entries };
                        into.extend(entries.drain().map(|h| h.entry));
                        entries.trim();
                    });
                    batch.len.store(0, Ordering::Relaxed); // Relaxed: a hint.
                }
                // Release: the owner that reads this sees the entries we emptied.
                batch.taken.store(false, Ordering::Release);
            }
        }
        all.retain(|b| !(b.abandoned.load(Ordering::SeqCst) && b.len.load(Ordering::SeqCst) == 0));
    }

    /// The reaper, before it parks with no deadline: marks itself idle and reports whether
    /// any entry waits anywhere (then it must not park).
    pub fn park_check(&self) -> bool {
        self.idle.store(true, Ordering::Relaxed); // Relaxed: ordered by the fence below.
        fence(Ordering::SeqCst); // against the pusher's fence (module docs)
        let waiting = self.inbox_len.load(Ordering::Relaxed) > 0
            || self
                .all
                .lock()
                .unwrap()
                .iter()
                .any(|b| b.len.load(Ordering::Relaxed) > 0);
        if waiting {
            self.unidle();
        }
        waiting
    }

    /// Whether any entry waits in a batch or the inbox (hints: a push under way may be
    /// missed; `park_check` is the race-free check).
    pub fn waiting(&self) -> bool {
        // Relaxed (both): hints.
        self.inbox_len.load(Ordering::Relaxed) > 0
            || self
                .all
                .lock()
                .unwrap()
                .iter()
                .any(|b| b.len.load(Ordering::Relaxed) > 0)
    }

    /// The reaper is awake.
    pub fn unidle(&self) {
        self.idle.store(false, Ordering::Relaxed); // Relaxed: a hint for pushers.
    }

    /// [`enter`](Self::enter) on `batch`, which must be the calling thread's.
    #[inline]
    pub fn enter_with(&self, batch: &Batch) -> Active {
        let depth = &batch.active;
        // Relaxed loads: only this thread writes them; Relaxed stores: ordered before the
        // `closed` load (and the operation's loads of tables) by the light fence.
        let outer = depth.load(Ordering::Relaxed) == 0;
        if outer {
            let begun = batch.begun.load(Ordering::Relaxed);
            batch.begun.store(begun.wrapping_add(1), Ordering::Relaxed);
        }
        let entered = depth.load(Ordering::Relaxed);
        loop {
            depth.store(entered + 1, Ordering::Relaxed);
            self.fences.light();
            // Ordered after the depth store by the light fence (module docs). Acquire: a
            // `false` read from `end_moving` orders the re-anchorer's sweep before this
            // operation's reads of the tables (a Relaxed load let loom's model race them).
            if !self.moving.load(Ordering::Acquire) {
                break;
            }
            // Quiescent again (its depth as before: 0, or its callback's) while the
            // re-anchorer works ("Re-anchoring"). Release: as when an operation ends.
            depth.store(entered, Ordering::Release);
            self.wait_moved();
        }
        Active {
            depth: depth as *const AtomicU32,
            shared: false,
            // Relaxed: ordered after the depth store by the light fence (module docs).
            open: !self.closed.load(Ordering::Relaxed),
        }
    }

    /// Waits (spin, yield, sleep) until no re-anchoring is under way.
    fn wait_moved(&self) {
        let mut backoff = crate::sync::Backoff::default();
        // Acquire: what the re-anchorer wrote before it cleared the flag happens before
        // this thread's next reads of the tables.
        while self.moving.load(Ordering::Acquire) {
            backoff.wait();
        }
    }

    /// Marks the calling thread quiescent ("Re-anchoring") until the returned guard drops:
    /// around a callback, and around a wait inside an operation that holds nothing the
    /// re-anchorer rewrites. Dropping it waits for a re-anchoring under way to finish.
    #[inline]
    pub fn pause(&self) -> Paused<'_> {
        self.pause_on(self.own())
    }

    /// [`pause`](Self::pause) on `batch`, which must be the calling thread's (loom's
    /// models pass it explicitly, as to [`enter_with`](Self::enter_with)).
    #[inline]
    pub fn pause_with<'a>(&'a self, batch: &'a Batch) -> Paused<'a> {
        self.pause_on(Some(batch))
    }

    #[inline]
    fn pause_on<'a>(&'a self, batch: Option<&'a Batch>) -> Paused<'a> {
        if let Some(batch) = batch {
            // Relaxed load: only this thread writes it. Release: the operation's accesses
            // so far happen before a re-anchorer that reads it (Acquire) and then sweeps.
            let depth = batch.active.load(Ordering::Relaxed);
            batch.paused.store(depth, Ordering::Release);
        }
        Paused {
            batches: self,
            batch,
        }
    }

    /// Re-anchoring: makes every later operation wait at its entry (and every callback at
    /// its return), then waits until every other thread is quiescent. `false` when a
    /// thread without a batch (an exiting one) is inside an operation, or the barrier could
    /// not run: then nothing is excluded (call [`end_moving`](Self::end_moving) and give
    /// up, or try again).
    pub fn begin_moving(&self) -> bool {
        self.moving.store(true, Ordering::Relaxed); // Relaxed: ordered by the heavy fence
        if !self.heavy() {
            return false;
        }
        let own = self.own().map(|b| b as *const Batch);
        let busy: Vec<Arc<Batch>> = (self.all.lock().unwrap().iter())
            .filter(|b| Some(Arc::as_ptr(b)) != own)
            .cloned()
            .collect();
        let mut backoff = crate::sync::Backoff::default();
        // Acquire (both): reads the owner's release of its depth or pause, so what its
        // operation did happens before the re-anchorer's sweep.
        let quiescent = |b: &Arc<Batch>| {
            let depth = b.active.load(Ordering::Acquire);
            depth == 0 || b.paused.load(Ordering::Acquire) == depth
        };
        for batch in &busy {
            while !quiescent(batch) {
                if self.shared.load(Ordering::SeqCst) > 0 {
                    return false;
                }
                backoff.wait();
            }
        }
        // Threads without a batch cannot pause: any inside an operation is busy.
        self.shared.load(Ordering::SeqCst) == 0
    }

    /// Ends a re-anchoring: operations waiting at their entry go on.
    pub fn end_moving(&self) {
        // Release: the sweep's writes happen before the waiting threads' reads (Acquire in
        // `wait_moved`).
        self.moving.store(false, Ordering::Release);
    }

    /// Shutdown: closes the callback, then reports whether it may be dropped: `true` once
    /// no other thread is in an operation that found it open. `false` while one is (call
    /// again), or when the calling thread is itself in an operation (shutdown from inside
    /// the callback: it must not be dropped under its own feet).
    pub fn close(&self, caller_active: bool) -> bool {
        self.closed.store(true, Ordering::Relaxed); // Relaxed: ordered by the heavy fence
        if !self.heavy() || caller_active {
            return false; // without the barrier, a depth read as 0 proves nothing
        }
        // Acquire: reads each thread's release of its depth, so its callback happened
        // before.
        let others =
            (self.all.lock().unwrap().iter()).any(|b| b.active.load(Ordering::Acquire) > 0);
        !others && self.shared.load(Ordering::SeqCst) == 0
    }

    /// Begins a grace period, after the caller made something unreachable for operations
    /// that begin from now on (a retired table, [`engine`](crate::acker::engine)): notes
    /// the threads inside an operation now. Once [`grace_over`](Self::grace_over), every
    /// operation that could have reached it has ended.
    ///
    /// The same Dekker pair as the callback's close ("Closing the callback"): an operation
    /// stores its depth, runs the light fence and then loads the tables; the caller's
    /// store, then the heavy fence, then the depth loads. An operation whose depth this
    /// reads as 0 loads the tables after the store.
    pub fn grace(&self) -> Grace {
        if !self.heavy() {
            // Without the barrier a depth read as 0 proves nothing: the period is over
            // only after a later snapshot, behind a barrier that ran, says so.
            return Grace {
                busy: Vec::new(),
                shared: false,
                unfenced: true,
            };
        }
        // Acquire (all): reads each thread's release of its depth, so what its operation
        // read of the old table happened before the caller frees it.
        let busy = (self.all.lock().unwrap().iter())
            .filter(|b| b.active.load(Ordering::Acquire) > 0)
            .map(|b| (Arc::clone(b), b.begun.load(Ordering::Acquire)))
            .collect();
        Grace {
            busy,
            shared: self.shared.load(Ordering::SeqCst) > 0,
            unfenced: false,
        }
    }

    /// The heavy fence; a barrier that could not be run is counted (`false`). A registered
    /// process's `membarrier` has no documented way to fail, but if it does, the callers
    /// wait rather than trust a depth or pin read without it.
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

    /// Whether every thread that was inside an operation when `grace` began has left it
    /// (its depth is 0, or it began another outermost one since).
    pub fn grace_over(&self, grace: &mut Grace) -> bool {
        if grace.unfenced {
            *grace = self.grace();
            return false;
        }
        // Acquire (both): as in `grace`.
        grace.busy.retain(|(b, begun)| {
            b.active.load(Ordering::Acquire) > 0 && b.begun.load(Ordering::Acquire) == *begun
        });
        if grace.shared {
            // Threads without a batch cannot be told apart: wait for none to be inside.
            grace.shared = self.shared.load(Ordering::SeqCst) > 0;
        }
        grace.busy.is_empty() && !grace.shared
    }

    /// Marks an operation of a thread without a batch: one shared count, an RMW (rare:
    /// exiting threads; every thread under loom).
    fn enter_shared(&self) -> Active {
        loop {
            self.shared.fetch_add(1, Ordering::SeqCst);
            // The count's side of the Dekker pairs with `begin_moving` and `close` (their
            // flag store, heavy fence, count load). A SeqCst RMW then a SeqCst load would
            // do in the C++20 model, but loom treats SeqCst accesses as AcqRel and only
            // fences join its total order; the fence makes the code loom checks the code
            // that runs, and this path is rare (exiting threads).
            fence(Ordering::SeqCst);
            if !self.moving.load(Ordering::SeqCst) {
                break;
            }
            self.shared.fetch_sub(1, Ordering::SeqCst);
            self.wait_moved();
        }
        Active {
            depth: &self.shared as *const AtomicU32,
            shared: true,
            // SeqCst: after the count's RMW and the fence, as a batch's light fence orders
            // its depth store.
            open: !self.closed.load(Ordering::SeqCst),
        }
    }

    /// Marks a thread's batch abandoned (the thread is done with it).
    pub fn abandon(batch: &Batch) {
        batch.abandoned.store(true, Ordering::SeqCst);
    }

    /// Batches registered and not yet dropped.
    pub fn batches(&self) -> usize {
        self.all.lock().unwrap().len()
    }
}

mod local;

#[cfg(all(test, not(loom)))]
mod tests;
