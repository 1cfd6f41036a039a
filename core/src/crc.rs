//! CRC32C (Castagnoli), the checksum of every frame.
//!
//! With the `std` feature this is the `crc32c` crate, which uses the CPU's CRC32
//! instruction (SSE 4.2 on x86_64, the CRC extension on aarch64) after detecting it
//! at run time, and a table otherwise. Without `std` (no run-time CPU detection)
//! it is the `crc` crate's slice-by-16 table implementation. Both compute the same
//! function; a test checks them against each other and the standard check value.

#[cfg(feature = "std")]
#[inline]
fn imp(seed: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(seed, bytes)
}

#[cfg(not(feature = "std"))]
#[inline]
fn imp(seed: u32, bytes: &[u8]) -> u32 {
    table::append(seed, bytes)
}

mod table {
    use crc::{CRC_32_ISCSI, Crc, Table};

    static CASTAGNOLI: Crc<u32, Table<16>> = Crc::<u32, Table<16>>::new(&CRC_32_ISCSI);

    /// Continues a CRC32C over `bytes` (table implementation).
    #[cfg_attr(feature = "std", allow(dead_code))]
    pub(super) fn append(seed: u32, bytes: &[u8]) -> u32 {
        // Resume from a finished CRC: undo the final xor (!0), and since the
        // crate reflects the initial register value of reflected algorithms,
        // hand it over bit-reversed.
        let mut d = CASTAGNOLI.digest_with_initial((seed ^ !0).reverse_bits());
        d.update(bytes);
        d.finalize()
    }
}

/// CRC32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    imp(0, bytes)
}

/// CRC32C of the concatenation of the bytes already summed into `crc` and `bytes`.
#[inline]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    imp(crc, bytes)
}

/// The portable table implementation, exposed for benchmarks and cross-checks.
#[inline]
pub fn crc32c_table(bytes: &[u8]) -> u32 {
    table::append(0, bytes)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn check_value_and_append() {
        // The standard check value of CRC-32C over "123456789".
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_table(b"123456789"), 0xE306_9283);
        let whole = crc32c(b"hello, switchyard");
        assert_eq!(crc32c_append(crc32c(b"hello, "), b"switchyard"), whole);
        assert_eq!(
            table::append(table::append(0, b"hello, "), b"switchyard"),
            whole
        );
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn implementations_agree() {
        let mut buf = [0u8; 1024];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i * 31 + 7) as u8;
        }
        for len in [0, 1, 7, 8, 63, 64, 65, 1023, 1024] {
            assert_eq!(crc32c(&buf[..len]), crc32c_table(&buf[..len]), "len {len}");
        }
    }
}
