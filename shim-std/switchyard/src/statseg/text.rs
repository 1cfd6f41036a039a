//! Snapshots as text: the Prometheus text exposition format (0.0.4) and a
//! short summary (what `shmemx_stats_print` prints).

use std::fmt::Write as _;

use super::{
    ChannelCounter, PeWord, PeerWord, SharedWord, VerbsWord, WideWord, bucket_low, read::Snapshot,
};

/// One histogram with samples.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HistRow {
    /// The operation (`put`, `get`, `atomic`).
    pub op: String,
    /// The transport.
    pub transport: String,
    /// Samples.
    pub count: u64,
    /// Their sum, in ticks (the header's unit).
    pub sum: u64,
    /// The largest, in ticks.
    pub max: u64,
    /// `(bucket, count)` of the non-empty buckets (bucket `i` holds values
    /// from [`bucket_low`]`(i)` up to the next one's).
    pub buckets: Vec<(usize, u64)>,
}

impl HistRow {
    /// p50, p99 and the largest, in nanoseconds (`tick_unit` as in the
    /// segment's header).
    pub fn percentiles_ns(&self, tick_unit: u32) -> [u64; 3] {
        [self.quantile(0.5), self.quantile(0.99), self.max].map(|t| ticks_to_ns(tick_unit, t))
    }

    /// The value in ticks at quantile `q` (0 to 1): the upper end of the
    /// bucket holding it (at most one bucket width above the true value).
    pub fn quantile(&self, q: f64) -> u64 {
        let want = ((self.count as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in &self.buckets {
            seen += c;
            if seen >= want {
                return (bucket_low(i + 1).saturating_sub(1)).min(self.max);
            }
        }
        self.max
    }
}

/// Nanoseconds of `ticks` in the unit of a segment whose header says
/// `tick_unit` (0: this node's TSC).
pub fn ticks_to_ns(tick_unit: u32, ticks: u64) -> u64 {
    if tick_unit == 0 {
        crate::sys::ticks_to_nanos(ticks)
    } else {
        ticks
    }
}

/// The latency bucket bounds of the Prometheus histograms, in seconds
/// (1-2-5 from 100 ns to 10 s; the same for every series, so they add up
/// across PEs).
const LE: [f64; 25] = [
    1e-7, 2e-7, 5e-7, 1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2,
    2e-2, 5e-2, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

/// One metric family being written: its samples, then written out whole.
struct Family {
    name: String,
    help: &'static str,
    kind: &'static str,
    lines: String,
}

impl Family {
    fn new(name: String, help: &'static str, kind: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            lines: String::new(),
        }
    }

    fn sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let _ = write!(self.lines, "{}{suffix}", self.name);
        if !labels.is_empty() {
            self.lines.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.lines.push(',');
                }
                let _ = write!(self.lines, "{k}=\"{}\"", escape(v));
            }
            self.lines.push('}');
        }
        let _ = writeln!(self.lines, " {value}");
    }

    fn write(&self, out: &mut String) {
        if self.lines.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        out.push_str(&self.lines);
    }
}

/// A label value as the text format wants it (backslash, quote, newline escaped).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A counter family `switchyard_<group>_<name>_total` per name.
fn counters<'a>(
    names: impl Iterator<Item = &'a str>,
    group: &str,
    help: &'static str,
) -> Vec<Family> {
    names
        .map(|n| Family::new(format!("switchyard_{group}_{n}_total"), help, "counter"))
        .collect()
}

/// The Prometheus text exposition (format 0.0.4) of `snaps` (PEs of one or
/// more jobs): every family once, with `job` and `pe` labels on each sample.
pub fn prometheus(snaps: &[Snapshot]) -> String {
    let mut up = Family::new("switchyard_up".into(), "Whether the PE lives.", "gauge");
    let mut start = Family::new(
        "switchyard_start_time_seconds".into(),
        "When the PE created its stats segment, seconds since the Unix epoch.",
        "gauge",
    );
    let mut pe_f = counters(
        PeWord::ALL.iter().map(|w| w.name()),
        "pe",
        "A counter of the PE (see the stats segment docs).",
    );
    let mut wide_f = counters(
        WideWord::ALL.iter().map(|w| w.name()),
        "transport",
        "A driver's own counter (TCP: all rails, on tcp0).",
    );
    let mut verbs_f = counters(
        VerbsWord::ALL.iter().map(|w| w.name()),
        "verbs",
        "A counter of the verbs driver.",
    );
    let peer_words = peer_counter_names();
    let mut peer_f = counters(
        peer_words.iter().copied(),
        "peer",
        "A counter of one (peer, transport).",
    );
    let mut bits: Vec<Family> = [
        ("healthy", "Health bit of (peer, transport)."),
        ("loaded", "Load bit of (peer, transport)."),
        (
            "route",
            "1 for the transport a short put to the peer takes.",
        ),
    ]
    .into_iter()
    .map(|(n, h)| Family::new(format!("switchyard_peer_{n}"), h, "gauge"))
    .collect();
    let mut chan_f = counters(
        ChannelCounter::ALL.iter().map(|w| w.name()),
        "channel",
        "A counter of one channel end (peer: the other end's PE, all for a publisher).",
    );
    let mut lat = Family::new(
        "switchyard_latency_seconds".into(),
        "Latency of the sampled operations, end to end.",
        "histogram",
    );
    for s in snaps {
        let job = format!("{:016x}", s.header.job_id);
        let pe = s.header.rank.to_string();
        let base = [("job_id", job.as_str()), ("pe", pe.as_str())];
        up.sample("", &base, u8::from(s.alive));
        start.sample("", &base, s.header.start_unix_ns as f64 / 1e9);
        for (f, w) in pe_f.iter_mut().zip(PeWord::ALL) {
            f.sample("", &base, s.pe.get(w.name()).copied().unwrap_or(0));
        }
        for row in &s.wide {
            let l = [base[0], base[1], ("transport", row.transport.as_str())];
            if row.transport == "verbs" {
                for (f, w) in verbs_f.iter_mut().zip(VerbsWord::ALL) {
                    f.sample("", &base, row.counters.get(w.name()).copied().unwrap_or(0));
                }
                continue;
            }
            for (f, w) in wide_f.iter_mut().zip(WideWord::ALL) {
                f.sample("", &l, row.counters.get(w.name()).copied().unwrap_or(0));
            }
        }
        for row in &s.peers {
            let peer = row.peer.to_string();
            let l = [
                base[0],
                base[1],
                ("peer", peer.as_str()),
                ("transport", row.transport.as_str()),
            ];
            for (f, w) in peer_f.iter_mut().zip(&peer_words) {
                f.sample("", &l, row.counters.get(*w).copied().unwrap_or(0));
            }
            for (f, b) in bits.iter_mut().zip([row.healthy, row.loaded, row.route]) {
                f.sample("", &l, u8::from(b));
            }
        }
        for c in &s.channels {
            let (number, peer) = (c.channel.to_string(), c.peer.to_string());
            let peer = if c.role == "publisher" {
                "all"
            } else {
                peer.as_str()
            };
            let l = [
                base[0],
                base[1],
                ("channel", number.as_str()),
                ("kind", c.kind.as_str()),
                ("role", c.role.as_str()),
                ("peer", peer),
            ];
            for (f, w) in chan_f.iter_mut().zip(ChannelCounter::ALL) {
                f.sample("", &l, c.counter(*w));
            }
        }
        for h in &s.hists {
            let l = [
                base[0],
                base[1],
                ("op", h.op.as_str()),
                ("transport", h.transport.as_str()),
            ];
            let unit = s.header.tick_unit;
            for le in LE {
                // Buckets wholly at or below `le`.
                let c: u64 = h
                    .buckets
                    .iter()
                    .filter(|(i, _)| {
                        ticks_to_ns(unit, bucket_low(i + 1).saturating_sub(1)) as f64 <= le * 1e9
                    })
                    .map(|(_, c)| c)
                    .sum();
                let les = format!("{le:e}");
                let lb = [l[0], l[1], l[2], l[3], ("le", les.as_str())];
                lat.sample("_bucket", &lb, c);
            }
            let lb = [l[0], l[1], l[2], l[3], ("le", "+Inf")];
            lat.sample("_bucket", &lb, h.count);
            lat.sample("_sum", &l, ticks_to_ns(unit, h.sum) as f64 / 1e9);
            lat.sample("_count", &l, h.count);
        }
    }
    let mut out = String::new();
    for f in [&up, &start]
        .into_iter()
        .chain(&pe_f)
        .chain(&wide_f)
        .chain(&verbs_f)
        .chain(&peer_f)
        .chain(&bits)
        .chain(&chan_f)
        .chain([&lat])
    {
        f.write(&mut out);
    }
    out
}

/// The names of a (peer, transport)'s counters, in order: the context
/// slots' ([`PeerWord`]) then the publisher's ([`SharedWord`]), not the
/// state words.
pub fn peer_counter_names() -> Vec<&'static str> {
    PeerWord::ALL
        .iter()
        .filter(|w| **w != PeerWord::State)
        .map(|w| w.name())
        .chain(
            SharedWord::ALL
                .iter()
                .filter(|w| **w != SharedWord::State)
                .map(|w| w.name()),
        )
        .collect()
}

/// A short text summary of one PE's snapshot: totals per transport, the
/// PE's counters that are not zero, the latency percentiles, and the
/// counters of each channel end.
pub fn summary(s: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "switchyard stats: PE {} of {} (job {:016x})",
        s.header.rank, s.header.n_pes, s.header.job_id
    );
    let mut per_t: std::collections::BTreeMap<&str, [u64; 4]> = Default::default();
    for p in &s.peers {
        let e = per_t.entry(p.transport.as_str()).or_default();
        for (k, w) in [
            PeerWord::Ops,
            PeerWord::Bytes,
            PeerWord::Retries,
            PeerWord::Errors,
        ]
        .iter()
        .enumerate()
        {
            e[k] += p.counters.get(w.name()).copied().unwrap_or(0);
        }
    }
    for (t, [ops, bytes, retries, errors]) in per_t {
        let _ = writeln!(
            out,
            "  {t:<6} ops {ops} bytes {bytes} retries {retries} errors {errors}"
        );
    }
    // The driver's recovery counters, per (peer, transport), where any.
    let shared = [
        SharedWord::Replays,
        SharedWord::DedupDrops,
        SharedWord::CrcFailures,
    ];
    for p in &s.peers {
        let [r, d, c] = shared.map(|w| p.counters.get(w.name()).copied().unwrap_or(0));
        if r + d + c != 0 {
            let _ = writeln!(
                out,
                "  peer {} {}: replays {r} dedup_drops {d} crc_failures {c}",
                p.peer, p.transport
            );
        }
    }
    let nonzero: Vec<String> =
        s.pe.iter()
            .filter(|(_, v)| **v != 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
    if !nonzero.is_empty() {
        let _ = writeln!(out, "  {}", nonzero.join(", "));
    }
    for h in &s.hists {
        let [p50, p99, max] = h.percentiles_ns(s.header.tick_unit);
        let _ = writeln!(
            out,
            "  latency {} {}: n {} p50 {p50} ns p99 {p99} ns max {max} ns",
            h.op, h.transport, h.count
        );
    }
    for c in &s.channels {
        let peer = if c.role == "publisher" {
            "subscribers"
        } else {
            "peer"
        };
        let _ = writeln!(
            out,
            "  channel {} {} {} {peer} {}: sent {} received {} full {} lost {}",
            c.channel, c.kind, c.role, c.peer, c.sent, c.received, c.full, c.lost
        );
    }
    out
}
