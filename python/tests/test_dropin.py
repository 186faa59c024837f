"""The drop-in test: one script, run with `import onnxruntime as ort` and with `import quorum as
ort`, gives the same outputs on real models (the corpus's whole light models and node cases of
every kind of type), and the same input and output descriptions."""
import pathlib
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import pytest

SCRIPT = pathlib.Path(__file__).with_name("dropin.py")

# Whole models (CNNs of the ONNX model zoo, light weights) and node cases for the other dtypes:
# int64, bool, strings, float16, a sequence.
CASES = [
    "light/test_squeezenet",
    "light/test_shufflenet",
    "light/test_inception_v1",
    "light/test_densenet121",
    "node/test_argmax_default_axis_random",
    "node/test_and2d",
    "node/test_string_concat",
    "node/test_cast_FLOAT_to_FLOAT16",
    "node/test_conv_with_autopad_same",
    "node/test_lstm_with_initial_bias",
    "node/test_layer_normalization_4d_axis1",
    "node/test_softmax_axis_1",
    "node/test_einsum_batch_matmul",
]


def run(module: str, model: pathlib.Path, out: pathlib.Path) -> dict:
    subprocess.run([sys.executable, str(SCRIPT), module, str(model), str(out)], check=True)
    return dict(np.load(out, allow_pickle=True))


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype and shape; integers, booleans and strings equal; floats within a few f32
    rounding steps (the two runtimes' kernels sum in other orders): |a-b| <= 1e-5 + 1e-4|b|."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return bool(np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))
    return bool(np.array_equal(a, b))


@pytest.mark.parametrize("case", CASES)
def test_the_same_script_gives_the_same_outputs(corpus, tmp_path, case):
    src = corpus / case
    model = tmp_path / "model.onnx"
    model.write_bytes((src / "model.onnx").read_bytes())
    graph = onnx.load(str(src / "model.onnx")).graph
    inits = {i.name for i in graph.initializer}
    names = [i.name for i in graph.input if i.name not in inits]
    feeds = {
        n: numpy_helper.to_array(onnx.load_tensor(str(src / "test_data_set_0" / f"input_{k}.pb")))
        for k, n in enumerate(names)
    }
    np.savez(tmp_path / "inputs.npz", **feeds)
    ours = run("quorum", model, tmp_path / "quorum.npz")
    theirs = run("onnxruntime", model, tmp_path / "ort.npz")
    assert ours.keys() == theirs.keys()
    assert str(ours["meta"]) == str(theirs["meta"])
    for k in ours:
        if k != "meta":
            assert same(ours[k], theirs[k]), f"{case} {k}: {ours[k]!r} vs {theirs[k]!r}"


def test_the_comparison_catches_a_bent_element_and_a_changed_dtype():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = a.copy()
    b[2, 3] *= 1.01
    assert same(a, a.copy())
    assert not same(b, a)
    assert not same(a.astype(np.float64), a)
    assert not same(a.reshape(5, 4), a)
    assert not same(np.array(["a", "b"], dtype=object), np.array(["a", "c"], dtype=object))
