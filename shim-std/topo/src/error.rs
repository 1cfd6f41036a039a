//! [`TopoFileError`]: what is wrong with a topology file ([`TopoErrorKind`])
//! and on which line.

use std::fmt;

use crate::{MAX_RAILS, hostlist::HostlistError};

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
    pub(crate) fn at(line: u32, kind: TopoErrorKind) -> Self {
        TopoFileError {
            line: Some(line),
            kind,
        }
    }

    pub(crate) fn whole(kind: TopoErrorKind) -> Self {
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
    /// The file lists more than [`MAX_HOSTS`](crate::hostlist::MAX_HOSTS) node names (or switch names).
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
    /// Nodes × PEs per node is over [`MAX_PES`](crate::MAX_PES).
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
