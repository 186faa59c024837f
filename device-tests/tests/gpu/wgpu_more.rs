//! The on-device forms of the wgpu families beyond elementwise and movement (see `wgpu.rs`).
use crate::harness::{Case, i64s, rand_f32, rand_range};

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
        Case::new("Resize")
            .opset(19)
            .attr_s("mode", "cubic")
            .input(image())
            .absent()
            .constant(quorum::Tensor::from_f32(&[4], vec![1.0, 1.0, 1.5, 0.75]).unwrap()),
        Case::new("Resize")
            .opset(19)
            .attr_s("mode", "nearest")
            .input(image())
            .absent()
            .absent()
            .constant(i64s(&[4], vec![1, 6, 13, 4])),
        Case::new("GatherElements")
            .attr_i("axis", 1)
            .input(image())
            .constant(i64s(&[1, 2, 9, 8], (0..144).map(|v| v % 6 - 3).collect())),
        Case::new("ScatterElements")
            .opset(18)
            .attr_i("axis", 0)
            .attr_s("reduction", "max")
            .input(rand_f32(43, &[5, 3]))
            .constant(i64s(&[4, 3], vec![0, 4, 2, 1, 1, 3, 4, 0, 0, 2, 2, 2]))
            .input(rand_f32(44, &[4, 3])),
        Case::new("Trilu")
            .attr_i("upper", 0)
            .input(rand_f32(45, &[2, 5, 7])),
    ]
}
