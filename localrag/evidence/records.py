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

        python -m localrag bench grounding --suite squad --split calibration --n 100 --calibrate

    on the calibration half of SQuAD v2 dev (questions split by a hash of their paragraph, see
    ``localrag.bench.data.split_of``), never on the reported half: a logistic regression of "the
    answer contains a gold answer" on the answer-level signals, the answer model's confidence
    included, each weight kept to its sign (more evidence never lowers the support), and the
    refusal threshold as the highest that refused (with the model's own refusals) at most 15% of
    the answerable questions there. These defaults are the default answer model's
    (Qwen2.5-Coder-1.5B-Instruct), fitted on that seeded 100-question sample (56 answerable, 44 not;
    83 answered). ``for_model`` gives the bundled small models their own fit (made before the
    confidence existed: its weight is 0 there). ``sentence_threshold`` is the same threshold applied
    to one sentence. The answerability judge's p(answerable) is a signal ``--calibrate`` fits
    (``weight_answerable``) but not yet adopted: fitted with the app's instructions it separated
    held-out answerable questions from unanswerable ones far better, at a threshold that warned on
    45% of the answerable ones (docs/benchmarks.md, "The judge's p in the evidence score"); at one
    that warned on 13% of the written answers out of fold, on 26% of the held-out half's ("The
    evidence check refitted on the app's answers")."""

    weight_exact: float = 0.3246
    weight_overlap: float = 0.1341
    weight_embedding: float = 0.5815
    weight_missing: float = 0.0000
    weight_context: float = 0.9816  # answer level: logit moves by weight * (context - 1)
    weight_unmatched: float = -0.2362  # answer level: a number or name of the question not in the evidence
    weight_novel: float = 0.0000  # answer level: logit moves by weight * (novel - 1)
    weight_relevance: float = 0.8392  # answer level: logit moves by weight * (relevance - 1)
    relevance_default: float = 0.5  # stands in for the relevance signal when no embedder is given
    weight_confidence: float = 0.9203  # answer level: logit moves by weight * (confidence - confidence_default)
    confidence_default: float = -0.1865  # stands in for the answer model's confidence where it is unknown
    weight_answerable: float = 0.0  # answer level: logit moves by weight * (logit p(answerable) - answerable_center)
    answerable_center: float = 0.0  # stands in for the answerability judge's logit where no judge read the question
    weight_judge: float = 0.0  # the judge is off by default: see the README (AUROC 0.52, ~1 s per answer)
    judge_center: float = 0.0  # the judge's logit is centred on this
    embedding_default: float = 0.5  # stands in for the embedding signal when no embedder is given
    bias: float = -0.4018
    sentence_threshold: float = 0.1750  # a sentence scoring below this is unsupported
    refusal_threshold: float = 0.1750  # an answer scoring below this is not supported by the documents
    phrase_tokens: int = 3  # an exact match counts when at least this long (or the whole sentence)
    min_overlap: float = 0.3  # a chunk without such a match is evidence only if it has this share of the words
    max_chunks: int = 3  # chunks one sentence may cite
    judge_budget_s: float = 0.2  # per answer; the judge is skipped once its time exceeds this

    @staticmethod
    def for_model(model: str) -> EvidenceConfig:
        """The constants fitted for answers written by ``model`` (a registry name): the bundled small
        models' own fit, else the default answer model's (these defaults), which stands for any
        model that answers rather than restates the question."""
        return SMALL_MODELS_FIT if model in SMALL_MODELS else EvidenceConfig()


# Fitted for SmolLM2-135M (the default before the 1.5B) on 300 calibration questions, where F1 >= 0.5 had
# 3 positives: its answers restate the question far more often than they answer it. Used for the
# bundled small models, whose support scores sit far lower than the 1.5B's.
SMALL_MODELS = ("smollm2-135m-instruct", "gemma3-270m")
SMALL_MODELS_FIT = EvidenceConfig(
    weight_exact=0.4087, weight_overlap=0.0, weight_embedding=1.1536, weight_missing=-0.2654, weight_context=0.3694,
    weight_unmatched=-0.1823, weight_novel=1.2420, weight_relevance=1.2594, bias=-1.6072,
    sentence_threshold=0.0326, refusal_threshold=0.0326)
