//! Storm's init on one table: init joins the root's HELD entry (an orphan's, or a
//! placeholder it creates), writes the payload and settles the word LIVE, or completes the
//! tree at once when held acks cancel its XOR (Acked wins) or a fail was held.
//!
//! The placeholder is joined only after a search finds no twin of it (the parent module's
//! "Twin claims"), so a payload never lands in an entry that loses a merge, and a second
//! init of the root finds it joined (`Duplicate`).

use super::{Done, Key, Refused, Roots, Search, Step, Tick, Unclaimed, Vacancy, Word};
use crate::sync::Ordering;

/// What [`Roots::placeholder`] did.
enum Placeholder {
    /// Join the entry of the search (the placeholder, or what a merge left), twinless when
    /// `true`.
    Join(Search, bool),
    /// The placeholder moved to the successor: init starts again.
    Moved,
    /// No room, or no credit.
    Full,
}

impl<T> Roots<T> {
    /// Storm's init: joins the root's HELD entry (an orphan's, or a placeholder it creates),
    /// writes the payload, and settles: LIVE, or completed at once (into `done`) when held
    /// acks cancel `xor` (Acked wins) or a fail was held.
    ///
    /// It joins an entry only after a search finds no twin of it; a twin claimed after that
    /// search is found by its claimer's search (of two, one sees the other), and a joined
    /// entry wins. So a payload never lands in a loser, and a second init finds the root
    /// joined (`Duplicate`) rather than a twin to join. `done` may hold a completion even
    /// when init is refused: carrying a twin's contents may complete another init's tree.
    pub fn init(
        &self,
        key: Key,
        xor: u64,
        payload: T,
        done: &mut Done<'_>,
    ) -> Result<(), Refused<T>> {
        self.init_with(key, xor, payload, None, done)
    }

    /// [`init`](Self::init) with the tree's own timeout in ticks: the deadline becomes the
    /// base (the first message, or the last reset) plus `timeout` (`times.rs`).
    pub fn init_with(
        &self,
        key: Key,
        xor: u64,
        payload: T,
        timeout: Option<Tick>,
        done: &mut Done<'_>,
    ) -> Result<(), Refused<T>> {
        self.init_or(key, xor, payload, timeout, true, done)
    }

    /// [`init_with`](Self::init_with), creating no placeholder unless `create`
    /// ([`Refused::Missing`]). In a table whose migration has begun init joins nothing: it
    /// moves the root's HELD entry to the successor and reports [`Refused::Retry`], so that
    /// a joined entry in a table never has a twin in its successor (`migrate.rs`).
    pub fn init_or(
        &self,
        key: Key,
        xor: u64,
        payload: T,
        timeout: Option<Tick>,
        create: bool,
        done: &mut Done<'_>,
    ) -> Result<(), Refused<T>> {
        let mut search = self.search(key, None);
        // The entry in `search` is our placeholder, which a search has just found twinless.
        let mut alone = false;
        let slot = loop {
            let (slot, word) = match search {
                Search::Found(slot, word) => (slot, word),
                Search::Frozen(slot, word) => {
                    self.await_moved(slot, word);
                    return Err(Refused::Retry(payload));
                }
                Search::Missing(_) if !create => return Err(Refused::Missing(payload)),
                Search::Missing(vacancy) => {
                    match self.placeholder(key, vacancy, done) {
                        Placeholder::Join(next, twinless) => (search, alone) = (next, twinless),
                        Placeholder::Moved => return Err(Refused::Retry(payload)),
                        Placeholder::Full => return Err(Refused::Full(payload)),
                    }
                    continue;
                }
            };
            let Some(joined) = word.joined(xor) else {
                return Err(Refused::Duplicate(payload));
            };
            // Checked after the search that found the entry, before the join: a creator in
            // the successor searched here after `next` was set, so it saw this entry, and no
            // twin of it can be there (`migrate.rs`).
            if let Some(next) = self.successor() {
                self.relocate(slot, next, done);
                return Err(Refused::Retry(payload));
            }
            // Join only an entry without a twin: a second init could otherwise join the
            // twin (two joined entries, two completions of one root). Merged first, the
            // pair leaves one entry, which the second init finds joined.
            if !std::mem::take(&mut alone) && self.find_other(key, Some(slot)).is_some() {
                self.merge_twins(key, slot, done);
                search = self.search(key, None);
                continue;
            }
            match self.word(slot).cas(word, joined) {
                Ok(()) => break slot,
                Err(now) if now.holds(key) => search = Search::Found(slot, now),
                Err(_) => search = self.search(key, None),
            }
        };
        // SeqCst (the word's): `settle` below publishes it.
        self.payload(slot).0.with_mut(|cell| {
            // Safety: our join CAS made the slot JOINING: until our settle CAS below, no
            // other thread reads or writes its payload cell (module docs, `Sync` impl).
            unsafe { (*cell).write(payload) };
        });
        if let Some(own) = timeout {
            // SeqCst: a reset's or a reaper's read of it follows the word it loaded.
            self.timeout_cell(slot).store(own, Ordering::SeqCst);
            if own < self.default_timeout {
                // Earlier than the timer filed for the entry (an orphan's or a placeholder's
                // is the default's): it needs another.
                done.file_later(self.gen, slot);
            }
        }
        let mut word = self.word(slot).load();
        loop {
            let Some(step) = word.settled() else {
                // Only the joining init leaves JOINING, and that is us.
                debug_assert!(false, "settling {word:?}");
                return Ok(());
            };
            match self.word(slot).cas(word, step.word()) {
                Ok(()) => {
                    if let Step::Complete(_, outcome) = step {
                        self.claimed(done, slot, key, outcome);
                    }
                    return Ok(());
                }
                Err(now) => word = now, // an ack or a fail landed; settle that
            }
        }
    }

    /// Creates `key`'s placeholder (an empty HELD entry for init to join) in `vacancy` or
    /// the first EMPTY slot, and merges any twin; returns what init should join next, and
    /// whether that is the placeholder with no twin found (init need not search again).
    fn placeholder(&self, key: Key, vacancy: Option<Vacancy>, done: &mut Done<'_>) -> Placeholder {
        let placeholder = Word::placeholder(key);
        match self.claim(key, placeholder, vacancy, done) {
            Ok(slot) if self.successor().is_some() => {
                self.created(key, slot, done); // moved to the successor
                Placeholder::Moved
            }
            Ok(slot) => match (
                done.file_later(self.gen, slot),
                self.search(key, Some(slot)),
            )
                .1
            {
                // The common case: no twin, and the placeholder is ours to join (if an ack
                // has changed it meanwhile, the join CAS fails and init joins what it is).
                Search::Missing(_) => Placeholder::Join(Search::Found(slot, placeholder), true),
                Search::Found(..) | Search::Frozen(..) => {
                    self.merge_twins(key, slot, done);
                    Placeholder::Join(self.search(key, None), false)
                }
            },
            Err(Unclaimed::Raced) => Placeholder::Join(self.search(key, None), false),
            Err(_) => Placeholder::Full,
        }
    }
}
