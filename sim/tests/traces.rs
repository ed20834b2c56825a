//! The protocol as stories: readable traces of scripted runs, snapshotted. A change in what the
//! replicas say to each other shows up here as a diff to read, not a hash to trust.

use vireo_sim::cluster::Cluster;
use vireo_sim::run::scenario_for;
use vireo_sim::scenario::{FaultLevel, Overrides};

/// Three replicas, one client, no random faults: only what the test scripts happens.
fn quiet_cluster(requests: u64) -> Cluster {
    let overrides = Overrides {
        replicas: Some(3),
        clients: Some(1),
        faults: Some(FaultLevel::None),
        requests: Some(requests),
        ..Default::default()
    };
    let (mut scenario, rng) = scenario_for(1, &overrides);
    scenario.journal_slots = 64;
    scenario.prepare_queue_max = 4;
    scenario.clients_max = 4;
    // The stories show the enforced mode: each WAL batch synced before it is acknowledged.
    scenario.enforce_fsync = true;
    let mut cluster = Cluster::new(scenario, rng, None);
    cluster.enable_trace();
    cluster
}

fn clients_done(cluster: &Cluster) -> bool {
    cluster.clients().iter().all(|client| client.done())
}

/// The trace without commit heartbeats (they repeat every 100 ms and say nothing new here).
fn story(cluster: &Cluster) -> String {
    cluster.trace_lines().iter().filter(|line| !line.contains(" commit view=")).cloned().collect::<Vec<_>>().join("\n")
}

#[test]
fn normal_operation() {
    let mut cluster = quiet_cluster(2);
    assert!(cluster.run_until(2_000, clients_done).unwrap(), "two requests complete");
    assert!(cluster.run_until(30, |_| false).is_ok());
    insta::assert_snapshot!(story(&cluster));
}

#[test]
fn view_change_after_the_primary_crashes() {
    let mut cluster = quiet_cluster(3);
    let first_reply = |cluster: &Cluster| cluster.clients()[0].replies >= 1;
    assert!(cluster.run_until(2_000, first_reply).unwrap());
    cluster.crash(0);
    assert!(cluster.run_until(5_000, clients_done).unwrap(), "the new view serves the rest");
    let survivor = cluster.replica(1).expect("up");
    assert_eq!(survivor.view(), 1, "replica 1 is the primary of view 1");
    insta::assert_snapshot!(story(&cluster));
}

#[test]
fn restart_with_a_torn_wal_tail() {
    let mut cluster = quiet_cluster(2);
    // Replica 1 has prepare 2 in memory, its WAL write still in flight: crash it right there.
    let holds_second = |cluster: &Cluster| cluster.replica(1).is_some_and(|replica| replica.op() >= 2);
    assert!(cluster.run_until(2_000, holds_second).unwrap());
    cluster.crash_tearing(1);
    cluster.restart(1);
    assert!(cluster.run_until(5_000, clients_done).unwrap());
    assert!(cluster.run_until(200, |cluster| cluster.replica(1).unwrap().commit_min() == 3).unwrap());
    let opened = cluster
        .trace_lines()
        .iter()
        .find(|line| line.contains("r1 opened") && !line.contains("formatted"))
        .expect("replica 1 reopened")
        .clone();
    assert!(opened.contains("op=1 "), "the unsynced prepare 2 was truncated: {opened}");
    insta::assert_snapshot!(story(&cluster));
}
