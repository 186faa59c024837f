#!/usr/bin/env python3
"""Generate the official ONNX backend test corpus for Quorum's conformance runner.

What: writes DIR/{node,simple,pytorch-converted,pytorch-operator,light}/<case>/
model.onnx + test_data_set_N/{input,output}_K.pb (the standard backend-test
layout) and DIR/manifest.json listing every case with the ops and opsets it uses.
A case that cannot be written (an error, a duplicate name) fails the whole run
(exit 1, each such case named on stderr) and leaves an existing DIR untouched.
Why: the onnx wheel ships only part of the corpus as files; the node cases exist
only as Python code, and the light models lack an input file. This script turns
all of it into plain protobuf files the Rust runner can read without Python.

Uses only the public onnx API (tested with onnx 1.23.1 / 1.23.2):
    python generate.py --out DIR [--seed N]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import time
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

DATA_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
COPIED_PARTS = ("simple", "pytorch-converted", "pytorch-operator")


# ---------------------------------------------------------------- manifest info
def _walk_nodes(nodes, acc: set) -> None:
    """Add "domain::Op" (or "Op" for the default domain) of nodes and subgraphs."""
    for node in nodes:
        dom = node.domain if node.domain not in ("", "ai.onnx") else ""
        acc.add(f"{dom}::{node.op_type}" if dom else node.op_type)
        for attr in node.attribute:
            if attr.HasField("g"):
                _walk_nodes(attr.g.node, acc)
            for g in attr.graphs:
                _walk_nodes(g.node, acc)


def model_info(model: onnx.ModelProto) -> dict:
    ops: set = set()
    _walk_nodes(model.graph.node, ops)
    for func in model.functions:  # model-local functions
        _walk_nodes(func.node, ops)
    return {"ops": sorted(ops), "opset": {o.domain: o.version for o in model.opset_import}}


# ---------------------------------------------------------------- serialization
# element kind of a sequence/optional -> (DataType name, SequenceProto field,
# OptionalProto field); both protos share the DataType numbering.
_ELEM = {
    "tensor_type": ("TENSOR", "tensor_values", "tensor_value"),
    "sequence_type": ("SEQUENCE", "sequence_values", "sequence_value"),
    "map_type": ("MAP", "map_values", "map_value"),
    "optional_type": ("OPTIONAL", "optional_values", "optional_value"),
}


def to_proto(value, tp: onnx.TypeProto, name: str):
    """Serialize a test value as the proto matching its declared ONNX type:
    TensorProto, SequenceProto (Python list), OptionalProto (value or None),
    MapProto (dict). Output is byte-identical to onnx's numpy_helper writers."""
    kind = tp.WhichOneof("value")
    if kind in ("sequence_type", "optional_type"):
        is_seq = kind == "sequence_type"
        proto = onnx.SequenceProto() if is_seq else onnx.OptionalProto()
        if name:
            proto.name = name
        if value is None:  # empty optional: elem_type UNDEFINED, no value set
            proto.elem_type = onnx.OptionalProto.UNDEFINED
            return proto
        elem_tp = getattr(tp, kind).elem_type
        enum_name, seq_field, opt_field = _ELEM.get(
            elem_tp.WhichOneof("value"), _ELEM["tensor_type"])
        proto.elem_type = getattr(type(proto), enum_name)
        if is_seq:
            for item in value:
                getattr(proto, seq_field).append(to_proto(item, elem_tp, ""))
        else:
            getattr(proto, opt_field).CopyFrom(to_proto(value, elem_tp, ""))
        return proto
    if kind == "map_type" or isinstance(value, dict):
        return numpy_helper.from_dict(value, name)
    if kind is None and isinstance(value, list):  # untyped: infer from value
        return numpy_helper.from_list(value, name)
    if isinstance(value, onnx.TensorProto):  # exotic dtypes come pre-encoded
        tensor = onnx.TensorProto()
        tensor.CopyFrom(value)
        if name and not tensor.name:
            tensor.name = name
        return tensor
    return numpy_helper.from_array(np.asarray(value), name)


def write_case(case_dir: str, model: onnx.ModelProto, data_sets) -> None:
    os.makedirs(case_dir)
    with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    graph = model.graph
    for i, (inputs, outputs) in enumerate(data_sets):
        if len(inputs) != len(graph.input) or len(outputs) != len(graph.output):
            raise ValueError(
                f"data set {i}: {len(inputs)}/{len(outputs)} values for "
                f"{len(graph.input)}/{len(graph.output)} graph inputs/outputs"
            )
        ds_dir = os.path.join(case_dir, f"test_data_set_{i}")
        os.makedirs(ds_dir)
        for prefix, values, infos in (("input", inputs, graph.input),
                                      ("output", outputs, graph.output)):
            for k, (value, vi) in enumerate(zip(values, infos)):
                proto = to_proto(value, vi.type, vi.name)
                with open(os.path.join(ds_dir, f"{prefix}_{k}.pb"), "wb") as f:
                    f.write(proto.SerializeToString())


# ---------------------------------------------------------------- node cases
class _Override:
    """Attribute proxy: forwards everything to `target` except `overrides`."""

    def __init__(self, target, **overrides):
        self._target, self._overrides = target, overrides

    def __getattr__(self, key):
        if key in self._overrides:
            return self._overrides[key]
        return getattr(self._target, key)


def collect_node_cases(seed: int):
    """onnx generates node data while importing its case modules, calling
    np.random.seed(0) before each export function, so every case is
    reproducible regardless of order. To honour --seed we redirect that one
    call (in onnx.backend.test.case.base only) to np.random.seed(seed)."""
    from onnx.backend.test.case import base
    from onnx.backend.test.case import node as node_cases

    real_np = getattr(base, "np", None)
    if real_np is not None:
        base.np = _Override(real_np, random=_Override(
            real_np.random, seed=lambda *a, **k: real_np.random.seed(seed)))
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():  # silence numpy overflow/div-by-zero noise
            warnings.simplefilter("ignore")
            return list(node_cases.collect_testcases(None))
    finally:
        if real_np is not None:
            base.np = real_np


# ---------------------------------------------------------------- light models
def light_input(model: onnx.ModelProto):
    """Input fed by onnx's backend runner to light models: arange(n)/n as float32.
    Returns (value_info, array); raises if the model is not the 1-float-input kind."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    if len(inputs) != 1 or inputs[0].type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        raise ValueError(f"unsupported light model inputs: {inputs}")
    dims = inputs[0].type.tensor_type.shape.dim
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
    n = int(np.prod(shape))
    return inputs[0], (np.arange(n).reshape(shape) / n).astype(np.float32)


# ---------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output corpus directory")
    ap.add_argument("--seed", type=int, default=0, help="numpy seed (default 0)")
    args = ap.parse_args()

    start = time.time()
    out = os.path.abspath(args.out.rstrip("/"))
    tmp = out + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)

    cases, skipped = [], []

    def record(part: str, name: str, model: onnx.ModelProto) -> None:
        cases.append({"name": name, "part": part, "dir": f"{part}/{name}",
                      **model_info(model)})

    # node: generated from onnx's Python test-case definitions
    seen = set()
    for case in collect_node_cases(args.seed):
        if case.name in seen:
            skipped.append({"name": case.name, "part": "node", "error": "duplicate name"})
            continue
        seen.add(case.name)
        try:
            write_case(os.path.join(tmp, "node", case.name), case.model, case.data_sets)
            record("node", case.name, case.model)
        except Exception as e:  # keep going to report every failure, then fail (below)
            shutil.rmtree(os.path.join(tmp, "node", case.name), ignore_errors=True)
            skipped.append({"name": case.name, "part": "node",
                            "error": f"{type(e).__name__}: {e}"})

    # simple / pytorch-*: already in backend-test layout inside the wheel
    for part in COPIED_PARTS:
        src = os.path.join(DATA_DIR, part)
        for name in sorted(os.listdir(src)) if os.path.isdir(src) else []:
            try:
                shutil.copytree(os.path.join(src, name), os.path.join(tmp, part, name))
                record(part, name, onnx.load(os.path.join(src, name, "model.onnx")))
            except Exception as e:
                shutil.rmtree(os.path.join(tmp, part, name), ignore_errors=True)
                skipped.append({"name": name, "part": part,
                                "error": f"{type(e).__name__}: {e}"})

    # light: light_X.onnx + light_X_output_0.pb -> light/test_X/ with input_0.pb
    light_src = os.path.join(DATA_DIR, "light")
    for fname in sorted(os.listdir(light_src)) if os.path.isdir(light_src) else []:
        if not fname.endswith(".onnx"):
            continue
        stem = fname[: -len(".onnx")]
        name = "test_" + stem[len("light_"):] if stem.startswith("light_") else stem
        case_dir = os.path.join(tmp, "light", name)
        try:
            model = onnx.load(os.path.join(light_src, fname))
            vi, value = light_input(model)
            ds_dir = os.path.join(case_dir, "test_data_set_0")
            os.makedirs(ds_dir)
            shutil.copyfile(os.path.join(light_src, fname),
                            os.path.join(case_dir, "model.onnx"))
            with open(os.path.join(ds_dir, "input_0.pb"), "wb") as f:
                f.write(numpy_helper.from_array(value, vi.name).SerializeToString())
            for k in range(len(model.graph.output)):
                shutil.copyfile(os.path.join(light_src, f"{stem}_output_{k}.pb"),
                                os.path.join(ds_dir, f"output_{k}.pb"))
            record("light", name, model)
            cases[-1]["input_shape"] = list(value.shape)
        except Exception as e:
            shutil.rmtree(case_dir, ignore_errors=True)
            skipped.append({"name": name, "part": "light",
                            "error": f"{type(e).__name__}: {e}"})

    if skipped:
        # A case lost here would shrink the corpus unnoticed: fail, name each, keep the old corpus.
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"generate.py: {len(skipped)} case(s) could not be generated "
              f"(onnx {onnx.__version__}); the corpus at {out} is unchanged:", file=sys.stderr)
        for s in skipped:
            print(f"  {s['part']}/{s['name']}: {s['error']}", file=sys.stderr)
        return 1

    manifest = {"onnx_version": onnx.__version__, "seed": args.seed,
                "cases": cases, "skipped": skipped}
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)

    # swap in atomically-ish: the old corpus disappears only once the new one is complete
    if os.path.exists(out):
        shutil.rmtree(out)
    os.rename(tmp, out)

    counts = collections.Counter(c["part"] for c in cases)
    summary = " ".join(f"{p}={counts[p]}" for p in ("node", *COPIED_PARTS, "light"))
    print(f"corpus {out}: {summary} skipped={len(skipped)} "
          f"onnx={onnx.__version__} seed={args.seed} in {time.time() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
