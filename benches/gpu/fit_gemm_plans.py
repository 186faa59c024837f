#!/usr/bin/env python3
"""Fits the GEMM plan cost model's constants to `bench_gemm_plans` measurements.

    python3 benches/gpu/fit_gemm_plans.py plans.log [--sms 132]

The model is the one in `cuda/src/ops/matmul/plan.rs` (mirrored here; keep the two in step):
the busiest SM runs j = ceil(blocks / SMs) blocks, at most `slots` at once, at a per-SM rate for
that many co-resident blocks, plus a fixed cost per round of resident blocks and a launch; a split
adds the reduction's launch and bytes. The fit minimises the squared log error of the model over
every measured plan (coordinate descent over the constants, every slot count tried), then reports
how the fitted model's choices compare with the fastest plan measured per shape. It prints the
constants to paste into `matmul/plan.rs`.
"""
import argparse
import itertools
import math
import re

LINE = re.compile(
    r"^BENCH gemm_plan (\d+)x(\d+)x(\d+) nb(\d+) (\w+) (\d+) (\d+) ([\d.]+) ([\d.]+)( chosen)?$"
)
TILE = {"Big": (128, 128), "Small": (64, 64)}


def cost(p, plan, sms, slots):
    (m, n, k, nb), (variant, nsplit, kc) = plan
    bm, bn = TILE[variant]
    rates = p[variant + "_rate"]
    s = slots[variant]
    tiles = -(-m // bm) * -(-n // bn) * nb
    per_sm = -(-tiles * nsplit // sms)
    resident = min(per_sm, s)
    rounds = -(-per_sm // s)
    flops = 2.0 * bm * bn * kc
    us = p["launch"] + per_sm * flops / rates[resident - 1] + rounds * p[variant + "_round"]
    if nsplit > 1:
        outs = nb * m * n
        us += p["launch"] + outs * (4.0 * nsplit + 4.0) / p["reduce_bw"]
    return us


def loss(p, data, sms, slots):
    return sum(math.log(cost(p, plan, sms, slots) / us) ** 2 for plan, us in data) / len(data)


def fit(data, sms, slots):
    p = {
        "Big_rate": [2.0e5] * slots["Big"],
        "Small_rate": [2.0e5] * slots["Small"],
        "Big_round": 1.0,
        "Small_round": 1.0,
        "launch": 2.0,
        "reduce_bw": 2.5e6,
    }
    # Coordinates: each scalar, each rate entry.
    coords = [(k, None) for k in ("Big_round", "Small_round", "launch", "reduce_bw")]
    coords += [("Big_rate", i) for i in range(slots["Big"])]
    coords += [("Small_rate", i) for i in range(slots["Small"])]

    def get(c):
        return p[c[0]] if c[1] is None else p[c[0]][c[1]]

    def put(c, v):
        if c[1] is None:
            p[c[0]] = v
        else:
            p[c[0]][c[1]] = v

    best = loss(p, data, sms, slots)
    for _ in range(60):
        improved = False
        for c in coords:
            for f in (0.5, 0.75, 0.9, 0.97, 1.03, 1.1, 1.33, 2.0):
                old = get(c)
                put(c, old * f)
                val = loss(p, data, sms, slots)
                if val < best - 1e-12:
                    best, improved = val, True
                else:
                    put(c, old)
        if not improved:
            break
    return p, best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    data, by_shape = [], {}
    for raw in open(args.log, encoding="utf-8", errors="replace"):
        m = LINE.match(raw.strip())
        if not m:
            continue
        shape = tuple(int(m.group(i)) for i in range(1, 5))
        plan = (shape, (m.group(5), int(m.group(6)), int(m.group(7))))
        us = float(m.group(8))
        data.append((plan, us))
        by_shape.setdefault(shape, []).append((plan, us))
    if not data:
        raise SystemExit(f"no `BENCH gemm_plan` lines in {args.log}")
    results = []
    for sb, ss in itertools.product((1, 2), (2, 3, 4, 6, 8)):
        slots = {"Big": sb, "Small": ss}
        p, l = fit(data, args.sms, slots)
        results.append((l, slots, p))
    results.sort(key=lambda r: r[0])
    l, slots, p = results[0]
    print(f"best fit: slots {slots}, mean squared log error {l:.4f} (rms {math.exp(math.sqrt(l)):.2f}×)")
    for k, v in p.items():
        print(f"  {k}: {v}")
    logs = []
    for shape, plans in by_shape.items():
        best = min(plans, key=lambda x: x[1])
        pick = min(plans, key=lambda x: cost(p, x[0], args.sms, slots))
        r = pick[1] / best[1]
        logs.append(math.log(r))
        print(
            f"{shape}: fitted model picks {pick[0][1]} {pick[1]:.1f} us; "
            f"fastest {best[0][1]} {best[1]:.1f} us ({r:.2f}×)"
        )
    print(
        f"fitted choices / fastest: geomean {math.exp(sum(logs) / len(logs)):.3f}, "
        f"worst {math.exp(max(logs)):.2f}"
    )


if __name__ == "__main__":
    main()
