//! How a job ended ([`JobOutcome`], [`JobEnd`], [`RankExit`]) and why one could
//! not start ([`LaunchError`]), with the launcher's exit status for each.

use std::{fmt, io, os::unix::process::ExitStatusExt, process::ExitStatus, time::Duration};

use switchyard_bootstrap::BootstrapError;

use crate::{
    EXIT_FAILURE, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_TIMEOUT, EXIT_USAGE, job::Secs,
    sim::SimError,
};

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
    /// The options are invalid ([`LaunchOptions::validate`](crate::LaunchOptions::validate)).
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
    /// Reading the launcher's CPU affinity failed (needed for [`Bind::Core`](crate::Bind::Core)).
    #[error("cannot read the launcher's CPU affinity (sched_getaffinity)")]
    Affinity(#[source] io::Error),
    /// Installing the SIGINT/SIGTERM handlers failed.
    #[error("cannot install the SIGINT/SIGTERM handlers (sigaction)")]
    Sigaction(#[source] io::Error),
    /// The bootstrap rendezvous ([`RootServer`](switchyard_bootstrap::RootServer)) could not be started.
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
    /// SIGINT or SIGTERM came while the sim of the job was brought up
    /// ([`launch_in_sim`](crate::launch_in_sim)); the job was not started.
    #[error(
        "got {} while bringing up sim {sim}; not starting the job",
        signal_name(*.signal).unwrap_or("a signal")
    )]
    Interrupted {
        /// The signal.
        signal: i32,
        /// The sim's name.
        sim: String,
    },
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
    /// does; [`EXIT_USAGE`] for invalid options; 128 + the signal for
    /// [`LaunchError::Interrupted`]; else [`EXIT_FAILURE`].
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::Invalid { .. } => EXIT_USAGE,
            LaunchError::Sim(e) if e.is_usage() => EXIT_USAGE,
            LaunchError::Interrupted { signal, .. } => RankExit::Signal(*signal).exit_code(),
            LaunchError::Spawn { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                io::ErrorKind::PermissionDenied => EXIT_NOT_EXECUTABLE,
                _ => EXIT_FAILURE,
            },
            _ => EXIT_FAILURE,
        }
    }
}
