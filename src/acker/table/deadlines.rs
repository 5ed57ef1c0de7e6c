//! A slot's times as the reaper and `reset_timeout` use them: the reaper's check of an
//! entry at its deadline, a reset's move of the base, and the deadline's parts (the base in
//! [`times`](crate::acker::table::times), plus the tree's own or the table's default
//! timeout).

use super::{full_near, reached, Effects, Expiry, Key, Stamp, Step, Table, Tick, GROUP_SLOTS};
use crate::acker::timers::{GEN_TAG_BITS, TAG_CHECK_MASK};
use crate::sync::{Backoff, Ordering};

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
    pub fn expire(&self, slot: usize, tag: u32, now: Tick, effects: &mut Effects<'_>) -> Expiry {
        let now = u64::from(now);
        let judge = Judge {
            anchor: now,
            clock: now,
        };
        self.expire_keeping(slot, tag, judge, effects)
    }

    /// [`expire`](Self::expire) as the reaper's pass does it: the deadline decoded at the
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
        effects: &mut Effects<'_>,
    ) -> Expiry {
        let mut word = self.word(slot).load();
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
                word = match self.word(slot).cas(word, seen) {
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
                Step::Complete(dead, outcome) => self.word(slot).cas(word, dead).map(|()| {
                    self.claimed(effects, slot, key, outcome);
                    Expiry::TimedOut
                }),
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
                let mut word = slot_word.load();
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
                    match slot_word.cas(word, next) {
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
                let word = self.word(slot).load();
                word.holds(word.key()) && word.state().phase() == Some(super::Phase::Held)
            })
            .count()
    }
}
