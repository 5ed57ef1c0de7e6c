//! One message of a batch: what [`Acker::apply`](crate::Acker::apply) takes, and the engine
//! applies. A data type in a file of its own (as [`outcome`](crate::acker::outcome) is), so
//! that the engine needs nothing of the API's files.

/// One message of a batch ([`Acker::apply`](crate::Acker::apply)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Message {
    /// Storm's ACKER_ACK: `xor` into `root`'s value ([`Acker::ack`](crate::Acker::ack)).
    Ack {
        /// The tree's root id.
        root: u64,
        /// The edge ids acked, XORed together.
        xor: u64,
    },
    /// Storm's ACKER_FAIL ([`Acker::fail`](crate::Acker::fail)).
    Fail {
        /// The tree's root id.
        root: u64,
    },
    /// Storm's ACKER_RESET_TIMEOUT ([`Acker::reset_timeout`](crate::Acker::reset_timeout)).
    ResetTimeout {
        /// The tree's root id.
        root: u64,
    },
}

impl Message {
    /// The root the message is for.
    pub fn root(&self) -> u64 {
        match *self {
            Message::Ack { root, .. } | Message::Fail { root } | Message::ResetTimeout { root } => {
                root
            }
        }
    }
}
