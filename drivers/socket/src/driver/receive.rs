//! The receive path, from the socket to the target's heap.
//!
//! [`read_conn`] reads a connection into its
//! [`StreamDecoder`](crate::decode::StreamDecoder) (at most [`READ_BUDGET`]
//! bytes a step), takes the peer's `Hello` answer on a connection still in
//! its handshake, and hands every other checked frame to [`handle_frame`],
//! the target side: it takes the ack the frame carries, drops a sequence
//! already applied ([`DedupWindow`](crate::dedup::DedupWindow)), writes a
//! put's payload into the heap (a put with signal's, then its signal word,
//! Release-ordered), answers a get or an atomic into the
//! connection's out buffer (a replayed fetching atomic from the cache),
//! completes this PE's own gets and atomics from their replies, and counts
//! what is owed back (acks, credit).

use std::os::fd::AsRawFd;

use switchyard_core::{
    trace::TraceRecord,
    transport::{AtomicOp, AtomicWidth},
    wire::{AtomicKind, Frame, FrameOp, HEADER_LEN, flags, seal},
};

use super::{
    ATOMIC_CACHE, Ctx,
    connection::{Conn, Down, PeerState, Phase, accept_hello},
    recovery::{ACK_FRAMES, on_ack},
    send::{OutBuf, fields},
    tickets::{SLOT_BITS, SlotState},
};
use crate::{
    Event,
    dedup::Seen,
    handshake::{Hello, Role, decode_challenge},
    sys,
};

/// The `transport` of a target-side trace record of a frame that came over
/// TCP rail 0 (the route trace's transport index of the first TCP rail; rail
/// `r` is this plus `r`).
const TRANSPORT_TCP: u8 = 2;

/// Bytes read per connection per progress step, at most.
const READ_BUDGET: usize = 1 << 20;

/// What handling one incoming frame asks of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Done,
    /// No room for the reply yet: keep the frame, stop reading.
    Stall,
    /// Malformed or a protocol violation: cut the connection.
    Cut,
    /// The peer closes in order.
    Close,
}

/// Reads what `conn` has and handles its whole frames. `Ok((busy, got
/// bytes))`, or why the connection must go.
pub(super) fn read_conn(
    ctx: &mut Ctx,
    st: &mut PeerState,
    conn: &mut Conn,
    rail: usize,
    c: usize,
) -> core::result::Result<(bool, bool), Down> {
    let Some(sock) = &conn.sock else {
        return Ok((false, false));
    };
    let fd = sock.as_raw_fd();
    let mut busy = false;
    let mut got = false;
    let mut budget = READ_BUDGET;
    // A short read emptied the socket: after its frames, return instead of
    // asking the kernel again (that `recv` would almost always say EAGAIN,
    // and cost a system call between the frame and the waiting caller).
    let mut drained = false;
    loop {
        loop {
            let f = match conn.dec.peek() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(_) => return Err(Down::BadFrame),
            };
            ctx.stats.frames_received += 1;
            if conn.phase == Phase::ChallengeWait {
                // The accepting side's challenge: answer with our sealed Hello.
                let challenge = (f.op() == Some(FrameOp::Hello))
                    .then(|| decode_challenge(f.payload()))
                    .flatten();
                let Some(challenge) = challenge else {
                    return Err(Down::BadFrame);
                };
                conn.nonce = ctx.nonces.next();
                let hello = ctx.hello(st, rail, c, conn.nonce).seal(
                    &ctx.cfg.key,
                    Role::Connect,
                    ctx.cfg.job_id,
                    &challenge,
                );
                let frame = hello.frame();
                let Some(b) = conn.out.reserve(frame.len()) else {
                    return Err(Down::Failure);
                };
                b.copy_from_slice(&frame);
                conn.out.commit(frame.len());
                conn.phase = Phase::HelloSent;
                // What this Hello offers holds from its first byte on.
                conn.dec
                    .accept_compact(ctx.cfg.compact_puts.then_some((st.pe, ctx.me)));
                conn.dec.consume();
                busy = true;
                continue;
            }
            if conn.phase == Phase::HelloSent {
                let hello = (f.op() == Some(FrameOp::Hello))
                    .then(|| Hello::decode(f.payload()))
                    .flatten()
                    .filter(|h| {
                        h.is_authentic(&ctx.cfg.key, Role::Accept, ctx.cfg.job_id, &conn.nonce)
                            && h.src == st.pe
                            && h.dst == ctx.me
                            && usize::from(h.rail) == rail
                            && usize::from(h.conn) == c
                    });
                let Some(h) = hello else {
                    return Err(Down::BadFrame);
                };
                conn.hello = Some((h.applied, h.granted));
                if h.heap_len > 0 {
                    st.heap_len = h.heap_len;
                }
                accept_hello(ctx, st, conn, &h);
                conn.phase = Phase::Up;
                conn.dec.consume();
                busy = true;
                continue;
            }
            match handle_frame(ctx, st, &mut conn.out, &f, rail) {
                Verdict::Done => {
                    conn.dec.consume();
                    busy = true;
                }
                Verdict::Stall => return Ok((busy, got)),
                Verdict::Cut => return Err(Down::BadFrame),
                Verdict::Close => return Err(Down::Closed),
            }
        }
        if budget == 0 || drained {
            break;
        }
        let spare = conn.dec.spare();
        if spare.is_empty() {
            break;
        }
        let room = spare.len();
        match sys::recv(fd, spare) {
            Ok(Some(0)) | Err(_) => return Err(Down::Failure),
            Ok(Some(n)) => {
                conn.dec.commit(n);
                ctx.stats.bytes_received += n as u64;
                budget = budget.saturating_sub(n);
                got = true;
                drained = n < room;
            }
            Ok(None) => break,
        }
    }
    Ok((busy, got))
}

/// Applies one checked frame from the peer of `st`, which came on `rail`.
fn handle_frame(
    ctx: &mut Ctx,
    st: &mut PeerState,
    out: &mut OutBuf,
    f: &Frame<&[u8]>,
    rail: usize,
) -> Verdict {
    let h = f.header();
    let Some(op) = f.op() else {
        return Verdict::Cut;
    };
    if h.src_pe.get() != st.pe || h.dst_pe.get() != ctx.me {
        return Verdict::Cut;
    }
    on_ack(st, h.ack.get());
    let fl = h.flags;
    match op {
        FrameOp::Put | FrameOp::Get | FrameOp::Atomic | FrameOp::PutSignal => {}
        FrameOp::GetReply => {
            let seq = h.seq.get();
            let Some(&e) = st.ring.get(seq) else {
                return Verdict::Done;
            };
            if !e.awaiting_reply() || e.op != FrameOp::Get as u8 {
                return Verdict::Done;
            }
            let Some(idx) = ctx.gets.find(e.slot) else {
                st.ring.answered(seq);
                return Verdict::Done;
            };
            let s = ctx.gets.slots[idx];
            let data = f.payload();
            if data.len() != s.len as usize {
                return Verdict::Cut;
            }
            if s.state == SlotState::Pending {
                match s.into_heap {
                    Some(at) => {
                        ctx.heap.write(at, data);
                        ctx.gets.free(idx);
                    }
                    None => {
                        ctx.gets.arena[s.at..s.at + data.len()].copy_from_slice(data);
                        ctx.gets.slots[idx].state = SlotState::Done;
                    }
                }
            }
            st.ring.answered(seq);
            return Verdict::Done;
        }
        FrameOp::AtomicReply => {
            let seq = h.seq.get();
            let Some(&e) = st.ring.get(seq) else {
                return Verdict::Done;
            };
            if !e.awaiting_reply() || e.op != FrameOp::Atomic as u8 {
                return Verdict::Done;
            }
            let idx = (e.slot & ((1 << SLOT_BITS) - 1)) as usize;
            let v = u64::from_le_bytes(f.payload().try_into().unwrap_or([0; 8]));
            if let Some(s) = ctx.atomics.get_mut(idx)
                && s.gen_ == (e.slot >> SLOT_BITS) as u16
                && s.state == SlotState::Pending
            {
                s.value = v;
                s.state = SlotState::Done;
            }
            st.ring.answered(seq);
            return Verdict::Done;
        }
        FrameOp::Ack => return Verdict::Done,
        FrameOp::Credit => {
            let g = u64::from_le_bytes(f.payload().try_into().unwrap_or([0; 8]));
            st.credit.on_grant(g);
            return Verdict::Done;
        }
        FrameOp::Heartbeat => {
            if fl & flags::ACK_NOW != 0 {
                st.ack_now = true;
            }
            return Verdict::Done;
        }
        FrameOp::LinkState => {
            let Ok(record) = <[u8; 32]>::try_from(f.payload()) else {
                return Verdict::Cut;
            };
            ctx.event(Event::LinkState {
                from: st.pe,
                record,
            });
            return Verdict::Done;
        }
        FrameOp::Close => return Verdict::Close,
        FrameOp::Hello => return Verdict::Cut,
    }
    // A sequenced, heap-touching frame.
    let seq = h.seq.get();
    let Ok(range) = f.check_heap(ctx.heap.len()) else {
        return Verdict::Cut;
    };
    // A put with signal: its signal word is checked like the data.
    let signal = if op == FrameOp::PutSignal {
        match f.signal(ctx.heap.len()) {
            Ok(s) => Some(s),
            Err(_) => return Verdict::Cut,
        }
    } else {
        None
    };
    let seen = st.dedup.check(seq);
    if seen == Seen::OutOfWindow {
        return Verdict::Cut;
    }
    // Asked to ack at once (a quiet's last frame), a replay too: the ack
    // goes in this progress step (`send_acks`).
    if fl & flags::ACK_NOW != 0 {
        st.ack_now = true;
    }
    let (me, pe) = (ctx.me, st.pe);
    if let Some(t) = ctx.trace.as_mut()
        && (t.all || seen == Seen::Duplicate)
    {
        t.writer.record(&TraceRecord {
            seq: h.context.get(),
            src: pe,
            dst: me,
            len: if op == FrameOp::Put {
                f.payload().len() as u32
            } else {
                h.span.get()
            },
            // The target does not know the class the initiator chose.
            class: TraceRecord::NO_CLASS,
            transport: TRANSPORT_TCP + rail as u8,
            op: op as u8,
            flags: if seen == Seen::Duplicate {
                TraceRecord::RETRIED
            } else {
                0
            },
            timestamp: (t.clock)(),
        });
    }
    // A reply carries the ack of the request it answers too: the request is
    // marked applied before its reply is sealed, so the initiator's ring
    // entry completes with the reply alone, without waiting for a standalone
    // ack (up to ACK_DELAY, or a quiet's round trip on the control
    // connection).
    let mut marked = false;
    let mut replied = false;
    let reply_fields = |op: FrameOp, ack: u64, span: u32| {
        fields(op, 0, 0, me, pe, seq, ack, h.context.get(), 0, span)
    };
    match op {
        FrameOp::Put => {
            if seen == Seen::Duplicate {
                ctx.stats.duplicates_dropped += 1;
                st.counts[rail].duplicates_dropped += 1;
                return Verdict::Done;
            }
            ctx.heap.write(range.start, f.payload());
        }
        FrameOp::PutSignal => {
            if seen == Seen::Duplicate {
                ctx.stats.duplicates_dropped += 1;
                st.counts[rail].duplicates_dropped += 1;
                return Verdict::Done;
            }
            let Some(s) = signal else {
                return Verdict::Cut;
            };
            // The data, then the signal: a Release store (set) or an AcqRel
            // fetch_add (add), so that whoever sees the signal with Acquire
            // sees the data.
            ctx.heap.write(range.start, f.put_data());
            let op = AtomicOp {
                kind: s.kind,
                width: AtomicWidth::W64,
                operand: s.value,
                compare: 0,
                fetch: true,
            };
            ctx.heap.atomic(s.offset, &op);
        }
        FrameOp::Get => {
            // Answered again when replayed: reads are idempotent.
            let len = h.span.get();
            let total = HEADER_LEN + len as usize;
            let crc = ctx.want_crc(st, len);
            let Some(b) = out.reserve(total) else {
                return Verdict::Stall;
            };
            if seen == Seen::New {
                st.dedup.mark(seq);
                marked = true;
            }
            let rf = reply_fields(FrameOp::GetReply, st.dedup.base(), len);
            ctx.heap.read(range.start, &mut b[HEADER_LEN..]);
            let _ = seal(b, &rf, len as usize, crc);
            out.commit(total);
            replied = true;
            if seen == Seen::Duplicate {
                return Verdict::Done;
            }
        }
        FrameOp::Atomic => {
            let kind = AtomicKind::from_u8(h.aux).unwrap_or(AtomicKind::Fetch);
            let p = f.payload();
            let op = AtomicOp {
                kind,
                width: if h.span.get() == 8 {
                    AtomicWidth::W64
                } else {
                    AtomicWidth::W32
                },
                operand: u64::from_le_bytes(p[..8].try_into().unwrap_or([0; 8])),
                compare: u64::from_le_bytes(p[8..16].try_into().unwrap_or([0; 8])),
                fetch: true,
            };
            let fetching = op.is_fetching();
            let slot = (seq % ATOMIC_CACHE as u64) as usize;
            if seen == Seen::Duplicate {
                let (s, v) = st.atomic_cache[slot];
                if fetching && s == seq {
                    let rf = reply_fields(FrameOp::AtomicReply, st.dedup.base(), 0);
                    if !out.frame(&rf, &v.to_le_bytes(), true) {
                        return Verdict::Stall;
                    }
                } else {
                    ctx.stats.duplicates_dropped += 1;
                    st.counts[rail].duplicates_dropped += 1;
                }
                return Verdict::Done;
            }
            if fetching && out.reserve(HEADER_LEN + 8).is_none() {
                return Verdict::Stall;
            }
            let old = op.width.truncate(ctx.heap.atomic(range.start, &op));
            st.dedup.mark(seq);
            marked = true;
            if fetching {
                st.atomic_cache[slot] = (seq, old);
                let rf = reply_fields(FrameOp::AtomicReply, st.dedup.base(), 0);
                replied = out.frame(&rf, &old.to_le_bytes(), true);
            }
        }
        _ => return Verdict::Cut,
    }
    if !marked {
        st.dedup.mark(seq);
    }
    let bytes = (HEADER_LEN + f.payload().len()) as u64;
    if st.granter.on_receive(bytes).is_err() {
        return Verdict::Cut;
    }
    let _ = st.granter.on_release(bytes);
    st.rx_frames += 1;
    st.rx_bytes += bytes;
    if replied {
        // The reply carries the ack: no standalone one is owed for it.
        st.ack_sent = st.ack_sent.max(st.dedup.base());
        st.unacked_since = None;
    } else if st.unacked_since.is_none() {
        st.unacked_since = Some(ctx.now);
    }
    if st.rx_frames >= ACK_FRAMES || st.rx_bytes >= u64::from(ctx.cfg.window) / 4 {
        // Piggybacked on the next reply or sent by this step's ack pass.
        st.ack_now = true;
    }
    Verdict::Done
}
