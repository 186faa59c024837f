#!/usr/bin/env python3
"""Token-by-token generation on the GPU machine: GPT-2 (random weights, `benches/zoo/decoder.py`)
exported there with its own torch, run by `quorum generate --provider cuda` beside PyTorch's own
loops on the same model, in one run.

    python3 benches/gpu/generate_vs_pytorch.py --quorum target/gpu-bundle/quorum --out DIR \
        [--size small] [--prompt-len 32] [--new-tokens 64] [--repeat 3]

PyTorch, TF32 off, on CUDA:
- `transformers generate`: the model's own greedy `generate` (eager, its own cache); per token
  = (time for N new tokens - time for 1) / (N - 1), medians of --repeat runs;
- `loop`: the same loop as Quorum's (decoder.py's Step with its cache fed back, the next token
  read on the host each step), each step timed host to host.
Quorum: `quorum generate --provider cuda`, each step host to host, eagerly (`--graph off`, each step a new length) and with graph capture over a
cache padded to buckets (`--graph on`: one captured graph per bucket, the cache carried in its
buffers from step to step; `--no-carry`: brought back to the host every step). Tokens of all must agree (random weights can make near-ties, so a
disagreement is reported, not hidden). Writes DIR/generate.json and DIR/generate.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quorum", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="small")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import torch
    import transformers
    import decoder

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "work")
    t0 = time.time()
    m, step, prompt, path = decoder.build(a.size, work, a.prompt_len)
    export_s = time.time() - t0
    n = a.new_tokens
    row = {
        "size": a.size,
        "parameters": sum(p.numel() for p in m.parameters()),
        "prompt_len": a.prompt_len,
        "new_tokens": n,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "export_s": round(export_s, 1),
    }

    # Quorum: eager, each step a new shape; and graph replay over a cache padded to buckets.
    variants = {"eager": ["--graph", "off", "--pad-cache", "off"], "graph": ["--graph", "on"],
                "nocarry": ["--graph", "on", "--no-carry"]}
    for name, extra in variants.items():
        cmd = [a.quorum, "generate", path, "--provider", "cuda", "--prompt", ",".join(map(str, prompt[0].tolist())),
               "--new-tokens", str(n), "--repeat", str(a.repeat + 1), "--json", *extra]
        p = subprocess.run(cmd, capture_output=True, text=True)
        key = "quorum" if name == "graph" else f"quorum_{name}"
        if p.returncode != 0:
            row[f"{key}_error"] = (p.stderr or p.stdout).strip()[-400:]
            continue
        q = json.loads(p.stdout.strip().splitlines()[-1])
        row.update({
            f"{key}_tokens": q["tokens"],
            f"{key}_prefill_ms": q["prefill_ms"],
            f"{key}_token_ms": q["token_ms_median"],
            f"{key}_token_p10_ms": q["token_ms_p10"],
            f"{key}_token_p90_ms": q["token_ms_p90"],
            f"{key}_cuda_fallbacks": q["counters"].get("cuda_fallbacks"),
            f"{key}_graph_replays": q["counters"].get("graph_replays"),
            f"{key}_pad_cache": q.get("pad_cache"),
            f"{key}_h2d_bytes": q["counters"].get("h2d_bytes"),
        })

    if torch.cuda.is_available():
        dev = "cuda"
        m = m.to(dev)
        step = step.to(dev)
        sync = torch.cuda.synchronize
        # transformers' generate.
        def hf(k):
            sync()
            t = time.perf_counter()
            with torch.no_grad():
                out = m.generate(prompt.to(dev), attention_mask=torch.ones_like(prompt).to(dev), max_new_tokens=k,
                                 min_new_tokens=k, do_sample=False, num_beams=1, pad_token_id=0)
            sync()
            return (time.perf_counter() - t) * 1e3, out[0, a.prompt_len:].tolist()
        hf(2)
        one = statistics.median(hf(1)[0] for _ in range(a.repeat))
        runs = [hf(n) for _ in range(a.repeat)]
        full = statistics.median(r[0] for r in runs)
        row["hf_tokens"] = runs[0][1]
        row["hf_token_ms"] = (full - one) / (n - 1)
        row["hf_first_token_ms"] = one
        # The same loop as Quorum's, in PyTorch.
        cfg = m.config
        heads, dim = cfg.n_head, cfg.n_embd // cfg.n_head
        def loop():
            past = [torch.zeros(1, heads, 0, dim, device=dev) for _ in range(2 * cfg.n_layer)]
            ids = prompt.to(dev)
            total, toks, times = 0, [], []
            with torch.no_grad():
                for _ in range(n):
                    t = time.perf_counter()
                    total += ids.shape[1]
                    pos = torch.arange(total - ids.shape[1], total, device=dev).unsqueeze(0)
                    out = step(ids, torch.ones(1, total, dtype=torch.int64, device=dev), pos, *past)
                    tok = int(torch.argmax(out[0][0, -1]))
                    times.append((time.perf_counter() - t) * 1e3)
                    toks.append(tok)
                    past = list(out[1:])
                    ids = torch.tensor([[tok]], device=dev)
            return toks, times
        loop()
        steps, toks = [], None
        for _ in range(a.repeat):
            toks, times = loop()
            steps += times[1:]
        row["loop_tokens"] = toks
        row["loop_token_ms"] = statistics.median(steps)

    toks = [row.get(k) for k in ("quorum_tokens", "quorum_eager_tokens", "quorum_nocarry_tokens", "hf_tokens", "loop_tokens")
            if row.get(k)]
    row["tokens_agree"] = all(t == toks[0] for t in toks) if toks else None
    if row.get("quorum_token_ms") and row.get("hf_token_ms"):
        row["ratio_vs_hf"] = row["quorum_token_ms"] / row["hf_token_ms"]
    if row.get("quorum_token_ms") and row.get("loop_token_ms"):
        row["ratio_vs_loop"] = row["quorum_token_ms"] / row["loop_token_ms"]
    with open(os.path.join(a.out, "generate.json"), "w") as f:
        json.dump(row, f, indent=1)
    f3 = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)
    lines = [
        f"# Token-by-token generation: GPT-2 {a.size} ({row['parameters'] / 1e6:.0f} M parameters, random weights) on {row['device']}",
        "",
        f"Prompt of {a.prompt_len} tokens, {n} new, greedy; torch {row['torch']}, transformers {row['transformers']}, TF32 off; "
        f"medians over {a.repeat} generations after one warm-up, each step host to host.",
        "",
        "| | per token ms | note |",
        "|---|---:|---|",
        f"| Quorum `generate --provider cuda --graph on` | {f3(row.get('quorum_token_ms'))} | cache padded to buckets from {row.get('quorum_pad_cache')}; prefill {f3(row.get('quorum_prefill_ms'))} ms; p10 {f3(row.get('quorum_token_p10_ms'))}, p90 {f3(row.get('quorum_token_p90_ms'))}; replays {row.get('quorum_graph_replays')}; CUDA fallbacks {row.get('quorum_cuda_fallbacks')} {row.get('quorum_error', '')} |",
        f"| Quorum `generate --provider cuda --graph on --no-carry` | {f3(row.get('quorum_nocarry_token_ms'))} | the cache back on the host every step; p10 {f3(row.get('quorum_nocarry_token_p10_ms'))}, p90 {f3(row.get('quorum_nocarry_token_p90_ms'))} {row.get('quorum_nocarry_error', '')} |",
        f"| Quorum `generate --provider cuda --graph off` | {f3(row.get('quorum_eager_token_ms'))} | eager, unpadded; prefill {f3(row.get('quorum_eager_prefill_ms'))} ms; p10 {f3(row.get('quorum_eager_token_p10_ms'))}, p90 {f3(row.get('quorum_eager_token_p90_ms'))} {row.get('quorum_eager_error', '')} |",
        f"| transformers `generate` (eager) | {f3(row.get('hf_token_ms'))} | (N tokens - 1 token) / (N - 1) |",
        f"| PyTorch, the same loop | {f3(row.get('loop_token_ms'))} | decoder.py's Step, cache fed back |",
        "",
        f"Quorum / transformers generate: **{f3(row.get('ratio_vs_hf'))}**; Quorum / the same loop in PyTorch: {f3(row.get('ratio_vs_loop'))}; tokens agree: {row['tokens_agree']}.",
    ]
    with open(os.path.join(a.out, "generate.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
