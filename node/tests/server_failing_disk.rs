//! A single vireo-server whose disk fails in the middle of a soak (its ext4 loop mount meets an
//! error and turns read-only: every later write and sync fails with EROFS), with the Iggy SDK as
//! the client: the failed write is not retried, an ERROR line names the file and the errno, writes
//! are refused from then on while what it holds is still read, `/health` says 503, and after a
//! restart on the repaired disk every acknowledged message is there.
//!
//! Lines starting `fault-table:` are what `ci/faults.sh` prints as its table.

mod loop_mount;
mod server_process;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iggy::prelude::*;
use loop_mount::LoopMount;
use server_process::{root_client, Server};

const MESSAGES_PER_BATCH: u64 = 10;

fn id(name: &str) -> Identifier {
    Identifier::named(name).unwrap()
}

/// The status code and body of `GET path` on the HTTP port.
fn http_get(address: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nhost: vireo\r\nconnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let status = text.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    (status, text.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default())
}

async fn send(client: &IggyClient, first: u64) -> Result<(), IggyError> {
    let mut batch: Vec<IggyMessage> =
        (first..first + MESSAGES_PER_BATCH).map(|number| IggyMessage::from_str(&number.to_string()).unwrap()).collect();
    let (stream, topic, partitioning) = (id("soak"), id("events"), Partitioning::partition_id(0));
    let sent = client.send_messages(&stream, &topic, &partitioning, &mut batch);
    match tokio::time::timeout(Duration::from_secs(5), sent).await {
        Ok(result) => result.map(|_| ()),
        Err(_) => Err(IggyError::Disconnected),
    }
}

/// Sends until `stop`, or until a send is not acknowledged: the numbers acknowledged.
async fn soak(client: IggyClient, stop: Arc<AtomicBool>) -> (Vec<u64>, Option<IggyError>) {
    let mut acknowledged = Vec::new();
    let mut next = 0;
    while !stop.load(Ordering::SeqCst) {
        match send(&client, next).await {
            Ok(()) => acknowledged.extend(next..next + MESSAGES_PER_BATCH),
            Err(error) => return (acknowledged, Some(error)),
        }
        next += MESSAGES_PER_BATCH;
    }
    (acknowledged, None)
}

async fn read_all(client: &IggyClient, server: &Server) -> Vec<u64> {
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    let mut numbers = Vec::new();
    loop {
        let strategy = PollingStrategy::offset(numbers.len() as u64);
        let polled = tokio::time::timeout(
            Duration::from_secs(10),
            client.poll_messages(&id("soak"), &id("events"), Some(0), &consumer, &strategy, 1000, false),
        )
        .await
        .unwrap_or_else(|_| {
            let metrics = server.metrics();
            let figures: Vec<&str> = metrics
                .lines()
                .filter(|line| {
                    !line.starts_with('#') && (line.contains("poll") || line.contains("refus") || line.contains("read"))
                })
                .collect();
            panic!("a poll is not answered:\n{}\n{}", server.output(), figures.join("\n"))
        })
        .unwrap_or_else(|error| panic!("a poll failed: {error}"));
        if polled.messages.is_empty() {
            return numbers;
        }
        numbers.extend(
            polled.messages.iter().map(|message| String::from_utf8_lossy(&message.payload).parse::<u64>().unwrap()),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_fails_mid_soak_stops_writes_keeps_reads_and_loses_nothing_acknowledged() {
    let mount = LoopMount::new("failing-disk", 256).unwrap_or_else(|why| panic!("no loop mount: {why}"));
    let data = mount.dir("data");
    let mut server = Server::start(&data, &[]);
    let http = server.metrics.expect("the HTTP port");
    let client = root_client(server.address).await;
    client.create_stream("soak").await.unwrap();
    // Acknowledged once synced: the promise that covers a device that drops what its page cache
    // held (a topic without it is acknowledged once written, which survives kill -9, not this).
    let options = TopicCreateOptions { partitions_count: Some(1), enforce_fsync: Some(true), ..Default::default() };
    client.create_topic(&id("soak"), "events", &options).await.unwrap();
    assert_eq!(http_get(http, "/health").0, 200);

    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(soak(root_client(server.address).await, stop.clone()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    mount.fail().unwrap_or_else(|why| panic!("the file system could not be failed: {why}"));
    let failed_at = Instant::now();
    let (acknowledged, error) = tokio::time::timeout(Duration::from_secs(30), producer).await.unwrap().unwrap();
    stop.store(true, Ordering::SeqCst);
    let error = error.expect("the soak's sends stopped being acknowledged");
    println!(
        "fault-table: a disk that fails mid-soak (read-only): {} messages acknowledged before; the send in flight: \
         {error} after {} ms",
        acknowledged.len(),
        failed_at.elapsed().as_millis()
    );
    assert!(acknowledged.len() > 100, "the soak ran: {}", acknowledged.len());

    // Writes are refused from now on, at once; reads are answered.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let started = Instant::now();
        match send(&client, 1_000_000).await {
            Err(refused) if refused.as_code() == 4006 => {
                println!(
                    "fault-table: a send after the failure: refused in {} ms: {refused}",
                    started.elapsed().as_millis()
                );
                assert!(started.elapsed() < Duration::from_millis(100));
                break;
            }
            other => assert!(
                Instant::now() < deadline,
                "a send after the failure was not refused: {other:?}\n{}",
                server.output()
            ),
        }
    }
    let read = read_all(&client, &server).await;
    assert!(read.len() >= acknowledged.len(), "read {} of {} acknowledged", read.len(), acknowledged.len());
    assert_eq!(read[..acknowledged.len()], acknowledged[..], "what was acknowledged is read, in order");
    println!("fault-table: reads after the failure: answered, {} messages", read.len());
    let (status, body) = http_get(http, "/health");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("unhealthy"), "{body}");
    assert_eq!(server.metric("vireo_disk_failed"), 1);
    let output = server.output();
    let error_line = output
        .lines()
        .find(|line| line.contains("ERROR") && line.contains("(errno "))
        .unwrap_or_else(|| panic!("no ERROR line with the errno:\n{output}"))
        .to_string();
    assert!(error_line.contains(data.to_str().unwrap()), "the line names the file: {error_line}");
    println!("fault-table: the log: ERROR naming the file and its errno (EROFS or EIO); /health 503");

    // Restarted on the repaired disk: nothing acknowledged is lost, and writes are taken again.
    server.kill();
    mount.repair().unwrap_or_else(|why| panic!("the file system could not be repaired: {why}"));
    let server = Server::start(&data, &[]);
    let client = root_client(server.address).await;
    let read = read_all(&client, &server).await;
    let kept = acknowledged.iter().filter(|number| read.contains(number)).count();
    assert_eq!(kept, acknowledged.len(), "acknowledged messages lost across the restart");
    println!("fault-table: restart on the repaired disk: every acknowledged message read back, 0 lost");
    send(&client, 2_000_000).await.expect("writes are taken again");
    assert_eq!(http_get(server.metrics.unwrap(), "/health").0, 200);
}
