//! Real clusters of vireo-server processes on 127.0.0.1 under real faults, with the Iggy SDK as
//! the client and the simulator's Kafka-log checker as the judge (no lost, duplicated, reordered
//! or skipped message): (a) one node SIGKILLed and restarted at once every few seconds, one
//! restart on an empty data directory; (b) the primary SIGSTOPped past the view-change timeout, then
//! continued; (c) one node's replica links cut and healed by the proxy; (d) every node SIGKILLed
//! at once and restarted at once, on a topic with `enforce_fsync`; and five-node variants of (a) and (c)
//! with two nodes down at once; (g) one node's disk fails (its ext4 loop mount turns read-only
//! under it): that node stops with an ERROR line naming the file and errno, the other two go on
//! taking writes, and restarted on the repaired disk it is repaired by its peers. Each prints its
//! figures: messages acknowledged, faults, and the longest unavailability (fault to the next
//! acknowledged send).
//!
//! The scenarios run one at a time (`SERIAL`): each runs three to five servers on two cores.

mod cluster_process;
mod loop_mount;
mod server_process;

use std::time::{Duration, Instant};

use cluster_process::{create_topic, Cluster, Workload};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a scenario's run reports.
fn report(
    name: &str,
    workload_result: Result<vireo_sim::kafka_log::CheckSummary, String>,
    faults: usize,
    worst: Duration,
) {
    let summary = workload_result.unwrap_or_else(|anomaly| panic!("{name}: the checker found {anomaly}"));
    println!(
        "{name}: {} messages acknowledged ({} sends; {} indeterminate), {} polled, 0 lost, 0 duplicated; {faults} faults; longest unavailability {:.2} s",
        summary.values_acked,
        summary.sends_acked,
        summary.sends_indeterminate,
        summary.messages_polled,
        worst.as_secs_f64()
    );
    assert!(summary.values_acked >= 200, "{name}: only {} messages acknowledged", summary.values_acked);
    assert!(summary.messages_polled > 0, "{name}: the consumers polled nothing");
    assert!(worst < Duration::from_secs(30), "{name}: the cluster did not come back within 30 s of a fault");
}

async fn with_cluster(name: &str, nodes: u8, enforce_fsync: bool) -> (Cluster, Workload) {
    let mut cluster = Cluster::new(name, nodes).await;
    cluster.start_all();
    create_topic(&cluster.addresses(), enforce_fsync).await;
    let workload = Workload::start(cluster.addresses(), 4);
    tokio::time::sleep(Duration::from_secs(2)).await;
    (cluster, workload)
}

/// (a): every few seconds one node (two at once with five) is SIGKILLed and restarted; the
/// last restart of each node's turn on an empty data directory (state transfer).
async fn kill_loop(name: &str, nodes: u8, down_at_once: usize, rounds: usize) {
    let (mut cluster, workload) = with_cluster(name, nodes, false).await;
    let mut faults = Vec::new();
    for round in 0..rounds {
        let victims: Vec<usize> = (0..down_at_once).map(|k| (round * down_at_once + k) % nodes as usize).collect();
        for &victim in &victims {
            cluster.kill(victim);
        }
        faults.push(Instant::now());
        // Started again at once, on the same ports, with the clients still trying them (a killed
        // process's listening socket may outlive it briefly: the server waits for its port).
        for &victim in &victims {
            if round + 1 == rounds {
                // The last one comes back with nothing: it rejoins by state transfer.
                let _ = std::fs::remove_dir_all(&cluster.nodes[victim].data);
            }
            cluster.start(victim);
        }
        tokio::time::sleep(Duration::from_millis(4000)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let worst = workload.unavailability_after(&faults);
    report(name, workload.finish(&cluster.addresses()).await, faults.len(), worst);
    // The nodes that came back with empty data directories hold the partitions again.
    let wiped: Vec<usize> = (0..down_at_once).map(|k| ((rounds - 1) * down_at_once + k) % nodes as usize).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in wiped {
        while cluster.segment_bytes(node) == 0 {
            assert!(Instant::now() < deadline, "{name}: node {node}, restarted empty, holds no segment after 30 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!(
            "{name}: node {node}, restarted with an empty data directory, holds {} segment bytes",
            cluster.segment_bytes(node)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_nodes_one_sigkilled_and_restarted_every_few_seconds() {
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(Duration::from_secs(240), kill_loop("cluster-a", 3, 1, 4)).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_three_nodes_the_primary_sigstopped_past_the_view_change_timeout() {
    let _serial = SERIAL.lock().await;
    let run = async {
        let (cluster, workload) = with_cluster("cluster-b", 3, false).await;
        let mut faults = Vec::new();
        for _ in 0..2 {
            let leader = cluster.leader().await;
            cluster.signal(leader, libc::SIGSTOP);
            faults.push(Instant::now());
            tokio::time::sleep(Duration::from_secs(4)).await;
            cluster.signal(leader, libc::SIGCONT);
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        let worst = workload.unavailability_after(&faults);
        report("cluster-b", workload.finish(&cluster.addresses()).await, faults.len(), worst);
    };
    tokio::time::timeout(Duration::from_secs(240), run).await.expect("bounded");
}

/// (c): one node's replica links (two nodes' with five) cut at the proxy and healed.
async fn cut_links(name: &str, nodes: u8, cut_at_once: usize, rounds: usize) {
    let (cluster, workload) = with_cluster(name, nodes, false).await;
    let mut faults = Vec::new();
    for round in 0..rounds {
        for k in 0..cut_at_once {
            cluster.cuts.isolate(((round * cut_at_once + k) % nodes as usize) as u8, nodes);
        }
        faults.push(Instant::now());
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.cuts.heal();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let worst = workload.unavailability_after(&faults);
    let severed = cluster.cuts.severed.load(std::sync::atomic::Ordering::SeqCst);
    assert!(severed > 0, "{name}: the cuts severed no link");
    println!("{name}: the proxies severed or refused {severed} replica links");
    report(name, workload.finish(&cluster.addresses()).await, faults.len(), worst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_three_nodes_one_nodes_replica_links_cut_and_healed() {
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(Duration::from_secs(240), cut_links("cluster-c", 3, 1, 3)).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_three_nodes_all_sigkilled_at_once_with_enforce_fsync() {
    let _serial = SERIAL.lock().await;
    let run = async {
        let (mut cluster, workload) = with_cluster("cluster-d", 3, true).await;
        let mut faults = Vec::new();
        for _ in 0..2 {
            for node in 0..3 {
                cluster.kill(node);
            }
            faults.push(Instant::now());
            cluster.start_all();
            tokio::time::sleep(Duration::from_secs(4)).await;
        }
        let worst = workload.unavailability_after(&faults);
        report("cluster-d", workload.finish(&cluster.addresses()).await, faults.len(), worst);
    };
    tokio::time::timeout(Duration::from_secs(240), run).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_five_nodes_two_sigkilled_at_once() {
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(Duration::from_secs(240), kill_loop("cluster-e", 5, 2, 3)).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_five_nodes_two_nodes_links_cut_at_once() {
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(Duration::from_secs(240), cut_links("cluster-f", 5, 2, 2)).await.expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_three_nodes_one_nodes_disk_fails_and_it_comes_back_on_a_repaired_disk() {
    let _serial = SERIAL.lock().await;
    let run = async {
        let mount =
            loop_mount::LoopMount::new("cluster-g-disk", 256).unwrap_or_else(|why| panic!("no loop mount: {why}"));
        let mut cluster = Cluster::new("cluster-g", 3).await;
        cluster.set_data(2, mount.dir("node-2"));
        cluster.start_all();
        create_topic(&cluster.addresses(), true).await;
        let workload = Workload::start(cluster.addresses(), 4);
        tokio::time::sleep(Duration::from_secs(2)).await;
        mount.fail().unwrap_or_else(|why| panic!("the file system could not be failed: {why}"));
        let failed_at = Instant::now();
        // A cluster node stops on it (its peers go on); it says why first.
        let status = cluster.server(2).expect("running").wait_exit(Duration::from_secs(20));
        let output = cluster.server(2).map(|server| server.output()).unwrap_or_default();
        assert!(status.is_some_and(|status| !status.success()), "node 2 did not stop: {status:?}\n{output}");
        assert!(output.lines().any(|line| line.contains("ERROR") && line.contains("(errno ")), "{output}");
        println!(
            "fault-table: a 3-node cluster, one node's disk fails: that node stops in {} ms (ERROR with file and \
             errno), the other two keep taking writes",
            failed_at.elapsed().as_millis()
        );
        tokio::time::sleep(Duration::from_secs(4)).await;
        cluster.kill(2);
        mount.repair().unwrap_or_else(|why| panic!("the file system could not be repaired: {why}"));
        cluster.start(2);
        tokio::time::sleep(Duration::from_secs(4)).await;
        let worst = workload.unavailability_after(&[failed_at]);
        report("cluster-g", workload.finish(&cluster.addresses()).await, 1, worst);
    };
    tokio::time::timeout(Duration::from_secs(240), run).await.expect("bounded");
}
