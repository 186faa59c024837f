//! The depthwise plane kernel against the tap-by-tap loop bit for bit (every activation, NaN
//! inputs, flat rows and rows, stride phases), the window max against MaxPool's rule, and the
//! phase split; each with a broken variant the comparison must catch (a reversed tap order, a flat
//! row forced where the layout does not allow it, the last of equal taps taken).
use super::*;
use crate::testing::{ACTIVATIONS, rand};

/// Taps of a 2-D depthwise kernel over an `h×w` plane (no phases: stride 1 along columns),
/// built like the runtime builds them.
fn taps_2d((h, w): (usize, usize), k: usize, (s, pad): (usize, usize)) -> (Taps, [usize; 3]) {
    let oh = (h + 2 * pad - k) / s + 1;
    let ow = w + 2 * pad - k + 1;
    let span = |count: usize, s: usize, off: isize, bound: usize| {
        let lo = (0..count)
            .find(|&t| (t * s) as isize + off >= 0)
            .unwrap_or(count);
        let hi = (0..count)
            .rev()
            .find(|&t| ((t * s) as isize + off) < bound as isize)
            .map_or(0, |t| t + 1);
        (lo, hi.max(lo))
    };
    let mut taps = Vec::new();
    for a in 0..k {
        for b in 0..k {
            let (offh, offw) = (a as isize - pad as isize, b as isize - pad as isize);
            taps.push(Tap {
                k: a * k + b,
                rows: [(0, 1), span(oh, s, offh, h)],
                cols: span(ow, 1, offw, w),
                base: offh * w as isize + offw,
                step: [0, (s * w) as isize],
            });
        }
    }
    let outs = [1, oh, ow];
    (Taps::new(taps, outs, h * w, k * k), outs)
}

/// The values of a plane's output (poisoned with NaN before the run, so always initialised).
fn values(v: &[MaybeUninit<f32>]) -> Vec<f32> {
    // SAFETY: every element was made by `MaybeUninit::new`.
    v.iter().map(|v| unsafe { v.assume_init() }).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    // Any NaN is one NaN: vector code may take a NaN's payload from either operand.
    v.iter()
        .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
        .collect()
}

/// The dispatched plane (AVX-512 where this CPU has it) equals the tap-by-tap loop from the
/// same starting value bit for bit, activation included, over row widths around the chunk
/// sizes; a sum in another order must differ.
#[test]
fn plane_equals_the_tap_order_loop() {
    for (n, &(h, w, k, s, pad)) in [
        (5, 7, 3, 1, 1),
        (6, 14, 3, 1, 1),
        (4, 16, 3, 1, 0),
        (5, 17, 5, 1, 2),
        (6, 33, 3, 2, 1),
        (3, 70, 5, 1, 2),
        (4, 112, 3, 1, 1),
        (3, 130, 3, 1, 0),
    ]
    .iter()
    .enumerate()
    {
        let (taps, [o0, o1, o2]) = taps_2d((h, w), k, (s, pad));
        let mut src = rand(n as u64, h * w);
        src[(n * 7) % (h * w)] = f32::NAN;
        let wt = rand(100 + n as u64, k * k);
        let start = rand(200 + n as u64, 1)[0];
        for act in ACTIVATIONS {
            let mut got = vec![MaybeUninit::new(f32::NAN); o0 * o1 * o2];
            plane(&taps, &src, &wt, start, act, &mut got);
            let got = values(&got);
            let mut want = vec![start; o0 * o1 * o2];
            plain(&taps, &src, &wt, act, &mut want);
            assert_eq!(bits(&got), bits(&want), "case {n}, {act:?}");
            let mut rev = taps.clone();
            rev.taps.reverse();
            let rev = Taps::new(rev.taps, rev.outs, h * w, k * k);
            let mut other = vec![MaybeUninit::new(f32::NAN); o0 * o1 * o2];
            plane(&rev, &src, &wt, start, act, &mut other);
            let other = values(&other);
            assert_ne!(
                bits(&got),
                bits(&other),
                "case {n}, {act:?}: the tap order went unseen"
            );
        }
    }
}

/// Planes padded to their own size with rows under 32 run as one flat row; the sums stay
/// those of the tap-by-tap loop (the test above), and a flat row over a layout where a tap
/// steps a source row that is not an output row must be caught by that comparison.
#[test]
fn narrow_planes_run_flat_and_only_where_the_layout_allows() {
    let flat = |t: &Taps| t.lanes.flat.is_some();
    assert!(flat(&taps_2d((5, 7), 3, (1, 1)).0));
    assert!(flat(&taps_2d((5, 17), 5, (1, 2)).0));
    // Unpadded (rows of 14 read rows of 16), strided, or wide: by rows.
    assert!(!flat(&taps_2d((4, 16), 3, (1, 0)).0));
    assert!(!flat(&taps_2d((6, 33), 3, (2, 1)).0));
    assert!(!flat(&taps_2d((4, 112), 3, (1, 1)).0));
    // A flat row forced on the unpadded plane reads the wrong source columns.
    let (mut taps, [o0, o1, o2]) = taps_2d((4, 16), 3, (1, 0));
    taps.lanes = Lanes::new(&taps.taps, taps.outs, true);
    let src = rand(3, 64);
    let wt = rand(4, 9);
    let mut got = vec![MaybeUninit::new(f32::NAN); o0 * o1 * o2];
    plane(&taps, &src, &wt, 0.5, Activation::None, &mut got);
    let mut want = vec![0.5; o0 * o1 * o2];
    plain(&taps, &src, &wt, Activation::None, &mut want);
    if crate::Isa::detected() == crate::Isa::Avx512 {
        assert_ne!(bits(&values(&got)), bits(&want));
    }
}

/// Every column lands at its phase and index, for lengths around the 32-column step and
/// strides 1 to 3, and nothing else is written.
#[test]
fn split_columns_puts_each_column_in_its_phase() {
    for s in 1..=3 {
        for n in [1usize, 2, 5, 31, 32, 33, 63, 64, 70, 112] {
            let row: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let stride = n.div_ceil(s) + 3;
            let mut out = vec![-1.0; s * stride];
            split_columns(&row, s, &mut out, stride);
            for (i, &v) in row.iter().enumerate() {
                assert_eq!(out[(i % s) * stride + i / s], v, "s={s} n={n} column {i}");
            }
            let written = out.iter().filter(|&&v| v >= 0.0).count();
            assert_eq!(written, n, "s={s} n={n}: a write outside the phases");
        }
    }
}

/// The window max equals the tap-by-tap `take` in order, bit for bit, with NaNs and signed
/// zeros among the values (where the first of equal taps and the first NaN are what win), flat
/// and by rows; taking the last of equal taps instead must be caught.
#[test]
fn plane_max_equals_take_in_tap_order() {
    for (n, &(h, w, k, s, pad)) in [
        (5, 7, 3, 1, 1),
        (6, 33, 3, 2, 1),
        (4, 16, 3, 1, 0),
        (9, 111, 3, 2, 0),
        (7, 14, 3, 2, 1),
    ]
    .iter()
    .enumerate()
    {
        let (taps, [o0, o1, o2]) = taps_2d((h, w), k, (s, pad));
        // Negative values and zeros of both signs, so that most windows' max is a zero and
        // which of two equal zeros wins shows in the bits.
        let mut src: Vec<f32> = rand(n as u64, h * w)
            .iter()
            .map(|v| -(v.abs() * 4.0).round() * 0.25 - 0.25)
            .collect();
        for (i, v) in src.iter_mut().enumerate() {
            match i % 5 {
                0 => *v = 0.0,
                2 => *v = -0.0,
                _ => {}
            }
            if i % 37 == 11 && n % 2 == 0 {
                *v = f32::NAN;
            }
        }
        let mut got = vec![MaybeUninit::new(1.0); o0 * o1 * o2];
        plane_max(&taps, &src, &mut got);
        let got = values(&got);
        let by = |rule: fn(f32, f32) -> f32| {
            let mut want = vec![f32::NEG_INFINITY; o0 * o1 * o2];
            by_taps(&taps, &src, &mut want, |d, _, v| rule(d, v));
            want
        };
        assert_eq!(bits(&got), bits(&by(take)), "case {n}");
        #[allow(clippy::eq_op)]
        let last_of_equals = |b: f32, v: f32| {
            if (b == b) & ((v >= b) | (v != v)) {
                v
            } else {
                b
            }
        };
        assert_ne!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            by(last_of_equals)
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            "case {n}: the first of equal taps went unseen"
        );
    }
}

/// Outputs no tap reaches are written too: the activation of the starting value.
#[test]
fn unreached_outputs_are_the_activated_start() {
    // One tap reaching columns 3..9 of 20 and rows 1..2 of 3.
    let tap = Tap {
        k: 0,
        rows: [(0, 1), (1, 2)],
        cols: (3, 9),
        base: 0,
        step: [0, 20],
    };
    let taps = Taps::new(vec![tap], [1, 3, 20], 60, 1);
    let src = rand(7, 60);
    for act in ACTIVATIONS {
        let mut out = vec![MaybeUninit::new(f32::NAN); 60];
        plane(&taps, &src, &[0.5], -0.25, act, &mut out);
        for (i, v) in values(&out).into_iter().enumerate() {
            let want = if (23..29).contains(&i) {
                act.scalar(-0.25 + 0.5 * src[i])
            } else {
                act.scalar(-0.25)
            };
            assert_eq!(v.to_bits(), want.to_bits(), "{act:?}, output {i}");
        }
    }
}

/// A tap that would read past the source is refused when the taps are made.
#[test]
#[should_panic(expected = "reads")]
fn a_tap_reading_outside_the_source_is_refused() {
    let tap = Tap {
        k: 0,
        rows: [(0, 1), (0, 2)],
        cols: (0, 10),
        base: 1,
        step: [0, 10],
    };
    Taps::new(vec![tap], [1, 2, 10], 20, 1);
}
