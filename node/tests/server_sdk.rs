//! The published Iggy Rust SDK (`iggy = 0.11.0-edge.4`, unchanged) against a vireo-server this
//! test starts on free loopback ports: every command group of `PROTOCOL.md` (system, streams,
//! topics, partitions, messages with every polling strategy and partitioning, consumer offsets,
//! consumer groups, users and permissions, personal access tokens, segments), and the
//! reference's error codes for what is missing or forbidden.

mod sdk_conversation;
mod server_process;

use sdk_conversation::{bounded, conversation, Endpoint};
use server_process::{data_dir, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_iggy_sdk_runs_every_command_against_vireo_server() {
    // CI points it at the server the README's run command started (VIREO_SERVER_ADDRESS).
    let server = Server::external().unwrap_or_else(|| Server::start(&data_dir("sdk-conformance"), &[]));
    let endpoint = Endpoint { address: server.address, tls_ca: None };
    bounded("the conversation", conversation(&endpoint)).await;
}
