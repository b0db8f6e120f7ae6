"""The soak's invariants on a short run (``python -m localrag bench soak``, 3 clients, the bundled
SmolLM2, Plain and Speedup; the long runs add Grounded): the real server on loopback, real streaming HTTP and MCP clients, some disconnecting,
a watched folder changing alongside. No request fails, the server's descriptors and memory do not
grow past a bound once warm, and every greedy answer equals the same request answered alone.

A leak test, not a speed test: the bounds are on growth (descriptors end <= after the warm-up plus
a margin below one per request; an RSS slope far above a steady server's), never on time.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/api/test_soak.py -q
"""

from __future__ import annotations

import pytest

from localrag.__main__ import build_parser
from localrag.bench.soak import print_soak, run_soak
from tests.api.conftest import MODEL

pytestmark = pytest.mark.slow

FD_MARGIN = 4  # descriptors the idle end may hold beyond the sample after the warm-up (a leak adds one per request)
RSS_SLOPE_MIB_PER_MIN = 40.0  # generous: a steady server's slope is near 0


def test_a_short_soak_has_no_error_no_leak_and_lone_answers():
    args = build_parser().parse_args(["bench", "soak", "--model", MODEL, "--clients", "3", "--minutes", "2",
                                      "--questions", "1", "--modes", "plain,speedup", "--max-tokens", "24", "--ingest-every", "15",
                                      "--sample-every", "2", "--warmup-minutes", "0.5", "--disconnect-rate", "0.25",
                                      "--seed", "1"])
    r = run_soak(args)
    print_soak(r)  # the report, shown with a failure
    q, eq, srv = r["requests"], r["equality"], r["server"]
    assert r["errors"]["count"] == 0, r["errors"]["examples"]
    assert q["openai"] > 0 and q["mcp-ask"] + q["mcp-search"] > 0 and q["disconnected"] > 0, q
    assert r["ingest"]["writes"] > 0 and r["ingest"]["newest_found_after_s"] is not None
    assert srv["samples_after_warmup"] >= 3, srv
    fds = srv["fds"]
    assert fds["end"] <= fds["after_warmup"] + FD_MARGIN, f"descriptors grew: {fds} over {q['total']} requests"
    assert srv["rss_mib"]["slope_per_min"] < RSS_SLOPE_MIB_PER_MIN, srv["rss_mib"]
    assert eq["under_load_compared"] > 0 and eq["after_compared"] > 0, eq
    assert eq["under_load_equal"] == eq["under_load_compared"], eq["examples"]
    assert eq["after_equal"] == eq["after_compared"], eq["examples"]
    assert r["server_exit_code"] == 0
