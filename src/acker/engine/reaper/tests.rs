//! The reaper's tests: its passes run by callers, their bounds and publication,
//! the thread's sleeps and wake-ups.

use super::late_after;
use super::pass::{pass, Runner, CALLER_GROUPS, CALLER_PART, CALLER_TIMEOUTS};
use super::thread::wait_nanos;
use super::AWAKE;
use crate::acker::engine::Next;
use crate::acker::table::GROUP_SLOTS;
use crate::acker::timers::ticks::ticks_at_least_one;
use crate::sync::Ordering::SeqCst;
use crate::{Acker, Clock, Completion, InitError, ManualClock, Outcome};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

/// A manual acker on `clock` with `timeout` and ticks of 2^`shift` ns.
fn manual_acker(clock: &ManualClock, timeout: Duration, shift: u32) -> Acker<u32> {
    Acker::builder()
        .timeout(timeout)
        .resolution(Duration::from_nanos(1 << shift))
        .clock(clock.clone())
        .build_manual()
        .unwrap()
}

/// A caller runs the pass of a reaper thread asleep on its timer once the timer's tick has
/// begun (callers first), and claims it; never before that tick, nor for a thread not
/// asleep on a timer. (A manual acker: the published tick is set here as the thread would.)
#[test]
fn a_caller_runs_the_pass_once_the_threads_timer_is_due() {
    let (clock, acker, log) = logged_manual_at_1ms();
    let engine = acker.engine();
    let tick = Duration::from_nanos(1 << engine.time.ticks.shift);
    let now = || engine.time.ticks.full(clock.now());
    acker.init(1, 0b1, 0).unwrap();
    acker
        .init_with_timeout(2, 0b1, 0, Duration::from_secs(1))
        .unwrap();
    assert_eq!(acker.expire(), 0, "filed, not due");
    clock.advance(50 * MS);
    // Due, but no reaper sleeps on a timer.
    assert!(!acker.help_late_reaper());
    engine.reaper.wakes_at.store(now() + 1, SeqCst);
    assert!(!acker.help_late_reaper(), "ran a pass before its tick");
    assert!(log.lock().unwrap().is_empty());
    clock.advance(tick);
    assert!(acker.help_late_reaper(), "a due pass was not run");
    assert_eq!(*log.lock().unwrap(), [(1, Outcome::TimedOut)]);
    // Claimed, then moved to the next timer (root 2's, about a second on): no help
    // until that one's tick.
    let next = engine.reaper.wakes_at.load(SeqCst);
    assert!(next > now() + 500, "published {next} at {}", now());
    while now() + 1 < next {
        clock.advance(tick);
    }
    assert!(!acker.help_late_reaper(), "helped before the next timer");
    assert!(log.lock().unwrap().len() == 1);
    clock.advance(tick);
    assert!(acker.help_late_reaper());
    assert_eq!(log.lock().unwrap()[1], (2, Outcome::TimedOut));
    // No timer left: nothing published, no help.
    assert_eq!(engine.reaper.wakes_at.load(SeqCst), AWAKE);
    clock.advance(100 * MS);
    assert!(!acker.help_late_reaper());
}

/// The async acker's start of a tree (`init_then_help`) runs the pass due to callers after
/// its init, judged at the init's own tick: not before the thread's tick has begun, and
/// then by the next init, whose tree stays pending. (A manual acker, as above.)
#[test]
fn an_init_runs_the_pass_due_to_callers_at_its_own_tick() {
    let (clock, acker, log) = logged_manual_at_1ms();
    let engine = acker.engine();
    let tick = Duration::from_nanos(1 << engine.time.ticks.shift);
    let now = || engine.time.ticks.full(clock.now());
    acker.init(1, 0b1, 0).unwrap();
    assert_eq!(acker.expire(), 0, "filed, not due");
    clock.advance(50 * MS);
    engine.reaper.wakes_at.store(now() + 1, SeqCst);
    acker.init_then_help(2, 0b1, 0, None).unwrap();
    assert!(log.lock().unwrap().is_empty(), "ran a pass before its tick");
    clock.advance(tick);
    acker
        .init_then_help(3, 0b1, 0, Some(Duration::from_secs(1)))
        .unwrap();
    assert_eq!(*log.lock().unwrap(), [(1, Outcome::TimedOut)]);
    assert_eq!(acker.stats().caller_passes, 1);
    assert_eq!(acker.pending(), 2, "trees 2 and 3 stay pending");
    // Refused, it still helps: a duplicate init reads the clock as any other.
    engine.reaper.wakes_at.store(now(), SeqCst);
    clock.advance(20 * MS);
    assert!(matches!(
        acker.init_then_help(3, 0b1, 7, None),
        Err(InitError::Duplicate(7))
    ));
    assert_eq!(log.lock().unwrap()[1], (2, Outcome::TimedOut));
    assert_eq!(acker.stats().caller_passes, 2);
}

/// The completions a test's acker delivered: root and outcome, in order.
type Log = Arc<Mutex<Vec<(u64, Outcome)>>>;

/// [`manual_at_1ms`], logging its completions.
fn logged_manual_at_1ms() -> (ManualClock, Acker<u32>, Log) {
    let clock = ManualClock::new(0);
    let log = Log::default();
    let sink = Arc::clone(&log);
    let acker = Acker::builder()
        .timeout(10 * MS)
        .resolution(MS)
        .clock(clock.clone())
        .on_complete(move |c: Completion<u32>| sink.lock().unwrap().push((c.root, c.outcome)))
        .build_manual()
        .unwrap();
    (clock, acker, log)
}

/// A manual acker on a manual clock: 10 ms timeouts, 1 ms resolution (2^20 ns).
fn manual_at_1ms() -> (ManualClock, Acker<u32>) {
    let clock = ManualClock::new(0);
    let acker = Acker::builder()
        .timeout(10 * MS)
        .resolution(MS)
        .clock(clock.clone())
        .build_manual()
        .unwrap();
    (clock, acker)
}

/// Callers run a pass at once for timers due, not for the thread's scans of the dirty
/// groups: while no timer is due, only once the thread is a lateness past its tick (as a
/// late reaper).
#[test]
fn callers_run_passes_at_once_for_timers_only() {
    let (clock, acker) = manual_at_1ms();
    let engine = acker.engine();
    let tick = Duration::from_nanos(1 << engine.time.ticks.shift);
    let now = || engine.time.ticks.full(clock.now());
    acker.init(1, 0b1, 0).unwrap();
    assert_eq!(acker.expire(), 0, "filed, not due");
    // The thread's next tick, for a scan or its upkeep: no timer due.
    engine.reaper.wakes_at.store(now(), SeqCst);
    assert!(
        !acker.help_late_reaper(),
        "a caller ran a pass with no timer due"
    );
    for _ in 0..late_after(engine.time.ticks.shift) {
        clock.advance(tick);
    }
    assert!(
        acker.help_late_reaper(),
        "no help for a thread late for its tick"
    );
    // Past the tree's deadline: at once.
    clock.advance(20 * MS);
    engine.reaper.wakes_at.store(now(), SeqCst);
    assert!(acker.help_late_reaper(), "a due timer waited");
    assert_eq!(acker.stats().timed_out, 1);
}

/// A pass of `acker`'s reaper thread (here run by the test: a manual acker), judged its
/// backstop's lag behind the clock: the timeouts it delivered.
fn threads_pass(acker: &Acker<u32>) -> usize {
    let engine = acker.engine();
    pass(
        engine,
        Runner::Reaper {
            everything: true,
            behind: engine.reaper.lead.lag(),
        },
    )
    .delivered
}

/// Once a caller has run a pass, callers lead: the thread's pass judges deadlines a lag
/// behind the clock, leaving trees just due to the callers, and delivers what they left
/// that late; the first such delivery ends the lead, and the thread judges on the clock
/// again. (Manual ackers on one clock, their passes run here as the thread's would be;
/// one where callers lead, one where none ever ran a pass.)
#[test]
fn callers_lead_until_the_threads_pass_delivers_what_they_left() {
    let clock = ManualClock::new(0);
    let acker = || -> Acker<u32> {
        Acker::builder()
            .timeout(10 * MS)
            .resolution(MS)
            .clock(clock.clone())
            .build_manual()
            .unwrap()
    };
    let (led, alone) = (acker(), acker());
    let tick = Duration::from_nanos(1 << led.engine().time.ticks.shift);
    let threads = threads_pass;
    assert_eq!(
        led.engine().reaper.lead.lag(),
        0,
        "a lead before any caller's pass"
    );
    // A caller's pass that delivers a timeout: callers lead.
    led.init(100, 0b1, 0).unwrap();
    led.expire();
    clock.advance(20 * MS);
    led.pretend_reaper_late();
    assert!(led.help_late_reaper());
    assert_eq!(led.stats().timed_out, 1);
    assert_eq!(
        led.engine().reaper.lead.lag(),
        1,
        "500 µs in ticks of 2^20 ns"
    );
    // The thread's first pass after it finds nothing the callers left: its lag doubles
    // (to 2 ms, its most).
    assert_eq!(threads(&led), 0);
    let lag = led.engine().reaper.lead.lag();
    assert_eq!(lag, 2, "the lag after a caller's pass and the thread's");
    // The ticks at which each delivers two trees started together.
    let delivered_at = |second: u64| {
        for acker in [&led, &alone] {
            acker.init(second, 0b1, 0).unwrap();
            acker.init(second + 1, 0b1, 0).unwrap();
        }
        let (mut led_at, mut alone_at) = (None, None);
        for step in 0..100 {
            if threads(&led) > 0 {
                assert_eq!(led.stats().timed_out, second + 2, "both at once");
                led_at.get_or_insert(step);
            }
            if threads(&alone) > 0 {
                alone_at.get_or_insert(step);
            }
            clock.advance(tick);
        }
        (led_at.unwrap(), alone_at.unwrap())
    };
    let (led_at, alone_at) = delivered_at(1);
    assert_eq!(
        led_at,
        alone_at + lag,
        "the backstop did not judge a lag behind (no caller's pass since: it stays)"
    );
    assert_eq!(
        led.engine().reaper.lead.lag(),
        0,
        "a lead after the backstop delivered"
    );
    let (led_at, alone_at) = delivered_at(3);
    assert_eq!(led_at, alone_at, "judged behind with no callers leading");
}

/// While callers keep running the passes due, each pass of the thread that finds nothing
/// they left doubles its lag, up to 2 ms; a pass with no caller's pass since leaves it,
/// and one that delivers what they left ends the lead. (A manual acker at 2^17 ns: 500 µs
/// is 4 ticks, 2 ms is 16.)
#[test]
fn the_backstops_lag_doubles_while_callers_keep_coming_up_to_its_most() {
    let clock = ManualClock::new(0);
    let acker = manual_acker(&clock, 10 * MS, 17);
    let engine = acker.engine();
    let threads = || threads_pass(&acker);
    // A caller's pass for a timer come due.
    let mut root = 0;
    let mut callers_pass = || {
        root += 1;
        acker.init(root, 0b1, 0).unwrap();
        assert_eq!(acker.expire(), 0, "filed, not due");
        clock.advance(20 * MS);
        acker.pretend_reaper_late();
        assert!(acker.help_late_reaper(), "no caller's pass");
        assert_eq!(
            acker.stats().timed_out,
            root,
            "the caller's pass timed it out"
        );
    };
    callers_pass();
    assert_eq!(engine.reaper.lead.lag(), 4, "500 µs in ticks of 2^17 ns");
    let mut lags = Vec::new();
    for _ in 0..4 {
        assert_eq!(threads(), 0);
        lags.push(engine.reaper.lead.lag());
        assert_eq!(threads(), 0);
        assert_eq!(
            engine.reaper.lead.lag(),
            *lags.last().unwrap(),
            "the lag grew with no caller's pass since the thread's last"
        );
        callers_pass();
    }
    assert_eq!(lags, [8, 16, 16, 16], "doubled up to 2 ms, then held");
    // A tree the callers leave (none comes): the thread's pass that delivers it, judged
    // 16 ticks behind, ends the lead.
    assert_eq!(threads(), 0);
    acker.init(100, 0b1, 0).unwrap();
    assert_eq!(acker.expire(), 0, "filed, not due");
    clock.advance(10 * MS);
    let tick = Duration::from_nanos(1 << 17);
    let mut steps = 0;
    while threads() == 0 {
        clock.advance(tick);
        steps += 1;
        assert!(steps < 100, "never delivered");
    }
    assert_eq!(
        engine.reaper.lead.lag(),
        0,
        "a lead after the backstop delivered"
    );
    assert!(
        steps >= 16,
        "delivered {steps} ticks after its deadline, not 16"
    );
}

/// A registration that wakes the idle reaper thread publishes its tick plus the lateness
/// allowed (`Engine::wake_reaper`): the caller that registered leaves the thread the pass
/// it has just
/// woken it for, unless the thread gets no core for that long. (A manual acker with this
/// test's thread standing in for the reaper's, so that no thread runs and publishes.)
#[test]
fn a_registration_that_wakes_the_thread_leaves_it_its_pass() {
    let (clock, acker) = manual_at_1ms();
    let engine = acker.engine();
    engine.set_reaper_thread(std::thread::current());
    let tick = Duration::from_nanos(1 << engine.time.ticks.shift);
    acker.init(1, 0b1, 0).unwrap();
    acker.expire();
    clock.advance(50 * MS);
    // Due, and the thread idle: a registration wakes it.
    engine.wake_reaper();
    for _ in 0..late_after(engine.time.ticks.shift) {
        assert!(
            !acker.help_late_reaper(),
            "a caller ran the pass a registration had just woken the thread for"
        );
        clock.advance(tick);
    }
    assert!(
        acker.help_late_reaper(),
        "no caller ran the pass of a thread that never ran"
    );
    assert_eq!(acker.stats().timed_out, 1);
}

/// A clock that panics when a caller checks whether the reaper is late: the help is
/// skipped and the panic counted, never passed on to the caller (whose init has
/// already taken its tree in), and the next check with a working clock helps.
#[test]
fn a_clock_that_panics_in_a_callers_check_is_caught_and_counted() {
    let clock = crate::acker::tests::FlakyClock {
        time: ManualClock::new(0),
        panicking: Arc::default(),
    };
    let acker: Acker<u32> = Acker::builder()
        .timeout(10 * MS)
        .resolution(MS)
        .clock(clock.clone())
        .build_manual()
        .unwrap();
    let engine = acker.engine();
    acker.init(1, 0b1, 0).unwrap();
    clock.time.advance(50 * MS);
    engine
        .reaper
        .wakes_at
        .store(engine.time.ticks.full(clock.now()) - 2, SeqCst);
    clock.panicking.store(true, SeqCst);
    let helped = catch_unwind(AssertUnwindSafe(|| acker.help_late_reaper()));
    clock.panicking.store(false, SeqCst);
    assert_eq!(
        helped.ok(),
        Some(false),
        "the clock's panic reached the caller"
    );
    assert_eq!(acker.reaper_panics(), 1);
    assert!(
        acker.help_late_reaper(),
        "no help once the clock works again"
    );
    assert_eq!(acker.stats().timed_out, 1);
}

/// The reaper thread publishes the tick its timer is set for while it sleeps on one,
/// and no tick while it runs. With a tree pending whose deadline is a minute away it
/// sleeps a quarter of the timeout at most ("Sleeping").
#[test]
fn the_reaper_thread_publishes_the_tick_it_sleeps_until() {
    let acker: Acker<u32> = Acker::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let engine = acker.engine();
    assert_eq!(engine.reaper.wakes_at.load(SeqCst), AWAKE);
    acker.init(1, 0b1, 0).unwrap();
    let age = u64::from(engine.pending_sleep);
    let waited = Instant::now();
    loop {
        let now = engine.time.clock_full();
        let wakes_at = engine.reaper.wakes_at.load(SeqCst);
        if wakes_at != AWAKE && wakes_at > now + age / 2 {
            assert!(wakes_at <= now + age, "asleep until {wakes_at} at {now}");
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the reaper never published its timer (read {wakes_at}, now {now})"
        );
        std::thread::sleep(MS);
    }
    assert!(acker.ack(1, 0b1));
}

/// An acker with its reaper thread on a manual clock at 20 ms ticks (sleeps of at most
/// 1.28 s while trees are pending), trees due a minute on. The clock stands still once the thread sleeps, so
/// that its sleeps last their whole length.
fn threaded_on_a_manual_clock() -> (ManualClock, Acker<u32>) {
    let clock = ManualClock::new(0);
    let acker = Acker::builder()
        .timeout(Duration::from_secs(60))
        .resolution(20 * MS)
        .clock(clock.clone())
        .build()
        .unwrap();
    (clock, acker)
}

/// Waits until the reaper thread sleeps on a timer past the next tick (idle, not a tick at
/// a time), moving the clock `step` on at each look; its tick.
fn asleep_past_the_next_tick(acker: &Acker<u32>, clock: &ManualClock, step: Duration) -> u64 {
    let engine = acker.engine();
    let waited = Instant::now();
    loop {
        let wakes_at = engine.reaper.wakes_at.load(SeqCst);
        if wakes_at != AWAKE && wakes_at > engine.time.ticks.full(clock.now()) + 1 {
            return wakes_at;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "never asleep on a timer past the next tick (read {wakes_at})"
        );
        clock.advance(step);
        std::thread::sleep(MS);
    }
}

/// A tree started while the reaper thread sleeps beside pending ones does not wake it:
/// its timer ends before the tick by which it must scan for the new tree ("Sleeping"). (A
/// wake would have moved the published tick to the registration's.) One whose own timeout
/// ends sooner does, though a tree registered since the last scan is already dirty.
#[test]
fn a_tree_started_beside_pending_ones_does_not_wake_the_reaper_one_due_sooner_does() {
    let (clock, acker) = threaded_on_a_manual_clock();
    let engine = acker.engine();
    acker.init(1, 0b1, 0).unwrap();
    // On while waiting, so that the reaper sleeps on a timer past the next tick.
    let asleep_until = asleep_past_the_next_tick(&acker, &clock, 20 * MS);
    acker.init(2, 0b1, 0).unwrap();
    assert_eq!(
        engine.reaper.wakes_at.load(SeqCst),
        asleep_until,
        "the init woke the reaper"
    );
    // A tree due before the reaper's timer ends, registered beside tree 2 (the summary
    // set, its tick later): it wakes the reaper, whose pass finds nothing to do (an idle wake-up)
    // long before its timer (64 ticks of 20 ms: 1.28 s, the clock standing still).
    let before = acker.idle_wakeups();
    acker.init_with_timeout(3, 0b1, 0, 40 * MS).unwrap();
    let woken = Instant::now();
    while acker.idle_wakeups() == before {
        assert!(
            woken.elapsed() < Duration::from_millis(600),
            "a tree due in 40 ms left the reaper asleep until {asleep_until}"
        );
        std::thread::sleep(MS);
    }
    assert!(acker.ack(1, 0b1) && acker.ack(2, 0b1) && acker.ack(3, 0b1));
}

/// A thread that keeps starting trees keeps the summary set, yet the reaper thread sleeps
/// past the next tick: until the tick by which it must scan (a sleep before the first
/// tree's 60 s deadline), bounded by a quarter of the timeout, not a tick at a time
/// ("Sleeping").
#[test]
fn trees_started_in_a_row_leave_the_reaper_asleep_until_their_scan_is_due() {
    let (clock, acker) = threaded_on_a_manual_clock();
    let engine = acker.engine();
    let age = u64::from(engine.pending_sleep);
    for root in 1..=4 {
        acker.init(root, 0b1, 0).unwrap();
        clock.advance(20 * MS);
    }
    acker.init(5, 0b1, 0).unwrap();
    let now = engine.time.ticks.full(clock.now());
    // The clock stands still.
    let asleep_until = asleep_past_the_next_tick(&acker, &clock, Duration::ZERO);
    assert!(
        asleep_until <= now + age,
        "{asleep_until} past a quarter of the timeout"
    );
    assert_eq!(acker.pending(), 5);
}

/// Requests that each complete before the next begins leave nothing pending between
/// them: the reaper thread lingers on four more of its timed sleeps rather than
/// park, so the next request's tree does not wake it; after that it parks ("Sleeping").
#[test]
fn the_reaper_lingers_after_the_last_tree_then_parks() {
    let (clock, acker) = threaded_on_a_manual_clock();
    let engine = acker.engine();
    let age = u64::from(engine.pending_sleep);
    acker.init(1, 0b1, 0).unwrap();
    // Until the reaper has seen it pending: its timer is then at most an age away.
    let waited = Instant::now();
    while engine.reaper.busy_at.load(SeqCst) == 0 {
        assert!(waited.elapsed() < Duration::from_secs(10), "never saw it");
        clock.advance(20 * MS);
        std::thread::sleep(MS);
    }
    assert!(acker.ack(1, 0b1));
    // Nothing pending, and a sleep decided since (a wake: the ack does not): asleep on
    // a timer, not parked (the clock stands still).
    engine.wake_reaper();
    let asleep_until = asleep_past_the_next_tick(&acker, &clock, Duration::ZERO);
    acker.init(2, 0b1, 0).unwrap();
    assert_eq!(
        engine.reaper.wakes_at.load(SeqCst),
        asleep_until,
        "the next request's init woke the reaper"
    );
    assert!(acker.ack(2, 0b1));
    // Four ages on, it parks: no timer published, and no wake-ups.
    let parked = Instant::now();
    while engine.reaper.wakes_at.load(SeqCst) != AWAKE {
        assert!(
            parked.elapsed() < Duration::from_secs(10),
            "still polling {} ticks after the last tree",
            engine.time.ticks.full(clock.now()) - engine.reaper.busy_at.load(SeqCst)
        );
        clock.advance(20 * MS * age as u32 / 4);
        engine.wake_reaper();
        std::thread::sleep(MS);
    }
    let before = acker.idle_wakeups();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(acker.idle_wakeups(), before, "parked, yet it woke");
}

/// A manual acker on a manual clock whose timeouts are logged, with `trees` trees
/// sharing one 10 ms deadline, filed by a pass, and the clock 50 ms on: every tree
/// due, and a reaper thread (as the test sets it) asleep on a timer two ticks ago.
fn overdue(trees: u64) -> (ManualClock, Acker<u32>, Arc<Mutex<Vec<u64>>>) {
    let clock = ManualClock::new(0);
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    let acker: Acker<u32> = Acker::builder()
        .timeout(10 * MS)
        .resolution(MS)
        .clock(clock.clone())
        .on_complete(move |c: Completion<u32>| {
            assert_eq!(c.outcome, Outcome::TimedOut);
            sink.lock().unwrap().push(c.root);
        })
        .build_manual()
        .unwrap();
    for root in 1..=trees {
        acker.init(root, 0b1, 0).unwrap();
    }
    assert_eq!(acker.expire(), 0, "filed, not due");
    clock.advance(50 * MS);
    acker.pretend_reaper_late();
    (clock, acker, log)
}

/// A caller's pass times out a bounded share (a few dozen trees), not every tree due.
/// What it leaves is a burst, the thread's: callers do not lead then, and the next caller
/// helps only if the thread has not run within a lateness; then a full pass takes the
/// rest. Every tree times out once.
#[test]
fn a_callers_pass_times_out_a_bounded_share_and_leaves_the_burst_to_the_thread() {
    let (clock, acker, log) = overdue(4000);
    let engine = acker.engine();
    let most = CALLER_TIMEOUTS + CALLER_PART * GROUP_SLOTS;
    assert!(acker.help_late_reaper(), "no pass run");
    let first = log.lock().unwrap().len();
    assert!(
        (1..=most).contains(&first),
        "a caller's pass timed out {first} trees, more than {most}"
    );
    assert_eq!(engine.reaper.lead.lag(), 0, "callers lead beside a burst");
    // Left due, for the thread: the next caller helps a lateness later.
    assert!(!acker.help_late_reaper(), "the next caller helped at once");
    clock.advance(Duration::from_nanos(
        late_after(engine.time.ticks.shift) << engine.time.ticks.shift,
    ));
    assert!(acker.help_late_reaper(), "the next caller did not help");
    let second = log.lock().unwrap().len() - first;
    assert!((1..=most).contains(&second), "then {second}");
    assert!(acker.stats().caller_passes == 2);
    // The thread's (here a manual) pass: all the rest.
    assert_eq!(acker.expire() + first + second, 4000);
    let mut roots = log.lock().unwrap().clone();
    roots.sort_unstable();
    roots.dedup();
    assert_eq!(roots.len(), 4000, "a tree timed out twice, or not at all");
    assert_eq!(acker.pending(), 0);
}

/// A caller's pass that leaves a burst while the thread sleeps on a timer that ends within
/// the longest lag (2 ms) leaves it to that timer: it publishes the tick the thread's sleep
/// ends in, and the next caller helps only if the thread has not run by then. (It woke the
/// thread from the call before, which then took the caller's core.) A thread asleep longer
/// is woken, and the next caller helps a lateness on, as before.
#[test]
fn a_burst_a_callers_pass_leaves_waits_for_the_threads_own_timer() {
    for asleep in [2, 8] {
        let (clock, acker, log) = overdue(4000);
        let engine = acker.engine();
        let now = || engine.time.ticks.full(clock.now());
        let late = late_after(engine.time.ticks.shift);
        // The thread asleep until `asleep` ticks of 1 ms from now.
        let start = now();
        let thread_at = start + asleep;
        engine.reaper.thread_wakes_at.store(thread_at, SeqCst);
        assert!(acker.help_late_reaper(), "no pass run");
        let first = log.lock().unwrap().len();
        assert!(first < 4000, "the caller's pass took the whole burst");
        let next = if asleep == 2 { thread_at } else { start + late };
        assert_eq!(engine.reaper.wakes_at.load(SeqCst), next, "asleep {asleep}");
        // A caller helps again only once that tick has come.
        clock.advance(Duration::from_nanos(
            (next - start - 1) << engine.time.ticks.shift,
        ));
        assert!(!acker.help_late_reaper(), "a caller helped before {next}");
        clock.advance(Duration::from_nanos(1 << engine.time.ticks.shift));
        assert!(acker.help_late_reaper(), "no caller helped at {next}");
        // The thread's (here a manual) pass: the rest; every tree times out once.
        acker.expire();
        let mut roots = log.lock().unwrap().clone();
        roots.sort_unstable();
        roots.dedup();
        assert_eq!(roots.len(), 4000, "a tree timed out twice, or not at all");
        assert_eq!(acker.stats().timed_out, 4000);
    }
}

/// Groups that come due with their trees completed (an entry waits for its deadline) are
/// not a burst: a caller's pass looks past more of them than a part, cascading the coarse
/// bucket they share, and times out the live tree among them; callers keep the lead, and
/// the thread is not woken for them. Past [`CALLER_GROUPS`] of them, the rest are left.
/// (With a bound of 32 groups, and the cascade counted in it, the pass left all of them.)
#[test]
fn a_callers_pass_looks_past_groups_of_completed_trees() {
    for (dead, left) in [(CALLER_GROUPS / 2, false), (CALLER_GROUPS * 2, true)] {
        let clock = ManualClock::new(0);
        let acker: Acker<u32> = Acker::builder()
            .timeout(200 * MS) // past level 0 at 1 ms a tick: a coarse bucket
            .resolution(MS)
            .clock(clock.clone())
            .build_manual()
            .unwrap();
        let engine = acker.engine();
        // One group per root (a large table, roots far apart), then one live root.
        let roots: Vec<u64> = (1..=dead as u64).map(|r| r << 40).collect();
        for &root in &roots {
            acker.init(root, 0b1, 0).unwrap();
        }
        acker.init(7, 0b1, 0).unwrap();
        assert_eq!(acker.expire(), 0, "filed, not due");
        assert!(
            engine.reaper.lock_wheel().timers.len() > CALLER_PART,
            "{dead} trees in too few groups"
        );
        for &root in &roots {
            assert!(acker.ack(root, 0b1));
        }
        // A caller's pass that leads, for a timer due before them.
        clock.advance(250 * MS);
        acker.pretend_reaper_late();
        assert!(acker.help_late_reaper(), "no pass run");
        let lead = engine.reaper.lead.lag() > 0;
        assert_eq!(!lead, left, "{dead} groups: left {}", !lead);
        if !left {
            assert_eq!(acker.stats().timed_out, 1, "the live tree among them");
            assert_eq!(engine.reaper.lock_wheel().timers.len(), 0);
        }
        // What was left, the thread's pass takes: the live tree times out once.
        acker.expire();
        assert_eq!(acker.stats().timed_out, 1);
        assert_eq!(engine.reaper.lock_wheel().timers.len(), 0);
    }
}

/// Dirty groups wait for their scan, due a sleep before the earliest deadline registered:
/// callers keep the lead while it is far. A scan due within the thread's lag that a
/// caller's pass takes only in part (past its bound of groups) is a burst, the thread's:
/// the lead ends.
#[test]
fn a_scan_a_callers_pass_leaves_is_a_burst_only_when_due_within_the_lag() {
    for urgent in [false, true] {
        let clock = ManualClock::new(0);
        let acker: Acker<u32> = Acker::builder()
            .timeout(100 * MS)
            .resolution(MS)
            .clock(clock.clone())
            .build_manual()
            .unwrap();
        let engine = acker.engine();
        let tick = Duration::from_nanos(1 << engine.time.ticks.shift);
        // Callers lead: a caller's pass timed a tree out.
        acker.init_with_timeout(1, 0b1, 0, 10 * tick).unwrap();
        assert_eq!(acker.expire(), 0, "filed, not due");
        clock.advance(12 * tick);
        acker.pretend_reaper_late();
        assert!(acker.help_late_reaper());
        assert_eq!(engine.reaper.lead.lag(), 1, "callers lead at 500 µs");
        // A timer the next caller's pass runs for, filed; then trees in more groups than a
        // caller's pass takes, their scan due 55 ticks from now (80 ticks, less a quarter
        // of the acker's timeout).
        acker.init_with_timeout(2, 0b1, 0, 30 * tick).unwrap();
        assert_eq!(acker.expire(), 0, "filed, not due");
        for root in 100..2100 {
            acker.init_with_timeout(root, 0b1, 0, 80 * tick).unwrap();
        }
        // Tree 2 due; the scan a lag from due, or far from it.
        clock.advance(if urgent { 54 * tick } else { 33 * tick });
        acker.pretend_reaper_late();
        assert!(acker.help_late_reaper(), "no caller's pass");
        assert!(acker.stats().timed_out >= 2, "tree 2 was due");
        let lead = engine.reaper.lead.lag() > 0;
        assert_eq!(lead, !urgent, "urgent {urgent}: the lead after the pass");
        // Every tree times out once, in the end.
        clock.advance(100 * tick);
        acker.expire();
        assert_eq!(acker.stats().timed_out, 2002);
    }
}

/// A caller whose pass finds the wheel held (the thread's pass under way, after all)
/// returns at once: its pass does not run, and nothing waits.
#[test]
fn a_callers_pass_does_not_wait_for_the_wheel() {
    let (_clock, acker, log) = overdue(10);
    let acker = Arc::new(acker);
    let held = acker.engine().reaper.wheel.lock().unwrap();
    let (sent, returned) = std::sync::mpsc::channel();
    let caller = {
        let acker = Arc::clone(&acker);
        std::thread::spawn(move || sent.send(acker.help_late_reaper()).unwrap())
    };
    let helped = returned.recv_timeout(Duration::from_secs(10));
    drop(held);
    caller.join().unwrap();
    assert_eq!(helped, Ok(false), "the caller waited for the wheel");
    assert!(log.lock().unwrap().is_empty());
    assert_eq!(acker.stats().caller_passes, 0);
}

/// After a stall of 2^30 ticks a pass re-anchors, walking every table while every
/// other thread waits: a caller leaves that to the thread.
#[test]
fn a_callers_pass_leaves_a_re_anchoring_to_the_thread() {
    let (clock, acker, log) = overdue(10);
    clock.advance(MS * (1 << 30));
    acker.pretend_reaper_late();
    assert!(
        !acker.help_late_reaper(),
        "a caller ran a re-anchoring pass"
    );
    assert_eq!(acker.reanchorings(), 0);
    assert!(log.lock().unwrap().is_empty());
    // The thread's pass does it, and the timeouts.
    assert_eq!(acker.expire(), 10);
    assert_eq!(acker.reanchorings(), 1);
}

/// A manual acker on a manual clock at 1 ms ticks whose trees are due 10 s on.
fn far_off() -> (ManualClock, Acker<u32>) {
    let clock = ManualClock::new(0);
    let acker = Acker::builder()
        .timeout(Duration::from_secs(10))
        .resolution(MS)
        .clock(clock.clone())
        .build_manual()
        .unwrap();
    (clock, acker)
}

/// A caller's pass does not sweep the wheel's dead entries (the thread's upkeep), even
/// with nothing pending, where the thread's pass would sweep them all.
#[test]
fn a_callers_pass_leaves_the_sweeps_to_the_thread() {
    let (clock, acker) = far_off();
    for root in 1..=200 {
        acker.init(root, 0b1, 0).unwrap();
    }
    acker.expire();
    for root in 1..=200 {
        assert!(acker.ack(root, 0b1));
    }
    let engine = acker.engine();
    let dead = engine.scheduled_timers();
    assert!(dead > 0);
    clock.advance(5 * MS);
    acker.pretend_reaper_late();
    assert!(acker.help_late_reaper());
    assert_eq!(engine.scheduled_timers(), dead, "a caller's pass swept");
    acker.expire();
    assert_eq!(engine.scheduled_timers(), 0, "the thread's pass did not");
}

/// The counters a server exports: passes run by callers, and the longest.
#[test]
fn callers_passes_are_counted_with_the_longest() {
    let (_clock, acker, _log) = overdue(100);
    assert_eq!(acker.stats().caller_passes, 0);
    assert_eq!(acker.stats().caller_pass_longest, Duration::ZERO);
    assert!(acker.help_late_reaper());
    let stats = acker.stats();
    assert_eq!(stats.caller_passes, 1);
    assert!(stats.caller_pass_longest > Duration::ZERO);
    assert!(stats.to_string().contains("caller passes 1"), "{stats}");
}

/// Trees that come and go between a pass and the sleep decision after it (pending read
/// as one in the pass, as none after) with dead entries in the wheel: the reaper comes
/// back a tick later for an idle sweep once, not after every pass (a wake-up every
/// tick).
#[test]
fn trees_that_come_and_go_do_not_wake_the_reaper_every_tick() {
    let (clock, acker) = far_off();
    let engine = acker.engine();
    let mut next_tick_passes = 0;
    for root in 1..=20 {
        acker.init(root, 0b1, 0).unwrap();
        acker.expire(); // reads it pending, files it
        assert!(acker.ack(root, 0b1)); // its entry now dead
        let tick = engine.time.ticks.full(clock.now());
        match engine.next_pass() {
            Next::At(at) if at == engine.tick_start(tick + 1) => next_tick_passes += 1,
            Next::At(at) => assert!(at > engine.tick_start(tick + 1000), "{at}"),
            other => panic!("{other:?}"),
        }
        engine.unidle();
        clock.advance(MS);
    }
    assert!(
        next_tick_passes <= 1,
        "the reaper came back the next tick {next_tick_passes} times in 20"
    );
}

const TICK: u64 = 1 << 20;

#[test]
fn a_sleep_ends_where_its_tick_begins_not_a_whole_number_of_ticks_from_now() {
    // The pass ran 70 % into tick 10; the wheel's next due tick is 13.
    let now = 10 * TICK + TICK * 7 / 10;
    assert_eq!(
        wait_nanos(13 * TICK, now, 3 * TICK),
        Some(3 * TICK - TICK * 7 / 10)
    );
    // A clock that stepped back far behind the wheel: no longer than the ticks apart.
    assert_eq!(wait_nanos(13 * TICK, TICK, 3 * TICK), Some(3 * TICK));
    // Begun already, or just now: no sleep.
    assert_eq!(wait_nanos(13 * TICK, 13 * TICK, 3 * TICK), None);
    assert_eq!(wait_nanos(13 * TICK, 14 * TICK, 3 * TICK), None);
    // Across the clock's wrap.
    assert_eq!(wait_nanos(5, u64::MAX - 4, 3 * TICK), Some(10));
    assert_eq!(wait_nanos(u64::MAX - 4, 5, 3 * TICK), None);
}

/// A tree reaches the reaper as its group's dirty bit, scanned a quarter of the timeout
/// before the tick before the earliest deadline registered since the last scan: a tree that
/// completes before then costs the reaper no timer, and one still pending at the scan gets its group's timer, which
/// times it out at its deadline.
#[test]
fn the_reaper_scans_the_dirty_groups_by_the_earliest_deadline_registered() {
    let clock = ManualClock::new(0);
    let acker = manual_acker(&clock, 100 * MS, 18);
    let engine = acker.engine();
    let timers = || engine.reaper.lock_wheel().len();
    acker.init(1, 0b1, 0).unwrap();
    clock.advance(10 * MS);
    acker.init(2, 0b1, 0).unwrap();
    assert!(acker.ack(1, 0b1));
    let by = engine.threads.earliest_due().expect("registered");
    // Tree 1's deadline less a tick (its base plus the timeout in ticks, rounded up), less
    // the reaper's longest sleep while trees are pending (a quarter of the timeout).
    let timeout = ticks_at_least_one(100_000_000, 18);
    let ahead = u64::from(engine.pending_sleep);
    assert_eq!(ahead, timeout / 4);
    assert_eq!(u64::from(by), engine.time.ticks.full(0) + timeout - ahead);
    // Passes before that tick scan nothing.
    clock.advance(60 * MS);
    assert!(engine.driven_pass());
    assert_eq!(timers(), 0, "scanned before the tick it was due at");
    assert_eq!(engine.threads.earliest_due(), Some(by));
    // Past it, the scan looks at both groups: tree 1's is empty, tree 2's gets a timer.
    clock.advance(11 * MS);
    assert!(engine.driven_pass());
    assert_eq!(engine.threads.earliest_due(), None, "scanned");
    assert_eq!(timers(), 1, "tree 2's group, once");
    assert_eq!(acker.pending(), 1);
    clock.advance(30 * MS);
    assert_eq!(acker.expire(), 1, "tree 2 timed out at its deadline");
    assert_eq!(acker.pending(), 0);
}
