"""onnxruntime's side of `cargo xtask bench-cpu`: one model, the same .npy inputs Quorum gets, timed runs.

    python benches/models/ort_run.py MODEL --threads 2 --warmup 1 --iters 10 \
        [--input NAME=FILE.npy ...] [--outputs DIR]

prints one JSON object: {"version", "threads", "times_ms": [...], "outputs": [names]}; with --outputs,
writes output k of the model as DIR/k.npy after the first run (the timed runs write nothing).
Threads: intra_op_num_threads as given, inter_op_num_threads 1 (sequential execution), the default
graph optimisation level (ORT_ENABLE_ALL), CPU execution provider only.
"""
import argparse
import json
import os
import time

import numpy as np
import onnxruntime as ort


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--outputs")
    a = p.parse_args()

    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for spec in a.input:
        name, path = spec.split("=", 1)
        feeds[name] = np.load(path)
    names = [o.name for o in sess.get_outputs()]

    first = sess.run(None, feeds)
    if a.outputs:
        os.makedirs(a.outputs, exist_ok=True)
        for k, v in enumerate(first):
            np.save(os.path.join(a.outputs, f"{k}.npy"), np.asarray(v))
    for _ in range(max(a.warmup - 1, 0)):
        sess.run(None, feeds)
    times = []
    for _ in range(a.iters):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"version": ort.__version__, "threads": a.threads, "times_ms": times, "outputs": names}))


if __name__ == "__main__":
    main()
