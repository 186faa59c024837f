//! The op table (`quorum_optable`) against the runtime: the CPU registry runs every row and has the
//! in-place forms the table states, and each device backend claims exactly the table's rows for it
//! (claims need no device, so this runs everywhere).
#![forbid(unsafe_code)]
use quorum::backend::Provider;
use quorum::ir::Node;
use quorum::ops::Registry;
use quorum::providers::backend;
use quorum_optable::{Backend, InPlace, ROWS, Row};

fn node(op: &str) -> Node {
    let opset = quorum_optable::find(op).map_or(18, |r| 18.max(r.opsets[0] as i64));
    Node {
        name: "n".into(),
        op_type: op.into(),
        domain: String::new(),
        opset,
        inputs: vec![],
        outputs: vec![],
        attrs: Default::default(),
    }
}

/// Where `claims` (whether a backend claims a default-domain op, from the node alone) and the
/// table's rows for `backend` differ, over every op the CPU registry knows: one line per op.
fn drift(backend: Backend, claims: impl Fn(&Node) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut ops: Vec<&str> = Registry::cpu()
        .ops()
        .filter(|(d, _)| d.is_empty())
        .map(|(_, op)| op)
        .collect();
    ops.sort();
    for op in ops {
        let listed = quorum_optable::find(op).is_some_and(|r| r.devices.contains(backend));
        let claimed = claims(&node(op));
        if listed != claimed {
            out.push(format!(
                "{op}: the table says {listed}, the {backend:?} claim says {claimed}"
            ));
        }
    }
    out
}

#[test]
fn the_cpu_runs_every_row() {
    for row in ROWS {
        assert!(Registry::cpu().get("", row.name).is_some(), "{}", row.name);
    }
}

#[test]
fn every_backend_claims_exactly_its_rows() {
    for (provider, b) in [
        (Provider::Cuda, Backend::Cuda),
        (Provider::Wgpu, Backend::Wgpu),
    ] {
        let be = backend(provider).unwrap_or_else(|| panic!("this build lacks {provider:?}"));
        assert_eq!(drift(b, |n| be.claim(n).is_ok()), Vec::<String>::new());
    }
}

/// The drift check catches a backend that claims an op the table does not give it, and one that
/// declines a row.
#[test]
fn drift_is_caught() {
    let cuda = backend(Provider::Cuda).unwrap();
    let extra = drift(Backend::Cuda, |n| {
        n.op_type == "GatherND" || cuda.claim(n).is_ok()
    });
    assert_eq!(extra.len(), 1, "{extra:?}");
    assert!(extra[0].starts_with("GatherND"));
    let missing = drift(Backend::Cuda, |n| {
        n.op_type != "Softsign" && cuda.claim(n).is_ok()
    });
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(missing[0].starts_with("Softsign"));
}

/// Where the rows' in-place column and the CPU registry's in-place forms differ, one line per row.
fn in_place_drift(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|row| {
            let registered = Registry::cpu()
                .get_in_place("", row.name)
                .map_or(0, |(_, inputs)| inputs);
            (registered != row.in_place.inputs()).then(|| {
                format!(
                    "{}: the table says {:?}, the registry writes over {registered} input(s)",
                    row.name, row.in_place
                )
            })
        })
        .collect()
}

#[test]
fn the_in_place_column_is_the_registry() {
    assert_eq!(in_place_drift(ROWS), Vec::<String>::new());
}

/// The in-place check catches a row whose column is wrong: Softmax without its form, Sign with one.
#[test]
fn a_wrong_in_place_column_is_caught() {
    let row = |name: &str, in_place: InPlace| {
        let r = quorum_optable::find(name).unwrap();
        Row {
            in_place,
            opsets: r.opsets,
            ..*r
        }
    };
    let broken = [row("Softmax", InPlace::None), row("Sign", InPlace::First)];
    let drift = in_place_drift(&broken);
    assert_eq!(drift.len(), 2, "{drift:?}");
}
