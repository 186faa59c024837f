//! Times both oracles on the op shapes that GPT-2-small (sequence 128) and bert-base (batch 8,
//! sequence 128) put before them, and prints a digest of each answer's bits.
//!
//! `cargo run --release -p quorum-oracle --example oracle_speed [CASE...]` (all cases when none are
//! named). It uses only the crate's public API, so the same file builds against an older checkout of
//! the crate; running both builds one after the other gives before/after figures on one machine, and
//! equal value digests show the answers are bit-identical. `QUORUM_ORACLE_THREADS` sets the threads.
//! Output: one tab-separated line per case and oracle: case, oracle, seconds, value digest,
//! magnitude digest.
#![forbid(unsafe_code)]
use quorum_oracle::independent::Independent;
use quorum_oracle::reference::Reference;
use quorum_oracle::{Attr, DType, NodeSpec, Oracle, Value};
use std::time::Instant;

struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1), rounded to f32 (the engines' inputs are f32).
    fn values(&mut self, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| ((self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32 as f64)
            .collect()
    }
}

fn node(op: &str, attrs: &[(&str, Attr)]) -> NodeSpec {
    NodeSpec {
        domain: String::new(),
        op_type: op.into(),
        opset: 17,
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        num_outputs: 1,
    }
}

fn tensor(rng: &mut SplitMix64, shape: &[usize], scale: f64) -> Option<Value> {
    let n = shape.iter().product();
    let data = rng.values(n).into_iter().map(|v| v * scale).collect();
    Some(Value::new(DType::F32, shape.to_vec(), data).expect("element count matches the shape"))
}

/// (name, node, inputs): shapes from bert-base b8 s128 and GPT-2-small s128, and one ResNet conv.
fn cases() -> Vec<(&'static str, NodeSpec, Vec<Option<Value>>)> {
    let mut r = SplitMix64(38);
    vec![
        (
            "matmul_8x128x768_768x3072",
            node("MatMul", &[]),
            vec![
                tensor(&mut r, &[8, 128, 768], 1.0),
                tensor(&mut r, &[768, 3072], 0.05),
            ],
        ),
        (
            "matmul_attn_8x12x128x64_8x12x64x128",
            node("MatMul", &[]),
            vec![
                tensor(&mut r, &[8, 12, 128, 64], 1.0),
                tensor(&mut r, &[8, 12, 64, 128], 1.0),
            ],
        ),
        (
            "gemm_tb_128x768_2304x768",
            node("Gemm", &[("transB", Attr::Int(1))]),
            vec![
                tensor(&mut r, &[128, 768], 1.0),
                tensor(&mut r, &[2304, 768], 0.05),
                tensor(&mut r, &[2304], 0.1),
            ],
        ),
        (
            "softmax_8x12x128x128",
            node("Softmax", &[]),
            vec![tensor(&mut r, &[8, 12, 128, 128], 4.0)],
        ),
        (
            "layernorm_8x128x768",
            node("LayerNormalization", &[]),
            vec![
                tensor(&mut r, &[8, 128, 768], 2.0),
                tensor(&mut r, &[768], 1.0),
                tensor(&mut r, &[768], 1.0),
            ],
        ),
        (
            "add_bias_8x128x3072",
            node("Add", &[]),
            vec![
                tensor(&mut r, &[8, 128, 3072], 1.0),
                tensor(&mut r, &[3072], 1.0),
            ],
        ),
        (
            "erf_8x128x3072",
            node("Erf", &[]),
            vec![tensor(&mut r, &[8, 128, 3072], 2.0)],
        ),
        (
            "gelu_8x128x3072",
            node("Gelu", &[]),
            vec![tensor(&mut r, &[8, 128, 3072], 3.0)],
        ),
        (
            "tanh_8x128x3072",
            node("Tanh", &[]),
            vec![tensor(&mut r, &[8, 128, 3072], 3.0)],
        ),
        (
            "mul_8x128x3072_8x128x3072",
            node("Mul", &[]),
            vec![
                tensor(&mut r, &[8, 128, 3072], 1.0),
                tensor(&mut r, &[8, 128, 3072], 1.0),
            ],
        ),
        (
            "div_8x12x128x128_scalar",
            node("Div", &[]),
            vec![
                tensor(&mut r, &[8, 12, 128, 128], 4.0),
                tensor(&mut r, &[], 8.0),
            ],
        ),
        (
            "pow_8x128x3072_scalar",
            node("Pow", &[]),
            vec![
                tensor(&mut r, &[8, 128, 3072], 2.0),
                Some(Value::new(DType::F32, vec![], vec![3.0]).expect("a scalar")),
            ],
        ),
        (
            "sub_8x128x768_8x128x1",
            node("Sub", &[]),
            vec![
                tensor(&mut r, &[8, 128, 768], 1.0),
                tensor(&mut r, &[8, 128, 1], 1.0),
            ],
        ),
        (
            "where_8x1x1x128_8x12x128x128",
            node("Where", &[]),
            vec![
                Some(
                    Value::new(
                        DType::Bool,
                        vec![8, 1, 1, 128],
                        (0..1024).map(|i| (i % 3 != 0) as u8 as f64).collect(),
                    )
                    .expect("element count matches the shape"),
                ),
                tensor(&mut r, &[8, 12, 128, 128], 4.0),
                tensor(&mut r, &[], 1.0),
            ],
        ),
        (
            "cast_f16_8x128x3072",
            node("Cast", &[("to", Attr::Int(10))]),
            vec![tensor(&mut r, &[8, 128, 3072], 3.0)],
        ),
        (
            "reducemean_8x128x768",
            node("ReduceMean", &[("axes", Attr::Ints(vec![-1]))]),
            vec![tensor(&mut r, &[8, 128, 768], 1.0)],
        ),
        (
            "conv3x3_1x256x56x56_256",
            node("Conv", &[("pads", Attr::Ints(vec![1, 1, 1, 1]))]),
            vec![
                tensor(&mut r, &[1, 256, 56, 56], 1.0),
                tensor(&mut r, &[256, 256, 3, 3], 0.05),
                tensor(&mut r, &[256], 0.1),
            ],
        ),
    ]
}

/// FNV-1a over the bits of a slice of f64.
fn digest(xs: &[f64]) -> u64 {
    xs.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
        (h ^ x.to_bits()).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let oracles: [&dyn Oracle; 2] = [&Reference, &Independent];
    for (name, node, inputs) in cases() {
        if !wanted.is_empty() && !wanted.iter().any(|w| name.contains(w.as_str())) {
            continue;
        }
        for oracle in oracles {
            let start = Instant::now();
            let out = oracle.evaluate(&node, &inputs);
            let secs = start.elapsed().as_secs_f64();
            match out {
                Ok(outs) => println!(
                    "{name}\t{}\t{secs:.3}\t{:016x}\t{:016x}",
                    oracle.name(),
                    digest(&outs[0].value.data),
                    digest(&outs[0].magnitude)
                ),
                Err(e) => println!("{name}\t{}\terror: {e}", oracle.name()),
            }
        }
    }
}
