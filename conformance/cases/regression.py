"""Quorum's hand-written regression cases, written in the backend-test layout next to the corpus.

Each case is a one-node ONNX model with seeded random inputs (never all zeros, except the all-ones MatMul
that reproduces a known two-stream race) and expected outputs computed here in float64 with numpy.
Usage: python regression.py --out DIR
"""
import argparse
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_case(out, name, nodes, inputs, outputs, opset=17):
    """nodes: one node or a list; inputs/outputs: lists of (name, array), written as float32."""
    graph = helper.make_graph(
        nodes if isinstance(nodes, list) else [nodes],
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    case_dir = os.path.join(out, name)
    data_dir = os.path.join(case_dir, "test_data_set_0")
    os.makedirs(data_dir)
    onnx.save(model, os.path.join(case_dir, "model.onnx"))
    for prefix, values in (("input", inputs), ("output", outputs)):
        for k, (n, a) in enumerate(values):
            t = numpy_helper.from_array(a.astype(np.float32), n)
            with open(os.path.join(data_dir, f"{prefix}_{k}.pb"), "wb") as f:
                f.write(t.SerializeToString())


def conv_reference(x, w, pads, groups, strides=(1, 1)):
    """Direct float64 convolution: x [N,C,H,W], w [M,C/groups,kh,kw], pads [top,left,bottom,right]."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (xp.shape[2] - kh) // strides[0] + 1
    ow = (xp.shape[3] - kw) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    mg = m // groups
    for g in range(groups):
        for oc in range(g * mg, (g + 1) * mg):
            for i in range(oh):
                for j in range(ow):
                    patch = xp[:, g * cg:(g + 1) * cg, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw]
                    y[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    rng = np.random.default_rng(20261129)
    rand = lambda *s: rng.uniform(-1.0, 1.0, size=s).astype(np.float32)

    ones = np.ones((64, 64), np.float32)
    write_case(out, "matmul_64x64x64_all_ones", helper.make_node("MatMul", ["a", "b"], ["y"]),
               [("a", ones), ("b", ones)], [("y", ones.astype(np.float64) @ ones)])

    a, b = rand(1, 25088), rand(25088, 512)
    write_case(out, "matmul_m1_k25088_n512", helper.make_node("MatMul", ["a", "b"], ["y"]),
               [("a", a), ("b", b)], [("y", a.astype(np.float64) @ b.astype(np.float64))])

    x, w = rand(2, 3, 9, 8), rand(4, 3, 3, 3)
    pads = [0, 1, 2, 0]
    write_case(out, "conv_asymmetric_pads", helper.make_node("Conv", ["x", "w"], ["y"], pads=pads),
               [("x", x), ("w", w)], [("y", conv_reference(x.astype(np.float64), w.astype(np.float64), pads, 1))])

    x, w = rand(1, 6, 7, 7), rand(9, 2, 3, 3)
    write_case(out, "conv_groups_3_of_6_channels", helper.make_node("Conv", ["x", "w"], ["y"], group=3, pads=[1, 1, 1, 1]),
               [("x", x), ("w", w)], [("y", conv_reference(x.astype(np.float64), w.astype(np.float64), [1, 1, 1, 1], 3))])

    x = rand(8, 4096) * 20.0
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    write_case(out, "softmax_rows_4096", helper.make_node("Softmax", ["x"], ["y"], axis=-1),
               [("x", x)], [("y", e / e.sum(axis=1, keepdims=True))])

    x = rand(4, 5, 6)
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    # The axes travel as a Constant so the model has one runtime input.
    write_case(out, "reducesum_non_last_axis",
               [helper.make_node("Constant", [], ["axes"], value=axes),
                helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
               [("x", x)], [("y", x.astype(np.float64).sum(axis=1))])
    print(f"regression cases: {len(os.listdir(out))} written to {out}")


if __name__ == "__main__":
    main()
