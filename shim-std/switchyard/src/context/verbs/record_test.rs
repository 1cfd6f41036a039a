//! Records and cards: every bad byte is a typed error.

use proptest::prelude::*;
use switchyard_verbs::{card::LinkLayer, params::Mtu};

use super::{record::SET_PIECE_QPS, *};

fn pe_card() -> VerbsCard {
    VerbsCard {
        link_layer: LinkLayer::Ethernet,
        mtu: Mtu::M1024,
        lid: 0,
        gid: Some([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        atomics: true,
        rkey: 0x1234,
        heap_base: 0x7f00_0000_0000,
        heap_len: 1 << 20,
        qps: [QpAddr::default(); MAX_QPS],
        n_qps: 0,
    }
}

#[test]
fn records_round_trip() {
    let mut qpns = [0u32; MAX_QPS];
    qpns[..3].copy_from_slice(&[0x101, 0xFF_FFFF, 7]);
    for r in [
        Record::Qpns { n: 3, qpns },
        Record::Rts { generation: 0 },
        Record::Rts { generation: 9 },
        Record::Failed { generation: 1 },
        Record::Applied {
            generation: 1,
            qp: 1,
            of: 1,
            seq: 0,
        },
        Record::Applied {
            generation: u32::MAX,
            qp: 8,
            of: 8,
            seq: u64::MAX,
        },
        Record::Withheld { generation: 3 },
    ] {
        let b = r.encode();
        assert!(Record::is_verbs(&b));
        assert_eq!(Record::decode(&b), Ok(r));
    }
    // The TCP link-state records are not verbs records.
    let mut ls = [0u8; 32];
    ls[..4].copy_from_slice(b"SYLS");
    assert!(!Record::is_verbs(&ls));
}

#[test]
fn bad_records_are_named() {
    let mut qpns = [0u32; MAX_QPS];
    qpns[..2].copy_from_slice(&[5, 6]);
    let good = Record::Qpns { n: 2, qpns }.encode();
    let bad = |f: &dyn Fn(&mut [u8; 32])| {
        let mut b = good;
        f(&mut b);
        Record::decode(&b).unwrap_err()
    };
    assert_eq!(
        bad(&|b| b[0] = b'X'),
        RecordError::Magic {
            got: [b'X', b'Y', b'V']
        }
    );
    assert_eq!(bad(&|b| b[3] = 11), RecordError::Kind { kind: 11 });
    assert_eq!(bad(&|b| b[3] = 0), RecordError::Kind { kind: 0 });
    let mut w = Record::Withheld { generation: 2 }.encode();
    w[8] = 1;
    assert_eq!(Record::decode(&w), Err(RecordError::Trailing { at: 8 }));
    assert_eq!(bad(&|b| b[4] = 1), RecordError::QpCount { n: 1 });
    assert_eq!(bad(&|b| b[4] = 10), RecordError::QpCount { n: 10 });
    assert_eq!(bad(&|b| b[8..11].fill(0)), RecordError::Qpn { index: 1 });
    assert_eq!(bad(&|b| b[31] = 1), RecordError::Trailing { at: 31 });
    let mut rts = Record::Rts { generation: 1 }.encode();
    rts[8] = 1;
    assert_eq!(Record::decode(&rts), Err(RecordError::Trailing { at: 8 }));
    // Receipts: the data QP within 1..=of, of within 1..=8, nothing
    // after the receipt.
    let applied = Record::Applied {
        generation: 3,
        qp: 2,
        of: 4,
        seq: u64::MAX - 1,
    }
    .encode();
    let bad_applied = |f: &dyn Fn(&mut [u8; 32])| {
        let mut b = applied;
        f(&mut b);
        Record::decode(&b).unwrap_err()
    };
    assert_eq!(
        bad_applied(&|b| b[8] = 0),
        RecordError::DataQp { qp: 0, of: 4 }
    );
    assert_eq!(
        bad_applied(&|b| b[8] = 5),
        RecordError::DataQp { qp: 5, of: 4 }
    );
    assert_eq!(
        bad_applied(&|b| b[9] = 0),
        RecordError::DataQp { qp: 2, of: 0 }
    );
    assert_eq!(
        bad_applied(&|b| b[9] = 9),
        RecordError::DataQp { qp: 2, of: 9 }
    );
    assert_eq!(
        bad_applied(&|b| b[18] = 1),
        RecordError::Trailing { at: 18 }
    );
}

#[test]
fn a_pe_card_travels_in_two_pieces_checked_like_any_record() {
    let bytes = pe_card().to_vec().unwrap();
    let [a, b] = Record::card_pieces(&bytes).unwrap();
    let (ea, eb) = (a.encode(), b.encode());
    assert_eq!(Record::decode(&ea), Ok(a));
    assert_eq!(Record::decode(&eb), Ok(b));
    // Put together in either order, a piece sent again replacing the
    // earlier one; the card then parses as a bootstrap card.
    let mut got = CardPieces::default();
    let Record::CardPiece { piece, bytes: pb } = b else {
        unreachable!()
    };
    got.put(piece, &pb);
    assert_eq!(got.card(), None, "one piece is not a card");
    got.put(piece, &pb);
    let Record::CardPiece { piece, bytes: pa } = a else {
        unreachable!()
    };
    got.put(piece, &pa);
    assert_eq!(parse_pe_card(got.card().unwrap()), Ok(pe_card()));
    // Typed errors: a piece other than 0 or 1, bytes past piece 1's 18.
    let mut bad = eb;
    bad[4] = 2;
    assert_eq!(
        Record::decode(&bad),
        Err(RecordError::CardPiece { piece: 2 })
    );
    let mut bad = eb;
    bad[5 + 18] = 1;
    assert_eq!(Record::decode(&bad), Err(RecordError::Trailing { at: 23 }));
    // A card of another length has no pieces.
    assert_eq!(Record::card_pieces(&bytes[..40]), None);
}

#[test]
fn a_refusal_carries_its_reason_checked() {
    for code in 1..=6u8 {
        let reason = Refusal::from_code(code).unwrap();
        assert_eq!(reason.code(), code);
        let b = Record::Refused { reason }.encode();
        assert_eq!(&b[..5], &[b'S', b'Y', b'V', 7, code]);
        assert_eq!(Record::decode(&b), Ok(Record::Refused { reason }));
        assert!(!reason.to_string().is_empty());
    }
    assert!(
        Refusal::Budget.to_string().contains("verbs_lazy_peers"),
        "the budget's refusal names its setting"
    );
    let good = Record::Refused {
        reason: Refusal::Budget,
    }
    .encode();
    for code in [0u8, 7, 255] {
        let mut b = good;
        b[4] = code;
        assert_eq!(Record::decode(&b), Err(RecordError::Refusal { code }));
        assert_eq!(Refusal::from_code(code), None);
    }
    let mut b = good;
    b[5] = 1;
    assert_eq!(Record::decode(&b), Err(RecordError::Trailing { at: 5 }));
}

#[test]
fn bootstrap_cards_are_pe_cards() {
    let pe = pe_card();
    let bytes = pe.to_vec().unwrap();
    assert_eq!(parse_pe_card(&bytes), Ok(pe));
    // A card with QPs is not what the bootstrap carries.
    let with_qps = pair_card(&pe, &[0x11, 0x12], 42, 1, 0);
    assert!(matches!(
        parse_pe_card(&with_qps.to_vec().unwrap()),
        Err(CardError::Field {
            field: "qp count",
            value: 2,
            ..
        })
    ));
    assert!(matches!(
        parse_pe_card(&bytes[..10]),
        Err(CardError::Truncated { .. })
    ));
    // The pair card's PSNs are the ones the sender's driver starts with.
    assert_eq!(with_qps.qps()[1].qpn, 0x12);
    assert_eq!(with_qps.qps()[1].psn, psn_for(42, 1, 0, 1, 0));
}

proptest! {
    /// Arbitrary bytes with the verbs magic decode to an error or to a
    /// record that encodes to the same bytes; nothing panics.
    #[test]
    fn arbitrary_records_never_panic(tail in proptest::array::uniform29(any::<u8>())) {
        let mut b = [0u8; 32];
        b[..3].copy_from_slice(b"SYV");
        b[3..].copy_from_slice(&tail);
        if let Ok(r) = Record::decode(&b) {
            prop_assert_eq!(r.encode(), b);
        }
    }
}

#[test]
fn set_records_round_trip_in_one_or_two_pieces() {
    let id = SetId {
        context: 0xBEEF,
        set: 7,
    };
    for n in 2..=MAX_QPS {
        let qpns: Vec<u32> = (0..n as u32).map(|i| 0xFF_FF00 + i + 1).collect();
        for answer in [false, true] {
            let (recs, k) = Record::set_qpns(id, answer, &qpns).expect("pieces");
            assert_eq!(k, if n > SET_PIECE_QPS { 2 } else { 1 }, "{n} QPs");
            let mut got = SetQpnPieces::default();
            for (j, r) in recs[..k].iter().enumerate() {
                let b = r.encode();
                assert!(Record::is_verbs(&b));
                let d = Record::decode(&b).expect("decodes");
                assert_eq!(d, *r);
                if j + 1 < k {
                    got.put(&d);
                    assert_eq!(got.qpns(), None, "complete after piece {j} of {k}");
                } else {
                    got.put(&d);
                }
            }
            assert_eq!(got.qpns(), Some(&qpns[..]), "{n} QPs");
            // The pieces in reverse order put together the same.
            let mut rev = SetQpnPieces::default();
            for r in recs[..k].iter().rev() {
                rev.put(r);
            }
            assert_eq!(rev.qpns(), Some(&qpns[..]));
        }
    }
    for answer in [false, true] {
        let r = Record::SetClosed { id, answer };
        assert_eq!(Record::decode(&r.encode()), Ok(r));
    }
    // Counts and QPNs a record cannot carry.
    assert!(Record::set_qpns(id, false, &[1]).is_none());
    assert!(Record::set_qpns(id, false, &[1; MAX_QPS + 1]).is_none());
    assert!(Record::set_qpns(id, false, &[1, 0]).is_none());
    assert!(Record::set_qpns(id, false, &[1, 1 << 24]).is_none());
}

#[test]
fn a_piece_with_another_count_starts_over() {
    let id = SetId::default();
    let nine: Vec<u32> = (1..=9).collect();
    let (recs, _) = Record::set_qpns(id, false, &nine).unwrap();
    let mut p = SetQpnPieces::default();
    p.put(&recs[0]);
    // A piece of a 3-QP set (another count): the 9-QP piece is dropped.
    let (three, _) = Record::set_qpns(id, false, &[4, 5, 6]).unwrap();
    p.put(&three[0]);
    assert_eq!(p.qpns(), Some(&[4, 5, 6][..]));
    p.put(&recs[1]);
    assert_eq!(p.qpns(), None, "piece 1 alone of the 9-QP set");
    // Other records are ignored.
    p.put(&Record::Rts { generation: 1 });
    assert_eq!(p.qpns(), None);
}

#[test]
fn bad_set_records_are_named() {
    let id = SetId { context: 1, set: 2 };
    let (recs, _) = Record::set_qpns(id, false, &[9, 8, 7]).unwrap();
    let good = recs[0].encode();
    let bad = |at: usize, v: u8| {
        let mut b = good;
        b[at] = v;
        Record::decode(&b)
    };
    assert_eq!(bad(7, 2), Err(RecordError::SetRole { role: 2 }));
    assert_eq!(bad(8, 1), Err(RecordError::SetPiece { piece: 1, n: 3 }));
    assert_eq!(bad(8, 2), Err(RecordError::SetPiece { piece: 2, n: 3 }));
    assert_eq!(bad(9, 1), Err(RecordError::QpCount { n: 1 }));
    assert_eq!(bad(9, 10), Err(RecordError::QpCount { n: 10 }));
    // A zero QPN (the second), and bytes after the three.
    let mut b = good;
    b[13..16].fill(0);
    assert_eq!(Record::decode(&b), Err(RecordError::Qpn { index: 1 }));
    assert_eq!(bad(19, 1), Err(RecordError::Trailing { at: 19 }));
    // Piece 1 of a 9-QP set: its QPN indexes are 7 and 8.
    let nine: Vec<u32> = (1..=9).collect();
    let (r9, _) = Record::set_qpns(id, false, &nine).unwrap();
    let mut b = r9[1].encode();
    b[13..16].fill(0);
    assert_eq!(Record::decode(&b), Err(RecordError::Qpn { index: 8 }));
    // A closed record: its answer byte, and nothing after it.
    let closed = Record::SetClosed { id, answer: true }.encode();
    let mut b = closed;
    b[7] = 9;
    assert_eq!(Record::decode(&b), Err(RecordError::SetRole { role: 9 }));
    let mut b = closed;
    b[8] = 1;
    assert_eq!(Record::decode(&b), Err(RecordError::Trailing { at: 8 }));
}

proptest! {
    #[test]
    fn set_record_decode_never_panics(bytes in proptest::array::uniform32(any::<u8>()), kind in 8u8..=10) {
        let mut b = bytes;
        b[..3].copy_from_slice(b"SYV");
        b[3] = kind;
        if let Ok(r) = Record::decode(&b) {
            prop_assert_eq!(Record::decode(&r.encode()), Ok(r));
        }
    }
}

#[test]
fn set_link_records_round_trip() {
    let id = SetId {
        context: 0x1234,
        set: 0xFE,
    };
    for answer in [false, true] {
        for link in [
            SetLink::Failed { generation: 1 },
            SetLink::Failed {
                generation: u32::MAX,
            },
            SetLink::Applied {
                generation: 2,
                qp: 1,
                of: 1,
                seq: 0,
            },
            SetLink::Applied {
                generation: 7,
                qp: 8,
                of: 8,
                seq: u64::MAX,
            },
            SetLink::Withheld { generation: 3 },
            SetLink::Rts { generation: 0 },
            SetLink::Rts { generation: 9 },
        ] {
            let r = Record::SetLink { id, answer, link };
            let b = r.encode();
            assert_eq!(&b[..4], b"SYV\x0a");
            assert_eq!(b[7], u8::from(answer));
            assert_eq!(Record::decode(&b), Ok(r), "{r:?}");
        }
    }
}

#[test]
fn bad_set_link_records_are_named() {
    let id = SetId { context: 3, set: 4 };
    let failed = Record::SetLink {
        id,
        answer: false,
        link: SetLink::Failed { generation: 5 },
    }
    .encode();
    let applied = Record::SetLink {
        id,
        answer: true,
        link: SetLink::Applied {
            generation: 5,
            qp: 2,
            of: 4,
            seq: u64::MAX - 1,
        },
    }
    .encode();
    let bad = |good: [u8; 32], at: usize, v: u8| {
        let mut b = good;
        b[at] = v;
        Record::decode(&b)
    };
    assert_eq!(bad(failed, 7, 2), Err(RecordError::SetRole { role: 2 }));
    assert_eq!(bad(failed, 8, 0), Err(RecordError::SetLink { sub: 0 }));
    assert_eq!(bad(failed, 8, 5), Err(RecordError::SetLink { sub: 5 }));
    assert_eq!(bad(failed, 13, 1), Err(RecordError::Trailing { at: 13 }));
    assert_eq!(bad(failed, 31, 1), Err(RecordError::Trailing { at: 31 }));
    // Withheld and RTS end at the generation too.
    assert_eq!(
        bad(failed, 8, 3),
        Ok(Record::SetLink {
            id,
            answer: false,
            link: SetLink::Withheld { generation: 5 }
        })
    );
    assert_eq!(
        bad(failed, 8, 4),
        Ok(Record::SetLink {
            id,
            answer: false,
            link: SetLink::Rts { generation: 5 }
        })
    );
    // Receipts: the data QP within 1..=of, of within 1..=8, nothing after.
    assert_eq!(
        bad(applied, 13, 0),
        Err(RecordError::DataQp { qp: 0, of: 4 })
    );
    assert_eq!(
        bad(applied, 13, 5),
        Err(RecordError::DataQp { qp: 5, of: 4 })
    );
    assert_eq!(
        bad(applied, 14, 0),
        Err(RecordError::DataQp { qp: 2, of: 0 })
    );
    assert_eq!(
        bad(applied, 14, 9),
        Err(RecordError::DataQp { qp: 2, of: 9 })
    );
    assert_eq!(bad(applied, 23, 1), Err(RecordError::Trailing { at: 23 }));
    assert_eq!(bad(applied, 7, 7), Err(RecordError::SetRole { role: 7 }));
    // A failed record read as applied: its zero data QP is named.
    assert_eq!(bad(failed, 8, 2), Err(RecordError::DataQp { qp: 0, of: 0 }));
}
