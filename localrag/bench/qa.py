"""QA benchmark: no-RAG vs standard RAG vs Grounded (Speculative RAG), with the paper's ablations.

    python -m localrag bench qa --suite squad --n 200 [--json]
    python -m localrag bench qa --suite hotpotqa --n 100
    python -m localrag bench qa --data my.jsonl --n 50     # {"question", "docs": [...], "answers": [...]}
    python -m localrag bench qa --suite squad --n 100 --methods grounded   # Grounded only, with its variants

Data: SQuAD v2.0 dev and HotpotQA dev (distractor), or a JSONL file (:mod:`localrag.bench.data`).
A seeded sample of N questions is drawn; the documents of all sampled questions form ONE
collection (every SQuAD paragraph / every HotpotQA paragraph incl. distractors), ingested through
the normal pipeline into a cached index, so retrieval has real competition.

Methods, interleaved per question (same retrieval, same machine state):
    norag        the chat model alone
    rag          standard RAG: top-k chunks stuffed into one prompt (Plain mode), its text whatever the
                 evidence check says
    rag-checked  the same answer as the page shows it: one the evidence check does not support counts
                 as a refusal (Plain warns on it), as Grounded's does
    grounded     Grounded mode as the app runs it: the answer model's own answer over the top-k chunks,
                 and Speculative RAG's subset drafts (drafter + verifier), each checked against its
                 chunks; refused when no candidate passes (``GroundedPipeline.decide``); ``specrag``,
                 its old name, is accepted by ``--methods``
    unchecked    the subset drafts alone, best by score above the verifier's threshold, unchecked
    reranked     the subset drafts alone: the best-scoring draft above the verifier's threshold whose
                 evidence is supported
    drafter      ablation: the same drafts, best by draft score, no verifier
    nocluster    ablation: random k-subsets instead of one chunk per cluster
    oracle       NOT a method: the same drafts, best by F1 against the gold answers (abstains on
                 unanswerable questions): the ceiling any selection rule could reach with these drafts

``--methods`` runs a subset (norag, rag, grounded, nocluster; rag-checked comes with rag, the others
from grounded's drafts, at no extra generation).

Metrics (SQuAD normalisation): exact match, F1, answer-contained rate on answerable
questions; for unanswerable ones (SQuAD v2) the rate of correct "not in the documents";
mean, median and p90 latency, and Grounded's latency as a ratio to RAG's (Plain) on the same
questions (the ratio of the means, and the median of the per-question ratios). Also: the threshold
that would have been best on this run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localrag.answer import AnswerConfig, Answerer
from localrag.app.options import add_endpoint_args, endpoint_config
from localrag.backends.endpoint import EndpointConfig, EndpointEngine
from localrag.bench.common import QA_INSTRUCTIONS, fmt, output, score_answer, table, timed, write_json
from localrag.bench.data import QA_SUITES, QARecord, qa_collection, qa_records, sample
from localrag.config import GenerationConfig, GroundedConfig, ModelConfig
from localrag.engine import Engine
from localrag.evidence import EvidenceAligner, is_refusal
from localrag.grounded import GroundedPipeline
from localrag.grounded.extras import DRAFTER, GroundedDraft
from localrag.grounded.pipeline import check_draft
from localrag.grounded.scoring import short_answer, usable
from localrag.modes import MODES, AnswerRequest, GroundedOptions
from localrag.results import AnswerResult

METHODS = ("norag", "rag", "rag-checked", "grounded", "unchecked", "reranked", "drafter", "nocluster", "oracle")
RUNS = ("norag", "rag", "grounded", "nocluster")  # the methods that generate; the rest reuse their answers
ALIASES = {"specrag": "grounded"}  # accepted by --methods, never printed


@dataclass(frozen=True)
class Pick:
    answer: str | None  # None: abstained
    seconds: float


@dataclass(frozen=True)
class QuestionRun:
    """The methods on one question. ``best``: Grounded's best usable draft by the combined score, and
    that score (for threshold calibration); ``drafts``: every draft with its raw scores, so other
    selection rules can be evaluated offline."""

    picks: dict[str, Pick]
    best: tuple[str | None, float | None] = (None, None)
    drafts: tuple[dict, ...] = ()


# ------------------------------------------------------------------ methods
def run_question(answerer: Answerer, norag: Answerer, pipeline: GroundedPipeline, rec: QARecord,
                 gen: GenerationConfig, grounded_cfg: GroundedConfig, k: int,
                 ask: Callable[[Answerer, AnswerRequest], AnswerResult] = MODES["plain"].answer,
                 aligner: EvidenceAligner | None = None, methods: tuple[str, ...] = RUNS,
                 grounded_ask: Callable | None = None) -> QuestionRun:
    """The methods on one question. ``ask``: how the RAG and no-RAG answers are made (Plain mode).
    ``aligner``: the pipeline's own (the reranked method checks every draft with it); None: no
    evidence check. ``methods``: which of RUNS to run (those derived from grounded's drafts come with it).
    ``grounded_ask``: how Grounded's answer is made (default: the mode, ``ask_grounded``)."""
    picks: dict[str, Pick] = {}
    request = AnswerRequest(rec.question, gen=gen, options=MODES["plain"].options({"k": k}))
    for method, who in (("norag", norag), ("rag", answerer)):
        if method in methods:
            r, seconds = timed(ask, who, request)
            picks[method] = Pick(_pred(r.text), seconds)
            if method == "rag":
                picks["rag-checked"] = Pick(_pred(r.text) if r.supported else None, seconds)
    best, drafts = (None, None), ()
    if "grounded" in methods:
        best, drafts = _grounded(answerer, pipeline, rec, gen, grounded_cfg, aligner, picks, k, grounded_ask)
    if "nocluster" in methods:
        r, seconds = timed(pipeline.answer, rec.question, answerer.index_for(None), gen=gen,
                           config=grounded_cfg.with_(cluster=False))
        picks["nocluster"] = Pick(usable(r.extras.drafts)[0].answer if r.supported else None, seconds)
    return QuestionRun(picks, best, drafts)


def _grounded(answerer: Answerer, pipeline: GroundedPipeline, rec: QARecord, gen: GenerationConfig,
              cfg: GroundedConfig, aligner: EvidenceAligner | None, picks: dict[str, Pick],
              k: int = 5, grounded_ask: Callable | None = None) -> tuple[tuple, tuple]:
    """Grounded once, as the app runs it (``GroundedMode.answer_with``: the answer model's own answer
    over the top-k chunks and the subset drafts), and every method that picks from its subset drafts
    alone, into ``picks``; returns QuestionRun's ``best`` and ``drafts``. ``gen``: the same limits as
    the RAG answer's (a draft's answer must end within ``gen.max_tokens``, as in the app)."""
    mode = MODES["grounded"]
    grounded_ask = grounded_ask or ask_grounded
    request = AnswerRequest(rec.question, gen=gen, options=mode.options({"k": k, "n": cfg.n}))
    r, lat = timed(grounded_ask, answerer, pipeline, request)
    extras = r.extras
    picks["grounded"] = Pick(_pred(r.text) if r.supported else None, lat)
    subset_drafts = [d for d in extras.drafts if d.origin == DRAFTER]
    chosen = sorted(usable(subset_drafts), key=lambda d: d.score, reverse=True)
    passed = bool(chosen) and chosen[0].score >= cfg.min_score
    own_s = r.stats.generation.prefill_seconds + r.stats.generation.decode_seconds if r.stats.generation else 0.0
    picks["unchecked"] = Pick(chosen[0].answer if passed else None, lat - own_s)
    def holds(d: GroundedDraft) -> bool:
        return d.score >= cfg.min_score and not d.check and not (
            aligner is not None and check_draft(aligner, d, d.citations, rec.question)[1])

    fallback = next((d for d in chosen if holds(d)), None)
    picks["reranked"] = Pick(fallback.answer if fallback else None, lat - own_s)
    best = max(chosen, key=lambda d: d.draft_logprob / max(d.n_draft_tokens, 1)) if chosen else None
    picks["drafter"] = Pick(best.answer if best else None, lat - own_s - extras.verify_s)
    gold = max(chosen, key=lambda d: score_answer(d.answer, rec.answers)["f1"]) if chosen and rec.answers else None
    picks["oracle"] = Pick(gold.answer if gold else None, lat)
    drafts = tuple({"answer": d.answer, "origin": d.origin, "draft_logprob": round(d.draft_logprob, 3),
                    "n_draft": d.n_draft_tokens, "reflection": round(d.reflection, 3), "dropped": d.dropped,
                    "check": d.check} for d in extras.drafts)
    return ((chosen[0].answer, chosen[0].score) if chosen else (None, None)), drafts


def ask_grounded(answerer: Answerer, pipeline: GroundedPipeline, request: AnswerRequest) -> AnswerResult:
    """Grounded mode's answer with the benchmark's pipeline (its drafter, verifier and settings)."""
    return [*MODES["grounded"].answer_with(answerer, pipeline, request)][-1]


def _pred(text: str) -> str | None:
    """Every method's reply is reduced to its answer phrase the same way (scoring.short_answer)."""
    line = short_answer(text)
    return None if is_refusal(line) else line


# ------------------------------------------------------------------ metrics
def summarize(rows: list[QuestionRun], records: list[QARecord]) -> dict:
    res = {}
    for m in (m for m in METHODS if rows and m in rows[0].picks):
        ans = [(row.picks[m].answer, rec.answers) for row, rec in zip(rows, records, strict=True) if rec.answers]
        una = [row.picks[m].answer for row, rec in zip(rows, records, strict=True) if not rec.answers]
        sc = [score_answer(p, a) if p is not None else {"em": 0.0, "f1": 0.0, "contained": 0.0} for p, a in ans]
        lat = [row.picks[m].seconds for row in rows]
        res[m] = {
            "answerable": len(ans),
            "em": _pct(np.mean([s["em"] for s in sc])) if sc else None,
            "f1": _pct(np.mean([s["f1"] for s in sc])) if sc else None,
            "contained": _pct(np.mean([s["contained"] for s in sc])) if sc else None,
            "abstained_on_answerable": _pct(np.mean([p is None for p, _ in ans])) if ans else None,
            "unanswerable": len(una),
            "unanswerable_correct": _pct(np.mean([p is None for p in una])) if una else None,
            "latency_mean_s": round(float(np.mean(lat)), 3),
            "latency_median_s": round(float(np.median(lat)), 3),
            "latency_p90_s": round(float(np.percentile(lat, 90)), 3),
        }
    return res


def calibrate(rows: list[QuestionRun], records: list[QARecord]) -> dict:
    """Best abstention threshold on this run (in-sample): maximises the mean over questions of
    F1 (answerable, 0 when abstaining) or 1 for abstaining on an unanswerable question."""
    items = []
    for row, rec in zip(rows, records, strict=True):
        pred, s = row.best
        f1 = score_answer(pred, rec.answers)["f1"] if (pred and rec.answers) else 0.0
        items.append((s if s is not None else -1e9, f1, not rec.answers))
    cands = sorted({round(s, 2) for s, _, _ in items if s > -1e9})
    best: tuple = (None, -1.0)
    for t in [-1e9, *cands]:
        val = float(np.mean([float(s < t) if un else (f if s >= t else 0.0) for s, f, un in items]))
        if val > best[1]:
            best = (t, val)
    return {"best_threshold": None if best[0] == -1e9 else best[0], "utility": round(best[1], 4),
            "scores": [[round(s, 3), round(f, 3), un] for s, f, un in items if s > -1e9]}


def _pct(x) -> float:
    return round(100 * float(x), 2)


# ------------------------------------------------------------------ runner
def run_qa(suite: str | None, data: str | None, n: int | None, seed: int = 0, k: int = 5,
           model: str | None = None, verifier: str = "target", progress=None, limit: int | None = None,
           out: str | None = None, min_score: float | None = None, extractive: bool = False,
           methods: tuple[str, ...] = RUNS, drafter: str = "auto", endpoint: EndpointConfig | None = None) -> dict:
    """Run the methods on the sample; ``limit``: evaluate only the first questions of the sample
    (the collection still holds all N questions' documents); ``out``: rewrite partial results there
    after every question; ``extractive``: drafts copied from the chunks (GroundedConfig.extractive);
    ``methods``: which of RUNS to run; ``endpoint``: the model on a serving engine (Grounded's drafts
    are then concurrent requests)."""
    name = Path(data).stem if data else suite
    records = sample(qa_records(suite, data), n, seed)
    collection, ingest_s = timed(qa_collection, name, records)
    engine = EndpointEngine(endpoint) if endpoint else Engine.load(ModelConfig(model=model) if model else ModelConfig())
    cfg = GroundedConfig(extractive=extractive)
    if min_score is not None:
        cfg = cfg.with_(min_score=min_score)
    config = AnswerConfig(grounded=cfg, instructions=QA_INSTRUCTIONS)
    answerer = Answerer(engine, collection.index, config=config)
    # the Grounded mode's own pipeline, as the app runs it (its drafter and verifier from its options)
    opts = GroundedOptions(n=cfg.n, clusters=cfg.k, drafts=cfg.m, drafter=drafter, verifier=verifier)
    pipeline = MODES["grounded"].pipeline(answerer, opts)
    aligner, cfg = pipeline.aligner, pipeline.config
    gen = GenerationConfig(max_tokens=32)
    norag = Answerer(engine, None, answerer.models, config=config)
    head = {"documents": len(collection.docs), "chunks_ingested": collection.report.chunks,
            "ingest_s": round(ingest_s, 1), "seed": seed, "k": k, "drafter": pipeline.drafter.model_name,
            "verifier": pipeline.verifier.model_name, "grounded": {"n": cfg.n, "k": cfg.k, "m": cfg.m, "min_score": cfg.min_score,
                                                     "extractive": cfg.extractive, "min_relevance": cfg.min_relevance}}
    todo = records[:limit] if limit else records
    rows: list[QuestionRun] = []
    result: dict = {}
    for i, rec in enumerate(todo):
        rows.append(run_question(answerer, norag, pipeline, rec, gen, cfg, k, aligner=aligner, methods=methods))
        if progress:
            progress(i + 1, len(todo), rec, rows[-1])
        result = _result(name, head, todo[: len(rows)], rows)
        if out:
            write_json(out, result)
    return result


def _result(name: str, head: dict, records: list[QARecord], rows: list[QuestionRun]) -> dict:
    result = {
        "suite": name, "questions": len(records), **head,
        "methods": summarize(rows, records), "calibration": calibrate(rows, records),
        "predictions": [{"question": r.question, "gold": list(r.answers),
                         **{m: row.picks[m].answer for m in METHODS if m in row.picks},
                         "grounded_drafts": list(row.drafts)}
                        for r, row in zip(records, rows, strict=True)],
    }
    rag, grounded = result["methods"].get("rag"), result["methods"].get("grounded")
    if rag and grounded and rag["f1"] is not None:
        result["grounded_minus_rag_f1"] = round(grounded["f1"] - rag["f1"], 2)
    if rag and grounded:
        result["grounded_latency_ratio"] = round(grounded["latency_mean_s"] / max(rag["latency_mean_s"], 1e-9), 3)
        # paired: each question's Grounded time over its RAG (Plain) time, the median of those
        paired = [row.picks["grounded"].seconds / max(row.picks["rag"].seconds, 1e-9) for row in rows]
        result["grounded_latency_ratio_median"] = round(float(np.median(paired)), 3)
    return result


# ------------------------------------------------------------------ command line
def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("qa", help="QA accuracy + latency: no-RAG vs RAG vs Grounded (Speculative RAG)")
    p.add_argument("--suite", choices=QA_SUITES, default="squad")
    p.add_argument("--data", default=None, help='JSONL: {"question", "docs": [...], "answers": [...]} per line')
    p.add_argument("--n", type=int, default=100, help="questions (seeded sample)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=5, help="chunks for standard RAG")
    p.add_argument("--drafter", default="auto", help="Grounded's drafter: auto (the model's registry draft), "
                                                    "target, or a model name")
    p.add_argument("--verifier", default="target", help="Grounded's verifier: target (the model itself) or a name")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first L sampled questions")
    p.add_argument("--out", default=None, help="also write (partial) results to this JSON file")
    p.add_argument("--min-score", type=float, default=None,
                   help="Grounded's support threshold (default: GroundedConfig.min_score)")
    p.add_argument("--extractive-drafts", action="store_true",
                   help="Grounded's drafts copied from the chunks instead of written freely")
    p.add_argument("--methods", default=",".join(RUNS),
                   help=f"comma-separated subset of {','.join(RUNS)} (grounded brings its derived methods)")
    p.add_argument("--model", default=None, help="the model (default: the app's default model)")
    add_endpoint_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_qa)


def parse_methods(text: str) -> tuple[str, ...] | None:
    """The --methods list with aliases resolved, in RUNS's names; None if empty or unknown."""
    methods = tuple(ALIASES.get(m.strip(), m.strip()) for m in text.split(",") if m.strip())
    return methods if methods and all(m in RUNS for m in methods) else None


def cmd_qa(args) -> int:
    methods = parse_methods(args.methods)
    if methods is None:
        print(f"error: --methods takes {', '.join(RUNS)}; got {args.methods!r}", file=sys.stderr)
        return 2

    def progress(i, total, rec, row):
        shown = {m: row.picks[m].answer for m in METHODS if m in row.picks}
        print(f"[{i}/{total}] {rec.question[:60]!r} gold={list(rec.answers)[:2]} {shown}", file=sys.stderr)

    result = run_qa(args.suite, args.data, args.n, args.seed, args.k, verifier=args.verifier, drafter=args.drafter,
                    progress=progress,
                    limit=args.limit, out=args.out, min_score=args.min_score, extractive=args.extractive_drafts,
                    methods=methods, model=args.model, endpoint=endpoint_config(args))
    return output(result, args.json, print_qa)


def print_qa(result: dict) -> None:
    print(f"{result['suite']}: {result['questions']} questions over {result['documents']} documents "
          f"({result['chunks_ingested']} new chunks), drafter {result['drafter']}, verifier {result['verifier']}")
    columns = [("method", 12), ("EM", 6), ("F1", 6), ("cont.", 6), ("abst.", 6), ("unans.ok", 8), ("mean s", 7),
               ("p90 s", 7)]
    print(table(columns, [[m, fmt(r["em"], ".1f"), fmt(r["f1"], ".1f"), fmt(r["contained"], ".1f"),
                           fmt(r["abstained_on_answerable"], ".1f"), fmt(r["unanswerable_correct"], ".1f"),
                           f"{r['latency_mean_s']:.2f}", f"{r['latency_p90_s']:.2f}"]
                          for m, r in result["methods"].items()]))
    print(f"grounded - rag F1: {result.get('grounded_minus_rag_f1')}; latency ratio to rag (Plain): "
          f"{result.get('grounded_latency_ratio')} (means), {result.get('grounded_latency_ratio_median')} "
          f"(median of per-question ratios); best threshold on this run: {result['calibration'].get('best_threshold')}")
