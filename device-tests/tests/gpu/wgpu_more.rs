//! The on-device forms of the wgpu families beyond elementwise and movement (see `wgpu.rs`).
use crate::harness::{Case, rand_f32, rand_range};

pub fn on_device_cases() -> Vec<Case> {
    let image = || rand_range(41, &[1, 6, 9, 8], -3.0, 3.0);
    vec![
        Case::new("LRN").attr_i("size", 3).input(image()),
        Case::new("LpPool")
            .opset(18)
            .attr_ints("kernel_shape", &[3, 2])
            .attr_i("p", 3)
            .input(image()),
        Case::new("Softmax")
            .opset(13)
            .input(rand_f32(42, &[3, 1000])),
    ]
}
