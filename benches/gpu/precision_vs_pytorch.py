#!/usr/bin/env python3
"""Quorum against PyTorch at reduced precision on the GPU machine, side by side in one run: issue 40's
table (f16 and bf16 models, and f32 models with TF32 on, against PyTorch at the same precision).

What: for each model (torchvision ResNet-50 and ViT-B/16, transformers' bert-base encoder; random
seeded weights, eval mode) and each precision:
  - f16:  the model exported in f16 (`model.half()`, traced on the GPU); PyTorch f16 graph replay
          (CNNs channels-last with `cudnn.benchmark`), Quorum `bench --graph on` on the f16 file;
  - bf16: likewise with `model.to(torch.bfloat16)` (inputs handed to Quorum as ONNX TensorProto
          files, outputs read back from theirs: numpy has no bfloat16);
  - tf32: the model exported in f32; PyTorch with `allow_tf32` (matmul and cuDNN), Quorum
          `--precision tf32`;
  - f16c, bf16c: the f32 file converted by Quorum at session build (`--precision f16|bf16`, the
          interface staying f32), beside PyTorch running the model in that type;
  - f32:  both exact (TF32 off), the baseline.
Both sides host to host (input copied in, output copied out), medians. Each Quorum output is
compared with PyTorch's f32 output on the same input (largest difference over the largest
magnitude), beside PyTorch's own deviation at that precision. With `--strict MODEL,...`, Quorum
also runs those models' f16 and bf16 files once under strict verification (every device node
judged by both CPU oracles) and the table gives the verdict.

    python3 precision_vs_pytorch.py --quorum B/quorum --out DIR [--models ...] [--precisions ...]
        [--strict resnet50,vit_b_16]

Runs on the GPU machine (torch, numpy there). Nothing is asserted: the table is the output.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# name: (source, architecture, batch)
MODELS = {
    "resnet50": ("torchvision", "resnet50", 1),
    "resnet50_b32": ("torchvision", "resnet50", 32),
    "vit_b_16": ("torchvision", "vit_b_16", 1),
    "bert_base": ("bert", "bert-base", 1),
    "bert_base_b8": ("bert", "bert-base", 8),
}
SEQ = 128


def build(name: str):
    import torch

    source, arch, batch = MODELS[name]
    torch.manual_seed(7)
    # nn.MultiheadAttention's fused inference path (torchvision's ViT) has no ONNX export: the
    # exporter needs the composite ops, and PyTorch is timed on the same path it exported.
    if hasattr(torch.backends, "mha"):
        torch.backends.mha.set_fastpath_enabled(False)
    g = torch.Generator().manual_seed(7)
    if source == "torchvision":
        import torchvision

        return getattr(torchvision.models, arch)(weights=None).eval(), \
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
            # No attention mask: the export PyTorch can capture in a CUDA graph (transformers
            # builds the mask's fill value on the host).
            return self.bert(input_ids=ids).last_hidden_state

    return Encoder().eval(), torch.randint(0, cfg.vocab_size, (batch, SEQ), generator=g)


def cnn(name: str) -> bool:
    return MODELS[name][0] == "torchvision" and "vit" not in name


def export(model, x, path: str) -> None:
    import torch

    if os.path.exists(path):
        return
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, opset_version=17, input_names=["x"],
                          output_names=["y"], dynamo=False)


def median_ms(f, iters: int) -> float:
    import torch

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


def torch_graph_host(model, x, iters: int, channels_last: bool) -> tuple[float, object]:
    """PyTorch graph replay host to host (copy in, replay, copy out), and its output."""
    import torch

    m = model.cuda()
    xd = x.cuda()
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
        xd = xd.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        static_x = xd.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                m(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = m(static_x)

        def run():
            static_x.copy_(x)
            g.replay()
            return static_y.cpu()

        ms = median_ms(run, iters)
        out = run().float().numpy()
    return ms, out


def quorum(q: str, model: str, extra: list[str], timeout: int = 300) -> dict:
    cmd = [q, "bench", model, "--provider", "cuda", "--json", *extra]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {timeout} s"}
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-300:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def quorum_output(q: str, model: str, xfile: str, work: str, extra: list[str]):
    import glob
    import shutil

    import numpy as np

    outdir = os.path.join(work, "q-out")
    shutil.rmtree(outdir, ignore_errors=True)
    r = subprocess.run([q, "run", model, "--provider", "cuda", "--input", f"x={xfile}",
                        "--output-dir", outdir, *extra], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        return None, (r.stderr or r.stdout).strip()[-200:]
    path = sorted(glob.glob(os.path.join(outdir, "*.npy")) + glob.glob(os.path.join(outdir, "*.pb")))[0]
    if path.endswith(".npy"):
        return np.load(path).astype(np.float32), ""
    # A bfloat16 output comes as an ONNX TensorProto: its 16 bits are the high half of an f32.
    from onnx import TensorProto

    t = TensorProto()
    with open(path, "rb") as fh:
        t.ParseFromString(fh.read())
    if t.data_type != TensorProto.BFLOAT16:
        return None, f"output of ONNX type {t.data_type}"
    bits = (np.frombuffer(t.raw_data, dtype="<u2") if t.raw_data
            else np.array(t.int32_data, dtype=np.uint32).astype(np.uint16))
    return (bits.astype(np.uint32) << 16).view(np.float32).reshape(tuple(t.dims)), ""


def save_input(x, path: str) -> str:
    """Writes `x` where `quorum --input` reads it: `.npy`, or an ONNX TensorProto for bfloat16."""
    import numpy as np
    import torch

    if x.dtype != torch.bfloat16:
        np.save(path, x.numpy())
        return path
    from onnx import TensorProto

    t = TensorProto()
    t.data_type = TensorProto.BFLOAT16
    t.dims.extend(x.shape)
    t.raw_data = x.contiguous().view(torch.int16).numpy().tobytes()
    path = path.removesuffix(".npy") + ".pb"
    with open(path, "wb") as fh:
        fh.write(t.SerializeToString())
    return path


def deviation(got, want) -> str:
    import numpy as np

    if got is None:
        return "-"
    d = np.abs(got.astype(np.float64) - want.astype(np.float64)).max()
    return f"{d / max(np.abs(want).max(), 1e-30):.1e}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quorum", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet50,vit_b_16,bert_base,bert_base_b8,resnet50_b32")
    ap.add_argument("--precisions", default="f16,tf32,f32")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--strict", default="", help="models whose f16/bf16 files run once strictly")
    ap.add_argument("--ncu", default="", help="models whose f16 files Nsight Compute profiles")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import numpy as np
    import torch

    strict = [m for m in args.strict.split(",") if m]
    rows, profiles = [], []
    for name in args.models.split(","):
        model, x = build(name)
        # The f32 reference: PyTorch, TF32 off.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        with torch.no_grad():
            ref = model.cuda()(x.cuda()).float().cpu().numpy()
        for prec in args.precisions.split(","):
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
            torch.backends.cudnn.allow_tf32 = prec == "tf32"
            torch.backends.cudnn.benchmark = cnn(name)
            m, xx = model, x
            converted = prec in ("f16c", "bf16c")
            half = {"f16": torch.float16, "bf16": torch.bfloat16}.get(prec.removesuffix("c"))
            if half is not None:
                import copy

                m = copy.deepcopy(model).to(half)
                if x.dtype.is_floating_point:
                    xx = x.to(half)
            exported = prec if half is not None and not converted else "f32"
            path = os.path.join(args.out, f"{name}-{exported}.onnx")
            try:
                export((model if converted else m).cuda(), (x if converted else xx).cuda(), path)
            except Exception as e:
                print(json.dumps({"model": name, "precision": prec, "export_error": str(e)[-300:]}),
                      flush=True)
                continue
            # A converted model keeps its f32 interface: it takes the f32 input.
            xfile = save_input(x if converted else xx, os.path.join(args.out, f"{name}-{prec}-x.npy"))
            try:
                t_ms, t_out = torch_graph_host(m, xx, args.iters, cnn(name))
            except RuntimeError as e:
                t_ms, t_out = float("nan"), None
                print(json.dumps({"model": name, "torch_error": str(e)[-300:]}), flush=True)
            qx = (["--precision", "tf32"] if prec == "tf32" else
                  ["--precision", prec.removesuffix("c")] if converted else [])
            inp = ["--input", f"x={xfile}"]
            qg = quorum(args.quorum, path, ["--graph", "on", "--iters", str(args.iters),
                                            "--warmup", "5", *inp, *qx])
            q1 = quorum(args.quorum, path, ["--iters", str(args.iters), "--warmup", "5", *inp, *qx])
            q_out, q_err = quorum_output(args.quorum, path, xfile, args.out, qx)
            if prec == "f16" and name in args.ncu.split(","):
                sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
                from models_vs_pytorch import ncu_profile

                prof = ncu_profile(args.quorum, path, f"x={xfile}", 240)
                profiles.append((name, prof))
                print(json.dumps({"ncu": name, **{k: v for k, v in prof.items()
                                                   if k not in ("kernels", "grids")},
                                  "top": prof.get("kernels", [])[:12]}), flush=True)
            verdict = ""
            if half is not None and name in strict:
                s = quorum(args.quorum, path, ["--iters", "1", "--warmup", "0", "--verify",
                                               "strict", *inp, *qx], timeout=900)
                verdict = "strict: " + ("pass" if "error" not in s else s["error"][-160:])
            row = {"model": name, "precision": prec, "torch_graph_host_ms": t_ms,
                   "quorum_graph_ms": qg.get("median_ms"), "quorum_eager_ms": q1.get("median_ms"),
                   "quorum_error": qg.get("error") or q1.get("error") or q_err or None,
                   "quorum_dev": deviation(q_out, ref),
                   "torch_dev": deviation(t_out, ref), "strict": verdict}
            print(json.dumps(row), flush=True)
            rows.append(row)
    lines = [
        f"Same run on {torch.cuda.get_device_name(0)}, torch {torch.__version__}; medians of "
        f"{args.iters} runs in ms, host to host on both sides (PyTorch: copy in, CUDA-graph replay, "
        "copy out; Quorum: `quorum bench --provider cuda`, graph replay and eager). f16, bf16: the "
        "model exported in that type; tf32: the f32 file with TF32 on both sides (`--precision tf32`, "
        "`allow_tf32`); f32: TF32 off on both. PyTorch's CNNs run channels-last with "
        "`cudnn.benchmark`. Deviation: largest difference from PyTorch's f32 output over its "
        "largest magnitude.",
        "",
        "| model | precision | PyTorch graph | Quorum graph | Quorum eager | Quorum / PyTorch "
        "| Quorum deviation | PyTorch deviation | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        def f(v):
            return "error" if v is None else ("-" if v != v else f"{v:.3f}")
        ratio = (f"{r['quorum_graph_ms'] / r['torch_graph_host_ms']:.2f}"
                 if r["quorum_graph_ms"] and r["torch_graph_host_ms"] == r["torch_graph_host_ms"]
                 else "-")
        note = "; ".join(x for x in [r["strict"], (r["quorum_error"] or "")[:120]] if x)
        source, _, batch = MODELS[r["model"]]
        lines.append(f"| {r['model'].removesuffix('_b8').removesuffix('_b32')} b{batch} "
                     f"| {r['precision']} | {f(r['torch_graph_host_ms'])} "
                     f"| {f(r['quorum_graph_ms'])} | {f(r['quorum_eager_ms'])} | {ratio} "
                     f"| {r['quorum_dev']} | {r['torch_dev']} | {note} |")
    if profiles:
        lines += ["", "Kernel time of one eager f16 run (Nsight Compute, `--clock-control none`, "
                  "one stream): total, launches, and the kernels with the most time.", ""]
        for name, prof in profiles:
            if "error" in prof:
                lines.append(f"- {name}: {prof['error']}")
                continue
            lines.append(f"- **{name}** f16: {prof['total_us']:.0f} µs over {prof['launches']} "
                         "launches: " + ", ".join(
                             f"`{k}` {100 * t / prof['total_us']:.1f}% ({c}×)"
                             for k, t, c in prof["kernels"][:10]) + ".")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "precision-vs-pytorch.md"), "w") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
