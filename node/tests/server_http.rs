//! The HTTP port of a vireo-server this test starts: what it serves (`/ping`, `/metrics`, a JSON
//! 404 for the rest), and hostile HTTP refused with the reference's status codes while the
//! server serves on: an oversized head (431), an oversized body (413), a head trickled too slowly
//! (closed), one connection more than the port holds (503). The Web UI at `/ui` from its build, and
//! cross-origin answers (`[http.cors]`).

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

/// Sends `request` with a JSON body and an optional bearer token; status and body.
fn call(address: SocketAddr, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let authorization = token.map(|token| format!("authorization: Bearer {token}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: vireo\r\nconnection: close\r\ncontent-type: application/json\r\n{authorization}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    exchange(address, request.as_bytes())
}

#[derive(serde::Serialize)]
struct Claims {
    jti: String,
    iss: String,
    aud: String,
    sub: String,
    iat: u64,
    exp: u64,
    nbf: u64,
}

fn forged(secret: &[u8], jti: &str, iat: u64, exp: u64) -> String {
    let claims = Claims {
        jti: jti.to_string(),
        iss: "iggy.apache.org".to_string(),
        aud: "iggy.apache.org".to_string(),
        sub: "0".to_string(),
        iat,
        exp,
        nbf: iat,
    };
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret),
    )
    .unwrap()
}

#[test]
fn hostile_api_requests_are_refused_with_the_reference_codes_and_the_server_serves_on() {
    let server = Server::start(&data_dir("http-api-hostile"), &[]);
    let http = server.metrics.expect("the HTTP port is on by default");
    let login = r#"{"username":"iggy","password":"iggy"}"#;
    let (status, body) = call(http, "POST", "/users/login", None, login);
    assert_eq!(status, 200, "{body}");
    let identity: serde_json::Value = serde_json::from_str(&body).unwrap();
    let token = identity["access_token"]["token"].as_str().unwrap().to_string();
    assert_eq!(call(http, "GET", "/streams", Some(&token), "").0, 200);

    // No token, then a wrong password: 401 (77, access_token_missing) and 400 (42).
    let (status, body) = call(http, "GET", "/streams", None, "");
    assert_eq!(status, 401);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"], 77);
    let (status, body) = call(http, "POST", "/users/login", None, r#"{"username":"iggy","password":"nope"}"#);
    assert_eq!(status, 400, "{body}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["code"], "invalid_credentials");

    // Bad JSON, and JSON of the wrong shape: 400s and 422s, never a 5xx.
    assert_eq!(call(http, "POST", "/streams", Some(&token), "{not json").0, 422);
    assert_eq!(call(http, "POST", "/streams", Some(&token), r#"{"title":"x"}"#).0, 422);
    assert_eq!(call(http, "POST", "/users/login", None, r#"{"username":1}"#).0, 422);
    let (status, _) = call(
        http,
        "POST",
        "/streams/1/topics/1/messages",
        Some(&token),
        r#"{"partitioning":{"kind":"balanced","value":""},"messages":[{"payload":"***"}]}"#,
    );
    assert_eq!(status, 422, "a payload that is not base64");

    // Tokens the server did not issue, or no longer honours: 401.
    let claims: serde_json::Value = {
        let payload = token.split('.').nth(1).unwrap();
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    };
    let jti = claims["jti"].as_str().unwrap();
    let iat = claims["iat"].as_u64().unwrap();
    let other_key = forged(b"another key, not the server's, at least 32 bytes", jti, iat, iat + 3600);
    assert_eq!(call(http, "GET", "/streams", Some(&other_key), "").0, 401, "signed with another key");
    let secret = std::fs::read(server.data.join("http").join("jwt.key")).unwrap();
    let expired = forged(&secret, jti, iat - 7200, iat - 3600);
    assert_eq!(call(http, "GET", "/streams", Some(&expired), "").0, 401, "expired");
    let unknown_session = forged(&secret, "0123456789abcdef0123456789abcdef", iat, iat + 3600);
    assert_eq!(call(http, "GET", "/streams", Some(&unknown_session), "").0, 401, "a session never opened");
    assert_eq!(call(http, "GET", "/streams", Some("garbage"), "").0, 401);

    // Refresh gives a working token; logout ends the session for every token of it.
    let (status, body) = call(http, "POST", "/users/refresh-token", None, &format!(r#"{{"token":"{token}"}}"#));
    assert_eq!(status, 200, "{body}");
    let refreshed: serde_json::Value = serde_json::from_str(&body).unwrap();
    let refreshed = refreshed["access_token"]["token"].as_str().unwrap().to_string();
    assert_eq!(call(http, "GET", "/streams", Some(&refreshed), "").0, 200);
    assert_eq!(call(http, "DELETE", "/users/logout", Some(&refreshed), "").0, 204);
    assert_eq!(call(http, "GET", "/streams", Some(&token), "").0, 401, "logged out");
    assert_eq!(call(http, "GET", "/streams", Some(&refreshed), "").0, 401, "logged out");

    // Still serving.
    assert_eq!(get(http, "/ping"), (200, "pong".to_string()));
    assert_eq!(call(http, "POST", "/users/login", None, login).0, 200);
}

/// The whole answer (head and body) to `request`, read until the server closes (bounded).
fn answer(address: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("the HTTP port");
    stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).to_lowercase()
}

fn get_ui(address: SocketAddr, path: &str) -> String {
    answer(address, &format!("GET {path} HTTP/1.1\r\nhost: vireo\r\nconnection: close\r\n\r\n"))
}

#[test]
fn the_web_ui_is_served_from_its_build_and_browsers_get_cross_origin_answers() {
    // A stand-in for the static build ci/web-ui.sh makes: what is served is whatever is there.
    let build = data_dir("http-web-ui-build");
    std::fs::create_dir_all(build.join("_app/immutable")).unwrap();
    std::fs::write(build.join("index.html"), "<html>the app shell</html>").unwrap();
    std::fs::write(build.join("_app/immutable/start.js"), "export const start = 1;").unwrap();
    std::fs::write(build.parent().unwrap().join("http-web-ui-secret.txt"), "outside the build").unwrap();
    let build_path = build.to_str().unwrap();
    let server = Server::start(
        &data_dir("http-web-ui"),
        &[("VIREO_HTTP_WEB_UI", "true"), ("VIREO_HTTP_WEB_UI_PATH", build_path)],
    );
    let http = server.metrics.expect("the HTTP port");

    for path in ["/ui", "/ui/", "/ui/dashboard/streams/1/topics/2"] {
        let page = get_ui(http, path);
        assert!(page.starts_with("http/1.1 200"), "{path}: {page}");
        assert!(page.contains("content-type: text/html"), "{path}: {page}");
        assert!(page.ends_with("<html>the app shell</html>"), "{path}: {page}");
    }
    let script = get_ui(http, "/ui/_app/immutable/start.js");
    assert!(script.starts_with("http/1.1 200") && script.contains("javascript"), "{script}");
    assert!(script.ends_with("export const start = 1;"), "{script}");
    assert!(get_ui(http, "/ui/_app/missing.js").starts_with("http/1.1 404"));
    for escape in ["/ui/../http-web-ui-secret.txt", "/ui/%2e%2e/http-web-ui-secret.txt", "/ui/.hidden"] {
        let refused = get_ui(http, escape);
        assert!(!refused.contains("outside the build"), "{escape}: {refused}");
    }
    // The API beside it is unchanged.
    assert!(get_ui(http, "/streams").starts_with("http/1.1 401"));

    // A browser's preflight from another origin, and its request: allowed, as the reference's
    // defaults allow any origin.
    let preflight = answer(
        http,
        "OPTIONS /streams HTTP/1.1\r\nhost: vireo\r\norigin: http://dashboard.example\r\n\
         access-control-request-method: POST\r\naccess-control-request-headers: authorization\r\n\
         connection: close\r\n\r\n",
    );
    assert!(preflight.starts_with("http/1.1 200"), "{preflight}");
    assert!(preflight.contains("access-control-allow-origin: *"), "{preflight}");
    assert!(preflight.contains("access-control-allow-methods: get,post,put,delete"), "{preflight}");
    assert!(preflight.contains("access-control-allow-headers: content-type,authorization"), "{preflight}");
    let cross = answer(
        http,
        "GET /ping HTTP/1.1\r\nhost: vireo\r\norigin: http://dashboard.example\r\nconnection: close\r\n\r\n",
    );
    assert!(cross.contains("access-control-allow-origin: *") && cross.ends_with("pong"), "{cross}");
    drop(server);

    // No build where the config points: /ui says how to make one. Origins restricted by the
    // config: only the listed one is told it may read.
    let config = data_dir("http-web-ui-config");
    std::fs::create_dir_all(&config).unwrap();
    let config_file = config.join("config.toml");
    std::fs::write(
        &config_file,
        "[http]\nweb_ui = true\nweb_ui_path = \"/nonexistent/web-ui\"\n\n[http.cors]\nallowed_origins = [\"http://dashboard.example\"]\n",
    )
    .unwrap();
    let server = Server::start(&data_dir("http-web-ui-none"), &[("VIREO_CONFIG_PATH", config_file.to_str().unwrap())]);
    let http = server.metrics.expect("the HTTP port");
    let missing = get_ui(http, "/ui/");
    assert!(missing.starts_with("http/1.1 404") && missing.contains("ci/web-ui.sh"), "{missing}");
    let allowed = answer(
        http,
        "GET /ping HTTP/1.1\r\nhost: vireo\r\norigin: http://dashboard.example\r\nconnection: close\r\n\r\n",
    );
    assert!(allowed.contains("access-control-allow-origin: http://dashboard.example"), "{allowed}");
    let other =
        answer(http, "GET /ping HTTP/1.1\r\nhost: vireo\r\norigin: http://evil.example\r\nconnection: close\r\n\r\n");
    assert!(!other.contains("access-control-allow-origin"), "{other}");
    drop(server);

    // Off (the default): /ui is no route.
    let server = Server::start(&data_dir("http-web-ui-off"), &[("VIREO_HTTP_WEB_UI_PATH", build_path)]);
    assert!(get_ui(server.metrics.unwrap(), "/ui/").starts_with("http/1.1 404"));
}
