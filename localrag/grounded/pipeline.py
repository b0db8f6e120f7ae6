"""Grounded mode, Speculative RAG (arXiv 2407.08223): drafts from chunk subsets, one-pass
verification, citations (docs/design.md, "Grounded: Speculative RAG").

Pipeline, one function per phase:

    retrieve        top-n chunks from the document index (hybrid search) + a relevance gate
    cluster         MiniLM vectors of the chunks -> k-means into k clusters (scikit-learn)
    make_subsets    m unique subsets, one chunk per cluster (ordered by retrieval rank)
    shared_prefix_order  each subset's chunks in the prompt order that lets drafter prompts share
                    KV prefixes (a chunk several subsets hold is prefilled once, not per subset)
    write_drafts    the small drafter writes "Rationale: ... Answer: ..." per subset (or, with
                    ``extractive``, copies both from the subset's chunks); all subsets decode
                    concurrently as llama.cpp sequences in one batch (``grounded.drafting``). An
                    answer ends at a sentence end, a line break or end-of-generation within the
                    request's max_tokens; one that does not (or that loops) is dropped, never cut short
    score_drafts    the verifier reads each draft's TEXT (its own tokenizer), all in one pass over
                    [question, rationale, answer, reflection question, "Yes"]: log p("Yes") is its
                    reflection (``grounded.scoring``)
    select          best combined score; below the calibrated threshold -> "not in the documents"
    check           the chosen draft's sentence-level evidence in the chunks it was written from
                    (``localrag.evidence``, when an aligner is given): its citations are the chunks
                    that evidence cites, and an answer they do not support is unsupported too

The scores and their normalisation: ``localrag.grounded.scoring``. ``stream`` yields
``AnswerProgress`` (searching, drafting k of m done, verifying) before the ``AnswerResult``.

    pipe = GroundedPipeline(drafter_engine, verifier_engine, GroundedConfig())   # the mode picks both
    result = pipe.answer("How much notice ends the contract?", DocumentIndex(IndexConfig()))
    print(result.text, [c.label for c in result.citations], result.extras.drafts)
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, replace

from localrag.backends.base import BatchBackend
from localrag.config import GenerationConfig, GroundedConfig
from localrag.engine import Engine
from localrag.evidence import (
    EvidenceAligner,
    EvidenceChunk,
    foreign_words,
    split_citations,
    stem,
    unsupported_reason,
    word_tokens,
)
from localrag.evidence.text import is_content
from localrag.grounded.drafting import chunk_tokens, draft_prompt, draft_steps
from localrag.grounded.extras import GroundedDraft, GroundedExtras, may_answer
from localrag.grounded.scoring import combined_score, score_drafts, select, short_answer
from localrag.grounded.subsets import cluster, make_subsets, random_subsets, shared_prefix_order
from localrag.judge import unanswerable_reason
from localrag.rag.index import DocumentIndex
from localrag.rag.records import Hit
from localrag.results import AnswerEvidence, AnswerProgress, AnswerResult, AnswerStats, Citation, SearchStats


def drafter_problem(drafter: Engine) -> str:
    """Why `drafter` cannot write Grounded drafts ('' when it can): they decode concurrently as KV
    sequences of one batch, which needs the llama.cpp backend."""
    if isinstance(drafter.backend, BatchBackend):
        return ""
    return (f"Grounded mode drafts with several KV sequences in one batch, which the "
            f"{type(drafter.backend).__name__} of {drafter.model_name} cannot do; load a GGUF model "
            "with the llama.cpp backend")


def retrieve(index: DocumentIndex | None, question: str, cfg: GroundedConfig) -> tuple[list[Hit], list[Hit]]:
    """(hits, relevant hits): the top-n chunks, and those passing the dense-similarity gate."""
    if index is None:
        return [], []
    hits = index.search(question, cfg.n)
    relevant = [h for h in hits if (h.dense_score or 0.0) >= cfg.min_relevance]
    return hits, relevant


@dataclass
class Drafted:
    """What the drafting phase found and wrote: the relevant chunks (the drafts' subsets index
    them), the drafts best score first, the extras and stats so far, what was searched, when it began."""

    hits: list[Hit]
    drafts: list[GroundedDraft]
    extras: GroundedExtras
    searched: str
    stats: AnswerStats
    t0: float


def agree(a: str, b: str) -> bool:
    """Two answers say the same: their content words' stems overlap with an F1 of at least 0.5."""
    x = {stem(t.norm) for t in word_tokens(a) if is_content(t)}
    y = {stem(t.norm) for t in word_tokens(b) if is_content(t)}
    common = len(x & y)
    return bool(common) and 2 * common / (len(x) + len(y)) >= 0.5


class GroundedPipeline:
    """drafter (small, chat-tuned, llama.cpp) + verifier (larger; any vocabulary) over a document index.
    aligner: checks the chosen draft against its chunks (None: the verifier's score alone decides,
    and the citations are the draft's whole subset)."""

    mode = "grounded"  # what its results say wrote them

    def __init__(self, drafter: Engine, verifier: Engine, config: GroundedConfig | None = None,
                 aligner: EvidenceAligner | None = None):
        why = drafter_problem(drafter) or drafter_problem(verifier)
        if why:
            raise ValueError(why)
        self.drafter = drafter
        self.verifier = verifier
        self.config = config or GroundedConfig()
        self.aligner = aligner

    def answer(self, question: str, index: DocumentIndex | None, gen: GenerationConfig | None = None,
               config: GroundedConfig | None = None, query: str | None = None) -> AnswerResult:
        """The whole answer at once (``stream`` without its progress)."""
        return _last(self.stream(question, index, gen, config, query))

    def stream(self, question: str, index: DocumentIndex | None, gen: GenerationConfig | None = None,
               config: GroundedConfig | None = None,
               query: str | None = None) -> Iterator[AnswerProgress | AnswerResult]:
        """The drafts alone (the paper's method, without the answer model's own answer: the mode's
        ablation): AnswerProgress, then the best draft above the threshold, checked, as the
        AnswerResult. ``gen``: the request's limits: an answer must end (a sentence end, a line
        break or end-of-generation) within ``gen.max_tokens`` tokens, and the repetition guard runs
        on every draft's answer. ``query``: what to search (default: the question)."""
        cfg = config or self.config
        gen = gen or GenerationConfig()
        drafted = yield from self.draft(question, index, gen, cfg, query)
        gs, stats, drafts = drafted.extras, drafted.stats, drafted.drafts
        if not drafted.hits:
            yield self._unsupported(drafted, gs.unsupported_reason)
            return
        best, passed = select(drafts, cfg)
        if best is None:
            yield self._unsupported(drafted, no_answer_reason(drafts, gen.max_tokens))
            return
        gs.choice = drafts.index(best)
        if not passed:
            gs.unsupported_reason = "no draft passed the verifier's threshold"
        text = best.text
        if self.aligner is None:
            stats.total_s = time.perf_counter() - drafted.t0
            yield AnswerResult(text=text, mode=self.mode, citations=list(best.citations), supported=passed,
                               extras=gs, stats=stats, searched=drafted.searched)
            return
        # the final check: the draft's sentence-level evidence in the chunks it was written from
        evidence, why = check_draft(self.aligner, best, [drafted.hits[i] for i in best.subset], question)
        if passed and why:
            gs.unsupported_reason = why
        if why:
            gs.choice = None
        citations, also = split_citations(evidence, drafted.hits)
        stats.total_s = time.perf_counter() - drafted.t0
        yield AnswerResult(text=text, mode=self.mode, citations=citations, supported=passed and not why,
                           extras=gs, stats=stats, searched=drafted.searched, also_searched=also, evidence=evidence)

    def draft(self, question: str, index: DocumentIndex | None, gen: GenerationConfig | None = None,
              config: GroundedConfig | None = None,
              query: str | None = None) -> Generator[AnswerProgress, None, Drafted]:
        """Search, keep the relevant chunks, cluster them into subsets and write and score a draft
        per subset; yields the progress, returns the ``Drafted`` (no draft when nothing relevant
        was found: its extras say so)."""
        cfg = config or self.config
        gen = gen or GenerationConfig()
        query = query or question
        t0 = time.perf_counter()
        yield AnswerProgress("searching")
        hits, relevant = retrieve(index, query, cfg)
        name = index.config.collection if index is not None else None
        retrieval = SearchStats(query=query, collection=name, k=cfg.n, n_chunks=len(hits),
                                n_relevant=len(relevant), seconds=time.perf_counter() - t0,
                                note="" if index is not None else "no index")
        searched = (f'searched "{query}" in collection "{name}" (top {cfg.n}): {len(hits)} chunks, '
                    f"{len(relevant)} above relevance {cfg.min_relevance}") if index is not None else \
            f'searched "{query}": no document index'
        gs = GroundedExtras(threshold=cfg.min_score, scoring="drafter + reflection" if cfg.use_verifier else "drafter only")
        drafted = Drafted(relevant, [], gs, searched, AnswerStats(mode=self.mode, search=retrieval), t0)
        if not relevant:
            gs.unsupported_reason = "nothing relevant was retrieved"
            return drafted
        vectors = index.vectors([h.chunk_id for h in relevant]) if cfg.cluster else None
        t = time.perf_counter()
        if cfg.cluster and vectors is not None:
            subsets = make_subsets(cluster(vectors, cfg.k, cfg.seed), cfg.m)
        else:
            subsets = random_subsets(len(relevant), cfg.k, cfg.m, cfg.seed)
        subsets = shared_prefix_order(subsets)
        gs.cluster_s = time.perf_counter() - t
        drafts = yield from self.write_and_score(question, relevant, subsets, cfg, gen, gs)
        drafts.sort(key=lambda d: d.score, reverse=True)
        drafted.drafts = drafts
        gs.drafts, gs.n_drafts, gs.draft_tokens = list(drafts), len(drafts), sum(d.n_draft_tokens for d in drafts)
        return drafted

    def decide(self, question: str, drafted: Drafted, own: GroundedDraft | None,
               own_result: AnswerResult | None = None) -> AnswerResult:
        """Grounded's answer from its candidates (``decide``), with this pipeline's aligner and settings."""
        return decide(question, drafted, own, own_result, self.aligner, self.config, self.mode)

    def write_and_score(self, question: str, hits: Sequence[Hit], subsets: Sequence[Sequence[int]],
                        cfg: GroundedConfig, gen: GenerationConfig,
                        gs: GroundedExtras) -> Generator[AnswerProgress, None, list[GroundedDraft]]:
        """Write a draft per subset (every draft one KV sequence of one llama.cpp batch), score them
        with the verifier in one pass, and time both phases into ``gs``; yields the progress."""
        t = time.perf_counter()
        texts = [[hits[i].text for i in sub] for sub in subsets]
        prompts = [draft_prompt(self.drafter, question, chunks, cfg) for chunks in texts]
        sources = [chunk_tokens(self.drafter, chunks) for chunks in texts] if cfg.extractive else None
        toks = yield from draft_steps(self.drafter.backend, prompts, cfg, sources=sources,
                                      max_answer_tokens=gen.max_tokens, repetition=gen.repetition)
        gs.draft_s = time.perf_counter() - t
        yield AnswerProgress("verifying")
        t = time.perf_counter()
        rationales = [d.shown_rationale for d in toks]
        reflections = None
        if cfg.use_verifier:
            reflections = score_drafts(self.verifier.backend, question,
                                       [(d.answer_text, r) for d, r in zip(toks, rationales, strict=True)], cfg)
        gs.verify_s = time.perf_counter() - t
        return [GroundedDraft(answer=short_answer(d.answer_text), rationale=rationale,
                              citations=[Citation.from_hit(hits[i]) for i in sub], draft_logprob=d.logprob,
                              reflection=reflections[j] if reflections else 0.0,
                              score=combined_score(d.logprob, d.n_tokens, reflections[j] if reflections else None),
                              n_draft_tokens=d.n_tokens, subset=tuple(sub),
                              dropped=dropped_because(d.ended, gen.max_tokens))
                for j, (d, sub, rationale) in enumerate(zip(toks, subsets, rationales, strict=True))]

    def _unsupported(self, drafted: Drafted, why: str) -> AnswerResult:
        """No answer to show: nothing relevant was retrieved, or every draft declined."""
        drafted.extras.unsupported_reason = why
        drafted.extras.choice = None
        drafted.stats.total_s = time.perf_counter() - drafted.t0
        return AnswerResult(text="", mode=self.mode, citations=[], supported=False, extras=drafted.extras,
                            stats=drafted.stats, searched=drafted.searched)


def decide(question: str, drafted: Drafted, own: GroundedDraft | None, own_result: AnswerResult | None,
           aligner: EvidenceAligner | None, cfg: GroundedConfig, mode: str = "grounded") -> AnswerResult:
    """Grounded's answer from its candidates: the answer model's own answer over all the chunks
    (``own``, written and checked by the caller, ``own_result`` its checked result) and the
    subset drafts, each checked against its chunks here. The answer model's answer is chosen when
    its evidence check passes (it read every chunk: the drafts, each from a subset, are the
    weaker writers); else the best-scoring draft that passes its own check and the verifier's
    threshold, and that another candidate agrees with (two readings of different subsets giving
    the same answer); else none is, and the answer is unsupported. No candidate holding a
    number, name or unit found in no chunk and not in the question can be chosen, and none at all
    when the answerability judge refused the answer model's before it was written, or when the
    answer model read every chunk and declined (a draft from a subset of them does not overrule
    it: on SQuAD v2 such drafts were wrong or answered unanswerable questions, benchmarks.md)."""
    gs = drafted.extras
    judge = own_result.stats.judge if own_result is not None and own_result.stats is not None else None
    answerable = judge.p_answerable if judge is not None else None
    evidence: dict[int, AnswerEvidence] = {}
    for j, d in enumerate(drafted.drafts):
        if not may_answer(d):
            continue
        sources = [drafted.hits[i] for i in d.subset]
        foreign = foreign_words(d.answer, [c.text for c in sources], question)
        if foreign:
            d.check = f'"{foreign[0]}" is in no document'
        elif aligner is not None:
            evidence[j], d.check = check_draft(aligner, d, sources, question, answerable)
    candidates = ([own] if own is not None else []) + drafted.drafts
    gs.drafts, gs.n_drafts = candidates, len(candidates)
    stats = drafted.stats
    if own_result is not None and own_result.stats is not None:
        stats.generation, stats.judge = own_result.stats.generation, own_result.stats.judge
    refused = ""
    if stats.judge is not None and stats.judge.refused_early:
        refused = unanswerable_reason(stats.judge)
    elif own is not None and not may_answer(own):
        refused = own.check or "the answer model declined"
    if refused:  # the judge, or the answer model over every chunk, found no answer: no draft may give one
        gs.choice, gs.unsupported_reason = None, refused
        stats.total_s = time.perf_counter() - drafted.t0
        return AnswerResult(text="", mode=mode, citations=[], supported=False, extras=gs, stats=stats,
                            searched=drafted.searched)
    if own is not None and not own.check and own_result is not None:  # past here, own is an answer
        gs.choice, gs.why_chosen = 0, "the answer model's own answer over all the chunks, which the documents support"
        stats.total_s = time.perf_counter() - drafted.t0
        return replace(own_result, mode=mode, extras=gs, stats=stats, searched=drafted.searched)
    offset = len(candidates) - len(drafted.drafts)
    backed = [j for j, d in enumerate(drafted.drafts) if may_answer(d) and not d.check and d.score >= cfg.min_score
              and any(agree(d.answer, c.answer) for c in candidates if c is not d and may_answer(c))]
    stats.total_s = time.perf_counter() - drafted.t0
    if not backed:
        gs.choice = None
        gs.unsupported_reason = (own.check if own is not None and own.check else
                                 "no draft the documents support was agreed on by another candidate")
        text = own.answer if own is not None else ""
        ev = own_result.evidence if own_result is not None and text else None
        return AnswerResult(text=text, mode=mode, citations=[], supported=False, extras=gs, stats=stats,
                            searched=drafted.searched, evidence=ev)
    j = max(backed, key=lambda i: drafted.drafts[i].score)
    best = drafted.drafts[j]
    gs.choice = offset + j
    gs.why_chosen = "a draft the documents support, which another candidate agrees with"
    citations, also = split_citations(evidence[j], drafted.hits) if j in evidence else (list(best.citations), [])
    return AnswerResult(text=best.text, mode=mode, citations=citations, supported=True, extras=gs,
                        stats=stats, searched=drafted.searched, also_searched=also, evidence=evidence.get(j))



YES_NO = ("yes", "no")  # answers no text holds word for word: their rationale is their evidence


def check_draft(aligner: EvidenceAligner, draft: GroundedDraft, chunks: Sequence[EvidenceChunk],
                question: str, answerable: float | None = None) -> tuple[AnswerEvidence, str]:
    """(the evidence of the draft's text, answer then rationale, in ``chunks``; why the documents do
    not support it, '' when they do). Checked as one, a rationale quoted from a chunk lifts the
    answer's support past the threshold even when the answer itself is found nowhere ("1200 watts"
    beside a quoted sentence about litres), so each sentence of the answer must be supported too,
    except a bare yes or no, which no text holds word for word. ``answerable``: the judge's
    p(answerable) of the question, which weighs on every candidate alike."""
    evidence = aligner.align(draft.text, chunks, question=question, answerable=answerable)
    if not evidence.supported:
        return evidence, unsupported_reason(evidence)
    own = [s for s in evidence.sentences if s.start < len(draft.answer)]
    if draft.answer.strip(" .!").lower() not in YES_NO and not all(s.supported for s in own):
        return evidence, "its answer is found nowhere in them, only its rationale is"
    return evidence, ""


LOOPED = "its answer repeated itself"  # why a draft the repetition guard stopped was dropped


def dropped_because(ended: str, max_tokens: int) -> str:
    """Why a draft cannot be the answer ('' when it can): its answer never ended (``ended``: how it
    ended, ``DrafterOutput.ended``)."""
    if ended == "limit":
        return f"its answer did not end within {_tokens(max_tokens)}"
    if ended == "loop":
        return LOOPED
    return ""


def no_answer_reason(drafts: Sequence[GroundedDraft], max_tokens: int) -> str:
    """Why no draft can be the answer, in words (every draft was dropped or declined)."""
    if drafts and all(d.dropped for d in drafts):
        looped = any(d.dropped == LOOPED for d in drafts)
        return f"no draft finished its answer within {_tokens(max_tokens)}" + (" without looping" if looped else "")
    if any(d.dropped for d in drafts):
        return "every draft declined to answer or did not finish it"
    return "every draft declined to answer"


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _last(items: Iterator[AnswerProgress | AnswerResult]) -> AnswerResult:
    """The stream's AnswerResult (its last item), its progress unused."""
    result = None
    for item in items:
        result = item
    assert isinstance(result, AnswerResult)
    return result
