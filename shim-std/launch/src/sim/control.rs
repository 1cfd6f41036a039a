//! A running sim: bringing it up, opening it, cutting and restoring its
//! links, and tearing it down ([`down`], [`SimGuard`]).

use std::{fs, io};

use super::{
    SimError, SimSpec, SimState, check_name,
    fabric::{build, check_environment},
    ip::{ip, sim_namespaces},
    netns_path,
    spec::plan,
    state_path,
};

/// A running sim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sim {
    state: SimState,
}

/// What [`down`] removed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DownReport {
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
    /// Whether a state file was removed.
    pub state_file: bool,
}

impl DownReport {
    /// Nothing was there.
    pub fn nothing(&self) -> bool {
        self.namespaces.is_empty() && !self.state_file
    }
}

impl Sim {
    /// Builds the sim `spec` describes and writes its state file.
    ///
    /// # Errors
    ///
    /// Bad input ([`SimSpec::plan`]), [`SimError::NotRoot`],
    /// [`SimError::NoIp`], [`SimError::Exists`] when a sim of that name (or
    /// namespaces of one) is there, or a failed command; then whatever was
    /// created is removed again before the error is returned.
    pub fn up(spec: &SimSpec) -> Result<Sim, SimError> {
        let state = plan(spec)?;
        check_environment()?;
        let path = state_path(&state.name);
        if path.exists() {
            return Err(SimError::Exists {
                name: state.name.clone(),
                what: format!("state file {}", path.display()),
            });
        }
        let leftovers = sim_namespaces(&state.name)?;
        if !leftovers.is_empty() {
            return Err(SimError::Exists {
                name: state.name.clone(),
                what: format!("namespaces {}", leftovers.join(", ")),
            });
        }
        match build(&state) {
            Ok(()) => Ok(Sim { state }),
            Err(e) => {
                if let Err(cleanup) = down_inner(&state.name, Some(&state)) {
                    eprintln!(
                        "switchyard sim: cleaning up after a failed `up` also failed: {cleanup}"
                    );
                }
                Err(e)
            }
        }
    }

    /// The sim `name` that is up, from its state file.
    ///
    /// # Errors
    ///
    /// [`SimError::BadName`], [`SimError::NotUp`], or a state file that
    /// cannot be read or parsed.
    pub fn open(name: &str) -> Result<Sim, SimError> {
        check_name(name)?;
        let path = state_path(name);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SimError::NotUp(name.into()));
            }
            Err(source) => {
                return Err(SimError::StateFile {
                    what: "read",
                    path,
                    source,
                });
            }
        };
        let state: SimState = serde_json::from_str(&text)
            .map_err(|source| SimError::BadStateFile { path, source })?;
        Ok(Sim { state })
    }

    /// Whether a sim `name` is up (its state file exists).
    pub fn is_up(name: &str) -> bool {
        check_name(name).is_ok() && state_path(name).exists()
    }

    /// The sim's layout.
    pub fn state(&self) -> &SimState {
        &self.state
    }

    /// The sim's name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// The namespace of node `i`, if the sim has that node.
    pub fn node_netns(&self, i: u32) -> Option<&str> {
        self.state.nodes.get(i as usize).map(|n| n.netns.as_str())
    }

    /// Cuts (`up == false`) or restores the cable of `node`'s `rail`, or of
    /// every rail when `rail` is `None` (see the module doc).
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownNode`], [`SimError::UnknownRail`], or a failed
    /// command.
    pub fn link(&self, node: &str, rail: Option<u32>, up: bool) -> Result<(), SimError> {
        let n = self.state.find_node(node)?;
        let rails: Vec<u32> = match rail {
            Some(r) if r >= self.state.rails => {
                return Err(SimError::UnknownRail {
                    sim: self.state.name.clone(),
                    rail: r,
                    rails: self.state.rails,
                });
            }
            Some(r) => vec![r],
            None => (0..self.state.rails).collect(),
        };
        for r in rails {
            let port = format!("n{}r{r}", n.index);
            ip(&[
                "-n",
                &self.state.fabric_netns,
                "link",
                "set",
                &port,
                if up { "up" } else { "down" },
            ])?;
        }
        Ok(())
    }

    /// Tears the sim down ([`down`]).
    ///
    /// # Errors
    ///
    /// As [`down`].
    pub fn down(self) -> Result<DownReport, SimError> {
        down_inner(&self.state.name, Some(&self.state))
    }
}

/// Tears down sim `name`: deletes every namespace named in its state file and
/// every `NAME-fab`, `NAME-rt`, `NAME-n<i>` that `ip netns list` shows (so
/// it also cleans up after a crash), then the state file. Idempotent: when
/// nothing was there it returns an empty report.
///
/// # Errors
///
/// [`SimError::BadName`], [`SimError::NotRoot`], [`SimError::NoIp`],
/// [`SimError::Teardown`] naming the namespaces that could not be deleted, or
/// a state file that cannot be removed.
pub fn down(name: &str) -> Result<DownReport, SimError> {
    check_name(name)?;
    let state = Sim::open(name).ok().map(|s| s.state);
    down_inner(name, state.as_ref())
}

fn down_inner(name: &str, state: Option<&SimState>) -> Result<DownReport, SimError> {
    check_environment()?;
    let listed = sim_namespaces(name)?;
    let mut wanted: Vec<String> = listed.clone();
    if let Some(state) = state {
        for ns in state.namespaces() {
            if !wanted.contains(&ns) && netns_path(&ns).exists() {
                wanted.push(ns);
            }
        }
    }
    let mut report = DownReport::default();
    let mut failures = Vec::new();
    for ns in wanted {
        match ip(&["netns", "del", &ns]) {
            Ok(_) => report.namespaces.push(ns),
            Err(e) => {
                if netns_path(&ns).exists() {
                    failures.push(format!("{ns}: {e}"));
                }
            }
        }
    }
    let path = state_path(name);
    match fs::remove_file(&path) {
        Ok(()) => report.state_file = true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(SimError::StateFile {
                what: "remove",
                path,
                source,
            });
        }
    }
    if !failures.is_empty() {
        return Err(SimError::Teardown {
            name: name.into(),
            failures,
        });
    }
    Ok(report)
}

/// A sim torn down when dropped: for tests and tools.
#[derive(Debug)]
pub struct SimGuard {
    sim: Option<Sim>,
}

impl SimGuard {
    /// Brings up `spec` ([`Sim::up`]) under a guard.
    ///
    /// # Errors
    ///
    /// As [`Sim::up`].
    pub fn up(spec: &SimSpec) -> Result<SimGuard, SimError> {
        Ok(SimGuard {
            sim: Some(Sim::up(spec)?),
        })
    }

    /// Guards a sim that is already up.
    pub fn new(sim: Sim) -> SimGuard {
        SimGuard { sim: Some(sim) }
    }

    /// The sim.
    pub fn sim(&self) -> &Sim {
        // Only `down` and `drop` take it, and both consume the guard.
        self.sim.as_ref().unwrap_or_else(|| unreachable!())
    }

    /// Tears the sim down now, reporting errors (dropping does it silently).
    ///
    /// # Errors
    ///
    /// As [`down`].
    pub fn down(mut self) -> Result<DownReport, SimError> {
        match self.sim.take() {
            Some(sim) => sim.down(),
            None => Ok(DownReport::default()),
        }
    }
}

impl std::ops::Deref for SimGuard {
    type Target = Sim;
    fn deref(&self) -> &Sim {
        self.sim()
    }
}

impl Drop for SimGuard {
    fn drop(&mut self) {
        if let Some(sim) = self.sim.take() {
            let name = sim.state.name.clone();
            if let Err(e) = sim.down() {
                eprintln!("switchyard sim: cannot tear down sim '{name}': {e}");
            }
        }
    }
}
