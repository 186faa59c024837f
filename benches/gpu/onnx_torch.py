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

import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pads2d(pads, what: str):
    """ONNX pads [top, left, bottom, right] as torch's symmetric (h, w), or None when asymmetric."""
    if not pads:
        return (0, 0)
    top, left, bottom, right = pads
    return (top, left) if (top, left) == (bottom, right) else None


def run_op(node, xs: list, a: dict):
    op = node.op_type
    if op == "Conv":
        pads = _pads2d(a.get("pads"), "Conv")
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
        pads = _pads2d(a.get("pads"), op)
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
