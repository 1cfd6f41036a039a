//! Links: the one messaging primitive every collective is built from.
//!
//! A [`Group`] is `n` PEs numbered `0..n` (a team, or an active set), each
//! mapped to a job PE by `start + rank * stride`. Between ranks there are
//! *links*: link `k` forward goes from rank `r` to `(r + 2^k) mod n`, link
//! `k` backward from `r` to `(r - 2^k) mod n`. Every algorithm here (the
//! dissemination sync, the binomial trees, Bruck's allgather, the scan) only
//! ever talks along these links, so each receive word has exactly one
//! writer: word `k` (forward) of rank `r` is only written by `r - 2^k`, word
//! `LINKS + k` (backward) only by `r + 2^k`.
//!
//! A message on a link carries no data of its own: it says "the data I put
//! for you is there" (puts, then a fence, then the message) or "I consumed
//! what you offered". Messages on one link are matched in order, so every
//! collective sequence works as long as every member runs the same
//! collectives in the same order, as the specification requires.
//!
//! Two ways to count messages, one per kind of scratch:
//!
//! * [`Mode::Count`] (teams): each side keeps how many messages it sent and
//!   received per link in private memory; a send *stores* the new count into
//!   the receiver's word (one non-fetching atomic), a receive waits until the
//!   word reaches its own count. Words only grow, so nothing is ever reset
//!   and a fast PE may run any number of collectives ahead.
//! * [`Mode::Add`] (active sets with a user `pSync`): a send atomically adds
//!   one, a receive waits for a non-zero word and subtracts one. Once every
//!   message is consumed the words are back to `SHMEM_SYNC_VALUE` (0), which
//!   is what the specification asks of `pSync`, and consecutive barriers on
//!   the same `pSync` stay correct (increments for the next barrier are kept).

use switchyard::context::{Cmp, Context, Result, Sym};

/// Link exponents per direction: enough for 2^32 ranks.
pub const LINKS: usize = 32;
/// Receive words per group: forward then backward.
pub const WORDS: usize = 2 * LINKS;

/// Direction of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From rank `r` to `r + 2^k`.
    Fwd,
    /// From rank `r` to `r - 2^k`.
    Bwd,
}

impl Dir {
    fn word(self, k: u32) -> usize {
        match self {
            Dir::Fwd => k as usize,
            Dir::Bwd => LINKS + k as usize,
        }
    }
}

/// Per-link message counts of one team member (private memory).
#[derive(Debug, Clone)]
pub struct Counts {
    /// Messages sent, by the receiver's word index.
    sent: [u64; WORDS],
    /// Messages received, by own word index.
    got: [u64; WORDS],
}

impl Counts {
    /// All zero: a fresh team whose words are zero.
    pub const fn new() -> Counts {
        Counts {
            sent: [0; WORDS],
            got: [0; WORDS],
        }
    }
}

impl Default for Counts {
    fn default() -> Self {
        Counts::new()
    }
}

/// How messages are counted (see the [module docs](self)).
#[derive(Debug)]
pub enum Mode<'a> {
    /// Monotonic counts kept by both ends (teams).
    Count(&'a mut Counts),
    /// Add one / wait and subtract one (`pSync` arrays).
    Add,
}

/// Members of a collective and their symmetric scratch.
#[derive(Debug)]
pub struct Group<'a> {
    /// Number of members.
    pub n: u32,
    /// This PE's rank.
    pub me: u32,
    /// Job PE of rank 0.
    start: i64,
    /// Job-PE distance between consecutive ranks.
    stride: i64,
    /// [`WORDS`] receive words.
    words: Sym<i64>,
    /// Byte offset and length of this member's outbox: data a neighbour
    /// pulls with a get (reduction partials, scan values).
    outbox: (u64, usize),
    mode: Mode<'a>,
}

impl<'a> Group<'a> {
    /// A group of `n` ranks (`me` is this PE's), rank `i` being job PE
    /// `start + i * stride`, with receive `words` and an `outbox` of
    /// `(byte offset, bytes)`.
    pub fn new(
        n: u32,
        me: u32,
        (start, stride): (i64, i64),
        words: Sym<i64>,
        outbox: (u64, usize),
        mode: Mode<'a>,
    ) -> Group<'a> {
        debug_assert!(me < n && words.len() >= WORDS);
        Group {
            n,
            me,
            start,
            stride,
            words,
            outbox,
            mode,
        }
    }

    /// The job PE of rank `r`.
    #[inline]
    pub fn pe(&self, r: u32) -> u32 {
        (self.start + i64::from(r) * self.stride) as u32
    }

    /// Rank `me + d` modulo `n`.
    #[inline]
    pub fn up(&self, d: u64) -> u32 {
        ((u64::from(self.me) + d % u64::from(self.n)) % u64::from(self.n)) as u32
    }

    /// Rank `me - d` modulo `n`.
    #[inline]
    pub fn down(&self, d: u64) -> u32 {
        let n = u64::from(self.n);
        ((u64::from(self.me) + n - d % n) % n) as u32
    }

    /// Number of link exponents in use: `k` with `2^k < n`.
    #[inline]
    pub fn rounds(&self) -> u32 {
        rounds(self.n)
    }

    /// The outbox as `len` elements of `T` (`len` capped to its size).
    pub fn outbox<T: switchyard::context::Plain>(&self, ctx: &Context) -> Result<Sym<T>> {
        ctx.sym_at::<T>(self.outbox.0, self.outbox.1 / core::mem::size_of::<T>())
    }

    /// Elements of `T` the outbox holds.
    pub fn outbox_len<T>(&self) -> usize {
        self.outbox.1 / core::mem::size_of::<T>()
    }

    /// Sends one message along link `k` in direction `dir`. Puts made
    /// before it to the same PE must be fenced by the caller.
    pub fn notify(&mut self, ctx: &mut Context, dir: Dir, k: u32) -> Result<()> {
        let to = match dir {
            Dir::Fwd => self.up(1 << k),
            Dir::Bwd => self.down(1 << k),
        };
        let pe = self.pe(to);
        let w = dir.word(k);
        match &mut self.mode {
            Mode::Count(c) => {
                c.sent[w] += 1;
                ctx.set(&self.words, w, c.sent[w] as i64, pe)
            }
            Mode::Add => ctx.add(&self.words, w, 1, pe),
        }
    }

    /// Waits for the next message that came along link `k` in direction
    /// `dir` (from `me - 2^k` for [`Dir::Fwd`], `me + 2^k` for [`Dir::Bwd`]).
    pub fn wait(&mut self, ctx: &mut Context, dir: Dir, k: u32) -> Result<()> {
        let w = dir.word(k);
        match &mut self.mode {
            Mode::Count(c) => {
                c.got[w] += 1;
                ctx.wait_until(&self.words, w, Cmp::Ge, c.got[w] as i64)?;
            }
            Mode::Add => {
                ctx.wait_until(&self.words, w, Cmp::Ge, 1)?;
                let me = ctx.my_pe();
                ctx.add(&self.words, w, -1, me)?;
            }
        }
        Ok(())
    }
}

/// Number of `k` with `2^k < n`: ⌈log2 n⌉.
#[inline]
pub fn rounds(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn rounds_is_ceil_log2() {
        assert_eq!(
            (0..10).map(rounds).collect::<Vec<_>>(),
            [0, 0, 1, 2, 2, 3, 3, 3, 3, 4]
        );
        assert_eq!(rounds(u32::MAX), 32);
        assert!(rounds(u32::MAX) as usize <= LINKS);
    }
}
