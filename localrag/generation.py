"""Token selection and the streaming text loop shared by every decoding mode.

A *decoder* is a generator of accepted token lists, one list per target
forward pass (plain decoding yields one token per step, speculative decoding
yields the accepted path plus the bonus token). ``Generation`` wraps any
decoder and turns it into streamed text: UTF-8 safe across token boundaries,
stop strings, EOG tokens, the token limit, and stats.

    gen = Generation(backend, prompt_ids, plain_decoder, GenerationConfig(max_tokens=32))
    for piece in gen:
        print(piece, end="")
    print(gen.stats.decode_tps)
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from localrag.backends.base import Backend
from localrag.config import GenerationConfig


class Sampler:
    """Turns logits into the next token: argmax when greedy, else seeded sampling.

    ``distribution`` exposes the exact target distribution p'(x) after
    temperature, top-k and top-p; speculative acceptance uses it so that
    sampling with speculation draws from the same distribution as without.
    """

    def __init__(self, config: GenerationConfig):
        self.config = config
        self.rng = np.random.default_rng(config.seed)

    @property
    def greedy(self) -> bool:
        return self.config.greedy

    def distribution(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, probabilities) of the non-zero part of p'(x); probabilities sum to 1."""
        cfg = self.config
        if cfg.greedy:
            return np.array([int(np.argmax(logits))]), np.array([1.0])
        scaled = logits.astype(np.float64) / cfg.temperature
        if 0 < cfg.top_k < scaled.shape[0]:
            ids = np.argpartition(-scaled, cfg.top_k - 1)[: cfg.top_k]
        else:
            ids = np.arange(scaled.shape[0])
        z = scaled[ids]
        probs = np.exp(z - z.max())
        probs /= probs.sum()
        if cfg.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            cum = np.cumsum(probs[order])
            # smallest set with mass >= top_p (1e-9 absorbs rounding in the cumulative sum)
            keep = order[: int(np.searchsorted(cum, cfg.top_p - 1e-9) + 1)]
            ids, probs = ids[keep], probs[keep] / probs[keep].sum()
        return ids, probs

    def pick(self, logits: np.ndarray) -> int:
        if self.config.greedy:
            return int(np.argmax(logits))
        ids, probs = self.distribution(logits)
        return int(ids[self.rng.choice(len(ids), p=probs)])


# A decoder: (backend, context token ids, logits after the context, sampler) -> accepted token lists.
# A decoder may also have a ``prefill(context)`` method: its own prompt work (a draft model's
# prefill), run and timed with the target's prefill rather than the decode; and a
# ``set_limit(n)`` method: the most tokens the answer can still take before its next step (so a
# speculative decoder drafts no further than the answer can go).
Decoder = Callable[[Backend, list[int], np.ndarray, Sampler], Iterator[list[int]]]


def plain_decoder(backend: Backend, context: list[int], logits: np.ndarray, sampler: Sampler) -> Iterator[list[int]]:
    """One target forward pass per token. The last token is never decoded needlessly:
    the generator only runs the next forward pass when asked for the next token."""
    while True:
        token = sampler.pick(logits)
        yield [token]
        logits = backend.decode_one(token)


@dataclass
class GenerationStats:
    """What one answer cost. Speculative decoders add their own fields to `extra`."""

    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0
    generated_tokens: int = 0
    steps: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    stop_reason: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def prefill_tps(self) -> float:
        n = self.prompt_tokens - self.reused_prompt_tokens
        return n / self.prefill_seconds if self.prefill_seconds > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.generated_tokens / self.steps if self.steps else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(prefill_tps=self.prefill_tps, decode_tps=self.decode_tps, tokens_per_step=self.tokens_per_step)
        return d


class TextAssembler:
    """Token bytes in, safe text out: whole UTF-8 characters only, stop strings cut.

    Text that might be the beginning of a stop string is held back until it is
    clear it is not; on a stop string everything from it on is dropped.
    """

    def __init__(self, stop: Sequence[str] = ()):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._pending = ""
        self.text = ""  # everything emitted so far
        self.stopped = False

    def feed(self, piece: bytes) -> str:
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(piece)
        for s in self._stop:
            at = self._pending.find(s)
            if at >= 0:
                self.stopped = True
                return self._emit(self._pending[:at])
        if not self._stop:
            return self._emit(self._pending)
        cut = len(self._pending) - self._hold
        return self._emit(self._pending[:cut]) if cut > 0 else ""

    def _emit(self, out: str) -> str:
        self._pending = self._pending[len(out) :] if not self.stopped else ""
        self.text += out
        return out

    def finish(self) -> str:
        if self.stopped:
            return ""
        return self._emit(self._pending + self._decoder.decode(b"", final=True))


class Generation:
    """Iterate to stream text; afterwards `.text`, `.tokens` and `.stats` hold the result."""

    def __init__(
        self,
        backend: Backend,
        prompt_tokens: list[int],
        decoder: Decoder,
        config: GenerationConfig,
        decoder_stats: dict | None = None,
    ):
        self.backend = backend
        self.prompt_tokens = list(prompt_tokens)
        self.decoder = decoder
        self.config = config
        self.tokens: list[int] = []
        self.stats = GenerationStats(prompt_tokens=len(prompt_tokens))
        self._decoder_stats = decoder_stats  # filled by the decoder while it runs
        self._assembler = TextAssembler(config.stop)

    @property
    def text(self) -> str:
        return self._assembler.text

    def __iter__(self) -> Iterator[str]:
        be, cfg, stats = self.backend, self.config, self.stats
        t0 = time.perf_counter()
        logits = backend_sync(be, self.prompt_tokens, stats)
        decoder_prefill = getattr(self.decoder, "prefill", None)
        if decoder_prefill is not None:
            decoder_prefill(self.prompt_tokens)
        t1 = time.perf_counter()
        stats.prefill_seconds = t1 - t0
        set_limit = getattr(self.decoder, "set_limit", None)
        if set_limit is not None:
            set_limit(cfg.max_tokens)
        steps = self.decoder(be, self.prompt_tokens, logits, Sampler(cfg))
        stats.stop_reason = "length"
        try:
            for accepted in steps:
                stats.steps += 1
                for tok in accepted:
                    if be.is_eog(tok):
                        stats.stop_reason = "eog"
                        break
                    self.tokens.append(tok)
                    stats.generated_tokens += 1
                    piece = self._assembler.feed(be.token_bytes(tok))
                    if piece:
                        yield piece
                    if self._assembler.stopped:
                        stats.stop_reason = "stop"
                        break
                    if len(self.tokens) >= cfg.max_tokens:
                        break
                if stats.stop_reason != "length" or len(self.tokens) >= cfg.max_tokens:
                    break
                if set_limit is not None:
                    set_limit(cfg.max_tokens - len(self.tokens))
        finally:
            steps.close()
            stats.decode_seconds = time.perf_counter() - t1
            if self._decoder_stats is not None:
                stats.extra.update(self._decoder_stats)
        tail = self._assembler.finish()
        if tail:
            yield tail

    def run(self) -> Generation:
        """Consume the stream; return self (for non-streaming callers)."""
        for _ in self:
            pass
        return self


def backend_sync(backend: Backend, prompt: list[int], stats: GenerationStats | None = None) -> np.ndarray:
    """Make the committed context equal `prompt`, reusing the longest common prefix
    already in the KV cache (chat turns), and return the logits after it."""
    history = backend.tokens
    common = 0
    for a, b in zip(history, prompt, strict=False):
        if a != b:
            break
        common += 1
    common = min(common, len(prompt) - 1)  # always evaluate >= 1 token to get fresh logits
    backend.truncate(common)
    if stats is not None:
        stats.reused_prompt_tokens = common
    return backend.prefill(prompt[common:])
