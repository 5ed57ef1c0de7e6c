//! The traffic phase: what it runs on (the acker, the topology's shared state, the oracle
//! and its checker thread), its spouts and bolts, and its sampling.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use ackwheel::Acker;
use crossbeam_channel::{Receiver, Sender};
use crossbeam_utils::CachePadded;

use super::oracle::{self, Oracle, Tally};
use super::topology::{Counters, Shape, Topology, Tuple};
use super::{Config, Summary, MAX_ATTEMPTS};
use crate::common::report::{self, Progress, Sample};
use crate::common::split_seed;

/// What the traffic runs on: the acker, the topology's shared state, and the oracle that
/// judges every tree.
pub(super) struct Rig {
    pub(super) timeout: Duration,
    pub(super) timeout_ns: u64,
    pub(super) oracle: Arc<Oracle>,
    /// Each spout's free slots (what is not in them is in flight).
    pub(super) free: Vec<Receiver<u32>>,
    /// Each spout's replays, sent by the checker.
    pub(super) replays: Vec<Receiver<(u64, u8)>>,
    /// Each bolt's tuples.
    pub(super) bolts: Vec<Receiver<Tuple>>,
    pub(super) acker: Acker<u32>,
    pub(super) topo: Topology,
}

impl Rig {
    /// The oracle, its checker thread (returned, joined once the drain is over), the acker
    /// and the topology; no spout or bolt runs yet.
    pub(super) fn build(cfg: &Config) -> (Rig, thread::JoinHandle<Tally>) {
        let timeout = Duration::from_millis(cfg.timeout_ms.max(1));
        let timeout_ns = timeout.as_nanos() as u64;
        let per_spout = cfg.in_flight.div_ceil(cfg.spouts).max(1);
        let (oracle, free, reports) = Oracle::new(cfg.spouts, per_spout, timeout_ns, cfg.plant_bug);
        let oracle = Arc::new(oracle);

        let (replay_tx, replay_rx): (Vec<_>, Vec<_>) = (0..cfg.spouts)
            .map(|_| crossbeam_channel::unbounded::<(u64, u8)>())
            .unzip();
        let checker = {
            let replays = cfg.replay.then(|| (replay_tx.clone(), MAX_ATTEMPTS));
            thread::Builder::new()
                .name("stress-checker".into())
                .spawn(move || oracle::check(reports, timeout_ns, replays))
                .expect("spawn the checker")
        };
        drop(replay_tx);

        let sink = Arc::clone(&oracle);
        let mut builder = Acker::builder()
            .timeout(timeout)
            .max_pending(cfg.max_pending)
            .on_complete(move |c| sink.on_complete(c));
        if let Some(us) = cfg.resolution_us {
            builder = builder.resolution(Duration::from_micros(us.max(1)));
        }
        let acker: Acker<u32> = builder.build().expect("a valid acker configuration");

        let (bolt_tx, bolt_rx): (Vec<_>, Vec<_>) = (0..cfg.bolts)
            .map(|_| crossbeam_channel::unbounded())
            .unzip();
        let topo = build_topology(cfg, &acker, &oracle, bolt_tx);
        let rig = Rig {
            timeout,
            timeout_ns,
            oracle,
            free,
            replays: replay_rx,
            bolts: bolt_rx,
            acker,
            topo,
        };
        (rig, checker)
    }
}

/// The topology's shared state, with its shape from the knobs.
fn build_topology(
    cfg: &Config,
    acker: &Acker<u32>,
    oracle: &Arc<Oracle>,
    bolt_tx: Vec<Sender<Tuple>>,
) -> Topology {
    Topology {
        acker: acker.clone(),
        oracle: Arc::clone(oracle),
        shape: Shape {
            fanout: cfg.fanout.max(1),
            depth: cfg.depth.max(1),
            fail_rate: cfg.fail_rate.clamp(0.0, 1.0),
            drop_rate: cfg.drop_rate.clamp(0.0, 1.0),
            dup_rate: cfg.dup_rate.clamp(0.0, 1.0),
            reset_rate: 0.001,
            ghost_rate: 0.0005,
            join_rate: 0.03,
            init_first_rate: 0.25,
            init_held_rate: 0.10,
            max_trees: cfg.trees.unwrap_or(u64::MAX),
            breathe_ns: cfg.breathe_ms.saturating_mul(1_000_000),
            ack_frames: cfg.ack_frames,
        },
        bolts: bolt_tx,
        outstanding: AtomicI64::new(0),
        spouts_running: AtomicUsize::new(cfg.spouts),
        stop: AtomicBool::new(false),
        started: AtomicU64::new(0),
        max_pending: cfg.max_pending,
        refused_with_room: AtomicU64::new(0),
        pending_at_refusal: AtomicUsize::new(0),
        // Spouts first, then bolts: each thread its own cache line of counters.
        counters: (0..cfg.spouts + cfg.bolts)
            .map(|_| CachePadded::new(Counters::default()))
            .collect(),
    }
}

/// The traffic phase: spouts and bolts run for `--duration` (or until the spouts have
/// started `--trees`), sampled for the throughput and the progress line.
pub(super) fn traffic_phase(
    cfg: &Config,
    rig: &Rig,
    progress: &mut Progress,
    summary: &mut Summary,
) {
    let barrier = Barrier::new(cfg.spouts + cfg.bolts + 1);
    let traffic = thread::scope(|s| {
        let topo = &rig.topo;
        let barrier = &barrier;
        spawn_bolts(s, cfg, rig, barrier);
        let spouts = spawn_spouts(s, cfg, rig, barrier);
        barrier.wait();
        let traffic_start = Instant::now();
        sample_traffic(cfg, rig, traffic_start, progress, summary);
        topo.stop.store(true, Ordering::Relaxed);
        let traffic = traffic_start.elapsed();
        summary.trees_completed = rig.oracle.completions.load(Ordering::Relaxed);
        summary.acks = topo.sum(|c| &c.acks);
        for spout in spouts {
            let _ = spout.join();
        }
        // The bolts leave by themselves once every tuple has been processed.
        traffic
    });
    summary.traffic_seconds = traffic.as_secs_f64();
    summary.trees_per_s = summary.trees_completed as f64 / summary.traffic_seconds;
    summary.acks_per_s = summary.acks as f64 / summary.traffic_seconds;
}

fn spawn_bolts<'scope>(
    s: &'scope thread::Scope<'scope, '_>,
    cfg: &'scope Config,
    rig: &'scope Rig,
    barrier: &'scope Barrier,
) {
    let topo = &rig.topo;
    for (i, rx) in rig.bolts.iter().enumerate() {
        let seed = split_seed(cfg.seed, 1000 + i as u64);
        thread::Builder::new()
            .name(format!("bolt-{i}"))
            .spawn_scoped(s, move || {
                barrier.wait();
                topo.bolt(cfg.spouts + i, seed, rx);
            })
            .expect("spawn a bolt");
    }
}

fn spawn_spouts<'scope>(
    s: &'scope thread::Scope<'scope, '_>,
    cfg: &'scope Config,
    rig: &'scope Rig,
    barrier: &'scope Barrier,
) -> Vec<thread::ScopedJoinHandle<'scope, ()>> {
    let topo = &rig.topo;
    rig.free
        .iter()
        .zip(&rig.replays)
        .enumerate()
        .map(|(i, (free, replays))| {
            let seed = split_seed(cfg.seed, i as u64);
            thread::Builder::new()
                .name(format!("spout-{i}"))
                .spawn_scoped(s, move || {
                    barrier.wait();
                    topo.spout(i, seed, free, replays);
                    topo.spouts_running.fetch_sub(1, Ordering::SeqCst);
                })
                .expect("spawn a spout")
        })
        .collect()
}

/// Samples the throughput every half second and shows the progress line until
/// `--duration` is over or the topology stops by itself (`--trees`).
fn sample_traffic(
    cfg: &Config,
    rig: &Rig,
    traffic_start: Instant,
    progress: &mut Progress,
    summary: &mut Summary,
) {
    let Rig {
        oracle,
        topo,
        acker,
        free,
        ..
    } = rig;
    let duration = Duration::from_secs_f64(cfg.duration_s);
    let mut last = (Instant::now(), 0u64, 0u64);
    loop {
        thread::sleep(progress.period());
        let elapsed = traffic_start.elapsed();
        let done = oracle.completions.load(Ordering::Relaxed);
        let acks = topo.sum(|c| &c.acks);
        if last.0.elapsed() >= Duration::from_millis(500) {
            let dt = last.0.elapsed().as_secs_f64();
            summary.throughput.push(Sample {
                t: elapsed.as_secs_f64(),
                rate: (done - last.1) as f64 / dt,
                rate2: (acks - last.2) as f64 / dt,
            });
            last = (Instant::now(), done, acks);
        }
        let secs = elapsed.as_secs_f64().max(1e-3);
        progress.update(&format!(
            "trees {} ({}/s)  acks {} ({}/s)  in flight {}  pending {}",
            report::si(done as f64),
            report::si(done as f64 / secs),
            report::si(acks as f64),
            report::si(acks as f64 / secs),
            oracle.in_flight(free),
            acker.pending(),
        ));
        if elapsed >= duration || topo.stop.load(Ordering::Relaxed) {
            break;
        }
    }
}
