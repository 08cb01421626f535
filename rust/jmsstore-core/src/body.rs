//! Body bytes that are either owned or shared: a broker keeps one copy of
//! a message body for its store record and its pager, and hands that copy
//! to a consumer, rather than copying it at each step.

use std::sync::Arc;

/// Bytes owned by their holder, or shared with others.
#[derive(Clone, Debug)]
pub enum BodyBytes {
    /// Shared (the pager's resident body, a sender's body).
    Shared(Arc<[u8]>),
    /// Owned (read back, or compressed).
    Owned(Vec<u8>),
}

impl std::ops::Deref for BodyBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            BodyBytes::Shared(b) => b,
            BodyBytes::Owned(b) => b,
        }
    }
}

impl PartialEq for BodyBytes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for BodyBytes {}

impl PartialEq<Vec<u8>> for BodyBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == other[..]
    }
}

impl From<BodyBytes> for Vec<u8> {
    fn from(body: BodyBytes) -> Self {
        match body {
            BodyBytes::Shared(b) => b.to_vec(),
            BodyBytes::Owned(b) => b,
        }
    }
}
