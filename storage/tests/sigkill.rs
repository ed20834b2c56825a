//! SIGKILL in the middle of durable appends, then reopen: every batch the log reported durable is
//! there, whatever was not synced is cut, and everything served checks out. Three rounds on the
//! same directory, so recovery also reopens what an earlier recovery left.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_vireo-storage-bench");
const PARTITIONS: u32 = 4;

/// Runs `soak` until it has reported `lines` durable offsets (or a second passed), kills it with
/// SIGKILL, and returns the last durable offset of each partition.
fn soak_and_kill(dir: &std::path::Path, lines: usize) -> BTreeMap<u32, u64> {
    let mut child = Command::new(BENCH)
        .args(["soak", "--dir", dir.to_str().unwrap(), "--partitions", &PARTITIONS.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the soak");
    let mut durable = BTreeMap::new();
    let started = Instant::now();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut seen = 0;
    while seen < lines && started.elapsed() < Duration::from_secs(10) {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[0], "durable", "unexpected soak output: {line}");
        let (partition, offset): (u32, u64) = (fields[1].parse().unwrap(), fields[2].parse().unwrap());
        let previous = durable.insert(partition, offset).unwrap_or(0);
        assert!(offset >= previous, "durable went back on partition {partition}");
        seen += 1;
    }
    // Child::kill sends SIGKILL on Unix: no chance to flush or close anything.
    child.kill().expect("kill the soak");
    child.wait().unwrap();
    assert!(seen > 0, "the soak reported nothing durable");
    durable
}

/// Reopens the directory and returns each partition's recovered end offset.
fn verify(dir: &std::path::Path) -> BTreeMap<u32, u64> {
    let output = Command::new(BENCH)
        .args(["verify", "--dir", dir.to_str().unwrap(), "--partitions", &PARTITIONS.to_string()])
        .output()
        .expect("run verify");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "verify failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("verified"), "{stdout}");
    stdout
        .lines()
        .filter(|line| line.starts_with("partition "))
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields[9], "false", "a crash of unsynced appends is not corruption: {line}");
            (fields[1].parse().unwrap(), fields[3].parse().unwrap())
        })
        .collect()
}

#[test]
fn every_synced_batch_survives_sigkill_and_the_rest_is_cut() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("vireo-sigkill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut floor: BTreeMap<u32, u64> = BTreeMap::new();
    for round in 0..3 {
        let durable = soak_and_kill(&dir, 200);
        let recovered = verify(&dir);
        assert_eq!(recovered.len(), PARTITIONS as usize);
        for (partition, end) in &recovered {
            let synced = durable.get(partition).copied().unwrap_or(0).max(floor.get(partition).copied().unwrap_or(0));
            assert!(
                *end >= synced,
                "round {round}: partition {partition} recovered to {end}, but {synced} was durable"
            );
        }
        floor = recovered;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
