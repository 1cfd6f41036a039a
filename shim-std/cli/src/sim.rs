//! `switchyard sim`: simulated clusters in network namespaces ([`switchyard_launch::sim`]).

use std::path::{Path, PathBuf};

use switchyard_launch::{
    error_chain,
    sim::{self, DEFAULT_NAME, Sim, SimError, SimSpec},
};
use switchyard_topo::ClusterSpec;

use crate::{EXIT_USAGE, Output, values};

/// Exit status of a sim command that failed while running.
pub const EXIT_FAILURE: u8 = 1;

/// What `switchyard sim --help` says before the commands.
pub(crate) const ABOUT: &str = "\
Simulates the cluster of a topology file on this machine with Linux network
namespaces: one per node (NAME-n<i>), a fabric namespace with one bridge per
(leaf switch, rail) (NAME-fab), and a router joining the leaves of each tree
(NAME-rt). Node i, the k-th of leaf s, has 10.<100+r>.<s>.<k+1>/24 on
interface r<r> for each rail r, and 10.99.<i/250>.<i%250+1>/16 on the
management interface mg. Needs root and iproute2's `ip`.";

/// `switchyard sim` arguments.
#[derive(Debug, Clone, clap::Args)]
#[command(
    subcommand_required = true,
    arg_required_else_help = true,
    after_help = "Exit status: 0 success, 2 bad usage or input, 1 failure while running."
)]
pub struct SimArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SimCommand,
}

/// `--name`, which every sim command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct SimName {
    /// Sim name, 1 to 6 of [a-z0-9]
    #[arg(long, value_name = "NAME", default_value = DEFAULT_NAME, value_parser = values::sim_name)]
    pub name: String,
}

/// The sim commands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum SimCommand {
    /// Build a sim from a topology file; fails if one of that name exists
    #[command(long_about = "\
Builds a sim from a topology file; fails if one of that name exists.

FILE is a Slurm topology.conf or a TOML file (as for `switchyard topo`); without
it, the built-in example (2 leaf switches x 2 nodes, a spine). TOML may set
`pes_per_node` and `rails`.")]
    Up {
        /// Topology file [default: the built-in example]
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
        /// The sim's name.
        #[command(flatten)]
        name: SimName,
        /// PEs per node for `switchyard run --sim` [default: the file's
        /// pes_per_node, else 1]
        #[arg(long = "pes-per-node", value_name = "K", value_parser = values::at_least_one)]
        pes_per_node: Option<u32>,
        /// NICs per node, 1 to 4 [default: the file's rails, else 1]
        #[arg(long, value_name = "R", value_parser = values::rails)]
        rails: Option<u32>,
    },
    /// Nodes, addresses and the state of each rail, read from the kernel
    Status {
        /// The sim's name.
        #[command(flatten)]
        name: SimName,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Cut (down) or restore (up) NODE's cable on RAIL, or on every rail
    Link {
        /// down cuts the cable, up plugs it back in
        #[arg(value_name = "down|up", value_parser = clap::builder::PossibleValuesParser::new(["down", "up"]))]
        state: String,
        /// The node: an index or a host name
        #[arg(value_name = "NODE")]
        node: String,
        /// The rail [default: every rail]
        #[arg(value_name = "RAIL")]
        rail: Option<u32>,
        /// The sim's name.
        #[command(flatten)]
        name: SimName,
    },
    /// Remove every namespace of the sim and its state file (also after a
    /// crash); succeeds when nothing is there
    Down {
        /// The sim's name.
        #[command(flatten)]
        name: SimName,
    },
}

/// An error while running: exit status 1, or 2 for bad input.
fn failure(e: &SimError) -> Output {
    Output {
        code: if e.is_usage() {
            EXIT_USAGE
        } else {
            EXIT_FAILURE
        },
        stdout: String::new(),
        stderr: format!("switchyard sim: error: {}\n", error_chain(e)),
    }
}

/// Runs `switchyard sim`.
pub fn run(args: &SimArgs) -> Output {
    let result = match &args.command {
        SimCommand::Up {
            file,
            name,
            pes_per_node,
            rails,
        } => up(&name.name, file.as_deref(), *pes_per_node, *rails),
        SimCommand::Status { name, json } => status(&name.name, *json),
        SimCommand::Link {
            state,
            node,
            rail,
            name,
        } => link(&name.name, state == "up", node, *rail),
        SimCommand::Down { name } => down(&name.name),
    };
    match result {
        Ok(text) => Output::ok(text),
        Err(e) => failure(&e),
    }
}

fn down(name: &str) -> Result<String, SimError> {
    let r = sim::down(name)?;
    if r.nothing() {
        return Ok(format!("sim {name}: nothing to remove\n"));
    }
    Ok(format!(
        "sim {name}: removed {} namespace(s){}\n",
        r.namespaces.len(),
        if r.state_file {
            " and the state file"
        } else {
            ""
        }
    ))
}

fn up(
    name: &str,
    file: Option<&Path>,
    pes_per_node: Option<u32>,
    rails: Option<u32>,
) -> Result<String, SimError> {
    let mut spec = match file {
        Some(file) => SimSpec::from_file(name, file)?,
        None => SimSpec::new(name, ClusterSpec::example()),
    };
    if let Some(k) = pes_per_node {
        spec.pes_per_node = k;
    }
    if let Some(r) = rails {
        spec.rails = r;
    }
    let sim = Sim::up(&spec)?;
    let status = sim.status()?;
    Ok(format!(
        "sim {name} is up (state file {})\n{status}",
        sim::state_path(name).display()
    ))
}

fn status(name: &str, json: bool) -> Result<String, SimError> {
    let sim = Sim::open(name)?;
    let status = sim.status()?;
    if json {
        let mut text =
            serde_json::to_string_pretty(&status).map_err(|source| SimError::CommandOutput {
                command: "status --json".into(),
                source,
            })?;
        text.push('\n');
        Ok(text)
    } else {
        Ok(status.to_string())
    }
}

fn link(name: &str, up: bool, node: &str, rail: Option<u32>) -> Result<String, SimError> {
    let sim = Sim::open(name)?;
    sim.link(node, rail, up)?;
    let n = sim.state().find_node(node)?;
    let rails = match rail {
        Some(r) => format!("rail {r}"),
        None => "every rail".into(),
    };
    Ok(format!(
        "sim {name}: node {} ({}) {rails} {}\n",
        n.index,
        n.host,
        if up { "up" } else { "down (cut)" }
    ))
}
