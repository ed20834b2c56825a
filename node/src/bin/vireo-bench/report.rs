//! What a run measured and how it is shown: each actor's record (an HDR histogram of latencies in
//! microseconds, payload bytes, messages, batches, its own start and end), the totals made from
//! them, and the two outputs: a table on stdout, or one JSON document (`--json`).

use std::fmt::Write as _;

use hdrhistogram::Histogram;

/// The histogram's range: 1 µs to 10 minutes, 3 significant digits.
const LATENCY_MAX_US: u64 = 600_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Producer,
    Consumer,
    ProducingConsumer,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Consumer => "consumer",
            Role::ProducingConsumer => "producing consumer",
        }
    }
}

/// One actor's measurements.
pub struct ActorRecord {
    pub role: Role,
    pub id: u32,
    pub latency_us: Histogram<u64>,
    pub payload_bytes: u64,
    pub messages: u64,
    pub batches: u64,
    /// Nanoseconds since the run's start.
    pub started_ns: u64,
    pub finished_ns: u64,
}

impl ActorRecord {
    pub fn new(role: Role, id: u32) -> ActorRecord {
        ActorRecord {
            role,
            id,
            latency_us: Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).expect("valid bounds"),
            payload_bytes: 0,
            messages: 0,
            batches: 0,
            started_ns: 0,
            finished_ns: 0,
        }
    }

    /// Records one latency; a value past the histogram's range is recorded as its maximum.
    pub fn record_latency(&mut self, micros: u64) {
        self.latency_us.saturating_record(micros.clamp(1, LATENCY_MAX_US));
    }

    fn seconds(&self) -> f64 {
        self.finished_ns.saturating_sub(self.started_ns) as f64 / 1e9
    }
}

/// One row of the table: an actor or the total.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub name: String,
    pub megabytes_per_second: f64,
    pub messages_per_second: f64,
    pub payload_bytes: u64,
    pub messages: u64,
    pub batches: u64,
    pub seconds: f64,
    /// P50, P90, P99, P99.9, P99.99 and the mean, in milliseconds.
    pub latency_ms: [f64; 6],
}

const PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];

fn latency_ms(histogram: &Histogram<u64>) -> [f64; 6] {
    let mut out = [0.0; 6];
    if histogram.is_empty() {
        return out;
    }
    for (slot, percentile) in out.iter_mut().zip(PERCENTILES) {
        *slot = histogram.value_at_quantile(percentile / 100.0) as f64 / 1000.0;
    }
    out[5] = histogram.mean() / 1000.0;
    out
}

fn rate(amount: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        amount as f64 / seconds
    } else {
        0.0
    }
}

pub struct Report {
    pub kind: &'static str,
    pub server_address: String,
    pub message_size: u32,
    pub messages_per_batch: u32,
    pub actors: Vec<Row>,
    pub total: Row,
    /// All payload bytes over the wall-clock time from the first actor's start to the last
    /// one's end.
    pub wall_megabytes_per_second: f64,
}

impl Report {
    pub fn new(
        kind: &'static str,
        server_address: String,
        message_size: u32,
        messages_per_batch: u32,
        records: &[ActorRecord],
    ) -> Report {
        let actors: Vec<Row> = records
            .iter()
            .map(|record| Row {
                name: format!("{} {}", record.role.name(), record.id),
                megabytes_per_second: rate(record.payload_bytes, record.seconds()) / 1e6,
                messages_per_second: rate(record.messages, record.seconds()),
                payload_bytes: record.payload_bytes,
                messages: record.messages,
                batches: record.batches,
                seconds: record.seconds(),
                latency_ms: latency_ms(&record.latency_us),
            })
            .collect();
        let mut merged = Histogram::<u64>::new_with_bounds(1, LATENCY_MAX_US, 3).expect("valid bounds");
        for record in records {
            merged.add(&record.latency_us).expect("histograms of the same bounds");
        }
        let started = records.iter().map(|record| record.started_ns).min().unwrap_or(0);
        let finished = records.iter().map(|record| record.finished_ns).max().unwrap_or(0);
        let wall_seconds = finished.saturating_sub(started) as f64 / 1e9;
        let payload_bytes = records.iter().map(|record| record.payload_bytes).sum();
        let total = Row {
            name: "total".to_string(),
            megabytes_per_second: actors.iter().map(|row| row.megabytes_per_second).sum(),
            messages_per_second: actors.iter().map(|row| row.messages_per_second).sum(),
            payload_bytes,
            messages: records.iter().map(|record| record.messages).sum(),
            batches: records.iter().map(|record| record.batches).sum(),
            seconds: wall_seconds,
            latency_ms: latency_ms(&merged),
        };
        Report {
            kind,
            server_address,
            message_size,
            messages_per_batch,
            actors,
            wall_megabytes_per_second: rate(payload_bytes, wall_seconds) / 1e6,
            total,
        }
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} against {}: {} actor(s), {}-byte messages, {} per batch",
            self.kind,
            self.server_address,
            self.actors.len(),
            self.message_size,
            self.messages_per_batch
        );
        let _ = writeln!(
            out,
            "{:<22} {:>10} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "actor", "MB/s", "msgs/s", "P50 ms", "P90 ms", "P99 ms", "P999 ms", "P9999 ms", "mean ms", "seconds"
        );
        for row in self.actors.iter().chain(std::iter::once(&self.total)) {
            let [p50, p90, p99, p999, p9999, mean] = row.latency_ms;
            let _ = writeln!(
                out,
                "{:<22} {:>10.2} {:>12.0} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8.2}",
                row.name,
                row.megabytes_per_second,
                row.messages_per_second,
                p50,
                p90,
                p99,
                p999,
                p9999,
                mean,
                row.seconds
            );
        }
        let _ = writeln!(
            out,
            "total: {:.1} MB of payload, {} messages in {} batches; {:.2} MB/s over the wall clock",
            self.total.payload_bytes as f64 / 1e6,
            self.total.messages,
            self.total.batches,
            self.wall_megabytes_per_second
        );
        out
    }

    pub fn json(&self) -> serde_json::Value {
        let row = |row: &Row| {
            let [p50, p90, p99, p999, p9999, mean] = row.latency_ms;
            serde_json::json!({
                "name": row.name,
                "throughput_megabytes_per_second": row.megabytes_per_second,
                "throughput_messages_per_second": row.messages_per_second,
                "payload_bytes": row.payload_bytes,
                "messages": row.messages,
                "batches": row.batches,
                "seconds": row.seconds,
                "p50_latency_ms": p50,
                "p90_latency_ms": p90,
                "p99_latency_ms": p99,
                "p999_latency_ms": p999,
                "p9999_latency_ms": p9999,
                "avg_latency_ms": mean,
            })
        };
        serde_json::json!({
            "kind": self.kind,
            "server_address": self.server_address,
            "message_size": self.message_size,
            "messages_per_batch": self.messages_per_batch,
            "actors": self.actors.iter().map(row).collect::<Vec<_>>(),
            "total": row(&self.total),
            "wall_megabytes_per_second": self.wall_megabytes_per_second,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u32, bytes: u64, seconds: u64, latencies: &[u64]) -> ActorRecord {
        let mut record = ActorRecord::new(Role::Producer, id);
        record.payload_bytes = bytes;
        record.messages = bytes / 1000;
        record.batches = latencies.len() as u64;
        record.started_ns = 0;
        record.finished_ns = seconds * 1_000_000_000;
        for &latency in latencies {
            record.record_latency(latency);
        }
        record
    }

    #[test]
    fn totals_sum_actors_and_percentiles_cover_every_sample() {
        let records = [record(1, 200_000_000, 2, &[1000; 99]), record(2, 100_000_000, 4, &[5000])];
        let report = Report::new("pinned-producer", "127.0.0.1:1".into(), 1000, 250, &records);
        assert_eq!(report.actors[0].megabytes_per_second, 100.0);
        assert_eq!(report.actors[1].megabytes_per_second, 25.0);
        assert_eq!(report.total.megabytes_per_second, 125.0);
        assert_eq!(report.wall_megabytes_per_second, 75.0);
        assert_eq!(report.total.batches, 100);
        // 99 samples of 1 ms and one of 5 ms: the median is 1 ms, P99.9 the 5 ms one.
        assert!((report.total.latency_ms[0] - 1.0).abs() < 0.01, "{:?}", report.total.latency_ms);
        assert!((report.total.latency_ms[3] - 5.0).abs() < 0.01, "{:?}", report.total.latency_ms);
        let table = report.table();
        assert!(table.contains("producer 1") && table.contains("total"), "{table}");
        assert_eq!(report.json()["total"]["batches"], 100);
    }
}
