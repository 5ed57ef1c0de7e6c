//! The reaper: one pass over every shard (`run_once`), and the one thread that runs passes.
//!
//! ## A pass
//!
//! For each shard, under the wheels' lock (held only by the reaper thread, or by `expire`
//! callers in manual mode — never by writers):
//!
//! 1. drain the inbox: schedule each new slot at its deadline as `(slot, generation)`, or
//!    move the timer it already has (an init that shortens a held orphan's deadline sends
//!    its scheduled slot again; a `reset_timeout` sends nothing, step 2 re-checks);
//!    a slot found DONE is retired instead;
//! 2. advance the wheel to `now`, at most [`BUDGET`] timers per shard per pass so a mass
//!    expiry does not hold the lock (or starve other shards) for long; for each timer,
//!    skip it if the slot's generation moved on or it is DONE, reschedule it if its real
//!    deadline moved later (`reset_timeout`), else claim DONE: `TimedOut` for an
//!    initialized tree, a silent drop for an orphan;
//! 3. cancel the timers of the slots retired (completed by an ack or a fail), and hand the
//!    slots to crossbeam-epoch, which frees them once no pinned thread can still see them.
//!
//! Each slot records the wheel node of its timer (`Ledger::timer`, reaper-only), so a slot
//! has at most one timer and a completed tree's timer goes when its slot is retired. The
//! wheel therefore holds one node per pending root, not one per root seen within a timeout
//! (a first version left completed trees' timers in the wheel until their deadlines: with
//! a 30 s timeout and 80k trees in flight, 214 MiB of dead timers).
//!
//! Completions are delivered after the lock is released, so `on_complete` may call back
//! into the acker (even `expire`).
//!
//! ## Wake-ups
//!
//! `next_wake` holds the time of the next pass. A writer that opens a slot pushes it on the
//! inbox, then reads `next_wake` and, if its deadline is sooner, lowers it by CAS and
//! unparks the reaper. The reaper stores its next time, then looks at every inbox once more
//! before parking. All of it is SeqCst, so for any writer either the writer's read sees the
//! reaper's store (and lowers it) or the reaper's re-check sees the writer's push: no
//! deadline is published while the reaper decides to sleep without it waking. `unpark`
//! before `park` leaves a token, so the order of those two does not matter. With nothing
//! scheduled the reaper parks without a timeout: an idle acker costs no CPU.

use std::time::Duration;

use super::ledger::{generation, Ledger, DONE, INIT, INITING, NIL, READY, RESET};
use super::{Inner, Outcome};
use crate::clock::is_due;
use crate::error::ConfigError;
use crate::sync::{thread, Ordering};
use std::sync::{Arc, Mutex};

/// "Nothing scheduled": a wake time this far ahead is never reached in practice, and stays
/// within the wrapping timeline's comparison horizon.
pub(super) const FAR: u64 = 1 << 62;

/// Timers one pass handles per shard before moving on.
pub(super) const BUDGET: usize = 4096;

/// What one pass did.
#[derive(Debug, Default)]
pub(super) struct Pass {
    /// Completions delivered.
    pub(super) delivered: usize,
    /// Anything done at all: timers scheduled or fired, slots retired.
    pub(super) worked: bool,
    /// A shard had more due timers than the budget: run again without sleeping.
    pub(super) more: bool,
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
        let mut wheels = inner.wheels.lock().unwrap_or_else(|e| e.into_inner());
        let mut retired = Vec::new();
        // Scratch reused across shards: a pass allocates only what it retires.
        let mut arrivals = Vec::new();
        let mut later = Vec::new();
        for (index, (shard, wheel)) in inner.shards.iter().zip(wheels.iter_mut()).enumerate() {
            let ledger = &shard.ledger;
            ledger.drain_inbox(|slot, state| {
                if state & DONE != 0 {
                    if ledger.claim_retire(slot) {
                        retired.push(slot as u32);
                    }
                } else {
                    arrivals.push((slot as u32, generation(state)));
                }
            });
            pass.worked |= !arrivals.is_empty();
            for (slot, gen) in arrivals.drain(..) {
                let deadline = ledger.deadline(slot as usize);
                if is_due(deadline, now) {
                    // Already due (an init shortened an old orphan's deadline): reap now
                    // rather than a tick later from the wheel's current bucket.
                    if let Some(deadline) =
                        reap(inner, index, slot as usize, gen, now, &mut completions)
                    {
                        later.push((deadline, (slot, gen)));
                    }
                } else {
                    later.push((deadline, (slot, gen)));
                }
            }
            let mut handled = 0;
            for expired in wheel.advance(now).take(BUDGET) {
                handled += 1;
                let (slot, gen) = expired.value;
                // Safety: `wheels` is locked for this whole pass.
                unsafe {
                    if ledger.timer(slot as usize) == expired.key.index() {
                        ledger.set_timer(slot as usize, NIL);
                    }
                }
                if let Some(deadline) =
                    reap(inner, index, slot as usize, gen, now, &mut completions)
                {
                    later.push((deadline, (slot, gen)));
                }
            }
            for (deadline, (slot, gen)) in later.drain(..) {
                // Safety: `wheels` is locked for this whole pass.
                unsafe { set_timer(wheel, ledger, slot, gen, deadline) };
            }
            pass.more |= handled == BUDGET;
            ledger.drain_retired(&mut retired);
            pass.worked |= handled > 0 || !retired.is_empty();
            for &slot in &retired {
                // Safety: `wheels` is locked for this whole pass.
                unsafe { cancel_timer(wheel, ledger, slot) };
            }
            super::grace::reclaim(inner, index, std::mem::take(&mut retired));
            if let Some(delay) = wheel.next_expiration_delay() {
                let at = now.wrapping_add(delay);
                if is_due(at, pass.next) {
                    pass.next = at;
                }
            }
        }
    }
    pass.delivered = completions.len();
    for completion in completions {
        inner.deliver(Some(completion));
    }
    pass
}

/// A shard's wheel: timers name `(slot, generation)`.
type Wheel = crate::wheel::TimerWheel<(u32, u32)>;

/// Schedules the slot's timer at `deadline`, moving the one it has if it has one.
///
/// # Safety
/// The caller holds the acker's wheel lock (`Ledger::timer`).
unsafe fn set_timer<T>(wheel: &mut Wheel, ledger: &Ledger<T>, slot: u32, gen: u32, deadline: u64) {
    // Safety: the caller holds the wheel lock.
    let node = unsafe { ledger.timer(slot as usize) };
    if let Some(key) = wheel.key_at(node) {
        // A slot's timer is cancelled when the slot is retired, before it can be reused, so
        // a recorded node always holds this occupant's timer.
        debug_assert_eq!(
            wheel.get(key),
            Some(&(slot, gen)),
            "a slot's timer is its own"
        );
        wheel.reschedule(key, deadline);
        return;
    }
    let key = wheel.schedule(deadline, (slot, gen));
    // Safety: the caller holds the wheel lock.
    unsafe { ledger.set_timer(slot as usize, key.index()) };
}

/// Cancels the timer of a slot being retired, if it has one.
///
/// # Safety
/// The caller holds the acker's wheel lock (`Ledger::timer`).
unsafe fn cancel_timer<T>(wheel: &mut Wheel, ledger: &Ledger<T>, slot: u32) {
    // Safety: the caller holds the wheel lock.
    let node = unsafe { ledger.timer(slot as usize) };
    if node == NIL {
        return;
    }
    if let Some(key) = wheel.key_at(node) {
        debug_assert_eq!(
            wheel.get(key).map(|v| v.0),
            Some(slot),
            "a slot's timer is its own"
        );
        wheel.cancel(key);
    }
    // Safety: the caller holds the wheel lock.
    unsafe { ledger.set_timer(slot as usize, NIL) };
}

/// Handles one timer the wheel yielded. Returns a deadline to reschedule at, if any.
fn reap<T: Send + 'static>(
    inner: &Inner<T>,
    shard: usize,
    slot: usize,
    gen: u32,
    now: u64,
    completions: &mut Vec<(usize, super::Completion<T>)>,
) -> Option<u64> {
    let counters = &inner.shards[shard].counters;
    let ledger = &inner.shards[shard].ledger;
    let mut state = ledger.state(slot);
    loop {
        if generation(state) != gen || state & (READY | DONE) != READY {
            // Completed (and maybe reused) since: its completer retired it. A slot that is
            // not READY is being claimed for another root, by a thread that owns its fields
            // until it publishes; only a stale timer whose generation aliases can get here.
            return None;
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
            return Some(deadline); // reset_timeout moved it later
        }
        if state & INITING != 0 && state & INIT == 0 {
            // An init is writing the payload right now; look again next tick.
            return Some(now.wrapping_add(inner.resolution));
        }
        match ledger.claim_done(slot, state) {
            Ok(retire) if state & INIT != 0 => {
                completions.push(inner.finish(shard, slot, Outcome::TimedOut, retire, now));
                return None;
            }
            Ok(retire) => {
                // An orphan: acks or a fail that never saw their init.
                counters.orphans_expired.fetch_add(1, Ordering::SeqCst);
                inner.credits.give();
                if retire {
                    ledger.push_retired(slot);
                }
                return None;
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
    let inner = Arc::clone(&acker.handle.inner);
    let handle = thread::Builder::new()
        .name("ackwheel-reaper".into())
        .spawn(move || reaper_loop(&inner))
        .map_err(|e| ConfigError::Spawn {
            what: "reaper thread",
            reason: e.to_string(),
        })?;
    let _ = acker
        .handle
        .inner
        .reaper_thread
        .set(handle.thread().clone());
    *acker
        .handle
        .reaper
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(handle);
    Ok(())
}

fn reaper_loop<T: Send + 'static>(inner: &Arc<Inner<T>>) {
    while !inner.shutdown.load(Ordering::SeqCst) {
        let now = inner.clock.now();
        let pass = run_once(inner, now);
        if pass.more {
            continue;
        }
        if !pass.worked {
            inner.idle_wakeups.fetch_add(1, Ordering::Relaxed); // a statistic only
        }
        // A swap, so that the inbox check below is ordered after it (see `inbox_pending`).
        inner.next_wake.swap(pass.next, Ordering::SeqCst);
        // The re-check that makes the hand-off race-free (module docs).
        if inner.shards.iter().any(|s| s.ledger.inbox_pending()) {
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
