//! What more than one scenario uses: the report's pieces ([`report`]: progress line,
//! percentiles, number formatting), resident memory ([`rss`]), the `--plot` chart writer
//! ([`svg`]) and the per-thread seeds ([`split_seed`]).

pub(crate) mod report;
pub(crate) mod rss;
pub(crate) mod svg;

/// Thread `index`'s seed: a SplitMix64 step of `seed` and the index, so neighbouring seeds
/// and threads get unrelated streams.
pub(crate) fn split_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
