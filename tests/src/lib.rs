//! Helpers for the integration tests, and the driver conformance suite.

pub mod conformance;
