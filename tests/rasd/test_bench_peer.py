"""llama.cpp's llama-lookup and llama-speculative-simple as ``bench speed`` peers: their command
lines, how their output is read, and the methods' names.

The output below is what llama-lookup 0.3.36 (vendored by llama-cpp-python) printed for the
bundled Gemma model (llama-speculative-simple prints the same lines). tests/test_cpp_peers.py runs
the real programs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localrag.bench.speed_peer import (
    DraftSetting,
    PeerTools,
    draft_setting,
    is_peer_method,
    lookup_command,
    needs_draft,
    parse_peer_output,
    speculative_command,
)

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
TOOLS = PeerTools(Path("/bin/llama-lookup"), Path("/bin/llama-bench"), Path("/bin/llama-speculative-simple"), "0.3.36")


def test_its_timing_counts_and_text_are_read_from_its_output():
    run = parse_peer_output(STDOUT, STDERR, PROMPT)
    assert (run.n_tokens, run.decode_s) == (17, 0.782)  # the decode loop only: "encoded" (prefill) is not counted
    assert (run.n_draft, run.n_drafted, run.n_accept) == (3, 12, 5)
    assert run.text.startswith(" the capital of the country of France.") and "<bos>" not in run.text


def test_output_without_its_timing_line_is_an_error_that_shows_it():
    with pytest.raises(RuntimeError, match="no 'decoded"):
        parse_peer_output(STDOUT, "llama_model_load: error loading model", PROMPT)


def test_it_runs_greedy_for_at_least_the_asked_tokens():
    cmd = lookup_command(TOOLS, Path("m.gguf"), Path("p.txt"), n_new=64, draft=None, threads=2, n_ctx=4096)
    assert cmd[cmd.index("-n") + 1] == "63"  # it samples n_predict + 1 tokens at least
    assert cmd[cmd.index("--temp") + 1] == "0" and "--spec-draft-n-max" not in cmd
    with_draft = lookup_command(TOOLS, Path("m.gguf"), Path("p.txt"), n_new=64, draft=5, threads=2, n_ctx=4096)
    assert with_draft[-2:] == ["--spec-draft-n-max", "5"]


def test_speculative_method_names_carry_their_knobs():
    assert draft_setting("llama-speculative") == DraftSetting(None, None, False)
    assert draft_setting("llama-speculative-d8") == DraftSetting(8, None, False)
    assert draft_setting("llama-speculative-ngram-d16-p0.6") == DraftSetting(16, 0.6, True)
    assert draft_setting("llama-speculative-p0.5") == DraftSetting(None, 0.5, False)
    assert draft_setting("llama-lookup-d8") is None and draft_setting("llama-speculative-x") is None
    assert needs_draft("llama-speculative-ngram") and not needs_draft("llama-lookup")
    assert all(is_peer_method(m) for m in ("llama-speculative-d3", "llama-speculative-ngram", "llama-lookup-d5"))
    assert not is_peer_method("llama-speculative-d")


def test_speculative_runs_the_draft_model_greedy_on_the_same_threads():
    cmd = speculative_command(TOOLS, Path("t.gguf"), Path("d.gguf"), Path("p.txt"), n_new=64,
                              setting=DraftSetting(8, 0.5, False), threads=2, n_ctx=4096)
    assert cmd[0] == "/bin/llama-speculative-simple"
    assert cmd[cmd.index("-md") + 1] == "d.gguf" and cmd[cmd.index("--spec-type") + 1] == "draft-simple"
    assert cmd[cmd.index("-n") + 1] == "63" and cmd[cmd.index("--temp") + 1] == "0"
    assert cmd[cmd.index("-td") + 1] == "2" and cmd[cmd.index("-t") + 1] == "2"
    assert cmd[cmd.index("--spec-draft-n-max") + 1] == "8" and cmd[cmd.index("--spec-draft-p-min") + 1] == "0.5"
    ngram = speculative_command(TOOLS, Path("t.gguf"), Path("d.gguf"), Path("p.txt"), n_new=64,
                                setting=DraftSetting(None, None, True), threads=2, n_ctx=4096)
    assert ngram[ngram.index("--spec-type") + 1] == "ngram-simple,draft-simple"
    assert "--spec-draft-n-max" not in ngram and "--spec-draft-p-min" not in ngram


def test_bench_speed_refuses_a_speculative_peer_without_a_draft(capsys):
    from localrag.__main__ import main

    code = main(["bench", "speed", "--model", "smollm2-135m-instruct", "--draft", "none",
                 "--methods", "plain,llama-speculative-d4"])
    assert code == 2
    assert "llama-speculative-d4 need --draft" in capsys.readouterr().err
