//! The WAL's group commit under load, with durability enforced: one sync per commit, and each
//! commit's sync makes the redundant headers of the prepares the commit before made durable and
//! its own prepares durable at once. That a header never shares a sync with its own prepare is
//! checked by the simulated disk on every write of every run (`SimDisk`'s header-order check,
//! which the planted `Bug::WalHeaderWithItsPrepare` proves can fail).

use vireo_sim::cluster::Cluster;
use vireo_sim::run::scenario_for;
use vireo_sim::scenario::{FaultLevel, Overrides};

#[test]
fn a_busy_wal_syncs_headers_and_the_next_prepares_together() {
    let overrides = Overrides {
        replicas: Some(3),
        clients: Some(16),
        faults: Some(FaultLevel::None),
        requests: Some(40),
        ..Default::default()
    };
    let (mut scenario, rng) = scenario_for(1, &overrides);
    scenario.enforce_fsync = true;
    scenario.journal_slots = 1024;
    scenario.clients_max = 16;
    scenario.prepare_queue_max = 8;
    let mut cluster = Cluster::new(scenario, rng, None);
    let done = |cluster: &Cluster| cluster.clients().iter().all(|client| client.done());
    assert!(cluster.run_until(60_000, done).expect("no violation"), "every request is answered");
    let (syncs, shared) = cluster.wal_syncs();
    println!("WAL syncs: {syncs}, of which {shared} made headers and the next prepares durable together");
    // Before, a commit synced its prepares, then their headers: no sync held both.
    assert!(shared > 0, "none of {syncs} WAL syncs covered headers and prepares together");
}
