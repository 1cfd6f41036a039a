//! `switchyard sim`: simulated clusters in network namespaces ([`switchyard_launch::sim`]).

use std::path::Path;

use switchyard_launch::sim::{self, DEFAULT_NAME, Sim, SimError, SimSpec};
use switchyard_topo::ClusterSpec;

use crate::{EXIT_USAGE, Output};

/// Exit status of a sim command that failed while running.
pub const EXIT_FAILURE: u8 = 1;

/// Usage of `switchyard sim`.
pub const USAGE: &str = "\
Usage:
  switchyard sim up [FILE] [--name NAME] [--pes-per-node K] [--rails R]
  switchyard sim status [--name NAME] [--json]
  switchyard sim link down|up NODE [RAIL] [--name NAME]
  switchyard sim down [--name NAME]

Simulates the cluster of a topology file on this machine with Linux network
namespaces: one per node (NAME-n<i>), a fabric namespace with one bridge per
(leaf switch, rail) (NAME-fab), and a router joining the leaves of each tree
(NAME-rt). Node i, the k-th of leaf s, has 10.<100+r>.<s>.<k+1>/24 on
interface r<r> for each rail r, and 10.99.<i/250>.<i%250+1>/16 on the
management interface mg. Needs root and iproute2's `ip`.

FILE is a Slurm topology.conf or a TOML file (as for `switchyard topo`); without
it, the built-in example (2 leaf switches x 2 nodes, a spine). TOML may set
`pes_per_node` and `rails`.

  up       builds the sim; fails if one of that name exists
  status   nodes, addresses and the state of each rail, read from the kernel
  link     cuts (down) or restores (up) NODE's cable on RAIL, or on every rail;
           NODE is an index or a host name
  down     removes every namespace of the sim and its state file (also after
           a crash); succeeds when nothing is there

Options:
  --name NAME          sim name, 1 to 6 of [a-z0-9] (default: sy)
  --pes-per-node K     PEs per node for `switchyard run --sim` (default: the
                       file's pes_per_node, else 1)
  --rails R            NICs per node, 1 to 4 (default: the file's rails, else 1)
  --json               status as JSON
  -h, --help           this text

Exit status: 0 success, 2 bad usage or input, 1 failure while running.
";

fn usage_error(message: impl std::fmt::Display) -> Output {
    let mut out = Output::usage_error(message);
    out.stderr.push_str("(see `switchyard sim --help`)\n");
    out
}

fn failure(e: &SimError) -> Output {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    Output {
        code: if e.is_usage() {
            EXIT_USAGE
        } else {
            EXIT_FAILURE
        },
        stdout: String::new(),
        stderr: format!("switchyard sim: error: {message}\n"),
    }
}

/// Options common to the subcommands.
#[derive(Default)]
struct Opts {
    name: Option<String>,
    pes_per_node: Option<u32>,
    rails: Option<u32>,
    json: bool,
    help: bool,
    operands: Vec<String>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        let (opt, inline) = match arg.split_once('=') {
            Some((opt, v)) if arg.starts_with("--") => (opt, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || match inline.clone() {
            Some(v) => Ok(v),
            None => {
                let v = args
                    .get(i)
                    .cloned()
                    .ok_or_else(|| format!("option '{opt}' needs a value"))?;
                i += 1;
                Ok::<_, String>(v)
            }
        };
        match opt {
            "-h" | "--help" => o.help = true,
            "--json" if inline.is_none() => o.json = true,
            "--name" => o.name = Some(value()?),
            "--pes-per-node" => {
                let v = value()?;
                o.pes_per_node = Some(
                    v.parse()
                        .ok()
                        .filter(|&k| k > 0)
                        .ok_or_else(|| format!("--pes-per-node '{v}': expected 1 or more"))?,
                );
            }
            "--rails" => {
                let v = value()?;
                o.rails =
                    Some(v.parse().map_err(|_| {
                        format!("--rails '{v}': expected a number of rails, 1 to 4")
                    })?);
            }
            "--" => o.operands.extend(args[i..].iter().cloned()),
            _ if opt.starts_with('-') && opt.len() > 1 => {
                return Err(format!("unknown option '{arg}'"));
            }
            _ => o.operands.push(arg.clone()),
        }
        if opt == "--" {
            break;
        }
    }
    Ok(o)
}

/// Runs `switchyard sim ARGS` (the arguments after `sim`).
pub fn run(args: &[String]) -> Output {
    let Some(cmd) = args.first() else {
        return Output {
            code: EXIT_USAGE,
            stdout: String::new(),
            stderr: USAGE.into(),
        };
    };
    if matches!(cmd.as_str(), "-h" | "--help" | "help") {
        return Output::ok(USAGE.into());
    }
    let o = match parse(&args[1..]) {
        Ok(o) => o,
        Err(e) => return usage_error(e),
    };
    if o.help {
        return Output::ok(USAGE.into());
    }
    let name = o.name.clone().unwrap_or_else(|| DEFAULT_NAME.into());
    if let Err(e) = sim::check_name(&name) {
        return failure(&e);
    }
    let only = |allowed: &[&str], max_operands: usize| -> Result<(), Output> {
        if o.pes_per_node.is_some() && !allowed.contains(&"--pes-per-node") {
            return Err(usage_error(format!(
                "sim {cmd}: --pes-per-node is for `up`"
            )));
        }
        if o.rails.is_some() && !allowed.contains(&"--rails") {
            return Err(usage_error(format!("sim {cmd}: --rails is for `up`")));
        }
        if o.json && !allowed.contains(&"--json") {
            return Err(usage_error(format!("sim {cmd}: --json is for `status`")));
        }
        if o.operands.len() > max_operands {
            return Err(usage_error(format!(
                "sim {cmd}: unexpected argument '{}'",
                o.operands[max_operands]
            )));
        }
        Ok(())
    };
    let result = match cmd.as_str() {
        "up" => {
            if let Err(out) = only(&["--pes-per-node", "--rails"], 1) {
                return out;
            }
            up(&name, &o)
        }
        "status" => {
            if let Err(out) = only(&["--json"], 0) {
                return out;
            }
            status(&name, o.json)
        }
        "link" => {
            if let Err(out) = only(&[], 3) {
                return out;
            }
            let up = match o.operands.first().map(String::as_str) {
                Some("up") => true,
                Some("down") => false,
                Some(other) => {
                    return usage_error(format!("sim link '{other}': expected down or up"));
                }
                None => return usage_error("sim link: expected `link down|up NODE [RAIL]`"),
            };
            let Some(node) = o.operands.get(1) else {
                return usage_error("sim link: no NODE given (an index or a host name)");
            };
            let rail = match o.operands.get(2) {
                Some(r) => match r.parse::<u32>() {
                    Ok(r) => Some(r),
                    Err(_) => {
                        return usage_error(format!("sim link: RAIL '{r}' is not a rail number"));
                    }
                },
                None => None,
            };
            link(&name, up, node, rail)
        }
        "down" => {
            if let Err(out) = only(&[], 0) {
                return out;
            }
            match sim::down(&name) {
                Ok(r) if r.nothing() => Ok(format!("sim {name}: nothing to remove\n")),
                Ok(r) => Ok(format!(
                    "sim {name}: removed {} namespace(s){}\n",
                    r.namespaces.len(),
                    if r.state_file {
                        " and the state file"
                    } else {
                        ""
                    }
                )),
                Err(e) => Err(e),
            }
        }
        other => {
            return usage_error(format!(
                "unknown sim command '{other}' (expected up, status, link or down)"
            ));
        }
    };
    match result {
        Ok(text) => Output::ok(text),
        Err(e) => failure(&e),
    }
}

fn up(name: &str, o: &Opts) -> Result<String, SimError> {
    let mut spec = match o.operands.first() {
        Some(file) => SimSpec::from_file(name, Path::new(file))?,
        None => SimSpec::new(name, ClusterSpec::example()),
    };
    if let Some(k) = o.pes_per_node {
        spec.pes_per_node = k;
    }
    if let Some(r) = o.rails {
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
