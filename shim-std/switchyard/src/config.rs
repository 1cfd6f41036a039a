//! Run-time configuration: what a PE reads at start-up, and where each value came
//! from.
//!
//! # Sources and precedence
//!
//! Lowest to highest, each key separately:
//!
//! 1. the built-in default ([`Config::default`]);
//! 2. a named [`Template`] (`SWITCHYARD_TEMPLATE=trading`, or `template = "trading"`
//!    in the file; the variable wins over the file);
//! 3. a TOML file named by `SWITCHYARD_CONFIG=path` (optional; when it is named,
//!    it must exist and parse);
//! 4. the environment: `SWITCHYARD_` + the key in upper case
//!    (`SWITCHYARD_HEAP_SIZE=1G`).
//!
//! A template sets a group of keys that belong together; any key given in the file
//! or the environment overrides the template's value for that key only. Every
//! value records its [`Source`], and [`Config::entries`] lists them all (this is
//! what `switchyard info` prints). An environment variable that is set but empty
//! counts as unset (so `SWITCHYARD_HEAP_SIZE= prog` clears an exported value).
//!
//! The environment is an injectable lookup ([`Config::load_from`],
//! [`Config::load_from_vars`]); only [`Config::from_env`] reads the process
//! environment.
//!
//! # Keys
//!
//! | key | type | default | accepted |
//! |-----|------|---------|----------|
//! | `heap_size` | size | `64M` | 4K to 1T |
//! | `progress` | [`Progress`] | `adaptive` | `busy`, `adaptive`, `caller` |
//! | `spin_before_park` | count | `2000` | 0 to 1000000000 |
//! | `short_threshold` | size | `8K` | 0 to 1G |
//! | `load_watermark` | percent | `75` | 1 to 100, `%` optional |
//! | `queue_depth` | count | `256` | a power of two, 16 to 65536 |
//! | `huge_pages` | [`HugePages`] | `auto` | `auto`, `on`, `off` (`true`/`false` too) |
//! | `bootstrap_timeout` | duration | `30s` | 1ms to 24h |
//! | `op_timeout` | duration | `10s` | 1ms to 24h, longer than `heartbeat` |
//! | `heartbeat` | duration | `200ms` | 1ms to 60s (the dead-link window, below) |
//! | `trace_records` | count | `4096` | a power of two, 16 to 1048576 |
//! | `inline_threshold` | size | `256` | 0 to 4K; `off` is 0 (no inlining) |
//! | `bind_to` | [`BindTo`] | `none` | `core` (the PE's own CPU), `cpu:N`, `none` |
//! | `transports` | list | `all` | `all`, or a list of `shm`, `tcp`, `verbs` (`tcp` alone forces TCP even on one node) |
//! | `tcp_addrs` | address list | `auto` (empty) | 0 to 4 distinct IPv4/IPv6 addresses, one per TCP rail |
//! | `tcp_connections` | count | `1` | 1 to 8 |
//! | `tcp_window` | size | `4M` | 64K to 1G |
//! | `give_up` | duration | `5s` | 10ms to 24h, not shorter than `heartbeat` |
//! | `reconnect_base` | duration | `5ms` | 100us to 10s |
//! | `reconnect_cap` | duration | `500ms` | 1ms to 60s, not shorter than `reconnect_base` |
//! | `payload_crc` | [`PayloadCrc`] | `always` | `always`, `sample:N` with N from 1 to 1000000 |
//! | `verbs_atomics` | [`VerbsAtomics`] | `auto` | `auto`, `nic`, `cpu` |
//! | `verbs_routed` | on/off | `on` | `on`, `off` (`true`/`false` too) |
//!
//! Enumerated values are case-insensitive.
//!
//! What the TCP keys mean:
//!
//! * `heartbeat` is the dead-link detection window: a link with no traffic for
//!   this long is down; heartbeats go every quarter of it.
//! * `give_up`: a peer down on every link this long is dead, and its operations
//!   fail.
//! * `tcp_addrs`: the local address of each TCP rail, in rail order. Empty
//!   (`auto`, the default) lets the shim pick the address that routes to the
//!   bootstrap root.
//! * `tcp_connections`: data connections per peer per rail (a control
//!   connection is always added).
//! * `tcp_window`: per-peer send window, which is both the replay buffer and
//!   the flow-control credit.
//! * `reconnect_base`, `reconnect_cap`: the first and the longest wait of the
//!   exponential backoff between reconnect attempts.
//! * `payload_crc`: bulk payloads (64 KiB and more) carry a payload CRC on
//!   every frame (`always`) or on every N-th (`sample:N`); headers are always
//!   checked.
//!
//! What the verbs keys mean:
//!
//! * `verbs_atomics`: `auto` uses the NIC's atomics only when the device
//!   reports them atomic with respect to the CPU (`IBV_ATOMIC_GLOB`); with
//!   any other device (most report `IBV_ATOMIC_HCA`) every atomic to a verbs
//!   peer goes over TCP and runs on the target's CPU, like same-node and
//!   local atomics, so no update is lost when they mix. `nic` forces the
//!   NIC's atomics (a job whose atomics on one word never mix NIC and CPU
//!   agents); `cpu` never uses them. See [`VerbsAtomics`].
//! * `verbs_routed`: ROUTED peers (another switch) get verbs queue pairs too
//!   and their messages of `short_threshold` bytes and more go over verbs,
//!   shorter ones over TCP; `off` keeps them on TCP entirely.
//!
//! # Value syntax
//!
//! * **Sizes** are a number with an optional unit: `65536`, `64K`, `64M`, `1G`,
//!   `1T`. Units are case-insensitive and always binary (powers of 1024): `K`,
//!   `KB` and `KiB` all mean 1024 bytes; `B` means bytes. A fraction is accepted
//!   when the result is a whole number of bytes: `1.5G` is 1610612736 bytes and
//!   `0.5K` is 512, but `1.1K` (1126.4) and `1.5` are errors. No sign, no
//!   exponent, at most 9 digits after the point.
//! * **Durations** need a unit: `ns`, `us`, `ms`, `s`, `m` (minutes), `h`:
//!   `500ms`, `5s`, `2m`, `1.5s`. A bare number is an error (seconds or
//!   milliseconds? the file must say).
//! * **Counts** are plain decimal digits.
//! * **Address lists** are IP addresses separated by commas:
//!   `10.0.0.1,10.0.1.1`, `fd00::1`. `auto` is the empty list.
//! * Surrounding spaces are ignored, as is a space between number and unit.
//!
//! In the TOML file a value may be a string (`heap_size = "1G"`) or, where it
//! makes sense, an integer (`heap_size = 1073741824`, `queue_depth = 512`), a
//! boolean (`huge_pages = true`) or, for `tcp_addrs`, an array of strings
//! (`tcp_addrs = ["10.0.0.1", "10.0.1.1"]`; `[]` is `auto`). Keys are lower
//! case and top-level; a key the file does not know is an error naming the
//! key, the file and the line.
//!
//! # Errors and warnings
//!
//! Every bad value is a [`ConfigError`] naming the key, the value and what was
//! expected, such as `SWITCHYARD_HEAP_SIZE=abc: expected a size such as 65536,
//! 64M or 1G, from 4K to 1T`. All problems are collected, not just the first
//! ([`ConfigError::Several`]). A `SWITCHYARD_*` variable that is neither a key
//! nor one of the launcher's [`RESERVED_ENV`] is not an error but a
//! [`ConfigWarning`] (with a "did you mean" when it looks like a typo, such as
//! `SWITCHYARD_HEAPSIZE`). No input makes the loader panic.
//!
//! # Templates
//!
//! After the parameter templates of the seed articles (§6 of `004_*`), scaled to
//! what switchyard has knobs for (CQ depth, SRQ and TSO are driver matters,
//! derived from `queue_depth` and the device):
//!
//! | key | `trading` | `storage` | `ai` |
//! |-----|-----------|-----------|------|
//! | `progress` | `busy` | `adaptive` | `adaptive` |
//! | `bind_to` | `core` | | |
//! | `queue_depth` | `128` | `1024` | `1024` (the seed's 768, rounded up to a power of two) |
//! | `inline_threshold` | `256` | `0` (none) | |
//! | `short_threshold` | `2K` | | |
//! | `heap_size` | `256M` | `4G` | `2G` |
//! | `huge_pages` | `on` | | |
//! | `heartbeat` | `100ms` | | |
//! | `op_timeout` | `2s` | `30s` | `1m` |
//! | `tcp_connections` | `1` | `4` | `4` |
//! | `tcp_window` | `1M` | `16M` | `16M` |
//! | `payload_crc` | | `always` | `sample:16` |
//!
//! An empty cell keeps the default. Why the TCP values: trading keeps one
//! connection and a 1M window (small messages; less replay memory, less to
//! retransmit after a link failure); storage and ai stripe bulk transfers over
//! 4 connections with a 16M window to fill fast links; storage checks every
//! payload (data at rest must not rot), while ai samples one frame in 16
//! (gradients tolerate the rare miss, and the CRC costs bandwidth).
//!
//! # Example
//!
//! ```
//! use switchyard::config::{Config, Key, Progress, Source};
//!
//! let cfg = Config::load_from(|var| match var {
//!     "SWITCHYARD_TEMPLATE" => Some("trading".into()),
//!     "SWITCHYARD_QUEUE_DEPTH" => Some("512".into()),
//!     _ => None,
//! })?;
//! assert_eq!(cfg.progress, Progress::Busy);
//! assert_eq!(cfg.source(Key::Progress), &Source::Template("trading"));
//! assert_eq!(cfg.queue_depth, 512);
//! assert_eq!(cfg.source(Key::QueueDepth), &Source::Env("SWITCHYARD_QUEUE_DEPTH"));
//! assert_eq!(cfg.source(Key::SpinBeforePark), &Source::Default);
//!
//! let err = Config::load_from(|var| (var == "SWITCHYARD_HEAP_SIZE").then(|| "abc".into()))
//!     .unwrap_err();
//! assert!(err.to_string().starts_with(
//!     "SWITCHYARD_HEAP_SIZE=abc: expected a size such as 65536, 64M or 1G"
//! ));
//! # Ok::<(), switchyard::config::ConfigError>(())
//! ```

use std::{
    collections::BTreeMap,
    fmt,
    io::Read as _,
    net::IpAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use switchyard_core::route::{LoadWatermark, PolicyConfig};

/// Prefix of every switchyard environment variable.
pub const ENV_PREFIX: &str = "SWITCHYARD_";

/// Names the TOML configuration file.
pub const ENV_CONFIG: &str = "SWITCHYARD_CONFIG";

/// Names the [`Template`].
pub const ENV_TEMPLATE: &str = "SWITCHYARD_TEMPLATE";

/// `SWITCHYARD_*` variables that are not configuration keys but are known (the
/// launcher's and the bootstrap's, and the two above): never warned about.
pub const RESERVED_ENV: [&str; 15] = [
    "SWITCHYARD_RANK",
    "SWITCHYARD_SIZE",
    "SWITCHYARD_LOCAL_RANK",
    "SWITCHYARD_LOCAL_SIZE",
    "SWITCHYARD_JOB_ID",
    "SWITCHYARD_ROOT",
    "SWITCHYARD_ROOT_HOST",
    "SWITCHYARD_LAUNCHER_PID",
    "SWITCHYARD_BOUND_CPU",
    "SWITCHYARD_NODE_ID",
    "SWITCHYARD_SWITCH_ID",
    "SWITCHYARD_TREE_ID",
    "SWITCHYARD_SIM",
    ENV_CONFIG,
    ENV_TEMPLATE,
];

/// Largest configuration file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The TOML key that names the template.
pub const TEMPLATE_KEY: &str = "template";

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

const US: Duration = Duration::from_micros(1);
const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// What the template key takes.
const TEMPLATE_EXPECTED: &str = "a template name: trading, storage or ai";

// ---------------------------------------------------------------------------
// Keys

/// A configuration key (every one but the template, which selects a group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Key {
    /// `heap_size`: bytes of symmetric heap per PE.
    HeapSize,
    /// `progress`: how the progress engine waits.
    Progress,
    /// `spin_before_park`: idle polls before an adaptive progress thread parks.
    SpinBeforePark,
    /// `short_threshold`: messages shorter than this are short on a fallback path.
    ShortThreshold,
    /// `load_watermark`: queue occupancy (percent) above which a transport yields.
    LoadWatermark,
    /// `queue_depth`: entries per send queue.
    QueueDepth,
    /// `huge_pages`: whether the heap uses huge pages.
    HugePages,
    /// `bootstrap_timeout`: deadline for the bootstrap rendezvous.
    BootstrapTimeout,
    /// `op_timeout`: deadline for an operation waiting on a dead peer.
    OpTimeout,
    /// `heartbeat`: the dead-link detection window: a link with no traffic for
    /// this long is down; heartbeats go every quarter of it.
    Heartbeat,
    /// `trace_records`: capacity of the route trace ring.
    TraceRecords,
    /// `inline_threshold`: largest put sent inline in the work request.
    InlineThreshold,
    /// `bind_to`: whether the progress thread is pinned.
    BindTo,
    /// `tcp_addrs`: local address of each TCP rail, in rail order (empty:
    /// automatic).
    TcpAddrs,
    /// `tcp_connections`: data connections per peer per rail.
    TcpConnections,
    /// `tcp_window`: per-peer send window (replay buffer and flow-control
    /// credit).
    TcpWindow,
    /// `give_up`: how long a peer may be down on every link before it is dead.
    GiveUp,
    /// `reconnect_base`: first wait of the reconnect backoff.
    ReconnectBase,
    /// `reconnect_cap`: longest wait of the reconnect backoff.
    ReconnectCap,
    /// `payload_crc`: which bulk frames carry a payload CRC.
    PayloadCrc,
    /// `transports`: which transports PEs may use between each other.
    Transports,
    /// `verbs_atomics`: whether atomics to verbs peers use the NIC's atomics
    /// or go to the target's CPU over TCP.
    VerbsAtomics,
    /// `verbs_routed`: whether ROUTED peers (across switches) use verbs for
    /// long messages.
    VerbsRouted,
}

impl Key {
    /// Number of keys.
    pub const COUNT: usize = 23;

    /// Every key, in the order [`Config::entries`] lists them.
    pub const ALL: [Key; Key::COUNT] = [
        Key::HeapSize,
        Key::Progress,
        Key::SpinBeforePark,
        Key::ShortThreshold,
        Key::LoadWatermark,
        Key::QueueDepth,
        Key::HugePages,
        Key::BootstrapTimeout,
        Key::OpTimeout,
        Key::Heartbeat,
        Key::TraceRecords,
        Key::InlineThreshold,
        Key::BindTo,
        Key::TcpAddrs,
        Key::TcpConnections,
        Key::TcpWindow,
        Key::GiveUp,
        Key::ReconnectBase,
        Key::ReconnectCap,
        Key::PayloadCrc,
        Key::Transports,
        Key::VerbsAtomics,
        Key::VerbsRouted,
    ];

    /// The key as written in the TOML file: `heap_size`.
    pub const fn name(self) -> &'static str {
        match self {
            Key::HeapSize => "heap_size",
            Key::Progress => "progress",
            Key::SpinBeforePark => "spin_before_park",
            Key::ShortThreshold => "short_threshold",
            Key::LoadWatermark => "load_watermark",
            Key::QueueDepth => "queue_depth",
            Key::HugePages => "huge_pages",
            Key::BootstrapTimeout => "bootstrap_timeout",
            Key::OpTimeout => "op_timeout",
            Key::Heartbeat => "heartbeat",
            Key::TraceRecords => "trace_records",
            Key::InlineThreshold => "inline_threshold",
            Key::BindTo => "bind_to",
            Key::TcpAddrs => "tcp_addrs",
            Key::TcpConnections => "tcp_connections",
            Key::TcpWindow => "tcp_window",
            Key::GiveUp => "give_up",
            Key::ReconnectBase => "reconnect_base",
            Key::ReconnectCap => "reconnect_cap",
            Key::PayloadCrc => "payload_crc",
            Key::Transports => "transports",
            Key::VerbsAtomics => "verbs_atomics",
            Key::VerbsRouted => "verbs_routed",
        }
    }

    /// The environment variable: `SWITCHYARD_HEAP_SIZE`.
    pub const fn env(self) -> &'static str {
        match self {
            Key::HeapSize => "SWITCHYARD_HEAP_SIZE",
            Key::Progress => "SWITCHYARD_PROGRESS",
            Key::SpinBeforePark => "SWITCHYARD_SPIN_BEFORE_PARK",
            Key::ShortThreshold => "SWITCHYARD_SHORT_THRESHOLD",
            Key::LoadWatermark => "SWITCHYARD_LOAD_WATERMARK",
            Key::QueueDepth => "SWITCHYARD_QUEUE_DEPTH",
            Key::HugePages => "SWITCHYARD_HUGE_PAGES",
            Key::BootstrapTimeout => "SWITCHYARD_BOOTSTRAP_TIMEOUT",
            Key::OpTimeout => "SWITCHYARD_OP_TIMEOUT",
            Key::Heartbeat => "SWITCHYARD_HEARTBEAT",
            Key::TraceRecords => "SWITCHYARD_TRACE_RECORDS",
            Key::InlineThreshold => "SWITCHYARD_INLINE_THRESHOLD",
            Key::BindTo => "SWITCHYARD_BIND_TO",
            Key::TcpAddrs => "SWITCHYARD_TCP_ADDRS",
            Key::TcpConnections => "SWITCHYARD_TCP_CONNECTIONS",
            Key::TcpWindow => "SWITCHYARD_TCP_WINDOW",
            Key::GiveUp => "SWITCHYARD_GIVE_UP",
            Key::ReconnectBase => "SWITCHYARD_RECONNECT_BASE",
            Key::ReconnectCap => "SWITCHYARD_RECONNECT_CAP",
            Key::PayloadCrc => "SWITCHYARD_PAYLOAD_CRC",
            Key::Transports => "SWITCHYARD_TRANSPORTS",
            Key::VerbsAtomics => "SWITCHYARD_VERBS_ATOMICS",
            Key::VerbsRouted => "SWITCHYARD_VERBS_ROUTED",
        }
    }

    /// What the key takes, as error messages say it ("expected ...").
    pub const fn expected(self) -> &'static str {
        match self {
            Key::HeapSize => "a size such as 65536, 64M or 1G, from 4K to 1T",
            Key::Progress => "busy, adaptive or caller",
            Key::SpinBeforePark => {
                "a whole number such as 2000 (0 parks at once), at most 1000000000"
            }
            Key::ShortThreshold => "a size such as 8192, 8K or 64K, at most 1G",
            Key::LoadWatermark => "a percentage from 1 to 100, such as 75 or 75%",
            Key::QueueDepth => "a power of two from 16 to 65536, such as 256",
            Key::HugePages => "auto, on or off",
            Key::BootstrapTimeout | Key::OpTimeout => {
                "a duration such as 500ms, 5s or 2m, from 1ms to 24h"
            }
            Key::Heartbeat => "a duration such as 100ms, 200ms or 1s, from 1ms to 60s",
            Key::TraceRecords => "a power of two from 16 to 1048576, such as 4096",
            Key::InlineThreshold => {
                "a size such as 0, 64 or 256 (0 or off: no inlining), at most 4K"
            }
            Key::BindTo => "core, none, or cpu:N for CPU N (0 to 65535)",
            Key::TcpAddrs => {
                "auto or up to 4 distinct IP addresses separated by commas, one per TCP rail, such as 10.0.0.1,10.0.1.1"
            }
            Key::TcpConnections => "a whole number from 1 to 8, such as 1 or 4",
            Key::TcpWindow => "a size such as 1M, 4M or 16M, from 64K to 1G",
            Key::GiveUp => "a duration such as 1s, 5s or 1m, from 10ms to 24h",
            Key::ReconnectBase => "a duration such as 1ms, 5ms or 50ms, from 100us to 10s",
            Key::ReconnectCap => "a duration such as 100ms, 500ms or 5s, from 1ms to 60s",
            Key::PayloadCrc => "always or sample:N with N from 1 to 1000000, such as sample:16",
            Key::Transports => {
                "all, or a comma-separated list of shm, tcp and verbs, such as shm,tcp or tcp"
            }
            Key::VerbsAtomics => "auto, nic or cpu",
            Key::VerbsRouted => "on or off",
        }
    }

    /// The key named `name` in the TOML file (exact, lower case).
    pub fn from_name(name: &str) -> Option<Key> {
        Key::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The key whose environment variable is `var` (exact).
    pub fn from_env(var: &str) -> Option<Key> {
        Key::ALL.into_iter().find(|k| k.env() == var)
    }

    const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ---------------------------------------------------------------------------
// Value types

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
}

impl Progress {
    /// The value's name: `busy`, `adaptive`, `caller`.
    pub const fn name(self) -> &'static str {
        match self {
            Progress::Busy => "busy",
            Progress::Adaptive => "adaptive",
            Progress::Caller => "caller",
        }
    }

    fn parse(s: &str) -> Option<Progress> {
        match s.to_ascii_lowercase().as_str() {
            "busy" => Some(Progress::Busy),
            "adaptive" => Some(Progress::Adaptive),
            "caller" => Some(Progress::Caller),
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

    fn parse(s: &str) -> Option<HugePages> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(HugePages::Auto),
            "on" | "true" => Some(HugePages::On),
            "off" | "false" => Some(HugePages::Off),
            _ => None,
        }
    }
}

/// Whether the progress thread is pinned to a core, and to which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BindTo {
    /// Pin it to the PE's own core (the launcher's `SWITCHYARD_BOUND_CPU`;
    /// unpinned when the PE is not pinned).
    Core,
    /// Pin it to this CPU (`cpu:N`): a dedicated progress core.
    Cpu(u32),
    /// Leave it to the scheduler.
    #[default]
    None,
}

impl core::fmt::Display for BindTo {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BindTo::Cpu(c) => write!(f, "cpu:{c}"),
            other => f.write_str(other.name()),
        }
    }
}

impl BindTo {
    /// The value's name: `core`, `cpu`, `none` (see `Display` for `cpu:N`).
    pub const fn name(self) -> &'static str {
        match self {
            BindTo::Core => "core",
            BindTo::Cpu(_) => "cpu",
            BindTo::None => "none",
        }
    }

    fn parse(s: &str) -> Option<BindTo> {
        let l = s.to_ascii_lowercase();
        match l.as_str() {
            "core" => Some(BindTo::Core),
            "none" => Some(BindTo::None),
            _ => {
                let n = l.strip_prefix("cpu:")?;
                if n.is_empty() || n.len() > 5 || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                n.parse().ok().filter(|&c| c < 65536).map(BindTo::Cpu)
            }
        }
    }
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
        let (name, n) = s.split_once(':')?;
        if !name.trim().eq_ignore_ascii_case("sample") {
            return None;
        }
        let every = parse_count(n)
            .and_then(|v| in_range(v, 1, u64::from(PayloadCrc::MAX_EVERY)))
            .and_then(|v| u32::try_from(v).ok())?;
        Some(PayloadCrc::Sample { every })
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

    fn parse(s: &str) -> Option<VerbsAtomics> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(VerbsAtomics::Auto),
            "nic" => Some(VerbsAtomics::Nic),
            "cpu" => Some(VerbsAtomics::Cpu),
            _ => None,
        }
    }
}

/// Parses `on`/`off` (`true`/`false` too), case-insensitive.
fn parse_on_off(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" => Some(true),
        "off" | "false" => Some(false),
        _ => None,
    }
}

/// Most addresses in `tcp_addrs` (TCP rails).
pub const MAX_TCP_ADDRS: usize = 4;

/// Reads `auto` (the empty list) or comma-separated IP addresses: at most
/// [`MAX_TCP_ADDRS`], no duplicates, no empty item.
fn parse_addrs(s: &str) -> Option<Vec<IpAddr>> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("auto") {
        return Some(Vec::new());
    }
    let mut out = Vec::new();
    for item in s.split(',') {
        if out.len() == MAX_TCP_ADDRS {
            return None;
        }
        let addr: IpAddr = item.trim().parse().ok()?;
        if out.contains(&addr) {
            return None;
        }
        out.push(addr);
    }
    Some(out)
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

/// The text form [`parse_addrs`] reads back: `auto`, or the addresses joined by
/// commas.
fn format_addrs(addrs: &[IpAddr]) -> String {
    if addrs.is_empty() {
        return "auto".into();
    }
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

// ---------------------------------------------------------------------------
// Templates

/// A named group of settings for one kind of workload (see the module doc's
/// table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Template {
    /// Latency first: busy polling on a pinned core, shallow queues, inlined
    /// small puts, huge pages, fast failure detection, one TCP connection and
    /// a small window.
    Trading,
    /// Throughput first: deep queues, a large heap, no inlining, 4 TCP
    /// connections, a large window, every payload checked.
    Storage,
    /// Distributed training: deep queues, a large heap, adaptive progress, 4
    /// TCP connections, a large window, payload CRCs sampled.
    Ai,
}

const TRADING: &[(Key, &str)] = &[
    (Key::Progress, "busy"),
    (Key::BindTo, "core"),
    (Key::QueueDepth, "128"),
    (Key::InlineThreshold, "256"),
    (Key::ShortThreshold, "2K"),
    (Key::HeapSize, "256M"),
    (Key::HugePages, "on"),
    (Key::Heartbeat, "100ms"),
    (Key::OpTimeout, "2s"),
    (Key::TcpConnections, "1"),
    (Key::TcpWindow, "1M"),
];

const STORAGE: &[(Key, &str)] = &[
    (Key::Progress, "adaptive"),
    (Key::QueueDepth, "1024"),
    (Key::InlineThreshold, "0"),
    (Key::HeapSize, "4G"),
    (Key::OpTimeout, "30s"),
    (Key::TcpConnections, "4"),
    (Key::TcpWindow, "16M"),
    (Key::PayloadCrc, "always"),
];

const AI: &[(Key, &str)] = &[
    (Key::Progress, "adaptive"),
    (Key::QueueDepth, "1024"),
    (Key::HeapSize, "2G"),
    (Key::OpTimeout, "1m"),
    (Key::TcpConnections, "4"),
    (Key::TcpWindow, "16M"),
    (Key::PayloadCrc, "sample:16"),
];

impl Template {
    /// Every template.
    pub const ALL: [Template; 3] = [Template::Trading, Template::Storage, Template::Ai];

    /// The name: `trading`, `storage`, `ai`.
    pub const fn name(self) -> &'static str {
        match self {
            Template::Trading => "trading",
            Template::Storage => "storage",
            Template::Ai => "ai",
        }
    }

    /// One line on what it is for.
    pub const fn summary(self) -> &'static str {
        match self {
            Template::Trading => "latency first: busy polling, pinned, shallow queues, inlining",
            Template::Storage => "throughput first: deep queues, large heap, no inlining",
            Template::Ai => "distributed training: deep queues, large heap, adaptive progress",
        }
    }

    /// The keys it sets, with their values in text form.
    pub const fn settings(self) -> &'static [(Key, &'static str)] {
        match self {
            Template::Trading => TRADING,
            Template::Storage => STORAGE,
            Template::Ai => AI,
        }
    }

    /// The template called `name` (case-insensitive, spaces around ignored).
    pub fn from_name(name: &str) -> Option<Template> {
        let name = name.trim();
        Template::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ---------------------------------------------------------------------------
// Sources

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// The built-in default.
    Default,
    /// The named template.
    Template(&'static str),
    /// The TOML file, at this line.
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key.
        line: u32,
    },
    /// The environment variable.
    Env(&'static str),
}

impl Source {
    /// The kind of source: `default`, `template`, `file` or `env`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Template(_) => "template",
            Source::File { .. } => "file",
            Source::Env(_) => "env",
        }
    }
}

impl fmt::Display for Source {
    /// `default`, `template trading`, `file /etc/switchyard.toml:3`,
    /// `env SWITCHYARD_HEAP_SIZE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Template(name) => write!(f, "template {name}"),
            Source::File { path, line } => write!(f, "file {}:{line}", path.display()),
            Source::Env(var) => write!(f, "env {var}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Errors and warnings

/// Why the configuration cannot be loaded. Every variant names what is wrong
/// and where; a CLI exits with status 2 on any of them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value that does not parse or is out of range.
    #[error("{}", bad_value_text(.key, .value, .from, .expected))]
    BadValue {
        /// The key (`heap_size`, or `template`).
        key: &'static str,
        /// The value as given (for the file, as written there).
        value: String,
        /// Where it was given.
        from: Source,
        /// What the key takes.
        expected: &'static str,
    },
    /// Two values that cannot go together.
    #[error("{0}")]
    Conflict(Box<Conflict>),
    /// The file named by `SWITCHYARD_CONFIG` cannot be read.
    #[error("cannot read the configuration file {}: {error}", .path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The file is too large to be a configuration file.
    #[error("the configuration file {} is larger than {max} bytes", .path.display())]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// The limit ([`MAX_FILE_BYTES`]).
        max: u64,
    },
    /// The file is not UTF-8 text.
    #[error("the configuration file {} is not UTF-8 text", .path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// The file is not valid TOML.
    #[error("{}: not valid TOML: {message}", at(.path, .line))]
    Toml {
        /// The file.
        path: PathBuf,
        /// 1-based line, when the parser says.
        line: Option<u32>,
        /// The parser's message.
        message: String,
    },
    /// The file has a key switchyard does not know.
    #[error(
        "{}:{line}: unknown key '{key}'{}; the keys are template, {}",
        .path.display(),
        did_you_mean(.suggestion, "'"),
        key_list()
    )]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key.
        line: u32,
        /// The key as written.
        key: String,
        /// A known key it looks like.
        suggestion: Option<&'static str>,
    },
    /// More than one of the above, in the order found.
    #[error("{} configuration errors:{}", .0.len(), list_text(.0))]
    Several(Vec<ConfigError>),
}

/// Two values that cannot go together (boxed in [`ConfigError::Conflict`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value} ({from}) must be {relation} {other} = {other_value} ({other_from})")]
pub struct Conflict {
    /// The key at fault.
    pub key: &'static str,
    /// Its value.
    pub value: String,
    /// Where it was given.
    pub from: Source,
    /// How it must relate to the other (`shorter than`).
    pub relation: &'static str,
    /// The other key.
    pub other: &'static str,
    /// Its value.
    pub other_value: String,
    /// Where that was given.
    pub other_from: Source,
}

impl ConfigError {
    /// The single errors: itself, or the members of [`ConfigError::Several`].
    pub fn errors(&self) -> &[ConfigError] {
        match self {
            ConfigError::Several(v) => v,
            other => std::slice::from_ref(other),
        }
    }

    fn from_list(mut errors: Vec<ConfigError>) -> Option<ConfigError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ConfigError::Several(errors)),
        }
    }
}

fn at(path: &Path, line: &Option<u32>) -> String {
    match *line {
        Some(l) => format!("{}:{l}", path.display()),
        None => path.display().to_string(),
    }
}

fn did_you_mean(suggestion: &Option<&str>, quote: &str) -> String {
    (*suggestion).map_or_else(String::new, |s| {
        format!(" (did you mean {quote}{s}{quote}?)")
    })
}

fn key_list() -> String {
    Key::ALL.map(Key::name).join(", ")
}

fn list_text(errors: &[ConfigError]) -> String {
    let mut s = String::new();
    for e in errors {
        s.push_str("\n  ");
        s.push_str(&e.to_string());
    }
    s
}

fn bad_value_text(key: &str, value: &str, from: &Source, expected: &str) -> String {
    match from {
        Source::Env(var) => format!("{var}={}: expected {expected}", shown(value)),
        Source::File { path, line } => format!(
            "{}: {key} = {}: expected {expected}",
            at(path, &Some(*line)),
            shown(value)
        ),
        Source::Template(name) => {
            format!(
                "template {name}: {key} = {}: expected {expected}",
                shown(value)
            )
        }
        Source::Default => format!("{key} = {}: expected {expected}", shown(value)),
    }
}

/// Longest value quoted in a message, in characters.
const SHOWN_MAX: usize = 64;

/// A value for a message: as is when it is short and plain, else quoted with
/// escapes and cut.
fn shown(value: &str) -> String {
    let plain = !value.is_empty()
        && value.chars().count() <= SHOWN_MAX
        && value.chars().all(|c| c.is_ascii_graphic() || c == ' ')
        && !value.starts_with(' ')
        && !value.ends_with(' ');
    if plain {
        return value.into();
    }
    let cut: String = value.chars().take(SHOWN_MAX).collect();
    let mut s = format!("{cut:?}");
    if cut.len() < value.len() {
        s.push_str("...");
    }
    s
}

/// A `SWITCHYARD_*` variable that is not a key and not reserved: ignored, and
/// reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The variable.
    pub var: String,
    /// The known variable it looks like, if any.
    pub suggestion: Option<&'static str>,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is not a switchyard setting{}; it is ignored",
            shown(&self.var),
            did_you_mean(&self.suggestion, "")
        )
    }
}

/// Warnings for the `SWITCHYARD_*` names among `names` that are neither keys nor
/// [`RESERVED_ENV`]. The prefix is matched without regard to case, so
/// `switchyard_heap_size` is reported too.
pub fn check_env_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<ConfigWarning> {
    let known: Vec<&'static str> = Key::ALL
        .map(Key::env)
        .into_iter()
        .chain(RESERVED_ENV)
        .collect();
    let mut out = Vec::new();
    for name in names {
        let looks_ours = name
            .get(..ENV_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(ENV_PREFIX));
        if !looks_ours || known.contains(&name) {
            continue;
        }
        let rest = &name[ENV_PREFIX.len()..];
        let suggestion = closest(rest, known.iter().map(|k| (&k[ENV_PREFIX.len()..], *k)));
        out.push(ConfigWarning {
            var: name.into(),
            suggestion,
        });
    }
    out
}

/// The candidate `given` most plausibly misspells: equal without regard to case
/// and underscores, or within a small edit distance.
fn closest<'a>(
    given: &str,
    candidates: impl Iterator<Item = (&'a str, &'static str)>,
) -> Option<&'static str> {
    const MAX_LEN: usize = 64;
    if given.is_empty() || given.len() > MAX_LEN {
        return None;
    }
    let norm = |s: &str| -> Vec<u8> {
        s.bytes()
            .filter(|&b| b != b'_' && b != b'-')
            .map(|b| b.to_ascii_lowercase())
            .collect()
    };
    let g = norm(given);
    let mut best: Option<(usize, &'static str)> = None;
    for (cand, full) in candidates {
        let c = norm(cand);
        let d = edit_distance(&g, &c);
        let limit = if c.len() <= 5 { 1 } else { 2 };
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, full));
        }
    }
    best.map(|(_, full)| full)
}

/// Optimal-string-alignment distance (insert, delete, substitute, swap two
/// neighbours).
fn edit_distance(a: &[u8], b: &[u8]) -> usize {
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for (i, row) in d.chunks_mut(w).enumerate() {
        row[0] = i;
    }
    for (j, cell) in d.iter_mut().take(w).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

// ---------------------------------------------------------------------------
// Value parsing (public so other commands parse sizes the same way)

/// Parses `digits[.digits]` times `scale`, exactly: `None` when malformed, when
/// the result is not whole, or on overflow.
fn scaled_decimal(num: &str, scale: u128) -> Option<u128> {
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || int.len() > 24 || frac.len() > 9 || !digits(int) || !digits(frac) {
        return None;
    }
    if num.ends_with('.') {
        return None;
    }
    let pow = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let int_v: u128 = int.parse().ok()?;
    let frac_v: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let n = int_v.checked_mul(pow)?.checked_add(frac_v)?;
    let total = n.checked_mul(scale)?;
    (total % pow == 0).then_some(total / pow)
}

/// Splits `s` into its number (digits and points) and its unit, trimmed.
fn split_unit(s: &str) -> (&str, &str) {
    let s = s.trim();
    let at = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(at);
    (num, unit.trim())
}

/// Parses a size in bytes: `65536`, `64K`, `64MiB`, `1.5G` (see the module
/// doc). `None` when `s` is not a size or does not fit in a `u64`.
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, unit) = split_unit(s);
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => TIB,
        _ => return None,
    };
    u64::try_from(scaled_decimal(num, u128::from(scale))?).ok()
}

/// Formats a size the shortest way [`parse_size`] reads back: `64M`, `1536K`,
/// `1000`.
pub fn format_size(bytes: u64) -> String {
    for (unit, scale) in [("T", TIB), ("G", GIB), ("M", MIB), ("K", KIB)] {
        if bytes != 0 && bytes.is_multiple_of(scale) {
            return format!("{}{unit}", bytes / scale);
        }
    }
    bytes.to_string()
}

/// Parses a duration: `500ms`, `5s`, `2m`, `1.5s`, `250us`, `1h` (a unit is
/// required). `None` when `s` is not a duration or is longer than `u64`
/// nanoseconds (about 584 years).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let (num, unit) = split_unit(s);
    let scale: u128 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    };
    let ns = u64::try_from(scaled_decimal(num, scale)?).ok()?;
    Some(Duration::from_nanos(ns))
}

/// Formats a duration the shortest way [`parse_duration`] reads back: `200ms`,
/// `30s`, `2m`, `1500us`.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    for (unit, scale) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if ns.is_multiple_of(scale) {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

/// Parses a plain decimal count (digits only).
fn parse_count(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn in_range<T: PartialOrd>(v: T, lo: T, hi: T) -> Option<T> {
    (lo <= v && v <= hi).then_some(v)
}

fn pow2_in(v: u64, lo: u64, hi: u64) -> Option<u32> {
    in_range(v, lo, hi)
        .filter(|v| v.is_power_of_two())
        .and_then(|v| u32::try_from(v).ok())
}

// ---------------------------------------------------------------------------
// The configuration

/// The configuration in effect: typed values, and where each came from.
///
/// The value fields are public for reading; [`Config::set`] changes one and
/// records its source. Build one with [`Config::from_env`],
/// [`Config::load_from`] or [`Config::load_from_vars`]; [`Config::default`] is
/// the built-in defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Bytes of symmetric heap per PE. Default 64 MiB.
    pub heap_size: u64,
    /// How the progress engine waits. Default [`Progress::Adaptive`].
    pub progress: Progress,
    /// Idle polls before an adaptive progress thread parks. Default 2000.
    pub spin_before_park: u32,
    /// Messages shorter than this (bytes) are short on a fallback path. Default
    /// 8 KiB.
    pub short_threshold: u32,
    /// Queue occupancy, percent (1 to 100), above which a transport yields.
    /// Default 75.
    pub load_watermark: u8,
    /// Entries per send queue, a power of two from 16 to 65536. Default 256.
    pub queue_depth: u32,
    /// Huge pages for the heap. Default [`HugePages::Auto`].
    pub huge_pages: HugePages,
    /// Deadline for the bootstrap rendezvous. Default 30 s.
    pub bootstrap_timeout: Duration,
    /// Deadline for an operation waiting on a dead or unreachable peer. Default
    /// 10 s.
    pub op_timeout: Duration,
    /// The dead-link detection window: a link with no traffic for this long is
    /// down; heartbeats go every quarter of it. Default 200 ms.
    pub heartbeat: Duration,
    /// Capacity of the route trace ring, a power of two. Default 4096.
    pub trace_records: u32,
    /// Largest put (bytes) sent inline; 0 turns inlining off. Default 256.
    pub inline_threshold: u32,
    /// Whether and where the progress thread is pinned. Default
    /// [`BindTo::None`].
    pub bind_to: BindTo,
    /// Local address of each TCP rail, in rail order, at most
    /// [`MAX_TCP_ADDRS`], distinct. Default empty: the shim picks the address
    /// that routes to the bootstrap root.
    pub tcp_addrs: Vec<IpAddr>,
    /// Transports PEs may use between each other (`SWITCHYARD_TRANSPORTS`,
    /// like UCX's `UCX_TLS`). Default: all.
    pub transports: Transports,
    /// Data connections per peer per rail, 1 to 8 (a control connection is
    /// always added). Default 1.
    pub tcp_connections: u8,
    /// Per-peer send window in bytes, 64 KiB to 1 GiB: the replay buffer and
    /// the flow-control credit. Default 4 MiB.
    pub tcp_window: u32,
    /// A peer down on every link this long is dead: its operations fail. Not
    /// shorter than `heartbeat`. Default 5 s.
    pub give_up: Duration,
    /// First wait of the reconnect backoff. Default 5 ms.
    pub reconnect_base: Duration,
    /// Longest wait of the reconnect backoff, not shorter than
    /// `reconnect_base`. Default 500 ms.
    pub reconnect_cap: Duration,
    /// Which bulk payloads carry a CRC. Default [`PayloadCrc::Always`].
    pub payload_crc: PayloadCrc,
    /// Whether atomics to verbs peers use the NIC's atomics. Default
    /// [`VerbsAtomics::Auto`].
    pub verbs_atomics: VerbsAtomics,
    /// Whether ROUTED peers use verbs for long messages (short ones and
    /// everything while verbs is down go over TCP). Default on.
    pub verbs_routed: bool,
    template: Option<(Template, Source)>,
    file: Option<PathBuf>,
    sources: [Source; Key::COUNT],
    warnings: Vec<ConfigWarning>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            heap_size: 64 * MIB,
            progress: Progress::Adaptive,
            spin_before_park: 2000,
            short_threshold: 8 * 1024,
            load_watermark: 75,
            queue_depth: 256,
            huge_pages: HugePages::Auto,
            bootstrap_timeout: Duration::from_secs(30),
            op_timeout: Duration::from_secs(10),
            heartbeat: Duration::from_millis(200),
            trace_records: 4096,
            inline_threshold: 256,
            bind_to: BindTo::None,
            tcp_addrs: Vec::new(),
            transports: Transports::ALL,
            tcp_connections: 1,
            tcp_window: 4 * 1024 * 1024,
            give_up: Duration::from_secs(5),
            reconnect_base: Duration::from_millis(5),
            reconnect_cap: Duration::from_millis(500),
            payload_crc: PayloadCrc::Always,
            verbs_atomics: VerbsAtomics::Auto,
            verbs_routed: true,
            template: None,
            file: None,
            sources: std::array::from_fn(|_| Source::Default),
            warnings: Vec::new(),
        }
    }
}

/// One line of [`Config::entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The key as written in the file (`heap_size`, or `template`).
    pub key: &'static str,
    /// Its environment variable.
    pub env: &'static str,
    /// The value in text form, as the parser reads it back (`64M`, `200ms`;
    /// `none` for no template).
    pub value: String,
    /// Where it came from.
    pub source: &'a Source,
}

/// One value read from the file: raw text for the parser, text as written for
/// messages, where.
struct FileValue {
    raw: Result<String, ()>,
    written: String,
    from: Source,
}

/// What the file holds.
#[derive(Default)]
struct FileSettings {
    template: Option<FileValue>,
    values: Vec<(Key, FileValue)>,
}

static DEFAULT_SOURCE: Source = Source::Default;

impl Config {
    /// Loads from the process environment (and the file and template it names),
    /// warning about unknown `SWITCHYARD_*` variables.
    ///
    /// # Errors
    ///
    /// As [`Config::load_from`].
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::load_from_vars(std::env::vars_os().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        }))
    }

    /// Loads with `vars` as the environment (name, value pairs; later pairs win),
    /// and records a [`ConfigWarning`] for every `SWITCHYARD_*` name that is not a
    /// key (see [`check_env_names`]).
    ///
    /// # Errors
    ///
    /// As [`Config::load_from`].
    pub fn load_from_vars<I, K, V>(vars: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let map: BTreeMap<String, String> = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(k, _)| {
                k.get(..ENV_PREFIX.len())
                    .is_some_and(|p| p.eq_ignore_ascii_case(ENV_PREFIX))
            })
            .collect();
        let mut cfg = Config::load_from(|var| map.get(var).cloned())?;
        cfg.warnings = check_env_names(map.keys().map(String::as_str));
        Ok(cfg)
    }

    /// Loads with `lookup` as the environment: it is asked for
    /// `SWITCHYARD_CONFIG`, `SWITCHYARD_TEMPLATE` and each key's variable, and
    /// returns its value if set. An empty or all-space value counts as unset.
    /// Unknown variables cannot be listed through a lookup, so this records no
    /// warnings.
    ///
    /// # Errors
    ///
    /// * [`ConfigError::ReadFile`], [`ConfigError::FileTooLarge`],
    ///   [`ConfigError::NotUtf8`], [`ConfigError::Toml`]: the file named by
    ///   `SWITCHYARD_CONFIG` cannot be used (nothing else is checked then);
    /// * [`ConfigError::UnknownKey`]: the file has a key that is not one;
    /// * [`ConfigError::BadValue`]: a value (or the template name) is bad, in the
    ///   file or the environment;
    /// * [`ConfigError::Conflict`]: the values in effect contradict each other
    ///   (see [`Config::check`]);
    /// * [`ConfigError::Several`]: more than one of the last three.
    pub fn load_from<F>(mut lookup: F) -> Result<Config, ConfigError>
    where
        F: FnMut(&str) -> Option<String>,
    {
        let mut get = |var: &str| lookup(var).filter(|v| !v.trim().is_empty());
        let mut errors = Vec::new();
        let mut cfg = Config::default();

        let mut file = FileSettings::default();
        if let Some(path) = get(ENV_CONFIG) {
            let path = PathBuf::from(path);
            let text = read_file(&path)?;
            file = parse_file(&text, &path, &mut errors)?;
            cfg.file = Some(path);
        }

        let template = match get(ENV_TEMPLATE) {
            Some(v) => Some((Ok(v.clone()), v, Source::Env(ENV_TEMPLATE))),
            None => file.template.map(|fv| (fv.raw, fv.written, fv.from)),
        };
        if let Some((raw, written, from)) = template {
            match raw.ok().as_deref().and_then(Template::from_name) {
                Some(t) => {
                    for &(key, value) in t.settings() {
                        if let Err(e) = cfg.set(key, value, Source::Template(t.name())) {
                            errors.push(e);
                        }
                    }
                    cfg.template = Some((t, from));
                }
                None => errors.push(ConfigError::BadValue {
                    key: TEMPLATE_KEY,
                    value: written,
                    from,
                    expected: TEMPLATE_EXPECTED,
                }),
            }
        }

        for (key, fv) in file.values {
            let result = match fv.raw {
                Ok(raw) => cfg.set_written(key, &raw, fv.written, fv.from),
                Err(()) => Err(ConfigError::BadValue {
                    key: key.name(),
                    value: fv.written,
                    from: fv.from,
                    expected: key.expected(),
                }),
            };
            if let Err(e) = result {
                errors.push(e);
            }
        }

        for key in Key::ALL {
            if let Some(v) = get(key.env())
                && let Err(e) = cfg.set(key, &v, Source::Env(key.env()))
            {
                errors.push(e);
            }
        }

        if errors.is_empty()
            && let Err(e) = cfg.check()
        {
            match e {
                ConfigError::Several(list) => errors.extend(list),
                e => errors.push(e),
            }
        }
        match ConfigError::from_list(errors) {
            Some(e) => Err(e),
            None => Ok(cfg),
        }
    }

    /// Sets `key` from its text form (as in the environment), recording
    /// `source`. The value is checked alone; [`Config::check`] checks values
    /// against each other.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadValue`] naming the key, the value, `source` and what the
    /// key takes; the configuration is then unchanged.
    pub fn set(&mut self, key: Key, value: &str, source: Source) -> Result<(), ConfigError> {
        self.set_written(key, value, value.into(), source)
    }

    fn set_written(
        &mut self,
        key: Key,
        raw: &str,
        written: String,
        source: Source,
    ) -> Result<(), ConfigError> {
        if self.parse_into(key, raw) {
            self.sources[key.index()] = source;
            Ok(())
        } else {
            Err(ConfigError::BadValue {
                key: key.name(),
                value: written,
                from: source,
                expected: key.expected(),
            })
        }
    }

    /// Parses `raw` for `key` into its field; false (and no change) when bad.
    fn parse_into(&mut self, key: Key, raw: &str) -> bool {
        fn put<T>(slot: &mut T, v: Option<T>) -> bool {
            match v {
                Some(v) => {
                    *slot = v;
                    true
                }
                None => false,
            }
        }
        let s = raw.trim();
        let size_u32 = |max: u64| {
            parse_size(s)
                .and_then(|v| in_range(v, 0, max))
                .and_then(|v| u32::try_from(v).ok())
        };
        match key {
            Key::HeapSize => put(
                &mut self.heap_size,
                parse_size(s).and_then(|v| in_range(v, 4 * KIB, TIB)),
            ),
            Key::Progress => put(&mut self.progress, Progress::parse(s)),
            Key::SpinBeforePark => put(
                &mut self.spin_before_park,
                parse_count(s)
                    .and_then(|v| in_range(v, 0, 1_000_000_000))
                    .and_then(|v| u32::try_from(v).ok()),
            ),
            Key::ShortThreshold => put(&mut self.short_threshold, size_u32(GIB)),
            Key::LoadWatermark => put(
                &mut self.load_watermark,
                parse_count(s.strip_suffix('%').unwrap_or(s))
                    .and_then(|v| in_range(v, 1, 100))
                    .and_then(|v| u8::try_from(v).ok()),
            ),
            Key::QueueDepth => put(
                &mut self.queue_depth,
                parse_count(s).and_then(|v| pow2_in(v, 16, 65536)),
            ),
            Key::HugePages => put(&mut self.huge_pages, HugePages::parse(s)),
            Key::BootstrapTimeout => put(
                &mut self.bootstrap_timeout,
                parse_duration(s).and_then(|d| in_range(d, MS, DAY)),
            ),
            Key::OpTimeout => put(
                &mut self.op_timeout,
                parse_duration(s).and_then(|d| in_range(d, MS, DAY)),
            ),
            Key::Heartbeat => put(
                &mut self.heartbeat,
                parse_duration(s).and_then(|d| in_range(d, MS, Duration::from_secs(60))),
            ),
            Key::TraceRecords => put(
                &mut self.trace_records,
                parse_count(s).and_then(|v| pow2_in(v, 16, 1 << 20)),
            ),
            Key::InlineThreshold => {
                let v = if s.eq_ignore_ascii_case("off") {
                    Some(0)
                } else {
                    size_u32(4 * KIB)
                };
                put(&mut self.inline_threshold, v)
            }
            Key::BindTo => put(&mut self.bind_to, BindTo::parse(s)),
            Key::TcpAddrs => put(&mut self.tcp_addrs, parse_addrs(s)),
            Key::TcpConnections => put(
                &mut self.tcp_connections,
                parse_count(s)
                    .and_then(|v| in_range(v, 1, 8))
                    .and_then(|v| u8::try_from(v).ok()),
            ),
            Key::TcpWindow => put(
                &mut self.tcp_window,
                parse_size(s)
                    .and_then(|v| in_range(v, 64 * KIB, GIB))
                    .and_then(|v| u32::try_from(v).ok()),
            ),
            Key::GiveUp => put(
                &mut self.give_up,
                parse_duration(s).and_then(|d| in_range(d, 10 * MS, DAY)),
            ),
            Key::ReconnectBase => put(
                &mut self.reconnect_base,
                parse_duration(s).and_then(|d| in_range(d, 100 * US, 10 * SEC)),
            ),
            Key::ReconnectCap => put(
                &mut self.reconnect_cap,
                parse_duration(s).and_then(|d| in_range(d, MS, 60 * SEC)),
            ),
            Key::PayloadCrc => put(&mut self.payload_crc, PayloadCrc::parse(s)),
            Key::Transports => put(&mut self.transports, Transports::parse(s)),
            Key::VerbsAtomics => put(&mut self.verbs_atomics, VerbsAtomics::parse(s)),
            Key::VerbsRouted => put(&mut self.verbs_routed, parse_on_off(s)),
        }
    }

    /// Checks the values against each other:
    ///
    /// * `heartbeat` must be shorter than `op_timeout` (a peer must be able to
    ///   miss heartbeats before an operation on it gives up);
    /// * `give_up` must not be shorter than `heartbeat` (a peer is declared
    ///   dead only after its links could be seen down);
    /// * `reconnect_cap` must not be shorter than `reconnect_base`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Conflict`] naming both keys, their values and sources;
    /// [`ConfigError::Several`] when more than one rule is broken.
    pub fn check(&self) -> Result<(), ConfigError> {
        let mut errors = Vec::new();
        let rules = [
            (
                Key::Heartbeat,
                self.heartbeat >= self.op_timeout,
                "shorter than",
                Key::OpTimeout,
            ),
            (
                Key::GiveUp,
                self.give_up < self.heartbeat,
                "no shorter than",
                Key::Heartbeat,
            ),
            (
                Key::ReconnectCap,
                self.reconnect_cap < self.reconnect_base,
                "no shorter than",
                Key::ReconnectBase,
            ),
        ];
        for (key, broken, relation, other) in rules {
            if broken {
                errors.push(self.conflict(key, relation, other));
            }
        }
        match ConfigError::from_list(errors) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn conflict(&self, key: Key, relation: &'static str, other: Key) -> ConfigError {
        ConfigError::Conflict(Box::new(Conflict {
            key: key.name(),
            value: self.value(key),
            from: self.source(key).clone(),
            relation,
            other: other.name(),
            other_value: self.value(other),
            other_from: self.source(other).clone(),
        }))
    }

    /// Where `key`'s value came from.
    pub fn source(&self, key: Key) -> &Source {
        &self.sources[key.index()]
    }

    /// `key`'s value in text form, as the parser reads it back (`64M`, `busy`,
    /// `200ms`).
    pub fn value(&self, key: Key) -> String {
        match key {
            Key::HeapSize => format_size(self.heap_size),
            Key::Progress => self.progress.name().into(),
            Key::SpinBeforePark => self.spin_before_park.to_string(),
            Key::ShortThreshold => format_size(self.short_threshold.into()),
            Key::LoadWatermark => format!("{}%", self.load_watermark),
            Key::QueueDepth => self.queue_depth.to_string(),
            Key::HugePages => self.huge_pages.name().into(),
            Key::BootstrapTimeout => format_duration(self.bootstrap_timeout),
            Key::OpTimeout => format_duration(self.op_timeout),
            Key::Heartbeat => format_duration(self.heartbeat),
            Key::TraceRecords => self.trace_records.to_string(),
            Key::InlineThreshold => format_size(self.inline_threshold.into()),
            Key::BindTo => self.bind_to.to_string(),
            Key::TcpAddrs => format_addrs(&self.tcp_addrs),
            Key::TcpConnections => self.tcp_connections.to_string(),
            Key::TcpWindow => format_size(self.tcp_window.into()),
            Key::GiveUp => format_duration(self.give_up),
            Key::ReconnectBase => format_duration(self.reconnect_base),
            Key::ReconnectCap => format_duration(self.reconnect_cap),
            Key::PayloadCrc => self.payload_crc.to_string(),
            Key::Transports => self.transports.to_string(),
            Key::VerbsAtomics => self.verbs_atomics.name().into(),
            Key::VerbsRouted => if self.verbs_routed { "on" } else { "off" }.into(),
        }
    }

    /// The template in effect, if any.
    pub fn template(&self) -> Option<Template> {
        self.template.as_ref().map(|(t, _)| *t)
    }

    /// Where the template was named ([`Source::Default`] when none was).
    pub fn template_source(&self) -> &Source {
        self.template.as_ref().map_or(&DEFAULT_SOURCE, |(_, s)| s)
    }

    /// The configuration file read, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Unknown `SWITCHYARD_*` variables seen by [`Config::from_env`] or
    /// [`Config::load_from_vars`].
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// Every setting with its value and source: first `template`, then each
    /// [`Key`] in [`Key::ALL`] order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        let template = Entry {
            key: TEMPLATE_KEY,
            env: ENV_TEMPLATE,
            value: self.template().map_or("none", Template::name).into(),
            source: self.template_source(),
        };
        std::iter::once(template).chain(Key::ALL.into_iter().map(|k| Entry {
            key: k.name(),
            env: k.env(),
            value: self.value(k),
            source: self.source(k),
        }))
    }

    /// The routing knobs as the core's [`PolicyConfig`] (the rest of it at its
    /// defaults).
    pub fn policy(&self) -> PolicyConfig {
        PolicyConfig {
            short_threshold: self.short_threshold,
            load_watermark: LoadWatermark {
                per_mille: u16::from(self.load_watermark) * 10,
            },
            ..PolicyConfig::default()
        }
    }
}

// ---------------------------------------------------------------------------
// The file

fn read_file(path: &Path) -> Result<String, ConfigError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|error| ConfigError::ReadFile {
            path: path.into(),
            error,
        })?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::FileTooLarge {
            path: path.into(),
            max: MAX_FILE_BYTES,
        });
    }
    String::from_utf8(bytes).map_err(|_| ConfigError::NotUtf8 { path: path.into() })
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> u32 {
    let end = offset.min(text.len());
    let nl = text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    u32::try_from(nl + 1).unwrap_or(u32::MAX)
}

/// An array of strings as the comma-separated text form of a list: `[]` is
/// `auto`; an item that is not a string, is empty or holds a comma is an error.
fn string_list(items: &[toml::Spanned<toml::de::DeValue<'_>>]) -> Result<String, ()> {
    if items.is_empty() {
        return Ok("auto".into());
    }
    let mut parts = Vec::with_capacity(items.len());
    for item in items {
        match item.get_ref() {
            toml::de::DeValue::String(s) if !s.trim().is_empty() && !s.contains(',') => {
                parts.push(s.to_string());
            }
            _ => return Err(()),
        }
    }
    Ok(parts.join(","))
}

/// Reads the top-level keys of `text`. A syntax error is returned at once;
/// unknown keys go to `errors` and the rest is still read.
fn parse_file(
    text: &str,
    path: &Path,
    errors: &mut Vec<ConfigError>,
) -> Result<FileSettings, ConfigError> {
    use toml::de::{DeTable, DeValue};

    let doc = DeTable::parse(text).map_err(|e| ConfigError::Toml {
        path: path.into(),
        line: e.span().map(|s| line_of(text, s.start)),
        message: e.message().trim_end().replace('\n', " "),
    })?;
    let mut entries: Vec<_> = doc.get_ref().iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    let mut out = FileSettings::default();
    for (k, v) in entries {
        let name: &str = k.get_ref().as_ref();
        let line = line_of(text, k.span().start);
        let from = Source::File {
            path: path.into(),
            line,
        };
        let raw = match v.get_ref() {
            DeValue::String(s) => Ok(s.to_string()),
            DeValue::Integer(i) if i.radix() == 10 => Ok(i.as_str().to_string()),
            DeValue::Integer(i) => u64::from_str_radix(i.as_str(), i.radix())
                .map(|n| n.to_string())
                .map_err(|_| ()),
            DeValue::Float(f) => Ok(f.as_str().to_string()),
            DeValue::Boolean(b) => Ok(b.to_string()),
            DeValue::Array(items) if Key::from_name(name) == Some(Key::TcpAddrs) => {
                string_list(items)
            }
            _ => Err(()),
        };
        let written = text
            .get(v.span())
            .map_or_else(|| v.get_ref().type_str().to_string(), str::to_string);
        let fv = FileValue { raw, written, from };
        if name == TEMPLATE_KEY {
            out.template = Some(fv);
        } else if let Some(key) = Key::from_name(name) {
            out.values.push((key, fv));
        } else {
            let candidates = std::iter::once((TEMPLATE_KEY, TEMPLATE_KEY))
                .chain(Key::ALL.into_iter().map(|k| (k.name(), k.name())));
            errors.push(ConfigError::UnknownKey {
                path: path.into(),
                line,
                key: name.into(),
                suggestion: closest(name, candidates),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl FnMut(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn size_table() {
        let ok: &[(&str, u64)] = &[
            ("0", 0),
            ("65536", 65536),
            ("64K", 64 << 10),
            ("64k", 64 << 10),
            ("64KB", 64 << 10),
            ("64KiB", 64 << 10),
            ("64kib", 64 << 10),
            ("64M", 64 << 20),
            ("64 MiB", 64 << 20),
            (" 64mb ", 64 << 20),
            ("1G", 1 << 30),
            ("1GiB", 1 << 30),
            ("1T", 1 << 40),
            ("1.5G", 3 << 29),
            ("0.5K", 512),
            ("64.0", 64),
            ("100B", 100),
            ("16777215T", 16777215 << 40),
        ];
        for &(s, v) in ok {
            assert_eq!(parse_size(s), Some(v), "{s:?}");
        }
        let bad = [
            "",
            "abc",
            "K",
            "-1",
            "+1",
            "1.1K",
            "1.5",
            "1.",
            ".5K",
            "1e3",
            "64Q",
            "64 K B",
            "1..5K",
            "0x10",
            "16777216T",
            "99999999999999999999999",
            "1.0000000001K",
            "64_000",
        ];
        for s in bad {
            assert_eq!(parse_size(s), None, "{s:?}");
        }
        for v in [0, 1, 1000, 1024, 1536, 64 << 20, 3 << 29, 1 << 40, u64::MAX] {
            assert_eq!(parse_size(&format_size(v)), Some(v), "{v}");
        }
        assert_eq!(format_size(64 << 20), "64M");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(1536 << 10), "1536K");
    }

    #[test]
    fn duration_table() {
        let ok: &[(&str, Duration)] = &[
            ("500ms", Duration::from_millis(500)),
            ("5s", Duration::from_secs(5)),
            ("2m", Duration::from_secs(120)),
            ("2min", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            ("10 MS", Duration::from_millis(10)),
        ];
        for &(s, d) in ok {
            assert_eq!(parse_duration(s), Some(d), "{s:?}");
            assert_eq!(parse_duration(&format_duration(d)), Some(d), "{s:?}");
        }
        for s in [
            "",
            "5",
            "5 seconds",
            "ms",
            "-5s",
            "1.5ns",
            "5d",
            "99999999999h",
        ] {
            assert_eq!(parse_duration(s), None, "{s:?}");
        }
        assert_eq!(format_duration(Duration::from_millis(200)), "200ms");
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
    }

    #[test]
    fn defaults_and_their_text_forms_agree() {
        let d = Config::default();
        let mut again = Config::default();
        for key in Key::ALL {
            assert_eq!(d.source(key), &Source::Default);
            again.set(key, &d.value(key), Source::Default).unwrap();
        }
        assert_eq!(d, again);
        d.check().unwrap();
        assert_eq!(d.heap_size, 64 << 20);
        assert_eq!(d.short_threshold, 8192);
        assert_eq!(d.policy().short_threshold, 8192);
        assert_eq!(d.policy().load_watermark.per_mille, 750);
        assert_eq!(Key::ALL.len(), Key::COUNT);
        for (i, k) in Key::ALL.into_iter().enumerate() {
            assert_eq!(k.index(), i);
            assert_eq!(k.env(), format!("SWITCHYARD_{}", k.name().to_uppercase()));
            assert_eq!(Key::from_name(k.name()), Some(k));
            assert_eq!(Key::from_env(k.env()), Some(k));
        }
    }

    #[test]
    fn templates_are_consistent() {
        for t in Template::ALL {
            assert_eq!(Template::from_name(&t.name().to_uppercase()), Some(t));
            let mut seen = Vec::new();
            let mut cfg = Config::default();
            for &(key, value) in t.settings() {
                assert!(!seen.contains(&key), "{t}: {key} twice");
                seen.push(key);
                cfg.set(key, value, Source::Template(t.name()))
                    .unwrap_or_else(|e| panic!("{e}"));
                // The text form is the canonical one.
                assert_eq!(cfg.value(key), value, "{t}: {key}");
            }
            cfg.check().unwrap_or_else(|e| panic!("{t}: {e}"));
            assert!(cfg.queue_depth.is_power_of_two());
            let loaded = Config::load_from(lookup(&[(ENV_TEMPLATE, t.name())])).unwrap();
            assert_eq!(loaded.template(), Some(t));
            for key in Key::ALL {
                assert_eq!(loaded.value(key), cfg.value(key));
            }
        }
        let trading = Config::load_from(lookup(&[(ENV_TEMPLATE, "trading")])).unwrap();
        assert_eq!(trading.progress, Progress::Busy);
        assert_eq!(trading.bind_to, BindTo::Core);
        assert_eq!(trading.queue_depth, 128);
        assert_eq!(trading.inline_threshold, 256);
        assert_eq!(trading.huge_pages, HugePages::On);
        assert!(trading.short_threshold < Config::default().short_threshold);
        let storage = Config::load_from(lookup(&[(ENV_TEMPLATE, "storage")])).unwrap();
        assert_eq!(storage.queue_depth, 1024);
        assert_eq!(storage.inline_threshold, 0);
        assert_eq!(storage.progress, Progress::Adaptive);
        assert!(storage.heap_size >= 1 << 30);
        let ai = Config::load_from(lookup(&[(ENV_TEMPLATE, "ai")])).unwrap();
        assert_eq!(ai.queue_depth, 1024);
        assert!(ai.heap_size >= 1 << 30);
        assert_eq!(ai.progress, Progress::Adaptive);
        assert_eq!(trading.tcp_connections, 1);
        assert_eq!(trading.tcp_window, 1 << 20);
        assert_eq!(trading.payload_crc, PayloadCrc::Always);
        assert_eq!(storage.tcp_connections, 4);
        assert_eq!(storage.tcp_window, 16 << 20);
        assert_eq!(storage.payload_crc, PayloadCrc::Always);
        assert_eq!(
            storage.source(Key::PayloadCrc),
            &Source::Template("storage")
        );
        assert_eq!(ai.tcp_connections, 4);
        assert_eq!(ai.tcp_window, 16 << 20);
        assert_eq!(ai.payload_crc, PayloadCrc::Sample { every: 16 });
        for t in [&trading, &storage, &ai] {
            assert!(t.tcp_addrs.is_empty());
            assert_eq!(t.source(Key::TcpAddrs), &Source::Default);
            assert!(t.give_up >= t.heartbeat);
        }
    }

    #[test]
    fn every_key_names_key_value_and_expectation() {
        let bad: &[(Key, &[&str])] = &[
            (Key::HeapSize, &["abc", "2K", "2T", "-1", "1.1K"]),
            (Key::Progress, &["spin", "1"]),
            (Key::SpinBeforePark, &["-1", "lots", "2000000000", "1K"]),
            (Key::ShortThreshold, &["big", "2G", "-8K"]),
            (Key::LoadWatermark, &["0", "101", "75%%", "half"]),
            (Key::QueueDepth, &["100", "8", "131072", "256K"]),
            (Key::HugePages, &["maybe", "1"]),
            (Key::BootstrapTimeout, &["30", "0s", "2d", "25h"]),
            (Key::OpTimeout, &["10", "0ms", "forever"]),
            (Key::Heartbeat, &["200", "61s", "0s"]),
            (Key::TraceRecords, &["1000", "8", "2097152"]),
            (Key::InlineThreshold, &["5K", "on", "lots"]),
            (
                Key::BindTo,
                &[
                    "socket",
                    "yes",
                    "cpu:",
                    "cpu:-1",
                    "cpu:65536",
                    "cpu:1x",
                    "cpu:+3",
                ],
            ),
            (
                Key::TcpAddrs,
                &[
                    "10.0.0.256",
                    "host1",
                    "10.0.0.1,",
                    ",10.0.0.1",
                    "10.0.0.1;10.0.0.2",
                    "10.0.0.1,10.0.0.1",
                    "fd00::1,FD00:0::1",
                    "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5",
                    "10.0.0.1:5000",
                    "[::1]",
                    "fe80::1%eth0",
                ],
            ),
            (Key::TcpConnections, &["0", "9", "256", "-1", "two", "1.5"]),
            (Key::TcpWindow, &["32K", "65535", "2G", "4Q", "-4M"]),
            (Key::GiveUp, &["5", "9ms", "25h", "0s", "soon"]),
            (Key::ReconnectBase, &["5", "99us", "11s", "0ms"]),
            (Key::ReconnectCap, &["500", "999us", "61s", "2m"]),
            (
                Key::PayloadCrc,
                &[
                    "sample:0",
                    "sample:x",
                    "sample:",
                    "sample",
                    "sample:1000001",
                    "sample:-1",
                    "never",
                    "every:16",
                    "16",
                ],
            ),
            (Key::Transports, &["udp", "tcp,tcp", "shm,,tcp", "none"]),
            (Key::VerbsAtomics, &["global", "hca", "1", "nic,cpu", "on"]),
            (Key::VerbsRouted, &["auto", "1", "yes", "routed"]),
        ];
        assert_eq!(bad.len(), Key::COUNT);
        for &(key, values) in bad {
            for &v in values {
                let err = Config::load_from(lookup(&[(key.env(), v)])).unwrap_err();
                let text = err.to_string();
                assert_eq!(
                    text,
                    format!("{}={v}: expected {}", key.env(), key.expected()),
                    "{key} {v}"
                );
                assert!(matches!(err, ConfigError::BadValue { key: k, .. } if k == key.name()));
            }
        }
    }

    #[test]
    fn precedence_per_key_default_template_env() {
        let cfg = Config::load_from(lookup(&[
            (ENV_TEMPLATE, "trading"),
            ("SWITCHYARD_QUEUE_DEPTH", "4096"),
            ("SWITCHYARD_TRACE_RECORDS", "64"),
        ]))
        .unwrap();
        assert_eq!(cfg.queue_depth, 4096);
        assert_eq!(
            cfg.source(Key::QueueDepth),
            &Source::Env("SWITCHYARD_QUEUE_DEPTH")
        );
        assert_eq!(cfg.trace_records, 64);
        assert_eq!(cfg.progress, Progress::Busy);
        assert_eq!(cfg.source(Key::Progress), &Source::Template("trading"));
        assert_eq!(cfg.source(Key::SpinBeforePark), &Source::Default);
        assert_eq!(cfg.template_source(), &Source::Env(ENV_TEMPLATE));
    }

    #[test]
    fn empty_env_values_are_unset() {
        let cfg = Config::load_from(lookup(&[
            ("SWITCHYARD_HEAP_SIZE", ""),
            (ENV_TEMPLATE, "  "),
            (ENV_CONFIG, ""),
        ]))
        .unwrap();
        assert_eq!(cfg, Config::default());
    }

    #[test]
    fn bad_template_and_several_errors() {
        let err = Config::load_from(lookup(&[(ENV_TEMPLATE, "hft")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "SWITCHYARD_TEMPLATE=hft: expected a template name: trading, storage or ai"
        );
        let err = Config::load_from(lookup(&[
            ("SWITCHYARD_HEAP_SIZE", "abc"),
            ("SWITCHYARD_PROGRESS", "spin"),
        ]))
        .unwrap_err();
        assert_eq!(err.errors().len(), 2);
        let text = err.to_string();
        assert!(
            text.starts_with("2 configuration errors:\n  SWITCHYARD_HEAP_SIZE=abc"),
            "{text}"
        );
        assert!(text.contains("\n  SWITCHYARD_PROGRESS=spin: expected busy, adaptive or caller"));
    }

    #[test]
    fn bind_to_takes_core_none_or_a_cpu() {
        let mut cfg = Config::default();
        for (v, want, back) in [
            ("core", BindTo::Core, "core"),
            ("NONE", BindTo::None, "none"),
            ("cpu:0", BindTo::Cpu(0), "cpu:0"),
            (" CPU:17 ", BindTo::Cpu(17), "cpu:17"),
            ("cpu:65535", BindTo::Cpu(65535), "cpu:65535"),
        ] {
            cfg.set(Key::BindTo, v, Source::Default).unwrap();
            assert_eq!(cfg.bind_to, want, "{v}");
            assert_eq!(cfg.value(Key::BindTo), back);
        }
    }

    #[test]
    fn tcp_keys_parse_and_read_back() {
        let d = Config::default();
        assert!(d.tcp_addrs.is_empty());
        assert_eq!(d.value(Key::TcpAddrs), "auto");
        assert_eq!(d.tcp_connections, 1);
        assert_eq!(d.tcp_window, 4 << 20);
        assert_eq!(d.value(Key::TcpWindow), "4M");
        assert_eq!(d.give_up, Duration::from_secs(5));
        assert_eq!(d.reconnect_base, Duration::from_millis(5));
        assert_eq!(d.reconnect_cap, Duration::from_millis(500));
        assert_eq!(d.payload_crc, PayloadCrc::Always);

        let mut cfg = Config::default();
        let env = |k: Key| Source::Env(k.env());
        cfg.set(Key::TcpAddrs, " 10.0.0.1 , fd00::1 ", env(Key::TcpAddrs))
            .unwrap();
        assert_eq!(
            cfg.tcp_addrs,
            [
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "fd00::1".parse().unwrap()
            ]
        );
        assert_eq!(cfg.value(Key::TcpAddrs), "10.0.0.1,fd00::1");
        cfg.set(
            Key::TcpAddrs,
            "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4",
            env(Key::TcpAddrs),
        )
        .unwrap();
        assert_eq!(cfg.tcp_addrs.len(), MAX_TCP_ADDRS);
        cfg.set(Key::TcpAddrs, "AUTO", env(Key::TcpAddrs)).unwrap();
        assert!(cfg.tcp_addrs.is_empty());
        for (v, want) in [("1", 1), ("8", 8), (" 4 ", 4)] {
            cfg.set(Key::TcpConnections, v, Source::Default).unwrap();
            assert_eq!(cfg.tcp_connections, want);
        }
        for (v, want) in [("64K", 64 << 10), ("1G", 1 << 30), ("65536", 65536)] {
            cfg.set(Key::TcpWindow, v, Source::Default).unwrap();
            assert_eq!(cfg.tcp_window, want);
        }
        for (key, lo, hi) in [
            (Key::GiveUp, "10ms", "24h"),
            (Key::ReconnectBase, "100us", "10s"),
            (Key::ReconnectCap, "1ms", "60s"),
        ] {
            for v in [lo, hi] {
                cfg.set(key, v, Source::Default).unwrap();
                assert_eq!(parse_duration(&cfg.value(key)), parse_duration(v));
            }
        }
        for (v, want) in [
            ("always", PayloadCrc::Always),
            ("ALWAYS", PayloadCrc::Always),
            ("sample:16", PayloadCrc::Sample { every: 16 }),
            ("Sample: 1", PayloadCrc::Sample { every: 1 }),
            ("sample:1000000", PayloadCrc::Sample { every: 1_000_000 }),
        ] {
            cfg.set(Key::PayloadCrc, v, Source::Default).unwrap();
            assert_eq!(cfg.payload_crc, want, "{v}");
            // Display round-trips.
            assert_eq!(PayloadCrc::parse(&want.to_string()), Some(want));
        }
        assert_eq!(PayloadCrc::Always.every(), 1);
        assert_eq!(PayloadCrc::Sample { every: 16 }.to_string(), "sample:16");
        assert_eq!(PayloadCrc::Sample { every: 16 }.every(), 16);
    }

    #[test]
    fn tcp_conflicts_name_both_keys() {
        let err = Config::load_from(lookup(&[("SWITCHYARD_GIVE_UP", "100ms")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "give_up = 100ms (env SWITCHYARD_GIVE_UP) must be no shorter than heartbeat = 200ms (default)"
        );
        // Equal is fine.
        let cfg = Config::load_from(lookup(&[
            ("SWITCHYARD_GIVE_UP", "1s"),
            ("SWITCHYARD_HEARTBEAT", "1000ms"),
        ]))
        .unwrap();
        assert_eq!(cfg.give_up, cfg.heartbeat);
        let err = Config::load_from(lookup(&[
            ("SWITCHYARD_RECONNECT_BASE", "1s"),
            ("SWITCHYARD_RECONNECT_CAP", "100ms"),
        ]))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "reconnect_cap = 100ms (env SWITCHYARD_RECONNECT_CAP) must be no shorter than reconnect_base = 1s (env SWITCHYARD_RECONNECT_BASE)"
        );
        // Both broken rules are reported.
        let err = Config::load_from(lookup(&[
            ("SWITCHYARD_GIVE_UP", "10ms"),
            ("SWITCHYARD_RECONNECT_BASE", "2s"),
        ]))
        .unwrap_err();
        assert_eq!(err.errors().len(), 2, "{err}");
        assert!(matches!(err.errors()[0], ConfigError::Conflict(ref c) if c.key == "give_up"));
        assert!(
            matches!(err.errors()[1], ConfigError::Conflict(ref c) if c.key == "reconnect_cap")
        );
    }

    #[test]
    fn reserved_variables_are_not_keys_and_not_warned() {
        for var in RESERVED_ENV {
            assert_eq!(Key::from_env(var), None, "{var} is a key");
        }
        assert!(!RESERVED_ENV.contains(&"SWITCHYARD_TCP_ADDRS"));
        let w = check_env_names([
            "SWITCHYARD_NODE_ID",
            "SWITCHYARD_SWITCH_ID",
            "SWITCHYARD_TREE_ID",
            "SWITCHYARD_SIM",
            "SWITCHYARD_TCP_ADDRS",
            "SWITCHYARD_TCP_ADDR",
            "SWITCHYARD_GIVEUP",
        ]);
        let got: Vec<(&str, Option<&str>)> =
            w.iter().map(|w| (w.var.as_str(), w.suggestion)).collect();
        assert_eq!(
            got,
            [
                ("SWITCHYARD_TCP_ADDR", Some("SWITCHYARD_TCP_ADDRS")),
                ("SWITCHYARD_GIVEUP", Some("SWITCHYARD_GIVE_UP")),
            ]
        );
    }

    #[test]
    fn conflict_names_both_keys() {
        let err = Config::load_from(lookup(&[
            ("SWITCHYARD_HEARTBEAT", "20s"),
            ("SWITCHYARD_OP_TIMEOUT", "5s"),
            // (give_up must not be shorter than heartbeat either.)
            ("SWITCHYARD_GIVE_UP", "30s"),
        ]))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "heartbeat = 20s (env SWITCHYARD_HEARTBEAT) must be shorter than op_timeout = 5s (env SWITCHYARD_OP_TIMEOUT)"
        );
    }

    #[test]
    fn odd_values_are_shown_quoted_and_cut() {
        let long = "x".repeat(500);
        let err = Config::load_from(lookup(&[("SWITCHYARD_PROGRESS", &long)])).unwrap_err();
        let text = err.to_string();
        assert!(text.len() < 300, "{text}");
        assert!(text.contains("...: expected"));
        let err = Config::load_from(lookup(&[("SWITCHYARD_PROGRESS", "a\nb")])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("SWITCHYARD_PROGRESS=\"a\\nb\": ")
        );
    }

    #[test]
    fn typo_warnings() {
        let w = check_env_names([
            "SWITCHYARD_HEAPSIZE",
            "SWITCHYARD_HEAP_SIZE",
            "SWITCHYARD_RANK",
            "SWITCHYARD_LOCAL_SIZE",
            "SWITCHYARD_QUEUE_DEPHT",
            "switchyard_progress",
            "SWITCHYARD_WHATEVER",
            "PATH",
            "SWITCHYARD",
            "SWITCHYARD_",
        ]);
        let got: Vec<(&str, Option<&str>)> =
            w.iter().map(|w| (w.var.as_str(), w.suggestion)).collect();
        assert_eq!(
            got,
            [
                ("SWITCHYARD_HEAPSIZE", Some("SWITCHYARD_HEAP_SIZE")),
                ("SWITCHYARD_QUEUE_DEPHT", Some("SWITCHYARD_QUEUE_DEPTH")),
                ("switchyard_progress", Some("SWITCHYARD_PROGRESS")),
                ("SWITCHYARD_WHATEVER", None),
                ("SWITCHYARD_", None),
            ]
        );
        assert_eq!(
            w[0].to_string(),
            "SWITCHYARD_HEAPSIZE is not a switchyard setting (did you mean SWITCHYARD_HEAP_SIZE?); it is ignored"
        );
        let cfg = Config::load_from_vars([
            ("SWITCHYARD_HEAPSIZE", "1G"),
            ("SWITCHYARD_RANK", "3"),
            ("HOME", "/root"),
        ])
        .unwrap();
        assert_eq!(cfg.heap_size, 64 << 20);
        assert_eq!(cfg.warnings().len(), 1);
    }

    #[test]
    fn file_parsing() {
        let path = Path::new("/etc/sy.toml");
        let mut errors = Vec::new();
        let text = "# comment\ntemplate = \"ai\"\nheap_size = 1073741824\nqueue_depth = 0x200\nhuge_pages = true\nheapsize = 1\n[verbs]\nx = 1\n";
        let f = parse_file(text, path, &mut errors).unwrap();
        assert_eq!(f.template.as_ref().unwrap().raw.as_deref(), Ok("ai"));
        let got: Vec<(Key, &str, u32)> = f
            .values
            .iter()
            .map(|(k, v)| {
                let Source::File { line, .. } = v.from else {
                    unreachable!()
                };
                (*k, v.raw.as_deref().unwrap(), line)
            })
            .collect();
        assert_eq!(
            got,
            [
                (Key::HeapSize, "1073741824", 3),
                (Key::QueueDepth, "512", 4),
                (Key::HugePages, "true", 5)
            ]
        );
        let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(
            msgs[0].starts_with("/etc/sy.toml:6: unknown key 'heapsize' (did you mean 'heap_size'?); the keys are template, heap_size, progress"),
            "{msgs:?}"
        );
        assert!(
            msgs[1].starts_with("/etc/sy.toml:7: unknown key 'verbs'"),
            "{msgs:?}"
        );

        let err = parse_file("a = 1\nb = = 2\n", path, &mut Vec::new())
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(
            text.starts_with("/etc/sy.toml:2: not valid TOML: "),
            "{text}"
        );
        let mut errors = Vec::new();
        let f = parse_file("heap_size = [1]\n", path, &mut errors).unwrap();
        assert!(errors.is_empty());
        assert_eq!(f.values[0].1.raw, Err(()));
        assert_eq!(f.values[0].1.written, "[1]");

        // Arrays of strings only for tcp_addrs.
        let text = "tcp_addrs = [\"10.0.0.1\", \"fd00::1\"]\n";
        let f = parse_file(text, path, &mut errors).unwrap();
        assert_eq!(f.values[0].1.raw.as_deref(), Ok("10.0.0.1,fd00::1"));
        let f = parse_file("tcp_addrs = []\n", path, &mut errors).unwrap();
        assert_eq!(f.values[0].1.raw.as_deref(), Ok("auto"));
        for bad in [
            "tcp_addrs = [1]\n",
            "tcp_addrs = [\"10.0.0.1,10.0.0.2\"]\n",
            "tcp_addrs = [\"\"]\n",
            "tcp_addrs = [[\"10.0.0.1\"]]\n",
            "tcp_connections = [4]\n",
        ] {
            let f = parse_file(bad, path, &mut errors).unwrap();
            assert_eq!(f.values[0].1.raw, Err(()), "{bad}");
        }
        assert!(errors.is_empty());
    }

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance(b"", b"abc"), 3);
        assert_eq!(edit_distance(b"abc", b"abc"), 0);
        assert_eq!(edit_distance(b"abc", b"acb"), 1);
        assert_eq!(edit_distance(b"kitten", b"sitting"), 3);
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in any::<String>()) {
            let _ = parse_size(&s);
            let _ = parse_duration(&s);
            let _ = Template::from_name(&s);
            let mut cfg = Config::default();
            for key in Key::ALL {
                let before = cfg.clone();
                if cfg.set(key, &s, Source::Env(key.env())).is_err() {
                    prop_assert_eq!(&cfg, &before);
                }
            }
            let _ = cfg.check();
            let _ = check_env_names([s.as_str(), &format!("SWITCHYARD_{s}")]);
            let _ = parse_file(&s, Path::new("f.toml"), &mut Vec::new());
        }

        #[test]
        fn number_like_strings_never_panic(s in "[0-9. ]{0,30}[kKmMgGtTiIbBsSunh]{0,3}") {
            let _ = parse_size(&s);
            let _ = parse_duration(&s);
            let mut cfg = Config::default();
            for key in Key::ALL {
                let _ = cfg.set(key, &s, Source::Default);
            }
        }

        #[test]
        fn toml_like_files_never_panic(s in "([a-z_]{1,12} = (\"[0-9a-zA-Z.]{0,6}\"|[0-9]{1,12}|true|\\[1\\]|\\{\\})\n){0,6}") {
            let _ = parse_file(&s, Path::new("f.toml"), &mut Vec::new());
        }

        #[test]
        fn sizes_round_trip(v in any::<u64>()) {
            prop_assert_eq!(parse_size(&format_size(v)), Some(v));
        }

        #[test]
        fn durations_round_trip(ns in any::<u64>()) {
            let d = Duration::from_nanos(ns);
            prop_assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }
    }
}
