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
                       sentence punctuation). Compared with every number token as one token too,
                       when the span holds ``template_words`` words: a template repeated
                       ``template_repeats`` times with a counter ("the level is 1, the level is 2,
                       the level is 3, ...") is a loop, a list of numbers ("2, 3, 5, 7, ...") is not.
    counted template   a sentence written ``template_repeats`` times with only its numbers changed
                       ("The compression level in deflate is 1." ... "is 2." ... "is 3.").

The end of the answer ends its last sentence (``finish``): a last sentence that repeats an earlier
one, followed by the end of generation, is cut too. The answer ends where the repeat begins: the
first copy is kept (a counted template keeps the copies before the one that made it a loop). Text that may be the start of a
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
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_ALPHA = re.compile(r"[^\W\d_]{2,}")
NUMBER = -1  # what every number token counts as in the masked span check
FENCE = "```"


def normalise_sentence(text: str) -> str:
    """Lower case, single spaces, no leading list marker ("- ", "2. ")."""
    return _LIST_MARKER.sub("", " ".join(text.split()).lower())


def template_of(norm: str) -> str:
    """A normalised sentence with every number replaced by '#': its template."""
    return _NUMBER.sub("#", norm)


class RepetitionGuard:
    """Watches one answer's tokens and text; ``cut`` is set (a character offset) once it loops."""

    def __init__(self, config: RepetitionConfig):
        self.config = config
        self.tokens: list[int] = []
        self._masked: list[int] = []  # the tokens with every number token as NUMBER
        self._wordy: list[bool] = []  # whether each token's text holds a word (two letters or more)
        self._starts: list[int] = []  # character offset at which each token's text begins
        self._runs = [0] * (config.max_period + 1)  # _runs[p]: trailing tokens equal to the token p before
        self._masked_runs = [0] * (config.max_period + 1)  # the same over the masked tokens
        self._seen: set[str] = set()  # normalised sentences so far (those of at least min_words words)
        self._templates: dict[str, int] = {}  # their templates (numbers masked), and how often each came
        self._sentence_start = 0  # where the sentence being written begins
        self._scanned = 0  # characters already scanned for sentence ends
        self._text = ""
        self.cut: int | None = None  # where the answer ends (the repeat's first character), once fired
        self.pattern = ""  # "sentence" | "span" | "template", once fired

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
        copies = self.config.template_repeats - 1
        for p in range(1, self.config.max_period + 1):  # a counted template's next copy, so far
            r = self._masked_runs[p]
            if r > (copies - 1) * p and NUMBER in self._masked[n - p:]:
                hold = min(hold, self._starts[n - r + (copies - 1) * p])
        if self._may_repeat_sentence():
            hold = min(hold, self._sentence_start)
        return hold

    def push(self, token: int, text: str) -> None:
        """One more emitted token; ``text`` is the whole answer decoded so far (this token included)."""
        if self.cut is not None:
            return
        start = len(self._text)
        self._starts.append(start)
        self._text = text
        self.tokens.append(token)
        piece = text[start:].strip()
        self._masked.append(NUMBER if _NUMBER.fullmatch(piece) else token)
        self._wordy.append(bool(_ALPHA.search(piece)))
        self._push_span(token)
        if self.cut is None:
            self._scan_sentences()

    def finish(self) -> None:
        """The answer has ended (end of generation, a stop string, the token limit): its last
        sentence ends here, and is checked like every other."""
        if self.cut is not None:
            return
        self._scan_sentences()
        if self.cut is None and self._sentence_start < len(self._text):
            self._end_sentence(len(self._text))

    # ------------------------------------------------------------ repeated span
    def _push_span(self, token: int) -> None:
        cfg, n = self.config, len(self.tokens)
        masked = self._masked[-1]
        fire_at = None
        for p in range(1, cfg.max_period + 1):
            if n > p and self.tokens[n - 1 - p] == token:
                self._runs[p] += 1
                r = self._runs[p]
                if r >= max(p, cfg.min_span) and (fire_at is None or n - r < fire_at):
                    fire_at = n - r
            else:
                self._runs[p] = 0
            if n > p and self._masked[n - 1 - p] == masked:
                self._masked_runs[p] += 1
                r = self._masked_runs[p]
                # template_repeats copies of a period of words with a counter in it (not a list of
                # numbers): cut at the copy that made it a loop, as a counted sentence is
                copies = cfg.template_repeats - 1  # the run covers the copies after the first
                if (r >= max(copies * p, cfg.min_span) and sum(self._wordy[n - p:]) >= cfg.template_words
                        and NUMBER in self._masked[n - p:]):
                    at = n - r + (copies - 1) * p
                    fire_at = at if fire_at is None else min(fire_at, at)
            else:
                self._masked_runs[p] = 0
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
        begins = start + len(raw) - len(raw.lstrip())
        if norm in self._seen:
            self._fire(begins, "sentence")
            return True
        self._seen.add(norm)
        template = template_of(norm)
        if template != norm:  # only a sentence with a number in it can be a counted template
            self._templates[template] = self._templates.get(template, 0) + 1
            if self._templates[template] >= self.config.template_repeats:
                self._fire(begins, "template")
                return True
        return False

    def _may_repeat_sentence(self) -> bool:
        """The sentence being written so far starts like an earlier one, or like a template one more
        copy of which would be a loop."""
        partial = self._text[self._sentence_start:]
        if not partial.strip() or self._in_code(self._sentence_start):
            return False
        norm = normalise_sentence(partial)
        if any(s.startswith(norm) for s in self._seen):
            return True
        template, last = template_of(norm), self.config.template_repeats - 1
        return any(t.startswith(template) for t, n in self._templates.items() if n >= last)

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
    guard.finish()
    return guard
