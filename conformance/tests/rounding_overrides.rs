//! The step-bound overrides of `conformance/src/tolerance.rs` (attention cases whose expected data
//! rounds every intermediate to 16 bits): each engine that runs here stays within the bound, the
//! default tolerance would fail the bf16 cases (so the override is needed), and an output moved one
//! step beyond the bound fails.
#![forbid(unsafe_code)]
use quorum::{DType, Tensor, Value};
use quorum_conformance::tolerance::{self, DEFAULT, OVERRIDES};
use quorum_conformance::{case, corpus, engine};

/// `t` with element `i` moved `k` steps up (f16 and bf16).
fn moved(t: &Tensor, i: usize, k: u16) -> Tensor {
    let v: Vec<f64> = match t {
        Tensor::BF16(a) => a
            .iter()
            .enumerate()
            .map(|(j, x)| {
                let b = x.to_bits();
                let b = if j != i {
                    b
                } else if b & 0x8000 == 0 {
                    b + k
                } else {
                    b - k
                };
                half::bf16::from_bits(b).to_f64()
            })
            .collect(),
        Tensor::F16(a) => a
            .iter()
            .enumerate()
            .map(|(j, x)| {
                let b = x.to_bits();
                let b = if j != i {
                    b
                } else if b & 0x8000 == 0 {
                    b + k
                } else {
                    b - k
                };
                half::f16::from_bits(b).to_f64()
            })
            .collect(),
        other => panic!("not a 16-bit float: {}", other.describe()),
    };
    Tensor::from_f64s(t.dtype(), t.shape(), v).unwrap()
}

#[test]
fn step_bounds_cover_what_the_engines_here_produce_and_no_more() {
    let dir = corpus::default_dir();
    corpus::ensure(&dir).expect("corpus");
    let cases = case::discover(&dir).expect("cases");
    let stepped: Vec<_> = OVERRIDES.iter().filter(|o| o.tolerance.steps > 0).collect();
    assert!(stepped.len() >= 6);
    let mut seen = Vec::new();
    for o in stepped {
        let c = cases
            .iter()
            .find(|c| c.id == o.case)
            .unwrap_or_else(|| panic!("override {} names no case", o.case));
        let model = quorum::loader::model_from_file(&c.model_path(), &Default::default()).unwrap();
        for name in ["cpu", "oracle-reference", "oracle-independent"] {
            let tol = tolerance::for_case(name, o.case);
            let prepared = engine::by_name(name)
                .unwrap()
                .prepare(&c.model_path())
                .unwrap();
            for set in case::data_sets(c, &model).unwrap() {
                let out = prepared.run(set.inputs).unwrap();
                let (Value::Tensor(a), Value::Tensor(e)) = (&out[0], &set.outputs[0]) else {
                    panic!("{}: not a tensor", o.case)
                };
                let steps = tolerance::max_steps(a, e).unwrap();
                seen.push(format!("{} on {name}: {steps} steps", o.case));
                assert!(
                    tolerance::compare_tensor(a, e, tol).is_ok(),
                    "{} on {name}: {steps} steps, bound {}",
                    o.case,
                    tol.steps
                );
                if tol == DEFAULT {
                    continue; // the engine is not named by the override (it matches exactly)
                }
                if a.dtype() == DType::BF16 {
                    assert!(
                        tolerance::compare_tensor(a, e, DEFAULT).is_err(),
                        "{} on {name} passes the default tolerance: drop its override",
                        o.case
                    );
                }
                // The largest element of the expected output, pushed one step past the bound.
                let ev = e.to_f64_vec().unwrap();
                let i = (0..ev.len())
                    .max_by(|&p, &q| ev[p].abs().total_cmp(&ev[q].abs()))
                    .unwrap();
                let off = moved(e, i, tol.steps as u16 + 1);
                let err = tolerance::compare_tensor(&off, e, tol).unwrap_err();
                assert!(err.message.contains("1 of"), "{}", err.message);
            }
        }
    }
    println!("{}", seen.join("\n"));
}
