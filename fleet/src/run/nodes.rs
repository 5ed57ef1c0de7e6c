//! A phase's node processes: started, waited for until each reports, stopped at the end.

use super::figures::Stats;
use super::RunArgs;
use crate::node::rss_of;
use crate::{Credentials, TrackerKind};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A node process and the pipe whose end tells it to exit.
pub struct NodeProcess {
    child: Child,
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a phase starts its node processes with (and restarts one after a kill).
#[derive(Clone)]
pub struct NodeLauncher {
    pub args: RunArgs,
    pub run: String,
    pub tracker: TrackerKind,
    pub urls: Vec<String>,
    pub credentials: Credentials,
}

impl NodeLauncher {
    /// Starts node `index`.
    pub fn spawn(&self, index: usize) -> Result<NodeProcess, String> {
        let NodeLauncher {
            args,
            run,
            tracker,
            urls,
            credentials,
        } = self;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .arg("node")
            .args(["--index", &index.to_string()])
            .args(["--nodes", &args.nodes.to_string()])
            .args(["--servers", &urls.join(",")])
            .args(["--run", run])
            .args(["--tracker", &tracker.to_string()])
            .args(["--fanout", &args.fanout.to_string()])
            .args(["--timeout-ms", &args.timeout_ms.to_string()])
            .args(["--fail-rate", &args.fail_rate.to_string()])
            .args(["--drop-rate", &args.drop_rate.to_string()])
            .args(["--dup-rate", &args.dup_rate.to_string()])
            .args(["--nats-limit", &args.nats_limit.to_string()])
            .envs(credentials.env())
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start node {index}: {e}"))?;
        Ok(NodeProcess { child })
    }
}

/// The phase's node processes by index; `None` while one is killed.
pub type Nodes = Arc<Mutex<Vec<Option<NodeProcess>>>>;

/// Starts every node of the phase.
pub fn start_nodes(launcher: &NodeLauncher) -> Result<Nodes, String> {
    Ok(Arc::new(Mutex::new(
        (0..launcher.args.nodes)
            .map(|i| launcher.spawn(i).map(Some))
            .collect::<Result<_, _>>()?,
    )))
}

/// Waits until every node has reported, which it does once it is subscribed and pulling.
pub async fn wait_for_reports(stats: &Stats, nodes: usize) -> Result<(), String> {
    let ready = Instant::now();
    loop {
        let n = stats.lock().expect("stats").len();
        if n >= nodes {
            break;
        }
        if ready.elapsed() > Duration::from_secs(30) {
            return Err(format!("only {n} of {nodes} nodes reported within 30 s"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Stops the nodes after one more report from each, and returns each node's RSS at the end,
/// read before it is stopped (node 0 first).
pub async fn stop_nodes(nodes: &Nodes) -> Vec<Option<u64>> {
    // One more report from every node, then stop them.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let final_rss: Vec<Option<u64>> = {
        let nodes = nodes.lock().expect("nodes");
        nodes
            .iter()
            .map(|p| p.as_ref().and_then(|p| rss_of(p.child.id())))
            .collect()
    };
    nodes.lock().expect("nodes").clear();
    final_rss
}
