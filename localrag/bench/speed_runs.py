"""``bench speed``'s rows, typed: one ``Run`` per method, prompt and round; a method's rounds of one
prompt as ``MethodRuns``; a prompt's methods as ``SpeedRow``.

Every ratio is taken between two runs of the same prompt and round (adjacent in time, so a slow
drift of the machine's load cancels), each from that round's own token count and time: a
speculative decoder's state carries over between rounds, so a near-tie may flip differently and
change an answer's length in a later round.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class Run:
    """One timed run of one method on one prompt.

    ``tokens`` are the answer's ids where our own Generation decoded it (empty for llama.cpp's C++
    programs and llama-cpp-python's prompt lookup, which count their tokens in ``n``)."""

    decode_s: float
    tokens: list[int] = field(default_factory=list)
    n: int | None = None  # tokens decoded, for a method timed outside our Generation
    stats: dict = field(default_factory=dict)  # the decoder's stats (DecoderStats.to_dict) or a peer's counts
    identical: bool | None = None  # the same answer as plain's first round (None: not comparable)
    reused_prompt_tokens: int | None = None  # plain-cached: prompt tokens the KV cache already held
    llama_plain: Run | None = None  # pld: llama-cpp-python's own plain run, same Llama object and round

    @property
    def n_tokens(self) -> int:
        return self.n if self.n is not None else len(self.tokens)

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.decode_s if self.decode_s else 0.0

    def to_json(self) -> dict:
        """The run without its token ids (their count instead)."""
        out = {"decode_s": self.decode_s, "n_tokens": self.n_tokens, "identical": self.identical, "stats": self.stats}
        if self.reused_prompt_tokens is not None:
            out["reused_prompt_tokens"] = self.reused_prompt_tokens
        if self.llama_plain is not None:
            out["llama_plain"] = self.llama_plain.to_json()
        return out


@dataclass
class MethodRuns:
    """A method's runs of one prompt, one per round. Its answer and stats are the first round's;
    plain also keeps its top-2 logit margins and the copy bound of its answer."""

    rounds: list[Run]
    margins: list[float] = field(default_factory=list)  # plain: top-2 margin at every token
    copy_bound: float | None = None  # plain: the most a copying drafter could gain on its answer
    draft_bound: float | None = None  # plain: the same for copying plus a draft model (speed.copy_bound)
    # --breakdown: the first round's steps (``StepRecord`` dicts with their ``copy_run``, speed_steps)
    steps: list[dict] | None = None

    @property
    def first(self) -> Run:
        return self.rounds[0]

    @property
    def decode_s(self) -> float:
        return statistics.median(r.decode_s for r in self.rounds)

    def identical_rounds(self, is_plain: bool) -> list[bool | None]:
        """Plain: its later rounds against its first; any other method: every round against plain's first."""
        return [r.identical for r in (self.rounds[1:] if is_plain else self.rounds)]

    def tokens_per_s(self) -> list[float]:
        return [r.tokens_per_s for r in self.rounds]

    def ratios(self, base: MethodRuns) -> list[float]:
        """tokens/s over `base`'s, one ratio per round (rounds past either's last are dropped)."""
        return [r.tokens_per_s / b.tokens_per_s if b.tokens_per_s else 0.0
                for r, b in zip(self.rounds, base.rounds, strict=False)]

    def to_json(self) -> dict:
        out = {**self.first.to_json(), "decode_s": self.decode_s,
               "rounds": [{"decode_s": r.decode_s, "n_tokens": r.n_tokens, "identical": r.identical}
                          for r in self.rounds]}
        if self.copy_bound is not None:
            out["copy_bound"] = self.copy_bound
        if self.draft_bound is not None:
            out["draft_bound"] = self.draft_bound
        if self.steps is not None:
            out["steps"] = self.steps
        return out


@dataclass
class SpeedRow:
    """One prompt: every method's runs, plain's among them."""

    prompt: int
    prompt_tokens: int
    methods: dict[str, MethodRuns]

    @property
    def plain(self) -> MethodRuns:
        return self.methods["plain"]

    def to_json(self) -> dict:
        """The row for ``--json``, without the bulky token and margin lists."""
        return {"prompt": self.prompt, "prompt_tokens": self.prompt_tokens,
                **{m: runs.to_json() for m, runs in self.methods.items()}}


@dataclass
class SuiteRuns:
    """A suite's rows and the batched-vs-single logit noise bound measured over them."""

    rows: list[SpeedRow]
    noise: dict[str, float]
