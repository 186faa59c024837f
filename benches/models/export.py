"""Exports the real models of `cargo xtask bench-cpu` to ONNX: common architectures built by torch and
torchvision with seeded random weights (nothing is downloaded), exported with torch.onnx.export.

    python benches/models/export.py OUT_DIR

writes OUT_DIR/<name>/model.onnx, its seeded inputs as OUT_DIR/<name>/inputs/<input>.npy (both
runtimes are timed on these), and OUT_DIR/<name>/meta.json (what the model is and how it was
exported). Names after OUT_DIR export only those models. Every package it imports is pinned in
benches/models/requirements.lock; the venv is made by `cargo xtask bench-cpu`.
"""
import json
import os
import sys
import warnings

import torch
import torch.nn as nn
import torchvision

OPSET = 17
warnings.filterwarnings("ignore")


class Encoder(nn.Module):
    """A BERT-style encoder: token and position embeddings, 4 pre-norm layers of 4-head attention
    (d_model 256, feed-forward 1024, GELU), pooled by the first token."""

    def __init__(self, vocab=1000, d=256, layers=4, heads=4, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        layer = nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        h = self.enc(self.tok(ids) + self.pos(pos))
        return self.norm(h), self.norm(h[:, 0])


class LstmTagger(nn.Module):
    """A 2-layer bidirectional LSTM over feature frames (e.g. speech or sensor features) with a
    per-frame classifier."""

    def __init__(self, features=80, hidden=256, classes=32):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y).log_softmax(-1)


class Crnn(nn.Module):
    """A CRNN text recognizer (the shape of PaddleOCR's and EasyOCR's recognizers): a VGG-style conv
    stack over a 32-pixel-high text line of any width, a bidirectional LSTM over the columns, CTC
    log-probabilities per column."""

    def __init__(self, classes=97):
        super().__init__()

        def block(i, o, pool):
            return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(pool)]

        self.cnn = nn.Sequential(
            *block(1, 64, (2, 2)),
            *block(64, 128, (2, 2)),
            *block(128, 256, (2, 1)),
            *block(256, 256, (2, 1)),
            *block(256, 512, (2, 1)),
        )
        self.rnn = nn.LSTM(512, 128, bidirectional=True)
        self.fc = nn.Linear(256, classes)

    def forward(self, x):
        f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # [width/4, batch, 512]
        y, _ = self.rnn(f)
        return self.fc(y).log_softmax(-1)


def randomize(model):
    """Random weights and batch-norm statistics, so that no output is a constant."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) * 0.5 + 0.75)
    return model.eval()


class Spec:
    def __init__(
        self,
        name,
        what,
        model,
        inputs,
        outputs,
        dynamic=None,
        anonymous_dims=False,
        list_input=False,
        note=None,
    ):
        self.name, self.what, self.model, self.inputs = name, what, model, inputs
        self.outputs, self.dynamic = outputs, dynamic
        self.anonymous_dims, self.list_input = anonymous_dims, list_input
        # What a reader of the comparison should know about this model's outputs.
        self.note = note


def anonymize_dims(path):
    """Renames every dim_param of the graph's inputs, outputs and value_info to "?"."""
    import onnx

    m = onnx.load(path)
    g = m.graph
    for v in list(g.input) + list(g.output) + list(g.value_info):
        for d in v.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.dim_param = "?"
    onnx.save(m, path)


def models():
    tv = torchvision.models
    d = tv.detection
    image = {"x": torch.randn(1, 3, 224, 224)}
    yield Spec("resnet18", "torchvision resnet18", randomize(tv.resnet18()), image, ["logits"])
    yield Spec("mobilenet_v2", "torchvision mobilenet_v2", randomize(tv.mobilenet_v2()), image, ["logits"])
    yield Spec(
        "efficientnet_b0", "torchvision efficientnet_b0", randomize(tv.efficientnet_b0()), image, ["logits"]
    )
    yield Spec(
        "bert_encoder",
        "BERT-style encoder (token ids -> torch.nn.TransformerEncoder, 4 layers of 256, 4 heads)",
        Encoder().eval(),
        {"ids": torch.randint(0, 1000, (1, 128))},
        ["hidden", "pooled"],
        {"ids": {0: "batch", 1: "seq"}},
    )
    yield Spec(
        "lstm_tagger",
        "2-layer bidirectional LSTM (80 features -> 256 hidden) with a per-frame classifier",
        LstmTagger().eval(),
        {"x": torch.randn(200, 1, 80)},
        ["log_probs"],
        {"x": {0: "frames", 1: "batch"}},
    )
    line = {"x": torch.randn(1, 1, 32, 320)}
    yield Spec(
        "crnn_ocr",
        "CRNN text recognizer (conv stack + BiLSTM + CTC head), symbolic batch and width",
        randomize(Crnn()),
        line,
        ["log_probs"],
        {"x": {0: "batch", 3: "width"}},
    )
    # The same recognizer as PaddlePaddle's exporter writes it: every unknown dimension is "?".
    yield Spec(
        "crnn_ocr_paddle_dims",
        "crnn_ocr with every dim_param renamed '?' (as PaddlePaddle's exporter writes them)",
        randomize(Crnn()),
        line,
        ["log_probs"],
        {"x": {0: "batch", 3: "width"}},
        anonymous_dims=True,
    )
    det = randomize(
        d.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=91, score_thresh=0.001
        )
    )
    # Untrained, every class scores about 1/91 and the boxes kept differ by the last bits of
    # near-equal scores; a sharper classifier gives scores that rank the same in any runtime.
    with torch.no_grad():
        for p in det.head.classification_head.parameters():
            p.mul_(4.0)
    yield Spec(
        "ssdlite_detector",
        "torchvision ssdlite320_mobilenet_v3_large detector with its NMS (boxes, scores, labels)",
        det,
        {"x": torch.rand(3, 320, 320)},
        ["boxes", "scores", "labels"],
        list_input=True,
        note="untrained, neighbouring anchors score equal to about 1e-7, so which of two overlapping "
        "boxes NMS keeps (and the order of the detections) follows the last bits of each runtime's "
        "arithmetic: compare the leading detections, not every row",
    )


def main(out_dir):
    import numpy as np

    torch.manual_seed(0)
    torch.set_num_threads(2)
    # The fused encoder-layer kernel (inference fast path) has no ONNX form; export the plain layers.
    torch.backends.mha.set_fastpath_enabled(False)
    names = sys.argv[2:]
    for spec in models():
        if names and spec.name not in names:
            continue
        d = os.path.join(out_dir, spec.name)
        os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
        path = os.path.join(d, "model.onnx")
        args = tuple(spec.inputs.values())
        if spec.list_input:
            args = ([args[0]],)  # torchvision detection models take a list of images
        with torch.no_grad():
            torch.onnx.export(
                spec.model,
                args,
                path,
                input_names=list(spec.inputs),
                output_names=spec.outputs,
                dynamic_axes=spec.dynamic,
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        if spec.anonymous_dims:
            anonymize_dims(path)
        for k, v in spec.inputs.items():
            np.save(os.path.join(d, "inputs", f"{k}.npy"), v.numpy())
        meta = {
            "model": spec.what,
            "exporter": f"torch {torch.__version__} torch.onnx.export (TorchScript), opset {OPSET}",
            "weights": "random (torch.manual_seed(0)); batch-norm statistics randomized",
            "inputs": {k: list(v.shape) for k, v in spec.inputs.items()},
        }
        if spec.note:
            meta["note"] = spec.note
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=2)
        print(f"{spec.name}: {os.path.getsize(path) / 1e6:.1f} MB -> {path}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
