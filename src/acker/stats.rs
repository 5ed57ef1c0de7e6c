//! What an acker counts: [`AckerStats`], the public sum, and the per-stripe counters it
//! is summed from (statistics: every update is a Relaxed add on the calling thread's
//! stripe, off the path of any message but the one it counts).

use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::credits;
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
}

impl fmt::Display for AckerStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pending {}, acked {}, failed {}, timed out {}, orphans expired {}, \
             orphans joined {}, rejected full {}, callback panics {}, timeout lateness max {:?}",
            self.pending,
            self.acked,
            self.failed,
            self.timed_out,
            self.orphans_expired,
            self.orphans_joined,
            self.rejected_full,
            self.callback_panics,
            self.timeout_lateness_max
        )
    }
}

/// Counters, summed by `stats()`. One set per credit stripe, each thread counting in its
/// own (as it takes and gives credits), so that threads completing trees in the same shards
/// do not pass one cache line back and forth (per shard, two threads did).
/// [`Counters::of`] picks the calling thread's.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) acked: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) timed_out: AtomicU64,
    pub(super) orphans_expired: AtomicU64,
    pub(super) orphans_joined: AtomicU64,
    pub(super) rejected_full: AtomicU64,
    pub(super) callback_panics: AtomicU64,
    /// Timeouts' lateness in ticks: the largest, and the sum.
    pub(super) lateness_max: AtomicU64,
    pub(super) lateness_total: AtomicU64,
}

impl Counters {
    /// The calling thread's set among `all` (its credit stripe's).
    #[inline]
    pub(super) fn own(all: &[CachePadded<Counters>]) -> &Counters {
        let own: &CachePadded<Counters> = credits::own_stripe(all);
        own
    }

    /// The stats: every set's counts summed, with `pending`; `ticks` turns the lateness
    /// counts (ticks of the resolution) into time.
    pub(super) fn sum(
        all: &[CachePadded<Counters>],
        pending: usize,
        ticks: impl Fn(u64) -> Duration,
    ) -> AckerStats {
        let mut stats = AckerStats {
            pending,
            ..AckerStats::default()
        };
        for c in all {
            stats.acked += c.acked.load(Ordering::SeqCst);
            stats.failed += c.failed.load(Ordering::SeqCst);
            stats.timed_out += c.timed_out.load(Ordering::SeqCst);
            stats.orphans_expired += c.orphans_expired.load(Ordering::SeqCst);
            stats.orphans_joined += c.orphans_joined.load(Ordering::SeqCst);
            stats.rejected_full += c.rejected_full.load(Ordering::SeqCst);
            stats.callback_panics += c.callback_panics.load(Ordering::SeqCst);
            stats.timeout_lateness_max = stats
                .timeout_lateness_max
                .max(ticks(c.lateness_max.load(Ordering::SeqCst)));
            stats.timeout_lateness_total += ticks(c.lateness_total.load(Ordering::SeqCst));
        }
        stats
    }
}
