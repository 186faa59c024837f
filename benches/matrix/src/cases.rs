//! What the matrix measures: one-node models per op family at log-spaced sizes (the sweep), and
//! the real nodes of the corpus's light models (`light`). A case is an op with its attributes and
//! the shapes and dtypes of its inputs; which inputs are weights decides what "inputs on the host"
//! means for it (weights are initializers, resident after the first run, as in a real model).
use std::collections::HashMap;

use quorum::DType;
use quorum::ir::{Attr, Node};

/// One benchmarked node.
#[derive(Debug, Clone)]
pub struct Case {
    pub op: String,
    pub attrs: HashMap<String, Attr>,
    /// Input shapes and dtypes, in the node's input order (all present).
    pub inputs: Vec<(Vec<usize>, DType)>,
    /// Inputs that are weights: initializers in both residencies.
    pub weights: Vec<usize>,
    /// `sweep`, or `light:<model>` for a node taken from a light model.
    pub source: String,
    pub opset: i64,
}

impl Case {
    fn new(op: &str, inputs: Vec<(Vec<usize>, DType)>) -> Case {
        Case {
            op: op.into(),
            attrs: HashMap::new(),
            inputs,
            weights: Vec::new(),
            source: "sweep".into(),
            opset: 17,
        }
    }

    fn attr(mut self, name: &str, v: Attr) -> Case {
        self.attrs.insert(name.into(), v);
        self
    }

    fn weights(mut self, w: &[usize]) -> Case {
        self.weights = w.to_vec();
        self
    }

    /// The node this case runs, reading `in0, in1, ...` and writing `out`.
    pub fn node(&self) -> Node {
        Node {
            name: format!("{}_0", self.op),
            op_type: self.op.clone(),
            domain: String::new(),
            opset: self.opset,
            inputs: (0..self.inputs.len()).map(|i| format!("in{i}")).collect(),
            outputs: vec!["out".into()],
            attrs: self.attrs.clone(),
        }
    }

    /// Shapes in words, for reports: `Add f32[64,64] f32[64,64]`.
    pub fn describe(&self) -> String {
        let mut s = self.op.clone();
        for (shape, _) in &self.inputs {
            s.push_str(&format!(
                " [{}]",
                shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        let mut keys: Vec<&String> = self.attrs.keys().collect();
        keys.sort();
        for k in keys {
            match &self.attrs[k] {
                Attr::Int(v) => s.push_str(&format!(" {k}={v}")),
                Attr::Ints(v) => s.push_str(&format!(" {k}={v:?}")),
                Attr::Float(v) => s.push_str(&format!(" {k}={v}")),
                _ => {}
            }
        }
        s
    }

    /// The first input's dtype.
    pub fn dtype(&self) -> DType {
        self.inputs.first().map_or(DType::F32, |i| i.1)
    }
}

/// How large the sweep goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// A few sizes per family, small enough for a 2-core machine in about a minute.
    Quick,
    /// Every fourfold size from 4 elements to 64 M (256 MB of f32 per input).
    Full,
}

/// Element counts of the sweep.
pub fn element_sizes(size: Size) -> Vec<usize> {
    match size {
        Size::Quick => vec![16, 1 << 10, 1 << 14, 1 << 18, 1 << 20],
        Size::Full => (1..=13).map(|i| 1usize << (2 * i)).collect(),
    }
}

/// Square matrix sides of the matmul sweep.
fn matmul_sides(size: Size) -> Vec<usize> {
    match size {
        Size::Quick => vec![8, 32, 128, 256],
        Size::Full => vec![4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
    }
}

/// Image sides of the conv and pool sweeps.
fn image_sides(size: Size) -> Vec<usize> {
    match size {
        Size::Quick => vec![8, 28, 56],
        Size::Full => vec![4, 8, 16, 28, 56, 112, 224],
    }
}

/// Rows × columns with `n` elements and columns `cols` (at least one row).
fn rows(n: usize, cols: usize) -> Vec<usize> {
    vec![(n / cols).max(1), cols.min(n)]
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

/// The dtypes swept per family.
fn dtypes(size: Size, family: &str) -> Vec<DType> {
    match (size, family) {
        (Size::Full, "elementwise" | "matmul") => vec![DType::F32, DType::F16],
        _ => vec![DType::F32],
    }
}

/// The sweep's cases, family by family (`families`: only these; empty: every family).
pub fn sweep(size: Size, families: &[String]) -> Vec<Case> {
    let want = |f: &str| families.is_empty() || families.iter().any(|x| x == f);
    let f32 = DType::F32;
    let mut out = Vec::new();
    let elems = element_sizes(size);
    if want("elementwise") {
        for d in dtypes(size, "elementwise") {
            for &n in &elems {
                out.push(Case::new("Add", vec![(vec![n], d), (vec![n], d)]));
                out.push(Case::new("Relu", vec![(vec![n], d)]));
                let s = rows(n, 64);
                out.push(Case::new("Mul", vec![(s, d), (vec![64.min(n)], d)]));
            }
        }
    }
    if want("matmul") {
        for d in dtypes(size, "matmul") {
            for &n in &matmul_sides(size) {
                out.push(Case::new("MatMul", vec![(vec![n, n], d), (vec![n, n], d)]).weights(&[1]));
                out.push(Case::new("MatMul", vec![(vec![1, n], d), (vec![n, n], d)]).weights(&[1]));
            }
        }
    }
    if want("conv") {
        for &h in &image_sides(size) {
            let c = 32;
            let x = (vec![1, c, h, h], f32);
            let pads = ints(&[1, 1, 1, 1]);
            out.push(
                Case::new("Conv", vec![x.clone(), (vec![c, c, 3, 3], f32)])
                    .attr("pads", pads.clone())
                    .weights(&[1]),
            );
            out.push(Case::new("Conv", vec![x.clone(), (vec![c, c, 1, 1], f32)]).weights(&[1]));
            out.push(
                Case::new("Conv", vec![x, (vec![c, 1, 3, 3], f32)])
                    .attr("group", Attr::Int(c as i64))
                    .attr("pads", pads)
                    .weights(&[1]),
            );
        }
    }
    if want("pool") {
        for &h in &image_sides(size) {
            let x = (vec![1, 32, h, h], f32);
            out.push(
                Case::new("MaxPool", vec![x.clone()])
                    .attr("kernel_shape", ints(&[3, 3]))
                    .attr("strides", ints(&[2, 2])),
            );
            out.push(Case::new("GlobalAveragePool", vec![x]));
        }
    }
    for &n in &elems {
        let r = rows(n, 256);
        if want("reduce") {
            out.push(
                Case::new("ReduceMean", vec![(r.clone(), f32)])
                    .attr("axes", ints(&[-1]))
                    .attr("keepdims", Attr::Int(1)),
            );
        }
        if want("softmax") {
            out.push(Case::new("Softmax", vec![(r.clone(), f32)]).attr("axis", Attr::Int(-1)));
        }
        if want("norm") {
            let c = r[1];
            out.push(
                Case::new(
                    "LayerNormalization",
                    vec![(r.clone(), f32), (vec![c], f32), (vec![c], f32)],
                )
                .attr("axis", Attr::Int(-1))
                .weights(&[1, 2]),
            );
        }
        let t = rows(n, 64);
        if want("movement") {
            out.push(Case::new("Transpose", vec![(t.clone(), f32)]).attr("perm", ints(&[1, 0])));
        }
        if want("cast") {
            out.push(Case::new("Cast", vec![(vec![n], f32)]).attr("to", Attr::Int(10)));
        }
        if want("index") {
            // Generated integers are in [0, 8): every index is inside the 16 or more columns.
            let idx = (vec![t[1].min(32)], DType::I64);
            out.push(Case::new("Gather", vec![(t, f32), idx]).attr("axis", Attr::Int(1)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_covers_every_family_from_a_few_elements_up() {
        let full = sweep(Size::Full, &[]);
        let fams: std::collections::BTreeSet<&str> = full
            .iter()
            .map(|c| quorum::session::dispatch::family(&c.op))
            .collect();
        for f in [
            "elementwise",
            "matmul",
            "conv",
            "pool",
            "reduce",
            "softmax",
            "norm",
            "movement",
            "cast",
            "index",
        ] {
            assert!(fams.contains(f), "{f} missing from {fams:?}");
        }
        let sizes = element_sizes(Size::Full);
        assert_eq!(sizes[0], 4);
        // Hundreds of MB: the largest f32 input is 256 MB.
        assert_eq!(*sizes.last().unwrap() * 4, 256 << 20);
        assert!(sizes.windows(2).all(|w| w[1] == 4 * w[0]));
        assert!(sweep(Size::Quick, &[]).len() < full.len() / 2);
        let only = sweep(Size::Quick, &["conv".into()]);
        assert!(only.iter().all(|c| c.op == "Conv") && !only.is_empty());
    }
}
