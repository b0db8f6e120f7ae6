"""Our Chroma embedding function over a local sentence-transformers model (bundled MiniLM).

It is passed explicitly to every Chroma collection, and vectors are computed
here and handed to Chroma directly, so Chroma's own default ONNX model (and its
downloader) is never created. The model loads from a local folder only.

A small LRU cache keyed by the text's hash skips re-embedding repeated chunks
(boilerplate, copied files, generated logs): identical text gives the identical
vector, so this changes cost, never results.

    from localrag.rag.embed import MiniLMEmbedding
    ef = MiniLMEmbedding("/path/to/all-MiniLM-L6-v2")
    vectors = ef(["hello world"])          # list of 384-d float32 arrays, unit length
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings

CACHE_ENTRIES = 8192


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def model_fingerprint(model_dir: str | Path) -> str:
    """Identifies the embedding model by its config and weight sizes (cheap, no full hash)."""
    p = Path(model_dir)
    h = hashlib.sha256(p.name.encode())
    for name in ("config.json", "sentence_bert_config.json", "modules.json", "tokenizer_config.json"):
        f = p / name
        if f.is_file():
            h.update(name.encode() + f.read_bytes())
    for f in sorted(p.rglob("*")):
        if f.suffix in {".safetensors", ".bin", ".onnx"} and f.is_file():
            h.update(f"{f.relative_to(p)}:{f.stat().st_size}".encode())
    return f"{p.name}:{h.hexdigest()[:12]}"


class MiniLMEmbedding(EmbeddingFunction[Documents]):
    """sentence-transformers model from a local folder, normalised vectors (cosine = dot)."""

    def __init__(self, model_path: str, device: str = "cpu", batch_size: int = 64) -> None:
        self.model_path = str(model_path)
        self.device = device
        self.batch_size = batch_size
        self._model = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def model(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # no "Loading weights" bar on every CLI call
            self._model = SentenceTransformer(self.model_path, device=self.device, local_files_only=True)
        return self._model

    @property
    def dimension(self) -> int:
        getter = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        return int(getter())

    def __call__(self, input: Documents) -> Embeddings:  # noqa: A002 - Chroma's protocol name
        return list(self.embed(list(input)))

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors for ``texts`` (float32, unit norm), reusing cached ones for repeated text."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        keys = [text_hash(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        todo: dict[str, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k in self._cache:
                found[k] = self._cache[k]
                self._cache.move_to_end(k)
            elif k not in todo:
                todo[k] = t
        if todo:
            vecs = self.model.encode(
                list(todo.values()),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            ).astype(np.float32)
            for k, v in zip(todo, vecs, strict=True):
                found[k] = v
                self._remember(k, v)
        return np.stack([found[k] for k in keys])

    def embed_query(self, input: Documents) -> Embeddings:  # noqa: A002
        return self(input)

    def cached(self, key: str) -> bool:
        return key in self._cache

    def prime(self, vectors: dict[str, np.ndarray]) -> None:
        """Seed the cache with known vectors (e.g. of unchanged chunks of an edited file)."""
        for key, vec in vectors.items():
            self._remember(key, np.asarray(vec, dtype=np.float32))

    def _remember(self, key: str, vec: np.ndarray) -> None:
        self._cache[key] = vec
        self._cache.move_to_end(key)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)

    # Chroma persists an embedding function's identity with the collection.
    @staticmethod
    def name() -> str:
        return "localrag-sentence-transformers"

    def get_config(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "device": self.device, "batch_size": self.batch_size}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbedding:
        return MiniLMEmbedding(**config)

    def default_space(self) -> str:
        return "cosine"

    def supported_spaces(self) -> list[str]:
        return ["cosine", "ip", "l2"]

    def is_legacy(self) -> bool:
        return False

    def describe(self) -> str:
        return json.dumps(self.get_config())
