"""llama.cpp backend on llama-cpp-python's low-level C API.

We create the context ourselves (the high-level ``Llama`` class cannot
verify a token tree): ``n_seq_max`` KV sequences in one *unified* KV cache, so
one ``llama_decode`` can hold a whole tree, one sequence per leaf.

Tree layout (docs/design.md, "Backends"): number the leaves 0..L-1; node i goes in the batch
with ``pos = n_past + depth(i)`` and ``seq_id = {leaves below i}``. Sequence 0
is the committed context, copied (by reference, it is a unified cache) to
sequences 1..L-1 before the decode. Committing a path that ends above leaf s:

    seq_rm(s, n_past + len(path), -1)   # leaf s's chain is prefix + path + rest
    seq_rm(0, n_past); seq_cp(s, 0)      # rename s -> 0
    seq_rm(t) for every other leaf t     # drop every other branch

Same answer every time (``ModelConfig.deterministic``, on by default on the CPU): a token's
logits are a function of its context alone, not of how the context was batched (prompt cache,
prefill chunks, tree verification). Two things make that so, both measured:

* Batch-invariant kernels. ggml's CPU backend picks kernels by batch shape, and three of its
  choices round differently from the one-token path: flash attention splits the KV range over
  threads for a single query (>= 512 cells) and tiles batches of >= 64 queries; weights
  repacked for AVX2 (Q4_K) use a 4-row GEMM beside the one-row GEMV; and K-quant weights take a
  tiled GEMM from 8 rows. With a bf16 V cache (K stays f16: the split and tiled attention paths
  need both f16), the tiled GEMM switched off (``GGML_CPU_TILED_MM=0``) and repacked weights
  multiplied as by the 4-row GEMM alone (``GGML_CPU_REPACK_INVARIANT=1``, our patch to llama.cpp:
  ``scripts/patches/``; on AVX-512 its Q4_K rows by a kernel of ours that gives that GEMM's bits
  at a fraction of its work; an unpatched build goes without repacked weights instead, and so
  does a Q4_K file on a build without that kernel, whose one-token steps would pay the whole
  4-row GEMM), every row is one sequential pass over its KV cells and the same dot products,
  whatever the batch. Both switches are read once per process.
* KV cells in position order. Attention sums a row's visible cells in cell order, and llama.cpp
  puts new tokens in the lowest free cells. So the cache is kept packed: the committed context
  and nothing else fills cells 0..frontier-1, except rejected tree nodes that sit below the last
  accepted one, which stay *pinned* in a reserved sequence (never visible) instead of leaving
  holes that a later token would fill out of order. Pinned cells go when a truncation keeps none
  of the context they were interleaved with, else by compaction (seq 0's cells copied out and
  back in order, ``llama_state_seq_get/set_data``).

    be = LlamaCppBackend(ModelConfig())
    logits = be.prefill(be.tokenize("Hello", add_special=True))
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Sequence
from pathlib import Path

import llama_cpp as lc
import numpy as np

from localrag.backends.base import Backend
from localrag.backends.chunk_reuse import SCRATCH
from localrag.backends.hidden import HiddenTap
from localrag.config import ModelConfig
from localrag.models import ModelError, ModelSpec, read_gguf_header, resolve

_LOG_SINK: list = []  # the installed log callback: a reference must live as long as C holds the pointer


def _silence_llama_log() -> None:
    """Route llama.cpp's C logging to nowhere (it is very chatty on stderr)."""
    if not _LOG_SINK:
        _LOG_SINK.append(lc.llama_log_callback(lambda level, text, user_data: None))
        lc.llama_log_set(_LOG_SINK[0], ctypes.c_void_p(0))


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


GGML_TYPE_BF16 = 30  # ggml.h's enum value; llama_cpp exports no constant for it


# Our patch's switch (``scripts/patches/``): ggml reads it once per process, at the first product
# of repacked weights, so it is set before any: every context of a localrag process, deterministic
# or not, multiplies repacked weights the same way. ``GGML_CPU_REPACK_INVARIANT=0`` turns it off
# (the deterministic contexts then go without repacked weights).
os.environ.setdefault("GGML_CPU_REPACK_INVARIANT", "1")


Q4_K_FILE_TYPES = (14, 15)  # GGUF general.file_type: Q4_K_S, Q4_K_M


@functools.cache
def _ggml_cpu() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(str(Path(lc.__file__).parent / "lib" / "libggml-cpu.so"))
    except OSError:  # another layout (Windows, dynamic backends)
        return None


@functools.cache
def _repack_invariant() -> int:
    """The version of our patch's batch-invariant kernels for repacked weights that this llama.cpp
    runs (found by its symbol in ggml's CPU library): 0 unpatched or with the switch off. A new
    version computes the same bits at another speed, so it is part of ``build_label`` (cost curves
    are measured per build)."""
    switch = getattr(_ggml_cpu(), "ggml_cpu_repack_batch_invariant", None)
    return int(switch()) if switch is not None else 0


@functools.cache
def _q4_k_row_kernel() -> bool:
    """Whether our patch's Q4_K row kernel is built (AVX-512 builds): one row at the 4-row GEMM's
    bits for a fraction of its work."""
    return hasattr(_ggml_cpu(), "ggml_gemm_q4_K_8x8_q8_K_rows")


def _batch_invariant_kernels(mparams, cparams, repack: bool | None, q4_k: bool) -> bool:
    """Model and context params under which every row's logits are independent of the batch
    (module docstring). Whether repacked weights were kept. The tiled GEMM's switch is an
    environment variable ggml reads once, at the first matrix product of the process; a process
    that ran one already keeps its choice."""
    os.environ.setdefault("GGML_CPU_TILED_MM", "0")
    cparams.type_v = GGML_TYPE_BF16  # K f16, V bf16: flash attention's per-row sequential path only
    cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
    # repacked weights only where every row is multiplied as by the same 4-row GEMM (our patch):
    # upstream's GEMM and GEMV round differently. By default a Q4_K file only with the patch's row
    # kernel: without it every one-token step pays the whole 4-row GEMM (on an AVX2 CPU the 1.5B
    # wrote at 0.39x and read at 0.87x its speed without repacked weights; docs/benchmarks.md)
    pays = repack if repack is not None else not q4_k or _q4_k_row_kernel()
    mparams.use_extra_bufts = pays and _repack_invariant() > 0
    return mparams.use_extra_bufts


class LlamaCppBackend(Backend):
    """A GGUF model in llama.cpp with a tree-capable, unified KV cache."""

    def __init__(self, config: ModelConfig, spec: ModelSpec | None = None, verbose: bool = False):
        self._ctx = None  # set once the context exists; close() frees only what was made
        spec = spec or resolve(config.model)
        if spec.format != "gguf":
            raise ModelError(f"{spec.path}: the llama.cpp backend needs a .gguf file, got a {spec.format} model folder")
        if not verbose:
            _silence_llama_log()
        lc.llama_backend_init()
        self.config = config
        self.model_spec = spec
        self.name = spec.name

        mparams = lc.llama_model_default_params()
        offload = lc.llama_supports_gpu_offload()
        mparams.n_gpu_layers = (999 if config.n_gpu_layers < 0 else config.n_gpu_layers) if offload else 0
        self.gpu_layers = mparams.n_gpu_layers
        self.n_threads = config.n_threads or default_threads()
        # the batch-invariance analysis is of ggml's CPU kernels: a GPU build keeps its own numerics
        self.deterministic = config.deterministic and not self.gpu_layers
        if self.deterministic and config.flash_attn is False:
            raise ModelError("deterministic decoding needs flash attention: set flash_attn=None or deterministic=False")
        cparams = lc.llama_context_default_params()
        if self.deterministic:
            q4_k = read_gguf_header(spec.path)[0].get("general.file_type") in Q4_K_FILE_TYPES
            self.repacked = _batch_invariant_kernels(mparams, cparams, config.repack, q4_k)
        else:
            self.repacked = mparams.use_extra_bufts = config.repack is not False
        self._model = lc.llama_model_load_from_file(str(spec.path).encode(), mparams)
        if not self._model:
            raise ModelError(f"{spec.path}: llama.cpp could not load this model (unsupported architecture or corrupt tensors)")
        self._vocab = lc.llama_model_get_vocab(self._model)
        self.n_vocab = lc.llama_vocab_n_tokens(self._vocab)

        threads = self.n_threads
        cparams.n_ctx = config.n_ctx
        cparams.n_batch = config.n_batch
        cparams.n_ubatch = config.n_batch
        cparams.n_seq_max = config.n_seq_max
        cparams.kv_unified = True
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        if config.flash_attn is not None and not self.deterministic:
            cparams.flash_attn_type = (
                lc.LLAMA_FLASH_ATTN_TYPE_ENABLED if config.flash_attn else lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        self._tap = HiddenTap(config.hidden_layers) if config.hidden_layers else None
        if self._tap is not None:
            self._tap.install(cparams)
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lc.llama_model_free(self._model)
            raise ModelError(f"{spec.path}: could not create a llama.cpp context (n_ctx={config.n_ctx}; out of memory?)")
        self.n_ctx = lc.llama_n_ctx(self._ctx)
        self.n_batch = config.n_batch
        self.max_leaves = config.n_seq_max - 1  # the last sequence holds the pinned cells
        self._pin_seq = config.n_seq_max - 1
        self._mem = lc.llama_get_memory(self._ctx)
        self._batch = lc.llama_batch_init(self.n_batch, 0, config.n_seq_max)
        self._pieces: dict[tuple[int, bool], bytes] = {}
        self.tokens: list[int] = []  # the committed context, in KV sequence 0
        self._tree_tokens: list[int] = []  # the last eval_tree, until commit_path
        self._tree_depth: list[int] = []  # for the last eval_tree: each node's depth
        self._tree_leaf_of: list[int] = []  # for the last eval_tree: one leaf (seq id) below each node
        self._tree_leaves = 0
        self.n_pinned = 0  # rejected tree nodes pinned below the frontier (module docstring)
        self._pinned_since = 0  # n_past of the first tree step that pinned a cell
        self.placed: list[tuple[int, int]] = []  # positions [a, b) placed from a chunk cache (chunk_reuse)

    # --- vocabulary -------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        key = (token, special)
        piece = self._pieces.get(key)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = lc.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lc.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
            piece = buf.raw[:n]
            self._pieces[key] = piece
        return piece

    def vocab_pieces(self) -> list[bytes]:
        return [self.token_bytes(t, special=True) for t in range(self.n_vocab)]

    def is_eog(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self._vocab, token))

    @property
    def add_bos(self) -> bool:
        return bool(lc.llama_vocab_get_add_bos(self._vocab))

    @property
    def device_label(self) -> str:
        return f"gpu layers {self.gpu_layers}" if self.gpu_layers else "cpu"

    @property
    def build_label(self) -> str:
        info = lc.llama_print_system_info().decode("utf-8", errors="replace")
        return f"llama.cpp {lc.__version__} {info.strip()} repacked={self.repacked} invariant={_repack_invariant()}"

    def chat_template(self) -> str | None:
        tmpl = lc.llama_model_chat_template(self._model, None)
        return tmpl.decode("utf-8") if tmpl else None

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        n = lc.llama_model_meta_val_str(self._model, key.encode(), buf, 4096)
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    # --- KV sequence operations (exposed for drafters and tests) -----------------
    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> bool:
        return bool(lc.llama_memory_seq_rm(self._mem, seq, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        lc.llama_memory_seq_cp(self._mem, src, dst, p0, p1)

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Move sequence ``seq``'s cells in positions [p0, p1) by ``delta`` (RoPE keys are re-rotated
        at the next decode: the K-shift)."""
        lc.llama_memory_seq_add(self._mem, seq, p0, p1, delta)

    def seq_pos_max(self, seq: int) -> int:
        return int(lc.llama_memory_seq_pos_max(self._mem, seq))

    @property
    def can_shift(self) -> bool:
        return bool(lc.llama_memory_can_shift(self._mem))

    def seq_state(self, seq: int) -> bytes:
        """Sequence ``seq``'s KV cells (positions, keys, values) as bytes (``llama_state_seq_get_data``)."""
        size = lc.llama_state_seq_get_size(self._ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        n = lc.llama_state_seq_get_data(self._ctx, buf, size, seq)
        return bytes(buf[:n])

    def set_seq_state(self, seq: int, data: bytes) -> None:
        """Replace sequence ``seq``'s cells by ``data`` from ``seq_state`` (in the lowest free cells, at
        the positions they were saved at)."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if lc.llama_state_seq_set_data(self._ctx, buf, len(data), seq) != len(data):
            raise RuntimeError("llama.cpp could not load a saved KV sequence (another model or build?)")

    def adopt(self, seq: int, tokens: Sequence[int], placed: bool = True) -> None:
        """Make sequence ``seq``'s cells after the committed context part of it (they hold ``tokens``
        at positions n_past..), and free ``seq``. ``placed``: their KV came from a cache."""
        start = self.n_past
        self.seq_cp(seq, 0, -1, -1)
        self.seq_rm(seq, -1, -1)
        self.tokens.extend(tokens)
        if placed:
            self.placed.append((start, self.n_past))

    def reset(self) -> None:
        lc.llama_memory_clear(self._mem, True)
        self.tokens = []
        self._tree_leaf_of = []
        self.n_pinned = 0
        self.placed = []

    def truncate(self, n_keep: int) -> None:
        if n_keep < self.n_past:
            self.seq_rm(0, n_keep, -1)
            del self.tokens[n_keep:]
            self.placed = [(a, min(b, n_keep)) for a, b in self.placed if a < n_keep]
            if self.n_pinned and n_keep <= self._pinned_since:
                # every pinned cell lies above every kept one: freeing them leaves the cache packed
                self.seq_rm(self._pin_seq, -1, -1)
                self.n_pinned = 0
            elif self.n_pinned:
                self.compact()

    def compact(self) -> None:
        """Move the committed context to cells 0..n_past-1 in order and drop the pinned cells: copy
        sequence 0's cells (K, V, positions) out and back into an empty cache. A memory copy of the
        KV (23 KB per token of SmolLM2-135M); it runs at most once per turn of a conversation, or
        when pinned cells fill the cache."""
        size = lc.llama_state_seq_get_size(self._ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = lc.llama_state_seq_get_data(self._ctx, buf, size, 0)
        lc.llama_memory_clear(self._mem, False)
        if self.tokens and lc.llama_state_seq_set_data(self._ctx, buf, n, 0) != n:
            raise RuntimeError("llama.cpp could not restore the KV cache while compacting it")
        self.n_pinned = 0

    # --- decoding ---------------------------------------------------------------
    def _decode(self, n_tokens: int) -> None:
        self._batch.n_tokens = n_tokens
        rc = lc.llama_decode(self._ctx, self._batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with code {rc} (context full? n_past={self.n_past}, n_ctx={self.n_ctx})")

    def _logits_view(self, n_rows: int) -> np.ndarray:
        """(n_rows, V) view of llama.cpp's output buffer: rows of the batch's logits=1 tokens, in order."""
        ptr = lc.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab))

    def _check_room(self, n_pos: int, n_cells: int | None = None) -> None:
        """Room for positions up to n_past + n_pos and for n_cells new KV cells (default n_pos),
        pinned cells counted; compacting first when they are what is in the way."""
        if self.n_past + n_pos > self.n_ctx:
            raise ValueError(f"context full: {self.n_past} + {n_pos} tokens > n_ctx {self.n_ctx}")
        n_cells = n_pos if n_cells is None else n_cells
        if self.n_past + self.n_pinned + n_cells > self.n_ctx:
            self.compact()
        if self.n_past + n_cells > self.n_ctx:
            raise ValueError(f"context full: {self.n_past} tokens + {n_cells} new KV cells > n_ctx {self.n_ctx}")

    def prefill(self, tokens: Sequence[int]) -> np.ndarray:
        if not tokens:
            raise ValueError("prefill needs at least one token")
        self._check_room(len(tokens))
        with self._tapping():
            self._prefill(tokens)
        return self._logits_view(1)[0]

    @contextlib.contextmanager
    def _tapping(self):
        if self._tap is None:
            yield
            return
        self._tap.clear()
        self._tap.armed = True
        try:
            yield
        finally:
            self._tap.armed = False

    def hidden_states(self) -> dict[int, np.ndarray]:
        return dict(self._tap.states) if self._tap is not None else {}

    def hidden_states_after(self, n_keep: int, tokens: Sequence[int]) -> dict[int, np.ndarray]:
        """The hidden states (as ``hidden_states``) of the last of ``tokens`` read after the first
        ``n_keep`` tokens of the committed context, in a scratch sequence that shares their cells:
        each row attends to the cells a prefill of ``self.tokens[:n_keep] + tokens`` would, with the
        same kernels. The committed context and its cells are left as they were; {} without room."""
        if self._tap is None or not tokens or not 0 <= n_keep <= self.n_past or self.max_leaves < 2:
            return {}
        if self.n_past + self.n_pinned + len(tokens) > self.n_ctx:
            return {}
        aside = SCRATCH  # the chunk cache's scratch sequence: a tree leaf's, free between decoding steps
        self.seq_rm(aside, -1, -1)
        self.seq_cp(0, aside, 0, n_keep)
        try:
            with self._tapping():
                for a in range(0, len(tokens), self.n_batch):
                    part = tokens[a:a + self.n_batch]
                    self.decode_batch(part, range(n_keep + a, n_keep + a + len(part)), [aside] * len(part),
                                      [a + i == len(tokens) - 1 for i in range(len(part))])
            return dict(self._tap.states)
        finally:
            self.seq_rm(aside, -1, -1)

    def _prefill(self, tokens: Sequence[int]) -> None:
        b = self._batch
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            last_chunk = start + self.n_batch >= len(tokens)
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = self.n_past + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = last_chunk and i == len(chunk) - 1
            self._decode(len(chunk))
            self.tokens.extend(chunk)

    def decode_one(self, token: int) -> np.ndarray:
        self._check_room(1)
        b = self._batch
        b.token[0] = token
        b.pos[0] = self.n_past
        b.n_seq_id[0] = 1
        b.seq_id[0][0] = 0
        b.logits[0] = True
        self._decode(1)
        self.tokens.append(token)
        return self._logits_view(1)[0]

    def eval_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        n = len(tokens)
        if n == 0 or n > self.n_batch:
            raise ValueError(f"tree of {n} nodes; must be 1..{self.n_batch}")
        depth, leaves_below, leaf_of, n_leaves = tree_layout(parents)
        if n_leaves > self.max_leaves:
            raise ValueError(f"tree has {n_leaves} leaves but the context has n_seq_max={self.max_leaves}")
        self._check_room(max(depth) + 1, n)
        for s in range(1, n_leaves):  # every leaf sequence starts as the committed prefix
            self.seq_cp(0, s, -1, -1)
        b = self._batch
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = self.n_past + depth[i]
            seqs = leaves_below[i]
            b.n_seq_id[i] = len(seqs)
            for j, s in enumerate(seqs):
                b.seq_id[i][j] = s
            b.logits[i] = True
        self._decode(n)
        self._tree_tokens = list(tokens)
        self._tree_depth = depth
        self._tree_leaf_of = leaf_of
        self._tree_leaves = n_leaves
        return self._logits_view(n)

    def commit_path(self, path: Sequence[int]) -> None:
        n_past, leaf_of = self.n_past, self._tree_leaf_of
        if path:
            # the tree's nodes sit in consecutive cells in batch order (the cache is packed), so the
            # rejected nodes before the path's last one would leave holes below it: pin them
            on_path = set(path)
            for i in range(path[-1]):
                if i not in on_path:
                    pos = n_past + self._tree_depth[i]
                    self.seq_cp(leaf_of[i], self._pin_seq, pos, pos + 1)  # leaf i's chain holds node i there
                    self._pinned_since = n_past if not self.n_pinned else self._pinned_since
                    self.n_pinned += 1
            s = leaf_of[path[-1]]
            self.seq_rm(s, n_past + len(path), -1)  # leaf s's chain: prefix + path + the rest below it
            if s != 0:
                self.seq_rm(0, n_past, -1)
                self.seq_cp(s, 0, n_past, -1)
            self.tokens.extend(self._tree_tokens[i] for i in path)
        else:
            self.seq_rm(0, n_past, -1)
        for t in range(1, self._tree_leaves):  # every other branch, and the prefix copies
            self.seq_rm(t, -1, -1)
        self._tree_tokens = []
        self._tree_leaf_of = []
        self._tree_leaves = 0

    def decode_batch(self, tokens: Sequence[int], positions: Sequence[int], seq_ids: Sequence[int],
                     outputs: Sequence[bool]) -> np.ndarray:
        """One llama_decode over entries of several independent KV sequences (batched drafting/scoring).

        Entry i puts ``tokens[i]`` into sequence ``seq_ids[i]`` at ``positions[i]``; the returned
        (n_out, V) view holds the logits of the entries with ``outputs[i]`` set, in order (valid until
        the next decode). The committed context (``tokens``/``n_past``) is not touched: the caller owns
        the sequences it writes and clears them afterwards (``seq_rm``/``reset``).
        """
        n = len(tokens)
        if n == 0 or n > self.n_batch:
            raise ValueError(f"batch of {n} entries; must be 1..{self.n_batch}")
        b = self._batch
        for i in range(n):
            if not 0 <= seq_ids[i] < self.max_leaves:
                raise ValueError(f"sequence id {seq_ids[i]} outside 0..{self.max_leaves - 1} (n_seq_max - 1)")
            b.token[i] = tokens[i]
            b.pos[i] = positions[i]
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq_ids[i]
            b.logits[i] = bool(outputs[i])
        self._decode(n)
        n_out = sum(1 for o in outputs if o)
        return self._logits_view(n_out) if n_out else np.zeros((0, self.n_vocab), dtype=np.float32)

    def close(self) -> None:
        if self._ctx:
            lc.llama_batch_free(self._batch)
            lc.llama_free(self._ctx)
            lc.llama_model_free(self._model)
            self._ctx = None

    def __del__(self):
        with contextlib.suppress(Exception):  # interpreter shutdown may have unloaded llama_cpp
            self.close()


def tree_layout(parents: Sequence[int]) -> tuple[list[int], list[list[int]], list[int], int]:
    """Depths, leaf sets and one leaf per node for a parents array (parents before children).

    Returns (depth[i], leaves_below[i] (sorted seq ids), leaf_of[i] (one leaf below i), n_leaves).
    Leaves are numbered 0..L-1 in node order.
    """
    n = len(parents)
    depth = [0] * n
    has_child = [False] * n
    for i, p in enumerate(parents):
        if p >= i:
            raise ValueError(f"node {i} has parent {p}: parents must come before children")
        if p >= 0:
            depth[i] = depth[p] + 1
            has_child[p] = True
    leaf_ids = {i: k for k, i in enumerate(i for i in range(n) if not has_child[i])}
    leaves_below: list[list[int]] = [[] for _ in range(n)]
    for leaf, s in leaf_ids.items():  # walk each leaf up to the root
        node = leaf
        while node >= 0:
            leaves_below[node].append(s)
            node = parents[node]
    leaf_of = [lb[0] for lb in leaves_below]
    return depth, leaves_below, leaf_of, len(leaf_ids)
