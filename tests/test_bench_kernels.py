"""bench kernels: the four kernel settings run in one process and decode the same greedy tokens."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from localrag.llamacpp_build import cmake_flags

pytestmark = pytest.mark.slow


def test_bench_kernels_reports_every_setting_and_same_tokens():
    out = subprocess.run([sys.executable, "-m", "localrag", "bench", "kernels", "--rounds", "2", "--prompt-tokens",
                          "64", "--new-tokens", "8", "--threads", "2", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    assert r["prompt_tokens"] == 64 and r["same_tokens_rounds"] == 2
    assert r["GGML_CPU_TILED_MM"] == "0"  # the deterministic backend switched the tiled GEMM off
    # on our patched build (setup.sh) the deterministic kernels can keep repacked weights; the default
    # model's Q4_K ones where the patch's row kernel is built (AVX-512); repack=False has none
    row_kernel = "-DGGML_AVX512=ON" in cmake_flags()
    assert r["repacked"] == {"deterministic": row_kernel, "deterministic_repacked": True,
                             "deterministic_unpacked": False, "default": True}
    assert r["over_unpacked"]["same_tokens_rounds"] == 2 and r["over_repacked"]["same_tokens_rounds"] == 2
    for what in ("prefill_tps", "decode_tps"):
        assert all(r[what][arm] > 0 for arm in ("deterministic", "deterministic_repacked", "deterministic_unpacked",
                                                "default"))
