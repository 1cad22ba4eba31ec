//! The shared conformance suite.
