//! A group's words as the table reads and writes them: each slot's [`Word`] in a 128-bit
//! atomic ([`SlotWord`], every access SeqCst, on the CPU's path [`Cpu`] found), a group's
//! four words loaded in one block, and a group's match of a key ([`Group::find`]: the
//! first word of the key, chosen without branching on which one past a low load).

use super::lines::Group;
use super::word::{Key, Word};
use super::GROUP_SLOTS;
use crate::sync::{AtomicU128, Cpu, Ordering};

/// One slot's word: a [`Word`] in a 128-bit atomic.
///
/// Every access is SeqCst. On x86_64 that costs nothing over acquire/release (a 128-bit CAS
/// is a locked instruction either way, and a load is a plain `vmovdqa`), the twin search
/// needs it (a claimer writes its word, then reads the others'), and it is what the loom
/// stand-in, a value behind a lock, gives: the models check exactly this.
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct SlotWord(AtomicU128);

impl SlotWord {
    #[cfg(loom)] // the loom stand-in's lines; outside loom they are zero pages
    pub(super) fn new() -> Self {
        SlotWord(AtomicU128::new(0))
    }

    /// The word, the CPU's path ([`Cpu`]) checked for this access alone.
    #[inline]
    #[cfg(test)] // the tests only
    pub fn load(&self) -> Word {
        self.load_on(Cpu::get())
    }

    /// The word, on the path `cpu` found: an operation of several accesses finds it once.
    #[inline]
    pub fn load_on(&self, cpu: Cpu) -> Word {
        Word::from_bits(self.0.load(cpu, Ordering::SeqCst))
    }

    /// `Ok(())` when the word was `current` and is now `new`; else the word it is. The
    /// CPU's path checked for this access alone.
    #[inline]
    #[cfg(test)] // the tests only
    pub fn cas(&self, current: Word, new: Word) -> Result<(), Word> {
        self.cas_on(Cpu::get(), current, new)
    }

    /// `cas` on the path `cpu` found.
    #[inline]
    pub fn cas_on(&self, cpu: Cpu, current: Word, new: Word) -> Result<(), Word> {
        self.0
            .compare_exchange(
                cpu,
                current.to_bits(),
                new.to_bits(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .map(|_| ())
            .map_err(Word::from_bits)
    }
}

impl Group {
    /// Each word of the group, loaded one after the other (SeqCst each; not a snapshot),
    /// on the path `cpu` found.
    #[inline]
    pub(super) fn load(&self, cpu: Cpu) -> [Word; GROUP_SLOTS] {
        self.load_then(cpu, |words| words)
    }

    /// What `then` makes of the group's words, loaded as [`load`](Self::load) loads them;
    /// `then` is inlined into each of the CPU's paths ([`AtomicU128::load_each`]).
    #[inline(always)]
    pub(super) fn load_then<R>(&self, cpu: Cpu, then: impl FnOnce([Word; GROUP_SLOTS]) -> R) -> R {
        // Safety: `SlotWord` is a `repr(transparent)` `AtomicU128`, so the arrays have one
        // layout.
        let words = unsafe {
            &*(&self.0 as *const [SlotWord; GROUP_SLOTS]).cast::<[AtomicU128; GROUP_SLOTS]>()
        };
        AtomicU128::load_each(words, cpu, Ordering::SeqCst, |bits| {
            then(bits.map(Word::from_bits))
        })
    }

    /// The first of the group's words whose key is `key`'s: [`Match::Holds`] with its
    /// index and word when it is an uncompleted entry of the root, [`Match::Odd`] when it
    /// is not (FROZEN, MOVED, or an EMPTY word when the key is 0: the full search sorts
    /// those out), [`Match::Absent`] when no word has the key.
    ///
    /// The common ack's match. With `first_word_first`, word 0 is tried with a branch
    /// first: at a low load most entries are there (a claim takes its group's first EMPTY
    /// word) and the branch is predicted. Otherwise, and when word 0 does not hold the
    /// key, the four words are matched with no branch on which one holds it: past a low
    /// load that is random (at a load of a half, 3 entries in 5 sit past word 0), and a
    /// mispredicted branch on words whose load missed the cache waits for the miss, then
    /// throws away what ran ahead of it. An ack at 64k pending (grown tables): 33.1 ns
    /// with the branch on word 0, 26.7 ns without (`ack/1t/64k-pending`, three
    /// alternating pairs); at 1k in flight (the tables an acker starts with, where word 0
    /// holds almost every entry) the branch saves a tenth of the lifecycle's time.
    #[inline]
    pub(super) fn find(&self, key: Key, cpu: Cpu, first_word_first: bool) -> Match {
        self.load_then(cpu, |words| Self::find_in(words, key, first_word_first))
    }

    /// [`find`](Self::find) in the group's words.
    #[inline(always)]
    pub(super) fn find_in(words: [Word; GROUP_SLOTS], key: Key, first_word_first: bool) -> Match {
        let of = |i: usize, word: Word| {
            if word.holds(key) {
                Match::Holds(i, word)
            } else {
                Match::Odd
            }
        };
        if first_word_first && words[0].key() == key {
            return of(0, words[0]);
        }
        let (mine, _) = masks(&words, key);
        if mine == 0 {
            return Match::Absent;
        }
        let i = mine.trailing_zeros() as usize;
        of(i, select(&words, i))
    }
}

/// Word `i` of `words`, chosen with masks rather than an index into the array: an index
/// sends the words through the stack, and the loads that read them back wait on the
/// stores.
#[inline(always)]
fn select(words: &[Word; GROUP_SLOTS], i: usize) -> Word {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    {
        sse2::select(words, i)
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    {
        // Half by half: a choice between whole words becomes a branch on `i`.
        let halves = |word: Word| (word.to_bits() as u64, (word.to_bits() >> 64) as u64);
        let (lo, hi) = (1..GROUP_SLOTS).fold(halves(words[0]), |(lo, hi), j| {
            let take = u64::from(i == j).wrapping_neg();
            let (j_lo, j_hi) = halves(words[j]);
            (lo ^ ((lo ^ j_lo) & take), hi ^ ((hi ^ j_hi) & take))
        });
        Word::from_bits(u128::from(hi) << 64 | u128::from(lo))
    }
}

/// Which of a group's `words` have `key`'s key (in any state), and which are EMPTY: bit
/// `i` of each mask for word `i`. What a search and a twin check ask of each group they
/// pass, most of which hold no word of the key.
#[inline(always)]
pub(super) fn masks(words: &[Word; GROUP_SLOTS], key: Key) -> (u32, u32) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    {
        sse2::masks(words, key)
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    {
        let (mut mine, mut empty) = (0u32, 0u32);
        for (i, w) in words.iter().enumerate() {
            mine |= u32::from(w.key() == key) << i;
            empty |= u32::from(*w == Word::EMPTY) << i;
        }
        (mine, empty)
    }
}

/// [`masks`] in SSE2 (every x86_64 CPU has it): the four words' low halves compared with
/// the key, and each word's halves ORed and compared with zero, two words to a register,
/// and the answers gathered into two 4-bit masks: about 30 instructions, where a word at a
/// time in general registers took about 50 (each word's halves moved out of the vector
/// registers its load left them in, then a shift, a compare and a flag per word and mask).
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
mod sse2 {
    use super::{Key, Word, GROUP_SLOTS};
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_castsi128_ps, _mm_cmpeq_epi32, _mm_movemask_ps, _mm_or_si128,
        _mm_packs_epi32, _mm_set1_epi32, _mm_set1_epi64x, _mm_setzero_si128, _mm_unpackhi_epi64,
        _mm_unpacklo_epi64,
    };

    const _: () = assert!(GROUP_SLOTS == 4, "two words to a register, two registers");

    /// Word `i` of `words` (`i` below 4): each word ANDed with a mask that is all ones
    /// for word `i` alone, and the four ORed, in the vector registers the group's load
    /// left the words in.
    #[inline(always)]
    pub(super) fn select(words: &[Word; GROUP_SLOTS], i: usize) -> Word {
        // Safety: as in `masks`: SSE2 intrinsics, and `__m128i` and `u128` are both 16
        // plain bytes.
        #[allow(unused_unsafe)]
        unsafe {
            let at = _mm_set1_epi32(i as i32);
            let pick = |j: i32, word: Word| {
                let bits = std::mem::transmute::<u128, __m128i>(word.to_bits());
                _mm_and_si128(bits, _mm_cmpeq_epi32(at, _mm_set1_epi32(j)))
            };
            let word = _mm_or_si128(
                _mm_or_si128(pick(0, words[0]), pick(1, words[1])),
                _mm_or_si128(pick(2, words[2]), pick(3, words[3])),
            );
            Word::from_bits(std::mem::transmute::<__m128i, u128>(word))
        }
    }

    #[inline(always)]
    pub(super) fn masks(words: &[Word; GROUP_SLOTS], key: Key) -> (u32, u32) {
        // Safety: the intrinsics are SSE2's, which every x86_64 CPU has (the target's
        // baseline); `__m128i` and `u128` are both 16 plain bytes, and x86 is
        // little-endian, so the register's low lane is the word's low half. (The intrinsics
        // are safe to call since Rust 1.87; the block is for the declared MSRV.)
        #[allow(unused_unsafe)]
        unsafe {
            let v = words.map(|w| std::mem::transmute::<u128, __m128i>(w.to_bits()));
            let (low01, low23) = (
                _mm_unpacklo_epi64(v[0], v[1]),
                _mm_unpacklo_epi64(v[2], v[3]),
            );
            let (high01, high23) = (
                _mm_unpackhi_epi64(v[0], v[1]),
                _mm_unpackhi_epi64(v[2], v[3]),
            );
            // Each 64-bit compare as two 32-bit ones: a word's two lanes are both all ones
            // exactly when its halves are equal. Packed to 16 bits, the two lanes of word
            // `i` make the 32-bit lane `i`, all ones exactly when both were.
            let state = _mm_set1_epi64x(!Word::STATE_MASK as i64);
            let low = _mm_set1_epi64x(key.in_low() as i64);
            let keys = _mm_packs_epi32(
                _mm_cmpeq_epi32(_mm_and_si128(low01, state), low),
                _mm_cmpeq_epi32(_mm_and_si128(low23, state), low),
            );
            let zero = _mm_setzero_si128();
            let empty = _mm_packs_epi32(
                _mm_cmpeq_epi32(_mm_or_si128(low01, high01), zero),
                _mm_cmpeq_epi32(_mm_or_si128(low23, high23), zero),
            );
            let ones = _mm_set1_epi32(-1);
            let bits = |lanes: __m128i| {
                _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(lanes, ones))) as u32
            };
            (bits(keys), bits(empty))
        }
    }
}

/// What [`Group::find`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Match {
    /// The group's first word of the key, an uncompleted entry: its index and word.
    Holds(usize, Word),
    /// The group's first word of the key is not an entry to change.
    Odd,
    /// No word of the key.
    Absent,
}
