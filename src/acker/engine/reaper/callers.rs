//! The callers' side of "Callers first" (the reaper's module docs): when a caller that
//! starts a tree on the async acker runs the reaper's pass in the thread's place, how
//! late the thread may be, and the thread's lag behind its timers while callers lead.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::lead::BACKSTOP_MOST_NS;
use super::pass::{pass, Runner};
use super::thread::longest_sleep;
use super::AWAKE;
use crate::acker::engine::Engine;
use crate::acker::timers::ticks::{full_near, ticks_at_least_one};
use crate::sync::{fence, Ordering};

/// How late the reaper thread may be before a caller runs a pass it woke for with no timer
/// due (to scan the dirty groups), or one a registration woke it for
/// (`Engine::wake_reaper`), in nanoseconds; also how long a caller's pass that left a burst
/// leaves it to the thread. A thread only slow to be scheduled (tens of microseconds on an
/// idle machine) is left its pass, and the caller that registered does not run the pass it
/// has just woken the thread for.
/// At least a tick ([`late_after`]).
pub(super) const LATE_AFTER_NS: u64 = 250_000;

/// [`LATE_AFTER_NS`] in ticks of `shift` (2^shift ns), rounded up: one at the async
/// acker's 2^18 ns and at `build`'s 2^20, 245 at 2^10 (about 1 µs).
pub(in crate::acker::engine) fn late_after(shift: u32) -> u64 {
    ticks_at_least_one(LATE_AFTER_NS, shift)
}

/// Runs the pass the reaper thread's timer is set for once its tick has begun (module
/// docs, "Callers first"), on this caller, within a caller's bounds ("A caller's pass"):
/// `true` when it ran one. Reads the clock: for the tests, the models and the benches (the
/// async acker's inits help at their own tick, [`help_if_late_at`]).
#[cfg(any(test, loom, feature = "internals"))]
pub(in crate::acker::engine) fn help_if_late<T: Send + 'static>(engine: &Engine<T>) -> bool {
    if engine.reaper.wakes_at.load(Ordering::SeqCst) == AWAKE {
        return false;
    }
    // The clock is the user's: a panic must not reach the caller, whose init (in the async
    // acker) has taken its tree in already. Counted as a pass's panic, as the thread
    // counts one.
    let Ok(now) = catch_unwind(AssertUnwindSafe(|| engine.time.caller_full())) else {
        engine.count_reaper_panic();
        return false;
    };
    help_if_late_at(engine, now)
}

/// `help_if_late`'s work judged at the full tick `now`, which the caller read during its
/// operation: an init's stamp, the clock's tick or the next one when it was read, so at
/// most a tick behind the clock by now. A tick behind, the help waits for the next caller,
/// and a pass it claims publishes the next help a tick early (the pass reads the clock
/// itself). Cheap when no pass is due: a load and a compare, inlined into the init; the
/// pass's claim and run out of line. (A tracked request, whose init read the clock again
/// for this and called it out of line: 2,274 instructions, now 2,140, against `DashMap`
/// and a oneshot's 2,164-2,181; `benches/instructions/count.py track track-dashmap`.)
#[inline]
pub(in crate::acker::engine) fn help_if_late_at<T: Send + 'static>(
    engine: &Engine<T>,
    now: u64,
) -> bool {
    match due_to_callers(engine, now) {
        Some(wakes_at) => run_callers_pass(engine, wakes_at, now),
        None => false,
    }
}

/// The pass [`help_if_late_at`] found due at `now` (the thread published `wakes_at`):
/// claimed, run and published, unless another caller or the thread runs it.
#[inline(never)]
fn run_callers_pass<T: Send + 'static>(engine: &Engine<T>, wakes_at: u64, now: u64) -> bool {
    if engine.reaper.helping.swap(true, Ordering::SeqCst) {
        return false; // another caller runs it
    }
    // Claim this pass: fails if the thread ran since the load (it published again) or
    // another caller claimed it. Until the thread runs, the next help is a tick from now
    // (and a lateness more with no timer due).
    let claimed = engine
        .reaper
        .wakes_at
        .compare_exchange(wakes_at, now + 1, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok();
    // From here, the tick this caller published last.
    let mut wakes_at = now + 1;
    let mut ran = false;
    if claimed {
        let left;
        // As the thread's loop: a panicking pass (a clock's) is counted, and loses nothing.
        (ran, left) = match catch_unwind(AssertUnwindSafe(|| pass(engine, Runner::Caller))) {
            Ok(pass) => (pass.ran, pass.left),
            Err(_) => {
                engine.count_reaper_panic();
                (true, false)
            }
        };
        wakes_at = publish_next_help(engine, now, left);
    }
    engine.reaper.helping.store(false, Ordering::SeqCst);
    // The tick published last is a promise to registrations ("Sleeping"): the thread, their
    // backstop, must wake within a lag of it. Its sleep may end later (it was planned
    // before this pass filed earlier deadlines): then it plans again. Waking it at every
    // caller's pass instead would keep it running beside the workers, and callers find
    // no pass to run while it does. A pass that left a burst leaves it to the thread's
    // own timer when that ends within the longest lag, and published its tick
    // (`publish_next_help`): woken from here, the thread (its short slice) would take
    // this caller's core at once, and the call that ran the pass would wait milliseconds
    // off its core. A thread asleep longer is woken.
    if claimed
        && wakes_at != AWAKE
        && wakes_at.saturating_add(engine.reaper.lead.lag())
            < engine.reaper.thread_wakes_at.load(Ordering::SeqCst)
    {
        if let Some(thread) = engine.reaper.thread.get() {
            thread.unpark();
        }
    }
    ran
}

/// Whether the pass the thread's timer is set for is the callers' at the full tick `now`
/// ([`help_if_late_at`]): the tick the thread published, once that tick has begun and a
/// timer is due, or the thread is a lateness late for its scan of the dirty groups.
#[inline]
fn due_to_callers<T: Send + 'static>(engine: &Engine<T>, now: u64) -> Option<u64> {
    let wakes_at = engine.reaper.wakes_at.load(Ordering::SeqCst);
    if wakes_at == AWAKE {
        return None;
    }
    if now < wakes_at {
        return None; // the common case: the thread's tick has not begun
    }
    // Callers first for timers; for the thread's scan of the dirty groups (or its upkeep),
    // only once the thread is late for it, its backstop's lag included.
    let late = late_after(engine.time.ticks.shift);
    // Relaxed: a hint (`publish_timers`).
    let timers_due = now >= engine.reaper.timers_due_at.load(Ordering::Relaxed);
    let late_at = wakes_at
        .saturating_add(late)
        .saturating_add(engine.reaper.lead.lag());
    if (!timers_due && now < late_at) || engine.stopping() {
        return None;
    }
    Some(wakes_at)
}

/// After a caller's pass claimed at full tick `now` (`left`: it left a burst, `Pass::left`),
/// publishes when the next help is due, in place of the claim's `now + 1`; the tick it
/// published last.
///
/// Until the thread runs, the next help is due when the next timer is: when this pass left
/// work (a burst: the thread's), when the thread's timer ends if that is within the
/// longest lag ([`BACKSTOP_MOST_NS`]), and a lateness from now at the soonest (a caller
/// helps then only if the thread got no core); else the wheel's next due tick, or the
/// tick by which the reaper must scan the dirty groups, if sooner, and no later than the
/// thread would sleep (registrations rely on it, "Sleeping"); none with neither (a
/// registration that finds the thread idle publishes its tick then, `Engine::wake_reaper`).
fn publish_next_help<T: Send + 'static>(engine: &Engine<T>, now: u64, left: bool) -> u64 {
    let next = if left {
        // A burst: the thread's, on its own timer if that ends within the longest lag (a
        // lag past its tick, while callers led); a caller helps again if it has not run
        // by then. A thread asleep longer (it planned before this burst's groups were
        // filed), or with no timer (parked), is woken by the caller (`help_if_late_at`).
        let soonest = now + late_after(engine.time.ticks.shift);
        let within = now + ticks_at_least_one(BACKSTOP_MOST_NS, engine.time.ticks.shift);
        let thread = engine
            .reaper
            .thread_wakes_at
            .load(Ordering::SeqCst)
            .saturating_sub(engine.reaper.lead.lag());
        Some(Some(if thread <= within {
            soonest.max(thread)
        } else {
            soonest
        }))
    } else {
        // Not waited for: a pass under way (the thread's, which publishes its own tick)
        // leaves the claim's.
        engine.reaper.try_lock_wheel().map(|wheel| {
            let scan = scan_due(engine, wheel.now);
            [wheel.timers.next_due(), scan]
                .into_iter()
                .flatten()
                .min()
                .map(|next| next.clamp(now + 1, now + longest_sleep(engine, now)))
        })
    };
    let Some(next) = next else {
        return now + 1;
    };
    let ours = next.unwrap_or(AWAKE);
    let published = engine
        .reaper
        .wakes_at
        .compare_exchange(now + 1, ours, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok();
    // A registration between the check above and the CAS read `now + 1` and did not wake
    // the thread ("Sleeping"); its entry must not wait for the later tick. The fence pairs
    // with the registration's (the summary's tick stored, then the published tick read).
    fence(Ordering::SeqCst);
    // A CAS, not a `fetch_min`: the thread may have published itself running since.
    // (After a burst the tick is the thread's own timer's, which keeps that promise.)
    if !published {
        return now + 1;
    }
    if ours != now + 1
        && !left
        && scan_due(engine, now).is_some_and(|due| due < ours)
        && engine
            .reaper
            .wakes_at
            .compare_exchange(ours, now + 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    {
        return now + 1;
    }
    ours
}

/// The tick by which the reaper must scan the dirty groups, as a full tick near `now`
/// ([`dirty`](crate::acker::timers::dirty)); `None` when no group was marked since its last
/// scan.
fn scan_due<T: Send + 'static>(engine: &Engine<T>, now: u64) -> Option<u64> {
    engine.threads.earliest_due().map(|due| full_near(now, due))
}
