//! The partitioned scenario's oracle: one record per attempt (keyed by its root), holding
//! the attempt's whole history (every message sent, lost, delivered or discarded, every
//! completion, what a shutdown handed back, how the origin resolved it). A record is judged
//! once nothing can touch it any more ([`Oracle::sweep`]), and then dropped, so memory
//! follows what is in flight, not what was ever started.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

use ackwheel::Outcome;

/// Who an attempt belongs to: the acker's payload, and what its completion carries back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tag {
    /// The origin (spout) that started it, where its completion goes.
    pub(crate) spout: u16,
    /// The message (tree) of that spout; every attempt of it has the same number.
    pub(crate) tree: u64,
    /// 1 for the first attempt; a replay is a new attempt under a new root.
    pub(crate) attempt: u8,
}

/// One message of an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Init,
    /// The i-th ack of the tree.
    Ack(u8),
    Fail,
}

/// How the origin resolved an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// Its completion came back in time.
    Completion(Outcome),
    /// The origin's own deadline passed first (it then replays or gives up).
    OriginTimeout,
}

#[derive(Clone, Copy, Debug)]
enum What {
    Sent(Kind, u16),
    Lost(Kind),
    /// Applied to partition `.1`'s acker incarnation `.2`; `.3` is the time just before the
    /// call (the event's own time is just after it).
    Delivered(Kind, u16, u32, u64),
    /// Thrown away by partition `.1` being killed or down.
    Discarded(Kind, u16),
    Completed(Outcome, u16, u32, Tag),
    HandedBack(u16, u32),
    Resolved(Resolved),
}

#[derive(Clone, Copy, Debug)]
struct Event {
    us: u64,
    what: What,
}

/// One attempt.
#[derive(Debug)]
struct Record {
    tag: Tag,
    owner: u16,
    /// Messages the attempt has: init, its acks, and a fail in place of the last ack.
    planned: u8,
    fail: bool,
    history: Vec<Event>,
}

/// How attempts ended, as judged.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub(crate) struct Judged {
    pub(crate) attempts: u64,
    pub(crate) acked: u64,
    pub(crate) failed: u64,
    pub(crate) timed_out: u64,
    /// Initialized in a partition that was then killed: handed back by its shutdown.
    pub(crate) handed_back: u64,
    /// Never initialized (init lost on the network or thrown away by a killed partition).
    pub(crate) never_initialized: u64,
    /// Had a message thrown away by a killed or down partition.
    pub(crate) hit_by_kill: u64,
    /// Acks applied before their init (the owner held them as orphans).
    pub(crate) acks_before_init: u64,
    /// Completions that came after the origin had timed the attempt out (ignored there).
    pub(crate) late_completions: u64,
}

/// Shards of open records, keyed by root.
pub(crate) struct Oracle {
    shards: Vec<Mutex<HashMap<u64, Record>>>,
    start: Instant,
    timeout_us: u64,
    /// A record whose tree was initialized but neither completed nor handed back is judged
    /// (a violation) this long after its deadline.
    grace_us: u64,
    judged: Mutex<(Judged, Vec<String>, u64)>,
}

const SHARDS: usize = 256;
/// How much earlier than the timeout a tree's messages must all have been delivered for a
/// `TimedOut` to be a violation: the acker keeps time in ticks of about 1 ms.
const SLACK_US: u64 = 20_000;
/// Most violation reports kept in full (all are counted).
const MAX_REPORTS: usize = 20;

fn shard_of(root: u64) -> usize {
    (root.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % SHARDS
}

impl Oracle {
    pub(crate) fn new(timeout_us: u64, grace_us: u64) -> Self {
        Oracle {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            start: Instant::now(),
            timeout_us,
            grace_us,
            judged: Mutex::new((Judged::default(), Vec::new(), 0)),
        }
    }

    pub(crate) fn now(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn with<R>(&self, root: u64, f: impl FnOnce(Option<&mut Record>) -> R) -> R {
        let mut shard = self.shards[shard_of(root)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        f(shard.get_mut(&root))
    }

    /// A new attempt under `root`; `false` if the root is already open (pick another).
    pub(crate) fn begin(&self, root: u64, tag: Tag, owner: u16, planned: u8, fail: bool) -> bool {
        let mut shard = self.shards[shard_of(root)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if shard.contains_key(&root) {
            return false;
        }
        shard.insert(
            root,
            Record {
                tag,
                owner,
                planned,
                fail,
                history: Vec::with_capacity(2 + 3 * planned as usize),
            },
        );
        true
    }

    fn log(&self, root: u64, what: What) {
        let us = self.now();
        let found = self.with(root, |r| {
            r.map(|r| r.history.push(Event { us, what })).is_some()
        });
        if !found {
            self.violation(format!(
                "root {root:#018x}: {what:?} for a root with no open attempt (never started, or judged long ago)"
            ));
        }
    }

    pub(crate) fn sent(&self, root: u64, kind: Kind, to: u16) {
        self.log(root, What::Sent(kind, to));
    }

    pub(crate) fn lost(&self, root: u64, kind: Kind) {
        self.log(root, What::Lost(kind));
    }

    pub(crate) fn delivered(&self, root: u64, kind: Kind, p: u16, inc: u32, before_us: u64) {
        self.log(root, What::Delivered(kind, p, inc, before_us));
    }

    pub(crate) fn discarded(&self, root: u64, kind: Kind, p: u16) {
        self.log(root, What::Discarded(kind, p));
    }

    pub(crate) fn completed(&self, root: u64, outcome: Outcome, p: u16, inc: u32, tag: Tag) {
        self.log(root, What::Completed(outcome, p, inc, tag));
    }

    pub(crate) fn handed_back(&self, root: u64, p: u16, inc: u32) {
        self.log(root, What::HandedBack(p, inc));
    }

    pub(crate) fn resolved(&self, root: u64, how: Resolved) {
        self.log(root, What::Resolved(how));
    }

    fn violation(&self, text: String) {
        let mut j = self.judged.lock().unwrap_or_else(|e| e.into_inner());
        j.2 += 1;
        if j.1.len() < MAX_REPORTS {
            j.1.push(text);
        }
    }

    /// Judges and drops every record nothing can touch any more; with `all`, every record
    /// left (the end of a phase: one still open then is a violation). Returns how many
    /// records are still open.
    pub(crate) fn sweep(&self, all: bool) -> usize {
        let now = self.now();
        let mut open = 0;
        for shard in &self.shards {
            let done: Vec<(u64, Record)> = {
                let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
                let roots: Vec<u64> = map
                    .iter()
                    .filter(|(_, r)| all || self.settled(r, now))
                    .map(|(&root, _)| root)
                    .collect();
                open += map.len() - roots.len();
                roots
                    .into_iter()
                    .filter_map(|root| map.remove(&root).map(|r| (root, r)))
                    .collect()
            };
            for (root, r) in done {
                let forced = all && !self.settled(&r, now);
                self.judge(root, &r, forced);
            }
        }
        open
    }

    fn settled(&self, r: &Record, now: u64) -> bool {
        let mut outstanding = 0i32;
        let (mut resolved, mut completed, mut handed_back) = (false, false, false);
        let mut init_at = None;
        for e in &r.history {
            match e.what {
                What::Sent(..) => outstanding += 1,
                What::Delivered(k, ..) | What::Discarded(k, _) => {
                    outstanding -= 1;
                    if let (Kind::Init, What::Delivered(..)) = (k, e.what) {
                        init_at = Some(e.us);
                    }
                }
                What::Completed(..) => completed = true,
                What::HandedBack(..) => handed_back = true,
                What::Resolved(_) => resolved = true,
                What::Lost(_) => {}
            }
        }
        resolved
            && outstanding == 0
            && (completed
                || handed_back
                || init_at.map_or(true, |t| now > t + self.timeout_us + self.grace_us))
    }

    fn judge(&self, root: u64, r: &Record, forced: bool) {
        let problems = verify(r, self.timeout_us, forced);
        let mut j = self.judged.lock().unwrap_or_else(|e| e.into_inner());
        tally(&mut j.0, r);
        j.2 += problems.len() as u64;
        if !problems.is_empty() && j.1.len() < MAX_REPORTS {
            let text = format!(
                "VIOLATION: root {root:#018x} ({}): {}\n{}",
                describe(r),
                problems.join("; "),
                history(r)
            );
            j.1.push(text);
        }
    }

    /// The counts so far, the kept reports, and how many violations in all.
    pub(crate) fn results(&self) -> (Judged, Vec<String>, u64) {
        let j = self.judged.lock().unwrap_or_else(|e| e.into_inner());
        (j.0, j.1.clone(), j.2)
    }
}

mod verdict;
use verdict::{describe, history, tally, verify};

#[cfg(test)]
mod tests;
