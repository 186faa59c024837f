#!/usr/bin/env python3
"""The zoo on the GPU machine: entries of `benches/zoo/entries.py` exported there with its own torch
(nothing large is carried over), run through Quorum on CUDA beside PyTorch's CUDA-graph replay, in
one run.

    python3 benches/gpu/zoo_cuda.py --quorum target/gpu-bundle/quorum --out DIR \
        [--only NAME,...] [--max-mparams 150] [--deadline-s 420] [--iters 30]

Per entry: the TorchScript export (opset 17) of the entry's module and seeded inputs; Quorum's
outputs on CUDA (`quorum run --provider cuda`) against onnxruntime's on the CPU, within 1e-3 of each
output's largest magnitude; the share of the nodes of one run that ran on the device and the ops of
those that did not (`quorum bench --profile`); Quorum's graph replay (`--graph on`) and PyTorch's
graph replay, both host to host (inputs copied in, outputs copied back), TF32 off on both sides,
medians. Entries run in an order that takes each source in turn, so that a run cut short by the
deadline still covers every kind. Writes DIR/zoo-cuda.jsonl (one line per entry) and
DIR/zoo-cuda.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Quorum's engine; `--provider cpu` runs the script without a GPU (no PyTorch timing), to try it.
PROVIDER = "cuda"
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))


def flat(out):
    import torch

    if torch.is_tensor(out):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in flat(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in flat(v)]
    return []


def torch_graph_host_ms(module, inputs, iters):
    """PyTorch's graph replay host to host: inputs copied into the captured buffers, replay, outputs
    copied back; NaN (and the reason) when PyTorch cannot capture the model."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m = module.cuda().eval()
    host = [x for x in inputs]
    static = [x.cuda() for x in host]

    def timed(f):
        for _ in range(5):
            f()
        torch.cuda.synchronize()
        ts = []
        for _ in range(iters):
            t = time.perf_counter()
            f()
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts)

    with torch.no_grad():
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    m(*static)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                outs = flat(m(*static))

            def step():
                for d, h in zip(static, host):
                    d.copy_(h)
                g.replay()
                return [o.cpu() for o in outs]

            return timed(step), None
        except Exception as e:  # noqa: BLE001 (a model PyTorch cannot capture is a result)
            return float("nan"), f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def run_quorum(quorum, args, timeout=240):
    r = subprocess.run([quorum, *args], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        err = (r.stderr or r.stdout).strip().splitlines()
        return None, (err[-1] if err else f"exit {r.returncode}")[:300] + f" (exit {r.returncode})"
    return r.stdout, None


def file_stems(names):
    """The file names `quorum run` gives outputs (core/src/output_files.rs: unsafe characters become
    "_", a clash with an earlier name, ignoring case, gets "_2", "_3"...)."""
    taken, out = set(), []
    for n in names:
        base = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in n)
        if not base or base.startswith("."):
            base = f"output{base}"
        stem, k = base, 1
        while stem.lower() in taken:
            k += 1
            stem = f"{base}_{k}"
        taken.add(stem.lower())
        out.append(stem)
    return out


def compare(quorum, model, feeds, files, work, tol=1e-3):
    import numpy as np
    import onnxruntime as ort

    outdir = os.path.join(work, "q")
    shutil.rmtree(outdir, ignore_errors=True)
    _, err = run_quorum(quorum, ["run", model, "--provider", PROVIDER, *files, "--output-dir", outdir])
    if err:
        return False, f"quorum run: {err}"
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    names = [o.name for o in sess.get_outputs()]
    worst = 0.0
    for name, stem, w in zip(names, file_stems(names), want):
        f = os.path.join(outdir, f"{stem}.npy")
        if not os.path.exists(f):
            return False, f"output {name}: not written as {stem}.npy"
        got = np.load(f)
        if got.shape != w.shape:
            return False, f"output {name}: shape {got.shape}, onnxruntime {w.shape}"
        if w.dtype.kind not in "fc":
            if not np.array_equal(got, w):
                return False, f"output {name}: differs (integers)"
            continue
        d = np.abs(got.astype(np.float64) - w.astype(np.float64))
        d = np.where(np.isnan(got) & np.isnan(w), 0.0, d)
        scale = max(float(np.abs(w).max()), 1e-6)
        rel = float(np.nanmax(d)) / scale if d.size else 0.0
        if not rel <= tol:
            return False, f"output {name}: max difference {rel:.1e} of its scale"
        worst = max(worst, rel)
    return True, f"worst {worst:.1e} of scale"


def placement(quorum, model, files):
    out, err = run_quorum(quorum, ["bench", model, "--provider", PROVIDER, "--profile", "--iters", "1",
                                   "--warmup", "0", "--json", *files])
    if err:
        return None, [], err
    j = json.loads(out.strip().splitlines()[-1])
    total = dev = 0.0
    cpu_ops = []
    for row in j.get("profile", []):
        n = row.get("nodes_per_run", 0)
        total += n
        if row.get("provider") == "cpu":
            cpu_ops.append(f"{row['op']}×{n:g}")
        else:
            dev += n
    return (dev / total if total else None), cpu_ops, None


def order(entries):
    """Each source in turn (torchvision, timm, transformers), each in catalogue order."""
    by = {}
    for e in entries:
        by.setdefault(e.source, []).append(e)
    out = []
    while any(by.values()):
        for src in list(by):
            if by[src]:
                out.append(by[src].pop(0))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quorum", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="")
    p.add_argument("--max-mparams", type=float, default=150.0)
    p.add_argument("--deadline-s", type=float, default=420.0)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--provider", default="cuda")
    a = p.parse_args()
    global PROVIDER
    PROVIDER = a.provider

    import numpy as np
    import torch
    from entries import all_entries

    torch.backends.mha.set_fastpath_enabled(False)
    start = time.time()
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    only = [s for s in a.only.split(",") if s]
    entries = [e for e in all_entries() if e.of is None and e.build is not None]
    entries = [e for e in entries if not only or e.name in only]
    rows = []
    jl = open(os.path.join(a.out, "zoo-cuda.jsonl"), "w")
    for e in order(entries):
        if time.time() - start > a.deadline_s:
            break
        row = {"name": e.name, "source": e.source, "family": e.family}
        t0 = time.time()
        try:
            built = e.build()
            params = sum(x.numel() for x in built.module.parameters())
            row["mparams"] = round(params / 1e6, 2)
            if params > a.max_mparams * 1e6:
                row["status"] = "left out"
                row["reason"] = f"over {a.max_mparams} M parameters"
                raise StopIteration
            args = tuple(built.inputs.values())
            if built.list_input:
                args = ([args[0]],)
            path = os.path.join(work, "model.onnx")
            with torch.no_grad():
                torch.onnx.export(built.module.eval(), args, path, input_names=list(built.inputs),
                                  output_names=built.outputs, opset_version=17, do_constant_folding=True,
                                  dynamo=False)
        except StopIteration:
            pass
        except Exception as err:  # noqa: BLE001
            row["status"] = "export failed"
            row["reason"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        if "status" not in row:
            import onnx

            m = onnx.load(path, load_external_data=False)
            inits = {i.name for i in m.graph.initializer}
            names = [i.name for i in m.graph.input if i.name not in inits]
            feeds, files = {}, []
            for k, (n, v) in enumerate(zip(names, built.inputs.values())):
                f = os.path.join(work, f"in{k}.npy")
                np.save(f, v.numpy())
                feeds[n] = v.numpy()
                files += ["--input", f"{n}={f}"]
            ok, detail = compare(a.quorum, path, feeds, files, work)
            row["status"] = "match" if ok else "mismatch"
            row["check"] = detail
            share, cpu_ops, err = placement(a.quorum, path, files)
            row["device_share"] = share
            row["cpu_ops"] = cpu_ops
            out, err = run_quorum(a.quorum, ["bench", path, "--provider", PROVIDER, "--graph", "on", "--iters",
                                             str(a.iters), "--warmup", "5", "--json", *files])
            if err:
                row["quorum_error"] = err
            else:
                j = json.loads(out.strip().splitlines()[-1])
                row["quorum_graph_ms"] = j.get("median_ms")
                row["graph_replays"] = j.get("counters", {}).get("graph_replays")
                row["capture_blocker"] = j.get("capture_blocker")
                # Why a capture did not replay (refused, slower, still warming), and what declined
                # at run time: the first things to read when Quorum's time is behind.
                states = sorted({g.get("state", "") for g in j.get("graphs", [])} - {"replaying"})
                if states and not row["graph_replays"]:
                    row["graph_state"] = "; ".join(states)
                fallbacks = [f"{f['op']}: {f['reason']}" for f in j.get("fallbacks", [])]
                if fallbacks:
                    row["fallbacks"] = "; ".join(fallbacks)
            if not torch.cuda.is_available():
                row["torch_error"] = "no CUDA device for PyTorch"
            elif built.list_input:
                row["torch_error"] = "takes a list of images (not timed)"
            else:
                ms, terr = torch_graph_host_ms(built.module, list(built.inputs.values()), a.iters)
                row["torch_graph_host_ms"] = ms
                if terr:
                    row["torch_error"] = terr
            q, t = row.get("quorum_graph_ms"), row.get("torch_graph_host_ms")
            if q and t and not math.isnan(t):
                row["ratio"] = q / t
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        row["seconds"] = round(time.time() - t0, 1)
        rows.append(row)
        jl.write(json.dumps(row) + "\n")
        jl.flush()
        print(json.dumps({k: row.get(k) for k in ("name", "status", "ratio", "device_share", "seconds")}), flush=True)
    jl.close()
    write_md(a, rows, len(entries), time.time() - start)


def write_md(a, rows, catalogue, wall):
    import torch

    ratios = [r["ratio"] for r in rows if r.get("ratio") and r.get("status") == "match"]
    gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")
    run = [r for r in rows if r.get("status") in ("match", "mismatch")]
    matches = sum(1 for r in run if r["status"] == "match")
    full = sum(1 for r in run if r.get("device_share") == 1.0)
    lines = [
        "# The zoo on CUDA beside PyTorch",
        "",
        f"`benches/gpu/zoo_cuda.py` on {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}"
        f" (Quorum --provider {PROVIDER}), torch {torch.__version__} (TF32 off), "
        f"{len(rows)} of the catalogue's {catalogue} base entries in {wall:.0f} s (the deadline cut the rest; "
        "each source taken in turn). Medians of "
        f"{a.iters} runs, host to host on both sides.",
        "",
        f"- run through Quorum: {len(run)}; match onnxruntime (CPU) within 1e-3 of scale: {matches}; "
        f"every node on the device: {full}",
        f"- Quorum graph replay / PyTorch graph replay, geometric mean over {len(ratios)} matching entries "
        f"PyTorch could capture: **{gm:.2f}**",
        "",
        "| entry | source | family | M params | status | nodes on device | CPU ops | Quorum graph ms | PyTorch graph ms | ratio | note |",
        "|---|---|---|---:|---|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        share = r.get("device_share")
        note = "; ".join(str(r[k]) for k in ("reason", "check", "quorum_error", "torch_error", "capture_blocker", "graph_state", "fallbacks")
                         if r.get(k))
        lines.append(
            f"| {r['name']} | {r['source']} | {r['family']} | {r.get('mparams', '')} | {r.get('status')} | "
            f"{'' if share is None else f'{100 * share:.0f}%'} | {', '.join(r.get('cpu_ops', []))} | "
            f"{r.get('quorum_graph_ms') or '':.4} | {r.get('torch_graph_host_ms') or '':.4} | "
            f"{r.get('ratio') or '':.3} | {note.replace('|', '/')} |"
        )
    with open(os.path.join(a.out, "zoo-cuda.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:8]))


if __name__ == "__main__":
    main()
