"""Every transformers API difference the HF backend depends on, in one place.

Transformers renames things between releases (``torch_dtype`` -> ``dtype``,
``past_key_values`` -> ``cache``, ``DynamicCache.crop`` taking an absolute
length -> a negative count, ``cache.key_cache[i]`` -> ``cache.layers[i].keys``).
The backend calls only the functions below; when a release moves something
again, this is the file to change. Checked against transformers 5.23.

    model = load_model(folder, gguf_file="x.gguf", dtype=torch.float32, device=torch.device("cpu"))
    cache = new_cache(model)
    logits = forward(model, ids, cache, position_ids=pos, attention_mask=mask)   # (q, V)
    keep_cache_positions(cache, start=past, index=torch.tensor([0, 2, 3]))        # compaction
"""

from __future__ import annotations

import inspect
from functools import cache as memoize
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache


# --- loading ------------------------------------------------------------------------
def _takes(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params


def load_model(
    path: Path, gguf_file: str | None, dtype: torch.dtype, device: torch.device, attn_implementation: str = "sdpa"
):
    """AutoModelForCausalLM from a local folder (or a GGUF inside it), eval mode, on `device`."""
    kwargs: dict = {"attn_implementation": attn_implementation, "local_files_only": True}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    # `torch_dtype` was renamed `dtype` in transformers 4.56.
    kwargs["dtype" if _accepts_dtype_kwarg() else "torch_dtype"] = dtype
    model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    return model.to(device).eval()


@memoize
def _accepts_dtype_kwarg() -> bool:
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return (major, minor) >= (4, 56)


def load_tokenizer(path: Path, gguf_file: str | None):
    kwargs: dict = {"local_files_only": True}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    return AutoTokenizer.from_pretrained(str(path), **kwargs)


def save_dequantized(model, tokenizer, folder: Path) -> None:
    """save_pretrained for a model loaded from a GGUF (already dequantized to plain tensors).

    transformers marks such a model as "quantized with gguf, not serializable";
    its weights are ordinary float tensors, so drop that marker and save as usual.
    """
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def sliding_window_layers(config) -> bool:
    """True when some attention layers see only a window (their cache is not a plain prefix)."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types:
        return any(t != "full_attention" for t in layer_types)
    return bool(getattr(text, "sliding_window", None)) and getattr(text, "use_sliding_window", True) is not False


# --- the KV cache ---------------------------------------------------------------------
def new_cache(model):
    """An empty growable KV cache for `model`."""
    if _takes(DynamicCache.__init__, "config"):
        return DynamicCache(config=model.config)
    return DynamicCache()


def cache_length(cache) -> int:
    return int(cache.get_seq_length())


def crop(cache, n_keep: int) -> None:
    """Drop cached positions n_keep.. (every layer).

    ``DynamicCache.crop`` takes a *negative* count of tokens to remove in
    transformers 5 (a positive value raises); older releases read a positive
    value as the absolute length but also accept a negative count, so the
    negative form works in both.
    """
    n_drop = cache_length(cache) - n_keep
    if n_drop > 0:
        cache.crop(-n_drop)


def _layer_tensors(cache) -> list[list[torch.Tensor]]:
    """[[keys, values], ...] per layer: `cache.layers[i].keys` (>= 4.56) or `cache.key_cache[i]` (older)."""
    if hasattr(cache, "layers"):
        return [[layer.keys, layer.values] for layer in cache.layers if getattr(layer, "keys", None) is not None]
    return [[k, v] for k, v in zip(cache.key_cache, cache.value_cache, strict=True)]  # pragma: no cover


@torch.inference_mode()  # the cached tensors are inference tensors: edit them in the same mode
def keep_cache_positions(cache, start: int, index: torch.Tensor) -> None:
    """Compaction: cached positions start+index[k] move to start+k, then everything after is cropped.

    Tensors are (batch, kv_heads, seq, head_dim). ``index`` is increasing, so
    each source is at or after its destination; index_select copies first,
    so overlapping ranges are safe.
    """
    m = int(index.numel())
    for tensors in _layer_tensors(cache):
        for t in tensors:
            if t.numel():
                t[:, :, start : start + m] = t.index_select(2, index.to(t.device) + start)
    crop(cache, start + m)


# --- the forward pass -------------------------------------------------------------------
@memoize
def _cache_kwarg(model_cls: type) -> str:
    """`past_key_values` is being renamed `cache`; use whichever forward() takes."""
    return "past_key_values" if _takes(model_cls.forward, "past_key_values") else "cache"


@memoize
def _has_logits_to_keep(model_cls: type) -> bool:
    return _takes(model_cls.forward, "logits_to_keep")


@torch.inference_mode()
def forward(
    model,
    input_ids: torch.Tensor,
    cache,
    position_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    last_only: bool = False,
) -> torch.Tensor:
    """One forward pass appending `input_ids` (1, q) to `cache`; returns (q, V) logits (or (1, V) if last_only).

    attention_mask None: plain causal attention over cache + input.
    A 4D float mask (1, 1, q, past+q) is additive (0 = attend, finfo.min = masked)
    and transformers passes it to the attention kernel unchanged.
    """
    kwargs = {_cache_kwarg(type(model)): cache, "use_cache": True}
    if position_ids is not None:
        kwargs["position_ids"] = position_ids
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    if last_only and _has_logits_to_keep(type(model)):
        kwargs["logits_to_keep"] = 1
    out = model(input_ids=input_ids, **kwargs)
    logits = out.logits[0]  # (q or 1, V)
    return logits[-1:] if last_only else logits


def tree_attention_mask(
    ancestors: torch.Tensor, past: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """(1, 1, n, past+n) additive mask: node i sees the whole committed prefix and its ancestors-or-self.

    ancestors: (n, n) bool, ancestors[i, j] = node j is node i or an ancestor of it.
    """
    n = ancestors.shape[0]
    mask = torch.full((1, 1, n, past + n), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask[..., :past] = 0.0
    mask[0, 0, :, past:].masked_fill_(ancestors.to(device), 0.0)
    return mask


@torch.inference_mode()
def generate(model, input_ids: torch.Tensor, cache, **kwargs) -> torch.Tensor:
    """Greedy `model.generate`, continuing from `cache` (holding input_ids[:, :-1]) when given; (1, prompt+new) ids."""
    attention_mask = torch.ones_like(input_ids)
    kwargs = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None, **kwargs}
    if cache is not None:
        kwargs[_cache_kwarg(type(model))] = cache
    return model.generate(input_ids, attention_mask=attention_mask, **kwargs)
