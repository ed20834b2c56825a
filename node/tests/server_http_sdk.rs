//! The published Iggy SDK's HTTP transport (`iggy = 0.11.0-edge.4`, its `HttpClient`, unchanged)
//! against a vireo-server this test starts: login with a JWT, streams, topics, partitions,
//! messages sent and polled as JSON with base64 payloads, consumer offsets, cluster metadata,
//! consumer groups, segments, users and permissions, personal access tokens, stats and clients,
//! the reference's codes for what is missing or forbidden, and logout. Joining and leaving a
//! consumer group is not asked: the reference does not route them over HTTP either.

mod server_process;

use std::time::Duration;

use iggy::prelude::*;
use server_process::{data_dir, Server};

fn id(name: &str) -> Identifier {
    Identifier::named(name).unwrap()
}

async fn http_client(server: &Server) -> IggyClient {
    let address = server.metrics.expect("the HTTP port is on");
    let client = IggyClient::builder().with_http().with_api_url(format!("http://{address}")).build().expect("a client");
    client.connect().await.expect("connects");
    client
}

/// Bounded: a call that hangs fails the test instead of hanging it.
async fn bounded<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), call).await.unwrap_or_else(|_| panic!("{what} timed out"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_iggy_sdk_over_http_runs_the_api_against_vireo_server() {
    let server = Server::start(&data_dir("http-sdk"), &[]);
    bounded("the HTTP conversation", conversation(&server)).await;
}

async fn conversation(server: &Server) {
    let anonymous = http_client(server).await;
    anonymous.ping().await.expect("ping needs no login");
    assert!(
        matches!(anonymous.get_streams().await, Err(IggyError::Unauthenticated)),
        "a route that needs a login refuses without one"
    );
    assert!(anonymous.login_user(DEFAULT_ROOT_USERNAME, "wrong").await.is_err());

    let client = http_client(server).await;
    let identity = client.login_user(DEFAULT_ROOT_USERNAME, DEFAULT_ROOT_PASSWORD).await.expect("root logs in");
    assert_eq!(identity.user_id, 0);
    assert!(identity.access_token.is_some(), "a JWT comes back");

    // Cluster metadata, as the reference names a single node.
    let cluster = client.get_cluster_metadata().await.unwrap();
    assert_eq!((cluster.name.as_str(), cluster.nodes.len()), ("single-node", 1));

    // Streams.
    let stream = client.create_stream("orders").await.unwrap();
    assert_eq!(stream.name, "orders");
    assert!(client.create_stream("orders").await.is_err(), "a name taken twice");
    client.update_stream(&id("orders"), "orders-v2", &StreamUpdateOptions::default()).await.unwrap();
    let orders = id("orders-v2");
    assert_eq!(client.get_stream(&orders).await.unwrap().unwrap().id, stream.id);
    assert!(client.get_stream(&id("orders")).await.unwrap().is_none(), "renamed away: 404, None");
    let streams = client.get_streams().await.unwrap();
    assert_eq!(streams.iter().map(|stream| stream.name.as_str()).collect::<Vec<_>>(), ["orders-v2"]);

    // Topics and partitions.
    let options = TopicCreateOptions { partitions_count: Some(2), ..Default::default() };
    let topic = client.create_topic(&orders, "events", &options).await.unwrap();
    assert_eq!((topic.name.as_str(), topic.partitions_count), ("events", 2));
    let events = id("events");
    client.create_partitions(&orders, &events, 2).await.unwrap();
    assert_eq!(client.get_topic(&orders, &events).await.unwrap().unwrap().partitions_count, 4);
    client.delete_partitions(&orders, &events, 2).await.unwrap();
    let details = client.get_topic(&orders, &events).await.unwrap().unwrap();
    assert_eq!((details.partitions_count, details.partitions.len()), (2, 2));
    assert_eq!(client.get_topics(&orders).await.unwrap().len(), 1);
    assert!(client.get_topic(&orders, &id("nope")).await.unwrap().is_none());

    // Messages: JSON with base64 payloads, both ways.
    let mut messages: Vec<IggyMessage> = (0..5)
        .map(|index| {
            let payload = format!("http-{index}").into_bytes();
            IggyMessage::builder().id(1000 + index as u128).payload(payload.into()).build().unwrap()
        })
        .collect();
    client.send_messages(&orders, &events, &Partitioning::partition_id(1), &mut messages).await.unwrap();
    let consumer = Consumer::new(Identifier::numeric(7).unwrap());
    let polled = client
        .poll_messages(&orders, &events, Some(1), &consumer, &PollingStrategy::offset(0), 10, false)
        .await
        .unwrap();
    let payloads: Vec<String> =
        polled.messages.iter().map(|message| String::from_utf8(message.payload.to_vec()).unwrap()).collect();
    assert_eq!(payloads, (0..5).map(|index| format!("http-{index}")).collect::<Vec<_>>());
    assert_eq!(polled.messages.iter().map(|message| message.header.offset).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    assert_eq!(polled.messages[2].header.id, 1002, "ids come back as sent");
    let last =
        client.poll_messages(&orders, &events, Some(1), &consumer, &PollingStrategy::last(), 1, false).await.unwrap();
    assert_eq!(last.messages[0].header.offset, 4);

    // Consumer offsets.
    assert!(client.get_consumer_offset(&consumer, &orders, &events, Some(1)).await.unwrap().is_none());
    client.store_consumer_offset(&consumer, &orders, &events, Some(1), 3).await.unwrap();
    let offset = client.get_consumer_offset(&consumer, &orders, &events, Some(1)).await.unwrap().unwrap();
    assert_eq!((offset.stored_offset, offset.current_offset), (3, 4));
    client.delete_consumer_offset(&consumer, &orders, &events, Some(1)).await.unwrap();
    assert!(client.get_consumer_offset(&consumer, &orders, &events, Some(1)).await.unwrap().is_none());

    // Consumer groups (HTTP creates, lists, reads and deletes them; joining is TCP's).
    let group = client.create_consumer_group(&orders, &events, "billing").await.unwrap();
    assert_eq!(group.name, "billing");
    assert_eq!(client.get_consumer_groups(&orders, &events).await.unwrap().len(), 1);
    assert_eq!(client.get_consumer_group(&orders, &events, &id("billing")).await.unwrap().unwrap().id, group.id);
    client.delete_consumer_group(&orders, &events, &id("billing")).await.unwrap();
    assert!(client.get_consumer_group(&orders, &events, &id("billing")).await.unwrap().is_none());

    // Segments: a partition's oldest sealed segments go (here none is sealed: nothing changes).
    client.delete_segments(&orders, &events, 1, 1).await.unwrap();

    // Users and permissions.
    client.create_user("reader", "reader-secret", UserStatus::Active, None).await.unwrap();
    let reader = client.get_user(&id("reader")).await.unwrap().unwrap();
    assert_eq!((reader.username.as_str(), reader.status), ("reader", UserStatus::Active));
    assert!(reader.permissions.is_none(), "none given, none answered");
    let permissions =
        Permissions { global: GlobalPermissions { read_streams: true, ..Default::default() }, streams: None };
    client.update_permissions(&id("reader"), Some(permissions.clone())).await.unwrap();
    assert_eq!(client.get_user(&id("reader")).await.unwrap().unwrap().permissions, Some(permissions));
    client.change_password(&id("reader"), "reader-secret", "reader-secret-2").await.unwrap();
    client.update_user(&id("reader"), Some("auditor"), None, &UserUpdateOptions::default()).await.unwrap();
    assert!(client.get_users().await.unwrap().iter().any(|user| user.username == "auditor"));
    let auditor = http_client(server).await;
    auditor.login_user("auditor", "reader-secret-2").await.expect("the new password logs in");
    assert_eq!(auditor.get_streams().await.unwrap().len(), 1, "read_streams lets it list");
    assert!(matches!(auditor.create_stream("forbidden").await, Err(IggyError::Unauthorized)), "no manage_streams: 403");
    auditor.logout_user().await.unwrap();
    client.delete_user(&id("auditor")).await.unwrap();
    assert!(client.get_user(&id("auditor")).await.unwrap().is_none());

    // Personal access tokens: made, listed, logged in with, deleted.
    let token = client.create_personal_access_token("ci", PersonalAccessTokenExpiry::NeverExpire).await.unwrap();
    assert_eq!(client.get_personal_access_tokens().await.unwrap().len(), 1);
    let by_token = http_client(server).await;
    assert_eq!(by_token.login_with_personal_access_token(&token.token).await.unwrap().user_id, 0);
    assert_eq!(by_token.get_streams().await.unwrap().len(), 1);
    client.delete_personal_access_token("ci").await.unwrap();
    assert!(http_client(server).await.login_with_personal_access_token(&token.token).await.is_err());

    // The system: stats and clients.
    let stats = client.get_stats().await.unwrap();
    assert_eq!((stats.streams_count, stats.topics_count), (1, 1));
    let snapshot = client.snapshot(SnapshotCompression::Zstd, vec![SystemSnapshotType::All]).await.unwrap();
    let archive = zip::ZipArchive::new(std::io::Cursor::new(snapshot.0)).expect("a ZIP archive");
    let names: Vec<String> = archive.file_names().map(|name| name.expect("a file name").to_string()).collect();
    assert!(names.iter().any(|name| name == "server_config.txt"), "{names:?}");
    assert!(names.iter().any(|name| name == "server_logs.txt"), "{names:?}");
    let clients = client.get_clients().await.unwrap();
    assert!(!clients.is_empty());
    let first = client.get_client(clients[0].client_id).await.unwrap().unwrap();
    assert_eq!(first.client_id, clients[0].client_id);

    // The reference's codes: missing is None or an error, never a panic; purge and delete.
    let missing = id("missing");
    assert!(client.get_stream(&missing).await.unwrap().is_none());
    assert!(matches!(client.delete_stream(&missing).await, Err(IggyError::ResourceNotFound(_))), "404");
    assert!(client.create_topic(&missing, "t", &TopicCreateOptions::default()).await.is_err());
    client.purge_topic(&orders, &events).await.unwrap();
    let purged = client
        .poll_messages(&orders, &events, Some(1), &consumer, &PollingStrategy::offset(0), 10, false)
        .await
        .unwrap();
    assert!(purged.messages.is_empty(), "purged");
    client.update_topic(&orders, &events, "events-v2", &TopicUpdateOptions::default()).await.unwrap();
    client.delete_topic(&orders, &id("events-v2")).await.unwrap();
    client.purge_stream(&orders).await.unwrap();
    client.delete_stream(&orders).await.unwrap();
    assert!(client.get_streams().await.unwrap().is_empty());

    // Logout ends the session: its token no longer opens anything.
    client.logout_user().await.unwrap();
    assert!(client.get_streams().await.is_err(), "logged out");
}
