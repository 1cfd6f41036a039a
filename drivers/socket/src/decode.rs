//! The receive side of a frame stream, without sockets: bytes in, checked
//! frames out.
//!
//! A TCP connection delivers frames as a byte stream cut at arbitrary points.
//! [`StreamDecoder`] reassembles them in one buffer of fixed capacity
//! (`HEADER_LEN + max_payload`, allocated once by [`StreamDecoder::new`]) and
//! hands out each frame only after [`Frame::check`] passed (magic, version,
//! lengths for the op, CRC). Anything else is a typed [`DecodeError`], never a
//! panic; after an error the decoder stays failed (the connection is cut).
//!
//! Two ways to fill it: [`StreamDecoder::feed`] copies a chunk in (tests,
//! fuzzing), and [`StreamDecoder::spare`] + [`StreamDecoder::commit`] let a
//! socket read land in the buffer directly (the driver).
//!
//! Once told the connection's PEs ([`StreamDecoder::accept_compact`]), it
//! also takes compact frames of small puts ([`crate::compact`]): each is
//! checked, then handed out as the full `Put` frame it stands for (built in
//! a second fixed buffer), so its reader sees only full frames. Without
//! that call a compact frame is [`FrameError::BadMagic`].
//!
//! ```
//! use switchyard_core::wire::{encode, FrameOp, HeaderFields};
//! use switchyard_socket::decode::StreamDecoder;
//!
//! let mut frame = [0u8; 72];
//! let f = HeaderFields { op: FrameOp::Put as u8, seq: 1, span: 8, ..HeaderFields::default() };
//! let n = encode(&mut frame, &f, &[7; 8], true).unwrap();
//! let mut d = StreamDecoder::new(1024);
//! d.feed(&frame[..10]);
//! assert!(d.peek().unwrap().is_none()); // not whole yet
//! d.feed(&frame[10..n]);
//! assert_eq!(d.peek().unwrap().unwrap().payload(), &[7; 8]);
//! d.consume();
//! assert!(d.peek().unwrap().is_none());
//! ```

use switchyard_core::wire::{Frame, FrameError, HEADER_LEN, MAGIC, WIRE_VERSION};

use crate::compact::{self, COMPACT_MAGIC, COMPACT_MAX_PAYLOAD, CompactError};

/// Why a byte stream is not a valid frame stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A frame failed its checks (bad magic, version, lengths, CRC, ...).
    #[error("bad frame: {0}")]
    Frame(FrameError),
    /// A compact frame failed its checks.
    #[error("bad compact frame: {0}")]
    Compact(CompactError),
    /// A frame declares more payload than this decoder holds.
    #[error("frame declares {declared} payload bytes, at most {max} accepted")]
    TooLarge {
        /// Declared payload length.
        declared: u32,
        /// This decoder's limit.
        max: u32,
    },
}

/// Frames above this many bytes are read exactly to their end.
const LARGE: usize = 16 << 10;
/// How far past the first unconsumed byte small frames are read ahead.
const GENEROUS: usize = 64 << 10;

/// Reassembles frames from stream chunks in a fixed buffer (module docs).
#[derive(Debug)]
pub struct StreamDecoder {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    max_payload: u32,
    /// Length of the frame at `start` once [`StreamDecoder::peek`] returned it.
    ready: usize,
    failed: Option<DecodeError>,
    /// The connection's (source, destination) PEs when compact frames are
    /// accepted.
    compact: Option<(u32, u32)>,
    /// The full frame of the last compact one handed out.
    expanded: Box<[u8]>,
}

impl StreamDecoder {
    /// A decoder accepting payloads up to `max_payload` bytes (allocates
    /// `HEADER_LEN + max_payload` bytes, once).
    pub fn new(max_payload: u32) -> StreamDecoder {
        StreamDecoder {
            buf: vec![0u8; HEADER_LEN + max_payload as usize].into_boxed_slice(),
            start: 0,
            end: 0,
            max_payload,
            ready: 0,
            failed: None,
            compact: None,
            expanded: vec![0u8; HEADER_LEN + COMPACT_MAX_PAYLOAD].into_boxed_slice(),
        }
    }

    /// Accepts compact frames of small puts from now on, expanding them to
    /// full frames from `src` to `dst` (the connection's PEs, known from
    /// its handshake); `None`: refuses them (the default).
    pub fn accept_compact(&mut self, pes: Option<(u32, u32)>) {
        self.compact = pes;
    }

    /// Forgets buffered bytes and any error (a fresh connection).
    pub fn reset(&mut self) {
        self.start = 0;
        self.end = 0;
        self.ready = 0;
        self.failed = None;
    }

    /// Bytes buffered and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// The largest payload accepted.
    pub fn max_payload(&self) -> u32 {
        self.max_payload
    }

    /// Free room at the end of the buffer for the next read; empty when a
    /// whole frame is waiting to be consumed.
    ///
    /// Small frames are read many at a time (up to 64 KiB past the first
    /// unconsumed one), a large frame (over 16 KiB) exactly to its end: so the
    /// buffer never has to move a large partial frame to its front (at most
    /// 64 KiB are moved, at most once per large frame), and one read may
    /// carry a large frame's whole payload.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let want = self.current_total();
        let room_short = match want {
            Some(total) => self.start + total > self.buf.len(),
            None => self.buf.len() - self.end < HEADER_LEN,
        };
        if self.start > 0 && room_short {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let limit = match want {
            Some(total) if total > LARGE => self.start + total,
            _ => self.start + GENEROUS,
        }
        .min(self.buf.len())
        .max(self.end);
        let end = self.end;
        &mut self.buf[end..limit]
    }

    /// Header plus payload of the frame at `start`, once its header is in
    /// and declares an acceptable length.
    fn current_total(&self) -> Option<usize> {
        let avail = &self.buf[self.start..self.end];
        if self.compact.is_some() && avail.len() >= 2 && avail[..2] == COMPACT_MAGIC.to_le_bytes() {
            return compact::frame_len(avail);
        }
        if avail.len() < HEADER_LEN {
            return None;
        }
        let declared = u32::from_le_bytes([avail[44], avail[45], avail[46], avail[47]]);
        (declared <= self.max_payload).then_some(HEADER_LEN + declared as usize)
    }

    /// Marks `n` bytes written into [`StreamDecoder::spare`] as received.
    ///
    /// # Panics
    /// When `n` is more than the spare room (a caller bug).
    pub fn commit(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.end, "commit past the buffer");
        self.end += n;
    }

    /// Copies as much of `chunk` as fits and returns how much that was; the
    /// rest must be fed again after frames are consumed.
    pub fn feed(&mut self, chunk: &[u8]) -> usize {
        let room = self.spare();
        let n = room.len().min(chunk.len());
        room[..n].copy_from_slice(&chunk[..n]);
        self.end += n;
        n
    }

    /// The next whole, checked frame, without consuming it; `Ok(None)` while
    /// more bytes are needed.
    ///
    /// # Errors
    /// [`DecodeError`] when the stream is not a valid frame stream; the
    /// decoder keeps returning it until [`StreamDecoder::reset`].
    pub fn peek(&mut self) -> Result<Option<Frame<&[u8]>>, DecodeError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let avail = &self.buf[self.start..self.end];
        if avail.len() < 2 {
            return Ok(None);
        }
        // Fail fast on garbage instead of waiting for a bogus length.
        let magic = u16::from_le_bytes([avail[0], avail[1]]);
        if magic == COMPACT_MAGIC
            && let Some((src, dst)) = self.compact
        {
            let need = compact::frame_len(avail).unwrap_or(compact::COMPACT_LEN);
            if avail.len() < need.max(compact::COMPACT_LEN) {
                return Ok(None);
            }
            let (p, total) = match compact::check(avail) {
                Ok(x) => x,
                Err(e) => return Err(self.fail(DecodeError::Compact(e))),
            };
            let payload = &avail[compact::COMPACT_LEN..total];
            let Some(n) = compact::expand(&p, src, dst, payload, &mut self.expanded) else {
                return Err(self.fail(DecodeError::Frame(FrameError::BadMagic(magic))));
            };
            // What is handed out is checked, as every full frame is.
            if let Err(e) = Frame::new_checked(&self.expanded[..n]) {
                return Err(self.fail(DecodeError::Frame(e)));
            }
            self.ready = total;
            return Ok(Some(Frame::new_unchecked(&self.expanded[..n])));
        }
        if magic != MAGIC {
            return Err(self.fail(DecodeError::Frame(FrameError::BadMagic(magic))));
        }
        if avail.len() < HEADER_LEN {
            return Ok(None);
        }
        if avail[2] != WIRE_VERSION {
            return Err(self.fail(DecodeError::Frame(FrameError::BadVersion(avail[2]))));
        }
        let declared = u32::from_le_bytes([avail[44], avail[45], avail[46], avail[47]]);
        if declared > self.max_payload {
            return Err(self.fail(DecodeError::TooLarge {
                declared,
                max: self.max_payload,
            }));
        }
        let total = HEADER_LEN + declared as usize;
        if avail.len() < total {
            return Ok(None);
        }
        if let Err(e) = Frame::new_checked(&avail[..total]) {
            return Err(self.fail(DecodeError::Frame(e)));
        }
        self.ready = total;
        Ok(Some(Frame::new_unchecked(
            &self.buf[self.start..self.start + total],
        )))
    }

    /// Drops the frame the last [`StreamDecoder::peek`] returned (no-op when
    /// it returned none).
    pub fn consume(&mut self) {
        self.start += self.ready;
        self.ready = 0;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    fn fail(&mut self, e: DecodeError) -> DecodeError {
        self.failed = Some(e);
        self.ready = 0;
        e
    }
}

#[cfg(test)]
mod test {
    use switchyard_core::wire::{FrameOp, HeaderFields, encode};

    use super::*;

    fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_LEN + payload.len()];
        let f = HeaderFields {
            op: FrameOp::Put as u8,
            seq,
            span: payload.len() as u32,
            ..HeaderFields::default()
        };
        encode(&mut out, &f, payload, true).unwrap();
        out
    }

    fn drain(d: &mut StreamDecoder, seen: &mut Vec<u64>) -> Result<(), DecodeError> {
        while let Some(f) = d.peek()? {
            seen.push(f.header().seq.get());
            d.consume();
        }
        Ok(())
    }

    #[test]
    fn reassembles_any_chunking() {
        let mut stream = Vec::new();
        for i in 0..50u64 {
            stream.extend(frame(i, &vec![i as u8; (i * 37 % 300) as usize]));
        }
        for chunk in [1usize, 3, 63, 64, 65, 200, 4096] {
            let mut d = StreamDecoder::new(512);
            let mut seen = Vec::new();
            let mut rest = &stream[..];
            while !rest.is_empty() {
                let n = d.feed(&rest[..chunk.min(rest.len())]);
                rest = &rest[n..];
                drain(&mut d, &mut seen).unwrap();
            }
            assert_eq!(seen, (0..50).collect::<Vec<_>>(), "chunk {chunk}");
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn spare_and_commit() {
        let f = frame(9, &[1; 100]);
        let mut d = StreamDecoder::new(128);
        let room = d.spare();
        room[..f.len()].copy_from_slice(&f);
        d.commit(f.len());
        assert_eq!(d.peek().unwrap().unwrap().header().seq.get(), 9);
        d.consume();
        assert!(d.peek().unwrap().is_none());
    }

    fn compact_frame(seq: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; compact::COMPACT_LEN + payload.len()];
        b[compact::COMPACT_LEN..].copy_from_slice(payload);
        let p = compact::CompactPut {
            seq,
            offset: seq * 8,
            ..compact::CompactPut::default()
        };
        compact::seal(&mut b, &p, payload.len()).unwrap();
        b
    }

    #[test]
    fn compact_frames_come_out_as_full_puts_at_any_chunking() {
        let mut stream = Vec::new();
        for i in 0..60u64 {
            let payload = vec![i as u8; 1 + (i * 37 % 255) as usize];
            if i % 3 == 0 {
                stream.extend(frame(i, &payload));
            } else {
                stream.extend(compact_frame(i, &payload));
            }
        }
        for chunk in [1usize, 2, 39, 40, 41, 64, 300, 4096] {
            let mut d = StreamDecoder::new(512);
            d.accept_compact(Some((7, 8)));
            let mut seen = Vec::new();
            let mut rest = &stream[..];
            while !rest.is_empty() {
                let n = d.feed(&rest[..chunk.min(rest.len())]);
                rest = &rest[n..];
                while let Some(f) = d.peek().unwrap() {
                    let h = f.header();
                    let i = h.seq.get();
                    assert_eq!(f.op(), Some(FrameOp::Put));
                    assert_eq!(f.payload(), &vec![i as u8; 1 + (i * 37 % 255) as usize][..]);
                    if i % 3 != 0 {
                        assert_eq!((h.src_pe.get(), h.dst_pe.get()), (7, 8));
                        assert_eq!(
                            (h.offset.get(), h.span.get()),
                            (i * 8, f.payload().len() as u32)
                        );
                    }
                    seen.push(i);
                    d.consume();
                }
            }
            assert_eq!(seen, (0..60).collect::<Vec<_>>(), "chunk {chunk}");
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn compact_frames_are_refused_unless_accepted_and_checked() {
        let c = compact_frame(1, &[3; 8]);
        let mut d = StreamDecoder::new(64);
        d.feed(&c);
        assert!(matches!(
            d.peek(),
            Err(DecodeError::Frame(FrameError::BadMagic(m))) if m == compact::COMPACT_MAGIC
        ));
        let mut d = StreamDecoder::new(64);
        d.accept_compact(Some((0, 1)));
        let mut bad = c.clone();
        bad[compact::COMPACT_LEN] ^= 1;
        d.feed(&bad);
        assert!(matches!(
            d.peek(),
            Err(DecodeError::Compact(CompactError::BadCrc { .. }))
        ));
        assert!(d.peek().is_err(), "sticky");
        d.reset();
        let mut empty = c.clone();
        empty[3] = 0;
        d.feed(&empty);
        assert_eq!(
            d.peek().unwrap_err(),
            DecodeError::Compact(CompactError::Empty)
        );
    }

    #[test]
    fn errors_are_typed_and_sticky() {
        let mut d = StreamDecoder::new(64);
        d.feed(&[0xAB; 80]);
        assert!(matches!(
            d.peek(),
            Err(DecodeError::Frame(FrameError::BadMagic(_)))
        ));
        assert!(d.peek().is_err(), "sticky");
        d.reset();
        let big = frame(1, &[0; 100]);
        d.feed(&big);
        assert_eq!(
            d.peek().unwrap_err(),
            DecodeError::TooLarge {
                declared: 100,
                max: 64
            }
        );
        d.reset();
        let mut bad = frame(1, &[5; 8]);
        bad[HEADER_LEN] ^= 1;
        d.feed(&bad);
        assert!(matches!(
            d.peek(),
            Err(DecodeError::Frame(FrameError::BadCrc { .. }))
        ));
    }
}
