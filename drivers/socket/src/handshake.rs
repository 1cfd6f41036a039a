//! The payload of the `Hello` frame that opens every connection.
//!
//! Layout (64 bytes, little-endian): cookie (16), job id (u64), source PE
//! (u32), destination PE (u32), rail (u8), connection index (u8, 0 = control),
//! connections per rail (u8), the sender's feature bits (u8: [`FEATURE_COMPACT`];
//! unknown bits are ignored), 4 zero bytes, the highest sequence the sender
//! has applied in order from the receiver (u64, the replay point), the
//! sender's cumulative credit grant to the receiver (u64), the sender's heap
//! length (u64).

use switchyard_core::wire::{FrameOp, HEADER_LEN, HeaderFields, encode};

/// Bytes of a [`Hello`] payload.
pub const HELLO_LEN: usize = 64;

/// Feature bit: the sender decodes compact frames of small puts (the
/// `compact` module), so its peer may send them to it. A driver from
/// before this bit refuses a `Hello` carrying it (its byte was reserved,
/// zero): the connection is refused as garbage, counted and reported
/// ([`crate::Event::Refused`]), never misread.
pub const FEATURE_COMPACT: u8 = 1 << 0;

/// One side's handshake (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hello {
    /// Job cookie.
    pub cookie: [u8; 16],
    /// Job id.
    pub job_id: u64,
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
    /// Feature bits of the sender ([`FEATURE_COMPACT`]).
    pub features: u8,
    /// Highest sequence applied in order from the receiver.
    pub applied: u64,
    /// Cumulative credit granted to the receiver.
    pub granted: u64,
    /// The sender's heap length.
    pub heap_len: u64,
}

impl Hello {
    /// The payload bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..16].copy_from_slice(&self.cookie);
        b[16..24].copy_from_slice(&self.job_id.to_le_bytes());
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

    /// Decodes a payload; `None` unless it is exactly [`HELLO_LEN`] bytes with
    /// the reserved bytes zero.
    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() != HELLO_LEN || b[36..40].iter().any(|&x| x != 0) {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        let mut cookie = [0u8; 16];
        cookie.copy_from_slice(&b[..16]);
        Some(Hello {
            cookie,
            job_id: u64_at(16),
            src: u32_at(24),
            dst: u32_at(28),
            rail: b[32],
            conn: b[33],
            n_conns: b[34],
            features: b[35],
            applied: u64_at(40),
            granted: u64_at(48),
            heap_len: u64_at(56),
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

#[cfg(test)]
mod test {
    use switchyard_core::wire::Frame;

    use super::*;

    #[test]
    fn roundtrip() {
        let h = Hello {
            cookie: [7; 16],
            job_id: 9,
            src: 1,
            dst: 2,
            rail: 3,
            conn: 1,
            n_conns: 2,
            features: FEATURE_COMPACT,
            applied: 77,
            granted: 1 << 40,
            heap_len: 4096,
        };
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        let f = h.frame();
        let fr = Frame::new_checked(&f[..]).unwrap();
        assert_eq!(Hello::decode(fr.payload()), Some(h));
        assert_eq!(h.encode()[35], FEATURE_COMPACT);
        // Unknown feature bits are ignored; the reserved bytes are not.
        let mut b = h.encode();
        b[35] = 0xFF;
        assert_eq!(Hello::decode(&b).map(|x| x.features), Some(0xFF));
        let mut b = h.encode();
        b[36] = 1;
        assert_eq!(Hello::decode(&b), None);
        assert_eq!(Hello::decode(&b[..63]), None);
    }
}
