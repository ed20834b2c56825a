//! What vireo-server counts and how `/metrics` shows it: each shard keeps its own figures
//! (`ShardFigures`: requests, bytes and latency by command, connections, refusals, groups,
//! views, commits, segments) without locks on its hot path and publishes a copy every few ticks
//! (`ShardStats`); the metrics endpoint, on shard 0, merges the copies into Prometheus text
//! (version 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;
use vireo_io::glommio::NetCounters;

use crate::NodeCounters;

/// Latency is recorded in microseconds, from 1 µs to 60 s at 3 significant digits.
const LATENCY_US_MAX: u64 = 60_000_000;
/// Quantiles `/metrics` reports for each command's latency.
const QUANTILES: [f64; 5] = [0.5, 0.9, 0.99, 0.999, 0.9999];

pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid bounds")
}

/// One command's figures on one shard.
#[derive(Clone, Debug)]
pub struct CommandFigures {
    pub requests: u64,
    /// Replies that carried a non-zero status.
    pub errors: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub latency_us: Histogram<u64>,
}

impl Default for CommandFigures {
    fn default() -> CommandFigures {
        CommandFigures { requests: 0, errors: 0, bytes_in: 0, bytes_out: 0, latency_us: latency_histogram() }
    }
}

/// Everything one shard reports.
#[derive(Clone, Debug, Default)]
pub struct ShardFigures {
    pub net: NetCounters,
    pub node: NodeCounters,
    pub connections: u64,
    /// Replica groups the shard hosts (the metadata group counts on shard 0).
    pub groups: u64,
    pub segments: u64,
    /// Batches a single node's recovery found damaged in its segment logs past a checkpoint and
    /// applied as lost (their offsets stay taken, their messages are gone).
    pub batches_lost: u64,
    pub commits: u64,
    pub view_changes: u64,
    /// The metadata group's view and commit (shard 0).
    pub metadata_view: u64,
    pub metadata_commit: u64,
    pub replica_frames_dropped: u64,
    /// The hosted partition groups' prepares sent without their batches to the backup that
    /// forwarded the requests, prepares rebuilt here from forwarded frames, and elided prepares
    /// that missed them (asked for whole).
    pub prepares_elided: u64,
    pub prepares_rebuilt: u64,
    pub elided_missed: u64,
    /// The shard's replica links (a cluster node).
    pub links: crate::server::replica_links::LinkCounters,
    /// Shard 0: the node's peers linked now, and the replica link handshakes refused for a
    /// missing or wrong secret, or for a roster that differs.
    pub peers_linked: u64,
    pub replica_auth_refused: u64,
    pub replica_roster_refused: u64,
    /// Shard 0: HTTPS connections closed for a failed or stalled TLS handshake.
    pub http_tls_refused: u64,
    /// Shard 0: client connections closed at once because the process was out of descriptors.
    pub descriptors_refused: u64,
    /// Replica failures (a write or sync of the group's files that failed).
    pub replica_failures: u64,
    /// The data directory's file system as the shard last read it (`disk_reserve`).
    pub disk: DiskFigures,
    pub commands: BTreeMap<&'static str, CommandFigures>,
    /// What the committed metadata holds (shard 0): streams, topics, partitions, users.
    pub catalog: Option<(u64, u64, u64, u64)>,
}

/// What a shard last knew of its disk (`disk_reserve`).
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskFigures {
    /// Free and total bytes, when the file system could be read.
    pub space: Option<(u64, u64)>,
    pub reserve: u64,
    pub below_reserve: bool,
    /// A write or sync failed: writes are refused until a restart.
    pub failed: bool,
}

/// A shard's last published figures, read by the metrics endpoint of shard 0.
#[derive(Debug, Default)]
pub struct ShardStats {
    figures: Mutex<ShardFigures>,
}

impl ShardStats {
    pub fn publish(&self, figures: &ShardFigures) {
        figures.clone_into(&mut self.figures.lock().expect("no shard panics holding it"));
    }

    pub fn read(&self) -> ShardFigures {
        self.figures.lock().expect("no shard panics holding it").clone()
    }
}

pub type AllStats = Arc<Vec<ShardStats>>;

/// The name `/metrics` gives a request, from its header: the command code (byte 196), or for a
/// request that carries none, its operation (byte 176).
pub fn command_name(code: u32, operation: u8) -> &'static str {
    use vireo_protocol::wire::command as c;
    let code = if code != 0 {
        code
    } else {
        match operation {
            1 => c::LOGIN_REGISTER,
            3 => c::LOGOUT,
            160 => c::SEND_MESSAGES,
            161 => c::STORE_CONSUMER_OFFSET,
            162 => c::DELETE_CONSUMER_OFFSET,
            operation => crate::metadata_plane::command_code_of(operation).unwrap_or(0),
        }
    };
    match code {
        c::PING => "ping",
        c::GET_STATS => "get_stats",
        c::GET_SNAPSHOT_FILE => "get_snapshot_file",
        c::GET_CLUSTER_METADATA => "get_cluster_metadata",
        c::DESCRIBE_OPTIONS => "describe_options",
        c::GET_ME => "get_me",
        c::GET_CLIENT => "get_client",
        c::GET_CLIENTS => "get_clients",
        c::GET_USER => "get_user",
        c::GET_USERS => "get_users",
        c::CREATE_USER => "create_user",
        c::DELETE_USER => "delete_user",
        c::UPDATE_USER => "update_user",
        c::UPDATE_PERMISSIONS => "update_permissions",
        c::CHANGE_PASSWORD => "change_password",
        c::LOGOUT => "logout",
        c::LOGIN_REGISTER => "login_register",
        c::GET_PERSONAL_ACCESS_TOKENS => "get_personal_access_tokens",
        c::CREATE_PERSONAL_ACCESS_TOKEN => "create_personal_access_token",
        c::DELETE_PERSONAL_ACCESS_TOKEN => "delete_personal_access_token",
        c::LOGIN_WITH_PERSONAL_ACCESS_TOKEN => "login_with_personal_access_token",
        c::POLL_MESSAGES => "poll_messages",
        c::SEND_MESSAGES => "send_messages",
        c::FLUSH_UNSAVED_BUFFER => "flush_unsaved_buffer",
        c::GET_CONSUMER_OFFSET => "get_consumer_offset",
        c::STORE_CONSUMER_OFFSET => "store_consumer_offset",
        c::DELETE_CONSUMER_OFFSET => "delete_consumer_offset",
        c::GET_STREAM => "get_stream",
        c::GET_STREAMS => "get_streams",
        c::CREATE_STREAM => "create_stream",
        c::DELETE_STREAM => "delete_stream",
        c::UPDATE_STREAM => "update_stream",
        c::PURGE_STREAM => "purge_stream",
        c::GET_TOPIC => "get_topic",
        c::GET_TOPICS => "get_topics",
        c::CREATE_TOPIC => "create_topic",
        c::DELETE_TOPIC => "delete_topic",
        c::UPDATE_TOPIC => "update_topic",
        c::PURGE_TOPIC => "purge_topic",
        c::CREATE_PARTITIONS => "create_partitions",
        c::DELETE_PARTITIONS => "delete_partitions",
        c::DELETE_SEGMENTS => "delete_segments",
        c::GET_CONSUMER_GROUP => "get_consumer_group",
        c::GET_CONSUMER_GROUPS => "get_consumer_groups",
        c::CREATE_CONSUMER_GROUP => "create_consumer_group",
        c::DELETE_CONSUMER_GROUP => "delete_consumer_group",
        c::JOIN_CONSUMER_GROUP => "join_consumer_group",
        c::LEAVE_CONSUMER_GROUP => "leave_consumer_group",
        c::SYNC_CONSUMER_GROUP => "sync_consumer_group",
        _ => "unknown",
    }
}

/// A figure read off one shard's figures.
type Figure<'a> = &'a dyn Fn(&ShardFigures) -> u64;

fn counter(out: &mut String, name: &str, help: &str, kind: &str, samples: &[(String, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// The Prometheus text of every shard's figures.
pub fn render(shards: &[ShardFigures]) -> String {
    let mut out = String::new();
    let mut commands: BTreeMap<&'static str, CommandFigures> = BTreeMap::new();
    for figures in shards {
        for (name, command) in &figures.commands {
            let merged = commands.entry(name).or_default();
            merged.requests += command.requests;
            merged.errors += command.errors;
            merged.bytes_in += command.bytes_in;
            merged.bytes_out += command.bytes_out;
            merged.latency_us.add(&command.latency_us).expect("same bounds");
        }
    }
    let by_command = |value: &dyn Fn(&CommandFigures) -> u64| -> Vec<(String, u64)> {
        commands.iter().map(|(name, figures)| (format!("command=\"{name}\""), value(figures))).collect()
    };
    counter(
        &mut out,
        "vireo_requests_total",
        "Requests answered, by command.",
        "counter",
        &by_command(&|f| f.requests),
    );
    counter(
        &mut out,
        "vireo_request_errors_total",
        "Replies with a non-zero status, by command.",
        "counter",
        &by_command(&|f| f.errors),
    );
    let mut bytes = Vec::new();
    for (name, figures) in &commands {
        bytes.push((format!("command=\"{name}\",direction=\"in\""), figures.bytes_in));
        bytes.push((format!("command=\"{name}\",direction=\"out\""), figures.bytes_out));
    }
    counter(
        &mut out,
        "vireo_request_bytes_total",
        "Frame bytes of requests and their replies, by command.",
        "counter",
        &bytes,
    );
    let _ =
        writeln!(out, "# HELP vireo_request_latency_seconds Time from a request's arrival to its reply, by command.");
    let _ = writeln!(out, "# TYPE vireo_request_latency_seconds summary");
    for (name, figures) in &commands {
        for quantile in QUANTILES {
            let seconds = figures.latency_us.value_at_quantile(quantile) as f64 / 1e6;
            let _ =
                writeln!(out, "vireo_request_latency_seconds{{command=\"{name}\",quantile=\"{quantile}\"}} {seconds}");
        }
        let sum = figures.latency_us.mean() * figures.latency_us.len() as f64 / 1e6;
        let _ = writeln!(out, "vireo_request_latency_seconds_sum{{command=\"{name}\"}} {sum}");
        let _ = writeln!(out, "vireo_request_latency_seconds_count{{command=\"{name}\"}} {}", figures.latency_us.len());
    }
    let per_shard = |value: Figure| -> Vec<(String, u64)> {
        shards.iter().enumerate().map(|(shard, figures)| (format!("shard=\"{shard}\""), value(figures))).collect()
    };
    let gauges: [(&str, &str, Figure); 4] = [
        ("vireo_connections", "Client connections open.", &|f| f.connections),
        ("vireo_groups", "Replica groups hosted (partitions, and the metadata group on shard 0).", &|f| f.groups),
        ("vireo_segments", "Segments in the partition logs hosted.", &|f| f.segments),
        ("vireo_inbound_frames_bytes", "Bytes received from clients (all time).", &|f| f.net.bytes_in),
    ];
    for (name, help, value) in gauges {
        let kind = if name.ends_with("bytes") { "counter" } else { "gauge" };
        counter(&mut out, name, help, kind, &per_shard(value));
    }
    let counters: [(&str, &str, Figure); 15] = [
        ("vireo_connections_accepted_total", "Client connections accepted.", &|f| f.net.accepted),
        (
            "vireo_batches_lost_total",
            "Batches a single node's recovery found damaged in its segment logs and applied as lost.",
            &|f| f.batches_lost,
        ),
        ("vireo_commits_total", "Ops committed by the groups hosted.", &|f| f.commits),
        ("vireo_view_changes_total", "Views the groups hosted moved to.", &|f| f.view_changes),
        ("vireo_replica_failures_total", "Groups stopped by a failed write or sync.", &|f| f.replica_failures),
        ("vireo_resends_total", "Requests the node sent to a group again.", &|f| f.node.resends),
        ("vireo_polls_from_log_total", "Polls answered from the segment logs.", &|f| f.node.polls_from_log),
        ("vireo_frames_out_total", "Frames written to clients.", &|f| f.net.frames_out),
        ("vireo_frames_in_total", "Frames read from clients.", &|f| f.net.frames_in),
        ("vireo_outbound_bytes_total", "Bytes written to clients.", &|f| f.net.bytes_out),
        ("vireo_replica_frames_out_total", "Frames written to peers.", &|f| f.links.frames_out),
        ("vireo_replica_frames_in_total", "Frames read from peers.", &|f| f.links.frames_in),
        (
            "vireo_prepares_elided_total",
            "Prepares sent without their batches to the backup that forwarded the requests.",
            &|f| f.prepares_elided,
        ),
        ("vireo_prepares_rebuilt_total", "Elided prepares rebuilt from the frames forwarded.", &|f| f.prepares_rebuilt),
        (
            "vireo_prepares_elided_missed_total",
            "Elided prepares whose forwarded frames were gone or differed (asked for whole).",
            &|f| f.elided_missed,
        ),
    ];
    for (name, help, value) in counters {
        counter(&mut out, name, help, "counter", &per_shard(value));
    }
    let mut refusals = Vec::new();
    let reasons: [(&str, Figure); 14] = [
        ("connections_full", &|f| f.net.refused_full + f.node.connections_refused),
        ("frame_size", &|f| f.net.frames_oversized),
        ("malformed_frame", &|f| f.node.frames_malformed),
        ("slow_reader", &|f| f.net.slow_readers_cut),
        ("denied", &|f| f.node.denials),
        ("channel_full", &|f| f.node.channel_full),
        ("reply_unrouted", &|f| f.node.replies_unrouted),
        ("poll_reply_dropped", &|f| f.node.poll_replies_dropped),
        ("replica_frame_dropped", &|f| f.replica_frames_dropped + f.links.dropped_down + f.links.dropped_full),
        ("replica_link_auth", &|f| f.replica_auth_refused),
        ("replica_link_roster", &|f| f.replica_roster_refused),
        ("tls_handshake", &|f| f.net.tls_refused + f.http_tls_refused),
        ("disk", &|f| f.node.writes_refused_disk),
        ("file_descriptors", &|f| f.descriptors_refused),
    ];
    for (reason, value) in reasons {
        let total: u64 = shards.iter().map(value).sum();
        refusals.push((format!("reason=\"{reason}\""), total));
    }
    counter(&mut out, "vireo_refusals_total", "What the server refused or dropped, by reason.", "counter", &refusals);
    if let Some(first) = shards.first() {
        counter(
            &mut out,
            "vireo_metadata_view",
            "The metadata group's view.",
            "gauge",
            &[(String::new(), first.metadata_view)],
        );
        counter(
            &mut out,
            "vireo_metadata_commit",
            "The metadata group's commit.",
            "gauge",
            &[(String::new(), first.metadata_commit)],
        );
        counter(
            &mut out,
            "vireo_replica_peers_linked",
            "Peers this node's replica links reach now.",
            "gauge",
            &[(String::new(), first.peers_linked)],
        );
        let disk = first.disk;
        let mut gauges = vec![
            (
                "vireo_disk_reserve_bytes",
                "The free-space reserve (system.min_free_bytes, at most 1/20 of the disk).",
                disk.reserve,
            ),
            (
                "vireo_disk_below_reserve",
                "1 while free space is below the reserve: sends and creates are refused.",
                disk.below_reserve as u64,
            ),
            (
                "vireo_disk_failed",
                "1 once a write or sync failed: writes are refused until a restart on a good disk.",
                shards.iter().any(|f| f.disk.failed) as u64,
            ),
        ];
        if let Some((free, total)) = disk.space {
            gauges.push(("vireo_disk_free_bytes", "Free bytes of the data directory's file system.", free));
            gauges.push(("vireo_disk_total_bytes", "Size of the data directory's file system.", total));
        }
        for (name, help, value) in gauges {
            counter(&mut out, name, help, "gauge", &[(String::new(), value)]);
        }
        if let Some((streams, topics, partitions, users)) = first.catalog {
            counter(&mut out, "vireo_streams", "Streams.", "gauge", &[(String::new(), streams)]);
            counter(&mut out, "vireo_topics", "Topics.", "gauge", &[(String::new(), topics)]);
            counter(&mut out, "vireo_partitions", "Partitions.", "gauge", &[(String::new(), partitions)]);
            counter(&mut out, "vireo_users", "Users.", "gauge", &[(String::new(), users)]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_merge_into_one_text_with_every_family() {
        let mut first = ShardFigures::default();
        let send = first.commands.entry("send_messages").or_default();
        send.requests = 3;
        send.bytes_in = 3000;
        for latency in [100, 200, 300] {
            send.latency_us.record(latency).unwrap();
        }
        first.net.frames_oversized = 2;
        first.catalog = Some((1, 2, 3, 1));
        let mut second = ShardFigures::default();
        second.commands.entry("send_messages").or_default().requests = 2;
        second.node.frames_malformed = 5;
        let text = render(&[first, second]);
        assert!(text.contains("vireo_requests_total{command=\"send_messages\"} 5"), "{text}");
        assert!(text.contains("vireo_refusals_total{reason=\"frame_size\"} 2"));
        assert!(text.contains("vireo_refusals_total{reason=\"malformed_frame\"} 5"));
        assert!(text.contains("vireo_request_latency_seconds_count{command=\"send_messages\"} 3"));
        assert!(text.contains("vireo_topics 2"));
        assert!(text.lines().all(|line| line.starts_with('#') || line.split_whitespace().count() == 2), "{text}");
    }

    #[test]
    fn requests_are_named_by_code_or_operation() {
        assert_eq!(command_name(101, 160), "send_messages");
        assert_eq!(command_name(0, 160), "send_messages");
        assert_eq!(command_name(0, 128), "create_stream");
        assert_eq!(command_name(100, 2), "poll_messages");
        assert_eq!(command_name(9999, 2), "unknown");
    }
}
