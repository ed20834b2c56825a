//! The published Iggy Rust SDK's conversation with a vireo-server, shared by the tests that run it
//! over plain TCP (`server_sdk`) and over TLS (`server_tls`): every command group of `PROTOCOL.md`
//! (system, streams, topics, partitions, messages with every polling strategy and partitioning,
//! consumer offsets, consumer groups, users and permissions, personal access tokens, segments),
//! and the reference's error codes for what is missing or forbidden.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use iggy::prelude::*;

/// Where the conversation's clients connect: a server's client port, in the clear or over TLS
/// (trusting the certificate in `tls_ca`, for the name localhost).
pub struct Endpoint {
    pub address: SocketAddr,
    pub tls_ca: Option<PathBuf>,
}

pub async fn connect(server: &Endpoint) -> IggyClient {
    let builder = IggyClient::builder().with_tcp().with_server_address(server.address.to_string());
    let builder = match &server.tls_ca {
        None => builder,
        Some(ca) => builder
            .with_tls_enabled(true)
            .with_tls_domain("localhost".to_string())
            .with_tls_ca_file(ca.display().to_string()),
    };
    let client = builder.build().expect("a client");
    client.connect().await.expect("connects");
    client
}

pub async fn root(server: &Endpoint) -> IggyClient {
    let client = connect(server).await;
    client.login_user(DEFAULT_ROOT_USERNAME, DEFAULT_ROOT_PASSWORD).await.expect("root logs in");
    client
}

pub fn id(name: &str) -> Identifier {
    Identifier::named(name).unwrap()
}

pub fn code<T: std::fmt::Debug>(result: Result<T, IggyError>) -> u32 {
    result.expect_err("an error").as_code()
}

pub fn messages(prefix: &str, count: usize) -> Vec<IggyMessage> {
    (0..count).map(|index| IggyMessage::from_str(&format!("{prefix}-{index}")).unwrap()).collect()
}

pub fn payloads(polled: &PolledMessages) -> Vec<String> {
    polled.messages.iter().map(|message| String::from_utf8(message.payload.to_vec()).unwrap()).collect()
}

/// Bounded: an SDK call that hangs fails the test instead of hanging it.
pub async fn bounded<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), call).await.unwrap_or_else(|_| panic!("{what} timed out"))
}

/// The names of the files in a ZIP archive, in order.
pub fn zip_names(archive: &[u8]) -> Vec<String> {
    let reader = zip::ZipArchive::new(std::io::Cursor::new(archive)).expect("a ZIP archive");
    reader.file_names().map(|name| name.expect("a file name").to_string()).collect()
}

/// Every command group through the SDK, checked: the whole of `PROTOCOL.md`'s command set.
pub async fn conversation(server: &Endpoint) {
    let client = root(server).await;

    // System.
    client.ping().await.unwrap();
    let me = client.get_me().await.unwrap();
    assert_eq!(me.user_id, Some(0));
    assert!(!client.get_clients().await.unwrap().is_empty());
    let cluster = client.get_cluster_metadata().await.unwrap();
    assert_eq!(cluster.nodes.len(), 1);
    // The names the reference gives a single node, which its Node SDK's tests expect.
    assert_eq!((cluster.name.as_str(), cluster.nodes[0].name.as_str()), ("single-node", "iggy-node"));
    client.get_stats().await.unwrap();
    // A snapshot: a ZIP of the sections asked for; `all` goes alone.
    let sections = [SystemSnapshotType::Test, SystemSnapshotType::ServerConfig];
    let snapshot = client.snapshot(SnapshotCompression::Deflated, sections.to_vec()).await.unwrap();
    assert_eq!(zip_names(&snapshot.0), ["test.txt", "server_config.txt"]);
    let all = client.snapshot(SnapshotCompression::Stored, vec![SystemSnapshotType::All]).await.unwrap();
    assert!(zip_names(&all.0).contains(&"server_logs.txt".to_string()), "{:?}", zip_names(&all.0));
    let mixed = vec![SystemSnapshotType::All, SystemSnapshotType::Test];
    assert_eq!(code(client.snapshot(SnapshotCompression::Stored, mixed).await), IggyError::InvalidCommand.as_code());

    // Streams.
    let stream = client.create_stream("orders").await.unwrap();
    assert_eq!(stream.name, "orders");
    assert_eq!(code(client.create_stream("orders").await), IggyError::StreamNameAlreadyExists(String::new()).as_code());
    client.update_stream(&id("orders"), "orders-v2", &StreamUpdateOptions::default()).await.unwrap();
    assert_eq!(client.get_stream(&id("orders-v2")).await.unwrap().unwrap().id, stream.id);
    assert!(client.get_stream(&id("orders")).await.unwrap().is_none());
    let streams = client.get_streams().await.unwrap();
    assert_eq!(streams.iter().map(|stream| stream.name.as_str()).collect::<Vec<_>>(), ["orders-v2"]);
    let orders = id("orders-v2");

    // Topics and partitions.
    let options = TopicCreateOptions { partitions_count: Some(3), ..Default::default() };
    let topic = client.create_topic(&orders, "events", &options).await.unwrap();
    assert_eq!(topic.partitions_count, 3);
    let events = id("events");
    client.create_partitions(&orders, &events, 2).await.unwrap();
    assert_eq!(client.get_topic(&orders, &events).await.unwrap().unwrap().partitions_count, 5);
    client.delete_partitions(&orders, &events, 2).await.unwrap();
    assert_eq!(client.get_topic(&orders, &events).await.unwrap().unwrap().partitions_count, 3);
    assert_eq!(client.get_topics(&orders).await.unwrap().len(), 1);
    let missing_topic = client.get_topic(&orders, &id("nope")).await;
    assert!(matches!(missing_topic, Ok(None)), "{missing_topic:?}");

    // Messages: to one partition, balanced, by key.
    let mut batch = messages("p0", 10);
    client.send_messages(&orders, &events, &Partitioning::partition_id(0), &mut batch).await.unwrap();
    let mut balanced = messages("balanced", 6);
    client.send_messages(&orders, &events, &Partitioning::balanced(), &mut balanced).await.unwrap();
    let mut keyed = messages("keyed", 4);
    client
        .send_messages(&orders, &events, &Partitioning::messages_key_str("customer-7").unwrap(), &mut keyed)
        .await
        .unwrap();
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    let polled = client
        .poll_messages(&orders, &events, Some(0), &consumer, &PollingStrategy::offset(0), 100, false)
        .await
        .unwrap();
    let zero: Vec<String> = payloads(&polled).into_iter().filter(|payload| payload.starts_with("p0-")).collect();
    assert_eq!(zero, (0..10).map(|index| format!("p0-{index}")).collect::<Vec<_>>());
    for (index, message) in polled.messages.iter().enumerate() {
        assert_eq!(message.header.offset, index as u64, "offsets are dense from 0");
    }
    let mut total = 0;
    for partition in 0..3 {
        let polled = client
            .poll_messages(&orders, &events, Some(partition), &consumer, &PollingStrategy::first(), 1000, false)
            .await
            .unwrap();
        total += polled.messages.len();
    }
    assert_eq!(total, 20, "every message sent is in exactly one partition");
    // get_topic and get_stream report what the partitions hold (figures a moment old at most).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let topic = loop {
        let topic = client.get_topic(&orders, &events).await.unwrap().unwrap();
        if topic.messages_count == 20 || std::time::Instant::now() > deadline {
            break topic;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(topic.messages_count, 20);
    assert_eq!(topic.partitions.iter().map(|partition| partition.messages_count).sum::<u64>(), 20);
    assert_eq!(topic.partitions[0].current_offset, polled.current_offset);
    assert!(topic.partitions.iter().all(|partition| partition.segments_count >= 1));
    assert!(topic.size.as_bytes_u64() > 20 * 48, "{}", topic.size);
    let stream = client.get_stream(&orders).await.unwrap().unwrap();
    assert_eq!(stream.messages_count, 20);
    let first =
        client.poll_messages(&orders, &events, Some(0), &consumer, &PollingStrategy::first(), 1, false).await.unwrap();
    assert_eq!(payloads(&first), ["p0-0"]);
    let last =
        client.poll_messages(&orders, &events, Some(0), &consumer, &PollingStrategy::last(), 1, false).await.unwrap();
    assert_eq!(last.messages.len(), 1);
    assert_eq!(last.messages[0].header.offset, polled.current_offset);
    let since = IggyTimestamp::from(polled.messages[0].header.timestamp);
    let by_time = client
        .poll_messages(&orders, &events, Some(0), &consumer, &PollingStrategy::timestamp(since), 3, false)
        .await
        .unwrap();
    assert_eq!(by_time.messages.len(), 3);
    assert_eq!(by_time.messages[0].header.offset, 0);

    // Consumer offsets, stored by hand and by auto-commit.
    client.store_consumer_offset(&consumer, &orders, &events, Some(0), 4).await.unwrap();
    let offset = client.get_consumer_offset(&consumer, &orders, &events, Some(0)).await.unwrap().unwrap();
    assert_eq!(offset.stored_offset, 4);
    let next =
        client.poll_messages(&orders, &events, Some(0), &consumer, &PollingStrategy::next(), 2, true).await.unwrap();
    assert_eq!(next.messages.iter().map(|message| message.header.offset).collect::<Vec<_>>(), [5, 6]);
    let offset = client.get_consumer_offset(&consumer, &orders, &events, Some(0)).await.unwrap().unwrap();
    assert_eq!(offset.stored_offset, 6, "auto-commit stored the last offset polled");
    client.delete_consumer_offset(&consumer, &orders, &events, Some(0)).await.unwrap();
    assert!(client.get_consumer_offset(&consumer, &orders, &events, Some(0)).await.unwrap().is_none());

    // Consumer groups.
    let group = client.create_consumer_group(&orders, &events, "billing").await.unwrap();
    assert_eq!(group.name, "billing");
    let billing = id("billing");
    client.join_consumer_group(&orders, &events, &billing).await.unwrap();
    let details = client.get_consumer_group(&orders, &events, &billing).await.unwrap().unwrap();
    assert_eq!(details.members_count, 1);
    assert_eq!(details.members[0].partitions_count, 3, "a lone member gets every partition");
    let member = Consumer::group(billing.clone());
    let mut seen = 0;
    for _ in 0..6 {
        let polled =
            client.poll_messages(&orders, &events, None, &member, &PollingStrategy::next(), 100, true).await.unwrap();
        seen += polled.messages.len();
    }
    assert_eq!(seen, 20, "the group member reads every partition once");
    assert_eq!(client.get_consumer_groups(&orders, &events).await.unwrap().len(), 1);
    client.leave_consumer_group(&orders, &events, &billing).await.unwrap();
    assert_eq!(client.get_consumer_group(&orders, &events, &billing).await.unwrap().unwrap().members_count, 0);
    client.delete_consumer_group(&orders, &events, &billing).await.unwrap();
    assert!(client.get_consumer_group(&orders, &events, &billing).await.unwrap().is_none());

    // Users and permissions: a user without permissions is refused with Unauthorized.
    let created = client.create_user("reader", "reader-secret", UserStatus::Active, None).await.unwrap();
    // None given, none answered (as the reference does), not a block of false rights.
    assert!(created.permissions.is_none());
    assert!(client.get_user(&id("reader")).await.unwrap().unwrap().permissions.is_none());
    assert!(client.get_users().await.unwrap().iter().any(|user| user.username == "reader"));
    let reader = connect(server).await;
    reader.login_user("reader", "reader-secret").await.unwrap();
    assert_eq!(code(reader.create_stream("forbidden").await), IggyError::Unauthorized.as_code());
    let snapshot = reader.snapshot(SnapshotCompression::Stored, vec![SystemSnapshotType::Test]).await;
    assert_eq!(code(snapshot), IggyError::Unauthorized.as_code());
    let mut denied = messages("denied", 1);
    assert_eq!(
        code(reader.send_messages(&orders, &events, &Partitioning::partition_id(0), &mut denied).await),
        IggyError::Unauthorized.as_code()
    );
    let wrong = connect(server).await;
    assert_eq!(code(wrong.login_user("reader", "wrong").await), IggyError::InvalidCredentials.as_code());
    let anonymous = connect(server).await;
    assert_eq!(code(anonymous.get_streams().await), IggyError::Unauthenticated.as_code());
    client.change_password(&id("reader"), "reader-secret", "reader-secret-2").await.unwrap();
    client.update_user(&id("reader"), Some("auditor"), None, &UserUpdateOptions::default()).await.unwrap();
    let permissions =
        Permissions { global: GlobalPermissions { read_streams: true, ..Default::default() }, streams: None };
    client.update_permissions(&id("auditor"), Some(permissions.clone())).await.unwrap();
    assert_eq!(client.get_user(&id("auditor")).await.unwrap().unwrap().permissions, Some(permissions));
    let auditor = connect(server).await;
    auditor.login_user("auditor", "reader-secret-2").await.unwrap();
    assert_eq!(auditor.get_streams().await.unwrap().len(), 1);

    // Personal access tokens.
    let token = client.create_personal_access_token("ci", PersonalAccessTokenExpiry::NeverExpire).await.unwrap();
    assert_eq!(client.get_personal_access_tokens().await.unwrap().len(), 1);
    let by_token = connect(server).await;
    by_token.login_with_personal_access_token(&token.token).await.unwrap();
    assert_eq!(by_token.get_me().await.unwrap().user_id, Some(0));
    client.delete_personal_access_token("ci").await.unwrap();
    let refused = connect(server).await;
    assert_eq!(
        code(refused.login_with_personal_access_token(&token.token).await),
        IggyError::InvalidPersonalAccessToken.as_code()
    );

    // Missing streams and topics get the reference's codes (it answers 1009 and 2010 whether
    // the identifier was a name or a number).
    let missing = id("missing");
    assert!(client.get_stream(&missing).await.unwrap().is_none());
    assert_eq!(
        code(client.delete_stream(&missing).await),
        IggyError::StreamIdNotFound(Identifier::default()).as_code()
    );
    assert_eq!(
        code(client.create_topic(&missing, "t", &TopicCreateOptions::default()).await),
        IggyError::StreamIdNotFound(Identifier::default()).as_code()
    );
    let mut lost = messages("lost", 1);
    assert_eq!(
        code(client.send_messages(&orders, &id("missing"), &Partitioning::balanced(), &mut lost).await),
        IggyError::TopicIdNotFound(Identifier::default(), Identifier::default()).as_code()
    );

    // Segments, purges and deletes.
    delete_segments(&client, &orders).await;
    client.purge_topic(&orders, &events).await.unwrap();
    for partition in 0..3 {
        let polled = client
            .poll_messages(&orders, &events, Some(partition), &consumer, &PollingStrategy::first(), 100, false)
            .await
            .unwrap();
        assert!(polled.messages.is_empty(), "purged");
    }
    client.purge_stream(&orders).await.unwrap();
    client.delete_topic(&orders, &events).await.unwrap();
    assert!(client.get_topics(&orders).await.unwrap().is_empty());
    client.delete_stream(&orders).await.unwrap();
    assert!(client.get_streams().await.unwrap().is_empty());
    client.delete_user(&id("auditor")).await.unwrap();
    client.logout_user().await.unwrap();
}

/// delete_segments drops a partition's oldest sealed segments, never its newest.
async fn delete_segments(client: &IggyClient, stream: &Identifier) {
    let options = TopicCreateOptions {
        partitions_count: Some(1),
        segment_size: Some(IggyByteSize::from(1u64 << 20)),
        ..Default::default()
    };
    client.create_topic(stream, "segmented", &options).await.unwrap();
    let segmented = id("segmented");
    for batch in 0..36 {
        let mut messages: Vec<IggyMessage> = (0..100)
            .map(|index| IggyMessage::builder().payload(vec![batch as u8; 1000 + index].into()).build().unwrap())
            .collect();
        client.send_messages(stream, &segmented, &Partitioning::partition_id(0), &mut messages).await.unwrap();
    }
    let consumer = Consumer::new(Identifier::numeric(3).unwrap());
    // Whole batches of about 100 KB go out as slices of the read that brought them in, beside
    // the reply's head (a frame in parts): the client reads exactly the messages sent.
    let whole = client
        .poll_messages(stream, &segmented, Some(0), &consumer, &PollingStrategy::offset(100), 300, false)
        .await
        .unwrap();
    assert!(whole.messages.len() >= 100, "at least one whole batch: {}", whole.messages.len());
    for (at, message) in whole.messages.iter().enumerate() {
        let offset = 100 + at as u64;
        let (batch, index) = (offset / 100, offset % 100);
        assert_eq!(message.header.offset, offset);
        assert_eq!(message.payload.to_vec(), vec![batch as u8; 1000 + index as usize], "offset {offset}");
    }
    let first_offset = || async {
        let first = client
            .poll_messages(stream, &segmented, Some(0), &consumer, &PollingStrategy::first(), 1, false)
            .await
            .unwrap();
        first.messages[0].header.offset
    };
    assert_eq!(first_offset().await, 0);
    client.delete_segments(stream, &segmented, 0, 2).await.unwrap();
    let after_two = first_offset().await;
    assert!(after_two > 0, "the oldest messages went with their segments");
    // Asking for more than there are leaves the newest segment, and the newest message.
    client.delete_segments(stream, &segmented, 0, 1000).await.unwrap();
    let after_all = first_offset().await;
    assert!(after_all > after_two, "{after_all} after {after_two}");
    let last =
        client.poll_messages(stream, &segmented, Some(0), &consumer, &PollingStrategy::last(), 1, false).await.unwrap();
    assert_eq!(last.messages[0].header.offset, 3599);
    assert_eq!(
        code(client.delete_segments(stream, &segmented, 7, 1).await),
        IggyError::PartitionNotFound(0, id("x"), id("y")).as_code(),
        "a partition that is not there"
    );
    client.delete_topic(stream, &segmented).await.unwrap();
}
