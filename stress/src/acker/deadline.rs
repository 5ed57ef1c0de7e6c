//! The shared-deadline phase: how long a single `track` call takes while a million trees
//! time out at once on a saturated runtime.
//!
//! `track` promises not to wait on other work, yet a caller may run a late reaper's pass
//! (`AsyncAcker`: the reaper thread asleep well past its timer because every core is busy).
//! This phase builds the worst case for that promise and times every call:
//!
//! 1. A multi-thread tokio runtime with two workers, and an async acker (`build_async`,
//!    its reaper thread, the real clock).
//! 2. The fill: `roots` trees tracked from one task, each with the timeout that puts its
//!    deadline at one shared instant (`track_with_timeout`, 9 s after the phase starts for
//!    a million), each
//!    awaited by a task of its own (a million wake-ups due at once).
//! 3. The load, from 0.5 s before the shared deadline until the last of the million has
//!    timed out (at most 10 s): [`BUSY`] tasks spin 100 µs and yield, again and again (the
//!    workers always have work, so the reaper thread competes for the cores), and [`CALLERS`]
//!    tasks each start a tree with `track`, time the call, ack the tree, await it and
//!    yield, again and again; and beside each such request, one started as a user without
//!    the acker would (a `DashMap` entry with a oneshot under `tokio::time::timeout`), timed
//!    the same way: the peer's tail is what the scheduler alone does to a short call on
//!    this machine at that moment (a worker preempted mid-call by the reaper thread, by
//!    the other worker, by another process). And beside both, a *bare read*: [`READS`]
//!    random lines of a resident [`BARE_BYTES`] buffer, timed the same way, a call that
//!    runs no library code and touches cold memory as `track` does (its table's group,
//!    its slab cell): its tail is what the machine and the process around it do to such
//!    a call, with no acker code in it.
//!
//! 4. The peer's million: the same number of tasks, each awaiting `tokio::time::timeout`
//!    at one shared deadline (what a user without the acker writes), under the same load,
//!    for how late tokio's own timer delivers the same burst on the same runtime.
//!
//! A thread's first `track` call registers the thread with the acker (its record, its
//! thread-local entry, the first slab page of its stripe): page faults, once in the
//! thread's life, and here half a second before the deadline, when no tree is due. Those
//! calls, one a worker, are timed apart ([`FirstCalls`]): they took 19 to 222 µs on a
//! 2-core VM, and the p99.99 of the 20-30 thousand calls timed is about their third
//! slowest, which two such calls could set on their own.
//!
//! It reports every call's time (p50, p99, p99.9, p99.99, max), the peer's beside it, how many passes callers ran
//! and the longest of them (`AckerStats`), and how late the last of each million's
//! timeouts was, the acker's and tokio's. And where the tail comes from: around each timed
//! call it reads its thread's CPU time, involuntary context switches and minor page
//! faults (`CLOCK_THREAD_CPUTIME_ID`, `getrusage(RUSAGE_THREAD)`), and the callers' pass
//! count, so that each call over [`SLOW`] is told apart: held off its core (preempted),
//! faulting, running a caller's pass, or none of these (on its core, nothing on the thread
//! to explain it). The bare reads' slow calls are told apart the same way: on a virtual
//! machine a thread can stop for a hundred microseconds and more with no fault and no
//! switch, the time counted as its own (the hypervisor's doing, which the guest does not
//! see, or an interrupt on its CPU), so that "on its core" does not by itself mean that
//! `track` was working.
//! Targets (reported, not enforced: a shared machine's scheduler can hold any thread): the
//! longest `track` ≤ 100 µs at p99.99 and ≤ 1 ms at most.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackwheel::future::AsyncAcker;
use ackwheel::{Acker, Outcome};
use dashmap::DashMap;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::common::report::Percentiles;

/// Spinning tasks that keep both workers busy.
const BUSY: usize = 6;
/// Tasks that time their `track` calls.
const CALLERS: usize = 4;
/// The shared deadline, after the phase starts: room for the fill, at most 8 µs a tree
/// (2.5-5 µs on a 2-core VM with another process running) and a second.
fn shared_deadline(roots: usize) -> Duration {
    Duration::from_secs(1) + Duration::from_micros(8) * roots as u32
}
/// The callers start this long before it.
const LEAD: Duration = Duration::from_millis(500);
/// The most the phase waits for the million to time out after the deadline.
const DRAIN: Duration = Duration::from_secs(10);
/// A `track` call or bare read this long or longer is looked into ([`Slow`]).
const SLOW: Duration = Duration::from_micros(100);
/// The bare read's buffer: resident, and larger than the last-level cache, so that its
/// lines are cold as a table's are.
const BARE_BYTES: usize = 64 << 20;
/// Lines a bare read loads, one after the other (each address depends on the last): three
/// take about as long as a `track` call at its median (1 µs on a 2-core VM), so that the
/// two are exposed alike to whatever stops a thread for a while.
pub(crate) const READS: usize = 3;

/// The calls of [`SLOW`] or more (`track`'s, or the bare reads'), and what each was doing.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Slow {
    pub(crate) calls: u64,
    /// Off its core for over half of its time (preempted: its CPU time under half its wall
    /// time).
    pub(crate) preempted: u64,
    /// With a minor page fault.
    pub(crate) faulted: u64,
    /// That ran a caller's pass (the callers' pass count moved during it: another caller's
    /// pass may be counted too).
    pub(crate) in_pass: u64,
    /// None of those: on its core, no fault, no involuntary switch, no caller's pass.
    pub(crate) on_core: u64,
    /// The slowest: its wall and CPU time (µs), involuntary switches, minor faults, and
    /// whether a caller's pass ran.
    pub(crate) slowest_us: f64,
    pub(crate) slowest_cpu_us: f64,
    pub(crate) slowest_switches: u64,
    pub(crate) slowest_faults: u64,
    pub(crate) slowest_in_pass: bool,
}

impl Slow {
    fn note(&mut self, wall: Duration, around: &Around, in_pass: bool) {
        if wall < SLOW {
            return;
        }
        let cpu = Duration::from_nanos(around.cpu_ns);
        self.calls += 1;
        self.preempted += u64::from(cpu * 2 < wall);
        self.faulted += u64::from(around.faults > 0);
        self.in_pass += u64::from(in_pass);
        self.on_core +=
            u64::from(cpu * 2 >= wall && around.faults == 0 && around.switches == 0 && !in_pass);
        let wall_us = wall.as_secs_f64() * 1e6;
        if wall_us > self.slowest_us {
            self.slowest_us = wall_us;
            self.slowest_cpu_us = cpu.as_secs_f64() * 1e6;
            self.slowest_switches = around.switches;
            self.slowest_faults = around.faults;
            self.slowest_in_pass = in_pass;
        }
    }

    /// Another caller's slow calls, added to these.
    fn add(&mut self, other: &Slow) {
        let counts = (
            self.calls + other.calls,
            self.preempted + other.preempted,
            self.faulted + other.faulted,
            self.in_pass + other.in_pass,
            self.on_core + other.on_core,
        );
        if other.slowest_us > self.slowest_us {
            *self = other.clone();
        }
        (
            self.calls,
            self.preempted,
            self.faulted,
            self.in_pass,
            self.on_core,
        ) = counts;
    }
}

/// Each thread's first `track` call (module docs): how many, and the longest (µs).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct FirstCalls {
    pub(crate) calls: u64,
    pub(crate) longest_us: f64,
}

impl FirstCalls {
    fn note(&mut self, took: Duration) {
        self.calls += 1;
        self.longest_us = self.longest_us.max(took.as_secs_f64() * 1e6);
    }

    fn add(&mut self, other: &FirstCalls) {
        self.calls += other.calls;
        self.longest_us = self.longest_us.max(other.longest_us);
    }
}

thread_local! {
    /// Whether this thread has called `track` (its first call is timed apart).
    static TRACKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What the calling thread's counters moved by over a call.
struct Around {
    cpu_ns: u64,
    switches: u64,
    faults: u64,
}

/// The calling thread's CPU time (ns), involuntary context switches and minor page faults.
fn thread_counters() -> (u64, u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: `rusage` is plain integers, valid all-zero.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // Safety: both calls write only the structures passed, which live on this stack; a
    // failure leaves them zero (the figures then read as no time and no event).
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
    }
    let cpu = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    (cpu, ru.ru_nivcsw as u64, ru.ru_minflt as u64)
}

/// The phase's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SharedDeadline {
    pub(crate) roots: usize,
    /// Seconds the fill took (it must end before the deadline).
    pub(crate) fill_seconds: f64,
    /// Every timed `track` call, in µs, and the p99.99 beside the histogram's others.
    pub(crate) track: Percentiles,
    pub(crate) track_p9999_us: f64,
    /// The same for the peer's start of a request, timed in the same loops.
    pub(crate) peer: Percentiles,
    pub(crate) peer_p9999_us: f64,
    /// `AckerStats::caller_passes`, `caller_pass_longest` (µs).
    pub(crate) caller_passes: u64,
    pub(crate) caller_pass_longest_us: f64,
    /// The million's timeouts: how many came, and the last one's lateness after the shared
    /// deadline (ms).
    pub(crate) timed_out: usize,
    pub(crate) last_timeout_ms: f64,
    /// The peer's million (`tokio::time::timeout`, step 4): how many timed out, and the
    /// last one's lateness after its shared deadline (ms).
    pub(crate) peer_timed_out: usize,
    pub(crate) peer_last_timeout_ms: f64,
    /// The `track` calls of [`SLOW`] or more, and what they were doing.
    pub(crate) slow: Slow,
    /// Each worker's first `track` call, not in `track` or `slow` (module docs).
    pub(crate) first: FirstCalls,
    /// The bare reads timed in the same loops, and those of [`SLOW`] or more.
    pub(crate) bare: Percentiles,
    pub(crate) bare_p9999_us: f64,
    pub(crate) bare_slow: Slow,
}

/// What the callers timed: every `track` call but a thread's first, the peer's starts and the
/// bare reads, and the slow calls of `track` and of the reads; and the threads' first calls.
struct Timed {
    track: Histogram<u64>,
    first: FirstCalls,
    peer: Histogram<u64>,
    bare: Histogram<u64>,
    slow: Slow,
    bare_slow: Slow,
}

impl Timed {
    fn new() -> Result<Timed, String> {
        let histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .map_err(|e| format!("shared-deadline phase: {e}"))?;
        Ok(Timed {
            track: histogram.clone(),
            first: FirstCalls::default(),
            peer: histogram.clone(),
            bare: histogram,
            slow: Slow::default(),
            bare_slow: Slow::default(),
        })
    }

    /// A caller's figures, added to these.
    fn add(&mut self, other: &Timed) -> Result<(), String> {
        self.track
            .add(&other.track)
            .and_then(|()| self.peer.add(&other.peer))
            .and_then(|()| self.bare.add(&other.bare))
            .map_err(|e| format!("shared-deadline phase: {e}"))?;
        self.first.add(&other.first);
        self.slow.add(&other.slow);
        self.bare_slow.add(&other.bare_slow);
        Ok(())
    }
}

/// Runs the phase with `roots` trees sharing the deadline.
pub(crate) fn run(roots: usize) -> Result<SharedDeadline, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .map_err(|e| format!("shared-deadline phase: no runtime: {e}"))?;
    runtime.block_on(phase(roots))
}

async fn phase(roots: usize) -> Result<SharedDeadline, String> {
    let (acker, _completions) = Acker::<u32>::builder()
        .timeout(Duration::from_secs(60))
        .max_pending(roots + 1024 * CALLERS)
        .build_async(1024)
        .map_err(|e| format!("shared-deadline phase: {e}"))?;
    // Written (resident) before the fill: the bare reads must fault nothing.
    let bare: Arc<[u64]> = (0..BARE_BYTES / 8).map(|i| i as u64).collect();
    let started = Instant::now();
    let deadline = started + shared_deadline(roots);
    let timed_out = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let last = Arc::new(std::sync::Mutex::new(started));
    for i in 0..roots {
        let root = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1 << 63;
        let left = deadline.saturating_duration_since(Instant::now());
        let tree = acker
            .track_with_timeout(root, 0b1, 0, left)
            .map_err(|e| format!("shared-deadline phase: track {i} refused: {e}"))?;
        let (timed_out, last) = (Arc::clone(&timed_out), Arc::clone(&last));
        tokio::spawn(async move {
            if let Ok(done) = tree.await {
                if done.outcome == Outcome::TimedOut {
                    timed_out.fetch_add(1, Ordering::Relaxed);
                    let mut last = last.lock().unwrap();
                    *last = (*last).max(Instant::now());
                }
            }
        });
        if i % 4096 == 0 {
            tokio::task::yield_now().await; // let the awaiting tasks register
        }
    }
    let fill_seconds = started.elapsed().as_secs_f64();
    if Instant::now() + LEAD > deadline {
        return Err(format!(
            "shared-deadline phase: the fill of {roots} trees took {fill_seconds:.2} s, past {:?} less the callers' lead",
            shared_deadline(roots)
        ));
    }
    let timed = under_load(&acker, deadline, roots, &timed_out, &bare).await?;
    let (peer_timed_out, peer_last_timeout_ms) = tokio_peer(&acker, roots, &bare).await?;
    let stats = acker.stats();
    let last = *last.lock().unwrap();
    Ok(SharedDeadline {
        roots,
        fill_seconds,
        track: Percentiles::of(&timed.track),
        track_p9999_us: timed.track.value_at_quantile(0.9999) as f64 / 1e3,
        peer: Percentiles::of(&timed.peer),
        peer_p9999_us: timed.peer.value_at_quantile(0.9999) as f64 / 1e3,
        bare: Percentiles::of(&timed.bare),
        bare_p9999_us: timed.bare.value_at_quantile(0.9999) as f64 / 1e3,
        caller_passes: stats.caller_passes,
        caller_pass_longest_us: stats.caller_pass_longest.as_secs_f64() * 1e6,
        timed_out: timed_out.load(Ordering::Relaxed),
        last_timeout_ms: last.saturating_duration_since(deadline).as_secs_f64() * 1e3,
        peer_timed_out,
        peer_last_timeout_ms,
        slow: timed.slow,
        first: timed.first,
        bare_slow: timed.bare_slow,
    })
}

/// Step 3: from [`LEAD`] before `deadline` until `roots` trees have timed out (or
/// [`DRAIN`] after it), [`BUSY`] spinning tasks and [`CALLERS`] timing their calls (bare
/// reads of `bare` among them); what they timed.
async fn under_load(
    acker: &AsyncAcker<u32>,
    deadline: Instant,
    roots: usize,
    timed_out: &std::sync::atomic::AtomicUsize,
    bare: &Arc<[u64]>,
) -> Result<Timed, String> {
    tokio::time::sleep_until((deadline - LEAD).into()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..BUSY)
        .map(|_| {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let spin = Instant::now();
                    while spin.elapsed() < Duration::from_micros(100) {
                        std::hint::spin_loop();
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let peer = Arc::new(DashMap::new());
    let callers: Vec<_> = (0..CALLERS)
        .map(|c| {
            let (stop, acker, peer) = (Arc::clone(&stop), acker.clone(), Arc::clone(&peer));
            let bare = Arc::clone(bare);
            tokio::spawn(async move { time_tracks(c as u64, &acker, &peer, &bare, &stop).await })
        })
        .collect();
    let end = deadline + DRAIN;
    while timed_out.load(Ordering::Relaxed) < roots && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut timed = Timed::new()?;
    for caller in callers {
        let its = caller
            .await
            .map_err(|e| format!("shared-deadline phase: a caller failed: {e}"))??;
        timed.add(&its)?;
    }
    for task in busy {
        let _ = task.await;
    }
    Ok(timed)
}

/// Step 4: `roots` tasks each awaiting `tokio::time::timeout` at one shared deadline, under
/// the same load as step 3 (the callers' figures are not kept); how many timed out, and
/// the last one's lateness (ms).
async fn tokio_peer(
    acker: &AsyncAcker<u32>,
    roots: usize,
    bare: &Arc<[u64]>,
) -> Result<(usize, f64), String> {
    let started = Instant::now();
    let deadline = started + shared_deadline(roots);
    let timed_out = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let last = Arc::new(std::sync::Mutex::new(started));
    for i in 0..roots {
        let (timed_out, last) = (Arc::clone(&timed_out), Arc::clone(&last));
        tokio::spawn(async move {
            let never = std::future::pending::<()>();
            if tokio::time::timeout_at(deadline.into(), never)
                .await
                .is_err()
            {
                timed_out.fetch_add(1, Ordering::Relaxed);
                let mut last = last.lock().unwrap();
                *last = (*last).max(Instant::now());
            }
        });
        if i % 4096 == 0 {
            tokio::task::yield_now().await; // let the awaiting tasks register
        }
    }
    under_load(acker, deadline, roots, &timed_out, bare).await?;
    let last = *last.lock().unwrap();
    Ok((
        timed_out.load(Ordering::Relaxed),
        last.saturating_duration_since(deadline).as_secs_f64() * 1e3,
    ))
}

/// One caller's loop until `stop`: `track`, timed, then the ack and the await; the start
/// of the same request the way a user without the acker would write it, timed too (the
/// peer: a `DashMap` entry with a oneshot, under `tokio::time::timeout`), whose tail is
/// what the scheduler alone does to a call on this machine at this moment; and a bare read
/// of `bare` ([`bare_read`]), whose tail is what the machine does to a call that touches
/// cold memory. Each slow `track` call and bare read is looked into ([`Slow`]).
async fn time_tracks(
    caller: u64,
    acker: &AsyncAcker<u32>,
    peer: &DashMap<u64, oneshot::Sender<Outcome>>,
    bare: &[u64],
    stop: &AtomicBool,
) -> Result<Timed, String> {
    let mut timed = Timed::new()?;
    let record = |h: &mut Histogram<u64>, took: Duration| {
        h.record(took.as_nanos().max(1) as u64)
            .map_err(|e| format!("shared-deadline phase: {e}"))
    };
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let root = (caller << 48 | n).wrapping_mul(0xD6E8_FEB8_6659_FD93) & !(1 << 63) | 1;
        let passes = acker.stats().caller_passes;
        // On the thread the call runs on: nothing awaits between the two.
        let first = !TRACKED.with(|t| t.replace(true));
        let (took, around, tree) = timed_call(|| acker.track(root, 0b1, 0));
        let tree = tree.map_err(|e| format!("shared-deadline phase: track refused: {e}"))?;
        if first {
            timed.first.note(took);
        } else {
            let in_pass = acker.stats().caller_passes != passes;
            timed.slow.note(took, &around, in_pass);
            record(&mut timed.track, took)?;
        }
        acker.ack(root, 0b1);
        match tree.await {
            Ok(done) if done.outcome == Outcome::Acked => {}
            other => return Err(format!("shared-deadline phase: a caller's tree: {other:?}")),
        }
        let call = Instant::now();
        let (sender, receiver) = oneshot::channel();
        peer.insert(root, sender);
        let outcome = tokio::time::timeout(Duration::from_secs(60), receiver);
        let took = call.elapsed();
        record(&mut timed.peer, took)?;
        if let Some((_, sender)) = peer.remove(&root) {
            let _ = sender.send(Outcome::Acked);
        }
        match outcome.await {
            Ok(Ok(Outcome::Acked)) => {}
            other => {
                return Err(format!(
                    "shared-deadline phase: a peer's request: {other:?}"
                ))
            }
        }
        let (took, around, _) = timed_call(|| std::hint::black_box(bare_read(bare, root)));
        timed.bare_slow.note(took, &around, false);
        record(&mut timed.bare, took)?;
        // A request's handler gives its worker back (an acked tree's await is ready at
        // once): without it the callers would hold both workers, and the runtime's timers
        // (the phase's own clock) would never run.
        tokio::task::yield_now().await;
    }
    Ok(timed)
}

/// `call`, timed, with what its thread's counters moved by around it, and its result.
fn timed_call<R>(call: impl FnOnce() -> R) -> (Duration, Around, R) {
    let (cpu, switches, faults) = thread_counters();
    let began = Instant::now();
    let result = call();
    let took = began.elapsed();
    let after = thread_counters();
    let around = Around {
        cpu_ns: after.0.saturating_sub(cpu),
        switches: after.1.saturating_sub(switches),
        faults: after.2.saturating_sub(faults),
    };
    (took, around, result)
}

/// [`READS`] lines of `bare`, each address taken from the word read before it (so the
/// loads cannot overlap, as a table's search follows its group's words), starting from
/// `seed`.
fn bare_read(bare: &[u64], seed: u64) -> u64 {
    let mut at = seed;
    for _ in 0..READS {
        let word = bare[(at.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize % bare.len()];
        at = at.rotate_left(17) ^ word;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn around(cpu_us: u64, switches: u64, faults: u64) -> Around {
        Around {
            cpu_ns: cpu_us * 1_000,
            switches,
            faults,
        }
    }

    #[test]
    fn slow_calls_are_told_apart_and_callers_add_up() {
        let us = Duration::from_micros;
        let mut one = Slow::default();
        one.note(us(99), &around(99, 0, 0), false); // not slow
        one.note(us(150), &around(148, 0, 0), false); // on its core, nothing to show
        one.note(us(400), &around(40, 1, 0), false); // preempted
        let mut other = Slow::default();
        other.note(us(200), &around(190, 0, 3), false); // faulting
        other.note(us(900), &around(800, 0, 0), true); // in a pass, the slowest
        other.note(us(120), &around(100, 1, 0), false); // a switch: none of the groups
        let counts = |s: &Slow| (s.calls, s.preempted, s.faulted, s.in_pass, s.on_core);
        assert_eq!(counts(&one), (2, 1, 0, 0, 1));
        one.add(&other);
        assert_eq!(
            counts(&one),
            (5, 1, 1, 1, 1),
            "the counts of both, whichever holds the slowest"
        );
        assert_eq!(one.slowest_us, 900.0);
        assert_eq!(one.slowest_cpu_us, 800.0);
        assert!(one.slowest_in_pass);
    }

    #[test]
    fn first_calls_add_up_to_their_count_and_longest() {
        let mut one = FirstCalls::default();
        one.note(Duration::from_micros(30));
        one.note(Duration::from_micros(200));
        let mut other = FirstCalls::default();
        other.note(Duration::from_micros(90));
        one.add(&other);
        assert_eq!((one.calls, one.longest_us), (3, 200.0));
        other.add(&one);
        assert_eq!((other.calls, other.longest_us), (4, 200.0));
    }

    #[test]
    fn a_bare_read_reads_its_buffer_and_stays_in_it() {
        let bare: Vec<u64> = (0..1024).collect();
        let zeros = vec![0u64; 1024];
        // It reads the words (the same seed over other words comes to another value), the
        // same ones for the same seed.
        assert_ne!(bare_read(&bare, 7), bare_read(&zeros, 7));
        assert_eq!(bare_read(&bare, 7), bare_read(&bare, 7));
        for seed in 0..10_000 {
            bare_read(&bare, seed); // in bounds for any seed
        }
    }
}
