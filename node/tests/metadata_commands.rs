//! Each metadata command, told as a short story: what it does when allowed, and each way it is
//! denied (a denial must leave the state byte-identical).

use vireo_node::metadata::*;

const ROOT_HASH: &str = "$argon2id$v=19$m=8,t=1,p=1$cm9vdHNhbHQ$cm9vdGhhc2g";
const OTHER_HASH: &str = "$argon2id$v=19$m=8,t=1,p=1$b3RoZXJzYWx0$b3RoZXJoYXNo";
const ROOT: u32 = ROOT_USER_ID;
const NOW: u64 = 1_000_000;

fn genesis() -> Metadata {
    Metadata::genesis(ROOT_HASH, MetadataLimits::PRODUCTION)
}

fn with_limits(change: impl FnOnce(&mut MetadataLimits)) -> Metadata {
    let mut limits = MetadataLimits::PRODUCTION;
    change(&mut limits);
    Metadata::genesis(ROOT_HASH, limits)
}

fn ok(metadata: &mut Metadata, user: u32, command: MetadataCommand) -> MetadataResult {
    metadata.apply(user, NOW, &command).unwrap_or_else(|error| panic!("{command:?} was denied: {error}"))
}

/// Applies a command that must be denied, and checks it changed nothing.
fn denied(metadata: &mut Metadata, user: u32, command: MetadataCommand) -> MetadataError {
    let before = metadata.snapshot();
    let error = metadata.apply(user, NOW, &command).expect_err("the command must be denied");
    assert_eq!(metadata.snapshot(), before, "{command:?} was denied ({error}) but changed the state");
    error
}

fn create_user(metadata: &mut Metadata, username: &str, permissions: Permissions) -> u32 {
    let command = MetadataCommand::CreateUser {
        username: username.into(),
        password_hash: OTHER_HASH.into(),
        status: UserStatus::Active,
        permissions: Some(permissions),
    };
    match ok(metadata, ROOT, command) {
        MetadataResult::UserCreated { user } => user,
        other => panic!("unexpected {other:?}"),
    }
}

fn create_stream(metadata: &mut Metadata, name: &str) -> u32 {
    match ok(metadata, ROOT, MetadataCommand::CreateStream { name: name.into() }) {
        MetadataResult::StreamCreated { stream } => stream,
        other => panic!("unexpected {other:?}"),
    }
}

fn create_topic_command(stream: impl Into<Identifier>, name: &str, partitions_count: u32) -> MetadataCommand {
    MetadataCommand::CreateTopic {
        stream: stream.into(),
        name: name.into(),
        partitions_count,
        options: TopicOptions::default(),
    }
}

fn create_topic(metadata: &mut Metadata, stream: u32, name: &str, partitions_count: u32) -> u32 {
    match ok(metadata, ROOT, create_topic_command(stream, name, partitions_count)) {
        MetadataResult::TopicCreated { topic, .. } => topic,
        other => panic!("unexpected {other:?}"),
    }
}

fn create_group(metadata: &mut Metadata, stream: u32, topic: u32, name: &str) -> u32 {
    let command =
        MetadataCommand::CreateConsumerGroup { stream: stream.into(), topic: topic.into(), name: name.into() };
    match ok(metadata, ROOT, command) {
        MetadataResult::ConsumerGroupCreated { group, .. } => group,
        other => panic!("unexpected {other:?}"),
    }
}

fn join(stream: u32, topic: u32, group: u32, member: u128) -> MetadataCommand {
    MetadataCommand::JoinConsumerGroup { stream: stream.into(), topic: topic.into(), group: group.into(), member }
}

fn leave(stream: u32, topic: u32, group: u32, member: u128) -> MetadataCommand {
    MetadataCommand::LeaveConsumerGroup { stream: stream.into(), topic: topic.into(), group: group.into(), member }
}

fn global(change: impl FnOnce(&mut GlobalPermissions)) -> Permissions {
    let mut permissions = Permissions::default();
    change(&mut permissions.global);
    permissions
}

#[test]
fn genesis_holds_only_the_root_user_with_every_permission() {
    let metadata = genesis();
    let root = metadata.user(ROOT).unwrap();
    assert_eq!((root.username.as_str(), root.status), ("iggy", UserStatus::Active));
    assert_eq!(root.permissions, Permissions::root());
    assert_eq!(metadata.user_by_name("iggy").unwrap().password_hash, ROOT_HASH);
    assert_eq!(metadata.users().count(), 1);
    assert_eq!(metadata.streams().count(), 0);
    metadata.check_invariants().unwrap();
}

#[test]
fn production_limits_are_the_namespace_bounds() {
    let limits = MetadataLimits::default();
    assert_eq!(limits.streams_max, 1 << 20, "20 bits of stream id");
    assert_eq!(limits.topics_per_stream_max, 4096, "12 bits of topic id");
    assert_eq!(limits.partitions_per_topic_max, 1_000_000);
    assert!(limits.partitions_per_topic_max <= 1 << 20, "20 bits of partition id");
    assert_eq!(limits.tokens_per_user_max, 100);
}

#[test]
fn users_are_created_with_the_lowest_free_id_and_deleted() {
    let mut metadata = genesis();
    assert_eq!(create_user(&mut metadata, "alice", Permissions::default()), 1);
    assert_eq!(create_user(&mut metadata, "bob", Permissions::default()), 2);
    assert_eq!(
        ok(&mut metadata, ROOT, MetadataCommand::DeleteUser { user: "alice".into() }),
        MetadataResult::UserDeleted { user: 1 }
    );
    assert!(metadata.user_by_name("alice").is_none());
    assert_eq!(create_user(&mut metadata, "carol", Permissions::default()), 1);
}

#[test]
fn creating_a_user_is_denied_for_each_reason() {
    let mut metadata = with_limits(|limits| limits.users_max = 3);
    let plain = create_user(&mut metadata, "plain", Permissions::default());
    let create = |username: &str, password_hash: &str| MetadataCommand::CreateUser {
        username: username.into(),
        password_hash: password_hash.into(),
        status: UserStatus::Active,
        permissions: None,
    };
    assert_eq!(denied(&mut metadata, plain, create("x", OTHER_HASH)), MetadataError::PermissionDenied(plain));
    assert_eq!(denied(&mut metadata, 77, create("x", OTHER_HASH)), MetadataError::Unauthenticated(77));
    assert_eq!(denied(&mut metadata, ROOT, create("", OTHER_HASH)), MetadataError::InvalidUsername);
    assert_eq!(denied(&mut metadata, ROOT, create(&"u".repeat(51), OTHER_HASH)), MetadataError::InvalidUsername);
    assert_eq!(denied(&mut metadata, ROOT, create("x", "plaintext")), MetadataError::InvalidPasswordHash);
    assert_eq!(
        denied(&mut metadata, ROOT, create("plain", OTHER_HASH)),
        MetadataError::UserAlreadyExists("plain".into())
    );
    create_user(&mut metadata, &"u".repeat(50), Permissions::default());
    let error = denied(&mut metadata, ROOT, create("x", OTHER_HASH));
    assert_eq!((error.clone(), error.code()), (MetadataError::LimitReached(Limit::Users), 55));
}

#[test]
fn a_right_on_a_stream_not_created_yet_holds_for_it_and_dies_with_it() {
    // The reference stores overrides on streams and topics that do not exist yet (its clients
    // provision users first); deleting the object still drops them, so ids handed out again never
    // inherit them.
    let mut metadata = genesis();
    let mut ahead = Permissions::default();
    ahead.streams.insert(0, StreamPermissions { read_stream: true, ..StreamPermissions::default() });
    ahead.streams.get_mut(&0).unwrap().topics.insert(7, Default::default());
    let reader = create_user(&mut metadata, "reader", ahead.clone());
    assert_eq!(metadata.user(reader).unwrap().permissions, ahead);

    let stream = create_stream(&mut metadata, "orders");
    assert_eq!(stream, 0);
    assert_eq!(metadata.authorize_read(reader, ReadKind::Stream { stream }), Ok(()));
    ok(&mut metadata, ROOT, MetadataCommand::DeleteStream { stream: "orders".into() });
    assert!(metadata.user(reader).unwrap().permissions.streams.is_empty());
    assert_eq!(create_stream(&mut metadata, "payments"), 0);
    assert!(metadata.authorize_read(reader, ReadKind::Stream { stream: 0 }).is_err(), "not inherited");
}

#[test]
fn an_inactive_user_can_do_nothing() {
    let mut metadata = genesis();
    let admin = create_user(&mut metadata, "admin", Permissions::root());
    ok(
        &mut metadata,
        ROOT,
        MetadataCommand::UpdateUser { user: admin.into(), username: None, status: Some(UserStatus::Inactive) },
    );
    let error = denied(&mut metadata, admin, MetadataCommand::CreateStream { name: "s".into() });
    assert_eq!((error.clone(), error.code()), (MetadataError::UserInactive(admin), 47));
    assert_eq!(metadata.authorize_read(admin, ReadKind::Streams), Err(MetadataError::UserInactive(admin)));
}

#[test]
fn the_root_user_cannot_be_deleted_deactivated_or_restricted() {
    let mut metadata = genesis();
    let admin = create_user(&mut metadata, "admin", global(|g| g.manage_users = true));
    let error = denied(&mut metadata, admin, MetadataCommand::DeleteUser { user: ROOT.into() });
    assert_eq!((error.clone(), error.code()), (MetadataError::CannotDeleteRoot, 48));
    let deactivate =
        MetadataCommand::UpdateUser { user: ROOT.into(), username: None, status: Some(UserStatus::Inactive) };
    assert_eq!(denied(&mut metadata, admin, deactivate), MetadataError::CannotChangeRoot);
    let restrict =
        MetadataCommand::UpdatePermissions { user: "iggy".into(), permissions: Some(Permissions::default()) };
    assert_eq!(denied(&mut metadata, admin, restrict).code(), 49);
}

#[test]
fn users_are_updated_and_their_permissions_replaced() {
    let mut metadata = genesis();
    let alice = create_user(&mut metadata, "alice", Permissions::default());
    create_user(&mut metadata, "bob", Permissions::default());
    let rename = |to: &str| MetadataCommand::UpdateUser { user: alice.into(), username: Some(to.into()), status: None };
    assert_eq!(denied(&mut metadata, ROOT, rename("bob")), MetadataError::UserAlreadyExists("bob".into()));
    assert_eq!(denied(&mut metadata, ROOT, rename("")), MetadataError::InvalidUsername);
    assert_eq!(denied(&mut metadata, alice, rename("x")), MetadataError::PermissionDenied(alice));
    ok(&mut metadata, ROOT, rename("alicia"));
    assert_eq!(metadata.user_by_name("alicia").unwrap().id, alice);
    assert!(metadata.user_by_name("alice").is_none());

    let missing = MetadataCommand::DeleteUser { user: "nobody".into() };
    assert_eq!(denied(&mut metadata, ROOT, missing).code(), 20);

    let readers = global(|g| g.read_streams = true);
    ok(
        &mut metadata,
        ROOT,
        MetadataCommand::UpdatePermissions { user: alice.into(), permissions: Some(readers.clone()) },
    );
    assert_eq!(metadata.user(alice).unwrap().permissions, readers);
    assert_eq!(metadata.authorize_read(alice, ReadKind::Streams), Ok(()));
}

#[test]
fn a_user_changes_its_own_password_but_not_another_s() {
    let mut metadata = genesis();
    let alice = create_user(&mut metadata, "alice", Permissions::default());
    let bob = create_user(&mut metadata, "bob", Permissions::default());
    let change =
        |user: u32, hash: &str| MetadataCommand::ChangePassword { user: user.into(), password_hash: hash.into() };
    ok(&mut metadata, alice, change(alice, "$argon2id$new"));
    assert_eq!(metadata.user(alice).unwrap().password_hash, "$argon2id$new");
    assert_eq!(denied(&mut metadata, alice, change(bob, "$argon2id$new")), MetadataError::PermissionDenied(alice));
    assert_eq!(denied(&mut metadata, alice, change(alice, "")), MetadataError::InvalidPasswordHash);
    ok(&mut metadata, ROOT, change(bob, "$argon2id$reset"));
}

#[test]
fn passwords_hashed_outside_verify_against_committed_state() {
    let hash = hash_password("hunter2", [9; 16], PasswordCost::Test);
    let mut metadata = Metadata::genesis(&hash, MetadataLimits::PRODUCTION);
    assert!(verify_password(&metadata.user_by_name("iggy").unwrap().password_hash, "hunter2"));
    let new_hash = hash_password("correct horse", [10; 16], PasswordCost::Test);
    ok(&mut metadata, ROOT, MetadataCommand::ChangePassword { user: ROOT.into(), password_hash: new_hash });
    let stored = &metadata.user(ROOT).unwrap().password_hash;
    assert!(verify_password(stored, "correct horse") && !verify_password(stored, "hunter2"));
}

#[test]
fn personal_access_tokens_log_in_until_they_expire() {
    let mut metadata = with_limits(|limits| limits.tokens_per_user_max = 2);
    let alice = create_user(&mut metadata, "alice", Permissions::default());
    let create = |name: &str, token: &str, expiry: Option<u64>| MetadataCommand::CreatePersonalAccessToken {
        name: name.into(),
        token_hash: token_hash(token),
        expiry,
    };
    let created = ok(&mut metadata, alice, create("ci", "secret-1", Some(500)));
    assert_eq!(created, MetadataResult::PersonalAccessTokenCreated { user: alice, expires_at: Some(NOW + 500) });
    assert_eq!(metadata.user_by_token(token_hash("secret-1"), NOW + 499).unwrap().id, alice);
    let expired = metadata.user_by_token(token_hash("secret-1"), NOW + 500).unwrap_err();
    assert_eq!((expired.clone(), expired.code()), (MetadataError::TokenExpired { user: alice, name: "ci".into() }, 54));
    assert_eq!(metadata.user_by_token(token_hash("unknown"), NOW).unwrap_err().code(), 20);

    assert_eq!(denied(&mut metadata, alice, create("ci", "secret-2", None)).code(), 51);
    assert_eq!(denied(&mut metadata, ROOT, create("other", "secret-1", None)).code(), 51, "hashes are unique");
    assert_eq!(denied(&mut metadata, alice, create("", "secret-2", None)), MetadataError::InvalidTokenName);
    assert_eq!(
        denied(&mut metadata, alice, create(&"t".repeat(31), "secret-2", None)),
        MetadataError::InvalidTokenName
    );
    ok(&mut metadata, alice, create("laptop", "secret-2", None));
    let error = denied(&mut metadata, alice, create("third", "secret-3", None));
    assert_eq!((error.clone(), error.code()), (MetadataError::LimitReached(Limit::TokensPerUser), 52));

    ok(&mut metadata, alice, MetadataCommand::DeletePersonalAccessToken { name: "ci".into() });
    assert_eq!(metadata.user_by_token(token_hash("secret-1"), NOW).unwrap_err(), MetadataError::TokenNotFound);
    let missing = MetadataCommand::DeletePersonalAccessToken { name: "ci".into() };
    assert_eq!(denied(&mut metadata, alice, missing), MetadataError::TokenNotFound);

    ok(
        &mut metadata,
        ROOT,
        MetadataCommand::UpdateUser { user: alice.into(), username: None, status: Some(UserStatus::Inactive) },
    );
    assert_eq!(metadata.user_by_token(token_hash("secret-2"), NOW), Err(MetadataError::UserInactive(alice)));
    ok(&mut metadata, ROOT, MetadataCommand::DeleteUser { user: alice.into() });
    assert_eq!(metadata.user_by_token(token_hash("secret-2"), NOW), Err(MetadataError::TokenNotFound));
}

#[test]
fn streams_take_the_lowest_free_id_below_the_limit() {
    let mut metadata = with_limits(|limits| limits.streams_max = 3);
    assert_eq!(create_stream(&mut metadata, "a"), 0);
    assert_eq!(create_stream(&mut metadata, "b"), 1);
    assert_eq!(create_stream(&mut metadata, "c"), 2);
    let error = denied(&mut metadata, ROOT, MetadataCommand::CreateStream { name: "d".into() });
    assert_eq!((error.clone(), error.code()), (MetadataError::LimitReached(Limit::Streams), 1020));

    ok(&mut metadata, ROOT, MetadataCommand::DeleteStream { stream: "b".into() });
    assert_eq!(create_stream(&mut metadata, "d"), 1, "the freed id is reused, so ids stay below the limit");
    assert!(metadata.streams().all(|stream| stream.id < 3));
    let d = metadata.stream_by_name("d").unwrap();
    assert_eq!((d.id, d.created_at), (1, NOW));
}

#[test]
fn creating_and_deleting_streams_is_denied_for_each_reason() {
    let mut metadata = genesis();
    let reader = create_user(&mut metadata, "reader", global(|g| g.read_streams = true));
    create_stream(&mut metadata, "orders");
    let create = |name: &str| MetadataCommand::CreateStream { name: name.into() };
    assert_eq!(denied(&mut metadata, reader, create("x")).code(), 41);
    assert_eq!(denied(&mut metadata, ROOT, create("")).code(), 1013);
    assert_eq!(denied(&mut metadata, ROOT, create(&"s".repeat(256))).code(), 1013);
    create_stream(&mut metadata, &"s".repeat(255));
    let error = denied(&mut metadata, ROOT, create("orders"));
    assert_eq!((error.clone(), error.code()), (MetadataError::StreamAlreadyExists("orders".into()), 1012));

    let delete = |stream: Identifier| MetadataCommand::DeleteStream { stream };
    assert_eq!(denied(&mut metadata, reader, delete("orders".into())).code(), 41);
    assert_eq!(denied(&mut metadata, ROOT, delete(7.into())).code(), 1009);
    assert_eq!(denied(&mut metadata, ROOT, delete("nope".into())).code(), 1009);
    assert_eq!(denied(&mut metadata, ROOT, delete("".into())).code(), 6);
    let deleted = ok(&mut metadata, ROOT, delete("orders".into()));
    assert_eq!(deleted, MetadataResult::StreamDeleted { stream: 0, topics: vec![] });
}

#[test]
fn a_stream_override_dies_with_its_stream_and_never_passes_to_a_reused_id() {
    let mut metadata = genesis();
    let stream = create_stream(&mut metadata, "mine");
    let mut permissions = Permissions::default();
    permissions.streams.insert(stream, StreamPermissions { manage_stream: true, ..StreamPermissions::default() });
    let owner = create_user(&mut metadata, "owner", permissions);
    assert!(metadata.authorize_read(owner, ReadKind::Stream { stream }).is_ok());
    assert!(create_topic(&mut metadata, stream, "t", 1) == 0);
    ok(&mut metadata, owner, MetadataCommand::DeleteStream { stream: stream.into() });

    assert_eq!(create_stream(&mut metadata, "someone else's"), stream);
    assert!(metadata.user(owner).unwrap().permissions.streams.is_empty());
    assert_eq!(
        metadata.authorize_read(owner, ReadKind::Stream { stream }),
        Err(MetadataError::PermissionDenied(owner))
    );
}

#[test]
fn topics_are_created_with_their_partitions_and_options() {
    let mut metadata = genesis();
    let stream = create_stream(&mut metadata, "s");
    let options = TopicOptions {
        compression: Compression::Gzip,
        message_expiry: 60_000_000,
        max_topic_size: 4 << 30,
        replication_factor: Some(3),
        ..TopicOptions::default()
    };
    let command = MetadataCommand::CreateTopic {
        stream: "s".into(),
        name: "events".into(),
        partitions_count: 3,
        options: options.clone(),
    };
    assert_eq!(
        ok(&mut metadata, ROOT, command),
        MetadataResult::TopicCreated { stream, topic: 0, partitions_count: 3 }
    );
    let topic = metadata.topic(stream, 0).unwrap();
    assert_eq!((topic.name.as_str(), topic.created_at, &topic.options), ("events", NOW, &options));
    assert_eq!(
        topic.partitions.iter().map(|p| (p.id, p.created_at)).collect::<Vec<_>>(),
        [(0, NOW), (1, NOW), (2, NOW)]
    );
    assert_eq!(TopicOptions::default().segment_size, 1 << 30);

    let other = create_stream(&mut metadata, "other");
    assert_eq!(create_topic(&mut metadata, other, "events", 0), 0, "names are unique per stream only");
    assert_eq!(create_topic(&mut metadata, stream, "more", 0), 1);
    let deleted =
        ok(&mut metadata, ROOT, MetadataCommand::DeleteTopic { stream: stream.into(), topic: "events".into() });
    assert_eq!(deleted, MetadataResult::TopicDeleted { stream, topic: 0, partitions_count: 3 });
    assert_eq!(create_topic(&mut metadata, stream, "again", 0), 0);
}

#[test]
fn creating_a_topic_is_denied_for_each_reason() {
    let mut metadata = with_limits(|limits| limits.partitions_per_topic_max = 10);
    let stream = create_stream(&mut metadata, "s");
    create_topic(&mut metadata, stream, "taken", 1);
    let poller = create_user(&mut metadata, "poller", global(|g| g.read_topics = true));
    let with = |options: TopicOptions| MetadataCommand::CreateTopic {
        stream: stream.into(),
        name: "t".into(),
        partitions_count: 1,
        options,
    };
    assert_eq!(denied(&mut metadata, poller, create_topic_command(stream, "t", 1)).code(), 41);
    assert_eq!(denied(&mut metadata, ROOT, create_topic_command(9, "t", 1)).code(), 1009);
    assert_eq!(denied(&mut metadata, ROOT, create_topic_command(stream, "", 1)).code(), 2014);
    assert_eq!(denied(&mut metadata, ROOT, create_topic_command(stream, "taken", 1)).code(), 2013);
    let error = denied(&mut metadata, ROOT, create_topic_command(stream, "t", 11));
    assert_eq!((error.clone(), error.code()), (MetadataError::LimitReached(Limit::PartitionsPerTopic), 2015));
    let cases = [
        (TopicOptions { segment_size: 0, ..TopicOptions::default() }, TopicOption::SegmentSize, 4002),
        (TopicOptions { max_topic_size: 1, ..TopicOptions::default() }, TopicOption::MaxTopicSize, 1019),
        (
            TopicOptions { messages_required_to_save: 0, ..TopicOptions::default() },
            TopicOption::MessagesRequiredToSave,
            4042,
        ),
        (
            TopicOptions { size_of_messages_required_to_save: 0, ..TopicOptions::default() },
            TopicOption::SizeOfMessagesRequiredToSave,
            4042,
        ),
        (TopicOptions { replication_factor: Some(0), ..TopicOptions::default() }, TopicOption::ReplicationFactor, 2018),
    ];
    for (options, option, code) in cases {
        let error = denied(&mut metadata, ROOT, with(options));
        assert_eq!((error.clone(), error.code()), (MetadataError::InvalidOption(option), code));
    }
    let delete = |topic: Identifier| MetadataCommand::DeleteTopic { stream: stream.into(), topic };
    assert_eq!(denied(&mut metadata, ROOT, delete(5.into())).code(), 2010);
    assert_eq!(denied(&mut metadata, ROOT, delete("nope".into())).code(), 2010);
    assert_eq!(denied(&mut metadata, poller, delete("taken".into())).code(), 41);
}

#[test]
fn a_stream_holds_at_most_4096_topics() {
    let mut metadata = genesis();
    let stream = create_stream(&mut metadata, "wide");
    for topic in 0..4096u32 {
        assert_eq!(create_topic(&mut metadata, stream, &format!("t{topic}"), 0), topic);
    }
    let error = denied(&mut metadata, ROOT, create_topic_command(stream, "one too many", 0));
    assert_eq!((error.clone(), error.code()), (MetadataError::LimitReached(Limit::TopicsPerStream), 2021));
    ok(&mut metadata, ROOT, MetadataCommand::DeleteTopic { stream: stream.into(), topic: 1234.into() });
    assert_eq!(create_topic(&mut metadata, stream, "reuses 1234", 0), 1234, "ids stay below 4096");
    metadata.check_invariants().unwrap();
}

#[test]
fn partitions_are_added_after_the_highest_and_deleted_from_the_top() {
    let mut metadata = with_limits(|limits| limits.partitions_per_topic_max = 8);
    let stream = create_stream(&mut metadata, "s");
    let topic = create_topic(&mut metadata, stream, "t", 2);
    let create = |count| MetadataCommand::CreatePartitions { stream: stream.into(), topic: topic.into(), count };
    let delete = |count| MetadataCommand::DeletePartitions { stream: stream.into(), topic: topic.into(), count };
    assert_eq!(
        ok(&mut metadata, ROOT, create(5)),
        MetadataResult::PartitionsCreated { stream, topic, first: 2, count: 5 }
    );
    assert_eq!(metadata.topic(stream, topic).unwrap().partitions_count(), 7);
    let error = denied(&mut metadata, ROOT, create(2));
    assert_eq!(error, MetadataError::LimitReached(Limit::PartitionsPerTopic));
    ok(&mut metadata, ROOT, create(1));
    assert_eq!(denied(&mut metadata, ROOT, create(0)).code(), 2019);

    assert_eq!(
        ok(&mut metadata, ROOT, delete(3)),
        MetadataResult::PartitionsDeleted { stream, topic, first: 5, count: 3 }
    );
    let ids: Vec<u32> = metadata.topic(stream, topic).unwrap().partitions.iter().map(|p| p.id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    assert_eq!(denied(&mut metadata, ROOT, delete(6)), MetadataError::InvalidPartitionsCount { count: 6, existing: 5 });
    assert_eq!(denied(&mut metadata, ROOT, delete(0)).code(), 2019);
    ok(&mut metadata, ROOT, delete(5));
    assert_eq!(metadata.topic(stream, topic).unwrap().partitions_count(), 0);

    let reader = create_user(&mut metadata, "reader", global(|g| g.read_streams = true));
    assert_eq!(denied(&mut metadata, reader, create(1)), MetadataError::PermissionDenied(reader));
}

#[test]
fn a_topic_with_a_million_partitions_is_refused_without_creating_them() {
    let mut metadata = genesis();
    let stream = create_stream(&mut metadata, "s");
    let error = denied(&mut metadata, ROOT, create_topic_command(stream, "huge", 1_000_001));
    assert_eq!(error, MetadataError::LimitReached(Limit::PartitionsPerTopic));
    let topic = create_topic(&mut metadata, stream, "t", 1);
    let command = MetadataCommand::CreatePartitions { stream: stream.into(), topic: topic.into(), count: u32::MAX };
    assert_eq!(denied(&mut metadata, ROOT, command), MetadataError::LimitReached(Limit::PartitionsPerTopic));
}

#[test]
fn consumer_groups_are_created_and_denied_for_each_reason() {
    let mut metadata = with_limits(|limits| limits.consumer_groups_per_topic_max = 2);
    let stream = create_stream(&mut metadata, "s");
    let topic = create_topic(&mut metadata, stream, "t", 4);
    let nobody = create_user(&mut metadata, "nobody", Permissions::default());
    let create = |name: &str| MetadataCommand::CreateConsumerGroup {
        stream: stream.into(),
        topic: topic.into(),
        name: name.into(),
    };
    assert_eq!(create_group(&mut metadata, stream, topic, "g"), 0);
    assert_eq!(denied(&mut metadata, nobody, create("h")).code(), 41);
    assert_eq!(denied(&mut metadata, ROOT, create("")).code(), 5005);
    assert_eq!(denied(&mut metadata, ROOT, create("g")).code(), 5004);
    assert_eq!(create_group(&mut metadata, stream, topic, "h"), 1);
    let error = denied(&mut metadata, ROOT, create("i"));
    assert_eq!((error.clone(), error.code()), (MetadataError::LimitReached(Limit::ConsumerGroupsPerTopic), 3009));

    let delete =
        |group: Identifier| MetadataCommand::DeleteConsumerGroup { stream: stream.into(), topic: topic.into(), group };
    assert_eq!(denied(&mut metadata, ROOT, delete(5.into())).code(), 5000);
    assert_eq!(denied(&mut metadata, ROOT, delete("zz".into())).code(), 5000);
    assert_eq!(denied(&mut metadata, nobody, delete("g".into())).code(), 41);
    ok(&mut metadata, ROOT, delete("g".into()));
    assert_eq!(create_group(&mut metadata, stream, topic, "again"), 0);
}

#[test]
fn members_join_and_leave_and_the_partitions_follow() {
    let mut metadata = with_limits(|limits| limits.members_per_group_max = 3);
    let stream = create_stream(&mut metadata, "s");
    let topic = create_topic(&mut metadata, stream, "t", 5);
    let group = create_group(&mut metadata, stream, topic, "g");
    let poller = create_user(&mut metadata, "poller", global(|g| g.poll_messages = true));
    let nobody = create_user(&mut metadata, "nobody", Permissions::default());

    assert_eq!(denied(&mut metadata, nobody, join(stream, topic, group, 10)).code(), 41);
    let joined = ok(&mut metadata, poller, join(stream, topic, group, 10));
    assert_eq!(joined, MetadataResult::ConsumerGroupJoined { stream, topic, group, already_member: false });
    assert_eq!(metadata.partitions_of(stream, topic, group, 10), Some(&[0, 1, 2, 3, 4][..]));
    let again = ok(&mut metadata, poller, join(stream, topic, group, 10));
    assert_eq!(again, MetadataResult::ConsumerGroupJoined { stream, topic, group, already_member: true });

    ok(&mut metadata, poller, join(stream, topic, group, 20));
    assert_eq!(metadata.partitions_of(stream, topic, group, 10), Some(&[0, 1, 2][..]));
    assert_eq!(metadata.partitions_of(stream, topic, group, 20), Some(&[3, 4][..]));
    ok(&mut metadata, poller, join(stream, topic, group, 30));
    let error = denied(&mut metadata, poller, join(stream, topic, group, 40));
    assert_eq!((error.clone(), error.code()), (MetadataError::LimitReached(Limit::MembersPerGroup), 3009));
    let assignment = metadata.assignment(stream, topic, group).unwrap();
    assert_eq!(assignment.values().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);

    ok(&mut metadata, ROOT, MetadataCommand::CreatePartitions { stream: stream.into(), topic: topic.into(), count: 1 });
    let assignment = metadata.assignment(stream, topic, group).unwrap();
    assert_eq!(assignment.values().map(Vec::len).collect::<Vec<_>>(), [2, 2, 2]);
    ok(&mut metadata, ROOT, MetadataCommand::DeletePartitions { stream: stream.into(), topic: topic.into(), count: 3 });
    let assignment = metadata.assignment(stream, topic, group).unwrap();
    assert!(assignment.values().flatten().all(|partition| *partition < 3));

    let error = denied(&mut metadata, poller, leave(stream, topic, group, 99));
    assert_eq!((error.clone(), error.code()), (MetadataError::ConsumerGroupMemberNotFound { group, member: 99 }, 5006));
    assert_eq!(denied(&mut metadata, nobody, leave(stream, topic, group, 10)).code(), 41);
    ok(&mut metadata, poller, leave(stream, topic, group, 10));
    assert_eq!(metadata.partitions_of(stream, topic, group, 10), None);
    assert_eq!(metadata.assignment(stream, topic, group).unwrap().values().flatten().count(), 3);
    assert_eq!(denied(&mut metadata, poller, join(stream, topic, 9, 10)).code(), 5000);
}

#[test]
fn an_ended_session_leaves_every_group() {
    let mut metadata = genesis();
    let stream = create_stream(&mut metadata, "s");
    let first = create_topic(&mut metadata, stream, "a", 2);
    let second = create_topic(&mut metadata, stream, "b", 3);
    let g1 = create_group(&mut metadata, stream, first, "g");
    let g2 = create_group(&mut metadata, stream, second, "g");
    for (topic, group) in [(first, g1), (second, g2)] {
        ok(&mut metadata, ROOT, join(stream, topic, group, 7));
        ok(&mut metadata, ROOT, join(stream, topic, group, 8));
    }
    assert_eq!(metadata.groups_of_client(7), [(stream, first, g1), (stream, second, g2)]);
    assert_eq!(metadata.remove_client_everywhere(7), [(stream, first, g1), (stream, second, g2)]);
    assert!(metadata.groups_of_client(7).is_empty());
    assert_eq!(metadata.partitions_of(stream, second, g2, 8), Some(&[0, 1, 2][..]));
    assert!(metadata.remove_client_everywhere(7).is_empty());
    metadata.check_invariants().unwrap();
}

#[test]
fn reads_are_authorized_from_committed_permissions() {
    let mut metadata = genesis();
    let stream = create_stream(&mut metadata, "s");
    let topic = create_topic(&mut metadata, stream, "t", 1);
    let mut permissions = Permissions::default();
    let mut on_stream = StreamPermissions::default();
    on_stream.topics.insert(topic, TopicPermissions { send_messages: true, ..TopicPermissions::default() });
    permissions.streams.insert(stream, on_stream);
    let sender = create_user(&mut metadata, "sender", permissions);

    assert_eq!(metadata.authorize_read(sender, ReadKind::Send { stream, topic }), Ok(()));
    for denied_read in [
        ReadKind::Servers,
        ReadKind::Users,
        ReadKind::Streams,
        ReadKind::Stream { stream },
        ReadKind::Topic { stream, topic },
        ReadKind::ConsumerGroups { stream, topic },
        ReadKind::Poll { stream, topic },
    ] {
        assert_eq!(metadata.authorize_read(sender, denied_read), Err(MetadataError::PermissionDenied(sender)));
        assert_eq!(metadata.authorize_read(ROOT, denied_read), Ok(()));
    }
    assert_eq!(metadata.authorize_read(42, ReadKind::Streams).unwrap_err().code(), 40);

    // An override on a topic not created yet is kept (the reference keeps it).
    let ahead = {
        let mut permissions = Permissions::default();
        let mut on_stream = StreamPermissions::default();
        on_stream.topics.insert(9, TopicPermissions::default());
        permissions.streams.insert(stream, on_stream);
        permissions
    };
    let command = MetadataCommand::UpdatePermissions { user: sender.into(), permissions: Some(ahead.clone()) };
    ok(&mut metadata, ROOT, command);
    assert_eq!(metadata.user(sender).unwrap().permissions, ahead);
}

#[test]
fn a_snapshot_restores_the_same_state_and_refuses_garbage() {
    let mut metadata = genesis();
    let stream = create_stream(&mut metadata, "s");
    let topic = create_topic(&mut metadata, stream, "t", 3);
    let group = create_group(&mut metadata, stream, topic, "g");
    ok(&mut metadata, ROOT, join(stream, topic, group, u128::MAX));
    let snapshot = metadata.snapshot();
    let restored = Metadata::restore(&snapshot).unwrap();
    assert_eq!(restored, metadata);
    assert_eq!(restored.digest(), metadata.digest());

    assert!(Metadata::restore(&[]).is_none());
    assert!(Metadata::restore(&snapshot[..snapshot.len() - 1]).is_none());
    let mut trailing = snapshot.clone();
    trailing.push(0);
    assert!(Metadata::restore(&trailing).is_none());
    assert!(Metadata::restore(&[0xff; 64]).is_none());
}
