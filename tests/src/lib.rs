//! Helpers for the integration tests, the driver conformance suite, and
//! when a test may skip ([`skip`]).

pub mod conformance;
pub mod skip;
