//! The route trace ring: one binary record per routing decision (and per
//! failed one), written without allocating or formatting. The ring keeps the
//! newest [`Setup::trace_records`](super::Setup::trace_records) records
//! (`trace_records` in the configuration), allocated once at init; which
//! decisions reach it is [`Setup::trace`](super::Setup::trace) (`trace`:
//! off, one in N, all; [`TraceMode`](crate::config::TraceMode)).
//!
//! A record is eleven plain stores (Release or Relaxed) into the context's own ring, no
//! fence, and one read of the trace clock, [`sys::ticks`](crate::sys::ticks),
//! taken only for a decision that is recorded. Its
//! [`timestamp`](TraceRecord::timestamp) is in that clock's ticks (the TSC
//! on x86-64, nanoseconds elsewhere); [`sys::ticks_to_nanos`](crate::sys::ticks_to_nanos)
//! converts them.

use std::path::{Path, PathBuf};

use switchyard_core::{
    class::{PathClass, TransportId},
    route::Route,
    trace::{CapacityError, TraceRecord, TraceRingBox, TraceRingSlice, TraceWriter},
    wire::FrameOp,
};
use switchyard_shm::{
    ShmError,
    trace_object::{
        DUMP_EXT, INITIATOR, MAX_TRACE_CAPACITY, TARGET, TraceMeta, TraceObject, ensure_job_dir,
        own_pid,
    },
};

use super::{Context, Error, Result, VERBS};

/// Records the route trace ring keeps by default (`trace_records`' default).
pub const TRACE_RECORDS: usize = 4096;

/// Most dumps one context writes ([`Context::dump_trace_on`]).
const MAX_DUMPS: u32 = 8;

/// A context's trace rings: its trace object (a shared-memory object of the
/// job, or process memory outside one), which lives as long as the process
/// (so the writers can be `'static`); the shared-memory object is removed
/// when this drops.
#[derive(Debug)]
pub(super) struct Rings {
    pub(super) obj: &'static TraceObject,
    /// Dumps written so far.
    pub(super) dumps: u32,
}

impl Drop for Rings {
    fn drop(&mut self) {
        self.obj.remove();
    }
}

/// The peers whose link of some transport failed since this context's last
/// decision toward them: that decision, if it takes another transport, is
/// the failover and is traced [`TraceRecord::FAILOVER`].
#[derive(Debug, Default)]
pub(super) struct Failover {
    /// Per peer, a bit per transport id that failed toward it.
    failed: Vec<u8>,
    /// Peers with a bit set (the data path looks only at this while 0).
    pending: u32,
}

impl Failover {
    /// Transport `t`'s link to `pe` failed (`up`: it is back).
    pub(super) fn link(&mut self, t: TransportId, pe: u32, up: bool) {
        let bit = t_bit(t);
        let pe = pe as usize;
        if self.failed.len() <= pe {
            if up {
                return;
            }
            self.failed.resize(pe + 1, 0);
        }
        let was = self.failed[pe];
        self.failed[pe] = if up { was & !bit } else { was | bit };
        match (was != 0, self.failed[pe] != 0) {
            (false, true) => self.pending += 1,
            (true, false) => self.pending -= 1,
            _ => {}
        }
    }

    /// The flag of a decision toward `pe` over `t`: FAILOVER when a link
    /// of `pe` failed since the last one and `t` is not that link (the
    /// peer's bits are cleared then).
    #[inline(always)]
    fn take(&mut self, pe: u32, t: TransportId) -> u8 {
        if self.pending == 0 {
            return 0;
        }
        self.take_slow(pe, t)
    }

    #[cold]
    fn take_slow(&mut self, pe: u32, t: TransportId) -> u8 {
        let Some(f) = self.failed.get_mut(pe as usize) else {
            return 0;
        };
        if *f == 0 || *f & t_bit(t) != 0 {
            return 0;
        }
        *f = 0;
        self.pending -= 1;
        TraceRecord::FAILOVER
    }
}

/// Dumps a context's route trace (both rings) into the job's directory
/// when the PE meets a fatal error ([`Context::trace_dumper`]): the rings
/// live as long as the process, and the dump only reads them, so it needs
/// neither the context nor its thread.
#[derive(Debug, Clone, Copy)]
pub struct TraceDumper {
    obj: &'static TraceObject,
    job_id: u64,
    me: u32,
    /// Whether tracing is on (off: nothing to dump).
    on: bool,
}

impl TraceDumper {
    /// Dumps the trace into the job's directory
    /// ([`job_dir`](switchyard_shm::trace_object::job_dir)) as
    /// `trace-pe<ME>-<why>.sytrace`, reporting where with a `tracing`
    /// warning, and returns the file; `None` when tracing is off or the
    /// file cannot be written (a second dump of one name is refused).
    pub fn dump(&self, why: &str) -> Option<PathBuf> {
        self.write(why, None)
    }

    fn write(&self, why: &str, peer: Option<u32>) -> Option<PathBuf> {
        if !self.on {
            return None;
        }
        let me = self.me;
        let name = match peer {
            Some(p) => format!("trace-pe{me}-{why}-{p}.{DUMP_EXT}"),
            None => format!("trace-pe{me}-{why}.{DUMP_EXT}"),
        };
        let written = ensure_job_dir(self.job_id)
            .map_err(|e| e.to_string())
            .and_then(|d| {
                let p = d.join(name);
                self.obj
                    .dump(&p, self.obj.meta().capacity as usize)
                    .map(|()| p)
                    .map_err(|e| e.to_string())
            });
        match written {
            Ok(p) => {
                tracing::warn!(
                    pe = me,
                    peer,
                    reason = why,
                    file = %p.display(),
                    "route trace dumped"
                );
                Some(p)
            }
            Err(e) => {
                tracing::warn!(pe = me, peer, reason = why, "route trace not dumped: {e}");
                None
            }
        }
    }
}

/// The bit of transport `t` in [`Failover`]'s words (the ids in use are
/// below 8).
fn t_bit(t: TransportId) -> u8 {
    1u8.checked_shl(t.index() as u32).unwrap_or(0)
}

/// The trace rings of PE `me` of `n_pes` in `job_id`, `records` records
/// each, and the writer of the initiator ring. In a job (`in_shm`) they are
/// a shared-memory object a reader outside the job can open
/// (`switchyard trace JOB`); when that object cannot be created, process
/// memory, with a warning in `warnings`.
///
/// # Errors
///
/// [`Error::TraceRecords`] when `records` is not a power of two or is above
/// [`TraceRingBox::MAX_CAPACITY`].
pub(super) fn new_rings(
    records: usize,
    job_id: u64,
    me: u32,
    n_pes: u32,
    in_shm: bool,
    warnings: &mut Vec<String>,
) -> Result<(Rings, TraceWriter<'static>)> {
    if !records.is_power_of_two() {
        return Err(Error::TraceRecords(CapacityError::NotPowerOfTwo(records)));
    }
    if records > TraceRingBox::MAX_CAPACITY.min(MAX_TRACE_CAPACITY) {
        return Err(Error::TraceRecords(CapacityError::TooLarge(records)));
    }
    let (anchor_ticks, anchor_unix_ns) = anchor();
    let meta = TraceMeta {
        pe: me,
        n_pes,
        job_id,
        pid: own_pid(),
        capacity: records as u32,
        flags: 0,
        ticks_per_second: crate::sys::ticks_per_second(),
        anchor_ticks,
        anchor_unix_ns,
    };
    let obj = match in_shm.then(|| TraceObject::create(&meta)) {
        Some(Ok(o)) => o,
        Some(Err(e)) => {
            warnings.push(format!("route trace kept in process memory: {e}"));
            TraceObject::in_memory(&meta)?
        }
        None => TraceObject::in_memory(&meta)?,
    };
    let obj: &'static TraceObject = Box::leak(Box::new(obj));
    let writer = obj.writer(INITIATOR).ok_or_else(|| {
        Error::Shm(ShmError::BadObject {
            path: PathBuf::new(),
            why: "trace ring already has a writer".into(),
        })
    })?;
    Ok((Rings { obj, dumps: 0 }, writer))
}

/// A reading of the trace clock and the wall clock (ns since the Unix
/// epoch) taken together: of a few tries, the one whose wall-clock read sat
/// between the closest pair of clock reads (a preemption between them would
/// skew the anchor, and with it every time `switchyard trace` shows).
fn anchor() -> (u64, u64) {
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        let t0 = crate::sys::ticks();
        let w = wall();
        let t1 = crate::sys::ticks();
        let gap = t1.wrapping_sub(t0);
        if gap < best.0 {
            best = (gap, t0 + gap / 2, w);
        }
    }
    (best.1, best.2)
}

impl Rings {
    /// The writer of the target ring, for the TCP driver (once).
    pub(super) fn target_writer(&self) -> Option<TraceWriter<'static>> {
        self.obj.writer(TARGET)
    }
}

impl Context {
    /// The route trace ring: the newest
    /// [`Setup::trace_records`](super::Setup::trace_records) routing
    /// decisions of this context that the trace mode
    /// ([`Setup::trace`](super::Setup::trace)) records (snapshot it with
    /// [`TraceRingBox::snapshot`]). A record's `timestamp` is in ticks of
    /// [`sys::ticks`](crate::sys::ticks);
    /// [`sys::ticks_to_nanos`](crate::sys::ticks_to_nanos) converts them.
    pub fn trace(&self) -> &TraceRingSlice {
        self.trace_ring.obj.ring(INITIATOR)
    }

    /// The ring of the frames this PE applied for its peers over TCP (the
    /// target side of their operations: peer, length, the initiator's
    /// context id); written by the TCP driver when the trace mode is `all`
    /// (replays in any mode but `off`).
    pub fn trace_target(&self) -> &TraceRingSlice {
        self.trace_ring.obj.ring(TARGET)
    }

    /// The shared-memory object that holds this PE's trace rings, if it is
    /// one (in a launched job; `switchyard trace JOB` reads it).
    pub fn trace_object(&self) -> Option<&Path> {
        self.trace_ring.obj.path()
    }

    /// Writes the newest records of both rings to a new file at `path`
    /// (0600; it must not exist), readable by `switchyard trace FILE`.
    ///
    /// # Errors
    ///
    /// [`Error::Shm`] when the file cannot be created or written.
    pub fn dump_trace(&self, path: &Path) -> Result<()> {
        let obj = self.trace_ring.obj;
        Ok(obj.dump(path, obj.meta().capacity as usize)?)
    }

    /// Dumps the trace into the job's directory
    /// ([`job_dir`](switchyard_shm::trace_object::job_dir)) as
    /// `trace-pe<ME>-<why>-<PE>.sytrace`, once per name and at most
    /// [`MAX_DUMPS`] times per context, reporting where with a `tracing`
    /// warning. Called when this PE sees `peer` die or a link to it go down.
    pub(super) fn dump_trace_on(&mut self, why: &str, peer: u32) {
        if self.trace_every == 0 || self.trace_ring.dumps >= MAX_DUMPS {
            return;
        }
        self.trace_ring.dumps += 1;
        self.trace_dumper().write(why, Some(peer));
    }

    /// A handle that dumps this context's route trace without the context
    /// (from a fatal-error path or a panic hook, on any thread).
    pub fn trace_dumper(&self) -> TraceDumper {
        TraceDumper {
            obj: self.trace_ring.obj,
            job_id: self.job_id,
            me: self.me,
            on: self.trace_every != 0,
        }
    }

    /// Writes the trace record of a routed operation (`failed`: the driver
    /// returned an error for it), as the trace mode says: a flagged decision
    /// (failed, downgraded, a load yield, an ordering wait, a CPU atomic)
    /// unless tracing is off, an ordinary one when it is the sample's turn.
    /// A routine downgrade ([`Context::routine_downgrade`]: NEAR over TCP
    /// on a PE without RDMA) is sampled as an ordinary decision.
    /// The counters behind the flags count whatever the mode.
    #[inline(always)]
    pub(super) fn trace_route(
        &mut self,
        pe: u32,
        len: u64,
        frame: FrameOp,
        route: &Route,
        failed: bool,
    ) {
        let mut flags = if route.downgraded {
            TraceRecord::DOWNGRADED
        } else {
            0
        } | core::mem::take(&mut self.next_flags);
        if failed {
            flags |= TraceRecord::ERROR;
        } else if self.cpu_atomics_rule
            && frame == FrameOp::Atomic
            && route.transport != VERBS
            && (route.class == PathClass::Near
                || (route.class == PathClass::Routed
                    && len >= u64::from(self.sel.policy().config().short_threshold)))
            && self.verbs_up(pe)
        {
            flags |= TraceRecord::CPU_ATOMIC;
            self.stats.cpu_atomics += 1;
        }
        if !failed {
            flags |= self.failover.take(pe, route.transport);
        }
        // A downgrade that only passed over RDMA on a PE that has none is
        // every NEAR operation's route there: sampled as an ordinary
        // decision (its record still says downgraded), not kept whole.
        if flags == 0 || (flags == TraceRecord::DOWNGRADED && self.routine_downgrade(route)) {
            // An ordinary decision: one in `trace_every` (off: `trace_left`
            // is 0 and stays 0, so this always returns).
            if self.trace_left > 1 {
                self.trace_left -= 1;
                return;
            }
            if self.trace_left == 0 {
                return;
            }
            self.trace_left = self.trace_every;
        }
        self.trace_record(pe, len, frame, *route, flags, failed);
    }

    /// Whether a downgraded `route` is routine on this PE: it has no verbs,
    /// and the route took TCP's first rail in a class whose candidates are
    /// RDMA then the rails (NEAR, and ROUTED for long messages), so the one
    /// candidate passed over is a transport the PE does not have. A route
    /// that passed over a rail too (the first one down) is not.
    #[inline(always)]
    fn routine_downgrade(&self, route: &Route) -> bool {
        !self.verbs_pe
            && route.transport == super::tcp_rail(0)
            && matches!(route.class, PathClass::Near | PathClass::Routed)
    }

    /// The record of a decision [`Context::trace_route`] keeps, out of line
    /// (the route by value): the operations' fast paths build no record
    /// in their own frame.
    #[inline(never)]
    fn trace_record(
        &mut self,
        pe: u32,
        len: u64,
        frame: FrameOp,
        route: Route,
        flags: u8,
        failed: bool,
    ) {
        let transport = route.transport;
        let now = self.trace_always(TraceRecord {
            seq: route.context.seq,
            src: self.me,
            dst: pe,
            len: u32::try_from(len).unwrap_or(u32::MAX),
            class: route.class.to_wire(),
            transport: route.transport.index() as u8,
            op: frame as u8,
            flags,
            timestamp: 0,
        });
        // The stats segment's latency of a sampled operation, ending at
        // the record's stamp (one clock read for both).
        self.sx_sampled(frame, transport, failed, now);
    }

    /// Writes `rec` into the ring, stamped with the trace clock, unless
    /// tracing is off; returns the stamp (0 when off).
    #[inline]
    pub(super) fn trace_always(&mut self, mut rec: TraceRecord) -> u64 {
        if self.trace_every == 0 {
            return 0;
        }
        rec.timestamp = crate::sys::ticks();
        self.trace.record(&rec);
        rec.timestamp
    }
}

#[cfg(test)]
mod test {
    use switchyard_core::{
        route::Op,
        trace::{RECORD_BYTES, TraceRecord},
    };

    use crate::{
        config::{Config, Key, Source},
        context::{Context, Sym, TRACE_RECORDS},
    };

    /// A one-PE context (no launcher) with `trace_records = records`, or
    /// the default when `None`, recording every decision.
    fn context(records: Option<&str>) -> Context {
        context_tracing(records, "all")
    }

    /// A one-PE context with `trace_records = records` (the default when
    /// `None`) and `trace = mode`.
    fn context_tracing(records: Option<&str>, mode: &str) -> Context {
        let mut cfg = Config::default();
        cfg.set(Key::HeapSize, "1M", Source::Default).unwrap();
        cfg.set(Key::Trace, mode, Source::Default).unwrap();
        if let Some(r) = records {
            cfg.set(Key::TraceRecords, r, Source::Default).unwrap();
        }
        Context::with_config(&cfg).expect("a one-PE context")
    }

    /// Puts of lengths 1, 2, ... 251, 1, ... to the own PE, `count` of
    /// them: each one routing decision, told apart by its length.
    fn puts(ctx: &mut Context, buf: &Sym<u8>, count: usize) {
        let src = [7u8; 251];
        let me = ctx.my_pe();
        for i in 0..count {
            ctx.put(buf, 0, &src[..len_of(i)], me).unwrap();
        }
    }

    fn len_of(i: usize) -> usize {
        i % 251 + 1
    }

    /// The ring holds exactly the newest `records` decisions, oldest first.
    fn keeps_the_newest(ctx: &mut Context, records: usize) {
        let buf = ctx.alloc::<u8>(251).unwrap();
        let before = ctx.trace().written();
        let count = 3 * records + 17;
        puts(ctx, &buf, count);
        let ring = ctx.trace();
        assert_eq!(ring.capacity(), records);
        assert_eq!(ring.written() - before, count);
        let mut out = vec![Default::default(); 2 * records];
        let n = ring.snapshot(&mut out);
        assert_eq!(n, records, "exactly `trace_records` records are kept");
        for (k, r) in out[..n].iter().enumerate() {
            let i = count - records + k;
            assert_eq!(r.len as usize, len_of(i), "record {k} is put {i}");
            assert_eq!(r.dst, ctx.my_pe());
        }
    }

    #[test]
    fn trace_records_sizes_the_ring() {
        let mut ctx = context(Some("64"));
        keeps_the_newest(&mut ctx, 64);
        ctx.finalize().unwrap();
    }

    #[test]
    fn the_default_ring_keeps_4096_records() {
        let mut ctx = context(None);
        keeps_the_newest(&mut ctx, TRACE_RECORDS);
        assert_eq!(TRACE_RECORDS, 4096);
        ctx.finalize().unwrap();
    }

    #[test]
    fn a_ring_the_core_cannot_have_is_an_error() {
        let mut w = Vec::new();
        assert!(super::new_rings(64, 0, 0, 1, false, &mut w).is_ok());
        for bad in [0, 48, 1 << 31] {
            let e = super::new_rings(bad, 0, 0, 1, false, &mut w).expect_err("refused");
            assert!(e.to_string().starts_with("trace_records: "), "{e}");
        }
        assert!(w.is_empty());
    }

    /// What the configuration's documentation says a record costs.
    #[test]
    fn a_record_takes_36_bytes() {
        assert_eq!(RECORD_BYTES, 36);
    }

    /// The records of the decisions since `before`, oldest first.
    fn since(ctx: &Context, before: usize) -> Vec<TraceRecord> {
        let ring = ctx.trace();
        let mut out = vec![TraceRecord::default(); ring.capacity()];
        let n = ring.snapshot(&mut out);
        out.truncate(n);
        let fresh = ring.written() - before;
        out.split_off(n.saturating_sub(fresh))
    }

    /// `all`: one record per operation, stamped by the trace clock in
    /// order; `off`: none, not even of a failed selection; the context ids
    /// run on in both.
    #[test]
    fn all_records_every_decision_and_off_none() {
        let mut ctx = context_tracing(None, "all");
        let buf = ctx.alloc::<u8>(251).unwrap();
        let before = ctx.trace().written();
        puts(&mut ctx, &buf, 100);
        let recs = since(&ctx, before);
        assert_eq!(recs.len(), 100);
        for (i, w) in recs.windows(2).enumerate() {
            assert_eq!(w[1].seq, w[0].seq + 1, "record {i}");
            assert!(w[1].timestamp >= w[0].timestamp, "record {i}");
            assert_eq!(w[1].len as usize, len_of(i + 1));
        }
        assert!(recs[0].timestamp > 0);
        ctx.finalize().unwrap();

        let mut ctx = context_tracing(None, "off");
        let buf = ctx.alloc::<u8>(251).unwrap();
        let seq = ctx.route(0, 8, Op::Put).unwrap().context.seq;
        puts(&mut ctx, &buf, 100);
        let me = ctx.my_pe();
        assert!(ctx.put(&buf, 0, &[1], me + 7).is_err(), "no such PE");
        assert_eq!(ctx.trace().written(), 0, "nothing recorded");
        let next = ctx.route(0, 8, Op::Put).unwrap().context.seq;
        assert!(next > seq + 100, "context ids assigned: {seq} then {next}");
        ctx.finalize().unwrap();
    }

    /// `sample:N`: the N-th, 2N-th, ... ordinary decisions, each with its
    /// own context id; a failed selection is recorded whatever its turn.
    #[test]
    fn sample_records_one_decision_in_n_and_every_failure() {
        let mut ctx = context_tracing(None, "sample:10");
        let buf = ctx.alloc::<u8>(251).unwrap();
        let before = ctx.trace().written();
        puts(&mut ctx, &buf, 100);
        let recs = since(&ctx, before);
        assert_eq!(recs.len(), 10, "100 decisions, one in 10");
        for (k, r) in recs.iter().enumerate() {
            assert_eq!(r.flags, 0);
            // Consecutive records are 10 decisions apart.
            if k > 0 {
                assert_eq!(r.seq, recs[k - 1].seq + 10, "record {k}");
                assert_eq!(len_of_record(r, &recs[k - 1]), 10);
            }
        }
        let me = ctx.my_pe();
        let at = ctx.trace().written();
        assert!(ctx.put(&buf, 0, &[1], me + 7).is_err(), "no such PE");
        let recs = since(&ctx, at);
        assert_eq!(recs.len(), 1, "the failure is recorded at once");
        assert_eq!(recs[0].flags, TraceRecord::ERROR);
        assert_eq!(recs[0].dst, me + 7);
        ctx.finalize().unwrap();
    }

    /// Puts between two records (by their lengths' cycle).
    fn len_of_record(r: &TraceRecord, prev: &TraceRecord) -> usize {
        (r.len as usize + 251 - prev.len as usize) % 251
    }

    /// The default mode is a sample: one decision in 64.
    #[test]
    fn the_default_samples_one_decision_in_64() {
        let mut cfg = Config::default();
        cfg.set(Key::HeapSize, "1M", Source::Default).unwrap();
        let mut ctx = Context::with_config(&cfg).expect("a one-PE context");
        let buf = ctx.alloc::<u8>(251).unwrap();
        let before = ctx.trace().written();
        puts(&mut ctx, &buf, 640);
        assert_eq!(ctx.trace().written() - before, 10);
        ctx.finalize().unwrap();
    }

    /// A fatal error's dump: the trace written to the job's directory from
    /// the dumper alone (another thread), readable back, once per name.
    #[test]
    fn a_fatal_dump_lands_in_the_job_directory() {
        let mut ctx = context(None);
        let buf = ctx.alloc::<u8>(251).unwrap();
        puts(&mut ctx, &buf, 10);
        let dumper = ctx.trace_dumper();
        let path = std::thread::spawn(move || dumper.dump("fatal"))
            .join()
            .unwrap()
            .expect("dumped");
        let dir = switchyard_shm::trace_object::job_dir(ctx.job_id());
        assert_eq!(
            path,
            dir.join(format!("trace-pe{}-fatal.sytrace", ctx.my_pe()))
        );
        let obj = switchyard_shm::trace_object::TraceObject::open(&path).unwrap();
        let recs = obj.snapshot(switchyard_shm::trace_object::INITIATOR, 100);
        assert!(recs.len() >= 10, "{} records", recs.len());
        assert!(dumper.dump("fatal").is_none(), "one dump per name");
        let _ = std::fs::remove_dir_all(dir);
        ctx.finalize().unwrap();
    }
}
