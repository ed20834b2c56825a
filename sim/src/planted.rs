//! Where the simulator catches each planted bug: for every `Bug` variant, the sweep (workload and
//! overrides) and the window of `WINDOW_SEEDS` seeds in which at least `CATCHES_MIN` seeds (1%)
//! fail with the bug planted, each of them passing without it. `sim/tests/planted_bugs.rs` runs
//! every window in `cargo test`, so a change that blinds the simulator to one of them fails CI,
//! and `vireo-sim planted` prints the whole table with each window's catch rate.
//!
//! The match in `window` is exhaustive: a new variant does not compile until it names the sweep
//! that catches it.

use vireo_protocol::config::Bug;

use crate::run::{run_seed, RunReport};
use crate::scenario::{FaultLevel, Overrides, Workload};

/// Seeds in one window.
pub const WINDOW_SEEDS: u64 = 200;
/// Catches a window must hold: 1% of its seeds.
pub const CATCHES_MIN: usize = 2;

/// A sweep's window: seeds `start..start + WINDOW_SEEDS` run with `overrides`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub overrides: Overrides,
    pub start: u64,
}

impl Window {
    /// The command that sweeps this window with `bug` planted.
    pub fn command(&self, bug: Bug) -> String {
        format!(
            "vireo-sim sweep --seeds {WINDOW_SEEDS} --start {}{} --bug {}",
            self.start,
            self.overrides.arguments(),
            bug.name()
        )
    }
}

fn register() -> Overrides {
    Overrides::default()
}

fn streaming() -> Overrides {
    Overrides { workload: Workload::Streaming, ..Overrides::default() }
}

/// Why no window catches a bug yet, for the few the simulator is still blind to: the test holds
/// that these, and only these, are.
pub fn blind_spot(bug: Bug) -> Option<&'static str> {
    match bug {
        Bug::ReadUncheckedTail => Some(
            "a segment log cuts a tail it holds as soon as prepares that differ from it arrive (or the journal \
             ends before it), and a poll waits for its read index: the unchecked tail the bug serves is the \
             batches of prepares in flight, which a view change replaces only when none of the backups got them \
             (0 of 200 seeds, with or without cut-off busy primaries)",
        ),
        _ => None,
    }
}

/// The window that catches `bug`.
pub fn window(bug: Bug) -> Window {
    let at_zero = |overrides: Overrides| Window { overrides, start: 0 };
    match bug {
        Bug::AckBeforeDurable
        | Bug::CommitWithoutQuorum
        | Bug::ApplyRetryTwice
        | Bug::PartitionDurableBeforeSync
        | Bug::RestartDropsDamagedPrepares => at_zero(register()),
        // A longer log from an older view needs a backup down with its primary: heavy faults
        // make those common.
        Bug::ViewChangeTakesLongestLog => {
            at_zero(Overrides { replicas: Some(3), faults: Some(FaultLevel::Heavy), ..register() })
        }
        // A disk is lost only where the fault budget has room (heavy faults always damage one
        // disk, which rules it out): four replicas, default faults, longer runs.
        Bug::RejoinWithoutGuard => at_zero(Overrides {
            disk_loss: true,
            replicas: Some(4),
            faults: Some(FaultLevel::Default),
            requests: Some(300),
            ..register()
        }),
        Bug::SkipSendPermission
        | Bug::AcceptAnyPassword
        | Bug::DeletedGroupsKeepTheirFiles
        | Bug::AckBeforeSync
        | Bug::SegmentLogIgnoresSeals
        | Bug::LogDurabilityIgnored
        | Bug::PollWithoutReadIndex
        | Bug::SkipReadPermission
        | Bug::SegmentLogAckBeforeSync
        | Bug::MetadataAckBeforeSync => at_zero(streaming()),
        Bug::PollPastCommit | Bug::SegmentLogTrustsItsTail | Bug::ReadUncheckedTail => {
            at_zero(Overrides { replicas: Some(3), faults: Some(FaultLevel::Heavy), ..streaming() })
        }
        // Both nodes of two lose power (a shared feed) while a batch whose header is durable is
        // not yet synced in either log: slow segment syncs widen that window.
        Bug::WalHeadersBeforeLog => at_zero(Overrides {
            replicas: Some(2),
            faults: Some(FaultLevel::Heavy),
            slow_segment_syncs: true,
            ..streaming()
        }),
        Bug::DeletionNotDurable | Bug::PipelinedRequestsOvertake => at_zero(streaming()),
        // Every synced WAL trips the disk's header-order check the first time it commits.
        Bug::WalHeaderWithItsPrepare => at_zero(register()),
        // A stale kept frame needs a request that was forwarded and never prepared for its
        // backup (lost on the way, or prepared while that backup was away) and a later one of the
        // same client: faults make those.
        Bug::ElidedFromStaleKeptCopy => {
            at_zero(Overrides { replicas: Some(3), faults: Some(FaultLevel::Heavy), ..streaming() })
        }
        // A quarter of the runs fill one node's disk for a while; sends through it then.
        Bug::SendPastDiskReserve => at_zero(streaming()),
        // A single node whose disk fills with no reserve (a sixteenth of the runs), and no crash
        // that takes the kept ops with it before space is back.
        Bug::NoSpaceRefusalKeepsOp => {
            at_zero(Overrides { replicas: Some(1), faults: Some(FaultLevel::None), ..streaming() })
        }
    }
}

/// A seed of a window that failed with the bug planted.
#[derive(Clone, Debug)]
pub struct Catch {
    pub seed: u64,
    pub exit_code: i32,
    pub message: String,
}

/// What a window's seeds did with the bug planted.
#[derive(Clone, Debug, Default)]
pub struct WindowRun {
    pub seeds_run: u64,
    pub catches: Vec<Catch>,
    /// Catches whose seed fails without the bug too: not the bug's, and a bug of their own.
    pub failing_without_bug: Vec<RunReport>,
}

/// Runs `bug`'s window, seed by seed, until `enough` seeds caught it (all of the window if
/// `enough` is `None`). Every catch is run again without the bug, which must pass.
pub fn run_window(bug: Bug, enough: Option<usize>) -> WindowRun {
    let window = window(bug);
    let mut run = WindowRun::default();
    for seed in window.start..window.start + WINDOW_SEEDS {
        if enough.is_some_and(|enough| run.catches.len() >= enough) {
            break;
        }
        run.seeds_run += 1;
        let report = run_seed(seed, &window.overrides, Some(bug));
        if report.exit_code == 0 {
            continue;
        }
        let clean = run_seed(seed, &window.overrides, None);
        if clean.exit_code != 0 {
            run.failing_without_bug.push(clean);
            continue;
        }
        run.catches.push(Catch { seed, exit_code: report.exit_code, message: report.message });
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bug_has_a_window_of_its_own_command() {
        for bug in Bug::ALL {
            let command = window(bug).command(bug);
            assert!(command.ends_with(&format!("--bug {}", bug.name())), "{command}");
        }
    }
}
