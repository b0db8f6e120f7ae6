"""Pure formatting: turns, citations, drafts and stats into chat messages and Markdown.

Messages use Gradio's "messages" format (``{"role", "content", "metadata"}``);
an assistant message with ``metadata.title`` renders as a collapsible panel, and
``parent_id`` nests panels. So under each answer:

    📚 Sources (3)                      collapsed; opens to one panel per citation
        [1] notes.md lines 3-9 · "snippet…"   opens to the full chunk text
    🧪 Drafts (5) · chosen #2           Grounded mode only, collapsed (on demand)
    ⚡ Speedup (RASD) · 61.2 tok/s · 2.40 accepted tokens/step · 1.9× vs plain
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from localrag.modes import get_mode
from localrag.results import AnswerStats, GroundedDraft
from localrag.ui.history import Turn

PENDING = "…"


def mode_label(mode: str) -> str:
    """The UI's name of a mode id (or alias, as older chats stored it)."""
    try:
        return get_mode(mode).label
    except ValueError:
        return mode


def accepted_per_step(stats: AnswerStats | None) -> list[int]:
    """Per-step accepted token counts for the plot (the Speedup decoder's stats), else []."""
    decoder = stats.generation.decoder if stats is not None and stats.generation is not None else None
    return list(decoder.accepted_per_step) if decoder is not None else []


def stats_line(mode: str, stats: AnswerStats) -> str:
    """One line: mode, tokens/s, mean accepted tokens per step, speedup vs the plain estimate."""
    parts = [mode_label(mode)]
    gen, grounded = stats.generation, stats.grounded
    decoder = gen.decoder if gen is not None else None
    if gen is not None:
        parts.append(f"{gen.decode_tps:.1f} tok/s")
        if decoder is not None:
            parts.append(f"{decoder.mean_accepted:.2f} accepted tokens/step")
            parts.append(f"{decoder.speedup_vs_plain:.2f}× vs plain (est.)")
        else:  # by definition (the ratio dips below 1 only by the final EOG step)
            parts += ["1 token/step", "1.00× (plain baseline)"]
    if grounded is not None:
        parts.append(f"{grounded.n_drafts} drafts")
        parts += [f"retrieve {stats.retrieval.seconds:.2f} s", f"draft {grounded.draft_s:.2f} s",
                  f"verify {grounded.verify_s:.2f} s"]
    if gen is not None:
        parts.append(f"{gen.generated_tokens} tokens")
    if stats.waited_s >= 0.05:  # the time the asker really waited, queue included
        parts.append(f"{stats.total_s + stats.waited_s:.1f} s ({stats.waited_s:.1f} s waiting for the model)")
    else:
        parts.append(f"{stats.total_s:.1f} s")
    return "⚡ " + " · ".join(parts)


def _best(drafts: Sequence[GroundedDraft]) -> int:
    return max(range(len(drafts)), key=lambda i: drafts[i].score if math.isfinite(drafts[i].score) else -math.inf)


def drafts_markdown(drafts: Sequence[GroundedDraft]) -> str:
    """One block per draft (a seven-column table squeezed its headers into a chat bubble):

        **#1 ✅ Marta Ilves** · score -1.100
        draft log p -3.200 · consistency -4.100 · reflection -0.200 · from zephyr.md lines 3-4
        > *The text says Marta Ilves polished it.*
    """
    if not drafts:
        return ""
    best = _best(drafts)
    blocks = []
    for i, d in enumerate(drafts):
        mark = " ✅" if i == best else ""
        answer = html.escape(" ".join(d.answer.split())) or "(empty)"
        lines = [f"**#{i + 1}{mark} {answer}** · score {_f(d.score)}",
                 f"draft log p {_f(d.draft_logprob)} · consistency {_f(d.consistency)} · "
                 f"reflection {_f(d.reflection)}" + (f" · from {', '.join(c.label for c in d.citations)}"
                                                      if d.citations else "")]
        if d.rationale:
            lines.append(f"> *{html.escape(' '.join(d.rationale.split()))}*")
        blocks.append("  \n".join(lines[:2]) + ("\n\n" + lines[2] if len(lines) > 2 else ""))
    return "\n\n".join(blocks)


def _f(v: float) -> str:
    return f"{v:.3f}" if math.isfinite(v) else "–"


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
            snippet = " ".join(c.snippet.split())
            msgs.append({"role": "assistant", "content": literal_markdown(c.text or snippet), "metadata": {
                "title": f"[{i}] {c.label} · “{snippet[:90]}”",
                "parent_id": pid, "id": f"{pid}-{i}", "status": "done"}})
    if turn.drafts:
        best = _best(turn.drafts)
        msgs.append({"role": "assistant", "content": drafts_markdown(turn.drafts), "metadata": {
            "title": f"🧪 Drafts ({len(turn.drafts)}) · chosen #{best + 1}, "
                     f"score {_f(turn.drafts[best].score)}", "id": f"drafts-{n}", "status": "done"}})
    if turn.stats is not None:
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
