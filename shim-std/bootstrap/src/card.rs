//! [`Card`]: what one PE tells all others at bootstrap, its byte encoding
//! ([`Card::encode`], [`Card::decode`]) and [`CardError`].

use std::{
    net::{SocketAddr, SocketAddrV4, SocketAddrV6},
    str::Utf8Error,
};

use switchyard_core::class::CLASS_ENCODING_VERSION;

use crate::cursor::Cursor;

/// Version of the card encoding ([`Card::encode`]).
pub const CARD_FORMAT_VERSION: u8 = 2;

/// Most TCP rails a card lists.
pub const MAX_TCP_RAILS: usize = 4;

/// `switch_id` of a card whose switch is not known.
pub const SWITCH_UNKNOWN: u32 = u32::MAX;

const CARD_MAGIC: [u8; 4] = *b"SYCD";
const MAX_SHM_NAME: usize = 255;
const MAX_VERBS: usize = 256;

/// Why bytes are not a [`Card`] (or a card cannot be encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CardError {
    /// The bytes end inside a field.
    #[error("card truncated in {field}: needs {needed} bytes, {available} left")]
    Truncated {
        /// The field.
        field: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// Not a card.
    #[error("not a switchyard card: magic {found:02x?}, expected {CARD_MAGIC:02x?} (\"SYCD\")")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A card format this build does not read.
    #[error("card format version {found} is not supported (this build reads {supported})")]
    UnsupportedVersion {
        /// The version found.
        found: u8,
        /// The one this build reads.
        supported: u8,
    },
    /// Flag bits this build does not know.
    #[error("card flags {flags:#04x} have unknown bits (known: 0x07)")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
    },
    /// A field longer than its bound.
    #[error("card field {field} is {len} bytes, at most {max} allowed")]
    Overlong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A text field that is not UTF-8.
    #[error("card field {field} is not UTF-8")]
    BadUtf8 {
        /// The field.
        field: &'static str,
        /// Where it breaks.
        #[source]
        source: Utf8Error,
    },
    /// A name that cannot be used.
    #[error("card field {field} is {reason}")]
    BadName {
        /// The field.
        field: &'static str,
        /// What is wrong (`empty`, `contains a NUL byte`).
        reason: &'static str,
    },
    /// A TCP address family other than 4 or 6.
    #[error("card tcp address family {found} is not 4 or 6")]
    BadAddressFamily {
        /// The family byte.
        found: u8,
    },
    /// A value that contradicts the others (a run of a localities frame
    /// past the job size, an unknown refusal reason).
    #[error("bootstrap field {field}: {reason}")]
    Inconsistent {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// Bytes after the last field.
    #[error("card has {extra} trailing bytes")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
}

/// What one PE tells all others at bootstrap: who it is, where it runs, and
/// how each transport reaches it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Card {
    /// The job.
    pub job_id: u64,
    /// The PE's rank.
    pub rank: u32,
    /// Its node ([`node_id_here`](crate::node_id_here)).
    pub node_id: u64,
    /// Its leaf switch, [`SWITCH_UNKNOWN`] when not known.
    pub switch_id: u32,
    /// The [`CLASS_ENCODING_VERSION`] it speaks.
    pub class_encoding_version: u8,
    /// Its process id.
    pub pid: u32,
    /// Its shared-memory object name (at most 255 bytes, no NUL).
    pub shm: Option<String>,
    /// Its tree of switches (PEs on different trees cannot reach each other
    /// over the network), [`SWITCH_UNKNOWN`] when not known.
    pub tree_id: u32,
    /// The job cookie: every TCP handshake of the job carries rank 0's. Other
    /// ranks may leave it zero.
    pub cookie: [u8; 16],
    /// Its TCP listening address per rail (rail order), at most
    /// [`MAX_TCP_RAILS`].
    pub tcp: Vec<SocketAddr>,
    /// Its verbs addressing, opaque here (at most 256 bytes).
    pub verbs: Option<Vec<u8>>,
}

const FLAG_SHM: u8 = 1;
const FLAG_TCP: u8 = 2;
const FLAG_VERBS: u8 = 4;
const CARD_FIXED_LEN: usize = 4 + 1 + 1 + 1 + 8 + 4 + 8 + 4 + 4 + 4 + 16;

fn check_shm_name(name: &str) -> Result<(), CardError> {
    if name.is_empty() {
        return Err(CardError::BadName {
            field: "shm name",
            reason: "empty",
        });
    }
    if name.len() > MAX_SHM_NAME {
        return Err(CardError::Overlong {
            field: "shm name",
            len: name.len(),
            max: MAX_SHM_NAME,
        });
    }
    if name.contains('\0') {
        return Err(CardError::BadName {
            field: "shm name",
            reason: "contains a NUL byte",
        });
    }
    Ok(())
}

impl Card {
    /// The longest encoding of a card, in bytes.
    pub const MAX_ENCODED_LEN: usize = CARD_FIXED_LEN
        + (1 + MAX_SHM_NAME)
        + (1 + MAX_TCP_RAILS * (1 + 16 + 2 + 4 + 4))
        + (2 + MAX_VERBS);

    /// A card for `rank` of job `job_id` on node `node_id`: switch unknown,
    /// this build's [`CLASS_ENCODING_VERSION`], this process's pid, no
    /// transport addressing yet.
    pub fn new(job_id: u64, rank: u32, node_id: u64) -> Card {
        Card {
            job_id,
            rank,
            node_id,
            switch_id: SWITCH_UNKNOWN,
            tree_id: SWITCH_UNKNOWN,
            cookie: [0; 16],
            class_encoding_version: CLASS_ENCODING_VERSION,
            pid: std::process::id(),
            shm: None,
            tcp: Vec::new(),
            verbs: None,
        }
    }

    /// Checks the bounds [`Card::encode`] needs.
    ///
    /// # Errors
    /// [`CardError::Overlong`] for an shm name over 255 bytes or verbs
    /// addressing over 256, [`CardError::BadName`] for an empty shm name or
    /// one with a NUL byte.
    pub fn check(&self) -> Result<(), CardError> {
        if let Some(name) = &self.shm {
            check_shm_name(name)?;
        }
        if self.tcp.len() > MAX_TCP_RAILS {
            return Err(CardError::Overlong {
                field: "tcp rails",
                len: self.tcp.len(),
                max: MAX_TCP_RAILS,
            });
        }
        if let Some(v) = &self.verbs
            && v.len() > MAX_VERBS
        {
            return Err(CardError::Overlong {
                field: "verbs",
                len: v.len(),
                max: MAX_VERBS,
            });
        }
        Ok(())
    }

    /// Encodes the card, little-endian:
    ///
    /// `"SYCD"`, format version `u8` ([`CARD_FORMAT_VERSION`]), class encoding
    /// version `u8`, flags `u8` (1 shm, 2 tcp, 4 verbs), job id `u64`, rank
    /// `u32`, node id `u64`, switch id `u32`, tree id `u32`, pid `u32`, cookie
    /// (16 bytes); then, when its flag is set: shm name (`u8` length, UTF-8),
    /// tcp rails (count `u8`, 1 to [`MAX_TCP_RAILS`], then per rail: family
    /// `u8` 4 or 6, the address's 4 or 16 bytes, port `u16`, and for IPv6 flow
    /// info and scope id `u32`), verbs addressing (`u16` length, bytes). At most
    /// [`Card::MAX_ENCODED_LEN`] bytes.
    ///
    /// # Errors
    /// As [`Card::check`].
    pub fn encode(&self) -> Result<Vec<u8>, CardError> {
        self.check()?;
        let mut out = Vec::with_capacity(Self::MAX_ENCODED_LEN);
        let flags = if self.shm.is_some() { FLAG_SHM } else { 0 }
            | if self.tcp.is_empty() { 0 } else { FLAG_TCP }
            | if self.verbs.is_some() { FLAG_VERBS } else { 0 };
        out.extend_from_slice(&CARD_MAGIC);
        out.push(CARD_FORMAT_VERSION);
        out.push(self.class_encoding_version);
        out.push(flags);
        out.extend_from_slice(&self.job_id.to_le_bytes());
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&self.node_id.to_le_bytes());
        out.extend_from_slice(&self.switch_id.to_le_bytes());
        out.extend_from_slice(&self.tree_id.to_le_bytes());
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.cookie);
        if let Some(name) = &self.shm {
            // check() bounded it to 255 bytes.
            out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
            out.extend_from_slice(name.as_bytes());
        }
        if !self.tcp.is_empty() {
            // check() bounded it to MAX_TCP_RAILS.
            out.push(self.tcp.len() as u8);
        }
        for addr in &self.tcp {
            match addr {
                SocketAddr::V4(a) => {
                    out.push(4);
                    out.extend_from_slice(&a.ip().octets());
                    out.extend_from_slice(&a.port().to_le_bytes());
                }
                SocketAddr::V6(a) => {
                    out.push(6);
                    out.extend_from_slice(&a.ip().octets());
                    out.extend_from_slice(&a.port().to_le_bytes());
                    out.extend_from_slice(&a.flowinfo().to_le_bytes());
                    out.extend_from_slice(&a.scope_id().to_le_bytes());
                }
            }
        }
        if let Some(v) = &self.verbs {
            // check() bounded it to 256 bytes.
            out.extend_from_slice(&u16::try_from(v.len()).unwrap_or(u16::MAX).to_le_bytes());
            out.extend_from_slice(v);
        }
        Ok(out)
    }

    /// Decodes a card written by [`Card::encode`].
    ///
    /// # Errors
    /// A [`CardError`] for every malformation: [`CardError::Truncated`],
    /// [`CardError::BadMagic`], [`CardError::UnsupportedVersion`],
    /// [`CardError::UnknownFlags`], [`CardError::Overlong`],
    /// [`CardError::BadUtf8`], [`CardError::BadName`],
    /// [`CardError::BadAddressFamily`], [`CardError::TrailingBytes`]. Never
    /// panics.
    pub fn decode(bytes: &[u8]) -> Result<Card, CardError> {
        let mut c = Cursor::new(bytes);
        let magic: [u8; 4] = c.array("magic")?;
        if magic != CARD_MAGIC {
            return Err(CardError::BadMagic { found: magic });
        }
        let version = c.u8("format version")?;
        if version != CARD_FORMAT_VERSION {
            return Err(CardError::UnsupportedVersion {
                found: version,
                supported: CARD_FORMAT_VERSION,
            });
        }
        let class_encoding_version = c.u8("class encoding version")?;
        let flags = c.u8("flags")?;
        if flags & !(FLAG_SHM | FLAG_TCP | FLAG_VERBS) != 0 {
            return Err(CardError::UnknownFlags { flags });
        }
        let job_id = c.u64("job id")?;
        let rank = c.u32("rank")?;
        let node_id = c.u64("node id")?;
        let switch_id = c.u32("switch id")?;
        let tree_id = c.u32("tree id")?;
        let pid = c.u32("pid")?;
        let cookie: [u8; 16] = c.array("cookie")?;
        let shm = if flags & FLAG_SHM != 0 {
            let len = usize::from(c.u8("shm name length")?);
            let raw = c.take(len, "shm name")?;
            let name = std::str::from_utf8(raw).map_err(|source| CardError::BadUtf8 {
                field: "shm name",
                source,
            })?;
            check_shm_name(name)?;
            Some(name.to_owned())
        } else {
            None
        };
        let mut tcp = Vec::new();
        if flags & FLAG_TCP != 0 {
            let n = usize::from(c.u8("tcp rail count")?);
            if n == 0 || n > MAX_TCP_RAILS {
                return Err(CardError::Overlong {
                    field: "tcp rails",
                    len: n,
                    max: MAX_TCP_RAILS,
                });
            }
            for _ in 0..n {
                tcp.push(match c.u8("tcp address family")? {
                    4 => {
                        let ip: [u8; 4] = c.array("tcp address")?;
                        let port = c.u16("tcp port")?;
                        SocketAddr::V4(SocketAddrV4::new(ip.into(), port))
                    }
                    6 => {
                        let ip: [u8; 16] = c.array("tcp address")?;
                        let port = c.u16("tcp port")?;
                        let flow = c.u32("tcp flow info")?;
                        let scope = c.u32("tcp scope id")?;
                        SocketAddr::V6(SocketAddrV6::new(ip.into(), port, flow, scope))
                    }
                    found => return Err(CardError::BadAddressFamily { found }),
                });
            }
        }
        let verbs = if flags & FLAG_VERBS != 0 {
            let len = usize::from(c.u16("verbs length")?);
            if len > MAX_VERBS {
                return Err(CardError::Overlong {
                    field: "verbs",
                    len,
                    max: MAX_VERBS,
                });
            }
            Some(c.take(len, "verbs")?.to_vec())
        } else {
            None
        };
        c.end()?;
        Ok(Card {
            job_id,
            rank,
            node_id,
            switch_id,
            tree_id,
            cookie,
            class_encoding_version,
            pid,
            shm,
            tcp,
            verbs,
        })
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    fn full_card() -> Card {
        Card {
            job_id: 0x0123_4567_89ab_cdef,
            rank: 7,
            node_id: 0xfeed,
            switch_id: 3,
            tree_id: 1,
            cookie: *b"0123456789abcdef",
            class_encoding_version: CLASS_ENCODING_VERSION,
            pid: 4242,
            shm: Some("/switchyard-0123456789abcdef-7".into()),
            tcp: vec![
                SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 9000, 5, 2)),
                "10.101.0.1:9001".parse().unwrap(),
            ],
            verbs: Some((0..=255u8).collect()),
        }
    }

    #[test]
    fn card_round_trip() {
        let plain = Card::new(1, 0, 2);
        assert_eq!(Card::decode(&plain.encode().unwrap()).unwrap(), plain);
        let full = full_card();
        let bytes = full.encode().unwrap();
        assert_eq!(Card::decode(&bytes).unwrap(), full);
        let v4 = Card {
            tcp: vec!["10.1.2.3:4".parse().unwrap()],
            ..plain.clone()
        };
        assert_eq!(Card::decode(&v4.encode().unwrap()).unwrap(), v4);
        let v6 = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 1, 2, 3));
        let max = Card {
            shm: Some("s".repeat(255)),
            tcp: vec![v6; MAX_TCP_RAILS],
            verbs: Some(vec![9; 256]),
            ..full
        };
        let bytes = max.encode().unwrap();
        assert_eq!(bytes.len(), Card::MAX_ENCODED_LEN);
        assert_eq!(Card::decode(&bytes).unwrap(), max);
    }

    #[test]
    fn card_malformations() {
        let good = full_card().encode().unwrap();
        let flags_at = 6;
        let shm_len_at = CARD_FIXED_LEN;
        assert_eq!(
            Card::decode(&[]),
            Err(CardError::Truncated {
                field: "magic",
                needed: 4,
                available: 0
            })
        );
        assert!(matches!(
            Card::decode(&good[..good.len() - 1]),
            Err(CardError::Truncated { field: "verbs", .. })
        ));
        let mut b = good.clone();
        b[0] = b'X';
        assert!(matches!(Card::decode(&b), Err(CardError::BadMagic { .. })));
        let mut b = good.clone();
        b[4] = 3;
        assert_eq!(
            Card::decode(&b),
            Err(CardError::UnsupportedVersion {
                found: 3,
                supported: CARD_FORMAT_VERSION
            })
        );
        let mut b = good.clone();
        b[flags_at] |= 0x80;
        assert!(matches!(
            Card::decode(&b),
            Err(CardError::UnknownFlags { .. })
        ));
        let mut b = good.clone();
        b.push(0);
        assert_eq!(Card::decode(&b), Err(CardError::TrailingBytes { extra: 1 }));
        let mut b = good.clone();
        b[shm_len_at + 1] = 0xff;
        assert!(matches!(
            Card::decode(&b),
            Err(CardError::BadUtf8 {
                field: "shm name",
                ..
            })
        ));
        let mut b = good.clone();
        b[shm_len_at + 1] = 0;
        assert!(matches!(Card::decode(&b), Err(CardError::BadName { .. })));
        // The tcp rail count follows the shm name, then the family byte.
        let name_len = usize::from(good[shm_len_at]);
        let mut b = good.clone();
        b[shm_len_at + 1 + name_len] = 5;
        assert!(matches!(
            Card::decode(&b),
            Err(CardError::Overlong {
                field: "tcp rails",
                ..
            })
        ));
        let mut b = good.clone();
        b[shm_len_at + 2 + name_len] = 5;
        assert_eq!(
            Card::decode(&b),
            Err(CardError::BadAddressFamily { found: 5 })
        );
        // Verbs length above 256.
        let plain = Card {
            verbs: Some(vec![1]),
            ..Card::new(1, 2, 3)
        };
        let mut b = plain.encode().unwrap();
        let at = CARD_FIXED_LEN;
        b[at..at + 2].copy_from_slice(&257u16.to_le_bytes());
        assert!(matches!(
            Card::decode(&b),
            Err(CardError::Overlong {
                field: "verbs",
                len: 257,
                ..
            })
        ));
        // Encoding refuses what decoding would refuse.
        let long = Card {
            shm: Some("x".repeat(256)),
            ..Card::new(1, 2, 3)
        };
        assert!(matches!(
            long.encode(),
            Err(CardError::Overlong {
                field: "shm name",
                ..
            })
        ));
        let empty = Card {
            shm: Some(String::new()),
            ..Card::new(1, 2, 3)
        };
        assert!(matches!(empty.encode(), Err(CardError::BadName { .. })));
        let big = Card {
            verbs: Some(vec![0; 257]),
            ..Card::new(1, 2, 3)
        };
        assert!(matches!(
            big.encode(),
            Err(CardError::Overlong { field: "verbs", .. })
        ));
    }

    fn arb_card() -> impl Strategy<Value = Card> {
        let addr = prop_oneof![
            (any::<[u8; 4]>(), any::<u16>())
                .prop_map(|(ip, p)| SocketAddr::V4(SocketAddrV4::new(ip.into(), p))),
            (any::<[u8; 16]>(), any::<u16>(), any::<u32>(), any::<u32>())
                .prop_map(|(ip, p, f, s)| SocketAddr::V6(SocketAddrV6::new(ip.into(), p, f, s))),
        ];
        let tcp = proptest::collection::vec(addr, 0..=MAX_TCP_RAILS);
        (
            (
                any::<u64>(),
                any::<u32>(),
                any::<u64>(),
                any::<u32>(),
                any::<u8>(),
                any::<u32>(),
            ),
            (any::<u32>(), any::<[u8; 16]>()),
            proptest::option::of("[a-zA-Z0-9/_.é-]{1,60}"),
            tcp,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..=256)),
        )
            .prop_map(
                |(
                    (job_id, rank, node_id, switch_id, cv, pid),
                    (tree_id, cookie),
                    shm,
                    tcp,
                    verbs,
                )| Card {
                    job_id,
                    rank,
                    node_id,
                    switch_id,
                    tree_id,
                    cookie,
                    class_encoding_version: cv,
                    pid,
                    shm,
                    tcp,
                    verbs,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn card_round_trips(card in arb_card()) {
            let bytes = card.encode().unwrap();
            prop_assert!(bytes.len() <= Card::MAX_ENCODED_LEN);
            prop_assert_eq!(Card::decode(&bytes).unwrap(), card);
        }

        #[test]
        fn mutated_cards_never_panic(
            card in arb_card(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
            cut in any::<usize>(),
        ) {
            let mut bytes = card.encode().unwrap();
            for (at, b) in edits {
                let len = bytes.len();
                bytes[at % len] = b;
            }
            let keep = cut % (bytes.len() + 1);
            let _ = Card::decode(&bytes);
            let _ = Card::decode(&bytes[..keep]);
        }
    }
}
