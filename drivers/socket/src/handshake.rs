//! The handshake that opens every connection: the accepting side's
//! challenge, then a `Hello` each way, each proving the job's key.
//!
//! 1. The accepting side sends a challenge as soon as it accepts: a `Hello`
//!    frame whose payload is [`CHALLENGE_LEN`] bytes, `"SYTC"`, version 1, 3
//!    zero bytes, its nonce (16).
//! 2. The connecting side answers with its `Hello` ([`HELLO_LEN`] bytes,
//!    little-endian): its own nonce (16), 8 zero bytes, source PE (u32),
//!    destination PE (u32), rail (u8), connection index (u8, 0 = control),
//!    connections per rail (u8), the sender's feature bits (u8:
//!    [`FEATURE_COMPACT`], [`FEATURE_COMPACT_ACK`]; unknown bits are ignored), 4 zero bytes, the highest sequence the
//!    sender has applied in order from the receiver (u64, the replay point),
//!    the sender's cumulative credit grant to the receiver (u64), the
//!    sender's heap length (u64); then its proof (32): HMAC-SHA256 under the
//!    job's key of a role label, the job id, the 64 bytes before the proof,
//!    and the challenge's nonce.
//! 3. The accepting side checks the proof (in constant time) and answers
//!    with its own `Hello` (its nonce is the challenge's), proving the same
//!    over the connecting side's nonce under the other role label.
//!
//! The key is per job ([`JobKey`], derived from the job secret by the
//! caller); neither it nor the job id is ever sent. A recorded `Hello` is
//! worth nothing on another connection: every proof covers a nonce the
//! verifier has just chosen.

use core::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use switchyard_core::wire::{FrameOp, HEADER_LEN, HeaderFields, encode};

/// Bytes of the fields of a [`Hello`] before its proof.
const FIELDS_LEN: usize = 64;
/// Bytes of a proof (HMAC-SHA256).
pub const MAC_LEN: usize = 32;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of a [`Hello`] payload: the fields and the proof.
pub const HELLO_LEN: usize = FIELDS_LEN + MAC_LEN;
/// Bytes of a challenge payload.
pub const CHALLENGE_LEN: usize = 8 + NONCE_LEN;

/// Feature bit: the sender decodes compact frames of small puts (the
/// `compact` module), so its peer may send them to it. A driver from
/// before this bit refuses a `Hello` carrying it (its byte was reserved,
/// zero): the connection is refused as garbage, counted and reported
/// ([`crate::Event::Refused`]), never misread.
pub const FEATURE_COMPACT: u8 = 1 << 0;

/// Feature bit: the sender's compact frames may carry `ACK_NOW` (a
/// `quiet` marks the last frame it sends so, and the target acks on
/// receiving it: [`crate::compact::COMPACT_FLAGS`]). A driver without this
/// bit refuses such a compact frame (bad flags), so its peers mark only full
/// frames for it (which every version reads) and ask a compact one's ack
/// with a separate request. Unknown bits being ignored, offering it is
/// compatible with every driver that decodes compact frames.
pub const FEATURE_COMPACT_ACK: u8 = 1 << 1;

const CHALLENGE_MAGIC: [u8; 4] = *b"SYTC";
const CHALLENGE_VERSION: u8 = 1;

/// The job's key for the TCP handshakes (32 bytes, derived from the job
/// secret). `Debug` does not show it.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct JobKey(pub [u8; 32]);

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobKey(<redacted>)")
    }
}

/// Which side a [`Hello`] comes from: the two sides' proofs differ, so one
/// is never taken for the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that connected (answering the challenge).
    Connect,
    /// The side that accepted (answering the connecting side's `Hello`).
    Accept,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Connect => b"switchyard tcp hello: connect",
            Role::Accept => b"switchyard tcp hello: accept",
        }
    }
}

/// One side's `Hello` (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hello {
    /// The sender's nonce (the accepting side's is its challenge's).
    pub nonce: [u8; NONCE_LEN],
    /// Sending PE.
    pub src: u32,
    /// Receiving PE.
    pub dst: u32,
    /// Rail.
    pub rail: u8,
    /// Connection index on the rail (0 = control).
    pub conn: u8,
    /// Connections per rail (control + data).
    pub n_conns: u8,
    /// Feature bits of the sender ([`FEATURE_COMPACT`], [`FEATURE_COMPACT_ACK`]).
    pub features: u8,
    /// Highest sequence applied in order from the receiver.
    pub applied: u64,
    /// Cumulative credit granted to the receiver.
    pub granted: u64,
    /// The sender's heap length.
    pub heap_len: u64,
    /// The proof ([`Hello::seal`]).
    pub mac: [u8; MAC_LEN],
}

fn mac_over(
    key: &JobKey,
    role: Role,
    job_id: u64,
    fields: &[u8],
    peer_nonce: &[u8],
) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&key.0)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    m.update(role.label());
    m.update(&job_id.to_le_bytes());
    m.update(fields);
    m.update(peer_nonce);
    m
}

impl Hello {
    fn fields(&self) -> [u8; FIELDS_LEN] {
        let mut b = [0u8; FIELDS_LEN];
        b[..16].copy_from_slice(&self.nonce);
        b[24..28].copy_from_slice(&self.src.to_le_bytes());
        b[28..32].copy_from_slice(&self.dst.to_le_bytes());
        b[32] = self.rail;
        b[33] = self.conn;
        b[34] = self.n_conns;
        b[35] = self.features;
        b[40..48].copy_from_slice(&self.applied.to_le_bytes());
        b[48..56].copy_from_slice(&self.granted.to_le_bytes());
        b[56..64].copy_from_slice(&self.heap_len.to_le_bytes());
        b
    }

    /// This `Hello` with its proof for `role`, answering `peer_nonce` (the
    /// challenge's, or the connecting side's), in job `job_id` under `key`.
    pub fn seal(
        mut self,
        key: &JobKey,
        role: Role,
        job_id: u64,
        peer_nonce: &[u8; NONCE_LEN],
    ) -> Hello {
        let fields = self.fields();
        self.mac = mac_over(key, role, job_id, &fields, peer_nonce)
            .finalize()
            .into_bytes()
            .into();
        self
    }

    /// Whether the proof is right for `role`, `job_id`, `key` and the nonce
    /// this side sent (compared in constant time).
    pub fn is_authentic(
        &self,
        key: &JobKey,
        role: Role,
        job_id: u64,
        my_nonce: &[u8; NONCE_LEN],
    ) -> bool {
        mac_over(key, role, job_id, &self.fields(), my_nonce)
            .verify_slice(&self.mac)
            .is_ok()
    }

    /// The payload bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..FIELDS_LEN].copy_from_slice(&self.fields());
        b[FIELDS_LEN..].copy_from_slice(&self.mac);
        b
    }

    /// Decodes a payload; `None` unless it is exactly [`HELLO_LEN`] bytes with
    /// the reserved bytes zero. Says nothing of the proof
    /// ([`Hello::is_authentic`]).
    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() != HELLO_LEN || b[16..24].iter().chain(&b[36..40]).any(|&x| x != 0) {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&b[..16]);
        let mut mac = [0u8; MAC_LEN];
        mac.copy_from_slice(&b[FIELDS_LEN..]);
        Some(Hello {
            nonce,
            src: u32_at(24),
            dst: u32_at(28),
            rail: b[32],
            conn: b[33],
            n_conns: b[34],
            features: b[35],
            applied: u64_at(40),
            granted: u64_at(48),
            heap_len: u64_at(56),
            mac,
        })
    }

    /// The whole `Hello` frame (header and payload, CRC over both).
    pub fn frame(&self) -> [u8; HEADER_LEN + HELLO_LEN] {
        let mut out = [0u8; HEADER_LEN + HELLO_LEN];
        let f = HeaderFields {
            op: FrameOp::Hello as u8,
            src_pe: self.src,
            dst_pe: self.dst,
            ..HeaderFields::default()
        };
        // Cannot fail: the buffer is exactly header + payload.
        let _ = encode(&mut out, &f, &self.encode(), true);
        out
    }
}

/// The accepting side's challenge frame carrying `nonce`.
pub fn challenge_frame(nonce: &[u8; NONCE_LEN]) -> [u8; HEADER_LEN + CHALLENGE_LEN] {
    let mut p = [0u8; CHALLENGE_LEN];
    p[..4].copy_from_slice(&CHALLENGE_MAGIC);
    p[4] = CHALLENGE_VERSION;
    p[8..].copy_from_slice(nonce);
    let mut out = [0u8; HEADER_LEN + CHALLENGE_LEN];
    let f = HeaderFields {
        op: FrameOp::Hello as u8,
        ..HeaderFields::default()
    };
    // Cannot fail: the buffer is exactly header + payload.
    let _ = encode(&mut out, &f, &p, true);
    out
}

/// The nonce of a challenge payload; `None` unless it is one.
pub fn decode_challenge(b: &[u8]) -> Option<[u8; NONCE_LEN]> {
    if b.len() != CHALLENGE_LEN
        || b[..4] != CHALLENGE_MAGIC
        || b[4] != CHALLENGE_VERSION
        || b[5..8].iter().any(|&x| x != 0)
    {
        return None;
    }
    let mut n = [0u8; NONCE_LEN];
    n.copy_from_slice(&b[8..]);
    Some(n)
}

/// Fresh nonces: HMAC-SHA256 under a seed from the operating system's
/// generator of a counter, so that no two are the same even if the seed
/// could not be read (then the seed is the time and the process id).
#[derive(Clone)]
pub(crate) struct Nonces {
    seed: [u8; 32],
    next: u64,
}

impl fmt::Debug for Nonces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nonces")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Nonces {
    pub(crate) fn new() -> Nonces {
        let mut seed = [0u8; 32];
        if getrandom::fill(&mut seed).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            seed[..16].copy_from_slice(&t.to_le_bytes());
            seed[16..20].copy_from_slice(&std::process::id().to_le_bytes());
        }
        Nonces { seed, next: 0 }
    }

    pub(crate) fn next(&mut self) -> [u8; NONCE_LEN] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.seed)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        m.update(&self.next.to_le_bytes());
        self.next = self.next.wrapping_add(1);
        let out: [u8; 32] = m.finalize().into_bytes().into();
        let mut n = [0u8; NONCE_LEN];
        n.copy_from_slice(&out[..NONCE_LEN]);
        n
    }
}

#[cfg(test)]
mod test {
    use switchyard_core::wire::Frame;

    use super::*;

    #[test]
    fn roundtrip_and_proofs() {
        let key = JobKey([5; 32]);
        let h = Hello {
            nonce: [7; 16],
            src: 1,
            dst: 2,
            rail: 3,
            conn: 1,
            n_conns: 2,
            features: FEATURE_COMPACT | FEATURE_COMPACT_ACK,
            applied: 77,
            granted: 1 << 40,
            heap_len: 4096,
            ..Hello::default()
        }
        .seal(&key, Role::Connect, 9, &[1; 16]);
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        assert!(h.is_authentic(&key, Role::Connect, 9, &[1; 16]));
        assert!(!h.is_authentic(&key, Role::Accept, 9, &[1; 16]));
        assert!(!h.is_authentic(&key, Role::Connect, 8, &[1; 16]));
        assert!(!h.is_authentic(&key, Role::Connect, 9, &[2; 16]));
        assert!(!h.is_authentic(&JobKey([6; 32]), Role::Connect, 9, &[1; 16]));
        let moved = Hello { src: 0, ..h };
        assert!(!moved.is_authentic(&key, Role::Connect, 9, &[1; 16]));
        let f = h.frame();
        let fr = Frame::new_checked(&f[..]).unwrap();
        assert_eq!(Hello::decode(fr.payload()), Some(h));
        assert_eq!(h.encode()[35], FEATURE_COMPACT | FEATURE_COMPACT_ACK);
        // Unknown feature bits are ignored; the reserved bytes are not.
        let mut b = h.encode();
        b[35] = 0xFF;
        assert_eq!(Hello::decode(&b).map(|x| x.features), Some(0xFF));
        // Neither the key nor the job id is on the wire.
        assert!(!f.windows(8).any(|w| w == 9u64.to_le_bytes()));
        let mut b = h.encode();
        b[36] = 1;
        assert_eq!(Hello::decode(&b), None);
        let mut b = h.encode();
        b[20] = 1;
        assert_eq!(Hello::decode(&b), None);
        assert_eq!(Hello::decode(&b[..HELLO_LEN - 1]), None);
        assert!(!format!("{key:?}").contains('5'));
    }

    #[test]
    fn challenges_and_nonces() {
        let f = challenge_frame(&[3; 16]);
        let fr = Frame::new_checked(&f[..]).unwrap();
        assert_eq!(decode_challenge(fr.payload()), Some([3; 16]));
        assert_eq!(decode_challenge(&fr.payload()[1..]), None);
        assert_eq!(Hello::decode(fr.payload()), None);
        let mut n = Nonces::new();
        assert_ne!(n.next(), n.next());
    }
}
