"""``bench prompts``: which standard-RAG prompt makes the answers come from the evidence.

    python -m localrag bench prompts --suite squad --n 200 --seed 1 [--variants brief,short,...] [--json]
    python -m localrag bench prompts --suite hotpotqa --n 200 --seed 1

Every variant answers the same questions in Plain mode (greedy, the default model), interleaved per
question, through the answer layer's own pieces (``Answerer.search``, ``rag_messages``,
``Answerer.fit_prompt``, ``Engine.reply``): what changes is the instructions, the number of chunks,
their order and a reminder beside the question. The questions come from the *calibration* half of
``bench grounding``'s data (seed 1 by default; ``bench qa`` and ``bench grounding`` report with seed 0
on the other half), so choosing a prompt here never touches the reported figures.

Per variant: F1 and exact match of the answer phrase (``bench qa``'s reduction: the part after an
``Answer:`` label when there is one, then the first line without lead-ins) and whether the answer
contains a gold answer, over answerable questions; the refusals (the model's own "not in the
documents") of answerable and unanswerable questions; the evidence aligner's support score of the
whole answer against the chunks it was given (mean, and the share above the refusal threshold);
answer tokens and latency. Answers are cached with ``--cache`` (``bench grounding``'s answer cache).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from localrag.answer import RAG_INSTRUCTIONS, Answerer, rag_messages
from localrag.bench.common import (
    QA_INSTRUCTIONS,
    AnswerCache,
    AnsweredQuestion,
    contains_answer,
    fmt,
    output,
    score_answer,
    table,
    write_json,
)
from localrag.bench.data import QA_SUITES, GroundingRecord, load_records, qa_collection
from localrag.config import GenerationConfig, ModelConfig
from localrag.engine import Engine
from localrag.evidence import EvidenceAligner, is_refusal
from localrag.grounded.scoring import short_answer


@dataclass(frozen=True)
class PromptVariant:
    """One way of writing the RAG prompt."""

    name: str
    instructions: str
    k: int = 5  # chunks in the prompt
    best_last: bool = False  # sources listed best last (nearest the question) instead of best first
    reminder: str = ""  # appended to the question in the user turn

    def messages(self, question: str, hits: list) -> list[dict]:
        ordered = list(reversed(hits)) if self.best_last else list(hits)
        asked = f"{question}\n\n{self.reminder}" if self.reminder else question
        return rag_messages(asked, ordered, (), self.instructions)


# Ordered so that consecutive variants share a prompt prefix where they can (the KV cache keeps it)
VARIANTS = {v.name: v for v in (
    # the app's prompt until this study ("app" in its first runs), which the model almost never declines
    PromptVariant("do-not-say", "Answer the question using only the numbered sources below. Be brief and "
                                "specific. If the sources do not contain the answer, say that the documents do "
                                "not say."),
    # the app's prompt since: the same brief sentences with the refusal phrase the model takes up
    PromptVariant("brief", RAG_INSTRUCTIONS),
    PromptVariant("short", QA_INSTRUCTIONS),
    PromptVariant("reminder", QA_INSTRUCTIONS,
                  reminder="Reply with just the answer: a short phrase copied from the sources."),
    PromptVariant("short-k3", QA_INSTRUCTIONS, k=3),
    PromptVariant("short-last", QA_INSTRUCTIONS, best_last=True),
    PromptVariant("quote", "Answer the question using only the numbered sources below. First copy the sentence "
                           "of the sources that answers the question, then write 'Answer:' and the answer as a "
                           "short phrase. If the sources do not contain the answer, reply: not in the documents."),
    PromptVariant("claims", "Answer the question using only the numbered sources below. Write one short sentence "
                            "per fact, each taken from one source, and end it with that source's number in "
                            "brackets, like [2]. If the sources do not contain the answer, reply: not in the "
                            "documents."),
)}


def answer_phrase(text: str) -> str:
    """The phrase scored against the gold: after the last ``Answer:`` label if any, then the first
    line without lead-ins (``scoring.short_answer``)."""
    at = text.lower().rfind("answer:")
    return short_answer(text[at + len("answer:"):] if at >= 0 else text)


@dataclass(frozen=True)
class PromptRow:
    variant: str
    question: str
    answerable: bool
    answer: str
    prediction: str
    refused: bool
    f1: float
    em: float
    contained: bool
    support: float
    supported: bool
    answer_tokens: int
    seconds: float


@dataclass
class Study:
    records: list[GroundingRecord]
    answerer: Answerer
    aligner: EvidenceAligner
    collection_key: str
    rows: list[PromptRow] = field(default_factory=list)


def answer_with(s: Study, variant: PromptVariant, question: str, gen: GenerationConfig,
                cache: AnswerCache) -> tuple[AnsweredQuestion, int]:
    """(the answer, its token count): Plain mode's steps with this variant's prompt."""
    guard = asdict(gen.repetition) if gen.repetition is not None else None
    key = cache.key(s.answerer.engine.model_name, f"plain-prompt:{variant.name}",
                    json.dumps([asdict(variant), guard], sort_keys=True), question, variant.k, gen.max_tokens,
                    s.collection_key)
    answered = cache.get(key)
    if answered is None:
        t0 = time.perf_counter()
        got = s.answerer.search(question, variant.k)
        text = s.answerer.generate(variant.messages(question, got.hits), gen).run().text.strip()
        answered = AnsweredQuestion(text, tuple(got.hits), is_refusal(answer_phrase(text)), time.perf_counter() - t0)
        cache.put(key, answered)
    n_tokens = len(s.answerer.engine.backend.tokenize(answered.text, add_special=False)) if answered.text else 0
    return answered, n_tokens


def score(s: Study, variant: PromptVariant, rec: GroundingRecord, answered: AnsweredQuestion, n_tokens: int) -> PromptRow:
    answers = rec.qa.answers
    prediction = answer_phrase(answered.text)
    scores = score_answer(prediction, answers) if answers and not answered.refused else {"f1": 0.0, "em": 0.0}
    contained = contains_answer(answered.text, answers)
    evidence = s.aligner.align(answered.text, answered.hits, question=rec.qa.question)
    return PromptRow(variant.name, rec.qa.question, bool(answers), answered.text, prediction, answered.refused,
                     scores["f1"], scores["em"], contained, evidence.score, evidence.supported, n_tokens,
                     answered.seconds)


def summarize(rows: list[PromptRow]) -> dict:
    ans = [r for r in rows if r.answerable]
    una = [r for r in rows if not r.answerable]

    def mean(values) -> float | None:
        values = list(values)
        return round(float(np.mean(values)), 4) if values else None

    return {"questions": len(rows), "answerable": len(ans), "unanswerable": len(una),
            "f1": mean(100 * r.f1 for r in ans), "em": mean(100 * r.em for r in ans),
            "contained": mean(100 * r.contained for r in ans),
            "f1_at_least_half": mean(100 * (r.f1 >= 0.5) for r in ans),
            "refused_answerable": mean(100 * r.refused for r in ans),
            "refused_unanswerable": mean(100 * r.refused for r in una),
            "support_mean": mean(r.support for r in rows),
            "support_mean_answerable": mean(r.support for r in ans),
            "supported": mean(100 * r.supported for r in rows),
            "answer_tokens_mean": mean(r.answer_tokens for r in rows),
            "latency_median_s": round(float(np.median([r.seconds for r in rows])), 3) if rows else None}


def run_prompts(suite: str, n: int, seed: int = 1, split: str = "calibration", variants: list[str] | None = None,
                max_tokens: int = 48, model: str | None = None, cache: bool = False, progress=None,
                out: str | None = None) -> dict:
    chosen = [VARIANTS[v] for v in (variants or list(VARIANTS))]
    records = load_records(suite, None, split, n, seed)
    collection = qa_collection(f"grounding-{suite}-{split}", [r.qa for r in records])
    engine = Engine.load(ModelConfig(model=model) if model else ModelConfig())
    study = Study(records, Answerer(engine, collection.index), EvidenceAligner(collection.index.embedder),
                  collection.key)
    gen = GenerationConfig(max_tokens=max_tokens)
    store = AnswerCache(enabled=cache)
    for i, rec in enumerate(records):
        for variant in chosen:  # interleaved: every variant on this question, same machine state
            answered, n_tokens = answer_with(study, variant, rec.qa.question, gen, store)
            study.rows.append(score(study, variant, rec, answered, n_tokens))
        if progress:
            progress(i + 1, len(records), study.rows[-len(chosen):])
        if out:
            write_json(out, _result(suite, split, seed, max_tokens, engine, chosen, study.rows))
    return _result(suite, split, seed, max_tokens, engine, chosen, study.rows)


def _result(suite, split, seed, max_tokens, engine, chosen, rows) -> dict:
    return {"suite": suite, "split": split, "seed": seed, "max_tokens": max_tokens, "model": engine.model_name,
            "variants": {v.name: {**asdict(v), **summarize([r for r in rows if r.variant == v.name])} for v in chosen},
            "rows": [asdict(r) for r in rows]}


def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("prompts", help="RAG prompt variants: F1 and evidence support (Plain mode)")
    p.add_argument("--suite", choices=QA_SUITES, default="squad")
    p.add_argument("--n", type=int, default=200, help="questions (seeded sample of the split)")
    p.add_argument("--seed", type=int, default=1, help="sample seed (bench qa / grounding report with seed 0)")
    p.add_argument("--split", choices=("calibration", "report", "all"), default="calibration")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated: {', '.join(VARIANTS)}")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--model", default=None)
    p.add_argument("--cache", action="store_true", help="re-use cached answers (and cache new ones)")
    p.add_argument("--out", default=None, help="also write the result (every answer) to this JSON file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_prompts)


def cmd_prompts(args) -> int:
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        print(f"error: unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2

    def progress(i, total, rows):
        print(f"[{i}/{total}] {rows[0].question[:50]!r} " + " | ".join(f"{r.variant}: {r.prediction[:24]!r}"
                                                                      for r in rows), file=sys.stderr)

    result = run_prompts(args.suite, args.n, args.seed, args.split, names, args.max_tokens, args.model,
                         args.cache, progress, args.out)
    if args.out:
        write_json(args.out, result)
    return output({k: v for k, v in result.items() if k != "rows"}, args.json, print_prompts)


def print_prompts(result: dict) -> None:
    print(f"{result['suite']} ({result['split']} split, seed {result['seed']}), model {result['model']}, "
          f"max {result['max_tokens']} tokens")
    columns = [("variant", 11), ("k", 2), ("order", 6), ("F1", 6), ("EM", 6), ("cont.", 6), ("F1>=.5", 6),
               ("support", 7), ("suppd", 6), ("ref.ans", 7), ("ref.una", 7), ("tokens", 6), ("med s", 6)]
    print(table(columns, [[name, v["k"], "last" if v["best_last"] else "first", fmt(v["f1"], ".1f"),
                           fmt(v["em"], ".1f"), fmt(v["contained"], ".1f"), fmt(v["f1_at_least_half"], ".1f"),
                           fmt(v["support_mean"], ".3f"), fmt(v["supported"], ".1f"),
                           fmt(v["refused_answerable"], ".1f"), fmt(v["refused_unanswerable"], ".1f"),
                           fmt(v["answer_tokens_mean"], ".1f"), fmt(v["latency_median_s"], ".2f")]
                          for name, v in result["variants"].items()]))
