"""``bench grounding``: how well the evidence aligner's support score tells right answers from wrong
ones, whether its citations point at the gold evidence, and what honest refusal costs.

    python -m localrag bench grounding --suite squad --n 200 [--mode plain|rasd|grounded] [--json]
    python -m localrag bench grounding --suite squad --n 200 --instructions app   # as the app asks: judged
    python -m localrag bench grounding --suite hotpotqa --n 100
    python -m localrag bench grounding --data my.jsonl --n 50     # bench qa's format, + "gold_doc"
    python -m localrag bench grounding --suite squad --split calibration --n 300 --calibrate
    python -m localrag bench grounding --suite squad --n 200 --instructions app --prefill exact,reuse

Questions come from the *report* half of the data by default, which the evidence constants were
never fitted on (``split_of`` in :mod:`localrag.bench.data`). Each question is answered through the answer
layer with ``bench qa``'s instructions (``--instructions app``: the app's, which the answerability
judge's probe was fitted with, so the judge takes part) and retrieval (one collection of every sampled
question's documents), then its answer is aligned to the chunks it was given, in the same process.

Reported (JSON top level):

    auroc               AUROC of the answer's support score against correctness (token F1 >= 0.5
                        against the gold, SQuAD normalisation), over answered answerable questions
    citation_precision  share of cited spans, on correct answers, that overlap the gold evidence
                        (SQuAD: the question's paragraph; HotpotQA: a supporting-fact sentence)
    refusal_accuracy    share of unanswerable questions refused (the model declined, or the answer's
                        support was below the refusal threshold)
    false_refusal_rate  share of answerable questions refused
    overhead            alignment seconds / answer seconds, summed over the questions
    judge               the answerability judge (a probe for the model and instructions): its AUROC of
                        p(answerable) against answerable-or-not, and the shares it refused before a word

Also: the AUROC against "the answer contains a gold answer" (the correctness the Speculative RAG
paper uses), and against correctness over every answered question (unanswerable ones counting as
wrong), each with a bootstrap 95% interval, and the sizes behind every figure.

``--prefill exact,reuse`` answers every question twice, in turns that swap which goes first: exact,
and with the chunk cache's approximate prefill (a cache folder of the bench's own, under
``grounding/chunk-kv``); the reuse arm's summary comes under "reuse", with "vs_exact": the share of
identical answers and the change in F1, support AUROC, citation precision and refusals.

``--calibrate`` fits the aligner's weights (logistic regression of correctness on the signals) and
the refusal threshold on the questions run, and prints them as an ``EvidenceConfig``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from localrag.answer import PREFILLS, RAG_INSTRUCTIONS, AnswerConfig, Answerer, engine_probe
from localrag.app.options import add_endpoint_args, endpoint_config
from localrag.backends.endpoint import EndpointConfig, EndpointEngine
from localrag.bench.common import (
    QA_INSTRUCTIONS,
    AnswerCache,
    AnsweredQuestion,
    contains_answer,
    dumps,
    fmt,
    output,
    repeated_sentence,
    score_answer,
    write_json,
)
from localrag.bench.data import (
    QA_SUITES,
    SPLITS,
    GroundingRecord,
    doc_number,
    load_records,
    qa_collection,
    sample,
)
from localrag.bench.prompts import VARIANTS
from localrag.config import ChunkCacheConfig, GenerationConfig, ModelConfig, default_cache_dir
from localrag.engine import Engine
from localrag.evidence import AnswerEvidence, EvidenceAligner, EvidenceConfig, is_refusal
from localrag.evidence.align import logit
from localrag.grounded.scoring import short_answer
from localrag.judge import Probe
from localrag.modes import MODES, AnswerRequest, get_mode

MAX_REFUSALS_OF_ANSWERABLE = 0.15  # the refusal threshold is the highest that stays within this
# where the model's own refusals pass that: the share of answers written to answerable questions the check
# may warn on (chosen by cross-validation on the calibration half: out of fold it warned on 11 of 84)
MAX_CHECK_WARNINGS_OF_ANSWERABLE = 0.05
# --instructions; "do-not-say": the app's before it asked for "not in the documents" (``bench prompts``)
INSTRUCTIONS = {"qa": QA_INSTRUCTIONS, "app": RAG_INSTRUCTIONS, "do-not-say": VARIANTS["do-not-say"].instructions}


@dataclass(frozen=True)
class GroundingRow:
    """One question: the answer, its correctness, the evidence signals and the citation check."""

    question: str
    gold: list[str]
    answer: str
    prediction: str  # the answer phrase scored against the gold (bench qa's reduction)
    answerable: bool
    f1: float
    contained: bool
    model_refused: bool
    score: float
    support: float
    refused: bool
    features: dict
    cited_spans: int
    cited_on_gold: int
    align_s: float  # the answer layer's own check of the answer (this bench's alignment for older cached answers)
    answer_s: float
    cached: bool
    stop_reason: str  # why the answer's generation stopped ("repetition": the guard cut a loop)
    repeats_sentence: bool  # the answer (as given) still repeats one of its sentences
    judge_p: float | None = None  # the answerability judge's p(answerable); None: no probe for the prompt
    judged: bool = False  # refused by the judge before a word was written
    prefill: str = "exact"  # how the answer's prompt was read (``--prefill``)
    placed_tokens: int = 0  # prompt tokens whose KV came from the chunk cache (reuse)

    @property
    def correct(self) -> bool:
        return self.answerable and self.f1 >= 0.5


# ------------------------------------------------------------------ citations against the gold
def _collapse(text: str) -> str:
    return " ".join(text.split())


def _collapsed_offset(text: str, offset: int) -> int:
    """Where character ``offset`` of ``text`` lands once whitespace runs are collapsed."""
    head = text[:offset]
    return len(" ".join(head.split())) + (1 if head and head[-1].isspace() and head.strip() else 0)


def cited_on_gold(evidence: AnswerEvidence, hits: list, rec: GroundingRecord, docs: list[str]) -> tuple[int, int]:
    """(cited spans, of those overlapping the gold evidence). A chunk's file is ``docNNNNN.txt`` of
    ``docs`` (``data.write_corpus``); positions are compared with whitespace collapsed."""
    texts = {h.chunk_id: (h.text, h.file) for h in hits}
    gold = []
    for g in rec.gold:
        doc = _collapse(rec.qa.docs[g.doc])
        at = doc.find(_collapse(g.text))
        if at >= 0:
            gold.append((docs.index(rec.qa.docs[g.doc]), at, at + len(_collapse(g.text))))
    spans = [sp for s in evidence.sentences if s.supported for sp in s.spans]
    hits_on_gold = 0
    for sp in spans:
        text, file = texts[sp.chunk_id]
        doc_i = doc_number(file)
        doc = _collapse(docs[doc_i])
        base = doc.find(_collapse(text))
        if base < 0:
            continue
        a, b = base + _collapsed_offset(text, sp.start), base + _collapsed_offset(text, sp.end)
        hits_on_gold += any(gi == doc_i and a < gb and ga < b for gi, ga, gb in gold)
    return len(spans), hits_on_gold


# ------------------------------------------------------------------ metrics
def auroc(scores: list[float], labels: list[bool]) -> float | None:
    """Probability that a random positive outscores a random negative (ties count half)."""
    pos = np.array([s for s, y in zip(scores, labels, strict=True) if y])
    neg = np.array([s for s, y in zip(scores, labels, strict=True) if not y])
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def auroc_interval(scores: list[float], labels: list[bool], rounds: int = 1000, seed: int = 0) -> list | None:
    """Bootstrap 95% interval of the AUROC (resampling questions)."""
    rng = np.random.default_rng(seed)
    n = len(scores)
    vals = []
    for _ in range(rounds):
        idx = rng.integers(0, n, n)
        v = auroc([scores[i] for i in idx], [labels[i] for i in idx])
        if v is not None:
            vals.append(v)
    return [round(float(np.percentile(vals, 2.5)), 3), round(float(np.percentile(vals, 97.5)), 3)] if vals else None


def _auroc_entry(rows: list[GroundingRow], label, score=lambda r: r.score) -> dict:
    scores, labels = [score(r) for r in rows], [bool(label(r)) for r in rows]
    value = auroc(scores, labels)
    return {"auroc": None if value is None else round(value, 3), "ci95": auroc_interval(scores, labels),
            "positives": sum(labels), "negatives": len(labels) - sum(labels)}


def share(rows: list[GroundingRow], flag) -> float | None:
    """The share of ``rows`` that ``flag`` holds for (None: no rows)."""
    return round(float(np.mean([bool(flag(r)) for r in rows])), 3) if rows else None


def judge_summary(rows: list[GroundingRow]) -> dict | None:
    """How the answerability judge did: its p(answerable) against answerable-or-not, and the shares
    of each kind it refused before a word (None: no question was judged)."""
    judged = [r for r in rows if r.judge_p is not None]
    if not judged:
        return None
    entry = _auroc_entry(judged, lambda r: r.answerable, lambda r: r.judge_p)
    entry["auroc_answerable"] = entry.pop("auroc")

    def median_s(group: list[GroundingRow]) -> float | None:
        return round(float(np.median([r.answer_s for r in group])), 2) if group else None

    early = [r for r in judged if r.judged]
    return {**entry, "judged": len(judged),
            "refused_early_unanswerable": share([r for r in judged if not r.answerable], lambda r: r.judged),
            "refused_early_answerable": share([r for r in judged if r.answerable], lambda r: r.judged),
            # what a refusal before a word saves: its seconds against a written answer's
            "answer_s_median_refused_early": median_s(early),
            "answer_s_median_written": median_s([r for r in judged if not r.judged])}


def summarize(rows: list[GroundingRow]) -> dict:
    answerable = [r for r in rows if r.answerable]
    unanswerable = [r for r in rows if not r.answerable]
    answered = [r for r in answerable if not r.model_refused]
    correct = [r for r in rows if r.correct]
    spans = sum(r.cited_spans for r in correct)
    fresh = [r for r in rows if not r.cached]
    by_f1 = _auroc_entry(answered, lambda r: r.correct)
    return {
        "auroc": by_f1["auroc"],
        "citation_precision": round(sum(r.cited_on_gold for r in correct) / spans, 3) if spans else None,
        "refusal_accuracy": share(unanswerable, lambda r: r.refused),
        "false_refusal_rate": share(answerable, lambda r: r.refused),
        "overhead": round(sum(r.align_s for r in fresh) / sum(r.answer_s for r in fresh), 4) if fresh else None,
        "judge": judge_summary(rows),
        "details": {
            "questions": len(rows), "answerable": len(answerable), "unanswerable": len(unanswerable),
            "model_refused": sum(r.model_refused for r in rows),
            "auroc_f1": by_f1,
            "auroc_contained": _auroc_entry(answered, lambda r: r.contained),
            "auroc_all_answers": _auroc_entry([r for r in rows if not r.model_refused], lambda r: r.correct),
            # how well the score tells answerable questions from unanswerable ones (what refusal needs)
            "auroc_answerable": _auroc_entry([r for r in rows if not r.model_refused], lambda r: r.answerable),
            "correct": len(correct), "cited_spans_on_correct": spans,
            "correct_with_citation": sum(r.cited_spans > 0 for r in correct),
            "f1_mean": round(100 * float(np.mean([r.f1 for r in answerable])), 2) if answerable else None,
            "align_ms_median": round(1000 * float(np.median([r.align_s for r in rows])), 2) if rows else None,
            "answer_s_median": round(float(np.median([r.answer_s for r in rows])), 3) if rows else None,
            "overhead_from_fresh_answers": len(fresh),
            # the repetition guard: answers it stopped at a looping repeat, and answers that still repeat
            "repetition_guard_fired": sum(r.stop_reason == "repetition" for r in rows),
            "answers_repeating_a_sentence": sum(r.repeats_sentence for r in rows),
        },
    }


# ------------------------------------------------------------------ calibration
FEATURES = ("exact", "overlap", "embedding", "missing", "context", "unmatched", "novel", "relevance", "confidence",
            "answerable")
SIGNS = (1, 1, 1, -1, 1, -1, 1, 1, 1, 1)  # the direction each signal may move the support: fitted weights keep it


def features_of(evidence: AnswerEvidence) -> dict:
    """The answer-level signals the calibration fits: content-weighted means over sentences."""
    s = evidence.sentences
    if not s:
        return dict.fromkeys(FEATURES, 0.0)
    w = np.array([max(1.0, len(x.text.split())) for x in s])

    def mean(values) -> float:
        return float(np.average(np.asarray(values, dtype=float), weights=w))

    return {"exact": mean([x.signals.exact for x in s]), "overlap": mean([x.signals.overlap for x in s]),
            "embedding": mean([x.signals.embedding if x.signals.embedding is not None else 0.0 for x in s]),
            "missing": mean([bool(x.signals.missing) for x in s]), "context": evidence.context,
            "unmatched": float(bool(evidence.unmatched)), "novel": evidence.novel,
            "relevance": evidence.relevance if evidence.relevance is not None else 0.0,
            "confidence": evidence.confidence, "found": mean([bool(x.spans) for x in s]),
            "answerable": None if evidence.answerable is None else logit(evidence.answerable)}


def fit_weights(rows: list[GroundingRow], base: EvidenceConfig, label: str = "contained") -> EvidenceConfig:
    """Logistic regression of the label on the answer-level signals of answered questions
    (unanswerable ones count as wrong)."""
    fit = [r for r in rows if not r.model_refused and r.score > 0]  # a score of 0 is the rule: nothing found
    # an answer without a confidence (a serving engine's) gets the median of those with one, which
    # is also what stands in for it when the fitted constants meet such an answer
    defaults = {}
    for f, fallback in (("confidence", base.confidence_default), ("answerable", base.answerable_center)):
        known = [r.features.get(f) for r in fit if r.features.get(f) is not None]
        defaults[f] = float(np.median(known)) if known else fallback
    x = np.array([[defaults[f] if r.features.get(f) is None else r.features[f] for f in FEATURES] for r in fit])
    y = np.array([(r.contained if label == "contained" else r.correct) and r.answerable for r in fit], dtype=float)
    coef, intercept = signed_logistic(x, y, SIGNS)
    w = dict(zip(FEATURES, coef.tolist(), strict=True))
    # The sentence logit holds everything but the answer-level terms, which enter as (x - 1), and the
    # confidence and the judge's logit, which enter as (x - default):
    bias = (intercept + w["context"] + w["novel"] + w["relevance"] + w["confidence"] * defaults["confidence"]
            + w["answerable"] * defaults["answerable"])
    return replace(base, weight_exact=w["exact"], weight_overlap=w["overlap"], weight_embedding=w["embedding"],
                   weight_missing=w["missing"], weight_context=w["context"], weight_unmatched=w["unmatched"],
                   weight_novel=w["novel"], weight_relevance=w["relevance"], weight_confidence=w["confidence"],
                   confidence_default=defaults["confidence"], weight_answerable=w["answerable"],
                   answerable_center=defaults["answerable"], bias=bias)


def signed_logistic(x: np.ndarray, y: np.ndarray, signs: tuple[int, ...], l2: float = 1.0) -> tuple[np.ndarray, float]:
    """Logistic regression (L2 penalty l2/2 |w|^2 on the summed log-loss, as scikit-learn's C=1/l2)
    whose weights keep the given signs: more evidence never lowers the support."""
    n, k = x.shape

    def loss(wb):
        z = x @ wb[:k] + wb[k]
        p = 1.0 / (1.0 + np.exp(-z))
        value = np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * l2 * wb[:k] @ wb[:k]
        grad = np.append(x.T @ (p - y) + l2 * wb[:k], np.sum(p - y))
        return value, grad

    bounds = [(0.0, None) if s > 0 else (None, 0.0) for s in signs] + [(None, None)]
    res = minimize(loss, np.zeros(k + 1), jac=True, bounds=bounds, method="L-BFGS-B")
    return res.x[:k], float(res.x[k])


def fit_refusal_threshold(rows: list[GroundingRow]) -> float:
    """The highest threshold that refuses (with the model's own refusals) at most
    MAX_REFUSALS_OF_ANSWERABLE of the answerable questions. Where the model's own refusals (its
    "not in the documents", the judge's refusals before a word) already pass that, no threshold
    keeps within it, and the check is held to an allowance of its own: the highest threshold that
    warns on at most MAX_CHECK_WARNINGS_OF_ANSWERABLE of the answers written to answerable
    questions (a score of 0 would warn on nothing; the threshold that refuses the most more
    unanswerable questions than answerable ones, Youden's J, warned on 17 of 84 out of fold,
    docs/benchmarks.md "The evidence check refitted on the app's answers")."""
    answerable = [r for r in rows if r.answerable]
    unanswerable = [r for r in rows if not r.answerable]
    thresholds = sorted({r.score for r in rows})

    def refused(group: list[GroundingRow], t: float) -> float:
        return float(np.mean([r.model_refused or r.score < t for r in group])) if group else 0.0

    within = [t for t in thresholds if refused(answerable, t) <= MAX_REFUSALS_OF_ANSWERABLE]
    if within or not unanswerable:
        return max(within, default=0.0)
    written = [r for r in answerable if not r.model_refused]
    return max((t for t in thresholds if refused(written, t) <= MAX_CHECK_WARNINGS_OF_ANSWERABLE), default=0.0)


# ------------------------------------------------------------------ runner
@dataclass
class Setup:
    records: list[GroundingRecord]
    docs: list[str]
    answerer: Answerer
    aligner: EvidenceAligner
    model: str
    collection_key: str
    verifier: str = "target"  # Grounded's verifier option
    instructions: str = QA_INSTRUCTIONS


def setup(suite: str | None, data: str | None, split: str, n: int | None, seed: int, mode: str,
          model: str | None, verifier: str, config: EvidenceConfig | None,
          endpoint: EndpointConfig | None = None, instructions: str = QA_INSTRUCTIONS,
          head: int = ChunkCacheConfig.head) -> Setup:
    engine = EndpointEngine(endpoint) if endpoint else Engine.load(ModelConfig(model=model) if model else ModelConfig())
    records = questions(suite, data, split, n, seed, engine_probe(engine, instructions))
    collection = qa_collection(f"grounding-{Path(data).stem if data else suite}-{split}", [r.qa for r in records])
    chunks = ChunkCacheConfig(folder=default_cache_dir() / "grounding" / "chunk-kv", head=head)  # not the app's
    answerer = Answerer(engine, collection.index, config=AnswerConfig(instructions=instructions, chunk_cache=chunks))
    config = config or EvidenceConfig.for_model(engine.model_name)
    return Setup(records, collection.docs, answerer, EvidenceAligner(collection.index.embedder, config=config),
                 engine.model_name, collection.key, verifier, instructions)


def questions(suite: str | None, data: str | None, split: str, n: int | None, seed: int,
              probe: Probe | None) -> list[GroundingRecord]:
    """The seeded sample of the split, without the questions the judge's probe was fitted on (its
    own seeded sample, ``bench judge``), so the judge is never scored, nor combined with the
    evidence, on its training data. (Those lie in SQuAD's calibration half: a report-half sample is
    the plain seeded sample.)"""
    records = load_records(suite, data, split, None, seed)
    f = probe.fitted if probe is not None else {}
    if data is None and f.get("suite") == suite:
        seen = {r.qa.question for r in load_records(f["suite"], None, f["split"], f["n_sampled"], f["seed"])}
        records = [r for r in records if r.qa.question not in seen]
    return sample(records, n, seed)


def run_question(s: Setup, rec: GroundingRecord, mode: str, k: int, gen: GenerationConfig,
                 cache: AnswerCache, prefill: str = "exact") -> tuple[GroundingRow, AnsweredQuestion]:
    """Answer (or re-use a cached answer), align it, and score both."""
    arm = prefill if prefill == "exact" else f"{prefill} head {s.answerer.config.chunk_cache.head}"
    key = cache.key(s.model, mode, s.instructions, rec.qa.question, k, gen.max_tokens, s.collection_key, arm)
    answered = cache.get(key)
    cached = answered is not None
    if answered is None:
        options = {"verifier": s.verifier, **({"prefill": prefill} if prefill != "exact" else {})}
        answered = answer_question(s.answerer, rec.qa.question, mode, gen, k, options)
        cache.put(key, answered)
    return score_row(s, rec, answered, cached, prefill), answered


def answer_question(answerer: Answerer, question: str, mode: str, gen: GenerationConfig, k: int,
                    options: dict | None = None) -> AnsweredQuestion:
    """The one call into the answer layer. The chunks the answer was checked against (its evidence's
    cited and uncited chunks: Plain's prompt, Grounded's chosen subset) are re-read in retrieval order
    with their scores (the same deterministic search), because the answer's citations carry none.
    The seconds exclude the answer layer's own alignment, so ``overhead`` stays alignment / answer."""
    answering = get_mode(mode)
    t0 = time.perf_counter()
    request = AnswerRequest(question, gen=gen, options=answering.options({"k": k, **(options or {})}))
    result = answering.answer(answerer, request)
    check_s = result.evidence.seconds if result.evidence is not None else 0.0
    seconds = time.perf_counter() - t0 - check_s
    checked = set(result.evidence.cited + result.evidence.also_searched) if result.evidence is not None else set()
    hits = tuple(h for h in answerer.search(question, result.stats.search.k).hits if h.chunk_id in checked)
    # a mode that refuses what the documents do not support (Grounded) refused every unsupported answer
    judge = result.stats.judge
    judged = judge is not None and judge.refused_early
    refused = (judged or is_refusal(short_answer(result.text))
               or (answering.policy(request) == "refuse" and not result.supported))
    generation = result.stats.generation
    stop_reason = generation.stop_reason if generation is not None else ""
    confidence = generation.mean_logprob if generation is not None and not judged else None
    return AnsweredQuestion(result.text.strip(), hits, refused, seconds, stop_reason, check_s, confidence,
                            judge.p_answerable if judge is not None else None, judged,
                            generation.placed_prompt_tokens if generation is not None else 0)


def score_row(s: Setup, rec: GroundingRecord, answered: AnsweredQuestion, cached: bool,
              prefill: str = "exact") -> GroundingRow:
    evidence = s.aligner.align(answered.text, answered.hits, question=rec.qa.question, confidence=answered.confidence,
                               answerable=answered.judge_p)
    prediction = short_answer(answered.text)
    answers = rec.qa.answers
    f1 = score_answer(prediction, answers)["f1"] if answers else 0.0
    spans, on_gold = cited_on_gold(evidence, answered.hits, rec, s.docs)
    return GroundingRow(rec.qa.question, list(answers), answered.text, prediction, bool(answers), f1,
                        contains_answer(answered.text, answers), answered.refused, evidence.score, evidence.support,
                        answered.refused or not evidence.supported, features_of(evidence), spans, on_gold,
                        answered.check_s or evidence.seconds, answered.seconds, cached, answered.stop_reason,
                        repeated_sentence(answered.text) is not None, answered.judge_p, answered.judged, prefill,
                        answered.placed_tokens)


def run_grounding(suite: str | None, data: str | None, n: int | None, seed: int = 0, split: str = "report",
                  mode: str = "plain", k: int = 5, model: str | None = None, verifier: str = "target",
                  config: EvidenceConfig | None = None, cache: bool = False, progress=None,
                  calibrate: bool = False, out: str | None = None, endpoint: EndpointConfig | None = None,
                  instructions: str = "qa", prefills: tuple[str, ...] = ("exact",),
                  head: int = ChunkCacheConfig.head) -> dict:
    """Answer and align every sampled question; with ``calibrate``, fit the constants on them.
    ``out``: the summary so far is rewritten there after every question. ``instructions``: a key of
    ``INSTRUCTIONS``. ``prefills``: each question is answered once per prefill, in turns that swap
    which goes first; the first prefill's summary is the result's, each other's is under its name
    with its answers set against the first's (``versus``). ``head``: the reuse prefill's tokens read
    at their place at the head of each chunk (``ChunkCacheConfig.head``)."""
    s = setup(suite, data, split, n, seed, mode, model, verifier, config, endpoint, INSTRUCTIONS[instructions],
              head)
    gen = GenerationConfig(max_tokens=32)
    store = AnswerCache(enabled=cache)
    arms: dict[str, list[tuple[GroundingRow, AnsweredQuestion]]] = {p: [] for p in prefills}
    for i, rec in enumerate(s.records):
        for p in prefills if i % 2 == 0 else prefills[::-1]:
            row, answered = run_question(s, rec, mode, k, gen, store, p)
            arms[p].append((row, answered))
            if progress:
                progress(i + 1, len(s.records), row)
        if out:
            write_json(out, {"partial": i + 1, **summarize([r for r, _ in arms[prefills[0]]])})
    first = prefills[0]
    rows, answers = [r for r, _ in arms[first]], [a for _, a in arms[first]]
    result = {"suite": Path(data).stem if data else suite, "split": split, "seed": seed, "mode": mode, "k": k,
              "instructions": instructions, "prefill": first, "model": s.model, **summarize(rows)}
    for p in prefills[1:]:
        other = [r for r, _ in arms[p]]
        summary = summarize(other)
        result[p] = {**summary, f"vs_{first}": versus(rows, other, result, summary)}
    if "reuse" in prefills:  # this run's chunk lookups: a session of questions over one document set
        st = s.answerer.kv_store().stats
        result["chunk_cache"] = {"head": head, "hits": st.hits, "misses": st.misses,
                                 "hit_rate": round(st.hits / (st.hits + st.misses), 3) if st.hits + st.misses else None}
    if calibrate:
        fitted = fit_weights(rows, s.aligner.config)
        s.aligner = EvidenceAligner(s.aligner.embedder, config=fitted)
        rescored = [score_row(s, rec, a, row.cached, row.prefill)
                    for rec, a, row in zip(s.records, answers, rows, strict=True)]
        fitted = replace(fitted, refusal_threshold=fit_refusal_threshold(rescored),
                         sentence_threshold=fit_refusal_threshold(rescored))
        s.aligner = EvidenceAligner(s.aligner.embedder, config=fitted)
        rows = [score_row(s, rec, a, row.cached, row.prefill)
                for rec, a, row in zip(s.records, answers, rows, strict=True)]
        result["calibrated"] = {"config": asdict(fitted), **summarize(rows)}
    result["rows"] = [asdict(r) for r in rows] + [asdict(r) for p in prefills[1:] for r, _ in arms[p]]
    return result


def versus(base: list[GroundingRow], other: list[GroundingRow], a: dict, b: dict, rounds: int = 1000,
           seed: int = 0) -> dict:
    """The same questions answered another way (the approximate prefill) against ``base`` (exact),
    question by question (``a``, ``b``: their ``summarize``): the share of identical answers, and
    the change of mean F1 over the answerable questions (points, with a paired bootstrap 95%
    interval), of the support AUROC and of the refusals. #53's bar for turning reuse on by default:
    F1 within 1 point, support not worse."""
    pairs = list(zip(base, other, strict=True))
    diff = np.array([100 * (y.f1 - x.f1) for x, y in pairs if x.answerable])
    ci = None
    if len(diff):
        rng = np.random.default_rng(seed)
        means = np.sort([diff[rng.integers(0, len(diff), len(diff))].mean() for _ in range(rounds)])
        ci = [round(float(means[int(0.025 * rounds)]), 2), round(float(means[int(0.975 * rounds) - 1]), 2)]

    def change(x: float | None, y: float | None) -> float | None:
        return round(y - x, 3) if x is not None and y is not None else None

    return {
        "same_answers": round(float(np.mean([x.answer == y.answer for x, y in pairs])), 3) if pairs else None,
        "f1_delta": round(float(diff.mean()), 2) if len(diff) else None, "f1_delta_ci95": ci,
        "auroc_delta": change(a["auroc"], b["auroc"]),
        "auroc_answerable_delta": change(a["details"]["auroc_answerable"]["auroc"],
                                         b["details"]["auroc_answerable"]["auroc"]),
        "citation_precision_delta": change(a["citation_precision"], b["citation_precision"]),
        "refusal_accuracy_delta": change(a["refusal_accuracy"], b["refusal_accuracy"]),
        "false_refusal_rate_delta": change(a["false_refusal_rate"], b["false_refusal_rate"]),
        "placed_tokens_mean": round(float(np.mean([y.placed_tokens for y in other])), 1) if other else None,
        "answer_s_median": [a["details"]["answer_s_median"], b["details"]["answer_s_median"]],
    }


# ------------------------------------------------------------------ command line
def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("grounding", help="evidence alignment: support AUROC, citations, refusals")
    p.add_argument("--suite", choices=QA_SUITES, default="squad")
    p.add_argument("--data", default=None, help='JSONL as bench qa --data, optionally with "gold_doc"')
    p.add_argument("--n", type=int, default=200, help="questions (seeded sample of the split)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", choices=SPLITS, default="report",
                   help="report: the half never used for calibration (default); calibration; all")
    p.add_argument("--mode", choices=list(MODES), default="plain")
    p.add_argument("--k", type=int, default=5, help="chunks per answer")
    p.add_argument("--instructions", choices=list(INSTRUCTIONS), default="qa",
                   help="qa: ask for a short answer phrase (the evidence constants were fitted so); app: the "
                        "app's own, which the answerability judge's probe was fitted with; do-not-say: the app's "
                        "without its refusal phrase (a probe for it: bench judge --prompt do-not-say --fit)")
    p.add_argument("--model", default=None)
    p.add_argument("--verifier", default="target", help="Grounded mode's verifier: target (the model itself) or a name")
    p.add_argument("--prefill", default="exact", choices=["exact", "reuse", "exact,reuse"],
                   help="how the answer's prompt is read: exact; reuse (approximate: the chunks' KV from a chunk "
                        "cache of the bench's own); exact,reuse: both, interleaved, and reuse set against exact")
    p.add_argument("--head", type=int, default=ChunkCacheConfig.head,
                   help="reuse: tokens at the head of each chunk read at their place (default: the app's)")
    p.add_argument("--cache", action="store_true", help="re-use answers cached by an earlier run (and cache new ones)")
    p.add_argument("--calibrate", action="store_true", help="fit the evidence constants on these questions")
    p.add_argument("--out", default=None, help="also write the full result (every question) to this JSON file")
    add_endpoint_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_grounding)


def cmd_grounding(args) -> int:
    if args.calibrate and args.split == "report":
        print("error: calibrate on --split calibration (the report half is kept apart)", file=sys.stderr)
        return 2
    prefills = tuple(args.prefill.split(","))
    if args.calibrate and len(prefills) > 1:
        print("error: calibrate on one prefill at a time", file=sys.stderr)
        return 2

    def progress(i, total, row):
        arm = f" {row.prefill}" if args.prefill != "exact" else ""
        print(f"[{i}/{total}]{arm} score={row.score:.2f} f1={row.f1:.2f} refused={row.refused} "
              f"{row.question[:50]!r} -> {row.answer[:50]!r}", file=sys.stderr)

    t0 = time.perf_counter()
    result = run_grounding(args.suite, args.data, args.n, args.seed, args.split, args.mode, args.k, args.model,
                           args.verifier, cache=args.cache, progress=progress, calibrate=args.calibrate,
                           out=args.out, endpoint=endpoint_config(args), instructions=args.instructions,
                           prefills=prefills, head=args.head)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    if args.out:
        write_json(args.out, result)
    return output({k: v for k, v in result.items() if k != "rows"}, args.json, print_grounding)


def print_grounding(result: dict) -> None:
    d = result["details"]
    print(f"{result['suite']} ({result['split']} split, {d['questions']} questions: {d['answerable']} answerable, "
          f"{d['unanswerable']} unanswerable), mode {result['mode']}, {result['instructions']} instructions, "
          f"model {result['model']}")
    print(f"AUROC (F1 >= 0.5)     {fmt(result['auroc'], '.3f')}  95% {d['auroc_f1']['ci95']}  "
          f"({d['auroc_f1']['positives']} correct / {d['auroc_f1']['negatives']} wrong)")
    print(f"AUROC (contains gold) {fmt(d['auroc_contained']['auroc'], '.3f')}  95% {d['auroc_contained']['ci95']}")
    print(f"citation precision    {fmt(result['citation_precision'], '.3f')}  ({d['cited_spans_on_correct']} spans "
          f"on {d['correct']} correct answers)")
    print(f"refusals              {fmt(result['refusal_accuracy'], '.3f')} of unanswerable, "
          f"{fmt(result['false_refusal_rate'], '.3f')} of answerable")
    judge = result["judge"]
    if judge is None:
        print("judge                 none (no answerability probe for this model and these instructions)")
    else:
        print(f"judge                 AUROC (answerable) {fmt(judge['auroc_answerable'], '.3f')}  95% {judge['ci95']}; "
              f"refused before a word {fmt(judge['refused_early_unanswerable'], '.3f')} of unanswerable, "
              f"{fmt(judge['refused_early_answerable'], '.3f')} of answerable")
        print(f"                      a refusal before a word took {judge['answer_s_median_refused_early']} s median, "
              f"a written answer {judge['answer_s_median_written']} s")
    print(f"overhead              {fmt(result['overhead'], '.3f')} (alignment {d['align_ms_median']} ms median, "
          f"answer {d['answer_s_median']} s median)")
    print(f"repetition            guard stopped {d['repetition_guard_fired']} answers; "
          f"{d['answers_repeating_a_sentence']} answers repeat a sentence")
    for p in PREFILLS:
        if p in result and p != result["prefill"]:
            v, first = result[p][f"vs_{result['prefill']}"], result["prefill"]
            print(f"{p} prefill (approximate) against {first}: {fmt(v['same_answers'], '.3f')} of answers the same; "
                  f"F1 {v['f1_delta']:+} points (95% {v['f1_delta_ci95']}), AUROC {v['auroc_delta']}, "
                  f"AUROC answerable {v['auroc_answerable_delta']}, "
                  f"citation precision {v['citation_precision_delta']}, "
                  f"refusals {v['refusal_accuracy_delta']} of unanswerable, {v['false_refusal_rate_delta']} of "
                  f"answerable; {v['placed_tokens_mean']} prompt tokens placed from the cache a question")
    if "chunk_cache" in result:
        c = result["chunk_cache"]
        print(f"chunk cache           head {c['head']} tokens a chunk read at their place; {c['hits']} hits, "
              f"{c['misses']} misses in this run (hit rate {c['hit_rate']})")
    if "calibrated" in result:
        print(dumps(result["calibrated"]["config"]))
