//! Loom models of the Acker's protocols: who completes a tree, slot reuse, the timer inbox and
//! the reaper's wake-up.
//!
//! Each model asserts exactly-once delivery (one `Completion` per initialized root, with the
//! outcome the racing calls' return values agree with) and that nothing is left behind
//! (`pending()` back to 0 once every deadline has passed). The ackers are tiny: one shard,
//! four buckets of two slots (`SLOTS_PER_BUCKET` is 2 and `MAX_PROBE` 1 under loom), so full
//! buckets, overflow and slot reuse are a few steps away. Clocks use std atomics on purpose:
//! time is an input here, not part of the protocol, and loom runs every model thread on one
//! OS thread.
//!
//! Under loom the ledger's grace period is a loom-visible stand-in for the per-thread pin
//! words (see `src/acker/grace.rs`): operations count themselves in and out, and the reaper
//! frees retired slots only when it sees none in flight. The pin-word protocol itself has
//! models of its own in `grace.rs`.
#![cfg(loom)]

use std::sync::atomic::{AtomicU64, Ordering as StdOrdering};
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use ackwheel::{Acker, Clock, ManualClock, Outcome};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

const SEC: u64 = 1_000_000_000;

/// Every completion delivered: `(root, payload, outcome)`.
type Log = Arc<StdMutex<Vec<(u64, u32, Outcome)>>>;

/// A one-shard manual acker (timeout 1 s, room for two pending entries) on `clock`.
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

/// A model checker bounded to `preemptions` forced thread switches per execution: a model
/// with the real reaper thread is too large to explore exhaustively in CI.
fn bounded(preemptions: usize) -> loom::model::Builder {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(preemptions);
    model
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
    loom::model(|| {
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
    loom::model(|| {
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

/// The last ack races the reaper at the deadline: Acked or TimedOut, once. A late ack
/// becomes an orphan that expires silently.
#[test]
fn ack_vs_timeout_completes_once() {
    loom::model(|| {
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
/// found the tree already timed out. (The reaper used to read the deadline, lose the CPU to a
/// reset that returned `true`, and then time the tree out anyway.)
#[test]
fn reset_vs_timeout_honours_a_successful_reset() {
    loom::model(|| {
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
    loom::model(|| {
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

/// An ack and init for a root nobody has seen race to create its entry: one entry (the
/// twin claims resolve), and the tree completes once.
#[test]
fn init_vs_ack_on_a_new_root_completes_once() {
    loom::model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual(clock.clone());
        let other = acker.clone();
        let t = thread::spawn(move || other.ack(1, 0b1));
        acker.init(1, 0b1, 7).unwrap();
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

/// The false `Acked` of a long soak: the second copy of an ack races init on the orphan
/// the first copy left. Its `fetch_xor` may return 0 (the orphan's `a ^ a`) just before
/// init XORs its value in and sets INIT; a zero from before init's XOR must never complete
/// the tree. Unbounded.
#[test]
fn duplicated_ack_vs_init_of_a_held_orphan_never_completes() {
    loom::model(|| duplicated_ack_vs_init(true));
}

/// Both copies race init of a root nobody has seen: the first creates the orphan (or
/// meets init's new entry), the second races init's join. Bounded at 4 preemptions, the
/// fewest that reach the failing interleaving (checked: bounds 2 and 3 pass without the
/// fix): the copies and init must each stop mid-operation, in an order that goes back and
/// forth between the two threads.
#[test]
fn duplicated_ack_vs_init_of_a_new_root_never_completes() {
    bounded(4).check(|| duplicated_ack_vs_init(false));
}

/// A fail before init is held; init and the fail race to complete it: Failed, once.
#[test]
fn init_vs_earlier_fail_completes_once() {
    loom::model(|| {
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

/// A late (duplicate) ack for root 1 races its completion, the reaper retiring and freeing
/// the slot, and root 2 moving into the same bucket: the late ack must never XOR into
/// root 2. Root 2 then completes with exactly its own ack.
#[test]
fn slot_reuse_vs_late_ack() {
    loom::model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual(clock.clone());
        let r1 = 1;
        let r2 = (2..)
            .find(|r| acker.placement(*r) == acker.placement(r1))
            .unwrap();
        acker.init(r1, 0b1, 7).unwrap();
        let late = {
            let acker = acker.clone();
            thread::spawn(move || acker.ack(r1, 0b1))
        };
        let completer = acker.clone();
        let t = thread::spawn(move || {
            let completed = completer.ack(r1, 0b1);
            completer.expire();
            (completed, completer.init(r2, 0b100, 8).is_ok())
        });
        let late_completed = late.join().unwrap();
        let (completed, r2_in) = t.join().unwrap();
        assert!(late_completed ^ completed, "root 1 completes once");
        if r2_in {
            assert!(
                acker.ack(r2, 0b100),
                "root 2's own ack must complete it: {:?} {:?} late {late_completed}",
                completions(&log),
                acker.stats()
            );
        }
        let mut expected = vec![(r1, 7, Outcome::Acked)];
        if r2_in {
            expected.push((r2, 8, Outcome::Acked));
        }
        expected.sort_unstable_by_key(|c| c.0);
        assert_eq!(completions(&log), expected);
        drain(&clock, &acker);
    });
}

/// Spawns and joins a thread that does nothing, before any other runs (so it adds no
/// interleavings): the next thread spawned is then thread 2, on the main thread's lane.
/// Under loom a thread's inbox and retired lane is its number modulo 2
/// (`credits::stripe_index`), and models about one ring need their writers on one lane.
fn skip_a_lane() {
    thread::spawn(|| {}).join().unwrap();
}

/// Two writers hand new slots to the reaper through one inbox ring (the main thread and
/// thread 2, one lane) while a pass drains it: nothing is lost, so the tree times out once
/// and the orphan expires once. Bounded like the models with a reaper thread: with the
/// lanes (a second ring for every pass to drain) it ran for over 6 minutes exhaustively.
#[test]
fn inbox_hand_off_loses_nothing() {
    bounded(3).check(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual(clock.clone());
        skip_a_lane();
        let b = acker.clone();
        let orphan = thread::spawn(move || b.ack(2, 0b1));
        let c = acker.clone();
        let pass = thread::spawn(move || c.expire());
        acker.init(1, 0b1, 7).unwrap();
        orphan.join().unwrap();
        pass.join().unwrap();
        clock.advance(Duration::from_secs(2));
        assert_eq!(acker.expire(), 1);
        assert_eq!(completions(&log), [(1, 7, Outcome::TimedOut)]);
        assert_eq!(acker.stats().orphans_expired, 1);
        assert_eq!(acker.pending(), 0);
    });
}

/// A tree completes while a pass runs, so its retired word may come before its open word
/// is read (the open word is pushed before the slot is published, but another writer's
/// unwritten inbox cell can hold the drain up in front of it: the main thread and thread 2
/// share a lane). The slot must not be freed
/// until the open word is read: a root that reuses it then gets a timer of its own, and no
/// stale one for the old occupant. Checked by the timers left: one per pending entry, and
/// none once all have expired.
#[test]
fn retired_slot_is_freed_only_after_its_open_word() {
    bounded(3).check(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual_with(clock.clone(), 3);
        let reuse = neighbours(&acker, 1, 2)
            .into_iter()
            .find(|r| *r != 2)
            .unwrap();
        skip_a_lane();
        let a = acker.clone();
        let tree = thread::spawn(move || {
            a.init(1, 0b1, 1).unwrap();
            assert!(a.ack(1, 0b1));
            a.init(reuse, 0b1, 3).unwrap();
        });
        let c = acker.clone();
        let passes = thread::spawn(move || {
            c.expire();
            c.expire();
        });
        acker.ack(2, 0b1);
        tree.join().unwrap();
        passes.join().unwrap();
        acker.expire();
        assert_eq!(acker.pending(), 2, "{:?}", acker.stats());
        assert_eq!(acker.scheduled_timers(), 2, "one timer per pending entry");
        clock.advance(Duration::from_secs(2));
        assert_eq!(acker.expire(), 1);
        let mut expected = vec![(1, 1, Outcome::Acked), (reuse, 3, Outcome::TimedOut)];
        expected.sort_unstable_by_key(|c| c.0);
        assert_eq!(completions(&log), expected);
        assert_eq!(acker.stats().orphans_expired, 1);
        assert_eq!(acker.scheduled_timers(), 0, "no timer outlives its entry");
        drain(&clock, &acker);
    });
}

/// A clock that has moved an hour on at every reading: any deadline is due by the reaper's
/// next look, so the reaper only ever sleeps untimed, when it believes nothing is scheduled.
#[derive(Debug)]
struct StepClock(AtomicU64);

impl Clock for StepClock {
    fn now(&self) -> u64 {
        self.0.fetch_add(3600 * SEC, StdOrdering::Relaxed) // an input, not a protocol
    }
}

/// The real reaper thread must time out both trees: the first wakes it from its idle park;
/// the second is initialized while the reaper is busy with the first, and finds the wake
/// time already at the first's deadline (sooner than its own), so it does not unpark the
/// reaper. The reaper must then find it by re-checking the inbox before it parks. A lost
/// wake-up leaves both threads parked, which loom reports as a deadlock.
#[test]
fn next_expiration_wake_up_is_never_lost() {
    bounded(3).check(|| {
        let log: Log = Arc::new(StdMutex::new(Vec::new()));
        let done = Arc::new(AtomicUsize::new(0));
        let waiter = thread::current();
        let acker = {
            let (log, done) = (Arc::clone(&log), Arc::clone(&done));
            Acker::builder()
                .shards(1)
                .max_pending(2)
                .timeout(Duration::from_secs(1))
                .clock(StepClock(AtomicU64::new(0)))
                .on_complete(move |c| {
                    log.lock().unwrap().push((c.root, c.payload, c.outcome));
                    done.fetch_add(1, Ordering::SeqCst);
                    waiter.unpark();
                })
                .build()
                .unwrap()
        };
        acker.init(1, 0b1, 7).unwrap();
        acker.init(2, 0b1, 8).unwrap();
        while done.load(Ordering::SeqCst) < 2 {
            thread::park();
        }
        assert_eq!(
            completions(&log),
            [(1, 7, Outcome::TimedOut), (2, 8, Outcome::TimedOut)]
        );
        assert_eq!(acker.pending(), 0);
        drop(acker); // stops and joins the reaper
    });
}

/// An init racing `shutdown`: the payload comes back exactly once, either in shutdown's
/// hand-back or as `Shutdown(payload)` from init; it is never lost and never both.
#[test]
fn init_vs_shutdown_hands_back_once() {
    loom::model(|| {
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

/// The `max_pending` credits (`src/acker/credits.rs`) with one credit, in the stripe of
/// the thread that completes tree 1 and then starts tree 3 while another thread starts tree
/// 2: the credit goes to exactly one of trees 2 and 3. Both would exceed the bound; neither
/// would mean a credit lost between stripes (tree 3's init comes after tree 1 completed,
/// so it is refused only if tree 2 holds the credit, and tree 2 only if tree 1 or 3 does).
/// And an init of tree 2 that ran wholly between the two (the credit free, in the other
/// thread's stripe) must be accepted.
#[test]
fn max_pending_credit_goes_to_exactly_one_init() {
    loom::model(|| {
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

/// `n` roots other than `root` whose home bucket is `root`'s.
fn neighbours(acker: &Acker<u32>, root: u64, n: usize) -> Vec<u64> {
    (0..)
        .filter(|r| *r != root && acker.placement(*r) == acker.placement(root))
        .take(n)
        .collect()
}

/// Root 1's home bucket is full, so an init and an ack that both create its entry claim
/// slots in the next bucket: the twin claims still resolve to one entry (each raised the
/// overflow count before its key CAS), and the tree completes once.
#[test]
fn twin_claims_past_a_full_bucket_complete_once() {
    loom::model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual_with(clock.clone(), 4);
        for (i, r) in neighbours(&acker, 1, 2).into_iter().enumerate() {
            acker.init(r, 0b1, 100 + i as u32).unwrap();
        }
        let other = acker.clone();
        let t = thread::spawn(move || other.ack(1, 0b1));
        acker.init(1, 0b1, 7).unwrap();
        t.join().unwrap();
        assert_eq!(
            completions(&log),
            [(1, 7, Outcome::Acked)],
            "{:?}",
            acker.stats()
        );
        assert_eq!(acker.pending(), 2);
    });
}

/// Root 1 lives past its full home bucket. While its last ack looks for it, a neighbour in
/// the home bucket completes, the reaper frees that slot and a new neighbour takes it: the
/// ack must still walk on to root 1 (the overflow count stays raised while root 1 lives)
/// and complete it, never create a second entry for it.
#[test]
fn overflowed_root_is_found_while_its_home_bucket_changes() {
    loom::model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual_with(clock.clone(), 4);
        let n = neighbours(&acker, 1, 3);
        acker.init(n[0], 0b1, 100).unwrap();
        acker.init(n[1], 0b1, 101).unwrap();
        acker.init(1, 0b1, 7).unwrap();
        let churn = acker.clone();
        let n2 = n[2];
        let (a, b) = (n[0], n[1]);
        let t = thread::spawn(move || {
            assert!(churn.ack(a, 0b1));
            churn.expire();
            churn.init(n2, 0b1, 102).is_ok()
        });
        assert!(
            acker.ack(1, 0b1),
            "the ack must find root 1: {:?}",
            acker.stats()
        );
        let n2_in = t.join().unwrap();
        assert!(acker.ack(b, 0b1));
        let mut expected = vec![
            (1, 7, Outcome::Acked),
            (a, 100, Outcome::Acked),
            (b, 101, Outcome::Acked),
        ];
        if n2_in {
            assert!(acker.ack(n2, 0b1));
            expected.push((n2, 102, Outcome::Acked));
        }
        expected.sort_unstable_by_key(|c| c.0);
        assert_eq!(completions(&log), expected);
        drain(&clock, &acker);
    });
}

/// An init shortens the deadline of an orphan that another thread opened, while a pass
/// drains the inboxes. Each opens on its own lane (loom's thread 1 on lane 1, the main
/// thread on lane 0), and a pass drains lane 0 first: the init's adjust word must go on the
/// orphan's lane, after its open word, or a pass that reads both drops the adjust (no timer
/// yet) and schedules the open word's deadline, 1 s instead of 100 ms.
#[test]
fn an_adjust_word_follows_its_open_word_across_lanes() {
    loom::model(|| {
        let clock = ManualClock::new(0);
        let (acker, log) = manual(clock.clone());
        let other = acker.clone();
        thread::spawn(move || assert!(!other.ack(1, 0b1)))
            .join()
            .unwrap();
        let other = acker.clone();
        let pass = thread::spawn(move || other.expire());
        acker
            .init_with_timeout(1, 0b11, 7, Duration::from_millis(100))
            .unwrap();
        assert_eq!(pass.join().unwrap(), 0, "nothing is due at 0");
        clock.set(SEC / 10 + 2 * SEC / 100);
        acker.expire();
        assert_eq!(completions(&log), [(1, 7, Outcome::TimedOut)]);
    });
}

/// `reset_timeout` races the init of a held orphan that sets a longer timeout of its own.
/// Whichever goes first, the tree is due at the reset's time plus the tree's timeout: the
/// reset is not lost (init recomputing the deadline from before it) and does not count with
/// the orphan's shorter timeout (a reset that read it before init changed it).
#[test]
fn reset_vs_init_of_a_held_orphan_keeps_both() {
    loom::model(|| {
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
