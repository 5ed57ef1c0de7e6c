//! The faults a phase injects: a node and a server killed during the load, and bad input
//! on the wire.

use super::nodes::{NodeLauncher, Nodes};
use crate::cluster::Cluster;
use crate::wire;
use async_nats::jetstream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Each kill's description and time, for the audit's recoveries.
pub type Kills = Arc<Mutex<Vec<(String, Instant)>>>;

/// The kills, on a task: at 30 % of the `load` that began at `start`, the last node is
/// killed and restarted a second later; at 60 %, when the run started the servers, the
/// third server is killed and restarted three seconds later.
pub fn spawn_kills(
    launcher: NodeLauncher,
    nodes: Nodes,
    cluster: Option<Arc<Mutex<Cluster>>>,
    kills: Kills,
    start: Instant,
    load: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let victim = launcher.args.nodes - 1;
        tokio::time::sleep_until((start + load.mul_f64(0.3)).into()).await;
        nodes.lock().expect("nodes")[victim] = None; // SIGKILL (NodeProcess::drop)
        kills.lock().expect("kills").push((
            format!("kill -9 of node {victim}, restarted 1 s later"),
            Instant::now(),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        match launcher.spawn(victim) {
            Ok(p) => nodes.lock().expect("nodes")[victim] = Some(p),
            Err(e) => eprintln!("fleet: restart of node {victim}: {e}"),
        }
        if let Some(cluster) = cluster {
            tokio::time::sleep_until((start + load.mul_f64(0.6)).into()).await;
            let c = cluster.clone();
            let _ = tokio::task::spawn_blocking(move || c.lock().expect("cluster").kill_server(2))
                .await;
            kills.lock().expect("kills").push((
                "kill -9 of nats-server 3, restarted 3 s later".into(),
                Instant::now(),
            ));
            tokio::time::sleep(Duration::from_secs(3)).await;
            let c = cluster.clone();
            if let Ok(Err(e)) =
                tokio::task::spawn_blocking(move || c.lock().expect("cluster").start_server(2))
                    .await
            {
                eprintln!("fleet: restart of nats-server 3: {e}");
            }
        }
    })
}

/// Bad input on the wire, counted by the nodes and checked by the audit: per node a
/// partition frame cut short, one with an unknown record kind, a sub-task frame cut short,
/// a completion with no outcome, and a well-formed ack for a root the node does not own;
/// and one work item that is not a number. Returns the (malformed, misrouted) counts the
/// nodes must report.
pub async fn inject_bad_input(
    client: &async_nats::Client,
    js: &jetstream::Context,
    run: &str,
    nodes: usize,
) -> Result<(u64, u64), String> {
    let mut misrouted = 0;
    for i in 0..nodes {
        let mut unknown_kind = Vec::new();
        wire::PartMessage::Ack { root: 1, xor: 1 }.encode(&mut unknown_kind);
        unknown_kind[0] = 0xEE;
        let bad = [
            (format!("{run}.part.{i}"), vec![0xAB; 23]),
            (format!("{run}.part.{i}"), unknown_kind),
            (format!("{run}.task.{i}"), vec![0xAB; 17]),
            (format!("{run}.done.{i}"), vec![0; 16]),
        ];
        for (subject, bytes) in bad {
            client
                .publish(subject, bytes.into())
                .await
                .map_err(|e| e.to_string())?;
        }
        if nodes > 1 {
            let root = (1u64..)
                .find(|&r| wire::owner(r, nodes) != i)
                .expect("a root");
            let mut frame = Vec::new();
            wire::PartMessage::Ack { root, xor: 1 }.encode(&mut frame);
            client
                .publish(format!("{run}.part.{i}"), frame.into())
                .await
                .map_err(|e| e.to_string())?;
            misrouted += 1;
        }
    }
    client.flush().await.map_err(|e| e.to_string())?;
    js.publish(format!("{run}.work"), vec![1u8; 7].into())
        .await
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| format!("publish a malformed work item: {e}"))?;
    Ok((4 * nodes as u64 + 1, misrouted))
}
