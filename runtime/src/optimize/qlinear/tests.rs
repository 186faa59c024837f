//! The `qdq-integer` rewrite: which quantized Conv and MatMul chains become QLinearConv and
//! QLinearMatMul, which stay, and every output element of the rewritten session within the module's
//! bound of the f32 chain's (equal, or one level apart where the exact value lies within δ of the
//! edge between two levels). The exact value is computed here in integers on the test's own loops.
//! The check is shown to catch rewrites given a wrong zero point, a dropped bias, and a Relu
//! dropped where the QuantizeLinear's clamp does not make it redundant.
use std::collections::HashMap;
use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use crate::ir::{Attr, Dim, Graph, Model, Node, ValueInfo, ValueType};
use crate::optimize::tests::node;
use crate::session::{Session, SessionOptions};
use crate::tensor::{DType, Tensor, Value};

const U: f64 = 1.0 / 16_777_216.0; // 2⁻²⁴

/// Seeded integers in [lo, hi].
fn ints(seed: u64, n: usize, lo: i64, hi: i64) -> Vec<i64> {
    crate::ops::testing::seeded_f32(seed, n, lo as f32, hi as f32 + 0.999)
        .iter()
        .map(|&v| (v.floor() as i64).clamp(lo, hi))
        .collect()
}

fn int_tensor(d: DType, shape: &[usize], v: &[i64]) -> Tensor {
    let s = IxDyn(shape);
    match d {
        DType::U8 => {
            Tensor::U8(ArrayD::from_shape_vec(s, v.iter().map(|&x| x as u8).collect()).unwrap())
        }
        DType::I8 => {
            Tensor::I8(ArrayD::from_shape_vec(s, v.iter().map(|&x| x as i8).collect()).unwrap())
        }
        _ => Tensor::I32(ArrayD::from_shape_vec(s, v.iter().map(|&x| x as i32).collect()).unwrap()),
    }
}

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape, v.to_vec()).unwrap()
}

fn range(d: DType) -> (i64, i64) {
    if d == DType::U8 {
        (0, 255)
    } else {
        (-128, 127)
    }
}

fn info(name: &str, d: DType, shape: &[usize]) -> ValueInfo {
    ValueInfo {
        name: name.into(),
        ty: ValueType::Tensor {
            dtype: Some(d),
            shape: Some(shape.iter().map(|&k| Dim::Fixed(k as i64)).collect()),
        },
    }
}

/// A quantized Conv or MatMul as onnxruntime's quantizer writes it, and what the test needs to
/// compute its exact result.
#[derive(Clone)]
struct Case {
    conv: bool,
    x_type: DType,
    x_shape: Vec<usize>,
    xs: f32,
    xz: i64,
    w_type: DType,
    w_shape: Vec<usize>,
    w: Vec<i64>,
    /// One scale per output channel (one for a MatMul).
    ws: Vec<f32>,
    bias: Option<Vec<i64>>,
    group: usize,
    stride: usize,
    pad: usize,
    relu: bool,
    y_type: DType,
    ys: f32,
    yz: i64,
}

impl Case {
    fn conv(seed: u64, x_type: DType, group: usize, stride: usize, pad: usize) -> Case {
        let (c, m, k) = (4 * group, 6 * group, 3);
        let w_shape = vec![m, c / group, k, k];
        let (lo, hi) = range(x_type);
        Case {
            conv: true,
            x_type,
            x_shape: vec![2, c, 9, 8],
            xs: 0.021,
            xz: (lo + hi) / 2 + 3,
            w_type: DType::I8,
            w: ints(seed, w_shape.iter().product(), -127, 127),
            w_shape,
            ws: (0..m).map(|i| 0.004 + 0.001 * i as f32).collect(),
            bias: Some(ints(seed + 1, m, -3000, 3000)),
            group,
            stride,
            pad,
            relu: false,
            y_type: DType::U8,
            ys: 0.043,
            yz: 120,
        }
    }

    fn matmul(seed: u64) -> Case {
        let w_shape = vec![40, 12];
        Case {
            conv: false,
            x_type: DType::U8,
            x_shape: vec![2, 5, 40],
            xs: 0.017,
            xz: 131,
            w_type: DType::I8,
            w: ints(seed, 480, -127, 127),
            w_shape,
            ws: vec![0.0061],
            bias: None,
            group: 1,
            stride: 1,
            pad: 0,
            relu: false,
            y_type: DType::I8,
            ys: 0.061,
            yz: -7,
        }
    }

    fn m(&self) -> usize {
        if self.conv { self.w_shape[0] } else { 1 }
    }

    fn model(&self) -> Model {
        let m = self.m();
        let mut inits: Vec<(&str, Tensor)> = vec![
            ("xs", f32s(&[], &[self.xs])),
            ("xz", int_tensor(self.x_type, &[], &[self.xz])),
            ("wq", int_tensor(self.w_type, &self.w_shape, &self.w)),
            ("wz", int_tensor(self.w_type, &[m], &vec![0; m])),
            ("ys", f32s(&[], &[self.ys])),
            ("yz", int_tensor(self.y_type, &[], &[self.yz])),
        ];
        if m == 1 {
            inits.push(("ws", f32s(&[], &[self.ws[0]])));
            inits[3].1 = int_tensor(self.w_type, &[], &[0]);
        } else {
            inits.push(("ws", f32s(&[m], &self.ws)));
        }
        let mut nodes = vec![
            node("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["x"]),
            node("dqw", "DequantizeLinear", &["wq", "ws", "wz"], &["w"]),
        ];
        if m > 1 {
            nodes[1].attrs.insert("axis".into(), Attr::Int(0));
        }
        let mut op = if self.conv {
            node("op", "Conv", &["x", "w"], &["y"])
        } else {
            node("op", "MatMul", &["x", "w"], &["y"])
        };
        if let Some(b) = &self.bias {
            let bs: Vec<f32> = self.ws.iter().map(|w| self.xs * w).collect();
            inits.push(("bq", int_tensor(DType::I32, &[m], b)));
            inits.push(("bs", f32s(&[m], &bs)));
            nodes.push(node("dqb", "DequantizeLinear", &["bq", "bs"], &["b"]));
            nodes
                .last_mut()
                .unwrap()
                .attrs
                .insert("axis".into(), Attr::Int(0));
            op.inputs.push("b".into());
        }
        if self.conv {
            let p = self.pad as i64;
            op.attrs.insert("pads".into(), Attr::Ints(vec![p; 4]));
            op.attrs
                .insert("strides".into(), Attr::Ints(vec![self.stride as i64; 2]));
            op.attrs
                .insert("group".into(), Attr::Int(self.group as i64));
        }
        nodes.push(op);
        let pre = if self.relu {
            nodes.push(node("relu", "Relu", &["y"], &["r"]));
            "r"
        } else {
            "y"
        };
        nodes.push(node("qy", "QuantizeLinear", &[pre, "ys", "yz"], &["yq"]));
        nodes.push(node(
            "dqy",
            "DequantizeLinear",
            &["yq", "ys", "yz"],
            &["out"],
        ));
        let initializers: HashMap<String, Arc<Value>> = inits
            .into_iter()
            .map(|(k, v)| (k.to_string(), Arc::new(Value::Tensor(v))))
            .collect();
        Model::for_test(
            nodes,
            vec![info("xq", self.x_type, &self.x_shape)],
            vec![info("out", DType::F32, &self.out_shape())],
            initializers,
        )
    }

    fn out_shape(&self) -> Vec<usize> {
        if !self.conv {
            let mut s = self.x_shape.clone();
            *s.last_mut().unwrap() = self.w_shape[1];
            return s;
        }
        let o = |i: usize| (i + 2 * self.pad - self.w_shape[2]) / self.stride + 1;
        vec![
            self.x_shape[0],
            self.m(),
            o(self.x_shape[2]),
            o(self.x_shape[3]),
        ]
    }

    /// Per output element: (S, T) with S the exact integer sum Σ(xq−xz)(wq) + bq and T the sum
    /// of the terms' magnitudes in real units (the f32 chain's error scale).
    fn exact(&self, xq: &[i64]) -> Vec<(i64, f64)> {
        let xs = self.xs as f64;
        let os = self.out_shape();
        let mut out = Vec::with_capacity(os.iter().product());
        if !self.conv {
            let (k, n) = (self.w_shape[0], self.w_shape[1]);
            let ws = self.ws[0] as f64;
            for row in xq.chunks(k) {
                for j in 0..n {
                    let (mut s, mut t) = (0i64, 0f64);
                    for (p, &x) in row.iter().enumerate() {
                        let term = (x - self.xz) * self.w[p * n + j];
                        s += term;
                        t += (term.abs() as f64) * xs * ws;
                    }
                    out.push((s, t));
                }
            }
            return out;
        }
        let [n, c, h, w] = self.x_shape[..] else {
            unreachable!()
        };
        let [m, cg, kh, kw] = self.w_shape[..] else {
            unreachable!()
        };
        let (oh, ow) = (os[2], os[3]);
        let mg = m / self.group;
        for b in 0..n {
            for oc in 0..m {
                let g = oc / mg;
                let ws = self.ws[oc] as f64;
                let bias = self.bias.as_ref().map_or(0, |v| v[oc]);
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (mut s, mut t) = (bias, (bias.abs() as f64) * xs * ws);
                        for ic in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * self.stride + ky) as i64 - self.pad as i64;
                                    let ix = (ox * self.stride + kx) as i64 - self.pad as i64;
                                    if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                        continue;
                                    }
                                    let ch = g * cg + ic;
                                    let xv = xq[((b * c + ch) * h + iy as usize) * w + ix as usize];
                                    let wv = self.w[((oc * cg + ic) * kh + ky) * kw + kx];
                                    let term = (xv - self.xz) * wv;
                                    s += term;
                                    t += (term.abs() as f64) * xs * ws;
                                }
                            }
                        }
                        out.push((s, t));
                    }
                }
            }
        }
        out
    }

    /// The number of terms each output sums (the bias counted as one).
    fn k(&self) -> usize {
        if self.conv {
            self.w_shape[1..].iter().product::<usize>() + 1
        } else {
            self.w_shape[0]
        }
    }

    /// The output channel of flat output element `i`.
    fn channel(&self, i: usize) -> usize {
        if !self.conv {
            return 0;
        }
        let os = self.out_shape();
        (i / (os[2] * os[3])) % os[1]
    }
}

fn session(m: &Model, optimize: bool) -> Session {
    let options = SessionOptions {
        optimize,
        qdq_integer: true,
        ..Default::default()
    };
    Session::from_model(m.clone(), options).unwrap()
}

/// The output levels of `s` for input `xq`.
fn levels(s: &Session, case: &Case, xq: &[i64]) -> Vec<i64> {
    let x = int_tensor(case.x_type, &case.x_shape, xq);
    let out = s.run(vec![("xq".into(), Value::Tensor(x))]).unwrap();
    let t = out.into_iter().next().unwrap().1.into_tensor().unwrap();
    let ys = case.ys as f64;
    t.to_f64_vec()
        .unwrap()
        .iter()
        .map(|&v| (v / ys).round() as i64 + case.yz)
        .collect()
}

/// Elements of `rewritten`'s output outside the module's bound of `plain`'s, over three seeded
/// inputs, and how many differ within it (one level, near an edge).
fn violations(case: &Case, plain: &Session, rewritten: &Session) -> (usize, usize) {
    let (lo, hi) = range(case.x_type);
    let (mut bad, mut near) = (0, 0);
    for seed in [21, 22, 23] {
        let xq = ints(seed, case.x_shape.iter().product(), lo, hi);
        let a = levels(plain, case, &xq);
        let b = levels(rewritten, case, &xq);
        assert_eq!(a.len(), b.len());
        let exact = case.exact(&xq);
        for (i, ((&p, &q), &(s, t))) in a.iter().zip(&b).zip(&exact).enumerate() {
            if p == q {
                continue;
            }
            let ws = case.ws[case.channel(i)] as f64;
            let (xs, ys) = (case.xs as f64, case.ys as f64);
            let v = s as f64 * xs * ws / ys;
            let delta = (case.k() + 2) as f64 * U * t / ys + 5.0 * U * v.abs();
            let edge = (v + case.yz as f64 - 0.5).round() + 0.5;
            if (p - q).abs() == 1 && (v + case.yz as f64 - edge).abs() <= delta {
                near += 1;
            } else {
                bad += 1;
            }
        }
    }
    (bad, near)
}

use crate::optimize::tests::session_ops as ops;

fn rewritten(case: &Case) -> (Session, Session) {
    let m = case.model();
    let (plain, opt) = (session(&m, false), session(&m, true));
    assert!(plain.rewrites().is_empty());
    (plain, opt)
}

#[test]
fn quantized_convs_become_qlinear_conv_within_one_level_near_edges() {
    let mut cases = Vec::new();
    for (x_type, group, stride, pad) in [
        (DType::U8, 1, 1, 1),
        (DType::I8, 1, 2, 0),
        (DType::U8, 2, 1, 2),
    ] {
        cases.push(Case::conv(7 + group as u64, x_type, group, stride, pad));
    }
    // No bias, one weight scale, an i8 output.
    let mut c = Case::conv(9, DType::U8, 1, 1, 1);
    c.bias = None;
    let m = c.m();
    c.ws = vec![0.0057; m];
    c.y_type = DType::I8;
    c.yz = -5;
    cases.push(c);
    // Relu before a QuantizeLinear whose zero point is its type's minimum.
    for (y_type, yz) in [(DType::U8, 0), (DType::I8, -128)] {
        let mut c = Case::conv(10, DType::U8, 1, 1, 1);
        c.relu = true;
        c.y_type = y_type;
        c.yz = yz;
        c.ys = 0.031;
        cases.push(c);
    }
    for case in cases {
        let (plain, opt) = rewritten(&case);
        assert_eq!(ops(&opt), ["QLinearConv", "DequantizeLinear"]);
        let r = opt.rewrites();
        assert!(
            r.len() == 1 && r[0].pass == "qdq-integer" && !r[0].exact(),
            "{r:?}"
        );
        let (bad, near) = violations(&case, &plain, &opt);
        assert_eq!(bad, 0, "{near} within the bound");
    }
}

#[test]
fn quantized_matmuls_become_qlinear_matmul_within_one_level_near_edges() {
    let case = Case::matmul(5);
    let (plain, opt) = rewritten(&case);
    assert_eq!(ops(&opt), ["QLinearMatMul", "DequantizeLinear"]);
    assert_eq!(violations(&case, &plain, &opt).0, 0);
}

/// Left alone: chains whose meaning the rewrite would change, and depthwise convolutions (faster in
/// f32, see the module).
#[test]
fn chains_the_pass_leaves_stay() {
    let stays = |case: &Case, change: &dyn Fn(&mut Model)| {
        let mut m = case.model();
        change(&mut m);
        let s = session(&m, true);
        assert!(
            s.rewrites().iter().all(|r| r.pass != "qdq-integer"),
            "{:?}",
            s.rewrites()
        );
    };
    let conv = Case::conv(3, DType::U8, 1, 1, 1);
    let set = |m: &mut Model, name: &str, t: Tensor| {
        m.graph
            .initializers
            .insert(name.into(), Arc::new(Value::Tensor(t)));
    };
    // A bias whose scale is not the product xs·ws.
    stays(&conv, &|m| {
        let bs: Vec<f32> = conv.ws.iter().map(|w| conv.xs * w * 1.0001).collect();
        set(m, "bs", f32s(&[conv.m()], &bs));
    });
    // A bias zero point other than zero.
    stays(&conv, &|m| {
        set(
            m,
            "bz",
            int_tensor(DType::I32, &[conv.m()], &vec![1; conv.m()]),
        );
        let dqb = m.graph.nodes.iter_mut().find(|n| n.name == "dqb").unwrap();
        dqb.inputs.push("bz".into());
    });
    // The Conv's output read by a second node too.
    stays(&conv, &|m| {
        m.graph
            .nodes
            .push(node("peek", "Relu", &["y"], &["peeked"]));
        m.graph
            .outputs
            .push(info("peeked", DType::F32, &conv.out_shape()));
    });
    // A Relu the QuantizeLinear's clamp does not cover (zero point above the minimum).
    let mut relu = conv.clone();
    relu.relu = true;
    stays(&relu, &|_| {});
    // Weights a caller can replace (a graph input with a default).
    stays(&conv, &|m| {
        m.graph.inputs.push(info("wq", DType::I8, &conv.w_shape));
    });
    // A depthwise convolution.
    let mut dw = conv.clone();
    dw.group = 4;
    dw.x_shape[1] = 4;
    dw.w_shape = vec![4, 1, 3, 3];
    dw.w = ints(8, 36, -127, 127);
    dw.ws = vec![0.004, 0.005, 0.006, 0.007];
    dw.bias = Some(ints(9, 4, -3000, 3000));
    stays(&dw, &|_| {});
    // A MatMul with per-column weight scales.
    let mm = Case::matmul(4);
    stays(&mm, &|m| {
        set(m, "ws", f32s(&[12], &[0.006; 12]));
        set(m, "wz", int_tensor(DType::I8, &[12], &[0; 12]));
    });
}

/// The rewritten graph of `case` after `wrong`, as an unoptimised session.
fn broken(case: &Case, wrong: impl FnOnce(&mut Graph)) -> Session {
    let m = case.model();
    let constants = crate::optimize::constants(&m.graph, true);
    let (mut g, _) = crate::optimize::before_folding(&m.graph, &constants, &|_| true).unwrap();
    wrong(&mut g);
    let mut m = m.clone();
    m.graph = g;
    session(&m, false)
}

fn qlinear(g: &mut Graph) -> &mut Node {
    g.nodes
        .iter_mut()
        .find(|n| n.op_type.starts_with("QLinear"))
        .unwrap()
}

#[test]
fn the_bound_catches_wrong_rewrites() {
    let case = Case::conv(12, DType::U8, 1, 1, 1);
    let plain = session(&case.model(), false);
    // x's zero point off by one.
    let s = broken(&case, |g| {
        let z = int_tensor(DType::U8, &[], &[case.xz + 1]);
        g.initializers
            .insert("xz1".into(), Arc::new(Value::Tensor(z)));
        qlinear(g).inputs[2] = "xz1".into();
    });
    assert!(violations(&case, &plain, &s).0 > 0);
    // The bias dropped.
    let s = broken(&case, |g| {
        qlinear(g).inputs.truncate(8);
    });
    assert!(violations(&case, &plain, &s).0 > 0);
    // A Relu dropped where the zero point is above the minimum: rewritten as if it were not
    // there (the Relu's chain made by hand, since the pass leaves it).
    let mut relu = case.clone();
    relu.relu = true;
    let plain = session(&relu.model(), false);
    let s = broken(&case, |_| {});
    assert!(violations(&relu, &plain, &s).0 > 0);
    // And the MatMul's weight zero point off by one.
    let mm = Case::matmul(6);
    let plain = session(&mm.model(), false);
    let s = broken(&mm, |g| {
        let z = int_tensor(DType::I8, &[], &[1]);
        g.initializers
            .insert("wz1".into(), Arc::new(Value::Tensor(z)));
        qlinear(g).inputs[5] = "wz1".into();
    });
    assert!(violations(&mm, &plain, &s).0 > 0);
}
