//! What a node reports to the run, and the loop that publishes it.

use super::procfs::{cpu_ms_of, rss_of, thread_cpu_ns};
use super::Node;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a node reports every half second on `<run>.stats` (cumulative since it started).
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub struct NodeStats {
    pub index: usize,
    pub pid: u32,
    /// Items pulled and started as trees.
    pub started: u64,
    /// Inits, acks and fails applied by this node's tracker.
    pub inits_applied: u64,
    pub acks_applied: u64,
    pub fails_applied: u64,
    pub part_frames: u64,
    /// Completions seen by this node as an origin.
    pub acked: u64,
    pub failed: u64,
    pub timed_out: u64,
    /// Items asked for again because no completion came (owner lost).
    pub silent: u64,
    pub recorded: u64,
    pub malformed: u64,
    pub misrouted: u64,
    pub refused_inits: u64,
    pub unknown_completions: u64,
    pub pending: u64,
    pub rss: u64,
    pub nats_disconnects: u64,
    /// CPU time of the owner's thread in the tracker's calls (inits, acks and fails
    /// applied, completions handed to the outbox), nanoseconds.
    pub tracker_ns: u64,
    /// CPU time of the tracker's own thread (the Acker's reaper, the hand-written
    /// tracker's sweeper), nanoseconds.
    pub tracker_thread_ns: u64,
    /// This process's CPU time (user and system), milliseconds.
    pub cpu_ms: u64,
}

pub async fn stats_loop(node: Arc<Node>) {
    let subject = format!("{}.stats", node.args.run);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let c = &node.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let stats = NodeStats {
            index: node.args.index,
            pid: std::process::id(),
            started: get(&c.started),
            inits_applied: get(&c.inits_applied),
            acks_applied: get(&c.acks_applied),
            fails_applied: get(&c.fails_applied),
            part_frames: get(&c.part_frames),
            acked: get(&c.acked),
            failed: get(&c.failed),
            timed_out: get(&c.timed_out),
            silent: get(&c.silent),
            recorded: get(&c.recorded),
            malformed: get(&c.malformed),
            misrouted: get(&c.misrouted),
            refused_inits: get(&c.refused_inits),
            unknown_completions: get(&c.unknown_completions),
            pending: node.tracker.pending() as u64,
            rss: rss_of(std::process::id()).unwrap_or(0),
            nats_disconnects: get(&c.nats_disconnects),
            tracker_ns: get(&c.tracker_ns),
            tracker_thread_ns: thread_cpu_ns(node.tracker.thread_name()).unwrap_or(0),
            cpu_ms: cpu_ms_of(std::process::id()).unwrap_or(0),
        };
        if let Ok(json) = serde_json::to_vec(&stats) {
            let _ = node.client.publish(subject.clone(), json.into()).await;
        }
    }
}
