//! The `attention` rewrite on the device: the exporters' attention chains run as one
//! FusedAttention node, judged by both oracles as the chain under strict verification, on the
//! route `QUORUM_CUDA_ATTENTION` names (`run.sh tests` runs these tests on each), in f32,
//! f16 and bf16, with and without K's Transpose, scale and mask, at the shapes of ViT-B/16
//! (197 tokens, 12 heads of 64, Q and Kᵀ scaled by √⅛ as PyTorch exports it) and BERT-base (128 tokens, a padding mask of −10000), and at odd
//! ones (keys not a multiple of the tile, value widths not a multiple of 32, broadcast batches,
//! masked keys of −∞).
use quorum::session::GraphCapture;
use quorum::{DType, Provider, Session, SessionOptions, Tensor, Value, proto};

use crate::elementwise::as_dtype;
use crate::graphs::options;
use crate::harness::{bf16_off, on_cpu, rand_range};
use crate::models::{model, node, tensor_proto};

/// One attention chain: operand shapes (K as the Transpose's input when `transpose`), its scale
/// and whether a mask of `mask` shape is added.
struct Chain {
    q: Vec<usize>,
    k: Vec<usize>,
    v: Vec<usize>,
    transpose: bool,
    /// (value, divide)
    scale: Option<(f32, bool)>,
    /// Q and Kᵀ each multiplied by this before the product (PyTorch's export of its attention).
    prescale: Option<f32>,
    mask: Option<Vec<usize>>,
}

fn perm_attr(mut n: proto::NodeProto, perm: Vec<i64>) -> proto::NodeProto {
    n.attribute.push(proto::AttributeProto {
        name: Some("perm".into()),
        ints: perm,
        r#type: Some(proto::attribute_proto::AttributeType::Ints as i32),
        ..Default::default()
    });
    n
}

fn bytes(c: &Chain, dtype: DType) -> Vec<u8> {
    let mut nodes = Vec::new();
    let mut inits = Vec::new();
    let kt = if c.transpose {
        let r = c.k.len() as i64;
        let mut perm: Vec<i64> = (0..r).collect();
        perm.swap(r as usize - 2, r as usize - 1);
        nodes.push(perm_attr(node("Transpose", &["k"], "kt"), perm));
        "kt"
    } else {
        "k"
    };
    let (mut qa, mut kb) = ("q", kt);
    if let Some(c) = c.prescale {
        let cst = as_dtype(&Tensor::from_f32(&[], vec![c]).unwrap(), dtype);
        inits.push(tensor_proto("pc", &cst));
        nodes.push(node("Mul", &["q", "pc"], "q2"));
        nodes.push(node("Mul", &[kt, "pc"], "k2"));
        (qa, kb) = ("q2", "k2");
    }
    nodes.push(node("MatMul", &[qa, kb], "s"));
    let mut x = "s";
    if let Some((s, divide)) = c.scale {
        let cst = as_dtype(&Tensor::from_f32(&[], vec![s]).unwrap(), dtype);
        inits.push(tensor_proto("c", &cst));
        nodes.push(node(if divide { "Div" } else { "Mul" }, &["s", "c"], "x"));
        x = "x";
    }
    if c.mask.is_some() {
        nodes.push(node("Add", &[x, "m"], "y"));
        x = "y";
    }
    nodes.push(node("Softmax", &[x], "p"));
    nodes.push(node("MatMul", &["p", "v"], "o"));
    let mut inputs = vec!["q", "k", "v"];
    if c.mask.is_some() {
        inputs.push("m");
    }
    model(nodes, &inputs, &["o"], inits)
}

/// The mask's values: uniform in [−2, 0], a fifth of the keys at `masked` (−10000 or −∞), never a
/// whole row.
fn mask(seed: u64, shape: &[usize], masked: f32, dtype: DType) -> Tensor {
    let t = rand_range(seed, shape, -2.0, 0.0);
    let cols = *shape.last().unwrap();
    let mut v = t.to_f64_vec().unwrap();
    for (i, x) in v.iter_mut().enumerate() {
        if (i % cols) % 5 == 3 {
            *x = masked as f64;
        }
    }
    Tensor::from_f64s(dtype, shape, v).unwrap()
}

/// Runs `c` twice on seeded inputs in a strictly verified CUDA session: the chain must have
/// become one FusedAttention on the device, and both runs agree with both oracles.
fn judged(c: &Chain, dtype: DType, masked: f32, seed: u64) {
    let s = Session::from_bytes(
        &bytes(c, dtype),
        SessionOptions {
            verify: quorum::VerifyMode::Strict,
            ..options(1, GraphCapture::Off)
        },
    )
    .unwrap();
    assert!(
        s.rewrites().iter().any(|r| r.pass == "attention"),
        "{:?}",
        s.rewrites()
    );
    let on: Vec<(String, Provider)> = s
        .placement()
        .iter()
        .map(|p| (p.op.clone(), p.provider))
        .collect();
    assert_eq!(
        on,
        [("com.quorum::FusedAttention".to_string(), Provider::Cuda)],
        "{dtype} {:?}",
        c.q
    );
    for run in 0..2u64 {
        let sd = seed + 10 * run;
        let mut inputs = vec![
            ("q", as_dtype(&rand_range(sd, &c.q, -2.0, 2.0), dtype)),
            ("k", as_dtype(&rand_range(sd + 1, &c.k, -2.0, 2.0), dtype)),
            ("v", as_dtype(&rand_range(sd + 2, &c.v, -1.0, 3.0), dtype)),
        ];
        if let Some(m) = &c.mask {
            inputs.push(("m", mask(sd + 3, m, masked, dtype)));
        }
        let out = s
            .run(
                inputs
                    .into_iter()
                    .map(|(n, t)| (n.to_string(), Value::Tensor(t)))
                    .collect(),
            )
            .unwrap();
        assert_eq!(out[0].1.as_tensor().unwrap().dtype(), dtype);
    }
    let v = s.verification();
    let judged = v
        .get("com.quorum::FusedAttention")
        .unwrap_or_else(|| panic!("FusedAttention was judged: {v:?}"));
    assert_eq!(
        (judged.checked, judged.mismatched, judged.unsettled),
        (2, 0, 0),
        "{dtype} {:?}: {v:?}",
        c.q
    );
}

#[test]
fn vit_and_bert_attention_run_fused_and_agree_with_the_oracles() {
    if on_cpu() {
        return;
    }
    let vit = Chain {
        q: vec![1, 12, 197, 64],
        k: vec![1, 12, 197, 64],
        v: vec![1, 12, 197, 64],
        transpose: true,
        scale: None,
        prescale: Some(0.125f32.sqrt()),
        mask: None,
    };
    let bert = Chain {
        q: vec![2, 12, 128, 64],
        k: vec![2, 12, 128, 64],
        v: vec![2, 12, 128, 64],
        transpose: true,
        scale: Some((8.0, true)),
        prescale: None,
        mask: Some(vec![2, 1, 1, 128]),
    };
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        if bf16_off(dtype) {
            continue;
        }
        judged(&vit, dtype, -10000.0, 9100);
        judged(&bert, dtype, -10000.0, 9200);
    }
}

#[test]
fn odd_shapes_broadcasts_and_infinite_masks_agree_with_the_oracles() {
    if on_cpu() {
        return;
    }
    // Kᵀ given directly, 70 keys (a partial tile), Dv 40, a per-row mask with −∞ keys.
    let kt = Chain {
        q: vec![3, 5, 33, 24],
        k: vec![3, 5, 24, 70],
        v: vec![3, 5, 70, 40],
        transpose: false,
        scale: None,
        prescale: None,
        mask: Some(vec![33, 70]),
    };
    // Batches broadcast across Q, K and V; one query row; Dv 1.
    let broadcast = Chain {
        q: vec![2, 4, 1, 32],
        k: vec![1, 4, 50, 32],
        v: vec![2, 1, 50, 1],
        transpose: true,
        scale: Some((0.3, false)),
        prescale: Some(1.5),
        mask: Some(vec![2, 1, 1, 50]),
    };
    // Rank 2, the widest D the kernel takes, and more rows than one block.
    let wide = Chain {
        q: vec![40, 256],
        k: vec![37, 256],
        v: vec![37, 256],
        transpose: true,
        scale: Some((16.0, true)),
        prescale: None,
        mask: None,
    };
    for dtype in [DType::F32, DType::F16] {
        judged(&kt, dtype, f32::NEG_INFINITY, 9300);
        judged(&broadcast, dtype, f32::NEG_INFINITY, 9400);
        judged(&wide, dtype, -10000.0, 9500);
    }
}
