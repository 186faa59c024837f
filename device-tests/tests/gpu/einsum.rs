//! On-device tests of Einsum: the equations exporters write (attention scores and values,
//! Funnel's and MaxViT's relative-position terms, batched and plain products, sums, transposes,
//! ellipses, three operands), each judged by both oracles and required to run on every
//! accelerator present; and the forms the shared plan leaves to the CPU (diagonals, size-1
//! broadcasts, f16 needing two GEMMs, f64), which must still give the right answer.
use quorum::{DType, Tensor};

use crate::harness::{Case, accelerators, rand_f32};

/// Operand shapes for `eq` from the letter sizes `sizes` (`a` first) and an ellipsis of `ell`.
fn shapes(eq: &str, sizes: &[usize], ell: &[usize]) -> Vec<Vec<usize>> {
    let lhs = eq.split("->").next().unwrap_or("");
    lhs.split(',')
        .map(|t| {
            let (head, tail) = t.split_once("...").unwrap_or((t, ""));
            let size = |c: char| sizes[(c as u8 - b'a') as usize];
            let mut s: Vec<usize> = head.chars().map(size).collect();
            if t.contains("...") {
                s.extend(ell);
            }
            s.extend(tail.chars().map(size));
            s
        })
        .collect()
}

fn case(eq: &str, sizes: &[usize], ell: &[usize], dtype: DType, seed: u64) -> Case {
    let mut c = Case::new("Einsum").opset(12).attr_s("equation", eq);
    for (i, s) in shapes(eq, sizes, ell).iter().enumerate() {
        let x = rand_f32(seed + i as u64, s);
        c = c.input(Tensor::from_f64s(dtype, s, x.to_f64_vec().unwrap()).unwrap());
    }
    c
}

#[test]
fn einsum_runs_on_the_device() {
    // Sizes of a, b, c, ... chosen apart so that a transposed operand cannot pass by accident.
    let sizes = [3, 5, 7, 4, 6, 2, 9, 8];
    let equations = [
        // Attention: scores and values (bhid,bhjd / bhij,bhjd with b,h,i,j,d = a,b,c,d,e).
        "abce,abde->abcd",
        "abcd,abde->abce",
        // Funnel's relative attention and MaxViT's relative-position bias.
        "acbe,adbe->abcd",
        "abcd,ed->abce",
        "ab,bc->ac",
        "ab,cb->ac",
        "a,a->",
        "ab->ba",
        "abc->ac",
        "abc->",
        "abc,cd->abd",
        "ab,bc,cd->ad",
        "...ab,...bc->...ac",
        "a...b,bc->a...c",
        "ab,b",
        "abc,ac",
    ];
    for (i, eq) in equations.iter().enumerate() {
        let c = case(eq, &sizes, &[2, 3], DType::F32, 100 + i as u64 * 10);
        for &p in accelerators() {
            assert!(c.ran_on(p), "{eq} on {p:?}: declined");
        }
        c.check();
    }
    // f16 where one GEMM does the whole equation (rounded once, as the op is).
    for (i, eq) in ["abce,abde->abcd", "ab,bc->ac", "abc->ac", "ab->ba"]
        .iter()
        .enumerate()
    {
        let c = case(eq, &sizes, &[], DType::F16, 300 + i as u64 * 10);
        for &p in accelerators() {
            assert!(c.ran_on(p), "{eq} f16 on {p:?}: declined");
        }
        c.check();
    }
}

#[test]
fn einsum_forms_left_to_the_cpu_stay_right() {
    let sizes = [3, 5, 7, 4];
    for (i, (eq, dtype)) in [
        // A diagonal, and a trace.
        ("aab->ab", DType::F32),
        ("aa->", DType::F32),
        // Two GEMMs in f16 (a sum-out, then a contraction) would round twice.
        ("abc,cd->ad", DType::F16),
        // f64: the GEMMs multiply f32 and f16.
        ("ab,bc->ac", DType::F64),
    ]
    .iter()
    .enumerate()
    {
        let c = case(eq, &sizes, &[], *dtype, 400 + i as u64 * 10).allow_fallback();
        for &p in accelerators() {
            assert!(!c.ran_on(p), "{eq} {dtype} on {p:?}: the device ran it");
        }
        c.check();
    }
    // A size-1 dim broadcast against its label's size elsewhere.
    let c = Case::new("Einsum")
        .opset(12)
        .attr_s("equation", "ab,ab->a")
        .input(rand_f32(450, &[3, 1]))
        .input(rand_f32(451, &[3, 5]))
        .allow_fallback();
    for &p in accelerators() {
        assert!(!c.ran_on(p), "broadcast on {p:?}: the device ran it");
    }
    c.check();
}
