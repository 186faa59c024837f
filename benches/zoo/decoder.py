"""Exports a GPT-2 decoder for token-by-token generation with a key/value cache, offline (random
weights seeded from the size's name), and writes PyTorch's own greedy generation beside it.

    python benches/zoo/decoder.py OUT_DIR [--size tiny|small] [--prompt-len N] [--new-tokens N]

OUT_DIR/model.onnx takes `input_ids` [batch, seq], `attention_mask` [batch, past + seq],
`position_ids` [batch, seq] and, per layer i, `past_key_values.i.key` / `.value`
[batch, heads, past, head_dim], every length dynamic
(a first step passes a past of length 0), and returns `logits` [batch, seq, vocab] and
`present.i.key` / `.value` [batch, heads, past + seq, head_dim]: the layout onnxruntime's and
Optimum's decoder exports use. OUT_DIR/generate.json holds the prompt, the tokens the same loop
picks greedily after it in PyTorch (and those of transformers' own `generate`, which must agree),
and the logits of the first and last steps, so that a generation loop run elsewhere can be held to
PyTorch's answer. `tiny` (2 layers, width 32, vocab
97) is small enough to commit as a test model; `small` is GPT-2-small's shape (12 layers, width 768,
vocab 50257; 124 M parameters).
"""
import json
import os
import sys

import numpy as np
import torch
from torch import nn

SIZES = {
    "tiny": dict(n_layer=2, n_embd=32, n_head=2, vocab_size=97, n_positions=128),
    "small": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
}


class Step(nn.Module):
    """One call of GPT-2 written out with its cache explicit: new tokens, the mask of every
    position, the new tokens' positions, the cache before them; the transformers model's own
    layers and weights, so that the computation is its, and every length is read from the tensors
    (nothing a trace could fix). Positions are an input (as in Optimum's exports), so a cache
    padded in front, its padding masked out, gives the same answer as the unpadded cache."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, position_ids, *past):
        t = self.m.transformer
        cfg = self.m.config
        batch, seq = input_ids.shape[0], input_ids.shape[1]
        heads, width = cfg.n_head, cfg.n_embd
        dim = width // heads
        past_len = past[0].shape[2]
        x = t.wte(input_ids) + t.wpe(position_ids)
        # Position q (at past_len + q) sees keys 0..past_len + q, and only those the mask keeps.
        q_at = torch.arange(seq, device=input_ids.device).unsqueeze(1) + past_len
        k_at = torch.arange(past_len + seq, device=input_ids.device).unsqueeze(0)
        keep = (k_at <= q_at).unsqueeze(0).unsqueeze(0) & (attention_mask[:, None, None, :] > 0)
        low = torch.tensor(torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device)
        present = []
        for i, blk in enumerate(t.h):
            a = blk.ln_1(x)
            q, k, v = blk.attn.c_attn(a).split(width, dim=2)
            q, k, v = (z.view(batch, seq, heads, dim).transpose(1, 2) for z in (q, k, v))
            k = torch.cat([past[2 * i], k], dim=2)
            v = torch.cat([past[2 * i + 1], v], dim=2)
            present += [k, v]
            w = torch.matmul(q, k.transpose(-1, -2)) / (dim**0.5)
            w = torch.where(keep, w, low).softmax(dim=-1)
            o = torch.matmul(w, v).transpose(1, 2).reshape(batch, seq, width)
            x = x + blk.attn.c_proj(o)
            x = x + blk.mlp(blk.ln_2(x))
        return (self.m.lm_head(t.ln_f(x)), *present)


def torch_generate(step, prompt, new_tokens, device="cpu"):
    """Greedy generation through `step` in PyTorch, cache fed back: the loop `quorum generate`
    runs, in PyTorch (tokens and each step's last-position logits)."""
    cfg = step.m.config
    heads, dim = cfg.n_head, cfg.n_embd // cfg.n_head
    past = [torch.zeros(1, heads, 0, dim, device=device) for _ in range(2 * cfg.n_layer)]
    ids = prompt.to(device)
    tokens, logits = [], []
    total = 0
    with torch.no_grad():
        for _ in range(new_tokens):
            total += ids.shape[1]
            pos = torch.arange(total - ids.shape[1], total, device=device).unsqueeze(0)
            out = step(ids, torch.ones(1, total, dtype=torch.int64, device=device), pos, *past)
            last = out[0][0, -1]
            tok = int(torch.argmax(last))
            tokens.append(tok)
            logits.append(last)
            past = list(out[1:])
            ids = torch.tensor([[tok]], device=device)
    return tokens, logits


def seeded(name):
    seed = 0
    for b in name.encode():
        seed = (seed * 131 + b) % (2**31)
    return torch.Generator().manual_seed(seed)


def build(size, out_dir, prompt_len):
    """The seeded GPT-2 of `size`, its step module, exported to OUT_DIR/model.onnx, and a seeded
    prompt of `prompt_len` tokens: (model, step, prompt, path)."""
    import transformers as T

    g = seeded(f"decoder_{size}")
    torch.manual_seed(g.initial_seed())
    cfg = T.GPT2Config(**SIZES[size])
    m = T.GPT2LMHeadModel(cfg).eval()
    step = Step(m).eval()
    layers, heads = cfg.n_layer, cfg.n_head
    head_dim = cfg.n_embd // heads
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.onnx")
    # Traced with a past of 3 and 2 new tokens, every length dynamic (read from the tensors).
    ids = torch.randint(0, cfg.vocab_size, (1, 2), generator=g)
    past = [torch.randn(1, heads, 3, head_dim, generator=g) for _ in range(2 * layers)]
    mask = torch.ones(1, 5, dtype=torch.int64)
    pos = torch.arange(3, 5).unsqueeze(0)
    names = ["input_ids", "attention_mask", "position_ids"]
    outs = ["logits"]
    dyn = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
    }
    for i in range(layers):
        for kv in ("key", "value"):
            names.append(f"past_key_values.{i}.{kv}")
            outs.append(f"present.{i}.{kv}")
            dyn[names[-1]] = {0: "batch", 2: "past"}
            dyn[outs[-1]] = {0: "batch", 2: "total"}
    with torch.no_grad():
        torch.onnx.export(
            step,
            (ids, mask, pos, *past),
            path,
            input_names=names,
            output_names=outs,
            dynamic_axes=dyn,
            opset_version=17,
            do_constant_folding=True,
            dynamo=False,
        )
    prompt = torch.randint(0, cfg.vocab_size, (1, prompt_len), generator=g)
    return m, step, prompt, path


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__.strip())
        sys.exit(0 if args[:1] in (["-h"], ["--help"]) else 2)
    out_dir = args[0]
    opts = dict(zip(args[1::2], args[2::2]))
    unknown = set(opts) - {"--size", "--prompt-len", "--new-tokens"}
    if unknown or len(args[1:]) % 2:
        sys.exit(f"unknown or incomplete options {sorted(unknown) or args[-1:]} (see --help)")
    size = opts.get("--size", "tiny")
    prompt_len = int(opts.get("--prompt-len", "8"))
    new_tokens = int(opts.get("--new-tokens", "12"))
    import transformers as T

    m, step, prompt, path = build(size, out_dir, prompt_len)
    tokens, logits = torch_generate(step, prompt, new_tokens)
    # transformers' own greedy `generate` on the same model: the tokens must be these.
    with torch.no_grad():
        hf = m.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=0,
        )
    hf_tokens = hf[0, prompt_len:].tolist()
    record = {
        "size": size,
        "config": SIZES[size],
        "parameters": sum(p.numel() for p in m.parameters()),
        "torch": torch.__version__,
        "transformers": T.__version__,
        "prompt": prompt[0].tolist(),
        "tokens": tokens,
        "transformers_generate_tokens": hf_tokens,
        "first_logits": logits[0].tolist(),
        "last_logits": logits[-1].tolist(),
    }
    with open(os.path.join(out_dir, "generate.json"), "w") as f:
        json.dump(record, f)
    same = "the same" if hf_tokens == tokens else f"DIFFERENT: {hf_tokens}"
    print(f"{path}: {record['parameters']} parameters; greedy tokens {tokens}; transformers' generate: {same}")


if __name__ == "__main__":
    main()
