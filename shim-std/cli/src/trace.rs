//! `switchyard trace [JOB|FILE|DIR]`: the route trace decoded, as text or
//! JSON lines.
//!
//! Sources: a running job's trace objects on this node (every PE's, found by
//! the job id in their names), a trace dump a PE or the launcher wrote (or
//! `shmemx_trace_dump`), a job directory of dumps, or, with no argument,
//! every running job on this node. A live ring is copied while the job runs;
//! records overwritten meanwhile are skipped by their stamps.
//!
//! Each record: the time in ns (through the object's tick rate and its
//! wall-clock anchor), the PE whose ring holds it and the side (`init`: the
//! routing decision of an operation this PE started; `target`: a frame this
//! PE applied for a peer), the op, the source and destination PEs, the path
//! class, the transport, the length, the context id (initiator PE and
//! sequence) and the flags. `--join` pairs both ends of each operation by
//! its context id.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use serde_json::json;
use switchyard_core::{class::PathClass, trace::TraceRecord, wire::FrameOp};
use switchyard_shm::trace_object::{
    INITIATOR, TARGET, TraceMeta, TraceObject, dumps_in, is_trace_file, trace_objects,
};

use crate::Output;

/// `switchyard trace --help`'s description.
pub const ABOUT: &str = "\
Decode the route trace: the routing decisions of each PE (side `init`) and
the frames it applied for its peers over TCP (side `target`), with their
time in ns, op, PEs, path class, transport, length, context id and flags
(downgraded, retried, failover, ordered, error, load, cpu-atomic).

SOURCE is a running job's id (the hex digits in /dev/shm/switchyard-<JOB>-*),
a trace dump (*.sytrace, written when a PE saw a peer die or a link go down,
by the launcher after a failed job, or by shmemx_trace_dump), a directory of
dumps (the job directory the launcher names), or a trace object. Without
SOURCE: every running job on this node.

Times are each PE's trace clock through its anchor (a clock reading paired
with the wall clock when the PE started): on one node the PEs share the
clock, and the two ends of an operation line up to within the anchors'
error (well under a microsecond, unless a PE was preempted while it took
its anchor); across nodes, as well as their wall clocks agree.

What is recorded follows the `trace` setting (SWITCHYARD_TRACE): `all` for
every operation at both ends, `sample:N` (the default, one in 64) for one
decision in N and every flagged one, `off` for none.";

/// `switchyard trace`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// A job id, a trace dump or object, or a directory of dumps
    #[arg(value_name = "JOB|FILE|DIR")]
    pub source: Option<String>,
    /// One JSON object per line
    #[arg(long)]
    pub json: bool,
    /// Pair both ends of each operation (the initiator's decision and the
    /// target's application) by context id
    #[arg(long)]
    pub join: bool,
    /// Only the newest N records of each ring
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
}

/// One decoded record.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The PE whose ring holds it.
    pub pe: u32,
    /// [`INITIATOR`] or [`TARGET`].
    pub side: usize,
    /// Nanoseconds since the Unix epoch.
    pub time_ns: i128,
    /// The record.
    pub rec: TraceRecord,
}

impl Entry {
    fn side_name(&self) -> &'static str {
        if self.side == TARGET {
            "target"
        } else {
            "init"
        }
    }

    /// The PE that started the operation (its context id's PE).
    fn initiator(&self) -> u32 {
        self.rec.src
    }

    fn key(&self) -> (u32, u32, u64) {
        (self.rec.src, self.rec.dst, self.rec.seq)
    }
}

/// The name of an op code.
pub fn op_name(op: u8) -> String {
    match FrameOp::from_u8(op) {
        Some(FrameOp::Put) => "put".into(),
        Some(FrameOp::Get) => "get".into(),
        Some(FrameOp::Atomic) => "atomic".into(),
        Some(o) => format!("{o:?}").to_lowercase(),
        None => format!("op{op}"),
    }
}

/// The name of a transport index (`shm`, `verbs`, `tcp0`...), `-` for none.
pub fn transport_name(t: u8) -> String {
    match t {
        TraceRecord::NO_TRANSPORT => "-".into(),
        0 => "shm".into(),
        1 => "verbs".into(),
        t => format!("tcp{}", t - 2),
    }
}

/// The name of a class byte, `-` when not known (a target's record).
pub fn class_name(r: &TraceRecord) -> &'static str {
    r.path_class().map_or("-", PathClass::name)
}

/// The names of the flags set.
pub fn flag_names(flags: u8) -> Vec<&'static str> {
    [
        (TraceRecord::DOWNGRADED, "downgraded"),
        (TraceRecord::ERROR, "error"),
        (TraceRecord::CPU_ATOMIC, "cpu-atomic"),
        (TraceRecord::ORDERED, "ordered"),
        (TraceRecord::LOAD, "load"),
        (TraceRecord::RETRIED, "retried"),
        (TraceRecord::FAILOVER, "failover"),
    ]
    .into_iter()
    .filter(|(b, _)| flags & b != 0)
    .map(|(_, n)| n)
    .collect()
}

/// The files to read for `source` (see [`ABOUT`]).
fn sources(source: Option<&str>) -> Result<Vec<PathBuf>, String> {
    let Some(s) = source else {
        let all: Vec<PathBuf> = trace_objects(None).into_iter().map(|(_, _, p)| p).collect();
        if all.is_empty() {
            return Err(
                "no running job's route trace on this node (/dev/shm/switchyard-*-trace-*)".into(),
            );
        }
        return Ok(all);
    };
    let p = Path::new(s);
    if p.is_dir() {
        let d = dumps_in(p);
        if d.is_empty() {
            return Err(format!("{s}: no trace dumps (*.sytrace) in this directory"));
        }
        return Ok(d);
    }
    if p.is_file() {
        if !is_trace_file(p) {
            return Err(format!("{s}: not a switchyard route trace"));
        }
        return Ok(vec![p.to_path_buf()]);
    }
    let digits = s.trim_start_matches("0x");
    let job = u64::from_str_radix(digits, 16)
        .ok()
        .filter(|_| !digits.is_empty() && digits.len() <= 16)
        .ok_or_else(|| format!("{s}: no such file, and not a job id (hex digits)"))?;
    let objs: Vec<PathBuf> = trace_objects(Some(job))
        .into_iter()
        .map(|(_, _, p)| p)
        .collect();
    if objs.is_empty() {
        return Err(format!(
            "job {job:016x}: no route trace on this node (is it running?)"
        ));
    }
    Ok(objs)
}

/// The records of `path`, both rings, newest `last` of each.
pub fn read(path: &Path, last: usize) -> Result<(TraceMeta, Vec<Entry>), String> {
    let obj = TraceObject::open(path).map_err(|e| e.to_string())?;
    let meta = *obj.meta();
    let mut out = Vec::new();
    for side in [INITIATOR, TARGET] {
        for rec in obj.snapshot(side, last) {
            out.push(Entry {
                pe: meta.pe,
                side,
                time_ns: meta.unix_nanos(rec.timestamp),
                rec,
            });
        }
    }
    Ok((meta, out))
}

fn entry_json(e: &Entry) -> serde_json::Value {
    let r = &e.rec;
    json!({
        "time_ns": i64::try_from(e.time_ns).unwrap_or(i64::MAX),
        "pe": e.pe,
        "side": e.side_name(),
        "op": op_name(r.op),
        "src": r.src,
        "dst": r.dst,
        "peer": if e.side == TARGET { r.src } else { r.dst },
        "class": class_name(r),
        "transport": transport_name(r.transport),
        "len": r.len,
        "context": { "pe": e.initiator(), "seq": r.seq },
        "flags": flag_names(r.flags),
        "ticks": r.timestamp,
    })
}

fn entry_text(e: &Entry, t0: i128) -> String {
    let r = &e.rec;
    let flags = flag_names(r.flags).join(",");
    format!(
        "{:>12} pe{:<3} {:<6} {:<6} {:>3}->{:<3} {:<6} {:<6} {:>9} ctx {}:{:<8} {}",
        e.time_ns - t0,
        e.pe,
        e.side_name(),
        op_name(r.op),
        r.src,
        r.dst,
        class_name(r),
        transport_name(r.transport),
        r.len,
        e.initiator(),
        r.seq,
        if flags.is_empty() { "-" } else { &flags }
    )
    .trim_end()
    .to_string()
}

/// The two ends of one operation: the initiator's record, and the
/// target's (one, or more for a replay).
type Ends<'a> = (Option<&'a Entry>, Vec<&'a Entry>);

/// The decoded trace of `entries` (sorted by time here) as text or JSON
/// lines, joined or not.
pub fn render(entries: &mut [Entry], json: bool, join: bool) -> String {
    entries.sort_by_key(|e| (e.time_ns, e.pe, e.side));
    let t0 = entries.first().map_or(0, |e| e.time_ns);
    let mut out = String::new();
    if !join {
        if !json {
            out.push_str(
                "     time_ns pe   side   op      src->dst class  via          len context      flags\n",
            );
        }
        for e in entries.iter() {
            if json {
                let _ = writeln!(out, "{}", entry_json(e));
            } else {
                let _ = writeln!(out, "{}", entry_text(e, t0));
            }
        }
        return out;
    }
    // Both ends of each operation: (initiator, target, sequence) -> ends.
    let mut ops: BTreeMap<(u32, u32, u64), Ends<'_>> = BTreeMap::new();
    let mut order = Vec::new();
    for e in entries.iter() {
        let slot = ops.entry(e.key()).or_insert_with(|| {
            order.push(e.key());
            (None, Vec::new())
        });
        if e.side == TARGET {
            slot.1.push(e);
        } else if slot.0.is_none() {
            slot.0 = Some(e);
        }
    }
    if !json {
        out.push_str("context      op       src->dst      len  init_ns (pe, class, via)       target_ns (+ns)  flags\n");
    }
    for key in order {
        let (init, targets) = &ops[&key];
        let any = init.or(targets.first().copied());
        let Some(any) = any else { continue };
        let r = &any.rec;
        if json {
            let v = json!({
                "context": { "pe": key.0, "seq": key.2 },
                "op": op_name(r.op),
                "src": key.0,
                "dst": key.1,
                "len": r.len,
                "initiator": init.map(entry_json),
                "target": targets.iter().map(|e| entry_json(e)).collect::<Vec<_>>(),
            });
            let _ = writeln!(out, "{v}");
            continue;
        }
        let mut flags: Vec<&str> = Vec::new();
        for e in init.iter().chain(targets.iter()) {
            for f in flag_names(e.rec.flags) {
                if !flags.contains(&f) {
                    flags.push(f);
                }
            }
        }
        let init_s = init.map_or_else(
            || format!("{:>12} {:<17}", "-", "(not recorded)"),
            |e| {
                format!(
                    "{:>12} {:<17}",
                    e.time_ns - t0,
                    format!(
                        "(pe{}, {}, {})",
                        e.pe,
                        class_name(&e.rec),
                        transport_name(e.rec.transport)
                    )
                )
            },
        );
        let target_s = match (targets.first(), init) {
            (None, _) => format!("{:>12} {:>8}", "-", ""),
            (Some(t), Some(i)) => format!(
                "{:>12} {:>8}",
                t.time_ns - t0,
                format!("{:+}", t.time_ns - i.time_ns)
            ),
            (Some(t), None) => format!("{:>12} {:>8}", t.time_ns - t0, ""),
        };
        let _ = writeln!(
            out,
            "{:<12} {:<8} {:>3}->{:<3} {:>9} {} {} {}",
            format!("{}:{}", key.0, key.2),
            op_name(r.op),
            key.0,
            key.1,
            r.len,
            init_s,
            target_s,
            if flags.is_empty() {
                "-".to_string()
            } else {
                flags.join(",")
            }
        );
    }
    out
}

/// Runs `switchyard trace`.
pub fn run(a: &TraceArgs) -> Output {
    let files = match sources(a.source.as_deref()) {
        Ok(f) => f,
        Err(e) => {
            return Output {
                code: 1,
                stdout: String::new(),
                stderr: format!("switchyard trace: {e}\n"),
            };
        }
    };
    let last = a.last.unwrap_or(usize::MAX);
    let mut entries = Vec::new();
    let mut stderr = String::new();
    for f in &files {
        match read(f, last) {
            Ok((_, e)) => entries.extend(e),
            Err(e) => {
                let _ = writeln!(stderr, "switchyard trace: {e}");
            }
        }
    }
    Output {
        code: if stderr.is_empty() { 0 } else { 1 },
        stdout: render(&mut entries, a.json, a.join),
        stderr,
    }
}

#[cfg(test)]
mod test;
