//! The command line: every option of every scenario (several are shared: `--threads`,
//! `--duration`, `--timeout-ms`, `--in-flight`, `--fail-rate`), and the checks of their
//! ranges.

use std::num::NonZeroUsize;

use clap::{Parser, ValueEnum};

/// Randomized multi-core stress runs of ackwheel, checked against oracles and models.
#[derive(Debug, Parser)]
#[command(name = "stress", version, about)]
pub(crate) struct Cli {
    /// Which scenario to run.
    #[arg(value_enum, default_value_t = Scenario::Acker)]
    pub(crate) scenario: Scenario,

    /// Worker threads: bolts (acker), touching threads (expiry-queue), wheel owners
    /// (wheel) [default: available parallelism].
    #[arg(long)]
    pub(crate) threads: Option<NonZeroUsize>,

    /// Spout threads of the acker scenario [default: half of --threads, at least 1] and of
    /// the partitioned one (its origins) [default: half of --threads, at least 2].
    #[arg(long)]
    pub(crate) spouts: Option<NonZeroUsize>,

    /// Acker: stop starting trees after this many [default: no limit; --duration decides].
    #[arg(long)]
    pub(crate) trees: Option<u64>,

    /// Seconds of load: the acker's traffic phase (its memory, drain and idle phases add
    /// about 7 s), the expiry-queue's touching, the wheel's cap, the partitioned traffic
    /// (its phases' drains add about a second each). For `all`, the budget shared by the
    /// four [default: 25 for acker, 28 for expiry-queue, wheel and partitioned, 30 for all].
    #[arg(long, value_name = "SECONDS")]
    pub(crate) duration: Option<f64>,

    /// Acker: most children a tuple gets (the spout emits 1..=F root tuples, bolts 0..=F).
    #[arg(long, default_value_t = 3)]
    pub(crate) fanout: u32,

    /// Acker: depth of the trees (root tuples are at depth 1).
    #[arg(long, default_value_t = 3)]
    pub(crate) depth: u8,

    /// Acker: probability that a bolt fails a tuple instead of processing it. Partitioned:
    /// that an attempt sends a fail in place of its last ack.
    #[arg(long, default_value_t = 0.002)]
    pub(crate) fail_rate: f64,

    /// Acker: probability that an ack message is dropped.
    #[arg(long, default_value_t = 0.001)]
    pub(crate) drop_rate: f64,

    /// Acker: probability that an ack message (of a tuple with children) is sent twice.
    #[arg(long, default_value_t = 0.001)]
    pub(crate) dup_rate: f64,

    /// Tree timeout (acker, partitioned) or session timeout (expiry-queue), milliseconds.
    #[arg(long, default_value_t = 500)]
    pub(crate) timeout_ms: u64,

    /// Acker: the acker's resolution (its tick), microseconds, rounded up to a power of two
    /// of nanoseconds [default: the builder's, 2^20 ns]. 262 is the async acker's 2^18 ns.
    #[arg(long)]
    pub(crate) resolution_us: Option<u64>,

    /// Acker: replay failed and timed-out trees as new trees (up to 3 attempts per message).
    #[arg(long)]
    pub(crate) replay: bool,

    /// Acker, partitioned: most trees in flight across spouts (Storm's max.spout.pending).
    #[arg(long, default_value_t = 2048)]
    pub(crate) in_flight: usize,

    /// Acker: the spouts start no tree for the last quarter of every period of this many
    /// milliseconds, so that what is pending falls and rises again (the tables shrink and
    /// grow under the load). 0: steady.
    #[arg(long, default_value_t = 0)]
    pub(crate) breathe_ms: u64,

    /// Acker: bolts gather their acks in frames of up to this many and send each frame
    /// with one `Acker::apply` (full, before an order the topology relies on, and before
    /// the bolt waits for a tuple). 0: one `ack` call per ack.
    #[arg(long, default_value_t = 0)]
    pub(crate) ack_frames: usize,

    /// Acker: its `max_pending` in the traffic phase. Small tables make completed trees'
    /// tombstones matter (with more threads than cores the reaper and the grace period
    /// lag); an init refused `Full` well below it is a violation.
    #[arg(long, default_value_t = 16_384)]
    pub(crate) max_pending: usize,

    /// Acker: roots per wave of the memory phase (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) memory_roots: usize,

    /// Acker: trees churned through a 1M-max_pending acker (about 1k in flight) by the
    /// memory phase, for its peak RSS (0 skips the churn; `--memory-roots 0` skips it too).
    #[arg(long, default_value_t = 2_000_000)]
    pub(crate) churn_trees: u64,

    /// Acker: roots the growth phase fills an acker with, timing each operation while its
    /// tables grow and again once they have (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) growth_roots: u64,

    /// Acker: trees the burst phase starts and completes on the plain and the async
    /// paths, each in a fresh process, for the memory per tree in flight and the memory
    /// back after the burst (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) burst_roots: usize,

    /// Acker: trees that time out at one shared deadline on a saturated two-worker tokio
    /// runtime while callers time each `track` call (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) deadline_roots: usize,

    /// Partitioned: how many partitions (ackers, each on its own node thread).
    #[arg(long, default_value_t = 4)]
    pub(crate) partitions: usize,

    /// Partitioned: probability that a message (init, ack or fail) is lost on the network.
    #[arg(long, default_value_t = 0.002)]
    pub(crate) loss_rate: f64,

    /// Partitioned: most a message is held back on the network (30 % of them are), in
    /// milliseconds; messages overtake each other within it.
    #[arg(long, default_value_t = 5)]
    pub(crate) delay_ms: u64,

    /// Partitioned: how long the killed partition stays down before it restarts empty.
    #[arg(long, default_value_t = 200)]
    pub(crate) down_ms: u64,

    /// Acker: default ackers the memory phase builds in one process, all alive at once, for
    /// the build cost's second figure.
    #[arg(long, default_value_t = 10)]
    pub(crate) ackers_at_once: usize,

    /// Expiry-queue: live sessions per touching thread.
    #[arg(long, default_value_t = 60_000)]
    pub(crate) sessions: usize,

    /// Wheel: total operations over all threads.
    #[arg(long, default_value_t = 30_000_000)]
    pub(crate) ops: u64,

    /// Seed of every random choice; each thread derives its own from it. Random (and
    /// printed) when absent. Threads interleave freely, so a seed replays the choices,
    /// not the schedule.
    #[arg(long)]
    pub(crate) seed: Option<u64>,

    /// Write every figure of the summary to FILE as JSON.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<std::path::PathBuf>,

    /// Draw throughput over time and the lateness distributions to FILE as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<std::path::PathBuf>,

    /// Self-test of the oracles, which must catch it (the run must FAIL): the acker scenario
    /// reports every Acked completion as Failed; the partitioned one routes the last ack of
    /// one tree in a hundred to the wrong partition.
    #[arg(long, hide = true)]
    pub(crate) plant_bug: bool,
}

/// The scenarios, each a module of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    /// A simulated Storm topology (spouts, bolts, aggregation, fails, dropped and
    /// duplicated acks) against one Acker; every tree's outcome checked by an oracle.
    Acker,
    /// Many touching threads and one expirer on an ExpiryQueue; every session must expire
    /// exactly once and never early.
    ExpiryQueue,
    /// Single-owner TimerWheels (one per thread), random schedule / reschedule / cancel /
    /// advance against a model, over several clock origins (0, near 2^63, near u64::MAX).
    Wheel,
    /// N ackers as N partitions of a fleet in one process: messages routed by the root's
    /// hash through a network that delays, reorders and loses them; one partition killed
    /// mid-run and restarted empty; origins replay; every attempt checked by an oracle.
    Partitioned,
    /// acker, expiry-queue, wheel and partitioned in turn, sharing --duration.
    All,
}

impl Cli {
    /// The options' ranges: the message for the first one out of range.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if let Some(d) = self.duration {
            if !(d.is_finite() && d >= 0.0) {
                return Err(format!(
                    "--duration must be a non-negative number of seconds, got {d}"
                ));
            }
        }
        for (name, rate) in [
            ("--fail-rate", self.fail_rate),
            ("--drop-rate", self.drop_rate),
            ("--dup-rate", self.dup_rate),
            ("--loss-rate", self.loss_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!(
                    "{name} must be a probability in [0, 1], got {rate}"
                ));
            }
        }
        if self.in_flight > 1 << 20 {
            // Each tree in flight has a ~0.5 KiB oracle record (its history included).
            return Err(format!("--in-flight is at most {}", 1 << 20));
        }
        if self.max_pending == 0 || self.max_pending > 1 << 26 {
            return Err(format!("--max-pending must be in 1..={}", 1 << 26));
        }
        if self.growth_roots > 1 << 26 {
            return Err(format!("--growth-roots is at most {}", 1u64 << 26));
        }
        if self.ackers_at_once == 0 || self.ackers_at_once > 100 {
            return Err("--ackers-at-once must be in 1..=100".into());
        }
        if self.partitions == 0 || self.partitions > 1024 {
            return Err("--partitions must be in 1..=1024".into());
        }
        if self.fanout == 0 || self.depth == 0 || self.in_flight == 0 || self.timeout_ms == 0 {
            return Err(
                "--fanout, --depth, --in-flight and --timeout-ms must be at least 1".into(),
            );
        }
        Ok(())
    }
}
