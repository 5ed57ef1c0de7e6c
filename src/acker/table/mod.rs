//! The Acker's table: a lock-free hash table of root words.
//!
//! One table holds the roots whose mixed hash falls in its range (the acker keeps at least
//! `1 << KEY_SHIFT` tables, so a [`Key`] names its root within one). Each slot is one
//! 16-byte [`SlotWord`] (key, state and XOR value: see [`word`]) and, apart, the payload
//! cell its init writes. Four words fill a cache line, a *group*; a root's *home* group is
//! its key's top bits, so an ack is a hash, a load of one line and one 128-bit CAS on it.
//!
//! ## Finding a root
//!
//! A root lives in its home group or, when that was full, in one of the next
//! [`MAX_PROBE`] groups. A claimer `d` groups past home first adds one to the *overflow
//! count* of each of the `d` groups it passes, then CASes its word into an EMPTY slot; a
//! slot emptied again (freed, dropped, merged) takes them off. A search walks on past a
//! group only while its count is non-zero, so an entry that exists when a search starts is
//! always reached. Because counts, not tombstones, keep the probe sequences whole, a freed
//! slot is EMPTY at once and the next claimer may take it.
//!
//! ## No grace period
//!
//! A slot's word is only ever changed by a CAS that expects the whole word, key included.
//! An operation that found root A's word and is about to CAS it cannot, after A's slot was
//! freed and reused by root B, change B's word: the CAS fails, and the operation looks for
//! A again. Nothing a thread holds across operations points into the table, so slots are
//! reused without waiting for anyone. (Growth retires whole tables, [`migrate`]: that is
//! the only place a pin is needed.)
//!
//! ## Twin claims
//!
//! Two threads that find no entry for a new root may both claim a slot for it, when a slot
//! that one of them passed was freed in between: two *twin* entries. Every claimer
//! therefore searches again after its claim (every access SeqCst: of two claimers, at least
//! one sees the other's word, since each wrote its counts and its word before reading) and
//! the twins are merged lock-free: the *loser* is CASed to EMPTY by whoever sees the pair
//! first (either claimer), and its contents (value and held fail) are applied to the winner
//! as an ack and a fail would be. The CAS on the loser decides who carries them, so they
//! are applied once; an ack that was about to XOR into the loser finds its CAS failing and
//! goes to the winner. The winner is the entry init has joined (JOINING or LIVE) if there
//! is one, else the first in probe order.
//!
//! Init claims a new root JOINING with its XOR in and writes its payload only after the
//! search that follows the claim finds no twin; when it finds one, it takes its XOR back
//! out (JOINING to HELD) and joins whatever the merge leaves, again only after a search
//! that finds no twin ([`init`]). So a payload is never in a loser, and two joined entries
//! of one root are never both kept. A merger's judgement can therefore be stale: a new
//! claim that it saw JOINING may unjoin and then lose by probe order to the very entry
//! judged against it, and both words go EMPTY. So a loser's slot stays reserved (times,
//! counts, credit) until its contents land, and holds them again if the root has no entry
//! left: a carry never needs room or a credit, and nothing it holds is dropped ([`twins`]).
//!
//! A twin is merged by its claimer only after its claim, and a message that finds it
//! first (a HELD entry: the search returns the first entry in probe order) lands there.
//! The tree's joined entry may be anywhere in the window: before the twin (claimed in a
//! slot freed after the tree's claimer passed it) or after it (in a slot the message's
//! search passed before the tree's claim). Had the message returned with its change
//! there, an ack completing the tree before the merge, even one sent after this message
//! returned, would complete it without it: Acked after a fail, or with the XOR of the
//! tree's messages not 0 (the tests `a_fail_on_an_unmerged_twin_after_the_tree_...` and
//! `..._before_the_tree_...`). So an ack or a fail that lands in a HELD entry searches
//! for twins in its table and merges them before it returns, as a claimer does. Of the
//! message (its CAS, then its search) and a new claim of the tree in the same table (its
//! CAS, then its twin search), at least one sees the other; an entry joined meanwhile was
//! found twinless by its joiner, or had its twin merged by that twin's claimer, which
//! searches after its claim. The fast path (`apply_found`) leaves a HELD entry to
//! `apply`. A claimer or message whose own entry another thread's merge has emptied waits
//! for that merge to land before it returns ([`InFlight`]): until then what its entry held
//! is in no slot a search sees.
//!
//! Left open: (1) an init's check for twins before it joins or settles can run while a
//! merge holds a twin's contents in flight; the tree then settles without them, and a
//! completion before the merge lands leaves them out (the merge puts them back as an
//! orphan; the loom model `roots_fail_in_a_twin_reaches_the_tree_before_it_returns`
//! reaches this at 4 preemptions). An init that waited for merges under way before
//! settling was tried: the model then found a schedule that never ends. A merge whose
//! contents every check can see (the loser's word kept, marked, until its contents land)
//! would close it. (2) Across a migration: a HELD entry in the old table and the tree in
//! the successor (or the other way round, the tree not yet moved) are merged only when
//! the HELD entry moves, by its claimer or a mover, and a message that lands in it
//! meanwhile merges in its own table only.
//!
//! A merge moves a root's contents from one slot to another, possibly one earlier in
//! probe order, so a search that walks the slots once can pass the winner before the
//! contents land and reach the loser after it went EMPTY. Searches that create (an ack, an
//! init) then claim a twin, which is merged in turn; a reset, which creates nothing, would
//! report a pending root missing and lose its new deadline. The table therefore counts
//! merges started and merges whose contents landed ([`InFlight`]), and a reset that found
//! nothing looks again if a merge overlapped its walk ([`times`]).

// This file: a table's layout and the message path (ack and fail). Beside it:
// [`group`](crate::acker::table::group) (a slot word's atomic accesses and a group's
// match of a key), [`probe`](crate::acker::table::probe) (search, claim, empty: the probe
// window and its overflow counts), [`init`](crate::acker::table::init) (init's join and
// settle),
// [`twins`](crate::acker::table::twins) (merging twin claims),
// [`taking`](crate::acker::table::taking) (a completion's payload and free, shutdown's
// take-back), [`migrate`](crate::acker::table::migrate) (growth),
// [`lines`](crate::acker::table::lines) (memory), [`times`](crate::acker::table::times) (a
// slot's ticks, the reaper's expiry and resets), [`effects`](crate::acker::table::effects)
// (what an operation reports).
/// A named point of a protocol where a test may stop its thread (`tests::pauses`): a
/// schedule of racing threads run by hand. Nothing outside the table's tests.
macro_rules! pause_point {
    ($point:ident) => {
        #[cfg(all(test, not(loom)))]
        {
            use crate::acker::table::tests::pauses;
            pauses::at(pauses::Point::$point);
        }
    };
}

mod effects;
mod group;
mod init;
pub(in crate::acker) mod lines;
pub(in crate::acker) mod migrate;
mod probe;
mod taking;
pub(in crate::acker) mod times;
pub use times::Judge;
mod twins;
pub(crate) mod word;
pub use crate::acker::timers::ticks::{reached, Tick};
pub use effects::{Completed, Effects};
use group::Match;
pub(crate) use group::SlotWord;
use probe::{Credit, Search, Unclaimed, Vacancy};
pub use times::Stamp;
use twins::InFlight;

use crate::acker::bound::Credits;
use crate::acker::outcome::Outcome;
use crate::acker::table::word::{Key, Phase, Step, Word, KEY_SHIFT};
use crate::acker::timers::dirty::DirtyGroups;
use crate::sync::{Arc, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Cpu, Ordering};
use lines::{Group, Lines, Payload, Side};

/// Words per group: four 16-byte words fill a 64-byte line.
#[cfg(not(loom))]
pub const GROUP_SLOTS: usize = 4;
/// Under loom two, so models reach full groups and overflow in a few steps.
#[cfg(loom)]
pub const GROUP_SLOTS: usize = 2;

/// How many groups past its home a root may live. A full acker's tables sit at a load of
/// 4/5 (the `engine` module), where linear probing's clusters run to a couple
/// of hundred slots: with 31 groups, roots whose clustered window was full grew the tables
/// past that load (1M pending: 46 B of table per root; with 63, 41). A search still stops
/// at the first group whose overflow count is 0, so a longer window costs only the roots
/// that use it.
#[cfg(not(loom))]
pub const MAX_PROBE: usize = 63;
// A group's overflow count (a `u16`) holds the entries of the groups before it, plus one
// claim under way per thread.
const _: () = assert!(MAX_PROBE * GROUP_SLOTS <= 1 << 10);
/// A claim this many groups past home reports its table crowded (`Effects::crowded`).
const CROWDED_DISTANCE: usize = 2;
/// Under loom one, so models overflow in a few steps.
#[cfg(loom)]
pub const MAX_PROBE: usize = 1;

/// What an operation did to its root's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Applied to the root's entry (or completed it: see [`Completed`]).
    Changed,
    /// No entry: a new one (HELD) holds the message.
    Created,
    /// No entry, and no EMPTY slot in the root's window (or no credit).
    Full,
    /// No entry, and the caller asked not to create one (growth: look in the successor).
    Missing,
    /// The root's entry is being moved, or was moved, to the successor: start again from
    /// the acker's current table (the `migrate` module). The message was not applied.
    Retry,
}

/// What `Table::expire` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// The root's entry is no longer in the slot: nothing to do.
    Gone,
    /// A HELD orphan was dropped silently; its slot is EMPTY.
    Dropped,
    /// A LIVE tree timed out; the completion is in `effects`.
    TimedOut,
    /// Init is joining: look again shortly.
    Joining,
    /// The deadline the slot holds now is later than the reaper's tick: file it again.
    NotDue(Tick),
}

/// What `Table::init` could not do; the payload comes back.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused<T> {
    /// The root is already initialized (or being initialized).
    Duplicate(T),
    /// No entry, and no EMPTY slot in the root's window (or no credit).
    Full(T),
    /// No entry, and the caller asked not to create one.
    Missing(T),
    /// The root's entry is moving to the successor: start again (see [`Applied::Retry`]).
    Retry(T),
}

/// What a message changes in a root's entry (or holds in a new one): an ack's XOR, a fail,
/// or a twin's contents. (The public [`Message`](crate::Message) of a batch names its root
/// too; the engine places the root and hands the table this.)
#[derive(Clone, Copy, Debug)]
pub enum Change {
    /// An ack's XOR.
    Ack(u64),
    /// A fail.
    Fail,
    /// A twin's contents, carried to the entry that absorbs it, and its base tick (a
    /// reset that landed on the twin moved it: the absorbing entry's base moves too).
    Twin(Word, Tick),
}

impl Change {
    #[inline]
    fn step(self, word: Word) -> Option<Step> {
        match self {
            Change::Ack(xor) => word.acked(xor),
            Change::Fail => word.failed(),
            Change::Twin(twin, _) => word.absorbed(twin),
        }
    }

    #[inline]
    fn held(self, key: Key) -> Word {
        match self {
            Change::Ack(xor) => Word::held_ack(key, xor),
            Change::Fail => Word::held_fail(key),
            Change::Twin(twin, _) => twin,
        }
    }
}

/// One table of root words. See the module docs.
pub struct Table<T> {
    /// Per group, its words and its slots' side data: times (and the slot's reservation,
    /// [`times`]), the tree's own timeout in ticks (0 for the acker's default; written by
    /// the claimer, 0, before its claim publishes it, and by a joining init) and the
    /// payload ([`lines`]).
    lines: Lines<T>,
    /// Per group, the entries living past it (module docs): at most [`MAX_PROBE`] groups of
    /// entries, plus claims under way, so 16 bits are ample.
    overflow: Box<[AtomicU16]>,
    /// Groups in the table: any number from 2 (a home is a multiply and a shift, so
    /// growth need not double).
    groups: usize,
    /// Twin entries merged, ever (rare: counted here, not on the hot path's lines).
    merged: AtomicU64,
    /// Merges whose contents are in flight, for a reset that finds nothing (module docs).
    in_flight: InFlight,
    /// The path of this CPU's accesses to the words ([`Cpu`]), found at build: read here,
    /// beside the fields an operation reads anyway, rather than from a static at each
    /// access.
    cpu: Cpu,
    /// The acker's `max_pending` credits: a claim takes one, emptying its slot gives it
    /// back, so an entry holds one exactly while its slot is reserved (an entry moved by
    /// growth keeps its credit). `None`: unbounded.
    credits: Option<Arc<Credits>>,
    /// The timeout, in ticks, of a tree whose init gave none (and of orphans).
    default_timeout: Tick,
    /// This table's generation: its predecessor's plus one (timer entries name it).
    gen: u32,
    /// The successor entries move to once growth (or shrink) began; null before. Set
    /// once; it owns nothing ([`engine`](crate::acker::engine) owns every generation).
    next: AtomicPtr<Table<T>>,
    /// Migration: the next group to move (a hint that spreads helpers over the groups).
    cursor: AtomicUsize,
    /// Migration: a bit per group, set once it holds only EMPTY and MOVED words.
    clean: Box<[AtomicU64]>,
    /// Migration: groups clean.
    clean_groups: AtomicUsize,
    /// The groups that got an entry since the reaper last scanned them: how a new root is
    /// registered with the reaper ([`dirty`](crate::acker::timers::dirty)).
    dirty: DirtyGroups,
}

// Safety: the payload cells are the only non-Sync parts. A cell is written only by the
// thread whose claim or join CAS made the slot JOINING and read only by the thread whose
// CAS completed the tree, after the settle CAS that published the write, and before that
// thread's free ends the slot's reservation (see `init`, `take` and `free`), so no two
// threads touch one at once. `T: Send` because payloads move between threads.
unsafe impl<T: Send> Sync for Table<T> {}
// Safety: as above; the table owns its payloads.
unsafe impl<T: Send> Send for Table<T> {}

impl<T> Table<T> {
    /// A table of `groups` groups (at least 2), without a bound.
    /// Its default timeout is 0 ticks: a deadline is its base.
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn new(groups: usize) -> Self {
        Self::bounded(groups, None, 0, false)
    }

    /// A table of `groups` groups whose entries each hold one of `credits`.
    ///
    /// Every part starts all zero (EMPTY words, free times, zero counts), so the memory
    /// comes from `alloc_zeroed`: the allocator maps zeroed pages, and a page costs memory
    /// only once a slot on it is used. The timeout of trees whose init gives none is
    /// `default_timeout` ticks. With `populate`, the lines' pages are faulted in at once (a
    /// growing table's successor, whose every page the moves reach:
    /// [`zeroed`](crate::zeroed), "Pages written at once").
    pub(super) fn bounded(
        groups: usize,
        credits: Option<Arc<Credits>>,
        default_timeout: Tick,
        populate: bool,
    ) -> Self {
        assert!(groups >= 2, "{groups} groups");
        // Safety: for each `zeroed`, an all-zero `AtomicU32` and `AtomicU64` is a valid
        // value equal to what its `make` builds.
        unsafe {
            Table {
                lines: Lines::zeroed(groups, populate),
                overflow: zeroed(groups, || AtomicU16::new(0)),
                clean: zeroed(groups.div_ceil(64), || AtomicU64::new(0)),
                groups,
                merged: AtomicU64::new(0),
                in_flight: InFlight::default(),
                cpu: Cpu::get(),
                credits,
                default_timeout,
                gen: 0,
                next: AtomicPtr::new(std::ptr::null_mut()),
                cursor: AtomicUsize::new(0),
                clean_groups: AtomicUsize::new(0),
                dirty: DirtyGroups::new(groups),
            }
        }
    }

    /// Where the table's lines are and their bytes: for tests that ask the kernel which of
    /// their pages are resident.
    #[cfg(all(test, target_os = "linux", not(miri)))]
    pub(in crate::acker) fn lines_span(&self) -> (*const u8, usize) {
        (
            self.lines.as_ptr().cast(),
            std::mem::size_of_val::<[_]>(&self.lines),
        )
    }

    /// Bytes of lines a table of `groups` groups maps (its overflow counts apart).
    pub fn line_bytes(groups: usize) -> usize {
        groups * std::mem::size_of::<lines::Line<T>>()
    }

    /// Bytes the table holds (its lines, overflow counts, and a bit per group for the
    /// migration and one for the reaper's scan).
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn bytes(&self) -> usize {
        self.lines.len() * std::mem::size_of::<lines::Line<T>>()
            + self.overflow.len() * std::mem::size_of::<AtomicU16>()
            + std::mem::size_of_val::<[AtomicU64]>(&self.clean)
            + self.dirty.heap_bytes()
    }

    /// Slots in the table.
    pub fn slots(&self) -> usize {
        self.lines.len() * GROUP_SLOTS
    }

    /// A slot's side data.
    #[inline]
    fn side(&self, slot: usize) -> &Side<T> {
        &self.lines[slot / GROUP_SLOTS].sides[slot % GROUP_SLOTS]
    }

    /// A slot's word and side data, for an operation that reaches several of a slot's
    /// parts: the lines are indexed (and bounds-checked) once. Apart, each part is indexed
    /// again after the atomic access before it, across which the compiler keeps neither
    /// the table's fields nor the address.
    #[inline]
    fn parts(&self, slot: usize) -> (&SlotWord, &Side<T>) {
        let line = &self.lines[slot / GROUP_SLOTS];
        let i = slot % GROUP_SLOTS;
        (&line.group.0[i], &line.sides[i])
    }

    /// A slot's times ([`times`]).
    #[inline]
    fn times_of(&self, slot: usize) -> &AtomicU64 {
        &self.side(slot).times
    }

    /// A slot's own timeout cell.
    #[inline]
    fn timeout_cell(&self, slot: usize) -> &AtomicU32 {
        &self.side(slot).timeout
    }

    /// A slot's payload cell.
    #[inline]
    fn payload(&self, slot: usize) -> &Payload<T> {
        &self.side(slot).payload
    }

    /// Groups in the table.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// The groups that got an entry since the reaper last scanned them
    /// ([`dirty`](crate::acker::timers::dirty)).
    #[inline]
    pub(in crate::acker) fn dirty(&self) -> &DirtyGroups {
        &self.dirty
    }

    /// This table's generation (see the field).
    pub fn gen(&self) -> u32 {
        self.gen
    }

    /// Whether a match of a root's group tries word 0 first, with a branch
    /// ([`Group::find`](lines::Group::find)): in the tables an acker starts with
    /// (generation 0), whose load is low for as long as they are not outgrown, most entries
    /// sit in word 0 and the branch is predicted. A successor is built for a load of a
    /// quarter or more (3/8 after growth), where most entries sit past word 0, so its
    /// matches take no branch on the word. (A generation number that wrapped to 0 only
    /// picks the other way of matching.)
    #[inline]
    fn first_word_first(&self) -> bool {
        self.gen == 0
    }

    /// A table to move this one's entries to: `groups` groups, the next generation, the
    /// same credits and default timeout. With `fault_in`, its pages are faulted in at once,
    /// for a successor whose every page the moves reach ([`zeroed`](crate::zeroed), "Pages
    /// written at once"); without it (built in the call of an init that found no room,
    /// which must not wait for the kernel to zero a large table, or a sparse shrink's),
    /// they are left to fault as their entries need.
    pub fn successor_of(&self, groups: usize, fault_in: bool) -> Self {
        let mut next = Self::bounded(groups, self.credits.clone(), self.default_timeout, fault_in);
        next.gen = self.gen.wrapping_add(1);
        next
    }

    #[inline]
    fn claimed(&self, effects: &mut Effects, slot: usize, key: Key, outcome: Outcome) {
        effects.push(Completed {
            slot,
            key,
            outcome,
            gen: self.gen,
        });
    }

    /// Every slot EMPTY and every overflow count 0: nothing is left behind (for tests and
    /// models; it reads the whole table).
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn is_clear(&self) -> bool {
        (0..self.slots()).all(|slot| self.word(slot).load_on(self.cpu) == Word::EMPTY)
            && (0..self.slots()).all(|slot| self.times_of(slot).load(Ordering::SeqCst) == 0)
            && self.overflow.iter().all(|c| c.load(Ordering::SeqCst) == 0)
    }

    /// Twin entries merged since the table was built.
    pub fn merged(&self) -> u64 {
        self.merged.load(Ordering::Relaxed) // Relaxed: a statistic.
    }

    /// The key's home group: its top bits scaled to the group count (multiply and shift;
    /// with a power of two of groups, exactly the key's top bits).
    #[inline]
    fn home(&self, key: Key) -> usize {
        let top = u128::from(key.bits() << KEY_SHIFT);
        ((top * self.groups as u128) >> 64) as usize
    }

    /// `group`, which is less than twice the group count, wrapped around the table.
    #[inline]
    fn wrap(&self, group: usize) -> usize {
        if group >= self.groups {
            group - self.groups
        } else {
            group
        }
    }

    /// A slot's word.
    #[inline]
    pub(crate) fn word(&self, slot: usize) -> &SlotWord {
        &self.lines[slot / GROUP_SLOTS].group.0[slot % GROUP_SLOTS]
    }

    /// A group of words.
    #[inline]
    fn group(&self, group: usize) -> &Group {
        &self.lines[group].group
    }

    /// An ack: XORs `xor` into the root's value, or holds it in a new entry.
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn ack(&self, key: Key, xor: u64, effects: &mut Effects) -> Applied {
        self.apply(key, Change::Ack(xor), true, effects)
    }

    /// A fail: completes an initialized tree `Failed`, or is held until init.
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn fail(&self, key: Key, effects: &mut Effects) -> Applied {
        self.apply(key, Change::Fail, true, effects)
    }

    /// The common case of [`apply`](Self::apply): the root's entry exists and one CAS
    /// applies `message`. `None` when anything else is needed (no entry, a CAS lost, a
    /// frozen entry, a HELD entry, whose message must then merge its twins, a twin's
    /// contents): the caller then calls `apply`, which starts again from the search, so
    /// nothing was changed.
    ///
    /// It is `apply`'s own first step, the same walk of the window and the same CAS,
    /// without the general path's frame (its `Effects`, a migration's help, the timer
    /// filing): an entry displaced from its home group (a quarter to a third of them in a
    /// table near its brim) takes this path too, not only one at home.
    #[inline]
    pub fn apply_found(&self, key: Key, message: Change) -> Option<Option<Completed>> {
        if let Change::Twin(..) = message {
            return None; // a twin's reset moves the base first
        }
        // The home group inline (most entries are there), the rest of the window out of
        // line; either way the first word of the key in probe order, if it is an entry.
        let home = self.home(key);
        let group = self.group(home);
        let (slot, cell, word) = match group.find(key, self.cpu, self.first_word_first()) {
            Match::Holds(i, word) => (home * GROUP_SLOTS + i, &group.0[i], word),
            Match::Odd => return None,
            Match::Absent => {
                let (slot, word) = self.find_displaced(key, home)?;
                (slot, self.word(slot), word)
            }
        };
        if word.state().phase() == Some(Phase::Held) {
            // An orphan, maybe a twin: `apply` lands the message and merges (module docs,
            // "Twin claims").
            return None;
        }
        let step = message.step(word)?;
        cell.cas_on(self.cpu, word, step.word()).ok()?;
        Some(match step {
            Step::To(_) => None,
            Step::Complete(_, outcome) => Some(Completed {
                slot,
                key,
                outcome,
                gen: self.gen,
            }),
        })
    }

    /// [`apply_found`](Self::apply_found)'s entry outside its home group, whose words hold
    /// none of the key: the groups after `home` that `search` would visit (while the last
    /// one passed has a non-zero overflow count), matched as the home group was. Out of
    /// line, and without `search`'s vacancy and FROZEN bookkeeping, which an ack that
    /// finds its entry never needs (a group whose first word of the key is not an entry
    /// sends the ack to `apply`, as at home).
    #[inline(never)]
    fn find_displaced(&self, key: Key, home: usize) -> Option<(usize, Word)> {
        // `walk(home).skip(1)` written out: the iterator's state made the ack at 64k
        // pending 3-4 % slower (33.3 -> 34.5 ns, three alternating pairs).
        let mut group = home;
        for _ in 0..self.window() {
            if self.overflow[group].load(Ordering::SeqCst) == 0 {
                return None;
            }
            group = self.wrap(group + 1);
            match self
                .group(group)
                .find(key, self.cpu, self.first_word_first())
            {
                Match::Holds(i, word) => return Some((group * GROUP_SLOTS + i, word)),
                Match::Odd => return None,
                Match::Absent => {}
            }
        }
        None
    }

    /// Applies `message` to the root's entry with the word's transition, CASing until it
    /// lands; with no entry, holds it in a new one (unless not `create`) and merges any
    /// twin. A new entry in a table whose migration has begun moves to the successor at
    /// once ([`migrate`]); a FROZEN entry is waited for, then [`Applied::Retry`].
    pub fn apply(&self, key: Key, message: Change, create: bool, effects: &mut Effects) -> Applied {
        loop {
            let (slot, mut word) = match self.search(key, None) {
                Search::Found(slot, word) => (slot, word),
                Search::Frozen(slot, word) => {
                    self.await_moved(slot, word);
                    return Applied::Retry;
                }
                Search::Missing(_) if !create => return Applied::Missing,
                Search::Missing(vacancy) => {
                    pause_point!(BeforeMessageClaim);
                    match self.claim(key, message.held(key), vacancy, effects) {
                        Ok(slot) => {
                            self.created(key, slot, effects);
                            return Applied::Created;
                        }
                        Err(Unclaimed::Raced) => continue,
                        Err(_) => return Applied::Full,
                    }
                }
            };
            while let Some(step) = message.step(word) {
                if let Change::Twin(twin, base) = message {
                    if twin.state().reset() {
                        // The twin's reset is the tree's: its base first, as a reset's.
                        self.move_base(slot, |b| if reached(base, b) { b } else { base });
                    }
                }
                match self.word(slot).cas_on(self.cpu, word, step.word()) {
                    Ok(()) => {
                        if let Step::Complete(_, outcome) = step {
                            self.claimed(effects, slot, key, outcome);
                        }
                        // An ack or a fail in a HELD entry (not its claim): it may be a twin
                        // whose claimer has not searched yet, with the tree anywhere in the
                        // window. Left unmerged, the message is out of the tree until that
                        // claimer merges, and an ack completing the tree meanwhile, even
                        // one sent after this returns, would leave it out. So merge now, in
                        // this table (module docs, "Twin claims"); during a migration the
                        // entry is not ours to move: its claimer or a mover moves it.
                        let message_held = !matches!(message, Change::Twin(..))
                            && word.state().phase() == Some(Phase::Held);
                        if message_held {
                            self.merge_twins(key, slot, effects);
                        }
                        return Applied::Changed;
                    }
                    // Another message changed the value or state: apply ours to that.
                    Err(now) if now.holds(key) => word = now,
                    Err(now) if now.frozen_for(key) => {
                        self.await_moved(slot, now);
                        return Applied::Retry;
                    }
                    // Completed, freed, merged away: look for the root again.
                    Err(_) => break,
                }
            }
        }
    }
}

/// `n` values of `T`, allocated zeroed (or, under loom, whose atomics are not plain
/// memory, made by `make`).
///
/// # Safety
/// An all-zero `T` is a valid `T` equal to `make()`.
#[allow(unused_variables)]
unsafe fn zeroed<T>(n: usize, make: impl Fn() -> T) -> Box<[T]> {
    #[cfg(not(loom))]
    if std::mem::size_of::<T>() > 0 && n > 0 {
        let layout = std::alloc::Layout::array::<T>(n).expect("table size overflows");
        // Safety: the layout has a non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // Safety: `ptr` is a fresh allocation of `n` `T`s with `Box<[T]>`'s layout (the
        // global allocator, `Layout::array`), each zero, which the caller says is valid.
        return unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n)) };
    }
    (0..n).map(|_| make()).collect()
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        for slot in 0..self.slots() {
            let word = self.word(slot).load_on(self.cpu);
            let joined = matches!(word.state().phase(), Some(Phase::Joining | Phase::Live));
            if joined {
                self.payload(slot).0.with_mut(|cell| {
                    // Safety: a JOINING or LIVE word's payload is written (a JOINING one
                    // only between the claim or join and the settle, which `&mut self`
                    // rules out) and not taken; we have exclusive access.
                    unsafe { (*cell).assume_init_drop() }
                });
            }
        }
    }
}

impl<T> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("slots", &self.slots())
            .field("merged", &self.merged())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
