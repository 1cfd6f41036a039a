//! `switchyard run`: starts the PEs of a job on this machine, watches them, and
//! cleans up after them.
//!
//! [`launch`] is the entry point (`switchyard run` and `switchyard perf` start
//! their PEs through it); [`launch_in_sim`] runs a job in a simulated cluster,
//! bringing one up for it when needed. This crate parses no command line: the
//! `switchyard` binary (switchyard-cli) turns `switchyard run`'s flags into a
//! [`LaunchOptions`].
//!
//! ## Modules
//!
//! | module | what |
//! |---|---|
//! | `options` | [`LaunchOptions`], [`Bind`] and their checks |
//! | `job` | [`launch`]: the rendezvous, spawning and pinning each PE |
//! | `watch` | reaping ranks, failing fast, signals, timeout, SIGTERM then SIGKILL |
//! | `output` | tagged output: `[rank] ` before each line, one write per line |
//! | `outcome` | [`JobOutcome`], [`JobEnd`], [`RankExit`], [`LaunchError`], exit statuses |
//! | `shm` | the job's shared-memory objects and its `shmem_global_exit` marker |
//! | `in_sim` | [`launch_in_sim`]: `switchyard run --sim` |
//! | [`sim`] | simulated clusters in network namespaces (`switchyard sim`) |
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
//! | `SWITCHYARD_JOB_SECRET` | the job secret: 256 bits from the OS generator, as 64 hex digits; the PEs prove it to the rendezvous and to each other, it is never on a command line nor printed |
//! | `SWITCHYARD_ROOT` | `host:port` of the bootstrap rendezvous |
//! | `SWITCHYARD_ROOT_HOST` | `launcher`: the launcher hosts the rendezvous |
//! | `SWITCHYARD_LAUNCHER_PID` | the launcher's process id |
//! | `SWITCHYARD_BOUND_CPU` | the CPU this PE is pinned to; absent when not pinned |
//! | `SWITCHYARD_PE_CPUS` | the CPUs the launcher pinned the job's PEs to, comma-separated (`0,1,2,3`): the application's cores, which `progress_cpu = auto` keeps the progress threads off; absent when not pinned |
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
//! This pins the PEs, the application (`switchyard run --bind-pes`; the old
//! name `--bind-to` is still read, with a warning). Where each PE's progress
//! thread runs is the PE's own configuration (`progress_cpu`), which
//! `SWITCHYARD_PE_CPUS` tells which CPUs the application has.
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
//! | 2 ([`EXIT_USAGE`]) | bad command line or invalid options |
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
//!
//! [`RootServer`]: switchyard_bootstrap::RootServer
//! [`SimState`]: sim::SimState

#![deny(missing_docs)]
#![deny(unsafe_code)]

use std::time::Duration;

mod in_sim;
mod job;
mod options;
mod outcome;
mod output;
mod shm;
pub mod sim;
mod sys;
mod watch;

pub use in_sim::{SimTarget, launch_in_sim};
pub use job::{error_chain, launch, new_job_id};
pub use options::{Bind, LaunchOptions, is_var_name};
pub use outcome::{JobEnd, JobOutcome, LaunchError, RankExit, signal_name};
pub use shm::{global_exit_path, read_global_exit, remove_shm_objects, shm_object_prefix};

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
/// Longest `--timeout`, `--grace` or `--bootstrap-timeout` accepted: a week
/// (longer ones are typos, and would overflow the clock arithmetic).
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
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
    /// The job secret (hex), made by the launcher for this job only; the
    /// PEs prove it to the rendezvous and to each other.
    pub const JOB_SECRET: &str = bootstrap::JOB_SECRET;
    /// `host:port` of the bootstrap rendezvous.
    pub const ROOT: &str = bootstrap::ROOT;
    /// Who hosts the rendezvous; `launcher` under `switchyard run`.
    pub const ROOT_HOST: &str = bootstrap::ROOT_HOST;
    /// Process id of the launcher.
    pub const LAUNCHER_PID: &str = "SWITCHYARD_LAUNCHER_PID";
    /// CPU the PE is pinned to; absent when it is not pinned.
    pub const BOUND_CPU: &str = "SWITCHYARD_BOUND_CPU";
    /// The CPUs the PEs of the job are pinned to, comma-separated; absent
    /// when they are not pinned.
    pub const PE_CPUS: &str = "SWITCHYARD_PE_CPUS";
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

    /// The PEs' `bootstrap_timeout`, set to the launcher's
    /// `--bootstrap-timeout` unless the launcher's environment or `-x` gives
    /// it (not in [`ALL`]: a user may set it).
    pub const BOOTSTRAP_TIMEOUT: &str = "SWITCHYARD_BOOTSTRAP_TIMEOUT";

    /// Every variable above but [`BOOTSTRAP_TIMEOUT`]: `-x` may not set them.
    pub const ALL: [&str; 16] = [
        RANK,
        SIZE,
        LOCAL_RANK,
        LOCAL_SIZE,
        JOB_ID,
        JOB_SECRET,
        ROOT,
        ROOT_HOST,
        LAUNCHER_PID,
        BOUND_CPU,
        PE_CPUS,
        SIM,
        NODE_ID,
        SWITCH_ID,
        TREE_ID,
        TCP_ADDRS,
    ];
}

#[cfg(test)]
mod test;
