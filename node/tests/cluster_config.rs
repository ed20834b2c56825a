//! A cluster's front line against misconfiguration: a peer without the shared secret is refused
//! and counted (a node with another secret, and a raw dialer with a forged hello), while the nodes
//! that share it go on serving; a node whose roster differs from its peers' stops with one line.

mod cluster_process;
mod server_process;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use cluster_process::{create_topic, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_the_shared_secret_is_refused_and_counted() {
    let run = async {
        let mut cluster = Cluster::new("cluster-secret", 3).await;
        // A new cluster forms once every node has said it holds nothing; then node 2 comes back
        // with another secret.
        cluster.start_all();
        create_topic(&cluster.addresses(), false).await;
        cluster.kill(2);
        cluster.start_with_env(2, &[("VIREO_CLUSTER_AUTH_SECRET", "not-the-cluster-secret-but-long-enough-anyway")]);
        // The two that share the secret are a quorum: they serve.
        create_topic(&cluster.addresses()[..2], false).await;
        // A dialer with a forged hello gets the refusal, and the connection ends.
        let replica = cluster.replica_address(0);
        let verdict = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(replica).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut challenge = [0u8; 48];
            stream.read_exact(&mut challenge).unwrap();
            assert_eq!(&challenge[..8], b"VIREO-C1");
            let mut hello = [0u8; 96];
            hello[..8].copy_from_slice(b"VIREO-H1");
            hello[8..24].copy_from_slice(&challenge[8..24]);
            hello[24] = 1;
            hello[25] = 3;
            stream.write_all(&hello).unwrap();
            let mut verdict = [0u8; 64];
            stream.read_exact(&mut verdict).unwrap();
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
            (verdict[8], rest.len())
        })
        .await
        .unwrap();
        assert_eq!(verdict, (1, 0), "verdict 1 (not authenticated), then the connection ends");
        let deadline = Instant::now() + Duration::from_secs(20);
        let refused = |cluster: &Cluster, node: usize| {
            cluster.nodes[node].server.as_ref().unwrap().metric("vireo_refusals_total{reason=\"replica_link_auth\"}")
        };
        while refused(&cluster, 1) == 0 || refused(&cluster, 0) < 2 {
            assert!(Instant::now() < deadline, "the nodes never counted node 2's refused links");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!(
            "refused for the secret: node 0 {} links, node 1 {} links",
            refused(&cluster, 0),
            refused(&cluster, 1)
        );
        assert_eq!(
            cluster.nodes[0].server.as_ref().unwrap().metric("vireo_replica_peers_linked"),
            1,
            "node 0 links to node 1 only"
        );
    };
    tokio::time::timeout(Duration::from_secs(120), run).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_roster_differs_stops_with_one_line() {
    let run = async {
        let mut cluster = Cluster::new("cluster-roster", 3).await;
        cluster.start_all();
        create_topic(&cluster.addresses(), false).await;
        cluster.kill(2);
        create_topic(&cluster.addresses()[..2], false).await;
        cluster.start_with_env(2, &[("VIREO_CLUSTER_NODES_0_NAME", "renamed")]);
        let server = cluster.nodes[2].server.as_mut().unwrap();
        let status = tokio::task::block_in_place(|| server.wait_exit(Duration::from_secs(30)))
            .expect("the node with another roster stops");
        assert!(!status.success());
        let output = server.output();
        let errors: Vec<&str> = output.lines().filter(|line| line.starts_with("vireo-server: ")).collect();
        assert_eq!(errors.len(), 1, "{output}");
        assert!(errors[0].starts_with("vireo-server: roster mismatch: replicas 0, 1"), "{}", errors[0]);
        println!("{}", errors[0]);
        // The two that agree go on.
        for node in 0..2 {
            assert!(cluster.nodes[node].server.as_mut().unwrap().is_running(), "node {node} stopped");
        }
        create_topic(&cluster.addresses()[..2], false).await;
    };
    tokio::time::timeout(Duration::from_secs(120), run).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_alone_waits_for_a_quorum_and_says_so() {
    let run = async {
        let mut cluster = Cluster::new("cluster-alone", 3).await;
        // A first boot: a node with an empty data directory forms a new cluster only once every
        // peer has said it holds nothing (else it could format over a history it lost).
        cluster.start(2);
        let says = |cluster: &Cluster, what: &str| cluster.nodes[2].server.as_ref().unwrap().output().contains(what);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !says(&cluster, "waiting for every peer to say whether the cluster has history") {
            assert!(Instant::now() < deadline, "node 2 alone never said it waits for its peers");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        cluster.start(0);
        cluster.start(1);
        create_topic(&cluster.addresses(), false).await;
        // Two nodes make the quorum that creates the topic: node 2 may not have formed yet (it
        // failed here once in a clean-clone CI run, killed before its metadata existed, and came
        // back empty). Only a node that holds its metadata has history to wait with.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster.nodes[2].data.join("metadata").exists() {
            assert!(Instant::now() < deadline, "node 2 never formed its metadata");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // With data, a node alone waits for a quorum and says so.
        for node in 0..3 {
            cluster.kill(node);
        }
        cluster.start(2);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !says(&cluster, "waiting for a quorum") {
            assert!(
                Instant::now() < deadline,
                "node 2 alone never said it waits for a quorum; it said:\n{}",
                cluster.nodes[2].server.as_ref().unwrap().output()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let line = cluster.nodes[2].server.as_ref().unwrap().output();
        println!("{}", line.lines().find(|line| line.contains("waiting for a quorum")).unwrap());
        // The others make a quorum. (Not one of them alone: the node that heard last at the
        // first boot may have found the others' first commit, and then rejoined as a node that
        // lost its disk would, with no vote until it caught up, which a short first run may not
        // have given it time to do.)
        cluster.start(0);
        cluster.start(1);
        create_topic(&cluster.addresses(), false).await;
    };
    tokio::time::timeout(Duration::from_secs(120), run).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_sets_the_same_root_credentials_at_first_boot_and_a_generated_one_is_refused() {
    let run = async {
        let mut cluster = Cluster::new("cluster-root", 3).await;
        let credentials = [("VIREO_ROOT_USERNAME", "admin"), ("VIREO_ROOT_PASSWORD", "cluster-root-password")];
        for node in 0..3 {
            cluster.start_node(node, &credentials, &[]);
        }
        // Every node's shard 0 tries the change; one commits it, the others see it and accept.
        let deadline = Instant::now() + Duration::from_secs(60);
        for address in cluster.addresses() {
            loop {
                let login = async {
                    let client = iggy::prelude::IggyClient::builder()
                        .with_tcp()
                        .with_server_address(address.to_string())
                        .with_reconnection_max_retries(Some(0))
                        .build()?;
                    iggy::prelude::Client::connect(&client).await?;
                    iggy::prelude::UserClient::login_user(&client, "admin", "cluster-root-password").await?;
                    let refused = iggy::prelude::UserClient::login_user(&client, "iggy", "iggy").await.is_err();
                    Ok::<_, iggy::prelude::IggyError>(refused)
                };
                match tokio::time::timeout(Duration::from_secs(5), login).await {
                    Ok(Ok(default_refused)) => {
                        assert!(default_refused, "{address}: the default credentials still log in");
                        break;
                    }
                    other => {
                        assert!(Instant::now() < deadline, "{address}: no login with the set credentials: {other:?}");
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                }
            }
        }
        for node in 0..3 {
            assert!(cluster.nodes[node].server.as_mut().unwrap().is_running(), "node {node} stopped");
        }
        // Without credentials a cluster node refuses to start: each would generate its own.
        let (status, stderr) = server_process::run_to_exit(
            &["--config", cluster.nodes[0].config.to_str().unwrap(), "--replica-id", "0"],
            &[("VIREO_SYSTEM_PATH", server_process::data_dir("cluster-root-none").to_str().unwrap())],
        );
        assert!(!status.success());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("VIREO_ROOT_USERNAME and VIREO_ROOT_PASSWORD"), "{stderr}");
    };
    tokio::time::timeout(Duration::from_secs(120), run).await.expect("bounded");
}

#[test]
fn vireo_cluster_starts_three_nodes_that_serve_and_stops_them_on_sigterm() {
    use std::io::BufRead;
    let dir = server_process::data_dir("vireo-cluster-run");
    let mut launcher = std::process::Command::new(cluster_process::CLUSTER)
        .args(["--nodes", "3", "--dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vireo-cluster starts");
    let mut lines = std::io::BufReader::new(launcher.stdout.take().unwrap()).lines();
    let mut addresses = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("node ") {
            let address = rest.split("clients ").nth(1).unwrap().split(',').next().unwrap();
            addresses.push(address.parse::<std::net::SocketAddr>().unwrap());
        }
        if line.ends_with("Ctrl-C stops them") {
            break;
        }
    }
    assert_eq!(addresses.len(), 3);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(90), create_topic(&addresses, false)).await.expect("bounded")
    });
    // SAFETY: kill(2) on this test's child.
    unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = launcher.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "vireo-cluster did not stop its nodes");
        std::thread::sleep(Duration::from_millis(50));
    };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(status.success(), "{status:?}: {rest:?}");
    assert_eq!(rest.last().map(String::as_str), Some("stopped"));
    for node in 0..3 {
        let log = std::fs::read_to_string(dir.join(format!("node-{node}.log"))).unwrap();
        assert!(log.contains("vireo-server stopped"), "node {node} did not stop gracefully: {log}");
    }
}
