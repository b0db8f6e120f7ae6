"""``bench judge``: fit and measure the answerability probe (``localrag.judge``).

    python -m localrag bench judge --suite squad --split calibration --n 1000 --fit
    python -m localrag bench judge --suite squad --split report --n 200          # the shipped probe
    python -m localrag bench judge --suite hotpotqa --split report --n 100
    python -m localrag bench judge --suite squad --split calibration --n 1000 --limit 449 --prompt do-not-say --fit

``--prompt``: the instructions of one of ``bench prompts``' variants (default "brief", the app's);
a probe fitted on another prompt is keyed on it, so the app uses it only once its prompt is that one.

Each question is searched as the app searches (the top-k chunks of one collection holding every
sampled question's documents) and its judge's prompt laid out as the app lays it out
(``localrag.judge.LAYOUT``: the instructions, the top chunk, the question), then only *read*: the
answer model's prefill, with the hidden state of the last prompt token kept at every other layer
from 8 and at the final norm. Those states are cached on disk per question (a stopped run resumes),
so fitting again costs nothing (rows read with fewer layers tapped limit the fit to the layers all
rows hold). Questions are read in a seeded random order: a run stopped early is still a random sample.

``--fit`` (calibration half only): for each layer, a logistic probe (standardised features, L2)
scored by 5-fold cross-validation with the folds grouped by document (questions on one paragraph
never straddle folds); the best layer's probe is refitted on all and written to
``localrag/judge/probes/``, with ``refuse_below`` set from the out-of-fold scores so that at most
``MAX_EARLY_FALSE_REFUSALS`` of answerable questions are refused before an answer is written.

Otherwise the shipped probe for the model and instructions is measured on the split: AUROC
answerable-versus-not, and the share of each refused at ``refuse_below``.
"""

from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from localrag.answer import RAG_INSTRUCTIONS, AnswerConfig, Answerer
from localrag.backends.chunk_reuse import common_prefix
from localrag.bench.common import output
from localrag.bench.data import QA_SUITES, SPLITS, GroundingRecord, load_records, qa_collection
from localrag.bench.grounding import auroc, auroc_interval
from localrag.bench.prompts import VARIANTS
from localrag.config import GenerationConfig, ModelConfig, default_cache_dir
from localrag.engine import Engine
from localrag.generation import Generation, PlainDecoder
from localrag.judge import FINAL_NORM, Probe, file_sha256, find_probe, prompt_key
from localrag.models import resolve

MAX_EARLY_FALSE_REFUSALS = 0.05
FOLDS = 5
C_GRID = (0.001, 0.01, 0.1)
MAX_LAYERS = 128
GEN = GenerationConfig(max_tokens=64)  # the room each prompt leaves for an answer


def model_config(model: str | None) -> ModelConfig:
    return ModelConfig(model=model) if model else ModelConfig()


def tapped_layers(n_layer: int) -> tuple[int, ...]:
    return (*range(8, n_layer, 2), n_layer - 1, FINAL_NORM)


@dataclass
class Features:
    """The cached hidden states of the questions read: ``states[layer]`` is (n, n_embd)."""

    layers: tuple[int, ...]
    states: dict[int, np.ndarray]
    answerable: np.ndarray
    groups: np.ndarray  # a number per question's documents: the CV folds keep them together
    read_s: np.ndarray
    prompt_tokens: np.ndarray


def feature_dir(model_sha: str, instructions: str) -> Path:
    return default_cache_dir() / "judge-features" / f"{model_sha[:16]}-{prompt_key(instructions)[:12]}"


def record_key(rec: GroundingRecord, collection_key: str, k: int) -> str:
    text = "\0".join([collection_key, str(k), rec.qa.question, *rec.qa.docs])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def document_group(rec: GroundingRecord) -> int:
    """A number per question's documents: grouped folds keep questions on one paragraph together."""
    return int(hashlib.sha1("\0".join(rec.qa.docs).encode()).hexdigest()[:8], 16)


def sample(suite: str, split: str, n: int, seed: int):
    """The run's records, their collection, and the seeded order they are read in."""
    records = load_records(suite, None, split, n, seed)
    collection = qa_collection(f"judge-{suite}-{split}", [r.qa for r in records])
    return records, collection, np.random.default_rng(seed).permutation(len(records))


def prompts(answerer: Answerer, question: str, k: int) -> tuple[list[int], list[int]]:
    """The question's answer prompt (the top-k chunks) and its judge's prompt, as the app lays them out."""
    hits = answerer.find(question, [], k).hits
    return answerer.fit_prompt(answerer.rag_messages(question, hits, []), GEN), answerer.judge_prompt(question, hits, GEN)


def cost_prompts(args, n: int) -> list[tuple[list[int], list[int]]]:
    """The first ``n`` of the run's (answer, judge) prompts, in ``collect``'s order (tokens only)."""
    records, collection, order = sample(args.suite, args.split, args.n, args.seed)
    engine = Engine.load(replace(model_config(args.model), hidden_layers=()))
    answerer = Answerer(engine, collection.index, config=AnswerConfig(instructions=RAG_INSTRUCTIONS))
    out = [prompts(answerer, records[i].qa.question, args.k) for i in order[:n]]
    engine.close()
    return out


def collect(suite: str, split: str, n: int, seed: int, model: str | None, k: int, instructions: str,
            limit: int | None = None, progress=None) -> tuple[Features, Path]:
    """Read (or load from the cache) each sampled question's prompt; the features and the model file."""
    records, collection, order = sample(suite, split, n, seed)
    order = order[: limit or len(records)]
    spec_model = model_config(model)
    spec = resolve(spec_model.model)
    model_sha = file_sha256(Path(spec.path))
    folder = feature_dir(model_sha, instructions)
    folder.mkdir(parents=True, exist_ok=True)
    engine = answerer = None
    rows = []
    for done, i in enumerate(order, 1):
        rec = records[i]
        path = folder / f"{suite}-{record_key(rec, collection.key, k)}.npz"
        if not path.exists():
            if engine is None:  # every layer a model may have is tapped; those kept depend on its depth
                engine = Engine.load(replace(spec_model, hidden_layers=(*range(MAX_LAYERS), FINAL_NORM)))
                answerer = Answerer(engine, collection.index, config=AnswerConfig(instructions=instructions))
            tokens = answerer.judge_prompt(rec.qa.question, answerer.find(rec.qa.question, [], k).hits, GEN)
            engine.backend.reset()
            t0 = time.perf_counter()
            for _ in Generation(engine.backend, tokens, PlainDecoder(), GEN).read():
                pass
            seconds = time.perf_counter() - t0
            states = engine.backend.hidden_states()
            layers = tapped_layers(max(states) + 1)
            tmp = path.with_name(path.name + ".tmp.npz")
            np.savez(tmp, layers=np.array(layers), states=np.stack([states[x] for x in layers]),
                     answerable=bool(rec.qa.answers), group=document_group(rec),
                     read_s=seconds, prompt_tokens=len(tokens))
            tmp.replace(path)
        rows.append(np.load(path))
        if progress:
            progress(done, len(order), rows[-1])
    if engine is not None:
        engine.close()
    layers = tuple(sorted(set.intersection(*({int(x) for x in r["layers"]} for r in rows)), key=lambda x: (x < 0, x)))
    at = [{int(x): j for j, x in enumerate(r["layers"])} for r in rows]  # rows read with other taps keep theirs
    feats = Features(layers, {layer: np.stack([r["states"][a[layer]] for r, a in zip(rows, at, strict=True)])
                              for layer in layers},
                     np.array([bool(r["answerable"]) for r in rows]), np.array([int(r["group"]) for r in rows]),
                     np.array([float(r["read_s"]) for r in rows]), np.array([int(r["prompt_tokens"]) for r in rows]))
    return feats, Path(spec.path)


def _standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x.mean(axis=0), x.std(axis=0) + 1e-6


def _fit(x: np.ndarray, y: np.ndarray, c: float):
    from sklearn.linear_model import LogisticRegression

    mean, scale = _standardise(x)
    lr = LogisticRegression(C=c, max_iter=2000).fit((x - mean) / scale, y)
    return mean, scale, lr.coef_[0], float(lr.intercept_[0])


def _score(x: np.ndarray, mean, scale, w, b) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(((x - mean) / scale) @ w + b)))


def grouped_folds(groups) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) indices of FOLDS folds that never split a group."""
    from sklearn.model_selection import GroupKFold

    return list(GroupKFold(n_splits=FOLDS).split(np.zeros(len(groups)), groups=groups))


def out_of_fold(x: np.ndarray, y: np.ndarray, groups: np.ndarray, c: float) -> np.ndarray:
    p = np.zeros(len(y))
    for train, test in grouped_folds(groups):
        p[test] = _score(x[test], *_fit(x[train], y[train], c))
    return p


def fit_probe(feats: Features, model_path: Path, instructions: str, meta: dict) -> tuple[Probe, dict]:
    """The best (layer, C) by grouped cross-validated AUROC, refitted on all; every layer's figure."""
    y = feats.answerable.astype(int)
    table, best = {}, None
    for layer in feats.layers:
        for c in C_GRID:
            p = out_of_fold(feats.states[layer], y, feats.groups, c)
            a = auroc(list(p), list(y.astype(bool)))
            table[f"{layer}@C={c}"] = round(a, 4)
            if best is None or a > best[0]:
                best = (a, layer, c, p)
    a, layer, c, p = best
    refuse_below = float(np.quantile(p[y == 1], MAX_EARLY_FALSE_REFUSALS))
    mean, scale, w, b = _fit(feats.states[layer], y, c)
    fitted = {**meta, "layer_auroc_cv": table, "cv_auroc": round(a, 4), "C": c,
              "cv_early_refusals_unanswerable": round(float((p[y == 0] < refuse_below).mean()), 4),
              "cv_early_refusals_answerable": round(float((p[y == 1] < refuse_below).mean()), 4),
              "n_answerable": int(y.sum()), "n_unanswerable": int((1 - y).sum())}
    probe = Probe(file_sha256(model_path), model_path.stat().st_size, prompt_key(instructions), layer, tuple(mean),
                  tuple(scale), tuple(w), b, refuse_below, fitted)
    return probe, fitted


def measure(probe: Probe, feats: Features) -> dict:
    y = feats.answerable
    p = np.array([probe.p_answerable(h) for h in feats.states[probe.layer]])
    refused = p < probe.refuse_below
    both = y.any() and (~y).any()  # HotpotQA's questions are all answerable: no AUROC, only refusals
    return {"auroc": round(auroc(list(p), list(y)), 4) if both else None,
            "auroc_95": auroc_interval(list(p), list(y)) if both else None,
            "p_answerable_median": round(float(np.median(p)), 4),
            "early_refusals_unanswerable": round(float(refused[~y].mean()), 4) if (~y).any() else None,
            "early_refusals_answerable": round(float(refused[y].mean()), 4) if y.any() else None,
            "n_answerable": int(y.sum()), "n_unanswerable": int((~y).sum()),
            "mean_read_s": round(float(feats.read_s.mean()), 2),
            "mean_prompt_tokens": round(float(feats.prompt_tokens.mean()), 1)}


def tap_cost(model: str | None, layer: int, pairs: list[tuple[list[int], list[int]]], repeats: int = 2) -> dict:
    """What the judge costs an answer: each answer prompt read by a backend without the tap and by
    one with it, interleaved, ``repeats`` times (the median ratio of their seconds); and after the
    tapped read, the judge's prompt read aside (``hidden_states_after``): its seconds and tokens."""
    plain, tapped = (Engine.load(replace(model_config(model), hidden_layers=layers)) for layers in ((), (layer,)))
    ratios, aside_s, aside_tokens, prefill_s = [], [], [], []
    try:
        for _ in range(repeats):
            for tokens, judged in pairs:
                seconds = []
                for engine in (plain, tapped):
                    engine.backend.reset()
                    t0 = time.perf_counter()
                    engine.backend.prefill(tokens)
                    seconds.append(time.perf_counter() - t0)
                ratios.append(seconds[1] / seconds[0])
                prefill_s.append(seconds[0])
                keep = min(common_prefix(tokens, judged), len(judged) - 1)
                t0 = time.perf_counter()
                states = tapped.backend.hidden_states_after(keep, judged[keep:])
                aside_s.append(time.perf_counter() - t0)
                aside_tokens.append(len(judged) - keep)
                assert layer in states, "the judge's prompt was not read aside"
    finally:
        plain.close()
        tapped.close()
    return {"prefill_with_tap_over_without_median": round(float(np.median(ratios)), 4),
            "min": round(min(ratios), 4), "max": round(max(ratios), 4), "n": len(ratios),
            "judge_read_s_median": round(float(np.median(aside_s)), 3),
            "judge_tokens_median": float(np.median(aside_tokens)),
            "answer_prefill_s_median": round(float(np.median(prefill_s)), 3)}


# bench prompts' variants that differ from the app's prompt in their instructions alone (the judge's
# prompt lays out the top chunk and the question as the app does)
JUDGED_PROMPTS = tuple(n for n, v in VARIANTS.items() if (v.k, v.best_last, v.reminder) == (5, False, ""))


def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("judge", help="fit and measure the answerability probe")
    p.add_argument("--suite", choices=QA_SUITES, default="squad")
    p.add_argument("--split", choices=SPLITS, default="report")
    p.add_argument("--n", type=int, default=200, help="questions (seeded sample of the split)")
    p.add_argument("--limit", type=int, default=None, help="read only this many of them (a random subset)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=5, help="chunks per prompt")
    p.add_argument("--model", default=None)
    p.add_argument("--fit", action="store_true", help="fit the probe on these questions and write it")
    p.add_argument("--prompt", default="brief", choices=JUDGED_PROMPTS,
                   help="the instructions of this bench prompts variant (brief: the app's)")
    p.add_argument("--cost", type=int, default=0, help="also time N answer prompts read with and without the tap, and their judge prompts read aside")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_judge)


def cmd_judge(args) -> int:
    if args.fit and args.split != "calibration":
        print("error: fit on --split calibration (the report half is kept apart)", file=sys.stderr)
        return 2

    def progress(i, total, row):
        print(f"[{i}/{total}] answerable={bool(row['answerable'])} read {float(row['read_s']):.1f} s "
              f"({int(row['prompt_tokens'])} tokens)", file=sys.stderr, flush=True)

    instructions = VARIANTS[args.prompt].instructions
    model_sha = file_sha256(Path(resolve(model_config(args.model).model).path))
    probe = None if args.fit else find_probe(model_sha, instructions)
    if not args.fit and probe is None:  # said before the minutes of reading, not after
        print(f"error: no probe for this model and the {args.prompt} prompt; fit one first (--fit)", file=sys.stderr)
        return 2
    feats, model_path = collect(args.suite, args.split, args.n, args.seed, args.model, args.k, instructions,
                               args.limit, progress)
    result = {"suite": args.suite, "split": args.split, "prompt": args.prompt, "n": len(feats.answerable),
              "model_sha256": model_sha}
    if args.fit:
        meta = {"suite": args.suite, "split": args.split, "seed": args.seed, "n_sampled": args.n, "k": args.k}
        probe, fitted = fit_probe(feats, model_path, instructions, meta)
        result.update(fitted, layer=probe.layer, refuse_below=round(probe.refuse_below, 4), file=str(probe.save()))
    else:
        result.update(layer=probe.layer, **measure(probe, feats))
        t0 = time.perf_counter()
        for h in feats.states[probe.layer]:
            probe.p_answerable(h)
        result["probe_seconds_per_answer"] = round((time.perf_counter() - t0) / len(feats.answerable), 6)
    if args.cost:
        result["tap_cost"] = tap_cost(args.model, probe.layer, cost_prompts(args, args.cost))
    return output(result, args.json, lambda r: print("\n".join(f"{k}: {v}" for k, v in r.items())))
