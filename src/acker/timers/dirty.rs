//! Registration by group: a tree reaches the reaper as a bit, not an entry.
//!
//! Every root the tables hold must have its group looked at by the reaper by its deadline
//! ([`groups`](super::groups)). Most trees complete long before theirs, so registering each
//! one (an entry in a list, read back and filed later) costs every tree for the few that
//! live. Instead each table generation keeps a bit per group, *dirty* ([`DirtyGroups`]):
//! an operation that creates an entry (a new root's claim, an orphan, a carried twin, a
//! root a worker moved) sets its group's bit, and the acker keeps one word beside them all,
//! [`DirtySince`]: whether any bit was set since the reaper's last scan, and the earliest
//! tick by which the reaper must scan ("When to scan"). When that tick comes (a manual acker's `expire`: at every call) the reaper
//! takes the bits and looks at each dirty group as if its timer had come due: it times out
//! what is due and files the group at the earliest deadline left in it, as a group timer's
//! look does (a look of a group whose entry is still in the wheel is a *stale* one's, and
//! changes nothing the filed tick covers). So a tree that completes before its group's
//! next scan costs the reaper nothing of its own; a scan reads a line per dirty group,
//! however many trees came and went in it.
//!
//! ## When to scan
//!
//! A root's scan is due one of the reaper's longest sleeps while trees are pending (a
//! quarter of the timeout, at most 67 ms: `Engine::pending_sleep`) before the tick before
//! its deadline, and the summary holds the earliest such tick of what was registered since
//! the last scan. A scan at the tick before the deadline would be correct (the look files
//! the group at its deadline), but its groups would reach the wheel only then: the timeouts
//! of a busy runtime, which callers run from the wheel
//! ([`reaper`](crate::acker::engine::reaper), "Callers first"), waited for the thread's
//! scan, and a burst's scan of every group delayed the burst's timeouts. A sleep ahead, the
//! reaper (which wakes that often anyway while trees are pending) has filed them by their
//! deadlines, and a tree that completes within three quarters of its timeout still costs it
//! nothing.
//!
//! ## What an operation pays
//!
//! A compiler fence, the load of its group's word of bits (one word per 64 groups, shared by
//! every thread and written about once a group per scan), the `lock or` that sets the bit
//! when it is clear, and the load of the acker's word. It writes that word only when no
//! bit was set since the scan or its own tick is earlier than the published one (a tree
//! with a short timeout of its own, or a moved root whose deadline is near): then it
//! checks whether the reaper is idle, and wakes it if it sleeps past that tick
//! ([`wake`](crate::acker::threads::wake)).
//!
//! ## Why no root is missed
//!
//! The operation and the scan meet in a Dekker pair through asymmetric fences
//! ([`fences`](crate::sync::fences)), as the marks do:
//!
//! ```text
//!   operation (every new entry)          scan (a pass, when the summary's tick comes)
//!   CAS the root into its slot           swap the summary to clear
//!   light fence    (compiler fence)      take each word of bits (swap it to zero)
//!   load its group's bit                 heavy fence    (membarrier)
//!   if clear: lock or the bit            read the slots of the groups taken
//!   lower the summary to its tick
//! ```
//!
//! (A word that loads zero is not swapped: most words of a large table are clear. A load
//! that reads zero where a mark's bit is set reads it before that mark in the order of the
//! word's writes, so the mark's `lower` comes after the summary's swap, as below; and a
//! scan that took no bits reads no slots, and needs no fence.) If the operation's load
//! reads a value from before the scan's swap of its word, the
//! heavy fence makes the scan's read of the slot see the root. Otherwise its load reads the
//! swap's zero or a bit set after it, and the root waits for the next scan, which the
//! summary holds: the operation's own `lower` comes after the swap of the bits it read
//! (through the swap's release, or the later setter's), so after the swap of the summary,
//! which the scan made first; the summary then holds a tick no later than the root's. A
//! scan whose barrier cannot run (counted) puts the bits back and restores the summary.
//!
//! The reaper, before it sleeps, marks itself idle, fences, and reads the summary: either
//! it sees the tick and sleeps no later, or the operation that stored it sees the reaper
//! idle after its own fence and wakes it ([`wake`](crate::acker::threads::wake)).
//!
//! A generation that leaves its chain takes its bits with it: its roots were moved to its
//! successor first, and each move registers its root there (a worker's move sets the bit
//! in the successor; the reaper's own files the group on the wheel at once).

use crate::acker::timers::ticks::{reached, Tick};
use crate::sync::{AtomicU64, Ordering};

/// A table generation's dirty bits: one per group (module docs).
#[derive(Debug)]
pub struct DirtyGroups {
    words: Box<[AtomicU64]>,
}

impl DirtyGroups {
    /// Bits for `groups` groups, all clear.
    pub fn new(groups: usize) -> Self {
        DirtyGroups {
            words: (0..groups.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// Marks `group` dirty: `true` when this call set its bit (it was clear).
    #[inline]
    pub fn mark(&self, group: usize) -> bool {
        let bit = 1 << (group % 64);
        let word = &self.words[group / 64];
        // SeqCst (both): after the caller's light fence (module docs, "Why no root is
        // missed"). A load first: the bit is nearly always set already, and a load keeps
        // the line shared.
        if word.load(Ordering::SeqCst) & bit != 0 {
            return false;
        }
        word.fetch_or(bit, Ordering::SeqCst) & bit == 0
    }

    /// The words of bits, 64 groups each.
    pub fn words(&self) -> usize {
        self.words.len()
    }

    /// Takes the bits of word `word` (groups `64 * word` on), leaving them clear.
    #[inline]
    pub fn take(&self, word: usize) -> u64 {
        let at = &self.words[word];
        // SeqCst (both): before the scan's heavy fence (module docs). A load first: most
        // words of a large table are clear.
        if at.load(Ordering::SeqCst) == 0 {
            return 0;
        }
        at.swap(0, Ordering::SeqCst)
    }

    /// Whether `group` is marked (the tests' coverage count).
    #[cfg(any(test, loom, feature = "internals"))]
    pub fn is_marked(&self, group: usize) -> bool {
        self.words[group / 64].load(Ordering::SeqCst) & 1 << (group % 64) != 0
    }

    /// Heap bytes.
    #[cfg(any(test, loom, feature = "internals"))]
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of_val::<[AtomicU64]>(&self.words)
    }
}

/// The acker's summary of its dirty bits (module docs): set while a bit was set since the
/// reaper's last scan, with the earliest tick by which the reaper must scan.
#[derive(Debug, Default)]
pub(crate) struct DirtySince {
    /// 0 when clear; otherwise [`SET`] and the tick in the low 32 bits.
    word: AtomicU64,
}

/// The flag of [`DirtySince`]'s word: a tick of any value may be stored below it.
const SET: u64 = 1 << 32;

impl DirtySince {
    /// After an operation marked a group: the tick `by` which the reaper must scan for its
    /// root. `true` when this call stored it (no bit was set since the scan, or `by` is
    /// earlier than the tick stored): the caller checks whether the reaper is idle (module
    /// docs).
    #[inline]
    pub(crate) fn lower(&self, by: Tick) -> bool {
        // SeqCst (all): ordered against the reaper's idle mark and its read of this word
        // before it sleeps, and against the scan's swap (module docs).
        let mut now = self.word.load(Ordering::SeqCst);
        loop {
            if now != 0 && reached(now as Tick, by) {
                return false;
            }
            match self.word.compare_exchange_weak(
                now,
                SET | u64::from(by),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    /// The tick by which the reaper must scan, if a bit was set since its last scan.
    #[inline]
    pub(crate) fn due(&self) -> Option<Tick> {
        // SeqCst: the reaper's read after its idle mark and fence (module docs).
        let word = self.word.load(Ordering::SeqCst);
        (word != 0).then_some(word as Tick)
    }

    /// The scan begins: clears the summary, and returns the tick it held, if any. A bit set
    /// after this stores the summary again.
    pub(crate) fn take(&self) -> Option<Tick> {
        // SeqCst: before the scan's swaps of the bits (module docs).
        let word = self.word.swap(0, Ordering::SeqCst);
        (word != 0).then_some(word as Tick)
    }
}
