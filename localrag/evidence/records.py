"""What the evidence aligner reads, its calibrated constants, and the marked answer it returns.

The evidence records themselves (``AnswerEvidence``, ``SentenceEvidence``, ``EvidenceSpan``,
``Signals``, ``AlignmentStats``, ``CopiedSpan``) live in ``localrag.results``, beside the
``AnswerResult`` that carries them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np


# ------------------------------------------------------------------ inputs
class EvidenceChunk(Protocol):
    """What the aligner reads of a chunk: the fields of ``localrag.results.ChunkLike`` without its
    methods, so a search ``Hit`` and an answer's ``Citation`` both fit."""

    @property
    def chunk_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def file(self) -> str: ...
    @property
    def page(self) -> int | None: ...
    @property
    def line_start(self) -> int | None: ...
    @property
    def line_end(self) -> int | None: ...


class Embedder(Protocol):
    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit vectors, one row per text."""


Judge = Callable[[str, str], float]  # (claim, evidence text) -> P(the evidence supports the claim)


# ------------------------------------------------------------------ outputs
@dataclass(frozen=True)
class MarkedAnswer:
    text: str  # the answer with [n] after each supported sentence
    numbering: tuple[str, ...]  # chunk id of marker n at index n - 1


@dataclass(frozen=True)
class EvidenceConfig:
    """Constants of the aligner. The weights, the bias and the thresholds are calibrated by

        python -m localrag bench grounding --suite squad --split calibration --n 300 --calibrate

    on the calibration half of SQuAD v2 dev (questions split by a hash of their paragraph, see
    ``localrag.bench.data.split_of``), never on the reported half: a logistic regression of
    "the answer contains a gold answer" (F1 >= 0.5 had 3 positives in 300) on the answer-level
    signals, each weight kept to its sign (more evidence never lowers the support; overlap came
    out 0 beside the exact and embedding signals), and the refusal threshold as the highest that
    refused at most 15% of the answerable questions there. With the bundled SmolLM2-135M the signals separate right from wrong answers
    only moderately, so the weights are small and the threshold low (see the README's figures).
    ``sentence_threshold`` is the same threshold applied to one sentence."""

    weight_exact: float = 0.4087
    weight_overlap: float = 0.0000
    weight_embedding: float = 1.1536
    weight_missing: float = -0.2654
    weight_context: float = 0.3694  # answer level: logit moves by weight * (context - 1)
    weight_unmatched: float = -0.1823  # answer level: a number or name of the question not in the evidence
    weight_novel: float = 1.2420  # answer level: logit moves by weight * (novel - 1)
    weight_relevance: float = 1.2594  # answer level: logit moves by weight * (relevance - 1)
    relevance_default: float = 0.5  # stands in for the relevance signal when no embedder is given
    weight_judge: float = 0.0  # the judge is off by default: see the README (AUROC 0.52, ~1 s per answer)
    judge_center: float = 0.0  # the judge's logit is centred on this
    embedding_default: float = 0.5  # stands in for the embedding signal when no embedder is given
    bias: float = -1.6072
    sentence_threshold: float = 0.0326  # a sentence scoring below this is unsupported
    refusal_threshold: float = 0.0326  # an answer scoring below this is not supported by the documents
    phrase_tokens: int = 3  # an exact match counts when at least this long (or the whole sentence)
    min_overlap: float = 0.3  # a chunk without such a match is evidence only if it has this share of the words
    max_chunks: int = 3  # chunks one sentence may cite
    judge_budget_s: float = 0.2  # per answer; the judge is skipped once its time exceeds this
