//! The key table: every key's name, environment variable and what it takes;
//! the templates and the keys they set; and each key's parser and range
//! ([`Config::set`](super::Config::set) goes through it).

use std::{fmt, time::Duration};

use super::{
    Config,
    parse::{
        DAY, GIB, KIB, MS, SEC, TIB, US, in_range, parse_addrs, parse_count, parse_duration,
        parse_on_off, parse_size, pow2_in,
    },
    values::{
        CardsMode, HugePages, PayloadCrc, Progress, ProgressCpu, TraceMode, Transports,
        VerbsAtomics,
    },
};

/// Fewest records `trace_records` takes.
const TRACE_RECORDS_MIN: u64 = 16;
/// Most records `trace_records` takes (2^20).
const TRACE_RECORDS_MAX: u64 = 1 << 20;

/// Most peers `verbs_lazy_peers` takes (the driver's own bound).
const VERBS_LAZY_PEERS_MAX: u64 = 65_536;

/// What the template key takes.
pub(super) const TEMPLATE_EXPECTED: &str = "a template name: trading, storage or ai";

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
    /// `trace_records`: records the route trace ring of each context keeps
    /// (the newest), a power of two from 16 to 1048576.
    TraceRecords,
    /// `trace`: which routing decisions the route trace ring records (`off`,
    /// `sample:N`, `all`).
    Trace,
    /// `stats`: whether each PE keeps the stats segment (counters and
    /// latency histograms readable from outside the job).
    Stats,
    /// `inline_threshold`: largest put sent inline in the work request.
    InlineThreshold,
    /// `progress_cpu`: where the progress thread runs (`auto`: a CPU
    /// outside the application's; a CPU number; `pe`: the PE's own; `none`:
    /// not pinned). Formerly `bind_to`.
    ProgressCpu,
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
    /// `verbs_device`: the RDMA device to use (`auto`: the first usable one).
    VerbsDevice,
    /// `verbs_gid_index`: the GID table index to use (`auto`: an IPv4-mapped
    /// RoCE v2 GID, else the port's first).
    VerbsGidIndex,
    /// `cards`: which peers' cards a PE gets at the bootstrap (`all`, or
    /// `lazy`: localities to all, cards fetched when needed).
    Cards,
    /// `verbs_lazy_peers`: with `cards = lazy`, how many off-node peers the
    /// verbs driver may pair with (their queue pairs created at first
    /// use); past it a peer stays on TCP.
    VerbsLazyPeers,
    /// `verbs_context_sets`: whether each context opens verbs queue pairs
    /// of its own toward the peers it uses (per-context QP sets).
    VerbsContextSets,
}

impl Key {
    /// Number of keys.
    pub const COUNT: usize = 30;

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
        Key::Trace,
        Key::Stats,
        Key::InlineThreshold,
        Key::ProgressCpu,
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
        Key::VerbsDevice,
        Key::VerbsGidIndex,
        Key::Cards,
        Key::VerbsLazyPeers,
        Key::VerbsContextSets,
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
            Key::Trace => "trace",
            Key::Stats => "stats",
            Key::InlineThreshold => "inline_threshold",
            Key::ProgressCpu => "progress_cpu",
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
            Key::VerbsDevice => "verbs_device",
            Key::VerbsGidIndex => "verbs_gid_index",
            Key::Cards => "cards",
            Key::VerbsLazyPeers => "verbs_lazy_peers",
            Key::VerbsContextSets => "verbs_context_sets",
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
            Key::Trace => "SWITCHYARD_TRACE",
            Key::Stats => "SWITCHYARD_STATS",
            Key::InlineThreshold => "SWITCHYARD_INLINE_THRESHOLD",
            Key::ProgressCpu => "SWITCHYARD_PROGRESS_CPU",
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
            Key::VerbsDevice => "SWITCHYARD_VERBS_DEVICE",
            Key::VerbsGidIndex => "SWITCHYARD_VERBS_GID_INDEX",
            Key::Cards => "SWITCHYARD_CARDS",
            Key::VerbsLazyPeers => "SWITCHYARD_VERBS_LAZY_PEERS",
            Key::VerbsContextSets => "SWITCHYARD_VERBS_CONTEXT_SETS",
        }
    }

    /// What the key takes, as error messages say it ("expected ...").
    pub const fn expected(self) -> &'static str {
        match self {
            Key::HeapSize => "a size such as 65536, 64M or 1G, from 4K to 1T",
            Key::Progress => "busy, adaptive, caller or dedicated",
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
            Key::Trace => "off, all or sample:N with N from 1 to 1000000, such as sample:64",
            Key::Stats => "on or off",
            Key::InlineThreshold => {
                "a size such as 0, 64 or 256 (0 or off: no inlining), at most 4K"
            }
            Key::ProgressCpu => {
                "auto, a CPU number from 0 to 65535, pe (the PE's own CPU) or none (not pinned)"
            }
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
            Key::VerbsRouted | Key::VerbsContextSets => "on or off",
            Key::VerbsDevice => {
                "auto or an RDMA device name such as mlx5_0 or rxe0 (letters, digits, '_', '-', '.'; at most 63 characters)"
            }
            Key::VerbsGidIndex => "auto or a GID table index from 0 to 255",
            Key::Cards => "all or lazy",
            Key::VerbsLazyPeers => "a whole number of peers from 1 to 65536, such as 32",
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

    pub(super) const fn index(self) -> usize {
        self as usize
    }
}

/// A renamed key whose old name is still read, with a warning: the old
/// name in the file, its environment variable, what its values are in the
/// new key's terms, and what it takes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deprecated {
    /// The old name in the file.
    pub(super) name: &'static str,
    /// The old environment variable.
    pub(super) env: &'static str,
    /// The key it now sets.
    pub(super) key: Key,
    /// An old value in the new key's text form; `None` when bad.
    pub(super) translate: fn(&str) -> Option<String>,
    /// What the old name takes.
    pub(super) expected: &'static str,
}

/// The renamed keys: `bind_to` (which pinned the progress thread, not the
/// PE) is `progress_cpu`, its `core` being `pe` and `cpu:N` being `N`.
pub(super) const DEPRECATED: [Deprecated; 1] = [Deprecated {
    name: "bind_to",
    env: "SWITCHYARD_BIND_TO",
    key: Key::ProgressCpu,
    translate: |s| ProgressCpu::from_bind_to(s).map(|v| v.to_string()),
    expected: "core, none, or cpu:N for CPU N (0 to 65535)",
}];

impl Deprecated {
    /// The renamed key called `name` in the file.
    pub(super) fn from_name(name: &str) -> Option<Deprecated> {
        DEPRECATED.into_iter().find(|d| d.name == name)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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
    (Key::ProgressCpu, "auto"),
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
// Each key's parser and range

impl Config {
    /// Parses `raw` for `key` into its field; false (and no change) when bad.
    pub(super) fn parse_into(&mut self, key: Key, raw: &str) -> bool {
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
                parse_count(s).and_then(|v| pow2_in(v, TRACE_RECORDS_MIN, TRACE_RECORDS_MAX)),
            ),
            Key::Trace => put(&mut self.trace, TraceMode::parse(s)),
            Key::Stats => put(&mut self.stats, parse_on_off(s)),
            Key::InlineThreshold => {
                let v = if s.eq_ignore_ascii_case("off") {
                    Some(0)
                } else {
                    size_u32(4 * KIB)
                };
                put(&mut self.inline_threshold, v)
            }
            Key::ProgressCpu => put(&mut self.progress_cpu, ProgressCpu::parse(s)),
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
            Key::Cards => put(&mut self.cards, CardsMode::parse(s)),
            Key::VerbsLazyPeers => put(
                &mut self.verbs_lazy_peers,
                parse_count(s)
                    .and_then(|v| in_range(v, 1, VERBS_LAZY_PEERS_MAX))
                    .and_then(|v| u32::try_from(v).ok()),
            ),
            Key::VerbsRouted => put(&mut self.verbs_routed, parse_on_off(s)),
            Key::VerbsContextSets => put(&mut self.verbs_context_sets, parse_on_off(s)),
            Key::VerbsDevice => put(&mut self.verbs_device, parse_device(s)),
            Key::VerbsGidIndex => put(
                &mut self.verbs_gid_index,
                if s.eq_ignore_ascii_case("auto") {
                    Some(None)
                } else {
                    parse_count(s).and_then(|v| u8::try_from(v).ok()).map(Some)
                },
            ),
        }
    }
}

/// An RDMA device name as `ibv_get_device_name` gives them (`mlx5_0`,
/// `rxe0`, `bnxt_re1`), or `auto` (`None`). Checked here so a typo is an
/// error naming the key, not a device that silently never matches.
fn parse_device(s: &str) -> Option<Option<String>> {
    if s.eq_ignore_ascii_case("auto") {
        return Some(None);
    }
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    ok.then(|| Some(s.to_string()))
}
