//! Compile-time guarantees of the ring split (trybuild): the ring is frozen while
//! split, the handles are `Send` but not `Sync`.
#![cfg(not(loom))]

#[test]
fn ring_split_ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/ring_frozen_while_split.rs");
    t.compile_fail("tests/ui/producer_not_sync.rs");
    t.pass("tests/ui/handles_are_send.rs");
}
