//! The churn ledger: the checker of the topic the administrator deletes and creates again while
//! producers send to it and consumers poll it (by name, so each request lands in whichever
//! incarnation the node it reaches knows).
//!
//! A re-created topic reuses the ids of the deleted one, so the Kafka-log checker's model (one
//! dense log per partition id) does not hold for it. What must hold is that a new incarnation
//! starts empty: it never holds a message of an incarnation deleted before it. The ledger knows
//! when each send was acknowledged (its batch was committed by then) and when each incarnation
//! of each partition (its creation timestamp in the metadata) was first seen committed. A group
//! exists only once its create committed, so a message acknowledged before that cannot be in it.
//!
//! The rules, exactly:
//! - `Resurrected`: the final read of an incarnation holds a value acknowledged more than
//!   `SEEN_SLACK_TICKS` before that incarnation was first seen (the harness looks once a tick,
//!   so it may see a commit up to a tick late; a reply takes at least a tick more).
//! - `ForeignValue`: a poll or the final read of the churn topic returned a value not sent to
//!   it (unmarked), which only another topic's log could have given.
//!
//! Stale polls are no anomaly: a node whose metadata lags may still serve the incarnation it
//! knows. Only the final read, of a node caught up, is held to the first rule.
//!
//! Bounds: one entry per churn value acknowledged and one per incarnation seen, both bounded by
//! the run's length.

use std::collections::{BTreeMap, HashMap};

use super::client::CHURN_VALUE;
use crate::kafka_log::PartitionKey;

/// Ticks by which the harness may see a create late.
pub const SEEN_SLACK_TICKS: u64 = 2;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChurnAnomaly {
    #[error(
        "resurrected: the incarnation of {partition} created at {created_at} (first seen at tick {seen_tick}) holds \
         value {value:#x}, acknowledged at tick {acked_tick}, before it existed"
    )]
    Resurrected { partition: PartitionKey, created_at: u64, seen_tick: u64, value: u128, acked_tick: u64 },
    #[error("foreign value: {reported_by} of the churn topic returned value {value:#x}, which was never sent to it")]
    ForeignValue { reported_by: ChurnRead, value: u128 },
}

/// Who read the churn topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChurnRead {
    /// A consumer's poll, by name (whichever incarnation its node knew).
    Poll,
    /// The final read of one partition's incarnation on node 0.
    FinalRead(PartitionKey),
}

impl std::fmt::Display for ChurnRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChurnRead::Poll => write!(f, "a poll"),
            ChurnRead::FinalRead(partition) => write!(f, "the final read of {partition}"),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ChurnLedger {
    acked: HashMap<u128, u64>,
    incarnations: BTreeMap<(PartitionKey, u64), u64>,
    /// Final reads of incarnations that held values acknowledged earlier (a run's measure that
    /// the rule had something to look at).
    pub values_checked: u64,
}

impl ChurnLedger {
    /// The harness saw `partition`'s incarnation created at `created_at` committed at `tick`.
    pub fn seen(&mut self, partition: PartitionKey, created_at: u64, tick: u64) {
        self.incarnations.entry((partition, created_at)).or_insert(tick);
    }

    /// A send of `values` to the churn topic was acknowledged at `tick`.
    pub fn acked(&mut self, values: &[u128], tick: u64) {
        for value in values {
            self.acked.entry(*value).or_insert(tick);
        }
    }

    /// A read of the churn topic returned `values`.
    pub fn polled(&self, reported_by: ChurnRead, values: &[u128]) -> Result<(), ChurnAnomaly> {
        match values.iter().find(|value| *value & CHURN_VALUE == 0) {
            Some(value) => Err(ChurnAnomaly::ForeignValue { reported_by, value: *value }),
            None => Ok(()),
        }
    }

    /// The final read of the incarnation of `partition` created at `created_at`.
    pub fn final_read(
        &mut self,
        partition: PartitionKey,
        created_at: u64,
        values: &[u128],
    ) -> Result<(), ChurnAnomaly> {
        self.polled(ChurnRead::FinalRead(partition), values)?;
        // Not seen: created and read within the same tick, so nothing was acknowledged before it.
        let Some(&seen_tick) = self.incarnations.get(&(partition, created_at)) else { return Ok(()) };
        for value in values {
            let Some(&acked_tick) = self.acked.get(value) else { continue };
            self.values_checked += 1;
            if acked_tick + SEEN_SLACK_TICKS < seen_tick {
                return Err(ChurnAnomaly::Resurrected { partition, created_at, seen_tick, value: *value, acked_tick });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: PartitionKey = PartitionKey { stream: 1, topic: 0, partition: 0 };

    #[test]
    fn a_value_acknowledged_before_its_incarnation_existed_is_resurrected() {
        let mut ledger = ChurnLedger::default();
        ledger.seen(KEY, 100, 10);
        ledger.acked(&[CHURN_VALUE | 1], 20);
        ledger.seen(KEY, 500, 50);
        ledger.acked(&[CHURN_VALUE | 2], 60);
        // The old incarnation's value in the new one's log: caught.
        let caught = ledger.final_read(KEY, 500, &[CHURN_VALUE | 1, CHURN_VALUE | 2]);
        assert!(matches!(caught, Err(ChurnAnomaly::Resurrected { acked_tick: 20, seen_tick: 50, .. })), "{caught:?}");
        // Its own values, and a value acknowledged within the slack of its creation: fine.
        ledger.acked(&[CHURN_VALUE | 3], 48);
        assert_eq!(ledger.final_read(KEY, 500, &[CHURN_VALUE | 3, CHURN_VALUE | 2]), Ok(()));
        // The old incarnation, read as itself: fine.
        assert_eq!(ledger.final_read(KEY, 100, &[CHURN_VALUE | 1]), Ok(()));
    }

    #[test]
    fn a_value_of_another_topic_is_foreign() {
        let ledger = ChurnLedger::default();
        assert_eq!(
            ledger.polled(ChurnRead::Poll, &[CHURN_VALUE | 4, 7]),
            Err(ChurnAnomaly::ForeignValue { reported_by: ChurnRead::Poll, value: 7 })
        );
        assert_eq!(ledger.polled(ChurnRead::Poll, &[CHURN_VALUE | 4]), Ok(()));
        let caught = ledger.clone().final_read(KEY, 1, &[9]);
        assert_eq!(caught, Err(ChurnAnomaly::ForeignValue { reported_by: ChurnRead::FinalRead(KEY), value: 9 }));
    }
}
