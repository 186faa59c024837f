"""Single nodes of a model timed alone in Quorum and in onnxruntime, side by side.

onnxruntime's own per-node profile is no use for comparison on small machines (on the AMD EPYC of
stop 32 it summed to 6.5 ms on squeezenet, whose unprofiled run takes 3.6-4.2 ms), so this tool
cuts each named node out of the model as a one-node model and times that in both runtimes,
alternating round by round, on the same inputs:

    python benches/models/node_ab.py --quorum target/release/quorum MODEL.onnx NODE [NODE ...]

A node whose output only an activation reads (Relu, Clip, LeakyRelu, Sigmoid, HardSwish) keeps it,
as Quorum fuses it; constants the nodes read (Constant, ConstantOfShape outputs) come along. The
one-node models are written to --out. Each round runs `quorum bench --json` (its median and p10)
and then as many onnxruntime runs in this process (2 intra-op threads by default, as bench-cpu).
The table gives the medians over rounds of each round's median and p10. Quorum's figure includes
its session's per-run overhead (a few microseconds) and onnxruntime's its layout reorders where it
picks NCHWc for the node: a one-node model measures the node as it would run between reorders.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import onnx.shape_inference
import onnxruntime as ort
from onnx import helper

ACTIVATIONS = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSwish"}
CONSTANTS = {"Constant", "ConstantOfShape"}


def one_node_models(path, names, out):
    """(name, file, input shapes, output shape) of each named node as a model of its own."""
    model = onnx.load(path)
    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model).graph
    infos = {v.name: v for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    readers = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    made = []
    for k, name in enumerate(names):
        found = [n for n in graph.node if n.name == name]
        if not found:
            sys.exit(f"node_ab: no node named {name!r} in {path}")
        nodes = [found[0]]
        after = readers.get(nodes[0].output[0], [])
        if len(after) == 1 and after[0].op_type in ACTIVATIONS:
            nodes.append(after[0])
        consts = [
            producer[i]
            for n in nodes
            for i in n.input
            if i in producer and producer[i].op_type in CONSTANTS
        ]
        nodes = consts + nodes
        produced = {o for n in nodes for o in n.output}
        used = [inits[i] for n in nodes for i in n.input if i in inits]
        ins = [
            infos[i]
            for i in dict.fromkeys(i for n in nodes for i in n.input)
            if i and i not in inits and i not in produced
        ]
        missing = [v.name for v in ins if not v.type.tensor_type.shape.dim]
        if missing:
            sys.exit(f"node_ab: no shape inferred for {missing} (node {name!r})")
        result = infos[nodes[-1].output[0]]
        one = helper.make_graph(nodes, "one", ins, [result], used)
        file = os.path.join(out, f"node_{k}.onnx")
        onnx.save(helper.make_model(one, opset_imports=model.opset_import), file)
        dims = lambda v: [d.dim_value for d in v.type.tensor_type.shape.dim]
        made.append((name, file, [dims(v) for v in ins], dims(result)))
    return made


def quorum_round(binary, file, iters, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = [binary, "bench", file, "--provider", "cpu", "--iters", str(iters), "--warmup", "5", "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        sys.exit(f"node_ab: {' '.join(cmd)} failed: {run.stderr.strip()}")
    report = json.loads(run.stdout)
    return report["median_ms"], report["p10_ms"]


def ort_round(session, feeds, iters):
    for _ in range(5):
        session.run(None, feeds)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return statistics.median(times), times[len(times) // 10]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("nodes", nargs="+", help="node names, as `quorum bench --profile=nodes` lists them")
    p.add_argument("--quorum", required=True, help="the quorum binary (a release build)")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="target/node_ab")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    print(f"{'node':<48} {'shapes':<34} {'Quorum med/p10':>15} {'ORT med/p10':>15} {'ratio':>6}")
    for name, file, ins, result in one_node_models(a.model, a.nodes, a.out):
        options = ort.SessionOptions()
        options.intra_op_num_threads = a.threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(file, options, providers=["CPUExecutionProvider"])
        # The same seeded values for every round; Quorum generates its own (seeded) inputs.
        feeds = {
            i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
            for i in session.get_inputs()
        }
        q, o = [], []
        for _ in range(a.rounds):
            q.append(quorum_round(a.quorum, file, a.iters, a.threads))
            o.append(ort_round(session, feeds, a.iters))
        qm, qp = (statistics.median(x[i] for x in q) for i in (0, 1))
        om, op = (statistics.median(x[i] for x in o) for i in (0, 1))
        shapes = f"{ins[0]}->{result}"
        print(f"{name[-48:]:<48} {shapes[:34]:<34} {qm:7.3f}/{qp:<7.3f} {om:7.3f}/{op:<7.3f} {qm / om:6.2f}")


if __name__ == "__main__":
    main()
