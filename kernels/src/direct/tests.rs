//! The direct convolution against the GEMM over the same patches, bit for bit (the same sums in
//! the same order and blocking, the same epilogue), over strides, dilations, paddings, tile widths,
//! partial panels and several blocks of the sum, split across threads and not; and a
//! deliberately broken weight that the comparison must catch.
use std::mem::MaybeUninit;

use super::*;
use crate::pack::{BSource, ConvPatches, PackedA};
use crate::testing::rand;
use crate::{Activation, sgemm_uninit};

/// One convolution: input `[c, h, w]`, `m` output channels, kernel, strides, dilations and pads
/// `[top, left, bottom, right]`.
#[derive(Debug, Clone, Copy)]
struct Case {
    c: usize,
    h: usize,
    w: usize,
    m: usize,
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [usize; 4],
}

impl Case {
    fn outs(&self) -> [usize; 2] {
        let o = |i: usize, len: usize, pad: usize| {
            (len + pad - (self.kernel[i] - 1) * self.dilations[i] - 1) / self.strides[i] + 1
        };
        [
            o(0, self.h, self.pads[0] + self.pads[2]),
            o(1, self.w, self.pads[1] + self.pads[3]),
        ]
    }

    /// The input with its padding, plane by plane.
    fn padded(&self, x: &[f32]) -> (Vec<f32>, usize, usize) {
        let (rows, cols) = (
            self.h + self.pads[0] + self.pads[2],
            self.w + self.pads[1] + self.pads[3],
        );
        let mut xp = vec![0f32; self.c * rows * cols];
        for ch in 0..self.c {
            for y in 0..self.h {
                let at = (ch * rows + y + self.pads[0]) * cols + self.pads[1];
                xp[at..at + self.w].copy_from_slice(&x[(ch * self.h + y) * self.w..][..self.w]);
            }
        }
        (xp, rows, cols)
    }

    /// `(direct, gemm)` outputs, both poisoned first; the direct path's weights are `wd`.
    fn run(
        &self,
        wd: &[f32],
        w: &[f32],
        x: &[f32],
        epi: &Epilogue,
        threads: Threads,
    ) -> (Vec<f32>, Vec<f32>) {
        let [oh, ow] = self.outs();
        let k = self.c * self.kernel[0] * self.kernel[1];
        let n = oh * ow;
        let poison = || vec![MaybeUninit::new(f32::NAN); self.m * n];
        let (xp, rows, cols) = self.padded(x);
        let g = DirectConv {
            x: &xp,
            channels: self.c,
            rows,
            cols,
            kernel: self.kernel,
            strides: self.strides,
            dilations: self.dilations,
            outs: [oh, ow],
        };
        let mut direct = poison();
        conv_direct(
            &PackedB::new(Isa::Avx512, k, self.m, wd, 1, k),
            &g,
            &mut direct,
            epi,
            threads,
        );
        let patches = ConvPatches {
            x,
            channels: self.c,
            ins: [1, self.h, self.w],
            kernel: [1, self.kernel[0], self.kernel[1]],
            strides: [1, self.strides[0], self.strides[1]],
            dilations: [1, self.dilations[0], self.dilations[1]],
            pads: [0, self.pads[0] as i64, self.pads[1] as i64],
            outs: [1, oh, ow],
        };
        let mut gemm = poison();
        let a = PackedA::new(Isa::Avx512, self.m, k, w, k);
        sgemm_uninit(&a, &BSource::Conv(patches), n, &mut gemm, n, epi, threads);
        // SAFETY: f32 values (NaN where a path wrote nothing).
        let bits =
            |v: Vec<MaybeUninit<f32>>| v.into_iter().map(|e| unsafe { e.assume_init() }).collect();
        (bits(direct), bits(gemm))
    }
}

fn first_difference(got: &[f32], want: &[f32]) -> Option<(usize, f32, f32)> {
    got.iter()
        .zip(want)
        .enumerate()
        .find(|(_, (g, w))| g.to_bits() != w.to_bits())
        .map(|(i, (g, w))| (i, *g, *w))
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
        ];
        for epi in &epilogues {
            for threads in [Threads::Serial, Threads::Always] {
                let (direct, gemm) = case.run(&w, &w, &x, epi, threads);
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
    let (direct, gemm) = case.run(&broken, &w, &x, &Epilogue::NONE, Threads::Serial);
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
