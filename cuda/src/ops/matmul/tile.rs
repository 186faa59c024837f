//! The GEMM kernels shared by MatMul, Gemm and Conv: a register-tiled kernel (two tile shapes), a
//! naive one-thread-per-output twin with the same parameters (for bisecting, `QUORUM_CUDA_GEMM=naive`),
//! and the split-K reduction.
//!
//! `Y[z](m, n) = alpha · Σ_k A[z](m, k) · B[z](k, n) + beta · C[z](m, n)`, where `z` is the batch index
//! (`ctaid.z`, split into three dims whose element strides are parameters, 0 for a broadcast operand),
//! A is read at `a[m·lda + k]` (or `a[k·lda + m]` transposed), B at `b[k·ldb + n]` (or `b[n·ldb + k]`,
//! or gathered from a convolution input: implicit im2col), C at `c[m·c_rs + n·c_cs]` (0 strides
//! broadcast), Y at `y[m·ldy + n]`.
//!
//! Tiled kernel: 256 threads, block tile BM×BN×BK = 128×128×8 (8×8 outputs per thread) or 64×64×16
//! (4×4 per thread). Each thread loads 4 consecutive elements of each operand per k-tile (one 16-byte
//! load where allowed), stages them in double-buffered shared memory (A stored k-major, i.e.
//! transposed, so the inner loop reads both operands with 16-byte shared loads), and accumulates its
//! micro-tile with `fma.rn.f32`. Every global load is predicated on its (m|n, k) being in range and
//! loads 0 otherwise, so partial tiles need no other care; every store is predicated likewise.
use crate::driver::Arg;
use crate::ops::elem::Elem;
use crate::ptx::{Cmp, Kernel, Reg, Space, Ty};

/// How the B operand is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BSrc {
    /// `B(k, n)` at `b[k·ldb + n]`, or at `b[n·ldb + k]` when `trans`; `vec`: 16-byte loads allowed.
    Strided { trans: bool, vec: bool },
    /// `B(k, n)` gathered from a convolution input: k = (channel, kernel tap), n = output position.
    Im2col,
}

/// Most rows the skinny kernel handles.
pub const SKINNY_ROWS: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// 128×128×8 block tile, 8×8 per thread.
    Big,
    /// 64×64×16 block tile, 4×4 per thread.
    Small,
    /// One thread per output (16×16 threads per block), no shared memory.
    Naive,
    /// `Big`'s tiles on the tensor cores: operands rounded to TF32 (`cvt.rna`) as they enter
    /// shared memory, `mma.sync.m16n8k8` with f32 accumulators (`tc.rs`).
    Tf32Big,
    /// `Small`'s tiles on the tensor cores, likewise.
    Tf32Small,
    /// 128×128 tiles on the tensor cores, the operands copied by `cp.async` through four stages
    /// (`tc_async.rs`; operands with 16-byte aligned rows): f32 operands as TF32 in k-tiles of 16
    /// (`m16n8k8`), f16 and bf16 operands as they are in k-tiles of 32 (`m16n8k16`, f32 accumulators).
    TcAsync,
    /// Hopper's warpgroup MMA (`wgmma`, sm_90a): 128×128 tiles of f16 or bf16, operands copied by
    /// `cp.async` into the 128-byte swizzle in three stages of k 64 (`wgmma.rs`); taken instead
    /// of `TcAsync` on sm_90 where it fits and the grid is large, or when a plan names it
    /// (`QUORUM_CUDA_WGMMA=off`: never).
    Wgmma,
    /// At most this many rows (1, 2 or 4; GEMV-like): B streamed once with 16-byte loads, the
    /// rows kept in registers; a warp per column when B is contiguous along k, else a block per 128
    /// columns.
    Skinny(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileCfg {
    pub variant: Variant,
    pub trans_a: bool,
    /// 16-byte loads of A allowed (f32, lda % 4 == 0, aligned base and batch strides).
    pub vec_a: bool,
    pub b: BSrc,
    /// C is read (present and beta != 0).
    pub has_c: bool,
    /// How A, B, C and Y are stored (computed in f32).
    pub elem: Elem,
    /// Split-K partial: raw f32 sums into a workspace (no alpha, no C); `reduce_kernel` finishes.
    pub split: bool,
}

impl TileCfg {
    /// (BM, BN, BK, outputs per thread along m and n).
    pub fn dims(&self) -> (usize, usize, usize, usize) {
        match self.variant {
            Variant::Big => (128, 128, 8, 8),
            Variant::Small => (64, 64, 16, 4),
            // Twice the CUDA-core tiles' depth: the tensor cores finish a k-tile of 8 so fast that
            // one global load's latency per barrier would leave them idle.
            Variant::Tf32Big => (128, 128, 16, 8),
            Variant::Tf32Small => (64, 64, 32, 4),
            Variant::TcAsync if self.elem.is_half() => (128, 128, 32, 8),
            Variant::TcAsync => (128, 128, 8, 8),
            Variant::Wgmma => (128, 128, 64, 8),
            Variant::Naive => (16, 16, 1, 1),
            Variant::Skinny(r) => match self.b {
                BSrc::Strided { trans: true, .. } => (r as usize, 8, 128, 1),
                _ => (r as usize, 128, 8, 1),
            },
        }
    }

    pub fn name(&self) -> String {
        let v = match self.variant {
            Variant::Big => "big".to_string(),
            Variant::Small => "small".to_string(),
            Variant::Naive => "naive".to_string(),
            Variant::Tf32Big => "tf32big".to_string(),
            Variant::Tf32Small => "tf32small".to_string(),
            Variant::TcAsync if self.elem == Elem::F16 => "f16async".to_string(),
            Variant::TcAsync if self.elem == Elem::Bf16 => "bf16async".to_string(),
            Variant::TcAsync => "tf32async".to_string(),
            Variant::Wgmma => format!("wgmma{}", self.elem.tag()),
            Variant::Skinny(r) => format!("skinny{r}"),
        };
        let b = match self.b {
            BSrc::Strided { trans, vec } => format!("b{}{}", trans as u8, vec as u8),
            BSrc::Im2col => "bim2col".to_string(),
        };
        format!(
            "quorum_gemm_{v}_a{}{}_{b}_c{}_h{}_s{}",
            self.trans_a as u8,
            self.vec_a as u8,
            self.has_c as u8,
            self.elem.tag(),
            self.split as u8
        )
    }

    pub(crate) fn es(&self) -> usize {
        self.elem.size()
    }

    /// The k-depth one pass of the loaders covers (each thread loads 4 elements of each operand
    /// per pass): the CUDA-core tile's. A k-tile is `BK / load_bk` passes (slices).
    pub(crate) fn load_bk(&self) -> usize {
        match self.variant {
            Variant::Tf32Big => 8,
            Variant::Tf32Small => 16,
            _ => self.dims().2,
        }
    }

    /// Whether the products run on the tensor cores (f32 operands rounded to TF32; f16 and bf16
    /// operands as they are).
    pub fn tensor_cores(&self) -> bool {
        matches!(
            self.variant,
            Variant::Tf32Big | Variant::Tf32Small | Variant::TcAsync | Variant::Wgmma
        )
    }

    /// Floats of padding after each row of a shared tile: 4 keeps the rows 16-byte aligned for the
    /// CUDA-core kernels' vector reads; 8 also spreads a tensor-core fragment's reads (rows `t`
    /// and `t + 4` of a group, eight columns) over all 32 banks.
    pub(crate) fn pad(&self) -> usize {
        if self.tensor_cores() { 8 } else { 4 }
    }
}

/// Geometry of an implicit-im2col B operand (spatial dims padded to 3, leading ones).
#[derive(Clone, Copy, Debug, Default)]
pub struct Im2col {
    pub ins: [u32; 3],
    pub outs: [u32; 3],
    pub k: [u32; 3],
    pub s: [u32; 3],
    pub d: [u32; 3],
    pub pads: [i32; 3],
}

/// Everything one launch passes (pointers are device addresses, strides in elements).
#[derive(Clone, Debug, Default)]
pub struct GemmArgs {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub y: u64,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub lda: u32,
    pub ldb: u32,
    pub ldy: u32,
    pub c_rs: u32,
    pub c_cs: u32,
    pub alpha: f32,
    pub beta: f32,
    /// Number of K splits (grid.z = batches · nsplit), chunk length along K, workspace stride per split.
    pub nsplit: u32,
    pub kc: u32,
    pub ssy: u32,
    /// Sizes of batch dims 1 and 2 (dim 0 is whatever grid.z / nsplit leaves).
    pub d1: u32,
    pub d2: u32,
    pub sa: [u32; 3],
    pub sb: [u32; 3],
    pub sc: [u32; 3],
    pub sy: [u32; 3],
    pub im2col: Option<Im2col>,
    /// The exclusive end addresses of the tensors `a`, `b`, `c` and `y` point into: each pointer is
    /// declared (`Arg::In`/`Arg::Out`) from itself to its end.
    pub ends: [u64; 4],
}

/// The bytes from `p` to `end` (a null pointer: none).
pub(crate) fn span(p: u64, end: u64) -> usize {
    if p == 0 {
        0
    } else {
        end.saturating_sub(p) as usize
    }
}

impl GemmArgs {
    /// The kernel arguments, in the order `build` declares them.
    pub fn args(&self) -> Vec<Arg> {
        let mut v = vec![
            Arg::In(self.a, span(self.a, self.ends[0])),
            Arg::In(self.b, span(self.b, self.ends[1])),
            Arg::In(self.c, span(self.c, self.ends[2])),
            Arg::Out(self.y, span(self.y, self.ends[3])),
        ];
        for x in [
            self.m, self.n, self.k, self.lda, self.ldb, self.ldy, self.c_rs, self.c_cs,
        ] {
            v.push(Arg::U32(x));
        }
        v.push(Arg::F32(self.alpha));
        v.push(Arg::F32(self.beta));
        for x in [self.nsplit, self.kc, self.ssy, self.d1, self.d2] {
            v.push(Arg::U32(x));
        }
        for s in [self.sa, self.sb, self.sc, self.sy] {
            v.extend(s.iter().map(|&x| Arg::U32(x)));
        }
        if let Some(g) = &self.im2col {
            let ksz = g.k[0] * g.k[1] * g.k[2];
            let in_sp = g.ins[0] * g.ins[1] * g.ins[2];
            for x in [
                g.ins[0],
                g.ins[1],
                g.ins[2],
                g.outs[1] * g.outs[2],
                g.outs[2],
                g.k[1] * g.k[2],
                g.k[2],
                ksz,
                in_sp,
                g.s[0],
                g.s[1],
                g.s[2],
                g.d[0],
                g.d[1],
                g.d[2],
            ] {
                v.push(Arg::U32(x));
            }
            v.extend(g.pads.iter().map(|&p| Arg::I32(p)));
        }
        v
    }
}

/// The parameters every variant declares, loaded.
pub(crate) struct Params {
    pub(crate) a: Reg,
    pub(crate) b: Reg,
    pub(crate) c: Reg,
    pub(crate) y: Reg,
    pub(crate) m: Reg,
    pub(crate) n: Reg,
    pub(crate) lda: Reg,
    pub(crate) ldb: Reg,
    pub(crate) ldy: Reg,
    pub(crate) c_rs: Reg,
    pub(crate) c_cs: Reg,
    pub(crate) alpha: Reg,
    pub(crate) beta: Reg,
    /// First k of this block's split, and the end of its k range.
    pub(crate) kbeg: Reg,
    pub(crate) kend: Reg,
    pub(crate) g: Option<GeomRegs>,
}

#[derive(Clone, Copy)]
pub(crate) struct GeomRegs {
    pub(crate) ins: [Reg; 3],
    pub(crate) o12: Reg,
    pub(crate) o2: Reg,
    pub(crate) k12: Reg,
    pub(crate) k2: Reg,
    pub(crate) ksz: Reg,
    pub(crate) in_sp: Reg,
    pub(crate) s: [Reg; 3],
    pub(crate) d: [Reg; 3],
    pub(crate) pads: [Reg; 3],
}

/// Declares the parameters and applies the batch and split offsets to the four pointers.
pub(crate) fn params(k: &mut Kernel, cfg: &TileCfg) -> Params {
    let es = cfg.es();
    let a = k.param_ptr("a");
    let b = k.param_ptr("b");
    let c = k.param_ptr("c");
    let y = k.param_ptr("y");
    let [m, n, kk, lda, ldb, ldy, c_rs, c_cs] =
        ["m", "n", "k", "lda", "ldb", "ldy", "c_rs", "c_cs"].map(|s| k.param(s, Ty::U32));
    let alpha = k.param("alpha", Ty::F32);
    let beta = k.param("beta", Ty::F32);
    let [nsplit, kc, ssy, d1, d2] =
        ["nsplit", "kc", "ssy", "d1", "d2"].map(|s| k.param(s, Ty::U32));
    let st =
        ["sa", "sb", "sc", "sy"].map(|op| [0, 1, 2].map(|j| k.param(&format!("{op}{j}"), Ty::U32)));
    let g = if cfg.b == BSrc::Im2col {
        let [
            i0,
            i1,
            i2,
            o12,
            o2,
            k12,
            k2,
            ksz,
            in_sp,
            s0,
            s1,
            s2,
            d0,
            dd1,
            dd2,
        ] = [
            "i0", "i1", "i2", "o12", "o2", "k12", "k2", "ksz", "in_sp", "s0", "s1", "s2", "dl0",
            "dl1", "dl2",
        ]
        .map(|s| k.param(s, Ty::U32));
        let pads = ["pd0", "pd1", "pd2"].map(|s| k.param(s, Ty::S32));
        Some(GeomRegs {
            ins: [i0, i1, i2],
            o12,
            o2,
            k12,
            k2,
            ksz,
            in_sp,
            s: [s0, s1, s2],
            d: [d0, dd1, dd2],
            pads,
        })
    } else {
        None
    };
    // z = (batch index) · nsplit + split index; batch index = (z0 · d1 + z1) · d2 + z2.
    let z = k.special("ctaid.z");
    let split = k.rem(Ty::U32, z, nsplit);
    let zb = k.div(Ty::U32, z, nsplit);
    let z2 = k.rem(Ty::U32, zb, d2);
    let t = k.div(Ty::U32, zb, d2);
    let z1 = k.rem(Ty::U32, t, d1);
    let z0 = k.div(Ty::U32, t, d1);
    let mut ptrs = [a, b, c, y];
    for (i, p) in ptrs.iter_mut().enumerate() {
        let o = k.mul(Ty::U32, z0, st[i][0]);
        let o = k.fma(Ty::U32, z1, st[i][1], o);
        let o = k.fma(Ty::U32, z2, st[i][2], o);
        let o = if i == 3 {
            k.fma(Ty::U32, split, ssy, o)
        } else {
            o
        };
        // The workspace of a split launch is f32 whatever the inputs are.
        let e = if i == 3 && cfg.split { 4 } else { es };
        *p = k.addr(*p, o, e);
    }
    let kbeg = k.mul(Ty::U32, split, kc);
    let kend0 = k.add(Ty::U32, kbeg, kc);
    let kend = k.min(Ty::U32, kend0, kk);
    Params {
        a: ptrs[0],
        b: ptrs[1],
        c: ptrs[2],
        y: ptrs[3],
        m,
        n,
        lda,
        ldb,
        ldy,
        c_rs,
        c_cs,
        alpha,
        beta,
        kbeg,
        kend,
        g,
    }
}

/// The k-tiles of `bk` in this block's k range (a partial last one included; 0 for an empty K,
/// where `kend = kbeg = 0`).
pub(crate) fn k_tiles(k: &mut Kernel, p: &Params, bk: usize) -> Reg {
    let span = k.sub(Ty::U32, p.kend, p.kbeg);
    let x = k.add(Ty::U32, span, (bk - 1) as u32);
    k.div(Ty::U32, x, bk as u32)
}

/// `@p ld` of one element (f32, or a half widened) into the existing f32 register `v`.
pub(crate) fn load1(k: &mut Kernel, elem: Elem, v: Reg, p: Reg, addr: Reg, off: i64) {
    if elem.is_half() {
        let h = k.reg(elem.raw());
        k.raw(format_args!("@{p} ld.global.nc.b16 {h}, [{addr}+{off}]"));
        elem.widen_into(k, v, h, Some(p));
    } else {
        k.raw(format_args!("@{p} ld.global.nc.f32 {v}, [{addr}+{off}]"));
    }
}

pub(crate) fn zero(k: &mut Kernel, v: Reg) {
    k.raw(format_args!("mov.f32 {v}, 0f00000000"));
}

/// Loads 4 consecutive elements at `addr` into `vals` (0 where the predicate is false). With `vec`,
/// one vector load when all four are in range (`preds[3]` implies the others): 16 bytes of f32, or
/// 8 bytes of halves widened.
pub(crate) fn load4(
    k: &mut Kernel,
    elem: Elem,
    vec: bool,
    vals: [Reg; 4],
    preds: [Reg; 4],
    addr: Reg,
) {
    for v in vals {
        zero(k, v);
    }
    let es = elem.size();
    if vec {
        let p3 = preds[3];
        if elem.is_half() {
            let h = [0; 4].map(|_| k.reg(elem.raw()));
            k.raw(format_args!(
                "@{p3} ld.global.nc.v4.b16 {{{}, {}, {}, {}}}, [{addr}+0]",
                h[0], h[1], h[2], h[3]
            ));
            for i in 0..4 {
                elem.widen_into(k, vals[i], h[i], Some(p3));
            }
        } else {
            k.raw(format_args!(
                "@{p3} ld.global.nc.v4.f32 {{{}, {}, {}, {}}}, [{addr}+0]",
                vals[0], vals[1], vals[2], vals[3]
            ));
        }
        let np3 = k.pred_not(p3);
        for i in 0..3 {
            let q = k.pred_and(preds[i], np3);
            load1(k, elem, vals[i], q, addr, (i * es) as i64);
        }
    } else {
        for i in 0..4 {
            load1(k, elem, vals[i], preds[i], addr, (i * es) as i64);
        }
    }
}

/// The base input coordinates (`o·s − pad`, per spatial dim) of output position `p`.
pub(crate) fn gather_base(k: &mut Kernel, g: &GeomRegs, p: Reg) -> [Reg; 3] {
    let od = k.div(Ty::U32, p, g.o12);
    let r = k.rem(Ty::U32, p, g.o12);
    let oh = k.div(Ty::U32, r, g.o2);
    let ow = k.rem(Ty::U32, r, g.o2);
    let o = [od, oh, ow];
    [0, 1, 2].map(|i| {
        let x = k.mul(Ty::S32, o[i], g.s[i]);
        k.sub(Ty::S32, x, g.pads[i])
    })
}

/// Per-k part of the gather: (channel offset in elements, kernel tap offsets per dim).
pub(crate) fn gather_k(k: &mut Kernel, g: &GeomRegs, kk: Reg) -> (Reg, [Reg; 3]) {
    let c = k.div(Ty::U32, kk, g.ksz);
    let kp = k.rem(Ty::U32, kk, g.ksz);
    let kd = k.div(Ty::U32, kp, g.k12);
    let r = k.rem(Ty::U32, kp, g.k12);
    let kh = k.div(Ty::U32, r, g.k2);
    let kw = k.rem(Ty::U32, r, g.k2);
    let kt = [kd, kh, kw];
    let off = [0, 1, 2].map(|i| k.mul(Ty::U32, kt[i], g.d[i]));
    let coff = k.mul(Ty::U32, c, g.in_sp);
    (coff, off)
}

/// Address and in-range predicate of one gathered element (`ok` already holds the k and n checks).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gather_addr(
    k: &mut Kernel,
    g: &GeomRegs,
    b: Reg,
    es: usize,
    ok: Reg,
    base: [Reg; 3],
    coff: Reg,
    off: [Reg; 3],
) -> (Reg, Reg) {
    let mut ok = ok;
    let mut pos = [base[0]; 3];
    for i in 0..3 {
        pos[i] = k.add(Ty::S32, base[i], off[i]);
        // Negative coordinates are huge as unsigned: one compare checks both ends.
        let inr = k.setp(Cmp::Lt, Ty::U32, pos[i], g.ins[i]);
        ok = k.pred_and(ok, inr);
    }
    let r = k.fma(Ty::U32, pos[0], g.ins[1], pos[1]);
    let r = k.fma(Ty::U32, r, g.ins[2], pos[2]);
    let idx = k.add(Ty::U32, coff, r);
    (k.addr(b, idx, es), ok)
}

/// Writes one output: `alpha·acc + beta·C` (or the raw sum for a split), predicated on `p`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_out(
    k: &mut Kernel,
    cfg: &TileCfg,
    pr: &Params,
    p: Reg,
    acc: Reg,
    yaddr: Reg,
    row: Reg,
    col: Reg,
) {
    if cfg.split {
        k.raw(format_args!("@{p} st.global.f32 [{yaddr}+0], {acc}"));
        return;
    }
    let mut v = k.mul(Ty::F32, acc, pr.alpha);
    if cfg.has_c {
        let co = k.mul(Ty::U32, row, pr.c_rs);
        let co = k.fma(Ty::U32, col, pr.c_cs, co);
        let ca = k.addr(pr.c, co, cfg.es());
        let cv = k.mov(Ty::F32, 0.0f32);
        load1(k, cfg.elem, cv, p, ca, 0);
        v = k.fma(Ty::F32, pr.beta, cv, v);
    }
    if cfg.elem.is_half() {
        let h = cfg.elem.narrow(k, v);
        k.raw(format_args!("@{p} st.global.b16 [{yaddr}+0], {h}"));
    } else {
        k.raw(format_args!("@{p} st.global.f32 [{yaddr}+0], {v}"));
    }
}

/// The tiled kernel for `cfg` (variant Big or Small): 16×16 threads, each accumulating a
/// `tt`×`tt` micro-tile with `fma.rn.f32`.
pub fn build_tiled(cfg: &TileCfg) -> Kernel {
    let (bm, bn, bk, tt) = cfg.dims();
    let es = cfg.es();
    let yes = if cfg.split { 4 } else { es };
    let mut k = Kernel::new(&cfg.name());
    let s = setup(&mut k, cfg);
    let (p, tx, ty, mblk, nblk, sbase, asz) = (&s.p, s.tx, s.ty, s.mblk, s.nblk, s.sbase, s.asz);

    let acc: Vec<Vec<Reg>> = (0..tt)
        .map(|_| (0..tt).map(|_| k.mov(Ty::F32, 0.0f32)).collect())
        .collect();

    let st = prologue(&mut k, cfg, &s);

    // Per-thread read bases: A rows ty·4 (+64), B columns tx·4 (+64).
    let a_rd = {
        let o = k.shl(Ty::U32, ty, 4u32);
        k.add(Ty::U32, sbase, o)
    };
    let b_rd = {
        let o = k.shl(Ty::U32, tx, 4u32);
        let o = k.add(Ty::U32, o, asz as u32);
        k.add(Ty::U32, sbase, o)
    };

    ktile_loop(&mut k, cfg, &s, &st, |k, rd| {
        let ar = k.add(Ty::U32, a_rd, rd);
        let br = k.add(Ty::U32, b_rd, rd);
        let groups = tt / 4;
        for kk in 0..bk {
            let mut av = Vec::with_capacity(tt);
            let mut bv = Vec::with_capacity(tt);
            for g in 0..groups {
                av.extend(k.ld_v4(Space::Shared, ar, ((kk * (bm + 4) + g * 64) * 4) as i64));
            }
            for g in 0..groups {
                bv.extend(k.ld_v4(Space::Shared, br, ((kk * (bn + 4) + g * 64) * 4) as i64));
            }
            for i in 0..tt {
                for j in 0..tt {
                    k.fma_acc(acc[i][j], av[i], bv[j]);
                }
            }
        }
    });

    // Epilogue: output (row, col) of micro-tile entry (i, j).
    let rows: Vec<Reg> = (0..tt)
        .map(|i| {
            let r = k.fma(Ty::U32, ty, 4u32, mblk);
            k.add(Ty::U32, r, ((i / 4) * 64 + i % 4) as u32)
        })
        .collect();
    let cols: Vec<Reg> = (0..tt)
        .map(|j| {
            let c = k.fma(Ty::U32, tx, 4u32, nblk);
            k.add(Ty::U32, c, ((j / 4) * 64 + j % 4) as u32)
        })
        .collect();
    let pcol: Vec<Reg> = cols
        .iter()
        .map(|&c| k.setp(Cmp::Lt, Ty::U32, c, p.n))
        .collect();
    for i in 0..tt {
        let prow = k.setp(Cmp::Lt, Ty::U32, rows[i], p.m);
        let yrow = k.mul(Ty::U32, rows[i], p.ldy);
        for j in 0..tt {
            let pij = k.pred_and(prow, pcol[j]);
            let yi = k.add(Ty::U32, yrow, cols[j]);
            let ya = k.addr(p.y, yi, yes);
            store_out(&mut k, cfg, p, pij, acc[i][j], ya, rows[i], cols[j]);
        }
    }
    k
}

/// The kernel for `cfg`.
pub fn build(cfg: &TileCfg) -> Kernel {
    match cfg.variant {
        Variant::Naive => super::skinny::build_naive(cfg),
        Variant::Skinny(_) => super::skinny::build_skinny(cfg),
        Variant::Tf32Big | Variant::Tf32Small => super::tc::build_tc(cfg),
        Variant::TcAsync => super::tc_async::build_tc_async(cfg),
        Variant::Wgmma => super::wgmma::build_wgmma(cfg),
        _ => build_tiled(cfg),
    }
}

mod staged;
pub(crate) use staged::{ktile_loop, prologue, setup};

#[cfg(test)]
pub(crate) mod tests;
