//! A phase's JetStream streams: the work items with the nodes' durable consumer, and the
//! completed record.

use super::{ack_wait, RunArgs};
use async_nats::jetstream::{self, consumer, stream};
use std::time::{Duration, Instant};

/// The streams a phase creates, fresh, on the run's cluster.
pub struct Streams {
    /// The nodes' durable consumer of the work stream.
    pub consumer: consumer::PullConsumer,
    /// The completed record, which the audit reads.
    pub done: stream::Stream,
}

impl Streams {
    /// `WORK_<run>` (on `work_subject`), `DONE_<run>` (on `<run>.completed`) and the nodes'
    /// consumer, each retried for 30 s.
    pub async fn create(
        args: &RunArgs,
        js: &jetstream::Context,
        run: &str,
        work_subject: &str,
    ) -> Result<Streams, String> {
        let within = Duration::from_secs(30);
        // The first creation waits for the cluster to elect its JetStream meta leader.
        let work = retry("create the work stream", within, || {
            js.get_or_create_stream(stream::Config {
                name: format!("WORK_{run}"),
                subjects: vec![work_subject.to_string()],
                num_replicas: args.replicas,
                ..Default::default()
            })
        })
        .await?;
        let done = retry("create the completed stream", within, || {
            js.get_or_create_stream(stream::Config {
                name: format!("DONE_{run}"),
                subjects: vec![format!("{run}.completed")],
                num_replicas: args.replicas,
                ..Default::default()
            })
        })
        .await?;
        let consumer: consumer::PullConsumer = retry("create the nodes' consumer", within, || {
            work.get_or_create_consumer(
                "nodes",
                consumer::pull::Config {
                    durable_name: Some("nodes".into()),
                    ack_wait: ack_wait(args),
                    max_ack_pending: 2048 * args.nodes as i64,
                    ..Default::default()
                },
            )
        })
        .await?;
        Ok(Streams { consumer, done })
    }
}

async fn retry<T, E: std::fmt::Display, F, Fut>(
    what: &str,
    within: Duration,
    mut f: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() > within => return Err(format!("{what}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
