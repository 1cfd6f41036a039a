//! Frames and checksums: encode + CRC + checked decode, and CRC32C beside a
//! plain `memcpy` of the same bytes.
//!
//! | id | what |
//! |---|---|
//! | `wire/encode_decode/{64B,4KiB}` | `wire::encode` (payload CRC on) then `Frame::new_checked` and a payload read |
//! | `crc32c/hw/{64B,4KiB,1MiB}` | `crc::crc32c` (the `crc32c` crate, hardware CRC32 when the CPU has it) |
//! | `crc32c/table/{…}` | `crc::crc32c_table` (portable slice-by-16) |
//! | `memcpy/{…}` | `copy_from_slice` of the same bytes: a bandwidth baseline |
//!
//! Throughput is in payload bytes (`Throughput::Bytes`); the 64-byte header of a
//! frame is not counted.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use switchyard_core::{
    crc::{crc32c, crc32c_table},
    wire::{Frame, FrameOp, HEADER_LEN, HeaderFields, encode},
};

/// Deterministic non-trivial bytes.
fn bytes(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(131) ^ (i >> 7)) as u8)
        .collect()
}

fn put_fields(len: usize) -> HeaderFields {
    HeaderFields {
        op: FrameOp::Put as u8,
        src_pe: 3,
        dst_pe: 1027,
        seq: 1 << 40,
        ack: (1 << 40) - 9,
        context: 0x0100_0000_0000_002A,
        topo_version: 7,
        offset: 1 << 20,
        span: len as u32,
        ..HeaderFields::default()
    }
}

/// One encode, one checked decode; returns a byte of the payload.
#[inline]
fn roundtrip(buf: &mut [u8], fields: &HeaderFields, payload: &[u8]) -> u8 {
    let n = encode(buf, fields, payload, true).expect("buffer fits the frame");
    match Frame::new_checked(&buf[..n]) {
        Ok(f) => f.payload()[payload.len() - 1],
        Err(e) => panic!("a frame just encoded must decode: {e}"),
    }
}

fn wire(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    for (label, len) in [("64B", 64usize), ("4KiB", 4096)] {
        let payload = bytes(len);
        let fields = put_fields(len);
        let mut buf = vec![0u8; HEADER_LEN + len];
        // Correctness before timing: the frame decodes whole and equal.
        let n = encode(&mut buf, &fields, &payload, true).expect("fits");
        let f = Frame::new_checked(&buf[..n]).expect("decodes");
        assert_eq!(f.payload(), &payload[..]);
        assert_eq!(f.op(), Some(FrameOp::Put));
        assert_eq!(f.header().dst_pe.get(), 1027);
        assert_eq!(f.check_heap(2 << 20), Ok((1 << 20)..(1 << 20) + len as u64));

        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("encode_decode/{label}"), |b| {
            b.iter(|| roundtrip(&mut buf, black_box(&fields), black_box(&payload)))
        });
    }
    g.finish();
}

fn crc(c: &mut Criterion) {
    let sizes = [("64B", 64usize), ("4KiB", 4096), ("1MiB", 1 << 20)];
    let data: Vec<Vec<u8>> = sizes.iter().map(|&(_, len)| bytes(len)).collect();
    // Correctness before timing: both implementations compute the same function.
    for d in &data {
        assert_eq!(crc32c(d), crc32c_table(d));
    }
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);

    let mut g = c.benchmark_group("crc32c");
    for (&(label, len), d) in sizes.iter().zip(&data) {
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("hw/{label}"), |b| b.iter(|| crc32c(black_box(d))));
        g.bench_function(format!("table/{label}"), |b| {
            b.iter(|| crc32c_table(black_box(d)))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("memcpy");
    for (&(label, len), d) in sizes.iter().zip(&data) {
        let mut dst = vec![0u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(label, |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(d));
                black_box(&mut dst);
            })
        });
        assert_eq!(&dst, d);
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = switchyard_benches::criterion_config();
    targets = wire, crc
}
criterion_main!(benches);
