//! The handshake's decoders as the root and a PE run them on a peer's
//! bytes, for fuzzing (the `fuzz` feature; `fuzz/fuzz_targets/
//! bootstrap_hello.rs`), the lazy cards' frames (localities, node localities, card
//! request, answer and refusal; `fuzz/fuzz_targets/bootstrap_cards.rs`),
//! and what a PE under PMIx reads (the joined frame, stored localities and
//! cards; `fuzz/fuzz_targets/bootstrap_store.rs`). Bytes in, verdicts out: the hello's fields stay
//! private, and the only key material is what the caller's own
//! [`JobSecret`] derives, as in a PE.

use crate::{
    auth::{JobSecret, NONCE_LEN, PURPOSE_BOOTSTRAP},
    card::Card,
    error::BootstrapError,
    frame::{self, Handshake, Hello},
    lazy::{self, CardRefusal, Localities, Locality},
    store,
};

/// Bytes before a frame's payload: its length (4) and kind (1).
const HEADER: usize = 5;

/// A hello payload that decoded, as the root reads a connection's first
/// frame.
#[derive(Debug)]
pub struct DecodedHello(Hello);

impl DecodedHello {
    /// Decodes a hello's payload (the frame after its length and kind).
    ///
    /// # Errors
    ///
    /// Why the bytes are not a hello of this protocol version; the reason
    /// describes only the bytes.
    pub fn decode(payload: &[u8]) -> Result<DecodedHello, String> {
        Hello::decode(payload).map(DecodedHello)
    }

    /// The rank it claims.
    pub fn rank(&self) -> u32 {
        self.0.rank
    }

    /// The job size it claims.
    pub fn size(&self) -> u32 {
        self.0.size
    }

    /// Its card's length in bytes.
    pub fn card_len(&self) -> usize {
        self.0.card.len()
    }

    /// Its payload, encoded again.
    pub fn encode(&self) -> Vec<u8> {
        self.0.encode().split_off(HEADER)
    }

    /// Whether it proves `secret` for job `job_id` over the root's
    /// challenge `root_nonce`, checked as the root checks it.
    pub fn is_authentic(
        &self,
        secret: &JobSecret,
        job_id: u64,
        root_nonce: &[u8; NONCE_LEN],
    ) -> bool {
        let key = secret.derive_key(job_id, PURPOSE_BOOTSTRAP);
        handshake(&key, job_id, root_nonce).hello_is_authentic(&self.0)
    }

    /// The same claims (rank, size, nonce, card) with the proof a PE that
    /// holds `secret` makes for them.
    pub fn sealed(
        &self,
        secret: &JobSecret,
        job_id: u64,
        root_nonce: &[u8; NONCE_LEN],
    ) -> DecodedHello {
        let key = secret.derive_key(job_id, PURPOSE_BOOTSTRAP);
        let h = &self.0;
        DecodedHello(handshake(&key, job_id, root_nonce).hello(
            h.rank,
            h.size,
            h.nonce,
            h.card.clone(),
            h.flags,
        ))
    }

    /// Whether `self` and `other` carry the same proof.
    pub fn same_proof(&self, other: &DecodedHello) -> bool {
        self.0.mac == other.0.mac
    }
}

fn handshake<'a>(
    key: &'a [u8; crate::MAC_LEN],
    job_id: u64,
    root_nonce: &[u8; NONCE_LEN],
) -> Handshake<'a> {
    Handshake {
        key,
        job_id,
        root_nonce: *root_nonce,
    }
}

/// Decodes the root's challenge payload, as a PE does.
///
/// # Errors
///
/// Why the bytes are not a challenge.
pub fn decode_challenge(payload: &[u8]) -> Result<[u8; NONCE_LEN], String> {
    frame::decode_challenge(payload)
}

/// Decodes an error frame's payload, as a PE does with a root's verdict.
///
/// # Errors
///
/// Why the bytes are not an error frame.
pub fn decode_error(payload: &[u8]) -> Result<BootstrapError, String> {
    frame::decode_error_frame(payload)
}

/// Decodes a localities payload, as a lazy PE does after the allgather.
///
/// # Errors
///
/// Why the bytes are not a localities frame (runs that do not add up to
/// the size included).
pub fn decode_localities(payload: &[u8]) -> Result<Localities, String> {
    Localities::decode(payload).map_err(|e| e.to_string())
}

/// A localities payload, as the root encodes it.
pub fn encode_localities(l: &Localities) -> Vec<u8> {
    l.encode()
}

/// Decodes a node localities payload, as a PE that joined with
/// [`Bootstrap::join_lazy_node`](crate::Bootstrap::join_lazy_node) does: its
/// node's runs, gaps for the other ranks.
///
/// # Errors
///
/// Why the bytes are not a node localities frame (runs empty, out of
/// order, overlapping or past the size included).
pub fn decode_node_localities(payload: &[u8]) -> Result<Localities, String> {
    Localities::decode_node(payload).map_err(|e| e.to_string())
}

/// The node localities payload of what [`decode_node_localities`] gave.
pub fn encode_node_localities(l: &Localities) -> Vec<u8> {
    l.encode_node_of()
}

/// Decodes a card request payload, as the root does: the ranks, or the
/// refusal its count alone earns.
///
/// # Errors
///
/// Why the bytes are not a card request.
pub fn decode_card_request(payload: &[u8]) -> Result<Result<Vec<u32>, CardRefusal>, String> {
    lazy::decode_request(payload).map_err(|e| e.to_string())
}

/// A card request payload for `ranks`.
pub fn encode_card_request(ranks: &[u32]) -> Vec<u8> {
    lazy::encode_request(ranks)
}

/// Decodes a card answer payload, as a PE does.
///
/// # Errors
///
/// Why the bytes are not a card answer (a card that does not decode
/// included).
pub fn decode_card_answer(payload: &[u8]) -> Result<Vec<Card>, String> {
    lazy::decode_answer(payload).map_err(|e| e.to_string())
}

/// Decodes a card refusal payload, as a PE does.
///
/// # Errors
///
/// Why the bytes are not a card refusal.
pub fn decode_card_refusal(payload: &[u8]) -> Result<CardRefusal, String> {
    CardRefusal::decode(payload).map_err(|e| e.to_string())
}

/// A card refusal payload.
pub fn encode_card_refusal(r: CardRefusal) -> Vec<u8> {
    r.encode()
}

/// Decodes a joined frame's payload, as a PE under PMIx does: the job's
/// size and class encoding version.
///
/// # Errors
///
/// Why the bytes are not a joined payload.
pub fn decode_joined(payload: &[u8]) -> Result<(u32, u8), String> {
    frame::decode_joined(payload).map_err(|e| e.to_string())
}

/// A joined frame's payload.
pub fn encode_joined(size: u32, class_encoding_version: u8) -> Vec<u8> {
    frame::joined_payload(size, class_encoding_version).to_vec()
}

/// Decodes a locality stored in PMIx (`switchyard.locality`) as a PE
/// reads another rank's: the locality and whether that rank takes the
/// cards lazily.
///
/// # Errors
///
/// Why the bytes are not a stored locality.
pub fn decode_stored_locality(bytes: &[u8]) -> Result<(Locality, bool), String> {
    store::decode_locality(bytes, "the fuzzer", 0)
        .map(|s| (s.locality, s.lazy))
        .map_err(|e| e.to_string())
}

/// A stored locality's bytes.
pub fn encode_stored_locality(locality: Locality, lazy: bool) -> Vec<u8> {
    store::encode_locality(store::StoredLocality { locality, lazy }).to_vec()
}

/// Checks a card stored in PMIx (`switchyard.card`) as a PE does when it
/// fetches rank `rank`'s, whose stored locality is `locality` (if known),
/// in a job of class encoding version `class` and id `job_id`: the card,
/// its job id put back.
///
/// # Errors
///
/// Why the bytes are not that rank's card.
pub fn check_stored_card(
    bytes: &[u8],
    rank: u32,
    class: u8,
    locality: Option<Locality>,
    job_id: u64,
) -> Result<Card, String> {
    let want = store::Expected {
        rank,
        me: 0,
        class,
        locality,
        job_id,
    };
    store::check_stored(bytes, "the fuzzer", &want).map_err(|e| e.to_string())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_hello_round_trips_and_only_the_sealed_one_is_authentic() {
        let secret = JobSecret::from_hex("test", &"ab".repeat(32)).unwrap();
        let (job, nonce) = (0x77, [3; NONCE_LEN]);
        let mut payload = b"SYBS".to_vec();
        payload.push(crate::PROTOCOL_VERSION);
        payload.push(0);
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.extend_from_slice(&2u32.to_le_bytes());
        payload.extend_from_slice(&[0; NONCE_LEN + crate::MAC_LEN]);
        payload.extend_from_slice(&3u16.to_le_bytes());
        payload.extend_from_slice(b"xyz");
        let h = DecodedHello::decode(&payload).unwrap();
        assert_eq!((h.rank(), h.size(), h.card_len()), (1, 2, 3));
        assert_eq!(h.encode(), payload);
        assert!(!h.is_authentic(&secret, job, &nonce));
        let sealed = h.sealed(&secret, job, &nonce);
        assert!(sealed.is_authentic(&secret, job, &nonce));
        assert!(!sealed.is_authentic(&secret, job + 1, &nonce));
        assert!(!sealed.same_proof(&h));
        assert!(DecodedHello::decode(b"GET / HTTP/1.1").is_err());
        assert!(decode_challenge(&[0; 3]).is_err());
        assert!(decode_error(&[0xff; 3]).is_err());
    }
}
