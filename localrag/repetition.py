"""The repetition guard: an answer stops at its first looping repeat, and says so.

Small models loop: one sentence again and again until the token limit. ``Generation`` feeds the
guard every emitted token, one at a time and whatever decoder produced it, so Plain and Speedup
(which emit the same tokens) get the same verdict at the same token and still write the same
text. The guard fires on either of two patterns, defined on the emitted tokens and text:

    repeated sentence  a sentence of at least ``min_words`` words whose normalised text (case,
                       spacing and a leading list marker ignored) equals an earlier sentence of the
                       same answer. A sentence ends at ``.``, ``!`` or ``?`` (closing quotes or
                       brackets allowed) before whitespace, or at a line break; text inside a
                       Markdown code fence is code, not sentences (a repeated line of code is normal).
    repeated span      the last r tokens each equal the token p before them (the tail is periodic
                       with period p <= ``max_period``), with r >= max(p, ``min_span``): a span of
                       p tokens written again back to back, and at least ``min_span`` tokens of
                       repetition in all ("-Sorbonne-Sorbonne-Sorbonne...", a loop without
                       sentence punctuation).

The answer ends where the repeat begins: the first copy is kept. Text that may be the start of a
repeat (a sentence that so far matches the start of an earlier one, a token run matching the
tokens p before it) is held back until the repeat is confirmed or broken, the way a possible stop
string is held back, so streamed text never contains the repeat that was cut.

    guard = RepetitionGuard(RepetitionConfig())
    for token, decoded_text in stream:
        guard.push(token, decoded_text)
        if guard.cut is not None: ...          # the answer ends at decoded_text[:guard.cut]
        safe = decoded_text[:guard.hold]       # what may be shown so far
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Sequence

from localrag.config import RepetitionConfig

_CLOSERS = "\"')]}»”’"
_LIST_MARKER = re.compile(r"^(?:[-*•+]|\d{1,3}[.)])\s+")
_WORD = re.compile(r"\w+")
FENCE = "```"


def normalise_sentence(text: str) -> str:
    """Lower case, single spaces, no leading list marker ("- ", "2. ")."""
    return _LIST_MARKER.sub("", " ".join(text.split()).lower())


class RepetitionGuard:
    """Watches one answer's tokens and text; ``cut`` is set (a character offset) once it loops."""

    def __init__(self, config: RepetitionConfig):
        self.config = config
        self.tokens: list[int] = []
        self._starts: list[int] = []  # character offset at which each token's text begins
        self._runs = [0] * (config.max_period + 1)  # _runs[p]: trailing tokens equal to the token p before
        self._seen: set[str] = set()  # normalised sentences so far (those of at least min_words words)
        self._sentence_start = 0  # where the sentence being written begins
        self._scanned = 0  # characters already scanned for sentence ends
        self._text = ""
        self.cut: int | None = None  # where the answer ends (the repeat's first character), once fired
        self.pattern = ""  # "sentence" | "span", once fired

    @property
    def fired(self) -> bool:
        return self.cut is not None

    @property
    def text(self) -> str:
        """The text seen so far (the repeat included, once fired)."""
        return self._text

    @property
    def hold(self) -> int:
        """Text before this character offset can be shown: nothing after it is a repeat yet."""
        if self.cut is not None:
            return self.cut
        hold = len(self._text)
        n = len(self.tokens)
        longest = max(self._runs)
        if longest:
            hold = min(hold, self._starts[n - longest])
        if self._may_repeat_sentence():
            hold = min(hold, self._sentence_start)
        return hold

    def push(self, token: int, text: str) -> None:
        """One more emitted token; ``text`` is the whole answer decoded so far (this token included)."""
        if self.cut is not None:
            return
        self._starts.append(len(self._text))
        self._text = text
        self.tokens.append(token)
        self._push_span(token)
        if self.cut is None:
            self._scan_sentences()

    # ------------------------------------------------------------ repeated span
    def _push_span(self, token: int) -> None:
        cfg, n = self.config, len(self.tokens)
        fire_at = None
        for p in range(1, cfg.max_period + 1):
            if n > p and self.tokens[n - 1 - p] == token:
                self._runs[p] += 1
                r = self._runs[p]
                if r >= max(p, cfg.min_span) and (fire_at is None or n - r < fire_at):
                    fire_at = n - r
            else:
                self._runs[p] = 0
        if fire_at is not None:
            self._fire(self._starts[fire_at], "span")

    # ------------------------------------------------------------ repeated sentence
    def _scan_sentences(self) -> None:
        text = self._text
        for i in range(self._scanned, len(text)):
            if text[i].isspace() and self._ends_sentence(i) and self._end_sentence(i):
                return
        self._scanned = len(text)

    def _ends_sentence(self, i: int) -> bool:
        """Whitespace at ``i`` ends the sentence: a line break, or after . ! ? (and closing quotes or
        brackets), unless all the sentence holds so far is a list number ("2. ")."""
        text, start = self._text, self._sentence_start
        if text[i] == "\n":
            return True
        j = i - 1
        while j >= start and text[j] in _CLOSERS:
            j -= 1
        return j >= start and text[j] in ".!?" and not _LIST_MARKER.fullmatch(text[start:i + 1].lstrip())

    def _end_sentence(self, end: int) -> bool:
        """The sentence [start, end) is complete; True when it repeats an earlier one (fired)."""
        start = self._sentence_start
        self._sentence_start = end + 1
        raw = self._text[start:end]
        if not raw.strip() or self._in_code(start):
            return False
        norm = normalise_sentence(raw)
        if len(_WORD.findall(norm)) < self.config.min_words:
            return False
        if norm in self._seen:
            self._fire(start + len(raw) - len(raw.lstrip()), "sentence")
            return True
        self._seen.add(norm)
        return False

    def _may_repeat_sentence(self) -> bool:
        partial = self._text[self._sentence_start:]
        if not partial.strip() or self._in_code(self._sentence_start):
            return False
        norm = normalise_sentence(partial)
        return any(s.startswith(norm) for s in self._seen)

    def _in_code(self, at: int) -> bool:
        return self._text.count(FENCE, 0, at) % 2 == 1

    def _fire(self, cut: int, pattern: str) -> None:
        self.cut, self.pattern = cut, pattern


def replay(tokens: Sequence[int], token_bytes: Callable[[int], bytes], config: RepetitionConfig) -> RepetitionGuard:
    """Run the guard over a finished token sequence: where it would have stopped the answer, and why
    (``bench repetition`` measures the guard on outputs generated without it)."""
    guard = RepetitionGuard(config)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = ""
    for tok in tokens:
        text += decoder.decode(token_bytes(tok))
        guard.push(tok, text)
        if guard.fired:
            break
    return guard
