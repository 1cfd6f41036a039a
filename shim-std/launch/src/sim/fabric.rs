//! Building a sim: namespaces, bridges, the router and its tables, the
//! addresses and routes of every node, and the state file.

use std::{fs, io};

use super::{
    STATE_DIR, SimError, SimState,
    ip::{in_netns, ip},
    state_path,
};

/// First routing table of the router; (tree `t`, rail `r`) uses `BASE + 4t + r`.
const TABLE_BASE: u64 = 1000;

/// Root and `ip`, or why not.
pub(super) fn check_environment() -> Result<(), SimError> {
    let uid = crate::sys::effective_uid();
    if uid != 0 {
        return Err(SimError::NotRoot(uid));
    }
    ip(&["-V"]).map(|_| ())
}

/// Builds everything in `state`; on error the caller tears down.
pub(super) fn build(state: &SimState) -> Result<(), SimError> {
    let fab = state.fabric_netns.as_str();
    let rt = state.router_netns.as_str();
    // The state file first, so a crash midway leaves a record for `down`
    // (which also finds the namespaces by name).
    write_state(state)?;
    for ns in state.namespaces() {
        ip(&["netns", "add", &ns])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
    }
    set_sysctl(
        rt,
        "net.ipv4.ip_forward",
        "/proc/sys/net/ipv4/ip_forward",
        "1",
    )?;
    // The management bridge.
    ip(&["-n", fab, "link", "add", "mg", "type", "bridge"])?;
    ip(&[
        "-n",
        fab,
        "addr",
        "add",
        &format!("{}/16", state.mgmt_addr),
        "dev",
        "mg",
    ])?;
    ip(&["-n", fab, "link", "set", "mg", "up"])?;
    // One bridge per (leaf, rail), with the router's leg in it.
    for l in &state.leaves {
        for r in 0..state.rails {
            let bridge = format!("b{}r{r}", l.leaf);
            let fab_leg = format!("t{}r{r}", l.leaf);
            let rt_leg = format!("l{}r{r}", l.leaf);
            let subnet = format!("10.{}.{}.0/24", 100 + r, l.leaf);
            let gw = format!("10.{}.{}.254", 100 + r, l.leaf);
            let table = (TABLE_BASE + 4 * u64::from(l.tree) + u64::from(r)).to_string();
            ip(&["-n", fab, "link", "add", &bridge, "type", "bridge"])?;
            ip(&["-n", fab, "link", "set", &bridge, "up"])?;
            ip(&[
                "-n", fab, "link", "add", &fab_leg, "type", "veth", "peer", "name", &rt_leg,
                "netns", rt,
            ])?;
            ip(&["-n", fab, "link", "set", &fab_leg, "master", &bridge, "up"])?;
            ip(&["-n", rt, "addr", "add", &format!("{gw}/24"), "dev", &rt_leg])?;
            ip(&["-n", rt, "link", "set", &rt_leg, "up"])?;
            // Forward only within the leg's (tree, rail): its table holds the
            // subnets of that tree's leaves on that rail; anything else from
            // the leg is unreachable.
            ip(&[
                "-n", rt, "route", "add", &subnet, "dev", &rt_leg, "src", &gw, "table", &table,
            ])?;
            ip(&[
                "-n", rt, "rule", "add", "pref", "100", "iif", &rt_leg, "lookup", &table,
            ])?;
            ip(&[
                "-n",
                rt,
                "rule",
                "add",
                "pref",
                "200",
                "iif",
                &rt_leg,
                "unreachable",
            ])?;
        }
    }
    for n in &state.nodes {
        let ns = n.netns.as_str();
        for (r, (addr, gw)) in n.addrs.iter().zip(&n.gateways).enumerate() {
            let iface = format!("r{r}");
            let port = format!("n{}r{r}", n.index);
            ip(&[
                "-n", fab, "link", "add", &port, "type", "veth", "peer", "name", &iface, "netns",
                ns,
            ])?;
            ip(&[
                "-n",
                fab,
                "link",
                "set",
                &port,
                "master",
                &format!("b{}r{r}", n.leaf),
                "up",
            ])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                &iface,
            ])?;
            ip(&["-n", ns, "link", "set", &iface, "up"])?;
            ip(&[
                "-n",
                ns,
                "route",
                "add",
                &format!("10.{}.0.0/16", 100 + r),
                "via",
                &gw.to_string(),
                "dev",
                &iface,
                "onlink",
            ])?;
        }
        let port = format!("m{}", n.index);
        ip(&[
            "-n", fab, "link", "add", &port, "type", "veth", "peer", "name", "mg", "netns", ns,
        ])?;
        ip(&["-n", fab, "link", "set", &port, "master", "mg", "up"])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/16", n.mgmt),
            "dev",
            "mg",
        ])?;
        ip(&["-n", ns, "link", "set", "mg", "up"])?;
    }
    Ok(())
}

/// Writes `value` to the sysctl file `file` of namespace `netns`.
fn set_sysctl(
    netns: &str,
    key: &'static str,
    file: &'static str,
    value: &str,
) -> Result<(), SimError> {
    let value = value.to_string();
    in_netns(netns, move || fs::write(file, value))?.map_err(|source| SimError::Sysctl {
        netns: netns.into(),
        key,
        source,
    })
}

fn write_state(state: &SimState) -> Result<(), SimError> {
    let path = state_path(&state.name);
    let io_err = |source| SimError::StateFile {
        what: "write",
        path: path.clone(),
        source,
    };
    fs::create_dir_all(STATE_DIR).map_err(io_err)?;
    let text = serde_json::to_string_pretty(state).map_err(|e| io_err(io::Error::other(e)))?;
    // create_new: two concurrent `up`s of one name cannot both win.
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => SimError::Exists {
                name: state.name.clone(),
                what: format!("state file {}", path.display()),
            },
            _ => io_err(e),
        })?;
    io::Write::write_all(&mut f, text.as_bytes()).map_err(io_err)
}
