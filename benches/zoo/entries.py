"""The zoo's catalogue: which architectures it holds and how each is built, with random seeded weights
and seeded inputs (nothing is downloaded). `benches/zoo/export.py` exports them.

An entry is a name, where it comes from (torchvision, timm, transformers, or a variant of another
entry: another exporter or opset, QDQ quantization, f16), the family it belongs to, and a `build()`
that returns the module and its example inputs. Names are stable: `cargo xtask zoo` keys its results
by them.
"""
import torch
import torch.nn as nn

# The opset of the TorchScript exporter unless an entry says otherwise: what torch 2.5 writes by
# default is 17.
OPSET = 17


class Entry:
    def __init__(self, name, source, family, build, exporter="torchscript", opset=OPSET, of=None, note=None):
        self.name, self.source, self.family, self.build = name, source, family, build
        self.exporter, self.opset, self.of, self.note = exporter, opset, of, note

    def describe(self):
        return {
            "name": self.name,
            "source": self.source,
            "family": self.family,
            "exporter": self.exporter,
            "opset": self.opset,
            "of": self.of,
        }


class Built:
    """What `build()` returns: the module, its named example inputs (in forward order), the output
    names, whether the first input is a list of images (torchvision detection), and a note for the
    reader of the comparison."""

    def __init__(self, module, inputs, outputs=None, list_input=False, note=None):
        self.module, self.inputs, self.outputs = module, inputs, outputs
        self.list_input, self.note = list_input, note


def gen(name):
    """A generator seeded from the entry's name, so an entry's weights and inputs do not depend on
    which other entries were exported before it."""
    seed = 0
    for b in name.encode():
        seed = (seed * 131 + b) % (2**31)
    return torch.Generator().manual_seed(seed)


def randomize(model, g):
    """Random batch-norm statistics (running mean and variance), so no normalisation is the identity
    and no output a constant; the layers' own initialisers already drew random weights."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) * 0.5 + 0.75)
    return model.eval()


def image(g, size, batch=1, frames=None):
    shape = (batch, 3, size, size) if frames is None else (batch, 3, frames, size, size)
    return torch.randn(shape, generator=g)


# ---------------------------------------------------------------------------------------------
# torchvision: every builder of every module (classification, detection, segmentation, video,
# optical flow). Quantized builders (torch's own int8 kernels) have no ONNX export and are left
# out; the zoo's quantized models come from onnxruntime's quantizer instead.

# Input sizes where a builder needs one other than 224.
TV_SIZE = {"inception_v3": 299, "vit_h_14": 224}


def torchvision_entries():
    import torchvision.models as M
    from torchvision.models import list_models

    out = []
    for name in list_models(module=M):
        def build(name=name):
            g = gen(name)
            torch.manual_seed(g.initial_seed())
            kw = {"aux_logits": False, "init_weights": False} if name in ("inception_v3", "googlenet") else {}
            m = randomize(M.get_model(name, weights=None, **kw), g)
            return Built(m, {"x": image(g, TV_SIZE.get(name, 224))}, ["logits"])

        out.append(Entry(f"tv_{name}", "torchvision", "classification", build))
    for name in list_models(module=M.segmentation):
        def build(name=name):
            g = gen(name)
            torch.manual_seed(g.initial_seed())
            m = randomize(M.get_model(name, weights=None, weights_backbone=None, aux_loss=False), g)
            return Built(SegOut(m), {"x": image(g, 224)}, ["out"])

        out.append(Entry(f"tv_{name}", "torchvision", "segmentation", build))
    for name in list_models(module=M.video):
        def build(name=name):
            g = gen(name)
            torch.manual_seed(g.initial_seed())
            m = randomize(M.get_model(name, weights=None), g)
            frames = 16 if name.startswith(("mvit", "s3d")) else 8
            size = 224 if name.startswith(("mvit", "s3d")) else 112
            return Built(m, {"x": image(g, size, frames=frames)}, ["logits"])

        out.append(Entry(f"tv_{name}", "torchvision", "video", build))
    for name in list_models(module=M.detection):
        def build(name=name):
            g = gen(name)
            torch.manual_seed(g.initial_seed())
            kw = {} if name.startswith("ssd") else {"min_size": 320, "max_size": 320}
            m = randomize(M.get_model(name, weights=None, weights_backbone=None, num_classes=91, **kw), g)
            size = 300 if name == "ssd300_vgg16" else 320
            return Built(
                m,
                {"x": torch.rand((3, size, size), generator=g)},
                None,
                list_input=True,
                note="untrained detector: near-equal scores make which overlapping boxes NMS keeps "
                "follow each runtime's last bits",
            )

        out.append(Entry(f"tv_{name}", "torchvision", "detection", build))
    for name in list_models(module=M.optical_flow):
        def build(name=name):
            g = gen(name)
            torch.manual_seed(g.initial_seed())
            m = randomize(M.get_model(name, weights=None), g)
            return Built(FlowLast(m), {"a": image(g, 128), "b": image(g, 128)}, ["flow"])

        out.append(Entry(f"tv_{name}", "torchvision", "optical flow", build))
    return out


class SegOut(nn.Module):
    """Segmentation models return a dict; the export takes its `out`."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


class FlowLast(nn.Module):
    """RAFT returns every refinement; users keep the last (of 4 updates here, 12 by default)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, a, b):
        return self.m(a, b, num_flow_updates=4)[-1]


# ---------------------------------------------------------------------------------------------
# timm: the smallest member of each family (at least 60 families), at its default input size.

TIMM = [
    "resnet18", "resnet50d", "resnext50_32x4d", "seresnext26d_32x4d", "resnest14d", "res2net50_14w_8s",
    "regnety_002", "regnetz_b16", "densenet121", "dla34", "dpn68", "vgg11_bn", "repvgg_a0", "hrnet_w18_small",
    "cspresnet50", "cspdarknet53", "darknet17", "efficientnet_b0", "efficientnetv2_rw_t", "tf_efficientnet_lite0",
    "mobilenetv2_050", "mobilenetv3_small_050", "mobilenetv4_conv_small", "mnasnet_050", "fbnetc_100",
    "ghostnet_100", "lcnet_050", "tinynet_e", "rexnet_100", "hardcorenas_a", "selecsls42b", "skresnet18",
    "xception41", "inception_v3", "inception_v4", "inception_resnet_v2", "nf_resnet26", "nfnet_l0",
    "convnext_atto", "convnextv2_atto", "edgenext_xx_small", "ghostnetv2_100", "fastvit_t8", "mobileone_s0",
    "vit_tiny_patch16_224", "deit_tiny_patch16_224", "deit3_small_patch16_224", "beit_base_patch16_224",
    "eva02_tiny_patch14_224", "flexivit_small", "cait_xxs24_224", "xcit_nano_12_p16_224", "coat_tiny",
    "convit_tiny", "crossvit_tiny_240", "levit_128s", "pit_ti_224", "tnt_s_patch16_224", "twins_svt_small",
    "pvt_v2_b0", "visformer_tiny", "swin_tiny_patch4_window7_224", "swinv2_cr_tiny_224", "maxvit_nano_rw_256",
    "coatnet_nano_rw_224", "davit_tiny", "gcvit_xxtiny", "efficientformer_l1", "efficientformerv2_s0",
    "efficientvit_b0", "tiny_vit_5m_224", "mobilevit_xxs", "mobilevitv2_050", "poolformer_s12",
    "poolformerv2_s12", "convmixer_768_32", "mixer_s32_224", "resmlp_12_224", "gmlp_ti16_224", "sequencer2d_s",
    "volo_d1_224", "nest_tiny", "hgnet_tiny", "hgnetv2_b0", "rdnet_tiny", "inception_next_tiny", "repghostnet_050",
    "vovnet39a", "ese_vovnet19b_dw", "tresnet_m", "gernet_s", "botnet26t_256", "halonet26t", "lambda_resnet26t",
]


def timm_entries():
    out = []
    for name in TIMM:
        def build(name=name):
            import timm

            g = gen(name)
            torch.manual_seed(g.initial_seed())
            m = randomize(timm.create_model(name, pretrained=False), g)
            size = m.pretrained_cfg.get("input_size", (3, 224, 224))
            return Built(m, {"x": torch.randn((1, *size), generator=g)}, ["logits"])

        out.append(Entry(f"timm_{name}", "timm", "classification", build))
    return out


# ---------------------------------------------------------------------------------------------
# transformers: each model type at a small configuration (two layers, width 64, four heads), built
# from its configuration class with random weights.

# The same small size under each name configurations use for it; only attributes a configuration
# has are set.
SMALL = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
    "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 128, "d_model": 64, "num_layers": 2,
    "num_heads": 4, "d_ff": 128, "d_kv": 16, "encoder_layers": 2, "decoder_layers": 2,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128, "num_decoder_layers": 2, "embedding_size": 64, "num_key_value_heads": 2,
    "head_dim": 16, "ffn_dim": 128, "word_embed_proj_dim": 64, "rotary_dim": 8, "projection_dim": 64,
}

# (type, family, task, overrides): the task picks the head and the inputs.
TRANSFORMERS = [
    ("bert", "encoder", "text", {}),
    ("roberta", "encoder", "text", {}),
    ("distilbert", "encoder", "text", {"dim": 64, "hidden_dim": 128, "n_layers": 2, "n_heads": 4}),
    ("albert", "encoder", "text", {}),
    ("electra", "encoder", "text", {}),
    ("deberta", "encoder", "text", {}),
    ("deberta-v2", "encoder", "text", {}),
    ("xlm-roberta", "encoder", "text", {}),
    ("mpnet", "encoder", "text", {}),
    ("funnel", "encoder", "text", {"block_sizes": [1, 1], "d_head": 16, "d_inner": 128, "architectures": ["FunnelModel"]}),
    ("convbert", "encoder", "text", {}),
    ("squeezebert", "encoder", "text", {"embedding_size": 64}),
    ("mobilebert", "encoder", "text", {"embedding_size": 32, "intra_bottleneck_size": 32, "true_hidden_size": 32}),
    ("ernie", "encoder", "text", {}),
    ("roformer", "encoder", "text", {}),
    ("megatron-bert", "encoder", "text", {}),
    ("data2vec-text", "encoder", "text", {}),
    ("esm", "encoder", "text", {"vocab_size": 33, "pad_token_id": 1}),
    ("nystromformer", "encoder", "text", {"num_landmarks": 8, "segment_means_seq_len": 32}),
    ("big_bird", "encoder", "text", {"attention_type": "original_full"}),
    ("camembert", "encoder", "text", {}),
    ("gpt2", "decoder", "causal", {}),
    ("gpt_neo", "decoder", "causal", {"attention_types": [[["global", "local"], 1]], "window_size": 16}),
    ("gptj", "decoder", "causal", {}),
    ("gpt_neox", "decoder", "causal", {}),
    ("opt", "decoder", "causal", {}),
    ("bloom", "decoder", "causal", {}),
    ("llama", "decoder", "causal", {}),
    ("mistral", "decoder", "causal", {}),
    ("qwen2", "decoder", "causal", {}),
    ("phi", "decoder", "causal", {}),
    ("falcon", "decoder", "causal", {"new_decoder_architecture": False, "multi_query": True}),
    ("codegen", "decoder", "causal", {}),
    ("gemma", "decoder", "causal", {}),
    ("stablelm", "decoder", "causal", {}),
    ("starcoder2", "decoder", "causal", {}),
    ("olmo", "decoder", "causal", {}),
    ("biogpt", "decoder", "causal", {}),
    ("xglm", "decoder", "causal", {}),
    ("t5", "encoder-decoder", "seq2seq", {}),
    ("mt5", "encoder-decoder", "seq2seq", {}),
    ("bart", "encoder-decoder", "seq2seq", {}),
    ("mbart", "encoder-decoder", "seq2seq", {}),
    ("pegasus", "encoder-decoder", "seq2seq", {}),
    ("marian", "encoder-decoder", "seq2seq", {}),
    ("m2m_100", "encoder-decoder", "seq2seq", {}),
    ("blenderbot-small", "encoder-decoder", "seq2seq", {}),
    ("vit", "vision", "image", {}),
    ("deit", "vision", "image", {}),
    ("beit", "vision", "image", {}),
    ("dinov2", "vision", "image", {}),
    ("swin", "vision", "image", {"embed_dim": 32, "depths": [1, 1, 2, 1], "num_heads": [1, 2, 4, 8]}),
    ("swinv2", "vision", "image", {"embed_dim": 32, "depths": [1, 1, 2, 1], "num_heads": [1, 2, 4, 8]}),
    ("convnext", "vision", "image", {"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1]}),
    ("convnextv2", "vision", "image", {"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1]}),
    ("resnet", "vision", "image", {"hidden_sizes": [32, 64, 128, 256], "depths": [1, 1, 1, 1], "embedding_size": 16}),
    ("regnet", "vision", "image", {}),
    ("segformer", "vision", "image", {
        "hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1], "num_attention_heads": [1, 2, 4, 8],
        "decoder_hidden_size": 64,
    }),
    ("mobilevit", "vision", "image", {}),
    ("levit", "vision", "image", {}),
    ("poolformer", "vision", "image", {"depths": [1, 1, 1, 1], "hidden_sizes": [16, 32, 64, 128]}),
    ("wav2vec2", "speech", "audio", {"conv_dim": [32] * 7, "num_conv_pos_embeddings": 16}),
    ("hubert", "speech", "audio", {"conv_dim": [32] * 7, "num_conv_pos_embeddings": 16}),
    ("wavlm", "speech", "audio", {"conv_dim": [32] * 7, "num_conv_pos_embeddings": 16}),
    ("data2vec-audio", "speech", "audio", {"conv_dim": [32] * 7}),
    ("whisper", "speech", "whisper", {"num_mel_bins": 80, "max_source_positions": 100}),
    ("audio-spectrogram-transformer", "speech", "spectrogram", {"max_length": 128, "num_mel_bins": 64}),
    ("clip", "vision-text", "clip", {}),
    ("siglip", "vision-text", "clip", {}),
]

SEQ = 32

# Attributes of SMALL a model type must keep (Funnel sets its depth by block_sizes).
KEEP = {"funnel": ("num_hidden_layers",)}


def small_config(kind, overrides, g):
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(kind)
    for sub in [cfg] + [getattr(cfg, s) for s in ("text_config", "vision_config") if hasattr(cfg, s)]:
        for k, v in SMALL.items():
            if k in ("head_dim", "num_key_value_heads", "rotary_dim") and not hasattr(sub, k):
                continue
            if k in KEEP.get(kind, ()):
                continue
            if hasattr(sub, k) and isinstance(getattr(sub, k), int):
                try:
                    setattr(sub, k, v)
                except AttributeError:
                    pass  # a derived property (Falcon's head_dim): it follows the others
        for k, v in overrides.items():
            setattr(sub, k, v)
        if hasattr(sub, "image_size") and isinstance(getattr(sub, "image_size"), int):
            # Windowed attention (Swin) needs the image its windows tile; the others take 64.
            if kind not in ("levit", "mobilevit", "swin", "swinv2"):
                sub.image_size = 64
        if hasattr(sub, "patch_size") and kind in ("clip", "siglip", "vit", "deit", "beit", "dinov2"):
            sub.patch_size = 8
    # Outputs are flattened from whatever the model returns (`flatten`), so `return_dict` stays
    # as the configuration has it: transformers 5 models read their outputs by attribute.
    cfg.use_cache = True
    return cfg


def tokens(g, cfg, batch, seq):
    vocab = getattr(cfg, "vocab_size", None) or cfg.text_config.vocab_size
    low = 4 if vocab > 8 else 0
    return torch.randint(low, min(vocab, 1000), (batch, seq), generator=g)


def flatten(out):
    """Every tensor of a model's output, in order (caches unrolled, None dropped)."""
    if torch.is_tensor(out):
        return [out]
    if hasattr(out, "to_legacy_cache"):
        return flatten(out.to_legacy_cache())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flatten(o)]
    return []


class Flat(nn.Module):
    """Calls a transformers model with named inputs and returns its outputs as a flat tuple."""

    def __init__(self, m, names, **fixed):
        super().__init__()
        self.m, self.names, self.fixed = m, names, fixed

    def forward(self, *args):
        return tuple(flatten(self.m(**dict(zip(self.names, args)), **self.fixed)))


class WithPast(nn.Module):
    """A causal decoder's next step: one token and the cache of the positions before it, as users run
    it in a generation loop (inputs input_ids, attention_mask, past_key_values.<layer>.key/value)."""

    def __init__(self, m, layers):
        super().__init__()
        self.m, self.layers = m, layers

    def forward(self, input_ids, attention_mask, *past):
        from transformers import DynamicCache

        legacy = tuple((past[2 * i], past[2 * i + 1]) for i in range(self.layers))
        cache = DynamicCache.from_legacy_cache(legacy)
        return tuple(flatten(self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache)))


def transformers_build(kind, family, task, overrides, with_past=False):
    def build():
        import transformers as T

        g = gen(kind)
        torch.manual_seed(g.initial_seed())
        cfg = small_config(kind, overrides, g)
        if task == "text":
            m = T.AutoModel.from_config(cfg)
            ids = tokens(g, cfg, 2, SEQ)
            mask = torch.ones_like(ids)
            mask[1, SEQ - 5 :] = 0
            inputs = {"input_ids": ids, "attention_mask": mask}
        elif task == "causal":
            m = T.AutoModelForCausalLM.from_config(cfg)
            if with_past:
                layers = m.config.num_hidden_layers
                past_len = SEQ
                probe = m(input_ids=tokens(g, cfg, 1, past_len), use_cache=True, return_dict=True)
                legacy = probe.past_key_values
                legacy = legacy.to_legacy_cache() if hasattr(legacy, "to_legacy_cache") else legacy
                inputs = {"input_ids": tokens(g, cfg, 1, 1), "attention_mask": torch.ones(1, past_len + 1, dtype=torch.int64)}
                for i, (k, v) in enumerate(legacy):
                    inputs[f"past_key_values.{i}.key"] = k.detach()
                    inputs[f"past_key_values.{i}.value"] = v.detach()
                return Built(WithPast(m.eval(), layers), inputs)
            ids = tokens(g, cfg, 1, SEQ)
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        elif task == "seq2seq":
            m = T.AutoModelForSeq2SeqLM.from_config(cfg)
            inputs = {
                "input_ids": tokens(g, cfg, 1, SEQ),
                "attention_mask": torch.ones(1, SEQ, dtype=torch.int64),
                "decoder_input_ids": tokens(g, cfg, 1, 8),
            }
        elif task == "image":
            m = T.AutoModel.from_config(cfg)
            size = cfg.image_size if isinstance(getattr(cfg, "image_size", None), int) else 64
            inputs = {"pixel_values": torch.randn((1, getattr(cfg, "num_channels", 3), size, size), generator=g)}
        elif task == "audio":
            m = T.AutoModel.from_config(cfg)
            inputs = {"input_values": torch.randn((1, 16000), generator=g)}
        elif task == "whisper":
            m = T.WhisperForConditionalGeneration(cfg)
            inputs = {
                "input_features": torch.randn((1, 80, 200), generator=g),
                "decoder_input_ids": tokens(g, cfg, 1, 4),
            }
        elif task == "spectrogram":
            m = T.AutoModel.from_config(cfg)
            inputs = {"input_values": torch.randn((1, 128, 64), generator=g)}
        elif task == "clip":
            m = T.AutoModel.from_config(cfg)
            size = cfg.vision_config.image_size
            inputs = {
                "input_ids": tokens(g, cfg.text_config, 2, 16),
                "pixel_values": torch.randn((1, 3, size, size), generator=g),
            }
        else:
            raise ValueError(task)
        m = randomize(m, g)
        return Built(Flat(m, list(inputs)), inputs)

    return build


def transformers_entries():
    out = []
    for kind, family, task, overrides in TRANSFORMERS:
        name = "hf_" + kind.replace("-", "_")
        out.append(Entry(name, "transformers", family, transformers_build(kind, family, task, overrides)))
    # Decoders as a generation loop runs them: one new token against a cache of 32 positions.
    for kind in ("gpt2", "llama", "opt", "qwen2"):
        overrides = dict(next(o for k, _, _, o in TRANSFORMERS if k == kind))
        out.append(
            Entry(
                f"hf_{kind}_with_past",
                "transformers",
                "decoder step",
                transformers_build(kind, "decoder", "causal", overrides, with_past=True),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Variants of entries above: the dynamo exporter, the opsets the TorchScript exporter writes, QDQ
# quantization and f16 conversion (done in export.py from the base entry's ONNX file).

def variants(base):
    by_name = {e.name: e for e in base}
    out = []
    for name in ("tv_resnet18", "tv_mobilenet_v3_small", "tv_vit_b_32", "hf_bert", "hf_gpt2", "timm_convnext_atto"):
        e = by_name[name]
        out.append(Entry(f"{name}_dynamo", e.source, e.family, e.build, exporter="dynamo", opset=18, of=name))
    for opset in (13, 14, 15, 16, 18, 19, 20):
        for name in ("tv_resnet18", "hf_bert"):
            e = by_name[name]
            out.append(Entry(f"{name}_opset{opset}", e.source, e.family, e.build, opset=opset, of=name))
    for name in ("tv_resnet18", "tv_mobilenet_v2", "tv_efficientnet_b0", "hf_bert", "hf_distilbert", "timm_vit_tiny_patch16_224"):
        e = by_name[name]
        out.append(Entry(f"{name}_qdq_static", e.source, "quantized", None, exporter="qdq-static", opset=e.opset, of=name))
        out.append(Entry(f"{name}_qdq_dynamic", e.source, "quantized", None, exporter="qdq-dynamic", opset=e.opset, of=name))
    for name in ("tv_resnet18", "tv_mobilenet_v3_large", "hf_bert", "hf_gpt2", "timm_vit_tiny_patch16_224"):
        e = by_name[name]
        out.append(Entry(f"{name}_f16", e.source, "f16", None, exporter="f16", opset=e.opset, of=name))
    return out


def all_entries():
    base = torchvision_entries() + timm_entries() + transformers_entries()
    return base + variants(base)
