//! Arbitrary bytes as a frame: checked and unchecked decoding never panic, and a
//! frame that passes `check` re-encodes (with `encode` and with `seal`) to the
//! same header bytes and payload. The same bytes as a compact frame of a
//! small put (the TCP driver's): a typed error or, once checked, a frame
//! that re-seals to the same bytes and expands to a checked full `Put`.
//!
//! Under `cfg(fuzzing)` the core skips only the CRC comparison, so the fuzzer
//! reaches everything behind it without forging checksums.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_socket::compact::{self, COMPACT_LEN, COMPACT_MAGIC, COMPACT_MAX_PAYLOAD};
use switchyard_core::{
    class::CLASS_ENCODING_VERSION,
    crc::{crc32c, crc32c_append},
    wire::{
        AtomicKind, Frame, FrameOp, HEADER_LEN, HeaderFields, MAGIC, MAX_PAYLOAD, SIGNAL_TRAILER,
        WIRE_VERSION, encode, flags, seal,
    },
};

/// Heap sizes the bounds check is tried against.
const HEAPS: [u64; 6] = [0, 1, 4096, 1 << 20, u64::MAX / 2, u64::MAX];

fuzz_target!(|data: &[u8]| {
    decode(data);
    compact_decode(data);
    if data.len() >= 2 {
        let mut patched = data.to_vec();
        patched[..2].copy_from_slice(&COMPACT_MAGIC.to_le_bytes());
        compact_decode(&patched);
    }
    // Again with a valid magic and versions patched in, so that the fuzzer reaches
    // the op, length and heap checks without having to find them first.
    if data.len() >= HEADER_LEN {
        let mut patched = data.to_vec();
        patched[..2].copy_from_slice(&MAGIC.to_le_bytes());
        patched[2] = WIRE_VERSION;
        patched[6] = CLASS_ENCODING_VERSION;
        decode(&patched);
    }
});

fn decode(data: &[u8]) {
    // The checked constructor: one exact frame, or a typed error.
    if let Ok(f) = Frame::new_checked(data) {
        assert_eq!(f.total_len(), data.len());
        touch_all(&f);
        reencode(&f);
    }

    // The unchecked view, as a stream reader uses it (the buffer may hold more
    // than one frame).
    let f = Frame::new_unchecked(data);
    if f.check_len().is_ok() {
        // docs/ARCHITECTURE.md, "Code rules": a passed `check_len` guarantees no accessor panics.
        let h = f.header();
        let _ = (h.op, h.payload_len.get(), h.span.get());
        let _ = f.op();
        let total = f.total_len();
        assert!(total <= data.len());
        assert_eq!(f.payload().len(), total - HEADER_LEN);
        for heap in HEAPS {
            let _ = f.check_heap(heap);
            let _ = f.signal(heap);
        }
        let _ = f.put_data();
    }
    if f.check().is_ok() {
        assert!(f.check_len().is_ok(), "check passed but check_len did not");
        touch_all(&f);
        reencode(&f);
    }
}

/// Every accessor of a checked frame; none may panic.
fn touch_all(f: &Frame<&[u8]>) {
    let h = f.header();
    assert!(f.op().is_some(), "a checked frame has a known op");
    assert!(h.payload_len.get() <= MAX_PAYLOAD);
    let _ = (
        h.magic.get(),
        h.version,
        h.flags,
        h.aux,
        h.class_version,
        h.reserved,
        h.src_pe.get(),
        h.dst_pe.get(),
        h.seq.get(),
        h.ack.get(),
        h.context.get(),
        h.topo_version.get(),
        h.offset.get(),
        h.crc.get(),
    );
    assert_eq!(f.payload().len(), h.payload_len.get() as usize);
    for heap in HEAPS {
        if let Ok(r) = f.check_heap(heap) {
            assert!(r.end <= heap && r.start <= r.end);
            assert_eq!(r.end - r.start, h.span.get() as u64);
        }
        // A put with signal: its data is `span` bytes, and a signal that
        // passes is an aligned word inside the heap, set or add.
        match f.signal(heap) {
            Ok(s) => {
                assert_eq!(f.op(), Some(FrameOp::PutSignal));
                assert!(s.offset % 8 == 0 && s.offset + 8 <= heap);
                assert!(matches!(s.kind, AtomicKind::Set | AtomicKind::FetchAdd));
            }
            Err(_) => assert!(f.op() != Some(FrameOp::PutSignal) || {
                let p = f.payload();
                let at = p.len() - SIGNAL_TRAILER as usize;
                let off = u64::from_le_bytes(p[at..at + 8].try_into().expect("8"));
                off.checked_add(8).is_none_or(|e| e > heap)
            }),
        }
    }
    assert_eq!(f.put_data().len(), h.span.get().min(h.payload_len.get()) as usize);
    let _ = f.into_inner();
}

/// Re-encodes a checked frame from its header fields and checks it decodes
/// equal: same header bytes (the CRC aside: under fuzzing the input's CRC is
/// not compared) and same payload, and a CRC that is really the frame's.
fn reencode(f: &Frame<&[u8]>) {
    let h = f.header();
    let payload = f.payload();
    let payload_crc = h.flags & flags::PAYLOAD_CRC != 0;
    let fields = HeaderFields {
        op: h.op,
        flags: h.flags & !flags::PAYLOAD_CRC,
        aux: h.aux,
        src_pe: h.src_pe.get(),
        dst_pe: h.dst_pe.get(),
        seq: h.seq.get(),
        ack: h.ack.get(),
        context: h.context.get(),
        topo_version: h.topo_version.get(),
        offset: h.offset.get(),
        span: h.span.get(),
    };
    let original = &f.into_inner()[..f.total_len()];

    let mut out = vec![0u8; HEADER_LEN + payload.len()];
    let n = encode(&mut out, &fields, payload, payload_crc).expect("fits, payload <= MAX");
    assert_eq!(n, original.len());
    let again = Frame::new_checked(&out[..n]).expect("a re-encoded frame decodes");
    assert_eq!(&out[..60], &original[..60], "header bytes differ");
    assert_eq!(again.payload(), payload);
    assert_eq!(again.header().crc.get(), frame_crc(&out[..n], payload_crc));

    // `seal` over a payload already in place gives the same bytes.
    let mut sealed = vec![0u8; n];
    sealed[HEADER_LEN..].copy_from_slice(payload);
    let m = seal(&mut sealed, &fields, payload.len(), payload_crc).expect("fits");
    assert_eq!(m, n);
    assert_eq!(sealed, out, "seal and encode disagree");

    // And a too-small buffer is an error, not a panic.
    assert!(encode(&mut out[..n - 1], &fields, payload, payload_crc).is_err());
}

/// A compact frame: checked, re-sealed from its fields, expanded.
fn compact_decode(data: &[u8]) {
    let Ok((p, total)) = compact::check(data) else {
        return;
    };
    assert!(total <= data.len() && total > COMPACT_LEN);
    assert_eq!(compact::frame_len(data), Some(total));
    let payload = &data[COMPACT_LEN..total];
    let mut again = vec![0u8; total];
    again[COMPACT_LEN..].copy_from_slice(payload);
    assert_eq!(compact::seal(&mut again, &p, payload.len()), Some(total));
    // The CRC aside (not compared under fuzzing), the same bytes.
    assert_eq!(&again[..4], &data[..4]);
    assert_eq!(&again[8..], &data[8..total]);
    assert_eq!(compact::check(&again), Ok((p, total)));
    let mut full = vec![0u8; HEADER_LEN + COMPACT_MAX_PAYLOAD];
    let n = compact::expand(&p, 1, 2, payload, &mut full).expect("always fits");
    let f = Frame::new_checked(&full[..n]).expect("an expansion is a valid frame");
    assert_eq!(f.payload(), payload);
    assert_eq!(f.header().span.get() as usize, payload.len());
}

/// The frame CRC computed independently of the core's private helper.
fn frame_crc(frame: &[u8], with_payload: bool) -> u32 {
    let mut crc = crc32c_append(crc32c(&frame[..60]), &[0; 4]);
    if with_payload {
        crc = crc32c_append(crc, &frame[HEADER_LEN..]);
    }
    crc
}
