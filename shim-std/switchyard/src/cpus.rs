//! Which CPUs a PE's application and its progress thread run on.
//!
//! The application's CPUs are this PE's affinity mask when it starts (the
//! launcher pins a PE before it runs), the CPUs the launcher gave the node's
//! PEs ([`ENV_PE_CPUS`]) and the PE's own ([`ENV_BOUND_CPU`]). The CPUs the
//! process may run on at all ([`allowed`]) are its cgroup's cpuset, else the
//! online CPUs: a thread may be pinned to any of them, also outside the
//! process's mask. [`plan`] turns `progress_cpu` into the progress thread's
//! CPU on a [`Machine`] (read from this one with [`Machine::here`], or made
//! up by a test).

use std::fmt;

use crate::config::{ConfigError, ProgressCpu, Source};

/// The CPUs the launcher gave the PEs of this node, as a CPU list
/// (`0-3,8`), set by `switchyard run` when it pins the PEs.
pub const ENV_PE_CPUS: &str = "SWITCHYARD_PE_CPUS";
/// The CPU the launcher pinned this PE to.
pub const ENV_BOUND_CPU: &str = "SWITCHYARD_BOUND_CPU";
/// The PE's rank among those of its node.
const ENV_LOCAL_RANK: &str = "SWITCHYARD_LOCAL_RANK";

/// Most CPUs a list may name (a bound on what a bad variable can make us
/// allocate).
const MAX_LIST: usize = 1 << 16;

/// Reads a CPU list as the kernel writes them: `0-3,8,10-11` (spaces and a
/// trailing newline ignored). Sorted, without duplicates; `None` when it is
/// not one.
pub fn parse_list(s: &str) -> Option<Vec<u32>> {
    let s = s.trim();
    let mut out = Vec::new();
    if s.is_empty() {
        return Some(out);
    }
    for part in s.split(',') {
        let part = part.trim();
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let c = part.parse::<u32>().ok()?;
                (c, c)
            }
        };
        if a > b || (b - a) as usize >= MAX_LIST || out.len() + (b - a) as usize >= MAX_LIST {
            return None;
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Writes a sorted CPU list in the kernel's form: `0-3,8`; `none` when empty.
pub fn format_list(cpus: &[u32]) -> String {
    let mut s = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !s.is_empty() {
            s.push(',');
        }
        s.push_str(&if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    if s.is_empty() { "none".into() } else { s }
}

/// The CPUs this process may pin a thread to: its cgroup's cpuset (v2, then
/// v1), else the online CPUs, else the calling thread's mask.
pub fn allowed() -> Vec<u32> {
    let read = |p: String| std::fs::read_to_string(p).ok().and_then(|t| parse_list(&t));
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for line in cgroups.lines() {
        let mut f = line.splitn(3, ':');
        let (_, ctl, path) = (f.next(), f.next(), f.next().unwrap_or(""));
        let file = match ctl {
            Some("") => format!("/sys/fs/cgroup{path}/cpuset.cpus.effective"),
            Some("cpuset") => format!("/sys/fs/cgroup/cpuset{path}/cpuset.effective_cpus"),
            _ => continue,
        };
        if let Some(l) = read(file).filter(|l| !l.is_empty()) {
            return l;
        }
    }
    read("/sys/devices/system/cpu/online".into())
        .filter(|l| !l.is_empty())
        .or_else(|| crate::sys::affinity(0).ok())
        .unwrap_or_default()
}

/// What a plan is made from: the CPUs allowed, the application's, the PE's
/// own and its local rank.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Machine {
    /// The CPUs the process may run on ([`allowed`]).
    pub allowed: Vec<u32>,
    /// The application's CPUs (sorted): the PE's mask, the node's PEs'.
    pub application: Vec<u32>,
    /// The CPU the launcher pinned this PE to.
    pub bound: Option<u32>,
    /// The PE's rank among those of its node (spreads the progress threads
    /// of a node's PEs over the CPUs left).
    pub local_rank: u32,
}

impl Machine {
    /// This machine, as the calling thread (the PE's application, before
    /// its progress thread starts) sees it, with the launcher's variables
    /// from `env`.
    pub fn here(env: impl Fn(&str) -> Option<String>) -> Machine {
        let num = |v: &str| env(v).and_then(|s| s.trim().parse::<u32>().ok());
        let bound = num(ENV_BOUND_CPU);
        let mut application = crate::sys::affinity(0).unwrap_or_default();
        application.extend(
            env(ENV_PE_CPUS)
                .and_then(|s| parse_list(&s))
                .unwrap_or_default(),
        );
        application.extend(bound);
        application.sort_unstable();
        application.dedup();
        Machine {
            allowed: allowed(),
            application,
            bound,
            local_rank: num(ENV_LOCAL_RANK).unwrap_or(0),
        }
    }

    /// The allowed CPUs outside the application's.
    pub fn spare(&self) -> Vec<u32> {
        self.allowed
            .iter()
            .copied()
            .filter(|c| self.application.binary_search(c).is_err())
            .collect()
    }
}

/// Where the progress thread goes, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The CPU it is pinned to; `None`: not pinned (the PE's mask).
    pub cpu: Option<u32>,
    /// Why, for `switchyard info` and the warnings: `auto: CPU 5, outside
    /// the application's 0-3`.
    pub why: String,
    /// Whether `auto` found no CPU to spare (worth a warning when the
    /// thread busy-polls).
    pub fell_back: bool,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cpu {
            Some(c) => write!(f, "CPU {c} ({})", self.why),
            None => write!(f, "not pinned ({})", self.why),
        }
    }
}

/// The progress thread's CPU on `m` as `want` says (given `from`).
///
/// # Errors
///
/// [`ConfigError::ProgressCpu`] when `want` names a CPU outside
/// `m.allowed`.
pub fn plan(want: ProgressCpu, from: &Source, m: &Machine) -> Result<Plan, ConfigError> {
    let app = format_list(&m.application);
    let plan = |cpu, why: String| Plan {
        cpu,
        why,
        fell_back: false,
    };
    Ok(match want {
        ProgressCpu::None => plan(None, "progress_cpu = none".into()),
        ProgressCpu::Pe => match m.bound {
            Some(c) => plan(Some(c), "progress_cpu = pe: the PE's own CPU".into()),
            None => plan(None, "progress_cpu = pe, and the PE is not pinned".into()),
        },
        ProgressCpu::Cpu(c) if m.allowed.binary_search(&c).is_ok() => {
            plan(Some(c), format!("progress_cpu = {c}"))
        }
        ProgressCpu::Cpu(cpu) => {
            return Err(ConfigError::ProgressCpu {
                cpu,
                from: from.clone(),
                allowed: format_list(&m.allowed),
            });
        }
        ProgressCpu::Auto => {
            let spare = m.spare();
            match spare.get(m.local_rank as usize % spare.len().max(1)) {
                Some(&c) => plan(
                    Some(c),
                    format!("auto: outside the application's CPUs {app}"),
                ),
                None => Plan {
                    cpu: None,
                    why: format!(
                        "auto: no CPU outside the application's {app} on this machine (allowed: {})",
                        format_list(&m.allowed)
                    ),
                    fell_back: true,
                },
            }
        }
    })
}

/// One PE of a node's plan ([`node_plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PePlan {
    /// The PE's local rank.
    pub local_rank: u32,
    /// The CPU the launcher pins it to (`None`: not pinned).
    pub pe_cpu: Option<u32>,
    /// Where its progress thread goes.
    pub progress: Plan,
}

/// Where `switchyard run -n n` (default binding) would put the PEs of this
/// node and their progress threads: rank `r` on the `r mod k`-th of the `k`
/// CPUs in `launcher` (the launcher's mask) when `n <= k`, else unpinned;
/// each progress thread as `want` says, with `allowed` the CPUs a thread may
/// be pinned to.
///
/// # Errors
///
/// As [`plan`].
pub fn node_plan(
    want: ProgressCpu,
    from: &Source,
    launcher: &[u32],
    allowed: &[u32],
    n: u32,
) -> Result<Vec<PePlan>, ConfigError> {
    let pinned = !launcher.is_empty() && n as usize <= launcher.len();
    let pe_cpu = |r: u32| pinned.then(|| launcher[r as usize % launcher.len()]);
    let mut application: Vec<u32> = if pinned {
        (0..n).filter_map(pe_cpu).collect()
    } else {
        launcher.to_vec()
    };
    application.sort_unstable();
    application.dedup();
    (0..n)
        .map(|r| {
            let m = Machine {
                allowed: allowed.to_vec(),
                application: application.clone(),
                bound: pe_cpu(r),
                local_rank: r,
            };
            Ok(PePlan {
                local_rank: r,
                pe_cpu: pe_cpu(r),
                progress: plan(want, from, &m)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod test {
    use super::*;

    fn machine(allowed: &[u32], application: &[u32], local_rank: u32) -> Machine {
        Machine {
            allowed: allowed.to_vec(),
            application: application.to_vec(),
            bound: application.first().copied(),
            local_rank,
        }
    }

    #[test]
    fn cpu_lists_read_and_write_back() {
        assert_eq!(parse_list("0-3,8\n"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_list(" 5 , 1-2,2"), Some(vec![1, 2, 5]));
        assert_eq!(parse_list(""), Some(vec![]));
        for bad in ["x", "3-1", "1,", "-1", "0-4294967295", "1-2-3"] {
            assert_eq!(parse_list(bad), None, "{bad}");
        }
        assert_eq!(format_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_list(&[4]), "4");
        assert_eq!(format_list(&[]), "none");
    }

    #[test]
    fn auto_takes_a_spare_cpu_by_local_rank_or_says_there_is_none() {
        let d = Source::Default;
        // Four CPUs, the node's two PEs on 0 and 1: ranks 0 and 1 get 2 and 3.
        let m = machine(&[0, 1, 2, 3], &[0, 1], 0);
        let p = plan(ProgressCpu::Auto, &d, &m).unwrap();
        assert_eq!(p.cpu, Some(2));
        assert!(!p.fell_back);
        assert_eq!(
            plan(ProgressCpu::Auto, &d, &machine(&[0, 1, 2, 3], &[0, 1], 1))
                .unwrap()
                .cpu,
            Some(3)
        );
        // Every CPU is the application's: unpinned, and it says why.
        let full = machine(&[0, 1], &[0, 1], 0);
        let p = plan(ProgressCpu::Auto, &d, &full).unwrap();
        assert_eq!(p.cpu, None);
        assert!(p.fell_back);
        assert_eq!(
            p.to_string(),
            "not pinned (auto: no CPU outside the application's 0-1 on this machine (allowed: 0-1))"
        );
    }

    #[test]
    fn an_explicit_cpu_must_be_allowed() {
        let from = Source::Env("SWITCHYARD_PROGRESS_CPU");
        let m = machine(&[0, 1], &[0], 0);
        assert_eq!(plan(ProgressCpu::Cpu(1), &from, &m).unwrap().cpu, Some(1));
        // The application's own CPU is the user's choice.
        assert_eq!(plan(ProgressCpu::Cpu(0), &from, &m).unwrap().cpu, Some(0));
        let e = plan(ProgressCpu::Cpu(7), &from, &m).unwrap_err();
        assert!(matches!(e, ConfigError::ProgressCpu { cpu: 7, .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "progress_cpu = 7 (env SWITCHYARD_PROGRESS_CPU): not a CPU this process may run on (those are 0-1)"
        );
        assert_eq!(plan(ProgressCpu::Pe, &from, &m).unwrap().cpu, Some(0));
        assert_eq!(plan(ProgressCpu::None, &from, &m).unwrap().cpu, None);
        let unbound = Machine { bound: None, ..m };
        assert_eq!(plan(ProgressCpu::Pe, &from, &unbound).unwrap().cpu, None);
    }

    #[test]
    fn a_node_plan_pins_the_pes_first_and_the_progress_threads_after() {
        let d = Source::Default;
        let all = [0, 1, 2, 3, 4, 5];
        let p = node_plan(ProgressCpu::Auto, &d, &all, &all, 4).unwrap();
        let got: Vec<_> = p.iter().map(|p| (p.pe_cpu, p.progress.cpu)).collect();
        assert_eq!(
            got,
            [
                (Some(0), Some(4)),
                (Some(1), Some(5)),
                (Some(2), Some(4)),
                (Some(3), Some(5))
            ]
        );
        // More PEs than CPUs: none pinned, no CPU to spare.
        let p = node_plan(ProgressCpu::Auto, &d, &[0, 1], &[0, 1], 3).unwrap();
        assert!(p.iter().all(|p| p.pe_cpu.is_none() && p.progress.fell_back));
        // `pe`: each thread on its PE's CPU.
        let p = node_plan(ProgressCpu::Pe, &d, &[0, 1], &[0, 1], 2).unwrap();
        assert_eq!(p[1].progress.cpu, Some(1));
        assert!(node_plan(ProgressCpu::Cpu(9), &d, &[0, 1], &[0, 1], 2).is_err());
    }

    #[test]
    fn this_machine_has_cpus() {
        let m = Machine::here(|_| None);
        assert!(!m.allowed.is_empty());
        assert!(!m.application.is_empty());
        assert!(m.allowed.windows(2).all(|w| w[0] < w[1]));
    }
}
