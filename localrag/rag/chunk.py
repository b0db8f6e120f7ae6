"""Token-aware chunking over parser units, counted with the embedding model's own tokenizer.

Units (lines/paragraphs from :mod:`localrag.rag.parse`) are packed greedily up
to ``max_tokens`` word pieces. Rules, in order:

* a heading, or a new PDF page, starts a new chunk (chunks never straddle
  sections or pages, so a citation points at one place);
* when a chunk is full it is cut at the last paragraph / code-block start in
  its second half if there is one, else at a line boundary; a single unit
  longer than a chunk is split between words;
* the next chunk repeats the last ``overlap`` tokens of the previous one
  (whole lines where possible), except across a heading or page.

Everything streams: memory is bounded by one tokenizer batch (TOKENIZE_CHARS) and one
chunk, whatever the file size, and time is linear in the text's length.

    from localrag.rag.chunk import Chunker, TokenCounter
    chunker = Chunker(TokenCounter.from_model_dir(path), max_tokens=200, overlap=32)
    for chunk in chunker.chunks(parse_file("notes.md")):
        print(chunk.n_tokens, chunk.line_start, chunk.text[:40])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from tokenizers import Tokenizer

from localrag.rag.parse import MAX_UNIT_CHARS, Unit, bounded_pieces

TOKENIZE_BATCH = 512
TOKENIZE_CHARS = 1 << 20  # text tokenized at once: bounds the tokenizer's memory


@dataclass(frozen=True)
class Chunk:
    """A piece of a document ready to embed, with its anchors for citations."""

    text: str
    n_tokens: int
    page: int | None
    line_start: int | None
    line_end: int | None
    heading_path: tuple[str, ...]
    ocr: bool = False  # read by OCR (chunks never straddle PDF pages, and OCR is per page)


class TokenCounter:
    """The embedding model's fast tokenizer, without special tokens, truncation or padding."""

    def __init__(self, tokenizer) -> None:
        self._tok = tokenizer
        self._tok.no_truncation()
        self._tok.no_padding()

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> TokenCounter:
        return cls(Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json")))

    def encode(self, texts: list[str]) -> list:
        """``tokenizers.Encoding`` of each text (ids, tokens, character offsets)."""
        return self._tok.encode_batch(texts, add_special_tokens=False)

    def count(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self.encode(texts)]

    def split(self, text: str, max_tokens: int, encoding=None) -> list[tuple[str, int]]:
        """Cut ``text`` between words into (piece, tokens) of at most ``max_tokens`` tokens.

        ``encoding``: ``text``'s encoding if already computed. Linear in the length of ``text``:
        the token and offset lists are built once (each access to ``Encoding.tokens`` copies
        the whole list). A piece's count is its token span: cuts fall where a word starts and
        whitespace has no tokens, so the piece alone tokenizes to exactly that span.
        """
        enc = encoding if encoding is not None else self.encode([text])[0]
        tokens, offsets = enc.tokens, enc.offsets
        pieces: list[tuple[str, int]] = []
        start_tok = 0
        n = len(tokens)
        while start_tok < n:
            end_tok = min(n, start_tok + max_tokens)
            if end_tok < n:
                # Never cut inside a word: back up to a token that starts one ("##" marks continuation).
                cut = end_tok
                while cut > start_tok + 1 and tokens[cut].startswith("##"):
                    cut -= 1
                end_tok = cut
            begin = offsets[start_tok][0]
            end = offsets[end_tok][0] if end_tok < n else len(text)
            piece = text[begin:end].strip()
            if piece:
                pieces.append((piece, end_tok - start_tok))
            start_tok = end_tok
        return pieces


class Chunker:
    """Packs units into chunks of at most ``max_tokens`` with ``overlap`` tokens carried over."""

    def __init__(self, counter: TokenCounter, max_tokens: int = 200, overlap: int = 32) -> None:
        if overlap >= max_tokens // 2:
            raise ValueError("overlap must be less than half of max_tokens")
        self.counter = counter
        self.max_tokens = max_tokens
        self.overlap = overlap

    def chunks(self, units: Iterable[Unit]) -> Iterator[Chunk]:
        packer = _Packer(self)
        for batch in _tokenize_batches(units):
            for unit, enc in zip(batch, self.counter.encode([u.text for u in batch]), strict=True):
                if len(enc.ids) <= self.max_tokens:
                    yield from packer.add(unit, len(enc.ids))
                    continue
                pieces = self.counter.split(unit.text, self.max_tokens, enc)
                for k, (piece, m) in enumerate(pieces):
                    yield from packer.add(replace(unit, text=piece, new_block=unit.new_block and k == 0), m)
        yield from packer.finish()


def _tokenize_batches(units: Iterable[Unit]) -> Iterator[list[Unit]]:
    """Units in groups of at most TOKENIZE_BATCH units and TOKENIZE_CHARS characters; a unit
    longer than MAX_UNIT_CHARS is cut between words first, so memory stays bounded."""
    batch: list[Unit] = []
    chars = 0
    for unit in _bounded(units):
        if batch and (len(batch) >= TOKENIZE_BATCH or chars + len(unit.text) > TOKENIZE_CHARS):
            yield batch
            batch, chars = [], 0
        batch.append(unit)
        chars += len(unit.text)
    if batch:
        yield batch


def _bounded(units: Iterable[Unit]) -> Iterator[Unit]:
    for unit in units:
        if len(unit.text) <= MAX_UNIT_CHARS:
            yield unit
            continue
        for k, piece in enumerate(bounded_pieces(unit.text)):
            yield replace(unit, text=piece, new_block=unit.new_block and k == 0)


class _Packer:
    """Greedy packing state for one document (see the module docstring for the rules)."""

    def __init__(self, chunker: Chunker) -> None:
        self.c = chunker
        self.cur: list[tuple[Unit, int]] = []
        self.tokens = 0

    def add(self, unit: Unit, n: int) -> Iterator[Chunk]:
        if self.cur:
            has_body = any(u.kind != "heading" for u, _ in self.cur)
            if (unit.kind == "heading" and has_body) or unit.page != self.cur[0][0].page:
                yield self._emit(self.cur)
                self._set([])
        if self.cur and self.tokens + n > self.c.max_tokens:
            cut = self._cut_point()
            done, carry = self.cur[:cut], self.cur[cut:]
            yield self._emit(done)
            # The overlap (at least one token) can only fit if carry and the new unit leave room.
            tail = self._overlap_tail(done) if _total(carry) + n < self.c.max_tokens else []
            cand = tail + carry
            if _total(cand) + n > self.c.max_tokens:
                cand = carry
            if _total(cand) + n > self.c.max_tokens:
                if carry:
                    yield self._emit(carry)
                cand = []
            self._set(cand)
        self.cur.append((unit, n))
        self.tokens += n

    def finish(self) -> Iterator[Chunk]:
        if self.cur:
            yield self._emit(self.cur)
        self._set([])

    def _set(self, items: list[tuple[Unit, int]]) -> None:
        self.cur = list(items)
        self.tokens = _total(self.cur)

    def _cut_point(self) -> int:
        """Index to cut ``cur`` at: the last block start in the second half, else everything."""
        half = self.c.max_tokens // 2
        seen = 0
        best = len(self.cur)
        for i, (u, n) in enumerate(self.cur):
            if i > 0 and u.new_block and seen >= half:
                best = i
            seen += n
        return best

    def _overlap_tail(self, done: list[tuple[Unit, int]]) -> list[tuple[Unit, int]]:
        if self.c.overlap <= 0 or not done:
            return []
        tail: list[tuple[Unit, int]] = []
        total = 0
        for u, n in reversed(done):
            if u.kind == "heading" or total + n > self.c.overlap:
                break
            tail.insert(0, (u, n))
            total += n
        if tail:
            return [(replace(u, new_block=(i == 0) or u.new_block), n) for i, (u, n) in enumerate(tail)]
        last, _ = done[-1]
        if last.kind == "heading":
            return []
        # The last line alone is longer than the overlap: repeat its final words instead.
        pieces = self.c.counter.split(last.text, max(1, self.c.overlap))
        if len(pieces) < 2:
            return []
        piece, n = pieces[-1]
        return [(replace(last, text=piece, new_block=True), n)]

    def _emit(self, items: list[tuple[Unit, int]]) -> Chunk:
        parts: list[str] = []
        for i, (u, _) in enumerate(items):
            if i:
                parts.append("\n\n" if u.new_block else "\n")
            parts.append(u.text)
        starts = [u.line_start for u, _ in items if u.line_start is not None]
        ends = [u.line_end for u, _ in items if u.line_end is not None]
        return Chunk(
            text="".join(parts),
            n_tokens=_total(items),
            page=items[0][0].page,
            line_start=min(starts) if starts else None,
            line_end=max(ends) if ends else None,
            heading_path=items[-1][0].heading_path,
            ocr=items[0][0].ocr,
        )


def _total(items: list[tuple[Unit, int]]) -> int:
    return sum(n for _, n in items)
