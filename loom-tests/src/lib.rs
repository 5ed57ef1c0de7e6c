//! Loom models of ackwheel's concurrent protocols live in `tests/`, one file per protocol.
//!
//! They compile only under `--cfg loom`:
//! `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --release`.
//!
//! A model whose exhaustive exploration takes minutes runs bounded on every CI run, and
//! exhaustively by hand (`sized`; README, "Testing").

/// `model` bounded to `ci` preemptions per execution, for a model too long to explore
/// exhaustively on every CI run: so in CI and in a plain `cargo test`; exhaustively (as
/// `model` was given) with `ACKWHEEL_LOOM_FULL=1` in the environment; and to loom's own
/// `LOOM_MAX_PREEMPTIONS` where that is set (`Builder::new` reads it).
#[cfg(loom)]
pub fn sized(mut model: loom::model::Builder, ci: usize) -> loom::model::Builder {
    let full = std::env::var_os("ACKWHEEL_LOOM_FULL").is_some_and(|v| v == "1");
    if !full && std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        model.preemption_bound = Some(ci);
    }
    model
}
