//! Normalizations on CUDA against both oracles: BatchNormalization (inference, opsets 6/9/15),
//! InstanceNormalization, LayerNormalization (every axis, Mean/InvStdDev outputs, optional bias,
//! broadcast scale), GroupNormalization (per-channel and per-group parameters), LRN (odd and even
//! sizes); rows long enough for the block layout, single-element rows, empty tensors.
use crate::harness::*;
use quorum::{DType, Tensor};

fn to_f16(t: &Tensor) -> Tensor {
    Tensor::from_f64s(DType::F16, t.shape(), t.to_f64_vec().unwrap()).unwrap()
}

#[test]
fn batch_norm_inference() {
    let shapes: &[&[usize]] = &[
        &[2, 3, 4, 5],
        &[1, 3],
        &[2, 5, 7],
        &[1, 2, 5000],
        &[0, 3, 2],
    ];
    for (s, shape) in shapes.iter().enumerate() {
        let c = shape[1];
        let seed = s as u64 * 10;
        for (opset, is_test) in [(15, false), (9, false), (6, true)] {
            let mut case = Case::new("BatchNormalization").opset(opset);
            if is_test {
                case = case.attr_i("is_test", 1);
            }
            if s % 2 == 1 {
                case = case.attr_f("epsilon", 1e-2);
            }
            case.input(rand_range(seed, shape, -4.0, 4.0))
                .constant(rand_f32(seed + 1, &[c]))
                .constant(rand_f32(seed + 2, &[c]))
                .constant(rand_f32(seed + 3, &[c]))
                .constant(rand_range(seed + 4, &[c], 0.1, 2.0))
                .check();
        }
    }
    // f16 data with f32 parameters (opset 15 allows mixed types).
    Case::new("BatchNormalization")
        .opset(15)
        .input(to_f16(&rand_f32(5, &[2, 3, 6])))
        .constant(rand_f32(6, &[3]))
        .constant(rand_f32(7, &[3]))
        .constant(rand_f32(8, &[3]))
        .constant(rand_range(9, &[3], 0.5, 1.5))
        .check();
}

#[test]
fn instance_norm() {
    let shapes: &[&[usize]] = &[
        &[2, 3, 4, 5],
        &[1, 2, 5000],
        &[3, 4, 7],
        &[2, 3, 1],
        &[1, 2, 300],
    ];
    for (s, shape) in shapes.iter().enumerate() {
        for opset in [6, 22] {
            let c = shape[1];
            Case::new("InstanceNormalization")
                .opset(opset)
                .attr_f("epsilon", if s % 2 == 0 { 1e-5 } else { 0.1 })
                .input(rand_range(s as u64, shape, -3.0, 5.0))
                .constant(rand_f32(s as u64 + 1, &[c]))
                .constant(rand_f32(s as u64 + 2, &[c]))
                .check();
        }
    }
}

#[test]
fn layer_norm_rows_held_in_registers() {
    // Transformer rows held in registers. Shared by a warp's lanes where there are rows enough to
    // fill the GPU (BERT at batch 8: 1024 rows of 768, 24 per lane; 600 of 1000, the most per lane
    // with a ragged tail), by a block's threads where there are few (ViT-S's 197 rows of 384, BERT at
    // batch 1's 128 of 768, 5 of 1000, 2 of 8000: 32 per thread, ragged), and short rows that leave
    // lanes of the last block without a row.
    for (i, shape) in [
        [1024usize, 768],
        [600, 1000],
        [197, 384],
        [128, 768],
        [5, 1000],
        [2, 8000],
        [3, 70],
    ]
    .iter()
    .enumerate()
    {
        let seed = 900 + 10 * i as u64;
        Case::new("LayerNormalization")
            .opset(17)
            .attr_i("axis", -1)
            .outputs(if i % 2 == 0 { 3 } else { 1 })
            .input(rand_range(seed, shape, -2.0, 3.0))
            .constant(rand_f32(seed + 1, &shape[1..]))
            .constant(rand_f32(seed + 2, &shape[1..]))
            .check();
    }
}

#[test]
fn layer_norm_every_axis_and_stats() {
    let shapes: &[&[usize]] = &[&[2, 3, 4, 5], &[4, 5000], &[300, 40], &[3, 1], &[7]];
    for (s, shape) in shapes.iter().enumerate() {
        let r = shape.len() as i64;
        for axis in -r..r {
            let a = axis.rem_euclid(r) as usize;
            let norm = &shape[a..];
            for (outs, bias) in [(1, true), (3, true), (3, false), (1, false)] {
                let seed = (s * 100) as u64 + a as u64 * 10 + outs as u64;
                let mut c = Case::new("LayerNormalization")
                    .opset(17)
                    .attr_i("axis", axis)
                    .outputs(outs)
                    .input(rand_range(seed, shape, -2.0, 3.0))
                    .constant(rand_f32(seed + 1, norm));
                if bias {
                    c = c.constant(rand_f32(seed + 2, norm));
                }
                c.check();
            }
        }
    }
    // Epsilon with broadcast scale and bias; f16 input with f32 statistics.
    Case::new("LayerNormalization")
        .opset(17)
        .attr_i("axis", -2)
        .attr_f("epsilon", 0.1)
        .outputs(3)
        .input(rand_f32(1, &[3, 4, 5]))
        .constant(rand_f32(2, &[5]))
        .constant(rand_f32(3, &[1, 5]))
        .check();
    Case::new("LayerNormalization")
        .opset(17)
        .attr_i("axis", 1)
        .input(rand_f32(4, &[3, 4, 5]))
        .constant(rand_f32(5, &[4, 1]))
        .constant(rand_f32(6, &[5]))
        .check();
    for half in [DType::F16, DType::BF16] {
        if bf16_off(half) {
            continue;
        }
        let h = |t: Tensor| Tensor::from_f64s(half, t.shape(), t.to_f64_vec().unwrap()).unwrap();
        let r = Case::new("LayerNormalization")
            .opset(17)
            .outputs(3)
            .input(h(rand_f32(7, &[6, 50])))
            .constant(h(rand_f32(8, &[50])))
            .constant(h(rand_f32(9, &[50])))
            .check();
        assert_eq!(dtype(&r.outputs[0]), half);
        assert_eq!(dtype(&r.outputs[1]), DType::F32);
    }
}

#[test]
fn group_norm() {
    let cases: &[(&[usize], i64)] = &[
        (&[2, 6, 4, 5], 2),
        (&[2, 6, 4, 5], 3),
        (&[2, 6, 4, 5], 6),
        (&[2, 6, 4, 5], 1),
        (&[1, 4, 2500], 2),
        (&[3, 4, 1], 4),
        (&[2, 8], 4),
    ];
    for (s, (shape, g)) in cases.iter().enumerate() {
        let c = shape[1];
        let seed = s as u64 * 10;
        // Opset 21: scale and bias per channel.
        Case::new("GroupNormalization")
            .opset(21)
            .attr_i("num_groups", *g)
            .input(rand_range(seed, shape, -2.0, 4.0))
            .constant(rand_f32(seed + 1, &[c]))
            .constant(rand_f32(seed + 2, &[c]))
            .check();
        // Opset 18: scale and bias per group.
        Case::new("GroupNormalization")
            .opset(18)
            .attr_i("num_groups", *g)
            .attr_f("epsilon", 1e-3)
            .input(rand_range(seed + 3, shape, -2.0, 4.0))
            .constant(rand_f32(seed + 4, &[*g as usize]))
            .constant(rand_f32(seed + 5, &[*g as usize]))
            .check();
    }
}

#[test]
fn lrn() {
    let shapes: &[&[usize]] = &[
        &[2, 5, 4, 4],
        &[1, 3, 7],
        &[1, 1, 5],
        &[2, 16, 9, 11],
        &[0, 3, 2],
    ];
    for (s, shape) in shapes.iter().enumerate() {
        for (z, size) in [1, 2, 3, 4, 5].into_iter().enumerate() {
            let mut c = Case::new("LRN").opset(13).attr_i("size", size);
            if z % 2 == 1 {
                c = c
                    .attr_f("alpha", 0.02)
                    .attr_f("beta", 0.5)
                    .attr_f("bias", 2.0);
            } else if z == 4 {
                // An exponent with no square-root form: the kernels' general power.
                c = c.attr_f("alpha", 0.3).attr_f("beta", 0.6);
            }
            c.input(rand_range((s * 10 + z) as u64, shape, -3.0, 3.0))
                .check();
        }
    }
}

/// Few long rows: statistics in chunks merged per row, then one thread per element.
#[test]
fn few_long_rows_in_chunks() {
    Case::new("GroupNormalization")
        .opset(21)
        .attr_i("num_groups", 32)
        .input(rand_range(1, &[1, 320, 32, 64], -2.0, 6.0))
        .constant(rand_f32(2, &[320]))
        .constant(rand_f32(3, &[320]))
        .check();
    Case::new("GroupNormalization")
        .opset(18)
        .attr_i("num_groups", 4)
        .input(rand_range(4, &[2, 8, 9000], 10.0, 11.0))
        .constant(rand_f32(5, &[4]))
        .constant(rand_f32(6, &[4]))
        .check();
    Case::new("InstanceNormalization")
        .opset(6)
        .input(rand_range(7, &[1, 4, 70000], -1.0, 3.0))
        .constant(rand_f32(8, &[4]))
        .constant(rand_f32(9, &[4]))
        .check();
    for outs in [1, 3] {
        Case::new("LayerNormalization")
            .opset(17)
            .attr_i("axis", 1)
            .outputs(outs)
            .input(rand_range(10, &[2, 100, 1001], 100.0, 101.0))
            .constant(rand_f32(11, &[100, 1001]))
            .constant(rand_f32(12, &[1001]))
            .check();
    }
    Case::new("LayerNormalization")
        .opset(17)
        .outputs(3)
        .input(to_f16(&rand_f32(13, &[3, 60000])))
        .constant(to_f16(&rand_f32(14, &[60000])))
        .check();
}
