"""Frozen configuration dataclasses for localrag.

Every knob the engine reads lives here, as an immutable value passed down
explicitly. There are no module-level settings: build a config, hand it over.

    from localrag.config import ModelConfig, GenerationConfig
    cfg = ModelConfig(model="qwen2.5-coder-1.5b-instruct", n_ctx=4096)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

# The default answer model: Qwen2.5-Coder-1.5B-Instruct, with its 0.5B sibling as the registry's
# draft model for Speedup and Grounded (localrag.models). SmolLM2-135M is the small, fast choice.
DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct"


def repo_root() -> Path:
    """The checkout this package lives in (models/ and docs_index/ sit beside it)."""
    return Path(__file__).resolve().parent.parent


def default_data_dir() -> Path:
    """Where chat history and uploads live; override with LOCALRAG_DATA_DIR."""
    return Path(os.environ.get("LOCALRAG_DATA_DIR", repo_root() / "data"))


def default_index_dir() -> Path:
    """Where Chroma and the ingest manifest live; override with LOCALRAG_INDEX_DIR."""
    return Path(os.environ.get("LOCALRAG_INDEX_DIR", repo_root() / "docs_index"))


def default_cache_dir() -> Path:
    """Measured cost curves, converted models and benchmark data; override with LOCALRAG_CACHE_DIR."""
    return Path(os.environ.get("LOCALRAG_CACHE_DIR", Path.home() / ".cache" / "localrag"))


def default_models_dir() -> Path:
    """Where bundled model files are materialised; override with LOCALRAG_MODELS_DIR."""
    return Path(os.environ.get("LOCALRAG_MODELS_DIR", repo_root() / "models"))


@dataclass(frozen=True)
class ModelConfig:
    """How to load one model.

    model: a registry name (``qwen2.5-coder-1.5b-instruct``), a ``.gguf`` path, or a
    local Hugging Face model folder.
    n_gpu_layers: -1 offloads every layer when the llama.cpp build supports a
    GPU (CUDA/Metal); 0 keeps everything on the CPU.
    n_seq_max: KV sequences in one context; a token tree needs one per leaf (llama.cpp keeps
    the last one for itself: trees get n_seq_max - 1 leaves).
    flash_attn: None lets llama.cpp pick per device (auto); True/False force it.
    deterministic: llama.cpp on the CPU computes every token's logits the same way however the
    context was batched (prompt cache, tree verification), so greedy Plain repeats itself and
    Speedup writes Plain's answer token for token (``localrag.backends.llamacpp``). Needs flash
    attention; has no effect on GPU layers, whose kernels keep their own batch-dependent rounding.
    repack: llama.cpp's repacked weights (interleaved blocks multiplied by AVX2/AVX-512 GEMMs).
    Deterministic mode keeps them only on a build with our batch-invariant patch
    (``scripts/patches/``), and by default (None) for a Q4_K file only where the patch has its
    Q4_K row kernel (AVX-512 builds): elsewhere its one-token steps pay a 4-row GEMM. True keeps
    them wherever the patch keeps the bits, False never (``bench kernels``' arms).
    hidden_layers: layers whose hidden state at the end of each prefill the backend keeps (llama.cpp:
    ``Backend.hidden_states``; -1 is the final norm), for the answerability judge; None: the layers
    that the judge's probes for this model file read (``localrag.judge.probe_layers``).
    """

    model: str = DEFAULT_MODEL
    n_ctx: int = 4096
    n_batch: int = 512
    n_gpu_layers: int = -1
    n_threads: int | None = None
    n_seq_max: int = 64
    flash_attn: bool | None = None  # None = llama.cpp decides per device
    deterministic: bool = True
    repack: bool | None = None
    hidden_layers: tuple[int, ...] | None = None
    # Which backend loads the model: "llamacpp" (GGUF files) or "hf" (transformers: an HF
    # folder, or a GGUF through gguf_file=, dequantized). HF folders always load in "hf".
    backend: str = "llamacpp"
    device: str | None = None  # hf: None = cuda, then mps, then cpu; or "cuda:1", "mps", "cpu"
    dtype: str | None = None  # hf: None = bf16/fp16 on a GPU, fp32 on CPU; or "float32", "bf16", "fp16"


@dataclass(frozen=True)
class RepetitionConfig:
    """The repetition guard (``localrag.repetition``): an answer stops at its first looping repeat.

    min_words: a repeated sentence this long (in words) stops the answer.
    min_span, max_period: a span of p <= max_period tokens written again back to back stops the
    answer once the repetition is max(p, min_span) tokens long. Numbers count as one token for the
    span (a template with a counter, "level 1 is ..., level 2 is ...", is a loop) when the span
    holds at least ``template_words`` words.
    template_repeats: a sentence written this many times with only its numbers changed stops the
    answer at the last copy.
    """

    min_words: int = 3
    min_span: int = 16
    max_period: int = 64
    template_words: int = 3
    template_repeats: int = 3


@dataclass(frozen=True)
class GenerationConfig:
    """Decoding settings. temperature == 0 means greedy (argmax). repetition: the repetition
    guard's settings (None: off; every mode applies the same guard to the emitted tokens)."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int | None = None
    stop: tuple[str, ...] = ()
    repetition: RepetitionConfig | None = field(default_factory=RepetitionConfig)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def with_(self, **changes) -> GenerationConfig:
        return replace(self, **changes)


@dataclass(frozen=True)
class GroundedConfig:
    """Speculative RAG (docs/design.md, "Grounded"; arXiv 2407.08223): n retrieved chunks, k clusters
    (= chunks per draft), m drafts. Scores are natural-log; see ``localrag.grounded.pipeline``.

    min_relevance: retrieval gate. A chunk counts as relevant when its dense cosine
    similarity to the question is >= this (MiniLM cosine; unrelated text sits near 0-0.2).
    min_score: selection gate on the best draft's combined score
    (``localrag.grounded.scoring.combined_score``); below it the answer is "not in the documents".
    Set on the Qwen pair's scores over a sample kept apart from the reported one (`bench qa --suite
    squad --n 100 --seed 1`, README "Grounded on the pair"): the best drafts scored -1.78 to -0.8,
    answerable and unanswerable questions alike, and the gate that served F1 plus abstention best
    there (-1.02) refused 81% of the answerable questions, so the gate is set low, below every best
    draft of that sample: it rejects only drafts both models find implausible. "Not in the
    documents" then comes from the retrieval gate (min_relevance) and the evidence check.
    cluster: False = the no-clustering ablation (m random k-subsets of the n chunks).
    use_verifier: False = the drafter-only ablation (best by draft score alone).
    extractive: rationale and answer are copied spans of the subset's chunks (``localrag.grounded.drafting``);
    off by default: on the held-out sample above the bundled drafter's free drafts reached F1 12.3
    against 3.7 for copied spans (standard RAG: 10.3).
    """

    n: int = 10
    k: int = 2
    m: int = 5
    seed: int = 0
    # the rationale's limit: there it ends at its last sentence end, or finishes its sentence within
    # twice the limit (the answer's own limit is the request's max_tokens, GenerationConfig)
    rationale_tokens: int = 24
    min_relevance: float = 0.25
    min_score: float = -2.0
    cluster: bool = True
    use_verifier: bool = True
    extractive: bool = False
    # no worked example: the 0.5B drafter copied one ("Gustave Eiffel", "1889") into drafts of questions
    # its documents did not answer; the decoder itself starts "Rationale:" and "Answer:"
    drafter_prompt: str = (
        "Read the documents and answer the question. First write one short sentence of evidence quoted "
        "from the documents, then the answer as a short phrase."
    )
    reflection_question: str = "Do you think the rationale supports the answer, yes or no?"

    def with_(self, **changes) -> GroundedConfig:
        return replace(self, **changes)


@dataclass(frozen=True)
class RasdConfig:
    """RASD speedup mode (localrag.rasd): tree sizes, retrieval and draft settings.

    max_nodes caps the drafted nodes per step (the cost curve picks the size
    below it); max_depth caps a path. The node budget itself is never a fixed
    number: it maximises expected accepted tokens per second on the measured
    verify-cost curve T(k) (cached under LOCALRAG_CACHE_DIR or ~/.cache/localrag).
    """

    max_nodes: int = 48  # drafted nodes per verification, at most (also <= n_seq_max leaves)
    max_depth: int = 12  # longest drafted path
    # retrieval datastore
    max_match: int = 16  # longest context suffix tried
    min_match: int = 1  # shortest context suffix accepted as a match
    max_occurrences: int = 32  # continuations collected per lookup (most recent first)
    retrieval_top: int = 32  # retrieval nodes kept after pruning (RASD)
    retrieval_min_score: float = 0.0  # drop retrieval nodes below this draft-cumulative probability
    # draft model (dynamic tree, EAGLE-2 style)
    draft_nodes: int = 16  # nodes the draft tree grows to (a chain: its longest, with max_depth)
    draft_branch: int = 4  # top-k children considered per expanded node
    draft_width: int = 4  # nodes expanded per draft forward
    draft_depth: int = 6  # draft tree rounds (batched forwards) per step, at most
    # grow a single greedy chain (incremental, cost-aware) instead of a tree; None = decide from the
    # draft's measured cost curve (a chain where it is steep, see CostModel.steep)
    draft_chain: bool | None = None
    # cost-aware budget
    use_budget: bool = True  # False: always verify the pruned tree (tests, ablations)
    min_gain: float = 1.0  # speculate only when expected tokens/s >= min_gain x plain
    probe_every: int = 16  # plain steps before a speculative step is probed again
    # a long copy's deeper nodes conditioned on its accepted ancestors of the same bucket
    # (phases.estimate): long chains from an answer's first step. Off: it did not pay on the tune
    # half (scripts/budget_proxy.py; bench speed's "rasd-runs" and "retrieval-runs" methods)
    copy_runs: bool = False
    calibrate: bool = True  # measure T(k) at load (else a linear guess, for unit tests)
    use_retrieval: bool = True  # use the retrieval drafter (False: draft tree only)


@dataclass(frozen=True)
class ChunkCacheConfig:
    """The approximate prefill's chunk KV cache (``localrag.backends.chunk_reuse``; used only when an
    answer asks for ``prefill="reuse"``).

    folder: where entries live (None: ``<LOCALRAG_CACHE_DIR>/chunk-kv``).
    max_bytes: the size cap; the least recently used entries go first (about 28 KiB a token for
        the 1.5B model: 2 GiB holds some 500 chunks of 140 tokens).
    head: tokens at the head of each chunk read at their place, attending to the chunks before
        (EPIC's recompute); the rest of the chunk's KV comes from the cache.
    min_tokens: a chunk with fewer than ``head + min_tokens`` tokens is read exactly.
    """

    folder: Path | None = None
    max_bytes: int = 2 << 30
    head: int = 16
    min_tokens: int = 16

    def __post_init__(self) -> None:
        if self.max_bytes < 0 or self.head < 0 or self.min_tokens < 1:
            raise ValueError("chunk cache: max_bytes and head must be >= 0, min_tokens >= 1")

    @property
    def path(self) -> Path:
        return Path(self.folder) if self.folder is not None else default_cache_dir() / "chunk-kv"
