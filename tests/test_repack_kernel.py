"""Our patch's Q4_K row kernel (``scripts/patches/``, AVX-512 builds) gives, for every row of a
group of 4, the bits that llama.cpp's 4-row Q4_K GEMM gives it: called directly in ggml's CPU
library (ctypes) on random repacked weight blocks and random activations, for 1 to 4 rows at every
offset in the group, with large and small activations. The batching tests (test_determinism.py)
check the same through whole models.

Run: .venv/bin/python -m pytest tests/test_repack_kernel.py -q
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from localrag.llamacpp_build import cmake_flags
from tests.conftest import require_or_skip

QK_K = 256
Q4_KX8 = 16 * 2 + 96 + 1024  # block_q4_Kx8: d[8], dmin[8] (fp16), scales[96], qs[1024]
Q8_KX4 = 4 * 4 + 4 * QK_K + QK_K // 4 * 2  # block_q8_Kx4: d[4] (f32), qs[1024], bsums[64] (i16)

LIB = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so"))
PATCHED = hasattr(LIB, "ggml_cpu_repack_batch_invariant")
HAS_KERNEL = hasattr(LIB, "ggml_gemm_q4_K_8x8_q8_K_rows")

P, INT = ctypes.c_void_p, ctypes.c_int
LIB.ggml_quantize_mat_q8_K_4x8.argtypes = [P, P, ctypes.c_int64]
LIB.ggml_gemm_q4_K_8x8_q8_K.argtypes = [INT, P, ctypes.c_size_t, P, P, INT, INT]
if HAS_KERNEL:
    LIB.ggml_gemm_q4_K_8x8_q8_K_rows.argtypes = [INT, P, ctypes.c_size_t, P, P, INT, INT, INT]


@pytest.fixture(autouse=True, scope="module")
def row_kernel() -> None:
    """Our patched build has the kernel where it was built for AVX-512: an unpatched build, or an
    AVX-512 one without it, fails under CI (``require_or_skip``); a build without AVX-512 skips."""
    if not PATCHED:
        require_or_skip(f"{LIB._name} is unpatched: no ggml_cpu_repack_batch_invariant (scripts/setup.sh "
                        "applies scripts/patches/ before it builds llama-cpp-python)")
    if not HAS_KERNEL:
        if "-DGGML_AVX512=ON" in cmake_flags():
            require_or_skip(f"{LIB._name}: an AVX-512 build of our patch without its Q4_K row kernel")
        pytest.skip(f"cpu: llama.cpp was built without AVX-512 ({' '.join(cmake_flags())}), so without our "
                    "patch's AVX-512 Q4_K row kernel")


def weights(rng: np.random.Generator, n: int, nc: int) -> np.ndarray:
    """nc columns of n weights as repacked Q4_K blocks (8 columns a block): random quants and
    6-bit scales, positive fp16 super-block scales."""
    blocks = np.zeros(((nc // 8) * (n // QK_K), Q4_KX8), dtype=np.uint8)
    blocks[:, :32] = rng.uniform(1e-4, 2e-2, size=(len(blocks), 16)).astype(np.float16).view(np.uint8)
    blocks[:, 32:] = rng.integers(0, 256, size=(len(blocks), Q4_KX8 - 32), dtype=np.uint8)
    return blocks


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def same_bits(w: np.ndarray, x: np.ndarray, n: int, nc: int) -> None:
    """Our kernel's rows equal the 4-row GEMM's for these weights and 4 rows of activations x."""
    a = np.zeros((n // QK_K, Q8_KX4), dtype=np.uint8)
    LIB.ggml_quantize_mat_q8_K_4x8(ptr(x), ptr(a), n)
    want = np.zeros((4, nc), dtype=np.float32)
    LIB.ggml_gemm_q4_K_8x8_q8_K(n, ptr(want), nc, ptr(w), ptr(a), 4, nc)
    assert np.isfinite(want).all() and np.abs(want).max() > 0
    for rows in (1, 2, 3, 4):
        for first in range(4 - rows + 1):
            got = np.full((rows, nc), np.nan, dtype=np.float32)
            LIB.ggml_gemm_q4_K_8x8_q8_K_rows(n, ptr(got), nc, ptr(w), ptr(a), first, rows, nc)
            assert np.array_equal(got.view(np.uint32), want[first:first + rows].view(np.uint32)), (rows, first)


@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_the_row_kernel_gives_the_4_row_gemms_bits(scale):
    rng = np.random.default_rng(7)
    n, nc = 1536, 96
    w = weights(rng, n, nc)
    for _ in range(5):
        x = (rng.standard_normal((4, n)) * scale).astype(np.float32)
        x[rng.integers(0, 4), rng.integers(0, n)] *= 50  # an outlier sets its block's scale
        same_bits(w, x, n, nc)


def test_the_row_kernel_at_the_largest_integers():
    """Every quant and 6-bit scale at its maximum and activations of one sign (8-bit quants at
    +-127/128): the kernel's exactness bound (scaled sums of a sub-block pair below 2^24, which it
    forms in floats) is met at its edge, not only on random blocks."""
    n, nc = 512, 32
    w = weights(np.random.default_rng(3), n, nc)
    w[:, 32:] = 0xFF  # scales and mins 63, every 4-bit quant 15
    for sign in (1.0, -1.0):
        x = np.full((4, n), sign, dtype=np.float32)
        x[1] *= 0.5  # rows of other block scales, same quants
        x[3, ::2] = -sign  # and alternating signs
        same_bits(w, x, n, nc)
