//! Password hashing for logins, outside the state machine.
//!
//! The metadata state machine stores PHC strings and never hashes: hashing with a fresh salt is
//! random, and a replicated state machine must not be. The node draws the salt (from its seeded
//! randomness), hashes here, and replicates the hash; a login is verified here against the hash in
//! committed state.

use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::{Algorithm, Argon2, Params, Version};

/// Length of the salt the caller supplies, in bytes (the recommended 16).
pub const SALT_SIZE_BYTES: usize = 16;

/// How expensive a hash is to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordCost {
    /// argon2's defaults (Argon2id, 19 MiB, 2 iterations, 1 lane): what a real server uses.
    Production,
    /// The smallest legal memory and one iteration, so the simulator can log in thousands of
    /// times per run. Never for a real server.
    Test,
}

impl PasswordCost {
    fn params(self) -> Params {
        match self {
            PasswordCost::Production => Params::default(),
            PasswordCost::Test => {
                Params::new(Params::MIN_M_COST, Params::MIN_T_COST, 1, None).expect("minimal argon2 params are legal")
            }
        }
    }
}

/// Hashes `password` with the caller's salt into a PHC string (`$argon2id$v=19$m=...`).
/// The same inputs give the same string: the randomness is all in `salt_bytes`.
pub fn hash_password(password: &str, salt_bytes: [u8; SALT_SIZE_BYTES], cost: PasswordCost) -> String {
    let hasher = Argon2::new(Algorithm::Argon2id, Version::V0x13, cost.params());
    hasher
        .hash_password_with_salt(password.as_bytes(), &salt_bytes)
        .expect("a 16-byte salt and legal params always hash")
        .to_string()
}

/// Whether `password` matches the PHC string `hash`. The cost is read from the hash itself, so a
/// hash made at either cost verifies. A malformed hash matches nothing.
pub fn verify_password(hash: &str, password: &str) -> bool {
    Argon2::default().verify_password(password.as_bytes(), hash).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_against_its_own_hash_only() {
        let hash = hash_password("secret", [7; SALT_SIZE_BYTES], PasswordCost::Test);
        assert!(hash.starts_with("$argon2id$v=19$"));
        assert!(verify_password(&hash, "secret"));
        assert!(!verify_password(&hash, "Secret"));
        assert!(!verify_password("not a phc string", "secret"));
    }

    #[test]
    fn the_salt_is_the_only_randomness() {
        let first = hash_password("secret", [1; SALT_SIZE_BYTES], PasswordCost::Test);
        assert_eq!(first, hash_password("secret", [1; SALT_SIZE_BYTES], PasswordCost::Test));
        assert_ne!(first, hash_password("secret", [2; SALT_SIZE_BYTES], PasswordCost::Test));
    }

    #[test]
    fn a_production_hash_verifies_too() {
        let hash = hash_password("secret", [3; SALT_SIZE_BYTES], PasswordCost::Production);
        assert!(hash.contains("m=19456,t=2,p=1"));
        assert!(verify_password(&hash, "secret"));
    }
}
