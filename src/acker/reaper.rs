//! The reaper: one pass over every shard (`run_once`), and the one thread that runs passes.
//!
//! ## What it owns
//!
//! Per shard, behind the acker's wheel lock (held only by the reaper thread, or by `expire`
//! callers in manual mode, never by writers), a [`Timers`]: the shard's wheel, and for each
//! slot the wheel node holding its occupant's timer. Writers talk to it through the shard's
//! rings ([`ring`](super::ring)): the *inbox* rings (an [`arrival`](super::arrival) word
//! for every new slot, pushed by its opener on the ring of its lane, and for an init that
//! shortens a held orphan's deadline, on the ring of that orphan's open word) and the
//! *retired* rings (every completed slot, pushed by its completer on the ring of its lane). The reaper
//! reads a slot only when its timer fires, and writes it only to time it out or (after a
//! grace period) to free it, so a live tree's cache line stays with the threads acking it.
//!
//! ## A pass
//!
//! For each shard:
//!
//! 1. drain the retired rings: those slots are done; cancel their timers and mark them
//!    retiring, so that a late open word for one of them schedules nothing;
//! 2. drain the inbox rings: schedule each open word's slot at its deadline (at once if it
//!    is already due); move an existing timer earlier for an adjust word, which is on its
//!    open word's ring, after it;
//! 3. advance the wheel to `now`, at most [`BUDGET`] timers per shard per pass, so a mass
//!    expiry does not hold the lock (or starve other shards) for long. For each timer: skip
//!    a DONE slot, reschedule one whose real deadline moved later (`reset_timeout`) or that
//!    is not published yet, else claim DONE: `TimedOut` for an initialized tree, a silent
//!    drop for an orphan. A slot the reaper completes (here, or in step 2 when its deadline
//!    is already due) it marks retiring at once, as step 1 does, rather than push it on the
//!    retired rings for the next pass to drain;
//! 4. hand the retiring slots to the grace period, which frees them once no pinned thread
//!    can still see them. Not before every open word pushed before their retirement has been
//!    read: a slot's open word is pushed before the slot is published, so before it can
//!    complete, and the drain of each inbox ring reads every ticket taken before it
//!    began, unless it stops at a cell whose producer has not written it yet. If any ring
//!    of the shard stopped so, the retiring slots wait
//!    for a later pass: freeing one whose open word is still behind that cell would let the
//!    word schedule a timer for the slot's next occupant.
//!
//! Then, once for all shards (step 5): free the retired slots whose grace period has ended
//! (each a few slots after prefetching its lines), and take a snapshot of the pinned threads
//! for those retired since the last one ([`grace`]). While slots still wait, the next pass
//! is a tick away, or 100 µs if the tick is shorter.
//!
//! So every slot has at most one timer, and it is its current occupant's: the wheel holds
//! one node per pending root, not one per root seen within a timeout (a first version left
//! completed trees' timers in the wheel until their deadlines: with a 30 s timeout and 80k
//! trees in flight, 214 MiB of dead timers).
//!
//! Completions are delivered after the lock is released, so `on_complete` may call back
//! into the acker (even `expire`).
//!
//! ## Wake-ups
//!
//! `next_wake` holds the time of the next pass. A writer that opens a slot takes an inbox
//! ticket (an RMW on the ring's tail), then reads `next_wake` and, if its deadline is
//! sooner, lowers it by CAS and unparks the reaper. The reaper stores its next time, then
//! reads every inbox ring's tail with an RMW before parking. All of it is SeqCst, so for any
//! writer either the writer's read sees the reaper's store (and lowers it) or the reaper's
//! re-check sees the writer's ticket: no deadline is published while the reaper decides to
//! sleep without it waking. `unpark` before `park` leaves a token, so the order of those
//! two does not matter. With nothing scheduled the reaper parks without a timeout: an idle
//! acker costs no CPU.

use std::time::Duration;

use super::arrival;
#[cfg(doc)]
use super::grace;
use super::ledger::{prefetch, Ledger, DONE, INIT, INITING, READY, RESET};
use super::{Inner, Outcome};
use crate::clock::is_due;
use crate::error::ConfigError;
use crate::sync::{thread, Ordering};
use crate::wheel::TimerWheel;
use std::sync::{Arc, Mutex};

/// "Nothing scheduled": a wake time this far ahead is never reached in practice, and stays
/// within the wrapping timeline's comparison horizon.
pub(super) const FAR: u64 = 1 << 62;

/// Timers one pass handles per shard before moving on.
pub(super) const BUDGET: usize = 4096;
/// Due timers whose slots are prefetched together before they are reaped (step 3).
const REAP_BATCH: usize = 16;
/// How far ahead of the word it handles a drain prefetches a word's [`Timers::node`] entry
/// (steps 1 and 2), and how many slots after prefetching its lines it frees one (step 5).
const LOOKAHEAD: usize = 8;

/// No timer (in [`Timers::node`]).
const NONE: u32 = u32::MAX;
/// Retired, waiting to be freed: a late open word schedules nothing (in [`Timers::node`]).
const RETIRING: u32 = u32::MAX - 1;

/// One shard's reaper-side state.
pub(super) struct Timers {
    /// Timers name slots.
    wheel: TimerWheel<u32>,
    /// Per slot: the wheel node of its occupant's timer, [`NONE`] or [`RETIRING`].
    node: Box<[u32]>,
    /// Retired slots not yet handed to the grace period (step 3 of a pass).
    retiring: Vec<u32>,
}

impl Timers {
    pub(super) fn new(slots: usize, now: u64, resolution: Duration) -> Self {
        Timers {
            wheel: TimerWheel::with_resolution(now, resolution),
            node: vec![NONE; slots].into_boxed_slice(),
            retiring: Vec::new(),
        }
    }

    /// Schedules the slot's timer at `deadline`, or moves the one it has.
    fn set(&mut self, slot: usize, deadline: u64) {
        if let Some(key) = self.wheel.key_at(self.node[slot]) {
            debug_assert_eq!(self.wheel.get(key), Some(&(slot as u32)), "its own timer");
            self.wheel.reschedule(key, deadline);
        } else {
            self.node[slot] = self.wheel.schedule(deadline, slot as u32).index();
        }
    }

    /// For an adjust word: if the slot has a timer due after `deadline`, moves it there,
    /// or takes it out when `due` (the caller reaps the slot now) and returns `true`.
    fn advance_to(&mut self, slot: usize, deadline: u64, due: bool) -> bool {
        let Some(key) = self.wheel.key_at(self.node[slot]) else {
            return false; // no timer: fired and done, or retired
        };
        if self
            .wheel
            .deadline(key)
            .is_some_and(|d| is_due(d, deadline))
        {
            return false; // already due by then
        }
        if due {
            self.wheel.cancel(key);
            self.node[slot] = NONE;
            return true;
        }
        self.wheel.reschedule(key, deadline);
        false
    }

    /// Cancels the slot's timer and marks it retiring.
    fn retire(&mut self, slot: usize) {
        debug_assert_ne!(
            self.node[slot], RETIRING,
            "a slot retires once per occupant"
        );
        if let Some(key) = self.wheel.key_at(self.node[slot]) {
            debug_assert_eq!(self.wheel.get(key), Some(&(slot as u32)), "its own timer");
            self.wheel.cancel(key);
        }
        self.node[slot] = RETIRING;
        self.retiring.push(slot as u32);
    }

    /// Timers scheduled.
    pub(super) fn len(&self) -> usize {
        self.wheel.len()
    }
}

impl std::fmt::Debug for Timers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timers")
            .field("timers", &self.wheel.len())
            .field("retiring", &self.retiring.len())
            .finish_non_exhaustive()
    }
}

/// Starts loading a slot's [`Timers::node`] entry for writing: the entries of the slots a
/// drain or an expiry handles are spread over the whole array, so each would be a cache
/// miss, and an entry written with the miss pending holds up the next locked instruction
/// (the slot's DONE CAS in step 3) until it is served. A free function, so that step 3 can
/// call it while it borrows the wheel.
fn prefetch_node(node: &[u32], slot: usize) {
    if let Some(entry) = node.get(slot) {
        prefetch::<true>(std::ptr::from_ref(entry).cast());
    }
}

/// What one pass did.
#[derive(Debug, Default)]
pub(super) struct Pass {
    /// Completions delivered.
    pub(super) delivered: usize,
    /// Anything done at all: timers scheduled or fired, slots retired.
    pub(super) worked: bool,
    /// A shard had more due timers than the budget: run again without sleeping.
    pub(super) more: bool,
    /// A producer is mid-way (an inbox cell taken but not written, or a slot whose open word
    /// came but which is not published yet): the reaper yields before it runs again.
    pub(super) blocked: bool,
    /// Retired slots wait for operations still pinned.
    pub(super) grace_waits: bool,
    /// The earliest time anything is scheduled (`now + FAR` when nothing is).
    pub(super) next: u64,
}

/// One reaper pass at `now`. Tests, loom models and manual mode call it directly.
pub(super) fn run_once<T: Send + 'static>(inner: &Arc<Inner<T>>, now: u64) -> Pass {
    let mut completions = Vec::new();
    let mut pass = Pass {
        next: now.wrapping_add(FAR),
        ..Pass::default()
    };
    {
        let mut all = inner.wheels.lock().unwrap_or_else(|e| e.into_inner());
        // Scratch reused across shards: a pass allocates only what it retires.
        let mut slots = Vec::new();
        let mut arrived = Vec::new();
        let mut later = Vec::new();
        let mut reaped = Vec::new();
        let mut ended = Ended::default();
        for (index, (shard, timers)) in inner.shards.iter().zip(all.iter_mut()).enumerate() {
            let ledger = &shard.ledger;
            // 1. Completed slots.
            for lane in shard.retired.iter() {
                lane.drain(|word| slots.push(word - 1));
            }
            pass.worked |= !slots.is_empty();
            for i in 0..slots.len() {
                if let Some(&ahead) = slots.get(i + LOOKAHEAD) {
                    prefetch_node(&timers.node, ahead as usize);
                }
                timers.retire(slots[i] as usize);
            }
            slots.clear();
            // 2. New deadlines.
            // Lane by lane: an adjust word is on its open word's lane, after it.
            let mut stopped = false;
            for lane in shard.inbox.iter() {
                stopped |= lane.drain(|word| arrived.push(word));
            }
            pass.blocked |= stopped;
            pass.worked |= !arrived.is_empty();
            for i in 0..arrived.len() {
                if let Some(&ahead) = arrived.get(i + LOOKAHEAD) {
                    prefetch_node(&timers.node, arrival::slot(ahead));
                }
                let a = arrival::read(arrived[i], now, inner.tick_shift);
                if timers.node[a.slot] == RETIRING {
                    continue; // completed before we heard of it
                }
                let deadline = a.deadline.unwrap_or_else(|| ledger.deadline(a.slot));
                let due = is_due(deadline, now);
                if a.adjust && !timers.advance_to(a.slot, deadline, due) {
                    continue;
                }
                if due {
                    // Already due (a tiny timeout, a lagging pass, an init that shortened
                    // an orphan's deadline): reap now rather than a tick later from the
                    // wheel's current bucket.
                    match reap(inner, index, a.slot, now, &mut completions, &mut ended) {
                        Reaped::Again(at) => timers.set(a.slot, at),
                        Reaped::Retire => timers.retire(a.slot),
                        Reaped::Gone => {}
                    }
                } else {
                    timers.set(a.slot, deadline);
                }
            }
            arrived.clear();
            // 3. Expire, a few timers at a time: their slots are spread over the whole
            // table, so each reap would start with cache misses; the batch's bucket and slot
            // lines are prefetched first, so the misses overlap instead of following one
            // another.
            let mut handled = 0;
            let ledger = &inner.shards[index].ledger;
            let mut due = timers.wheel.advance(now).take(BUDGET);
            let mut batch = [0u32; REAP_BATCH];
            loop {
                let mut n = 0;
                for expired in due.by_ref() {
                    ledger.prefetch_entry(expired.value as usize);
                    prefetch_node(&timers.node, expired.value as usize);
                    batch[n] = expired.value;
                    n += 1;
                    if n == REAP_BATCH {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
                handled += n;
                for &slot in &batch[..n] {
                    let slot = slot as usize;
                    timers.node[slot] = NONE;
                    match reap(inner, index, slot, now, &mut completions, &mut ended) {
                        Reaped::Again(at) => later.push((slot, at)),
                        Reaped::Retire => reaped.push(slot),
                        Reaped::Gone => {}
                    }
                }
            }
            for (slot, at) in later.drain(..) {
                timers.set(slot, at);
            }
            for slot in reaped.drain(..) {
                timers.retire(slot);
            }
            ended.settle(inner, &mut pass);
            pass.more |= handled == BUDGET;
            pass.worked |= handled > 0;
            // 4. Free what completed, unless an open word may still be behind a cell that
            // stopped a lane's drain.
            if !stopped && !timers.retiring.is_empty() {
                for &slot in &timers.retiring {
                    timers.node[slot as usize] = NONE;
                }
                inner.grace.retire(index, &mut timers.retiring);
            }
            if let Some(delay) = timers.wheel.next_expiration_delay() {
                let at = now.wrapping_add(delay);
                if is_due(at, pass.next) {
                    pass.next = at;
                }
            }
        }
        // 5. Free the slots whose grace period has ended. While some still wait, come back
        // within a tick (or the snapshot interval, if longer): nothing else may be due for
        // a whole timeout, and their tombstones hold places in their buckets.
        // Each slot is freed LOOKAHEAD slots after its lines were prefetched (they are spread
        // over the whole table); freeing later than the grace period allows is always safe.
        let free = |(shard, slot): (usize, usize)| inner.shards[shard].ledger.free(slot);
        let mut behind = [(0, 0); LOOKAHEAD];
        let mut seen = 0;
        let (freed, waiting) = inner.grace.advance(inner.manual, |shard, slot| {
            inner.shards[shard].ledger.prefetch_for_free(slot);
            let last = std::mem::replace(&mut behind[seen % LOOKAHEAD], (shard, slot));
            if seen >= LOOKAHEAD {
                free(last);
            }
            seen += 1;
        });
        for i in seen.saturating_sub(LOOKAHEAD)..seen {
            free(behind[i % LOOKAHEAD]);
        }
        pass.worked |= freed > 0;
        pass.grace_waits = waiting > 0;
        if waiting > 0 {
            // Not sooner than the next snapshot may be taken: with a tiny resolution the
            // reaper would otherwise wake again and again to find it may not yet.
            let interval = super::grace::SNAPSHOT_INTERVAL.as_nanos() as u64;
            let soon = now.wrapping_add(inner.resolution.max(interval));
            if is_due(soon, pass.next) {
                pass.next = soon;
            }
        }
    }
    pass.delivered = completions.len();
    for completion in completions {
        inner.deliver(Some(completion));
    }
    pass
}

/// What the reaper ended in one shard during a pass, counted once at the end of it rather
/// than with an RMW per tree.
#[derive(Default)]
struct Ended {
    timed_out: u64,
    orphans: u64,
    /// Reaping waited on a producer mid-way ([`Pass::blocked`]).
    blocked: bool,
}

impl Ended {
    /// Gives the credits back, adds to the counters and resets.
    fn settle<T: Send + 'static>(&mut self, inner: &Inner<T>, pass: &mut Pass) {
        let counters = super::Counters::of(inner);
        if self.timed_out > 0 {
            counters
                .timed_out
                .fetch_add(self.timed_out, Ordering::SeqCst);
        }
        if self.orphans > 0 {
            counters
                .orphans_expired
                .fetch_add(self.orphans, Ordering::SeqCst);
        }
        inner
            .credits
            .give_many((self.timed_out + self.orphans) as usize);
        pass.blocked |= self.blocked;
        *self = Ended::default();
    }
}

/// What became of a slot whose timer fired.
enum Reaped {
    /// Still pending: schedule it again at this time.
    Again(u64),
    /// The reaper completed it (or dropped it, an orphan): the caller retires it, in the
    /// reaper's own lists rather than through the retired rings it would drain next pass.
    Retire,
    /// Completed by another thread, which retires it.
    Gone,
}

/// Handles a slot whose timer fired (or whose open word arrived already due).
fn reap<T: Send + 'static>(
    inner: &Inner<T>,
    shard: usize,
    slot: usize,
    now: u64,
    completions: &mut Vec<super::Completion<T>>,
    ended: &mut Ended,
) -> Reaped {
    let ledger: &Ledger<T> = &inner.shards[shard].ledger;
    let mut state = ledger.state(slot);
    loop {
        if state & DONE != 0 {
            // Completed since: its completer retires it.
            return Reaped::Gone;
        }
        if state & READY == 0 {
            // Its claimer pushed the open word and has not published yet (a timeout shorter
            // than that); it is the slot's occupant, as every timer is (module docs).
            ended.blocked = true;
            return Reaped::Again(now.wrapping_add(inner.resolution));
        }
        if state & RESET != 0 {
            // Clear the mark before reading the deadline: a reset after this read marks the
            // state again and the DONE CAS below fails.
            match ledger.clear_reset(slot, state) {
                Ok(cleared) => state = cleared,
                Err(moved) => {
                    state = moved;
                    continue;
                }
            }
        }
        let deadline = ledger.deadline(slot);
        if !is_due(deadline, now) {
            return Reaped::Again(deadline); // reset_timeout moved it later
        }
        if state & INITING != 0 && state & INIT == 0 {
            // An init is writing the payload right now; look again next tick.
            ended.blocked = true;
            return Reaped::Again(now.wrapping_add(inner.resolution));
        }
        match ledger.claim_done(slot, state) {
            Ok(()) if state & INIT != 0 => {
                completions.push(inner.complete(shard, slot, Outcome::TimedOut, now));
                ended.timed_out += 1;
                return Reaped::Retire;
            }
            Ok(()) => {
                // An orphan: acks or a fail that never saw their init.
                ended.orphans += 1;
                return Reaped::Retire;
            }
            Err(now_state) => state = now_state,
        }
    }
}

/// Lowers `next_wake` to `deadline` if that is sooner, and wakes the reaper.
pub(super) fn wake_for<T: Send + 'static>(inner: &Inner<T>, deadline: u64) {
    if inner.manual {
        return;
    }
    let mut wake = inner.next_wake.load(Ordering::SeqCst);
    loop {
        if is_due(wake, deadline) {
            return; // the reaper already runs at or before `deadline`
        }
        match inner
            .next_wake
            .compare_exchange(wake, deadline, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => break,
            Err(now) => wake = now,
        }
    }
    wake_now(inner);
}

/// Wakes the reaper for a pass now (a no-op in manual mode, where `expire` runs passes).
pub(super) fn wake_now<T: Send + 'static>(inner: &Inner<T>) {
    if let Some(thread) = inner.reaper_thread.get() {
        thread.unpark();
    }
}

/// Whether the calling thread is this acker's reaper (running `on_complete`).
pub(super) fn is_reaper<T: Send + 'static>(inner: &Inner<T>) -> bool {
    inner
        .reaper_thread
        .get()
        .is_some_and(|reaper| reaper.id() == thread::current().id())
}

/// Starts the reaper thread of a freshly built acker.
pub(super) fn spawn<T: Send + 'static>(acker: &super::Acker<T>) -> Result<(), ConfigError> {
    let inner = Arc::clone(&acker.handle().inner);
    let handle = thread::Builder::new()
        .name("ackwheel-reaper".into())
        .spawn(move || reaper_loop(&inner))
        .map_err(|e| ConfigError::Spawn {
            what: "reaper thread",
            reason: e.to_string(),
        })?;
    let _ = acker
        .handle()
        .inner
        .reaper_thread
        .set(handle.thread().clone());
    *acker
        .handle()
        .reaper
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(handle);
    Ok(())
}

fn reaper_loop<T: Send + 'static>(inner: &Arc<Inner<T>>) {
    while !inner.shutdown.load(Ordering::SeqCst) {
        let now = inner.clock.now();
        let pass = run_once(inner, now);
        // A producer between two steps: let it run rather than spin on it. Under loom also
        // an operation still pinned: the models' clock makes every wake time due at once,
        // so the reaper would otherwise spin on it (elsewhere it sleeps below till then).
        if pass.blocked || (cfg!(loom) && pass.grace_waits) {
            thread::yield_now();
        }
        if pass.more {
            continue;
        }
        if !pass.worked {
            inner.idle_wakeups.fetch_add(1, Ordering::Relaxed); // a statistic only
        }
        // A swap, so that the inbox check below is ordered after it (module docs).
        inner.next_wake.swap(pass.next, Ordering::SeqCst);
        // The re-check that makes the hand-off race-free (module docs).
        if (inner.shards.iter()).any(|s| s.inbox.iter().any(|lane| lane.pending())) {
            continue;
        }
        if inner.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let wake = inner.next_wake.load(Ordering::SeqCst);
        let now = inner.clock.now();
        if is_due(wake, now) {
            continue;
        }
        let sleep = wake.wrapping_sub(now);
        if sleep >= FAR / 2 {
            thread::park();
        } else {
            park_timeout(Duration::from_nanos(sleep));
        }
    }
}

/// Sleeps at most `duration`, or until unparked.
#[cfg(not(loom))]
fn park_timeout(duration: Duration) {
    thread::park_timeout(duration);
}

/// Loom has no timed park. The models drive the reaper with a clock that has moved past any
/// deadline by its next reading, so a timed sleep is never reached there; if one were, an
/// untimed park makes a missing wake-up show up as a deadlock instead of a hidden timeout.
#[cfg(loom)]
fn park_timeout(_duration: Duration) {
    thread::park();
}

/// Stops and joins the reaper thread, if there is one. Idempotent.
pub(super) fn stop<T: Send + 'static>(
    inner: &Inner<T>,
    reaper: &Mutex<Option<thread::JoinHandle<()>>>,
) {
    inner.shutdown.store(true, Ordering::SeqCst);
    let mut guard = reaper.lock().unwrap_or_else(|e| e.into_inner());
    if guard
        .as_ref()
        .is_some_and(|h| h.thread().id() == thread::current().id())
    {
        // Called from `on_complete` on the reaper itself: it cannot join itself. The flag
        // makes it exit after this pass; the last handle's drop joins it.
        return;
    }
    let handle = guard.take();
    drop(guard);
    if let Some(handle) = handle {
        handle.thread().unpark();
        // A panic in the reaper was already reported on its thread; nothing to add here.
        let _ = handle.join();
    }
}
