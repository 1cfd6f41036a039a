//! The verbs control records two PEs exchange over TCP (QP numbers, RTS,
//! failure, receipts, card pieces, refusals), in the TCP driver's 32-byte
//! link-state records: encoded and decoded, every bad byte a typed error.

use switchyard_verbs::card::{HEADER_LEN, MAX_24, MAX_QPS};

use super::common::{RECORD_MAGIC as MAGIC, Refusal};

/// A verbs control record between two PEs, carried in the TCP driver's
/// 32-byte link-state records. Layout: `"SYV"`, kind `u8`, then
///
/// * kind 1, QPNs: count `u8` (2 to 9: control + data), then each QPN in 3
///   bytes little-endian (non-zero);
/// * kind 2, RTS: generation `u32` LE, the sender's QPs toward the reader are
///   at RTS for it (0: the first connect);
/// * kind 3, failed: generation `u32` LE, the sender's link to the reader
///   failed and it rebuilds to that generation;
/// * kind 4, applied: generation `u32` LE (the failure's, as in kind 3),
///   data QP `u8` (1 to `of`), `of` `u8` (the sender's data QPs, 1 to 8),
///   receipt `u64` LE: the highest receipt of the reader's puts the sender
///   saw on that data QP before the link failed (one record per data QP);
/// * kind 5, withheld: generation `u32` LE (the failure's): the sender
///   cannot tell which of the reader's puts landed (its QPs did not report
///   their last WQE in time, or could not be moved to the error state), so
///   the reader reports its puts in doubt lost now instead of waiting for
///   receipts until its op timeout;
/// * kind 6, card piece: piece `u8` (0 or 1), then that piece of the
///   sender's 44-byte PE card: bytes 0 to 25 (piece 0, 26 bytes) or 26 to
///   43 (piece 1, 18 bytes). With lazy cards the reader may not have the
///   sender's card (it was served as a stranger): both pieces come before
///   the sender's [`Record::Qpns`] ([`CardPieces`] puts them together; the
///   card is then checked as a bootstrap card is);
/// * kind 7, refused: reason `u8` ([`Refusal`], 1 to 6): the sender will not
///   pair with the reader over verbs (an answer to the reader's
///   [`Record::Qpns`]): the reader stops waiting for the link and keeps the
///   sender on TCP;
///
/// and zeros to the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The sender's QP numbers toward the reader.
    Qpns {
        /// How many of `qpns` are used.
        n: u8,
        /// QP numbers (index 0 the control QP).
        qpns: [u32; MAX_QPS],
    },
    /// The sender's QPs are at RTS for `generation`.
    Rts {
        /// The generation.
        generation: u32,
    },
    /// The sender's link failed; it rebuilds to `generation`.
    Failed {
        /// The generation.
        generation: u32,
    },
    /// After the link failed (rebuilding to `generation`), the reader's
    /// puts on data QP `qp` that landed at the sender: every one up to
    /// receipt `seq`, none after it.
    Applied {
        /// The generation of the failure.
        generation: u32,
        /// The data QP (1 to `of`).
        qp: u8,
        /// The sender's data QPs per peer.
        of: u8,
        /// The highest receipt seen (0: none).
        seq: u64,
    },
    /// After the link failed (rebuilding to `generation`), the sender
    /// cannot tell which of the reader's puts landed: no receipts will come.
    Withheld {
        /// The generation of the failure.
        generation: u32,
    },
    /// A piece of the sender's PE card (lazy cards: the reader may not
    /// have it).
    CardPiece {
        /// 0 (bytes 0 to 25) or 1 (bytes 26 to 43).
        piece: u8,
        /// The piece's bytes; piece 1 uses the first 18 (the rest 0).
        bytes: [u8; CARD_PIECE],
    },
    /// The sender will not pair with the reader over verbs, and why: the
    /// reader keeps it on TCP.
    Refused {
        /// Why.
        reason: Refusal,
    },
}

/// Bytes of a PE card in piece 0 of [`Record::CardPiece`] (piece 1 holds
/// the rest: 18).
pub const CARD_PIECE: usize = 26;
/// A PE card's length (the verbs card header, no QPs).
pub const PE_CARD_LEN: usize = HEADER_LEN;
const _: () = assert!(PE_CARD_LEN > CARD_PIECE && PE_CARD_LEN <= 2 * CARD_PIECE);

impl Record {
    /// The two [`Record::CardPiece`]s of a PE card (`None` for a card of
    /// another length than `PE_CARD_LEN`, 44).
    pub fn card_pieces(card: &[u8]) -> Option<[Record; 2]> {
        if card.len() != PE_CARD_LEN {
            return None;
        }
        let mut a = [0u8; CARD_PIECE];
        let mut b = [0u8; CARD_PIECE];
        a.copy_from_slice(&card[..CARD_PIECE]);
        b[..PE_CARD_LEN - CARD_PIECE].copy_from_slice(&card[CARD_PIECE..]);
        Some([
            Record::CardPiece { piece: 0, bytes: a },
            Record::CardPiece { piece: 1, bytes: b },
        ])
    }
}

/// A PE card received in [`Record::CardPiece`]s: complete once both
/// pieces came (a piece sent again replaces the earlier one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardPieces {
    bytes: [u8; PE_CARD_LEN],
    got: u8,
}

impl Default for CardPieces {
    fn default() -> Self {
        CardPieces {
            bytes: [0; PE_CARD_LEN],
            got: 0,
        }
    }
}

impl CardPieces {
    /// Takes piece `piece` (0 or 1; another is ignored).
    pub fn put(&mut self, piece: u8, bytes: &[u8; CARD_PIECE]) {
        match piece {
            0 => self.bytes[..CARD_PIECE].copy_from_slice(bytes),
            1 => self.bytes[CARD_PIECE..].copy_from_slice(&bytes[..PE_CARD_LEN - CARD_PIECE]),
            _ => return,
        }
        self.got |= 1 << piece;
    }

    /// The card's bytes once both pieces came.
    pub fn card(&self) -> Option<&[u8; PE_CARD_LEN]> {
        (self.got == 3).then_some(&self.bytes)
    }
}

/// Why a verbs control record was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Not a verbs record.
    #[error("verbs record magic {got:02x?}, expected \"SYV\"")]
    Magic {
        /// The bytes found.
        got: [u8; 3],
    },
    /// An unknown kind.
    #[error(
        "verbs record kind {kind}, expected 1 (QPNs), 2 (RTS), 3 (failed), 4 (applied), 5 (withheld), 6 (card piece) or 7 (refused)"
    )]
    Kind {
        /// The kind byte.
        kind: u8,
    },
    /// A QP count outside 2..=9.
    #[error("verbs record QP count {n}, expected 2 to 9 (control + 1..=8 data)")]
    QpCount {
        /// The count.
        n: u8,
    },
    /// A data QP outside 1..=of, or `of` outside 1..=8.
    #[error("verbs record data QP {qp} of {of}, expected 1 to {of} of 1 to 8")]
    DataQp {
        /// The data QP.
        qp: u8,
        /// The data QP count.
        of: u8,
    },
    /// A zero QPN.
    #[error("verbs record QPN {index} is 0, expected 1 to 2^24-1")]
    Qpn {
        /// Its index.
        index: u8,
    },
    /// A card piece other than 0 or 1.
    #[error("verbs record card piece {piece}, expected 0 or 1")]
    CardPiece {
        /// The piece.
        piece: u8,
    },
    /// A refusal code other than 1 to 6.
    #[error("verbs record refusal {code}, expected 1 to 6")]
    Refusal {
        /// The code.
        code: u8,
    },
    /// Non-zero bytes after the fields.
    #[error("verbs record has non-zero bytes after its fields, at byte {at}")]
    Trailing {
        /// The first one.
        at: usize,
    },
}

impl Record {
    /// Whether `b` is meant to be a verbs record (its magic).
    pub fn is_verbs(b: &[u8; 32]) -> bool {
        b[..3] == MAGIC
    }

    /// The 32 bytes.
    pub fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..3].copy_from_slice(&MAGIC);
        match *self {
            Record::Qpns { n, qpns } => {
                b[3] = 1;
                let n = n.min(MAX_QPS as u8);
                b[4] = n;
                for (i, q) in qpns.iter().take(usize::from(n)).enumerate() {
                    b[5 + 3 * i..8 + 3 * i].copy_from_slice(&(q & MAX_24).to_le_bytes()[..3]);
                }
            }
            Record::Rts { generation } => {
                b[3] = 2;
                b[4..8].copy_from_slice(&generation.to_le_bytes());
            }
            Record::Failed { generation } => {
                b[3] = 3;
                b[4..8].copy_from_slice(&generation.to_le_bytes());
            }
            Record::Applied {
                generation,
                qp,
                of,
                seq,
            } => {
                b[3] = 4;
                b[4..8].copy_from_slice(&generation.to_le_bytes());
                b[8] = qp;
                b[9] = of;
                b[10..18].copy_from_slice(&seq.to_le_bytes());
            }
            Record::Withheld { generation } => {
                b[3] = 5;
                b[4..8].copy_from_slice(&generation.to_le_bytes());
            }
            Record::CardPiece { piece, bytes } => {
                b[3] = 6;
                b[4] = piece;
                let n = if piece == 0 {
                    CARD_PIECE
                } else {
                    PE_CARD_LEN - CARD_PIECE
                };
                b[5..5 + n].copy_from_slice(&bytes[..n]);
            }
            Record::Refused { reason } => {
                b[3] = 7;
                b[4] = reason.code();
            }
        }
        b
    }

    /// Decodes and checks 32 record bytes.
    ///
    /// # Errors
    ///
    /// [`RecordError`] naming what was wrong; never panics.
    pub fn decode(b: &[u8; 32]) -> Result<Record, RecordError> {
        if b[..3] != MAGIC {
            return Err(RecordError::Magic {
                got: [b[0], b[1], b[2]],
            });
        }
        let gen_at = || u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let (rec, end) = match b[3] {
            1 => {
                let n = b[4];
                if !(2..=MAX_QPS as u8).contains(&n) {
                    return Err(RecordError::QpCount { n });
                }
                let mut qpns = [0u32; MAX_QPS];
                for (i, q) in qpns.iter_mut().take(usize::from(n)).enumerate() {
                    let at = 5 + 3 * i;
                    *q = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], 0]);
                    if *q == 0 {
                        return Err(RecordError::Qpn { index: i as u8 });
                    }
                }
                (Record::Qpns { n, qpns }, 5 + 3 * usize::from(n))
            }
            2 => (
                Record::Rts {
                    generation: gen_at(),
                },
                8,
            ),
            3 => (
                Record::Failed {
                    generation: gen_at(),
                },
                8,
            ),
            4 => {
                let (qp, of) = (b[8], b[9]);
                if !(1..=MAX_QPS as u8 - 1).contains(&of) || !(1..=of).contains(&qp) {
                    return Err(RecordError::DataQp { qp, of });
                }
                let mut seq = [0u8; 8];
                seq.copy_from_slice(&b[10..18]);
                (
                    Record::Applied {
                        generation: gen_at(),
                        qp,
                        of,
                        seq: u64::from_le_bytes(seq),
                    },
                    18,
                )
            }
            5 => (
                Record::Withheld {
                    generation: gen_at(),
                },
                8,
            ),
            6 => {
                let piece = b[4];
                let n = match piece {
                    0 => CARD_PIECE,
                    1 => PE_CARD_LEN - CARD_PIECE,
                    _ => return Err(RecordError::CardPiece { piece }),
                };
                let mut bytes = [0u8; CARD_PIECE];
                bytes[..n].copy_from_slice(&b[5..5 + n]);
                (Record::CardPiece { piece, bytes }, 5 + n)
            }
            7 => match Refusal::from_code(b[4]) {
                Some(reason) => (Record::Refused { reason }, 5),
                None => return Err(RecordError::Refusal { code: b[4] }),
            },
            kind => return Err(RecordError::Kind { kind }),
        };
        if let Some(at) = (end..32).find(|&i| b[i] != 0) {
            return Err(RecordError::Trailing { at });
        }
        Ok(rec)
    }
}
