//! Op properties: for every row of the op table (`quorum_optable`), random valid nodes
//! (ranks 0-4, broadcasting and empty dims where the op allows them, every attribute form, old and new
//! opsets; generators in `quorum_fuzz::opgen`) are checked two ways: the two CPU oracles agree with
//! each other, and the runtime's CPU kernel, run in f32 on the same values, agrees with them
//! (`quorum_conformance::arbitrate`). A failure is shrunk to a small node and printed with its op,
//! attributes, shapes, values, seed and verdict.
//!
//! `QUORUM_PROPTEST_CASES` sets the cases per op (default [`DEFAULT_CASES`]); `QUORUM_PROPTEST_SEED=N`
//! draws another sequence; `QUORUM_PROPTEST_VERBOSE=1` prints every case; `QUORUM_PROPTEST_SURVEY=1`
//! runs every case and lists each kind of failure with a count (see [`survey`]). One test per family
//! of the op table, each op run on its own inside it, so a new row needs no edit here;
//! `QUORUM_PROPTEST_OPS=ConvTranspose cargo test -p quorum-fuzz --test op_properties -- convolution`
//! runs one op. An oracle declining a form is a failure too, except for the coverage gaps listed in
//! `quorum_fuzz::opcase::TOLERATED_DECLINES` (the runtime is then judged by the other oracle alone).
#![forbid(unsafe_code)]
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use quorum_fuzz::opcase::{Checked, check, round_inputs};
use quorum_fuzz::opgen::{self, CHOICES};
use quorum_optable::Family;

/// Cases per op by default: the whole suite (109 ops) takes about 5 s on 2 cores (kernels
/// unoptimised, oracles optimised), well within a `cargo test --workspace`.
const DEFAULT_CASES: u32 = 2000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn property(op: &'static str) {
    let cases = env_u64("QUORUM_PROPTEST_CASES").map_or(DEFAULT_CASES, |n| n as u32);
    let seed = env_u64("QUORUM_PROPTEST_SEED").unwrap_or(0);
    let verbose = std::env::var_os("QUORUM_PROPTEST_VERBOSE").is_some();
    // One sequence per op (and per seed), stable from run to run.
    let mut seed_bytes = [0x5au8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    for (i, b) in op.bytes().enumerate() {
        seed_bytes[8 + i % 24] ^= b;
    }
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 1024,
        max_global_rejects: 0,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let strategy = (prop::collection::vec(any::<u32>(), CHOICES), any::<u64>()).prop_map(
        move |(choices, seed)| {
            let mut case = opgen::generate(op, &choices, seed);
            round_inputs(&mut case).unwrap_or_else(|e| panic!("{case:?}: {e}"));
            case
        },
    );
    if std::env::var_os("QUORUM_PROPTEST_SURVEY").is_some() {
        survey(op, &strategy, &mut runner, cases);
        return;
    }
    let declined = AtomicUsize::new(0);
    let reason = Mutex::new(std::collections::BTreeSet::new());
    let result = runner.run(&strategy, |case| {
        if verbose {
            eprintln!("{case:?}");
        }
        match check(&case) {
            Ok(Checked::Agree) => Ok(()),
            Ok(Checked::OneOracle {
                declined_by,
                reason: why,
            }) => {
                declined.fetch_add(1, Ordering::Relaxed);
                reason
                    .lock()
                    .unwrap()
                    .insert(format!("{declined_by}: {why}"));
                Ok(())
            }
            Ok(Checked::NoOracle(why)) => {
                declined.fetch_add(1, Ordering::Relaxed);
                reason.lock().unwrap().insert(format!("both: {why}"));
                Ok(())
            }
            Err(msg) => Err(TestCaseError::fail(msg)),
        }
    });
    let declined = declined.into_inner();
    if declined > 0 {
        let reasons: Vec<String> = reason.into_inner().unwrap().into_iter().collect();
        eprintln!(
            "{op}: {declined} case(s) judged by one oracle or none (tolerated declines: {})",
            reasons.join("; ")
        );
    }
    match result {
        Ok(()) => {}
        Err(TestError::Fail(msg, case)) => panic!(
            "{op}: property failed (shrunk; QUORUM_PROPTEST_SEED={seed})\n  case: {case:?}\n  \
             verdict: {msg}"
        ),
        Err(TestError::Abort(msg)) => panic!("{op}: aborted: {msg}"),
    }
}

/// `QUORUM_PROPTEST_SURVEY=1`: runs every case without stopping at the first failure, and prints each
/// kind of failure (its message with the numbers blanked out) with a count and its smallest example.
/// A triage aid; the test never fails in this mode.
fn survey(
    op: &str,
    strategy: &impl Strategy<Value = quorum_fuzz::opcase::Case>,
    runner: &mut TestRunner,
    cases: u32,
) {
    use proptest::strategy::ValueTree;
    let mut kinds: std::collections::BTreeMap<String, (usize, usize, String)> = Default::default();
    for _ in 0..cases {
        let case = strategy.new_tree(runner).expect("a case").current();
        if let Err(msg) = check(&case) {
            let mut kind = String::new();
            for c in msg.chars() {
                let c = if c.is_ascii_digit() || ".-+e".contains(c) && kind.ends_with('#') {
                    '#'
                } else {
                    c
                };
                if !(c == '#' && kind.ends_with('#')) {
                    kind.push(c);
                }
            }
            let size: usize = case.inputs.iter().flatten().map(|v| v.data.len()).sum();
            let e = kinds.entry(kind).or_insert((0, usize::MAX, String::new()));
            e.0 += 1;
            if size < e.1 {
                *e = (e.0, size, format!("{case:?}\n      {msg}"));
            }
        }
    }
    for (kind, (n, _, example)) in &kinds {
        eprintln!("SURVEY {op}: {n}/{cases} {kind}\n      {example}");
    }
}

/// Whether `op` is selected by `QUORUM_PROPTEST_OPS` (a comma list of op types; unset: every op).
fn selected(op: &str) -> bool {
    std::env::var("QUORUM_PROPTEST_OPS")
        .map_or(true, |list| list.split(',').any(|o| o.trim() == op))
}

/// Runs the property of every selected row of `family`, each op on its own so that one failing op
/// does not hide another: the failures (each printed with its shrunk case) are listed at the end.
fn family(family: Family) {
    let mut failed = Vec::new();
    for row in quorum_optable::rows_of(family).filter(|r| selected(r.name)) {
        if std::panic::catch_unwind(|| property(row.name)).is_err() {
            failed.push(row.name);
        }
    }
    assert!(failed.is_empty(), "properties failed for {failed:?}");
}

macro_rules! families {
    ($($name:ident => $family:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                family(Family::$family);
            }
        )*
        /// The families with a test here.
        const TESTED: &[Family] = &[$(Family::$family),*];
    };
}

// One test per family of the op table: a new row of an existing family needs no edit here.
families! {
    unary => Unary, cast => Cast, binary => Binary, matrix => Matrix, convolution => Convolution,
    pooling => Pooling, normalization => Normalization, softmax => Softmax,
    reduction => Reduction, movement => Movement, index => Index, resize => Resize, view => View,
    fill => Fill, recurrent => Recurrent, metadata => Metadata,
}

/// Every family of the op table has a test here, and every row a generator.
#[test]
fn every_row_has_a_property() {
    assert_eq!(
        TESTED,
        Family::ALL.as_slice(),
        "the families tested here and the op table's differ"
    );
    for op in opgen::ops() {
        // A row without a generator panics here, naming the op.
        opgen::generate(op, &[0; CHOICES], 1);
    }
}

/// The data operand of a case (the op table's `dtypes` column names its types), if it has one.
fn data_type_outside_the_spec(case: &quorum_fuzz::opcase::Case) -> Option<String> {
    let row = quorum_optable::find(case.op)?;
    let input = row.data_input()?;
    let dtype = case.inputs.get(input)?.as_ref()?.dtype;
    let ty = table_ty(dtype);
    (!row.dtypes.contains(ty)).then(|| format!("{} with a {dtype:?} data operand", case.op))
}

fn table_ty(d: quorum_oracle::DType) -> quorum_optable::Ty {
    use quorum_optable::Ty;
    use quorum_oracle::DType as D;
    match d {
        D::F16 => Ty::F16,
        D::BF16 => Ty::Bf16,
        D::F32 => Ty::F32,
        D::F64 => Ty::F64,
        D::I8 => Ty::I8,
        D::I16 => Ty::I16,
        D::I32 => Ty::I32,
        D::I64 => Ty::I64,
        D::U8 => Ty::U8,
        D::U16 => Ty::U16,
        D::U32 => Ty::U32,
        D::U64 => Ty::U64,
        D::Bool => Ty::Bool,
    }
}

/// Generated data operands have element types the ONNX spec allows for the op (the table's
/// `dtypes`), f16, bf16 and f64 retyping included.
#[test]
fn generated_data_operands_stay_in_the_spec_types() {
    use proptest::strategy::ValueTree;
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[11; 32]),
    );
    let strategy = (prop::collection::vec(any::<u32>(), CHOICES), any::<u64>());
    let mut outside = std::collections::BTreeSet::new();
    for op in opgen::ops() {
        for k in 0..300u32 {
            let (mut choices, seed) = strategy.new_tree(&mut runner).unwrap().current();
            // Every retyping choice in turn (the last choice picks f16, bf16 or f64).
            choices[CHOICES - 1] = k % 20;
            let case = opgen::generate(op, &choices, seed);
            outside.extend(data_type_outside_the_spec(&case));
        }
    }
    assert!(outside.is_empty(), "{outside:?}");
}

/// The check above catches a case outside the spec's types: Sqrt of int32, Not of float.
#[test]
fn a_data_operand_outside_the_spec_is_caught() {
    use quorum_oracle::{DType, Value};
    for (op, dtype) in [("Sqrt", DType::I32), ("Not", DType::F32)] {
        let mut case = quorum_fuzz::opcase::Case::new(op, 13, 1);
        case.input(Value::new(dtype, vec![2], vec![1.0, 0.0]).unwrap());
        assert!(data_type_outside_the_spec(&case).is_some(), "{op}");
    }
}

/// One case in a hundred is big: its tensors reach the sizes where the CPU kernels change path
/// (parallel elementwise work, parallel GEMM), so those paths are judged too.
#[test]
fn big_cases_reach_the_parallel_paths() {
    use quorum::ops::broadcast::PAR_THRESHOLD;
    use quorum::ops::matmul::PAR_WORK;
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = (prop::collection::vec(any::<u32>(), CHOICES), any::<u64>());
    let elems = |v: &quorum_oracle::Value| v.data.len();
    let mut big = 0;
    let (mut wide_add, mut wide_softmax, mut heavy_matmul) = (0, 0, 0);
    let draws = 3000;
    for _ in 0..draws {
        use proptest::strategy::ValueTree;
        let (choices, seed) = strategy.new_tree(&mut runner).unwrap().current();
        for op in ["Add", "Softmax", "MatMul"] {
            let case = opgen::generate(op, &choices, seed);
            let largest = case.inputs.iter().flatten().map(elems).max().unwrap_or(0);
            match op {
                "Add" => wide_add += (largest >= PAR_THRESHOLD) as usize,
                "Softmax" => wide_softmax += (largest >= PAR_THRESHOLD) as usize,
                _ => {
                    let (a, b) = (
                        case.inputs[0].as_ref().unwrap(),
                        case.inputs[1].as_ref().unwrap(),
                    );
                    let m = if a.shape.len() > 1 {
                        a.shape[a.shape.len() - 2]
                    } else {
                        1
                    };
                    let k = a.shape.last().copied().unwrap_or(1);
                    let n = if b.shape.len() > 1 {
                        *b.shape.last().unwrap()
                    } else {
                        1
                    };
                    heavy_matmul += (m * k * n >= PAR_WORK) as usize;
                }
            }
        }
        big += (choices[CHOICES - 2] % 100 == 99) as usize;
    }
    eprintln!(
        "{big} big draws of {draws}: Add {wide_add}, Softmax {wide_softmax} over {PAR_THRESHOLD} \
         elements, MatMul {heavy_matmul} over {PAR_WORK} multiply-adds"
    );
    assert!(big > 0 && big < draws / 30, "{big} big draws of {draws}");
    assert!(wide_add > 0 && wide_softmax > 0 && heavy_matmul > 0);
}
