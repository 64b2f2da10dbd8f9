//! The client's error type.
//!
//! A leaf: it names nothing else of the crate (`Client` only in a doc
//! link), so every module may use it.

use std::fmt;
use std::time::Duration;

/// `Result` with the client's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Everything a client call can fail with.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// Connect, read or write failure (the OS error text).
    Io(String),
    /// The connection dropped while the request was pending, a watch was
    /// waiting or a lock was being acquired; or there is no connection.
    Disconnected,
    /// Connect or request timeout.
    Timeout,
    /// An error reply, full text: `"WRONGTYPE Operation against ..."`.
    Server(String),
    /// A frame the client cannot make sense of.
    Protocol(String),
    /// The reply could not be converted to the asked type.
    Type(String),
    /// A bad `redis://` (or `redis-sentinel://`) URL, or a bad
    /// [`Sentinel`](super::Sentinel) address.
    Url(String),
    /// No Sentinel of the list could be asked for the master's address
    /// (each one's failure is in the text).
    NoSentinel(String),
    /// The Sentinels answered, but none of them monitors a master of this
    /// name.
    MasterUnknown(String),
    /// The address the Sentinels gave does not answer as a master (`ROLE`
    /// says replica, or it cannot be reached) after the retries: a failover
    /// is in progress or stuck.
    NotMaster(String),
    /// [`Client::lock_timeout`](super::Client::lock_timeout) gave up.
    LockTimeout {
        /// The lock's key.
        name: String,
        /// How long it waited.
        waited: Duration,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Disconnected => f.write_str("connection lost"),
            Error::Timeout => f.write_str("timed out"),
            Error::Server(e) => f.write_str(e),
            Error::Protocol(e) => write!(f, "protocol error: {e}"),
            Error::Type(e) => write!(f, "type error: {e}"),
            Error::Url(e) => write!(f, "bad URL: {e}"),
            Error::NoSentinel(e) => write!(f, "no Sentinel answered: {e}"),
            Error::MasterUnknown(name) => {
                write!(f, "no Sentinel knows a master named {name:?}")
            }
            Error::NotMaster(e) => write!(f, "no master reachable through Sentinel: {e}"),
            Error::LockTimeout { name, waited } => {
                write!(f, "lock {name:?} not acquired within {waited:?}")
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}
