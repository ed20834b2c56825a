//! Every planted bug is caught by a sweep, not only by a unit test: each `Bug` variant's window
//! (`vireo_sim::planted::window`) holds at least `CATCHES_MIN` seeds that fail with the bug and
//! pass without it, but for the blind spots `planted::blind_spot` names (and says why). A change
//! that blinds the simulator to another bug fails here; one that makes a blind spot seen says so.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use vireo_protocol::config::Bug;
use vireo_sim::planted::{blind_spot, run_window, window, WindowRun, CATCHES_MIN};
use vireo_sim::run::install_panic_hook;

#[test]
fn every_planted_bug_is_caught_by_its_window() {
    install_panic_hook();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(Bug, WindowRun)>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |cores| cores.get()).min(4);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let at = next.fetch_add(1, Ordering::Relaxed);
                let Some(&bug) = Bug::ALL.get(at) else { return };
                // A blind spot's window runs whole: a catch there is news.
                let enough = blind_spot(bug).is_none().then_some(CATCHES_MIN);
                let run = run_window(bug, enough);
                results.lock().unwrap().push((bug, run));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(bug, _)| Bug::ALL.iter().position(|listed| listed == bug));
    let mut blind = Vec::new();
    for (bug, run) in &results {
        let seeds: Vec<u64> = run.catches.iter().map(|catch| catch.seed).collect();
        println!(
            "{:<34} caught at seeds {seeds:?} ({} run): {}",
            bug.name(),
            run.seeds_run,
            window(*bug).command(*bug)
        );
        for clean in &run.failing_without_bug {
            blind.push(format!("{}: seed {} fails without the bug: {}", bug.name(), clean.seed, clean.message));
        }
        let caught = run.catches.len() >= CATCHES_MIN;
        match (caught, blind_spot(*bug)) {
            (false, None) => blind.push(format!(
                "{}: caught by {} seeds of its window: {}",
                bug.name(),
                run.catches.len(),
                window(*bug).command(*bug)
            )),
            (true, Some(_)) => blind.push(format!(
                "{}: listed as a blind spot but caught at seeds {seeds:?}: give it its window",
                bug.name()
            )),
            (false, Some(why)) => println!("  a known blind spot: {why}"),
            (true, None) => {}
        }
    }
    assert_eq!(results.len(), Bug::ALL.len());
    assert!(blind.is_empty(), "the simulator is blind:\n{}", blind.join("\n"));
}
