//! A vireo-server killed with SIGKILL in the middle of sends, and restarted on the same data
//! directory, keeps every message it acknowledged, in order and once, on topics with and without
//! `enforce_fsync` (the Iggy SDK is the client); a SIGTERM shuts it down gracefully (exit 0) and
//! a restart finds everything.

mod server_process;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iggy::prelude::*;
use server_process::{data_dir, root_client, sdk_client, Server};

const PARTITIONS: u32 = 2;
const PRODUCERS_PER_TOPIC: u32 = 2;
const MESSAGES_PER_BATCH: u32 = 10;
const SENDING_FOR: Duration = Duration::from_millis(1500);

/// A message's payload, `producer:sequence`.
fn producer_sequence(message: &IggyMessage) -> (u32, u64) {
    let text = String::from_utf8(message.payload.to_vec()).unwrap();
    let (producer, sequence) = text.split_once(':').unwrap();
    (producer.parse().unwrap(), sequence.parse().unwrap())
}

fn id(name: &str) -> Identifier {
    Identifier::named(name).unwrap()
}

fn topic_name(fsync: bool) -> &'static str {
    if fsync {
        "fsync"
    } else {
        "written"
    }
}

/// Sends batches until `stop`; returns the sequence numbers acknowledged, per partition.
async fn produce(address: SocketAddr, fsync: bool, producer: u32, stop: Arc<AtomicBool>) -> (u32, Vec<u64>) {
    let client = root_client(address).await;
    let partition = producer % PARTITIONS;
    let mut acknowledged = Vec::new();
    let mut batch_number = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let first = batch_number * MESSAGES_PER_BATCH as u64;
        let mut batch: Vec<IggyMessage> = (0..MESSAGES_PER_BATCH as u64)
            .map(|index| IggyMessage::from_str(&format!("{producer}:{}", first + index)).unwrap())
            .collect();
        let sent = tokio::time::timeout(
            Duration::from_secs(5),
            client.send_messages(
                &id("durable"),
                &id(topic_name(fsync)),
                &Partitioning::partition_id(partition),
                &mut batch,
            ),
        )
        .await;
        match sent {
            Ok(Ok(_)) => acknowledged.extend(first..first + MESSAGES_PER_BATCH as u64),
            // The server is gone: what was not acknowledged may or may not be there.
            _ => break,
        }
        batch_number += 1;
    }
    (producer, acknowledged)
}

/// One poll of up to 1000 messages of `partition` of stream `durable`, by offset, without
/// auto-commit.
async fn poll_from(client: &IggyClient, topic: &str, partition: u32, offset: u64) -> Result<PolledMessages, IggyError> {
    let consumer = Consumer::new(Identifier::numeric(7).unwrap());
    let strategy = PollingStrategy::offset(offset);
    client.poll_messages(&id("durable"), &id(topic), Some(partition), &consumer, &strategy, 1000, false).await
}

/// Every message of a partition, read from offset 0: (producer, sequence) in log order.
/// A group still recovering answers an empty poll, so the read waits (bounded) until the
/// partition's head, as get_topic reports it, is reached.
async fn read_partition(client: &IggyClient, topic: &str, partition: u32) -> Vec<(u32, u64)> {
    let mut read = Vec::new();
    let mut offset = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    for _ in 0..100_000 {
        let polled = poll_from(client, topic, partition, offset).await.unwrap();
        if polled.messages.is_empty() {
            if offset > polled.current_offset
                || (polled.current_offset == 0 && offset == 0 && Instant::now() > deadline)
            {
                return read;
            }
            assert!(Instant::now() < deadline, "partition {partition}: stuck at {offset} of {}", polled.current_offset);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        for message in &polled.messages {
            assert_eq!(message.header.offset, offset, "offsets are dense");
            offset += 1;
            read.push(producer_sequence(message));
        }
    }
    panic!("partition {partition} did not end");
}

async fn kill_mid_send(fsync: bool) {
    let data = data_dir(&format!("sigkill-{}", topic_name(fsync)));
    let mut server = Server::start(&data, &[]);
    let client = root_client(server.address).await;
    client.create_stream("durable").await.unwrap();
    let options =
        TopicCreateOptions { partitions_count: Some(PARTITIONS), enforce_fsync: Some(fsync), ..Default::default() };
    client.create_topic(&id("durable"), topic_name(fsync), &options).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for producer in 0..PRODUCERS_PER_TOPIC * PARTITIONS {
        let stop = stop.clone();
        let address = server.address;
        producers.push(tokio::spawn(produce(address, fsync, producer, stop)));
    }
    tokio::time::sleep(SENDING_FOR).await;
    // Killed while the producers still send: some sends are in flight.
    server.kill();
    stop.store(true, Ordering::SeqCst);
    let mut acknowledged: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for producer in producers {
        let (producer, sequences) = producer.await.unwrap();
        acknowledged.insert(producer, sequences);
    }
    let total: usize = acknowledged.values().map(Vec::len).sum();
    assert!(total >= 100, "the producers got {total} messages acknowledged before the kill");

    let server = Server::start(&data, &[]);
    let client = root_client(server.address).await;
    for partition in 0..PARTITIONS {
        let log = read_partition(&client, topic_name(fsync), partition).await;
        let mut last: BTreeMap<u32, u64> = BTreeMap::new();
        for (producer, sequence) in &log {
            assert_eq!(producer % PARTITIONS, partition, "a message in the wrong partition");
            if let Some(previous) = last.insert(*producer, *sequence) {
                assert!(
                    *sequence > previous,
                    "producer {producer}: {sequence} after {previous}: duplicated or reordered"
                );
            }
        }
        for (producer, sequences) in acknowledged.iter().filter(|(producer, _)| *producer % PARTITIONS == partition) {
            let kept: Vec<u64> = log.iter().filter(|(of, _)| of == producer).map(|(_, sequence)| *sequence).collect();
            assert!(
                kept.len() >= sequences.len() && kept[..sequences.len()] == sequences[..],
                "producer {producer}: {} acknowledged, {} kept: an acknowledged message was lost",
                sequences.len(),
                kept.len()
            );
        }
    }
    // The log goes on where it ended.
    let mut more = vec![IggyMessage::from_str("after-restart").unwrap()];
    client
        .send_messages(&id("durable"), &id(topic_name(fsync)), &Partitioning::partition_id(0), &mut more)
        .await
        .unwrap();
    println!("enforce_fsync={fsync}: {total} messages acknowledged before SIGKILL, all kept");
}

/// The first poll a client can make of a server restarted at once after SIGKILL: connection
/// refusals are retried (the restarted server may not have its port back yet); anything else is
/// the answer, and every poll until the acknowledged messages are read must return messages.
async fn first_polls(address: SocketAddr, topic: &str, partition: u32, acknowledged: usize) -> Vec<(u32, u64)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        let client = sdk_client(address);
        match client.connect().await {
            Ok(()) => break client,
            Err(error) => {
                assert!(Instant::now() < deadline, "no connection within 30 s: {error}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    client.login_user(DEFAULT_ROOT_USERNAME, DEFAULT_ROOT_PASSWORD).await.expect("the first login is answered");
    let mut read = Vec::new();
    while read.len() < acknowledged {
        let polled = poll_from(&client, topic, partition, read.len() as u64)
            .await
            .expect("a poll after the restart is answered");
        assert!(
            !polled.messages.is_empty(),
            "partition {partition}: a poll from offset {} right after the restart returned nothing, with {acknowledged} messages acknowledged",
            read.len()
        );
        read.extend(polled.messages.iter().map(producer_sequence));
    }
    read
}

/// Four producers, SIGKILL, the server started again at once on the same port: the first polls
/// a client can make return every acknowledged message (nothing is answered before recovery).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_polls_after_a_sigkill_and_an_immediate_restart_return_every_acknowledged_message() {
    let run = async {
        let data = data_dir("sigkill-immediate-restart");
        let mut server = Server::start(&data, &[]);
        let client = root_client(server.address).await;
        client.create_stream("durable").await.unwrap();
        let options = TopicCreateOptions { partitions_count: Some(PARTITIONS), ..Default::default() };
        client.create_topic(&id("durable"), topic_name(false), &options).await.unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..PRODUCERS_PER_TOPIC * PARTITIONS)
            .map(|producer| tokio::spawn(produce(server.address, false, producer, stop.clone())))
            .collect();
        tokio::time::sleep(SENDING_FOR).await;
        let address = server.address;
        server.kill();
        let restarted = Server::start(&data, &[("VIREO_TCP_ADDRESS", &address.to_string())]);
        stop.store(true, Ordering::SeqCst);
        let mut acknowledged: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for producer in producers {
            let (producer, sequences) = producer.await.unwrap();
            acknowledged.insert(producer, sequences);
        }
        for partition in 0..PARTITIONS {
            let expected: usize = acknowledged
                .iter()
                .filter(|(producer, _)| *producer % PARTITIONS == partition)
                .map(|(_, sequences)| sequences.len())
                .sum();
            let log = first_polls(restarted.address, topic_name(false), partition, expected).await;
            for (producer, sequences) in acknowledged.iter().filter(|(producer, _)| *producer % PARTITIONS == partition)
            {
                let kept: Vec<u64> =
                    log.iter().filter(|(of, _)| of == producer).map(|(_, sequence)| *sequence).collect();
                assert!(
                    kept.len() >= sequences.len() && kept[..sequences.len()] == sequences[..],
                    "producer {producer}: {} acknowledged, {} in the first polls",
                    sequences.len(),
                    kept.len()
                );
            }
            println!(
                "partition {partition}: {expected} acknowledged messages, all in the first polls after the restart"
            );
        }
        assert!(restarted.output().contains("recovered in "), "{}", restarted.output());
    };
    tokio::time::timeout(Duration::from_secs(120), run).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_send_loses_no_acknowledged_message_without_enforce_fsync() {
    tokio::time::timeout(Duration::from_secs(120), kill_mid_send(false)).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_send_loses_no_acknowledged_message_with_enforce_fsync() {
    tokio::time::timeout(Duration::from_secs(120), kill_mid_send(true)).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_down_gracefully_and_a_restart_recovers() {
    let data = data_dir("sigterm");
    let mut server = Server::start(&data, &[]);
    let client = root_client(server.address).await;
    client.create_stream("durable").await.unwrap();
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    client.create_topic(&id("durable"), "written", &options).await.unwrap();
    let mut batch: Vec<IggyMessage> =
        (0..100).map(|index| IggyMessage::from_str(&format!("0:{index}")).unwrap()).collect();
    client.send_messages(&id("durable"), &id("written"), &Partitioning::partition_id(0), &mut batch).await.unwrap();
    let status = server.stop(libc::SIGTERM, Duration::from_secs(20)).expect("it exits within 20 s");
    assert!(status.success(), "exit status {status:?}: {}", server.output());
    assert!(server.output().contains("vireo-server stopped"), "{}", server.output());
    let server = Server::start(&data, &[]);
    let client = root_client(server.address).await;
    let log = read_partition(&client, "written", 0).await;
    assert_eq!(log, (0..100).map(|index| (0, index)).collect::<Vec<_>>());
}

/// Every `.log` segment file under `dir`, recursively.
fn segment_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(segment_files(&path));
        } else if path.file_name().and_then(|name| name.to_str()).is_some_and(|name| {
            name.strip_suffix(".log")
                .is_some_and(|digits| digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        }) {
            found.push(path);
        }
    }
    found
}

/// A single node writes a batch once, to its segment log (its WAL slot leaves it out). So a
/// flipped bit in a segment file, in a batch whose prepare is past the checkpoint (the WAL must
/// take its batches back from the log at a restart), must cost that batch and nothing else:
/// after the restart every other acknowledged message is polled at its offset, the lost batch's
/// offsets stay taken, the server says what it lost, and sends go on after the log's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_bit_in_a_single_nodes_segment_costs_only_the_batch_it_hits() {
    const BATCHES: u64 = 20;
    const HIT: u64 = 10;
    let data = data_dir("flipped-bit");
    let mut server = Server::start(&data, &[]);
    let client = root_client(server.address).await;
    client.create_stream("durable").await.unwrap();
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    client.create_topic(&id("durable"), "written", &options).await.unwrap();
    for batch_number in 0..BATCHES {
        let first = batch_number * MESSAGES_PER_BATCH as u64;
        let mut batch: Vec<IggyMessage> = (first..first + MESSAGES_PER_BATCH as u64)
            .map(|sequence| IggyMessage::from_str(&format!("0:{sequence}")).unwrap())
            .collect();
        client.send_messages(&id("durable"), &id("written"), &Partitioning::partition_id(0), &mut batch).await.unwrap();
    }
    // SIGKILL: no checkpoint at shutdown covers the sends.
    server.kill();

    // One bit of one message of batch HIT, in the only copy of it.
    let needle = format!("0:{}", HIT * MESSAGES_PER_BATCH as u64 + 5).into_bytes();
    let mut flipped = 0;
    for path in segment_files(&data) {
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|window| window == needle.as_slice()) {
            bytes[at + 1] ^= 0x04;
            std::fs::write(&path, &bytes).unwrap();
            flipped += 1;
        }
    }
    assert_eq!(flipped, 1, "the batch is in exactly one segment file");

    let server = Server::start(&data, &[]);
    let client = root_client(server.address).await;
    let lost = HIT * MESSAGES_PER_BATCH as u64..(HIT + 1) * MESSAGES_PER_BATCH as u64;
    let end = BATCHES * MESSAGES_PER_BATCH as u64;
    let mut read = Vec::new();
    let mut offset = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while offset < end {
        assert!(Instant::now() < deadline, "stuck at offset {offset}: read {read:?}");
        let polled = match poll_from(&client, "written", 0, offset).await {
            Ok(polled) => polled,
            Err(error) if Instant::now() + Duration::from_secs(15) > deadline => {
                panic!("offset {offset}: {error}\n{}", server.output())
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if polled.messages.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        for message in &polled.messages {
            read.push((message.header.offset, producer_sequence(message)));
            offset = message.header.offset + 1;
        }
    }
    let expected: Vec<(u64, (u32, u64))> = (0..end).filter(|at| !lost.contains(at)).map(|at| (at, (0, at))).collect();
    assert_eq!(read, expected, "every message but the hit batch's, at its offset");
    // Figures are published every few ticks.
    let published = Instant::now() + Duration::from_secs(10);
    while server.metric("vireo_batches_lost_total") == 0 && Instant::now() < published {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(server.metric("vireo_batches_lost_total"), 1, "{}", server.output());
    assert!(server.output().contains("batches lost"), "the server says so: {}", server.output());

    let mut more = vec![IggyMessage::from_str("0:after").unwrap()];
    client.send_messages(&id("durable"), &id("written"), &Partitioning::partition_id(0), &mut more).await.unwrap();
    let polled = poll_from(&client, "written", 0, end).await.unwrap();
    assert_eq!(polled.messages.len(), 1);
    assert_eq!(polled.messages[0].header.offset, end, "the log goes on after the lost batch's offsets");
}
