//! The HTTP port of a vireo-server this test starts: what it serves (`/ping`, `/metrics`, a JSON
//! 404 for the rest), and hostile HTTP refused with the reference's status codes while the
//! server serves on: an oversized head (431), an oversized body (413), a head trickled too slowly
//! (closed), one connection more than the port holds (503).

mod server_process;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use server_process::{data_dir, Server};

/// Sends `request` and reads the answer until the server closes (bounded): status and body.
fn exchange(address: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("the HTTP port");
    stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
    (status, body)
}

fn get(address: SocketAddr, path: &str) -> (u16, String) {
    exchange(address, format!("GET {path} HTTP/1.1\r\nhost: vireo\r\nconnection: close\r\n\r\n").as_bytes())
}

#[test]
fn the_http_port_serves_ping_and_metrics_and_refuses_hostile_requests_with_their_codes() {
    let server = Server::start(&data_dir("http-port"), &[]);
    let http = server.metrics.expect("the HTTP port is on by default");
    assert_eq!(get(http, "/ping"), (200, "pong".to_string()));
    let (status, metrics) = get(http, "/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("vireo_connections_accepted_total"), "{metrics}");
    let (status, body) = get(http, "/no/such/route");
    assert_eq!(status, 404);
    let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON error body");
    assert_eq!(error["id"], 404);
    assert_eq!(error["code"], "not_found");

    // A head past the bound: 431.
    let huge = format!("GET /ping HTTP/1.1\r\nhost: vireo\r\nx-filler: {}\r\n\r\n", "a".repeat(64 << 10));
    assert_eq!(exchange(http, huge.as_bytes()).0, 431);
    // A body past http.max_request_size (2 MiB by default), announced: 413 before it is sent.
    let (status, body) = exchange(
        http,
        b"POST /ping HTTP/1.1\r\nhost: vireo\r\ncontent-length: 3000000\r\nconnection: close\r\n\r\nabc",
    );
    assert_eq!(status, 413, "{body}");
    // Not HTTP at all: 400, the port goes on.
    assert_eq!(exchange(http, b"\x16\x03\x01\x00\x00garbage\r\n\r\n").0, 400);

    // Slowloris: a head that never ends is cut off after the head timeout (10 s), however
    // steadily it trickles.
    let mut slow = TcpStream::connect(http).unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    slow.write_all(b"GET /ping HTTP/1.1\r\n").unwrap();
    let started = Instant::now();
    let cut = loop {
        assert!(started.elapsed() < Duration::from_secs(20), "a trickled head was never cut off");
        if slow.write_all(b"x-slow: 1\r\n").is_err() {
            break started.elapsed();
        }
        let mut byte = [0u8; 1];
        match slow.read(&mut byte) {
            Ok(0) => break started.elapsed(),
            Ok(_) => break started.elapsed(),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break started.elapsed(),
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(cut >= Duration::from_secs(8), "cut after {cut:?}, before the head timeout");

    // One connection more than the port serves: 503, and the port serves again once they go.
    let held: Vec<TcpStream> = (0..64).map(|_| TcpStream::connect(http).unwrap()).collect();
    // The server takes them in order: wait until it has (bounded) before the 65th.
    std::thread::sleep(Duration::from_millis(300));
    let (status, body) = get(http, "/ping");
    assert_eq!(status, 503, "{body}");
    drop(held);
    let started = Instant::now();
    while get(http, "/ping").0 != 200 {
        assert!(started.elapsed() < Duration::from_secs(10), "the port never served again");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(server.output().contains("listening on"), "the server is still up");
}
