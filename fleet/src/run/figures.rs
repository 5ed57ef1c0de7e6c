//! What a phase measures beside the audit: the nodes' reports, the completion timeline,
//! and the CPU time of the servers and of this process.

use super::RunArgs;
use crate::cluster::Cluster;
use crate::node::{cpu_ms_of, NodeStats};
use crate::wire::Completed;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The latest report of each node process, by pid.
pub type Stats = Arc<Mutex<HashMap<u32, NodeStats>>>;

/// Subscribes to the nodes' reports (`<run>.stats`) and keeps the latest of each in a task.
pub async fn collect_stats(client: &async_nats::Client, run: &str) -> Result<Stats, String> {
    let stats: Stats = Arc::default();
    let mut stats_sub = client
        .subscribe(format!("{run}.stats"))
        .await
        .map_err(|e| e.to_string())?;
    let stats_in = stats.clone();
    tokio::spawn(async move {
        while let Some(m) = stats_sub.next().await {
            if let Ok(s) = serde_json::from_slice::<NodeStats>(&m.payload) {
                stats_in.lock().expect("stats").insert(s.pid, s);
            }
        }
    });
    Ok(stats)
}

/// Completed items per 100 ms since `start`, counted by a task from the completed stream's
/// subject as the records go by; the audit reads each kill's recovery from it.
pub struct Timeline {
    pub start: Instant,
    pub buckets: Arc<Vec<AtomicU64>>,
}

impl Timeline {
    /// Starts counting, with room for the load, the drain's limit and a minute more.
    pub async fn follow(
        client: &async_nats::Client,
        run: &str,
        args: &RunArgs,
    ) -> Result<Timeline, String> {
        let timeline_start = Instant::now();
        let buckets: Arc<Vec<AtomicU64>> = Arc::new(
            (0..((args.duration + args.drain_limit + 60) * 10))
                .map(|_| AtomicU64::new(0))
                .collect(),
        );
        let mut done_sub = client
            .subscribe(format!("{run}.completed"))
            .await
            .map_err(|e| e.to_string())?;
        let timeline = buckets.clone();
        tokio::spawn(async move {
            while let Some(m) = done_sub.next().await {
                let b = (timeline_start.elapsed().as_millis() / 100) as usize;
                if let Some(bucket) = timeline.get(b) {
                    // Relaxed: a count read after the run.
                    bucket.fetch_add(
                        (m.payload.len() / Completed::SIZE) as u64,
                        Ordering::Relaxed,
                    );
                }
            }
        });
        Ok(Timeline {
            start: timeline_start,
            buckets,
        })
    }
}

/// CPU time so far, milliseconds: of the servers (when the run started them) and of this
/// process.
pub struct CpuMark {
    servers_ms: Option<u64>,
    run_ms: u64,
}

impl CpuMark {
    pub fn now(cluster: Option<&Arc<Mutex<Cluster>>>) -> CpuMark {
        CpuMark {
            servers_ms: cluster.map(|c| c.lock().expect("cluster").cpu_ms()),
            run_ms: cpu_ms_of(std::process::id()).unwrap_or(0),
        }
    }

    /// The servers' and this process's CPU time since the mark, milliseconds.
    pub fn since(&self, cluster: Option<&Arc<Mutex<Cluster>>>) -> (Option<u64>, u64) {
        let servers_ms = self.servers_ms.and_then(|before| {
            Some(
                cluster?
                    .lock()
                    .expect("cluster")
                    .cpu_ms()
                    .saturating_sub(before),
            )
        });
        let run_ms = cpu_ms_of(std::process::id())
            .unwrap_or(0)
            .saturating_sub(self.run_ms);
        (servers_ms, run_ms)
    }
}
