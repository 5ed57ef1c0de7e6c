//! The owner's tracker of its partition's trees: the Acker, or what a user would write by
//! hand without it.

use super::outbox::Outbox;
use crate::wire::Done;
use ackwheel::{Acker, InitError, Message, Outcome};
use dashmap::DashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub trait Tracker: Send + Sync {
    /// A new tree whose completion goes to `origin`; `false` when it was refused (full, or a
    /// root already initialized), which the caller reports to the origin as a failure.
    fn init(&self, root: u64, xor: u64, origin: u32) -> bool;
    /// Acks and fails, in order.
    fn apply(&self, messages: &[Message]);
    fn pending(&self) -> usize;
    /// The name of the tracker's own thread (the Acker's reaper, the hand-written sweeper),
    /// whose CPU time is part of the tracker's cost (`/proc/self/task/*/comm`: at most 15
    /// bytes).
    fn thread_name(&self) -> &'static str;
}

fn complete(outbox: &Outbox, origin: u32, root: u64, outcome: Outcome) {
    outbox.done(origin as usize, Done { root, outcome });
}

/// One `Acker` per node; its `on_complete` puts the completion in the origin's frame.
///
/// Its resolution is a 128th of the timeout (16 ms at 2 s: a timeout fires less than 1 %
/// late), not the default 1 ms: on a machine this crowded (three servers and the nodes on
/// two cores) a reaper waking every millisecond preempts the node's own thread, and the
/// owner's time per message measured 72-83 ns at 1 ms against 47 ns at 16 ms (two
/// alternating 12 s runs each of `fleet --no-kills --trackers acker`).
pub struct AckerTracker {
    acker: Acker<u32>,
}

impl AckerTracker {
    pub fn new(outbox: Arc<Outbox>, timeout: Duration) -> Result<AckerTracker, String> {
        let acker = Acker::builder()
            .timeout(timeout)
            .resolution(timeout / 128)
            .max_pending(1 << 22)
            .on_complete(move |c| complete(&outbox, c.payload, c.root, c.outcome))
            .build()
            .map_err(|e| format!("acker: {e}"))?;
        Ok(AckerTracker { acker })
    }
}

impl Tracker for AckerTracker {
    fn init(&self, root: u64, xor: u64, origin: u32) -> bool {
        match self.acker.init(root, xor, origin) {
            Ok(()) => true,
            Err(InitError::Full(_) | InitError::Duplicate(_) | InitError::Shutdown(_)) => false,
        }
    }

    fn apply(&self, messages: &[Message]) {
        self.acker.apply(messages);
    }

    fn pending(&self) -> usize {
        self.acker.pending()
    }

    fn thread_name(&self) -> &'static str {
        // The name ackwheel gives the reaper thread an `Acker` starts.
        "ackwheel-reaper"
    }
}

/// The tracker a user writes with a concurrent map: the XOR value, the origin once the init
/// came (acks may come first), a fail seen before the init, and a deadline; a sweeper
/// thread walks the whole map every [`SWEEP`] and times out what is due.
pub struct DashMapTracker {
    map: Arc<DashMap<u64, Entry>>,
    outbox: Arc<Outbox>,
    timeout: Duration,
    stop: Arc<AtomicBool>,
}

/// How often the hand-written tracker's sweeper walks its map: a tenth of a typical
/// timeout's precision, as a user would pick to keep the walk off the profile.
pub const SWEEP: Duration = Duration::from_millis(50);

/// The sweeper thread's name, by which the node finds its CPU time.
const SWEEPER: &str = "fleet-sweeper";

struct Entry {
    value: u64,
    origin: Option<u32>,
    failed: bool,
    deadline: Instant,
}

impl DashMapTracker {
    pub fn new(outbox: Arc<Outbox>, timeout: Duration) -> Result<DashMapTracker, String> {
        let map: Arc<DashMap<u64, Entry>> = Arc::new(DashMap::new());
        let stop = Arc::new(AtomicBool::new(false));
        let (sweep_map, sweep_outbox, sweep_stop) = (map.clone(), outbox.clone(), stop.clone());
        let sweeper = std::thread::Builder::new().name(SWEEPER.into());
        sweeper
            .spawn(move || {
                // Relaxed: a flag polled between sweeps; nothing is published through it.
                while !sweep_stop.load(Ordering::Relaxed) {
                    std::thread::sleep(SWEEP);
                    let now = Instant::now();
                    let mut due = Vec::new();
                    sweep_map.retain(|&root, e| {
                        if e.deadline > now {
                            return true;
                        }
                        if let Some(origin) = e.origin {
                            due.push((origin, root));
                        }
                        false
                    });
                    for (origin, root) in due {
                        complete(&sweep_outbox, origin, root, Outcome::TimedOut);
                    }
                }
            })
            .map_err(|e| format!("cannot start the sweeper thread: {e}"))?;
        Ok(DashMapTracker {
            map,
            outbox,
            timeout,
            stop,
        })
    }

    fn new_entry(&self) -> Entry {
        Entry {
            value: 0,
            origin: None,
            failed: false,
            deadline: Instant::now() + self.timeout,
        }
    }

    /// Applies `change` to `root`'s entry (made if absent) and completes it if it is done.
    fn update(&self, root: u64, change: impl FnOnce(&mut Entry) -> bool) -> bool {
        let applied = change(&mut self.map.entry(root).or_insert_with(|| self.new_entry()));
        // Removed (and reported) only by whoever takes it out of the map, under its shard's
        // lock: the sweeper's `retain` may time it out in between, and then it is not ours.
        let done = |e: &Entry| e.origin.is_some() && (e.failed || e.value == 0);
        if let Some((_, e)) = self.map.remove_if(&root, |_, e| done(e)) {
            let outcome = if e.failed {
                Outcome::Failed
            } else {
                Outcome::Acked
            };
            complete(&self.outbox, e.origin.unwrap_or(0), root, outcome);
        }
        applied
    }
}

impl Drop for DashMapTracker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Tracker for DashMapTracker {
    fn init(&self, root: u64, xor: u64, origin: u32) -> bool {
        self.update(root, |e| {
            if e.origin.is_some() {
                return false;
            }
            e.origin = Some(origin);
            e.value ^= xor;
            true
        })
    }

    fn apply(&self, messages: &[Message]) {
        for message in messages {
            match *message {
                Message::Ack { root, xor } => {
                    self.update(root, |e| {
                        e.value ^= xor;
                        true
                    });
                }
                Message::Fail { root } => {
                    self.update(root, |e| {
                        e.failed = true;
                        true
                    });
                }
                Message::ResetTimeout { root } => {
                    if let Some(mut e) = self.map.get_mut(&root) {
                        e.deadline = Instant::now() + self.timeout;
                    }
                }
            }
        }
    }

    fn pending(&self) -> usize {
        self.map.len()
    }

    fn thread_name(&self) -> &'static str {
        SWEEPER
    }
}
