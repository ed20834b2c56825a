//! A vireo-server whose disk fills up, on a 96 MiB ext4 loop mount, with the Iggy SDK as the
//! client: the send that does not fit the free-space reserve is refused at once with the
//! reference's error (4006), polls are answered while the disk is full, the log says so once going
//! in and once coming out, a restart on the full disk keeps every acknowledged message, and once
//! a delete frees space, sends are taken again by themselves.
//!
//! Lines starting `fault-table:` are what `ci/faults.sh` prints as its table.

mod loop_mount;
mod server_process;

use std::str::FromStr;
use std::time::{Duration, Instant};

use iggy::prelude::*;
use loop_mount::LoopMount;
use server_process::{root_client, Server};

const DISK_MIB: u64 = 96;
const MESSAGES_PER_BATCH: u64 = 100;
const MESSAGE_BYTES: usize = 1000;
/// Sends that fill the disk at most: 96 MiB holds under 1,000 batches of 100 KB.
const FILL_SENDS_MAX: u64 = 5_000;

fn id(name: &str) -> Identifier {
    Identifier::named(name).unwrap()
}

/// One batch of `topic`, its messages numbered from `first` (the payload starts with the number).
async fn send(client: &IggyClient, topic: &str, first: u64) -> Result<(), IggyError> {
    let mut batch: Vec<IggyMessage> = (first..first + MESSAGES_PER_BATCH)
        .map(|number| {
            let mut payload = format!("{number}:").into_bytes();
            payload.resize(MESSAGE_BYTES, b'.');
            IggyMessage::from_str(std::str::from_utf8(&payload).unwrap()).unwrap()
        })
        .collect();
    match tokio::time::timeout(
        Duration::from_secs(30),
        client.send_messages(&id("disk"), &id(topic), &Partitioning::partition_id(0), &mut batch),
    )
    .await
    {
        Ok(result) => result.map(|_| ()),
        Err(_) => panic!("a send to {topic} was not answered in 30 s"),
    }
}

/// Every message of `topic`'s partition 0: their numbers, in log order.
async fn read_all(client: &IggyClient, topic: &str) -> Vec<u64> {
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    let mut numbers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let strategy = PollingStrategy::offset(numbers.len() as u64);
        let polled = client
            .poll_messages(&id("disk"), &id(topic), Some(0), &consumer, &strategy, 1000, false)
            .await
            .unwrap_or_else(|error| panic!("a poll of {topic} failed: {error}"));
        if polled.messages.is_empty() {
            if numbers.len() as u64 > polled.current_offset || polled.current_offset == 0 {
                return numbers;
            }
            assert!(Instant::now() < deadline, "{topic}: stuck at {} of {}", numbers.len(), polled.current_offset);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        for message in &polled.messages {
            let text = String::from_utf8_lossy(&message.payload);
            numbers.push(text.split(':').next().unwrap().parse().unwrap());
        }
    }
}

/// Sends the batch numbered from `first` to "orders" until it is taken (10 s at most) once space
/// is back, refused with 4006 meanwhile: how long that took.
async fn send_once_space_is_back(client: &IggyClient, first: u64) -> Duration {
    let started = Instant::now();
    loop {
        match send(client, "orders", first).await {
            Ok(()) => return started.elapsed(),
            Err(error) if error.as_code() == 4006 && started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(error) => panic!("sends did not resume once space was back: {error}"),
        }
    }
}

/// Waits (bounded) until `/metrics` shows `value` for `name`: the shards publish every few ticks.
fn await_metric(server: &Server, name: &str, value: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.metric(name) != value {
        assert!(Instant::now() < deadline, "{name} stayed at {} (waited for {value})", server.metric(name));
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn count(output: &str, needle: &str) -> usize {
    output.lines().filter(|line| line.contains(needle)).count()
}

const LOW: &str = "disk space below the reserve";
const BACK: &str = "disk space back above the reserve";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_sends_at_once_serves_reads_and_resumes_when_space_is_freed() {
    let mount = LoopMount::new("disk-full", DISK_MIB).unwrap_or_else(|why| panic!("no loop mount: {why}"));
    let data = mount.dir("data");
    // The default reserve (1 GiB, at most a twentieth of the disk): 4.8 MiB here.
    let mut server = Server::start(&data, &[]);
    let client = root_client(server.address).await;
    client.create_stream("disk").await.unwrap();
    for topic in ["orders", "scratch"] {
        let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
        client.create_topic(&id("disk"), topic, &options).await.unwrap();
    }
    let mut orders = 0;
    for _ in 0..20 {
        send(&client, "orders", orders).await.unwrap();
        orders += MESSAGES_PER_BATCH;
    }

    // Fill the disk with scratch until a send is refused.
    let mut scratch = 0;
    let (refusal, answered_in) = loop {
        assert!(scratch / MESSAGES_PER_BATCH < FILL_SENDS_MAX, "the disk never filled");
        let started = Instant::now();
        match send(&client, "scratch", scratch).await {
            Ok(()) => scratch += MESSAGES_PER_BATCH,
            Err(error) => break (error, started.elapsed()),
        }
    };
    assert_eq!(refusal.as_code(), 4006, "refused with CannotSaveMessagesToSegment, got {refusal}");
    println!("fault-table: acknowledged before the disk filled: {} messages", orders + scratch);
    println!("fault-table: the send that does not fit: refused in {} ms: {refusal}", answered_in.as_millis());
    assert!(answered_in < Duration::from_millis(100), "the refusal took {answered_in:?}");
    // Refused again, as fast, and a create too; the free space stays above nothing.
    assert_eq!(send(&client, "orders", orders).await.unwrap_err().as_code(), 4006);
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    assert_eq!(client.create_topic(&id("disk"), "more", &options).await.unwrap_err().as_code(), 2006);
    assert!(mount.free_bytes() > 0, "the reserve kept space free");

    // Reads go on.
    assert_eq!(read_all(&client, "orders").await, (0..orders).collect::<Vec<_>>());
    assert_eq!(read_all(&client, "scratch").await, (0..scratch).collect::<Vec<_>>());
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    client
        .store_consumer_offset(&consumer, &id("disk"), &id("orders"), Some(0), 5)
        .await
        .expect("a consumer offset is stored while the disk is full");
    println!("fault-table: a poll while the disk is full: answered, every message");
    let stats = client.get_stats().await.unwrap();
    assert!(stats.free_disk_space.as_bytes_u64() > 0 && stats.total_disk_space.as_bytes_u64() > 0);
    await_metric(&server, "vireo_disk_below_reserve", 1);
    assert!(server.metric("vireo_refusals_total{reason=\"disk\"}") >= 2);
    let output = server.output();
    assert_eq!(count(&output, LOW), 1, "one WARN line going in:\n{output}");
    println!("fault-table: the log: WARN \"{LOW} ...\" (once)");

    // A restart on the full disk: everything acknowledged is there, sends are still refused.
    server.kill();
    let mut server = Server::start(&data, &[]);
    let client = root_client(server.address).await;
    assert_eq!(read_all(&client, "orders").await, (0..orders).collect::<Vec<_>>());
    assert_eq!(read_all(&client, "scratch").await, (0..scratch).collect::<Vec<_>>());
    println!("fault-table: restart on the full disk: starts; every acknowledged message read back, 0 lost");
    let started = Instant::now();
    assert_eq!(send(&client, "orders", orders).await.unwrap_err().as_code(), 4006);
    println!("fault-table: a send after that restart: refused in {} ms", started.elapsed().as_millis());

    // A delete brings space back: sends are taken again by themselves.
    client.delete_topic(&id("disk"), &id("scratch")).await.unwrap();
    let resumed_in = send_once_space_is_back(&client, orders).await;
    orders += MESSAGES_PER_BATCH;
    println!("fault-table: after a delete frees space: sends resume in {} ms", resumed_in.as_millis());
    assert_eq!(read_all(&client, "orders").await, (0..orders).collect::<Vec<_>>());
    await_metric(&server, "vireo_disk_below_reserve", 0);

    let status = server.stop(libc::SIGTERM, Duration::from_secs(20)).expect("a graceful exit");
    assert!(status.success(), "{status:?}");
    let output = server.output();
    assert_eq!(count(&output, LOW), 1, "one WARN line going in after the restart:\n{output}");
    assert_eq!(count(&output, BACK), 1, "one WARN line coming out:\n{output}");
    assert!(!output.contains("still in flight"), "{output}");
    println!("fault-table: shutdown: clean (exit 0)");
}

/// Fills the file system under `dir` with a file of its own until it refuses (ENOSPC): another
/// process filling the disk, which no reserve foresees. Returns the filler's path.
fn fill_disk(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xf1u8; 1 << 20];
    // 96 MiB at most: bounded by the disk itself, and by this count.
    for _ in 0..(DISK_MIB + 8) {
        if let Err(error) = file.write_all(&chunk) {
            assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "filling: {error}");
            break;
        }
    }
    // What a partial chunk left: the last blocks, a few bytes at a time.
    for _ in 0..4096 {
        if file.write_all(&chunk[..4096]).and_then(|()| file.sync_all()).is_err() {
            break;
        }
    }
    path
}

const CUT: &str = "a write met a full disk despite the free-space reserve";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_write_meets_a_full_disk_is_refused_at_once_and_never_stored() {
    let mount = LoopMount::new("disk-full-no-reserve", DISK_MIB).unwrap_or_else(|why| panic!("no loop mount: {why}"));
    let data = mount.dir("data");
    // No reserve: the disk fills under the server, as when another process fills it.
    let env = [("VIREO_SYSTEM_MIN_FREE_BYTES", "0")];
    let mut server = Server::start(&data, &env);
    let client = root_client(server.address).await;
    client.create_stream("disk").await.unwrap();
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    client.create_topic(&id("disk"), "orders", &options).await.unwrap();
    let mut acknowledged = Vec::new();
    let mut next = 0;
    for _ in 0..10 {
        send(&client, "orders", next).await.unwrap();
        acknowledged.extend(next..next + MESSAGES_PER_BATCH);
        next += MESSAGES_PER_BATCH;
    }

    let filler = fill_disk(&mount.path);
    let mut refused = 0;
    let mut slowest = Duration::ZERO;
    // What the segment's last blocks still take is acknowledged; then every send is refused.
    for _ in 0..20 {
        let started = Instant::now();
        match send(&client, "orders", next).await {
            Ok(()) => acknowledged.extend(next..next + MESSAGES_PER_BATCH),
            Err(error) => {
                assert_eq!(error.as_code(), 4006, "refused with CannotSaveMessagesToSegment, got {error}");
                refused += 1;
                slowest = slowest.max(started.elapsed());
            }
        }
        next += MESSAGES_PER_BATCH;
    }
    assert!(refused >= 10, "only {refused} of 20 sends refused on a full disk");
    println!(
        "fault-table: a send whose write meets ENOSPC (no reserve): refused in at most {} ms ({refused} of 20)",
        slowest.as_millis()
    );
    assert!(slowest < Duration::from_secs(1), "a refusal took {slowest:?}");
    assert_eq!(
        read_all(&client, "orders").await,
        acknowledged,
        "polls answered: every acknowledged message, no refused one"
    );
    let output = server.output();
    assert_eq!(count(&output, CUT), 1, "one WARN line says what happened (at most one per 10 s):\n{output}");
    assert!(!output.contains("group stopped"), "the group goes on:\n{output}");

    // Space comes back: sends are taken again by themselves.
    std::fs::remove_file(&filler).unwrap();
    let resumed_in = send_once_space_is_back(&client, next).await;
    acknowledged.extend(next..next + MESSAGES_PER_BATCH);
    println!("fault-table: ... once the filler is removed: sends resume in {} ms", resumed_in.as_millis());

    // Nothing refused comes back with a restart, and nothing acknowledged is lost.
    server.kill();
    let mut server = Server::start(&data, &env);
    let client = root_client(server.address).await;
    assert_eq!(read_all(&client, "orders").await, acknowledged);
    println!(
        "fault-table: ... restarted: {} acknowledged read back, 0 lost, none of the refused sends stored",
        acknowledged.len()
    );
    let status = server.stop(libc::SIGTERM, Duration::from_secs(20)).expect("a graceful exit");
    assert!(status.success(), "{status:?}");
}
