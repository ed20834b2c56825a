//! Vireo's protocols: the 256-byte message header shared by clients and replicas, and the
//! Viewstamped Replication (VSR Revisited) replica as a sans-IO state machine, generic over the
//! state machine it replicates.

pub mod client_table;
pub mod config;
pub mod elided;
pub mod header;
pub mod journal;
pub mod prepare_body;
pub mod replica;
pub mod request;
pub mod state_machine;
pub mod wire;

pub use config::Config;
pub use header::{Command, Header, Message};
pub use replica::{Replica, ReplicaEvent, Status};
pub use state_machine::StateMachine;
