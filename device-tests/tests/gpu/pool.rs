//! Pooling on CUDA against both oracles: MaxPool (strides, pads, dilations, ceil_mode, auto_pad,
//! storage_order, the Indices output), AveragePool (count_include_pad, ceil_mode, dilations from
//! opset 19), LpPool (p = 1, 2, 3), over 1-D, 2-D and 3-D inputs; GlobalAveragePool and
//! GlobalMaxPool over short and long planes.
use crate::harness::*;
use quorum::ir::Attr;
use quorum::{DType, Tensor};

/// Window attribute sets: (spatial rank, attributes).
fn windows() -> Vec<(usize, Vec<(&'static str, Attr)>)> {
    let ints = |v: &[i64]| Attr::Ints(v.to_vec());
    let s = |v: &str| Attr::String(v.as_bytes().to_vec());
    vec![
        (2, vec![("kernel_shape", ints(&[3, 3]))]),
        (
            2,
            vec![
                ("kernel_shape", ints(&[3, 2])),
                ("strides", ints(&[2, 3])),
                ("pads", ints(&[1, 0, 1, 1])),
            ],
        ),
        (
            2,
            vec![
                ("kernel_shape", ints(&[2, 3])),
                ("strides", ints(&[2, 2])),
                ("ceil_mode", Attr::Int(1)),
            ],
        ),
        (
            2,
            vec![
                ("kernel_shape", ints(&[3, 3])),
                ("strides", ints(&[2, 1])),
                ("auto_pad", s("SAME_UPPER")),
            ],
        ),
        (
            2,
            vec![
                ("kernel_shape", ints(&[2, 4])),
                ("strides", ints(&[3, 2])),
                ("auto_pad", s("SAME_LOWER")),
            ],
        ),
        (
            2,
            vec![
                ("kernel_shape", ints(&[2, 2])),
                ("auto_pad", s("VALID")),
                ("strides", ints(&[2, 2])),
            ],
        ),
        (
            1,
            vec![
                ("kernel_shape", ints(&[4])),
                ("strides", ints(&[3])),
                ("pads", ints(&[2, 1])),
            ],
        ),
        (
            3,
            vec![
                ("kernel_shape", ints(&[2, 3, 2])),
                ("strides", ints(&[2, 1, 2])),
                ("pads", ints(&[1, 1, 0, 0, 1, 1])),
            ],
        ),
    ]
}

fn input(seed: u64, rank: usize) -> Tensor {
    match rank {
        1 => rand_f32(seed, &[2, 3, 17]),
        2 => rand_f32(seed, &[2, 3, 9, 11]),
        _ => rand_f32(seed, &[1, 2, 5, 6, 7]),
    }
}

fn case(op: &str, opset: i64, attrs: &[(&str, Attr)], x: Tensor) -> Case {
    let mut c = Case::new(op).opset(opset).input(x);
    for (n, a) in attrs {
        c = c.attr(n, a.clone());
    }
    c
}

#[test]
fn max_pool_windows_and_indices() {
    for (w, (rank, attrs)) in windows().into_iter().enumerate() {
        let x = input(w as u64, rank);
        case("MaxPool", 12, &attrs, x.clone()).check();
        let r = case("MaxPool", 12, &attrs, x.clone()).outputs(2).check();
        assert_eq!(dtype(&r.outputs[1]), DType::I64);
        case("MaxPool", 12, &attrs, x.clone())
            .attr_i("storage_order", 1)
            .outputs(2)
            .check();
        // Dilations (opset 10+).
        let mut dil = attrs.clone();
        dil.retain(|(n, _)| *n != "auto_pad");
        dil.push(("dilations", Attr::Ints(vec![2; rank])));
        case("MaxPool", 12, &dil, x).outputs(2).check();
    }
    // Opset 8 (no dilations, no ceil_mode) and a tiny plane.
    Case::new("MaxPool")
        .opset(8)
        .attr_ints("kernel_shape", &[2, 2])
        .input(rand_f32(40, &[1, 1, 2, 2]))
        .outputs(2)
        .check();
}

#[test]
fn average_pool_windows() {
    for (w, (rank, attrs)) in windows().into_iter().enumerate() {
        let x = input(100 + w as u64, rank);
        case("AveragePool", 11, &attrs, x.clone()).check();
        case("AveragePool", 11, &attrs, x.clone())
            .attr_i("count_include_pad", 1)
            .check();
        // Dilations from opset 19.
        let mut dil = attrs.clone();
        dil.retain(|(n, _)| *n != "auto_pad");
        dil.push(("dilations", Attr::Ints(vec![2; rank])));
        case("AveragePool", 19, &dil, x.clone()).check();
        case("AveragePool", 19, &dil, x)
            .attr_i("count_include_pad", 1)
            .check();
    }
}

#[test]
fn lp_pool() {
    for (w, (rank, attrs)) in windows().into_iter().enumerate() {
        if attrs.iter().any(|(n, _)| *n == "ceil_mode") {
            continue;
        }
        for p in [1, 2, 3] {
            let x = input(200 + w as u64 * 3 + p as u64, rank);
            case("LpPool", 18, &attrs, x).attr_i("p", p).check();
        }
    }
}

#[test]
fn global_pools() {
    let shapes: &[&[usize]] = &[
        &[2, 3, 4, 5],
        &[1, 2, 5000],
        &[2, 3, 7],
        &[1, 1, 1, 1],
        &[2, 300, 3, 3],
    ];
    for (s, shape) in shapes.iter().enumerate() {
        for op in ["GlobalAveragePool", "GlobalMaxPool"] {
            Case::new(op)
                .opset(1)
                .input(rand_f32(s as u64, shape))
                .check();
        }
    }
    let x = Tensor::from_f64s(
        DType::F16,
        &[2, 3, 40],
        rand_f32(9, &[2, 3, 40]).to_f64_vec().unwrap(),
    )
    .unwrap();
    Case::new("GlobalMaxPool").input(x.clone()).check();
    Case::new("GlobalAveragePool").input(x).check();
}

#[rstest::rstest]
fn pools_on_halves(#[values(DType::F16, DType::BF16)] half: DType) {
    if crate::harness::bf16_off(half) {
        return;
    }
    let x = Tensor::from_f64s(
        half,
        &[2, 3, 9, 11],
        rand_f32(7, &[2, 3, 9, 11]).to_f64_vec().unwrap(),
    )
    .unwrap();
    for op in ["MaxPool", "AveragePool"] {
        let r = Case::new(op)
            .opset(12)
            .attr_ints("kernel_shape", &[3, 3])
            .attr_ints("pads", &[1, 1, 1, 1])
            .input(x.clone())
            .check();
        assert_eq!(dtype(&r.outputs[0]), half);
    }
}

/// NaN in a window: the max is NaN and the index the first NaN's (the settled rule, as ReduceMax
/// and GlobalMaxPool); a window entirely in the padding: -inf with index -1.
#[test]
fn max_pool_nan_and_all_padding_windows() {
    let x = rand_f32(50, &[2, 3, 9, 11]);
    let mut v: Vec<f32> = x.to_f64_vec().unwrap().iter().map(|&a| a as f32).collect();
    for i in (0..v.len()).step_by(7) {
        v[i] = f32::NAN;
    }
    let x = Tensor::from_f32(&[2, 3, 9, 11], v).unwrap();
    for (_, attrs) in windows().into_iter().filter(|(r, _)| *r == 2) {
        case("MaxPool", 12, &attrs, x.clone()).outputs(2).check();
    }
    Case::new("GlobalMaxPool").input(x.clone()).check();
    // A 1×1 kernel with padding 1: the border windows hold no input element.
    for storage_order in [0, 1] {
        Case::new("MaxPool")
            .opset(12)
            .attr_ints("kernel_shape", &[1, 1])
            .attr_ints("pads", &[1, 1, 1, 1])
            .attr_i("storage_order", storage_order)
            .input(rand_f32(51, &[1, 2, 4, 5]))
            .outputs(2)
            .check();
    }
}
