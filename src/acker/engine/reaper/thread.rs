//! The reaper thread (module docs of [`reaper`](super), "Sleeping" and "Callers first"):
//! its loop, its sleep decision after a pass (which a manual acker's driver makes the same
//! way), how long it sleeps at most, and its lag behind its timers while callers lead.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::pass::{pass, Runner};
use super::AWAKE;
use crate::acker::engine::time::REANCHOR_AFTER;
use crate::acker::engine::Engine;
use crate::acker::timers::ticks::{reached, Tick};
use crate::sync::{store_raced, Ordering};

/// Starts the reaper thread; `handle` keeps its join handle.
pub(in crate::acker::engine) fn spawn<T: Send + 'static>(
    engine: &Arc<Engine<T>>,
) -> std::io::Result<thread::JoinHandle<()>> {
    let engine = Arc::clone(engine);
    let handle = std::thread::Builder::new()
        .name("ackwheel-reaper".into())
        .spawn(move || reaper_loop(&engine))?;
    Ok(handle)
}

/// What to do after a pass: the reaper thread's sleep decision, which a task that drives a
/// manual acker's passes makes the same way (`Engine::next_pass`). Every variant but
/// [`Wait::Tick`] and [`Wait::Again`] has marked the reaper idle
/// ([`wake`](crate::acker::threads::wake)): whoever sleeps on it must call
/// `Threads::unidle` when it wakes, and must be woken by `Engine::wake_reaper`, or a
/// registration made while it sleeps waits for its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::acker::engine) enum Wait {
    /// A scan of the dirty groups is due by now (a registration since the pass, due
    /// sooner): one tick after `from` (the last pass's tick), not idle.
    Tick { from: u64 },
    /// A registration made a scan due while the reaper marked itself idle: a pass now (not
    /// idle).
    Again,
    /// Idle: `ticks` after `from` (the last pass's tick): the wheel's next due tick,
    /// housekeeping's next work or the tick by which the reaper must scan the dirty groups,
    /// whichever is soonest, or until woken.
    Ticks { ticks: u64, from: u64 },
    /// Idle with nothing pending anywhere: until woken.
    Forever,
    /// Shutting down: no more passes.
    Stop,
}

/// The sleep decision after a pass (module docs of [`reaper`](super)): a tick while a scan
/// is due by now; otherwise idle (then one more look at the summary), until the wheel's
/// next due tick, housekeeping's next work or the tick by which the reaper must scan, or
/// until woken when none has any.
pub(in crate::acker::engine) fn next_wait<T: Send + 'static>(engine: &Engine<T>) -> Wait {
    let (scan, next_due, now) = {
        let mut wheel = engine.reaper.lock_wheel();
        // Dead entries with nothing pending: the next tick's pass sweeps them, rather than
        // their deadlines ([`wheel`], "Dead entries").
        let next_due = if wheel.ask_idle_sweep(engine.pending()) {
            Some(wheel.now + 1)
        } else {
            wheel.timers.next_due()
        };
        (engine.threads.earliest_due(), next_due, wheel.now)
    };
    // While callers lead, the thread sleeps a lag past the tick it aims at, and leaves a
    // tick with no timer due to itself ("Callers first"): it aims that far before the tick
    // by which it must scan, to have scanned by then.
    let lag = engine.reaper.lead.lag() as Tick;
    let aim = |due: Option<Tick>| due.map(|due| due.wrapping_sub(lag));
    if aim(scan).is_some_and(|at| reached(at, now as Tick)) {
        engine.threads.unidle();
        return Wait::Tick { from: now };
    }
    // A longer sleep: idle first, then one more look at the summary (module docs of
    // [`reaper`](super)).
    let scan = aim(engine.threads.park_check((now as Tick).wrapping_add(lag)));
    if scan.is_some_and(|at| reached(at, now as Tick)) {
        return Wait::Again;
    }
    if engine.stopping() {
        return Wait::Stop;
    }
    // Until the next deadline, housekeeping's next work (a migration, a generation to
    // free, a table to shrink) or the scan of the dirty groups, whichever comes
    // first; unbounded when none.
    let house = engine.housekeeping_due(now as Tick).map(u64::from);
    let wait = [
        next_due.map(|due| due.saturating_sub(now)),
        house,
        scan.map(|due| u64::from(due.wrapping_sub(now as Tick))),
    ]
    .into_iter()
    .flatten()
    .min();
    // At most half the anchor's reach while anything is pending
    // ([`anchor`](crate::acker::engine::time)), so that passes keep the anchor near what
    // is stored and no re-anchoring is ever needed; and the thread, while trees are
    // pending, at most a quarter of the timeout, so that a registration never needs to
    // wake it (module docs, "Sleeping").
    let most = longest_sleep(engine, now);
    match wait {
        // Nothing pending: no wake-ups at all, once the linger is over ("Sleeping").
        None if most < REANCHOR_AFTER / 2 => Wait::Ticks {
            ticks: most,
            from: now,
        },
        None => Wait::Forever,
        Some(ticks) => Wait::Ticks {
            ticks: ticks.min(most),
            from: now,
        },
    }
}

/// How many of its sleeps while trees are pending (`Engine::pending_sleep`) the reaper
/// thread keeps after the last tree it saw pending ("Sleeping"): a server whose requests each complete
/// before the next begins would otherwise wake it from its park at every request.
pub(super) const LINGER_AGES: u64 = 4;

/// The most ticks the reaper thread sleeps on a timer at full tick `now` ([`next_wait`]):
/// `Engine::pending_sleep` while trees are pending and for [`LINGER_AGES`] of them after,
/// otherwise half the anchor's reach. A manual acker's driver is woken by every
/// registration that needs it, and sleeps as long as it likes.
pub(super) fn longest_sleep<T: Send + 'static>(engine: &Engine<T>, now: u64) -> u64 {
    let age = u64::from(engine.pending_sleep);
    if engine.reaper.manual {
        return REANCHOR_AFTER / 2;
    }
    if engine.pending() > 0 {
        // Relaxed (both): a hint for how long to sleep; the thread alone reads it to
        // decide, and a caller's publication only ever shortens a sleep with it.
        engine.reaper.busy_at.fetch_max(now, Ordering::Relaxed);
        return age;
    }
    let busy_at = engine.reaper.busy_at.load(Ordering::Relaxed); // Relaxed: as above
    if busy_at != 0 && now < busy_at + LINGER_AGES * age {
        age
    } else {
        REANCHOR_AFTER / 2
    }
}

fn reaper_loop<T: Send + 'static>(engine: &Engine<T>) {
    // Woken by its timer, the reaper should run at once even when every core is busy
    // ([`slice`](crate::sync::slice)).
    crate::sync::slice::ask_for_slice(crate::sync::slice::REAPER_SLICE_NS);
    // The tick the last timed sleep aimed at (`sleep_until`).
    let mut aimed = None;
    let tick = Duration::from_nanos(1 << engine.time.ticks.shift);
    while !engine.stopping() {
        // Running: no caller runs this pass in its place ("Callers first").
        // Raced by callers' CASes (`store_raced`: the loom models see a real store).
        store_raced(&engine.reaper.wakes_at, AWAKE, Ordering::SeqCst);
        engine.reaper.thread_wakes_at.store(AWAKE, Ordering::SeqCst);
        // A pass that panics (a clock's `now`) is counted and the loop goes on: a reaper
        // that stopped would leave every deadline unserved. A panic in a pass happens
        // before it moves entries out of the wheel or after it has delivered them
        // (`Engine::deliver` catches the callback's and the payload's), so nothing is lost.
        let runner = Runner::Reaper {
            everything: false,
            behind: engine.reaper.lead.lag(),
        };
        let pass = match catch_unwind(AssertUnwindSafe(|| pass(engine, runner))) {
            Ok(pass) => pass,
            Err(_) => {
                engine.count_reaper_panic();
                thread::park_timeout(tick); // do not spin on a clock that keeps panicking
                continue;
            }
        };
        if !pass.worked {
            engine.reaper.idle_wakeups.fetch_add(1, Ordering::Relaxed); // a statistic
        }
        match next_wait(engine) {
            Wait::Tick { from } => {
                sleep_until(engine, from.wrapping_add(1), 1, &mut aimed);
                continue; // not idle: nothing to undo
            }
            Wait::Again => continue,
            Wait::Stop => break,
            Wait::Forever => thread::park(),
            Wait::Ticks { ticks, from } => {
                let ticks = ticks.max(1);
                sleep_until(engine, from.wrapping_add(ticks), ticks, &mut aimed);
            }
        }
        engine.threads.unidle();
    }
}

/// Parks until full tick `tick` begins on the clock, or until woken, but never longer than
/// `ticks` ticks (the distance from the pass's tick); while callers lead, a backstop's lag
/// longer, even when `tick` has begun ("Callers first").
///
/// A duration of `ticks` ticks from now would wake the reaper as far into tick `tick` as
/// this moment is into the pass's tick: up to a tick late for every timeout, half a tick
/// on average (the stress harness's timeout lateness). The bound keeps a clock that stepped
/// back behind the wheel's time (a pass never goes back) from making the sleep longer, and
/// a clock that panics here costs the precision only: the pass's own read is the one whose
/// panic is counted. A second sleep aimed at the same tick (`aimed`) lasts the whole
/// `ticks`, as before: a clock that does not follow real time (a frozen or coarse custom
/// clock) can read just short of the tick after every wake, and must not make the reaper
/// spin; with the monotonic clock that happens only after an unpark.
pub(super) fn sleep_until<T: Send + 'static>(
    engine: &Engine<T>,
    tick: u64,
    ticks: u64,
    aimed: &mut Option<u64>,
) {
    let tick_nanos = 1u64 << engine.time.ticks.shift;
    let most = ticks.saturating_mul(tick_nanos);
    let again = aimed.replace(tick) == Some(tick);
    let now = catch_unwind(AssertUnwindSafe(|| engine.now())).ok();
    let wait = match now {
        Some(now) => wait_nanos(engine.tick_start(tick), now, most),
        None => Some(most),
    };
    let wait = if again { wait.map(|_| most) } else { wait };
    // While callers lead, the thread sleeps a lag past its timer: the first caller in the
    // tick runs the pass if a timer is due ("Callers first"); a tick for a scan alone,
    // callers leave to the thread unless it is a lateness past the lag.
    let lag = engine.reaper.lead.lag() * tick_nanos;
    let wait = match wait {
        None if lag > 0 => Some(0),
        wait => wait,
    };
    if let Some(wait) = wait {
        // The tick the timer ends in: `tick`, or later for a whole `ticks` from now (a
        // second sleep aimed at it); unknown with a clock that panicked. A caller runs the
        // pass once it begins ("Callers first"); a registration relies on the thread or a
        // caller to run it by then ("Sleeping").
        let ends = now.map_or(AWAKE, |now| {
            tick.max(engine.time.ticks.full(now.wrapping_add(wait)))
        });
        store_raced(&engine.reaper.wakes_at, ends, Ordering::SeqCst);
        let lag_ticks = lag >> engine.time.ticks.shift;
        engine
            .reaper
            .thread_wakes_at
            .store(ends.saturating_add(lag_ticks), Ordering::SeqCst);
        thread::park_timeout(Duration::from_nanos(wait + lag));
    }
}

/// Nanoseconds from `now` until `start` (on the clock's wrapping timeline), at most `most`;
/// `None` once `start` has come.
pub(super) fn wait_nanos(start: u64, now: u64, most: u64) -> Option<u64> {
    match start.wrapping_sub(now) as i64 {
        ..=0 => None,
        left => Some((left as u64).min(most)),
    }
}
