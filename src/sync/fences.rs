//! Asymmetric fences: a light side that costs a compiler fence and a heavy side that costs
//! a `membarrier(2)`.
//!
//! A Dekker pair (each side stores its flag, then reads the other's) needs a full fence on
//! both sides. When one side runs on every operation (a thread pinning itself) and the
//! other rarely (the reaper), Linux's `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` lets
//! the frequent side use only a compiler fence: the barrier runs a full fence on every CPU
//! that runs a thread of this process, so either the frequent side's store is visible to
//! the rare side's read, or the frequent side's read comes after the barrier and sees the
//! rare side's store. Where the kernel has no such barrier (and under loom and Miri) both
//! sides use a SeqCst fence. Used by the registration of new roots with the reaper
//! (`src/acker/timers/dirty.rs`) and the marks that grace periods, the
//! callback's closing and re-anchoring wait on ([`threads`](crate::acker::threads)).

use crate::sync::{fence, Ordering};

/// Which barriers the two sides use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fences {
    /// Pins use a compiler fence; the reaper's snapshot calls `membarrier`.
    Asymmetric,
    /// Pins and snapshots each use a SeqCst fence.
    Symmetric,
    /// Tests only: as symmetric, but every heavy side reports that its barrier failed.
    #[cfg(test)]
    Failing,
}

impl Fences {
    /// Asymmetric where this process can use `membarrier`, else symmetric.
    pub fn detect() -> Self {
        // ThreadSanitizer does not model `membarrier`: under CI's TSan build both sides
        // use the SeqCst fence.
        if !cfg!(ackwheel_tsan) && membarrier::register() {
            Fences::Asymmetric
        } else {
            Fences::Symmetric
        }
    }

    /// The light side: orders a pin's store before the reads that follow it.
    #[inline(always)]
    pub(crate) fn light(self) {
        match self {
            #[cfg(not(loom))]
            Fences::Asymmetric => std::sync::atomic::compiler_fence(Ordering::SeqCst),
            #[cfg(loom)]
            Fences::Asymmetric => unreachable!("detect() is symmetric under loom"),
            Fences::Symmetric => fence(Ordering::SeqCst),
            #[cfg(test)]
            Fences::Failing => fence(Ordering::SeqCst),
        }
    }

    /// The heavy side: orders the caller's stores before it with its reads after it, and
    /// with every other thread's light side. `false` if the barrier could not be run.
    pub(crate) fn heavy(self) -> bool {
        fence(Ordering::SeqCst);
        let ok = match self {
            Fences::Asymmetric => membarrier::barrier(),
            Fences::Symmetric => true,
            #[cfg(test)]
            Fences::Failing => false,
        };
        fence(Ordering::SeqCst);
        ok
    }
}

/// `membarrier(2)` on Linux; absent elsewhere, and under Miri and loom.
#[cfg(all(target_os = "linux", not(miri), not(loom)))]
mod membarrier {
    // From <linux/membarrier.h>.
    const CMD_QUERY: libc::c_long = 0;
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn call(cmd: libc::c_long) -> libc::c_long {
        // Safety: membarrier takes three integer arguments and touches no memory of ours;
        // an unknown or refused command returns -1 with errno set.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        }
    }

    /// Registers the process for private expedited barriers (idempotent). `false` when the
    /// kernel lacks them or refuses.
    pub(super) fn register() -> bool {
        let supported = call(CMD_QUERY);
        supported >= 0
            && supported & CMD_PRIVATE_EXPEDITED != 0
            && call(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
    }

    /// A full memory barrier on every CPU running a thread of this process.
    pub(super) fn barrier() -> bool {
        call(CMD_PRIVATE_EXPEDITED) == 0
    }
}

#[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
mod membarrier {
    pub(super) fn register() -> bool {
        false
    }

    pub(super) fn barrier() -> bool {
        false
    }
}
