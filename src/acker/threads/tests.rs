//! The hand-off lists' unit tests: pushes, filters, hand-offs, takeovers and grace periods.

use super::*;

fn entry(slot: u32) -> Entry {
    Entry { slot, tag: slot }
}

/// An entry's times when it is due at the reaper by its hand-off tick.
fn at(hand_off: Tick) -> Due {
    Due {
        hand_off,
        by: hand_off,
    }
}

#[test]
fn only_entries_that_outlive_their_tick_reach_the_reaper() {
    let threads = Threads::new(Fences::detect());
    for slot in 0..10 {
        assert_eq!(
            threads.push(entry(slot), at(5), 5, |_: &Entry| true),
            Pushed::Filed
        );
    }
    let mut due = Vec::new();
    threads.collect(5, false, &mut due);
    assert!(
        due.is_empty(),
        "a hand-off list of the current tick is left to its owner"
    );
    // Tick 6: the owner hands off the survivors (the even slots) at its next push.
    threads.push(entry(10), at(6), 6, |e: &Entry| e.slot % 2 == 0);
    threads.collect(6, false, &mut due);
    due.sort_by_key(|e| e.slot);
    assert_eq!(due, (0..10).step_by(2).map(entry).collect::<Vec<_>>());
    // Slot 10 was filed at tick 6; the owner goes quiet, and the reaper takes it once
    // a whole tick has passed without a push, at 8.
    due.clear();
    threads.collect(6, false, &mut due);
    threads.collect(7, false, &mut due);
    assert!(due.is_empty());
    threads.collect(8, false, &mut due);
    assert_eq!(due, vec![entry(10)]);
}

#[test]
fn the_owner_keeps_entries_until_their_hand_off_tick_and_drops_the_dead() {
    let threads = Threads::new(Fences::detect());
    let live = std::cell::Cell::new(u32::MAX); // slots below this are live
    let is_live = |e: &Entry| e.slot < live.get();
    // Slot 1 is due at the reaper by tick 10, slot 2 by tick 20.
    threads.push(entry(1), at(10), 5, is_live);
    threads.push(entry(2), at(20), 5, is_live);
    let mut due = Vec::new();
    for now in 6..10 {
        // Keeps the hand-off list busy.
        threads.push(entry(100 + now), at(now + 100), now, is_live);
        threads.collect(now, false, &mut due);
    }
    assert!(
        due.is_empty(),
        "handed off before their hand-off ticks: {due:?}"
    );
    threads.push(entry(200), at(200), 10, is_live);
    threads.collect(10, false, &mut due);
    assert_eq!(due, vec![entry(1)]);
    // Slot 2 completes before its hand-off tick: the reaper never sees it.
    live.set(2);
    due.clear();
    threads.push(entry(0), at(300), 20, is_live);
    threads.collect(20, false, &mut due);
    assert_eq!(due, vec![], "a dead entry reached the reaper");
}

#[test]
fn manual_collection_takes_the_current_tick_too() {
    let threads = Threads::new(Fences::detect());
    threads.push(entry(1), at(5), 5, |_: &Entry| true);
    let mut due = Vec::new();
    threads.collect(5, true, &mut due);
    assert_eq!(due, vec![entry(1)]);
    // The owner goes on with an empty hand-off list after the takeover.
    threads.push(entry(2), at(5), 5, |_: &Entry| true);
    due.clear();
    threads.collect(5, true, &mut due);
    assert_eq!(due, vec![entry(2)]);
}

/// What a filter asked about which slots, in order: `(prefetch, slot)`.
struct Looks(std::cell::RefCell<Vec<(bool, u32)>>);

impl Liveness for &Looks {
    fn live(&mut self, entry: &Entry) -> bool {
        self.0.borrow_mut().push((false, entry.slot));
        true
    }

    fn prefetch(&self, entry: &Entry) {
        self.0.borrow_mut().push((true, entry.slot));
    }
}

#[test]
fn the_filter_asks_for_aged_entries_lines_ahead_of_its_looks() {
    let threads = Threads::new(Fences::detect());
    let record = threads.register();
    let looks = Looks(std::cell::RefCell::new(Vec::new()));
    let aged = 3 * LOOK_AHEAD as u32;
    for slot in 0..aged {
        threads.push_to(&record, entry(slot), at(10), 1, &looks);
    }
    // Tick 2: the first filter keeps them (fresh lines are in cache: no look-ahead).
    threads.push_to(&record, entry(100), at(50), 2, &looks);
    let first = std::mem::take(&mut *looks.0.borrow_mut());
    assert_eq!(first, (0..aged).map(|s| (false, s)).collect::<Vec<_>>());
    // Tick 10: their hand-off; each is asked for once, before its look and while the
    // entry `LOOK_AHEAD` before it is looked at.
    threads.push_to(&record, entry(101), at(50), 10, &looks);
    let events = std::mem::take(&mut *looks.0.borrow_mut());
    let at = |prefetch: bool, slot: u32| {
        let mut at = events
            .iter()
            .enumerate()
            .filter(|(_, &e)| e == (prefetch, slot));
        let first = at.next().map(|(i, _)| i);
        assert!(at.next().is_none(), "{slot} asked about twice: {events:?}");
        first.unwrap_or_else(|| panic!("{slot} not asked about: {events:?}"))
    };
    for slot in 0..aged {
        assert!(at(true, slot) < at(false, slot), "{events:?}");
        // Not sooner than the look at the entry before that one.
        if let Some(looked) = slot.checked_sub(LOOK_AHEAD as u32) {
            assert!(at(true, slot) < at(false, looked), "{events:?}");
            if let Some(earlier) = looked.checked_sub(1) {
                assert!(at(true, slot) > at(false, earlier), "{events:?}");
            }
        }
    }
    let mut due = Vec::new();
    threads.collect(11, false, &mut due);
    assert_eq!(due, (0..aged).map(entry).collect::<Vec<_>>(), "handed off");
}

#[test]
fn a_pinned_owner_keeps_the_reaper_out_and_a_taken_hand_off_list_keeps_the_owner_out() {
    let threads = Threads::new(Fences::detect());
    let record = threads.register();
    threads.push_to(&record, entry(1), at(5), 5, |_: &Entry| true);
    // The owner is inside (as if preempted mid-push): the reaper leaves the hand-off list.
    record.pin.store(true, Ordering::SeqCst);
    let mut due = Vec::new();
    threads.collect(7, false, &mut due);
    assert!(due.is_empty());
    assert!(!record.taken.load(Ordering::SeqCst), "the reaper let go");
    record.pin.store(false, Ordering::SeqCst);
    // The reaper is inside: the owner's push goes to the inbox instead.
    record.taken.store(true, Ordering::SeqCst);
    threads.push_to(&record, entry(2), at(6), 6, |_: &Entry| true);
    record.taken.store(false, Ordering::SeqCst);
    threads.collect(7, false, &mut due);
    assert_eq!(due, vec![entry(2), entry(1)]);
}

#[test]
fn the_first_entry_after_idle_wakes_the_reaper_and_an_idle_reaper_sees_waiting_entries() {
    let threads = Threads::new(Fences::detect());
    assert_eq!(threads.park_check(1), None, "nothing waits");
    assert_eq!(
        threads.push(entry(1), at(5), 1, |_: &Entry| true),
        Pushed::WakeReaper { by: 5 }
    );
    threads.unidle();
    assert_eq!(
        threads.push(entry(2), at(3), 1, |_: &Entry| true),
        Pushed::Filed,
        "the reaper is awake"
    );
    assert_eq!(
        threads.park_check(1),
        Some(3),
        "entries wait: sleep until 3 at most"
    );
    assert!(threads.idle.load(Ordering::SeqCst), "not due yet: idle");
    assert_eq!(threads.park_check(3), Some(3));
    assert!(!threads.idle.load(Ordering::SeqCst), "due now: awake");
}

#[test]
fn only_a_push_or_hand_off_that_brings_the_reapers_tick_nearer_checks_whether_it_is_idle() {
    let threads = Threads::new(Fences::detect());
    let record = threads.register();
    let due = |hand_off: Tick, by: Tick| Due { hand_off, by };
    let live = |_: &Entry| true;
    assert_eq!(threads.park_check(1), None);
    // Idle from here on. The first entry: the list's earliest tick is its `by`.
    let first = threads.push_to(&record, entry(1), due(10, 40), 1, live);
    assert_eq!(first, Pushed::WakeReaper { by: 40 });
    // Due later than the list's earliest (one timeout, in order): no check.
    let later = threads.push_to(&record, entry(2), due(10, 41), 1, live);
    assert_eq!(later, Pushed::Filed);
    // A shorter timeout of its own: earlier than the list's.
    let sooner = threads.push_to(&record, entry(3), due(4, 4), 1, live);
    assert_eq!(sooner, Pushed::WakeReaper { by: 4 });
    assert_eq!(threads.earliest_due(), Some(4));
    // Tick 2, the first filter: entry 3, due before the aged ones filed before it, goes to
    // the empty inbox at once, which the reaper must read by 4; the others age.
    let handed = threads.push_to(&record, entry(4), due(20, 50), 2, live);
    assert_eq!(handed, Pushed::WakeReaper { by: 4 });
    assert_eq!(threads.earliest_due(), Some(4));
    let mut got = Vec::new();
    threads.collect(2, false, &mut got);
    assert_eq!(got, vec![entry(3)]);
    assert_eq!(
        threads.earliest_due(),
        Some(40),
        "the list's, once the inbox is empty"
    );
    // Tick 10: entries 1 and 2 handed off; 4 and 5 stay (by 50 and 60).
    let handed = threads.push_to(&record, entry(5), due(30, 60), 10, live);
    assert_eq!(handed, Pushed::WakeReaper { by: 40 });
    got.clear();
    threads.collect(10, false, &mut got);
    assert_eq!(got, vec![entry(1), entry(2)]);
    assert_eq!(threads.earliest_due(), Some(50));
}

#[test]
fn the_lists_earliest_tick_follows_its_entries_whatever_their_order() {
    let threads = Threads::new(Fences::detect());
    let record = threads.register();
    let live = |_: &Entry| true;
    // In hand-off order, with timeouts of their own: the earliest `by` is not the first's.
    let times = [(10, 90), (11, 30), (12, 60), (13, 20), (14, 70)];
    for (slot, &(hand_off, by)) in times.iter().enumerate() {
        threads.push_to(&record, entry(slot as u32), Due { hand_off, by }, 1, live);
    }
    assert_eq!(threads.earliest_due(), Some(20), "fresh");
    threads.push_to(
        &record,
        entry(9),
        Due {
            hand_off: 99,
            by: 99,
        },
        2,
        live,
    );
    assert_eq!(threads.earliest_due(), Some(20), "aged");
    let mut got = Vec::new();
    // Each tick hands the aged entries due by then to the inbox (collected at once): the
    // list's earliest is then that of those left.
    for (now, earliest) in [(11, 20), (12, 20), (13, 70), (14, 99)] {
        threads.push_to(
            &record,
            entry(100 + now),
            Due {
                hand_off: 99,
                by: 99,
            },
            now,
            live,
        );
        threads.collect(now, false, &mut got);
        assert_eq!(threads.earliest_due(), Some(earliest), "at {now}");
    }
    assert_eq!(got.len(), times.len());
}

#[test]
fn without_the_barrier_no_grace_ends_no_hand_off_list_is_taken_and_shutdown_waits() {
    for fences in [Fences::Failing, Fences::Symmetric] {
        let works = fences == Fences::Symmetric;
        let threads = Threads::new(fences);
        threads.push(entry(1), at(5), 5, |_: &Entry| true);
        // Nobody is inside an operation: only the barrier can prove it.
        let mut grace = threads.grace();
        assert_eq!(threads.grace_over(&mut grace), works);
        assert_eq!(threads.grace_over(&mut grace), works);
        let mut due = Vec::new();
        threads.collect(9, true, &mut due);
        assert_eq!(due.len(), usize::from(works), "taken over: {fences:?}");
        assert_eq!(threads.close(false), works);
        let failures = threads.barrier_failures();
        assert!(
            if works { failures == 0 } else { failures >= 4 },
            "{failures}"
        );
    }
}

#[test]
fn a_burst_taken_over_or_handed_off_leaves_no_room_behind() {
    let threads = Threads::new(Fences::detect());
    let record = threads.register();
    let room = |record: &Record| {
        // Safety: no owner or reaper runs on this hand-off list now (this thread is both).
        record
            .entries
            .with_mut(|e| unsafe { (*e).fresh.capacity() + (*e).aged.capacity() })
    };
    // Above twice the room kept, so that what is kept shows (Miri: small and slow).
    let burst = if cfg!(miri) { 5_000 } else { 100_000u32 };
    for slot in 0..burst {
        threads.push_to(&record, entry(slot), at(50), 5, |_: &Entry| true);
    }
    assert!(room(&record) >= burst as usize);
    let mut due = Vec::new();
    threads.collect(5, true, &mut due); // taken over
    assert_eq!(due.len(), burst as usize);
    assert!(room(&record) <= 2 * KEEP_ROOM, "{} kept", room(&record));
    // A burst that ages in the hand-off list and goes to the reaper at its hand-off tick.
    for slot in 0..burst {
        threads.push_to(&record, entry(slot), at(7), 6, |_: &Entry| true);
    }
    threads.push_to(&record, entry(0), at(100), 7, |_: &Entry| true); // files the burst as aged
    threads.push_to(&record, entry(1), at(100), 8, |_: &Entry| true); // hands it off
    assert!(room(&record) <= 2 * KEEP_ROOM, "{} kept", room(&record));
    due.clear();
    threads.collect(8, false, &mut due);
    assert_eq!(due.len(), burst as usize);
}

#[test]
fn a_finished_thread_strands_nothing_and_its_hand_off_list_is_dropped() {
    let threads = Arc::new(Threads::new(Fences::detect()));
    let other = Arc::clone(&threads);
    std::thread::spawn(move || {
        other.push(entry(7), at(3), 3, |_: &Entry| true);
    })
    .join()
    .unwrap();
    assert_eq!(threads.records(), 1);
    let mut due = Vec::new();
    threads.collect(5, false, &mut due);
    assert_eq!(due, vec![entry(7)]);
    assert_eq!(threads.records(), 0, "abandoned and empty: dropped");
}

#[test]
fn owners_and_a_reaper_lose_no_entry_and_duplicate_none() {
    // Four owners push distinct entries over advancing ticks while a reaper collects
    // without `everything`; at the end everything is collected exactly once.
    let threads = Arc::new(Threads::new(Fences::detect()));
    let tick = Arc::new(AtomicU32::new(1));
    let per_thread = if cfg!(miri) { 200 } else { 50_000 };
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = {
        let (threads, tick, stop) = (Arc::clone(&threads), Arc::clone(&tick), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut got = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let now = tick.fetch_add(1, Ordering::SeqCst) + 1;
                threads.collect(now, false, &mut got);
                std::thread::yield_now();
            }
            got
        })
    };
    let owners: Vec<_> = (0..4u32)
        .map(|t| {
            let (threads, tick) = (Arc::clone(&threads), Arc::clone(&tick));
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let now = tick.load(Ordering::SeqCst);
                    threads.push(entry(t * per_thread + i), at(now), now, |_: &Entry| true);
                }
            })
        })
        .collect();
    owners.into_iter().for_each(|o| o.join().unwrap());
    stop.store(true, Ordering::SeqCst);
    let mut got = reaper.join().unwrap();
    threads.collect(u32::MAX, true, &mut got);
    got.sort_by_key(|e| e.slot);
    assert_eq!(got.len(), 4 * per_thread as usize);
    assert!(got.iter().enumerate().all(|(i, e)| e.slot == i as u32));
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

/// With a settling period, a new entry's first look waits for the end of the period after
/// its own; one that must be with the reaper sooner (a timeout of its own) is handed off by
/// then, and a quiet owner's settling entries are taken over with the rest.
#[test]
fn settling_entries_are_looked_at_after_a_period_unless_due_sooner() {
    let threads = Threads::settling(Fences::detect(), 4);
    let looked = std::cell::RefCell::new(Vec::new());
    let live = std::cell::Cell::new(u32::MAX); // slots below this are live
    let is_live = |e: &Entry| {
        looked.borrow_mut().push(e.slot);
        e.slot < live.get()
    };
    let mut due = Vec::new();
    // Tick 10: entry 1 is due at the reaper by tick 12; entries 2 and 3 by 100.
    threads.push(entry(1), at(12), 10, is_live);
    threads.push(entry(2), at(100), 10, is_live);
    threads.push(entry(3), at(100), 10, is_live);
    // Tick 11: their period ends; they settle, unlooked at.
    threads.push(entry(10), at(100), 11, is_live);
    assert!(
        looked.borrow().is_empty(),
        "looked at a tick old: {looked:?}"
    );
    // Tick 12: entry 1 must be with the reaper: handed off, the others left.
    threads.push(entry(11), at(100), 12, is_live);
    assert_eq!(*looked.borrow(), vec![1]);
    threads.collect(12, false, &mut due);
    assert_eq!(due, vec![entry(1)]);
    // Entry 3 completes; tick 15 ends the next period: the first look at 2 and 3 (3 is
    // dropped), and entries 10 and 11 settle.
    live.set(3);
    looked.borrow_mut().clear();
    threads.push(entry(12), at(100), 15, is_live);
    assert_eq!(*looked.borrow(), vec![2, 3]);
    // The owner goes quiet: the reaper takes what is left, aged, settling and fresh.
    due.clear();
    threads.collect(17, false, &mut due);
    due.sort_by_key(|e| e.slot);
    assert_eq!(due, vec![entry(2), entry(10), entry(11), entry(12)]);
}
