//! A small typed PTX generator. Kernels are built from typed registers and operations and printed as
//! PTX text, which the driver JIT-compiles for the device's own compute capability. Every register has
//! a type, so a mismatched instruction is a Rust-side bug found by the unit tests, not a JIT error on
//! the GPU machine.
use std::fmt::{self, Display, Write};

/// Register and operand types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    Pred,
    U8,
    U16,
    U32,
    S32,
    U64,
    S64,
    F16,
    F32,
    F64,
}

impl Ty {
    /// The suffix used in instructions (`.f32`, `.u64`, ...).
    pub fn suffix(self) -> &'static str {
        match self {
            Ty::Pred => "pred",
            Ty::U8 => "u8",
            Ty::U16 => "u16",
            Ty::U32 => "u32",
            Ty::S32 => "s32",
            Ty::U64 => "u64",
            Ty::S64 => "s64",
            Ty::F16 => "f16",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
        }
    }

    /// The type name for `mov` and `selp`: the type itself for 32/64-bit values (so float immediates
    /// are typed), the bit size for 8/16-bit ones (held in 16-bit registers).
    pub fn mov_name(self) -> &'static str {
        match self {
            Ty::U8 | Ty::U16 | Ty::F16 => "b16",
            t => t.suffix(),
        }
    }

    /// The untyped bit-size name (`b32`) for moves and shuffles.
    pub fn bits(self) -> &'static str {
        match self {
            Ty::Pred => "pred",
            Ty::U8 => "b8",
            Ty::U16 | Ty::F16 => "b16",
            Ty::U32 | Ty::S32 | Ty::F32 => "b32",
            Ty::U64 | Ty::S64 | Ty::F64 => "b64",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Ty::Pred | Ty::U8 => 1,
            Ty::U16 | Ty::F16 => 2,
            Ty::U32 | Ty::S32 | Ty::F32 => 4,
            Ty::U64 | Ty::S64 | Ty::F64 => 8,
        }
    }

    fn class(self) -> (&'static str, usize) {
        // Register name prefix and the index of its counter. 8-bit values live in 16-bit registers.
        match self {
            Ty::Pred => ("p", 0),
            Ty::U8 | Ty::U16 => ("h", 1),
            Ty::U32 | Ty::S32 => ("r", 2),
            Ty::U64 | Ty::S64 => ("rd", 3),
            Ty::F16 => ("hf", 4),
            Ty::F32 => ("f", 5),
            Ty::F64 => ("fd", 6),
        }
    }

    fn decl(self) -> &'static str {
        match self {
            Ty::Pred => "pred",
            Ty::U8 | Ty::U16 => "b16",
            Ty::U32 | Ty::S32 => "b32",
            Ty::U64 | Ty::S64 => "b64",
            Ty::F16 => "b16",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
        }
    }
}

/// A virtual register of a fixed type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg {
    pub ty: Ty,
    id: u32,
}

impl Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}{}", self.ty.class().0, self.id)
    }
}

/// An instruction operand: a register or an immediate.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    R(Reg),
    I(i64),
    F(f32),
    D(f64),
}

impl Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::R(r) => write!(f, "{r}"),
            Op::I(v) => write!(f, "{v}"),
            // Exact bit patterns: no decimal rounding between Rust and ptxas.
            Op::F(v) => write!(f, "0f{:08X}", v.to_bits()),
            Op::D(v) => write!(f, "0d{:016X}", v.to_bits()),
        }
    }
}

impl From<Reg> for Op {
    fn from(r: Reg) -> Op {
        Op::R(r)
    }
}
impl From<i64> for Op {
    fn from(v: i64) -> Op {
        Op::I(v)
    }
}
impl From<i32> for Op {
    fn from(v: i32) -> Op {
        Op::I(v as i64)
    }
}
impl From<u32> for Op {
    fn from(v: u32) -> Op {
        Op::I(v as i64)
    }
}
impl From<usize> for Op {
    fn from(v: usize) -> Op {
        Op::I(v as i64)
    }
}
impl From<f32> for Op {
    fn from(v: f32) -> Op {
        Op::F(v)
    }
}
impl From<f64> for Op {
    fn from(v: f64) -> Op {
        Op::D(v)
    }
}

/// Comparison for `setp`.
#[derive(Clone, Copy, Debug)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Unordered-or-not-equal etc. are spelled out where needed; `Nan` tests for NaN (`nan` in PTX).
    Nan,
    Num,
}

impl Cmp {
    fn name(self, ty: Ty) -> &'static str {
        let unsigned = matches!(ty, Ty::U8 | Ty::U16 | Ty::U32 | Ty::U64);
        match (self, unsigned) {
            (Cmp::Eq, _) => "eq",
            (Cmp::Ne, _) => {
                if matches!(ty, Ty::F32 | Ty::F64 | Ty::F16) {
                    "neu" // NaN != x is true, as IEEE says
                } else {
                    "ne"
                }
            }
            (Cmp::Lt, false) => "lt",
            (Cmp::Le, false) => "le",
            (Cmp::Gt, false) => "gt",
            (Cmp::Ge, false) => "ge",
            (Cmp::Lt, true) => "lo",
            (Cmp::Le, true) => "ls",
            (Cmp::Gt, true) => "hi",
            (Cmp::Ge, true) => "hs",
            (Cmp::Nan, _) => "nan",
            (Cmp::Num, _) => "num",
        }
    }
}

/// Where a load or store goes.
#[derive(Clone, Copy, Debug)]
pub enum Space {
    Global,
    Shared,
}

impl Space {
    fn name(self) -> &'static str {
        match self {
            Space::Global => "global",
            Space::Shared => "shared",
        }
    }
}

/// One kernel under construction.
pub struct Kernel {
    name: String,
    params: Vec<(String, Ty)>,
    shared: Vec<String>,
    body: String,
    counters: [u32; 7],
    labels: u32,
}

impl Kernel {
    pub fn new(name: &str) -> Kernel {
        Kernel {
            name: name.to_string(),
            params: Vec::new(),
            shared: Vec::new(),
            body: String::new(),
            counters: [0; 7],
            labels: 0,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A fresh register of type `ty`.
    pub fn reg(&mut self, ty: Ty) -> Reg {
        let c = &mut self.counters[ty.class().1];
        let id = *c;
        *c += 1;
        Reg { ty, id }
    }

    /// Appends one raw instruction (without the trailing `;`).
    pub fn raw(&mut self, ins: impl AsRef<str>) {
        let _ = writeln!(self.body, "\t{};", ins.as_ref());
    }

    /// A fresh label name (use with [`Kernel::label`] and [`Kernel::bra`]).
    pub fn new_label(&mut self, hint: &str) -> String {
        self.labels += 1;
        format!("L_{hint}_{}", self.labels)
    }

    pub fn label(&mut self, l: &str) {
        let _ = writeln!(self.body, "{l}:");
    }

    pub fn bra(&mut self, l: &str) {
        self.raw(format!("bra.uni {l}"));
    }

    /// Branches to `l` when `p` (or its negation) holds.
    pub fn bra_if(&mut self, p: Reg, negate: bool, l: &str) {
        self.raw(format!("@{}{p} bra {l}", if negate { "!" } else { "" }));
    }

    /// A pointer parameter, converted to a global address.
    pub fn param_ptr(&mut self, name: &str) -> Reg {
        self.params.push((name.to_string(), Ty::U64));
        let r = self.reg(Ty::U64);
        self.raw(format!("ld.param.u64 {r}, [{name}]"));
        let g = self.reg(Ty::U64);
        self.raw(format!("cvta.to.global.u64 {g}, {r}"));
        g
    }

    /// A scalar parameter of type `ty` (u32, s32, u64, f32).
    pub fn param(&mut self, name: &str, ty: Ty) -> Reg {
        self.params.push((name.to_string(), ty));
        let r = self.reg(ty);
        self.raw(format!("ld.param.{} {r}, [{name}]", ty.suffix()));
        r
    }

    /// Declares a shared array of `bytes` bytes, aligned to 16; returns its name (usable as an address).
    pub fn shared_array(&mut self, name: &str, bytes: usize) -> String {
        self.shared
            .push(format!(".shared .align 16 .b8 {name}[{}];", bytes.max(16)));
        name.to_string()
    }

    /// The address of a shared array as a u32 register.
    pub fn shared_addr(&mut self, name: &str) -> Reg {
        let r = self.reg(Ty::U32);
        self.raw(format!("mov.u32 {r}, {name}"));
        r
    }

    /// A special register: `tid.x`, `ctaid.y`, `ntid.x`, `nctaid.x`, `laneid`...
    pub fn special(&mut self, name: &str) -> Reg {
        let r = self.reg(Ty::U32);
        self.raw(format!("mov.u32 {r}, %{name}"));
        r
    }

    pub fn mov(&mut self, ty: Ty, a: impl Into<Op>) -> Reg {
        let r = self.reg(ty);
        let a = a.into();
        self.raw(format!("mov.{} {r}, {a}", ty.mov_name()));
        r
    }

    /// `dst = a` into an existing register (loop variables).
    pub fn assign(&mut self, dst: Reg, a: impl Into<Op>) {
        let a = a.into();
        self.raw(format!("mov.{} {dst}, {a}", dst.ty.mov_name()));
    }

    fn bin(&mut self, op: &str, ty: Ty, a: Op, b: Op) -> Reg {
        let r = self.reg(ty);
        self.raw(format!("{op}.{} {r}, {a}, {b}", ty.suffix()));
        r
    }

    pub fn add(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin("add", ty, a.into(), b.into())
    }
    pub fn sub(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin("sub", ty, a.into(), b.into())
    }
    /// Low half of an integer product, or a float product (rounded to nearest).
    pub fn mul(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        let r = self.reg(ty);
        let op = match ty {
            Ty::F16 | Ty::F32 | Ty::F64 => format!("mul.rn.{}", ty.suffix()),
            _ => format!("mul.lo.{}", ty.suffix()),
        };
        self.raw(format!("{op} {r}, {a}, {b}"));
        r
    }
    /// 32×32 → 64-bit product (`mul.wide`), for addresses.
    pub fn mul_wide(&mut self, signed: bool, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        let r = self.reg(if signed { Ty::S64 } else { Ty::U64 });
        let t = if signed { "s32" } else { "u32" };
        self.raw(format!("mul.wide.{t} {r}, {a}, {b}"));
        r
    }
    /// Fused multiply-add `a·b + c` (rounded once for floats).
    pub fn fma(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>, c: impl Into<Op>) -> Reg {
        let (a, b, c) = (a.into(), b.into(), c.into());
        let r = self.reg(ty);
        let op = match ty {
            Ty::F16 | Ty::F32 | Ty::F64 => format!("fma.rn.{}", ty.suffix()),
            _ => format!("mad.lo.{}", ty.suffix()),
        };
        self.raw(format!("{op} {r}, {a}, {b}, {c}"));
        r
    }
    /// `acc += a·b` in place (floats, one rounding).
    pub fn fma_acc(&mut self, acc: Reg, a: impl Into<Op>, b: impl Into<Op>) {
        let (a, b) = (a.into(), b.into());
        self.raw(format!("fma.rn.{} {acc}, {a}, {b}, {acc}", acc.ty.suffix()));
    }
    /// IEEE division (correctly rounded for floats).
    pub fn div(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        let r = self.reg(ty);
        let op = match ty {
            Ty::F32 | Ty::F64 => format!("div.rn.{}", ty.suffix()),
            _ => format!("div.{}", ty.suffix()),
        };
        self.raw(format!("{op} {r}, {a}, {b}"));
        r
    }
    pub fn rem(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin("rem", ty, a.into(), b.into())
    }
    /// IEEE min/max; for floats PTX returns the non-NaN operand when one is NaN (callers that must
    /// propagate NaN test for it).
    pub fn min(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin("min", ty, a.into(), b.into())
    }
    pub fn max(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin("max", ty, a.into(), b.into())
    }
    pub fn and(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        let r = self.reg(ty);
        self.raw(format!("and.{} {r}, {a}, {b}", ty.bits()));
        r
    }
    pub fn or(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        let r = self.reg(ty);
        self.raw(format!("or.{} {r}, {a}, {b}", ty.bits()));
        r
    }
    pub fn xor(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        let r = self.reg(ty);
        self.raw(format!("xor.{} {r}, {a}, {b}", ty.bits()));
        r
    }
    pub fn shl(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        let r = self.reg(ty);
        self.raw(format!("shl.{} {r}, {a}, {b}", ty.bits()));
        r
    }
    /// Logical (unsigned) or arithmetic (signed) right shift, by `ty`.
    pub fn shr(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin("shr", ty, a.into(), b.into())
    }
    /// A one-operand instruction such as `neg`, `abs`, `sqrt.rn`, `ex2.approx.ftz`, `rcp.rn`.
    pub fn unary(&mut self, op: &str, ty: Ty, a: impl Into<Op>) -> Reg {
        let a = a.into();
        let r = self.reg(ty);
        self.raw(format!("{op}.{} {r}, {a}", ty.suffix()));
        r
    }
    /// `cvt` with the rounding or saturation modifier given (`""`, `".rn"`, `".rzi"`, `".rni"`, `".sat"`).
    pub fn cvt(&mut self, to: Ty, from: Ty, modifier: &str, a: impl Into<Op>) -> Reg {
        let a = a.into();
        let r = self.reg(to);
        let (ts, fs) = (cvt_name(to), cvt_name(from));
        self.raw(format!("cvt{modifier}.{ts}.{fs} {r}, {a}"));
        r
    }
    /// Reinterprets the bits of `a` as `to` (same width).
    pub fn bitcast(&mut self, to: Ty, a: Reg) -> Reg {
        let r = self.reg(to);
        self.raw(format!("mov.{} {r}, {a}", to.bits()));
        r
    }

    pub fn setp(&mut self, cmp: Cmp, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        let p = self.reg(Ty::Pred);
        self.raw(format!(
            "setp.{}.{} {p}, {a}, {b}",
            cmp.name(ty),
            ty.suffix()
        ));
        p
    }
    /// `p ? a : b`.
    pub fn selp(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>, p: Reg) -> Reg {
        let (a, b) = (a.into(), b.into());
        let r = self.reg(ty);
        self.raw(format!("selp.{} {r}, {a}, {b}, {p}", ty.mov_name()));
        r
    }
    pub fn pred_and(&mut self, a: Reg, b: Reg) -> Reg {
        let p = self.reg(Ty::Pred);
        self.raw(format!("and.pred {p}, {a}, {b}"));
        p
    }
    pub fn pred_or(&mut self, a: Reg, b: Reg) -> Reg {
        let p = self.reg(Ty::Pred);
        self.raw(format!("or.pred {p}, {a}, {b}"));
        p
    }
    pub fn pred_not(&mut self, a: Reg) -> Reg {
        let p = self.reg(Ty::Pred);
        self.raw(format!("not.pred {p}, {a}"));
        p
    }

    /// Loads a `ty` from `[addr + offset]`.
    pub fn ld(&mut self, space: Space, ty: Ty, addr: Reg, offset: i64) -> Reg {
        let r = self.reg(ty);
        let t = if ty == Ty::F16 { "b16" } else { ty.suffix() };
        self.raw(format!("ld.{}.{t} {r}, [{addr}+{offset}]", space.name()));
        r
    }
    /// Loads a `ty` from global memory through the read-only path (`ld.global.nc`).
    pub fn ld_nc(&mut self, ty: Ty, addr: Reg, offset: i64) -> Reg {
        let r = self.reg(ty);
        let t = if ty == Ty::F16 { "b16" } else { ty.suffix() };
        self.raw(format!("ld.global.nc.{t} {r}, [{addr}+{offset}]"));
        r
    }
    /// Loads four consecutive f32 (16-byte aligned address) into four registers.
    pub fn ld_v4(&mut self, space: Space, addr: Reg, offset: i64) -> [Reg; 4] {
        let r = [
            self.reg(Ty::F32),
            self.reg(Ty::F32),
            self.reg(Ty::F32),
            self.reg(Ty::F32),
        ];
        self.raw(format!(
            "ld.{}.v4.f32 {{{}, {}, {}, {}}}, [{addr}+{offset}]",
            space.name(),
            r[0],
            r[1],
            r[2],
            r[3]
        ));
        r
    }
    pub fn st(&mut self, space: Space, addr: Reg, offset: i64, v: impl Into<Op>) {
        let v = v.into();
        let ty = match v {
            Op::R(r) => r.ty,
            Op::F(_) => Ty::F32,
            Op::D(_) => Ty::F64,
            Op::I(_) => Ty::U32,
        };
        let t = if ty == Ty::F16 { "b16" } else { ty.suffix() };
        self.raw(format!("st.{}.{t} [{addr}+{offset}], {v}", space.name()));
    }
    /// Stores an 8-bit value held in a 16-bit register.
    pub fn st_u8(&mut self, space: Space, addr: Reg, offset: i64, v: Reg) {
        self.raw(format!("st.{}.u8 [{addr}+{offset}], {v}", space.name()));
    }
    /// `base + index · elem` as a 64-bit address (index is u32 or u64).
    pub fn addr(&mut self, base: Reg, index: Reg, elem: usize) -> Reg {
        let off = match index.ty {
            Ty::U32 => self.mul_wide(false, index, elem as u32),
            Ty::S32 => self.mul_wide(true, index, elem as i32),
            _ => self.mul(Ty::U64, index, elem as u64 as i64),
        };
        self.add(Ty::U64, base, off)
    }

    pub fn bar_sync(&mut self) {
        self.raw("bar.sync 0");
    }

    /// `shfl.sync.bfly` of a 32-bit value across the full warp.
    pub fn shfl_bfly(&mut self, v: Reg, lane_mask: u32) -> Reg {
        let r = self.reg(v.ty);
        self.raw(format!(
            "shfl.sync.bfly.b32 {r}, {v}, {lane_mask}, 31, 0xffffffff"
        ));
        r
    }
    /// `shfl.sync.down` of a 32-bit value across the full warp.
    pub fn shfl_down(&mut self, v: Reg, delta: u32) -> Reg {
        let r = self.reg(v.ty);
        self.raw(format!(
            "shfl.sync.down.b32 {r}, {v}, {delta}, 31, 0xffffffff"
        ));
        r
    }

    /// Emits `for (i = start; i < end; i += step) body`, with `i` a fresh register of `ty`.
    pub fn for_range(
        &mut self,
        ty: Ty,
        start: impl Into<Op>,
        end: impl Into<Op>,
        step: impl Into<Op>,
        body: impl FnOnce(&mut Kernel, Reg),
    ) {
        let (start, end, step) = (start.into(), end.into(), step.into());
        let i = self.mov(ty, start);
        let top = self.new_label("loop");
        let done = self.new_label("done");
        self.label(&top);
        let p = self.setp(Cmp::Ge, ty, i, end);
        self.bra_if(p, false, &done);
        body(self, i);
        self.raw(format!("add.{} {i}, {i}, {step}", ty.suffix()));
        self.bra(&top);
        self.label(&done);
    }

    /// Runs `body` only when `p` holds.
    pub fn when(&mut self, p: Reg, body: impl FnOnce(&mut Kernel)) {
        let skip = self.new_label("skip");
        self.bra_if(p, true, &skip);
        body(self);
        self.label(&skip);
    }

    /// Returns from the kernel when `p` holds (bounds checks).
    pub fn exit_if(&mut self, p: Reg) {
        self.raw(format!("@{p} ret"));
    }

    fn emit(&self, out: &mut String) {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(n, t)| format!("\t.param .{} {n}", t.suffix()))
            .collect();
        let _ = writeln!(
            out,
            ".visible .entry {}(\n{}\n)\n{{",
            self.name,
            params.join(",\n")
        );
        for s in &self.shared {
            let _ = writeln!(out, "\t{s}");
        }
        for ty in [
            Ty::Pred,
            Ty::U16,
            Ty::U32,
            Ty::U64,
            Ty::F16,
            Ty::F32,
            Ty::F64,
        ] {
            let (prefix, idx) = ty.class();
            let n = self.counters[idx];
            if n > 0 {
                let _ = writeln!(out, "\t.reg .{} %{prefix}<{n}>;", ty.decl());
            }
        }
        out.push_str(&self.body);
        out.push_str("\tret;\n}\n");
    }
}

fn cvt_name(t: Ty) -> &'static str {
    match t {
        Ty::U8 => "u8",
        Ty::U16 => "u16",
        _ => t.suffix(),
    }
}

/// The PTX ISA version and target for a compute capability.
pub fn target(cc: (i32, i32)) -> (&'static str, String) {
    let version = match cc {
        (9.., _) => "8.0",
        (8, 9..) => "7.8",
        (8, 6..) => "7.1",
        (8, _) => "7.0",
        _ => "6.0",
    };
    (version, format!("sm_{}{}", cc.0, cc.1))
}

/// Prints a module holding `kernels` for compute capability `cc`.
pub fn module(cc: (i32, i32), kernels: &[Kernel]) -> String {
    let (version, target) = target(cc);
    let mut out = format!(".version {version}\n.target {target}\n.address_size 64\n\n");
    for k in kernels {
        k.emit(&mut out);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_are_typed_and_declared() {
        let mut k = Kernel::new("axpy");
        let x = k.param_ptr("x");
        let n = k.param("n", Ty::U32);
        let tid = k.special("tid.x");
        let p = k.setp(Cmp::Ge, Ty::U32, tid, n);
        k.exit_if(p);
        let a = k.addr(x, tid, 4);
        let v = k.ld(Space::Global, Ty::F32, a, 0);
        let w = k.fma(Ty::F32, v, 2.0f32, 1.0f32);
        k.st(Space::Global, a, 0, w);
        let text = module((9, 0), &[k]);
        assert!(text.starts_with(".version 8.0\n.target sm_90\n"), "{text}");
        assert!(text.contains(".param .u64 x"), "{text}");
        assert!(text.contains("setp.hs.u32 %p0, %r1, %r0;"), "{text}");
        assert!(
            text.contains("fma.rn.f32 %f1, %f0, 0f40000000, 0f3F800000;"),
            "{text}"
        );
        assert!(text.contains(".reg .f32 %f<2>;"), "{text}");
        assert!(text.contains("st.global.f32 [%rd3+0], %f1;"), "{text}");
    }

    #[test]
    fn loops_and_labels_are_unique() {
        let mut k = Kernel::new("loops");
        let acc = k.mov(Ty::F32, 0.0f32);
        k.for_range(Ty::U32, 0u32, 10u32, 1u32, |k, i| {
            let f = k.cvt(Ty::F32, Ty::U32, ".rn", i);
            k.raw(format!("add.f32 {acc}, {acc}, {f}"));
        });
        k.for_range(Ty::U32, 0u32, 3u32, 1u32, |_, _| {});
        let text = module((8, 0), &[k]);
        assert!(
            text.contains("L_loop_1:") && text.contains("L_loop_3:"),
            "{text}"
        );
        assert!(text.contains("cvt.rn.f32.u32"), "{text}");
        assert!(text.starts_with(".version 7.0\n.target sm_80"), "{text}");
    }

    #[test]
    fn float_immediates_are_exact_bit_patterns() {
        assert_eq!(Op::from(0.1f32).to_string(), "0f3DCCCCCD");
        assert_eq!(Op::from(-0.0f32).to_string(), "0f80000000");
        assert_eq!(Op::from(1.0f64).to_string(), "0d3FF0000000000000");
    }
}
