//! vireo-server, the production node: the configuration (`config`), the shard loop that runs a
//! `Node` on glommio (`shard_loop`), the root credentials at first boot (`root_credentials`),
//! `/metrics` (`metrics`), the HTTP port (`http`), its API (`http_api`, `gateway`), the Web UI (`web_ui`), TLS on the client and HTTP ports (`tls`) and the process around them (`process`: flags, data directory,
//! signals, startup banner, exit codes). Only this module and `vireo-io`'s driver know about
//! glommio, threads, sockets and real files; everything they feed is the simulator-proven node.

pub mod accept_backoff;
pub mod config;
pub mod cors;
pub mod gateway;
pub mod http;
pub mod http_api;
pub mod metrics;
pub mod process;
pub mod replica_links;
pub mod root_credentials;
pub mod shard_loop;
pub mod snapshot;
pub mod tls;
pub mod web_ui;
