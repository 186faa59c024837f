//! The arbitration catches wrong kernels. Deliberately wrong kernels run on seeded random inputs and
//! are judged by `arbitrate` against both oracles under the bound of their op's class: each must be
//! `EngineWrong`, while the correct kernel in the same setup (the runtime's CPU kernel, and the same
//! code without the bug) must `Agree`, so every verdict discriminates. Oracles that disagree are
//! surfaced as `OraclesDisagree`, never passed.
//!
//! - `structural`: the wrong computation (a Pad one off, the wrong reduction axis, a missing bias, a
//!   transposed operand, a stale output, an overflowing softmax, an ignored dilation).
//! - `precision`: the right computation at the wrong precision or in the wrong form (a bf16 Cast 30%
//!   off, an f16 Exp 3% off, Less as LessOrEqual, Equal always false, f16 accumulation where f32 is
//!   promised, TF32 operands where f32 is asked, an element left unwritten where the answer is NaN,
//!   an output of the wrong type).
#![forbid(unsafe_code)]
mod common;
mod precision;
mod spread;
mod structural;

use quorum_oracle::Oracle;
use quorum_oracle::independent::Independent;

use common::*;
use quorum_conformance::arbitrate::Verdict;

#[test]
fn a_perturbed_oracle_is_surfaced_as_disagreement() {
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let n = 4;
        let (a, b) = (rng.vec(n * n, 2.0), rng.vec(n * n, 2.0));
        let spec = Spec::new("MatMul", 13, vec![]);
        let inputs = [Some(T::f32(&[n, n], &a)), Some(T::f32(&[n, n], &b))];
        let Oracles(r, i, terms) = setup(&spec, &inputs);
        let engine = cpu_kernel(&spec, &inputs);
        let with = |r: &quorum_oracle::Output, i: &quorum_oracle::Output| {
            judge(&spec, &engine, &Oracles(r.clone(), i.clone(), terms))
        };
        assert_agree(with(&r, &i), "MatMul");
        // One oracle's output perturbed (one element, by 1e-7 of its magnitude: within what an f32
        // engine may be off, far beyond the oracles' f64 agreement bound), on either side: the
        // engine is close enough to both, yet the case is not passed.
        let k = (seed as usize) % (n * n);
        let mut bad = i.clone();
        bad.value.data[k] += 1e-7 * i.magnitude[k].max(i.value.data[k].abs());
        let v = with(&r, &bad);
        assert!(
            matches!(v, Verdict::OraclesDisagree { index, .. } if index == k),
            "perturbed independent: {v:?}"
        );
        let v = with(&bad, &r);
        assert!(
            matches!(v, Verdict::OraclesDisagree { .. }),
            "perturbed reference: {v:?}"
        );
        // A missing element is a disagreement too.
        let mut short = i.clone();
        short.value.data.pop();
        assert!(matches!(with(&r, &short), Verdict::OraclesDisagree { .. }));
        // One oracle fed a perturbed input: its output differs; surfaced the same way.
        let mut a2 = a.clone();
        a2[0] = f32::from_bits(a2[0].to_bits() + 1);
        let i2 = Independent
            .evaluate(
                &spec.node_spec(),
                &[
                    Some(T::f32(&[n, n], &a2).oracle()),
                    Some(T::f32(&[n, n], &b).oracle()),
                ],
            )
            .unwrap()
            .remove(0);
        let v = with(&r, &i2);
        assert!(
            matches!(v, Verdict::OraclesDisagree { .. }),
            "independent fed a perturbed input: {v:?}"
        );
    }
}
