//! Recurrent layers: RNN, LSTM and GRU.
//!
//! The input projection X·Wᵀ is computed for every time step at once; the recurrence H·Rᵀ runs per
//! step and batch row with R laid out once as transposed panels, so that the vector lanes run over
//! the gates' outputs and each step reads R front to back (`quorum_kernels::recurrent`), and the gate
//! activations run over whole slices. Directions of a
//! bidirectional layer run in parallel.
//! Work is in f64 for double inputs and f32 for the other float types.
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use num_traits::Float;
use rayon::prelude::*;
use std::sync::Arc;

use quorum_kernels::recurrent::{PANEL, panels};

use super::{OpCtx, Registry, input, opt_input};
use crate::error::OpResult;
use crate::tensor::{Tensor, Value};
use crate::{bail, unsupported};

pub fn register(r: &mut Registry) {
    r.add("", "RNN", |c, i| recurrent(c, i, Kind::Rnn));
    r.add("", "LSTM", |c, i| recurrent(c, i, Kind::Lstm));
    r.add("", "GRU", |c, i| recurrent(c, i, Kind::Gru));
}

/// The recurrent layer.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Kind {
    Rnn,
    Lstm,
    Gru,
}

impl Kind {
    /// Gates per unit (rows of W and R per unit of the hidden state).
    pub fn gates(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Lstm => 4,
            Kind::Gru => 3,
        }
    }
    fn default_acts(self) -> &'static [&'static str] {
        match self {
            Kind::Rnn => &["Tanh"],
            Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
            Kind::Gru => &["Sigmoid", "Tanh"],
        }
    }
}

/// An activation function a recurrent layer names.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum ActFn {
    Relu,
    Tanh,
    Sigmoid,
    Affine,
    LeakyRelu,
    ThresholdedRelu,
    ScaledTanh,
    HardSigmoid,
    Elu,
    Softsign,
    Softplus,
}

/// An activation with its alpha and beta (the defaults of the ONNX operator of the same name).
#[derive(Clone, Copy, Debug)]
pub struct Act {
    pub f: ActFn,
    pub alpha: f64,
    pub beta: f64,
}

impl Act {
    /// Parses `name`, consuming alpha/beta values from the iterators when the function takes them.
    fn parse(
        name: &str,
        alphas: &mut impl Iterator<Item = f64>,
        betas: &mut impl Iterator<Item = f64>,
    ) -> OpResult<Act> {
        use ActFn::*;
        // The defaults are those operators' float attributes, so f32 values (0.2f32, not 0.2): it
        // matters to f64 models.
        let (f, a, b) = match name.to_ascii_lowercase().as_str() {
            "relu" => (Relu, None, None),
            "tanh" => (Tanh, None, None),
            "sigmoid" => (Sigmoid, None, None),
            "affine" => (Affine, Some(1.0), Some(0.0)),
            "leakyrelu" => (LeakyRelu, Some(0.01f32 as f64), None),
            "thresholdedrelu" => (ThresholdedRelu, Some(1.0), None),
            "scaledtanh" => (ScaledTanh, Some(1.0), Some(1.0)),
            "hardsigmoid" => (HardSigmoid, Some(0.2f32 as f64), Some(0.5)),
            "elu" => (Elu, Some(1.0), None),
            "softsign" => (Softsign, None, None),
            "softplus" => (Softplus, None, None),
            _ => unsupported!("activation function '{name}'"),
        };
        let alpha = a.map(|d| alphas.next().unwrap_or(d)).unwrap_or(0.0);
        let beta = b.map(|d| betas.next().unwrap_or(d)).unwrap_or(0.0);
        Ok(Act { f, alpha, beta })
    }

    fn apply<T: Float>(&self, x: T) -> T {
        let c = |v: f64| T::from(v).unwrap_or_else(T::nan);
        let (one, zero) = (T::one(), T::zero());
        match self.f {
            ActFn::Relu => x.max(zero),
            ActFn::Tanh => x.tanh(),
            // e^-|x| never overflows; below 0, e^x/(1+e^x) keeps the subnormal tail.
            ActFn::Sigmoid => {
                let e = (-x.abs()).exp();
                let r = one / (one + e);
                if x < zero { e * r } else { r }
            }
            ActFn::Affine => c(self.alpha) * x + c(self.beta),
            ActFn::LeakyRelu => {
                if x >= zero {
                    x
                } else {
                    c(self.alpha) * x
                }
            }
            ActFn::ThresholdedRelu => {
                if x > c(self.alpha) {
                    x
                } else {
                    zero
                }
            }
            ActFn::ScaledTanh => c(self.alpha) * (c(self.beta) * x).tanh(),
            ActFn::HardSigmoid => (c(self.alpha) * x + c(self.beta)).max(zero).min(one),
            ActFn::Elu => {
                if x >= zero {
                    x
                } else {
                    c(self.alpha) * (x.exp() - one)
                }
            }
            ActFn::Softsign => x / (one + x.abs()),
            ActFn::Softplus => {
                if x > c(30.0) {
                    x
                } else {
                    x.exp().ln_1p()
                }
            }
        }
    }
}

/// A recurrent node's attributes, read once for every engine: the CPU's kernel and the devices'.
#[derive(Clone, Debug)]
pub struct Spec {
    pub kind: Kind,
    /// 1, or 2 for a bidirectional layer.
    pub dirs: usize,
    /// `direction` is `reverse`: the one direction walks the sequence backwards.
    pub reverse: bool,
    /// `layout` 1 (opset 14 on): batch-major X, Y and states.
    pub layout1: bool,
    /// `hidden_size`, where given (R's shape must agree).
    pub hidden_size: Option<i64>,
    pub clip: Option<f64>,
    /// The activations of each direction (1, 3 or 2 per direction; a single set given for a
    /// bidirectional layer is shared).
    pub acts: Vec<Vec<Act>>,
    pub input_forget: bool,
    pub linear_before_reset: bool,
}

impl Spec {
    /// The attributes of `ctx`'s node, read as the operator defines them.
    pub fn of(ctx: &OpCtx, kind: Kind) -> OpResult<Spec> {
        let layout1 = ctx.opset() >= 14 && ctx.attr_i("layout", 0)? != 0;
        let direction = ctx.attr_s("direction", "forward")?;
        let dirs = match direction.as_str() {
            "forward" | "reverse" => 1,
            "bidirectional" => 2,
            d => bail!("unknown direction '{d}'"),
        };
        // Activations: one set per direction; a single set is shared by both directions.
        let names: Vec<String> = match ctx.attr_opt_strings("activations")? {
            Some(v) => v,
            None => kind.default_acts().iter().map(|s| s.to_string()).collect(),
        };
        let per = kind.default_acts().len();
        let names: Vec<String> = match names.len() {
            n if n == per * dirs => names,
            n if n == per && dirs == 2 => names.iter().chain(names.iter()).cloned().collect(),
            n => bail!("{n} activations given, expected {}", per * dirs),
        };
        let alphas = ctx.attr_opt_floats("activation_alpha")?.unwrap_or_default();
        let betas = ctx.attr_opt_floats("activation_beta")?.unwrap_or_default();
        let (mut ai, mut bi) = (
            alphas.iter().map(|&v| v as f64),
            betas.iter().map(|&v| v as f64),
        );
        let all: Vec<Act> = names
            .iter()
            .map(|n| Act::parse(n, &mut ai, &mut bi))
            .collect::<OpResult<_>>()?;
        Ok(Spec {
            kind,
            dirs,
            reverse: direction == "reverse",
            layout1,
            hidden_size: ctx.attr_opt_i("hidden_size")?,
            clip: ctx.attr_opt_f("clip")?.map(|v| v as f64),
            acts: all.chunks(per).map(|c| c.to_vec()).collect(),
            input_forget: ctx.attr_i("input_forget", 0)? != 0,
            linear_before_reset: ctx.attr_i("linear_before_reset", 0)? != 0,
        })
    }
}

/// A recurrent layer's sizes, read from its inputs' shapes by [`Spec::dims`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub seq: usize,
    pub batch: usize,
    /// The input width (X's last axis).
    pub isz: usize,
    pub hidden: usize,
}

impl Spec {
    /// The layer's sizes from the shapes of X, W and R, and of B, initial_h, initial_c and P
    /// where given (`opt`, in that order), each checked against the operator's rules; the errors
    /// name the input and both shapes.
    pub fn dims(
        &self,
        x: &[usize],
        w: &[usize],
        r: &[usize],
        opt: [Option<&[usize]>; 4],
    ) -> OpResult<Dims> {
        if x.len() != 3 || w.len() != 3 || r.len() != 3 {
            bail!("X, W and R must be 3-D, got {x:?}, {w:?}, {r:?}");
        }
        let (seq, batch) = if self.layout1 {
            (x[1], x[0])
        } else {
            (x[0], x[1])
        };
        let hidden = match self.hidden_size {
            Some(v) if v >= 0 && v as usize == r[2] => v as usize,
            Some(v) => bail!("hidden_size {v} disagrees with R of shape {r:?}"),
            None => r[2],
        };
        let d = Dims {
            seq,
            batch,
            isz: x[2],
            hidden,
        };
        let gh = self.kind.gates() * hidden;
        let expect = |what: &str, got: &[usize], want: &[usize]| -> OpResult<()> {
            if got != want {
                bail!("{what} has shape {got:?}, expected {want:?}");
            }
            Ok(())
        };
        expect("W", w, &[self.dirs, gh, d.isz])?;
        expect("R", r, &[self.dirs, gh, hidden])?;
        let [b, h0, c0, p] = opt;
        let state = self.state_shape(&d);
        let wants = [
            ("B", b, vec![self.dirs, 2 * gh]),
            ("initial_h", h0, state.to_vec()),
            ("initial_c", c0, state.to_vec()),
            ("P", p, vec![self.dirs, 3 * hidden]),
        ];
        for (what, got, want) in wants {
            if let Some(got) = got {
                expect(what, got, &want)?;
            }
        }
        Ok(d)
    }

    /// The shape of the initial and final states: `[dirs, batch, hidden]`, or
    /// `[batch, dirs, hidden]` in layout 1.
    pub fn state_shape(&self, d: &Dims) -> [usize; 3] {
        if self.layout1 {
            [d.batch, self.dirs, d.hidden]
        } else {
            [self.dirs, d.batch, d.hidden]
        }
    }
}

/// The layer's configuration, shared by its directions.
struct Cfg {
    kind: Kind,
    hidden: usize,
    batch: usize,
    seq: usize,
    isz: usize,
    layout1: bool,
    clip: Option<f64>,
    /// Activations of each direction (1, 3 or 2 per direction).
    acts: Vec<Vec<Act>>,
    input_forget: bool,
    linear_before_reset: bool,
}

/// One direction's weights and initial state, converted to the working type.
struct DirIn<T: Elem> {
    w: Arc<Prepared<T>>,
    /// R as transposed panels (`recurrent::panels`; a GRU's in two parts, its first 2·hidden
    /// outputs and the rest, each laid out alone): each step's product runs its lanes over `j`.
    rt: Arc<Prepared<T>>,
    b: Option<Vec<T>>,
    p: Option<Vec<T>>,
    h0: Vec<T>,
    c0: Vec<T>,
    reverse: bool,
}

/// A weight of every direction, prepared for the run: W as it is (f32: also packed for the GEMM of the
/// input projection), or R as transposed panels. Made once per constant of the session and cached with the
/// packed convolution weights (`conv::weights::packed_constant`), otherwise per run.
struct Prepared<T: Elem> {
    dirs: Vec<Vec<T>>,
    packed: Vec<Option<T::Packed>>,
    /// Why the weight could not be read (`vals`' error, cached like a result: the same constant
    /// fails the same way).
    error: Option<crate::error::OpError>,
}

/// How [`prepared`] lays a weight out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// W: as it is, and packed for the input projection.
    Packed,
    /// R: as transposed panels, outputs `0..cut` and `cut..` laid out apart where `cut` is given
    /// (a GRU's third gate is a product of its own).
    Panels { cut: Option<usize> },
}

/// The prepared form of input `input` (W or R, `[dirs, rows, cols]`), each direction laid out by
/// `layout`. An input of a dtype the layer cannot read is the error `vals` gives.
fn prepared<T: Elem>(
    ctx: &OpCtx,
    input: usize,
    t: &Tensor,
    layout: Layout,
) -> OpResult<Arc<Prepared<T>>> {
    let (dirs, rows, cols) = (t.shape()[0], t.shape()[1], t.shape()[2]);
    let make = || {
        let mut out = Prepared {
            dirs: Vec::with_capacity(dirs),
            packed: Vec::with_capacity(dirs),
            error: None,
        };
        let v: Vec<T> = match vals(t) {
            Ok(v) => v,
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        };
        for d in (0..dirs).map(|d| &v[d * rows * cols..(d + 1) * rows * cols]) {
            match layout {
                Layout::Panels { cut } => {
                    let cut = cut.unwrap_or(rows).min(rows);
                    let (head, tail) = d.split_at(cut * cols);
                    let mut p = panels(head, cut, cols);
                    p.extend(panels(tail, rows - cut, cols));
                    out.dirs.push(p);
                    out.packed.push(None);
                }
                Layout::Packed => {
                    out.packed.push(T::pack_nt(d, rows, cols));
                    out.dirs.push(d.to_vec());
                }
            }
        }
        out
    };
    let kind = match layout {
        Layout::Packed => "rnn-w",
        Layout::Panels { cut: None } => "rnn-r",
        Layout::Panels { cut: Some(_) } => "gru-r",
    };
    let isa = quorum_kernels::Isa::detected();
    let size = std::mem::size_of::<T>();
    let p =
        crate::ops::conv::weights::packed_constant(ctx, input, kind, isa, size, t.shape(), make);
    if let Some(e) = &p.error {
        return Err(e.clone());
    }
    Ok(p)
}

/// A dot product with eight independent accumulators, written on the concrete type.
macro_rules! dot8 {
    ($t:ty, $a:expr, $b:expr) => {{
        let n = $a.len().min($b.len());
        let (a, b) = (&$a[..n], &$b[..n]);
        let mut acc = [0 as $t; 8];
        let mut i = 0;
        while i + 8 <= n {
            let (x, y) = (&a[i..i + 8], &b[i..i + 8]);
            for l in 0..8 {
                acc[l] += x[l] * y[l];
            }
            i += 8;
        }
        let mut s =
            ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        while i < n {
            s += a[i] * b[i];
            i += 1;
        }
        s
    }};
}

/// The working float types, with a dot product written on the concrete type (eight independent
/// accumulators: it vectorises without reassociation, and stays fast in unoptimised builds).
trait Elem: Float + Send + Sync + 'static {
    fn dot(a: &[Self], b: &[Self]) -> Self;

    /// `b` (n×k, row-major) packed as the transposed right operand of the GEMM, where the type has
    /// one and the shape suits it.
    type Packed: Send + Sync + 'static;
    fn pack_nt(b: &[Self], n: usize, k: usize) -> Option<Self::Packed>;

    /// `out[i, j] = a[i, :] · b[j, :]` for row-major `a` (m×k) and `b` (n×k), through `packed` (b's
    /// packed form) where given: the input projection of every time step at once.
    fn matmul_nt(
        a: &[Self],
        b: &[Self],
        packed: Option<&Self::Packed>,
        m: usize,
        n: usize,
        k: usize,
    ) -> Vec<Self>;

    /// `y[j] = Σ_k R[j, k] · x[k]` for `j < y.len()`, each sum in `k` order, with `R` laid out by
    /// `recurrent::panels`: the recurrence's product.
    fn matvec(rp: &[Self], x: &[Self], y: &mut [Self]);

    /// `v[i] = act(v[i])`.
    fn act_slice(act: &Act, v: &mut [Self]) {
        v.iter_mut().for_each(|x| *x = act.apply(*x));
    }
}

impl Elem for f32 {
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        dot8!(f32, a, b)
    }
    type Packed = quorum_kernels::PackedB;
    fn pack_nt(b: &[f32], n: usize, k: usize) -> Option<quorum_kernels::PackedB> {
        let isa = quorum_kernels::Isa::detected();
        (n >= isa.nr() && k > 0).then(|| quorum_kernels::PackedB::new(isa, k, n, b, 1, k))
    }
    fn matmul_nt(
        a: &[f32],
        b: &[f32],
        packed: Option<&Self::Packed>,
        m: usize,
        n: usize,
        k: usize,
    ) -> Vec<f32> {
        matmul_nt_f32(a, b, packed, m, n, k)
    }
    fn matvec(rp: &[f32], x: &[f32], y: &mut [f32]) {
        quorum_kernels::recurrent::matvec_panels(quorum_kernels::Isa::detected(), rp, x, y)
    }
    /// Sigmoid and Tanh, the default gates, over the widest vectors (`recurrent::Gate`).
    fn act_slice(act: &Act, v: &mut [f32]) {
        use quorum_kernels::recurrent::Gate;
        match act.f {
            ActFn::Sigmoid => Gate::Sigmoid.apply(v),
            ActFn::Tanh => Gate::Tanh.apply(v),
            _ => v.iter_mut().for_each(|x| *x = act.apply(*x)),
        }
    }
}

impl Elem for f64 {
    fn dot(a: &[f64], b: &[f64]) -> f64 {
        dot8!(f64, a, b)
    }
    type Packed = ();
    fn pack_nt(_: &[f64], _: usize, _: usize) -> Option<()> {
        None
    }
    fn matmul_nt(a: &[f64], b: &[f64], _: Option<&()>, m: usize, n: usize, k: usize) -> Vec<f64> {
        matmul_nt(a, b, m, n, k)
    }
    fn matvec(rp: &[f64], x: &[f64], y: &mut [f64]) {
        let k = x.len();
        for (j0, yp) in (0..y.len()).step_by(PANEL).zip(y.chunks_mut(PANEL)) {
            let w = yp.len();
            yp.fill(0.0);
            for (kk, &xk) in x.iter().enumerate() {
                let row = &rp[j0 * k + kk * w..][..w];
                yp.iter_mut().zip(row).for_each(|(v, r)| *v += r * xk);
            }
        }
    }
}

/// f32 through the packed GEMM of `quorum-kernels` (`b` read as the transposed right operand),
/// where there are rows enough for its register tile; f64 and thin shapes by dot products.
fn matmul_nt_f32(
    a: &[f32],
    b: &[f32],
    packed: Option<&quorum_kernels::PackedB>,
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f32> {
    use quorum_kernels::{BSource, Isa, PackedA, PackedB};
    let isa = Isa::detected();
    if m < isa.mr() || n < isa.nr() || k == 0 {
        return matmul_nt(a, b, m, n, k);
    }
    let pa = PackedA::new(isa, m, k, a, k);
    let none = quorum_kernels::Epilogue::NONE;
    match packed {
        Some(pb) => super::matmul::gemm_to_vec(&pa, &BSource::Packed(pb), m, n, &none),
        None => super::matmul::gemm_to_vec(
            &pa,
            &BSource::Packed(&PackedB::new(isa, k, n, b, 1, k)),
            m,
            n,
            &none,
        ),
    }
}

/// `out[i, j] = a[i, :] · b[j, :]` for row-major `a` (m×k) and `b` (n×k).
fn matmul_nt<T: Elem>(a: &[T], b: &[T], m: usize, n: usize, k: usize) -> Vec<T> {
    let mut out = vec![T::zero(); m * n];
    if n == 0 {
        return out;
    }
    let row = |(i, o): (usize, &mut [T])| {
        let ar = &a[i * k..(i + 1) * k];
        for (j, v) in o.iter_mut().enumerate() {
            *v = T::dot(ar, &b[j * k..(j + 1) * k]);
        }
    };
    if m * n * k >= 1 << 16 {
        out.par_chunks_mut(n).enumerate().for_each(row);
    } else {
        out.chunks_mut(n).enumerate().for_each(row);
    }
    out
}

/// Runs one direction; returns Y for this direction ([seq, batch, hidden], zero past each row's
/// length), the final hidden state and the final cell state ([batch, hidden] each).
fn run_direction<T: Elem>(
    cfg: &Cfg,
    acts: &[Act],
    x: &[T],
    lens: &[usize],
    dir: usize,
    d: &DirIn<T>,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let (h, g, batch, seq) = (cfg.hidden, cfg.kind.gates(), cfg.batch, cfg.seq);
    let gh = g * h;
    let c = |v: f64| T::from(v).unwrap_or_else(T::nan);
    // Input projection for every (time, batch) row, with the biases that sit outside the recurrence.
    let mut xw = T::matmul_nt(
        x,
        &d.w.dirs[dir],
        d.w.packed[dir].as_ref(),
        seq * batch,
        gh,
        cfg.isz,
    );
    if let Some(b) = d.b.as_ref().filter(|_| gh > 0) {
        let mut bias: Vec<T> = (0..gh).map(|j| b[j] + b[gh + j]).collect();
        if cfg.kind == Kind::Gru && cfg.linear_before_reset {
            bias[2 * h..].copy_from_slice(&b[2 * h..3 * h]);
        }
        for row in xw.chunks_mut(gh) {
            row.iter_mut().zip(&bias).for_each(|(v, b)| *v = *v + *b);
        }
    }
    let rbh: Option<&[T]> = match (&d.b, cfg.kind == Kind::Gru && cfg.linear_before_reset) {
        (Some(b), true) => Some(&b[gh + 2 * h..2 * gh]),
        _ => None,
    };
    let clip = |v: T| match cfg.clip {
        Some(cl) => v.max(c(-cl)).min(c(cl)),
        None => v,
    };
    let xrow = |t: usize, b: usize| {
        if cfg.layout1 {
            b * seq + t
        } else {
            t * batch + b
        }
    };
    let (mut hs, mut cs) = (d.h0.clone(), d.c0.clone());
    let mut y = vec![T::zero(); seq * batch * h];
    if h == 0 {
        return (y, hs, cs);
    }
    let (one, f) = (T::one(), acts[0]);
    let rt = &d.rt.dirs[dir];
    let clip_all = |v: &mut [T]| {
        if cfg.clip.is_some() {
            v.iter_mut().for_each(|x| *x = clip(*x));
        }
    };
    // One cell update of batch row `b` at time `t`: `hp`/`cp` hold its state, `gates`/`tmp` scratch.
    let cell = |t: usize, b: usize, hp: &mut [T], cp: &mut [T], gates: &mut [T], tmp: &mut [T]| {
        let xg = &xw[xrow(t, b) * gh..(xrow(t, b) + 1) * gh];
        match cfg.kind {
            Kind::Rnn => {
                T::matvec(rt, hp, tmp);
                tmp.iter_mut().zip(xg).for_each(|(v, x)| *v = *x + *v);
                clip_all(tmp);
                T::act_slice(&f, tmp);
            }
            Kind::Lstm => {
                let (gact, hact) = (acts[1], acts[2]);
                T::matvec(rt, hp, gates);
                gates.iter_mut().zip(xg).for_each(|(v, x)| *v = *x + *v);
                // Gates in ONNX's order i, o, f, c; the peepholes of i and f read the previous state.
                if let Some(p) = d.p.as_ref() {
                    for j in 0..h {
                        gates[j] = gates[j] + p[j] * cp[j];
                        gates[2 * h + j] = gates[2 * h + j] + p[2 * h + j] * cp[j];
                    }
                }
                let (gi, rest) = gates.split_at_mut(h);
                let (go, rest) = rest.split_at_mut(h);
                let (gf, gc) = rest.split_at_mut(h);
                for v in [&mut *gi, &mut *gf, &mut *gc] {
                    clip_all(v);
                }
                T::act_slice(&f, gi);
                if !cfg.input_forget {
                    T::act_slice(&f, gf);
                }
                T::act_slice(&gact, gc);
                for j in 0..h {
                    let fg = if cfg.input_forget { one - gi[j] } else { gf[j] };
                    let cn = fg * cp[j] + gi[j] * gc[j];
                    cp[j] = cn;
                    tmp[j] = cn;
                    if let Some(p) = d.p.as_ref() {
                        go[j] = go[j] + p[h + j] * cn;
                    }
                }
                clip_all(go);
                T::act_slice(&f, go);
                T::act_slice(&hact, tmp);
                tmp.iter_mut()
                    .zip(go.iter())
                    .for_each(|(v, o)| *v = *o * *v);
            }
            Kind::Gru => {
                let gact = acts[1];
                // z and r, and with linear_before_reset the third gate's R·H (R's two parts,
                // laid out apart, each a product of its own).
                let lbr = cfg.linear_before_reset;
                let (rzr, rh) = rt.split_at(2 * h * h);
                T::matvec(rzr, hp, &mut gates[..2 * h]);
                if lbr {
                    T::matvec(rh, hp, &mut gates[2 * h..gh]);
                }
                let (zr, gh3) = gates.split_at_mut(2 * h);
                zr.iter_mut().zip(xg).for_each(|(v, x)| *v = *x + *v);
                clip_all(zr);
                T::act_slice(&f, zr);
                let (z, r) = zr.split_at(h);
                if lbr {
                    for j in 0..h {
                        let lin = gh3[j] + rbh.map_or(T::zero(), |v| v[j]);
                        tmp[j] = xg[2 * h + j] + r[j] * lin;
                    }
                } else {
                    // r ⊙ H, then the third gate's product with it.
                    tmp.iter_mut()
                        .zip(r.iter().zip(hp.iter()))
                        .for_each(|(v, (r, hv))| *v = *r * *hv);
                    T::matvec(rh, tmp, gh3);
                    tmp.iter_mut()
                        .zip(gh3.iter().zip(&xg[2 * h..]))
                        .for_each(|(v, (rh, x))| *v = *x + *rh);
                }
                clip_all(tmp);
                T::act_slice(&gact, tmp);
                for j in 0..h {
                    tmp[j] = (one - z[j]) * tmp[j] + z[j] * hp[j];
                }
            }
        }
        hp.copy_from_slice(tmp);
    };
    let time = |s: usize, b: usize| if d.reverse { lens[b] - 1 - s } else { s };
    let scratch = || (vec![T::zero(); gh], vec![T::zero(); h]);
    let parallel = batch > 1 && batch * gh * h >= 1 << 15;
    let mut buf = scratch();
    for s in 0..seq {
        let row = |(g, tm): &mut (Vec<T>, Vec<T>), (b, (hp, cp)): (usize, (&mut [T], &mut [T]))| {
            if s < lens[b] {
                cell(time(s, b), b, hp, cp, g, tm);
            }
        };
        if parallel {
            hs.par_chunks_mut(h)
                .zip(cs.par_chunks_mut(h))
                .enumerate()
                .for_each_init(scratch, row);
        } else {
            hs.chunks_mut(h)
                .zip(cs.chunks_mut(h))
                .enumerate()
                .for_each(|r| row(&mut buf, r));
        }
        for b in (0..batch).filter(|&b| s < lens[b]) {
            let t = time(s, b);
            y[(t * batch + b) * h..(t * batch + b + 1) * h]
                .copy_from_slice(&hs[b * h..(b + 1) * h]);
        }
    }
    (y, hs, cs)
}

/// A float tensor's values in the working type.
fn vals<T: Float>(t: &Tensor) -> OpResult<Vec<T>> {
    if !t.dtype().is_float() || t.dtype().is_narrow_float() {
        unsupported!("recurrent layer input of dtype {}", t.dtype());
    }
    // f32 and f64 straight from their (standard-layout) slices: weights are read every run, and
    // ndarray's n-dimensional iterator and an f64 copy cost more than the recurrence itself.
    fn conv<S: Copy + num_traits::ToPrimitive, T: Float>(a: &ArrayD<S>) -> Vec<T> {
        let a = a.as_standard_layout();
        let each = |v: &S| T::from(*v).unwrap_or_else(T::nan);
        match a.as_slice() {
            Some(sl) => sl.iter().map(each).collect(),
            None => a.iter().map(each).collect(),
        }
    }
    Ok(match t {
        Tensor::F32(a) => conv(a),
        Tensor::F64(a) => conv(a),
        _ => t
            .to_f64_vec()?
            .into_iter()
            .map(|v| T::from(v).unwrap_or_else(T::nan))
            .collect(),
    })
}

/// Builds a tensor of `like`'s float dtype from working values.
fn build<T: Float>(like: &Tensor, shape: &[usize], v: Vec<T>) -> OpResult<Tensor> {
    let s = IxDyn(shape);
    let f = |x: &T| x.to_f64().unwrap_or(f64::NAN);
    Ok(match like {
        Tensor::F32(_) => Tensor::F32(ArrayD::from_shape_vec(
            s,
            v.iter().map(|x| f(x) as f32).collect(),
        )?),
        Tensor::F64(_) => Tensor::F64(ArrayD::from_shape_vec(s, v.iter().map(f).collect())?),
        Tensor::F16(_) => Tensor::F16(ArrayD::from_shape_vec(
            s,
            v.iter().map(|x| f16::from_f64(f(x))).collect(),
        )?),
        Tensor::BF16(_) => Tensor::BF16(ArrayD::from_shape_vec(
            s,
            v.iter().map(|x| bf16::from_f64(f(x))).collect(),
        )?),
        t => unsupported!("recurrent layer output of dtype {}", t.dtype()),
    })
}

fn recurrent(ctx: &OpCtx, inputs: &[Option<&Value>], kind: Kind) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    match x {
        Tensor::F64(_) => run::<f64>(ctx, inputs, kind),
        _ => run::<f32>(ctx, inputs, kind),
    }
}

fn run<T: Elem>(ctx: &OpCtx, inputs: &[Option<&Value>], kind: Kind) -> OpResult<Vec<Value>> {
    let x = input(inputs, 0)?;
    let (w, r) = (input(inputs, 1)?, input(inputs, 2)?);
    let spec = Spec::of(ctx, kind)?;
    let (layout1, dirs) = (spec.layout1, spec.dirs);
    let opt = |i: usize| opt_input(inputs, i);
    let b = opt(3)?;
    let h0 = opt(5)?;
    let (c0, p) = if kind == Kind::Lstm {
        (opt(6)?, opt(7)?)
    } else {
        (None, None)
    };
    fn shape(t: Option<&Tensor>) -> Option<&[usize]> {
        t.map(Tensor::shape)
    }
    let dims = spec.dims(
        x.shape(),
        w.shape(),
        r.shape(),
        [shape(b), shape(h0), shape(c0), shape(p)],
    )?;
    let Dims {
        seq,
        batch,
        isz,
        hidden,
    } = dims;
    let gh = kind.gates() * hidden;
    let state_shape = spec.state_shape(&dims);
    ctx.check_alloc(&[seq, dirs, batch, hidden], 8)?;
    let lens: Vec<usize> = match opt(4)? {
        Some(l) => {
            let v = l.to_i64_vec()?;
            if v.len() != batch || v.iter().any(|&n| n < 0 || n as usize > seq) {
                bail!("sequence_lens {v:?} must have {batch} values in [0, {seq}]");
            }
            v.into_iter().map(|n| n as usize).collect()
        }
        None => vec![seq; batch],
    };
    let cfg = Cfg {
        kind,
        hidden,
        batch,
        seq,
        isz,
        layout1,
        clip: spec.clip,
        acts: spec.acts,
        input_forget: spec.input_forget,
        linear_before_reset: spec.linear_before_reset,
    };

    let xv: Vec<T> = vals(x)?;
    let (wp, rtp) = (
        prepared::<T>(ctx, 1, w, Layout::Packed)?,
        prepared::<T>(
            ctx,
            2,
            r,
            Layout::Panels {
                cut: (kind == Kind::Gru).then_some(2 * hidden),
            },
        )?,
    );
    let bv: Option<Vec<T>> = b.map(vals).transpose()?;
    let pv: Option<Vec<T>> = p.map(vals).transpose()?;
    // Initial states as [dirs, batch, hidden].
    let state = |t: Option<&Tensor>| -> OpResult<Vec<T>> {
        let Some(t) = t else {
            return Ok(vec![T::zero(); dirs * batch * hidden]);
        };
        let v: Vec<T> = vals(t)?;
        if !layout1 {
            return Ok(v);
        }
        let mut o = vec![T::zero(); v.len()];
        for bb in 0..batch {
            for d in 0..dirs {
                let src = (bb * dirs + d) * hidden;
                let dst = (d * batch + bb) * hidden;
                o[dst..dst + hidden].copy_from_slice(&v[src..src + hidden]);
            }
        }
        Ok(o)
    };
    let (h0v, c0v) = (state(h0)?, state(c0)?);
    let per_dir = |v: &[T], d: usize, n: usize| v[d * n..(d + 1) * n].to_vec();
    let dins: Vec<DirIn<T>> = (0..dirs)
        .map(|d| DirIn {
            w: wp.clone(),
            rt: rtp.clone(),
            b: bv.as_ref().map(|v| per_dir(v, d, 2 * gh)),
            p: pv.as_ref().map(|v| per_dir(v, d, 3 * hidden)),
            h0: per_dir(&h0v, d, batch * hidden),
            c0: per_dir(&c0v, d, batch * hidden),
            reverse: spec.reverse || d == 1,
        })
        .collect();
    let results: Vec<(Vec<T>, Vec<T>, Vec<T>)> = dins
        .par_iter()
        .enumerate()
        .map(|(d, din)| run_direction(&cfg, &cfg.acts[d], &xv, &lens, d, din))
        .collect();

    // Assemble Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]) and the states.
    let mut y = vec![T::zero(); seq * dirs * batch * hidden];
    let mut yh = vec![T::zero(); dirs * batch * hidden];
    let mut yc = vec![T::zero(); dirs * batch * hidden];
    for (d, (yd, hd, cd)) in results.iter().enumerate() {
        for bb in 0..batch {
            for t in 0..seq {
                let src = (t * batch + bb) * hidden;
                let dst = if layout1 {
                    ((bb * seq + t) * dirs + d) * hidden
                } else {
                    ((t * dirs + d) * batch + bb) * hidden
                };
                y[dst..dst + hidden].copy_from_slice(&yd[src..src + hidden]);
            }
            let src = bb * hidden;
            let dst = if layout1 {
                (bb * dirs + d) * hidden
            } else {
                (d * batch + bb) * hidden
            };
            yh[dst..dst + hidden].copy_from_slice(&hd[src..src + hidden]);
            yc[dst..dst + hidden].copy_from_slice(&cd[src..src + hidden]);
        }
    }
    let yshape = if layout1 {
        vec![batch, seq, dirs, hidden]
    } else {
        vec![seq, dirs, batch, hidden]
    };
    let mut outs = vec![
        Value::Tensor(build(x, &yshape, y)?),
        Value::Tensor(build(x, &state_shape, yh)?),
    ];
    if kind == Kind::Lstm {
        outs.push(Value::Tensor(build(x, &state_shape, yc)?));
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::ir::Attr;
    use crate::ops::testing::run_kernel;

    fn call(kind: Kind, attrs: Vec<(&str, Attr)>, ins: Vec<Option<Tensor>>) -> Vec<Tensor> {
        run_kernel(
            |ctx, refs| recurrent(ctx, refs, kind),
            "X",
            22,
            attrs,
            ins,
            0,
        )
        .unwrap()
    }

    /// Seeded values in [-1, -0.05] U [0.05, 1].
    fn rand(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = 0.05 + 0.95 * ((s >> 40) as f32 / (1u64 << 24) as f32);
                if s & 1 == 0 { v } else { -v }
            })
            .collect()
    }

    fn t(shape: &[usize], seed: u64) -> Tensor {
        Tensor::from_f32(shape, rand(seed, shape.iter().product())).unwrap()
    }

    fn f(t: &Tensor) -> Vec<f32> {
        t.to_f64_vec()
            .unwrap()
            .into_iter()
            .map(|v| v as f32)
            .collect()
    }

    /// The f32 input projection through the packed GEMM against f64 sums (k·ε bound), on shapes
    /// above and below its register tile; a product one term short must fall outside the bound.
    #[test]
    fn packed_input_projection_matches_f64_sums() {
        for (m, n, k) in [(37usize, 96usize, 80usize), (5, 40, 16), (200, 64, 3)] {
            let (a, b) = (rand(3, m * k), rand(4, n * k));
            let packed = <f32 as Elem>::pack_nt(&b, n, k);
            for got in [
                <f32 as Elem>::matmul_nt(&a, &b, None, m, n, k),
                <f32 as Elem>::matmul_nt(&a, &b, packed.as_ref(), m, n, k),
            ] {
                let bound = |i: usize, j: usize, drop: usize| {
                    let terms = (0..k - drop).map(|p| a[i * k + p] as f64 * b[j * k + p] as f64);
                    let mag: f64 = terms.clone().map(f64::abs).sum();
                    (
                        terms.sum::<f64>(),
                        (k as f64 + 2.0) * f32::EPSILON as f64 * mag,
                    )
                };
                for i in 0..m {
                    for j in 0..n {
                        let (want, tol) = bound(i, j, 0);
                        assert!(
                            (got[i * n + j] as f64 - want).abs() <= tol,
                            "{m}x{n}x{k} ({i},{j})"
                        );
                    }
                }
                let (short, _) = bound(0, 0, 1);
                let (want, tol) = bound(0, 0, 0);
                assert!((short - want).abs() > tol, "the bound misses a lost term");
            }
        }
    }

    #[test]
    fn rnn_step_matches_formula_with_affine_activation() {
        let (i, h) = (3, 4);
        let (x, w, r, b, h0) = (
            t(&[1, 1, i], 1),
            t(&[1, h, i], 2),
            t(&[1, h, h], 3),
            t(&[1, 2 * h], 4),
            t(&[1, 1, h], 5),
        );
        let attrs = vec![
            ("hidden_size", Attr::Int(h as i64)),
            ("activations", Attr::Strings(vec![b"Affine".to_vec()])),
            ("activation_alpha", Attr::Floats(vec![0.5])),
            ("activation_beta", Attr::Floats(vec![0.25])),
        ];
        let out = call(
            Kind::Rnn,
            attrs,
            vec![
                Some(x.clone()),
                Some(w.clone()),
                Some(r.clone()),
                Some(b.clone()),
                None,
                Some(h0.clone()),
            ],
        );
        let (xv, wv, rv, bv, hv) = (f(&x), f(&w), f(&r), f(&b), f(&h0));
        let y = f(&out[1]);
        for j in 0..h {
            let mut a = bv[j] + bv[h + j];
            a += (0..i).map(|k| wv[j * i + k] * xv[k]).sum::<f32>();
            a += (0..h).map(|k| rv[j * h + k] * hv[k]).sum::<f32>();
            assert!((y[j] - (0.5 * a + 0.25)).abs() < 1e-5);
        }
    }

    #[test]
    fn gru_sequence_lens_match_truncated_runs() {
        let (seq, batch, i, h) = (3, 2, 2, 3);
        let (x, w, r, b) = (
            t(&[seq, batch, i], 6),
            t(&[2, 3 * h, i], 7),
            t(&[2, 3 * h, h], 8),
            t(&[2, 6 * h], 9),
        );
        let attrs = || {
            vec![
                ("hidden_size", Attr::Int(h as i64)),
                ("direction", Attr::String(b"bidirectional".to_vec())),
                ("linear_before_reset", Attr::Int(1)),
            ]
        };
        let lens = Tensor::I32(ArrayD::from_shape_vec(IxDyn(&[2]), vec![2, 3]).unwrap());
        let full = call(
            Kind::Gru,
            attrs(),
            vec![
                Some(x.clone()),
                Some(w.clone()),
                Some(r.clone()),
                Some(b.clone()),
                Some(lens),
            ],
        );
        let (y, yh) = (f(&full[0]), f(&full[1]));
        // Batch row 0 alone, truncated to its length 2.
        let xv = f(&x);
        let x0: Vec<f32> = (0..2)
            .flat_map(|s| xv[(s * batch) * i..(s * batch + 1) * i].to_vec())
            .collect();
        let x0 = Tensor::from_f32(&[2, 1, i], x0).unwrap();
        let part = call(
            Kind::Gru,
            attrs(),
            vec![Some(x0), Some(w), Some(r), Some(b)],
        );
        let (py, pyh) = (f(&part[0]), f(&part[1]));
        for s in 0..seq {
            for d in 0..2 {
                for j in 0..h {
                    let got = y[((s * 2 + d) * batch) * h + j];
                    let want = if s < 2 { py[(s * 2 + d) * h + j] } else { 0.0 };
                    assert!((got - want).abs() < 1e-6, "s{s} d{d} j{j}: {got} vs {want}");
                }
            }
        }
        for d in 0..2 {
            for j in 0..h {
                assert!((yh[(d * batch) * h + j] - pyh[d * h + j]).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn lstm_layout1_is_layout0_transposed() {
        let (seq, batch, i, h) = (4, 3, 2, 3);
        let xv = rand(10, seq * batch * i);
        let (w, r, b, p) = (
            t(&[1, 4 * h, i], 11),
            t(&[1, 4 * h, h], 12),
            t(&[1, 8 * h], 13),
            t(&[1, 3 * h], 14),
        );
        let x0 = Tensor::from_f32(&[seq, batch, i], xv.clone()).unwrap();
        let xt: Vec<f32> = (0..batch)
            .flat_map(|bb| (0..seq).flat_map(move |s| (0..i).map(move |k| (s, bb, k))))
            .map(|(s, bb, k)| xv[(s * batch + bb) * i + k])
            .collect();
        let x1 = Tensor::from_f32(&[batch, seq, i], xt).unwrap();
        let attrs = |l: i64| {
            vec![
                ("hidden_size", Attr::Int(h as i64)),
                ("layout", Attr::Int(l)),
                ("clip", Attr::Float(0.7)),
            ]
        };
        let ins = |x: Tensor| {
            vec![
                Some(x),
                Some(w.clone()),
                Some(r.clone()),
                Some(b.clone()),
                None,
                None,
                None,
                Some(p.clone()),
            ]
        };
        let a = call(Kind::Lstm, attrs(0), ins(x0));
        let c = call(Kind::Lstm, attrs(1), ins(x1));
        let (ya, yc) = (f(&a[0]), f(&c[0]));
        assert_eq!(c[0].shape(), &[batch, seq, 1, h]);
        for s in 0..seq {
            for bb in 0..batch {
                for j in 0..h {
                    assert_eq!(ya[(s * batch + bb) * h + j], yc[(bb * seq + s) * h + j]);
                }
            }
        }
        assert_eq!(f(&a[2]), f(&c[2]));
    }

    /// The f32 path (transposed product and gate slices of `quorum-kernels`) against the f64 path
    /// (plain loops) on the same values, for every kind and the forms that change the step: hidden
    /// sizes around the kernels' blocks, peepholes, clip, input_forget, both GRU resets, two
    /// directions, batch rows. A peephole dropped from the f64 run must fall outside the bound.
    #[test]
    fn f32_recurrences_follow_f64() {
        use crate::tensor::DType;
        let to64 =
            |t: &Tensor| Tensor::from_f64s(DType::F64, t.shape(), t.to_f64_vec().unwrap()).unwrap();
        let (seq, batch, i) = (6, 2, 5);
        type Attrs = Vec<(&'static str, Attr)>;
        let cases: Vec<(Kind, usize, Attrs)> = vec![
            (Kind::Lstm, 37, vec![("clip", Attr::Float(1.5))]),
            (Kind::Lstm, 130, vec![("input_forget", Attr::Int(1))]),
            (Kind::Gru, 37, vec![("linear_before_reset", Attr::Int(1))]),
            (Kind::Gru, 70, vec![]),
            (Kind::Rnn, 129, vec![("clip", Attr::Float(0.9))]),
        ];
        for (kind, h, extra) in cases {
            let g = kind.gates();
            let mut attrs = vec![
                ("hidden_size", Attr::Int(h as i64)),
                ("direction", Attr::String(b"bidirectional".to_vec())),
            ];
            attrs.extend(extra);
            // Weights scaled so the gates neither saturate nor vanish over the steps.
            let scaled = |shape: &[usize], seed: u64, by: f32| {
                let v = rand(seed, shape.iter().product())
                    .into_iter()
                    .map(|x| x * by)
                    .collect();
                Tensor::from_f32(shape, v).unwrap()
            };
            let mut ins = vec![
                Some(t(&[seq, batch, i], 20)),
                Some(scaled(&[2, g * h, i], 21, 0.5)),
                Some(scaled(&[2, g * h, h], 22, 2.0 / (h as f32).sqrt())),
                Some(t(&[2, 2 * g * h], 23)),
                None,
                Some(t(&[2, batch, h], 24)),
            ];
            if kind == Kind::Lstm {
                ins.push(Some(t(&[2, batch, h], 25)));
                ins.push(Some(t(&[2, 3 * h], 26)));
            }
            let ins64: Vec<Option<Tensor>> = ins.iter().map(|o| o.as_ref().map(to64)).collect();
            let got = call(kind, attrs.clone(), ins);
            let want = call(kind, attrs.clone(), ins64.clone());
            for (o, (a, b)) in got.iter().zip(&want).enumerate() {
                let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
                for (e, (x, y)) in a.iter().zip(&b).enumerate() {
                    // f32 sums of at most 130 terms of magnitude ~1 per step, over six steps: about
                    // 1e-6 apart from f64 in practice; 1e-5 is ten times that and below any real slip.
                    assert!(
                        (x - y).abs() <= 1e-5,
                        "{kind:?} h {h} output {o} element {e}: {x} against {y}"
                    );
                }
            }
            if kind == Kind::Lstm {
                let mut broken = ins64.clone();
                broken[7] = None;
                let off = call(kind, attrs, broken);
                let (a, b) = (got[0].to_f64_vec().unwrap(), off[0].to_f64_vec().unwrap());
                assert!(
                    a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-5),
                    "the bound misses a dropped peephole"
                );
            }
        }
    }

    /// W and R given as constants of the session are prepared once (W packed, R as panels) and
    /// reused: the first and second runs equal the run with the same weights fed per run, bit for
    /// bit, and a new R (a new `Arc`) is prepared anew, not read from the first one's entry.
    #[test]
    fn constant_weights_are_prepared_once_per_arc() {
        use crate::ops::conv::weights::is_cached_as;
        use crate::ops::testing::Constants;
        use crate::ops::{NoSubgraphs, OpCtx};
        let (seq, batch, i, h) = (5, 1, 24, 40);
        let (x, w, b) = (
            t(&[seq, batch, i], 40),
            t(&[2, 4 * h, i], 41),
            t(&[2, 8 * h], 42),
        );
        let attrs: std::collections::HashMap<String, Attr> = [
            ("hidden_size".to_string(), Attr::Int(h as i64)),
            (
                "direction".to_string(),
                Attr::String(b"bidirectional".to_vec()),
            ),
        ]
        .into();
        let node = crate::ir::Node {
            name: "l".into(),
            op_type: "LSTM".into(),
            domain: String::new(),
            opset: 22,
            inputs: vec!["x".into(), "w".into(), "r".into(), "b".into()],
            outputs: vec!["y".into(), "yh".into(), "yc".into()],
            attrs,
        };
        let run = |runner: &dyn crate::ops::SubgraphRunner, w: &Arc<Value>, r: &Arc<Value>| {
            let ctx = OpCtx {
                node: &node,
                runner,
                max_tensor_bytes: 1 << 30,
            };
            let (xv, bv) = (Value::Tensor(x.clone()), Value::Tensor(b.clone()));
            let out =
                recurrent(&ctx, &[Some(&xv), Some(w), Some(r), Some(&bv)], Kind::Lstm).unwrap();
            out.into_iter()
                .map(|v| v.into_tensor().unwrap().to_f64_vec().unwrap())
                .collect::<Vec<_>>()
        };
        let isa = quorum_kernels::Isa::detected();
        let wa = Arc::new(Value::Tensor(w.clone()));
        let mut firsts = Vec::new();
        for seed in [43u64, 44] {
            let ra = Arc::new(Value::Tensor(t(&[2, 4 * h, h], seed)));
            let fed = run(&NoSubgraphs, &wa, &ra);
            let consts = Constants(vec![("w".into(), wa.clone()), ("r".into(), ra.clone())]);
            assert!(!is_cached_as("rnn-r", &ra, isa, 4, &[2, 4 * h, h]));
            let first = run(&consts, &wa, &ra);
            assert!(is_cached_as("rnn-r", &ra, isa, 4, &[2, 4 * h, h]));
            assert!(is_cached_as("rnn-w", &wa, isa, 4, &[2, 4 * h, i]));
            let second = run(&consts, &wa, &ra);
            for (a, c) in [(&fed, &first), (&first, &second)] {
                for (u, v) in a.iter().flatten().zip(c.iter().flatten()) {
                    assert_eq!(u.to_bits(), v.to_bits());
                }
            }
            firsts.push(first);
        }
        assert_ne!(
            firsts[0], firsts[1],
            "a second R gave the first one's outputs"
        );
    }

    /// A weight of a dtype the layer cannot read is `vals`' typed error, whether it is fed or a
    /// constant, and again from the cache on a second run of the constant.
    #[test]
    fn an_integer_weight_is_unsupported_fed_or_constant() {
        use crate::error::OpError;
        use crate::ops::testing::Constants;
        use crate::ops::{NoSubgraphs, OpCtx};
        let (seq, i, h) = (3, 4, 5);
        let x = Value::Tensor(t(&[seq, 1, i], 50));
        let w = Arc::new(Value::Tensor(
            Tensor::from_f64s(
                crate::tensor::DType::I32,
                &[1, 4 * h, i],
                vec![1.0; 4 * h * i],
            )
            .unwrap(),
        ));
        let r = Arc::new(Value::Tensor(t(&[1, 4 * h, h], 51)));
        let node = crate::ir::Node {
            name: "l".into(),
            op_type: "LSTM".into(),
            domain: String::new(),
            opset: 22,
            inputs: vec!["x".into(), "w".into(), "r".into()],
            outputs: vec!["y".into()],
            attrs: [("hidden_size".to_string(), Attr::Int(h as i64))].into(),
        };
        let consts = Constants(vec![("w".into(), w.clone()), ("r".into(), r.clone())]);
        for runner in [
            &NoSubgraphs as &dyn crate::ops::SubgraphRunner,
            &consts,
            &consts,
        ] {
            let ctx = OpCtx {
                node: &node,
                runner,
                max_tensor_bytes: 1 << 30,
            };
            let got = recurrent(&ctx, &[Some(&x), Some(&w), Some(&r)], Kind::Lstm);
            assert!(matches!(got, Err(OpError::Unsupported(_))), "{got:?}");
        }
    }
}
