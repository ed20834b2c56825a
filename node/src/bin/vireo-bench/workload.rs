//! The workloads: what each kind sets up on the server (the reference bench's names:
//! `bench-stream-N`, `topic-1`, consumer groups `cg-N`), how the run's budget is split among the
//! actors, and each actor's loop, one request in flight per connection.

use std::rc::Rc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use vireo_protocol::wire::{
    ClientRequest, Consumer, ConsumerKind, Identifier, Name, OptionValue, Options, Partitioning, PollMessages,
    PollingKind, PollingStrategy, SendMessages,
};
use vireo_storage::batch::BatchBuilder;

use crate::args::{Cli, Kind, MESSAGE_BATCHES_DEFAULT};
use crate::client::{ClientError, Connection, PollFrame, RESYNC_PARTITION};
use crate::report::{ActorRecord, Role};

pub const TOPIC: &str = "topic-1";
/// The reference server's status for "this stream does not exist" (and Vireo's).
const STATUS_STREAM_NOT_FOUND: u32 = 1009;

pub fn stream_name(index: u32) -> String {
    format!("bench-stream-{index}")
}

fn named(name: &str) -> Identifier {
    Identifier::Name(Name::new(name).expect("bench names are valid"))
}

/// What a share of the run's budget counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    PayloadBytes,
    Batches,
}

/// A budget an actor spends, its own or shared with others: it stops once the budget is used up
/// (so it may overshoot by its last batch, as the reference bench's actors do).
#[derive(Clone, Debug)]
pub struct Share {
    remaining: Arc<AtomicI64>,
    unit: Unit,
}

impl Share {
    pub fn new(unit: Unit, amount: u64) -> Share {
        Share { remaining: Arc::new(AtomicI64::new(amount.min(i64::MAX as u64) as i64)), unit }
    }

    pub fn done(&self) -> bool {
        self.remaining.load(Ordering::Relaxed) <= 0
    }

    pub fn spend(&self, payload_bytes: u64, batches: u64) {
        let amount = match self.unit {
            Unit::PayloadBytes => payload_bytes,
            Unit::Batches => batches,
        };
        self.remaining.fetch_sub(amount.min(i64::MAX as u64) as i64, Ordering::Relaxed);
    }
}

/// One actor's part of the run.
#[derive(Clone, Debug)]
pub struct ActorPlan {
    pub role: Role,
    pub id: u32,
    pub stream: String,
    /// Partitions of its topic: 1 sends to partition 0, more are sent to balanced.
    pub partitions: u32,
    /// The consumer group it polls as, when it is in one.
    pub group: Option<String>,
    pub sends: Option<Share>,
    pub polls: Option<Share>,
}

/// What the server must hold before the actors start.
#[derive(Clone, Debug)]
pub enum Setup {
    /// (Re)create these streams, each with `topic-1` of `partitions` partitions.
    Streams { streams: u32, partitions: u32 },
    /// The streams must exist already (a consumer reads what a producer run left).
    Existing { streams: u32 },
    /// As `Existing`, and consumer group `cg-N` on `topic-1` of stream N for N in 1..=groups.
    Groups { streams: u32, groups: u32 },
}

#[derive(Debug)]
pub struct Plan {
    pub setup: Setup,
    pub actors: Vec<ActorPlan>,
    /// The payload bytes the run moves when it completes (for the progress line).
    pub expected_bytes: u64,
}

/// The stream of actor `index` (1-based) among `streams`.
fn stream_of(index: u32, streams: u32) -> String {
    stream_name((index - 1) % streams + 1)
}

pub fn plan(cli: &Cli) -> Result<Plan, String> {
    let batch_bytes = cli.message_size as u64 * cli.messages_per_batch as u64;
    let batches = cli.message_batches.unwrap_or(MESSAGE_BATCHES_DEFAULT);
    // Each actor's own budget, and a budget all of them share.
    let own = |actors: u32| match cli.total_data {
        Some(total) => Share::new(Unit::PayloadBytes, total / actors as u64),
        None => Share::new(Unit::Batches, batches),
    };
    let shared = |actors: u32| match cli.total_data {
        Some(total) => Share::new(Unit::PayloadBytes, total),
        None => Share::new(Unit::Batches, batches * actors as u64),
    };
    let expected = |actors: u32| cli.total_data.unwrap_or(batches * batch_bytes * actors as u64);
    let check_total = |actors: u32, shares: u64| match cli.total_data {
        Some(total) if total / (actors as u64 * shares) < cli.message_size as u64 => Err(format!(
            "-T {total} bytes leaves each of the {actors} actor(s) less than one {}-byte message",
            cli.message_size
        )),
        _ => Ok(()),
    };
    let actor = |role, id, stream: String, partitions, sends: Option<Share>, polls: Option<Share>| ActorPlan {
        role,
        id,
        stream,
        partitions,
        group: None,
        sends,
        polls,
    };
    match &cli.kind {
        Kind::PinnedProducer(kind) => {
            let producers = kind.producers;
            let streams = kind.streams.unwrap_or(producers);
            if streams != producers {
                return Err(format!("pinned-producer: -s {streams} streams must equal -p {producers} producers"));
            }
            check_total(producers, 1)?;
            let actors = (1..=producers)
                .map(|id| actor(Role::Producer, id, stream_name(id), 1, Some(own(producers)), None))
                .collect();
            Ok(Plan { setup: Setup::Streams { streams, partitions: 1 }, actors, expected_bytes: expected(producers) })
        }
        Kind::PinnedConsumer(kind) => {
            let consumers = kind.consumers;
            let streams = kind.streams.unwrap_or(consumers);
            if streams == 0 || streams > consumers {
                return Err(format!("pinned-consumer: -s {streams} streams must be 1 to -c {consumers} consumers"));
            }
            check_total(consumers, 1)?;
            let actors = (1..=consumers)
                .map(|id| actor(Role::Consumer, id, stream_of(id, streams), 1, None, Some(own(consumers))))
                .collect();
            Ok(Plan { setup: Setup::Existing { streams }, actors, expected_bytes: expected(consumers) })
        }
        Kind::BalancedProducer(kind) => {
            check_total(kind.producers, 1)?;
            let share = shared(kind.producers);
            let actors = (1..=kind.producers)
                .map(|id| {
                    actor(Role::Producer, id, stream_of(id, kind.streams), kind.partitions, Some(share.clone()), None)
                })
                .collect();
            let setup = Setup::Streams { streams: kind.streams, partitions: kind.partitions };
            Ok(Plan {
                setup,
                actors,
                expected_bytes: cli.total_data.unwrap_or(batches * batch_bytes * kind.producers as u64),
            })
        }
        Kind::BalancedConsumerGroup(kind) => {
            if kind.consumer_groups > kind.streams {
                return Err(format!(
                    "balanced-consumer-group: -g {} groups must be at most -s {} streams",
                    kind.consumer_groups, kind.streams
                ));
            }
            check_total(kind.consumers, 1)?;
            let share = shared(kind.consumers);
            let actors = (1..=kind.consumers)
                .map(|id| {
                    let group = (id - 1) % kind.consumer_groups + 1;
                    let mut plan = actor(Role::Consumer, id, stream_name(group), 1, None, Some(share.clone()));
                    plan.group = Some(format!("cg-{group}"));
                    plan
                })
                .collect();
            let setup = Setup::Groups { streams: kind.streams, groups: kind.consumer_groups };
            Ok(Plan {
                setup,
                actors,
                expected_bytes: cli.total_data.unwrap_or(batches * batch_bytes * kind.consumers as u64),
            })
        }
        Kind::EndToEndProducingConsumer(kind) => {
            let actors = kind.producing_consumers;
            if kind.streams > actors {
                return Err(format!(
                    "end-to-end-producing-consumer: -s {} streams must be at most -p {actors} producing consumers",
                    kind.streams
                ));
            }
            check_total(actors, 2)?;
            // Sends and polls each take half of an actor's share, as in the reference bench.
            let half = |actors: u32| match cli.total_data {
                Some(total) => Share::new(Unit::PayloadBytes, total / (2 * actors as u64)),
                None => Share::new(Unit::Batches, batches),
            };
            let plans = (1..=actors)
                .map(|id| {
                    actor(
                        Role::ProducingConsumer,
                        id,
                        stream_of(id, kind.streams),
                        1,
                        Some(half(actors)),
                        Some(half(actors)),
                    )
                })
                .collect();
            let expected_bytes = cli.total_data.unwrap_or(2 * batches * batch_bytes * actors as u64);
            Ok(Plan { setup: Setup::Streams { streams: kind.streams, partitions: 1 }, actors: plans, expected_bytes })
        }
    }
}

/// Runs the setup on one connection.
pub async fn set_up(cli: &Cli, address: &str, nodelay: bool, setup: &Setup) -> Result<(), String> {
    let fail = |what: String| move |error: ClientError| format!("setup: {what}: {error}");
    let mut connection = Connection::connect(address, nodelay, client_id(0)).await.map_err(fail("connect".into()))?;
    connection.login(&cli.username, &cli.password).await.map_err(fail("login".into()))?;
    match setup {
        Setup::Streams { streams, partitions } => {
            for index in 1..=*streams {
                let name = stream_name(index);
                let found = stream_exists(&mut connection, &name).await?;
                if found && cli.reuse_streams {
                    continue;
                }
                if found {
                    connection
                        .metadata(ClientRequest::DeleteStream { stream: named(&name) }, "delete_stream")
                        .await
                        .map_err(fail(format!("delete {name}")))?;
                }
                let create =
                    ClientRequest::CreateStream { name: Name::new(&name).expect("valid"), options: Options::empty() };
                connection.metadata(create, "create_stream").await.map_err(fail(format!("create {name}")))?;
                let options = if cli.enforce_fsync {
                    Options::new(vec![("enforce_fsync".to_string(), OptionValue::Bool(true))]).expect("valid options")
                } else {
                    Options::empty()
                };
                let topic = ClientRequest::CreateTopic {
                    stream: named(&name),
                    partitions_count: *partitions,
                    name: Name::new(TOPIC).expect("valid"),
                    options,
                };
                connection.metadata(topic, "create_topic").await.map_err(fail(format!("create {name}/{TOPIC}")))?;
            }
        }
        Setup::Existing { streams } | Setup::Groups { streams, .. } => {
            for index in 1..=*streams {
                let name = stream_name(index);
                if !stream_exists(&mut connection, &name).await? {
                    return Err(format!("setup: stream {name} does not exist: run a producer kind first"));
                }
            }
        }
    }
    if let Setup::Groups { groups, .. } = setup {
        for index in 1..=*groups {
            let (stream, group) = (stream_name(index), format!("cg-{index}"));
            // A group left by an earlier run starts over: its offsets are deleted with it.
            let delete = ClientRequest::DeleteConsumerGroup {
                stream: named(&stream),
                topic: named(TOPIC),
                group: named(&group),
            };
            let _ = connection.metadata(delete, "delete_consumer_group").await;
            let create = ClientRequest::CreateConsumerGroup {
                stream: named(&stream),
                topic: named(TOPIC),
                name: Name::new(&group).expect("valid"),
            };
            connection.metadata(create, "create_consumer_group").await.map_err(fail(format!("create {group}")))?;
        }
    }
    Ok(())
}

async fn stream_exists(connection: &mut Connection, name: &str) -> Result<bool, String> {
    match connection.read(ClientRequest::GetStream { stream: named(name) }, "get_stream").await {
        Ok(body) => Ok(!body.is_empty()),
        Err(error) if error.status() == Some(STATUS_STREAM_NOT_FOUND) => Ok(false),
        Err(error) => Err(format!("setup: get_stream {name}: {error}")),
    }
}

fn poll_request(
    plan: &ActorPlan,
    cli: &Cli,
    consumer: Consumer,
    kind: PollingKind,
    partition_id: Option<u32>,
    auto_commit: bool,
) -> PollMessages {
    PollMessages {
        consumer,
        stream: named(&plan.stream),
        topic: named(TOPIC),
        partition_id,
        strategy: PollingStrategy { kind, value: 0 },
        count: cli.messages_per_batch,
        auto_commit,
    }
}

/// How an actor polls: one frame at its own partition 0 by offset, or, in a consumer group, the
/// partitions the group assigns it, in turn, by the group's next offset (as the reference SDK).
enum Poller {
    Pinned(PollFrame),
    Group { template: PollMessages, frames: Vec<PollFrame>, cursor: usize },
}

impl Poller {
    fn next_frame(&mut self) -> Option<&mut PollFrame> {
        match self {
            Poller::Pinned(frame) => Some(frame),
            Poller::Group { frames, cursor, .. } => {
                if frames.is_empty() {
                    return None;
                }
                *cursor = (*cursor + 1) % frames.len();
                Some(&mut frames[*cursor])
            }
        }
    }

    /// Fetches the member's assignment and builds a frame per assigned partition.
    async fn sync(&mut self, connection: &mut Connection) -> Result<(), ClientError> {
        let Poller::Group { template, frames, cursor } = self else { return Ok(()) };
        let assignment = connection
            .assignment(template.stream.clone(), template.topic.clone(), template.consumer.id.clone())
            .await?
            .ok_or_else(|| ClientError::Protocol("not a member of the consumer group it joined".to_string()))?;
        *frames = assignment
            .into_iter()
            .map(|partition| connection.poll_frame(PollMessages { partition_id: Some(partition), ..template.clone() }))
            .collect();
        *cursor = 0;
        Ok(())
    }
}

/// The numeric id of consumer group `group` on `topic-1` of `stream`.
async fn group_id(connection: &mut Connection, stream: &str, group: &str) -> Result<u32, ClientError> {
    let get = ClientRequest::GetConsumerGroup { stream: named(stream), topic: named(TOPIC), group: named(group) };
    let body = connection.read(get, "get_consumer_group").await?;
    let id = body.get(..4).ok_or_else(|| ClientError::Protocol(format!("consumer group {group} not found")))?;
    Ok(u32::from_le_bytes(id.try_into().expect("4 bytes")))
}

/// A fresh, non-zero client id for a connection.
pub fn client_id(actor: u32) -> u128 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos());
    let mixed = (nanos ^ ((actor as u128) << 96)).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
    mixed | 1
}

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_micros() as u64)
}

/// What every actor of a run shares with the others and with the progress line.
pub struct RunShared {
    pub start: Instant,
    /// Payload bytes moved so far, all actors together.
    pub progress: AtomicU64,
    /// Actors connected and logged in; the measured loops start once all are.
    pub ready: AtomicUsize,
    pub actors: usize,
}

/// The payload every message of an actor's batches carries: printable bytes, different per
/// actor (a cheap generator; the bench's randomness needs no seed of record).
fn payload(size: u32, actor: u32) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64 ^ actor as u64;
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            b'a' + (state % 26) as u8
        })
        .collect()
}

/// Runs one actor: connect, log in, wait for the others, then its loop.
pub async fn run_actor(
    cli: Arc<Cli>,
    address: Rc<String>,
    nodelay: bool,
    plan: ActorPlan,
    shared: Arc<RunShared>,
) -> Result<ActorRecord, String> {
    let label = format!("{} {}", plan.role.name(), plan.id);
    let fail = |error: ClientError| format!("{label}: {error}");
    let mut connection = Connection::connect(&address, nodelay, client_id(plan.id)).await.map_err(fail)?;
    connection.login(&cli.username, &cli.password).await.map_err(fail)?;
    if let Some(group) = &plan.group {
        let join =
            ClientRequest::JoinConsumerGroup { stream: named(&plan.stream), topic: named(TOPIC), group: named(group) };
        connection.metadata(join, "join_consumer_group").await.map_err(fail)?;
    }
    // The reference joins a group by name but polls as one only by its numeric id.
    let group_id = match &plan.group {
        Some(group) => Some(group_id(&mut connection, &plan.stream, group).await.map_err(fail)?),
        None => None,
    };
    let mut send_frame = plan.sends.as_ref().map(|_| {
        let payload = payload(cli.message_size, plan.id);
        let mut builder =
            BatchBuilder::with_capacity(256 + cli.messages_per_batch as usize * (48 + cli.message_size as usize));
        for index in 0..cli.messages_per_batch {
            builder.push(index as u128 + 1, &payload, &[]);
        }
        let partitioning = if plan.partitions > 1 { Partitioning::Balanced } else { Partitioning::PartitionId(0) };
        let send = SendMessages::new(named(&plan.stream), named(TOPIC), partitioning, builder.finish(now_micros()))
            .expect("a whole batch");
        connection.send_frame(send)
    });
    let mut poller = match &plan.polls {
        None => None,
        Some(_) => Some(match group_id {
            Some(group_id) => {
                let consumer = Consumer { kind: ConsumerKind::ConsumerGroup, id: Identifier::Numeric(group_id) };
                let template = poll_request(&plan, &cli, consumer, PollingKind::Next, None, true);
                let mut poller = Poller::Group { template, frames: Vec::new(), cursor: 0 };
                poller.sync(&mut connection).await.map_err(fail)?;
                poller
            }
            None => {
                let consumer = Consumer { kind: ConsumerKind::Consumer, id: Identifier::Numeric(plan.id) };
                let request = poll_request(&plan, &cli, consumer, PollingKind::Offset, Some(0), false);
                Poller::Pinned(connection.poll_frame(request))
            }
        }),
    };
    shared.ready.fetch_add(1, Ordering::SeqCst);
    while shared.ready.load(Ordering::SeqCst) < shared.actors {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    let batch_bytes = cli.message_size as u64 * cli.messages_per_batch as u64;
    let mut record = ActorRecord::new(plan.role, plan.id);
    record.started_ns = shared.start.elapsed().as_nanos() as u64;
    let mut offset = 0u64;
    let mut awaiting_own_batch = false;
    loop {
        let sends_done = plan.sends.as_ref().is_none_or(Share::done);
        let polls_done = plan.polls.as_ref().is_none_or(Share::done);
        if sends_done && polls_done {
            break;
        }
        if let (Some(frame), Some(sends)) = (send_frame.as_mut(), plan.sends.as_ref()) {
            if !sends_done && !awaiting_own_batch {
                let sent_at = Instant::now();
                connection.send(frame, now_micros()).await.map_err(fail)?;
                sends.spend(batch_bytes, 1);
                record.payload_bytes += batch_bytes;
                record.messages += cli.messages_per_batch as u64;
                shared.progress.fetch_add(batch_bytes, Ordering::Relaxed);
                if plan.role == Role::Producer {
                    record.batches += 1;
                    record.record_latency(sent_at.elapsed().as_micros() as u64);
                    continue;
                }
                awaiting_own_batch = true;
            }
        }
        let (Some(poller), Some(polls)) = (poller.as_mut(), plan.polls.as_ref()) else { continue };
        if polls_done {
            awaiting_own_batch = false;
            continue;
        }
        let polled_at = Instant::now();
        let Some(frame) = poller.next_frame() else {
            // A member holding no partitions (more members than partitions): ask again later.
            glommio::timer::sleep(Duration::from_millis(1)).await;
            poller.sync(&mut connection).await.map_err(fail)?;
            continue;
        };
        let polled = connection.poll(frame, offset).await.map_err(fail)?;
        if polled.messages == 0 && polled.partition_id == RESYNC_PARTITION {
            poller.sync(&mut connection).await.map_err(fail)?;
            continue;
        }
        if polled.messages == 0 {
            // Nothing (yet): ask again at once, as the reference bench does; the run's stall
            // timeout ends a wait that never ends.
            glommio::yield_if_needed().await;
            continue;
        }
        let latency = match plan.role {
            Role::ProducingConsumer => now_micros().saturating_sub(polled.first_origin_timestamp),
            _ => polled_at.elapsed().as_micros() as u64,
        };
        offset = polled.first_offset.unwrap_or(offset) + polled.messages;
        record.record_latency(latency);
        record.batches += 1;
        record.payload_bytes += polled.payload_bytes;
        record.messages += polled.messages;
        polls.spend(polled.payload_bytes, 1);
        shared.progress.fetch_add(polled.payload_bytes, Ordering::Relaxed);
        awaiting_own_batch = false;
    }
    record.finished_ns = shared.start.elapsed().as_nanos() as u64;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan_of(line: &str) -> Result<Plan, String> {
        plan(&Cli::try_parse_from(line.split(' ')).expect("parses"))
    }

    #[test]
    fn budgets_are_split_as_the_reference_bench_splits_them() {
        let pinned = plan_of("vireo-bench -m 1000 -P 250 -T 1GB pinned-producer -s 2 -p 2").expect("a plan");
        assert_eq!(pinned.actors.len(), 2);
        assert_eq!(pinned.actors[1].stream, "bench-stream-2");
        let share = pinned.actors[0].sends.clone().expect("sends");
        share.spend(499_999_000, 1);
        assert!(!share.done());
        share.spend(1000, 1);
        assert!(share.done(), "each producer moves half of 1 GB");
        let balanced = plan_of("vireo-bench -T 1GB balanced-producer -p 4 -a 8").expect("a plan");
        let (first, last) = (balanced.actors[0].sends.clone().unwrap(), balanced.actors[3].sends.clone().unwrap());
        first.spend(1_000_000_000, 1);
        assert!(last.done(), "balanced producers share one budget");
        assert_eq!(balanced.actors[3].partitions, 8);
        let e2e = plan_of("vireo-bench -T 500MB e2e -s 2 -p 2").expect("a plan");
        let sends = e2e.actors[0].sends.clone().unwrap();
        sends.spend(125_000_000, 1);
        assert!(sends.done() && !e2e.actors[0].polls.clone().unwrap().done());
        let batches = plan_of("vireo-bench -b 3 pinned-consumer -c 4 -s 2").expect("a plan");
        assert_eq!(batches.actors[2].stream, "bench-stream-1");
        let polls = batches.actors[0].polls.clone().unwrap();
        polls.spend(10, 2);
        assert!(!polls.done());
        polls.spend(10, 1);
        assert!(polls.done());
    }

    #[test]
    fn impossible_plans_are_refused_with_the_reason() {
        assert!(plan_of("vireo-bench pinned-producer -s 3 -p 2").unwrap_err().contains("must equal"));
        assert!(plan_of("vireo-bench pinned-consumer -s 3 -c 2").unwrap_err().contains("1 to -c 2"));
        assert!(plan_of("vireo-bench bcg -s 1 -g 2").unwrap_err().contains("at most"));
        assert!(plan_of("vireo-bench -m 1000 -T 1KB pinned-producer -p 2").unwrap_err().contains("less than one"));
    }
}
