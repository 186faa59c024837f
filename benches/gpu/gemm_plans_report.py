#!/usr/bin/env python3
"""Turns the `bench_gemm_plans` device benchmark's output into a markdown table.

    python3 benches/gpu/gemm_plans_report.py plans.log [--device "NVIDIA H200"] > reports/cuda/gemm-plans.md

Per shape: the plan the cost model chose and its measured time, the fastest plan measured and its
time, and how far the model's estimates were from the measurements (median ratio over every plan of
the shape), so a re-fit of `matmul/plan.rs` can see where it is wrong.
"""
import argparse
import math
import re
import statistics
import sys

LINE = re.compile(
    r"^BENCH gemm_plan (\d+)x(\d+)x(\d+) nb(\d+) (\w+) (\d+) (\d+) ([\d.]+) ([\d.]+)( chosen)?$"
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--device", default="")
    args = ap.parse_args()
    shapes = {}
    order = []
    for raw in open(args.log, encoding="utf-8", errors="replace"):
        m = LINE.match(raw.strip())
        if not m:
            continue
        key = tuple(int(m.group(i)) for i in range(1, 5))
        if key not in shapes:
            shapes[key] = []
            order.append(key)
        shapes[key].append(
            {
                "variant": m.group(5),
                "splits": int(m.group(6)),
                "kc": int(m.group(7)),
                "us": float(m.group(8)),
                "model": float(m.group(9)),
                "chosen": bool(m.group(10)),
            }
        )
    if not shapes:
        sys.exit(f"no `BENCH gemm_plan` lines in {args.log}")
    out = ["# GEMM launch plans: the cost model's choice against every plan measured", ""]
    if args.device:
        out.append(f"Device: {args.device}. ")
    out.append(
        "Every tiled plan (tile × K splits) timed by `bench_gemm_plans` (CUDA events, median), "
        "f32, A shared, B batched. *model/measured* is the median over the shape's plans of the "
        "model's estimate over the measurement."
    )
    out.append("")
    out.append(
        "| M×N×K | batch | chosen | chosen µs | fastest | fastest µs | chosen / fastest | model / measured |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    logs = []
    for key in order:
        plans = shapes[key]
        best = min(plans, key=lambda p: p["us"])
        chosen = next((p for p in plans if p["chosen"]), None)
        ratio = chosen["us"] / best["us"] if chosen else float("nan")
        if chosen:
            logs.append(math.log(ratio))
        fit = statistics.median(p["model"] / p["us"] for p in plans)
        name = lambda p: f"{p['variant'].lower()} ×{p['splits']}"
        out.append(
            f"| {key[0]}×{key[1]}×{key[2]} | {key[3]} | {name(chosen) if chosen else '-'} | "
            f"{chosen['us'] if chosen else float('nan'):.1f} | {name(best)} | {best['us']:.1f} | "
            f"{ratio:.2f} | {fit:.2f} |"
        )
    out.append("")
    if logs:
        out.append(
            f"Geometric mean of chosen / fastest over {len(logs)} shapes: "
            f"{math.exp(sum(logs) / len(logs)):.3f}; worst {max(math.exp(x) for x in logs):.2f}."
        )
    print("\n".join(out))


if __name__ == "__main__":
    main()
