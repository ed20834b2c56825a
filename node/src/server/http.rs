//! The HTTP port (`[http]`), on shard 0: hyper's HTTP/1.1 server over glommio streams, in the
//! clear or over TLS (`http.tls`). It serves `GET /ping`, `GET /health` (503 once the disk
//! failed), the Prometheus text at
//! `http.metrics_path` and the HTTP API's routes (`http_api`); any other path is answered 404
//! with the reference's JSON error body.
//!
//! Bounds, each with its answer: `HTTP_CONNECTIONS_MAX` connections at once (one more is answered
//! 503 and closed); a request head of at most `HEAD_BYTES_MAX` (hyper answers 431 past it) that
//! must arrive within `HEAD_TIMEOUT` of the connection's start or of its previous response (a
//! client that trickles its head, slowloris, is closed); a body of at most `http.max_request_size`
//! (413); a request answered within `REQUEST_TIMEOUT` or its connection is closed.
//!
//! Cross-origin requests are answered as `[http.cors]` says (`cors`); the Web UI is served at
//! `/ui` when `http.web_ui` is on (`web_ui`).
//!
//! hyper is runtime-agnostic: this module gives it the two things it needs from a runtime, a
//! byte stream (`StreamIo`, over any futures-io stream: a glommio socket or a TLS session on one)
//! and a timer (`ShardTimer`, glommio's).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::{AsyncRead, AsyncWrite};
use glommio::sync::Semaphore;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::service::TowerToHyperService;
use tower_http::cors::CorsLayer;

use crate::server::http_api::{ApiRequest, HttpApi};
use crate::server::metrics::ShardFigures;
use crate::server::shard_loop::ServerShared;

/// Connections the HTTP port serves at once; one more is answered 503 and closed.
pub const HTTP_CONNECTIONS_MAX: u64 = 64;
/// Bytes of one request head (request line and headers) at most: hyper answers 431 past it.
pub const HEAD_BYTES_MAX: usize = 16 << 10;
/// How long a request head may take to arrive.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection may take for a request, once its head arrived.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves the HTTP port on this shard (shard 0) until the process ends.
pub fn serve(listener: std::net::TcpListener, shared: Arc<ServerShared>, api: Rc<HttpApi>) {
    use std::os::fd::{FromRawFd, IntoRawFd};
    // SAFETY: a bound, listening TCP socket whose ownership passes here.
    let listener = unsafe { glommio::net::TcpListener::from_raw_fd(listener.into_raw_fd()) };
    let slots = Rc::new(Semaphore::new(HTTP_CONNECTIONS_MAX));
    let cors = crate::server::cors::layer(&shared.config.http.cors).expect("validated at load");
    glommio::spawn_local(async move {
        loop {
            let Ok(stream) = listener.accept().await else {
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let shared = shared.clone();
            let api = api.clone();
            let cors = cors.clone();
            let Ok(permit) = slots.try_acquire_static_permit(1) else {
                glommio::spawn_local(async move { refuse_full(stream).await }).detach();
                continue;
            };
            glommio::spawn_local(async move {
                let _permit = permit;
                match &shared.http_tls {
                    None => serve_connection(stream, &shared, &api, cors).await,
                    Some(tls) => match tls.accept(stream).await {
                        Some(stream) => serve_connection(stream, &shared, &api, cors).await,
                        None => {
                            shared.http_tls_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    },
                }
            })
            .detach();
        }
    })
    .detach();
}

/// One more connection than the port serves: 503, closed (in the clear: a TLS client sees its
/// handshake fail, which is as clear a refusal).
async fn refuse_full(mut stream: glommio::net::TcpStream) {
    use futures_lite::AsyncWriteExt;
    let body = error_body(StatusCode::SERVICE_UNAVAILABLE, "too many HTTP connections");
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.close().await;
    };
    let deadline = glommio::timer::sleep(Duration::from_secs(1));
    futures_lite::future::or(write, deadline).await;
}

async fn serve_connection<S>(stream: S, shared: &Arc<ServerShared>, api: &Rc<HttpApi>, cors: Option<CorsLayer>)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let service = tower::service_fn(|request: Request<Incoming>| {
        let shared = shared.clone();
        let api = api.clone();
        async move {
            let answer = async { Some(respond(request, &shared, &api).await) };
            let deadline = async {
                glommio::timer::sleep(REQUEST_TIMEOUT).await;
                None
            };
            match futures_lite::future::or(answer, deadline).await {
                Some(response) => Ok::<_, Infallible>(response),
                None => Ok(json_error(StatusCode::SERVICE_UNAVAILABLE, "the request took too long")),
            }
        }
    });
    // Cross-origin answers wrap every route's (`[http.cors]`), preflights included.
    let service = TowerToHyperService::new(tower::ServiceBuilder::new().option_layer(cors).service(service));
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(ShardTimer)
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(HEAD_BYTES_MAX)
        .serve_connection(StreamIo(stream), service);
    // An error is the client's doing (a malformed request, a timeout, a reset): hyper has
    // answered it already where HTTP allows; the connection just ends.
    let _ = connection.await;
}

/// The answer to one request.
async fn respond(request: Request<Incoming>, shared: &ServerShared, api: &HttpApi) -> Response<Full<Bytes>> {
    let limit = shared.config.http.max_request_size as usize;
    let (parts, body) = request.into_parts();
    let too_large = || {
        json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the request body exceeds http.max_request_size ({limit} bytes)"),
        )
    };
    // A body announced too large is refused before a byte of it is read.
    if hyper::body::Body::size_hint(&body).lower() > limit as u64 {
        return too_large();
    }
    // The body is read whole before anything is answered, up to its bound.
    let body = match Limited::new(body, limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(_) => return json_error(StatusCode::BAD_REQUEST, "the request body could not be read"),
    };
    let path = parts.uri.path();
    match (&parts.method, path) {
        (&Method::GET, "/ping") => text(StatusCode::OK, "text/plain", "pong".to_string()),
        // What a load balancer or an orchestrator asks: 503 once the disk failed (a single node
        // then answers reads only, until it is restarted on a good disk).
        (&Method::GET, "/health") => match shared.storage_failed.lock().expect("no panic holding it").clone() {
            None => text(StatusCode::OK, "application/json", r#"{"status":"healthy"}"#.to_string()),
            Some(failure) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "application/json",
                serde_json::json!({ "status": "unhealthy", "reason": failure }).to_string(),
            ),
        },
        (&Method::GET, metrics) if metrics == shared.config.http.metrics_path => {
            let figures: Vec<ShardFigures> = shared.stats.iter().map(|stats| stats.read()).collect();
            text(StatusCode::OK, "text/plain; version=0.0.4", crate::server::metrics::render(&figures))
        }
        (&Method::GET, ui) if shared.config.http.web_ui && (ui == "/ui" || ui.starts_with("/ui/")) => {
            let rest = ui.strip_prefix("/ui").unwrap_or_default().trim_start_matches('/');
            crate::server::web_ui::respond(std::path::Path::new(&shared.config.http.web_ui_path), rest).await
        }
        (_, "/ping" | "/health") => json_error(StatusCode::METHOD_NOT_ALLOWED, "GET only"),
        (_, metrics) if metrics == shared.config.http.metrics_path => {
            json_error(StatusCode::METHOD_NOT_ALLOWED, "GET only")
        }
        _ => {
            let bearer = parts
                .headers
                .get(hyper::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "));
            let request = ApiRequest::new(&parts.method, &parts.uri, bearer, &body);
            match api.handle(&request).await {
                Some(response) => response,
                None => json_error(StatusCode::NOT_FOUND, "not found"),
            }
        }
    }
}

fn text(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_str(content_type).expect("a header value"),
    );
    response
}

/// The reference's error body: `{"id": <status>, "code": <reason>, "reason": <text>, "field": null}`.
fn error_body(status: StatusCode, reason: &str) -> String {
    let code = status.canonical_reason().unwrap_or("error").to_lowercase().replace(' ', "_");
    serde_json::json!({ "id": status.as_u16(), "code": code, "reason": reason, "field": null }).to_string()
}

fn json_error(status: StatusCode, reason: &str) -> Response<Full<Bytes>> {
    text(status, "application/json", error_body(status, reason))
}

/// A futures-io stream as hyper's byte stream.
struct StreamIo<S>(S);

impl<S: AsyncRead + Unpin> hyper::rt::Read for StreamIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        // SAFETY: the bytes are initialized here before they are handed out as `&mut [u8]`,
        // and `advance` covers only what the read filled.
        let unfilled = unsafe { buf.as_mut() };
        for byte in unfilled.iter_mut() {
            byte.write(0);
        }
        let slice = unsafe { &mut *(unfilled as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]) };
        match Pin::new(&mut self.0).poll_read(cx, slice) {
            Poll::Ready(Ok(read)) => {
                // SAFETY: `read` bytes were written by the read above.
                unsafe { buf.advance(read) };
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncWrite + Unpin> hyper::rt::Write for StreamIo<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}

/// hyper's timer on the shard's executor.
#[derive(Clone, Copy)]
struct ShardTimer;

impl hyper::rt::Timer for ShardTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(ShardSleep(glommio::timer::Timer::new(duration)))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep(deadline.saturating_duration_since(Instant::now()))
    }
}

/// A glommio timer, which lives on its executor's thread. hyper asks a timer's futures to be
/// `Send + Sync` for its multi-threaded runtimes; here the HTTP/1 connection that holds one is
/// `!Send` itself (its stream is a glommio socket, bound to this executor), so the connection,
/// and every sleep in it, is created, polled and dropped on this one thread.
struct ShardSleep(glommio::timer::Timer);

// SAFETY: see `ShardSleep`: never moved to or shared with another thread.
unsafe impl Send for ShardSleep {}
// SAFETY: as above.
unsafe impl Sync for ShardSleep {}

impl Future for ShardSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}

impl hyper::rt::Sleep for ShardSleep {}
