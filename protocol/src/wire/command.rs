//! The command codes of client requests (`PROTOCOL.md`, "Command codes"), the whole client command
//! set of the reference server. Non-replicated requests carry theirs in the request header at byte
//! 196; the others are known by their operation (byte 176) and the codes name their bodies.

pub const PING: u32 = 1;
pub const GET_STATS: u32 = 10;
pub const GET_SNAPSHOT_FILE: u32 = 11;
pub const GET_CLUSTER_METADATA: u32 = 12;
pub const DESCRIBE_OPTIONS: u32 = 13;
pub const GET_ME: u32 = 20;
pub const GET_CLIENT: u32 = 21;
pub const GET_CLIENTS: u32 = 22;
pub const GET_USER: u32 = 31;
pub const GET_USERS: u32 = 32;
pub const CREATE_USER: u32 = 33;
pub const DELETE_USER: u32 = 34;
pub const UPDATE_USER: u32 = 35;
pub const UPDATE_PERMISSIONS: u32 = 36;
pub const CHANGE_PASSWORD: u32 = 37;
/// An old login Iggy no longer accepts: refused with `WireError::ObsoleteLogin`.
pub const LOGIN_USER_OBSOLETE: u32 = 38;
pub const LOGOUT: u32 = 39;
pub const LOGIN_REGISTER: u32 = 40;
pub const GET_PERSONAL_ACCESS_TOKENS: u32 = 41;
pub const CREATE_PERSONAL_ACCESS_TOKEN: u32 = 42;
pub const DELETE_PERSONAL_ACCESS_TOKEN: u32 = 43;
/// An old personal access token login: refused with `WireError::ObsoleteLogin`.
pub const LOGIN_WITH_TOKEN_OBSOLETE: u32 = 44;
pub const LOGIN_WITH_PERSONAL_ACCESS_TOKEN: u32 = 45;
pub const POLL_MESSAGES: u32 = 100;
pub const SEND_MESSAGES: u32 = 101;
pub const FLUSH_UNSAVED_BUFFER: u32 = 102;
pub const GET_CONSUMER_OFFSET: u32 = 120;
pub const STORE_CONSUMER_OFFSET: u32 = 121;
pub const DELETE_CONSUMER_OFFSET: u32 = 122;
pub const GET_STREAM: u32 = 200;
pub const GET_STREAMS: u32 = 201;
pub const CREATE_STREAM: u32 = 202;
pub const DELETE_STREAM: u32 = 203;
pub const UPDATE_STREAM: u32 = 204;
pub const PURGE_STREAM: u32 = 205;
pub const GET_TOPIC: u32 = 300;
pub const GET_TOPICS: u32 = 301;
pub const CREATE_TOPIC: u32 = 302;
pub const DELETE_TOPIC: u32 = 303;
pub const UPDATE_TOPIC: u32 = 304;
pub const PURGE_TOPIC: u32 = 305;
pub const CREATE_PARTITIONS: u32 = 402;
pub const DELETE_PARTITIONS: u32 = 403;
pub const DELETE_SEGMENTS: u32 = 503;
pub const GET_CONSUMER_GROUP: u32 = 600;
pub const GET_CONSUMER_GROUPS: u32 = 601;
pub const CREATE_CONSUMER_GROUP: u32 = 602;
pub const DELETE_CONSUMER_GROUP: u32 = 603;
pub const JOIN_CONSUMER_GROUP: u32 = 604;
pub const LEAVE_CONSUMER_GROUP: u32 = 605;
pub const SYNC_CONSUMER_GROUP: u32 = 606;

/// Every code `ClientRequest::decode` accepts.
pub const CLIENT_COMMAND_CODES: [u32; 49] = [
    PING,
    GET_STATS,
    GET_SNAPSHOT_FILE,
    GET_CLUSTER_METADATA,
    DESCRIBE_OPTIONS,
    GET_ME,
    GET_CLIENT,
    GET_CLIENTS,
    GET_USER,
    GET_USERS,
    CREATE_USER,
    DELETE_USER,
    UPDATE_USER,
    UPDATE_PERMISSIONS,
    CHANGE_PASSWORD,
    LOGOUT,
    LOGIN_REGISTER,
    GET_PERSONAL_ACCESS_TOKENS,
    CREATE_PERSONAL_ACCESS_TOKEN,
    DELETE_PERSONAL_ACCESS_TOKEN,
    LOGIN_WITH_PERSONAL_ACCESS_TOKEN,
    POLL_MESSAGES,
    SEND_MESSAGES,
    FLUSH_UNSAVED_BUFFER,
    GET_CONSUMER_OFFSET,
    STORE_CONSUMER_OFFSET,
    DELETE_CONSUMER_OFFSET,
    GET_STREAM,
    GET_STREAMS,
    CREATE_STREAM,
    DELETE_STREAM,
    UPDATE_STREAM,
    PURGE_STREAM,
    GET_TOPIC,
    GET_TOPICS,
    CREATE_TOPIC,
    DELETE_TOPIC,
    UPDATE_TOPIC,
    PURGE_TOPIC,
    CREATE_PARTITIONS,
    DELETE_PARTITIONS,
    DELETE_SEGMENTS,
    GET_CONSUMER_GROUP,
    GET_CONSUMER_GROUPS,
    CREATE_CONSUMER_GROUP,
    DELETE_CONSUMER_GROUP,
    JOIN_CONSUMER_GROUP,
    LEAVE_CONSUMER_GROUP,
    SYNC_CONSUMER_GROUP,
];
