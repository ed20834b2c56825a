//! The HTTP API's routes for users, personal access tokens, consumer groups, segments and the
//! system (stats, clients, options, snapshot): JSON in and out, the binary request to the node in between.

use std::collections::HashMap;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;

use vireo_protocol::wire::options::Options;
use vireo_protocol::wire::{self, command, ClientRequest, Identifier, ShortBytes};

use super::{byte_size, identifier, name, ok_json, ApiError, ApiRequest, HttpApi, Session};

/// The reference's user status names.
fn status_name(status: u8) -> &'static str {
    if status == 2 {
        "inactive"
    } else {
        "active"
    }
}

fn status_code(name: &str) -> Result<u8, ApiError> {
    match name.to_ascii_lowercase().as_str() {
        "active" => Ok(1),
        "inactive" => Ok(2),
        _ => Err(ApiError::bad_request(format!("status `{name}`"))),
    }
}

#[derive(Serialize, Deserialize, Default)]
struct GlobalJson {
    manage_servers: bool,
    read_servers: bool,
    manage_users: bool,
    read_users: bool,
    manage_streams: bool,
    read_streams: bool,
    manage_topics: bool,
    read_topics: bool,
    poll_messages: bool,
    send_messages: bool,
}

#[derive(Serialize, Deserialize, Default)]
struct TopicJson {
    manage_topic: bool,
    read_topic: bool,
    poll_messages: bool,
    send_messages: bool,
}

#[derive(Serialize, Deserialize, Default)]
struct StreamJson {
    manage_stream: bool,
    read_stream: bool,
    manage_topics: bool,
    read_topics: bool,
    poll_messages: bool,
    send_messages: bool,
    #[serde(default)]
    topics: Option<HashMap<String, TopicJson>>,
}

/// Permissions as the reference's JSON states them (maps keyed by ids as strings).
#[derive(Serialize, Deserialize, Default)]
struct PermissionsJson {
    global: GlobalJson,
    #[serde(default)]
    streams: Option<HashMap<String, StreamJson>>,
}

fn id_key(key: &str) -> Result<u32, ApiError> {
    key.parse().map_err(|_| ApiError::bad_request(format!("permissions: `{key}` is not an id")))
}

impl PermissionsJson {
    fn to_wire(&self) -> Result<wire::Permissions, ApiError> {
        let global = &self.global;
        let mut permissions = wire::Permissions {
            global: wire::GlobalPermissions {
                manage_servers: global.manage_servers,
                read_servers: global.read_servers,
                manage_users: global.manage_users,
                read_users: global.read_users,
                manage_streams: global.manage_streams,
                read_streams: global.read_streams,
                manage_topics: global.manage_topics,
                read_topics: global.read_topics,
                poll_messages: global.poll_messages,
                send_messages: global.send_messages,
            },
            streams: Default::default(),
        };
        for (key, stream) in self.streams.iter().flatten() {
            let mut topics = std::collections::BTreeMap::new();
            for (key, topic) in stream.topics.iter().flatten() {
                topics.insert(
                    id_key(key)?,
                    wire::TopicPermissions {
                        manage_topic: topic.manage_topic,
                        read_topic: topic.read_topic,
                        poll_messages: topic.poll_messages,
                        send_messages: topic.send_messages,
                    },
                );
            }
            permissions.streams.insert(
                id_key(key)?,
                wire::StreamPermissions {
                    manage_stream: stream.manage_stream,
                    read_stream: stream.read_stream,
                    manage_topics: stream.manage_topics,
                    read_topics: stream.read_topics,
                    poll_messages: stream.poll_messages,
                    send_messages: stream.send_messages,
                    topics,
                },
            );
        }
        Ok(permissions)
    }

    fn of_wire(permissions: &wire::Permissions) -> PermissionsJson {
        let global = &permissions.global;
        let streams: HashMap<String, StreamJson> = permissions
            .streams
            .iter()
            .map(|(id, stream)| {
                let topics: HashMap<String, TopicJson> = stream
                    .topics
                    .iter()
                    .map(|(id, topic)| {
                        let topic = TopicJson {
                            manage_topic: topic.manage_topic,
                            read_topic: topic.read_topic,
                            poll_messages: topic.poll_messages,
                            send_messages: topic.send_messages,
                        };
                        (id.to_string(), topic)
                    })
                    .collect();
                let stream = StreamJson {
                    manage_stream: stream.manage_stream,
                    read_stream: stream.read_stream,
                    manage_topics: stream.manage_topics,
                    read_topics: stream.read_topics,
                    poll_messages: stream.poll_messages,
                    send_messages: stream.send_messages,
                    topics: (!topics.is_empty()).then_some(topics),
                };
                (id.to_string(), stream)
            })
            .collect();
        PermissionsJson {
            global: GlobalJson {
                manage_servers: global.manage_servers,
                read_servers: global.read_servers,
                manage_users: global.manage_users,
                read_users: global.read_users,
                manage_streams: global.manage_streams,
                read_streams: global.read_streams,
                manage_topics: global.manage_topics,
                read_topics: global.read_topics,
                poll_messages: global.poll_messages,
                send_messages: global.send_messages,
            },
            streams: (!streams.is_empty()).then_some(streams),
        }
    }
}

fn user_json(user: &wire::UserResponse) -> serde_json::Value {
    json!({
        "id": user.id,
        "created_at": user.created_at,
        "status": status_name(user.status),
        "username": user.username.as_str(),
        "options": {},
    })
}

#[derive(Deserialize)]
struct CreateUserBody {
    username: String,
    password: String,
    status: String,
    #[serde(default)]
    permissions: Option<PermissionsJson>,
}

#[derive(Deserialize)]
struct UpdateUserBody {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

#[derive(Deserialize)]
struct ChangePasswordBody {
    current_password: String,
    new_password: String,
}

#[derive(Deserialize)]
struct UpdatePermissionsBody {
    #[serde(default)]
    permissions: Option<PermissionsJson>,
}

#[derive(Deserialize)]
struct CreateTokenBody {
    name: String,
    #[serde(default)]
    expiry: u64,
}

fn password(text: String) -> Result<ShortBytes, ApiError> {
    ShortBytes::new(text.into_bytes()).map_err(|_| ApiError::of_status(44))
}

fn decoded<T>(decoded: Result<T, wire::WireError>) -> Result<T, ApiError> {
    decoded.map_err(|error| ApiError::bad_request(format!("the node's reply: {error}")))
}

impl HttpApi {
    /// A user path segment: `me` is the caller.
    fn user(session: &Session, segment: &str) -> Result<Identifier, ApiError> {
        if segment == "me" {
            return Ok(Identifier::Numeric(session.user_id));
        }
        identifier(segment)
    }

    pub(super) async fn get_users(&self, session: &Session) -> Result<Response<Full<Bytes>>, ApiError> {
        let body = self.call(session, command::GET_USERS, ClientRequest::GetUsers).await?;
        let users = decoded(wire::UserResponse::decode_list(&body))?;
        ok_json(users.iter().map(user_json).collect::<Vec<_>>())
    }

    pub(super) async fn get_user(&self, session: &Session, user: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        let request = ClientRequest::GetUser { user: Self::user(session, user)? };
        let body = self.call(session, command::GET_USER, request).await?;
        if body.is_empty() {
            return Err(ApiError::not_found());
        }
        let details = decoded(wire::UserDetails::decode(&body))?;
        let mut value = user_json(&details.user);
        value["permissions"] = json!(details.permissions.as_ref().map(PermissionsJson::of_wire));
        ok_json(value)
    }

    pub(super) async fn create_user(
        &self,
        session: &Session,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: CreateUserBody = request.json()?;
        let permissions = body.permissions.as_ref().map(PermissionsJson::to_wire).transpose()?;
        let username = body.username.clone();
        let create = ClientRequest::CreateUser {
            username: name(&body.username).map_err(|_| ApiError::of_status(43))?,
            password: password(body.password)?,
            status: status_code(&body.status)?,
            permissions,
            options: Options::empty(),
        };
        self.call(session, command::CREATE_USER, create).await?;
        // The reference answers the user's details.
        self.get_user(session, &username).await
    }

    pub(super) async fn update_user(
        &self,
        session: &Session,
        user: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: UpdateUserBody = request.json()?;
        let update = ClientRequest::UpdateUser {
            user: Self::user(session, user)?,
            username: body.username.as_deref().map(name).transpose()?,
            status: body.status.as_deref().map(status_code).transpose()?,
            options: Options::empty(),
        };
        self.write(session, command::UPDATE_USER, update).await
    }

    pub(super) async fn delete_user(&self, session: &Session, user: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        let delete = ClientRequest::DeleteUser { user: Self::user(session, user)? };
        self.write(session, command::DELETE_USER, delete).await
    }

    pub(super) async fn change_password(
        &self,
        session: &Session,
        user: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: ChangePasswordBody = request.json()?;
        let change = ClientRequest::ChangePassword {
            user: Self::user(session, user)?,
            current_password: password(body.current_password)?,
            new_password: password(body.new_password)?,
        };
        self.write(session, command::CHANGE_PASSWORD, change).await
    }

    pub(super) async fn update_permissions(
        &self,
        session: &Session,
        user: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: UpdatePermissionsBody = request.json()?;
        let update = ClientRequest::UpdatePermissions {
            user: Self::user(session, user)?,
            permissions: body.permissions.as_ref().map(PermissionsJson::to_wire).transpose()?,
        };
        self.write(session, command::UPDATE_PERMISSIONS, update).await
    }

    pub(super) async fn get_tokens(&self, session: &Session) -> Result<Response<Full<Bytes>>, ApiError> {
        let body =
            self.call(session, command::GET_PERSONAL_ACCESS_TOKENS, ClientRequest::GetPersonalAccessTokens).await?;
        let tokens = decoded(wire::PersonalAccessTokenInfo::decode_list(&body))?;
        let tokens: Vec<serde_json::Value> = tokens
            .iter()
            .map(|token| {
                let expiry_at = (token.expiry_at != 0 && token.expiry_at != u64::MAX).then_some(token.expiry_at);
                json!({ "name": token.name.as_str(), "expiry_at": expiry_at })
            })
            .collect();
        ok_json(tokens)
    }

    pub(super) async fn create_token(
        &self,
        session: &Session,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: CreateTokenBody = request.json()?;
        let create = ClientRequest::CreatePersonalAccessToken {
            name: name(&body.name).map_err(|_| ApiError::of_status(50))?,
            expiry: body.expiry,
        };
        let reply = self.call(session, command::CREATE_PERSONAL_ACCESS_TOKEN, create).await?;
        let created = decoded(wire::CreatedPersonalAccessToken::decode(&reply))?;
        ok_json(json!({ "token": created.token.as_str() }))
    }

    pub(super) async fn delete_token(&self, session: &Session, token: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        let delete = ClientRequest::DeletePersonalAccessToken { name: name(token)? };
        self.write(session, command::DELETE_PERSONAL_ACCESS_TOKEN, delete).await
    }

    pub(super) async fn get_groups(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let request = ClientRequest::GetConsumerGroups { stream: identifier(stream)?, topic: identifier(topic)? };
        let body = self.call(session, command::GET_CONSUMER_GROUPS, request).await?;
        let groups = decoded(wire::ConsumerGroup::decode_list(&body))?;
        let groups: Vec<serde_json::Value> = groups
            .iter()
            .map(|group| {
                json!({
                    "id": group.id, "name": group.name.as_str(),
                    "partitions_count": group.partitions_count, "members_count": group.members_count,
                })
            })
            .collect();
        ok_json(groups)
    }

    fn group_json(group: &wire::ConsumerGroup) -> serde_json::Value {
        let members: Vec<serde_json::Value> = group
            .members
            .iter()
            .map(|member| {
                json!({
                    "id": member.id, "partitions_count": member.partitions.len(),
                    "partitions": member.partitions,
                })
            })
            .collect();
        json!({
            "id": group.id, "name": group.name.as_str(), "partitions_count": group.partitions_count,
            "members_count": group.members.len(), "members": members,
        })
    }

    pub(super) async fn get_group(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        group: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let request = ClientRequest::GetConsumerGroup {
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            group: identifier(group)?,
        };
        let body = self.call(session, command::GET_CONSUMER_GROUP, request).await?;
        if body.is_empty() {
            return Err(ApiError::not_found());
        }
        ok_json(Self::group_json(&decoded(wire::ConsumerGroup::decode(&body))?))
    }

    pub(super) async fn create_group(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let body: super::NameBody = request.json()?;
        let create = ClientRequest::CreateConsumerGroup {
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            name: name(&body.name)?,
        };
        let reply = self.call(session, command::CREATE_CONSUMER_GROUP, create).await?;
        ok_json(Self::group_json(&decoded(wire::ConsumerGroup::decode(&reply))?))
    }

    pub(super) async fn delete_group(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        group: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let delete = ClientRequest::DeleteConsumerGroup {
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            group: identifier(group)?,
        };
        self.write(session, command::DELETE_CONSUMER_GROUP, delete).await
    }

    pub(super) async fn delete_segments(
        &self,
        session: &Session,
        stream: &str,
        topic: &str,
        partition: &str,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let partition_id: u32 = partition.parse().map_err(|_| ApiError::bad_request("partition_id"))?;
        let segments_count =
            request.query_u32("segments_count")?.ok_or_else(|| ApiError::bad_request("segments_count"))?;
        let delete = ClientRequest::DeleteSegments {
            stream: identifier(stream)?,
            topic: identifier(topic)?,
            partition_id,
            segments_count,
        };
        self.write(session, command::DELETE_SEGMENTS, delete).await
    }

    pub(super) async fn get_stats(&self, session: &Session) -> Result<Response<Full<Bytes>>, ApiError> {
        let body = self.call(session, command::GET_STATS, ClientRequest::GetStats).await?;
        let stats = decoded(wire::StatsReply::decode(&body))?;
        let cache: serde_json::Map<String, serde_json::Value> = stats
            .cache_metrics
            .iter()
            .map(|metric| {
                (
                    format!("{}-{}-{}", metric.stream_id, metric.topic_id, metric.partition_id),
                    json!({ "hits": metric.hits, "misses": metric.misses, "hit_ratio": metric.hit_ratio }),
                )
            })
            .collect();
        ok_json(json!({
            "process_id": stats.process_id,
            "cpu_usage": stats.cpu_usage,
            "total_cpu_usage": stats.total_cpu_usage,
            "memory_usage": byte_size(stats.memory_usage),
            "total_memory": byte_size(stats.total_memory),
            "available_memory": byte_size(stats.available_memory),
            "run_time": stats.run_time,
            "start_time": stats.start_time,
            "read_bytes": byte_size(stats.read_bytes),
            "written_bytes": byte_size(stats.written_bytes),
            "messages_size_bytes": byte_size(stats.messages_size_bytes),
            "streams_count": stats.streams_count,
            "topics_count": stats.topics_count,
            "partitions_count": stats.partitions_count,
            "segments_count": stats.segments_count,
            "messages_count": stats.messages_count,
            "clients_count": stats.clients_count,
            "consumer_groups_count": stats.consumer_groups_count,
            "hostname": stats.hostname,
            "os_name": stats.os_name,
            "os_version": stats.os_version,
            "kernel_version": stats.kernel_version,
            "iggy_server_version": stats.iggy_server_version,
            "iggy_server_semver": stats.iggy_server_semver,
            "cache_metrics": cache,
            "threads_count": stats.threads_count,
            "free_disk_space": byte_size(stats.free_disk_space),
            "total_disk_space": byte_size(stats.total_disk_space),
        }))
    }

    pub(super) async fn get_clients(&self, session: &Session) -> Result<Response<Full<Bytes>>, ApiError> {
        let body = self.call(session, command::GET_CLIENTS, ClientRequest::GetClients).await?;
        let mut clients = decoded(wire::ClientInfo::decode_list(&body))?;
        clients.sort_by_key(|client| client.client_id);
        let clients: Vec<serde_json::Value> = clients
            .iter()
            .map(|client| {
                json!({
                    "client_id": client.client_id,
                    "user_id": (client.user_id != u32::MAX).then_some(client.user_id),
                    "address": client.address,
                    "transport": transport_name(client.transport),
                    "consumer_groups_count": client.groups_count,
                })
            })
            .collect();
        ok_json(clients)
    }

    pub(super) async fn get_client(&self, session: &Session, client: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        let client_id: u32 = client.parse().map_err(|_| ApiError::bad_request("client_id"))?;
        let body = self.call(session, command::GET_CLIENT, ClientRequest::GetClient { client_id }).await?;
        if body.is_empty() {
            return Err(ApiError::not_found());
        }
        let client = decoded(wire::ClientInfo::decode(&body))?;
        let groups: Vec<serde_json::Value> = client
            .groups
            .iter()
            .map(
                |group| json!({ "stream_id": group.stream_id, "topic_id": group.topic_id, "group_id": group.group_id }),
            )
            .collect();
        ok_json(json!({
            "client_id": client.client_id,
            "user_id": (client.user_id != u32::MAX).then_some(client.user_id),
            "address": client.address,
            "transport": transport_name(client.transport),
            "consumer_groups_count": groups.len(),
            "consumer_groups": groups,
        }))
    }

    /// `POST /snapshot` with `{"compression": "Deflated", "snapshot_types": ["All"]}` (the
    /// reference's names, any case): the ZIP archive as a download.
    pub(super) async fn get_snapshot(
        &self,
        session: &Session,
        request: &ApiRequest<'_>,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        #[derive(Deserialize)]
        struct Body {
            compression: String,
            snapshot_types: Vec<String>,
        }
        let body: Body = request.json()?;
        let code_of = |name: &str, names: &[&str], offset: u8| {
            let plain = name.replace('_', "").to_ascii_lowercase();
            names.iter().position(|known| *known == plain).map(|index| index as u8 + offset)
        };
        let compression = code_of(&body.compression, &["stored", "deflated", "bzip2", "zstd", "lzma", "xz"], 1)
            .ok_or_else(|| ApiError::bad_request(format!("compression: `{}`", body.compression)))?;
        const TYPES: [&str; 6] =
            ["filesystemoverview", "processlist", "resourceusage", "test", "serverlogs", "serverconfig"];
        let types = body
            .snapshot_types
            .iter()
            .map(|name| {
                if name.eq_ignore_ascii_case("all") {
                    return Ok(100);
                }
                code_of(name, &TYPES, 1).ok_or_else(|| ApiError::bad_request(format!("snapshot_types: `{name}`")))
            })
            .collect::<Result<Vec<u8>, _>>()?;
        if types.len() > u8::MAX as usize {
            return Err(ApiError::bad_request("snapshot_types: more than 255"));
        }
        let archive = self
            .call(session, command::GET_SNAPSHOT_FILE, ClientRequest::GetSnapshotFile { compression, types })
            .await?;
        let mut response = Response::new(Full::new(Bytes::from(archive)));
        let headers = response.headers_mut();
        headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/zip"));
        headers.insert(
            hyper::header::CONTENT_DISPOSITION,
            hyper::header::HeaderValue::from_static("attachment; filename=\"vireo_snapshot.zip\""),
        );
        Ok(response)
    }

    pub(super) async fn describe_options(
        &self,
        session: &Session,
        scope: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let scope = match scope {
            "stream" => 1,
            "topic" => 2,
            "user" => 3,
            _ => return Err(ApiError::of_status(3)),
        };
        let body = self.call(session, command::DESCRIBE_OPTIONS, ClientRequest::DescribeOptions { scope }).await?;
        let options = decoded(wire::OptionDescription::decode_list(&body))?;
        let options: Vec<serde_json::Value> = options
            .iter()
            .map(|option| {
                json!({
                    "key": option.key.as_str(), "kind": option_kind_name(option.kind),
                    "default_value": option.default_value, "description": option.description,
                })
            })
            .collect();
        ok_json(options)
    }
}

fn transport_name(transport: u8) -> &'static str {
    match transport {
        1 => "TCP",
        2 => "QUIC",
        3 => "HTTP",
        4 => "WebSocket",
        _ => "Unknown",
    }
}

fn option_kind_name(kind: u8) -> &'static str {
    match kind {
        1 => "raw",
        2 => "string",
        3 => "bool",
        4 => "int8",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "int128",
        9 => "uint8",
        10 => "uint16",
        11 => "uint32",
        12 => "uint64",
        13 => "uint128",
        14 => "float32",
        15 => "float64",
        _ => "unknown",
    }
}
