"""What the benchmarks share: timing, medians and interleaving, answer scoring, cached answers,
and their output (fixed-width tables, JSON).

Every figure is measured in one process with the methods interleaved (docs/design.md,
"Measuring"): ``alternate`` gives a round's order (who goes first alternates), ``median_ratio``
the median of the per-round ratios of two methods' adjacent runs.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import statistics
import string
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from localrag.config import default_cache_dir
from localrag.evidence import split_sentences
from localrag.rag.records import Hit
from localrag.repetition import normalise_sentence

T = TypeVar("T")

# bench qa's and grounding's instructions (the RAG prompt's, asking for a short answer phrase)
QA_INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. Reply with just the answer, a short "
    "phrase. If the sources do not contain the answer, reply: not in the documents."
)


# ------------------------------------------------------------------ timing and interleaving
def timed(fn: Callable[..., T], *args, **kwargs) -> tuple[T, float]:
    """(fn's result, the seconds it took)."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def alternate(items: Iterable[T], rnd: int) -> list[T]:
    """The order of round ``rnd``: as given in even rounds, reversed in odd ones, so that no
    method always runs first (on a warmer cache, or a quieter machine)."""
    items = list(items)
    return items if rnd % 2 == 0 else items[::-1]


def median_ratio(num: Sequence[float], den: Sequence[float]) -> float | None:
    """Median over rounds of num[i] / den[i] (two methods' runs of one round, adjacent in time, so
    a slow drift of the machine's load cancels); rounds with den 0 are left out; None if none is left."""
    ratios = [a / b for a, b in zip(num, den, strict=True) if b]
    return statistics.median(ratios) if ratios else None


# ------------------------------------------------------------------ answers (SQuAD's official normalisation)
def normalize(s: str) -> str:
    """Lower case, no punctuation, no articles, single spaces."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1_score(pred: str, gold: str) -> float:
    """Token F1: with c the tokens in common (as a multiset), 2 P R / (P + R), P = c / |pred|, R = c / |gold|."""
    p, g = normalize(pred).split(), normalize(gold).split()
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


def contains_answer(text: str, answers: Sequence[str]) -> bool:
    """Does ``text`` contain a (non-empty) gold answer, both normalised?"""
    return any(normalize(a) and normalize(a) in normalize(text) for a in answers)


def score_answer(pred: str, answers: Sequence[str]) -> dict:
    """Exact match, F1 and containment of a predicted phrase, each the best over the gold answers."""
    return {"em": max(float(normalize(pred) == normalize(a)) for a in answers),
            "f1": max(f1_score(pred, a) for a in answers),
            "contained": float(contains_answer(pred, answers))}


def repeated_sentence(text: str) -> str | None:
    """The first sentence of ``text`` that repeats an earlier one (normalised), else None."""
    seen = set()
    for a, b in split_sentences(text):
        norm = normalise_sentence(text[a:b])
        if norm in seen:
            return text[a:b]
        seen.add(norm)
    return None


# ------------------------------------------------------------------ cached answers (bench grounding, prompts)
@dataclass(frozen=True)
class AnsweredQuestion:
    """One answer as the answer layer gave it: the text, the chunks it was given (retrieval order),
    whether the model itself declined, the seconds the answer took (its check excluded), the seconds
    the answer layer's own check took, why its generation stopped, how sure the model was of it, and
    what the answerability judge made of its prompt."""

    text: str
    hits: tuple[Hit, ...]
    refused: bool
    seconds: float
    stop_reason: str = ""  # GenerationStats.stop_reason ("repetition": the guard cut a loop); "" for Grounded
    check_s: float = 0.0  # the answer layer's alignment of this answer (what a user waits for)
    confidence: float | None = None  # GenerationStats.mean_logprob (None for Grounded and serving engines)
    judge_p: float | None = None  # the answerability judge's p(answerable) (None: no probe for the prompt)
    judged: bool = False  # the judge refused it before a word was written
    placed_tokens: int = 0  # prompt tokens whose KV came from the chunk cache (the approximate prefill)

    def to_dict(self) -> dict:
        return {"text": self.text, "hits": [h.to_dict() for h in self.hits], "refused": self.refused,
                "seconds": self.seconds, "stop_reason": self.stop_reason, "check_s": self.check_s,
                "confidence": self.confidence, "judge_p": self.judge_p, "judged": self.judged,
                "placed_tokens": self.placed_tokens}

    @classmethod
    def from_dict(cls, d: dict) -> AnsweredQuestion:
        hits = tuple(Hit(**{**{k: v for k, v in h.items() if k != "citation"}, "heading_path": tuple(h["heading_path"])})
                     for h in d["hits"])
        return cls(d["text"], hits, d["refused"], d["seconds"], d.get("stop_reason", ""), d.get("check_s", 0.0),
                   d.get("confidence"), d.get("judge_p"), d.get("judged", False), d.get("placed_tokens", 0))


class AnswerCache:
    """Answers on disk, one JSON file per key, under ``~/.cache/localrag/grounding/answers``.

    Generating answers is the slow part (a model call per question), so with ``enabled`` answers
    are stored keyed by the model, mode, instructions, question, k, token limit and the collection's
    documents, and re-used; alignment is always computed afresh. A cached answer keeps the latency
    measured when it was generated."""

    def __init__(self, root: Path | None = None, enabled: bool = True):
        self.root = root or default_cache_dir() / "grounding" / "answers"
        self.enabled = enabled

    @staticmethod
    def key(model: str, mode: str, instructions: str, question: str, k: int, max_tokens: int,
            collection_key: str, prefill: str = "exact") -> str:
        # "guard": answers written with the repetition guard; "confidence": with their mean log-probability;
        # "judge": with the answerability judge's view; an exact prefill's keys are those from before the option
        raw = json.dumps([model, mode, instructions, question, k, max_tokens, collection_key, "guard", "confidence",
                          "judge", *([prefill] if prefill != "exact" else [])])
        return hashlib.sha1(raw.encode()).hexdigest()

    def get(self, key: str) -> AnsweredQuestion | None:
        f = self.root / f"{key}.json"
        if not self.enabled or not f.is_file():
            return None
        return AnsweredQuestion.from_dict(json.loads(f.read_text(encoding="utf-8")))

    def put(self, key: str, answer: AnsweredQuestion) -> None:
        if not self.enabled:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"{key}.tmp"
        tmp.write_text(json.dumps(answer.to_dict()), encoding="utf-8")
        tmp.replace(self.root / f"{key}.json")


# ------------------------------------------------------------------ output
def fmt(x: float | None, spec: str) -> str:
    """``x`` in format ``spec``; "-" for a missing figure."""
    return "-" if x is None else format(x, spec)


def table(columns: Sequence[tuple[str, int]], rows: Iterable[Sequence[object]], sep: str = " ") -> str:
    """A fixed-width table: a header of the column titles, then one line per row. The first column
    is left-aligned to its width, the others right-aligned; width 0 leaves a (last, free-text)
    column as it is."""
    def line(cells: Sequence[object]) -> str:
        return sep.join(f"{c!s:<{w}}" if i == 0 else f"{c!s:>{w}}" if w else str(c)
                        for i, ((_, w), c) in enumerate(zip(columns, cells, strict=True)))

    return "\n".join([line([title for title, _ in columns]), *map(line, rows)])


def dumps(result: object) -> str:
    """A result as the benchmarks print and write it (numpy floats as floats)."""
    return json.dumps(result, indent=2, ensure_ascii=False, default=float)


def write_json(path: str, result: object) -> None:
    Path(path).write_text(dumps(result), encoding="utf-8")


def output(result: dict, as_json: bool, show: Callable[[dict], None]) -> int:
    """A command's result: JSON with ``--json``, else the suite's own printout; exit status 0."""
    if as_json:
        print(dumps(result))
    else:
        show(result)
    return 0
