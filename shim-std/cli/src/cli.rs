//! The command tree: [`Cli`] and its [`Command`]s, parsed by clap, and how
//! its errors read.
//!
//! Each command's flags are declared next to the command
//! ([`RunArgs`](crate::launch::RunArgs), [`InfoArgs`](crate::info::InfoArgs),
//! [`PerfArgs`](crate::perf::PerfArgs), [`TopoArgs`](crate::topo::TopoArgs),
//! [`SimArgs`](crate::sim::SimArgs), [`CcArgs`](crate::cc::CcArgs)); this
//! module joins them, generates the help of every command, and renders a
//! usage error as `switchyard: error: MESSAGE` followed by the command's
//! usage, exit status [`EXIT_USAGE`].

use std::{ffi::OsString, fmt};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, error::ErrorKind};

use crate::{EXIT_USAGE, Output, cc, info, launch, perf, sim, stat, topo, trace};

/// How every command's help reads: its usage first, then what it does.
const COMMAND_HELP: &str = "\
{usage-heading} {usage}

{about-with-newline}
{all-args}{after-help}";

/// Widest help, on a wide terminal; a narrower one wraps at its width.
const MAX_WIDTH: usize = 100;

/// What `switchyard --help` says after the commands.
const AFTER_HELP: &str = "\
Examples:
  switchyard run -n 4 -- ./my_pe       start 4 PEs of ./my_pe on this machine
  switchyard info                      transports, devices and configuration here
  switchyard perf put-lat              put latency beside its baseline
  switchyard topo cluster.conf --as 0  PE 0's route to every peer of a topology
  switchyard sim up cluster.toml       simulate that cluster in network namespaces
  switchyard stat --once               counters of the jobs running here
  switchyard cc -o hello hello.c       compile an OpenSHMEM C program

Run `switchyard <COMMAND> --help` for a command's options.";

/// `switchyard`: transport-routing data plane for SHMEM-style one-sided
/// communication.
#[derive(Debug, Parser)]
#[command(
    name = "switchyard",
    version,
    about = "switchyard: transport-routing data plane for SHMEM-style one-sided communication",
    subcommand_required = true,
    arg_required_else_help = true,
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start N PEs of PROGRAM on this machine and wait for them
    #[command(long_about = launch::ABOUT)]
    Run(launch::RunArgs),
    /// Show transports, devices, machine facts and the configuration
    #[command(long_about = info::ABOUT)]
    Info(info::InfoArgs),
    /// Benchmark the data path with real PEs, each result beside a baseline
    #[command(long_about = perf::ABOUT)]
    Perf(perf::PerfArgs),
    /// Show the path classes and routes of a topology
    #[command(long_about = topo::ABOUT)]
    Topo(topo::TopoArgs),
    /// Simulate a cluster in network namespaces (root)
    #[command(long_about = sim::ABOUT)]
    Sim(sim::SimArgs),
    /// Show the counters of the jobs running on this machine
    #[command(long_about = stat::ABOUT)]
    Stat(stat::StatArgs),
    /// Compile an OpenSHMEM C program against libswitchyard_shmem
    #[command(long_about = cc::ABOUT)]
    Cc(cc::CcArgs),
    /// Decode the route trace of a running job or of a dump
    #[command(long_about = trace::ABOUT)]
    Trace(trace::TraceArgs),
    /// Print a shell completion script for switchyard
    Completions(CompletionsArgs),
}

/// `switchyard completions SHELL`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Install, for example:
  switchyard completions bash > /etc/bash_completion.d/switchyard
  switchyard completions zsh > \"${fpath[1]}/_switchyard\"
  switchyard completions fish > ~/.config/fish/completions/switchyard.fish")]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The command tree with its help layout, built (every command knows its
/// full name, `switchyard sim up`).
pub fn command() -> clap::Command {
    fn layout(cmd: clap::Command) -> clap::Command {
        // A flag given twice counts once and an option's last value wins,
        // as before clap: `--json --json`, `-n 2 -n 4`.
        cmd.help_template(COMMAND_HELP)
            .max_term_width(MAX_WIDTH)
            .args_override_self(true)
            .mut_subcommands(layout)
    }
    let mut cmd = Cli::command()
        .max_term_width(MAX_WIDTH)
        .mut_subcommands(layout);
    cmd.build();
    cmd
}

/// Parses `args` (without the program name).
///
/// # Errors
///
/// What to print instead: the help or version (exit status 0) or a usage
/// error (exit status [`EXIT_USAGE`]).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Cli, Output> {
    let mut cmd = command();
    let mut argv: Vec<OsString> = std::iter::once("switchyard".into()).chain(args).collect();
    if argv.get(1).is_some_and(|a| a == "run")
        && let Some(run) = cmd.find_subcommand("run")
    {
        launch::np_alias(run, &mut argv[2..]);
    }
    let matches = cmd.try_get_matches_from_mut(&argv);
    matches
        .and_then(|m| Cli::from_arg_matches(&m))
        .map_err(|e| render(&e, &mut subcommand(&cmd, &argv[1..])))
}

/// A usage error of the command `path` (`["sim", "up"]`): `message`, its
/// usage, exit status [`EXIT_USAGE`].
pub fn usage_error(path: &[&str], message: impl fmt::Display) -> Output {
    let path: Vec<OsString> = path.iter().map(OsString::from).collect();
    let mut sub = subcommand(&command(), &path);
    let e = sub.error(ErrorKind::ValueValidation, message);
    render(&e, &mut sub)
}

/// The (sub)command `args` name, `switchyard sim up` for `sim --name x up`:
/// its subcommand names, before the first operand that is not one.
fn subcommand(cmd: &clap::Command, args: &[OsString]) -> clap::Command {
    let mut sub = cmd.clone();
    for arg in args.iter().filter_map(|a| a.to_str()) {
        match sub.find_subcommand(arg) {
            Some(next) => sub = next.clone(),
            None if arg.starts_with('-') => {}
            None => break,
        }
    }
    sub
}

/// The output of clap's error `e` about the command `cmd`: the help or
/// version as asked, or `switchyard: error: MESSAGE` (`switchyard run:
/// error: ...` for `run`, whose messages all start so) with `cmd`'s usage.
fn render(e: &clap::Error, cmd: &mut clap::Command) -> Output {
    let text = e.render().to_string();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => return Output::ok(text),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            return Output {
                code: EXIT_USAGE,
                stdout: String::new(),
                stderr: text,
            };
        }
        _ => {}
    }
    let message = text.strip_prefix("error: ").unwrap_or(&text);
    let message = ["\n\nUsage:", "\n\nFor more information"]
        .iter()
        .filter_map(|end| message.find(end))
        .min()
        .map_or(message, |end| &message[..end])
        .trim_end();
    let name = cmd.get_bin_name().unwrap_or("switchyard").to_string();
    let me = if name == "switchyard run" {
        "switchyard run"
    } else {
        "switchyard"
    };
    Output {
        code: EXIT_USAGE,
        stdout: String::new(),
        stderr: format!(
            "{me}: error: {message}\n\n{}\n\nFor more information, try `{name} --help`.\n",
            cmd.render_usage()
        ),
    }
}

/// The script of `switchyard completions SHELL`.
pub(crate) fn completions(args: &CompletionsArgs) -> Output {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command(), "switchyard", &mut script);
    Output::ok(String::from_utf8_lossy(&script).into_owned())
}

/// Parses `args` for a unit test.
#[cfg(test)]
pub(crate) fn parse_strs(args: &[&str]) -> Result<Command, Output> {
    parse(args.iter().map(OsString::from)).map(|c| c.command)
}
