//! The op table (`quorum_optable`) against both oracles: each oracle covers every row, and the NaN
//! column of the elementwise rows is what both oracles compute.
#![forbid(unsafe_code)]
use std::collections::BTreeMap;

use quorum_optable::{Family, NanRule, ROWS, Row, Ty};
use quorum_oracle::independent::Independent;
use quorum_oracle::reference::Reference;
use quorum_oracle::{Attr, DType, NodeSpec, Oracle, Value};

const ORACLES: [&dyn Oracle; 2] = [&Reference, &Independent];

/// A node of `row`'s op with the attributes its schema requires, at opset 18 or the op's first.
fn node(row: &Row) -> NodeSpec {
    let mut attrs = BTreeMap::new();
    match row.name {
        "Cast" => {
            attrs.insert("to".to_string(), Attr::Int(1));
        }
        "BitShift" => {
            attrs.insert("direction".to_string(), Attr::String("LEFT".into()));
        }
        "MaxPool" | "AveragePool" | "LpPool" => {
            attrs.insert("kernel_shape".to_string(), Attr::Ints(vec![2]));
        }
        // fmod, so that float operands are allowed.
        "Mod" => {
            attrs.insert("fmod".to_string(), Attr::Int(1));
        }
        _ => {}
    }
    NodeSpec {
        domain: String::new(),
        op_type: row.name.to_string(),
        opset: 18.max(row.opsets[0] as i64),
        attrs,
        num_outputs: 1,
    }
}

#[test]
fn both_oracles_cover_every_row() {
    for row in ROWS {
        for oracle in ORACLES {
            assert!(
                oracle.supports(&node(row)).is_ok(),
                "{} does not cover {}: {:?}",
                oracle.name(),
                row.name,
                oracle.supports(&node(row))
            );
        }
    }
}

/// Inputs for an elementwise row with a NaN at element 0 of its data operand (the first input, or
/// Where's `X`); every other value is finite.
fn nan_inputs(row: &Row) -> Vec<Option<Value>> {
    let floats =
        |first: f64| Some(Value::new(DType::F32, vec![4], vec![first, 0.5, -1.25, 2.0]).unwrap());
    let finite = || Some(Value::new(DType::F32, vec![4], vec![1.5, -0.75, 3.0, 0.25]).unwrap());
    match row.name {
        "Where" => vec![
            Some(Value::new(DType::Bool, vec![4], vec![1.0, 1.0, 0.0, 0.0]).unwrap()),
            floats(f64::NAN),
            finite(),
        ],
        _ if row.family == Family::Binary => vec![floats(f64::NAN), finite()],
        "CastLike" => vec![floats(f64::NAN), finite()],
        "QuantizeLinear" => vec![
            floats(f64::NAN),
            Some(Value::new(DType::F32, vec![], vec![0.5]).unwrap()),
        ],
        _ => vec![floats(f64::NAN)],
    }
}

#[test]
fn the_nan_column_of_elementwise_rows_is_what_both_oracles_compute() {
    let mut checked = 0;
    for row in ROWS.iter().filter(|r| r.family.is_elementwise()) {
        if !row.dtypes.contains(Ty::F32) {
            // A row whose operands cannot hold a NaN has no NaN behaviour to state.
            assert_eq!(row.nan, NanRule::Ignores, "{}", row.name);
            continue;
        }
        assert_ne!(row.nan, NanRule::Ignores, "{} takes floats", row.name);
        for oracle in ORACLES {
            let out = oracle
                .evaluate(&node(row), &nan_inputs(row))
                .unwrap_or_else(|e| panic!("{} on {}: {e}", oracle.name(), row.name));
            let first = out[0].value.data[0];
            let nan_out = matches!(row.nan, NanRule::Propagates | NanRule::Carries);
            assert_eq!(
                first.is_nan(),
                nan_out,
                "{} gives {first} for {}(NaN), but the table says {:?}",
                oracle.name(),
                row.name,
                row.nan
            );
            checked += 1;
        }
    }
    assert!(checked > 80, "only {checked} checks ran");
}

/// The check above catches a wrong NaN column: ThresholdedRelu marked as propagating is refused.
#[test]
fn a_wrong_nan_column_is_caught() {
    let row = quorum_optable::find("ThresholdedRelu").unwrap();
    let out = Reference.evaluate(&node(row), &nan_inputs(row)).unwrap();
    let claimed = NanRule::Propagates;
    assert_ne!(
        out[0].value.data[0].is_nan(),
        matches!(claimed, NanRule::Propagates | NanRule::Carries)
    );
}
