//! Reads that tell the truth, on a real three-node cluster through the published Iggy SDK: a poll
//! sent after a send was acknowledged returns it, whichever node the poll and the send went
//! to, and a consumer offset stored through one node is what another node reads back. The
//! clients are the SDK's raw `TcpClient`s, which stay on the node they connected to (the
//! `IggyClient` wrapper would follow the leader), so the polls really are answered by backups.
//! Midway through, the node holding the partition's primary is SIGKILLed and started again at
//! once, on the same port, with clients reconnecting to it. And over HTTP: a read asked to be
//! linearizable on a backup is redirected (307) to the primary, which serves it.

mod cluster_process;
mod server_process;

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

use cluster_process::{create_topic, id, Cluster, STREAM, TOPIC};
use iggy::prelude::*;
use vireo_io::Namespace;
use vireo_node::routing::primary_offset;

const ROUNDS: u64 = 100;
/// How long one operation may take before the test retries it (a view change under a kill).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// A root client that stays on `address` (no leader redirection), retried while the node is
/// down or starting (bounded).
async fn on_node(address: SocketAddr) -> TcpClient {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let attempt = async {
            let client =
                TcpClient::new(&address.to_string(), AutoLogin::Disabled, IggyDuration::new(Duration::from_secs(5)))?;
            client.connect().await?;
            client.login_user(DEFAULT_ROOT_USERNAME, DEFAULT_ROOT_PASSWORD).await?;
            Ok::<_, IggyError>(client)
        };
        match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt).await {
            Ok(Ok(client)) => return client,
            outcome => {
                assert!(Instant::now() < deadline, "node {address} takes no client: {outcome:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The clients, one per node, reconnected when their node went away.
struct Clients {
    addresses: Vec<SocketAddr>,
    clients: Vec<TcpClient>,
    stream: Identifier,
    topic: Identifier,
}

impl Clients {
    async fn new(addresses: Vec<SocketAddr>) -> Clients {
        let mut clients = Vec::new();
        for address in &addresses {
            clients.push(on_node(*address).await);
        }
        Clients { addresses, clients, stream: id(STREAM), topic: id(TOPIC) }
    }

    async fn reconnect(&mut self, node: usize) {
        self.clients[node] = on_node(self.addresses[node]).await;
    }

    /// Sends one message with `payload` to partition 0 through `node` until it is acknowledged
    /// (a retry after a timeout may store it twice: the polls look for it, not at a count).
    async fn send(&mut self, node: usize, payload: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut batch = vec![IggyMessage::from_str(payload).unwrap()];
            let partitioning = Partitioning::partition_id(0);
            let sent = self.clients[node].send_messages(&self.stream, &self.topic, &partitioning, &mut batch);
            match tokio::time::timeout(ATTEMPT_TIMEOUT, sent).await {
                Ok(Ok(_)) => return,
                outcome => {
                    assert!(Instant::now() < deadline, "send {payload} through node {node}: {outcome:?}");
                    self.reconnect(node).await;
                }
            }
        }
    }

    /// Polls partition 0 from `from` through `node` once (retried only when the poll failed or
    /// the node went away, never when it answered): the offset of `payload` in the answer.
    /// Sends `payload` on node `writer`, then polls node `reader` from `next` at once: the
    /// message found moves `next` past it; a poll without it is a stale read, noted in `stale`.
    async fn send_and_read_back(
        &mut self,
        writer: usize,
        reader: usize,
        payload: &str,
        next: &mut u64,
        stale: &mut Vec<String>,
    ) {
        self.send(writer, payload).await;
        match self.poll_finds(reader, *next, payload).await {
            Ok(offset) => *next = offset + 1,
            Err(stale_read) => stale.push(stale_read),
        }
    }

    async fn poll_finds(&mut self, node: usize, from: u64, payload: &str) -> Result<u64, String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let consumer = Consumer::new(Identifier::numeric(900 + node as u32).unwrap());
        let strategy = PollingStrategy::offset(from);
        loop {
            let polled =
                self.clients[node].poll_messages(&self.stream, &self.topic, Some(0), &consumer, &strategy, 1000, false);
            match tokio::time::timeout(ATTEMPT_TIMEOUT, polled).await {
                Ok(Ok(polled)) => {
                    let found = polled.messages.iter().find(|message| message.payload.as_ref() == payload.as_bytes());
                    return found.map(|message| message.header.offset).ok_or_else(|| {
                        format!(
                            "node {node} polled from {from} after {payload} was acknowledged and returned {} messages without it (current offset {})",
                            polled.messages.len(),
                            polled.current_offset
                        )
                    });
                }
                outcome => {
                    assert!(Instant::now() < deadline, "poll through node {node}: {outcome:?}");
                    self.reconnect(node).await;
                }
            }
        }
    }

    async fn store_offset(&mut self, node: usize, consumer: &Consumer, offset: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let stored = self.clients[node].store_consumer_offset(consumer, &self.stream, &self.topic, Some(0), offset);
            match tokio::time::timeout(ATTEMPT_TIMEOUT, stored).await {
                Ok(Ok(())) => return,
                outcome => {
                    assert!(Instant::now() < deadline, "store offset {offset} through node {node}: {outcome:?}");
                    self.reconnect(node).await;
                }
            }
        }
    }

    async fn stored_offset(&mut self, node: usize, consumer: &Consumer) -> Option<u64> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let read = self.clients[node].get_consumer_offset(consumer, &self.stream, &self.topic, Some(0));
            match tokio::time::timeout(ATTEMPT_TIMEOUT, read).await {
                Ok(Ok(offset)) => return offset.map(|offset| offset.stored_offset),
                outcome => {
                    assert!(Instant::now() < deadline, "get offset through node {node}: {outcome:?}");
                    self.reconnect(node).await;
                }
            }
        }
    }
}

async fn reads_see_acknowledged_writes() {
    let mut cluster = Cluster::new("cluster-reads", 3).await;
    cluster.start_all();
    create_topic(&cluster.addresses(), false).await;
    let mut clients = Clients::new(cluster.addresses()).await;
    // The first stream, topic and partition: the group's primary in view 0 (the view a healthy
    // cluster is still in), the node the kill below takes.
    let primary = primary_offset(Namespace::partition(0, 0, 0), 3) as usize;
    let mut next = 0u64;
    let mut stale = Vec::new();

    // Send then poll at once, on one connection, on each node in turn.
    for node in 0..3 {
        for round in 0..ROUNDS {
            clients.send_and_read_back(node, node, &format!("same:{node}:{round}"), &mut next, &mut stale).await;
        }
    }
    assert!(stale.is_empty(), "{} stale reads, the first: {}", stale.len(), stale[0]);

    // Send on node A, poll on node B; the partition's primary killed and restarted at once.
    let started = Instant::now();
    for round in 0..ROUNDS {
        if round == ROUNDS / 2 {
            cluster.kill(primary);
            cluster.start(primary);
        }
        let (writer, reader) = ((round % 3) as usize, ((round + 1) % 3) as usize);
        let payload = format!("across:{writer}:{reader}:{round}");
        clients.send_and_read_back(writer, reader, &payload, &mut next, &mut stale).await;
    }
    assert!(stale.is_empty(), "{} stale reads, the first: {}", stale.len(), stale[0]);
    println!(
        "cluster-reads: {} sends each read back at once on the same node and on another, node {primary} (the primary) killed and restarted at once; {:.1} s for the cross-node rounds",
        3 * ROUNDS + ROUNDS,
        started.elapsed().as_secs_f64()
    );

    // A consumer offset stored through one node is read back through another.
    let consumer = Consumer::new(Identifier::numeric(77).unwrap());
    for round in 0..30u64 {
        let (writer, reader) = ((round % 3) as usize, ((round + 2) % 3) as usize);
        let offset = round % next.max(1);
        clients.store_offset(writer, &consumer, offset).await;
        let read = clients.stored_offset(reader, &consumer).await;
        assert_eq!(read, Some(offset), "offset stored through node {writer}, read through node {reader}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_on_any_node_sees_every_send_acknowledged_before_it() {
    tokio::time::timeout(Duration::from_secs(300), reads_see_acknowledged_writes()).await.expect("bounded");
}

/// One HTTP request to `address` (bounded): the whole answer, lower-cased.
fn http(address: SocketAddr, method: &str, path: &str, token: Option<&str>, body: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).expect("the HTTP port");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token.map(|token| format!("authorization: Bearer {token}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: vireo\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).to_string()
}

fn http_login(address: SocketAddr) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = http(address, "POST", "/users/login", None, r#"{"username":"iggy","password":"iggy"}"#);
        if let Some(token) = answer.split("\"token\":\"").nth(1).and_then(|rest| rest.split('"').next()) {
            return token.to_string();
        }
        assert!(Instant::now() < deadline, "no HTTP login on {address}: {answer}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `?consistency=linearizable` on a backup's HTTP API: 307 to the primary's HTTP port with the
/// same path and query, where the read is served; serializable reads are served where asked.
async fn linearizable_reads_go_to_the_primary() {
    let mut cluster = Cluster::new("cluster-linearizable-http", 3).await;
    cluster.start_all();
    let leader = cluster.leader().await;
    let backup = (leader + 1) % 3;
    let http_of =
        |index: usize| cluster.nodes[index].server.as_ref().and_then(|server| server.metrics).expect("HTTP on");
    let (leader_http, backup_http) = (http_of(leader), http_of(backup));
    tokio::task::spawn_blocking(move || {
        let token = http_login(backup_http);
        let created = http(backup_http, "POST", "/streams", Some(&token), r#"{"name":"linearizable"}"#);
        assert!(created.starts_with("HTTP/1.1 201") || created.starts_with("HTTP/1.1 200"), "{created}");

        let path = "/streams/linearizable?consistency=linearizable";
        let redirected = http(backup_http, "GET", path, Some(&token), "");
        assert!(redirected.starts_with("HTTP/1.1 307"), "{redirected}");
        let location = format!("location: http://{leader_http}{path}");
        assert!(
            redirected.to_lowercase().contains(&location.to_lowercase()),
            "leader {leader} at {leader_http}, backup {backup} at {backup_http}: {redirected}"
        );
        // A read refused for what it is (no session, a bad query) is refused, not redirected.
        assert!(http(backup_http, "GET", path, None, "").starts_with("HTTP/1.1 401"));
        let bogus = http(backup_http, "GET", "/streams?consistency=strong", Some(&token), "");
        assert!(bogus.starts_with("HTTP/1.1 400"), "{bogus}");
        let too_long = format!("/streams/{}?consistency=linearizable", "n".repeat(300));
        let bad_identifier = http(backup_http, "GET", &too_long, Some(&token), "");
        assert!(bad_identifier.starts_with("HTTP/1.1 400"), "{bad_identifier}");
        // Serializable (the default) is served on the backup itself, once it has caught up.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let local = http(backup_http, "GET", "/streams/linearizable", Some(&token), "");
            if local.starts_with("HTTP/1.1 200") && local.contains("\"name\":\"linearizable\"") {
                break;
            }
            assert!(Instant::now() < deadline, "{local}");
            std::thread::sleep(Duration::from_millis(50));
        }

        // The primary serves the linearizable read, to a session of its own.
        let token = http_login(leader_http);
        let served = http(leader_http, "GET", path, Some(&token), "");
        assert!(served.starts_with("HTTP/1.1 200") && served.contains("\"name\":\"linearizable\""), "{served}");
    })
    .await
    .expect("the HTTP checks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linearizable_http_read_on_a_backup_is_redirected_to_the_primary() {
    tokio::time::timeout(Duration::from_secs(120), linearizable_reads_go_to_the_primary()).await.expect("bounded");
}
