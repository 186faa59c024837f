#!/usr/bin/env python3
"""Quantized (QDQ) zoo entries on the GPU machine: each base entry exported there with its own torch
(`benches/zoo/export.py`), quantized by onnxruntime's quantizer (static QDQ: u8 activations, s8
weights; dynamic: int8 weights), and run through `quorum --provider cuda` beside onnxruntime.

    python3 benches/gpu/qdq_cuda.py --quorum target/gpu-bundle/quorum --out DIR [--only a,b]

Per entry: whether Quorum's output matches onnxruntime's (CPU) within the zoo's tolerance for
quantized models (5e-2 of the output's scale), the share of nodes on the device and the ops left on
the CPU, and host-to-host medians of Quorum (graph capture on) on the quantized model and on its f32
base, with onnxruntime's own time on the quantized model (its CUDA provider where this onnxruntime
has one, else its CPU provider: the column says which). Writes DIR/qdq-cuda.jsonl and DIR/qdq-cuda.md.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo_cuda  # noqa: E402

BASES = ["tv_resnet18", "tv_mobilenet_v2", "tv_efficientnet_b0", "hf_bert", "hf_distilbert", "timm_vit_tiny_patch16_224"]


def bench_ms(quorum, model, files, iters):
    out, err = zoo_cuda.run_quorum(quorum, ["bench", model, "--provider", "cuda", "--graph", "on", "--iters", str(iters),
                                            "--json", *files])
    if err:
        return None, err
    j = json.loads(out.strip().splitlines()[-1])
    return j.get("median_ms"), None


def ort_ms(model, feeds, iters):
    import onnxruntime as ort

    prov = "CUDAExecutionProvider" if "CUDAExecutionProvider" in ort.get_available_providers() else "CPUExecutionProvider"
    s = ort.InferenceSession(model, providers=[prov])
    for _ in range(3):
        s.run(None, feeds)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        s.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2], prov.replace("ExecutionProvider", "")


def main():
    import numpy as np

    ap = argparse.ArgumentParser()
    ap.add_argument("--quorum", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--deadline-s", type=float, default=400)
    a = ap.parse_args()
    start = time.time()
    bases = [b for b in a.only.split(",") if b] or BASES
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    rows = []
    for base in bases:
        if time.time() - start > a.deadline_s:
            break
        names = [base, f"{base}_qdq_static", f"{base}_qdq_dynamic"]
        subprocess.run([sys.executable, os.path.join(HERE, "..", "zoo", "export.py"), work, *names],
                       capture_output=True, text=True, timeout=600)
        base_model = os.path.join(work, base, "model.onnx")
        for name in names[1:]:
            d = os.path.join(work, name)
            row = {"name": name, "of": base}
            if not os.path.exists(os.path.join(d, "meta.json")):
                err = os.path.join(d, "error.json")
                row["status"] = "export failed"
                row["note"] = open(err).read()[-300:] if os.path.exists(err) else "no meta.json"
                rows.append(row)
                continue
            meta = json.load(open(os.path.join(d, "meta.json")))
            model = os.path.join(d, "model.onnx")
            files, feeds = [], {}
            for k, (n, v) in enumerate(meta["inputs"].items()):
                f = os.path.join(d, v["file"])
                files += ["--input", f"{n}={f}"]
                feeds[n] = np.load(f)
            ok, note = zoo_cuda.compare(a.quorum, model, feeds, files, d, tol=5e-2)
            row["status"] = "match" if ok else "mismatch"
            row["note"] = note
            share, cpu_ops, err = zoo_cuda.placement(a.quorum, model, files)
            row["device_share"], row["cpu_ops"] = share, cpu_ops
            row["quorum_ms"], err = bench_ms(a.quorum, model, files, a.iters)
            if err:
                row["note"] += f"; bench: {err}"
            row["quorum_f32_ms"], _ = bench_ms(a.quorum, base_model, files, a.iters)
            try:
                row["ort_ms"], row["ort_provider"] = ort_ms(model, feeds, a.iters)
            except Exception as e:  # noqa: BLE001
                row["ort_error"] = str(e)[:200]
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(a.out, "qdq-cuda.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    f3 = lambda v: f"{v:.3f}" if isinstance(v, float) else ("" if v is None else str(v))
    lines = [
        "| entry | status | nodes on device | CPU ops | Quorum cuda ms (quantized) | Quorum cuda ms (f32 base) | onnxruntime ms | note |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        share = f"{100 * r['device_share']:.0f}%" if r.get("device_share") is not None else ""
        ort_col = f"{f3(r.get('ort_ms'))} ({r.get('ort_provider', '')})" if r.get("ort_ms") else r.get("ort_error", "")
        lines.append(f"| {r['name']} | {r['status']} | {share} | {', '.join(r.get('cpu_ops', []))} | {f3(r.get('quorum_ms'))} | "
                     f"{f3(r.get('quorum_f32_ms'))} | {ort_col} | {r.get('note', '')} |")
    with open(os.path.join(a.out, "qdq-cuda.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
