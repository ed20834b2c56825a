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
        cluster.start(0);
        cluster.start(1);
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
            let mut verdict = [0u8; 56];
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
        cluster.start(0);
        cluster.start(1);
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
        cluster.start(2);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster.nodes[2].server.as_ref().unwrap().output().contains("waiting for a quorum") {
            assert!(Instant::now() < deadline, "node 2 alone never said it waits for a quorum");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let line = cluster.nodes[2].server.as_ref().unwrap().output();
        println!("{}", line.lines().find(|line| line.contains("waiting for a quorum")).unwrap());
        // A second node makes a quorum, whatever the order they start in.
        cluster.start(0);
        create_topic(&[cluster.addresses()[2], cluster.addresses()[0]], false).await;
    };
    tokio::time::timeout(Duration::from_secs(120), run).await.expect("bounded");
}
