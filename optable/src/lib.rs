//! The op table: one row per op of Quorum's accelerated op set, the one list that every backend,
//! oracle and suite reads instead of keeping its own.
//!
//! A [`Row`] says, for one ONNX op (default domain):
//! - `family`: the kernel family it belongs to ([`Family`]); each backend matches families
//!   exhaustively, so a new family is a compile error in every backend until it is handled there.
//! - `class`: how far an engine's answer may be from the oracles' ([`Class`]), the input of the
//!   arbitration's bound (`quorum_oracle::arbitrate`).
//! - `opsets`: the ONNX schema versions of the op (its `since_version`s), a fact of the spec.
//! - `nan`: what a NaN input becomes ([`NanRule`]), checked against both oracles.
//! - `in_place`: which inputs the CPU kernel may write its output over ([`InPlace`]), checked against
//!   the CPU registry's in-place forms.
//! - `dtypes`: the element types ONNX allows for the op's data operand ([`Types`]; the tensor its
//!   output is made from), a fact of the spec; the property suite's generators must stay inside it.
//! - `devices`: which device backends claim the op ([`Devices`]); a row with no device is host-only
//!   (run by the CPU, judged by both oracles).
//!
//! Who reads it: the CUDA and wgpu claims (`quorum::cuda::ops`, `quorum::wgpu::ops`) dispatch on
//! `family` and list their ops from `devices`; both oracles' coverage tests take every row; the
//! arbitration takes `class`; the property suite (`fuzz`) has a generator and a property test per
//! row; the device suite's elementwise cases are the table's elementwise rows. Tests in those crates
//! fail when the table and what a backend or oracle does drift apart.
//!
//! This crate has no dependencies, so that any crate may read it without an import cycle.
#![forbid(unsafe_code)]

mod table;

pub use table::ROWS;

/// A family of kernels: ops that share a code generator in each backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// Functions of one value (math, activations, Clip, logical Not, IsNaN, IsInf).
    Unary,
    /// Conversions between element types (Cast, CastLike).
    Cast,
    /// Broadcast binary and variadic elementwise ops: arithmetic, comparisons, logic, Where, BitShift.
    Binary,
    /// MatMul, Gemm and Einsum.
    Matrix,
    /// Conv and ConvTranspose.
    Convolution,
    /// Windowed and global pools.
    Pooling,
    /// Batch, instance, layer and group normalisation, LRN.
    Normalization,
    /// Softmax, LogSoftmax, Hardmax.
    Softmax,
    /// Reductions over axes, ArgMax and ArgMin.
    Reduction,
    /// Rearrangements over strided copies: Transpose, Concat, Split, Slice, Gather, Expand, Pad, Tile,
    /// DepthToSpace, SpaceToDepth.
    Movement,
    /// Element-indexed reads and writes, index-built tensors and in-order scans: GatherElements,
    /// ScatterElements, ScatterND, OneHot, Trilu, Range, CumSum.
    Index,
    /// Resize (nearest, linear, cubic).
    Resize,
    /// Ops that return their input's storage under another shape (Reshape, Flatten, Squeeze,
    /// Unsqueeze, Identity, inference-mode Dropout).
    View,
    /// Tensors filled from an attribute (ConstantOfShape).
    Fill,
    /// LSTM and GRU: LSTM on CUDA, GRU host-only (both judged by the oracles).
    Recurrent,
    /// A tensor's shape and size (host-only: shape arithmetic never goes to a device).
    Metadata,
}

impl Family {
    /// Every family, in table order.
    pub const ALL: [Family; 16] = [
        Family::Unary,
        Family::Cast,
        Family::Binary,
        Family::Matrix,
        Family::Convolution,
        Family::Pooling,
        Family::Normalization,
        Family::Softmax,
        Family::Reduction,
        Family::Movement,
        Family::Index,
        Family::Resize,
        Family::View,
        Family::Fill,
        Family::Recurrent,
        Family::Metadata,
    ];

    /// Whether the family's ops are elementwise (an output element depends on the input elements at
    /// its own broadcast position only).
    pub fn is_elementwise(self) -> bool {
        matches!(self, Family::Unary | Family::Cast | Family::Binary)
    }
}

/// What an op's result is, for bounding an engine's error against the oracles (the arbitration in
/// `quorum_oracle::arbitrate` turns a class into a bound).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Class {
    /// A selection or rearrangement of input values, a comparison, a logical or integer result, a
    /// count or an index: determined exactly.
    Exact,
    /// One conversion into the output type: the oracles' answer rounded once, ties to even.
    Rounded,
    /// A function of one value computed in the promised type, within `ulps` units in the last place.
    Math { ulps: u32 },
    /// Sums and products, bounded by the magnitude of their terms.
    Sum(Accumulation),
    /// The class depends on a string attribute.
    ByAttribute(&'static AttrClass),
}

/// The kind of sum behind a [`Class::Sum`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accumulation {
    /// A handful of roundings per result (elementwise arithmetic, variadic Sum and Mean).
    Elementwise,
    /// Long sums: reductions, dot products, convolutions, normalisations, softmax, interpolation.
    Reduction,
    /// Updates applied one by one to the output in its element type, duplicates in order (Scatter's
    /// `add` and `mul`): a few roundings per result, each in the element type, not f32.
    Sequential,
}

/// A class chosen by the value of one string attribute.
#[derive(Debug, PartialEq)]
pub struct AttrClass {
    pub attr: &'static str,
    /// The attribute's value when the node does not set it (the spec's default).
    pub default: &'static str,
    /// The class for each listed value.
    pub cases: &'static [(&'static str, Class)],
    /// The class for every other value.
    pub otherwise: &'static Class,
}

impl Class {
    /// The class of a node, where `attr` reads the node's string attributes (`None` when unset): a
    /// [`Class::ByAttribute`] is resolved to the class its value selects; every other class is itself.
    pub fn resolve(self, attr: impl FnOnce(&str) -> Option<String>) -> Class {
        match self {
            Class::ByAttribute(a) => {
                let value = attr(a.attr).unwrap_or_else(|| a.default.to_string());
                a.cases
                    .iter()
                    .find(|(v, _)| *v == value)
                    .map(|(_, c)| *c)
                    .unwrap_or(*a.otherwise)
            }
            c => c,
        }
    }
}

/// What a NaN among an op's float inputs becomes in its outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NanRule {
    /// Every output element computed from a NaN input element is NaN (arithmetic, math functions,
    /// Max/Min, sums, pools, normalisations).
    Propagates,
    /// Values are moved or selected unchanged: a NaN arrives where its element goes.
    Carries,
    /// The output decides something about the values (a comparison, a test, an index): a NaN
    /// gives a defined bool or index, never NaN.
    Decides,
    /// A NaN input gives a defined float value (ThresholdedRelu: `x > alpha` is false, so 0).
    Replaces,
    /// The output does not depend on float values (logic, shifts, shapes, fills, index ranges).
    Ignores,
}

/// Which inputs the CPU kernel may write its output over when they die at the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InPlace {
    /// No in-place form.
    None,
    /// The first input only (a unary op whose other inputs are parameters).
    First,
    /// Either of the first two operands (binary arithmetic).
    Either,
}

impl InPlace {
    /// How many leading inputs the output may be written over.
    pub fn inputs(self) -> usize {
        match self {
            InPlace::None => 0,
            InPlace::First => 1,
            InPlace::Either => 2,
        }
    }
}

/// The element types the table speaks of: ONNX's numeric and bool tensor types that Quorum's
/// oracles evaluate (the 8-bit and 4-bit floats, complex and string types are not listed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    F16,
    Bf16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl Ty {
    /// Every type, in the order of [`Types`]' bits.
    pub const ALL: [Ty; 13] = [
        Ty::F16,
        Ty::Bf16,
        Ty::F32,
        Ty::F64,
        Ty::I8,
        Ty::I16,
        Ty::I32,
        Ty::I64,
        Ty::U8,
        Ty::U16,
        Ty::U32,
        Ty::U64,
        Ty::Bool,
    ];

    /// The ONNX name of the type (`float16`, `bfloat16`, `float`, ..., `bool`).
    pub fn onnx_name(self) -> &'static str {
        match self {
            Ty::F16 => "float16",
            Ty::Bf16 => "bfloat16",
            Ty::F32 => "float",
            Ty::F64 => "double",
            Ty::I8 => "int8",
            Ty::I16 => "int16",
            Ty::I32 => "int32",
            Ty::I64 => "int64",
            Ty::U8 => "uint8",
            Ty::U16 => "uint16",
            Ty::U32 => "uint32",
            Ty::U64 => "uint64",
            Ty::Bool => "bool",
        }
    }
}

/// A set of element types.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Types(u16);

impl Types {
    pub const NONE: Types = Types(0);
    /// f16, bf16, f32, f64.
    pub const FLOATS: Types = Types::of(&[Ty::F16, Ty::Bf16, Ty::F32, Ty::F64]);
    /// Every type but bool.
    pub const NUMERIC: Types = Types((1 << 12) - 1);
    /// Every type.
    pub const ALL: Types = Types((1 << 13) - 1);

    /// The set of `tys`.
    pub const fn of(tys: &[Ty]) -> Types {
        let mut bits = 0u16;
        let mut i = 0;
        while i < tys.len() {
            bits |= 1 << tys[i] as u16;
            i += 1;
        }
        Types(bits)
    }

    pub const fn contains(self, t: Ty) -> bool {
        self.0 & (1 << t as u16) != 0
    }

    /// The types in the set, in [`Ty::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Ty> {
        Ty::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

impl std::fmt::Debug for Types {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// The rows CUDA claims and wgpu does not, with the reason (every other device row is claimed by
/// both).
pub const CUDA_ONLY: &[(&str, &str)] = &[
    (
        "LSTM",
        "a recurrent layer is one long chain of dependent steps, run as one kernel a layer that \
         keeps its state in shared memory between barriers: written for CUDA first, where the \
         zoo's LSTMs (Sequencer2d) needed it",
    ),
    (
        "QuantizeLinear",
        "the integer is decided by the f32 quotient x / scale, which must be correctly rounded; \
         WGSL's f32 division is allowed 2.5 ulp, and an exact division in integer code is not \
         written yet",
    ),
    (
        "DequantizeLinear",
        "it comes with QuantizeLinear: a QDQ model alternates the two, and one of them on the \
         device alone would only add copies",
    ),
    (
        "MatMulInteger",
        "WGSL has no 8-bit dot product the kernel could rest on, and the dynamic-quantization \
         pair is only worth a device when both halves are on it: written for CUDA (`dp4a`) first",
    ),
    (
        "ConvInteger",
        "it is MatMulInteger's product over gathered columns, and WGSL has no 8-bit dot product \
         to rest it on; written for CUDA (`dp4a`) first, as MatMulInteger was",
    ),
    (
        "QLinearMatMul",
        "MatMulInteger's product with a requantizing epilogue: it waits on the same 8-bit dot \
         product, and on an f64 multiply WGSL does not have",
    ),
    (
        "QLinearConv",
        "ConvInteger's product with a requantizing epilogue: it waits on the same 8-bit dot \
         product, and on an f64 multiply WGSL does not have",
    ),
    (
        "DynamicQuantizeLinear",
        "it comes with MatMulInteger (its outputs are MatMulInteger's inputs), and needs the \
         correctly rounded f32 division QuantizeLinear waits on in WGSL",
    ),
];

/// A device backend that claims ops from the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Cuda,
    Wgpu,
}

/// The device backends that claim an op (in at least one form; a kernel may still decline a dtype or
/// shape at run time, and the node then runs on the CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Devices(u8);

impl Devices {
    /// Host-only: no device claims the op.
    pub const NONE: Devices = Devices(0);
    pub const CUDA: Devices = Devices(1);
    pub const WGPU: Devices = Devices(2);
    /// Every device backend.
    pub const ALL: Devices = Devices(3);

    pub const fn contains(self, b: Backend) -> bool {
        let bit = match b {
            Backend::Cuda => 1,
            Backend::Wgpu => 2,
        };
        self.0 & bit != 0
    }
}

/// One op of the table (see the crate docs for the columns).
#[derive(Debug)]
pub struct Row {
    pub name: &'static str,
    pub family: Family,
    pub class: Class,
    /// The op's ONNX schema versions, ascending.
    pub opsets: &'static [u32],
    pub nan: NanRule,
    pub in_place: InPlace,
    pub dtypes: Types,
    pub devices: Devices,
}

impl Row {
    /// The schema version a node of opset `opset` follows (the newest `since_version` not above it),
    /// or `None` when the op did not exist yet.
    pub fn schema_version(&self, opset: u32) -> Option<u32> {
        self.opsets.iter().rev().copied().find(|&v| v <= opset)
    }

    /// The input whose element types `dtypes` lists: the tensor the output is made from (Where's
    /// `X`, OneHot's `values`, otherwise the first input); `None` for ConstantOfShape, whose
    /// `dtypes` are its output's.
    pub fn data_input(&self) -> Option<usize> {
        match self.name {
            "Where" => Some(1),
            "OneHot" => Some(2),
            "ConstantOfShape" => None,
            _ => Some(0),
        }
    }
}

/// The row of `op` (an op type of the default ONNX domain), if the table has it.
pub fn find(op: &str) -> Option<&'static Row> {
    ROWS.iter().find(|r| r.name == op)
}

/// The rows of one family, in table order.
pub fn rows_of(family: Family) -> impl Iterator<Item = &'static Row> {
    ROWS.iter().filter(move |r| r.family == family)
}

/// The op types `backend` claims, in table order.
pub fn device_ops(backend: Backend) -> impl Iterator<Item = &'static str> {
    ROWS.iter()
        .filter(move |r| r.devices.contains(backend))
        .map(|r| r.name)
}

/// What is wrong with a table, one line per fault (empty when it is well formed): a name twice,
/// opsets not strictly ascending, an attribute class without cases or nested, an in-place form on a
/// family that has none, a device on a host-only family, an empty type set.
pub fn faults(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        if rows[..i].iter().any(|o| o.name == r.name) {
            out.push(format!("{}: listed twice", r.name));
        }
        if r.opsets.is_empty() || r.opsets.windows(2).any(|w| w[0] >= w[1]) {
            out.push(format!(
                "{}: opsets {:?} are not strictly ascending",
                r.name, r.opsets
            ));
        }
        if let Class::ByAttribute(a) = r.class
            && (a.cases.is_empty()
                || matches!(a.otherwise, Class::ByAttribute(_))
                || a.cases
                    .iter()
                    .any(|(_, c)| matches!(c, Class::ByAttribute(_))))
        {
            out.push(format!(
                "{}: attribute class on '{}' is empty or nested",
                r.name, a.attr
            ));
        }
        let in_place_family = matches!(r.family, Family::Unary | Family::Binary | Family::Softmax);
        if r.in_place != InPlace::None && !in_place_family {
            out.push(format!(
                "{}: in-place form on the {:?} family",
                r.name, r.family
            ));
        }
        let host_only = r.family == Family::Metadata;
        if host_only && r.devices != Devices::NONE {
            out.push(format!(
                "{}: the {:?} family is host-only",
                r.name, r.family
            ));
        }
        // A recurrent layer is one long dependent chain: a device runs it as one kernel of its
        // own, written for CUDA only so far.
        if r.family == Family::Recurrent && r.devices.contains(Backend::Wgpu) {
            out.push(format!(
                "{}: the recurrent family has no wgpu kernels",
                r.name
            ));
        }
        if r.dtypes == Types::NONE {
            out.push(format!("{}: no element type", r.name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_well_formed() {
        assert_eq!(faults(ROWS), Vec::<String>::new());
    }

    #[test]
    fn faults_catch_a_broken_table() {
        let bad = [
            Row {
                name: "Abs",
                family: Family::Metadata,
                class: Class::Exact,
                opsets: &[6, 1],
                nan: NanRule::Propagates,
                in_place: InPlace::First,
                dtypes: Types::NONE,
                devices: Devices::ALL,
            },
            Row {
                name: "LSTM",
                family: Family::Recurrent,
                class: Class::Exact,
                opsets: &[1],
                nan: NanRule::Propagates,
                in_place: InPlace::None,
                dtypes: Types::FLOATS,
                devices: Devices::ALL,
            },
            Row {
                name: "Abs",
                family: Family::Unary,
                class: Class::ByAttribute(&AttrClass {
                    attr: "mode",
                    default: "x",
                    cases: &[],
                    otherwise: &Class::Exact,
                }),
                opsets: &[1],
                nan: NanRule::Propagates,
                in_place: InPlace::None,
                dtypes: Types::FLOATS,
                devices: Devices::ALL,
            },
        ];
        let f = faults(&bad);
        for want in [
            "listed twice",
            "not strictly ascending",
            "empty or nested",
            "in-place form",
            "host-only",
            "no element type",
            "no wgpu kernels",
        ] {
            assert!(f.iter().any(|l| l.contains(want)), "{want} not in {f:?}");
        }
    }

    #[test]
    fn every_family_has_rows_and_devices_claim_every_non_host_family() {
        for f in Family::ALL {
            let rows: Vec<&Row> = rows_of(f).collect();
            assert!(!rows.is_empty(), "{f:?}");
            for r in rows {
                match f {
                    Family::Metadata => assert_eq!(r.devices, Devices::NONE, "{}", r.name),
                    // LSTM has a CUDA kernel, GRU none yet.
                    Family::Recurrent => assert!(!r.devices.contains(Backend::Wgpu), "{}", r.name),
                    _ => assert_ne!(r.devices, Devices::NONE, "{}", r.name),
                }
            }
        }
        let host = ROWS.iter().filter(|r| r.devices == Devices::NONE).count();
        assert_eq!(device_ops(Backend::Cuda).count(), ROWS.len() - host);
        assert_eq!(
            device_ops(Backend::Wgpu).count(),
            ROWS.len() - host - CUDA_ONLY.len()
        );
        // Each row only CUDA claims has its reason, and no other row is CUDA's alone.
        for r in ROWS {
            let listed = CUDA_ONLY
                .iter()
                .any(|(n, why)| *n == r.name && !why.is_empty());
            assert_eq!(r.devices == Devices::CUDA, listed, "{}", r.name);
        }
    }

    #[test]
    fn attribute_classes_resolve_by_value_and_default() {
        let scatter = find("ScatterElements").unwrap().class;
        let none = |_: &str| None;
        assert_eq!(scatter.resolve(none), Class::Exact);
        let add = |a: &str| (a == "reduction").then(|| "add".to_string());
        assert_eq!(scatter.resolve(add), Class::Sum(Accumulation::Sequential));
        let resize = find("Resize").unwrap().class;
        assert_eq!(resize.resolve(none), Class::Exact);
        let cubic = |a: &str| (a == "mode").then(|| "cubic".to_string());
        assert_eq!(resize.resolve(cubic), Class::Sum(Accumulation::Reduction));
        assert_eq!(
            find("Exp").unwrap().class.resolve(none),
            Class::Math { ulps: 4 }
        );
    }

    #[test]
    fn schema_versions_follow_the_opset() {
        let clip = find("Clip").unwrap();
        assert_eq!(clip.schema_version(10), Some(6));
        assert_eq!(clip.schema_version(11), Some(11));
        assert_eq!(clip.schema_version(28), Some(13));
        assert_eq!(find("Gelu").unwrap().schema_version(19), None);
    }

    #[test]
    fn type_sets() {
        assert!(Types::FLOATS.contains(Ty::Bf16));
        assert!(!Types::FLOATS.contains(Ty::I32));
        assert!(Types::NUMERIC.contains(Ty::U64) && !Types::NUMERIC.contains(Ty::Bool));
        assert_eq!(Types::ALL.iter().count(), 13);
        assert_eq!(
            Types::of(&[Ty::Bool, Ty::F16]).iter().collect::<Vec<_>>(),
            vec![Ty::F16, Ty::Bool]
        );
        assert_eq!(find("Not").unwrap().dtypes, Types::of(&[Ty::Bool]));
    }
}
