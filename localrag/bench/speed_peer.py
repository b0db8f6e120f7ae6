"""``bench speed``'s C++ peer methods: llama.cpp's own programs on the same prompts and model.

  llama-lookup      llama.cpp's n-gram lookup decoding (examples/lookup) at its default draft
                    length (``--spec-draft-n-max``, 3 in the vendored version)
  llama-lookup-dN   the same with a draft of N tokens (the issue compared 3 and 8)
  llama-bench       plain C++ decoding at the prompt's depth (``llama-bench -p 0 -d <prompt
                    tokens> -n <new tokens>``): how much of a gap is the Python loop itself

Each runs in its own process, interleaved with the other methods prompt by prompt and round by
round, on llama.cpp's default kernels (the user's settings: greedy, the same threads and context).
The prompt is passed as the exact rendered text, checked to tokenize to the same ids as ours
(the same chat template, BOS and special tokens), and decode time is the program's own.
"""

from __future__ import annotations

import re
from pathlib import Path

from localrag.bench.peer import PeerTools, run_llama_bench, run_lookup
from localrag.config import GenerationConfig
from localrag.engine import Engine

LOOKUP_METHOD = re.compile(r"llama-lookup(?:-d(\d+))?$")
PEER_METHODS = ("llama-lookup", "llama-bench")  # and llama-lookup-dN


def is_peer_method(method: str) -> bool:
    return method == "llama-bench" or LOOKUP_METHOD.match(method) is not None


class CppPeers:
    """Runs the peer methods for one loaded engine (its model file, threads and context size)."""

    def __init__(self, tools: PeerTools, engine: Engine, n_ctx: int):
        self.tools = tools
        self.engine = engine
        self.model = Path(engine.backend.model_spec.path)
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

    def run(self, method: str, text: str, ids: list[int], cfg: GenerationConfig, plain_text: str) -> dict:
        """One timed run: {"n": tokens decoded, "decode_s", "identical" (None: not comparable), "stats"}."""
        if method == "llama-bench":
            tps = run_llama_bench(self.tools, self.model, len(ids), cfg.max_tokens, self.threads)
            return {"n": cfg.max_tokens, "decode_s": cfg.max_tokens / tps, "identical": None, "stats": {}}
        m = LOOKUP_METHOD.match(method)
        draft = int(m.group(1)) if m and m.group(1) else None
        run = run_lookup(self.tools, self.model, self.peer_text(text, ids), cfg.max_tokens, draft, self.threads,
                         self.n_ctx)
        # its output runs on past the answer by up to a draft (and renders the end-of-turn token):
        # the same answer is plain's text followed by anything
        return {"n": run.n_tokens, "decode_s": run.decode_s, "identical": run.text.startswith(plain_text),
                "stats": {"n_draft": run.n_draft, "n_drafted": run.n_drafted, "n_accept": run.n_accept,
                          "mean_accepted": run.n_tokens / max(run.n_tokens - run.n_accept, 1)}}
