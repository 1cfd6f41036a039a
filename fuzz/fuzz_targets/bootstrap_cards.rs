//! The lazy cards' frames of the bootstrap rendezvous: the localities a
//! lazy PE decodes after the allgather, the card request the root decodes,
//! the card answer and refusal a PE decodes. Arbitrary bytes never panic;
//! what decodes encodes back to the same bytes (requests and refusals,
//! localities), and decoded localities are consistent: their runs add up
//! to the size and every rank below it has a locality.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_bootstrap::wire::{
    decode_card_answer, decode_card_refusal, decode_card_request, decode_localities,
    encode_card_refusal, encode_card_request, encode_localities,
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
