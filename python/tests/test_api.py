"""onnxruntime's API shapes, Quorum's extras (verification, placement, counters, compare), errors
as typed exceptions with one-line messages, and numpy in and out."""
import threading
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import quorum
from conftest import seeded_input

SQUEEZENET = "light/test_squeezenet/model.onnx"


def chain_model(tmp_path, op_types=("MatMul", "Relu", "Add", "Softmax")):
    """x [4, 64] -> MatMul W -> Relu -> Add b -> Softmax -> y, seeded weights."""
    rng = np.random.default_rng(1)
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 32], rng.standard_normal(64 * 32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [32], rng.standard_normal(32))
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "b"], ["a"], name="add"),
        helper.make_node("Softmax", ["a"], ["y"], name="softmax"),
    ]
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [w, b],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "chain.onnx"
    onnx.save(m, str(path))
    return path


def x64():
    return np.random.default_rng(7).standard_normal((4, 64)).astype(np.float32)


def test_inputs_outputs_and_types_read_as_onnxruntime_writes_them(corpus):
    import onnxruntime as ort

    for case in [SQUEEZENET, "node/test_string_concat/model.onnx", "node/test_and2d/model.onnx"]:
        path = str(corpus / case)
        ours, theirs = quorum.InferenceSession(path), ort.InferenceSession(path)
        for a, b in zip(ours.get_inputs() + ours.get_outputs(), theirs.get_inputs() + theirs.get_outputs()):
            assert (a.name, a.type, a.shape) == (b.name, b.type, b.shape)
        assert "NodeArg(name=" in repr(ours.get_inputs()[0])


def test_a_model_loads_from_bytes_and_runs_twice_the_same(corpus):
    data = (corpus / SQUEEZENET).read_bytes()
    s = quorum.InferenceSession(data)
    x = seeded_input(s.get_inputs()[0], 5)
    x_before = x.copy()
    (y1,) = s.run(None, {s.get_inputs()[0].name: x})
    (y2,) = s.run([s.get_outputs()[0].name], {s.get_inputs()[0].name: x})
    assert np.array_equal(y1, y2)
    np.testing.assert_array_equal(x, x_before)  # the input is not written
    # The output is numpy's, writable, and owns no copy of its own: the runtime's array moved in.
    assert y1.flags.writeable and y1.base is not None
    y1[...] = 0
    (y3,) = s.run(None, {s.get_inputs()[0].name: x})
    assert np.array_equal(y3, y2)


def test_errors_are_typed_one_line_and_leave_the_session_usable(corpus, tmp_path):
    s = quorum.InferenceSession(str(chain_model(tmp_path)))
    cases = [
        ({"nope": x64()}, quorum.InvalidArgument, "no such input"),
        ({"x": x64().astype(np.float64)}, quorum.InvalidArgument, "float64"),
        ({"x": np.ones((3, 64), np.float32)}, quorum.QuorumError, "x"),
        ({"x": np.array([object()])}, quorum.InvalidArgument, "non-strings"),
    ]
    for feed, kind, text in cases:
        with pytest.raises(kind) as e:
            s.run(None, feed)
        assert text in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(quorum.InvalidArgument, match="no such output"):
        s.run(["y2"], {"x": x64()})
    assert s.run(None, {"x": x64()})[0].shape == (4, 32)
    with pytest.raises(quorum.NoSuchFile):
        quorum.InferenceSession(str(tmp_path / "missing.onnx"))
    with pytest.raises(quorum.InvalidGraph):
        quorum.InferenceSession(b"\x08\x07 this is no model \xff\xff")
    with pytest.raises(ValueError, match="unknown provider"):
        quorum.InferenceSession(str(chain_model(tmp_path)), providers=["TensorrtExecutionProvider"])
    assert issubclass(quorum.VerificationFailed, quorum.QuorumError)
    assert issubclass(quorum.QuorumError, RuntimeError)


def test_providers_map_to_ours_and_an_unavailable_one_is_left_out_with_a_warning(tmp_path):
    path = str(chain_model(tmp_path))
    available = quorum.get_available_providers()
    assert available[-1] == "CPUExecutionProvider"
    assert quorum.get_device() in ("CPU", "GPU")
    s = quorum.InferenceSession(path, providers=[("sim", {}), "CPUExecutionProvider"])
    assert s.get_providers() == ["QuorumSimExecutionProvider", "CPUExecutionProvider"]
    assert {p["provider"] for p in s.placement()} >= {"sim"}
    if "CUDAExecutionProvider" not in available:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            s = quorum.InferenceSession(path, providers=["CUDAExecutionProvider"])
        assert s.get_providers() == ["CPUExecutionProvider"]
        assert any("CUDAExecutionProvider" in str(x.message) for x in w)


def test_strict_verification_counts_checks_and_a_broken_kernel_fails_the_run(tmp_path, monkeypatch):
    path = str(chain_model(tmp_path))
    so = quorum.SessionOptions()
    so.verify = "strict"
    monkeypatch.delenv("QUORUM_SIM_BREAK", raising=False)
    monkeypatch.delenv("QUORUM_VERIFY", raising=False)
    s = quorum.InferenceSession(path, so, providers=["sim"])
    (y,) = s.run(None, {"x": x64()})
    (want,) = quorum.InferenceSession(path).run(None, {"x": x64()})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    v = s.verification()
    assert sum(o["checked"] for o in v.values()) >= 3 and all(o["mismatched"] == 0 for o in v.values())
    assert s.counters()["verify_checks"] >= 3
    # The broken variant: the simulated MatMul made wrong on purpose (0.8% on one element).
    monkeypatch.setenv("QUORUM_SIM_BREAK", "MatMul")
    broken = quorum.InferenceSession(path, so, providers=["sim"])
    with pytest.raises(quorum.VerificationFailed, match="mm"):
        broken.run(None, {"x": x64()})


def test_compare_names_the_broken_node(tmp_path, monkeypatch):
    path = str(chain_model(tmp_path))
    monkeypatch.delenv("QUORUM_SIM_BREAK", raising=False)
    clean = quorum.compare(path, {"x": x64()}, a="sim", b="cpu")
    assert [n["node"] for n in clean] == ["mm", "relu", "add", "softmax"]
    assert all(n["verdict"] in ("identical", "agrees") for n in clean)
    monkeypatch.setenv("QUORUM_SIM_BREAK", "Relu")
    broken = quorum.compare(path, {"x": x64()}, a="sim", b="cpu")
    first = next(n for n in broken if n["verdict"] == "diverges")
    assert first["node"] == "relu" and "wrong on its own inputs" in first["detail"]


def test_every_numpy_dtype_goes_through_identity(tmp_path):
    types = {
        np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16,
        np.int8: TensorProto.INT8, np.int16: TensorProto.INT16, np.int32: TensorProto.INT32,
        np.int64: TensorProto.INT64, np.uint8: TensorProto.UINT8, np.uint16: TensorProto.UINT16,
        np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64, np.bool_: TensorProto.BOOL,
    }
    rng = np.random.default_rng(11)
    for dt, code in types.items():
        g = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])], "id",
            [helper.make_tensor_value_info("x", code, [2, 3])],
            [helper.make_tensor_value_info("y", code, [2, 3])],
        )
        path = tmp_path / f"id_{code}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        x = (rng.standard_normal((2, 3)) * 50).astype(dt)
        if dt is np.bool_:
            x = rng.standard_normal((2, 3)) > 0
        # A view with strides of its own (a transposed slice) is taken as its values.
        (y,) = quorum.InferenceSession(str(path)).run(None, {"x": np.ascontiguousarray(x.T).T})
        assert y.dtype == x.dtype and np.array_equal(y, x), dt
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "id",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [2])],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "s.onnx"))
    s = quorum.InferenceSession(str(tmp_path / "s.onnx"))
    for given in (np.array(["grüße", ""]), np.array(["a", "bc"], dtype=object), ["x", "yz"]):
        (y,) = s.run(None, {"x": given})
        assert y.dtype == object and list(y) == [str(v) for v in given]


def test_runs_from_several_threads_at_once_agree(corpus):
    s = quorum.InferenceSession(str(corpus / SQUEEZENET))
    name = s.get_inputs()[0].name
    xs = [seeded_input(s.get_inputs()[0], k) for k in range(4)]
    want = [s.run(None, {name: x})[0] for x in xs]
    got = [None] * 4

    def work(k):
        got[k] = s.run(None, {name: xs[k]})[0]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


def test_session_options_map_to_ours(tmp_path):
    so = quorum.SessionOptions()
    so.graph_optimization_level = quorum.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_free_dimension_override_by_name("N", 3)
    assert so.dims == {"N": 3}
    so.verify = "sometimes"
    with pytest.raises(ValueError, match="verify"):
        quorum.InferenceSession(str(chain_model(tmp_path)), so)
    so.verify = "sample=8:2"
    so.graph_capture = "sideways"
    with pytest.raises(ValueError, match="graph_capture"):
        quorum.InferenceSession(str(chain_model(tmp_path)), so)
    so.graph_capture = "off"
    so.precision = "fp8"
    with pytest.raises(ValueError, match="precision"):
        quorum.InferenceSession(str(chain_model(tmp_path)), so)
    so.precision = "tf32"
    s = quorum.InferenceSession(str(chain_model(tmp_path)), so, providers=["sim"])
    assert s.run(None, {"x": x64()}, quorum.RunOptions())[0].shape == (4, 32)


def test_precision_f16_converts_the_model_and_keeps_its_interface(tmp_path):
    path = str(chain_model(tmp_path))
    (want,) = quorum.InferenceSession(path).run(None, {"x": x64()})
    so = quorum.SessionOptions()
    so.precision = "f16"
    (got,) = quorum.InferenceSession(path, so).run(None, {"x": x64()})
    # The interface stays f32; the values are the f16 model's: near the f32 ones, not equal.
    assert got.dtype == np.float32
    d = np.abs(got - want).max() / np.abs(want).max()
    assert 0 < d < 2e-2, d
    # Every f32 op kept: nothing left to convert, the f32 result bit for bit.
    so.keep_f32 = ["MatMul", "Relu", "Add", "Softmax"]
    (same,) = quorum.InferenceSession(path, so).run(None, {"x": x64()})
    assert np.array_equal(same, want)
