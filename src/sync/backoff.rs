//! A bounded wait for another thread's progress: spin a little, then yield, then sleep.
//!
//! A waiter that only spins or only yields can starve the thread it waits for when both
//! run on one core under real-time priorities (a `SCHED_FIFO` waiter never lets a lower
//! thread run: `yield_now` only gives way to threads of its own priority). Sleeping lets
//! any thread run; the spins and yields before it keep the common, short wait cheap.

use std::time::Duration;

/// What the next [`Backoff::wait`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// A spin-loop hint (the first [`SPINS`] waits).
    Spin,
    /// `yield_now` (up to [`YIELDS`] waits in all).
    Yield,
    /// A [`SLEEP`] sleep (every wait after that).
    Sleep,
}

/// Waits that spin.
const SPINS: u32 = 64;
/// Waits that spin or yield; the rest sleep.
const YIELDS: u32 = 128;
/// A sleeping wait's length: long enough for the scheduler to run anyone.
const SLEEP: Duration = Duration::from_micros(50);

/// One waiter's progress through the stages.
#[derive(Debug, Default)]
pub(crate) struct Backoff(u32);

impl Backoff {
    /// What the next wait will do. Under loom every wait yields (the model must run the
    /// thread waited for, and a sleep is meaningless there).
    pub(crate) fn stage(&self) -> Stage {
        if cfg!(loom) {
            Stage::Yield
        } else if self.0 < SPINS {
            Stage::Spin
        } else if self.0 < YIELDS {
            Stage::Yield
        } else {
            Stage::Sleep
        }
    }

    /// Waits once, a little longer each stage.
    pub(crate) fn wait(&mut self) {
        match self.stage() {
            Stage::Spin => std::hint::spin_loop(),
            Stage::Yield => crate::sync::thread::yield_now(),
            Stage::Sleep => std::thread::sleep(SLEEP),
        }
        self.0 = self.0.saturating_add(1);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_long_wait_ends_up_sleeping_and_stays_there() {
        let mut backoff = Backoff::default();
        let stages: Vec<Stage> = (0..200)
            .map(|_| {
                let stage = backoff.stage();
                backoff.wait();
                stage
            })
            .collect();
        assert!(stages[..SPINS as usize].iter().all(|s| *s == Stage::Spin));
        assert!(stages[SPINS as usize..YIELDS as usize]
            .iter()
            .all(|s| *s == Stage::Yield));
        assert!(stages[YIELDS as usize..].iter().all(|s| *s == Stage::Sleep));
        backoff.0 = u32::MAX;
        backoff.wait();
        assert_eq!(backoff.stage(), Stage::Sleep, "no wrap back to spinning");
    }
}
