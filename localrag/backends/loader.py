"""Load a model with the backend its format needs (llama.cpp for GGUF, transformers otherwise).

    backend = load_backend(ModelConfig(model="gemma3-270m"))
"""

from __future__ import annotations

from dataclasses import replace

from localrag.backends.base import Backend
from localrag.backends.llamacpp import LlamaCppBackend
from localrag.config import ModelConfig
from localrag.judge import probe_layers
from localrag.models import ModelError, resolve


def load_backend(config: ModelConfig) -> Backend:
    """Load `config.model` with the backend its format needs."""
    if config.backend not in ("llamacpp", "hf"):
        raise ModelError(f"unknown backend {config.backend!r}; use 'llamacpp' or 'hf'")
    spec = resolve(config.model)
    if spec.format == "gguf" and config.backend == "llamacpp":
        if config.hidden_layers is None:
            config = replace(config, hidden_layers=probe_layers(spec.path))
        return LlamaCppBackend(config, spec)
    # Lazy: the transformers backend imports torch and transformers, which costs seconds of start-up
    # (see docs/design.md, "Imports") that a llama.cpp-only session never needs.
    try:
        from localrag.backends.hf import HFBackend
    except ModuleNotFoundError as exc:
        raise ModelError(f"{spec.path}: transformers models need torch and transformers, which are not installed") from exc
    return HFBackend(config, spec)
