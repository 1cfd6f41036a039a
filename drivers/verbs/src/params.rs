//! Queue-pair parameters: derived from the device's limits, a template
//! (trading, storage or AI training, after seed 004) and explicit overrides.
//!
//! Pure: [`derive()`] takes the limits as data, so every rule is unit-tested
//! without a device. Template values are clamped to what the device can do;
//! an explicit value the device cannot do is an error naming it (an override
//! is a promise the operator made, and silently shrinking it would hide that
//! it was not kept).

use std::fmt;

/// Most data QPs per peer (plus one control QP).
pub const MAX_DATA_QPS: u8 = 8;

/// Smallest shared receive queue (receives are re-posted in batches of
/// up to a quarter of it).
pub const MIN_SRQ_DEPTH: u32 = 16;

/// Largest inline payload switchyard asks for (devices commonly allow 64 to
/// 1024 bytes; the actual value is what `ibv_create_qp` grants).
pub const MAX_INLINE_CAP: u32 = 1024;

/// A path MTU (`enum ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    /// 256 bytes.
    M256 = 1,
    /// 512 bytes.
    M512 = 2,
    /// 1024 bytes.
    M1024 = 3,
    /// 2048 bytes.
    M2048 = 4,
    /// 4096 bytes.
    M4096 = 5,
}

impl Mtu {
    /// From the verbs encoding (1 to 5).
    pub const fn from_ibv(v: u32) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::M256,
            2 => Mtu::M512,
            3 => Mtu::M1024,
            4 => Mtu::M2048,
            5 => Mtu::M4096,
            _ => return None,
        })
    }

    /// From a size in bytes (256, 512, 1024, 2048 or 4096).
    pub const fn from_bytes(b: u32) -> Option<Mtu> {
        Some(match b {
            256 => Mtu::M256,
            512 => Mtu::M512,
            1024 => Mtu::M1024,
            2048 => Mtu::M2048,
            4096 => Mtu::M4096,
            _ => return None,
        })
    }

    /// The verbs encoding.
    pub const fn to_ibv(self) -> u32 {
        self as u32
    }

    /// Size in bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// What the device offers for atomics (`ibv_device_attr::atomic_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtomicCap {
    /// No RDMA atomics.
    None,
    /// Atomic between operations of this HCA only (`IBV_ATOMIC_HCA`); what
    /// most devices report.
    #[default]
    Hca,
    /// Atomic also with respect to other agents (CPUs): `IBV_ATOMIC_GLOB`.
    Global,
}

impl AtomicCap {
    /// `none`, `HCA` or `global`, as `switchyard info` prints it.
    pub const fn name(self) -> &'static str {
        match self {
            AtomicCap::None => "none",
            AtomicCap::Hca => "HCA",
            AtomicCap::Global => "global",
        }
    }
}

/// The device and port limits derivation needs (from `ibv_query_device` and
/// `ibv_query_port`; built by hand in tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Largest send queue (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Largest completion queue (`max_cqe`).
    pub max_cqe: u32,
    /// Most QPs (`max_qp`).
    pub max_qp: u32,
    /// Scatter/gather entries per send WR (`max_sge`).
    pub max_sge: u32,
    /// Outstanding reads/atomics a QP may issue (`max_qp_init_rd_atom`).
    pub max_qp_init_rd_atom: u32,
    /// Outstanding reads/atomics a QP may serve (`max_qp_rd_atom`).
    pub max_qp_rd_atom: u32,
    /// Atomics support.
    pub atomic_cap: AtomicCap,
    /// Largest memory region (`max_mr_size`).
    pub max_mr_size: u64,
    /// Largest shared receive queue (`max_srq_wr`; 0: no SRQ).
    pub max_srq_wr: u32,
    /// The port's active MTU.
    pub active_mtu: Mtu,
}

/// A parameter template (seed 004, "templates by scenario").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Template {
    /// Latency first: shallow queues, one data QP, generous inline.
    #[default]
    Trading,
    /// Throughput with many outstanding I/Os: deep queues, 8 data QPs, no inline.
    Storage,
    /// Large transfers from few peers: 4 data QPs, deep queues, small inline.
    Ai,
}

impl Template {
    /// Parses `trading`, `storage` or `ai` (the config template names).
    pub fn parse(s: &str) -> Option<Template> {
        match s {
            "trading" => Some(Template::Trading),
            "storage" => Some(Template::Storage),
            "ai" | "ai-training" => Some(Template::Ai),
            _ => None,
        }
    }

    /// The template's shared receive queue depth: how many puts (from all
    /// peers together) may land at this PE between two of its progress
    /// steps before the senders see RNR NAKs (they wait and retry; nothing
    /// fails). Trading PEs poll constantly; storage and AI jobs take many
    /// puts from many peers between polls.
    pub const fn srq_depth(self) -> u32 {
        match self {
            Template::Trading => 4096,
            Template::Storage => 16384,
            Template::Ai => 8192,
        }
    }

    /// The template's own values: (data QPs, SQ depth, CQ depth, inline bytes).
    pub const fn values(self) -> (u8, u32, u32, u32) {
        match self {
            // qp_depth 128, cq_depth 256, inline_threshold 256B.
            Template::Trading => (1, 128, 256, 256),
            // qp_num 8, qp_depth 1024, cq_depth 2048, inline disabled.
            Template::Storage => (8, 1024, 2048, 0),
            // qp_num 4, qp_depth 768; CQ twice the SQ; small inline for
            // control words.
            Template::Ai => (4, 768, 1536, 64),
        }
    }
}

/// Operator-facing verbs settings: a template plus optional overrides, and
/// the reliability knobs of RC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsConfig {
    /// The template the unset values come from.
    pub template: Template,
    /// Data QPs per peer, 1 to [`MAX_DATA_QPS`] (plus one control QP).
    pub data_qps: Option<u8>,
    /// Send queue depth of every QP.
    pub sq_depth: Option<u32>,
    /// Completion queue depth (one CQ for the driver).
    pub cq_depth: Option<u32>,
    /// Inline threshold in bytes (0 = never inline).
    pub max_inline: Option<u32>,
    /// Receive WQEs of the driver's shared receive queue (one per put that
    /// may land between two progress steps of this PE; see
    /// [`Template::srq_depth`]). At least [`MIN_SRQ_DEPTH`], at most the
    /// device's `max_srq_wr` and `max_cqe`.
    pub srq_depth: Option<u32>,
    /// Signal every k-th work request (default: a quarter of the SQ, at most 64).
    pub signal_every: Option<u32>,
    /// Path MTU (default: the smaller of the two ports' active MTUs).
    pub path_mtu: Option<Mtu>,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout, 1 to 31 (0, infinite,
    /// is refused: no call may hang).
    pub timeout: u8,
    /// Transport retries before an error completion, 0 to 7.
    pub retry_cnt: u8,
    /// RNR retries: must be 7 (infinite). Every put is an RDMA WRITE with
    /// immediate that consumes a receive WQE at the target (its receipt);
    /// a target slow to re-post receives answers RNR NAK, which must only
    /// delay the put, never fail the link.
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code, 0 to 31.
    pub min_rnr_timer: u8,
    /// Device name to use (default: the first with an active port).
    pub device: Option<String>,
    /// Port number (from 1).
    pub port: u8,
    /// GID index (default: chosen by the probe).
    pub gid_index: Option<u32>,
    /// Bytes of registered staging for puts from unregistered buffers.
    pub staging_bytes: u32,
    /// Concurrent gets into driver buffers (tickets).
    pub get_slots: u32,
    /// Largest get into a driver buffer ([`switchyard_core::transport::Transport::max_get_len`]).
    pub get_slot_bytes: u32,
    /// Longest wait, in milliseconds, for every data QP toward a failed
    /// peer to report `IBV_EVENT_QP_LAST_WQE_REACHED` (the receipts of
    /// that peer's puts are collected only then), counted on the `now`
    /// passed to `progress` from the first step after the failure. Past
    /// it this side gives up collecting *without answering* (an answer
    /// without the event could be too low and get a landed put applied
    /// twice): [`crate::Event::ReceiptsWithheld`], and the peer reports
    /// its puts in doubt lost at its op timeout. 1 to 60000; default 300
    /// (the event normally comes within microseconds of the modify to
    /// ERROR; the peer asks for receipts from 20 ms and gives up at its op
    /// timeout, seconds). A caller whose `now` never advances (a constant
    /// `Instant`) never reaches it.
    pub collect_timeout_ms: u32,
    /// `None` (the default): the driver creates its QPs toward every other
    /// PE at creation. `Some(k)`: *lazy* peers: it creates none, and QPs
    /// toward a peer are created when it is added
    /// ([`crate::VerbsDriver::add_peer`], e.g. at the first operation
    /// toward it), for up to `k` peers (1 to 65536; more than the job's
    /// other PEs counts as that many). The staging pool, the CQ, the shared
    /// receive queue's receipts table, the event ring and the peer table
    /// are sized for `k` peers at creation (so adding one never grows a
    /// table on the data path), and are O(k), not O(PEs in the job): see
    /// [`DEFAULT_LAZY_PEERS`] for what a slot costs. Past `k` peers
    /// `add_peer` refuses ([`crate::VerbsError::NoPeerLeft`]) and the
    /// caller keeps that peer on its other transports.
    pub lazy_peers: Option<u32>,
}

/// The budget of lazily added peers the shim uses when it creates a driver
/// with lazy cards (`cards = lazy`, [`VerbsConfig::lazy_peers`]) and
/// `verbs_lazy_peers` is not set: 32. Each slot costs
/// `(1 + data_qps)` QPs, each with its send-queue records (`sq_depth` ×
/// 40 bytes) and a staging ring of `staging_bytes / (32 × (1 + data_qps))`
/// bytes, at least 128 KiB (two 64 KiB blocks), registered once at
/// creation.
pub const DEFAULT_LAZY_PEERS: u32 = 32;

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            template: Template::Trading,
            data_qps: None,
            sq_depth: None,
            cq_depth: None,
            max_inline: None,
            srq_depth: None,
            signal_every: None,
            path_mtu: None,
            // 4.096 us * 2^14 = 67 ms per try, 7 tries: a dead peer is an
            // error completion in under half a second.
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            device: None,
            port: 1,
            gid_index: None,
            staging_bytes: 4 << 20,
            get_slots: 64,
            get_slot_bytes: 64 << 10,
            collect_timeout_ms: 300,
            lazy_peers: None,
        }
    }
}

/// Parameters after derivation: what the driver creates its queues with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// Data QPs per peer.
    pub data_qps: u8,
    /// Send queue depth (every QP).
    pub sq_depth: u32,
    /// Completion queue depth; also the budget of signaled WRs in flight.
    pub cq_depth: u32,
    /// Inline threshold requested from `ibv_create_qp`.
    pub max_inline: u32,
    /// Receive WQEs of the shared receive queue (and entries of the
    /// receive CQ).
    pub srq_depth: u32,
    /// Signal every k-th WR.
    pub signal_every: u32,
    /// Local port MTU bound (the connect takes the smaller with the peer's).
    pub path_mtu: Mtu,
    /// ACK timeout exponent.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Minimum RNR timer code.
    pub min_rnr_timer: u8,
    /// Reads/atomics this side issues concurrently per QP.
    pub max_rd_atomic: u8,
    /// Reads/atomics this side serves concurrently per QP.
    pub max_dest_rd_atomic: u8,
    /// Whether RDMA atomics are available.
    pub atomics: bool,
    /// What the device's atomics are atomic with respect to
    /// (`atomic_cap`): [`AtomicCap::Hca`] means only other atomics of the
    /// same HCA, not the CPU's.
    pub atomic_cap: AtomicCap,
}

/// A parameter that cannot be used: its name, value, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("verbs config {field} = {value}: expected {expected}")]
pub struct ParamError {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: String,
    /// What was expected.
    pub expected: String,
}

fn bad<T>(
    field: &'static str,
    value: impl fmt::Display,
    expected: impl Into<String>,
) -> Result<T, ParamError> {
    Err(ParamError {
        field,
        value: value.to_string(),
        expected: expected.into(),
    })
}

/// Derives the QP parameters from `cfg` and the device `limits`.
///
/// # Errors
///
/// [`ParamError`] naming the first field that is out of range or asks for
/// more than the device has.
pub fn derive(cfg: &VerbsConfig, limits: &DeviceLimits) -> Result<QpParams, ParamError> {
    let (t_qps, t_sq, t_cq, t_inline) = cfg.template.values();
    if limits.max_qp_wr < 2 || limits.max_cqe < 2 {
        return bad(
            "device limits",
            format_args!("max_qp_wr {} max_cqe {}", limits.max_qp_wr, limits.max_cqe),
            "a device with queues of at least 2 entries",
        );
    }
    let data_qps = cfg.data_qps.unwrap_or(t_qps);
    if !(1..=MAX_DATA_QPS).contains(&data_qps) {
        return bad("data_qps", data_qps, format!("1 to {MAX_DATA_QPS}"));
    }
    let sq_depth = match cfg.sq_depth {
        Some(d) if d < 2 => return bad("sq_depth", d, "at least 2"),
        Some(d) if d > limits.max_qp_wr => {
            return bad(
                "sq_depth",
                d,
                format!("at most the device's max_qp_wr ({})", limits.max_qp_wr),
            );
        }
        Some(d) => d,
        None => t_sq.min(limits.max_qp_wr),
    };
    let cq_depth = match cfg.cq_depth {
        Some(d) if d < 2 => return bad("cq_depth", d, "at least 2"),
        Some(d) if d > limits.max_cqe => {
            return bad(
                "cq_depth",
                d,
                format!("at most the device's max_cqe ({})", limits.max_cqe),
            );
        }
        Some(d) => d,
        None => t_cq.min(limits.max_cqe),
    };
    let max_inline = match cfg.max_inline {
        Some(b) if b > MAX_INLINE_CAP => {
            return bad("max_inline", b, format!("at most {MAX_INLINE_CAP} bytes"));
        }
        Some(b) => b,
        None => t_inline,
    };
    // k tied to the SQ: a quarter of it (so three quarters of the queue are
    // usable while one signaled WR is in flight), at most 64.
    let signal_every = match cfg.signal_every {
        Some(k) if k == 0 || k > sq_depth / 2 => {
            return bad(
                "signal_every",
                k,
                format!("1 to half the SQ depth ({})", sq_depth / 2),
            );
        }
        Some(k) => k,
        None => (sq_depth / 4).clamp(1, 64),
    };
    let path_mtu = match cfg.path_mtu {
        Some(m) if m > limits.active_mtu => {
            return bad(
                "path_mtu",
                m,
                format!("at most the port's active MTU ({})", limits.active_mtu),
            );
        }
        Some(m) => m,
        None => limits.active_mtu,
    };
    if !(1..=31).contains(&cfg.timeout) {
        return bad(
            "timeout",
            cfg.timeout,
            "1 to 31 (4.096 us * 2^timeout; 0 would wait forever)",
        );
    }
    if cfg.retry_cnt > 7 {
        return bad("retry_cnt", cfg.retry_cnt, "0 to 7");
    }
    if cfg.rnr_retry != 7 {
        return bad(
            "rnr_retry",
            cfg.rnr_retry,
            "7 (infinite: a put waiting for the target to re-post receives must not fail the link)",
        );
    }
    if limits.max_srq_wr < MIN_SRQ_DEPTH {
        return bad(
            "device limits",
            format_args!("max_srq_wr {}", limits.max_srq_wr),
            format!(
                "a device with shared receive queues of at least {MIN_SRQ_DEPTH} entries (put receipts)"
            ),
        );
    }
    let srq_cap = limits.max_srq_wr.min(limits.max_cqe);
    let srq_depth = match cfg.srq_depth {
        Some(d) if d < MIN_SRQ_DEPTH => {
            return bad("srq_depth", d, format!("at least {MIN_SRQ_DEPTH}"));
        }
        Some(d) if d > srq_cap => {
            return bad(
                "srq_depth",
                d,
                format!("at most the device's max_srq_wr and max_cqe ({srq_cap})"),
            );
        }
        Some(d) => d,
        None => cfg.template.srq_depth().min(srq_cap),
    };
    if cfg.min_rnr_timer > 31 {
        return bad("min_rnr_timer", cfg.min_rnr_timer, "0 to 31");
    }
    let rd = |v: u32| v.min(16) as u8;
    let (max_rd_atomic, max_dest_rd_atomic) =
        (rd(limits.max_qp_init_rd_atom), rd(limits.max_qp_rd_atom));
    if max_rd_atomic == 0 || max_dest_rd_atomic == 0 {
        return bad(
            "device limits",
            format_args!(
                "max_qp_init_rd_atom {} max_qp_rd_atom {}",
                limits.max_qp_init_rd_atom, limits.max_qp_rd_atom
            ),
            "a device that allows RDMA READ (at least 1 outstanding)",
        );
    }
    if cfg.port == 0 {
        return bad("port", 0, "a port number from 1");
    }
    if cfg.get_slots == 0 || cfg.get_slots > 4096 {
        return bad("get_slots", cfg.get_slots, "1 to 4096");
    }
    if cfg.get_slot_bytes < 8 || !cfg.get_slot_bytes.is_multiple_of(8) {
        return bad(
            "get_slot_bytes",
            cfg.get_slot_bytes,
            "a multiple of 8, at least 8",
        );
    }
    if u64::from(cfg.staging_bytes) < u64::from(max_inline.max(4096)) {
        return bad("staging_bytes", cfg.staging_bytes, "at least 4096 bytes");
    }
    if let Some(k) = cfg.lazy_peers
        && !(1..=65_536).contains(&k)
    {
        return bad("lazy_peers", k, "1 to 65536 peers");
    }
    if !(1..=60_000).contains(&cfg.collect_timeout_ms) {
        return bad(
            "collect_timeout_ms",
            cfg.collect_timeout_ms,
            "1 to 60000 milliseconds",
        );
    }
    Ok(QpParams {
        data_qps,
        sq_depth,
        cq_depth,
        max_inline,
        srq_depth,
        signal_every,
        path_mtu,
        timeout: cfg.timeout,
        retry_cnt: cfg.retry_cnt,
        rnr_retry: cfg.rnr_retry,
        min_rnr_timer: cfg.min_rnr_timer,
        max_rd_atomic,
        max_dest_rd_atomic,
        atomics: limits.atomic_cap != AtomicCap::None,
        atomic_cap: limits.atomic_cap,
    })
}

#[cfg(test)]
mod test;
