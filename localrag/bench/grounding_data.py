"""Data and answering for ``bench grounding``: questions with their gold evidence, a split kept
apart for calibration, and cached answers.

Records come from the same sources as ``bench qa`` (SQuAD v2.0 dev, HotpotQA dev distractor, or a
``--data`` JSONL file) plus where the gold evidence sits:

* SQuAD: the question's paragraph (answerable questions only);
* HotpotQA: its supporting-fact sentences;
* JSONL: the document ``docs[gold_doc]`` when a line has ``"gold_doc"``.

**Split.** Every record belongs to one half, ``calibration`` or ``report``, by a hash of its
documents (so SQuAD questions on one paragraph stay together): the evidence constants are fitted on
the calibration half only, and the benchmark reports on the other half by default.

**Answer cache.** Generating answers is the slow part (a model call per question), so with
``cache=True`` answers are stored under ``~/.cache/localrag/grounding/`` keyed by the model, mode,
instructions, question, k, token limit and the collection's documents, and re-used; alignment is
always computed afresh. A cached answer keeps the latency measured when it was generated.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from localrag.answer import Answerer
from localrag.bench.qa import MEMBERS, QARecord, jsonl_records, sample, squad_records, wheel_json
from localrag.config import GenerationConfig, default_cache_dir
from localrag.grounded.scoring import is_refusal, short_answer
from localrag.modes import AnswerRequest, get_mode
from localrag.rag.records import Hit

SPLITS = ("report", "calibration", "all")


@dataclass(frozen=True)
class GoldEvidence:
    """Where the answer's evidence is: document ``doc`` of the record (an index into its docs),
    and the evidence text inside it (the whole document, or one sentence of it)."""

    doc: int
    text: str


@dataclass(frozen=True)
class GroundingRecord:
    qa: QARecord
    gold: tuple[GoldEvidence, ...] = ()  # empty: unknown (or unanswerable)


# ------------------------------------------------------------------ records
def squad_grounding() -> list[GroundingRecord]:
    return [GroundingRecord(r, (GoldEvidence(0, r.docs[0]),) if r.answers else ()) for r in squad_records()]


def hotpot_grounding() -> list[GroundingRecord]:
    out = []
    for r in wheel_json(MEMBERS["hotpotqa"]):
        titles = [title for title, _ in r["context"]]
        sentences = dict(r["context"])
        docs = tuple(f"{title}. {''.join(sents).strip()}" for title, sents in r["context"])
        gold = tuple(GoldEvidence(titles.index(title), sentences[title][i].strip())
                     for title, i in r["supporting_facts"] if title in sentences and i < len(sentences[title]))
        out.append(GroundingRecord(QARecord(r["question"], docs, (r["answer"],)), gold))
    return out


def jsonl_grounding(path: str) -> list[GroundingRecord]:
    with open(path, encoding="utf-8") as fh:
        golds = [json.loads(line).get("gold_doc") for line in fh if line.strip()]
    return [GroundingRecord(rec, (GoldEvidence(g, rec.docs[g]),) if g is not None and rec.answers else ())
            for rec, g in zip(jsonl_records(path), golds, strict=True)]


def split_of(rec: GroundingRecord) -> str:
    """'calibration' or 'report', by a hash of the record's documents (stable across runs)."""
    digest = hashlib.sha1("\n\0".join(rec.qa.docs).encode()).digest()
    return "calibration" if digest[0] % 2 else "report"


def load_records(suite: str | None, data: str | None, split: str, n: int | None, seed: int) -> list[GroundingRecord]:
    """A seeded sample of ``n`` records of one split (``all``: both halves)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    records = jsonl_grounding(data) if data else squad_grounding() if suite == "squad" else hotpot_grounding()
    if split != "all":
        records = [r for r in records if split_of(r) == split]
    return sample(records, n, seed)


# ------------------------------------------------------------------ answering
@dataclass
class AnsweredQuestion:
    """One answer as the answer layer gave it: the text, the chunks it was given (retrieval order),
    whether the model itself declined, the seconds the answer took (its check excluded), the seconds
    the answer layer's own check took, and why its generation stopped."""

    text: str
    hits: list[Hit]
    refused: bool
    seconds: float
    stop_reason: str = ""  # GenerationStats.stop_reason ("repetition": the guard cut a loop); "" for Grounded
    check_s: float = 0.0  # the answer layer's alignment of this answer (what a user waits for)

    def to_dict(self) -> dict:
        return {"text": self.text, "hits": [h.to_dict() for h in self.hits], "refused": self.refused,
                "seconds": self.seconds, "stop_reason": self.stop_reason, "check_s": self.check_s}

    @classmethod
    def from_dict(cls, d: dict) -> AnsweredQuestion:
        hits = [Hit(**{**{k: v for k, v in h.items() if k != "citation"}, "heading_path": tuple(h["heading_path"])})
                for h in d["hits"]]
        return cls(d["text"], hits, d["refused"], d["seconds"], d.get("stop_reason", ""), d.get("check_s", 0.0))


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
    hits = [h for h in answerer.search(question, result.stats.search.k).hits if h.chunk_id in checked]
    # a mode that refuses what the documents do not support (Grounded) refused every unsupported answer
    refused = is_refusal(short_answer(result.text)) or (answering.policy(request) == "refuse" and not result.supported)
    stop_reason = result.stats.generation.stop_reason if result.stats.generation is not None else ""
    return AnsweredQuestion(result.text.strip(), hits, refused, seconds, stop_reason, check_s)


class AnswerCache:
    """Answers on disk, one JSON file per key (see the module docstring)."""

    def __init__(self, root: Path | None = None, enabled: bool = True):
        self.root = root or default_cache_dir() / "grounding" / "answers"
        self.enabled = enabled

    @staticmethod
    def key(model: str, mode: str, instructions: str, question: str, k: int, max_tokens: int,
            collection_key: str) -> str:
        # "guard": answers written with the repetition guard (older cached answers were not)
        raw = json.dumps([model, mode, instructions, question, k, max_tokens, collection_key, "guard"])
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
