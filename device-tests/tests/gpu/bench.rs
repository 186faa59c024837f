//! Device benchmarks (ignored by default; `run.sh` runs them with `--ignored --nocapture`). They time
//! with CUDA events around device-resident work after a warm-up, take the median of many repeats, and
//! print one line per figure (machine-readable `BENCH name value unit`). Nothing here asserts a speed.
use std::time::Instant;

use quorum::cuda::driver::Event;
use quorum::cuda::{Counters, Device, Run};

use crate::harness::rand_f32;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median milliseconds of `f` over `reps`, each timed with events (after `warm` untimed calls).
fn time_ms(run: &Run, warm: usize, reps: usize, f: &mut dyn FnMut()) -> f64 {
    for _ in 0..warm {
        f();
    }
    run.synchronize().unwrap();
    let ctx = &run.device.ctx;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let (a, b) = (
            Event::new(ctx, true).unwrap(),
            Event::new(ctx, true).unwrap(),
        );
        a.record(run.stream()).unwrap();
        f();
        b.record(run.stream()).unwrap();
        b.synchronize().unwrap();
        times.push(b.elapsed_since(&a).unwrap() as f64);
    }
    median(times)
}

#[test]
#[ignore = "benchmark: run with --ignored on a GPU machine"]
fn bench_kernels() {
    let device = Device::get().expect("a CUDA device");
    println!("BENCH device {}", device.ctx.info.name);
    let counters = Counters::default();
    let run = Run::new(&device, &counters, None).unwrap();

    // 64 MiB elementwise Add: 16 Mi floats per operand; bytes moved = 3 × 64 MiB.
    let n = 16 << 20;
    let a = run.upload(&rand_f32(1, &[n])).unwrap();
    let b = run.upload(&rand_f32(2, &[n])).unwrap();
    let ms = time_ms(&run, 5, 50, &mut || {
        let y =
            quorum::cuda::ops::elementwise::binary(&run, quorum::ops::map_op::Arith::Add, &a, &b)
                .unwrap();
        run.release(y, &[]);
    });
    let tbs = 3.0 * (n as f64) * 4.0 / (ms * 1e-3) / 1e12;
    println!("BENCH add_64mib_ms {ms:.4} ms");
    println!(
        "BENCH add_64mib_bandwidth {tbs:.3} TB/s ({:.0}% of the 4.0 TB/s copy)",
        tbs / 4.0 * 100.0
    );

    // SGEMM, square, f32.
    for size in [1024usize, 2048, 4096] {
        let a = run.upload(&rand_f32(3, &[size, size])).unwrap();
        let b = run.upload(&rand_f32(4, &[size, size])).unwrap();
        let reps = if size >= 4096 { 20 } else { 50 };
        let ms = time_ms(&run, 3, reps, &mut || {
            let y = quorum::cuda::ops::matmul::sgemm(
                &run, &a, &b, None, size, size, size, false, false, 1.0, 0.0, 1,
            )
            .unwrap();
            run.release(y, &[]);
        });
        let tflops = 2.0 * (size as f64).powi(3) / (ms * 1e-3) / 1e12;
        println!("BENCH sgemm_{size} {tflops:.2} TFLOP/s ({ms:.3} ms)");
        run.release(a, &[]);
        run.release(b, &[]);
    }

    // The same on the tensor cores (TF32 operands, f32 sums), square.
    let tc = Run::new(&device, &counters, None).unwrap();
    tc.allow_tf32(true);
    for size in [1024usize, 2048, 4096, 8192] {
        let a = tc.upload(&rand_f32(3, &[size, size])).unwrap();
        let b = tc.upload(&rand_f32(4, &[size, size])).unwrap();
        let reps = if size >= 4096 { 20 } else { 50 };
        let ms = time_ms(&tc, 3, reps, &mut || {
            let y = quorum::cuda::ops::matmul::sgemm(
                &tc, &a, &b, None, size, size, size, false, false, 1.0, 0.0, 1,
            )
            .unwrap();
            tc.release(y, &[]);
        });
        let tflops = 2.0 * (size as f64).powi(3) / (ms * 1e-3) / 1e12;
        println!("BENCH tf32_gemm_{size} {tflops:.2} TFLOP/s ({ms:.3} ms)");
        tc.release(a, &[]);
        tc.release(b, &[]);
    }
    // Each tensor-core tile forced, at transformer shapes (bert-base's projections at batch 8,
    // sequence 128) and the square one: which tile the cost model should pick under TF32.
    use quorum::cuda::ops::matmul::plan::Plan;
    use quorum::cuda::ops::matmul::tile::Variant;
    for (m, n, k) in [
        (1024usize, 768usize, 768usize),
        (1024, 3072, 768),
        (1024, 768, 3072),
        (4096, 4096, 4096),
    ] {
        let a = tc.upload(&rand_f32(7, &[m, k])).unwrap();
        let b = tc.upload(&rand_f32(8, &[k, n])).unwrap();
        // Big: the asynchronous copies where the rows allow them; Tf32Big: the register-staged
        // 128×128 tile, forced; Small: the 64×64 one.
        for v in [Variant::Big, Variant::Tf32Big, Variant::Small] {
            let plan = Plan::new(v, k, 1);
            let ms = time_ms(&tc, 3, 20, &mut || {
                let y = quorum::cuda::ops::matmul::sgemm_plan(
                    &tc,
                    &a,
                    &b,
                    None,
                    m,
                    n,
                    k,
                    false,
                    false,
                    1.0,
                    0.0,
                    1,
                    Some(plan),
                )
                .unwrap();
                tc.release(y, &[]);
            });
            let tflops = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
            println!("BENCH tf32_tile_{v:?}_{m}x{n}x{k} {tflops:.2} TFLOP/s ({ms:.3} ms)");
        }
        tc.release(a, &[]);
        tc.release(b, &[]);
    }
    drop(tc);

    // Batched MatMul [16,64,128] x [16,128,64].
    let a = run.upload(&rand_f32(5, &[16, 64, 128])).unwrap();
    let b = run.upload(&rand_f32(6, &[16, 128, 64])).unwrap();
    let ms = time_ms(&run, 10, 200, &mut || {
        let y = quorum::cuda::ops::matmul::sgemm(
            &run, &a, &b, None, 64, 64, 128, false, false, 1.0, 0.0, 16,
        )
        .unwrap();
        run.release(y, &[]);
    });
    println!(
        "BENCH batched_matmul_16x64x128x64 {:.1} us (device time)",
        ms * 1e3
    );
    // The same with the host launch cost: wall time per call, synchronizing each time.
    let t = Instant::now();
    for _ in 0..200 {
        let y = quorum::cuda::ops::matmul::sgemm(
            &run, &a, &b, None, 64, 64, 128, false, false, 1.0, 0.0, 16,
        )
        .unwrap();
        run.synchronize().unwrap();
        run.release(y, &[]);
    }
    println!(
        "BENCH batched_matmul_16x64x128x64_wall {:.1} us (per call incl. launch + sync)",
        t.elapsed().as_secs_f64() / 200.0 * 1e6
    );
    println!("BENCH counters {:?}", counters.snapshot());
}

/// f16 and bf16 GEMM: square and at bert-base's projection shapes (batch 8, sequence 128), half operands and
/// outputs, f32 sums. On the tensor cores by default; `QUORUM_CUDA_F16=cores` runs the same on the
/// CUDA cores (run.sh runs this test both ways).
#[test]
#[ignore = "benchmark: run with --ignored on a GPU machine"]
fn bench_f16_gemm() {
    let device = Device::get().expect("a CUDA device");
    let counters = Counters::default();
    let run = Run::new(&device, &counters, None).unwrap();
    let cores = std::env::var("QUORUM_CUDA_F16").is_ok_and(|v| v == "cores");
    let on = if cores { "cuda_cores" } else { "tensor_cores" };
    for (half, label) in [(quorum::DType::F16, "f16"), (quorum::DType::BF16, "bf16")] {
        if crate::harness::bf16_off(half) {
            continue;
        }
        for (m, n, k) in [
            (1024usize, 1024usize, 1024usize),
            (2048, 2048, 2048),
            (4096, 4096, 4096),
            (8192, 8192, 8192),
            (1024, 768, 768),
            (1024, 3072, 768),
            (1024, 768, 3072),
        ] {
            let a = run
                .upload(&crate::elementwise::as_dtype(&rand_f32(3, &[m, k]), half))
                .unwrap();
            let b = run
                .upload(&crate::elementwise::as_dtype(&rand_f32(4, &[k, n]), half))
                .unwrap();
            let reps = if m * n * k >= 1 << 36 { 10 } else { 30 };
            // `trans_b`: B along k (Gemm's transB, a Linear's weight as exported), the layout
            // `wgmma` reads with one instruction a k-step; timed for the large squares.
            let timed = |trans_b: bool| {
                let ms = time_ms(&run, 3, reps, &mut || {
                    let y = quorum::cuda::ops::matmul::sgemm(
                        &run, &a, &b, None, m, n, k, false, trans_b, 1.0, 0.0, 1,
                    )
                    .unwrap();
                    run.release(y, &[]);
                });
                (ms, 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12)
            };
            let (ms, tflops) = timed(false);
            println!("BENCH {label}_gemm_{on}_{m}x{n}x{k} {tflops:.2} TFLOP/s ({ms:.3} ms)");
            if m == n && n == k && m >= 4096 {
                let (ms, tflops) = timed(true);
                println!(
                    "BENCH {label}_gemm_{on}_{m}x{n}x{k}_transb {tflops:.2} TFLOP/s ({ms:.3} ms)"
                );
            }
            // Each plan forced at the transformer shapes: what a tensor-core refit of the cost
            // model needs (Big becomes the asynchronous tile, Small the register-staged one).
            if m == 1024 && !cores && label == "f16" {
                use quorum::cuda::ops::matmul::plan::Plan;
                use quorum::cuda::ops::matmul::tile::Variant;
                for (v, want) in [
                    (Variant::Big, 1),
                    (Variant::Big, 2),
                    (Variant::Big, 4),
                    (Variant::Small, 1),
                    (Variant::Small, 2),
                ] {
                    let plan = Plan::new(v, k, want);
                    let ms = time_ms(&run, 3, reps, &mut || {
                        let y = quorum::cuda::ops::matmul::sgemm_plan(
                            &run,
                            &a,
                            &b,
                            None,
                            m,
                            n,
                            k,
                            false,
                            false,
                            1.0,
                            0.0,
                            1,
                            Some(plan),
                        )
                        .unwrap();
                        run.release(y, &[]);
                    });
                    let tflops = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
                    println!(
                        "BENCH f16_plan_{v:?}x{}_{m}x{n}x{k} {tflops:.2} TFLOP/s ({ms:.3} ms)",
                        plan.nsplit
                    );
                }
            }
            run.release(a, &[]);
            run.release(b, &[]);
        }
    }
}

/// Median wall milliseconds of whole `Session::run` calls (inputs uploaded, outputs downloaded).
fn session_ms(case: crate::harness::Case, iters: usize) -> (f64, quorum::CounterSnapshot) {
    let options = quorum::SessionOptions {
        providers: vec![quorum::Provider::Cuda, quorum::Provider::Cpu],
        ..Default::default()
    };
    let (s, feeds) = case.session(options);
    for _ in 0..5 {
        s.run(feeds.clone()).unwrap();
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let f = feeds.clone();
        let t = Instant::now();
        s.run(f).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    (median(times), s.counters())
}

#[test]
#[ignore = "benchmark: run with --ignored on a GPU machine"]
fn bench_sessions() {
    use crate::harness::Case;
    // A ResNet layer: N1 C64 56×56, K64 3×3, pads 1, weights resident after the first run.
    let conv = Case::new("Conv")
        .attr_ints("pads", &[1, 1, 1, 1])
        .input(rand_f32(7, &[1, 64, 56, 56]))
        .constant(rand_f32(8, &[64, 64, 3, 3]))
        .constant(rand_f32(9, &[64]));
    let (ms, c) = session_ms(conv, 50);
    let gflop = 2.0 * 64.0 * 56.0 * 56.0 * 64.0 * 9.0 / 1e9;
    println!(
        "BENCH conv_resnet_layer_session {ms:.3} ms per run ({:.2} TFLOP/s incl. transfers; weight bytes uploaded {})",
        gflop / ms,
        c.weight_bytes_uploaded
    );
    let mm = Case::new("MatMul")
        .input(rand_f32(10, &[16, 64, 128]))
        .input(rand_f32(11, &[16, 128, 64]));
    let (ms, _) = session_ms(mm, 200);
    println!(
        "BENCH batched_matmul_session {:.1} us per run (incl. transfers)",
        ms * 1e3
    );
}

#[test]
#[ignore = "benchmark: run with --ignored on a GPU machine"]
fn bench_gemm_plans() {
    // Every tiled plan (tile × split count) at the GEMM shapes of the issue-16 models, timed, beside
    // the cost model's estimate: the table the model's rates are fitted to. One line per plan:
    // `BENCH gemm_plan MxNxK nbB variant splits kc measured_us model_us [chosen]`, then per shape the
    // chosen plan's time over the best measured one.
    use quorum::cuda::ops::matmul::plan::{Dims, candidates, choose, cost};
    let device = Device::get().expect("a CUDA device");
    let sms = device.ctx.info.multiprocessors.max(1) as usize;
    let counters = Counters::default();
    let run = Run::new(&device, &counters, None).unwrap();
    let shapes: &[(usize, usize, usize, usize)] = &[
        // BERT-base, sequence 128, batch 1 and 8: QKV/out projections, FFN up, FFN down.
        (128, 768, 768, 1),
        (128, 3072, 768, 1),
        (128, 768, 3072, 1),
        (1024, 768, 768, 1),
        (1024, 3072, 768, 1),
        (1024, 768, 3072, 1),
        // Attention at batch 8: 96 heads of 128×64 · 64×128 and 128×128 · 128×64.
        (128, 128, 64, 96),
        (128, 64, 128, 96),
        // ViT-small (197 tokens, width 384) and convnext-tiny stage 1 and 3 (NHWC Linear layers).
        (197, 384, 384, 1),
        (197, 1536, 384, 1),
        (197, 384, 1536, 1),
        (3136, 384, 96, 1),
        (3136, 96, 384, 1),
        (196, 1536, 384, 1),
        // ResNet-50 convolutions as GEMMs (weights × im2col), batch 1 and 8.
        (64, 3136, 576, 1),
        (128, 784, 1152, 1),
        (256, 196, 2304, 1),
        (512, 49, 4608, 1),
        (64, 3136, 576, 8),
        (256, 196, 2304, 8),
        (512, 49, 4608, 8),
        (2048, 49, 512, 8),
        // Squares.
        (1024, 1024, 1024, 1),
        (2048, 2048, 2048, 1),
    ];
    let (mut worst, mut sum_ratio) = (1f64, 0f64);
    for &(m, n, k, nb) in shapes {
        let d = Dims {
            m,
            n,
            k,
            nb,
            es: 4,
            splittable: true,
            tc_async: false,
        };
        let a = run.upload(&rand_f32(11, &[m, k])).unwrap();
        let b = run.upload(&rand_f32(12, &[nb, k, n])).unwrap();
        let chosen = choose(&d, sms);
        let reps = if 2 * m * n * k * nb > 4_000_000_000 {
            10
        } else {
            40
        };
        let (mut best, mut chosen_us) = (f64::INFINITY, f64::NAN);
        for p in candidates(&d) {
            let us = 1e3
                * time_ms(&run, 2, reps, &mut || {
                    let y = quorum::cuda::ops::matmul::sgemm_plan(
                        &run,
                        &a,
                        &b,
                        None,
                        m,
                        n,
                        k,
                        false,
                        false,
                        1.0,
                        0.0,
                        nb,
                        Some(p),
                    )
                    .unwrap();
                    run.release(y, &[]);
                });
            best = best.min(us);
            let mark = if p == chosen {
                chosen_us = us;
                " chosen"
            } else {
                ""
            };
            println!(
                "BENCH gemm_plan {m}x{n}x{k} nb{nb} {:?} {} {} {us:.2} {:.2}{mark}",
                p.variant,
                p.nsplit,
                p.kc,
                cost(&p, &d, sms)
            );
        }
        let ratio = chosen_us / best;
        worst = worst.max(ratio);
        sum_ratio += ratio.ln();
        println!(
            "BENCH gemm_plan_choice {m}x{n}x{k} nb{nb} chosen {chosen_us:.2} us, best {best:.2} us ({ratio:.2}×)"
        );
        run.release(a, &[]);
        run.release(b, &[]);
    }
    println!(
        "BENCH gemm_plan_summary chosen/best geomean {:.3}, worst {worst:.2} over {} shapes",
        (sum_ratio / shapes.len() as f64).exp(),
        shapes.len()
    );
}

/// Host-to-host transfers of 256 MiB each way, the figure issue 40 asks for (at least 40 GB/s):
/// the bus alone (pinned memory, our driver's copies timed with events), then a session's Relu
/// over 256 MiB eager and replayed from a graph, each run's wall time with the host's share of it
/// from the counters (staging, waiting for the device, rebuilding the output). `QUORUM_CUDA_PIPELINE`
/// chooses the host side's path (run it once with `off` for the path before pieces).
#[test]
#[ignore = "benchmark: run with --ignored on a GPU machine"]
fn bench_transfers() {
    use quorum::cuda::driver::PinnedMemory;
    use quorum::session::GraphCapture;
    let device = Device::get().expect("a CUDA device");
    let counters = Counters::default();
    let run = Run::new(&device, &counters, None).unwrap();
    let n = 64usize << 20;
    let bytes = 4 * n;
    let gb = bytes as f64 / 1e9;
    let d = run.alloc(quorum::DType::F32, &[n]).unwrap();
    let mut pinned = PinnedMemory::alloc(&device.ctx, bytes).unwrap();
    pinned.as_mut_slice().fill(0x3c);
    let up = time_ms(&run, 2, 10, &mut || {
        run.stream()
            .upload(d.ptr(), &pinned.as_slice()[..bytes])
            .unwrap()
    });
    let down = time_ms(&run, 2, 10, &mut || {
        run.stream()
            .download(&mut pinned.as_mut_slice()[..bytes], d.ptr())
            .unwrap()
    });
    println!(
        "BENCH transfer_bus_256mib host->device {up:.3} ms ({:.1} GB/s), device->host {down:.3} ms ({:.1} GB/s), pinned",
        gb / up * 1e3,
        gb / down * 1e3
    );
    drop(pinned);
    run.release(d, &[]);
    drop(run);

    let relu = crate::models::model(
        vec![crate::models::node("Relu", &["x"], "y")],
        &["x"],
        &["y"],
        vec![],
    );
    let x = rand_f32(21, &[n]);
    for capture in [GraphCapture::Off, GraphCapture::On] {
        let s = quorum::Session::from_bytes(
            &relu,
            quorum::SessionOptions {
                providers: vec![quorum::Provider::Cuda, quorum::Provider::Cpu],
                graph_capture: capture,
                ..Default::default()
            },
        )
        .unwrap();
        let feeds = vec![("x".to_string(), quorum::Value::Tensor(x.clone()))];
        for _ in 0..3 {
            s.run(feeds.clone()).unwrap();
        }
        let before = s.counters();
        let iters = 10;
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            let f = feeds.clone();
            let t = Instant::now();
            s.run(f).unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let after = s.counters();
        let per = |a: u64, b: u64| (a - b) as f64 / 1e6 / iters as f64;
        let ms = median(times);
        println!(
            "BENCH transfer_relu_256mib capture {capture:?}: {ms:.2} ms host to host ({:.1} GB/s each way, in + out over the time); per run: staging {:.2} ms, waiting {:.2} ms, rebuilding {:.2} ms; {} graph replays",
            2.0 * gb / ms * 1e3,
            per(after.stage_nanos, before.stage_nanos),
            per(after.wait_nanos, before.wait_nanos),
            per(after.readback_nanos, before.readback_nanos),
            after.graph_replays - before.graph_replays,
        );
    }

    // IO binding: pinned tensors in and out (no host copy either way), and the value left on the
    // device (the run alone, for a pipeline of models).
    use quorum::session::Bound;
    let s = quorum::Session::from_bytes(
        &relu,
        quorum::SessionOptions {
            providers: vec![quorum::Provider::Cuda, quorum::Provider::Cpu],
            ..Default::default()
        },
    )
    .unwrap();
    let t = Instant::now();
    let xp = std::sync::Arc::new(s.pin(x.clone()).unwrap());
    let mut yp = s.pin(rand_f32(22, &[n])).unwrap();
    let pin_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut times = Vec::new();
    for i in 0..13 {
        let t = Instant::now();
        s.run_into(
            vec![("x".into(), Bound::Pinned(xp.clone()))],
            &mut [("y", &mut yp)],
        )
        .unwrap();
        if i >= 3 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let ms = median(times);
    println!(
        "BENCH transfer_relu_256mib pinned in and out (run_into): {ms:.2} ms host to host ({:.1} GB/s each way); pinning both took {pin_ms:.1} ms once",
        2.0 * gb / ms * 1e3
    );
    let d = s.to_device(&x).unwrap();
    let mut times = Vec::new();
    for i in 0..13 {
        let t = Instant::now();
        let out = s
            .run_bound(vec![("x".into(), Bound::Device(d.clone()))], &["y"])
            .unwrap();
        if i >= 3 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        drop(out);
    }
    println!(
        "BENCH transfer_relu_256mib device in and out (run_bound): {:.3} ms a run",
        median(times)
    );
}
