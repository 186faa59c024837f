//! CUDA kernel: LSTM (the op table's recurrent family, CUDA only). The layer's attributes are read
//! by `quorum_core::ops::rnn::Spec`, as the CPU's kernel reads them; only the device code lives
//! here.
//!
//! In f32 the input projection `X·Wᵀ` of every time step is one GEMM before the recurrence (the
//! tiled kernels', batched over the directions), as the CPU's kernel computes it; then one block
//! runs one batch row of one direction through every time step, the recurrence leaving nothing
//! else to run in parallel. A step is three phases between barriers:
//!
//! 1. (f16 and bf16 only, which keep the projection in the step) the step's input row `x_t` into
//!    shared memory;
//! 2. every gate's pre-activation, a thread per row of W and R (a loop where the rows outnumber
//!    the threads): `x_t·W_rᵀ + h·R_rᵀ + Wb_r + Rb_r`, summed in f32 front to back, the weights
//!    read transposed (copied so once a run), so that a warp's loads of one term are contiguous;
//! 3. a thread per unit of the hidden state: the peepholes, `clip`, the activations, the new cell
//!    and hidden states (in shared memory, for the next step) and the step's row of Y.
//!
//! Arithmetic is f32 for f32, f16 and bf16 layers (the CPU's working type), the activations as
//! the elementwise kernels compute them (in f64, rounded once). After the last step the final
//! states are Y_h and Y_c. `sequence_lens` (rows of different lengths) and f64 layers decline to
//! the CPU.
use super::elem::Elem;
use super::elementwise::unary_expr;
use super::matmul::float_dtype;
use super::reduce::rows::{load, store};
use super::require_u32_len;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty, module};
use crate::{CudaKernel, DevTensor, Inputs, KError, KResult, Run, dev_input};
use quorum_core::ir::Node;
use quorum_core::ops::OpCtx;
use quorum_core::ops::rnn::{Act, ActFn, Dims, Kind, Spec};
use quorum_core::ops::unary_op::UnaryOp;

/// The most threads a block has.
const MAX_THREADS: usize = 512;
/// Shared memory a block may take (the static limit).
const MAX_SHARED: usize = 48 * 1024;

/// The recurrent family's claim: LSTM runs here; GRU and RNN are the CPU's.
pub fn claim(node: &Node) -> Option<Result<CudaKernel, String>> {
    match node.op_type.as_str() {
        "LSTM" => Some(Ok(k_lstm as CudaKernel)),
        "GRU" | "RNN" => Some(Err(format!(
            "{} has no CUDA kernel yet (LSTM has)",
            node.op_type
        ))),
        _ => None,
    }
}

/// The shapes and options one kernel is generated for.
#[derive(Clone, Debug)]
pub struct Plan {
    pub e: Elem,
    pub seq: usize,
    pub batch: usize,
    pub isz: usize,
    pub hidden: usize,
    pub dirs: usize,
    pub reverse: bool,
    pub layout1: bool,
    pub clip: Option<f32>,
    pub input_forget: bool,
    /// f, g and h of the operator (the gates', the cell input's and the output's activations),
    /// the same for both directions.
    pub acts: [Act; 3],
    pub bias: bool,
    pub h0: bool,
    pub c0: bool,
    pub peepholes: bool,
    /// The input projection comes precomputed (f32 `[dirs, rows of X, 4·hidden]`): the kernel
    /// reads it instead of multiplying X by W in each step.
    pub projected: bool,
}

impl Plan {
    /// Threads a block has: one per gate row, up to [`MAX_THREADS`], a whole number of warps.
    pub fn threads(&self) -> usize {
        (4 * self.hidden).clamp(32, MAX_THREADS).div_ceil(32) * 32
    }

    /// Shared memory: the step's input row (unless projected), the hidden and cell states, the
    /// gates.
    pub fn shared_bytes(&self) -> usize {
        let x = if self.projected { 0 } else { self.isz };
        4 * (x + 2 * self.hidden + 4 * self.hidden)
    }
}

/// The activation `a` of `x` (f32).
fn activation(k: &mut Kernel, a: &Act, x: Reg) -> Reg {
    let (alpha, beta) = (a.alpha as f32, a.beta as f32);
    let u = match a.f {
        ActFn::Relu => UnaryOp::Relu,
        ActFn::Tanh => UnaryOp::Tanh,
        ActFn::Sigmoid => UnaryOp::Sigmoid,
        ActFn::LeakyRelu => UnaryOp::LeakyRelu { alpha },
        ActFn::ThresholdedRelu => UnaryOp::ThresholdedRelu { alpha },
        ActFn::HardSigmoid => UnaryOp::HardSigmoid { alpha, beta },
        ActFn::Elu => UnaryOp::Elu { alpha },
        ActFn::Softsign => UnaryOp::Softsign,
        ActFn::Softplus => UnaryOp::Softplus,
        ActFn::Affine => {
            // α·x + β, rounded twice as the CPU's kernel computes it.
            let m = k.mul(Ty::F32, x, alpha);
            return k.add(Ty::F32, m, beta);
        }
        ActFn::ScaledTanh => {
            let m = k.mul(Ty::F32, x, beta);
            let t = unary_expr(k, UnaryOp::Tanh, m);
            return k.mul(Ty::F32, t, alpha);
        }
    };
    unary_expr(k, u, x)
}

/// `x` clamped to `[-c, c]` where the layer has a clip.
fn clipped(k: &mut Kernel, clip: Option<f32>, x: Reg) -> Reg {
    match clip {
        Some(c) => {
            let lo = k.max(Ty::F32, x, -c);
            k.min(Ty::F32, lo, c)
        }
        None => x,
    }
}

/// Elements a dot product's loop takes per iteration: their loads go out together, then their
/// products are added in order.
const UNROLL: usize = 4;

/// `acc += Σ_i v[i]·m[m0 + i·stride]` for `i < n`, in order: `v` in shared memory (f32), `m` in
/// global memory (the model's type). The weights come transposed (`stride` = the gate rows), so
/// that at each `i` the threads of a warp, one gate row each, read one contiguous run.
fn dot(k: &mut Kernel, e: Elem, acc: Reg, (m, m0, stride): (Reg, Reg, usize), v: Reg, n: usize) {
    let main = n / UNROLL * UNROLL;
    let step = |k: &mut Kernel, i: Reg, u: usize| {
        let at = k.fma(Ty::U32, i, stride as u32, m0);
        let at = k.add(Ty::U32, at, (u * stride) as u32);
        let mv = load(k, e, m, at);
        let a = k.shl(Ty::U32, i, 2u32);
        let a = k.add(Ty::U32, v, a);
        let vv = k.ld(Space::Shared, Ty::F32, a, (4 * u) as i64);
        (vv, mv)
    };
    if main > 0 {
        k.for_range(Ty::U32, 0u32, main as u32, UNROLL as u32, |k, i| {
            let pairs: Vec<(Reg, Reg)> = (0..UNROLL).map(|u| step(k, i, u)).collect();
            for (vv, mv) in pairs {
                let n = k.fma(Ty::F32, vv, mv, acc);
                k.assign(acc, n);
            }
        });
    }
    if main < n {
        k.for_range(Ty::U32, main as u32, n as u32, 1u32, |k, i| {
            let (vv, mv) = step(k, i, 0);
            let n = k.fma(Ty::F32, vv, mv, acc);
            k.assign(acc, n);
        });
    }
}

/// The LSTM kernel for `p`: parameters x, Wᵀ (`[dirs, isz, 4·hidden]`; unread when projected),
/// Rᵀ (`[dirs, hidden, 4·hidden]`), b, h0, c0, p, xw (null when absent), y, yh, yc.
pub fn kernel(p: &Plan) -> Kernel {
    let (seq, batch, isz, hs, dirs) = (p.seq, p.batch, p.isz, p.hidden, p.dirs);
    let e = p.e;
    let nt = p.threads() as u32;
    let mut k = Kernel::new("lstm");
    let x = k.param_ptr("x");
    let w = k.param_ptr("w");
    let r = k.param_ptr("r");
    let bias = k.param_ptr("b");
    let h0 = k.param_ptr("h0");
    let c0 = k.param_ptr("c0");
    let peep = k.param_ptr("p");
    let xw = k.param_ptr("xw");
    let y = k.param_ptr("y");
    let yh = k.param_ptr("yh");
    let yc = k.param_ptr("yc");
    let smem = k.shared_array("lstm_state", p.shared_bytes());
    let xs = k.shared_addr(&smem);
    let x_bytes = if p.projected { 0 } else { 4 * isz };
    let hsm = k.add(Ty::U32, xs, x_bytes as u32);
    let csm = k.add(Ty::U32, hsm, (4 * hs) as u32);
    let gsm = k.add(Ty::U32, csm, (4 * hs) as u32);
    let tid = k.special("tid.x");
    let b = k.special("ctaid.x");
    let d = k.special("ctaid.y");
    let sh4 = |k: &mut Kernel, base: Reg, i: Reg| {
        let o = k.shl(Ty::U32, i, 2u32);
        k.add(Ty::U32, base, o)
    };
    // The states' index of unit j of this (direction, batch row): [dirs, batch, hidden], or
    // [batch, dirs, hidden] in layout 1.
    let state_row = if p.layout1 {
        k.fma(Ty::U32, b, dirs as u32, d)
    } else {
        k.fma(Ty::U32, d, batch as u32, b)
    };
    let state0 = k.mul(Ty::U32, state_row, hs as u32);
    // Initial states.
    k.for_range(Ty::U32, tid, hs as u32, nt, |k, j| {
        let at = k.add(Ty::U32, state0, j);
        for (given, src, dst) in [(p.h0, h0, hsm), (p.c0, c0, csm)] {
            let v = if given {
                load(k, e, src, at)
            } else {
                k.mov(Ty::F32, 0.0f32)
            };
            let a = sh4(k, dst, j);
            k.st(Space::Shared, a, 0, v);
        }
    });
    let gh = 4 * hs;
    let bias0 = k.mul(Ty::U32, d, (2 * gh) as u32);
    let peep0 = k.mul(Ty::U32, d, (3 * hs) as u32);
    // This block walks the sequence backwards: a reverse layer's one direction (d = 0), a
    // bidirectional layer's second (d = 1).
    let is_back = k.setp(Cmp::Eq, Ty::U32, d, if p.reverse { 0u32 } else { 1u32 });
    k.for_range(Ty::U32, 0u32, seq as u32, 1u32, |k, s| {
        let rs = k.sub(Ty::U32, (seq - 1) as u32, s);
        let t = k.selp(Ty::U32, rs, s, is_back);
        let xrow = if p.layout1 {
            k.fma(Ty::U32, b, seq as u32, t)
        } else {
            k.fma(Ty::U32, t, batch as u32, b)
        };
        k.bar_sync();
        if !p.projected {
            let x0 = k.mul(Ty::U32, xrow, isz as u32);
            k.for_range(Ty::U32, tid, isz as u32, nt, |k, i| {
                let at = k.add(Ty::U32, x0, i);
                let v = load(k, e, x, at);
                let a = sh4(k, xs, i);
                k.st(Space::Shared, a, 0, v);
            });
        }
        k.bar_sync();
        // This step's row of the projection: [dirs, seq·batch, 4·hidden].
        let proj0 = k.fma(Ty::U32, d, (seq * batch) as u32, xrow);
        let proj0 = k.mul(Ty::U32, proj0, gh as u32);
        // Every gate row's pre-activation.
        k.for_range(Ty::U32, tid, gh as u32, nt, |k, row| {
            let acc = k.mov(Ty::F32, 0.0f32);
            if p.projected {
                let at = k.add(Ty::U32, proj0, row);
                let v = load(k, Elem::F32, xw, at);
                k.assign(acc, v);
            } else {
                // Wᵀ: [dirs, isz, 4·hidden].
                let w0 = k.fma(Ty::U32, d, (isz * gh) as u32, row);
                dot(k, e, acc, (w, w0, gh), xs, isz);
            }
            // Rᵀ: [dirs, hidden, 4·hidden].
            let r0 = k.fma(Ty::U32, d, (hs * gh) as u32, row);
            dot(k, e, acc, (r, r0, gh), hsm, hs);
            if p.bias {
                let at = k.add(Ty::U32, bias0, row);
                let wb = load(k, e, bias, at);
                let at = k.add(Ty::U32, at, gh as u32);
                let rb = load(k, e, bias, at);
                let both = k.add(Ty::F32, wb, rb);
                let n = k.add(Ty::F32, acc, both);
                k.assign(acc, n);
            }
            let a = sh4(k, gsm, row);
            k.st(Space::Shared, a, 0, acc);
        });
        k.bar_sync();
        // Each unit's gates (ONNX's order i, o, f, c), its new states and its row of Y.
        k.for_range(Ty::U32, tid, hs as u32, nt, |k, j| {
            let gate = |k: &mut Kernel, n: usize| {
                let at = k.add(Ty::U32, j, (n * hs) as u32);
                let a = sh4(k, gsm, at);
                k.ld(Space::Shared, Ty::F32, a, 0)
            };
            let (zi, zo, zf, zc) = (gate(k, 0), gate(k, 1), gate(k, 2), gate(k, 3));
            let ca = sh4(k, csm, j);
            let c_prev = k.ld(Space::Shared, Ty::F32, ca, 0);
            let peephole = |k: &mut Kernel, n: usize, z: Reg, c: Reg| {
                if !p.peepholes {
                    return z;
                }
                let at = k.add(Ty::U32, peep0, j);
                let at = k.add(Ty::U32, at, (n * hs) as u32);
                let pv = load(k, e, peep, at);
                k.fma(Ty::F32, pv, c, z)
            };
            let zi = peephole(k, 0, zi, c_prev);
            let zi = clipped(k, p.clip, zi);
            let gi = activation(k, &p.acts[0], zi);
            let gf = if p.input_forget {
                k.sub(Ty::F32, 1.0f32, gi)
            } else {
                let zf = peephole(k, 2, zf, c_prev);
                let zf = clipped(k, p.clip, zf);
                activation(k, &p.acts[0], zf)
            };
            let zc = clipped(k, p.clip, zc);
            let gc = activation(k, &p.acts[1], zc);
            let fc = k.mul(Ty::F32, gf, c_prev);
            let ig = k.mul(Ty::F32, gi, gc);
            let cn = k.add(Ty::F32, fc, ig);
            let zo = peephole(k, 1, zo, cn);
            let zo = clipped(k, p.clip, zo);
            let go = activation(k, &p.acts[0], zo);
            let hc = activation(k, &p.acts[2], cn);
            let hn = k.mul(Ty::F32, go, hc);
            k.st(Space::Shared, ca, 0, cn);
            let ha = sh4(k, hsm, j);
            k.st(Space::Shared, ha, 0, hn);
            // Y: [seq, dirs, batch, hidden], or [batch, seq, dirs, hidden] in layout 1.
            let yrow = if p.layout1 {
                let bt = k.fma(Ty::U32, b, seq as u32, t);
                k.fma(Ty::U32, bt, dirs as u32, d)
            } else {
                let td = k.fma(Ty::U32, t, dirs as u32, d);
                k.fma(Ty::U32, td, batch as u32, b)
            };
            let at = k.fma(Ty::U32, yrow, hs as u32, j);
            store(k, e, y, at, hn);
        });
    });
    k.bar_sync();
    k.for_range(Ty::U32, tid, hs as u32, nt, |k, j| {
        let at = k.add(Ty::U32, state0, j);
        for (src, dst) in [(hsm, yh), (csm, yc)] {
            let a = sh4(k, src, j);
            let v = k.ld(Space::Shared, Ty::F32, a, 0);
            store(k, e, dst, at, v);
        }
    });
    k
}

/// Whether f32 layers take their input projection from one GEMM before the recurrence (on unless
/// `QUORUM_CUDA_LSTM_PROJECTION=off`, read once: the kernel then multiplies X by W in each step,
/// kept to measure the two against each other).
fn project() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("QUORUM_CUDA_LSTM_PROJECTION").as_deref() != Ok("off"))
}

/// The plan for a node of `spec` with sizes `d` (`Spec::dims`, shapes checked), or why CUDA
/// declines it. `present`: B, sequence_lens, initial_h, initial_c, P.
pub fn plan(spec: &Spec, e: Elem, d: Dims, present: [bool; 5]) -> KResult<Plan> {
    let [bias, lens, h0, c0, peepholes] = present;
    if lens {
        crate::decline!("LSTM with sequence_lens (rows of different lengths)");
    }
    if spec.dirs == 2
        && spec.acts[0]
            .iter()
            .zip(&spec.acts[1])
            .any(|(a, b)| a.f != b.f || a.alpha != b.alpha || a.beta != b.beta)
    {
        crate::decline!("LSTM whose directions have different activations");
    }
    let p = Plan {
        e,
        seq: d.seq,
        batch: d.batch,
        isz: d.isz,
        hidden: d.hidden,
        dirs: spec.dirs,
        reverse: spec.reverse,
        layout1: spec.layout1,
        clip: spec.clip.map(|c| c as f32),
        input_forget: spec.input_forget,
        acts: [spec.acts[0][0], spec.acts[0][1], spec.acts[0][2]],
        bias,
        h0,
        c0,
        peepholes,
        projected: e == Elem::F32 && project(),
    };
    if p.shared_bytes() > MAX_SHARED {
        crate::decline!(
            "LSTM with input size {} and hidden size {}: its state needs {} bytes of shared memory",
            p.isz,
            p.hidden,
            p.shared_bytes()
        );
    }
    Ok(p)
}

fn k_lstm(ctx: &OpCtx, run: &Run, inputs: &dyn Inputs) -> KResult<Vec<DevTensor>> {
    let spec = Spec::of(ctx, Kind::Lstm).map_err(KError::Op)?;
    let (x, w, r) = (
        dev_input(inputs, 0)?,
        dev_input(inputs, 1)?,
        dev_input(inputs, 2)?,
    );
    let opt = |i: usize| -> KResult<Option<DevTensor>> {
        if inputs.present(i) {
            dev_input(inputs, i).map(Some)
        } else {
            Ok(None)
        }
    };
    let (b, h0, c0, pp) = (opt(3)?, opt(5)?, opt(6)?, opt(7)?);
    let mut all = vec![&x, &w, &r];
    all.extend([&b, &h0, &c0, &pp].into_iter().flatten());
    let dtype = float_dtype("LSTM", &all)?;
    let e = Elem::operand("X", Some(dtype))?;
    let present = [
        b.is_some(),
        inputs.present(4),
        h0.is_some(),
        c0.is_some(),
        pp.is_some(),
    ];
    fn shape(t: &Option<DevTensor>) -> Option<&[usize]> {
        t.as_ref().map(|t| t.shape.as_slice())
    }
    let dims = spec
        .dims(
            &x.shape,
            &w.shape,
            &r.shape,
            [shape(&b), shape(&h0), shape(&c0), shape(&pp)],
        )
        .map_err(KError::Op)?;
    let p = plan(&spec, e, dims, present)?;
    let (dirs, gh) = (p.dirs, 4 * p.hidden);
    let state = spec.state_shape(&dims);
    let y_shape = if p.layout1 {
        vec![p.batch, p.seq, dirs, p.hidden]
    } else {
        vec![p.seq, dirs, p.batch, p.hidden]
    };
    for s in [&x.shape, &w.shape, &y_shape] {
        require_u32_len(s)?;
    }
    if p.batch == 0 || p.hidden == 0 || p.seq == 0 {
        crate::decline!("LSTM over an empty batch, hidden state or sequence");
    }
    let y = run.alloc(dtype, &y_shape)?;
    let yh = run.alloc(dtype, &state)?;
    let yc = run.alloc(dtype, &state)?;
    let rows = p.seq * p.batch;
    let xw = if p.projected {
        let xm = x.view(vec![rows, p.isz]);
        let xw = super::matmul::sgemm(
            run, &xm, &w, None, rows, gh, p.isz, false, true, 1.0, 0.0, dirs,
        )?;
        Some(xw)
    } else {
        None
    };
    // W and R transposed on the device (each step's threads then read them coalesced: a thread
    // per gate row reading its own row was 32 cache lines a load instruction, about 15 µs a step
    // on an H100 in call 25).
    let transposed = |t: &DevTensor, cols: usize| -> KResult<DevTensor> {
        use quorum_core::device::layout::Strided;
        let from = Strided {
            base: 0,
            strides: vec![(gh * cols) as i64, 1, cols as i64],
        };
        quorum_core::device::movement::gather_view(run, t, &from, &[dirs, cols, gh])
    };
    let rt = transposed(&r, p.hidden)?;
    let wt = if p.projected {
        None
    } else {
        Some(transposed(&w, p.isz)?)
    };
    let ptx = module(run.cc(), &[kernel(&p)]);
    run.launch(
        &ptx,
        "lstm",
        (p.batch as u32, dirs as u32, 1),
        (p.threads() as u32, 1, 1),
        0,
        &[
            x.arg_in(),
            DevTensor::arg_in_opt(wt.as_ref()),
            rt.arg_in(),
            DevTensor::arg_in_opt(b.as_ref()),
            DevTensor::arg_in_opt(h0.as_ref()),
            DevTensor::arg_in_opt(c0.as_ref()),
            DevTensor::arg_in_opt(pp.as_ref()),
            DevTensor::arg_in_opt(xw.as_ref()),
            y.arg_out(),
            yh.arg_out(),
            yc.arg_out(),
        ],
    )?;
    // As many outputs as the node names (Y, Y_h, Y_c: a node may stop after any of them).
    let mut outs = vec![y, yh, yc];
    outs.truncate(ctx.node.outputs.len());
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_core::ops::rnn::Act;

    fn spec(dirs: usize, layout1: bool) -> Spec {
        let sig = Act {
            f: ActFn::Sigmoid,
            alpha: 0.0,
            beta: 0.0,
        };
        let tanh = Act {
            f: ActFn::Tanh,
            alpha: 0.0,
            beta: 0.0,
        };
        Spec {
            kind: Kind::Lstm,
            dirs,
            reverse: false,
            layout1,
            hidden_size: None,
            clip: Some(2.5),
            acts: vec![vec![sig, tanh, tanh]; dirs],
            input_forget: false,
            linear_before_reset: false,
        }
    }

    /// The plan for X and R of these shapes (W's read from them), through `Spec::dims`.
    fn plan_for(s: &Spec, e: Elem, x: &[usize], r: &[usize], present: [bool; 5]) -> KResult<Plan> {
        let w = [r[0], r[1], x[2]];
        plan(s, e, s.dims(x, &w, r, [None; 4]).unwrap(), present)
    }

    #[test]
    fn plans_read_both_layouts_and_decline_what_the_kernel_lacks() {
        let p = plan_for(
            &spec(2, false),
            Elem::F32,
            &[7, 3, 10],
            &[2, 32, 8],
            [true; 5],
        );
        assert!(matches!(p, Err(KError::Decline(ref m)) if m.contains("sequence_lens")));
        let mut present = [true, false, true, true, true];
        let p = plan_for(
            &spec(2, false),
            Elem::F32,
            &[7, 3, 10],
            &[2, 32, 8],
            present,
        )
        .unwrap();
        assert_eq!((p.seq, p.batch, p.isz, p.hidden, p.dirs), (7, 3, 10, 8, 2));
        // 32 gate rows: one warp.
        assert_eq!(p.threads(), 32);
        // f32 takes its projection from a GEMM: no input row in shared memory.
        assert!(p.projected);
        assert_eq!(p.shared_bytes(), 4 * (6 * 8));
        let p1 = plan_for(
            &spec(1, true),
            Elem::F16,
            &[3, 7, 10],
            &[1, 400, 100],
            present,
        )
        .unwrap();
        assert_eq!((p1.seq, p1.batch, p1.hidden), (7, 3, 100));
        assert_eq!(p1.threads(), 416);
        let p1 = plan_for(
            &spec(1, true),
            Elem::F16,
            &[3, 7, 10],
            &[1, 800, 200],
            present,
        )
        .unwrap();
        assert_eq!(p1.threads(), MAX_THREADS);
        let mut odd = spec(2, false);
        odd.acts[1][0].f = ActFn::Relu;
        let p = plan_for(&odd, Elem::F32, &[7, 3, 10], &[2, 32, 8], present);
        assert!(matches!(p, Err(KError::Decline(ref m)) if m.contains("activations")));
        present[0] = false;
        // Halves keep the input row in shared memory: a wide one does not fit.
        let big = plan_for(
            &spec(1, false),
            Elem::F16,
            &[2, 1, 20000],
            &[1, 4, 1],
            present,
        );
        assert!(matches!(big, Err(KError::Decline(ref m)) if m.contains("shared memory")));
    }

    #[test]
    fn the_kernel_is_well_formed_in_each_form() {
        let present = [true, false, true, true, true];
        for (dirs, layout1, e) in [
            (1, false, Elem::F32),
            (2, false, Elem::F16),
            (2, true, Elem::Bf16),
        ] {
            let mut s = spec(dirs, layout1);
            s.input_forget = dirs == 1;
            let p = plan_for(&s, e, &[5, 4, 12], &[dirs, 24, 6], present).unwrap();
            let text = module((8, 0), &[kernel(&p)]);
            assert!(text.contains(".entry lstm"), "{text}");
            // f32 reads the projection (one load a gate row a step); halves multiply X by W
            // in the step, their input row staged in shared memory.
            assert_eq!(p.projected, e == Elem::F32);
            assert_eq!(text.matches("bar.sync").count(), 4, "{text}");
            // The clip: both bounds, on i, f (unless coupled to i), c and o.
            let clips = if s.input_forget { 3 } else { 4 };
            assert_eq!(text.matches("min.f32").count(), clips, "{text}");
        }
    }
}
