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
//! | `progress` | [`Progress`] | `adaptive` | `busy`, `adaptive`, `caller`, `dedicated` |
//! | `spin_before_park` | count | `2000` | 0 to 1000000000 |
//! | `short_threshold` | size | `8K` | 0 to 1G |
//! | `load_watermark` | percent | `75` | 1 to 100, `%` optional |
//! | `queue_depth` | count | `256` | a power of two, 16 to 65536 |
//! | `huge_pages` | [`HugePages`] | `auto` | `auto`, `on`, `off` (`true`/`false` too) |
//! | `bootstrap_timeout` | duration | `30s` | 1ms to 24h |
//! | `op_timeout` | duration | `10s` | 1ms to 24h, longer than `heartbeat` |
//! | `heartbeat` | duration | `200ms` | 1ms to 60s (the dead-link window, below) |
//! | `trace_records` | count | `4096` | a power of two, 16 to 1048576 |
//! | `trace` | [`TraceMode`] | `sample:64` | `off`, `all`, `sample:N` with N from 1 to 1000000 |
//! | `stats` | on/off | `on` | `on`, `off` (`true`/`false` too) |
//! | `inline_threshold` | size | `256` | 0 to 4K; `off` is 0 (no inlining) |
//! | `progress_cpu` | [`ProgressCpu`] | `auto` | `auto`, a CPU number `N`, `pe` (the PE's own CPU), `none` |
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
//! | `verbs_device` | device name | `auto` | `auto`, or a device name (`mlx5_0`, `rxe0`) |
//! | `verbs_gid_index` | index | `auto` | `auto`, or 0 to 255 |
//! | `cards` | [`CardsMode`] | `all` | `all`, `lazy` |
//! | `verbs_lazy_peers` | count | `32` | 1 to 65536 (with `cards = lazy`) |
//! | `verbs_context_sets` | on/off | `off` | `on`, `off` (`true`/`false` too) |
//!
//! Enumerated values are case-insensitive.
//!
//! What `progress` means: how the progress engine, the thread that serves
//! the peers (applies their puts, answers their gets, acks, heartbeats)
//! while the application computes, waits for work, and how the
//! application's own waits use the CPU. `adaptive` (the default, right for
//! small machines): the thread parks on the sockets between bursts, and
//! waits spin, yield, then park. `busy`: the thread spins, looking every
//! 20 µs, and waits spin. `caller`: no thread; progress happens only inside
//! the application's calls. `dedicated`: one thread per PE (per process,
//! under the launcher) pinned to its own CPU (`progress_cpu`), polling every
//! driver (the TCP sockets, the verbs receive queue) without pause or sleep
//! for all the PE's contexts; waits spin. It burns that CPU: give it one
//! the application does not use.
//!
//! What `progress_cpu` means: where that thread runs. `auto` (the default)
//! pins it to a CPU outside the application's (this PE's affinity mask at
//! init and the CPUs the launcher gave the node's PEs, `SWITCHYARD_PE_CPUS`),
//! the local rank choosing among those left; when the machine has none to
//! spare it stays unpinned, and init says so (a context warning with
//! `dedicated` or an explicit `auto`, an `info` event otherwise). `N` pins it
//! to CPU N, which must be one this process may run on (its cgroup's
//! cpuset, else the online CPUs): any other is
//! [`ConfigError::ProgressCpu`] at init. `pe` pins it to the PE's own CPU
//! (`SWITCHYARD_BOUND_CPU`; unpinned when the PE is not pinned), sharing the
//! application's core; `none` leaves it unpinned (it inherits the PE's
//! mask). `switchyard info` shows the plan for the node.
//!
//! Renamed keys, still read with a [`ConfigWarning`]: `bind_to`
//! (`SWITCHYARD_BIND_TO`), which pinned the progress thread and not the PE,
//! is `progress_cpu`: its `core` is `pe`, `cpu:N` is `N`, `none` is `none`.
//! The new name wins when both are given in one source.
//!
//! What `trace_records` means: how many routing decisions the route trace
//! ring of each [`Context`](crate::context::Context) keeps
//! ([`Context::trace`](crate::context::Context::trace)): the newest ones, each
//! new record overwriting the oldest. It must be a power of two from 16 to
//! 1048576 (2^20); any other value (`1000`, `8`, `2097152`) is an error naming
//! the key. The ring is allocated once, when the context is created, 36 bytes
//! a record (144 KiB at the default, 36 MiB at the most), never on the data
//! path.
//!
//! What `trace` means: which decisions reach that ring. `all` records every
//! one; `sample:N` (the default, `sample:64`) one ordinary decision in N and
//! every flagged one (a failure, a downgrade, a load yield, an ordering
//! wait, a CPU atomic) and every failed selection, a routine downgrade
//! (NEAR over TCP's first rail on a PE without RDMA) sampled as an
//! ordinary decision; `off` nothing. A record
//! is eleven plain stores and one read of the trace clock, whose units
//! [`sys::ticks_to_nanos`](crate::sys::ticks_to_nanos) converts to
//! nanoseconds; sampling also spares the clock read of the decisions it
//! skips. Context ids are assigned to every operation in every mode.
//!
//! What `stats` means: whether each PE keeps its stats segment
//! ([`statseg`](crate::statseg)), a small shared-memory object of the job
//! with its counters per (peer, transport) and the latency histograms of
//! the operations the trace samples (a sampled operation also reads the
//! trace clock at its start), for `switchyard stat` and `/metrics`. On, an
//! operation costs a few more plain stores; `off` creates no segment.
//!
//! What `load_watermark` means: the backlog, in percent of its capacity,
//! over which a transport's load bit toward a peer is set, so that the
//! peer's next operations take the next healthy transport of their route
//! (another TCP rail, or TCP instead of verbs) instead of queueing behind
//! it. Per (transport, peer), for the TCP rails and verbs: set when, right
//! after an operation was handed to it, the backlog is over the watermark;
//! cleared once it is no longer over half the watermark (a bit set at 75%
//! stays set down to 37.5%). The backlog of a TCP rail is its frames not yet
//! acknowledged by the peer (or waiting for their reply), measured in frames
//! against 4096 and in bytes against `tcp_window` (over in either is over;
//! both are the peer's, shared by its rails); that of verbs is its work
//! requests toward the peer not yet known complete (atomics not counted),
//! against the send-queue slots of its data queue pairs (one less than the
//! send-queue depth, `queue_depth` when set, per data queue pair).
//! Shared memory has no queue and no load bit. `100` turns the load bits
//! off. See the [context docs](crate::context#load).
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
//! * `verbs_device`: the RDMA device the verbs driver opens (`auto`: the
//!   first with a usable port). A named device that does not exist or has no
//!   usable port makes verbs unavailable, with that reason in
//!   `switchyard info` and `Context::verbs_status`.
//! * `verbs_gid_index`: the GID (port address) table index (`auto`: an
//!   IPv4-mapped RoCE v2 GID when there is one, else index 0). An index the
//!   port does not have makes verbs unavailable, with the reason.
//! * `verbs_lazy_peers`: with `cards = lazy`, the verbs driver creates no
//!   queue pairs at init and pairs with an off-node peer at its first use;
//!   this is how many such peers it may pair with (default
//!   [`DEFAULT_VERBS_LAZY_PEERS`], 32; more than the job's other PEs counts
//!   as that many). Its staging pool, completion queue and peer tables are
//!   sized for that many at init, whatever the job's size: each slot costs
//!   `1 + data_qps` queue pairs and their send-queue records, and the
//!   staging pool is shared among the slots. A peer met after the budget is
//!   spent stays on TCP, with a context warning (`verbs to PE N not paired
//!   (... budget ...): it stays on TCP`), counted in
//!   `VerbsStatus::refused_here`; when the peer asked, it is told, and
//!   keeps this PE on TCP too (`Context::verbs_refusal`). With `cards = all` every peer's
//!   queue pairs are created at init and the key is not used.
//! * `verbs_context_sets`: `on` gives each context (each thread's
//!   `Context` of a PE) verbs queue pairs of its own toward each peer it
//!   uses over verbs, a *QP set*, opened at its first verbs operation to
//!   that peer, within a budget of 64 sets per PE: once the set is up at
//!   both ends and the context's earlier verbs writes to the peer are
//!   known complete (its next `quiet`), its puts, gets and atomics to that
//!   peer go on its set without the PE's entry lock, and its `quiet` polls
//!   its sets. A set refused (the budget spent here or at the peer) leaves
//!   the context on the PE's shared driver for that peer. `off` (the
//!   default): every context posts on the PE's one shared driver, behind
//!   the entry lock.
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
//! | `progress_cpu` | `auto` | | |
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

mod display;
mod env;
mod error;
mod file;
mod keys;
mod parse;
#[cfg(test)]
mod test;
mod values;

use std::{
    collections::BTreeMap,
    net::IpAddr,
    path::{Path, PathBuf},
    time::Duration,
};

pub use display::{Entry, Source};
pub use env::check_env_names;
pub use error::{ConfigError, ConfigWarning, Conflict};
use file::{FileSettings, parse_file, read_file};
use keys::TEMPLATE_EXPECTED;
pub use keys::{Key, Template};
use parse::MIB;
pub use parse::{MAX_TCP_ADDRS, format_duration, format_size, parse_duration, parse_size};
use switchyard_core::route::{LoadWatermark, PolicyConfig};
pub use values::{
    CardsMode, HugePages, PayloadCrc, Progress, ProgressCpu, TraceMode, Transports, VerbsAtomics,
};

/// Prefix of every switchyard environment variable.
pub const ENV_PREFIX: &str = "SWITCHYARD_";

/// Names the TOML configuration file.
pub const ENV_CONFIG: &str = "SWITCHYARD_CONFIG";

/// Names the [`Template`].
pub const ENV_TEMPLATE: &str = "SWITCHYARD_TEMPLATE";

/// `SWITCHYARD_*` variables that are not configuration keys but are known (the
/// launcher's and the bootstrap's, and the two above): never warned about.
pub const RESERVED_ENV: [&str; 19] = [
    "SWITCHYARD_RANK",
    "SWITCHYARD_SIZE",
    "SWITCHYARD_LOCAL_RANK",
    "SWITCHYARD_LOCAL_SIZE",
    "SWITCHYARD_JOB_ID",
    "SWITCHYARD_JOB_SECRET",
    "SWITCHYARD_JOB_SECRET_FILE",
    "SWITCHYARD_ROOT",
    "SWITCHYARD_ROOT_HOST",
    "SWITCHYARD_PMIX",
    "SWITCHYARD_LAUNCHER_PID",
    "SWITCHYARD_BOUND_CPU",
    "SWITCHYARD_PE_CPUS",
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

/// Whether the file's values (new names) set `key`.
fn file_has(values: &[(Key, file::FileValue)], key: Key) -> bool {
    values.iter().any(|(k, _)| *k == key)
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
    /// Backlog, percent of its capacity (1 to 100), over which a TCP rail's
    /// or verbs' load bit toward a peer is set (cleared again at half of it;
    /// 100: never set). Default 75. See the module docs.
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
    /// Records the route trace ring of each context keeps, the newest ones:
    /// a power of two from 16 to 1048576, allocated once when the context is
    /// created. Default 4096
    /// ([`context::TRACE_RECORDS`](crate::context::TRACE_RECORDS)).
    pub trace_records: u32,
    /// Which routing decisions the route trace ring records. Default
    /// [`TraceMode::DEFAULT`] (`sample:64`).
    pub trace: TraceMode,
    /// Whether each PE keeps its stats segment
    /// ([`statseg`](crate::statseg): counters per (peer, transport) and the
    /// latency histograms of the sampled operations, readable by
    /// `switchyard stat` while the job runs). Default on; off saves the
    /// segment's stores on the data path.
    pub stats: bool,
    /// Largest put (bytes) sent inline; 0 turns inlining off. Default 256.
    pub inline_threshold: u32,
    /// Where the progress thread runs. Default [`ProgressCpu::Auto`] (a CPU
    /// outside the application's, when the machine has one).
    pub progress_cpu: ProgressCpu,
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
    /// The RDMA device to open; `None` (`auto`): the first usable one.
    pub verbs_device: Option<String>,
    /// The GID table index; `None` (`auto`): an IPv4-mapped RoCE v2 GID, else
    /// index 0.
    pub verbs_gid_index: Option<u8>,
    /// Which peers' cards a PE gets at the bootstrap. Default
    /// [`CardsMode::All`].
    pub cards: CardsMode,
    /// With `cards = lazy`, how many off-node peers the verbs driver may
    /// pair with (1 to 65536). Default [`DEFAULT_VERBS_LAZY_PEERS`].
    pub verbs_lazy_peers: u32,
    /// Whether each context opens verbs queue pairs of its own toward the
    /// peers it uses (per-context QP sets; `verbs_context_sets`). Default
    /// off.
    pub verbs_context_sets: bool,
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
            trace_records: crate::context::TRACE_RECORDS as u32,
            trace: TraceMode::DEFAULT,
            stats: true,
            inline_threshold: 256,
            progress_cpu: ProgressCpu::Auto,
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
            verbs_device: None,
            verbs_gid_index: None,
            cards: CardsMode::All,
            verbs_lazy_peers: DEFAULT_VERBS_LAZY_PEERS,
            verbs_context_sets: false,
            template: None,
            file: None,
            sources: std::array::from_fn(|_| Source::Default),
            warnings: Vec::new(),
        }
    }
}

static DEFAULT_SOURCE: Source = Source::Default;

/// The default of `verbs_lazy_peers`: 32 peers, the verbs driver's own
/// default budget (`switchyard_verbs::params::DEFAULT_LAZY_PEERS`).
pub const DEFAULT_VERBS_LAZY_PEERS: u32 = 32;

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
        cfg.warnings
            .extend(check_env_names(map.keys().map(String::as_str)));
        Ok(cfg)
    }

    /// Loads with `lookup` as the environment: it is asked for
    /// `SWITCHYARD_CONFIG`, `SWITCHYARD_TEMPLATE` and each key's variable, and
    /// returns its value if set. An empty or all-space value counts as unset.
    /// Unknown variables cannot be listed through a lookup, so the only
    /// warnings this records are for renamed keys' old names (file or
    /// environment).
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

        for (d, fv) in file.deprecated {
            let var = match &fv.from {
                Source::File { path, line } => format!("{} in {}:{line}", d.name, path.display()),
                other => format!("{} ({other})", d.name),
            };
            cfg.warnings.push(ConfigWarning::renamed(var, d.key.name()));
            if file_has(&file.values, d.key) {
                continue;
            }
            let raw = fv.raw.ok().and_then(|r| (d.translate)(&r));
            if let Err(e) = cfg.set_renamed(d, raw, fv.written, fv.from) {
                errors.push(e);
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

        for d in keys::DEPRECATED {
            let Some(v) = get(d.env) else { continue };
            cfg.warnings
                .push(ConfigWarning::renamed(d.env.into(), d.key.env()));
            if get(d.key.env()).is_none()
                && let Err(e) = cfg.set_renamed(d, (d.translate)(&v), v, Source::Env(d.env))
            {
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

    /// Sets a renamed key from its old name's value (`raw`: already in the
    /// new key's text form; `None` when the old name cannot take it).
    fn set_renamed(
        &mut self,
        d: keys::Deprecated,
        raw: Option<String>,
        written: String,
        source: Source,
    ) -> Result<(), ConfigError> {
        let bad = |written, from| ConfigError::BadValue {
            key: d.name,
            value: written,
            from,
            expected: d.expected,
        };
        match raw {
            Some(raw) if self.parse_into(d.key, &raw) => {
                self.sources[d.key.index()] = source;
                Ok(())
            }
            _ => Err(bad(written, source)),
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
