//! The command line: the reference bench's shape (`iggy-bench`, `../shared/reference/
//! iggy-server-config.md`), `vireo-bench [global flags] <kind> [kind flags] [tcp [--server-address
//! A] [--nodelay]]`, with its flags, defaults and checks, so one command line drives either bench.

use clap::{Args, Parser, Subcommand};

/// The reference bench's default when neither `-b` nor `-T` is given.
pub const MESSAGE_BATCHES_DEFAULT: u64 = 1000;
pub const SERVER_ADDRESS_DEFAULT: &str = "127.0.0.1:8090";

#[derive(Parser, Debug)]
#[command(
    name = "vireo-bench",
    version,
    about = "Drives any server that speaks the Iggy 0.9 TCP protocol (vireo-server, iggy-server) with the reference bench's workloads and prints throughput and latency per actor and in total.",
    after_help = "Examples:\n  vireo-bench -m 1000 -P 250 -T 1GB pinned-producer -s 2 -p 2 tcp\n  vireo-bench -m 1000 -P 250 -T 1GB pinned-consumer -s 2 -c 2 tcp --server-address 127.0.0.1:8090\n  vireo-bench -m 1000 -P 250 -T 500MB --json end-to-end-producing-consumer -s 2 -p 2\n\nThroughput counts payload bytes only (MB = 10^6 bytes). An actor's MB/s is its bytes over its own run time; the total is the sum over actors (as the reference bench reports it), and the wall-clock figure is printed beside it. Latency is the time from writing a request to reading its whole reply (for the end-to-end kind: from a batch's origin timestamp to the poll that returned it), in an HDR histogram of microseconds; the total's percentiles are over every sample of every actor."
)]
pub struct Cli {
    /// Payload bytes of each message.
    #[arg(short = 'm', long = "message-size", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=16_000_000))]
    pub message_size: u32,

    /// Messages in each batch: one send_messages request, or the count one poll asks for.
    #[arg(short = 'P', long = "messages-per-batch", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub messages_per_batch: u32,

    /// Batches each actor sends or polls [default: 1000 when -T is not given either].
    #[arg(short = 'b', long = "message-batches", conflicts_with = "total_data", value_parser = clap::value_parser!(u64).range(1..))]
    pub message_batches: Option<u64>,

    /// Payload bytes the whole run moves, all actors together: decimal units (1GB = 10^9 bytes,
    /// 500MB, 100KB), binary with an i (1GiB = 2^30), or a bare number of bytes.
    #[arg(short = 'T', long = "total-data", value_parser = parse_byte_size)]
    pub total_data: Option<u64>,

    /// Create the bench topics with enforce_fsync: a send is acknowledged once it is synced.
    #[arg(long = "enforce-fsync")]
    pub enforce_fsync: bool,

    /// Keep existing bench streams and topics (producers append to them) instead of deleting
    /// and creating them afresh.
    #[arg(long = "reuse-streams")]
    pub reuse_streams: bool,

    /// The user every actor logs in as.
    #[arg(short = 'u', long, default_value = "iggy")]
    pub username: String,

    /// That user's password.
    #[arg(long, default_value = "iggy")]
    pub password: String,

    /// The server's client address (accepted before or after the kind and `tcp`).
    #[arg(long = "server-address", global = true, default_value = SERVER_ADDRESS_DEFAULT)]
    pub server_address: String,

    /// Set TCP_NODELAY on the bench's connections (off by default, as in the reference bench).
    #[arg(long, global = true)]
    pub nodelay: bool,

    /// Print the report as one JSON document on stdout instead of the table.
    #[arg(long, global = true)]
    pub json: bool,

    /// Client threads (one glommio executor each; actors are spread over them round-robin)
    /// [default: the machine's cores, at most one per actor].
    #[arg(long, global = true, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,

    /// Give up when no actor made progress for this many seconds (a consumer polling a stream
    /// that holds less than its share, a server that stopped answering).
    #[arg(long = "stall-timeout", global = true, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub stall_timeout: u64,

    #[command(subcommand)]
    pub kind: Kind,
}

#[derive(Subcommand, Debug)]
pub enum Kind {
    /// Each producer sends to its own stream (bench-stream-N, topic-1, one partition).
    #[command(visible_alias = "pp")]
    PinnedProducer(PinnedProducer),
    /// Each consumer polls its own stream from offset 0 (what a pinned-producer run left).
    #[command(visible_alias = "pc")]
    PinnedConsumer(PinnedConsumer),
    /// Producers send to one topic of many partitions, balanced, sharing one budget.
    #[command(visible_alias = "bp")]
    BalancedProducer(BalancedProducer),
    /// Consumers in consumer groups (cg-N on bench-stream-N) poll with the group's next offset,
    /// committing as they go, sharing one budget.
    #[command(visible_alias = "bcg")]
    BalancedConsumerGroup(BalancedConsumerGroup),
    /// Each actor sends a batch to its stream, then polls until it reads it back; latency is
    /// from the batch's origin timestamp to the poll that returned it.
    #[command(visible_alias = "e2e")]
    EndToEndProducingConsumer(EndToEndProducingConsumer),
}

#[derive(Args, Debug)]
pub struct PinnedProducer {
    /// Streams [default: one per producer; must equal the producers].
    #[arg(short = 's', long)]
    pub streams: Option<u32>,
    /// Producers, one connection each.
    #[arg(short = 'p', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub producers: u32,
    #[command(subcommand)]
    pub transport: Option<Transport>,
}

#[derive(Args, Debug)]
pub struct PinnedConsumer {
    /// Streams [default: one per consumer; at most the consumers].
    #[arg(short = 's', long)]
    pub streams: Option<u32>,
    /// Consumers, one connection each.
    #[arg(short = 'c', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub consumers: u32,
    #[command(subcommand)]
    pub transport: Option<Transport>,
}

#[derive(Args, Debug)]
pub struct BalancedProducer {
    /// Streams (each with one topic of -a partitions); producer N sends to stream N mod s.
    #[arg(short = 's', long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub streams: u32,
    /// Partitions of each topic.
    #[arg(short = 'a', long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub partitions: u32,
    /// Producers, one connection each.
    #[arg(short = 'p', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub producers: u32,
    #[command(subcommand)]
    pub transport: Option<Transport>,
}

#[derive(Args, Debug)]
pub struct BalancedConsumerGroup {
    /// Streams the groups are on (they must exist: run a producer kind first).
    #[arg(short = 's', long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub streams: u32,
    /// Consumers, one connection each; consumer N joins group N mod g.
    #[arg(short = 'c', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub consumers: u32,
    /// Consumer groups, cg-1.. on bench-stream-1.. (at most the streams).
    #[arg(short = 'g', long = "consumer-groups", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub consumer_groups: u32,
    #[command(subcommand)]
    pub transport: Option<Transport>,
}

#[derive(Args, Debug)]
pub struct EndToEndProducingConsumer {
    /// Streams [at most the producing consumers]; actor N uses stream N mod s.
    #[arg(short = 's', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub streams: u32,
    /// Producing consumers, one connection each.
    #[arg(short = 'p', long = "producing-consumers", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub producing_consumers: u32,
    #[command(subcommand)]
    pub transport: Option<Transport>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Transport {
    /// TCP, the only transport of this bench.
    Tcp(Tcp),
}

#[derive(Args, Debug, Clone)]
pub struct Tcp {}

/// "1GB", "500MB", "1GiB", "4096": decimal units are powers of 10, units with an i powers of 2
/// (the reference bench's parser, case-sensitive: a lowercase b would be bits and is refused).
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim();
    let multiplier: u64 = match unit {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(format!("`{text}`: the unit must be one of B, KB, MB, GB, TB, KiB, MiB, GiB, TiB")),
    };
    let value: f64 = number.parse().map_err(|_| format!("`{text}`: not a number of bytes"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("`{text}`: out of range"));
    }
    Ok(bytes as u64)
}

impl Kind {
    pub fn name(&self) -> &'static str {
        match self {
            Kind::PinnedProducer(_) => "pinned-producer",
            Kind::PinnedConsumer(_) => "pinned-consumer",
            Kind::BalancedProducer(_) => "balanced-producer",
            Kind::BalancedConsumerGroup(_) => "balanced-consumer-group",
            Kind::EndToEndProducingConsumer(_) => "end-to-end-producing-consumer",
        }
    }
}

impl Cli {
    /// The address and TCP options the connections use.
    pub fn tcp(&self) -> (String, bool) {
        (self.server_address.clone(), self.nodelay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse_as_the_reference_bench_reads_them() {
        assert_eq!(parse_byte_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_byte_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_byte_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert_eq!(parse_byte_size("1.5KB"), Ok(1500));
        assert!(parse_byte_size("1Gb").is_err());
        assert!(parse_byte_size("GB").is_err());
        assert!(parse_byte_size("0").is_err());
    }

    #[test]
    fn the_reference_command_lines_parse() {
        let cli = Cli::try_parse_from(
            "vireo-bench -m 1000 -P 250 -T 1GB pinned-producer -s 2 -p 2 tcp --server-address 127.0.0.1:9".split(' '),
        )
        .expect("parses");
        assert_eq!((cli.message_size, cli.messages_per_batch, cli.total_data), (1000, 250, Some(1_000_000_000)));
        assert_eq!(cli.tcp(), ("127.0.0.1:9".to_string(), false));
        let Kind::PinnedProducer(kind) = &cli.kind else { panic!("{:?}", cli.kind) };
        assert_eq!((kind.streams, kind.producers), (Some(2), 2));
        let cli = Cli::try_parse_from("vireo-bench -T 500MB --enforce-fsync e2e -s 2 -p 2".split(' ')).expect("parses");
        assert!(cli.enforce_fsync);
        assert_eq!(cli.tcp(), (SERVER_ADDRESS_DEFAULT.to_string(), false));
        assert!(Cli::try_parse_from("vireo-bench -b 10 -T 1GB pinned-producer".split(' ')).is_err());
        assert!(Cli::try_parse_from("vireo-bench -m 0 pinned-producer".split(' ')).is_err());
    }
}
