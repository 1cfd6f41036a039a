//! What the verbs glue and its stand-in for a build without the `verbs`
//! feature (`context/verbs_off.rs`) share: the status type, the reason such
//! a build gives, the magic of the control records, why a peer refused to
//! pair, and the atomics reason.

use crate::context::Context;

/// Why a build without the `verbs` feature of switchyard never uses RDMA
/// verbs: what [`Context::verbs_status`] and `switchyard info` say then.
pub const NO_VERBS: &str =
    "this build has no RDMA verbs support (built without the `verbs` feature of switchyard)";

/// The first bytes of every verbs control record (see `Record`).
pub(in crate::context) const RECORD_MAGIC: [u8; 3] = *b"SYV";

/// Why a PE will not pair with a peer over verbs (the peer stays on TCP):
/// said to the peer in a verbs control record when the peer asked (its
/// QP numbers), and kept by the peer: [`Context::verbs_refusal`]. The code is the record's byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// Its budget of lazily paired peers (`verbs_lazy_peers`) is spent.
    Budget = 1,
    /// The asking PE's PE card was refused (malformed, or none came).
    BadCard = 2,
    /// One device does no RDMA atomics while the other PE's atomics use
    /// the NIC.
    NoAtomics = 3,
    /// It does not route to the asking PE over verbs (its class there: a
    /// ROUTED peer with `verbs_routed = off`, or no verbs card).
    NotWanted = 4,
    /// Its driver could not create or connect the queue pairs.
    Driver = 5,
    /// Its RDMA device failed.
    Device = 6,
}

impl Refusal {
    /// The refusal of code `b`, if any.
    pub const fn from_code(b: u8) -> Option<Refusal> {
        Some(match b {
            1 => Refusal::Budget,
            2 => Refusal::BadCard,
            3 => Refusal::NoAtomics,
            4 => Refusal::NotWanted,
            5 => Refusal::Driver,
            6 => Refusal::Device,
            _ => return None,
        })
    }

    /// Its code (the record's byte).
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// What it means, as warnings and the status say it.
    pub const fn text(self) -> &'static str {
        match self {
            Refusal::Budget => {
                "its budget of lazily paired verbs peers (verbs_lazy_peers) is spent"
            }
            Refusal::BadCard => "it refused this PE's verbs card",
            Refusal::NoAtomics => {
                "one device does no RDMA atomics while the other PE's atomics use the NIC"
            }
            Refusal::NotWanted => "it does not route to this PE over verbs",
            Refusal::Driver => "its verbs driver could not create or connect the queue pairs",
            Refusal::Device => "its RDMA device failed",
        }
    }
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.text())
    }
}

/// Whether the verbs transport is in use by this context, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsStatus {
    /// The probe found a usable port (or a test injected a device).
    pub device_usable: bool,
    /// Whether this context drives a verbs driver and routes over it.
    pub in_use: bool,
    /// Peers whose verbs health bit is set now.
    pub peers_up: u32,
    /// Why not, when it does not.
    pub why_not: Option<String>,
    /// Whether atomics to verbs peers use the NIC's atomics (else they go
    /// over TCP and run on the target's CPU; see `nic_atomics`).
    pub nic_atomics: bool,
    /// Peers this PE would not pair with over verbs when they asked or at
    /// their first use (lazy cards: its budget, `verbs_lazy_peers`,
    /// spent; a bad card): they stay on TCP.
    pub refused_here: u64,
    /// Peers that refused to pair with this PE over verbs (each says why:
    /// [`Context::verbs_refusal`]): they stay on TCP.
    pub refused_by_peers: u64,
}

impl Context {
    /// Why atomics to verbs peers use the NIC or not (`nic_atomics`, with
    /// the `verbs` feature); empty before a verbs driver is attached, so
    /// always in a build without the feature.
    pub fn verbs_atomics_reason(&self) -> &'static str {
        self.verbs_atomics_why
    }
}
