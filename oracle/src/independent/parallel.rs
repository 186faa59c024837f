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
    if row == 0 || data.is_empty() {
        return;
    }
    let nrows = data.len() / row;
    let work = nrows.saturating_mul(work_per_row.max(1));
    let threads = threads.min(nrows).min(work / WORK_PER_THREAD).max(1);
    if threads == 1 {
        fill(0, data, mag);
        return;
    }
    let block = nrows.div_ceil(threads * BLOCKS_PER_THREAD).max(1);
    let queue = Mutex::new(
        data.chunks_mut(block * row)
            .zip(mag.chunks_mut(block * row))
            .enumerate(),
    );
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    // A poisoned lock means another worker panicked; the scope re-raises that panic.
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((b, (d, m))) = next else { break };
                    fill(b * block, d, m);
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::deal_rows;

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
}
