//! The shape of wgpu's streaming kernels, measured (ignored by default; `run.sh bench` runs it with
//! the other benchmarks): a 64 MiB f32 Add by the production kernel and by variants of its shape
//! (vec4s per thread, workgroup size), each timed on the device's clock by timestamp queries (the
//! kernel alone, as CUDA's events time its Add in `bench.rs`) and on the host around batches of
//! ten in one submission (the kernels and the gaps between them); beside them a plain vec4 copy
//! kernel and wgpu's own buffer copy, and host-to-device and device-to-host transfers of 256 MiB.
//! Every variant's output is checked against the host's sum before it is timed. Nothing here
//! asserts a speed.
use std::time::Instant;

use quorum::counters::Counters;
use quorum::wgpu::ops::elementwise;
use quorum::wgpu::{Device, Run, WTensor, wgsl};
use quorum::{DType, Tensor};

use crate::harness::rand_f32;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median kernel milliseconds of the dispatches `f` queues under `label`, from timestamps (after
/// `warm` untimed calls), `reps` calls each submitted and waited for alone.
fn kernel_ms(run: &Run, counters: &Counters, label: &str, f: &mut dyn FnMut()) -> f64 {
    run.label("warm-up");
    for _ in 0..3 {
        f();
    }
    run.synchronize().unwrap();
    let mut times = Vec::new();
    for _ in 0..20 {
        let before = counters.device_time.lock().unwrap().get(label).copied();
        run.label(label);
        f();
        run.synchronize().unwrap();
        let after = counters.device_time.lock().unwrap()[label];
        let ns = after.nanos - before.map_or(0, |b| b.nanos);
        times.push(ns as f64 / 1e6);
    }
    median(times)
}

/// Median host milliseconds per call of `f`, over batches of ten calls in one submission.
fn batch_ms(run: &Run, f: &mut dyn FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    run.synchronize().unwrap();
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        for _ in 0..10 {
            f();
        }
        run.synchronize().unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3 / 10.0);
    }
    median(times)
}

/// An f32 Add over `quads` vec4s with `per` vec4s per thread (thread `t` takes `t`, `t + T`, ...,
/// `T` the number of threads, so that neighbouring threads read neighbouring words) in workgroups
/// of `wg` threads.
fn add_variant(run: &Run, a: &WTensor, b: &WTensor, per: u32, wg: u32) -> WTensor {
    let quads = (a.len() / 4) as u32;
    let threads = quads.div_ceil(per);
    let src = format!(
        "{}@compute @workgroup_size({wg})\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n\
         let t = gid.x + gid.y * nwg.x * {wg}u;\n\
         if (t >= P[1]) {{ return; }}\n\
         for (var k = 0u; k < {per}u; k++) {{\n\
           let i = t + k * P[1];\n\
           if (i < P[0]) {{\n\
             o0[i] = bitcast<vec4<u32>>(bitcast<vec4<f32>>(i0[i]) + bitcast<vec4<f32>>(i1[i]));\n\
           }}\n\
         }}\n}}\n",
        wgsl::header_typed(&["vec4<u32>"], &["vec4<u32>", "vec4<u32>"]),
    );
    let y = run.alloc(DType::F32, &a.shape).unwrap();
    let groups = threads.div_ceil(wg);
    let max = run.device.limits.max_compute_workgroups_per_dimension;
    let x = groups.min(max);
    run.dispatch(
        &format!("add_v{per}_wg{wg}"),
        &src,
        &[&y],
        &[a, b],
        vec![quads, threads],
        [x, groups.div_ceil(x), 1],
    )
    .unwrap();
    y
}

/// A vec4 copy kernel (one vec4 per thread, workgroups of 256).
fn copy_kernel(run: &Run, a: &WTensor) -> WTensor {
    let quads = (a.len() / 4) as u32;
    let src = format!(
        "{}{}",
        wgsl::header_typed(&["vec4<u32>"], &["vec4<u32>"]),
        wgsl::entry_1d("o0[i] = i0[i];")
    );
    let y = run.alloc(DType::F32, &a.shape).unwrap();
    run.dispatch_n("copy_x4", &src, &[&y], &[a], vec![quads, 0], quads as usize)
        .unwrap();
    y
}

fn assert_sum(run: &Run, y: &WTensor, a: &Tensor, b: &Tensor, what: &str) {
    let got = run.download(y).unwrap().to_f64_vec().unwrap();
    let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    for (k, g) in got.iter().enumerate().step_by(997) {
        assert_eq!(*g as f32, a[k] as f32 + b[k] as f32, "{what}: element {k}");
    }
}

#[test]
#[ignore = "benchmark: run with --ignored on a GPU machine"]
fn bench_wgpu_streaming_shapes() {
    let device = Device::get().expect("a wgpu adapter");
    if !device.caps.timestamps {
        println!("BENCH wgpu_shapes skipped: the adapter has no timestamp queries");
        return;
    }
    let n = 16 << 20;
    let (ha, hb) = (rand_f32(1, &[n]), rand_f32(2, &[n]));
    let bytes = 3.0 * n as f64 * 4.0;
    let tbs = |ms: f64| bytes / (ms * 1e-3) / 1e12;

    let timed_counters = Counters::default();
    let timed = Run::new(&device, &timed_counters, None);
    assert!(timed.time_kernels());
    let plain_counters = Counters::default();
    let plain = Run::new(&device, &plain_counters, None);
    let (ta, tb) = (timed.upload(&ha).unwrap(), timed.upload(&hb).unwrap());
    let (pa, pb) = (plain.upload(&ha).unwrap(), plain.upload(&hb).unwrap());

    let y = elementwise::binary(&timed, quorum::ops::map_op::Arith::Add, &ta, &tb).unwrap();
    assert_sum(&timed, &y, &ha, &hb, "production Add");
    timed.release(y);
    let k = kernel_ms(&timed, &timed_counters, "prod", &mut || {
        let y = elementwise::binary(&timed, quorum::ops::map_op::Arith::Add, &ta, &tb).unwrap();
        timed.release(y);
    });
    let h = batch_ms(&plain, &mut || {
        let y = elementwise::binary(&plain, quorum::ops::map_op::Arith::Add, &pa, &pb).unwrap();
        plain.release(y);
    });
    println!(
        "BENCH wgpu_add_64mib_kernel {k:.4} ms {:.3} TB/s ({:.0}% of 4.0) | batched {h:.4} ms {:.3} TB/s (production kernel)",
        tbs(k),
        tbs(k) / 4.0 * 100.0,
        tbs(h)
    );

    for (per, wg) in [
        (1, 64),
        (1, 128),
        (1, 256),
        (1, 512),
        (1, 1024),
        (2, 256),
        (4, 256),
        (8, 256),
        (2, 128),
        (4, 128),
    ] {
        let y = add_variant(&timed, &ta, &tb, per, wg);
        assert_sum(&timed, &y, &ha, &hb, &format!("variant {per}x{wg}"));
        timed.release(y);
        let label = format!("v{per}x{wg}");
        let k = kernel_ms(&timed, &timed_counters, &label, &mut || {
            let y = add_variant(&timed, &ta, &tb, per, wg);
            timed.release(y);
        });
        let h = batch_ms(&plain, &mut || {
            let y = add_variant(&plain, &pa, &pb, per, wg);
            plain.release(y);
        });
        println!(
            "BENCH wgpu_add_variant vec4s_per_thread={per} workgroup={wg}: kernel {k:.4} ms {:.3} TB/s | batched {h:.4} ms {:.3} TB/s",
            tbs(k),
            tbs(h)
        );
    }

    // Copies: 2 × 64 MiB moved.
    let k = kernel_ms(&timed, &timed_counters, "copy", &mut || {
        let y = copy_kernel(&timed, &ta);
        timed.release(y);
    });
    let copy_tbs = |ms: f64| 2.0 * n as f64 * 4.0 / (ms * 1e-3) / 1e12;
    println!(
        "BENCH wgpu_copy_kernel_64mib {k:.4} ms {:.3} TB/s",
        copy_tbs(k)
    );
    let dst = plain.alloc(DType::F32, &[n]).unwrap();
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let mut enc = device
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        for _ in 0..10 {
            enc.copy_buffer_to_buffer(pa.buf.buffer(), 0, dst.buf.buffer(), 0, n as u64 * 4);
        }
        let idx = device.queue.submit([enc.finish()]);
        device
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(idx),
                timeout: None,
            })
            .unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3 / 10.0);
    }
    let ms = median(times);
    println!(
        "BENCH wgpu_buffer_copy_64mib {ms:.4} ms {:.3} TB/s (copy_buffer_to_buffer, batches of 10)",
        copy_tbs(ms)
    );

    // Transfers of 256 MiB (or the adapter's largest buffer), host memory to device and back
    // (each waited for).
    let limit = device.limits.max_storage_buffer_binding_size.min(256 << 20);
    let big = rand_f32(3, &[(limit / 4) as usize]);
    let mb = limit as f64 / 1e6;
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        let d = plain.upload(&big).unwrap();
        plain.synchronize().unwrap();
        up.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let back = plain.download(&d).unwrap();
        down.push(t.elapsed().as_secs_f64());
        assert_eq!(back.shape(), big.shape());
        let (b, w) = (back.to_f64_vec().unwrap(), big.to_f64_vec().unwrap());
        assert!(
            (0..b.len()).step_by(4099).all(|k| b[k] == w[k]),
            "the download differs"
        );
        plain.release(d);
    }
    println!(
        "BENCH wgpu_upload {:.0} MB: {:.2} GB/s | download {:.2} GB/s (medians of 5, each waited for)",
        mb,
        mb / median(up) / 1e3,
        mb / median(down) / 1e3
    );
}
