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

use std::{fs, io, path::Path};

/// The path-class encoding this driver speaks (re-exported for its future cards).
pub use switchyard_core::class::CLASS_ENCODING_VERSION;
use switchyard_core::transport::{DeviceInfo, ProbeReport};

/// Where the kernel lists RDMA devices.
const IB_CLASS: &str = "/sys/class/infiniband";

/// What this machine offers for RDMA: every port of the devices under
/// `/sys/class/infiniband` (named `device:port`, as `ucx_info` does) with its
/// state, link layer and rate, and why the transport cannot be used when it
/// cannot (no kernel support, no device, no active port, or, in this build,
/// the driver not written yet).
///
/// Only `/sys` is read; nothing is opened on the devices.
pub fn probe() -> ProbeReport {
    probe_in(Path::new(IB_CLASS))
}

/// [`probe`] with the device class directory at `class_dir`.
fn probe_in(class_dir: &Path) -> ProbeReport {
    let mut devices = Vec::new();
    let why_not = match list_dir(class_dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(format!(
            "the kernel has no InfiniBand support ({} is absent)",
            class_dir.display()
        )),
        Err(e) => Some(format!("{} cannot be read: {e}", class_dir.display())),
        Ok(names) if names.is_empty() => Some(format!(
            "no RDMA device (the kernel supports InfiniBand, but {} is empty)",
            class_dir.display()
        )),
        Ok(names) => {
            let mut active = 0usize;
            let mut not_active = Vec::new();
            for dev in names {
                let ports_dir = class_dir.join(&dev).join("ports");
                let mut ports = list_dir(&ports_dir).unwrap_or_default();
                // Ports are numbered from 1: sort 2 before 10.
                ports.sort_by_key(|p| (p.parse::<u32>().unwrap_or(u32::MAX), p.clone()));
                if ports.is_empty() {
                    not_active.push(format!("{dev}: no ports"));
                    devices.push(DeviceInfo {
                        name: dev,
                        detail: "no ports".into(),
                    });
                    continue;
                }
                for port in ports {
                    let (name, state, detail) = port_info(&ports_dir.join(&port), &dev, &port);
                    if state == "ACTIVE" {
                        active += 1;
                    } else {
                        not_active.push(format!("{name} {state}"));
                    }
                    devices.push(DeviceInfo { name, detail });
                }
            }
            if active == 0 {
                Some(format!(
                    "no RDMA port is active ({})",
                    not_active.join(", ")
                ))
            } else if !IMPLEMENTED {
                Some(UNAVAILABLE_REASON.into())
            } else {
                None
            }
        }
    };
    ProbeReport {
        name: "verbs",
        available: why_not.is_none(),
        why_not,
        devices,
    }
}

/// One port (`<class>/<dev>/ports/<port>`): its name `dev:port`, its state
/// (`ACTIVE`, `DOWN`, ... from `state`, which reads like `4: ACTIVE`), and the
/// detail shown: the state, then the link layer and rate when known.
fn port_info(dir: &Path, dev: &str, port: &str) -> (String, String, String) {
    let state = read_trim(&dir.join("state")).unwrap_or_else(|| "unknown".into());
    let state = state
        .split_once(':')
        .map_or(state.as_str(), |(_, s)| s.trim())
        .to_string();
    let mut detail = state.clone();
    for file in ["link_layer", "rate"] {
        if let Some(v) = read_trim(&dir.join(file))
            && !v.is_empty()
        {
            detail.push_str(", ");
            detail.push_str(&v);
        }
    }
    (format!("{dev}:{port}"), state, detail)
}

/// A small sysfs file, trimmed; `None` when it cannot be read.
fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// The names in `dir`, sorted.
fn list_dir(dir: &Path) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod test {
    use std::path::PathBuf;

    use super::*;

    /// A fresh scratch folder, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "switchyard-verbs-test-{}-{name}",
                std::process::id()
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn says_why_not() {
        let r = probe_in(Path::new("/nonexistent/infiniband"));
        assert_eq!(r.name, "verbs");
        assert!(!r.available);
        assert_eq!(
            r.why_not.as_deref(),
            Some("the kernel has no InfiniBand support (/nonexistent/infiniband is absent)")
        );
        assert!(r.devices.is_empty());

        let tmp = Scratch::new("why");
        let ib = tmp.0.join("infiniband");
        fs::create_dir_all(&ib).unwrap();
        let r = probe_in(&ib);
        assert!(r.why_not.unwrap().starts_with("no RDMA device"));

        fs::create_dir_all(ib.join("mlx5_1")).unwrap();
        write(&ib.join("mlx5_0/ports/1/state"), "1: DOWN\n");
        write(&ib.join("mlx5_0/ports/1/link_layer"), "InfiniBand\n");
        let r = probe_in(&ib);
        assert!(!r.available);
        assert_eq!(
            r.why_not.as_deref(),
            Some("no RDMA port is active (mlx5_0:1 DOWN, mlx5_1: no ports)")
        );
        assert_eq!(r.devices[0].name, "mlx5_0:1");
        assert_eq!(r.devices[0].detail, "DOWN, InfiniBand");
        assert_eq!(r.devices[1].name, "mlx5_1");
        assert_eq!(r.devices[1].detail, "no ports");

        // An active port: usable hardware, but no driver in this build.
        write(&ib.join("rxe0/ports/1/state"), "4: ACTIVE\n");
        write(&ib.join("rxe0/ports/1/link_layer"), "Ethernet\n");
        write(&ib.join("rxe0/ports/1/rate"), "10 Gb/sec (1X QDR)\n");
        let r = probe_in(&ib);
        assert!(!r.available);
        assert_eq!(r.why_not.as_deref(), Some(UNAVAILABLE_REASON));
        assert_eq!(r.devices.len(), 3);
        assert_eq!(r.devices[2].name, "rxe0:1");
        assert_eq!(r.devices[2].detail, "ACTIVE, Ethernet, 10 Gb/sec (1X QDR)");
    }

    #[test]
    fn ports_in_numeric_order_and_odd_states() {
        let tmp = Scratch::new("ports");
        let ib = tmp.0.join("infiniband");
        for port in ["10", "2", "1"] {
            write(
                &ib.join(format!("hca/ports/{port}/state")),
                "5: ACTIVE_DEFER\n",
            );
        }
        // No `state` file at all.
        fs::create_dir_all(ib.join("hca/ports/11")).unwrap();
        let r = probe_in(&ib);
        let names: Vec<&str> = r.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["hca:1", "hca:2", "hca:10", "hca:11"]);
        assert_eq!(r.devices[0].detail, "ACTIVE_DEFER");
        assert_eq!(r.devices[3].detail, "unknown");
        assert!(
            r.why_not
                .unwrap()
                .starts_with("no RDMA port is active (hca:1 ACTIVE_DEFER")
        );
    }
}
