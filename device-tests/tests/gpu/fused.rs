//! The device session's rewrites, run on the device and judged by both oracles under strict
//! verification: the five-node GELU as one Gelu, and MatMul → Add of a bias as one MatMulBias.
use quorum::session::GraphCapture;
use quorum::{Provider, Session, SessionOptions, Tensor, Value};

use crate::graphs::options;
use crate::harness::{on_cpu, rand_f32};
use crate::models::{model, node, tensor_proto};

/// A strictly verified device session of model `m`, which rewrite `pass` must have changed.
fn rewritten(m: &[u8], pass: &str) -> Session {
    let s = Session::from_bytes(
        m,
        SessionOptions {
            verify: quorum::VerifyMode::Strict,
            ..options(1, GraphCapture::Off)
        },
    )
    .unwrap();
    assert!(
        s.rewrites().iter().any(|r| r.pass == pass),
        "{:?}",
        s.rewrites()
    );
    s
}

#[test]
fn gelu_chains_run_as_one_gelu_judged_by_the_oracles() {
    // The five-node exact GELU of opset-17 exports becomes one Gelu on the device; strict
    // verification has both oracles judge it against the Gelu of the spec on every run, both tails
    // included (x down to -12, where the chain's 1 + erf cancels).
    if on_cpu() {
        return;
    }
    let scalar = |name: &str, v: f32| tensor_proto(name, &Tensor::from_f32(&[], vec![v]).unwrap());
    let m = model(
        vec![
            node("Div", &["x", "sqrt2"], "s"),
            node("Erf", &["s"], "e"),
            node("Add", &["e", "one"], "p"),
            node("Mul", &["x", "p"], "q"),
            node("Mul", &["q", "half"], "y"),
        ],
        &["x"],
        &["y"],
        vec![
            scalar("sqrt2", std::f32::consts::SQRT_2),
            scalar("one", 1.0),
            scalar("half", 0.5),
        ],
    );
    let s = rewritten(&m, "gelu");
    for seed in 0..3 {
        let x = crate::harness::rand_range(400 + seed, &[64, 300], -12.0, 12.0);
        s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
    }
    let v = s.verification();
    let gelu = v.get("Gelu").expect("the Gelu was judged");
    assert_eq!(
        (gelu.checked, gelu.mismatched, gelu.unsettled),
        (3, 0, 0),
        "{v:?}"
    );
}

#[test]
fn linear_layers_run_as_matmul_bias_judged_by_the_oracles() {
    // MatMul by a weight, then Add of a bias (every Linear layer of a transformer export), becomes
    // one MatMulBias: the GEMM adds the bias as it stores its outputs, or in its split-K reduction.
    // Strict verification has both oracles judge it, as the Gemm it equals, on every run.
    use quorum::cuda::ops::matmul::plan::{Dims, choose};
    if on_cpu() {
        return;
    }
    let splits = |m: usize, n: usize, k: usize| {
        let d = Dims {
            m,
            n,
            k,
            nb: 1,
            es: 4,
            splittable: true,
            tc_async: false,
        };
        choose(&d, 132).nsplit
    };
    // [2, 64, 512] × [512, 384]: three 128-row tiles, split along K (checked below); [3, 5, 40] ×
    // [40, 33]: one small tile, unsplit; [77] × [77, 9]: a vector.
    assert!(splits(128, 384, 512) > 1);
    assert_eq!(splits(15, 33, 40), 1);
    for (a_shape, k, n, bias_first, seed) in [
        (vec![2usize, 64, 512], 512usize, 384usize, false, 700u64),
        (vec![3, 5, 40], 40, 33, true, 710),
        (vec![77], 77, 9, false, 720),
    ] {
        let add_in: [&str; 2] = if bias_first { ["b", "p"] } else { ["p", "b"] };
        let m = model(
            vec![node("MatMul", &["x", "w"], "p"), node("Add", &add_in, "y")],
            &["x"],
            &["y"],
            vec![
                tensor_proto("w", &rand_f32(seed, &[k, n])),
                tensor_proto("b", &rand_f32(seed + 1, &[n])),
            ],
        );
        let s = rewritten(&m, "matmul-bias");
        let on: Vec<(String, Provider)> = s
            .placement()
            .iter()
            .map(|p| (p.op.clone(), p.provider))
            .collect();
        assert_eq!(
            on,
            [("com.quorum::MatMulBias".to_string(), Provider::Cuda)],
            "{a_shape:?}"
        );
        for run in 0..2 {
            let x = rand_f32(seed + 10 + run, &a_shape);
            s.run(vec![("x".into(), Value::Tensor(x))]).unwrap();
        }
        let v = s.verification();
        let judged = v
            .get("com.quorum::MatMulBias")
            .unwrap_or_else(|| panic!("MatMulBias was judged: {v:?}"));
        assert_eq!(
            (judged.checked, judged.mismatched, judged.unsettled),
            (2, 0, 0),
            "{a_shape:?}: {v:?}"
        );
    }
}
