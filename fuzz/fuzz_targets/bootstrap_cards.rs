//! The lazy cards' frames of the bootstrap rendezvous: the localities a
//! lazy PE decodes after the allgather, the card request the root decodes,
//! the card answer and refusal a PE decodes. Arbitrary bytes never panic;
//! what decodes encodes back to the same bytes (requests and refusals,
//! localities), and decoded localities are consistent: their runs add up
//! to the size and every rank below it has a locality; node localities
//! are within the size, all on one node, and encode back to the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_bootstrap::wire::{
    decode_card_answer, decode_card_refusal, decode_card_request, decode_localities,
    decode_node_localities, encode_card_refusal, encode_card_request, encode_localities,
    encode_node_localities,
};

fuzz_target!(|bytes: &[u8]| {
    if let Ok(l) = decode_localities(bytes) {
        assert_eq!(encode_localities(&l), bytes);
        let total: u64 = l.runs().map(|(_, len, _)| u64::from(len)).sum();
        assert_eq!(total, u64::from(l.len()));
        if l.len() > 0 {
            assert!(l.get(l.len() - 1).is_some());
        }
        assert!(l.get(l.len()).is_none());
    }
    if let Ok(l) = decode_node_localities(bytes) {
        assert_eq!(encode_node_localities(&l), bytes);
        assert!(l.run_count() >= 1);
        let node = l.runs().next().map(|(_, _, loc)| loc.node_id);
        let mut end = 0u64;
        for (first, len, loc) in l.runs() {
            assert!(len > 0 && u64::from(first) >= end);
            end = u64::from(first) + u64::from(len);
            assert_eq!(Some(loc.node_id), node);
            assert_eq!(l.get(first), Some(loc));
        }
        assert!(end <= u64::from(l.len()));
        assert!(l.get(l.len()).is_none());
    }
    if let Ok(Ok(ranks)) = decode_card_request(bytes) {
        assert!(!ranks.is_empty() && ranks.len() <= switchyard_bootstrap::MAX_CARDS_PER_REQUEST);
        assert_eq!(encode_card_request(&ranks), bytes);
    }
    if let Ok(cards) = decode_card_answer(bytes) {
        assert!(cards.len() <= switchyard_bootstrap::MAX_CARDS_PER_REQUEST);
    }
    if let Ok(r) = decode_card_refusal(bytes) {
        assert_eq!(encode_card_refusal(r), bytes);
        let _ = r.to_string();
    }
});
