//! Cross-origin requests on the HTTP port (`[http.cors]`), keyed and mapped as the reference maps
//! them onto tower-http's `CorsLayer`, so that a browser app on another origin (a dashboard, the
//! Web UI served elsewhere) sees the same answers from Vireo as from the reference: preflights
//! (`OPTIONS`) answered with the allowed methods and headers, an allowed origin echoed (or `*`),
//! the exposed headers listed, credentials and private-network access only when asked.
//!
//! The mapping: an empty origin list allows none; `*` as the first origin allows any (what
//! follows it is ignored), anywhere else it is a mistake; entries are trimmed and blank ones
//! dropped; a method must be one of the standard verbs; `allow_credentials` cannot go with a
//! wildcard origin, header or exposed header (tower-http would panic at the first request: here
//! it is a configuration error at load).

use std::str::FromStr;

use hyper::header::{HeaderName, HeaderValue};
use hyper::Method;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::server::config::CorsConfig;

/// The layer `[http.cors]` describes (`None` when it is disabled), or what is wrong with it,
/// naming the key.
pub fn layer(config: &CorsConfig) -> Result<Option<CorsLayer>, String> {
    if !config.enabled {
        return Ok(None);
    }
    let origins: Vec<&str> = entries(&config.allowed_origins);
    let wildcard_origin = config.allowed_origins.first().is_some_and(|origin| origin.trim() == "*");
    let allow_origin = if wildcard_origin {
        AllowOrigin::any()
    } else if origins.contains(&"*") {
        return Err("http.cors.allowed_origins: \"*\" is honored only as the first entry".to_string());
    } else if origins.is_empty() {
        AllowOrigin::default()
    } else {
        AllowOrigin::list(parse::<HeaderValue>(&origins, "http.cors.allowed_origins")?)
    };
    let allowed_headers = parse::<HeaderName>(&entries(&config.allowed_headers), "http.cors.allowed_headers")?;
    let exposed_headers = parse::<HeaderName>(&entries(&config.exposed_headers), "http.cors.exposed_headers")?;
    let methods = entries(&config.allowed_methods)
        .into_iter()
        .map(|name| {
            let upper = name.to_ascii_uppercase();
            const STANDARD: [&str; 9] =
                ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "CONNECT", "PATCH", "TRACE"];
            if STANDARD.contains(&upper.as_str()) {
                Ok(Method::from_str(&upper).expect("a standard method"))
            } else {
                Err(format!("http.cors.allowed_methods: `{name}` is not an HTTP method"))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if config.allow_credentials {
        let wildcard = |names: &[HeaderName]| names.iter().any(|name| name.as_str() == "*");
        let field = if wildcard_origin {
            Some("allowed_origins")
        } else if wildcard(&allowed_headers) {
            Some("allowed_headers")
        } else if wildcard(&exposed_headers) {
            Some("exposed_headers")
        } else {
            None
        };
        if let Some(field) = field {
            return Err(format!("http.cors.allow_credentials: cannot be combined with a wildcard {field}"));
        }
    }
    Ok(Some(
        CorsLayer::new()
            .allow_methods(methods)
            .allow_origin(allow_origin)
            .allow_headers(allowed_headers)
            .expose_headers(exposed_headers)
            .allow_credentials(config.allow_credentials)
            .allow_private_network(config.allow_private_network),
    ))
}

fn entries(values: &[String]) -> Vec<&str> {
    values.iter().map(|value| value.trim()).filter(|value| !value.is_empty()).collect()
}

fn parse<T: FromStr>(values: &[&str], key: &str) -> Result<Vec<T>, String> {
    values
        .iter()
        .map(|value| value.parse::<T>().map_err(|_| format!("{key}: `{value}` is not a valid header value")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CorsConfig {
        CorsConfig {
            enabled: true,
            allowed_methods: ["GET", "POST", "PUT", "DELETE"].map(String::from).to_vec(),
            allowed_origins: vec!["*".to_string()],
            allowed_headers: ["content-type", "authorization"].map(String::from).to_vec(),
            exposed_headers: Vec::new(),
            allow_credentials: false,
            allow_private_network: false,
        }
    }

    #[test]
    fn mistakes_are_refused_naming_the_key() {
        assert!(layer(&config()).unwrap().is_some());
        assert!(layer(&CorsConfig { enabled: false, ..config() }).unwrap().is_none());
        let late_wildcard = CorsConfig { allowed_origins: vec!["http://a.example".into(), "*".into()], ..config() };
        assert!(layer(&late_wildcard).unwrap_err().starts_with("http.cors.allowed_origins"));
        let bad_method = CorsConfig { allowed_methods: vec!["FETCH".into()], ..config() };
        assert!(layer(&bad_method).unwrap_err().contains("`FETCH` is not an HTTP method"));
        let bad_header = CorsConfig { allowed_headers: vec!["bad header".into()], ..config() };
        assert!(layer(&bad_header).unwrap_err().starts_with("http.cors.allowed_headers"));
        let credentials = CorsConfig { allow_credentials: true, ..config() };
        assert!(layer(&credentials).unwrap_err().contains("wildcard allowed_origins"));
        let explicit = CorsConfig {
            allow_credentials: true,
            allowed_origins: vec![" http://a.example ".into(), "".into()],
            ..config()
        };
        assert!(layer(&explicit).unwrap().is_some());
    }
}
