//! The one error every wire decode returns. Each variant names the byte offset (from the start of
//! the body) where decoding stopped, so a client gets a status code and an operator a sentence
//! that points at the byte. Constructors (`Name::new`, `Options::new`, ...) check values that
//! come from no body, and report offset 0.

use vireo_storage::batch::BatchError;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{what} at offset {offset}: needed {needed} bytes, the body ends before")]
    Short { offset: usize, needed: usize, what: &'static str },
    #[error("invalid {what} at offset {offset}")]
    Invalid { offset: usize, what: &'static str },
    #[error("{what} at offset {offset} is {len}, more than the limit {max}")]
    TooLarge { offset: usize, what: &'static str, len: u64, max: u64 },
    #[error("unknown command code {0}")]
    UnknownCommand(u32),
    #[error("command code {0} is an obsolete login; use login_register (40)")]
    ObsoleteLogin(u32),
    #[error("trailing bytes at offset {offset}: the body is longer than its fields")]
    TrailingBytes { offset: usize },
    #[error("message batch at offset {offset}: {source}")]
    Batch { offset: usize, source: BatchError },
}
