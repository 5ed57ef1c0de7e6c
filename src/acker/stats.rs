//! What an acker counts: [`AckerStats`], the public sum, and the counters it is summed
//! from: a set in each thread's record for the acker
//! ([`threads`](crate::acker::threads)), which only that thread writes, with plain loads
//! and stores (no locked instruction on the path of the message it counts), and one set
//! shared by threads without a record and the sets of ended threads, folded in.

use std::fmt;
use std::time::Duration;

use crate::sync::{AtomicU64, Ordering};

/// Counters since the acker was built, from [`Acker::stats`](crate::Acker::stats): what an operator charts.
///
/// `Display` prints them on one line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AckerStats {
    /// Entries held now (initialized or not).
    pub pending: usize,
    /// Trees completed `Acked`.
    pub acked: u64,
    /// Trees completed `Failed`.
    pub failed: u64,
    /// Trees completed `TimedOut`.
    pub timed_out: u64,
    /// Entries never initialized, dropped at their deadline (or by `shutdown`): acks and
    /// fails whose init never came, and late or duplicated messages of trees already over.
    pub orphans_expired: u64,
    /// Inits that found messages held for their root and merged them: a sub-task's ack
    /// ahead of its init (a race the acker is built for), or a late message of an earlier
    /// use of the same root, which then corrupts the new tree (a root reused too soon: see
    /// [`Acker`](crate::Acker), "Choosing roots"). Charted against the inits, a rise here
    /// with `timed_out` points at reused roots.
    pub orphans_joined: u64,
    /// Inits and orphan acks/fails refused for capacity.
    pub rejected_full: u64,
    /// `on_complete` calls that panicked (caught).
    pub callback_panics: u64,
    /// The longest any timeout was delivered after its deadline, since build, in whole
    /// ticks of the resolution (0: within the deadline's own tick). A reaper starved of
    /// CPU shows here first.
    pub timeout_lateness_max: Duration,
    /// The sum of every timeout's lateness, as above: over an interval,
    /// `Δtimeout_lateness_total / Δtimed_out` is the mean lateness.
    pub timeout_lateness_total: Duration,
    /// Reaper passes that callers ran in the thread's place (the async acker's `track` and
    /// inits, once a pass is due: the first caller in the tick the thread's timer is set
    /// for). A steady rise says the runtime is busy and its workers deliver the timeouts,
    /// as its own timers would.
    pub caller_passes: u64,
    /// The longest of those passes: how long a caller was held by one (they are bounded:
    /// a few dozen timeouts at most).
    pub caller_pass_longest: Duration,
    /// Entries moved from a table to its successor as tables grew and shrank. Tables
    /// double when they grow, so a fill from empty moves each root about once:
    /// `roots_moved / (acked + failed + timed_out + pending)` over a fill is that average.
    pub roots_moved: u64,
}

impl fmt::Display for AckerStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pending {}, acked {}, failed {}, timed out {}, orphans expired {}, \
             orphans joined {}, rejected full {}, callback panics {}, timeout lateness max {}, \
             caller passes {} (longest {}), roots moved {}",
            self.pending,
            self.acked,
            self.failed,
            self.timed_out,
            self.orphans_expired,
            self.orphans_joined,
            self.rejected_full,
            self.callback_panics,
            Readable(self.timeout_lateness_max),
            self.caller_passes,
            Readable(self.caller_pass_longest),
            self.roots_moved
        )
    }
}

/// A duration as people read one: three significant digits at most, in the largest unit
/// (ns, µs, ms, s) that keeps it at 1 or more ("16.8 ms", "2 s", "0 s").
struct Readable(Duration);

impl fmt::Display for Readable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        let (unit, scale) = match ns {
            0 => return f.write_str("0 s"),
            1..=999 => ("ns", 1),
            1_000..=999_999 => ("µs", 1_000),
            1_000_000..=999_999_999 => ("ms", 1_000_000),
            _ => ("s", 1_000_000_000),
        };
        let value = ns as f64 / scale as f64;
        // Three significant digits, trailing zeros dropped: 16.777216 ms -> "16.8".
        let decimals = if value >= 100.0 {
            0
        } else if value >= 10.0 {
            1
        } else {
            2
        };
        let text = format!("{value:.decimals$}");
        let text = if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.')
        } else {
            &text
        };
        write!(f, "{text} {unit}")
    }
}

/// One set of counters (module docs): a thread's, or the shared one.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(super) acked: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) timed_out: AtomicU64,
    pub(super) orphans_expired: AtomicU64,
    pub(super) orphans_joined: AtomicU64,
    pub(super) rejected_full: AtomicU64,
    pub(super) callback_panics: AtomicU64,
    /// Entries moved by migrations.
    pub(super) roots_moved: AtomicU64,
    /// Timeouts' lateness in ticks: the largest, and the sum.
    pub(super) lateness_max: AtomicU64,
    pub(super) lateness_total: AtomicU64,
}

/// A counter of a set (`|c| &c.acked`).
pub(super) type Field = fn(&Counters) -> &AtomicU64;

/// Every counter but the largest lateness, which folds by its maximum.
const SUMMED: [Field; 9] = [
    |c| &c.acked,
    |c| &c.failed,
    |c| &c.timed_out,
    |c| &c.orphans_expired,
    |c| &c.orphans_joined,
    |c| &c.rejected_full,
    |c| &c.callback_panics,
    |c| &c.roots_moved,
    |c| &c.lateness_total,
];

/// The calling thread's set, as it counts into it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tally<'a> {
    counters: &'a Counters,
    /// Only the calling thread writes the set (its record's): plain loads and stores.
    /// Otherwise (the shared set) read-modify-writes.
    owned: bool,
}

impl<'a> Tally<'a> {
    /// The set of a record of the calling thread (`owned`), or the shared set.
    #[inline]
    pub(crate) fn new(counters: &'a Counters, owned: bool) -> Self {
        Tally { counters, owned }
    }

    /// Adds `n` to `field`.
    #[inline]
    pub(super) fn add(self, field: Field, n: u64) {
        let counter = field(self.counters);
        // Relaxed (all): statistics. An owned set has one writer, so its load and store
        // lose nothing; a reader sees each counter's latest store, or one before it.
        if self.owned {
            counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        } else {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Raises the largest lateness to `late` ticks.
    #[inline]
    pub(super) fn max_lateness(self, late: u64) {
        let counter = &self.counters.lateness_max;
        // Relaxed: as in `add`.
        if !self.owned {
            counter.fetch_max(late, Ordering::Relaxed);
        } else if late > counter.load(Ordering::Relaxed) {
            counter.store(late, Ordering::Relaxed);
        }
    }
}

impl Counters {
    /// Adds `from`'s counts into this set (shared: read-modify-writes): an ended thread's
    /// set, before its record goes.
    pub(crate) fn fold(&self, from: &Counters) {
        // Relaxed (all): statistics; the caller holds the records' lock, as `sum` does.
        for field in SUMMED {
            field(self).fetch_add(field(from).load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.lateness_max
            .fetch_max(from.lateness_max.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The stats: the counts of every set `each` gives summed, with `pending`; `ticks`
    /// turns the lateness counts (ticks of the resolution) into time.
    pub(super) fn sum(
        each: impl FnOnce(&mut dyn FnMut(&Counters)),
        pending: usize,
        ticks: impl Fn(u64) -> Duration,
    ) -> AckerStats {
        let (mut counts, mut late_max) = ([0u64; SUMMED.len()], 0);
        each(&mut |c| {
            for (count, field) in counts.iter_mut().zip(SUMMED) {
                *count += field(c).load(Ordering::Relaxed); // Relaxed: statistics.
            }
            late_max = late_max.max(c.lateness_max.load(Ordering::Relaxed));
        });
        let [acked, failed, timed_out, orphans_expired, orphans_joined, rejected_full, callback_panics, roots_moved, lateness_total] =
            counts;
        AckerStats {
            pending,
            acked,
            failed,
            timed_out,
            orphans_expired,
            orphans_joined,
            rejected_full,
            callback_panics,
            roots_moved,
            timeout_lateness_max: ticks(late_max),
            timeout_lateness_total: ticks(lateness_total),
            ..AckerStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_people_read_them() {
        let cases = [
            (0, "0 s"),
            (999, "999 ns"),
            (1_000, "1 µs"),
            (1_500, "1.5 µs"),
            (16_777_216, "16.8 ms"),
            (250_000_000, "250 ms"),
            (2_000_000_000, "2 s"),
            (3_600_000_000_000, "3600 s"),
        ];
        for (ns, text) in cases {
            assert_eq!(
                Readable(Duration::from_nanos(ns)).to_string(),
                text,
                "{ns} ns"
            );
        }
        let stats = AckerStats {
            timeout_lateness_max: Duration::from_nanos(16_777_216),
            caller_passes: 3,
            caller_pass_longest: Duration::from_nanos(41_500),
            roots_moved: 7,
            ..AckerStats::default()
        };
        assert!(
            stats.to_string().ends_with(
                "timeout lateness max 16.8 ms, caller passes 3 (longest 41.5 µs), \
                     roots moved 7"
            ),
            "{stats}"
        );
    }
}
