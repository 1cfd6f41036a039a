//! # switchyard-socket: the TCP transport of switchyard
//!
//! **Not implemented yet.** This crate reserves its place in the workspace (it
//! depends on `switchyard-core` only, as every driver must); the driver itself
//! arrives with its own issue. Nothing here can move data today.
#![deny(missing_docs)]
#![deny(unsafe_code)]

/// Whether this driver is implemented in this build. Always `false` for now, so
/// that callers can report the transport as unavailable with a reason.
pub const IMPLEMENTED: bool = false;

/// Why the transport is unavailable in this build.
pub const UNAVAILABLE_REASON: &str = "the TCP transport is not implemented yet";

use std::fs;

/// The path-class encoding this driver speaks (re-exported for its future cards).
pub use switchyard_core::class::CLASS_ENCODING_VERSION;
use switchyard_core::transport::{DeviceInfo, ProbeReport};

/// What this machine offers for TCP: its network interfaces (from
/// `/sys/class/net`) and their operational state. In this build the driver is
/// not written yet, so the transport is reported unavailable with that reason.
pub fn probe() -> ProbeReport {
    let mut devices = Vec::new();
    if let Ok(entries) = fs::read_dir("/sys/class/net") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let state = fs::read_to_string(e.path().join("operstate")).unwrap_or_default();
            let mtu = fs::read_to_string(e.path().join("mtu")).unwrap_or_default();
            devices.push(DeviceInfo {
                name,
                detail: format!("{}, mtu {}", state.trim(), mtu.trim()),
            });
        }
    }
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    ProbeReport {
        name: "tcp",
        available: false,
        why_not: Some(UNAVAILABLE_REASON.into()),
        devices,
    }
}
