//! wgpu benchmarks (ignored by default; one device call on the H200 prints them all with
//! `cargo test -p quorum-device-tests --test gpu bench_wgpu -- --ignored --nocapture`). Device work
//! is timed on the host around a whole submission after a warm-up (`Run::synchronize` waits for the
//! queue), the median of many repeats, one `BENCH wgpu_...` line per figure beside the CUDA figures
//! of `bench.rs`. Nothing here asserts a speed.
use std::time::Instant;

use quorum::counters::Counters;
use quorum::wgpu::ops::{elementwise, matmul};
use quorum::wgpu::{Device, Run};

use crate::harness::rand_f32;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median milliseconds per call of `f`, timed over batches of `batch` calls in one submission
/// (after `warm` untimed calls), `reps` batches.
fn time_ms(run: &Run, warm: usize, reps: usize, batch: usize, f: &mut dyn FnMut()) -> f64 {
    for _ in 0..warm {
        f();
    }
    run.synchronize().unwrap();
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        run.synchronize().unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3 / batch as f64);
    }
    median(times)
}

#[test]
#[ignore = "benchmark: run with --ignored on a GPU machine"]
fn bench_wgpu_kernels() {
    let device = Device::get().expect("a wgpu adapter");
    println!("BENCH wgpu_device {}", device.describe());
    let counters = Counters::default();
    let run = Run::new(&device, &counters, None);

    // 64 MiB elementwise Add: 16 Mi floats per operand; bytes moved = 3 × 64 MiB.
    let n = 16 << 20;
    let a = run.upload(&rand_f32(1, &[n])).unwrap();
    let b = run.upload(&rand_f32(2, &[n])).unwrap();
    let ms = time_ms(&run, 5, 20, 10, &mut || {
        let y = elementwise::binary(&run, quorum::ops::map_op::Arith::Add, &a, &b).unwrap();
        run.release(y);
    });
    let tbs = 3.0 * (n as f64) * 4.0 / (ms * 1e-3) / 1e12;
    println!("BENCH wgpu_add_64mib_ms {ms:.4} ms");
    println!(
        "BENCH wgpu_add_64mib_bandwidth {tbs:.3} TB/s ({:.0}% of the 4.0 TB/s copy)",
        tbs / 4.0 * 100.0
    );
    run.release(a);
    run.release(b);

    // SGEMM, square, f32.
    for size in [1024usize, 4096] {
        let a = run.upload(&rand_f32(3, &[size, size])).unwrap();
        let b = run.upload(&rand_f32(4, &[size, size])).unwrap();
        let (reps, batch) = if size >= 4096 { (5, 4) } else { (20, 10) };
        let ms = time_ms(&run, 2, reps, batch, &mut || {
            let y = matmul::matmul(&run, &a, &b).unwrap();
            run.release(y);
        });
        let tflops = 2.0 * (size as f64).powi(3) / (ms * 1e-3) / 1e12;
        println!("BENCH wgpu_sgemm_{size} {tflops:.2} TFLOP/s ({ms:.3} ms)");
        run.release(a);
        run.release(b);
    }

    // Batched MatMul [16,64,128] x [16,128,64]: device time per call in a batch of 100, and the
    // wall time of one call with its submission and wait.
    let a = run.upload(&rand_f32(5, &[16, 64, 128])).unwrap();
    let b = run.upload(&rand_f32(6, &[16, 128, 64])).unwrap();
    let ms = time_ms(&run, 10, 20, 100, &mut || {
        let y = matmul::matmul(&run, &a, &b).unwrap();
        run.release(y);
    });
    println!(
        "BENCH wgpu_batched_matmul_16x64x128x64 {:.1} us (per call, batched submissions)",
        ms * 1e3
    );
    let ms = time_ms(&run, 10, 200, 1, &mut || {
        let y = matmul::matmul(&run, &a, &b).unwrap();
        run.release(y);
    });
    println!(
        "BENCH wgpu_batched_matmul_16x64x128x64_wall {:.1} us (per call incl. submit + wait)",
        ms * 1e3
    );
    println!("BENCH wgpu_counters {:?}", counters.snapshot());
}

/// light_resnet50 end to end on wgpu and on CUDA (where present), with the same inputs: median
/// wall milliseconds of `Session::run` (inputs uploaded, outputs downloaded), folding on.
#[test]
#[ignore = "benchmark: run with --ignored on a GPU machine"]
fn bench_wgpu_light_resnet50() {
    let root = std::env::var_os("QUORUM_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    let path = root.join("target/corpus/onnx-1.23.2/light/test_resnet50/model.onnx");
    if !path.is_file() {
        println!("BENCH wgpu_light_resnet50 skipped: no {}", path.display());
        return;
    }
    for p in [quorum::Provider::Wgpu, quorum::Provider::Cuda] {
        if quorum::Availability::available(p).is_err() {
            continue;
        }
        let options = quorum::SessionOptions {
            providers: vec![p, quorum::Provider::Cpu],
            ..Default::default()
        };
        let s = quorum::Session::from_file(&path, options).unwrap();
        let feeds =
            quorum::inputs::generate(&s.model().graph, &[], &Default::default(), 5).unwrap();
        for _ in 0..3 {
            s.run(feeds.clone()).unwrap();
        }
        let mut times = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            s.run(feeds.clone()).unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let on_device = s.placement().iter().filter(|n| n.provider == p).count();
        println!(
            "BENCH {}_light_resnet50 {:.3} ms per run ({on_device} of {} nodes on the device, fallbacks {})",
            p.name(),
            median(times),
            s.placement().len(),
            s.counters().cuda_fallbacks
        );
    }
}
