//! The bootstrap rendezvous' authenticated hello decoder, as the root runs
//! it on a connection's first frame, and the decoders a PE runs on what a
//! root sends (the challenge, an error verdict): arbitrary bytes never
//! panic; a hello that decodes encodes back to the same bytes; a proof made
//! up by the input is never accepted, and one sealed under the job's secret
//! always is, for that job and challenge only.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use switchyard_bootstrap::{
    JobSecret,
    wire::{DecodedHello, decode_challenge, decode_error},
};

const JOB: u64 = 0x00c0_ffee;

fn secret() -> &'static JobSecret {
    static S: OnceLock<JobSecret> = OnceLock::new();
    S.get_or_init(|| JobSecret::from_hex("fuzz", &"5a".repeat(32)).expect("a secret"))
}

// The nonce first: the bytes are the rest of the input, so a seed is a
// nonce and a hello payload as they are (seeds/bootstrap_hello/).
fuzz_target!(|input: ([u8; 16], Vec<u8>)| {
    let (nonce, bytes) = input;
    let _ = decode_challenge(&bytes);
    if let Ok(e) = decode_error(&bytes) {
        let _ = e.to_string();
    }
    let Ok(h) = DecodedHello::decode(&bytes) else {
        return;
    };
    assert_eq!(h.encode(), bytes);
    let sealed = h.sealed(secret(), JOB, &nonce);
    assert!(sealed.is_authentic(secret(), JOB, &nonce));
    assert!(!sealed.is_authentic(secret(), JOB ^ 1, &nonce));
    // The input chose the proof: with overwhelming probability it is not
    // the MAC.
    if !h.same_proof(&sealed) {
        assert!(!h.is_authentic(secret(), JOB, &nonce));
    }
});
