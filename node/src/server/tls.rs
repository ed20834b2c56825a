//! TLS for the client port and the HTTP port (`[tcp.tls]`, `[http.tls]`): the rustls server
//! configuration a section asks for, made once at start so that a missing or unreadable file stops
//! the server with one line naming the key.
//!
//! A section names its certificate chain and key (PEM). With `self_signed` and no `cert_file` on
//! disk, the node uses a self-signed pair for localhost, 127.0.0.1 and ::1 that it makes on its
//! first start and keeps in its data directory (`SELF_SIGNED_DIRECTORY`): clients given that
//! `cert.pem` as their CA keep trusting the node across restarts. (The reference makes a new pair
//! at every start, which no client can pin.) The key file is written readable by its owner only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_rustls::rustls::pki_types::pem::PemObject;
use futures_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use futures_rustls::rustls::{self, ServerConfig};

use crate::server::config::TlsConfig;

/// Where a node keeps its self-signed pair, under its data directory.
pub const SELF_SIGNED_DIRECTORY: &str = "tls";
const SELF_SIGNED_CERT: &str = "cert.pem";
const SELF_SIGNED_KEY: &str = "key.pem";
/// The names the self-signed certificate is valid for.
const SELF_SIGNED_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The certificate and key files a TLS section resolves to: its own, or the node's self-signed
/// pair (made now if it does not exist yet).
pub fn credential_files(section: &str, tls: &TlsConfig, data: &Path) -> Result<(PathBuf, PathBuf), String> {
    if !tls.self_signed || (!tls.cert_file.is_empty() && Path::new(&tls.cert_file).exists()) {
        return Ok((PathBuf::from(&tls.cert_file), PathBuf::from(&tls.key_file)));
    }
    let directory = data.join(SELF_SIGNED_DIRECTORY);
    let (cert, key) = (directory.join(SELF_SIGNED_CERT), directory.join(SELF_SIGNED_KEY));
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let names: Vec<String> = SELF_SIGNED_NAMES.iter().map(|name| name.to_string()).collect();
    let pair = rcgen::generate_simple_self_signed(names)
        .map_err(|error| format!("{section}.self_signed: cannot make a certificate: {error}"))?;
    std::fs::create_dir_all(&directory)
        .map_err(|error| format!("{section}.self_signed: cannot create {}: {error}", directory.display()))?;
    write_private(&key, pair.signing_key.serialize_pem().as_bytes())
        .map_err(|error| format!("{section}.self_signed: cannot write {}: {error}", key.display()))?;
    // The certificate goes last: its presence says the pair is whole.
    std::fs::write(&cert, pair.cert.pem())
        .map_err(|error| format!("{section}.self_signed: cannot write {}: {error}", cert.display()))?;
    Ok((cert, key))
}

/// Writes `bytes` to a new file only its owner can read, synced.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// The rustls configuration of a TLS section (ring's cryptography, TLS 1.2 and 1.3, no client
/// certificates); `Err` names the key and what is wrong with its file.
pub fn server_config(section: &str, tls: &TlsConfig, data: &Path) -> Result<Arc<ServerConfig>, String> {
    let (cert_path, key_path) = credential_files(section, tls, data)?;
    let certs = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|error| format!("key `{section}.cert_file`: cannot read {}: {error}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!("key `{section}.cert_file`: {} holds no certificate", cert_path.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|error| format!("key `{section}.key_file`: cannot read {}: {error}", key_path.display()))?;
    let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("{section}: {error}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|error| {
            format!("key `{section}.key_file`: {error} ({} with {})", key_path.display(), cert_path.display())
        })?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(self_signed: bool, cert_file: &str, key_file: &str) -> TlsConfig {
        TlsConfig {
            enabled: true,
            self_signed,
            cert_file: cert_file.to_string(),
            key_file: key_file.to_string(),
            handshake_timeout_ms: 10_000,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("vireo-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        path
    }

    #[test]
    fn a_self_signed_pair_is_made_once_and_kept() {
        let data = scratch("kept");
        server_config("tcp.tls", &section(true, "", ""), &data).unwrap();
        let cert = data.join(SELF_SIGNED_DIRECTORY).join(SELF_SIGNED_CERT);
        let first = std::fs::read(&cert).unwrap();
        server_config("http.tls", &section(true, "", ""), &data).unwrap();
        assert_eq!(std::fs::read(&cert).unwrap(), first, "the second start reuses the pair");
        use std::os::unix::fs::PermissionsExt;
        let mode =
            std::fs::metadata(data.join(SELF_SIGNED_DIRECTORY).join(SELF_SIGNED_KEY)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&data);
    }

    #[test]
    fn missing_or_wrong_files_name_their_key() {
        let data = scratch("wrong");
        let error = server_config("tcp.tls", &section(false, "/nonexistent/cert.pem", "/nonexistent/key.pem"), &data)
            .unwrap_err();
        assert!(error.starts_with("key `tcp.tls.cert_file`: cannot read /nonexistent/cert.pem"), "{error}");
        // A certificate with another pair's key.
        let (cert, _) = credential_files("tcp.tls", &section(true, "", ""), &data).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let other_key = data.join("other-key.pem");
        std::fs::write(&other_key, other.signing_key.serialize_pem()).unwrap();
        let error =
            server_config("http.tls", &section(false, cert.to_str().unwrap(), other_key.to_str().unwrap()), &data)
                .unwrap_err();
        assert!(error.starts_with("key `http.tls.key_file`"), "{error}");
        let not_pem = data.join("not.pem");
        std::fs::write(&not_pem, "not a certificate").unwrap();
        let error =
            server_config("tcp.tls", &section(false, not_pem.to_str().unwrap(), other_key.to_str().unwrap()), &data)
                .unwrap_err();
        assert!(error.contains("holds no certificate"), "{error}");
        let _ = std::fs::remove_dir_all(&data);
    }
}
