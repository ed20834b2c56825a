//! `?consistency=linearizable` on the HTTP API's reads, as the reference answers it. A read is
//! served from this node's committed metadata (`serializable`, the default): correct, and on a
//! backup perhaps behind the primary by the replication delay. `linearizable` asks for the
//! freshest committed state, which only the metadata group's primary has: a backup answers 307
//! to the primary's HTTP address (same path and query), or 503 `not_primary` when it knows no
//! primary (a view change) or the roster gives the primary no HTTP port. The read is checked
//! first (session, permissions, identifiers) so a redirect never tells a caller more than the
//! read itself would; a read the backup answers "not found" is redirected too, as the backup may
//! only lag. A single node is always its own primary.
//!
//! Who leads is what the shard loop last saw of the metadata replica (`MetadataLeader`, set each
//! tick in the gateway), as the reference asks its local consensus.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};

use super::ApiError;
use crate::server::config::ServerConfig;

/// The metadata group's primary as this node sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MetadataLeader {
    /// Not in normal status (starting, in a view change): no primary known.
    #[default]
    Unknown,
    ThisNode,
    Replica(u8),
}

/// The routes that take `?consistency=` (the reference's reads of metadata and partitions).
pub fn takes_consistency(segments: &[&str]) -> bool {
    matches!(
        segments,
        ["streams"]
            | ["streams", _]
            | ["streams", _, "topics"]
            | ["streams", _, "topics", _]
            | ["streams", _, "topics", _, "consumer-groups"]
            | ["streams", _, "topics", _, "consumer-groups", _]
            | ["streams", _, "topics", _, "messages"]
            | ["streams", _, "topics", _, "consumer-offsets"]
            | ["users"]
            | ["users", _]
            | ["personal-access-tokens"]
            | ["stats"]
            | ["clients"]
            | ["clients", _]
    )
}

/// Whether the query asks for a linearizable read (absent and `serializable` do not).
pub fn asks_linearizable(consistency: Option<&str>) -> Result<bool, ApiError> {
    match consistency {
        None | Some("serializable") => Ok(false),
        Some("linearizable") => Ok(true),
        Some(other) => {
            Err(ApiError::bad_request(format!("query consistency: `{other}` is neither serializable nor linearizable")))
        }
    }
}

/// Where each replica of a cluster serves HTTP, to send a linearizable read to the primary.
#[derive(Clone, Debug, Default)]
pub struct PrimaryRedirect {
    /// `http` or `https`: the cluster's HTTP ports are configured alike.
    scheme: &'static str,
    /// By replica id: `host:port`, or none when the roster gives the node no HTTP port.
    authorities: Vec<Option<String>>,
}

impl PrimaryRedirect {
    /// From the roster of a cluster node's config; `None` for a single node.
    pub fn of(config: &ServerConfig) -> Option<PrimaryRedirect> {
        if !config.cluster.enabled {
            return None;
        }
        let mut nodes: Vec<_> = config.cluster.nodes.iter().collect();
        nodes.sort_by_key(|node| node.replica_id);
        let authorities = nodes
            .iter()
            .map(|node| {
                let port = node.ports.http;
                let host = if node.ip.contains(':') { format!("[{}]", node.ip) } else { node.ip.clone() };
                (port != 0).then(|| format!("{host}:{port}"))
            })
            .collect();
        Some(PrimaryRedirect { scheme: if config.http.tls.enabled { "https" } else { "http" }, authorities })
    }

    /// The answer a backup gives a linearizable read it has checked: `None` to serve it (this
    /// node leads), else the redirect or the refusal.
    pub fn answer(&self, leader: MetadataLeader, path_and_query: &str) -> Option<Response<Full<Bytes>>> {
        let not_primary = || {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                503,
                "not_primary",
                "linearizable read requires the primary; retry against the leader",
            )
            .into_response()
        };
        match leader {
            MetadataLeader::ThisNode => None,
            MetadataLeader::Unknown => Some(not_primary()),
            MetadataLeader::Replica(primary) => {
                let Some(Some(authority)) = self.authorities.get(primary as usize) else {
                    return Some(not_primary());
                };
                let location = format!("{}://{authority}{path_and_query}", self.scheme);
                let Ok(location) = hyper::header::HeaderValue::from_str(&location) else {
                    return Some(not_primary());
                };
                let mut response = Response::new(Full::new(Bytes::new()));
                *response.status_mut() = StatusCode::TEMPORARY_REDIRECT;
                response.headers_mut().insert(hyper::header::LOCATION, location);
                Some(response)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redirect() -> PrimaryRedirect {
        PrimaryRedirect {
            scheme: "http",
            authorities: vec![Some("10.0.0.1:3000".into()), None, Some("[::1]:3002".into())],
        }
    }

    #[test]
    fn a_backup_redirects_to_the_primary_or_refuses_when_it_cannot_name_one() {
        let path = "/streams?consistency=linearizable";
        assert!(redirect().answer(MetadataLeader::ThisNode, path).is_none());
        let to_first = redirect().answer(MetadataLeader::Replica(0), path).unwrap();
        assert_eq!(to_first.status(), StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(
            to_first.headers()[hyper::header::LOCATION],
            "http://10.0.0.1:3000/streams?consistency=linearizable"
        );
        let to_v6 = redirect().answer(MetadataLeader::Replica(2), path).unwrap();
        assert_eq!(to_v6.headers()[hyper::header::LOCATION], "http://[::1]:3002/streams?consistency=linearizable");
        for leader in [MetadataLeader::Unknown, MetadataLeader::Replica(1), MetadataLeader::Replica(7)] {
            let refused = redirect().answer(leader, path).unwrap();
            assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "{leader:?}");
        }
    }

    #[test]
    fn only_the_two_consistencies_are_understood() {
        assert!(!asks_linearizable(None).unwrap());
        assert!(!asks_linearizable(Some("serializable")).unwrap());
        assert!(asks_linearizable(Some("linearizable")).unwrap());
        assert_eq!(asks_linearizable(Some("strong")).unwrap_err().status, StatusCode::BAD_REQUEST);
        assert!(takes_consistency(&["streams", "1", "topics", "2", "messages"]));
        assert!(!takes_consistency(&["cluster", "metadata"]));
    }
}
