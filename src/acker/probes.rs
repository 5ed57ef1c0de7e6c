//! What the tests, the loom models, the stress harness and the benches ask of an
//! [`Acker`] beyond its API: the reaper's publication stood in for, the callers' help run
//! on demand, and looks at the tables, the wheel and the fences. Hidden from the docs, and
//! compiled for tests, `--cfg loom` and the `internals` feature only.

use super::Acker;

/// Looks for the tests, the loom models, the stress harness and the benches.
impl<T: Send + 'static> Acker<T> {
    /// Runs the timers of the reaper thread's pass here once it is due (the tick its timer
    /// is set for has begun, and the thread has not run; 250 µs, or a tick if that is
    /// longer, after a push woke it), within a caller's bounds: `true` when it ran one.
    /// The async acker helps so after each init, at the init's own tick
    /// ([`reaper`](crate::acker::engine::reaper), "Callers first"): its completions only
    /// wake tasks, fill a queue or drop a payload nobody awaits.
    #[doc(hidden)]
    pub fn help_late_reaper(&self) -> bool {
        self.engine().help_late_reaper()
    }

    /// Publishes a reaper thread asleep on a timer set two ticks before the clock's tick
    /// (due, and late for it at the async acker's and `build`'s resolutions, as
    /// [`help_late_reaper`](Self::help_late_reaper) judges it), as the thread
    /// publishes its timer: for tests and the loom models, on a manual acker, which has no
    /// thread.
    #[doc(hidden)]
    pub fn pretend_reaper_late(&self) {
        self.engine().pretend_reaper_late();
    }

    /// Publishes the reaper thread as running (no timer: no caller helps), as the thread
    /// does at the top of its loop: for the loom models, on a manual acker.
    #[doc(hidden)]
    pub fn pretend_reaper_running(&self) {
        self.engine().pretend_reaper_running();
    }

    /// Whether the reaper is published as running (no timer for a caller to find late):
    /// for the loom models.
    #[doc(hidden)]
    pub fn reaper_published_running(&self) -> bool {
        self.engine().reaper_published_running()
    }

    /// Manual mode: sets the hook called where the reaper thread would be unparked, as a
    /// task that drives the passes does (`spawn_expiry`): for the loom models. `false` when
    /// one is set already.
    #[doc(hidden)]
    pub fn set_driver_waker(&self, wake: impl Fn() + Send + Sync + 'static) -> bool {
        self.set_expiry_waker(wake)
    }

    /// Manual mode: one step of a task that drives the passes, as `spawn_expiry`'s after a
    /// sleep: woken, a pass, and its next sleep decided and published; that sleep (`None`:
    /// until woken), or `None` when shut down. For the loom models.
    #[doc(hidden)]
    pub fn drive_once(&self) -> Option<Option<std::time::Duration>> {
        let driver = self.expiry_driver();
        match (driver.woken(), driver.step()) {
            (std::ops::ControlFlow::Continue(()), std::ops::ControlFlow::Continue(sleep)) => {
                Some(sleep)
            }
            _ => None,
        }
    }

    /// Panics caught in the reaper's passes (a clock that panicked) and reaper threads lost
    /// to one.
    #[doc(hidden)]
    pub fn reaper_panics(&self) -> u64 {
        self.engine().reaper_panics()
    }

    /// Slots the acker's tables hold now (they follow what is pending): for tests and the
    /// stress harness's memory report.
    #[doc(hidden)]
    pub fn table_slots(&self) -> usize {
        self.engine().slots()
    }

    /// Table migrations started so far, to grow and to shrink.
    #[doc(hidden)]
    pub fn table_migrations(&self) -> (u64, u64) {
        self.engine().migrations()
    }

    /// Whether operations mark themselves with asymmetric fences (`membarrier`) rather than
    /// a SeqCst fence each ([`marks`](crate::acker::threads::marks), "Grace periods").
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn asymmetric_fences(&self) -> bool {
        crate::sync::fences::Fences::detect() == crate::sync::fences::Fences::Asymmetric
    }

    /// Bytes held by the tables' current generations, their successors, retired generations
    /// and the reaper's wheel: the stress harness's memory breakdown.
    #[doc(hidden)]
    pub fn memory_parts(&self) -> [usize; 4] {
        self.engine().memory_parts()
    }

    /// Entries in the reaper's wheel (one per group of slots with roots it must look at):
    /// lets tests check that the wheel stays bounded.
    #[doc(hidden)]
    pub fn scheduled_timers(&self) -> usize {
        self.engine().scheduled_timers()
    }

    /// Roots in the tables (pending, or a copy being moved) whose group's filed timer is
    /// due by their deadline. Right after a manual pass every pending root is covered
    /// (young ones too, if a mate's timer covers them). Lets tests and the stress harness
    /// check that no timer is lost. A walk of every table.
    #[doc(hidden)]
    pub fn covered_roots(&self) -> usize {
        self.engine().covered_roots()
    }

    /// The `(table, 0)` a root lives in: lets the loom models pick roots that share a
    /// table (its group is not fixed: tables grow).
    #[doc(hidden)]
    pub fn placement(&self, root: u64) -> (usize, usize) {
        self.engine().placement(root)
    }
}
