//! The wire header of frames between PEs, and its checked decoding.
//!
//! A frame is a 64-byte [`Header`] followed by `payload_len` bytes of payload. All
//! integers are little-endian and unaligned (the header can be read in place from
//! any byte buffer). Layout (byte offsets):
//!
//! | off | field | | off | field |
//! |----:|-------|-|----:|-------|
//! | 0 | magic `"SY"` (u16) | | 24 | ack (u64) |
//! | 2 | version (u8) | | 32 | context id sequence (u64) |
//! | 3 | op (u8) | | 40 | topology version (u32) |
//! | 4 | flags (u8) | | 44 | payload length (u32) |
//! | 5 | aux: atomic kind (u8) | | 48 | heap offset (u64) |
//! | 6 | path-class encoding version (u8) | | 56 | span: heap bytes touched (u32) |
//! | 7 | reserved, 0 (u8) | | 60 | CRC32C (u32) |
//! | 8 | source PE (u32) | | | |
//! | 12 | destination PE (u32) | | | |
//! | 16 | sequence (u64) | | | |
//!
//! The CRC32C covers the header with the CRC field zeroed and, when
//! [`flags::PAYLOAD_CRC`] is set, the payload after it. Headers are always
//! checked; payload checking may be sampled for bulk data by the sender.
//!
//! Decoding follows smoltcp's pattern: [`Frame::new_unchecked`] wraps bytes,
//! [`Frame::check`] validates everything, and after it no accessor can panic.
//! [`Frame::new_checked`] does both. Under `cfg(fuzzing)` only the CRC comparison
//! is skipped, so fuzzers reach the code behind it.

use core::fmt;

use zerocopy::{
    FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned,
    little_endian::{U16, U32, U64},
};

use crate::{
    class::CLASS_ENCODING_VERSION,
    crc::{crc32c, crc32c_append},
};

/// `"SY"` in little-endian.
pub const MAGIC: u16 = u16::from_le_bytes(*b"SY");
/// Wire format version of this build.
pub const WIRE_VERSION: u8 = 1;
/// Size of [`Header`].
pub const HEADER_LEN: usize = 64;
/// Largest payload a frame may declare (larger transfers are split by the sender).
pub const MAX_PAYLOAD: u32 = 16 << 20;
/// Payload length of an atomic request: operand and comparand, 8 bytes each.
pub const ATOMIC_PAYLOAD: u32 = 16;
/// Bytes after the data in a [`FrameOp::PutSignal`] payload: the signal
/// word's heap offset and the value, u64 each.
pub const SIGNAL_TRAILER: u32 = 16;

/// Frame flags.
pub mod flags {
    /// The CRC covers the payload too.
    pub const PAYLOAD_CRC: u8 = 1 << 0;
    /// The sender wants an ack for this frame now (it is waiting in `quiet`).
    pub const ACK_NOW: u8 = 1 << 1;
    /// Earlier frames must complete before this one (`fence`).
    pub const FENCE: u8 = 1 << 2;
    /// A replay after reconnect; the receiver deduplicates by sequence.
    pub const REPLAY: u8 = 1 << 3;
    /// Every flag this version knows.
    pub const KNOWN: u8 = PAYLOAD_CRC | ACK_NOW | FENCE | REPLAY;
}

/// The 64-byte frame header, exactly as on the wire.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: U16,
    /// [`WIRE_VERSION`].
    pub version: u8,
    /// [`FrameOp`] code.
    pub op: u8,
    /// [`flags`].
    pub flags: u8,
    /// For atomics, the [`AtomicKind`] code; for [`FrameOp::PutSignal`], the
    /// signal's (`Set` or `FetchAdd`); 0 otherwise.
    pub aux: u8,
    /// [`CLASS_ENCODING_VERSION`] of the sender.
    pub class_version: u8,
    /// Must be zero.
    pub reserved: u8,
    /// Sending PE.
    pub src_pe: U32,
    /// Receiving PE.
    pub dst_pe: U32,
    /// Per-connection sequence number of this frame (dedup, replay).
    pub seq: U64,
    /// Highest sequence received in order from the other side (piggybacked ack).
    pub ack: U64,
    /// Context id sequence of the routing decision ([`ContextId::seq`](crate::route::ContextId)).
    pub context: U64,
    /// Topology version the sender routed with.
    pub topo_version: U32,
    /// Bytes of payload after the header.
    pub payload_len: U32,
    /// Offset in the target's symmetric heap.
    pub offset: U64,
    /// Bytes of the target's heap the operation touches.
    pub span: U32,
    /// CRC32C (see module docs).
    pub crc: U32,
}

static_assertions::const_assert_eq!(core::mem::size_of::<Header>(), HEADER_LEN);
static_assertions::const_assert_eq!(core::mem::align_of::<Header>(), 1);

/// What a frame asks the receiver to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameOp {
    /// Write the payload at `offset`.
    Put = 1,
    /// Read `span` bytes at `offset` and answer with `GetReply`.
    Get = 2,
    /// The data of a `Get`.
    GetReply = 3,
    /// Run an atomic ([`AtomicKind`] in `aux`) on `span` bytes at `offset`.
    Atomic = 4,
    /// The old value of an atomic.
    AtomicReply = 5,
    /// Acknowledges every frame up to `ack`.
    Ack = 6,
    /// Grants flow-control credit (payload: cumulative grant, u64).
    Credit = 7,
    /// Liveness probe.
    Heartbeat = 8,
    /// Connection handshake (payload: job cookie and card).
    Hello = 9,
    /// A link-state transition broadcast (payload: transition record).
    LinkState = 10,
    /// Orderly close.
    Close = 11,
    /// Write the first `span` bytes of the payload at `offset`, then update
    /// the 8-byte signal word the last [`SIGNAL_TRAILER`] bytes name (heap
    /// offset, 8-aligned, and value, u64 each) with `aux`'s
    /// [`AtomicKind::Set`] or [`AtomicKind::FetchAdd`], Release-ordered
    /// after the data: a put with a signal in one frame.
    PutSignal = 12,
}

impl FrameOp {
    /// Decodes an op byte.
    pub const fn from_u8(b: u8) -> Option<FrameOp> {
        Some(match b {
            1 => FrameOp::Put,
            2 => FrameOp::Get,
            3 => FrameOp::GetReply,
            4 => FrameOp::Atomic,
            5 => FrameOp::AtomicReply,
            6 => FrameOp::Ack,
            7 => FrameOp::Credit,
            8 => FrameOp::Heartbeat,
            9 => FrameOp::Hello,
            10 => FrameOp::LinkState,
            11 => FrameOp::Close,
            12 => FrameOp::PutSignal,
            _ => return None,
        })
    }

    /// Whether the op touches the target's heap (`offset`, `span` meaningful).
    pub const fn touches_heap(self) -> bool {
        matches!(
            self,
            FrameOp::Put | FrameOp::Get | FrameOp::Atomic | FrameOp::PutSignal
        )
    }
}

/// The signal of a checked [`FrameOp::PutSignal`] frame
/// ([`Frame::signal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSignal {
    /// Heap offset of the 8-byte signal word (8-aligned, in the heap).
    pub offset: u64,
    /// The value set or added.
    pub value: u64,
    /// [`AtomicKind::Set`] or [`AtomicKind::FetchAdd`].
    pub kind: AtomicKind,
}

/// Atomic operations, carried in `aux` of an `Atomic` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AtomicKind {
    /// Returns the old value, adds the operand.
    FetchAdd = 1,
    /// Returns the old value, stores the operand if old == comparand.
    CompareSwap = 2,
    /// Returns the old value, stores the operand.
    Swap = 3,
    /// Returns the value.
    Fetch = 4,
    /// Stores the operand.
    Set = 5,
    /// Returns the old value, ANDs the operand in.
    FetchAnd = 6,
    /// Returns the old value, ORs the operand in.
    FetchOr = 7,
    /// Returns the old value, XORs the operand in.
    FetchXor = 8,
}

impl AtomicKind {
    /// Decodes an atomic-kind byte.
    pub const fn from_u8(b: u8) -> Option<AtomicKind> {
        Some(match b {
            1 => AtomicKind::FetchAdd,
            2 => AtomicKind::CompareSwap,
            3 => AtomicKind::Swap,
            4 => AtomicKind::Fetch,
            5 => AtomicKind::Set,
            6 => AtomicKind::FetchAnd,
            7 => AtomicKind::FetchOr,
            8 => AtomicKind::FetchXor,
            _ => return None,
        })
    }
}

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than a header, or than header plus declared payload.
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// The magic is not `"SY"`.
    BadMagic(u16),
    /// A wire version this build does not speak.
    BadVersion(u8),
    /// A path-class encoding version this build does not speak.
    BadClassVersion(u8),
    /// Unknown op code.
    UnknownOp(u8),
    /// Unknown atomic kind in an `Atomic` frame, or a `PutSignal` whose
    /// `aux` is neither `Set` nor `FetchAdd`.
    UnknownAtomic(u8),
    /// Unknown flag bits, or a non-zero reserved byte.
    ReservedBits,
    /// The buffer is longer or shorter than header plus declared payload.
    LengthMismatch {
        /// Header plus declared payload.
        declared: usize,
        /// Bytes given.
        actual: usize,
    },
    /// Payload length or span not what the op requires.
    BadLengthForOp {
        /// The op.
        op: FrameOp,
        /// Declared payload length.
        payload_len: u32,
        /// Declared span.
        span: u32,
    },
    /// Declared payload over [`MAX_PAYLOAD`].
    PayloadTooLarge(u32),
    /// `offset + span` overflows.
    OffsetOverflow {
        /// Offset.
        offset: u64,
        /// Span.
        span: u32,
    },
    /// An atomic whose offset is not a multiple of its width: the target would
    /// run a misaligned (split-lock, or faulting) hardware atomic.
    Misaligned {
        /// Offset.
        offset: u64,
        /// Width of the atomic.
        span: u32,
    },
    /// `offset + span` beyond the target's heap.
    OutOfBounds {
        /// Offset.
        offset: u64,
        /// Span.
        span: u32,
        /// Heap size.
        heap_len: u64,
    },
    /// CRC mismatch.
    BadCrc {
        /// CRC in the header.
        expected: u32,
        /// CRC computed.
        actual: u32,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { need, got } => {
                write!(f, "truncated frame: need {need} bytes, got {got}")
            }
            Self::BadMagic(m) => write!(f, "bad magic {m:#06x}"),
            Self::BadVersion(v) => write!(
                f,
                "wire version {v} not supported (this build: {WIRE_VERSION})"
            ),
            Self::BadClassVersion(v) => write!(
                f,
                "path-class encoding version {v} not supported (this build: {CLASS_ENCODING_VERSION})"
            ),
            Self::UnknownOp(o) => write!(f, "unknown op {o}"),
            Self::UnknownAtomic(a) => write!(f, "unknown atomic kind {a}"),
            Self::ReservedBits => f.write_str("reserved bits set"),
            Self::LengthMismatch { declared, actual } => {
                write!(f, "frame declares {declared} bytes but has {actual}")
            }
            Self::BadLengthForOp {
                op,
                payload_len,
                span,
            } => {
                write!(f, "{op:?} frame with payload {payload_len} and span {span}")
            }
            Self::PayloadTooLarge(n) => write!(f, "payload of {n} bytes exceeds {MAX_PAYLOAD}"),
            Self::OffsetOverflow { offset, span } => {
                write!(f, "offset {offset} + span {span} overflows")
            }
            Self::Misaligned { offset, span } => {
                write!(
                    f,
                    "atomic of {span} bytes at offset {offset} is not aligned"
                )
            }
            Self::OutOfBounds {
                offset,
                span,
                heap_len,
            } => {
                write!(
                    f,
                    "offset {offset} + span {span} is beyond a heap of {heap_len} bytes"
                )
            }
            Self::BadCrc { expected, actual } => {
                write!(
                    f,
                    "CRC mismatch: header says {expected:#010x}, computed {actual:#010x}"
                )
            }
        }
    }
}

impl core::error::Error for FrameError {}

/// A frame over a byte buffer (header first). See the module docs.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps bytes without checking anything. Accessors may panic until
    /// [`check`](Self::check) passes.
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wraps exactly one frame and checks it.
    ///
    /// # Errors
    /// Every [`FrameError`] but `OutOfBounds` (see [`check_heap`](Self::check_heap)).
    pub fn new_checked(buffer: T) -> Result<Self, FrameError> {
        let f = Self::new_unchecked(buffer);
        f.check()?;
        let (declared, actual) = (f.total_len(), f.buffer.as_ref().len());
        if declared != actual {
            return Err(FrameError::LengthMismatch { declared, actual });
        }
        Ok(f)
    }

    /// Checks that the buffer holds a header and its declared payload (it may hold
    /// more: the start of the next frame of a stream).
    ///
    /// # Errors
    /// [`FrameError::Truncated`], or [`FrameError::PayloadTooLarge`] for a
    /// declared payload over [`MAX_PAYLOAD`] (which no buffer may satisfy).
    pub fn check_len(&self) -> Result<(), FrameError> {
        let b = self.buffer.as_ref();
        let Some((h, _)) = Header::ref_from_prefix(b).ok() else {
            return Err(FrameError::Truncated {
                need: HEADER_LEN,
                got: b.len(),
            });
        };
        let declared = h.payload_len.get();
        if declared > MAX_PAYLOAD {
            return Err(FrameError::PayloadTooLarge(declared));
        }
        let need = HEADER_LEN + declared as usize;
        if b.len() < need {
            return Err(FrameError::Truncated { need, got: b.len() });
        }
        Ok(())
    }

    /// Validates the header, the lengths and the CRC. After it passes, no accessor
    /// panics.
    ///
    /// # Errors
    /// See [`FrameError`].
    pub fn check(&self) -> Result<(), FrameError> {
        let b = self.buffer.as_ref();
        let h = match Header::ref_from_prefix(b) {
            Ok((h, _)) => h,
            Err(_) => {
                return Err(FrameError::Truncated {
                    need: HEADER_LEN,
                    got: b.len(),
                });
            }
        };
        validate_header(h)?;
        self.check_len()?;
        let total = HEADER_LEN + h.payload_len.get() as usize;
        let actual = frame_crc(
            &b[..HEADER_LEN],
            &b[HEADER_LEN..total],
            h.flags & flags::PAYLOAD_CRC != 0,
        );
        let expected = h.crc.get();
        if actual != expected && !cfg!(fuzzing) {
            return Err(FrameError::BadCrc { expected, actual });
        }
        if h.op == FrameOp::PutSignal as u8 {
            let s = signal_trailer(&b[HEADER_LEN..total]);
            if !s.0.is_multiple_of(8) {
                return Err(FrameError::Misaligned {
                    offset: s.0,
                    span: 8,
                });
            }
        }
        Ok(())
    }

    /// The header.
    ///
    /// # Panics
    /// If the buffer is shorter than a header (never after `check_len`).
    #[inline]
    pub fn header(&self) -> &Header {
        match Header::ref_from_prefix(self.buffer.as_ref()) {
            Ok((h, _)) => h,
            Err(_) => panic!("frame shorter than its header: call check() first"),
        }
    }

    /// The op; always `Some` after `check`.
    #[inline]
    pub fn op(&self) -> Option<FrameOp> {
        FrameOp::from_u8(self.header().op)
    }

    /// Header plus declared payload, in bytes.
    #[inline]
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.header().payload_len.get() as usize
    }

    /// The payload.
    ///
    /// # Panics
    /// If the buffer is shorter than declared (never after `check_len`).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }

    /// The data of a put: the whole payload of a `Put`, the payload less
    /// its [`SIGNAL_TRAILER`] for a `PutSignal` (`span` bytes either way
    /// once checked).
    ///
    /// # Panics
    /// As [`payload`](Self::payload).
    #[inline]
    pub fn put_data(&self) -> &[u8] {
        let p = self.payload();
        let n = (self.header().span.get() as usize).min(p.len());
        &p[..n]
    }

    /// The signal of a `PutSignal` frame, its word checked against a heap
    /// of `heap_len` bytes (as [`check_heap`](Self::check_heap) checks the
    /// data). Call it after [`check`](Self::check).
    ///
    /// # Errors
    /// [`FrameError::BadLengthForOp`] for another op or a payload shorter
    /// than the trailer, [`FrameError::UnknownAtomic`],
    /// [`FrameError::Misaligned`], [`FrameError::OffsetOverflow`] or
    /// [`FrameError::OutOfBounds`].
    pub fn signal(&self, heap_len: u64) -> Result<FrameSignal, FrameError> {
        let h = self.header();
        let p = self.payload();
        let (payload_len, span) = (h.payload_len.get(), h.span.get());
        if h.op != FrameOp::PutSignal as u8 || p.len() < SIGNAL_TRAILER as usize {
            return Err(FrameError::BadLengthForOp {
                op: FrameOp::from_u8(h.op).unwrap_or(FrameOp::PutSignal),
                payload_len,
                span,
            });
        }
        let kind = match AtomicKind::from_u8(h.aux) {
            Some(k @ (AtomicKind::Set | AtomicKind::FetchAdd)) => k,
            _ => return Err(FrameError::UnknownAtomic(h.aux)),
        };
        let (offset, value) = signal_trailer(p);
        if !offset.is_multiple_of(8) {
            return Err(FrameError::Misaligned { offset, span: 8 });
        }
        heap_range(offset, 8, heap_len)?;
        Ok(FrameSignal {
            offset,
            value,
            kind,
        })
    }

    /// Checks `offset + span` against a heap of `heap_len` bytes and returns the
    /// byte range the operation touches. Call it on every heap-touching frame: a
    /// symmetric address is bounds-checked at the target, always.
    ///
    /// # Errors
    /// [`FrameError::OffsetOverflow`] or [`FrameError::OutOfBounds`].
    pub fn check_heap(&self, heap_len: u64) -> Result<core::ops::Range<u64>, FrameError> {
        let h = self.header();
        heap_range(h.offset.get(), h.span.get(), heap_len)
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// The signal offset and value in the last [`SIGNAL_TRAILER`] bytes of a
/// payload (zeros when it is shorter).
fn signal_trailer(payload: &[u8]) -> (u64, u64) {
    let Some(at) = payload.len().checked_sub(SIGNAL_TRAILER as usize) else {
        return (0, 0);
    };
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&payload[at + i..at + i + 8]);
        u64::from_le_bytes(w)
    };
    (word(0), word(8))
}

/// The heap range `offset..offset + span`, checked against `heap_len`.
///
/// # Errors
/// [`FrameError::OffsetOverflow`] or [`FrameError::OutOfBounds`].
#[inline]
pub fn heap_range(
    offset: u64,
    span: u32,
    heap_len: u64,
) -> Result<core::ops::Range<u64>, FrameError> {
    let end = offset
        .checked_add(span as u64)
        .ok_or(FrameError::OffsetOverflow { offset, span })?;
    if end > heap_len {
        return Err(FrameError::OutOfBounds {
            offset,
            span,
            heap_len,
        });
    }
    Ok(offset..end)
}

fn validate_header(h: &Header) -> Result<(), FrameError> {
    if h.magic.get() != MAGIC {
        return Err(FrameError::BadMagic(h.magic.get()));
    }
    if h.version != WIRE_VERSION {
        return Err(FrameError::BadVersion(h.version));
    }
    if h.class_version != CLASS_ENCODING_VERSION {
        return Err(FrameError::BadClassVersion(h.class_version));
    }
    if h.reserved != 0 || h.flags & !flags::KNOWN != 0 {
        return Err(FrameError::ReservedBits);
    }
    let op = FrameOp::from_u8(h.op).ok_or(FrameError::UnknownOp(h.op))?;
    let (payload_len, span) = (h.payload_len.get(), h.span.get());
    if payload_len > MAX_PAYLOAD {
        return Err(FrameError::PayloadTooLarge(payload_len));
    }
    if op == FrameOp::Atomic && AtomicKind::from_u8(h.aux).is_none() {
        return Err(FrameError::UnknownAtomic(h.aux));
    }
    if op == FrameOp::PutSignal
        && !matches!(
            AtomicKind::from_u8(h.aux),
            Some(AtomicKind::Set | AtomicKind::FetchAdd)
        )
    {
        return Err(FrameError::UnknownAtomic(h.aux));
    }
    if !matches!(op, FrameOp::Atomic | FrameOp::PutSignal) && h.aux != 0 {
        return Err(FrameError::ReservedBits);
    }
    let lengths_ok = match op {
        FrameOp::Put | FrameOp::GetReply => payload_len == span,
        FrameOp::PutSignal => span.checked_add(SIGNAL_TRAILER) == Some(payload_len),
        FrameOp::Get => payload_len == 0 && span <= MAX_PAYLOAD,
        FrameOp::Atomic => payload_len == ATOMIC_PAYLOAD && matches!(span, 4 | 8),
        FrameOp::AtomicReply => payload_len == 8 && span == 0,
        FrameOp::Credit => payload_len == 8 && span == 0,
        FrameOp::Ack | FrameOp::Heartbeat | FrameOp::Close => payload_len == 0 && span == 0,
        FrameOp::Hello | FrameOp::LinkState => span == 0,
    };
    if !lengths_ok {
        return Err(FrameError::BadLengthForOp {
            op,
            payload_len,
            span,
        });
    }
    if op.touches_heap() {
        let offset = h.offset.get();
        offset
            .checked_add(span as u64)
            .ok_or(FrameError::OffsetOverflow { offset, span })?;
        // An atomic's span is 4 or 8 here (checked above).
        if op == FrameOp::Atomic && !offset.is_multiple_of(span as u64) {
            return Err(FrameError::Misaligned { offset, span });
        }
    } else if h.offset.get() != 0 {
        return Err(FrameError::ReservedBits);
    }
    Ok(())
}

/// CRC of a frame: header with the CRC field zeroed, then the payload if covered.
fn frame_crc(header: &[u8], payload: &[u8], with_payload: bool) -> u32 {
    let mut crc = crc32c(&header[..60]);
    crc = crc32c_append(crc, &[0; 4]);
    if with_payload {
        crc = crc32c_append(crc, payload);
    }
    crc
}

/// Header fields a sender fills in, in native types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderFields {
    /// Op code ([`FrameOp`] as u8).
    pub op: u8,
    /// [`flags`] (the encoder adds [`flags::PAYLOAD_CRC`] when asked to).
    pub flags: u8,
    /// Atomic kind for `Atomic`, else 0.
    pub aux: u8,
    /// Sending PE.
    pub src_pe: u32,
    /// Receiving PE.
    pub dst_pe: u32,
    /// Per-connection sequence.
    pub seq: u64,
    /// Piggybacked ack.
    pub ack: u64,
    /// Context id sequence.
    pub context: u64,
    /// Topology version.
    pub topo_version: u32,
    /// Heap offset.
    pub offset: u64,
    /// Heap bytes touched.
    pub span: u32,
}

/// Why a frame could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// The output buffer is too small.
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// The payload is over [`MAX_PAYLOAD`].
    PayloadTooLarge(usize),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BufferTooSmall { need, got } => {
                write!(f, "frame needs {need} bytes, buffer has {got}")
            }
            Self::PayloadTooLarge(n) => write!(f, "payload of {n} bytes exceeds {MAX_PAYLOAD}"),
        }
    }
}

impl core::error::Error for EncodeError {}

/// Writes a frame (header, then `payload`) to the start of `out` and returns its
/// length. With `payload_crc` the CRC covers the payload too. No allocation.
///
/// # Errors
/// [`EncodeError`] when `out` is too small or the payload too large.
pub fn encode(
    out: &mut [u8],
    fields: &HeaderFields,
    payload: &[u8],
    payload_crc: bool,
) -> Result<usize, EncodeError> {
    if payload.len() > MAX_PAYLOAD as usize {
        return Err(EncodeError::PayloadTooLarge(payload.len()));
    }
    let total = HEADER_LEN + payload.len();
    if out.len() < total {
        return Err(EncodeError::BufferTooSmall {
            need: total,
            got: out.len(),
        });
    }
    out[HEADER_LEN..total].copy_from_slice(payload);
    seal(out, fields, payload.len(), payload_crc)
}

/// Writes the header in front of a payload the caller already placed at
/// `out[HEADER_LEN..HEADER_LEN + payload_len]` (zero-copy senders), computing the
/// CRC. Returns the frame length.
///
/// # Errors
/// [`EncodeError`] when `out` is too small or the payload too large.
pub fn seal(
    out: &mut [u8],
    fields: &HeaderFields,
    payload_len: usize,
    payload_crc: bool,
) -> Result<usize, EncodeError> {
    if payload_len > MAX_PAYLOAD as usize {
        return Err(EncodeError::PayloadTooLarge(payload_len));
    }
    let total = HEADER_LEN + payload_len;
    if out.len() < total {
        return Err(EncodeError::BufferTooSmall {
            need: total,
            got: out.len(),
        });
    }
    let h = Header {
        magic: U16::new(MAGIC),
        version: WIRE_VERSION,
        op: fields.op,
        flags: fields.flags | if payload_crc { flags::PAYLOAD_CRC } else { 0 },
        aux: fields.aux,
        class_version: CLASS_ENCODING_VERSION,
        reserved: 0,
        src_pe: U32::new(fields.src_pe),
        dst_pe: U32::new(fields.dst_pe),
        seq: U64::new(fields.seq),
        ack: U64::new(fields.ack),
        context: U64::new(fields.context),
        topo_version: U32::new(fields.topo_version),
        payload_len: U32::new(payload_len as u32),
        offset: U64::new(fields.offset),
        span: U32::new(fields.span),
        crc: U32::new(0),
    };
    let (head, rest) = out.split_at_mut(HEADER_LEN);
    head.copy_from_slice(h.as_bytes());
    let crc = frame_crc(head, &rest[..payload_len], payload_crc);
    head[60..64].copy_from_slice(&crc.to_le_bytes());
    Ok(total)
}

#[cfg(test)]
mod test {
    use super::*;

    fn put_fields(len: u32) -> HeaderFields {
        HeaderFields {
            op: FrameOp::Put as u8,
            src_pe: 3,
            dst_pe: 7,
            seq: 42,
            ack: 41,
            context: 0xABCD,
            topo_version: 9,
            offset: 4096,
            span: len,
            ..HeaderFields::default()
        }
    }

    #[test]
    fn roundtrip() {
        let payload = [0x5Au8; 100];
        let mut buf = [0u8; 256];
        let n = encode(&mut buf, &put_fields(100), &payload, true).unwrap();
        assert_eq!(n, HEADER_LEN + 100);
        let f = Frame::new_checked(&buf[..n]).unwrap();
        assert_eq!(f.op(), Some(FrameOp::Put));
        assert_eq!(f.header().seq.get(), 42);
        assert_eq!(f.header().src_pe.get(), 3);
        assert_eq!(f.payload(), &payload[..]);
        assert_eq!(f.check_heap(1 << 20), Ok(4096..4196));
        assert_eq!(
            f.check_heap(4100),
            Err(FrameError::OutOfBounds {
                offset: 4096,
                span: 100,
                heap_len: 4100
            })
        );
    }

    #[test]
    fn typed_errors() {
        let mut buf = [0u8; 256];
        let n = encode(&mut buf, &put_fields(8), &[1; 8], true).unwrap();
        let good = buf;

        assert_eq!(
            Frame::new_checked(&buf[..10]).unwrap_err(),
            FrameError::Truncated {
                need: HEADER_LEN,
                got: 10
            }
        );
        assert_eq!(
            Frame::new_checked(&buf[..n - 1]).unwrap_err(),
            FrameError::Truncated {
                need: n,
                got: n - 1
            }
        );
        assert_eq!(
            Frame::new_checked(&buf[..n + 1]).unwrap_err(),
            FrameError::LengthMismatch {
                declared: n,
                actual: n + 1
            }
        );
        buf[0] = b'X';
        assert!(matches!(
            Frame::new_checked(&buf[..n]),
            Err(FrameError::BadMagic(_))
        ));
        buf = good;
        buf[2] = 9;
        assert_eq!(
            Frame::new_checked(&buf[..n]).unwrap_err(),
            FrameError::BadVersion(9)
        );
        buf = good;
        buf[3] = 200;
        assert_eq!(
            Frame::new_checked(&buf[..n]).unwrap_err(),
            FrameError::UnknownOp(200)
        );
        buf = good;
        buf[7] = 1;
        assert_eq!(
            Frame::new_checked(&buf[..n]).unwrap_err(),
            FrameError::ReservedBits
        );
        buf = good;
        buf[HEADER_LEN] ^= 1; // payload bit flip
        assert!(matches!(
            Frame::new_checked(&buf[..n]),
            Err(FrameError::BadCrc { .. })
        ));
        buf = good;
        buf[48..56].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            Frame::new_checked(&buf[..n]),
            Err(FrameError::OffsetOverflow { .. })
        ));
        buf = good;
        buf[56..60].copy_from_slice(&9u32.to_le_bytes()); // span != payload
        assert!(matches!(
            Frame::new_checked(&buf[..n]),
            Err(FrameError::BadLengthForOp {
                op: FrameOp::Put,
                ..
            })
        ));
        buf = good;
        buf[44..48].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
        assert_eq!(
            Frame::new_checked(&buf[..n]).unwrap_err(),
            FrameError::PayloadTooLarge(MAX_PAYLOAD + 1)
        );
    }

    #[test]
    fn header_only_crc_still_checks_header() {
        let mut buf = [0u8; 128];
        let n = encode(&mut buf, &put_fields(8), &[1; 8], false).unwrap();
        buf[HEADER_LEN] ^= 0xFF; // payload not covered
        assert!(Frame::new_checked(&buf[..n]).is_ok());
        buf[16] ^= 1; // seq is covered
        assert!(matches!(
            Frame::new_checked(&buf[..n]),
            Err(FrameError::BadCrc { .. })
        ));
    }

    #[test]
    fn misaligned_atomics_are_refused() {
        let mut buf = [0u8; 128];
        let f = HeaderFields {
            op: FrameOp::Atomic as u8,
            aux: AtomicKind::FetchAdd as u8,
            span: 8,
            offset: 3,
            ..HeaderFields::default()
        };
        let n = encode(&mut buf, &f, &[0; ATOMIC_PAYLOAD as usize], true).unwrap();
        assert_eq!(
            Frame::new_checked(&buf[..n]).unwrap_err(),
            FrameError::Misaligned { offset: 3, span: 8 }
        );
        let f = HeaderFields { offset: 16, ..f };
        let n = encode(&mut buf, &f, &[0; ATOMIC_PAYLOAD as usize], true).unwrap();
        assert_eq!(
            Frame::new_checked(&buf[..n]).unwrap().check_heap(24),
            Ok(16..24)
        );
    }

    #[test]
    fn check_len_refuses_oversized_declarations() {
        // Found by review of the fuzz target: a frame declaring more than
        // MAX_PAYLOAD in a buffer big enough for MAX_PAYLOAD passed check_len and
        // then payload() panicked.
        let mut buf = std::vec![0u8; HEADER_LEN + MAX_PAYLOAD as usize];
        buf[44..48].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
        let f = Frame::new_unchecked(&buf[..]);
        assert_eq!(
            f.check_len(),
            Err(FrameError::PayloadTooLarge(MAX_PAYLOAD + 1))
        );
    }

    #[test]
    fn encode_errors() {
        let mut small = [0u8; 70];
        assert_eq!(
            encode(&mut small, &put_fields(8), &[0; 8], true),
            Err(EncodeError::BufferTooSmall { need: 72, got: 70 })
        );
    }

    extern crate std;

    fn put_signal_frame(data: &[u8], sig_off: u64, value: u64, aux: u8) -> std::vec::Vec<u8> {
        let mut payload = data.to_vec();
        payload.extend_from_slice(&sig_off.to_le_bytes());
        payload.extend_from_slice(&value.to_le_bytes());
        let f = HeaderFields {
            op: FrameOp::PutSignal as u8,
            aux,
            seq: 1,
            offset: 64,
            span: data.len() as u32,
            ..HeaderFields::default()
        };
        let mut buf = std::vec![0u8; HEADER_LEN + payload.len()];
        encode(&mut buf, &f, &payload, true).unwrap();
        buf
    }

    #[test]
    fn put_signal_decodes_data_and_signal() {
        let buf = put_signal_frame(&[1, 2, 3], 8, 42, AtomicKind::FetchAdd as u8);
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(f.op(), Some(FrameOp::PutSignal));
        assert_eq!(f.put_data(), &[1, 2, 3]);
        assert_eq!(f.check_heap(4096).unwrap(), 64..67);
        assert_eq!(
            f.signal(4096).unwrap(),
            FrameSignal {
                offset: 8,
                value: 42,
                kind: AtomicKind::FetchAdd
            }
        );
        // Empty data: the signal alone.
        let buf = put_signal_frame(&[], 0, 1, AtomicKind::Set as u8);
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert!(f.put_data().is_empty());
        assert_eq!(f.signal(8).unwrap().kind, AtomicKind::Set);
    }

    #[test]
    fn malformed_put_signal_is_a_typed_error() {
        // Signal word out of the heap, or straddling its end.
        let buf = put_signal_frame(&[1; 8], 4096, 1, AtomicKind::Set as u8);
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert!(matches!(
            f.signal(4096),
            Err(FrameError::OutOfBounds { .. })
        ));
        let buf = put_signal_frame(&[1; 8], !7, 1, AtomicKind::Set as u8);
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert!(matches!(
            f.signal(4096),
            Err(FrameError::OffsetOverflow { .. })
        ));
        // Misaligned signal word.
        let buf = put_signal_frame(&[1; 8], 12, 1, AtomicKind::Set as u8);
        assert!(matches!(
            Frame::new_checked(&buf[..]),
            Err(FrameError::Misaligned {
                offset: 12,
                span: 8
            })
        ));
        // A signal kind other than set or add.
        for aux in [0, AtomicKind::Swap as u8, 99] {
            let buf = put_signal_frame(&[1; 8], 8, 1, aux);
            assert_eq!(
                Frame::new_checked(&buf[..]).unwrap_err(),
                FrameError::UnknownAtomic(aux)
            );
        }
        // A payload shorter than data plus trailer.
        let f = HeaderFields {
            op: FrameOp::PutSignal as u8,
            aux: AtomicKind::Set as u8,
            span: 8,
            ..HeaderFields::default()
        };
        for plen in [0usize, 8, 16, 23] {
            let mut buf = std::vec![0u8; HEADER_LEN + plen];
            encode(&mut buf, &f, &std::vec![0u8; plen], true).unwrap();
            assert!(matches!(
                Frame::new_checked(&buf[..]),
                Err(FrameError::BadLengthForOp {
                    op: FrameOp::PutSignal,
                    ..
                })
            ));
        }
        // A span that overflows with the trailer.
        let mut buf = put_signal_frame(&[1; 8], 8, 1, AtomicKind::Set as u8);
        buf[56..60].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Frame::new_unchecked(&buf[..]).check(),
            Err(FrameError::BadLengthForOp { .. })
        ));
        // Another op has no signal.
        let buf = {
            let mut b = std::vec![0u8; HEADER_LEN + 16];
            encode(&mut b, &put_fields(16), &[0; 16], true).unwrap();
            b
        };
        assert!(Frame::new_checked(&buf[..]).unwrap().signal(4096).is_err());
    }
}
