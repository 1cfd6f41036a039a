//! `switchyard run --sim`: a job in a simulated cluster, brought up for it
//! from a topology file when none of that name is up, and torn down after.

use std::path::Path;

use crate::{
    JobOutcome, LaunchError, LaunchOptions,
    job::{error_chain, note},
    launch,
    sim::{self, Sim, SimGuard, SimSpec, SimState},
    sys,
};

/// Which sim a job runs in ([`launch_in_sim`]): `switchyard run --sim`
/// and its companions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SimTarget {
    /// A topology file, or the name of a sim that is up.
    pub target: String,
    /// The sim to use or build from a file (default [`sim::DEFAULT_NAME`]);
    /// with a name as `target`, it must be that name.
    pub name: Option<String>,
    /// PEs per node, in place of the sim's.
    pub pes_per_node: Option<u32>,
    /// Rails of a sim built from the file, in place of the file's.
    pub rails: Option<u32>,
}

/// Runs a job in a simulated cluster: the sim `target` names when it is up,
/// else one built from the topology file `target` names (under
/// [`SimTarget::name`]) and torn down when the job ends, however it ends.
/// SIGINT and SIGTERM are caught from the start, so a signal while the sim
/// comes up still tears it down (and the job is not started).
///
/// # Errors
///
/// As [`launch`]; [`LaunchError::Invalid`] for a `target` that is neither a
/// file nor a sim name (or names another sim than [`SimTarget::name`]),
/// [`LaunchError::Sim`] when the sim cannot be opened or built, and
/// [`LaunchError::Interrupted`] when a signal came while it was brought up.
pub fn launch_in_sim(opts: &LaunchOptions, target: &SimTarget) -> Result<JobOutcome, LaunchError> {
    opts.validate()?;
    let mut signals = sys::SignalWatch::install().map_err(LaunchError::Sigaction)?;
    let (state, guard) = open_or_build_sim(target)?;
    if let Some(signal) = signals.poll() {
        let sim = state.name.clone();
        tear_down(guard);
        return Err(LaunchError::Interrupted { signal, sim });
    }
    let mut opts = opts.clone();
    opts.sim = Some(state);
    let result = launch(&opts);
    tear_down(guard);
    drop(signals);
    result
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
fn open_or_build_sim(args: &SimTarget) -> Result<(SimState, Option<SimGuard>), LaunchError> {
    let path = Path::new(&args.target);
    let (mut state, guard) = if path.is_file() {
        let name = args.name.as_deref().unwrap_or(sim::DEFAULT_NAME);
        sim::check_name(name).map_err(LaunchError::Sim)?;
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
        if sim::check_name(&args.target).is_err() {
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
