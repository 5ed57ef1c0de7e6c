//! Where a root lives: a bijective mix of its id picks its table and its key there, and a
//! completion or shutdown turns them back into the id.

use crate::acker::table::word::{Key, KEY_SHIFT};

/// A bijective mix of root ids, so that the tables can store hashes and still name roots.
#[derive(Clone, Copy, Debug)]
pub(in crate::acker::engine) struct Mix {
    pub(in crate::acker::engine) seed: u64,
}

/// An odd multiplier (splitmix64's first).
const M1: u64 = 0xbf58_476d_1ce4_e5b9;

/// The inverse of an odd `m` modulo 2^64 (Newton's iteration doubles the correct bits).
const fn inverse(m: u64) -> u64 {
    let mut x = m; // correct to 3 bits for odd m
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(m.wrapping_mul(x)));
        i += 1;
    }
    x
}

impl Mix {
    /// Fold, multiply, fold: each step a bijection. The multiply carries every bit of the
    /// folded id into the top bits, which pick the table and the home line; the last fold
    /// carries the top bits into the low ones, which are the key's tag (`Key::tag`), so
    /// that ids that differ only in their high half do not share one. Two multiplies and
    /// three shifts (splitmix64's finalizer) cost an ack 2 ns more on the path to its
    /// line, for nothing the tables need: the seed makes the layout differ per acker, not
    /// unpredictable (Storm's ids are random).
    #[inline]
    fn hash(self, root: u64) -> u64 {
        let z = root ^ self.seed;
        let z = (z ^ (z >> 32)).wrapping_mul(M1);
        z ^ (z >> 32)
    }

    fn root(self, hash: u64) -> u64 {
        // Each fold by 32 is its own inverse.
        let z = (hash ^ (hash >> 32)).wrapping_mul(const { inverse(M1) });
        z ^ (z >> 32) ^ self.seed
    }
}

/// Where a root lives: its table and its key there.
///
/// The table is the hash's top `table_bits`; the key is the hash rotated left by
/// `table_bits` (so the bits just below the table's become the key's top bits, which pick
/// its home line) without its low [`KEY_SHIFT`] bits, which are the table index's low bits.
#[derive(Clone, Copy, Debug)]
pub(in crate::acker::engine) struct Layout {
    mix: Mix,
    /// 64 less the table bits: the shift that leaves a hash's table, and the rotation
    /// right that is a rotation left by the table bits. Kept as such, so that a placement
    /// uses it as it is (one shift count for both, none computed per message).
    shard_shift: u32,
}

impl Layout {
    /// The layout of `mix` over `1 << table_bits` tables (1 to 63 bits).
    pub(in crate::acker::engine) fn new(mix: Mix, table_bits: u32) -> Self {
        debug_assert!((1..64).contains(&table_bits), "{table_bits} table bits");
        Layout {
            mix,
            shard_shift: 64 - table_bits,
        }
    }

    #[inline]
    pub(in crate::acker::engine) fn place(self, root: u64) -> (usize, Key) {
        let h = self.mix.hash(root);
        let shard = (h >> self.shard_shift) as usize;
        (
            shard,
            Key::new(h.rotate_right(self.shard_shift) >> KEY_SHIFT),
        )
    }

    pub(in crate::acker::engine) fn root(self, shard: usize, key: Key) -> u64 {
        let low = shard as u64 & ((1 << KEY_SHIFT) - 1);
        let rotated = key.bits() << KEY_SHIFT | low;
        self.mix.root(rotated.rotate_left(self.shard_shift))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_and_the_layout_are_bijections() {
        let mix = Mix {
            seed: 0x1234_5678_9abc_def0,
        };
        for table_bits in [4, 5, 8, 16] {
            let layout = Layout::new(mix, table_bits);
            for root in [0, 1, 2, 7, u64::MAX, 1 << 63, 0xdead_beef_cafe_f00d] {
                assert_eq!(mix.root(mix.hash(root)), root);
                let (shard, key) = layout.place(root);
                assert!(shard < 1 << table_bits);
                assert_eq!(
                    layout.root(shard, key),
                    root,
                    "{table_bits} bits, root {root:#x}"
                );
            }
        }
    }

    /// Ids with a pattern (counters, strides, one half fixed) spread over the tables and
    /// the home lines as random ones would, and keep distinct tags.
    #[test]
    fn patterned_roots_spread_over_tables_homes_and_tags() {
        const N: u64 = 1 << 16;
        const HOMES: usize = 1024; // a table's home lines: the key's top 10 bits
        let layout = Layout::new(
            Mix {
                seed: 0x1234_5678_9abc_def0,
            },
            4,
        );
        type Pattern = (&'static str, fn(u64) -> u64);
        let patterns: [Pattern; 6] = [
            ("a counter", |i| i),
            ("a stride of 2^20", |i| i << 20),
            ("a stride of 2^40", |i| i << 40),
            ("the high half", |i| i << 32 | 7),
            ("both halves equal", |i| i << 32 | i),
            ("random", |i| {
                let z = (i ^ (i >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                z ^ (z >> 29)
            }),
        ];
        for (name, root) in patterns {
            let mut tables = [0u32; 16];
            let mut homes = vec![0u32; 16 * HOMES];
            let mut tags = std::collections::HashSet::new();
            for i in 0..N {
                let (shard, key) = layout.place(root(i));
                tables[shard] += 1;
                homes[shard * HOMES + (key.bits() >> (60 - 10)) as usize] += 1;
                tags.insert(key.tag());
            }
            // 4096 a table: a binomial's deviation is 62.
            let (least, most) = (tables.iter().min(), tables.iter().max());
            assert!(
                *least.unwrap() > 3700 && *most.unwrap() < 4500,
                "{name}: tables from {least:?} to {most:?}"
            );
            // 4 a home line: the largest of 16k Poisson(4) counts is about 14.
            let crowded = homes.iter().max().unwrap();
            assert!(*crowded <= 20, "{name}: a home line of {crowded}");
            // 2^16 random tags of 32 bits share about one pair.
            assert!(tags.len() as u64 >= N - 8, "{name}: {} tags", tags.len());
        }
    }
}
