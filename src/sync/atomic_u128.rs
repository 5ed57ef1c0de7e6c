//! The 128-bit atomic behind the Acker's slot word, with its two operations inlined.
//!
//! portable-atomic makes a 128-bit atomic lock-free on x86_64, but unless the crate is
//! compiled with `-C target-feature=+cmpxchg16b` (which a library cannot ask of its users)
//! it picks `cmpxchg16b` or a fallback at run time and reaches it through a function
//! pointer, once per load and once per CAS. The caller's registers are spilled around each
//! of those calls: `perf` put 40-45 % of a tree's time in the slot search and these
//! calls, and compiling with the feature made the whole tree 1.6x faster.
//!
//! Here the CPU is checked once (`cmpxchg16b`, AVX, and an Intel or AMD vendor) and the
//! answer cached in a static. A caller keeps a copy of it ([`Cpu`]: a table has one, made
//! at its build) and passes it to each operation, so that an operation costs a compare of
//! a byte the caller has at hand and a predicted branch (read from the acker's generic
//! code, which is compiled in the user's crate, the static is reached through the global
//! offset table of a position-independent program: two loads and a compare), and then:
//!
//! * a CAS is an inlined `lock cmpxchg16b`, a full barrier on x86: SeqCst;
//! * a load is an inlined `vmovdqa`. Intel's and AMD's manuals guarantee that an aligned
//!   16-byte `vmovdqa` is one atomic access on processors that support AVX (Intel SDM
//!   vol. 3A 9.1.1; AMD APM vol. 2 7.3.2). A plain load is also SeqCst under the x86
//!   mapping as long as every store is a locked instruction, and this type has no store:
//!   the word changes only by CAS.
//!
//! Everywhere else (another architecture, a CPU without those features, Miri, which runs
//! no inline assembly) the operations are portable-atomic's. Both paths are hardware
//! atomics on the same memory, so which one a given access took never matters.
//!
//! ThreadSanitizer does not see inline assembly (portable-atomic's included), so it sees
//! neither path's accesses as synchronizing. Built with `--cfg ackwheel_tsan` (CI's TSan
//! run), every operation also holds one of a few striped locks around portable-atomic's:
//! TSan then sees what each CAS publishes (a payload written before a settle CAS, read
//! after a completing one). Slower, and still linearizable; never in a normal build. As
//! with the loom stand-in ([`sync`](crate::sync)), a load then synchronizes like a lock, so
//! TSan cannot catch data that only a load would publish; the table never relies on that.

use std::sync::atomic::Ordering;

/// Which path (module docs) this CPU's accesses take: what the static says, copied out for a
/// caller to keep and pass to each operation (module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cpu {
    /// The inlined instructions may be used on this CPU. True only as [`Cpu::get`] makes
    /// it, from `x86::available` (the field is private to this module), and a CPU's
    /// features do not change, so every copy stays exact.
    #[cfg(all(target_arch = "x86_64", not(miri), not(ackwheel_tsan)))]
    inlined: bool,
}

impl Cpu {
    /// This CPU's path (checking the CPU if no one has yet).
    #[inline(always)]
    pub(crate) fn get() -> Cpu {
        Cpu {
            #[cfg(all(target_arch = "x86_64", not(miri), not(ackwheel_tsan)))]
            inlined: x86::available(),
        }
    }
}

/// A 128-bit atomic integer with a load and a compare-exchange; see the module docs. Each
/// operation takes the path `cpu` found ([`Cpu::get`]).
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct AtomicU128(portable_atomic::AtomicU128);

impl AtomicU128 {
    #[cfg(any(test, loom))] // the tests and the loom stand-in's lines only
    pub(crate) const fn new(value: u128) -> Self {
        AtomicU128(portable_atomic::AtomicU128::new(value))
    }

    /// Loads the value. The inlined path is SeqCst whatever `order` asks.
    #[inline]
    #[allow(unused_variables)] // `cpu`, where there is one path
    pub(crate) fn load(&self, cpu: Cpu, order: Ordering) -> u128 {
        #[cfg(ackwheel_tsan)]
        let _stripe = tsan::lock(self);
        #[cfg(all(target_arch = "x86_64", not(miri), not(ackwheel_tsan)))]
        if cpu.inlined {
            // Safety: `as_ptr` is valid and 16-byte aligned (portable-atomic's type is
            // `align(16)`) for as long as `self` is borrowed, and `cpu.inlined` says
            // `available` checked the CPU features the instruction needs.
            return unsafe { x86::load(self.0.as_ptr()) };
        }
        self.0.load(order)
    }

    /// Loads each of `words` in order, each atomically (the array is not one snapshot: it
    /// is what `N` loads one after the other give), and returns what `then` makes of them.
    /// With the inlined path, four words are four `vmovdqa` in one block, and `then` is
    /// inlined into each path on its own: the words are not merged from the two paths
    /// into general registers first, so that what `then` leaves unused stays in vector
    /// registers (a match in a group's first word moves only that word out).
    #[inline(always)]
    #[allow(unused_variables)] // `cpu`, where there is one path
    pub(crate) fn load_each<const N: usize, R>(
        words: &[AtomicU128; N],
        cpu: Cpu,
        order: Ordering,
        then: impl FnOnce([u128; N]) -> R,
    ) -> R {
        #[cfg(all(target_arch = "x86_64", not(miri), not(ackwheel_tsan)))]
        if N == 4 && cpu.inlined {
            // Safety: `words` is four valid, 16-byte aligned atomics (the array has its
            // element's alignment and no padding); `cpu.inlined` says `available` checked
            // the CPU.
            let four = unsafe { x86::load4(words.as_ptr().cast::<u128>()) };
            return then(std::array::from_fn(|i| four[i]));
        }
        then(std::array::from_fn(|i| words[i].load(cpu, order)))
    }

    /// Stores `new` if the value is `current`: `Ok(current)`, else `Err(value seen)`.
    /// The inlined path is SeqCst whatever the orderings ask.
    #[inline]
    #[allow(unused_variables)] // `cpu`, where there is one path
    pub(crate) fn compare_exchange(
        &self,
        cpu: Cpu,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128> {
        #[cfg(ackwheel_tsan)]
        let _stripe = tsan::lock(self);
        #[cfg(all(target_arch = "x86_64", not(miri), not(ackwheel_tsan)))]
        if cpu.inlined {
            // Safety: as in `load`; `cpu.inlined` says `available` checked for
            // `cmpxchg16b`.
            let seen = unsafe { x86::cmpxchg16b(self.0.as_ptr(), current, new) };
            return if seen == current { Ok(seen) } else { Err(seen) };
        }
        self.0.compare_exchange(current, new, success, failure)
    }
}

/// The striped locks of a `--cfg ackwheel_tsan` build (module docs).
#[cfg(ackwheel_tsan)]
mod tsan {
    use std::sync::{Mutex, MutexGuard};

    const STRIPES: usize = 64;
    static LOCKS: [Mutex<()>; STRIPES] = [const { Mutex::new(()) }; STRIPES];

    /// The lock of `word`'s stripe, held for one operation (never two at once: no order to
    /// keep between stripes).
    pub(super) fn lock(word: &super::AtomicU128) -> MutexGuard<'static, ()> {
        let stripe = (word as *const super::AtomicU128 as usize >> 4) % STRIPES;
        LOCKS[stripe].lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(all(target_arch = "x86_64", not(miri), not(ackwheel_tsan)))]
mod x86 {
    use std::arch::asm;
    use std::sync::atomic::{AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    const INLINED: u8 = 1;
    const PORTABLE: u8 = 2;

    /// What [`detect`] found; `UNKNOWN` until the first operation.
    static SUPPORT: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// Whether the inlined instructions may be used on this CPU.
    #[inline(always)]
    pub(super) fn available() -> bool {
        // Relaxed: the answer depends only on the CPU, so every thread that computes it
        // stores the same value; nothing else is published through it.
        match SUPPORT.load(Ordering::Relaxed) {
            INLINED => true,
            PORTABLE => false,
            _ => detect(),
        }
    }

    #[cold]
    fn detect() -> bool {
        // Safety: `cpuid` leaf 0 exists on every x86_64 processor. (A safe function since
        // Rust 1.87; the block is for the declared MSRV.)
        #[allow(unused_unsafe)]
        let vendor = unsafe { std::arch::x86_64::__cpuid(0) };
        let intel = (vendor.ebx, vendor.edx, vendor.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e);
        let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        let inlined = (intel || amd)
            && std::arch::is_x86_feature_detected!("cmpxchg16b")
            && std::arch::is_x86_feature_detected!("avx");
        // Relaxed: see `available`.
        SUPPORT.store(if inlined { INLINED } else { PORTABLE }, Ordering::Relaxed);
        inlined
    }

    /// An atomic 16-byte load.
    ///
    /// # Safety
    /// `src` is valid for reads and 16-byte aligned, and the CPU has AVX and is Intel's or
    /// AMD's ([`available`]).
    #[inline(always)]
    pub(super) unsafe fn load(src: *mut u128) -> u128 {
        let (lo, hi): (u64, u64);
        // Safety: the caller's contract. No `readonly`/`pure` option: the asm is a compiler
        // barrier, so later accesses are not hoisted above this load (acquire).
        unsafe {
            asm!(
                "vmovdqa {v}, xmmword ptr [{src}]",
                "vmovq {lo}, {v}",
                "vpextrq {hi}, {v}, 1",
                src = in(reg) src,
                v = out(xmm_reg) _,
                lo = out(reg) lo,
                hi = out(reg) hi,
                options(nostack, preserves_flags),
            );
        }
        u128::from(hi) << 64 | u128::from(lo)
    }

    /// Four atomic 16-byte loads from consecutive words, one after the other.
    ///
    /// # Safety
    /// As for [`load`], for each of the four words from `src`.
    #[inline(always)]
    pub(super) unsafe fn load4(src: *const u128) -> [u128; 4] {
        use std::arch::x86_64::__m128i;
        let (a, b, c, d): (__m128i, __m128i, __m128i, __m128i);
        // Safety: the caller's contract; a compiler barrier, as in `load`.
        unsafe {
            asm!(
                "vmovdqa {a}, xmmword ptr [{src}]",
                "vmovdqa {b}, xmmword ptr [{src} + 16]",
                "vmovdqa {c}, xmmword ptr [{src} + 32]",
                "vmovdqa {d}, xmmword ptr [{src} + 48]",
                src = in(reg) src,
                a = out(xmm_reg) a,
                b = out(xmm_reg) b,
                c = out(xmm_reg) c,
                d = out(xmm_reg) d,
                options(nostack, preserves_flags),
            );
        }
        // Safety: `__m128i` and `u128` are both 16 plain bytes; x86 is little-endian, so
        // the register's low lane is the integer's low half, as memory had them.
        [a, b, c, d].map(|v| unsafe { std::mem::transmute::<__m128i, u128>(v) })
    }

    /// `lock cmpxchg16b`: stores `new` if `*dst == current`; returns the value seen (equal
    /// to `current` exactly when the store happened).
    ///
    /// # Safety
    /// `dst` is valid for reads and writes and 16-byte aligned, and the CPU has
    /// `cmpxchg16b` ([`available`]).
    #[inline(always)]
    pub(super) unsafe fn cmpxchg16b(dst: *mut u128, current: u128, new: u128) -> u128 {
        let (lo, hi): (u64, u64);
        // The instruction needs the new value's low half in `rbx`, which an asm block may
        // not name, so it comes in another register and is swapped into `rbx` around the
        // instruction, which restores it. The address is pinned to `rsi`: a `reg` operand
        // may be given `rbx` itself (seen in a release build), which the swap would
        // overwrite.
        // Safety: the caller's contract (valid, aligned `dst`; the CPU has cmpxchg16b).
        unsafe {
            asm!(
                "xchg {new_lo}, rbx",
                "lock cmpxchg16b xmmword ptr [rsi]",
                "mov rbx, {new_lo}",
                in("rsi") dst,
                new_lo = inout(reg) new as u64 => _,
                in("rcx") (new >> 64) as u64,
                inout("rax") current as u64 => lo,
                inout("rdx") (current >> 64) as u64 => hi,
                options(nostack),
            );
        }
        u128::from(hi) << 64 | u128::from(lo)
    }
}

#[cfg(test)]
mod tests {
    use super::{AtomicU128, Cpu};
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn load_and_compare_exchange_see_both_halves() {
        let word = AtomicU128::new(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(
            word.load(Cpu::get(), SeqCst),
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210
        );
        // A mismatch in either half fails and reports the whole value.
        for wrong in [0x0123_4567_89ab_cdef_0000_0000_0000_0000, 0x7654_3210] {
            assert_eq!(
                word.compare_exchange(Cpu::get(), wrong, 1, SeqCst, SeqCst),
                Err(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210)
            );
        }
        let new = u128::MAX - 5;
        assert_eq!(
            word.compare_exchange(
                Cpu::get(),
                0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
                new,
                SeqCst,
                SeqCst
            ),
            Ok(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210)
        );
        assert_eq!(word.load(Cpu::get(), SeqCst), new);
    }

    #[test]
    fn concurrent_increments_through_compare_exchange_are_never_lost() {
        // Each thread adds 1 to the high half and 1 to the low half per successful CAS; a
        // torn load or a lost update would break the halves' equality or the total.
        let word = AtomicU128::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..if cfg!(miri) { 50 } else { 50_000 } {
                        let mut seen = word.load(Cpu::get(), SeqCst);
                        loop {
                            let next = seen + (1u128 << 64) + 1;
                            match word.compare_exchange(Cpu::get(), seen, next, SeqCst, SeqCst) {
                                Ok(_) => break,
                                Err(now) => seen = now,
                            }
                        }
                    }
                });
            }
        });
        let total = word.load(Cpu::get(), SeqCst);
        let n = if cfg!(miri) { 200 } else { 200_000 };
        assert_eq!((total >> 64, total as u64 as u128), (n, n));
    }
}
