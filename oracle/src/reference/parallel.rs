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
    if row == 0 || data.is_empty() {
        return;
    }
    let nrows = data.len() / row;
    let worth = (nrows.saturating_mul(work_per_row.max(1)) / MIN_WORK_PER_THREAD).max(1);
    let threads = threads.min(nrows).min(worth).max(1);
    if threads == 1 {
        fill(0, data, mag);
        return;
    }
    let per = nrows.div_ceil(threads) * row;
    thread::scope(|s| {
        for (t, (d, m)) in data.chunks_mut(per).zip(mag.chunks_mut(per)).enumerate() {
            let fill = &fill;
            s.spawn(move || fill(t * per / row, d, m));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::rows;

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
}
