"""``bench speed``'s C++ peers: llama.cpp's own programs on the same prompts and model.

  llama-lookup      llama.cpp's n-gram lookup decoding (examples/lookup): prompt/context n-gram
                    speculative decoding with a draft chain of ``--spec-draft-n-max`` tokens (3 by
                    default in the vendored version), greedy, no tree, no draft model, no cost model.
                    Its decode speed is read from its own timing line ("decoded N tokens in S
                    seconds"), so model loading and the prompt prefill are not counted
  llama-lookup-dN   the same with a draft of N tokens (the issue compared 3 and 8)
  llama-speculative[-dN][-pP]
                    llama.cpp's draft-model speculative decoding (examples/speculative-simple,
                    ``--spec-type draft-simple``) with the same draft model as Speedup (``--draft``):
                    a chain of up to N drafted tokens (llama.cpp's default 3), drafting stopped
                    where the draft's own probability falls under P (default 0: never)
  llama-speculative-ngram[-dN][-pP]
                    the same program with n-gram lookup in front of the draft model
                    (``--spec-type ngram-simple,draft-simple``: this llama.cpp tries its proposers
                    in order and takes the first draft), the closest C++ peer of RASD's fusion
  llama-bench       plain C++ decoding at the prompt's depth (``llama-bench -p 0 -d <prompt
                    tokens> -n <new tokens>``): how much of a gap is the Python loop around
                    llama.cpp rather than the algorithm

Each runs in its own process, interleaved with the other methods prompt by prompt and round by
round, on llama.cpp's default kernels (the user's settings: greedy, the same threads and context).
The prompt is passed as the exact rendered text, checked to tokenize to the same ids as ours
(the same chat template, BOS and special tokens), and decode time is the program's own.

The programs are built on demand from the llama.cpp sources that the installed llama-cpp-python
vendors (its sdist from PyPI), with the CPU flags ``scripts/setup.sh`` built the Python package
with, and cached under ``default_cache_dir() / "llama.cpp"`` (``localrag.llamacpp_build``,
which builds ``llama-server`` the same way):

    tools = peer_tools()                 # builds once (minutes on 2 cores); PeerUnavailable if it cannot
    run = run_lookup(tools, model, prompt_text, n_new=64, draft=3, threads=2, n_ctx=4096)
    print(run.n_tokens / run.decode_s)
    spec = run_speculative(tools, model, draft_model, prompt_text, n_new=64, setting=DraftSetting(8, 0.0, False),
                           threads=2, n_ctx=4096)
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from localrag.bench.speed_runs import Run
from localrag.config import GenerationConfig
from localrag.engine import Engine
from localrag.llamacpp_build import BuildUnavailable, llama_programs

LOOKUP_METHOD = re.compile(r"llama-lookup(?:-d(\d+))?$")
SPEC_METHOD = re.compile(r"llama-speculative(-ngram)?(?:-d(\d+))?(?:-p([0-9.]+))?$")
# and llama-lookup-dN, llama-speculative[-ngram][-dN][-pP]
PEER_METHODS = ("llama-lookup", "llama-speculative", "llama-speculative-ngram", "llama-bench")
TARGETS = ("llama-lookup", "llama-bench", "llama-speculative-simple")
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
    speculative: Path
    version: str  # llama-cpp-python's version, whose vendored llama.cpp was built


@dataclass(frozen=True)
class PeerRun:
    """One llama-lookup or llama-speculative-simple run, as the program itself timed it."""

    n_tokens: int  # tokens it decoded (it stops after the step that passes n_new, so up to n_max more)
    decode_s: float  # its decode loop, prompt prefill excluded
    text: str  # the generated text (special tokens rendered as text)
    n_draft: int  # its draft length (--spec-draft-n-max)
    n_drafted: int
    n_accept: int


@dataclass(frozen=True)
class DraftSetting:
    """A llama-speculative method's knobs, from its name."""

    n_max: int | None  # --spec-draft-n-max (None: llama.cpp's default)
    p_min: float | None  # --spec-draft-p-min (None: llama.cpp's default)
    ngram: bool  # n-gram lookup tried before the draft model


def draft_setting(method: str) -> DraftSetting | None:
    """The knobs of a llama-speculative method name; None for any other name."""
    m = SPEC_METHOD.match(method)
    if m is None:
        return None
    return DraftSetting(int(m.group(2)) if m.group(2) else None, float(m.group(3)) if m.group(3) else None,
                        m.group(1) is not None)


def needs_draft(method: str) -> bool:
    """Whether a peer method runs a draft model (so ``bench speed`` needs ``--draft``)."""
    return draft_setting(method) is not None


def peer_tools() -> PeerTools:
    """The built programs; builds them first when missing (``localrag.llamacpp_build``). Raises PeerUnavailable."""
    programs = llama_programs(TARGETS)
    return PeerTools(programs["llama-lookup"], programs["llama-bench"], programs["llama-speculative-simple"],
                     llama_cpp.__version__)


def lookup_command(tools: PeerTools, model: Path, prompt_file: Path, n_new: int, draft: int | None,
                   threads: int, n_ctx: int) -> list[str]:
    """llama-lookup as a user runs it for greedy output: llama.cpp's default kernels and batch
    sizes, the given thread count and context. It samples n_predict + 1 tokens at least (its loop
    stops after the step that passes n_predict), so ``-n n_new - 1`` gives n_new tokens at least.
    draft None: its default draft length."""
    cmd = [str(tools.lookup), "-m", str(model), "-f", str(prompt_file), "-n", str(max(n_new - 1, 1)),
           "-c", str(n_ctx), "-t", str(threads), "-tb", str(threads), "--temp", "0", "--seed", "0", "--no-escape"]
    return cmd + (["--spec-draft-n-max", str(draft)] if draft is not None else [])


def speculative_command(tools: PeerTools, model: Path, draft_model: Path, prompt_file: Path, n_new: int,
                        setting: DraftSetting, threads: int, n_ctx: int) -> list[str]:
    """llama-speculative-simple as lookup_command runs llama-lookup (greedy, default kernels, the
    same -n convention), with the draft model on the same threads and context."""
    types = "ngram-simple,draft-simple" if setting.ngram else "draft-simple"
    cmd = [str(tools.speculative), "-m", str(model), "-md", str(draft_model), "--spec-type", types, "-f",
           str(prompt_file), "-n", str(max(n_new - 1, 1)), "-c", str(n_ctx), "-t", str(threads), "-tb",
           str(threads), "-td", str(threads), "--temp", "0", "--seed", "0", "--no-escape"]
    if setting.n_max is not None:
        cmd += ["--spec-draft-n-max", str(setting.n_max)]
    if setting.p_min is not None:
        cmd += ["--spec-draft-p-min", str(setting.p_min)]
    return cmd


def run_lookup(tools: PeerTools, model: Path, prompt_text: str, n_new: int, draft: int | None, threads: int,
               n_ctx: int, timeout_s: float = 600.0) -> PeerRun:
    """One llama-lookup generation of `prompt_text` (tokenized by llama-lookup itself with BOS and
    special tokens parsed, like ``Engine.encode_prompt``)."""
    return _run_program(lambda f: lookup_command(tools, model, f, n_new, draft, threads, n_ctx), prompt_text,
                        timeout_s)


def run_speculative(tools: PeerTools, model: Path, draft_model: Path, prompt_text: str, n_new: int,
                    setting: DraftSetting, threads: int, n_ctx: int, timeout_s: float = 600.0) -> PeerRun:
    """One llama-speculative-simple generation of `prompt_text` (tokenized as run_lookup does)."""
    return _run_program(lambda f: speculative_command(tools, model, draft_model, f, n_new, setting, threads, n_ctx),
                        prompt_text, timeout_s)


def _run_program(command: Callable[[Path], list[str]], prompt_text: str, timeout_s: float) -> PeerRun:
    """Run ``command(prompt_file)`` on `prompt_text` written to a file, and parse what it printed."""
    with tempfile.TemporaryDirectory(prefix="peer-") as tmp:
        prompt_file = Path(tmp) / "prompt.txt"
        # -f drops one trailing newline (a chat prompt ends with one: add one to be dropped);
        # --no-escape keeps backslashes in code as they are
        prompt_file.write_text(prompt_text + "\n", encoding="utf-8")
        cmd = command(prompt_file)
        # cwd: llama-lookup writes its (empty-named) dynamic n-gram cache file relative to it
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, cwd=tmp)
    err = proc.stderr.decode("utf-8", errors="replace")
    name = Path(cmd[0]).name
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited with {proc.returncode}: {err.strip()[-600:]}")
    return parse_peer_output(proc.stdout.decode("utf-8", errors="replace"), err, prompt_text, name)


def parse_peer_output(stdout: str, stderr: str, prompt_text: str, name: str = "llama-lookup") -> PeerRun:
    """Its timing and counts (stderr) and generated text (stdout: the prompt echoed, then the output);
    llama-lookup and llama-speculative-simple print the same lines."""
    decoded = DECODED.search(stderr)
    if decoded is None:
        raise RuntimeError(f"{name} printed no 'decoded ... tokens in ... seconds' line: {stderr[-600:]}")
    draft, drafted, accepted = N_DRAFT.search(stderr), N_DRAFTED.search(stderr), N_ACCEPT.search(stderr)
    at = stdout.find(prompt_text)  # echoed token by token (special tokens as text), after the BOS
    text = stdout[at + len(prompt_text):] if at >= 0 else stdout
    return PeerRun(int(decoded.group(1)), float(decoded.group(2)), text, int(draft.group(1)) if draft else 0,
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


# ------------------------------------------------------------------ the methods
def is_peer_method(method: str) -> bool:
    return method == "llama-bench" or LOOKUP_METHOD.match(method) is not None or needs_draft(method)


class CppPeers:
    """Runs the peer methods for one loaded engine (its model file, threads and context size) and
    the draft model file of the speculative ones (None: those methods are refused)."""

    def __init__(self, tools: PeerTools, engine: Engine, n_ctx: int, draft_model: Path | None = None):
        self.tools = tools
        self.engine = engine
        self.model = Path(engine.backend.model_spec.path)
        self.draft_model = draft_model
        self.threads = engine.backend.n_threads
        self.n_ctx = n_ctx

    def peer_text(self, text: str, ids: list[int]) -> str:
        """The prompt as llama-lookup must receive it to tokenize it to `ids`: it always asks for
        BOS (add_special), so a rendered template's own BOS text goes. Raises if the ids differ."""
        be, bos = self.engine.backend, self.engine.prompt.bos_token
        if bos and be.add_bos and text.startswith(bos):
            text = text[len(bos):]
        if be.tokenize(text, add_special=True, parse_special=True) != ids:
            raise RuntimeError("the peer's prompt would not tokenize to the benchmark's prompt ids")
        return text

    def run(self, method: str, text: str, ids: list[int], cfg: GenerationConfig, plain_text: str) -> Run:
        """One timed run, its tokens counted in ``n`` (llama-bench's ``identical`` is None: it writes
        no answer to compare)."""
        if method == "llama-bench":
            tps = run_llama_bench(self.tools, self.model, len(ids), cfg.max_tokens, self.threads)
            return Run(decode_s=cfg.max_tokens / tps, n=cfg.max_tokens)
        setting = draft_setting(method)
        if setting is not None:
            if self.draft_model is None:
                raise ValueError(f"{method} needs a draft model")
            run = run_speculative(self.tools, self.model, self.draft_model, self.peer_text(text, ids),
                                  cfg.max_tokens, setting, self.threads, self.n_ctx)
        else:
            m = LOOKUP_METHOD.match(method)
            draft = int(m.group(1)) if m and m.group(1) else None
            run = run_lookup(self.tools, self.model, self.peer_text(text, ids), cfg.max_tokens, draft, self.threads,
                             self.n_ctx)
        # its output runs on past the answer by up to a draft (and renders the end-of-turn token):
        # the same answer is plain's text followed by anything
        return Run(decode_s=run.decode_s, n=run.n_tokens, identical=run.text.startswith(plain_text),
                   stats={"n_draft": run.n_draft, "n_drafted": run.n_drafted, "n_accept": run.n_accept,
                          "mean_accepted": run.n_tokens / max(run.n_tokens - run.n_accept, 1)})
