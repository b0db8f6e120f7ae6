"""bench ttft --prefill end to end on the small model: both prefills on cold and warmed chunks, at
the head the command asks for.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/test_bench_ttft.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_prefill_arms_time_both_reads_at_the_head_asked(tmp_path):
    """Every question read exactly and with reuse, cold and warmed; the warmed reuse turns find their
    chunks in the cache and read fewer prompt tokens than exact; a longer head reads more of them."""
    def run(head: int) -> dict:
        out = subprocess.run([sys.executable, "-m", "localrag", "bench", "ttft", "--prefill", "--n", "2",
                              "--max-tokens", "4", "--model", "smollm2-135m-instruct", "--head", str(head), "--json"],
                             capture_output=True, text=True, timeout=900,
                             env={**os.environ, "LOCALRAG_CACHE_DIR": str(tmp_path / "cache")})
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)

    short, longer = run(16), run(48)
    assert short["head"] == 16 and longer["head"] == 48
    for result in (short, longer):
        warmed = result["arms"]["warmed"]
        assert set(result["arms"]) == {"cold", "warmed"} and warmed["hits"] > 0
        assert warmed["reuse"]["read_tokens"] < warmed["exact"]["read_tokens"]
    assert longer["arms"]["warmed"]["reuse"]["read_tokens"] > short["arms"]["warmed"]["reuse"]["read_tokens"]
