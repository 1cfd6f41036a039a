//! # switchyard-verbs: the RDMA verbs transport of switchyard
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
pub const UNAVAILABLE_REASON: &str = "the RDMA verbs transport is not implemented yet";

use std::{fs, path::Path};

/// The path-class encoding this driver speaks (re-exported for its future cards).
pub use switchyard_core::class::CLASS_ENCODING_VERSION;
use switchyard_core::transport::{DeviceInfo, ProbeReport};

/// Where the kernel lists RDMA devices.
const IB_CLASS: &str = "/sys/class/infiniband";

/// What this machine offers for RDMA: the devices under
/// `/sys/class/infiniband` with their ports' states, and why the transport
/// cannot be used when it cannot (no kernel support, no device, every port
/// down, or, in this build, the driver not written yet).
pub fn probe() -> ProbeReport {
    probe_in(Path::new(IB_CLASS))
}

fn probe_in(class_dir: &Path) -> ProbeReport {
    let mut devices = Vec::new();
    let mut any_active = false;
    let why_not = match fs::read_dir(class_dir) {
        Err(_) => Some(format!(
            "the kernel has no InfiniBand support ({} is absent)",
            class_dir.display()
        )),
        Ok(entries) => {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let mut ports = Vec::new();
                if let Ok(ps) = fs::read_dir(e.path().join("ports")) {
                    for p in ps.flatten() {
                        let state = fs::read_to_string(p.path().join("state")).unwrap_or_default();
                        let state = state.trim();
                        any_active |= state.ends_with("ACTIVE");
                        ports.push(format!(
                            "port {}: {}",
                            p.file_name().to_string_lossy(),
                            state
                        ));
                    }
                }
                ports.sort();
                devices.push(DeviceInfo {
                    name,
                    detail: if ports.is_empty() {
                        "no ports".into()
                    } else {
                        ports.join(", ")
                    },
                });
            }
            if devices.is_empty() {
                Some(
                    "no RDMA device (the kernel supports InfiniBand, but no device is present)"
                        .into(),
                )
            } else if !any_active {
                Some("no RDMA port is active".into())
            } else {
                Some(UNAVAILABLE_REASON.into())
            }
        }
    };
    ProbeReport {
        name: "verbs",
        available: IMPLEMENTED && why_not.is_none(),
        why_not,
        devices,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn says_why_not() {
        let r = probe_in(Path::new("/nonexistent/infiniband"));
        assert!(!r.available);
        assert!(r.why_not.unwrap().contains("no InfiniBand support"));
        let dir = std::env::temp_dir().join(format!("sy-ib-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert!(probe_in(&dir).why_not.unwrap().contains("no RDMA device"));
        let port = dir.join("rxe0/ports/1");
        fs::create_dir_all(&port).unwrap();
        fs::write(port.join("state"), "1: DOWN\n").unwrap();
        let r = probe_in(&dir);
        assert_eq!(r.devices[0].name, "rxe0");
        assert!(r.why_not.unwrap().contains("no RDMA port is active"));
        fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        assert_eq!(probe_in(&dir).why_not.as_deref(), Some(UNAVAILABLE_REASON));
        fs::remove_dir_all(&dir).unwrap();
    }
}
