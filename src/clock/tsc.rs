//! [`MonotonicClock`] readings bounded from the CPU's time-stamp
//! counter, for callers that only need to know which tick of a coarse timeline they are in
//! (the Acker's callers: one stamp when a root is created, one `elapsed` when it completes).
//!
//! `clock_gettime` costs 23-36 ns on the development VM, `rdtsc` about 9. Each thread keeps
//! an *anchor*: the counter and the clock's reading taken together at its last real read.
//! A later call reads only the counter and turns the cycles since the anchor into a range
//! of nanoseconds, with the counter's rate known to within 1/64 ([`MARGIN_SHIFT`]): `bounds` returns
//! `(lo, hi)` with the true reading at most `hi`. When both ends fall in one tick, that
//! tick is the caller's; when they straddle a boundary the caller reads the clock for real
//! (and so anchors again), about once a tick per thread.
//!
//! ## Why the tick is never behind the clock
//!
//! * The anchor's counter is read *before* its clock reading, so the anchor's nanoseconds
//!   are at or after the true time of its counter value: every estimate from it errs late,
//!   by at most the gap between the two reads. An anchor whose reads are more than
//!   [`MAX_GAP_CYCLES`] apart (the thread was preempted between them) is not kept.
//! * The rate comes from two anchors at least [`CALIBRATION_NS`] apart; each is off by at
//!   most its gap, so the rate is off by far less than `MARGIN` (1/64), and `hi` uses the
//!   rate plus the margin: the true time is at most `hi`. A window that spans a
//!   suspend-to-idle (the counter runs on, `CLOCK_MONOTONIC` stops) would give a rate too
//!   low, and ranges below the clock: so the rate is published only when two consecutive
//!   windows agree to within [`AGREEMENT_SHIFT`] (1/1024), which a window with a stop in
//!   it does not (a stop short enough to agree moves the rate by less than the margin).
//! * The counter must be one timeline for every CPU: used only where the CPU says its
//!   counter is invariant (constant rate, running in every sleep state) and Linux itself
//!   keeps `CLOCK_MONOTONIC` on it (`current_clocksource` is `tsc`: the kernel has checked
//!   that the CPUs' counters agree, and would have left the TSC if they did not). A thread
//!   that moves to a CPU whose counter reads lower sees cycles go backwards, and reads the
//!   clock for real. (The kernel's check cannot see differences smaller than the time a
//!   message takes between CPUs, well under a microsecond: a range can be that much early.)
//! * What was true when the process started is checked again at every real read: the
//!   clock must not be above the range the thread's previous anchor gives for the same
//!   moment, by more than [`SKEW_TOLERANCE_NS`]. A kernel that later finds the counters
//!   unreliable and leaves the TSC, or a counter whose rate changed, shows up there, and
//!   the counter is then not used again by this process ([`read`]): callers read the clock
//!   for real from then on. This is after the fact: a rate change beyond the margin (an
//!   `adjtimex` tick adjustment) gives early ranges until each thread's next real read,
//!   about a tick.
//!
//! So a caller's tick is the clock's tick, or the next one when its range ends within an
//! anchor gap (tens of nanoseconds) past a boundary: a deadline computed from it is never
//! early. It can be later than that after a suspend-to-idle that stopped the clock and not
//! the counter: both ends of the range are then late by the stop (up to [`MAX_CYCLES`]'
//! worth of it, a few seconds), until the range straddles a boundary and the thread reads
//! the clock again, within a tick; a deadline is then late, never early. Elsewhere (another
//! OS or CPU, Miri, loom) [`available`] is `false`.
//!
//! ## Why not `quanta`, or `CLOCK_MONOTONIC_COARSE`
//!
//! The reaper judges deadlines on `CLOCK_MONOTONIC` itself, so a caller's tick must be that
//! clock's tick or the next, never an earlier one: this module returns a range that errs
//! late, checked again at every real read. `quanta` gives a point estimate from a rate it
//! calibrates once, in a busy loop inside the first `Clock`, and keeps for the process's
//! life (its own docs say readings may drift past or behind the reference clock); it trusts
//! the counter from CPUID alone, not from the clocksource the kernel keeps time on; and its
//! cheap `recent` time needs an upkeep thread that wakes at its interval, where the reaper
//! sleeps while nothing is due. `CLOCK_MONOTONIC_COARSE` is the time of the last timer
//! interrupt (4 ms steps on the development kernel, HZ=250): up to a jiffy behind the
//! clock, so a tick taken from it could make a deadline early. The price that makes the
//! counter worth it: `rdtsc` about 9 ns against 23-36 for `clock_gettime`, which took the
//! one-thread lifecycle (init and 4 acks) from 287 to 262 ns a tree (by alternating runs
//! of a probe that is not in the tree). Not measured here: `quanta`'s own
//! read cost and drift on this machine.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, TryLockError};

use super::{Clock, MonotonicClock};

/// The counter's rate is trusted to within 1/64 (1.6 %), fifty times what calibration
/// can be off by.
const MARGIN_SHIFT: u32 = 6;
/// An anchor's counter and clock reads at most this many cycles apart (6 µs at 1.6 GHz).
const MAX_GAP_CYCLES: u64 = 10_000;
/// Calibration spans at least this much of the clock: with two gaps of at most about
/// 6 µs each, the rate is off by at most 0.06 %.
const CALIBRATION_NS: u64 = 20_000_000;
/// Cycles since the anchor beyond which a call reads the clock for real (a few seconds:
/// the range is wider than a tick long before).
const MAX_CYCLES: u64 = 1 << 34;
/// How far above the range of its previous anchor a thread's clock reading may be before
/// the counter is distrusted: the counters of two CPUs may differ by less than the kernel's
/// synchronization check can see (well under a microsecond), and a thread that moved
/// between its anchor and its read sees that difference. A clock source change or a rate
/// change shows up as far more within a tick.
const SKEW_TOLERANCE_NS: u64 = 10_000;
/// Two calibration windows agree when their rates differ by at most 1/1024 of the rate.
const AGREEMENT_SHIFT: u32 = 10;
/// A calibration window longer than this (a second) starts again: a window that old says
/// more about the gaps between the process's reads than about the counter.
const CALIBRATION_MAX_NS: u64 = 1_000_000_000;

/// A thread's last real read: the counter, then the clock. `cycles == 0`: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Anchor {
    cycles: u64,
    nanos: u64,
}

thread_local! {
    static ANCHOR: Cell<Anchor> = const { Cell::new(Anchor { cycles: 0, nanos: 0 }) };
}

/// What the process knows of the counter.
static COUNTER: Counter = Counter::new();

/// Whether [`bounds`] can ever answer here (decided once per process).
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
fn detect() -> bool {
    use std::arch::x86_64::__cpuid;
    #[allow(unused_unsafe)]
    // Safety: `cpuid` exists on every x86_64 CPU; leaf 0x8000_0000 reports the highest
    // extended leaf, checked before 0x8000_0007 is read. (Safe to call since Rust 1.87;
    // the MSRV needs the block.)
    let invariant = unsafe {
        __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    };
    invariant
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
fn detect() -> bool {
    false
}

#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
#[inline]
fn cycles() -> u64 {
    // Safety: `rdtsc` exists on every x86_64 CPU and has no preconditions. It is not
    // ordered with the loads around it, which moves the reading by a few nanoseconds at
    // most: the caller's operation happens within them either way.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
#[inline]
fn cycles() -> u64 {
    0 // never used: `available` is false here
}

/// Bounds on [`MonotonicClock`]'s reading now, from this thread's anchor: the true reading
/// is at most `hi` (module docs), and at least `lo` minus an anchor gap. `None` when the
/// thread has no anchor, the rate is not calibrated yet, or the anchor is too old: then
/// [`read`] the clock. Only call it where [`available`] said so.
#[inline]
pub(crate) fn bounds() -> Option<(u64, u64)> {
    // Relaxed: the scale is one self-contained value; 0 means "not (or no longer) known".
    let scale = COUNTER.scale.load(Ordering::Relaxed);
    // `try_with`: smaller than `get`'s `with` (no panic path), so that it inlines into
    // every caller (a direct thread-local access); the anchor never fails to be there (a
    // `const` `Cell`, nothing to drop), and none (cycles 0) would read the clock anyway.
    let anchor = ANCHOR.try_with(Cell::get).unwrap_or_default();
    range(anchor, scale, cycles())
}

/// The range at counter value `now` from `anchor` at `scale` (pure, for the tests).
#[inline]
fn range(anchor: Anchor, scale: u64, now: u64) -> Option<(u64, u64)> {
    let since = now.wrapping_sub(anchor.cycles);
    // A counter below the anchor (another CPU's) wraps to a huge `since`.
    if anchor.cycles == 0 || scale == 0 || since >= MAX_CYCLES {
        return None;
    }
    let nanos = ((u128::from(since) * u128::from(scale)) >> 32) as u64;
    let margin = (nanos >> MARGIN_SHIFT) + 1;
    Some((
        anchor.nanos.wrapping_add(nanos - margin.min(nanos)),
        anchor.nanos.wrapping_add(nanos + margin),
    ))
}

/// A real reading of [`MonotonicClock`], which also anchors this thread, checks the
/// counter against the clock, and calibrates the rate until it is known.
pub(crate) fn read() -> u64 {
    let before = cycles();
    let nanos = MonotonicClock.now();
    let after = cycles();
    ANCHOR.with(|anchor| COUNTER.observe(anchor, before, nanos, after));
    nanos
}

/// The process's knowledge of the counter: its rate, and whether it was caught
/// disagreeing with the clock.
struct Counter {
    /// Nanoseconds per cycle times 2^32, once calibrated; 0 until then, and for good once
    /// the counter was caught disagreeing with the clock.
    scale: AtomicU64,
    /// Set (under `calibration`'s lock) once the counter was caught disagreeing with the
    /// clock: never calibrate again.
    distrusted: AtomicBool,
    /// Calibration's progress, until `scale` is set.
    calibration: Mutex<Calibration>,
}

impl Counter {
    const fn new() -> Self {
        Counter {
            scale: AtomicU64::new(0),
            distrusted: AtomicBool::new(false),
            calibration: Mutex::new(Calibration::new()),
        }
    }

    /// A real read: the counter `before` and `after` a clock reading of `nanos`. Checks
    /// the thread's previous `anchor` against it, anchors the thread again, and offers the
    /// anchor to calibration while the rate is unknown.
    fn observe(&self, anchor: &Cell<Anchor>, before: u64, nanos: u64, after: u64) {
        // Relaxed (this and the flag's loads): self-contained values; the scale is stored
        // and the flag set only under `calibration`'s lock, which orders the two.
        let scale = self.scale.load(Ordering::Relaxed);
        if contradicts(anchor.get(), scale, after, nanos) {
            self.distrust();
            return;
        }
        if after.wrapping_sub(before) > MAX_GAP_CYCLES || before == 0 {
            return;
        }
        let new = Anchor {
            cycles: before,
            nanos,
        };
        anchor.set(new);
        if scale != 0 || self.distrusted.load(Ordering::Relaxed) {
            return;
        }
        // Another thread calibrating now: its anchor serves as well as ours.
        let mut calibration = match self.calibration.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        if let Some(scale) = calibration.offer(new) {
            if !self.distrusted.load(Ordering::Relaxed) {
                self.scale.store(scale, Ordering::Relaxed);
            }
        }
    }

    /// Stops the counter's use for the rest of the process: every later [`bounds`] is
    /// `None`. Under calibration's lock, so that a calibration cannot store a rate after
    /// this (it checks the flag under the same lock).
    #[cold]
    fn distrust(&self) {
        let _calibration = self.calibration.lock().unwrap_or_else(|e| e.into_inner());
        // Relaxed: ordered with calibration's store by the lock.
        self.distrusted.store(true, Ordering::Relaxed);
        self.scale.store(0, Ordering::Relaxed);
    }
}

/// Whether a real reading `nanos`, taken before the counter read `after`, lies above the
/// range that `anchor` gives for `after` by more than [`SKEW_TOLERANCE_NS`]: the true time
/// at `after` is at least `nanos`, so a trustworthy counter's `hi` is never below it.
fn contradicts(anchor: Anchor, scale: u64, after: u64, nanos: u64) -> bool {
    range(anchor, scale, after).is_some_and(|(_, hi)| nanos > hi.saturating_add(SKEW_TOLERANCE_NS))
}

/// Calibration in progress: the start of the current window, and the rate the window
/// before it gave.
#[derive(Debug)]
struct Calibration {
    start: Option<Anchor>,
    previous: Option<u64>,
}

impl Calibration {
    const fn new() -> Self {
        Calibration {
            start: None,
            previous: None,
        }
    }

    /// Offers a new anchor: the rate, once two consecutive windows of
    /// [`CALIBRATION_NS`] .. [`CALIBRATION_MAX_NS`] agree (module docs).
    fn offer(&mut self, anchor: Anchor) -> Option<u64> {
        let Some(start) = self.start else {
            self.start = Some(anchor);
            return None;
        };
        let nanos = anchor.nanos.wrapping_sub(start.nanos);
        if (nanos as i64) < CALIBRATION_NS as i64 {
            return None; // too short yet (or the clock went back: wait)
        }
        self.start = Some(anchor);
        if nanos > CALIBRATION_MAX_NS {
            self.previous = None;
            return None;
        }
        let scale = calibrate(start, anchor);
        let agreed = match (self.previous, scale) {
            (Some(a), Some(b)) => a.abs_diff(b) <= a >> AGREEMENT_SHIFT,
            _ => false,
        };
        self.previous = scale;
        agreed.then_some(scale?)
    }
}

/// The rate between two anchors, in nanoseconds per cycle times 2^32, once they are far
/// enough apart; `None` before, or if the counter did not move forward with the clock.
fn calibrate(first: Anchor, now: Anchor) -> Option<u64> {
    let nanos = now.nanos.wrapping_sub(first.nanos);
    let cycles = now.cycles.wrapping_sub(first.cycles);
    if (nanos as i64) < CALIBRATION_NS as i64 || (cycles as i64) <= 0 {
        return None;
    }
    u64::try_from((u128::from(nanos) << 32) / u128::from(cycles))
        .ok()
        .filter(|&scale| scale != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter at `ghz` GHz that started at `origin` when the clock read `epoch`.
    struct Fake {
        ghz: f64,
        origin: u64,
        epoch: u64,
    }

    impl Fake {
        fn cycles_at(&self, nanos: u64) -> u64 {
            self.origin + ((nanos - self.epoch) as f64 * self.ghz) as u64
        }
        fn anchor(&self, nanos: u64) -> Anchor {
            Anchor {
                cycles: self.cycles_at(nanos),
                nanos,
            }
        }
    }

    #[test]
    fn the_true_reading_lies_within_the_range_and_never_above_hi() {
        for ghz in [0.8, 1.6, 2.1, 3.7] {
            let fake = Fake {
                ghz,
                origin: 1 << 40,
                epoch: 5_000_000_000,
            };
            // Calibrated from anchors 20 ms apart whose clock reads came 2 µs late.
            let scale = calibrate(
                fake.anchor(fake.epoch),
                Anchor {
                    nanos: fake.epoch + 20_000_000 + 2_000,
                    ..fake.anchor(fake.epoch + 20_000_000)
                },
            )
            .expect("20 ms is enough");
            let anchor = fake.anchor(fake.epoch + 30_000_000);
            for after in [0, 1, 999, 250_000, 1_000_000, 7_777_777, 900_000_000] {
                let truth = anchor.nanos + after;
                let (lo, hi) = range(anchor, scale, fake.cycles_at(truth)).unwrap();
                assert!(
                    lo <= truth && truth <= hi,
                    "{ghz} GHz, {after} ns: {lo}..{hi}"
                );
                // Narrow: within the margin of the distance from the anchor.
                assert!(
                    hi - lo <= 2 * (after / 60) + 4,
                    "{ghz} GHz, {after} ns: {lo}..{hi}"
                );
            }
        }
    }

    #[test]
    fn no_range_without_an_anchor_a_rate_or_a_forward_counter() {
        let anchor = Anchor {
            cycles: 1_000,
            nanos: 77,
        };
        let scale = 1 << 31; // 0.5 ns per cycle
        assert_eq!(
            range(anchor, scale, 3_000),
            Some((77 + 1000 - 16, 77 + 1000 + 16))
        );
        assert_eq!(range(Anchor::default(), scale, 3_000), None, "no anchor");
        assert_eq!(range(anchor, 0, 3_000), None, "not calibrated");
        assert_eq!(range(anchor, scale, 999), None, "the counter went back");
        assert_eq!(range(anchor, scale, 1_000 + MAX_CYCLES), None, "too old");
    }

    /// `scale` is the rate of a counter at `ghz` GHz, to 1/4096.
    fn assert_rate(scale: u64, ghz: f64) {
        let expected = ((1u128 << 32) as f64 / ghz) as u64;
        assert!(
            scale.abs_diff(expected) <= expected >> 12,
            "{scale} vs {expected}"
        );
    }

    /// Offers each of `anchors` in turn; returns what each offer gave.
    fn offers(calibration: &mut Calibration, anchors: &[Anchor]) -> Vec<Option<u64>> {
        anchors.iter().map(|&a| calibration.offer(a)).collect()
    }

    #[test]
    fn a_rate_is_published_only_when_two_windows_in_a_row_agree() {
        let fake = Fake {
            ghz: 2.1,
            origin: 1 << 40,
            epoch: 1_000_000_000,
        };
        let at = |ms: u64| fake.anchor(fake.epoch + ms * 1_000_000);
        let mut calibration = Calibration::new();
        let got = offers(&mut calibration, &[at(0), at(5), at(25), at(30), at(46)]);
        assert_eq!(
            got[..4],
            [None, None, None, None],
            "one window is not enough"
        );
        let scale = got[4].expect("two 20+ ms windows at one rate agree");
        assert_rate(scale, 2.1);
    }

    #[test]
    fn a_window_that_spans_a_stop_of_the_clock_is_not_trusted() {
        // The counter runs on while the clock stands still for 200 ms (suspend-to-idle):
        // the window around the stop measures a rate far too low.
        let fake = Fake {
            ghz: 3.0,
            origin: 1 << 41,
            epoch: 2_000_000_000,
        };
        let stop = 200_000_000u64;
        let at = |ms: u64| fake.anchor(fake.epoch + ms * 1_000_000);
        let after_stop = |ms: u64| Anchor {
            nanos: fake.epoch + ms * 1_000_000,
            cycles: fake.cycles_at(fake.epoch + ms * 1_000_000 + stop),
        };
        let mut calibration = Calibration::new();
        let got = offers(
            &mut calibration,
            &[at(0), at(30), after_stop(60), after_stop(90)],
        );
        assert_eq!(
            got,
            [None, None, None, None],
            "the window with the stop disagrees"
        );
        // Two clean windows after it agree again.
        let scale = calibration
            .offer(after_stop(120))
            .expect("two clean windows after the stop");
        assert_rate(scale, 3.0);
    }

    #[test]
    fn a_stop_of_a_few_percent_of_a_window_is_caught_too() {
        // A 1 ms stop in a 30 ms window moves its rate by 3 %: over the 1/64 margin, so the
        // windows must disagree.
        let fake = Fake {
            ghz: 2.5,
            origin: 1 << 40,
            epoch: 0,
        };
        let at = |ms: u64| fake.anchor(fake.epoch + ms * 1_000_000);
        let after_stop = |ms: u64| Anchor {
            nanos: fake.epoch + ms * 1_000_000,
            cycles: fake.cycles_at(fake.epoch + ms * 1_000_000 + 1_000_000),
        };
        let mut calibration = Calibration::new();
        let got = offers(&mut calibration, &[at(0), at(30), after_stop(60)]);
        assert_eq!(
            got,
            [None, None, None],
            "a window with a 1 ms stop disagrees"
        );
    }

    /// Feeds `counter` a real read at clock reading `nanos` whose counter reads are
    /// `cycles` and 300 cycles later (the clock read between them).
    fn observe(counter: &Counter, anchor: &Cell<Anchor>, cycles: u64, nanos: u64) {
        counter.observe(anchor, cycles, nanos, cycles + 300);
    }

    #[test]
    fn real_reads_calibrate_and_a_contradiction_turns_the_counter_off_for_good() {
        let fake = Fake {
            ghz: 2.0,
            origin: 1 << 40,
            epoch: 1_000_000_000,
        };
        let counter = Counter::new();
        let anchor = Cell::new(Anchor::default());
        let mut t = fake.epoch;
        for _ in 0..3 {
            observe(&counter, &anchor, fake.cycles_at(t), t + 50);
            t += 25_000_000;
        }
        let scale = counter.scale.load(Ordering::Relaxed);
        assert!(
            scale.abs_diff(1 << 31) <= 1 << 20,
            "calibrated to 0.5 ns a cycle: {scale}"
        );
        // Healthy reads, a tick apart, leave it on.
        for _ in 0..100 {
            observe(&counter, &anchor, fake.cycles_at(t), t + 50);
            t += 1_000_000;
        }
        assert_eq!(counter.scale.load(Ordering::Relaxed), scale);
        // The counter now runs at half its rate (or the clock left it): a millisecond
        // later the clock is 0.5 ms above what the counter says.
        let slow = anchor.get().cycles + 1_000_000;
        t += 1_000_000;
        observe(&counter, &anchor, slow, t);
        assert_eq!(counter.scale.load(Ordering::Relaxed), 0, "turned off");
        assert!(counter.distrusted.load(Ordering::Relaxed));
        // Never calibrated again, however healthy what follows looks.
        for _ in 0..4 {
            t += 25_000_000;
            observe(&counter, &anchor, fake.cycles_at(t), t + 50);
        }
        assert_eq!(counter.scale.load(Ordering::Relaxed), 0, "stays off");
    }

    #[test]
    fn a_difference_within_the_tolerance_is_not_a_contradiction() {
        // A thread that moved to a CPU whose counter is 2,000 cycles (1 µs) behind.
        let fake = Fake {
            ghz: 2.0,
            origin: 1 << 40,
            epoch: 0,
        };
        let anchor = fake.anchor(1_000_000_000);
        let truth = anchor.nanos + 1_000_000;
        let behind = fake.cycles_at(truth) - 2_000;
        assert!(!contradicts(anchor, 1 << 31, behind, truth));
        let far_behind = fake.cycles_at(truth) - 2 * (SKEW_TOLERANCE_NS + 16_000);
        assert!(contradicts(anchor, 1 << 31, far_behind, truth));
    }

    #[test]
    fn a_window_too_long_starts_calibration_again() {
        let fake = Fake {
            ghz: 1.6,
            origin: 1 << 39,
            epoch: 0,
        };
        let at = |ms: u64| fake.anchor(fake.epoch + ms * 1_000_000);
        let mut calibration = Calibration::new();
        let got = offers(&mut calibration, &[at(0), at(30), at(2_000), at(2_030)]);
        assert_eq!(
            got,
            [None, None, None, None],
            "a 2 s window counts for nothing"
        );
        assert!(calibration.offer(at(2_060)).is_some());
    }

    #[test]
    fn a_clock_above_the_range_of_the_last_anchor_contradicts_the_counter() {
        let fake = Fake {
            ghz: 2.0,
            origin: 1 << 40,
            epoch: 0,
        };
        let scale = 1 << 31; // the true rate: half a nanosecond per cycle
        let anchor = fake.anchor(1_000_000_000);
        for after in [0, 50, 1_000_000, 900_000_000] {
            let truth = anchor.nanos + after;
            let now = fake.cycles_at(truth);
            // A real read taken a little before the counter read, as `read` takes it.
            assert!(!contradicts(anchor, scale, now, truth.saturating_sub(40)));
            assert!(!contradicts(anchor, scale, now, truth));
        }
        // The counter slowed to half its rate (or the kernel left it for another clock
        // source that runs ahead of it): the clock is above every range it gives.
        let slow = |nanos: u64| fake.cycles_at(anchor.nanos + (nanos - anchor.nanos) / 2);
        let truth = anchor.nanos + 10_000_000;
        assert!(contradicts(anchor, scale, slow(truth), truth));
        // No anchor, no rate, or a counter that went back: nothing to contradict.
        assert!(!contradicts(Anchor::default(), scale, 5, u64::MAX));
        assert!(!contradicts(anchor, 0, fake.cycles_at(truth), u64::MAX));
        assert!(!contradicts(anchor, scale, anchor.cycles - 1, u64::MAX));
    }

    #[test]
    fn calibration_waits_for_enough_clock_and_a_forward_counter() {
        let first = Anchor {
            cycles: 1 << 30,
            nanos: 10,
        };
        let later = |nanos, cycles| Anchor { cycles, nanos };
        assert_eq!(
            calibrate(first, later(10 + CALIBRATION_NS - 1, 1 << 31)),
            None
        );
        assert_eq!(calibrate(first, later(10 + CALIBRATION_NS, 1 << 29)), None);
        // 2 cycles a nanosecond: half a nanosecond per cycle.
        let scale = calibrate(
            first,
            later(10 + CALIBRATION_NS, (1 << 30) + 2 * CALIBRATION_NS),
        );
        assert_eq!(scale, Some(1 << 31));
    }

    /// On a machine with the fast path, its ranges hold against real reads around them.
    #[test]
    fn live_ranges_contain_the_clock() {
        if !available() {
            eprintln!("no invariant TSC under a tsc clocksource here: the pure tests cover it");
            return;
        }
        let clock = MonotonicClock;
        // Two agreeing windows of 20 ms or more; a read whose two halves were far apart
        // (the first after a sleep often is, on a VM) anchors nothing, so allow a few more.
        read();
        for _ in 0..20 {
            if COUNTER.scale.load(Ordering::Relaxed) != 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
            read();
        }
        assert_ne!(
            COUNTER.scale.load(Ordering::Relaxed),
            0,
            "calibrated within 0.5 s"
        );
        let mut checked = 0;
        for i in 0..200_000 {
            if i % 10_000 == 0 {
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            let before = clock.now();
            let Some((lo, hi)) = bounds() else {
                read();
                continue;
            };
            let after = clock.now();
            // The call happened between `before` and `after`; `hi` is never below it, and
            // `lo` is late by at most an anchor gap (bounded generously here).
            assert!(hi >= before, "hi {hi} below the reading before it {before}");
            assert!(
                lo <= after + 100_000,
                "lo {lo} far above the reading after it {after}"
            );
            checked += 1;
        }
        assert!(checked > 100_000, "the fast path answered {checked} times");
    }
}
