//! The rendezvous frames and their byte codec: hello, all cards, barrier,
//! release, goodbye and error (the table is in the crate docs). Bytes only:
//! reading and writing them on a socket is [`crate::stream`]'s.

use crate::{
    auth::{self, MAC_LEN, NONCE_LEN},
    card::{Card, CardError},
    cursor::Cursor,
    error::BootstrapError,
};

/// The largest frame other than the all-cards frame (1 MiB).
pub const MAX_FRAME_LEN: usize = 1 << 20;

/// The largest hello frame, length prefix included: all that a connection
/// may send before it has proved the job's secret.
pub(crate) const MAX_HELLO_FRAME_LEN: usize =
    4 + 1 + 4 + 1 + 1 + 4 + 4 + NONCE_LEN + MAC_LEN + 2 + Card::MAX_ENCODED_LEN;

/// Version of the bootstrap protocol carried in the challenge and the hello
/// (5: the node flag and the node localities frame, for lazy PEs that get
/// only their node's localities; 4: the store flag and the joined frame, for PEs whose cards and
/// localities come from a key-value store; 3: a flags byte in the hello,
/// lazy cards; 2: authenticated, every card
/// to every PE; version 1 carried the job id in clear). Other versions are
/// refused ([`BootstrapError::ProtocolVersion`] at a PE, an error frame and
/// [`Refusal::Malformed`](crate::Refusal::Malformed) at the root).
pub const PROTOCOL_VERSION: u8 = 5;

/// The hello's flag bit asking for lazy cards: localities after the
/// allgather, cards on request.
pub(crate) const FLAG_LAZY: u8 = 1;

/// The hello's flag bit saying that the PE takes cards and localities from
/// a key-value store (PMIx's): after the allgather the root sends it only
/// the joined frame ([`KIND_JOINED`], O(1) bytes), not the localities.
/// Only with [`FLAG_LAZY`].
pub(crate) const FLAG_STORE: u8 = 2;

/// The hello's flag bit asking for only this PE's node's localities:
/// after the allgather the root sends it the node localities frame
/// ([`KIND_NODE_LOCALITIES`], O(its node's runs) bytes), not every
/// rank's; an off-node peer's locality comes with its card. Only with
/// [`FLAG_LAZY`], not with [`FLAG_STORE`].
pub(crate) const FLAG_NODE: u8 = 4;

const HELLO_MAGIC: [u8; 4] = *b"SYBS";
const MAX_ERROR_RANKS: usize = 1024;
const MAX_ERROR_TEXT: usize = 4096;

pub(crate) const KIND_HELLO: u8 = 1;
pub(crate) const KIND_ALL_CARDS: u8 = 2;
pub(crate) const KIND_BARRIER: u8 = 3;
pub(crate) const KIND_RELEASE: u8 = 4;
pub(crate) const KIND_BYE: u8 = 5;
pub(crate) const KIND_ERROR: u8 = 6;
pub(crate) const KIND_CHALLENGE: u8 = 7;
pub(crate) const KIND_WELCOME: u8 = 8;
pub(crate) const KIND_LOCALITIES: u8 = 9;
pub(crate) const KIND_CARD_REQUEST: u8 = 10;
pub(crate) const KIND_CARD_ANSWER: u8 = 11;
pub(crate) const KIND_CARD_REFUSAL: u8 = 12;
pub(crate) const KIND_JOINED: u8 = 13;
pub(crate) const KIND_NODE_LOCALITIES: u8 = 14;

pub(crate) fn kind_name(kind: u8) -> &'static str {
    match kind {
        KIND_HELLO => "hello",
        KIND_ALL_CARDS => "all-cards",
        KIND_BARRIER => "barrier",
        KIND_RELEASE => "release",
        KIND_BYE => "goodbye",
        KIND_ERROR => "error",
        KIND_CHALLENGE => "challenge",
        KIND_WELCOME => "welcome",
        KIND_LOCALITIES => "localities",
        KIND_CARD_REQUEST => "card request",
        KIND_CARD_ANSWER => "card answer",
        KIND_CARD_REFUSAL => "card refusal",
        KIND_JOINED => "joined",
        KIND_NODE_LOCALITIES => "node localities",
        _ => "unknown",
    }
}

pub(crate) fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    // Every frame built here is far below 4 GiB (cards are capped by MAX_PES).
    let len = u32::try_from(payload.len() + 1).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    out
}

/// The joined frame's payload (root → a PE whose hello had
/// [`FLAG_STORE`], once every PE is in): the job size `u32` and the
/// path-class encoding version `u8` every PE announced. Its bytes do not
/// grow with the job.
pub(crate) fn joined_payload(size: u32, class_encoding_version: u8) -> [u8; 5] {
    let s = size.to_le_bytes();
    [s[0], s[1], s[2], s[3], class_encoding_version]
}

/// Size and class encoding version from a joined payload.
pub(crate) fn decode_joined(body: &[u8]) -> Result<(u32, u8), CardError> {
    let mut c = Cursor::new(body);
    let size = c.u32("joined size")?;
    let class = c.u8("joined class version")?;
    c.end()?;
    Ok((size, class))
}

/// The cap on an all-cards frame for a job of `size`.
pub(crate) fn all_cards_cap(size: u32) -> usize {
    (1 + 4 + (size as usize).saturating_mul(2 + Card::MAX_ENCODED_LEN)).max(MAX_FRAME_LEN)
}

/// The root's challenge, its first frame on every connection: `"SYBS"`,
/// the protocol version, the root's nonce.
pub(crate) fn challenge_frame(nonce: &[u8; NONCE_LEN]) -> Vec<u8> {
    let mut p = Vec::with_capacity(4 + 1 + NONCE_LEN);
    p.extend_from_slice(&HELLO_MAGIC);
    p.push(PROTOCOL_VERSION);
    p.extend_from_slice(nonce);
    frame(KIND_CHALLENGE, &p)
}

/// The root's nonce from a challenge payload.
pub(crate) fn decode_challenge(body: &[u8]) -> Result<[u8; NONCE_LEN], String> {
    let mut c = Cursor::new(body);
    let mut inner = || -> Result<[u8; NONCE_LEN], String> {
        let magic: [u8; 4] = c.array("magic").map_err(|e| e.to_string())?;
        let version = c.u8("protocol version").map_err(|e| e.to_string())?;
        if magic != HELLO_MAGIC {
            return Err("not a switchyard bootstrap root".into());
        }
        if version != PROTOCOL_VERSION {
            return Err(format!(
                "the root speaks bootstrap protocol version {version}, this PE {PROTOCOL_VERSION}"
            ));
        }
        let nonce = c.array("root nonce").map_err(|e| e.to_string())?;
        c.end().map_err(|e| e.to_string())?;
        Ok(nonce)
    };
    inner().map_err(|e| format!("bad challenge: {e}"))
}

/// A PE's hello, the answer to the challenge. It names the rank and size,
/// the PE's nonce, and its proof: the MAC (under the job's bootstrap key) of
/// the job id, rank, size, both nonces and the card. The job id itself is
/// not sent.
#[derive(Debug)]
pub(crate) struct Hello {
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) nonce: [u8; NONCE_LEN],
    pub(crate) mac: [u8; MAC_LEN],
    pub(crate) card: Vec<u8>,
    /// Flag bits ([`FLAG_LAZY`]); covered by the proof.
    pub(crate) flags: u8,
}

const HELLO_LABEL: &[u8] = b"switchyard bootstrap hello";
/// The welcome's proof is over the same, without the card, under another
/// label (a hello's proof is never a valid welcome).
const WELCOME_LABEL: &[u8] = b"switchyard bootstrap welcome";

/// Both sides' view of one handshake: the key, the job, the nonces.
pub(crate) struct Handshake<'a> {
    pub(crate) key: &'a [u8; MAC_LEN],
    pub(crate) job_id: u64,
    pub(crate) root_nonce: [u8; NONCE_LEN],
}

impl Handshake<'_> {
    /// Calls `f` with what a proof covers: `label`, the job id, `rank`,
    /// `size`, both nonces and `card` (empty for the welcome).
    fn proof_input<R>(
        &self,
        label: &[u8],
        (rank, size, flags): (u32, u32, u8),
        pe_nonce: &[u8; NONCE_LEN],
        card: &[u8],
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> R {
        let (job, rank, size) = (
            self.job_id.to_le_bytes(),
            rank.to_le_bytes(),
            size.to_le_bytes(),
        );
        f(&[
            label,
            &job,
            &rank,
            &size,
            &[flags],
            &self.root_nonce,
            pe_nonce,
            card,
        ])
    }

    /// The hello of `rank` with `pe_nonce` and `card`, with its proof.
    pub(crate) fn hello(
        &self,
        rank: u32,
        size: u32,
        pe_nonce: [u8; NONCE_LEN],
        card: Vec<u8>,
        flags: u8,
    ) -> Hello {
        let mac = self.proof_input(HELLO_LABEL, (rank, size, flags), &pe_nonce, &card, |p| {
            auth::mac(self.key, p)
        });
        Hello {
            rank,
            size,
            nonce: pe_nonce,
            mac,
            card,
            flags,
        }
    }

    /// Whether `h` proves the job's secret (compared in constant time).
    pub(crate) fn hello_is_authentic(&self, h: &Hello) -> bool {
        self.proof_input(
            HELLO_LABEL,
            (h.rank, h.size, h.flags),
            &h.nonce,
            &h.card,
            |p| auth::verify(self.key, p, &h.mac),
        )
    }

    /// The root's welcome to the accepted hello `h`: its own proof.
    pub(crate) fn welcome_frame(&self, h: &Hello) -> Vec<u8> {
        let mac = self.proof_input(
            WELCOME_LABEL,
            (h.rank, h.size, h.flags),
            &h.nonce,
            &[],
            |p| auth::mac(self.key, p),
        );
        frame(KIND_WELCOME, &mac)
    }

    /// Whether a welcome payload proves the root knows the secret.
    pub(crate) fn welcome_is_authentic(
        &self,
        body: &[u8],
        (rank, size, flags): (u32, u32, u8),
        pe_nonce: &[u8; NONCE_LEN],
    ) -> bool {
        self.proof_input(WELCOME_LABEL, (rank, size, flags), pe_nonce, &[], |p| {
            auth::verify(self.key, p, body)
        })
    }
}

impl Hello {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut p =
            Vec::with_capacity(4 + 1 + 1 + 4 + 4 + NONCE_LEN + MAC_LEN + 2 + self.card.len());
        p.extend_from_slice(&HELLO_MAGIC);
        p.push(PROTOCOL_VERSION);
        p.push(self.flags);
        p.extend_from_slice(&self.rank.to_le_bytes());
        p.extend_from_slice(&self.size.to_le_bytes());
        p.extend_from_slice(&self.nonce);
        p.extend_from_slice(&self.mac);
        p.extend_from_slice(
            &u16::try_from(self.card.len())
                .unwrap_or(u16::MAX)
                .to_le_bytes(),
        );
        p.extend_from_slice(&self.card);
        frame(KIND_HELLO, &p)
    }

    /// Decodes a hello payload. The reasons it gives describe only what the
    /// bytes say, never what the root expected of them.
    pub(crate) fn decode(body: &[u8]) -> Result<Hello, String> {
        let mut c = Cursor::new(body);
        let magic: [u8; 4] = c.array("magic").map_err(|e| e.to_string())?;
        if magic != HELLO_MAGIC {
            return Err("not a switchyard bootstrap hello".into());
        }
        let version = c.u8("protocol version").map_err(|e| e.to_string())?;
        if version != PROTOCOL_VERSION {
            return Err(format!(
                "bootstrap protocol version {version} is not supported (this root speaks {PROTOCOL_VERSION})"
            ));
        }
        let mut inner = || -> Result<Hello, CardError> {
            let flags = c.u8("hello flags")?;
            if flags & !(FLAG_LAZY | FLAG_STORE | FLAG_NODE) != 0 {
                return Err(CardError::Inconsistent {
                    field: "hello flags",
                    reason: "unknown flag bits (known: 0x01, lazy; 0x02, store; 0x04, node)",
                });
            }
            if flags & FLAG_NODE != 0 && flags & (FLAG_LAZY | FLAG_STORE) != FLAG_LAZY {
                return Err(CardError::Inconsistent {
                    field: "hello flags",
                    reason: "the node flag (0x04) without the lazy flag (0x01), or with the store flag (0x02)",
                });
            }
            if flags & FLAG_STORE != 0 && flags & FLAG_LAZY == 0 {
                return Err(CardError::Inconsistent {
                    field: "hello flags",
                    reason: "the store flag (0x02) without the lazy flag (0x01)",
                });
            }
            let rank = c.u32("hello rank")?;
            let size = c.u32("hello size")?;
            let nonce = c.array("hello nonce")?;
            let mac = c.array("hello proof")?;
            let len = usize::from(c.u16("hello card length")?);
            if len > Card::MAX_ENCODED_LEN {
                return Err(CardError::Overlong {
                    field: "hello card",
                    len,
                    max: Card::MAX_ENCODED_LEN,
                });
            }
            let card = c.take(len, "hello card")?.to_vec();
            c.end()?;
            Ok(Hello {
                rank,
                size,
                nonce,
                mac,
                card,
                flags,
            })
        };
        inner().map_err(|e| format!("malformed hello: {e}"))
    }
}

pub(crate) fn error_frame(err: &BootstrapError) -> Vec<u8> {
    let ranks = err.ranks();
    let ranks = &ranks[..ranks.len().min(MAX_ERROR_RANKS)];
    let mut text = err.to_string();
    if text.len() > MAX_ERROR_TEXT {
        let mut cut = MAX_ERROR_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    let mut p = Vec::with_capacity(8 + 4 * ranks.len() + text.len());
    p.extend_from_slice(&u32::try_from(ranks.len()).unwrap_or(0).to_le_bytes());
    for r in ranks {
        p.extend_from_slice(&r.to_le_bytes());
    }
    p.extend_from_slice(&u32::try_from(text.len()).unwrap_or(0).to_le_bytes());
    p.extend_from_slice(text.as_bytes());
    frame(KIND_ERROR, &p)
}

pub(crate) fn decode_error_frame(body: &[u8]) -> Result<BootstrapError, String> {
    let mut c = Cursor::new(body);
    let mut inner = || -> Result<BootstrapError, CardError> {
        let n = c.u32("error rank count")? as usize;
        if n > MAX_ERROR_RANKS {
            return Err(CardError::Overlong {
                field: "error ranks",
                len: n,
                max: MAX_ERROR_RANKS,
            });
        }
        let mut ranks = Vec::with_capacity(n);
        for _ in 0..n {
            ranks.push(c.u32("error rank")?);
        }
        let len = c.u32("error text length")? as usize;
        if len > MAX_ERROR_TEXT {
            return Err(CardError::Overlong {
                field: "error text",
                len,
                max: MAX_ERROR_TEXT,
            });
        }
        let message = String::from_utf8_lossy(c.take(len, "error text")?).into_owned();
        c.end()?;
        Ok(BootstrapError::RootReported { ranks, message })
    };
    inner().map_err(|e| format!("malformed error frame: {e}"))
}

pub(crate) fn u64_payload(body: &[u8], what: &'static str) -> Result<u64, String> {
    let mut c = Cursor::new(body);
    let n = c.u64(what).map_err(|e| e.to_string())?;
    c.end().map_err(|e| e.to_string())?;
    Ok(n)
}

/// The all-cards frame: `count` (the job size), then each card with its `u16`
/// length, in rank order.
pub(crate) fn all_cards_frame(count: u32, cards: &[Vec<u8>]) -> Vec<u8> {
    let total: usize = cards.iter().map(|c| 2 + c.len()).sum();
    let mut p = Vec::with_capacity(4 + total);
    p.extend_from_slice(&count.to_le_bytes());
    for c in cards {
        p.extend_from_slice(&u16::try_from(c.len()).unwrap_or(u16::MAX).to_le_bytes());
        p.extend_from_slice(c);
    }
    frame(KIND_ALL_CARDS, &p)
}

/// Reads an all-cards payload one card at a time, so that its reader checks
/// each card as it comes (the first problem is the one reported).
pub(crate) struct AllCards<'a> {
    c: Cursor<'a>,
}

impl<'a> AllCards<'a> {
    /// Starts on `body` and reads the card count.
    pub(crate) fn open(body: &'a [u8]) -> Result<(AllCards<'a>, u32), CardError> {
        let mut c = Cursor::new(body);
        let count = c.u32("card count")?;
        Ok((AllCards { c }, count))
    }

    /// The next card's bytes (not decoded).
    pub(crate) fn next_card(&mut self) -> Result<&'a [u8], CardError> {
        let len = usize::from(self.c.u16("card length")?);
        self.c.take(len, "card")
    }

    /// Checks that nothing follows the last card.
    pub(crate) fn end(&self) -> Result<(), CardError> {
        self.c.end()
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn error_frame_round_trip() {
        let e = BootstrapError::Disconnected {
            rank: 2,
            during: "in barrier 1".into(),
            reason: "connection closed".into(),
        };
        let bytes = error_frame(&e);
        let body = &bytes[5..];
        match decode_error_frame(body).unwrap() {
            BootstrapError::RootReported { ranks, message } => {
                assert_eq!(ranks, vec![2]);
                assert_eq!(message, e.to_string());
            }
            other => panic!("{other:?}"),
        }
        assert!(decode_error_frame(&body[..body.len() - 1]).is_err());
        assert!(decode_error_frame(&u32::MAX.to_le_bytes()).is_err());
    }

    #[test]
    fn hello_round_trip_proofs_and_refusals() {
        let key = [3u8; MAC_LEN];
        let hs = Handshake {
            key: &key,
            job_id: 9,
            root_nonce: [1; NONCE_LEN],
        };
        let h = hs.hello(
            1,
            2,
            [2; NONCE_LEN],
            Card::new(0, 1, 0).encode().unwrap(),
            0,
        );
        let bytes = h.encode();
        let back = Hello::decode(&bytes[5..]).unwrap();
        assert_eq!((back.rank, back.size, &back.card), (1, 2, &h.card));
        assert!(hs.hello_is_authentic(&back));
        // Another job, key, nonce or rank: refused.
        for other in [
            Handshake { job_id: 10, ..hs },
            Handshake {
                key: &[4; MAC_LEN],
                ..hs
            },
            Handshake {
                root_nonce: [0; NONCE_LEN],
                ..hs
            },
        ] {
            assert!(!other.hello_is_authentic(&back));
        }
        let mut moved = Hello::decode(&bytes[5..]).unwrap();
        moved.rank = 0;
        assert!(!hs.hello_is_authentic(&moved));
        // The job id is nowhere in the hello (cards travel with job id 0).
        assert!(!bytes.windows(8).any(|w| w == 9u64.to_le_bytes()));
        // The welcome proves the root, and is not the hello's proof.
        let w = hs.welcome_frame(&back);
        assert!(hs.welcome_is_authentic(&w[5..], (1, 2, 0), &back.nonce));
        assert!(!hs.welcome_is_authentic(&w[5..], (0, 2, 0), &back.nonce));
        assert!(!hs.welcome_is_authentic(&w[5..], (1, 2, FLAG_LAZY), &back.nonce));
        assert!(!hs.welcome_is_authentic(&back.mac, (1, 2, 0), &back.nonce));
        // The lazy flag is covered by the proof: flipping it in transit
        // breaks the hello.
        let mut flipped = Hello::decode(&bytes[5..]).unwrap();
        flipped.flags = FLAG_LAZY;
        assert!(!hs.hello_is_authentic(&flipped));
        let lazy = hs.hello(1, 2, [2; NONCE_LEN], h.card.clone(), FLAG_LAZY);
        let back = Hello::decode(&lazy.encode()[5..]).unwrap();
        assert_eq!(back.flags, FLAG_LAZY);
        assert!(hs.hello_is_authentic(&back));
        let mut unknown = lazy.encode()[5..].to_vec();
        unknown[5] = 0x80;
        assert!(Hello::decode(&unknown).unwrap_err().contains("flag"));
        // The store flag: with the lazy flag, covered by the proof; alone,
        // refused.
        let store = hs.hello(1, 2, [2; NONCE_LEN], h.card.clone(), FLAG_LAZY | FLAG_STORE);
        let back = Hello::decode(&store.encode()[5..]).unwrap();
        assert_eq!(back.flags, FLAG_LAZY | FLAG_STORE);
        assert!(hs.hello_is_authentic(&back));
        let mut unflagged = Hello::decode(&store.encode()[5..]).unwrap();
        unflagged.flags = FLAG_LAZY;
        assert!(!hs.hello_is_authentic(&unflagged));
        let mut alone = store.encode()[5..].to_vec();
        alone[5] = FLAG_STORE;
        assert!(
            Hello::decode(&alone)
                .unwrap_err()
                .contains("without the lazy")
        );
        assert!(
            Hello::decode(b"GET / HTTP/1.1")
                .unwrap_err()
                .contains("not a switchyard")
        );
        // The node flag: with the lazy flag alone, covered by the proof.
        let node = hs.hello(1, 2, [2; NONCE_LEN], h.card.clone(), FLAG_LAZY | FLAG_NODE);
        let back = Hello::decode(&node.encode()[5..]).unwrap();
        assert_eq!(back.flags, FLAG_LAZY | FLAG_NODE);
        assert!(hs.hello_is_authentic(&back));
        for bad in [FLAG_NODE, FLAG_NODE | FLAG_STORE | FLAG_LAZY, 0x08] {
            let mut v = node.encode()[5..].to_vec();
            v[5] = bad;
            assert!(Hello::decode(&v).unwrap_err().contains("flag"), "{bad:#x}");
        }
        for old in [1, 2, 3, 4] {
            let mut v = bytes[5..].to_vec();
            v[4] = old;
            assert!(
                Hello::decode(&v)
                    .unwrap_err()
                    .contains(&format!("version {old}"))
            );
        }
        assert!(
            Hello::decode(&bytes[5..bytes.len() - 1])
                .unwrap_err()
                .contains("malformed")
        );
        // The joined frame: size and class version, nothing else.
        let j = joined_payload(70_000, 3);
        assert_eq!(decode_joined(&j), Ok((70_000, 3)));
        assert!(decode_joined(&j[..4]).is_err());
        assert!(decode_joined(&[j.as_slice(), &[0]].concat()).is_err());
        let c = challenge_frame(&[5; NONCE_LEN]);
        assert_eq!(decode_challenge(&c[5..]).unwrap(), [5; NONCE_LEN]);
        assert!(decode_challenge(&c[5..c.len() - 1]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn decode_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            let _ = Card::decode(&bytes);
            let _ = Hello::decode(&bytes);
            let _ = decode_challenge(&bytes);
            let _ = decode_error_frame(&bytes);
        }
    }
}
