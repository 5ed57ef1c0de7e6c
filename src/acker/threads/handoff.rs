//! Lazy timer registration: each thread files the entries it creates in its own hand-off
//! list, and only the entries that outlive a hand-off age ever reach the reaper.
//!
//! Most trees complete soon after their first message. Registering a timer for each at
//! creation (a ring cell, a wheel node, a lock) costs every tree the reaper's attention and
//! lines shared with the reaper's core. Instead a thread that creates an entry (a new
//! root's claim, an orphan, a carried twin) appends `(slot, tag)` and its times ([`Due`]:
//! its *hand-off* tick, the acker's hand-off age after the first message or the tick
//! before the deadline if that is sooner, and the tick *by* which the reaper must have
//! it, the one before the deadline) to its hand-off list for this acker, with plain
//! stores. When its tick moves on (seen at its next push) the owner
//! filters the hand-off list: it drops the entries filed a moment ago (in the tick before,
//! or a settling period before: "The first look") whose slot no longer holds their root
//! (they completed; their lines are most likely still in this core's cache), and hands
//! those whose hand-off tick has come to the reaper's inbox under one lock, once a tick per
//! busy thread. Each entry is looked at twice at most: in its first look (most trees are
//! gone by then), and when its hand-off tick comes. (Looking
//! at every entry every tick made a thread that creates long-lived trees fast check each of
//! them once a tick for the whole hand-off age.) Survivors wait in hand-off order; one filed
//! with an earlier hand-off than those before it (a tree with a short timeout of its own)
//! goes to the reaper at its first look. A tree that completes within the hand-off age
//! never reaches the reaper, which does no work for it (handing it every tree older than
//! one tick would make a lifecycle of a millisecond cost the reaper's reads of lines the
//! workers are writing). The reaper reads its line only when a long-lived group mate comes
//! due ([`groups`](crate::acker::timers::groups)).
//!
//! ## Waking the reaper when it is due
//!
//! An entry handed off at its hand-off tick need not reach the reaper's wheel until the
//! tick before its deadline; an entry that waits in its hand-off list, only by then too.
//! So each hand-off list publishes the earliest tick by which the reaper must have one of
//! its entries (`Record::due`), and the inbox the earliest of those handed to it; the
//! reaper sleeps until the earliest of them all, its wheel's next due tick, or the
//! hand-off age ([`wake`](super::wake)), and at that tick takes over the hand-off lists
//! gone quiet and collects the inbox. (A reaper that looked every tick while any entry
//! waited would wake every tick in a service whose requests each live a few
//! milliseconds.) An owner still
//! busy when one of its entries is due hands it over at its next push, or goes quiet and
//! the reaper takes its list over: the reaper looks again a tick at a time until then.
//! (While callers lead, the reaper thread sleeps a lag past each tick it aims at, so it
//! aims that far before an entry's tick: [`reaper`](crate::acker::engine::reaper),
//! "Callers first".) A push of an entry due sooner than every other of
//! its list (a timeout of its own), and a hand-off that makes the inbox's tick earlier,
//! check whether the reaper is idle, and wake it if it sleeps past that tick; the pushes
//! of one timeout, in order, never do.
//!
//! The earliest tick of the fresh entries is kept as they are pushed; that of the aged
//! ones, which wait in hand-off order (not deadline order, when trees have timeouts of
//! their own), by a sliding window's minimum beside them: each aged entry's tick is kept
//! while no later-filed entry is due sooner, so the front is the earliest, at a
//! comparison or two a push and a pop.
//!
//! ## A thread that goes quiet
//!
//! A thread that stops pushing would strand its hand-off list, so the reaper takes over
//! hand-off lists whose entries are older than its tick. Owner and reaper meet in a Dekker
//! pair through asymmetric fences ([`fences`](crate::sync::fences)):
//!
//! ```text
//!   owner (every push)                     reaper (a quiet hand-off list, rarely)
//!   pin = true          (plain store)      taken = true
//!   light fence         (compiler fence)   heavy fence (membarrier)
//!   if taken: hand the entry to the inbox  if pin: taken = false, leave it (owner active)
//!   else: touch its list                   else: take the entries, taken = false
//!   pin = false         (release store)
//! ```
//!
//! Either the owner sees `taken` and keeps off its hand-off list, or the reaper sees the
//! pin and keeps off it: never both in it at once. The reaper's load of an unset pin reads
//! the owner's last `pin = false` (release), so the entries the owner wrote before it are
//! visible to the reaper; the owner's load of an unset `taken` reads the reaper's
//! `taken = false` (release) if the reaper was ever there, so the owner sees the hand-off
//! list the reaper emptied. The owner's cost per push: two plain stores, a compiler fence,
//! a load.
//!
//! ## The first look
//!
//! An entry that is live at its first look waits in the list until its hand-off tick, 25 to
//! 67 ms later, though its tree may complete a moment after the look. So the first look
//! should come once the short-lived trees are done, and a tick is not that long everywhere:
//! at the async acker's 2^18 ns (262 µs) a request that lived 200 µs was still live at the
//! next tick's look seven times in ten, and a thread that ran 6 million of them a second
//! held 4 MB of dead entries (`examples/track_instructions.rs`: 9.9 MB of peak RSS against
//! 4.8 MB with the settling below).
//!
//! Where a tick is finer than 2^20 ns, new entries therefore *settle* first
//! (`Threads::settling`): a list's fresh entries are those filed in the current *period*
//! of `settle` ticks (half of 2^20 ns), and when a filter finds the period over, the
//! entries of the period before it (the *settling* ones) get their first look, and the
//! fresh ones settle in turn. Each entry is thus looked at first between one and two
//! periods after it was filed, about 0.5 to 1 ms, and at most twice still. Where a tick is
//! 2^20 ns or coarser, or where two periods would not end well before the hand-off age
//! (the engine's `settle_ticks`), there is no settling: the first look is at the next
//! tick, as it is for a tick of 2^20 ns.
//!
//! An entry may have to be with the reaper before its first look (a timeout of its own,
//! shorter than the settling): the filter then hands off every fresh and settling entry
//! whose tick has come by, from the earliest of them that each list keeps (`Entries::
//! hand_off_young`), as the first look would have. A takeover takes the settling entries
//! with the others.
//!
//! ## Looking ahead
//!
//! An entry that survives its first look is looked at again only at its hand-off tick,
//! by when a thread that fills the acker fast (a burst of new roots) has long evicted its
//! line: each such look waits for memory. The filter therefore asks for the lines of the
//! aged entries [`LOOK_AHEAD`] places ahead of the one it checks
//! ([`Liveness::prefetch`]), so their misses overlap instead of queueing one behind the
//! other. A first look a tick after the filing does not: its entries were filed a moment
//! before, and their lines are most likely still in this core's cache. One after a settling
//! period does: in a burst of new trees (a million `track`s at 2^18 ns ticks) the lines of
//! a millisecond ago are gone, and without it the burst filled 1.13x slower than with the
//! look at the next tick (`cargo run --release -p stress -- acker --duration 1
//! --memory-roots 0 --growth-roots 0 --churn-trees 0 --deadline-roots 0`, `burst track`'s
//! fill time, three alternating pairs).

use super::{trim, Record, Threads, KEEP_ROOM};
use crate::acker::timers::ticks::{reached, Tick};
use crate::sync::{Arc, AtomicU32, MutexGuard, Ordering};

/// Entries the filter (and the reaper's filing) asks for ahead of the one it checks:
/// enough misses in flight to
/// fill a core's queue of them (10 to 16 on current x86 cores), few enough that the lines
/// asked for first are still in cache when their entry's turn comes.
pub const LOOK_AHEAD: usize = 8;

/// What a hand-off list's filter asks of the engine about an entry's slot. A closure that
/// answers [`live`](Liveness::live) is one (its prefetch does nothing), as the tests use.
pub trait Liveness {
    /// Whether the entry's slot still holds its root (or one being moved).
    fn live(&mut self, entry: &Entry) -> bool;

    /// Asks for the line [`live`](Liveness::live) will read for `entry` to be brought
    /// towards the caches, without waiting: a hint, which may do nothing.
    fn prefetch(&self, _entry: &Entry) {}
}

impl<F: FnMut(&Entry) -> bool> Liveness for F {
    fn live(&mut self, entry: &Entry) -> bool {
        self(entry)
    }
}

/// A new entry, for the reaper to find again: its slot (across the acker's tables) and a
/// tag: its table's generation and 18 bits of its root's key, which tell nearly every
/// stale entry apart cheaply (the reaper re-reads the slot's word and times anyway, so a
/// tag that matches a later root costs a look, never a wrong timeout). The tag's top bits
/// are zero, and lent to the reaper's wheel while the entry waits there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The slot, numbered across the acker's tables.
    pub slot: u32,
    /// Bits of the root's key (`Key::tag`, below `TAG_CHECK_BITS`) with the generation in
    /// the lowest; the rest zero.
    pub tag: u32,
}

/// When an entry must reach the reaper: its owner hands it over at `hand_off` if it is
/// still live then, and the reaper must have it by `by`, the tick before its deadline
/// ("Waking the reaper when it is due"). `hand_off` is never after `by`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Due {
    /// The tick at which the owner's filter hands the entry to the reaper.
    pub hand_off: Tick,
    /// The tick by which the reaper must have filed it on its wheel.
    pub by: Tick,
}

impl Due {
    /// The times of an entry that ages out at `aged` (its first message plus the hand-off
    /// age) and whose deadline is the tick after `last`: handed off at `aged`, or at
    /// `last` when that is sooner (a short timeout of its own).
    #[inline]
    pub fn new(aged: Tick, last: Tick) -> Due {
        Due {
            hand_off: if reached(aged, last) { aged } else { last },
            by: last,
        }
    }
}

/// An entry in a hand-off list, with its times.
#[derive(Clone, Copy, Debug)]
pub(super) struct Held {
    pub(super) entry: Entry,
    pub(super) due: Due,
}

/// A hand-off list's entries: those filed since the last filter (or, with a settling
/// period, in the current period and the one before it), and the survivors of their first
/// filter, in hand-off order; and the earliest tick by which the reaper must have one of
/// them, for its sleep ("Waking the reaper when it is due").
#[derive(Debug, Default)]
pub(super) struct Entries {
    /// Filed since the last filter, or with a settling period since `since`.
    pub(super) fresh: Vec<Held>,
    /// While there are fresh entries, the earliest `by` of them (no later than it, after a
    /// partial takeover).
    fresh_by: Tick,
    /// With a settling period: the entries filed in the period before `fresh`'s, waiting
    /// for their first look ("The first look").
    settling: Vec<Held>,
    /// As `fresh_by`, of the settling entries.
    settling_by: Tick,
    /// With a settling period: the tick the fresh entries' period began at.
    since: Tick,
    pub(super) aged: std::collections::VecDeque<Held>,
    /// The aged entries' `by`s that are the earliest of every entry from theirs to the
    /// back, in order (the sliding window's minimum): the front is the aged entries'
    /// earliest. Kept in step with `aged`, whose order is the hand-off's, not `by`'s (trees
    /// with timeouts of their own).
    aged_by: std::collections::VecDeque<Tick>,
}

impl Entries {
    fn len(&self) -> usize {
        self.fresh.len() + self.settling.len() + self.aged.len()
    }

    /// The earliest tick by which the reaper must have one of the entries not looked at
    /// yet (no later than it); `None` when there are none.
    fn earliest_young(&self) -> Option<Tick> {
        let fresh = (!self.fresh.is_empty()).then_some(self.fresh_by);
        let settling = (!self.settling.is_empty()).then_some(self.settling_by);
        match (fresh, settling) {
            (Some(a), Some(b)) => Some(earliest(a, b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest tick by which the reaper must have one of the entries (no later than
    /// it); `None` when there are none.
    fn earliest(&self) -> Option<Tick> {
        match (self.earliest_young(), self.aged_by.front()) {
            (Some(a), Some(&b)) => Some(earliest(a, b)),
            (a, b) => a.or(b.copied()),
        }
    }

    #[inline]
    fn push_fresh(&mut self, held: Held) {
        self.fresh_by = if self.fresh.is_empty() {
            held.due.by
        } else {
            earliest(self.fresh_by, held.due.by)
        };
        self.fresh.push(held);
    }

    /// Publishes the entries' earliest tick in `to` (`Record::due`) after some left (a
    /// filter, a takeover): what is left is due no sooner than before, so nothing the
    /// reaper relies on moves earlier and no fence is needed (module docs, "Waking the
    /// reaper when it is due").
    #[inline]
    fn publish_earliest(&self, to: &AtomicU32) {
        if let Some(due) = self.earliest() {
            to.store(due, Ordering::Relaxed); // Relaxed: a hint, as above
        }
    }

    #[inline]
    fn push_aged(&mut self, held: Held) {
        while self
            .aged_by
            .back()
            .is_some_and(|&b| !reached(b, held.due.by))
        {
            self.aged_by.pop_back();
        }
        self.aged_by.push_back(held.due.by);
        self.aged.push_back(held);
    }

    #[inline]
    fn pop_aged(&mut self) -> Option<Held> {
        let held = self.aged.pop_front()?;
        if self.aged_by.front() == Some(&held.due.by) {
            self.aged_by.pop_front();
        }
        Some(held)
    }

    /// The first look at the `young` entries (emptied), filed a tick or a settling period
    /// ago: those `live` says are not live are dropped, the others join the aged ones, or
    /// go into `due` when their hand-off tick has come by `now` or is before the last aged
    /// one's. With `ahead`, asks for the lines [`LOOK_AHEAD`] entries ahead of each look
    /// ("Looking ahead").
    fn first_look(
        &mut self,
        young: &mut Vec<Held>,
        ahead: bool,
        now: Tick,
        live: &mut impl Liveness,
        due: &mut Vec<Held>,
    ) {
        if ahead {
            for held in young.iter().take(LOOK_AHEAD) {
                live.prefetch(&held.entry);
            }
        }
        for i in 0..young.len() {
            if ahead {
                if let Some(next) = young.get(i + LOOK_AHEAD) {
                    live.prefetch(&next.entry);
                }
            }
            let held = young[i];
            if !live.live(&held.entry) {
                continue;
            }
            let in_order = self
                .aged
                .back()
                .map_or(true, |last| reached(last.due.hand_off, held.due.hand_off));
            if in_order && !reached(held.due.hand_off, now) {
                self.push_aged(held);
            } else {
                due.push(held);
            }
        }
        young.clear();
    }

    /// Moves into `due` the fresh and settling entries that must be with the reaper by
    /// `now` and are still live, dropping the dead among them: those whose first look
    /// would come too late.
    #[cold]
    fn hand_off_young(&mut self, now: Tick, live: &mut impl Liveness, due: &mut Vec<Held>) {
        for (young, by) in [
            (&mut self.fresh, &mut self.fresh_by),
            (&mut self.settling, &mut self.settling_by),
        ] {
            let mut left: Option<Tick> = None;
            young.retain(|held| {
                if !reached(held.due.by, now) {
                    left = Some(left.map_or(held.due.by, |l| earliest(l, held.due.by)));
                    return true;
                }
                if live.live(&held.entry) {
                    due.push(*held);
                }
                false
            });
            if let Some(left) = left {
                *by = left;
            }
        }
    }

    /// Moves at most `most` entries into `into`: the aged ones first (the earliest
    /// hand-offs), then the settling ones, then the latest fresh ones (from the end of
    /// each: what stays is not moved). How many it moved.
    fn take(&mut self, most: usize, into: &mut Vec<Entry>) -> usize {
        let aged = most.min(self.aged.len());
        into.extend((0..aged).filter_map(|_| self.pop_aged()).map(|h| h.entry));
        let mut took = aged;
        for young in [&mut self.settling, &mut self.fresh] {
            let n = (most - took).min(young.len());
            let from = young.len() - n;
            into.extend(young.drain(from..).map(|h| h.entry));
            took += n;
        }
        took
    }

    /// Gives back the room of a burst (a thread that filed a million entries in a tick
    /// keeps 12 MiB otherwise): each part keeps twice its length, at least [`KEEP_ROOM`].
    fn trim(&mut self) {
        let keep = |len: usize| (2 * len).max(KEEP_ROOM);
        for young in [&mut self.fresh, &mut self.settling] {
            if young.capacity() > 2 * keep(young.len()) {
                young.shrink_to(keep(young.len()));
            }
        }
        if self.aged.capacity() > 2 * keep(self.aged.len()) {
            self.aged.shrink_to(keep(self.aged.len()));
        }
        if self.aged_by.capacity() > 2 * keep(self.aged_by.len()) {
            self.aged_by.shrink_to(keep(self.aged_by.len()));
        }
    }
}

/// The earlier of two ticks (less than 2^31 apart).
#[inline]
pub(super) fn earliest(a: Tick, b: Tick) -> Tick {
    if reached(a, b) {
        a
    } else {
        b
    }
}

/// What a push asks of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Nothing.
    Filed,
    /// The reaper is idle (parked, or asleep on a timer), and the push made `by` the
    /// earliest tick by which it must have an entry of the hand-off list or of its inbox:
    /// wake it if it sleeps past `by` ("Waking the reaper when it is due").
    WakeReaper {
        /// The entry's (or a handed-off one's) tick.
        by: Tick,
    },
}

impl Threads {
    /// Files `entry`, created at tick `now` and due at the reaper as `due` says, in
    /// `record`, which must be the calling thread's. When the hand-off list was last
    /// filtered at an earlier tick, first drops the entries `live` says are not live and
    /// hands those whose hand-off tick has come to the reaper.
    #[inline]
    pub fn push_to(
        &self,
        record: &Record,
        entry: Entry,
        due: Due,
        now: Tick,
        live: impl Liveness,
    ) -> Pushed {
        let held = Held { entry, due };
        // Relaxed: ordered before the `taken` load by the light fence (module docs).
        record.pin.store(true, Ordering::Relaxed);
        self.fences.light();
        // Acquire: reads the reaper's release of `taken`, so the entries it emptied are
        // seen.
        if record.taken.load(Ordering::Acquire) {
            record.pin.store(false, Ordering::Release); // Release: as at the end below.
            let lowered = self.hand_off(std::iter::once(held));
            return self.wake_check(lowered);
        }
        let mut lowered = None;
        record.entries.with_mut(|entries| {
            // Safety: pinned, and `taken` was unset after the pin: the reaper keeps off the
            // entries until we unpin (module docs).
            let entries = unsafe { &mut *entries };
            // Relaxed: only this thread writes `tick`; the reaper's reading it stale only
            // delays a takeover.
            let filed = record.tick.load(Ordering::Relaxed);
            if filed != now {
                if entries.len() > 0 {
                    lowered = self.filter(entries, now, live);
                    entries.publish_earliest(&record.due);
                }
                record.tick.store(now, Ordering::Relaxed); // Relaxed: as above.
            }
            // Due sooner than every entry of the list (or its first): the list's earliest
            // tick becomes the entry's, which the reaper must not sleep past. Otherwise
            // the tick published stays the earliest: nothing to publish or check.
            // Relaxed (both): this thread's own store, or the reaper's read through
            // `taken` above; a hint for the reaper, ordered by `wake_check`'s fence.
            if entries.len() == 0 || !reached(record.due.load(Ordering::Relaxed), due.by) {
                record.due.store(due.by, Ordering::Relaxed);
                lowered = Some(lowered.map_or(due.by, |l| earliest(l, due.by)));
            }
            entries.push_fresh(held);
            // Relaxed: a hint for the reaper's checks; the fence in `wake_check` orders the
            // tick that matters (an earlier one) before the `idle` load.
            record.len.store(entries.len(), Ordering::Relaxed);
        });
        // Release: the entries written above happen before a takeover that reads this.
        record.pin.store(false, Ordering::Release);
        self.wake_check(lowered)
    }

    /// The tick's filter (module docs): the first look, at the entries whose turn it is
    /// (the fresh ones; with a settling period, the settling ones once the fresh ones'
    /// period is over, "The first look"): those `live` says are not live are dropped, the
    /// others join the aged ones (or go to the reaper now, if due before the last aged one);
    /// then the aged ones whose hand-off tick has come by `now` and are still live go to the
    /// reaper. The inbox's new earliest tick, if it is earlier
    /// ([`hand_off`](Self::hand_off)).
    #[cold]
    fn filter(&self, entries: &mut Entries, now: Tick, mut live: impl Liveness) -> Option<Tick> {
        let mut due = Vec::new();
        if self.settle == 0 {
            // No look-ahead: the entries were filed in the tick before, and their lines
            // are most likely still in this core's cache.
            let mut fresh = std::mem::take(&mut entries.fresh);
            entries.first_look(&mut fresh, false, now, &mut live, &mut due);
            entries.fresh = fresh; // its room, for the next tick's entries
        } else if reached(entries.since.wrapping_add(self.settle), now) {
            // Looking ahead: filed up to a millisecond ago, their lines may have left this
            // core's cache in a burst ("Looking ahead").
            let mut settling = std::mem::take(&mut entries.settling);
            entries.first_look(&mut settling, true, now, &mut live, &mut due);
            // The fresh entries settle for a period; the emptied room takes the next ones.
            entries.settling = std::mem::replace(&mut entries.fresh, settling);
            entries.settling_by = entries.fresh_by;
            entries.since = now;
        }
        if entries.earliest_young().is_some_and(|by| reached(by, now)) {
            // An entry not looked at yet must be with the reaper by now (a timeout of its
            // own, shorter than the settling).
            entries.hand_off_young(now, &mut live, &mut due);
        }
        let is_due = |held: &&Held| reached(held.due.hand_off, now);
        for held in entries.aged.iter().take(LOOK_AHEAD).take_while(is_due) {
            live.prefetch(&held.entry);
        }
        while let Some(&held) = entries.aged.front().filter(is_due) {
            if let Some(ahead) = entries.aged.get(LOOK_AHEAD).filter(is_due) {
                live.prefetch(&ahead.entry);
            }
            if live.live(&held.entry) {
                due.push(held);
            }
            entries.pop_aged();
        }
        entries.trim();
        if due.is_empty() {
            None
        } else {
            self.hand_off(due.into_iter())
        }
    }

    /// Hands entries to the reaper's inbox: the inbox's earliest tick by which the reaper
    /// must have one, when they made it earlier (or the inbox was empty), for the caller's
    /// [`wake_check`](Self::wake_check).
    pub(super) fn hand_off(&self, entries: impl Iterator<Item = Held>) -> Option<Tick> {
        let mut inbox = self.inbox.lock().unwrap();
        // Relaxed (all three): written under this lock; hints for the reaper's checks,
        // whose ordering the caller's `wake_check` gives.
        let was = (!inbox.is_empty()).then(|| self.inbox_due.load(Ordering::Relaxed));
        let mut by = was;
        inbox.extend(entries.map(|held| {
            by = Some(by.map_or(held.due.by, |b| earliest(b, held.due.by)));
            held.entry
        }));
        let by = by?;
        self.inbox_due.store(by, Ordering::Relaxed);
        self.inbox_len.store(inbox.len(), Ordering::Relaxed);
        was.map_or(true, |was| !reached(was, by)).then_some(by)
    }

    /// The reaper: moves into `into` everything handed off, and the entries of every
    /// hand-off list filed before tick `now` whose owner is not inside it (all hand-off
    /// lists' entries when `everything`: manual mode, where the caller's own hand-off list
    /// must be seen too). Drops abandoned, empty hand-off lists. Called under the reaper's
    /// wheel lock: one at a time.
    pub fn collect(&self, now: Tick, everything: bool, into: &mut Vec<Entry>) {
        {
            let mut inbox = self.inbox.lock().unwrap();
            // Owners hand off under this lock: held for a swap of vectors, not a copy of
            // a burst's entries.
            if into.is_empty() {
                std::mem::swap(&mut *inbox, into);
            } else {
                into.append(&mut inbox);
                trim(&mut inbox);
            }
            // Relaxed: a hint, under the lock.
            self.inbox_len.store(0, Ordering::Relaxed);
        }
        let all = self.all.lock().unwrap();
        self.take_quiet(all, now, everything, usize::MAX, into);
    }

    /// [`collect`](Self::collect) for a caller running the reaper's pass: at most `most`
    /// entries, the latest handed off first (from the inbox's end, so the cost is theirs
    /// alone), then those of quiet hand-off lists in the lists' order; and nothing behind a
    /// lock another thread holds (the reaper thread's own collect, an owner's hand-off).
    /// `true` when it left some. (The inbox's published tick stays that of everything
    /// handed to it since it was last emptied: early, never late, for what a part leaves.)
    pub fn collect_within(&self, now: Tick, most: usize, into: &mut Vec<Entry>) -> bool {
        let mut room = most;
        let left = match self.inbox.try_lock() {
            Ok(mut inbox) => {
                let from = inbox.len().saturating_sub(room);
                room -= inbox.len() - from;
                into.extend(inbox.drain(from..));
                // Relaxed: a hint, under the lock.
                self.inbox_len.store(inbox.len(), Ordering::Relaxed);
                from > 0
            }
            // Relaxed: a hint.
            Err(_) => self.inbox_len.load(Ordering::Relaxed) > 0,
        };
        match self.all.try_lock() {
            Ok(all) => self.take_quiet(all, now, false, room, into) || left,
            Err(_) => true,
        }
    }

    /// The takeover of quiet hand-off lists (module docs, "A thread that goes quiet"): at
    /// most `room` entries into `into`; `true` when it left some. Drops abandoned, empty
    /// hand-off lists.
    fn take_quiet(
        &self,
        mut all: MutexGuard<'_, Vec<Arc<Record>>>,
        now: Tick,
        everything: bool,
        mut room: usize,
        into: &mut Vec<Entry>,
    ) -> bool {
        let mut left = false;
        // Relaxed (both loads): hints; the takeover below decides under the protocol.
        // Quiet: not pushed to for a whole tick. (Its tick merely older than `now` is not
        // enough: a reaper woken at a tick's start would take the hand-off list of a thread
        // busy in it, whose next push was a few nanoseconds away, and then read the lines
        // of its trees, which mostly complete a moment later.)
        let quiet = |b: &Arc<Record>| {
            b.len.load(Ordering::Relaxed) > 0
                && (everything || reached(b.tick.load(Ordering::Relaxed).wrapping_add(2), now))
        };
        if all.iter().any(quiet) {
            if room == 0 {
                return true;
            }
            for record in all.iter().filter(|b| quiet(b)) {
                // Relaxed: ordered before the pin loads by the heavy fence below.
                record.taken.store(true, Ordering::Relaxed);
            }
            let fenced = self.heavy();
            for record in all.iter().filter(|b| b.taken.load(Ordering::Relaxed)) {
                // Acquire: reads the owner's last unpin, after its entries' writes.
                // (Without the barrier a pin may not be visible yet: the hand-off list
                // stays with its owner.)
                if fenced && !record.pin.load(Ordering::Acquire) {
                    record.entries.with_mut(|entries| {
                        // Safety: `taken` was set before the heavy fence and the owner is
                        // not pinned after it, so it keeps off until we unset `taken`.
                        let entries = unsafe { &mut *entries };
                        let took = entries.take(room, into);
                        room -= took;
                        left |= entries.len() > 0;
                        entries.trim();
                        entries.publish_earliest(&record.due);
                        record.len.store(entries.len(), Ordering::Relaxed); // Relaxed: a hint
                    });
                }
                // Release: the owner that reads this sees the entries we emptied.
                record.taken.store(false, Ordering::Release);
            }
        }
        // An abandoned record goes once empty, and once its hand of credits is reclaimed
        // (`reclaim_hands`); its counts stay, in the shared set.
        all.retain(|b| {
            let goes = b.abandoned.load(Ordering::SeqCst)
                && b.len.load(Ordering::SeqCst) == 0
                && b.hand.load(Ordering::SeqCst) == 0;
            if goes {
                self.counters.fold(&b.counters);
            }
            !goes
        });
        left
    }
}
