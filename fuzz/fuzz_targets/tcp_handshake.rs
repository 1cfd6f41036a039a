//! The TCP rails' authenticated handshake decoder: arbitrary bytes as a
//! challenge and as a `Hello` payload must never panic; what decodes must
//! encode back to the same bytes; a proof made up by the input is never
//! accepted, and one sealed under the job key always is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_socket::{
    JobKey,
    handshake::{Hello, Role, decode_challenge},
};

const KEY: JobKey = JobKey([0x5a; 32]);
const JOB: u64 = 0x00c0_ffee;

fuzz_target!(|input: (Vec<u8>, [u8; 16])| {
    let (bytes, nonce) = input;
    let _ = decode_challenge(&bytes);
    let Some(h) = Hello::decode(&bytes) else {
        return;
    };
    assert_eq!(&h.encode()[..], &bytes[..]);
    // The input chose the proof: with overwhelming probability it is not
    // the MAC, and a sealed copy always is.
    let sealed = h.seal(&KEY, Role::Connect, JOB, &nonce);
    assert!(sealed.is_authentic(&KEY, Role::Connect, JOB, &nonce));
    assert!(!sealed.is_authentic(&KEY, Role::Accept, JOB, &nonce));
    if h.mac != sealed.mac {
        assert!(!h.is_authentic(&KEY, Role::Connect, JOB, &nonce));
    }
});
