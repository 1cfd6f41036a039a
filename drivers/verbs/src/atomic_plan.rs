//! Every [`AtomicOp`] from the two atomics RDMA has: 64-bit fetch-add and
//! 64-bit compare-swap on an 8-byte aligned word.
//!
//! 64-bit fetch-add, compare-swap and fetch (a fetch-add of 0) are one work
//! request. Everything else (swap, set, and, or, xor, and every 32-bit op,
//! which works on the aligned 8-byte word holding it) is a compare-swap
//! loop: read the word atomically, compute the new value with
//! [`AtomicOp::apply`], compare-swap it in, and retry from the value the
//! compare-swap returned if another writer got there first. Pure: the driver
//! posts the [`Wr`]s and feeds the fetched words back.
//!
//! Byte order: heap words are the host's (little-endian on every platform
//! switchyard runs on); a 32-bit operand at an offset ending in 4 is the
//! upper half of its 8-byte word.

use switchyard_core::transport::{AtomicOp, AtomicWidth};

/// One RDMA atomic work request on the word at `word_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wr {
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    FetchAdd {
        /// Heap offset of the 8-byte word.
        word_offset: u64,
        /// Addend.
        add: u64,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    CompareSwap {
        /// Heap offset of the 8-byte word.
        word_offset: u64,
        /// Expected word.
        compare: u64,
        /// New word.
        swap: u64,
    },
}

/// What to do after a work request returned the word's old value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The op is done; the old value in the op's width.
    Done(u64),
    /// Post this work request and feed its result back.
    Post(Wr),
}

/// The offset is not aligned to the operand width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Misaligned {
    /// Alignment needed.
    pub align: u64,
}

/// An atomic in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicPlan {
    op: AtomicOp,
    word_offset: u64,
    shift: u32,
    /// The word the compare-swap in flight expects, if one is.
    expect: Option<u64>,
    /// Compare-swaps that lost a race (for stats).
    retries: u32,
}

impl AtomicPlan {
    /// Plans `op` at heap `offset`.
    ///
    /// # Errors
    ///
    /// [`Misaligned`] when `offset` is not a multiple of the width.
    pub fn new(offset: u64, op: AtomicOp) -> Result<AtomicPlan, Misaligned> {
        let align = op.width.bytes() as u64;
        if !offset.is_multiple_of(align) {
            return Err(Misaligned { align });
        }
        Ok(AtomicPlan {
            op,
            word_offset: offset & !7,
            shift: ((offset & 4) * 8) as u32,
            expect: None,
            retries: 0,
        })
    }

    /// The op.
    pub const fn op(&self) -> &AtomicOp {
        &self.op
    }

    /// Compare-swaps that lost a race so far.
    pub const fn retries(&self) -> u32 {
        self.retries
    }

    /// Whether one native work request does the whole op.
    const fn native(&self) -> bool {
        use switchyard_core::wire::AtomicKind::*;
        matches!(self.op.width, AtomicWidth::W64)
            && matches!(self.op.kind, FetchAdd | CompareSwap | Fetch)
    }

    /// The first work request.
    pub fn first(&self) -> Wr {
        use switchyard_core::wire::AtomicKind::*;
        let word_offset = self.word_offset;
        if self.native() {
            match self.op.kind {
                FetchAdd => Wr::FetchAdd {
                    word_offset,
                    add: self.op.operand,
                },
                CompareSwap => Wr::CompareSwap {
                    word_offset,
                    compare: self.op.compare,
                    swap: self.op.operand,
                },
                _ => Wr::FetchAdd {
                    word_offset,
                    add: 0,
                },
            }
        } else {
            // An atomic read of the word.
            Wr::FetchAdd {
                word_offset,
                add: 0,
            }
        }
    }

    fn extract(&self, word: u64) -> u64 {
        self.op.width.truncate(word >> self.shift)
    }

    fn insert(&self, word: u64, v: u64) -> u64 {
        match self.op.width {
            AtomicWidth::W64 => v,
            AtomicWidth::W32 => {
                let mask = 0xFFFF_FFFFu64 << self.shift;
                (word & !mask) | ((v & 0xFFFF_FFFF) << self.shift)
            }
        }
    }

    /// Feeds back the old word the last work request returned.
    pub fn on_result(&mut self, word: u64) -> Next {
        if self.native() {
            return Next::Done(word);
        }
        if let Some(expect) = self.expect.take() {
            if word == expect {
                return Next::Done(self.extract(expect));
            }
            self.retries += 1;
        }
        let old = self.extract(word);
        let new = self.op.apply(old);
        if new == old {
            // Nothing to write (a failed compare-swap, an and with ones...):
            // the read itself was atomic.
            return Next::Done(old);
        }
        let swap = self.insert(word, new);
        self.expect = Some(word);
        Next::Post(Wr::CompareSwap {
            word_offset: self.word_offset,
            compare: word,
            swap,
        })
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;
    use switchyard_core::wire::AtomicKind;

    use super::*;

    /// Executes a plan against `mem` (8-byte words), letting `interfere`
    /// change the word before each work request executes.
    fn run(
        mem: &mut [u64],
        offset: u64,
        op: AtomicOp,
        mut interfere: impl FnMut(&mut u64),
    ) -> (u64, u32) {
        let mut p = AtomicPlan::new(offset, op).unwrap();
        let mut wr = p.first();
        for _ in 0..100 {
            let (w, old) = match wr {
                Wr::FetchAdd { word_offset, add } => {
                    let w = &mut mem[(word_offset / 8) as usize];
                    interfere(w);
                    let old = *w;
                    *w = old.wrapping_add(add);
                    (word_offset, old)
                }
                Wr::CompareSwap {
                    word_offset,
                    compare,
                    swap,
                } => {
                    let w = &mut mem[(word_offset / 8) as usize];
                    interfere(w);
                    let old = *w;
                    if old == compare {
                        *w = swap;
                    }
                    (word_offset, old)
                }
            };
            assert_eq!(w, offset & !7);
            match p.on_result(old) {
                Next::Done(v) => return (v, p.retries()),
                Next::Post(next) => wr = next,
            }
        }
        panic!("no progress");
    }

    fn op(kind: AtomicKind, width: AtomicWidth, operand: u64, compare: u64) -> AtomicOp {
        AtomicOp {
            kind,
            width,
            operand,
            compare,
            fetch: true,
        }
    }

    #[test]
    fn native_ops_are_one_request() {
        let p = AtomicPlan::new(16, op(AtomicKind::FetchAdd, AtomicWidth::W64, 5, 0)).unwrap();
        assert_eq!(
            p.first(),
            Wr::FetchAdd {
                word_offset: 16,
                add: 5
            }
        );
        let mut p =
            AtomicPlan::new(16, op(AtomicKind::CompareSwap, AtomicWidth::W64, 9, 7)).unwrap();
        assert_eq!(
            p.first(),
            Wr::CompareSwap {
                word_offset: 16,
                compare: 7,
                swap: 9
            }
        );
        assert_eq!(p.on_result(3), Next::Done(3));
        assert_eq!(
            AtomicPlan::new(4, op(AtomicKind::Fetch, AtomicWidth::W64, 0, 0)),
            Err(Misaligned { align: 8 })
        );
        assert_eq!(
            AtomicPlan::new(2, op(AtomicKind::Fetch, AtomicWidth::W32, 0, 0)),
            Err(Misaligned { align: 4 })
        );
    }

    #[test]
    fn upper_half_of_a_word() {
        let mut mem = [0x0000_0005_0000_0007u64; 2];
        let (old, _) = run(
            &mut mem,
            4,
            op(AtomicKind::FetchAdd, AtomicWidth::W32, 1, 0),
            |_| {},
        );
        assert_eq!(old, 5);
        assert_eq!(mem[0], 0x0000_0006_0000_0007);
        let (old, _) = run(
            &mut mem,
            0,
            op(AtomicKind::Swap, AtomicWidth::W32, 0xFFFF_FFFF, 0),
            |_| {},
        );
        assert_eq!(old, 7);
        assert_eq!(mem[0], 0x0000_0006_FFFF_FFFF);
    }

    #[test]
    fn a_lost_race_is_retried() {
        let mut mem = [10u64];
        let mut n = 0;
        let (old, retries) = run(
            &mut mem,
            0,
            op(AtomicKind::Swap, AtomicWidth::W64, 99, 0),
            |w| {
                n += 1;
                if n == 2 {
                    *w += 1; // another writer between the read and the compare-swap
                }
            },
        );
        assert_eq!((old, retries, mem[0]), (11, 1, 99));
    }

    proptest! {
        /// Every kind and width, at either half of a word, with interference:
        /// the returned old value and the final word match the reference
        /// semantics applied to the value the op finally acted on, and the
        /// other half of the word is untouched by the op.
        #[test]
        fn matches_the_reference(kind in 1u8..=8, w64: bool, hi: bool, start: u64, operand: u64, compare: u64, bumps in 0u32..3) {
            let kind = AtomicKind::from_u8(kind).unwrap();
            let width = if w64 { AtomicWidth::W64 } else { AtomicWidth::W32 };
            let offset = if w64 || !hi { 8 } else { 12 };
            let o = op(kind, width, width.truncate(operand), width.truncate(compare));
            let mut mem = [0u64, start, 0];
            let mut left = bumps;
            let mut last_seen = 0;
            let (old, _) = run(&mut mem, offset, o, |w| {
                if left > 0 { left -= 1; *w = w.wrapping_add(0x1_0000_0001); }
                last_seen = *w;
            });
            let shift = if offset == 12 { 32 } else { 0 };
            let before = width.truncate(last_seen >> shift);
            prop_assert_eq!(old, before);
            let after = width.truncate(mem[1] >> shift);
            prop_assert_eq!(after, o.apply(before));
            if !w64 {
                let other = if shift == 0 { 32 } else { 0 };
                prop_assert_eq!((mem[1] >> other) as u32, (last_seen >> other) as u32);
            }
        }
    }
}
