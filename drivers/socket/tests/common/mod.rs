//! Helpers shared by the driver's integration tests.

use switchyard_socket::SocketDriver;

/// The 8-byte little-endian word at `off` in `d`'s own heap.
pub fn heap_u64(d: &SocketDriver, off: u64) -> u64 {
    let (p, len) = d.local_heap();
    assert!(off + 8 <= len);
    let mut b = [0u8; 8];
    // SAFETY: in bounds of the driver's own heap (checked above); the
    // caller holds the driver, so no progress step of it writes the heap
    // meanwhile (a thread of its own, if any, has stopped).
    unsafe { core::ptr::copy_nonoverlapping(p.add(off as usize), b.as_mut_ptr(), 8) };
    u64::from_le_bytes(b)
}
