//! A short scheduling slice for the reaper thread, so that it runs soon after its timer
//! wakes it even when every core is busy.
//!
//! ## Why
//!
//! A timeout fires when the reaper thread's sleep ends. On an idle machine it then runs at
//! once. When the application keeps every core busy (a tokio runtime with as many workers
//! as cores, all running), the woken reaper must take a core from one of them. Linux's
//! fair scheduler (EEVDF, 6.6 and later) lets a woken thread preempt the running one only
//! when its virtual deadline is earlier; a thread's deadline is its virtual runtime plus its
//! slice (0.75-3 ms by default), so the reaper often waits for the running thread's slice
//! to end or for the next scheduler tick: milliseconds. A thread may ask for a shorter
//! slice (`sched_setattr`'s `sched_runtime` on a fair policy, Linux 6.12 and later, no
//! privilege needed); its deadlines are then earlier and its wake-ups preempt. Its share of
//! the CPU does not change (that is its weight, from its nice value, kept as it is): a long
//! pass is only cut into shorter turns.
//!
//! Measured with `cargo run --release --features tokio --example saturated_timeouts
//! saturated` (two workers kept busy on two cores, 800 requests timing out after 100 ms),
//! 12 alternating runs each way, medians: `track`'s timeouts late by 2.18 ms at p99 with
//! the default slice, 1.31 ms with this one, `tokio::time::timeout` 1.39-1.44 ms in the same
//! runs; at p99.9 3.9-4.4 ms either way. On a busy runtime the callers that start trees
//! run the reaper's passes first (the reaper's module docs, "Callers first";
//! `docs/how-it-works.md`, "Timeouts on a busy runtime").
//!
//! The slice asked for is the kernel's shortest, 100 µs: a pass that scans the dirty groups
//! and fires a tick's timers takes tens of microseconds. Older kernels accept the
//! call and keep their default slice (nothing changes); elsewhere (other systems, Miri,
//! loom) there is nothing to ask.

/// The slice the reaper asks for: the shortest the kernel grants.
pub(crate) const REAPER_SLICE_NS: u64 = 100_000;

/// `struct sched_attr` as `sched_setattr(2)` and `sched_getattr(2)` take it (its first
/// version, 48 bytes; the kernel accepts any version it knows).
#[cfg(all(target_os = "linux", not(miri), not(loom)))]
#[repr(C)]
#[derive(Default, Debug, Clone, Copy, PartialEq)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Asks for a slice of `ns` nanoseconds for the calling thread, keeping its policy (if it
/// is the default, fair one) and its nice value. `false` when the thread's policy is not
/// the default one (a real-time or batch thread is left as it is) or the call failed.
pub(crate) fn ask_for_slice(ns: u64) -> bool {
    #[cfg(all(target_os = "linux", not(miri), not(loom)))]
    {
        let Some(mut attr) = sched_attr(0) else {
            return false;
        };
        if attr.policy != libc::SCHED_OTHER as u32 {
            return false;
        }
        attr.size = std::mem::size_of::<SchedAttr>() as u32;
        attr.flags = 0;
        attr.runtime = ns;
        // Safety: `attr` is a valid `sched_attr` of the size it states, read by the kernel
        // only during the call; pid 0 is the calling thread.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_setattr,
                0 as libc::c_long,
                &attr as *const SchedAttr,
                0 as libc::c_long,
            )
        };
        rc == 0
    }
    #[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
    {
        let _ = ns;
        false
    }
}

/// The slice of thread `tid` (0: the calling thread) as the kernel reports it, in
/// nanoseconds: `sched_getattr`'s `sched_runtime`, which a fair thread's slice fills since
/// Linux 6.12 (0 before). `None` where there is no such call. (For the tests.)
#[cfg(test)]
pub(crate) fn slice_of(tid: i32) -> Option<u64> {
    #[cfg(all(target_os = "linux", not(miri), not(loom)))]
    {
        sched_attr(tid).map(|attr| attr.runtime)
    }
    #[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
    {
        let _ = tid;
        None
    }
}

#[cfg(all(target_os = "linux", not(miri), not(loom)))]
fn sched_attr(tid: i32) -> Option<SchedAttr> {
    let mut attr = SchedAttr::default();
    // Safety: the kernel writes at most `size` (the third argument) bytes into `attr`,
    // which is that large; `tid` names a thread or is 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid as libc::c_long,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as libc::c_long,
            0 as libc::c_long,
        )
    };
    (rc == 0).then_some(attr)
}

#[cfg(all(test, target_os = "linux", not(miri), not(loom)))]
mod tests {
    use super::*;

    /// What a thread's scheduling looks like before and after it asks for the reaper's
    /// slice, and whether the call said it was granted.
    fn ask_on_a_new_thread(
        setup: impl FnOnce() + Send + 'static,
    ) -> (Option<SchedAttr>, bool, Option<SchedAttr>) {
        std::thread::spawn(move || {
            setup();
            let before = sched_attr(0);
            let asked = ask_for_slice(REAPER_SLICE_NS);
            (before, asked, sched_attr(0))
        })
        .join()
        .unwrap()
    }

    /// The promise for one call: a kernel that grants it keeps the thread's policy and
    /// nice value and (from 6.12, where a fair thread reports its slice) sets the slice
    /// asked for; a refusal (seccomp, gVisor, a policy the call leaves alone) leaves the
    /// thread exactly as it was.
    fn kept_its_promise(before: Option<SchedAttr>, asked: bool, after: Option<SchedAttr>) {
        let Some(before) = before else {
            assert!(
                !asked,
                "the slice was granted where the thread's attributes cannot be read"
            );
            return;
        };
        let after = after.expect("sched_getattr worked a moment ago");
        if !asked {
            assert_eq!(after, before, "a refused call changed the thread");
            return;
        }
        assert_eq!(
            (after.policy, after.nice, after.priority),
            (before.policy, before.nice, before.priority),
            "the call changed more than the slice"
        );
        // Before 6.12 a fair thread reports no slice, and a custom one is not kept.
        if before.runtime != 0 {
            assert_eq!(
                after.runtime, REAPER_SLICE_NS,
                "the default slice was {}",
                before.runtime
            );
        }
    }

    #[test]
    fn a_thread_that_asks_for_a_slice_has_it_or_is_left_as_it_was() {
        let (before, asked, after) = ask_on_a_new_thread(|| {});
        kept_its_promise(before, asked, after);
    }

    /// A batch thread (as `SCHED_BATCH` or a job scheduler may make every thread of a
    /// process) is not turned into a fair one: the call declines and changes nothing.
    #[test]
    fn a_batch_thread_is_left_as_it_is() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (before, asked, after) = ask_on_a_new_thread(move || {
            let param = libc::sched_param { sched_priority: 0 };
            // Safety: `param` is a valid `sched_param` for the duration of the call; pid 0
            // is the calling thread. Lowering a thread to SCHED_BATCH needs no privilege.
            let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
            let _ = tx.send(rc == 0);
        });
        kept_its_promise(before, asked, after);
        if rx.recv().unwrap() {
            assert!(!asked, "a batch thread's slice was changed");
            if let Some(before) = before {
                assert_eq!(before.policy, libc::SCHED_BATCH as u32);
            }
        } else {
            // A sandbox that refuses even SCHED_BATCH: the promise above is what is left.
            eprintln!("note: sched_setscheduler(SCHED_BATCH) was refused here");
        }
    }
}
