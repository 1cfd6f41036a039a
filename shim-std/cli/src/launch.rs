//! `switchyard run`: the command line of the launcher
//! ([`switchyard_launch`]): its flags become a [`LaunchOptions`] (and, with
//! `--sim`, a [`SimTarget`]), and the job's end its exit status.

use std::{ffi::OsString, time::Duration};

use clap::builder::TypedValueParser as _;
use switchyard_launch::{
    self as launcher, Bind, DEFAULT_BOOTSTRAP_TIMEOUT, DEFAULT_GRACE, LaunchError, LaunchOptions,
    MAX_PES, SimTarget, error_chain, is_var_name,
};

use crate::{Output, cli, values};

/// What `switchyard run --help` says after the options.
const AFTER_HELP: &str = "\
Each PE gets SWITCHYARD_RANK, SWITCHYARD_SIZE, SWITCHYARD_LOCAL_RANK,
SWITCHYARD_LOCAL_SIZE, SWITCHYARD_JOB_ID, SWITCHYARD_ROOT, ... in its
environment. Durations are seconds, whole or fractional, at most a week.
`-np N` is accepted for `-n N`.

Exit status: 0 when every rank exits 0; else the first failing rank's status,
or 128+signal if a signal killed it; 124 on --timeout; 130/143 when the
launcher got SIGINT/SIGTERM (forwarded to every PE); 127 program not found;
126 program not executable; 2 bad usage; 1 the launcher failed.";

/// What `switchyard run --help` says before the options.
pub(crate) const ABOUT: &str = "\
Starts N PEs (ranks 0..N-1) of PROGRAM on this machine, each the leader of its
own process group, and waits for them. The first rank that fails stops the job:
the others get SIGTERM, then SIGKILL after the grace time. Options end at the
first operand (or `--`): everything after PROGRAM is its arguments.";

/// `switchyard run` arguments.
#[derive(Debug, Clone, clap::Args)]
#[command(
    override_usage = "switchyard run -n N [OPTIONS] [--] PROGRAM [ARGS]...",
    after_help = AFTER_HELP
)]
pub struct RunArgs {
    /// Number of PEs (1..=4096)
    #[arg(
        short = 'n',
        long = "np",
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PES))
    )]
    pub n: u32,
    /// Pin the PEs (the application): rank r to the (r mod k)-th of the k
    /// CPUs the launcher may use, or pin nothing [default: core when N <= k,
    /// else none]; the PE sees SWITCHYARD_BOUND_CPU, and all the PEs' CPUs in
    /// SWITCHYARD_PE_CPUS. Where the progress threads go is the config's
    /// progress_cpu
    #[arg(
        long = "bind-pes",
        value_name = "core|none",
        hide_possible_values = true,
        value_parser = bind_parser()
    )]
    pub bind: Option<Bind>,
    /// Deprecated: --bind-pes (it pinned the PEs, never the progress threads)
    #[arg(
        long = "bind-to",
        value_name = "core|none",
        hide = true,
        conflicts_with = "bind",
        value_parser = bind_parser()
    )]
    pub bind_to: Option<Bind>,
    /// Stop the job after S seconds (exit status 124)
    #[arg(
        long,
        value_name = "S",
        allow_negative_numbers = true,
        value_parser = values::positive_seconds
    )]
    pub timeout: Option<Duration>,
    /// Seconds between SIGTERM and SIGKILL when the job is stopped
    #[arg(
        long,
        value_name = "S",
        default_value = "2",
        allow_negative_numbers = true,
        value_parser = values::seconds
    )]
    pub grace: Duration,
    /// Seconds the rendezvous waits for every rank to check in
    #[arg(
        long = "bootstrap-timeout",
        value_name = "S",
        default_value = "60",
        allow_negative_numbers = true,
        value_parser = values::positive_seconds
    )]
    pub bootstrap_timeout: Duration,
    /// Set VAR=VAL in every PE; VAR alone passes the launcher's own value
    /// (repeatable)
    #[arg(short = 'x', value_name = "VAR[=VAL]", value_parser = export)]
    pub env: Vec<(String, String)>,
    /// Prefix each output line with `[rank] ` (the default)
    #[arg(long, overrides_with = "no_tag_output")]
    pub tag_output: bool,
    /// Pass the PEs' output through untouched
    #[arg(long, overrides_with = "tag_output")]
    pub no_tag_output: bool,
    /// Run in a simulated cluster (`switchyard sim`, needs root): PE p in the
    /// network namespace of node p / K. NAME: a sim that is up. FILE: a
    /// topology; the sim of --name is used when up, else one is built from
    /// FILE and torn down when the job ends
    #[arg(long, value_name = "FILE|NAME")]
    pub sim: Option<String>,
    /// The sim to use or build with --sim FILE [default: sy]
    #[arg(long, value_name = "NAME", requires = "sim")]
    pub name: Option<String>,
    /// PEs per node under --sim [default: the sim's]
    #[arg(
        long = "pes-per-node",
        value_name = "K",
        requires = "sim",
        value_parser = values::at_least_one
    )]
    pub pes_per_node: Option<u32>,
    /// Rails of a sim built from FILE, 1 to 4 [default: the file's, else 1]
    #[arg(long, value_name = "R", requires = "sim", value_parser = values::rails)]
    pub rails: Option<u32>,
    /// Serve `/metrics` (Prometheus text format) at ADDR (such as
    /// 127.0.0.1:9464) while the job runs: the counters of its PEs on this
    /// machine, read from their stats segments
    #[arg(long = "metrics-addr", value_name = "ADDR", conflicts_with = "sim")]
    pub metrics_addr: Option<String>,
    /// The program each PE runs (looked up in PATH), and its arguments
    #[arg(
        value_name = "PROGRAM",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<OsString>,
}

impl RunArgs {
    /// The job these arguments ask for, and the sim to run it in.
    ///
    /// # Errors
    ///
    /// A message naming the flag whose value [`LaunchOptions::validate`]
    /// refuses (`-x SWITCHYARD_RANK=1`).
    pub fn options(&self) -> Result<(LaunchOptions, Option<SimTarget>), String> {
        let (program, args) = self.command.split_first().ok_or("no program given")?;
        let mut opts = LaunchOptions::new(self.n, program);
        opts.args = args.to_vec();
        opts.bind = self.bind.or(self.bind_to).unwrap_or(Bind::Auto);
        opts.timeout = self.timeout;
        opts.grace = self.grace;
        opts.bootstrap_timeout = self.bootstrap_timeout;
        opts.env = self.env.clone();
        opts.tag_output = !self.no_tag_output;
        opts.validate().map_err(|e| match e {
            LaunchError::Invalid { option, reason } => {
                let flag = match option {
                    "n" => "-n",
                    "env" => "-x",
                    "timeout" => "--timeout",
                    "grace" => "--grace",
                    "bootstrap_timeout" => "--bootstrap-timeout",
                    other => other,
                };
                format!("{flag}: {reason}")
            }
            other => other.to_string(),
        })?;
        let sim = self.sim.as_ref().map(|target| SimTarget {
            target: target.clone(),
            name: self.name.clone(),
            pes_per_node: self.pes_per_node,
            rails: self.rails,
        });
        Ok((opts, sim))
    }
}

/// `-x VAR=VAL`, or `-x VAR` for the launcher's own value of VAR.
fn export(v: &str) -> Result<(String, String), String> {
    let (name, value) = match v.split_once('=') {
        Some((name, value)) => (name, value.to_string()),
        None => {
            let value = std::env::var(v).map_err(|e| match e {
                std::env::VarError::NotPresent if is_var_name(v) => {
                    format!("{v} is not set in the launcher's environment")
                }
                std::env::VarError::NotPresent => "expected VAR=VAL or VAR".to_string(),
                std::env::VarError::NotUnicode(_) => {
                    format!("the launcher's value of {v} is not UTF-8")
                }
            })?;
            (v, value)
        }
    };
    if !is_var_name(name) {
        return Err("expected VAR=VAL or VAR, VAR a name ([A-Za-z_][A-Za-z0-9_]*)".into());
    }
    Ok((name.to_string(), value))
}

/// `-np N`, as mpirun spells it: clap knows no single-dash long options, so
/// an `-np` among `run`'s options (`args`, after `run`) becomes `--np`. The
/// options end at the first operand or `--`: an `-np` of the program's own
/// is left alone.
pub(crate) fn np_alias(run: &clap::Command, args: &mut [OsString]) {
    let takes_value = |a: &str| {
        run.get_arguments().any(|arg| {
            arg.get_action().takes_values()
                && (arg
                    .get_long()
                    .is_some_and(|l| a.strip_prefix("--") == Some(l))
                    || arg.get_short().is_some_and(|s| a == format!("-{s}")))
        })
    };
    let mut i = 0;
    while let Some(a) = args.get(i).and_then(|a| a.to_str()) {
        if a == "--" || a == "-" || !a.starts_with('-') {
            break;
        }
        if a == "-np" {
            args[i] = "--np".into();
            i += 2;
        } else {
            i += if takes_value(a) { 2 } else { 1 };
        }
    }
}

/// The parser of `--bind-pes` (and of its old name `--bind-to`).
fn bind_parser() -> impl clap::builder::TypedValueParser<Value = Bind> {
    clap::builder::PossibleValuesParser::new(["core", "none"])
        .map(|v| if v == "core" { Bind::Core } else { Bind::None })
}

impl RunArgs {
    /// What the command line says with deprecated names, one message each
    /// (the launcher prints them as warnings).
    pub fn deprecations(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.bind_to.is_some() {
            out.push(
                "--bind-to is deprecated: it pins the PEs (not the progress threads, which the config's progress_cpu places); use --bind-pes",
            );
        }
        out
    }
}

/// Runs `switchyard run`: the job, in a sim when `--sim` says so. The PEs'
/// output and the launcher's messages are written as they come; the
/// returned [`Output`] carries only the exit status.
pub fn run(args: &RunArgs) -> Output {
    let (opts, sim) = match args.options() {
        Ok(x) => x,
        Err(message) => return cli::usage_error(&["run"], message),
    };
    for d in args.deprecations() {
        eprintln!("switchyard run: warning: {d}");
    }
    let mut opts = opts;
    // The job id is chosen here, so the `/metrics` server knows its
    // objects; the server stops (its socket closes) when the job ends.
    let _metrics = match &args.metrics_addr {
        Some(addr) => {
            let job = match opts.job_id {
                Some(j) => j,
                None => match launcher::new_job_id() {
                    Ok(j) => j,
                    Err(e) => return run_failed(format!("no job id: {e}")),
                },
            };
            opts.job_id = Some(job);
            match crate::stat::serve_metrics(addr, job) {
                Ok(s) => Some(s),
                Err(e) => return run_failed(e),
            }
        }
        None => None,
    };
    let result = match &sim {
        None => launcher::launch(&opts),
        Some(target) => launcher::launch_in_sim(&opts, target),
    };
    match result {
        Ok(outcome) => Output::status(outcome.exit_code()),
        Err(e) => Output {
            code: e.exit_code(),
            stdout: String::new(),
            stderr: format!("switchyard run: {}\n", error_chain(&e)),
        },
    }
}

/// The launcher failed before starting the job: exit status 1 and `why`.
fn run_failed(why: impl std::fmt::Display) -> Output {
    Output {
        code: 1,
        stdout: String::new(),
        stderr: format!("switchyard run: {why}\n"),
    }
}

/// Defaults the help states, checked against the launcher's.
const _: () = assert!(DEFAULT_GRACE.as_secs() == 2 && DEFAULT_BOOTSTRAP_TIMEOUT.as_secs() == 60);

#[cfg(test)]
mod test;
