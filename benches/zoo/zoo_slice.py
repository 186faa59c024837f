"""The slice of the zoo that `cargo test --workspace` runs: small members of each kind (under a
megabyte each), committed under benches/zoo/slice/ with onnxruntime's outputs beside them:

    python benches/zoo/export.py benches/zoo/slice --slice

Kept apart from `entries.py` so that changing the slice does not change the zoo's export stamp.
"""
import torch

from entries import TRANSFORMERS, Built, Entry, gen, image, randomize, transformers_build


TINY = {
    "vocab_size": 128, "max_position_embeddings": 64, "hidden_size": 32, "intermediate_size": 64,
    "n_embd": 32, "n_inner": 64, "d_model": 32, "d_ff": 64, "d_kv": 8, "num_attention_heads": 2,
    "n_head": 2, "num_heads": 2,
}


def slice_entries():
    def tv_small():
        import torchvision.models as M

        g = gen("slice_tv_mobilenet_v3_small")
        torch.manual_seed(g.initial_seed())
        m = randomize(M.mobilenet_v3_small(weights=None, width_mult=0.25, num_classes=10), g)
        return Built(m, {"x": image(g, 64)}, ["logits"])

    def timm_test(name):
        def build():
            import timm

            g = gen(f"slice_timm_{name}")
            torch.manual_seed(g.initial_seed())
            m = randomize(timm.create_model(name, pretrained=False, num_classes=10), g)
            size = m.pretrained_cfg.get("input_size", (3, 160, 160))
            return Built(m, {"x": torch.randn((1, *size), generator=g)}, ["logits"])

        return build

    def hf(kind, task, with_past=False):
        overrides = dict(next(o for k, _, _, o in TRANSFORMERS if k == kind))
        cfg_keys = set(type(__import__("transformers").AutoConfig.for_model(kind)).__init__.__code__.co_varnames)
        cfg_keys |= set(vars(__import__("transformers").AutoConfig.for_model(kind)))
        overrides.update({k: v for k, v in TINY.items() if k in cfg_keys})
        return transformers_build(kind, "", task, overrides, with_past=with_past)

    out = [
        Entry("slice_tv_mobilenet_v3_small", "torchvision", "classification", tv_small),
        Entry("slice_hf_vit", "transformers", "vision", hf("vit", "image")),
        Entry("slice_timm_test_efficientnet", "timm", "classification", timm_test("test_efficientnet")),
        Entry("slice_hf_bert", "transformers", "encoder", hf("bert", "text")),
        Entry("slice_hf_gpt2_with_past", "transformers", "decoder step", hf("gpt2", "causal", with_past=True)),
        Entry("slice_hf_t5", "transformers", "encoder-decoder", hf("t5", "seq2seq")),
    ]
    by_name = {e.name: e for e in out}
    e = by_name["slice_hf_bert"]
    out.append(Entry("slice_hf_bert_dynamo", e.source, e.family, e.build, exporter="dynamo", opset=18, of=e.name))
    out.append(Entry("slice_hf_bert_f16", e.source, "f16", None, exporter="f16", of=e.name))
    e = by_name["slice_tv_mobilenet_v3_small"]
    out.append(Entry("slice_tv_mobilenet_v3_small_qdq_static", e.source, "quantized", None, exporter="qdq-static", of=e.name))
    return out
