"""Convert a local sentence-transformers MiniLM folder into an int8 ONNX model, offline.

The recipe (``ONNX_RECIPE`` in :mod:`localrag.rag.embed`): the Hugging Face
encoder plus mean pooling and L2 normalisation, traced with
``torch.onnx.export`` into one graph whose output is the sentence vector; then
ONNX Runtime's dynamic quantization with int8 weights per output channel
(activations are quantized per batch at run time). Per-channel weights matter:
per-tensor int8 measured a minimum cosine of 0.88 to the fp32 vectors on
Python-docs chunks, per-channel 0.987.

``scripts/setup.sh`` converts the bundled MiniLM at install through
:func:`localrag.rag.embed.ensure_onnx_model`, which the ONNX embedder also calls
on first use when the file is missing. Nothing is downloaded: the weights come
from the local folder.

    export_int8("/path/to/all-MiniLM-L6-v2", Path("models/embeddings/.../model.onnx"))
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import onnx
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from transformers import AutoModel

OPSET = 17


class OnnxExportError(RuntimeError):
    """A model folder that this recipe cannot convert; the message says why."""


class SentenceVector(torch.nn.Module):
    """Encoder + mean pooling over real tokens + L2 normalisation, as sentence-transformers computes it."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (batch, seq, 1): 1 on real tokens, 0 on padding
        mean = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, p=2.0, dim=1)


def check_convertible(model_dir: Path) -> None:
    """The recipe reproduces Transformer + mean pooling (+ normalize) models with a fast tokenizer."""
    if not (model_dir / "tokenizer.json").is_file():
        raise OnnxExportError(f"{model_dir}: no tokenizer.json (the ONNX embedder needs a fast tokenizer)")
    pooling = model_dir / "1_Pooling" / "config.json"
    if pooling.is_file() and not json.loads(pooling.read_text()).get("pooling_mode_mean_tokens", False):
        raise OnnxExportError(
            f"{model_dir}: pooling is not mean pooling; use IndexConfig(embedding_backend='torch')"
        )


def export_int8(model_dir: str | Path, dest: Path) -> Path:
    """Trace, quantize and atomically place the model at ``dest`` (concurrent builders are safe)."""
    model_dir = Path(model_dir)
    check_convertible(model_dir)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=dest.parent) as tmp, _quiet():
        fp32 = Path(tmp) / "fp32.onnx"
        quantized = Path(tmp) / dest.name
        trace_fp32(model_dir, fp32)
        quantize_int8(fp32, quantized)
        os.replace(quantized, dest)
    return dest


@contextmanager
def _quiet():
    """Silence the exporter's tracer warnings and the quantizer's pre-processing hint (root logger)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)


def trace_fp32(model_dir: Path, out: Path) -> None:
    encoder = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager", local_files_only=True)
    encoder.eval()
    example = (torch.ones(2, 16, dtype=torch.long), torch.ones(2, 16, dtype=torch.long))
    dynamic = {0: "batch", 1: "sequence"}
    with torch.inference_mode():
        torch.onnx.export(
            SentenceVector(encoder),
            example,
            str(out),
            input_names=["input_ids", "attention_mask"],
            output_names=["sentence_embedding"],
            dynamic_axes={"input_ids": dynamic, "attention_mask": dynamic, "sentence_embedding": {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,  # the TorchScript exporter needs no extra package (the dynamo one needs onnxscript)
        )


def quantize_int8(fp32: Path, out: Path) -> None:
    quantize_dynamic(
        str(fp32),
        str(out),
        weight_type=QuantType.QInt8,
        per_channel=True,
        # The traced graph's dynamic shapes defeat ONNX shape inference on some MatMul outputs.
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
