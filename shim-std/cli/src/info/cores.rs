//! `switchyard info`'s "Cores" section: where `switchyard run -n N` would
//! pin the PEs of this machine and where their progress threads would run
//! (`progress`, `progress_cpu`), from [`switchyard::cpus::node_plan`].

use std::fmt::Write as _;

use serde::Serialize;
use switchyard::{
    config::{Config, Key, Progress},
    cpus,
};

/// Ranks listed one by one; the rest are summed up.
const SHOWN: usize = 16;

/// The plan for `n` PEs of this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Cores {
    /// PEs on this machine.
    pes: u32,
    /// The `progress` mode.
    progress: &'static str,
    /// The `progress_cpu` value.
    progress_cpu: String,
    /// Each PE, by local rank (empty when `error` is set).
    plan: Vec<CoreRow>,
    /// Why there is no plan (`progress_cpu` names a CPU not allowed).
    error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct CoreRow {
    local_rank: u32,
    pe_cpu: Option<u32>,
    progress_cpu: Option<u32>,
    why: String,
}

impl Cores {
    /// The plan for `n` PEs with `config`, on this machine: the launcher's
    /// mask is this process's, the CPUs a thread may use [`cpus::allowed`].
    pub(super) fn read(config: &Config, n: u32) -> Cores {
        let launcher = switchyard::sys::affinity(0).unwrap_or_default();
        Cores::with(config, n, &launcher, &cpus::allowed())
    }

    fn with(config: &Config, n: u32, launcher: &[u32], allowed: &[u32]) -> Cores {
        let (plan, error) = match cpus::node_plan(
            config.progress_cpu,
            config.source(Key::ProgressCpu),
            launcher,
            allowed,
            n,
        ) {
            Ok(p) => (
                p.into_iter()
                    .map(|p| CoreRow {
                        local_rank: p.local_rank,
                        pe_cpu: p.pe_cpu,
                        progress_cpu: p.progress.cpu,
                        why: p.progress.why,
                    })
                    .collect(),
                None,
            ),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        Cores {
            pes: n,
            progress: config.progress.name(),
            progress_cpu: config.value(Key::ProgressCpu),
            plan,
            error,
        }
    }

    /// The section's text.
    pub(super) fn text(&self) -> String {
        let mut s = format!(
            "\nCores (switchyard run -n {} on this machine):\n",
            self.pes
        );
        let thread = match self.progress {
            "caller" => "no progress thread (progress = caller)".to_string(),
            p => format!(
                "each PE's progress thread (with TCP or verbs peers): progress = {p}, progress_cpu = {}",
                self.progress_cpu
            ),
        };
        let _ = writeln!(s, "  {thread}");
        if let Some(e) = &self.error {
            let _ = writeln!(s, "  error: {e}");
            return s;
        }
        let cpu = |c: Option<u32>| c.map_or_else(|| "not pinned".into(), |c| format!("CPU {c}"));
        for r in self.plan.iter().take(SHOWN) {
            let _ = write!(s, "  rank {:<4} PE {}", r.local_rank, cpu(r.pe_cpu));
            if self.progress != Progress::Caller.name() {
                let _ = write!(s, ", progress thread {} ({})", cpu(r.progress_cpu), r.why);
            }
            s.push('\n');
        }
        if self.plan.len() > SHOWN {
            let _ = writeln!(s, "  ... {} more", self.plan.len() - SHOWN);
        }
        s
    }
}

#[cfg(test)]
mod test {
    use switchyard::config::Source;

    use super::*;

    #[test]
    fn the_plan_names_each_pe_s_cpu_and_its_progress_thread_s() {
        let mut cfg = Config::default();
        let c = Cores::with(&cfg, 2, &[0, 1, 2, 3], &[0, 1, 2, 3]);
        let text = c.text();
        assert!(
            text.contains("Cores (switchyard run -n 2 on this machine):"),
            "{text}"
        );
        assert!(
            text.contains("rank 0    PE CPU 0, progress thread CPU 2 (auto: outside the application's CPUs 0-1)"),
            "{text}"
        );
        assert!(
            text.contains("rank 1    PE CPU 1, progress thread CPU 3"),
            "{text}"
        );
        // No CPU to spare: said, and unpinned.
        let text = Cores::with(&cfg, 2, &[0, 1], &[0, 1]).text();
        assert!(
            text.contains("progress thread not pinned (auto: no CPU outside"),
            "{text}"
        );
        // A CPU not allowed is the configuration error init would give.
        cfg.set(Key::ProgressCpu, "9", Source::Default).unwrap();
        let c = Cores::with(&cfg, 2, &[0, 1], &[0, 1]);
        assert!(c.plan.is_empty());
        assert!(
            c.text()
                .contains("error: progress_cpu = 9 (default): not a CPU"),
            "{}",
            c.text()
        );
        // Caller mode has no thread.
        let mut caller = Config::default();
        caller
            .set(Key::Progress, "caller", Source::Default)
            .unwrap();
        let text = Cores::with(&caller, 1, &[0, 1], &[0, 1]).text();
        assert!(
            text.contains("no progress thread (progress = caller)"),
            "{text}"
        );
        assert!(text.contains("rank 0    PE CPU 0\n"), "{text}");
        // Many PEs: the first ones, then a count.
        let text = Cores::with(&Config::default(), 20, &[0, 1], &[0, 1]).text();
        assert!(text.contains("... 4 more"), "{text}");
    }
}
