//! Test helpers: a tiny SplitMix64 and node builders.
use crate::{Attr, NodeSpec};
use std::collections::BTreeMap;

pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1), never exactly zero.
    pub fn unit(&mut self) -> f64 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let v = 2.0 * u - 1.0;
        if v == 0.0 { 0.5 } else { v }
    }
    pub fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.unit()).collect()
    }
}

pub fn node(op: &str, opset: i64, attrs: &[(&str, Attr)]) -> NodeSpec {
    let mut m = BTreeMap::new();
    for (k, v) in attrs {
        m.insert(k.to_string(), v.clone());
    }
    NodeSpec {
        domain: String::new(),
        op_type: op.to_string(),
        opset,
        attrs: m,
        num_outputs: 1,
    }
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs())) || (a.is_nan() && b.is_nan())
}

pub fn assert_all_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(close(*g, *w), "element {i}: got {g}, want {w}");
    }
}
