use switchyard_core::wire::Frame;

use super::*;

fn frame(p: &CompactPut, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; COMPACT_LEN + payload.len()];
    b[COMPACT_LEN..].copy_from_slice(payload);
    assert_eq!(seal(&mut b, p, payload.len()), Some(b.len()));
    b
}

const P: CompactPut = CompactPut {
    flags: flags::FENCE,
    seq: 77,
    ack: 12,
    context: 99,
    offset: 4096,
};

#[test]
fn roundtrip_and_expand() {
    let payload: Vec<u8> = (0..64).collect();
    let b = frame(&P, &payload);
    assert_eq!(b.len(), COMPACT_LEN + 64);
    assert_eq!(frame_len(&b), Some(b.len()));
    let mut longer = b.clone();
    longer.extend_from_slice(&[0xEE; 10]);
    assert_eq!(
        check(&longer),
        Ok((P, b.len())),
        "trailing bytes are the next frame's"
    );
    let mut out = [0u8; HEADER_LEN + COMPACT_MAX_PAYLOAD];
    let n = expand(&P, 3, 4, &payload, &mut out).unwrap();
    let f = Frame::new_checked(&out[..n]).expect("the expansion is a valid full frame");
    let h = f.header();
    assert_eq!(f.op(), Some(FrameOp::Put));
    assert_eq!((h.src_pe.get(), h.dst_pe.get()), (3, 4));
    assert_eq!((h.seq.get(), h.ack.get(), h.context.get()), (77, 12, 99));
    assert_eq!(
        (h.offset.get(), h.span.get(), h.flags),
        (4096, 64, flags::FENCE)
    );
    assert_eq!(f.payload(), &payload[..]);
}

#[test]
fn bad_input_is_a_typed_error() {
    let payload = [5u8; 8];
    let b = frame(&P, &payload);
    assert_eq!(
        check(&b[..10]),
        Err(CompactError::Truncated {
            have: 10,
            need: COMPACT_LEN
        })
    );
    assert_eq!(
        check(&b[..COMPACT_LEN + 7]),
        Err(CompactError::Truncated {
            have: COMPACT_LEN + 7,
            need: COMPACT_LEN + 8
        })
    );
    let mut m = b.clone();
    m[1] = b'Y';
    assert!(matches!(check(&m), Err(CompactError::BadMagic(_))));
    let mut m = b.clone();
    m[2] |= flags::PAYLOAD_CRC;
    assert!(matches!(check(&m), Err(CompactError::BadFlags(_))));
    let mut m = b.clone();
    m[3] = 0;
    assert_eq!(check(&m), Err(CompactError::Empty));
    for at in [2usize, 8, 20, 39, COMPACT_LEN, COMPACT_LEN + 7] {
        let mut m = b.clone();
        m[at] ^= if at == 2 { flags::REPLAY } else { 1 };
        assert!(
            matches!(check(&m), Err(CompactError::BadCrc { .. })),
            "byte {at}"
        );
    }
    let far = CompactPut {
        offset: u64::MAX - 8,
        ..P
    };
    assert_eq!(check(&frame(&far, &payload)), Ok((far, COMPACT_LEN + 8)));
    let over = CompactPut {
        offset: u64::MAX - 7,
        ..P
    };
    assert_eq!(
        check(&frame(&over, &payload)),
        Err(CompactError::OffsetOverflow {
            offset: u64::MAX - 7,
            len: 8
        })
    );
    // A flag set after sealing is covered again by `reseal`.
    let mut m = b.clone();
    m[2] |= flags::REPLAY;
    reseal(&mut m);
    let (p, _) = check(&m).unwrap();
    assert_eq!(p.flags, flags::FENCE | flags::REPLAY);
    // So is ACK_NOW (a quiet's last frame), and the expanded frame has it.
    m[2] |= flags::ACK_NOW;
    reseal(&mut m);
    let (p, n) = check(&m).unwrap();
    assert_eq!(p.flags, flags::FENCE | flags::REPLAY | flags::ACK_NOW);
    let mut full = [0u8; 64 + COMPACT_MAX_PAYLOAD];
    let k = expand(&p, 1, 2, &m[COMPACT_LEN..n], &mut full).unwrap();
    let f = Frame::new_checked(&full[..k]).unwrap();
    assert_eq!(f.header().flags & flags::ACK_NOW, flags::ACK_NOW);
}

#[test]
fn seal_refuses_what_it_cannot_carry() {
    let mut b = vec![0u8; COMPACT_LEN + 300];
    assert_eq!(seal(&mut b, &P, 0), None);
    assert_eq!(seal(&mut b, &P, COMPACT_MAX_PAYLOAD + 1), None);
    let crc = CompactPut {
        flags: flags::PAYLOAD_CRC,
        ..P
    };
    assert_eq!(seal(&mut b, &crc, 8), None);
    assert_eq!(seal(&mut b[..COMPACT_LEN + 7], &P, 8), None);
    assert_eq!(
        seal(&mut b, &P, COMPACT_MAX_PAYLOAD),
        Some(COMPACT_LEN + 255)
    );
}
