"""Transformers (PyTorch) backend: a tree-verifying target on CUDA, MPS or CPU.

Same protocol as the llama.cpp backend (see base.py). The KV cache is one
transformers ``DynamicCache`` holding the committed context; a token tree is
appended to it in one forward pass and the accepted path is compacted into
place afterwards:

    eval_tree(tokens, parents):                       n nodes on top of `past` committed tokens
        position_ids[i] = past + depth(i)             (1, n)
        mask[i, j]      = 0        if j < past or node j-past is i or an ancestor of i
                          finfo.min otherwise         (1, 1, n, past + n), additive float
        -> logits (n, V); the cache now holds past + n entries, tree nodes in node order
    commit_path(path):                                 path = root-to-node node indices
        cache[past + k] <- cache[past + path[k]]  for k < len(path)   (K/V copy, all layers)
        crop the cache to past + len(path)

Rotary embeddings are applied before K is cached, so a node's K depends only
on its position id (past + depth), which is exactly the position it keeps on
the accepted path: compaction needs no re-rotation.

Models load from a local Hugging Face folder, or from a GGUF file through
``from_pretrained(dir, gguf_file=...)`` (dequantized; needs `gguf` and
`accelerate`); the conversion is saved once under LOCALRAG_CACHE_DIR/hf-gguf
(set LOCALRAG_HF_GGUF_CACHE=0 to skip it). Device: cuda, then mps, then cpu; dtype: bf16 (fp16 where bf16
is unsupported, and on mps) on a GPU, fp32 on CPU; both can be overridden in
ModelConfig. Every transformers API difference lives in hf_compat.py.

    be = HFBackend(ModelConfig(backend="hf"))            # the bundled SmolLM2 GGUF, fp32 on CPU
    logits = be.prefill(be.tokenize("Hello", add_special=True))
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from localrag.backends import hf_compat
from localrag.backends.base import Backend
from localrag.config import ModelConfig, default_cache_dir
from localrag.models import ModelError, ModelSpec, resolve

# End-of-generation token names across common chat templates (besides the tokenizer's eos).
EOG_NAMES = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<end_of_turn>", "<|end|>", "</s>", "<|return|>")

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}  # fmt: skip


# --- device and dtype ---------------------------------------------------------------
def pick_device(override: str | None = None) -> torch.device:
    """`override` (cuda, cuda:1, mps, cpu) or the best available: cuda, then mps, then cpu."""
    if override and override != "auto":
        dev = torch.device(override)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ModelError(f"device {override!r} requested but CUDA is not available in this torch build")
        if dev.type == "mps" and not _mps_available():
            raise ModelError(f"device {override!r} requested but Apple MPS is not available")
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def pick_dtype(device: torch.device, override: str | None = None) -> torch.dtype:
    """`override` by name, else bf16 on CUDA (fp16 without bf16 support), fp16 on MPS, fp32 on CPU."""
    if override and override != "auto":
        try:
            return DTYPES[override.lower()]
        except KeyError:
            raise ModelError(f"unknown dtype {override!r}; use one of {', '.join(DTYPES)}") from None
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def hf_source(spec: ModelSpec) -> tuple[Path, str | None]:
    """(folder, gguf file name or None) for from_pretrained."""
    if spec.format == "gguf":
        return spec.path.parent, spec.path.name
    return spec.path, spec.gguf_file


def gguf_cache_folder(gguf: Path) -> Path:
    """Where the transformers conversion of one GGUF file is kept (keyed by path, size, mtime)."""
    st = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{st.st_size}:{int(st.st_mtime)}".encode()).hexdigest()[:12]
    root = default_cache_dir()
    return root / "hf-gguf" / f"{gguf.stem}-{key}"


def converted_gguf(folder: Path, gguf_file: str) -> Path | None:
    """A local HF folder holding the GGUF's dequantized fp32 weights and tokenizer, made once.

    Converting a GGUF in transformers (tokenizer rebuild + dequantization) takes
    tens of seconds on a small CPU; loading the saved safetensors takes a second
    or two. Returns None when the cache cannot be written (then load the GGUF directly).
    """
    if os.environ.get("LOCALRAG_HF_GGUF_CACHE", "1") == "0":
        return None
    target = gguf_cache_folder(folder / gguf_file)
    if (target / "config.json").exists():
        return target
    tokenizer = hf_compat.load_tokenizer(folder, gguf_file)
    model = hf_compat.load_model(folder, gguf_file, torch.float32, torch.device("cpu"))
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    try:
        hf_compat.save_dequantized(model, tokenizer, tmp)
        tmp.replace(target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return target if (target / "config.json").exists() else None
    return target


# --- tree geometry ------------------------------------------------------------------
def tree_geometry(parents: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """depth (n,) int64 and ancestors (n, n) bool (ancestors[i, j]: j is i or above i)."""
    n = len(parents)
    depth = np.zeros(n, dtype=np.int64)
    anc = np.zeros((n, n), dtype=bool)
    for i, p in enumerate(parents):
        if p >= i or p < -1:
            raise ValueError(f"node {i} has parent {p}: parents must come before children")
        if p >= 0:
            depth[i] = depth[p] + 1
            anc[i] = anc[p]  # my ancestors are my parent's ancestors-or-self
        anc[i, i] = True
    return depth, anc


def is_chain(parents: Sequence[int]) -> bool:
    """A linear path (-1, 0, 1, ...): plain causal attention gives the same mask."""
    return all(p == i - 1 for i, p in enumerate(parents))


# --- token pieces -------------------------------------------------------------------
def _byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE: the printable character standing for each byte, inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _tokenizer_style(tokenizer) -> str:
    """'bytelevel' (GPT-2 style) or 'sentencepiece' (▁ for space, <0xNN> byte fallback)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        text = json.dumps([spec.get("decoder"), spec.get("pre_tokenizer")])
        if "ByteLevel" in text:
            return "bytelevel"
    return "sentencepiece"


def token_piece_table(tokenizer, n_vocab: int) -> tuple[list[bytes], list[bytes]]:
    """(pieces, special pieces) for ids 0..n_vocab-1, as llama.cpp renders them.

    Normal tokens: their raw bytes. Control/special tokens: b"" unless special=True,
    then their text. Ids past the tokenizer's vocabulary (padded embeddings): b"".
    """
    style = _tokenizer_style(tokenizer)
    decoder = _byte_decoder()
    special_ids = set(tokenizer.all_special_ids)
    for tid, added in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if getattr(added, "special", False):
            special_ids.add(int(tid))
    ids = list(range(min(n_vocab, len(tokenizer))))
    strings = tokenizer.convert_ids_to_tokens(ids)
    added_ids = {int(t) for t in getattr(tokenizer, "added_tokens_decoder", {})}
    pieces: list[bytes] = []
    specials: list[bytes] = []
    for tid, s in zip(ids, strings, strict=True):
        s = s or ""
        if tid in special_ids:
            pieces.append(b"")
            specials.append(s.encode("utf-8"))
            continue
        if tid in added_ids:  # user-defined added token: literal text
            raw = s.encode("utf-8")
        elif style == "bytelevel":
            raw = bytes(decoder[c] for c in s) if all(c in decoder for c in s) else s.encode("utf-8")
        else:
            m = _BYTE_TOKEN.match(s)
            raw = bytes([int(m.group(1), 16)]) if m else s.replace("\u2581", " ").encode("utf-8")
        pieces.append(raw)
        specials.append(raw)
    pad = n_vocab - len(pieces)
    return pieces + [b""] * pad, specials + [b""] * pad


# --- the backend --------------------------------------------------------------------
class HFBackend(Backend):
    """A causal LM in transformers with a tree-capable KV cache (DynamicCache + compaction)."""

    def __init__(self, config: ModelConfig, spec: ModelSpec | None = None):
        spec = spec or resolve(config.model)
        device = pick_device(config.device)
        dtype = pick_dtype(device, config.dtype)
        if config.n_threads and device.type == "cpu":
            torch.set_num_threads(config.n_threads)
        folder, gguf_file = hf_source(spec)
        t0 = time.perf_counter()
        try:
            if gguf_file and (cached := converted_gguf(folder, gguf_file)) is not None:
                folder, gguf_file = cached, None
            tokenizer = hf_compat.load_tokenizer(folder, gguf_file)
            model = hf_compat.load_model(folder, gguf_file, dtype, device)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            what = f"{folder}/{gguf_file}" if gguf_file else str(folder)
            raise ModelError(f"{what}: transformers could not load this model ({type(exc).__name__}: {exc})") from exc
        self.load_seconds = time.perf_counter() - t0
        self._setup(model, tokenizer, name=spec.name, n_ctx=config.n_ctx)
        self.config = config
        self.model_spec = spec

    @classmethod
    def from_model(cls, model, tokenizer=None, name: str = "model", n_ctx: int = 4096) -> HFBackend:
        """Wrap an already-built transformers model (tests, custom setups)."""
        self = cls.__new__(cls)
        self._setup(model.eval(), tokenizer, name=name, n_ctx=n_ctx)
        self.config = ModelConfig(model=name, n_ctx=n_ctx, backend="hf")
        self.model_spec = None
        self.load_seconds = 0.0
        return self

    def _setup(self, model, tokenizer, name: str, n_ctx: int) -> None:
        if hf_compat.sliding_window_layers(model.config):
            raise ModelError(
                f"{name}: sliding-window attention layers are not supported by the transformers tree backend yet "
                "(load this model with the llama.cpp backend)"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.n_vocab = int(model.get_output_embeddings().weight.shape[0])
        max_pos = getattr(model.config, "max_position_embeddings", None) or n_ctx
        self.n_ctx = min(n_ctx, int(max_pos))
        self.n_batch = 512
        self.tokens: list[int] = []
        self._cache = hf_compat.new_cache(model)
        self._tree_tokens: list[int] = []
        self._tree_parents: list[int] = []
        self._pieces: tuple[list[bytes], list[bytes]] | None = None
        self._eog = self._eog_ids()

    # --- vocabulary ---------------------------------------------------------------
    def _need_tokenizer(self):
        if self.tokenizer is None:
            raise RuntimeError(f"{self.name}: this backend was built without a tokenizer")
        return self.tokenizer

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        tok = self._need_tokenizer()
        kwargs = {} if parse_special else {"split_special_tokens": True}
        return list(tok(text, add_special_tokens=add_special, **kwargs)["input_ids"])

    def _piece_table(self) -> tuple[list[bytes], list[bytes]]:
        if self._pieces is None:
            self._pieces = token_piece_table(self._need_tokenizer(), self.n_vocab)
        return self._pieces

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        pieces, specials = self._piece_table()
        return (specials if special else pieces)[token]

    def vocab_pieces(self) -> list[bytes]:
        return list(self._piece_table()[1])

    def _eog_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            eos = getattr(source, "eos_token_id", None) if source is not None else None
            if eos is not None:
                ids.update(eos if isinstance(eos, list | tuple) else [eos])
        if self.tokenizer is not None:
            vocab = self.tokenizer.get_vocab()
            ids.update(vocab[name] for name in EOG_NAMES if name in vocab)
        return {int(i) for i in ids}

    def is_eog(self, token: int) -> bool:
        return token in self._eog

    @property
    def add_bos(self) -> bool:
        """Whether tokenize(add_special=True) puts BOS in front (what the tokenizer really does)."""
        tok = self.tokenizer
        if tok is None or tok.bos_token_id is None:
            return False
        ids = tok("a", add_special_tokens=True)["input_ids"]
        return bool(ids) and ids[0] == tok.bos_token_id

    @property
    def device_label(self) -> str:
        return str(self.device)

    @property
    def build_label(self) -> str:
        return f"torch {torch.__version__} {self.dtype}"

    def chat_template(self) -> str | None:
        return getattr(self.tokenizer, "chat_template", None) or None

    def meta(self, key: str) -> str | None:
        """The few GGUF-style metadata keys the chat layer reads (bos/eos ids)."""
        tok = self.tokenizer
        value = {
            "tokenizer.ggml.bos_token_id": getattr(tok, "bos_token_id", None),
            "tokenizer.ggml.eos_token_id": getattr(tok, "eos_token_id", None),
        }.get(key)
        return None if value is None else str(value)

    # --- KV cache -----------------------------------------------------------------
    def _drop_uncommitted(self) -> None:
        """Invariant: the cache holds the committed tokens, plus at most the last evaluated tree."""
        if hf_compat.cache_length(self._cache) != self.n_past:
            hf_compat.crop(self._cache, self.n_past)
        self._tree_tokens, self._tree_parents = [], []

    def reset(self) -> None:
        self._cache = hf_compat.new_cache(self.model)
        self.tokens = []
        self._tree_tokens, self._tree_parents = [], []

    def truncate(self, n_keep: int) -> None:
        self._drop_uncommitted()
        if n_keep < self.n_past:
            hf_compat.crop(self._cache, n_keep)
            del self.tokens[n_keep:]

    def _check_room(self, n: int) -> None:
        if self.n_past + n > self.n_ctx:
            raise ValueError(f"context full: {self.n_past} + {n} tokens > n_ctx {self.n_ctx}")

    def _ids(self, tokens: Sequence[int]) -> torch.Tensor:
        return torch.tensor([list(tokens)], dtype=torch.long, device=self.device)  # (1, q)

    @staticmethod
    def _numpy(logits: torch.Tensor) -> np.ndarray:
        return logits.float().cpu().numpy()

    # --- decoding -----------------------------------------------------------------
    def prefill(self, tokens: Sequence[int]) -> np.ndarray:
        if not tokens:
            raise ValueError("prefill needs at least one token")
        self._drop_uncommitted()
        self._check_room(len(tokens))
        logits = None
        for start in range(0, len(tokens), self.n_batch):  # causal attention, chunked
            chunk = list(tokens[start : start + self.n_batch])
            logits = hf_compat.forward(self.model, self._ids(chunk), self._cache, last_only=True)
            self.tokens.extend(chunk)
        return self._numpy(logits[-1])

    def decode_one(self, token: int) -> np.ndarray:
        self._drop_uncommitted()
        self._check_room(1)
        logits = hf_compat.forward(self.model, self._ids([token]), self._cache)
        self.tokens.append(token)
        return self._numpy(logits[0])

    def eval_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        n = len(tokens)
        if n == 0 or n != len(parents):
            raise ValueError(f"tree of {n} tokens and {len(parents)} parents; need n >= 1 of each")
        self._drop_uncommitted()
        depth, anc = tree_geometry(parents)
        self._check_room(n)  # the tree's nodes all sit in the cache until commit
        past = self.n_past
        if is_chain(parents):  # plain causal attention is the same mask, and faster
            logits = hf_compat.forward(self.model, self._ids(tokens), self._cache)
        else:
            pos = torch.from_numpy(depth + past).to(self.device).unsqueeze(0)  # (1, n)
            mask = hf_compat.tree_attention_mask(torch.from_numpy(anc), past, self.dtype, self.device)  # (1,1,n,past+n)
            logits = hf_compat.forward(self.model, self._ids(tokens), self._cache, position_ids=pos, attention_mask=mask)
        self._tree_tokens, self._tree_parents = list(tokens), list(parents)
        return self._numpy(logits)  # (n, V)

    def commit_path(self, path: Sequence[int]) -> None:
        path = list(path)
        parents = self._tree_parents
        for k, node in enumerate(path):  # must be a root-to-node chain of the last tree
            want = path[k - 1] if k else -1
            if not 0 <= node < len(parents) or parents[node] != want:
                raise ValueError(f"commit_path {path}: node {node} is not a child of {want} in the last tree")
        past = self.n_past
        if path == list(range(len(path))):  # already in place: just drop the rest
            hf_compat.crop(self._cache, past + len(path))
        else:
            index = torch.tensor(path, dtype=torch.long)
            hf_compat.keep_cache_positions(self._cache, past, index)
        self.tokens.extend(self._tree_tokens[i] for i in path)
        self._tree_tokens, self._tree_parents = [], []

    def close(self) -> None:
        self._cache = None
        self.model = None
