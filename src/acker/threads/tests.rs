//! The records' unit tests: the reaper's wake-up, grace periods, pauses, and records of
//! ended threads.

use super::*;

#[test]
fn the_first_registration_wakes_an_idle_reaper_and_an_idle_reaper_sees_the_summary() {
    let threads = Threads::new(Fences::detect());
    assert_eq!(threads.park_check(1), None, "nothing registered");
    assert_eq!(threads.registered(5), Registered::WakeReaper { by: 5 });
    threads.unidle();
    assert_eq!(
        threads.registered(3),
        Registered::Quiet,
        "earlier, but the reaper is awake"
    );
    assert_eq!(threads.park_check(1), Some(3), "sleep until 3 at most");
    assert!(threads.idle.load(Ordering::SeqCst), "not due yet: idle");
    assert_eq!(threads.park_check(3), Some(3));
    assert!(!threads.idle.load(Ordering::SeqCst), "due now: awake");
}

#[test]
fn only_a_registration_that_brings_the_reapers_tick_nearer_checks_whether_it_is_idle() {
    let threads = Threads::new(Fences::detect());
    assert_eq!(threads.park_check(1), None);
    // Idle from here on. The first registration since a scan sets the summary.
    assert_eq!(threads.registered(40), Registered::WakeReaper { by: 40 });
    // Due later (one timeout, in order): no check.
    assert_eq!(threads.registered(41), Registered::Quiet);
    assert_eq!(threads.registered(40), Registered::Quiet);
    // A shorter timeout of its own: earlier than the summary's.
    assert_eq!(threads.registered(4), Registered::WakeReaper { by: 4 });
    assert_eq!(threads.earliest_due(), Some(4));
    // Across the wrap: u32::MAX is before 2.
    assert_eq!(threads.take_dirty(), Some(4));
    assert_eq!(threads.earliest_due(), None, "the scan cleared it");
    assert_eq!(threads.registered(2), Registered::WakeReaper { by: 2 });
    assert_eq!(
        threads.registered(u32::MAX),
        Registered::WakeReaper { by: u32::MAX }
    );
    assert_eq!(threads.registered(1), Registered::Quiet);
    assert_eq!(threads.earliest_due(), Some(u32::MAX));
}

#[test]
fn a_re_anchoring_makes_a_set_summary_due_at_its_tick_and_leaves_a_clear_one() {
    let threads = Threads::new(Fences::detect());
    threads.rebase_dirty(100);
    assert_eq!(threads.earliest_due(), None);
    threads.registered(7_000);
    threads.rebase_dirty(100);
    assert_eq!(threads.earliest_due(), Some(100));
}

#[test]
fn without_the_barrier_no_grace_ends_and_shutdown_waits() {
    for fences in [Fences::Failing, Fences::Symmetric] {
        let works = fences == Fences::Symmetric;
        let threads = Threads::new(fences);
        // Nobody is inside an operation: only the barrier can prove it.
        let mut grace = threads.grace();
        assert_eq!(threads.grace_over(&mut grace), works);
        assert_eq!(threads.grace_over(&mut grace), works);
        assert_eq!(threads.close(false), works);
        let failures = threads.barrier_failures();
        assert!(
            if works { failures == 0 } else { failures >= 3 },
            "{failures}"
        );
    }
}

#[test]
fn an_ended_threads_record_goes_once_its_hand_is_reclaimed_and_its_counts_stay() {
    let threads = Arc::new(Threads::new(Fences::detect()));
    let other = Arc::clone(&threads);
    std::thread::spawn(move || {
        let record = other.own().expect("a record");
        record.hand.store(3, Ordering::SeqCst);
        other.tally().add(|c| &c.acked, 2);
    })
    .join()
    .unwrap();
    assert_eq!(threads.records(), 1);
    threads.prune_ended();
    assert_eq!(threads.records(), 1, "its hand still holds credits");
    assert_eq!(threads.reclaim_hands(), 3);
    threads.prune_ended();
    assert_eq!(threads.records(), 0, "abandoned, its hand empty: dropped");
    let mut acked = 0;
    threads.each_counters(&mut |c| acked += c.acked.load(Ordering::SeqCst));
    assert_eq!(acked, 2, "its counts folded into the shared set");
}

/// Nested pauses: an operation paused for its callback, which calls the acker, whose call
/// pauses for a callback of its own. Once the nested pause and the nested call have ended,
/// the thread is paused in the outer callback again, so a re-anchoring begun on another
/// thread finishes (it waited for this thread forever when a pause's end cleared `paused`
/// instead of restoring the outer pause's depth).
#[test]
fn a_nested_pause_leaves_the_outer_callback_paused() {
    let threads = Arc::new(Threads::new(Fences::detect()));
    let record = threads.register();
    let outer = threads.enter_with(&record);
    let outer_paused = threads.pause_with(&record);
    let nested = threads.enter_with(&record);
    drop(threads.pause_with(&record));
    drop(nested);
    let (began, began_moving) = std::sync::mpsc::channel();
    let reanchorer = {
        let threads = Arc::clone(&threads);
        std::thread::spawn(move || {
            let excluded = threads.begin_moving();
            let _ = began.send(excluded);
            threads.end_moving();
        })
    };
    // Bounded: a re-anchorer that waits for this thread is released below when this
    // thread's outer pause and operation end, so the test fails instead of hanging.
    let verdict = began_moving.recv_timeout(std::time::Duration::from_secs(10));
    drop(outer_paused);
    drop(outer);
    reanchorer.join().unwrap();
    assert_eq!(
        verdict,
        Ok(true),
        "the re-anchorer waited for a thread paused in its outer callback"
    );
}

/// A grace period ends once every thread that was inside an operation when it began has
/// left that outermost operation: not when a call nested in it returns (a callback's call
/// into the acker), and at once when the thread has since begun another outermost one (a
/// thread that is always busy still lets it end).
#[test]
fn a_grace_period_waits_for_the_outermost_operation_not_a_nested_one() {
    let threads = Threads::new(Fences::Symmetric);
    let record = threads.register();
    let outer = threads.enter_with(&record);
    let mut grace = threads.grace();
    assert!(
        !threads.grace_over(&mut grace),
        "a thread inside an operation"
    );
    drop(threads.enter_with(&record));
    assert!(
        !threads.grace_over(&mut grace),
        "ended by a nested operation while the outer one goes on"
    );
    drop(outer);
    assert!(threads.grace_over(&mut grace), "the operation ended");

    let first = threads.enter_with(&record);
    let mut grace = threads.grace();
    drop(first);
    let _second = threads.enter_with(&record);
    assert!(
        threads.grace_over(&mut grace),
        "the thread is inside another outermost operation, begun after the grace period"
    );
}
