//! Same seed, same run: the trace hash is a function of the seed alone. A different seed gives a
//! different run, so the hash really does depend on what happened (the determinism checker can
//! fail).

use vireo_sim::run::run_seed;
use vireo_sim::scenario::Overrides;

#[test]
fn a_seed_replays_byte_for_byte() {
    let overrides = Overrides::default();
    let first = run_seed(7, &overrides, None);
    let second = run_seed(7, &overrides, None);
    assert_eq!(first.exit_code, 0, "{}", first.message);
    assert_eq!(first.trace_hash, second.trace_hash);
    assert_eq!(first.events, second.events);
    let other = run_seed(8, &overrides, None);
    assert_ne!(first.trace_hash, other.trace_hash);
}
