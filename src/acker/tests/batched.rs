//! Batched application (`Acker::apply_each`, `Acker::init_each`) against the same messages
//! one by one: on
//! random streams over a few roots (so that acks complete trees, overtake inits, meet
//! fails, resets and timeouts), every message's result, every completion (root, payload,
//! outcome, in order) and every counter must match.

use super::*;

/// Roots the streams draw from: few, so that messages meet.
const ROOTS: u64 = 24;
/// Edge ids: few bits, so that a tree's value often reaches 0.
const EDGES: [u64; 4] = [0b0001, 0b0010, 0b0100, 0b1000];

fn random_message(rng: &mut StdRng) -> Message {
    let root = rng.random_range(0..ROOTS);
    match rng.random_range(0..10) {
        0 => Message::Fail { root },
        1 => Message::ResetTimeout { root },
        _ => Message::Ack {
            root,
            xor: EDGES[rng.random_range(0..EDGES.len())],
        },
    }
}

fn one_by_one(acker: &Acker<u32>, message: Message) -> bool {
    match message {
        Message::Ack { root, xor } => acker.ack(root, xor),
        Message::Fail { root } => acker.fail(root),
        Message::ResetTimeout { root } => acker.reset_timeout(root),
    }
}

#[test]
fn a_batch_does_exactly_what_its_messages_do_one_by_one() {
    for seed in 0..if cfg!(miri) { 2 } else { 40 } {
        let mut rng = StdRng::seed_from_u64(seed);
        let clock = ManualClock::new(0);
        // Both in manual mode on one clock; a small max_pending so that inits and orphans
        // are refused too.
        let limit = |b: AckerBuilder<u32>| b.max_pending(48).timeout(10 * SEC);
        let (batched, batched_log) = manual(&clock, limit);
        let (single, single_log) = manual(&clock, limit);
        let steps = if cfg!(miri) { 20 } else { 400 };
        for step in 0..steps {
            match rng.random_range(0..10) {
                0..=2 => {
                    // Inits: through init_each on one acker, one by one on the other; a
                    // refused init's payload must come back either way.
                    let len = rng.random_range(1..2 * crate::acker::engine::batched::AHEAD + 3);
                    let trees: Vec<(u64, u64, u32)> = (0..len)
                        .map(|_| {
                            (
                                rng.random_range(0..ROOTS),
                                rng.random_range(1..16),
                                rng.random(),
                            )
                        })
                        .collect();
                    let mut results = Vec::new();
                    batched.init_each(trees.clone(), |i, result| results.push((i, result)));
                    let expected: Vec<_> = trees
                        .iter()
                        .enumerate()
                        .map(|(i, &(root, xor, payload))| (i, single.init(root, xor, payload)))
                        .collect();
                    assert_eq!(results, expected, "seed {seed} step {step}: {trees:?}");
                }
                3 => {
                    clock.advance(Duration::from_millis(rng.random_range(0..6_000)));
                    assert_eq!(batched.expire(), single.expire(), "seed {seed} step {step}");
                }
                _ => {
                    let len = rng.random_range(0..3 * crate::acker::engine::batched::AHEAD + 2);
                    let frame: Vec<Message> = (0..len).map(|_| random_message(&mut rng)).collect();
                    let mut results = Vec::new();
                    batched.apply_each(&frame, |i, result| results.push((i, result)));
                    let expected: Vec<(usize, bool)> = frame
                        .iter()
                        .enumerate()
                        .map(|(i, &m)| (i, one_by_one(&single, m)))
                        .collect();
                    assert_eq!(results, expected, "seed {seed} step {step}: {frame:?}");
                }
            }
            // Timeouts within one pass come in no promised order (the groups' order in the
            // pass): compared as sets.
            let (mut got, mut expected) = (take(&batched_log), take(&single_log));
            if got.iter().all(|c| c.2 == Outcome::TimedOut) {
                got.sort_unstable_by_key(|c| (c.0, c.1));
                expected.sort_unstable_by_key(|c| (c.0, c.1));
            }
            assert_eq!(got, expected, "seed {seed} step {step}: completions");
            assert_eq!(
                batched.pending(),
                single.pending(),
                "seed {seed} step {step}"
            );
        }
        assert_eq!(batched.stats(), single.stats(), "seed {seed}");
        assert!(
            batched.stats().acked > 0 && batched.stats().failed > 0,
            "seed {seed}"
        );
    }
}

#[test]
fn apply_counts_the_trees_its_acks_and_fails_completed() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, |b| b);
    for root in 0..100 {
        acker.init(root, 0b11, root as u32).unwrap();
    }
    // Every root: a reset (true: pending, not counted), one edge, then either the other
    // edge (completes) or a fail (completes, failed) for even roots; odd roots keep one
    // edge pending.
    let mut frame = Vec::new();
    for root in 0..100 {
        frame.push(Message::ResetTimeout { root });
        frame.push(Message::Ack { root, xor: 0b01 });
        if root % 4 == 0 {
            frame.push(Message::Ack { root, xor: 0b10 });
        } else if root % 4 == 2 {
            frame.push(Message::Fail { root });
        }
    }
    assert_eq!(acker.apply(&frame), 50);
    let done = take(&log);
    assert_eq!(done.len(), 50);
    for (root, payload, outcome) in done {
        assert_eq!(u64::from(payload), root);
        let want = if root % 4 == 0 {
            Outcome::Acked
        } else {
            Outcome::Failed
        };
        assert_eq!(outcome, want, "root {root}");
    }
    assert_eq!(acker.pending(), 50);
    assert_eq!(acker.apply(&[]), 0);
}
