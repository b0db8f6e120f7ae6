"""Our Chroma embedding functions over the local MiniLM: int8 ONNX (default) or torch.

Both are passed explicitly to every Chroma collection, and vectors are
computed here and handed to Chroma directly, so Chroma's own default ONNX
model (and its downloader) is never created. Models load from local folders.

* :class:`OnnxEmbedding` (``embedding_backend="onnx"``, the default) runs the
  model converted to int8 ONNX (:mod:`localrag.rag.onnx_export`, done by
  ``scripts/setup.sh``, or here on first use) with ONNX Runtime.
* :class:`TorchEmbedding` (``embedding_backend="torch"``) runs the fp32
  sentence-transformers model in torch.

Their vectors differ slightly (cosine ~0.99), so each has its own
``fingerprint``: the index keeps them in separate Chroma spaces and re-embeds
a collection when the backend changes. A small LRU cache keyed by the text's
hash skips re-embedding repeated chunks (boilerplate, copied files): identical
text gives the identical vector, so it changes cost, never results.

    from localrag.rag.embed import make_embedder
    ef = make_embedder("/path/to/all-MiniLM-L6-v2", backend="onnx")
    vectors = ef.embed(["hello world"])          # (n, 384) float32, unit length
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnxruntime
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from tokenizers import Tokenizer

from localrag.config import default_models_dir
from localrag.rag.config import EMBEDDING_BACKENDS

CACHE_ENTRIES = 8192
QUIET_MAX_TEXTS = 4  # calls embedding this many texts or fewer (a question) run on the quiet session
# Bump when the ONNX export or quantization changes: it is part of the fingerprint and the
# converted file's folder, so an index built with an older file is re-embedded, never mixed.
ONNX_RECIPE = "onnx-int8pc-v1"


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


def onnx_model_path(model_dir: str | Path, models_dir: Path | None = None) -> Path:
    """Where the int8 ONNX conversion of ``model_dir`` lives: one folder per source model and recipe."""
    name, digest = model_fingerprint(model_dir).split(":", 1)
    return (models_dir or default_models_dir()) / "embeddings" / f"{name}-{digest}-{ONNX_RECIPE}" / "model.onnx"


def ensure_onnx_model(model_dir: str | Path) -> Path:
    """The int8 ONNX conversion of ``model_dir``, converted now (once, offline) if it is missing."""
    path = onnx_model_path(model_dir)
    if not path.is_file():
        print(
            f"[localrag] converting {model_dir} to int8 ONNX once, into {path} (scripts/setup.sh does this at install)",
            file=sys.stderr,
            flush=True,
        )
        # Lazy: the exporter imports torch and transformers (2-9 s measured here); only this
        # one-time conversion needs them, never an ONNX embedder whose file exists.
        from localrag.rag.onnx_export import export_int8

        export_int8(model_dir, path)
    return path


def max_seq_length(model_dir: str | Path) -> int:
    """The model's input limit in word pieces, [CLS] and [SEP] included (sentence_bert_config.json)."""
    cfg = Path(model_dir) / "sentence_bert_config.json"
    return int(json.loads(cfg.read_text()).get("max_seq_length", 256)) if cfg.is_file() else 256


@dataclass
class EmbedStats:
    """Work done by an embedder since it was made: texts actually encoded (cache misses) and the
    seconds spent encoding them (benchmarks read ``texts / seconds`` as the model's chunks/s)."""

    texts: int = 0
    seconds: float = 0.0


class Embedder(Protocol):
    """What the index needs from an embedding function (besides Chroma's EmbeddingFunction methods)."""

    model_path: str
    backend: str
    stats: EmbedStats

    @property
    def fingerprint(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...

    def count_tokens(self, texts: list[str]) -> int:
        """Word pieces the model reads of ``texts`` (after its truncation)."""
        ...

    def cached(self, key: str) -> bool: ...

    def prime(self, vectors: dict[str, np.ndarray]) -> None: ...

    def clear_cache(self) -> None: ...


class CachedEmbedding(EmbeddingFunction[Documents]):
    """The text-hash LRU cache and Chroma's protocol; subclasses compute vectors in ``_encode``."""

    backend = ""

    def __init__(self, model_path: str, batch_size: int = 64, threads: int | None = None) -> None:
        self.model_path = str(model_path)
        self.batch_size = batch_size
        self.threads = threads
        self.stats = EmbedStats()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def fingerprint(self) -> str:
        return model_fingerprint(self.model_path)

    @property
    def dimension(self) -> int:
        raise NotImplementedError

    def _encode(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32 unit vectors of ``texts``, no caching."""
        raise NotImplementedError

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
            started = time.perf_counter()
            vecs = self._encode(list(todo.values()))
            self.stats.seconds += time.perf_counter() - started
            self.stats.texts += len(todo)
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

    def clear_cache(self) -> None:
        """Forget every remembered vector (a rebuild must compute them, not copy them back)."""
        self._cache.clear()

    def _remember(self, key: str, vec: np.ndarray) -> None:
        self._cache[key] = vec
        self._cache.move_to_end(key)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)

    # Chroma persists an embedding function's identity with the collection.
    def get_config(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "batch_size": self.batch_size, "threads": self.threads}

    def default_space(self) -> str:
        return "cosine"

    def supported_spaces(self) -> list[str]:
        return ["cosine", "ip", "l2"]

    def is_legacy(self) -> bool:
        return False

    def describe(self) -> str:
        return json.dumps(self.get_config())


class TorchEmbedding(CachedEmbedding):
    """The fp32 sentence-transformers model in torch (``embedding_backend="torch"``).

    ``threads`` sets torch's thread count, which is process-wide (None leaves torch's default).
    """

    backend = "torch"

    def __init__(self, model_path: str, batch_size: int = 64, threads: int | None = None, device: str = "cpu") -> None:
        super().__init__(model_path, batch_size, threads)
        self.device = device
        self._model = None

    @property
    def model(self):
        if self._model is None:
            # Lazy: importing sentence_transformers (and torch) takes ~2-9 s, which the default
            # ONNX path and every command that never embeds should not pay.
            import torch
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            if self.threads:
                torch.set_num_threads(self.threads)
            hf_logging.disable_progress_bar()  # no "Loading weights" bar on every CLI call
            self._model = SentenceTransformer(self.model_path, device=self.device, local_files_only=True)
        return self._model

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        ).astype(np.float32)

    def count_tokens(self, texts: list[str]) -> int:
        limit = self.model.max_seq_length
        return sum(min(len(ids), limit) for ids in self.model.tokenizer(texts)["input_ids"])

    @staticmethod
    def name() -> str:
        return "localrag-sentence-transformers"

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "device": self.device}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> TorchEmbedding:
        return TorchEmbedding(**config)


class OnnxEmbedding(CachedEmbedding):
    """The int8 ONNX conversion of the model in ONNX Runtime (``embedding_backend="onnx"``).

    Texts are tokenized with the model's own fast tokenizer (truncated at its
    ``max_seq_length``) and run one at a time (see ``_encode``). ``threads``: ONNX Runtime's intra-op threads; None follows OMP_NUM_THREADS
    when set (the same knob as torch), else ONNX Runtime's default (one per physical core).
    """

    backend = "onnx"

    def __init__(self, model_path: str, batch_size: int = 64, threads: int | None = None) -> None:
        super().__init__(model_path, batch_size, threads)
        self._session: onnxruntime.InferenceSession | None = None
        self._quiet_session: onnxruntime.InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None

    @property
    def fingerprint(self) -> str:
        return f"{model_fingerprint(self.model_path)}+{ONNX_RECIPE}"

    @property
    def onnx_path(self) -> Path:
        return onnx_model_path(self.model_path)

    @property
    def session(self) -> onnxruntime.InferenceSession:
        """The session for batches (ingest): its threads spin between runs (one text per run)."""
        if self._session is None:
            self._session = self._open(spinning=True)
        return self._session

    @property
    def quiet_session(self) -> onnxruntime.InferenceSession:
        """The session for a few texts (a question): its threads sleep as soon as a run ends. ONNX
        Runtime's threads otherwise spin on the cores after a run, and a question's embedding is
        followed at once by the model's forwards: measured on 2 cores, SmolLM2's next five
        forwards took 10.6-15.6 ms instead of 7.1-7.8. Spinning pays within a batch (256 chunks:
        1.42 s against 1.69 s without)."""
        if self._quiet_session is None:
            self._quiet_session = self._open(spinning=False)
        return self._quiet_session

    def _open(self, spinning: bool) -> onnxruntime.InferenceSession:
        path = ensure_onnx_model(self.model_path)
        options = onnxruntime.SessionOptions()
        threads = self.threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        options.intra_op_num_threads = threads  # 0 = ONNX Runtime's default
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            tok = Tokenizer.from_file(str(Path(self.model_path) / "tokenizer.json"))
            tok.enable_truncation(max_seq_length(self.model_path))
            tok.no_padding()  # tokenizer.json may carry a fixed padding length; texts run unpadded
            self._tokenizer = tok
        return self._tokenizer

    @property
    def dimension(self) -> int:
        return int(self.session.get_outputs()[0].shape[1])

    def _encode(self, texts: list[str]) -> np.ndarray:
        """One text per run. Dynamic quantization picks its activation scales per run, so a text
        run in a batch would get a vector that depends on its neighbours and padding (measured:
        cosine down to 0.985 against the same text alone); alone, identical text always gives
        the identical vector, no compute goes to padding, and on a 2-core AVX-512 CPU it
        measured faster too (36 against 24 chunks/s in batches of 64, one thread)."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        session = self.quiet_session if len(texts) <= QUIET_MAX_TEXTS else self.session
        for start in range(0, len(texts), self.batch_size):  # tokenize in batches: the Rust side is parallel
            encoded = self.tokenizer.encode_batch(texts[start : start + self.batch_size])
            for row, enc in enumerate(encoded, start=start):
                feeds = {
                    "input_ids": np.array([enc.ids], dtype=np.int64),
                    "attention_mask": np.array([enc.attention_mask], dtype=np.int64),
                }
                out[row] = session.run(None, feeds)[0][0]
        return out

    def count_tokens(self, texts: list[str]) -> int:
        return sum(len(enc.ids) for enc in self.tokenizer.encode_batch(texts))

    @staticmethod
    def name() -> str:
        return "localrag-onnx-int8"

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> OnnxEmbedding:
        return OnnxEmbedding(**config)


def make_embedder(
    model_path: str, backend: str = "onnx", batch_size: int = 64, threads: int | None = None, device: str = "cpu"
) -> CachedEmbedding:
    """The embedding function for ``backend`` ("onnx": int8 ONNX Runtime; "torch": fp32 torch)."""
    if backend == "onnx":
        return OnnxEmbedding(model_path, batch_size, threads)
    if backend == "torch":
        return TorchEmbedding(model_path, batch_size, threads, device)
    raise ValueError(f"embedding backend must be one of {EMBEDDING_BACKENDS}, got {backend!r}")
