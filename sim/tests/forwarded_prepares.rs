//! Prepares that come back without their batches to the backup that forwarded the requests
//! (`vireo_protocol::replica` `forwarded`): through heavy faults (a backup that crashes between
//! its forward and the prepare and restarts without its kept frames, prepares lost on the way,
//! view changes while requests are in flight) every seed passes its checkers, backups rebuild the
//! prepares from what they kept, and a miss falls back to the whole prepare. A backup that
//! rebuilds from a stale kept frame, unchecked, is caught by the replicas' agreement.

use vireo_protocol::config::Bug;
use vireo_sim::run::{install_panic_hook, run_seed, RunReport};
use vireo_sim::scenario::{FaultLevel, Overrides, Workload};

fn three_heavy() -> Overrides {
    Overrides {
        workload: Workload::Streaming,
        replicas: Some(3),
        faults: Some(FaultLevel::Heavy),
        ..Default::default()
    }
}

fn figure(report: &RunReport, name: &str) -> u64 {
    let figures = report.streaming.as_deref().expect("a streaming run reports its figures");
    let at = figures.find(&format!(" {name}=")).unwrap_or_else(|| panic!("no {name} in {figures}")) + name.len() + 2;
    figures[at..].split(' ').next().unwrap().parse().expect("a number")
}

#[test]
fn elided_prepares_are_rebuilt_and_misses_fall_back_through_faults() {
    install_panic_hook();
    let (mut elided, mut rebuilt, mut missed, mut crashes) = (0, 0, 0, 0);
    for seed in 0..48 {
        let report = run_seed(seed, &three_heavy(), None);
        assert_eq!(report.exit_code, 0, "seed {seed}: {} ({})", report.message, report.scenario);
        elided += figure(&report, "prepares_elided");
        rebuilt += figure(&report, "prepares_rebuilt");
        missed += figure(&report, "elided_missed");
        crashes += report.crashes;
    }
    // The figures are of the replicas running at the end: a crash takes a replica's with it.
    assert!(elided >= 500, "only {elided} prepares elided in 48 seeds");
    assert!(rebuilt >= 500, "only {rebuilt} prepares rebuilt in 48 seeds");
    assert!(missed >= 1, "no elided prepare missed its kept frame in 48 seeds ({crashes} crashes)");
}

#[test]
fn a_backup_that_rebuilds_from_a_stale_kept_frame_is_caught() {
    install_panic_hook();
    let (seed, report) = (0..48)
        .map(|seed| (seed, run_seed(seed, &three_heavy(), Some(Bug::ElidedFromStaleKeptCopy))))
        .find(|(_, report)| report.exit_code != 0)
        .expect("the stale kept frame caught within 48 seeds");
    // A release build finds the replicas committed different bodies; a debug build stops
    // earlier, at the journal's assertion that a prepare's body is the one its header names.
    assert!(
        (report.exit_code == 129 && report.message.contains("committed op"))
            || (report.exit_code == 127 && report.message.contains("valid_checksum_body")),
        "seed {seed}: exit {}: {}",
        report.exit_code,
        report.message
    );
    assert_eq!(run_seed(seed, &three_heavy(), None).exit_code, 0, "seed {seed} fails without the bug");
}
