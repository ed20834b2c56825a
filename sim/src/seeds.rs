//! Seed files: every seed that ever failed, kept in `seeds/` and replayed by the tests forever.
//!
//! A file is `key = value` lines (`#` starts a comment): `seed` (required), optionally `replicas`,
//! `clients`, `faults`, `requests`, `shards`, `workload` (the overrides the failing run used), and `bug`, one line on
//! what broke and how it was fixed.

use crate::scenario::{FaultLevel, Overrides, Volume, Workload};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedFile {
    pub seed: u64,
    pub overrides: Overrides,
    pub bug: String,
}

pub fn parse(text: &str) -> Result<SeedFile, String> {
    let mut seed = None;
    let mut overrides = Overrides::default();
    let mut bug = String::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) = line.split_once('=').ok_or_else(|| format!("line {}: expected key = value", number + 1))?;
        let (key, value) = (key.trim(), value.trim());
        let invalid = |what: &str| format!("line {}: invalid {what} {value:?}", number + 1);
        match key {
            "seed" => seed = Some(value.parse().map_err(|_| invalid("seed"))?),
            "replicas" => overrides.replicas = Some(value.parse().map_err(|_| invalid("replicas"))?),
            "clients" => overrides.clients = Some(value.parse().map_err(|_| invalid("clients"))?),
            "requests" => overrides.requests = Some(value.parse().map_err(|_| invalid("requests"))?),
            "rolling_restart_ticks" => {
                overrides.rolling_restart_ticks = Some(value.parse().map_err(|_| invalid("rolling_restart_ticks"))?)
            }
            "volume" => overrides.volume = Some(Volume::parse(value).ok_or_else(|| invalid("volume"))?),
            "shards" => overrides.shards = Some(value.parse().map_err(|_| invalid("shards"))?),
            "disk_loss" => overrides.disk_loss = value.parse().map_err(|_| invalid("disk_loss"))?,
            "slow_segment_syncs" => {
                overrides.slow_segment_syncs = value.parse().map_err(|_| invalid("slow_segment_syncs"))?
            }
            "workload" => overrides.workload = Workload::parse(value).ok_or_else(|| invalid("workload"))?,
            "faults" => overrides.faults = Some(FaultLevel::parse(value).ok_or_else(|| invalid("faults"))?),
            "bug" => bug = value.to_string(),
            other => return Err(format!("line {}: unknown key {other:?}", number + 1)),
        }
    }
    Ok(SeedFile { seed: seed.ok_or("no seed line")?, overrides, bug })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let file = parse("# found by a sweep\nseed = 42\nreplicas = 3\nfaults = heavy\nbug = lost a commit\n").unwrap();
        assert_eq!(file.seed, 42);
        assert_eq!(file.overrides.replicas, Some(3));
        assert_eq!(file.overrides.faults, Some(FaultLevel::Heavy));
        assert!(parse("replicas = 3").is_err());
        assert!(parse("seed = x").is_err());
        assert!(parse("seed = 1\ncolour = blue").is_err());
    }
}
