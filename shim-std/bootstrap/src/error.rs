//! [`BootstrapError`]: why the bootstrap failed, each variant naming the step
//! and the context to fix it; and the compact display of rank lists its
//! messages use.

use std::{fmt, io, net::SocketAddr, time::Duration};

use crate::card::CardError;

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
    /// A job secret that cannot be used (its value is never shown).
    #[error("bad job secret from {from}: {reason}")]
    SecretInvalid {
        /// Where it came from: the variable, or the file (`SWITCHYARD_JOB_SECRET_FILE=path`).
        from: String,
        /// What is wrong.
        reason: String,
    },
    /// A job of several PEs whose root is reachable from other hosts, with
    /// no secret to authenticate its PEs.
    #[error(
        "no job secret for a job of {size} PEs whose bootstrap root {root} is not on a loopback \
         address: start it with `switchyard run`, or give every PE the same secret in a private \
         file (32 to 128 hex digits, mode 0600) named by SWITCHYARD_JOB_SECRET_FILE"
    )]
    NoSecret {
        /// The job size.
        size: u32,
        /// The root's address.
        root: SocketAddr,
    },
    /// The root's answer did not prove the job's secret: not this job's
    /// root, or another secret.
    #[error(
        "bootstrap: the root at {root} did not prove the job's secret (another job's root, or \
         another secret)"
    )]
    RootNotAuthenticated {
        /// The root's address.
        root: SocketAddr,
    },
    /// A PMIx call failed (the `pmix` feature, under srun or mpirun).
    #[error("{call} failed: {status_name} ({status}){}", hint(.call))]
    Pmix {
        /// The call (`PMIx_Init`, `PMIx_Get(pmix.job.size)`, `PMIx_Fence`...).
        call: String,
        /// Its `pmix_status_t`.
        status: i32,
        /// The status's name (`PMIx_Error_string`).
        status_name: String,
    },
    /// PMIx gave a value that cannot be used.
    #[error("PMIx gave {key} as {found}, expected {expected}")]
    PmixValue {
        /// The key.
        key: String,
        /// What it was (its type, or its value).
        found: String,
        /// What it should be.
        expected: &'static str,
    },
    /// Rank 0 could not set up the rendezvous and said why in the PMIx
    /// store (the other PEs' view of its failure).
    #[error("rank 0 could not host the bootstrap root: {reason}")]
    PmixRank0Failed {
        /// Rank 0's error.
        reason: String,
    },
    /// A job across several nodes, under PMIx without `SWITCHYARD_ROOT`, and
    /// this host has no address but loopback for the root.
    #[error(
        "no address other than loopback for the bootstrap root on {host}, whose job spans \
         {nodes} nodes: set SWITCHYARD_ROOT=host:port (an address of rank 0's node)"
    )]
    NoRootAddress {
        /// The host name looked up.
        host: String,
        /// The nodes of the job.
        nodes: u32,
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
    /// The root's event loop cannot wait on its sockets (`poll(2)` failed).
    #[error("the bootstrap root cannot wait on its connections")]
    Poll {
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
    /// The root speaks another bootstrap protocol version than this PE.
    #[error("{peer} speaks bootstrap protocol version {found}, this PE {supported}")]
    ProtocolVersion {
        /// Who (the root's address).
        peer: String,
        /// The version it announced.
        found: u8,
        /// The one this build speaks ([`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION)).
        supported: u8,
    },
    /// The root refused a card request (the connection stays usable).
    #[error("the bootstrap root refused the card request: {refusal}")]
    CardRefused {
        /// Why.
        refusal: crate::lazy::CardRefusal,
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
pub(crate) struct RankList<'a>(pub(crate) &'a [u32]);

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

/// What to try when a PMIx call fails: a PMIx that cannot be reached is
/// likely a process started outside its job (a stale environment); a card
/// fence refused may be PEs that disagree on `cards`.
fn hint(call: &str) -> &'static str {
    if call == "PMIx_Init" {
        ": PMIX_RANK and PMIX_NAMESPACE are set but the PMIx server cannot be reached \
         (set SWITCHYARD_PMIX=off to take rank and size from the environment instead)"
    } else if call.starts_with("PMIx_Fence(switchyard.card") {
        " (under PMIx every PE must have the same `cards`: the card fence collects the \
         cards with `all`, not with `lazy`)"
    } else {
        ""
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_refused_card_fence_names_the_cards_setting() {
        let e = |call: &str| BootstrapError::Pmix {
            call: call.into(),
            status: -33,
            status_name: "INVALID-ARG".into(),
        };
        let card = e("PMIx_Fence(switchyard.card, collecting)").to_string();
        assert!(card.contains("the same `cards`"), "{card}");
        let meet = e("PMIx_Fence").to_string();
        assert_eq!(meet, "PMIx_Fence failed: INVALID-ARG (-33)");
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
}
