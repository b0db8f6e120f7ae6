"""Words, sentences, stems and the numbers and names of a text, for the evidence aligner."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import Stemmer


@dataclass(frozen=True)
class Token:
    text: str  # as written
    norm: str  # NFKC + casefold; numbers without thousands separators
    start: int
    end: int


Tokenizer = Callable[[str], list[Token]]


# ------------------------------------------------------------------ text
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\s*\n\s*")
_ABBREVIATION = re.compile(r"(?:\b\w|e\.g|i\.e|etc|mr|mrs|ms|dr|st|vs|no|fig|vol)\.$", re.IGNORECASE)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_SMALL_NUMBERS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
                  "fifteen sixteen seventeen eighteen nineteen twenty")
NUMBER_WORDS = {w: str(i) for i, w in enumerate(_SMALL_NUMBERS.split())}
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_UNITS = _SMALL_NUMBERS.split()[1:10]  # one ... nine
NUMBER_WORDS.update({tens: str(10 * i) for i, tens in enumerate(_TENS, start=2)})
NUMBER_WORDS.update(hundred="100", thousand="1000", million="1000000", billion="1000000000")
# "thirty-two" is one number, 32, however an answer or a source writes it ("32")
NUMBER_WORDS.update({f"{tens}-{unit}": str(10 * i + j) for i, tens in enumerate(_TENS, start=2)
                     for j, unit in enumerate(_UNITS, start=1)})
_COMPOUND_NUMBER = rf"(?i:(?:{'|'.join(_TENS)})-(?:{'|'.join(_UNITS)}))\b"
_TOKEN = re.compile(rf"{_COMPOUND_NUMBER}|\d+(?:[.,:/]\d+)*(?:st|nd|rd|th|s)?|[{_CJK}]|(?:(?![{_CJK}])[^\W\d_])+")
_STOPWORD_TEXT = """a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my myself
no nor not of off on once only or other our ours ourselves out over own same she should so some such than that
the their theirs them themselves then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours yourself yourselves s t don
isn wasn aren weren doesn didn won"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_stemmer = Stemmer.Stemmer("english")


def word_tokens(text: str) -> list[Token]:
    """Words and numbers with character offsets (punctuation dropped); CJK characters one by one."""
    out = []
    for m in _TOKEN.finditer(text):
        raw = m.group()
        norm = _THOUSANDS.sub("", unicodedata.normalize("NFKC", raw).casefold())
        out.append(Token(raw, NUMBER_WORDS.get(norm, norm), m.start(), m.end()))
    return out


@lru_cache(maxsize=65536)
def stem(norm: str) -> str:
    return _stemmer.stemWord(norm)


def is_content(tok: Token) -> bool:
    return tok.norm not in STOPWORDS and (len(tok.norm) > 1 or not tok.norm.isascii())


def split_sentences(text: str, line_breaks: bool = True) -> list[tuple[int, int]]:
    """(start, end) of each sentence; abbreviations do not end one. A line break ends one when
    ``line_breaks`` (answers: list items), else only a blank line does (documents wrap lines)."""
    spans, start = [], 0
    for m in _SENTENCE_BREAK.finditer(text):
        brk = m.group().count("\n")
        if (not brk and _ABBREVIATION.search(text[max(start, m.start() - 6):m.start()])) or (
                brk == 1 and not line_breaks and text[m.start() - 1:m.start()] not in ".!?。！？"):
            continue
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    trimmed = [(a + len(text[a:b]) - len(text[a:b].lstrip()), a + len(text[a:b].rstrip())) for a, b in spans]
    return [(a, b) for a, b in trimmed if a < b]


def entity_words(tokens: Sequence[Token]) -> list[Token]:
    """Numbers (digits or number words), and names or dates: capitalised words past the first."""
    return [t for i, t in enumerate(tokens)
            if t.norm[0].isdigit() or (i > 0 and t.text[0].isupper() and t.norm not in STOPWORDS)]


UNIT_STEMS = frozenset(stem(w) for w in ["second", "seconds", "minute", "minutes", "hour", "hours", "day", "days", "week", "weeks", "month", "months", "year", "years", "decade", "decades", "century", "centuries", "millisecond", "milliseconds", "ms", "metre", "metres", "meter", "meters", "km", "kilometre", "kilometres", "kilometers", "mile", "miles", "foot", "feet", "inch", "inches", "cm", "mm", "kg", "kilogram", "kilograms", "gram", "grams", "g", "tonne", "tonnes", "ton", "tons", "pound", "pounds", "lb", "lbs", "percent", "per", "cent", "dollar", "dollars", "euro", "euros", "usd", "eur", "byte", "bytes", "kb", "mb", "gb", "tb", "kib", "mib", "gib", "watt", "watts", "volt", "volts", "degree", "degrees", "times"])


def unit_after(tokens: Sequence[Token], k: int) -> Token | None:
    """The unit that number ``tokens[k]`` counts in: a unit word among the next two ("6 business days")."""
    return next((u for u in tokens[k + 1:k + 3] if stem(u.norm) in UNIT_STEMS), None)


_PATH = re.compile(r"(?<![\w/])(?:~|\.{1,2})?/[\w.+@-]+(?:/[\w.+@-]+)+/?")


def paths(text: str) -> list[str]:
    """The file paths a text writes (``/usr/lib/python3/dist-packages``), trailing full stops cut. A
    path is literal: its parts found in different places of a source ("/usr/lib/python3" here,
    "site-packages" there) do not make the path."""
    return [m.group().rstrip(".") for m in _PATH.finditer(text)]


def foreign_words(answer: str, sources: Sequence[str], question: str = "") -> list[str]:
    """The answer's numbers, names and units that neither the sources nor the question hold: words
    that can only have come from somewhere else (a prompt's example, the model's memory)."""
    tokens = word_tokens(answer)
    known = {stem(t.norm) for text in (*sources, question) for t in word_tokens(text)}
    specific = entity_words(tokens) + [u for k, t in enumerate(tokens) if t.norm[0].isdigit()
                                       for u in [unit_after(tokens, k)] if u is not None]
    return list(dict.fromkeys(t.text for t in specific if stem(t.norm) not in known))


_CODE = re.compile(r"```.*?(?:```|$)|`[^`\n]+`", re.S)
# the prompt numbers its sources [1], [2], ...: an answer that names them ("According to source [1]",
# "as [2] and [3] say") refers to the prompt, and its numbers are not claims about the documents
_SOURCE_REF = re.compile(r"\b(?:sources?|documents?|passages?)\s+\[?\d+\]?(?:\s*(?:,|and|&)\s*\[?\d+\]?)*"
                         r"|\[\d+(?:\s*[,;&]\s*\d+)*\]", re.IGNORECASE)


def source_refs(text: str, tokens: Sequence[Token], offset: int = 0) -> set[int]:
    """Indices of the ``tokens`` (offsets ``offset`` past the start of ``text``) that name the
    prompt's numbered sources ("source [1]", "[2, 3]"): neither claims nor content."""
    spans = [(m.start() + offset, m.end() + offset) for m in _SOURCE_REF.finditer(text)]
    return {i for i, t in enumerate(tokens) if any(a <= t.start and t.end <= b for a, b in spans)}


def code_words(text: str, tokens: Sequence[Token], offset: int = 0) -> list[Token]:
    """The words of ``text``'s inline code and code blocks (``tokens`` are its words, their offsets
    ``offset`` past the start of ``text``). Code is literal: a command, a flag or a file name an
    answer writes as code is one the sources must hold as written, like a number or a name (an
    invented ``sudo ln -s /etc/passwd /etc/passwd`` is not supported by a page that says the
    ``update-passwd`` tool keeps them in sync)."""
    spans = [(m.start() + offset, m.end() + offset) for m in _CODE.finditer(text)]
    return [t for t in tokens if any(a <= t.start and t.end <= b for a, b in spans)]


# ------------------------------------------------------------------ refusals
# phrases by which an answer says that its sources hold no answer (the prompts ask for "not in the documents")
REFUSALS = ("not in the documents", "does not say", "do not say", "no information", "not mentioned",
            "cannot be determined", "unknown", "not specified", "not provided", "not stated",
            "does not provide", "do not provide", "doesn't provide", "does not mention", "does not contain")
DECLINE_WORDS = 12  # a written answer this short that holds a refusal phrase says nothing else


def is_refusal(answer: str) -> bool:
    """An answer *phrase* (a Grounded draft's, a benchmark's short answer) that declines: empty, or
    holding a refusal phrase."""
    a = answer.strip().lower()
    return not a or any(r in a for r in REFUSALS)


def declines(answer: str) -> bool:
    """A written answer that only says its sources hold none ("not in the documents.", "The documents
    do not say."): a few words with a refusal phrase. A longer answer that says "not mentioned" of
    one detail still answers, and is checked sentence by sentence as usual."""
    return 0 < len(answer.split()) <= DECLINE_WORDS and is_refusal(answer)
