//! Where a root lives: a bijective mix of its id picks its table and its key there, and a
//! completion or shutdown turns them back into the id.

use crate::acker::word::{Key, KEY_SHIFT};

/// A bijective mix of root ids, so that the tables can store hashes and still name roots.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mix {
    pub(super) seed: u64,
}

const M1: u64 = 0xbf58_476d_1ce4_e5b9;
const M2: u64 = 0x94d0_49bb_1331_11eb;

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
    #[inline]
    fn hash(self, root: u64) -> u64 {
        let mut z = root ^ self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(M1);
        z = (z ^ (z >> 27)).wrapping_mul(M2);
        z ^ (z >> 31)
    }

    fn root(self, hash: u64) -> u64 {
        let unshift = |mut z: u64, s: u32| {
            let mut y = z;
            for _ in 0..64 / s {
                y = z ^ (y >> s);
            }
            z = y;
            z
        };
        let mut z = unshift(hash, 31);
        z = unshift(z.wrapping_mul(const { inverse(M2) }), 27);
        z = unshift(z.wrapping_mul(const { inverse(M1) }), 30);
        z ^ self.seed
    }
}

/// Where a root lives: its table and its key there.
///
/// The table is the hash's top `table_bits`; the key is the hash rotated left by
/// `table_bits` (so the bits just below the table's become the key's top bits, which pick
/// its home line) without its low [`KEY_SHIFT`] bits, which are the table index's low bits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    pub(super) mix: Mix,
    pub(super) table_bits: u32,
}

impl Layout {
    #[inline]
    pub(super) fn place(self, root: u64) -> (usize, Key) {
        let h = self.mix.hash(root);
        let table = (h >> (64 - self.table_bits)) as usize;
        (table, Key::new(h.rotate_left(self.table_bits) >> KEY_SHIFT))
    }

    pub(super) fn root(self, table: usize, key: Key) -> u64 {
        let low = table as u64 & ((1 << KEY_SHIFT) - 1);
        let rotated = key.bits() << KEY_SHIFT | low;
        self.mix.root(rotated.rotate_right(self.table_bits))
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
            let layout = Layout { mix, table_bits };
            for root in [0, 1, 2, 7, u64::MAX, 1 << 63, 0xdead_beef_cafe_f00d] {
                assert_eq!(mix.root(mix.hash(root)), root);
                let (table, key) = layout.place(root);
                assert!(table < 1 << table_bits);
                assert_eq!(
                    layout.root(table, key),
                    root,
                    "{table_bits} bits, root {root:#x}"
                );
            }
        }
    }
}
