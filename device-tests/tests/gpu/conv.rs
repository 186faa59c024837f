//! On-device tests of the `conv` family: Conv through its three paths (pointwise GEMM, depthwise
//! direct, implicit GEMM incl. split-K and 128×128 tiles) over ranks, groups, strides, dilations,
//! pads and auto_pad; ConvTranspose through its gather kernel.
use quorum::{DType, Tensor};

use crate::harness::{Case, rand_f32};

fn f16(t: &Tensor) -> Tensor {
    Tensor::from_f64s(DType::F16, t.shape(), t.to_f64_vec().unwrap()).unwrap()
}

/// Attributes of one case: ints attributes, plus an optional auto_pad and group.
#[derive(Default, Clone)]
struct A {
    ints: Vec<(&'static str, Vec<i64>)>,
    auto_pad: Option<&'static str>,
    group: Option<i64>,
}

fn a() -> A {
    A::default()
}

impl A {
    fn i(mut self, name: &'static str, v: &[i64]) -> A {
        self.ints.push((name, v.to_vec()));
        self
    }
    fn pad(mut self, p: &'static str) -> A {
        self.auto_pad = Some(p);
        self
    }
    fn group(mut self, g: i64) -> A {
        self.group = Some(g);
        self
    }
}

fn case(op: &str, opset: i64, x: Tensor, w: Tensor, b: Option<Tensor>, at: &A) -> Case {
    let mut c = Case::new(op).opset(opset).input(x).constant(w);
    if let Some(b) = b {
        c = c.constant(b);
    }
    for (n, v) in &at.ints {
        c = c.attr_ints(n, v);
    }
    if let Some(p) = at.auto_pad {
        c = c.attr_s("auto_pad", p);
    }
    if let Some(g) = at.group {
        c = c.attr_i("group", g);
    }
    c
}

fn conv(xs: &[usize], ws: &[usize], bias: bool, at: A, seed: u64) {
    let b = bias.then(|| rand_f32(seed + 2, &[ws[0]]));
    case(
        "Conv",
        11,
        rand_f32(seed, xs),
        rand_f32(seed + 1, ws),
        b,
        &at,
    )
    .check();
}

#[test]
fn conv_batched_split_k() {
    // A batch of small late-layer maps (resnet50 at batch 8 shape, scaled down): few tiles, long K,
    // so K is split with the batch in one grid; bias through the split reduction; groups as a
    // second batch dim.
    conv(
        &[4, 64, 7, 7],
        &[128, 64, 3, 3],
        true,
        a().i("pads", &[1, 1, 1, 1]),
        95,
    );
    conv(
        &[3, 128, 5, 5],
        &[64, 64, 3, 3],
        true,
        a().i("pads", &[1, 1, 1, 1]).group(2),
        96,
    );
}

#[test]
fn conv_2d_pads_strides_dilations() {
    conv(&[1, 1, 5, 5], &[1, 1, 3, 3], false, a(), 1);
    conv(
        &[1, 1, 5, 5],
        &[1, 1, 3, 3],
        false,
        a().i("pads", &[1, 1, 1, 1]),
        2,
    );
    conv(
        &[1, 1, 7, 5],
        &[1, 1, 3, 3],
        false,
        a().i("strides", &[2, 2]).i("pads", &[1, 0, 1, 0]),
        3,
    );
    conv(
        &[2, 3, 9, 8],
        &[4, 3, 3, 2],
        true,
        a().i("pads", &[0, 1, 2, 1]).i("strides", &[2, 1]),
        4,
    );
    conv(
        &[2, 3, 11, 10],
        &[5, 3, 3, 3],
        true,
        a().i("dilations", &[2, 3]).i("pads", &[2, 1, 0, 3]),
        5,
    );
    conv(
        &[1, 2, 12, 13],
        &[3, 2, 2, 4],
        false,
        a().i("dilations", &[2, 1]).i("strides", &[3, 2]),
        6,
    );
    // kernel_shape given explicitly.
    conv(
        &[1, 3, 6, 6],
        &[2, 3, 3, 3],
        true,
        a().i("kernel_shape", &[3, 3]).i("pads", &[1, 1, 1, 1]),
        7,
    );
}

#[test]
fn conv_auto_pad_modes() {
    let mut seed = 20;
    for p in ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"] {
        for (ks, st) in [(3usize, 1i64), (3, 2), (2, 1), (4, 3)] {
            conv(
                &[1, 2, 7, 8],
                &[3, 2, ks, ks],
                true,
                a().pad(p).i("strides", &[st, st]),
                seed,
            );
            seed += 3;
        }
    }
}

#[test]
fn conv_groups_and_depthwise() {
    // Grouped implicit GEMM.
    conv(
        &[2, 4, 7, 6],
        &[4, 2, 3, 2],
        true,
        a().group(2)
            .i("strides", &[2, 2])
            .i("dilations", &[2, 1])
            .i("pads", &[1, 0, 2, 1]),
        40,
    );
    conv(&[1, 6, 9, 9], &[9, 2, 3, 3], false, a().group(3), 41);
    // Depthwise, multiplier 1 and 2, with strides, pads and dilations.
    conv(
        &[2, 4, 9, 9],
        &[4, 1, 3, 3],
        true,
        a().group(4).i("pads", &[1, 1, 1, 1]),
        42,
    );
    conv(
        &[1, 4, 10, 11],
        &[8, 1, 3, 3],
        false,
        a().group(4).i("strides", &[2, 2]).i("pads", &[1, 0, 1, 2]),
        43,
    );
    conv(
        &[1, 3, 12, 12],
        &[3, 1, 5, 5],
        true,
        a().group(3).i("dilations", &[2, 2]).pad("SAME_UPPER"),
        44,
    );
    // Depthwise 1-D.
    conv(
        &[2, 5, 20],
        &[5, 1, 4],
        true,
        a().group(5).pad("SAME_LOWER"),
        45,
    );
}

#[test]
fn conv_pointwise() {
    conv(&[1, 16, 9, 9], &[8, 16, 1, 1], true, a(), 50);
    conv(&[2, 8, 5, 5], &[6, 4, 1, 1], false, a().group(2), 51);
    conv(&[3, 12, 7], &[20, 12, 1], true, a(), 52); // 1-D
    // 1×1 with a stride or pads is not pointwise: implicit GEMM.
    conv(
        &[1, 8, 9, 9],
        &[4, 8, 1, 1],
        true,
        a().i("strides", &[2, 2]),
        53,
    );
    conv(
        &[1, 8, 5, 5],
        &[4, 8, 1, 1],
        false,
        a().i("pads", &[1, 0, 0, 1]),
        54,
    );
}

#[test]
fn conv_1d_and_3d() {
    conv(
        &[2, 3, 17],
        &[4, 3, 5],
        true,
        a().i("strides", &[2])
            .i("pads", &[2, 1])
            .i("dilations", &[2]),
        60,
    );
    conv(&[1, 1, 30], &[2, 1, 30], false, a(), 61);
    conv(
        &[1, 2, 5, 6, 7],
        &[3, 2, 3, 2, 3],
        true,
        a().i("pads", &[1, 0, 1, 1, 1, 0]).i("strides", &[1, 2, 1]),
        62,
    );
    conv(
        &[2, 4, 6, 5, 4],
        &[4, 2, 2, 3, 2],
        false,
        a().group(2).i("dilations", &[2, 1, 1]).pad("SAME_UPPER"),
        63,
    );
    conv(
        &[1, 3, 4, 4, 4],
        &[3, 1, 3, 3, 3],
        false,
        a().group(3).pad("VALID"),
        64,
    );
}

#[test]
fn conv_larger_shapes() {
    // A ResNet-like 3×3 layer.
    conv(
        &[1, 32, 28, 28],
        &[64, 32, 3, 3],
        true,
        a().i("pads", &[1, 1, 1, 1]),
        70,
    );
    // Small output, long K: split along K.
    conv(
        &[1, 256, 7, 7],
        &[64, 256, 3, 3],
        true,
        a().i("pads", &[1, 1, 1, 1]),
        71,
    );
    // Enough 128×128 tiles for the big-tile kernel, K = 18 (not a multiple of 8).
    conv(
        &[4, 2, 64, 64],
        &[132, 2, 3, 3],
        true,
        a().pad("SAME_LOWER"),
        72,
    );
    // A stem-like 7×7 stride-2 layer.
    conv(
        &[1, 3, 45, 47],
        &[16, 3, 7, 7],
        true,
        a().i("strides", &[2, 2]).i("pads", &[3, 3, 3, 3]),
        73,
    );
}

#[rstest::rstest]
fn conv_empty_batch_and_halves(#[values(DType::F16, DType::BF16)] half: DType) {
    if crate::harness::bf16_off(half) {
        return;
    }
    let f16 = |t: &Tensor| Tensor::from_f64s(half, t.shape(), t.to_f64_vec().unwrap()).unwrap();
    conv(&[0, 3, 5, 5], &[2, 3, 3, 3], true, a(), 80);
    for (xs, ws, at) in [
        (
            vec![2usize, 3, 9, 8],
            vec![4usize, 3, 3, 2],
            a().i("pads", &[1, 0, 1, 1]),
        ),
        (
            vec![1, 4, 8, 8],
            vec![4, 1, 3, 3],
            a().group(4).pad("SAME_UPPER"),
        ),
        (vec![1, 8, 6, 6], vec![4, 8, 1, 1], a()),
        (vec![1, 2, 17], vec![3, 2, 4], a().i("strides", &[2])),
    ] {
        let b = f16(&rand_f32(83, &[ws[0]]));
        case(
            "Conv",
            11,
            f16(&rand_f32(81, &xs)),
            f16(&rand_f32(82, &ws)),
            Some(b),
            &at,
        )
        .check();
    }
}

fn convt(xs: &[usize], ws: &[usize], bias: bool, at: A, seed: u64) {
    let m = ws[1] * at.group.unwrap_or(1) as usize;
    let b = bias.then(|| rand_f32(seed + 2, &[m]));
    case(
        "ConvTranspose",
        11,
        rand_f32(seed, xs),
        rand_f32(seed + 1, ws),
        b,
        &at,
    )
    .check();
}

#[test]
fn conv_transpose_forms() {
    convt(&[1, 1, 3, 3], &[1, 2, 3, 3], false, a(), 100);
    convt(&[1, 1, 3], &[1, 2, 3], false, a(), 101); // 1-D
    convt(&[1, 1, 3, 4, 5], &[1, 2, 3, 3, 3], true, a(), 102); // 3-D
    convt(
        &[1, 1, 3, 3],
        &[1, 2, 3, 3],
        false,
        a().i("strides", &[3, 2]).i("output_shape", &[10, 8]),
        103,
    );
    convt(
        &[1, 1, 3, 3],
        &[1, 2, 3, 3],
        false,
        a().i("strides", &[3, 2]).i("output_padding", &[1, 1]),
        104,
    );
    convt(
        &[1, 1, 3, 3],
        &[1, 2, 3, 3],
        true,
        a().i("strides", &[3, 2]).i("pads", &[1, 2, 1, 2]),
        105,
    );
    convt(
        &[1, 1, 3, 3],
        &[1, 2, 3, 3],
        false,
        a().i("strides", &[2, 2]).pad("SAME_UPPER"),
        106,
    );
    convt(
        &[1, 1, 3, 3],
        &[1, 2, 3, 3],
        false,
        a().i("strides", &[2, 2]).pad("SAME_LOWER"),
        107,
    );
    convt(
        &[1, 1, 3, 3],
        &[1, 1, 2, 2],
        false,
        a().i("dilations", &[2, 2]),
        108,
    );
    convt(&[1, 2, 3, 3], &[2, 1, 3, 3], true, a().group(2), 109);
    convt(
        &[2, 6, 4, 5],
        &[6, 2, 3, 2],
        true,
        a().group(3).i("strides", &[2, 3]),
        110,
    );
    convt(
        &[1, 1, 3, 3],
        &[1, 2, 3, 3],
        false,
        a().i("kernel_shape", &[3, 3])
            .i("strides", &[3, 2])
            .i("output_padding", &[1, 1]),
        111,
    );
    convt(
        &[2, 3, 5, 4],
        &[3, 4, 4, 3],
        true,
        a().i("strides", &[2, 2])
            .i("dilations", &[1, 2])
            .i("pads", &[1, 0, 2, 1]),
        112,
    );
    // Larger: a decoder-like upsampling layer.
    convt(
        &[1, 16, 12, 12],
        &[16, 8, 4, 4],
        true,
        a().i("strides", &[2, 2]).i("pads", &[1, 1, 1, 1]),
        113,
    );
    // f16.
    let m = 2;
    case(
        "ConvTranspose",
        11,
        f16(&rand_f32(120, &[1, 2, 4, 4])),
        f16(&rand_f32(121, &[2, m, 3, 3])),
        Some(f16(&rand_f32(122, &[m]))),
        &a().i("strides", &[2, 2]),
    )
    .check();
}
