#!/usr/bin/env python3
"""Quorum against PyTorch on the GPU machine, side by side in one run.

What: exports the models of issue 16's table (torchvision CNNs, timm's ViT-S/16, a BERT-base encoder
from transformers; random weights, eval mode) to ONNX with the torch found on the GPU machine (and
takes the corpus's light models as they are, run in PyTorch by `onnx_torch.py`), times
PyTorch (eager, CUDA-graph replay, host to host) and Quorum (`quorum bench`: one stream, several
streams, graph replay) on the same model in the same run, checks Quorum's outputs against
onnxruntime (CPU) on the same file and input, and writes a Markdown table. With `--ncu`, Nsight
Compute times every kernel of one Quorum run per model and a second table gives each kernel's share.
Why: a speed claim is only worth its anchor measured beside it, on the same machine, the same day.

    python3 models_vs_pytorch.py --quorum target/gpu-bundle/quorum --out DIR [--models resnet18,...]
        [--ncu MODEL,...] [--extras]

Runs on the GPU machine (torch 2.11, onnxruntime, numpy there); TF32 is off for PyTorch.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# name: (source, architecture, batch). Sources: torchvision, timm, and "bert" (transformers' BertModel
# with BertConfig's defaults: bert-base, 12 layers, hidden 768, sequence 128, eager attention).
MODELS = {
    "resnet18": ("torchvision", "resnet18", 1),
    "resnet50": ("torchvision", "resnet50", 1),
    "mobilenet_v2": ("torchvision", "mobilenet_v2", 1),
    "efficientnet_b0": ("torchvision", "efficientnet_b0", 1),
    "resnet50_b8": ("torchvision", "resnet50", 8),
    "convnext_tiny": ("torchvision", "convnext_tiny", 1),
    "swin_t": ("torchvision", "swin_t", 1),
    "vit_small": ("timm", "vit_small_patch16_224", 1),
    "bert_base": ("bert", "bert-base", 1),
    "bert_base_b8": ("bert", "bert-base", 8),
}
# The corpus's light models (ONNX files only; weights are ConstantOfShape fills): PyTorch runs the
# same graph through `onnx_torch.OnnxTorch`, its nodes as the PyTorch calls a model would make.
LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]
MODELS.update({f"light_{m}": ("light", m, 1) for m in LIGHT})
LIGHT_DIR = "target/corpus/onnx-1.23.2/light"
LIGHT_CHECK: str | None = None  # onnx_torch.self_check's verdict, once per run ("" = agrees)
SEQ = 128


def build(name: str):
    """The eval-mode module and its seeded input."""
    import torch

    source, arch, batch = MODELS[name]
    g = torch.Generator().manual_seed(7)
    if source == "light":
        import glob

        import onnx
        from onnx import numpy_helper

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from onnx_torch import OnnxTorch, self_check

        # The translation is checked against onnxruntime on random weights once per run; a light
        # model is not timed on a translation that fails it.
        global LIGHT_CHECK
        if LIGHT_CHECK is None:
            LIGHT_CHECK = self_check() or ""
        if LIGHT_CHECK:
            raise RuntimeError(f"onnx_torch disagrees with onnxruntime: {LIGHT_CHECK}")

        folder = os.path.join(LIGHT_DIR, f"test_{arch}")
        x = numpy_helper.to_array(onnx.load_tensor(
            sorted(glob.glob(os.path.join(folder, "test_data_set_0", "input_0.pb")))[0])).copy()
        return OnnxTorch(os.path.join(folder, "model.onnx")).eval(), torch.from_numpy(x)
    if source == "torchvision":
        import torchvision
        return getattr(torchvision.models, arch)(weights=None).eval(), \
            torch.randn(batch, 3, 224, 224, generator=g)
    if source == "timm":
        import timm
        return timm.create_model(arch, pretrained=False).eval(), \
            torch.randn(batch, 3, 224, 224, generator=g)
    from transformers import BertConfig, BertModel

    try:  # eager attention: MatMul → Softmax → MatMul, as exporters commonly write it
        cfg = BertConfig(attn_implementation="eager")
    except Exception:
        cfg = BertConfig()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel(cfg, add_pooling_layer=False)

        def forward(self, ids):
            # The mask and segment ids made from the input, on its device (a graph capture
            # cannot copy host tensors in).
            return self.bert(input_ids=ids, attention_mask=torch.ones_like(ids),
                             token_type_ids=torch.zeros_like(ids)).last_hidden_state

    return Encoder().eval(), torch.randint(0, cfg.vocab_size, (batch, SEQ), generator=g)


def export(name: str, out_dir: str) -> tuple[str, object]:
    import torch

    model, x = build(name)
    if MODELS[name][0] == "light":
        return os.path.join(LIGHT_DIR, f"test_{MODELS[name][1]}", "model.onnx"), (model, x)
    path = os.path.join(out_dir, f"{name}.onnx")
    if not os.path.exists(path):
        with torch.no_grad():
            torch.onnx.export(model, (x,), path, opset_version=17, input_names=["x"],
                              output_names=["y"], dynamo=False)
    return path, (model, x)


def label(name: str) -> str:
    source, arch, batch = MODELS[name]
    if source == "light":
        return f"light {arch} b{batch}"
    base = name[:-3] if name.endswith("_b8") else name
    extra = f", seq {SEQ}" if source == "bert" else ""
    return f"{base}{extra} b{batch}"


def time_torch(model, x, iters: int) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m = model.cuda()
    xd = x.cuda()

    def median_ms(f):
        for _ in range(10):
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
        eager = median_ms(lambda: m(xd))
        host = median_ms(lambda: m(x.cuda()).cpu())
        static_x = xd.clone()
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    m(static_x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                static_y = m(static_x)
            graph = median_ms(lambda: g.replay())

            def graph_host():
                # As Quorum's bench runs: the input from host memory, the output back to it.
                static_x.copy_(x)
                g.replay()
                return static_y.cpu()
            graph_host_ms = median_ms(graph_host)
            del static_y
        except RuntimeError as e:  # a model PyTorch cannot capture: say so, go on
            print(json.dumps({"torch_graph_error": str(e)[:300]}), flush=True)
            graph = graph_host_ms = float("nan")
        ref = m(xd).cpu().numpy()
    return {"eager_ms": eager, "graph_ms": graph, "host_ms": host, "graph_host_ms": graph_host_ms,
            "reference": ref}


def quorum_bench(quorum: str, model: str, extra: list[str], iters: int) -> dict:
    """`quorum bench` on CUDA; `extra` may name the input file (`--input x=FILE`)."""
    cmd = [quorum, "bench", model, "--provider", "cuda", "--iters", str(iters), "--warmup", "5",
           "--json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-400:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def save_input(x, work: str, name: str) -> str:
    """The model's input as .npy (float32, or int64 token ids), for Quorum and onnxruntime alike."""
    import numpy as np

    xin = x.numpy()
    xin = xin.astype(np.float32) if xin.dtype.kind == "f" else xin.astype(np.int64)
    path = os.path.join(work, f"{name}-x.npy")
    np.save(path, xin)
    return path


def check_against_ort(quorum: str, model: str, xfile: str, work: str, input_name: str = "x") -> str:
    """Quorum's (first and only) output against onnxruntime's on the same file and input."""
    import glob
    import shutil

    import numpy as np
    import onnxruntime as ort

    xin = np.load(xfile)
    outdir = os.path.join(work, "q")
    shutil.rmtree(outdir, ignore_errors=True)
    r = subprocess.run([quorum, "run", model, "--provider", "cuda", "--input",
                        f"{input_name}={xfile}", "--output-dir", outdir],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return f"quorum run failed: {r.stderr.strip()[-200:]}"
    got = np.load(sorted(glob.glob(os.path.join(outdir, "*.npy")))[0])
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = sess.run(None, {input_name: xin})[0]
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    scale = np.abs(want).max()
    note = ""
    if np.ptp(want) < 1e-6 * max(scale, 1e-30):
        note = "; every element equal: agreement says little"
    return f"max abs diff {diff.max():.2e} (max |y| {scale:.2e}{note})"


def find_ncu() -> str | None:
    import glob
    import shutil

    found = shutil.which("ncu")
    if found:
        return found
    cands = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob("/usr/local/cuda*/bin/ncu"))
    return cands[-1] if cands else None


def ncu_profile(quorum: str, model: str, feed: str, timeout: int) -> dict:
    """Every kernel of one eager Quorum run (one stream) timed by Nsight Compute: time per kernel
    name, launches, and the five longest launches. The run is a session's first, so its kernels
    are the steady state's (modules are built before launch; nothing else differs)."""
    import csv
    import io

    ncu = find_ncu()
    if ncu is None:
        return {"error": "ncu not found"}
    cmd = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
           "--print-units", "base", quorum, "bench", model, "--provider", "cuda", "--iters", "1",
           "--warmup", "0", "--streams", "1", "--input", feed]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"ncu ran past {timeout} s"}
    lines = r.stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        return {"error": (r.stderr or r.stdout).strip()[-300:]}
    per, launches, grids = {}, [], {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(row["Metric Value"].replace(",", ""))
        k = row["Kernel Name"]
        t, c = per.get(k, (0.0, 0))
        per[k] = (t + ns, c + 1)
        grid = row.get("Grid Size", "")
        g = grids.setdefault(k, {})
        gt, gc = g.get(grid, (0.0, 0))
        g[grid] = (gt + ns, gc + 1)
        launches.append((ns, k, grid, row.get("Block Size", "")))
    total = sum(t for t, _ in per.values())
    launches.sort(reverse=True)
    return {"total_us": total / 1e3, "launches": sum(c for _, c in per.values()),
            "kernels": sorted(((k, t / 1e3, c) for k, (t, c) in per.items()),
                              key=lambda e: -e[1]),
            "longest": [(ns / 1e3, k, g, b) for ns, k, g, b in launches[:5]],
            # Per kernel, its three grids of most time: (grid, µs in all, launches).
            "grids": {k: sorted(((gr, t / 1e3, c) for gr, (t, c) in g.items()),
                                key=lambda e: -e[1])[:3] for k, g in grids.items()}}


def ncu_lines(name: str, p: dict) -> list[str]:
    if "error" in p:
        return [f"- {label(name)}: {p['error']}"]
    out = [f"- **{label(name)}**: {p['total_us']:.0f} µs of kernel time over {p['launches']} "
           "launches (one run, serialised by the profiler). Shares: " +
           ", ".join(f"`{k}` {100 * t / p['total_us']:.1f}% ({c}×, {t / c:.1f} µs each)"
                     for k, t, c in p["kernels"][:8]) + ".",
           "  Longest launches: " + "; ".join(f"`{k}` {us:.1f} µs (grid {g}, block {b})"
                                            for us, k, g, b in p["longest"]) + ".",
           "  Grids of the top kernels: " + "; ".join(
               f"`{k}` " + ", ".join(f"{g} {t:.0f} µs/{c}×" for g, t, c in p["grids"].get(k, []))
               for k, _, _ in p["kernels"][:5]) + "."]
    return out


def chain_model(path: str, nodes: int) -> None:
    """A chain of `nodes` Relu nodes over 64 floats: nearly all host overhead per node."""
    import onnx
    from onnx import TensorProto, helper

    names = ["x"] + [f"t{i}" for i in range(nodes - 1)] + ["y"]
    graph = helper.make_graph(
        [helper.make_node("Relu", [names[i]], [names[i + 1]]) for i in range(nodes)],
        "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def extras(quorum: str, out: str, light: str, iters: int) -> list[str]:
    """Host overhead per node, streams on branchy light models, and threads on one session."""
    lines = ["", "Host overhead per launched node (a chain of 200 Relu over 64 floats, `quorum bench`):",
             "", "| mode | median ms per run | µs per node |", "|---|---|---|"]
    chain = os.path.join(out, "chain200.onnx")
    chain_model(chain, 200)
    for label, extra in [("eager", []), ("graph replay", ["--graph", "on"])]:
        q = quorum_bench(quorum, chain, extra, iters)
        if "median_ms" in q:
            lines.append(f"| {label} | {q['median_ms']:.3f} | {q['median_ms'] * 1e3 / 200:.2f} |")
            print(json.dumps({"chain": label, "median_ms": q["median_ms"]}), flush=True)
    lines += ["", "Light models, one stream against several (eager) and graph replay:", "",
              "| model | 1 stream | 4 streams | graph, 4 streams | streams used |", "|---|---|---|---|---|"]
    for m in ["inception_v1", "densenet121", "inception_v2", "resnet50", "squeezenet"]:
        path = os.path.join(light, f"test_{m}", "model.onnx")
        if not os.path.exists(path):
            continue
        r = [quorum_bench(quorum, path, e, iters) for e in
             (["--streams", "1"], ["--streams", "4"], ["--streams", "4", "--graph", "on"])]
        med = [f"{x['median_ms']:.3f}" if "median_ms" in x else "error" for x in r]
        lines.append(f"| {m} | {med[0]} | {med[1]} | {med[2]} | {r[1].get('streams')} |")
        print(json.dumps({"light": m, "medians": med}), flush=True)
    path = os.path.join(light, "test_resnet50", "model.onnx")
    if os.path.exists(path):
        lines += ["", "One session of light resnet50 from several threads (eager, 1 stream):", "",
                  "| threads | runs per second | median ms per run |", "|---|---|---|"]
        for n in [1, 2, 4, 8]:
            q = quorum_bench(quorum, path, ["--concurrency", str(n)], max(10, iters // 2))
            if "throughput_per_s" in q:
                lines.append(f"| {n} | {q['throughput_per_s']:.1f} | {q['median_ms']:.3f} |")
                print(json.dumps({"threads": n, "throughput": q["throughput_per_s"]}), flush=True)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quorum", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--light", default="target/corpus/onnx-1.23.2/light")
    ap.add_argument("--ncu", default="", help="models whose kernels Nsight Compute times")
    ap.add_argument("--ncu-timeout", type=int, default=150)
    ap.add_argument("--extras", action="store_true",
                    help="also host overhead per node, streams on light models, threads")
    args = ap.parse_args()
    global LIGHT_DIR
    LIGHT_DIR = args.light
    os.makedirs(args.out, exist_ok=True)
    import torch

    rows, profiles = [], []
    ncu_models = [m for m in args.ncu.split(",") if m]
    for name in args.models.split(","):
        try:
            path, (model, x) = export(name, args.out)
        except Exception as e:  # an exporter the machine lacks: say so, go on
            print(json.dumps({"model": name, "export_error": str(e)[-300:]}), flush=True)
            continue
        xfile = save_input(x, args.out, name)
        input_name = getattr(model, "input", "x")
        inp = ["--input", f"{input_name}={xfile}"]
        t = time_torch(model, x, args.iters)
        q1 = quorum_bench(args.quorum, path, ["--streams", "1", *inp], args.iters)
        qs = quorum_bench(args.quorum, path, ["--streams", str(args.streams), *inp], args.iters)
        qg = quorum_bench(args.quorum, path, ["--streams", "1", "--graph", "on", *inp], args.iters)
        qgs = quorum_bench(args.quorum, path,
                           ["--streams", str(args.streams), "--graph", "on", *inp], args.iters)
        check = check_against_ort(args.quorum, path, xfile, args.out, input_name)
        rows.append((name, t, q1, qs, qg, qgs, check))
        if name in ncu_models:
            p = ncu_profile(args.quorum, path, f"{input_name}={xfile}", args.ncu_timeout)
            profiles.append((name, p))
            print(json.dumps({"ncu": name, **{k: v for k, v in p.items()
                                               if k not in ("kernels", "grids")},
                              "top": p.get("kernels", [])[:10]}), flush=True)
        print(json.dumps({"model": name, "torch": {k: v for k, v in t.items() if k != "reference"},
                          "quorum_1": q1.get("median_ms"), "quorum_streams": qs.get("median_ms"),
                          "quorum_graph": qg.get("median_ms"),
                          "quorum_graph_streams": qgs.get("median_ms"),
                          "graphs": qg.get("graphs"), "errors": [q.get("error") for q in
                                                                  (q1, qs, qg, qgs) if "error" in q],
                          "check": check}), flush=True)
    lines = [
        f"Same run on {torch.cuda.get_device_name(0)}, torch {torch.__version__} (TF32 off), "
        f"medians of {args.iters} runs in ms. Quorum through `quorum bench --provider cuda` (input "
        "from the host, output back to it); its graph replay includes those copies, as does "
        "PyTorch's \"graph, host to host\" (copy in, replay, copy out), the like-for-like anchor.",
        "",
        "| model | PyTorch eager | PyTorch graph replay | PyTorch host to host | PyTorch graph, host "
        f"to host | Quorum 1 stream | Quorum {args.streams} streams | Quorum graph replay | Quorum "
        f"graph, {args.streams} streams | Quorum graph / PyTorch graph, host to host "
        "| Quorum vs onnxruntime |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t, q1, qs, qg, qgs, check in rows:
        def f(q):
            return f"{q['median_ms']:.3f}" if "median_ms" in q else "error"
        ratio = (f"{qg['median_ms'] / t['graph_host_ms']:.2f}"
                 if "median_ms" in qg and t["graph_host_ms"] == t["graph_host_ms"] else "-")
        lines.append(f"| {label(name)} | {t['eager_ms']:.3f} | {t['graph_ms']:.3f} | {t['host_ms']:.3f} "
                     f"| {t['graph_host_ms']:.3f} | {f(q1)} | {f(qs)} | {f(qg)} | {f(qgs)} | {ratio} "
                     f"| {check} |")
    if profiles:
        lines += ["", "Kernel time per model (Nsight Compute, `--clock-control none`, one eager run, "
                  "one stream):", ""]
        for name, p in profiles:
            lines += ncu_lines(name, p)
    if args.extras:
        lines += extras(args.quorum, args.out, args.light, args.iters)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "models-vs-pytorch.md"), "w") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
