//! The compact frame of a small put: a 40-byte header where the full
//! 64-byte one ([`switchyard_core::wire`]) carries nothing a small put
//! needs.
//!
//! Layout (little-endian, unaligned):
//!
//! | off | field | | off | field |
//! |----:|-------|-|----:|-------|
//! | 0 | magic `"Sc"` (u16) | | 8 | sequence (u64) |
//! | 2 | flags (u8): `FENCE`, `REPLAY`, `ACK_NOW` only | | 16 | ack (u64) |
//! | 3 | payload length (u8), 1 to [`COMPACT_MAX_PAYLOAD`] | | 24 | context id sequence (u64) |
//! | 4 | CRC32C (u32) | | 32 | heap offset (u64) |
//!
//! followed by the payload. The CRC32C covers the header with the CRC field
//! zeroed, then the payload, always (a payload this small is never
//! sampled). What the full header holds and this one does not is fixed for
//! a small put on one connection: the op (`Put`), the source and
//! destination PEs (the connection's pair, checked in its handshake), the
//! span (the payload length), aux, the topology version and the class
//! encoding (0, as on every sequenced frame).
//!
//! A PE sends compact frames only to a peer whose `Hello` said it decodes
//! them ([`crate::handshake::FEATURE_COMPACT`]); the receiver's
//! [`StreamDecoder`](crate::decode::StreamDecoder) checks each one
//! ([`check`]) and hands it out as the full frame it stands for
//! ([`expand`]), so sequencing, deduplication, acknowledgement and replay
//! are those of every other frame. `ACK_NOW` (the last frame a `quiet`
//! sends, which the target acks on receiving) goes only to a peer that
//! also offered [`crate::handshake::FEATURE_COMPACT_ACK`]: a decoder from
//! before it refuses the flag. Under `cfg(fuzzing)` only the CRC
//! comparison is skipped, as in the core.

use switchyard_core::{
    crc::{crc32c, crc32c_append},
    wire::{FrameOp, HEADER_LEN, HeaderFields, encode, flags},
};

/// The magic of a compact frame (`"Sc"`; a full frame starts with `"SY"`).
pub const COMPACT_MAGIC: u16 = u16::from_le_bytes(*b"Sc");
/// Bytes of a compact header.
pub const COMPACT_LEN: usize = 40;
/// The largest payload a compact frame carries.
pub const COMPACT_MAX_PAYLOAD: usize = u8::MAX as usize;
/// The flags a compact frame may carry (`ACK_NOW` only toward a peer that
/// offered [`crate::handshake::FEATURE_COMPACT_ACK`]).
pub const COMPACT_FLAGS: u8 = flags::FENCE | flags::REPLAY | flags::ACK_NOW;

/// Why bytes are not a valid compact frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// Fewer bytes than the header, or than the header and its payload.
    #[error("compact frame truncated: {have} of {need} bytes")]
    Truncated {
        /// Bytes there.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Not the compact magic.
    #[error("not a compact frame (magic {0:#06x})")]
    BadMagic(u16),
    /// A payload length of 0.
    #[error("compact frame with an empty payload")]
    Empty,
    /// Flags other than `FENCE`, `REPLAY` and `ACK_NOW`.
    #[error("compact frame flags {0:#04x} (only FENCE, REPLAY and ACK_NOW are allowed)")]
    BadFlags(u8),
    /// The heap offset plus the payload length overflows.
    #[error("compact frame offset {offset} + {len} bytes overflows")]
    OffsetOverflow {
        /// The offset.
        offset: u64,
        /// The payload length.
        len: u8,
    },
    /// The CRC does not match.
    #[error("compact frame CRC {found:#010x}, computed {computed:#010x}")]
    BadCrc {
        /// In the frame.
        found: u32,
        /// Over its bytes.
        computed: u32,
    },
}

/// The fields of a compact frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactPut {
    /// `FENCE`, `REPLAY`, `ACK_NOW` ([`COMPACT_FLAGS`]).
    pub flags: u8,
    /// Sequence number.
    pub seq: u64,
    /// Cumulative ack of the reverse direction.
    pub ack: u64,
    /// Context id sequence of the operation.
    pub context: u64,
    /// Target heap offset.
    pub offset: u64,
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(w)
}

/// The CRC of a compact frame of `frame.len()` bytes (header + payload).
fn crc_of(frame: &[u8]) -> u32 {
    let c = crc32c_append(crc32c(&frame[..4]), &[0; 4]);
    crc32c_append(c, &frame[8..])
}

/// Writes the header of a compact frame into `buf[..COMPACT_LEN]` and its
/// CRC, the payload of `len` bytes being already at
/// `buf[COMPACT_LEN..COMPACT_LEN + len]`. Returns the frame's length, or
/// `None` when `len` is 0 or over [`COMPACT_MAX_PAYLOAD`], the flags are not
/// [`COMPACT_FLAGS`], or `buf` is too short.
pub fn seal(buf: &mut [u8], p: &CompactPut, len: usize) -> Option<usize> {
    if len == 0 || len > COMPACT_MAX_PAYLOAD || p.flags & !COMPACT_FLAGS != 0 {
        return None;
    }
    let total = COMPACT_LEN + len;
    let b = buf.get_mut(..total)?;
    b[..2].copy_from_slice(&COMPACT_MAGIC.to_le_bytes());
    b[2] = p.flags;
    b[3] = len as u8;
    b[8..16].copy_from_slice(&p.seq.to_le_bytes());
    b[16..24].copy_from_slice(&p.ack.to_le_bytes());
    b[24..32].copy_from_slice(&p.context.to_le_bytes());
    b[32..40].copy_from_slice(&p.offset.to_le_bytes());
    reseal(b);
    Some(total)
}

/// Recomputes the CRC of the whole compact frame `frame` (after a flag
/// changed, e.g. `REPLAY` set for a resend).
pub fn reseal(frame: &mut [u8]) {
    let crc = crc_of(frame);
    frame[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// The length of the compact frame starting `bytes` (header + payload),
/// once its first 4 bytes are there.
pub fn frame_len(bytes: &[u8]) -> Option<usize> {
    bytes.get(3).map(|&l| COMPACT_LEN + usize::from(l))
}

/// Checks the compact frame at the start of `bytes` (which may hold more
/// after it): magic, flags, length, CRC, that offset + length does not
/// overflow. Returns its fields and length; the frame [`expand`] makes of
/// them passes `Frame::check`.
///
/// # Errors
/// [`CompactError`] naming the first check that failed; never panics.
pub fn check(bytes: &[u8]) -> Result<(CompactPut, usize), CompactError> {
    if bytes.len() < COMPACT_LEN {
        return Err(CompactError::Truncated {
            have: bytes.len(),
            need: COMPACT_LEN,
        });
    }
    let magic = u16::from_le_bytes([bytes[0], bytes[1]]);
    if magic != COMPACT_MAGIC {
        return Err(CompactError::BadMagic(magic));
    }
    if bytes[2] & !COMPACT_FLAGS != 0 {
        return Err(CompactError::BadFlags(bytes[2]));
    }
    if bytes[3] == 0 {
        return Err(CompactError::Empty);
    }
    let total = COMPACT_LEN + usize::from(bytes[3]);
    if bytes.len() < total {
        return Err(CompactError::Truncated {
            have: bytes.len(),
            need: total,
        });
    }
    let found = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let computed = crc_of(&bytes[..total]);
    if found != computed && !cfg!(fuzzing) {
        return Err(CompactError::BadCrc { found, computed });
    }
    let p = CompactPut {
        flags: bytes[2],
        seq: u64_at(bytes, 8),
        ack: u64_at(bytes, 16),
        context: u64_at(bytes, 24),
        offset: u64_at(bytes, 32),
    };
    if p.offset.checked_add(u64::from(bytes[3])).is_none() {
        return Err(CompactError::OffsetOverflow {
            offset: p.offset,
            len: bytes[3],
        });
    }
    Ok((p, total))
}

/// Writes the full frame a checked compact frame stands for into `out`:
/// a `Put` from `src` to `dst` with `p`'s fields and `payload`, its header
/// CRC computed (the payload was covered by the compact CRC). Returns its
/// length, or `None` when `out` is too short (`HEADER_LEN` +
/// [`COMPACT_MAX_PAYLOAD`] always fits).
pub fn expand(p: &CompactPut, src: u32, dst: u32, payload: &[u8], out: &mut [u8]) -> Option<usize> {
    let f = HeaderFields {
        op: FrameOp::Put as u8,
        flags: p.flags & COMPACT_FLAGS,
        aux: 0,
        src_pe: src,
        dst_pe: dst,
        seq: p.seq,
        ack: p.ack,
        context: p.context,
        topo_version: 0,
        offset: p.offset,
        span: payload.len() as u32,
    };
    let n = HEADER_LEN + payload.len();
    encode(out.get_mut(..n)?, &f, payload, false).ok()
}

#[cfg(test)]
mod test;
