"""Approximate prefill: retrieved chunks' keys and values come from a cache instead of being read.

EPIC-style (arXiv 2410.15332). A chunk's KV is computed once, after a fixed prompt prefix P (the
prompt up to its first chunk: the chat template's system header, the instructions, "Sources:
[1]"), and kept on disk (``KVStore``). At question time the prompt is built in order in KV sequence
0, each chunk at its place::

    exact:   prompt[pos : c + H]                 # up to and with the chunk's first H tokens
    placed:  prompt[c + H : e]                   # its cached cells, moved to their positions

where the chunk's tokens are prompt[c:e]. Its cells were computed at positions |P| + H .. |P| + e - c
- 1; they are loaded into a scratch sequence (``llama_state_seq_set_data``, the lowest free cells,
so the cache stays packed in position order), moved by c - |P| (``llama_memory_seq_add``: the
K-shift re-rotates their RoPE keys at the next decode), and shared with sequence 0. The head tokens
are read where they stand, so they attend to the chunks before; the rest saw only P. Whatever is
not a usable chunk (the gaps between chunks, the history, the question) is read exactly, and so is
the last prompt token (fresh logits).

A missed chunk is computed the same way it is stored: its tokens decoded in the scratch sequence
after P's cells (shared, not recomputed), its cells from H on saved, then placed like a hit. So the
KV a prompt gets is a function of the prompt alone (the batch-invariant kernels compute the same
bits whichever process wrote the entry), hit or miss, and Speedup stays Plain's answer under it.

An entry's key names all it depends on (``entry_key``): the model file, the kernels'
``build_label``, the deterministic switch (the V cache's type), the hash of P, the chunk's id and
text hash, its tokens, and H. A chunk edited since is another key: never served stale.

The positions placed from the cache are recorded on the backend (``placed``); an exact prefill
keeps no KV from there on (``kept_prefix``), and a reuse prefill keeps a cached prompt prefix only
as far as it was built the way it would build it.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from localrag.backends.base import Backend
from localrag.backends.kv_store import KVStore

SCRATCH = 1  # the KV sequence a chunk is computed and loaded in (a tree leaf's between answers)
_IDENTITY_BYTES = 1 << 20  # hashed from each end of the model file (with its size and mtime)


@dataclass(frozen=True)
class ChunkSpan:
    """A chunk's tokens in the prompt: ``prompt[start:end]``; ``text_sha``: of its text."""

    start: int
    end: int
    chunk_id: str
    text_sha: str


@dataclass
class ReuseStats:
    hits: int = 0
    misses: int = 0
    placed_tokens: int = 0  # prompt tokens whose KV was placed from the cache
    computed_tokens: int = 0  # tokens decoded to fill missed entries
    read_tokens: int = 0  # prompt tokens read exactly


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def tokens_sha(tokens: Sequence[int]) -> str:
    return sha(np.asarray(tokens, dtype=np.int64).tobytes())


def supports_reuse(backend: Backend) -> bool:
    """A backend whose KV sequences can be saved, loaded and shifted, with a free scratch sequence."""
    return (hasattr(backend, "set_seq_state") and getattr(backend, "max_leaves", 0) > SCRATCH
            and bool(getattr(backend, "can_shift", False)))


def model_identity(backend: Backend) -> str:
    """What a chunk's KV depends on besides its prompt: the model file (path, size, mtime and a
    sha256 of its first and last MiB), the kernels' build and whether they are the deterministic
    ones (they set the V cache's type)."""
    fid = backend.name
    spec = backend.model_spec
    if spec is not None:
        path = Path(spec.path)
        with contextlib.suppress(OSError):
            st = path.stat()
            h = hashlib.sha256()
            with open(path, "rb") as f:
                h.update(f.read(_IDENTITY_BYTES))
                f.seek(max(0, st.st_size - _IDENTITY_BYTES))
                h.update(f.read(_IDENTITY_BYTES))
            fid = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{h.hexdigest()}"
    return f"{type(backend).__name__}|{fid}|build={backend.build_label}|deterministic={backend.deterministic}"


def entry_key(identity: str, prefix_sha: str, span: ChunkSpan, span_sha: str, head: int) -> str:
    return (f"{identity}|prefix={prefix_sha}|chunk={span.chunk_id}|text={span.text_sha}"
            f"|tokens={span_sha}|head={head}")


def chunk_spans(backend: Backend, tokens: Sequence[int], chunks: Sequence[tuple[str, str]]) -> list[ChunkSpan]:
    """Where each chunk's text ((chunk id, text), in prompt order) lies in the prompt's tokens: the
    tokens wholly inside it (with the space before it, which starts its first token) that end before
    its last byte. Whether the token holding the last byte ends there depends on what follows (Qwen's
    pre-tokenizer joins ".\n\n" of a chunk followed by another, not "." before the system turn's
    end), so it is left out: a chunk has the same span tokens wherever it is listed. A chunk not
    found, or found in no whole token, has no span (it is read exactly)."""
    offsets, data = [0], bytearray()
    for t in tokens:
        data += backend.token_bytes(t, special=True)
        offsets.append(len(data))
    spans: list[ChunkSpan] = []
    byte_at, tok_at = 0, 0
    for chunk_id, text in chunks:
        needle = text.encode("utf-8")
        at = data.find(needle, byte_at) if needle else -1
        if at < 0:
            continue
        end = at + len(needle)
        if at > 0 and data[at - 1:at] == b" ":
            at -= 1
        i = bisect.bisect_left(offsets, at, lo=tok_at)
        j = bisect.bisect_right(offsets, end - 1, lo=i) - 1  # tokens i..j-1 end at offsets[j] < end
        if j > i:
            spans.append(ChunkSpan(i, j, chunk_id, sha(text)))
            tok_at = j
        byte_at = end
    return spans


def common_prefix(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """How many leading tokens of ``prompt`` the cache already holds, at most all but the last (it
    is always evaluated, for fresh logits)."""
    common = 0
    for a, b in zip(cached, prompt, strict=False):
        if a != b:
            break
        common += 1
    return min(common, len(prompt) - 1)


def kept_prefix(old: Sequence[tuple[int, int]], new: Sequence[tuple[int, int]], common: int) -> int:
    """How much of a cached context to keep: at most ``common`` tokens (those it shares with the
    prompt), and nothing from the first position it built otherwise than the prompt's prefill
    would (``old``: its placed ranges; ``new``: the ones the prefill plans; exact: none)."""
    cut = common
    a, b = set(old), set(new)
    for r in a ^ b:
        cut = min(cut, r[0])
    for r in a & b:  # the same range, kept in part: place it again whole
        if r[0] < cut < r[1]:
            cut = r[0]
    return cut


@dataclass
class ChunkReuse:
    """One prompt's approximate prefill: its chunks' spans, the store, and H (``head``: tokens at
    the head of each chunk read at their place). Spans shorter than ``head + min_tokens`` are read
    exactly. After ``read``, ``logits`` are the prompt's last and ``stats`` say what was done."""

    store: KVStore | None
    spans: list[ChunkSpan]
    head: int = 16
    min_tokens: int = 16
    identity: str = ""
    stats: ReuseStats = field(default_factory=ReuseStats)
    logits: np.ndarray | None = None

    def usable(self, n_prompt: int) -> list[ChunkSpan]:
        return [s for s in self.spans if s.end - s.start >= self.head + self.min_tokens and s.end < n_prompt]

    def planned(self, n_prompt: int) -> list[tuple[int, int]]:
        """The positions this prefill places from the cache."""
        return [(s.start + self.head, s.end) for s in self.usable(n_prompt)]

    def read(self, be: Backend, prompt: Sequence[int], step: int) -> Iterator[tuple[int, int]]:
        """Read ``prompt`` from the backend's committed context on (a prefix of it, already kept by
        ``kept_prefix``), yielding (tokens done, tokens to do) as it goes."""
        start = be.n_past
        total = len(prompt) - start
        pos = start
        prefix = self.spans[0].start if self.spans else 0
        prefix_sha = tokens_sha(prompt[:prefix])

        def exact(upto: int) -> Iterator[tuple[int, int]]:
            nonlocal pos
            while pos < upto:
                n = min(step, upto - pos)
                self.logits = be.prefill(prompt[pos:pos + n])
                pos += n
                self.stats.read_tokens += n
                yield pos - start, total

        for s in self.usable(len(prompt)):
            cut = s.start + self.head
            if cut < start:  # kept whole from the cached context (kept_prefix)
                continue
            yield from exact(cut)
            key = entry_key(self.identity, prefix_sha, s, tokens_sha(prompt[s.start:s.end]), self.head)
            blob = self.store.get(key) if self.store is not None else None
            if blob is None:
                blob = compute_entry(be, prompt[s.start:s.end], prefix, self.head)
                if blob is None:  # no room in the context for the scratch cells: read it exactly
                    continue
                self.stats.misses += 1
                self.stats.computed_tokens += s.end - s.start
                if self.store is not None:
                    with contextlib.suppress(OSError):  # a full or read-only disk: the answer goes on
                        self.store.put(key, blob)
            else:
                self.stats.hits += 1
            self._place(be, blob, prompt[cut:s.end], s.start - prefix)
            pos = s.end
            self.stats.placed_tokens += s.end - cut
            yield pos - start, total
        yield from exact(len(prompt))

    def _place(self, be, blob: bytes, tokens: Sequence[int], delta: int) -> None:
        """Load the saved cells after the committed context, at positions n_past.. (moved by ``delta``)."""
        if be.n_past + getattr(be, "n_pinned", 0) + len(tokens) > be.n_ctx:
            raise ValueError(f"context full: {be.n_past} + {len(tokens)} tokens > n_ctx {be.n_ctx}")
        be.seq_rm(SCRATCH, -1, -1)
        be.set_seq_state(SCRATCH, blob)
        if delta:
            be.seq_add(SCRATCH, -1, -1, delta)
        if be.seq_pos_max(SCRATCH) != be.n_past + len(tokens) - 1:
            be.seq_rm(SCRATCH, -1, -1)
            raise RuntimeError("a cached chunk's KV did not land at its positions")
        be.adopt(SCRATCH, tokens)


def compute_entry(be, tokens: Sequence[int], prefix: int, head: int, stop=None, piece: int = 32) -> bytes | None:
    """A chunk's cells from ``head`` on, computed in the scratch sequence after the first ``prefix``
    cells of sequence 0 (shared, not recomputed), at positions prefix.. on; sequence 0 is left as it
    was. None when the context has no room for them, or when ``stop()`` turns true between pieces of
    ``piece`` tokens (a background warm gives way at once to a question)."""
    if be.n_past + getattr(be, "n_pinned", 0) + len(tokens) > be.n_ctx:
        return None
    step = be.n_batch if stop is None else min(piece, be.n_batch)
    be.seq_rm(SCRATCH, -1, -1)
    be.seq_cp(0, SCRATCH, 0, prefix)
    try:
        for a in range(0, len(tokens), step):
            if stop is not None and stop():
                return None
            part = tokens[a:a + step]
            be.decode_batch(part, [prefix + a + i for i in range(len(part))], [SCRATCH] * len(part),
                            [False] * len(part))
        be.seq_rm(SCRATCH, 0, prefix + head)
        return be.seq_state(SCRATCH)
    finally:
        be.seq_rm(SCRATCH, -1, -1)


def warm_entry(be, store: KVStore, identity: str, prompt: Sequence[int], span: ChunkSpan, head: int,
               stop=None) -> tuple[str, int]:
    """Store the entry a prompt listing this chunk would read: ``prompt`` lists it first (``span``),
    so its prefix is every RAG prompt's P. Sequence 0 keeps its context when it already starts
    with P (the conversation's cache survives the warm); else it is cut back and P is read there.
    Returns "cached" (there already), "stored", "stopped" (``stop()``) or "no room", and the bytes stored."""
    prefix = span.start
    key = entry_key(identity, tokens_sha(prompt[:prefix]), span, tokens_sha(prompt[span.start:span.end]), head)
    if store.has(key):
        return "cached", 0
    common = kept_prefix(be.placed, [], common_prefix(be.tokens, prompt[:prefix + 1]))  # at most P
    if common < prefix:
        be.truncate(common)
        be.prefill(prompt[common:prefix])
    blob = compute_entry(be, prompt[span.start:span.end], prefix, head, stop)
    if blob is None:
        return ("stopped" if stop is not None and stop() else "no room"), 0
    with contextlib.suppress(OSError):
        if store.put(key, blob):
            return "stored", len(blob)
    return "no room", 0
