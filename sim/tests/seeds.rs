//! Every seed that ever failed stays fixed: each file in `seeds/` is replayed and must pass.

use vireo_sim::run::{install_panic_hook, run_seed};
use vireo_sim::seeds;

#[test]
fn every_seed_file_replays_clean() {
    install_panic_hook();
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds");
    let mut files: Vec<_> = std::fs::read_dir(&directory)
        .expect("seeds/ exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seed files in {}", directory.display());
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable seed file");
        let seed_file = seeds::parse(&text).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        let report = run_seed(seed_file.seed, &seed_file.overrides, None);
        if report.exit_code != 0 {
            failures.push(format!("{} (exit {}): {}", file.display(), report.exit_code, report.message));
        }
    }
    assert!(failures.is_empty(), "seed files failing again:\n{}", failures.join("\n"));
}
