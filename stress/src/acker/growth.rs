//! What an operation pays while the acker's tables grow: the latency of each init and ack,
//! timed one by one, while what is pending climbs from nothing to `--growth-roots`, beside
//! the same operations once the tables have grown. Growth must never block a shard for
//! long, and its p99.9 is what shows it: this phase reports it, and judges only that every
//! operation did what it should.
//!
//! One acker, default settings (reaper thread, real clock) but a timeout no root reaches
//! and `max_pending` room for the fill. Two threads run at once:
//!
//! - the **filler** initializes `roots` roots one after another and acks none of them, so
//!   every table grows through several migrations (doubling each time). An operation
//!   that finds a migration under way in its table helps it move a few groups, and a claim
//!   that finds its table crowded starts the next one: that work lands on the operations
//!   timed here;
//! - the **neighbour** meanwhile runs trees of its own through the same acker,
//!   [`IN_FLIGHT`] at a time, each an init and two acks that complete it (as the churn
//!   does): operations that meet migrations they did not start.
//!
//! Each operation is timed alone: one `Instant::now()` between consecutive operations, so a
//! sample is one operation plus one clock read (tens of nanoseconds here). Then the filler
//! acks all its roots (untimed; the tables keep their size, since they shrink only after
//! their load has stayed under 1/8 for 256 ticks) and both threads run again in the same
//! way: the **grown** baseline, the same operations on tables already large enough, with
//! the migrations started during it counted: 0, unless the drain took longer than the
//! shrink delay (under a sanitizer it does, and the tables shrink and grow again). The
//! difference between the two rows is what growth costs an operation. On a machine with
//! fewer cores than the filler, the neighbour and the reaper, preemption shows in the tail
//! of both rows alike.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ackwheel::Acker;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::footprint::tree;
use crate::common::report::{self, Percentiles};

/// The neighbour's trees in flight (a power of two).
pub(crate) const IN_FLIGHT: u64 = 1 << 10;

/// A timeout no root of the phase reaches.
const TIMEOUT: Duration = Duration::from_secs(600);

/// The neighbour's trees are numbered from here, the filler's from 0.
const NEIGHBOUR_TREES: u64 = 1 << 62;

/// The phase's figures; written to the JSON report under `acker.growth`.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Growth {
    /// Roots the filler initializes in each row.
    pub(crate) roots: u64,
    /// While the tables grow from their smallest size.
    pub(crate) growing: Row,
    /// The same operations on the grown tables.
    pub(crate) grown: Row,
    /// Slots of the acker's tables after the first fill.
    pub(crate) table_slots: usize,
}

/// One row: the filler's inits and the neighbour's operations, in nanoseconds per
/// operation (as microseconds in [`Percentiles`]).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Row {
    /// The filler's time for its inits.
    pub(crate) seconds: f64,
    /// Table migrations started during the row: to grow, to shrink.
    pub(crate) migrations: (u64, u64),
    pub(crate) filler: Percentiles,
    pub(crate) neighbour: Percentiles,
}

/// Runs the phase with `roots` roots per fill.
pub(crate) fn run(roots: u64) -> Result<Growth, String> {
    let max_pending = usize::try_from(roots + 4 * IN_FLIGHT)
        .map_err(|_| format!("growth: {roots} roots do not fit in usize"))?;
    let acker: Acker<u32> = Acker::builder()
        .timeout(TIMEOUT)
        .max_pending(max_pending)
        .build()
        .map_err(|e| format!("building the growth acker: {e}"))?;
    let mut neighbour = Neighbour::new(&acker);
    let growing = row(&acker, roots, &mut neighbour)?;
    let table_slots = acker.table_slots();
    drain(&acker, roots)?;
    let grown = row(&acker, roots, &mut neighbour)?;
    drain(&acker, roots)?;
    neighbour.drain()?;
    if acker.pending() != 0 {
        return Err(format!(
            "growth: {} roots pending after every tree was acked",
            acker.pending()
        ));
    }
    acker.shutdown();
    Ok(Growth {
        roots,
        growing,
        grown,
        table_slots,
    })
}

/// One row: the filler's `roots` inits on this thread, the neighbour's steps on another
/// until the filler is done (and at least one step, so that its row is never empty).
fn row(acker: &Acker<u32>, roots: u64, neighbour: &mut Neighbour<'_>) -> Result<Row, String> {
    let before = acker.table_migrations();
    let filled = AtomicBool::new(false);
    let (filler, neighbour_ops) = std::thread::scope(|s| {
        let stepping = s.spawn(|| {
            let mut ops = report::histogram();
            loop {
                neighbour.step(&mut ops)?;
                // Relaxed: the flag only ends the loop; the join orders everything else.
                if filled.load(Ordering::Relaxed) {
                    return Ok::<_, String>(ops);
                }
            }
        });
        let filler = fill(acker, roots);
        filled.store(true, Ordering::Relaxed); // Relaxed: as the load above.
        let neighbour_ops = stepping
            .join()
            .unwrap_or_else(|_| Err("growth: the neighbour thread panicked".into()));
        (filler, neighbour_ops)
    });
    let (inits, seconds) = filler?;
    let after = acker.table_migrations();
    Ok(Row {
        seconds,
        migrations: (after.0 - before.0, after.1 - before.1),
        filler: Percentiles::of(&inits),
        neighbour: Percentiles::of(&neighbour_ops?),
    })
}

/// The filler: inits of roots `0..roots`, each timed. The histogram and the seconds they
/// took.
fn fill(acker: &Acker<u32>, roots: u64) -> Result<(Histogram<u64>, f64), String> {
    let mut inits = report::histogram();
    let start = Instant::now();
    let mut last = start;
    for i in 0..roots {
        let (root, first, _) = tree(i);
        init(acker, root, first, "the filler's root", i)?;
        last = record(&mut inits, last);
    }
    Ok((inits, start.elapsed().as_secs_f64()))
}

/// An init that must succeed: `max_pending` leaves room for every root of the phase, so a
/// refusal is a defect (as it is in the traffic phase), not something to wait out.
fn init(acker: &Acker<u32>, root: u64, xor: u64, whose: &str, i: u64) -> Result<(), String> {
    acker.init(root, xor, i as u32).map_err(|e| {
        format!(
            "growth: {whose} {i} refused: {e} ({} pending)",
            acker.pending()
        )
    })
}

/// Completes the filler's roots `0..roots`, untimed.
fn drain(acker: &Acker<u32>, roots: u64) -> Result<(), String> {
    for i in 0..roots {
        let (root, first, _) = tree(i);
        if !acker.ack(root, first) {
            return Err(format!("growth: the ack of root {i} did not complete it"));
        }
    }
    Ok(())
}

/// Records the time since `last` (one operation and the clock read that ends it) and
/// returns now.
fn record(h: &mut Histogram<u64>, last: Instant) -> Instant {
    let now = Instant::now();
    let ns = now.duration_since(last).as_nanos();
    // Saturated at the histogram's bound (an hour): nothing in a run gets near it.
    h.saturating_record(u64::try_from(ns).unwrap_or(u64::MAX).max(1));
    now
}

/// The neighbour's trees: step `i` starts tree `i`, sends the first ack of tree
/// `i - IN_FLIGHT / 2` and the last of tree `i - IN_FLIGHT`, which completes it.
struct Neighbour<'a> {
    acker: &'a Acker<u32>,
    next: u64,
}

impl<'a> Neighbour<'a> {
    fn new(acker: &'a Acker<u32>) -> Self {
        Neighbour { acker, next: 0 }
    }

    /// One step, each of its operations timed into `ops`.
    fn step(&mut self, ops: &mut Histogram<u64>) -> Result<(), String> {
        let (i, acker) = (self.next, self.acker);
        let mut last = Instant::now();
        let (root, first, _) = tree(NEIGHBOUR_TREES + i);
        init(acker, root, first, "the neighbour's tree", i)?;
        last = record(ops, last);
        if let Some(j) = i.checked_sub(IN_FLIGHT / 2) {
            self.first_ack(j)?;
            last = record(ops, last);
        }
        if let Some(j) = i.checked_sub(IN_FLIGHT) {
            self.last_ack(j)?;
            record(ops, last);
        }
        self.next += 1;
        Ok(())
    }

    fn first_ack(&self, j: u64) -> Result<(), String> {
        let (root, first, last) = tree(NEIGHBOUR_TREES + j);
        if self.acker.ack(root, first ^ last) {
            return Err(format!(
                "growth: the neighbour's tree {j} completed by its first ack"
            ));
        }
        Ok(())
    }

    fn last_ack(&self, j: u64) -> Result<(), String> {
        let (root, _, last) = tree(NEIGHBOUR_TREES + j);
        if !self.acker.ack(root, last) {
            return Err(format!(
                "growth: the neighbour's tree {j}'s last ack did not complete it"
            ));
        }
        Ok(())
    }

    /// Completes the trees still in flight, untimed.
    fn drain(&mut self) -> Result<(), String> {
        let end = self.next;
        for j in end.saturating_sub(IN_FLIGHT)..end {
            if j + IN_FLIGHT / 2 >= end {
                self.first_ack(j)?;
            }
            self.last_ack(j)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_timed_and_the_first_fill_grows_the_tables() {
        // 100k roots: more than the smallest tables hold (16 x 2,048 slots).
        let roots = 100_000;
        let g = run(roots).expect("the phase runs");
        for (name, row) in [("growing", &g.growing), ("grown", &g.grown)] {
            assert_eq!(row.filler.count, roots, "{name}: one sample per init");
            // At least one step's init (the neighbour steps until the filler is done).
            assert!(row.neighbour.count >= 1, "{name}: the neighbour stepped");
        }
        assert!(g.growing.migrations.0 > 0, "the fill grew the tables");
        assert!(g.table_slots >= roots as usize, "tables hold the fill");
    }
}
