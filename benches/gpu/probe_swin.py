#!/usr/bin/env python3
"""Where Swin-T leaves the device (issue 41): exports torchvision's swin_t (random weights, eval, opset
17, the TorchScript exporter as users call it) and a narrow twin with the same graph (embed 16, one
head per stage: tiny weights, small enough to bring back and study on a machine without a GPU), then
prints `quorum info --provider cuda` for swin_t.

    python3 probe_swin.py --quorum target/gpu-bundle/quorum --out DIR
"""
import argparse
import os
import subprocess

import torch
import torchvision
from torchvision.models.swin_transformer import SwinTransformer


def export(model, path):
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        torch.onnx.export(model.eval(), (x,), path, opset_version=17, input_names=["x"],
                          output_names=["y"], dynamo=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quorum", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    tiny = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2, 6, 2], num_heads=[1, 1, 1, 1],
                           window_size=[7, 7], stochastic_depth_prob=0.0)
    export(tiny, os.path.join(a.out, "swin_tiny16.onnx"))
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    full = os.path.join(work, "swin_t.onnx")
    export(torchvision.models.swin_t(weights=None), full)
    for args in (["bench", "--provider", "cuda", "--iters", "20", "--graph", "off", "--profile", full],
                 ["bench", "--provider", "cuda", "--iters", "50", "--graph", "on", full],
                 ["bench", "--provider", "cuda", "--iters", "20", "--graph", "on", "--json", full]):
        r = subprocess.run([a.quorum, *args], capture_output=True, text=True, timeout=240)
        print("$ quorum", " ".join(args), "->", r.returncode)
        out = r.stdout
        if "--json" in args:
            import json
            j = json.loads(out.splitlines()[0])
            out = json.dumps({k: j.get(k) for k in ("median_ms", "graph_capture", "capture_blocker",
                                                   "counters", "folded_nodes")})
        print(out[-6000:], r.stderr[-2000:])


if __name__ == "__main__":
    main()
