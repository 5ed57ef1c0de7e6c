//! What every scenario shares for its report: the live progress line, latency percentiles
//! from an HDR histogram, a throughput time series, and number formatting.
//!
//! Progress goes to stderr (a bar redrawn in place with `\r` on a terminal, a plain line
//! every few seconds otherwise, so CI logs stay readable); the summary goes to stdout.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Nanoseconds from 1 ns to one hour, three significant digits: 0.1 % resolution.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static histogram bounds")
}

/// The figures printed for a distribution of durations, in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Percentiles {
    pub(crate) count: u64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
    pub(crate) max_us: f64,
    pub(crate) mean_us: f64,
}

impl Percentiles {
    pub(crate) fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Percentiles {
            count: h.len(),
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
            mean_us: h.mean() / 1e3,
        }
    }

    /// "p50 0.61 ms  p99 1.20 ms  p99.9 1.9 ms  max 3.4 ms  (n = 12345)"
    pub(crate) fn line(&self) -> String {
        self.line_in(duration_us)
    }

    /// [`line`](Self::line) for operations of nanoseconds to microseconds: "p50 180 ns  p99
    /// 2.41 µs  ...".
    pub(crate) fn fine_line(&self) -> String {
        self.line_in(duration_fine)
    }

    fn line_in(&self, unit: fn(f64) -> String) -> String {
        if self.count == 0 {
            return "(none)".to_string();
        }
        format!(
            "p50 {}  p99 {}  p99.9 {}  max {}  (n = {})",
            unit(self.p50_us),
            unit(self.p99_us),
            unit(self.p999_us),
            unit(self.max_us),
            self.count
        )
    }
}

/// Microseconds as "180 ns", "2.41 µs", "850 µs", "1.24 ms".
pub(crate) fn duration_fine(us: f64) -> String {
    if us < 1.0 {
        format!("{:.0} ns", us * 1e3)
    } else if us < 10.0 {
        format!("{us:.2} µs")
    } else {
        duration_us(us)
    }
}

/// The distribution as a curve for the plot: x = "nines" (0 = p0, 1 = p90, 2 = p99, ...),
/// y = milliseconds.
pub(crate) fn percentile_curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    (0..=80)
        .map(|i| {
            let nines = f64::from(i) / 20.0; // 0 ..= 4 nines
            let q = 1.0 - 10f64.powf(-nines);
            (nines, h.value_at_quantile(q.min(1.0)) as f64 / 1e6)
        })
        .chain(std::iter::once((4.2, h.max() as f64 / 1e6)))
        .collect()
}

/// The x ticks matching [`percentile_curve`].
pub(crate) fn nines_ticks() -> Vec<(f64, String)> {
    ["p0", "p90", "p99", "p99.9", "p99.99"]
        .iter()
        .enumerate()
        .map(|(i, l)| (i as f64, (*l).to_string()))
        .chain(std::iter::once((4.2, "max".to_string())))
        .collect()
}

/// One point of a throughput time series.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Sample {
    /// Seconds since the phase started.
    pub(crate) t: f64,
    /// Primary rate (trees/s, touches/s).
    pub(crate) rate: f64,
    /// Secondary rate (acks/s, expirations/s).
    pub(crate) rate2: f64,
}

/// The live progress display.
#[derive(Debug)]
pub(crate) struct Progress {
    tty: bool,
    start: Instant,
    total: Duration,
    last_plain: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// A progress display for a phase expected to last `total`.
    pub(crate) fn new(total: Duration) -> Self {
        Progress {
            tty: std::io::stderr().is_terminal(),
            start: Instant::now(),
            total,
            last_plain: None,
            drawn: false,
        }
    }

    /// How often the caller should call [`update`](Self::update).
    pub(crate) fn period(&self) -> Duration {
        if self.tty {
            Duration::from_millis(200)
        } else {
            Duration::from_millis(500)
        }
    }

    /// Shows `status`: as a bar redrawn in place on a terminal, as a line every 5 s otherwise.
    pub(crate) fn update(&mut self, status: &str) {
        let elapsed = self.start.elapsed();
        let mut err = std::io::stderr().lock();
        if self.tty {
            let fraction = (elapsed.as_secs_f64() / self.total.as_secs_f64().max(1e-9)).min(1.0);
            let filled = (fraction * 24.0).round() as usize;
            let _ = write!(
                err,
                "\r\x1b[2K[{}{}] {:>5.1}s {status}",
                "#".repeat(filled),
                ".".repeat(24 - filled),
                elapsed.as_secs_f64()
            );
            self.drawn = true;
        } else if self
            .last_plain
            .map_or(true, |t| t.elapsed() >= Duration::from_secs(5))
        {
            let _ = writeln!(err, "  {:>5.1}s {status}", elapsed.as_secs_f64());
            self.last_plain = Some(Instant::now());
        }
        let _ = err.flush();
    }

    /// Ends the bar's line so that what follows starts on a fresh one.
    pub(crate) fn finish(&mut self) {
        if self.tty && self.drawn {
            eprintln!();
            self.drawn = false;
        }
    }
}

/// 1234567.0 -> "1.23 M", 4321.0 -> "4.32 k".
pub(crate) fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2} G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.2} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Microseconds as "850 µs", "1.24 ms", "2.10 s".
pub(crate) fn duration_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}

/// Bytes as "412.3 MiB".
pub(crate) fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = histogram();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap(); // 1 µs .. 1 ms
        }
        let p = Percentiles::of(&h);
        assert_eq!(p.count, 1000);
        assert!((p.p50_us - 500.0).abs() < 2.0, "{p:?}");
        assert!((p.p99_us - 990.0).abs() < 2.0, "{p:?}");
        assert!((p.max_us - 1000.0).abs() < 2.0, "{p:?}");
        assert_eq!(Percentiles::of(&histogram()).line(), "(none)");
    }

    #[test]
    fn formatting() {
        assert_eq!(si(1_234_567.0), "1.23 M");
        assert_eq!(duration_us(1500.0), "1.50 ms");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
