//! The on-device forms of the wgpu families beyond elementwise and movement (see `wgpu.rs`).
use crate::harness::Case;

pub fn on_device_cases() -> Vec<Case> {
    vec![]
}
