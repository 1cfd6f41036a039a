//! The baselines of the rate tests (`put-rate`, `get-rate`, `atomic-rate`):
//! each runs its test's loop with nothing of the library in it, `rounds`
//! rounds of `window` operations after `warm` unmeasured rounds
//! ([`Rounds`]), the clock started at the first measured round and read
//! after the last; the result is operations per second.
//!
//! Over shared memory the target is a [`SharedMap`] that a second process
//! maps too (a fork, pinned to `cpus.1`: PE 1's role); the timing side runs
//! on a thread pinned to `cpus.0` (PE 0's role):
//!
//! * `raw-store` (put-rate): per operation, the operation's sequence number
//!   goes into the first (up to) 8 bytes of a `size`-byte buffer and the
//!   buffer is copied into the mapping (`memcpy`: plain stores); per round, a
//!   Release store of the round number into a counter the other process
//!   polls: the least a quiet can cost. After the run the other process
//!   checks that the data holds the last operation's number.
//! * `raw-load` (get-rate): per operation, `size` bytes the other process
//!   wrote before the run are copied out of the mapping (plain loads) into a
//!   local buffer; per round an Acquire fence (loads need no completion).
//!   The buffer is then checked against what the other process wrote.
//! * `raw-atomic` (atomic-rate, window 1): per operation one `fetch_add(1)` on
//!   a word of the mapping that the other process initialised, its old
//!   value checked against the count so far; after the run the other
//!   process checks the total.
//!
//! Over TCP (a connected pair of non-blocking sockets with TCP_NODELAY, both
//! sides busy-polling, yielding the CPU after 64 empty polls as the
//! library's adaptive progress does ([`Poll::Yield`]), along a
//! [`TcpPath`]):
//!
//! * `tcp-records` (put-rate): per round the writer sends `window` records of
//!   `size` bytes (each with its sequence number in its first 8 bytes) in one
//!   `send`, the freedom to coalesce queued records that a put stream has,
//!   then waits for the reader's count of the records it has received so far
//!   (8 bytes), as a quiet waits for every put to be acknowledged. The reader
//!   counts records; the writer checks every count.
//! * `tcp-rr` (get-rate with its window; atomic-rate with window 1, as its
//!   fetch-adds are blocking): a request/response stream with `window`
//!   requests outstanding. Per round the client sends `window` 16-byte
//!   requests (a sequence number and an operand) in one `send` and reads
//!   `window` replies; the server reads whatever requests have arrived and
//!   answers them in one `send`: a get with `size` bytes copied from a
//!   buffer, a fetch-add with the old value of a counter it then adds the
//!   operand to. The client checks every fetch-add's old value, and a get's
//!   bytes after the run.

use std::{
    io,
    sync::atomic::{Ordering, fence},
};

use switchyard::config::format_size;

use super::{Poll, TcpPath, recv_some, recv_spin, send_spin, tcp_pair};
use crate::perf::{
    Rounds,
    peer::{self, ABORT, READY, SharedMap},
    stats::Measurement,
};

/// Control word: the timing side's progress (rounds done, or 1 when done).
const DONE: usize = 1;

/// The other process's exit status when its check failed.
const BAD_DATA: u8 = 2;
/// The other process's exit status when it gave up waiting.
const GAVE_UP: u8 = 3;

/// `raw-atomic`'s counter starts here (the other process stores it), so a
/// fetch-add on a word nobody initialised shows.
const ATOMIC_BASE: u64 = 0x5A5A_0000_0000;

/// Byte `j` of the block a get-rate (and `raw-load`, `tcp-rr` get) reads,
/// for message size `size`: never zero, different for each size.
pub fn pattern_byte(size: usize, j: usize) -> u8 {
    (0x5A ^ size as u8 ^ (j as u8).wrapping_mul(31)) | 1
}

/// The `size`-byte block of [`pattern_byte`]s.
pub fn pattern(size: usize) -> Vec<u8> {
    (0..size).map(|j| pattern_byte(size, j)).collect()
}

/// The first (up to) 8 bytes of `v`, little-endian, as the low bytes of a
/// `u64`: what a `k`-byte message holding sequence number `v` carries.
fn low_bytes(v: u64, k: usize) -> u64 {
    if k >= 8 {
        v
    } else {
        v & ((1u64 << (8 * k)) - 1)
    }
}

/// Runs a shared-memory rate baseline: maps `data_len` bytes, forks the
/// other process running `peer` (which stores `READY` when set up), waits
/// for it, and runs `me` on a thread pinned to `cpus.0`; `me` returns the
/// measured operations and seconds. `peer` runs in a forked child: no
/// allocation, no panic (see [`peer::with_peer`]).
fn forked<P, M>(
    name: &'static str,
    size: usize,
    cpus: (usize, usize),
    peer: P,
    me: M,
) -> Result<Measurement, String>
where
    P: FnOnce(&SharedMap) -> u8 + Send + 'static,
    M: FnOnce(&SharedMap) -> Result<(u64, f64), String> + Send + 'static,
{
    let run = || -> Result<Measurement, String> {
        let (r, code) = peer::forked(size.max(8), cpus, peer, me)?;
        let (ops, secs) = r?;
        match code {
            0 => Ok(Measurement::throughput(name, size as u64, ops, secs)),
            BAD_DATA => Err("the other process found wrong data after the run".into()),
            GAVE_UP => Err("the other process gave up waiting".into()),
            c => Err(format!("the other process ended with status {c}")),
        }
    };
    run().map_err(|e| format!("{name} {}: {e}", format_size(size as u64)))
}

/// `raw-store`: the floor of `put-rate` over shared memory (module doc).
///
/// # Errors
///
/// The mapping or the fork failing, or the other process not finding the
/// last operation's data, as text.
pub fn raw_store(size: usize, r: Rounds, cpus: (usize, usize)) -> Result<Measurement, String> {
    let size = size.max(1);
    let k = size.min(8);
    let last = r.total_ops();
    let peer = move |m: &SharedMap| {
        m.word(READY).store(1, Ordering::Release);
        if !peer::spin_until(m.word(DONE), r.warm + r.rounds, m.word(ABORT)) {
            return GAVE_UP;
        }
        let got = u64::from_le(m.data_word(0).load(Ordering::Relaxed));
        if low_bytes(got, k) == low_bytes(last, k) {
            0
        } else {
            BAD_DATA
        }
    };
    forked("raw-store", size, cpus, peer, move |m| {
        let mut buf = vec![0xA5u8; size];
        let mut seq = 0u64;
        let secs = r.time(|round| {
            for _ in 0..r.window {
                seq += 1;
                buf[..k].copy_from_slice(&seq.to_le_bytes()[..k]);
                // SAFETY: the other process reads the data only after the
                // last round's count (below), when no copy is running.
                #[allow(unsafe_code)]
                unsafe {
                    m.copy_in(&buf);
                }
            }
            // SYNC POINT with the other process's Acquire load in
            // `spin_until`: this round's stores come before its count.
            m.word(DONE).store(round + 1, Ordering::Release);
            Ok::<(), String>(())
        })?;
        Ok((r.ops(), secs))
    })
}

/// `raw-load`: the floor of `get-rate` over shared memory (module doc).
///
/// # Errors
///
/// As [`raw_store`], or the loads not returning what the other process
/// wrote.
pub fn raw_load(size: usize, r: Rounds, cpus: (usize, usize)) -> Result<Measurement, String> {
    let size = size.max(1);
    let peer = move |m: &SharedMap| {
        for i in 0..size.div_ceil(8) {
            let mut w = [0u8; 8];
            for (b, j) in w.iter_mut().zip(8 * i..) {
                *b = pattern_byte(size, j);
            }
            m.data_word(i)
                .store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        // SYNC POINT with the timing side's Acquire load in `spin_until`
        // (in `forked`): the block is written before it is read.
        m.word(READY).store(1, Ordering::Release);
        if peer::spin_until(m.word(DONE), 1, m.word(ABORT)) {
            0
        } else {
            GAVE_UP
        }
    };
    forked("raw-load", size, cpus, peer, move |m| {
        let mut buf = vec![0u8; size];
        let secs = r.time(|_| {
            for _ in 0..r.window {
                // SAFETY: the other process wrote the block before READY and
                // writes nothing after it.
                #[allow(unsafe_code)]
                unsafe {
                    m.copy_out(&mut buf);
                }
            }
            fence(Ordering::Acquire);
            Ok::<(), String>(())
        })?;
        // SYNC POINT with the other process's Acquire load in `spin_until`.
        m.word(DONE).store(1, Ordering::Release);
        if buf != pattern(size) {
            return Err("the loads did not return what the other process wrote".into());
        }
        Ok((r.ops(), secs))
    })
}

/// `raw-atomic`: the floor of `atomic-rate` over shared memory (module doc).
///
/// # Errors
///
/// As [`raw_store`], or a fetch-add returning another value than the count
/// so far.
pub fn raw_atomic(r: Rounds, cpus: (usize, usize)) -> Result<Measurement, String> {
    let total = r.total_ops();
    let peer = move |m: &SharedMap| {
        m.data_word(0).store(ATOMIC_BASE, Ordering::Relaxed);
        // SYNC POINT with the timing side's Acquire load in `spin_until`.
        m.word(READY).store(1, Ordering::Release);
        if !peer::spin_until(m.word(DONE), 1, m.word(ABORT)) {
            return GAVE_UP;
        }
        if m.data_word(0).load(Ordering::Acquire) == ATOMIC_BASE.wrapping_add(total) {
            0
        } else {
            BAD_DATA
        }
    };
    forked("raw-atomic", 8, cpus, peer, move |m| {
        let w = m.data_word(0);
        let mut expect = ATOMIC_BASE;
        let secs = r.time(|_| {
            for _ in 0..r.window {
                let old = w.fetch_add(1, Ordering::AcqRel);
                if old != expect {
                    return Err(format!(
                        "a fetch-add returned {old:#x}, the count so far is {expect:#x}"
                    ));
                }
                expect += 1;
            }
            Ok::<(), String>(())
        })?;
        // SYNC POINT with the other process's Acquire load in `spin_until`:
        // every fetch-add comes before the done word.
        m.word(DONE).store(1, Ordering::Release);
        Ok((r.ops(), secs))
    })
}

/// `tcp-records`: the ceiling of `put-rate` over TCP (module doc).
///
/// # Errors
///
/// A namespace that cannot be entered, a socket error, a stall longer than
/// 20 s, or a count that is not the records sent, as text.
pub fn tcp_records(
    size: usize,
    r: Rounds,
    path: &TcpPath,
    cpus: (usize, usize),
) -> Result<Measurement, String> {
    let size = size.max(1);
    let w = usize::try_from(r.window).unwrap_or(1);
    let (secs, ()) = tcp_pair(
        path,
        cpus,
        move |s| {
            s.set_nonblocking(true)?;
            let k = size.min(8);
            let mut buf = vec![0x5Au8; w * size];
            let mut ack = [0u8; 8];
            let mut seq = 0u64;
            let secs = r.time(|_| {
                for rec in buf.chunks_exact_mut(size) {
                    seq += 1;
                    rec[..k].copy_from_slice(&seq.to_le_bytes()[..k]);
                }
                send_spin(&s, &buf, Poll::Yield)?;
                recv_spin(&s, &mut ack, Poll::Yield)?;
                let n = u64::from_le_bytes(ack);
                if n != seq {
                    return Err(io::Error::other(format!(
                        "the reader counted {n} records where {seq} were sent"
                    )));
                }
                Ok::<(), io::Error>(())
            })?;
            Ok(secs)
        },
        move |s| {
            s.set_nonblocking(true)?;
            let round_bytes = (w * size) as u64;
            let mut buf = vec![0u8; (w * size).clamp(4096, 1 << 20)];
            let (mut got, mut acked) = (0u64, 0u64);
            while acked < r.warm + r.rounds {
                got += recv_some(&s, &mut buf, Poll::Yield)? as u64;
                while got >= (acked + 1) * round_bytes {
                    acked += 1;
                    send_spin(&s, &(got / size as u64).to_le_bytes(), Poll::Yield)?;
                }
            }
            Ok(())
        },
    )
    .map_err(|e| format!("tcp-records {}: {e}", format_size(size as u64)))?;
    Ok(Measurement::throughput(
        "tcp-records",
        size as u64,
        r.ops(),
        secs,
    ))
}

/// What a `tcp-rr` request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rr {
    /// A get of this many bytes.
    Get(usize),
    /// A fetch-add on an 8-byte counter.
    FetchAdd,
}

/// Bytes of a `tcp-rr` request: a sequence number and an operand.
const RR_REQUEST: usize = 16;

/// `tcp-rr`: the ceiling of `get-rate` and `atomic-rate` over TCP (module
/// doc), with `r.window` requests outstanding.
///
/// # Errors
///
/// As [`tcp_records`], or a reply that is not what was asked for.
pub fn tcp_rr(
    op: Rr,
    r: Rounds,
    path: &TcpPath,
    cpus: (usize, usize),
) -> Result<Measurement, String> {
    let reply = match op {
        Rr::Get(n) => n.max(1),
        Rr::FetchAdd => 8,
    };
    let w = usize::try_from(r.window).unwrap_or(1);
    let (secs, ()) = tcp_pair(
        path,
        cpus,
        move |s| {
            s.set_nonblocking(true)?;
            let mut req = vec![0u8; RR_REQUEST * w];
            let mut rep = vec![0u8; reply * w];
            let (mut seq, mut old_expect) = (0u64, 0u64);
            let secs = r.time(|_| {
                for q in req.chunks_exact_mut(RR_REQUEST) {
                    seq += 1;
                    q[..8].copy_from_slice(&seq.to_le_bytes());
                    q[8..].copy_from_slice(&1u64.to_le_bytes());
                }
                send_spin(&s, &req, Poll::Yield)?;
                recv_spin(&s, &mut rep, Poll::Yield)?;
                if op == Rr::FetchAdd {
                    for a in rep.chunks_exact(8) {
                        let old = u64::from_le_bytes(a.try_into().unwrap_or_default());
                        if old != old_expect {
                            return Err(io::Error::other(format!(
                                "a fetch-add returned {old}, the count so far is {old_expect}"
                            )));
                        }
                        old_expect += 1;
                    }
                }
                Ok::<(), io::Error>(())
            })?;
            if let Rr::Get(_) = op {
                let want = pattern(reply);
                if rep.chunks_exact(reply).any(|c| c != want.as_slice()) {
                    return Err(io::Error::other(
                        "a get returned other bytes than the block",
                    ));
                }
            }
            Ok(secs)
        },
        move |s| {
            s.set_nonblocking(true)?;
            let block = pattern(reply);
            let mut inbuf = vec![0u8; (RR_REQUEST * w).max(64 << 10)];
            let mut out = Vec::with_capacity(reply * (inbuf.len() / RR_REQUEST));
            let (mut have, mut served, mut counter) = (0usize, 0u64, 0u64);
            while served < r.total_ops() {
                have += recv_some(&s, &mut inbuf[have..], Poll::Yield)?;
                let whole = have / RR_REQUEST * RR_REQUEST;
                out.clear();
                for q in inbuf[..whole].chunks_exact(RR_REQUEST) {
                    match op {
                        Rr::Get(_) => out.extend_from_slice(&block),
                        Rr::FetchAdd => {
                            let operand = u64::from_le_bytes(q[8..].try_into().unwrap_or_default());
                            out.extend_from_slice(&counter.to_le_bytes());
                            counter = counter.wrapping_add(operand);
                        }
                    }
                    served += 1;
                }
                inbuf.copy_within(whole..have, 0);
                have -= whole;
                send_spin(&s, &out, Poll::Yield)?;
            }
            Ok(())
        },
    )
    .map_err(|e| format!("tcp-rr {}: {e}", format_size(reply as u64)))?;
    Ok(Measurement::throughput(
        "tcp-rr",
        reply as u64,
        r.ops(),
        secs,
    ))
}
