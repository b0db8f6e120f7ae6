"""``python -m localrag ask``: answer one question over the indexed documents.

    python -m localrag ask "what does my contract say about termination?" --mode plain
    python -m localrag ask "..." --mode speedup [--draft qwen2.5-coder-0.5b-instruct | --draft none]
    python -m localrag ask "..." --mode grounded [--drafter auto] [--verifier target] --json
    python -m localrag ask "..." --collection work --k 8
    python -m localrag ask "..." --on-unsupported refuse
    python -m localrag ask "when was it founded?" --history chat.json   # a follow-up in a conversation
    python -m localrag ask "..." --engine-url http://127.0.0.1:8080/v1     # the model on a serving engine

The modes come from the registry (``localrag.modes``), and so do their options: every option
field of every mode is a flag (``--k``, ``--draft``, ``--drafter``, ``--verifier``, ...); a mode
takes the ones it has. The answer is printed once it is checked against the documents: on stdout,
with ``[n]`` after each supported sentence (n: the source, listed on stderr with its supporting
passage), or, when the documents do not support it and the setting refuses, the refusal (the
answer then follows on stderr, labelled unsupported). ``--json`` prints the whole result:
citations, what else was searched, and the evidence of every sentence (``"supported": false`` on
those not found). ``--history FILE.json`` (a JSON list of ``{"role", "content"}`` turns) answers
the question as the next turn of that conversation: the model sees the turns, and the search adds
the earlier questions' key terms (``localrag.rag.followup``), as the app does.
"""

from __future__ import annotations

import html
import json
import sys

from localrag.answer import Answerer
from localrag.app.options import add_endpoint_args, endpoint_config
from localrag.backends.endpoint import EndpointEngine, EndpointError
from localrag.cli.core import add_model_args, add_sampling_args, generation_config, model_config
from localrag.engine import Engine
from localrag.evidence import mark_citations, unsupported_reason
from localrag.models import ModelError
from localrag.modes import MODES, AnswerRequest, get_mode, option_fields
from localrag.modes.base import default_of
from localrag.rag.config import IndexConfig
from localrag.rag.followup import read_history
from localrag.rag.indexes import IndexSet
from localrag.results import AnswerResult


def add_cli(sub) -> None:
    p = sub.add_parser("ask", help="answer a question from your documents")
    p.add_argument("question")
    p.add_argument("--mode", default="plain", metavar="|".join(MODES),
                   help="; ".join(f"{m.id}: {m.summary}" for m in MODES.values()))
    p.add_argument("--collection", default=None, help="document collection (default: 'default')")
    p.add_argument("--index-dir", default=None, help="index folder (default: docs_index/ or LOCALRAG_INDEX_DIR)")
    add_option_args(p)
    add_model_args(p)
    add_endpoint_args(p)
    add_sampling_args(p)
    p.add_argument("--history", default=None, metavar="FILE.json",
                   help='earlier turns, a JSON list of {"role", "content"}: the question follows up on them')
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    p.set_defaults(func=cmd_ask)


def add_option_args(p) -> None:
    """One flag per option field of the registry's modes (a field several modes share, once)."""
    seen: dict[str, list[str]] = {}
    helps: dict[str, str] = {}
    for mode in MODES.values():
        for f in option_fields(mode.options_type):
            seen.setdefault(f.name, []).append(mode.id)
            helps.setdefault(f.name, f"{f.metadata['help']} (default {default_of(f)})")
    for name, modes in seen.items():
        p.add_argument(f"--{name.replace('_', '-')}", dest=f"opt_{name}", default=None,
                       help=f"{'/'.join(modes)}: {helps[name]}")


def option_values(args) -> dict[str, object]:
    return {k[4:]: v for k, v in vars(args).items() if k.startswith("opt_") and v is not None}


def build_answerer(args) -> Answerer:
    """The target model (here, or on a serving engine) and the document indexes, from CLI args (the
    mode loads what else it needs)."""
    endpoint = endpoint_config(args)
    if endpoint is not None:
        engine = EndpointEngine(endpoint)
        engine.check()  # the server answers and serves the model asked for (EndpointError, one line)
    else:
        engine = Engine.load(model_config(args))
    indexes = IndexSet(IndexConfig.from_env(collection=args.collection or "default", index_dir=args.index_dir))
    return Answerer(engine, indexes)


def cmd_ask(args) -> int:
    try:
        mode = get_mode(args.mode)
        history = tuple(read_history(args.history)) if args.history else ()
        request = AnswerRequest(args.question, history, gen=generation_config(args), collection=args.collection,
                                options=mode.options(option_values(args)))
        answerer = build_answerer(args)
        ok, why = mode.available(answerer)
        if not ok:
            raise ValueError(f"{mode.label} is unavailable: {why}")
    except (ModelError, ValueError, EndpointError) as exc:  # HistoryError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.json and sys.stderr.isatty():
        print("answering… (the answer is printed once it is checked against your documents)", file=sys.stderr)
    try:
        result = mode.answer(answerer, request)
    except (RuntimeError, ModelError, OSError) as exc:  # EndpointError (a server that failed) included
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
        return 0
    print(shown_answer(result))
    print_details(result)
    return 0


def shown_answer(result: AnswerResult) -> str:
    """stdout: the refusal, or the answer with [n] after each supported sentence."""
    if result.refused:
        return result.refusal
    return mark_citations(result.text, result.evidence).text if result.evidence is not None else result.text


def print_details(result: AnswerResult) -> None:
    """The evidence, sources, drafts and timing after the answer (to stderr, so stdout is the answer)."""
    out = sys.stderr
    ev = result.evidence
    if result.refused and result.text:
        print(f"\nUnsupported answer (not found in your documents):\n{result.text}", file=out)
    elif not result.supported and result.text:
        print(f"\nWarning: your documents do not support this answer ({unsupported_reason(ev)}).", file=out)
    for s in ev.sentences if ev is not None and not result.refused else ():
        if not s.supported:
            print(f'  not found in your documents: "{s.text}" ({s.reason})', file=out)
    # a refusal on stdout already says what was searched: not said twice when both reach the terminal
    print("" if result.refused else f"\n[{result.searched}]", file=out)
    for i, c in enumerate(result.citations, start=1):
        quotes = [c.text[sp.start:sp.end] for s in (ev.sentences if ev else ()) if s.supported
                  for sp in s.spans if sp.chunk_id == c.chunk_id]
        shown = " … ".join(dict.fromkeys(" ".join(q.split()) for q in quotes)) or c.snippet
        print(f"  [{i}] {c.label}: “{shown}”", file=out)
    for c in result.also_searched:
        print(f"  also searched, not cited: {c.label}: {c.snippet}", file=out)
    for note in result.notes:
        print(f"  note: {note}", file=out)
    panel = result.extras.panel() if result.extras is not None else None
    if panel is not None:
        print(f"\n{panel[0]}\n{html.unescape(panel[1])}", file=out)  # the page's Markdown, its text unescaped
    s = result.stats
    times = {"search": round(s.search.seconds, 3), "total": round(s.total_s, 3)}
    if s.generation is not None:
        times |= {"prefill": round(s.generation.prefill_seconds, 3), "decode": round(s.generation.decode_seconds, 3)}
    extra = " · ".join(result.extras.stats_parts(s)) if result.extras is not None else ""
    print(f"  supported={result.supported} timing_s={times}" + (f" ({extra})" if extra else ""), file=out)
