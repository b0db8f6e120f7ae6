"""llama.cpp's own C++ programs as peers in ``bench speed``: n-gram lookup decoding and plain decode.

* ``llama-lookup`` (llama.cpp's examples/lookup): prompt/context n-gram speculative decoding
  with a draft chain of ``--spec-draft-n-max`` tokens (3 by default in this version), greedy,
  no tree, no draft model, no cost model. Its decode speed is read from its own timing line
  ("decoded N tokens in S seconds"), so model loading and the prompt prefill are not counted.
* ``llama-bench`` at the prompt's depth (``-p 0 -n N -d <prompt tokens>``): plain C++ decoding,
  to show how much of a gap is the Python loop around llama.cpp rather than the algorithm.

Both are built on demand from the llama.cpp sources that the installed llama-cpp-python
vendors (its sdist from PyPI), with the x86-64-v3 flags ``scripts/setup.sh`` uses for the
Python build, and cached under ``default_cache_dir() / "llama.cpp"`` (``localrag.llamacpp_build``,
which builds ``llama-server`` the same way):

    tools = peer_tools()                 # builds once (minutes on 2 cores); PeerUnavailable if it cannot
    run = run_lookup(tools, model, prompt_text, n_new=64, draft=3, threads=2, n_ctx=4096)
    print(run.n_tokens / run.decode_s)
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from localrag.llamacpp_build import BuildUnavailable, llama_programs

TARGETS = ("llama-lookup", "llama-bench")
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds")
N_DRAFT = re.compile(r"n_draft\s+=\s+(\d+)")
N_DRAFTED = re.compile(r"n_drafted\s+=\s+(\d+)")
N_ACCEPT = re.compile(r"n_accept\s+=\s+(\d+)")

# The C++ peer cannot be built here (no compiler or cmake, no network for the sdist, a failed build).
PeerUnavailable = BuildUnavailable


@dataclass(frozen=True)
class PeerTools:
    lookup: Path
    bench: Path
    version: str  # llama-cpp-python's version, whose vendored llama.cpp was built


@dataclass(frozen=True)
class LookupRun:
    """One llama-lookup run, as the program itself timed it."""

    n_tokens: int  # tokens it decoded (it stops after the step that passes n_new, so up to n_max more)
    decode_s: float  # its decode loop, prompt prefill excluded
    text: str  # the generated text (special tokens rendered as text)
    n_draft: int  # its draft length (--spec-draft-n-max)
    n_drafted: int
    n_accept: int


def peer_tools(build: bool = True) -> PeerTools:
    """The built programs; builds them first when missing (and `build`). Raises PeerUnavailable."""
    programs = llama_programs(TARGETS, build=build)
    return PeerTools(programs["llama-lookup"], programs["llama-bench"], llama_cpp.__version__)


def lookup_command(tools: PeerTools, model: Path, prompt_file: Path, n_new: int, draft: int | None,
                   threads: int, n_ctx: int) -> list[str]:
    """llama-lookup as a user runs it for greedy output: llama.cpp's default kernels and batch
    sizes, the given thread count and context. It samples n_predict + 1 tokens at least (its loop
    stops after the step that passes n_predict), so ``-n n_new - 1`` gives n_new tokens at least.
    draft None: its default draft length."""
    cmd = [str(tools.lookup), "-m", str(model), "-f", str(prompt_file), "-n", str(max(n_new - 1, 1)),
           "-c", str(n_ctx), "-t", str(threads), "-tb", str(threads), "--temp", "0", "--seed", "0", "--no-escape"]
    return cmd + (["--spec-draft-n-max", str(draft)] if draft is not None else [])


def run_lookup(tools: PeerTools, model: Path, prompt_text: str, n_new: int, draft: int | None, threads: int,
               n_ctx: int, timeout_s: float = 600.0) -> LookupRun:
    """One llama-lookup generation of `prompt_text` (tokenized by llama-lookup itself with BOS and
    special tokens parsed, like ``Engine.encode_prompt``)."""
    with tempfile.TemporaryDirectory(prefix="lookup-") as tmp:
        prompt_file = Path(tmp) / "prompt.txt"
        # -f drops one trailing newline (a chat prompt ends with one: add one to be dropped);
        # --no-escape keeps backslashes in code as they are
        prompt_file.write_text(prompt_text + "\n", encoding="utf-8")
        cmd = lookup_command(tools, model, prompt_file, n_new, draft, threads, n_ctx)
        # cwd: it writes its (empty-named) dynamic n-gram cache file relative to it
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, cwd=tmp)
    err = proc.stderr.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"llama-lookup exited with {proc.returncode}: {err.strip()[-600:]}")
    return parse_lookup(proc.stdout.decode("utf-8", errors="replace"), err, prompt_text)


def parse_lookup(stdout: str, stderr: str, prompt_text: str) -> LookupRun:
    """Its timing and counts (stderr) and generated text (stdout: the prompt echoed, then the output)."""
    decoded = DECODED.search(stderr)
    if decoded is None:
        raise RuntimeError(f"llama-lookup printed no 'decoded ... tokens in ... seconds' line: {stderr[-600:]}")
    draft, drafted, accepted = N_DRAFT.search(stderr), N_DRAFTED.search(stderr), N_ACCEPT.search(stderr)
    at = stdout.find(prompt_text)  # echoed token by token (special tokens as text), after the BOS
    text = stdout[at + len(prompt_text):] if at >= 0 else stdout
    return LookupRun(int(decoded.group(1)), float(decoded.group(2)), text, int(draft.group(1)) if draft else 0,
                     int(drafted.group(1)) if drafted else 0, int(accepted.group(1)) if accepted else 0)


def run_llama_bench(tools: PeerTools, model: Path, depth: int, n_new: int, threads: int,
                    timeout_s: float = 600.0) -> float:
    """Plain C++ decode tokens/s at `depth` tokens of context (llama-bench -p 0 -n n_new -d depth,
    one repetition: the benchmark's own rounds repeat it)."""
    cmd = [str(tools.bench), "-m", str(model), "-p", "0", "-n", str(n_new), "-d", str(depth), "-t", str(threads),
           "-r", "1", "-o", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"llama-bench exited with {proc.returncode}: {proc.stderr.strip()[-600:]}")
    rows = json.loads(proc.stdout)
    return float(rows[0]["avg_ts"])
