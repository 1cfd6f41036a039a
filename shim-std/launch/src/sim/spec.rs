//! What a sim is: its spec, the layout planned from it (names, addresses),
//! which is also its state file, and where its files live.

use std::{
    fs::File,
    io::Read,
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use switchyard_topo::{ClusterSpec, Format, parse_topology};

use super::{
    MAX_FILE_BYTES, MAX_LEAVES, MAX_NAME_LEN, MAX_NODES_PER_LEAF, MAX_RAILS, MGMT_ADDR, NETNS_DIR,
    STATE_DIR, STATE_VERSION, SimError,
};

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
pub(super) fn plan(spec: &SimSpec) -> Result<SimState, SimError> {
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
pub(super) fn belongs_to(ns: &str, name: &str) -> bool {
    let Some(rest) = ns.strip_prefix(name).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    rest == "fab"
        || rest == "rt"
        || rest
            .strip_prefix('n')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}
