//! What a PE under PMIx reads of the bootstrap: the root's joined frame,
//! and the localities and cards other ranks stored in PMIx's key-value
//! store (input from outside: another process wrote them). Arbitrary bytes
//! never panic; a joined payload and a stored locality that decode encode
//! back to the same bytes; a stored card that passes the checks is the
//! rank asked, with the job's id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_bootstrap::wire::{
    check_stored_card, decode_joined, decode_stored_locality, encode_joined, encode_stored_locality,
};

fuzz_target!(|bytes: &[u8]| {
    if let Ok((size, class)) = decode_joined(bytes) {
        assert_eq!(encode_joined(size, class), bytes);
    }
    if let Ok((locality, lazy)) = decode_stored_locality(bytes) {
        assert_eq!(encode_stored_locality(locality, lazy), bytes);
    }
    // The first five bytes choose the rank asked and the class version;
    // the rest is the stored card, checked with and without the rank's
    // stored locality.
    if let [r0, r1, r2, r3, class, card @ ..] = bytes {
        let rank = u32::from_le_bytes([*r0, *r1, *r2, *r3]);
        let job_id = 0x5eed_u64;
        for locality in [
            None,
            decode_stored_locality(card.get(..18).unwrap_or(&[]))
                .ok()
                .map(|l| l.0),
        ] {
            if let Ok(c) = check_stored_card(card, rank, *class, locality, job_id) {
                assert_eq!(c.rank, rank);
                assert_eq!(c.job_id, job_id);
            }
        }
    }
});
