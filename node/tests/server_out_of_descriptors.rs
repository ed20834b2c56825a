//! A vireo-server started with `ulimit -n 128` and 300 clients connecting and holding on: the
//! surplus is refused (accepted with the spare descriptor and closed at once, not left hanging in
//! the backlog), the connections it holds are served (the Iggy SDK sends and polls all along),
//! the episode is logged once going in and once, with its count, coming out, the server spends
//! almost no CPU meanwhile, and `/metrics` counts the refusals.
//!
//! Lines starting `fault-table:` are what `ci/faults.sh` prints as its table.

mod server_process;

use std::io::Read;
use std::net::TcpStream;
use std::str::FromStr;
use std::time::{Duration, Instant};

use iggy::prelude::*;
use server_process::{data_dir, root_client, Server};

const FILES_MAX: u64 = 128;
const CONNECTIONS: usize = 300;
const EPISODE_IN: &str = "out of file descriptors";
const EPISODE_OUT: &str = "file descriptors available again";

fn id(name: &str) -> Identifier {
    Identifier::named(name).unwrap()
}

/// CPU seconds the process has used (user and system), from `/proc`.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf(3) has no preconditions.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The share of a core the process used over `window`.
async fn cpu_share_over(pid: i32, window: Duration) -> f64 {
    let (before, from) = (cpu_seconds(pid), Instant::now());
    tokio::time::sleep(window).await;
    (cpu_seconds(pid) - before) / from.elapsed().as_secs_f64()
}

/// Whether the server closed this connection (its read ends, or is reset).
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
    }
}

async fn send_and_poll(client: &IggyClient, number: u64) {
    let mut batch = vec![IggyMessage::from_str(&format!("message {number}")).unwrap()];
    client.send_messages(&id("fds"), &id("held"), &Partitioning::partition_id(0), &mut batch).await.unwrap();
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    let polled = client
        .poll_messages(&id("fds"), &id("held"), Some(0), &consumer, &PollingStrategy::offset(number), 1, false)
        .await
        .unwrap();
    assert_eq!(polled.messages.len(), 1, "message {number} polled back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_surplus_is_refused_once_logged_and_the_rest_served() {
    let data = data_dir("out-of-descriptors");
    let server = Server::start_limited(&data, &[], &["--with-default-root-credentials"], Some(FILES_MAX));
    let client = root_client(server.address).await;
    client.create_stream("fds").await.unwrap();
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    client.create_topic(&id("fds"), "held", &options).await.unwrap();
    send_and_poll(&client, 0).await;

    // The idle server's own cost first (its shards' ticks), to tell refusing apart from it.
    let idle_share = cpu_share_over(server.pid(), Duration::from_secs(2)).await;
    let mut held = Vec::new();
    for _ in 0..CONNECTIONS {
        // The kernel completes the handshake whether or not the server accepts.
        held.push(TcpStream::connect(server.address).expect("the listen backlog takes it"));
    }
    // What refusing costs: the server's CPU while the surplus waits and nothing else happens.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu_share = cpu_share_over(server.pid(), Duration::from_secs(2)).await;
    // Meanwhile the client the server holds is served.
    let mut number = 1;
    while number <= 30 {
        send_and_poll(&client, number).await;
        number += 1;
    }
    let refused = held.iter_mut().map(closed_by_server).filter(|closed| *closed).count();
    println!(
        "fault-table: out of descriptors (ulimit -n {FILES_MAX}, {CONNECTIONS} clients holding): {refused} refused \
         (closed at once), the others held; a client already in sent and polled {} times after",
        number - 1
    );
    println!(
        "fault-table: server CPU while the surplus is refused: {:.1}% of a core (idle before: {:.1}%)",
        cpu_share * 100.0,
        idle_share * 100.0
    );
    assert!(refused > 0, "the surplus was refused, not left waiting");
    assert!(refused < CONNECTIONS, "some were held");
    assert!(
        cpu_share < 0.05 || cpu_share - idle_share < 0.02,
        "the server used {:.1}% of a core while refusing ({:.1}% idle)",
        cpu_share * 100.0,
        idle_share * 100.0
    );
    let output = server.output();
    assert_eq!(output.matches(EPISODE_IN).count(), 1, "one line going in:\n{output}");

    // The holders leave: a new client gets in, and the episode's end is said with its count.
    drop(held);
    let late = root_client(server.address).await;
    send_and_poll(&late, number).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.output().contains(EPISODE_OUT) {
        assert!(Instant::now() < deadline, "no line coming out:\n{}", server.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let output = server.output();
    let episode_lines = output.lines().filter(|line| line.contains("file descriptors")).count();
    println!("fault-table: log lines for the episode: {episode_lines}");
    assert_eq!(episode_lines, 2, "{output}");
    let counted = server.metric("vireo_refusals_total{reason=\"file_descriptors\"}");
    assert!(counted >= refused as u64, "/metrics counts {counted} refusals, {refused} seen");
}
