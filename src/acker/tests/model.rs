//! Model-based tests: random operation sequences from a seed against a reference model of
//! the Acker's rules (manual mode), over clock origins at 0, 2^63 and near `u64::MAX`,
//! resolutions from 1 µs to 1 s, clock jumps up to 2^40 ticks and back, resets that keep
//! trees alive past 2^32 ticks, and `max_pending` from 1 to 2^20. After every step the
//! return value, every completion (root, payload, outcome, `elapsed`) and every counter
//! must match. A failure prints the seed, the configuration and a shrunk sequence.
//! `ACKER_MODEL_SEEDS=n` runs more seeds, `ACKER_MODEL_SEED=s` one.
//!
//! The threaded variant checks invariants only: several threads on shared and own roots
//! while another moves the clock (far, at times) and runs passes; every payload inited
//! comes back exactly once, by a completion or by shutdown.

use super::*;

/// One step of a sequence. Roots are indices into a small pool, so that duplicates, reuse
/// and orphans happen; edges are random.
#[derive(Clone, Debug)]
enum Op {
    /// Init with `xor`, one edge the model acks later (0: a tree that completes at once),
    /// with its own timeout in ticks if `own` is set.
    Init {
        root: usize,
        xor: u64,
        own: Option<u64>,
    },
    /// Ack one of the root's own outstanding edges if it has one (`right`), else a stray.
    Ack {
        root: usize,
        xor: u64,
        right: bool,
    },
    Fail {
        root: usize,
    },
    Reset {
        root: usize,
    },
    /// Resets every pending root, then moves the clock on by `ticks` and runs a pass: many
    /// of these keep a tree alive for any time.
    Keep {
        ticks: u64,
    },
    /// Moves the clock by `ticks` (back if `back`) and runs a pass.
    Pass {
        ticks: u64,
        back: bool,
    },
    /// Moves the clock without a pass (writes then come before the next one).
    Jump {
        ticks: u64,
    },
    Shutdown,
}

#[derive(Clone, Copy, Debug)]
struct Config {
    origin: u64,
    /// The resolution asked for, in ns; the tick is its next power of two.
    resolution: u64,
    max_pending: usize,
    /// Default timeout, in ticks.
    timeout: u64,
}

impl Config {
    fn tick(&self) -> u64 {
        self.resolution.next_power_of_two()
    }
}

/// The model's tree: its value, whether init came (its payload) and a fail was held, the
/// tick of its first message, the tick its deadline counts from, its own timeout.
#[derive(Clone, Debug)]
struct Entry {
    value: u64,
    payload: Option<u32>,
    failed: bool,
    start: u64,
    base: u64,
    timeout: u64,
    /// Edges handed out and not yet acked (to send right acks).
    edges: Vec<u64>,
}

/// The model: the entries, the clock in ticks since the origin, and the counters.
#[derive(Debug, Default)]
struct Model {
    entries: HashMap<u64, Entry>,
    now: u64,
    /// Shutdown has been called.
    shut: bool,
    acked: u64,
    failed: u64,
    timed_out: u64,
    orphans_expired: u64,
    orphans_joined: u64,
    rejected_full: u64,
}

type Seen = Arc<StdMutex<Vec<(u64, u32, Outcome, Duration)>>>;

/// Runs `ops` under `config`: `Err` with what differed at the first step that did.
fn run(config: Config, ops: &[Op]) -> Result<(), String> {
    let tick = config.tick();
    let clock = ManualClock::new(config.origin);
    let seen: Seen = Arc::default();
    let sink = Arc::clone(&seen);
    let acker: Acker<u32> = Acker::builder()
        .timeout(Duration::from_nanos(config.timeout * tick))
        .resolution(Duration::from_nanos(config.resolution))
        .max_pending(config.max_pending)
        .shards(2)
        .clock(clock.clone())
        .on_complete(move |c: Completion<u32>| {
            sink.lock()
                .unwrap()
                .push((c.root, c.payload, c.outcome, c.elapsed))
        })
        .build_manual()
        .map_err(|e| format!("build: {e}"))?;
    let roots: Vec<u64> = (0..12u64)
        .map(|i| {
            if i == 0 {
                u64::MAX
            } else {
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            }
        })
        .collect();
    let mut m = Model::default();
    let set_clock = |m: &Model| clock.set(config.origin.wrapping_add(m.now * tick));
    let mut next_payload = 0u32;
    for (step, op) in ops.iter().enumerate() {
        let mut expected: Vec<(u64, u32, Outcome, u64)> = Vec::new(); // with the start
        let ctx = |what: String| format!("step {step} {op:?}: {what}");
        match *op {
            Op::Init { root, xor, own } => {
                let root = roots[root];
                next_payload += 1;
                let payload = next_payload;
                let result = match own {
                    Some(t) => {
                        acker.init_with_timeout(root, xor, payload, Duration::from_nanos(t * tick))
                    }
                    None => acker.init(root, xor, payload),
                };
                let known = m.entries.get(&root).cloned();
                let want = if m.shut {
                    Err("Shutdown")
                } else if known.as_ref().is_some_and(|e| e.payload.is_some()) {
                    Err("Duplicate")
                } else if known.is_none() && m.entries.len() >= config.max_pending {
                    Err("Full")
                } else {
                    Ok(())
                };
                let got = match result {
                    Ok(()) => Ok(()),
                    Err(InitError::Shutdown(p)) if p == payload => Err("Shutdown"),
                    Err(InitError::Duplicate(p)) if p == payload => Err("Duplicate"),
                    Err(InitError::Full(p)) if p == payload => Err("Full"),
                    Err(e) => return Err(ctx(format!("payload not handed back: {e:?}"))),
                };
                if got != want {
                    return Err(ctx(format!("init gave {got:?}, model {want:?}")));
                }
                if want == Err("Full") {
                    m.rejected_full += 1;
                }
                if want.is_ok() {
                    if known.is_some() {
                        m.orphans_joined += 1;
                    }
                    let now = m.now;
                    let e = m.entries.entry(root).or_insert_with(|| Entry {
                        value: 0,
                        payload: None,
                        failed: false,
                        start: now,
                        base: now,
                        timeout: config.timeout,
                        edges: Vec::new(),
                    });
                    e.value ^= xor;
                    e.payload = Some(payload);
                    if let Some(t) = own {
                        e.timeout = t;
                    }
                    // The xor is made of edges the model acks later (one edge per init).
                    e.edges.push(xor);
                    let outcome = if e.value == 0 {
                        Some(Outcome::Acked)
                    } else if e.failed {
                        Some(Outcome::Failed)
                    } else {
                        None
                    };
                    if let Some(o) = outcome {
                        let e = m.entries.remove(&root).unwrap();
                        expected.push((root, payload, o, e.start));
                    }
                }
            }
            Op::Ack { root, xor, right } => {
                let root = roots[root];
                let xor = match m.entries.get(&root) {
                    Some(e) if right && !e.edges.is_empty() => e.edges[0],
                    _ => xor,
                };
                let completed = acker.ack(root, xor);
                let mut want = false;
                if m.shut {
                } else if let Some(e) = m.entries.get_mut(&root) {
                    e.value ^= xor;
                    if let Some(i) = e.edges.iter().position(|&x| x == xor) {
                        e.edges.swap_remove(i);
                    }
                    if e.value == 0 && e.payload.is_some() {
                        let e = m.entries.remove(&root).unwrap();
                        expected.push((root, e.payload.unwrap(), Outcome::Acked, e.start));
                        want = true;
                    }
                } else if m.entries.len() < config.max_pending {
                    m.entries
                        .insert(root, orphan(m.now, config.timeout, xor, false));
                } else {
                    m.rejected_full += 1;
                }
                if completed != want {
                    return Err(ctx(format!("ack returned {completed}")));
                }
            }
            Op::Fail { root } => {
                let root = roots[root];
                let completed = acker.fail(root);
                let mut want = false;
                if m.shut {
                } else if let Some(e) = m.entries.get_mut(&root) {
                    e.failed = true;
                    if let Some(p) = e.payload {
                        let e = m.entries.remove(&root).unwrap();
                        expected.push((root, p, Outcome::Failed, e.start));
                        want = true;
                    }
                } else if m.entries.len() < config.max_pending {
                    m.entries
                        .insert(root, orphan(m.now, config.timeout, 0, true));
                } else {
                    m.rejected_full += 1;
                }
                if completed != want {
                    return Err(ctx(format!("fail returned {completed}")));
                }
            }
            Op::Reset { root } => {
                let root = roots[root];
                let got = acker.reset_timeout(root);
                let now = m.now;
                let want = m.entries.get_mut(&root).map(|e| e.base = e.base.max(now));
                if got != want.is_some() {
                    return Err(ctx(format!("reset returned {got}")));
                }
            }
            Op::Keep { ticks } => {
                for &root in &roots {
                    let got = acker.reset_timeout(root);
                    let now = m.now;
                    let want = m.entries.get_mut(&root).map(|e| e.base = e.base.max(now));
                    if got != want.is_some() {
                        return Err(ctx(format!("reset of {root} returned {got}")));
                    }
                }
                m.now += ticks;
                set_clock(&m);
                pass(&acker, &mut m, &mut expected).map_err(ctx)?;
            }
            Op::Pass { ticks, back } => {
                m.now = if back {
                    m.now.saturating_sub(ticks)
                } else {
                    m.now + ticks
                };
                set_clock(&m);
                pass(&acker, &mut m, &mut expected).map_err(ctx)?;
            }
            Op::Jump { ticks } => {
                m.now += ticks;
                set_clock(&m);
            }
            Op::Shutdown => {
                let mut back = acker.shutdown();
                back.sort_unstable();
                let mut want: Vec<(u64, u32)> = m
                    .entries
                    .iter()
                    .filter_map(|(&r, e)| e.payload.map(|p| (r, p)))
                    .collect();
                want.sort_unstable();
                if !m.shut {
                    m.orphans_expired +=
                        m.entries.values().filter(|e| e.payload.is_none()).count() as u64;
                    m.entries.clear();
                }
                if m.shut {
                    want.clear();
                }
                m.shut = true;
                if back != want {
                    return Err(ctx(format!("handed back {back:?}, model {want:?}")));
                }
            }
        }
        // The completions, with their elapsed times (whole ticks here; within one, and
        // past 2^29 ticks of life long by at most one part in 2^23).
        let mut got = std::mem::take(&mut *seen.lock().unwrap());
        got.sort_unstable_by_key(|c| (c.0, c.1));
        expected.sort_unstable_by_key(|c| (c.0, c.1));
        let got_keys: Vec<_> = got.iter().map(|c| (c.0, c.1, c.2)).collect();
        let want_keys: Vec<_> = expected.iter().map(|c| (c.0, c.1, c.2)).collect();
        if got_keys != want_keys {
            return Err(ctx(format!(
                "completions {got_keys:?}, model {want_keys:?}"
            )));
        }
        for (g, w) in got.iter().zip(&expected) {
            let lived = m.now.saturating_sub(w.3);
            let (low, high) = (lived.saturating_sub(1), lived + 2 + (lived >> 23));
            let ticks = g.3.as_nanos() / u128::from(tick);
            if ticks < u128::from(low) || ticks > u128::from(high) {
                return Err(ctx(format!(
                    "root {:#x}: elapsed {:?} is {ticks} ticks, lived {lived}",
                    g.0, g.3
                )));
            }
        }
        let s = acker.stats();
        let counts = [
            (s.acked, m.acked + count(&expected, Outcome::Acked)),
            (s.failed, m.failed + count(&expected, Outcome::Failed)),
            (
                s.timed_out,
                m.timed_out + count(&expected, Outcome::TimedOut),
            ),
            (s.orphans_expired, m.orphans_expired),
            (s.orphans_joined, m.orphans_joined),
            (s.rejected_full, m.rejected_full),
        ];
        m.acked = counts[0].1;
        m.failed = counts[1].1;
        m.timed_out = counts[2].1;
        if counts.iter().any(|(got, want)| got != want) {
            return Err(ctx(format!("stats {s:?}, model counts {counts:?}")));
        }
        if acker.pending() != m.entries.len() || s.pending != m.entries.len() {
            return Err(ctx(format!(
                "pending {}, model {}",
                acker.pending(),
                m.entries.len()
            )));
        }
    }
    Ok(())
}

fn orphan(now: u64, timeout: u64, value: u64, failed: bool) -> Entry {
    Entry {
        value,
        payload: None,
        failed,
        start: now,
        base: now,
        timeout,
        edges: Vec::new(),
    }
}

fn count(v: &[(u64, u32, Outcome, u64)], o: Outcome) -> u64 {
    v.iter().filter(|c| c.2 == o).count() as u64
}

/// A pass at the model's clock: what is due (its deadline's tick, plus the one a first
/// message's tick may be old, has come on the clock) times out or is dropped.
fn pass(
    acker: &Acker<u32>,
    m: &mut Model,
    expected: &mut Vec<(u64, u32, Outcome, u64)>,
) -> Result<(), String> {
    let delivered = acker.expire();
    if m.shut {
        return if delivered == 0 {
            Ok(())
        } else {
            Err(format!("{delivered} after shutdown"))
        };
    }
    let now = m.now;
    let due: Vec<u64> = m
        .entries
        .iter()
        .filter(|(_, e)| e.base + e.timeout < now) // the deadline's tick, plus one
        .map(|(&r, _)| r)
        .collect();
    for r in due {
        let e = m.entries.remove(&r).unwrap();
        match e.payload {
            Some(p) => expected.push((r, p, Outcome::TimedOut, e.start)),
            None => m.orphans_expired += 1,
        }
    }
    if delivered != expected.len() {
        return Err(format!(
            "expire delivered {delivered}, model {}",
            expected.len()
        ));
    }
    Ok(())
}

/// A random sequence for `config`.
fn sequence(rng: &mut StdRng, config: Config, len: usize) -> Vec<Op> {
    // Time since the origin stays below 2^62 ns (the clock's wrapping range).
    let most_ticks = (1u64 << 62) / config.tick();
    let mut total = 0u64;
    let mut ops = Vec::with_capacity(len);
    let far = |rng: &mut StdRng, total: &mut u64| {
        let ticks = match rng.random_range(0..10) {
            0..=5 => rng.random_range(0..4),
            6..=7 => config.timeout + rng.random_range(0..3) - 1,
            8 => rng.random_range(0..config.timeout),
            _ => (1u64 << rng.random_range(29..=40)) + rng.random_range(0..1000),
        };
        let ticks = ticks.min(most_ticks.saturating_sub(*total + config.timeout * 4));
        *total += ticks;
        ticks
    };
    for _ in 0..len {
        let root = rng.random_range(0..12);
        let op = match rng.random_range(0..100) {
            0..=24 => Op::Init {
                root,
                xor: if rng.random_bool(0.1) {
                    0
                } else {
                    rng.random::<u64>() | 1
                },
                own: rng
                    .random_bool(0.2)
                    .then(|| rng.random_range(1..3 * config.timeout)),
            },
            25..=54 => Op::Ack {
                root,
                xor: rng.random::<u64>() | 1,
                right: rng.random_bool(0.8),
            },
            55..=59 => Op::Fail { root },
            60..=66 => Op::Reset { root },
            67..=74 => Op::Keep {
                ticks: rng.random_range(config.timeout / 2..config.timeout),
            },
            // Back by less than 2^30 ticks (further, a write stamps 2^30 ticks behind the
            // anchor: later, never earlier, which this model does not follow).
            75..=78 => Op::Pass {
                ticks: rng.random_range(0..3 * config.timeout),
                back: true,
            },
            79..=93 => Op::Pass {
                ticks: far(rng, &mut total),
                back: false,
            },
            94..=98 => Op::Jump {
                ticks: far(rng, &mut total),
            },
            _ => Op::Shutdown,
        };
        ops.push(op);
    }
    ops
}

/// The configuration of a seed.
fn config_of(rng: &mut StdRng) -> Config {
    let origins = [0, 1 << 63, u64::MAX - 3_000_000_000];
    let resolutions = [1_000, 1_024, 3_000, 1_000_000, 1 << 25, 1_000_000_000];
    let max_pending = [1, 2, 3, 16, 4096, 1 << 20];
    Config {
        origin: origins[rng.random_range(0..origins.len())],
        resolution: resolutions[rng.random_range(0..resolutions.len())],
        max_pending: max_pending[rng.random_range(0..max_pending.len())],
        timeout: rng.random_range(3..200),
    }
}

/// Removes operations while the failure stays: chunks first, then one at a time.
fn shrink(config: Config, mut ops: Vec<Op>) -> (Vec<Op>, String) {
    let mut error = run(config, &ops).unwrap_err();
    let mut chunk = ops.len() / 2;
    while chunk >= 1 {
        let mut i = 0;
        while i + chunk <= ops.len() {
            let mut fewer = ops.clone();
            fewer.drain(i..i + chunk);
            match run(config, &fewer) {
                Err(e) => {
                    ops = fewer;
                    error = e;
                }
                Ok(()) => i += chunk,
            }
        }
        chunk /= 2;
    }
    (ops, error)
}

#[test]
fn random_sequences_match_the_reference_model() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match env("ACKER_MODEL_SEED") {
        Some(seed) => vec![seed],
        None => (0..env("ACKER_MODEL_SEEDS").unwrap_or(if cfg!(miri) { 2 } else { 300 })).collect(),
    };
    let len = if cfg!(miri) { 40 } else { 200 };
    for seed in seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let config = config_of(&mut rng);
        let ops = sequence(&mut rng, config, len);
        if run(config, &ops).is_err() {
            let (ops, error) = shrink(config, ops);
            panic!(
                "seed {seed} (ACKER_MODEL_SEED={seed}), {config:?}: {error}\nshrunk to {} steps:\n{}",
                ops.len(),
                ops.iter().map(|o| format!("  {o:?}\n")).collect::<String>()
            );
        }
    }
}

/// The threaded variant: invariants only. Three threads init (unique payloads), ack, fail
/// and reset on roots of their own and on shared ones, while a fourth moves the clock (now
/// and then by 2^29 ticks or more, which re-anchors under their feet) and runs passes.
/// After shutdown every payload inited is back exactly once, through one completion or
/// the shutdown's list; nothing is pending; the counters match the completions.
#[test]
fn threads_and_clock_jumps_lose_and_duplicate_nothing() {
    let rounds = if cfg!(miri) { 1 } else { 6 };
    for round in 0..rounds {
        let clock = ManualClock::new([0, 1 << 63, u64::MAX - 1_000_000][round % 3]);
        let seen: Arc<StdMutex<Vec<(u32, Outcome)>>> = Arc::default();
        let sink = Arc::clone(&seen);
        let acker: Acker<u32> = Acker::builder()
            .timeout(Duration::from_micros(200))
            .resolution(Duration::from_micros(1))
            .max_pending(if round % 2 == 0 { 64 } else { 1 << 16 })
            .clock(clock.clone())
            .on_complete(move |c: Completion<u32>| {
                sink.lock().unwrap().push((c.payload, c.outcome))
            })
            .build_manual()
            .unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let inited = Arc::new(StdMutex::new(Vec::new()));
        let workers: Vec<_> = (0..3u64)
            .map(|t| {
                let (acker, stop, inited) = (acker.clone(), Arc::clone(&stop), Arc::clone(&inited));
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(round as u64 * 10 + t);
                    let mut payload = (t as u32) << 28;
                    let ops = if cfg!(miri) { 50 } else { 20_000 };
                    for _ in 0..ops {
                        if stop.load(std::sync::atomic::Ordering::Relaxed) {
                            break;
                        }
                        let root = if rng.random_bool(0.5) {
                            rng.random_range(0..16)
                        } else {
                            (t + 1) << 40 | rng.random_range(0..64)
                        };
                        let xor = rng.random_range(1..4u64);
                        match rng.random_range(0..10) {
                            0..=3 => {
                                payload += 1;
                                if acker.init(root, xor, payload).is_ok() {
                                    inited.lock().unwrap().push(payload);
                                }
                            }
                            4..=7 => {
                                acker.ack(root, xor);
                            }
                            8 => {
                                acker.fail(root);
                            }
                            _ => {
                                acker.reset_timeout(root);
                            }
                        }
                    }
                })
            })
            .collect();
        let mut rng = StdRng::seed_from_u64(round as u64);
        let mut passes = 0u32;
        while workers.iter().any(|w| !w.is_finished()) && passes < 20_000 {
            let ns = if passes % 64 == 63 {
                1024u64 << rng.random_range(29..34)
            } else {
                rng.random_range(0..100_000)
            };
            clock.advance(Duration::from_nanos(ns));
            acker.expire();
            passes += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        let back = acker.shutdown();
        assert_eq!(acker.pending(), 0, "round {round}");
        assert!(
            acker.reanchorings() >= u64::from(passes >= 64),
            "round {round}: {passes} passes, no re-anchoring"
        );
        let seen = std::mem::take(&mut *seen.lock().unwrap());
        let mut all: Vec<u32> = seen
            .iter()
            .map(|s| s.0)
            .chain(back.iter().map(|b| b.1))
            .collect();
        all.sort_unstable();
        let mut want = inited.lock().unwrap().clone();
        want.sort_unstable();
        assert_eq!(all, want, "round {round}: payloads not back exactly once");
        let stats = acker.stats();
        let of = |o: Outcome| seen.iter().filter(|s| s.1 == o).count() as u64;
        assert_eq!(
            (stats.acked, stats.failed, stats.timed_out),
            (
                of(Outcome::Acked),
                of(Outcome::Failed),
                of(Outcome::TimedOut)
            ),
            "round {round}"
        );
    }
}
