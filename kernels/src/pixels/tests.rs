//! The pixel-vector convolution against the GEMM over the same patches, bit for bit (the same sums
//! in the same order, zeros where the patch is in the padding, the same epilogue), over column
//! strides 1 to 4, dilations, uneven paddings, rows of full, partial and single tiles, partial
//! panels of channels and every activation, split across threads and not; and deliberately broken
//! inputs (a read one column off, a weight one ulp off) that the comparison must catch.
use super::*;
use crate::Activation;
use crate::testing::{ConvCase as Case, first_difference, poisoned, rand, values};

/// Values past the output, which no path may write.
const TAIL: usize = 40;

/// `(pixels, gemm)` outputs with `TAIL` values past each, all poisoned first; the pixel path
/// reads the input with left pad `left` and weights `wd`.
fn run(
    case: &Case,
    (wd, left): (&[f32], usize),
    w: &[f32],
    x: &[f32],
    epi: &Epilogue,
    threads: Threads,
) -> (Vec<f32>, Vec<f32>) {
    let [oh, ow] = case.outs();
    let k = case.depth();
    let g = PixelConv {
        x,
        channels: case.c,
        ins: [case.h, case.w],
        kernel: case.kernel,
        strides: case.strides,
        dilations: case.dilations,
        pads: [case.pads[0], left],
        outs: [oh, ow],
    };
    let mut pixels = poisoned(case.m * oh * ow + TAIL);
    conv_pixels(
        &PackedA::new(Isa::Avx512, case.m, k, wd, k),
        &g,
        &mut pixels,
        epi,
        threads,
    );
    (values(pixels), case.gemm(w, x, epi, threads, TAIL))
}

const fn case(
    (c, h, w, m): (usize, usize, usize, usize),
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [usize; 4],
) -> Case {
    Case {
        c,
        h,
        w,
        m,
        kernel,
        strides,
        dilations,
        pads,
    }
}

const CASES: &[Case] = &[
    // A stem: 3×3 stride 2, rows of 38 (a tile of 32, then 6), 64 channels in eight panels.
    case((3, 13, 75, 64), [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    // Stride 1, rows of 70 (32, 32, 6); 20 channels: a partial third panel.
    case((3, 9, 70, 20), [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    // Dilation 2, rows of 40 (32 and 8).
    case((4, 11, 40, 16), [3, 3], [1, 1], [2, 2], [2, 2, 2, 2]),
    // Column stride 3, row stride 2, a 2×5 kernel, uneven pads; rows of 17 (17 > 16: two
    // vectors, the second of one lane).
    case((2, 12, 50, 9), [2, 5], [2, 3], [1, 1], [0, 2, 1, 0]),
    // 5×5 stride 2 (75 steps) to rows of exactly 32.
    case((3, 10, 64, 24), [5, 5], [2, 2], [1, 1], [2, 2, 1, 1]),
    // Patches of 4×4 at stride 4 (a vision transformer's embedding): rows of exactly 16.
    case((3, 8, 64, 8), [4, 4], [4, 4], [1, 1], [0, 0, 0, 0]),
    // A left pad wider than the stride: 7×7 stride 2 pad 3 (98 steps).
    case((2, 15, 41, 12), [7, 7], [2, 2], [1, 1], [3, 3, 3, 3]),
    // One output pixel; one row (1-D).
    case((5, 3, 3, 8), [3, 3], [1, 1], [1, 1], [0, 0, 0, 0]),
    case((6, 1, 45, 11), [1, 3], [1, 2], [1, 1], [0, 1, 0, 1]),
    // Rows of 33 (32 and one lane) in four bands of 8 rows: the split runs.
    case((3, 60, 66, 16), [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    // The deepest sum taken: 256 steps (the GEMM's first block).
    case((16, 6, 34, 8), [4, 4], [1, 1], [1, 1], [1, 1, 2, 2]),
    // Pointwise, the plane as one row of 7·7 = 49 pixels: read in place, no grid.
    case((40, 1, 49, 24), [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
];

#[test]
fn pixel_convolution_has_the_bits_of_the_gemm() {
    if !Isa::Avx512.is_supported() {
        return;
    }
    for (i, case) in CASES.iter().enumerate() {
        let k = case.depth();
        assert!(PixelConv::available(k, case.strides[1]), "{case:?}");
        let [oh, ow] = case.outs();
        let x = rand(1 + i as u64, case.c * case.h * case.w);
        let w = rand(100 + i as u64, case.m * k);
        let bias = rand(200 + i as u64, case.m);
        let residual = rand(300 + i as u64, case.m * oh * ow);
        let epilogues = [
            Epilogue::NONE,
            Epilogue {
                bias: Some(&bias),
                act: Activation::Relu,
                residual: None,
                col_bias: None,
            },
            Epilogue {
                bias: Some(&bias),
                act: Activation::LeakyRelu { alpha: 0.1 },
                residual: Some(&residual),
                col_bias: None,
            },
            Epilogue {
                bias: None,
                act: Activation::Clip { lo: -0.5, hi: 0.25 },
                residual: Some(&residual),
                col_bias: None,
            },
            // Activations computed over the stored rows.
            Epilogue {
                bias: Some(&bias),
                act: Activation::Silu,
                residual: None,
                col_bias: None,
            },
            Epilogue {
                bias: None,
                act: Activation::HardSwish,
                residual: Some(&residual),
                col_bias: None,
            },
        ];
        for epi in &epilogues {
            for threads in [Threads::Serial, Threads::Always] {
                let (pixels, gemm) = run(case, (&w, case.pads[1]), &w, &x, epi, threads);
                let n = case.m * oh * ow;
                assert!(
                    gemm[..n].iter().all(|v| !v.is_nan()),
                    "{case:?}: the GEMM left a value unwritten"
                );
                assert!(
                    pixels[n..].iter().all(|v| v.is_nan()),
                    "{case:?} {threads:?}: a value past the output was written"
                );
                if let Some((at, got, want)) = first_difference(&pixels, &gemm) {
                    panic!(
                        "{case:?} {threads:?} {:?}: output {at} is {got}, the GEMM's {want}",
                        epi.act
                    );
                }
            }
        }
    }
}

/// The comparison sees an input read one column off (the phase grid's mistake to fear), at a
/// column stride of 2, where the shifted column falls in the other phase.
#[test]
fn a_read_one_column_off_is_caught() {
    if !Isa::Avx512.is_supported() {
        return;
    }
    let case = CASES[0];
    let x = rand(7, case.c * case.h * case.w);
    let w = rand(8, case.m * case.depth());
    let (pixels, gemm) = run(&case, (&w, 0), &w, &x, &Epilogue::NONE, Threads::Serial);
    assert!(
        first_difference(&pixels, &gemm).is_some(),
        "a read one column off went unseen"
    );
}

/// The comparison sees one ulp of one weight: the last step of the last channel.
#[test]
fn a_weight_one_ulp_off_is_caught() {
    if !Isa::Avx512.is_supported() {
        return;
    }
    let case = CASES[1];
    let k = case.depth();
    let x = rand(9, case.c * case.h * case.w);
    let w = rand(10, case.m * k);
    let mut broken = w.clone();
    let last = case.m * k - 1;
    broken[last] = f32::from_bits(broken[last].to_bits() + 1);
    let (pixels, gemm) = run(
        &case,
        (&broken, case.pads[1]),
        &w,
        &x,
        &Epilogue::NONE,
        Threads::Serial,
    );
    assert!(
        first_difference(&pixels, &gemm).is_some(),
        "one ulp of a weight went unseen"
    );
}

#[test]
#[should_panic(expected = "at most 256 steps")]
fn a_deep_sum_is_refused() {
    if !Isa::Avx512.is_supported() {
        panic!("at most 256 steps (no AVX-512 here: the refusal is not reached)");
    }
    let x = vec![1f32; 6 * 8 * 8];
    let w = PackedA::new(Isa::Avx512, 8, 294, &vec![1f32; 8 * 294], 294);
    let g = PixelConv {
        x: &x,
        channels: 6,
        ins: [8, 8],
        kernel: [7, 7],
        strides: [1, 1],
        dilations: [1, 1],
        pads: [0, 0],
        outs: [2, 2],
    };
    let mut c = vec![MaybeUninit::new(0f32); 8 * 4];
    conv_pixels(&w, &g, &mut c, &Epilogue::NONE, Threads::Serial);
}
