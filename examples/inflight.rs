//! Tuple trees in flight through a small Storm-like topology, tracked by an [`Acker`].
//!
//! Producers (spouts) emit trees: each picks a random root and 1 to 4 random edge ids,
//! inits the root with the XOR of its edges and sends one tuple per edge to the workers
//! (bolts) over `std::sync::mpsc` channels. Every fifth tree sends its tuples *before* its
//! init, so some acks reach the acker first and are held as orphans until init arrives.
//! A worker that processes a tuple emits 0 to 2 child tuples anchored to the same root
//! (fresh random ids), acks its input with `input ^ child ids` (Storm's rule) and later
//! processes the children, which are leaves and ack with their own id.
//!
//! Each producer decides its trees' fates up front with a seeded random number generator:
//! most are processed fully (expected `Acked`); some have one spout tuple failed by the
//! worker that gets it (`Failed`); some have one spout tuple dropped without an ack or a
//! fail (`TimedOut`, after the 200 ms timeout, on the acker's reaper thread).
//!
//! Completions are printed as they arrive (root, outcome, elapsed since the first message).
//! At the end the example checks every root's outcome against its fate, that each root
//! completed exactly once, that no timeout fired early, that the acker's counters agree and
//! that nothing is left pending, and exits with status 1 otherwise.
//!
//! Run: `cargo run --release --example inflight`. It stops by itself in about a second.

use std::collections::{HashMap, VecDeque};
use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ackwheel::{edge_id, Acker, Completion, Outcome};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PRODUCERS: u64 = 3;
const WORKERS: usize = 4;
const TREES_PER_PRODUCER: u32 = 40;
const TIMEOUT: Duration = Duration::from_millis(200);
/// Time between two trees of one producer, so completions interleave with emissions.
const EMIT_EVERY: Duration = Duration::from_millis(2);
/// How long to wait for the last completions and the orphans' expiry before giving up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(5);

/// What a producer intends for a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Processed,
    /// The worker that gets spout tuple 0 calls `fail`.
    Fail,
    /// The worker that gets spout tuple 0 neither acks nor fails it.
    Drop,
}

impl Fate {
    fn outcome(self) -> Outcome {
        match self {
            Fate::Processed => Outcome::Acked,
            Fate::Fail => Outcome::Failed,
            Fate::Drop => Outcome::TimedOut,
        }
    }
}

/// The payload init attaches: who emitted the tree.
#[derive(Clone, Copy, Debug)]
struct Origin {
    producer: u64,
    seq: u32,
}

/// One tuple on its way to a worker.
#[derive(Clone, Copy, Debug)]
struct Tuple {
    root: u64,
    /// This tuple's edge id.
    id: u64,
    fate: TupleFate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TupleFate {
    Process,
    Fail,
    Drop,
}

fn main() -> ExitCode {
    let started = Instant::now();
    let (done_tx, done_rx) = mpsc::channel::<Completion<Origin>>();
    let acker: Acker<Origin> = Acker::builder()
        .timeout(TIMEOUT)
        .on_complete(move |c| {
            // The main thread prints; the callback only hands the completion over. A send
            // fails only once main has stopped listening, and then nobody needs it.
            let _ = done_tx.send(c);
        })
        .build()
        .expect("valid acker configuration");
    // The default max_pending (1 << 20) is a bound only: the tables start small.
    println!(
        "acker built in {} ms: {acker:?}",
        started.elapsed().as_millis()
    );
    // root -> what its producer intended; written before the tree's first message.
    let fates: Arc<Mutex<HashMap<u64, Fate>>> = Arc::default();

    // === workers (bolts) ===
    let mut inboxes = Vec::new();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (tx, rx) = mpsc::channel::<Tuple>();
            inboxes.push(tx);
            let acker = acker.clone();
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(1000 + w as u64);
                // Children this worker emitted and processes itself after its input.
                let mut children: VecDeque<Tuple> = VecDeque::new();
                // Ends when every producer has finished and dropped its senders.
                for tuple in rx {
                    match tuple.fate {
                        TupleFate::Drop => continue, // lost: no ack, no fail
                        TupleFate::Fail => {
                            acker.fail(tuple.root);
                            continue;
                        }
                        TupleFate::Process => {}
                    }
                    // Emit 0..=2 anchored children; ack the input with input ^ children.
                    let mut xor = tuple.id;
                    for _ in 0..rng.random_range(0..=2) {
                        let id = edge_id();
                        xor ^= id;
                        children.push_back(Tuple {
                            root: tuple.root,
                            id,
                            fate: TupleFate::Process,
                        });
                    }
                    acker.ack(tuple.root, xor);
                    // Leaves: each child acks its own id (no grandchildren).
                    while let Some(child) = children.pop_front() {
                        acker.ack(child.root, child.id);
                    }
                }
            })
        })
        .collect();

    // === producers (spouts) ===
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let acker = acker.clone();
            let inboxes = inboxes.clone();
            let fates = Arc::clone(&fates);
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(p);
                let mut next_worker = p as usize;
                for seq in 0..TREES_PER_PRODUCER {
                    let root = rng.random::<u64>();
                    let fate = match rng.random_range(0..10) {
                        0 => Fate::Fail,
                        1 | 2 => Fate::Drop,
                        _ => Fate::Processed,
                    };
                    // Random non-zero ids: a strict subset XORing to 0 (an early Acked) is
                    // a 2^-64 event, the bet Storm makes too; the final check would catch it.
                    let edges: Vec<u64> = (0..rng.random_range(1..=4)).map(|_| edge_id()).collect();
                    let xor = edges.iter().fold(0, |x, e| x ^ e);
                    fates.lock().unwrap().insert(root, fate);
                    let tuples: Vec<Tuple> = edges
                        .iter()
                        .enumerate()
                        .map(|(k, &id)| Tuple {
                            root,
                            id,
                            fate: match (k, fate) {
                                (0, Fate::Fail) => TupleFate::Fail,
                                (0, Fate::Drop) => TupleFate::Drop,
                                _ => TupleFate::Process,
                            },
                        })
                        .collect();
                    let origin = Origin { producer: p, seq };
                    let acks_first = seq % 5 == 4;
                    if !acks_first {
                        acker.init(root, xor, origin).expect("init");
                    }
                    for tuple in tuples {
                        inboxes[next_worker % WORKERS]
                            .send(tuple)
                            .expect("worker alive");
                        next_worker += 1;
                    }
                    if acks_first {
                        acker.init(root, xor, origin).expect("init");
                    }
                    thread::sleep(EMIT_EVERY);
                }
            })
        })
        .collect();
    drop(inboxes); // the workers' channels close when the producers finish

    // === completions, as they arrive ===
    let total = (PRODUCERS * u64::from(TREES_PER_PRODUCER)) as usize;
    let mut seen: HashMap<u64, Vec<Outcome>> = HashMap::new();
    let mut completions = Vec::with_capacity(total);
    let deadline = started + GIVE_UP_AFTER;
    while completions.len() < total {
        let wait = deadline.saturating_duration_since(Instant::now());
        let Ok(c) = done_rx.recv_timeout(wait) else {
            break;
        };
        println!(
            "[{:>4}ms] root {:#018x} (producer {} tree {:>2}) -> {:<8} after {:>6.1} ms",
            started.elapsed().as_millis(),
            c.root,
            c.payload.producer,
            c.payload.seq,
            format!("{:?}", c.outcome),
            c.elapsed.as_secs_f64() * 1e3,
        );
        seen.entry(c.root).or_default().push(c.outcome);
        completions.push(c);
    }
    for t in producers.into_iter().chain(workers) {
        t.join().expect("thread");
    }
    // Late acks and fails of failed or timed-out trees are orphans: they expire silently
    // one timeout after they arrived. Wait for that, then look for stragglers.
    while acker.pending() > 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(TIMEOUT / 4);
    while let Ok(c) = done_rx.try_recv() {
        seen.entry(c.root).or_default().push(c.outcome);
        completions.push(c);
    }

    // === summary and checks ===
    let fates = fates.lock().unwrap();
    let mut problems = Vec::new();
    println!();
    println!("{:<9} {:>8} {:>8}", "outcome", "expected", "got");
    for outcome in [Outcome::Acked, Outcome::Failed, Outcome::TimedOut] {
        let expected = fates.values().filter(|f| f.outcome() == outcome).count();
        let got = completions.iter().filter(|c| c.outcome == outcome).count();
        println!("{:<9} {expected:>8} {got:>8}", format!("{outcome:?}"));
        if expected != got {
            problems.push(format!("{outcome:?}: expected {expected}, got {got}"));
        }
    }
    for (root, fate) in fates.iter() {
        match seen.get(root).map(Vec::as_slice) {
            Some([outcome]) if *outcome == fate.outcome() => {}
            Some(outcomes) => problems.push(format!(
                "root {root:#x}: expected {:?}, got {outcomes:?}",
                fate.outcome()
            )),
            None => problems.push(format!("root {root:#x}: never completed")),
        }
    }
    for root in seen.keys().filter(|r| !fates.contains_key(r)) {
        problems.push(format!("root {root:#x}: completed but never emitted"));
    }
    let timeouts: Vec<Duration> = completions
        .iter()
        .filter(|c| c.outcome == Outcome::TimedOut)
        .map(|c| c.elapsed)
        .collect();
    if let (Some(first), Some(last)) = (timeouts.iter().min(), timeouts.iter().max()) {
        println!(
            "timeouts fired {:.1} to {:.1} ms after the first message (timeout {} ms)",
            first.as_secs_f64() * 1e3,
            last.as_secs_f64() * 1e3,
            TIMEOUT.as_millis()
        );
        if *first < TIMEOUT {
            problems.push(format!("a timeout fired early: {first:?}"));
        }
    }
    let stats = acker.stats();
    println!(
        "acker stats: acked {}, failed {}, timed out {}, orphans expired {}, pending {}",
        stats.acked, stats.failed, stats.timed_out, stats.orphans_expired, stats.pending
    );
    let by = |o| completions.iter().filter(|c| c.outcome == o).count() as u64;
    if (stats.acked, stats.failed, stats.timed_out)
        != (
            by(Outcome::Acked),
            by(Outcome::Failed),
            by(Outcome::TimedOut),
        )
    {
        problems.push("the acker's counters disagree with the completions".into());
    }
    if stats.pending != 0 {
        problems.push(format!("{} entries still pending", stats.pending));
    }
    println!("done after {} ms", started.elapsed().as_millis());
    if problems.is_empty() {
        println!("OK: {total} trees, every outcome as intended, each delivered once");
        ExitCode::SUCCESS
    } else {
        for p in &problems {
            eprintln!("MISMATCH: {p}");
        }
        ExitCode::FAILURE
    }
}
