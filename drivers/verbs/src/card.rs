//! The verbs part of a bootstrap card: what a peer needs to connect its RC
//! QPs to ours and to address our heap (QPNs and PSNs, LID/GID, path MTU,
//! the heap's rkey, base address and length).
//!
//! The bytes travel as the card's opaque `verbs` field (at most 256 bytes).
//! Decoding is checked and versioned: every bad byte is a [`CardError`]
//! naming the field; nothing panics.
//!
//! ```text
//! 0   magic 0x56 ('V')        1  version (1)
//! 2   flags: bit 0 GID valid, bit 1 atomics
//! 3   QP count: 0 in a PE card, else 1 control + 1..=8 data
//! 4   port active MTU (ibv_mtu 1..=5)   5  link layer (1 IB, 2 Ethernet)
//! 6   LID (u16 LE)            8  GID (16 bytes)
//! 24  rkey (u32 LE)           28 heap base (u64 LE)   36 heap length (u64 LE)
//! 44  per QP: QPN (u32 LE, 24 bits), initial PSN (u32 LE, 24 bits)
//! ```

use crate::params::{MAX_DATA_QPS, Mtu};

/// Card magic.
pub const MAGIC: u8 = 0x56;
/// The encoding this build writes and reads.
pub const VERSION: u8 = 1;
/// Fixed part.
pub const HEADER_LEN: usize = 44;
/// Most QPs in a card.
pub const MAX_QPS: usize = 1 + MAX_DATA_QPS as usize;
/// Longest encoding.
pub const MAX_LEN: usize = HEADER_LEN + 8 * MAX_QPS;

// Fits the bootstrap card's `verbs` field (256 bytes).
const _: () = assert!(MAX_LEN <= 256);

/// Largest QPN or PSN (24 bits).
pub const MAX_24: u32 = 0xFF_FFFF;

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand: addressed by LID (GID only across subnets).
    InfiniBand,
    /// Ethernet (RoCE): addressed by GID.
    Ethernet,
}

impl LinkLayer {
    /// From the card / `IBV_LINK_LAYER_*` encoding (0, unspecified, is IB).
    pub const fn from_u8(v: u8) -> Option<LinkLayer> {
        match v {
            0 | 1 => Some(LinkLayer::InfiniBand),
            2 => Some(LinkLayer::Ethernet),
            _ => None,
        }
    }

    /// The encoding.
    pub const fn to_u8(self) -> u8 {
        match self {
            LinkLayer::InfiniBand => 1,
            LinkLayer::Ethernet => 2,
        }
    }
}

/// One QP's address: its number and the PSN it starts sending with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAddr {
    /// QP number (24 bits, non-zero).
    pub qpn: u32,
    /// Initial send PSN (24 bits).
    pub psn: u32,
}

/// The verbs addressing of one PE. Equality looks at the used QPs only.
#[derive(Debug, Clone, Copy)]
pub struct VerbsCard {
    /// The port's link layer.
    pub link_layer: LinkLayer,
    /// The port's active MTU.
    pub mtu: Mtu,
    /// LID (InfiniBand).
    pub lid: u16,
    /// GID, when the port is addressed by one (RoCE always).
    pub gid: Option<[u8; 16]>,
    /// Whether the device does RDMA atomics.
    pub atomics: bool,
    /// rkey of the heap's memory region.
    pub rkey: u32,
    /// Virtual address of the heap's first byte.
    pub heap_base: u64,
    /// Heap length in bytes.
    pub heap_len: u64,
    /// QPs toward the reader of this card: index 0 the control QP, then
    /// data. None (`n_qps` 0) in a *PE card*, the part every peer needs
    /// (port address, heap), which travels in the bootstrap card; the QPNs
    /// are per pair and travel in a *pair card*.
    pub qps: [QpAddr; MAX_QPS],
    /// How many of `qps` are used.
    pub n_qps: u8,
}

/// Why card bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CardError {
    /// Fewer bytes than the fields need.
    #[error("verbs card truncated at {field}: {need} bytes needed, {got} present")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes needed up to its end.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// Bytes after the last QP.
    #[error("verbs card has {extra} bytes after its {n_qps} QPs")]
    Trailing {
        /// Extra bytes.
        extra: usize,
        /// QPs declared.
        n_qps: u8,
    },
    /// Not a verbs card.
    #[error("verbs card magic {got:#04x}, expected 0x56")]
    Magic {
        /// The byte found.
        got: u8,
    },
    /// Another encoding version.
    #[error("verbs card version {got}, this build reads version {VERSION}")]
    Version {
        /// The version found.
        got: u8,
    },
    /// A field holds a value outside its range.
    #[error("verbs card {field} = {value}: expected {expected}")]
    Field {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What was expected.
        expected: &'static str,
    },
    /// Unknown flag bits.
    #[error("verbs card flags {flags:#04x} has unknown bits")]
    Flags {
        /// The flags byte.
        flags: u8,
    },
}

impl PartialEq for VerbsCard {
    fn eq(&self, o: &Self) -> bool {
        self.link_layer == o.link_layer
            && self.mtu == o.mtu
            && self.lid == o.lid
            && self.gid == o.gid
            && self.atomics == o.atomics
            && self.rkey == o.rkey
            && self.heap_base == o.heap_base
            && self.heap_len == o.heap_len
            && self.qps() == o.qps()
    }
}

impl Eq for VerbsCard {}

const FLAG_GID: u8 = 1;
const FLAG_ATOMICS: u8 = 2;

impl VerbsCard {
    /// The used QP addresses.
    pub fn qps(&self) -> &[QpAddr] {
        &self.qps[..usize::from(self.n_qps).min(MAX_QPS)]
    }

    /// Checks the fields an encoder could get wrong (QP count, 24-bit QPNs
    /// and PSNs, the heap range, addressing for the link layer).
    ///
    /// # Errors
    ///
    /// [`CardError::Field`] naming the first bad field.
    pub fn check(&self) -> Result<(), CardError> {
        let field = |field, value: u64, expected| {
            Err(CardError::Field {
                field,
                value,
                expected,
            })
        };
        if self.n_qps != 0 && !(2..=MAX_QPS as u8).contains(&self.n_qps) {
            return field(
                "qp count",
                self.n_qps.into(),
                "0 (a PE card) or 2 to 9 (control + 1..=8 data)",
            );
        }
        for q in self.qps() {
            if q.qpn == 0 || q.qpn > MAX_24 {
                return field("qpn", q.qpn.into(), "1 to 2^24-1");
            }
            if q.psn > MAX_24 {
                return field("psn", q.psn.into(), "0 to 2^24-1");
            }
        }
        if self.heap_base.checked_add(self.heap_len).is_none() {
            return field("heap length", self.heap_len, "base + length within 64 bits");
        }
        match self.link_layer {
            LinkLayer::Ethernet if self.gid.is_none() => {
                return field("gid", 0, "a GID on an Ethernet (RoCE) port");
            }
            LinkLayer::InfiniBand if self.gid.is_none() && self.lid == 0 => {
                return field("lid", 0, "a non-zero LID (or a GID) on an InfiniBand port");
            }
            _ => {}
        }
        if self.gid == Some([0; 16]) {
            return field("gid", 0, "a non-zero GID");
        }
        Ok(())
    }

    /// Encodes into `out`, returning the length written.
    ///
    /// # Errors
    ///
    /// What [`VerbsCard::check`] finds.
    pub fn encode(&self, out: &mut [u8; MAX_LEN]) -> Result<usize, CardError> {
        self.check()?;
        out[0] = MAGIC;
        out[1] = VERSION;
        out[2] = if self.gid.is_some() { FLAG_GID } else { 0 }
            | if self.atomics { FLAG_ATOMICS } else { 0 };
        out[3] = self.n_qps;
        out[4] = self.mtu.to_ibv() as u8;
        out[5] = self.link_layer.to_u8();
        out[6..8].copy_from_slice(&self.lid.to_le_bytes());
        out[8..24].copy_from_slice(&self.gid.unwrap_or([0; 16]));
        out[24..28].copy_from_slice(&self.rkey.to_le_bytes());
        out[28..36].copy_from_slice(&self.heap_base.to_le_bytes());
        out[36..44].copy_from_slice(&self.heap_len.to_le_bytes());
        let mut at = HEADER_LEN;
        for q in self.qps() {
            out[at..at + 4].copy_from_slice(&q.qpn.to_le_bytes());
            out[at + 4..at + 8].copy_from_slice(&q.psn.to_le_bytes());
            at += 8;
        }
        Ok(at)
    }

    /// Encodes into a new vector (for the bootstrap card's `verbs` field).
    ///
    /// # Errors
    ///
    /// What [`VerbsCard::check`] finds.
    pub fn to_vec(&self) -> Result<Vec<u8>, CardError> {
        let mut buf = [0u8; MAX_LEN];
        let n = self.encode(&mut buf)?;
        Ok(buf[..n].to_vec())
    }

    /// Decodes and checks card bytes.
    ///
    /// # Errors
    ///
    /// [`CardError`] naming what was wrong; never panics.
    pub fn decode(b: &[u8]) -> Result<VerbsCard, CardError> {
        let need = |field: &'static str, n: usize| {
            if b.len() < n {
                Err(CardError::Truncated {
                    field,
                    need: n,
                    got: b.len(),
                })
            } else {
                Ok(())
            }
        };
        need("magic", 1)?;
        if b[0] != MAGIC {
            return Err(CardError::Magic { got: b[0] });
        }
        need("version", 2)?;
        if b[1] != VERSION {
            return Err(CardError::Version { got: b[1] });
        }
        need("header", HEADER_LEN)?;
        let flags = b[2];
        if flags & !(FLAG_GID | FLAG_ATOMICS) != 0 {
            return Err(CardError::Flags { flags });
        }
        let n_qps = b[3];
        if n_qps != 0 && !(2..=MAX_QPS as u8).contains(&n_qps) {
            return Err(CardError::Field {
                field: "qp count",
                value: n_qps.into(),
                expected: "0 (a PE card) or 2 to 9 (control + 1..=8 data)",
            });
        }
        let mtu = Mtu::from_ibv(b[4].into()).ok_or(CardError::Field {
            field: "mtu",
            value: b[4].into(),
            expected: "1 to 5 (256 to 4096 bytes)",
        })?;
        let link_layer = LinkLayer::from_u8(b[5]).ok_or(CardError::Field {
            field: "link layer",
            value: b[5].into(),
            expected: "1 (InfiniBand) or 2 (Ethernet)",
        })?;
        let u16_at = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(x)
        };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[8..24]);
        if flags & FLAG_GID == 0 && gid != [0; 16] {
            return Err(CardError::Field {
                field: "gid",
                value: 1,
                expected: "zero bytes when the GID flag is clear",
            });
        }
        let total = HEADER_LEN + 8 * usize::from(n_qps);
        need("qps", total)?;
        if b.len() > total {
            return Err(CardError::Trailing {
                extra: b.len() - total,
                n_qps,
            });
        }
        let mut qps = [QpAddr::default(); MAX_QPS];
        for (i, q) in qps.iter_mut().take(usize::from(n_qps)).enumerate() {
            let at = HEADER_LEN + 8 * i;
            *q = QpAddr {
                qpn: u32_at(at),
                psn: u32_at(at + 4),
            };
        }
        let card = VerbsCard {
            link_layer,
            mtu,
            lid: u16_at(6),
            gid: (flags & FLAG_GID != 0).then_some(gid),
            atomics: flags & FLAG_ATOMICS != 0,
            rkey: u32_at(24),
            heap_base: u64_at(28),
            heap_len: u64_at(36),
            qps,
            n_qps,
        };
        card.check()?;
        Ok(card)
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    fn sample() -> VerbsCard {
        let mut qps = [QpAddr::default(); MAX_QPS];
        qps[0] = QpAddr {
            qpn: 0x11,
            psn: 0xABCDEF,
        };
        qps[1] = QpAddr { qpn: 0x12, psn: 7 };
        qps[2] = QpAddr {
            qpn: 0xFF_FFFF,
            psn: 0,
        };
        VerbsCard {
            link_layer: LinkLayer::Ethernet,
            mtu: Mtu::M1024,
            lid: 0,
            gid: Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]),
            atomics: true,
            rkey: 0xDEAD_BEEF,
            heap_base: 0x7f00_0000_0000,
            heap_len: 1 << 30,
            qps,
            n_qps: 3,
        }
    }

    #[test]
    fn round_trip_and_layout() {
        let c = sample();
        let v = c.to_vec().unwrap();
        assert_eq!(v.len(), HEADER_LEN + 24);
        assert_eq!(&v[..6], &[MAGIC, VERSION, 3, 3, 3, 2]);
        assert_eq!(VerbsCard::decode(&v).unwrap(), c);
        let pe = VerbsCard { n_qps: 0, ..c };
        let v = pe.to_vec().unwrap();
        assert_eq!(v.len(), HEADER_LEN);
        assert_eq!(VerbsCard::decode(&v).unwrap(), pe);
        assert!(pe.qps().is_empty());
    }

    #[test]
    fn bad_bytes_are_named() {
        let v = sample().to_vec().unwrap();
        let dec = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = v.clone();
            f(&mut b);
            VerbsCard::decode(&b).unwrap_err()
        };
        assert_eq!(
            VerbsCard::decode(&[]).unwrap_err(),
            CardError::Truncated {
                field: "magic",
                need: 1,
                got: 0
            }
        );
        assert_eq!(dec(&|b| b[0] = 0x57), CardError::Magic { got: 0x57 });
        assert_eq!(dec(&|b| b[1] = 2), CardError::Version { got: 2 });
        assert_eq!(
            dec(&|b| b.truncate(30)),
            CardError::Truncated {
                field: "header",
                need: 44,
                got: 30
            }
        );
        assert_eq!(
            dec(&|b| b.truncate(60)),
            CardError::Truncated {
                field: "qps",
                need: 68,
                got: 60
            }
        );
        assert_eq!(
            dec(&|b| b.push(0)),
            CardError::Trailing { extra: 1, n_qps: 3 }
        );
        assert_eq!(dec(&|b| b[2] = 0x80), CardError::Flags { flags: 0x80 });
        assert!(matches!(
            dec(&|b| b[3] = 1),
            CardError::Field {
                field: "qp count",
                value: 1,
                ..
            }
        ));
        assert!(matches!(
            dec(&|b| b[3] = 10),
            CardError::Field {
                field: "qp count",
                value: 10,
                ..
            }
        ));
        assert!(matches!(
            dec(&|b| b[4] = 6),
            CardError::Field {
                field: "mtu",
                value: 6,
                ..
            }
        ));
        assert!(matches!(
            dec(&|b| b[5] = 3),
            CardError::Field {
                field: "link layer",
                ..
            }
        ));
        // A QPN over 24 bits, a zero QPN, a PSN over 24 bits.
        assert!(matches!(
            dec(&|b| b[47] = 1),
            CardError::Field { field: "qpn", .. }
        ));
        assert!(matches!(
            dec(&|b| b[44..48].fill(0)),
            CardError::Field {
                field: "qpn",
                value: 0,
                ..
            }
        ));
        assert!(matches!(
            dec(&|b| b[51] = 1),
            CardError::Field { field: "psn", .. }
        ));
        // RoCE without a GID; a zero GID.
        assert!(matches!(
            dec(&|b| b[2] = 2),
            CardError::Field { field: "gid", .. }
        ));
        assert!(matches!(
            dec(&|b| b[8..24].fill(0)),
            CardError::Field { field: "gid", .. }
        ));
        // A heap wrapping around the address space.
        assert!(matches!(
            dec(&|b| b[36..44].fill(0xff)),
            CardError::Field {
                field: "heap length",
                ..
            }
        ));
        // IB without GID needs a LID.
        let ib = VerbsCard {
            link_layer: LinkLayer::InfiniBand,
            gid: None,
            lid: 0,
            ..sample()
        };
        assert!(matches!(
            ib.to_vec(),
            Err(CardError::Field { field: "lid", .. })
        ));
        let ib = VerbsCard { lid: 5, ..ib };
        assert_eq!(VerbsCard::decode(&ib.to_vec().unwrap()).unwrap(), ib);
    }

    proptest! {
        /// Arbitrary bytes decode to an error or to a card that re-encodes to
        /// the same bytes; nothing panics.
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..160)) {
            if let Ok(c) = VerbsCard::decode(&b) {
                prop_assert_eq!(c.to_vec().unwrap(), b);
            }
        }

        /// Valid prefixes with random QPs round-trip.
        #[test]
        fn cards_round_trip(n in 2u8..=9, qpn in 1u32..=MAX_24, psn in 0u32..=MAX_24, rkey: u32, base in 0u64..u64::MAX / 2, len in 0u64..u64::MAX / 2) {
            let mut c = sample();
            c.n_qps = n;
            for (i, q) in c.qps.iter_mut().enumerate().take(usize::from(n)) {
                *q = QpAddr { qpn: (qpn + i as u32).min(MAX_24), psn: psn ^ (i as u32 & 1) };
            }
            c.rkey = rkey;
            c.heap_base = base;
            c.heap_len = len;
            let v = c.to_vec().unwrap();
            prop_assert_eq!(VerbsCard::decode(&v).unwrap(), c);
        }

        /// Flipping any one byte of a valid card gives an error or another
        /// valid card, never a panic.
        #[test]
        fn corrupted_cards_never_panic(at in 0usize..68, x: u8) {
            let mut v = sample().to_vec().unwrap();
            v[at] ^= x;
            let _ = VerbsCard::decode(&v);
        }
    }
}
