//! Arbitrary bytes, cut into arbitrary chunks, fed to the TCP driver's
//! stream decoder: it must never panic, and every frame it yields must pass
//! `Frame::check` on its own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_core::wire::Frame;
use switchyard_socket::decode::StreamDecoder;

fuzz_target!(|input: (Vec<u16>, u16, Vec<u8>)| {
    let (cuts, max_payload, bytes) = input;
    let mut d = StreamDecoder::new(u32::from(max_payload % 4096));
    let mut rest = &bytes[..];
    let mut cuts = cuts.iter().cycle();
    let mut stalled = 0;
    while !rest.is_empty() && stalled < 2 {
        let want = cuts.next().map_or(rest.len(), |&c| 1 + usize::from(c) % 300).min(rest.len());
        let n = d.feed(&rest[..want]);
        rest = &rest[n..];
        stalled = if n == 0 { stalled + 1 } else { 0 };
        loop {
            match d.peek() {
                Ok(Some(f)) => {
                    let bytes = f.into_inner();
                    assert!(Frame::new_checked(bytes).is_ok());
                    d.consume();
                    stalled = 0;
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
