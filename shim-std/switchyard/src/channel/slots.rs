//! The memory a channel touches directly: its ring of slots and its index
//! words, in this PE's own heap or a same-node peer's mapping. The only
//! `unsafe` of the channels is here.
//!
//! A slot is `stride` bytes (a multiple of 64, so a slot never shares a
//! cache line with the next): a 64-bit sequence word, then the message's
//! bytes. The sequence word of the slot of index `i` holds `i + 1` once the
//! message is there (0, or an older lap's `i + 1 - capacity`, before).
#![allow(unsafe_code)]

use core::ptr::NonNull;

use switchyard_core::sync::atomic::AtomicU64;

use super::{ChannelError, Made};
use crate::context::{Context, Error, Plain, Result};

/// Bytes before a slot's message: its sequence word.
pub(super) const SEQ_BYTES: usize = 8;

/// The ring of slots at a fixed address of a mapping.
#[derive(Debug)]
pub(super) struct Slots {
    base: NonNull<u8>,
    mask: u64,
    stride: usize,
}

// SAFETY: `Slots` is an address in a shared mapping, not tied to a thread;
// every access goes through atomics (the sequence words) or byte copies the
// ring's protocol hands to one side at a time.
unsafe impl Send for Slots {}

impl Slots {
    /// The ring of `capacity` slots of `stride` bytes at `base`.
    ///
    /// # Safety
    ///
    /// `base` is 64-byte aligned, `base..base + capacity * stride` is mapped,
    /// readable and writable for as long as the `Slots` lives (the caller
    /// keeps the PE, and with it the mapping, alive), `capacity` is a power of
    /// two and `stride` a multiple of 64 of at least `SEQ_BYTES` plus the
    /// message size of every type read or written through it.
    pub(super) unsafe fn new(base: NonNull<u8>, capacity: u64, stride: usize) -> Slots {
        Slots {
            base,
            mask: capacity - 1,
            stride,
        }
    }

    /// The start of the slot of index `i`.
    #[inline(always)]
    fn slot(&self, i: u64) -> *mut u8 {
        let at = (i & self.mask) as usize * self.stride;
        // SAFETY: `at < capacity * stride`, inside the mapping (`new`).
        unsafe { self.base.as_ptr().add(at) }
    }

    /// The sequence word of the slot of index `i`.
    #[inline(always)]
    pub(super) fn seq(&self, i: u64) -> &AtomicU64 {
        // SAFETY: the slot starts 64-byte aligned inside the mapping, which
        // lives as long as `self` (`new`); other processes change the word
        // only through atomics.
        unsafe { AtomicU64::from_ptr(self.slot(i).cast()) }
    }

    /// Writes `v` into the slot of index `i` (its sequence word untouched).
    ///
    /// Word by word: 8-byte loads of `v` and 8-byte stores into the slot.
    /// A caller usually has just built `v` on its stack with stores of other
    /// widths, and a wider load spanning two of them cannot be forwarded
    /// from the store buffer: it waits until the buffer drains, the previous
    /// message's stores into the other core's line included, which made
    /// every send wait for the last one's line transfer.
    #[inline(always)]
    pub(super) fn write<T: Plain>(&self, i: u64, v: &T) {
        let bytes = v.as_bytes();
        let dst = self.slot(i).wrapping_add(SEQ_BYTES);
        let words = bytes.len() / 8;
        for w in 0..words {
            // SAFETY: word `w` lies inside `bytes` (unaligned read) and inside
            // the slot's message bytes (`new`: the stride holds them after
            // the sequence word; the slot is 64-aligned, so `dst` is
            // 8-aligned); the producer owns the slot until it stores the
            // sequence word (the consumer read it before releasing its index
            // past it), so nobody reads these bytes now. Volatile keeps the
            // stores 8 bytes wide (and with them the loads).
            unsafe {
                let x = core::ptr::read_unaligned(bytes.as_ptr().add(8 * w).cast::<u64>());
                core::ptr::write_volatile(dst.add(8 * w).cast::<u64>(), x);
            }
        }
        for (b, &x) in bytes.iter().enumerate().skip(8 * words) {
            // SAFETY: byte `b` of the slot's message (as above).
            unsafe { dst.add(b).write_volatile(x) };
        }
    }

    /// Reads the message in the slot of index `i` (after the Acquire load of
    /// its sequence word saw it published).
    #[inline(always)]
    pub(super) fn read<T: Plain>(&self, i: u64) -> T {
        // SAFETY: inside the slot (`new`); `T: FromBytes`, so any bytes are a
        // valid `T`, and the unaligned read needs no alignment; the producer
        // does not write the slot again before this consumer releases its
        // index past it.
        unsafe { core::ptr::read_unaligned(self.slot(i).add(SEQ_BYTES).cast::<T>()) }
    }

    /// Reads the message in the slot of index `i` as a seqlock reader does:
    /// word by word with volatile loads, so a copy that races with the
    /// publisher's rewrite of the slot (a lapped broadcast subscriber) is
    /// only a wrong value the caller throws away after checking the
    /// sequence word again, never a torn read the compiler assumed away.
    #[inline(always)]
    pub(super) fn read_racy<T: Plain>(&self, i: u64) -> T {
        let mut out = core::mem::MaybeUninit::<T>::uninit();
        let dst = out.as_mut_ptr().cast::<u8>();
        let size = core::mem::size_of::<T>();
        let src = self.slot(i).wrapping_add(SEQ_BYTES);
        let words = size / 8;
        for w in 0..words {
            // SAFETY: the slot starts 64-aligned, so `src` is 8-aligned and
            // word `w` lies inside the message bytes of the slot (`new`);
            // `dst` has `size` writable bytes (unaligned write).
            unsafe {
                let v = core::ptr::read_volatile(src.add(8 * w).cast::<u64>());
                core::ptr::write_unaligned(dst.add(8 * w).cast::<u64>(), v);
            }
        }
        for b in 8 * words..size {
            // SAFETY: byte `b < size` of the slot's message and of `out`.
            unsafe { dst.add(b).write(core::ptr::read_volatile(src.add(b))) };
        }
        // SAFETY: every byte of `out` was written above; `T: FromBytes`, so
        // any bytes are a valid `T`.
        unsafe { out.assume_init() }
    }
}

/// One 64-bit index word of a channel (a consumer's head, a credit).
#[derive(Debug)]
pub(super) struct Word(NonNull<AtomicU64>);

// SAFETY: as for `Slots`: an address in a shared mapping, used through
// atomics only.
unsafe impl Send for Word {}

impl Word {
    /// The word at `at`.
    ///
    /// # Safety
    ///
    /// `at` is 8-byte aligned, mapped, readable and writable for as long as
    /// the `Word` lives (the caller keeps the PE, and the mapping, alive).
    pub(super) unsafe fn new(at: NonNull<u8>) -> Word {
        Word(at.cast())
    }

    /// The atomic.
    #[inline(always)]
    pub(super) fn get(&self) -> &AtomicU64 {
        // SAFETY: aligned and mapped for `self`'s life (`new`); other
        // processes change it only through atomics.
        unsafe { self.0.as_ref() }
    }
}

/// The address of `bytes` bytes at heap offset `off` of `pe`'s heap as
/// mapped here.
fn mapped(ctx: &Context, pe: u32, off: u64, bytes: u64) -> Result<NonNull<u8>> {
    ctx.peer_heap(pe)
        .and_then(|(base, len)| at(base, len, off, bytes))
        .ok_or(Error::Channel(ChannelError::Unmapped { pe, offset: off }))
}

/// The ring's slots in `pe`'s heap as mapped here.
pub(super) fn slots_in(ctx: &Context, pe: u32, m: &Made) -> Result<Slots> {
    let base = mapped(ctx, pe, m.ring, m.capacity * m.stride)?;
    // SAFETY: the ring block is 64-aligned (`alloc_bytes`), inside the
    // mapping (checked by `mapped`), which lives as long as the PE whose
    // handle the end keeps; `capacity` is a power of two (`layout_word`) and
    // the stride holds the sequence word and a `T` (`stride_of`, from the
    // layout both ends agreed on).
    Ok(unsafe { Slots::new(base, m.capacity, m.stride as usize) })
}

/// Header word `word` of the channel in `pe`'s heap as mapped here.
pub(super) fn header_word(ctx: &Context, pe: u32, m: &Made, word: usize) -> Result<Word> {
    let at = mapped(ctx, pe, m.hdr.offset() + 8 * word as u64, 8)?;
    // SAFETY: 8-aligned (a 64-aligned block, a word index), inside the
    // mapping (`mapped`), alive as long as the PE the end keeps.
    Ok(unsafe { Word::new(at) })
}

/// The address `off` bytes into the mapping at `base` of `len` bytes, when
/// `off + bytes` fits in it.
fn at(base: *mut u8, len: u64, off: u64, bytes: u64) -> Option<NonNull<u8>> {
    let end = off.checked_add(bytes)?;
    if end > len {
        return None;
    }
    // `wrapping_add` keeps it safe; `off < len` makes it the in-bounds address.
    NonNull::new(base.wrapping_add(usize::try_from(off).ok()?))
}
