//! The streaming workload: whole clusters of real nodes (N nodes x S shards, each shard hosting
//! the metadata group or partition groups), producers, consumers, consumer-group members and an
//! administrator racing metadata changes with traffic, under the network, crash and disk faults
//! of the core simulator, checked by the Kafka-log checker (`kafka_log`), by the churn ledger
//! (`churn`: a re-created topic starts empty) and by agreement of every group's replicas on
//! every committed op.

pub mod churn;
pub mod client;
pub mod cluster;
pub mod scenario;

pub use cluster::StreamingCluster;
pub use scenario::StreamingScenario;
