//! [`ClusterSpec`]: the checked topology (its [`Node`]s and [`Switch`]es) and
//! its queries: localities, and the path class of any pair of PEs or nodes.

use switchyard_core::class::{InterSwitch, Locality, NO_SWITCH, PathClass, class_between};

use crate::{EXAMPLE_TOML, Format, MAX_PES, TopoErrorKind, TopoFileError, parse_topology};

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Node {
    /// Host name.
    pub name: String,
    /// Index into [`ClusterSpec::switches`] of its leaf switch, `None` when it is
    /// under no switch.
    pub switch: Option<u32>,
}

/// One switch of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Switch {
    /// Name.
    pub name: String,
    /// Line it is defined on.
    pub line: u32,
    /// Leaf id (the `switch` of a [`Locality`]) when it has nodes.
    pub leaf: Option<u32>,
    /// Tree id: switches with equal ids are linked.
    pub tree: u32,
    /// Child switches, as indices into [`ClusterSpec::switches`].
    pub children: Vec<u32>,
    /// Nodes of the job under it, as node ids.
    pub nodes: Vec<u32>,
}

/// A parsed, checked cluster topology: nodes, switches and which leaves are
/// linked. Its queries never panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    pub(crate) format: Format,
    pub(crate) pes_per_node: Option<u32>,
    pub(crate) rails: Option<u32>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) switches: Vec<Switch>,
    /// Leaf id → switch index.
    pub(crate) leaves: Vec<u32>,
    pub(crate) trees: u32,
}

impl ClusterSpec {
    /// The built-in example ([`EXAMPLE_TOML`]).
    pub fn example() -> ClusterSpec {
        // The example is a constant checked by a unit test; should it ever fail
        // to parse, an empty one-node spec is returned rather than a panic.
        parse_topology(EXAMPLE_TOML, Format::Toml).unwrap_or_else(|_| ClusterSpec {
            format: Format::Toml,
            pes_per_node: None,
            rails: None,
            nodes: vec![Node {
                name: "localhost".into(),
                switch: None,
            }],
            switches: Vec::new(),
            leaves: Vec::new(),
            trees: 0,
        })
    }

    /// The syntax the file was read as.
    pub fn format(&self) -> Format {
        self.format
    }

    /// `pes_per_node` from the file (TOML only), if it gives one.
    pub fn pes_per_node(&self) -> Option<u32> {
        self.pes_per_node
    }

    /// `rails` (NICs per node, `1..=`[`MAX_RAILS`](crate::MAX_RAILS)) from the file (TOML only),
    /// if it gives one. Only `switchyard sim` uses it.
    pub fn rails(&self) -> Option<u32> {
        self.rails
    }

    /// The job's nodes; node ids are indices into this slice.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Every switch, in file order.
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// Leaf switches: leaf id → index into [`switches`](Self::switches).
    pub fn leaves(&self) -> &[u32] {
        &self.leaves
    }

    /// Number of trees (sets of linked switches) holding at least one leaf.
    pub fn trees(&self) -> u32 {
        self.trees
    }

    /// The leaf switch of `leaf` id.
    pub fn leaf_switch(&self, leaf: u32) -> Option<&Switch> {
        self.switches.get(*self.leaves.get(leaf as usize)? as usize)
    }

    /// PEs in the job: nodes × `pes_per_node`.
    ///
    /// # Errors
    /// [`TopoErrorKind::ZeroPesPerNode`], or [`TopoErrorKind::TooManyPes`] above
    /// [`MAX_PES`].
    pub fn n_pes(&self, pes_per_node: u32) -> Result<u32, TopoFileError> {
        if pes_per_node == 0 {
            return Err(TopoFileError::whole(TopoErrorKind::ZeroPesPerNode));
        }
        let n = self.nodes.len() as u64 * pes_per_node as u64;
        if n > MAX_PES as u64 {
            return Err(TopoFileError::whole(TopoErrorKind::TooManyPes {
                nodes: self.nodes.len(),
                pes_per_node,
                max: MAX_PES,
            }));
        }
        Ok(n as u32)
    }

    /// The locality of node `node`: its id and its leaf id (or [`NO_SWITCH`]).
    pub fn node_locality(&self, node: u32) -> Locality {
        let switch = self
            .nodes
            .get(node as usize)
            .and_then(|n| n.switch)
            .and_then(|s| self.switches.get(s as usize))
            .and_then(|s| s.leaf)
            .unwrap_or(NO_SWITCH);
        Locality { node, switch }
    }

    /// One entry per PE: node id, leaf switch id ([`NO_SWITCH`] for a node under
    /// no switch).
    ///
    /// # Errors
    /// As [`n_pes`](Self::n_pes).
    pub fn localities(&self, pes_per_node: u32) -> Result<Vec<Locality>, TopoFileError> {
        let n = self.n_pes(pes_per_node)?;
        Ok((0..n)
            .map(|pe| self.node_locality(pe / pes_per_node))
            .collect())
    }

    /// How leaves `a` and `b` (leaf ids) are linked: [`InterSwitch::Routed`]
    /// when they are in the same tree.
    pub fn inter_switch(&self, a: u32, b: u32) -> InterSwitch {
        let tree = |l: u32| self.leaf_switch(l).map(|s| s.tree);
        match (tree(a), tree(b)) {
            (Some(x), Some(y)) if x == y => InterSwitch::Routed,
            _ => InterSwitch::None,
        }
    }

    /// The class between nodes `a` and `b` for PEs `pa` and `pb` on them.
    fn class_of_nodes(&self, pa: u32, a: u32, pb: u32, b: u32) -> PathClass {
        let (la, lb) = (self.node_locality(a), self.node_locality(b));
        class_between(pa, la, pb, lb, self.inter_switch(la.switch, lb.switch))
    }

    /// The class of the ordered pair of PEs (`a`, `b`) with `pes_per_node` PEs
    /// per node. Never panics: a PE outside the job (or `pes_per_node == 0`)
    /// gives [`PathClass::Unreachable`].
    pub fn class_of(&self, pes_per_node: u32, a: u32, b: u32) -> PathClass {
        if pes_per_node == 0 {
            return PathClass::Unreachable;
        }
        let n = self.nodes.len() as u64 * pes_per_node as u64;
        if a as u64 >= n || b as u64 >= n {
            return PathClass::Unreachable;
        }
        self.class_of_nodes(a, a / pes_per_node, b, b / pes_per_node)
    }

    /// The class between two different PEs on nodes `a` and `b` (`SHM` when
    /// `a == b`), `Unreachable` for a node outside the job.
    pub fn node_class(&self, a: u32, b: u32) -> PathClass {
        if a as usize >= self.nodes.len() || b as usize >= self.nodes.len() {
            return PathClass::Unreachable;
        }
        // PE ids 0 and 1 only tell class_between the PEs differ.
        self.class_of_nodes(0, a, 1, b)
    }
}
