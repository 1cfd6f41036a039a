//! Remote memory access: put and get (blocking and non-blocking), and this
//! PE's own copy of a symmetric block.

use switchyard_core::{route::Op, transport::Transport, wire::FrameOp};
use zerocopy::IntoBytes;

use super::{Context, Error, Plain, Result, Sym, route::Selected, size32};

impl Context {
    /// Reads elements of this PE's own copy of `sym` (other PEs may write it at
    /// any time: this is a copy, never a reference).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`], [`Error::ForeignHandle`].
    pub fn read_local<T: Plain>(&mut self, sym: &Sym<T>, at: usize, dst: &mut [T]) -> Result<()> {
        let off = self.check(sym, at, dst.len())?;
        let t = self.shm.get_start(
            self.me,
            off,
            dst.len() as u32 * size32::<T>(),
            self.sel_ctx(),
        )?;
        self.shm.get_poll(&t, dst.as_mut_bytes())?;
        Ok(())
    }

    /// Writes elements of this PE's own copy of `sym`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`], [`Error::ForeignHandle`].
    pub fn write_local<T: Plain>(&mut self, sym: &Sym<T>, at: usize, src: &[T]) -> Result<()> {
        let off = self.check(sym, at, src.len())?;
        self.shm.put(self.me, off, src.as_bytes(), self.sel_ctx())?;
        Ok(())
    }

    /// Writes `src` to elements `at..` of `pe`'s copy of `dst`. Returns when
    /// `src` may be reused; complete at `pe` after [`Context::quiet`] (or a
    /// barrier).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`] (nothing written), [`Error::Route`], driver
    /// errors naming the peer.
    #[inline]
    pub fn put<T: Plain>(&mut self, dst: &Sym<T>, at: usize, src: &[T], pe: u32) -> Result<()> {
        let off = self.check(dst, at, src.len())?;
        let bytes = src.as_bytes();
        let len = bytes.len() as u64;
        // The route decision, per message; on shared memory the shm leg
        // stores at once, anything else runs the generic loop out of line.
        let sel = self.select(pe, len, Op::Put, FrameOp::Put);
        if let Ok(route) = &sel
            && self.leg_open(pe, route)
            && self.shm.put_leg(pe, off, bytes)
        {
            self.leg_done(pe, len, FrameOp::Put, route);
            return Ok(());
        }
        // A small put to a TCP rail under a `dedicated` progress thread:
        // one push on this context's submission ring.
        if let Ok(route) = &sel
            && self.ring_put(pe, off, bytes, route)
        {
            return Ok(());
        }
        self.put_slow(sel, pe, off, bytes)
    }

    /// The rest of a put the shm leg did not take: the generic loop from
    /// selection `sel`. Cold and not generic, so the caller's fast path
    /// builds no closure and passes its values in registers.
    #[cold]
    #[inline(never)]
    pub(super) fn put_slow(
        &mut self,
        sel: Selected,
        pe: u32,
        off: u64,
        bytes: &[u8],
    ) -> Result<()> {
        let len = bytes.len() as u64;
        self.routed_from(Some(sel), pe, len, Op::Put, FrameOp::Put, &mut |d, r| {
            d.put(pe, off, bytes, r.context)
        })
        .map(|(r, _)| r)
    }

    /// Non-blocking put from this PE's own copy of `src` (elements
    /// `src_at..src_at+count`) to `pe`'s copy of `dst` (from `dst_at`). The
    /// source must not change, and the target is not complete, until
    /// [`Context::quiet`].
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn put_nbi<T: Plain>(
        &mut self,
        dst: &Sym<T>,
        dst_at: usize,
        src: &Sym<T>,
        src_at: usize,
        count: usize,
        pe: u32,
    ) -> Result<()> {
        let (doff, soff, len) = self.nbi_span(dst, dst_at, src, src_at, count)?;
        self.routed(pe, u64::from(len), Op::Put, FrameOp::Put, |shm, r| {
            shm.put_from_heap(pe, doff, soff, len, r.context)
        })
    }

    /// Reads elements `at..at+dst.len()` of `pe`'s copy of `src` into `dst`;
    /// returns when they are there.
    ///
    /// # Errors
    ///
    /// As [`Context::put`], plus [`Error::Timeout`].
    #[inline]
    pub fn get<T: Plain>(&mut self, src: &Sym<T>, at: usize, dst: &mut [T], pe: u32) -> Result<()> {
        let off = self.check(src, at, dst.len())?;
        let len = u32::try_from(core::mem::size_of_val(dst)).map_err(|_| Error::OutOfBounds {
            at,
            count: dst.len(),
            len: src.len,
        })?;
        let dst = dst.as_mut_bytes();
        let chunk = self.get_chunk();
        // One chunk (always, on shared memory): the route decision here, and
        // the shm leg loads at once, no ticket; otherwise the selection goes
        // to the generic loop (out of line).
        let mut first = None;
        if len <= chunk {
            let sel = self.select(pe, u64::from(len), Op::Get, FrameOp::Get);
            if let Ok(route) = &sel
                && self.leg_open(pe, route)
                && self.shm.get_leg(pe, off, dst)
            {
                self.leg_done(pe, u64::from(len), FrameOp::Get, route);
                return Ok(());
            }
            first = Some(sel);
        }
        self.get_slow(first, pe, off, dst, chunk)
    }

    /// The most bytes one get asks for: the chunk every driver in use can
    /// buffer (TCP holds replies until polled).
    #[inline(always)]
    fn get_chunk(&self) -> u32 {
        self.tcp
            .as_ref()
            .map_or(u32::MAX, |t| t.max_get_len())
            .min(self.verbs_max_get)
            .max(1)
    }

    /// The rest of a get the shm leg did not take: the generic loop, chunk
    /// by chunk, the first from selection `first` when the caller made one.
    /// Cold and not generic, as [`Context::put_slow`].
    #[cold]
    #[inline(never)]
    fn get_slow(
        &mut self,
        mut first: Option<Selected>,
        pe: u32,
        off: u64,
        dst: &mut [u8],
        chunk: u32,
    ) -> Result<()> {
        // The caller checked that the length fits.
        let len = dst.len() as u32;
        let mut done = 0u32;
        loop {
            let n = (len - done).min(chunk);
            let part = &mut dst[done as usize..(done + n) as usize];
            let at_off = off + u64::from(done);
            self.routed_wait(
                first.take(),
                pe,
                u64::from(n),
                Op::Get,
                FrameOp::Get,
                "get",
                |d, r| d.get_start(pe, at_off, n, r.context),
                |d, t| Ok(d.get_poll(t, part)?.then_some(())),
            )?;
            done += n;
            if done >= len {
                break;
            }
        }
        Ok(())
    }

    /// Non-blocking get: elements `src_at..src_at+count` of `pe`'s copy of
    /// `src` land in this PE's copy of `dst` (from `dst_at`) by
    /// [`Context::quiet`].
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn get_nbi<T: Plain>(
        &mut self,
        dst: &Sym<T>,
        dst_at: usize,
        src: &Sym<T>,
        src_at: usize,
        count: usize,
        pe: u32,
    ) -> Result<()> {
        let (doff, soff, len) = self.nbi_span(dst, dst_at, src, src_at, count)?;
        self.routed(pe, u64::from(len), Op::Get, FrameOp::Get, |shm, r| {
            shm.get_into_heap(pe, soff, doff, len, r.context)
        })
    }

    /// The heap offsets of elements `dst_at..` of `dst` and `src_at..` of
    /// `src`, and the bytes of `count` elements: what a non-blocking put or
    /// get moves.
    fn nbi_span<T>(
        &self,
        dst: &Sym<T>,
        dst_at: usize,
        src: &Sym<T>,
        src_at: usize,
        count: usize,
    ) -> Result<(u64, u64, u32)> {
        let doff = self.check(dst, dst_at, count)?;
        let soff = self.check(src, src_at, count)?;
        let len =
            u32::try_from(count * core::mem::size_of::<T>()).map_err(|_| Error::OutOfBounds {
                at: src_at,
                count,
                len: src.len,
            })?;
        Ok((doff, soff, len))
    }

    /// A put of raw bytes at a heap offset (the context's own reserved area).
    pub(super) fn put_raw(&mut self, pe: u32, off: u64, bytes: &[u8]) -> Result<()> {
        self.routed(pe, bytes.len() as u64, Op::Put, FrameOp::Put, |shm, r| {
            shm.put(pe, off, bytes, r.context)
        })
    }
}
