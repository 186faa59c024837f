//! Model bytes → `Session::from_bytes` → seeded inputs → `Session::run`. Errors are fine; a panic, an
//! abort, running out of memory or a timeout is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quorum::{Session, SessionOptions};

const MAX_TENSOR_BYTES: u64 = 16 << 20;

fuzz_target!(|bytes: &[u8]| {
    let options = SessionOptions {
        max_tensor_bytes: MAX_TENSOR_BYTES,
        max_loop_iterations: 1000,
        ..SessionOptions::default()
    };
    let Ok(session) = Session::from_bytes(bytes, options) else {
        return;
    };
    let graph = &session.model().graph;
    let dims = &session.options().dims;
    if let Ok(inputs) = quorum::inputs::generate_within(graph, &[], dims, 0, MAX_TENSOR_BYTES) {
        let _ = session.run(inputs);
    }
});
