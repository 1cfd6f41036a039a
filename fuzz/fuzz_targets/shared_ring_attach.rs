//! A shared-memory ring written by a hostile peer: arbitrary bytes are laid into
//! an aligned region (sometimes with a valid header patched in, so the fuzzer
//! gets past the magic), then `SharedRing::attach` either refuses them with an
//! `AttachError` or, if it accepts, both ends work on the garbage indices and
//! slots without panicking or touching memory outside the region (ASan).
#![no_main]

use std::alloc::{Layout, alloc_zeroed, dealloc};

use libfuzzer_sys::fuzz_target;
use switchyard_core::shared_ring::{SHARED_RING_MAGIC, SHARED_RING_VERSION, SharedRing};

type R = SharedRing<u64, 16>;
const TAG: u32 = 0xF00D;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let len = if mode & 1 == 0 {
        R::SIZE
    } else {
        bytes.len().min(R::SIZE)
    };
    let layout = Layout::from_size_align(R::SIZE, R::ALIGN).unwrap();
    // SAFETY: non-zero size.
    let mem = unsafe { alloc_zeroed(layout) };
    assert!(!mem.is_null());
    // SAFETY: `mem` has R::SIZE bytes; we copy at most that many.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), mem, bytes.len().min(R::SIZE)) };
    if mode & 2 != 0 {
        // A plausible header, so the fuzzer reaches the ring behind it.
        let header = [SHARED_RING_MAGIC, SHARED_RING_VERSION, 16, 8, 8, TAG];
        for (i, v) in header.iter().enumerate() {
            // SAFETY: the header is the first 24 bytes of the region.
            unsafe { mem.cast::<u32>().add(i).write(*v) };
        }
    }
    // SAFETY: `mem..mem + len` is allocated (len <= R::SIZE) for this call.
    if let Ok(shared) = unsafe { R::attach(mem, len, TAG) } {
        // SAFETY: one producer and one consumer, both here.
        let (mut p, mut c) = unsafe { (shared.ring().producer(), shared.ring().consumer()) };
        let _ = c.slots();
        let _ = p.slots();
        let mut out = [0u64; 32];
        let _ = c.pop_slice(&mut out);
        let _ = c.peek();
        let _ = c.pop();
        let _ = p.push_slice(&[1, 2, 3]);
        let _ = p.push(4);
        let _ = shared.ring().len();
    }
    // SAFETY: allocated above with this layout.
    unsafe { dealloc(mem, layout) };
});
