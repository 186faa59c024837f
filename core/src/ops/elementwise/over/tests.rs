//! Every in-place form against its kernel: where a form accepts, the tensor it wrote holds the
//! kernel's output bit for bit (dtype, shape, every value's bits); where it declines, the donor is
//! untouched. Inputs are seeded and never all zero; sizes cross the parallel threshold and leave
//! tails off every vector width. Broken variant: a Sub written over its second operand without
//! keeping the operands' order is caught.
use std::collections::{BTreeSet, HashMap};

use half::f16;

use super::over_pairs;
use crate::error::OpResult;
use crate::ir::{Attr, Node};
use crate::ops::testing::seeded_f32;
use crate::ops::{InPlace, NoSubgraphs, OpCtx, Registry};
use crate::pb::raw_bytes;
use crate::tensor::{Tensor, Value};

fn node(op: &str, opset: i64, attrs: &[(&str, Attr)]) -> Node {
    Node {
        name: "n".into(),
        op_type: op.into(),
        domain: String::new(),
        opset,
        inputs: vec![],
        outputs: vec!["y".into()],
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<HashMap<_, _>>(),
    }
}

/// What happened when the form of `op` ran over input `at`.
#[derive(Debug, PartialEq)]
enum Outcome {
    Wrote,
    Declined,
}

/// Runs the kernel and `form` over a copy of input `at`, and checks the rule above.
fn check_form(
    form: InPlace,
    op: &str,
    opset: i64,
    attrs: &[(&str, Attr)],
    inputs: &[Option<Tensor>],
    at: usize,
) -> OpResult<Outcome> {
    let reg = Registry::cpu();
    let n = node(op, opset, attrs);
    let ctx = OpCtx {
        node: &n,
        runner: &NoSubgraphs,
        max_tensor_bytes: 1 << 30,
    };
    let vals: Vec<Option<Value>> = inputs
        .iter()
        .map(|t| t.clone().map(Value::Tensor))
        .collect();
    let refs: Vec<Option<&Value>> = vals.iter().map(|v| v.as_ref()).collect();
    let kernel = reg.get("", op).expect("a kernel");
    let mut donor = inputs[at].clone().expect("a donor");
    let before = raw_bytes(&donor);
    let mut others = refs.clone();
    others[at] = None;
    let wrote = form(&ctx, &mut donor, at, &others)?;
    if !wrote {
        assert_eq!(raw_bytes(&donor), before, "{op}: declined but wrote");
        return Ok(Outcome::Declined);
    }
    let want = kernel(&ctx, &refs)?.swap_remove(0).into_tensor().unwrap();
    assert_eq!(donor.dtype(), want.dtype(), "{op}");
    assert_eq!(donor.shape(), want.shape(), "{op}");
    let (got, want) = (raw_bytes(&donor), raw_bytes(&want));
    let first = got.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        first.is_none(),
        "{op} over input {at}: byte {first:?} differs from the kernel's"
    );
    Ok(Outcome::Wrote)
}

fn f32s(seed: u64, shape: &[usize], lo: f32, hi: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, seeded_f32(seed, n, lo, hi)).unwrap()
}

/// `t` in another float or integer dtype.
fn as_dtype(t: &Tensor, dtype: &str) -> Tensor {
    let Tensor::F32(a) = t else { unreachable!() };
    match dtype {
        "f32" => t.clone(),
        "f64" => Tensor::F64(a.mapv(|v| v as f64)),
        "f16" => Tensor::F16(a.mapv(f16::from_f32)),
        "i32" => Tensor::I32(a.mapv(|v| (v * 100.0) as i32)),
        _ => unreachable!(),
    }
}

fn form(op: &str) -> InPlace {
    let (f, inputs) = Registry::cpu()
        .get_in_place("", op)
        .expect("an in-place form");
    // Only the arithmetic may write over its second input (Clip's bounds are never its output).
    let binary = matches!(op, "Add" | "Sub" | "Mul" | "Div");
    assert_eq!(inputs, if binary { 2 } else { 1 }, "{op}");
    f
}

#[test]
fn arithmetic_written_over_either_operand_is_the_kernels_bit_for_bit() {
    let full: &[usize] = &[2, 3, 4, 5];
    let others: [&[usize]; 5] = [&[2, 3, 4, 5], &[3, 1, 1], &[5], &[], &[1, 3, 4, 1]];
    let big: (&[usize], &[usize]) = (&[1, 48, 37, 29], &[1, 48, 1, 1]);
    for op in ["Add", "Sub", "Mul", "Div"] {
        for dtype in ["f32", "f64", "f16", "i32"] {
            let mut shapes: Vec<(&[usize], &[usize])> = others.iter().map(|o| (full, *o)).collect();
            shapes.push(big);
            for (seed, (d, o)) in shapes.into_iter().enumerate() {
                for at in 0..2 {
                    let donor = as_dtype(&f32s(seed as u64 + 1, d, 0.5, 4.0), dtype);
                    let other = as_dtype(&f32s(seed as u64 + 50, o, -4.0, -0.5), dtype);
                    let mut ins = vec![Some(other.clone()), Some(other)];
                    ins[at] = Some(donor);
                    let got = check_form(form(op), op, 14, &[], &ins, at).unwrap();
                    let want = if op == "Div" && dtype == "i32" {
                        Outcome::Declined
                    } else {
                        Outcome::Wrote
                    };
                    assert_eq!(got, want, "{op} {dtype} {d:?} {o:?} over input {at}");
                }
            }
        }
    }
}

#[test]
fn arithmetic_declines_what_it_cannot_write_in_place() {
    let cases: [(&[usize], &[usize], i64); 3] = [
        // The output is larger than the donor.
        (&[3, 1, 1], &[2, 3, 4, 5], 14),
        // A broadcast `bin` computes by its general path.
        (&[2, 3, 4, 5], &[2, 1, 4, 1], 14),
        // Legacy broadcasting.
        (&[2, 3, 4, 5], &[5], 6),
    ];
    for (d, o, opset) in cases {
        let ins = vec![Some(f32s(3, d, 1.0, 2.0)), Some(f32s(4, o, 1.0, 2.0))];
        assert_eq!(
            check_form(form("Add"), "Add", opset, &[], &ins, 0).unwrap(),
            Outcome::Declined,
            "{d:?} {o:?} opset {opset}"
        );
    }
    // Different dtypes: the kernel's error, so the form declines.
    let ins = vec![
        Some(f32s(3, &[4], 1.0, 2.0)),
        Some(as_dtype(&f32s(4, &[4], 1.0, 2.0), "f64")),
    ];
    assert_eq!(
        check_form(form("Mul"), "Mul", 14, &[], &ins, 0).unwrap(),
        Outcome::Declined
    );
}

/// The broken variant: Sub over its second operand computing `donor - other` rather than
/// `other - donor`.
fn sub_keeping_donor_first(
    _: &OpCtx,
    t: &mut Tensor,
    at: usize,
    inputs: &[Option<&Value>],
) -> OpResult<bool> {
    let (Tensor::F32(d), Some(Some(Value::Tensor(Tensor::F32(o))))) = (t, inputs.get(1 - at))
    else {
        return Ok(false);
    };
    Ok(over_pairs(d, o, |p: f32, q: f32| p - q))
}

#[test]
fn a_form_that_swaps_the_operands_is_caught() {
    let ins = vec![
        Some(f32s(8, &[3, 1, 1], -1.0, 1.0)),
        Some(f32s(9, &[2, 3, 4, 5], 2.0, 3.0)),
    ];
    let caught =
        std::panic::catch_unwind(|| check_form(sub_keeping_donor_first, "Sub", 14, &[], &ins, 1));
    assert!(caught.is_err(), "the swapped Sub was not caught");
    // The real form, same inputs, passes.
    assert_eq!(
        check_form(form("Sub"), "Sub", 14, &[], &ins, 1).unwrap(),
        Outcome::Wrote
    );
}

/// Every unary op with an in-place form, with the attributes it takes.
fn unary_cases() -> Vec<(&'static str, Vec<(&'static str, Attr)>)> {
    let f = |k: &'static str, v: f32| (k, Attr::Float(v));
    let mut cases: Vec<(&'static str, Vec<(&'static str, Attr)>)> = [
        "Abs",
        "Neg",
        "Relu",
        "Ceil",
        "Floor",
        "Round",
        "Reciprocal",
        "Sqrt",
        "Exp",
        "Log",
        "Erf",
        "Sin",
        "Cos",
        "Tan",
        "Asin",
        "Acos",
        "Atan",
        "Sinh",
        "Cosh",
        "Asinh",
        "Acosh",
        "Atanh",
        "Tanh",
        "Sigmoid",
        "Softplus",
        "Softsign",
        "Mish",
        "HardSwish",
        "Gelu",
    ]
    .into_iter()
    .map(|op| (op, vec![]))
    .collect();
    cases.extend([
        ("LeakyRelu", vec![f("alpha", 0.13)]),
        ("ThresholdedRelu", vec![f("alpha", 0.7)]),
        ("Elu", vec![f("alpha", 0.8)]),
        ("Selu", vec![f("alpha", 1.5), f("gamma", 1.1)]),
        ("Celu", vec![f("alpha", 1.3)]),
        ("HardSigmoid", vec![f("alpha", 0.3), f("beta", 0.4)]),
    ]);
    cases
}

#[test]
fn every_unary_form_is_its_kernel_bit_for_bit() {
    let mut tested = BTreeSet::new();
    for (k, (op, attrs)) in unary_cases().into_iter().enumerate() {
        // Lengths with tails off every vector width, one past the parallel threshold.
        for len in [1usize, 1003, 70_001] {
            for dtype in ["f32", "f64", "f16"] {
                let x = as_dtype(&f32s(k as u64 * 7 + len as u64, &[len], -4.0, 4.0), dtype);
                let got = check_form(form(op), op, 20, &attrs, &[Some(x)], 0).unwrap();
                // The slice-kernel ops write f32 only; f64 and f16 go to their kernels.
                let slices = matches!(op, "Exp" | "Sigmoid" | "Erf" | "Gelu");
                let want = if slices && dtype != "f32" {
                    Outcome::Declined
                } else {
                    Outcome::Wrote
                };
                assert_eq!(got, want, "{op} {dtype} length {len}");
            }
        }
        tested.insert(op);
    }
    // Clip, with its bounds as inputs, in every dtype the kernel takes; before opset 11 declined.
    for dtype in ["f32", "f64", "f16", "i32"] {
        let x = as_dtype(&f32s(31, &[40_000], -4.0, 4.0), dtype);
        let lo = as_dtype(&Tensor::from_f32(&[], vec![-1.5]).unwrap(), dtype);
        let hi = as_dtype(&Tensor::from_f32(&[], vec![2.25]).unwrap(), dtype);
        for ins in [
            vec![Some(x.clone()), Some(lo.clone()), Some(hi.clone())],
            vec![Some(x.clone()), None, Some(hi)],
            vec![Some(x.clone()), Some(lo), None],
        ] {
            assert_eq!(
                check_form(form("Clip"), "Clip", 13, &[], &ins, 0).unwrap(),
                Outcome::Wrote,
                "Clip {dtype}"
            );
        }
    }
    let x = f32s(32, &[100], -4.0, 4.0);
    let attrs = [("min", Attr::Float(-1.0)), ("max", Attr::Float(1.0))];
    assert_eq!(
        check_form(form("Clip"), "Clip", 6, &attrs, &[Some(x.clone())], 0).unwrap(),
        Outcome::Declined
    );
    tested.insert("Clip");
    // Gelu's tanh approximation goes to the kernel.
    let attrs = [("approximate", Attr::String("tanh".into()))];
    assert_eq!(
        check_form(form("Gelu"), "Gelu", 20, &attrs, &[Some(x)], 0).unwrap(),
        Outcome::Declined
    );
    // The Softmax family over each axis (and the flattening axis before opset 13).
    for op in ["Softmax", "LogSoftmax", "Hardmax"] {
        for (opset, axis) in [(13, 0i64), (13, 1), (13, -1), (11, 1)] {
            for dtype in ["f32", "f64", "f16"] {
                let x = as_dtype(
                    &f32s(41 + axis.unsigned_abs(), &[6, 70, 90], -5.0, 5.0),
                    dtype,
                );
                let attrs = [("axis", Attr::Int(axis))];
                let got = check_form(form(op), op, opset, &attrs, &[Some(x)], 0).unwrap();
                let want = if dtype == "f16" {
                    Outcome::Declined
                } else {
                    Outcome::Wrote
                };
                assert_eq!(got, want, "{op} opset {opset} axis {axis} {dtype}");
            }
        }
        tested.insert(op);
    }
    // Every registered form is tested here or by the arithmetic tests.
    tested.extend(["Add", "Sub", "Mul", "Div"]);
    let registered: BTreeSet<&str> = Registry::cpu().in_place_ops().map(|(_, op)| op).collect();
    assert_eq!(registered, tested);
}
