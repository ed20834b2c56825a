//! The command codes of client requests (`PROTOCOL.md`, "Command codes"), carried in the request
//! header at byte 196. Codes beyond the table are the ones Iggy defines with the same layouts.

pub const PING: u32 = 1;
pub const GET_STATS: u32 = 10;
pub const GET_CLUSTER_METADATA: u32 = 12;
pub const GET_ME: u32 = 20;
pub const GET_CLIENT: u32 = 21;
/// An old login Iggy no longer accepts: refused with `WireError::ObsoleteLogin`.
pub const LOGIN_USER_OBSOLETE: u32 = 38;
pub const LOGOUT: u32 = 39;
pub const LOGIN_REGISTER: u32 = 40;
/// An old personal access token login: refused with `WireError::ObsoleteLogin`.
pub const LOGIN_WITH_TOKEN_OBSOLETE: u32 = 44;
pub const LOGIN_WITH_PERSONAL_ACCESS_TOKEN: u32 = 45;
pub const POLL_MESSAGES: u32 = 100;
pub const SEND_MESSAGES: u32 = 101;
pub const GET_CONSUMER_OFFSET: u32 = 120;
pub const STORE_CONSUMER_OFFSET: u32 = 121;
pub const DELETE_CONSUMER_OFFSET: u32 = 122;
pub const GET_STREAM: u32 = 200;
pub const GET_STREAMS: u32 = 201;
pub const CREATE_STREAM: u32 = 202;
pub const DELETE_STREAM: u32 = 203;
pub const GET_TOPIC: u32 = 300;
pub const GET_TOPICS: u32 = 301;
pub const CREATE_TOPIC: u32 = 302;
pub const DELETE_TOPIC: u32 = 303;
pub const CREATE_PARTITIONS: u32 = 402;
pub const DELETE_PARTITIONS: u32 = 403;
pub const GET_CONSUMER_GROUP: u32 = 600;
pub const GET_CONSUMER_GROUPS: u32 = 601;
pub const CREATE_CONSUMER_GROUP: u32 = 602;
pub const DELETE_CONSUMER_GROUP: u32 = 603;
pub const JOIN_CONSUMER_GROUP: u32 = 604;
pub const LEAVE_CONSUMER_GROUP: u32 = 605;

/// Every code `ClientRequest::decode` accepts.
pub const CLIENT_COMMAND_CODES: [u32; 29] = [
    PING,
    GET_STATS,
    GET_CLUSTER_METADATA,
    GET_ME,
    GET_CLIENT,
    LOGOUT,
    LOGIN_REGISTER,
    LOGIN_WITH_PERSONAL_ACCESS_TOKEN,
    POLL_MESSAGES,
    SEND_MESSAGES,
    GET_CONSUMER_OFFSET,
    STORE_CONSUMER_OFFSET,
    DELETE_CONSUMER_OFFSET,
    GET_STREAM,
    GET_STREAMS,
    CREATE_STREAM,
    DELETE_STREAM,
    GET_TOPIC,
    GET_TOPICS,
    CREATE_TOPIC,
    DELETE_TOPIC,
    CREATE_PARTITIONS,
    DELETE_PARTITIONS,
    GET_CONSUMER_GROUP,
    GET_CONSUMER_GROUPS,
    CREATE_CONSUMER_GROUP,
    DELETE_CONSUMER_GROUP,
    JOIN_CONSUMER_GROUP,
    LEAVE_CONSUMER_GROUP,
];
