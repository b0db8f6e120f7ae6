"""Hidden states from llama.cpp's own forward pass, for the answerability judge (``localrag.judge``).

llama.cpp calls a graph callback (``cb_eval`` in the context params) for every node of every graph
it computes: first with ``ask=True`` (does the caller want this node's data?), then, for the nodes it
said yes to, with ``ask=False`` once the node is computed. Each layer's output is the node named
``l_out-<layer>`` (``result_norm``: the final norm), an f32 tensor of shape [n_embd, n_tokens]. While
armed (during a prefill), the tap keeps the *last* row of each wanted node: the hidden state of the
last token the prefill read, which at the end of a prompt is the last prompt token.

Nothing else changes: a node nobody asked for is computed in the same graph view as without a
callback, and a wanted node only splits the graph where it ends (the same kernels on the same data,
so the same logits). Unarmed, each node costs one Python call (about a microsecond; a graph of the
1.5B has about 900 nodes).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import llama_cpp as lc
import numpy as np

from localrag.judge import FINAL_NORM

GGML_TYPE_F32 = 0


class _TensorHead(ctypes.Structure):
    """The leading fields of ``struct ggml_tensor`` (ggml.h): type, buffer, ne[4], nb[4]."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4)]


def _ggml_base() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(Path(lc.__file__).parent / "lib" / "libggml-base.so"))
    lib.ggml_get_name.restype = ctypes.c_char_p
    lib.ggml_get_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    lib.ggml_backend_tensor_get.restype = None
    return lib


def node_name(layer: int) -> bytes:
    return b"result_norm" if layer == FINAL_NORM else f"l_out-{layer}".encode()


class HiddenTap:
    """Install with ``install(cparams)`` before the context is made; ``armed`` around a prefill;
    ``states`` then maps each layer to the last token's hidden state (float32, n_embd)."""

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers = tuple(layers)
        self._wanted = {node_name(layer): layer for layer in self.layers}
        self._lib = _ggml_base()
        self.armed = False
        self.states: dict[int, np.ndarray] = {}
        self._callback = lc.ggml_backend_sched_eval_callback(self._on_node)  # C holds it: keep a reference

    def install(self, cparams) -> None:
        cparams.cb_eval = self._callback

    def clear(self) -> None:
        self.states = {}

    def _on_node(self, tensor, ask, _user) -> bool:
        if not self.armed:
            return False
        layer = self._wanted.get(self._lib.ggml_get_name(tensor))
        if layer is None:
            return False
        if ask:
            return True
        head = _TensorHead.from_address(tensor)
        if head.type != GGML_TYPE_F32:
            return True
        n, rows = int(head.ne[0]), int(head.ne[1])
        out = np.empty(n, dtype=np.float32)
        self._lib.ggml_backend_tensor_get(tensor, out.ctypes.data, (rows - 1) * head.nb[1], n * 4)
        self.states[layer] = out
        return True
