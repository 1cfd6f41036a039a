//! Arbitrary bytes, cut into arbitrary chunks, fed to the TCP driver's
//! stream decoder: it must never panic, and every frame it yields must pass
//! `Frame::check` on its own. The top bit of the size word makes the
//! decoder accept compact frames of small puts (handed out as full `Put`
//! frames between the connection's PEs).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_core::wire::{Frame, MAGIC};
use switchyard_socket::decode::StreamDecoder;

fuzz_target!(|input: (Vec<u16>, u16, Vec<u8>)| {
    let (cuts, max_payload, bytes) = input;
    let mut d = StreamDecoder::new(u32::from(max_payload % 4096));
    let compact = max_payload & 0x8000 != 0;
    if compact {
        d.accept_compact(Some((3, 4)));
    }
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
                    let f = Frame::new_checked(bytes).expect("a frame handed out is checked");
                    if !compact {
                        // Every byte handed out came from the stream.
                        assert_eq!(f.header().magic.get(), MAGIC);
                    }
                    d.consume();
                    stalled = 0;
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
