//! Records and cards: every bad byte is a typed error.

use proptest::prelude::*;
use switchyard_verbs::{card::LinkLayer, params::Mtu};

use super::*;

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
    assert_eq!(bad(&|b| b[3] = 8), RecordError::Kind { kind: 8 });
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
