//! The algorithms, over a [`Group`]'s links. Each one documents its
//! schedule; the pure parts (who talks to whom in which round) are plain
//! functions with unit tests.
//!
//! | collective | algorithm | rounds | data path |
//! |---|---|---|---|
//! | sync | dissemination | ⌈log2 n⌉ | none |
//! | broadcast | binomial tree, largest subtree first | ⌈log2 n⌉ | put straight into each child's `dest`, children forward from their own `dest` |
//! | fcollect | Bruck (dissemination allgather) | ⌈log2 n⌉ | put straight into `dest`, forwarding what arrived |
//! | collect | Hillis–Steele scan of the sizes, then one put per member, quiet, sync | ⌈log2 n⌉ + 1 sync | put straight into `dest` |
//! | alltoall(s) | one put per member (rotated start), quiet, sync | 1 sync | put straight into `dest` |
//! | reductions | binomial reduce to rank 0 in chunks, then broadcast of the result | chunks + 2⌈log2 n⌉ | partials pulled from the child's outbox (two halves: the child fills one while the parent reads the other) |
//!
//! Reductions combine in a fixed order, the same on every PE and for every
//! timing: the result over ranks `[a, b)` is `f(a, b) = v[a] ⊕ f(a+1, a+2)
//! ⊕ f(a+2, a+4) ⊕ f(a+4, a+8) …` (each range cut at `b`) evaluated left to
//! right, each term being the subtree of one child ([`tree_fold`] is this
//! order, sequentially).
//! Integer results are exact in any order; floating-point results equal
//! [`tree_fold`] of the same inputs bit for bit, and every PE gets the same bits.

use switchyard::context::{Context, Plain, Result, Sym};

use super::{
    link::{Dir, Group},
    ops::Combine,
};

/// Bytes of a reduction chunk (stack buffers and team outboxes).
pub const CHUNK: usize = 16384;

/// Most bytes one put_nbi moves (its length is 32-bit).
const MAX_PUT: usize = 1 << 30;

/// The highest set bit of `vr > 0`: its binomial-broadcast parent is
/// `vr - 2^j`, reached over forward link `j`.
#[inline]
pub fn bcast_parent_link(vr: u32) -> u32 {
    debug_assert!(vr > 0);
    31 - vr.leading_zeros()
}

/// Forward links on which relative rank `vr` sends in a binomial broadcast
/// over `n` ranks, largest subtree first.
pub fn bcast_child_links(vr: u32, n: u32) -> impl Iterator<Item = u32> {
    let lo = if vr == 0 {
        0
    } else {
        bcast_parent_link(vr) + 1
    };
    (lo..super::link::rounds(n))
        .rev()
        .filter(move |&k| u64::from(vr) + (1u64 << k) < u64::from(n))
}

/// Backward links on which rank `r` receives partials in the reduction
/// tree (rooted at rank 0), smallest subtree first: children `r + 2^k` for
/// `2^k` below the lowest set bit of `r` (every `k` for the root).
pub fn reduce_child_links(r: u32, n: u32) -> impl Iterator<Item = u32> {
    let hi = if r == 0 { 32 } else { r.trailing_zeros() };
    (0..hi.min(super::link::rounds(n))).filter(move |&k| u64::from(r) + (1u64 << k) < u64::from(n))
}

/// The forward link from rank `r > 0`'s reduction parent (`r - 2^k`, `k` the
/// lowest set bit), over which its acknowledgements come.
#[inline]
pub fn reduce_parent_link(r: u32) -> u32 {
    debug_assert!(r > 0);
    r.trailing_zeros()
}

/// Block ranges `[b, b + len)` that rank `r` sends in Bruck round `k`
/// (blocks `r .. r + cnt` modulo `n`, in at most two pieces).
pub fn bruck_pieces(r: u32, k: u32, n: u32) -> [(u32, u32); 2] {
    let step = 1u64 << k;
    let cnt = step.min(u64::from(n) - step) as u32;
    let first = cnt.min(n - r);
    [(r, first), (0, cnt - first)]
}

/// The reduction order of the module docs, sequentially: the value every
/// PE gets from a reduction of `vals` (one per rank).
pub fn tree_fold<T: Clone, F: Fn(&mut T, &T)>(vals: &[T], f: &F) -> T {
    fn sub<T: Clone, F: Fn(&mut T, &T)>(vals: &[T], a: usize, b: usize, f: &F) -> T {
        let mut acc = vals[a].clone();
        let mut step = 1;
        while a + step < b {
            let child = sub(vals, a + step, (a + 2 * step).min(b), f);
            f(&mut acc, &child);
            step *= 2;
        }
        acc
    }
    sub(vals, 0, vals.len(), f)
}

/// Dissemination: in round `k` tell `me + 2^k`, hear from `me - 2^k`.
pub fn sync(ctx: &mut Context, g: &mut Group<'_>) -> Result<()> {
    for k in 0..g.rounds() {
        g.notify(ctx, Dir::Fwd, k)?;
        g.wait(ctx, Dir::Fwd, k)?;
    }
    Ok(())
}

/// Puts elements `from..from+count` of this PE's `src` into `pe`'s `dst`
/// from element `to`, in pieces a put_nbi takes. Complete by quiet.
fn put_range<T: Plain>(
    ctx: &mut Context,
    dst: &Sym<T>,
    to: usize,
    src: &Sym<T>,
    from: usize,
    count: usize,
    pe: u32,
) -> Result<()> {
    let step = (MAX_PUT / core::mem::size_of::<T>().max(1)).max(1);
    let mut done = 0;
    while done < count {
        let m = step.min(count - done);
        ctx.put_nbi(dst, to + done, src, from + done, m, pe)?;
        done += m;
    }
    Ok(())
}

/// Copies `count` elements of this PE's `src` (from `from`) to its `dst`
/// (from `to`) through a stack buffer.
pub fn copy_local<T: Plain>(
    ctx: &mut Context,
    dst: &Sym<T>,
    to: usize,
    src: &Sym<T>,
    from: usize,
    count: usize,
) -> Result<()> {
    if src.offset() == dst.offset() && from == to {
        return Ok(());
    }
    let mut buf = Buf::new();
    let b = buf.typed::<T>();
    let mut done = 0;
    while done < count {
        let m = b.len().min(count - done);
        ctx.read_local(src, from + done, &mut b[..m])?;
        ctx.write_local(dst, to + done, &b[..m])?;
        done += m;
    }
    Ok(())
}

/// Binomial broadcast of `nelems` elements from rank `root`'s `src` into
/// every other rank's `dst` (and the root's own when `root_dst`).
pub fn broadcast<T: Plain>(
    ctx: &mut Context,
    g: &mut Group<'_>,
    root: u32,
    src: &Sym<T>,
    dst: &Sym<T>,
    nelems: usize,
    root_dst: bool,
) -> Result<()> {
    let n = g.n;
    let vr = (g.me + n - root) % n;
    if vr != 0 {
        g.wait(ctx, Dir::Fwd, bcast_parent_link(vr))?;
    }
    let from = if vr == 0 { src } else { dst };
    let mut sent = false;
    for k in bcast_child_links(vr, n) {
        let pe = g.pe(g.up(1 << k));
        put_range(ctx, dst, 0, from, 0, nelems, pe)?;
        ctx.fence()?;
        g.notify(ctx, Dir::Fwd, k)?;
        sent = true;
    }
    if vr == 0 && root_dst {
        copy_local(ctx, dst, 0, src, 0, nelems)?;
    }
    if sent {
        ctx.quiet()?;
    }
    Ok(())
}

/// Bruck's allgather of `nelems` elements per rank into `dst` (rank `i`'s
/// block at element `i * nelems`).
pub fn fcollect<T: Plain>(
    ctx: &mut Context,
    g: &mut Group<'_>,
    src: &Sym<T>,
    dst: &Sym<T>,
    nelems: usize,
) -> Result<()> {
    let me = g.me;
    copy_local(ctx, dst, me as usize * nelems, src, 0, nelems)?;
    for k in 0..g.rounds() {
        let pe = g.pe(g.down(1 << k));
        for (b, len) in bruck_pieces(me, k, g.n) {
            if len > 0 {
                let at = b as usize * nelems;
                put_range(ctx, dst, at, dst, at, len as usize * nelems, pe)?;
            }
        }
        ctx.fence()?;
        g.notify(ctx, Dir::Bwd, k)?;
        g.wait(ctx, Dir::Bwd, k)?;
    }
    if g.n > 1 {
        ctx.quiet()?;
    }
    Ok(())
}

/// Inclusive prefix sum of `mine` over the ranks (Hillis–Steele, values
/// pulled from the sender's outbox).
pub fn scan_sum(ctx: &mut Context, g: &mut Group<'_>, mine: u64) -> Result<u64> {
    let out = g.outbox::<u64>(ctx)?;
    let (me, n) = (u64::from(g.me), u64::from(g.n));
    let mut incl = mine;
    for k in 0..g.rounds() {
        let step = 1u64 << k;
        let send = me + step < n;
        let recv = me >= step;
        if send {
            ctx.write_local(&out, 0, &[incl])?;
            g.notify(ctx, Dir::Fwd, k)?;
        }
        let mut got = [0u64];
        if recv {
            g.wait(ctx, Dir::Fwd, k)?;
            let from = g.pe(g.down(step));
            ctx.get(&out, 0, &mut got, from)?;
            g.notify(ctx, Dir::Bwd, k)?; // consumed
        }
        if send {
            g.wait(ctx, Dir::Bwd, k)?; // the outbox is free again
        }
        incl = incl.wrapping_add(got[0]);
    }
    Ok(incl)
}

/// Variable-size allgather: rank `i`'s `counts_i` elements land at the sum
/// of the counts of ranks below it. `dst` must cover this rank's end
/// (`offset + mine`), returned by `dst_for` once the scan knows it.
pub fn collect<T: Plain>(
    ctx: &mut Context,
    g: &mut Group<'_>,
    src: Option<&Sym<T>>,
    mine: usize,
    dst_for: impl FnOnce(&Context, usize) -> Sym<T>,
) -> Result<()> {
    let end = scan_sum(ctx, g, mine as u64)? as usize;
    let off = end - mine;
    if let Some(src) = src.filter(|_| mine > 0) {
        let dst = dst_for(ctx, end);
        for i in 1..g.n {
            let pe = g.pe(g.up(u64::from(i)));
            put_range(ctx, &dst, off, src, 0, mine, pe)?;
        }
        copy_local(ctx, &dst, off, src, 0, mine)?;
    }
    ctx.quiet()?;
    sync(ctx, g)
}

/// Alltoall with strides (`1, 1` is the contiguous form): block `j` of this
/// rank's `src` (elements `(j * nelems + e) * sst`) goes to rank `j`'s `dst`
/// at `(me * nelems + e) * dst_stride`.
pub fn alltoall<T: Plain>(
    ctx: &mut Context,
    g: &mut Group<'_>,
    src: &Sym<T>,
    dst: &Sym<T>,
    nelems: usize,
    (dst_stride, src_stride): (usize, usize),
) -> Result<()> {
    let me = g.me as usize;
    for i in 0..g.n {
        let j = g.up(u64::from(i));
        let pe = g.pe(j);
        let j = j as usize;
        if dst_stride == 1 && src_stride == 1 {
            put_range(ctx, dst, me * nelems, src, j * nelems, nelems, pe)?;
        } else {
            for e in 0..nelems {
                let to = (me * nelems + e) * dst_stride;
                let from = (j * nelems + e) * src_stride;
                ctx.put_nbi(dst, to, src, from, 1, pe)?;
            }
        }
    }
    ctx.quiet()?;
    sync(ctx, g)
}

/// Reduction of `nreduce` elements of `src` into `dst` on every rank with
/// `O` (see the module docs for the order): chunks of at most
/// `chunk` elements go up the tree, partials pulled from each child's outbox;
/// rank 0 writes the result to its `dst` and broadcasts it.
pub fn reduce<T: Plain, O: Combine<T>>(
    ctx: &mut Context,
    g: &mut Group<'_>,
    src: &Sym<T>,
    dst: &Sym<T>,
    nreduce: usize,
) -> Result<()> {
    let mut acc = Buf::new();
    let mut tmp = Buf::new();
    // Two halves of the outbox: a child fills one while its parent reads
    // the other (one half when the outbox holds a single element).
    let halves = if g.outbox_len::<T>() >= 2 { 2 } else { 1 };
    let half = g.outbox_len::<T>() / halves;
    let chunk = acc.typed::<T>().len().min(half).max(1);
    let out = g.outbox::<T>(ctx)?;
    let (mut s, mut c) = (0, 0);
    while s < nreduce {
        let m = chunk.min(nreduce - s);
        let a = &mut acc.typed::<T>()[..m];
        ctx.read_local(src, s, a)?;
        let t = &mut tmp.typed::<T>()[..m];
        reduce_up::<T, O>(ctx, g, &out, (c % halves) * half, a, t, c >= halves)?;
        if g.me == 0 {
            ctx.write_local(dst, s, a)?;
        }
        s += m;
        c += 1;
    }
    if g.me != 0 {
        // The acknowledgements not waited for yet: the parent consumed all.
        for _ in 0..c.min(halves) {
            g.wait(ctx, Dir::Fwd, reduce_parent_link(g.me))?;
        }
    }
    broadcast(ctx, g, 0, dst, dst, nreduce, false)
}

/// One chunk of the reduction tree: combines the children's partials (at
/// element `at` of their outboxes) into `acc`, smallest subtree first, and,
/// below the root, hands `acc` to the parent at element `at` of this PE's
/// outbox, first waiting for one acknowledgement when `again` (the parent
/// consumed what was last written there: acknowledgements come in order).
fn reduce_up<T: Plain, O: Combine<T>>(
    ctx: &mut Context,
    g: &mut Group<'_>,
    out: &Sym<T>,
    at: usize,
    acc: &mut [T],
    tmp: &mut [T],
    again: bool,
) -> Result<()> {
    let (me, n) = (g.me, g.n);
    for k in reduce_child_links(me, n) {
        g.wait(ctx, Dir::Bwd, k)?;
        let child = g.pe(g.up(1 << k));
        ctx.get(out, at, tmp, child)?;
        g.notify(ctx, Dir::Fwd, k)?; // consumed: the child may refill
        for (a, x) in acc.iter_mut().zip(tmp.iter()) {
            O::combine(a, x);
        }
    }
    if me != 0 {
        let k = reduce_parent_link(me);
        if again {
            g.wait(ctx, Dir::Fwd, k)?;
        }
        ctx.write_local(out, at, acc)?;
        g.notify(ctx, Dir::Bwd, k)?;
    }
    Ok(())
}

/// Bitwise AND of one `u64` over the group, the result on every rank
/// (team creation agrees on a free scratch slot with it). The result goes
/// down the broadcast tree into each child's outbox.
pub fn allreduce_and(ctx: &mut Context, g: &mut Group<'_>, mine: u64) -> Result<u64> {
    let out = g.outbox::<u64>(ctx)?;
    let mut acc = [mine];
    let mut tmp = [0u64];
    reduce_up::<u64, super::ops::And>(ctx, g, &out, 0, &mut acc, &mut tmp, false)?;
    let (me, n) = (g.me, g.n);
    if me != 0 {
        g.wait(ctx, Dir::Fwd, reduce_parent_link(me))?;
        g.wait(ctx, Dir::Fwd, bcast_parent_link(me))?;
        ctx.read_local(&out, 0, &mut acc)?;
    }
    for k in bcast_child_links(me, n) {
        let pe = g.pe(g.up(1 << k));
        ctx.put(&out, 0, &acc, pe)?;
        ctx.fence()?;
        g.notify(ctx, Dir::Fwd, k)?;
    }
    Ok(acc[0])
}

/// A 16-byte aligned stack buffer of [`CHUNK`] bytes.
#[repr(C, align(16))]
pub struct Buf([u8; CHUNK]);

impl Buf {
    /// Zeroed.
    pub fn new() -> Buf {
        Buf([0; CHUNK])
    }

    /// The buffer as elements of `T`.
    pub fn typed<T: Plain>(&mut self) -> &mut [T] {
        const { assert!(core::mem::size_of::<T>() > 0 && core::mem::align_of::<T>() <= 16) };
        let size = core::mem::size_of::<T>();
        // SAFETY: the buffer is initialized (zeroed, then only written through
        // this view), aligned to 16 >= align_of::<T>() (checked at compile
        // time above), and
        // CHUNK / size elements fit in it; `T: Plain` accepts any bytes.
        unsafe { core::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<T>(), CHUNK / size) }
    }
}

impl Default for Buf {
    fn default() -> Self {
        Buf::new()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// Who receives from whom in the broadcast tree: every non-root rank
    /// exactly once, from a rank that had the data before.
    #[test]
    fn broadcast_tree_covers_every_rank_once() {
        for n in 1..70u32 {
            let mut parent = vec![None; n as usize];
            for vr in 0..n {
                for k in bcast_child_links(vr, n) {
                    let c = vr + (1 << k);
                    assert!(c < n);
                    assert!(parent[c as usize].is_none(), "n={n}: {c} twice");
                    assert_eq!(
                        bcast_parent_link(c),
                        k,
                        "n={n}: child {c} waits on link {k}"
                    );
                    parent[c as usize] = Some(vr);
                }
            }
            assert!(parent[0].is_none());
            assert!(parent.iter().skip(1).all(Option::is_some), "n={n}");
            // Parents are smaller: a rank forwards only what it received.
            for (c, p) in parent.iter().enumerate().skip(1) {
                assert!(p.unwrap() < c as u32);
            }
        }
    }

    /// The reduction tree: every rank but 0 has exactly one parent, reached
    /// over the link its acknowledgements come on.
    #[test]
    fn reduction_tree_covers_every_rank_once() {
        for n in 1..70u32 {
            let mut seen = vec![0; n as usize];
            for r in 0..n {
                for k in reduce_child_links(r, n) {
                    let c = r + (1 << k);
                    assert_eq!(reduce_parent_link(c), k);
                    assert_eq!(c - (1 << reduce_parent_link(c)), r);
                    seen[c as usize] += 1;
                }
            }
            assert_eq!(seen[0], 0);
            assert!(seen.iter().skip(1).all(|&s| s == 1), "n={n}: {seen:?}");
        }
    }

    /// Simulates Bruck's rounds: after the last one every rank holds every
    /// block, each block received once.
    #[test]
    fn bruck_delivers_every_block_once() {
        for n in 1..70u32 {
            let mut have: Vec<Vec<u32>> = (0..n).map(|_| vec![0; n as usize]).collect();
            for r in 0..n {
                have[r as usize][r as usize] = 1;
            }
            for k in 0..crate::coll::link::rounds(n) {
                let before = have.clone();
                for r in 0..n {
                    let to = ((u64::from(r) + u64::from(n) - (1u64 << k) % u64::from(n))
                        % u64::from(n)) as usize;
                    for (b, len) in bruck_pieces(r, k, n) {
                        for i in b..b + len {
                            assert_eq!(
                                before[r as usize][i as usize], 1,
                                "n={n} k={k}: {r} lacks {i}"
                            );
                            have[to][i as usize] += 1;
                        }
                    }
                }
            }
            for (r, h) in have.iter().enumerate() {
                assert!(h.iter().all(|&c| c == 1), "n={n}: rank {r}: {h:?}");
            }
        }
    }

    /// The simulated tree reduction combines in [`tree_fold`]'s order.
    #[test]
    fn tree_fold_matches_the_tree() {
        // Record the order as a string: the combination is concatenation.
        for n in 1..40usize {
            let vals: Vec<String> = (0..n).map(|i| format!("{i},")).collect();
            let seq = tree_fold(&vals, &|a: &mut String, b: &String| a.push_str(b));
            let all: String = (0..n).map(|i| format!("{i},")).collect();
            assert_eq!(seq, all, "every rank once, in rank order, n={n}");
            // The tree shape: simulate the up phase.
            let mut part: Vec<String> = (0..n).map(|i| format!("{i}")).collect();
            for r in (0..n as u32).rev() {
                for k in reduce_child_links(r, n as u32) {
                    let c = part[(r + (1 << k)) as usize].clone();
                    part[r as usize] = format!("({}+{c})", part[r as usize]);
                }
            }
            let shape = tree_fold(
                &(0..n).map(|i| format!("{i}")).collect::<Vec<_>>(),
                &|a: &mut String, b: &String| *a = format!("({a}+{b})"),
            );
            assert_eq!(part[0], shape, "n={n}");
        }
    }

    #[test]
    fn tree_fold_of_floats_is_deterministic() {
        let v: Vec<f64> = (0..13).map(|i| 1.0 / f64::from(i + 1)).collect();
        let a = tree_fold(&v, &|a: &mut f64, b: &f64| *a += b);
        let b = tree_fold(&v, &|a: &mut f64, b: &f64| *a += b);
        assert_eq!(a.to_bits(), b.to_bits());
        assert!((a - v.iter().sum::<f64>()).abs() < 1e-12);
    }
}
