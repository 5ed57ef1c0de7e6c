//! Storm's init on one table: init joins the root's HELD entry (an orphan's), or claims a
//! new one JOINING with its XOR in; writes the payload and settles the word LIVE, or
//! completes the tree at once when held acks cancel its XOR (Acked wins) or a fail was
//! held.
//!
//! An entry is joined only after a search finds no twin of it (the parent module's "Twin
//! claims"), so a payload never lands in an entry that loses a merge, and a second init of
//! the root finds it joined (`Duplicate`). A new root is claimed JOINING at once, which
//! spares the placeholder's join CAS: its claimer searches for twins right after the claim
//! (as every claimer does), and when it finds one it *unjoins*, taking its XOR back out
//! (JOINING to HELD, what messages brought kept), and goes on as an init that found a HELD
//! placeholder of its own with a twin: merge, search, join. Of two claimers, at least one
//! sees the other, so two JOINING twins never both settle; one that sees none is alone.

use super::{Effects, Key, Refused, Search, Step, Table, Tick, Unclaimed, Vacancy, Word};
use crate::sync::Ordering;

/// What [`Table::claim_joined`] did.
enum Claimed {
    /// A new entry, JOINING with init's XOR, and no twin: write the payload and settle.
    Alone(usize),
    /// A twin was found (the claim unjoined and merged) or the claim raced: join the entry
    /// of this search.
    Twin(Search),
    /// The entry moved to the successor: init starts again.
    Moved,
    /// No room, or no credit.
    Full,
}

impl<T> Table<T> {
    /// Storm's init: joins the root's HELD entry (an orphan's), or claims a new one
    /// JOINING, writes the payload, and settles: LIVE, or completed at once (into `effects`)
    /// when held acks cancel `xor` (Acked wins) or a fail was held.
    ///
    /// It joins an entry only after a search finds no twin of it; a twin claimed after that
    /// search is found by its claimer's search (of two, one sees the other), and a joined
    /// entry wins. So a payload never lands in a loser, and a second init finds the root
    /// joined (`Duplicate`) rather than a twin to join. `effects` may hold a completion even
    /// when init is refused: carrying a twin's contents may complete another init's tree.
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn init(
        &self,
        key: Key,
        xor: u64,
        payload: T,
        effects: &mut Effects,
    ) -> Result<(), Refused<T>> {
        self.init_with(key, xor, payload, None, effects)
    }

    /// [`init`](Self::init) with the tree's own timeout in ticks: the deadline becomes the
    /// base (the first message, or the last reset) plus `timeout`
    /// ([`times`](crate::acker::table::times)).
    #[cfg(any(test, loom, feature = "internals"))] // the tests, loom models and `table` bench only
    pub fn init_with(
        &self,
        key: Key,
        xor: u64,
        payload: T,
        timeout: Option<Tick>,
        effects: &mut Effects,
    ) -> Result<(), Refused<T>> {
        self.init_or(key, xor, payload, timeout, true, effects)
    }

    /// `init_with`, claiming no new entry unless `create`
    /// ([`Refused::Missing`]). In a table whose migration has begun init keeps no join: it
    /// moves the root's HELD entry to the successor (unjoined first, if its join landed
    /// before it saw the migration) and reports [`Refused::Retry`], so that a joined entry
    /// in a table never has a twin in its successor
    /// ([`migrate`](crate::acker::table::migrate)).
    // Always, as `claim_joined` and `search` here and the engine's `finish`, `file_timers`
    // and `write_tick`: an init's whole path then runs in `Engine::init`'s one frame,
    // without the calls' frames and spilled arguments (about 120 instructions a tree).
    #[inline(always)]
    pub fn init_or(
        &self,
        key: Key,
        xor: u64,
        payload: T,
        timeout: Option<Tick>,
        create: bool,
        effects: &mut Effects,
    ) -> Result<(), Refused<T>> {
        let mut search = self.search(key, None);
        let slot = loop {
            let (slot, word) = match search {
                Search::Found(slot, word) => (slot, word),
                Search::Frozen(slot, word) => {
                    self.await_moved(slot, word);
                    return Err(Refused::Retry(payload));
                }
                Search::Missing(_) if !create => return Err(Refused::Missing(payload)),
                Search::Missing(vacancy) => match self.claim_joined(key, xor, vacancy, effects) {
                    Claimed::Alone(slot) => break slot,
                    Claimed::Twin(next) => {
                        search = next;
                        continue;
                    }
                    Claimed::Moved => return Err(Refused::Retry(payload)),
                    Claimed::Full => return Err(Refused::Full(payload)),
                },
            };
            let Some(joined) = word.joined(xor) else {
                return Err(Refused::Duplicate(payload));
            };
            // Checked after the search that found the entry, before the join: a creator in
            // the successor searched here after `next` was set, so it saw this entry, and
            // no twin of it can be there ([`migrate`](crate::acker::table::migrate)).
            if let Some(next) = self.successor() {
                self.relocate(slot, next, effects);
                return Err(Refused::Retry(payload));
            }
            // Join only an entry without a twin: a second init could otherwise join the
            // twin (two joined entries, two completions of one root). Merged first, the
            // pair leaves one entry, which the second init finds joined.
            if self.find_other(key, Some(slot)).is_some() {
                self.merge_twins(key, slot, effects);
                search = self.search(key, None);
                continue;
            }
            pause_point!(BeforeJoin);
            match self.word(slot).cas_on(self.cpu, word, joined) {
                Ok(()) => {
                    pause_point!(Joined);
                    // Checked again after the join: a merge's loser is EMPTY for a moment
                    // and then put back as it was (`Landed::Restored`), so this CAS may
                    // have landed on it after `next` was set, in a group a mover counted
                    // clean while the slot was EMPTY (an ABA on the word). Settled here,
                    // the tree would stay in a table about to be retired. So a join that
                    // finds the migration moves its entry, as a new claim does
                    // ([`migrate`](crate::acker::table::migrate)).
                    if self.successor().is_some() {
                        self.unjoin(slot, xor);
                        self.created(key, slot, effects);
                        return Err(Refused::Retry(payload));
                    }
                    effects.set_joined();
                    break slot;
                }
                Err(now) if now.holds(key) => search = Search::Found(slot, now),
                Err(_) => search = self.search(key, None),
            }
        };
        self.settle_init(slot, key, payload, timeout, effects);
        Ok(())
    }

    /// The end of an init that claimed or joined `slot` for `key` (the slot is JOINING, and
    /// this init alone may leave it): the payload written, the tree's own timeout stored,
    /// then the settle CAS, which publishes both (and completes the tree if its acks
    /// already add up).
    // Always: in `init_or`'s frame, as the rest of an init's path.
    #[inline(always)]
    fn settle_init(
        &self,
        slot: usize,
        key: Key,
        payload: T,
        timeout: Option<Tick>,
        effects: &mut Effects,
    ) {
        let (slot_word, side) = self.parts(slot);
        // SeqCst (the word's): `settle` below publishes it.
        side.payload.0.with_mut(|cell| {
            // Safety: our claim or join CAS made the slot JOINING: until our settle CAS
            // below, no other thread reads or writes its payload cell (module docs, `Sync`
            // impl).
            unsafe { (*cell).write(payload) };
        });
        if let Some(own) = timeout {
            // SeqCst: a reset's or a reaper's read of it follows the word it loaded.
            side.timeout.store(own, Ordering::SeqCst);
            if own < self.default_timeout {
                // Earlier than the timer filed for the entry (an orphan's or a claim's is
                // the default's): it needs another.
                effects.file_later(self.gen, slot);
            }
        }
        let mut word = slot_word.load_on(self.cpu);
        loop {
            let Some(step) = word.settled() else {
                // Only the joining init leaves JOINING, and that is us.
                debug_assert!(false, "settling {word:?}");
                return;
            };
            match slot_word.cas_on(self.cpu, word, step.word()) {
                Ok(()) => {
                    if let Step::Complete(_, outcome) = step {
                        self.claimed(effects, slot, key, outcome);
                    }
                    return;
                }
                Err(now) => word = now, // an ack or a fail landed; settle that
            }
        }
    }

    /// Claims a new entry for `key` JOINING with init's `xor`, in `vacancy` or the first
    /// EMPTY slot, and searches for twins (module docs). Alone: the slot, for init to write
    /// and settle. With a twin, or when a migration has begun, it unjoins first: the entry
    /// is then an ordinary HELD one, merged with its twin or moved to the successor.
    // Always: in init's one frame ([`init_or`](Self::init_or)).
    #[inline(always)]
    fn claim_joined(
        &self,
        key: Key,
        xor: u64,
        vacancy: Option<Vacancy>,
        effects: &mut Effects,
    ) -> Claimed {
        pause_point!(BeforeClaim);
        let claimed = self.claim(key, Word::joining(key, xor), vacancy, effects);
        pause_point!(ClaimedJoining);
        match claimed {
            // `next` is checked after the claim, as a joiner checks it before its join: a
            // claim that finds it unset came before it was stored, so a creator in the
            // successor, which searched here after that, saw this entry
            // ([`migrate`](crate::acker::table::migrate)). One that finds it set moves its
            // entry: HELD first (JOINING words are not moved), then as any new entry.
            Ok(slot) if self.successor().is_some() => {
                self.unjoin(slot, xor);
                self.created(key, slot, effects);
                Claimed::Moved
            }
            Ok(slot) => {
                effects.file_later(self.gen, slot);
                if !self.has_twin(key, slot) {
                    // The common case: no twin, and the claim is init's to settle.
                    return Claimed::Alone(slot);
                }
                self.unjoin(slot, xor);
                self.merge_twins(key, slot, effects);
                Claimed::Twin(self.search(key, None))
            }
            Err(Unclaimed::Raced) => Claimed::Twin(self.search(key, None)),
            Err(_) => Claimed::Full,
        }
    }

    /// Takes init's `xor` back out of its JOINING claim in `slot` (JOINING to HELD), CASing
    /// until it lands: messages may change the word meanwhile, but only its claimer leaves
    /// JOINING.
    fn unjoin(&self, slot: usize, xor: u64) {
        let mut word = self.word(slot).load_on(self.cpu);
        loop {
            let Some(held) = word.unjoined(xor) else {
                debug_assert!(false, "unjoining {word:?}");
                return;
            };
            match self.word(slot).cas_on(self.cpu, word, held) {
                Ok(()) => return,
                Err(now) => word = now, // an ack or a fail landed; take ours out of that
            }
        }
    }
}
