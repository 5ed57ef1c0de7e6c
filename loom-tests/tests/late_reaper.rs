//! Loom models of a late reaper's pass run by callers (`src/acker/engine/reaper/mod.rs`,
//! "A late reaper" and "A caller's pass"): the publication protocol (the published timer
//! `reaper_wakes_at`, the claim CAS, the `helping` flag; the thread publishing itself
//! running), a caller's timers-only pass beside a whole pass with its upkeep, and shutdown
//! against a caller's pass. (The unpark is std's, which loom does not model; the thread's
//! timed sleep neither.)
//!
//! The reaper thread is a std thread that loom cannot model: a manual acker stands in, its
//! timer published by `pretend_reaper_late` (two ticks past, so any caller finds it late)
//! and its pass run by `expire()`. The acker is the one of `acker.rs`'s models: 16 tables
//! of two groups of two slots, room for two pending trees, a 1 s timeout.
#![cfg(loom)]

use std::sync::Mutex as StdMutex;
use std::time::Duration;

use ackwheel::{Acker, ManualClock, Outcome};
use loom::sync::Arc;
use loom::thread;

/// Every completion delivered: `(root, outcome)`.
type Log = Arc<StdMutex<Vec<(u64, Outcome)>>>;

/// A manual acker at 2 s holding root 1 (XOR 0b1, payload 7), due since 1 s, with a reaper
/// published as late for it.
fn late_for_an_overdue_tree() -> (ManualClock, Acker<u32>, Log) {
    let clock = ManualClock::new(0);
    let log: Log = Arc::new(StdMutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    let acker = Acker::builder()
        .shards(1)
        .max_pending(2)
        .timeout(Duration::from_secs(1))
        .clock(clock.clone())
        .on_complete(move |c| sink.lock().unwrap().push((c.root, c.outcome)))
        .build_manual()
        .unwrap();
    acker.init(1, 0b1, 7).unwrap();
    clock.advance(Duration::from_secs(2));
    acker.pretend_reaper_late();
    (clock, acker, log)
}

fn completions(log: &Log) -> Vec<(u64, Outcome)> {
    log.lock().unwrap().clone()
}

/// Preemptions per execution: a pass is hundreds of loom steps (its marks, the dirty
/// groups' scan, every slot of a due group), and three would take minutes.
fn bounded() -> loom::model::Builder {
    let mut model = loom::model::Builder::new();
    model.max_branches = 10_000;
    model.preemption_bound = Some(2);
    model
}

/// Two callers find the reaper late at once: one claims the lateness (the `helping` flag
/// and the claim's CAS on the published timer) and runs the pass, which times the tree out
/// once; the other runs none, however the two interleave. (Without the CAS a caller that
/// read the timer before the other's pass ran a second pass for the same lateness.)
#[test]
fn a_lateness_is_claimed_by_one_caller() {
    bounded().check(|| {
        let (_clock, acker, log) = late_for_an_overdue_tree();
        let other = acker.clone();
        let t = thread::spawn(move || other.help_late_reaper());
        let mine = acker.help_late_reaper();
        let theirs = t.join().unwrap();
        assert!(mine ^ theirs, "passes run: mine {mine}, theirs {theirs}");
        assert_eq!(acker.stats().caller_passes, 1);
        assert_eq!(completions(&log), [(1, Outcome::TimedOut)]);
        // Served: nobody is late any more.
        assert!(!acker.help_late_reaper());
    });
}

/// The thread wakes after all (its loop's top publishes it running, then it runs its pass)
/// while a caller claims its lateness: the tree times out once, and the thread stays
/// published as running whatever the caller's publication after its pass (a CAS from its
/// own claim, which the thread's store makes fail), so that no caller helps a thread that
/// runs. (With a plain store there, the caller's next tick overwrote the thread's mark.)
#[test]
fn a_callers_claim_beside_the_thread_waking_leaves_it_published_running() {
    bounded().check(|| {
        let (_clock, acker, log) = late_for_an_overdue_tree();
        // A later timer, so that a caller's publication is a tick, not "running".
        acker
            .init_with_timeout(2, 0b1, 8, Duration::from_secs(10))
            .unwrap();
        let other = acker.clone();
        let t = thread::spawn(move || other.help_late_reaper());
        acker.pretend_reaper_running();
        let expired = acker.expire();
        let helped = t.join().unwrap();
        assert_eq!(completions(&log), [(1, Outcome::TimedOut)]);
        assert!(expired == 1 || helped);
        assert!(
            acker.reaper_published_running(),
            "a caller's publication overwrote the running thread's"
        );
    });
}

/// A caller's timers-only pass beside the reaper's whole pass (its upkeep: migrations,
/// freeing, giving memory back): the tree times out once, by one of them, and the
/// caller's pass either ran or gave way to the other (`try_lock` on the wheel), never
/// waiting for it.
#[test]
fn a_callers_pass_beside_a_whole_pass_times_a_tree_out_once() {
    bounded().check(|| {
        let (_clock, acker, log) = late_for_an_overdue_tree();
        let other = acker.clone();
        let t = thread::spawn(move || other.help_late_reaper());
        let expired = acker.expire();
        let helped = t.join().unwrap();
        assert_eq!(completions(&log), [(1, Outcome::TimedOut)]);
        assert!(
            expired == 1 || helped,
            "timed out by neither (expire {expired})"
        );
        assert_eq!(acker.pending(), 0);
    });
}

/// `shutdown` against a caller that found the reaper late: the overdue tree is timed out
/// by the caller's pass or handed back by shutdown, once, and no caller's pass runs after
/// `shutdown` returned (a caller that passed the `stopping` check before shutdown began
/// enters its operation after it: it must find the callback closed and run nothing).
#[test]
fn shutdown_vs_a_callers_pass_runs_no_pass_after_it_returns() {
    bounded().check(|| {
        let (_clock, acker, log) = late_for_an_overdue_tree();
        let other = acker.clone();
        let t = thread::spawn(move || other.help_late_reaper());
        let handed_back = acker.shutdown();
        let passes = acker.stats().caller_passes;
        let delivered = completions(&log);
        let helped = t.join().unwrap();
        assert_eq!(
            acker.stats().caller_passes,
            passes,
            "a caller's pass ran after shutdown returned"
        );
        assert_eq!(
            completions(&log),
            delivered,
            "delivered after shutdown returned"
        );
        match (handed_back.as_slice(), delivered.as_slice()) {
            ([(1, 7)], []) => {}
            ([], [(1, Outcome::TimedOut)]) => assert!(helped),
            other => panic!("handed back and delivered: {other:?}"),
        }
    });
}

/// A task that drives a manual acker's passes (`spawn_expiry`) against a push due sooner
/// than its next sleep would end (`src/acker/engine/reaper/driver.rs`, `driver_sleeps`):
/// the driver last slept until tree 0's deadline, a tick now past, and wakes for a pass
/// and its next sleep while another thread starts tree 2, due in 10 ms. Either the
/// driver's sleep ends by then or the push calls its waker. (Planted: a driver that does
/// not publish itself awake when it wakes leaves the push reading the old tick, at or
/// before tree 2's, and fails here.)
#[test]
fn a_driver_never_sleeps_past_a_push_due_sooner() {
    bounded().check(|| {
        let clock = ManualClock::new(0);
        let acker: Acker<u32> = Acker::builder()
            .shards(1)
            .max_pending(4)
            .timeout(Duration::from_secs(1))
            .clock(clock.clone())
            .build_manual()
            .unwrap();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        assert!(acker.set_driver_waker(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        acker
            .init_with_timeout(0, 0b1, 0, Duration::from_millis(5))
            .unwrap();
        acker.init(1, 0b1, 1).unwrap();
        let first = acker.drive_once().unwrap();
        assert!(
            first.is_some_and(|sleep| sleep <= Duration::from_millis(7)),
            "{first:?}"
        );
        assert!(acker.ack(0, 0b1));
        clock.advance(Duration::from_millis(8));
        let other = acker.clone();
        let t = thread::spawn(move || {
            other
                .init_with_timeout(2, 0b1, 2, Duration::from_millis(10))
                .unwrap()
        });
        let sleep = acker.drive_once().unwrap();
        t.join().unwrap();
        let woken = calls.load(std::sync::atomic::Ordering::SeqCst) > 0;
        assert!(
            woken || sleep.is_some_and(|sleep| sleep <= Duration::from_millis(12)),
            "the driver would sleep {sleep:?} past tree 2's deadline, and no one woke it"
        );
    });
}
