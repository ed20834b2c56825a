//! Vireo's deterministic simulator: whole clusters of the real replica code on virtual time, with
//! a simulated network and simulated disks that fail the way real ones do, checkers for safety
//! and liveness, and seed files for every failure it ever found.
//!
//! One `u64` seed drives a ChaCha RNG that decides everything: the scenario, the workload, every
//! latency and every fault. Same seed, same binary: the same run, byte for byte (the trace hash
//! proves it).

pub mod access;
pub mod checker;
pub mod client;
pub mod cluster;
pub mod disk;
pub mod kafka_log;
pub mod local;
pub mod network;
pub mod partition_harness;
pub mod partition_mirror;
pub mod planted;
pub mod queue;
pub mod register_log;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod seeds;
pub mod sim_io;
pub mod streaming;
