//! Element layouts as every device backend addresses them: row-major strides, numpy broadcasting as
//! zero strides, and the simplification that makes a kernel's index arithmetic as short as possible.
//! Offsets and strides are in elements; a backend scales them by its element size.
use std::ops::Range;

/// Row-major strides of `shape` in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Row-major strides of `shape` as signed steps (what a strided access takes).
pub fn contiguous(shape: &[usize]) -> Vec<i64> {
    strides(shape).into_iter().map(|s| s as i64).collect()
}

/// Strides of an operand of shape `in_shape` broadcast (numpy rules, right-aligned) to `out_shape`.
pub fn broadcast_strides(in_shape: &[usize], out_shape: &[usize]) -> Vec<i64> {
    let own = strides(in_shape);
    let lead = out_shape.len() - in_shape.len();
    (0..out_shape.len())
        .map(|d| {
            if d < lead || in_shape[d - lead] == 1 {
                0
            } else {
                own[d - lead] as i64
            }
        })
        .collect()
}

/// Removes size-1 dims and merges neighbours that every operand walks contiguously, so that the
/// index arithmetic is as short as possible. Returns the new shape and strides.
pub fn simplify(shape: &[usize], strides: &[Vec<i64>]) -> (Vec<usize>, Vec<Vec<i64>>) {
    let mut out_shape: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<i64>> = vec![Vec::new(); strides.len()];
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let merge = !out_shape.is_empty()
            && strides.iter().enumerate().all(|(j, s)| {
                let last = *out_strides[j].last().unwrap_or(&0);
                last == s[d] * shape[d] as i64
            });
        if merge {
            let n = out_shape.len() - 1;
            out_shape[n] *= shape[d];
            for (j, s) in strides.iter().enumerate() {
                out_strides[j][n] = s[d];
            }
        } else {
            out_shape.push(shape[d]);
            for (j, s) in strides.iter().enumerate() {
                out_strides[j].push(s[d]);
            }
        }
    }
    (out_shape, out_strides)
}

/// Groups of `w` neighbouring elements that every walk moves together, for a copy of wider words:
/// where the innermost axis is contiguous in every walk (`strides[j]` ends in 1) and `w` divides
/// that axis, every other stride and every base, the same walks in units of `w` elements. `w` is
/// the largest power of two up to `max_bytes / size` that fits; `None` where none above 1 does.
/// Returns `(w, shape, strides, bases)`; the caller checks that the buffers' addresses are aligned
/// to `w · size` bytes.
#[allow(clippy::type_complexity)]
pub fn widen(
    shape: &[usize],
    strides: &[Vec<i64>],
    bases: &[i64],
    size: usize,
    max_bytes: usize,
) -> Option<(usize, Vec<usize>, Vec<Vec<i64>>, Vec<i64>)> {
    let inner = *shape.last()?;
    if strides.iter().any(|s| s.last() != Some(&1)) {
        return None;
    }
    let mut w = (max_bytes / size.max(1)).max(1).next_power_of_two();
    while w * size > max_bytes {
        w /= 2;
    }
    while w > 1 {
        let fits = inner % w == 0
            && bases.iter().all(|b| b % w as i64 == 0)
            && strides
                .iter()
                .all(|s| s[..s.len() - 1].iter().all(|v| v % w as i64 == 0));
        if fits {
            let mut shape = shape.to_vec();
            *shape.last_mut()? /= w;
            let strides = strides
                .iter()
                .map(|s| {
                    let mut s: Vec<i64> = s.iter().map(|v| v / w as i64).collect();
                    *s.last_mut()? = 1;
                    Some(s)
                })
                .collect::<Option<Vec<_>>>()?;
            let bases = bases.iter().map(|b| b / w as i64).collect();
            return Some((w, shape, strides, bases));
        }
        w /= 2;
    }
    None
}

/// Where a strided access starts and how it steps along each dim, in elements: element
/// `base + Σ cᵢ·strides[i]` for every coordinate `c` of the shape it walks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strided {
    pub base: i64,
    pub strides: Vec<i64>,
}

impl Strided {
    /// The dense row-major walk of `shape` from element 0.
    pub fn dense(shape: &[usize]) -> Strided {
        Strided {
            base: 0,
            strides: contiguous(shape),
        }
    }

    /// The largest distance from element 0 that walking `shape` reaches (saturating): a backend
    /// compares it with its index width.
    pub fn reach(&self, shape: &[usize]) -> i64 {
        shape
            .iter()
            .zip(&self.strides)
            .map(|(&d, &s)| (d.saturating_sub(1) as i64).saturating_mul(s.abs()))
            .fold(self.base.abs(), i64::saturating_add)
    }

    /// The elements walking `shape` touches, lowest to one past the highest (`None` for an empty
    /// shape): with the element size, the byte range a launch reads or writes through this access.
    pub fn extent(&self, shape: &[usize]) -> Option<Range<i64>> {
        if shape.contains(&0) {
            return None;
        }
        let (mut lo, mut hi) = (self.base, self.base);
        for (&d, &s) in shape.iter().zip(&self.strides) {
            let span = (d as i64 - 1) * s;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        Some(lo..hi + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heads' transpose of a transformer ([197, 12, 64] → [12, 197, 64], halves) moves four
    /// halves a word; a transpose of the innermost axis, an odd inner length, a base or a stride
    /// off the word, and a broadcast innermost axis move single elements; an element walk and its
    /// widened walk visit the same bytes.
    #[test]
    fn widen_groups_what_every_walk_keeps_together() {
        let shape = [12usize, 197, 64];
        let dst = Strided::dense(&shape).strides;
        let src = vec![64i64, 768, 1];
        let (w, s, st, b) = widen(&shape, &[dst.clone(), src.clone()], &[0, 0], 2, 8).unwrap();
        assert_eq!((w, &s, b), (4, &vec![12, 197, 16], vec![0, 0]));
        assert_eq!(st, vec![vec![3152, 16, 1], vec![16, 192, 1]]);
        // Every byte the element walk reads is read by the widened walk, in the same places.
        let bytes = |shape: &[usize], st: &[i64], size: i64| {
            let mut v = Vec::new();
            for i in 0..shape.iter().product::<usize>() {
                let (mut r, mut off) = (i, 0i64);
                for d in (0..shape.len()).rev() {
                    off += (r % shape[d]) as i64 * st[d];
                    r /= shape[d];
                }
                v.extend((0..size).map(|k| off * size + k));
            }
            v
        };
        assert_eq!(bytes(&shape, &src, 2), bytes(&s, &st[1], 8));
        assert_eq!(bytes(&shape, &dst, 2), bytes(&s, &st[0], 8));
        // f32 by pairs; bytes beyond 8 are not asked for.
        assert_eq!(
            widen(&[6, 4], &[vec![4, 1], vec![8, 1]], &[0, 2], 4, 8)
                .unwrap()
                .0,
            2
        );
        assert_eq!(widen(&[6, 4], &[vec![4, 1]], &[0], 8, 8), None);
        // The innermost axis transposed, odd, broadcast; a base or a stride off the word.
        assert_eq!(
            widen(&[4, 8], &[vec![8, 1], vec![1, 4]], &[0, 0], 2, 8),
            None
        );
        assert_eq!(
            widen(&[4, 7], &[vec![7, 1], vec![7, 1]], &[0, 0], 2, 8),
            None
        );
        assert_eq!(
            widen(&[4, 8], &[vec![8, 1], vec![8, 0]], &[0, 0], 2, 8),
            None
        );
        assert_eq!(
            widen(&[4, 8], &[vec![8, 1], vec![8, 1]], &[0, 1], 2, 8),
            None
        );
        let (w, ..) = widen(&[4, 8], &[vec![8, 1], vec![10, 1]], &[0, 0], 2, 8).unwrap();
        assert_eq!(w, 2, "a stride of 10 halves takes pairs, not fours");
    }

    #[test]
    fn simplify_merges_contiguous_and_drops_ones() {
        let shape = [2, 1, 3, 4];
        let a = broadcast_strides(&[2, 1, 3, 4], &shape);
        let b = broadcast_strides(&[4], &shape);
        let (s, st) = simplify(&shape, &[a, b]);
        assert_eq!(s, vec![6, 4]);
        assert_eq!(st, vec![vec![4, 1], vec![0, 1]]);
        let (s, _) = simplify(&[2, 3], &[vec![1, 2]]);
        assert_eq!(s, vec![2, 3]);
    }

    /// Every element a walk touches lies in its extent, and the extent's ends are touched: checked
    /// by enumerating the walk, negative steps (Slice) and zero steps (broadcast) included.
    #[test]
    fn extent_is_the_walk_s_span() {
        let cases: [(&[usize], Strided); 4] = [
            (&[2, 3], Strided::dense(&[2, 3])),
            (
                &[3, 4],
                Strided {
                    base: 11,
                    strides: vec![-4, -1],
                },
            ),
            (
                &[5, 2],
                Strided {
                    base: 3,
                    strides: vec![0, 7],
                },
            ),
            (
                &[2, 2, 2],
                Strided {
                    base: 20,
                    strides: vec![-9, 3, -1],
                },
            ),
        ];
        for (shape, walk) in cases {
            let mut touched = vec![];
            for i in 0..shape.iter().product::<usize>() {
                let (mut rest, mut at) = (i, walk.base);
                for d in (0..shape.len()).rev() {
                    at += (rest % shape[d]) as i64 * walk.strides[d];
                    rest /= shape[d];
                }
                touched.push(at);
            }
            let e = walk.extent(shape).unwrap();
            assert_eq!(e.start, *touched.iter().min().unwrap(), "{walk:?}");
            assert_eq!(e.end, touched.iter().max().unwrap() + 1, "{walk:?}");
            assert!(walk.reach(shape) >= e.end - 1 && walk.reach(shape) >= -e.start);
        }
        assert_eq!(Strided::dense(&[3, 0]).extent(&[3, 0]), None);
    }
}
