//! What the verbs glue and its stand-in for a build without the `verbs`
//! feature (`context/verbs_off.rs`) share: the status type, the reason such
//! a build gives, the magic of the control records, and the atomics reason.

use crate::context::Context;

/// Why a build without the `verbs` feature of switchyard never uses RDMA
/// verbs: what [`Context::verbs_status`] and `switchyard info` say then.
pub const NO_VERBS: &str =
    "this build has no RDMA verbs support (built without the `verbs` feature of switchyard)";

/// The first bytes of every verbs control record (see `Record`).
pub(in crate::context) const RECORD_MAGIC: [u8; 3] = *b"SYV";

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
}

impl Context {
    /// Why atomics to verbs peers use the NIC or not (`nic_atomics`, with
    /// the `verbs` feature); empty before a verbs driver is attached, so
    /// always in a build without the feature.
    pub fn verbs_atomics_reason(&self) -> &'static str {
        self.verbs_atomics_why
    }
}
