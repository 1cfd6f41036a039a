//! The route trace ring: one binary record per routing decision (and per
//! failed one), written without allocating or formatting. The ring keeps the
//! newest [`Setup::trace_records`](super::Setup::trace_records) records
//! (`trace_records` in the configuration), allocated once at init.

use std::path::PathBuf;

use switchyard_core::{
    class::PathClass,
    route::Route,
    trace::{TraceRecord, TraceRingBox, TraceWriter},
    wire::FrameOp,
};
use switchyard_shm::ShmError;

use super::{Context, Error, Result, VERBS};

/// Records the route trace ring keeps by default (`trace_records`' default).
pub const TRACE_RECORDS: usize = 4096;

/// A context's trace ring of `records` records (allocated here, once; it
/// lives as long as the process, like the topology) and its writer.
///
/// # Errors
///
/// [`Error::TraceRecords`] when `records` is not a power of two or is above
/// [`TraceRingBox::MAX_CAPACITY`].
pub(super) fn new_ring(records: usize) -> Result<(&'static TraceRingBox, TraceWriter<'static>)> {
    let ring: &'static TraceRingBox = Box::leak(Box::new(
        TraceRingBox::new(records).map_err(Error::TraceRecords)?,
    ));
    let writer = ring.writer().ok_or_else(|| {
        Error::Shm(ShmError::BadObject {
            path: PathBuf::new(),
            why: "trace ring already has a writer".into(),
        })
    })?;
    Ok((ring, writer))
}

impl Context {
    /// The route trace ring: the newest
    /// [`Setup::trace_records`](super::Setup::trace_records) routing
    /// decisions of this context (snapshot it with
    /// [`TraceRingBox::snapshot`]).
    pub fn trace(&self) -> &TraceRingBox {
        self.trace_ring
    }

    /// Writes the trace record of a routed operation (`failed`: the driver
    /// returned an error for it).
    #[inline]
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
        let rec = TraceRecord {
            seq: route.context.seq,
            src: self.me,
            dst: pe,
            len: u32::try_from(len).unwrap_or(u32::MAX),
            class: route.class.to_wire(),
            transport: route.transport.index() as u8,
            op: frame as u8,
            flags,
            timestamp: crate::sys::ticks(),
        };
        self.trace.record(&rec);
    }
}

#[cfg(test)]
mod test {
    use switchyard_core::trace::RECORD_BYTES;

    use crate::{
        config::{Config, Key, Source},
        context::{Context, Sym, TRACE_RECORDS},
    };

    /// A one-PE context (no launcher) with `trace_records = records`, or
    /// the default when `None`.
    fn context(records: Option<&str>) -> Context {
        let mut cfg = Config::default();
        cfg.set(Key::HeapSize, "1M", Source::Default).unwrap();
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
        assert!(super::new_ring(64).is_ok());
        for bad in [0, 48] {
            let e = super::new_ring(bad).expect_err("not a power of two");
            assert!(e.to_string().starts_with("trace_records: "), "{e}");
        }
    }

    /// What the configuration's documentation says a record costs.
    #[test]
    fn a_record_takes_36_bytes() {
        assert_eq!(RECORD_BYTES, 36);
    }
}
