"""Quantized models on the CPU, Quorum against onnxruntime: the 8-bit integer ops.

    python benches/zoo/int8_cpu.py --quorum target/release/quorum [--baseline OTHER_QUORUM]
        [--threads 2] [--rounds 4] [--iters 30] [--out FILE.md]

Two f32 models written here with seeded random weights, a convolutional network (224² input:
7×7/2, 3×3, 3×3/2, pointwise and grouped convolutions, a classifier) and a transformer's
feed-forward stack (two layers of 768 → 3072 → 768 at sequence 128), each quantized by
onnxruntime's quantizer three ways: dynamic (DynamicQuantizeLinear, ConvInteger with u8
weights, which is what onnxruntime's CPU runs, MatMulInteger with i8 weights), static in the QOperator format (QLinearConv, QLinearMatMul) and static QDQ.
Every model is checked against onnxruntime's answer first (the integer ops are exact, so the
outputs agree to the last float operation's rounding), then timed: both runtimes with the same
threads and inputs (RAYON_NUM_THREADS for Quorum, intra_op_num_threads for onnxruntime), in
alternating rounds; medians in ms. With --baseline, a second Quorum binary is timed in the same
rounds (before and after a change, side by side).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)


def cnn(path, rng):
    inits, nodes = [], []

    def conv(x, cin, cout, k, stride, group=1, relu=True):
        i = len(nodes)
        w = (rng.standard_normal((cout, cin // group, k, k)) * (2.0 / (cin // group * k * k)) ** 0.5)
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"b{i}"))
        y = f"c{i}"
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y], kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4, group=group))
        if relu:
            nodes.append(helper.make_node("Relu", [y], [y + "r"]))
            y += "r"
        return y

    y = conv("x", 3, 64, 7, 2)
    y = conv(y, 64, 64, 3, 1)
    y = conv(y, 64, 128, 3, 2)
    y = conv(y, 128, 128, 3, 1, group=4)
    y = conv(y, 128, 256, 1, 1)
    y = conv(y, 256, 256, 3, 2)
    nodes.append(helper.make_node("GlobalAveragePool", [y], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    inits.append(numpy_helper.from_array((rng.standard_normal((1000, 256)) * 0.06).astype(np.float32), "fc_w"))
    inits.append(numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1))
    save(path, nodes, inits, [1, 3, 224, 224], [1, 1000])
    return [1, 3, 224, 224]


def ffn(path, rng):
    inits, nodes = [], []
    x = "x"
    for layer in range(2):
        for j, (a, b) in enumerate([(768, 3072), (3072, 768)]):
            w, bias = f"w{layer}{j}", f"b{layer}{j}"
            inits.append(numpy_helper.from_array((rng.standard_normal((a, b)) / a ** 0.5).astype(np.float32), w))
            inits.append(numpy_helper.from_array((rng.standard_normal(b) * 0.1).astype(np.float32), bias))
            nodes.append(helper.make_node("MatMul", [x, w], [f"m{layer}{j}"]))
            y = "y" if (layer, j) == (1, 1) else f"a{layer}{j}"
            nodes.append(helper.make_node("Add", [f"m{layer}{j}", bias], [y if j == 1 else y + "p"]))
            if j == 0:
                nodes.append(helper.make_node("Relu", [y + "p"], [y]))
            x = y
    save(path, nodes, inits, [1, 128, 768], [1, 128, 768])
    return [1, 128, 768]


def save(path, nodes, inits, xs, ys):
    g = helper.make_graph(nodes, os.path.basename(path), [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ys)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


class Reader(CalibrationDataReader):
    def __init__(self, shape):
        rng = np.random.default_rng(1)
        self.items = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.items, None)


def ort_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def time_ort(path, x, threads, iters):
    s = ort_session(path, threads)
    for _ in range(3):
        s.run(None, {"x": x})
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        s.run(None, {"x": x})
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


def quorum_run(quorum, args, threads):
    r = subprocess.run([quorum, *args], capture_output=True, text=True,
                       env={**os.environ, "RAYON_NUM_THREADS": str(threads)})
    if r.returncode != 0:
        raise RuntimeError(f"quorum {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return r.stdout


def time_quorum(quorum, path, xfile, threads, iters):
    out = quorum_run(quorum, ["bench", path, "--provider", "cpu", "--input", f"x={xfile}", "--iters",
                              str(iters), "--warmup", "3", "--json"], threads)
    return json.loads(out.strip().splitlines()[-1])["times_ms"]


def quorum_output(quorum, path, xfile, work, threads):
    out = os.path.join(work, "out")
    os.makedirs(out, exist_ok=True)
    quorum_run(quorum, ["run", path, "--provider", "cpu", "--input", f"x={xfile}", "--output-dir", out], threads)
    return np.load(os.path.join(out, "y.npy"))


def ops_of(path):
    m = onnx.load(path)
    return sorted({n.op_type for n in m.graph.node})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quorum", required=True)
    p.add_argument("--baseline")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--out")
    a = p.parse_args()
    work = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    rows = []
    for name, build in (("cnn", cnn), ("ffn", ffn)):
        f32 = os.path.join(work, f"{name}.onnx")
        shape = build(f32, rng)
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        xfile = os.path.join(work, f"{name}_x.npy")
        np.save(xfile, x)
        variants = {"f32": f32}
        variants["dynamic"] = os.path.join(work, f"{name}_dyn.onnx")
        # onnxruntime's CPU ConvInteger takes u8 weights only.
        quantize_dynamic(f32, variants["dynamic"],
                         weight_type=QuantType.QUInt8 if name == "cnn" else QuantType.QInt8)
        for fmt, label in ((QuantFormat.QOperator, "qoperator"), (QuantFormat.QDQ, "qdq")):
            variants[label] = os.path.join(work, f"{name}_{label}.onnx")
            # QOperator's pooling, Add and Gemm are com.microsoft ops: Conv and MatMul only.
            ops = ["Conv", "MatMul"] if fmt == QuantFormat.QOperator else None
            quantize_static(f32, variants[label], Reader(shape), quant_format=fmt, op_types_to_quantize=ops,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        for label, path in variants.items():
            want = ort_session(path, a.threads).run(None, {"x": x})[0]
            got = quorum_output(a.quorum, path, xfile, work, a.threads)
            scale = float(np.abs(want).max()) or 1.0
            diff = float(np.abs(got.astype(np.float64) - want).max()) / scale
            sides = {"quorum": [], "onnxruntime": []}
            if a.baseline:
                sides["baseline"] = []
            for r in range(a.rounds):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for side in order:
                    if side == "onnxruntime":
                        sides[side] += time_ort(path, x, a.threads, a.iters)
                    else:
                        q = a.quorum if side == "quorum" else a.baseline
                        sides[side] += time_quorum(q, path, xfile, a.threads, a.iters)
            med = {k: statistics.median(v) for k, v in sides.items()}
            row = {"model": name, "form": label, "ops": ",".join(o for o in ops_of(path)
                                                                  if "Integer" in o or "QLinear" in o
                                                                  or "uantize" in o),
                   "diff": diff, **med}
            print(json.dumps(row), flush=True)
            rows.append(row)
    head = "| model | form | integer ops | max diff / scale | Quorum ms |"
    sep = "|---|---|---|---:|---:|"
    if a.baseline:
        head += " baseline ms |"
        sep += "---:|"
    head += " onnxruntime ms | Quorum / ort |"
    sep += "---:|---:|"
    lines = ["# Quantized models on the CPU (`benches/zoo/int8_cpu.py`)", "",
             f"{a.threads} threads each, {a.rounds} alternating rounds of {a.iters} runs, medians; "
             f"onnxruntime {ort.__version__}.", "", head, sep]
    for r in rows:
        line = f"| {r['model']} | {r['form']} | {r['ops'] or '-'} | {r['diff']:.1e} | {r['quorum']:.2f} |"
        if a.baseline:
            line += f" {r['baseline']:.2f} |"
        line += f" {r['onnxruntime']:.2f} | {r['quorum'] / r['onnxruntime']:.2f} |"
        lines.append(line)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
