//! Loom models of the Acker's operations on its core (`src/acker/engine/`): who completes a
//! tree, timeouts and resets against a reaper pass, a pass's moves of a growing table
//! against an ack, init against shutdown, and the `max_pending` credits, through the public
//! API.
//!
//! Each model asserts exactly-once delivery (one `Completion` per initialized root, with
//! the outcome the racing calls' return values agree with) and that nothing is left behind
//! (`pending()` back to 0 once every deadline has passed). The ackers are tiny: under loom
//! an acker has 16 tables (`MIN_TABLES`), each of two groups of two slots (`GROUP_SLOTS` 2,
//! `MAX_PROBE` 1), and with `max_pending` at most 4 no table grows, so full groups and
//! overflow are a few steps away. Roots that must share a home group are computed
//! ([`home`]). A completing call frees its slot itself, so reuse needs no reaper pass. The
//! reaper thread is a std thread that loom cannot model: the models use manual ackers and
//! run passes with `expire()`. Clocks use std atomics on purpose: time is an input here,
//! not part of the protocol, and loom runs every model thread on one OS thread.
//!
//! The table's own races (twin claims, slot reuse, resets) are modelled on `Table` in
//! `table.rs`, migrations in `migrate.rs`, the per-thread records (marks) and the
//! registration by dirty groups in `threads.rs`.
#![cfg(loom)]

use std::sync::Mutex as StdMutex;
use std::time::Duration;

use ackwheel::table::KEY_SHIFT;
use ackwheel::{Acker, Clock, InitError, ManualClock, Outcome};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::sized;

const SEC: u64 = 1_000_000_000;

/// The CI bounds of the models too long to explore exhaustively there
/// ([`loom_tests::sized`]): about 6-7 and 4-5 s each on one core of the 2-core machine
/// (33 and 28 s at 7), against 5 and 8 minutes exhaustively.
const CI_BOUND_ACK_VS_TIMEOUT: usize = 5;
const CI_BOUND_INIT_VS_SHUTDOWN: usize = 5;

/// Every completion delivered: `(root, payload, outcome)`.
type Log = Arc<StdMutex<Vec<(u64, u32, Outcome)>>>;

/// A manual acker (16 tables, timeout 1 s, room for two pending entries) on `clock`.
fn manual(clock: impl Clock) -> (Acker<u32>, Log) {
    manual_with(clock, 2)
}

/// [`manual`] with room for `max_pending` entries.
fn manual_with(clock: impl Clock, max_pending: usize) -> (Acker<u32>, Log) {
    let log: Log = Arc::new(StdMutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    let acker = Acker::builder()
        .shards(1)
        .max_pending(max_pending)
        .timeout(Duration::from_secs(1))
        .clock(clock)
        .on_complete(move |c| sink.lock().unwrap().push((c.root, c.payload, c.outcome)))
        .build_manual()
        .unwrap();
    (acker, log)
}

fn completions(log: &Log) -> Vec<(u64, u32, Outcome)> {
    let mut all = log.lock().unwrap().clone();
    all.sort_unstable_by_key(|c| c.0);
    all
}

/// A model checker bounded to `preemptions` forced thread switches per execution, for the
/// models too large to explore exhaustively (an Acker operation is many loom steps: its
/// operation marks, credits, table words).
fn bounded(preemptions: usize) -> loom::model::Builder {
    let mut model = builder();
    model.preemption_bound = Some(preemptions);
    model
}

/// Loom's model checker with room for long executions: a pass looks at every slot of a
/// due group (`timers/groups.rs`), and a model's drain and drop take several passes and a
/// walk of 16 tables, more than loom's default 1,000 branches on one path.
fn builder() -> loom::model::Builder {
    let mut model = loom::model::Builder::new();
    model.max_branches = 10_000;
    model
}

/// [`loom::model`] with [`builder`]'s room.
fn model(f: impl Fn() + Sync + Send + 'static) {
    builder().check(f);
}

/// Moves the clock past every deadline and expires: nothing may be left pending.
fn drain(clock: &ManualClock, acker: &Acker<u32>) {
    clock.advance(Duration::from_secs(10));
    acker.expire();
    assert_eq!(
        acker.pending(),
        0,
        "entries left behind: {:?}",
        acker.stats()
    );
}

/// The last two acks of a tree race: exactly one of them completes it, once.
#[test]
fn ack_vs_ack_completes_once() {
    model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual(clock.clone());
        acker.init(1, 0b01 ^ 0b10, 7).unwrap();
        let other = acker.clone();
        let t = thread::spawn(move || other.ack(1, 0b01));
        let mine = acker.ack(1, 0b10);
        let theirs = t.join().unwrap();
        assert!(mine ^ theirs, "exactly one ack completes: {mine} {theirs}");
        assert_eq!(completions(&log), [(1, 7, Outcome::Acked)]);
        drain(&clock, &acker);
    });
}

/// The last ack races a fail: one completion, and its outcome is the one whose call
/// returned `true`.
#[test]
fn ack_vs_fail_completes_once() {
    model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual(clock.clone());
        acker.init(1, 0b1, 7).unwrap();
        let other = acker.clone();
        let t = thread::spawn(move || other.fail(1));
        let acked = acker.ack(1, 0b1);
        let failed = t.join().unwrap();
        assert!(
            acked ^ failed,
            "exactly one completes: ack {acked}, fail {failed}"
        );
        let outcome = if acked {
            Outcome::Acked
        } else {
            Outcome::Failed
        };
        assert_eq!(completions(&log), [(1, 7, outcome)]);
        drain(&clock, &acker);
    });
}

/// A [`manual`] acker at 2 s holding root 1 (XOR 0b1, payload 7), due since 1 s.
fn overdue_tree() -> (ManualClock, Acker<u32>, Log) {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(clock.clone());
    acker.init(1, 0b1, 7).unwrap();
    clock.advance(Duration::from_secs(2));
    (clock, acker, log)
}

/// Runs `op` on another thread while this one runs a reaper pass; returns what `op`
/// returned and how many completions the pass delivered.
fn race_with_a_pass<R: Send + 'static>(
    acker: &Acker<u32>,
    op: impl FnOnce(Acker<u32>) -> R + Send + 'static,
) -> (R, usize) {
    let other = acker.clone();
    let t = thread::spawn(move || op(other));
    let expired = acker.expire();
    (t.join().unwrap(), expired)
}

/// Two passes race on an overdue tree (the reaper's and a caller's that found it late,
/// `src/acker/engine/reaper/mod.rs`, "A late reaper"; or a manual acker's `expire` beside
/// its driver): it times out once, by one of them.
#[test]
fn two_passes_time_a_tree_out_once() {
    bounded(3).check(|| {
        let (clock, acker, log) = overdue_tree();
        let (theirs, mine) = race_with_a_pass(&acker, |acker| acker.expire());
        assert_eq!(theirs + mine, 1, "passes delivered {theirs} and {mine}");
        assert_eq!(completions(&log), [(1, 7, Outcome::TimedOut)]);
        drain(&clock, &acker);
        assert_eq!(completions(&log).len(), 1);
    });
}

/// The last ack races two passes at the deadline: Acked by the ack or TimedOut by one of
/// the passes, once.
#[test]
fn ack_vs_two_passes_completes_once() {
    bounded(2).check(|| {
        let (clock, acker, log) = overdue_tree();
        let other = acker.clone();
        let t = thread::spawn(move || other.expire());
        let (acked, mine) = race_with_a_pass(&acker, |acker| acker.ack(1, 0b1));
        let theirs = t.join().unwrap();
        assert!(
            acked ^ (theirs + mine == 1),
            "ack {acked}, passes delivered {theirs} and {mine}"
        );
        assert!(theirs + mine <= 1, "timed out twice");
        // Acked iff the ack completed it: one completion, and none after the drain.
        let outcome = [Outcome::TimedOut, Outcome::Acked][usize::from(acked)];
        assert_eq!(completions(&log), [(1, 7, outcome)]);
        drain(&clock, &acker);
        assert_eq!(completions(&log).len(), 1);
    });
}

/// The last ack races the reaper at the deadline: Acked or TimedOut, once. A late ack
/// becomes an orphan that expires silently. (Planted: a timeout CAS whose failure is
/// ignored in `Table::expire_keeping`, the tree claimed anyway: fails at the bound.)
#[test]
fn ack_vs_timeout_completes_once() {
    sized(builder(), CI_BOUND_ACK_VS_TIMEOUT).check(|| {
        let (clock, acker, log) = overdue_tree();
        let (acked, expired) = race_with_a_pass(&acker, |acker| acker.ack(1, 0b1));
        assert!(acked ^ (expired == 1), "ack {acked}, expire {expired}");
        let outcome = if acked {
            Outcome::Acked
        } else {
            Outcome::TimedOut
        };
        assert_eq!(completions(&log), [(1, 7, outcome)]);
        drain(&clock, &acker);
        assert_eq!(
            completions(&log).len(),
            1,
            "the orphan must expire silently"
        );
    });
}

/// `reset_timeout` races the reaper at the deadline: a reset that reports success is
/// honoured (the tree is not timed out at the old deadline), and one that reports failure
/// found the tree already timed out. (A reaper that read the old deadline before the reset
/// must not time the tree out: the reset's R flag fails its CAS, `Table::expire`.)
#[test]
fn reset_vs_timeout_honours_a_successful_reset() {
    model(|| {
        let (clock, acker, log) = overdue_tree();
        let (reset, expired) = race_with_a_pass(&acker, |acker| acker.reset_timeout(1));
        assert!(reset ^ (expired == 1), "reset {reset}, expire {expired}");
        if reset {
            // Due one timeout after the reset (at 3 s), not before.
            assert_eq!(completions(&log), []);
            clock.set(3 * SEC - 1);
            assert_eq!(acker.expire(), 0, "timed out before the reset deadline");
            assert!(acker.ack(1, 0b1));
            assert_eq!(completions(&log), [(1, 7, Outcome::Acked)]);
        } else {
            assert_eq!(completions(&log), [(1, 7, Outcome::TimedOut)]);
        }
        drain(&clock, &acker);
    });
}

/// The last ack and init race on a held orphan (the first ack came earlier): init or the
/// ack completes the tree, once.
#[test]
fn init_vs_earlier_acks_completes_once() {
    model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual(clock.clone());
        assert!(!acker.ack(1, 0b01)); // held as an orphan
        let other = acker.clone();
        let t = thread::spawn(move || other.ack(1, 0b10));
        acker.init(1, 0b01 ^ 0b10, 7).unwrap();
        t.join().unwrap();
        assert_eq!(completions(&log), [(1, 7, Outcome::Acked)]);
        drain(&clock, &acker);
    });
}

/// An ack `0b01` sent twice races init of root 1 (XOR 0b10, payload 7): the copy on this
/// thread before the race if `held` (so the other thread's copy meets a held orphan), else
/// both copies on the other thread. The value never reaches 0 with init's XOR in it, so
/// no call may complete the tree, and it must time out.
fn duplicated_ack_vs_init(held: bool) {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(clock.clone());
    if held {
        assert!(!acker.ack(1, 0b01));
    }
    let other = acker.clone();
    let copies = if held { 1 } else { 2 };
    let t = thread::spawn(move || (0..copies).any(|_| other.ack(1, 0b01)));
    acker.init(1, 0b10, 7).unwrap();
    assert!(!t.join().unwrap(), "an ack said it completed the tree");
    assert!(
        completions(&log).is_empty(),
        "completed with init's XOR unacked: {:?}",
        completions(&log)
    );
    clock.advance(Duration::from_secs(10));
    acker.expire();
    assert_eq!(completions(&log), [(1, 7, Outcome::TimedOut)]);
    assert_eq!(acker.pending(), 0);
}

/// The shape of a false `Acked` that a long soak once found: the second copy of an ack
/// races init on the orphan the first copy left, and takes its value to 0 (`a ^ a`) around
/// init's join. A value of 0 without init's XOR in it must never complete the tree (a HELD
/// or JOINING word does not complete: `src/acker/table/word/mod.rs`). Unbounded.
#[test]
fn duplicated_ack_vs_init_of_a_held_orphan_never_completes() {
    model(|| duplicated_ack_vs_init(true));
}

/// Both copies race init of a root nobody has seen: the first creates the orphan (or
/// meets init's new JOINING claim), the second races init's join or its settle. Bounded
/// at 4 preemptions, the fewest that reach a failing interleaving of this race when the
/// join is wrong; `roots_duplicated_ack_vs_init_never_completes` in `table.rs` is the same
/// race on the table alone.
#[test]
fn duplicated_ack_vs_init_of_a_new_root_never_completes() {
    bounded(4).check(|| duplicated_ack_vs_init(false));
}

/// A fail and init race on a root nobody has seen: a fail that lands first is held (in
/// its own entry, or a twin of init's claim whose fail is carried over when the twins
/// merge) and init completes the tree; a later one completes the LIVE tree. Failed, once.
/// Bounded at 6 preemptions by hand (about 44 s; 1 already reaches the twins), 4 in CI
/// (5 take 7 to 11 s): unbounded it does not finish in 400 s. (Planted: a merge's loser
/// with F but a value of 0 taken for an empty twin in `Table::land_lost`, its fail
/// dropped: fails at the bound.)
#[test]
fn init_vs_earlier_fail_completes_once() {
    // 4 preemptions: about 1.5 s on one core; 6 (`ACKWHEEL_LOOM_FULL=1`) about 44 s.
    sized(bounded(6), 4).check(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual(clock.clone());
        let other = acker.clone();
        let t = thread::spawn(move || other.fail(1));
        acker.init(1, 0b1, 7).unwrap();
        t.join().unwrap();
        assert_eq!(completions(&log), [(1, 7, Outcome::Failed)]);
        drain(&clock, &acker);
    });
}

/// An init racing `shutdown`: the payload comes back exactly once, either in shutdown's
/// hand-back or as `Shutdown(payload)` from init; it is never lost and never both.
/// (Planted: a `Table::take_back` that ignores its CAS's failure, so that the scan and the
/// init both take the tree back: fails at the bound.)
#[test]
fn init_vs_shutdown_hands_back_once() {
    sized(builder(), CI_BOUND_INIT_VS_SHUTDOWN).check(|| {
        let (acker, log) = manual(ManualClock::new(0));
        let other = acker.clone();
        let t = thread::spawn(move || other.shutdown());
        let init = acker.init(1, 0b1, 7);
        let handed_back = t.join().unwrap();
        match init {
            Ok(()) => assert_eq!(handed_back, [(1, 7)], "accepted, so shutdown hands it back"),
            Err(e) => {
                assert!(handed_back.is_empty(), "both: {handed_back:?}");
                assert_eq!(e.into_payload(), 7);
            }
        }
        assert!(completions(&log).is_empty());
    });
}

/// The `max_pending` credits (`src/acker/bound.rs`) with one credit, in the stripe of
/// the thread that completes tree 1 and then starts tree 3 while another thread starts tree
/// 2: the credit goes to exactly one of trees 2 and 3. Both would exceed the bound; neither
/// would mean a credit lost between stripes (tree 3's init comes after tree 1 completed,
/// so it is refused only if tree 2 holds the credit, and tree 2 only if tree 1 or 3 does).
/// And an init of tree 2 that ran wholly between the two (the credit free, in the other
/// thread's stripe) must be accepted.
#[test]
fn max_pending_credit_goes_to_exactly_one_init() {
    model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual_with(clock.clone(), 1);
        acker.init(1, 0b1, 1).unwrap();
        // 0: tree 1 pending, 1: tree 1 failed, 2: tree 3's init started.
        let phase = Arc::new(AtomicUsize::new(0));
        let other = acker.clone();
        let seen = Arc::clone(&phase);
        let t = thread::spawn(move || {
            let before = seen.load(Ordering::SeqCst);
            let ok = other.init(2, 0b1, 2).is_ok();
            (ok, before == 1 && seen.load(Ordering::SeqCst) == 1)
        });
        assert!(acker.fail(1));
        phase.store(1, Ordering::SeqCst);
        phase.store(2, Ordering::SeqCst);
        let third = acker.init(3, 0b1, 3).is_ok();
        let (second, credit_was_free) = t.join().unwrap();
        assert!(
            second ^ third,
            "one credit, inits of 2 and 3 accepted: {second} {third}"
        );
        assert!(
            second || !credit_was_free,
            "tree 2 refused while the only credit was free"
        );
        assert_eq!(acker.pending(), 1);
        assert_eq!(completions(&log), [(1, 1, Outcome::Failed)]);
        drain(&clock, &acker);
        assert_eq!(completions(&log).len(), 2, "the accepted tree timed out");
    });
}

/// The seed of the root mix under loom (`Engine::new`: fixed, so that a model's roots land
/// in the same places in every execution).
const SEED: u64 = 0x5eed;

/// Groups in a table of these ackers under loom: `MIN_TABLE_SLOTS` (`(MAX_PROBE + 1) *
/// GROUP_SLOTS`, 4) slots, two to a group. With `max_pending` at most 4 no table grows.
const GROUPS: u64 = 2;

/// Where `root` lives: `(table, home group)`. The mix and layout of
/// `src/acker/engine/tables/layout.rs` (`Mix::hash`, then `Layout::place` with 4 table bits
/// for the 16 tables) and the multiply-shift of the key's top bits in `Table::home`.
fn home(root: u64) -> (usize, usize) {
    let z = root ^ SEED;
    let z = (z ^ (z >> 32)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let hash = z ^ (z >> 32);
    let table = (hash >> 60) as usize;
    // The key is the hash rotated left by the table bits, less its low `KEY_SHIFT` bits;
    // `Table::home` scales its top bits (`key << KEY_SHIFT`) to the group count.
    let top = hash.rotate_left(4) & !((1 << KEY_SHIFT) - 1);
    let group = (u128::from(top) * u128::from(GROUPS)) >> 64;
    (table, group as usize)
}

/// `n` roots other than `root` whose home group is `root`'s (in the same table).
fn group_mates(acker: &Acker<u32>, root: u64, n: usize) -> Vec<u64> {
    let mates: Vec<u64> = (0..)
        .filter(|r| *r != root && home(*r) == home(root))
        .take(n)
        .collect();
    for r in mates.iter().chain([&root]) {
        // The acker's own placement of the table: a layout change shows here.
        assert_eq!(
            acker.placement(*r).0,
            home(*r).0,
            "`home` is stale: root {r}"
        );
    }
    mates
}

/// The reaper keeps one timer per group (`timers/groups.rs`): a pass that looks at root 1's
/// group to time it out races the init of a group mate. Whether the look sees the mate or
/// not, the mate's registration comes later and the group stays covered: the mate times
/// out at its own deadline, not before, and nothing is left behind. Bounded at 4
/// preemptions.
#[test]
fn a_group_look_vs_a_mates_init_loses_no_timer() {
    bounded(4).check(|| {
        let (clock, acker, log) = overdue_tree();
        let mate = group_mates(&acker, 1, 1)[0];
        // Due 1 s after its init, at 3 s.
        let ((), expired) =
            race_with_a_pass(&acker, move |acker| acker.init(mate, 0b1, 8).unwrap());
        assert_eq!(expired, 1);
        clock.set(3 * SEC - 1);
        assert_eq!(acker.expire(), 0, "the mate timed out before its deadline");
        clock.set(3 * SEC + SEC / 100);
        assert_eq!(acker.expire(), 1, "the mate's timer was lost");
        let mut expected = vec![(1, 7, Outcome::TimedOut), (mate, 8, Outcome::TimedOut)];
        expected.sort_unstable_by_key(|c| c.0);
        assert_eq!(completions(&log), expected);
        drain(&clock, &acker);
    });
}

/// Root 1's home group is full, so an init and an ack that both create its entry claim
/// slots in the next group: a claim reserves its slot first, so the two may claim two
/// slots (twins). Each raises the home group's overflow count before its CAS and searches
/// again after it, so at least one sees the other and the twins merge into one entry: the
/// tree completes once. Bounded at 4 preemptions by hand (about 27 s; 2 already reach the
/// twins, 5 take minutes), 3 in CI. (Planted: init's claim taken as alone without its
/// search for a twin, `has_twin` in `Table::claim_joined`: fails at the bound.)
#[test]
fn twin_claims_past_a_full_group_complete_once() {
    // 3 preemptions: about 3 s on one core; 4 (`ACKWHEEL_LOOM_FULL=1`) about 27 s.
    sized(bounded(4), 3).check(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual_with(clock.clone(), 4);
        let mates = group_mates(&acker, 1, 2);
        for (i, r) in mates.iter().enumerate() {
            acker.init(*r, 0b1, 100 + i as u32).unwrap();
        }
        let other = acker.clone();
        let t = thread::spawn(move || other.ack(1, 0b1));
        let init = acker.init(1, 0b1, 7);
        let acked = t.join().unwrap();
        assert!(init.is_ok(), "{init:?}");
        assert_eq!(
            completions(&log),
            [(1, 7, Outcome::Acked)],
            "ack completed: {acked}, {:?}",
            acker.stats()
        );
        assert_eq!(acker.pending(), 2, "a twin was left behind");
        drain(&clock, &acker);
    });
}

/// Root 1 lives past its full home group. While its last ack looks for it, a group mate
/// completes (its completer frees the slot) and a new mate takes that slot: the ack must
/// still walk on to root 1 (the home group's overflow count stays raised while root 1
/// lives) and complete it, never create a second entry for it. Bounded at 6 preemptions
/// (about 25 s): unbounded it does not finish in 400 s.
#[test]
fn overflowed_root_is_found_while_its_home_group_changes() {
    bounded(6).check(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual_with(clock.clone(), 4);
        let (a, b, c) = match group_mates(&acker, 1, 3)[..] {
            [a, b, c] => (a, b, c),
            _ => unreachable!(),
        };
        acker.init(a, 0b1, 100).unwrap();
        acker.init(b, 0b1, 101).unwrap();
        acker.init(1, 0b1, 7).unwrap(); // in the next group
        let churn = acker.clone();
        let t = thread::spawn(move || {
            assert!(churn.ack(a, 0b1));
            churn.init(c, 0b1, 102).unwrap(); // into `a`'s slot
        });
        assert!(
            acker.ack(1, 0b1),
            "the ack must find root 1: {:?}",
            acker.stats()
        );
        t.join().unwrap();
        assert!(acker.ack(b, 0b1));
        assert!(acker.ack(c, 0b1));
        let mut expected = vec![
            (1, 7, Outcome::Acked),
            (a, 100, Outcome::Acked),
            (b, 101, Outcome::Acked),
            (c, 102, Outcome::Acked),
        ];
        expected.sort_unstable_by_key(|c| c.0);
        assert_eq!(completions(&log), expected);
        drain(&clock, &acker);
    });
}

/// `reset_timeout` races the init of a held orphan that sets a longer timeout of its own.
/// Whichever goes first, the tree is due at the reset's time plus the tree's timeout: the
/// reset is not lost (init recomputing the deadline from before it) and does not count with
/// the orphan's shorter timeout (a reset that read it before init changed it).
#[test]
fn reset_vs_init_of_a_held_orphan_keeps_both() {
    model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual(clock.clone());
        assert!(!acker.ack(1, 0b1)); // an orphan, due at 1 s (the default timeout)
        clock.advance(Duration::from_millis(500));
        let other = acker.clone();
        let t = thread::spawn(move || other.reset_timeout(1));
        acker
            .init_with_timeout(1, 0b11, 7, Duration::from_secs(5))
            .unwrap();
        assert!(t.join().unwrap(), "the entry was pending throughout");
        // Due at 0.5 s + 5 s.
        clock.set(5_500_000_000 - 1);
        acker.expire();
        assert!(
            completions(&log).is_empty(),
            "timed out early: {:?}",
            completions(&log)
        );
        clock.set(5_500_000_000 + 2 * SEC / 100);
        acker.expire();
        assert_eq!(completions(&log), [(1, 7, Outcome::TimedOut)]);
        assert_eq!(acker.pending(), 0);
    });
}

/// An init whose new claim may meet a twin races `shutdown`: root 1's home group is full;
/// the other thread completes a group mate (freeing its slot), acks root 1 (its claim may
/// take that slot while init's claim lands past the group, so init unjoins and merges) and
/// shuts down. Init's payload comes back exactly once, from shutdown's hand-back or as
/// `Shutdown(payload)`; the other mate is handed back; only the completed mate completes.
/// Bounded at 4 preemptions by hand, as the other twin models, and 3 in CI. (Planted: an
/// unjoin that gives up when its CAS fails, `Table::unjoin`, so that an ack carried into
/// the claim leaves it JOINING and init is refused `Duplicate`: fails at the bound.)
#[test]
fn init_in_a_twin_window_vs_shutdown_hands_back_once() {
    // 3 preemptions: about 5 s on one core; 4 (`ACKWHEEL_LOOM_FULL=1`) about 64 s.
    sized(bounded(4), 3).check(|| {
        let (acker, log) = manual_with(ManualClock::new(0), 4);
        let mates = group_mates(&acker, 1, 2);
        for (i, r) in mates.iter().enumerate() {
            acker.init(*r, 0b1, 100 + i as u32).unwrap();
        }
        let other = acker.clone();
        let first = mates[0];
        let t = thread::spawn(move || {
            assert!(other.ack(first, 0b1), "the mate did not complete");
            assert!(!other.ack(1, 0b10), "an ack of 0b10 completed 0b1");
            other.shutdown()
        });
        let init = acker.init(1, 0b1, 7);
        let mut handed_back = t.join().unwrap();
        handed_back.sort_unstable();
        let mut expected = vec![(mates[1], 101)];
        match init {
            Ok(()) => expected.push((1, 7)),
            Err(InitError::Shutdown(7)) => {}
            Err(e) => panic!("refused for another reason: {e:?}"),
        }
        expected.sort_unstable();
        assert_eq!(handed_back, expected);
        assert_eq!(completions(&log), [(first, 100, Outcome::Acked)]);
    });
}

/// A pass finishes a table's migration (its upkeep moves the group no operation moved,
/// `src/acker/engine/tables/growth.rs`) and files the roots it moved on its wheel at once
/// (`Engine::file_on_wheel`), while an ack completes one of them: in the old table, while
/// it is being moved (the ack's own operation may move the group first), or in the
/// successor before or after its filing. The tree completes once and every other root
/// times out once, at its deadline, not before. Five roots of one home group fill its
/// probe window (four slots under loom), so the fifth init grows the table and moves one
/// of its two groups. Bounded at 3 preemptions by hand, 2 in CI.
///
/// Catches: a pass's moved roots taken from its `Effects` and not filed (a timer lost).
/// (Planted: that, in the upkeep's moves in `growth.rs`: fails at the bound.)
#[test]
fn a_pass_that_moves_a_group_vs_an_ack_loses_no_timer() {
    // 2 preemptions: about 1.5 s on one core; 3 (`ACKWHEEL_LOOM_FULL=1`) about 23 s.
    sized(bounded(3), 2).check(|| {
        let clock = ManualClock::new(0);
        // Room for the table to double: its share of `max_pending` at 4/5 load is past
        // 8 slots.
        let (acker, log) = manual_with(clock.clone(), 128);
        let mut roots = vec![1];
        roots.extend(group_mates(&acker, 1, 4));
        for (i, &root) in roots.iter().enumerate() {
            acker.init(root, 0b1, i as u32).unwrap();
        }
        assert_eq!(
            acker.table_migrations().0,
            1,
            "the fifth init grew the table"
        );
        // The fifth init moved group 0 (a migration moves its groups in order): group 1,
        // left to the pass, holds the home group's two roots or the two past it.
        let acked = if home(1).1 == 1 { 0 } else { 2 };
        let root = roots[acked];
        let ((), _) = race_with_a_pass(&acker, move |acker| {
            assert!(acker.ack(root, 0b1), "the last ack completes the tree");
        });
        clock.set(SEC - 1);
        assert_eq!(acker.expire(), 0, "a root timed out before its deadline");
        clock.set(SEC + SEC / 100);
        assert_eq!(acker.expire(), 4, "a moved root's timer was lost");
        let mut expected: Vec<_> = roots
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let outcome = if i == acked {
                    Outcome::Acked
                } else {
                    Outcome::TimedOut
                };
                (r, i as u32, outcome)
            })
            .collect();
        expected.sort_unstable_by_key(|c| c.0);
        assert_eq!(completions(&log), expected);
        drain(&clock, &acker);
    });
}
