//! What to launch: [`LaunchOptions`], [`Bind`], and their checks.

use std::{ffi::OsString, time::Duration};

use crate::{
    DEFAULT_BOOTSTRAP_TIMEOUT, DEFAULT_GRACE, LaunchError, MAX_DURATION, MAX_PES, sim::SimState,
    vars,
};

/// Whether and how the PEs (their application threads) are pinned to CPUs
/// (`switchyard run --bind-pes`). Their progress threads are placed by the
/// PEs' own `progress_cpu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bind {
    /// [`Bind::Core`] when the job has no more PEs than the launcher has CPUs,
    /// else [`Bind::None`].
    #[default]
    Auto,
    /// Rank `r` on the `r mod k`-th of the launcher's `k` allowed CPUs.
    Core,
    /// No pinning.
    None,
}

/// What to launch, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Number of PEs, `1..=`[`MAX_PES`].
    pub n: u32,
    /// How the PEs are pinned.
    pub bind: Bind,
    /// Stop the whole job after this long ([`JobEnd::TimedOut`](crate::JobEnd::TimedOut)).
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the job is stopped.
    pub grace: Duration,
    /// Extra environment variables for every PE, in order.
    pub env: Vec<(String, String)>,
    /// Prefix each output line with `[rank] `.
    pub tag_output: bool,
    /// The program each PE runs (looked up in `PATH` when it has no `/`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// The job id; `None` draws a fresh random one.
    pub job_id: Option<u64>,
    /// How long the rendezvous waits for every rank to check in.
    pub bootstrap_timeout: Duration,
    /// Run the PEs in this sim (which must be up): PE `p` in the namespace of
    /// node `p / sim.pes_per_node`. `None`: all on this machine, as is.
    pub sim: Option<SimState>,
}

impl LaunchOptions {
    /// `n` PEs of `program` with no arguments and the defaults: automatic
    /// binding, no timeout, [`DEFAULT_GRACE`], tagged output, a fresh job id.
    pub fn new(n: u32, program: impl Into<OsString>) -> LaunchOptions {
        LaunchOptions {
            n,
            bind: Bind::Auto,
            timeout: None,
            grace: DEFAULT_GRACE,
            env: Vec::new(),
            tag_output: true,
            program: program.into(),
            args: Vec::new(),
            job_id: None,
            bootstrap_timeout: DEFAULT_BOOTSTRAP_TIMEOUT,
            sim: None,
        }
    }

    /// Checks the options without starting anything.
    ///
    /// # Errors
    ///
    /// [`LaunchError::Invalid`] naming the option: `n` outside
    /// `1..=`[`MAX_PES`], an empty program, a zero bootstrap timeout, a
    /// timeout, grace time or bootstrap timeout longer than [`MAX_DURATION`],
    /// more PEs than the sim has room for, an environment variable whose name
    /// is not a shell identifier ([`is_var_name`]) or is one the launcher sets
    /// itself ([`vars::ALL`]), or a value with a NUL byte.
    pub fn validate(&self) -> Result<(), LaunchError> {
        let invalid =
            |option: &'static str, reason: String| LaunchError::Invalid { option, reason };
        if self.n == 0 || self.n > MAX_PES {
            return Err(invalid("n", format!("{} is not in 1..={MAX_PES}", self.n)));
        }
        if self.program.is_empty() {
            return Err(invalid("program", "it is empty".into()));
        }
        if self.bootstrap_timeout.is_zero() {
            return Err(invalid("bootstrap_timeout", "it is zero".into()));
        }
        for (option, d) in [
            ("timeout", self.timeout),
            ("grace", Some(self.grace)),
            ("bootstrap_timeout", Some(self.bootstrap_timeout)),
        ] {
            if let Some(d) = d
                && d > MAX_DURATION
            {
                return Err(invalid(
                    option,
                    format!(
                        "{} s is more than a week ({} s)",
                        d.as_secs_f64(),
                        MAX_DURATION.as_secs()
                    ),
                ));
            }
        }
        if let Some(sim) = &self.sim {
            let slots = sim.nodes.len() as u64 * u64::from(sim.pes_per_node);
            if sim.pes_per_node == 0 || u64::from(self.n) > slots {
                return Err(invalid(
                    "n",
                    format!(
                        "{} PEs do not fit in sim '{}': {} node(s) x {} PE(s) per node",
                        self.n,
                        sim.name,
                        sim.nodes.len(),
                        sim.pes_per_node
                    ),
                ));
            }
        }
        for (name, value) in &self.env {
            if !is_var_name(name) {
                return Err(invalid(
                    "env",
                    format!("'{name}' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"),
                ));
            }
            if vars::ALL.contains(&name.as_str()) {
                return Err(invalid("env", format!("{name} is set by the launcher")));
            }
            if value.contains('\0') {
                return Err(invalid(
                    "env",
                    format!("the value of {name} has a NUL byte"),
                ));
            }
        }
        Ok(())
    }
}

/// Whether `name` can be an environment variable's name for `-x`: a shell
/// identifier, `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_var_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
