//! Cluster topology files and the path classes they imply.
//!
//! Two syntaxes are read:
//!
//! * **Slurm `topology.conf`** (topology/tree plugin): one switch per line,
//!   `SwitchName=NAME [Nodes=HOSTLIST] [Switches=HOSTLIST] [LinkSpeed=N]`. Keys are
//!   case-insensitive, `#` starts a comment, a `\` at the end of a line continues
//!   it, `LinkSpeed` is accepted and ignored.
//! * **TOML**:
//!   ```toml
//!   pes_per_node = 2            # optional
//!   rails = 2                   # optional: NICs (rails) per node, 1 to 4
//!   nodes = "node[01-05]"       # optional: the job's nodes, in PE order
//!   [[switch]]
//!   name = "leaf0"
//!   nodes = "node[01-02]"       # a hostlist, or an array of hostlists
//!   [[switch]]
//!   name = "spine"
//!   switches = ["leaf0", "leaf1"]
//!   ```
//!
//! # From switches to classes
//!
//! A switch with nodes is a *leaf switch*; a switch with child switches joins
//! them (a router or spine). Switches linked through any chain of parent/child
//! links form one *tree*. For two PEs:
//!
//! | condition | class |
//! |---|---|
//! | same PE | `LOCAL` |
//! | same node | `SHM` |
//! | same leaf switch | `NEAR` |
//! | leaves in the same tree | `ROUTED` |
//! | otherwise, or a node under no switch | `UNREACHABLE` |
//!
//! PEs are numbered block-wise: PE `p` runs on node `p / pes_per_node`. Nodes are
//! numbered in order of first appearance in the file, or in the order of the
//! TOML `nodes` list when there is one (nodes listed there but under no switch
//! reach nobody; nodes under a switch but not listed are not part of the job).
//!
//! Every error is a value naming the line, the token and what was expected;
//! nothing here panics on any input, and hostlist expansion is capped at
//! [`MAX_HOSTS`] names per file.

#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod hostlist;

use std::{collections::HashMap, fmt};

use serde::Deserialize;
use switchyard_core::class::{InterSwitch, Locality, NO_SWITCH, PathClass, class_between};

use crate::hostlist::{HostlistError, MAX_HOSTS};

/// Most PEs a topology may describe (nodes × PEs per node): 4,194,304.
pub const MAX_PES: u32 = 1 << 22;

/// Most rails (NICs per node) the TOML `rails` key may give.
pub const MAX_RAILS: u32 = 4;

/// The built-in example: 2 leaf switches of 2 nodes each, joined by a spine;
/// with its 2 PEs per node, 8 PEs.
pub const EXAMPLE_TOML: &str = r#"# switchyard's built-in example: 2 leaf switches x 2 nodes, one spine.
pes_per_node = 2

[[switch]]
name = "leaf0"
nodes = "node[01-02]"

[[switch]]
name = "leaf1"
nodes = "node[03-04]"

[[switch]]
name = "spine"
switches = "leaf[0-1]"
"#;

/// Which syntax a topology file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Decide from the content ([`Format::sniff`]).
    #[default]
    Auto,
    /// Slurm `topology.conf`.
    Slurm,
    /// TOML.
    Toml,
}

impl Format {
    /// The format implied by a file name: `.toml` is TOML, anything else
    /// (Slurm's `topology.conf` included) [`Format::Auto`], decided by content.
    pub fn from_path(path: &str) -> Format {
        if path.to_ascii_lowercase().ends_with(".toml") {
            Format::Toml
        } else {
            Format::Auto
        }
    }

    /// Guesses the syntax of `text` from its first line that is not blank or a
    /// comment. TOML: a line starting with `[`; a `key = value` whose value
    /// starts with a quote, bracket or brace; or one whose key is not a Slurm key
    /// (`SwitchName=`, `Nodes=`, ...) and whose value starts like a number or a
    /// boolean. Anything else is Slurm (whose errors then name the bad key).
    pub fn sniff(text: &str) -> Format {
        let Some(line) = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .find(|l| !l.is_empty())
        else {
            return Format::Slurm;
        };
        if line.starts_with('[') {
            return Format::Toml;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Format::Slurm;
        };
        let v = value.trim_start();
        if v.starts_with(['"', '\'', '[', '{']) {
            return Format::Toml;
        }
        if SlurmKey::parse(key.trim()).is_some() && !key.ends_with(' ') {
            return Format::Slurm;
        }
        let tomlish = v.starts_with(['+', '-'])
            || v.starts_with(|c: char| c.is_ascii_digit())
            || v.starts_with("true")
            || v.starts_with("false");
        if tomlish { Format::Toml } else { Format::Slurm }
    }

    /// Lower-case name: `auto`, `slurm` or `toml`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Slurm => "slurm",
            Format::Toml => "toml",
        }
    }
}

/// A topology file that cannot be used: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{kind}", LinePrefix(*line))]
pub struct TopoFileError {
    /// 1-based line of the problem, when it has one.
    pub line: Option<u32>,
    /// What is wrong.
    pub kind: TopoErrorKind,
}

struct LinePrefix(Option<u32>);

impl fmt::Display for LinePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(l) => write!(f, "line {l}: "),
            None => Ok(()),
        }
    }
}

impl TopoFileError {
    fn at(line: u32, kind: TopoErrorKind) -> Self {
        TopoFileError {
            line: Some(line),
            kind,
        }
    }

    fn whole(kind: TopoErrorKind) -> Self {
        TopoFileError { line: None, kind }
    }

    /// Displays the error as `FILE:LINE: message` (or `FILE: message`), the
    /// way compilers do.
    pub fn in_file<'a>(&'a self, file: &'a str) -> impl fmt::Display + 'a {
        InFile { err: self, file }
    }
}

struct InFile<'a> {
    err: &'a TopoFileError,
    file: &'a str,
}

impl fmt::Display for InFile<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.err.line {
            Some(l) => write!(f, "{}:{l}: {}", self.file, self.err.kind),
            None => write!(f, "{}: {}", self.file, self.err.kind),
        }
    }
}

/// The problems a topology file can have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopoErrorKind {
    /// No switch with nodes: nothing to compute.
    #[error("the topology defines no nodes (expected at least one switch with Nodes=)")]
    NoNodes,
    /// A Slurm token that is not `Key=Value`.
    #[error("expected Key=Value, found '{token}'")]
    NotKeyValue {
        /// The token.
        token: String,
    },
    /// A Slurm key this reader does not know.
    #[error("unknown key '{key}' (expected SwitchName, Nodes, Switches or LinkSpeed)")]
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// A key given twice on one line.
    #[error("key '{key}' given twice")]
    DuplicateKey {
        /// The key as written.
        key: String,
    },
    /// `Key=` with nothing after it.
    #[error("empty value for '{key}' (expected {expected})")]
    EmptyValue {
        /// The key.
        key: String,
        /// What it takes.
        expected: &'static str,
    },
    /// A Slurm line without `SwitchName=`.
    #[error(
        "line has no SwitchName= (expected SwitchName=NAME [Nodes=HOSTLIST] [Switches=HOSTLIST])"
    )]
    MissingSwitchName,
    /// A switch name that is not a single name.
    #[error("bad switch name '{name}' (expected letters, digits, '-', '_' or '.')")]
    BadSwitchName {
        /// The name.
        name: String,
    },
    /// A hostlist that cannot be expanded.
    #[error("{0}")]
    Hostlist(#[from] HostlistError),
    /// The file lists more than [`MAX_HOSTS`] node names (or switch names).
    #[error("hostlist '{expr}' takes the file past {max} {what}")]
    TooManyNames {
        /// The hostlist that crossed the limit.
        expr: String,
        /// What was counted: `node names` or `switch names`.
        what: &'static str,
        /// The limit.
        max: usize,
    },
    /// Two switches with one name.
    #[error("duplicate switch '{name}' (first defined on line {first_line})")]
    DuplicateSwitch {
        /// The name.
        name: String,
        /// Where it was first defined.
        first_line: u32,
    },
    /// `Switches=` names a switch that is not defined.
    #[error("switch '{parent}' lists unknown switch '{child}' in its switches")]
    UnknownSwitch {
        /// The switch with the bad reference.
        parent: String,
        /// The unknown name.
        child: String,
    },
    /// Switches that contain each other.
    #[error("switch cycle: {}", .path.join(" -> "))]
    Cycle {
        /// The switches of the cycle, the first one repeated at the end.
        path: Vec<String>,
    },
    /// A node under two different leaf switches.
    #[error("node '{node}' is under two leaf switches, '{first}' and '{second}'")]
    NodeUnderTwoLeaves {
        /// The node.
        node: String,
        /// The leaf it was first seen under.
        first: String,
        /// The second one.
        second: String,
    },
    /// A node listed twice in the TOML `nodes` list.
    #[error("node '{node}' is listed twice in nodes")]
    DuplicateNode {
        /// The node.
        node: String,
    },
    /// Zero PEs per node.
    #[error("pes_per_node must be at least 1")]
    ZeroPesPerNode,
    /// `pes_per_node` outside `1..=u32::MAX`, or not an integer.
    #[error(
        "bad pes_per_node {value} (expected an integer from 1 to {})",
        u32::MAX
    )]
    BadPesPerNode {
        /// The value as written.
        value: String,
    },
    /// `rails` outside `1..=`[`MAX_RAILS`], or not an integer.
    #[error("bad rails {value} (expected an integer from 1 to {MAX_RAILS})")]
    BadRails {
        /// The value as written.
        value: String,
    },
    /// Nodes × PEs per node is over [`MAX_PES`].
    #[error("{nodes} nodes x {pes_per_node} PEs per node is more than {max} PEs")]
    TooManyPes {
        /// Nodes in the job.
        nodes: usize,
        /// PEs per node.
        pes_per_node: u32,
        /// The limit.
        max: u32,
    },
    /// A TOML value of the wrong type.
    #[error("'{key}' must be {expected}")]
    TomlType {
        /// The key.
        key: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// TOML syntax or structure (the TOML parser's message).
    #[error("{message}")]
    Toml {
        /// The message.
        message: String,
    },
}

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
    format: Format,
    pes_per_node: Option<u32>,
    rails: Option<u32>,
    nodes: Vec<Node>,
    switches: Vec<Switch>,
    /// Leaf id → switch index.
    leaves: Vec<u32>,
    trees: u32,
}

/// Parses a topology file.
///
/// # Errors
/// [`TopoFileError`] naming the line, the token and what was expected.
///
/// # Examples
/// ```
/// use switchyard_topo::{Format, parse_topology};
/// use switchyard_core::class::PathClass;
///
/// let spec = parse_topology(
///     "SwitchName=s0 Nodes=dev[0-5]\nSwitchName=s1 Nodes=dev[6-11]\nSwitchName=s2 Switches=s[0-1]\n",
///     Format::Auto,
/// )?;
/// assert_eq!(spec.nodes().len(), 12);
/// assert_eq!(spec.class_of(2, 0, 1), PathClass::Shm); // dev0, dev0
/// assert_eq!(spec.class_of(2, 0, 2), PathClass::Near); // dev0, dev1
/// assert_eq!(spec.class_of(2, 0, 12), PathClass::Routed); // dev0, dev6
/// # Ok::<(), switchyard_topo::TopoFileError>(())
/// ```
pub fn parse_topology(text: &str, format: Format) -> Result<ClusterSpec, TopoFileError> {
    let format = match format {
        Format::Auto => Format::sniff(text),
        f => f,
    };
    let raw = match format {
        Format::Toml => parse_toml(text)?,
        _ => parse_slurm(text)?,
    };
    build(raw, format)
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

    /// `rails` (NICs per node, `1..=`[`MAX_RAILS`]) from the file (TOML only),
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

// ---------------------------------------------------------------------------
// Raw form shared by both syntaxes

struct RawSwitch {
    name: String,
    line: u32,
    nodes: Vec<String>,
    children: Vec<String>,
}

#[derive(Default)]
struct RawSpec {
    switches: Vec<RawSwitch>,
    pes_per_node: Option<u32>,
    rails: Option<u32>,
    /// The job's nodes, with the line of the list.
    job_nodes: Option<(Vec<String>, u32)>,
}

/// Expands hostlists against a per-file budget of [`MAX_HOSTS`] names (one
/// budget for node names, one for switch references, one for the job list).
struct Expander {
    left: usize,
    what: &'static str,
}

impl Expander {
    fn new(what: &'static str) -> Self {
        Expander {
            left: MAX_HOSTS,
            what,
        }
    }

    fn expand(&mut self, list: &str, line: u32) -> Result<Vec<String>, TopoFileError> {
        match hostlist::expand_with_limit(list, self.left) {
            Ok(names) => {
                self.left -= names.len();
                Ok(names)
            }
            Err(HostlistError::TooMany { expr, .. }) => Err(TopoFileError::at(
                line,
                TopoErrorKind::TooManyNames {
                    expr,
                    what: self.what,
                    max: MAX_HOSTS,
                },
            )),
            Err(e) => Err(TopoFileError::at(line, e.into())),
        }
    }
}

const NODE_NAMES: &str = "node names";
const SWITCH_NAMES: &str = "switch names";

fn check_switch_name(name: &str, line: u32) -> Result<(), TopoFileError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(TopoFileError::at(
            line,
            TopoErrorKind::BadSwitchName { name: name.into() },
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Slurm topology.conf

#[derive(Clone, Copy, PartialEq, Eq)]
enum SlurmKey {
    SwitchName,
    Nodes,
    Switches,
    LinkSpeed,
}

impl SlurmKey {
    fn parse(key: &str) -> Option<SlurmKey> {
        [
            ("switchname", SlurmKey::SwitchName),
            ("nodes", SlurmKey::Nodes),
            ("switches", SlurmKey::Switches),
            ("linkspeed", SlurmKey::LinkSpeed),
        ]
        .into_iter()
        .find(|(k, _)| key.eq_ignore_ascii_case(k))
        .map(|(_, v)| v)
    }

    fn expected(self) -> &'static str {
        match self {
            SlurmKey::SwitchName => "a switch name",
            SlurmKey::Nodes => "a hostlist of nodes",
            SlurmKey::Switches => "a hostlist of switch names",
            SlurmKey::LinkSpeed => "a number",
        }
    }
}

/// Logical lines: comments stripped, `\` continuations joined, with the number
/// of the line each starts on.
fn logical_lines(text: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(u32, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let content = raw.split('#').next().unwrap_or("");
        let (content, continued) = match content.trim_end().strip_suffix('\\') {
            Some(c) => (c, true),
            None => (content, false),
        };
        let (start, mut acc) = pending.take().unwrap_or((no, String::new()));
        acc.push(' ');
        acc.push_str(content);
        if continued {
            pending = Some((start, acc));
        } else {
            out.push((start, acc));
        }
    }
    out.extend(pending);
    out
}

fn parse_slurm(text: &str) -> Result<RawSpec, TopoFileError> {
    let mut spec = RawSpec::default();
    let mut node_names = Expander::new(NODE_NAMES);
    let mut switch_names = Expander::new(SWITCH_NAMES);
    for (line, content) in logical_lines(text) {
        let mut seen: [Option<&str>; 4] = [None; 4];
        for token in content.split_whitespace() {
            let err = |kind| TopoFileError::at(line, kind);
            let Some((k, v)) = token.split_once('=') else {
                return Err(err(TopoErrorKind::NotKeyValue {
                    token: token.into(),
                }));
            };
            let key = SlurmKey::parse(k)
                .ok_or_else(|| err(TopoErrorKind::UnknownKey { key: k.into() }))?;
            if seen[key as usize].is_some() {
                return Err(err(TopoErrorKind::DuplicateKey { key: k.into() }));
            }
            if v.is_empty() {
                return Err(err(TopoErrorKind::EmptyValue {
                    key: k.into(),
                    expected: key.expected(),
                }));
            }
            seen[key as usize] = Some(v);
        }
        if seen.iter().all(Option::is_none) {
            continue; // blank or comment
        }
        let [name, nodes, switches, _link_speed] = seen;
        let Some(name) = name else {
            return Err(TopoFileError::at(line, TopoErrorKind::MissingSwitchName));
        };
        check_switch_name(name, line)?;
        spec.switches.push(RawSwitch {
            name: name.into(),
            line,
            nodes: nodes
                .map(|n| node_names.expand(n, line))
                .transpose()?
                .unwrap_or_default(),
            children: switches
                .map(|s| switch_names.expand(s, line))
                .transpose()?
                .unwrap_or_default(),
        });
    }
    Ok(spec)
}

// ---------------------------------------------------------------------------
// TOML

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    pes_per_node: Option<toml::Spanned<toml::Value>>,
    rails: Option<toml::Spanned<toml::Value>>,
    nodes: Option<toml::Spanned<toml::Value>>,
    #[serde(default)]
    switch: Vec<TomlSwitch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlSwitch {
    name: toml::Spanned<String>,
    nodes: Option<toml::Spanned<toml::Value>>,
    switches: Option<toml::Spanned<toml::Value>>,
    #[allow(dead_code)] // accepted and ignored, like Slurm's LinkSpeed
    link_speed: Option<toml::Value>,
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> u32 {
    let end = offset.min(text.len());
    let nl = text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    u32::try_from(nl + 1).unwrap_or(u32::MAX)
}

fn toml_hostlists(
    text: &str,
    v: &toml::Spanned<toml::Value>,
    key: &'static str,
    names: &mut Expander,
) -> Result<Vec<String>, TopoFileError> {
    const EXPECTED: &str = "a hostlist string or an array of hostlist strings";
    let line = line_of(text, v.span().start);
    let type_err = || {
        TopoFileError::at(
            line,
            TopoErrorKind::TomlType {
                key,
                expected: EXPECTED,
            },
        )
    };
    match v.get_ref() {
        toml::Value::String(s) => names.expand(s, line),
        toml::Value::Array(items) if !items.is_empty() => {
            let mut out = Vec::new();
            for item in items {
                let s = item.as_str().ok_or_else(type_err)?;
                out.extend(names.expand(s, line)?);
            }
            Ok(out)
        }
        _ => Err(type_err()),
    }
}

fn parse_toml(text: &str) -> Result<RawSpec, TopoFileError> {
    let file: TomlFile = toml::from_str(text).map_err(|e| TopoFileError {
        line: e.span().map(|s| line_of(text, s.start)),
        kind: TopoErrorKind::Toml {
            message: e.message().trim_end().to_string(),
        },
    })?;
    let mut node_names = Expander::new(NODE_NAMES);
    let mut switch_names = Expander::new(SWITCH_NAMES);
    let mut job_names = Expander::new(NODE_NAMES);
    let mut spec = RawSpec::default();
    if let Some(p) = &file.pes_per_node {
        let line = line_of(text, p.span().start);
        let value = p.get_ref();
        spec.pes_per_node = Some(match value.as_integer() {
            Some(0) => return Err(TopoFileError::at(line, TopoErrorKind::ZeroPesPerNode)),
            Some(n) => u32::try_from(n).map_err(|_| {
                TopoFileError::at(
                    line,
                    TopoErrorKind::BadPesPerNode {
                        value: n.to_string(),
                    },
                )
            })?,
            None => {
                let value = match value {
                    toml::Value::String(s) => format!("{s:?}"),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::Boolean(b) => b.to_string(),
                    other => format!("({})", other.type_str()),
                };
                return Err(TopoFileError::at(
                    line,
                    TopoErrorKind::BadPesPerNode { value },
                ));
            }
        });
    }
    if let Some(r) = &file.rails {
        let line = line_of(text, r.span().start);
        let rails = r.get_ref().as_integer();
        match rails.and_then(|n| u32::try_from(n).ok()) {
            Some(n @ 1..=MAX_RAILS) => spec.rails = Some(n),
            _ => {
                let value = match r.get_ref() {
                    toml::Value::Integer(n) => n.to_string(),
                    toml::Value::String(s) => format!("{s:?}"),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::Boolean(b) => b.to_string(),
                    other => format!("({})", other.type_str()),
                };
                return Err(TopoFileError::at(line, TopoErrorKind::BadRails { value }));
            }
        }
    }
    if let Some(n) = &file.nodes {
        let line = line_of(text, n.span().start);
        spec.job_nodes = Some((toml_hostlists(text, n, "nodes", &mut job_names)?, line));
    }
    for s in &file.switch {
        let line = line_of(text, s.name.span().start);
        let name = s.name.get_ref().trim();
        check_switch_name(name, line)?;
        spec.switches.push(RawSwitch {
            name: name.into(),
            line,
            nodes: s
                .nodes
                .as_ref()
                .map(|v| toml_hostlists(text, v, "nodes", &mut node_names))
                .transpose()?
                .unwrap_or_default(),
            children: s
                .switches
                .as_ref()
                .map(|v| toml_hostlists(text, v, "switches", &mut switch_names))
                .transpose()?
                .unwrap_or_default(),
        });
    }
    Ok(spec)
}

// ---------------------------------------------------------------------------
// Checks and the model

fn build(raw: RawSpec, format: Format) -> Result<ClusterSpec, TopoFileError> {
    // Switch names.
    let mut index: HashMap<&str, u32> = HashMap::with_capacity(raw.switches.len());
    for (i, s) in raw.switches.iter().enumerate() {
        if let Some(&first) = index.get(s.name.as_str()) {
            return Err(TopoFileError::at(
                s.line,
                TopoErrorKind::DuplicateSwitch {
                    name: s.name.clone(),
                    first_line: raw.switches[first as usize].line,
                },
            ));
        }
        index.insert(&s.name, i as u32);
    }
    // Children.
    let mut children: Vec<Vec<u32>> = Vec::with_capacity(raw.switches.len());
    for s in &raw.switches {
        let mut kids = Vec::with_capacity(s.children.len());
        for c in &s.children {
            let &k = index.get(c.as_str()).ok_or_else(|| {
                TopoFileError::at(
                    s.line,
                    TopoErrorKind::UnknownSwitch {
                        parent: s.name.clone(),
                        child: c.clone(),
                    },
                )
            })?;
            if !kids.contains(&k) {
                kids.push(k);
            }
        }
        children.push(kids);
    }
    check_cycles(&raw.switches, &children)?;

    // Nodes under leaves, in order of appearance.
    let mut node_ids: HashMap<&str, u32> = HashMap::new();
    let mut nodes: Vec<Node> = Vec::new();
    for (si, s) in raw.switches.iter().enumerate() {
        for n in &s.nodes {
            match node_ids.get(n.as_str()) {
                Some(&id) => {
                    let first = nodes[id as usize].switch.unwrap_or(0);
                    if first as usize != si {
                        return Err(TopoFileError::at(
                            s.line,
                            TopoErrorKind::NodeUnderTwoLeaves {
                                node: n.clone(),
                                first: raw.switches[first as usize].name.clone(),
                                second: s.name.clone(),
                            },
                        ));
                    }
                }
                None => {
                    node_ids.insert(n, nodes.len() as u32);
                    nodes.push(Node {
                        name: n.clone(),
                        switch: Some(si as u32),
                    });
                }
            }
        }
    }
    // The job's own node list, when given, picks and orders the nodes.
    if let Some((list, line)) = &raw.job_nodes {
        let mut seen: HashMap<&str, ()> = HashMap::with_capacity(list.len());
        let mut job = Vec::with_capacity(list.len());
        for n in list {
            if seen.insert(n, ()).is_some() {
                return Err(TopoFileError::at(
                    *line,
                    TopoErrorKind::DuplicateNode { node: n.clone() },
                ));
            }
            let switch = node_ids
                .get(n.as_str())
                .and_then(|&id| nodes[id as usize].switch);
            job.push(Node {
                name: n.clone(),
                switch,
            });
        }
        nodes = job;
    }
    if nodes.is_empty() {
        return Err(TopoFileError::whole(TopoErrorKind::NoNodes));
    }

    // Trees: union-find over parent/child links.
    let mut parent: Vec<u32> = (0..raw.switches.len() as u32).collect();
    fn root(parent: &mut [u32], mut x: u32) -> u32 {
        while parent[x as usize] != x {
            let up = parent[parent[x as usize] as usize];
            parent[x as usize] = up;
            x = up;
        }
        x
    }
    for (s, kids) in children.iter().enumerate() {
        for &k in kids {
            let (a, b) = (root(&mut parent, s as u32), root(&mut parent, k));
            if a != b {
                parent[a as usize] = b;
            }
        }
    }
    // Leaves and tree ids in order of first appearance.
    let mut switch_nodes: Vec<Vec<u32>> = vec![Vec::new(); raw.switches.len()];
    for (id, n) in nodes.iter().enumerate() {
        if let Some(s) = n.switch {
            switch_nodes[s as usize].push(id as u32);
        }
    }
    let mut tree_of_root: HashMap<u32, u32> = HashMap::new();
    let mut leaves = Vec::new();
    let mut switches = Vec::with_capacity(raw.switches.len());
    for (i, (s, kids)) in raw.switches.into_iter().zip(children).enumerate() {
        let r = root(&mut parent, i as u32);
        let next = tree_of_root.len() as u32;
        let tree = *tree_of_root.entry(r).or_insert(next);
        let leaf = (!s.nodes.is_empty()).then(|| {
            leaves.push(i as u32);
            leaves.len() as u32 - 1
        });
        switches.push(Switch {
            name: s.name,
            line: s.line,
            leaf,
            tree,
            children: kids,
            nodes: std::mem::take(&mut switch_nodes[i]),
        });
    }
    let mut leaf_trees: Vec<u32> = leaves.iter().map(|&s| switches[s as usize].tree).collect();
    leaf_trees.sort_unstable();
    leaf_trees.dedup();
    Ok(ClusterSpec {
        format,
        pes_per_node: raw.pes_per_node,
        rails: raw.rails,
        nodes,
        switches,
        leaves,
        trees: leaf_trees.len() as u32,
    })
}

/// Depth-first search for a switch that contains itself; iterative, so a long
/// chain of switches cannot overflow the stack.
fn check_cycles(switches: &[RawSwitch], children: &[Vec<u32>]) -> Result<(), TopoFileError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark = vec![Mark::New; switches.len()];
    let mut stack: Vec<(u32, usize)> = Vec::new();
    for start in 0..switches.len() as u32 {
        if mark[start as usize] != Mark::New {
            continue;
        }
        mark[start as usize] = Mark::Open;
        stack.push((start, 0));
        while let Some(&mut (s, ref mut next)) = stack.last_mut() {
            match children[s as usize].get(*next) {
                Some(&k) => {
                    *next += 1;
                    match mark[k as usize] {
                        Mark::New => {
                            mark[k as usize] = Mark::Open;
                            stack.push((k, 0));
                        }
                        Mark::Open => {
                            let from = stack.iter().position(|&(x, _)| x == k).unwrap_or(0);
                            let mut path: Vec<String> = stack[from..]
                                .iter()
                                .map(|&(x, _)| switches[x as usize].name.clone())
                                .collect();
                            path.push(switches[k as usize].name.clone());
                            return Err(TopoFileError::at(
                                switches[k as usize].line,
                                TopoErrorKind::Cycle { path },
                            ));
                        }
                        Mark::Done => {}
                    }
                }
                None => {
                    mark[s as usize] = Mark::Done;
                    stack.pop();
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use PathClass::*;

    use super::*;

    const SLURM_DOC: &str = "\
# From Slurm's topology.conf man page
SwitchName=s0 Nodes=dev[0-5]
SwitchName=s1 Nodes=dev[6-11]
SwitchName=s2 Switches=s[0-1]
";

    fn err(text: &str, format: Format) -> TopoFileError {
        match parse_topology(text, format) {
            Ok(_) => panic!("parsed: {text:?}"),
            Err(e) => e,
        }
    }

    fn msg(text: &str) -> String {
        err(text, Format::Auto).to_string()
    }

    #[test]
    fn slurm_doc_example() {
        let spec = parse_topology(SLURM_DOC, Format::Slurm).unwrap();
        assert_eq!(spec.format(), Format::Slurm);
        assert_eq!(spec.nodes().len(), 12);
        assert_eq!(spec.nodes()[6].name, "dev6");
        assert_eq!(spec.leaves(), [0, 1]);
        assert_eq!(spec.trees(), 1);
        assert_eq!(spec.switches()[2].children, [0, 1]);
        assert_eq!(spec.switches()[2].leaf, None);
        assert_eq!(spec.switches()[1].line, 3);
        let loc = spec.localities(1).unwrap();
        assert_eq!(loc[0], Locality { node: 0, switch: 0 });
        assert_eq!(
            loc[11],
            Locality {
                node: 11,
                switch: 1
            }
        );
        assert_eq!(spec.class_of(1, 0, 5), Near);
        assert_eq!(spec.class_of(1, 0, 6), Routed);
        assert_eq!(spec.class_of(1, 11, 11), Local);
    }

    #[test]
    fn every_class() {
        let text = "\
SwitchName=a0 Nodes=n[1-2]
SwitchName=a1 Nodes=n3 LinkSpeed=100
SwitchName=top Switches=a[0-1]
SwitchName=island Nodes=m1   # a tree of its own
";
        let spec = parse_topology(text, Format::Auto).unwrap();
        assert_eq!(spec.trees(), 2);
        let ppn = 2;
        // PEs: n1: 0,1  n2: 2,3  n3: 4,5  m1: 6,7
        assert_eq!(spec.class_of(ppn, 0, 0), Local);
        assert_eq!(spec.class_of(ppn, 0, 1), Shm);
        assert_eq!(spec.class_of(ppn, 0, 2), Near);
        assert_eq!(spec.class_of(ppn, 0, 4), Routed);
        assert_eq!(spec.class_of(ppn, 5, 1), Routed);
        assert_eq!(spec.class_of(ppn, 0, 6), Unreachable);
        assert_eq!(spec.class_of(ppn, 7, 6), Shm);
        // Out of range and zero PEs per node never panic.
        assert_eq!(spec.class_of(ppn, 0, 8), Unreachable);
        assert_eq!(spec.class_of(ppn, u32::MAX, 0), Unreachable);
        assert_eq!(spec.class_of(0, 0, 0), Unreachable);
        assert_eq!(spec.node_class(0, 2), Routed);
        assert_eq!(spec.node_class(0, 0), Shm);
        assert_eq!(spec.node_class(0, 9), Unreachable);
        // localities agree with class_of through class_between.
        let loc = spec.localities(ppn).unwrap();
        assert_eq!(loc.len(), 8);
        assert_eq!(loc[6], Locality { node: 3, switch: 2 });
    }

    #[test]
    fn node_under_no_switch_is_unreachable() {
        let text = r#"
nodes = ["n[1-2]", "orphan"]
[[switch]]
name = "leaf"
nodes = "n[1-3]"
"#;
        let spec = parse_topology(text, Format::Auto).unwrap();
        assert_eq!(spec.format(), Format::Toml);
        assert_eq!(spec.nodes().len(), 3, "n3 is not in the job");
        assert_eq!(spec.nodes()[2].switch, None);
        let loc = spec.localities(1).unwrap();
        assert_eq!(loc[2].switch, NO_SWITCH);
        assert_eq!(spec.class_of(1, 0, 1), Near);
        assert_eq!(spec.class_of(1, 0, 2), Unreachable);
        assert_eq!(spec.class_of(1, 2, 0), Unreachable);
        assert_eq!(spec.class_of(2, 4, 5), Shm, "same node still shares memory");
        assert_eq!(spec.switches()[0].nodes, [0, 1]);
    }

    #[test]
    fn toml_form() {
        let text = r#"
pes_per_node = 4 # comment
[[switch]]
name = "leaf0"
nodes = "node[01-02]"
[[switch]]
name = "leaf1"
nodes = ["node03", "node[04-05]"]
link_speed = 100
[[switch]]
name = "spine"
switches = "leaf[0-1]"
"#;
        let spec = parse_topology(text, Format::Toml).unwrap();
        assert_eq!(spec.pes_per_node(), Some(4));
        assert_eq!(spec.nodes().len(), 5);
        assert_eq!(spec.nodes()[4].name, "node05");
        assert_eq!(spec.switches()[1].line, 7);
        assert_eq!(spec.class_of(4, 0, 19), Routed);
        assert_eq!(spec.n_pes(4).unwrap(), 20);
    }

    #[test]
    fn builtin_example() {
        let spec = parse_topology(EXAMPLE_TOML, Format::Auto).unwrap();
        assert_eq!(spec, ClusterSpec::example());
        assert_eq!(spec.pes_per_node(), Some(2));
        assert_eq!(spec.n_pes(2).unwrap(), 8);
        assert_eq!(spec.leaves().len(), 2);
        assert_eq!(spec.class_of(2, 0, 7), Routed);
    }

    #[test]
    fn sniffing_and_extensions() {
        assert_eq!(Format::sniff(SLURM_DOC), Format::Slurm);
        assert_eq!(Format::sniff(EXAMPLE_TOML), Format::Toml);
        assert_eq!(Format::sniff("[[switch]]\nname='a'"), Format::Toml);
        assert_eq!(Format::sniff("nodes = \"a\""), Format::Toml);
        assert_eq!(Format::sniff("SwitchNam=s0 Nodes=a"), Format::Slurm);
        assert_eq!(Format::sniff("switchname=0 nodes=a"), Format::Slurm);
        assert_eq!(Format::sniff(""), Format::Slurm);
        assert_eq!(Format::from_path("x/cluster.TOML"), Format::Toml);
        assert_eq!(Format::from_path("topology.conf"), Format::Auto);
        assert_eq!(Format::sniff("nodes=\"n[1-2]\""), Format::Toml);
        assert_eq!(Format::sniff("Nodes=n[1-2]"), Format::Slurm);
        assert_eq!(Format::from_path("topo"), Format::Auto);
    }

    #[test]
    fn slurm_details() {
        // Case-insensitive keys, continuation lines, comments, repeated nodes.
        let text = "switchname=s0 \\\n  NODES=a[1-2],a1 # c\n\n#x\nSwitchName=s1 Nodes=b\n";
        let spec = parse_topology(text, Format::Slurm).unwrap();
        assert_eq!(spec.nodes().len(), 3);
        assert_eq!(spec.switches()[1].line, 5);
        assert_eq!(spec.trees(), 2);
        assert_eq!(spec.class_of(1, 0, 2), Unreachable);
    }

    #[test]
    fn slurm_errors_name_line_token_and_expectation() {
        assert_eq!(
            msg("SwitchName=s0 Nodes=a\n\nSwitchName=s1 Nodez=b\n"),
            "line 3: unknown key 'Nodez' (expected SwitchName, Nodes, Switches or LinkSpeed)"
        );
        assert_eq!(
            msg("SwitchName=s0 Nodes=a\nSwitchName=s1 Nodes=node[04-01]"),
            "line 2: bad hostlist range 'node[04-01]': start after end"
        );
        assert_eq!(
            msg("SwitchName=s0 Nodes=a extra"),
            "line 1: expected Key=Value, found 'extra'"
        );
        assert_eq!(
            msg("SwitchName=s0 Nodes="),
            "line 1: empty value for 'Nodes' (expected a hostlist of nodes)"
        );
        assert_eq!(
            msg("SwitchName=s0 Nodes=a nodes=b"),
            "line 1: key 'nodes' given twice"
        );
        assert!(msg("Nodes=a").starts_with("line 1: line has no SwitchName="));
        assert!(msg("SwitchName=s[0-1] Nodes=a").starts_with("line 1: bad switch name 's[0-1]'"));
        assert_eq!(
            msg("SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b"),
            "line 2: duplicate switch 's0' (first defined on line 1)"
        );
        assert_eq!(
            msg("SwitchName=s0 Nodes=a\nSwitchName=top Switches=s[0-1]"),
            "line 2: switch 'top' lists unknown switch 's1' in its switches"
        );
        assert_eq!(
            msg(
                "SwitchName=a Nodes=n1 Switches=b\nSwitchName=b Switches=c\nSwitchName=c Switches=a"
            ),
            "line 1: switch cycle: a -> b -> c -> a"
        );
        assert_eq!(
            msg("SwitchName=a Switches=a Nodes=n"),
            "line 1: switch cycle: a -> a"
        );
        assert_eq!(
            msg("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n2"),
            "line 2: node 'n2' is under two leaf switches, 'a' and 'b'"
        );
        assert_eq!(
            msg("SwitchName=a Nodes=n[0-99999999999]"),
            "line 1: hostlist 'n[0-99999999999]' takes the file past 1048576 node names"
        );
        // The cap holds across lines too.
        let many = "SwitchName=a Nodes=n[1-600000]\nSwitchName=b Nodes=m[1-600000]";
        assert_eq!(
            err(many, Format::Slurm).kind,
            TopoErrorKind::TooManyNames {
                expr: "m[1-600000]".into(),
                what: NODE_NAMES,
                max: MAX_HOSTS
            }
        );
    }

    #[test]
    fn empty_inputs() {
        for text in ["", "   \n# only a comment\n", "SwitchName=spine"] {
            let e = err(text, Format::Auto);
            assert_eq!(e.kind, TopoErrorKind::NoNodes, "{text:?}");
            assert_eq!(e.line, None);
        }
        assert_eq!(err("", Format::Toml).kind, TopoErrorKind::NoNodes);
        assert_eq!(
            msg(""),
            "the topology defines no nodes (expected at least one switch with Nodes=)"
        );
    }

    #[test]
    fn toml_errors() {
        let e = err(
            "pes_per_node = 2\n[[switch]]\nname = \"a\"\nnodez = \"x\"\n",
            Format::Toml,
        );
        assert_eq!(e.line, Some(4));
        assert!(e.to_string().contains("unknown field `nodez`"), "{e}");
        let e = err("[[switch]]\nname = \"a\"\nnodes = 3\n", Format::Toml);
        assert_eq!(
            e.to_string(),
            "line 3: 'nodes' must be a hostlist string or an array of hostlist strings"
        );
        let e = err("[[switch]]\nname = \"a\"\nnodes = []\n", Format::Toml);
        assert_eq!(e.line, Some(3));
        let e = err(
            "[[switch]]\nname = \"a\"\nnodes = [\"n[2-1]\"]\n",
            Format::Toml,
        );
        assert_eq!(
            e.to_string(),
            "line 3: bad hostlist range 'n[2-1]': start after end"
        );
        assert_eq!(
            msg("pes_per_node = 0\n[[switch]]\nname='a'\nnodes='n'"),
            "line 1: pes_per_node must be at least 1"
        );
        assert!(msg("pes_per_node = -3\n").starts_with("line 1: bad pes_per_node -3"));
        assert!(msg("pes_per_node = \"x\"\n").starts_with("line 1: bad pes_per_node \"x\""));
        let e = err("[[switch]]\nnodes = \"n\"\n", Format::Toml);
        assert!(e.to_string().contains("missing field `name`"), "{e}");
        let e = err("[[switch]\n", Format::Toml);
        assert_eq!(e.line, Some(1));
        assert!(matches!(e.kind, TopoErrorKind::Toml { .. }));
        assert_eq!(
            msg("nodes = [\"a\", \"a\"]\n[[switch]]\nname='s'\nnodes='a'"),
            "line 1: node 'a' is listed twice in nodes"
        );
        assert_eq!(
            msg("[[switch]]\nname = 'a b'\nnodes = 'n'"),
            "line 2: bad switch name 'a b' (expected letters, digits, '-', '_' or '.')"
        );
    }

    #[test]
    fn pes_per_node_limits() {
        let spec = parse_topology(SLURM_DOC, Format::Slurm).unwrap();
        assert_eq!(
            spec.localities(0).unwrap_err().to_string(),
            "pes_per_node must be at least 1"
        );
        assert_eq!(
            spec.n_pes(u32::MAX).unwrap_err().kind,
            TopoErrorKind::TooManyPes {
                nodes: 12,
                pes_per_node: u32::MAX,
                max: MAX_PES
            }
        );
        assert_eq!(spec.class_of(u32::MAX, 0, 1), Shm);
    }

    #[test]
    fn error_in_file_display() {
        let e = err("SwitchName=s0 Nodez=a", Format::Slurm);
        assert_eq!(
            e.in_file("topology.conf").to_string(),
            "topology.conf:1: unknown key 'Nodez' (expected SwitchName, Nodes, Switches or LinkSpeed)"
        );
        let e = err("", Format::Slurm);
        assert!(
            e.in_file("t.conf")
                .to_string()
                .starts_with("t.conf: the topology")
        );
    }

    #[test]
    fn long_switch_chain_does_not_overflow_the_stack() {
        use std::fmt::Write as _;
        let mut text = String::from("SwitchName=s0 Nodes=n0\n");
        for i in 1..100_000 {
            let _ = writeln!(text, "SwitchName=s{i} Switches=s{}", i - 1);
        }
        let spec = parse_topology(&text, Format::Slurm).unwrap();
        assert_eq!(spec.switches().len(), 100_000);
        let _ = writeln!(
            text,
            "SwitchName=x Nodes=n1 Switches=s99999\nSwitchName=s0b Switches=x"
        );
        assert!(parse_topology(&text, Format::Slurm).is_ok());
    }

    #[test]
    fn toml_rails() {
        let base = "[[switch]]\nname = \"s0\"\nnodes = \"n[1-2]\"\n";
        assert_eq!(parse_topology(base, Format::Toml).unwrap().rails(), None);
        let two = format!("rails = 2\n{base}");
        assert_eq!(parse_topology(&two, Format::Toml).unwrap().rails(), Some(2));
        for bad in ["0", "5", "-1", "\"2\"", "1.5"] {
            let e = err(&format!("rails = {bad}\n{base}"), Format::Toml);
            assert_eq!(e.line, Some(1), "{bad}");
            assert!(
                matches!(e.kind, TopoErrorKind::BadRails { .. }),
                "{bad}: {e:?}"
            );
        }
    }
}
