//! Topology files: any UTF-8 text either parses or is refused with a typed
//! error, and a parsed spec answers every query without panicking.
//!
//! Written against the shim's parser API as specified:
//! `switchyard_topo::parse_topology(text, switchyard_topo::Format::Auto)`,
//! then `spec.localities(k)` and `spec.class_of(k, a, b)`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_topo::{Format, parse_topology};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = parse_topology(text, Format::Auto) else {
        return;
    };
    for k in 1..=3 {
        let _ = spec.localities(k);
        for (a, b) in [
            (0, 0),
            (0, 1),
            (1, 0),
            (2, 7),
            (7, 2),
            (1000, 3),
            (3, 1_000_000),
        ] {
            let _ = spec.class_of(k, a, b);
        }
    }
});
