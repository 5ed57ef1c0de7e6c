//! A slot's times, in ticks of the acker's resolution, beside its word; the table's reads
//! of them (`times`, `deadline`, `deadline_from`, `timeout_of`, and what reporting a
//! completion reads: `completed_times`); and their two writers
//! after the claim: the reaper's check of an entry at its deadline (`expire`) and a
//! reset's move of the base (`reset`).
//!
//! Each slot has one `AtomicU64`: the tick of the root's first message (high half) and its
//! *base* (low half), the tick its timeout counts from: the first message, or the last
//! reset. Both are `u32` ticks that wrap (2^32 ticks are 49.7 days at 1 ms); readers
//! compare them wrapping, against a full tick they know. The deadline is the base plus the
//! tree's timeout (its own, in the slot's timeout cell, or the acker's default), computed
//! where it is read: a reset moves the base (the later of the two), an init with a timeout
//! of its own stores the timeout, and neither needs the other's value, so the two cannot
//! race into a deadline counted with the wrong timeout (a stored deadline could: a reset
//! that read an orphan's default timeout just before init stored its own would overwrite
//! it). Zero means *free*: the times are also the slot's **reservation**. A claimer first
//! CASes the times from 0 to its stamp and only then CASes its word into the EMPTY slot,
//! and whoever empties a slot stores 0 only after the word is EMPTY. So:
//!
//! * a slot's times are written before any other thread can see its root (the claim CAS
//!   publishes them), and by no one who could be late: a claimer that lost its race for a
//!   slot never wrote its times there, so no stale stamp can land on the slot's next root;
//! * two claimers never race for one EMPTY word (the second's reservation fails and it
//!   tries the next EMPTY slot), and the word CAS after a reservation cannot fail.
//!
//! After the claim only `reset_timeout` writes the times (a CAS that keeps the start and
//! moves the base to now unless it is later), and then sets R on the word so that a reaper
//! about to time the tree out on the old deadline fails its CAS. The reaper reads the times
//! after it loaded the word and CASes from that word, so a deadline moved by a reset, or by
//! an init's own timeout (written while JOINING), makes its CAS fail (`Table::expire`).

use super::lines::Side;
use super::{reached, Effects, Expiry, Key, Step, Table, GROUP_SLOTS};
use crate::acker::timers::ticks::{full_near, Tick};
use crate::acker::timers::{GEN_TAG_BITS, TAG_CHECK_MASK};
use crate::sync::{Backoff, Ordering};

/// What a slot's times hold: the *base* (low half), the `u32` tick its timeout counts
/// from, and the *start* (high half), the first message's tick, in one of two forms:
///
/// * **gap** (top bit 0): the ticks from the start to the base, exact, below 2^31. A new
///   entry's gap is 0; a reset that moves the base on adds to it.
/// * **coarse** (top bit 1): the start's full tick shifted right by `k` (5 bits, `k - 6`),
///   its low 26 bits. Decoded against a full tick within 2^(25+k) ticks of it.
///
/// A tree that lives long cannot keep its start as a gap below 2^31, nor as any `u32` tick
/// (at 1 µs resolution 2^32 ticks are 72 minutes), so the reaper, which looks at every
/// long-lived tree at least once per timeout (at most the `engine` module's
/// `MAX_TIMEOUT_TICKS`, under 2^30 ticks), turns a gap of `COARSE_AT` ticks or more into
/// the coarse form, and a coarse start whose age reaches 2^(24+k) into a coarser one
/// ([`Stamp::kept`]). Between two looks a tree ages by at most a timeout, so a gap never
/// reaches 2^31 and a coarse start is never decoded more than 2^(25+k) ticks away: the
/// start never aliases, whatever the tree's life. The rounding is down (the start reads
/// early), so `elapsed` may read long, never short: by less than 2^k ticks, where the tree
/// has lived 2^(23+k) ticks or more (one part in 2^23). Exact below `COARSE_AT` ticks of
/// life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    bits: u64,
}

/// A gap of this many ticks or more is made coarse by the reaper's next look: below 2^31
/// less a timeout (2^30), so that a tree's gap cannot reach 2^31 before that look.
pub const COARSE_AT: u64 = 1 << 29;

/// The coarse form's flag, in the high half.
const COARSE: u32 = 1 << 31;
/// The fewest bits a coarse start drops: a gap is made coarse below 2^30 ticks of age,
/// which then is below 2^(24 + MIN_SHIFT).
const MIN_SHIFT: u32 = 6;
/// Bits of the coarse start kept.
const COARSE_BITS: u32 = 26;

impl Stamp {
    /// A stamp whose first message came at `start` and whose timeout counts from `base`, at
    /// or after it (within 2^31 ticks). A stamp of a start and base both 0 keeps its start
    /// one tick earlier (elapsed times may read one tick long, never short), so a stamp is
    /// never 0.
    #[inline]
    pub fn new(start: Tick, base: Tick) -> Stamp {
        let gap = base.wrapping_sub(start) & !COARSE;
        let gap = if gap == 0 && base == 0 { 1 } else { gap };
        Stamp {
            bits: u64::from(gap) << 32 | u64::from(base),
        }
    }

    #[inline]
    pub(super) fn from_bits(bits: u64) -> Option<Stamp> {
        (bits != 0).then_some(Stamp { bits })
    }

    #[inline]
    pub(super) fn bits(self) -> u64 {
        self.bits
    }

    #[inline]
    fn high(self) -> u32 {
        (self.bits >> 32) as u32
    }

    /// The first message's tick, for a stamp in the gap form (every stamp younger than
    /// [`COARSE_AT`] ticks); a coarse stamp reads its base.
    #[cfg(test)]
    pub fn start(self) -> Tick {
        match self.high() {
            high if high & COARSE != 0 => self.base(),
            gap => self.base().wrapping_sub(gap),
        }
    }

    /// The tick the timeout counts from: the first message, or the last reset.
    #[inline]
    pub fn base(self) -> Tick {
        self.bits as Tick
    }

    /// The same start with the base moved on to `base` (a later tick, within 2^31 ticks: a
    /// reset, a merged twin's reset); a base at or before this one changes nothing.
    #[inline]
    pub fn with_base(self, base: Tick) -> Stamp {
        let on = base.wrapping_sub(self.base()) as i32;
        if on <= 0 {
            return self;
        }
        let high = match self.high() {
            high if high & COARSE != 0 => high,
            // Below 2^31 while the reaper looks once per timeout (type docs); saturated
            // rather than wrapped into the coarse flag if it ever did not.
            gap => gap.saturating_add(on as u32).min(COARSE - 1),
        };
        Stamp {
            bits: u64::from(high) << 32 | u64::from(base),
        }
    }

    /// The base's full tick, given the acker's anchor
    /// ([`anchor`](crate::acker::engine::time): every stored tick is within 2^31 ticks of
    /// it).
    #[inline]
    pub fn base_full(self, anchor: u64) -> u64 {
        full_near(anchor, self.base())
    }

    /// The full tick of the first message, given the anchor: exact in the gap form,
    /// rounded down in the coarse one (kept decodable at the anchor by the reaper's looks
    /// and by re-anchoring).
    #[inline]
    pub fn start_full(self, anchor: u64) -> u64 {
        let high = self.high();
        if high & COARSE == 0 {
            return self.base_full(anchor).wrapping_sub(u64::from(high));
        }
        let k = (high >> COARSE_BITS & 0x1f) + MIN_SHIFT;
        let field = u64::from(high) & ((1 << COARSE_BITS) - 1);
        let shifted = anchor >> k;
        let back = shifted.wrapping_sub(field) & ((1 << COARSE_BITS) - 1);
        shifted.wrapping_sub(back) << k
    }

    /// Ticks from the first message to full tick `now`, the start decoded at `anchor`; 0
    /// for a `now` before it (a clock that stepped back).
    #[inline]
    pub fn age(self, anchor: u64, now: u64) -> u64 {
        now.saturating_sub(self.start_full(anchor))
    }

    /// A stamp of a start and a base in full ticks, in the form that stays decodable until
    /// the reaper's next look after full tick `now` (type docs): the gap form while the two
    /// are less than [`COARSE_AT`] apart, else a coarse start for its age at `now`.
    pub fn of_full(start: u64, base: u64, now: u64) -> Stamp {
        let start = start.min(base);
        let gap = base - start;
        let high = if gap < COARSE_AT {
            gap as u32
        } else {
            // The fewest dropped bits that leave the age below 2^(24+k).
            let age = now.max(base) - start;
            let bits = u64::BITS - age.leading_zeros();
            let k = bits.saturating_sub(COARSE_BITS - 2).max(MIN_SHIFT);
            let field = (start >> k) as u32 & ((1 << COARSE_BITS) - 1);
            COARSE | (k - MIN_SHIFT) << COARSE_BITS | field
        };
        let stamp = Stamp {
            bits: u64::from(high) << 32 | u64::from(base as Tick),
        };
        if stamp.bits == 0 {
            Stamp::new(0, 0) // one tick earlier, as `new` keeps it
        } else {
            stamp
        }
    }

    /// The stamp for a new anchor `to` ([`anchor`](crate::acker::engine::time)), decoded
    /// at the old one `from`: a base more than 2^30 ticks before `to` moves up to `to -
    /// 2^30` (its deadline, at most 2^30 ticks after it, had passed by `to` and still has),
    /// and the start is put in the form decodable at `to`. `None` when this one will do.
    pub fn rebased(self, from: u64, to: u64) -> Option<Stamp> {
        let (start, base) = (self.start_full(from), self.base_full(from));
        let floor = to.saturating_sub(1 << 30);
        let next = Stamp::of_full(start, base.max(floor), to);
        (next != self).then_some(next)
    }

    /// The stamp the reaper stores at full tick `now` (the anchor) to keep the start
    /// decodable until its next look (type docs), or `None` when this one will do.
    pub fn kept(self, now: u64) -> Option<Stamp> {
        let high = self.high();
        let age = self.age(now, now);
        if high & COARSE == 0 {
            if u64::from(high) < COARSE_AT {
                return None;
            }
        } else {
            let k = (high >> COARSE_BITS & 0x1f) + MIN_SHIFT;
            if age >> (k + COARSE_BITS - 2) == 0 {
                return None;
            }
        }
        let base = self.base_full(now);
        let next = Stamp::of_full(now - age, base, now);
        (next != self).then_some(next)
    }
}

impl Default for Stamp {
    /// Tick 1: for tests of the table that do not look at times.
    fn default() -> Self {
        Stamp::new(1, 1)
    }
}

impl<T> super::Table<T> {
    /// The slot's times; `None` when the slot is free.
    #[inline]
    pub fn times(&self, slot: usize) -> Option<Stamp> {
        Stamp::from_bits(self.times_of(slot).load(Ordering::SeqCst))
    }

    /// The slot's deadline: its base plus the tree's timeout. `None` when the slot is free.
    #[inline]
    pub fn deadline(&self, slot: usize) -> Option<Tick> {
        Some(self.deadline_from(slot, self.times(slot)?))
    }

    /// The deadline of times `stamp` just read from `slot`.
    #[inline]
    pub fn deadline_from(&self, slot: usize, stamp: Stamp) -> Tick {
        self.deadline_in(stamp, self.side(slot))
    }

    /// The tree's own timeout in ticks, if its init gave one.
    #[inline]
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn timeout_of(&self, slot: usize) -> Option<Tick> {
        own_timeout(self.side(slot))
    }

    /// A completed slot's times and own timeout ([`times`](Self::times),
    /// `timeout_of`), read from its side data `side`, for its
    /// completion's report ([`end`](Self::end)). (The own timeout, not the tree's: a report
    /// needs that only for a timeout, [`timeout_or_default`](Self::timeout_or_default).)
    #[inline]
    pub(super) fn completed_times(side: &Side<T>) -> (Option<Stamp>, Option<Tick>) {
        let stamp = Stamp::from_bits(side.times.load(Ordering::SeqCst));
        (stamp, own_timeout(side))
    }

    /// The timeout of a tree whose own is `own` (`timeout_of`): that,
    /// or the table's default.
    #[inline]
    pub fn timeout_or_default(&self, own: Option<Tick>) -> Tick {
        own.unwrap_or(self.default_timeout)
    }

    /// The deadline of times `stamp` just read from the slot of `side`: the base plus the
    /// tree's timeout.
    #[inline]
    fn deadline_in(&self, stamp: Stamp, side: &Side<T>) -> Tick {
        stamp.base().wrapping_add(self.timeout_in(side))
    }

    /// The timeout of the tree in the slot of `side`: its own, or the table's default.
    #[inline]
    fn timeout_in(&self, side: &Side<T>) -> Tick {
        self.timeout_or_default(own_timeout(side))
    }
}

/// The own timeout in the slot of `side`, if its tree's init gave one (the cell holds 0
/// otherwise).
#[inline]
fn own_timeout<T>(side: &Side<T>) -> Option<Tick> {
    match side.timeout.load(Ordering::SeqCst) {
        0 => None,
        own => Some(own),
    }
}

/// What the reaper judges a deadline with: the anchor its `u32` ticks decode at
/// ([`anchor`](crate::acker::engine::time)), and the clock's full tick now.
#[derive(Clone, Copy, Debug)]
pub struct Judge {
    pub anchor: u64,
    pub clock: u64,
}

impl<T> Table<T> {
    /// The reaper, looking at `slot` of a group whose timer came due
    /// ([`groups`](crate::acker::timers::groups)): a LIVE tree whose deadline has come
    /// times out (into `effects`), a HELD orphan's is dropped. Nothing happens when the entry
    /// is gone (completed, freed, reused) or still JOINING, and a deadline after `now`
    /// comes back as [`Expiry::NotDue`].
    ///
    /// The deadline is read from the slot after its word, and the timeout CAS expects that
    /// word, so a deadline moved meanwhile (a join, a reset) makes it fail
    /// ([`times`](crate::acker::table::times)). A reset's R is cleared first, and then the
    /// deadline read: a reset after that clear sets R again and fails our CAS.
    ///
    /// The root is named by bits of its key's [`tag`](Key::tag) (`TAG_CHECK_BITS`; the
    /// reaper passes the tag of the key it has just read in the slot): a later root whose
    /// tag has the same bits in the slot is treated as the root, which is harmless, as its
    /// own deadline decides.
    ///
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn expire(&self, slot: usize, tag: u32, now: Tick, effects: &mut Effects) -> Expiry {
        let now = u64::from(now);
        let judge = Judge {
            anchor: now,
            clock: now,
        };
        self.expire_keeping(slot, tag, judge, effects)
    }

    /// `expire` as the reaper's pass does it: the deadline decoded at the
    /// anchor and judged in full ticks against the clock (which may have stepped back
    /// behind the anchor: a deadline is never judged come before the clock reads it). A
    /// tree not yet due has its start kept decodable at the anchor until the next look
    /// ([`Stamp::kept`]): the reaper looks at every long-lived tree at least once per
    /// timeout, which is what keeps `elapsed` from aliasing.
    pub fn expire_keeping(
        &self,
        slot: usize,
        tag: u32,
        judge: Judge,
        effects: &mut Effects,
    ) -> Expiry {
        let mut word = self.word(slot).load_on(self.cpu);
        loop {
            let key = word.key();
            if ((key.tag() ^ tag) & TAG_CHECK_MASK) >> GEN_TAG_BITS != 0 {
                return Expiry::Gone;
            }
            if word.frozen_for(key) {
                // Being moved: if the move fails for want of room, the entry stays here.
                return Expiry::Joining;
            }
            if !word.holds(key) {
                return Expiry::Gone;
            }
            if let Some(seen) = word.reset_seen() {
                word = match self.word(slot).cas_on(self.cpu, word, seen) {
                    Ok(()) => seen, // now read the deadline the reset stored
                    Err(now) => now,
                };
                continue;
            }
            let Some(step) = word.expired() else {
                return Expiry::Joining;
            };
            match self.deadline(slot) {
                Some(deadline) if full_near(judge.anchor, deadline) <= judge.clock => {}
                Some(deadline) => {
                    self.keep_start(slot, judge.anchor);
                    return Expiry::NotDue(deadline);
                }
                // Only a free leaves times at 0, after the word left this entry.
                None => return Expiry::Gone,
            }
            let result = match step {
                Step::To(_) => self.empty(slot, word).map(|()| Expiry::Dropped),
                Step::Complete(dead, outcome) => {
                    self.word(slot).cas_on(self.cpu, word, dead).map(|()| {
                        self.claimed(effects, slot, key, outcome);
                        Expiry::TimedOut
                    })
                }
            };
            match result {
                Ok(expiry) => return expiry,
                Err(now) => word = now, // an ack, a fail or a reset landed: decide again
            }
        }
    }

    /// `reset_timeout`: on each of the root's entries (a twin's too, so that a merge
    /// carries it) moves the base to `now` (the deadline to `now` plus the tree's timeout),
    /// then sets R, so that a reaper about to time the tree out on the old deadline fails
    /// its CAS and reads the new one. `false` when the root has no entry.
    ///
    /// A walk that finds nothing while a merge was under way may have missed contents in
    /// flight between two slots (module docs, "Twin claims"): it walks again.
    pub fn reset(&self, key: Key, now: Tick) -> bool {
        let mut backoff = Backoff::default();
        loop {
            let mark = self.in_flight.mark();
            if self.reset_walk(key, now) {
                return true;
            }
            if !self.in_flight.overlapped(mark) {
                return false;
            }
            backoff.wait(); // let the merge land
        }
    }

    /// One walk of [`reset`](Self::reset) over the root's probe window: whether it reset an
    /// entry.
    fn reset_walk(&self, key: Key, now: Tick) -> bool {
        let mut any = false;
        let home = self.home(key);
        for d in 0..=self.window() {
            let group = self.wrap(home + d);
            for (i, slot_word) in self.group(group).0.iter().enumerate() {
                let slot = group * GROUP_SLOTS + i;
                let mut word = slot_word.load_on(self.cpu);
                loop {
                    if word.frozen_for(key) {
                        // Moving: the caller resets the successor's entry after this
                        // table's, so the reset must not return before the copy is there.
                        // (Or the move found no room and the entry is back: reset it here.)
                        word = self.await_moved(slot, word);
                        continue;
                    }
                    let Some(next) = word.holds(key).then(|| word.reset()).flatten() else {
                        break;
                    };
                    // The base first, then R, each time R is tried: a reaper that clears R
                    // reads the base after. Never an earlier base: for the tree itself a
                    // reset never moves it back (now >= its start), and if the slot was
                    // freed and reused since our load (its R CAS below then fails), its new
                    // root's deadline may move later, never earlier. (Moving the base only
                    // when the first load held the key lost the reset of an entry that was
                    // FROZEN then and put back for want of room in the successor: the soak
                    // with tables growing and shrinking timed 568 trees out early.)
                    self.move_base(slot, |base| if reached(now, base) { base } else { now });
                    match slot_word.cas_on(self.cpu, word, next) {
                        Ok(()) => {
                            any = true;
                            break;
                        }
                        Err(current) => word = current,
                    }
                }
            }
            if self.overflow[group].load(Ordering::SeqCst) == 0 {
                break;
            }
        }
        any
    }

    /// Rewrites the slot's start in the form that stays decodable until the reaper's next
    /// look, if it needs it ([`Stamp::kept`]). A CAS: a reset or a free that lands first
    /// makes it look again (a new entry's stamp is young and needs nothing).
    fn keep_start(&self, slot: usize, now: u64) {
        let mut seen = self.times_of(slot).load(Ordering::SeqCst);
        while let Some(kept) = Stamp::from_bits(seen).and_then(|stamp| stamp.kept(now)) {
            match self.times_of(slot).compare_exchange(
                seen,
                kept.bits(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    /// A re-anchoring from `from` to `to` ([`anchor`](crate::acker::engine::time)), every
    /// other thread quiescent: the slot's times as [`Stamp::rebased`] puts them, if it
    /// holds any (a CAS all the same).
    pub fn rebase(&self, slot: usize, from: u64, to: u64) {
        let mut seen = self.times_of(slot).load(Ordering::SeqCst);
        while let Some(next) = Stamp::from_bits(seen).and_then(|s| s.rebased(from, to)) {
            match self.times_of(slot).compare_exchange(
                seen,
                next.bits(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    /// CASes the slot's base to `base(the base)`, keeping its start, unless the slot is
    /// free.
    pub(super) fn move_base(&self, slot: usize, base: impl Fn(Tick) -> Tick) {
        let mut seen = self.times_of(slot).load(Ordering::SeqCst);
        while let Some(stamp) = Stamp::from_bits(seen) {
            let next = stamp.with_base(base(stamp.base())).bits();
            match self.times_of(slot).compare_exchange(
                seen,
                next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    /// HELD entries in the table (orphans, and inits' claims unjoined for a twin): a
    /// scan of every word, for [`Acker::orphans_held`](crate::Acker::orphans_held).
    pub fn held(&self) -> usize {
        (0..self.slots())
            .filter(|&slot| {
                let word = self.word(slot).load_on(self.cpu);
                word.holds(word.key()) && word.state().phase() == Some(super::Phase::Held)
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_never_zero_and_keeps_both_ticks() {
        let s = Stamp::new(7, 1_000_007);
        assert_eq!((s.start(), s.base()), (7, 1_000_007));
        let zero = Stamp::new(0, 0);
        assert_ne!(zero.bits(), 0);
        assert_eq!((zero.start(), zero.base()), (u32::MAX, 0));
        // A later base keeps the start; an earlier one changes nothing.
        assert_eq!(s.with_base(2_000_000).start(), 7);
        assert_eq!(s.with_base(2_000_000).with_base(5), s.with_base(2_000_000));
        assert_eq!(Stamp::from_bits(0), None);
        assert_eq!(s.with_base(9), s);
    }

    /// A tree kept alive by resets far past 2^32 ticks, looked at by the reaper once per
    /// timeout as its deadlines come: its age never aliases and reads long by less than
    /// one part in 2^23, never short. (Fails with the start kept as a `u32` tick.)
    #[test]
    fn a_start_never_aliases_over_any_life() {
        let cases = [
            (1u64 << 30, 1u64 << 28, 1u64 << 40),
            ((1 << 30) - 2, (1 << 30) - 3, 1 << 38),
            (1 << 20, 4_099, 1 << 34),
        ];
        // Under Miri (safe arithmetic only, nothing for it to check) the short cases.
        let cases = if cfg!(miri) { &cases[..2] } else { &cases[..] };
        for &(timeout, reset_every, life) in cases {
            let first: u64 = (1 << 40) + 12_345;
            let mut stamp = Stamp::new(first as Tick, first as Tick);
            let mut now = first;
            let mut next_look = first + timeout;
            let end = first + life;
            while now < end {
                now += reset_every;
                stamp = stamp.with_base(now as Tick);
                if now >= next_look {
                    if let Some(kept) = stamp.kept(now) {
                        stamp = kept;
                    }
                    next_look = now + timeout;
                }
                let age = stamp.age(now, now);
                let truth = now - first;
                assert!(age >= truth, "short: {age} < {truth} at {now}");
                assert!(
                    age - truth <= truth >> 23,
                    "{age} for {truth}: off by {}",
                    age - truth
                );
            }
            assert_eq!(stamp.base(), now as Tick);
        }
    }

    #[test]
    fn a_young_stamp_stays_exact_and_is_not_rewritten() {
        let s = Stamp::new(100, 100).with_base(5_000);
        assert_eq!(s.age(5_010, 5_010), 4_910);
        assert_eq!(s.kept(5_010), None);
        // One tick behind its base (a caller's tick may lag another's).
        assert_eq!(s.age(4_999, 4_999), 4_899);
    }
}
