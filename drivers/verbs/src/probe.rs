//! What this machine offers for RDMA, and precisely why not when it offers
//! nothing usable.
//!
//! Two sources: `ibv_get_device_list` (through the `ibverbs` crate), which
//! fails with `ENOSYS` when the kernel has no InfiniBand/RDMA support, and
//! `/sys/class/infiniband/<dev>/ports/<n>/` for each port's state, link
//! layer, rate, LID and GID table (with each GID's type). Only sysfs and the
//! device list are read; nothing is opened on a device, so `switchyard info`
//! stays cheap. [`VerbsProbe::best`] picks the port and GID the driver uses.

use std::{fmt, fs, io, path::Path};

use switchyard_core::transport::{DeviceInfo, ProbeReport};

use crate::{
    card::LinkLayer,
    params::{AtomicCap, DeviceLimits, Mtu},
};

/// Where the kernel lists RDMA devices.
pub const IB_CLASS: &str = "/sys/class/infiniband";

/// A port's state, as sysfs shows it (`4: ACTIVE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortState {
    /// Usable.
    Active,
    /// Link down.
    Down,
    /// Initializing (waiting for the subnet manager on IB).
    Init,
    /// Armed.
    Armed,
    /// Active, deferred.
    ActiveDefer,
    /// Anything else, as read (or `unknown`).
    Other(String),
}

impl PortState {
    fn parse(s: &str) -> PortState {
        let name = s.split_once(':').map_or(s, |(_, n)| n).trim();
        match name {
            "ACTIVE" => PortState::Active,
            "DOWN" => PortState::Down,
            "INIT" => PortState::Init,
            "ARMED" => PortState::Armed,
            "ACTIVE_DEFER" => PortState::ActiveDefer,
            other => PortState::Other(other.to_string()),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PortState::Active => "ACTIVE",
            PortState::Down => "DOWN",
            PortState::Init => "INIT",
            PortState::Armed => "ARMED",
            PortState::ActiveDefer => "ACTIVE_DEFER",
            PortState::Other(s) => s,
        })
    }
}

/// The type of a GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GidKind {
    /// InfiniBand, or RoCE v1 (`IB/RoCE v1`).
    IbOrRoceV1,
    /// RoCE v2 (routable over UDP/IP).
    RoceV2,
}

/// One non-zero GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gid {
    /// Index in the port's table.
    pub index: u32,
    /// The GID.
    pub gid: [u8; 16],
    /// Its type, where sysfs says.
    pub kind: Option<GidKind>,
}

impl Gid {
    /// Whether the GID is an IPv4-mapped address (`::ffff:a.b.c.d`).
    pub fn is_ipv4_mapped(&self) -> bool {
        self.gid[..10] == [0; 10] && self.gid[10..12] == [0xff, 0xff]
    }
}

/// One port of one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortProbe {
    /// Device name (`mlx5_0`, `rxe0`).
    pub device: String,
    /// Port number (from 1).
    pub port: u8,
    /// State.
    pub state: PortState,
    /// Link layer, when known.
    pub link_layer: Option<LinkLayer>,
    /// Rate text (`100 Gb/sec (4X EDR)`), when known.
    pub rate: Option<String>,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Non-zero GIDs.
    pub gids: Vec<Gid>,
}

impl PortProbe {
    /// The GID the driver would use: on RoCE an IPv4-mapped RoCE v2 GID,
    /// then any RoCE v2, then any; on InfiniBand the first (index 0, the
    /// port GUID based link-local GID).
    pub fn best_gid(&self) -> Option<&Gid> {
        match self.link_layer {
            Some(LinkLayer::Ethernet) => self
                .gids
                .iter()
                .find(|g| g.kind == Some(GidKind::RoceV2) && g.is_ipv4_mapped())
                .or_else(|| self.gids.iter().find(|g| g.kind == Some(GidKind::RoceV2)))
                .or_else(|| self.gids.first()),
            _ => self.gids.first(),
        }
    }

    /// Whether the driver can use this port: active, with an address (a GID
    /// on RoCE; a LID or GID on InfiniBand).
    pub fn usable(&self) -> bool {
        self.state == PortState::Active
            && match self.link_layer {
                Some(LinkLayer::Ethernet) => self.best_gid().is_some(),
                _ => self.lid != 0 || self.best_gid().is_some(),
            }
    }
}

/// Why RDMA cannot be used here.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unavailable {
    /// The kernel has no InfiniBand/RDMA support (`ENOSYS` from
    /// `ibv_get_device_list`, or no `/sys/class/infiniband`).
    NoKernelSupport {
        /// How it showed.
        detail: String,
    },
    /// `ibv_get_device_list` failed for another reason (`EPERM`, `ENOMEM`).
    DeviceList {
        /// The OS error.
        errno: i32,
    },
    /// The kernel supports RDMA but there is no device.
    NoDevice,
    /// Devices exist but no port is active: `device:port STATE` each.
    PortDown {
        /// The ports and their states.
        ports: Vec<(String, PortState)>,
    },
    /// Active ports exist but none has an address to connect with.
    NoUsableGid {
        /// The active ports (`device:port`).
        ports: Vec<String>,
    },
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::NoKernelSupport { detail } => {
                write!(f, "the kernel has no InfiniBand/RDMA support ({detail})")
            }
            Unavailable::DeviceList { errno } => write!(
                f,
                "ibv_get_device_list failed: {}",
                io::Error::from_raw_os_error(*errno)
            ),
            Unavailable::NoDevice => f.write_str(
                "no RDMA device (the kernel supports RDMA, but no device is registered; soft-RoCE: rdma link add rxe0 type rxe netdev eth0)",
            ),
            Unavailable::PortDown { ports } => {
                f.write_str("no RDMA port is active (")?;
                for (i, (p, s)) in ports.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{p} {s}")?;
                }
                f.write_str(")")
            }
            Unavailable::NoUsableGid { ports } => write!(
                f,
                "no usable GID on the active RDMA ports ({}): on RoCE, give the netdev an IP address",
                ports.join(", ")
            ),
        }
    }
}

/// A device's attributes (`ibv_query_device`), read when the device list
/// works and the device opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttrs {
    /// Firmware version.
    pub fw_ver: String,
    /// Physical ports.
    pub ports: u8,
    /// Largest send queue.
    pub max_qp_wr: u32,
    /// Largest completion queue.
    pub max_cqe: u32,
    /// Most QPs.
    pub max_qp: u32,
    /// Outstanding reads/atomics a QP may issue / serve.
    pub rd_atom: (u32, u32),
    /// Atomics support.
    pub atomic_cap: AtomicCap,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Largest shared receive queue (`max_srq_wr`; 0: no SRQ support).
    pub max_srq_wr: u32,
}

impl DeviceAttrs {
    /// The limits parameter derivation takes, with a port's active MTU.
    pub fn limits(&self, active_mtu: Mtu) -> DeviceLimits {
        DeviceLimits {
            max_qp_wr: self.max_qp_wr,
            max_cqe: self.max_cqe,
            max_qp: self.max_qp,
            max_sge: 1,
            max_qp_init_rd_atom: self.rd_atom.0,
            max_qp_rd_atom: self.rd_atom.1,
            atomic_cap: self.atomic_cap,
            max_mr_size: self.max_mr_size,
            max_srq_wr: self.max_srq_wr,
            active_mtu,
        }
    }
}

impl fmt::Display for DeviceAttrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fw {}, {} port(s), max_qp_wr {}, max_cqe {}, max_qp {}, rd_atom {}/{}, atomics {}",
            self.fw_ver,
            self.ports,
            self.max_qp_wr,
            self.max_cqe,
            self.max_qp,
            self.rd_atom.0,
            self.rd_atom.1,
            match self.atomic_cap {
                AtomicCap::None => "none",
                AtomicCap::Hca => "HCA",
                AtomicCap::Global => "global",
            }
        )
    }
}

/// The result of a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsProbe {
    /// Device names (from sysfs), sorted.
    pub devices: Vec<String>,
    /// Each device's attributes, or why they could not be read (only when
    /// the device list worked).
    pub attrs: Vec<(String, Result<DeviceAttrs, String>)>,
    /// Every port of every device.
    pub ports: Vec<PortProbe>,
    /// Why RDMA cannot be used, or `None` when a port is usable.
    pub unavailable: Option<Unavailable>,
}

impl VerbsProbe {
    /// The first usable port and its GID (if any).
    pub fn best(&self) -> Option<(&PortProbe, Option<&Gid>)> {
        self.ports
            .iter()
            .find(|p| p.usable())
            .map(|p| (p, p.best_gid()))
    }

    /// The report `switchyard info` shows.
    pub fn report(&self) -> ProbeReport {
        let mut devices = Vec::new();
        for p in &self.ports {
            let mut detail = p.state.to_string();
            match p.link_layer {
                Some(LinkLayer::InfiniBand) => detail.push_str(", InfiniBand"),
                Some(LinkLayer::Ethernet) => detail.push_str(", Ethernet (RoCE)"),
                None => {}
            }
            if let Some(r) = &p.rate {
                detail.push_str(", ");
                detail.push_str(r);
            }
            if p.lid != 0 {
                detail.push_str(&format!(", lid {:#x}", p.lid));
            }
            match p.best_gid() {
                Some(g) => detail.push_str(&format!(
                    ", gid[{}] {}{}",
                    g.index,
                    fmt_gid(&g.gid),
                    match g.kind {
                        Some(GidKind::RoceV2) => " (RoCE v2)",
                        Some(GidKind::IbOrRoceV1) => " (IB/RoCE v1)",
                        None => "",
                    }
                )),
                None => detail.push_str(", no GID"),
            }
            devices.push(DeviceInfo {
                name: format!("{}:{}", p.device, p.port),
                detail,
            });
        }
        for d in &self.devices {
            let attrs = self
                .attrs
                .iter()
                .find(|(n, _)| n == d)
                .map(|(_, a)| match a {
                    Ok(a) => a.to_string(),
                    Err(e) => format!("attributes unreadable: {e}"),
                });
            let no_ports = !self.ports.iter().any(|p| &p.device == d);
            let detail = match (attrs, no_ports) {
                (Some(a), true) => format!("no ports; {a}"),
                (Some(a), false) => a,
                (None, true) => "no ports".into(),
                (None, false) => continue,
            };
            devices.push(DeviceInfo {
                name: d.clone(),
                detail,
            });
        }
        ProbeReport {
            name: "verbs",
            available: self.unavailable.is_none(),
            why_not: self.unavailable.as_ref().map(ToString::to_string),
            devices,
        }
    }
}

/// A GID as eight colon-separated groups of four hex digits (sysfs style).
pub fn fmt_gid(g: &[u8; 16]) -> String {
    let mut s = String::with_capacity(39);
    for (i, pair) in g.chunks(2).enumerate() {
        if i > 0 {
            s.push(':');
        }
        s.push_str(&format!("{:02x}{:02x}", pair[0], pair[1]));
    }
    s
}

/// Parses a sysfs GID (`fe80:0000:...`, eight groups).
pub fn parse_gid(s: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut n = 0;
    for (i, group) in s.trim().split(':').enumerate() {
        if i >= 8 || group.len() != 4 {
            return None;
        }
        let v = u16::from_str_radix(group, 16).ok()?;
        out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        n += 1;
    }
    (n == 8).then_some(out)
}

/// Probes this machine: the device list, then sysfs, then each device's
/// attributes (opening it, when the list has devices).
pub fn probe() -> VerbsProbe {
    let list = match ibverbs::devices() {
        Ok(l) => Ok(l.len()),
        Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
    };
    let mut p = probe_with(Path::new(IB_CLASS), list);
    if matches!(list, Ok(n) if n > 0) {
        p.attrs = p
            .devices
            .iter()
            .map(|d| {
                (
                    d.clone(),
                    crate::sys::device_attrs(d).map_err(|e| e.to_string()),
                )
            })
            .collect();
    }
    p
}

/// [`probe`] with the sysfs class directory and the device list's outcome
/// (its length, or the errno) given: what the unit tests drive.
pub fn probe_with(class_dir: &Path, list: Result<usize, i32>) -> VerbsProbe {
    let names = list_dir(class_dir);
    let mut out = VerbsProbe {
        devices: Vec::new(),
        attrs: Vec::new(),
        ports: Vec::new(),
        unavailable: None,
    };
    match (&list, &names) {
        (Err(e), _) if *e == libc::ENOSYS => {
            out.unavailable = Some(Unavailable::NoKernelSupport {
                detail: "ibv_get_device_list: ENOSYS, no uverbs in the kernel".into(),
            });
            return out;
        }
        (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => {
            out.unavailable = Some(Unavailable::NoKernelSupport {
                detail: format!("{} is absent", class_dir.display()),
            });
            return out;
        }
        (Err(e), _) => {
            out.unavailable = Some(Unavailable::DeviceList { errno: *e });
            return out;
        }
        _ => {}
    }
    let names = names.unwrap_or_default();
    if names.is_empty() || list == Ok(0) {
        out.devices = names;
        out.unavailable = Some(Unavailable::NoDevice);
        return out;
    }
    for dev in &names {
        let ports_dir = class_dir.join(dev).join("ports");
        let mut ports: Vec<u8> = list_dir(&ports_dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect();
        ports.sort_unstable();
        for port in ports {
            out.ports
                .push(read_port(&ports_dir.join(port.to_string()), dev, port));
        }
    }
    out.devices = names;
    let active: Vec<&PortProbe> = out
        .ports
        .iter()
        .filter(|p| p.state == PortState::Active)
        .collect();
    if active.is_empty() {
        out.unavailable = Some(Unavailable::PortDown {
            ports: out
                .ports
                .iter()
                .map(|p| (format!("{}:{}", p.device, p.port), p.state.clone()))
                .collect(),
        });
    } else if !active.iter().any(|p| p.usable()) {
        out.unavailable = Some(Unavailable::NoUsableGid {
            ports: active
                .iter()
                .map(|p| format!("{}:{}", p.device, p.port))
                .collect(),
        });
    }
    out
}

fn read_port(dir: &Path, dev: &str, port: u8) -> PortProbe {
    let state = read_trim(&dir.join("state"))
        .map_or(PortState::Other("unknown".into()), |s| PortState::parse(&s));
    let link_layer = read_trim(&dir.join("link_layer")).and_then(|l| match l.as_str() {
        "InfiniBand" => Some(LinkLayer::InfiniBand),
        "Ethernet" => Some(LinkLayer::Ethernet),
        _ => None,
    });
    let lid = read_trim(&dir.join("lid"))
        .and_then(|l| u16::from_str_radix(l.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    let mut gids = Vec::new();
    let mut idx: Vec<u32> = list_dir(&dir.join("gids"))
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i.parse().ok())
        .collect();
    idx.sort_unstable();
    for index in idx {
        let Some(gid) =
            read_trim(&dir.join("gids").join(index.to_string())).and_then(|g| parse_gid(&g))
        else {
            continue;
        };
        if gid == [0; 16] {
            continue;
        }
        let kind = read_trim(&dir.join("gid_attrs/types").join(index.to_string())).and_then(|t| {
            if t.eq_ignore_ascii_case("RoCE v2") {
                Some(GidKind::RoceV2)
            } else if t.starts_with("IB/RoCE") || t == "InfiniBand" {
                Some(GidKind::IbOrRoceV1)
            } else {
                None
            }
        });
        gids.push(Gid { index, gid, kind });
    }
    PortProbe {
        device: dev.to_string(),
        port,
        state,
        link_layer,
        rate: read_trim(&dir.join("rate")).filter(|r| !r.is_empty()),
        lid,
        gids,
    }
}

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

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

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "switchyard-verbs-probe-{}-{name}",
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

    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

    #[test]
    fn enosys_is_no_kernel_support() {
        let p = probe_with(Path::new("/nonexistent"), Err(libc::ENOSYS));
        assert_eq!(
            p.report().why_not.as_deref(),
            Some(
                "the kernel has no InfiniBand/RDMA support (ibv_get_device_list: ENOSYS, no uverbs in the kernel)"
            )
        );
        let p = probe_with(Path::new("/nonexistent/ib"), Ok(0));
        assert!(matches!(
            p.unavailable,
            Some(Unavailable::NoKernelSupport { .. })
        ));
        assert!(
            p.report()
                .why_not
                .unwrap()
                .contains("/nonexistent/ib is absent")
        );
        let tmp = Scratch::new("eperm");
        let p = probe_with(&tmp.0, Err(libc::EPERM));
        assert_eq!(
            p.unavailable,
            Some(Unavailable::DeviceList { errno: libc::EPERM })
        );
        assert!(
            p.report()
                .why_not
                .unwrap()
                .starts_with("ibv_get_device_list failed: ")
        );
    }

    #[test]
    fn no_device_then_port_down_then_no_gid_then_usable() {
        let tmp = Scratch::new("steps");
        let ib = tmp.0.join("infiniband");
        fs::create_dir_all(&ib).unwrap();
        let p = probe_with(&ib, Ok(0));
        assert_eq!(p.unavailable, Some(Unavailable::NoDevice));
        assert!(p.report().why_not.unwrap().starts_with("no RDMA device"));

        let port = ib.join("rxe0/ports/1");
        write(&port.join("state"), "1: DOWN\n");
        write(&port.join("link_layer"), "Ethernet\n");
        write(&port.join("gids/0"), ZERO);
        let p = probe_with(&ib, Ok(1));
        assert_eq!(
            p.report().why_not.as_deref(),
            Some("no RDMA port is active (rxe0:1 DOWN)")
        );

        write(&port.join("state"), "4: ACTIVE\n");
        let p = probe_with(&ib, Ok(1));
        assert_eq!(
            p.unavailable,
            Some(Unavailable::NoUsableGid {
                ports: vec!["rxe0:1".into()]
            })
        );

        write(
            &port.join("gids/1"),
            "fe80:0000:0000:0000:0211:22ff:fe33:4455\n",
        );
        write(&port.join("gid_attrs/types/1"), "IB/RoCE v1\n");
        write(
            &port.join("gids/2"),
            "fe80:0000:0000:0000:0211:22ff:fe33:4455\n",
        );
        write(&port.join("gid_attrs/types/2"), "RoCE v2\n");
        write(
            &port.join("gids/3"),
            "0000:0000:0000:0000:0000:ffff:0a00:0002\n",
        );
        write(&port.join("gid_attrs/types/3"), "RoCE v2\n");
        write(&port.join("rate"), "10 Gb/sec (1X QDR)\n");
        let p = probe_with(&ib, Ok(1));
        assert_eq!(p.unavailable, None);
        let (best, gid) = p.best().unwrap();
        assert_eq!(best.device, "rxe0");
        let gid = gid.unwrap();
        assert_eq!(gid.index, 3, "IPv4-mapped RoCE v2 first");
        let r = p.report();
        assert!(r.available);
        assert_eq!(r.devices[0].name, "rxe0:1");
        assert_eq!(
            r.devices[0].detail,
            "ACTIVE, Ethernet (RoCE), 10 Gb/sec (1X QDR), gid[3] 0000:0000:0000:0000:0000:ffff:0a00:0002 (RoCE v2)"
        );
    }

    #[test]
    fn infiniband_by_lid_and_port_order() {
        let tmp = Scratch::new("ib");
        let ib = tmp.0.join("infiniband");
        for port in ["10", "2", "1"] {
            write(&ib.join(format!("mlx5_0/ports/{port}/state")), "2: INIT\n");
        }
        fs::create_dir_all(ib.join("mlx5_1")).unwrap();
        let p = probe_with(&ib, Ok(2));
        let names: Vec<String> = p.report().devices.into_iter().map(|d| d.name).collect();
        assert_eq!(names, ["mlx5_0:1", "mlx5_0:2", "mlx5_0:10", "mlx5_1"]);
        assert_eq!(
            p.report().why_not.as_deref(),
            Some("no RDMA port is active (mlx5_0:1 INIT, mlx5_0:2 INIT, mlx5_0:10 INIT)")
        );
        let port = ib.join("mlx5_0/ports/2");
        write(&port.join("state"), "4: ACTIVE\n");
        write(&port.join("link_layer"), "InfiniBand\n");
        write(&port.join("lid"), "0x1a\n");
        let p = probe_with(&ib, Ok(2));
        assert_eq!(p.unavailable, None, "InfiniBand by LID needs no GID");
        assert_eq!(p.best().unwrap().0.lid, 0x1a);
        assert!(p.report().devices[1].detail.contains("lid 0x1a, no GID"));
    }

    #[test]
    fn device_attributes_are_shown() {
        let tmp = Scratch::new("attrs");
        let ib = tmp.0.join("infiniband");
        let port = ib.join("mlx5_0/ports/1");
        write(&port.join("state"), "4: ACTIVE\n");
        write(&port.join("link_layer"), "InfiniBand\n");
        write(&port.join("lid"), "0x5\n");
        fs::create_dir_all(ib.join("mlx5_1")).unwrap();
        let mut p = probe_with(&ib, Ok(2));
        let a = DeviceAttrs {
            fw_ver: "16.35.1012".into(),
            ports: 1,
            max_qp_wr: 32768,
            max_cqe: 4_194_303,
            max_qp: 262_144,
            rd_atom: (16, 16),
            atomic_cap: AtomicCap::Hca,
            max_mr_size: u64::MAX,
            max_srq_wr: 32768,
        };
        p.attrs = vec![
            ("mlx5_0".into(), Ok(a.clone())),
            ("mlx5_1".into(), Err("ibv_open_device: EPERM".into())),
        ];
        let r = p.report();
        let rows: Vec<(&str, &str)> = r
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.detail.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("mlx5_0:1", "ACTIVE, InfiniBand, lid 0x5, no GID"),
                (
                    "mlx5_0",
                    "fw 16.35.1012, 1 port(s), max_qp_wr 32768, max_cqe 4194303, max_qp 262144, rd_atom 16/16, atomics HCA"
                ),
                (
                    "mlx5_1",
                    "no ports; attributes unreadable: ibv_open_device: EPERM"
                ),
            ]
        );
        let l = a.limits(Mtu::M2048);
        assert_eq!(
            (l.max_qp_wr, l.max_qp_rd_atom, l.active_mtu),
            (32768, 16, Mtu::M2048)
        );
    }

    #[test]
    fn gid_text() {
        let g = parse_gid("fe80:0000:0000:0000:0211:22ff:fe33:4455").unwrap();
        assert_eq!(g[0], 0xfe);
        assert_eq!(g[15], 0x55);
        assert_eq!(fmt_gid(&g), "fe80:0000:0000:0000:0211:22ff:fe33:4455");
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(
            parse_gid("fe80:0000:0000:0000:0211:22ff:fe33:4455:0000"),
            None
        );
        assert_eq!(parse_gid("zz80:0000:0000:0000:0211:22ff:fe33:4455"), None);
        assert_eq!(parse_gid(""), None);
    }

    /// On this machine (whatever it has) the probe answers, with a reason
    /// whenever it is unavailable.
    #[test]
    fn the_real_probe_gives_a_reason() {
        let p = probe();
        let r = p.report();
        assert_eq!(r.available, r.why_not.is_none());
        if let Some(why) = &r.why_not {
            assert!(!why.is_empty());
        }
    }
}
