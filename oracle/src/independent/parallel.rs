//! How the independent oracle spreads an output over threads: the output's rows are dealt out in
//! small blocks from a shared queue to whichever thread is free. A block is filled by one thread,
//! by the same code whatever the thread count, so the answer does not depend on how many threads ran.
use std::sync::Mutex;
use std::thread;

/// The least work (multiply-adds, exponentials) worth a thread of its own.
const WORK_PER_THREAD: usize = 1 << 17;

/// Blocks dealt per thread: enough that a thread slowed by the rest of the machine holds up little.
const BLOCKS_PER_THREAD: usize = 8;

/// Calls `fill(first_row, data_rows, mag_rows)` over blocks of whole rows of `row` elements of `data`
/// and `mag` (equal lengths), on up to `threads` threads; `work_per_row` sizes the job.
pub(crate) fn deal_rows<F>(
    threads: usize,
    data: &mut [f64],
    mag: &mut [f64],
    row: usize,
    work_per_row: usize,
    fill: F,
) where
    F: Fn(usize, &mut [f64], &mut [f64]) + Sync,
{
    let dealt: Result<(), std::convert::Infallible> =
        try_deal_rows(threads, data, mag, row, work_per_row, |first, d, m| {
            fill(first, d, m);
            Ok(())
        });
    let Ok(()) = dealt;
}

/// [`deal_rows`] for a `fill` that can fail. Blocks are dealt in order, so every block before a
/// failing one was dealt before it and is finished; of the failures, the one returned is the earliest
/// block's, the error a single thread going through the rows in order would have met first. After a
/// failure no further block is dealt.
pub(crate) fn try_deal_rows<F, E>(
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
    let work = nrows.saturating_mul(work_per_row.max(1));
    let threads = threads.min(nrows).min(work / WORK_PER_THREAD).max(1);
    if threads == 1 {
        return fill(0, data, mag);
    }
    let block = nrows.div_ceil(threads * BLOCKS_PER_THREAD).max(1);
    let queue = Mutex::new(
        data.chunks_mut(block * row)
            .zip(mag.chunks_mut(block * row))
            .enumerate(),
    );
    // (block, error) of the earliest failing block so far.
    let failed: Mutex<Option<(usize, E)>> = Mutex::new(None);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    // A poisoned lock means another worker panicked; the scope re-raises that panic.
                    let next = {
                        let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
                        let stop = failed.lock().unwrap_or_else(|e| e.into_inner()).is_some();
                        if stop { None } else { q.next() }
                    };
                    let Some((b, (d, m))) = next else { break };
                    if let Err(e) = fill(b * block, d, m) {
                        let mut f = failed.lock().unwrap_or_else(|e| e.into_inner());
                        if f.as_ref().is_none_or(|(fb, _)| b < *fb) {
                            *f = Some((b, e));
                        }
                    }
                }
            });
        }
    });
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// [`deal_rows`] with rows of one element each (elementwise ops), on [`crate::threads`] threads.
pub(crate) fn deal_elements<F>(data: &mut [f64], mag: &mut [f64], fill: F)
where
    F: Fn(usize, &mut [f64], &mut [f64]) + Sync,
{
    deal_rows(crate::threads(), data, mag, 1, 1, fill);
}

/// [`try_deal_rows`] with rows of one element each (elementwise ops), on [`crate::threads`] threads.
pub(crate) fn try_deal_elements<F, E>(data: &mut [f64], mag: &mut [f64], fill: F) -> Result<(), E>
where
    F: Fn(usize, &mut [f64], &mut [f64]) -> Result<(), E> + Sync,
    E: Send,
{
    try_deal_rows(crate::threads(), data, mag, 1, 1, fill)
}

#[cfg(test)]
mod tests {
    use super::{deal_rows, try_deal_rows};

    #[test]
    fn each_row_is_dealt_once() {
        for threads in [1, 2, 5, 16] {
            let (nrows, row) = (101, 3);
            let mut data = vec![0.0; nrows * row];
            let mut mag = vec![0.0; nrows * row];
            deal_rows(threads, &mut data, &mut mag, row, 1 << 20, |first, d, m| {
                for (f, (x, g)) in d.iter_mut().zip(m.iter_mut()).enumerate() {
                    *x += (first * row + f) as f64;
                    *g += 1.0;
                }
            });
            assert!(data.iter().enumerate().all(|(f, &x)| x == f as f64));
            assert!(mag.iter().all(|&g| g == 1.0), "{threads}");
        }
    }

    #[test]
    fn the_earliest_failing_block_gives_the_error() {
        for threads in [1, 2, 5, 16] {
            let mut data = vec![0.0; 1000];
            let mut mag = vec![0.0; 1000];
            let got = try_deal_rows(threads, &mut data, &mut mag, 1, 1 << 20, |first, d, _| {
                for r in first..first + d.len() {
                    if r == 900 || r == 333 {
                        return Err(r);
                    }
                }
                Ok(())
            });
            assert_eq!(got, Err(333), "{threads} threads");
        }
    }

    /// A tensor large enough to be dealt out over threads gives, row by row, the bits that each row
    /// evaluated alone (on the calling thread) gives.
    #[test]
    fn dealt_evaluations_equal_their_rows_alone() {
        use super::super::Independent;
        use super::super::testkit::{SplitMix64, f32v, node, typed};
        use crate::{Attr, DType, Oracle};
        let (r, c) = (96, 2048);
        let mut rng = SplitMix64(6);
        let x: Vec<f64> = rng.values(r * c).iter().map(|v| v * 4.0).collect();
        let (s, b) = (rng.values(c), rng.values(c));
        for op in ["Gelu", "Mul", "Softmax", "LayerNormalization", "Cast"] {
            let inputs = |v: &[f64], rows: usize| match op {
                "Gelu" | "Softmax" | "Cast" => vec![f32v(&[rows, c], v.to_vec())],
                "Mul" => vec![f32v(&[rows, c], v.to_vec()), f32v(&[c], b.clone())],
                _ => vec![
                    f32v(&[rows, c], v.to_vec()),
                    f32v(&[c], s.clone()),
                    f32v(&[c], b.clone()),
                ],
            };
            let n = node(op, 20, vec![("to", Attr::Int(10))]);
            let all = Independent.evaluate(&n, &inputs(&x, r)).unwrap().remove(0);
            for row in 0..r {
                let v = &x[row * c..(row + 1) * c];
                let one = Independent.evaluate(&n, &inputs(v, 1)).unwrap().remove(0);
                let at = row * c..(row + 1) * c;
                assert_eq!(all.value.data[at.clone()], one.value.data, "{op} row {row}");
                assert_eq!(all.magnitude[at], one.magnitude, "{op} row {row}");
            }
        }
        // An integer division by zero far into a dealt evaluation is still met.
        let num: Vec<f64> = (0..r * c).map(|i| (i % 1000) as f64).collect();
        let mut den = vec![1.0; r * c];
        den[r * c - 3] = 0.0;
        let got = Independent.evaluate(
            &node("Div", 14, vec![]),
            &[
                typed(DType::I32, &[r, c], num),
                typed(DType::I32, &[r, c], den),
            ],
        );
        assert!(got.is_err());
    }
}
