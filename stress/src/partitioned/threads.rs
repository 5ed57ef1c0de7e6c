//! The threads of a phase: the nodes (one partition's acker each, its inbound queue, its
//! kill and restart) and the origins (spouts that start, send and replay trees).

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ackwheel::{edge_id, Acker, Outcome};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::oracle::{Kind, Resolved, Tag};
use super::{owner, Shared, DELAY_RATE, MAX_ATTEMPTS, ORIGIN_MARGIN_MS};

/// A message on the network.
#[derive(Debug, Clone, Copy)]
pub(super) struct Msg {
    due: Instant,
    root: u64,
    kind: Kind,
    value: u64,
    tag: Tag,
}

/// A message held back by the receiving node until it is due.
struct Held(Msg, u64);

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.0.due, self.1) == (other.0.due, other.1)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Earliest first from a max-heap.
        (other.0.due, other.1).cmp(&(self.0.due, self.1))
    }
}

/// A completion on its way back to the origin.
pub(super) struct Back {
    root: u64,
    outcome: Outcome,
}

/// What one spout did.
#[derive(Debug, Default)]
pub(super) struct SpoutReport {
    pub(super) started: u64,
    pub(super) acked: u64,
    pub(super) exhausted: u64,
    pub(super) replays: u64,
}

/// A partition's acker, incarnation `inc`: completions go to the oracle and back to the
/// origin named in the payload.
fn build(shared: &Arc<Shared>, p: usize, inc: u32, back: &[Sender<Back>]) -> Acker<Tag> {
    let sink = Arc::clone(shared);
    let back = back.to_vec();
    Acker::<Tag>::builder()
        .timeout(Duration::from_millis(shared.cfg.timeout_ms))
        .on_complete(move |c| {
            sink.oracle
                .completed(c.root, c.outcome, p as u16, inc, c.payload);
            sink.completed[p].fetch_add(1, Ordering::Relaxed);
            // The origin may be gone (the drain); the oracle has it.
            let _ = back[usize::from(c.payload.spout)].send(Back {
                root: c.root,
                outcome: c.outcome,
            });
        })
        .build()
        .expect("a valid acker configuration")
}

/// A node: applies the messages of its partition when they are due; killed on request.
/// Returns its last acker once every spout has gone and everything queued is applied.
pub(super) fn node(
    shared: &Arc<Shared>,
    p: usize,
    rx: &Receiver<Msg>,
    back: &[Sender<Back>],
) -> Acker<Tag> {
    let oracle = &shared.oracle;
    let mut inc = 1u32;
    let mut acker = build(shared, p, inc, back);
    let mut held = BinaryHeap::new();
    let mut seq = 0u64;
    let mut open = true;
    let apply = |acker: &Acker<Tag>, inc: u32, m: &Msg| {
        let before = oracle.now();
        match m.kind {
            Kind::Init => {
                if let Err(e) = acker.init(m.root, m.value, m.tag) {
                    panic!("partition {p}: init of {:#x} refused: {e}", m.root);
                }
            }
            Kind::Ack(_) => {
                acker.ack(m.root, m.value);
            }
            Kind::Fail => {
                acker.fail(m.root);
            }
        }
        oracle.delivered(m.root, m.kind, p as u16, inc, before);
    };
    while open || !held.is_empty() {
        if shared.kill[p].swap(false, Ordering::Relaxed) {
            // The node dies: its acker's trees are lost with it, and so is everything
            // queued for it, or arriving while it is down.
            for (root, _) in acker.shutdown() {
                oracle.handed_back(root, p as u16, inc);
                shared.handed_back.fetch_add(1, Ordering::Relaxed);
            }
            let discard = |m: &Msg| {
                oracle.discarded(m.root, m.kind, p as u16);
                shared.discarded.fetch_add(1, Ordering::Relaxed);
            };
            for Held(m, _) in held.drain() {
                discard(&m);
            }
            let up_at = Instant::now() + Duration::from_millis(shared.cfg.down_ms);
            while let Some(left) = up_at.checked_duration_since(Instant::now()) {
                match rx.recv_timeout(left) {
                    Ok(m) => discard(&m),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            inc += 1;
            acker = build(shared, p, inc, back);
            continue;
        }
        let now = Instant::now();
        let wait = held
            .peek()
            .map_or(Duration::from_millis(1), |Held(m, _): &Held| {
                m.due.saturating_duration_since(now)
            })
            .min(Duration::from_millis(1));
        let first = if open {
            match rx.recv_timeout(wait) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    None
                }
            }
        } else {
            thread::sleep(wait);
            None
        };
        let now = Instant::now();
        for m in first.into_iter().chain(rx.try_iter().take(256)) {
            if m.due <= now {
                apply(&acker, inc, &m);
            } else {
                seq += 1;
                held.push(Held(m, seq));
            }
        }
        while held.peek().is_some_and(|Held(m, _)| m.due <= now) {
            if let Some(Held(m, _)) = held.pop() {
                apply(&acker, inc, &m);
            }
        }
    }
    acker
}

/// An origin: starts trees, sends their messages, replays what failed or timed out.
pub(super) fn spout(
    shared: &Arc<Shared>,
    s: usize,
    seed: u64,
    tx: &[Sender<Msg>],
    rx: &Receiver<Back>,
) -> SpoutReport {
    let cfg = &shared.cfg;
    let oracle = &shared.oracle;
    let mut rng = SmallRng::seed_from_u64(seed);
    let cap = (cfg.in_flight / cfg.spouts).max(1);
    let origin_timeout =
        Duration::from_millis(cfg.timeout_ms + ORIGIN_MARGIN_MS + 2 * cfg.delay_ms);
    let mut pending: HashMap<u64, Tag> = HashMap::new();
    let mut deadlines: VecDeque<(Instant, u64)> = VecDeque::new();
    let mut report = SpoutReport::default();
    let mut next_tree = 0u64;

    let send = |rng: &mut SmallRng, tag: Tag, pending: &mut HashMap<u64, Tag>| {
        let fail = rng.random_bool(cfg.fail_rate);
        let mut edges = Vec::new();
        let mut acks = Vec::new();
        let mut init_xor = 0;
        for _ in 0..rng.random_range(1..=3) {
            let e = edge_id();
            init_xor ^= e;
            let mut value = e;
            for _ in 0..rng.random_range(0..=2) {
                let c = edge_id();
                value ^= c;
                edges.push(c);
            }
            acks.push(value);
        }
        acks.extend(edges);
        let planned = 1 + acks.len() as u8;
        let home = loop {
            let root = edge_id();
            let home = owner(root, shared.n);
            if oracle.begin(root, tag, home as u16, planned, fail) {
                break (root, home);
            }
        };
        let (root, home) = home;
        let last = acks.len() - 1;
        let messages = std::iter::once((Kind::Init, init_xor)).chain(acks.iter().enumerate().map(
            |(i, &v)| {
                if fail && i == last {
                    (Kind::Fail, 0)
                } else {
                    (Kind::Ack(i as u8), v)
                }
            },
        ));
        let now = Instant::now();
        for (kind, value) in messages {
            if rng.random_bool(cfg.loss_rate) {
                oracle.lost(root, kind);
                shared.lost.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let mut due = now;
            if cfg.delay_ms > 0 && rng.random_bool(DELAY_RATE) {
                due += Duration::from_micros(rng.random_range(0..=cfg.delay_ms * 1000));
                shared.delayed.fetch_add(1, Ordering::Relaxed);
            }
            // The planted bug: one tree in a hundred has its last ack routed by the wrong hash.
            let to = if cfg.plant_bug && kind == Kind::Ack(last as u8) && tag.tree % 100 == 7 {
                (home + 1) % shared.n
            } else {
                home
            };
            oracle.sent(root, kind, to as u16);
            shared.sent.fetch_add(1, Ordering::Relaxed);
            let m = Msg {
                due,
                root,
                kind,
                value,
                tag,
            };
            if tx[to].send(m).is_err() {
                panic!("node {to} is gone while its spouts run");
            }
        }
        pending.insert(root, tag);
        root
    };
    let retry = |rng: &mut SmallRng,
                 tag: Tag,
                 pending: &mut HashMap<u64, Tag>,
                 report: &mut SpoutReport,
                 deadlines: &mut VecDeque<(Instant, u64)>| {
        if tag.attempt < MAX_ATTEMPTS {
            report.replays += 1;
            let next = Tag {
                attempt: tag.attempt + 1,
                ..tag
            };
            let root = send(rng, next, pending);
            deadlines.push_back((Instant::now() + origin_timeout, root));
        } else {
            report.exhausted += 1;
        }
    };

    let mut waited: Option<Back> = None;
    loop {
        for b in waited.take().into_iter().chain(rx.try_iter()) {
            if let Some(tag) = pending.remove(&b.root) {
                oracle.resolved(b.root, Resolved::Completion(b.outcome));
                if b.outcome == Outcome::Acked {
                    report.acked += 1;
                } else {
                    retry(&mut rng, tag, &mut pending, &mut report, &mut deadlines);
                }
            }
        }
        let now = Instant::now();
        while deadlines.front().is_some_and(|&(t, _)| t <= now) {
            let Some((_, root)) = deadlines.pop_front() else {
                break;
            };
            if let Some(tag) = pending.remove(&root) {
                oracle.resolved(root, Resolved::OriginTimeout);
                retry(&mut rng, tag, &mut pending, &mut report, &mut deadlines);
            }
        }
        if shared.running.load(Ordering::Relaxed) && pending.len() < cap {
            for _ in 0..16.min(cap - pending.len()) {
                let tag = Tag {
                    spout: s as u16,
                    tree: next_tree,
                    attempt: 1,
                };
                next_tree += 1;
                report.started += 1;
                let root = send(&mut rng, tag, &mut pending);
                deadlines.push_back((Instant::now() + origin_timeout, root));
            }
        } else if pending.is_empty() && !shared.running.load(Ordering::Relaxed) {
            break;
        } else {
            waited = rx.recv_timeout(Duration::from_millis(1)).ok();
        }
    }
    report
}
