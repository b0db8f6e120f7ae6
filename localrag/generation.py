"""Token selection and the streaming text loop shared by every decoding mode.

A *decoder* is a generator of accepted token lists, one list per target
forward pass (plain decoding yields one token per step, speculative decoding
yields the accepted path plus the bonus token). ``Generation`` wraps any
decoder and turns it into streamed text: UTF-8 safe across token boundaries,
stop strings, EOG tokens, the token limit, and stats.

    gen = Generation(backend, prompt_ids, PlainDecoder(), GenerationConfig(max_tokens=32))
    for piece in gen:
        print(piece, end="")
    print(gen.stats.decode_tps)
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from localrag.backends.base import Backend
from localrag.backends.chunk_reuse import ChunkReuse, common_prefix, kept_prefix
from localrag.config import GenerationConfig
from localrag.repetition import RepetitionGuard
from localrag.results import GenerationStats, RasdStats

READ_STEP = 128  # prompt tokens per piece while ``Generation.read`` reports progress


def token_logprob(row: np.ndarray, token: int) -> float:
    """log softmax(row)[token], computed stably in float64."""
    r = row.astype(np.float64)
    mx = r.max()
    return float(r[token] - mx - np.log(np.exp(r - mx).sum()))


class Sampler:
    """Turns logits into the next token: argmax when greedy, else seeded sampling.

    ``distribution`` exposes the exact target distribution p'(x) after
    temperature, top-k and top-p; speculative acceptance uses it so that
    sampling with speculation draws from the same distribution as without.
    """

    def __init__(self, config: GenerationConfig):
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        # log p(token) under the model's own distribution (before temperature, top-k, top-p) of
        # every token chosen, in order: the answer's confidence (``GenerationStats.mean_logprob``)
        self.logprobs: list[float] = []

    def note(self, logits: np.ndarray, token: int) -> None:
        """Record that ``token`` was chosen from ``logits`` (``token_logprob``; ~1.4 ms for 152k
        logits against a forward of tens). Every decoder notes each token it emits (``pick`` does
        it for the tokens it picks)."""
        self.logprobs.append(token_logprob(logits, token))

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
        """The next token (noted, see ``note``)."""
        if self.config.greedy:
            token = int(np.argmax(logits))
        else:
            ids, probs = self.distribution(logits)
            token = int(ids[self.rng.choice(len(ids), p=probs)])
        self.note(logits, token)
        return token


class Decoder(Protocol):
    """A decoding strategy: turns the target's logits into accepted token lists, one list per
    target forward (plain decoding: one token; speculative decoding: the accepted path plus the
    bonus token). Subclass it: ``prefill`` and ``set_limit`` are no-ops unless overridden, and
    ``stats`` is None unless the decoder keeps its own (RASD's ``RasdStats``)."""

    stats: RasdStats | None = None

    def prefill(self, context: list[int], read: int) -> None:
        """The decoder's own prompt work (a draft model's prefill), run and timed with the target's
        prefill rather than the decode. ``read``: how many of the context's last tokens the target
        has just read (the others came from its KV cache)."""

    def set_limit(self, n_tokens: int) -> None:
        """The answer can take at most ``n_tokens`` more tokens (so a speculative decoder drafts no
        further than the answer can go). Called first before ``prefill``, then after every step."""

    def steps(self, backend: Backend, context: list[int], logits: np.ndarray,
              sampler: Sampler) -> Iterator[list[int]]:
        """Accepted token lists, one per target forward; ``logits`` are the target's after ``context``.
        Every token yielded is noted on the sampler with the logits it was chosen from (``Sampler.note``;
        ``Sampler.pick`` does it)."""
        ...


class PlainDecoder(Decoder):
    """One target forward pass per token. The last token is never decoded needlessly: the
    generator only runs the next forward pass when asked for the next token."""

    def steps(self, backend: Backend, context: list[int], logits: np.ndarray,
              sampler: Sampler) -> Iterator[list[int]]:
        while True:
            token = sampler.pick(logits)
            yield [token]
            logits = backend.decode_one(token)


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

    @property
    def decoded(self) -> str:
        """Every whole character decoded so far, including text held back for a possible stop string."""
        return self.text + self._pending

    def finish(self) -> str:
        if self.stopped:
            return ""
        return self._emit(self._pending + self._decoder.decode(b"", final=True))


class Generation:
    """Iterate to stream text; afterwards `.text`, `.tokens` and `.stats` hold the result.

    With ``config.repetition`` (the default) every emitted token also goes through the repetition
    guard (``localrag.repetition``): on a looping repeat the answer ends where the repeat began,
    ``stats.stop_reason`` is ``"repetition"``, and the streamed text never held the repeat.
    ``.text`` is what was streamed; ``.tokens`` every token decoded (the repeat included).
    """

    def __init__(
        self,
        backend: Backend,
        prompt_tokens: list[int],
        decoder: Decoder,
        config: GenerationConfig,
        reuse: ChunkReuse | None = None,
    ):
        self.backend = backend
        self.reuse = reuse  # the approximate prefill (chunks' KV from a cache); None: exact
        self.prompt_tokens = list(prompt_tokens)
        self.decoder = decoder
        self.config = config
        self.tokens: list[int] = []
        self.stats = GenerationStats(prompt_tokens=len(prompt_tokens))
        self._assembler = TextAssembler(config.stop)
        self._guard = RepetitionGuard(config.repetition) if config.repetition is not None else None
        self._written = ""  # the assembler's output so far (stop strings cut)
        self._text = ""  # the part of it released to the reader
        self._logits: np.ndarray | None = None  # after the prompt, once ``read`` has read it

    def read(self) -> Iterator[tuple[int, int]]:
        """Read the prompt into the KV cache (what iterating does first), in pieces, yielding
        (tokens read, tokens to read) after each piece, so a caller can show how far a long prompt
        has got. The longest common prefix with the cache is kept, as ever (up to where the cache
        was built otherwise than this prefill builds: ``kept_prefix``). Pieces of READ_STEP
        tokens where the backend is batch-invariant (the same logits however the prompt is cut),
        else of its ``n_batch``, the pieces its own prefill makes: the same answer either way.
        With ``reuse``, the retrieved chunks' KV comes from their cache (approximate)."""
        be, stats = self.backend, self.stats
        t0 = time.perf_counter()
        planned = self.reuse.planned(len(self.prompt_tokens)) if self.reuse is not None else []
        reused = kept_prefix(be.placed, planned, common_prefix(be.tokens, self.prompt_tokens))
        be.truncate(reused)
        stats.reused_prompt_tokens = reused
        step = READ_STEP if be.deterministic else be.n_batch
        try:  # a reader that stops early (a refusal judged before the end) still gets the seconds
            if self.reuse is not None:
                yield from self.reuse.read(be, self.prompt_tokens, step)
                self._logits = self.reuse.logits
                stats.placed_prompt_tokens = self.reuse.stats.placed_tokens
                stats.computed_prompt_tokens = self.reuse.stats.computed_tokens
            else:
                todo = self.prompt_tokens[reused:]
                for start in range(0, len(todo), step):
                    self._logits = be.prefill(todo[start:start + step])
                    yield min(start + step, len(todo)), len(todo)
        finally:
            stats.prefill_seconds = time.perf_counter() - t0

    @property
    def text(self) -> str:
        return self._text

    def _release(self, upto: int) -> str:
        """The written text not yet released, up to character ``upto``."""
        piece = self._written[len(self._text):max(upto, len(self._text))]
        self._text += piece
        return piece

    def __iter__(self) -> Iterator[str]:
        be, cfg, stats = self.backend, self.config, self.stats
        if self._logits is None:
            for _ in self.read():
                pass
        logits = self._logits
        self.decoder.set_limit(cfg.max_tokens)  # before its prefill, which may weigh the answer's length
        t0 = time.perf_counter()
        self.decoder.prefill(self.prompt_tokens, len(self.prompt_tokens) - stats.reused_prompt_tokens)
        t1 = time.perf_counter()
        stats.prefill_seconds += t1 - t0
        sampler = Sampler(cfg)
        steps = self.decoder.steps(be, self.prompt_tokens, logits, sampler)
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
                    self._written += self._assembler.feed(be.token_bytes(tok))
                    hold = len(self._written)
                    if self._guard is not None:
                        self._guard.push(tok, self._assembler.decoded)
                        hold = self._guard.hold
                        if self._guard.fired:  # the answer ends where the repeat began
                            self._written = self._assembler.decoded[:hold]
                            stats.stop_reason = "repetition"
                    piece = self._release(hold)
                    if piece:
                        yield piece
                    if stats.stop_reason == "repetition":
                        break
                    if self._assembler.stopped:
                        stats.stop_reason = "stop"
                        break
                    if len(self.tokens) >= cfg.max_tokens:
                        break
                if stats.stop_reason != "length" or len(self.tokens) >= cfg.max_tokens:
                    break
                self.decoder.set_limit(cfg.max_tokens - len(self.tokens))
        finally:
            steps.close()
            stats.decode_seconds = time.perf_counter() - t1
            stats.decoder = self.decoder.stats
            # the tokens kept, and the end-of-generation token where the model chose to stop
            chosen = sampler.logprobs[:len(self.tokens) + (stats.stop_reason == "eog")]
            stats.mean_logprob = float(np.mean(chosen)) if chosen else None
        if stats.stop_reason != "repetition":
            self._written += self._assembler.finish()
            if self._guard is not None:  # the end ends the last sentence: it may repeat an earlier one
                self._guard.finish()
                if self._guard.fired:  # (held back, never shown: ``hold`` kept it so)
                    self._written = self._written[:self._guard.cut]
                    stats.stop_reason = "repetition"
        tail = self._release(len(self._written))
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
    common = kept_prefix(backend.placed, [], common_prefix(backend.tokens, prompt))
    backend.truncate(common)
    if stats is not None:
        stats.reused_prompt_tokens = common
    return backend.prefill(prompt[common:])
