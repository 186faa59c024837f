//! Arbitration lives in the oracle crate so that the runtime's shadow verification and the conformance
//! engines judge with the one same function; re-exported here for the conformance code.
pub use quorum_oracle::arbitrate::*;
