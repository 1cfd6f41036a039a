//! Simulated clusters: one Linux network namespace per node of a topology,
//! linked by bridges (leaf switches) and a router (the switches that join
//! them), on this one machine.
//!
//! `switchyard sim up FILE` builds one from a topology file (the formats of
//! [`switchyard_topo`]); `switchyard run --sim` starts a job's PEs in it, each in
//! its node's namespace. [`Sim`] is the library side.
//!
//! ## What gets built
//!
//! For a sim named `NAME` (1 to [`MAX_NAME_LEN`] characters `[a-z0-9]`,
//! default [`DEFAULT_NAME`]) with `R` rails (NICs per node, 1 to
//! [`MAX_RAILS`]):
//!
//! | namespace | holds |
//! |---|---|
//! | `NAME-n<i>` | node `i` (its index in the topology): `lo`, `r0`..`r<R-1>` (one per rail), `mg` |
//! | `NAME-fab` | one bridge `b<s>r<r>` per (leaf switch `s`, rail `r`), the management bridge `mg` |
//! | `NAME-rt` | the router: one leg `l<s>r<r>` into every bridge, `ip_forward = 1` |
//!
//! Addresses, for node `i`, the `k`-th node of leaf switch `s`, on rail `r`:
//!
//! | what | address |
//! |---|---|
//! | node `i`, interface `r<r>` | `10.<100+r>.<s>.<k+1>/24` |
//! | router leg of (`s`, `r`) | `10.<100+r>.<s>.254/24` |
//! | route in node `i` | `10.<100+r>.0.0/16 via 10.<100+r>.<s>.254` |
//! | node `i`, interface `mg` | `10.99.<i/250>.<i%250+1>/16` |
//! | management bridge (the launcher's rendezvous) | `10.99.255.254/16` ([`MGMT_ADDR`]) |
//!
//! The router forwards between the leaves of one tree (switches joined by
//! parent/child links), on the same rail, and answers anything else with ICMP
//! unreachable: a policy rule per leg looks up only its (tree, rail) table. So
//! PEs on different trees are `UNREACHABLE`, as [`switchyard_topo`] says. The
//! management network is flat (one bridge) and only for the bootstrap; data
//! uses the rails.
//!
//! Nothing is created in the host's own namespace except the namespace files
//! under [`NETNS_DIR`] and the state file [`STATE_DIR`]`/NAME.json`.
//!
//! ## Cutting a link
//!
//! [`Sim::link`] (`switchyard sim link down NODE [RAIL]`) takes the switch end
//! of the node's rail cable down: the node's `r<r>` loses its carrier (state
//! `DOWN`, `NO-CARRIER`) but keeps its address and routes, so the kernel drops
//! what is sent over it and connections time out, as with a cut cable (a plain
//! `ip link set r0 down` in the node would instead make sends fail at once with
//! `ENETUNREACH`). `up` plugs it back in.
//!
//! ## Limits and errors
//!
//! At most [`MAX_NODES_PER_LEAF`] nodes per leaf and [`MAX_LEAVES`] leaves;
//! every node must be under a leaf switch. Every external command (`ip`) runs
//! with a bounded wait ([`COMMAND_TIMEOUT`]), and its failure is a
//! [`SimError::Command`] naming the command and its stderr. Building needs
//! root and iproute2's `ip`: without them, [`SimError::NotRoot`] or
//! [`SimError::NoIp`]. A failed [`Sim::up`] removes what it had created.
//!
//! ## Modules
//!
//! | module | what |
//! |---|---|
//! | `spec` | [`SimSpec`] and its layout, [`SimState`] (the state file's content), names and paths |
//! | `fabric` | building the namespaces, bridges, router and addresses; writing the state file |
//! | `control` | [`Sim`]: up, open, cutting and restoring links, down; [`SimGuard`] |
//! | `status` | [`SimStatus`]: what the kernel says of each node's rails |
//! | `ip` | running `ip` with a bounded wait; [`in_netns`] |

use std::{io, net::Ipv4Addr, path::PathBuf, time::Duration};

pub use switchyard_topo::MAX_RAILS;
use switchyard_topo::TopoFileError;

pub use crate::sys::enter_net_namespace;

mod control;
mod fabric;
mod ip;
mod spec;
mod status;

pub use control::{DownReport, Sim, SimGuard, down};
pub use ip::{in_netns, list_namespaces, list_sims, sim_namespaces};
pub use spec::{
    SimLeaf, SimNode, SimSpec, SimState, check_name, netns_path, read_topology, state_path,
};
pub use status::{NodeStatus, RailStatus, SimStatus};

/// The sim name used when none is given.
pub const DEFAULT_NAME: &str = "sy";
/// Longest sim name: namespaces are `NAME-n<i>` and must stay short.
pub const MAX_NAME_LEN: usize = 6;
/// Most nodes under one leaf switch (host addresses `.1` to `.250`).
pub const MAX_NODES_PER_LEAF: usize = 250;
/// Most leaf switches (the third octet of the rail addresses).
pub const MAX_LEAVES: usize = 250;
/// Where the state files live: `STATE_DIR/NAME.json`.
pub const STATE_DIR: &str = "/run/switchyard/sim";
/// Where `ip netns` keeps its namespace files.
pub const NETNS_DIR: &str = "/var/run/netns";
/// The management bridge's address, in the fabric namespace: the launcher
/// hosts the bootstrap rendezvous here under `switchyard run --sim`.
pub const MGMT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 99, 255, 254);
/// Longest wait for one external command.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest topology file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// Version of the state file's layout.
pub const STATE_VERSION: u32 = 1;

/// Why a sim operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A sim name that is empty, too long or not `[a-z0-9]`.
    #[error(
        "bad sim name '{0}' (expected 1 to {MAX_NAME_LEN} characters, lowercase letters and digits)"
    )]
    BadName(String),
    /// A rail count outside `1..=`[`MAX_RAILS`].
    #[error("bad number of rails {0} (expected 1 to {MAX_RAILS})")]
    BadRails(u32),
    /// Zero PEs per node.
    #[error("bad number of PEs per node 0 (expected at least 1)")]
    BadPesPerNode,
    /// The topology file cannot be read.
    #[error("cannot read topology file '{path}'")]
    ReadTopology {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The topology file is too large or not UTF-8.
    #[error("'{path}' is not a topology file ({why})")]
    NotTopology {
        /// The path.
        path: String,
        /// Why not.
        why: &'static str,
    },
    /// The topology file does not parse.
    #[error("{}", .error.in_file(.path))]
    Topology {
        /// The path.
        path: String,
        /// The error.
        error: TopoFileError,
    },
    /// A node under no leaf switch cannot be wired.
    #[error("node '{node}' is under no leaf switch; every node of a sim needs one")]
    NodeWithoutLeaf {
        /// Its name.
        node: String,
    },
    /// Too many nodes under one leaf.
    #[error("leaf switch '{switch}' has {nodes} nodes; a sim allows at most {MAX_NODES_PER_LEAF}")]
    TooManyNodes {
        /// The switch.
        switch: String,
        /// Its nodes.
        nodes: usize,
    },
    /// Too many leaf switches.
    #[error("the topology has {0} leaf switches; a sim allows at most {MAX_LEAVES}")]
    TooManyLeaves(usize),
    /// Not running as root.
    #[error("switchyard sim needs root (network namespaces, veth, bridges); effective uid is {0}")]
    NotRoot(u32),
    /// `ip` is not installed.
    #[error("switchyard sim needs iproute2's `ip` command, which was not found in PATH")]
    NoIp,
    /// A sim of that name is already up (or left over).
    #[error(
        "a sim named '{name}' already exists ({what}); run `switchyard sim down --name {name}` first"
    )]
    Exists {
        /// The name.
        name: String,
        /// What was found.
        what: String,
    },
    /// No sim of that name is up.
    #[error("no sim named '{0}' is up (no state file {STATE_DIR}/{0}.json)")]
    NotUp(String),
    /// A node reference that names no node.
    #[error("sim '{sim}' has no node '{node}' (nodes: 0 to {last}, or their host names)", last = .nodes.saturating_sub(1))]
    UnknownNode {
        /// The sim.
        sim: String,
        /// The reference given.
        node: String,
        /// How many nodes it has.
        nodes: usize,
    },
    /// A rail the sim does not have.
    #[error("sim '{sim}' has no rail {rail} (rails: 0 to {last})", last = .rails.saturating_sub(1))]
    UnknownRail {
        /// The sim.
        sim: String,
        /// The rail given.
        rail: u32,
        /// How many it has.
        rails: u32,
    },
    /// An external command could not be started.
    #[error("cannot run `{command}`")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An external command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// An external command did not finish in time (it was killed).
    #[error("`{command}` did not finish within {} s; killed it", .after.as_secs())]
    CommandTimeout {
        /// The command line.
        command: String,
        /// The bound.
        after: Duration,
    },
    /// Output of `ip -j` that does not parse.
    #[error("cannot parse the JSON output of `{command}`")]
    CommandOutput {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Reading, writing or removing the state file failed.
    #[error("cannot {what} the state file {path}")]
    StateFile {
        /// `read`, `write`, `remove`.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The state file does not parse.
    #[error("state file {path} is damaged; `switchyard sim down --name NAME` removes the sim")]
    BadStateFile {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Entering a namespace failed.
    #[error("cannot enter network namespace {path}")]
    EnterNamespace {
        /// Its file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Writing a sysctl inside a namespace failed.
    #[error("cannot set {key} in network namespace '{netns}'")]
    Sysctl {
        /// The namespace.
        netns: String,
        /// The sysctl.
        key: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A helper thread could not be started or died.
    #[error("cannot run a thread in network namespace '{netns}'")]
    Thread {
        /// The namespace.
        netns: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Tearing down failed to remove some namespaces.
    #[error("could not remove every namespace of sim '{name}': {}", .failures.join("; "))]
    Teardown {
        /// The sim.
        name: String,
        /// What failed.
        failures: Vec<String>,
    },
}

impl SimError {
    /// Whether the error is bad input or usage (the CLI exits 2) rather than
    /// a failure while running (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            SimError::BadName(_)
                | SimError::BadRails(_)
                | SimError::BadPesPerNode
                | SimError::ReadTopology { .. }
                | SimError::NotTopology { .. }
                | SimError::Topology { .. }
                | SimError::NodeWithoutLeaf { .. }
                | SimError::TooManyNodes { .. }
                | SimError::TooManyLeaves(_)
                | SimError::UnknownNode { .. }
                | SimError::UnknownRail { .. }
        )
    }
}

#[cfg(test)]
mod test;
