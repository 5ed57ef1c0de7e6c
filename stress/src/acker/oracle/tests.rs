use super::*;

const T: u64 = 500_000_000;

fn record(flags: u32, outcome: u32, completed_after: u64) -> Record {
    let first = 1_000_000_000;
    Record {
        root: 7,
        flags,
        completions: 1,
        outcome,
        first_before: first,
        init_after: first + 1000,
        last_after: first + 5000,
        deadline: first + T,
        completed_at: first + completed_after,
        elapsed: completed_after - 100,
        fail_before: u64::MAX,
        fail_after: u64::MAX,
        ..Record::default()
    }
}

#[test]
fn a_slot_is_about_half_a_kibibyte() {
    // --in-flight's limit in cli.rs assumes so.
    assert!(
        std::mem::size_of::<Slot>() <= 512,
        "{}",
        std::mem::size_of::<Slot>()
    );
}

#[test]
fn a_reset_begun_after_the_completion_does_not_move_the_deadline() {
    let (oracle, _free, _reports) = Oracle::new(1, 4, T, false);
    let first = oracle.begin(0, 7, 1, 1, 0, 1);
    // A reset while the tree is pending moves the deadline.
    oracle.reset(0, first + 10, true);
    let moved = first + 10 + T;
    assert_eq!(oracle.slot(0).deadline.load(Ordering::SeqCst), moved);
    oracle.on_complete(Completion {
        root: 7,
        payload: 0,
        outcome: Outcome::TimedOut,
        elapsed: std::time::Duration::from_millis(500),
    });
    // A late ack made an orphan for the root, and a reset after the completion finds
    // it: that says nothing about the tree.
    let late = oracle.now() + 1;
    oracle.reset(0, late, true);
    assert_eq!(oracle.slot(0).deadline.load(Ordering::SeqCst), moved);
}

/// A tree of `oracle`'s slot 0 timed out with `elapsed` (from its first reading).
fn timed_out(oracle: &Oracle, elapsed: u64) {
    oracle.on_complete(Completion {
        root: 7,
        payload: 0,
        outcome: Outcome::TimedOut,
        elapsed: std::time::Duration::from_nanos(elapsed),
    });
}

#[test]
fn a_reset_that_may_have_found_a_late_acks_orphan_does_not_bind() {
    // The CI run's case: the reaper decided the timeout (its clock read at
    // `first + elapsed`), a late ack made an orphan, a reset found it and returned true,
    // and only then was the completion delivered. Timeout 2 ticks: every reset is late.
    let t = 2 * ELAPSED_TICK_NS;
    let (oracle, _free, _reports) = Oracle::new(1, 4, t, false);
    let first = oracle.begin(0, 7, 1, 1, 0, 1);
    oracle.calling(0);
    let ack = oracle.message_sent(0, Event::Ack, 1);
    let called = oracle.now();
    oracle.reset(0, called, true);
    // Decided at `first + elapsed - 1 tick` at the earliest: before the ack returned.
    timed_out(&oracle, ack - first + ELAPSED_TICK_NS);
    let r = oracle.snapshot(0);
    assert_eq!(r.deadline, first + t);
    assert_eq!(r.flags & RESET, 0);
}

#[test]
fn a_reset_binds_when_no_message_came_after_the_earliest_decision() {
    let t = 2 * ELAPSED_TICK_NS;
    let (oracle, _free, _reports) = Oracle::new(1, 4, t, false);
    let first = oracle.begin(0, 7, 1, 1, 0, 1);
    oracle.calling(0);
    oracle.message_sent(0, Event::Ack, 1);
    let called = oracle.now();
    oracle.reset(0, called, true);
    // Decided well after the reset: the reset found the tree, and binds.
    timed_out(&oracle, oracle.now() - first + 3 * ELAPSED_TICK_NS);
    let r = oracle.snapshot(0);
    assert_eq!(r.deadline, called + t);
    assert_ne!(r.flags & RESET, 0);
    // The completion came before the moved deadline: a violation.
    let p = verify(&r, t);
    assert!(
        p.iter().any(|p| p.contains("as moved by reset_timeout")),
        "{p:?}"
    );
}

#[test]
fn a_reset_during_a_message_may_have_found_its_orphan() {
    let t = 2 * ELAPSED_TICK_NS;
    let (oracle, _free, _reports) = Oracle::new(1, 4, t, false);
    let first = oracle.begin(0, 7, 1, 1, 0, 1);
    oracle.calling(0); // an ack under way, returning after the reset
    let called = oracle.now();
    oracle.reset(0, called, true);
    oracle.message_sent(0, Event::Ack, 1);
    timed_out(&oracle, called - first + ELAPSED_TICK_NS);
    assert_eq!(oracle.snapshot(0).deadline, first + t);
}

#[test]
fn an_early_reset_binds_at_once_and_a_later_one_too_when_not_excused() {
    let (oracle, _free, _reports) = Oracle::new(1, 4, T, false);
    let first = oracle.begin(0, 7, 1, 1, 0, 1);
    // Long before the base deadline: binds whatever the completion says.
    oracle.calling(0);
    oracle.message_sent(0, Event::Ack, 1);
    oracle.reset(0, first + 10, true);
    assert_eq!(
        oracle.slot(0).deadline.load(Ordering::SeqCst),
        first + 10 + T
    );
    assert_eq!(oracle.slot(0).late_resets_len.load(Ordering::SeqCst), 0);
    // A late reset with no completion yet (a stuck tree) binds too.
    let (d, raised) = binding_deadline(first + T, &[(first + T, first + T)], None, T);
    assert_eq!((d, raised), (first + 2 * T, true));
    // ... and one whose possible orphan came after the earliest decision does not.
    let decided = decided_after(first, 3, T);
    assert_eq!(decided, Some(first + T - 2 * ELAPSED_TICK_NS));
    let excused = (first + T, first + T);
    assert_eq!(
        binding_deadline(first + T, &[excused], decided, T),
        (first + T, false)
    );
    // Other outcomes than TimedOut: nothing to excuse.
    assert_eq!(decided_after(first, 1, T), None);
}

#[test]
fn clean_acked_tree_passes() {
    assert!(verify(&record(0, 1, 10_000), T).is_empty());
}

#[test]
fn elapsed_may_exceed_the_measured_time_by_one_tick_only() {
    let mut r = record(0, 1, 10_000);
    r.elapsed = 10_000 + ELAPSED_TICK_NS / 2;
    assert!(verify(&r, T).is_empty());
    r.elapsed = 10_000 + 2 * ELAPSED_TICK_NS;
    let p = verify(&r, T);
    assert!(p.iter().any(|p| p.contains("is longer than")), "{p:?}");
}

#[test]
fn acked_with_a_dropped_ack_is_a_violation() {
    let p = verify(&record(DROPPED, 1, 10_000), T);
    assert_eq!(p.len(), 1, "{p:?}");
}

#[test]
fn early_timeout_is_a_violation() {
    let p = verify(&record(DROPPED, 3, T - 1_000_000), T);
    assert!(p.iter().any(|p| p.contains("before its deadline")), "{p:?}");
    assert!(verify(&record(DROPPED, 3, T + 1_000_000), T).is_empty());
}

#[test]
fn clean_tree_timing_out_with_all_messages_in_time_is_a_violation() {
    let p = verify(&record(0, 3, T + 1_000_000), T);
    assert!(p.iter().any(|p| p.contains("every ack")), "{p:?}");
    let mut late = record(0, 3, T + 1_000_000);
    late.last_after = late.first_before + T + 10;
    assert!(verify(&late, T).is_empty());
}

#[test]
fn failed_needs_a_fail() {
    assert!(!verify(&record(0, 2, 10_000), T).is_empty());
    let mut r = record(FAIL_SENT, 2, 10_000);
    r.fail_before = r.first_before + 2000;
    r.fail_after = r.first_before + 3000;
    assert!(verify(&r, T).is_empty());
}

#[test]
fn double_completion_and_none_are_violations() {
    let mut r = record(0, 1, 10_000);
    r.completions = 2;
    assert!(!verify(&r, T).is_empty());
    r.completions = 0;
    assert!(!verify(&r, T).is_empty());
}
