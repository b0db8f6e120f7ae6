"""Pure formatting: turns, citations, drafts and stats into chat messages and Markdown.

Messages use Gradio's "messages" format (``{"role", "content", "metadata"}``);
an assistant message with ``metadata.title`` renders as a collapsible panel, and
``parent_id`` nests panels. So under each answer:

    📚 Sources (3)                      collapsed; opens to one panel per citation
        [1] notes.md lines 3-9 · "snippet…"   opens to the full chunk text
    🧪 Drafts (5) · best 2/5            Grounded mode only, collapsed (on demand)
    ⚡ Speedup (RASD) · 61.2 tok/s · 2.40 accepted tokens/step · 1.9× vs plain
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from localrag.history import Turn
from localrag.ui.services import MODE_LABELS

PENDING = "…"


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def citation_dict(c: Any) -> dict:
    """A Citation (or Hit-like object, or dict) as a plain JSON-ready dict."""
    d = {k: _get(c, k) for k in ("file", "page", "line_start", "line_end", "snippet", "text", "chunk_id", "label")}
    if not d["label"]:
        d["label"] = citation_label(d)
    if not d["snippet"]:
        flat = " ".join(str(d["text"] or "").split())
        d["snippet"] = flat if len(flat) <= 160 else flat[:159] + "…"
    return d


def citation_label(c: dict) -> str:
    name = Path(str(c.get("file") or "?")).name
    if c.get("page") is not None:
        return f"{name} p.{c['page']}"
    if c.get("line_start") is not None:
        a, b = c["line_start"], c.get("line_end")
        return f"{name} line {a}" if b in (None, a) else f"{name} lines {a}-{b}"
    return name


def draft_dict(d: Any) -> dict:
    out = {k: _get(d, k) for k in ("answer", "rationale", "draft_logprob", "consistency", "reflection", "score")}
    out["citations"] = [citation_dict(c) for c in (_get(d, "citations") or [])]
    return out


def _num(stats: dict, *keys: str) -> float | None:
    """First numeric value found under any of ``keys`` in stats or its nested dicts."""
    for scope in (stats, stats.get("generation") or {}, (stats.get("generation") or {}).get("extra") or {},
                  stats.get("rasd") or {}, stats.get("timing") or {}):
        for k in keys:
            v = scope.get(k) if isinstance(scope, dict) else None
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                return float(v)
    return None


def accepted_per_step(stats: dict) -> list[int]:
    """Per-step accepted token counts for the plot (the RASD decoder's stats), else []."""
    steps = ((stats.get("generation") or {}).get("extra") or {}).get("accepted_per_step")
    return [int(x) for x in steps] if isinstance(steps, list) else []


def stats_line(mode: str, stats: dict) -> str:
    """One line: mode, tokens/s, mean accepted tokens per step, speedup vs the plain estimate."""
    parts = [MODE_LABELS.get(mode, mode)]
    tps = _num(stats, "decode_tps")
    if tps is not None:
        parts.append(f"{tps:.1f} tok/s")
    per_step = _num(stats, "mean_accepted", "tokens_per_step")
    if mode == "plain" and per_step is not None:
        parts.append("1 token/step")  # by definition (the ratio dips below 1 only by the final EOG step)
    elif per_step is not None:
        parts.append(f"{per_step:.2f} accepted tokens/step")
    speedup = _num(stats, "speedup_vs_plain")
    if speedup is not None:
        parts.append(f"{speedup:.2f}× vs plain (est.)")
    elif mode == "plain" and tps is not None:
        parts.append("1.00× (plain baseline)")
    n_drafts = _num(stats, "n_drafts")
    if n_drafts is not None:
        parts.append(f"{int(n_drafts)} drafts")
    for key, label in (("retrieve_s", "retrieve"), ("draft_s", "draft"), ("verify_s", "verify")):
        v = _num(stats, key)
        if v is not None and mode == "specrag":
            parts.append(f"{label} {v:.2f} s")
    toks = _num(stats, "generated_tokens", "n_tokens")
    if toks is not None:
        parts.append(f"{int(toks)} tokens")
    total = _num(stats, "total_s", "seconds")
    if total is not None:
        parts.append(f"{total:.1f} s")
    return "⚡ " + " · ".join(parts)


def drafts_markdown(drafts: Sequence[dict]) -> str:
    if not drafts:
        return ""
    best = max(range(len(drafts)), key=lambda i: drafts[i].get("score") or -math.inf)
    rows = ["| # | score | draft log p | consistency | reflection | answer | sources |",
            "|---|---|---|---|---|---|---|"]
    for i, d in enumerate(drafts):
        mark = " ✅" if i == best else ""
        srcs = ", ".join(c["label"] for c in d.get("citations", []))
        answer = " ".join(str(d.get("answer") or "").split()).replace("|", "\\|")
        rows.append(f"| {i + 1}{mark} | {_f(d.get('score'))} | {_f(d.get('draft_logprob'))} | "
                    f"{_f(d.get('consistency'))} | {_f(d.get('reflection'))} | {answer} | {srcs} |")
    rationales = "\n".join(f"{i + 1}. *{html.escape(' '.join(str(d.get('rationale') or '').split()))}*"
                           for i, d in enumerate(drafts) if d.get("rationale"))
    return "\n".join(rows) + ("\n\n**Rationales**\n\n" + rationales if rationales else "")


def _f(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, int | float) else "–"


def literal_markdown(text: str) -> str:
    """Chunk text shown as written: line breaks kept, line-leading Markdown markers (# > - * 1.) escaped."""
    out = []
    for ln in text.strip().splitlines():
        ln = re.sub(r"^(\s*)([#>*+\-=|])", r"\1\\\2", ln)
        ln = re.sub(r"^(\s*\d+)([.)])", r"\1\\\2", ln)
        out.append(html.escape(ln, quote=False))
    return "  \n".join(out)


def turn_messages(turn: Turn, n: int) -> list[dict]:
    """The chat messages for one turn; ``n`` makes panel ids unique within the chat."""
    msgs: list[dict] = [{"role": "user", "content": turn.question}]
    body = turn.answer
    if turn.error:
        body = (body + "\n\n" if body else "") + f"⚠️ {turn.error}"
    for note in turn.notes:
        body = (body + "\n\n" if body else "") + f"ℹ️ *{note}*"
    msgs.append({"role": "assistant", "content": body or PENDING})
    if turn.citations:
        pid = f"sources-{n}"
        msgs.append({"role": "assistant", "content": "", "metadata": {
            "title": f"📚 Sources ({len(turn.citations)})", "id": pid, "status": "done"}})
        for i, c in enumerate(turn.citations, start=1):
            snippet = " ".join(str(c.get("snippet") or "").split())
            msgs.append({"role": "assistant", "content": literal_markdown(str(c.get("text") or snippet)), "metadata": {
                "title": f"[{i}] {c.get('label') or citation_label(c)} · “{snippet[:90]}”",
                "parent_id": pid, "id": f"{pid}-{i}", "status": "done"}})
    if turn.drafts:
        best = max(range(len(turn.drafts)), key=lambda i: turn.drafts[i].get("score") or -math.inf)
        msgs.append({"role": "assistant", "content": drafts_markdown(turn.drafts), "metadata": {
            "title": f"🧪 Drafts ({len(turn.drafts)}) · chosen #{best + 1}, "
                     f"score {_f(turn.drafts[best].get('score'))}", "id": f"drafts-{n}", "status": "done"}})
    if turn.stats:
        msgs.append({"role": "assistant", "content": f"<small>{html.escape(stats_line(turn.mode, turn.stats))}</small>"})
    return msgs


def chat_messages(turns: Iterable[Turn]) -> list[dict]:
    out: list[dict] = []
    for n, t in enumerate(turns):
        out += turn_messages(t, n)
    return out


def llm_history(turns: Iterable[Turn]) -> list[dict]:
    """What the model sees of earlier turns: questions and answers only (no evidence, no errors)."""
    out: list[dict] = []
    for t in turns:
        if t.answer and not t.error:
            out += [{"role": "user", "content": t.question}, {"role": "assistant", "content": t.answer}]
    return out


def display_path(path: str, uploads_dir: Path) -> str:
    """Uploaded files by their name within the collection; other paths in full."""
    p = Path(path)
    try:
        rel = p.relative_to(uploads_dir.resolve())
        return str(Path(*rel.parts[1:])) if len(rel.parts) > 1 else str(rel)
    except ValueError:
        try:
            rel = p.relative_to(uploads_dir)
            return str(Path(*rel.parts[1:])) if len(rel.parts) > 1 else str(rel)
        except ValueError:
            return str(p)
