"""The token datastore: candidate continuations copied from the user's data (REST-style).

(Not the document search, ``localrag.rag``: this one holds token text and finds what follows a
context suffix.) The datastore is token text (target tokenizer) in two suffix-array indexes
(``localrag.textindex.SuffixIndex``):

* a *corpus* index over documents / retrieved chunks / a collection, built once
  per distinct set of documents and cached by content;
* a *context* index over the prompt and the conversation, kept up to date as
  tokens are generated: the suffix array covers the text up to a rebuild point,
  and the few tokens since (< ``rebuild_every``) sit in a small n-gram hash
  index, so the per-step cost is a lookup, and the O(n) rebuild is amortised.

A lookup finds the longest suffix of the context (``max_match`` down to
``min_match`` tokens, binary search over the length since occurrence is monotone
in it) that occurs with a continuation, collects the next ``max_depth`` tokens
after each occurrence (most recent first, capped), and builds a trie with counts.
A trie node copied from the corpus keeps the corpus position it was copied from,
so an accepted token's source is known: ``locate(position)`` gives the document
and the token offset in it.

    ds = Datastore(separator=n_vocab)                 # a token id no text contains
    ds.set_documents([tokens_of_doc1, tokens_of_doc2])
    ds.set_context(prompt_ids)
    trie, match_len = ds.lookup(context_ids, root_token, max_depth=12)   # scores = path frequency
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localrag.rasd.tree import RETRIEVAL, TokenTree
from localrag.textindex import SuffixIndex


@dataclass
class _Match:
    length: int
    sources: list[tuple[list[int], list[int]]]  # (text, occurrence start positions)


class Datastore:
    """Corpus + context token indexes; see the module docstring."""

    def __init__(self, separator: int, max_match: int = 16, min_match: int = 1, rebuild_every: int = 64):
        self.sep = separator  # a token id that never occurs (n_vocab): ends continuations at segment edges
        self.max_match = max_match
        self.min_match = min_match
        self.rebuild_every = rebuild_every
        self._corpus: SuffixIndex | None = None
        self._corpus_starts: list[int] = []  # where each document starts in the corpus text
        self._corpus_key = ""
        self._corpus_cache: dict[str, tuple[SuffixIndex, list[int]]] = {}
        self._ctx_index = SuffixIndex([])
        self._ctx: list[int] = []  # the whole context text
        self._tail: dict[int, list[int]] = {}  # token -> positions >= len(_ctx_index), the unindexed tail

    # --- building ----------------------------------------------------------------
    def set_documents(self, docs: Sequence[Sequence[int]]) -> None:
        """Index these token documents as the corpus (cached by content; [] clears)."""
        h = hashlib.sha1()
        for d in docs:
            h.update(np.asarray(d, dtype=np.int32).tobytes())
            h.update(b"|")
        key = h.hexdigest()
        if key == self._corpus_key:
            return
        self._corpus_key = key
        if not docs:
            self._corpus, self._corpus_starts = None, []
            return
        cached = self._corpus_cache.get(key)
        if cached is None:
            text: list[int] = []
            starts = []
            for d in docs:
                starts.append(len(text))
                text.extend(d)
                text.append(self.sep)
            cached = SuffixIndex(text), starts
            if len(self._corpus_cache) >= 4:
                self._corpus_cache.pop(next(iter(self._corpus_cache)))
            self._corpus_cache[key] = cached
        self._corpus, self._corpus_starts = cached

    def locate(self, position: int) -> tuple[int, int]:
        """(document index, token offset in it) of a corpus position (a trie node's origin)."""
        doc = bisect.bisect_right(self._corpus_starts, position) - 1
        return doc, position - self._corpus_starts[doc]

    def set_context(self, tokens: Sequence[int]) -> None:
        """Make the context text equal `tokens`, appending when it extends what is indexed."""
        tokens = list(tokens)
        n = len(self._ctx)
        if len(tokens) >= n and tokens[:n] == self._ctx:
            self.extend_context(tokens[n:])
            return
        self._ctx = tokens
        self._ctx_index = SuffixIndex(tokens)
        self._tail = {}

    def extend_context(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            self._tail.setdefault(t, []).append(len(self._ctx))
            self._ctx.append(t)
        if len(self._ctx) - len(self._ctx_index) >= self.rebuild_every:
            self._ctx_index = SuffixIndex(self._ctx)
            self._tail = {}

    # --- lookup ------------------------------------------------------------------
    def _tail_find(self, pattern: list[int]) -> list[int]:
        """Occurrences of `pattern` that END in the unindexed tail (hash on the last token)."""
        ctx, k = self._ctx, len(pattern)
        return [
            e - k + 1
            for e in self._tail.get(pattern[-1], ())
            if e - k + 1 >= 0 and ctx[e - k + 1 : e + 1] == pattern
        ]

    def _exists(self, pattern: list[int]) -> bool:
        c = self._corpus
        if c is not None and c.occurs_with_continuation(pattern, len(c.text)):
            return True
        n = len(self._ctx)
        if len(self._ctx_index) and self._ctx_index.occurs_with_continuation(pattern, n):
            return True
        return any(p + len(pattern) < n for p in self._tail_find(pattern)) if self._tail else False

    def _occurrences(self, pattern: list[int]) -> list[tuple[list[int], list[int]]]:
        """(text, start positions) per index, keeping only occurrences followed by >= 1 token."""
        out = []
        k = len(pattern)
        if self._corpus is not None:
            text = self._corpus.text
            pos = [p for p in self._corpus.find(pattern) if p + k < len(text)]
            if pos:
                out.append((text, pos))
        n = len(self._ctx)
        pos = self._ctx_index.find(pattern) if len(self._ctx_index) else []
        if self._tail:
            pos = pos + self._tail_find(pattern)
        pos = [p for p in pos if p + k < n]  # the context's own end has no continuation
        if pos:
            out.append((self._ctx, pos))
        return out

    def longest_match(self, context: Sequence[int]) -> _Match | None:
        """Binary search on the suffix length: if a k-suffix occurs, every shorter one does."""
        lo, hi = self.min_match, min(self.max_match, len(context))
        best = 0
        while lo <= hi:
            k = (lo + hi) // 2
            if self._exists(list(context[len(context) - k :])):
                best, lo = k, k + 1
            else:
                hi = k - 1
        return _Match(best, self._occurrences(list(context[len(context) - best :]))) if best else None

    def lookup(
        self, context: Sequence[int], root: int, max_depth: int, max_occurrences: int = 64
    ) -> tuple[TokenTree, int]:
        """Retrieval trie below `root` (whose token is context[-1]) and the match length (0: none).

        Node scores are path frequencies: count(occurrences through node) / count(all).
        """
        return self.trie(self.longest_match(context), root, max_depth, max_occurrences)

    def trie(self, match: _Match | None, root: int, max_depth: int, max_occurrences: int = 64) -> tuple[TokenTree, int]:
        """The trie of the next `max_depth` tokens after each occurrence of a match. Corpus
        continuations come first, so a node the corpus holds keeps its corpus position as origin."""
        tree = TokenTree(root)
        if match is None:
            return tree, 0
        k = match.length
        corpus = self._corpus.text if self._corpus is not None else None
        conts: list[tuple[list[int], int]] = []  # (continuation, its corpus position or -1)
        for text, pos in match.sources:  # most recent (largest position) first, capped
            for p in sorted(pos, reverse=True)[:max_occurrences]:
                start = p + k
                cont = text[start : start + max_depth]
                if self.sep in cont:
                    cont = cont[: cont.index(self.sep)]
                if cont:
                    conts.append((cont, start if text is corpus else -1))
            if len(conts) >= max_occurrences:
                break
        conts = conts[:max_occurrences]
        total = float(len(conts))
        for cont, origin in conts:
            tree.add_path(cont, scores=None, source=RETRIEVAL, count=1.0, origin=origin)
        for i in range(1, len(tree)):
            tree.scores[i] = tree.counts[i] / total  # frequency of the path among the occurrences
        tree.counts[0] = total
        return tree, k
