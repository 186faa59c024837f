"""An ONNX graph run as PyTorch ops: the anchor for models that exist only as ONNX files (the
corpus's light models, whose weights are ConstantOfShape fills).

What: `OnnxTorch(path)` is a `torch.nn.Module` whose forward runs the graph's nodes, in order, as the
PyTorch functions a model written in PyTorch would call (conv2d, max_pool2d, batch_norm, linear...).
Nodes whose inputs are all constants (the light models' ConstantOfShape weights, Unsqueeze of them)
are evaluated once when the module is built and kept as buffers, as Quorum folds them at session
build. Covers the op set of the light models at opset 9; any other op or form raises.
Why: PyTorch eager and CUDA-graph replay of the very graph Quorum runs, in the same process that
times them, is the like-for-like anchor `models_vs_pytorch.py` gives every other model.
"""
from __future__ import annotations

import math
import os

import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pads2d(pads):
    """ONNX pads [top, left, bottom, right] as torch's symmetric (h, w), or None when asymmetric."""
    if not pads:
        return (0, 0)
    top, left, bottom, right = pads
    return (top, left) if (top, left) == (bottom, right) else None


def run_op(node, xs: list, a: dict):
    op = node.op_type
    if op == "Conv":
        pads = _pads2d(a.get("pads"))
        x = xs[0]
        if pads is None:
            t, l, b, r = a["pads"]
            x, pads = F.pad(x, (l, r, t, b)), (0, 0)
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise NotImplementedError("Conv auto_pad")
        return F.conv2d(x, xs[1], xs[2] if len(xs) > 2 else None, tuple(a.get("strides", [1, 1])),
                        pads, tuple(a.get("dilations", [1, 1])), a.get("group", 1))
    if op in ("MaxPool", "AveragePool"):
        k = tuple(a["kernel_shape"])
        s = tuple(a.get("strides", [1, 1]))
        pads = _pads2d(a.get("pads"))
        x = xs[0]
        if op == "MaxPool":
            if pads is None:
                t, l, b, r = a["pads"]
                x, pads = F.pad(x, (l, r, t, b), value=float("-inf")), (0, 0)
            return F.max_pool2d(x, k, s, pads)
        include = bool(a.get("count_include_pad", 0))
        if pads is None:
            # Asymmetric pads: zero-pad, average, and (pads not counted) divide by the share of
            # each window that is input.
            t, l, b, r = a["pads"]
            y = F.avg_pool2d(F.pad(x, (l, r, t, b)), k, s)
            if include:
                return y
            ones = torch.ones_like(x[:1, :1])
            return y / F.avg_pool2d(F.pad(ones, (l, r, t, b)), k, s)
        return F.avg_pool2d(x, k, s, pads, count_include_pad=include)
    if op == "GlobalAveragePool":
        return xs[0].mean(dim=(2, 3), keepdim=True)
    if op == "Relu":
        return F.relu(xs[0])
    if op == "LRN":
        return F.local_response_norm(xs[0], a["size"], a.get("alpha", 1e-4), a.get("beta", 0.75),
                                     a.get("bias", 1.0))
    if op == "BatchNormalization":
        x, scale, bias, mean, var = xs[:5]
        return F.batch_norm(x, mean, var, scale, bias, False, 0.0, a.get("epsilon", 1e-5))
    if op == "Gemm":
        A, B = xs[0], xs[1]
        if a.get("transA", 0):
            A = A.t()
        if a.get("transB", 0):
            B = B.t()
        y = a.get("alpha", 1.0) * (A @ B)
        if len(xs) > 2 and xs[2] is not None:
            y = y + a.get("beta", 1.0) * xs[2]
        return y
    if op == "MatMul":
        return xs[0] @ xs[1]
    if op == "Softmax":  # opset < 13: the input coerced to 2-D at `axis`
        x = xs[0]
        axis = a.get("axis", 1) % x.dim()
        shape = x.shape
        return torch.softmax(x.reshape(math.prod(shape[:axis]), -1), 1).reshape(shape)
    if op == "Dropout":
        return xs[0]
    if op == "Reshape":
        # The target shape as read when the module was built (no device read in forward).
        shape = a["_shape"] if "_shape" in a else [int(v) for v in xs[1].tolist()]
        shape = [xs[0].shape[i] if v == 0 else v for i, v in enumerate(shape)]
        return xs[0].reshape(shape)
    if op == "Flatten":
        axis = a.get("axis", 1)
        return xs[0].reshape(math.prod(xs[0].shape[:axis]), -1)
    if op == "Concat":
        return torch.cat(xs, dim=a["axis"])
    if op == "Transpose":
        return xs[0].permute(*a["perm"])
    if op in ("Add", "Sum"):
        y = xs[0]
        for x in xs[1:]:
            y = y + x
        return y
    if op == "Mul":
        return xs[0] * xs[1]
    if op == "Unsqueeze":
        y = xs[0]
        for ax in sorted(a["axes"]):
            y = y.unsqueeze(ax)
        return y
    if op == "ConstantOfShape":
        v = numpy_helper.to_array(a["value"]) if "value" in a else None
        fill = float(v.reshape(-1)[0]) if v is not None else 0.0
        dtype = torch.from_numpy(v).dtype if v is not None else torch.float32
        return torch.full([int(d) for d in xs[0].tolist()], fill, dtype=dtype)
    raise NotImplementedError(f"{op} is outside the light models' op set")


class OnnxTorch(torch.nn.Module):
    def __init__(self, path: str):
        super().__init__()
        model = onnx.load(path)
        g = model.graph
        consts = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in g.initializer}
        self.input = next(i.name for i in g.input if i.name not in consts)
        self.output = g.output[0].name
        self.steps = []
        for node in g.node:
            a = _attrs(node)
            if all(n == "" or n in consts for n in node.input):
                ys = run_op(node, [consts.get(n) for n in node.input], a)
                consts[node.output[0]] = ys
            else:
                if node.op_type == "Reshape" and node.input[1] in consts:
                    a["_shape"] = [int(v) for v in consts[node.input[1]].tolist()]
                self.steps.append((node, a))
        # Constants that a runtime step reads, as buffers (so that `.cuda()` moves them).
        self.names = {}
        for node, _ in self.steps:
            for n in node.input:
                if n in consts and n not in self.names:
                    self.names[n] = f"c{len(self.names)}"
                    self.register_buffer(self.names[n], consts[n])

    def forward(self, x):
        vals = {self.input: x}
        for node, a in self.steps:
            xs = [getattr(self, self.names[n]) if n in self.names else vals.get(n)
                  for n in node.input]
            vals[node.output[0]] = run_op(node, xs, a)
        return vals[self.output]


def self_check() -> str | None:
    """Runs a seeded random-weight graph of every op above through `OnnxTorch` and onnxruntime
    (asymmetric pads, ceil-free pools, LRN, BatchNormalization, opset-9 Softmax, Gemm, Concat,
    Transpose, Reshape, Sum); `None` when they agree to 1e-5 of the output's scale, else why not.
    A translation with LRN's window off by one channel must fail it (checked below)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(1)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    pos = lambda *s: (rng.random(s) + 0.5).astype(np.float32)  # noqa: E731
    inits = {"W": f(8, 3, 3, 3), "B": f(8), "sc": pos(8), "bi": f(8), "mu": f(8), "va": pos(8),
             "W2": f(8, 8, 1, 1), "shape": np.array([1, -1], np.int64), "G": f(10, 48), "gb": f(10)}
    mk = helper.make_node
    nodes = [
        mk("Conv", ["x", "W", "B"], ["c"], pads=[1, 0, 2, 1], strides=[2, 1]),
        mk("BatchNormalization", ["c", "sc", "bi", "mu", "va"], ["b"], epsilon=1e-3),
        mk("Relu", ["b"], ["r"]),
        mk("LRN", ["r"], ["l"], size=5, alpha=0.5, beta=0.75, bias=1.0),
        mk("AveragePool", ["l"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]),
        mk("MaxPool", ["a"], ["m"], kernel_shape=[2, 2], strides=[1, 1], pads=[1, 1, 0, 0]),
        mk("Conv", ["m", "W2"], ["p"], group=1),
        mk("Sum", ["m", "p"], ["s"]),
        mk("Transpose", ["s"], ["t"], perm=[0, 1, 3, 2]),
        mk("Concat", ["t", "t"], ["k"], axis=1),
        mk("GlobalAveragePool", ["k"], ["g"]),
        mk("Concat", ["g", "g", "g"], ["g3"], axis=1),
        mk("Reshape", ["g3", "shape"], ["v"]),
        mk("Gemm", ["v", "G", "gb"], ["z"], transB=1),
        mk("Softmax", ["z"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "check", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 17, 15])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 7
    import tempfile
    fd, path = tempfile.mkstemp(suffix=".onnx")
    os.close(fd)
    onnx.save(model, path)
    x = f(1, 3, 17, 15)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with torch.no_grad():
        got = OnnxTorch(path)(torch.from_numpy(x)).numpy()
    os.remove(path)
    if got.shape != want.shape:
        return f"shape {got.shape}, onnxruntime {want.shape}"
    err = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))
    return None if err <= 1e-5 else f"relative difference {err:.2e} from onnxruntime"


if __name__ == "__main__":
    import sys

    why = self_check()
    print("onnx_torch self-check:", why or "agrees with onnxruntime")
    # The check must catch a wrong translation: LRN's window one channel off.
    real = F.local_response_norm
    F.local_response_norm = lambda x, size, *a: real(x, size + 2, *a)
    caught = self_check()
    F.local_response_norm = real
    print("a wrong LRN window:", caught or "NOT CAUGHT")
    sys.exit(0 if why is None and caught is not None else 1)
