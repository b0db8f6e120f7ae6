"""``python -m localrag bench speed``: RASD vs plain vs prompt lookup, interleaved in one process.

    python -m localrag bench speed --suite docqa --model gemma3-270m --n 4 --max-new-tokens 64
    python -m localrag bench speed --suite chat --methods plain,pld,rasd --json
    python -m localrag bench speed --prompts my.jsonl --draft smollm2-135m-instruct
    python -m localrag bench speed --suite docqa --methods plain,rasd,llama-lookup,llama-speculative-d8
    python -m localrag bench speed --backend hf --draft smollm2-135m-instruct --max-depth 24 --draft-nodes 24
    python -m localrag bench speed --suite docqa-hotpot --methods plain,rasd,llama-lookup --breakdown
    python -m localrag bench speed --suite docqa,docqa-hotpot --split tune --methods plain,retrieval --tune

Prompts (``--split``): each suite's questions are split in two by a hash (``data.speed_split``): the
budget's constants are tuned on ``tune`` only (``--tune`` refuses any other split), and every figure
is reported from ``report`` (the default); ``all`` takes both. A ``--prompts`` file is read whole.

Methods (every prompt runs every method back to back, ``--repeats`` rounds, each run from an
empty cache, so machine load hits all alike):
  plain      one target forward per token (the reference; its greedy output is the truth)
  plain-cached  plain again, through the prompt cache: the KV cache holds the prompt's first two
             thirds and another continuation, so only the rest is prefilled (a chat's next turn);
             a check of identical outputs, run in the first round only
  pld        llama-cpp-python's own prompt-lookup decoding (Llama(draft_model=LlamaPromptLookupDecoding));
             timed against the same Llama object with the draft switched off, prompt KV reused by both
  retrieval  RASD decoder, retrieval tree only
  draft      RASD decoder, draft-model tree only (needs --draft)
  rasd       RASD decoder, retrieval + draft (when --draft) fused, cost-aware budget
  rasd-runs, retrieval-runs
             the same with ``RasdConfig.copy_runs``: a long copy's deeper nodes conditioned on their
             accepted ancestors (``phases.estimate``), to measure before it becomes the default
  llama-lookup, llama-lookup-dN, llama-bench
             llama.cpp's own C++ programs (``speed_peer``): n-gram lookup decoding at its default
             draft length or N, and plain C++ decoding at the prompt's depth; built on demand from
             the llama.cpp that llama-cpp-python vendors, skipped with the reason when
             they cannot be built
  llama-speculative[-dN][-pP], llama-speculative-ngram[-dN][-pP]
             llama.cpp's draft-model speculative decoding with the same --draft model (a chain
             of N, drafting stopped under probability P; -ngram: n-gram lookup first), needs --draft

Per suite it reports:
  * how many prompts each method answered token for token as plain's first round did, in every
    round (plain itself: its later rounds), as a plain count: "ident 30/30";
  * the median speedup over plain: tokens/s ratios per prompt and round, each against the plain
    run of the same round (with ``--backend hf`` also against ``hf-plain``);
  * tokens/s (``tokens_per_s``, median over prompts x rounds), mean accepted tokens per target
    forward, and every method's tokens/s over each C++ speculative peer's (lookup and
    draft-model) in the same round, with the best peer named;
  * a diagnostic for divergences: whether plain's top-2 logit margin there was below the
    measured batched-vs-single noise bound (a near-tie). The bound is the largest logit
    difference between plain's logits and the speculative decoders' own verification logits at
    identical contexts, over the suite (``verify_noise``: 0 when the backend is deterministic);
    the largest change of plain's top-2 margin is reported beside it;
  * the oracle bound (speedup if every drafted path were accepted, at the measured verify
    costs) and the time split (retrieve / draft / verify / plain steps);
  * the copy bound (``copy_bound``): the most that any drafter copying from the documents, the
    prompt and the answer so far (retrieval, n-gram lookup) could gain on plain's answers at the
    measured T(k), median over prompts; with a draft model, also the bound of copying plus that
    draft model guessing every other token at its measured forward (what RASD could reach);
  * with ``--breakdown``, per step (``speed_steps``): tree size and depth, tokens accepted, verify
    time, Python time between forwards, the gain a bet had to clear and the T(1) it was planned with
    (``--out``'s step records), and the steps that wrote one token while the datastore held a longer
    match the answer then wrote, beside the C++ peers' own drafted / accepted counts;
    with ``--tune`` (tune split only), the acceptance per match class the budget's prior stands for.

Prompts: the suites of :mod:`localrag.bench.data` (``load_suite``) or a ``--prompts`` JSONL file.
Files: this one (the command, the methods, the runner, the copy bound), ``speed_report`` (medians,
ratios and the printout), ``speed_peer`` (llama.cpp's C++ programs) and ``speed_hf`` (transformers).

Transformers backend: ``--backend hf`` loads the target through ``localrag.bench.speed_hf``
(``load_target``) and adds its methods (``extra_methods``: hf-plain, hf-pld, hf-assisted), each
``fn(engine, ids: list[int], cfg: GenerationConfig, docs: list[str]) -> Run``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from localrag.backends.base import Backend
from localrag.bench.common import output, write_json
from localrag.bench.data import SPEED_SPLITS, SUITES, Prompt, load_prompts_file, load_suite
from localrag.bench.speed_peer import (
    PEER_METHODS,
    CppPeers,
    PeerUnavailable,
    is_peer_method,
    needs_draft,
    peer_tools,
)
from localrag.bench.speed_report import first_divergence, print_report, summarise
from localrag.bench.speed_runs import MethodRuns, Run, SpeedRow, SuiteRuns
from localrag.bench.speed_steps import match_class_acceptance, step_rows, summarise_breakdown, tune_steps
from localrag.config import DEFAULT_MODEL, GenerationConfig, ModelConfig, RasdConfig
from localrag.engine import Engine
from localrag.generation import Decoder, Generation, PlainDecoder, Sampler
from localrag.models import ModelError, drafts_for
from localrag.rasd import RasdDecoder, load_draft
from localrag.rasd.budget import CostModel
from localrag.rasd.proposers import DRAFT_MAX_K

AUTO = "auto"  # --draft: the registry's draft for --model
METHODS = ("plain", "plain-cached", "pld", "retrieval", "draft", "rasd", "retrieval-runs", "rasd-runs", *PEER_METHODS)


def add_bench_cli(sub) -> None:
    p = sub.add_parser("speed", help="RASD speedup vs plain decoding and prompt lookup")
    p.add_argument("--suite", default="docqa", help=f"one of {', '.join(SUITES)} (comma list allowed)")
    p.add_argument("--prompts", default=None, help="JSONL file of {prompt, docs?} (instead of --suite data)")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--draft", default=AUTO,
                   help="draft model (same vocabulary) for the draft/rasd/llama-speculative methods: auto = the "
                        "registry's draft for --model (the 0.5B for the default 1.5B; none for the others), none, "
                        "or a name/path")
    p.add_argument("--backend", choices=("llamacpp", "hf"), default="llamacpp")
    p.add_argument("--device", default=None, help="hf: cuda, mps or cpu (default: LOCALRAG_HF_DEVICE or the first)")
    p.add_argument("--dtype", default=None, help="hf: float32, bf16 or fp16 (default: LOCALRAG_HF_DTYPE or by device)")
    p.add_argument("--split", choices=SPEED_SPLITS, default="report",
                   help="report: the questions never tuned on (default); tune: those the budget's constants "
                        "are tuned on; all (a --prompts file is read whole)")
    p.add_argument("--n", type=int, default=4, help="prompts per suite")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--methods", default="plain,plain-cached,pld,retrieval,rasd",
                   help=f"comma list of {','.join(METHODS)}, llama-lookup-dN (a draft of N tokens) or "
                        "llama-speculative[-ngram]-dN-pP")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds per prompt (median time)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-deterministic", action="store_true",
                   help="llama.cpp's default (batch-dependent) kernels: what determinism costs")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--recalibrate", action="store_true", help="measure the verify-cost curve T(k) again")
    p.add_argument("--max-depth", type=int, default=None, help="longest drafted path (RasdConfig.max_depth)")
    p.add_argument("--draft-nodes", type=int, default=None, help="draft tree/chain size (RasdConfig.draft_nodes)")
    p.add_argument("--out", default=None,
                   help="also write the report to this JSON file, rewritten after every suite (a long run shows "
                        "its finished suites as it goes)")
    p.add_argument("--breakdown", action="store_true",
                   help="per step: tree size and depth, accepted tokens, verify and Python time, missed copies "
                        "(our decoders), drafted and accepted counts (the C++ peers)")
    p.add_argument("--tune", action="store_true",
                   help="measure the acceptance per match class the budget's prior stands for (--split tune only)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_speed)


# --- methods ----------------------------------------------------------------------
class MarginRecorder(Decoder):
    """Plain decoding that records plain's top-2 margin at every token (and the first logits)."""

    def __init__(self, record: dict, keep_logits: int):
        self.record = record
        self.keep_logits = keep_logits

    def steps(self, backend: Backend, context: list[int], logits: np.ndarray,
              sampler: Sampler) -> Iterator[list[int]]:
        record = self.record
        while True:
            top = np.argpartition(-logits, 2)[:2]
            a, b = (top[0], top[1]) if logits[top[0]] >= logits[top[1]] else (top[1], top[0])
            record["margins"].append(float(logits[a] - logits[b]))
            record["top2"].append((int(a), int(b)))
            if len(record["logits"]) < self.keep_logits:
                record["logits"].append(np.array(logits, dtype=np.float32))
            token = sampler.pick(logits)
            yield [token]
            logits = backend.decode_one(token)


def run_generation(engine: Engine, ids: list[int], cfg: GenerationConfig, decoder: Decoder) -> Run:
    """One timed generation from an empty cache: every method and round prefills the whole prompt
    the same way, so all start from the same logits (reusing the previous run's KV would evaluate
    the last prompt token alone, and its slightly different logits can flip a near-tie)."""
    engine.backend.reset()
    gen = Generation(engine.backend, ids, decoder, cfg).run()
    decoder_stats = gen.stats.decoder.to_dict() if gen.stats.decoder is not None else {}
    return Run(decode_s=gen.stats.decode_seconds, tokens=list(gen.tokens), stats=decoder_stats)


def run_cached(engine: Engine, ids: list[int], cfg: GenerationConfig) -> Run:
    """Plain decoding through the prompt cache: the KV cache first holds the prompt's first two
    thirds followed by tokens of another text (the prompt's own opening, shifted), so the
    generation keeps the common prefix, drops the rest and prefills the prompt's last third,
    in chunks that differ from a fresh prefill's."""
    be = engine.backend
    cut = len(ids) * 2 // 3
    be.reset()
    be.prefill(ids[:cut] + ids[1 : 1 + min(16, cut)])
    gen = Generation(be, ids, PlainDecoder(), cfg).run()
    return Run(decode_s=gen.stats.decode_seconds, tokens=list(gen.tokens),
               reused_prompt_tokens=gen.stats.reused_prompt_tokens)


class PldRunner:
    """llama-cpp-python's high-level Llama with LlamaPromptLookupDecoding, timed vs itself without it."""

    def __init__(self, model_path: str, n_ctx: int, threads: int | None):
        self.draft = LlamaPromptLookupDecoding(num_pred_tokens=10)
        kw = {"n_threads": threads} if threads else {}
        # logits_all=True: Llama sizes its scores buffer from the logits_all *argument* even though a
        # draft model forces logits_all on, so prompts over n_batch tokens overflow it otherwise.
        self.llm = Llama(model_path=model_path, n_ctx=n_ctx, verbose=False, draft_model=self.draft,
                         logits_all=True, **kw)

    def _timed(self, ids, cfg, draft) -> tuple[float, str, int]:
        self.llm.draft_model = draft
        t0 = time.perf_counter()
        out = self.llm.create_completion(
            ids, max_tokens=cfg.max_tokens, temperature=0.0, top_k=1, stop=list(cfg.stop) or None
        )
        dt = time.perf_counter() - t0
        return dt, out["choices"][0]["text"], out["usage"]["completion_tokens"]

    def run(self, ids, cfg, plain_text: str) -> Run:
        """Prompt lookup, beside the same Llama's plain run (``llama_plain``); identical: the same
        text as our plain's."""
        self._timed(ids, cfg.with_(max_tokens=1), None)  # prefill once: both timed runs reuse the prompt KV
        t_plain, text_plain, n_plain = self._timed(ids, cfg, None)
        t_pld, text_pld, n_pld = self._timed(ids, cfg, self.draft)
        return Run(decode_s=t_pld, n=n_pld, identical=text_pld == plain_text,
                   stats={"identical_to_llama_plain": text_pld == text_plain},
                   llama_plain=Run(decode_s=t_plain, n=n_plain))


# --- noise bound -------------------------------------------------------------------
def verify_noise(plain_record: dict, spec_rows: list[np.ndarray], spec_tokens: list[int]) -> dict:
    """Batched-vs-single logits, measured where they matter: the logits plain decoding picked each
    token from (one token per forward) against those a speculative decoder picked the same token
    from (a row of a verified tree, or a plain step after tree steps), at identical contexts.

    plain_record: ``MarginRecorder``'s record with "tokens", "top2" and "logits" (logits[j] picked
    token j); spec_rows: the decoder's ``record_logits`` (row j-1 picked token j; token 0 comes from
    the shared prefill). Only tokens before the first divergence count (after it the contexts
    differ, and at it the difference is what is being explained)."""
    single, top2 = plain_record["logits"], plain_record["top2"]
    div = first_divergence(spec_tokens, plain_record["tokens"])
    n = min(len(single), len(spec_rows) + 1, div if div is not None else len(single))
    max_abs, max_margin = 0.0, 0.0
    for j in range(1, n):
        s, r = single[j], spec_rows[j - 1]
        a, b = top2[j]
        max_abs = max(max_abs, float(np.max(np.abs(r - s))))
        max_margin = max(max_margin, abs(float(r[a] - r[b]) - float(s[a] - s[b])))
    return {"max_abs_logit_diff": max_abs, "max_margin_diff": max_margin}


# --- the benchmark -------------------------------------------------------------------
def _load_target(args) -> Engine:
    if args.backend == "hf":
        from localrag.bench import speed_hf  # lazy: imports torch (seconds), only for --backend hf

        return speed_hf.load_target(args)
    return Engine.load(ModelConfig(model=args.model, n_ctx=args.ctx, n_threads=args.threads,
                                   deterministic=not args.no_deterministic))


def _extra_methods(args) -> dict:
    if args.backend != "hf":
        return {}
    from localrag.bench import speed_hf  # lazy: see _load_target

    return speed_hf.extra_methods(args)


def _encode(engine, p: Prompt, max_new: int) -> tuple[str, list[int], GenerationConfig]:
    """The prompt's rendered text (chat template applied for chat prompts), its ids and the config
    (no repetition guard: decoding speed over whole continuations, as the peers decode)."""
    cfg = GenerationConfig(max_tokens=max_new, repetition=None)
    if p.chat:
        text = engine.prompt.render(p.conversation)
        cfg = cfg.with_(stop=engine.prompt.stop)
    else:
        text = p.prompt
    return text, engine.encode_prompt(text), cfg


def run_suite(
    engine, prompts: list[Prompt], methods: list[str], decoders: dict, pld, extra: dict, max_new: int,
    repeats: int = 1, peers: CppPeers | None = None, cost: CostModel | None = None,
    draft_s: float | None = None, breakdown: bool = False,
) -> SuiteRuns:
    """Every method on every prompt, `repeats` rounds interleaved (every round's run is kept).
    With `cost`, plain's runs also hold the copy bound of its answer, and with `draft_s` (the
    draft model's one-token forward, seconds) the bound of copying plus that draft model. With
    `breakdown`, our decoders' first-round steps (their ``record_steps``) with the copy bound's run."""
    rows: list[SpeedRow] = []
    noise = {"max_abs_logit_diff": 0.0, "max_margin_diff": 0.0}
    for i, p in enumerate(prompts):
        text, ids, cfg = _encode(engine, p, max_new)
        rec = {"margins": [], "top2": [], "logits": []}
        runs: dict[str, list[Run]] = {}
        for rnd in range(repeats):
            plain = run_generation(engine, ids, cfg, MarginRecorder(rec, max_new) if rnd == 0 else PlainDecoder())
            runs.setdefault("plain", []).append(plain)
            truth = runs["plain"][0].tokens  # plain's first round: the answer every run is held to
            if rnd == 0:
                rec["tokens"] = truth
                plain_text = engine.backend.detokenize(truth)
            else:
                plain.identical = plain.tokens == truth
            for m in methods:
                if m == "plain" or (m == "pld" and pld is None) or (m == "plain-cached" and rnd > 0):
                    continue
                if m == "pld":
                    r = pld.run(ids, cfg, plain_text)
                elif is_peer_method(m):
                    r = peers.run(m, text, ids, cfg, plain_text)
                elif m == "plain-cached":
                    r = run_cached(engine, ids, cfg)
                elif m in extra:
                    r = extra[m](engine, ids, cfg, list(p.docs))
                else:
                    dec = decoders[m]
                    dec.set_documents(list(p.docs))
                    dec.record_logits = [] if rnd == 0 else None
                    dec.record_steps = breakdown and rnd == 0
                    r = run_generation(engine, ids, cfg, dec)
                    if rnd == 0:
                        nb = verify_noise(rec, dec.record_logits, r.tokens)
                        noise = {k: max(noise[k], nb[k]) for k in noise}
                        dec.record_logits = None
                if r.identical is None and r.n is None:  # our own Generation decoded it
                    r.identical = r.tokens == truth
                runs.setdefault(m, []).append(r)
        methods_runs = {m: MethodRuns(rs) for m, rs in runs.items()}
        methods_runs["plain"].margins = rec["margins"]
        for runs_ in methods_runs.values():
            log = [r.stats.pop("step_log", None) for r in runs_.rounds][0]
            if breakdown and log is not None:
                runs_.steps = step_rows(log, copyable(_sources(engine, p, ids), runs_.first.tokens))
        if cost is not None:
            plain_runs = methods_runs["plain"]
            plain_runs.copy_bound, plain_runs.draft_bound = _copy_bounds(engine, p, ids, rec["tokens"], cost, draft_s)
        rec["logits"] = []  # (max_new, V) floats: free them before the next prompt
        rows.append(SpeedRow(prompt=i, prompt_tokens=len(ids), methods=methods_runs))
    return SuiteRuns(rows, noise)


# --- the copy bound ------------------------------------------------------------------
def _copy_bounds(engine, p: Prompt, ids: list[int], tokens: list[int], cost: CostModel,
                 draft_s: float | None) -> tuple[float, float | None]:
    """What any drafter copying from the prompt's documents, the prompt and the answer could gain
    on plain's answer at this cost curve (paths up to its largest measured size), and with a draft
    model whose forward takes `draft_s` besides (None without one)."""
    sources, depth = _sources(engine, p, ids), int(cost.ks[-1]) - 1
    with_draft = copy_bound(sources, tokens, cost, depth, draft_s) if draft_s is not None else None
    return copy_bound(sources, tokens, cost, depth), with_draft


def _sources(engine, p: Prompt, ids: list[int]) -> list[list[int]]:
    """What a copying drafter copies from: the prompt's documents, then the prompt."""
    return [*(engine.backend.tokenize(d, add_special=False, parse_special=False) for d in p.docs), ids]


def copyable(sources: Sequence[Sequence[int]], answer: Sequence[int]) -> list[bool]:
    """Per answer token: did its pair (previous token, it) occur in a source or earlier in the
    answer? The last source is the one the answer continues (the prompt); token 0 pairs with its
    last token."""
    seen = {pair for src in sources for pair in zip(src, src[1:], strict=False)}
    prev = sources[-1][-1] if sources and sources[-1] else None
    flags = []
    for tok in answer:
        flags.append((prev, tok) in seen)
        seen.add((prev, tok))
        prev = tok
    return flags


def copy_bound(sources: Sequence[Sequence[int]], answer: Sequence[int], cost: Callable[[int], float],
               max_depth: int, draft_s: float | None = None) -> float:
    """Upper bound on the speedup over plain of any drafter that copies from `sources`; cost(k):
    seconds of one forward over k tokens; paths of at most `max_depth` drafted tokens.

    A drafter that copies (RASD's retrieval tree, llama.cpp's n-gram lookup, prompt lookup) can
    propose token x after token y only where the pair (y, x) occurs in what it copies from: the
    documents, the prompt and the answer so far. So on plain's own output, token j can be drafted
    only if it is ``copyable``. A step that emits r drafted tokens plus its bonus token verifies at
    least those r tokens and the root in one forward, T(r + 1), and needs all r copyable. The least
    time to write the answer is then a shortest path over positions:

        best[n] = 0
        best[i] = min(T(1) + best[i + 1],                                      # a plain step
                      min over r >= 1 with tokens i..i+r-1 copyable of
                          T(r + 1) + best[min(i + r + 1, n)])                  # r drafted + the bonus

    with token 0 given by the prefill. Plain's time over it, (n - 1) T(1) / best[1], bounds the
    speedup of every such drafter, tree or chain, however well it guesses, at this measured cost
    curve.

    With `draft_s` (a draft model's one-token forward, seconds), the bound of copying plus that
    draft model (RASD): a step may also carry tokens that are not copyable, each one drafted,
    which costs at least one draft forward (a chain's next token needs the forward over the one
    before), so r tokens of which u are not copyable cost T(r + 1) + u * draft_s. The draft is
    taken to guess every such token, and its prompt prefill is left out: an upper bound still."""
    n = len(answer)
    if n <= 1:
        return 1.0
    ok = copyable(sources, answer)
    best = [0.0] * (n + 1)
    for i in range(n - 1, 0, -1):
        least = cost(1) + best[i + 1]
        r, drafted = 0, 0.0  # tokens i..i+r-1 in this step, and what drafting their uncopyable ones costs
        while r < max_depth and i + r < n and (ok[i + r] or draft_s is not None):
            drafted += 0.0 if ok[i + r] else draft_s
            r += 1
            least = min(least, cost(r + 1) + drafted + best[min(i + r + 1, n)])
        best[i] = least
    return (n - 1) * cost(1) / best[1]


def chosen_draft(model: str, draft: str | None) -> str | None:
    """--draft as a model to load: auto = the registry's draft for ``model`` (None if it has none)."""
    if draft == AUTO:
        return next(iter(drafts_for(model)), None)
    return None if draft in (None, "", "none") else draft


def cmd_speed(args) -> int:
    args.draft = chosen_draft(args.model, args.draft)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    extra = _extra_methods(args)
    bad = [m for m in methods if m not in METHODS and m not in extra and not is_peer_method(m)]
    if bad:
        print(f"error: unknown method(s) {bad}; choose from {list(METHODS) + list(extra)}", file=sys.stderr)
        return 2
    if args.tune and (args.split != "tune" or args.prompts):
        print("error: tune on --split tune (the report split is kept apart)", file=sys.stderr)
        return 2
    if args.tune and not {"retrieval", "rasd"} & set(methods):
        print("error: --tune reads the retrieval lookups of the retrieval or rasd method", file=sys.stderr)
        return 2
    drafted = [m for m in methods if m == "draft" or needs_draft(m)]
    if drafted and not args.draft:
        print(f"error: method(s) {', '.join(drafted)} need --draft", file=sys.stderr)
        return 2
    try:
        engine = _load_target(args)
        draft = load_draft(engine.backend, args.draft) if args.draft else None
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    knobs = {"max_depth": args.max_depth, "draft_nodes": args.draft_nodes}
    config = RasdConfig(**{k: v for k, v in knobs.items() if v is not None})
    max_k = min(config.max_nodes, engine.backend.max_leaves) + 1
    cost = CostModel.load_or_measure(engine.backend, max_k, refresh=args.recalibrate)
    # the draft's one-token forward, for the bound of copying plus drafting (cached beside T(k))
    draft_s = CostModel.load_or_measure(draft, DRAFT_MAX_K)(1) if draft is not None else None
    decoders: dict[str, RasdDecoder] = {}
    if "retrieval" in methods:
        decoders["retrieval"] = RasdDecoder(engine.backend, config, None, cost=cost)
    if "draft" in methods:
        decoders["draft"] = RasdDecoder(engine.backend, replace(config, use_retrieval=False), draft, cost=cost)
    if "rasd" in methods:
        decoders["rasd"] = RasdDecoder(engine.backend, config, draft, cost=cost)
    if "retrieval-runs" in methods:
        decoders["retrieval-runs"] = RasdDecoder(engine.backend, replace(config, copy_runs=True), None, cost=cost)
    if "rasd-runs" in methods:
        decoders["rasd-runs"] = RasdDecoder(engine.backend, replace(config, copy_runs=True), draft, cost=cost)
    breakdown = args.breakdown or args.tune
    pld = None
    if "pld" in methods and args.backend == "llamacpp":
        pld = PldRunner(str(engine.backend.model_spec.path), args.ctx, args.threads)
    peers, skipped = _peers(methods, engine, args, draft)
    methods = [m for m in methods if m not in skipped]
    suites = [args.prompts] if args.prompts else [s.strip() for s in args.suite.split(",")]
    report = {"model": engine.model_name, "draft": args.draft, "deterministic": engine.backend.deterministic,
              "split": "file" if args.prompts else args.split, "cost_curve_ms": cost.to_dict(), "skipped": skipped,
              "suites": {}}
    for suite in suites:
        prompts = load_prompts_file(suite, args.n) if args.prompts else load_suite(suite, args.n, args.split)
        result = run_suite(engine, prompts, methods, decoders, pld, extra, args.max_new_tokens, args.repeats, peers,
                           cost, draft_s, breakdown)
        report["suites"][suite] = {"summary": summarise(result, methods), "rows": [r.to_json() for r in result.rows]}
        if breakdown:
            report["suites"][suite]["breakdown"] = summarise_breakdown(result, methods)
        if args.tune:
            report["suites"][suite]["tuned"] = match_class_acceptance(tune_steps(result))
        if args.out:
            write_json(args.out, report)
    return output(report, args.json, print_report)


def _peers(methods: list[str], engine: Engine, args,
           draft: Backend | None) -> tuple[CppPeers | None, dict[str, str]]:
    """The C++ peers if any method needs them (built on first use), and the methods skipped with why."""
    wanted = [m for m in methods if is_peer_method(m)]
    if not wanted:
        return None, {}
    if args.backend != "llamacpp":
        return None, dict.fromkeys(wanted, "the C++ peers run GGUF models with llama.cpp: use --backend llamacpp")
    try:
        draft_model = Path(draft.model_spec.path) if draft is not None and draft.model_spec else None
        return CppPeers(peer_tools(), engine, args.ctx, draft_model), {}
    except PeerUnavailable as exc:
        print(f"bench speed: {', '.join(wanted)} skipped: {exc}", file=sys.stderr)
        return None, dict.fromkeys(wanted, str(exc))


