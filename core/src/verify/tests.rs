//! `check` and `Policy` on the CPU: outputs an accelerator might hand back (right, wrong in value,
//! type, shape or count) and nodes the oracles cannot judge, and what each verification mode does.
use super::*;
use crate::inputs::Rng;
use crate::ir::Node;

fn node(op: &str, opset: i64, outputs: usize) -> Node {
    Node {
        name: format!("{op}_0"),
        op_type: op.into(),
        domain: String::new(),
        opset,
        inputs: vec!["a".into(), "b".into()],
        outputs: (0..outputs).map(|i| format!("y{i}")).collect(),
        attrs: Default::default(),
    }
}

fn rand(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.uniform() as f32 * 4.0).collect()
}

fn f32s(shape: &[usize], v: Vec<f32>) -> Value {
    Value::Tensor(Tensor::from_f32(shape, v).unwrap())
}

/// An Add of two seeded [2, 3] inputs and its right answer.
fn add_case(seed: u64) -> (Node, Vec<Value>, Value) {
    let (a, b) = (rand(seed, 6), rand(seed + 1, 6));
    let sum = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    (
        node("Add", 14, 1),
        vec![f32s(&[2, 3], a), f32s(&[2, 3], b)],
        f32s(&[2, 3], sum),
    )
}

fn run_check(n: &Node, inputs: &[Value], outputs: &[Value]) -> Check {
    let refs: Vec<Option<&Value>> = inputs.iter().map(Some).collect();
    check(n, &refs, outputs)
}

#[test]
fn a_right_answer_agrees_and_a_wrong_one_is_a_mismatch() {
    for seed in [1, 7, 99] {
        let (n, inputs, right) = add_case(seed);
        assert_eq!(
            run_check(&n, &inputs, std::slice::from_ref(&right)),
            Check::Agree
        );
        let Value::Tensor(Tensor::F32(mut off)) = right else {
            unreachable!()
        };
        off[[1, 2]] += 1e-3;
        let got = run_check(&n, &inputs, &[Value::Tensor(Tensor::F32(off))]);
        assert!(
            matches!(
                got,
                Check::Mismatch {
                    output: 0,
                    wrong: Wrong::Value { index: 5, .. }
                }
            ),
            "{got:?}"
        );
    }
}

#[test]
fn wrong_dtype_shape_or_count_is_a_mismatch_never_a_skip() {
    let (n, inputs, right) = add_case(3);
    let t = right.as_tensor().unwrap();
    let as_f64 =
        Value::Tensor(Tensor::from_f64s(DType::F64, t.shape(), t.to_f64_vec().unwrap()).unwrap());
    let reshaped = Value::Tensor(t.reshape(&[3, 2]).unwrap());
    for (what, outs) in [
        ("dtype", vec![as_f64]),
        ("shape", vec![reshaped]),
        ("count", vec![right.clone(), right.clone()]),
        ("none", vec![]),
    ] {
        let got = run_check(&n, &inputs, &outs);
        assert!(
            matches!(
                got,
                Check::Mismatch {
                    wrong: Wrong::Form(_),
                    ..
                }
            ),
            "{what}: {got:?}"
        );
    }
}

#[test]
fn what_the_oracles_cannot_judge_is_unsettled_with_its_kind() {
    let (_, inputs, right) = add_case(5);
    let unknown = run_check(
        &node("NoSuchOp", 1, 1),
        &inputs,
        std::slice::from_ref(&right),
    );
    assert!(
        matches!(unknown, Check::Unsettled(Unsettled::NotCovered(_))),
        "{unknown:?}"
    );
    // Integer division by zero breaks Div's contract: the oracles reject it.
    let a = Value::Tensor(Tensor::from_i64(&[2], vec![7, 3]).unwrap());
    let b = Value::Tensor(Tensor::from_i64(&[2], vec![2, 0]).unwrap());
    let y = Value::Tensor(Tensor::from_i64(&[2], vec![3, 0]).unwrap());
    let rejected = run_check(&node("Div", 14, 1), &[a, b], &[y]);
    assert!(
        matches!(rejected, Check::Unsettled(Unsettled::InputsRejected(_))),
        "{rejected:?}"
    );
    // An attribute kind the oracles are not given.
    let mut with_tensors = node("Add", 14, 1);
    with_tensors
        .attrs
        .insert("extra".into(), Attr::Tensors(vec![]));
    let foreign = run_check(&with_tensors, &inputs, &[right]);
    assert!(
        matches!(foreign, Check::Unsettled(Unsettled::NotCovered(_))),
        "{foreign:?}"
    );
}

fn apply(mode: VerifyMode, allow: &[&str], check: &Check) -> (Result<Use>, Counters) {
    let counters = Counters::default();
    let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
    let policy = Policy {
        mode,
        allow_unchecked: &allow,
    };
    let r = policy.apply(&node("Add", 14, 1), check, &counters);
    (r, counters)
}

#[test]
fn strict_stops_on_mismatch_and_shadow_uses_the_cpu() {
    let wrong = Check::Mismatch {
        output: 0,
        wrong: Wrong::Value {
            index: 2,
            engine: 1.5,
            oracle: 1.0,
            allowed: 1e-7,
        },
    };
    let (r, _) = apply(VerifyMode::Strict, &["Add"], &wrong);
    assert!(
        matches!(r, Err(Error::VerifyMismatch { output: 0, .. })),
        "{r:?}"
    );
    let (r, c) = apply(VerifyMode::Shadow, &[], &wrong);
    assert_eq!(r.unwrap(), Use::Cpu);
    let s = c.snapshot();
    assert_eq!((s.verify_checks, s.verify_mismatches), (1, 1));
    let by_op = c.verify_by_op.lock().unwrap();
    assert_eq!(by_op["Add"].mismatched, 1);
    assert!(by_op["Add"].reasons.keys().any(|r| r.contains("element 2")));
}

#[test]
fn strict_stops_on_unsettled_unless_the_op_is_allowed_by_name() {
    let unsettled = Check::Unsettled(Unsettled::OraclesDisagree("output 0 element 1".into()));
    let (r, _) = apply(VerifyMode::Strict, &[], &unsettled);
    assert!(
        matches!(&r, Err(Error::VerifyUnsettled { op, .. }) if op == "Add"),
        "{r:?}"
    );
    let (r, _) = apply(VerifyMode::Strict, &["Mul", "Relu"], &unsettled);
    assert!(r.is_err(), "another op's name does not allow Add");
    for allow in ["Add", "Mul,Add"] {
        let names: Vec<&str> = allow.split(',').collect();
        let (r, c) = apply(VerifyMode::Strict, &names, &unsettled);
        assert_eq!(r.unwrap(), Use::Device);
        assert_eq!(c.snapshot().verify_unsettled, 1);
        assert_eq!(c.verify_by_op.lock().unwrap()["Add"].unsettled, 1);
    }
    let (r, c) = apply(VerifyMode::Shadow, &[], &unsettled);
    assert_eq!(r.unwrap(), Use::Device);
    let by_op = c.verify_by_op.lock().unwrap();
    assert!(
        by_op["Add"]
            .reasons
            .keys()
            .any(|r| r.contains("the oracles disagree")),
        "{by_op:?}"
    );
}

#[test]
fn agreement_is_counted_per_op() {
    let (r, c) = apply(VerifyMode::Strict, &[], &Check::Agree);
    assert_eq!(r.unwrap(), Use::Device);
    let by_op = c.verify_by_op.lock().unwrap();
    assert_eq!(
        (
            by_op["Add"].checked,
            by_op["Add"].mismatched,
            by_op["Add"].unsettled
        ),
        (1, 0, 0)
    );
}

/// MatMulBias (`com.quorum`) is judged as the Gemm it equals: the right answer agrees; the product
/// without its bias, a bias added along the wrong axis, and the right numbers in the wrong shape
/// are caught.
#[test]
fn matmul_bias_is_judged_as_its_gemm() {
    let (a, b, c) = (rand(40, 2 * 3 * 4), rand(41, 4 * 5), rand(42, 5));
    let mut n = node("MatMulBias", 1, 1);
    n.domain = crate::ops::QUORUM_DOMAIN.into();
    n.inputs.push("c".into());
    let inputs = vec![
        f32s(&[2, 3, 4], a.clone()),
        f32s(&[4, 5], b.clone()),
        f32s(&[5], c.clone()),
    ];
    let product = |bias: &dyn Fn(usize, usize) -> f32| -> Vec<f32> {
        let mut y = Vec::new();
        for r in 0..6 {
            for j in 0..5 {
                let dot: f32 = (0..4).map(|t| a[r * 4 + t] * b[t * 5 + j]).sum();
                y.push(dot + bias(r, j));
            }
        }
        y
    };
    let right = product(&|_, j| c[j]);
    assert_eq!(
        run_check(&n, &inputs, &[f32s(&[2, 3, 5], right.clone())]),
        Check::Agree
    );
    for wrong in [product(&|_, _| 0.0), product(&|r, _| c[r % 5])] {
        let got = run_check(&n, &inputs, &[f32s(&[2, 3, 5], wrong)]);
        assert!(
            matches!(
                got,
                Check::Mismatch {
                    wrong: Wrong::Value { .. },
                    ..
                }
            ),
            "{got:?}"
        );
    }
    let got = run_check(&n, &inputs, &[f32s(&[6, 5], right)]);
    assert!(
        matches!(
            got,
            Check::Mismatch {
                wrong: Wrong::Form(_),
                ..
            }
        ),
        "{got:?}"
    );
}

/// Verification applies the spread judge of a long sum: a MatMul whose products were taken from
/// TF32-rounded operands (zero-mean operands, so terms of either sign), every element within its
/// worst-case bound at K = 4,096, is a mismatch as a whole; the same sums taken correctly in f32 (in
/// order, and in 8 interleaved accumulators) agree.
#[test]
fn a_matmul_on_tf32_operands_is_caught_as_a_whole() {
    let (m, k, n) = (8, 4096, 8);
    let mut rng = Rng::new(11);
    let mut draw = |len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform() as f32).collect() };
    let (a, b) = (draw(m * k), draw(k * n));
    let tf32 = |x: f32| quorum_oracle::arbitrate::Arithmetic::TF32.round(x);
    let product = |round: &dyn Fn(f32) -> f32, lanes: usize| -> Vec<f32> {
        let mut y = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = vec![0.0f32; lanes];
                for p in 0..k {
                    acc[p % lanes] += round(a[i * k + p]) * round(b[p * n + j]);
                }
                y[i * n + j] = acc.iter().fold(0.0, |s, &x| s + x);
            }
        }
        y
    };
    let node = node("MatMul", 13, 1);
    let inputs = [f32s(&[m, k], a.clone()), f32s(&[k, n], b.clone())];
    for lanes in [1, 8] {
        let right = f32s(&[m, n], product(&|x| x, lanes));
        assert_eq!(
            run_check(&node, &inputs, &[right]),
            Check::Agree,
            "{lanes} lanes"
        );
    }
    let wrong = f32s(&[m, n], product(&tf32, 1));
    let got = run_check(&node, &inputs, &[wrong]);
    assert!(
        matches!(
            got,
            Check::Mismatch {
                output: 0,
                wrong: Wrong::Spread { .. }
            }
        ),
        "{got:?}"
    );
}

/// An int64 op outside the exact families (a Div) on inputs around 2⁶⁰, its answer off by one:
/// through f64 the off-by-one is invisible (2⁶⁰ + 1 and 2⁶⁰ are the same f64), so the check must not
/// pass it; it is unsettled, with the reason. Its twin below 2⁵³ is judged exactly: the right answer
/// agrees and the same off-by-one is a mismatch.
#[test]
fn int64_beyond_2_pow_53_is_never_passed_through_f64() {
    let i64s = |v: Vec<i64>| Value::Tensor(Tensor::from_i64(&[v.len()], v).unwrap());
    let mut rng = Rng::new(53);
    for base in [1i64 << 60, 1 << 40] {
        let a: Vec<i64> = (0..4)
            .map(|_| base + (rng.uniform() * 1000.0) as i64)
            .collect();
        let b: Vec<i64> = (0..4)
            .map(|_| 1 + (rng.uniform() * 1000.0) as i64)
            .collect();
        let quotient: Vec<i64> = a.iter().zip(&b).map(|(x, y)| x / y).collect();
        let mut off = quotient.clone();
        off[2] += 1;
        let n = node("Div", 14, 1);
        let inputs = [i64s(a), i64s(b)];
        let right = run_check(&n, &inputs, &[i64s(quotient)]);
        let wrong = run_check(&n, &inputs, &[i64s(off)]);
        if base >= 1 << 53 {
            for c in [&right, &wrong] {
                assert!(
                    matches!(c, Check::Unsettled(Unsettled::NotCovered(m)) if m.contains("2^53")),
                    "{c:?}"
                );
            }
        } else {
            assert_eq!(right, Check::Agree);
            assert!(matches!(wrong, Check::Mismatch { .. }), "{wrong:?}");
        }
    }
}

/// Ring ops (by limbs) and order ops (by rank) on 64-bit integers around 2⁶⁰ are judged exactly:
/// each right answer (wrapping where it overflows, as device integers do) agrees, and the same
/// answer with element 1 off by one (or a bool flipped) is a Mismatch naming that element, although
/// the off-by-one is invisible in f64. A Sub and an Equal whose outputs are small but whose inputs
/// are beyond 2⁵³ are judged exactly too: through f64 the right Sub would have been called wrong and
/// a wrong Equal right.
#[test]
fn ring_and_order_ops_judge_64_bit_integers_exactly() {
    let mut rng = Rng::new(61);
    let mut big = |n: usize| -> Vec<i64> {
        (0..n)
            .map(|_| (1i64 << 60) + (rng.uniform() * 2e6) as i64 - 1_000_000)
            .collect()
    };
    let t64 = |shape: &[usize], v: Vec<i64>| Value::Tensor(Tensor::from_i64(shape, v).unwrap());
    let bools = |v: Vec<bool>| {
        Value::Tensor(Tensor::Bool(
            ndarray::ArrayD::from_shape_vec(vec![v.len()], v).unwrap(),
        ))
    };
    let with = |op: &str, n_in: usize, opset: i64, attrs: Vec<(&str, Attr)>| Node {
        name: format!("{op}_0"),
        op_type: op.into(),
        domain: String::new(),
        opset,
        inputs: (0..n_in).map(|i| format!("x{i}")).collect(),
        outputs: vec!["y".into()],
        attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    };
    let (a, b) = (big(6), big(6));
    let small: Vec<i64> = (0..6).map(|i| 3 + 7 * i - 20).collect();
    let ew = |f: fn(i64, i64) -> i64, x: &[i64], y: &[i64]| -> Vec<i64> {
        x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect()
    };
    let near: Vec<i64> = a.iter().zip(&small).map(|(x, s)| x - s).collect();
    // MatMul [2, 3] x [3, 2], wrapping.
    let mm: Vec<i64> = (0..2)
        .flat_map(|i| {
            let (a, b) = (&a, &b);
            (0..2).map(move |j| {
                (0..3).fold(0i64, |s, k| {
                    s.wrapping_add(a[i * 3 + k].wrapping_mul(b[k * 2 + j]))
                })
            })
        })
        .collect();
    let rows: Vec<i64> = (0..2)
        .map(|r| {
            a[r * 3..r * 3 + 3]
                .iter()
                .fold(0i64, |s, &x| s.wrapping_add(x))
        })
        .collect();
    let mut close = a.clone();
    close[1] += 1;
    close[4] += 1;
    let equal: Vec<bool> = a.iter().zip(&close).map(|(x, y)| x == y).collect();
    let argmax = (0..2)
        .map(|r| {
            (0..3)
                .max_by_key(|&c| (a[r * 3 + c], std::cmp::Reverse(c)))
                .unwrap() as i64
        })
        .collect::<Vec<_>>();
    let cases: Vec<(Node, Vec<Value>, Value)> = vec![
        (
            with("Add", 2, 14, vec![]),
            vec![t64(&[6], a.clone()), t64(&[6], small.clone())],
            t64(&[6], ew(i64::wrapping_add, &a, &small)),
        ),
        (
            with("Sub", 2, 14, vec![]),
            vec![t64(&[6], a.clone()), t64(&[6], near.clone())],
            t64(&[6], small.clone()),
        ),
        (
            with("Mul", 2, 14, vec![]),
            vec![t64(&[6], a.clone()), t64(&[6], b.clone())],
            t64(&[6], ew(i64::wrapping_mul, &a, &b)),
        ),
        (
            with("MatMul", 2, 13, vec![]),
            vec![t64(&[2, 3], a.clone()), t64(&[3, 2], b.clone())],
            t64(&[2, 2], mm),
        ),
        (
            with("Sum", 3, 13, vec![]),
            vec![
                t64(&[6], a.clone()),
                t64(&[6], b.clone()),
                t64(&[6], small.clone()),
            ],
            t64(
                &[6],
                ew(i64::wrapping_add, &ew(i64::wrapping_add, &a, &b), &small),
            ),
        ),
        (
            with("ReduceSum", 2, 13, vec![("keepdims", Attr::Int(0))]),
            vec![t64(&[2, 3], a.clone()), t64(&[1], vec![1])],
            t64(&[2], rows),
        ),
        (
            with("Neg", 1, 13, vec![]),
            vec![t64(&[6], a.clone())],
            t64(&[6], a.iter().map(|x| -x).collect()),
        ),
        (
            with("Cast", 1, 13, vec![("to", Attr::Int(6))]),
            vec![t64(&[6], a.clone())],
            Value::Tensor(Tensor::I32(
                ndarray::ArrayD::from_shape_vec(vec![6], a.iter().map(|&x| x as i32).collect())
                    .unwrap(),
            )),
        ),
        (
            with("Max", 2, 13, vec![]),
            vec![t64(&[6], a.clone()), t64(&[6], b.clone())],
            t64(&[6], ew(i64::max, &a, &b)),
        ),
        (
            with("ReduceMin", 1, 13, vec![("axes", Attr::Ints(vec![1]))]),
            vec![t64(&[3, 2], b.clone())],
            t64(&[3, 1], b.chunks(2).map(|c| c[0].min(c[1])).collect()),
        ),
        (
            with(
                "ArgMax",
                1,
                13,
                vec![("axis", Attr::Int(1)), ("keepdims", Attr::Int(0))],
            ),
            vec![t64(&[2, 3], a.clone())],
            t64(&[2], argmax),
        ),
        (
            with("Equal", 2, 13, vec![]),
            vec![t64(&[6], a.clone()), t64(&[6], close)],
            bools(equal),
        ),
    ];
    for (n, inputs, right) in cases {
        assert_eq!(
            run_check(&n, &inputs, std::slice::from_ref(&right)),
            Check::Agree,
            "{}",
            n.op_type
        );
        let Value::Tensor(t) = &right else {
            unreachable!()
        };
        let (wrong, engine, oracle): (Value, i128, i128) = match t {
            Tensor::I64(v) => {
                let mut v = v.clone();
                let flat = v.as_slice_mut().unwrap();
                let was = flat[1];
                flat[1] = was.wrapping_add(1);
                // Through f64 the off-by-one is invisible where the value is beyond 2^53.
                if was.unsigned_abs() >= 1 << 54 {
                    assert_eq!(flat[1] as f64, was as f64);
                }
                let now = flat[1];
                (Value::Tensor(Tensor::I64(v)), now.into(), was.into())
            }
            Tensor::I32(v) => {
                let mut v = v.clone();
                let flat = v.as_slice_mut().unwrap();
                let was = flat[1];
                flat[1] = was.wrapping_add(1);
                let now = flat[1];
                (Value::Tensor(Tensor::I32(v)), now.into(), was.into())
            }
            Tensor::Bool(v) => {
                let mut v = v.clone();
                let flat = v.as_slice_mut().unwrap();
                flat[1] = !flat[1];
                let now = flat[1];
                (Value::Tensor(Tensor::Bool(v)), now.into(), (!now).into())
            }
            other => panic!("{}: {}", n.op_type, other.dtype()),
        };
        let got = run_check(&n, &inputs, &[wrong]);
        assert!(
            matches!(
                got,
                Check::Mismatch {
                    output: 0,
                    wrong: Wrong::Integer { index: 1, engine: e, oracle: o }
                } if e == engine && o == oracle
            ),
            "{}: {got:?}",
            n.op_type
        );
    }
}

/// A movement op's 64-bit integers are judged exactly beyond 2⁵³ (each element traced to the input
/// element it copies): a Gather of token ids around 2⁶⁰, a Transpose, a Where and a Concat give
/// Agree when right, and a Mismatch naming the element when one element is off by one or two
/// elements are swapped; the same off-by-one through f64 would have compared equal.
#[test]
fn movement_ops_carry_64_bit_integers_exactly() {
    let mut rng = Rng::new(60);
    let big = |rng: &mut Rng, n: usize| -> Vec<i64> {
        (0..n)
            .map(|_| (1i64 << 60) + (rng.uniform() * 1e6) as i64 * 3)
            .collect()
    };
    let t64 = |shape: &[usize], v: Vec<i64>| Value::Tensor(Tensor::from_i64(shape, v).unwrap());
    let with = |op: &str, inputs: &[&str], attrs: Vec<(&str, Attr)>| Node {
        name: format!("{op}_0"),
        op_type: op.into(),
        domain: String::new(),
        opset: 17,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec!["y".into()],
        attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    };
    // (node, inputs, the right output's shape and values)
    let table = big(&mut rng, 12);
    let idx = vec![5i64, 0, 11 / 2, 5];
    let gather = (
        with("Gather", &["t", "i"], vec![]),
        vec![t64(&[6, 2], table.clone()), t64(&[4], idx.clone())],
        (
            vec![4, 2],
            idx.iter()
                .flat_map(|&i| table[i as usize * 2..i as usize * 2 + 2].to_vec())
                .collect(),
        ),
    );
    let m = big(&mut rng, 6);
    let transpose = (
        with("Transpose", &["m"], vec![("perm", Attr::Ints(vec![1, 0]))]),
        vec![t64(&[2, 3], m.clone())],
        (vec![3, 2], vec![m[0], m[3], m[1], m[4], m[2], m[5]]),
    );
    let (x, y) = (big(&mut rng, 4), big(&mut rng, 4));
    let cond = [true, false, false, true];
    let where_ = (
        with("Where", &["c", "x", "y"], vec![]),
        vec![
            Value::Tensor(Tensor::Bool(
                ndarray::ArrayD::from_shape_vec(vec![4], cond.to_vec()).unwrap(),
            )),
            t64(&[4], x.clone()),
            t64(&[4], y.clone()),
        ],
        (
            vec![4],
            (0..4).map(|i| if cond[i] { x[i] } else { y[i] }).collect(),
        ),
    );
    let concat = (
        with("Concat", &["x", "y"], vec![("axis", Attr::Int(0))]),
        vec![t64(&[4], x.clone()), t64(&[4], y.clone())],
        (vec![8], x.iter().chain(&y).copied().collect()),
    );
    for (n, inputs, (shape, want)) in [gather, transpose, where_, concat] {
        assert_eq!(
            run_check(&n, &inputs, &[t64(&shape, want.clone())]),
            Check::Agree,
            "{}",
            n.op_type
        );
        let mut off = want.clone();
        off[1] += 1;
        // Through f64 the off-by-one is invisible.
        assert_eq!(off[1] as f64, want[1] as f64);
        let got = run_check(&n, &inputs, &[t64(&shape, off.clone())]);
        assert!(
            matches!(
                got,
                Check::Mismatch {
                    output: 0,
                    wrong: Wrong::Integer { index: 1, engine, oracle }
                } if engine == off[1] as i128 && oracle == want[1] as i128
            ),
            "{}: {got:?}",
            n.op_type
        );
        let mut swapped = want.clone();
        swapped.swap(0, 1);
        let got = run_check(&n, &inputs, &[t64(&shape, swapped)]);
        assert!(
            matches!(
                got,
                Check::Mismatch {
                    output: 0,
                    wrong: Wrong::Integer { index: 0, .. }
                }
            ),
            "{}: {got:?}",
            n.op_type
        );
    }
}
