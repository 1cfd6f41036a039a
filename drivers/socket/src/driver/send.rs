//! The send path, from an operation to the socket.
//!
//! [`put_frames`] cuts a put at placement-block boundaries
//! ([`Ctx::chunk_at`](super::Ctx::chunk_at)), and [`push_frame`] seals each
//! frame (header, CRC, the payload copied unless it comes from the heap)
//! into the peer's replay ring, under the credit window and the ramp: the
//! ring *is* the send queue. [`get_frame`], [`atomic_frame`] and
//! [`put_signal_frame`] do the same for one get, atomic or put with signal. [`kick`] then writes right away what is queued on
//! a rail, through [`flush_conn`]: per connection, a partly written frame
//! first, then its [`OutBuf`] (control frames, get and atomic replies), then
//! the ring frames assigned to it in sequence order, gathered into one
//! `send`/`sendmsg` of up to [`BATCH`] frames (a heap payload as its own
//! range, zero copy; ranges next to each other in the ring as one).

use std::os::fd::AsRawFd;

use switchyard_core::{
    crc::{crc32c, crc32c_append},
    route::ContextId,
    transport::{AtomicOp, LinkState},
    wire::{
        ATOMIC_PAYLOAD, FrameOp, FrameSignal, HEADER_LEN, HeaderFields, SIGNAL_TRAILER, encode,
        flags, seal,
    },
};

use super::{
    Ctx,
    connection::{Conn, Down, Peer, PeerState, Phase, rail_down},
    recovery::check_fence,
    tickets::NO_SLOT,
};
use crate::{
    Result, SocketError,
    compact::{self, COMPACT_LEN, COMPACT_MAGIC, COMPACT_MAX_PAYLOAD, CompactPut},
    replay::{Entry, Full, Payload},
    sys,
};

/// Header fields with the usual defaults.
#[allow(clippy::too_many_arguments)]
pub(super) fn fields(
    op: FrameOp,
    flags: u8,
    aux: u8,
    src: u32,
    dst: u32,
    seq: u64,
    ack: u64,
    context: u64,
    offset: u64,
    span: u32,
) -> HeaderFields {
    HeaderFields {
        op: op as u8,
        flags,
        aux,
        src_pe: src,
        dst_pe: dst,
        seq,
        ack,
        context,
        topo_version: 0,
        offset,
        span,
    }
}

/// Recomputes the CRC of a 64-byte header (and of `payload` when the header
/// says `PAYLOAD_CRC`) after a header field changed.
fn reseal(hdr: &mut [u8], payload: &[u8]) {
    let mut crc = crc32c(&hdr[..60]);
    crc = crc32c_append(crc, &[0; 4]);
    if hdr[4] & flags::PAYLOAD_CRC != 0 {
        crc = crc32c_append(crc, payload);
    }
    hdr[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// Bytes waiting to be written on one connection (control frames, replies),
/// in a fixed buffer.
#[derive(Debug)]
pub(super) struct OutBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl OutBuf {
    pub(super) fn new(cap: usize) -> OutBuf {
        OutBuf {
            buf: vec![0u8; cap].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    pub(super) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn advance(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.clear();
        }
    }

    /// `n` writable bytes at the end, or `None` when they do not fit.
    pub(super) fn reserve(&mut self, n: usize) -> Option<&mut [u8]> {
        if self.buf.len() - self.end < n && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < n {
            return None;
        }
        let end = self.end;
        Some(&mut self.buf[end..end + n])
    }

    pub(super) fn commit(&mut self, n: usize) {
        self.end += n;
    }

    /// Appends a whole frame; `false` when it does not fit.
    pub(super) fn frame(&mut self, f: &HeaderFields, payload: &[u8], crc: bool) -> bool {
        let n = HEADER_LEN + payload.len();
        let Some(b) = self.reserve(n) else {
            return false;
        };
        if encode(b, f, payload, crc).is_err() {
            return false;
        }
        self.commit(n);
        true
    }
}

/// A multi-frame put that stopped half way on a full window, so that the
/// retry of the same call continues where it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Resume {
    rail: usize,
    offset: u64,
    src: usize,
    len: u64,
    from_heap: bool,
    done: u64,
}

/// Where a put's payload comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source<'a> {
    Copy(&'a [u8]),
    Heap(u64, u32),
    /// A put with signal's data, then its trailer (signal offset, value).
    Signal(&'a [u8], [u8; SIGNAL_TRAILER as usize]),
}

impl Source<'_> {
    fn len(&self) -> u64 {
        match self {
            Source::Copy(s) => s.len() as u64,
            Source::Heap(_, l) => u64::from(*l),
            Source::Signal(s, t) => (s.len() + t.len()) as u64,
        }
    }
}

/// Puts of at least this many bytes are written at once ([`kick`] eager):
/// batching only pays for small frames.
const EAGER_PUT: u64 = 4096;

pub(super) fn put_frames(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    offset: u64,
    src: Source<'_>,
    cx: ContextId,
) -> Result<()> {
    let len = src.len();
    if len == 0 {
        return Ok(());
    }
    let max = u64::from(ctx.cfg.max_frame_payload);
    let key = Resume {
        rail,
        offset,
        src: match src {
            Source::Copy(s) | Source::Signal(s, _) => s.as_ptr() as usize,
            Source::Heap(o, _) => o as usize,
        },
        len,
        from_heap: matches!(src, Source::Heap(..)),
        done: 0,
    };
    // A put after a fence is often a flag the target waits for: it and what
    // queued before it go out at once.
    let fenced = p.st.fence_flag;
    let mut done = match p.st.resume {
        Some(r) if Resume { done: 0, ..r } == key => r.done,
        _ => 0,
    };
    if done == 0 {
        check_fence(ctx, p, rail, offset, len)?;
    }
    while done < len {
        let chunk = ctx.chunk_at(offset + done, len - done, max);
        let payload = match src {
            Source::Copy(s) | Source::Signal(s, _) => {
                Source::Copy(&s[done as usize..(done + chunk) as usize])
            }
            Source::Heap(o, _) => Source::Heap(o + done, chunk as u32),
        };
        if push_frame(
            ctx,
            p,
            rail,
            FrameOp::Put,
            0,
            offset + done,
            chunk as u32,
            payload,
            NO_SLOT,
            false,
            cx,
        )
        .is_err()
        {
            p.st.resume = Some(Resume { done, ..key });
            kick(ctx, p, rail, true);
            return Err(SocketError::WouldBlock {
                peer: p.st.pe,
                what: "send window",
            });
        }
        done += chunk;
    }
    p.st.resume = None;
    kick(ctx, p, rail, fenced || len >= EAGER_PUT);
    Ok(())
}

/// One `PutSignal` frame: `src` at `offset`, then `signal` (which fits:
/// [`SocketDriver::put_signal_fits`](super::SocketDriver::put_signal_fits)).
/// A fence called before applies to it as to a put; the data is ordered
/// before the signal by the frame itself. Written at once: the target waits
/// for the signal.
pub(super) fn put_signal_frame(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    offset: u64,
    src: &[u8],
    signal: FrameSignal,
    cx: ContextId,
) -> Result<()> {
    check_fence(ctx, p, rail, offset, src.len() as u64)?;
    let mut trailer = [0u8; SIGNAL_TRAILER as usize];
    trailer[..8].copy_from_slice(&signal.offset.to_le_bytes());
    trailer[8..].copy_from_slice(&signal.value.to_le_bytes());
    push_frame(
        ctx,
        p,
        rail,
        FrameOp::PutSignal,
        signal.kind as u8,
        offset,
        src.len() as u32,
        Source::Signal(src, trailer),
        NO_SLOT,
        false,
        cx,
    )
    .map_err(|_| SocketError::WouldBlock {
        peer: p.st.pe,
        what: "send window",
    })?;
    kick(ctx, p, rail, true);
    Ok(())
}

pub(super) fn get_frame(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    offset: u64,
    len: u32,
    slot: u32,
    cx: ContextId,
) -> Result<()> {
    push_frame(
        ctx,
        p,
        rail,
        FrameOp::Get,
        0,
        offset,
        len,
        Source::Copy(&[]),
        slot,
        true,
        cx,
    )
    .map(|_| ())
    .map_err(|_| SocketError::WouldBlock {
        peer: p.st.pe,
        what: "send window",
    })
}

pub(super) fn atomic_frame(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    offset: u64,
    op: &AtomicOp,
    slot: u32,
    cx: ContextId,
) -> Result<()> {
    let mut payload = [0u8; ATOMIC_PAYLOAD as usize];
    payload[..8].copy_from_slice(&op.operand.to_le_bytes());
    payload[8..].copy_from_slice(&op.compare.to_le_bytes());
    push_frame(
        ctx,
        p,
        rail,
        FrameOp::Atomic,
        op.kind as u8,
        offset,
        op.width.bytes() as u32,
        Source::Copy(&payload),
        slot,
        op.is_fetching(),
        cx,
    )
    .map(|_| ())
    .map_err(|_| SocketError::WouldBlock {
        peer: p.st.pe,
        what: "send window",
    })
}

/// Appends one sequenced frame to `p`'s replay ring, assigned to `rail`.
#[allow(clippy::too_many_arguments)]
fn push_frame(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    op: FrameOp,
    aux: u8,
    offset: u64,
    span: u32,
    payload: Source<'_>,
    slot: u32,
    awaiting_reply: bool,
    cx: ContextId,
) -> core::result::Result<u64, Full> {
    let plen = payload.len() as u32;
    let credit = HEADER_LEN as u32 + plen;
    if p.st.ring.next_seq().saturating_sub(p.st.acked + 1) >= p.st.ramp {
        ctx.stats.ramp_waits += 1;
        return Err(Full);
    }
    if p.st.credit.available() < u64::from(credit) {
        return Err(Full);
    }
    let crc = plen > 0 && ctx.want_crc(&mut p.st, plen);
    let mut flags_ = 0;
    if p.st.fence_flag {
        flags_ |= flags::FENCE;
    }
    let conn = ctx.conn_for(offset);
    let base = p.st.dedup.base();
    let f = fields(
        op, flags_, aux, ctx.me, p.st.pe, 0, base, cx.seq, offset, span,
    );
    // The frame carries the ack: no standalone one is owed for what it covers.
    if base >= p.st.ack_sent {
        p.st.ack_sent = base;
        p.st.unacked_since = None;
    }
    // A small copied put to a peer that decodes them: a compact frame.
    let compact = op == FrameOp::Put
        && p.st.compact
        && matches!(payload, Source::Copy(s) if (1..=COMPACT_MAX_PAYLOAD).contains(&s.len()));
    let stored = match payload {
        Source::Copy(s) if compact => COMPACT_LEN + s.len(),
        Source::Copy(s) => HEADER_LEN + s.len(),
        Source::Signal(s, t) => HEADER_LEN + s.len() + t.len(),
        Source::Heap(..) => HEADER_LEN,
    };
    let mut entry = Entry::new(rail as u8, credit, awaiting_reply);
    entry.payload = match payload {
        Source::Heap(o, l) => Payload::Heap { offset: o, len: l },
        Source::Copy(_) | Source::Signal(..) => Payload::InRing,
    };
    entry.conn = conn;
    entry.slot = slot;
    entry.op = op as u8;
    let heap = &ctx.heap;
    let seq = p.st.ring.push(stored, entry, |buf, seq| {
        let f = HeaderFields { seq, ..f };
        match payload {
            Source::Copy(s) if compact => {
                buf[COMPACT_LEN..COMPACT_LEN + s.len()].copy_from_slice(s);
                let c = CompactPut {
                    flags: f.flags,
                    seq,
                    ack: f.ack,
                    context: f.context,
                    offset: f.offset,
                };
                let _ = compact::seal(buf, &c, s.len());
            }
            Source::Copy(s) => {
                buf[HEADER_LEN..HEADER_LEN + s.len()].copy_from_slice(s);
                let _ = seal(buf, &f, s.len(), crc);
            }
            Source::Signal(s, t) => {
                let at = HEADER_LEN + s.len();
                buf[HEADER_LEN..at].copy_from_slice(s);
                buf[at..at + t.len()].copy_from_slice(&t);
                let _ = seal(buf, &f, s.len() + t.len(), crc);
            }
            Source::Heap(o, l) => {
                let _ = seal(buf, &f, 0, false);
                buf[44..48].copy_from_slice(&l.to_le_bytes());
                if crc {
                    buf[4] |= flags::PAYLOAD_CRC;
                }
                reseal(&mut buf[..HEADER_LEN], heap.slice(o, l as usize));
            }
        }
    })?;
    // Cannot fail: checked above.
    let _ = p.st.credit.try_consume(u64::from(credit));
    if let Some(c) = p
        .rails
        .get_mut(rail)
        .and_then(|r| r.conns.get_mut(usize::from(conn)))
    {
        c.queued = c.queued.saturating_add(1);
    }
    p.st.fence_flag = false;
    Ok(seq)
}

/// Most ring frames one write gathers, and most puts a connection queues
/// before [`kick`] writes them without waiting for the next progress step.
pub(super) const BATCH: usize = 32;

/// `iovec`s of one gathered write: a partly written frame (header and heap
/// payload), the out buffer, and [`BATCH`] frames of two ranges each.
const IOVECS: usize = 2 * BATCH + 3;

/// Tries to write what is queued on `rail` toward `p` right away.
///
/// With `eager` false (puts), a data connection that was already written by
/// a `kick` since the last progress step, and holds fewer than [`BATCH`]
/// new frames, is left alone: a send is in flight, and what queues behind
/// it goes out in one gathered write with the next progress step (every
/// `quiet_poll`, `get_poll`, wait and progress thread takes one), or as soon
/// as [`BATCH`] frames wait. The first put after a progress step goes out at
/// once, so a lone put's latency is unchanged. Non-blocking gets
/// (`get_into_heap`, completed by a later quiet) batch the same way. Blocking
/// gets and atomics (`eager`) always write at once: their caller waits for
/// the reply; so do puts of
/// [`EAGER_PUT`] bytes or more, and the first put after a fence (the flag
/// of put, fence, put-flag), which takes what queued before it along.
pub(super) fn kick(ctx: &mut Ctx, p: &mut Peer, rail: usize, eager: bool) {
    if p.rails[rail].state != LinkState::Up {
        return;
    }
    let Peer { rails, st } = p;
    let rl = &mut rails[rail];
    let mut failed = false;
    for c in 1..rl.conns.len() {
        let conn = &mut rl.conns[c];
        if !eager && conn.kick_step == ctx.steps && usize::from(conn.queued) < BATCH {
            continue;
        }
        conn.kick_step = ctx.steps;
        match flush_conn(ctx, st, conn, rail, c, true) {
            Ok(true) => rl.last_tx = ctx.now,
            Ok(false) => {}
            Err(()) => failed = true,
        }
    }
    if failed {
        rail_down(ctx, p, rail, Down::Failure);
    }
}

pub(super) fn flush_rail_control(ctx: &mut Ctx, p: &mut Peer, r: usize) {
    let Peer { rails, st } = p;
    let rl = &mut rails[r];
    match flush_conn(ctx, st, &mut rl.conns[0], r, 0, false) {
        Ok(true) => rl.last_tx = ctx.now,
        Ok(false) => {}
        Err(()) => rail_down(ctx, p, r, Down::Failure),
    }
}

/// Writes what `conn` has queued: a partly written frame, then its out
/// buffer, then (with `data`) the replay-ring frames assigned to it, in
/// sequence order, gathered [`BATCH`] frames at a time into one
/// `send`/`sendmsg` (a heap payload goes out from the heap, no copy).
/// A short write leaves the frame it stopped in as the partly written one
/// and the frames after it unsent, exactly as they were.
/// `Ok(true)` when bytes went out; `Err` when the connection failed.
pub(super) fn flush_conn(
    ctx: &mut Ctx,
    st: &mut PeerState,
    conn: &mut Conn,
    rail: usize,
    c: usize,
    data: bool,
) -> core::result::Result<bool, ()> {
    let Some(sock) = &conn.sock else {
        return Ok(false);
    };
    let fd = sock.as_raw_fd();
    let data = data && conn.phase == Phase::Up;
    if data {
        conn.queued = 0;
    }
    let mut wrote = false;
    loop {
        if let Some((seq, _)) = conn.partial
            && st.ring.get(seq).is_none()
        {
            conn.partial = None;
        }
        // Nothing to write (an idle progress step): no gather to set up.
        if conn.partial.is_none()
            && conn.out.pending().is_empty()
            && (!data || conn.cursor.max(st.ring.tail_seq()) >= st.ring.next_seq())
        {
            return Ok(wrote);
        }
        // The next ring frames for this connection (a frame written before,
        // on a failed connection, goes out marked as a replay, its header
        // re-sealed).
        let mut picked = [0u64; BATCH];
        let mut n_picked = 0;
        let mut scanned = conn.cursor;
        if data {
            conn.cursor = conn.cursor.max(st.ring.tail_seq());
            scanned = conn.cursor;
            let skip = conn.partial.map(|(s, _)| s);
            while n_picked < BATCH && scanned < st.ring.next_seq() {
                let s = scanned;
                scanned += 1;
                let Some(e) = st.ring.get(s).copied() else {
                    continue;
                };
                if e.sent
                    || !e.outstanding()
                    || usize::from(e.rail()) != rail
                    || usize::from(e.conn) != c
                    || skip == Some(s)
                {
                    continue;
                }
                picked[n_picked] = s;
                n_picked += 1;
                if e.ever_sent {
                    mark_replay(ctx, st, &e);
                }
            }
        }
        // One gathered write.
        let (n, gathered, partial_left, out_len) = {
            let mut g = sys::Gather::<IOVECS>::new();
            let mut partial_left = 0;
            if let Some((seq, done)) = conn.partial
                && let Some(e) = st.ring.get(seq)
            {
                let (hdr, body) = frame_parts(ctx, st, e);
                partial_left = hdr.len() + body.len() - done;
                if done < hdr.len() {
                    g.push(&hdr[done..]);
                    g.push(body);
                } else {
                    g.push(&body[done - hdr.len()..]);
                }
            }
            let out_len = conn.out.pending().len();
            g.push(conn.out.pending());
            for &s in &picked[..n_picked] {
                if let Some(e) = st.ring.get(s) {
                    let (hdr, body) = frame_parts(ctx, st, e);
                    debug_assert!(g.room(2));
                    g.push(hdr);
                    g.push(body);
                }
            }
            if g.bytes() == 0 {
                conn.cursor = scanned;
                return Ok(wrote);
            }
            let n = sys::sendv(fd, &g).map_err(|_| ())?;
            (n, g.bytes(), partial_left, out_len)
        };
        if n == 0 {
            ctx.stats.would_block += 1;
            return Ok(wrote);
        }
        wrote = true;
        ctx.stats.writes += 1;
        ctx.stats.bytes_sent += n as u64;
        // Account what went out, in the order it was gathered.
        let mut left = n;
        let mut released = false;
        if let Some((seq, done)) = conn.partial {
            if left < partial_left {
                conn.partial = Some((seq, done + left));
                left = 0;
            } else {
                left -= partial_left;
                conn.partial = None;
                frame_written(ctx, st, seq);
                released = true;
            }
        }
        let k = left.min(out_len);
        conn.out.advance(k);
        left -= k;
        conn.cursor = scanned;
        for &s in &picked[..n_picked] {
            let Some(e) = st.ring.get_mut(s) else {
                continue;
            };
            if left == 0 {
                // Not started: the next write picks it up again.
                conn.cursor = s;
                break;
            }
            // From its first byte on the wire, a later send is a replay.
            if e.ever_sent {
                ctx.stats.replayed += 1;
                st.counts[rail].replayed += 1;
            }
            e.ever_sent = true;
            let total = e.stored
                + match e.payload {
                    Payload::Heap { len, .. } => len as usize,
                    Payload::InRing => 0,
                };
            if left < total {
                e.pinned = true;
                conn.partial = Some((s, left));
                left = 0;
            } else {
                left -= total;
                frame_written(ctx, st, s);
                released = true;
            }
        }
        if released {
            st.ring.release();
        }
        if n < gathered {
            // The socket buffer is full: the rest waits for a later step.
            return Ok(wrote);
        }
        if n_picked < BATCH {
            return Ok(wrote);
        }
    }
}

/// A ring frame's bytes: its stored part (header, copied payload) and its
/// payload in the heap (empty unless `put_from_heap`).
fn frame_parts<'a>(ctx: &'a Ctx, st: &'a PeerState, e: &Entry) -> (&'a [u8], &'a [u8]) {
    let heap: &[u8] = match e.payload {
        Payload::Heap { offset, len } => ctx.heap.slice(offset, len as usize),
        Payload::InRing => &[],
    };
    (st.ring.bytes(e), heap)
}

/// Frame `seq` was fully written.
fn frame_written(ctx: &mut Ctx, st: &mut PeerState, seq: u64) {
    ctx.stats.frames_sent += 1;
    if let Some(e) = st.ring.get_mut(seq) {
        e.pinned = false;
        e.sent = true;
        e.ever_sent = true;
    }
}

/// Sets `REPLAY` in the header of `e` (written before, on a failed
/// connection) and re-seals it; nothing when it is already set.
fn mark_replay(ctx: &Ctx, st: &mut PeerState, e: &Entry) {
    let _ = set_flag(ctx, st, e, flags::REPLAY, true);
}

/// Sets `flag` in the header of ring frame `e` and re-seals it (nothing when
/// it is already set). A compact frame takes it only when `compact_ok`;
/// returns whether the frame carries the flag now.
fn set_flag(ctx: &Ctx, st: &mut PeerState, e: &Entry, flag: u8, compact_ok: bool) -> bool {
    let heap = &ctx.heap;
    let b = st.ring.bytes_mut(e.at, e.stored);
    if b[..2] == COMPACT_MAGIC.to_le_bytes() {
        if !compact_ok {
            return false;
        }
        if b[2] & flag == 0 {
            b[2] |= flag;
            compact::reseal(b);
        }
        return true;
    }
    if b[4] & flag == 0 {
        b[4] |= flag;
        let (hdr, rest) = b.split_at_mut(HEADER_LEN);
        let payload = match e.payload {
            Payload::Heap { offset, len } => heap.slice(offset, len as usize),
            Payload::InRing => &rest[..],
        };
        reseal(hdr, payload);
    }
    true
}

/// Marks the last frame queued toward `p` `ACK_NOW`, for a `quiet`: the
/// target acks as soon as it has applied it, and the quiet needs no request
/// of its own. Only a frame not written yet (nor partly) on an Up rail, and
/// only when every earlier unacked frame travels on its connection (one
/// TCP stream: the target has applied them all when it acks this one);
/// a compact frame only toward a peer that reads the flag in one
/// ([`FEATURE_COMPACT_ACK`](crate::handshake::FEATURE_COMPACT_ACK)).
/// Returns whether it did.
pub(super) fn flag_last_for_ack(ctx: &Ctx, p: &mut Peer) -> bool {
    let st = &mut p.st;
    let last = st.ring.next_seq() - 1;
    let Some(e) = st.ring.get(last).copied() else {
        return false;
    };
    if e.sent
        || e.pinned
        || e.acked()
        || p.rails.get(usize::from(e.rail())).map(|r| r.state) != Some(LinkState::Up)
    {
        return false;
    }
    let mut s = st.ring.tail_seq().max(st.acked + 1);
    while s < last {
        if let Some(x) = st.ring.get(s)
            && !x.acked()
            && (x.rail() != e.rail() || x.conn != e.conn)
        {
            return false;
        }
        s += 1;
    }
    set_flag(ctx, st, &e, flags::ACK_NOW, st.compact_ack)
}
