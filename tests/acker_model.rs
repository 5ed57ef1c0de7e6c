//! Model-based test of the `Acker`'s rules, against the public API only.
//!
//! `model_sequences`: random operation sequences from a seed, applied to a real
//! `Acker<u64>` (`build_manual`, a `ManualClock`) and to a reference model (a map of
//! root -> value, initialized, fail held, payload, first-message time, deadline base, own
//! timeout). After EVERY step it checks every return value (init's `Ok` / `Err(Full |
//! Duplicate | Shutdown)` with the payload handed back, ack/fail's bool, reset_timeout's
//! bool, expire's count), every completion delivered through `on_complete` (root, payload,
//! outcome, elapsed), `pending()` and the `AckerStats` counters.
//!
//! Times are in nanoseconds relative to the clock's reading at build (the acker's epoch).
//! The acker keeps them in ticks (the resolution rounded up to a power of two, tick 1
//! beginning at the epoch), and a deadline is the base's tick plus the timeout in ticks,
//! rounded up, plus one (see the `engine/` module docs). Where the model knows the tick the
//! acker stamped a base with (its own clock reading), the deadline is exact: a pass in the
//! tick before it keeps the tree, the first pass in it times the tree out (an orphan is
//! dropped); a fifth of the sequences move the clock by whole ticks only, so that passes
//! land on the first nanosecond of a deadline's tick, or of the tick before it. Where a
//! step back of the clock leaves the stamp uncertain, the model gives the deadline a
//! window: a timeout may fire from `base + timeout` on (never early, on the clock that
//! stamped it) and must have fired at the first pass at or after `base + timeout + 2
//! ticks`; a pass inside it may go either way, and the model follows the acker (trees by
//! their completions, orphans by the drop count, earliest deadlines first).
//!
//! `threaded_invariants`: several threads on shared and own roots of one manual acker while
//! another moves the clock (far, back) and runs passes; invariants only (every payload back
//! exactly once, by a completion or by shutdown; nothing pending after shutdown; counters
//! as the completions seen; return values consistent with the completions each call
//! delivered on its own thread; a re-anchoring once the clock has jumped 2^29 ticks).
//!
//! Knobs: the consts below. Env: `ACKER_MODEL_SEEDS=n` runs n seeds, `ACKER_MODEL_SEED=s`
//! replays one (printing every step with `ACKER_MODEL_TRACE=1`), `ACKER_MODEL_THREAD_ROUNDS=n`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackwheel::{Acker, AckerStats, Completion, InitError, ManualClock, Outcome};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ------------------------------------------------------------------------------- knobs

/// The intended rule after `shutdown()`: acks and fails return false and hold nothing,
/// reset_timeout returns false, `pending()` stays 0 and no orphan is counted or refused.
/// Off: after shutdown only inits (`Shutdown(payload)`), completions (none) and the
/// outcome counters are checked.
const CHECK_AFTER_SHUTDOWN: bool = true;
/// Check lateness and `elapsed` after a clock step back against the messages' own clock
/// readings (kinds `LateAfterStepBack`, `ElapsedAfterStepBack`). Off: allow what the
/// acker's design does after a step back (a stamp taken at the epoch for a clock before
/// it, or 2^30 ticks behind the anchor; re-anchoring raises a base to the anchor less 2^30
/// ticks), which only ever makes a deadline later.
const CHECK_LATE_AFTER_STEP_BACK: bool = false;
/// Clock jumps forward of up to 2^this many ticks (0: no jump beyond 64 ticks). Capped so
/// that the clock never runs more than 2^62 ns past the acker's epoch (the wrapping
/// timeline's horizon is 2^63 ns).
const MAX_JUMP_TICKS_LOG2: u32 = 40;
/// `ManualClock::set` to an earlier time (small, about a timeout, large; also before the
/// epoch). Rule: a tree never times out before its deadline on the clock that stamped it.
const CLOCK_STEPS_BACK: bool = true;
/// Steps back may go before the acker's epoch (its clock's reading at build, which it
/// stamps such readings with).
const STEPS_BACK_BEFORE_EPOCH: bool = true;
/// Configurations where resets keep trees alive past 2^32 ticks (many resets, the clock
/// moved on by less than the timeout each time).
const LONG_LIVED_RESETS: bool = true;
/// Clock origins 2^63 and just below `u64::MAX` (the clock wraps) besides 0.
const ODD_ORIGINS: bool = true;
/// Sequences per run: release, debug (`ACKER_MODEL_SEEDS` overrides).
const SEEDS_RELEASE: u64 = 3000;
const SEEDS_DEBUG: u64 = 600;
/// Threaded rounds per run: release, debug (`ACKER_MODEL_THREAD_ROUNDS` overrides).
const THREAD_ROUNDS_RELEASE: u64 = 24;
const THREAD_ROUNDS_DEBUG: u64 = 6;

/// The root pool: small, so that duplicates, reuse after completion and orphans happen.
const ROOTS: [u64; 6] = [
    1,
    2,
    0,
    u64::MAX,
    0x9e37_79b9_7f4a_7c15,
    0x8000_0000_0000_0000,
];

/// The most ticks a deadline lies past its base (the engine's `MAX_TIMEOUT_TICKS`, 2^30 - 2): a
/// timeout of more than `TIMEOUT_TICKS_MAX` ticks is clamped to it (documented on
/// `init_with_timeout`).
const TIMEOUT_TICKS_MAX: u64 = (1 << 30) - 3;
/// The clock never runs further than this past the epoch, nor further back than
/// `POS_FLOOR`.
const POS_BUDGET: i128 = 1 << 62;
const POS_FLOOR: i128 = -(1 << 61);
/// A writer stamps no earlier than 2^30 ticks behind the acker's anchor (a clock that
/// stepped back far stamps later: `engine/time.rs`); the model bounds the anchor by the
/// latest clock reading any call saw.
const MOST_BEHIND_TICKS: i128 = 1 << 30;

// ------------------------------------------------------------------------- config, ops

#[derive(Clone, Copy, Debug)]
struct Config {
    /// `ManualClock::new(origin)`: the acker's epoch.
    origin: u64,
    /// The resolution asked for, ns.
    resolution: u64,
    /// The tick: `resolution` rounded up to a power of two.
    tick: u64,
    /// The builder's timeout, ns.
    timeout: u64,
    max_pending: usize,
    /// Sequences built around keep-alive resets over more than 2^32 ticks.
    long_lived: bool,
    /// Every clock move and the builder's timeout are whole ticks, so that passes land on
    /// the first nanosecond of a deadline's tick, or of the tick before it.
    whole_ticks: bool,
}

impl Config {
    /// A timeout as the acker applies it: at least 1 ns, at most `TIMEOUT_TICKS_MAX` ticks.
    fn effective(&self, ns: u64) -> u64 {
        ns.clamp(1, TIMEOUT_TICKS_MAX * self.tick)
    }

    fn describe(&self) -> String {
        format!(
            "origin {:#x}, resolution {} ns (tick 2^{} ns), timeout {} ns ({:.3} ticks), \
             max_pending {}, long_lived {}, whole_ticks {}",
            self.origin,
            self.resolution,
            self.tick.trailing_zeros(),
            self.timeout,
            self.timeout as f64 / self.tick as f64,
            self.max_pending,
            self.long_lived,
            self.whole_ticks
        )
    }
}

/// One step. Roots are indices into `ROOTS`.
#[derive(Clone, Debug)]
enum Op {
    /// `init` (or `init_with_timeout` with `timeout` ns).
    Init {
        root: usize,
        xor: u64,
        payload: u64,
        timeout: Option<u64>,
    },
    Ack {
        root: usize,
        xor: u64,
    },
    Fail {
        root: usize,
    },
    Reset {
        root: usize,
    },
    /// The clock moves on by `ns` (no pass).
    Advance {
        ns: u64,
    },
    /// `ManualClock::set` to `ns` earlier (no pass).
    Back {
        ns: u64,
    },
    /// `expire()`.
    Expire,
    /// reset_timeout of every root of the pool, then the clock on by `ns`, then `expire()`.
    KeepAlive {
        ns: u64,
    },
    Shutdown,
}

// ------------------------------------------------------------------------------ model

/// Clock positions: ns since the epoch (negative: before it).
type Pos = i128;

#[derive(Clone, Debug)]
struct Entry {
    value: u64,
    /// `Some` once initialized.
    payload: Option<u64>,
    failed: bool,
    /// The first message's clock reading, and the latest tick the acker may have stamped
    /// it with (see `Model::stamp_hi`).
    first_lo: Pos,
    first_hi: Pos,
    /// Where the deadline counts from (the first message, or the latest reset).
    base_lo: Pos,
    base_hi: Pos,
    /// The tree's own timeout (effective), ns.
    own_timeout: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    acked: u64,
    failed: u64,
    timed_out: u64,
    orphans_expired: u64,
    orphans_joined: u64,
    rejected_full: u64,
}

impl Counts {
    fn of(s: &AckerStats) -> Counts {
        Counts {
            acked: s.acked,
            failed: s.failed,
            timed_out: s.timed_out,
            orphans_expired: s.orphans_expired,
            orphans_joined: s.orphans_joined,
            rejected_full: s.rejected_full,
        }
    }
}

#[derive(Debug, Default)]
struct Model {
    entries: HashMap<u64, Entry>,
    /// The clock now.
    pos: Pos,
    /// The latest clock reading any acker call saw (bounds the acker's anchor).
    hw: Pos,
    shut: bool,
    counts: Counts,
}

/// What kind of rule a failure shows broken: the shrinker keeps the kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    /// init's result or handed-back payload.
    InitResult,
    AckResult,
    FailResult,
    ResetResult,
    /// expire()'s count against the timeouts it delivered.
    ExpireCount,
    /// A completion (root, payload, outcome) the model did not expect, or one missing
    /// (other than timeouts).
    Completion,
    /// A tree timed out before `base + timeout` on the clock.
    EarlyTimeout,
    /// A tree due (2 ticks past its deadline) not timed out by a pass.
    LateTimeout,
    /// `CHECK_LATE_AFTER_STEP_BACK`: a tree or orphan 2 ticks past its deadline on the
    /// clock not expired by a pass, where the acker's later deadline comes from a step
    /// back (a stamp at the epoch or 2^30 ticks behind the anchor, or a base a
    /// re-anchoring raised, with the clock then stepped back below it).
    LateAfterStepBack,
    /// `CHECK_LATE_AFTER_STEP_BACK`: `elapsed` right only from the acker's later stamp.
    ElapsedAfterStepBack,
    /// More orphans dropped than can be due.
    EarlyOrphanDrop,
    /// An orphan due not dropped by a pass.
    LateOrphanDrop,
    /// `Completion::elapsed` outside first message -> completion, from a tick short to 2
    /// ticks long (or a TimedOut one below its timeout).
    Elapsed,
    /// An `AckerStats` counter differs from the model's.
    Stats,
    /// `pending()` (or `stats().pending`) differs from the model's.
    Pending,
    /// shutdown()'s hand-back differs.
    ShutdownHandBack,
    /// `CHECK_AFTER_SHUTDOWN`: an ack/fail/reset after shutdown returned true, held
    /// something, or pending()/counters moved.
    AfterShutdown,
}

#[derive(Clone, Debug)]
struct Failure {
    kind: Kind,
    step: usize,
    message: String,
}

/// A completion seen through on_complete.
type Seen = Arc<Mutex<Vec<Completion<u64>>>>;

struct Harness {
    cfg: Config,
    acker: Acker<u64>,
    clock: ManualClock,
    seen: Seen,
    m: Model,
    /// Counters and pending as of the last check.
    last: Counts,
    trace: Option<String>,
}

/// A completion the model expects from a message (exact).
struct Expected {
    root: u64,
    payload: u64,
    outcome: Outcome,
    entry: Entry,
}

impl Harness {
    fn new(cfg: Config, trace: bool) -> Harness {
        let clock = ManualClock::new(cfg.origin);
        let seen: Seen = Arc::default();
        let sink = Arc::clone(&seen);
        let acker = Acker::<u64>::builder()
            .timeout(Duration::from_nanos(cfg.timeout))
            .resolution(Duration::from_nanos(cfg.resolution))
            .max_pending(cfg.max_pending)
            .clock(clock.clone())
            .on_complete(move |c| sink.lock().unwrap().push(c))
            .build_manual()
            .expect("build_manual");
        Harness {
            cfg,
            acker,
            clock,
            seen,
            m: Model::default(),
            last: Counts::default(),
            trace: trace.then(String::new),
        }
    }

    fn tick(&self) -> i128 {
        i128::from(self.cfg.tick)
    }

    fn set_clock(&self) {
        self.clock
            .set(self.cfg.origin.wrapping_add(self.m.pos as i64 as u64));
    }

    /// An acker call at the clock now: the anchor may follow it.
    fn touch(&mut self) {
        self.m.hw = self.m.hw.max(self.m.pos);
    }

    /// The latest position the acker may stamp a message at `pos` with: the epoch's tick
    /// for a clock before the epoch, 2^30 ticks behind the anchor for a clock stepped back
    /// further (`engine/time.rs`). The earliest is `pos` itself.
    fn stamp_hi(&self, pos: Pos) -> Pos {
        pos.max(0).max(self.m.hw - MOST_BEHIND_TICKS * self.tick())
    }

    fn timeout_of(&self, e: &Entry) -> u64 {
        e.own_timeout
            .unwrap_or(self.cfg.effective(self.cfg.timeout))
    }

    /// The full tick the acker reads at a clock position: tick 1 begins at the epoch, and a
    /// reading before it is tick 1.
    fn tick_of(&self, pos: Pos) -> i128 {
        pos.max(0) / self.tick() + 1
    }

    /// Where a pass may, must, and must even after a step back time `e` out (or drop it):
    /// clock positions. `floor`: the lowest base a re-anchoring leaves (2^30 ticks behind
    /// the latest clock reading).
    ///
    /// Exact where the acker stamped the base with the model's own reading (`base_lo ==
    /// base_hi`) and no re-anchoring can have raised it: from the start of its deadline
    /// tick, the base's tick plus the timeout in ticks, rounded up, plus one. A pass one
    /// tick before it keeps the tree; the first pass in it times the tree out. Otherwise a
    /// window: never before `base + timeout` on the clock, always from 2 ticks past it.
    fn due_from(&self, e: &Entry, floor: Pos) -> (Pos, Pos, Pos) {
        let tick = self.tick();
        let t = i128::from(self.timeout_of(e));
        if e.base_lo == e.base_hi && e.base_lo >= floor {
            let deadline_tick = self.tick_of(e.base_lo) + (t + tick - 1) / tick + 1;
            let at = (deadline_tick - 1) * tick;
            return (at, at, at);
        }
        (
            e.base_lo + t,
            e.base_lo + t + 2 * tick,
            e.base_hi.max(floor) + t + 2 * tick,
        )
    }

    fn new_entry(&self, value: u64, failed: bool) -> Entry {
        let (lo, hi) = (self.m.pos, self.stamp_hi(self.m.pos));
        Entry {
            value,
            payload: None,
            failed,
            first_lo: lo,
            first_hi: hi,
            base_lo: lo,
            base_hi: hi,
            own_timeout: None,
        }
    }

    fn take_seen(&self) -> Vec<Completion<u64>> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            t.push_str(&line());
            t.push('\n');
        }
    }

    /// `elapsed` of a completion at the clock now for `entry`: from the first message to
    /// now on the clock, at most a tick short (whole ticks between the two readings' ticks)
    /// and at most 2 ticks long (a TimedOut one at least its timeout; past 2^29 ticks of
    /// life long by at most about a part in 2^23 of the life, which counts up to the latest
    /// clock reading, as a coarse start is rounded then).
    ///
    /// Strict: the first message's own clock reading. Tolerant (`ElapsedAfterStepBack`
    /// when only that holds): the acker's stamp, which a clock read before the epoch, or
    /// 2^30 ticks behind the anchor, makes later; a completion read before the epoch reads
    /// at the epoch.
    fn check_elapsed(
        &self,
        root: u64,
        entry: &Entry,
        outcome: Outcome,
        elapsed: Duration,
    ) -> Result<(), (Kind, String)> {
        let tick = self.tick();
        let now = self.m.pos;
        let life = (self.m.hw.max(now) - entry.first_lo.max(0)).max(0);
        let slack = 2 * tick + (life >> 22);
        let t = i128::from(self.timeout_of(entry));
        let window = |age_lo: i128, age_hi: i128| {
            let (mut lo, mut hi) = (age_lo - tick, age_hi + slack);
            if outcome == Outcome::TimedOut {
                lo = lo.max(t);
                hi = hi.max(t + tick);
            }
            (lo, hi)
        };
        let strict = (now - entry.first_lo).max(0);
        let (lo, hi) = window(strict, strict);
        let (tlo, thi) = window(
            (now.max(0) - entry.first_hi).max(0),
            (now.max(0) - entry.first_lo.max(0)).max(0),
        );
        let got = elapsed.as_nanos() as i128;
        let kind = if got >= lo && got <= hi {
            return Ok(());
        } else if got >= tlo.min(lo) && got <= thi.max(hi) {
            if !CHECK_LATE_AFTER_STEP_BACK {
                return Ok(());
            }
            Kind::ElapsedAfterStepBack
        } else {
            Kind::Elapsed
        };
        Err((
            kind,
            format!(
                "root {root:#x} {outcome:?}: elapsed {got} ns ({:.2} ticks), model [{lo}, {hi}] \
                 ns (after a step back [{tlo}, {thi}]); first message at {} (stamp up to {}), \
                 now {now}, latest clock {}, timeout {t}: {:+.2} ticks off",
                got as f64 / tick as f64,
                entry.first_lo,
                entry.first_hi,
                self.m.hw,
                if got < lo { got - lo } else { got - hi } as f64 / tick as f64
            ),
        ))
    }

    /// The completions of a message call against the model's (exact).
    fn check_exact(&mut self, expected: Vec<Expected>) -> Result<(), (Kind, String)> {
        let mut got = self.take_seen();
        if got.len() != expected.len()
            || !expected.iter().all(|w| {
                got.iter()
                    .any(|g| g.root == w.root && g.payload == w.payload && g.outcome == w.outcome)
            })
        {
            let g: Vec<_> = got.iter().map(|c| (c.root, c.payload, c.outcome)).collect();
            let w: Vec<_> = expected
                .iter()
                .map(|c| (c.root, c.payload, c.outcome))
                .collect();
            return Err((
                Kind::Completion,
                format!("completions {g:x?}, model {w:x?}"),
            ));
        }
        for w in &expected {
            let i = got
                .iter()
                .position(|g| g.root == w.root && g.payload == w.payload)
                .unwrap();
            let g = got.swap_remove(i);
            self.check_elapsed(w.root, &w.entry, w.outcome, g.elapsed)?;
            match w.outcome {
                Outcome::Acked => self.m.counts.acked += 1,
                Outcome::Failed => self.m.counts.failed += 1,
                _ => self.m.counts.timed_out += 1,
            }
        }
        Ok(())
    }

    /// Counters and pending after a step.
    fn check_counts(&mut self) -> Result<(), (Kind, String)> {
        let s = self.acker.stats();
        let pending = self.acker.pending();
        let got = Counts::of(&s);
        let want = self.m.counts;
        if self.m.shut {
            // After shutdown: the outcome counters never move (no tree is left to complete).
            let outcomes = |c: Counts| (c.acked, c.failed, c.timed_out, c.orphans_joined);
            if outcomes(got) != outcomes(want) {
                return Err((
                    Kind::Stats,
                    format!("after shutdown: stats {got:?}, model {want:?}"),
                ));
            }
            if !CHECK_AFTER_SHUTDOWN {
                // Not checked: follow the acker.
                self.m.counts.orphans_expired = got.orphans_expired;
                self.m.counts.rejected_full = got.rejected_full;
            } else {
                if pending != 0 || s.pending != 0 {
                    return Err((
                        Kind::AfterShutdown,
                        format!(
                            "pending() {pending} (stats.pending {}) after shutdown: something \
                             was held",
                            s.pending
                        ),
                    ));
                }
                if got != want {
                    return Err((
                        Kind::AfterShutdown,
                        format!("counters moved after shutdown: stats {got:?}, model {want:?}"),
                    ));
                }
            }
            self.last = got;
            return Ok(());
        }
        if got != want {
            return Err((Kind::Stats, format!("stats {got:?}, model {want:?}")));
        }
        let model_pending = self.m.entries.len();
        if pending != model_pending || s.pending != model_pending {
            let mut roots: Vec<_> = self
                .m
                .entries
                .iter()
                .map(|(r, e)| (*r, e.payload.is_some()))
                .collect();
            roots.sort_unstable();
            return Err((
                Kind::Pending,
                format!(
                    "pending() {pending} (stats.pending {}), model {model_pending} \
                     (root, initialized): {roots:x?}",
                    s.pending
                ),
            ));
        }
        self.last = got;
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), (Kind, String)> {
        let mut expected = Vec::new();
        match *op {
            Op::Init {
                root,
                xor,
                payload,
                timeout,
            } => {
                let r = ROOTS[root];
                self.touch();
                let result = match timeout {
                    Some(t) => {
                        self.acker
                            .init_with_timeout(r, xor, payload, Duration::from_nanos(t))
                    }
                    None => self.acker.init(r, xor, payload),
                };
                let want: Result<(), &str> = if self.m.shut {
                    Err("Shutdown")
                } else {
                    match self.m.entries.get(&r) {
                        Some(e) if e.payload.is_some() => Err("Duplicate"),
                        None if self.m.entries.len() >= self.cfg.max_pending => Err("Full"),
                        _ => Ok(()),
                    }
                };
                let got: Result<(), &str> = match &result {
                    Ok(()) => Ok(()),
                    Err(InitError::Full(p)) if *p == payload => Err("Full"),
                    Err(InitError::Duplicate(p)) if *p == payload => Err("Duplicate"),
                    Err(InitError::Shutdown(p)) if *p == payload => Err("Shutdown"),
                    Err(e) => {
                        return Err((
                            Kind::InitResult,
                            format!("payload not handed back: {e:?}, sent {payload}"),
                        ))
                    }
                };
                if got != want {
                    return Err((
                        Kind::InitResult,
                        format!("init of {r:#x} returned {got:?}, model {want:?}"),
                    ));
                }
                match want {
                    Err("Full") => self.m.counts.rejected_full += 1,
                    Ok(()) => {
                        let mut e = match self.m.entries.remove(&r) {
                            Some(e) => {
                                self.m.counts.orphans_joined += 1;
                                e
                            }
                            None => self.new_entry(0, false),
                        };
                        e.value ^= xor;
                        e.payload = Some(payload);
                        if let Some(t) = timeout {
                            e.own_timeout = Some(self.cfg.effective(t));
                        }
                        let outcome = if e.value == 0 {
                            Some(Outcome::Acked) // Acked wins, even over a held fail
                        } else if e.failed {
                            Some(Outcome::Failed)
                        } else {
                            None
                        };
                        match outcome {
                            Some(outcome) => expected.push(Expected {
                                root: r,
                                payload,
                                outcome,
                                entry: e,
                            }),
                            None => {
                                self.m.entries.insert(r, e);
                            }
                        }
                    }
                    Err(_) => {}
                }
            }
            Op::Ack { root, xor } => {
                let r = ROOTS[root];
                self.touch();
                let got = self.acker.ack(r, xor);
                let want = self.message(r, Some(xor), &mut expected);
                if self.m.shut {
                    if CHECK_AFTER_SHUTDOWN && got {
                        return Err((
                            Kind::AfterShutdown,
                            format!("ack of {r:#x} after shutdown returned true"),
                        ));
                    }
                } else if got != want {
                    return Err((
                        Kind::AckResult,
                        format!("ack of {r:#x} returned {got}, model {want}"),
                    ));
                }
            }
            Op::Fail { root } => {
                let r = ROOTS[root];
                self.touch();
                let got = self.acker.fail(r);
                let want = self.message(r, None, &mut expected);
                if self.m.shut {
                    if CHECK_AFTER_SHUTDOWN && got {
                        return Err((
                            Kind::AfterShutdown,
                            format!("fail of {r:#x} after shutdown returned true"),
                        ));
                    }
                } else if got != want {
                    return Err((
                        Kind::FailResult,
                        format!("fail of {r:#x} returned {got}, model {want}"),
                    ));
                }
            }
            Op::Reset { root } => self.reset(root)?,
            // Clamped to the horizon: only a shrunk sequence can reach it.
            Op::Advance { ns } => {
                self.m.pos = (self.m.pos + i128::from(ns)).min(POS_BUDGET);
                self.set_clock();
            }
            Op::Back { ns } => {
                self.m.pos = (self.m.pos - i128::from(ns)).max(POS_FLOOR);
                self.set_clock();
            }
            Op::Expire => return self.expire(),
            Op::KeepAlive { ns } => {
                for root in 0..ROOTS.len() {
                    self.reset(root)?;
                }
                self.m.pos = (self.m.pos + i128::from(ns)).min(POS_BUDGET);
                self.set_clock();
                return self.expire();
            }
            Op::Shutdown => {
                self.touch();
                let mut back = self.acker.shutdown();
                back.sort_unstable();
                let mut want: Vec<(u64, u64)> = self
                    .m
                    .entries
                    .iter()
                    .filter_map(|(&r, e)| e.payload.map(|p| (r, p)))
                    .collect();
                want.sort_unstable();
                let orphans = self.m.entries.len() - want.len();
                self.m.counts.orphans_expired += orphans as u64;
                self.m.entries.clear();
                self.m.shut = true;
                if back != want {
                    return Err((
                        Kind::ShutdownHandBack,
                        format!("shutdown handed back {back:x?}, model {want:x?}"),
                    ));
                }
                // Nothing delivered by shutdown; the outcome counters unchanged. Under
                // CHECK_AFTER_SHUTDOWN: nothing pending once it has returned, and the
                // orphans it found counted as expired.
                self.check_exact(Vec::new())?;
                let s = self.acker.stats();
                let (pending, got) = (self.acker.pending(), Counts::of(&s));
                let outcomes = |c: Counts| (c.acked, c.failed, c.timed_out, c.orphans_joined);
                if outcomes(got) != outcomes(self.m.counts) {
                    return Err((
                        Kind::Stats,
                        format!(
                            "once shutdown returned: stats {got:?}, model {:?}",
                            self.m.counts
                        ),
                    ));
                }
                if CHECK_AFTER_SHUTDOWN && (pending != 0 || s.pending != 0) {
                    return Err((
                        Kind::AfterShutdown,
                        format!(
                            "pending() {pending} (stats.pending {}) once shutdown returned: \
                             orphans (or trees) left",
                            s.pending
                        ),
                    ));
                }
                if CHECK_AFTER_SHUTDOWN && got != self.m.counts {
                    return Err((
                        Kind::AfterShutdown,
                        format!(
                            "once shutdown returned: stats {got:?}, model {:?} (the orphans it \
                             found count as expired)",
                            self.m.counts
                        ),
                    ));
                }
                if !CHECK_AFTER_SHUTDOWN {
                    self.m.counts.orphans_expired = got.orphans_expired;
                }
                self.last = got;
                return Ok(());
            }
        }
        self.check_exact(expected)?;
        self.check_counts()
    }

    /// An ack (`Some(xor)`) or a fail, on the model: whether it completes a tree.
    fn message(&mut self, r: u64, ack: Option<u64>, expected: &mut Vec<Expected>) -> bool {
        if self.m.shut {
            return false; // the intended rule: nothing happens (CHECK_AFTER_SHUTDOWN)
        }
        if let Some(e) = self.m.entries.get_mut(&r) {
            let done = match ack {
                Some(xor) => {
                    e.value ^= xor;
                    e.payload.is_some() && e.value == 0
                }
                None => {
                    e.failed = true;
                    e.payload.is_some()
                }
            };
            if done {
                let e = self.m.entries.remove(&r).unwrap();
                expected.push(Expected {
                    root: r,
                    payload: e.payload.unwrap(),
                    outcome: if ack.is_some() {
                        Outcome::Acked
                    } else {
                        Outcome::Failed
                    },
                    entry: e,
                });
            }
            return done;
        }
        if self.m.entries.len() >= self.cfg.max_pending {
            self.m.counts.rejected_full += 1; // an orphan refused for capacity
        } else {
            let e = self.new_entry(ack.unwrap_or(0), ack.is_none());
            self.m.entries.insert(r, e);
        }
        false
    }

    fn reset(&mut self, root: usize) -> Result<(), (Kind, String)> {
        let r = ROOTS[root];
        self.touch();
        let got = self.acker.reset_timeout(r);
        let (lo, hi) = (self.m.pos, self.stamp_hi(self.m.pos));
        let want = match self.m.entries.get_mut(&r) {
            Some(e) => {
                // The base moves to now unless it is later (never back).
                e.base_lo = e.base_lo.max(lo);
                e.base_hi = e.base_hi.max(hi);
                true
            }
            None => false,
        };
        if self.m.shut {
            if CHECK_AFTER_SHUTDOWN && got {
                return Err((
                    Kind::AfterShutdown,
                    format!("reset_timeout of {r:#x} after shutdown returned true"),
                ));
            }
        } else if got != want {
            return Err((
                Kind::ResetResult,
                format!("reset_timeout of {r:#x} returned {got}, model {want}"),
            ));
        }
        Ok(())
    }

    /// A pass at the clock now: every completion must be a TimedOut of a tree whose window
    /// has opened (never early); every tree 2 ticks past its deadline must be among them;
    /// the orphans dropped must number between those due and those that may be.
    ///
    /// "Due" is strict: the deadline from the message's own clock reading. A tree late only
    /// because the acker stamped it later than that (a clock read before the epoch, or
    /// 2^30 ticks behind the anchor) or because a re-anchoring raised its base to the
    /// anchor less 2^30 ticks, and the clock then stepped back, is `LateAfterStepBack`.
    fn expire(&mut self) -> Result<(), (Kind, String)> {
        self.touch();
        let count = self.acker.expire();
        let seen = self.take_seen();
        let stats = self.acker.stats();
        if count != seen.len() {
            return Err((
                Kind::ExpireCount,
                format!(
                    "expire() returned {count}, {} completions delivered",
                    seen.len()
                ),
            ));
        }
        if self.m.shut {
            if !seen.is_empty() {
                let s: Vec<_> = seen
                    .iter()
                    .map(|c| (c.root, c.payload, c.outcome))
                    .collect();
                return Err((
                    Kind::Completion,
                    format!("completions after shutdown: {s:x?}"),
                ));
            }
            return self.check_counts();
        }
        let now = self.m.pos;
        let tick = self.tick();
        let floor = self.m.hw - MOST_BEHIND_TICKS * tick;
        // Each entry: may (never early), must (strict), must even after a step back.
        let judge = |e: &Entry| {
            let (may, must, must_tolerant) = self.due_from(e, floor);
            (now >= may, now >= must, now >= must_tolerant)
        };
        let mut late = None;
        let mut orphans: Vec<(u8, i128, Pos, u64)> = Vec::new();
        let (mut must, mut must_tolerant) = (0, 0);
        for (&r, e) in &self.m.entries {
            let (may, m, mt) = judge(e);
            if e.payload.is_some() {
                if m && !seen.iter().any(|c| c.root == r) {
                    let kind = if mt {
                        Kind::LateTimeout
                    } else {
                        Kind::LateAfterStepBack
                    };
                    if late.is_none() || kind == Kind::LateTimeout {
                        late = Some((kind, r));
                    }
                }
            } else if may {
                must += usize::from(m);
                must_tolerant += usize::from(mt);
                // Dropped in the order of their deadlines.
                let t = i128::from(self.timeout_of(e));
                let deadline_tick = e.base_lo.max(0) / tick + (t + tick - 1) / tick + 1;
                orphans.push((2 - u8::from(m) - u8::from(mt), deadline_tick, e.base_lo, r));
            }
        }
        for c in &seen {
            let Some(e) = self.m.entries.get(&c.root) else {
                return Err((
                    Kind::Completion,
                    format!(
                        "expire delivered {:#x} (payload {}, {:?}), not pending in the model",
                        c.root, c.payload, c.outcome
                    ),
                ));
            };
            if c.outcome != Outcome::TimedOut || e.payload != Some(c.payload) {
                return Err((
                    Kind::Completion,
                    format!(
                        "expire delivered {:#x} payload {} {:?}; model payload {:?}",
                        c.root, c.payload, c.outcome, e.payload
                    ),
                ));
            }
            let t = i128::from(self.timeout_of(e));
            let (may, must, _) = self.due_from(e, floor);
            if now < may {
                return Err((
                    Kind::EarlyTimeout,
                    format!(
                        "root {:#x} timed out at {now}, before {may}, where {} begins (base {}, \
                         timeout {t}; first message at {}): {} ns ({:.2} ticks) early",
                        c.root,
                        if may == must {
                            "its deadline tick"
                        } else {
                            "its window"
                        },
                        e.base_lo,
                        e.first_lo,
                        may - now,
                        (may - now) as f64 / tick as f64
                    ),
                ));
            }
        }
        if let Some((kind, r)) = late {
            if kind == Kind::LateTimeout || CHECK_LATE_AFTER_STEP_BACK {
                let e = &self.m.entries[&r];
                let t = i128::from(self.timeout_of(e));
                let (may, must, _) = self.due_from(e, floor);
                return Err((
                    kind,
                    format!(
                        "root {r:#x} not timed out at {now}: due from {must} ({}; base {}, \
                         timeout {t}), {:.2} ticks past it (stamp up to {}, latest clock {})",
                        if may == must {
                            "its deadline tick"
                        } else {
                            "2 ticks past base + timeout"
                        },
                        e.base_lo,
                        (now - must) as f64 / tick as f64,
                        e.base_hi,
                        self.m.hw
                    ),
                ));
            }
        }
        // Timeouts found right: check elapsed and sync.
        for c in &seen {
            let e = self.m.entries.remove(&c.root).unwrap();
            self.check_elapsed(c.root, &e, Outcome::TimedOut, c.elapsed)?;
            self.m.counts.timed_out += 1;
        }
        let dropped =
            (stats.orphans_expired as i128 - self.m.counts.orphans_expired as i128).max(0) as usize;
        if dropped > orphans.len() {
            return Err((
                Kind::EarlyOrphanDrop,
                format!(
                    "{dropped} orphans dropped at {now}; {} may be: {}",
                    orphans.len(),
                    self.orphans_listing(now)
                ),
            ));
        }
        if dropped < must_tolerant || (CHECK_LATE_AFTER_STEP_BACK && dropped < must) {
            return Err((
                if dropped < must_tolerant {
                    Kind::LateOrphanDrop
                } else {
                    Kind::LateAfterStepBack
                },
                format!(
                    "{dropped} orphans dropped at {now}; {must} due ({must_tolerant} even after \
                     a step back): {}",
                    self.orphans_listing(now)
                ),
            ));
        }
        orphans.sort_unstable();
        for (_, _, _, r) in orphans.into_iter().take(dropped) {
            self.m.entries.remove(&r);
            self.m.counts.orphans_expired += 1;
        }
        self.check_counts()
    }

    fn orphans_listing(&self, now: Pos) -> String {
        let mut s = String::new();
        for (&r, e) in &self.m.entries {
            if e.payload.is_none() {
                let t = i128::from(self.timeout_of(e));
                let _ = write!(
                    s,
                    "[{r:#x}: base {} (stamp up to {}), deadline {}, {:.2} ticks past] ",
                    e.base_lo,
                    e.base_hi,
                    e.base_lo + t,
                    (now - e.base_lo - t) as f64 / self.tick() as f64
                );
            }
        }
        s
    }
}

/// Runs `ops` under `cfg`: the first failure. `trace`: the steps, for a replay.
fn run(cfg: Config, ops: &[Op], trace: bool) -> (Result<(), Failure>, Option<String>) {
    let mut h = Harness::new(cfg, trace);
    for (step, op) in ops.iter().enumerate() {
        let result = h.step(op);
        if h.trace.is_some() {
            let line = format!(
                "{step:4} {op:x?}  [clock {} ns = {:.3} ticks, pending {}, {:?}]",
                h.m.pos,
                h.m.pos as f64 / h.tick() as f64,
                h.acker.pending(),
                result.as_ref().err().map(|e| e.0)
            );
            h.log(|| line);
        }
        if let Err((kind, message)) = result {
            let trace = h.trace.take();
            return (
                Err(Failure {
                    kind,
                    step,
                    message: format!("step {step} {op:x?}: {message}"),
                }),
                trace,
            );
        }
    }
    (Ok(()), h.trace.take())
}

// -------------------------------------------------------------------------- generator

/// The generator's idea of a root's current tree (it does not see the acker).
#[derive(Clone, Debug)]
struct Plan {
    init_xor: u64,
    unacked: Vec<u64>,
    inited: bool,
}

struct Gen {
    rng: StdRng,
    cfg: Config,
    plans: Vec<Option<Plan>>,
    acked: Vec<Vec<u64>>,
    pos: Pos,
    max_pos: Pos,
    payload: u64,
}

impl Gen {
    fn edge(&mut self) -> u64 {
        self.rng.random_range(1..=u64::MAX)
    }

    fn new_plan(&mut self) -> Plan {
        if self.rng.random_ratio(1, 25) {
            // Init with xor 0: a tree that completes at once.
            return Plan {
                init_xor: 0,
                unacked: Vec::new(),
                inited: false,
            };
        }
        let n = self.rng.random_range(1..=3);
        let unacked: Vec<u64> = (0..n).map(|_| self.edge()).collect();
        Plan {
            init_xor: unacked.iter().fold(0, |a, e| a ^ e),
            unacked,
            inited: false,
        }
    }

    fn pick_root(&mut self) -> usize {
        let planned: Vec<usize> = (0..ROOTS.len())
            .filter(|&i| self.plans[i].is_some())
            .collect();
        if !planned.is_empty() && self.rng.random_ratio(7, 10) {
            planned[self.rng.random_range(0..planned.len())]
        } else {
            self.rng.random_range(0..ROOTS.len())
        }
    }

    /// A timeout-ish amount around `t` ns.
    fn around(&mut self, t: u64) -> u64 {
        let tick = self.cfg.tick as i128;
        let d = self.rng.random_range(-2 * tick..=3 * tick);
        (t as i128 + d).max(1) as u64
    }

    /// A forward move of the clock, capped by the budget.
    fn forward(&mut self) -> u64 {
        let tick = u128::from(self.cfg.tick);
        let t = self.cfg.timeout;
        let ns: u128 = match self.rng.random_range(0..100) {
            0..10 => 0,
            10..42 => self.rng.random_range(1..=3 * tick),
            42..72 => u128::from(self.around(t)),
            72..84 => self.rng.random_range(1..=64 * tick),
            84..90 if MAX_JUMP_TICKS_LOG2 >= 32 => {
                // Just past 2^31 or 2^32 ticks: where a u32 tick would alias.
                let k = self.rng.random_range(31..=32u32);
                (1u128 << k) * tick + self.rng.random_range(0..(1u128 << 20) * tick)
            }
            _ if MAX_JUMP_TICKS_LOG2 > 6 => {
                let k = self.rng.random_range(7..=MAX_JUMP_TICKS_LOG2);
                self.rng
                    .random_range((1u128 << (k - 1)) * tick..=(1u128 << k) * tick)
            }
            _ => self.rng.random_range(1..=64 * tick),
        };
        let room = (POS_BUDGET - self.max_pos).max(0) as u128;
        self.on_ticks(ns.min(room) as u64)
    }

    fn backward(&mut self) -> u64 {
        let tick = u128::from(self.cfg.tick);
        let ns: u128 = match self.rng.random_range(0..100) {
            0..40 => self.rng.random_range(1..=3 * tick),
            40..70 => u128::from(self.around(self.cfg.timeout)),
            70..85 => self.rng.random_range(1..=64 * tick),
            _ if MAX_JUMP_TICKS_LOG2 > 6 => {
                let k = self.rng.random_range(7..=MAX_JUMP_TICKS_LOG2);
                self.rng
                    .random_range((1u128 << (k - 1)) * tick..=(1u128 << k) * tick)
            }
            _ => self.rng.random_range(1..=64 * tick),
        };
        let floor = if STEPS_BACK_BEFORE_EPOCH {
            POS_FLOOR
        } else {
            0
        };
        let room = (self.pos - floor).max(0) as u128;
        self.on_ticks(ns.min(room) as u64)
    }

    /// A clock move as the configuration has them: down to whole ticks under `whole_ticks`.
    fn on_ticks(&self, ns: u64) -> u64 {
        if self.cfg.whole_ticks {
            ns - ns % self.cfg.tick
        } else {
            ns
        }
    }

    fn advance(&mut self, ns: u64) {
        self.pos += i128::from(ns);
        self.max_pos = self.max_pos.max(self.pos);
    }

    fn op(&mut self) -> Op {
        let keep_weight = if self.cfg.long_lived { 25 } else { 2 };
        let back_weight = if CLOCK_STEPS_BACK { 4 } else { 0 };
        let weights = [
            ("init", 18),
            ("ack", 28),
            ("fail", 4),
            ("reset", 6),
            ("forward", 14),
            ("back", back_weight),
            ("expire", 12),
            ("keep", keep_weight),
        ];
        let total: u32 = weights.iter().map(|w| w.1).sum();
        let mut pick = self.rng.random_range(0..total);
        let what = weights
            .iter()
            .find(|w| {
                if pick < w.1 {
                    true
                } else {
                    pick -= w.1;
                    false
                }
            })
            .unwrap()
            .0;
        match what {
            "init" => {
                let root = self.pick_root();
                let plan = match self.plans[root].take() {
                    Some(p) if p.inited && self.rng.random_ratio(1, 2) => self.new_plan(),
                    Some(p) => p,
                    None => self.new_plan(),
                };
                let xor = plan.init_xor;
                self.plans[root] = Some(Plan {
                    inited: true,
                    ..plan
                });
                self.payload += 1;
                let t = self.cfg.timeout;
                let timeout = match self.rng.random_range(0..100) {
                    0..60 => None,
                    60..85 => {
                        let f = self.rng.random_range(0.125..4.0);
                        Some(((t as f64 * f) as u64).max(1))
                    }
                    85..95 => Some(self.rng.random_range(0..=self.cfg.tick)),
                    95..98 => Some(self.around(t)),
                    // Beyond the clamp (2^30 - 2 ticks; 2^62 ns).
                    _ => Some(if self.rng.random_ratio(1, 2) {
                        u64::MAX
                    } else {
                        (TIMEOUT_TICKS_MAX + self.rng.random_range(0..4)) * self.cfg.tick
                    }),
                };
                Op::Init {
                    root,
                    xor,
                    payload: self.payload,
                    timeout,
                }
            }
            "ack" => {
                let root = self.pick_root();
                if self.plans[root].is_none() && self.rng.random_ratio(1, 2) {
                    // The first ack of a tree whose init comes later: an orphan.
                    self.plans[root] = Some(self.new_plan());
                }
                let r = self.rng.random_range(0..100);
                if r < 6 && !self.acked[root].is_empty() {
                    // A late (duplicated) ack of an edge already acked.
                    let i = self.rng.random_range(0..self.acked[root].len());
                    return Op::Ack {
                        root,
                        xor: self.acked[root][i],
                    };
                }
                let mut xor = None;
                if r < 88 {
                    if let Some(plan) = &mut self.plans[root] {
                        if !plan.unacked.is_empty() {
                            let i = self.rng.random_range(0..plan.unacked.len());
                            let e = plan.unacked.swap_remove(i);
                            self.acked[root].push(e);
                            let mut x = e;
                            if self.rng.random_ratio(1, 4) {
                                // The edge emitted a child: anchored in this ack.
                                let c = self.rng.random_range(1..=u64::MAX);
                                x ^= c;
                                self.plans[root].as_mut().unwrap().unacked.push(c);
                            }
                            xor = Some(x);
                        }
                    }
                }
                let xor = match xor {
                    Some(x) => x,
                    None => self.edge(), // a stray
                };
                if let Some(p) = &self.plans[root] {
                    if p.inited && p.unacked.is_empty() {
                        self.plans[root] = None; // done: the root may be reused
                    }
                }
                if self.acked[root].len() > 8 {
                    self.acked[root].remove(0);
                }
                Op::Ack { root, xor }
            }
            "fail" => {
                let root = self.pick_root();
                if self.plans[root].as_ref().is_some_and(|p| p.inited) {
                    self.plans[root] = None;
                }
                Op::Fail { root }
            }
            "reset" => Op::Reset {
                root: self.pick_root(),
            },
            "forward" => {
                let ns = self.forward();
                self.advance(ns);
                Op::Advance { ns }
            }
            "back" => {
                let ns = self.backward();
                self.pos -= i128::from(ns);
                Op::Back { ns }
            }
            "expire" => Op::Expire,
            _ => {
                // Less than the timeout: a tree kept alive by resets never times out.
                let t = self.cfg.effective(self.cfg.timeout);
                let f = self.rng.random_range(0.3..0.95);
                let room = (POS_BUDGET - self.max_pos).max(0) as u64;
                let ns = self.on_ticks(((t as f64 * f) as u64).min(room));
                self.advance(ns);
                Op::KeepAlive { ns }
            }
        }
    }
}

fn config(rng: &mut StdRng) -> Config {
    let origin = match rng.random_range(0..3) {
        _ if !ODD_ORIGINS => 0,
        0 => 0,
        1 => 1 << 63,
        _ => u64::MAX - rng.random_range(0..1u64 << 24),
    };
    let long_lived = LONG_LIVED_RESETS && rng.random_ratio(1, 5);
    // 1 us to 1 s, powers of two and odd values; at most ~1 ms for long-lived ones (2^33
    // ticks must fit the 2^62 ns budget).
    let max_log = if long_lived { 20 } else { 30 };
    let resolution = if rng.random_ratio(1, 2) {
        1u64 << rng.random_range(10..=max_log)
    } else {
        let hi = if long_lived { 1 << 20 } else { 1_000_000_000 };
        // log-uniform
        let l = rng.random_range((1000f64).ln()..(hi as f64).ln());
        (l.exp() as u64).max(1000) | 1
    };
    let tick = resolution.next_power_of_two();
    let ticks: u64 = if long_lived {
        rng.random_range(1u64 << 26..=TIMEOUT_TICKS_MAX)
    } else {
        let k = rng.random_range(0..=20);
        rng.random_range((1u64 << k)..=(2u64 << k))
            .min(TIMEOUT_TICKS_MAX)
    };
    // Not a multiple of the tick, mostly.
    let timeout = if rng.random_ratio(1, 3) {
        ticks * tick
    } else {
        (ticks * tick - rng.random_range(0..tick)).max(1)
    };
    let max_pending = [1, 2, 3, 16, 1 << 20][rng.random_range(0..5)];
    Config {
        origin,
        resolution,
        tick,
        timeout,
        max_pending,
        long_lived,
        whole_ticks: false,
    }
}

fn sequence(seed: u64) -> (Config, Vec<Op>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cfg = config(&mut rng);
    // A fifth of the sequences on whole ticks. From an rng of its own, as the second
    // shutdown below, so that the other operations stay those of the seed.
    if StdRng::seed_from_u64(seed ^ 0x5748_4f4c_4554_4943).random_ratio(1, 5) {
        cfg.whole_ticks = true;
        cfg.timeout = cfg.timeout.div_ceil(cfg.tick) * cfg.tick;
    }
    let len = if cfg.long_lived {
        rng.random_range(150..350)
    } else {
        rng.random_range(30..160)
    };
    let shutdown_at = rng
        .random_ratio(2, 5)
        .then(|| rng.random_range(len / 3..len));
    // In a third of those, a second shutdown later (it hands back nothing).
    let mut again = StdRng::seed_from_u64(seed ^ 0x5348_5554_444f_574e);
    let shutdown_again = shutdown_at
        .filter(|&at| at + 1 < len && again.random_ratio(1, 3))
        .map(|at| again.random_range(at + 1..len));
    let mut shutdowns = [shutdown_at, shutdown_again]
        .into_iter()
        .flatten()
        .peekable();
    let mut g = Gen {
        rng,
        cfg,
        plans: vec![None; ROOTS.len()],
        acked: vec![Vec::new(); ROOTS.len()],
        pos: 0,
        max_pos: 0,
        payload: seed.wrapping_mul(1 << 20),
    };
    let mut ops = Vec::with_capacity(len + 8);
    while ops.len() < len {
        // At its place, or right after a clock move and its pass stepped over it.
        if shutdowns.next_if(|&at| ops.len() >= at).is_some() {
            ops.push(Op::Shutdown);
            continue;
        }
        let op = g.op();
        let moved = matches!(op, Op::Advance { .. } | Op::Back { .. });
        ops.push(op);
        if moved && g.rng.random_ratio(1, 2) {
            ops.push(Op::Expire);
        }
    }
    (cfg, ops)
}

// ---------------------------------------------------------------------------- shrinker

/// Removes chunks of operations (halves down to single ones) while the run still fails
/// with the same kind; then shortens clock moves. Returns the ops and their failure.
fn shrink(cfg: Config, ops: &[Op], first: Failure) -> (Vec<Op>, Failure, usize) {
    let kind = first.kind;
    let mut cur: Vec<Op> = ops[..=first.step].to_vec();
    let mut fail = first;
    let mut runs = 0;
    let still = |cand: &[Op], runs: &mut usize| -> Option<Failure> {
        *runs += 1;
        match run(cfg, cand, false).0 {
            Err(f) if f.kind == kind => Some(f),
            _ => None,
        }
    };
    let mut chunk = (cur.len() / 2).max(1);
    loop {
        let mut progress = false;
        let mut i = 0;
        while i < cur.len() {
            let end = (i + chunk).min(cur.len());
            let cand: Vec<Op> = cur[..i].iter().chain(&cur[end..]).cloned().collect();
            if let Some(f) = still(&cand, &mut runs) {
                cur = cand[..=f.step].to_vec();
                fail = f;
                progress = true;
            } else {
                i += chunk;
            }
        }
        if !progress {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    // Smaller clock moves.
    for i in 0..cur.len() {
        loop {
            let mut cand = cur.clone();
            match &mut cand[i] {
                Op::Advance { ns } | Op::Back { ns } | Op::KeepAlive { ns } if *ns > 1 => *ns /= 2,
                _ => break,
            }
            match still(&cand, &mut runs) {
                Some(f) => {
                    cur = cand[..=f.step.min(cand.len() - 1)].to_vec();
                    fail = f;
                }
                None => break,
            }
            if i >= cur.len() {
                break;
            }
        }
    }
    (cur, fail, runs)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn listing(cfg: &Config, ops: &[Op]) -> String {
    let mut s = String::new();
    let mut pos: Pos = 0;
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Advance { ns } | Op::KeepAlive { ns } => pos += i128::from(*ns),
            Op::Back { ns } => pos -= i128::from(*ns),
            _ => {}
        }
        let op = match op {
            Op::Init {
                root,
                xor,
                payload,
                timeout,
            } => format!(
                "Init {{ root: {:#x}, xor: {xor:#x}, payload: {payload}, timeout: {timeout:?} }}",
                ROOTS[*root]
            ),
            Op::Ack { root, xor } => format!("Ack {{ root: {:#x}, xor: {xor:#x} }}", ROOTS[*root]),
            Op::Fail { root } => format!("Fail {{ root: {:#x} }}", ROOTS[*root]),
            Op::Reset { root } => format!("Reset {{ root: {:#x} }}", ROOTS[*root]),
            other => format!("{other:?}"),
        };
        let _ = writeln!(
            s,
            "    {i:3}: {op:<80} clock after: {pos} ns ({:.3} ticks)",
            pos as f64 / cfg.tick as f64
        );
    }
    s
}

#[test]
fn model_sequences() {
    let started = Instant::now();
    if let Some(seed) = env_u64("ACKER_MODEL_SEED") {
        let (cfg, ops) = sequence(seed);
        let trace = std::env::var_os("ACKER_MODEL_TRACE").is_some();
        let (result, steps) = run(cfg, &ops, trace);
        if let Some(steps) = steps {
            println!("seed {seed}: {}\n{steps}", cfg.describe());
        }
        if let Err(f) = result {
            let (shrunk, sf, runs) = shrink(cfg, &ops, f.clone());
            panic!(
                "seed {seed} [{:?}] {}\nconfig: {}\nfirst failure: {}\nshrunk ({} ops, {runs} \
                 runs) fails with: {}\n{}",
                sf.kind,
                cfg.describe(),
                cfg.describe(),
                f.message,
                shrunk.len(),
                sf.message,
                listing(&cfg, &shrunk)
            );
        }
        return;
    }
    let seeds = env_u64("ACKER_MODEL_SEEDS").unwrap_or(if cfg!(debug_assertions) {
        SEEDS_DEBUG
    } else {
        SEEDS_RELEASE
    });
    let mut failures: BTreeMap<Kind, Vec<(u64, Failure)>> = BTreeMap::new();
    let mut steps = 0usize;
    for seed in 0..seeds {
        let (cfg, ops) = sequence(seed);
        steps += ops.len();
        if let Err(f) = run(cfg, &ops, false).0 {
            failures.entry(f.kind).or_default().push((seed, f));
        }
    }
    let ran = started.elapsed();
    if failures.is_empty() {
        println!("{seeds} sequences, {steps} steps, all passed in {ran:?}");
        return;
    }
    let mut report = format!(
        "{} of {seeds} sequences failed ({steps} steps, {ran:?}); by kind:\n",
        failures.values().map(Vec::len).sum::<usize>()
    );
    for (kind, list) in &failures {
        let seeds: Vec<u64> = list.iter().map(|(s, _)| *s).take(12).collect();
        let _ = writeln!(report, "  {kind:?}: {} seeds, e.g. {seeds:?}", list.len());
    }
    for (kind, list) in &failures {
        // The failure at the earliest step of the first few, shrunk.
        let (seed, f) = list
            .iter()
            .take(8)
            .min_by_key(|(_, f)| f.step)
            .unwrap()
            .clone();
        let (cfg, ops) = sequence(seed);
        let (shrunk, sf, runs) = shrink(cfg, &ops, f.clone());
        let _ = write!(
            report,
            "\n=== {kind:?}: seed {seed} (replay: ACKER_MODEL_SEED={seed})\n  config: {}\n  \
             first failure: {}\n  shrunk to {} ops ({runs} runs), failing with [{:?}] {}\n{}",
            cfg.describe(),
            f.message,
            shrunk.len(),
            sf.kind,
            sf.message,
            listing(&cfg, &shrunk)
        );
    }
    let _ = write!(report, "\n(total {:?})", started.elapsed());
    panic!("{report}");
}

// ------------------------------------------------------------------ threaded variant

thread_local! {
    /// The completions delivered on this thread since the last take (on_complete runs on
    /// the completing thread).
    static ON_THIS_THREAD: RefCell<Vec<(u64, u64, Outcome)>> = const { RefCell::new(Vec::new()) };
}

fn take_local() -> Vec<(u64, u64, Outcome)> {
    ON_THIS_THREAD.with(|v| std::mem::take(&mut *v.borrow_mut()))
}

/// What the threads saw, for the final accounting.
#[derive(Default)]
struct Tally {
    /// payload -> (root, effective timeout ns): inits that returned Ok.
    accepted: HashMap<u64, (u64, u64)>,
    /// Payloads handed back by a refused init.
    refused: HashSet<u64>,
    full_refusals: u64,
    violations: Vec<String>,
}

fn threaded_round(seed: u64) -> Result<String, Vec<String>> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7468_7265_6164);
    let origin = match rng.random_range(0..3) {
        _ if !ODD_ORIGINS => 0,
        0 => 0,
        1 => 1u64 << 63,
        _ => u64::MAX - rng.random_range(0..1u64 << 30),
    };
    let tick_log = rng.random_range(10..=24u32);
    let resolution = if rng.random_ratio(1, 2) {
        1u64 << tick_log
    } else {
        ((1u64 << tick_log) - rng.random_range(0..1u64 << (tick_log - 1))) | 1
    };
    let tick = resolution.next_power_of_two();
    let timeout = rng.random_range(8..2000) * tick - rng.random_range(0..tick);
    let max_pending = [16usize, 64, 1 << 20][rng.random_range(0..3)];
    let workers = 3usize;
    let ops_per_worker = if cfg!(debug_assertions) {
        4_000
    } else {
        20_000
    };
    let clock = ManualClock::new(origin);
    let completions: Arc<Mutex<Vec<Completion<u64>>>> = Arc::default();
    let sink = Arc::clone(&completions);
    let acker = Acker::<u64>::builder()
        .timeout(Duration::from_nanos(timeout))
        .resolution(Duration::from_nanos(resolution))
        .max_pending(max_pending)
        .clock(clock.clone())
        .on_complete(move |c: Completion<u64>| {
            ON_THIS_THREAD.with(|v| v.borrow_mut().push((c.root, c.payload, c.outcome)));
            sink.lock().unwrap().push(c);
        })
        .build_manual()
        .expect("build_manual");
    let describe = format!(
        "seed {seed}: origin {origin:#x}, resolution {resolution} ns (tick {tick}), timeout {timeout} \
         ns, max_pending {max_pending}"
    );
    let tally = Arc::new(Mutex::new(Tally::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let shut_flag = Arc::new(AtomicBool::new(false));
    // Set before shutdown is called (`shut_flag` once it has returned).
    let shutting = Arc::new(AtomicBool::new(false));
    let shared: Vec<u64> = (0..6u64).map(|i| 0x5ead_0000 + i).collect();

    // The clock thread: moves the clock (far at times, back at times) and runs passes. It
    // returns how many of its passes ran, before shutdown was called, with the clock more
    // than 2^29 ticks past any earlier reading (so past the anchor by 2^29 ticks or more:
    // each of those re-anchors, if no writer did first).
    let clock_thread = {
        let (acker, clock, stop, shutting, tally) = (
            acker.clone(),
            clock.clone(),
            Arc::clone(&stop),
            Arc::clone(&shutting),
            Arc::clone(&tally),
        );
        let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(31) ^ 0xc10c);
        std::thread::spawn(move || {
            let mut pos: i128 = 0;
            let mut latest: i128 = 0;
            let mut passes = 0u64;
            let mut far_passes = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let r = rng.random_range(0..1000);
                let step: i128 = if r < 700 {
                    rng.random_range(0..=(3 * tick) as i128)
                } else if r < 900 {
                    rng.random_range(0..=(2 * timeout) as i128)
                } else if r < 930 && MAX_JUMP_TICKS_LOG2 > 29 {
                    // 2^29 ticks and more: the acker re-anchors under the workers' feet.
                    let k = rng.random_range(29..=MAX_JUMP_TICKS_LOG2.min(34));
                    (1i128 << k) * tick as i128 + rng.random_range(0..tick as i128)
                } else if r < 960 && CLOCK_STEPS_BACK {
                    -rng.random_range(0..=(2 * timeout) as i128)
                } else {
                    0
                };
                // Keep within the budget (and no further back than the floor).
                pos = (pos + step).clamp(POS_FLOOR, POS_BUDGET);
                clock.set(origin.wrapping_add(pos as i64 as u64));
                let far = pos > latest + ((1 << 29) + 1) * tick as i128;
                latest = latest.max(pos);
                take_local();
                let n = acker.expire();
                let local = take_local();
                passes += 1;
                if far && !shutting.load(Ordering::SeqCst) {
                    far_passes += 1;
                }
                if n != local.len() || local.iter().any(|c| c.2 != Outcome::TimedOut) {
                    tally.lock().unwrap().violations.push(format!(
                        "expire() returned {n} but delivered {local:x?} on its thread"
                    ));
                }
                if passes % 8 == 0 {
                    std::thread::yield_now();
                }
            }
            far_passes
        })
    };

    let worker_threads: Vec<_> = (0..workers)
        .map(|w| {
            let (acker, tally, shared, shut_flag) = (
                acker.clone(),
                Arc::clone(&tally),
                shared.clone(),
                Arc::clone(&shut_flag),
            );
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003) + w as u64);
            std::thread::spawn(move || {
                let own: Vec<u64> = (0..8u64).map(|i| ((w as u64 + 1) << 40) | i).collect();
                // Edges of trees this thread inited on its own roots, to ack.
                let mut edges: HashMap<u64, Vec<u64>> = HashMap::new();
                let mut local = Tally::default();
                let mut after_shutdown_msgs = 0u64;
                for i in 0..ops_per_worker {
                    let root = if rng.random_ratio(1, 3) {
                        shared[rng.random_range(0..shared.len())]
                    } else {
                        own[rng.random_range(0..own.len())]
                    };
                    let payload = ((w as u64 + 1) << 48) | i as u64;
                    let was_shut = shut_flag.load(Ordering::SeqCst);
                    take_local();
                    match rng.random_range(0..100) {
                        0..30 => {
                            let n = rng.random_range(1..=3);
                            let es: Vec<u64> =
                                (0..n).map(|_| rng.random_range(1..=u64::MAX)).collect();
                            let xor = es.iter().fold(0, |a, e| a ^ e);
                            let own_t = rng
                                .random_ratio(1, 4)
                                .then(|| rng.random_range(1..=4 * timeout));
                            let result = match own_t {
                                Some(t) => acker.init_with_timeout(
                                    root,
                                    xor,
                                    payload,
                                    Duration::from_nanos(t),
                                ),
                                None => acker.init(root, xor, payload),
                            };
                            let delivered = take_local();
                            match result {
                                Ok(()) => {
                                    let t = own_t.unwrap_or(timeout);
                                    local.accepted.insert(payload, (root, t));
                                    edges.insert(root, es);
                                    if was_shut {
                                        local.violations.push(format!(
                                            "init of {root:#x} accepted after shutdown returned"
                                        ));
                                    }
                                }
                                Err(e) => {
                                    if matches!(e, InitError::Full(_)) {
                                        local.full_refusals += 1;
                                    }
                                    let back = e.into_payload();
                                    if back != payload {
                                        local.violations.push(format!(
                                            "init handed back {back}, sent {payload}"
                                        ));
                                    }
                                    local.refused.insert(payload);
                                }
                            }
                            if delivered.iter().any(|c| c.2 == Outcome::TimedOut) {
                                local
                                    .violations
                                    .push(format!("init delivered a timeout: {delivered:x?}"));
                            }
                        }
                        30..80 => {
                            let xor = match edges.get_mut(&root) {
                                Some(es) if !es.is_empty() && rng.random_ratio(9, 10) => {
                                    let i = rng.random_range(0..es.len());
                                    es.swap_remove(i)
                                }
                                _ => rng.random_range(1..=u64::MAX),
                            };
                            let got = acker.ack(root, xor);
                            let delivered = take_local();
                            if was_shut {
                                after_shutdown_msgs += 1;
                            }
                            check_message(
                                "ack",
                                root,
                                got,
                                &delivered,
                                Outcome::Acked,
                                was_shut,
                                &mut local,
                            );
                        }
                        80..86 => {
                            let got = acker.fail(root);
                            let delivered = take_local();
                            check_message(
                                "fail",
                                root,
                                got,
                                &delivered,
                                Outcome::Failed,
                                was_shut,
                                &mut local,
                            );
                        }
                        _ => {
                            let got = acker.reset_timeout(root);
                            if was_shut && got && CHECK_AFTER_SHUTDOWN {
                                local.violations.push(format!(
                                    "AFTER_SHUTDOWN: reset_timeout of {root:#x} returned true \
                                     after shutdown"
                                ));
                            }
                            let delivered = take_local();
                            if !delivered.is_empty() {
                                local
                                    .violations
                                    .push(format!("reset_timeout delivered {delivered:x?}"));
                            }
                        }
                    }
                    if i % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
                let mut l = tally.lock().unwrap();
                l.accepted.extend(local.accepted);
                l.refused.extend(local.refused);
                l.full_refusals += local.full_refusals;
                l.violations.extend(local.violations);
                after_shutdown_msgs
            })
        })
        .collect();

    // Shutdown while the workers run (or after them, in some rounds).
    let shutdown_early = rng.random_ratio(2, 3);
    let wait =
        Duration::from_millis(rng.random_range(1..if cfg!(debug_assertions) { 60 } else { 25 }));
    let handed_back;
    let far_passes;
    let mut msgs_after = 0;
    if shutdown_early {
        std::thread::sleep(wait);
        shutting.store(true, Ordering::SeqCst);
        handed_back = acker.shutdown();
        shut_flag.store(true, Ordering::SeqCst);
        for t in worker_threads {
            msgs_after += t.join().expect("worker panicked");
        }
        stop.store(true, Ordering::SeqCst);
        far_passes = clock_thread.join().expect("clock thread panicked");
    } else {
        for t in worker_threads {
            msgs_after += t.join().expect("worker panicked");
        }
        stop.store(true, Ordering::SeqCst);
        far_passes = clock_thread.join().expect("clock thread panicked");
        shutting.store(true, Ordering::SeqCst);
        handed_back = acker.shutdown();
        shut_flag.store(true, Ordering::SeqCst);
    }
    acker.wait_delivered();
    // Messages after everything has stopped: nothing held.
    let late_root = 0xdead_beef_u64;
    let late_ack = acker.ack(late_root, 12345);
    let late_fail = acker.fail(late_root + 1);
    let late_init = acker.init(late_root + 2, 1, u64::MAX);

    let mut tally = Arc::try_unwrap(tally)
        .ok()
        .expect("tally still shared")
        .into_inner()
        .unwrap();
    let mut v = std::mem::take(&mut tally.violations);
    match late_init {
        Err(InitError::Shutdown(p)) if p == u64::MAX => {}
        other => v.push(format!("init after shutdown returned {other:?}")),
    }
    let completions = std::mem::take(&mut *completions.lock().unwrap());
    // Every accepted payload exactly once, by a completion or by shutdown.
    let mut came_back: HashMap<u64, Vec<String>> = HashMap::new();
    for c in &completions {
        came_back
            .entry(c.payload)
            .or_default()
            .push(format!("completed {:?} on {:#x}", c.outcome, c.root));
        match tally.accepted.get(&c.payload) {
            Some(&(root, t)) => {
                if root != c.root {
                    v.push(format!(
                        "payload {:#x} inited on {root:#x} completed on {:#x}",
                        c.payload, c.root
                    ));
                }
                let t = t.clamp(1, TIMEOUT_TICKS_MAX * tick);
                if c.outcome == Outcome::TimedOut && c.elapsed < Duration::from_nanos(t) {
                    v.push(format!(
                        "{:#x} TimedOut with elapsed {:?} below its timeout {t} ns",
                        c.root, c.elapsed
                    ));
                }
            }
            None => v.push(format!(
                "completion of a payload never accepted: {:#x} {:#x} {:?}",
                c.root, c.payload, c.outcome
            )),
        }
    }
    for (root, p) in &handed_back {
        came_back
            .entry(*p)
            .or_default()
            .push(format!("handed back on {root:#x}"));
        match tally.accepted.get(p) {
            Some(&(r, _)) if r == *root => {}
            other => v.push(format!(
                "shutdown handed back ({root:#x}, {p:#x}); accepted as {other:x?}"
            )),
        }
    }
    for (p, ways) in &came_back {
        if ways.len() > 1 {
            v.push(format!(
                "payload {p:#x} came back {} times: {ways:?}",
                ways.len()
            ));
        }
        if tally.refused.contains(p) {
            v.push(format!(
                "payload {p:#x} refused and also came back: {ways:?}"
            ));
        }
    }
    let lost: Vec<_> = tally
        .accepted
        .iter()
        .filter(|(p, _)| !came_back.contains_key(p))
        .map(|(p, (r, _))| (*r, *p))
        .collect();
    if !lost.is_empty() {
        v.push(format!(
            "{} accepted payloads never came back, e.g. {:x?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        ));
    }
    // Counters as the completions seen.
    let stats = acker.stats();
    let count = |o: Outcome| completions.iter().filter(|c| c.outcome == o).count() as u64;
    let want = (
        count(Outcome::Acked),
        count(Outcome::Failed),
        count(Outcome::TimedOut),
    );
    if (stats.acked, stats.failed, stats.timed_out) != want {
        v.push(format!(
            "stats (acked, failed, timed_out) = {:?}, completions seen {want:?}",
            (stats.acked, stats.failed, stats.timed_out)
        ));
    }
    // A pass 2^29 ticks or more past the anchor re-anchors (engine/time.rs).
    if far_passes > 0 && acker.reanchorings() == 0 {
        v.push(format!(
            "no re-anchoring after {far_passes} passes more than 2^29 ticks past any earlier \
             clock reading"
        ));
    }
    if stats.rejected_full < tally.full_refusals {
        v.push(format!(
            "rejected_full {} < {} inits refused Full",
            stats.rejected_full, tally.full_refusals
        ));
    }
    if CHECK_AFTER_SHUTDOWN {
        if late_ack || late_fail {
            v.push(format!(
                "AFTER_SHUTDOWN: ack/fail after shutdown returned {late_ack}/{late_fail}"
            ));
        }
        let pending = acker.pending();
        if pending != 0 || stats.pending != 0 {
            v.push(format!(
                "AFTER_SHUTDOWN: pending() {pending} after shutdown (stats.pending {}; {msgs_after} \
                 acks sent after it)",
                stats.pending
            ));
        }
    }
    if v.is_empty() {
        Ok(format!(
            "{describe}: {} accepted, {} completions, {} handed back, {} re-anchorings \
             ({far_passes} far passes)",
            tally.accepted.len(),
            completions.len(),
            handed_back.len(),
            acker.reanchorings()
        ))
    } else {
        v.insert(0, describe);
        Err(v)
    }
}

fn check_message(
    what: &str,
    root: u64,
    got: bool,
    delivered: &[(u64, u64, Outcome)],
    outcome: Outcome,
    was_shut: bool,
    local: &mut Tally,
) {
    if was_shut && CHECK_AFTER_SHUTDOWN && got {
        local.violations.push(format!(
            "AFTER_SHUTDOWN: {what} of {root:#x} returned true after shutdown returned"
        ));
    }
    // true iff this call completed a tree, delivered on this thread during the call.
    if got == delivered.is_empty() {
        local.violations.push(format!(
            "{what} of {root:#x} returned {got} but delivered {delivered:x?} on its thread"
        ));
    }
    if got && !delivered.iter().any(|c| c.0 == root && c.2 == outcome) {
        local.violations.push(format!(
            "{what} of {root:#x} returned true but delivered {delivered:x?} (no {outcome:?} of \
             its root)"
        ));
    }
}

#[test]
fn threaded_invariants() {
    let started = Instant::now();
    let rounds = env_u64("ACKER_MODEL_THREAD_ROUNDS").unwrap_or(if cfg!(debug_assertions) {
        THREAD_ROUNDS_DEBUG
    } else {
        THREAD_ROUNDS_RELEASE
    });
    let mut failed = Vec::new();
    for seed in 0..rounds {
        match threaded_round(seed) {
            Ok(summary) => {
                if std::env::var_os("ACKER_MODEL_TRACE").is_some() {
                    println!("{summary}");
                }
            }
            Err(v) => {
                let shown: Vec<_> = v.iter().take(12).cloned().collect();
                failed.push(format!(
                    "round {seed}: {} violations:\n    {}",
                    v.len() - 1,
                    shown.join("\n    ")
                ));
            }
        }
    }
    if !failed.is_empty() {
        panic!(
            "{} of {rounds} threaded rounds failed ({:?}):\n{}",
            failed.len(),
            started.elapsed(),
            failed.join("\n")
        );
    }
    println!("{rounds} threaded rounds passed in {:?}", started.elapsed());
}
