//! How the reference oracle spreads an output over threads: the output is cut into contiguous runs of
//! whole rows, one run per thread, and each run is filled by the same code that would fill all of it.
//! No element is computed by more than one thread, and each element's arithmetic does not depend on
//! which run it falls in, so the answer is the same for every thread count.
use std::thread;

/// Below about this many steps (multiply-adds, exponentials) per thread an evaluation stays on the
/// calling thread: starting a thread costs tens of microseconds.
const MIN_WORK_PER_THREAD: usize = 1 << 16;

/// Fills `data` and `mag` (equal lengths, rows of `row` elements) by calling
/// `fill(first_row, data_rows, mag_rows)` on contiguous runs of rows, on up to `threads` threads.
/// `work_per_row` (about the number of terms one row's elements combine) decides how many threads
/// are worth starting.
pub(crate) fn rows<F>(
    threads: usize,
    data: &mut [f64],
    mag: &mut [f64],
    row: usize,
    work_per_row: usize,
    fill: F,
) where
    F: Fn(usize, &mut [f64], &mut [f64]) + Sync,
{
    let filled: Result<(), std::convert::Infallible> =
        try_rows(threads, data, mag, row, work_per_row, |first, d, m| {
            fill(first, d, m);
            Ok(())
        });
    let Ok(()) = filled;
}

/// [`rows`] for a `fill` that can fail: a run stops at its first error, and the error returned is that
/// of the earliest run that failed, which (runs being contiguous and in order) is the error of the
/// first failing row, the one a single thread would have met first.
pub(crate) fn try_rows<F, E>(
    threads: usize,
    data: &mut [f64],
    mag: &mut [f64],
    row: usize,
    work_per_row: usize,
    fill: F,
) -> Result<(), E>
where
    F: Fn(usize, &mut [f64], &mut [f64]) -> Result<(), E> + Sync,
    E: Send,
{
    if row == 0 || data.is_empty() {
        return Ok(());
    }
    let nrows = data.len() / row;
    let worth = (nrows.saturating_mul(work_per_row.max(1)) / MIN_WORK_PER_THREAD).max(1);
    let threads = threads.min(nrows).min(worth).max(1);
    if threads == 1 {
        return fill(0, data, mag);
    }
    let per = nrows.div_ceil(threads) * row;
    thread::scope(|s| {
        let runs: Vec<_> = data
            .chunks_mut(per)
            .zip(mag.chunks_mut(per))
            .enumerate()
            .map(|(t, (d, m))| {
                let fill = &fill;
                s.spawn(move || fill(t * per / row, d, m))
            })
            .collect();
        // Joined in order, so the first error kept is the earliest run's; a panic is re-raised.
        let mut first = Ok(());
        for run in runs {
            let done = run.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            if first.is_ok() {
                first = done;
            }
        }
        first
    })
}

/// [`rows`] over single elements (elementwise ops), on [`crate::threads`] threads.
pub(crate) fn elements<F>(data: &mut [f64], mag: &mut [f64], fill: F)
where
    F: Fn(usize, &mut [f64], &mut [f64]) + Sync,
{
    rows(crate::threads(), data, mag, 1, 1, fill);
}

/// [`try_rows`] over single elements (elementwise ops), on [`crate::threads`] threads.
pub(crate) fn try_elements<F, E>(data: &mut [f64], mag: &mut [f64], fill: F) -> Result<(), E>
where
    F: Fn(usize, &mut [f64], &mut [f64]) -> Result<(), E> + Sync,
    E: Send,
{
    try_rows(crate::threads(), data, mag, 1, 1, fill)
}

#[cfg(test)]
mod tests {
    use super::{rows, try_rows};

    #[test]
    fn every_row_is_filled_once_whatever_the_thread_count() {
        for threads in [1, 2, 3, 7, 64] {
            let (nrows, row) = (37, 5);
            let mut data = vec![0.0; nrows * row];
            let mut mag = vec![0.0; nrows * row];
            rows(threads, &mut data, &mut mag, row, 1 << 20, |first, d, m| {
                for (r, (dr, mr)) in d.chunks_mut(row).zip(m.chunks_mut(row)).enumerate() {
                    for (j, (x, g)) in dr.iter_mut().zip(mr.iter_mut()).enumerate() {
                        *x += ((first + r) * row + j) as f64;
                        *g += 1.0;
                    }
                }
            });
            let want: Vec<f64> = (0..nrows * row).map(|v| v as f64).collect();
            assert_eq!(data, want, "{threads} threads");
            assert!(mag.iter().all(|&g| g == 1.0), "{threads} threads");
        }
    }

    #[test]
    fn the_first_failing_run_gives_the_error() {
        for threads in [1, 2, 3, 7] {
            let mut data = vec![0.0; 100];
            let mut mag = vec![0.0; 100];
            let got = try_rows(threads, &mut data, &mut mag, 1, 1 << 20, |first, d, _| {
                for r in first..first + d.len() {
                    if r == 60 || r == 20 {
                        return Err(r);
                    }
                }
                Ok(())
            });
            assert_eq!(got, Err(20), "{threads} threads");
        }
    }

    /// A tensor large enough to be split over threads gives, row by row, the bits that each row
    /// evaluated alone (on the calling thread) gives.
    #[test]
    fn split_evaluations_equal_their_rows_alone() {
        use super::super::Reference;
        use super::super::testutil::{SplitMix64, node};
        use crate::{DType, Oracle, Value};
        let (r, c) = (96, 2048);
        let mut rng = SplitMix64(5);
        let t =
            |shape: Vec<usize>, data: Vec<f64>| Some(Value::new(DType::F32, shape, data).unwrap());
        let x: Vec<f64> = rng.vec(r * c).iter().map(|v| v * 4.0).collect();
        let (s, b) = (rng.vec(c), rng.vec(c));
        for op in ["Gelu", "Add", "Softmax", "LayerNormalization", "Where"] {
            let rest = |v: &[f64], rows: usize| match op {
                "Gelu" | "Softmax" => vec![t(vec![rows, c], v.to_vec())],
                "Add" => vec![t(vec![rows, c], v.to_vec()), t(vec![c], b.clone())],
                "Where" => vec![
                    t(vec![c], s.iter().map(|&v| (v > 0.0) as u8 as f64).collect()),
                    t(vec![rows, c], v.to_vec()),
                    t(vec![], vec![0.5]),
                ],
                _ => vec![
                    t(vec![rows, c], v.to_vec()),
                    t(vec![c], s.clone()),
                    t(vec![c], b.clone()),
                ],
            };
            let n = node(op, 20, &[]);
            let all = Reference.evaluate(&n, &rest(&x, r)).unwrap().remove(0);
            for row in 0..r {
                let one = Reference
                    .evaluate(&n, &rest(&x[row * c..(row + 1) * c], 1))
                    .unwrap()
                    .remove(0);
                assert_eq!(
                    all.value.data[row * c..(row + 1) * c],
                    one.value.data,
                    "{op} row {row}"
                );
                assert_eq!(
                    all.magnitude[row * c..(row + 1) * c],
                    one.magnitude,
                    "{op} row {row}"
                );
            }
        }
        // An error met on a split evaluation is the first element's a single thread would meet.
        let num: Vec<f64> = (0..r * c).map(|i| i as f64).collect();
        let mut den = vec![1.0; r * c];
        den[r * c - 3] = 0.0;
        den[r * c / 2 + 1] = 0.0;
        let i32v = |d: Vec<f64>| Some(Value::new(DType::I32, vec![r, c], d).unwrap());
        let got = Reference.evaluate(&node("Div", 14, &[]), &[i32v(num), i32v(den)]);
        assert!(got.is_err());
        let cast = node("Cast", 13, &[("to", crate::Attr::Int(6))]);
        let mut big = vec![1.0; r * c];
        big[r * c - 5] = 1e12;
        big[r * c / 2 - 7] = 3e12;
        let err = Reference
            .evaluate(&cast, &[t(vec![r, c], big)])
            .unwrap_err();
        assert!(err.to_string().contains("3000000000000"), "{err}");
    }
}
