"""Pure formatting: turns, citations, drafts and stats into chat messages and Markdown.

Messages use Gradio's "messages" format (``{"role", "content", "metadata"}``);
an assistant message with ``metadata.title`` renders as a collapsible panel, and
``parent_id`` nests panels. The answer itself is checked (its sentence-level evidence): a
supported sentence ends with its citation markers ``[1]``, an unsupported one is underlined
with dots and says "not found in your documents" on hover; a marker is a link that opens its source.
A Grounded answer is shown without the rationale its text carries (that is under Drafts). So under
each answer:

    📚 Sources (2)                      the chunks the answer cites, collapsed; one panel per citation
        [1] notes.md lines 3-9 · "snippet…"   opens to a link to its source (the Source tab: a PDF's
                                            page, a heading, numbered lines) and the chunk text, the
                                            supporting spans highlighted (a PDF's lines as paragraphs)
    🔎 Also searched (3)                retrieved chunks that support nothing
    🧪 Drafts (5) · chosen #2           the mode's own panel (Grounded: its drafts), collapsed
    ⚡ Speedup (RASD) · 61.2 tok/s · 2.40 accepted tokens/step · 1.9× vs plain

When the documents do not support the answer: a warning under it (warn), or a refusal in its
place with the answer kept in a collapsed panel labelled "Unsupported answer" (refuse).
Everything the model or a document wrote is HTML-escaped before it is shown.
"""

from __future__ import annotations

import base64
import html
import itertools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from localrag.app.history import Turn
from localrag.app.uploads import document_name
from localrag.evidence import unsupported_reason
from localrag.modes import get_mode
from localrag.rag.records import clean_heading
from localrag.results import AnswerEvidence, AnswerStats, Citation, ModeExtras

PENDING = "…"
NOT_FOUND = "not found in your documents"
UNSUPPORTED_STYLE = "text-decoration: underline dotted; text-decoration-thickness: 2px; cursor: help"
_LIST_MARKER = re.compile(r"^(?:[-*+]|\d+[.)]|#{1,6})\s+")  # a Markdown line start kept outside the marks
# A PDF page's text comes with the page's hard line breaks: lines are joined into paragraphs for
# display. A line ends its paragraph when it is short (under SHORT_LINE of the chunk's longest line:
# a paragraph's last line, a heading, a list item), or the next line starts a list item; a chunk
# whose longest line is under MIN_WRAP characters (a table, a list, verse) keeps every line.
SHORT_LINE = 0.75
MIN_WRAP = 40
_ITEM_START = re.compile(r"^\s*(?:[•▪◦●■\-–—*]|\d+[.)]|\(?[a-zA-Z0-9]\))\s")
SEARCHED_CHARS = 200  # the "What was searched" line shows at most this much of a long query
HISTORY_ANSWER_CHARS = 200  # an earlier answer, as the model sees it again (see llm_history)
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
SHOWN_SETUP_S = 1.0  # a mode's set-up this long is named in the stats line (Speedup timing its models once)
PLOT_MIN_STEPS = 2  # fewer steps make no chart (one bar, its axis labelled "1.000000")
# A citation that opens in the source viewer: an element of class "lr-open" with a class
# "lr-ref-<list>-<turn>-<number>" ("s": the answer's sources, "a": also searched). The browser
# sends back only that reference; the viewer looks it up in the stored chat (localrag.ui.sources).
OPEN_CLASS = "lr-open"


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


def plotted_steps(steps: Sequence[int]) -> list[int]:
    """The steps worth a chart: none for fewer than PLOT_MIN_STEPS (a one-token answer's single bar
    made an empty-looking chart whose y axis read "1.000000")."""
    return list(steps) if len(steps) >= PLOT_MIN_STEPS else []


def stats_line(mode: str, stats: AnswerStats, extras: ModeExtras | None = None) -> str:
    """One line: mode, the prompt's reading (tokens, seconds) and the writing (tokens, tok/s over the
    writing alone) apart, mean accepted tokens per step, speedup vs the plain estimate, what the
    mode's extras add, a long set-up, and the whole time ("2.7 tok/s · 34.9 s" hid 30 s of reading)."""
    parts = [mode_label(mode)]
    gen = stats.generation
    decoder = gen.decoder if gen is not None else None
    if gen is not None:
        if gen.prompt_tokens:
            read = gen.prompt_tokens - gen.reused_prompt_tokens
            reused = f" ({gen.reused_prompt_tokens:,} more kept from before)" if gen.reused_prompt_tokens else ""
            placed = gen.placed_prompt_tokens
            if placed:  # the approximate prefill: these tokens' keys and values came from the chunk cache
                stored = f", {gen.computed_prompt_tokens:,} computed into it" if gen.computed_prompt_tokens else ""
                parts.append(f"prompt read: {read - placed:,} of {gen.prompt_tokens:,} tokens in "
                             f"{gen.prefill_seconds:.1f} s, {placed:,} from the chunk cache (approximate){stored}"
                             f"{reused}")
            else:
                parts.append(f"prompt read: {read:,} tokens in {gen.prefill_seconds:.1f} s{reused}")
        parts.append(f"writing: {gen.generated_tokens} tokens in {gen.decode_seconds:.1f} s, {gen.decode_tps:.1f} tok/s")
        if decoder is not None:
            parts.append(f"{decoder.mean_accepted:.2f} accepted tokens/step")
            parts.append(f"{decoder.speedup_vs_plain:.2f}× vs plain writing (est. from measured step times)")
            parts += decoder.stats_parts()
        else:  # by definition (the ratio dips below 1 only by the final EOG step)
            parts += ["1 token/step", "1.00× (plain baseline)"]
    if extras is not None:
        parts += extras.stats_parts(stats)
    if stats.judge is not None:
        p = stats.judge.p_answerable
        parts.append(f"judge: {stats.judge.judge}" + (f", p(answerable) {p:.2f}" if p is not None else ""))
    if stats.setup_s >= SHOWN_SETUP_S:
        parts.append(f"set-up: {stats.setup_s:.1f} s")
    if stats.waited_s >= 0.05:  # the time the asker really waited, queue included
        parts.append(f"{stats.total_s + stats.waited_s:.1f} s in all ({stats.waited_s:.1f} s waiting for the model)")
    else:
        parts.append(f"{stats.total_s:.1f} s in all")
    return "⚡ " + " · ".join(parts)


def _escape_line_start(ln: str) -> str:
    ln = re.sub(r"^(\s*)([#>*+\-=|])", r"\1\\\2", ln)
    return re.sub(r"^(\s*\d+)([.)])", r"\1\\\2", ln)


# A chunk shown as rows: a row is one displayed line, made of pieces of the chunk text (start, end,
# joiner). Every line of a chunk is a row of its own, except in a PDF chunk, where a paragraph's
# wrapped lines form one row joined by a space (nothing after a hyphen). Pieces keep the chunk's own
# character offsets, so the evidence's spans (offsets into the chunk text) mark the right characters
# whatever the display joins.
Row = list[tuple[int, int, str]]


def chunk_rows(text: str, pdf: bool = False) -> list[Row]:
    """``text`` as display rows (see ``Row``): its lines, or for a PDF chunk its paragraphs."""
    lines, at = [], 0
    for line in text.split("\n"):
        lines.append((at, at + len(line.rstrip("\r"))))
        at += len(line) + 1
    if not pdf:
        return [[(a, b, "")] for a, b in lines]
    width = max((len(text[a:b].strip()) for a, b in lines), default=0)
    rows: list[Row] = []
    row: Row = []
    for a, b in lines:
        body = text[a:b]
        if not body.strip():  # a blank line: a paragraph break, shown as an empty row
            if row:
                rows.append(row)
            rows.append([(a, a, "")])
            row = []
            continue
        if row and (width < MIN_WRAP or _ITEM_START.match(body)):
            rows.append(row)
            row = []
        if row:
            prev = text[row[-1][0]:row[-1][1]].rstrip()
            hyphen = len(prev) >= 2 and prev.endswith("-") and prev[-2].isalpha() and body.lstrip()[:1].islower()
            row.append((a, b, "" if hyphen else " "))
        else:
            row.append((a, b, ""))
        if len(body.strip()) < SHORT_LINE * width:  # a short line ends its paragraph
            rows.append(row)
            row = []
    if row:
        rows.append(row)
    return rows


def _cuts(a: int, b: int, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int, bool]]:
    """[a, b) cut at the spans' ends: (start, end, inside a span) pieces, in order."""
    points = sorted({a, b} | {min(max(x, a), b) for s in spans for x in s})
    return [(x, y, any(s <= x and y <= e for s, e in spans)) for x, y in zip(points, points[1:], strict=False)]


def marked_rows(text: str, spans: Iterable[tuple[int, int]], pdf: bool = False) -> list[list[tuple[str, bool]]]:
    """The display rows of a chunk as (text, marked) segments; a joiner is marked when the line break
    it replaces lies inside a span (so a highlight runs on across a joined line)."""
    spans = [(a, b) for a, b in spans if a < b]
    out = []
    for row in chunk_rows(text, pdf):
        segs: list[tuple[str, bool]] = []
        for a, b, joiner in row:
            if joiner:
                segs.append((joiner, any(s <= a - 1 < e for s, e in spans)))
            segs += [(text[x:y], inside) for x, y, inside in _cuts(a, b, spans)]
        out.append(segs)
    while out and not "".join(t for t, _ in out[0]).strip():
        out.pop(0)
    while out and not "".join(t for t, _ in out[-1]).strip():
        out.pop()
    return out


def _marked_html(pieces: Iterable[tuple[str, bool]]) -> str:
    """Escaped pieces, each run of marked ones in one ``<mark>`` (a mark of blanks alone is dropped)."""
    out = []
    for inside, run in itertools.groupby(pieces, key=lambda p: p[1]):
        body = "".join(t for t, _ in run)
        out.append(f"<mark>{body}</mark>" if inside and body.strip() else body)
    return "".join(out)


def _markdown_row(segs: list[tuple[str, bool]]) -> str:
    return _marked_html((html.escape(_escape_line_start(raw) if k == 0 else raw, quote=False), inside)
                        for k, (raw, inside) in enumerate(segs))


def literal_markdown(text: str, pdf: bool = False) -> str:
    """Chunk text shown as written: line breaks kept (a PDF's wrapped lines joined into paragraphs),
    line-leading Markdown markers (# > - * 1.) escaped."""
    return highlighted_markdown(text, (), pdf)


def highlighted_markdown(text: str, spans: Iterable[tuple[int, int]], pdf: bool = False) -> str:
    """``literal_markdown`` of a chunk with the characters inside ``spans`` (character offsets into
    ``text``) in ``<mark>``; a mark that crosses a line break is closed and reopened around it."""
    return "  \n".join(_markdown_row(segs) for segs in marked_rows(text, spans, pdf))


def highlighted_html(text: str, spans: Iterable[tuple[int, int]], pdf: bool = False) -> str:
    """The same as HTML (the source viewer): rows as lines, ``<mark>`` around the spans."""
    rows = [_marked_html((html.escape(t), m) for t, m in segs) for segs in marked_rows(text, spans, pdf)]
    return '<div class="lr-chunk">' + "<br>\n".join(rows) + "</div>"


def numbered_code(text: str, spans: Iterable[tuple[int, int]], line_start: int,
                  file_lines: Sequence[str]) -> list[tuple[int, list[tuple[str, bool]]]] | None:
    """A code chunk as its file's lines ``line_start...`` (``file_lines``, read from the indexed file),
    numbered, with the spans' characters marked: each line of the chunk is found, in order, in the
    file's lines (whole, or as a piece of a line that was split or carried over as overlap); blank
    lines, which the parser skips, come back from the file. None when a chunk line is not in the file
    (it changed since it was indexed)."""
    spans = [(a, b) for a, b in spans if a < b]
    marks: dict[int, list[tuple[int, int]]] = {}
    found: dict[int, bool] = {}
    j, col = 0, 0
    at = 0
    for line in text.split("\n"):
        a, b = at, at + len(line)
        at = b + 1
        if not line.strip():
            continue
        while j < len(file_lines) and file_lines[j].find(line, col) < 0:
            j, col = j + 1, 0
        if j == len(file_lines):
            return None
        c = file_lines[j].find(line, col)
        found[j] = True
        for s, e in spans:
            lo, hi = max(s, a), min(e, b)
            if lo < hi:
                marks.setdefault(j, []).append((c + lo - a, c + hi - a))
        col = c + len(line)
    last = max(found, default=-1)
    rows = []
    for k in range(last + 1):
        body = file_lines[k]
        rows.append((line_start + k, [(body[x:y], m) for x, y, m in _cuts(0, len(body), marks.get(k, []))] or [("", False)]))
    return rows


def code_html(rows: Sequence[tuple[int | None, list[tuple[str, bool]]]]) -> str:
    """Numbered code lines as one ``<pre>`` (the source viewer)."""
    lines = []
    for number, segs in rows:
        body = _marked_html((html.escape(t), m) for t, m in segs)
        lines.append(f'<span class="lr-ln">{"" if number is None else number}</span>{body}')
    return '<pre class="lr-code">' + "\n".join(lines) + "</pre>"


def page_html(png: bytes, alt: str, width_pt: float, height_pt: float,
              focus: tuple[float, float] | None = None) -> str:
    """A rendered PDF page inline, as a data: URI (no route serves the file or the image), in a
    scrolling view with zoom buttons (the page's script, ``layout.HEAD``, sizes it: at first to
    its actual size, where body text reads as in a PDF viewer at 100 %, and scrolls it to
    ``focus``, the highlighted passage's top-left corner as fractions of the page's width and height)."""
    data = base64.b64encode(png).decode("ascii")
    at = f' data-focus-x="{focus[0]:.4f}" data-focus-y="{focus[1]:.4f}"' if focus is not None else ""
    buttons = "".join(f'<button type="button" class="lr-zoom-btn" data-zoom="{z}" title="{t}">{label}</button>'
                      for z, label, t in (("out", "−", "Zoom out"), ("in", "+", "Zoom in"),
                                          ("fit", "Fit width", "The whole width of the page in the panel"),
                                          ("actual", "100 %", "Actual size")))
    return (f'<div class="lr-pdf"><div class="lr-zoom" role="toolbar" aria-label="Zoom">{buttons}'
            '<span class="lr-zoom-level" id="lr-zoom-level"></span></div>'
            f'<div class="lr-page-view" id="lr-page-view" data-width-pt="{width_pt:.1f}" '
            f'data-height-pt="{height_pt:.1f}"{at}>'
            f'<img class="lr-page" id="lr-page-image" alt="{html.escape(alt, quote=True)}" '
            f'src="data:image/png;base64,{data}"></div></div>')


def open_ref(kind: str, turn: int, number: int) -> str:
    """The class naming a citation to open (see OPEN_CLASS)."""
    return f"lr-ref-{kind}-{turn}-{number}"


def _open_link(kind: str, turn: int, number: int, text: str, title: str = "open the source") -> str:
    return (f'<a href="#" class="{OPEN_CLASS} {open_ref(kind, turn, number)}" '
            f'title="{html.escape(title, quote=True)}">{html.escape(text, quote=False)}</a>')


def shown_label(label: str) -> str:
    """A citation's label as shown: a heading's permalink mark dropped (chunks indexed before the
    parser dropped it kept "§ 3.6. Module Path¶")."""
    name, sep, heading = label.partition(" § ")
    return f"{name}{sep}{clean_heading(heading)}" if sep else label


def open_text(c: Citation) -> str:
    """What opening a citation shows, in words (its link)."""
    if c.page is not None:
        return f"📄 Open page {c.page}"
    if "§" in c.label:
        return "📑 Open at its heading"
    return "📄 Open " + (c.label.split(" ", 1)[1] if " " in c.label else "the source")


def short_query(searched: str, limit: int = SEARCHED_CHARS) -> str:
    """What was searched, shortened for display: a long query keeps its start and its end around
    "…" (a 10,000-character question was repeated in full)."""
    if len(searched) <= limit:
        return searched
    head, tail = searched[: limit * 2 // 3].rstrip(), searched[-(limit // 3):].lstrip()
    return f"{head} … [{len(searched) - len(head) - len(tail):,} characters] … {tail}"


def shown_answer(turn: Turn) -> tuple[str, AnswerEvidence | None]:
    """The answer as the page shows it, with its evidence: what its mode shows as the answer
    (``ModeExtras.shown``; Grounded keeps the rationale in its drafts panel)."""
    if turn.extras is None:
        return turn.answer, turn.evidence
    return turn.extras.shown(turn.answer, turn.evidence)


def answer_markdown(answer: str, evidence: AnswerEvidence | None, numbering: Sequence[str] = (),
                    turn: int | None = None) -> str:
    """The answer, HTML-escaped, with ``[n]`` after each supported sentence (n: its chunk's place in
    ``numbering``, the cited chunk ids; a link that opens the source when ``turn`` is given) and each
    unsupported sentence underlined with dots, its tooltip saying it was not found in your documents
    (and why). Without evidence: escaped as is."""
    if evidence is None or any(answer[s.start:s.end] != s.text for s in evidence.sentences):
        return html.escape(answer, quote=False)
    number = {cid: k for k, cid in enumerate(numbering, start=1)}

    def marker(k: int) -> str:
        return f"[{k}]" if turn is None else _open_link("s", turn, k, f"[{k}]")

    pieces, at = [], 0
    for s in evidence.sentences:
        pieces.append(html.escape(answer[at:s.start], quote=False))
        lead = _LIST_MARKER.match(s.text)
        head = lead.group() if lead else ""
        inner = html.escape(s.text[len(head):], quote=False)
        if s.supported:
            marks = "".join(marker(number[c]) for c in dict.fromkeys(sp.chunk_id for sp in s.spans) if c in number)
            pieces.append(html.escape(head, quote=False) + inner + (f"<sup>{marks}</sup>" if marks else ""))
        else:
            why = "" if s.reason in ("", "not found in the sources") else f" ({s.reason})"
            title = html.escape(NOT_FOUND + why, quote=True)
            pieces.append(html.escape(head, quote=False) + f'<span class="lr-unsupported" title="{title}" '
                                                            f'style="{UNSUPPORTED_STYLE}">{inner}</span>')
        at = s.end
    pieces.append(html.escape(answer[at:], quote=False))
    return "".join(pieces)


def spans_in(evidence: AnswerEvidence | None, chunk_id: str) -> list[tuple[int, int]]:
    """The supporting spans of one chunk (of supported sentences)."""
    if evidence is None:
        return []
    return [(sp.start, sp.end) for s in evidence.sentences if s.supported for sp in s.spans if sp.chunk_id == chunk_id]


def _chunk_panels(pid: str, citations: Sequence[Citation], evidence: AnswerEvidence | None, turn: int,
                  numbered: bool = True) -> list[dict]:
    """One collapsed panel per chunk, opening to a link to its source (its page, its heading, its
    lines) and its text with its supporting spans highlighted; ``numbered``: titled "[n] label" (the
    citations the markers point to), else "label"."""
    msgs = []
    for i, c in enumerate(citations, start=1):
        snippet = " ".join(c.snippet.split())
        spans = spans_in(evidence, c.chunk_id)
        pdf = c.page is not None
        body = highlighted_markdown(c.text, spans, pdf) if spans else literal_markdown(c.text or snippet, pdf)
        shown = shown_label(c.label)
        link = _open_link("s" if numbered else "a", turn, i, open_text(c), f"open {shown}")
        label = f"[{i}] {shown}" if numbered else shown
        msgs.append({"role": "assistant", "content": f"{link}\n\n{body}", "metadata": {
            "title": f"{label} · “{snippet[:90]}”", "parent_id": pid, "id": f"{pid}-{i}", "status": "done"}})
    return msgs


def _searched_line(searched: str) -> str:
    return f"  \n🔎 What was searched: {html.escape(short_query(searched), quote=False)}"


def _body(turn: Turn, n: int) -> str:
    """The answer message: the checked answer (or its refusal), warnings, errors and notes."""
    numbering = [c.chunk_id for c in turn.citations]
    answer, evidence = shown_answer(turn)
    if turn.refusal:
        head, _, searched = turn.refusal.partition("\nWhat was searched: ")
        body = f"🚫 **{html.escape(head, quote=False)}**"
        if searched:
            body += _searched_line(searched)
    else:
        body = answer_markdown(answer, evidence, numbering, n) if answer else ""
        if turn.supported is False and answer:
            body += (f"\n\n⚠️ *Your documents do not support this answer "
                     f"({html.escape(unsupported_reason(turn.evidence), quote=False)}): read it with care.*")
            if turn.searched:
                body += _searched_line(turn.searched)
    if turn.error:
        body = (body + "\n\n" if body else "") + f"⚠️ {turn.error}"
    for note in turn.notes:
        body = (body + "\n\n" if body else "") + f"ℹ️ *{note}*"
    return body


def turn_messages(turn: Turn, n: int) -> list[dict]:
    """The chat messages for one turn; ``n``, the turn's place in its chat, makes panel ids unique
    within the chat and names the turn in its citations' links."""
    msgs: list[dict] = [{"role": "user", "content": turn.question}]
    msgs.append({"role": "assistant", "content": _body(turn, n) or PENDING})
    if turn.refusal and turn.answer:
        answer, evidence = shown_answer(turn)
        unsupported = answer_markdown(answer, evidence, [c.chunk_id for c in turn.citations], n)
        msgs.append({"role": "assistant", "content": unsupported, "metadata": {
            "title": f"⚠️ Unsupported answer ({NOT_FOUND})", "id": f"unsupported-{n}", "status": "done"}})
    if turn.citations:
        pid = f"sources-{n}"
        msgs.append({"role": "assistant", "content": "", "metadata": {
            "title": f"📚 Sources ({len(turn.citations)})", "id": pid, "status": "done"}})
        msgs += _chunk_panels(pid, turn.citations, turn.evidence, n)
    if turn.also_searched:
        pid = f"searched-{n}"
        msgs.append({"role": "assistant", "content": "", "metadata": {
            "title": f"🔎 Also searched ({len(turn.also_searched)}) · not cited", "id": pid, "status": "done"}})
        msgs += _chunk_panels(pid, turn.also_searched, None, n, numbered=False)
    panel = turn.extras.panel() if turn.extras is not None else None
    if panel is not None:
        title, body = panel
        msgs.append({"role": "assistant", "content": body, "metadata": {
            "title": title, "id": f"{turn.extras.kind}-{n}", "status": "done"}})
    if turn.stats is not None:
        line = stats_line(turn.mode, turn.stats, turn.extras)
        msgs.append({"role": "assistant", "content": f"<small>{html.escape(line)}</small>"})
    return msgs


def chat_messages(turns: Iterable[Turn], first: int = 0) -> list[dict]:
    """The chat's messages; ``first``: the place in the chat of the first of ``turns``."""
    out: list[dict] = []
    for n, t in enumerate(turns, start=first):
        out += turn_messages(t, n)
    return out


def llm_history(turns: Iterable[Turn]) -> list[dict]:
    """What the model sees of earlier turns: each question, and its answer shortened to its first
    sentence (no evidence, no errors); a refused answer as its refusal (what the asker was shown).

    Why shortened: with an earlier answer in full, a small model answers a follow-up by repeating
    it. Measured on "What is the exit status of ls?" then "And what if there are only minor
    problems?" (``ls --help`` indexed, greedy, two phrasings of the first question): SmolLM2-135M
    copied 164 of its 258 characters from the first answer with it in full and answered neither
    follow-up; with the first sentence it copied nothing and answered one of two ("1"); the
    default Qwen2.5-Coder-1.5B answered "1" both ways. Without the answers at all, both models
    answered the first question again. The first sentence keeps what "it" or "that" refers to."""
    out: list[dict] = []
    for t in turns:
        shown = t.refusal.partition("\nWhat was searched: ")[0] if t.refusal else first_sentence(t)
        if shown and not t.error:
            out += [{"role": "user", "content": t.question}, {"role": "assistant", "content": shown}]
    return out


def first_sentence(turn: Turn, limit: int = HISTORY_ANSWER_CHARS) -> str:
    """The first sentence of a turn's shown answer (by its evidence's sentences when checked), at most
    ``limit`` characters (cut between words, "…" after)."""
    answer, evidence = shown_answer(turn)
    if evidence is not None and evidence.sentences and answer[evidence.sentences[0].start:evidence.sentences[0].end] \
            == evidence.sentences[0].text:
        first = evidence.sentences[0].text.strip()
    else:
        m = _SENTENCE_END.search(answer.strip())
        first = answer.strip()[: m.end()].strip() if m else answer.strip()
    if len(first) <= limit:
        return first
    return first[:limit].rsplit(None, 1)[0] + " …"


def display_path(path: str, uploads_dir: Path) -> str:
    """Uploaded files by their name within the collection; other paths in full."""
    return document_name(path, uploads_dir)
