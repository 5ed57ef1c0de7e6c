//! What this machine allows an operation on a random cache line: the floor under the
//! Acker's ack at a million pending, and under the peers' own.
//!
//! An ack at 1M pending is memory-bound: a load of the root's line, which misses the core's
//! caches, and an atomic change of a word on it. The Acker's word is 16 bytes (key, state
//! and XOR value, changed together: the table's "No grace period"), so the change is a
//! `lock cmpxchg16b`; a map behind a lock per shard changes its entry with a plain store
//! between a locked acquire and release of a lock whose line stays in the cache. How much of
//! one operation's miss the core overlaps with the next one's depends on which of those it
//! runs, and this bench measures each shape alone, one operation per iteration on lines
//! picked at random in [`REGION`] bytes (the size of a 1M-pending table; huge pages asked
//! for, as the Acker's tables are):
//!
//! * `load`: the line's four words loaded, nothing written (the misses overlap freely);
//! * `load+cas128`: the load, then a 16-byte CAS on its first word (the Acker's ack);
//! * `load+cas64`: the load, then an 8-byte CAS (what an ack with an 8-byte word would do);
//! * `lock xor64`: an 8-byte `lock xor` on the line, no load first;
//! * `lock+load+store+unlock`: a locked acquire and release of one hot lock word around
//!   the load and a plain store (a shard-locked map's update, as dashmap's);
//! * `prefetched load+cas128`: `load+cas128` with the line [`AHEAD`] operations on
//!   prefetched first, the shape of `Acker::apply` (its floor when messages come in
//!   batches);
//! * `load+cas128, 192 instructions apart` and `lock+load+store+unlock, 192 instructions
//!   apart`: those two shapes with [`PADDING`] instructions of other work after each
//!   operation, about a real message's path: how much of the next miss the core still
//!   overlaps once each operation's own work fills its window.
//!
//! The 16-byte operations are the instructions the Acker's own inlined path runs
//! (`vmovdqa` loads, `lock cmpxchg16b`), written here the same way; elsewhere than on x86_64
//! with AVX, portable-atomic's.
//!
//! Run: `cargo bench --bench machine`. On a 2-core AMD EPYC VM
//! (two runs): `load` 18.3-18.4 ns, `load+cas128` 37.5-38.7, `load+cas64` 16.4-17.0,
//! `lock xor64` 14.6-14.8, `lock+load+store+unlock` 24.1-24.7. The 16-byte CAS makes each
//! operation wait for its own miss, where the 8-byte locked operations overlap the next
//! one's: the shard lock's shape over the Acker's (0.64) is about the one-at-a-time ack's
//! ratio to dashmap in `benches/acker.rs` (0.72-0.74), and an ack with an 8-byte CAS would
//! have half the floor. A later run on the same VM: `load+cas128` 36.4 ns,
//! `lock+load+store+unlock` 24.3, `prefetched load+cas128` 11.5, and with 192 instructions
//! between operations 150-181 and 157-171 (two runs): a whole trip to memory each,
//! whichever the shape.
//! So one message at a time is paced by how much of its path lies between two misses,
//! more than by its CAS; the Acker's ack (about 150 instructions, 101 ns at 1M pending)
//! and dashmap's (about 60, 74-108 ns in the same runs) both sit between those floors.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// Bytes of lines the operations pick from: about a 1M-pending acker's tables.
const REGION: usize = 64 << 20;
/// Random line indices, cycled through.
const PICKS: usize = 1 << 22;
/// How many operations ahead `prefetched load+cas128` prefetches.
const AHEAD: usize = 16;
/// Huge-page alignment.
const HUGE: usize = 2 << 20;

/// `REGION` zeroed bytes, 2 MiB aligned, with transparent huge pages asked for.
struct Region {
    base: *mut u8,
    layout: Layout,
}

impl Region {
    fn new() -> Self {
        let layout = Layout::from_size_align(REGION, HUGE).expect("a valid layout");
        // Safety: a non-zero size.
        let base = unsafe { alloc_zeroed(layout) };
        assert!(!base.is_null(), "out of memory");
        #[cfg(target_os = "linux")]
        // Safety: advice on memory this value owns; the kernel may ignore it.
        unsafe {
            libc::madvise(base.cast(), REGION, libc::MADV_HUGEPAGE);
        }
        // Written once, so every page is there before the first measurement.
        // Safety: `REGION` bytes from `base` belong to this allocation.
        unsafe { std::ptr::write_bytes(base, 1, REGION) };
        Region { base, layout }
    }

    /// Line `i`'s first 16-byte word.
    fn word(&self, i: usize) -> *mut u128 {
        assert!(i < REGION / 64);
        // Safety: in bounds (above); 64-byte aligned.
        unsafe { self.base.add(i * 64).cast::<u128>() }
    }

    /// Line `i`'s first eight bytes.
    fn first(&self, i: usize) -> &AtomicU64 {
        assert!(i < REGION / 64);
        // Safety: as in `words`.
        unsafe { &*self.base.add(i * 64).cast::<AtomicU64>() }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // Safety: allocated in `new` with this layout.
        unsafe { dealloc(self.base, self.layout) };
    }
}

/// The four words of the line at `line`, each loaded atomically: the first, and the low
/// halves of the others XORed (so that none of the loads is dead).
#[cfg(target_arch = "x86_64")]
fn load4(line: *mut u128) -> (u128, u64) {
    let (a, a_hi, b, c, d): (u64, u64, u64, u64, u64);
    // Safety: `line` is a 64-byte aligned line of the region (`Region::word`), and `main`
    // checked the CPU for AVX, where an aligned 16-byte `vmovdqa` is one atomic access.
    unsafe {
        std::arch::asm!(
            "vmovdqa {x0}, xmmword ptr [{p}]",
            "vmovdqa {x1}, xmmword ptr [{p} + 16]",
            "vmovdqa {x2}, xmmword ptr [{p} + 32]",
            "vmovdqa {x3}, xmmword ptr [{p} + 48]",
            "vmovq {a}, {x0}",
            "vpextrq {a_hi}, {x0}, 1",
            "vmovq {b}, {x1}",
            "vmovq {c}, {x2}",
            "vmovq {d}, {x3}",
            p = in(reg) line,
            x0 = out(xmm_reg) _, x1 = out(xmm_reg) _, x2 = out(xmm_reg) _, x3 = out(xmm_reg) _,
            a = out(reg) a, a_hi = out(reg) a_hi, b = out(reg) b, c = out(reg) c, d = out(reg) d,
            options(nostack, preserves_flags),
        );
    }
    (u128::from(a_hi) << 64 | u128::from(a), b ^ c ^ d)
}

/// `lock cmpxchg16b` on `word`, as the Acker's slot word does it: the value seen.
#[cfg(target_arch = "x86_64")]
fn cas128(word: *mut u128, current: u128, new: u128) -> u128 {
    let (lo, hi): (u64, u64);
    // Safety: `word` is 16-byte aligned in the region and `main` checked for cmpxchg16b.
    // `rbx` is swapped in and restored around the instruction, the address pinned to
    // `rsi` (as the crate's own `cmpxchg16b`).
    unsafe {
        std::arch::asm!(
            "xchg {new_lo}, rbx",
            "lock cmpxchg16b xmmword ptr [rsi]",
            "mov rbx, {new_lo}",
            in("rsi") word,
            new_lo = inout(reg) new as u64 => _,
            in("rcx") (new >> 64) as u64,
            inout("rax") current as u64 => lo,
            inout("rdx") (current >> 64) as u64 => hi,
            options(nostack),
        );
    }
    u128::from(hi) << 64 | u128::from(lo)
}

/// Instructions of other work [`padded`] runs after each operation: about what a
/// message's path runs beside its own load and CAS (the Acker's common ack is about 150
/// instructions, and a caller's loop adds some).
const PADDING: u32 = 192;
const _: () = assert!(PADDING == 4 * 48, "the asm's .rept count");

/// [`PADDING`] instructions that depend on nothing the operation loaded: four chains of
/// adds on `seed`, so that the work is short in latency and long in the core's window
/// (each instruction holds a place in the reorder buffer until it retires).
fn padded(seed: u64) -> u64 {
    let (mut a, mut b, mut c, mut d) = (seed, seed ^ 1, seed ^ 2, seed ^ 3);
    #[cfg(target_arch = "x86_64")]
    // Safety: register arithmetic only.
    unsafe {
        std::arch::asm!(
            ".rept 48",
            "add {a}, 1",
            "add {b}, 3",
            "add {c}, 5",
            "add {d}, 7",
            ".endr",
            a = inout(reg) a, b = inout(reg) b, c = inout(reg) c, d = inout(reg) d,
            options(nomem, nostack),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..u64::from(PADDING / 4) {
        (a, b, c, d) = (
            a.wrapping_add(i),
            b.wrapping_add(3 * i),
            c.wrapping_add(5 * i),
            d.wrapping_add(7 * i),
        );
        std::hint::black_box(a);
    }
    a ^ b ^ c ^ d
}

/// Asks for `line` to be brought to the cache, without waiting.
fn prefetch(line: *mut u128) {
    #[cfg(target_arch = "x86_64")]
    // Safety: a prefetch reads nothing the program sees and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}

#[cfg(not(target_arch = "x86_64"))]
fn load4(line: *mut u128) -> (u128, u64) {
    // Safety: as on x86_64; portable-atomic's atomics on the same memory.
    let words = unsafe { &*line.cast::<[portable_atomic::AtomicU128; 4]>() };
    let rest = words[1..]
        .iter()
        .fold(0, |x, w| x ^ w.load(Ordering::SeqCst) as u64);
    (words[0].load(Ordering::SeqCst), rest)
}

#[cfg(not(target_arch = "x86_64"))]
fn cas128(word: *mut u128, current: u128, new: u128) -> u128 {
    // Safety: as on x86_64.
    let word = unsafe { &*word.cast::<portable_atomic::AtomicU128>() };
    match word.compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(seen) | Err(seen) => seen,
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Times `iters` operations, each `op(line, ahead)` on the next random line (`ahead`: the
/// line [`AHEAD`] operations on).
fn run(picks: &[u32], next: &mut usize, iters: u64, mut op: impl FnMut(usize, usize)) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        let ahead = picks[(*next + AHEAD) % picks.len()] as usize;
        op(picks[*next] as usize, ahead);
        *next = (*next + 1) % picks.len();
    }
    start.elapsed()
}

fn line_ops(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    assert!(
        std::arch::is_x86_feature_detected!("avx")
            && std::arch::is_x86_feature_detected!("cmpxchg16b"),
        "this bench's 16-byte operations need AVX and cmpxchg16b"
    );
    let region = Region::new();
    let lines = (REGION / 64) as u64;
    let picks: Vec<u32> = (0..PICKS as u64).map(|i| (mix(i) % lines) as u32).collect();
    let lock = AtomicU64::new(0);
    let mut group = c.benchmark_group("machine/random-line-64MiB");
    group.throughput(Throughput::Elements(1));
    let mut next = 0;
    group.bench_function("load", |b| {
        let mut sum = 0u64;
        b.iter_custom(|iters| {
            run(&picks, &mut next, iters, |i, _| {
                let (first, rest) = load4(region.word(i));
                sum = sum.wrapping_add(first as u64 ^ rest);
            })
        });
        std::hint::black_box(sum);
    });
    // The Acker's ack: the line's words loaded, then a 16-byte CAS on its first.
    let ack128 = |i: usize| {
        let word = region.word(i);
        let (seen, rest) = load4(word);
        std::hint::black_box(rest);
        let now = cas128(word, seen, seen ^ 2);
        assert_eq!(now, seen, "only this thread writes the region");
    };
    // A shard-locked map's update: a locked acquire and release of one hot lock word
    // around a load and a plain store.
    let locked = |i: usize| {
        // Acquire and release: a lock's own orderings.
        while lock
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {}
        let w = region.first(i);
        // Relaxed: under the lock, as a map's plain access would be.
        let seen = w.load(Ordering::Relaxed);
        w.store(seen ^ 2, Ordering::Relaxed);
        lock.fetch_sub(1, Ordering::Release);
    };
    group.bench_function("load+cas128", |b| {
        b.iter_custom(|iters| run(&picks, &mut next, iters, |i, _| ack128(i)))
    });
    group.bench_function("load+cas64", |b| {
        b.iter_custom(|iters| {
            run(&picks, &mut next, iters, |i, _| {
                let w = region.first(i);
                let seen = w.load(Ordering::SeqCst);
                let _ = w.compare_exchange(seen, seen ^ 2, Ordering::SeqCst, Ordering::SeqCst);
            })
        })
    });
    group.bench_function("lock xor64", |b| {
        b.iter_custom(|iters| {
            run(&picks, &mut next, iters, |i, _| {
                region.first(i).fetch_xor(2, Ordering::SeqCst);
            })
        })
    });
    group.bench_function("prefetched load+cas128", |b| {
        b.iter_custom(|iters| {
            run(&picks, &mut next, iters, |i, ahead| {
                prefetch(region.word(ahead));
                ack128(i);
            })
        })
    });
    for (name, op) in [
        (
            "load+cas128, 192 instructions apart",
            &ack128 as &dyn Fn(usize),
        ),
        ("lock+load+store+unlock, 192 instructions apart", &locked),
    ] {
        group.bench_function(name, |b| {
            let mut sum = 0u64;
            b.iter_custom(|iters| {
                run(&picks, &mut next, iters, |i, _| {
                    op(i);
                    sum = sum.wrapping_add(padded(i as u64));
                })
            });
            std::hint::black_box(sum);
        });
    }
    group.bench_function("lock+load+store+unlock", |b| {
        b.iter_custom(|iters| run(&picks, &mut next, iters, |i, _| locked(i)))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    targets = line_ops
}
criterion_main!(benches);
