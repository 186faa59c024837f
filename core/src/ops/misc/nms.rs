//! NonMaxSuppression: per batch and class, candidates above the score threshold in order of score
//! (the lower index first among equal scores), each kept unless a kept box overlaps it by an IoU
//! above the threshold, up to `max_output_boxes_per_class`. IoUs in f64 from the boxes' corners.
//! The kept boxes sit in buckets of their left edge, so each candidate meets only those that can
//! intersect it: the kept set of judging every pair (tested against it).
use super::scalar_f64;
use crate::bail;
use crate::error::OpResult;
use crate::ops::{OpCtx, input, opt_input, single};
use crate::tensor::{Tensor, Value};

pub(super) fn non_max_suppression(ctx: &OpCtx, inputs: &[Option<&Value>]) -> OpResult<Vec<Value>> {
    let boxes_t = input(inputs, 0)?;
    let scores_t = input(inputs, 1)?;
    let (bs, ss) = (boxes_t.shape(), scores_t.shape());
    if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
        bail!(
            "NonMaxSuppression needs boxes [B, N, 4] and scores [B, C, N], got {bs:?} and {ss:?}"
        );
    }
    let (nb, nc, nbox) = (bs[0], ss[1], bs[1]);
    let max_out = match opt_input(inputs, 2)? {
        Some(t) if !t.is_empty() => t.to_i64_vec()?.first().copied().unwrap_or(0).max(0) as usize,
        _ => 0,
    };
    let iou_th = match opt_input(inputs, 3)? {
        Some(t) if !t.is_empty() => scalar_f64(t, "iou_threshold")?,
        _ => 0.0,
    };
    let score_th = match opt_input(inputs, 4)? {
        Some(t) if !t.is_empty() => Some(scalar_f64(t, "score_threshold")?),
        _ => None,
    };
    let center = ctx.attr_i("center_point_box", 0)? != 0;
    let boxes = boxes_t.to_f64_vec()?;
    let scores = scores_t.to_f64_vec()?;
    // Corners (y_min, x_min, y_max, x_max) of every box.
    let corners: Vec<[f64; 4]> = boxes
        .chunks_exact(4)
        .map(|b| {
            if center {
                let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
                [b[1] - hh, b[0] - hw, b[1] + hh, b[0] + hw]
            } else {
                [
                    b[0].min(b[2]),
                    b[1].min(b[3]),
                    b[0].max(b[2]),
                    b[1].max(b[3]),
                ]
            }
        })
        .collect();
    let mut out: Vec<i64> = Vec::new();
    for b in 0..nb {
        let bx = &corners[b * nbox..(b + 1) * nbox];
        for c in 0..nc {
            let sc = &scores[(b * nc + c) * nbox..(b * nc + c + 1) * nbox];
            let mut cand: Vec<usize> = (0..nbox)
                .filter(|&i| score_th.is_none_or(|t| sc[i] > t))
                .collect();
            // Highest score first; among equal scores the lower index first.
            cand.sort_by(|&i, &j| {
                sc[j]
                    .partial_cmp(&sc[i])
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(i.cmp(&j))
            });
            for i in keep(bx, &cand, iou_th, max_out, BUCKET_SPAN) {
                out.extend([b as i64, c as i64, i as i64]);
            }
        }
    }
    let n = out.len() / 3;
    single(Tensor::from_i64(&[n, 3], out)?)
}

/// Whether box `b` suppresses box `a` (corners): their IoU is above `th`. Boxes that do not
/// intersect, or of no area, never suppress.
fn iou_above(a: &[f64; 4], b: &[f64; 4], th: f64) -> bool {
    let ih = a[2].min(b[2]) - a[0].max(b[0]);
    let iw = a[3].min(b[3]) - a[1].max(b[1]);
    if ih <= 0.0 || iw <= 0.0 {
        return false;
    }
    let inter = ih * iw;
    let (aa, ab) = ((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]));
    let union = aa + ab - inter;
    if aa <= 0.0 || ab <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > th
}

/// Bucket width in widths of the widest candidate (see [`Kept`]).
const BUCKET_SPAN: f64 = 2.0;

/// The candidates (in order) that one class keeps: each unless a kept box overlaps it by an IoU
/// above `th`, at most `max_out`. `span`: the bucket width in candidate widths ([`BUCKET_SPAN`];
/// the tests narrow it to show what a too narrow bucket loses).
fn keep(boxes: &[[f64; 4]], cand: &[usize], th: f64, max_out: usize, span: f64) -> Vec<usize> {
    let mut kept = Kept::new(boxes, cand, span);
    let mut out = Vec::new();
    for &i in cand {
        if kept.len >= max_out {
            break;
        }
        if !kept.suppresses(&boxes[i], th) {
            kept.push(i, &boxes[i]);
            out.push(i);
        }
    }
    out
}

/// The boxes NonMaxSuppression has kept for one class, in buckets of their left edge `x_min` so
/// that a candidate meets only those that can intersect it.
///
/// Buckets are `2w` wide, `w` the widest candidate: a kept box whose left edge lies a bucket or
/// more left of the candidate's ends before the candidate begins, and one whose left edge is past
/// the candidate's right edge begins after it ends; either way their intersection is empty and
/// [`iou_above`] is false. So the kept set, and the output, are those of judging every pair
/// (torchvision's batched NMS offsets each class by the image size, so most pairs lie apart: the
/// detector of `reports/cpu/` judged 27,000 candidates pairwise in 290 ms). Where the widths give
/// no usable bucket (none finite and positive), every kept box is judged, as before.
struct Kept<'a> {
    boxes: &'a [[f64; 4]],
    len: usize,
    /// Bucket width; 0 for one list of all.
    width: f64,
    buckets: std::collections::HashMap<i64, Vec<usize>>,
    all: Vec<usize>,
}

impl<'a> Kept<'a> {
    fn new(boxes: &'a [[f64; 4]], cand: &[usize], span: f64) -> Kept<'a> {
        let w = cand
            .iter()
            .map(|&i| boxes[i][3] - boxes[i][1])
            .filter(|w| w.is_finite())
            .fold(0f64, f64::max);
        Kept {
            boxes,
            len: 0,
            width: if w > 0.0 && (span * w).is_finite() {
                span * w
            } else {
                0.0
            },
            buckets: Default::default(),
            all: Vec::new(),
        }
    }

    /// The bucket of a left edge (`None` for a NaN or one too far out to index).
    fn bucket(&self, x: f64) -> Option<i64> {
        let k = (x / self.width).floor();
        (k.abs() < 1e15).then_some(k as i64)
    }

    fn push(&mut self, i: usize, b: &[f64; 4]) {
        self.len += 1;
        match (self.width > 0.0).then(|| self.bucket(b[1])).flatten() {
            Some(k) => self.buckets.entry(k).or_default().push(i),
            // Without a bucket (NaN or far-out edges, or no width): judged against every candidate.
            None => self.all.push(i),
        }
    }

    fn suppresses(&self, a: &[f64; 4], th: f64) -> bool {
        if self.all.iter().any(|&k| iou_above(a, &self.boxes[k], th)) {
            return true;
        }
        if self.width == 0.0 {
            return false;
        }
        let range = (self.bucket(a[1] - self.width), self.bucket(a[3]));
        let (Some(lo), Some(hi)) = range else {
            // A candidate without a usable range: every bucket.
            return self
                .buckets
                .values()
                .flatten()
                .any(|&k| iou_above(a, &self.boxes[k], th));
        };
        if hi - lo > 64 {
            return self
                .buckets
                .values()
                .flatten()
                .any(|&k| iou_above(a, &self.boxes[k], th));
        }
        (lo..=hi).any(|key| {
            self.buckets
                .get(&key)
                .is_some_and(|v| v.iter().any(|&k| iou_above(a, &self.boxes[k], th)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::seeded_f32;

    /// Every pair judged: the definition.
    fn pairwise(boxes: &[[f64; 4]], cand: &[usize], th: f64, max_out: usize) -> Vec<usize> {
        let mut kept: Vec<usize> = Vec::new();
        for &i in cand {
            if kept.len() >= max_out {
                break;
            }
            if kept.iter().all(|&k| !iou_above(&boxes[i], &boxes[k], th)) {
                kept.push(i);
            }
        }
        kept
    }

    /// Boxes as torchvision's batched NMS writes them (each class offset by the image size), with
    /// overlapping clusters, plus boxes of no width, NaN, infinite and far-out corners.
    fn boxes(seed: u64, n: usize) -> Vec<[f64; 4]> {
        let v = seeded_f32(seed, 5 * n, 0.0, 1.0);
        let mut b: Vec<[f64; 4]> = (0..n)
            .map(|i| {
                let r = &v[5 * i..5 * i + 5];
                let class = (r[4] * 7.0).floor() as f64 * 330.0;
                let (y, x) = (r[0] as f64 * 200.0, r[1] as f64 * 200.0 + class);
                // Mostly narrow boxes, a few up to 120 wide.
                let (h, w) = (
                    r[2] as f64 * 30.0 + 5.0,
                    (r[3] as f64).powi(3) * 110.0 + 10.0,
                );
                [y, x, y + h, x + w]
            })
            .collect();
        b[3] = [5.0, 7.0, 9.0, 7.0];
        b[5] = [f64::NAN, 1.0, 3.0, 4.0];
        b[8] = [1.0, f64::NEG_INFINITY, 3.0, 4.0];
        b[13] = [1.0, 1e300, 3.0, 1e300 + 1e290];
        b
    }

    /// Buckets keep exactly the boxes that judging every pair keeps, over thresholds and limits.
    #[test]
    fn buckets_keep_what_every_pair_keeps() {
        for seed in 0..6 {
            let b = boxes(seed, 600);
            let cand: Vec<usize> = (0..b.len()).rev().collect();
            for th in [0.0, 0.1, 0.3, 0.5, 0.9] {
                for max_out in [usize::MAX, 50] {
                    let want = pairwise(&b, &cand, th, max_out);
                    // Enough kept, and enough suppressed, for the comparison to mean something.
                    assert!(want.len() > 10, "seed {seed}: too few kept to judge");
                    assert!(
                        th > 0.0 || want.len() < 450,
                        "seed {seed}: {} kept",
                        want.len()
                    );
                    assert_eq!(
                        keep(&b, &cand, th, max_out, BUCKET_SPAN),
                        want,
                        "seed {seed} th {th}"
                    );
                }
            }
        }
    }

    /// Buckets narrower than a box (a quarter of the widest) miss a kept box that begins further
    /// left and still overlaps: a wide box and a small one inside it, which it suppresses; the
    /// comparison sees the small one kept.
    #[test]
    fn buckets_too_narrow_are_caught() {
        let b = vec![
            [0.0, 0.0, 10.0, 100.0],
            [0.0, 80.0, 10.0, 90.0],
            [50.0, 300.0, 60.0, 310.0],
        ];
        let cand = [0, 1, 2];
        let want = pairwise(&b, &cand, 0.05, usize::MAX);
        assert_eq!(want, [0, 2]);
        assert_eq!(keep(&b, &cand, 0.05, usize::MAX, BUCKET_SPAN), want);
        assert_ne!(
            keep(&b, &cand, 0.05, usize::MAX, 0.25),
            want,
            "narrow buckets went unseen"
        );
    }
}
