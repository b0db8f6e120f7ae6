"""Speculative RAG (arXiv 2407.08223): drafts from chunk subsets, one-pass verification, citations.

Pipeline, one function per phase:

    retrieve        top-n chunks from the document index (hybrid search) + a relevance gate
    cluster         MiniLM vectors of the chunks -> k-means into k clusters (scikit-learn)
    make_subsets    m unique subsets, one chunk per cluster (ordered by retrieval rank)
    shared_prefix_order  each subset's chunks in the prompt order that lets drafter prompts share
                    KV prefixes (a chunk several subsets hold is prefilled once, not per subset)
    draft           the small drafter writes "Rationale: ... Answer: ..." per subset (or, with
                    ``extractive``, copies both from the subset's chunks); all subsets decode
                    concurrently as llama.cpp sequences in one batch (``localrag.specdraft``)
    verify          the verifier scores each draft's TEXT (its own tokenizer) in one pass over
                    [question, answer, rationale, reflection question, "Yes"]
    select          best combined score; below the calibrated threshold -> "not in the documents"

Scores (natural log):
    draft_logprob = log P(rationale) + log P(answer | rationale)          (drafter, sum over tokens)
    consistency   = sum of log p over the answer and rationale tokens      (verifier)
    reflection    = log p("Yes" | ..., "Do you think the rationale supports the answer, yes or no?")
    score         = draft_logprob / n_draft + consistency / n_verify + reflection
The paper multiplies the three probabilities (sum of logs). Raw sums punish long drafts, so the
first two terms are length-normalised to mean per-token log-probabilities (log of the geometric
mean probability); the reflection term is one token and is left as is.

    pipe = SpeculativeRAG(Engine.load(ModelConfig()), Engine.load(ModelConfig(model="gemma3-270m")))
    result = pipe.answer("How much notice ends the contract?", DocumentIndex(IndexConfig()))
    print(result.text, [c.label for c in result.citations], result.stats)
"""

from __future__ import annotations

import collections
import itertools
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from localrag.answer import AnswerResult, Citation, Draft
from localrag.config import GenerationConfig, SpecRagConfig
from localrag.specdraft import (
    DraftTokens,
    chunk_tokens,
    decode_rows,
    draft,
    draft_prompt,
    share_plan,
    token_logprob,
)

__all__ = ["DraftTokens", "SpeculativeRAG", "draft", "draft_prompt", "share_plan", "retrieve", "cluster",
           "make_subsets", "random_subsets", "shared_prefix_order", "verify", "verifier_segments",
           "combined_score", "select", "short_answer", "is_refusal"]

REFUSALS = ("not in the documents", "does not say", "do not say", "no information", "not mentioned",
            "cannot be determined", "unknown", "not specified", "not provided", "not stated",
            "does not provide", "do not provide", "doesn't provide", "does not mention", "does not contain")


# --------------------------------------------------------------------------- retrieve
def retrieve(index: Any, question: str, cfg: SpecRagConfig) -> tuple[list, list]:
    """(hits, relevant hits): the top-n chunks, and those passing the dense-similarity gate."""
    if index is None:
        return [], []
    hits = index.search(question, cfg.n)
    relevant = [h for h in hits if (h.dense_score or 0.0) >= cfg.min_relevance]
    return hits, relevant


# --------------------------------------------------------------------------- cluster
def cluster(vectors: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """k-means labels (0..k'-1) of the chunk vectors; k' = min(k, distinct vectors)."""
    from sklearn.cluster import KMeans

    n = len(vectors)
    k = min(k, n, len(np.unique(np.round(vectors, 6), axis=0)))
    if k <= 1:
        return np.zeros(n, dtype=int)
    return KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(vectors)


def make_subsets(labels: Sequence[int], m: int) -> list[tuple[int, ...]]:
    """m unique subsets taking one chunk per cluster (chunk indices are retrieval ranks).

    Every combination (one member of each cluster) is a candidate; they are ordered by the
    sum of their members' ranks, so the best-ranked chunks are drafted from first while each
    subset still mixes perspectives (clusters). Unique by construction; fewer than m if the
    clusters do not allow m combinations.
    """
    groups: dict[int, list[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault(int(lab), []).append(i)
    members = [groups[c] for c in sorted(groups)]
    combos = sorted(itertools.product(*members), key=lambda c: (sum(c), c))
    return [tuple(sorted(c)) for c in combos[:m]]


def random_subsets(n_chunks: int, k: int, m: int, seed: int = 0) -> list[tuple[int, ...]]:
    """The no-clustering ablation: m unique random k-subsets of the chunks."""
    rng = np.random.default_rng(seed)
    k = min(k, n_chunks)
    total = math.comb(n_chunks, k)
    out: list[tuple[int, ...]] = []
    while len(out) < min(m, total):
        pick = tuple(sorted(int(i) for i in rng.choice(n_chunks, size=k, replace=False)))
        if pick not in out:
            out.append(pick)
    return out


def shared_prefix_order(subsets: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Each subset's chunks in the order its drafter prompt lists them, chosen so prompts share
    prefixes: the drafter prefills a prompt's common prefix with an earlier prompt once and copies
    its KV (``share_plan``), so (0, 1), (0, 2), (0, 4) prefill chunk 0 once, not three times.

    Greedy, subset by subset: the next chunk extends a prefix an earlier subset already placed if
    it can; otherwise it is the chunk most later subsets hold (so they can share it), then the
    best-ranked. Same chunks per subset; only the order inside each changes.
    """
    placed: set[tuple[int, ...]] = set()  # every prefix of the subsets ordered so far
    out: list[tuple[int, ...]] = []
    for i, sub in enumerate(subsets):
        later = collections.Counter(c for s in subsets[i + 1:] for c in s)
        prefix: tuple[int, ...] = ()
        rest = set(sub)
        while rest:
            pool = [c for c in rest if prefix + (c,) in placed] or rest
            chunk = min(pool, key=lambda c: (-later[c], c))
            prefix += (chunk,)
            rest.remove(chunk)
        placed.update(prefix[:j] for j in range(1, len(prefix) + 1))
        out.append(prefix)
    return out


# --------------------------------------------------------------------------- verify
@dataclass
class VerifyScore:
    consistency: float
    reflection: float
    n_tokens: int  # answer + rationale tokens scored


def verifier_segments(backend: Any, question: str, answer: str, rationale: str,
                      cfg: SpecRagConfig) -> tuple[list[int], list[int], list[int]]:
    """(tokens, scored positions for consistency, the "Yes" position) of one verifier input.

    Layout: [BOS] "Question: q\\nAnswer:" + " answer" + "\\nRationale:" + " rationale" +
    "\\n<reflection question>\\n" + "Yes". Segments are tokenized separately so the answer and
    rationale tokens are exactly identifiable.
    """
    bos = bool(getattr(backend, "add_bos", True))
    segs = [
        (backend.tokenize(f"Question: {question}\nAnswer:", add_special=bos), False),
        (backend.tokenize(" " + answer.strip(), add_special=False), True),
        (backend.tokenize("\nRationale:", add_special=False), False),
        (backend.tokenize(" " + rationale.strip(), add_special=False) if rationale.strip() else [], True),
        (backend.tokenize(f"\n{cfg.reflection_question}\n", add_special=False), False),
    ]
    tokens: list[int] = []
    scored: list[int] = []
    for toks, is_scored in segs:
        if is_scored:
            scored += range(len(tokens), len(tokens) + len(toks))
        tokens += toks
    yes = backend.tokenize("Yes", add_special=False)
    yes_at = len(tokens)
    tokens += yes[:1]  # the first token of "Yes" (one token in both bundled vocabularies)
    return tokens, scored, [yes_at]


def verify(backend: Any, question: str, drafts: Sequence[tuple[str, str]], cfg: SpecRagConfig) -> list[VerifyScore]:
    """Score every (answer, rationale) in one pass: all drafts are KV sequences of one batch.

    Token t at position p is scored from the logits row of position p-1, so only those rows
    are requested (the verifier's vocabulary is large; full rows for every token would cost
    ~1 MB each for Gemma-3).
    """
    backend.reset()
    entries, want = [], []  # want: (draft, kind, token) per requested row, in batch order
    for s, (answer, rationale) in enumerate(drafts):
        toks, scored, yes_at = verifier_segments(backend, question, answer, rationale, cfg)
        need = {p - 1: ("c", toks[p]) for p in scored if p > 0}
        need[yes_at[0] - 1] = ("y", toks[yes_at[0]])
        for p, t in enumerate(toks):
            out = p in need
            entries.append((t, p, s, out))
            if out:
                want.append((s, *need[p]))
    rows = decode_rows(backend, entries)
    cons = [0.0] * len(drafts)
    refl = [0.0] * len(drafts)
    count = [0] * len(drafts)
    for (s, kind, tok), row in zip(want, rows, strict=True):
        lp = token_logprob(row, tok)
        if kind == "c":
            cons[s] += lp
            count[s] += 1
        else:
            refl[s] = lp
    backend.reset()
    return [VerifyScore(cons[s], refl[s], count[s]) for s in range(len(drafts))]


# --------------------------------------------------------------------------- select
def combined_score(d: DraftTokens, v: VerifyScore | None) -> float:
    """Length-normalised log score: mean draft log-prob + mean consistency log-prob + log p(Yes).

    Without a verifier (drafter-only ablation) just the mean draft log-prob.
    """
    s = d.logprob / max(d.n_tokens, 1)
    if v is not None:
        s += v.consistency / max(v.n_tokens, 1) + v.reflection
    return s


_LEAD_IN = re.compile(
    r"^(?:(?:answer|final answer|rationale|a)\s*:|the answer is:?|(?:according to|based on|from) (?:the )?"
    r"(?:documents?|sources?|text|passage|context)\b[^,]*,)\s*",
    re.I,
)


def short_answer(text: str) -> str:
    """The answer as a phrase: its first line, without lead-ins ("Answer:", "The answer is",
    "According to the documents, ..."), wrapping quotes or markup, and a final full stop."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    while True:
        cut = _LEAD_IN.sub("", line, count=1).strip()
        if cut == line:
            break
        line = cut
    line = line.strip(" *\"'`")
    return line[:-1].rstrip() if line.endswith(".") else line


def is_refusal(answer: str) -> bool:
    a = answer.strip().lower()
    return not a or any(r in a for r in REFUSALS)


def select(drafts: list[Draft], cfg: SpecRagConfig) -> tuple[Draft | None, bool]:
    """(best draft or None, supported): best by score; supported when it passes the threshold."""
    usable = [d for d in drafts if not is_refusal(d.answer)]
    if not usable:
        return None, False
    best = max(usable, key=lambda d: d.score)
    return best, best.score >= cfg.min_score


# --------------------------------------------------------------------------- pipeline
def _chunk_vectors(index: Any, hits: Sequence[Any]) -> np.ndarray:
    """The chunks' stored embeddings (no re-embedding); embedded afresh if the index cannot say."""
    try:
        return index.vectors([h.chunk_id for h in hits])
    except (AttributeError, KeyError):
        return index.embedder.embed([h.text for h in hits])



class SpeculativeRAG:
    """drafter (small, chat-tuned) + verifier (larger; any vocabulary) over a document index."""

    def __init__(self, drafter: Any, verifier: Any, config: SpecRagConfig | None = None):
        self.drafter = drafter
        self.verifier = verifier
        self.config = config or SpecRagConfig()

    def answer(self, question: str, index: Any, gen: GenerationConfig | None = None,
               config: SpecRagConfig | None = None) -> AnswerResult:
        cfg = config or self.config
        t0 = time.perf_counter()
        hits, relevant = retrieve(index, question, cfg)
        t_ret = time.perf_counter() - t0
        name = index.config.collection if index is not None else None
        searched = (f'searched "{question}" in collection "{name}" (top {cfg.n}): {len(hits)} chunks, '
                    f"{len(relevant)} above relevance {cfg.min_relevance}") if index is not None else \
            f'searched "{question}": no document index'
        stats: dict = {"retrieve_s": t_ret, "n_retrieved": len(hits), "n_relevant": len(relevant)}
        if not relevant:
            stats["total_s"] = time.perf_counter() - t0
            return self._unsupported(question, searched, [], stats, "nothing relevant was retrieved")
        vectors = _chunk_vectors(index, relevant) if cfg.cluster else None
        return self.answer_from_chunks(question, relevant, vectors, searched, stats, cfg, t0)

    def answer_from_chunks(self, question: str, hits: Sequence[Any], vectors: np.ndarray | None, searched: str,
                           stats: dict, cfg: SpecRagConfig, t0: float | None = None) -> AnswerResult:
        """Cluster -> subsets -> draft -> verify -> select over already retrieved chunks (best first)."""
        t0 = time.perf_counter() if t0 is None else t0
        t = time.perf_counter()
        if cfg.cluster and vectors is not None:
            subsets = make_subsets(cluster(vectors, cfg.k, cfg.seed), cfg.m)
        else:
            subsets = random_subsets(len(hits), cfg.k, cfg.m, cfg.seed)
        subsets = shared_prefix_order(subsets)
        stats["cluster_s"] = time.perf_counter() - t
        t = time.perf_counter()
        texts = [[hits[i].text for i in sub] for sub in subsets]
        prompts = [draft_prompt(self.drafter, question, chunks, cfg) for chunks in texts]
        sources = [chunk_tokens(self.drafter, chunks) for chunks in texts] if cfg.extractive else None
        toks = draft(self.drafter.backend, prompts, cfg, sources=sources)
        stats["draft_s"] = time.perf_counter() - t
        t = time.perf_counter()
        scores = None
        if cfg.use_verifier:
            scores = verify(self.verifier.backend, question,
                            [(d.answer_text, d.rationale_text) for d in toks], cfg)
        stats["verify_s"] = time.perf_counter() - t
        drafts = [Draft(answer=short_answer(d.answer_text), rationale=d.rationale_text.strip(),
                        citations=[Citation.from_hit(hits[i]) for i in sub], draft_logprob=d.logprob,
                        consistency=scores[j].consistency if scores else 0.0,
                        reflection=scores[j].reflection if scores else 0.0,
                        score=combined_score(d, scores[j] if scores else None), n_draft_tokens=d.n_tokens,
                        n_verify_tokens=scores[j].n_tokens if scores else 0, subset=tuple(sub))
                  for j, (d, sub) in enumerate(zip(toks, subsets, strict=True))]
        drafts.sort(key=lambda d: d.score, reverse=True)
        best, supported = select(drafts, cfg)
        stats.update(n_drafts=len(drafts), draft_tokens=sum(d.n_draft_tokens for d in drafts),
                     total_s=time.perf_counter() - t0, threshold=cfg.min_score)
        if not supported:
            why = "no draft passed the support threshold" if best is not None else "every draft declined to answer"
            return self._unsupported(question, searched, drafts, stats, why)
        text = best.answer if not best.rationale else f"{best.answer}\n\nRationale: {best.rationale}"
        return AnswerResult(text=text, mode="specrag", citations=list(best.citations), supported=True,
                            drafts=drafts, stats=stats, searched=searched)

    @staticmethod
    def _unsupported(question: str, searched: str, drafts: list[Draft], stats: dict, why: str) -> AnswerResult:
        stats["unsupported_reason"] = why
        text = f"The documents don't answer this question ({why}).\nWhat was searched: {searched}"
        return AnswerResult(text=text, mode="specrag", citations=[], supported=False, drafts=drafts, stats=stats,
                            searched=searched)
