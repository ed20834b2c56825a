//! The HTTP API: the reference's routes, JSON bodies, status codes and JWT logins (`[http.jwt]`),
//! each answered by shard 0's node through the gateway (`gateway`), as the same binary request a
//! TCP client would send: admission, permissions and sessions are the node's, not this module's.
//!
//! Sessions: `POST /users/login` (or `/personal-access-tokens/login`) logs a new internal
//! connection into the node and answers a JWT (HS256, the reference's claims, issuer and
//! audience) whose `jti` names that connection's session here. A request's bearer JWT must verify
//! (signature, `exp`, `nbf`, issuer, audience) and name a session this process holds: a token from
//! before a restart, or for a session evicted, is answered 401 and the client logs in again (the
//! reference, whose default key is made anew at each start, answers the same). A refresh answers
//! a new JWT for the same session; a logout ends the session and its connection. At most
//! `SESSIONS_MAX` sessions are held: a login past it evicts the least recently used one. One
//! request runs at a time in a session, in the order they came (as an SDK's TCP connection).
//!
//! Routes: logins, refresh and logout; streams, topics and partitions (list, get, create, update,
//! delete, purge); messages (send, poll); consumer offsets; cluster metadata (here); users,
//! personal access tokens, consumer groups, segments, stats, clients and options (`admin`). Not
//! routed, as in the reference: joining or leaving a consumer group, get_me (`GET /users/me` is
//! the caller's user), flush_unsaved_buffer; and `POST /snapshot` (the node answers
//! get_snapshot_file InvalidCommand over TCP too).

mod admin;
pub mod linearizable;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use glommio::sync::Semaphore;
use http_body_util::Full;
use hyper::{Method, Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::json;

use vireo_protocol::header::{Command, Header, Message};
use vireo_protocol::request::OPERATION_REGISTER;
use vireo_protocol::wire::options::{OptionValue, Options};
use vireo_protocol::wire::{self, command, ClientRequest, Identifier, Name, ShortBytes};
use vireo_storage::batch::{self, BatchBuilder, BatchHeader};

use crate::metadata_plane::operation_of;
use crate::node::{OPERATION_LOGOUT, OPERATION_NON_REPLICATED};
use crate::node_io::ConnectionId;
use crate::partition::request::{
    OPERATION_DELETE_CONSUMER_OFFSET, OPERATION_SEND_MESSAGES, OPERATION_STORE_CONSUMER_OFFSET,
};
use crate::server::gateway::{Gateway, GatewayError};
use linearizable::PrimaryRedirect;

/// HTTP sessions held at once; a login past it evicts the least recently used.
pub const SESSIONS_MAX: usize = 1024;
/// How long a request waits for the node's reply (the reference's write timeout).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// The reference's issuer and audience, stamped on every token and required of every token.
pub const ISSUER: &str = "iggy.apache.org";
/// The protocol version a login states (0.11.0, the SDK's).
const PROTOCOL_VERSION: u32 = 0x2C00;
/// Messages one poll answers at most, as the binary protocol allows.
const POLL_COUNT_MAX: u32 = 1_000_000;

/// A login's session in the node, as HTTP requests use it.
struct Session {
    connection: ConnectionId,
    client: u128,
    node_session: u64,
    user_id: u32,
    /// The last request number sent.
    request: Cell<u64>,
    /// One request at a time, in order.
    turn: Semaphore,
}

struct Held {
    session: Rc<Session>,
    /// When the token naming it expires (Unix seconds): a refresh moves it on.
    expires: u64,
    used: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    jti: String,
    iss: String,
    aud: String,
    sub: String,
    iat: u64,
    exp: u64,
    nbf: u64,
}

/// An HTTP error as the reference answers it.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    id: u32,
    code: &'static str,
    reason: String,
    field: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, id: u32, code: &'static str, reason: impl Into<String>) -> ApiError {
        ApiError { status, id, code, reason: reason.into(), field: None }
    }

    fn bad_request(reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, 400, "bad_request", reason)
    }

    fn not_found() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 404, "not_found", "Resource not found")
    }

    fn unauthenticated() -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, 40, "unauthenticated", "Unauthenticated")
    }

    /// The node refused with `code` (the reference's error code).
    fn of_status(code: u32) -> ApiError {
        let (name, field) = error_name(code);
        let status = match code {
            1009 | 2010 | 3007 | 4000 | 100 | 5000 | 5003 | 5006 | 3021 | 20 => StatusCode::NOT_FOUND,
            40 | 77 | 78 | 53 => StatusCode::UNAUTHORIZED,
            41 => StatusCode::FORBIDDEN,
            57 | 58 => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError { status, id: code, code: name, reason: name.replace('_', " "), field }
    }

    fn of_gateway(error: GatewayError) -> ApiError {
        match error {
            GatewayError::Busy => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, 503, "server_busy", "too many requests in flight")
            }
            GatewayError::Timeout => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                504,
                "request_timeout",
                "no answer in time: the request may still be applied",
            ),
            GatewayError::Closed => ApiError::unauthenticated(),
        }
    }

    pub fn into_response(self) -> Response<Full<Bytes>> {
        let body = json!({ "id": self.id, "code": self.code, "reason": self.reason, "field": self.field });
        let mut response = json_response(self.status, body.to_string());
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(hyper::header::RETRY_AFTER, hyper::header::HeaderValue::from_static("1"));
        }
        response
    }
}

/// The reference's name of an error code, and the request field it concerns.
fn error_name(code: u32) -> (&'static str, Option<&'static str>) {
    match code {
        3 => ("invalid_command", None),
        4 => ("invalid_format", None),
        6 => ("invalid_identifier", None),
        20 => ("resource_not_found", None),
        40 => ("unauthenticated", None),
        41 => ("unauthorized", None),
        42 => ("invalid_credentials", None),
        43 => ("invalid_username", None),
        44 => ("invalid_password", None),
        46 => ("user_already_exists", Some("username")),
        47 => ("user_inactive", None),
        53 => ("invalid_personal_access_token", None),
        57 => ("transient_not_committed", None),
        58 => ("transient_not_accepted", None),
        100 => ("client_not_found", Some("client_id")),
        1009 => ("stream_id_not_found", Some("stream_id")),
        1012 => ("stream_name_already_exists", Some("name")),
        1013 => ("invalid_stream_name", Some("name")),
        2010 => ("topic_id_not_found", Some("topic_id")),
        2013 => ("topic_name_already_exists", Some("name")),
        2014 => ("invalid_topic_name", Some("name")),
        2019 => ("invalid_partitions_count", None),
        3007 => ("partition_not_found", Some("partition_id")),
        3021 => ("consumer_offset_not_found", None),
        4000 => ("segment_not_found", Some("segment_id")),
        5000 => ("consumer_group_id_not_found", None),
        5004 => ("consumer_group_name_already_exists", Some("name")),
        9000 => ("snapshot_file_completion_failed", None),
        _ => ("error", None),
    }
}

fn json_response(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response
}

fn ok_json(body: impl Serialize) -> Result<Response<Full<Bytes>>, ApiError> {
    let text = serde_json::to_string(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
    Ok(json_response(StatusCode::OK, text))
}

fn empty(status: StatusCode) -> Result<Response<Full<Bytes>>, ApiError> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    Ok(response)
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

/// One request as the API sees it: method, path segments (percent-decoded), query pairs, the
/// bearer token if any, and the body.
pub struct ApiRequest<'a> {
    pub method: &'a Method,
    pub segments: Vec<String>,
    pub query: HashMap<String, String>,
    pub bearer: Option<&'a str>,
    pub body: &'a [u8],
    /// As the client sent them, for a redirect (`linearizable`).
    pub path_and_query: String,
}

impl<'a> ApiRequest<'a> {
    pub fn new(method: &'a Method, uri: &hyper::Uri, bearer: Option<&'a str>, body: &'a [u8]) -> ApiRequest<'a> {
        let segments = uri.path().split('/').filter(|part| !part.is_empty()).map(percent_decode).collect();
        let query = uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode(key), percent_decode(value))
            })
            .collect();
        let path_and_query = uri.path_and_query().map_or_else(|| uri.path().to_string(), |whole| whole.to_string());
        ApiRequest { method, segments, query, bearer, body, path_and_query }
    }

    fn json<'b, T: Deserialize<'b>>(&'b self) -> Result<T, ApiError> {
        serde_json::from_slice(self.body).map_err(|error| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 422, "invalid_json", format!("the body: {error}"))
        })
    }

    fn query_u32(&self, key: &str) -> Result<Option<u32>, ApiError> {
        self.query
            .get(key)
            .map(|value| value.parse::<u32>().map_err(|_| ApiError::bad_request(format!("query {key}: `{value}`"))))
            .transpose()
    }

    fn query_u64(&self, key: &str) -> Result<Option<u64>, ApiError> {
        self.query
            .get(key)
            .map(|value| value.parse::<u64>().map_err(|_| ApiError::bad_request(format!("query {key}: `{value}`"))))
            .transpose()
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |byte: u8| (byte as char).to_digit(16);
        match bytes[at] {
            b'%' if at + 2 < bytes.len() => match (hex(bytes[at + 1]), hex(bytes[at + 2])) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    at += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            byte => out.push(byte),
        }
        at += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

/// A path segment as an identifier: a number is an id, anything else a name.
fn identifier(segment: &str) -> Result<Identifier, ApiError> {
    if let Ok(id) = segment.parse::<u32>() {
        return Ok(Identifier::Numeric(id));
    }
    Name::new(segment).map(Identifier::Name).map_err(|_| {
        ApiError::new(StatusCode::BAD_REQUEST, 6, "invalid_identifier", format!("`{segment}` is not an identifier"))
    })
}

fn name(text: &str) -> Result<Name, ApiError> {
    Name::new(text).map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, 4, "invalid_format", format!("name `{text}`")))
}

fn byte_size(bytes: u64) -> String {
    format!("{bytes} B")
}

fn compression_name(code: u8) -> &'static str {
    match code {
        2 => "gzip",
        _ => "none",
    }
}

fn stream_json(stream: &wire::Stream, topics: Option<&[wire::Topic]>) -> serde_json::Value {
    let mut value = json!({
        "id": stream.id,
        "created_at": stream.created_at,
        "name": stream.name.as_str(),
        "size": byte_size(stream.size),
        "messages_count": stream.messages_count,
        "topics_count": stream.topics_count,
        "options": {},
    });
    if let Some(topics) = topics {
        value["topics"] = topics.iter().map(|topic| topic_json(topic, None)).collect();
    }
    value
}

fn topic_json(topic: &wire::Topic, partitions: Option<&[wire::Partition]>) -> serde_json::Value {
    let mut value = json!({
        "id": topic.id,
        "created_at": topic.created_at,
        "name": topic.name.as_str(),
        "size": byte_size(topic.size),
        "message_expiry": topic.message_expiry,
        "compression_algorithm": compression_name(topic.compression),
        "max_topic_size": topic.max_topic_size,
        "messages_count": topic.messages_count,
        "partitions_count": topic.partitions_count,
        "options": {},
    });
    if let Some(partitions) = partitions {
        value["partitions"] = partitions
            .iter()
            .map(|partition| {
                json!({
                    "id": partition.id,
                    "created_at": partition.created_at,
                    "segments_count": partition.segments_count,
                    "current_offset": partition.current_offset,
                    "size": byte_size(partition.size),
                    "messages_count": partition.messages_count,
                })
            })
            .collect();
    }
    value
}

/// A message id as JSON gives it: a number (u128), a decimal string, or a UUID's 32 hex digits.
fn message_id(raw: Option<&serde_json::value::RawValue>) -> Result<u128, ApiError> {
    let Some(raw) = raw else { return Ok(0) };
    let text = raw.get().trim();
    let invalid = || ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 4, "invalid_format", format!("message id {text}"));
    if text == "null" {
        return Ok(0);
    }
    if let Some(quoted) = text.strip_prefix('"').and_then(|text| text.strip_suffix('"')) {
        if let Ok(id) = quoted.parse::<u128>() {
            return Ok(id);
        }
        let hex: String = quoted.chars().filter(|c| *c != '-').collect();
        return if hex.len() == 32 { u128::from_str_radix(&hex, 16).map_err(|_| invalid()) } else { Err(invalid()) };
    }
    text.parse::<u128>().map_err(|_| invalid())
}

#[derive(Deserialize)]
struct LoginBody {
    username: String,
    password: String,
}

#[derive(Deserialize)]
struct TokenBody {
    token: String,
}

#[derive(Deserialize)]
struct NameBody {
    name: String,
}

#[derive(Deserialize)]
struct CreateTopicBody {
    name: String,
    partitions_count: u32,
    #[serde(default)]
    compression_algorithm: Option<String>,
    #[serde(default)]
    message_expiry: Option<u64>,
    #[serde(default)]
    max_topic_size: Option<u64>,
    /// Further options by key, their values as strings (as the reference's options map).
    #[serde(default)]
    options: HashMap<String, String>,
}

#[derive(Deserialize)]
struct UpdateTopicBody {
    name: String,
    #[serde(default)]
    compression_algorithm: Option<String>,
    #[serde(default)]
    message_expiry: Option<u64>,
    #[serde(default)]
    max_topic_size: Option<u64>,
    #[serde(default)]
    options: HashMap<String, String>,
}

#[derive(Deserialize)]
struct PartitionsBody {
    partitions_count: u32,
}

#[derive(Deserialize)]
struct PartitioningBody {
    kind: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
struct SendMessageBody<'a> {
    #[serde(default, borrow)]
    id: Option<&'a serde_json::value::RawValue>,
    payload: String,
    #[serde(default)]
    user_headers: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct SendMessagesBody<'a> {
    partitioning: PartitioningBody,
    #[serde(borrow)]
    messages: Vec<SendMessageBody<'a>>,
}

#[derive(Deserialize)]
struct StoreOffsetBody {
    consumer_id: serde_json::Value,
    #[serde(default)]
    partition_id: Option<u32>,
    offset: u64,
}

#[derive(Serialize)]
struct PolledHeader {
    checksum: u64,
    id: u128,
    offset: u64,
    timestamp: u64,
    origin_timestamp: u64,
    user_headers_length: u32,
    payload_length: u32,
    reserved: u64,
}

#[derive(Serialize)]
struct PolledMessage {
    header: PolledHeader,
    payload: String,
    user_headers: serde_json::Value,
}

#[derive(Serialize)]
struct Polled {
    partition_id: u32,
    current_offset: u64,
    count: u32,
    messages: Vec<PolledMessage>,
}

fn base64_decode(what: &str, text: &str) -> Result<Vec<u8>, ApiError> {
    base64::engine::general_purpose::STANDARD.decode(text).map_err(|_| {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 4, "invalid_format", format!("{what}: not base64"))
    })
}

fn base64_encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A consumer id as the query or a body names it: a number, or a name.
fn consumer(value: &str) -> Result<wire::Consumer, ApiError> {
    Ok(wire::Consumer { kind: wire::ConsumerKind::Consumer, id: identifier(value)? })
}

pub struct HttpApi {
    gateway: Rc<Gateway>,
    secret: Vec<u8>,
    expiry_secs: u64,
    sessions: RefCell<HashMap<String, Held>>,
    uses: Cell<u64>,
    seed: u64,
    minted: Cell<u64>,
    /// A cluster node's way to send a linearizable read to the primary (none on a single node).
    redirect: Option<PrimaryRedirect>,
}

impl HttpApi {
    pub fn new(
        gateway: Rc<Gateway>,
        secret: Vec<u8>,
        expiry_secs: u64,
        seed: u64,
        redirect: Option<PrimaryRedirect>,
    ) -> HttpApi {
        HttpApi {
            redirect,
            gateway,
            secret,
            expiry_secs,
            sessions: RefCell::new(HashMap::new()),
            uses: Cell::new(0),
            seed,
            minted: Cell::new(0),
        }
    }

    /// A fresh 128-bit value (client ids, token ids): unguessable without the seed.
    fn mint(&self, label: &[u8]) -> u128 {
        let count = self.minted.get() + 1;
        self.minted.set(count);
        let mut input = self.seed.to_le_bytes().to_vec();
        input.extend_from_slice(label);
        input.extend_from_slice(&count.to_le_bytes());
        xxhash_rust::xxh3::xxh3_128(&input)
    }

    /// Answers one request of the API's routes; `None` for a path it has no route for.
    pub async fn handle(&self, request: &ApiRequest<'_>) -> Option<Response<Full<Bytes>>> {
        let answer = self.route(request).await?;
        Some(answer.unwrap_or_else(ApiError::into_response))
    }

    async fn route(&self, request: &ApiRequest<'_>) -> Option<Result<Response<Full<Bytes>>, ApiError>> {
        let segments: Vec<&str> = request.segments.iter().map(String::as_str).collect();
        let method = request.method;
        let answer = match (method, segments.as_slice()) {
            (&Method::POST, ["users", "login"]) => self.login(request).await,
            (&Method::POST, ["personal-access-tokens", "login"]) => self.login_with_token(request).await,
            (&Method::POST, ["users", "refresh-token"]) => self.refresh(request),
            // The reference's Web UI logs out with POST (the SDK with DELETE).
            (&Method::DELETE | &Method::POST, ["users", "logout"]) => self.logout(request),
            (
                _,
                ["users", "login"]
                | ["personal-access-tokens", "login"]
                | ["users", "refresh-token"]
                | ["users", "logout"],
            ) => Err(ApiError::new(StatusCode::METHOD_NOT_ALLOWED, 405, "method_not_allowed", "method not allowed")),
            (
                _,
                ["streams" | "users" | "personal-access-tokens" | "stats" | "clients" | "options" | "snapshot", ..],
            )
            | (_, ["cluster", "metadata"]) => match self.session(request) {
                Ok(session) => self.read_or_write(&session, request, &segments).await?,
                Err(error) => Err(error),
            },
            _ => return None,
        };
        Some(answer)
    }

    /// An authenticated request; a read that asks to be linearizable is checked here first and,
    /// on a node that does not lead, answered with the way to the primary (`linearizable`).
    async fn read_or_write(
        &self,
        session: &Session,
        request: &ApiRequest<'_>,
        segments: &[&str],
    ) -> Option<Result<Response<Full<Bytes>>, ApiError>> {
        let read = request.method == Method::GET && linearizable::takes_consistency(segments);
        let linearizable =
            match read.then(|| linearizable::asks_linearizable(request.query.get("consistency").map(String::as_str))) {
                Some(Err(error)) => return Some(Err(error)),
                Some(Ok(asks)) => asks,
                None => false,
            };
        let answer = self.with_session(session, request, segments).await?;
        // Not found may be this backup lagging: only the primary can say, so that goes there too.
        let checked = match &answer {
            Ok(_) => true,
            Err(error) => error.status == StatusCode::NOT_FOUND,
        };
        if let (true, true, Some(redirect)) = (linearizable, checked, &self.redirect) {
            if let Some(elsewhere) = redirect.answer(self.gateway.metadata_leader(), &request.path_and_query) {
                return Some(Ok(elsewhere));
            }
        }
        Some(answer)
    }

    /// The authenticated routes.
    async fn with_session(
        &self,
        session: &Session,
        request: &ApiRequest<'_>,
        segments: &[&str],
    ) -> Option<Result<Response<Full<Bytes>>, ApiError>> {
        let method = request.method;
        Some(match (method, segments) {
            (&Method::GET, ["cluster", "metadata"]) => self.cluster_metadata(session).await,
            (&Method::GET, ["stats"]) => self.get_stats(session).await,
            (&Method::GET, ["clients"]) => self.get_clients(session).await,
            (&Method::GET, ["clients", client]) => self.get_client(session, client).await,
            (&Method::GET, ["options", scope]) => self.describe_options(session, scope).await,
            (&Method::POST, ["snapshot"]) => self.get_snapshot(session, request).await,
            (&Method::GET, ["users"]) => self.get_users(session).await,
            (&Method::POST, ["users"]) => self.create_user(session, request).await,
            (&Method::GET, ["users", user]) => self.get_user(session, user).await,
            (&Method::PUT, ["users", user]) => self.update_user(session, user, request).await,
            (&Method::DELETE, ["users", user]) => self.delete_user(session, user).await,
            (&Method::PUT, ["users", user, "password"]) => self.change_password(session, user, request).await,
            (&Method::PUT, ["users", user, "permissions"]) => self.update_permissions(session, user, request).await,
            (&Method::GET, ["personal-access-tokens"]) => self.get_tokens(session).await,
            (&Method::POST, ["personal-access-tokens"]) => self.create_token(session, request).await,
            (&Method::DELETE, ["personal-access-tokens", token]) => self.delete_token(session, token).await,
            (&Method::GET, ["streams", stream, "topics", topic, "consumer-groups"]) => {
                self.get_groups(session, stream, topic).await
            }
            (&Method::POST, ["streams", stream, "topics", topic, "consumer-groups"]) => {
                self.create_group(session, stream, topic, request).await
            }
            (&Method::GET, ["streams", stream, "topics", topic, "consumer-groups", group]) => {
                self.get_group(session, stream, topic, group).await
            }
            (&Method::DELETE, ["streams", stream, "topics", topic, "consumer-groups", group]) => {
                self.delete_group(session, stream, topic, group).await
            }
            (&Method::DELETE, ["streams", stream, "topics", topic, "partitions", partition]) => {
                self.delete_segments(session, stream, topic, partition, request).await
            }
            (&Method::GET, ["streams"]) => self.get_streams(session).await,
            (&Method::POST, ["streams"]) => self.create_stream(session, request).await,
            (&Method::GET, ["streams", stream]) => self.get_stream(session, stream).await,
            (&Method::PUT, ["streams", stream]) => self.update_stream(session, stream, request).await,
            (&Method::DELETE, ["streams", stream]) => {
                let request = ClientRequest::DeleteStream { stream: identifier(stream).ok()? };
                self.write(session, command::DELETE_STREAM, request).await
            }
            (&Method::DELETE, ["streams", stream, "purge"]) => {
                let request = ClientRequest::PurgeStream { stream: identifier(stream).ok()? };
                self.write(session, command::PURGE_STREAM, request).await
            }
            (&Method::GET, ["streams", stream, "topics"]) => self.get_topics(session, stream).await,
            (&Method::POST, ["streams", stream, "topics"]) => self.create_topic(session, stream, request).await,
            (&Method::GET, ["streams", stream, "topics", topic]) => self.get_topic(session, stream, topic).await,
            (&Method::PUT, ["streams", stream, "topics", topic]) => {
                self.update_topic(session, stream, topic, request).await
            }
            (&Method::DELETE, ["streams", stream, "topics", topic]) => match (identifier(stream), identifier(topic)) {
                (Ok(stream), Ok(topic)) => {
                    self.write(session, command::DELETE_TOPIC, ClientRequest::DeleteTopic { stream, topic }).await
                }
                (Err(error), _) | (_, Err(error)) => Err(error),
            },
            (&Method::DELETE, ["streams", stream, "topics", topic, "purge"]) => {
                match (identifier(stream), identifier(topic)) {
                    (Ok(stream), Ok(topic)) => {
                        self.write(session, command::PURGE_TOPIC, ClientRequest::PurgeTopic { stream, topic }).await
                    }
                    (Err(error), _) | (_, Err(error)) => Err(error),
                }
            }
            (&Method::POST, ["streams", stream, "topics", topic, "partitions"]) => {
                self.create_partitions(session, stream, topic, request).await
            }
            (&Method::DELETE, ["streams", stream, "topics", topic, "partitions"]) => {
                self.delete_partitions(session, stream, topic, request).await
            }
            (&Method::POST, ["streams", stream, "topics", topic, "messages"]) => {
                self.send_messages(session, stream, topic, request).await
            }
            (&Method::GET, ["streams", stream, "topics", topic, "messages"]) => {
                self.poll_messages(session, stream, topic, request).await
            }
            (&Method::GET, ["streams", stream, "topics", topic, "consumer-offsets"]) => {
                self.get_offset(session, stream, topic, request).await
            }
            (&Method::PUT, ["streams", stream, "topics", topic, "consumer-offsets"]) => {
                self.store_offset(session, stream, topic, request).await
            }
            (&Method::DELETE, ["streams", stream, "topics", topic, "consumer-offsets", consumer_id]) => {
                self.delete_offset(session, stream, topic, consumer_id, request).await
            }
            _ => return None,
        })
    }

    // Sessions.

    fn issue(&self, session: Rc<Session>) -> Result<serde_json::Value, ApiError> {
        let now = now_secs();
        let jti = format!("{:032x}", self.mint(b"jti"));
        let claims = Claims {
            jti: jti.clone(),
            iss: ISSUER.to_string(),
            aud: ISSUER.to_string(),
            sub: session.user_id.to_string(),
            iat: now,
            exp: now + self.expiry_secs,
            nbf: now,
        };
        let token = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(&self.secret),
        )
        .map_err(|error| ApiError::bad_request(format!("cannot sign a token: {error}")))?;
        let user_id = session.user_id;
        self.hold(jti, session, claims.exp);
        Ok(json!({ "user_id": user_id, "access_token": { "token": token, "expiry": claims.exp } }))
    }

    fn hold(&self, jti: String, session: Rc<Session>, expires: u64) {
        let used = self.uses.get() + 1;
        self.uses.set(used);
        let mut sessions = self.sessions.borrow_mut();
        let now = now_secs();
        // Tokens past their expiry name nothing any more.
        let expired: Vec<String> =
            sessions.iter().filter(|(_, held)| held.expires + 5 < now).map(|(jti, _)| jti.clone()).collect();
        let mut dropped: Vec<Rc<Session>> =
            expired.iter().filter_map(|jti| sessions.remove(jti)).map(|h| h.session).collect();
        if sessions.len() >= SESSIONS_MAX {
            let oldest = sessions.iter().min_by_key(|(_, held)| held.used).map(|(jti, _)| jti.clone());
            if let Some(oldest) = oldest {
                dropped.extend(sessions.remove(&oldest).map(|held| held.session));
            }
        }
        sessions.insert(jti, Held { session, expires, used });
        let live: Vec<ConnectionId> = sessions.values().map(|held| held.session.connection).collect();
        drop(sessions);
        for session in dropped {
            if !live.contains(&session.connection) {
                self.gateway.close(session.connection);
            }
        }
    }

    /// The session a request's bearer token names.
    fn session(&self, request: &ApiRequest<'_>) -> Result<Rc<Session>, ApiError> {
        let Some(token) = request.bearer else {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, 77, "access_token_missing", "Access token is missing"));
        };
        let claims = self.verify(token)?;
        let used = self.uses.get() + 1;
        self.uses.set(used);
        let mut sessions = self.sessions.borrow_mut();
        let held = sessions.get_mut(&claims.jti).ok_or_else(ApiError::unauthenticated)?;
        held.used = used;
        Ok(held.session.clone())
    }

    fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[ISSUER]);
        validation.leeway = 5;
        validation.validate_nbf = true;
        jsonwebtoken::decode::<Claims>(token, &jsonwebtoken::DecodingKey::from_secret(&self.secret), &validation)
            .map(|data| data.claims)
            .map_err(|_| ApiError::unauthenticated())
    }

    async fn login(&self, request: &ApiRequest<'_>) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: LoginBody = request.json()?;
        let invalid = || ApiError::of_status(42);
        let login = wire::LoginRegister {
            protocol_version: PROTOCOL_VERSION,
            sdk_name: Name::new("vireo-http").expect("a name"),
            sdk_version: Name::new(env!("CARGO_PKG_VERSION")).expect("a name"),
            username: Name::new(body.username).map_err(|_| invalid())?,
            password: ShortBytes::new(body.password.into_bytes()).map_err(|_| invalid())?,
            context: Vec::new(),
        };
        self.open_session(ClientRequest::LoginRegister(login)).await
    }

    async fn login_with_token(&self, request: &ApiRequest<'_>) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: TokenBody = request.json()?;
        let login = wire::LoginWithToken {
            protocol_version: PROTOCOL_VERSION,
            sdk_name: Name::new("vireo-http").expect("a name"),
            sdk_version: Name::new(env!("CARGO_PKG_VERSION")).expect("a name"),
            token: ShortBytes::new(body.token.into_bytes()).map_err(|_| ApiError::of_status(53))?,
            context: Vec::new(),
        };
        self.open_session(ClientRequest::LoginWithPersonalAccessToken(login)).await
    }

    /// Logs a new internal connection in with `login`; answers the token of its session.
    async fn open_session(&self, login: ClientRequest) -> Result<Response<Full<Bytes>>, ApiError> {
        let connection = self.gateway.open().map_err(ApiError::of_gateway)?;
        let client = self.mint(b"client") | 1;
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = client;
        header.operation = OPERATION_REGISTER;
        header.command_code = login.command_code();
        let frame = Message::new(header, login.encode()).encode();
        let reply = match self.gateway.exchange(connection, 0, frame, REPLY_TIMEOUT).await {
            Ok(reply) => reply,
            Err(error) => {
                self.gateway.close(connection);
                return Err(ApiError::of_gateway(error));
            }
        };
        let answer = Message::decode(&reply, false).ok().and_then(|message| {
            if message.header.status != 0 {
                return Some(Err(message.header.status));
            }
            let login = wire::LoginReply::decode(&message.body).ok()?;
            Some(match login.result.entries.first() {
                Some(entry) if entry.result != 0 => Err(entry.result),
                _ => Ok(login),
            })
        });
        let login = match answer {
            Some(Ok(login)) => login,
            Some(Err(status)) => {
                self.gateway.close(connection);
                return Err(ApiError::of_status(status));
            }
            None => {
                self.gateway.close(connection);
                return Err(ApiError::bad_request("the node's answer to a login did not decode"));
            }
        };
        let session = Rc::new(Session {
            connection,
            client,
            node_session: login.session,
            user_id: login.user_id,
            request: Cell::new(0),
            turn: Semaphore::new(1),
        });
        ok_json(self.issue(session)?)
    }

    fn refresh(&self, request: &ApiRequest<'_>) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: TokenBody = request.json()?;
        let claims = self.verify(&body.token)?;
        let session = self.sessions.borrow().get(&claims.jti).map(|held| held.session.clone());
        let session = session.ok_or_else(ApiError::unauthenticated)?;
        ok_json(self.issue(session)?)
    }

    fn logout(&self, request: &ApiRequest<'_>) -> Result<Response<Full<Bytes>>, ApiError> {
        let session = self.session(request)?;
        // Every token of the session goes with it, and the node ends its connection's session.
        self.sessions.borrow_mut().retain(|_, held| held.session.connection != session.connection);
        self.gateway.close(session.connection);
        empty(StatusCode::NO_CONTENT)
    }

    // Requests.

    /// Sends `request` in `session` and answers its reply's body (after the result section,
    /// for the operations whose replies have one).
    async fn call(&self, session: &Session, code: u32, request: ClientRequest) -> Result<Vec<u8>, ApiError> {
        let _turn = session.turn.acquire_permit(1).await.map_err(|_| ApiError::of_gateway(GatewayError::Closed))?;
        let number = session.request.get() + 1;
        session.request.set(number);
        let (operation, sectioned) = match code {
            command::SEND_MESSAGES => (OPERATION_SEND_MESSAGES, false),
            command::STORE_CONSUMER_OFFSET => (OPERATION_STORE_CONSUMER_OFFSET, true),
            command::DELETE_CONSUMER_OFFSET => (OPERATION_DELETE_CONSUMER_OFFSET, true),
            command::LOGOUT => (OPERATION_LOGOUT, false),
            _ => match operation_of(code) {
                Some(operation) => (operation, true),
                None => (OPERATION_NON_REPLICATED, false),
            },
        };
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = session.client;
        header.session = session.node_session;
        header.request = number;
        header.operation = operation;
        header.command_code = code;
        let frame = Message::new(header, request.encode()).encode();
        let reply = self
            .gateway
            .exchange(session.connection, number, frame, REPLY_TIMEOUT)
            .await
            .map_err(ApiError::of_gateway)?;
        let message =
            Message::decode(&reply, false).map_err(|_| ApiError::bad_request("the node's reply did not decode"))?;
        if message.header.status != 0 {
            return Err(ApiError::of_status(message.header.status));
        }
        if !sectioned {
            return Ok(message.body);
        }
        let (section, payload) = wire::ResultSection::decode_prefix(&message.body)
            .map_err(|_| ApiError::bad_request("the node's reply did not decode"))?;
        match section.entries.first() {
            Some(entry) if entry.result != 0 => Err(ApiError::of_status(entry.result)),
            _ => Ok(payload.to_vec()),
        }
    }

    /// A write answered 204 when it succeeds.
    async fn write(
        &self,
        session: &Session,
        code: u32,
        request: ClientRequest,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        self.call(session, code, request).await?;
        empty(StatusCode::NO_CONTENT)
    }

    async fn cluster_metadata(&self, session: &Session) -> Result<Response<Full<Bytes>>, ApiError> {
        let body = self.call(session, command::GET_CLUSTER_METADATA, ClientRequest::GetClusterMetadata).await?;
        let metadata =
            wire::ClusterMetadata::decode(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
        let nodes: Vec<serde_json::Value> = metadata
            .nodes
            .iter()
            .map(|node| {
                json!({
                    "name": node.name,
                    "ip": node.ip,
                    "endpoints": {
                        "tcp": node.tcp_port, "quic": node.quic_port, "http": node.http_port,
                        "websocket": node.websocket_port,
                    },
                    "role": if node.role == 0 { "leader" } else { "follower" },
                    "status": if node.status == 0 { "healthy" } else { "starting" },
                })
            })
            .collect();
        ok_json(json!({ "name": metadata.name, "nodes": nodes }))
    }

    async fn get_streams(&self, session: &Session) -> Result<Response<Full<Bytes>>, ApiError> {
        let body = self.call(session, command::GET_STREAMS, ClientRequest::GetStreams).await?;
        let streams = wire::Stream::decode_list(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
        ok_json(streams.iter().map(|stream| stream_json(stream, None)).collect::<Vec<_>>())
    }

    async fn get_stream(&self, session: &Session, stream: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        let request = ClientRequest::GetStream { stream: identifier(stream)? };
        let body = self.call(session, command::GET_STREAM, request).await?;
        if body.is_empty() {
            return Err(ApiError::not_found());
        }
        let details = wire::StreamDetails::decode(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
        ok_json(stream_json(&details.stream, Some(&details.topics)))
    }

    async fn create_stream(
        &self,
        session: &Session,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: NameBody = request.json()?;
        let request = ClientRequest::CreateStream { name: name(&body.name)?, options: Options::empty() };
        let body = self.call(session, command::CREATE_STREAM, request).await?;
        let details = wire::StreamDetails::decode(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
        ok_json(stream_json(&details.stream, Some(&details.topics)))
    }

    async fn update_stream(
        &self,
        session: &Session,
        stream: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: NameBody = request.json()?;
        let request = ClientRequest::UpdateStream {
            stream: identifier(stream)?,
            name: name(&body.name)?,
            options: Options::empty(),
        };
        self.write(session, command::UPDATE_STREAM, request).await
    }

    async fn get_topics(&self, session: &Session, stream: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        let request = ClientRequest::GetTopics { stream: identifier(stream)? };
        let body = self.call(session, command::GET_TOPICS, request).await?;
        let topics = wire::Topic::decode_list(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
        ok_json(topics.iter().map(|topic| topic_json(topic, None)).collect::<Vec<_>>())
    }

    async fn get_topic(&self, session: &Session, stream: &str, topic: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        let request = ClientRequest::GetTopic { stream: identifier(stream)?, topic: identifier(topic)? };
        let body = self.call(session, command::GET_TOPIC, request).await?;
        if body.is_empty() {
            return Err(ApiError::not_found());
        }
        let details = wire::TopicDetails::decode(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
        ok_json(topic_json(&details.topic, Some(&details.partitions)))
    }

    /// The binary options a topic's JSON fields stand for.
    fn topic_options(
        compression: Option<&str>,
        message_expiry: Option<u64>,
        max_topic_size: Option<u64>,
        more: &HashMap<String, String>,
    ) -> Result<Options, ApiError> {
        let mut pairs = Vec::new();
        let mut keys: Vec<&String> = more.keys().collect();
        keys.sort();
        for key in keys {
            if !["compression_algorithm", "message_expiry", "max_topic_size"].contains(&key.as_str()) {
                pairs.push((key.clone(), OptionValue::String(more[key].clone())));
            }
        }
        if let Some(compression) = compression {
            let value = match compression.to_ascii_lowercase().as_str() {
                "none" => "none",
                "gzip" => "gzip",
                _ => return Err(ApiError::bad_request(format!("compression_algorithm `{compression}`"))),
            };
            pairs.push(("compression_algorithm".to_string(), OptionValue::String(value.to_string())));
        }
        if let Some(expiry) = message_expiry.filter(|expiry| *expiry != 0) {
            pairs.push(("message_expiry".to_string(), OptionValue::U64(expiry)));
        }
        if let Some(size) = max_topic_size.filter(|size| *size != 0) {
            pairs.push(("max_topic_size".to_string(), OptionValue::U64(size)));
        }
        Options::new(pairs).map_err(|error| ApiError::bad_request(error.to_string()))
    }

    async fn create_topic(
        &self,
        session: &Session,
        stream: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: CreateTopicBody = request.json()?;
        let options = Self::topic_options(
            body.compression_algorithm.as_deref(),
            body.message_expiry,
            body.max_topic_size,
            &body.options,
        )?;
        let request = ClientRequest::CreateTopic {
            stream: identifier(stream)?,
            partitions_count: body.partitions_count,
            name: name(&body.name)?,
            options,
        };
        let body = self.call(session, command::CREATE_TOPIC, request).await?;
        let details = wire::TopicDetails::decode(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
        ok_json(topic_json(&details.topic, Some(&details.partitions)))
    }

    async fn update_topic(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: UpdateTopicBody = request.json()?;
        let options = Self::topic_options(
            body.compression_algorithm.as_deref(),
            body.message_expiry,
            body.max_topic_size,
            &body.options,
        )?;
        let request = ClientRequest::UpdateTopic {
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            name: name(&body.name)?,
            options,
        };
        self.write(session, command::UPDATE_TOPIC, request).await
    }

    async fn create_partitions(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: PartitionsBody = request.json()?;
        let request = ClientRequest::CreatePartitions {
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            count: body.partitions_count,
        };
        self.call(session, command::CREATE_PARTITIONS, request).await?;
        // The reference answers 200 with no body.
        empty(StatusCode::OK)
    }

    async fn delete_partitions(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let count = request.query_u32("partitions_count")?.ok_or_else(|| ApiError::bad_request("partitions_count"))?;
        let request = ClientRequest::DeletePartitions { stream: identifier(stream)?, topic: identifier(topic)?, count };
        self.write(session, command::DELETE_PARTITIONS, request).await
    }

    async fn send_messages(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: SendMessagesBody = request.json()?;
        if body.messages.is_empty() {
            return Err(ApiError::new(StatusCode::BAD_REQUEST, 4009, "invalid_messages_count", "no messages"));
        }
        let key = base64_decode("partitioning.value", &body.partitioning.value)?;
        let partitioning = match body.partitioning.kind.as_str() {
            "balanced" => wire::Partitioning::Balanced,
            "partition_id" => {
                let id: [u8; 4] = key.as_slice().try_into().map_err(|_| ApiError::bad_request("partitioning.value"))?;
                wire::Partitioning::PartitionId(u32::from_le_bytes(id))
            }
            "messages_key" => wire::Partitioning::MessagesKey(
                wire::MessagesKey::new(key).map_err(|_| ApiError::bad_request("partitioning.value"))?,
            ),
            other => return Err(ApiError::bad_request(format!("partitioning.kind `{other}`"))),
        };
        let mut builder = BatchBuilder::new();
        for message in &body.messages {
            let mut id = message_id(message.id)?;
            if id == 0 {
                id = self.mint(b"message");
            }
            let payload = base64_decode("payload", &message.payload)?;
            let headers = match &message.user_headers {
                Some(serde_json::Value::String(raw)) => base64_decode("user_headers", raw)?,
                Some(serde_json::Value::Null) | None => Vec::new(),
                Some(serde_json::Value::Array(list)) if list.is_empty() => Vec::new(),
                Some(_) => {
                    return Err(ApiError::bad_request("user_headers: only raw (base64) headers are taken over HTTP"))
                }
            };
            builder.push(id, &payload, &headers);
        }
        let origin = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_micros() as u64);
        let batch = builder.finish(origin);
        let send = wire::SendMessages::new(identifier(stream)?, identifier(topic)?, partitioning, batch)
            .map_err(|error| ApiError::bad_request(error.to_string()))?;
        let ack_none = request.query.get("ack").is_some_and(|ack| ack == "none");
        let reply = self.call(session, command::SEND_MESSAGES, ClientRequest::SendMessages(send)).await?;
        if ack_none {
            return empty(StatusCode::ACCEPTED);
        }
        let appended = wire::SendMessagesReply::decode(&reply).map(|reply| reply.appended).unwrap_or_default();
        let confirmations: Vec<serde_json::Value> = appended
            .iter()
            .map(|appended| {
                json!({
                    "stream_id": appended.stream_id, "topic_id": appended.topic_id,
                    "partition_id": appended.partition_id, "base_offset": appended.base_offset,
                })
            })
            .collect();
        let mut response = json_response(StatusCode::CREATED, json!({ "confirmations": confirmations }).to_string());
        response.headers_mut().insert("iggy-durability", hyper::header::HeaderValue::from_static("replicated-memory"));
        Ok(response)
    }

    async fn poll_messages(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let consumer_id = request.query.get("consumer_id").map_or("1", String::as_str);
        let kind = match request.query.get("kind").map_or("offset", String::as_str) {
            "offset" | "o" => wire::PollingKind::Offset,
            "timestamp" | "t" => wire::PollingKind::Timestamp,
            "first" | "f" => wire::PollingKind::First,
            "last" | "l" => wire::PollingKind::Last,
            "next" | "n" => wire::PollingKind::Next,
            other => return Err(ApiError::bad_request(format!("kind `{other}`"))),
        };
        let count = request.query_u32("count")?.unwrap_or(10).min(POLL_COUNT_MAX);
        let auto_commit = request.query.get("auto_commit").is_some_and(|value| value == "true");
        let poll = wire::PollMessages {
            consumer: consumer(consumer_id)?,
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            partition_id: Some(request.query_u32("partition_id")?.unwrap_or(0)),
            strategy: wire::PollingStrategy { kind, value: request.query_u64("value")?.unwrap_or(0) },
            count,
            auto_commit,
        };
        let body = self.call(session, command::POLL_MESSAGES, ClientRequest::PollMessages(poll)).await?;
        let reply = wire::PollReply::decode(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
        let mut messages = Vec::with_capacity(reply.count() as usize);
        let mut at = 0;
        let batches = reply.batches();
        while at < batches.len() {
            let header =
                BatchHeader::decode(&batches[at..]).map_err(|error| ApiError::bad_request(error.to_string()))?;
            let len = header.batch_length as usize;
            let listed =
                batch::messages(&batches[at..at + len]).map_err(|error| ApiError::bad_request(error.to_string()))?;
            for message in listed {
                let delta = message.timestamp.saturating_sub(header.base_timestamp);
                messages.push(PolledMessage {
                    header: PolledHeader {
                        checksum: message.checksum,
                        id: message.id,
                        offset: message.offset,
                        timestamp: message.timestamp,
                        origin_timestamp: header.origin_timestamp + delta,
                        user_headers_length: message.user_headers.len() as u32,
                        payload_length: message.payload.len() as u32,
                        reserved: 0,
                    },
                    payload: base64_encode(message.payload),
                    user_headers: if message.user_headers.is_empty() {
                        json!([])
                    } else {
                        json!(base64_encode(message.user_headers))
                    },
                });
            }
            at += len;
        }
        ok_json(Polled {
            partition_id: reply.partition_id,
            current_offset: reply.current_offset,
            count: messages.len() as u32,
            messages,
        })
    }

    async fn get_offset(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let key = wire::ConsumerOffsetKey {
            consumer: consumer(request.query.get("consumer_id").map_or("1", String::as_str))?,
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            partition_id: request.query_u32("partition_id")?,
        };
        let body = self.call(session, command::GET_CONSUMER_OFFSET, ClientRequest::GetConsumerOffset(key)).await?;
        if body.is_empty() {
            return Err(ApiError::not_found());
        }
        let offset =
            wire::ConsumerOffsetReply::decode(&body).map_err(|error| ApiError::bad_request(error.to_string()))?;
        ok_json(json!({
            "partition_id": offset.partition_id,
            "current_offset": offset.current_offset,
            "stored_offset": offset.stored_offset,
        }))
    }

    async fn store_offset(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: StoreOffsetBody = request.json()?;
        let consumer_id = match &body.consumer_id {
            serde_json::Value::Number(number) => number.to_string(),
            serde_json::Value::String(text) => text.clone(),
            _ => return Err(ApiError::bad_request("consumer_id")),
        };
        let key = wire::ConsumerOffsetKey {
            consumer: consumer(&consumer_id)?,
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            partition_id: body.partition_id,
        };
        let request = ClientRequest::StoreConsumerOffset { key, offset: body.offset, ack: 1 };
        self.write(session, command::STORE_CONSUMER_OFFSET, request).await
    }

    async fn delete_offset(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        consumer_id: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let key = wire::ConsumerOffsetKey {
            consumer: consumer(consumer_id)?,
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            partition_id: request.query_u32("partition_id")?,
        };
        self.write(session, command::DELETE_CONSUMER_OFFSET, ClientRequest::DeleteConsumerOffset { key, ack: 1 }).await
    }
}
