"""Pure formatting: turns, citations, drafts and stats into chat messages and Markdown.

Messages use Gradio's "messages" format (``{"role", "content", "metadata"}``);
an assistant message with ``metadata.title`` renders as a collapsible panel, and
``parent_id`` nests panels. The answer itself is checked (its sentence-level evidence): a
supported sentence ends with its citation markers ``[1]``, an unsupported one is underlined
with dots and says "not found in your documents" on hover. So under each answer:

    📚 Sources (2)                      the chunks the answer cites, collapsed; one panel per citation
        [1] notes.md lines 3-9 · "snippet…"   opens to the chunk text, the supporting spans highlighted
    🔎 Also searched (3)                retrieved chunks that support nothing
    🧪 Drafts (5) · chosen #2           the mode's own panel (Grounded: its drafts), collapsed
    ⚡ Speedup (RASD) · 61.2 tok/s · 2.40 accepted tokens/step · 1.9× vs plain

When the documents do not support the answer: a warning under it (warn), or a refusal in its
place with the answer kept in a collapsed panel labelled "Unsupported answer" (refuse).
Everything the model or a document wrote is HTML-escaped before it is shown.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from localrag.answer import unsupported_reason
from localrag.app.history import Turn
from localrag.modes import get_mode
from localrag.results import AnswerEvidence, AnswerStats, Citation, ModeExtras

PENDING = "…"
NOT_FOUND = "not found in your documents"
UNSUPPORTED_STYLE = "text-decoration: underline dotted; text-decoration-thickness: 2px; cursor: help"
_LIST_MARKER = re.compile(r"^(?:[-*+]|\d+[.)]|#{1,6})\s+")  # a Markdown line start kept outside the marks


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


def stats_line(mode: str, stats: AnswerStats, extras: ModeExtras | None = None) -> str:
    """One line: mode, tokens/s, mean accepted tokens per step, speedup vs the plain estimate, and
    what the mode's extras add."""
    parts = [mode_label(mode)]
    gen = stats.generation
    decoder = gen.decoder if gen is not None else None
    if gen is not None:
        parts.append(f"{gen.decode_tps:.1f} tok/s")
        if decoder is not None:
            parts.append(f"{decoder.mean_accepted:.2f} accepted tokens/step")
            parts.append(f"{decoder.speedup_vs_plain:.2f}× vs plain (est.)")
        else:  # by definition (the ratio dips below 1 only by the final EOG step)
            parts += ["1 token/step", "1.00× (plain baseline)"]
    if extras is not None:
        parts += extras.stats_parts(stats)
    if gen is not None:
        parts.append(f"{gen.generated_tokens} tokens")
    if stats.waited_s >= 0.05:  # the time the asker really waited, queue included
        parts.append(f"{stats.total_s + stats.waited_s:.1f} s ({stats.waited_s:.1f} s waiting for the model)")
    else:
        parts.append(f"{stats.total_s:.1f} s")
    return "⚡ " + " · ".join(parts)


def _escape_line_start(ln: str) -> str:
    ln = re.sub(r"^(\s*)([#>*+\-=|])", r"\1\\\2", ln)
    return re.sub(r"^(\s*\d+)([.)])", r"\1\\\2", ln)


def literal_markdown(text: str) -> str:
    """Chunk text shown as written: line breaks kept, line-leading Markdown markers (# > - * 1.) escaped."""
    return "  \n".join(html.escape(_escape_line_start(ln), quote=False) for ln in text.strip().splitlines())


def highlighted_markdown(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``literal_markdown`` of a chunk with the characters inside ``spans`` (character offsets into
    ``text``) in ``<mark>``; a mark that crosses a line break is closed and reopened around it."""
    spans = [(a, b) for a, b in spans if a < b]
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        body, start = line.rstrip("\r\n"), pos
        pos += len(line)
        cuts = sorted({0, len(body)} | {min(max(x - start, 0), len(body)) for a, b in spans for x in (a, b)})
        pieces = []
        for x, y in zip(cuts, cuts[1:], strict=False):
            raw = body[x:y]
            raw = _escape_line_start(raw) if x == 0 else raw
            seg = html.escape(raw, quote=False)
            inside = any(a <= start + x and start + y <= b for a, b in spans)
            pieces.append(f"<mark>{seg}</mark>" if inside and raw.strip() else seg)
        out.append("".join(pieces))
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return "  \n".join(out)


def answer_markdown(answer: str, evidence: AnswerEvidence | None, numbering: Sequence[str] = ()) -> str:
    """The answer, HTML-escaped, with ``[n]`` after each supported sentence (n: its chunk's place in
    ``numbering``, the cited chunk ids) and each unsupported sentence underlined with dots, its
    tooltip saying it was not found in your documents (and why). Without evidence: escaped as is."""
    if evidence is None or any(answer[s.start:s.end] != s.text for s in evidence.sentences):
        return html.escape(answer, quote=False)
    number = {cid: k for k, cid in enumerate(numbering, start=1)}
    pieces, at = [], 0
    for s in evidence.sentences:
        pieces.append(html.escape(answer[at:s.start], quote=False))
        lead = _LIST_MARKER.match(s.text)
        head = lead.group() if lead else ""
        inner = html.escape(s.text[len(head):], quote=False)
        if s.supported:
            marks = "".join(f"[{number[c]}]" for c in dict.fromkeys(sp.chunk_id for sp in s.spans) if c in number)
            pieces.append(html.escape(head, quote=False) + inner + (f"<sup>{marks}</sup>" if marks else ""))
        else:
            why = "" if s.reason in ("", "not found in the sources") else f" ({s.reason})"
            title = html.escape(NOT_FOUND + why, quote=True)
            pieces.append(html.escape(head, quote=False) + f'<span class="lr-unsupported" title="{title}" '
                                                            f'style="{UNSUPPORTED_STYLE}">{inner}</span>')
        at = s.end
    pieces.append(html.escape(answer[at:], quote=False))
    return "".join(pieces)


def _spans_in(evidence: AnswerEvidence | None, chunk_id: str) -> list[tuple[int, int]]:
    """The supporting spans of one chunk (of supported sentences)."""
    if evidence is None:
        return []
    return [(sp.start, sp.end) for s in evidence.sentences if s.supported for sp in s.spans if sp.chunk_id == chunk_id]


def _chunk_panels(pid: str, citations: Sequence[Citation], evidence: AnswerEvidence | None,
                  numbered: bool = True) -> list[dict]:
    """One collapsed panel per chunk, opening to its text with its supporting spans highlighted;
    ``numbered``: titled "[n] label" (the citations the markers point to), else "label"."""
    msgs = []
    for i, c in enumerate(citations, start=1):
        snippet = " ".join(c.snippet.split())
        spans = _spans_in(evidence, c.chunk_id)
        body = highlighted_markdown(c.text, spans) if spans else literal_markdown(c.text or snippet)
        label = f"[{i}] {c.label}" if numbered else c.label
        msgs.append({"role": "assistant", "content": body, "metadata": {
            "title": f"{label} · “{snippet[:90]}”", "parent_id": pid, "id": f"{pid}-{i}", "status": "done"}})
    return msgs


def _body(turn: Turn) -> str:
    """The answer message: the checked answer (or its refusal), warnings, errors and notes."""
    numbering = [c.chunk_id for c in turn.citations]
    if turn.refusal:
        head, _, searched = turn.refusal.partition("\nWhat was searched: ")
        body = f"🚫 **{html.escape(head, quote=False)}**"
        if searched:
            body += f"  \n🔎 What was searched: {html.escape(searched, quote=False)}"
    else:
        body = answer_markdown(turn.answer, turn.evidence, numbering) if turn.answer else ""
        if turn.supported is False and turn.answer:
            body += (f"\n\n⚠️ *Your documents do not support this answer "
                     f"({html.escape(unsupported_reason(turn.evidence), quote=False)}): read it with care.*")
            if turn.searched:
                body += f"  \n🔎 What was searched: {html.escape(turn.searched, quote=False)}"
    if turn.error:
        body = (body + "\n\n" if body else "") + f"⚠️ {turn.error}"
    for note in turn.notes:
        body = (body + "\n\n" if body else "") + f"ℹ️ *{note}*"
    return body


def turn_messages(turn: Turn, n: int) -> list[dict]:
    """The chat messages for one turn; ``n`` makes panel ids unique within the chat."""
    msgs: list[dict] = [{"role": "user", "content": turn.question}]
    msgs.append({"role": "assistant", "content": _body(turn) or PENDING})
    if turn.refusal and turn.answer:
        unsupported = answer_markdown(turn.answer, turn.evidence, [c.chunk_id for c in turn.citations])
        msgs.append({"role": "assistant", "content": unsupported, "metadata": {
            "title": f"⚠️ Unsupported answer ({NOT_FOUND})", "id": f"unsupported-{n}", "status": "done"}})
    if turn.citations:
        pid = f"sources-{n}"
        msgs.append({"role": "assistant", "content": "", "metadata": {
            "title": f"📚 Sources ({len(turn.citations)})", "id": pid, "status": "done"}})
        msgs += _chunk_panels(pid, turn.citations, turn.evidence)
    if turn.also_searched:
        pid = f"searched-{n}"
        msgs.append({"role": "assistant", "content": "", "metadata": {
            "title": f"🔎 Also searched ({len(turn.also_searched)}) · not cited", "id": pid, "status": "done"}})
        msgs += _chunk_panels(pid, turn.also_searched, None, numbered=False)
    panel = turn.extras.panel() if turn.extras is not None else None
    if panel is not None:
        title, body = panel
        msgs.append({"role": "assistant", "content": body, "metadata": {
            "title": title, "id": f"{turn.extras.kind}-{n}", "status": "done"}})
    if turn.stats is not None:
        line = stats_line(turn.mode, turn.stats, turn.extras)
        msgs.append({"role": "assistant", "content": f"<small>{html.escape(line)}</small>"})
    return msgs


def chat_messages(turns: Iterable[Turn]) -> list[dict]:
    out: list[dict] = []
    for n, t in enumerate(turns):
        out += turn_messages(t, n)
    return out


def llm_history(turns: Iterable[Turn]) -> list[dict]:
    """What the model sees of earlier turns: questions and answers only (no evidence, no errors); a
    refused answer as its refusal (what the asker was shown)."""
    out: list[dict] = []
    for t in turns:
        shown = t.refusal.partition("\nWhat was searched: ")[0] if t.refusal else t.answer
        if shown and not t.error:
            out += [{"role": "user", "content": t.question}, {"role": "assistant", "content": shown}]
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
