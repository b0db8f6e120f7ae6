"""The copy bound: the most that any drafter which copies text could speed up plain decoding.

A drafter that copies (RASD's retrieval tree, llama.cpp's n-gram lookup, prompt lookup) can propose
token x after token y only where the pair (y, x) occurs in what it copies from: the documents, the
prompt and the answer so far. So on plain's own output, token j can be drafted only if the pair
(token j-1, token j) occurred before it: token j is *copyable*. A step that emits r drafted tokens
plus its bonus token verifies at least those r tokens and the root in one forward, T(r + 1), and
needs all r copyable. The least time to write the answer is then a shortest path over positions:

    best[n] = 0
    best[i] = min(T(1) + best[i + 1],                                      # a plain step
                  min over r >= 1 with tokens i..i+r-1 copyable of
                      T(r + 1) + best[min(i + r + 1, n)])                  # r drafted + the bonus

with token 0 given by the prefill. Plain's time over it, (n - 1) T(1) / best[1], bounds the speedup
of every such drafter, tree or chain, however well it guesses, at this measured cost curve: a
drafter that also runs a draft model is not bounded by it.

    bound = copy_bound([doc_ids, prompt_ids], plain_tokens, cost, max_depth=47)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def copyable(sources: Sequence[Sequence[int]], output: Sequence[int]) -> list[bool]:
    """Per output token: did its pair (previous token, it) occur in a source or earlier in the
    output? The last source is the one the output continues (the prompt); token 0 pairs with its
    last token."""
    seen = {pair for src in sources for pair in zip(src, src[1:], strict=False)}
    prev = sources[-1][-1] if sources and sources[-1] else None
    flags = []
    for tok in output:
        flags.append((prev, tok) in seen)
        seen.add((prev, tok))
        prev = tok
    return flags


def copy_bound(sources: Sequence[Sequence[int]], output: Sequence[int], cost: Callable[[int], float],
               max_depth: int) -> float:
    """Upper bound on the speedup over plain of a drafter copying from `sources` (module doc);
    cost(k): seconds of one forward over k tokens; paths of at most `max_depth` drafted tokens."""
    n = len(output)
    if n <= 1:
        return 1.0
    ok = copyable(sources, output)
    best = [0.0] * (n + 1)
    for i in range(n - 1, 0, -1):
        least = cost(1) + best[i + 1]
        r = 0
        while r < max_depth and i + r < n and ok[i + r]:
            r += 1
            least = min(least, cost(r + 1) + best[min(i + r + 1, n)])
        best[i] = least
    return (n - 1) * cost(1) / best[1]
