//! Starting a job: [`launch`], the rendezvous it hosts, and spawning each PE
//! (environment, CPU pinning, network namespace, output pipes).

use std::{
    fmt,
    fs::File,
    io::{self, IsTerminal, Read, Write},
    net::{Ipv4Addr, SocketAddr},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use switchyard_bootstrap::{BootstrapError, JobSecret, RootServer, RootStats};
use switchyard_shm::trace_object::{
    DUMP_EXT, JOB_DIR_ENV, TraceObject, dumps_in, ensure_dir, job_dir, trace_objects,
};

use crate::{
    Bind, JobEnd, JobOutcome, LaunchError, LaunchOptions, ME, POLL_INTERVAL, ROOT_LINGER, RankExit,
    SHM_DIR,
    output::{Sink, forward},
    read_global_exit, remove_shm_objects, shm_object_prefix,
    sim::SimError,
    sys, vars,
};

/// The longest `bootstrap_timeout` a PE's configuration takes (24 h), in ms.
const BOOTSTRAP_TIMEOUT_MAX_MS: u128 = 24 * 3600 * 1000;

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
    // The job's secret: made here, given only to the PEs (in their
    // environment), never printed.
    let secret = JobSecret::generate().map_err(LaunchError::Rendezvous)?;
    let mut signals = sys::SignalWatch::install().map_err(LaunchError::Sigaction)?;
    let mut root = match &opts.sim {
        None => Rendezvous::start(job_id, opts.n, opts.bootstrap_timeout, &secret)?,
        Some(sim) => Rendezvous::start_in_sim(
            &sim.fabric_netns,
            job_id,
            opts.n,
            opts.bootstrap_timeout,
            &secret,
        )?,
    };

    // Where the PEs and the launcher leave route-trace dumps: the PEs'
    // SWITCHYARD_JOB_DIR when the options set one, else the launcher's
    // (given to every PE, so they agree).
    let job_dir = opts
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == JOB_DIR_ENV)
        .map_or_else(|| job_dir(job_id), |(_, v)| PathBuf::from(v));
    let mut job = Job {
        opts,
        job_id,
        job_dir,
        secret,
        pes: Vec::with_capacity(opts.n as usize),
        bootstrap_error: None,
        pe_cpus: cpus.as_deref().map(|c| pe_cpus(c, opts.n)),
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
        && let Some(f) = root.poll_failure()
    {
        job.report_bootstrap(f, end != JobEnd::Success);
    }
    drop(signals);
    // Connections the rendezvous turned away, by why: said once, since
    // nobody else sees them.
    if let Some(refused) = root.stats.summary() {
        note(format_args!("bootstrap: {refused}"));
    }

    // A job that ended badly keeps its route traces: each PE's rings (the
    // dead ones' too) are copied to the job directory before the objects go,
    // beside the dumps the PEs wrote themselves.
    if end != JobEnd::Success || result.is_err() {
        keep_traces(job_id, &job.job_dir);
    }
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

/// Copies the trace objects of `job_id` into its job directory `dir` as
/// `trace-pe<N>-at-exit.sytrace` and says where the dumps are.
fn keep_traces(job_id: u64, dir: &Path) {
    let objects = trace_objects(Some(job_id));
    if !objects.is_empty() {
        match ensure_dir(dir) {
            Ok(()) => {
                for (_, pe, path) in objects {
                    let to = dir.join(format!("trace-pe{pe}-at-exit.{DUMP_EXT}"));
                    let copied = TraceObject::open(&path)
                        .and_then(|o| o.dump(&to, o.meta().capacity as usize));
                    if let Err(e) = copied {
                        note(format_args!("cannot keep the route trace of PE {pe}: {e}"));
                    }
                }
            }
            Err(e) => note(format_args!("cannot keep the route traces: {e}")),
        }
    }
    let dumps = dumps_in(dir);
    if !dumps.is_empty() {
        note(format_args!(
            "route traces of job {job_id:016x}: {} ({} file(s); `switchyard trace {}` decodes them)",
            dir.display(),
            dumps.len(),
            dir.display()
        ));
    }
}

/// Prints one launcher message to stderr.
pub(crate) fn note(msg: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{ME}: {msg}");
}

/// A duration in seconds, as `2 s` or `0.5 s`.
pub(crate) struct Secs(pub(crate) Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} s", self.0.as_secs_f64())
    }
}

/// The bootstrap rendezvous the launcher hosts: a [`RootServer`] on its own
/// thread.
pub(crate) struct Rendezvous {
    addr: SocketAddr,
    /// The server thread, until its result has been taken.
    server: Option<JoinHandle<Result<(), BootstrapError>>>,
    /// What the server refused.
    stats: RootStats,
}

impl Rendezvous {
    fn start(
        job_id: u64,
        size: u32,
        timeout: Duration,
        secret: &JobSecret,
    ) -> Result<Rendezvous, LaunchError> {
        let want = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let server = RootServer::bind(want, job_id, size, timeout, secret)
            .map_err(LaunchError::Rendezvous)?;
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
        secret: &JobSecret,
    ) -> Result<Rendezvous, LaunchError> {
        let want = SocketAddr::from((crate::sim::MGMT_ADDR, 0));
        let secret = secret.clone();
        let server = crate::sim::in_netns(netns, move || {
            RootServer::bind(want, job_id, size, timeout, &secret)
        })
        .map_err(LaunchError::Sim)?
        .map_err(LaunchError::Rendezvous)?;
        Rendezvous::serve(server)
    }

    fn serve(server: RootServer) -> Result<Rendezvous, LaunchError> {
        let addr = server.local_addr();
        let stats = server.stats();
        let server = server.spawn().map_err(LaunchError::Rendezvous)?;
        Ok(Rendezvous {
            addr,
            server: Some(server),
            stats,
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
    pub(crate) fn poll_failure(&mut self) -> Option<BootFailure> {
        if !self.server.as_ref()?.is_finished() {
            return None;
        }
        match self.server.take()?.join() {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(BootFailure {
                text: error_chain(&e),
                left: match e {
                    BootstrapError::Disconnected { rank, .. } => Some(rank),
                    _ => None,
                },
            }),
            Err(_) => Some(BootFailure {
                text: "the rendezvous thread panicked".into(),
                left: None,
            }),
        }
    }
}

/// How the rendezvous failed.
pub(crate) struct BootFailure {
    /// The error with its causes, one line.
    pub(crate) text: String,
    /// The rank whose connection closed without its goodbye, when that is the
    /// failure: a consequence, not a cause, when that rank itself failed or the
    /// job was already ending.
    pub(crate) left: Option<u32>,
}

impl Job<'_> {
    /// Whether `f` is explained by what the launcher has already reported:
    /// the job is ending (a rank failed or called `shmem_global_exit`, a
    /// signal, the timeout), or the rank that left failed by itself. Such a
    /// failure is kept in the outcome but not printed: the first failure is
    /// reported once.
    pub(crate) fn explains(&self, f: &BootFailure, ending: bool) -> bool {
        f.left.is_some_and(|rank| {
            ending
                || self.pes.iter().any(|pe| {
                    pe.rank == rank
                        && pe.exit.is_some_and(|x| {
                            !x.success()
                                || read_global_exit(self.job_id).is_some_and(|(r, _)| r == rank)
                        })
                })
        })
    }

    /// Prints `f` unless [`Job::explains`] it, and keeps it for the outcome.
    pub(crate) fn report_bootstrap(&mut self, f: BootFailure, ending: bool) {
        if !self.explains(&f, ending) {
            note(format_args!("bootstrap failed: {}", f.text));
        }
        self.bootstrap_error = Some(f.text);
    }
}

/// An error with its causes, as one line: `error: cause: cause`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
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
pub(crate) struct Pe {
    pub(crate) rank: u32,
    pub(crate) child: Child,
    pub(crate) exit: Option<RankExit>,
    /// Output forwarding threads (none when output is not tagged).
    pub(crate) readers: Vec<JoinHandle<()>>,
}

impl Pe {
    pub(crate) fn output_done(&self) -> bool {
        self.readers.iter().all(JoinHandle::is_finished)
    }

    /// Sends `sig` to the PE's process group; false if nobody got it.
    pub(crate) fn signal(&self, sig: i32) -> bool {
        sys::kill_group(self.child.id(), sig).unwrap_or(false)
    }
}

/// The CPUs `n` PEs pinned round-robin over `cpus` get, sorted and
/// comma-separated: `0,1,2`.
fn pe_cpus(cpus: &[usize], n: u32) -> String {
    let mut used: Vec<usize> = cpus.iter().copied().take(n as usize).collect();
    used.sort_unstable();
    used.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) struct Job<'a> {
    pub(crate) opts: &'a LaunchOptions,
    pub(crate) job_id: u64,
    /// The job directory, given to every PE in `SWITCHYARD_JOB_DIR`.
    pub(crate) job_dir: PathBuf,
    /// Given to every PE in `SWITCHYARD_JOB_SECRET`.
    pub(crate) secret: JobSecret,
    pub(crate) pes: Vec<Pe>,
    pub(crate) bootstrap_error: Option<String>,
    /// The CPUs the pinned PEs get (comma-separated), given to every PE in
    /// `SWITCHYARD_PE_CPUS`; `None` when the PEs are not pinned.
    pub(crate) pe_cpus: Option<String>,
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
        // A PE retrying the rendezvous longer than the root waits for it
        // gains nothing, and one that starts after the root gave up would
        // retry for its own default (30 s): unless the user set it, a PE
        // waits as long as the root does.
        if std::env::var_os(vars::BOOTSTRAP_TIMEOUT).is_none()
            && !opts.env.iter().any(|(k, _)| k == vars::BOOTSTRAP_TIMEOUT)
        {
            let ms = opts
                .bootstrap_timeout
                .as_millis()
                .min(BOOTSTRAP_TIMEOUT_MAX_MS);
            cmd.env(vars::BOOTSTRAP_TIMEOUT, format!("{ms}ms"));
        }
        cmd.args(&opts.args)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .env(vars::RANK, rank.to_string())
            .env(vars::SIZE, opts.n.to_string())
            .env(vars::LOCAL_RANK, local_rank.to_string())
            .env(vars::LOCAL_SIZE, local_size.to_string())
            .env(vars::JOB_ID, format!("{:016x}", self.job_id))
            .env(JOB_DIR_ENV, &self.job_dir)
            .env(vars::JOB_SECRET, self.secret.to_env_value())
            .env(vars::ROOT, root.to_string())
            .env(vars::ROOT_HOST, "launcher")
            .env(vars::LAUNCHER_PID, std::process::id().to_string())
            .stdin(if stdin {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .process_group(0);
        match (cpu, &self.pe_cpus) {
            (Some(cpu), Some(all)) => cmd
                .env(vars::BOUND_CPU, cpu.to_string())
                .env(vars::PE_CPUS, all),
            _ => cmd.env_remove(vars::BOUND_CPU).env_remove(vars::PE_CPUS),
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
}
