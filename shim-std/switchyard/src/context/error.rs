//! The errors of the Rust API: every one names what failed and, where one
//! is concerned, the peer.

use std::time::Duration;

use switchyard_core::{class::TransportId, route::SelectError};
use switchyard_shm::ShmError;
use switchyard_socket::SocketError;

/// Errors of the Rust API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is bad.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The bootstrap failed.
    #[error(transparent)]
    Bootstrap(#[from] switchyard_bootstrap::BootstrapError),
    /// The shared-memory transport failed.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// The TCP transport failed.
    #[error(transparent)]
    Tcp(#[from] SocketError),
    /// The RDMA verbs transport failed (an atomic whose outcome is unknown,
    /// a device error). Only with the `verbs` feature.
    #[cfg(feature = "verbs")]
    #[error(transparent)]
    Verbs(#[from] switchyard_verbs::VerbsError),
    /// Operations the verbs driver offered for replay after its link failed
    /// could not be sent over TCP (refused, or the peer is dead): they are
    /// not applied.
    #[error(
        "{ops} operations to PE {pe} could not be replayed over TCP after its verbs link failed"
    )]
    ReplayLost {
        /// The (first) PE concerned.
        pe: u32,
        /// How many operations.
        ops: u64,
    },
    /// No route to the PE.
    #[error("{0}")]
    Route(SelectError),
    /// An element range outside a symmetric block.
    #[error("elements [{at}, +{count}) are outside a symmetric block of {len}")]
    OutOfBounds {
        /// First element.
        at: usize,
        /// Elements asked for.
        count: usize,
        /// The block's length.
        len: usize,
    },
    /// The symmetric heap has no room.
    #[error(
        "symmetric heap exhausted: {requested} bytes asked, {available} free (raise SWITCHYARD_HEAP_SIZE)"
    )]
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
        /// Bytes free.
        available: u64,
    },
    /// A slice argument's length does not match the number of elements it
    /// describes (a [`WaitSet`](super::WaitSet)'s values or status mask, the
    /// output of `wait_until_some`).
    #[error("{what} has {got} elements, {want} expected")]
    Length {
        /// The argument.
        what: &'static str,
        /// Its expected length.
        want: usize,
        /// Its length.
        got: usize,
    },
    /// A handle from another context, or already freed.
    #[error("the symmetric handle does not belong to this context (or was freed)")]
    ForeignHandle,
    /// A wait ran past its deadline.
    #[error("{what} timed out after {waited:?}{}", pe.map(|p| format!(" waiting for PE {p}")).unwrap_or_default())]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        waited: Duration,
        /// The PE waited on, where one.
        pe: Option<u32>,
    },
    /// A PE died.
    #[error("PE {pe} is dead ({what})")]
    PeerDead {
        /// The PE.
        pe: u32,
        /// What was being done.
        what: &'static str,
    },
    /// [`Setup::trace_records`](super::Setup::trace_records) is not a
    /// capacity the trace ring can have.
    #[error("trace_records: {0}")]
    TraceRecords(switchyard_core::trace::CapacityError),
    /// No further context could be made on the PE
    /// ([`Pe::context`](super::Pe::context)).
    #[error("no further context on this PE: {why}")]
    NoContext {
        /// Why.
        why: &'static str,
    },
    /// A channel could not be made ([`Context::spsc`](super::Context::spsc)).
    #[error(transparent)]
    Channel(#[from] crate::channel::ChannelError),
    /// The route chose a transport this build cannot drive yet.
    #[error("transport {transport} chosen for PE {pe} is not available in this build")]
    TransportUnavailable {
        /// The transport.
        transport: TransportId,
        /// The PE.
        pe: u32,
    },
}

/// Result of this module.
pub type Result<T> = std::result::Result<T, Error>;
