//! Loom models of the Acker's table (`src/acker/table/`): one 128-bit
//! word per slot (a linearizable lock-based stand-in under loom), twin claims merged
//! lock-free, slots reused without a grace period.
//!
//! Each model asserts exactly-once: every initialized tree is completed by one call, with
//! the outcome its messages call for, and the table ends with no entry for it. The table is
//! tiny (two groups of two slots, one group of overflow under loom), so full groups,
//! overflow and reuse are a few steps away.
#![cfg(loom)]

use ackwheel::table::{Applied, Completed, Effects, Expiry, Key, Refused, Table, KEY_SHIFT};
use ackwheel::Outcome;
use loom::sync::Arc;
use loom::thread;
use loom_tests::sized;

/// Groups in every model's table.
const GROUPS: usize = 2;

/// A key whose home is group `home`.
fn key(home: usize, low: u64) -> Key {
    let shift = 64 - KEY_SHIFT - GROUPS.trailing_zeros();
    Key::new((home as u64) << shift | low)
}

fn new_table() -> Arc<Table<u32>> {
    Arc::new(Table::new(GROUPS))
}

/// Takes the payload of a completion the call claimed and frees the slot.
fn finish(table: &Table<u32>, mut effects: Effects) -> Option<(u32, Outcome)> {
    let Completed {
        slot, key, outcome, ..
    } = effects.take()?;
    assert!(effects.is_none(), "more than one completion in one call");
    // Safety: the call claimed this completion; its payload is taken and its slot freed
    // once, here.
    let payload = unsafe { table.take(slot) };
    // Safety: the same completion, freed once, after its take.
    unsafe { table.free(slot, key) };
    Some((payload, outcome))
}

fn ack(table: &Table<u32>, key: Key, xor: u64) -> Option<(u32, Outcome)> {
    let mut effects = Effects::default();
    assert_ne!(table.ack(key, xor, &mut effects), Applied::Full);
    finish(table, effects)
}

fn init(table: &Table<u32>, key: Key, xor: u64, payload: u32) -> Option<(u32, Outcome)> {
    let mut effects = Effects::default();
    table.init(key, xor, payload, &mut effects).unwrap();
    finish(table, effects)
}

/// An init of `key` that reports `Ok(true)` when it joined and completed nothing, or how it
/// was refused.
fn init_alone(table: &Table<u32>, key: Key, xor: u64, payload: u32) -> Result<bool, Refused<u32>> {
    let mut effects = Effects::default();
    table
        .init(key, xor, payload, &mut effects)
        .map(|()| effects.is_none())
}

/// Of inits of one root, each `(payload, result)`: exactly one joined and the others were
/// refused as duplicates. The payload of the one that joined.
fn the_one_that_joined(results: &[(u32, Result<bool, Refused<u32>>)]) -> u32 {
    let joined: Vec<u32> = results
        .iter()
        .filter(|(_, r)| *r == Ok(true))
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(joined.len(), 1, "not exactly one init joined: {results:?}");
    for (payload, result) in results {
        if *payload != joined[0] {
            assert_eq!(*result, Err(Refused::Duplicate(*payload)), "{results:?}");
        }
    }
    joined[0]
}

fn bounded(preemptions: usize) -> loom::model::Builder {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(preemptions);
    model
}

/// The last two acks race: exactly one completes the tree.
#[test]
fn roots_ack_vs_ack_completes_once() {
    loom::model(|| {
        let table = new_table();
        let k = key(0, 1);
        assert_eq!(init(&table, k, 0b11, 7), None);
        let other = Arc::clone(&table);
        let t = thread::spawn(move || ack(&other, k, 0b01));
        let mine = ack(&table, k, 0b10);
        let theirs = t.join().unwrap();
        let all: Vec<_> = mine.into_iter().chain(theirs).collect();
        assert_eq!(all, [(7, Outcome::Acked)]);
        assert_eq!(table.find(k), None);
    });
}

/// The last ack races a fail: one completion, Acked or Failed.
#[test]
fn roots_ack_vs_fail_completes_once() {
    loom::model(|| {
        let table = new_table();
        let k = key(1, 1);
        init(&table, k, 0b1, 7);
        let other = Arc::clone(&table);
        let t = thread::spawn(move || {
            let mut effects = Effects::default();
            other.fail(k, &mut effects);
            finish(&other, effects)
        });
        let acked = ack(&table, k, 0b1);
        let failed = t.join().unwrap();
        // Whichever came second is held as an orphan of a completed tree.
        let late = table.find(k).map(|(_, w)| (w.value(), w.state().failed()));
        match (acked, failed) {
            (Some((7, Outcome::Acked)), None) => assert_eq!(late, Some((0, true))),
            (None, Some((7, Outcome::Failed))) => assert_eq!(late, Some((0b1, false))),
            other => panic!("not exactly one completion: {other:?}"),
        }
    });
}

/// A duplicated ack: both copies race init of a root nobody has seen (the race that gives
/// a false `Acked` when the state and the value are separate words). The value never
/// reaches 0 with init's XOR in it, so nothing completes, and the reaper times the tree
/// out. Bounded at 4 preemptions.
#[test]
fn roots_duplicated_ack_vs_init_never_completes() {
    bounded(4).check(|| {
        let table = new_table();
        let k = key(0, 1);
        let other = Arc::clone(&table);
        let t = thread::spawn(move || [ack(&other, k, 0b01), ack(&other, k, 0b01)]);
        assert_eq!(init(&table, k, 0b10, 7), None);
        assert_eq!(t.join().unwrap(), [None, None]);
        let (slot, word) = table.find(k).unwrap();
        assert_eq!(word.value(), 0b10);
        let mut effects = Effects::default();
        assert_eq!(
            table.expire(slot, k.tag(), 1, &mut effects),
            Expiry::TimedOut
        );
        assert_eq!(finish(&table, effects), Some((7, Outcome::TimedOut)));
    });
}

/// Init and an ack race on a new root (twin claims of one root, joined by init): the tree
/// completes once, on whichever call was last.
#[test]
fn roots_init_vs_ack_on_a_new_root_completes_once() {
    // Bounded: with slot reservations (`times.rs`) the unbounded model runs for hours.
    bounded(4).check(|| {
        let table = new_table();
        let k = key(0, 1);
        let other = Arc::clone(&table);
        let t = thread::spawn(move || ack(&other, k, 0b1));
        let mine = init(&table, k, 0b1, 7);
        let theirs = t.join().unwrap();
        let all: Vec<_> = mine.into_iter().chain(theirs).collect();
        assert_eq!(all, [(7, Outcome::Acked)]);
        assert_eq!(table.find(k), None);
    });
}

/// Twin claims: root `x` holds the first slot of `k`'s home group; one thread drops it (as
/// the reaper drops an orphan) and acks `k`, so its claim may land in the slot that the
/// other thread's claim, having seen `x` there, passed by. The twins merge: init then finds
/// one entry holding both acks and completes the tree once, Acked.
#[test]
fn roots_twin_claims_merge_and_complete_once() {
    bounded(3).check(|| {
        let table = new_table();
        let (x, k) = (key(0, 9), key(0, 1));
        ack(&table, x, 0b1);
        let other = Arc::clone(&table);
        let t = thread::spawn(move || {
            let (slot, _) = other.find(x).unwrap();
            let mut effects = Effects::default();
            assert_eq!(
                other.expire(slot, x.tag(), 1, &mut effects),
                Expiry::Dropped
            );
            ack(&other, k, 0b01)
        });
        let mine = ack(&table, k, 0b10);
        assert_eq!((mine, t.join().unwrap()), (None, None));
        assert_eq!(init(&table, k, 0b11, 7), Some((7, Outcome::Acked)));
        assert_eq!(table.find(k), None, "a twin was left behind");
    });
}

/// Two inits of one new root race: one joins, the other gets its payload back as a
/// duplicate; the tree completes once.
#[test]
fn roots_init_vs_init_joins_once() {
    // Bounded: with slot reservations (`times.rs`) the unbounded model runs for hours.
    bounded(4).check(|| {
        let table = new_table();
        let k = key(1, 1);
        let other = Arc::clone(&table);
        let t = thread::spawn(move || {
            let mut effects = Effects::default();
            other
                .init(k, 0b1, 8, &mut effects)
                .map(|()| effects.is_none())
        });
        let mut effects = Effects::default();
        let mine = table
            .init(k, 0b1, 7, &mut effects)
            .map(|()| effects.is_none());
        let theirs = t.join().unwrap();
        let (winner, refused) = match (mine, theirs) {
            (Ok(true), Err(Refused::Duplicate(8))) => (7, 8),
            (Err(Refused::Duplicate(7)), Ok(true)) => (8, 7),
            other => panic!("not one init and one duplicate: {other:?}"),
        };
        let _ = refused;
        assert_eq!(ack(&table, k, 0b1), Some((winner, Outcome::Acked)));
    });
}

/// Two inits of one new root in a twin window: each may claim the root JOINING, in
/// different slots (the other thread's claim lands in the slot this one passed). A claimer
/// searches after its claim, so at least one sees the other and unjoins: one init joins,
/// the other is refused as a duplicate, and the tree completes once. Bounded at 4, as the
/// other twin-window models.
#[test]
fn roots_init_vs_init_in_a_twin_window_joins_once() {
    inits_in_a_twin_window(false, &[7]);
}

/// Inits of one new root `k` (value 0b11), one on the other thread (payload 8) in a twin
/// window, and on this thread an ack of 0b10 if `ack_first`, then an init per payload of
/// `here`: exactly one init joins, the others are refused as duplicates, and the last ack
/// completes the tree once, Acked, leaving the table clear.
fn inits_in_a_twin_window(ack_first: bool, here: &'static [u32]) {
    bounded(4).check(move || {
        let table = new_table();
        let k = key(0, 1);
        let t = in_a_twin_window(&table, move |table| init_alone(table, k, 0b11, 8));
        let mut left = 0b11;
        if ack_first {
            assert_eq!(ack(&table, k, 0b10), None);
            left = 0b01;
        }
        let mut results: Vec<_> = here
            .iter()
            .map(|&p| (p, init_alone(&table, k, 0b11, p)))
            .collect();
        results.push((8, t.join().unwrap()));
        let winner = the_one_that_joined(&results);
        assert_eq!(ack(&table, k, left), Some((winner, Outcome::Acked)));
        assert!(table.is_clear(), "an entry was left behind");
    });
}

/// A late (duplicate) ack for root `k` races `k`'s completion, the freeing of its slot and
/// root `y` moving into that slot: the late ack never XORs into `y` (no grace period: the
/// 128-bit CAS expects `k`'s key). `y` then completes with exactly its own ack. Bounded to
/// 7 preemptions on CI (8 s; exhaustive, 212 s, with `ACKWHEEL_LOOM_FULL=1`: `sized`).
#[test]
fn roots_slot_reuse_vs_late_ack() {
    sized(loom::model::Builder::new(), 7).check(|| {
        let table = new_table();
        let (k, y) = (key(0, 1), key(0, 2));
        init(&table, k, 0b1, 7);
        let other = Arc::clone(&table);
        let t = thread::spawn(move || ack(&other, k, 0b1)); // the late copy, or the last ack
        let mine = ack(&table, k, 0b1);
        // `y` takes the first EMPTY slot, perhaps `k`'s, while the other copy is in flight.
        assert_eq!(init(&table, y, 0b100, 9), None);
        let theirs = t.join().unwrap();
        let all: Vec<_> = mine.into_iter().chain(theirs).collect();
        assert_eq!(all, [(7, Outcome::Acked)]);
        assert_eq!(table.find(y).map(|(_, w)| w.value()), Some(0b100));
        // The copy that came second is an orphan of `k` now.
        assert_eq!(table.find(k).map(|(_, w)| w.value()), Some(0b1));
        assert_eq!(ack(&table, y, 0b100), Some((9, Outcome::Acked)));
    });
}

/// A reset races the reaper's timeout of a LIVE tree: a reset that found the entry makes
/// the reaper's CAS fail (it must read the deadline again) unless the tree was already
/// timed out, in which case the reset finds no entry.
#[test]
fn roots_reset_vs_timeout_is_never_lost() {
    loom::model(|| {
        let table = new_table();
        let k = key(1, 3);
        init(&table, k, 0b1, 7);
        let (slot, _) = table.find(k).unwrap();
        let other = Arc::clone(&table);
        let t = thread::spawn(move || other.reset(k, 11));
        let mut effects = Effects::default();
        let expiry = table.expire(slot, k.tag(), 1, &mut effects);
        let timed_out = finish(&table, effects);
        let reset = t.join().unwrap();
        match (expiry, reset) {
            (Expiry::TimedOut, false) => assert_eq!(timed_out, Some((7, Outcome::TimedOut))),
            // The reset landed first: the reaper saw R and must look at the deadline again.
            // The reset landed first: the reaper cleared R, read the new deadline.
            (Expiry::NotDue(11), true) => assert_eq!(table.find(k).map(|(s, _)| s), Some(slot)),
            // The reaper cleared no R and timed out... only if the reset came after.
            other => panic!("a successful reset was lost: {other:?}"),
        }
    });
}

/// Root `x`'s orphan holds the first slot of `k`'s home group; the other thread drops it
/// (as the reaper drops an orphan) and then runs `then`, whose claim for `k` may land in
/// the slot that this thread's claim passed by: a twin window.
fn in_a_twin_window<R: Send + 'static>(
    table: &Arc<Table<u32>>,
    then: impl FnOnce(&Table<u32>) -> R + Send + 'static,
) -> thread::JoinHandle<R> {
    let x = key(0, 9);
    ack(table, x, 0b1);
    let other = Arc::clone(table);
    thread::spawn(move || {
        let (slot, _) = other.find(x).unwrap();
        let mut effects = Effects::default();
        assert_eq!(
            other.expire(slot, x.tag(), 1, &mut effects),
            Expiry::Dropped
        );
        then(&other)
    })
}

/// A second init of a root arrives while a twin of its entry exists: it must be refused
/// (joining the twin would make two joined entries and complete the root twice). Bounded
/// at 4, the fewest that reach the window (both inits here, the ack's claim between them).
#[test]
fn roots_duplicate_init_in_a_twin_window_is_refused() {
    bounded(4).check(|| {
        let table = new_table();
        let k = key(0, 1);
        let t = in_a_twin_window(&table, move |table| ack(table, k, 0b100));
        let mut first = Effects::default();
        assert_eq!(table.init(k, 0b1, 7, &mut first), Ok(()));
        let mut second = Effects::default();
        assert_eq!(
            table.init(k, 0b1, 8, &mut second),
            Err(Refused::Duplicate(8))
        );
        assert_eq!(t.join().unwrap(), None);
        assert!(first.is_none() && second.is_none());
        assert_eq!(ack(&table, k, 0b101), Some((7, Outcome::Acked)));
        assert!(table.is_clear(), "an entry was left behind");
    });
}

/// A reset of a LIVE tree while a twin of it exists: the reset's R must reach the entry
/// the reaper times out, whichever slot survives the merge.
#[test]
fn roots_reset_survives_a_twin_merge() {
    bounded(4).check(|| {
        let table = new_table();
        let k = key(0, 1);
        let t = in_a_twin_window(&table, move |table| ack(table, k, 0b100));
        let mut effects = Effects::default();
        table.init(k, 0b1, 7, &mut effects).unwrap();
        assert!(table.reset(k, 11), "the tree is live");
        assert_eq!(t.join().unwrap(), None);
        assert_reset_to_11(&table, k, 0b101);
    });
}

/// `k` has one entry, of value `value`, and the reaper finds it due at tick 11 (the
/// reset's), not at its first message's.
fn assert_reset_to_11(table: &Table<u32>, k: Key, value: u64) {
    let (slot, word) = table.find(k).unwrap();
    assert_eq!(word.value(), value);
    let mut effects = Effects::default();
    assert_eq!(
        table.expire(slot, k.tag(), 1, &mut effects),
        Expiry::NotDue(11),
        "{:?}",
        finish(table, effects)
    );
}

/// Init races an ack whose claim lands in an earlier, just-freed slot: one completion, and
/// the table ends clear.
#[test]
fn roots_init_vs_ack_in_a_twin_window_completes_once() {
    bounded(4).check(|| {
        let table = new_table();
        let k = key(0, 1);
        let t = in_a_twin_window(&table, move |table| ack(table, k, 0b1));
        let mut effects = Effects::default();
        table.init(k, 0b1, 7, &mut effects).unwrap();
        let mine = finish(&table, effects);
        let theirs = t.join().unwrap();
        let all: Vec<_> = mine.into_iter().chain(theirs).collect();
        assert_eq!(all, [(7, Outcome::Acked)]);
        assert!(table.is_clear(), "an entry was left behind");
    });
}

/// Two inits and an ack of one new root, in a twin window: the other thread's init races
/// this thread's ack and its init (which may claim, find the other's claim or a twin,
/// unjoin and merge). One init joins, the other is refused as a duplicate, the ack lands
/// in the one entry left, and the last ack completes the tree once, Acked.
#[test]
fn roots_two_inits_and_an_ack_in_a_twin_window_join_once() {
    inits_in_a_twin_window(true, &[7]);
}

/// Three inits of one new root, two of them on this thread, the other's in a twin window:
/// whichever claims first, exactly one init joins and the other two are refused as
/// duplicates (a second init that saw a JOINING claim which then unjoined must still find
/// the tree the claimer joined through its twin).
#[test]
fn roots_three_inits_in_a_twin_window_join_once() {
    inits_in_a_twin_window(false, &[7, 9]);
}

/// A reset races an init that claims in a twin window, finds the twin, unjoins and
/// merges: the root has an entry throughout (the orphan the reset's thread created, then
/// the merged tree), so the reset finds it, and its base reaches the entry the reaper
/// times out, whichever slot survives the merge.
#[test]
fn roots_reset_vs_an_unjoining_init_is_never_lost() {
    bounded(4).check(|| {
        let table = new_table();
        let k = key(0, 1);
        let t = in_a_twin_window(&table, move |table| {
            assert_eq!(ack(table, k, 0b100), None);
            table.reset(k, 11)
        });
        let mut effects = Effects::default();
        table.init(k, 0b1, 7, &mut effects).unwrap();
        assert!(effects.is_none());
        assert!(
            t.join().unwrap(),
            "the reset found no entry of a pending root"
        );
        assert_reset_to_11(&table, k, 0b101);
        assert_eq!(ack(&table, k, 0b101), Some((7, Outcome::Acked)));
        assert!(table.is_clear(), "an entry was left behind");
    });
}

/// A fail against the tree's init and an orphan ack of its root on two other threads, then,
/// once the fail and the init have returned, an ack of every edge. The orphan ack's search
/// may miss the tree and its claim land after it (a twin); the fail's search may pass the
/// tree's slot before the init's claim and land in the twin before the twin's claimer
/// merges it, or land in an orphan of its own that another thread's merge then empties.
/// Either way the fail is in the tree before it returns, so the ack after it and after the
/// init completes nothing: the tree ends Failed, once (the fail held before the init, or
/// applied after it).
///
/// Catches: a message that lands in a HELD entry and returns without merging its twins,
/// and a claimer or message whose entry another thread's merge emptied that returns
/// before that merge has landed (in both, the last ack completes the tree Acked, and the
/// fail is left in an orphan). Each fails at 3 preemptions.
///
/// Bounded at 3 preemptions. At 4 it fails: an init whose twin check ran while another
/// thread's merge held the fail's orphan (EMPTY, in flight) settles without it, and the
/// merge, finding the tree completed by the last ack, puts the fail back as an orphan
/// (`src/acker/table/mod.rs`, "Twin claims", the case left open).
#[test]
fn roots_fail_in_a_twin_reaches_the_tree_before_it_returns() {
    bounded(3).check(|| {
        let table = new_table();
        let k = key(0, 1);
        let initializer = Arc::clone(&table);
        let a = thread::spawn(move || init(&initializer, k, 0b11, 7));
        let orphan = Arc::clone(&table);
        let b = thread::spawn(move || ack(&orphan, k, 0b01));
        let mut effects = Effects::default();
        assert_ne!(table.fail(k, &mut effects), Applied::Full);
        let mut all: Vec<_> = finish(&table, effects).into_iter().collect();
        all.extend(a.join().unwrap());
        let last = ack(&table, k, 0b11);
        all.extend(last);
        all.extend(b.join().unwrap());
        assert_eq!(all, [(7, Outcome::Failed)], "the last ack: {last:?}");
    });
}
