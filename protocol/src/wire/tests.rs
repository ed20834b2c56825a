//! The codec's stories: every body round trips, arbitrary and damaged bodies never panic and
//! either fail or re-encode to themselves, a few layouts are pinned byte for byte (written from
//! the SDK's layouts, not from this codec), and malformed bodies name the offset where they went
//! wrong. `protocol/tests/sdk_differential.rs` checks the same layouts against the SDK's code.

use super::command::*;
use super::options::{OPTIONS_PAIRS_MAX, OPTIONS_SIZE_MAX};
use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;
use vireo_storage::batch::{stamp, BatchBuilder, BatchError};

fn name() -> impl Strategy<Value = Name> {
    prop_oneof![
        4 => "\\PC{1,60}".prop_map(|name| Name::new(name).unwrap()),
        1 => Just(Name::new("n".repeat(255)).unwrap()),
    ]
}

fn identifier() -> impl Strategy<Value = Identifier> {
    prop_oneof![any::<u32>().prop_map(Identifier::Numeric), name().prop_map(Identifier::Name)]
}

fn consumer() -> impl Strategy<Value = Consumer> {
    (prop_oneof![Just(ConsumerKind::Consumer), Just(ConsumerKind::ConsumerGroup)], identifier())
        .prop_map(|(kind, id)| Consumer { kind, id })
}

fn partitioning() -> impl Strategy<Value = Partitioning> {
    prop_oneof![
        Just(Partitioning::Balanced),
        any::<u32>().prop_map(Partitioning::PartitionId),
        prop::collection::vec(any::<u8>(), 1..=255)
            .prop_map(|key| Partitioning::MessagesKey(MessagesKey::new(key).unwrap())),
    ]
}

fn strategy() -> impl Strategy<Value = PollingStrategy> {
    let kinds = [PollingKind::Offset, PollingKind::Timestamp, PollingKind::First, PollingKind::Last, PollingKind::Next];
    (prop::sample::select(kinds.to_vec()), any::<u64>()).prop_map(|(kind, value)| PollingStrategy { kind, value })
}

fn short_bytes() -> impl Strategy<Value = ShortBytes> {
    prop::collection::vec(any::<u8>(), 0..=255).prop_map(|bytes| ShortBytes::new(bytes).unwrap())
}

fn option_value() -> impl Strategy<Value = OptionValue> {
    // NaN is a value like any other on the wire, but not equal to itself: round trips compare
    // with `==`, so floats here are numbers; the arbitrary-bytes test covers every bit pattern.
    let f32s = any::<f32>().prop_filter("not NaN", |value| !value.is_nan());
    let f64s = any::<f64>().prop_filter("not NaN", |value| !value.is_nan());
    prop_oneof![
        prop_oneof![
            prop::collection::vec(any::<u8>(), 1..32).prop_map(OptionValue::Raw),
            "\\PC{1,20}".prop_map(OptionValue::String),
            any::<bool>().prop_map(OptionValue::Bool),
            any::<i8>().prop_map(OptionValue::I8),
            any::<i16>().prop_map(OptionValue::I16),
            any::<i32>().prop_map(OptionValue::I32),
            any::<i64>().prop_map(OptionValue::I64),
            any::<i128>().prop_map(OptionValue::I128),
        ],
        prop_oneof![
            any::<u8>().prop_map(OptionValue::U8),
            any::<u16>().prop_map(OptionValue::U16),
            any::<u32>().prop_map(OptionValue::U32),
            any::<u64>().prop_map(OptionValue::U64),
            any::<u128>().prop_map(OptionValue::U128),
            f32s.prop_map(OptionValue::F32),
            f64s.prop_map(OptionValue::F64),
        ],
    ]
}

fn options() -> impl Strategy<Value = Options> {
    prop::collection::vec(("[a-z_]{1,24}", option_value()), 0..6).prop_map(|pairs| {
        let mut unique: Vec<(String, OptionValue)> = Vec::new();
        for (key, value) in pairs {
            if !unique.iter().any(|(earlier, _)| *earlier == key) {
                unique.push((key, value));
            }
        }
        Options::new(unique).unwrap()
    })
}

fn permissions() -> impl Strategy<Value = Permissions> {
    let topic = any::<[bool; 4]>().prop_map(|[manage_topic, read_topic, poll_messages, send_messages]| {
        TopicPermissions { manage_topic, read_topic, poll_messages, send_messages }
    });
    let stream = (any::<[bool; 6]>(), prop::collection::btree_map(any::<u32>(), topic, 0..3)).prop_map(
        |([manage_stream, read_stream, manage_topics, read_topics, poll_messages, send_messages], topics)| {
            StreamPermissions {
                manage_stream,
                read_stream,
                manage_topics,
                read_topics,
                poll_messages,
                send_messages,
                topics,
            }
        },
    );
    (any::<[bool; 10]>(), prop::collection::btree_map(any::<u32>(), stream, 0..3)).prop_map(|(flags, streams)| {
        let [manage_servers, read_servers, manage_users, read_users, manage_streams, read_streams, manage_topics, read_topics, poll_messages, send_messages] =
            flags;
        Permissions {
            global: GlobalPermissions {
                manage_servers,
                read_servers,
                manage_users,
                read_users,
                manage_streams,
                read_streams,
                manage_topics,
                read_topics,
                poll_messages,
                send_messages,
            },
            streams,
        }
    })
}

fn client_batch() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(
            (any::<u128>(), prop::collection::vec(any::<u8>(), 0..48), prop::collection::vec(any::<u8>(), 0..8)),
            1..5,
        ),
        any::<u64>(),
    )
        .prop_map(|(messages, origin_timestamp)| {
            let mut builder = BatchBuilder::new();
            for (id, payload, headers) in &messages {
                builder.push(*id, payload, headers);
            }
            builder.finish(origin_timestamp)
        })
}

/// Batches as a partition stores them, back to back, as a poll reply carries them.
fn stored_batches() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(client_batch(), 0..3).prop_map(|batches| {
        let mut bytes = Vec::new();
        let mut base_offset = 0;
        for mut batch in batches {
            let header = stamp(&mut batch, 1, base_offset, 1_000).unwrap().header;
            base_offset = header.end_offset();
            bytes.extend_from_slice(&batch);
        }
        bytes
    })
}

fn consumer_offset_key() -> impl Strategy<Value = ConsumerOffsetKey> {
    (consumer(), identifier(), identifier(), any::<Option<u32>>())
        .prop_map(|(consumer, stream, topic, partition_id)| ConsumerOffsetKey { consumer, stream, topic, partition_id })
}

fn login_register() -> impl Strategy<Value = LoginRegister> {
    (any::<u32>(), name(), name(), name(), short_bytes(), prop::collection::vec(any::<u8>(), 0..64)).prop_map(
        |(protocol_version, sdk_name, sdk_version, username, password, context)| LoginRegister {
            protocol_version,
            sdk_name,
            sdk_version,
            username,
            password,
            context,
        },
    )
}

fn login_with_token() -> impl Strategy<Value = LoginWithToken> {
    (any::<u32>(), name(), name(), short_bytes(), prop::collection::vec(any::<u8>(), 0..64)).prop_map(
        |(protocol_version, sdk_name, sdk_version, token, context)| LoginWithToken {
            protocol_version,
            sdk_name,
            sdk_version,
            token,
            context,
        },
    )
}

fn poll_messages() -> impl Strategy<Value = PollMessages> {
    (consumer(), identifier(), identifier(), any::<Option<u32>>(), strategy(), any::<u32>(), any::<bool>()).prop_map(
        |(consumer, stream, topic, partition_id, strategy, count, auto_commit)| PollMessages {
            consumer,
            stream,
            topic,
            partition_id,
            strategy,
            count,
            auto_commit,
        },
    )
}

fn send_messages() -> impl Strategy<Value = SendMessages> {
    (identifier(), identifier(), partitioning(), client_batch())
        .prop_map(|(stream, topic, partitioning, batch)| SendMessages::new(stream, topic, partitioning, batch).unwrap())
}

fn request() -> impl Strategy<Value = ClientRequest> {
    use ClientRequest as R;
    let no_body = prop::sample::select(vec![
        R::Ping,
        R::GetStats,
        R::GetClusterMetadata,
        R::GetMe,
        R::GetClients,
        R::GetUsers,
        R::Logout,
        R::GetPersonalAccessTokens,
        R::GetStreams,
    ]);
    let system = prop_oneof![
        (any::<u8>(), prop::collection::vec(any::<u8>(), 0..=255))
            .prop_map(|(compression, types)| R::GetSnapshotFile { compression, types }),
        any::<u8>().prop_map(|scope| R::DescribeOptions { scope }),
        any::<u32>().prop_map(|client_id| R::GetClient { client_id }),
    ];
    let sessions = prop_oneof![
        login_register().prop_map(R::LoginRegister),
        login_with_token().prop_map(R::LoginWithPersonalAccessToken),
        (name(), any::<u64>()).prop_map(|(name, expiry)| R::CreatePersonalAccessToken { name, expiry }),
        name().prop_map(|name| R::DeletePersonalAccessToken { name }),
    ];
    let users = prop_oneof![
        identifier().prop_map(|user| R::GetUser { user }),
        (name(), short_bytes(), any::<u8>(), prop::option::of(permissions()), options()).prop_map(
            |(username, password, status, permissions, options)| R::CreateUser {
                username,
                password,
                status,
                permissions,
                options
            }
        ),
        identifier().prop_map(|user| R::DeleteUser { user }),
        (identifier(), prop::option::of(name()), any::<Option<u8>>(), options())
            .prop_map(|(user, username, status, options)| R::UpdateUser { user, username, status, options }),
        (identifier(), prop::option::of(permissions()))
            .prop_map(|(user, permissions)| R::UpdatePermissions { user, permissions }),
        (identifier(), short_bytes(), short_bytes()).prop_map(|(user, current_password, new_password)| {
            R::ChangePassword { user, current_password, new_password }
        }),
    ];
    let messages = prop_oneof![
        poll_messages().prop_map(R::PollMessages),
        send_messages().prop_map(R::SendMessages),
        (identifier(), identifier(), any::<u32>(), any::<bool>()).prop_map(|(stream, topic, partition_id, fsync)| {
            R::FlushUnsavedBuffer { stream, topic, partition_id, fsync }
        }),
        consumer_offset_key().prop_map(R::GetConsumerOffset),
        (consumer_offset_key(), any::<u64>(), any::<u8>()).prop_map(|(key, offset, ack)| R::StoreConsumerOffset {
            key,
            offset,
            ack
        }),
        (consumer_offset_key(), any::<u8>()).prop_map(|(key, ack)| R::DeleteConsumerOffset { key, ack }),
    ];
    let streams = prop_oneof![
        identifier().prop_map(|stream| R::GetStream { stream }),
        (name(), options()).prop_map(|(name, options)| R::CreateStream { name, options }),
        identifier().prop_map(|stream| R::DeleteStream { stream }),
        (identifier(), name(), options()).prop_map(|(stream, name, options)| R::UpdateStream { stream, name, options }),
        identifier().prop_map(|stream| R::PurgeStream { stream }),
    ];
    let topics = prop_oneof![
        (identifier(), identifier()).prop_map(|(stream, topic)| R::GetTopic { stream, topic }),
        identifier().prop_map(|stream| R::GetTopics { stream }),
        (identifier(), any::<u32>(), name(), options()).prop_map(|(stream, partitions_count, name, options)| {
            R::CreateTopic { stream, partitions_count, name, options }
        }),
        (identifier(), identifier()).prop_map(|(stream, topic)| R::DeleteTopic { stream, topic }),
        (identifier(), identifier(), name(), options()).prop_map(|(stream, topic, name, options)| R::UpdateTopic {
            stream,
            topic,
            name,
            options
        }),
        (identifier(), identifier()).prop_map(|(stream, topic)| R::PurgeTopic { stream, topic }),
    ];
    let partitions = prop_oneof![
        (identifier(), identifier(), any::<u32>()).prop_map(|(stream, topic, count)| R::CreatePartitions {
            stream,
            topic,
            count
        }),
        (identifier(), identifier(), any::<u32>()).prop_map(|(stream, topic, count)| R::DeletePartitions {
            stream,
            topic,
            count
        }),
        (identifier(), identifier(), any::<u32>(), any::<u32>()).prop_map(
            |(stream, topic, partition_id, segments_count)| R::DeleteSegments {
                stream,
                topic,
                partition_id,
                segments_count
            }
        ),
    ];
    let groups = prop_oneof![
        (identifier(), identifier(), identifier()).prop_map(|(stream, topic, group)| R::GetConsumerGroup {
            stream,
            topic,
            group
        }),
        (identifier(), identifier()).prop_map(|(stream, topic)| R::GetConsumerGroups { stream, topic }),
        (identifier(), identifier(), name()).prop_map(|(stream, topic, name)| R::CreateConsumerGroup {
            stream,
            topic,
            name
        }),
        (identifier(), identifier(), identifier()).prop_map(|(stream, topic, group)| R::DeleteConsumerGroup {
            stream,
            topic,
            group
        }),
        (identifier(), identifier(), identifier()).prop_map(|(stream, topic, group)| R::JoinConsumerGroup {
            stream,
            topic,
            group
        }),
        (identifier(), identifier(), identifier()).prop_map(|(stream, topic, group)| R::LeaveConsumerGroup {
            stream,
            topic,
            group
        }),
        (identifier(), identifier(), identifier()).prop_map(|(stream, topic, group)| R::SyncConsumerGroup {
            stream,
            topic,
            group
        }),
    ];
    prop_oneof![
        1 => no_body,
        1 => system,
        2 => sessions,
        3 => users,
        2 => messages,
        2 => streams,
        2 => topics,
        1 => partitions,
        2 => groups,
    ]
}

fn result_section() -> impl Strategy<Value = ResultSection> {
    prop::collection::vec((any::<u32>(), any::<u32>()), 0..5).prop_map(|entries| ResultSection {
        entries: entries.into_iter().map(|(index, result)| ResultEntry { index, result }).collect(),
    })
}

fn stream() -> impl Strategy<Value = Stream> {
    (any::<(u32, u64, u32, u64, u64)>(), name(), options()).prop_map(
        |((id, created_at, topics_count, size, messages_count), name, options)| Stream {
            id,
            created_at,
            topics_count,
            size,
            messages_count,
            name,
            options,
        },
    )
}

fn topic() -> impl Strategy<Value = Topic> {
    (any::<(u32, u64, u32, u64, u8, u64, u64, u64)>(), name(), options(), options()).prop_map(
        |(
            (id, created_at, partitions_count, message_expiry, compression, max_topic_size, size, messages_count),
            name,
            options,
            derived_options,
        )| Topic {
            id,
            created_at,
            partitions_count,
            message_expiry,
            compression,
            max_topic_size,
            size,
            messages_count,
            name,
            options,
            derived_options,
        },
    )
}

fn partition() -> impl Strategy<Value = Partition> {
    any::<(u32, u64, u32, u64, u64, u64)>().prop_map(
        |(id, created_at, segments_count, current_offset, size, messages_count)| Partition {
            id,
            created_at,
            segments_count,
            current_offset,
            size,
            messages_count,
        },
    )
}

fn consumer_group() -> impl Strategy<Value = ConsumerGroup> {
    (
        any::<(u32, u32)>(),
        name(),
        prop::collection::vec((any::<u32>(), prop::collection::vec(any::<u32>(), 0..4)), 0..4),
    )
        .prop_map(|((id, partitions_count), name, members)| ConsumerGroup {
            id,
            partitions_count,
            name,
            members: members.into_iter().map(|(id, partitions)| ConsumerGroupMember { id, partitions }).collect(),
        })
}

fn cluster_metadata() -> impl Strategy<Value = ClusterMetadata> {
    let node = ("\\PC{0,12}", "[0-9.]{0,15}", any::<(u16, u16, u16, u16, u8, u8)>()).prop_map(
        |(name, ip, (tcp_port, quic_port, http_port, websocket_port, role, status))| ClusterNode {
            name,
            ip,
            tcp_port,
            quic_port,
            http_port,
            websocket_port,
            role,
            status,
        },
    );
    ("\\PC{0,12}", prop::collection::vec(node, 0..4)).prop_map(|(name, nodes)| ClusterMetadata { name, nodes })
}

fn user_response() -> impl Strategy<Value = UserResponse> {
    (any::<(u32, u64, u8)>(), name(), options()).prop_map(|((id, created_at, status), username, options)| {
        UserResponse { id, created_at, status, username, options }
    })
}

fn user_details() -> impl Strategy<Value = UserDetails> {
    (user_response(), prop::option::of(permissions())).prop_map(|(user, permissions)| UserDetails { user, permissions })
}

fn stats() -> impl Strategy<Value = StatsReply> {
    // Floats compare with `==` in round trips, so no NaN here; arbitrary bytes cover NaN.
    let ratio = any::<f32>().prop_filter("not NaN", |value| !value.is_nan());
    let metric = (any::<(u32, u32, u32, u64, u64)>(), ratio).prop_map(
        |((stream_id, topic_id, partition_id, hits, misses), hit_ratio)| CacheMetric {
            stream_id,
            topic_id,
            partition_id,
            hits,
            misses,
            hit_ratio,
        },
    );
    let cpu = any::<(f32, f32)>().prop_filter("not NaN", |(a, b)| !a.is_nan() && !b.is_nan());
    (
        (any::<(u32, u64, u64, u64, u64, u64, u64, u64, u64)>(), cpu),
        (any::<(u32, u32, u32, u32, u64, u32)>(), any::<(u32, u32, u32, u64, u64)>()),
        prop::collection::vec("\\PC{0,16}", 5),
        prop::collection::vec(metric, 0..4),
    )
        .prop_map(|(head, counts, strings, cache_metrics)| {
            let (
                (
                    process_id,
                    memory_usage,
                    total_memory,
                    available_memory,
                    run_time,
                    start_time,
                    read_bytes,
                    written_bytes,
                    messages_size_bytes,
                ),
                (cpu_usage, total_cpu_usage),
            ) = head;
            let (
                (streams_count, topics_count, partitions_count, segments_count, messages_count, clients_count),
                (consumer_groups_count, iggy_server_semver, threads_count, free_disk_space, total_disk_space),
            ) = counts;
            StatsReply {
                process_id,
                cpu_usage,
                total_cpu_usage,
                memory_usage,
                total_memory,
                available_memory,
                run_time,
                start_time,
                read_bytes,
                written_bytes,
                messages_size_bytes,
                streams_count,
                topics_count,
                partitions_count,
                segments_count,
                messages_count,
                clients_count,
                consumer_groups_count,
                hostname: strings[0].clone(),
                os_name: strings[1].clone(),
                os_version: strings[2].clone(),
                kernel_version: strings[3].clone(),
                iggy_server_version: strings[4].clone(),
                iggy_server_semver,
                cache_metrics,
                threads_count,
                free_disk_space,
                total_disk_space,
            }
        })
}

fn option_description() -> impl Strategy<Value = OptionDescription> {
    (name(), any::<u8>(), prop::collection::vec(any::<u8>(), 0..16), "\\PC{0,40}")
        .prop_map(|(key, kind, default_value, description)| OptionDescription { key, kind, default_value, description })
}

fn client_info() -> impl Strategy<Value = ClientInfo> {
    (any::<(u32, u32, u8)>(), "\\PC{0,30}", prop::collection::vec(any::<(u32, u32, u32)>(), 0..5)).prop_map(
        |((client_id, user_id, transport), address, groups)| ClientInfo {
            client_id,
            user_id,
            transport,
            address,
            groups: groups
                .into_iter()
                .map(|(stream_id, topic_id, group_id)| GroupMembership { stream_id, topic_id, group_id })
                .collect(),
        },
    )
}

/// Every reply layout, encoded, with a decode that re-encodes what it read.
type ReplyDecoder = fn(&[u8]) -> Result<Vec<u8>, WireError>;

const REPLY_DECODERS: [ReplyDecoder; 25] = [
    |body| ResultSection::decode(body).map(|reply| reply.encode()),
    |body| LoginReply::decode(body).map(|reply| reply.encode()),
    |body| ClientInfo::decode(body).map(|reply| reply.encode()),
    |body| StreamDetails::decode(body).map(|reply| reply.encode()),
    |body| Stream::decode_list(body).map(|streams| Stream::encode_list(&streams)),
    |body| TopicDetails::decode(body).map(|reply| reply.encode()),
    |body| Topic::decode_list(body).map(|topics| Topic::encode_list(&topics)),
    |body| SendMessagesReply::decode(body).map(|reply| reply.encode()),
    |body| PollReply::decode(body).map(|reply| reply.encode()),
    |body| ConsumerOffsetReply::decode(body).map(|reply| reply.encode()),
    |body| ConsumerGroup::decode(body).map(|reply| reply.encode()),
    |body| ConsumerGroup::decode_list(body).map(|groups| ConsumerGroupSummary::encode_list(&groups)),
    |body| ConsumerGroupSummary::decode(body).map(|reply| reply.encode()),
    |body| SyncConsumerGroupReply::decode(body).map(|reply| reply.encode()),
    |body| ClusterMetadata::decode(body).map(|reply| reply.encode()),
    |body| ResultSection::decode_prefix(body).map(|(section, rest)| [section.encode(), rest.to_vec()].concat()),
    |body| ClientInfo::decode_list(body).map(|clients| ClientSummary::encode_list(&clients)),
    |body| ClientSummary::decode(body).map(|reply| reply.encode()),
    |body| UserResponse::decode(body).map(|reply| reply.encode()),
    |body| UserResponse::decode_list(body).map(|users| UserResponse::encode_list(&users)),
    |body| UserDetails::decode(body).map(|reply| reply.encode()),
    |body| PersonalAccessTokenInfo::decode_list(body).map(|tokens| PersonalAccessTokenInfo::encode_list(&tokens)),
    |body| CreatedPersonalAccessToken::decode(body).map(|reply| reply.encode()),
    |body| StatsReply::decode(body).map(|reply| reply.encode()),
    |body| OptionDescription::decode_list(body).map(|options| OptionDescription::encode_list(&options)),
];

/// Damages a body: cuts it short, flips a byte, or appends one.
fn damage(mut body: Vec<u8>, how: u8, at: prop::sample::Index, value: u8) -> Vec<u8> {
    match how % 3 {
        0 => body.truncate(at.index(body.len() + 1)),
        1 if !body.is_empty() => {
            let at = at.index(body.len());
            body[at] ^= value.max(1);
        }
        _ => body.push(value),
    }
    body
}

proptest! {
    #[test]
    fn requests_round_trip(request in request()) {
        let body = request.encode();
        prop_assert_eq!(ClientRequest::decode(request.command_code(), &body), Ok(request));
    }

    #[test]
    fn result_sections_and_logins_round_trip(
        result in result_section(),
        user_id in any::<u32>(),
        session in any::<u64>(),
        server_protocol_version in any::<u32>(),
        server_version in name(),
    ) {
        prop_assert_eq!(ResultSection::decode(&result.encode()), Ok(result.clone()));
        let login = LoginReply { result, user_id, session, server_protocol_version, server_version };
        prop_assert_eq!(LoginReply::decode(&login.encode()), Ok(login));
    }

    #[test]
    fn client_infos_round_trip(info in client_info(), infos in prop::collection::vec(client_info(), 0..4)) {
        prop_assert_eq!(ClientInfo::decode(&info.encode()), Ok(info));
        let summaries: Vec<ClientSummary> = infos.iter().map(ClientInfo::summary).collect();
        prop_assert_eq!(ClientInfo::decode_list(&ClientInfo::encode_list(&infos)), Ok(summaries.clone()));
        prop_assert_eq!(ClientSummary::encode_list(&summaries), ClientInfo::encode_list(&infos));
    }

    #[test]
    fn users_and_tokens_round_trip(
        users in prop::collection::vec(user_response(), 0..4),
        details in user_details(),
        tokens in prop::collection::vec((name(), any::<u64>()), 0..4),
        token in name(),
    ) {
        prop_assert_eq!(UserResponse::decode_list(&UserResponse::encode_list(&users)), Ok(users));
        prop_assert_eq!(UserDetails::decode(&details.encode()), Ok(details));
        let tokens: Vec<PersonalAccessTokenInfo> =
            tokens.into_iter().map(|(name, expiry_at)| PersonalAccessTokenInfo { name, expiry_at }).collect();
        prop_assert_eq!(PersonalAccessTokenInfo::decode_list(&PersonalAccessTokenInfo::encode_list(&tokens)), Ok(tokens));
        let created = CreatedPersonalAccessToken { token };
        prop_assert_eq!(CreatedPersonalAccessToken::decode(&created.encode()), Ok(created));
    }

    #[test]
    fn system_replies_round_trip(
        stats in stats(),
        descriptions in prop::collection::vec(option_description(), 0..4),
        generation in any::<u64>(),
        partitions in prop::collection::vec(any::<u32>(), 0..6),
    ) {
        prop_assert_eq!(StatsReply::decode(&stats.encode()), Ok(stats));
        prop_assert_eq!(OptionDescription::decode_list(&OptionDescription::encode_list(&descriptions)), Ok(descriptions));
        let sync = SyncConsumerGroupReply { generation, partitions };
        prop_assert_eq!(SyncConsumerGroupReply::decode(&sync.encode()), Ok(sync));
    }

    #[test]
    fn streams_and_topics_round_trip(
        mut stream in stream(),
        streams in prop::collection::vec(stream(), 0..4),
        mut topic_heads in prop::collection::vec(topic(), 0..4),
        partitions in prop::collection::vec(partition(), 0..5),
    ) {
        prop_assert_eq!(Stream::decode_list(&Stream::encode_list(&streams)), Ok(streams));
        prop_assert_eq!(Topic::decode_list(&Topic::encode_list(&topic_heads)), Ok(topic_heads.clone()));

        stream.topics_count = topic_heads.len() as u32;
        let details = StreamDetails { stream, topics: topic_heads.clone() };
        prop_assert_eq!(StreamDetails::decode(&details.encode()), Ok(details));

        if let Some(mut topic) = topic_heads.pop() {
            topic.partitions_count = partitions.len() as u32;
            let details = TopicDetails { topic, partitions };
            prop_assert_eq!(TopicDetails::decode(&details.encode()), Ok(details));
        }
    }

    #[test]
    fn message_replies_round_trip(
        appended in prop::collection::vec(any::<(u32, u32, u32, u64)>(), 0..5),
        poll_head in any::<(u32, u64)>(),
        batches in stored_batches(),
        offsets in any::<(u32, u64, u64)>(),
    ) {
        let send = SendMessagesReply {
            appended: appended
                .into_iter()
                .map(|(stream_id, topic_id, partition_id, base_offset)| Appended { stream_id, topic_id, partition_id, base_offset })
                .collect(),
        };
        prop_assert_eq!(SendMessagesReply::decode(&send.encode()), Ok(send));

        let poll = PollReply::new(poll_head.0, poll_head.1, batches).unwrap();
        prop_assert_eq!(PollReply::decode(&poll.encode()), Ok(poll));

        let offset = ConsumerOffsetReply { partition_id: offsets.0, current_offset: offsets.1, stored_offset: offsets.2 };
        prop_assert_eq!(ConsumerOffsetReply::decode(&offset.encode()), Ok(offset));
    }

    #[test]
    fn groups_and_cluster_round_trip(
        group in consumer_group(),
        groups in prop::collection::vec(consumer_group(), 0..3),
        cluster in cluster_metadata(),
    ) {
        prop_assert_eq!(ConsumerGroup::decode(&group.encode()), Ok(group));
        let summaries: Vec<ConsumerGroupSummary> = groups.iter().map(ConsumerGroup::summary).collect();
        prop_assert_eq!(ConsumerGroup::decode_list(&ConsumerGroup::encode_list(&groups)), Ok(summaries.clone()));
        prop_assert_eq!(ConsumerGroupSummary::encode_list(&summaries), ConsumerGroup::encode_list(&groups));
        prop_assert_eq!(ClusterMetadata::decode(&cluster.encode()), Ok(cluster));
    }

    #[test]
    fn arbitrary_request_bodies_fail_or_re_encode_to_themselves(
        other_code in any::<u32>(),
        body in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let obsolete = [LOGIN_USER_OBSOLETE, LOGIN_WITH_TOKEN_OBSOLETE];
        for code in CLIENT_COMMAND_CODES.into_iter().chain(obsolete).chain([other_code]) {
            if let Ok(request) = ClientRequest::decode(code, &body) {
                prop_assert_eq!(request.command_code(), code);
                prop_assert_eq!(request.encode(), body.clone());
            }
        }
        match decode_login(&body) {
            Ok(Login::Password(login)) => prop_assert_eq!(ClientRequest::LoginRegister(login).encode(), body),
            Ok(Login::Token(login)) => {
                prop_assert_eq!(ClientRequest::LoginWithPersonalAccessToken(login).encode(), body)
            }
            Err(_) => {}
        }
    }

    #[test]
    fn damaged_request_bodies_fail_or_re_encode_to_themselves(
        request in request(),
        how in any::<u8>(),
        at in any::<prop::sample::Index>(),
        value in any::<u8>(),
    ) {
        let code = request.command_code();
        let body = damage(request.encode(), how, at, value);
        if let Ok(decoded) = ClientRequest::decode(code, &body) {
            prop_assert_eq!(decoded.encode(), body);
        }
    }

    #[test]
    fn arbitrary_and_damaged_reply_bodies_fail_or_re_encode_to_themselves(
        body in prop::collection::vec(any::<u8>(), 0..512),
        poll_head in any::<(u32, u64)>(),
        batches in stored_batches(),
        mut topic in topic(),
        partitions in prop::collection::vec(partition(), 0..3),
        group in consumer_group(),
        cluster in cluster_metadata(),
        details in user_details(),
        stats in stats(),
        how in any::<u8>(),
        at in any::<prop::sample::Index>(),
        value in any::<u8>(),
    ) {
        topic.partitions_count = partitions.len() as u32;
        let valid = [
            PollReply::new(poll_head.0, poll_head.1, batches).unwrap().encode(),
            TopicDetails { topic, partitions }.encode(),
            group.encode(),
            cluster.encode(),
            details.encode(),
            stats.encode(),
        ];
        let damaged = valid.into_iter().map(|valid| damage(valid, how, at, value));
        for body in std::iter::once(body).chain(damaged) {
            for decode in REPLY_DECODERS {
                if let Ok(encoded) = decode(&body) {
                    prop_assert_eq!(encoded, body.clone());
                }
            }
        }
    }
}

fn numeric(id: u32) -> Identifier {
    Identifier::Numeric(id)
}

#[test]
fn a_numeric_identifier_is_kind_len_and_u32() {
    let mut bytes = Vec::new();
    numeric(7).write(&mut bytes);
    assert_eq!(bytes, [1, 4, 7, 0, 0, 0]);
    let mut bytes = Vec::new();
    Identifier::Name(Name::new("ab").unwrap()).write(&mut bytes);
    assert_eq!(bytes, [2, 2, b'a', b'b']);
}

#[test]
fn a_create_stream_body_is_name_then_bare_options() {
    let options = Options::new(vec![("k".into(), OptionValue::U8(9))]).unwrap();
    let request = ClientRequest::CreateStream { name: Name::new("orders").unwrap(), options };
    #[rustfmt::skip]
    let expected = [
        6, b'o', b'r', b'd', b'e', b'r', b's', // Name
        2, 1, 0, 0, 0, b'k',                    // key: kind 2 (string), len 1
        9, 1, 0, 0, 0, 9,                       // value: kind 9 (u8), len 1
    ];
    assert_eq!(request.encode(), expected);
    assert_eq!(ClientRequest::decode(CREATE_STREAM, &expected), Ok(request));
    // What the SDK sends: the name alone, no options and no length for them.
    let bare = ClientRequest::CreateStream { name: Name::new("orders").unwrap(), options: Options::empty() };
    assert_eq!(bare.encode(), expected[..7]);
    assert_eq!(ClientRequest::decode(CREATE_STREAM, &expected[..7]), Ok(bare));
}

#[test]
fn options_in_replies_keep_their_length() {
    let options = Options::new(vec![("k".into(), OptionValue::Bool(true))]).unwrap();
    let mut prefixed = Vec::new();
    options.write(&mut prefixed);
    let mut bare = Vec::new();
    options.write_bare(&mut bare);
    assert_eq!(prefixed[..4], (bare.len() as u32).to_le_bytes());
    assert_eq!(prefixed[4..], bare);
    assert_eq!(Options::read(&mut Reader::new(&prefixed)), Ok(options.clone()));
    assert_eq!(Options::read_bare(&mut Reader::new(&bare)), Ok(options));
}

/// create_user with permissions, written from the SDK's layout (`CreateUserRequest`,
/// `WirePermissions`): flags as bytes, streams and topics as chains with "has next" bytes, the
/// permissions behind a u32 length, options bare at the end.
#[test]
fn a_create_user_body_carries_sized_permissions() {
    let mut topics = BTreeMap::new();
    topics.insert(2, TopicPermissions { poll_messages: true, ..TopicPermissions::default() });
    let mut streams = BTreeMap::new();
    streams.insert(7, StreamPermissions { read_stream: true, topics, ..StreamPermissions::default() });
    let permissions = Permissions {
        global: GlobalPermissions { manage_servers: true, read_users: true, ..GlobalPermissions::default() },
        streams,
    };
    let request = ClientRequest::CreateUser {
        username: Name::new("ann").unwrap(),
        password: ShortBytes::new(*b"pw").unwrap(),
        status: 1,
        permissions: Some(permissions),
        options: Options::empty(),
    };
    #[rustfmt::skip]
    let expected = [
        3, b'a', b'n', b'n',            // username
        2, b'p', b'w',                  // password
        1,                              // status: active
        1,                              // has_permissions
        32, 0, 0, 0,                    // permissions length
        1, 0, 0, 1, 0, 0, 0, 0, 0, 0,   // global: manage_servers, read_users
        1,                              // has_streams
        7, 0, 0, 0,                     // stream 7
        0, 1, 0, 0, 0, 0,               // read_stream
        1,                              // has_topics
        2, 0, 0, 0,                     // topic 2
        0, 0, 1, 0,                     // poll_messages
        0,                              // no next topic
        0,                              // no next stream
    ];
    assert_eq!(request.encode(), expected);
    assert_eq!(ClientRequest::decode(CREATE_USER, &expected), Ok(request));

    // Only 0 and 1 are flags, so that a decoded body re-encodes to itself.
    let mut two = expected;
    two[13] = 2;
    assert_eq!(
        ClientRequest::decode(CREATE_USER, &two),
        Err(WireError::Invalid { offset: 13, what: "manage_servers (0 or 1)" })
    );
    // The length must be the permissions' bytes exactly.
    let mut long = expected.to_vec();
    long[9] = 33;
    long.push(0);
    assert_eq!(ClientRequest::decode(CREATE_USER, &long), Err(WireError::TrailingBytes { offset: 45 }));
}

#[test]
fn permissions_list_streams_in_ascending_order_once() {
    #[rustfmt::skip]
    let body = [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        1,
        7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // stream 7, no topics, another follows
        5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // stream 5: out of order
    ];
    assert_eq!(
        Permissions::read(&mut Reader::new(&body)),
        Err(WireError::Invalid { offset: 23, what: "stream id (ascending, each once)" })
    );
}

/// get_topics' reply, written from the SDK's `GetTopicsResponse`: a u32 count, then topic headers
/// without partitions, each with its two length-prefixed option blocks.
#[test]
fn a_get_topics_reply_counts_its_topics() {
    let topic = Topic {
        id: 3,
        created_at: 5,
        partitions_count: 2,
        message_expiry: 0,
        compression: 1,
        max_topic_size: 0,
        size: 9,
        messages_count: 4,
        name: Name::new("t").unwrap(),
        options: Options::empty(),
        derived_options: Options::empty(),
    };
    #[rustfmt::skip]
    let expected = [
        1, 0, 0, 0,                 // topics count
        3, 0, 0, 0,                 // id
        5, 0, 0, 0, 0, 0, 0, 0,     // created_at
        2, 0, 0, 0,                 // partitions_count
        0, 0, 0, 0, 0, 0, 0, 0,     // message_expiry
        1,                          // compression
        0, 0, 0, 0, 0, 0, 0, 0,     // max_topic_size
        9, 0, 0, 0, 0, 0, 0, 0,     // size
        4, 0, 0, 0, 0, 0, 0, 0,     // messages_count
        1, b't',                    // name
        0, 0, 0, 0,                 // options length
        0, 0, 0, 0,                 // derived options length
    ];
    assert_eq!(Topic::encode_list(std::slice::from_ref(&topic)), expected);
    assert_eq!(Topic::decode_list(&expected), Ok(vec![topic]));
    assert_eq!(Topic::encode_list(&[]), [0, 0, 0, 0]);
}

/// The personal access token login, written from the SDK's `LoginRegisterWithPatRequest`: the
/// version prefix of login_register, then the token and the context.
#[test]
fn a_token_login_has_the_version_prefix_and_is_told_from_a_password_login() {
    let login = LoginWithToken {
        protocol_version: 0x2C00,
        sdk_name: Name::new("rust-sdk").unwrap(),
        sdk_version: Name::new("0.11").unwrap(),
        token: ShortBytes::new(*b"tok").unwrap(),
        context: vec![],
    };
    #[rustfmt::skip]
    let expected = [
        0x00, 0x2C, 0, 0,                                     // protocol version 0.11.0
        8, b'r', b'u', b's', b't', b'-', b's', b'd', b'k',    // sdk name
        4, b'0', b'.', b'1', b'1',                            // sdk version
        3, b't', b'o', b'k',                                  // token
        0, 0, 0, 0,                                           // context length
    ];
    let request = ClientRequest::LoginWithPersonalAccessToken(login.clone());
    assert_eq!(request.encode(), expected);
    assert_eq!(ClientRequest::decode(LOGIN_WITH_PERSONAL_ACCESS_TOKEN, &expected), Ok(request));
    assert_eq!(decode_login(&expected), Ok(Login::Token(login)));

    let password = LoginRegister {
        protocol_version: 0x2C00,
        sdk_name: Name::new("rust-sdk").unwrap(),
        sdk_version: Name::new("0.11").unwrap(),
        username: Name::new("iggy").unwrap(),
        password: ShortBytes::new(*b"iggy").unwrap(),
        context: vec![],
    };
    let body = ClientRequest::LoginRegister(password.clone()).encode();
    assert_eq!(decode_login(&body), Ok(Login::Password(password)));
    // Neither shape: the password shape's error.
    assert_eq!(decode_login(&expected[..18]), Err(WireError::Short { offset: 18, needed: 1, what: "name length" }));
}

#[test]
fn delete_consumer_offset_ends_with_an_ack() {
    let key = ConsumerOffsetKey {
        consumer: Consumer { kind: ConsumerKind::Consumer, id: numeric(1) },
        stream: numeric(2),
        topic: numeric(3),
        partition_id: Some(0),
    };
    let request = ClientRequest::DeleteConsumerOffset { key: key.clone(), ack: 1 };
    let body = request.encode();
    assert_eq!(body.len(), 7 + 6 + 6 + 5 + 1);
    assert_eq!(body.last(), Some(&1));
    assert_eq!(ClientRequest::decode(DELETE_CONSUMER_OFFSET, &body), Ok(request));
    assert_eq!(
        ClientRequest::decode(DELETE_CONSUMER_OFFSET, &body[..body.len() - 1]),
        Err(WireError::Short { offset: 24, needed: 1, what: "ack" })
    );
}

#[test]
fn user_details_without_permissions_are_four_zero_bytes() {
    let user =
        UserResponse { id: 1, created_at: 2, status: 1, username: Name::new("u").unwrap(), options: Options::empty() };
    let details = UserDetails { user, permissions: None };
    let body = details.encode();
    assert_eq!(body[body.len() - 4..], [0, 0, 0, 0]);
    assert_eq!(UserDetails::decode(&body), Ok(details));
    let mut dirty = body.clone();
    *dirty.last_mut().unwrap() = 1;
    assert_eq!(
        UserDetails::decode(&dirty),
        Err(WireError::Invalid { offset: body.len() - 3, what: "no permissions (3 zero bytes after the 0 flag)" })
    );
}

#[test]
fn list_replies_without_members_or_groups_keep_their_counts() {
    let group = ConsumerGroup {
        id: 1,
        partitions_count: 3,
        name: Name::new("g").unwrap(),
        members: vec![ConsumerGroupMember { id: 9, partitions: vec![0, 2] }],
    };
    // The single reply carries the members; the list only their count.
    assert_eq!(ConsumerGroup::encode_list(std::slice::from_ref(&group)), [&group.encode()[..14]].concat());
    assert_eq!(
        ConsumerGroup::decode_list(&ConsumerGroup::encode_list(std::slice::from_ref(&group))),
        Ok(vec![ConsumerGroupSummary { id: 1, partitions_count: 3, members_count: 1, name: Name::new("g").unwrap() }])
    );
    let client = ClientInfo {
        client_id: 4,
        user_id: 5,
        transport: 1,
        address: "a".into(),
        groups: vec![GroupMembership { stream_id: 1, topic_id: 2, group_id: 3 }],
    };
    assert_eq!(ClientInfo::encode_list(std::slice::from_ref(&client)), client.encode()[..18]);
}

#[test]
fn a_poll_messages_body_pins_every_field() {
    let request = ClientRequest::PollMessages(PollMessages {
        consumer: Consumer { kind: ConsumerKind::ConsumerGroup, id: numeric(3) },
        stream: numeric(1),
        topic: numeric(2),
        partition_id: Some(5),
        strategy: PollingStrategy { kind: PollingKind::Offset, value: 10 },
        count: 100,
        auto_commit: true,
    });
    #[rustfmt::skip]
    let expected = [
        2, 1, 4, 3, 0, 0, 0,        // consumer group 3
        1, 4, 1, 0, 0, 0,           // stream 1
        1, 4, 2, 0, 0, 0,           // topic 2
        1, 5, 0, 0, 0,              // has_partition, partition 5
        1, 10, 0, 0, 0, 0, 0, 0, 0, // strategy: offset 10
        100, 0, 0, 0,               // count
        1,                          // auto_commit
    ];
    assert_eq!(request.encode(), expected);
    assert_eq!(ClientRequest::decode(POLL_MESSAGES, &expected), Ok(request));
}

fn one_message_batch() -> Vec<u8> {
    BatchBuilder::new().message(1, b"hi", b"").finish(0)
}

#[test]
fn send_messages_metadata_length_counts_stream_topic_partitioning_and_count() {
    let send = SendMessages::new(numeric(1), numeric(2), Partitioning::PartitionId(3), one_message_batch()).unwrap();
    let body = ClientRequest::SendMessages(send).encode();
    // 6 + 6 + 6 + 4: the identifiers, the partitioning and the message count, not itself.
    assert_eq!(body[0..4], 22u32.to_le_bytes());
    assert_eq!(body[4..10], [1, 4, 1, 0, 0, 0]);
    assert_eq!(body[16..22], [2, 4, 3, 0, 0, 0]);
    assert_eq!(body[22..26], 1u32.to_le_bytes());
    assert_eq!(body[26..], one_message_batch());

    let mut wrong_length = body.clone();
    wrong_length[0] = 26;
    assert_eq!(
        ClientRequest::decode(SEND_MESSAGES, &wrong_length),
        Err(WireError::Invalid {
            offset: 0,
            what: "metadata length (bytes of stream, topic, partitioning and message count)"
        })
    );

    let mut wrong_count = body.clone();
    wrong_count[22] = 2;
    assert_eq!(
        ClientRequest::decode(SEND_MESSAGES, &wrong_count),
        Err(WireError::Invalid { offset: 22, what: "message count (the batch's message_count)" })
    );

    let mut cut_batch = body.clone();
    cut_batch.pop();
    assert_eq!(
        ClientRequest::decode(SEND_MESSAGES, &cut_batch),
        Err(WireError::Batch { offset: 26, source: BatchError::Short })
    );
}

#[test]
fn malformed_bodies_name_the_offset() {
    // The topic's identifier kind, after a whole stream identifier.
    assert_eq!(
        ClientRequest::decode(GET_TOPIC, &[1, 4, 1, 0, 0, 0, 3, 4, 1, 0, 0, 0]),
        Err(WireError::Invalid { offset: 6, what: "identifier kind (1 numeric, 2 string)" })
    );
    // A numeric identifier must say 4 bytes.
    assert_eq!(
        ClientRequest::decode(GET_STREAM, &[1, 3, 1, 0, 0]),
        Err(WireError::Invalid { offset: 1, what: "numeric identifier length (4)" })
    );
    // create_topic's name, after stream (6 bytes) and partitions_count (4).
    assert_eq!(
        ClientRequest::decode(CREATE_TOPIC, &[1, 4, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]),
        Err(WireError::Invalid { offset: 10, what: "name length (1..=255 bytes)" })
    );
    // A name that is not UTF-8 names its first byte.
    assert_eq!(
        ClientRequest::decode(CREATE_STREAM, &[1, 0xff, 0, 0, 0, 0]),
        Err(WireError::Invalid { offset: 1, what: "name (UTF-8)" })
    );
    // A poll cut inside its strategy.
    let poll = [2, 1, 4, 3, 0, 0, 0, 1, 4, 1, 0, 0, 0, 1, 4, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 10, 0];
    assert_eq!(
        ClientRequest::decode(POLL_MESSAGES, &poll),
        Err(WireError::Short { offset: 25, needed: 8, what: "polling strategy value" })
    );
    // An absent partition is written as 0.
    let mut absent = ClientRequest::GetConsumerOffset(ConsumerOffsetKey {
        consumer: Consumer { kind: ConsumerKind::Consumer, id: numeric(1) },
        stream: numeric(1),
        topic: numeric(1),
        partition_id: None,
    })
    .encode();
    absent[20] = 1;
    assert_eq!(
        ClientRequest::decode(GET_CONSUMER_OFFSET, &absent),
        Err(WireError::Invalid { offset: 20, what: "partition id (0 when has_partition is 0)" })
    );
    // Bytes past the last field.
    assert_eq!(ClientRequest::decode(PING, &[0]), Err(WireError::TrailingBytes { offset: 0 }));
    // delete_topic takes the u32 the Node SDK sends after its identifiers, and nothing else.
    let delete_topic = ClientRequest::DeleteTopic { stream: numeric(1), topic: numeric(2) }.encode();
    let mut with_count = delete_topic.clone();
    with_count.extend_from_slice(&3u32.to_le_bytes());
    assert_eq!(ClientRequest::decode(DELETE_TOPIC, &with_count), ClientRequest::decode(DELETE_TOPIC, &delete_topic));
    assert!(ClientRequest::decode(DELETE_TOPIC, &delete_topic).is_ok());
    for extra in [1, 3, 5] {
        let mut tail = delete_topic.clone();
        tail.extend(std::iter::repeat_n(0, extra));
        assert_eq!(
            ClientRequest::decode(DELETE_TOPIC, &tail),
            Err(WireError::TrailingBytes { offset: delete_topic.len() }),
            "{extra} bytes after delete_topic's identifiers"
        );
    }
    assert_eq!(ClientRequest::decode(GET_CLIENT, &[1, 0, 0, 0, 9]), Err(WireError::TrailingBytes { offset: 4 }));
}

#[test]
fn option_values_have_the_length_of_their_kind() {
    // A u32 value (kind 11) that says 2 bytes; the value length sits after the 2-byte name, the
    // 6-byte key and the value's kind.
    #[rustfmt::skip]
    let body = [1, b's', 2, 1, 0, 0, 0, b'k', 11, 2, 0, 0, 0, 7, 0];
    assert_eq!(
        ClientRequest::decode(CREATE_STREAM, &body),
        Err(WireError::Invalid { offset: 9, what: "option value length for its kind" })
    );
    // A bool is 0 or 1.
    #[rustfmt::skip]
    let body = [1, b's', 2, 1, 0, 0, 0, b'k', 3, 1, 0, 0, 0, 2];
    assert_eq!(
        ClientRequest::decode(CREATE_STREAM, &body),
        Err(WireError::Invalid { offset: 13, what: "option bool value (0 or 1)" })
    );
    // Keys are strings (kind 2).
    #[rustfmt::skip]
    let body = [1, b's', 1, 1, 0, 0, 0, b'k', 9, 1, 0, 0, 0, 2];
    assert_eq!(
        ClientRequest::decode(CREATE_STREAM, &body),
        Err(WireError::Invalid { offset: 2, what: "option key kind (2, string)" })
    );
    // Every entry is 1..=255 bytes (the SDK refuses an empty or longer string).
    #[rustfmt::skip]
    let body = [1, b's', 2, 1, 0, 0, 0, b'k', 2, 0, 0, 0, 0];
    assert_eq!(
        ClientRequest::decode(CREATE_STREAM, &body),
        Err(WireError::Invalid { offset: 9, what: "option value length (1..=255 bytes)" })
    );
    let empty = vec![("k".into(), OptionValue::String(String::new()))];
    assert!(matches!(Options::new(empty), Err(WireError::Invalid { what: "option value length (1..=255 bytes)", .. })));
    let long = vec![("k".into(), OptionValue::Raw(vec![0; 256]))];
    assert!(matches!(Options::new(long), Err(WireError::Invalid { what: "option value length (1..=255 bytes)", .. })));
    assert!(Options::new(vec![("k".into(), OptionValue::Raw(vec![0; 255]))]).is_ok());
}

#[test]
fn options_are_bounded() {
    let too_long = (OPTIONS_SIZE_MAX as u32 + 1).to_le_bytes();
    assert_eq!(
        Options::read(&mut Reader::new(&too_long)),
        Err(WireError::TooLarge {
            offset: 0,
            what: "options length",
            len: OPTIONS_SIZE_MAX as u64 + 1,
            max: OPTIONS_SIZE_MAX as u64
        })
    );
    let body = [&[1, b's'][..], &vec![0; OPTIONS_SIZE_MAX + 1]].concat();
    assert_eq!(
        ClientRequest::decode(CREATE_STREAM, &body),
        Err(WireError::TooLarge {
            offset: 2,
            what: "options size",
            len: OPTIONS_SIZE_MAX as u64 + 1,
            max: OPTIONS_SIZE_MAX as u64
        })
    );
    let pairs = (0..=OPTIONS_PAIRS_MAX).map(|index| (format!("k{index}"), OptionValue::Bool(true))).collect();
    assert!(matches!(Options::new(pairs), Err(WireError::TooLarge { what: "option pairs", .. })));
    let twice = vec![("k".into(), OptionValue::U8(1)), ("k".into(), OptionValue::U8(2))];
    assert!(matches!(Options::new(twice), Err(WireError::Invalid { what: "option key (given twice)", .. })));
}

#[test]
fn old_logins_and_unknown_codes_are_refused_by_name() {
    assert_eq!(ClientRequest::decode(38, &[]), Err(WireError::ObsoleteLogin(38)));
    assert_eq!(ClientRequest::decode(44, &[]), Err(WireError::ObsoleteLogin(44)));
    assert_eq!(ClientRequest::decode(2, &[]), Err(WireError::UnknownCommand(2)));
}

#[test]
fn a_lying_count_fails_before_anything_trusts_it() {
    // u32::MAX results promised, none sent: refused at once, not after 32 GiB of allocation.
    assert_eq!(
        ResultSection::decode(&u32::MAX.to_le_bytes()),
        Err(WireError::Short { offset: 4, needed: u32::MAX as usize * 8, what: "result count" })
    );
}

#[test]
fn result_sections_are_ok_when_empty_or_led_by_zero() {
    assert!(ResultSection::ok().is_ok());
    let failed = ResultSection { entries: vec![ResultEntry { index: 0, result: 1009 }] };
    assert!(!failed.is_ok());
    let body = [failed.encode(), vec![7, 7]].concat();
    assert_eq!(ResultSection::decode_prefix(&body), Ok((failed, &[7u8, 7][..])));
}

#[test]
fn poll_reply_count_is_the_messages_in_its_batches() {
    let mut batch = BatchBuilder::new().message(1, b"a", b"").message(2, b"b", b"").finish(0);
    stamp(&mut batch, 1, 0, 5).unwrap();
    let reply = PollReply::new(1, 1, batch).unwrap();
    assert_eq!(reply.count(), 2);
    let mut body = reply.encode();
    body[12] = 3;
    assert_eq!(
        PollReply::decode(&body),
        Err(WireError::Invalid { offset: 12, what: "message count (the batches' messages)" })
    );
    body[12] = 2;
    body.push(0);
    assert_eq!(PollReply::decode(&body), Err(WireError::Batch { offset: body.len() - 1, source: BatchError::Short }));
}
