//! Generators of random valid nodes for every row of the op table (`quorum_optable`): the accelerated
//! op set and the host-only rows the oracles judge (LSTM, GRU, Shape, Size).
//!
//! A generator is plain code reading its decisions (ranks, dims, attribute forms) from a [`Gen`]: a
//! sequence of choices drawn by proptest, each read modulo the number of options, so that shrinking
//! the choices towards 0 shrinks the node towards its simplest form (small ranks and dims, default
//! attributes), Hypothesis-style. Input values come from a separate seed, never all zeros.
mod data;
mod elementwise;
mod generated;
mod nn;
mod norm;
mod quantize;
mod resize;
mod rnn;

use quorum_oracle::{DType, Value};

pub use crate::opcase::Case;

/// How many choices one case draws (a generator that reads past the end gets 0s: simplest forms).
pub const CHOICES: usize = 96;

/// Every op with a generator: every row of the op table (`quorum_optable::ROWS`), in table order.
pub fn ops() -> impl Iterator<Item = &'static str> {
    quorum_optable::ROWS.iter().map(|r| r.name)
}

/// Builds one case of `op` from proptest's choices and a value seed. Panics on an op without a
/// generator (see [`ops`]).
pub fn generate(op: &str, choices: &[u32], seed: u64) -> Case {
    let mut g = Gen::new(choices, seed);
    // One case in a hundred is big (the second-last choice decides; 0, where shrinking goes, is not).
    g.big = choices.get(CHOICES - 2).is_some_and(|c| c % 100 == 99);
    let row = quorum_optable::find(op).unwrap_or_else(|| panic!("{op} is not in the op table"));
    let op = row.name;
    let case = elementwise::generate(op, &mut g)
        .or_else(|| nn::generate(op, &mut g))
        .or_else(|| data::generate(op, &mut g))
        .or_else(|| generated::generate(op, &mut g))
        .or_else(|| quantize::generate(op, &mut g))
        .unwrap_or_else(|| panic!("no generator for {op}"))
        .trim();
    retype_floats(case, row, choices.get(CHOICES - 1).copied().unwrap_or(0))
}

/// Ops whose generators choose their own float types (or whose float inputs must stay f32: Resize's
/// scales).
const OWN_FLOAT_TYPES: &[&str] = &["Cast", "CastLike", "ConstantOfShape", "Dropout", "Resize"];

/// One case in twenty computes in f16, one in twenty in bf16 and one in twenty in f64 (the last
/// choice decides, and 0, where shrinking goes, is f32): every f32 input becomes that type, so that the
/// kernels' narrow-type paths (widened to f32, rounded once) and f64 paths are judged by the bounds
/// of their class like the f32 ones. Values are rounded into the type by `round_inputs`. A type the
/// op's data operand may not have (the op table's `dtypes`) is not chosen.
fn retype_floats(mut case: Case, row: &quorum_optable::Row, choice: u32) -> Case {
    let (to, ty) = match choice % 20 {
        17 => (DType::F16, quorum_optable::Ty::F16),
        18 => (DType::BF16, quorum_optable::Ty::Bf16),
        19 => (DType::F64, quorum_optable::Ty::F64),
        _ => return case,
    };
    if !row.dtypes.contains(ty) {
        return case;
    }
    if OWN_FLOAT_TYPES.contains(&case.op) {
        return case;
    }
    for v in case.inputs.iter_mut().flatten() {
        if v.dtype == DType::F32 {
            v.dtype = to;
        }
    }
    case
}

/// How input values are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    /// Uniform in (-scale, scale).
    Signed(f64),
    /// Uniform in [lo, hi].
    Range(f64, f64),
    /// Multiples of 0.5 in [-scale, scale]: ties for Round, comparisons and arg-reductions.
    Halves(f64),
    /// Distinct values (a shuffled ramp): no ties, for MaxPool indices.
    Distinct,
}

/// The choice sequence and the value generator of one case.
pub struct Gen<'a> {
    choices: &'a [u32],
    at: usize,
    rng: u64,
    pub seed: u64,
    /// A big case: up to [`BIG_DIMS`] of its dims are drawn from [`BIG_DIM`] instead of 1..=6, so
    /// that tensors reach the sizes where the CPU kernels change path (the parallel thresholds of
    /// elementwise ops, MatMul, Softmax and pooling at 2^14–2^15 elements or multiply-adds, reduction
    /// rows past 1024, transpose tiles of 32).
    pub big: bool,
    big_dims: usize,
}

/// The range of a big dim.
pub const BIG_DIM: (usize, usize) = (20, 64);

/// How many dims of one big case are big.
pub const BIG_DIMS: usize = 3;

impl<'a> Gen<'a> {
    pub fn new(choices: &'a [u32], seed: u64) -> Gen<'a> {
        Gen {
            choices,
            at: 0,
            rng: seed,
            seed,
            big: false,
            big_dims: 0,
        }
    }

    fn raw(&mut self) -> u32 {
        let c = self.choices.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        c
    }

    /// An integer in `lo..=hi` (shrinks towards `lo`).
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        assert!(lo <= hi, "int({lo}, {hi})");
        lo + (self.raw() as u64 % (hi - lo + 1) as u64) as i64
    }

    pub fn size(&mut self, lo: usize, hi: usize) -> usize {
        self.int(lo as i64, hi as i64) as usize
    }

    /// True with `percent`% probability (shrinks towards false).
    pub fn chance(&mut self, percent: u32) -> bool {
        self.raw() % 100 >= 100 - percent.min(100)
    }

    /// One of `xs` (shrinks towards the first).
    pub fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.size(0, xs.len() - 1)].clone()
    }

    /// A dim in 1..=6 (in a big case, some in [`BIG_DIM`]).
    pub fn dim(&mut self) -> usize {
        if self.big && self.big_dims < BIG_DIMS && self.chance(80) {
            self.big_dims += 1;
            return self.size(BIG_DIM.0, BIG_DIM.1);
        }
        self.size(1, 6)
    }

    /// A shape of rank `lo..=hi`, dims 1..=6; with `empty_ok`, sometimes one dim is 0.
    pub fn shape(&mut self, lo: usize, hi: usize, empty_ok: bool) -> Vec<usize> {
        let r = self.size(lo, hi);
        let mut s: Vec<usize> = (0..r).map(|_| self.dim()).collect();
        if empty_ok && r > 0 && self.chance(5) {
            let k = self.size(0, r - 1);
            s[k] = 0;
        }
        s
    }

    /// `n` shapes that broadcast together (numpy rules): an output shape, then each input drops some
    /// leading dims and sets some dims to 1.
    pub fn broadcast(&mut self, n: usize, lo: usize, hi: usize, empty_ok: bool) -> Vec<Vec<usize>> {
        let out = self.shape(lo, hi, empty_ok);
        (0..n)
            .map(|_| {
                let mut s = out.clone();
                if self.chance(40) {
                    let drop = self.size(0, s.len());
                    s.drain(..drop);
                }
                for d in s.iter_mut() {
                    if self.chance(25) {
                        *d = 1;
                    }
                }
                s
            })
            .collect()
    }

    /// `x` unidirectionally broadcast to `target`: a suffix of `target` with some dims set to 1.
    pub fn unidirectional(&mut self, target: &[usize]) -> Vec<usize> {
        let drop = if self.chance(40) {
            self.size(0, target.len())
        } else {
            0
        };
        target[drop..]
            .iter()
            .map(|&d| if self.chance(30) { 1 } else { d })
            .collect()
    }

    /// A permutation of `0..n`.
    pub fn perm(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in 0..n {
            let j = self.size(i, n - 1);
            p.swap(i, j);
        }
        p
    }

    /// A sorted subset of `0..n` (possibly empty when `allow_empty`).
    pub fn subset(&mut self, n: usize, allow_empty: bool) -> Vec<usize> {
        loop {
            let s: Vec<usize> = (0..n).filter(|_| self.chance(50)).collect();
            if !s.is_empty() || allow_empty || n == 0 {
                return s;
            }
            if let Some(k) = (n > 0).then(|| self.size(0, n - 1)) {
                return vec![k];
            }
        }
    }

    /// `axis` written either way: non-negative or negative (`rank` must be > 0 for the negative form).
    pub fn signed_axis(&mut self, axis: usize, rank: usize) -> i64 {
        if rank > 0 && self.chance(40) {
            axis as i64 - rank as i64
        } else {
            axis as i64
        }
    }

    // ---- values (from the seed, not the choices) ----

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An integer in lo..=hi drawn from the value seed.
    pub fn value_int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.uniform() * (hi - lo + 1) as f64).floor() as i64
    }

    /// f32 values of `shape`, never all zeros.
    pub fn floats(&mut self, shape: &[usize], dist: Dist) -> Value {
        let n: usize = shape.iter().product();
        let mut data: Vec<f64> = match dist {
            Dist::Signed(s) => (0..n).map(|_| (self.uniform() * 2.0 - 1.0) * s).collect(),
            Dist::Range(lo, hi) => (0..n).map(|_| lo + self.uniform() * (hi - lo)).collect(),
            Dist::Halves(s) => {
                let k = (s * 2.0) as i64;
                (0..n).map(|_| self.value_int(-k, k) as f64 * 0.5).collect()
            }
            Dist::Distinct => {
                let mut v: Vec<f64> = (0..n).map(|i| i as f64 * 0.25 - n as f64 / 8.0).collect();
                for i in (1..n).rev() {
                    let j = self.value_int(0, i as i64) as usize;
                    v.swap(i, j);
                }
                v
            }
        };
        for x in data.iter_mut() {
            *x = *x as f32 as f64;
        }
        if n > 0 && data.iter().all(|&x| x == 0.0) {
            data[0] = 1.0;
        }
        Value::new(DType::F32, shape.to_vec(), data).expect("shape matches")
    }

    /// Float values whose distribution the choices pick: mostly signed, sometimes ties.
    pub fn floats_any(&mut self, shape: &[usize]) -> Value {
        let d = match self.int(0, 9) {
            0..=5 => Dist::Signed(3.0),
            6 => Dist::Signed(1.0),
            7 => Dist::Signed(20.0),
            _ => Dist::Halves(3.0),
        };
        self.floats(shape, d)
    }

    /// Integers of `dtype` in lo..=hi, never all zeros (unless lo == hi == 0).
    pub fn ints(&mut self, dtype: DType, shape: &[usize], lo: i64, hi: i64) -> Value {
        let n: usize = shape.iter().product();
        let mut data: Vec<f64> = (0..n).map(|_| self.value_int(lo, hi) as f64).collect();
        if n > 0 && data.iter().all(|&x| x == 0.0) && (lo != 0 || hi != 0) {
            data[0] = if hi != 0 { hi as f64 } else { lo as f64 };
        }
        Value::new(dtype, shape.to_vec(), data).expect("shape matches")
    }

    /// With `percent`% probability (the choices decide, so shrinking drops it), replaces one or two
    /// elements of a float value with NaN (positions from the seed), to check that NaN flows through
    /// as the op's definition says: two, so that "first" and "last" NaN rules are told apart.
    pub fn maybe_nan(&mut self, v: &mut Value, percent: u32) {
        if !v.data.is_empty() && self.chance(percent) {
            for _ in 0..self.value_int(1, 2) {
                let k = self.value_int(0, v.data.len() as i64 - 1) as usize;
                v.data[k] = f64::NAN;
            }
        }
    }

    pub fn bools(&mut self, shape: &[usize]) -> Value {
        let mut v = self.ints(DType::Bool, shape, 0, 1);
        if !v.data.is_empty() && v.data.iter().all(|&x| x == 1.0) && v.data.len() > 2 {
            v.data[0] = 0.0;
        }
        v
    }
}

/// A constant int64 input (shapes, axes, pads, ...).
pub fn i64s(v: &[i64]) -> Value {
    Value::new(
        DType::I64,
        vec![v.len()],
        v.iter().map(|&x| x as f64).collect(),
    )
    .expect("1-D")
}

/// A scalar of `dtype`.
pub fn scalar(dtype: DType, v: f64) -> Value {
    Value::new(dtype, vec![], vec![v]).expect("scalar")
}

/// A 1-D f32 input.
pub fn f32s(v: &[f64]) -> Value {
    Value::new(
        DType::F32,
        vec![v.len()],
        v.iter().map(|&x| x as f32 as f64).collect(),
    )
    .expect("1-D")
}
