//! `switchyard run`: starts the PEs of a job on this machine, watches them, and
//! cleans up after them.
//!
//! [`launch`] is the library entry point (`switchyard perf` starts its own PEs
//! through it); [`main`] is the `switchyard run` command line around it.
//!
//! ## What a job is
//!
//! [`launch`] draws a fresh job id, hosts the bootstrap rendezvous on
//! `127.0.0.1:0`, and starts `n` copies of the program, one per rank, each as the
//! leader of its own process group (so a signal for a rank reaches whatever that
//! rank started, and a terminal's Ctrl-C reaches only the launcher, which
//! forwards it once). Each PE also gets `PR_SET_PDEATHSIG = SIGKILL`: if the
//! launcher itself is killed, its PEs do not outlive it.
//!
//! Rank 0 inherits the launcher's standard input unless it is a terminal; every
//! other rank (and rank 0 under a terminal) reads `/dev/null`.
//!
//! The rendezvous is a [`RootServer`] on a thread of the launcher, waiting
//! [`LaunchOptions::bootstrap_timeout`] for every rank's card. When it fails
//! while the job runs (a rank never arrived, one left without its goodbye) the
//! launcher prints `switchyard run: bootstrap failed: ...`; it does not stop the
//! job for that, because the rendezvous tells every PE itself. A program that
//! never bootstraps (`hostname`) is fine, but a job of them that outlives the
//! bootstrap timeout gets that message too.
//!
//! ## Environment contract
//!
//! Every PE inherits the launcher's environment, plus:
//!
//! | variable | value |
//! |---|---|
//! | `SWITCHYARD_RANK` | this PE's rank, `0..SIZE` |
//! | `SWITCHYARD_SIZE` | number of PEs in the job |
//! | `SWITCHYARD_LOCAL_RANK` | rank among the PEs of this machine (= `RANK`: one machine); under `--sim`, among the PEs of its node |
//! | `SWITCHYARD_LOCAL_SIZE` | PEs on this machine (= `SIZE`); under `--sim`, PEs on its node |
//! | `SWITCHYARD_JOB_ID` | the job id: a random `u64` as 16 lowercase hex digits |
//! | `SWITCHYARD_ROOT` | `host:port` of the bootstrap rendezvous |
//! | `SWITCHYARD_ROOT_HOST` | `launcher`: the launcher hosts the rendezvous |
//! | `SWITCHYARD_LAUNCHER_PID` | the launcher's process id |
//! | `SWITCHYARD_BOUND_CPU` | the CPU this PE is pinned to; absent when not pinned |
//!
//! and, under `switchyard run --sim` ([`LaunchOptions::sim`]) only:
//!
//! | variable | value |
//! |---|---|
//! | `SWITCHYARD_SIM` | the sim's name |
//! | `SWITCHYARD_NODE_ID` | the index of the PE's node (decimal); overrides the hostname/boot-id node id |
//! | `SWITCHYARD_SWITCH_ID` | the leaf switch id of its node (decimal) |
//! | `SWITCHYARD_TREE_ID` | the tree id of that leaf (decimal): PEs on different trees are `UNREACHABLE` |
//! | `SWITCHYARD_TCP_ADDRS` | the node's rail addresses in rail order, comma-separated (`10.100.0.1,10.101.0.1`) |
//!
//! `SWITCHYARD_ROOT` is then `10.99.255.254:PORT`, the management bridge of the
//! sim, which every node reaches over its `mg` interface.
//!
//! Also every `-x VAR=VAL` ([`LaunchOptions::env`]). The names are in [`vars`];
//! `-x` may not set them.
//!
//! ## CPU binding
//!
//! [`Bind::Core`] pins rank `r` to the `r mod k`-th of the `k` CPUs the launcher
//! itself may run on (its affinity mask; on an unrestricted machine that is CPU
//! `r mod ncpus`), with `sched_setaffinity` between fork and exec.
//! [`Bind::None`] pins nothing. [`Bind::Auto`], the default, is `Core` when
//! `n` is at most `k` and `None` otherwise: oversubscribed PEs that busy-poll
//! must not share a pinned core.
//!
//! ## Output
//!
//! With [`LaunchOptions::tag_output`] (the default; `--no-tag-output` turns it
//! off) each line a PE writes is prefixed with `[rank] `: `[2] hello`. A PE's
//! stdout lines go to the launcher's stdout and its stderr lines to the
//! launcher's stderr, each line in one write, so lines of different PEs never
//! mix within a line. A last line without a newline gets one; a line longer than
//! [`MAX_LINE`] bytes is split. Untagged, the PEs write straight to the
//! launcher's stdout and stderr.
//!
//! The launcher's own messages go to stderr and start with `switchyard run: `.
//!
//! ## Failures and exit status
//!
//! The job fails fast: the first rank that exits non-zero or dies by a signal
//! is named (`switchyard run: rank 2 exited with status 3`, `switchyard run:
//! rank 1 was killed by signal 9 (SIGKILL)`), the other ranks get SIGTERM, and
//! after [`LaunchOptions::grace`] (default 2 s) SIGKILL. SIGINT and SIGTERM sent
//! to the launcher are forwarded to every PE, followed by the same grace and
//! SIGKILL; a second one kills at once. The job's processes are always waited
//! for with bounded waits: nothing here hangs on a PE that ignores signals.
//!
//! | exit status | meaning |
//! |---|---|
//! | 0 | every rank exited with status 0 |
//! | 1..=255 | the first failing rank's exit status |
//! | 128 + s | the first failing rank was killed by signal `s` |
//! | 124 ([`EXIT_TIMEOUT`]) | `--timeout` expired |
//! | 130 / 143 | the launcher got SIGINT / SIGTERM (128 + signal) |
//! | 126 ([`EXIT_NOT_EXECUTABLE`]) | the program exists but cannot be executed |
//! | 127 ([`EXIT_NOT_FOUND`]) | the program was not found |
//! | 2 ([`EXIT_USAGE`]) | bad command line |
//! | 1 ([`EXIT_FAILURE`]) | the launcher itself failed (no rendezvous, no job id, ...) |
//!
//! ## Shared memory
//!
//! When every PE is gone, however the job ended, the launcher deletes every
//! `/dev/shm/switchyard-<job id>-*` object ([`shm_object_prefix`]) and says how
//! many it removed if any were left. A launcher killed by SIGKILL cannot do
//! that; the shm driver removes objects of dead jobs later.
//!
//! ## Simulated clusters (`--sim`)
//!
//! With [`LaunchOptions::sim`] set to a running sim's [`SimState`], PE `p`
//! runs on node `p / pes_per_node`: between fork and exec it enters that
//! node's network namespace (`setns` on a file opened before the fork), so it
//! sees only the node's interfaces (`lo`, `r0`.., `mg`). Only the network
//! namespace changes: PEs of one node still share `/dev/shm`. The rendezvous
//! listens on [`crate::sim::MGMT_ADDR`] inside the sim's fabric namespace.
//! `switchyard run --sim FILE` brings a sim up first when none of that name
//! is up, and tears it down when the job ends, however it ends.
//!
//! Linux only (`sched_setaffinity`, `PR_SET_PDEATHSIG`, `/dev/shm`, `setns`).
//!
//! ## Example
//!
//! ```no_run
//! use switchyard_launch::{LaunchOptions, launch};
//!
//! let mut opts = LaunchOptions::new(4, "./my_pe");
//! opts.timeout = Some(std::time::Duration::from_secs(60));
//! let outcome = launch(&opts)?;
//! std::process::exit(outcome.exit_code().into());
//! # Ok::<(), switchyard_launch::LaunchError>(())
//! ```

#![deny(missing_docs)]
#![deny(unsafe_code)]

use std::{
    ffi::OsString,
    fmt,
    fs::File,
    io::{self, BufRead, BufReader, IsTerminal, Read, Write},
    net::{Ipv4Addr, SocketAddr},
    os::unix::process::{CommandExt, ExitStatusExt},
    path::{Path, PathBuf},
    process::{Child, Command, ExitCode, ExitStatus, Stdio},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use switchyard_bootstrap::{BootstrapError, RootServer};

use crate::sim::{Sim, SimError, SimGuard, SimSpec, SimState};

pub mod sim;
mod sys;

/// Exit status for bad usage or bad input.
pub const EXIT_USAGE: u8 = 2;

/// Exit status when the launcher itself fails.
pub const EXIT_FAILURE: u8 = 1;
/// Exit status when `--timeout` expired (as `timeout(1)`).
pub const EXIT_TIMEOUT: u8 = 124;
/// Exit status when the program exists but cannot be executed (as a shell).
pub const EXIT_NOT_EXECUTABLE: u8 = 126;
/// Exit status when the program was not found (as a shell).
pub const EXIT_NOT_FOUND: u8 = 127;

/// Default time between SIGTERM and SIGKILL when a job is stopped.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
/// Default time the rendezvous waits for every rank to check in.
pub const DEFAULT_BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(60);
/// Most PEs one launcher starts (a typo must not fork thousands of processes).
pub const MAX_PES: u32 = 4096;
/// Longest output line passed through whole; longer lines are split.
pub const MAX_LINE: usize = 64 * 1024;
/// Where POSIX shared-memory objects live.
pub const SHM_DIR: &str = "/dev/shm";

/// How often the launcher checks its PEs, the clock and its signals.
const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How long the launcher waits for processes after SIGKILL before giving up on them.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How long a failing rank's last output may take to arrive before it is named.
const LAST_WORDS: Duration = Duration::from_millis(100);
/// How long a failed job waits for the rendezvous to report why.
const ROOT_LINGER: Duration = Duration::from_millis(1500);
/// Prefix of the launcher's own messages.
const ME: &str = "switchyard run";

/// Names of the environment variables the launcher sets in every PE (those the
/// bootstrap reads are [`switchyard_bootstrap::vars`]'s).
pub mod vars {
    use switchyard_bootstrap::vars as bootstrap;

    /// This PE's rank, `0..SIZE`.
    pub const RANK: &str = bootstrap::RANK;
    /// Number of PEs in the job.
    pub const SIZE: &str = bootstrap::SIZE;
    /// Rank among the PEs of this machine.
    pub const LOCAL_RANK: &str = bootstrap::LOCAL_RANK;
    /// Number of PEs on this machine.
    pub const LOCAL_SIZE: &str = bootstrap::LOCAL_SIZE;
    /// Job id, 16 lowercase hex digits.
    pub const JOB_ID: &str = bootstrap::JOB_ID;
    /// `host:port` of the bootstrap rendezvous.
    pub const ROOT: &str = bootstrap::ROOT;
    /// Who hosts the rendezvous; `launcher` under `switchyard run`.
    pub const ROOT_HOST: &str = bootstrap::ROOT_HOST;
    /// Process id of the launcher.
    pub const LAUNCHER_PID: &str = "SWITCHYARD_LAUNCHER_PID";
    /// CPU the PE is pinned to; absent when it is not pinned.
    pub const BOUND_CPU: &str = "SWITCHYARD_BOUND_CPU";
    /// Under `--sim`: the sim's name.
    pub const SIM: &str = "SWITCHYARD_SIM";
    /// Under `--sim`: the PE's node index (decimal `u64`); overrides the node
    /// id drawn from the hostname and boot id.
    pub const NODE_ID: &str = "SWITCHYARD_NODE_ID";
    /// Under `--sim`: the leaf switch id of the PE's node (decimal).
    pub const SWITCH_ID: &str = "SWITCHYARD_SWITCH_ID";
    /// Under `--sim`: the tree id of that leaf switch (decimal); PEs on
    /// different trees cannot reach each other.
    pub const TREE_ID: &str = "SWITCHYARD_TREE_ID";
    /// Under `--sim`: the node's rail addresses, in rail order,
    /// comma-separated (`10.100.0.1,10.101.0.1`).
    pub const TCP_ADDRS: &str = "SWITCHYARD_TCP_ADDRS";

    /// Every variable above: `-x` may not set them.
    pub const ALL: [&str; 14] = [
        RANK,
        SIZE,
        LOCAL_RANK,
        LOCAL_SIZE,
        JOB_ID,
        ROOT,
        ROOT_HOST,
        LAUNCHER_PID,
        BOUND_CPU,
        SIM,
        NODE_ID,
        SWITCH_ID,
        TREE_ID,
        TCP_ADDRS,
    ];
}

/// Whether and how PEs are pinned to CPUs.
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
    /// CPU binding.
    pub bind: Bind,
    /// Stop the whole job after this long ([`JobEnd::TimedOut`]).
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
    /// `1..=`[`MAX_PES`], an empty program, a zero bootstrap timeout, an environment variable whose name
    /// is not a shell identifier (`[A-Za-z_][A-Za-z0-9_]*`) or is one the
    /// launcher sets itself ([`vars::ALL`]), or a value with a NUL byte.
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
            if !is_identifier(name) {
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

fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// How one rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankExit {
    /// It exited with this status.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

impl RankExit {
    /// From a process's wait status.
    pub fn from_status(status: ExitStatus) -> RankExit {
        match (status.code(), status.signal()) {
            (Some(code), _) => RankExit::Code(code),
            (None, Some(sig)) => RankExit::Signal(sig),
            // Stopped or continued: `wait` does not report those.
            (None, None) => RankExit::Code(i32::from(EXIT_FAILURE)),
        }
    }

    /// Exited with status 0.
    pub fn success(self) -> bool {
        self == RankExit::Code(0)
    }

    /// The exit status a shell would give: the status itself, or 128 + signal.
    pub fn exit_code(self) -> u8 {
        match self {
            RankExit::Code(code) => u8::try_from(code).unwrap_or(EXIT_FAILURE),
            RankExit::Signal(sig) => u8::try_from(128 + sig).unwrap_or(u8::MAX),
        }
    }
}

/// `exited with status 3`, `was killed by signal 9 (SIGKILL)`.
impl fmt::Display for RankExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RankExit::Code(code) => write!(f, "exited with status {code}"),
            RankExit::Signal(sig) => {
                write!(f, "was killed by signal {sig}")?;
                match signal_name(sig) {
                    Some(name) => write!(f, " ({name})"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The usual name of signal `sig` (`SIGKILL`), if it has one.
pub fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

/// Why a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEnd {
    /// Every rank exited with status 0.
    Success,
    /// This rank failed first; the others were stopped.
    RankFailed {
        /// The rank.
        rank: u32,
        /// How it ended.
        exit: RankExit,
    },
    /// The job's timeout expired; every rank was stopped.
    TimedOut(Duration),
    /// The launcher got this signal (SIGINT or SIGTERM) and forwarded it.
    Signaled(i32),
}

impl JobEnd {
    /// The launcher's exit status for this end (see the module doc).
    pub fn exit_code(self) -> u8 {
        match self {
            JobEnd::Success => 0,
            JobEnd::RankFailed { exit, .. } => exit.exit_code(),
            JobEnd::TimedOut(_) => EXIT_TIMEOUT,
            JobEnd::Signaled(sig) => RankExit::Signal(sig).exit_code(),
        }
    }
}

impl fmt::Display for JobEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            JobEnd::Success => f.write_str("every rank exited with status 0"),
            JobEnd::RankFailed { rank, exit } => write!(f, "rank {rank} {exit}"),
            JobEnd::TimedOut(after) => write!(f, "timed out after {}", Secs(after)),
            JobEnd::Signaled(sig) => {
                write!(f, "stopped by {}", signal_name(sig).unwrap_or("a signal"))
            }
        }
    }
}

/// What became of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutcome {
    /// The job id.
    pub job_id: u64,
    /// Why it ended.
    pub end: JobEnd,
    /// How each rank ended, by rank; `None` for a rank that did not exit even
    /// after SIGKILL (the launcher gave up waiting for it).
    pub ranks: Vec<Option<RankExit>>,
    /// Shared-memory objects of the job the launcher removed afterwards.
    pub shm_removed: usize,
    /// What the bootstrap rendezvous reported, if it failed while the job ran.
    pub bootstrap_error: Option<String>,
}

impl JobOutcome {
    /// Every rank exited with status 0.
    pub fn success(&self) -> bool {
        self.end == JobEnd::Success
    }

    /// The launcher's exit status (see the module doc).
    pub fn exit_code(&self) -> u8 {
        self.end.exit_code()
    }
}

/// Why a job could not be launched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The options are invalid ([`LaunchOptions::validate`]).
    #[error("invalid {option}: {reason}")]
    Invalid {
        /// Which option.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading a job id from `/dev/urandom` failed.
    #[error("cannot draw a job id from /dev/urandom")]
    JobId(#[source] io::Error),
    /// Reading the launcher's CPU affinity failed (needed for [`Bind::Core`]).
    #[error("cannot read the launcher's CPU affinity (sched_getaffinity)")]
    Affinity(#[source] io::Error),
    /// Installing the SIGINT/SIGTERM handlers failed.
    #[error("cannot install the SIGINT/SIGTERM handlers (sigaction)")]
    Sigaction(#[source] io::Error),
    /// The bootstrap rendezvous ([`RootServer`]) could not be started.
    #[error("cannot start the bootstrap rendezvous")]
    Rendezvous(#[source] BootstrapError),
    /// Starting a PE failed (the ranks already started were killed).
    #[error("cannot start '{program}' for rank {rank}")]
    Spawn {
        /// The program, lossily as UTF-8.
        program: String,
        /// The rank.
        rank: u32,
        /// Why: `NotFound`, `PermissionDenied`, ...
        #[source]
        source: io::Error,
    },
    /// Starting an output-forwarding thread failed (the job was killed).
    #[error("cannot start the output thread of rank {rank}")]
    OutputThread {
        /// The rank.
        rank: u32,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The simulated cluster could not be used, brought up or entered.
    #[error("sim")]
    Sim(#[source] SimError),
    /// Waiting for a PE failed (the job was killed).
    #[error("cannot wait for rank {rank}")]
    Wait {
        /// The rank.
        rank: u32,
        /// Why.
        #[source]
        source: io::Error,
    },
}

impl LaunchError {
    /// The launcher's exit status for this error: [`EXIT_NOT_FOUND`] or
    /// [`EXIT_NOT_EXECUTABLE`] when the program cannot be started, as a shell
    /// does; [`EXIT_USAGE`] for invalid options; else [`EXIT_FAILURE`].
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::Invalid { .. } => EXIT_USAGE,
            LaunchError::Sim(e) if e.is_usage() => EXIT_USAGE,
            LaunchError::Spawn { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                io::ErrorKind::PermissionDenied => EXIT_NOT_EXECUTABLE,
                _ => EXIT_FAILURE,
            },
            _ => EXIT_FAILURE,
        }
    }
}

/// `switchyard-<job id, 16 lowercase hex digits>-`: the name prefix of every
/// POSIX shared-memory object of job `job_id` (the shm driver names its objects
/// `<prefix><pe>`; this must stay in step with its `object_prefix`).
pub fn shm_object_prefix(job_id: u64) -> String {
    switchyard_shm::object_prefix(job_id)
}

/// Where `shmem_global_exit` leaves its marker for the launcher: a file of the
/// job in [`SHM_DIR`] (removed with the job's objects) holding `RANK STATUS`.
/// The first PE to create it decides the job's exit status.
pub fn global_exit_path(job_id: u64) -> PathBuf {
    switchyard_shm::global_exit_path(job_id)
}

/// The `(rank, status)` a PE left in [`global_exit_path`], if any.
pub fn read_global_exit(job_id: u64) -> Option<(u32, i32)> {
    let text = std::fs::read_to_string(global_exit_path(job_id)).ok()?;
    let mut it = text.split_whitespace();
    let rank = it.next()?.parse().ok()?;
    let status = it.next()?.parse().ok()?;
    Some((rank, status))
}

/// Deletes every object of job `job_id` in `dir` (normally [`SHM_DIR`]), that
/// is every entry whose name starts with [`shm_object_prefix`]; returns how many
/// it deleted. A missing `dir` holds nothing.
///
/// # Errors
///
/// Listing `dir` or deleting an entry failed (an entry that vanished meanwhile
/// is not an error).
pub fn remove_shm_objects(dir: &Path, job_id: u64) -> io::Result<usize> {
    let prefix = shm_object_prefix(job_id);
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        if !entry
            .file_name()
            .as_encoded_bytes()
            .starts_with(prefix.as_bytes())
        {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// A fresh random job id from `/dev/urandom`.
///
/// # Errors
///
/// `/dev/urandom` cannot be read.
pub fn new_job_id() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(u64::from_ne_bytes(bytes))
}

/// Runs a job: starts `opts.n` PEs, forwards their output, watches them until
/// every one has exited (stopping the rest when one fails, the timeout expires
/// or the launcher gets SIGINT/SIGTERM), then removes the job's shared-memory
/// objects. Prints its own messages to stderr as things happen (see the module
/// doc). SIGINT and SIGTERM are caught while it runs; the previous handlers are
/// restored when it returns.
///
/// # Errors
///
/// The job could not be started: [`LaunchError::Invalid`] options, a failed
/// [`LaunchError::Spawn`] (the ranks already started are killed first),
/// [`LaunchError::JobId`], [`LaunchError::Affinity`],
/// [`LaunchError::Sigaction`], [`LaunchError::Rendezvous`],
/// [`LaunchError::OutputThread`], or [`LaunchError::Wait`]. A job whose ranks
/// fail is not an error: it is an `Ok` [`JobOutcome`] saying which rank failed.
pub fn launch(opts: &LaunchOptions) -> Result<JobOutcome, LaunchError> {
    opts.validate()?;
    let job_id = match opts.job_id {
        Some(id) => id,
        None => new_job_id().map_err(LaunchError::JobId)?,
    };
    let cpus = match opts.bind {
        Bind::None => None,
        Bind::Core => Some(sys::allowed_cpus().map_err(LaunchError::Affinity)?),
        Bind::Auto => sys::allowed_cpus()
            .ok()
            .filter(|cpus| !cpus.is_empty() && opts.n as usize <= cpus.len()),
    }
    .filter(|cpus| !cpus.is_empty());
    let mut signals = sys::SignalWatch::install().map_err(LaunchError::Sigaction)?;
    let mut root = match &opts.sim {
        None => Rendezvous::start(job_id, opts.n, opts.bootstrap_timeout)?,
        Some(sim) => {
            Rendezvous::start_in_sim(&sim.fabric_netns, job_id, opts.n, opts.bootstrap_timeout)?
        }
    };

    let mut job = Job {
        opts,
        job_id,
        pes: Vec::with_capacity(opts.n as usize),
        bootstrap_error: None,
    };
    let stdin_for_rank0 = !io::stdin().is_terminal();
    let mut result = (0..opts.n).try_for_each(|rank| {
        let cpu = cpus.as_ref().map(|c| c[rank as usize % c.len()]);
        job.spawn(rank, cpu, root.addr, rank == 0 && stdin_for_rank0)
    });
    let mut end = JobEnd::Success;
    if result.is_ok() {
        match job.supervise(&mut root, &mut signals) {
            Ok(e) => end = e,
            Err(e) => result = Err(e),
        }
    }
    if result.is_err() {
        job.kill_all();
    }
    job.drain_output();
    // A failure the rendezvous reported as the job ended (a PE gone without
    // its goodbye, say). After a failed job, give it a moment: it lingers up to
    // a second telling late PEs why before its thread ends. One still serving
    // after that (a program that never bootstraps) is left to end on its own.
    if end != JobEnd::Success {
        root.wait(ROOT_LINGER);
    }
    if job.bootstrap_error.is_none()
        && let Some(e) = root.poll_failure()
    {
        note(format_args!("bootstrap failed: {e}"));
        job.bootstrap_error = Some(e);
    }
    drop(signals);

    // Normal objects, and huge-page ones when the heap was put there.
    let mut shm_removed = 0;
    for dir in [SHM_DIR, switchyard_shm::HUGE_DIR] {
        match remove_shm_objects(Path::new(dir), job_id) {
            Ok(0) => {}
            Ok(n) => {
                note(format_args!(
                    "removed {n} leftover shared-memory object(s) of job {job_id:016x} \
                     ({dir}/{}*)",
                    shm_object_prefix(job_id)
                ));
                shm_removed += n;
            }
            Err(e) => note(format_args!(
                "cannot remove the shared-memory objects {dir}/{}*: {e}",
                shm_object_prefix(job_id)
            )),
        }
    }
    result?;
    Ok(JobOutcome {
        job_id,
        end,
        ranks: job.pes.iter().map(|pe| pe.exit).collect(),
        shm_removed,
        bootstrap_error: job.bootstrap_error,
    })
}

/// Prints one launcher message to stderr.
fn note(msg: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{ME}: {msg}");
}

/// A duration in seconds, as `2 s` or `0.5 s`.
struct Secs(Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} s", self.0.as_secs_f64())
    }
}

/// The bootstrap rendezvous the launcher hosts: a [`RootServer`] on its own
/// thread.
struct Rendezvous {
    addr: SocketAddr,
    /// The server thread, until its result has been taken.
    server: Option<JoinHandle<Result<(), BootstrapError>>>,
}

impl Rendezvous {
    fn start(job_id: u64, size: u32, timeout: Duration) -> Result<Rendezvous, LaunchError> {
        let want = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let server =
            RootServer::bind(want, job_id, size, timeout).map_err(LaunchError::Rendezvous)?;
        Rendezvous::serve(server)
    }

    /// The rendezvous on the sim's management bridge: bound by a thread inside
    /// the fabric namespace `netns` (the socket stays there; the serving
    /// thread need not be).
    fn start_in_sim(
        netns: &str,
        job_id: u64,
        size: u32,
        timeout: Duration,
    ) -> Result<Rendezvous, LaunchError> {
        let want = SocketAddr::from((crate::sim::MGMT_ADDR, 0));
        let server =
            crate::sim::in_netns(netns, move || RootServer::bind(want, job_id, size, timeout))
                .map_err(LaunchError::Sim)?
                .map_err(LaunchError::Rendezvous)?;
        Rendezvous::serve(server)
    }

    fn serve(server: RootServer) -> Result<Rendezvous, LaunchError> {
        let addr = server.local_addr();
        let server = server.spawn().map_err(LaunchError::Rendezvous)?;
        Ok(Rendezvous {
            addr,
            server: Some(server),
        })
    }

    /// Waits up to `bound` for the server thread to end.
    fn wait(&self, bound: Duration) {
        let until = Instant::now() + bound;
        while self.server.as_ref().is_some_and(|s| !s.is_finished()) && Instant::now() < until {
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// The server's failure, once, when it has ended with one (with its
    /// causes). A server still running (it serves as long as the job does)
    /// reports nothing.
    fn poll_failure(&mut self) -> Option<String> {
        if !self.server.as_ref()?.is_finished() {
            return None;
        }
        match self.server.take()?.join() {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(error_chain(&e)),
            Err(_) => Some("the rendezvous thread panicked".into()),
        }
    }
}

/// `error: cause: cause`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

/// One started PE.
struct Pe {
    rank: u32,
    child: Child,
    exit: Option<RankExit>,
    /// Output forwarding threads (none when output is not tagged).
    readers: Vec<JoinHandle<()>>,
}

impl Pe {
    fn output_done(&self) -> bool {
        self.readers.iter().all(JoinHandle::is_finished)
    }

    /// Sends `sig` to the PE's process group; false if nobody got it.
    fn signal(&self, sig: i32) -> bool {
        sys::kill_group(self.child.id(), sig).unwrap_or(false)
    }
}

struct Job<'a> {
    opts: &'a LaunchOptions,
    job_id: u64,
    pes: Vec<Pe>,
    bootstrap_error: Option<String>,
}

impl Job<'_> {
    fn spawn(
        &mut self,
        rank: u32,
        cpu: Option<usize>,
        root: SocketAddr,
        stdin: bool,
    ) -> Result<(), LaunchError> {
        let opts = self.opts;
        let mut cmd = Command::new(&opts.program);
        let (local_rank, local_size) = match &opts.sim {
            Some(sim) => {
                let ppn = sim.pes_per_node.max(1);
                let first = rank / ppn * ppn;
                (rank - first, (opts.n - first).min(ppn))
            }
            None => (rank, opts.n),
        };
        // Opened before the fork; the child enters it between fork and exec.
        let mut netns = None;
        if let Some(sim) = &opts.sim {
            let ppn = sim.pes_per_node.max(1);
            let node =
                sim.nodes
                    .get((rank / ppn) as usize)
                    .ok_or_else(|| LaunchError::Invalid {
                        option: "n",
                        reason: format!("rank {rank} has no node in sim '{}'", sim.name),
                    })?;
            let path = crate::sim::netns_path(&node.netns);
            let file = File::open(&path).map_err(|source| {
                LaunchError::Sim(SimError::EnterNamespace {
                    path: path.clone(),
                    source,
                })
            })?;
            let addrs: Vec<String> = node.addrs.iter().map(|a| a.to_string()).collect();
            cmd.env(vars::SIM, &sim.name)
                .env(vars::NODE_ID, node.index.to_string())
                .env(vars::SWITCH_ID, node.leaf.to_string())
                .env(vars::TREE_ID, node.tree.to_string())
                .env(vars::TCP_ADDRS, addrs.join(","));
            netns = Some(file);
        }
        cmd.args(&opts.args)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .env(vars::RANK, rank.to_string())
            .env(vars::SIZE, opts.n.to_string())
            .env(vars::LOCAL_RANK, local_rank.to_string())
            .env(vars::LOCAL_SIZE, local_size.to_string())
            .env(vars::JOB_ID, format!("{:016x}", self.job_id))
            .env(vars::ROOT, root.to_string())
            .env(vars::ROOT_HOST, "launcher")
            .env(vars::LAUNCHER_PID, std::process::id().to_string())
            .stdin(if stdin {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .process_group(0);
        match cpu {
            Some(cpu) => cmd.env(vars::BOUND_CPU, cpu.to_string()),
            None => cmd.env_remove(vars::BOUND_CPU),
        };
        if opts.tag_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        sys::configure_child(&mut cmd, cpu, netns.as_ref());
        let spawned = cmd.spawn();
        // The child has entered the namespace (or failed); ours can close.
        drop(netns);
        let mut child = spawned.map_err(|source| LaunchError::Spawn {
            program: opts.program.to_string_lossy().into_owned(),
            rank,
            source,
        })?;
        let pipes = (child.stdout.take(), child.stderr.take());
        self.pes.push(Pe {
            rank,
            child,
            exit: None,
            readers: Vec::new(),
        });
        let pe = self.pes.last_mut().expect("just pushed");
        let prefix = format!("[{rank}] ").into_bytes();
        if let Some(out) = pipes.0 {
            pe.readers
                .push(forward(out, prefix.clone(), Sink::Stdout, rank)?);
        }
        if let Some(err) = pipes.1 {
            pe.readers.push(forward(err, prefix, Sink::Stderr, rank)?);
        }
        Ok(())
    }

    fn live(&self) -> impl Iterator<Item = &Pe> {
        self.pes.iter().filter(|pe| pe.exit.is_none())
    }

    /// Sends `sig` to every rank still running; returns how many there were.
    fn signal_live(&self, sig: i32) -> usize {
        let mut live = 0;
        for pe in self.live() {
            pe.signal(sig);
            live += 1;
        }
        live
    }

    /// Reaps what has exited; returns the first failure among them. A rank
    /// that called `shmem_global_exit` ([`global_exit_path`]) counts as the
    /// failure whatever its status (0 included), ahead of the ranks that
    /// failed because it left.
    fn reap(&mut self) -> Result<Option<(usize, RankExit)>, LaunchError> {
        let mut failed = None;
        let mut global = None;
        for (i, pe) in self.pes.iter_mut().enumerate() {
            if pe.exit.is_some() {
                continue;
            }
            match pe.child.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    let exit = RankExit::from_status(status);
                    pe.exit = Some(exit);
                    if !exit.success() && failed.is_none() {
                        failed = Some((i, exit));
                    }
                    if global.is_none()
                        && read_global_exit(self.job_id).is_some_and(|(r, _)| r == pe.rank)
                    {
                        global = Some((i, exit));
                    }
                }
                Err(source) => {
                    return Err(LaunchError::Wait {
                        rank: pe.rank,
                        source,
                    });
                }
            }
        }
        Ok(global.or(failed))
    }

    /// Watches the running job until every rank has exited (or would not die).
    fn supervise(
        &mut self,
        root: &mut Rendezvous,
        signals: &mut sys::SignalWatch,
    ) -> Result<JobEnd, LaunchError> {
        let grace = self.opts.grace;
        let start = Instant::now();
        let deadline = self.opts.timeout.and_then(|t| start.checked_add(t));
        let mut end = None;
        let mut sigkill_at: Option<Instant> = None;
        let mut give_up_at: Option<Instant> = None;
        loop {
            if let Some((i, exit)) = self.reap()?
                && end.is_none()
            {
                // Let the rank's last words out before naming it.
                let until = Instant::now() + LAST_WORDS;
                while !self.pes[i].output_done() && Instant::now() < until {
                    thread::sleep(Duration::from_millis(1));
                }
                let rank = self.pes[i].rank;
                let others = self.signal_live(libc::SIGTERM);
                let what = match read_global_exit(self.job_id) {
                    Some((r, status)) if r == rank => {
                        format!("rank {rank} called shmem_global_exit({status})")
                    }
                    _ => format!("rank {rank} {exit}"),
                };
                if others > 0 {
                    note(format_args!("{what}; stopping the other {others} rank(s)"));
                } else {
                    note(format_args!("{what}"));
                }
                end = Some(JobEnd::RankFailed { rank, exit });
                sigkill_at = Instant::now().checked_add(grace);
            }
            let live = self.live().count();
            if live == 0 {
                break;
            }
            let now = Instant::now();
            if let Some(sig) = signals.poll() {
                let name = signal_name(sig).unwrap_or("a signal");
                if end.is_none() {
                    note(format_args!("got {name}; forwarding it to {live} rank(s)"));
                    self.signal_live(sig);
                    end = Some(JobEnd::Signaled(sig));
                    sigkill_at = now.checked_add(grace);
                } else if give_up_at.is_none() {
                    note(format_args!("got {name} again; killing {live} rank(s)"));
                    self.signal_live(libc::SIGKILL);
                    give_up_at = Some(now + KILL_WAIT);
                }
            }
            if end.is_none()
                && let Some(deadline) = deadline
                && now >= deadline
            {
                let after = now - start;
                note(format_args!(
                    "timed out after {}; stopping {live} rank(s)",
                    Secs(self.opts.timeout.unwrap_or(after))
                ));
                self.signal_live(libc::SIGTERM);
                end = Some(JobEnd::TimedOut(after));
                sigkill_at = now.checked_add(grace);
            }
            if let Some(e) = root.poll_failure() {
                note(format_args!("bootstrap failed: {e}"));
                self.bootstrap_error = Some(e);
            }
            if give_up_at.is_none() && sigkill_at.is_some_and(|t| now >= t) {
                note(format_args!(
                    "{live} rank(s) still running {} after SIGTERM; sending SIGKILL",
                    Secs(grace)
                ));
                self.signal_live(libc::SIGKILL);
                give_up_at = Some(now + KILL_WAIT);
            }
            if give_up_at.is_some_and(|t| now >= t) {
                let stuck: Vec<String> = self.live().map(|pe| pe.rank.to_string()).collect();
                note(format_args!(
                    "rank(s) {} did not exit {} after SIGKILL; giving up on them",
                    stuck.join(", "),
                    Secs(KILL_WAIT)
                ));
                break;
            }
            thread::sleep(POLL_INTERVAL);
        }
        Ok(end.unwrap_or(JobEnd::Success))
    }

    /// After a failed start: kills whatever was started and waits for it, bounded.
    fn kill_all(&mut self) {
        self.signal_live(libc::SIGKILL);
        let until = Instant::now() + KILL_WAIT;
        while self.live().count() > 0 && Instant::now() < until {
            if self.reap().is_err() {
                break;
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits, bounded, for the output threads to reach the end of their pipes.
    /// A pipe still open after every rank has exited is held by something a
    /// rank left behind in its process group: that gets SIGKILL after the grace
    /// time, and a pipe held even then is abandoned.
    fn drain_output(&mut self) {
        let wait = |pes: &[Pe], for_: Duration| {
            let until = Instant::now() + for_;
            while !pes.iter().all(Pe::output_done) && Instant::now() < until {
                thread::sleep(Duration::from_millis(1));
            }
        };
        wait(&self.pes, self.opts.grace.max(LAST_WORDS));
        if self.pes.iter().all(Pe::output_done) {
            for pe in &mut self.pes {
                for reader in pe.readers.drain(..) {
                    let _ = reader.join();
                }
            }
            return;
        }
        for pe in self.pes.iter().filter(|pe| !pe.output_done()) {
            pe.signal(libc::SIGKILL);
        }
        wait(&self.pes, Duration::from_secs(1));
        let held: Vec<String> = self
            .pes
            .iter()
            .filter(|pe| !pe.output_done())
            .map(|pe| pe.rank.to_string())
            .collect();
        if !held.is_empty() {
            note(format_args!(
                "the output of rank(s) {} is still held open after they exited; not waiting for it",
                held.join(", ")
            ));
        }
    }
}

/// Where forwarded lines go.
#[derive(Clone, Copy)]
enum Sink {
    Stdout,
    Stderr,
}

impl Sink {
    fn write_line(self, line: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(line)?;
                out.flush()
            }
            Sink::Stderr => io::stderr().lock().write_all(line),
        }
    }
}

/// Starts a thread that copies `pipe` to `sink` line by line, each line
/// prefixed with `prefix` and written in one locked write.
fn forward(
    pipe: impl Read + Send + 'static,
    prefix: Vec<u8>,
    sink: Sink,
    rank: u32,
) -> Result<JoinHandle<()>, LaunchError> {
    let name = match sink {
        Sink::Stdout => format!("rank{rank}-stdout"),
        Sink::Stderr => format!("rank{rank}-stderr"),
    };
    thread::Builder::new()
        .name(name)
        .spawn(move || {
            let mut reader = BufReader::with_capacity(MAX_LINE, pipe);
            let mut line = Vec::with_capacity(prefix.len() + 256);
            // After a failed write (a closed stdout) keep reading, so the PE
            // never blocks on a full pipe, but stop writing.
            let mut writing = true;
            loop {
                line.clear();
                line.extend_from_slice(&prefix);
                match (&mut reader)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut line)
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                if writing {
                    writing = sink.write_line(&line).is_ok();
                }
            }
        })
        .map_err(|source| LaunchError::OutputThread { rank, source })
}

/// Usage of `switchyard run`.
pub const USAGE: &str = "\
Usage: switchyard run -n N [OPTIONS] [--] PROGRAM [ARGS...]

Starts N PEs (ranks 0..N-1) of PROGRAM on this machine, each with
SWITCHYARD_RANK, SWITCHYARD_SIZE, SWITCHYARD_JOB_ID, SWITCHYARD_ROOT, ... set,
and waits for them. The first rank that fails stops the job.

Options:
  -n, --np N              number of PEs (1..=4096)
  --bind-to core|none     pin rank r to the (r mod k)-th of the k CPUs the
                          launcher may use, or pin nothing (default: core when
                          N <= k, else none); the PE sees SWITCHYARD_BOUND_CPU
  --timeout S             stop the job after S seconds (exit status 124)
  --grace S               seconds between SIGTERM and SIGKILL when stopping
                          the job (default 2)
  --bootstrap-timeout S   seconds the rendezvous waits for every rank
                          (default 60)
  -x VAR=VAL              set VAR in every PE (repeatable)
  -x VAR                  pass the launcher's own VAR
  --tag-output            prefix each output line with '[rank] ' (default)
  --no-tag-output         pass output through untouched
  --sim FILE|NAME         run in a simulated cluster (`switchyard sim`, needs
                          root): PE p in the network namespace of node
                          p / K. NAME: a sim that is up. FILE: a topology; the
                          sim of --name (default sy) is used when up, else one
                          is built from FILE and torn down when the job ends
  --name NAME             the sim to use or build with --sim FILE
  --pes-per-node K        PEs per node under --sim (default: the sim's)
  --rails R               rails of a sim built from FILE (default: the file's, else 1)
  -h, --help              this text

Exit status: 0 when every rank exits 0; else the first failing rank's status,
or 128+signal if a signal killed it; 124 on --timeout; 130/143 when the
launcher got SIGINT/SIGTERM (forwarded to every PE); 127 program not found;
126 program not executable; 2 bad usage; 1 the launcher failed.
";

/// What the command line asked for.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Help,
    Run(Box<LaunchOptions>, Option<SimArgs>),
}

/// `--sim` and its companions.
#[derive(Debug, PartialEq, Eq, Default)]
struct SimArgs {
    /// A topology file or a running sim's name.
    target: String,
    name: Option<String>,
    pes_per_node: Option<u32>,
    rails: Option<u32>,
}

/// Parses the arguments of `switchyard run` (after `run`).
fn parse_args(args: &[String]) -> Result<Parsed, String> {
    let mut n = None;
    let mut bind = Bind::Auto;
    let mut timeout = None;
    let mut grace = DEFAULT_GRACE;
    let mut bootstrap_timeout = DEFAULT_BOOTSTRAP_TIMEOUT;
    let mut env = Vec::new();
    let mut tag_output = true;
    let mut sim: Option<SimArgs> = None;
    let mut sim_name = None;
    let mut pes_per_node = None;
    let mut rails = None;
    let mut i = 0;
    let program_at = loop {
        let Some(arg) = args.get(i) else {
            return Err("no program given".into());
        };
        i += 1;
        if arg == "--" {
            break i;
        }
        if !arg.starts_with('-') || arg == "-" {
            break i - 1;
        }
        // `--opt=value`, `--opt value`, `-nVALUE`, `-n VALUE`.
        let (opt, inline) = if arg.starts_with("--") {
            match arg.split_once('=') {
                Some((opt, value)) => (opt, Some(value.to_string())),
                None => (arg.as_str(), None),
            }
        } else if arg == "-np" {
            (arg.as_str(), None)
        } else if let Some(value) = arg.strip_prefix("-n").or_else(|| arg.strip_prefix("-x"))
            && !value.is_empty()
        {
            (&arg[..2], Some(value.to_string()))
        } else {
            (arg.as_str(), None)
        };
        let mut value = |what: &str| match inline.clone() {
            Some(v) => Ok(v),
            None => {
                let v = args
                    .get(i)
                    .cloned()
                    .ok_or_else(|| format!("{opt} needs {what}"))?;
                i += 1;
                Ok::<_, String>(v)
            }
        };
        match opt {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-n" | "--np" | "-np" => {
                let v = value("a number of PEs")?;
                n = Some(v.parse::<u32>().map_err(|_| {
                    format!("{opt} '{v}': expected a number of PEs (1..={MAX_PES})")
                })?);
            }
            "--bind-to" => {
                bind = match value("core or none")?.as_str() {
                    "core" => Bind::Core,
                    "none" => Bind::None,
                    other => return Err(format!("--bind-to '{other}': expected core or none")),
                }
            }
            "--timeout" => {
                let v = value("a number of seconds")?;
                let t = parse_secs(&v).map_err(|e| format!("--timeout '{v}': {e}"))?;
                if t.is_zero() {
                    return Err(format!("--timeout '{v}': must be more than 0"));
                }
                timeout = Some(t);
            }
            "--grace" => {
                let v = value("a number of seconds")?;
                grace = parse_secs(&v).map_err(|e| format!("--grace '{v}': {e}"))?;
            }
            "--bootstrap-timeout" => {
                let v = value("a number of seconds")?;
                bootstrap_timeout =
                    parse_secs(&v).map_err(|e| format!("--bootstrap-timeout '{v}': {e}"))?;
                if bootstrap_timeout.is_zero() {
                    return Err(format!("--bootstrap-timeout '{v}': must be more than 0"));
                }
            }
            "-x" => env.push(parse_export(&value("VAR=VAL or VAR")?)?),
            "--tag-output" if inline.is_none() => tag_output = true,
            "--no-tag-output" if inline.is_none() => tag_output = false,
            "--sim" => {
                sim = Some(SimArgs {
                    target: value("a topology file or a sim name")?,
                    ..SimArgs::default()
                })
            }
            "--name" => sim_name = Some(value("a sim name")?),
            "--pes-per-node" => {
                let v = value("a number of PEs per node")?;
                pes_per_node = Some(v.parse::<u32>().ok().filter(|&k| k > 0).ok_or_else(|| {
                    format!("--pes-per-node '{v}': expected a number of PEs, 1 or more")
                })?);
            }
            "--rails" => {
                let v = value("a number of rails")?;
                rails =
                    Some(v.parse::<u32>().map_err(|_| {
                        format!("--rails '{v}': expected a number of rails, 1 to 4")
                    })?);
            }
            _ => return Err(format!("unknown option '{arg}'")),
        }
    };
    let Some(program) = args.get(program_at) else {
        return Err("no program given after '--'".into());
    };
    let n = n.ok_or("missing -n N (the number of PEs)")?;
    match &mut sim {
        Some(s) => {
            s.name = sim_name;
            s.pes_per_node = pes_per_node;
            s.rails = rails;
        }
        None if sim_name.is_some() || pes_per_node.is_some() || rails.is_some() => {
            return Err("--name, --pes-per-node and --rails need --sim".into());
        }
        None => {}
    }
    let mut opts = LaunchOptions::new(n, program);
    opts.bind = bind;
    opts.timeout = timeout;
    opts.grace = grace;
    opts.bootstrap_timeout = bootstrap_timeout;
    opts.env = env;
    opts.tag_output = tag_output;
    opts.args = args[program_at + 1..].iter().map(OsString::from).collect();
    opts.validate().map_err(|e| match e {
        LaunchError::Invalid { option: "n", .. } => {
            format!("-n {n}: expected a number of PEs (1..={MAX_PES})")
        }
        LaunchError::Invalid {
            option: "env",
            reason,
        } => format!("-x: {reason}"),
        other => other.to_string(),
    })?;
    Ok(Parsed::Run(Box::new(opts), sim))
}

/// Seconds, whole or fractional, not negative.
fn parse_secs(v: &str) -> Result<Duration, &'static str> {
    let secs: f64 = v.parse().map_err(|_| "expected a number of seconds")?;
    if !secs.is_finite() || secs < 0.0 {
        return Err("expected a number of seconds, not negative");
    }
    Duration::try_from_secs_f64(secs).map_err(|_| "too large")
}

/// `VAR=VAL`, or `VAR` for the launcher's own value.
fn parse_export(v: &str) -> Result<(String, String), String> {
    let (name, value) = match v.split_once('=') {
        Some((name, value)) => (name, value.to_string()),
        None => {
            let value = std::env::var(v).map_err(|e| match e {
                std::env::VarError::NotPresent if is_identifier(v) => {
                    format!("-x {v}: {v} is not set in the launcher's environment")
                }
                std::env::VarError::NotPresent => {
                    format!("-x '{v}': expected VAR=VAL or VAR")
                }
                std::env::VarError::NotUnicode(_) => {
                    format!("-x {v}: the launcher's value of {v} is not UTF-8")
                }
            })?;
            (v, value)
        }
    };
    if !is_identifier(name) {
        return Err(format!(
            "-x '{v}': expected VAR=VAL or VAR, VAR a name ([A-Za-z_][A-Za-z0-9_]*)"
        ));
    }
    Ok((name.to_string(), value))
}

/// `switchyard run ARGS` (the arguments after `run`): parses them, runs the job
/// with [`launch`], and returns the exit status (see the module doc). Usage
/// errors print a message and [`USAGE`] to stderr and return [`EXIT_USAGE`].
pub fn main(args: &[String]) -> ExitCode {
    let opts = match parse_args(args) {
        Ok(Parsed::Help) => {
            let _ = io::stdout().lock().write_all(USAGE.as_bytes());
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Run(opts, sim)) => (opts, sim),
        Err(message) => {
            let _ = write!(io::stderr().lock(), "{ME}: error: {message}\n\n{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let (opts, sim) = opts;
    let mut opts = *opts;
    let Some(sim) = sim else {
        return match launch(&opts) {
            Ok(outcome) => ExitCode::from(outcome.exit_code()),
            Err(e) => {
                note(format_args!("{}", error_chain(&e)));
                ExitCode::from(e.exit_code())
            }
        };
    };
    // Catch SIGINT/SIGTERM from here on, so a signal while the sim comes up
    // still tears it down.
    let mut signals = match sys::SignalWatch::install() {
        Ok(s) => s,
        Err(e) => {
            let e = LaunchError::Sigaction(e);
            note(format_args!("{}", error_chain(&e)));
            return ExitCode::from(e.exit_code());
        }
    };
    let (state, guard) = match open_or_build_sim(&sim) {
        Ok(x) => x,
        Err(e) => {
            note(format_args!("{}", error_chain(&e)));
            return ExitCode::from(e.exit_code());
        }
    };
    let name = state.name.clone();
    if let Some(sig) = signals.poll() {
        note(format_args!(
            "got {} while bringing up sim {name}; not starting the job",
            signal_name(sig).unwrap_or("a signal")
        ));
        tear_down(guard);
        return ExitCode::from(RankExit::Signal(sig).exit_code());
    }
    opts.sim = Some(state);
    let code = match launch(&opts) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            note(format_args!("{}", error_chain(&e)));
            e.exit_code()
        }
    };
    tear_down(guard);
    drop(signals);
    ExitCode::from(code)
}

/// Tears down a sim the launcher built, saying so.
fn tear_down(guard: Option<SimGuard>) {
    if let Some(guard) = guard {
        let name = guard.name().to_string();
        match guard.down() {
            Ok(_) => note(format_args!("tore down sim {name}")),
            Err(e) => note(format_args!(
                "cannot tear down sim {name}: {}",
                error_chain(&e)
            )),
        }
    }
}

/// The sim `--sim` names, with `--pes-per-node` applied: a running one, or
/// one built from a topology file (then with a guard that tears it down).
fn open_or_build_sim(args: &SimArgs) -> Result<(SimState, Option<SimGuard>), LaunchError> {
    let path = Path::new(&args.target);
    let (mut state, guard) = if path.is_file() {
        let name = args.name.as_deref().unwrap_or(crate::sim::DEFAULT_NAME);
        crate::sim::check_name(name).map_err(LaunchError::Sim)?;
        // Parse the file even when the sim is up: a bad file is an error.
        let mut spec = SimSpec::from_file(name, path).map_err(LaunchError::Sim)?;
        if Sim::is_up(name) {
            if args.rails.is_some() {
                note(format_args!(
                    "sim {name} is up; using it as it is (--rails ignored)"
                ));
            }
            (
                Sim::open(name).map_err(LaunchError::Sim)?.state().clone(),
                None,
            )
        } else {
            if let Some(k) = args.pes_per_node {
                spec.pes_per_node = k;
            }
            if let Some(r) = args.rails {
                spec.rails = r;
            }
            let guard = SimGuard::up(&spec).map_err(LaunchError::Sim)?;
            note(format_args!(
                "brought up sim {name} ({} nodes); it goes when the job ends",
                guard.state().nodes.len()
            ));
            (guard.state().clone(), Some(guard))
        }
    } else {
        if args.name.as_ref().is_some_and(|n| *n != args.target) {
            return Err(LaunchError::Invalid {
                option: "sim",
                reason: format!(
                    "'{}' is not a file, so it names a sim, but --name says '{}'",
                    args.target,
                    args.name.as_deref().unwrap_or_default()
                ),
            });
        }
        if crate::sim::check_name(&args.target).is_err() {
            return Err(LaunchError::Invalid {
                option: "sim",
                reason: format!(
                    "'{}' is neither a topology file nor a sim name",
                    args.target
                ),
            });
        }
        let sim = Sim::open(&args.target).map_err(LaunchError::Sim)?;
        (sim.state().clone(), None)
    };
    if let Some(k) = args.pes_per_node {
        state.pes_per_node = k;
    }
    Ok((state, guard))
}

#[cfg(test)]
mod test {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn parse(a: &[&str]) -> Result<LaunchOptions, String> {
        match parse_args(&args(a))? {
            Parsed::Run(opts, _) => Ok(*opts),
            Parsed::Help => Err("help".into()),
        }
    }

    #[test]
    fn parses_a_full_command_line() {
        let opts = parse(&[
            "-n",
            "4",
            "--bind-to",
            "none",
            "--timeout",
            "2.5",
            "--grace=0.1",
            "--bootstrap-timeout",
            "7",
            "-x",
            "A=B",
            "-xC=",
            "--no-tag-output",
            "--",
            "prog",
            "-n",
            "x",
        ])
        .unwrap();
        assert_eq!(opts.n, 4);
        assert_eq!(opts.bind, Bind::None);
        assert_eq!(opts.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(opts.grace, Duration::from_millis(100));
        assert_eq!(opts.bootstrap_timeout, Duration::from_secs(7));
        assert_eq!(
            opts.env,
            vec![("A".into(), "B".into()), ("C".into(), String::new())]
        );
        assert!(!opts.tag_output);
        assert_eq!(opts.program, "prog");
        assert_eq!(opts.args, vec![OsString::from("-n"), OsString::from("x")]);
    }

    #[test]
    fn program_starts_at_the_first_operand() {
        assert_eq!(parse(&["-np", "3", "true"]).unwrap().n, 3);
        assert_eq!(parse(&["--np=3", "true"]).unwrap().n, 3);
        let opts = parse(&["-n2", "--bind-to=core", "echo", "--help"]).unwrap();
        assert_eq!(opts.n, 2);
        assert_eq!(opts.bind, Bind::Core);
        assert!(opts.tag_output);
        assert_eq!(opts.program, "echo");
        assert_eq!(opts.args, vec![OsString::from("--help")]);
        assert_eq!(opts.grace, DEFAULT_GRACE);
        assert_eq!(opts.timeout, None);
        assert_eq!(parse_args(&args(&["--help"])), Ok(Parsed::Help));
    }

    #[test]
    fn rejects_bad_usage() {
        for bad in [
            &[][..],
            &["-n", "2"],
            &["-n", "2", "--"],
            &["echo"],
            &["-n", "0", "echo"],
            &["-n", "4097", "echo"],
            &["-n", "x", "echo"],
            &["-n"],
            &["-n", "2", "--bind-to", "socket", "echo"],
            &["-n", "2", "--timeout", "0", "echo"],
            &["-n", "2", "--timeout", "-1", "echo"],
            &["-n", "2", "--timeout", "nan", "echo"],
            &["-n", "2", "--grace", "x", "echo"],
            &["-n", "2", "-x", "=B", "echo"],
            &["-n", "2", "-x", "1A=B", "echo"],
            &["-n", "2", "-x", "A-B=C", "echo"],
            &["-n", "2", "-x", "", "echo"],
            &["-n", "2", "-x", "SWITCHYARD_RANK=3", "echo"],
            &["-n", "2", "-x", "SWITCHYARD_TEST_SURELY_UNSET_VAR", "echo"],
            &["-n", "2", "--frobnicate", "echo"],
            &["-n", "2", "--no-tag-output=yes", "echo"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn x_alone_passes_the_launchers_value() {
        // PATH is set wherever tests run.
        let opts = parse(&["-n", "1", "-x", "PATH", "true"]).unwrap();
        assert_eq!(opts.env[0].0, "PATH");
        assert_eq!(opts.env[0].1, std::env::var("PATH").unwrap());
    }

    #[test]
    fn global_exit_marker_round_trip() {
        let job = 0x5ead_0000_0000_0000 | u64::from(std::process::id());
        let path = global_exit_path(job);
        assert!(path.starts_with(SHM_DIR));
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&shm_object_prefix(job)),
            "removed with the job's objects"
        );
        assert_eq!(read_global_exit(job), None);
        std::fs::write(&path, "3 7\n").unwrap();
        assert_eq!(read_global_exit(job), Some((3, 7)));
        std::fs::write(&path, "garbage").unwrap();
        assert_eq!(read_global_exit(job), None);
        assert_eq!(remove_shm_objects(Path::new(SHM_DIR), job).unwrap(), 1);
    }

    #[test]
    fn exit_codes_and_messages() {
        assert_eq!(RankExit::Code(3).to_string(), "exited with status 3");
        assert_eq!(
            RankExit::Signal(9).to_string(),
            "was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(RankExit::Code(3).exit_code(), 3);
        assert_eq!(RankExit::Signal(9).exit_code(), 137);
        assert!(RankExit::Code(0).success());
        assert_eq!(JobEnd::Success.exit_code(), 0);
        assert_eq!(JobEnd::TimedOut(Duration::from_secs(1)).exit_code(), 124);
        assert_eq!(JobEnd::Signaled(libc::SIGINT).exit_code(), 130);
        assert_eq!(JobEnd::Signaled(libc::SIGTERM).exit_code(), 143);
        let failed = JobEnd::RankFailed {
            rank: 2,
            exit: RankExit::Code(3),
        };
        assert_eq!(failed.exit_code(), 3);
        assert_eq!(failed.to_string(), "rank 2 exited with status 3");
        let not_found = LaunchError::Spawn {
            program: "x".into(),
            rank: 0,
            source: io::ErrorKind::NotFound.into(),
        };
        assert_eq!(not_found.exit_code(), EXIT_NOT_FOUND);
    }

    #[test]
    fn shm_prefix_and_cleanup() {
        assert_eq!(shm_object_prefix(0xab), "switchyard-00000000000000ab-");
        let dir =
            std::env::temp_dir().join(format!("switchyard-launch-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let job = 0x1234_5678_9abc_def0;
        for name in [
            format!("{}0", shm_object_prefix(job)),
            format!("{}17", shm_object_prefix(job)),
            format!("{}0", shm_object_prefix(job + 1)),
            "other".into(),
        ] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        assert_eq!(remove_shm_objects(&dir, job).unwrap(), 2);
        assert_eq!(remove_shm_objects(&dir, job).unwrap(), 0);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        assert_eq!(remove_shm_objects(&dir.join("missing"), job).unwrap(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn launches_through_the_library() {
        let mut opts = LaunchOptions::new(2, "sh");
        opts.args = vec!["-c".into(), "exit $SWITCHYARD_RANK".into()];
        opts.tag_output = false;
        opts.timeout = Some(Duration::from_secs(30));
        opts.job_id = Some(0x5eed);
        let outcome = launch(&opts).unwrap();
        assert_eq!(outcome.job_id, 0x5eed);
        assert_eq!(
            outcome.end,
            JobEnd::RankFailed {
                rank: 1,
                exit: RankExit::Code(1)
            }
        );
        assert_eq!(outcome.ranks.len(), 2);
        assert_eq!(outcome.exit_code(), 1);

        opts.program = "/nonexistent/switchyard-test-program".into();
        let err = launch(&opts).unwrap_err();
        assert_eq!(err.exit_code(), EXIT_NOT_FOUND);
        assert!(err.to_string().contains("rank 0"), "{err}");
    }
}
