//! What wgpu must run on its own device, not hand to the CPU: one representative form per family
//! (the family suites run every case on wgpu too, but there a decline only prints). Where wgpu is
//! not usable these tests have nothing to check and pass.
use quorum::{DType, Provider, Tensor};

use crate::harness::{Case, accelerators, i64s, rand_f32, rand_range};

fn wgpu_here() -> bool {
    accelerators().contains(&Provider::Wgpu)
}

/// `t`'s values as `d` (rounded, truncated or tested for zero as `Tensor::from_f64s` does).
fn conv(t: Tensor, d: DType) -> Tensor {
    Tensor::from_f64s(d, t.shape(), t.to_f64_vec().unwrap()).unwrap()
}

fn f16(t: Tensor) -> Tensor {
    conv(t, DType::F16)
}

/// The forms wgpu claims and computes on the device, each judged against both oracles.
fn on_device_cases() -> Vec<Case> {
    let x = || rand_f32(11, &[3, 4, 5]);
    let mut v = vec![
        Case::new("Add").input(x()).input(rand_f32(12, &[4, 1])),
        Case::new("Mul").input(x()).constant(rand_f32(13, &[5])),
        Case::new("Div")
            .input(x())
            .input(rand_range(14, &[3, 4, 5], 0.5, 2.0)),
        Case::new("Max")
            .input(x())
            .input(rand_f32(15, &[5]))
            .input(rand_f32(16, &[4, 5])),
        Case::new("Relu").input(x()),
        Case::new("Exp").input(x()),
        Case::new("Erf").input(x()),
        Case::new("Tanh").input(x()),
        Case::new("Sigmoid").input(x()),
        Case::new("Sqrt").input(rand_range(17, &[64], 0.0, 9.0)),
        Case::new("Pow")
            .input(rand_range(18, &[64], 0.1, 3.0))
            .input(rand_f32(19, &[64])),
        Case::new("LeakyRelu").attr_f("alpha", 0.3).input(x()),
        Case::new("Gelu")
            .opset(20)
            .attr_s("approximate", "tanh")
            .input(x()),
        Case::new("Less").input(x()).input(rand_f32(20, &[5])),
        Case::new("Where")
            .input(conv(rand_f32(21, &[4, 5]), DType::Bool))
            .input(x())
            .input(rand_f32(22, &[5])),
        Case::new("Add")
            .input(f16(x()))
            .input(f16(rand_f32(23, &[5]))),
        Case::new("Add")
            .input(conv(rand_range(24, &[40], -1e3, 1e3), DType::I32))
            .input(conv(rand_range(25, &[40], -1e3, 1e3), DType::I32)),
        Case::new("Cast")
            .attr_i("to", DType::F16.onnx() as i64)
            .input(x()),
        Case::new("Cast")
            .attr_i("to", DType::I32.onnx() as i64)
            .input(rand_range(26, &[50], -1e4, 1e4)),
        Case::new("Transpose")
            .attr_ints("perm", &[2, 0, 1])
            .input(x()),
        Case::new("Concat")
            .attr_i("axis", 1)
            .input(x())
            .input(rand_f32(27, &[3, 2, 5])),
        Case::new("Slice")
            .input(x())
            .constant(i64s(&[2], vec![3, -1]))
            .constant(i64s(&[2], vec![0, 0]))
            .constant(i64s(&[2], vec![2, 0]))
            .constant(i64s(&[2], vec![1, -2])),
        Case::new("Gather")
            .attr_i("axis", 1)
            .input(x())
            .constant(i64s(&[2, 2], vec![3, 0, -1, 1])),
        Case::new("Pad")
            .attr_s("mode", "reflect")
            .input(x())
            .constant(i64s(&[6], vec![0, 1, 2, 0, 2, 1])),
        Case::new("Expand")
            .input(rand_f32(28, &[4, 1]))
            .constant(i64s(&[3], vec![2, 4, 3])),
    ];
    v.extend(crate::wgpu_more::on_device_cases());
    v
}

#[test]
fn wgpu_runs_each_family_on_its_device() {
    if !wgpu_here() {
        return;
    }
    for case in on_device_cases() {
        let what = case.describe();
        assert!(
            case.ran_on(Provider::Wgpu),
            "wgpu did not run {what} on its device"
        );
    }
}

/// The check above catches a form wgpu hands to the CPU: float Mod is declined (an exact
/// remainder needs a fused multiply-add WGSL does not promise), so it must not count as run there.
#[test]
fn a_declined_form_is_not_counted_as_run_on_wgpu() {
    if !wgpu_here() {
        return;
    }
    let case = Case::new("Mod")
        .attr_i("fmod", 1)
        .input(rand_f32(1, &[8]))
        .input(rand_range(2, &[8], 0.5, 2.0));
    assert!(!case.ran_on(Provider::Wgpu));
}

/// A buffer handed back mid-run is reused by the run's next allocation of its size even while the
/// commands that read it are not submitted yet, or submitted and still running (the one queue
/// orders them): a chain of 40 Adds releasing each input uses a couple of buffers, not 40, and its
/// result is bit for bit the host's f32 chain, whether the chain goes to the queue as the run
/// collects it (`wgpu::run::SUBMIT_EVERY` commands at a time) or in one submission per Add. Before the fixes every released buffer stayed out of reuse until
/// the run ended, then every buffer a submission had used.
#[rstest::rstest]
#[case::as_collected(false)]
#[case::a_submission_per_add(true)]
fn released_buffers_are_reused_within_a_run(#[case] submit_each: bool) {
    use quorum::counters::Counters;
    use quorum::wgpu::ops::elementwise;
    use quorum::wgpu::{Device, Run};
    if !wgpu_here() {
        return;
    }
    let device = Device::get().unwrap();
    let counters = Counters::default();
    let run = Run::new(&device, &counters, Some(0xff));
    let n = 1 << 16;
    let x = rand_f32(21, &[n]);
    let step = rand_f32(22, &[n]);
    let mut acc = run.upload(&x).unwrap();
    let s = run.upload(&step).unwrap();
    let mut ids = std::collections::HashSet::new();
    for _ in 0..40 {
        let y = elementwise::binary(&run, quorum::ops::map_op::Arith::Add, &acc, &s).unwrap();
        ids.insert(y.buf.id);
        run.release(acc);
        acc = y;
        if submit_each {
            run.synchronize().unwrap();
        }
    }
    let got = run.download(&acc).unwrap().to_f64_vec().unwrap();
    let (mut want, st) = (
        x.to_f64_vec()
            .unwrap()
            .iter()
            .map(|&v| v as f32)
            .collect::<Vec<_>>(),
        step.to_f64_vec().unwrap(),
    );
    for _ in 0..40 {
        for (w, &d) in want.iter_mut().zip(&st) {
            *w += d as f32;
        }
    }
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(*g as f32, *w, "element {k}");
    }
    assert!(ids.len() <= 3, "40 outputs used {} buffers", ids.len());
}

/// A profiled session's kernel time per op comes from the adapter's timestamp queries: every
/// launch counted once, each op's time positive and within the wall time of the runs that made it
/// (a tick period misread, or stamps paired across dispatches, breaks one of these), and a 192³
/// MatMul's kernel longer than a Relu over 64 elements. Unprofiled sessions record nothing.
#[test]
fn profiled_runs_time_each_kernel_on_the_device_clock() {
    use quorum::SessionOptions;
    use quorum::wgpu::Device;
    if !wgpu_here() || !Device::get().is_ok_and(|d| d.caps.timestamps) {
        return;
    }
    let options = |profile: bool| SessionOptions {
        providers: vec![Provider::Wgpu, Provider::Cpu],
        profile,
        fold_constants: false,
        ..Default::default()
    };
    let per_launch = |case: Case, op: &str| -> f64 {
        let (s, feeds) = case.session(options(true));
        let start = std::time::Instant::now();
        for _ in 0..4 {
            s.run(feeds.clone()).unwrap();
        }
        let wall = start.elapsed().as_nanos() as u64;
        let prof = s.device_profile();
        assert_eq!(prof.len(), 1, "{prof:?}");
        let (name, t) = &prof[0];
        assert_eq!(name, op);
        assert_eq!(t.calls, 4, "{op}: one launch per run");
        assert!(
            t.nanos > 0 && t.nanos < wall,
            "{op}: {} ns of kernels in {wall} ns",
            t.nanos
        );
        t.nanos as f64 / 4.0
    };
    let matmul = per_launch(
        Case::new("MatMul")
            .input(rand_f32(31, &[192, 192]))
            .input(rand_f32(32, &[192, 192])),
        "MatMul",
    );
    let relu = per_launch(Case::new("Relu").input(rand_f32(33, &[64])), "Relu");
    assert!(matmul > relu, "MatMul {matmul} ns against Relu {relu} ns");

    let (plain, feeds) = Case::new("Relu")
        .input(rand_f32(34, &[64]))
        .session(options(false));
    plain.run(feeds).unwrap();
    assert!(plain.device_profile().is_empty());
}
