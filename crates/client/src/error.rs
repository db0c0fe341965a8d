//! Client and producer errors.

use minibroker_protocol::{BadFrame, ErrorCode, ErrorResponse, ProtocolError};
use std::sync::Arc;
use thiserror::Error;

/// Why a connection ended; every request waiting on it is answered with the same one.
#[derive(Debug, Error)]
pub enum ConnectionEnd {
    /// The client was dropped.
    #[error("client dropped")]
    Dropped,
    /// No connection is open (the producer lost it and has not reconnected yet).
    #[error("not connected")]
    NotConnected,
    /// The connection's task has ended.
    #[error("the connection task ended")]
    TaskEnded,
    /// Writing a request failed.
    #[error("write failed: {0}")]
    Write(#[source] std::io::Error),
    /// Reading an answer failed (or its frame was unreadable).
    #[error("read failed: {0}")]
    Read(#[source] ProtocolError),
    /// An answer did not decode.
    #[error("undecodable response: {0}")]
    Undecodable(#[source] BadFrame),
    /// The broker said why it closed the connection (an error answer with correlation id 0).
    #[error("broker closed the connection: {0}")]
    Refused(ErrorResponse),
    /// The broker closed the connection.
    #[error("closed by the broker")]
    Closed,
    /// What came back was a TLS record, not a frame: the listener speaks TLS.
    #[error("the broker's listener speaks TLS: connect with --tls-ca (its CA certificate)")]
    TlsSpoken,
}

/// A request that did not get a usable answer.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Could not connect.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address tried.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// No answer within the request timeout.
    #[error("request timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The connection closed before the answer came.
    #[error("connection closed: {0}")]
    ConnectionClosed(#[source] Arc<ConnectionEnd>),
    /// A frame could not be encoded or decoded.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The broker answered with an error (shown as `CODE: message`).
    #[error("{0}")]
    Broker(ErrorResponse),
    /// A record batch could not be built or read.
    #[error(transparent)]
    Records(#[from] minibroker_records::RecordsError),
    /// The broker answered with a response of the wrong kind.
    #[error("unexpected response: expected {expected}, got {got}")]
    UnexpectedResponse {
        /// What was expected.
        expected: &'static str,
        /// What came.
        got: String,
    },
}

impl ClientError {
    /// Whether resending on a new connection may succeed: timeouts, lost connections, and a
    /// partition made read-only by a disk error (a restarted broker serves it again); not a
    /// listener of another protocol, which answers the same on every connection.
    #[must_use]
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::ConnectionClosed(end) => !matches!(
                end.as_ref(),
                ConnectionEnd::TlsSpoken
                    | ConnectionEnd::Refused(ErrorResponse {
                        code: ErrorCode::WrongListener,
                        ..
                    })
            ),
            Self::Connect { .. } | Self::Timeout(_) => true,
            // The partition went read-only after a disk error; a restarted broker takes it again.
            Self::Broker(error) => error.code == ErrorCode::StorageError,
            _ => false,
        }
    }
}

/// Why an idempotent producer stopped.
#[derive(Debug, Error)]
pub enum ProducerError {
    /// A newer instance with the same producer id has taken over; this one must stop.
    #[error(
        "producer {producer_id} epoch {epoch} was fenced by a newer instance (FENCED_EPOCH); this producer is stopped"
    )]
    Fenced {
        /// The producer id.
        producer_id: i64,
        /// This instance's (stale) epoch.
        epoch: i16,
    },
    /// The broker refused a batch as out of order and retrying cannot fix it.
    #[error(
        "batch with sequence {sequence} on {topic}/{partition} was refused as OUT_OF_ORDER; this producer is stopped"
    )]
    OutOfOrder {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The refused sequence.
        sequence: i32,
    },
    /// The delivery timeout passed without the broker acknowledging anything.
    #[error("gave up after {attempts} rounds of resending without an acknowledgement: {last}")]
    RetriesExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: ClientError,
    },
    /// A request failed in a way retrying cannot fix.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The producer stopped earlier and cannot be used any more: why it stopped.
    #[error("the producer stopped earlier: {0}")]
    Stopped(#[source] Arc<ProducerError>),
    /// The batches' sequences would pass the largest sequence a producer may use.
    #[error(transparent)]
    Sequence(#[from] minibroker_state::StateError),
    /// The broker acknowledged fewer batches than were sent.
    #[error("the broker acknowledged fewer batches than were sent")]
    Unacknowledged,
}
