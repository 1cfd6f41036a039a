//! What this machine offers for TCP ([`probe`]): its network interfaces, read
//! from `/sys/class/net`, without opening a socket.

use std::{fmt::Write as _, fs, path::Path};

use switchyard_core::transport::{DeviceInfo, ProbeReport};

/// Where the kernel lists network interfaces.
const NET_CLASS: &str = "/sys/class/net";

/// Why the transport is unavailable when no interface is up.
pub const UNAVAILABLE_REASON: &str = "no network interface is up (not even the loopback)";

/// What this machine offers for TCP: its network interfaces (from
/// `/sys/class/net`), each with whether it is up (administratively up and not
/// link-down), whether it is the loopback, its MTU and MAC address. TCP is
/// available when at least one interface is up, the loopback included (a
/// one-node job can run over it); otherwise [`UNAVAILABLE_REASON`].
///
/// Only `/sys` is read; no socket is opened.
pub fn probe() -> ProbeReport {
    probe_in(Path::new(NET_CLASS))
}

/// [`probe`] with the interface class directory at `class_dir`.
fn probe_in(class_dir: &Path) -> ProbeReport {
    let mut any_up = false;
    let devices = list_dir(class_dir)
        .unwrap_or_default()
        .into_iter()
        .map(|name| {
            let (detail, up) = interface_detail(&class_dir.join(&name));
            any_up |= up;
            DeviceInfo { detail, name }
        })
        .collect();
    ProbeReport {
        name: "tcp",
        available: any_up,
        why_not: (!any_up).then(|| UNAVAILABLE_REASON.into()),
        devices,
    }
}

/// How one interface (`<class>/<name>`) is shown: `loopback, up (operstate
/// unknown), mtu 65536` or `down, mtu 1500, mac 02:42:ac:11:00:02`.
///
/// Up means administratively up (`IFF_UP` in `flags`) with an `operstate` of
/// `up` or `unknown` (the loopback and many virtual interfaces never report
/// `up`); an `operstate` other than `up`/`down` is shown. Returns the text
/// and whether the interface is up.
fn interface_detail(dir: &Path) -> (String, bool) {
    const IFF_UP: u32 = 0x1;
    const ARPHRD_LOOPBACK: &str = "772";
    let file = |f: &str| read_trim(&dir.join(f));
    let oper = file("operstate").unwrap_or_else(|| "unknown".into());
    let admin_up = file("flags")
        .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .is_some_and(|f| f & IFF_UP != 0);
    let loopback = file("type").as_deref() == Some(ARPHRD_LOOPBACK);
    let up = admin_up && (oper == "up" || oper == "unknown");
    let mut detail = String::new();
    if loopback {
        detail.push_str("loopback, ");
    }
    detail.push_str(if up { "up" } else { "down" });
    if oper != "up" && oper != "down" {
        let _ = write!(detail, " (operstate {oper})");
    }
    if let Some(mtu) = file("mtu") {
        let _ = write!(detail, ", mtu {mtu}");
    }
    if !loopback
        && let Some(mac) = file("address")
        && !mac.is_empty()
    {
        let _ = write!(detail, ", mac {mac}");
    }
    (detail, up)
}

/// A small sysfs file, trimmed; `None` when it cannot be read.
fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// The names in `dir`, sorted.
fn list_dir(dir: &Path) -> std::io::Result<Vec<String>> {
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
                "switchyard-socket-test-{}-{name}",
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
    fn available_when_an_interface_is_up() {
        let tmp = Scratch::new("net");
        let net = tmp.0.join("net");
        let r = probe_in(&net);
        assert_eq!(r.name, "tcp");
        assert!(!r.available);
        assert_eq!(r.why_not.as_deref(), Some(UNAVAILABLE_REASON));
        assert!(r.devices.is_empty());

        write(&net.join("eth0/operstate"), "down\n");
        write(&net.join("eth0/flags"), "0x1002\n");
        write(&net.join("eth0/type"), "1\n");
        write(&net.join("eth0/mtu"), "1500\n");
        write(&net.join("eth0/address"), "02:42:ac:11:00:02\n");
        write(&net.join("lo/operstate"), "unknown\n");
        write(&net.join("lo/flags"), "0x9\n");
        write(&net.join("lo/type"), "772\n");
        write(&net.join("lo/mtu"), "65536\n");
        write(&net.join("lo/address"), "00:00:00:00:00:00\n");
        // Administratively up, link up.
        write(&net.join("eth1/operstate"), "up\n");
        write(&net.join("eth1/flags"), "0x1003\n");
        write(&net.join("eth1/address"), "\n");
        // Admin up but no carrier.
        write(&net.join("eth2/operstate"), "lowerlayerdown\n");
        write(&net.join("eth2/flags"), "0x1003\n");
        // Nothing readable at all.
        fs::create_dir_all(net.join("odd0")).unwrap();
        let r = probe_in(&net);
        assert!(r.available, "lo and eth1 are up");
        assert_eq!(r.why_not, None);
        let shown: Vec<(&str, &str)> = r
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.detail.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("eth0", "down, mtu 1500, mac 02:42:ac:11:00:02"),
                ("eth1", "up"),
                ("eth2", "down (operstate lowerlayerdown)"),
                ("lo", "loopback, up (operstate unknown), mtu 65536"),
                ("odd0", "down (operstate unknown)"),
            ]
        );
    }
}
