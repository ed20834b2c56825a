//! TLS on the client port and the HTTP port (`[tcp.tls]`, `[http.tls]`), with the published Iggy
//! SDK as the client: its whole conversation over TLS, trusting the self-signed certificate the
//! server made on its first start; plain-text clients on the TLS ports refused and counted, the
//! server serving on; the same certificate after a restart.

mod sdk_conversation;
mod server_process;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_rustls::rustls;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use iggy::prelude::*;
use sdk_conversation::{bounded, conversation, root, Endpoint};
use server_process::{data_dir, sample, Server};

const TLS_ON: [(&str, &str); 2] = [("VIREO_TCP_TLS_ENABLED", "true"), ("VIREO_HTTP_TLS_ENABLED", "true")];

/// `GET path` over HTTPS, trusting `ca` for the name localhost; the response's body.
fn https_get(address: SocketAddr, ca: &Path, path: &str) -> String {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("the CA file") {
        roots.add(cert.expect("a certificate")).expect("a usable certificate");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = TcpStream::connect(address).expect("the HTTPS port");
    socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, socket);
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: vireo\r\nconnection: close\r\n\r\n").as_bytes())
        .expect("the handshake");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

/// Writes `bytes` in the clear and reads until the server closes: what it answered.
fn plain_text_answer(address: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut socket = TcpStream::connect(address).expect("the port");
    socket.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = socket.write_all(bytes);
    let mut answer = Vec::new();
    match socket.read_to_end(&mut answer) {
        Ok(_) => answer,
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => answer,
        Err(error) => panic!("the server neither answered nor closed: {error}"),
    }
}

/// Nothing, or one TLS alert record (content type 21): the handshake's refusal, nothing served.
fn is_refusal(answer: &[u8]) -> bool {
    answer.is_empty() || (answer[0] == 21 && answer.len() <= 7)
}

fn tls_refusals(metrics: &str) -> u64 {
    sample(metrics, "vireo_refusals_total{reason=\"tls_handshake\"}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_talks_over_tls_and_plain_text_is_refused_and_counted() {
    let data = data_dir("tls");
    let mut server = Server::start(&data, &TLS_ON);
    let ca = data.join("tls").join("cert.pem");
    assert!(server.output().contains(&format!("tls certificate {}", ca.display())), "{}", server.output());
    let metrics = server.metrics.expect("HTTPS on");
    assert_eq!(tls_refusals(&https_get(metrics, &ca, "/metrics")), 0);

    // The published SDK, in the clear, on the TLS port: its login fails, nothing is served.
    let plain = IggyClient::builder().with_tcp().with_server_address(server.address.to_string()).build().unwrap();
    let login = bounded("a plain-text login", async {
        match plain.connect().await {
            Ok(()) => plain.login_user(DEFAULT_ROOT_USERNAME, DEFAULT_ROOT_PASSWORD).await.map(|_| ()),
            Err(error) => Err(error),
        }
    })
    .await;
    assert!(login.is_err(), "a plain-text client logged in on a TLS port");
    drop(plain);
    // Plain text on both ports: closed with at most a TLS alert, each counted.
    let mut frame = vec![0u8; 256];
    frame[48..52].copy_from_slice(&256u32.to_le_bytes());
    let answer = plain_text_answer(server.address, &frame);
    assert!(is_refusal(&answer), "{answer:?}");
    let answer = plain_text_answer(metrics, b"GET /metrics HTTP/1.1\r\nhost: vireo\r\n\r\n");
    assert!(is_refusal(&answer), "{answer:?}");
    // The shards publish their figures every few ticks: bounded wait for them.
    let mut refused = 0;
    for _ in 0..100 {
        refused = tls_refusals(&https_get(metrics, &ca, "/metrics"));
        if refused >= 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refused >= 3, "{refused} TLS refusals counted, 3 at least expected");

    // The whole SDK conversation over TLS, the server none the worse.
    let endpoint = Endpoint { address: server.address, tls_ca: Some(ca.clone()) };
    bounded("the conversation over TLS", conversation(&endpoint)).await;

    // A restart keeps the certificate: the client's CA file still works.
    let certificate = std::fs::read(&ca).unwrap();
    server.stop(libc::SIGTERM, Duration::from_secs(30)).expect("a clean stop");
    let server = Server::start(&data, &TLS_ON);
    assert_eq!(std::fs::read(&ca).unwrap(), certificate, "the self-signed pair is kept");
    let endpoint = Endpoint { address: server.address, tls_ca: Some(ca) };
    let client = bounded("a login after the restart", root(&endpoint)).await;
    client.ping().await.expect("served over TLS after the restart");
}

#[test]
fn a_tls_section_with_files_that_do_not_hold_a_pair_stops_the_server_with_its_key() {
    let data = data_dir("tls-bad-files");
    std::fs::create_dir_all(&data).unwrap();
    let cert = data.join("cert.pem");
    std::fs::write(&cert, "not a certificate").unwrap();
    let (status, stderr) = server_process::run_to_exit(
        &["--with-default-root-credentials"],
        &[
            ("VIREO_SYSTEM_PATH", data.join("data").to_str().unwrap()),
            ("VIREO_TCP_ADDRESS", "127.0.0.1:0"),
            ("VIREO_HTTP_ENABLED", "false"),
            ("VIREO_TCP_TLS_ENABLED", "true"),
            ("VIREO_TCP_TLS_SELF_SIGNED", "false"),
            ("VIREO_TCP_TLS_CERT_FILE", cert.to_str().unwrap()),
            ("VIREO_TCP_TLS_KEY_FILE", cert.to_str().unwrap()),
        ],
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("key `tcp.tls.cert_file`") && stderr.contains("holds no certificate"), "{stderr}");
    let (status, stderr) = server_process::run_to_exit(
        &[],
        &[
            ("VIREO_SYSTEM_PATH", data.join("data").to_str().unwrap()),
            ("VIREO_TCP_TLS_ENABLED", "true"),
            ("VIREO_TCP_TLS_SELF_SIGNED", "false"),
        ],
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("key `tcp.tls.cert_file`: TLS without self_signed needs cert_file and key_file"),
        "{stderr}"
    );
}
