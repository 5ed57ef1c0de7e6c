//! Loom models of ackwheel's concurrent protocols live in `tests/`, one file per protocol.
//!
//! They compile only under `--cfg loom`:
//! `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --release`.
