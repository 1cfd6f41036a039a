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

use std::{
    collections::HashSet,
    fmt,
    fs::{self, File},
    io::{self, Read},
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};
pub use switchyard_topo::MAX_RAILS;
use switchyard_topo::{ClusterSpec, Format, TopoFileError, parse_topology};

pub use crate::sys::enter_net_namespace;

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

/// First routing table of the router; (tree `t`, rail `r`) uses `BASE + 4t + r`.
const TABLE_BASE: u64 = 1000;

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

/// What to build: a topology, a name, PEs per node and rails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimSpec {
    /// The sim name ([`check_name`]).
    pub name: String,
    /// The cluster.
    pub cluster: ClusterSpec,
    /// PEs per node (recorded for `switchyard run --sim`).
    pub pes_per_node: u32,
    /// Rails (NICs per node), `1..=`[`MAX_RAILS`].
    pub rails: u32,
}

impl SimSpec {
    /// `cluster` under `name`, with the file's `pes_per_node` and `rails`
    /// (default 1 each).
    pub fn new(name: impl Into<String>, cluster: ClusterSpec) -> SimSpec {
        SimSpec {
            name: name.into(),
            pes_per_node: cluster.pes_per_node().unwrap_or(1),
            rails: cluster.rails().unwrap_or(1),
            cluster,
        }
    }

    /// Reads the topology file `path` (`-` is not accepted: a sim must be
    /// rebuildable from its file).
    ///
    /// # Errors
    ///
    /// [`SimError::ReadTopology`], [`SimError::NotTopology`],
    /// [`SimError::Topology`].
    pub fn from_file(name: impl Into<String>, path: &Path) -> Result<SimSpec, SimError> {
        Ok(SimSpec::new(name, read_topology(path)?))
    }

    /// Computes the layout (names and addresses) without building anything.
    ///
    /// # Errors
    ///
    /// Bad name, rails or PEs per node, a node under no leaf, too many nodes
    /// per leaf or leaves.
    pub fn plan(&self) -> Result<SimState, SimError> {
        plan(self)
    }
}

/// Reads and parses a topology file.
///
/// # Errors
///
/// [`SimError::ReadTopology`], [`SimError::NotTopology`] (too large, not
/// UTF-8), [`SimError::Topology`].
pub fn read_topology(path: &Path) -> Result<ClusterSpec, SimError> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|source| SimError::ReadTopology {
        path: shown.clone(),
        source,
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| SimError::ReadTopology {
            path: shown.clone(),
            source,
        })?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(SimError::NotTopology {
            path: shown,
            why: "larger than 64 MiB",
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| SimError::NotTopology {
        path: shown.clone(),
        why: "not UTF-8 text",
    })?;
    let format = match Format::from_path(&shown) {
        Format::Auto => Format::sniff(&text),
        f => f,
    };
    parse_topology(&text, format).map_err(|error| SimError::Topology { path: shown, error })
}

/// Checks a sim name: 1 to [`MAX_NAME_LEN`] characters `[a-z0-9]`.
///
/// # Errors
///
/// [`SimError::BadName`].
pub fn check_name(name: &str) -> Result<(), SimError> {
    if name.is_empty()
        || name.len() > MAX_NAME_LEN
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(SimError::BadName(name.into()));
    }
    Ok(())
}

/// One node of a sim, as recorded in its state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimNode {
    /// Node index (its node id in the topology).
    pub index: u32,
    /// Host name in the topology.
    pub host: String,
    /// Its network namespace: `NAME-n<index>`.
    pub netns: String,
    /// Leaf switch id (the switch id of its PEs).
    pub leaf: u32,
    /// The leaf switch's name.
    pub switch: String,
    /// Tree id of its leaf.
    pub tree: u32,
    /// Its address on each rail, in rail order (interface `r<rail>`).
    pub addrs: Vec<Ipv4Addr>,
    /// Its router on each rail.
    pub gateways: Vec<Ipv4Addr>,
    /// Its management address (interface `mg`).
    pub mgmt: Ipv4Addr,
}

/// One leaf switch of a sim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimLeaf {
    /// Leaf id.
    pub leaf: u32,
    /// Switch name.
    pub switch: String,
    /// Tree id.
    pub tree: u32,
    /// Its nodes, by index.
    pub nodes: Vec<u32>,
}

/// Everything about a sim: its state file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// The name.
    pub name: String,
    /// Rails per node.
    pub rails: u32,
    /// PEs per node for `switchyard run --sim`.
    pub pes_per_node: u32,
    /// The fabric namespace (bridges): `NAME-fab`.
    pub fabric_netns: String,
    /// The router namespace: `NAME-rt`.
    pub router_netns: String,
    /// The management bridge's address ([`MGMT_ADDR`]).
    pub mgmt_addr: Ipv4Addr,
    /// Leaf switches, by leaf id.
    pub leaves: Vec<SimLeaf>,
    /// Nodes, by index.
    pub nodes: Vec<SimNode>,
}

impl SimState {
    /// Every namespace of the sim: nodes, fabric, router.
    pub fn namespaces(&self) -> Vec<String> {
        let mut all: Vec<String> = self.nodes.iter().map(|n| n.netns.clone()).collect();
        all.push(self.fabric_netns.clone());
        all.push(self.router_netns.clone());
        all
    }

    /// The node `reference` names: an index or a host name.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownNode`].
    pub fn find_node(&self, reference: &str) -> Result<&SimNode, SimError> {
        let by_index = reference
            .parse::<usize>()
            .ok()
            .and_then(|i| self.nodes.get(i));
        by_index
            .or_else(|| self.nodes.iter().find(|n| n.host == reference))
            .ok_or_else(|| SimError::UnknownNode {
                sim: self.name.clone(),
                node: reference.into(),
                nodes: self.nodes.len(),
            })
    }
}

/// The layout of `spec`: names and addresses, nothing built.
fn plan(spec: &SimSpec) -> Result<SimState, SimError> {
    check_name(&spec.name)?;
    if spec.rails == 0 || spec.rails > MAX_RAILS {
        return Err(SimError::BadRails(spec.rails));
    }
    if spec.pes_per_node == 0 {
        return Err(SimError::BadPesPerNode);
    }
    let cluster = &spec.cluster;
    let n_leaves = cluster.leaves().len();
    if n_leaves > MAX_LEAVES {
        return Err(SimError::TooManyLeaves(n_leaves));
    }
    let mut leaves = Vec::with_capacity(n_leaves);
    for leaf in 0..n_leaves as u32 {
        let Some(switch) = cluster.leaf_switch(leaf) else {
            continue;
        };
        if switch.nodes.len() > MAX_NODES_PER_LEAF {
            return Err(SimError::TooManyNodes {
                switch: switch.name.clone(),
                nodes: switch.nodes.len(),
            });
        }
        leaves.push(SimLeaf {
            leaf,
            switch: switch.name.clone(),
            tree: switch.tree,
            nodes: switch.nodes.clone(),
        });
    }
    let mut nodes = Vec::with_capacity(cluster.nodes().len());
    for (i, node) in cluster.nodes().iter().enumerate() {
        let i = i as u32;
        let leaf = cluster.node_locality(i).switch;
        let Some(l) = leaves.iter().find(|l| l.leaf == leaf) else {
            return Err(SimError::NodeWithoutLeaf {
                node: node.name.clone(),
            });
        };
        // Below 250 by the leaf check above.
        let k = l.nodes.iter().position(|&n| n == i).unwrap_or(0) as u8;
        let s = leaf as u8;
        let addrs = (0..spec.rails as u8)
            .map(|r| Ipv4Addr::new(10, 100 + r, s, k + 1))
            .collect();
        let gateways = (0..spec.rails as u8)
            .map(|r| Ipv4Addr::new(10, 100 + r, s, 254))
            .collect();
        // At most 250 leaves x 250 nodes: i / 250 < 250.
        let mgmt = Ipv4Addr::new(10, 99, (i / 250) as u8, (i % 250 + 1) as u8);
        nodes.push(SimNode {
            index: i,
            host: node.name.clone(),
            netns: format!("{}-n{i}", spec.name),
            leaf,
            switch: l.switch.clone(),
            tree: l.tree,
            addrs,
            gateways,
            mgmt,
        });
    }
    Ok(SimState {
        version: STATE_VERSION,
        name: spec.name.clone(),
        rails: spec.rails,
        pes_per_node: spec.pes_per_node,
        fabric_netns: format!("{}-fab", spec.name),
        router_netns: format!("{}-rt", spec.name),
        mgmt_addr: MGMT_ADDR,
        leaves,
        nodes,
    })
}

/// The state file of sim `name`.
pub fn state_path(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("{name}.json"))
}

/// The file of network namespace `netns` (for `setns`).
pub fn netns_path(netns: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(netns)
}

/// Whether `ns` is a namespace of sim `name`: `NAME-fab`, `NAME-rt` or
/// `NAME-n<digits>`.
fn belongs_to(ns: &str, name: &str) -> bool {
    let Some(rest) = ns.strip_prefix(name).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    rest == "fab"
        || rest == "rt"
        || rest
            .strip_prefix('n')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// A running sim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sim {
    state: SimState,
}

/// What [`down`] removed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DownReport {
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
    /// Whether a state file was removed.
    pub state_file: bool,
}

impl DownReport {
    /// Nothing was there.
    pub fn nothing(&self) -> bool {
        self.namespaces.is_empty() && !self.state_file
    }
}

/// The state of one rail of one node, read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RailStatus {
    /// The rail.
    pub rail: u32,
    /// The node's address on it (from the state file).
    pub addr: Ipv4Addr,
    /// Whether the node has the interface at all.
    pub present: bool,
    /// The node's `r<rail>` is administratively up.
    pub admin_up: bool,
    /// It has a carrier (`LOWER_UP`).
    pub carrier: bool,
    /// The kernel's operstate (`UP`, `DOWN`, ...).
    pub operstate: String,
    /// The switch end (in the fabric) is up: false after `link down`.
    pub switch_port_up: bool,
    /// The addresses the kernel has on it.
    pub kernel_addrs: Vec<String>,
}

impl RailStatus {
    /// `up`, `cut` (switch end down), `down` (node end down) or `missing`.
    pub fn word(&self) -> &'static str {
        if !self.present {
            "missing"
        } else if !self.switch_port_up {
            "cut"
        } else if !self.admin_up {
            "down"
        } else if self.carrier {
            "up"
        } else {
            "no-carrier"
        }
    }
}

/// One node's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// The node.
    pub node: SimNode,
    /// Whether its namespace exists.
    pub netns_present: bool,
    /// Each rail.
    pub rails: Vec<RailStatus>,
}

/// A sim's status: the state file and what the kernel says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SimStatus {
    /// The sim's name.
    pub name: String,
    /// Rails per node.
    pub rails: u32,
    /// PEs per node.
    pub pes_per_node: u32,
    /// Leaf switches.
    pub leaves: Vec<SimLeaf>,
    /// Nodes.
    pub nodes: Vec<NodeStatus>,
}

impl fmt::Display for SimStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let trees: HashSet<u32> = self.leaves.iter().map(|l| l.tree).collect();
        writeln!(
            f,
            "sim {}: {} node(s), {} leaf switch(es), {} tree(s), {} rail(s), {} PE(s) per node",
            self.name,
            self.nodes.len(),
            self.leaves.len(),
            trees.len(),
            self.rails,
            self.pes_per_node
        )?;
        write!(
            f,
            "{:<5} {:<12} {:<10} {:<14} {:<5} {:<13}",
            "node", "host", "netns", "leaf", "tree", "mg"
        )?;
        for r in 0..self.rails {
            write!(f, " {:<22}", format!("r{r}"))?;
        }
        writeln!(f)?;
        for n in &self.nodes {
            let leaf = format!("{} ({})", n.node.leaf, n.node.switch);
            let netns = if n.netns_present {
                n.node.netns.clone()
            } else {
                format!("{} (gone)", n.node.netns)
            };
            write!(
                f,
                "{:<5} {:<12} {:<10} {:<14} {:<5} {:<13}",
                n.node.index,
                n.node.host,
                netns,
                leaf,
                n.node.tree,
                n.node.mgmt.to_string()
            )?;
            for r in &n.rails {
                write!(f, " {:<22}", format!("{} {}", r.addr, r.word()))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl Sim {
    /// Builds the sim `spec` describes and writes its state file.
    ///
    /// # Errors
    ///
    /// Bad input ([`SimSpec::plan`]), [`SimError::NotRoot`],
    /// [`SimError::NoIp`], [`SimError::Exists`] when a sim of that name (or
    /// namespaces of one) is there, or a failed command; then whatever was
    /// created is removed again before the error is returned.
    pub fn up(spec: &SimSpec) -> Result<Sim, SimError> {
        let state = plan(spec)?;
        check_environment()?;
        let path = state_path(&state.name);
        if path.exists() {
            return Err(SimError::Exists {
                name: state.name.clone(),
                what: format!("state file {}", path.display()),
            });
        }
        let leftovers = sim_namespaces(&state.name)?;
        if !leftovers.is_empty() {
            return Err(SimError::Exists {
                name: state.name.clone(),
                what: format!("namespaces {}", leftovers.join(", ")),
            });
        }
        match build(&state) {
            Ok(()) => Ok(Sim { state }),
            Err(e) => {
                if let Err(cleanup) = down_inner(&state.name, Some(&state)) {
                    eprintln!(
                        "switchyard sim: cleaning up after a failed `up` also failed: {cleanup}"
                    );
                }
                Err(e)
            }
        }
    }

    /// The sim `name` that is up, from its state file.
    ///
    /// # Errors
    ///
    /// [`SimError::BadName`], [`SimError::NotUp`], or a state file that
    /// cannot be read or parsed.
    pub fn open(name: &str) -> Result<Sim, SimError> {
        check_name(name)?;
        let path = state_path(name);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SimError::NotUp(name.into()));
            }
            Err(source) => {
                return Err(SimError::StateFile {
                    what: "read",
                    path,
                    source,
                });
            }
        };
        let state: SimState = serde_json::from_str(&text)
            .map_err(|source| SimError::BadStateFile { path, source })?;
        Ok(Sim { state })
    }

    /// Whether a sim `name` is up (its state file exists).
    pub fn is_up(name: &str) -> bool {
        check_name(name).is_ok() && state_path(name).exists()
    }

    /// The sim's layout.
    pub fn state(&self) -> &SimState {
        &self.state
    }

    /// The sim's name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// The namespace of node `i`, if the sim has that node.
    pub fn node_netns(&self, i: u32) -> Option<&str> {
        self.state.nodes.get(i as usize).map(|n| n.netns.as_str())
    }

    /// Cuts (`up == false`) or restores the cable of `node`'s `rail`, or of
    /// every rail when `rail` is `None` (see the module doc).
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownNode`], [`SimError::UnknownRail`], or a failed
    /// command.
    pub fn link(&self, node: &str, rail: Option<u32>, up: bool) -> Result<(), SimError> {
        let n = self.state.find_node(node)?;
        let rails: Vec<u32> = match rail {
            Some(r) if r >= self.state.rails => {
                return Err(SimError::UnknownRail {
                    sim: self.state.name.clone(),
                    rail: r,
                    rails: self.state.rails,
                });
            }
            Some(r) => vec![r],
            None => (0..self.state.rails).collect(),
        };
        for r in rails {
            let port = format!("n{}r{r}", n.index);
            ip(&[
                "-n",
                &self.state.fabric_netns,
                "link",
                "set",
                &port,
                if up { "up" } else { "down" },
            ])?;
        }
        Ok(())
    }

    /// Reads the state of every node's rails from the kernel.
    ///
    /// # Errors
    ///
    /// A failed command (a missing namespace is reported in the status, not
    /// as an error).
    pub fn status(&self) -> Result<SimStatus, SimError> {
        let present: HashSet<String> = list_namespaces()?.into_iter().collect();
        let fabric = if present.contains(&self.state.fabric_netns) {
            ip_json(&["-n", &self.state.fabric_netns, "-j", "link", "show"])?
        } else {
            Vec::new()
        };
        let mut nodes = Vec::with_capacity(self.state.nodes.len());
        for n in &self.state.nodes {
            let netns_present = present.contains(&n.netns);
            let links = if netns_present {
                ip_json(&["-n", &n.netns, "-j", "addr", "show"])?
            } else {
                Vec::new()
            };
            let rails = (0..self.state.rails)
                .map(|r| {
                    let iface = find_iface(&links, &format!("r{r}"));
                    let port = find_iface(&fabric, &format!("n{}r{r}", n.index));
                    let flags = |v: Option<&serde_json::Value>, flag: &str| {
                        v.and_then(|v| v.get("flags"))
                            .and_then(|f| f.as_array())
                            .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(flag)))
                    };
                    RailStatus {
                        rail: r,
                        addr: n
                            .addrs
                            .get(r as usize)
                            .copied()
                            .unwrap_or(Ipv4Addr::UNSPECIFIED),
                        present: iface.is_some(),
                        admin_up: flags(iface, "UP"),
                        carrier: flags(iface, "LOWER_UP"),
                        operstate: iface
                            .and_then(|v| v.get("operstate"))
                            .and_then(|s| s.as_str())
                            .unwrap_or("MISSING")
                            .to_string(),
                        switch_port_up: flags(port, "UP"),
                        kernel_addrs: iface
                            .and_then(|v| v.get("addr_info"))
                            .and_then(|a| a.as_array())
                            .map(|a| {
                                a.iter()
                                    .filter_map(|x| {
                                        Some(format!(
                                            "{}/{}",
                                            x.get("local")?.as_str()?,
                                            x.get("prefixlen")?.as_u64()?
                                        ))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                    }
                })
                .collect();
            nodes.push(NodeStatus {
                node: n.clone(),
                netns_present,
                rails,
            });
        }
        Ok(SimStatus {
            name: self.state.name.clone(),
            rails: self.state.rails,
            pes_per_node: self.state.pes_per_node,
            leaves: self.state.leaves.clone(),
            nodes,
        })
    }

    /// Tears the sim down ([`down`]).
    ///
    /// # Errors
    ///
    /// As [`down`].
    pub fn down(self) -> Result<DownReport, SimError> {
        down_inner(&self.state.name, Some(&self.state))
    }
}

/// Tears down sim `name`: deletes every namespace named in its state file and
/// every `NAME-fab`, `NAME-rt`, `NAME-n<i>` that `ip netns list` shows (so
/// it also cleans up after a crash), then the state file. Idempotent: when
/// nothing was there it returns an empty report.
///
/// # Errors
///
/// [`SimError::BadName`], [`SimError::NotRoot`], [`SimError::NoIp`],
/// [`SimError::Teardown`] naming the namespaces that could not be deleted, or
/// a state file that cannot be removed.
pub fn down(name: &str) -> Result<DownReport, SimError> {
    check_name(name)?;
    let state = Sim::open(name).ok().map(|s| s.state);
    down_inner(name, state.as_ref())
}

fn down_inner(name: &str, state: Option<&SimState>) -> Result<DownReport, SimError> {
    check_environment()?;
    let listed = sim_namespaces(name)?;
    let mut wanted: Vec<String> = listed.clone();
    if let Some(state) = state {
        for ns in state.namespaces() {
            if !wanted.contains(&ns) && netns_path(&ns).exists() {
                wanted.push(ns);
            }
        }
    }
    let mut report = DownReport::default();
    let mut failures = Vec::new();
    for ns in wanted {
        match ip(&["netns", "del", &ns]) {
            Ok(_) => report.namespaces.push(ns),
            Err(e) => {
                if netns_path(&ns).exists() {
                    failures.push(format!("{ns}: {e}"));
                }
            }
        }
    }
    let path = state_path(name);
    match fs::remove_file(&path) {
        Ok(()) => report.state_file = true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(SimError::StateFile {
                what: "remove",
                path,
                source,
            });
        }
    }
    if !failures.is_empty() {
        return Err(SimError::Teardown {
            name: name.into(),
            failures,
        });
    }
    Ok(report)
}

/// A sim torn down when dropped: for tests and tools.
#[derive(Debug)]
pub struct SimGuard {
    sim: Option<Sim>,
}

impl SimGuard {
    /// Brings up `spec` ([`Sim::up`]) under a guard.
    ///
    /// # Errors
    ///
    /// As [`Sim::up`].
    pub fn up(spec: &SimSpec) -> Result<SimGuard, SimError> {
        Ok(SimGuard {
            sim: Some(Sim::up(spec)?),
        })
    }

    /// Guards a sim that is already up.
    pub fn new(sim: Sim) -> SimGuard {
        SimGuard { sim: Some(sim) }
    }

    /// The sim.
    pub fn sim(&self) -> &Sim {
        // Only `down` and `drop` take it, and both consume the guard.
        self.sim.as_ref().unwrap_or_else(|| unreachable!())
    }

    /// Tears the sim down now, reporting errors (dropping does it silently).
    ///
    /// # Errors
    ///
    /// As [`down`].
    pub fn down(mut self) -> Result<DownReport, SimError> {
        match self.sim.take() {
            Some(sim) => sim.down(),
            None => Ok(DownReport::default()),
        }
    }
}

impl std::ops::Deref for SimGuard {
    type Target = Sim;
    fn deref(&self) -> &Sim {
        self.sim()
    }
}

impl Drop for SimGuard {
    fn drop(&mut self) {
        if let Some(sim) = self.sim.take() {
            let name = sim.state.name.clone();
            if let Err(e) = sim.down() {
                eprintln!("switchyard sim: cannot tear down sim '{name}': {e}");
            }
        }
    }
}

/// Runs `f` on a new thread inside network namespace `netns` (a name under
/// [`NETNS_DIR`]) and returns its result; the calling thread's namespace is
/// untouched. Sockets created by `f` stay in `netns` wherever they are used.
///
/// # Errors
///
/// [`SimError::EnterNamespace`] when the namespace cannot be opened or
/// entered, [`SimError::Thread`] when the thread cannot start or panics.
pub fn in_netns<R, F>(netns: &str, f: F) -> Result<R, SimError>
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    let path = netns_path(netns);
    let file = File::open(&path).map_err(|source| SimError::EnterNamespace {
        path: path.clone(),
        source,
    })?;
    let thread_err = |source| SimError::Thread {
        netns: netns.into(),
        source,
    };
    let handle = thread::Builder::new()
        .name(format!("netns-{netns}"))
        .spawn(move || -> Result<R, SimError> {
            crate::sys::enter_net_namespace(&file)
                .map_err(|source| SimError::EnterNamespace { path, source })?;
            Ok(f())
        })
        .map_err(thread_err)?;
    handle
        .join()
        .map_err(|_| thread_err(io::Error::other("the thread panicked")))?
}

/// Root and `ip`, or why not.
fn check_environment() -> Result<(), SimError> {
    let uid = crate::sys::effective_uid();
    if uid != 0 {
        return Err(SimError::NotRoot(uid));
    }
    ip(&["-V"]).map(|_| ())
}

/// Builds everything in `state`; on error the caller tears down.
fn build(state: &SimState) -> Result<(), SimError> {
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

/// Every namespace `ip netns list` shows.
///
/// # Errors
///
/// A failed `ip`.
pub fn list_namespaces() -> Result<Vec<String>, SimError> {
    let out = ip(&["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The namespaces of sim `name` that exist now.
///
/// # Errors
///
/// A failed `ip`.
pub fn sim_namespaces(name: &str) -> Result<Vec<String>, SimError> {
    Ok(list_namespaces()?
        .into_iter()
        .filter(|ns| belongs_to(ns, name))
        .collect())
}

/// The names of the sims that have a state file.
pub fn list_sims() -> Vec<String> {
    let Ok(dir) = fs::read_dir(STATE_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(str::to_string)
        })
        .filter(|n| check_name(n).is_ok())
        .collect();
    names.sort();
    names
}

fn find_iface<'a>(links: &'a [serde_json::Value], name: &str) -> Option<&'a serde_json::Value> {
    links
        .iter()
        .find(|l| l.get("ifname").and_then(|n| n.as_str()) == Some(name))
}

fn ip_json(args: &[&str]) -> Result<Vec<serde_json::Value>, SimError> {
    let out = ip(args)?;
    if out.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(&out).map_err(|source| SimError::CommandOutput {
        command: command_line(args),
        source,
    })
}

fn command_line(args: &[&str]) -> String {
    let mut s = String::from("ip");
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// Runs `ip ARGS` with a bounded wait; returns its stdout.
fn ip(args: &[&str]) -> Result<String, SimError> {
    let command = command_line(args);
    let child = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(SimError::NoIp),
        Err(source) => return Err(SimError::Spawn { command, source }),
    };
    run_bounded(child, command, COMMAND_TIMEOUT)
}

/// Waits up to `bound` for `child`, collecting its output; kills it after.
fn run_bounded(mut child: Child, command: String, bound: Duration) -> Result<String, SimError> {
    fn reader(pipe: Option<impl Read + Send + 'static>) -> Option<thread::JoinHandle<Vec<u8>>> {
        let mut pipe = pipe?;
        thread::Builder::new()
            .spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.read_to_end(&mut buf);
                buf
            })
            .ok()
    }
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let until = Instant::now() + bound;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(1)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SimError::CommandTimeout {
                    command,
                    after: bound,
                });
            }
            Err(source) => {
                let _ = child.kill();
                return Err(SimError::Spawn { command, source });
            }
        }
    };
    let collect = |h: Option<thread::JoinHandle<Vec<u8>>>| {
        h.and_then(|h| h.join().ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let stdout = collect(out);
    let stderr = collect(err);
    if status.success() {
        Ok(stdout)
    } else {
        Err(SimError::Command {
            command,
            status: status.to_string(),
            stderr: stderr.trim().to_string(),
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn names() {
        for good in ["sy", "t1", "abcdef", "0"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "abcdefg", "A", "a-b", "a b", "é"] {
            assert!(
                matches!(check_name(bad), Err(SimError::BadName(_))),
                "{bad}"
            );
        }
        assert!(belongs_to("sy-fab", "sy"));
        assert!(belongs_to("sy-rt", "sy"));
        assert!(belongs_to("sy-n12", "sy"));
        assert!(!belongs_to("sy-n", "sy"));
        assert!(!belongs_to("sy-nx", "sy"));
        assert!(!belongs_to("syx-n0", "sy"));
        assert!(!belongs_to("s-n0", "sy"));
        assert!(!belongs_to("sy-other", "sy"));
    }

    #[test]
    fn plan_of_the_example() {
        let mut spec = SimSpec::new("ex", ClusterSpec::example());
        assert_eq!(spec.pes_per_node, 2);
        assert_eq!(spec.rails, 1);
        spec.rails = 2;
        let st = spec.plan().unwrap();
        assert_eq!(st.nodes.len(), 4);
        assert_eq!(st.leaves.len(), 2);
        assert_eq!(st.fabric_netns, "ex-fab");
        assert_eq!(st.router_netns, "ex-rt");
        let n3 = &st.nodes[3];
        assert_eq!(n3.netns, "ex-n3");
        assert_eq!(n3.leaf, 1);
        assert_eq!(
            n3.addrs,
            vec![Ipv4Addr::new(10, 100, 1, 2), Ipv4Addr::new(10, 101, 1, 2)]
        );
        assert_eq!(n3.gateways[1], Ipv4Addr::new(10, 101, 1, 254));
        assert_eq!(n3.mgmt, Ipv4Addr::new(10, 99, 0, 4));
        assert_eq!(st.nodes[0].tree, st.nodes[3].tree);
        assert_eq!(st.find_node("3").unwrap().index, 3);
        assert_eq!(st.find_node("node01").unwrap().index, 0);
        assert!(matches!(
            st.find_node("9"),
            Err(SimError::UnknownNode { .. })
        ));
        // Round trip through the state file format.
        let json = serde_json::to_string(&st).unwrap();
        assert_eq!(serde_json::from_str::<SimState>(&json).unwrap(), st);
    }

    #[test]
    fn plan_rejects_bad_input() {
        let mut spec = SimSpec::new("toolong1", ClusterSpec::example());
        assert!(matches!(spec.plan(), Err(SimError::BadName(_))));
        spec.name = "ok".into();
        for rails in [0, 5] {
            spec.rails = rails;
            let e = spec.plan().unwrap_err();
            assert!(matches!(e, SimError::BadRails(r) if r == rails));
            assert!(e.is_usage());
        }
        spec.rails = 1;
        spec.pes_per_node = 0;
        assert!(matches!(spec.plan(), Err(SimError::BadPesPerNode)));

        let big = parse_topology("SwitchName=s0 Nodes=n[1-251]\n", Format::Slurm).unwrap();
        let e = SimSpec::new("ok", big).plan().unwrap_err();
        assert!(
            matches!(e, SimError::TooManyNodes { nodes: 251, .. }),
            "{e}"
        );

        let stray = parse_topology(
            "nodes = \"a,b\"\n[[switch]]\nname = \"s0\"\nnodes = \"a\"\n",
            Format::Toml,
        )
        .unwrap();
        let e = SimSpec::new("ok", stray).plan().unwrap_err();
        assert!(
            matches!(e, SimError::NodeWithoutLeaf { ref node } if node == "b"),
            "{e}"
        );
    }

    #[test]
    fn missing_topology_file() {
        let e = SimSpec::from_file("ok", Path::new("/nonexistent/topo.conf")).unwrap_err();
        assert!(matches!(e, SimError::ReadTopology { .. }));
        assert!(e.to_string().contains("/nonexistent/topo.conf"), "{e}");
    }
}
