"""onnxruntime's quantized contrib ops (domain com.microsoft, written by its QOperator quantizer)
through the drop-in script, with onnxruntime and with Quorum: the same levels, or one level apart
where a value lies at the edge between two levels (onnxruntime computes the formulas in f32,
Quorum in f64: `core/src/ops/quantize/contrib.rs`), and such edges are rare."""
import pathlib
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import pytest

SCRIPT = pathlib.Path(__file__).with_name("dropin.py")
MS = "com.microsoft"


def scalar(name, value, dtype):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def model(node, inputs, extra, initializers, out_type, path):
    """One contrib node over uint8 graph inputs `inputs` (name, shape) and initializers."""
    graph = helper.make_graph(
        [node],
        "contrib",
        [helper.make_tensor_value_info(n, TensorProto.UINT8, s) for n, s in inputs] + extra,
        [helper.make_tensor_value_info("y", out_type, None)],
        initializers,
    )
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    )
    m.ir_version = 8
    onnx.save(m, str(path))


def q(name, scale, zero):
    return [scalar(f"{name}_s", scale, np.float32), scalar(f"{name}_z", zero, np.uint8)]


def cases():
    """(name, node, data inputs, initializers, output type)."""
    add_like = lambda op: (  # noqa: E731
        op,
        helper.make_node(op, ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["y"], domain=MS),
        [("a", [2, 3, 8, 8]), ("b", [2, 3, 1, 1])],
        q("a", 0.0213178, 131) + q("b", 0.0171523, 120) + q("c", 0.0517231 if op == "QLinearMul" else 0.0312311, 128),
        TensorProto.UINT8,
    )
    unary = lambda op, **attrs: (  # noqa: E731
        op,
        helper.make_node(op, ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, **attrs),
        [("x", [4, 64])],
        q("x", 0.0493817, 128) + q("y", 1.0 / 256 if op == "QLinearSigmoid" else 0.0412937, 0 if op == "QLinearSigmoid" else 100),
        TensorProto.UINT8,
    )
    yield add_like("QLinearAdd")
    yield add_like("QLinearMul")
    yield unary("QLinearSigmoid")
    yield unary("QLinearLeakyRelu", alpha=0.1)
    yield (
        "QLinearGlobalAveragePool",
        helper.make_node("QLinearGlobalAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, channels_last=0),
        [("x", [2, 16, 7, 7])],
        q("x", 0.0307713, 120) + q("y", 0.0113391, 125),
        TensorProto.UINT8,
    )
    yield (
        "QLinearConcat",
        helper.make_node("QLinearConcat", ["y_s", "y_z", "a", "a_s", "a_z", "b", "b_s", "b_z"], ["y"], domain=MS, axis=1),
        [("a", [1, 3, 5]), ("b", [1, 4, 5])],
        q("y", 0.0403397, 110) + q("a", 0.0217719, 128) + q("b", 0.0493201, 100),
        TensorProto.UINT8,
    )
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.integers(-127, 128, size=(24, 40)).astype(np.int8), "w")
    bias = numpy_helper.from_array(rng.integers(-3000, 3000, size=(24,)).astype(np.int32), "bias")
    for quantized in (True, False):
        ins = ["a", "a_s", "a_z", "w", "w_s", "w_z", "bias"] + (["y_s", "y_z"] if quantized else [])
        inits = q("a", 0.0201937, 130) + [w, scalar("w_s", 0.00617291, np.float32), scalar("w_z", 0, np.int8), bias]
        if quantized:
            inits += q("y", 0.0511173, 120)
        yield (
            f"QGemm{'' if quantized else '_f32'}",
            helper.make_node("QGemm", ins, ["y"], domain=MS, alpha=1.0, transA=0, transB=1),
            [("a", [6, 40])],
            inits,
            TensorProto.UINT8 if quantized else TensorProto.FLOAT,
        )


def run(module, path, out):
    subprocess.run([sys.executable, str(SCRIPT), module, str(path), str(out)], check=True)
    return dict(np.load(out, allow_pickle=True))


def within_a_level(ours, theirs):
    """(fine, how many differ): integer outputs at most one level apart; f32 ones within f32
    rounding of each other (1e-5 of the output's scale)."""
    if ours.dtype != theirs.dtype or ours.shape != theirs.shape:
        return False, -1
    if ours.dtype.kind == "f":
        scale = float(np.abs(theirs).max()) or 1.0
        off = np.abs(ours.astype(np.float64) - theirs) > 1e-5 * scale
        return not off.any(), int(off.sum())
    d = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
    return bool((d <= 1).all()), int((d > 0).sum())


@pytest.mark.parametrize("case", list(cases()), ids=lambda c: c[0])
def test_contrib_ops_match_onnxruntime(tmp_path, case):
    name, node, inputs, inits, out_type = case
    path = tmp_path / "model.onnx"
    model(node, inputs, [], inits, out_type, path)
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "inputs.npz", **{n: rng.integers(0, 256, size=s).astype(np.uint8) for n, s in inputs})
    theirs = run("onnxruntime", path, tmp_path / "ort.npz")["out_y"]
    ours = run("quorum", path, tmp_path / "quorum.npz")["out_y"]
    fine, differ = within_a_level(ours, theirs)
    assert fine, f"{name}: {differ} outputs differ"
    # Edges are rare: at most 2% of the outputs one level apart. (Scales of round decimals, 0.02
    # against 0.04, put many values within f32 rounding of an edge, where onnxruntime's f32 and
    # Quorum's f64 may round apart; the scales here are irregular, as calibration makes them.)
    assert differ <= 0.02 * theirs.size, f"{name}: {differ} of {theirs.size} one level apart"


def test_the_comparison_catches_two_levels_and_a_type():
    a = np.array([10, 20, 30], dtype=np.uint8)
    assert within_a_level(a, a) == (True, 0)
    assert within_a_level(a + np.array([0, 1, 0], dtype=np.uint8), a) == (True, 1)
    assert not within_a_level(a + np.array([0, 2, 0], dtype=np.uint8), a)[0]
    assert not within_a_level(a.astype(np.int8), a)[0]
