"""llama.cpp's llama-lookup as a ``bench speed`` peer: its command line and how its output is read.

The output below is what llama-lookup 0.3.36 (vendored by llama-cpp-python) printed for the
bundled Gemma model; building the program takes minutes, so the suite checks the reading of its
output and the command it is run with, and ``bench speed --methods llama-lookup`` runs it for real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localrag.bench.speed_peer import PeerTools, lookup_command, parse_lookup

PROMPT = "The capital of France is"
STDOUT = "\n\n<bos>The capital of France is the capital of the country of France. It is the largest city in France. It\n\n"
STDERR = """0.03.618.530 I cmn          init: llama threadpool init, n_threads = 1
0.04.578.206 I encoded    6 tokens in    0.113 seconds, speed:  203.301 t/s
0.04.578.207 I decoded   17 tokens in    0.782 seconds, speed:   21.727 t/s
0.04.578.207 I
0.04.578.208 I n_draft      = 3
0.04.578.208 I n_predict    = 17
0.04.578.208 I n_drafted    = 12
0.04.578.209 I t_draft_flat = 0.01 ms
0.04.578.210 I n_accept     = 5
"""
TOOLS = PeerTools(Path("/bin/llama-lookup"), Path("/bin/llama-bench"), "0.3.36")


def test_its_timing_counts_and_text_are_read_from_its_output():
    run = parse_lookup(STDOUT, STDERR, PROMPT)
    assert (run.n_tokens, run.decode_s) == (17, 0.782)  # the decode loop only: "encoded" (prefill) is not counted
    assert (run.n_draft, run.n_drafted, run.n_accept) == (3, 12, 5)
    assert run.text.startswith(" the capital of the country of France.") and "<bos>" not in run.text


def test_output_without_its_timing_line_is_an_error_that_shows_it():
    with pytest.raises(RuntimeError, match="no 'decoded"):
        parse_lookup(STDOUT, "llama_model_load: error loading model", PROMPT)


def test_it_runs_greedy_for_at_least_the_asked_tokens():
    cmd = lookup_command(TOOLS, Path("m.gguf"), Path("p.txt"), n_new=64, draft=None, threads=2, n_ctx=4096)
    assert cmd[cmd.index("-n") + 1] == "63"  # it samples n_predict + 1 tokens at least
    assert cmd[cmd.index("--temp") + 1] == "0" and "--spec-draft-n-max" not in cmd
    with_draft = lookup_command(TOOLS, Path("m.gguf"), Path("p.txt"), n_new=64, draft=5, threads=2, n_ctx=4096)
    assert with_draft[-2:] == ["--spec-draft-n-max", "5"]
