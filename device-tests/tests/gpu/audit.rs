//! The launch audit (`quorum::cuda` `audit.rs`): every kernel's declared accesses are what the
//! command log records and the stream checker judges, so the audit must catch a declaration that
//! leaves out a byte the kernel writes or reads, and an audited run must give the numbers of an
//! unaudited one.
use quorum::cuda::driver::Arg;
use quorum::cuda::ops::thread_index;
use quorum::cuda::ptx::{self, Kernel, Space, Ty};
use quorum::{DType, Provider, Session, SessionOptions, Tensor, Value};

use crate::harness::{POISON_NAN, on_cpu, rand_f32};
use crate::models::{model, node, tensor_proto};

/// `y[i] = x[i] + x[i + 1]` for `i < n`: reads `n + 1` floats of `x`, writes `n` of `y`.
fn pair_sum(cc: (i32, i32)) -> String {
    let mut k = Kernel::new("pair_sum");
    let y = k.param_ptr("y");
    let x = k.param_ptr("x");
    let n = k.param("n", Ty::U32);
    let i = thread_index(&mut k, n);
    let xa = k.addr(x, i, 4);
    let a = k.ld(Space::Global, Ty::F32, xa, 0);
    let b = k.ld(Space::Global, Ty::F32, xa, 4);
    let s = k.add(Ty::F32, a, b);
    let ya = k.addr(y, i, 4);
    k.st(Space::Global, ya, 0, s);
    ptx::module(cc, &[k])
}

/// Runs `pair_sum` audited over 1000 elements with the declarations `decl(x, y)`; the result of
/// the launch, `y` read back and `x` as uploaded.
fn audited_pair_sum(
    decl: impl Fn(u64, u64) -> [Arg; 2],
) -> (Result<(), String>, Vec<f64>, Vec<f64>) {
    use quorum::cuda::{Counters, Device, Run};
    let device = Device::get().unwrap();
    let counters = Counters::default();
    let n = 1000usize;
    let run = Run::new(&device, &counters, Some(POISON_NAN)).unwrap();
    run.audit_launches();
    let x = run.upload(&rand_f32(71, &[n + 1])).unwrap();
    let y = run.alloc(DType::F32, &[n]).unwrap();
    let text = pair_sum(run.cc());
    let [dx, dy] = decl(x.ptr(), y.ptr());
    let r = run
        .launch(
            &text,
            "pair_sum",
            ((n as u32).div_ceil(256), 1, 1),
            (256, 1, 1),
            0,
            &[dy, dx, Arg::U32(n as u32)],
        )
        .map_err(|e| format!("{e:?}"));
    let yv = run.download(&y).unwrap().to_f64_vec().unwrap();
    let xv = run.download(&x).unwrap().to_f64_vec().unwrap();
    (r, yv, xv)
}

#[test]
fn the_audit_passes_a_true_declaration_and_leaves_the_launchs_result() {
    if on_cpu() {
        return;
    }
    let n = 1000;
    let (r, y, x) = audited_pair_sum(|x, y| [Arg::In(x, (n + 1) * 4), Arg::Out(y, n * 4)]);
    r.unwrap();
    let want = rand_f32(71, &[n + 1]).to_f64_vec().unwrap();
    assert_eq!(x, want, "the audit left the input changed");
    for i in 0..n {
        // Both addends are f32, so the f32 sum is the f64 sum rounded once.
        assert_eq!(y[i], (want[i] + want[i + 1]) as f32 as f64, "element {i}");
    }
}

#[test]
fn the_audit_catches_a_write_left_out_of_the_declaration() {
    if on_cpu() {
        return;
    }
    let n = 1000;
    let (r, _, _) = audited_pair_sum(|x, y| [Arg::In(x, (n + 1) * 4), Arg::Out(y, (n - 1) * 4)]);
    let e = r.unwrap_err();
    assert!(
        e.contains("pair_sum") && e.contains("outside its declared writes"),
        "{e}"
    );
    // Declared as a read: the write is undeclared too.
    let (r, _, _) = audited_pair_sum(|x, y| [Arg::In(x, (n + 1) * 4), Arg::In(y, n * 4)]);
    assert!(r.unwrap_err().contains("outside its declared writes"));
}

#[test]
fn the_audit_catches_a_read_left_out_of_the_declaration() {
    if on_cpu() {
        return;
    }
    let n = 1000;
    // The last element the kernel reads (x[n]) is left out.
    let (r, y, _) = audited_pair_sum(|x, y| [Arg::In(x, n * 4), Arg::Out(y, n * 4)]);
    let e = r.unwrap_err();
    assert!(e.contains("reads memory it does not declare"), "{e}");
    // The memory is as the first launch left it, poison gone.
    assert!(
        y.iter().all(|v| v.is_finite()),
        "the audit left poison behind"
    );
}

/// x [4, 8192] → MatMul (a split-K GEMM: four rows, long K), LayerNormalization of few long rows
/// (statistics in chunks) and ReduceSum of everything (partials, merged): the kernels with scratch.
fn scratch_model() -> Vec<u8> {
    model(
        vec![
            node("MatMul", &["x", "w"], "t"),
            node("LayerNormalization", &["x", "g", "b"], "n"),
            node("ReduceSum", &["n"], "r"),
            node("Add", &["t", "r"], "y"),
        ],
        &["x"],
        &["y"],
        vec![
            tensor_proto("w", &rand_f32(72, &[8192, 64])),
            tensor_proto("g", &rand_f32(73, &[8192])),
            tensor_proto("b", &rand_f32(74, &[8192])),
        ],
    )
}

fn run_scratch_model(audit: bool, streams: usize) -> Tensor {
    let s = Session::from_bytes(
        &scratch_model(),
        SessionOptions {
            providers: vec![Provider::Cuda],
            poison_device_buffers: Some(POISON_NAN),
            streams,
            audit_launches: audit,
            ..Default::default()
        },
    )
    .unwrap();
    let x = rand_f32(75, &[4, 8192]);
    let mut out = s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
    out.remove(0).1.into_tensor().unwrap()
}

/// The kernels behind split-K, chunked norms and reductions declare what they touch, scratch
/// included, and an audited run gives the unaudited run's numbers bit for bit.
#[test]
fn kernels_with_scratch_pass_the_audit_and_keep_their_numbers() {
    if on_cpu() {
        return;
    }
    let plain = run_scratch_model(false, 2);
    let audited = run_scratch_model(true, 2);
    assert!(plain.to_f64_vec().unwrap().iter().all(|v| v.is_finite()));
    assert_eq!(audited, plain);
}
