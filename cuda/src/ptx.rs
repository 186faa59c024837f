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

/// A float instruction's register operands must be registers of its own type: PTX rejects the
/// module at JIT time otherwise (`CUDA_ERROR_INVALID_PTX`), far from the generator that erred and
/// only on a machine with a GPU. Checked as the text is built, in debug builds (every unit test).
fn same_float(op: &str, ty: Ty, operands: &[&Op]) {
    if cfg!(debug_assertions) && matches!(ty, Ty::F16 | Ty::F32 | Ty::F64) {
        for o in operands {
            if let Op::R(r) = o {
                assert!(
                    r.ty == ty,
                    "PTX {op}.{}: operand {r} is a {:?} register",
                    ty.suffix(),
                    r.ty
                );
            }
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
        self.put(f)
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
        self.put(f)
    }
}

/// A piece of PTX text that writes itself without `format!`'s machinery. Kernel families print
/// their module on every launch (the module cache is keyed by the text), so the builder writes each
/// instruction's pieces straight into the kernel body (see `ins!`) rather than format a `String`.
trait Text {
    fn put<W: Write>(&self, w: &mut W) -> fmt::Result;
}

impl Text for &str {
    fn put<W: Write>(&self, w: &mut W) -> fmt::Result {
        w.write_str(self)
    }
}

impl Text for char {
    fn put<W: Write>(&self, w: &mut W) -> fmt::Result {
        w.write_char(*self)
    }
}

impl Text for i64 {
    fn put<W: Write>(&self, w: &mut W) -> fmt::Result {
        if *self < 0 {
            w.write_char('-')?;
        }
        put_decimal(w, self.unsigned_abs())
    }
}

impl Text for u32 {
    fn put<W: Write>(&self, w: &mut W) -> fmt::Result {
        put_decimal(w, *self as u64)
    }
}

impl Text for usize {
    fn put<W: Write>(&self, w: &mut W) -> fmt::Result {
        put_decimal(w, *self as u64)
    }
}

impl Text for Reg {
    /// `%` + class prefix + index: `%r12`, `%fd3`.
    fn put<W: Write>(&self, w: &mut W) -> fmt::Result {
        w.write_char('%')?;
        w.write_str(self.ty.class().0)?;
        put_decimal(w, self.id as u64)
    }
}

impl Text for Op {
    fn put<W: Write>(&self, w: &mut W) -> fmt::Result {
        match self {
            Op::R(r) => r.put(w),
            Op::I(v) => v.put(w),
            // Exact bit patterns: no decimal rounding between Rust and ptxas.
            Op::F(v) => {
                w.write_str("0f")?;
                put_hex(w, v.to_bits() as u64, 8)
            }
            Op::D(v) => {
                w.write_str("0d")?;
                put_hex(w, v.to_bits(), 16)
            }
        }
    }
}

/// `v` in decimal.
fn put_decimal<W: Write>(w: &mut W, mut v: u64) -> fmt::Result {
    let mut buf = [0u8; 20];
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    w.write_str(std::str::from_utf8(&buf[start..]).expect("ASCII digits"))
}

/// The low `digits` hex digits of `bits`, upper case and zero-padded (`{:08X}`).
fn put_hex<W: Write>(w: &mut W, bits: u64, digits: u32) -> fmt::Result {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut buf = [0u8; 16];
    for (i, b) in buf[..digits as usize].iter_mut().enumerate() {
        *b = HEX[(bits >> (4 * (digits as usize - 1 - i))) as usize & 0xF];
    }
    w.write_str(std::str::from_utf8(&buf[..digits as usize]).expect("ASCII digits"))
}

/// Appends one instruction to kernel `$k`'s body: a tab, the pieces (each a [`Text`]) and `;\n`.
/// `ins!(k; "mov.", ty.mov_name(), ' ', r, ", ", a)` prints what `format!("mov.{} {r}, {a}", ..)`
/// would, without building a `String`. (The `;` after the kernel also keeps rustfmt from laying the
/// pieces out one per line.)
macro_rules! ins {
    ($k:expr; $($piece:expr),+ $(,)?) => {{
        let out = &mut $k.body;
        out.push('\t');
        // Writing to a `String` cannot fail.
        $( let _ = Text::put(&$piece, out); )+
        out.push_str(";\n");
    }};
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
    /// The parameter declarations, `\t.param .u64 x` joined by `,\n`.
    params: String,
    /// The shared array declarations, one `\t.shared ...;\n` line each.
    shared: String,
    /// Module-scope declarations printed before the entry (dynamic shared memory).
    decls: String,
    body: String,
    counters: [u32; 7],
    labels: u32,
}

impl Kernel {
    pub fn new(name: &str) -> Kernel {
        Kernel {
            name: name.to_string(),
            params: String::new(),
            shared: String::new(),
            decls: String::new(),
            // Most kernels print a few KB; start there rather than growing from nothing.
            body: String::with_capacity(4096),
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

    /// Appends one raw instruction (without the trailing `;`). Takes anything printable: a `&str`,
    /// a `String`, or, cheapest, `format_args!(...)`, which is written straight into the body.
    pub fn raw(&mut self, ins: impl Display) {
        self.body.push('\t');
        let _ = write!(self.body, "{ins}");
        self.body.push_str(";\n");
    }

    /// A fresh label name (use with [`Kernel::label`] and [`Kernel::bra`]).
    pub fn new_label(&mut self, hint: &str) -> String {
        self.labels += 1;
        let mut l = String::with_capacity(hint.len() + 8);
        l.push_str("L_");
        l.push_str(hint);
        l.push('_');
        let _ = self.labels.put(&mut l);
        l
    }

    pub fn label(&mut self, l: &str) {
        self.body.push_str(l);
        self.body.push_str(":\n");
    }

    pub fn bra(&mut self, l: &str) {
        ins!(self; "bra.uni ", l);
    }

    /// Branches to `l` when `p` (or its negation) holds.
    pub fn bra_if(&mut self, p: Reg, negate: bool, l: &str) {
        ins!(self; if negate { "@!" } else { "@" }, p, " bra ", l);
    }

    /// Declares parameter `name` of type `ty`.
    fn declare_param(&mut self, name: &str, ty: Ty) {
        if !self.params.is_empty() {
            self.params.push_str(",\n");
        }
        self.params.push_str("\t.param .");
        self.params.push_str(ty.suffix());
        self.params.push(' ');
        self.params.push_str(name);
    }

    /// A pointer parameter, converted to a global address.
    pub fn param_ptr(&mut self, name: &str) -> Reg {
        self.declare_param(name, Ty::U64);
        let r = self.reg(Ty::U64);
        ins!(self; "ld.param.u64 ", r, ", [", name, ']');
        let g = self.reg(Ty::U64);
        ins!(self; "cvta.to.global.u64 ", g, ", ", r);
        g
    }

    /// A scalar parameter of type `ty` (u32, s32, u64, f32).
    pub fn param(&mut self, name: &str, ty: Ty) -> Reg {
        self.declare_param(name, ty);
        let r = self.reg(ty);
        ins!(self; "ld.param.", ty.suffix(), ' ', r, ", [", name, ']');
        r
    }

    /// Declares a shared array of `bytes` bytes, aligned to 16; returns its name (usable as an address).
    pub fn shared_array(&mut self, name: &str, bytes: usize) -> String {
        let s = &mut self.shared;
        s.push_str("\t.shared .align 16 .b8 ");
        s.push_str(name);
        s.push('[');
        let _ = bytes.max(16).put(s);
        s.push_str("];\n");
        name.to_string()
    }

    /// Declares the launch's dynamic shared memory (sized by the launch, which may exceed the
    /// 48 KiB a static array can have) under a name of this kernel's own (module scope: one
    /// module may hold several kernels); returns the name.
    pub fn extern_shared(&mut self) -> String {
        let name = format!("dsmem_{}", self.name);
        self.decls.push_str(".extern .shared .align 16 .b8 ");
        self.decls.push_str(&name);
        self.decls.push_str("[];\n");
        name
    }

    /// The address of a shared array as a u32 register.
    pub fn shared_addr(&mut self, name: &str) -> Reg {
        let r = self.reg(Ty::U32);
        ins!(self; "mov.u32 ", r, ", ", name);
        r
    }

    /// A special register: `tid.x`, `ctaid.y`, `ntid.x`, `nctaid.x`, `laneid`...
    pub fn special(&mut self, name: &str) -> Reg {
        let r = self.reg(Ty::U32);
        ins!(self; "mov.u32 ", r, ", %", name);
        r
    }

    pub fn mov(&mut self, ty: Ty, a: impl Into<Op>) -> Reg {
        let r = self.reg(ty);
        let a = a.into();
        ins!(self; "mov.", ty.mov_name(), ' ', r, ", ", a);
        r
    }

    /// `dst = a` into an existing register (loop variables).
    pub fn assign(&mut self, dst: Reg, a: impl Into<Op>) {
        let a = a.into();
        ins!(self; "mov.", dst.ty.mov_name(), ' ', dst, ", ", a);
    }

    /// `op.type r, a, b` with `type` the instruction suffix `.f32`, `.u64`...
    fn bin(&mut self, op: &str, ty: Ty, a: Op, b: Op) -> Reg {
        same_float(op, ty, &[&a, &b]);
        self.bin_named(op, ty.suffix(), ty, a, b)
    }

    /// `op.tname r, a, b` into a fresh `ty` register.
    fn bin_named(&mut self, op: &str, tname: &str, ty: Ty, a: Op, b: Op) -> Reg {
        let r = self.reg(ty);
        ins!(self; op, '.', tname, ' ', r, ", ", a, ", ", b);
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
        let op = match ty {
            Ty::F16 | Ty::F32 | Ty::F64 => "mul.rn",
            _ => "mul.lo",
        };
        self.bin(op, ty, a.into(), b.into())
    }
    /// 32×32 → 64-bit product (`mul.wide`), for addresses.
    pub fn mul_wide(&mut self, signed: bool, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        let r = self.reg(if signed { Ty::S64 } else { Ty::U64 });
        let t = if signed { "s32" } else { "u32" };
        ins!(self; "mul.wide.", t, ' ', r, ", ", a, ", ", b);
        r
    }
    /// Fused multiply-add `a·b + c` (rounded once for floats).
    pub fn fma(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>, c: impl Into<Op>) -> Reg {
        let (a, b, c) = (a.into(), b.into(), c.into());
        same_float("fma", ty, &[&a, &b, &c]);
        let r = self.reg(ty);
        let op = match ty {
            Ty::F16 | Ty::F32 | Ty::F64 => "fma.rn.",
            _ => "mad.lo.",
        };
        ins!(self; op, ty.suffix(), ' ', r, ", ", a, ", ", b, ", ", c);
        r
    }
    /// `acc += a·b` in place (floats, one rounding).
    pub fn fma_acc(&mut self, acc: Reg, a: impl Into<Op>, b: impl Into<Op>) {
        let (a, b) = (a.into(), b.into());
        let t = acc.ty.suffix();
        ins!(self; "fma.rn.", t, ' ', acc, ", ", a, ", ", b, ", ", acc);
    }
    /// IEEE division (correctly rounded for floats).
    pub fn div(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let op = match ty {
            Ty::F32 | Ty::F64 => "div.rn",
            _ => "div",
        };
        self.bin(op, ty, a.into(), b.into())
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
        self.bin_named("and", ty.bits(), ty, a.into(), b.into())
    }
    pub fn or(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin_named("or", ty.bits(), ty, a.into(), b.into())
    }
    pub fn xor(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin_named("xor", ty.bits(), ty, a.into(), b.into())
    }
    pub fn shl(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin_named("shl", ty.bits(), ty, a.into(), b.into())
    }
    /// Logical (unsigned) or arithmetic (signed) right shift, by `ty`.
    pub fn shr(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.bin("shr", ty, a.into(), b.into())
    }
    /// A one-operand instruction such as `neg`, `abs`, `sqrt.rn`, `ex2.approx.ftz`, `rcp.rn`.
    pub fn unary(&mut self, op: &str, ty: Ty, a: impl Into<Op>) -> Reg {
        let a = a.into();
        same_float(op, ty, &[&a]);
        let r = self.reg(ty);
        ins!(self; op, '.', ty.suffix(), ' ', r, ", ", a);
        r
    }
    /// `cvt` with the rounding or saturation modifier given (`""`, `".rn"`, `".rzi"`, `".rni"`, `".sat"`).
    pub fn cvt(&mut self, to: Ty, from: Ty, modifier: &str, a: impl Into<Op>) -> Reg {
        let a = a.into();
        same_float("cvt", from, &[&a]);
        let r = self.reg(to);
        let (ts, fs) = (cvt_name(to), cvt_name(from));
        ins!(self; "cvt", modifier, '.', ts, '.', fs, ' ', r, ", ", a);
        r
    }
    /// Reinterprets the bits of `a` as `to` (same width).
    pub fn bitcast(&mut self, to: Ty, a: Reg) -> Reg {
        let r = self.reg(to);
        ins!(self; "mov.", to.bits(), ' ', r, ", ", a);
        r
    }

    pub fn setp(&mut self, cmp: Cmp, ty: Ty, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        let (a, b) = (a.into(), b.into());
        same_float("setp", ty, &[&a, &b]);
        let p = self.reg(Ty::Pred);
        let c = cmp.name(ty);
        ins!(self; "setp.", c, '.', ty.suffix(), ' ', p, ", ", a, ", ", b);
        p
    }
    /// `p ? a : b`.
    pub fn selp(&mut self, ty: Ty, a: impl Into<Op>, b: impl Into<Op>, p: Reg) -> Reg {
        let (a, b) = (a.into(), b.into());
        same_float("selp", ty, &[&a, &b]);
        let r = self.reg(ty);
        ins!(self; "selp.", ty.mov_name(), ' ', r, ", ", a, ", ", b, ", ", p);
        r
    }
    pub fn pred_and(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin_named("and", "pred", Ty::Pred, a.into(), b.into())
    }
    pub fn pred_or(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin_named("or", "pred", Ty::Pred, a.into(), b.into())
    }
    pub fn pred_not(&mut self, a: Reg) -> Reg {
        let p = self.reg(Ty::Pred);
        ins!(self; "not.pred ", p, ", ", a);
        p
    }

    /// Loads a `ty` from `[addr + offset]`.
    pub fn ld(&mut self, space: Space, ty: Ty, addr: Reg, offset: i64) -> Reg {
        let r = self.reg(ty);
        let t = if ty == Ty::F16 { "b16" } else { ty.suffix() };
        let s = space.name();
        ins!(self; "ld.", s, '.', t, ' ', r, ", [", addr, '+', offset, ']');
        r
    }
    /// Loads a `ty` from global memory through the read-only path (`ld.global.nc`).
    pub fn ld_nc(&mut self, ty: Ty, addr: Reg, offset: i64) -> Reg {
        let r = self.reg(ty);
        let t = if ty == Ty::F16 { "b16" } else { ty.suffix() };
        ins!(self; "ld.global.nc.", t, ' ', r, ", [", addr, '+', offset, ']');
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
        let s = space.name();
        let [a, b, c, d] = r;
        ins!(self; "ld.", s, ".v4.f32 {", a, ", ", b, ", ", c, ", ", d, "}, [",
            addr, '+', offset, ']');
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
        let s = space.name();
        ins!(self; "st.", s, '.', t, " [", addr, '+', offset, "], ", v);
    }
    /// Stores an 8-bit value held in a 16-bit register.
    pub fn st_u8(&mut self, space: Space, addr: Reg, offset: i64, v: Reg) {
        let s = space.name();
        ins!(self; "st.", s, ".u8 [", addr, '+', offset, "], ", v);
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
        ins!(self; "bar.sync 0");
    }

    /// `shfl.sync.bfly` of a 32-bit value across the full warp.
    pub fn shfl_bfly(&mut self, v: Reg, lane_mask: u32) -> Reg {
        let r = self.reg(v.ty);
        ins!(self; "shfl.sync.bfly.b32 ", r, ", ", v, ", ", lane_mask, ", 31, 0xffffffff");
        r
    }
    /// `shfl.sync.down` of a 32-bit value across the full warp.
    pub fn shfl_down(&mut self, v: Reg, delta: u32) -> Reg {
        let r = self.reg(v.ty);
        ins!(self; "shfl.sync.down.b32 ", r, ", ", v, ", ", delta, ", 31, 0xffffffff");
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
        ins!(self; "add.", ty.suffix(), ' ', i, ", ", i, ", ", step);
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
        ins!(self; '@', p, " ret");
    }

    /// An upper bound on the length of the text `emit` prints.
    fn emit_len(&self) -> usize {
        // The entry line, the braces and `ret`, and seven register declarations.
        self.decls.len()
            + self.name.len()
            + self.params.len()
            + self.shared.len()
            + self.body.len()
            + 256
    }

    fn emit(&self, out: &mut String) {
        out.push_str(&self.decls);
        out.push_str(".visible .entry ");
        out.push_str(&self.name);
        out.push_str("(\n");
        out.push_str(&self.params);
        out.push_str("\n)\n{\n");
        out.push_str(&self.shared);
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
                // `\t.reg .b32 %r<12>;`
                out.push_str("\t.reg .");
                out.push_str(ty.decl());
                out.push_str(" %");
                out.push_str(prefix);
                out.push('<');
                let _ = n.put(out);
                out.push_str(">;\n");
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
    let len = 64 + kernels.iter().map(|k| k.emit_len() + 1).sum::<usize>();
    let mut out = String::with_capacity(len);
    out.push_str(".version ");
    out.push_str(version);
    out.push_str("\n.target ");
    out.push_str(&target);
    out.push_str("\n.address_size 64\n\n");
    for k in kernels {
        k.emit(&mut out);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A u32 index handed where an f64 belongs (the LayerNorm apply kernel once did this and the
    /// driver refused the module on the GPU machine): caught while the text is built.
    #[test]
    #[should_panic(expected = "operand %r")]
    fn a_float_instruction_refuses_an_integer_register() {
        let mut k = Kernel::new("mistyped");
        let i = k.special("tid.x");
        let m = k.mov(Ty::F64, Op::D(0.5));
        k.sub(Ty::F64, i, m);
    }

    #[test]
    fn a_float_instruction_takes_its_own_registers_and_literals() {
        let mut k = Kernel::new("typed");
        let m = k.mov(Ty::F64, Op::D(0.5));
        let s = k.sub(Ty::F64, m, Op::D(1.0));
        let f = k.cvt(Ty::F32, Ty::F64, ".rn", s);
        k.fma(Ty::F32, f, f, 2.0f32);
    }

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
    fn manual_number_printing_matches_std_formatting() {
        fn text(t: impl Text) -> String {
            let mut s = String::new();
            t.put(&mut s).unwrap();
            s
        }
        for v in [0i64, 7, 9, 10, 99, 100, -1, -10, 65535, i64::MAX, i64::MIN] {
            assert_eq!(text(v), v.to_string());
            assert_eq!(Op::I(v).to_string(), v.to_string());
        }
        for v in [0u32, 1, 31, 1000, u32::MAX] {
            assert_eq!(text(v), v.to_string());
        }
        for v in [
            0.0f32,
            -1.5,
            f32::MIN_POSITIVE,
            f32::NAN,
            f32::INFINITY,
            1e-45,
        ] {
            assert_eq!(Op::F(v).to_string(), format!("0f{:08X}", v.to_bits()));
        }
        for v in [
            0.0f64,
            -1.5,
            f64::MIN_POSITIVE,
            f64::NAN,
            f64::NEG_INFINITY,
            5e-324,
        ] {
            assert_eq!(Op::D(v).to_string(), format!("0d{:016X}", v.to_bits()));
        }
        let r = Reg {
            ty: Ty::F64,
            id: 1234,
        };
        assert_eq!(r.to_string(), "%fd1234");
    }

    #[test]
    fn float_immediates_are_exact_bit_patterns() {
        assert_eq!(Op::from(0.1f32).to_string(), "0f3DCCCCCD");
        assert_eq!(Op::from(-0.0f32).to_string(), "0f80000000");
        assert_eq!(Op::from(1.0f64).to_string(), "0d3FF0000000000000");
    }
}
