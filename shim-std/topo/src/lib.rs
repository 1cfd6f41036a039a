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
//! [`MAX_HOSTS`](hostlist::MAX_HOSTS) names per file.
//!
//! # Modules
//!
//! The modules are private (but [`hostlist`]); what they make public is
//! re-exported here.
//!
//! | module | what |
//! |---|---|
//! | `format` | [`Format`]: which syntax, from a file name or sniffed from the content |
//! | `slurm` | the Slurm `topology.conf` reader |
//! | `toml_file` | the TOML reader |
//! | `raw` | the raw form both readers produce, hostlist budgets, switch-name checks |
//! | `resolve` | raw form to [`ClusterSpec`]: names resolved, cycles refused, nodes placed, trees found |
//! | `spec` | [`ClusterSpec`], [`Node`], [`Switch`] and the queries: localities, path classes |
//! | `error` | [`TopoFileError`], [`TopoErrorKind`] |
//! | [`hostlist`] | Slurm hostlist expansion (`node[01-04]`, `node[1,3,5-7]`) |

#![deny(missing_docs)]
#![deny(unsafe_code)]

mod error;
mod format;
pub mod hostlist;
mod raw;
mod resolve;
mod slurm;
mod spec;
mod toml_file;

pub use crate::{
    error::{TopoErrorKind, TopoFileError},
    format::Format,
    spec::{ClusterSpec, Node, Switch},
};

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
        Format::Toml => toml_file::parse_toml(text)?,
        _ => slurm::parse_slurm(text)?,
    };
    resolve::build(raw, format)
}

#[cfg(test)]
mod test;
