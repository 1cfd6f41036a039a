//! The verbs control records two PEs exchange over TCP (QP numbers, RTS,
//! failure, receipts, card pieces, refusals, a context's QP sets and their
//! failures), in the TCP driver's 32-byte link-state records: encoded and decoded, every bad byte a typed error.

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
/// * kind 8, set QPNs: context `u16` LE, set `u8` (the [`SetId`]), answer
///   `u8` (0: from the set's opener, 1: the reader's answer), piece
///   `u8` (0 or 1), count `u8` (2 to 9: the set's control + data QPs),
///   then the piece's QPNs in 3 bytes LE each (non-zero): QPs 0 to 6 in
///   piece 0, QPs 7 and 8 in piece 1, which exists only for more than 7
///   QPs ([`SetQpnPieces`] puts them together). The QPs of the sender's
///   QP set `id` toward the reader (`VerbsDriver::open_set`): from the
///   opener, the reader opens the matching set and answers with its own
///   (sent once its QPs are at RTS);
/// * kind 9, set closed: context `u16` LE, set `u8`, answer `u8` (as in
///   kind 8): the sender closed its set `id` toward the reader (or, as
///   an answer, would not open it), and the reader closes its matching
///   set;
/// * kind 10, set link: context `u16` LE, set `u8`, answer `u8` (as in
///   kind 8), sub-type `u8` ([`SetLink`]: 1 failed, 2 applied, 3 withheld,
///   4 RTS), generation `u32` LE, and for applied only data QP `u8`, `of`
///   `u8` and receipt `u64` LE: kinds 3, 4, 5 and 2 for the QP set `id`
///   between the sender and the reader (its own generations and receipts,
///   as a set is a driver of its own: `sets.rs`);
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
    /// A piece of the QP numbers of the sender's QP set `id` toward the
    /// reader.
    SetQpns {
        /// The set.
        id: SetId,
        /// Whether the sender answers the reader's opening (else it opens).
        answer: bool,
        /// 0 (QPs 0 to 6) or 1 (QPs 7 and 8; only when `n` is over 7).
        piece: u8,
        /// The set's QPs in all (2 to 9: control + data).
        n: u8,
        /// This piece's QPNs (the first `min(n, 7)` of piece 0, the first
        /// `n - 7` of piece 1; the rest 0).
        qpns: [u32; SET_PIECE_QPS],
    },
    /// The sender closed its QP set `id` toward the reader.
    SetClosed {
        /// The set.
        id: SetId,
        /// Whether the sender is the answering end (else the opener).
        answer: bool,
    },
    /// The link of the sender's QP set `id` toward the reader: its
    /// failure, receipts and rebuild.
    SetLink {
        /// The set.
        id: SetId,
        /// Whether the sender is the answering end (else the opener).
        answer: bool,
        /// What it says.
        link: SetLink,
    },
}

/// What a [`Record::SetLink`] says of a QP set's link: the set's
/// [`Record::Failed`], [`Record::Applied`], [`Record::Withheld`] and
/// [`Record::Rts`], with the set's own generations and receipts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetLink {
    /// The sender's end of the set failed; it rebuilds to `generation`.
    Failed {
        /// The generation.
        generation: u32,
    },
    /// The reader's puts on the set's data QP `qp` that landed at the
    /// sender, up to receipt `seq` (as [`Record::Applied`]).
    Applied {
        /// The generation of the failure.
        generation: u32,
        /// The data QP (1 to `of`).
        qp: u8,
        /// The set's data QPs.
        of: u8,
        /// The highest receipt seen (0: none).
        seq: u64,
    },
    /// The sender cannot tell which of the reader's puts on the set landed.
    Withheld {
        /// The generation of the failure.
        generation: u32,
    },
    /// The sender's end of the set is at RTS for `generation`.
    Rts {
        /// The generation.
        generation: u32,
    },
}

impl SetLink {
    /// The generation it names.
    pub fn generation(&self) -> u32 {
        match *self {
            SetLink::Failed { generation }
            | SetLink::Applied { generation, .. }
            | SetLink::Withheld { generation }
            | SetLink::Rts { generation } => generation,
        }
    }
}

/// A QP set's id between two PEs: the opening context's id at the sender
/// and the set's number within that context (one set per (context,
/// peer) is what a context opens, but the id leaves room for more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SetId {
    /// The sender's context.
    pub context: u16,
    /// The set within the context.
    pub set: u8,
}

/// QPNs in one [`Record::SetQpns`] piece.
pub const SET_PIECE_QPS: usize = 7;
const _: () = assert!(10 + 3 * SET_PIECE_QPS <= 32 && 2 * SET_PIECE_QPS >= MAX_QPS);

impl Record {
    /// The [`Record::SetQpns`] pieces of set `id`'s QPNs (one for up to 7
    /// QPs, two above); `None` for a count outside 2 to 9 or a zero QPN.
    pub fn set_qpns(id: SetId, answer: bool, qpns: &[u32]) -> Option<([Record; 2], usize)> {
        let n = qpns.len();
        if !(2..=MAX_QPS).contains(&n) || qpns.iter().any(|&q| q == 0 || q > MAX_24) {
            return None;
        }
        let mut out = [Record::SetClosed { id, answer }; 2];
        let pieces = n.div_ceil(SET_PIECE_QPS);
        for (piece, chunk) in qpns.chunks(SET_PIECE_QPS).enumerate() {
            let mut q = [0u32; SET_PIECE_QPS];
            q[..chunk.len()].copy_from_slice(chunk);
            out[piece] = Record::SetQpns {
                id,
                answer,
                piece: piece as u8,
                n: n as u8,
                qpns: q,
            };
        }
        Some((out, pieces))
    }
}

/// A set's QPNs received in [`Record::SetQpns`] pieces: complete once
/// every piece its count needs came with that count (a piece sent again
/// replaces the earlier one; a piece with another count starts over).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetQpnPieces {
    qpns: [u32; MAX_QPS],
    n: u8,
    got: u8,
}

impl SetQpnPieces {
    /// Takes a piece (anything but a [`Record::SetQpns`] is ignored).
    pub fn put(&mut self, rec: &Record) {
        let Record::SetQpns { piece, n, qpns, .. } = *rec else {
            return;
        };
        if n != self.n {
            *self = SetQpnPieces {
                n,
                ..SetQpnPieces::default()
            };
        }
        let at = usize::from(piece) * SET_PIECE_QPS;
        let k = usize::from(n).saturating_sub(at).min(SET_PIECE_QPS);
        if let Some(dst) = self.qpns.get_mut(at..at + k) {
            dst.copy_from_slice(&qpns[..k]);
            self.got |= 1 << piece;
        }
    }

    /// The set's QPNs once every piece came.
    pub fn qpns(&self) -> Option<&[u32]> {
        let need = if usize::from(self.n) > SET_PIECE_QPS {
            3
        } else {
            1
        };
        (self.n >= 2 && self.got == need).then(|| &self.qpns[..usize::from(self.n)])
    }
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
        "verbs record kind {kind}, expected 1 (QPNs), 2 (RTS), 3 (failed), 4 (applied), 5 (withheld), 6 (card piece), 7 (refused), 8 (set QPNs), 9 (set closed) or 10 (set link)"
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
    /// A set QPNs piece other than 0, or 1 for a set of more than 7 QPs.
    #[error("verbs set QPNs piece {piece} of a set of {n} QPs, expected 0, or 1 above 7 QPs")]
    SetPiece {
        /// The piece.
        piece: u8,
        /// The set's QP count.
        n: u8,
    },
    /// A set record's answer byte other than 0 or 1.
    #[error("verbs set record answer byte {role}, expected 0 (opener) or 1 (answer)")]
    SetRole {
        /// The byte.
        role: u8,
    },
    /// A set link record's sub-type other than 1 to 4.
    #[error(
        "verbs set link record sub-type {sub}, expected 1 (failed), 2 (applied), 3 (withheld) or 4 (RTS)"
    )]
    SetLink {
        /// The byte.
        sub: u8,
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
            Record::SetQpns {
                id,
                answer,
                piece,
                n,
                qpns,
            } => {
                b[3] = 8;
                put_id(&mut b, id, answer);
                b[8] = piece;
                let n = n.min(MAX_QPS as u8);
                b[9] = n;
                let k = usize::from(n)
                    .saturating_sub(usize::from(piece) * SET_PIECE_QPS)
                    .min(SET_PIECE_QPS);
                for (i, q) in qpns.iter().take(k).enumerate() {
                    b[10 + 3 * i..13 + 3 * i].copy_from_slice(&(q & MAX_24).to_le_bytes()[..3]);
                }
            }
            Record::SetClosed { id, answer } => {
                b[3] = 9;
                put_id(&mut b, id, answer);
            }
            Record::SetLink { id, answer, link } => {
                b[3] = 10;
                put_id(&mut b, id, answer);
                b[8] = match link {
                    SetLink::Failed { .. } => 1,
                    SetLink::Applied { .. } => 2,
                    SetLink::Withheld { .. } => 3,
                    SetLink::Rts { .. } => 4,
                };
                b[9..13].copy_from_slice(&link.generation().to_le_bytes());
                if let SetLink::Applied { qp, of, seq, .. } = link {
                    b[13] = qp;
                    b[14] = of;
                    b[15..23].copy_from_slice(&seq.to_le_bytes());
                }
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
            8 => {
                let answer = answer_at(b)?;
                let (piece, n) = (b[8], b[9]);
                if !(2..=MAX_QPS as u8).contains(&n) {
                    return Err(RecordError::QpCount { n });
                }
                let k = match piece {
                    0 => usize::from(n).min(SET_PIECE_QPS),
                    1 if usize::from(n) > SET_PIECE_QPS => usize::from(n) - SET_PIECE_QPS,
                    _ => return Err(RecordError::SetPiece { piece, n }),
                };
                let mut qpns = [0u32; SET_PIECE_QPS];
                for (i, q) in qpns.iter_mut().take(k).enumerate() {
                    let at = 10 + 3 * i;
                    *q = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], 0]);
                    if *q == 0 {
                        return Err(RecordError::Qpn {
                            index: (usize::from(piece) * SET_PIECE_QPS + i) as u8,
                        });
                    }
                }
                (
                    Record::SetQpns {
                        id: id_at(b),
                        answer,
                        piece,
                        n,
                        qpns,
                    },
                    10 + 3 * k,
                )
            }
            9 => (
                Record::SetClosed {
                    id: id_at(b),
                    answer: answer_at(b)?,
                },
                8,
            ),
            10 => {
                let answer = answer_at(b)?;
                let generation = u32::from_le_bytes([b[9], b[10], b[11], b[12]]);
                let (link, end) = match b[8] {
                    1 => (SetLink::Failed { generation }, 13),
                    2 => {
                        let (qp, of) = (b[13], b[14]);
                        if !(1..=MAX_QPS as u8 - 1).contains(&of) || !(1..=of).contains(&qp) {
                            return Err(RecordError::DataQp { qp, of });
                        }
                        let mut seq = [0u8; 8];
                        seq.copy_from_slice(&b[15..23]);
                        let seq = u64::from_le_bytes(seq);
                        (
                            SetLink::Applied {
                                generation,
                                qp,
                                of,
                                seq,
                            },
                            23,
                        )
                    }
                    3 => (SetLink::Withheld { generation }, 13),
                    4 => (SetLink::Rts { generation }, 13),
                    sub => return Err(RecordError::SetLink { sub }),
                };
                (
                    Record::SetLink {
                        id: id_at(b),
                        answer,
                        link,
                    },
                    end,
                )
            }
            kind => return Err(RecordError::Kind { kind }),
        };
        if let Some(at) = (end..32).find(|&i| b[i] != 0) {
            return Err(RecordError::Trailing { at });
        }
        Ok(rec)
    }
}

/// Writes a set id at bytes 4 to 6, and whether it is an answer at 7.
fn put_id(b: &mut [u8; 32], id: SetId, answer: bool) {
    b[4..6].copy_from_slice(&id.context.to_le_bytes());
    b[6] = id.set;
    b[7] = u8::from(answer);
}

/// Whether a set record is an answer (byte 7).
fn answer_at(b: &[u8; 32]) -> Result<bool, RecordError> {
    match b[7] {
        0 => Ok(false),
        1 => Ok(true),
        role => Err(RecordError::SetRole { role }),
    }
}

/// The set id at bytes 4 to 6.
fn id_at(b: &[u8; 32]) -> SetId {
    SetId {
        context: u16::from_le_bytes([b[4], b[5]]),
        set: b[6],
    }
}
