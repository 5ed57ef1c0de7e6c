//! What a run leaves behind besides its report: the summary `--json` writes ([`Output`])
//! and the picture `--plot` draws ([`plot`]).

use serde::Serialize;

use crate::common::{report, svg};
use crate::{acker, expiry_queue, partitioned, wheel};

/// Everything `--json` writes.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Output {
    pub(crate) scenario: String,
    pub(crate) seed: u64,
    pub(crate) pass: bool,
    pub(crate) violations: u64,
    pub(crate) seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) acker: Option<acker::Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expiry_queue: Option<expiry_queue::Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wheel: Option<wheel::Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partitioned: Option<partitioned::Summary>,
}

/// The `--plot` picture: a throughput panel and a lateness panel per scenario that ran.
pub(crate) fn plot(out: &Output) -> String {
    use svg::{Chart, Series};
    let mut charts = Vec::new();
    let nines = report::nines_ticks();
    if let Some(a) = &out.acker {
        for (title, rate) in [
            ("acker: completed trees per second", 0),
            ("acker: acks per second", 1),
        ] {
            charts.push(Chart {
                title: title.into(),
                x_label: "seconds".into(),
                y_label: "per second".into(),
                series: vec![Series {
                    name: ["trees/s", "acks/s"][rate].into(),
                    points: a
                        .throughput
                        .iter()
                        .map(|s| (s.t, if rate == 0 { s.rate } else { s.rate2 }))
                        .collect(),
                }],
                x_ticks: Vec::new(),
            });
        }
        for (title, name, points) in [
            (
                "acker: timeout lateness (Completion.elapsed - timeout of TimedOut trees)",
                "lateness",
                &a.lateness_curve,
            ),
            (
                "acker: completion latency (Completion.elapsed of Acked trees)",
                "latency",
                &a.latency_curve,
            ),
        ] {
            charts.push(Chart {
                title: title.into(),
                x_label: "percentile".into(),
                y_label: "ms".into(),
                series: vec![Series {
                    name: name.into(),
                    points: points.clone(),
                }],
                x_ticks: nines.clone(),
            });
        }
    }
    if let Some(q) = &out.expiry_queue {
        charts.push(Chart {
            title: "expiry-queue: throughput".into(),
            x_label: "seconds".into(),
            y_label: "per second".into(),
            series: vec![
                Series {
                    name: "touches/s".into(),
                    points: q.throughput.iter().map(|s| (s.t, s.rate)).collect(),
                },
                Series {
                    name: "expirations/s".into(),
                    points: q.throughput.iter().map(|s| (s.t, s.rate2)).collect(),
                },
            ],
            x_ticks: Vec::new(),
        });
        charts.push(Chart {
            title: "expiry-queue: expiry lateness (after poll - deadline)".into(),
            x_label: "percentile".into(),
            y_label: "ms".into(),
            series: vec![Series {
                name: "lateness".into(),
                points: q.lateness_curve.clone(),
            }],
            x_ticks: nines,
        });
    }
    if let Some(w) = &out.wheel {
        charts.push(Chart {
            title: "wheel: operations".into(),
            x_label: "thread".into(),
            y_label: "M ops/s".into(),
            series: vec![Series {
                name: "M ops/s per thread".into(),
                points: w
                    .per_thread_mops
                    .iter()
                    .enumerate()
                    .map(|(i, &r)| (i as f64, r))
                    .collect(),
            }],
            x_ticks: Vec::new(),
        });
    }
    svg::render(&charts)
}
