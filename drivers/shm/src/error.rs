//! The shared-memory transport's errors.

use std::{io, path::PathBuf};

use switchyard_core::transport::{ErrorKind, TransportError};

/// Errors of the shared-memory transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShmError {
    /// The heap size is zero or too large for this machine's address space.
    #[error("heap size {size} is not usable (zero, or too large to map)")]
    BadHeapSize {
        /// The size asked for.
        size: u64,
    },
    /// Creating or sizing the own object failed.
    #[error("cannot create shared-memory object {}: {source}", path.display())]
    Create {
        /// The object.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The filesystem of the heap (`/dev/shm`, or the hugetlbfs) cannot hold
    /// it: refused before mapping, instead of a `SIGBUS` at the first page
    /// the filesystem has no room for.
    #[error(
        "the symmetric heap needs {need} bytes in {} but only {free} are free there: \
         lower the heap size (SWITCHYARD_HEAP_SIZE, or SHMEM_SYMMETRIC_SIZE in C programs) \
         or make {} larger",
        dir.display(),
        dir.display()
    )]
    NoSpace {
        /// The filesystem's directory.
        dir: PathBuf,
        /// Bytes the object needs (heap, control page, aliased globals).
        need: u64,
        /// Bytes free there before we asked, as `statvfs` reports them.
        free: u64,
    },
    /// Mapping the own object failed (often: the tmpfs is too small).
    #[error("cannot map {len} bytes of {}: {source}", path.display())]
    Map {
        /// The object.
        path: PathBuf,
        /// Bytes asked for.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Opening or mapping a peer's object failed.
    #[error("cannot attach shared-memory object {}: {source}", path.display())]
    Attach {
        /// The object.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A peer's object is not what the bootstrap announced.
    #[error("shared-memory object {} is not usable: {why}", path.display())]
    BadObject {
        /// The object.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A memory range to alias into the object is empty or not page aligned.
    #[error("cannot alias {len} bytes at {addr:#x} into shared memory: empty or not page aligned")]
    BadAlias {
        /// Start address.
        addr: usize,
        /// Length.
        len: usize,
    },
    /// The PE is outside the job.
    #[error("PE {pe} is not part of this job ({n_pes} PEs)")]
    InvalidPe {
        /// The PE.
        pe: u32,
        /// Job size.
        n_pes: u32,
    },
    /// No object address is known for the peer (not on this node).
    #[error("PE {pe} is not reachable over shared memory (no object announced)")]
    NoAddress {
        /// The PE.
        pe: u32,
    },
    /// The peer is not connected yet.
    #[error("PE {pe} is not connected over shared memory")]
    NotConnected {
        /// The PE.
        pe: u32,
    },
    /// The peer's process is gone.
    #[error("PE {pe} (pid {pid}) is dead")]
    PeerDead {
        /// The PE.
        pe: u32,
        /// Its process.
        pid: u32,
    },
    /// The range is outside the heap; nothing was written or read.
    #[error("[{offset}, +{len}) is outside PE {pe}'s {heap_len}-byte heap")]
    OutOfBounds {
        /// The PE whose heap.
        pe: u32,
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The heap's length.
        heap_len: u64,
    },
    /// The address is not aligned for an atomic of this width.
    #[error("offset {offset} of PE {pe} is not {align}-byte aligned for an atomic")]
    Misaligned {
        /// The PE.
        pe: u32,
        /// Offset asked for.
        offset: u64,
        /// Alignment required.
        align: u64,
    },
    /// The destination buffer of a get does not match the ticket.
    #[error("get buffer of {got} bytes for a {want}-byte get")]
    BufferLength {
        /// The ticket's length.
        want: u32,
        /// The buffer's.
        got: usize,
    },
}

impl TransportError for ShmError {
    fn kind(&self) -> ErrorKind {
        match self {
            ShmError::OutOfBounds { .. } | ShmError::BufferLength { .. } => ErrorKind::OutOfBounds,
            ShmError::Misaligned { .. } => ErrorKind::Misaligned,
            ShmError::InvalidPe { .. } | ShmError::NoAddress { .. } => ErrorKind::InvalidPe,
            ShmError::PeerDead { .. } | ShmError::NotConnected { .. } => ErrorKind::PeerDown,
            ShmError::BadHeapSize { .. }
            | ShmError::NoSpace { .. }
            | ShmError::Create { .. }
            | ShmError::Map { .. }
            | ShmError::Attach { .. }
            | ShmError::BadObject { .. }
            | ShmError::BadAlias { .. } => ErrorKind::Fatal,
        }
    }

    fn peer(&self) -> Option<u32> {
        match self {
            ShmError::InvalidPe { pe, .. }
            | ShmError::NoAddress { pe }
            | ShmError::NotConnected { pe }
            | ShmError::PeerDead { pe, .. }
            | ShmError::OutOfBounds { pe, .. }
            | ShmError::Misaligned { pe, .. } => Some(*pe),
            _ => None,
        }
    }
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, ShmError>;
