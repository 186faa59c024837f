//! The direct convolution against the GEMM over the same patches, bit for bit (the same sums in
//! the same order and blocking, the same epilogue), over strides, dilations, paddings, tile widths,
//! partial panels and several blocks of the sum, split across threads and not; and a
//! deliberately broken weight that the comparison must catch.
use super::*;
use crate::Activation;
use crate::testing::{ConvCase as Case, first_difference, poisoned, rand, values};

/// The input with its padding, plane by plane.
fn padded(case: &Case, x: &[f32]) -> (Vec<f32>, usize, usize) {
    let (rows, cols) = (
        case.h + case.pads[0] + case.pads[2],
        case.w + case.pads[1] + case.pads[3],
    );
    let mut xp = vec![0f32; case.c * rows * cols];
    for ch in 0..case.c {
        for y in 0..case.h {
            let at = (ch * rows + y + case.pads[0]) * cols + case.pads[1];
            xp[at..at + case.w].copy_from_slice(&x[(ch * case.h + y) * case.w..][..case.w]);
        }
    }
    (xp, rows, cols)
}

/// `(direct, gemm)` outputs, both poisoned first; the direct path's weights are `wd`.
fn run(
    case: &Case,
    wd: &[f32],
    w: &[f32],
    x: &[f32],
    epi: &Epilogue,
    threads: Threads,
) -> (Vec<f32>, Vec<f32>) {
    let [oh, ow] = case.outs();
    let k = case.depth();
    let (xp, rows, cols) = padded(case, x);
    let g = DirectConv {
        x: &xp,
        channels: case.c,
        rows,
        cols,
        kernel: case.kernel,
        strides: case.strides,
        dilations: case.dilations,
        outs: [oh, ow],
    };
    let mut direct = poisoned(case.m * oh * ow);
    conv_direct(
        &PackedB::new(Isa::Avx512, k, case.m, wd, 1, k),
        &g,
        &mut direct,
        epi,
        threads,
    );
    (values(direct), case.gemm(w, x, epi, threads, 0))
}

const CASES: &[Case] = &[
    // Rows of 7 (resnet's last stage), two to a tile; 630 steps: four blocks of the sum.
    Case {
        c: 70,
        h: 7,
        w: 7,
        m: 32,
        kernel: [3, 3],
        strides: [1, 1],
        dilations: [1, 1],
        pads: [1, 1, 1, 1],
    },
    // Stride 2 to rows of 5: two to a tile, an odd row alone at each band's end.
    Case {
        c: 40,
        h: 10,
        w: 10,
        m: 40,
        kernel: [3, 3],
        strides: [2, 2],
        dilations: [1, 1],
        pads: [1, 1, 1, 1],
    },
    // 3x3 stride 1, padded; a partial second panel of channels.
    Case {
        c: 3,
        h: 9,
        w: 9,
        m: 40,
        kernel: [3, 3],
        strides: [1, 1],
        dilations: [1, 1],
        pads: [1, 1, 1, 1],
    },
    // 630 steps: four blocks of the sum; rows of 23 in tiles of 12 and 11.
    Case {
        c: 70,
        h: 5,
        w: 23,
        m: 32,
        kernel: [3, 3],
        strides: [1, 1],
        dilations: [1, 1],
        pads: [1, 1, 1, 1],
    },
    // Stride 2 both ways.
    Case {
        c: 5,
        h: 17,
        w: 17,
        m: 33,
        kernel: [3, 3],
        strides: [2, 2],
        dilations: [1, 1],
        pads: [1, 1, 1, 1],
    },
    // Pointwise over 200 channels, rows of 30 in tiles of 10.
    Case {
        c: 200,
        h: 4,
        w: 30,
        m: 64,
        kernel: [1, 1],
        strides: [1, 1],
        dilations: [1, 1],
        pads: [0, 0, 0, 0],
    },
    // A 7x7 stride-2 stem, fewer channels than a panel.
    Case {
        c: 3,
        h: 20,
        w: 20,
        m: 16,
        kernel: [7, 7],
        strides: [2, 2],
        dilations: [1, 1],
        pads: [3, 3, 3, 3],
    },
    // Dilation 2.
    Case {
        c: 4,
        h: 11,
        w: 11,
        m: 32,
        kernel: [3, 3],
        strides: [1, 1],
        dilations: [2, 2],
        pads: [2, 2, 2, 2],
    },
    // One output column, uneven pads, a 2x3 kernel, strides (2, 1).
    Case {
        c: 6,
        h: 7,
        w: 3,
        m: 35,
        kernel: [2, 3],
        strides: [2, 1],
        dilations: [1, 1],
        pads: [0, 1, 1, 0],
    },
    // A 1x7 kernel on 15-wide rows (tiles of 8 and 7), 96 channels in three panels.
    Case {
        c: 8,
        h: 3,
        w: 15,
        m: 96,
        kernel: [1, 7],
        strides: [1, 1],
        dilations: [1, 1],
        pads: [0, 3, 0, 3],
    },
    // 7-wide rows in pairs (and the odd last row alone), at strides 1 and 2, two blocks of the sum.
    Case {
        c: 40,
        h: 7,
        w: 7,
        m: 64,
        kernel: [3, 3],
        strides: [1, 1],
        dilations: [1, 1],
        pads: [1, 1, 1, 1],
    },
    Case {
        c: 3,
        h: 14,
        w: 14,
        m: 32,
        kernel: [3, 3],
        strides: [2, 2],
        dilations: [1, 1],
        pads: [1, 1, 1, 1],
    },
    // Rows of 57 (tiles of 12, 12, 11, 11, 11 after rounding: five tiles).
    Case {
        c: 2,
        h: 2,
        w: 57,
        m: 32,
        kernel: [1, 3],
        strides: [1, 2],
        dilations: [1, 1],
        pads: [0, 1, 0, 1],
    },
];

#[test]
fn direct_convolution_has_the_bits_of_the_gemm() {
    if !DirectConv::available([1, 1]) {
        return;
    }
    for (i, case) in CASES.iter().enumerate() {
        let k = case.c * case.kernel[0] * case.kernel[1];
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
                act: Activation::Silu,
                residual: Some(&residual),
                col_bias: None,
            },
            Epilogue {
                bias: Some(&bias),
                act: Activation::HardSwish,
                residual: Some(&residual),
                col_bias: None,
            },
        ];
        for epi in &epilogues {
            for threads in [Threads::Serial, Threads::Always] {
                let (direct, gemm) = run(case, &w, &w, &x, epi, threads);
                assert!(
                    gemm.iter().all(|v| !v.is_nan()),
                    "{case:?}: the GEMM left a value unwritten"
                );
                if let Some((at, got, want)) = first_difference(&direct, &gemm) {
                    panic!("{case:?} {threads:?}: output {at} is {got}, the GEMM's {want}");
                }
            }
        }
    }
}

/// The comparison above sees one ulp of one weight: the last step of the last channel, whose
/// product reaches every output of that channel.
#[test]
fn a_weight_one_ulp_off_is_caught() {
    if !DirectConv::available([1, 1]) {
        return;
    }
    let case = CASES[1];
    let k = case.c * case.kernel[0] * case.kernel[1];
    let x = rand(7, case.c * case.h * case.w);
    let w = rand(8, case.m * k);
    let mut broken = w.clone();
    let last = case.m * k - 1;
    broken[last] = f32::from_bits(broken[last].to_bits() + 1);
    let (direct, gemm) = run(&case, &broken, &w, &x, &Epilogue::NONE, Threads::Serial);
    assert!(
        first_difference(&direct, &gemm).is_some(),
        "one ulp of a weight went unseen"
    );
}

#[test]
#[should_panic(expected = "do not fit")]
fn reads_past_the_input_are_refused() {
    if !DirectConv::available([1, 1]) {
        panic!("do not fit (no AVX-512 here: the refusal is not reached)");
    }
    let x = vec![1f32; 2 * 4 * 4];
    let w = PackedB::new(Isa::Avx512, 2 * 9, 32, &vec![1f32; 2 * 9 * 32], 1, 18);
    let g = DirectConv {
        x: &x,
        channels: 2,
        rows: 4,
        cols: 4,
        kernel: [3, 3],
        strides: [1, 1],
        dilations: [1, 1],
        // Three outputs per row need 5 columns.
        outs: [2, 3],
    };
    let mut c = vec![MaybeUninit::new(0f32); 32 * 6];
    conv_direct(&w, &g, &mut c, &Epilogue::NONE, Threads::Serial);
}

#[test]
fn bands_divide_among_the_threads() {
    // densenet121's 128 -> 32 3x3 convolutions (one panel): at 14² two bands of 7 rows, not 5, 5
    // and 4 (ten rows on one thread); at 7² two of 4 and 3; at 56² the bands of 64 outputs stay.
    assert_eq!(band_rows(14, 14, 1, 2), 7);
    assert_eq!(band_rows(7, 7, 1, 2), 4);
    assert_eq!(band_rows(56, 56, 1, 2), 2);
    // One thread keeps the bands of 64 outputs.
    assert_eq!(band_rows(14, 14, 1, 1), 5);
    // Never a busier thread than the bands of 64 outputs gave, and never below half their rows:
    // the check refuses a broken choice, the whole height as one band (one thread busy, 14 rows
    // against 10).
    let load14 = |b: usize| 14usize.div_ceil(b).div_ceil(2) * b;
    assert!(load14(14) > load14(5));
    for oh in 1..60 {
        for panels in 1..10 {
            for workers in 2..5 {
                let base = 64usize.div_ceil(oh).clamp(1, oh);
                let load = |b: usize| (panels * oh.div_ceil(b)).div_ceil(workers) * b;
                let b = band_rows(oh, oh, panels, workers);
                assert!(
                    (base.div_ceil(2)..=oh).contains(&b) && load(b) <= load(base),
                    "{oh}² with {panels} panels on {workers} threads: band {b} of base {base}"
                );
            }
        }
    }
}
