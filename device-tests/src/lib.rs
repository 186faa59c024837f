//! Quorum's on-device suite lives in `tests/gpu/main.rs` (`cargo test -p quorum-device-tests`);
//! this library is empty.
#![forbid(unsafe_code)]
