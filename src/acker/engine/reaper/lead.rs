//! Who runs the reaper's passes while callers lead (module docs of [`reaper`](super),
//! "Callers first"), and the reaper thread's lag behind its timers as their backstop.

use crate::acker::timers::ticks::ticks_at_least_one;
use crate::sync::{AtomicU64, Ordering};

/// The thread's lag behind its timers when callers begin to lead, in nanoseconds: long
/// enough for a busy runtime's next `track` to come (microseconds apart under load), short
/// enough to bound a timeout's lateness when none does. At least a tick ([`Lead::lag`]).
pub(super) const BACKSTOP_NS: u64 = 500_000;

/// The longest lag behind its timers the thread grows to while callers keep running the
/// passes due ([`Lead::after`]), in nanoseconds: about how late a timeout is when the load
/// stops (once: the thread's pass that delivers it ends the lead; one whose tree reached
/// the reaper only in that pass, a lag or two more). At [`BACKSTOP_NS`], a thread beside a
/// service whose requests keep timers due woke about 1,000 times a second, each a switch
/// onto a core its workers wanted.
pub(super) const BACKSTOP_MOST_NS: u64 = 2_000_000;

/// Whether callers lead, and the thread's lag behind its timers while they do.
#[derive(Debug, Default)]
pub(super) struct Lead {
    /// While callers lead (they ran the last passes due), the thread's lag in ticks: it
    /// sleeps that far past its timers and judges its passes that far behind the clock;
    /// 0 while they do not.
    lag: AtomicU64,
    /// The callers' passes counted (`Reaper::caller_passes`) at the thread's last pass
    /// that delivered nothing: whether callers ran one since.
    passes: AtomicU64,
}

impl Lead {
    /// The ticks the thread sleeps past its timer, and judges its pass behind the clock,
    /// while callers lead: from [`BACKSTOP_NS`] up to [`BACKSTOP_MOST_NS`]; none otherwise.
    pub(super) fn lag(&self) -> u64 {
        // Relaxed: a hint for the thread's timing, set by callers' passes and the thread's;
        // a stale read costs one pass a lag's lateness or the callers one race.
        self.lag.load(Ordering::Relaxed)
    }

    /// Who leads after a pass (`caller`'s or the thread's) that left work (`left`),
    /// delivered timeouts (`delivered`) and ran for timers come due (`timers`) or not, and
    /// the thread's lag while they do, in ticks of `shift`; `caller_passes`: the callers'
    /// passes counted so far:
    ///
    /// * callers lead once one runs a pass for timers (a scan of the dirty groups alone is
    ///   the thread's), at a lag of [`BACKSTOP_NS`], unless it leaves work (a
    ///   burst: the thread's);
    /// * each pass of the thread that finds nothing they left, with a caller's pass run
    ///   since its last, doubles the lag, up to [`BACKSTOP_MOST_NS`]: they keep coming in
    ///   time, and the thread wakes less often beside them;
    /// * the thread's first pass that delivers timeouts they left (judged a lag behind:
    ///   they no longer come in time) ends the lead.
    pub(super) fn after(
        &self,
        caller: bool,
        left: bool,
        delivered: bool,
        timers: bool,
        caller_passes: u64,
        shift: u32,
    ) {
        // Relaxed (all): `lag`'s hint. Passes may race here (a caller's beside the
        // thread's): a lost update costs a lag's doubling or one more lead, never a
        // timeout (each is taken by one CAS, and the thread delivers what callers leave).
        let lag = self.lag();
        let next = if caller {
            match (left, timers) {
                (true, _) => 0,
                (false, true) if lag == 0 => ticks_at_least_one(BACKSTOP_NS, shift),
                (false, _) => lag,
            }
        } else if delivered {
            0
        } else {
            let helped = self.passes.swap(caller_passes, Ordering::Relaxed) != caller_passes;
            if lag > 0 && helped {
                (lag * 2).min(ticks_at_least_one(BACKSTOP_MOST_NS, shift))
            } else {
                lag
            }
        };
        if next != lag {
            self.lag.store(next, Ordering::Relaxed);
        }
    }
}
