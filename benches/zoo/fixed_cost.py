"""The fixed cost of a run and of a node, Quorum against onnxruntime on the CPU.

    python benches/zoo/fixed_cost.py --quorum target/release/quorum [--threads 2] [--out FILE.md]

Models: a chain of N Add nodes on a [1, 16] f32 tensor (each adds a 16-element constant), N in
1, 4, 16, 64, 256, and the same chain of Relu. The kernels do next to nothing, so a run's time is
the runtime's own cost: fitting t(N) = a + b·N by least squares gives a, the fixed cost of a run,
and b, the cost of one node. Both runtimes get the same inputs and threads (RAYON_NUM_THREADS for
Quorum, intra_op_num_threads for onnxruntime), timed in alternating rounds; medians.
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

SIZES = [1, 4, 16, 64, 256]


def chain(op, n, path):
    rng = np.random.default_rng(n)
    nodes, inits = [], []
    prev = "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        if op == "Add":
            c = f"c{i}"
            inits.append(numpy_helper.from_array(rng.standard_normal((1, 16)).astype(np.float32), c))
            nodes.append(helper.make_node("Add", [prev, c], [out]))
        else:
            nodes.append(helper.make_node(op, [prev], [out]))
        prev = out
    g = helper.make_graph(
        nodes, f"{op}_chain_{n}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def time_ort(path, x, threads, iters):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for _ in range(50):
        s.run(None, {"x": x})
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        s.run(None, {"x": x})
        ts.append((time.perf_counter() - t) * 1e6)
    return ts


def time_quorum(quorum, path, xfile, threads, iters):
    r = subprocess.run(
        [quorum, "bench", path, "--provider", "cpu", "--input", f"x={xfile}", "--iters", str(iters),
         "--warmup", "50", "--json"],
        capture_output=True, text=True, env={**os.environ, "RAYON_NUM_THREADS": str(threads)}, check=True,
    )
    return [t * 1e3 for t in json.loads(r.stdout.strip().splitlines()[-1])["times_ms"]]


def fit(ns, ts):
    a = np.vstack([np.ones(len(ns)), ns]).T
    (c, b), *_ = np.linalg.lstsq(a, np.array(ts), rcond=None)
    return c, b


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quorum", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--iters", type=int, default=400)
    p.add_argument("--out")
    a = p.parse_args()
    work = tempfile.mkdtemp()
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    xfile = os.path.join(work, "x.npy")
    np.save(xfile, x)
    rows = []
    for op in ("Add", "Relu"):
        med = {"quorum": {}, "onnxruntime": {}}
        for n in SIZES:
            path = os.path.join(work, f"{op}{n}.onnx")
            chain(op, n, path)
            q, o = [], []
            for r in range(a.rounds):
                sides = [("q", q), ("o", o)] if r % 2 == 0 else [("o", o), ("q", q)]
                for side, acc in sides:
                    if side == "q":
                        acc += time_quorum(a.quorum, path, xfile, a.threads, a.iters)
                    else:
                        acc += time_ort(path, x, a.threads, a.iters)
            med["quorum"][n] = statistics.median(q)
            med["onnxruntime"][n] = statistics.median(o)
            print(json.dumps({"op": op, "n": n, "quorum_us": med["quorum"][n], "ort_us": med["onnxruntime"][n]}),
                  flush=True)
        for side in ("quorum", "onnxruntime"):
            c, b = fit(SIZES, [med[side][n] for n in SIZES])
            rows.append((op, side, c, b, med[side]))
    lines = [
        "# Fixed cost of a run and of a node (CPU)",
        "",
        f"`benches/zoo/fixed_cost.py`: chains of N {{Add with a constant, Relu}} nodes on a [1, 16] f32 "
        f"tensor, {a.threads} threads each, {a.rounds} alternating rounds of {a.iters} runs per side and "
        f"size, medians in µs; onnxruntime {ort.__version__}. Fit t(N) = run + N·node by least squares.",
        "",
        "| chain | runtime | " + " | ".join(f"N={n}" for n in SIZES) + " | run (µs) | node (µs) |",
        "|---|---|" + "---:|" * (len(SIZES) + 2),
    ]
    for op, side, c, b, m in rows:
        lines.append(f"| {op} | {side} | " + " | ".join(f"{m[n]:.1f}" for n in SIZES) + f" | {c:.1f} | {b:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
