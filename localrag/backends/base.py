"""The contract every target/draft backend implements (llama.cpp, transformers).

A backend owns one model and one KV cache. The cache holds the *committed*
context (``n_past`` tokens). On top of it a token tree can be evaluated in one
forward pass without committing it, and afterwards one root-to-node path of
that tree is committed:

    logits = be.prefill(prompt_ids)          # (V,) logits after the last prompt token
    rows   = be.eval_tree(tokens, parents)   # (n, V) logits after each tree node
    be.commit_path([0, 3, 4])                # keep nodes 0 -> 3 -> 4, drop the rest

``parents[i]`` is the index of node i's parent inside the tree, or -1 for a
child of the committed context; parents come before children. Plain decoding
is the one-node tree ``eval_tree([tok], [-1])`` followed by ``commit_path([0])``.

Logits arrays returned by a backend may be views into the backend's own
buffers: they are valid until the next call on that backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from localrag.config import ModelConfig
from localrag.models import ModelSpec


class Backend(ABC):
    """One loaded model with a KV cache. See the module docstring for the protocol."""

    name: str
    n_vocab: int
    n_ctx: int
    tokens: list[int]  # the committed context, in KV order
    config: ModelConfig  # how it was loaded
    model_spec: ModelSpec | None  # the resolved model file/folder (None: wrapped in-process, tests)
    n_batch: int = 512  # most tokens one forward may hold (a verified tree included)
    max_leaves: int = 1 << 30  # most leaves a verified tree may have (llama.cpp: its KV sequences)
    # a token's logits are the same bits however its context was batched (prompt cache, prefill
    # chunks, tree verification), so greedy decoding gives the same tokens in every mode
    deterministic: bool = False
    # positions [a, b) of the committed context whose KV was placed from a chunk cache
    # (``localrag.backends.chunk_reuse``): approximate, so an exact prefill never keeps them
    placed: Sequence[tuple[int, int]] = ()

    @property
    def add_bos(self) -> bool:
        """Whether ``tokenize(add_special=True)`` puts BOS in front."""
        return True

    @property
    def device_label(self) -> str:
        """Where the model runs, for cost caches and messages ("cpu", "cuda:0", "gpu layers 99")."""
        return "cpu"

    @property
    def build_label(self) -> str:
        """The kernels' build (library version and CPU/GPU features), for cost caches: a rebuild
        with other flags changes T(k). "" where nothing is known."""
        return ""

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    # --- vocabulary -----------------------------------------------------------
    @abstractmethod
    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Text -> token ids. add_special adds BOS where the model wants one."""

    @abstractmethod
    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """Raw bytes of one token's piece (may be a partial UTF-8 character); special: render
        control tokens (BOS, EOS, ...) as their text instead of nothing."""

    @abstractmethod
    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, ...)."""

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        """The model's own chat template (Jinja), if it ships one."""
        return None

    def meta(self, key: str) -> str | None:
        """A metadata value of the model file (GGUF keys, e.g. ``tokenizer.ggml.bos_token_id``)."""
        return None

    def vocab_pieces(self) -> list[bytes]:
        """Every token's bytes, in id order; used to check draft/target vocabulary identity."""
        return [self.token_bytes(t) for t in range(self.n_vocab)]

    # --- KV cache -------------------------------------------------------------
    @abstractmethod
    def reset(self) -> None:
        """Forget the committed context (n_past = 0)."""

    @abstractmethod
    def truncate(self, n_keep: int) -> None:
        """Drop committed tokens from position n_keep on (reuse a shared prompt prefix)."""

    @abstractmethod
    def prefill(self, tokens: Sequence[int]) -> np.ndarray:
        """Append tokens to the committed context; return (V,) logits after the last one."""

    @abstractmethod
    def eval_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Evaluate a token tree on top of the committed context in one forward pass.

        Returns (n, V) logits: row i is the next-token distribution after node i.
        Nothing is committed until commit_path().
        """

    @abstractmethod
    def commit_path(self, path: Sequence[int]) -> None:
        """Commit the tree nodes `path` (root-to-node, indices into the last eval_tree)."""

    def decode_one(self, token: int) -> np.ndarray:
        """Append one token and return (V,) logits after it (the plain-decoding step)."""
        row = self.eval_tree([token], [-1])[0]
        self.commit_path([0])
        return row

    def hidden_states(self) -> dict[int, np.ndarray]:
        """The last prefill's hidden states of its last token, by layer (``ModelConfig.hidden_layers``;
        -1: the final norm); empty where the backend cannot read them."""
        return {}

    def hidden_states_after(self, n_keep: int, tokens: Sequence[int]) -> dict[int, np.ndarray]:
        """The hidden states of the last of ``tokens`` read after the first ``n_keep`` committed
        tokens, leaving the committed context as it was; empty where the backend cannot."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free native resources (optional)."""


@runtime_checkable
class BatchBackend(Protocol):
    """A backend that decodes several independent KV sequences in one forward pass (llama.cpp).
    Grounded mode drafts all its answers concurrently this way."""

    n_batch: int

    @property
    def add_bos(self) -> bool: ...

    def decode_batch(self, tokens: Sequence[int], positions: Sequence[int], seq_ids: Sequence[int],
                     outputs: Sequence[bool]) -> np.ndarray:
        """Decode (token, position, sequence) entries in one forward; (n_wanted, V) logits rows."""

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Share the KV cells of sequence ``src`` in positions [p0, p1) with sequence ``dst``."""

    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> bool:
        """Forget sequence ``seq``'s KV cells in positions [p0, p1) (p1 = -1: to the end)."""

    def reset(self) -> None: ...

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]: ...

    def token_bytes(self, token: int, special: bool = False) -> bytes: ...

    def is_eog(self, token: int) -> bool: ...
