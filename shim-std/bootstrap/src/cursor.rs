//! A bounded little-endian reader over bytes, shared by the card and frame
//! decoders: every read checks what is left, so no input makes them panic.

use crate::card::CardError;

/// A bounded reader over bytes: every read checks what is left.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn left(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], CardError> {
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        let out = rest.get(..n).ok_or(CardError::Truncated {
            field,
            needed: n,
            available: rest.len(),
        })?;
        self.pos += n;
        Ok(out)
    }

    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], CardError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, CardError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, CardError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, CardError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, CardError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn end(&self) -> Result<(), CardError> {
        match self.left() {
            0 => Ok(()),
            extra => Err(CardError::TrailingBytes { extra }),
        }
    }
}
