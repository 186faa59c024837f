"""Exports the zoo (`benches/zoo/entries.py`) to ONNX, offline: random seeded weights, seeded inputs.

    python benches/zoo/export.py OUT_DIR --list          # the catalogue as JSON lines, nothing exported
    python benches/zoo/export.py OUT_DIR [NAME ...]      # export these entries (all when none is named)

For each entry it writes OUT_DIR/<name>/model.onnx, its inputs as OUT_DIR/<name>/inputs/<k>.npy
(k-th graph input; the name is in meta.json) and OUT_DIR/<name>/meta.json (source, exporter, opset,
inputs, parameters, export time), or OUT_DIR/<name>/error.json when the exporter itself fails (the
zoo reports that as an export failure, not as Quorum's). meta.json is written last, so an entry
without it was not finished. Every package is pinned in benches/models/requirements.lock; the venv is
made by `cargo xtask zoo`.
"""
import json
import os
import shutil
import signal
import sys
import time
import traceback
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from entries import all_entries  # noqa: E402
from zoo_slice import slice_entries  # noqa: E402

# An export that takes longer than this is abandoned and recorded as failed.
EXPORT_TIMEOUT_S = int(os.environ.get("ZOO_EXPORT_TIMEOUT_S", "900"))
# Entries with more parameters than this many millions are not exported (left_out.json says so).
MAX_MPARAMS = float(os.environ["ZOO_MAX_MPARAMS"]) if os.environ.get("ZOO_MAX_MPARAMS") else None


class LeftOut(Exception):
    def __init__(self, params):
        super().__init__(f"{params / 1e6:.1f} M parameters, over the limit of {MAX_MPARAMS} M")
        self.params = params


class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout(f"export took more than {EXPORT_TIMEOUT_S} s")


def graph_inputs(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits], m


def save_inputs(d, names, arrays):
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    out = {}
    for k, (name, a) in enumerate(zip(names, arrays)):
        np.save(os.path.join(d, "inputs", f"{k}.npy"), a)
        out[name] = {"file": f"inputs/{k}.npy", "dtype": str(a.dtype), "shape": list(a.shape)}
    return out


def export_torch(e, d, path):
    built = e.build()
    params = sum(p.numel() for p in built.module.parameters())
    if MAX_MPARAMS is not None and params > MAX_MPARAMS * 1e6:
        raise LeftOut(params)
    args = tuple(built.inputs.values())
    if built.list_input:
        args = ([args[0]],)
    with torch.no_grad():
        if e.exporter == "dynamo":
            prog = torch.onnx.export(built.module, args, dynamo=True)
            prog.save(path)
            detail = f"torch {torch.__version__} torch.onnx.export(dynamo=True)"
        else:
            torch.onnx.export(
                built.module,
                args,
                path,
                input_names=list(built.inputs),
                output_names=built.outputs,
                opset_version=e.opset,
                do_constant_folding=True,
                dynamo=False,
            )
            detail = f"torch {torch.__version__} torch.onnx.export (TorchScript), opset {e.opset}"
    names, _ = graph_inputs(path)
    arrays = [v.numpy() for v in built.inputs.values()]
    if len(names) != len(arrays):
        raise RuntimeError(f"the exported graph has {len(names)} inputs, the module took {len(arrays)}")
    return detail, save_inputs(d, names, arrays), params, built.note


def base_of(e, out_dir):
    d = os.path.join(out_dir, e.of)
    meta = os.path.join(d, "meta.json")
    if not os.path.exists(meta):
        raise RuntimeError(f"{e.of} (the entry this one is made from) was not exported")
    with open(meta) as f:
        m = json.load(f)
    arrays = [np.load(os.path.join(d, v["file"])) for v in m["inputs"].values()]
    return os.path.join(d, "model.onnx"), list(m["inputs"]), arrays, m


def export_derived(e, d, path, out_dir):
    import onnxruntime
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

    if os.path.exists(os.path.join(out_dir, e.of, "left_out.json")):
        with open(os.path.join(out_dir, e.of, "left_out.json")) as f:
            raise LeftOut(json.load(f)["params"])
    src, names, arrays, m = base_of(e, out_dir)
    if e.exporter == "qdq-dynamic":
        quantize_dynamic(src, path, weight_type=QuantType.QInt8)
        detail = f"onnxruntime {onnxruntime.__version__} quantize_dynamic (int8 weights) of {e.of}"
    elif e.exporter == "qdq-static":
        rng = np.random.default_rng(7)

        class Reader(CalibrationDataReader):
            # The entry's own inputs and four seeded perturbations of them: float inputs scaled
            # and shifted, integer inputs (token ids, masks) as they are.
            def __init__(self):
                self.sets = []
                for s in range(5):
                    feed = {}
                    for n, a in zip(names, arrays):
                        if a.dtype.kind == "f" and s:
                            a = (a * rng.uniform(0.5, 1.5) + rng.normal(0, 0.1, a.shape)).astype(a.dtype)
                        feed[n] = a
                    self.sets.append(feed)

            def get_next(self):
                return self.sets.pop() if self.sets else None

        quantize_static(
            src, path, Reader(), quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
        )
        detail = f"onnxruntime {onnxruntime.__version__} quantize_static (QDQ, u8 activations, s8 weights) of {e.of}"
    elif e.exporter == "f16":
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(onnx.load(src), keep_io_types=False)
        onnx.save(model, path)
        arrays = [a.astype(np.float16) if a.dtype == np.float32 else a for a in arrays]
        detail = f"onnxruntime {onnxruntime.__version__} convert_float_to_float16 of {e.of}"
    else:
        raise ValueError(e.exporter)
    graph_names, _ = graph_inputs(path)
    if graph_names != names:
        raise RuntimeError(f"inputs changed from {names} to {graph_names}")
    return detail, save_inputs(d, names, arrays), m.get("params"), m.get("note")


def export(e, out_dir):
    d = os.path.join(out_dir, e.name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path = os.path.join(d, "model.onnx")
    t = time.time()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(EXPORT_TIMEOUT_S)
    try:
        if e.build is not None:
            detail, inputs, params, note = export_torch(e, d, path)
        else:
            detail, inputs, params, note = export_derived(e, d, path, out_dir)
    except LeftOut as err:
        signal.alarm(0)
        with open(os.path.join(d, "left_out.json"), "w") as f:
            json.dump({**e.describe(), "params": err.params, "limit_mparams": MAX_MPARAMS, "reason": str(err)}, f)
        return f"left out: {err}"
    except BaseException as err:  # noqa: BLE001 (a failed export is a result: recorded, then on)
        signal.alarm(0)
        if isinstance(err, KeyboardInterrupt):
            raise
        last = str(err).strip().splitlines()
        with open(os.path.join(d, "error.json"), "w") as f:
            json.dump(
                {
                    **e.describe(),
                    "error": f"{type(err).__name__}: {last[0] if last else ''}"[:500],
                    "trace": traceback.format_exc()[-3000:],
                },
                f,
                indent=2,
            )
        for p in (path, os.path.join(d, "inputs")):
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else (os.path.exists(p) and os.remove(p))
        return f"export failed: {type(err).__name__}: {last[0][:160] if last else ''}"
    signal.alarm(0)
    _, model = graph_inputs(path)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    meta = {
        **e.describe(),
        "opset": opset,
        "exporter_detail": detail,
        "weights": "random, seeded from the entry's name (no download); batch-norm statistics randomized",
        "inputs": inputs,
        "params": params,
        "nodes": len(model.graph.node),
        "bytes": sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(d) for f in fs if not f.endswith(".npy")),
        "export_s": round(time.time() - t, 2),
    }
    if note or e.note:
        meta["note"] = note or e.note
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    return f"{meta['nodes']} nodes, {meta['bytes'] / 1e6:.1f} MB, {meta['export_s']} s"


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help") or args[0].startswith("-"):
        print(__doc__.strip())
        sys.exit(0 if args[:1] in (["-h"], ["--help"]) else 2)
    out_dir = args[0]
    rest = args[1:]
    flags = {"--slice", "--list"}
    odd = [a for a in rest if a.startswith("-") and a not in flags]
    if odd:
        sys.exit(f"unknown option {odd[0]} (see --help)")
    sliced = rest[:1] == ["--slice"]
    if sliced:
        rest = rest[1:]
    entries = slice_entries() if sliced else all_entries()
    if rest[:1] == ["--list"]:
        for e in entries:
            print(json.dumps(e.describe()))
        return
    torch.set_num_threads(int(os.environ.get("ZOO_EXPORT_THREADS", "2")))
    torch.backends.mha.set_fastpath_enabled(False)
    wanted = set(rest)
    unknown = wanted - {e.name for e in entries}
    if unknown:
        sys.exit(f"no zoo entry named {', '.join(sorted(unknown))}")
    todo = [e for e in entries if not wanted or e.name in wanted]
    # Derived entries after the ones they are made from.
    todo.sort(key=lambda e: e.of is not None)
    for i, e in enumerate(todo):
        print(f"[{i + 1}/{len(todo)}] {e.name}: {export(e, out_dir)}", flush=True)
        if sliced:
            expect(os.path.join(out_dir, e.name))


def expect(d):
    """Writes onnxruntime's outputs for a slice entry as d/expected/<k>.npy (k-th graph output),
    with one thread and the default graph optimisation, for the test that runs the slice."""
    import onnxruntime as ort

    meta_path = os.path.join(d, "meta.json")
    if not os.path.exists(meta_path):
        return
    with open(meta_path) as f:
        meta = json.load(f)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
    feeds = {n: np.load(os.path.join(d, v["file"])) for n, v in meta["inputs"].items()}
    os.makedirs(os.path.join(d, "expected"), exist_ok=True)
    outs = sess.run(None, feeds)
    meta["expected"] = {
        "onnxruntime": ort.__version__,
        "outputs": [o.name for o in sess.get_outputs()],
    }
    for k, v in enumerate(outs):
        np.save(os.path.join(d, "expected", f"{k}.npy"), np.asarray(v))
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=2)


if __name__ == "__main__":
    main()
