//! Growth, through the Acker's API: tables follow what is pending, and
//! no tree is lost, doubled or mistimed across a migration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::tables::generations::chain;
use super::{Engine, TickScale, MAX_TIMEOUT_TICKS};
use crate::acker::timers::ticks::reached;
use crate::{Acker, Clock, Completion, ManualClock, Outcome};

type Log = Arc<Mutex<Vec<(u64, u32, Outcome)>>>;

/// Trees per test: enough to grow 16 tables of 2,048 slots (32,768 in all) to almost twice
/// that (Miri interprets every slot of every generation, so fewer there, where tables start
/// at 8 groups of 4 slots, but still past the first growth: over 3/4 of 512 slots).
const TREES: u64 = if cfg!(miri) { 450 } else { 60_000 };

/// A manual acker of 16 tables whose completions go to the log.
fn manual(clock: &ManualClock, max_pending: usize) -> (Acker<u32>, Log) {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let mut builder = Acker::builder()
        .timeout(Duration::from_secs(30))
        .resolution(Duration::from_millis(1))
        .clock(clock.clone())
        .shards(16)
        .max_pending(max_pending)
        .on_complete(move |c: Completion<u32>| {
            sink.lock().unwrap().push((c.root, c.payload, c.outcome))
        });
    if cfg!(miri) {
        // Miri interprets every slot: the smallest tables it can grow from (`TREES`).
        builder.smallest_groups = Some(8);
    }
    (builder.build_manual().unwrap(), log)
}

/// Takes the log and checks it holds `trees` completions, tree `i` (root `root(i)`,
/// payload `i`) acked once each.
fn assert_each_acked_once(log: &Log, trees: u64, root: impl Fn(u64) -> u64) {
    let mut log = std::mem::take(&mut *log.lock().unwrap());
    log.sort_unstable_by_key(|&(_, payload, _)| payload);
    assert_eq!(log.len(), trees as usize);
    for (i, &(r, payload, outcome)) in log.iter().enumerate() {
        assert_eq!(
            (r, payload, outcome),
            (root(i as u64), i as u32, Outcome::Acked)
        );
    }
}

/// The slots of `acker`'s tables at their smallest (staggered: `growth::staggered`).
fn smallest(acker: &Acker<u32>) -> usize {
    let engine = acker.engine();
    (0..engine.tables.shards.len())
        .map(|shard| engine.smallest_slots(shard))
        .sum()
}

/// Runs the reaper's passes a second apart until the tables stop changing (a shrink waits
/// for the load to stay low for a while, takes one halving per pass, and the freeing of
/// what it retired one more).
fn settle(acker: &Acker<u32>, clock: &ManualClock) {
    let mut last = 0;
    for _ in 0..64 {
        clock.advance(Duration::from_secs(1));
        acker.expire();
        let slots = acker.table_slots();
        if slots == last && acker.engine().housekeeping_due(0).is_none() {
            return;
        }
        last = slots;
    }
    panic!("housekeeping never settled");
}

#[test]
fn tables_grow_with_pending_and_shrink_after_it_falls() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, 1 << 20);
    assert_eq!(
        acker.table_slots(),
        smallest(&acker),
        "nothing sized for max_pending"
    );
    let root = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for i in 0..TREES {
        acker.init(root(i), 0b11, i as u32).unwrap();
    }
    assert_eq!(acker.pending(), TREES as usize);
    let grown = acker.table_slots();
    assert!(
        grown as u64 >= TREES && grown as u64 <= TREES * 4,
        "{grown} slots for {TREES} trees"
    );
    assert_eq!(acker.stats().rejected_full, 0);
    // Natively every table grows several times; Miri's few trees grow some tables once.
    let each = if cfg!(miri) { 1 } else { 16 };
    assert!(acker.table_migrations().0 >= each, "the tables grew");
    for i in 0..TREES {
        assert!(!acker.ack(root(i), 0b01));
        assert!(
            acker.ack(root(i), 0b10),
            "tree {i} completes on its last ack"
        );
    }
    assert_each_acked_once(&log, TREES, root);
    assert_eq!(acker.pending(), 0);
    // The first pass sees the load low; the reaper then sleeps until the shrink is due
    // rather than waking every tick to look again.
    acker.expire();
    let due = acker
        .engine()
        .housekeeping_due(acker.engine().time.tick_now());
    assert!(
        due.is_some_and(|ticks| ticks > 1),
        "a shrink SHRINK_AFTER ticks away: {due:?}"
    );
    settle(&acker, &clock);
    assert_eq!(acker.table_slots(), smallest(&acker), "memory given back");
    let shrunk = acker.table_migrations().1;
    assert!(shrunk >= each, "the tables shrank");
    // Straight to the size what is pending needs: one migration per table, not one per
    // step of 2/3 (about ten each from here).
    assert!(shrunk <= 16, "{shrunk} migrations to shrink 16 tables");
    // The shrunk tables, smaller than a huge page, were faulted in when built: the next
    // roots' searches and claims find their pages written, not the zero page that a
    // claim's fault then copies, flushing the other cores' TLBs (`shrink_faults_in`).
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let engine = acker.engine();
        let _active = engine.threads.enter();
        for shard in engine.tables.shards.iter() {
            // Safety: inside the operation `_active` marks.
            let (base, bytes) = unsafe { shard.current() }.lines_span();
            let (resident, pages) = crate::zeroed::resident(base, bytes);
            assert_eq!(resident, pages, "a shrunk table of {bytes} B left to fault");
        }
    }
}

/// The pass whose housekeeping moves a table files the moved roots' timers on its wheel as
/// it moves them: right after it every pending root is covered, with no scan of the dirty
/// groups for them.
#[test]
fn the_pass_that_moves_a_table_covers_every_root_it_moved() {
    let clock = ManualClock::new(0);
    let (acker, _log) = manual(&clock, 1 << 20);
    let root = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut i = 0;
    // Up to the init that starts a migration: every other group of it is left to move.
    while acker.table_migrations().0 == 0 {
        acker.init(root(i), 0b1, 0).unwrap();
        i += 1;
        assert!(i < TREES, "no table grew in {TREES} inits");
    }
    let moved = acker.stats().roots_moved;
    clock.advance(Duration::from_millis(5));
    acker.expire();
    assert!(acker.stats().roots_moved > moved, "the pass moved roots");
    let [_, successors, _, _] = acker.memory_parts();
    assert_eq!(successors, 0, "the pass finished the migration");
    assert_eq!(acker.covered_roots(), acker.pending(), "after {i} inits");
}

#[test]
fn trees_pending_across_growth_time_out_once_and_resets_move_with_them() {
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, 1 << 20);
    // Ten trees that never complete, and one reset halfway.
    let stuck: Vec<u64> = (0..10).map(|i| 0xdead_0000 + i).collect();
    for &r in &stuck {
        acker.init(r, 0b1, r as u32).unwrap();
    }
    clock.advance(Duration::from_secs(20));
    // Growth under them: many more trees, created and completed, which also move the
    // stuck ones through several generations; the reaper's passes file their timers.
    // As many as the smallest tables have slots: more than they can hold at their load.
    let many = if cfg!(miri) {
        TREES
    } else {
        smallest(&acker) as u64
    };
    for i in 0..many {
        acker.init(i, 0b1, 0).unwrap();
        acker.expire();
    }
    assert!(acker.table_slots() > smallest(&acker));
    assert!(acker.reset_timeout(stuck[0]));
    for i in 0..many {
        assert!(acker.ack(i, 0b1));
    }
    log.lock().unwrap().clear();
    // 31 s after their init the nine are due, the reset one is not.
    clock.advance(Duration::from_secs(11));
    acker.expire();
    let mut timed_out: Vec<u64> = take_roots(&log, Outcome::TimedOut);
    timed_out.sort_unstable();
    assert_eq!(timed_out, stuck[1..]);
    clock.advance(Duration::from_secs(20));
    acker.expire();
    assert_eq!(take_roots(&log, Outcome::TimedOut), [stuck[0]]);
    clock.advance(Duration::from_secs(60));
    acker.expire();
    assert!(log.lock().unwrap().is_empty(), "nothing twice");
    assert_eq!(acker.pending(), 0);
}

fn take_roots(log: &Log, outcome: Outcome) -> Vec<u64> {
    let log = std::mem::take(&mut *log.lock().unwrap());
    assert!(log.iter().all(|&(_, _, o)| o == outcome), "{log:?}");
    log.into_iter().map(|(root, _, _)| root).collect()
}

#[test]
fn shutdown_hands_back_every_tree_across_generations() {
    let clock = ManualClock::new(0);
    let (acker, _log) = manual(&clock, 1 << 20);
    let trees = if cfg!(miri) {
        TREES
    } else {
        smallest(&acker) as u64
    };
    for i in 0..trees {
        acker.init(i, 0b1, i as u32).unwrap();
    }
    assert!(
        acker.table_slots() > smallest(&acker),
        "spread over grown tables"
    );
    let mut back = acker.shutdown();
    back.sort_unstable();
    assert_eq!(back.len(), trees as usize);
    assert!(back
        .iter()
        .enumerate()
        .all(|(i, &(r, p))| r == i as u64 && p == i as u32));
}

/// Threads grow the tables together and then empty them: every tree completes exactly
/// once, with its own payload, while entries move under them.
#[test]
fn concurrent_growth_and_shrink_lose_and_double_nothing() {
    // Under Miri, which runs threads slowly, two threads, fewer trees (still past the
    // first doubling of 16 tables of 64 slots) and no reaper thread (manual mode: the
    // operations grow the tables and free what they retire).
    const THREADS: u64 = if cfg!(miri) { 2 } else { 4 };
    let per_thread = if cfg!(miri) { 500 } else { TREES / THREADS };
    type Seen = HashMap<u64, (u32, Outcome, usize)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let sink = Arc::clone(&seen);
    let builder = Acker::builder()
        .timeout(Duration::from_secs(60))
        .shards(16)
        .max_pending(1 << 20)
        .on_complete(move |c: Completion<u32>| {
            let mut seen = sink.lock().unwrap();
            let entry = seen.entry(c.root).or_insert((c.payload, c.outcome, 0));
            entry.2 += 1;
        });
    let acker = if cfg!(miri) {
        builder.build_manual()
    } else {
        builder.build()
    }
    .unwrap();
    let finished = std::sync::atomic::AtomicBool::new(false);
    // Every thread inits all of its trees before any acks: what is pending then reaches
    // THREADS x per_thread however the threads are scheduled (in the optimized test build
    // one thread could otherwise finish before the next began, and the tables not grow).
    let all_inited = std::sync::Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        let (acker, finished, all_inited) = (&acker, &finished, &all_inited);
        s.spawn(move || {
            for _ in 0..100 {
                std::thread::sleep(Duration::from_millis(100));
                if finished.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
            }
            eprintln!("STUCK\n{}", acker.engine().describe_tables());
        });
        let mut workers = Vec::new();
        for t in 0..THREADS {
            workers.push(s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let roots: Vec<u64> = (0..per_thread).map(|i| t << 48 | i).collect();
                let edges: Vec<(u64, u64)> =
                    roots.iter().map(|_| (rng.random(), rng.random())).collect();
                // Half the trees get their first ack before init (orphans that move too).
                for (&r, &(a, b)) in roots.iter().zip(&edges) {
                    if r % 2 == 0 {
                        acker.ack(r, a);
                    }
                    acker.init(r, a ^ b, r as u32).unwrap();
                }
                all_inited.wait();
                for (&r, &(a, b)) in roots.iter().zip(&edges) {
                    if r % 2 == 1 {
                        acker.ack(r, a);
                    }
                    acker.ack(r, b);
                }
            }));
        }
        for worker in workers {
            worker.join().unwrap();
        }
        finished.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len() as u64, THREADS * per_thread);
    for (&root, &(payload, outcome, times)) in seen.iter() {
        assert_eq!(
            (payload, outcome, times),
            (root as u32, Outcome::Acked, 1),
            "root {root:#x}"
        );
    }
    assert_eq!(acker.pending(), 0);
    assert_eq!(acker.stats().rejected_full, 0);
    assert!(
        acker.table_migrations().0 >= 16,
        "the tables grew under the threads"
    );
}

#[test]
fn ticks_round_timeouts_up_and_never_go_before_the_epoch() {
    let ticks = TickScale {
        epoch: 1_000,
        shift: 10,
    };
    assert_eq!(ticks.full(1_000), 1);
    assert_eq!(ticks.full(1_000 + 1023), 1);
    assert_eq!(ticks.full(1_000 + 1024), 2);
    assert_eq!(ticks.full(999), 1, "a clock before the epoch is tick 1");
    assert_eq!(ticks.timeout(1), 2);
    assert_eq!(ticks.timeout(1024), 2);
    assert_eq!(ticks.timeout(1025), 3);
    assert_eq!(u64::from(ticks.timeout(u64::MAX)), MAX_TIMEOUT_TICKS);
}

/// A reaper pass's move can complete a tree: the orphan it moves (HELD, holding the last
/// edge) meets the root's tree in the successor, and the merge carries the edge in. That
/// completion must reach the callback like any other (the pass passed its operation's
/// `open` on; it passed `false`, and the payload was dropped unseen). The race that leaves
/// an orphan in the old table beside its tree in the successor (the orphan claimed after
/// the init's search of the old table, and frozen by the reaper before its claimer moves
/// it) is stood in for: the orphan is there first, and the tree is inited and acked in the
/// successor directly (an ack through the acker would find the orphan first, and merge it
/// before it returns: "Twin claims" in the table's docs).
#[test]
fn a_tree_completed_by_a_reaper_move_reaches_the_callback() {
    use crate::acker::table::{Applied, Effects};
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, 1 << 20);
    let engine = acker.engine();
    let root = 77;
    assert!(!acker.ack(root, 0b10), "the orphan holds the last edge");
    let (shard, key) = engine.tables.layout.place(root);
    {
        let active = engine.threads.enter();
        // Safety: inside the operation `active` marks.
        let table = unsafe { engine.tables.shards[shard].current() };
        let groups = table.groups() + table.groups() / 2;
        assert_eq!(
            engine.start_migration(shard, table, groups, false, true),
            Some(true)
        );
        let next = table.successor().expect("migrating");
        let mut effects = Effects::stamped(super::time::stamp_at(engine.write_tick()));
        assert!(next.init(key, 0b11, 5, &mut effects).is_ok());
        assert_eq!(next.ack(key, 0b01, &mut effects), Applied::Changed);
        assert!(!engine.finish(shard, table, &mut effects, &active));
    }
    assert!(
        log.lock().unwrap().is_empty(),
        "the tree waits for the orphan's edge"
    );
    for _ in 0..64 {
        acker.expire();
        if !log.lock().unwrap().is_empty() {
            break;
        }
    }
    assert_eq!(*log.lock().unwrap(), [(root, 5, Outcome::Acked)]);
    assert_eq!(acker.pending(), 0);
}

/// Debugging aids for these tests' messages.
impl<T: Send + 'static> Engine<T> {
    /// A root's entry as the table has it: its word and times (for tests' messages).
    #[cfg(test)]
    #[allow(dead_code)] // a debugging aid for the Acker's tests
    pub(in crate::acker) fn describe(&self, root: u64) -> String {
        let _active = self.threads.enter();
        let (shard, key) = self.tables.layout.place(root);
        // Safety: inside the operation `_active` marks.
        let table = unsafe { self.tables.shards[shard].current() };
        match table.find(key) {
            Some((slot, word)) => format!(
                "shard {shard} slot {slot} {word:?} times {:?} own timeout {:?}",
                table.times(slot),
                table.timeout_of(slot)
            ),
            None => "no entry".into(),
        }
    }

    /// Every table's generations, with their words counted by state (for tests' messages).
    #[cfg(test)]
    pub(in crate::acker) fn describe_tables(&self) -> String {
        let _active = self.threads.enter();
        let mut out = format!("pending {}\n", self.pending());
        for (index, shard) in self.tables.shards.iter().enumerate() {
            // Safety: inside the operation `_active` marks.
            let table = unsafe { shard.current() };
            for table in chain(table) {
                let mut states = std::collections::BTreeMap::new();
                for slot in 0..table.slots() {
                    let state = format!("{:?}", table.word(slot).load().state());
                    *states.entry(state).or_insert(0) += 1;
                }
                out += &format!(
                    "shard {index} gen {} slots {} migrating {} moved all {} {states:?}\n",
                    table.gen(),
                    table.slots(),
                    table.successor().is_some(),
                    table.moved_all(),
                );
            }
        }
        out
    }
}

/// A caller's tick (from the time-stamp counter where [`tsc`](crate::clock::tsc) allows it)
/// is the clock's tick at that moment, or the next one: never behind, which would make a
/// deadline early. Read between two real readings, at a resolution of 16 µs so that
/// boundaries come often, across sleeps that let the thread's anchor age.
#[test]
fn a_callers_tick_is_never_behind_the_clock_and_at_most_one_ahead() {
    let acker: Acker<u32> = Acker::builder()
        .resolution(Duration::from_micros(16))
        .clock(crate::MonotonicClock::new())
        .build_manual()
        .unwrap();
    let engine = acker.engine();
    assert_eq!(engine.time.tsc_ticks, crate::clock::tsc::available());
    let iterations = if cfg!(miri) { 100 } else { 300_000 };
    for i in 0..iterations {
        if i % 20_000 == 0 {
            std::thread::sleep(Duration::from_micros(700));
        }
        let before = engine.time.tick_now();
        let tick = engine.time.caller_tick();
        let after = engine.time.tick_now();
        assert!(
            reached(before, tick) && reached(tick, after.wrapping_add(1)),
            "caller's tick {tick} outside {before}..={after} + 1"
        );
    }
}

/// Where `root` lives: its table and slot in the table's current generation.
fn slot_of(acker: &Acker<u32>, root: u64) -> Option<(usize, usize)> {
    let engine = acker.engine();
    let (shard, key) = engine.tables.layout.place(root);
    // Safety: a manual acker with no other thread: nothing retires a generation under us.
    let table = unsafe { engine.tables.shards[shard].current() };
    (0..table.slots())
        .find(|&slot| table.key_in(slot) == Some(key))
        .map(|slot| (shard, slot))
}

/// A group timer filed at a tick whose low 32 bits are all ones reads as none
/// ([`groups`](crate::acker::timers::groups)): a mate registered later, due later, names
/// its own entry. A sweep must keep the earlier entry, or the first root times out at its
/// mate's deadline.
#[test]
fn a_group_timer_at_a_tick_that_reads_as_none_survives_a_sweep() {
    use crate::acker::table::GROUP_SLOTS;
    let clock = ManualClock::new(0);
    let (acker, log) = manual(&clock, 1 << 16);
    let ticks = &acker.engine().time.ticks;
    let (own, mates) = (Duration::from_secs(10), Duration::from_secs(20));
    // The clock where a root with timeout `own` is due at tick 2^32 - 1.
    let due = u64::from(u32::MAX);
    let start = due - u64::from(ticks.timeout(own.as_nanos() as u64));
    let at = |tick: u64| ticks.epoch + ((tick - 1) << ticks.shift);
    clock.set(at(start));
    assert_eq!(ticks.full(clock.now()), start);
    // Dead entries enough for a sweep (more than 2 x pending + 4096) once these complete.
    let fillers: Vec<u64> = (0..12_000u64).map(|i| 1 << 50 | i).collect();
    for &r in &fillers {
        acker.init(r, 0b1, 0).unwrap();
    }
    acker.expire();
    acker.expire();
    // `a` must share its group with a free slot, or no mate can ever join it: a root
    // whose group the fillers have filled is given back and another one tried.
    let (a, shard, slot) = (7u64..)
        .take(1 << 16)
        .find_map(|r| {
            acker.init_with_timeout(r, 0b1, 1, own).unwrap();
            let (shard, slot) = slot_of(&acker, r).unwrap();
            // Safety: as in `slot_of`.
            let table = unsafe { acker.engine().tables.shards[shard].current() };
            let group = slot / GROUP_SLOTS * GROUP_SLOTS;
            if (group..group + GROUP_SLOTS).any(|s| table.key_in(s).is_none()) {
                return Some((r, shard, slot));
            }
            assert!(acker.ack(r, 0b1));
            None
        })
        .expect("every group the candidates landed in is full");
    // Safety: as in `slot_of`.
    let table = unsafe { acker.engine().tables.shards[shard].current() };
    assert_eq!(
        table.deadline(slot),
        Some(u32::MAX),
        "not due at the odd tick"
    );
    acker.expire(); // registers `a`: its group's filed tick reads as none
                    // A mate of `a`'s group, due later, registered after it.
    let b = (1u64 << 40..)
        .take(1 << 24)
        .find(|&r| {
            acker.init_with_timeout(r, 0b1, 2, mates).unwrap();
            let mate = slot_of(&acker, r)
                .is_some_and(|(t, s)| t == shard && s / GROUP_SLOTS == slot / GROUP_SLOTS);
            if !mate {
                assert!(acker.ack(r, 0b1));
            }
            mate
        })
        .expect("no root landed in `a`'s group");
    acker.expire();
    for &r in &fillers {
        assert!(acker.ack(r, 0b1));
    }
    acker.expire(); // the sweep
    assert!(
        acker.scheduled_timers() < 100,
        "no sweep: {}",
        acker.scheduled_timers()
    );
    take_roots(&log, Outcome::Acked);
    clock.set(at(due + 2));
    acker.expire();
    assert_eq!(take_roots(&log, Outcome::TimedOut), [a], "`a` late or lost");
    clock.set(at(due + 20_000));
    acker.expire();
    assert_eq!(take_roots(&log, Outcome::TimedOut), [b]);
}

/// Shutdown and an entry *stranded* out of its scan's sight
/// ([`migrate`](crate::acker::table::migrate)): an orphan claimed in a migrating table
/// after its group was clean, whose successor is at the most a table grows to and full in
/// the root's window, is left behind when the old table is retired; the operation that
/// waits for room gives it up once shutdown stops it (its credit back), so that `pending()`
/// is 0 after shutdown and every tree in the successor is handed back. (Before, the waiting
/// operation just returned: the orphan held its credit in the retired table, and
/// `pending()` stayed 1.)
#[test]
fn shutdown_frees_an_entry_stranded_in_a_retired_table() {
    use crate::acker::table::word::{Key, KEY_SHIFT};
    use crate::acker::table::{Effects, Stamp};
    let clock = ManualClock::new(0);
    // 16 tables of the smallest size, which is as large as this bound lets one grow.
    let (acker, _log) = manual(&clock, 4096);
    let engine = acker.engine();
    let groups = super::tables::growth::MIN_TABLE_SLOTS / crate::acker::table::GROUP_SLOTS;
    // A key of table 0 whose home is `home` in a table of `groups` groups.
    let key = |home: usize, low: u64| {
        let shift = 64 - KEY_SHIFT - groups.trailing_zeros();
        Key::new((home as u64) << shift | low)
    };
    let active = engine.threads.enter();
    // Safety: inside the operation `active` marks.
    let old = unsafe { engine.tables.shards[0].current() };
    assert_eq!(
        (old.groups(), engine.tables.room_table_slots),
        (groups, groups * 4)
    );
    assert_eq!(
        engine.start_migration(0, old, groups, true, true),
        Some(true)
    );
    let next = old.successor().unwrap();
    // Fill the successor in the window of home 100 (and a little beyond): LIVE trees.
    let window = crate::acker::table::MAX_PROBE + 1;
    let mut live = 0;
    for home in 100..100 + window + 1 {
        for low in 0..crate::acker::table::GROUP_SLOTS as u64 {
            let mut effects = Effects::stamped(Stamp::new(1, 1));
            next.init(key(home, low), 0b1, live, &mut effects).unwrap();
            live += 1;
        }
    }
    let mut effects = Effects::default();
    assert!(
        old.move_round(&mut effects),
        "an empty shard is clean at once"
    );
    // An orphan claimed in the old table now: no room in the successor, stranded.
    let mut effects = Effects::stamped(Stamp::new(1, 1));
    old.ack(key(100, 99), 0b1, &mut effects);
    let stranded = effects.take_stranded().expect("stranded");
    effects.strand(stranded.0, stranded.1);
    engine.promote_moved(0);
    // Safety: inside the operation `active` marks.
    let current = unsafe { engine.tables.shards[0].current() };
    assert!(std::ptr::eq(current, next), "retired");
    assert_eq!(engine.pending(), live as usize + 1);
    // Shutdown stops the wait for room: the entry is given up.
    engine.stop_flag();
    engine.finish(0, old, &mut effects, &active);
    assert_eq!(
        engine.pending(),
        live as usize,
        "the stranded orphan's credit is back"
    );
    drop(active);
    let handed_back = acker.shutdown();
    assert_eq!(handed_back.len(), live as usize);
    assert_eq!(acker.pending(), 0);
}

/// A burst's tables go back to their smallest soon after every tree completed, though the
/// only deadlines are 600 s away and no completion wakes the reaper: it looks at the load
/// while a table is larger than the smallest. (Before it did, it slept until the first
/// deadline and the tables stayed grown for the whole timeout.)
#[test]
fn a_burst_gives_its_tables_back_long_before_its_deadlines() {
    let acker: Acker<u32> = Acker::builder()
        .timeout(Duration::from_secs(600))
        .shards(16)
        .max_pending(1 << 17)
        .build()
        .unwrap();
    let root = |i: u64| (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for i in 0..TREES {
        acker.init(root(i), 1, i as u32).unwrap();
    }
    assert!(
        acker.table_slots() > smallest(&acker),
        "the burst grew the tables"
    );
    // Every root filed with the reaper, through the tables' growth (which files each moved
    // root again in its successor): the sweeps keep the wheel within about an entry per
    // pending root.
    let filling = std::time::Instant::now();
    while acker.covered_roots() < acker.pending() {
        assert!(filling.elapsed() < Duration::from_secs(10), "never covered");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20)); // a few passes
    let timers = acker.scheduled_timers();
    assert!(
        timers <= TREES as usize + 4096,
        "{timers} timers for {TREES} roots"
    );
    for i in 0..TREES {
        assert!(acker.ack(root(i), 1));
    }
    let completed = std::time::Instant::now();
    let settled = |parts: [usize; 4]| {
        // The wheel's fixed buckets and a little room: its vectors, its dead entries
        // (swept by a pass that finds nothing pending, which the tables' shrinking brings,
        // [`reaper::wheel`](super::reaper::wheel)) and the large generations' filed ticks
        // are gone.
        parts[2] == 0 && parts[3] < 64 << 10 && acker.scheduled_timers() == 0
    };
    while acker.table_slots() > smallest(&acker) || !settled(acker.memory_parts()) {
        assert!(
            completed.elapsed() < Duration::from_secs(10),
            "{} slots, {:?} B (tables, successors, retired, wheel), {} wheel entries 10 s \
             after the burst completed",
            acker.table_slots(),
            acker.memory_parts(),
            acker.scheduled_timers()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    acker.shutdown();
}

/// Roots in the tables at their smallest, one per group at most: the reaper's wheel
/// holds an entry for each (fewer than the sweep's slack of 4,096).
const BELOW_SLACK: u64 = 3_000;

/// Trees that complete after their groups were filed leave dead entries in the reaper's
/// wheel, too few for the sweep's slack; the first pass that finds nothing pending sweeps
/// them all, whatever an earlier sweep with roots pending kept.
#[test]
fn a_pass_with_nothing_pending_sweeps_the_wheel() {
    let clock = ManualClock::new(0);
    let (acker, _log) = manual(&clock, 1 << 20);
    let root = |i: u64| (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for i in 0..BELOW_SLACK {
        acker.init(root(i), 1, i as u32).unwrap();
    }
    acker.expire();
    let filed = acker.scheduled_timers();
    assert!(filed > 1_000, "{filed} timers for {BELOW_SLACK} roots");
    for i in 0..BELOW_SLACK {
        assert!(acker.ack(root(i), 1));
    }
    acker.expire();
    assert_eq!(acker.scheduled_timers(), 0, "dead entries kept");

    // A crowded wheel's sweep with a few roots pending keeps their entries; once those
    // complete too, the next pass sweeps them.
    const CROWD: u64 = 12_000;
    const LEFT: u64 = 500;
    for i in 0..CROWD {
        acker.init(root(i), 1, i as u32).unwrap();
    }
    acker.expire();
    for i in 0..CROWD - LEFT {
        assert!(acker.ack(root(i), 1));
    }
    acker.expire(); // a sweep: the wheel holds more than 4,096 dead entries
    let kept = acker.scheduled_timers();
    assert!((1..1_000).contains(&kept), "{kept} timers for {LEFT} roots");
    for i in CROWD - LEFT..CROWD {
        assert!(acker.ack(root(i), 1));
    }
    acker.expire();
    assert_eq!(
        acker.scheduled_timers(),
        0,
        "the entries a sweep kept, dead now"
    );

    // Entries filed after an idle sweep are swept by the next pass that finds nothing
    // pending.
    acker.init(root(0), 1, 0).unwrap();
    acker.expire();
    assert_eq!(acker.scheduled_timers(), 1);
    assert!(acker.ack(root(0), 1));
    acker.expire();
    assert_eq!(
        acker.scheduled_timers(),
        0,
        "a dead entry kept after a sweep"
    );
}

/// A count of ticks as a duration is exact on both sides of the `u64` fast path's bound.
#[test]
fn ticks_as_durations_are_exact_past_u64_nanoseconds() {
    for shift in [0, 10, 20, 30] {
        let ticks = TickScale { epoch: 0, shift };
        let bound = u64::MAX >> shift;
        for count in [
            0,
            1,
            1_000_003,
            bound - 1,
            bound,
            bound.saturating_add(1),
            u64::MAX,
        ] {
            let nanos = u128::from(count) << shift;
            let expected = match u64::try_from(nanos / 1_000_000_000) {
                Ok(secs) => Duration::new(secs, (nanos % 1_000_000_000) as u32),
                Err(_) => Duration::MAX,
            };
            assert_eq!(
                ticks.nanos(count),
                expected,
                "{count} ticks of 2^{shift} ns"
            );
        }
    }
}

/// Memory follows a growing fill: wherever no migration is under way, the tables hold at
/// most 68 B and the reaper's wheel (its vectors' room and the groups' filed ticks) at most
/// 10 B per pending root with a `u32` payload, once 64k roots are pending. A table doubles
/// at 3/4 load (so it is 3/8 full after: 85 B a root), but the tables' staggered sizes
/// spread their loads from 3/8 to 3/4 at any count (62 B a root on average), and the dead
/// entries of the groups a growth moved are swept before their vectors keep the room. A
/// root moves at most 1.5 times on average in the whole fill.
#[test]
fn memory_per_root_stays_bounded_while_the_tables_grow() {
    let clock = ManualClock::new(0);
    let (acker, _log) = manual(&clock, 1 << 20);
    let roots: u64 = if cfg!(miri) { 3_000 } else { 400_000 };
    let from = if cfg!(miri) { 1_000 } else { 1 << 16 };
    let mut checked = 0;
    for i in 0..roots {
        acker
            .init(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, 1, 0)
            .unwrap();
        if (i + 1) % 4_096 != 0 {
            continue;
        }
        // The pass files every root's group with the reaper (`expire` scans the dirty
        // groups).
        clock.advance(Duration::from_millis(100));
        acker.expire();
        let pending = acker.pending();
        let [current, successors, retired, wheel] = acker.memory_parts();
        if pending < from || successors > 0 || retired > 0 {
            continue;
        }
        let per = |bytes: usize| bytes as f64 / pending as f64;
        assert!(
            per(current) <= 68.0,
            "{:.1} B of tables per root at {pending} pending",
            per(current)
        );
        assert!(
            per(wheel) <= 10.0,
            "{:.1} B of wheel per root at {pending} pending",
            per(wheel)
        );
        checked += 1;
    }
    assert!(checked > 10, "only {checked} checks without a migration");
    // Doubling moves each root about once on the way (by a quarter: about four times).
    while acker.memory_parts()[1] > 0 {
        clock.advance(Duration::from_millis(1));
        acker.expire();
    }
    let moved = acker.stats().roots_moved as f64 / acker.pending() as f64;
    assert!(
        moved <= 1.5,
        "a root moved {moved:.2} times on average in a fill"
    );
    acker.shutdown();
}

#[test]
#[cfg(not(miri))] // a real reaper thread and tables of 8,192 slots and more
fn with_a_reaper_thread_large_successors_are_built_by_it() {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let acker = Acker::builder()
        .timeout(Duration::from_secs(600))
        .max_pending(1 << 20)
        .on_complete(move |c: Completion<u32>| {
            sink.lock().unwrap().push((c.root, c.payload, c.outcome))
        })
        .build()
        .unwrap();
    let root = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    // The fewest tables (16, whatever `shards` asks) grow from 2,048-3,900 slots to hold
    // 100k roots, each at least once to a successor of 8,192 slots (256 KiB) or more. In
    // parts with pauses, so that the thread has a core to answer the requests even on a
    // loaded machine.
    let trees: u64 = 100_000;
    for i in 0..trees {
        acker.init(root(i), 0b11, i as u32).unwrap();
        if i % 2_000 == 1_999 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let engine = acker.engine();
    let waited = std::time::Instant::now();
    while engine.grown_by_reaper() == 0 && waited.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (grown, _) = acker.table_migrations();
    assert!(
        engine.grown_by_reaper() >= 1,
        "of {grown} growths, none started by the reaper thread"
    );
    assert_eq!(acker.pending(), trees as usize);
    assert_eq!(acker.stats().rejected_full, 0);
    for i in 0..trees {
        assert!(!acker.ack(root(i), 0b01));
        assert!(
            acker.ack(root(i), 0b10),
            "tree {i} completes on its last ack"
        );
    }
    acker.shutdown();
    assert_each_acked_once(&log, trees, root);
}

/// A pass that has claimed due timeouts delivers them before its upkeep: here a successor
/// a caller asked for (a chain whose load calls for growth, with its request flag set, as
/// a caller with a reaper thread leaves it). Building it zeroes its pages, and a thread
/// published as running meanwhile gets no caller's help, so the timeout's callback runs
/// before the growth starts; the same pass then starts it.
#[test]
#[cfg(not(miri))] // 25k trees
fn a_pass_delivers_its_timeouts_before_it_builds_a_requested_successor() {
    let clock = ManualClock::new(1 << 40);
    let seen: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let handle: Arc<Mutex<Option<Acker<u32>>>> = Arc::default();
    let (sink, inner) = (Arc::clone(&seen), Arc::clone(&handle));
    let acker = Acker::builder()
        .timeout(Duration::from_secs(30))
        .resolution(Duration::from_millis(1))
        .clock(clock.clone())
        .shards(16)
        .max_pending(1 << 20)
        .on_complete(move |c: Completion<u32>| {
            // The growths started when the callback runs.
            let acker = inner.lock().unwrap().clone().expect("the acker");
            sink.lock()
                .unwrap()
                .push((c.root, acker.table_migrations().0));
        })
        .build_manual()
        .unwrap();
    *handle.lock().unwrap() = Some(acker.clone());
    let engine = acker.engine();
    acker.init(1, 0x11, 0).unwrap();
    clock.advance(Duration::from_secs(20));
    // Fills until some shard's chain calls for growth and has no successor yet (it crossed
    // 3/4 of its last generation's slots, and no claim there has grown it).
    let root = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 2;
    let growable = |engine: &Engine<u32>| {
        let _active = engine.threads.enter();
        // Without tree 1, which times out before the upkeep looks at the load.
        let per_table = (engine.pending() - 1) / engine.tables.shards.len();
        (0..engine.tables.shards.len()).find(|&shard| {
            // Safety: inside the operation `_active` marks.
            let last = chain(unsafe { engine.tables.shards[shard].current() }).last();
            last.is_some_and(|last| {
                last.successor().is_none()
                    && per_table * 4 > last.slots() * 3
                    && last.slots() < engine.tables.max_table_slots
            })
        })
    };
    let mut i = 0;
    let shard = loop {
        acker.init(root(i), 0x22, i as u32).unwrap();
        i += 1;
        if let Some(shard) = growable(engine) {
            break shard;
        }
        assert!(i < 200_000, "no chain ever called for growth");
    };
    assert!(engine.tables.shards[shard].ask_growth());
    let grown = acker.table_migrations().0;
    clock.advance(Duration::from_secs(11)); // tree 1 is due, the fill's trees are not
    assert_eq!(acker.expire(), 1);
    assert_eq!(
        *seen.lock().unwrap(),
        [(1, grown)],
        "the timeout's callback ran after the pass began the requested growth"
    );
    assert_eq!(
        acker.table_migrations().0,
        grown + 1,
        "the pass began the requested growth after its delivery"
    );
    handle.lock().unwrap().take();
    acker.shutdown();
}

/// An acker with a delivery order (the async acker's: its cells' numbers) delivers a pass's
/// burst of timeouts sorted by it, not in the order its wheel files them (about the order
/// the trees were started, here a permutation of the payloads); a pass of fewer than
/// `ORDER_FROM` in the wheel's order.
#[test]
#[cfg(not(miri))] // 5,000 trees
fn a_burst_of_timeouts_is_delivered_in_the_delivery_order() {
    let clock = ManualClock::new(1 << 40);
    let seen: Arc<Mutex<Vec<u32>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let mut builder = Acker::builder()
        .timeout(Duration::from_secs(30))
        .resolution(Duration::from_millis(1))
        .clock(clock.clone())
        .on_complete(move |c: Completion<u32>| {
            assert_eq!(c.outcome, Outcome::TimedOut);
            sink.lock().unwrap().push(c.payload);
        });
    builder.delivery_order = Some(|payload: &u32| *payload);
    let acker = builder.build_manual().unwrap();
    let root = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    // Started in an order unrelated to the payloads' (7,919 is prime to both counts).
    let start = |trees: u32, base: u64| {
        for i in 0..trees {
            let payload = i * 7_919 % trees;
            acker
                .init(root(base + u64::from(i)), 0b11, payload)
                .unwrap();
        }
    };
    // A burst: one pass of 5,000 timeouts.
    start(5_000, 0);
    clock.advance(Duration::from_secs(31));
    assert_eq!(acker.expire(), 5_000);
    let burst = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(
        burst,
        (0..5_000).collect::<Vec<u32>>(),
        "a burst in the delivery order"
    );
    // Fewer than ORDER_FROM: in the wheel's order.
    start(100, 10_000);
    clock.advance(Duration::from_secs(31));
    assert_eq!(acker.expire(), 100);
    let few = std::mem::take(&mut *seen.lock().unwrap());
    let mut sorted = few.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..100).collect::<Vec<u32>>());
    assert_ne!(few, sorted, "a pass of 100 sorted");
}

/// An acker with a burst hand-over (the async acker's, on a multi-thread runtime) hands a
/// pass's burst of timeouts to it in batches of at most `HAND_OVER_BATCH`, each completion
/// once and none to `on_complete`; a pass of fewer than `ORDER_FROM` goes to `on_complete`;
/// and shutdown drops the hand-over with the callback (the async acker's stream ends only
/// once its sender, which the hand-over holds, is gone).
#[test]
fn a_burst_goes_to_its_hand_over_in_batches_and_shutdown_drops_it() {
    use super::deliver::{HAND_OVER_BATCH, ORDER_FROM};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    // Two full batches and a part of one; under Miri, one part (a burst all the same).
    let trees = if cfg!(miri) {
        ORDER_FROM + 76
    } else {
        2 * HAND_OVER_BATCH + 808
    };
    let clock = ManualClock::new(1 << 40);
    let called = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&called);
    let batches: Arc<Mutex<Vec<Vec<u32>>>> = Arc::default();
    let (sink, dropped) = (Arc::clone(&batches), Arc::new(AtomicBool::new(false)));
    let guard = SetOnDrop(Arc::clone(&dropped));
    let mut builder = Acker::builder()
        .timeout(Duration::from_secs(30))
        .resolution(Duration::from_millis(1))
        .clock(clock.clone())
        // Tables for these trees only: building and shutting down the default's (for 1M)
        // was most of the test's time under Miri.
        .max_pending(4 * trees)
        .on_complete(move |_: Completion<u32>| {
            count.fetch_add(1, Ordering::SeqCst);
        });
    builder.burst_hand_over = Some(Box::new(move |batch: Vec<Completion<u32>>| {
        let _held = &guard;
        let payloads = batch.into_iter().map(|c| {
            assert_eq!(c.outcome, Outcome::TimedOut);
            c.payload
        });
        sink.lock().unwrap().push(payloads.collect());
    }));
    let acker = builder.build_manual().unwrap();
    let root = |i: usize| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in 0..trees {
        acker.init(root(i), 0b11, i as u32).unwrap();
    }
    clock.advance(Duration::from_secs(31));
    assert_eq!(acker.expire(), trees);
    let burst = std::mem::take(&mut *batches.lock().unwrap());
    let sizes: Vec<usize> = burst.iter().map(Vec::len).collect();
    let full = trees / HAND_OVER_BATCH;
    assert!(
        sizes[..full].iter().all(|&n| n == HAND_OVER_BATCH)
            && sizes[full..] == [trees % HAND_OVER_BATCH],
        "batches of {sizes:?}"
    );
    let mut payloads: Vec<u32> = burst.into_iter().flatten().collect();
    payloads.sort_unstable();
    assert_eq!(payloads, (0..trees as u32).collect::<Vec<_>>());
    assert_eq!(
        called.load(Ordering::SeqCst),
        0,
        "a burst's completion to on_complete"
    );
    // Fewer than ORDER_FROM: the callback's.
    let few = ORDER_FROM / 2;
    for i in 0..few {
        acker.init(root(trees + i), 0b11, 0).unwrap();
    }
    clock.advance(Duration::from_secs(31));
    assert_eq!(acker.expire(), few);
    assert_eq!(called.load(Ordering::SeqCst), few);
    assert!(batches.lock().unwrap().is_empty());
    assert!(!dropped.load(Ordering::SeqCst));
    assert!(acker.shutdown().is_empty());
    assert!(
        dropped.load(Ordering::SeqCst),
        "shutdown keeps the hand-over"
    );
}

/// Minor page faults of the calling thread so far.
#[cfg(all(target_os = "linux", not(miri)))]
fn thread_faults() -> i64 {
    // Safety: `usage` is a valid rusage for the call to fill.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage.ru_minflt
    }
}

/// An init that finds no room grows the chain itself (`make_room`), in the caller's call
/// (a `track` on a runtime's worker): a large successor is left to fault its pages as the
/// moves write them, not zeroed at once there. (Faulted in, a million trees sharing a
/// deadline made one `track` take 190 faults and 4-5 ms on its core as they drained.)
#[cfg(all(target_os = "linux", not(miri)))]
#[test]
fn an_init_that_makes_room_leaves_a_large_successor_unfaulted() {
    use crate::acker::table::Effects;
    let clock = ManualClock::new(0);
    let (acker, _log) = manual(&clock, 1 << 20);
    let engine = acker.engine();
    let active = engine.threads.enter();
    // Safety: inside the operation `active` marks.
    let old = unsafe { engine.tables.shards[0].current() };
    // Table 0 at 1,024 groups first: room makes it 2,048, 256 KiB of lines.
    let groups = 1024;
    assert!(old.groups() < groups);
    assert_eq!(
        engine.start_migration(0, old, groups, true, true),
        Some(true)
    );
    assert!(
        old.move_round(&mut Effects::default()),
        "an empty table moves at once"
    );
    engine.promote_moved(0);
    // Safety: inside the operation `active` marks.
    let current = unsafe { engine.tables.shards[0].current() };
    assert_eq!(current.groups(), groups);
    let grown = 2 * groups;
    assert!(
        crate::acker::table::Table::<u32>::line_bytes(grown)
            >= super::tables::growth::REAPER_BUILDS_FROM
    );
    let before = thread_faults();
    assert!(engine.make_room(0, current));
    let faults = thread_faults() - before;
    let next = current.successor().expect("room made");
    assert_eq!(next.groups(), grown);
    let pages = crate::acker::table::Table::<u32>::line_bytes(grown) / 4096;
    assert!(
        faults < pages as i64 / 4,
        "{faults} faults building a successor of {pages} pages"
    );
    drop(active);
}
