//! The README's `curl` lines for the HTTP API, run as they are written (the block that starts
//! `# readme: http quick start`) against a vireo-server this test starts: a newcomer's first
//! HTTP session must work.

mod server_process;

use std::process::Command;

use server_process::{data_dir, Server};

const MARKER: &str = "# readme: http quick start";

/// The shell block of the README that starts with the marker line.
fn readme_block() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("the README");
    let start = readme.find(MARKER).expect("the README keeps its HTTP quick start");
    let block = &readme[start..];
    block[..block.find("```").expect("the block ends")].to_string()
}

#[test]
fn the_readme_http_quick_start_runs_as_written() {
    let server = Server::start(&data_dir("readme-curl"), &[]);
    let http = server.metrics.expect("the HTTP port is on by default");
    let script = readme_block().replace("http://127.0.0.1:3000", &format!("http://{http}"));
    let output = Command::new("timeout")
        .args(["60", "bash", "-euo", "pipefail", "-c", &script])
        .output()
        .expect("bash and curl run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the README's lines failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(r#""name":"orders""#), "the stream was created: {stdout}");
    assert!(stdout.contains(r#""payload":"aGVsbG8=""#), "the message came back: {stdout}");
    assert!(stdout.contains("pong"), "{stdout}");
    assert!(stdout.contains("vireo_connections_accepted_total"), "{stdout}");
}
