//! Bootstrap: who am I (rank, size, job), and the card exchange at a root.
//!
//! # Rank, size and job id
//!
//! [`RankInfo::from_env`] (or [`RankInfo::from_lookup`], which takes the
//! environment as a function so tests need not touch the process's) reads
//! rank and size from the first of these sources whose rank variable is set:
//!
//! | source | rank / size | local rank / size |
//! |---|---|---|
//! | `switchyard run` | `SWITCHYARD_RANK` / `SWITCHYARD_SIZE` | `SWITCHYARD_LOCAL_RANK` / `SWITCHYARD_LOCAL_SIZE` |
//! | Open MPI | `OMPI_COMM_WORLD_RANK` / `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` / `OMPI_COMM_WORLD_LOCAL_SIZE` |
//! | Slurm | `SLURM_PROCID` / `SLURM_NTASKS` | `SLURM_LOCALID` / `SLURM_NTASKS_PER_NODE` (each optional) |
//! | PMI | `PMI_RANK` / `PMI_SIZE` | none |
//!
//! With none of them the process is a singleton (rank 0 of 1). A source is
//! taken whole: once `SWITCHYARD_RANK` is set, garbage in `OMPI_*` is never
//! read. Half a pair (`SWITCHYARD_RANK` without `SWITCHYARD_SIZE`, or the
//! reverse; the same for the local pairs) is an error; only `SLURM_NTASKS`
//! alone is ignored, since an `salloc` shell sets it without being a job step.
//!
//! The job id is `SWITCHYARD_JOB_ID` (16 hex digits, set by the launcher);
//! else a hash of the job the rank source belongs to (`SLURM_JOB_ID` and
//! `SLURM_STEP_ID`, or `OMPI_MCA_ess_base_jobid`; the one matching the rank
//! source is tried first); else a hash of `SWITCHYARD_ROOT`; a singleton with
//! none of these gets a job id of its own.
//!
//! Every bad value is a [`BootstrapError`] that names the variable, the value
//! and what was expected, e.g. `SWITCHYARD_RANK=7 is not below
//! SWITCHYARD_SIZE=4`. Nothing here panics on any environment.
//!
//! # The rendezvous
//!
//! A [`RootServer`] listens at `SWITCHYARD_ROOT=host:port`. It is hosted by the
//! launcher (`SWITCHYARD_ROOT_HOST=launcher`) or, under srun or mpirun, by rank
//! 0 on a thread ([`rendezvous`], `SWITCHYARD_ROOT_HOST=rank0`, the default).
//! Every PE connects ([`Bootstrap::join`]) and posts its [`Card`]; once all
//! `size` cards are in, the root sends every PE all of them (an allgather),
//! then serves barriers ([`Bootstrap::barrier`]) until every PE has said
//! goodbye ([`Bootstrap::finish`]).
//!
//! ## Frames
//!
//! TCP, `TCP_NODELAY`, blocking sockets with read and write timeouts. Every
//! frame is `len: u32` (little-endian, counting what follows), `kind: u8`, then
//! the payload, all integers little-endian:
//!
//! | kind | frame | payload |
//! |---|---|---|
//! | 1 | hello (PE → root) | `"SYBS"`, protocol version `u8`, job id `u64`, rank `u32`, size `u32`, card length `u16`, card |
//! | 2 | all cards (root → PE) | count `u32`, then per rank: length `u16`, card |
//! | 3 | barrier (PE → root) | barrier number `u64` (1, 2, ...) |
//! | 4 | release (root → PE) | barrier number `u64` |
//! | 5 | goodbye (PE → root) | empty |
//! | 6 | error (root → PE) | rank count `u32`, ranks `u32` each, text length `u32`, UTF-8 text |
//!
//! Every length read from a socket is capped before anything is allocated for
//! it ([`MAX_FRAME_LEN`]; the all-cards frame at `size` times
//! [`Card::MAX_ENCODED_LEN`]), and bodies are read in bounded chunks, so
//! hostile bytes cannot exhaust memory. The card format is described at
//! [`Card::encode`].
//!
//! ## Validation
//!
//! A connection that does not speak this protocol, or whose hello carries
//! another job id, is refused (with an error frame when it speaks the
//! protocol) and does not count. A connection with the right job id is part of
//! the job, so what it says wrongly fails the whole job, and the root tells
//! every PE why in an error frame: a rank not below the size, a size that
//! differs from the root's, a rank claimed twice ([`BootstrapError::DuplicateRank`]),
//! a card that does not decode or whose job id or rank differ from the hello,
//! a path-class encoding version that differs from another PE's. Each PE
//! checks the all-cards frame again (count, job id, rank order, class encoding
//! version).
//!
//! ## Timeouts
//!
//! Every wait is bounded:
//!
//! * The root gives the allgather `timeout` from [`RootServer::serve`] (or
//!   [`RootServer::spawn`]); then it fails with
//!   [`BootstrapError::Timeout`] naming the ranks that never arrived.
//! * A barrier has `timeout` from the moment its first PE enters it; then the
//!   root fails naming the ranks that never entered.
//! * Once a PE has said goodbye, the others have `timeout` to say it too.
//! * Between barriers the root waits as long as the job runs, but a PE whose
//!   connection closes without a goodbye fails the job at once
//!   ([`BootstrapError::Disconnected`]): the others learn it from the error
//!   frame, in their current or next barrier, without waiting out a deadline.
//! * A PE retries connecting until its own `timeout`, and waits for the
//!   root's answer (all cards, a release) for its `timeout` plus a grace of
//!   half of it (at most 2 s), so that the root's verdict naming the missing
//!   ranks arrives before the PE gives up on its own.
//! * When the root fails it sends the error frame to every PE it knows and
//!   lingers up to 1 s (answering late connections with the same error) so
//!   the frame is read before the sockets close.
//!
//! # Example
//!
//! ```
//! use std::{thread, time::Duration};
//! use switchyard_bootstrap::{Bootstrap, Card, RootServer};
//!
//! let timeout = Duration::from_secs(5);
//! let job_id = 0x5eed;
//! let root = RootServer::bind("127.0.0.1:0".parse()?, job_id, 2, timeout)?;
//! let addr = root.local_addr();
//! let served = root.spawn()?;
//! let pes: Vec<_> = (0..2u32)
//!     .map(|rank| {
//!         thread::spawn(move || {
//!             let card = Card::new(job_id, rank, 42);
//!             let (mut boot, cards) = Bootstrap::join(addr, rank, 2, job_id, card, timeout)?;
//!             assert_eq!(cards.len(), 2);
//!             boot.barrier(timeout)?;
//!             boot.finish()
//!         })
//!     })
//!     .collect();
//! for pe in pes {
//!     pe.join().expect("PE thread")?;
//! }
//! served.join().expect("root thread")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
#![deny(unsafe_code)]

use std::{
    collections::HashMap,
    ffi::OsString,
    fmt, io,
    io::{Read, Write},
    net::{
        Shutdown, SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream, ToSocketAddrs,
    },
    str::Utf8Error,
    sync::mpsc,
    thread::{self, JoinHandle},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use switchyard_core::class::CLASS_ENCODING_VERSION;

/// The environment variables this module reads (and the launcher sets).
pub mod vars {
    /// Rank set by `switchyard run`.
    pub const RANK: &str = "SWITCHYARD_RANK";
    /// Job size set by `switchyard run`.
    pub const SIZE: &str = "SWITCHYARD_SIZE";
    /// Rank on this node, set by `switchyard run`.
    pub const LOCAL_RANK: &str = "SWITCHYARD_LOCAL_RANK";
    /// PEs on this node, set by `switchyard run`.
    pub const LOCAL_SIZE: &str = "SWITCHYARD_LOCAL_SIZE";
    /// Job id, 16 hex digits, set by `switchyard run`.
    pub const JOB_ID: &str = "SWITCHYARD_JOB_ID";
    /// Rendezvous address, `host:port`.
    pub const ROOT: &str = "SWITCHYARD_ROOT";
    /// Who hosts the root: `launcher` or `rank0` (the default).
    pub const ROOT_HOST: &str = "SWITCHYARD_ROOT_HOST";
    /// Open MPI rank.
    pub const OMPI_RANK: &str = "OMPI_COMM_WORLD_RANK";
    /// Open MPI size.
    pub const OMPI_SIZE: &str = "OMPI_COMM_WORLD_SIZE";
    /// Open MPI rank on this node.
    pub const OMPI_LOCAL_RANK: &str = "OMPI_COMM_WORLD_LOCAL_RANK";
    /// Open MPI PEs on this node.
    pub const OMPI_LOCAL_SIZE: &str = "OMPI_COMM_WORLD_LOCAL_SIZE";
    /// Open MPI job id.
    pub const OMPI_JOB_ID: &str = "OMPI_MCA_ess_base_jobid";
    /// Slurm rank.
    pub const SLURM_RANK: &str = "SLURM_PROCID";
    /// Slurm size.
    pub const SLURM_SIZE: &str = "SLURM_NTASKS";
    /// Slurm rank on this node.
    pub const SLURM_LOCAL_RANK: &str = "SLURM_LOCALID";
    /// Slurm tasks per node (only with `--ntasks-per-node`).
    pub const SLURM_LOCAL_SIZE: &str = "SLURM_NTASKS_PER_NODE";
    /// Slurm job id.
    pub const SLURM_JOB_ID: &str = "SLURM_JOB_ID";
    /// Slurm step id.
    pub const SLURM_STEP_ID: &str = "SLURM_STEP_ID";
    /// PMI rank.
    pub const PMI_RANK: &str = "PMI_RANK";
    /// PMI size.
    pub const PMI_SIZE: &str = "PMI_SIZE";
}

/// The largest job the rendezvous serves.
pub const MAX_PES: u32 = 1 << 20;

/// The largest frame other than the all-cards frame (1 MiB).
pub const MAX_FRAME_LEN: usize = 1 << 20;

/// Version of the bootstrap protocol carried in the hello.
pub const PROTOCOL_VERSION: u8 = 1;

/// Version of the card encoding ([`Card::encode`]).
pub const CARD_FORMAT_VERSION: u8 = 2;

/// Most TCP rails a card lists.
pub const MAX_TCP_RAILS: usize = 4;

/// `switch_id` of a card whose switch is not known.
pub const SWITCH_UNKNOWN: u32 = u32::MAX;

const CARD_MAGIC: [u8; 4] = *b"SYCD";
const HELLO_MAGIC: [u8; 4] = *b"SYBS";
const MAX_SHM_NAME: usize = 255;
const MAX_VERBS: usize = 256;
const MAX_ERROR_RANKS: usize = 1024;
const MAX_ERROR_TEXT: usize = 4096;
/// Coordinator poll step while accepting.
const POLL: Duration = Duration::from_millis(5);
/// How long a failing root keeps its sockets open so the error frame is read.
const LINGER: Duration = Duration::from_secs(1);
/// Connections accepted but not yet identified, beyond the ranks still
/// missing.
const MAX_UNIDENTIFIED: usize = 64;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why the bootstrap failed: the step, and the context to fix it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// An environment variable with a value that cannot be used.
    #[error("{var}={value:?} is not {expected}")]
    EnvBadValue {
        /// The variable.
        var: &'static str,
        /// Its value (lossily decoded when it is not UTF-8).
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// A job size of zero.
    #[error("{var}=0: expected a size of at least 1")]
    EnvZeroSize {
        /// The variable.
        var: &'static str,
    },
    /// A rank not below its size.
    #[error("{var}={value} is not below {limit_var}={limit}")]
    EnvNotBelow {
        /// The rank variable.
        var: &'static str,
        /// Its value.
        value: u32,
        /// The size variable.
        limit_var: &'static str,
        /// Its value.
        limit: u32,
    },
    /// A local size above the job size.
    #[error("{var}={value} is above {limit_var}={limit}")]
    EnvAbove {
        /// The local size variable.
        var: &'static str,
        /// Its value.
        value: u32,
        /// The job size variable.
        limit_var: &'static str,
        /// Its value.
        limit: u32,
    },
    /// One variable of a pair set without the other.
    #[error("{set}={value:?} is set but {unset} is not (expected both or neither)")]
    EnvHalfPair {
        /// The variable that is set.
        set: &'static str,
        /// Its value.
        value: String,
        /// The variable that is missing.
        unset: &'static str,
    },
    /// A job of several PEs with nothing to derive a job id from.
    #[error(
        "no job id for a job of {size} PEs: set SWITCHYARD_JOB_ID or SWITCHYARD_ROOT \
         (none of SWITCHYARD_JOB_ID, SLURM_JOB_ID, OMPI_MCA_ess_base_jobid, SWITCHYARD_ROOT is set)"
    )]
    EnvNoJobId {
        /// The job size.
        size: u32,
    },
    /// The rendezvous needs `SWITCHYARD_ROOT`, which is not set.
    #[error("SWITCHYARD_ROOT is not set: the rendezvous needs host:port")]
    NoRoot,
    /// `SWITCHYARD_ROOT` names a host that does not resolve.
    #[error("cannot resolve SWITCHYARD_ROOT={root:?}")]
    ResolveRoot {
        /// The value.
        root: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The node id could not be computed.
    #[error("cannot read {path} for the node id")]
    NodeId {
        /// The file.
        path: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A call with arguments that cannot work (size 0, rank not below size,
    /// a card for another rank...).
    #[error("bad bootstrap arguments: {reason}")]
    InvalidArgument {
        /// What is wrong.
        reason: String,
    },
    /// The root's listener could not be bound.
    #[error("cannot bind the bootstrap root at {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start the {what} thread")]
    Spawn {
        /// Which thread.
        what: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Two PEs claimed the same rank.
    #[error("bootstrap: rank {rank} is claimed by two PEs ({first} and {second})")]
    DuplicateRank {
        /// The rank.
        rank: u32,
        /// The address of the first claimant.
        first: SocketAddr,
        /// The address of the second.
        second: SocketAddr,
    },
    /// A PE claimed a rank not below the job size.
    #[error("bootstrap: {peer} claims rank {rank}, not below the job size {size}")]
    RankOutOfRange {
        /// The rank claimed.
        rank: u32,
        /// The job size.
        size: u32,
        /// Who claimed it.
        peer: SocketAddr,
    },
    /// A PE disagrees on the job size.
    #[error("bootstrap: rank {rank} says the job has {found} PEs, the root expects {expected}")]
    SizeMismatch {
        /// The rank.
        rank: u32,
        /// The root's size.
        expected: u32,
        /// The PE's.
        found: u32,
    },
    /// A card or frame of another job.
    #[error("bootstrap: {what} has job id {found:016x}, expected {expected:016x}")]
    JobIdMismatch {
        /// Whose.
        what: String,
        /// Our job id.
        expected: u64,
        /// Theirs.
        found: u64,
    },
    /// PEs that speak different path-class encodings.
    #[error(
        "bootstrap: rank {rank} speaks path-class encoding version {found}, \
         rank {reference} speaks {expected}"
    )]
    ClassVersionMismatch {
        /// The odd rank.
        rank: u32,
        /// Its version.
        found: u8,
        /// The rank it was compared with.
        reference: u32,
        /// That rank's version.
        expected: u8,
    },
    /// A card that cannot be used.
    #[error("bootstrap: bad card from {from}")]
    BadCard {
        /// Whose card (`rank 3 (10.0.0.1:4242)`, `our own`).
        from: String,
        /// What is wrong with it.
        #[source]
        source: CardError,
    },
    /// A peer that broke the protocol.
    #[error("bootstrap protocol error with {peer}: {reason}")]
    Protocol {
        /// Who.
        peer: String,
        /// What it did.
        reason: String,
    },
    /// A wait ran out: the ranks that never came (empty where the waiter
    /// cannot know them, at a PE waiting for the root).
    #[error("bootstrap {phase} timed out after {waited:?}: {}", Missing(.phase, .missing))]
    Timeout {
        /// `allgather`, `barrier` or `goodbye`.
        phase: &'static str,
        /// The ranks that never arrived, ascending.
        missing: Vec<u32>,
        /// The timeout.
        waited: Duration,
    },
    /// A PE whose connection closed before its goodbye.
    #[error("bootstrap: rank {rank} disconnected {during} without saying goodbye ({reason})")]
    Disconnected {
        /// The rank.
        rank: u32,
        /// When (`during the allgather`, `in barrier 2`, ...).
        during: String,
        /// What the root saw (`connection closed`, a reset, a bad frame).
        reason: String,
    },
    /// The root could not be reached.
    #[error("cannot connect to the bootstrap root at {root} within {waited:?}")]
    Connect {
        /// The root's address.
        root: SocketAddr,
        /// The timeout.
        waited: Duration,
        /// The last connect error.
        #[source]
        source: io::Error,
    },
    /// A frame could not be sent.
    #[error("bootstrap {phase}: cannot send to {peer}")]
    SendFrame {
        /// The phase.
        phase: &'static str,
        /// To whom.
        peer: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A frame could not be received.
    #[error("bootstrap {phase}: cannot receive from {peer}")]
    ReceiveFrame {
        /// The phase.
        phase: &'static str,
        /// From whom.
        peer: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The root closed the connection without a word.
    #[error("bootstrap {phase}: the root at {root} closed the connection")]
    RootClosed {
        /// The phase.
        phase: &'static str,
        /// The root.
        root: SocketAddr,
    },
    /// The root failed the job and said why.
    #[error("the bootstrap root failed: {message}")]
    RootReported {
        /// The ranks the root's error names.
        ranks: Vec<u32>,
        /// The root's error, as it displays.
        message: String,
    },
    /// A call on a connection that an earlier error left unusable.
    #[error("bootstrap connection unusable after an earlier error")]
    Unusable,
}

impl BootstrapError {
    /// The ranks this error names: missing, duplicated, disconnected or
    /// mismatched (empty when it names none).
    pub fn ranks(&self) -> Vec<u32> {
        match self {
            BootstrapError::Timeout { missing, .. } => missing.clone(),
            BootstrapError::RootReported { ranks, .. } => ranks.clone(),
            BootstrapError::DuplicateRank { rank, .. }
            | BootstrapError::SizeMismatch { rank, .. }
            | BootstrapError::ClassVersionMismatch { rank, .. }
            | BootstrapError::Disconnected { rank, .. } => vec![*rank],
            _ => Vec::new(),
        }
    }
}

/// Displays a rank list compactly: `3`, `1, 4-7`, `0-9, 12, … (1000 ranks in all)`.
struct RankList<'a>(&'a [u32]);

impl fmt::Display for RankList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_GROUPS: usize = 16;
        let mut groups = 0;
        let mut i = 0;
        let r = self.0;
        while i < r.len() {
            let mut j = i;
            while j + 1 < r.len() && r[j + 1] == r[j].wrapping_add(1) {
                j += 1;
            }
            if groups == MAX_GROUPS {
                return write!(f, ", … ({} ranks in all)", r.len());
            }
            if groups > 0 {
                f.write_str(", ")?;
            }
            if j == i {
                write!(f, "{}", r[i])?;
            } else {
                write!(f, "{}-{}", r[i], r[j])?;
            }
            groups += 1;
            i = j + 1;
        }
        Ok(())
    }
}

struct Missing<'a>(&'a &'static str, &'a Vec<u32>);

impl fmt::Display for Missing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.1.is_empty() {
            return f.write_str("no word from the root");
        }
        let verb = if *self.0 == "goodbye" {
            "never said goodbye"
        } else {
            "never arrived"
        };
        write!(f, "ranks {} {verb}", RankList(self.1))
    }
}

/// Why bytes are not a [`Card`] (or a card cannot be encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CardError {
    /// The bytes end inside a field.
    #[error("card truncated in {field}: needs {needed} bytes, {available} left")]
    Truncated {
        /// The field.
        field: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// Not a card.
    #[error("not a switchyard card: magic {found:02x?}, expected {CARD_MAGIC:02x?} (\"SYCD\")")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A card format this build does not read.
    #[error("card format version {found} is not supported (this build reads {supported})")]
    UnsupportedVersion {
        /// The version found.
        found: u8,
        /// The one this build reads.
        supported: u8,
    },
    /// Flag bits this build does not know.
    #[error("card flags {flags:#04x} have unknown bits (known: 0x07)")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
    },
    /// A field longer than its bound.
    #[error("card field {field} is {len} bytes, at most {max} allowed")]
    Overlong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A text field that is not UTF-8.
    #[error("card field {field} is not UTF-8")]
    BadUtf8 {
        /// The field.
        field: &'static str,
        /// Where it breaks.
        #[source]
        source: Utf8Error,
    },
    /// A name that cannot be used.
    #[error("card field {field} is {reason}")]
    BadName {
        /// The field.
        field: &'static str,
        /// What is wrong (`empty`, `contains a NUL byte`).
        reason: &'static str,
    },
    /// A TCP address family other than 4 or 6.
    #[error("card tcp address family {found} is not 4 or 6")]
    BadAddressFamily {
        /// The family byte.
        found: u8,
    },
    /// Bytes after the last field.
    #[error("card has {extra} trailing bytes")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
}

// ---------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------

/// Where rank and size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EnvSource {
    /// `switchyard run` (`SWITCHYARD_RANK`).
    Launcher,
    /// Open MPI (`OMPI_COMM_WORLD_RANK`).
    OpenMpi,
    /// Slurm (`SLURM_PROCID`).
    Slurm,
    /// PMI (`PMI_RANK`).
    Pmi,
    /// None: a lone process, rank 0 of 1.
    Singleton,
}

impl fmt::Display for EnvSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EnvSource::Launcher => "switchyard launcher",
            EnvSource::OpenMpi => "Open MPI",
            EnvSource::Slurm => "Slurm",
            EnvSource::Pmi => "PMI",
            EnvSource::Singleton => "singleton",
        })
    }
}

/// Where the job id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobIdSource {
    /// `SWITCHYARD_JOB_ID`.
    Launcher,
    /// A hash of `SLURM_JOB_ID` and `SLURM_STEP_ID`.
    Slurm,
    /// A hash of `OMPI_MCA_ess_base_jobid`.
    OpenMpi,
    /// A hash of `SWITCHYARD_ROOT`.
    Root,
    /// A singleton's own (pid and time).
    Process,
}

/// Who hosts the [`RootServer`] (`SWITCHYARD_ROOT_HOST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RootHost {
    /// The launcher (`launcher`): every PE only connects.
    Launcher,
    /// Rank 0, on a thread (`rank0`, the default).
    #[default]
    Rank0,
}

/// Who this PE is: rank, size, job, and where the rendezvous is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RankInfo {
    /// This PE's rank, below `size`.
    pub rank: u32,
    /// PEs in the job, at least 1.
    pub size: u32,
    /// Rank on this node, where the source gives it.
    pub local_rank: Option<u32>,
    /// PEs on this node, where the source gives it.
    pub local_size: Option<u32>,
    /// Where rank and size came from.
    pub source: EnvSource,
    /// The job id.
    pub job_id: u64,
    /// Where the job id came from.
    pub job_id_source: JobIdSource,
    /// `SWITCHYARD_ROOT` as given (`host:port`, checked for form, not resolved).
    pub root: Option<String>,
    /// `SWITCHYARD_ROOT_HOST`.
    pub root_host: RootHost,
}

struct Env<F> {
    lookup: F,
}

impl<F: FnMut(&str) -> Option<OsString>> Env<F> {
    fn get(&mut self, var: &'static str) -> Result<Option<String>, BootstrapError> {
        match (self.lookup)(var) {
            None => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|v| BootstrapError::EnvBadValue {
                    var,
                    value: v.to_string_lossy().into_owned(),
                    expected: "valid UTF-8",
                }),
        }
    }

    fn number(&mut self, var: &'static str) -> Result<Option<u32>, BootstrapError> {
        self.get(var)?.map(|v| parse_u32(var, &v)).transpose()
    }

    /// A (rank, size) pair: both or neither.
    fn pair(
        &mut self,
        rank_var: &'static str,
        size_var: &'static str,
    ) -> Result<Option<(u32, u32)>, BootstrapError> {
        let rank = self.get(rank_var)?;
        let size = self.get(size_var)?;
        match (rank, size) {
            (None, None) => Ok(None),
            (Some(value), None) => Err(BootstrapError::EnvHalfPair {
                set: rank_var,
                value,
                unset: size_var,
            }),
            (None, Some(value)) => Err(BootstrapError::EnvHalfPair {
                set: size_var,
                value,
                unset: rank_var,
            }),
            (Some(r), Some(s)) => {
                let rank = parse_u32(rank_var, &r)?;
                let size = parse_size(size_var, &s)?;
                check_below(rank_var, rank, size_var, size)?;
                Ok(Some((rank, size)))
            }
        }
    }
}

fn parse_u32(var: &'static str, value: &str) -> Result<u32, BootstrapError> {
    let bad = || BootstrapError::EnvBadValue {
        var,
        value: value.to_owned(),
        expected: "a decimal integer below 2^32",
    };
    if value.is_empty() || value.len() > 10 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    value
        .parse::<u64>()
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(bad)
}

fn parse_size(var: &'static str, value: &str) -> Result<u32, BootstrapError> {
    match parse_u32(var, value)? {
        0 => Err(BootstrapError::EnvZeroSize { var }),
        n => Ok(n),
    }
}

fn check_below(
    var: &'static str,
    value: u32,
    limit_var: &'static str,
    limit: u32,
) -> Result<(), BootstrapError> {
    if value < limit {
        Ok(())
    } else {
        Err(BootstrapError::EnvNotBelow {
            var,
            value,
            limit_var,
            limit,
        })
    }
}

fn parse_job_id_hex(value: &str) -> Result<u64, BootstrapError> {
    if value.len() != 16 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(BootstrapError::EnvBadValue {
            var: vars::JOB_ID,
            value: value.to_owned(),
            expected: "16 hex digits",
        });
    }
    u64::from_str_radix(value, 16).map_err(|_| BootstrapError::EnvBadValue {
        var: vars::JOB_ID,
        value: value.to_owned(),
        expected: "16 hex digits",
    })
}

/// Checks the form `host:port` (IPv6 in brackets, port 1-65535).
fn check_root_form(value: &str) -> Result<(), BootstrapError> {
    let bad = || BootstrapError::EnvBadValue {
        var: vars::ROOT,
        value: value.to_owned(),
        expected: "host:port (port 1-65535, an IPv6 address in brackets)",
    };
    let (host, port) = value.rsplit_once(':').ok_or_else(bad)?;
    let port_ok = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner
            .strip_suffix(']')
            .is_some_and(|h| !h.is_empty() && !h.contains(['[', ']']))
    } else {
        !host.is_empty() && host.len() <= 253 && !host.contains([':', '[', ']', '/', ' '])
    };
    if port_ok && host_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

fn non_empty(var: &'static str, value: String) -> Result<String, BootstrapError> {
    if value.is_empty() {
        Err(BootstrapError::EnvBadValue {
            var,
            value,
            expected: "a non-empty job id",
        })
    } else {
        Ok(value)
    }
}

/// FNV-1a, 64 bits, over parts separated by a byte no part contains as a
/// separator marker (0xff). Stable across builds and platforms.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
        h ^= 0xff;
        h = h.wrapping_mul(PRIME);
    }
    h
}

impl RankInfo {
    /// Reads rank, size, local rank and size, job id and root from the
    /// process environment.
    ///
    /// # Errors
    /// As [`RankInfo::from_lookup`]; a value that is not UTF-8 is
    /// [`BootstrapError::EnvBadValue`].
    pub fn from_env() -> Result<RankInfo, BootstrapError> {
        Self::from_os_lookup(|k| std::env::var_os(k))
    }

    /// Reads the same as [`RankInfo::from_env`] through `lookup`, which
    /// returns a variable's value or `None` when it is unset.
    ///
    /// ```
    /// use switchyard_bootstrap::{EnvSource, RankInfo};
    ///
    /// let env = [("SLURM_PROCID", "3"), ("SLURM_NTASKS", "8"), ("SLURM_JOB_ID", "77")];
    /// let info = RankInfo::from_lookup(|k| {
    ///     env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    /// })?;
    /// assert_eq!((info.rank, info.size, info.source), (3, 8, EnvSource::Slurm));
    ///
    /// let bad = RankInfo::from_lookup(|k| match k {
    ///     "SWITCHYARD_RANK" => Some("7".into()),
    ///     "SWITCHYARD_SIZE" => Some("4".into()),
    ///     _ => None,
    /// });
    /// assert_eq!(bad.unwrap_err().to_string(), "SWITCHYARD_RANK=7 is not below SWITCHYARD_SIZE=4");
    /// # Ok::<(), switchyard_bootstrap::BootstrapError>(())
    /// ```
    ///
    /// # Errors
    /// [`BootstrapError::EnvBadValue`] (not a number, a bad job id, root or
    /// root host), [`BootstrapError::EnvZeroSize`],
    /// [`BootstrapError::EnvNotBelow`] (a rank not below its size),
    /// [`BootstrapError::EnvAbove`] (a local size above the size),
    /// [`BootstrapError::EnvHalfPair`], or [`BootstrapError::EnvNoJobId`]
    /// for a job of several PEs with no job id and no root. Each names the
    /// variable and its value.
    pub fn from_lookup<F>(mut lookup: F) -> Result<RankInfo, BootstrapError>
    where
        F: FnMut(&str) -> Option<String>,
    {
        Self::from_os_lookup(|k| lookup(k).map(OsString::from))
    }

    fn from_os_lookup<F>(lookup: F) -> Result<RankInfo, BootstrapError>
    where
        F: FnMut(&str) -> Option<OsString>,
    {
        let mut env = Env { lookup };
        let (source, rank, size, local_rank, local_size) = Self::rank_and_size(&mut env)?;
        let root = env.get(vars::ROOT)?;
        if let Some(r) = &root {
            check_root_form(r)?;
        }
        let root_host = match env.get(vars::ROOT_HOST)?.as_deref() {
            None | Some("rank0") => RootHost::Rank0,
            Some("launcher") => RootHost::Launcher,
            Some(other) => {
                return Err(BootstrapError::EnvBadValue {
                    var: vars::ROOT_HOST,
                    value: other.to_owned(),
                    expected: "`launcher` or `rank0`",
                });
            }
        };
        let (job_id, job_id_source) = Self::job_id(&mut env, source, size, root.as_deref())?;
        Ok(RankInfo {
            rank,
            size,
            local_rank,
            local_size,
            source,
            job_id,
            job_id_source,
            root,
            root_host,
        })
    }

    #[allow(clippy::type_complexity)]
    fn rank_and_size<F: FnMut(&str) -> Option<OsString>>(
        env: &mut Env<F>,
    ) -> Result<(EnvSource, u32, u32, Option<u32>, Option<u32>), BootstrapError> {
        type Pair = (&'static str, &'static str);
        const PAIRED: [(EnvSource, Pair, Option<Pair>); 2] = [
            (
                EnvSource::Launcher,
                (vars::RANK, vars::SIZE),
                Some((vars::LOCAL_RANK, vars::LOCAL_SIZE)),
            ),
            (
                EnvSource::OpenMpi,
                (vars::OMPI_RANK, vars::OMPI_SIZE),
                Some((vars::OMPI_LOCAL_RANK, vars::OMPI_LOCAL_SIZE)),
            ),
        ];
        for (source, (rv, sv), local) in PAIRED {
            if let Some((rank, size)) = env.pair(rv, sv)? {
                let (mut lr, mut ls) = (None, None);
                if let Some((lrv, lsv)) = local
                    && let Some((r, s)) = env.pair(lrv, lsv)?
                {
                    if s > size {
                        return Err(BootstrapError::EnvAbove {
                            var: lsv,
                            value: s,
                            limit_var: sv,
                            limit: size,
                        });
                    }
                    (lr, ls) = (Some(r), Some(s));
                }
                return Ok((source, rank, size, lr, ls));
            }
        }
        // Slurm: the step is there when SLURM_PROCID is; an salloc shell has
        // SLURM_NTASKS alone.
        if let Some(r) = env.get(vars::SLURM_RANK)? {
            let rank = parse_u32(vars::SLURM_RANK, &r)?;
            let size = match env.get(vars::SLURM_SIZE)? {
                Some(s) => parse_size(vars::SLURM_SIZE, &s)?,
                None => {
                    return Err(BootstrapError::EnvHalfPair {
                        set: vars::SLURM_RANK,
                        value: r,
                        unset: vars::SLURM_SIZE,
                    });
                }
            };
            check_below(vars::SLURM_RANK, rank, vars::SLURM_SIZE, size)?;
            let lr = env.number(vars::SLURM_LOCAL_RANK)?;
            let ls = match env.get(vars::SLURM_LOCAL_SIZE)? {
                Some(s) => Some(parse_size(vars::SLURM_LOCAL_SIZE, &s)?),
                None => None,
            };
            if let Some(ls) = ls {
                if ls > size {
                    return Err(BootstrapError::EnvAbove {
                        var: vars::SLURM_LOCAL_SIZE,
                        value: ls,
                        limit_var: vars::SLURM_SIZE,
                        limit: size,
                    });
                }
                if let Some(lr) = lr {
                    check_below(vars::SLURM_LOCAL_RANK, lr, vars::SLURM_LOCAL_SIZE, ls)?;
                }
            }
            return Ok((EnvSource::Slurm, rank, size, lr, ls));
        }
        if let Some((rank, size)) = env.pair(vars::PMI_RANK, vars::PMI_SIZE)? {
            return Ok((EnvSource::Pmi, rank, size, None, None));
        }
        Ok((EnvSource::Singleton, 0, 1, Some(0), Some(1)))
    }

    fn job_id<F: FnMut(&str) -> Option<OsString>>(
        env: &mut Env<F>,
        source: EnvSource,
        size: u32,
        root: Option<&str>,
    ) -> Result<(u64, JobIdSource), BootstrapError> {
        if let Some(v) = env.get(vars::JOB_ID)? {
            return Ok((parse_job_id_hex(&v)?, JobIdSource::Launcher));
        }
        let order = if source == EnvSource::OpenMpi {
            [JobIdSource::OpenMpi, JobIdSource::Slurm]
        } else {
            [JobIdSource::Slurm, JobIdSource::OpenMpi]
        };
        for which in order {
            match which {
                JobIdSource::Slurm => {
                    if let Some(job) = env.get(vars::SLURM_JOB_ID)? {
                        let job = non_empty(vars::SLURM_JOB_ID, job)?;
                        let step = match env.get(vars::SLURM_STEP_ID)? {
                            Some(s) => non_empty(vars::SLURM_STEP_ID, s)?,
                            None => String::new(),
                        };
                        let id = fnv1a(&[b"slurm", job.as_bytes(), step.as_bytes()]);
                        return Ok((id, JobIdSource::Slurm));
                    }
                }
                _ => {
                    if let Some(job) = env.get(vars::OMPI_JOB_ID)? {
                        let job = non_empty(vars::OMPI_JOB_ID, job)?;
                        return Ok((fnv1a(&[b"ompi", job.as_bytes()]), JobIdSource::OpenMpi));
                    }
                }
            }
        }
        if let Some(root) = root {
            return Ok((fnv1a(&[b"root", root.as_bytes()]), JobIdSource::Root));
        }
        if size == 1 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let id = fnv1a(&[
                b"process",
                &std::process::id().to_le_bytes(),
                &nanos.to_le_bytes(),
            ]);
            return Ok((id, JobIdSource::Process));
        }
        Err(BootstrapError::EnvNoJobId { size })
    }

    /// The job id as `SWITCHYARD_JOB_ID` spells it: 16 lowercase hex digits.
    pub fn job_id_hex(&self) -> String {
        format!("{:016x}", self.job_id)
    }

    /// Whether this PE hosts the root: rank 0 when `SWITCHYARD_ROOT_HOST` is
    /// `rank0` (the default).
    pub fn hosts_root(&self) -> bool {
        self.rank == 0 && self.root_host == RootHost::Rank0
    }

    /// Resolves `SWITCHYARD_ROOT` to an address (the first the resolver
    /// gives).
    ///
    /// # Errors
    /// [`BootstrapError::NoRoot`] when it is not set,
    /// [`BootstrapError::ResolveRoot`] when the host does not resolve.
    pub fn root_addr(&self) -> Result<SocketAddr, BootstrapError> {
        let root = self.root.as_deref().ok_or(BootstrapError::NoRoot)?;
        let resolve_err = |source| BootstrapError::ResolveRoot {
            root: root.to_owned(),
            source,
        };
        root.to_socket_addrs()
            .map_err(resolve_err)?
            .next()
            .ok_or_else(|| {
                resolve_err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "the resolver gave no address",
                ))
            })
    }
}

// ---------------------------------------------------------------------------
// Node id
// ---------------------------------------------------------------------------

/// The node id of a host: a hash of its hostname and boot id. PEs with the
/// same node id can share memory.
pub fn node_id_from(hostname: &str, boot_id: &str) -> u64 {
    fnv1a(&[
        b"node",
        hostname.trim().as_bytes(),
        boot_id.trim().as_bytes(),
    ])
}

/// This host's node id: [`node_id_from`] the hostname
/// (`/proc/sys/kernel/hostname`, else `/etc/hostname`) and
/// `/proc/sys/kernel/random/boot_id` (empty where it cannot be read).
///
/// # Errors
/// [`BootstrapError::NodeId`] when no hostname can be read.
pub fn node_id_here() -> Result<u64, BootstrapError> {
    const HOSTNAME: &str = "/proc/sys/kernel/hostname";
    let hostname = match std::fs::read_to_string(HOSTNAME) {
        Ok(h) if !h.trim().is_empty() => h,
        first => match std::fs::read_to_string("/etc/hostname") {
            Ok(h) if !h.trim().is_empty() => h,
            _ => {
                return Err(BootstrapError::NodeId {
                    path: HOSTNAME,
                    source: first.err().unwrap_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "the hostname is empty")
                    }),
                });
            }
        },
    };
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    Ok(node_id_from(&hostname, &boot_id))
}

// ---------------------------------------------------------------------------
// Card
// ---------------------------------------------------------------------------

/// What one PE tells all others at bootstrap: who it is, where it runs, and
/// how each transport reaches it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Card {
    /// The job.
    pub job_id: u64,
    /// The PE's rank.
    pub rank: u32,
    /// Its node ([`node_id_here`]).
    pub node_id: u64,
    /// Its leaf switch, [`SWITCH_UNKNOWN`] when not known.
    pub switch_id: u32,
    /// The [`CLASS_ENCODING_VERSION`] it speaks.
    pub class_encoding_version: u8,
    /// Its process id.
    pub pid: u32,
    /// Its shared-memory object name (at most 255 bytes, no NUL).
    pub shm: Option<String>,
    /// Its tree of switches (PEs on different trees cannot reach each other
    /// over the network), [`SWITCH_UNKNOWN`] when not known.
    pub tree_id: u32,
    /// The job cookie: every TCP handshake of the job carries rank 0's. Other
    /// ranks may leave it zero.
    pub cookie: [u8; 16],
    /// Its TCP listening address per rail (rail order), at most
    /// [`MAX_TCP_RAILS`].
    pub tcp: Vec<SocketAddr>,
    /// Its verbs addressing, opaque here (at most 256 bytes).
    pub verbs: Option<Vec<u8>>,
}

/// A bounded reader over bytes: every read checks what is left.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn left(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], CardError> {
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        let out = rest.get(..n).ok_or(CardError::Truncated {
            field,
            needed: n,
            available: rest.len(),
        })?;
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], CardError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, CardError> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, CardError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, CardError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, CardError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn end(&self) -> Result<(), CardError> {
        match self.left() {
            0 => Ok(()),
            extra => Err(CardError::TrailingBytes { extra }),
        }
    }
}

const FLAG_SHM: u8 = 1;
const FLAG_TCP: u8 = 2;
const FLAG_VERBS: u8 = 4;
const CARD_FIXED_LEN: usize = 4 + 1 + 1 + 1 + 8 + 4 + 8 + 4 + 4 + 4 + 16;

fn check_shm_name(name: &str) -> Result<(), CardError> {
    if name.is_empty() {
        return Err(CardError::BadName {
            field: "shm name",
            reason: "empty",
        });
    }
    if name.len() > MAX_SHM_NAME {
        return Err(CardError::Overlong {
            field: "shm name",
            len: name.len(),
            max: MAX_SHM_NAME,
        });
    }
    if name.contains('\0') {
        return Err(CardError::BadName {
            field: "shm name",
            reason: "contains a NUL byte",
        });
    }
    Ok(())
}

impl Card {
    /// The longest encoding of a card, in bytes.
    pub const MAX_ENCODED_LEN: usize = CARD_FIXED_LEN
        + (1 + MAX_SHM_NAME)
        + (1 + MAX_TCP_RAILS * (1 + 16 + 2 + 4 + 4))
        + (2 + MAX_VERBS);

    /// A card for `rank` of job `job_id` on node `node_id`: switch unknown,
    /// this build's [`CLASS_ENCODING_VERSION`], this process's pid, no
    /// transport addressing yet.
    pub fn new(job_id: u64, rank: u32, node_id: u64) -> Card {
        Card {
            job_id,
            rank,
            node_id,
            switch_id: SWITCH_UNKNOWN,
            tree_id: SWITCH_UNKNOWN,
            cookie: [0; 16],
            class_encoding_version: CLASS_ENCODING_VERSION,
            pid: std::process::id(),
            shm: None,
            tcp: Vec::new(),
            verbs: None,
        }
    }

    /// Checks the bounds [`Card::encode`] needs.
    ///
    /// # Errors
    /// [`CardError::Overlong`] for an shm name over 255 bytes or verbs
    /// addressing over 256, [`CardError::BadName`] for an empty shm name or
    /// one with a NUL byte.
    pub fn check(&self) -> Result<(), CardError> {
        if let Some(name) = &self.shm {
            check_shm_name(name)?;
        }
        if self.tcp.len() > MAX_TCP_RAILS {
            return Err(CardError::Overlong {
                field: "tcp rails",
                len: self.tcp.len(),
                max: MAX_TCP_RAILS,
            });
        }
        if let Some(v) = &self.verbs
            && v.len() > MAX_VERBS
        {
            return Err(CardError::Overlong {
                field: "verbs",
                len: v.len(),
                max: MAX_VERBS,
            });
        }
        Ok(())
    }

    /// Encodes the card, little-endian:
    ///
    /// `"SYCD"`, format version `u8` ([`CARD_FORMAT_VERSION`]), class encoding
    /// version `u8`, flags `u8` (1 shm, 2 tcp, 4 verbs), job id `u64`, rank
    /// `u32`, node id `u64`, switch id `u32`, tree id `u32`, pid `u32`, cookie
    /// (16 bytes); then, when its flag is set: shm name (`u8` length, UTF-8),
    /// tcp rails (count `u8`, 1 to [`MAX_TCP_RAILS`], then per rail: family
    /// `u8` 4 or 6, the address's 4 or 16 bytes, port `u16`, and for IPv6 flow
    /// info and scope id `u32`), verbs addressing (`u16` length, bytes). At most
    /// [`Card::MAX_ENCODED_LEN`] bytes.
    ///
    /// # Errors
    /// As [`Card::check`].
    pub fn encode(&self) -> Result<Vec<u8>, CardError> {
        self.check()?;
        let mut out = Vec::with_capacity(Self::MAX_ENCODED_LEN);
        let flags = if self.shm.is_some() { FLAG_SHM } else { 0 }
            | if self.tcp.is_empty() { 0 } else { FLAG_TCP }
            | if self.verbs.is_some() { FLAG_VERBS } else { 0 };
        out.extend_from_slice(&CARD_MAGIC);
        out.push(CARD_FORMAT_VERSION);
        out.push(self.class_encoding_version);
        out.push(flags);
        out.extend_from_slice(&self.job_id.to_le_bytes());
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&self.node_id.to_le_bytes());
        out.extend_from_slice(&self.switch_id.to_le_bytes());
        out.extend_from_slice(&self.tree_id.to_le_bytes());
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.cookie);
        if let Some(name) = &self.shm {
            // check() bounded it to 255 bytes.
            out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
            out.extend_from_slice(name.as_bytes());
        }
        if !self.tcp.is_empty() {
            // check() bounded it to MAX_TCP_RAILS.
            out.push(self.tcp.len() as u8);
        }
        for addr in &self.tcp {
            match addr {
                SocketAddr::V4(a) => {
                    out.push(4);
                    out.extend_from_slice(&a.ip().octets());
                    out.extend_from_slice(&a.port().to_le_bytes());
                }
                SocketAddr::V6(a) => {
                    out.push(6);
                    out.extend_from_slice(&a.ip().octets());
                    out.extend_from_slice(&a.port().to_le_bytes());
                    out.extend_from_slice(&a.flowinfo().to_le_bytes());
                    out.extend_from_slice(&a.scope_id().to_le_bytes());
                }
            }
        }
        if let Some(v) = &self.verbs {
            // check() bounded it to 256 bytes.
            out.extend_from_slice(&u16::try_from(v.len()).unwrap_or(u16::MAX).to_le_bytes());
            out.extend_from_slice(v);
        }
        Ok(out)
    }

    /// Decodes a card written by [`Card::encode`].
    ///
    /// # Errors
    /// A [`CardError`] for every malformation: [`CardError::Truncated`],
    /// [`CardError::BadMagic`], [`CardError::UnsupportedVersion`],
    /// [`CardError::UnknownFlags`], [`CardError::Overlong`],
    /// [`CardError::BadUtf8`], [`CardError::BadName`],
    /// [`CardError::BadAddressFamily`], [`CardError::TrailingBytes`]. Never
    /// panics.
    pub fn decode(bytes: &[u8]) -> Result<Card, CardError> {
        let mut c = Cursor::new(bytes);
        let magic: [u8; 4] = c.array("magic")?;
        if magic != CARD_MAGIC {
            return Err(CardError::BadMagic { found: magic });
        }
        let version = c.u8("format version")?;
        if version != CARD_FORMAT_VERSION {
            return Err(CardError::UnsupportedVersion {
                found: version,
                supported: CARD_FORMAT_VERSION,
            });
        }
        let class_encoding_version = c.u8("class encoding version")?;
        let flags = c.u8("flags")?;
        if flags & !(FLAG_SHM | FLAG_TCP | FLAG_VERBS) != 0 {
            return Err(CardError::UnknownFlags { flags });
        }
        let job_id = c.u64("job id")?;
        let rank = c.u32("rank")?;
        let node_id = c.u64("node id")?;
        let switch_id = c.u32("switch id")?;
        let tree_id = c.u32("tree id")?;
        let pid = c.u32("pid")?;
        let cookie: [u8; 16] = c.array("cookie")?;
        let shm = if flags & FLAG_SHM != 0 {
            let len = usize::from(c.u8("shm name length")?);
            let raw = c.take(len, "shm name")?;
            let name = std::str::from_utf8(raw).map_err(|source| CardError::BadUtf8 {
                field: "shm name",
                source,
            })?;
            check_shm_name(name)?;
            Some(name.to_owned())
        } else {
            None
        };
        let mut tcp = Vec::new();
        if flags & FLAG_TCP != 0 {
            let n = usize::from(c.u8("tcp rail count")?);
            if n == 0 || n > MAX_TCP_RAILS {
                return Err(CardError::Overlong {
                    field: "tcp rails",
                    len: n,
                    max: MAX_TCP_RAILS,
                });
            }
            for _ in 0..n {
                tcp.push(match c.u8("tcp address family")? {
                    4 => {
                        let ip: [u8; 4] = c.array("tcp address")?;
                        let port = c.u16("tcp port")?;
                        SocketAddr::V4(SocketAddrV4::new(ip.into(), port))
                    }
                    6 => {
                        let ip: [u8; 16] = c.array("tcp address")?;
                        let port = c.u16("tcp port")?;
                        let flow = c.u32("tcp flow info")?;
                        let scope = c.u32("tcp scope id")?;
                        SocketAddr::V6(SocketAddrV6::new(ip.into(), port, flow, scope))
                    }
                    found => return Err(CardError::BadAddressFamily { found }),
                });
            }
        }
        let verbs = if flags & FLAG_VERBS != 0 {
            let len = usize::from(c.u16("verbs length")?);
            if len > MAX_VERBS {
                return Err(CardError::Overlong {
                    field: "verbs",
                    len,
                    max: MAX_VERBS,
                });
            }
            Some(c.take(len, "verbs")?.to_vec())
        } else {
            None
        };
        c.end()?;
        Ok(Card {
            job_id,
            rank,
            node_id,
            switch_id,
            tree_id,
            cookie,
            class_encoding_version,
            pid,
            shm,
            tcp,
            verbs,
        })
    }
}

// ---------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------

const KIND_HELLO: u8 = 1;
const KIND_ALL_CARDS: u8 = 2;
const KIND_BARRIER: u8 = 3;
const KIND_RELEASE: u8 = 4;
const KIND_BYE: u8 = 5;
const KIND_ERROR: u8 = 6;

fn kind_name(kind: u8) -> &'static str {
    match kind {
        KIND_HELLO => "hello",
        KIND_ALL_CARDS => "all-cards",
        KIND_BARRIER => "barrier",
        KIND_RELEASE => "release",
        KIND_BYE => "goodbye",
        KIND_ERROR => "error",
        _ => "unknown",
    }
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    // Every frame built here is far below 4 GiB (cards are capped by MAX_PES).
    let len = u32::try_from(payload.len() + 1).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    out
}

/// The cap on an all-cards frame for a job of `size`.
fn all_cards_cap(size: u32) -> usize {
    (1 + 4 + (size as usize).saturating_mul(2 + Card::MAX_ENCODED_LEN)).max(MAX_FRAME_LEN)
}

#[derive(Debug)]
struct Hello {
    job_id: u64,
    rank: u32,
    size: u32,
    card: Vec<u8>,
}

impl Hello {
    fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(4 + 1 + 8 + 4 + 4 + 2 + self.card.len());
        p.extend_from_slice(&HELLO_MAGIC);
        p.push(PROTOCOL_VERSION);
        p.extend_from_slice(&self.job_id.to_le_bytes());
        p.extend_from_slice(&self.rank.to_le_bytes());
        p.extend_from_slice(&self.size.to_le_bytes());
        p.extend_from_slice(
            &u16::try_from(self.card.len())
                .unwrap_or(u16::MAX)
                .to_le_bytes(),
        );
        p.extend_from_slice(&self.card);
        frame(KIND_HELLO, &p)
    }

    fn decode(body: &[u8]) -> Result<Hello, String> {
        let mut c = Cursor::new(body);
        let magic: [u8; 4] = c.array("magic").map_err(|e| e.to_string())?;
        if magic != HELLO_MAGIC {
            return Err(format!(
                "not a switchyard bootstrap hello (magic {magic:02x?})"
            ));
        }
        let version = c.u8("protocol version").map_err(|e| e.to_string())?;
        if version != PROTOCOL_VERSION {
            return Err(format!(
                "bootstrap protocol version {version} is not supported (this root speaks {PROTOCOL_VERSION})"
            ));
        }
        let mut inner = || -> Result<Hello, CardError> {
            let job_id = c.u64("hello job id")?;
            let rank = c.u32("hello rank")?;
            let size = c.u32("hello size")?;
            let len = usize::from(c.u16("hello card length")?);
            if len > Card::MAX_ENCODED_LEN {
                return Err(CardError::Overlong {
                    field: "hello card",
                    len,
                    max: Card::MAX_ENCODED_LEN,
                });
            }
            let card = c.take(len, "hello card")?.to_vec();
            c.end()?;
            Ok(Hello {
                job_id,
                rank,
                size,
                card,
            })
        };
        inner().map_err(|e| format!("malformed hello: {e}"))
    }
}

fn error_frame(err: &BootstrapError) -> Vec<u8> {
    let ranks = err.ranks();
    let ranks = &ranks[..ranks.len().min(MAX_ERROR_RANKS)];
    let mut text = err.to_string();
    if text.len() > MAX_ERROR_TEXT {
        let mut cut = MAX_ERROR_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    let mut p = Vec::with_capacity(8 + 4 * ranks.len() + text.len());
    p.extend_from_slice(&u32::try_from(ranks.len()).unwrap_or(0).to_le_bytes());
    for r in ranks {
        p.extend_from_slice(&r.to_le_bytes());
    }
    p.extend_from_slice(&u32::try_from(text.len()).unwrap_or(0).to_le_bytes());
    p.extend_from_slice(text.as_bytes());
    frame(KIND_ERROR, &p)
}

fn decode_error_frame(body: &[u8]) -> Result<BootstrapError, String> {
    let mut c = Cursor::new(body);
    let mut inner = || -> Result<BootstrapError, CardError> {
        let n = c.u32("error rank count")? as usize;
        if n > MAX_ERROR_RANKS {
            return Err(CardError::Overlong {
                field: "error ranks",
                len: n,
                max: MAX_ERROR_RANKS,
            });
        }
        let mut ranks = Vec::with_capacity(n);
        for _ in 0..n {
            ranks.push(c.u32("error rank")?);
        }
        let len = c.u32("error text length")? as usize;
        if len > MAX_ERROR_TEXT {
            return Err(CardError::Overlong {
                field: "error text",
                len,
                max: MAX_ERROR_TEXT,
            });
        }
        let message = String::from_utf8_lossy(c.take(len, "error text")?).into_owned();
        c.end()?;
        Ok(BootstrapError::RootReported { ranks, message })
    };
    inner().map_err(|e| format!("malformed error frame: {e}"))
}

fn u64_payload(body: &[u8], what: &'static str) -> Result<u64, String> {
    let mut c = Cursor::new(body);
    let n = c.u64(what).map_err(|e| e.to_string())?;
    c.end().map_err(|e| e.to_string())?;
    Ok(n)
}

enum ReadError {
    Io(io::Error),
    Timeout,
    Eof,
    TooLong { len: usize, cap: usize },
    Empty,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Timeout => f.write_str("timed out"),
            ReadError::Eof => f.write_str("connection closed"),
            ReadError::TooLong { len, cap } => {
                write!(f, "frame of {len} bytes announced, at most {cap} allowed")
            }
            ReadError::Empty => f.write_str("frame of length 0"),
        }
    }
}

/// Fills `buf`, with every read bounded by `deadline` when there is one.
fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> Result<(), ReadError> {
    let mut off = 0;
    while off < buf.len() {
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Err(ReadError::Timeout);
            }
            stream
                .set_read_timeout(Some((d - now).max(Duration::from_millis(1))))
                .map_err(ReadError::Io)?;
        }
        let Some(rest) = buf.get_mut(off..) else {
            break;
        };
        match stream.read(rest) {
            Ok(0) => return Err(ReadError::Eof),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if deadline.is_some()
                    && matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Ok(())
}

/// Reads one frame: its kind and payload. The length is checked against
/// `cap` before anything is allocated, and the body is read in chunks.
fn read_frame(
    stream: &mut TcpStream,
    deadline: Option<Instant>,
    cap: usize,
) -> Result<(u8, Vec<u8>), ReadError> {
    const CHUNK: usize = 64 << 10;
    let mut head = [0u8; 5];
    // The length first: refuse a long frame before its kind arrives.
    read_full(stream, &mut head[..4], deadline)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len == 0 {
        return Err(ReadError::Empty);
    }
    if len > cap {
        return Err(ReadError::TooLong { len, cap });
    }
    read_full(stream, &mut head[4..], deadline)?;
    let want = len - 1;
    let mut body = Vec::with_capacity(want.min(CHUNK));
    while body.len() < want {
        let start = body.len();
        let n = (want - start).min(CHUNK);
        body.resize(start + n, 0);
        read_full(stream, &mut body[start..], deadline)?;
    }
    Ok((head[4], body))
}

fn write_frame(stream: &mut TcpStream, bytes: &[u8], timeout: Duration) -> io::Result<()> {
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    stream.write_all(bytes)?;
    stream.flush()
}

// ---------------------------------------------------------------------------
// Root
// ---------------------------------------------------------------------------

/// The rendezvous: collects every PE's card, hands all cards to everyone,
/// then serves barriers until every PE has said goodbye.
#[derive(Debug)]
pub struct RootServer {
    listener: TcpListener,
    addr: SocketAddr,
    job_id: u64,
    size: u32,
    timeout: Duration,
}

enum Event {
    /// A connection's first frame: a hello, or why it is not one.
    Hello {
        conn: u64,
        hello: Result<Hello, String>,
    },
    /// A later frame.
    Frame { conn: u64, kind: u8, body: Vec<u8> },
    /// The connection ended (EOF, error, or a bad frame).
    Gone { conn: u64, reason: String },
}

struct Conn {
    peer: SocketAddr,
    /// The coordinator's handle: writes, and shutdown to end the reader.
    stream: TcpStream,
    rank: Option<u32>,
}

struct Root {
    job_id: u64,
    size: u32,
    timeout: Duration,
    listener: Option<TcpListener>,
    tx: Option<mpsc::Sender<Event>>,
    rx: mpsc::Receiver<Event>,
    conns: HashMap<u64, Conn>,
    threads: Vec<JoinHandle<()>>,
    next_conn: u64,
    /// rank → connection id.
    by_rank: Vec<Option<u64>>,
    cards: Vec<Vec<u8>>,
    arrived: u32,
    /// The first card's rank and class encoding version.
    class_ref: Option<(u32, u8)>,
}

impl RootServer {
    /// Binds the rendezvous listener at `addr` (`127.0.0.1:0` picks a free
    /// port) for a job of `size` PEs; `timeout` bounds the allgather, each
    /// barrier and the goodbyes (see the [module docs](self)).
    ///
    /// # Errors
    /// [`BootstrapError::InvalidArgument`] for a size of 0 or above
    /// [`MAX_PES`], or a zero timeout; [`BootstrapError::Bind`] when the
    /// address cannot be bound.
    pub fn bind(
        addr: SocketAddr,
        job_id: u64,
        size: u32,
        timeout: Duration,
    ) -> Result<RootServer, BootstrapError> {
        check_size(size)?;
        check_timeout(timeout)?;
        let bind_err = |source| BootstrapError::Bind { addr, source };
        let listener = TcpListener::bind(addr).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        Ok(RootServer {
            listener,
            addr,
            job_id,
            size,
            timeout,
        })
    }

    /// The address the listener is bound to (with the port picked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves on a new thread (see [`RootServer::serve`]).
    ///
    /// # Errors
    /// [`BootstrapError::Spawn`] when the thread cannot be started; the
    /// thread's own result is [`RootServer::serve`]'s.
    pub fn spawn(self) -> Result<JoinHandle<Result<(), BootstrapError>>, BootstrapError> {
        thread::Builder::new()
            .name("switchyard-root".into())
            .spawn(move || self.serve())
            .map_err(|source| BootstrapError::Spawn {
                what: "bootstrap root",
                source,
            })
    }

    /// Serves on this thread: collects `size` cards (within the timeout from
    /// now), sends everyone all cards, then serves barriers until every PE has
    /// said goodbye. On failure it tells every PE why before returning.
    ///
    /// # Errors
    /// [`BootstrapError::Timeout`] naming the ranks that never arrived (in
    /// the allgather, a barrier, or the goodbyes);
    /// [`BootstrapError::Disconnected`] for a PE gone without a goodbye;
    /// [`BootstrapError::DuplicateRank`], [`BootstrapError::RankOutOfRange`],
    /// [`BootstrapError::SizeMismatch`],
    /// [`BootstrapError::ClassVersionMismatch`], [`BootstrapError::BadCard`]
    /// or [`BootstrapError::Protocol`] for a PE of the job that says
    /// something wrong; [`BootstrapError::SendFrame`] or
    /// [`BootstrapError::Spawn`].
    pub fn serve(self) -> Result<(), BootstrapError> {
        let (tx, rx) = mpsc::channel();
        let n = self.size as usize;
        let mut root = Root {
            job_id: self.job_id,
            size: self.size,
            timeout: self.timeout,
            listener: Some(self.listener),
            tx: Some(tx),
            rx,
            conns: HashMap::new(),
            threads: Vec::new(),
            next_conn: 0,
            by_rank: vec![None; n],
            cards: vec![Vec::new(); n],
            arrived: 0,
            class_ref: None,
        };
        let result = root.run();
        root.close_all();
        result
    }
}

fn check_size(size: u32) -> Result<(), BootstrapError> {
    if size == 0 || size > MAX_PES {
        return Err(BootstrapError::InvalidArgument {
            reason: format!("job size {size} is not in 1..={MAX_PES}"),
        });
    }
    Ok(())
}

fn check_timeout(timeout: Duration) -> Result<(), BootstrapError> {
    if timeout.is_zero() {
        return Err(BootstrapError::InvalidArgument {
            reason: "the timeout is zero".into(),
        });
    }
    Ok(())
}

/// One accepted connection's reader: the hello within `deadline`, then every
/// frame until the connection ends.
fn conn_reader(conn: u64, mut stream: TcpStream, deadline: Instant, tx: mpsc::Sender<Event>) {
    let hello = match read_frame(&mut stream, Some(deadline), MAX_FRAME_LEN) {
        Ok((KIND_HELLO, body)) => Hello::decode(&body),
        Ok((kind, _)) => Err(format!(
            "first frame is a {} frame (kind {kind}), expected a hello",
            kind_name(kind)
        )),
        Err(e) => Err(format!("no hello: {e}")),
    };
    let ok = hello.is_ok();
    if tx.send(Event::Hello { conn, hello }).is_err() || !ok {
        return;
    }
    if let Err(e) = stream.set_read_timeout(None) {
        let _ = tx.send(Event::Gone {
            conn,
            reason: e.to_string(),
        });
        return;
    }
    loop {
        match read_frame(&mut stream, None, MAX_FRAME_LEN) {
            Ok((kind, body)) => {
                if tx.send(Event::Frame { conn, kind, body }).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx.send(Event::Gone {
                    conn,
                    reason: e.to_string(),
                });
                return;
            }
        }
    }
}

impl Root {
    fn run(&mut self) -> Result<(), BootstrapError> {
        let start = Instant::now();
        if let Err(e) = self.gather(start + self.timeout) {
            return self.fail(e);
        }
        // Everyone is here: stop accepting, and let the channel close when
        // the last reader ends.
        self.listener = None;
        self.tx = None;
        let strays: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.rank.is_none())
            .map(|(id, _)| *id)
            .collect();
        for id in strays {
            self.drop_conn(id);
        }
        if let Err(e) = self.send_cards() {
            return self.fail(e);
        }
        match self.barriers() {
            Ok(()) => Ok(()),
            Err(e) => self.fail(e),
        }
    }

    fn missing(&self, present: impl Fn(u32) -> bool) -> Vec<u32> {
        (0..self.size).filter(|&r| !present(r)).collect()
    }

    fn rank_of(&self, conn: u64) -> Option<u32> {
        self.conns.get(&conn).and_then(|c| c.rank)
    }

    fn peer_name(&self, conn: u64) -> String {
        match self.conns.get(&conn) {
            Some(Conn {
                rank: Some(r),
                peer,
                ..
            }) => format!("rank {r} ({peer})"),
            Some(c) => c.peer.to_string(),
            None => format!("connection {conn}"),
        }
    }

    fn drop_conn(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }

    /// Refuses a connection that is not part of the job: tells it why, and
    /// forgets it.
    fn refuse(&mut self, id: u64, err: &BootstrapError) {
        if let Some(c) = self.conns.get_mut(&id) {
            let _ = write_frame(&mut c.stream, &error_frame(err), Duration::from_millis(200));
        }
        self.drop_conn(id);
    }

    fn accept_new(&mut self, hello_deadline: Instant) -> Result<(), BootstrapError> {
        loop {
            let Some(listener) = &self.listener else {
                return Ok(());
            };
            let (stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock: nothing pending. Anything else (out of file
                // descriptors, an aborted connection): try again next round.
                Err(_) => return Ok(()),
            };
            let unidentified = self.conns.values().filter(|c| c.rank.is_none()).count();
            let still_missing = (self.size - self.arrived) as usize;
            if unidentified >= still_missing + MAX_UNIDENTIFIED {
                // Too many connections that have not said who they are:
                // close this one (a real PE among a flood fails to join and
                // says so, the root is not exhausted).
                drop(stream);
                continue;
            }
            let Some(tx) = self.tx.clone() else {
                return Ok(());
            };
            let setup = stream
                .set_nonblocking(false)
                .and_then(|()| stream.set_nodelay(true))
                .and_then(|()| stream.try_clone());
            let Ok(reader) = setup else {
                continue;
            };
            let id = self.next_conn;
            self.next_conn += 1;
            let handle = thread::Builder::new()
                .name("switchyard-root-conn".into())
                .stack_size(256 << 10)
                .spawn(move || conn_reader(id, reader, hello_deadline, tx))
                .map_err(|source| BootstrapError::Spawn {
                    what: "bootstrap root connection",
                    source,
                })?;
            self.threads.push(handle);
            self.conns.insert(
                id,
                Conn {
                    peer,
                    stream,
                    rank: None,
                },
            );
        }
    }

    fn gather(&mut self, deadline: Instant) -> Result<(), BootstrapError> {
        while self.arrived < self.size {
            let now = Instant::now();
            if now >= deadline {
                return Err(BootstrapError::Timeout {
                    phase: "allgather",
                    missing: self.missing(|r| self.by_rank[r as usize].is_some()),
                    waited: self.timeout,
                });
            }
            self.accept_new(deadline)?;
            if let Ok(ev) = self.rx.recv_timeout(POLL.min(deadline - now)) {
                self.on_gather_event(ev)?;
            }
        }
        Ok(())
    }

    fn on_gather_event(&mut self, ev: Event) -> Result<(), BootstrapError> {
        match ev {
            Event::Hello {
                conn,
                hello: Err(reason),
            } => {
                let peer = self.peer_name(conn);
                self.refuse(conn, &BootstrapError::Protocol { peer, reason });
                Ok(())
            }
            Event::Hello { conn, hello: Ok(h) } => self.on_hello(conn, h),
            Event::Frame { conn, kind, .. } => match self.rank_of(conn) {
                Some(_) => Err(BootstrapError::Protocol {
                    peer: self.peer_name(conn),
                    reason: format!(
                        "sent a {} frame before the allgather finished",
                        kind_name(kind)
                    ),
                }),
                None => Ok(()),
            },
            Event::Gone { conn, reason } => match self.rank_of(conn) {
                Some(rank) => Err(BootstrapError::Disconnected {
                    rank,
                    during: "during the allgather".into(),
                    reason,
                }),
                None => {
                    self.drop_conn(conn);
                    Ok(())
                }
            },
        }
    }

    fn on_hello(&mut self, conn: u64, h: Hello) -> Result<(), BootstrapError> {
        let Some(peer) = self.conns.get(&conn).map(|c| c.peer) else {
            return Ok(());
        };
        if h.job_id != self.job_id {
            let err = BootstrapError::JobIdMismatch {
                what: format!("the hello from {peer} (rank {})", h.rank),
                expected: self.job_id,
                found: h.job_id,
            };
            self.refuse(conn, &err);
            return Ok(());
        }
        if h.size != self.size {
            return Err(BootstrapError::SizeMismatch {
                rank: h.rank,
                expected: self.size,
                found: h.size,
            });
        }
        if h.rank >= self.size {
            return Err(BootstrapError::RankOutOfRange {
                rank: h.rank,
                size: self.size,
                peer,
            });
        }
        if let Some(first) = self.by_rank[h.rank as usize] {
            let first = self.conns.get(&first).map_or(peer, |c| c.peer);
            return Err(BootstrapError::DuplicateRank {
                rank: h.rank,
                first,
                second: peer,
            });
        }
        let card = Card::decode(&h.card).map_err(|source| BootstrapError::BadCard {
            from: format!("rank {} ({peer})", h.rank),
            source,
        })?;
        if card.job_id != h.job_id || card.rank != h.rank {
            return Err(BootstrapError::Protocol {
                peer: format!("rank {} ({peer})", h.rank),
                reason: format!(
                    "the card says job {:016x} rank {}, the hello job {:016x} rank {}",
                    card.job_id, card.rank, h.job_id, h.rank
                ),
            });
        }
        match self.class_ref {
            None => self.class_ref = Some((h.rank, card.class_encoding_version)),
            Some((reference, expected)) if expected != card.class_encoding_version => {
                return Err(BootstrapError::ClassVersionMismatch {
                    rank: h.rank,
                    found: card.class_encoding_version,
                    reference,
                    expected,
                });
            }
            Some(_) => {}
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.rank = Some(h.rank);
        }
        self.by_rank[h.rank as usize] = Some(conn);
        self.cards[h.rank as usize] = h.card;
        self.arrived += 1;
        Ok(())
    }

    fn send_to_rank(
        &mut self,
        rank: u32,
        bytes: &[u8],
        phase: &'static str,
    ) -> Result<(), BootstrapError> {
        let id = self.by_rank[rank as usize];
        let Some(c) = id.and_then(|id| self.conns.get_mut(&id)) else {
            return Err(BootstrapError::Disconnected {
                rank,
                during: format!("during the {phase}"),
                reason: "connection closed".into(),
            });
        };
        write_frame(&mut c.stream, bytes, self.timeout).map_err(|source| {
            BootstrapError::SendFrame {
                phase,
                peer: format!("rank {rank} ({})", c.peer),
                source,
            }
        })
    }

    fn send_cards(&mut self) -> Result<(), BootstrapError> {
        let total: usize = self.cards.iter().map(|c| 2 + c.len()).sum();
        let mut p = Vec::with_capacity(4 + total);
        p.extend_from_slice(&self.size.to_le_bytes());
        for c in &self.cards {
            p.extend_from_slice(&u16::try_from(c.len()).unwrap_or(u16::MAX).to_le_bytes());
            p.extend_from_slice(c);
        }
        self.cards = Vec::new();
        let bytes = frame(KIND_ALL_CARDS, &p);
        for rank in 0..self.size {
            self.send_to_rank(rank, &bytes, "allgather")?;
        }
        Ok(())
    }

    fn barriers(&mut self) -> Result<(), BootstrapError> {
        let n = self.size as usize;
        let mut done: u64 = 0;
        let mut entered = vec![false; n];
        let mut entered_count: u32 = 0;
        let mut barrier_start: Option<Instant> = None;
        let mut bye = vec![false; n];
        let mut bye_count: u32 = 0;
        let mut first_bye: Option<Instant> = None;
        while bye_count < self.size {
            let wake = match (barrier_start, first_bye) {
                (Some(b), _) => Some((b + self.timeout, "barrier")),
                (None, Some(f)) => Some((f + self.timeout, "goodbye")),
                (None, None) => None,
            };
            let ev = match wake {
                Some((at, phase)) => {
                    let now = Instant::now();
                    let got = if now < at {
                        self.rx.recv_timeout(at - now).ok()
                    } else {
                        None
                    };
                    match got {
                        Some(ev) => ev,
                        None if Instant::now() < at => continue,
                        None => {
                            let missing = if phase == "barrier" {
                                self.missing(|r| entered[r as usize])
                            } else {
                                self.missing(|r| bye[r as usize])
                            };
                            return Err(BootstrapError::Timeout {
                                phase,
                                missing,
                                waited: self.timeout,
                            });
                        }
                    }
                }
                None => match self.rx.recv() {
                    Ok(ev) => ev,
                    Err(_) => {
                        // Every reader has ended, yet not everyone said
                        // goodbye: the Gone events came first, so this is
                        // only reachable if a reader vanished silently.
                        let missing = self.missing(|r| bye[r as usize]);
                        return Err(BootstrapError::Disconnected {
                            rank: missing.first().copied().unwrap_or(0),
                            during: "after the allgather".into(),
                            reason: "every connection closed".into(),
                        });
                    }
                },
            };
            let during = |entered_count: u32| {
                if entered_count > 0 {
                    format!("in barrier {}", done + 1)
                } else if done == 0 {
                    "before the first barrier".to_owned()
                } else {
                    format!("after barrier {done}")
                }
            };
            match ev {
                Event::Hello { .. } => {}
                Event::Gone { conn, reason } => {
                    let Some(rank) = self.rank_of(conn) else {
                        continue;
                    };
                    if !bye[rank as usize] {
                        return Err(BootstrapError::Disconnected {
                            rank,
                            during: during(entered_count),
                            reason,
                        });
                    }
                }
                Event::Frame { conn, kind, body } => {
                    let Some(rank) = self.rank_of(conn) else {
                        continue;
                    };
                    let peer = self.peer_name(conn);
                    match kind {
                        KIND_BARRIER => {
                            let b = u64_payload(&body, "barrier number").map_err(|reason| {
                                BootstrapError::Protocol {
                                    peer: peer.clone(),
                                    reason,
                                }
                            })?;
                            if bye_count > 0 {
                                return Err(BootstrapError::Protocol {
                                    peer,
                                    reason: format!(
                                        "entered barrier {b} after ranks {} said goodbye",
                                        RankList(&self.missing(|r| !bye[r as usize]))
                                    ),
                                });
                            }
                            if b != done + 1 || entered[rank as usize] {
                                return Err(BootstrapError::Protocol {
                                    peer,
                                    reason: format!(
                                        "entered barrier {b}, expected barrier {}",
                                        done + 1
                                    ),
                                });
                            }
                            entered[rank as usize] = true;
                            entered_count += 1;
                            barrier_start.get_or_insert_with(Instant::now);
                            if entered_count == self.size {
                                let release = frame(KIND_RELEASE, &b.to_le_bytes());
                                for r in 0..self.size {
                                    self.send_to_rank(r, &release, "barrier")?;
                                }
                                done = b;
                                entered.iter_mut().for_each(|e| *e = false);
                                entered_count = 0;
                                barrier_start = None;
                            }
                        }
                        KIND_BYE => {
                            if entered_count > 0 {
                                return Err(BootstrapError::Protocol {
                                    peer,
                                    reason: format!("said goodbye during barrier {}", done + 1),
                                });
                            }
                            bye[rank as usize] = true;
                            bye_count += 1;
                            first_bye.get_or_insert_with(Instant::now);
                            self.drop_conn(conn);
                        }
                        other => {
                            return Err(BootstrapError::Protocol {
                                peer,
                                reason: format!("sent a {} frame (kind {other})", kind_name(other)),
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Tells every PE still connected why the job failed, lingers so they
    /// can read it, and returns the error.
    fn fail(&mut self, err: BootstrapError) -> Result<(), BootstrapError> {
        let bytes = error_frame(&err);
        let write_timeout = self.timeout.min(Duration::from_millis(500));
        for c in self.conns.values_mut() {
            let _ = write_frame(&mut c.stream, &bytes, write_timeout);
            let _ = c.stream.shutdown(Shutdown::Write);
        }
        let until = Instant::now() + LINGER.min(self.timeout);
        loop {
            let now = Instant::now();
            if now >= until || (self.conns.is_empty() && self.listener.is_none()) {
                break;
            }
            if let Some(listener) = &self.listener {
                while let Ok((mut s, _)) = listener.accept() {
                    let _ = s.set_nonblocking(false);
                    let _ = write_frame(&mut s, &bytes, Duration::from_millis(100));
                    let _ = s.shutdown(Shutdown::Write);
                }
            }
            match self.rx.recv_timeout(POLL.min(until - now)) {
                Ok(Event::Gone { conn, .. }) => self.drop_conn(conn),
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        Err(err)
    }

    fn close_all(&mut self) {
        self.listener = None;
        self.tx = None;
        for (_, c) in self.conns.drain() {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        // Every reader is unblocked by the shutdown (or by its hello
        // deadline), so these joins end.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------
// PE side
// ---------------------------------------------------------------------------

/// How much longer than its own timeout a PE waits for the root's answer,
/// so that the root's verdict (which names the missing ranks) comes first.
fn grace(timeout: Duration) -> Duration {
    (timeout / 2).min(Duration::from_secs(2))
}

/// One PE's connection to the root.
#[derive(Debug)]
pub struct Bootstrap {
    stream: TcpStream,
    root: SocketAddr,
    rank: u32,
    size: u32,
    job_id: u64,
    barriers: u64,
    timeout: Duration,
    broken: bool,
}

fn connect_retry(
    root: SocketAddr,
    deadline: Instant,
    timeout: Duration,
    rank: u32,
) -> Result<TcpStream, BootstrapError> {
    let mut backoff = Duration::from_millis(10);
    let mut attempt: u32 = 0;
    loop {
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        let err = match TcpStream::connect_timeout(
            &root,
            left.clamp(Duration::from_millis(1), Duration::from_secs(1)),
        ) {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(BootstrapError::Connect {
                root,
                waited: timeout,
                source: err,
            });
        }
        // Jitter in [1/2, 1) of the backoff, so that many PEs do not retry
        // in lockstep.
        let h = fnv1a(&[
            &rank.to_le_bytes(),
            &attempt.to_le_bytes(),
            &std::process::id().to_le_bytes(),
        ]);
        let frac = 0.5 + (h % 1000) as f64 / 2000.0;
        thread::sleep(backoff.mul_f64(frac).min(left));
        backoff = (backoff * 2).min(Duration::from_millis(250));
        attempt = attempt.wrapping_add(1);
    }
}

impl Bootstrap {
    /// Connects to the root at `root` (retrying until `timeout`: the root may
    /// not be up yet), posts `my_card`, and returns the connection and every
    /// PE's card, indexed by rank.
    ///
    /// The root's answer is awaited for `timeout` plus a grace (half of it,
    /// at most 2 s), so that a root failing on its own deadline can say
    /// which ranks it missed first.
    ///
    /// # Errors
    /// [`BootstrapError::InvalidArgument`] (size 0 or above [`MAX_PES`],
    /// rank not below size, a card of another job or rank, a zero timeout),
    /// [`BootstrapError::BadCard`] (our card does not encode, or one received
    /// does not decode), [`BootstrapError::Connect`],
    /// [`BootstrapError::RootReported`] (the root failed the job and said
    /// why, e.g. a missing or duplicate rank, or refused us for a wrong job
    /// id), [`BootstrapError::Timeout`], [`BootstrapError::RootClosed`],
    /// [`BootstrapError::SendFrame`], [`BootstrapError::ReceiveFrame`],
    /// [`BootstrapError::JobIdMismatch`],
    /// [`BootstrapError::ClassVersionMismatch`] or
    /// [`BootstrapError::Protocol`] for an all-cards frame that does not
    /// add up.
    pub fn join(
        root: SocketAddr,
        rank: u32,
        size: u32,
        job_id: u64,
        my_card: Card,
        timeout: Duration,
    ) -> Result<(Bootstrap, Vec<Card>), BootstrapError> {
        check_size(size)?;
        check_timeout(timeout)?;
        if rank >= size {
            return Err(BootstrapError::InvalidArgument {
                reason: format!("rank {rank} is not below the job size {size}"),
            });
        }
        if my_card.rank != rank || my_card.job_id != job_id {
            return Err(BootstrapError::InvalidArgument {
                reason: format!(
                    "the card is for job {:016x} rank {}, joining job {job_id:016x} as rank {rank}",
                    my_card.job_id, my_card.rank
                ),
            });
        }
        let card = my_card.encode().map_err(|source| BootstrapError::BadCard {
            from: "our own card".into(),
            source,
        })?;
        let deadline = Instant::now() + timeout;
        let stream = connect_retry(root, deadline, timeout, rank)?;
        let _ = stream.set_nodelay(true);
        let mut boot = Bootstrap {
            stream,
            root,
            rank,
            size,
            job_id,
            barriers: 0,
            timeout,
            broken: false,
        };
        let hello = Hello {
            job_id,
            rank,
            size,
            card,
        }
        .encode();
        let cards = boot
            .exchange(
                &hello,
                "allgather",
                deadline + grace(timeout),
                all_cards_cap(size),
            )
            .and_then(|(kind, body)| match kind {
                KIND_ALL_CARDS => boot.check_cards(&body, my_card.class_encoding_version),
                other => Err(boot.unexpected(other, "allgather")),
            });
        match cards {
            Ok(cards) => Ok((boot, cards)),
            Err(e) => Err(e),
        }
    }

    /// This PE's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The job size.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job id.
    pub fn job_id(&self) -> u64 {
        self.job_id
    }

    /// The root's address.
    pub fn root(&self) -> SocketAddr {
        self.root
    }

    /// Barriers completed so far.
    pub fn barriers_done(&self) -> u64 {
        self.barriers
    }

    fn unexpected(&self, kind: u8, phase: &str) -> BootstrapError {
        BootstrapError::Protocol {
            peer: format!("the root at {}", self.root),
            reason: format!(
                "sent a {} frame (kind {kind}) in the {phase}",
                kind_name(kind)
            ),
        }
    }

    /// Sends `bytes`, then reads the answer by `deadline`. An error frame
    /// becomes [`BootstrapError::RootReported`]; a failed send still looks
    /// for the root's verdict before giving up.
    fn exchange(
        &mut self,
        bytes: &[u8],
        phase: &'static str,
        deadline: Instant,
        cap: usize,
    ) -> Result<(u8, Vec<u8>), BootstrapError> {
        let result = self.exchange_inner(bytes, phase, deadline, cap);
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    fn exchange_inner(
        &mut self,
        bytes: &[u8],
        phase: &'static str,
        deadline: Instant,
        cap: usize,
    ) -> Result<(u8, Vec<u8>), BootstrapError> {
        if let Err(source) = write_frame(&mut self.stream, bytes, self.timeout) {
            // The root may have closed after telling us why.
            let soon = Instant::now() + Duration::from_millis(200);
            if let Ok((KIND_ERROR, body)) = read_frame(&mut self.stream, Some(soon), MAX_FRAME_LEN)
            {
                return Err(self.root_error(&body));
            }
            return Err(BootstrapError::SendFrame {
                phase,
                peer: format!("the root at {}", self.root),
                source,
            });
        }
        match read_frame(&mut self.stream, Some(deadline), cap) {
            Ok((KIND_ERROR, body)) => Err(self.root_error(&body)),
            Ok(f) => Ok(f),
            Err(ReadError::Timeout) => Err(BootstrapError::Timeout {
                phase,
                missing: Vec::new(),
                waited: self.timeout,
            }),
            Err(ReadError::Eof) => Err(BootstrapError::RootClosed {
                phase,
                root: self.root,
            }),
            Err(ReadError::Io(source)) => Err(BootstrapError::ReceiveFrame {
                phase,
                peer: format!("the root at {}", self.root),
                source,
            }),
            Err(e) => Err(BootstrapError::Protocol {
                peer: format!("the root at {}", self.root),
                reason: e.to_string(),
            }),
        }
    }

    fn root_error(&self, body: &[u8]) -> BootstrapError {
        decode_error_frame(body).unwrap_or_else(|reason| BootstrapError::Protocol {
            peer: format!("the root at {}", self.root),
            reason,
        })
    }

    fn check_cards(&self, body: &[u8], my_class: u8) -> Result<Vec<Card>, BootstrapError> {
        let proto = |reason: String| BootstrapError::Protocol {
            peer: format!("the root at {}", self.root),
            reason,
        };
        let mut c = Cursor::new(body);
        let count = c.u32("card count").map_err(|e| proto(e.to_string()))?;
        if count != self.size {
            return Err(proto(format!(
                "sent {count} cards for a job of {} PEs",
                self.size
            )));
        }
        let mut cards = Vec::with_capacity(count as usize);
        for rank in 0..count {
            let len = usize::from(c.u16("card length").map_err(|e| proto(e.to_string()))?);
            let raw = c.take(len, "card").map_err(|e| proto(e.to_string()))?;
            let card = Card::decode(raw).map_err(|source| BootstrapError::BadCard {
                from: format!("rank {rank} (relayed by the root)"),
                source,
            })?;
            if card.job_id != self.job_id {
                return Err(BootstrapError::JobIdMismatch {
                    what: format!("the card of rank {rank}"),
                    expected: self.job_id,
                    found: card.job_id,
                });
            }
            if card.rank != rank {
                return Err(proto(format!(
                    "card {rank} is the card of rank {}",
                    card.rank
                )));
            }
            if card.class_encoding_version != my_class {
                return Err(BootstrapError::ClassVersionMismatch {
                    rank,
                    found: card.class_encoding_version,
                    reference: self.rank,
                    expected: my_class,
                });
            }
            cards.push(card);
        }
        c.end().map_err(|e| proto(e.to_string()))?;
        Ok(cards)
    }

    /// Waits until every PE has entered this barrier (the n-th of the job).
    /// The root fails a barrier `timeout` after its first PE entered it; this
    /// PE waits `timeout` plus a grace for the root's answer.
    ///
    /// # Errors
    /// [`BootstrapError::RootReported`] when the root failed the job (it
    /// names the ranks: those that never entered, or one that disconnected,
    /// which is reported as soon as the root sees it);
    /// [`BootstrapError::Timeout`] when the root said nothing in time;
    /// [`BootstrapError::RootClosed`], [`BootstrapError::SendFrame`],
    /// [`BootstrapError::ReceiveFrame`], [`BootstrapError::Protocol`];
    /// [`BootstrapError::Unusable`] after an earlier error;
    /// [`BootstrapError::InvalidArgument`] for a zero timeout.
    pub fn barrier(&mut self, timeout: Duration) -> Result<(), BootstrapError> {
        check_timeout(timeout)?;
        if self.broken {
            return Err(BootstrapError::Unusable);
        }
        let n = self.barriers + 1;
        let bytes = frame(KIND_BARRIER, &n.to_le_bytes());
        let saved = self.timeout;
        self.timeout = timeout;
        let deadline = Instant::now() + timeout + grace(timeout);
        let answer = self.exchange(&bytes, "barrier", deadline, MAX_FRAME_LEN);
        self.timeout = saved;
        let (kind, body) = answer?;
        let result = match kind {
            KIND_RELEASE => match u64_payload(&body, "release number") {
                Ok(m) if m == n => Ok(()),
                Ok(m) => Err(BootstrapError::Protocol {
                    peer: format!("the root at {}", self.root),
                    reason: format!("released barrier {m}, expected barrier {n}"),
                }),
                Err(reason) => Err(BootstrapError::Protocol {
                    peer: format!("the root at {}", self.root),
                    reason,
                }),
            },
            other => Err(self.unexpected(other, "barrier")),
        };
        match result {
            Ok(()) => {
                self.barriers = n;
                Ok(())
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// Says goodbye and closes the connection. Collective: once one PE has
    /// said goodbye, the root gives the others its timeout to do the same.
    ///
    /// # Errors
    /// [`BootstrapError::RootReported`] when the root had failed the job;
    /// [`BootstrapError::SendFrame`], [`BootstrapError::Timeout`] (the root
    /// did not close within the join timeout), [`BootstrapError::Protocol`];
    /// [`BootstrapError::Unusable`] after an earlier error.
    pub fn finish(mut self) -> Result<(), BootstrapError> {
        if self.broken {
            return Err(BootstrapError::Unusable);
        }
        let root = format!("the root at {}", self.root);
        if let Err(source) = write_frame(&mut self.stream, &frame(KIND_BYE, &[]), self.timeout) {
            let soon = Instant::now() + Duration::from_millis(200);
            if let Ok((KIND_ERROR, body)) = read_frame(&mut self.stream, Some(soon), MAX_FRAME_LEN)
            {
                return Err(self.root_error(&body));
            }
            return Err(BootstrapError::SendFrame {
                phase: "goodbye",
                peer: root,
                source,
            });
        }
        let _ = self.stream.shutdown(Shutdown::Write);
        // The root closes on our goodbye; an error frame there means it had
        // failed before reading it.
        match read_frame(
            &mut self.stream,
            Some(Instant::now() + self.timeout),
            MAX_FRAME_LEN,
        ) {
            Err(ReadError::Eof) => Ok(()),
            // A reset after the goodbye was sent: the root has closed.
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => Ok(()),
            Err(ReadError::Io(source)) => Err(BootstrapError::ReceiveFrame {
                phase: "goodbye",
                peer: root,
                source,
            }),
            Err(ReadError::Timeout) => Err(BootstrapError::Timeout {
                phase: "goodbye",
                missing: Vec::new(),
                waited: self.timeout,
            }),
            Err(e) => Err(BootstrapError::Protocol {
                peer: root,
                reason: e.to_string(),
            }),
            Ok((KIND_ERROR, body)) => Err(self.root_error(&body)),
            Ok((other, _)) => Err(self.unexpected(other, "goodbye")),
        }
    }
}

/// What [`rendezvous`] returns.
#[derive(Debug)]
pub struct Rendezvous {
    /// This PE's connection to the root, for barriers and the goodbye.
    pub bootstrap: Bootstrap,
    /// Every PE's card, indexed by rank.
    pub cards: Vec<Card>,
    /// The root's thread when this PE hosts it: join it after
    /// [`Bootstrap::finish`] (it ends when every PE has said goodbye, or
    /// fails naming who did not).
    pub root: Option<JoinHandle<Result<(), BootstrapError>>>,
}

/// Joins the job's rendezvous at `root`. With `host_root` (normally
/// [`RankInfo::hosts_root`]: `SWITCHYARD_ROOT_HOST=rank0`, the default,
/// under srun or mpirun) rank 0 first binds a [`RootServer`] at `root` itself
/// and serves it on a thread; every other PE (and every PE when the launcher
/// hosts the root) only connects, retrying until `timeout`.
///
/// # Errors
/// [`BootstrapError::Bind`] or [`BootstrapError::Spawn`] when rank 0 cannot
/// host the root; otherwise as [`Bootstrap::join`]. When joining fails, the
/// hosted root's thread is joined first (it fails within its own timeout).
pub fn rendezvous(
    info: &RankInfo,
    root: SocketAddr,
    card: Card,
    timeout: Duration,
    host_root: bool,
) -> Result<Rendezvous, BootstrapError> {
    let (addr, handle) = if host_root && info.rank == 0 {
        let server = RootServer::bind(root, info.job_id, info.size, timeout)?;
        let addr = server.local_addr();
        (addr, Some(server.spawn()?))
    } else {
        (root, None)
    };
    match Bootstrap::join(addr, info.rank, info.size, info.job_id, card, timeout) {
        Ok((bootstrap, cards)) => Ok(Rendezvous {
            bootstrap,
            cards,
            root: handle,
        }),
        Err(e) => {
            if let Some(h) = handle {
                let _ = h.join();
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod test {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn info(vars: &[(&str, &str)]) -> Result<RankInfo, BootstrapError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        RankInfo::from_lookup(|k| map.get(k).cloned())
    }

    fn err(vars: &[(&str, &str)]) -> String {
        match info(vars) {
            Ok(i) => panic!("expected an error for {vars:?}, got {i:?}"),
            Err(e) => e.to_string(),
        }
    }

    const JOB: (&str, &str) = ("SWITCHYARD_JOB_ID", "00000000deadbeef");

    #[test]
    fn launcher_env() {
        let i = info(&[
            ("SWITCHYARD_RANK", "2"),
            ("SWITCHYARD_SIZE", "4"),
            ("SWITCHYARD_LOCAL_RANK", "0"),
            ("SWITCHYARD_LOCAL_SIZE", "2"),
            JOB,
            ("SWITCHYARD_ROOT", "127.0.0.1:4000"),
            ("SWITCHYARD_ROOT_HOST", "launcher"),
        ])
        .unwrap();
        assert_eq!(i.source, EnvSource::Launcher);
        assert_eq!((i.rank, i.size), (2, 4));
        assert_eq!((i.local_rank, i.local_size), (Some(0), Some(2)));
        assert_eq!(i.job_id, 0xdead_beef);
        assert_eq!(i.job_id_source, JobIdSource::Launcher);
        assert_eq!(i.job_id_hex(), "00000000deadbeef");
        assert_eq!(i.root.as_deref(), Some("127.0.0.1:4000"));
        assert_eq!(i.root_host, RootHost::Launcher);
        assert!(!i.hosts_root());
        assert_eq!(i.root_addr().unwrap(), "127.0.0.1:4000".parse().unwrap());
    }

    #[test]
    fn open_mpi_env() {
        let i = info(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("OMPI_MCA_ess_base_jobid", "1234"),
            ("SLURM_JOB_ID", "99"),
        ])
        .unwrap();
        assert_eq!(i.source, EnvSource::OpenMpi);
        assert_eq!(
            (i.rank, i.size, i.local_rank, i.local_size),
            (5, 8, Some(1), Some(4))
        );
        // Open MPI's own job id wins over the allocation's under mpirun.
        assert_eq!(i.job_id_source, JobIdSource::OpenMpi);
        assert_eq!(i.job_id, fnv1a(&[b"ompi", b"1234"]));
        assert_eq!(i.root_host, RootHost::Rank0);
    }

    #[test]
    fn slurm_env() {
        let i = info(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "2"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "0"),
            ("OMPI_MCA_ess_base_jobid", "7"),
            ("SWITCHYARD_ROOT", "node01:5000"),
        ])
        .unwrap();
        assert_eq!(i.source, EnvSource::Slurm);
        assert_eq!(
            (i.rank, i.size, i.local_rank, i.local_size),
            (3, 4, Some(1), Some(2))
        );
        assert_eq!(i.job_id_source, JobIdSource::Slurm);
        assert_eq!(i.job_id, fnv1a(&[b"slurm", b"4242", b"0"]));
        // Another step of the same job is another bootstrap job.
        let other = info(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "1"),
        ])
        .unwrap();
        assert_ne!(other.job_id, i.job_id);
        assert_eq!((other.local_rank, other.local_size), (None, None));
        // Best effort: the local id alone.
        let lone = info(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_LOCALID", "0"),
        ])
        .unwrap();
        assert_eq!((lone.local_rank, lone.local_size), (Some(0), None));
    }

    #[test]
    fn pmi_env_and_root_job_id() {
        let i = info(&[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("SWITCHYARD_ROOT", "[::1]:7000"),
        ])
        .unwrap();
        assert_eq!(i.source, EnvSource::Pmi);
        assert_eq!((i.rank, i.size, i.local_rank), (1, 2, None));
        assert_eq!(i.job_id_source, JobIdSource::Root);
        assert_eq!(i.job_id, fnv1a(&[b"root", b"[::1]:7000"]));
        assert_eq!(i.root_addr().unwrap(), "[::1]:7000".parse().unwrap());
    }

    #[test]
    fn singleton_env() {
        let i = info(&[("SLURM_NTASKS", "4")]).unwrap();
        assert_eq!(i.source, EnvSource::Singleton);
        assert_eq!((i.rank, i.size), (0, 1));
        assert_eq!(i.job_id_source, JobIdSource::Process);
        assert!(i.hosts_root());
        assert!(matches!(i.root_addr(), Err(BootstrapError::NoRoot)));
    }

    #[test]
    fn priority_and_whole_sources() {
        let all = [
            ("SWITCHYARD_RANK", "0"),
            ("SWITCHYARD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "3"),
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
            ("PMI_RANK", "3"),
            ("PMI_SIZE", "5"),
            JOB,
        ];
        let sizes = [
            (EnvSource::Launcher, 2),
            (EnvSource::OpenMpi, 3),
            (EnvSource::Slurm, 4),
            (EnvSource::Pmi, 5),
        ];
        for skip in 0..4 {
            let i = info(&all[skip * 2..]).unwrap();
            assert_eq!((i.source, i.size), sizes[skip]);
        }
        // Garbage in a lower-priority source is never read.
        let i = info(&[
            ("SWITCHYARD_RANK", "0"),
            ("SWITCHYARD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "x"),
            ("SLURM_PROCID", "-1"),
            JOB,
        ])
        .unwrap();
        assert_eq!(i.source, EnvSource::Launcher);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("SWITCHYARD_RANK", "7"), ("SWITCHYARD_SIZE", "4"), JOB],
                "SWITCHYARD_RANK=7 is not below SWITCHYARD_SIZE=4",
            ),
            (
                &[("SWITCHYARD_RANK", "x1"), ("SWITCHYARD_SIZE", "4"), JOB],
                "SWITCHYARD_RANK=\"x1\" is not a decimal integer below 2^32",
            ),
            (
                &[
                    ("SWITCHYARD_RANK", "0"),
                    ("SWITCHYARD_SIZE", "4294967296"),
                    JOB,
                ],
                "SWITCHYARD_SIZE=\"4294967296\" is not a decimal integer below 2^32",
            ),
            (
                &[("SWITCHYARD_RANK", "0"), ("SWITCHYARD_SIZE", " 4"), JOB],
                "SWITCHYARD_SIZE=\" 4\" is not a decimal integer below 2^32",
            ),
            (
                &[("SWITCHYARD_RANK", "0"), ("SWITCHYARD_SIZE", ""), JOB],
                "SWITCHYARD_SIZE=\"\" is not a decimal integer below 2^32",
            ),
            (
                &[("SWITCHYARD_RANK", "0"), ("SWITCHYARD_SIZE", "0"), JOB],
                "SWITCHYARD_SIZE=0: expected a size of at least 1",
            ),
            (
                &[("SWITCHYARD_RANK", "3")],
                "SWITCHYARD_RANK=\"3\" is set but SWITCHYARD_SIZE is not (expected both or neither)",
            ),
            (
                &[("SWITCHYARD_SIZE", "3")],
                "SWITCHYARD_SIZE=\"3\" is set but SWITCHYARD_RANK is not (expected both or neither)",
            ),
            (
                &[
                    ("SWITCHYARD_RANK", "0"),
                    ("SWITCHYARD_SIZE", "4"),
                    ("SWITCHYARD_LOCAL_RANK", "0"),
                    JOB,
                ],
                "SWITCHYARD_LOCAL_RANK=\"0\" is set but SWITCHYARD_LOCAL_SIZE is not (expected both or neither)",
            ),
            (
                &[
                    ("SWITCHYARD_RANK", "0"),
                    ("SWITCHYARD_SIZE", "4"),
                    ("SWITCHYARD_LOCAL_RANK", "2"),
                    ("SWITCHYARD_LOCAL_SIZE", "2"),
                    JOB,
                ],
                "SWITCHYARD_LOCAL_RANK=2 is not below SWITCHYARD_LOCAL_SIZE=2",
            ),
            (
                &[
                    ("SWITCHYARD_RANK", "0"),
                    ("SWITCHYARD_SIZE", "4"),
                    ("SWITCHYARD_LOCAL_RANK", "0"),
                    ("SWITCHYARD_LOCAL_SIZE", "8"),
                    JOB,
                ],
                "SWITCHYARD_LOCAL_SIZE=8 is above SWITCHYARD_SIZE=4",
            ),
            (
                &[
                    ("OMPI_COMM_WORLD_RANK", "4"),
                    ("OMPI_COMM_WORLD_SIZE", "4"),
                    JOB,
                ],
                "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4",
            ),
            (
                &[("OMPI_COMM_WORLD_RANK", "1")],
                "OMPI_COMM_WORLD_RANK=\"1\" is set but OMPI_COMM_WORLD_SIZE is not (expected both or neither)",
            ),
            (
                &[("SLURM_PROCID", "0")],
                "SLURM_PROCID=\"0\" is set but SLURM_NTASKS is not (expected both or neither)",
            ),
            (
                &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "0")],
                "SLURM_NTASKS=0: expected a size of at least 1",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_LOCALID", "a"),
                    JOB,
                ],
                "SLURM_LOCALID=\"a\" is not a decimal integer below 2^32",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "4"),
                    ("SLURM_LOCALID", "3"),
                    ("SLURM_NTASKS_PER_NODE", "2"),
                    JOB,
                ],
                "SLURM_LOCALID=3 is not below SLURM_NTASKS_PER_NODE=2",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "4"),
                    ("SLURM_NTASKS_PER_NODE", "8"),
                    JOB,
                ],
                "SLURM_NTASKS_PER_NODE=8 is above SLURM_NTASKS=4",
            ),
            (
                &[("PMI_RANK", "9"), ("PMI_SIZE", "2"), JOB],
                "PMI_RANK=9 is not below PMI_SIZE=2",
            ),
            (
                &[("PMI_SIZE", "2")],
                "PMI_SIZE=\"2\" is set but PMI_RANK is not (expected both or neither)",
            ),
            (
                &[("SWITCHYARD_JOB_ID", "xyz")],
                "SWITCHYARD_JOB_ID=\"xyz\" is not 16 hex digits",
            ),
            (
                &[("SWITCHYARD_JOB_ID", "+00000000000000f")],
                "SWITCHYARD_JOB_ID=\"+00000000000000f\" is not 16 hex digits",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_JOB_ID", ""),
                ],
                "SLURM_JOB_ID=\"\" is not a non-empty job id",
            ),
            (
                &[("SWITCHYARD_ROOT", "nohost")],
                "SWITCHYARD_ROOT=\"nohost\" is not host:port (port 1-65535, an IPv6 address in brackets)",
            ),
            (
                &[("SWITCHYARD_ROOT", "::1:80")],
                "SWITCHYARD_ROOT=\"::1:80\" is not host:port (port 1-65535, an IPv6 address in brackets)",
            ),
            (
                &[("SWITCHYARD_ROOT", "h:0")],
                "SWITCHYARD_ROOT=\"h:0\" is not host:port (port 1-65535, an IPv6 address in brackets)",
            ),
            (
                &[("SWITCHYARD_ROOT", "h:65536")],
                "SWITCHYARD_ROOT=\"h:65536\" is not host:port (port 1-65535, an IPv6 address in brackets)",
            ),
            (
                &[("SWITCHYARD_ROOT_HOST", "rank1")],
                "SWITCHYARD_ROOT_HOST=\"rank1\" is not `launcher` or `rank0`",
            ),
        ];
        for (vars, want) in cases {
            assert_eq!(err(vars), *want, "for {vars:?}");
        }
        assert!(
            err(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")])
                .starts_with("no job id for a job of 2 PEs"),
        );
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_value_is_an_error() {
        use std::os::unix::ffi::OsStringExt;
        let e = RankInfo::from_os_lookup(|k| {
            (k == "SWITCHYARD_RANK").then(|| OsString::from_vec(vec![b'1', 0xff]))
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "SWITCHYARD_RANK=\"1\u{fffd}\" is not valid UTF-8"
        );
    }

    fn full_card() -> Card {
        Card {
            job_id: 0x0123_4567_89ab_cdef,
            rank: 7,
            node_id: 0xfeed,
            switch_id: 3,
            tree_id: 1,
            cookie: *b"0123456789abcdef",
            class_encoding_version: CLASS_ENCODING_VERSION,
            pid: 4242,
            shm: Some("/switchyard-0123456789abcdef-7".into()),
            tcp: vec![
                SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 9000, 5, 2)),
                "10.101.0.1:9001".parse().unwrap(),
            ],
            verbs: Some((0..=255u8).collect()),
        }
    }

    #[test]
    fn card_round_trip() {
        let plain = Card::new(1, 0, 2);
        assert_eq!(Card::decode(&plain.encode().unwrap()).unwrap(), plain);
        let full = full_card();
        let bytes = full.encode().unwrap();
        assert_eq!(Card::decode(&bytes).unwrap(), full);
        let v4 = Card {
            tcp: vec!["10.1.2.3:4".parse().unwrap()],
            ..plain.clone()
        };
        assert_eq!(Card::decode(&v4.encode().unwrap()).unwrap(), v4);
        let v6 = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 1, 2, 3));
        let max = Card {
            shm: Some("s".repeat(255)),
            tcp: vec![v6; MAX_TCP_RAILS],
            verbs: Some(vec![9; 256]),
            ..full
        };
        let bytes = max.encode().unwrap();
        assert_eq!(bytes.len(), Card::MAX_ENCODED_LEN);
        assert_eq!(Card::decode(&bytes).unwrap(), max);
    }

    #[test]
    fn card_malformations() {
        let good = full_card().encode().unwrap();
        let flags_at = 6;
        let shm_len_at = CARD_FIXED_LEN;
        assert_eq!(
            Card::decode(&[]),
            Err(CardError::Truncated {
                field: "magic",
                needed: 4,
                available: 0
            })
        );
        assert!(matches!(
            Card::decode(&good[..good.len() - 1]),
            Err(CardError::Truncated { field: "verbs", .. })
        ));
        let mut b = good.clone();
        b[0] = b'X';
        assert!(matches!(Card::decode(&b), Err(CardError::BadMagic { .. })));
        let mut b = good.clone();
        b[4] = 3;
        assert_eq!(
            Card::decode(&b),
            Err(CardError::UnsupportedVersion {
                found: 3,
                supported: CARD_FORMAT_VERSION
            })
        );
        let mut b = good.clone();
        b[flags_at] |= 0x80;
        assert!(matches!(
            Card::decode(&b),
            Err(CardError::UnknownFlags { .. })
        ));
        let mut b = good.clone();
        b.push(0);
        assert_eq!(Card::decode(&b), Err(CardError::TrailingBytes { extra: 1 }));
        let mut b = good.clone();
        b[shm_len_at + 1] = 0xff;
        assert!(matches!(
            Card::decode(&b),
            Err(CardError::BadUtf8 {
                field: "shm name",
                ..
            })
        ));
        let mut b = good.clone();
        b[shm_len_at + 1] = 0;
        assert!(matches!(Card::decode(&b), Err(CardError::BadName { .. })));
        // The tcp rail count follows the shm name, then the family byte.
        let name_len = usize::from(good[shm_len_at]);
        let mut b = good.clone();
        b[shm_len_at + 1 + name_len] = 5;
        assert!(matches!(
            Card::decode(&b),
            Err(CardError::Overlong {
                field: "tcp rails",
                ..
            })
        ));
        let mut b = good.clone();
        b[shm_len_at + 2 + name_len] = 5;
        assert_eq!(
            Card::decode(&b),
            Err(CardError::BadAddressFamily { found: 5 })
        );
        // Verbs length above 256.
        let plain = Card {
            verbs: Some(vec![1]),
            ..Card::new(1, 2, 3)
        };
        let mut b = plain.encode().unwrap();
        let at = CARD_FIXED_LEN;
        b[at..at + 2].copy_from_slice(&257u16.to_le_bytes());
        assert!(matches!(
            Card::decode(&b),
            Err(CardError::Overlong {
                field: "verbs",
                len: 257,
                ..
            })
        ));
        // Encoding refuses what decoding would refuse.
        let long = Card {
            shm: Some("x".repeat(256)),
            ..Card::new(1, 2, 3)
        };
        assert!(matches!(
            long.encode(),
            Err(CardError::Overlong {
                field: "shm name",
                ..
            })
        ));
        let empty = Card {
            shm: Some(String::new()),
            ..Card::new(1, 2, 3)
        };
        assert!(matches!(empty.encode(), Err(CardError::BadName { .. })));
        let big = Card {
            verbs: Some(vec![0; 257]),
            ..Card::new(1, 2, 3)
        };
        assert!(matches!(
            big.encode(),
            Err(CardError::Overlong { field: "verbs", .. })
        ));
    }

    #[test]
    fn node_id() {
        assert_eq!(node_id_from("a", "b"), node_id_from("a\n", "b\n"));
        assert_ne!(node_id_from("ab", ""), node_id_from("a", "b"));
        let here = node_id_here().unwrap();
        assert_eq!(here, node_id_here().unwrap());
    }

    #[test]
    fn timeout_display() {
        let e = BootstrapError::Timeout {
            phase: "allgather",
            missing: vec![3],
            waited: Duration::from_secs(5),
        };
        assert_eq!(
            e.to_string(),
            "bootstrap allgather timed out after 5s: ranks 3 never arrived"
        );
        let e = BootstrapError::Timeout {
            phase: "barrier",
            missing: vec![0, 1, 2, 5, 7, 8],
            waited: Duration::from_millis(1500),
        };
        assert_eq!(
            e.to_string(),
            "bootstrap barrier timed out after 1.5s: ranks 0-2, 5, 7-8 never arrived"
        );
        let e = BootstrapError::Timeout {
            phase: "goodbye",
            missing: (0..100).step_by(2).collect(),
            waited: Duration::from_secs(1),
        };
        assert!(
            e.to_string()
                .ends_with(", … (50 ranks in all) never said goodbye")
        );
        let e = BootstrapError::Timeout {
            phase: "barrier",
            missing: vec![],
            waited: Duration::from_secs(1),
        };
        assert_eq!(
            e.to_string(),
            "bootstrap barrier timed out after 1s: no word from the root"
        );
    }

    #[test]
    fn error_frame_round_trip() {
        let e = BootstrapError::Disconnected {
            rank: 2,
            during: "in barrier 1".into(),
            reason: "connection closed".into(),
        };
        let bytes = error_frame(&e);
        let body = &bytes[5..];
        match decode_error_frame(body).unwrap() {
            BootstrapError::RootReported { ranks, message } => {
                assert_eq!(ranks, vec![2]);
                assert_eq!(message, e.to_string());
            }
            other => panic!("{other:?}"),
        }
        assert!(decode_error_frame(&body[..body.len() - 1]).is_err());
        assert!(decode_error_frame(&u32::MAX.to_le_bytes()).is_err());
    }

    #[test]
    fn hello_round_trip_and_refusals() {
        let h = Hello {
            job_id: 9,
            rank: 1,
            size: 2,
            card: Card::new(9, 1, 0).encode().unwrap(),
        };
        let bytes = h.encode();
        let back = Hello::decode(&bytes[5..]).unwrap();
        assert_eq!(
            (back.job_id, back.rank, back.size, back.card),
            (9, 1, 2, h.card)
        );
        assert!(
            Hello::decode(b"GET / HTTP/1.1")
                .unwrap_err()
                .contains("not a switchyard")
        );
        let mut v2 = bytes[5..].to_vec();
        v2[4] = 2;
        assert!(Hello::decode(&v2).unwrap_err().contains("version 2"));
        assert!(
            Hello::decode(&bytes[5..bytes.len() - 1])
                .unwrap_err()
                .contains("malformed")
        );
    }

    fn arb_card() -> impl Strategy<Value = Card> {
        let addr = prop_oneof![
            (any::<[u8; 4]>(), any::<u16>())
                .prop_map(|(ip, p)| SocketAddr::V4(SocketAddrV4::new(ip.into(), p))),
            (any::<[u8; 16]>(), any::<u16>(), any::<u32>(), any::<u32>())
                .prop_map(|(ip, p, f, s)| SocketAddr::V6(SocketAddrV6::new(ip.into(), p, f, s))),
        ];
        let tcp = proptest::collection::vec(addr, 0..=MAX_TCP_RAILS);
        (
            (
                any::<u64>(),
                any::<u32>(),
                any::<u64>(),
                any::<u32>(),
                any::<u8>(),
                any::<u32>(),
            ),
            (any::<u32>(), any::<[u8; 16]>()),
            proptest::option::of("[a-zA-Z0-9/_.é-]{1,60}"),
            tcp,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..=256)),
        )
            .prop_map(
                |(
                    (job_id, rank, node_id, switch_id, cv, pid),
                    (tree_id, cookie),
                    shm,
                    tcp,
                    verbs,
                )| Card {
                    job_id,
                    rank,
                    node_id,
                    switch_id,
                    tree_id,
                    cookie,
                    class_encoding_version: cv,
                    pid,
                    shm,
                    tcp,
                    verbs,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn decode_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            let _ = Card::decode(&bytes);
            let _ = Hello::decode(&bytes);
            let _ = decode_error_frame(&bytes);
        }

        #[test]
        fn card_round_trips(card in arb_card()) {
            let bytes = card.encode().unwrap();
            prop_assert!(bytes.len() <= Card::MAX_ENCODED_LEN);
            prop_assert_eq!(Card::decode(&bytes).unwrap(), card);
        }

        #[test]
        fn mutated_cards_never_panic(
            card in arb_card(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
            cut in any::<usize>(),
        ) {
            let mut bytes = card.encode().unwrap();
            for (at, b) in edits {
                let len = bytes.len();
                bytes[at % len] = b;
            }
            let keep = cut % (bytes.len() + 1);
            let _ = Card::decode(&bytes);
            let _ = Card::decode(&bytes[..keep]);
        }

        #[test]
        fn env_never_panics(
            values in proptest::collection::vec(proptest::option::of("[0-9a-fx: \\[\\]]{0,20}"), 20),
        ) {
            let names = [
                vars::RANK, vars::SIZE, vars::LOCAL_RANK, vars::LOCAL_SIZE, vars::JOB_ID,
                vars::ROOT, vars::ROOT_HOST, vars::OMPI_RANK, vars::OMPI_SIZE,
                vars::OMPI_LOCAL_RANK, vars::OMPI_LOCAL_SIZE, vars::OMPI_JOB_ID,
                vars::SLURM_RANK, vars::SLURM_SIZE, vars::SLURM_LOCAL_RANK,
                vars::SLURM_LOCAL_SIZE, vars::SLURM_JOB_ID, vars::SLURM_STEP_ID,
                vars::PMI_RANK, vars::PMI_SIZE,
            ];
            let lookup = |k: &str| names.iter().position(|n| *n == k).and_then(|i| values[i].clone());
            if let Ok(i) = RankInfo::from_lookup(lookup) {
                prop_assert!(i.rank < i.size);
                if let (Some(r), Some(s)) = (i.local_rank, i.local_size) {
                    prop_assert!(r < s && s <= i.size);
                }
            }
        }
    }
}
