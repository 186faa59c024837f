//! `quorum run` writes every output: `.npy` where numpy has a dtype, a TensorProto `.pb` where it
//! has none (or for all with `--format pb`), SequenceProto / OptionalProto `.pb` for sequences and
//! optionals; what it writes reads back with the loader bit for bit. An output it cannot write is an
//! I/O error (exit 5) naming the output. A model of a newer opset than Quorum knows is refused.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use ndarray::{ArrayD, IxDyn};
use prost::Message;
use quorum::inputs::Rng;
use quorum::ir::ValueType;
use quorum::proto;
use quorum::{DType, Tensor, Value};

fn quorum() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorum"));
    c.env_remove("RUST_BACKTRACE")
        .env_remove(quorum::opsets::ALLOW_NEWER_ENV);
    c
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quorum-outputs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every dtype a `Tensor` holds (complex has no representation here).
const DTYPES: &[DType] = &[
    DType::F32,
    DType::U8,
    DType::I8,
    DType::U16,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::Str,
    DType::Bool,
    DType::F16,
    DType::F64,
    DType::U32,
    DType::U64,
    DType::BF16,
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::U4,
    DType::I4,
    DType::F4E2M1,
    DType::F8E8M0,
    DType::U2,
    DType::I2,
    DType::F6E2M3,
    DType::F6E3M2,
];

/// Seeded random contents of `dtype` over [3, 5] (7 elements would leave a half-filled byte for
/// the 4-bit formats; 15 does): random bit patterns for floats (NaN payloads included), the full
/// range for integers, sign-extended for int4/int2.
fn random_tensor(dtype: DType, rng: &mut Rng) -> Tensor {
    let shape = IxDyn(&[3, 5]);
    let mut bits = || rng.next_u64();
    macro_rules! arr {
        ($f:expr) => {
            ArrayD::from_shape_vec(shape, (0..15).map(|_| $f).collect()).unwrap()
        };
    }
    use half::{bf16, f16};
    match dtype {
        DType::F32 => Tensor::F32(arr!(f32::from_bits(bits() as u32))),
        DType::F64 => Tensor::F64(arr!(f64::from_bits(bits()))),
        DType::F16 => Tensor::F16(arr!(f16::from_bits(bits() as u16))),
        DType::BF16 => Tensor::BF16(arr!(bf16::from_bits(bits() as u16))),
        DType::I8 => Tensor::I8(arr!(bits() as i8)),
        DType::I16 => Tensor::I16(arr!(bits() as i16)),
        DType::I32 => Tensor::I32(arr!(bits() as i32)),
        DType::I64 => Tensor::I64(arr!(bits() as i64)),
        DType::U8 => Tensor::U8(arr!(bits() as u8)),
        DType::U16 => Tensor::U16(arr!(bits() as u16)),
        DType::U32 => Tensor::U32(arr!(bits() as u32)),
        DType::U64 => Tensor::U64(arr!(bits())),
        DType::Bool => Tensor::Bool(arr!(bits() & 1 == 1)),
        DType::Str => Tensor::Str(arr!(format!("s{}é✓", bits() % 1000))),
        DType::I4 => Tensor::Packed(dtype, arr!(((bits() % 16) as i8 - 8) as u8)),
        DType::I2 => Tensor::Packed(dtype, arr!(((bits() % 4) as i8 - 2) as u8)),
        DType::U4 | DType::F4E2M1 => Tensor::Packed(dtype, arr!((bits() % 16) as u8)),
        DType::U2 => Tensor::Packed(dtype, arr!((bits() % 4) as u8)),
        DType::F6E2M3 | DType::F6E3M2 => Tensor::Packed(dtype, arr!((bits() % 64) as u8)),
        d => Tensor::Packed(d, arr!(bits() as u8)),
    }
}

/// Each element's bits (floats compared bit for bit, so NaN payloads count).
fn bits(t: &Tensor) -> Vec<String> {
    match t {
        Tensor::F32(a) => a.iter().map(|x| x.to_bits().to_string()).collect(),
        Tensor::F64(a) => a.iter().map(|x| x.to_bits().to_string()).collect(),
        Tensor::F16(a) => a.iter().map(|x| x.to_bits().to_string()).collect(),
        Tensor::BF16(a) => a.iter().map(|x| x.to_bits().to_string()).collect(),
        Tensor::Str(a) => a.iter().cloned().collect(),
        Tensor::Packed(_, a) => a.iter().map(|x| x.to_string()).collect(),
        t => t
            .to_i64_vec()
            .unwrap()
            .iter()
            .map(|x| x.to_string())
            .collect(),
    }
}

fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype() && a.shape() == b.shape() && bits(a) == bits(b)
}

/// One Identity per dtype: input `in_<dtype>` → output `out/<dtype>` (a name that needs escaping).
fn identity_model(dir: &Path) -> PathBuf {
    let nodes = DTYPES
        .iter()
        .map(|d| node("Identity", &[&format!("in_{d}")], &[&format!("out/{d}")]))
        .collect();
    let io = |prefix: &str| {
        DTYPES
            .iter()
            .map(|d| value_info(&format!("{prefix}{d}"), tensor_type(d.onnx(), &[3, 5])))
            .collect()
    };
    let m = model(nodes, io("in_"), io("out/"), vec![], 21);
    let path = dir.join("identity.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    path
}

/// Reads back what `quorum run` wrote for output `out/<d>`: `.npy` with the npy reader, `.pb` with
/// the loader; returns the value and the extension.
fn read_back(dir: &Path, d: DType) -> (Tensor, &'static str) {
    let stem = dir.join(format!("out_{d}"));
    if let Ok(b) = std::fs::read(stem.with_extension("npy")) {
        return (quorum::npy::read(&b).unwrap(), "npy");
    }
    let b = std::fs::read(stem.with_extension("pb"))
        .unwrap_or_else(|e| panic!("no output file for {d}: {e}"));
    let t = quorum::loader::tensor_from_pb(&b, &Default::default()).unwrap();
    assert_eq!(
        proto::TensorProto::decode(&b[..]).unwrap().name(),
        format!("out/{d}")
    );
    (t, "pb")
}

fn npy_has(d: DType) -> bool {
    !(matches!(d, DType::BF16)
        || d.is_narrow_float()
        || matches!(d, DType::U4 | DType::I4 | DType::U2 | DType::I2))
}

#[test]
fn run_writes_every_dtype_and_it_reads_back_bit_for_bit() {
    let dir = temp_dir("dtypes");
    let model = identity_model(&dir);
    let mut rng = Rng::new(2026);
    let mut args = Vec::new();
    let mut sent = Vec::new();
    for &d in DTYPES {
        let t = random_tensor(d, &mut rng);
        let file = dir.join(format!("in_{d}.pb"));
        let p = quorum::pb::tensor_proto(&format!("in_{d}"), &t);
        std::fs::write(&file, p.encode_to_vec()).unwrap();
        args.push("--input".to_string());
        args.push(format!("in_{d}={}", file.display()));
        sent.push((d, t));
    }
    for (format, outs) in [("npy", dir.join("npy")), ("pb", dir.join("pb"))] {
        let stdout = ok(&quorum()
            .arg("run")
            .arg(&model)
            .args(&args)
            .args(["--format", format, "--output-dir"])
            .arg(&outs)
            .output()
            .unwrap());
        for (d, t) in &sent {
            let (back, ext) = read_back(&outs, *d);
            assert!(
                same_bits(&back, t),
                "{format} {d}: wrote {t:?}, read back {back:?}"
            );
            let want = if format == "npy" && npy_has(*d) {
                "npy"
            } else {
                "pb"
            };
            assert_eq!(ext, want, "{format} {d}");
            if ext == "pb" && format == "npy" {
                assert!(
                    stdout.contains(&format!("numpy has no dtype for {d}")),
                    "{d}: {stdout}"
                );
            }
        }
    }
}

#[test]
fn narrow_formats_are_stored_as_onnx_packs_them() {
    // Independent of the reader: the bytes ONNX specifies for int4 [-1, 7, -8] (low nibble first)
    // and uint2 [1, 2, 3, 0, 1] (2 bits each, first in the low bits).
    let i4 = Tensor::Packed(
        DType::I4,
        ArrayD::from_shape_vec(IxDyn(&[3]), vec![0xff, 7, 0xf8]).unwrap(),
    );
    assert_eq!(quorum::pb::tensor_proto("x", &i4).raw_data(), [0x7f, 0x08]);
    let u2 = Tensor::Packed(
        DType::U2,
        ArrayD::from_shape_vec(IxDyn(&[5]), vec![1, 2, 3, 0, 1]).unwrap(),
    );
    assert_eq!(quorum::pb::tensor_proto("x", &u2).raw_data(), [0x39, 0x01]);
    // The comparison the round trip relies on catches a wrong packing: nibbles swapped read back
    // as other values.
    let mut swapped = quorum::pb::tensor_proto("x", &i4);
    swapped.raw_data = Some(vec![0xf7, 0x80]);
    let back =
        quorum::loader::tensor_from_pb(&swapped.encode_to_vec(), &Default::default()).unwrap();
    assert!(!same_bits(&back, &i4));
}

fn type_of(v: proto::type_proto::Value) -> proto::TypeProto {
    proto::TypeProto {
        value: Some(v),
        denotation: None,
    }
}

fn seq_of_f32() -> proto::TypeProto {
    type_of(proto::type_proto::Value::SequenceType(Box::new(
        proto::type_proto::Sequence {
            elem_type: Some(Box::new(tensor_type(1, &[2]))),
        },
    )))
}

fn optional_of(t: proto::TypeProto) -> proto::TypeProto {
    type_of(proto::type_proto::Value::OptionalType(Box::new(
        proto::type_proto::Optional {
            elem_type: Some(Box::new(t)),
        },
    )))
}

#[test]
fn sequences_and_optionals_are_written_as_their_protos() {
    let dir = temp_dir("containers");
    let mut empty = node("Optional", &[], &["none"]);
    empty.attribute.push(proto::AttributeProto {
        name: Some("type".into()),
        r#type: Some(proto::attribute_proto::AttributeType::TypeProto as i32),
        tp: Some(tensor_type(1, &[2])),
        ..Default::default()
    });
    let m = model(
        vec![
            node("SequenceConstruct", &["a", "b"], &["seq"]),
            node("Optional", &["a"], &["some"]),
            empty,
        ],
        vec![
            value_info("a", tensor_type(1, &[2])),
            value_info("b", tensor_type(1, &[2])),
        ],
        vec![
            value_info("seq", seq_of_f32()),
            value_info("some", optional_of(tensor_type(1, &[2]))),
            value_info("none", optional_of(tensor_type(1, &[2]))),
        ],
        vec![],
        18,
    );
    let path = dir.join("m.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    let mut rng = Rng::new(7);
    let mut t =
        || Tensor::from_f32(&[2], vec![rng.uniform() as f32, rng.uniform() as f32]).unwrap();
    let (a, b) = (t(), t());
    for (name, v) in [("a", &a), ("b", &b)] {
        std::fs::write(
            dir.join(format!("{name}.npy")),
            quorum::npy::write(v).unwrap(),
        )
        .unwrap();
    }
    let stdout = ok(&quorum()
        .arg("run")
        .arg(&path)
        .arg("--input")
        .arg(format!("a={}", dir.join("a.npy").display()))
        .arg("--input")
        .arg(format!("b={}", dir.join("b.npy").display()))
        .arg("--output-dir")
        .arg(dir.join("out"))
        .output()
        .unwrap());
    assert!(!stdout.contains("not written"), "{stdout}");
    let read = |name: &str, ty: proto::TypeProto| {
        let b = std::fs::read(dir.join(format!("out/{name}.pb"))).unwrap();
        quorum::loader::value_from_pb(
            &b,
            &quorum::loader::value_type(Some(&ty)),
            &Default::default(),
        )
        .unwrap()
    };
    assert_eq!(
        read("seq", seq_of_f32()),
        Value::Sequence {
            dtype: Some(DType::F32),
            items: vec![a.clone(), b.clone()]
        }
    );
    assert_eq!(
        read("some", optional_of(tensor_type(1, &[2]))),
        Value::Optional(Some(Box::new(Value::Tensor(a.clone()))))
    );
    assert_eq!(
        read("none", optional_of(tensor_type(1, &[2]))),
        Value::Optional(None)
    );
    let none =
        proto::OptionalProto::decode(&std::fs::read(dir.join("out/none.pb")).unwrap()[..]).unwrap();
    assert_eq!(
        none.elem_type,
        Some(1),
        "an empty optional of a tensor says so"
    );
}

#[test]
fn an_empty_sequence_reads_back_with_its_declared_dtype() {
    let ty = ValueType::Sequence(Box::new(ValueType::Tensor {
        dtype: Some(DType::I64),
        shape: None,
    }));
    let v = Value::Sequence {
        dtype: Some(DType::I64),
        items: vec![],
    };
    let b = quorum::pb::encode_value("s", &v, Some(&ty));
    assert_eq!(
        quorum::loader::value_from_pb(&b, &ty, &Default::default()).unwrap(),
        v
    );
}

#[test]
fn an_output_that_cannot_be_written_is_an_io_error_naming_it() {
    let dir = temp_dir("io");
    let m = model(
        vec![node("Neg", &["x"], &["out/y:0"])],
        vec![value_info("x", tensor_type(1, &[4]))],
        vec![value_info("out/y:0", tensor_type(1, &[4]))],
        vec![],
        13,
    );
    let path = dir.join("m.onnx");
    std::fs::write(&path, bytes(&m)).unwrap();
    // A folder where the output file should go: the write fails whoever runs the test.
    std::fs::create_dir_all(dir.join("out/out_y_0.npy")).unwrap();
    let out = quorum()
        .arg("run")
        .arg(&path)
        .arg("--output-dir")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("output 'out/y:0'"), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{stderr}"
    );
    // The same run into a writable folder succeeds.
    ok(&quorum()
        .arg("run")
        .arg(&path)
        .arg("--output-dir")
        .arg(dir.join("fine"))
        .output()
        .unwrap());
}

fn opset_model(dir: &Path, opset: i64) -> PathBuf {
    let m = model(
        vec![node("Relu", &["x"], &["y"])],
        vec![value_info("x", tensor_type(1, &[3]))],
        vec![value_info("y", tensor_type(1, &[3]))],
        vec![],
        opset,
    );
    let path = dir.join(format!("opset{opset}.onnx"));
    std::fs::write(&path, bytes(&m)).unwrap();
    path
}

#[test]
fn a_newer_opset_is_refused_naming_the_version_quorum_knows() {
    let dir = temp_dir("opset");
    let latest = quorum::opsets::latest("").unwrap();
    let newer = opset_model(&dir, 999);
    let out = quorum()
        .arg("run")
        .arg(&newer)
        .arg("--output-dir")
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("ai.onnx opset 999") && stderr.contains(&format!("up to opset {latest}")),
        "{stderr}"
    );
    // Allowed, it runs as the latest known version and says so.
    let out = quorum()
        .env(quorum::opsets::ALLOW_NEWER_ENV, "1")
        .arg("run")
        .arg(&newer)
        .arg("--output-dir")
        .arg(&dir)
        .output()
        .unwrap();
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: the model imports ai.onnx opset 999")
            && stderr.contains(&format!("run as opset {latest}")),
        "{stderr}"
    );
    // The latest known version itself runs without a word.
    let out = quorum()
        .arg("run")
        .arg(opset_model(&dir, latest))
        .arg("--output-dir")
        .arg(&dir)
        .output()
        .unwrap();
    ok(&out);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
}
