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
//!    the other worker, by another process).
//!
//! 4. The peer's million: the same number of tasks, each awaiting `tokio::time::timeout`
//!    at one shared deadline (what a user without the acker writes), under the same load,
//!    for how late tokio's own timer delivers the same burst on the same runtime.
//!
//! It reports every call's time (p50, p99, p99.9, p99.99, max), the peer's beside it, how many passes callers ran
//! and the longest of them (`AckerStats`), and how late the last of each million's
//! timeouts was, the acker's and tokio's. And where the tail comes from: around each timed
//! call it reads its thread's CPU time, involuntary context switches and minor page
//! faults (`CLOCK_THREAD_CPUTIME_ID`, `getrusage(RUSAGE_THREAD)`), and the callers' pass
//! count, so that each call over [`SLOW`] is told apart: held off its core (preempted),
//! faulting, running a caller's pass, or simply working.
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
/// A `track` call this long or longer is looked into ([`Slow`]).
const SLOW: Duration = Duration::from_micros(100);

/// The `track` calls of [`SLOW`] or more, and what each was doing.
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
        );
        if other.slowest_us > self.slowest_us {
            *self = other.clone();
        }
        (self.calls, self.preempted, self.faulted, self.in_pass) = counts;
    }
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
    /// The calls of [`SLOW`] or more, and what they were doing.
    pub(crate) slow: Slow,
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
    let (calls, peer_calls, slow) = under_load(&acker, deadline, roots, &timed_out).await?;
    let (peer_timed_out, peer_last_timeout_ms) = tokio_peer(&acker, roots).await?;
    let stats = acker.stats();
    let last = *last.lock().unwrap();
    Ok(SharedDeadline {
        roots,
        fill_seconds,
        track: Percentiles::of(&calls),
        track_p9999_us: calls.value_at_quantile(0.9999) as f64 / 1e3,
        peer: Percentiles::of(&peer_calls),
        peer_p9999_us: peer_calls.value_at_quantile(0.9999) as f64 / 1e3,
        caller_passes: stats.caller_passes,
        caller_pass_longest_us: stats.caller_pass_longest.as_secs_f64() * 1e6,
        timed_out: timed_out.load(Ordering::Relaxed),
        last_timeout_ms: last.saturating_duration_since(deadline).as_secs_f64() * 1e3,
        peer_timed_out,
        peer_last_timeout_ms,
        slow,
    })
}

/// Step 3: from [`LEAD`] before `deadline` until `roots` trees have timed out (or
/// [`DRAIN`] after it), [`BUSY`] spinning tasks and [`CALLERS`] timing their calls; their
/// histograms of `track` and of the peer's start, and the slow calls.
async fn under_load(
    acker: &AsyncAcker<u32>,
    deadline: Instant,
    roots: usize,
    timed_out: &std::sync::atomic::AtomicUsize,
) -> Result<(Histogram<u64>, Histogram<u64>, Slow), String> {
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
            tokio::spawn(async move { time_tracks(c as u64, &acker, &peer, &stop).await })
        })
        .collect();
    let end = deadline + DRAIN;
    while timed_out.load(Ordering::Relaxed) < roots && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut calls = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| format!("shared-deadline phase: {e}"))?;
    let mut peer_calls = calls.clone();
    let mut slow = Slow::default();
    for caller in callers {
        let (mine, peers, its_slow) = caller
            .await
            .map_err(|e| format!("shared-deadline phase: a caller failed: {e}"))??;
        calls
            .add(&mine)
            .and_then(|()| peer_calls.add(&peers))
            .map_err(|e| format!("shared-deadline phase: {e}"))?;
        slow.add(&its_slow);
    }
    for task in busy {
        let _ = task.await;
    }
    Ok((calls, peer_calls, slow))
}

/// Step 4: `roots` tasks each awaiting `tokio::time::timeout` at one shared deadline, under
/// the same load as step 3 (the callers' figures are not kept); how many timed out, and
/// the last one's lateness (ms).
async fn tokio_peer(acker: &AsyncAcker<u32>, roots: usize) -> Result<(usize, f64), String> {
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
    under_load(acker, deadline, roots, &timed_out).await?;
    let last = *last.lock().unwrap();
    Ok((
        timed_out.load(Ordering::Relaxed),
        last.saturating_duration_since(deadline).as_secs_f64() * 1e3,
    ))
}

/// One caller's loop until `stop`: `track`, timed, then the ack and the await; and the
/// start of the same request the way a user without the acker would write it, timed too
/// (the peer: a `DashMap` entry with a oneshot, under `tokio::time::timeout`), whose tail
/// is what the scheduler alone does to a call on this machine at this moment. Each slow
/// `track` call is looked into ([`Slow`]).
async fn time_tracks(
    caller: u64,
    acker: &AsyncAcker<u32>,
    peer: &DashMap<u64, oneshot::Sender<Outcome>>,
    stop: &AtomicBool,
) -> Result<(Histogram<u64>, Histogram<u64>, Slow), String> {
    let histogram = || {
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .map_err(|e| format!("shared-deadline phase: {e}"))
    };
    let (mut calls, mut peer_calls) = (histogram()?, histogram()?);
    let record = |h: &mut Histogram<u64>, took: Duration| {
        h.record(took.as_nanos().max(1) as u64)
            .map_err(|e| format!("shared-deadline phase: {e}"))
    };
    let mut n = 0u64;
    let mut slow = Slow::default();
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let root = (caller << 48 | n).wrapping_mul(0xD6E8_FEB8_6659_FD93) & !(1 << 63) | 1;
        let passes = acker.stats().caller_passes;
        let (cpu, switches, faults) = thread_counters();
        let call = Instant::now();
        let tree = acker.track(root, 0b1, 0);
        let took = call.elapsed();
        let after = thread_counters();
        let around = Around {
            cpu_ns: after.0.saturating_sub(cpu),
            switches: after.1.saturating_sub(switches),
            faults: after.2.saturating_sub(faults),
        };
        slow.note(took, &around, acker.stats().caller_passes != passes);
        let tree = tree.map_err(|e| format!("shared-deadline phase: track refused: {e}"))?;
        record(&mut calls, took)?;
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
        record(&mut peer_calls, took)?;
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
        // A request's handler gives its worker back (an acked tree's await is ready at
        // once): without it the callers would hold both workers, and the runtime's timers
        // (the phase's own clock) would never run.
        tokio::task::yield_now().await;
    }
    Ok((calls, peer_calls, slow))
}
