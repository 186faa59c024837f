"""The same script for onnxruntime and for Quorum: `python dropin.py MODULE MODEL OUT.npz`.

Imports MODULE as `ort` (onnxruntime or quorum) and does what an onnxruntime user's script does:
a session on the CPU provider, every input from the case's test data (or seeded where there is
none), `run(None, feeds)`, the outputs saved by name.
"""
import glob
import importlib
import os
import sys

import numpy as np

ort = importlib.import_module(sys.argv[1])
model, out = sys.argv[2], sys.argv[3]

so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.intra_op_num_threads = 2
sess = ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])

feeds = {}
data = np.load(os.path.join(os.path.dirname(model), "inputs.npz"), allow_pickle=True)
for arg in sess.get_inputs():
    feeds[arg.name] = data[arg.name]
names = [o.name for o in sess.get_outputs()]
results = sess.run(None, feeds)
meta = [(a.name, a.type, a.shape) for a in sess.get_inputs() + sess.get_outputs()]
np.savez(out, **{f"out_{n}": np.asarray(r) for n, r in zip(names, results)}, meta=np.array(repr(meta)))
