//! The typed values of the enumerated keys (`progress`, `huge_pages`,
//! `progress_cpu`, `payload_crc`, `trace`, `verbs_atomics`, `transports`), each with the
//! parser that reads its text form and the name that writes it back.

use std::fmt;

use super::parse::{in_range, parse_count};

/// How the progress engine waits for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Progress {
    /// Spin on a (pinned) core; lowest latency, one core burnt per PE.
    Busy,
    /// Spin `spin_before_park` times, then park until woken.
    #[default]
    Adaptive,
    /// No progress thread: the application drives progress in its calls.
    Caller,
    /// One progress thread pinned to its own CPU (`progress_cpu`), polling
    /// every driver without pause and never sleeping; the application's
    /// waits spin. For machines with a core to spare per process.
    Dedicated,
}

impl Progress {
    /// The value's name: `busy`, `adaptive`, `caller`, `dedicated`.
    pub const fn name(self) -> &'static str {
        match self {
            Progress::Busy => "busy",
            Progress::Adaptive => "adaptive",
            Progress::Caller => "caller",
            Progress::Dedicated => "dedicated",
        }
    }

    pub(super) fn parse(s: &str) -> Option<Progress> {
        match s.to_ascii_lowercase().as_str() {
            "busy" => Some(Progress::Busy),
            "adaptive" => Some(Progress::Adaptive),
            "caller" => Some(Progress::Caller),
            "dedicated" => Some(Progress::Dedicated),
            _ => None,
        }
    }
}

/// Whether the symmetric heap is backed by huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HugePages {
    /// Use them when the system has enough free, else normal pages.
    #[default]
    Auto,
    /// Ask for them: when they cannot be had, the heap falls back to normal
    /// pages and the context reports a warning.
    On,
    /// Never use them.
    Off,
}

impl HugePages {
    /// The value's name: `auto`, `on`, `off`.
    pub const fn name(self) -> &'static str {
        match self {
            HugePages::Auto => "auto",
            HugePages::On => "on",
            HugePages::Off => "off",
        }
    }

    pub(super) fn parse(s: &str) -> Option<HugePages> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(HugePages::Auto),
            "on" | "true" => Some(HugePages::On),
            "off" | "false" => Some(HugePages::Off),
            _ => None,
        }
    }
}

/// Where the progress thread runs (`progress_cpu`).
///
/// Its [`Display`](fmt::Display) form is what the key reads back: `auto`,
/// `7`, `pe`, `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProgressCpu {
    /// A CPU outside the application's: outside this PE's affinity mask and
    /// the CPUs the launcher gave the node's PEs (`SWITCHYARD_PE_CPUS`),
    /// chosen by local rank among those left; unpinned, with a note, when
    /// the machine has none to spare.
    #[default]
    Auto,
    /// This CPU (`N`). It must be one this process may run on: a CPU outside
    /// that set is an error at init ([`ConfigError::ProgressCpu`](super::ConfigError::ProgressCpu)).
    Cpu(u32),
    /// The PE's own CPU (`pe`: the launcher's `SWITCHYARD_BOUND_CPU`;
    /// unpinned when the PE is not pinned). The progress thread then shares
    /// the application's core.
    Pe,
    /// Not pinned: the thread inherits the PE's affinity mask.
    None,
}

impl fmt::Display for ProgressCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProgressCpu::Cpu(c) => write!(f, "{c}"),
            other => f.write_str(other.name()),
        }
    }
}

impl ProgressCpu {
    /// Largest CPU number accepted.
    pub const MAX_CPU: u32 = 65535;

    /// The value's name: `auto`, `cpu`, `pe`, `none` (see `Display` for the
    /// number).
    pub const fn name(self) -> &'static str {
        match self {
            ProgressCpu::Auto => "auto",
            ProgressCpu::Cpu(_) => "cpu",
            ProgressCpu::Pe => "pe",
            ProgressCpu::None => "none",
        }
    }

    pub(super) fn parse(s: &str) -> Option<ProgressCpu> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(ProgressCpu::Auto),
            "pe" => Some(ProgressCpu::Pe),
            "none" => Some(ProgressCpu::None),
            n => parse_cpu(n).map(ProgressCpu::Cpu),
        }
    }

    /// A value of the deprecated `bind_to` key in `progress_cpu`'s terms:
    /// `core` is `pe`, `cpu:N` is `N`, `none` is `none`.
    pub(super) fn from_bind_to(s: &str) -> Option<ProgressCpu> {
        let l = s.trim().to_ascii_lowercase();
        match l.as_str() {
            "core" => Some(ProgressCpu::Pe),
            "none" => Some(ProgressCpu::None),
            _ => parse_cpu(l.strip_prefix("cpu:")?).map(ProgressCpu::Cpu),
        }
    }
}

/// A CPU number: 1 to 5 digits, at most [`ProgressCpu::MAX_CPU`].
fn parse_cpu(n: &str) -> Option<u32> {
    if n.is_empty() || n.len() > 5 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok().filter(|&c| c <= ProgressCpu::MAX_CPU)
}

/// Which bulk payloads (64 KiB and more) carry a payload CRC. Frame headers
/// are always checked.
///
/// Its [`Display`](fmt::Display) form is what [`PayloadCrc::parse`] reads:
/// `always`, `sample:16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PayloadCrc {
    /// Every bulk frame.
    #[default]
    Always,
    /// Every `every`-th bulk frame (1 to [`PayloadCrc::MAX_EVERY`]).
    Sample {
        /// The sampling period, in frames.
        every: u32,
    },
}

impl PayloadCrc {
    /// Largest sampling period.
    pub const MAX_EVERY: u32 = 1_000_000;

    /// The sampling period in frames: 1 for [`PayloadCrc::Always`].
    pub const fn every(self) -> u32 {
        match self {
            PayloadCrc::Always => 1,
            PayloadCrc::Sample { every } => every,
        }
    }

    /// Reads `always` or `sample:N` (case-insensitive, spaces around the parts
    /// ignored), N from 1 to [`PayloadCrc::MAX_EVERY`].
    pub fn parse(s: &str) -> Option<PayloadCrc> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("always") {
            return Some(PayloadCrc::Always);
        }
        parse_sample(s, PayloadCrc::MAX_EVERY).map(|every| PayloadCrc::Sample { every })
    }
}

/// Reads `sample:N` (case-insensitive, spaces around the parts ignored), N
/// from 1 to `max`.
fn parse_sample(s: &str, max: u32) -> Option<u32> {
    let (name, n) = s.split_once(':')?;
    if !name.trim().eq_ignore_ascii_case("sample") {
        return None;
    }
    parse_count(n)
        .and_then(|v| in_range(v, 1, u64::from(max)))
        .and_then(|v| u32::try_from(v).ok())
}

/// Which routing decisions the route trace ring of a context records
/// (`trace`).
///
/// A record is eleven plain stores (Release or Relaxed) into the context's own ring, no
/// fence, and one read of the trace clock ([`sys::ticks`](crate::sys::ticks):
/// the TSC on x86-64, whose units [`sys::ticks_to_nanos`](crate::sys::ticks_to_nanos)
/// converts). The context ids of the routes ([`ContextId`](switchyard_core::route::ContextId))
/// are assigned whatever the mode; only what reaches the ring changes.
///
/// Its [`Display`](fmt::Display) form is what [`TraceMode::parse`] reads:
/// `off`, `sample:64`, `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceMode {
    /// Nothing is recorded, not even failures; no clock is read.
    Off,
    /// One ordinary decision in `every` is recorded (the clock is read for
    /// that one only), and every flagged one (failed, downgraded, load
    /// yield, ordering wait, CPU atomic: [`TraceRecord`](switchyard_core::trace::TraceRecord)'s
    /// flags) and every failed selection. A routine downgrade (NEAR over
    /// TCP's first rail on a PE without RDMA: every NEAR operation there)
    /// is sampled as an ordinary one, its record still flagged.
    Sample {
        /// The sampling period, in decisions (1 to [`TraceMode::MAX_EVERY`]).
        every: u32,
    },
    /// Every decision is recorded, each with its own clock read.
    All,
}

impl TraceMode {
    /// Largest sampling period.
    pub const MAX_EVERY: u32 = 1_000_000;

    /// The default: `sample:64`. The route log and its context ids stay on;
    /// a record and its clock read cost about one 64th per operation (the
    /// clock alone is some 50 ns on a virtual machine that traps the TSC).
    pub const DEFAULT: TraceMode = TraceMode::Sample { every: 64 };

    /// Decisions per ordinary record: 0 when off, 1 for
    /// [`TraceMode::All`].
    pub const fn every(self) -> u32 {
        match self {
            TraceMode::Off => 0,
            TraceMode::Sample { every } => every,
            TraceMode::All => 1,
        }
    }

    /// Reads `off`, `all` or `sample:N` (case-insensitive, spaces around the
    /// parts ignored), N from 1 to [`TraceMode::MAX_EVERY`].
    pub fn parse(s: &str) -> Option<TraceMode> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            Some(TraceMode::Off)
        } else if s.eq_ignore_ascii_case("all") {
            Some(TraceMode::All)
        } else {
            parse_sample(s, TraceMode::MAX_EVERY).map(|every| TraceMode::Sample { every })
        }
    }
}

impl Default for TraceMode {
    fn default() -> Self {
        TraceMode::DEFAULT
    }
}

impl fmt::Display for TraceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceMode::Off => f.write_str("off"),
            TraceMode::Sample { every } => write!(f, "sample:{every}"),
            TraceMode::All => f.write_str("all"),
        }
    }
}

impl fmt::Display for PayloadCrc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayloadCrc::Always => f.write_str("always"),
            PayloadCrc::Sample { every } => write!(f, "sample:{every}"),
        }
    }
}

/// Whether atomics to verbs peers use the NIC's atomics (`verbs_atomics`).
///
/// An RDMA atomic is atomic with respect to the CPU's atomics only when the
/// device says so (`atomic_cap` = `IBV_ATOMIC_GLOB`); most devices report
/// `IBV_ATOMIC_HCA`: atomic only among that HCA's own atomics. switchyard runs
/// same-node atomics (shared memory), the TCP target's atomics and a PE's own
/// atomics on the CPU, so with such a device a NIC fetch-add and a CPU
/// fetch-add on one word can lose an update. (UCX's `UCX_ATOMIC_MODE`
/// `cpu|device|guess` and SOS's choice between NIC and shared-memory atomics
/// face the same question.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VerbsAtomics {
    /// NIC atomics only when the device reports global atomicity
    /// (`IBV_ATOMIC_GLOB`); otherwise every atomic to a verbs peer goes over
    /// TCP and runs on the target's CPU, coherent with shared memory and
    /// local atomics.
    #[default]
    Auto,
    /// NIC atomics whenever the device does RDMA atomics at all: for jobs
    /// whose atomics on a word never mix NIC and CPU agents.
    Nic,
    /// Atomics to verbs peers always go over TCP (the target's CPU).
    Cpu,
}

impl VerbsAtomics {
    /// The value's name: `auto`, `nic`, `cpu`.
    pub const fn name(self) -> &'static str {
        match self {
            VerbsAtomics::Auto => "auto",
            VerbsAtomics::Nic => "nic",
            VerbsAtomics::Cpu => "cpu",
        }
    }

    pub(super) fn parse(s: &str) -> Option<VerbsAtomics> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(VerbsAtomics::Auto),
            "nic" => Some(VerbsAtomics::Nic),
            "cpu" => Some(VerbsAtomics::Cpu),
            _ => None,
        }
    }
}

/// Which peers' cards a PE gets at the bootstrap (`cards`). Under PMIx
/// (the `pmix` feature) they come from PMIx's store in either mode, and the
/// root sends only localities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CardsMode {
    /// Every PE's card, to every PE (an allgather: the root sends O(N²)
    /// bytes in all).
    #[default]
    All,
    /// Every PE's locality (node, switch, tree: runs of ranks) to every
    /// PE; the cards a PE needs it fetches from the root: same-node peers'
    /// at init (shared memory), an off-node peer's at the first operation
    /// toward it, when TCP connects to it (connect-on-first-use; with a
    /// verbs driver attached, verbs pairs with that peer then too, up to
    /// 32 peers). Over TCP every PE of the job must use the same mode.
    Lazy,
}

impl CardsMode {
    /// The value's name: `all`, `lazy`.
    pub const fn name(self) -> &'static str {
        match self {
            CardsMode::All => "all",
            CardsMode::Lazy => "lazy",
        }
    }

    pub(super) fn parse(s: &str) -> Option<CardsMode> {
        match s.to_ascii_lowercase().as_str() {
            "all" => Some(CardsMode::All),
            "lazy" => Some(CardsMode::Lazy),
            _ => None,
        }
    }
}

/// Which transports PEs may use between each other (`transports`): `all`,
/// or a list such as `shm,tcp` or `tcp` (forcing TCP even between PEs of one
/// node, for tests and `switchyard perf --transport tcp`). A PE always reaches
/// its own heap directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transports {
    /// Shared memory between PEs of one node.
    pub shm: bool,
    /// TCP.
    pub tcp: bool,
    /// RDMA verbs.
    pub verbs: bool,
}

impl Transports {
    /// Every transport.
    pub const ALL: Transports = Transports {
        shm: true,
        tcp: true,
        verbs: true,
    };

    /// Parses `all` or a comma-separated list (at least one, no repeats).
    pub fn parse(s: &str) -> Option<Transports> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("all") {
            return Some(Transports::ALL);
        }
        let mut t = Transports {
            shm: false,
            tcp: false,
            verbs: false,
        };
        for item in s.split(',') {
            let slot = match item.trim().to_ascii_lowercase().as_str() {
                "shm" => &mut t.shm,
                "tcp" => &mut t.tcp,
                "verbs" => &mut t.verbs,
                _ => return None,
            };
            if *slot {
                return None;
            }
            *slot = true;
        }
        Some(t)
    }
}

impl Default for Transports {
    fn default() -> Self {
        Transports::ALL
    }
}

impl fmt::Display for Transports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Transports::ALL {
            return f.write_str("all");
        }
        let names: Vec<&str> = [(self.shm, "shm"), (self.tcp, "tcp"), (self.verbs, "verbs")]
            .into_iter()
            .filter_map(|(on, n)| on.then_some(n))
            .collect();
        f.write_str(&names.join(","))
    }
}
