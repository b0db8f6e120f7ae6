"""``python -m localrag ask``: answer one question over the indexed documents.

    python -m localrag ask "what does my contract say about termination?" --mode plain
    python -m localrag ask "..." --mode rasd [--draft smollm2-135m-instruct]
    python -m localrag ask "..." --mode grounded [--verifier gemma3-270m] --json
    python -m localrag ask "..." --collection work --k 8
    python -m localrag ask "..." --on-unsupported refuse
    python -m localrag ask "when was it founded?" --history chat.json   # a follow-up in a conversation

The modes come from the registry (``localrag.modes``); ``specrag`` is accepted for ``grounded``.
The answer is printed once it is checked against the documents: on stdout, with ``[n]`` after
each supported sentence (n: the source, listed on stderr with its supporting passage), or, when
the documents do not support it and the setting refuses, the refusal (the answer then follows on
stderr, labelled unsupported). ``--json`` prints the whole result: citations, what else was
searched, and the evidence of every sentence (``"supported": false`` on those not found).
``--history FILE.json`` (a JSON list of ``{"role", "content"}`` turns) answers the question as the
next turn of that conversation: the model sees the turns, and the search adds the earlier
questions' key terms (``localrag.rag.followup``), as the app does.
"""

from __future__ import annotations

import json
import sys

from localrag.answer import Answerer, unsupported_reason
from localrag.cli import add_model_args, add_sampling_args, generation_config, model_config
from localrag.config import GroundedConfig
from localrag.engine import Engine
from localrag.evidence import mark_citations
from localrag.grounded import load_verifier
from localrag.models import ModelError
from localrag.modes import MODES, AnswerRequest, get_mode, mode_names
from localrag.rag.config import IndexConfig
from localrag.rag.followup import read_history
from localrag.rag.index import DocumentIndex
from localrag.rasd import load_draft
from localrag.results import ON_UNSUPPORTED, AnswerResult


def add_cli(sub) -> None:
    p = sub.add_parser("ask", help="answer a question from your documents")
    p.add_argument("question")
    p.add_argument("--mode", choices=mode_names(), default="plain",
                   help="; ".join(f"{m.id}: {m.summary}" for m in MODES.values()))
    p.add_argument("--collection", default=None, help="document collection (default: 'default')")
    p.add_argument("--k", type=int, default=5, help="chunks stuffed into the prompt (plain/rasd)")
    p.add_argument("--index-dir", default=None, help="index folder (default: docs_index/ or LOCALRAG_INDEX_DIR)")
    p.add_argument("--verifier", default=GroundedConfig().verifier, help="grounded: verifier model (any vocabulary)")
    p.add_argument("--draft", default=None, help="rasd draft model (must share the target's vocabulary)")
    p.add_argument("--n", type=int, default=None, help="grounded: chunks retrieved (default 10)")
    p.add_argument("--clusters", type=int, default=None, help="grounded: k clusters = chunks per draft (default 2)")
    p.add_argument("--drafts", type=int, default=None, help="grounded: m drafts (default 5)")
    p.add_argument("--on-unsupported", choices=ON_UNSUPPORTED, default=None,
                   help="an answer the documents do not support: warn (print it, marked) or refuse "
                        "(say so instead); default: the mode's (plain and rasd warn, grounded refuses)")
    add_model_args(p)
    add_sampling_args(p)
    p.add_argument("--history", default=None, metavar="FILE.json",
                   help='earlier turns, a JSON list of {"role", "content"}: the question follows up on them')
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    p.set_defaults(func=cmd_ask)


def build_answerer(args) -> Answerer:
    """Engine (+ verifier / draft as the mode needs) and the document index, from CLI args."""
    mode = get_mode(args.mode)
    engine = Engine.load(model_config(args))
    ok, why = mode.available(engine)
    if not ok:
        raise ValueError(f"{mode.label} is unavailable: {why}")
    changes = {key: val for key, val in (("n", args.n), ("k", args.clusters), ("m", args.drafts)) if val}
    grounded = GroundedConfig(verifier=args.verifier).with_(**changes)
    verifier = draft = None
    if mode.id == "grounded" and args.verifier != args.model:
        verifier = load_verifier(grounded, engine.backend.config)
    if mode.id == "rasd" and args.draft:
        draft = load_draft(engine.backend, args.draft)
    index = DocumentIndex(IndexConfig.from_env(collection=args.collection, index_dir=args.index_dir))
    return Answerer(engine, index, verifier=verifier, rasd_draft=draft, grounded_config=grounded)


def cmd_ask(args) -> int:
    try:
        history = tuple(read_history(args.history)) if args.history else ()
        answerer = build_answerer(args)
    except (ModelError, ValueError) as exc:  # HistoryError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    request = AnswerRequest(args.question, history, gen=generation_config(args), k=args.k,
                            collection=args.collection, on_unsupported=args.on_unsupported)
    if not args.json and sys.stderr.isatty():
        print("answering… (the answer is printed once it is checked against your documents)", file=sys.stderr)
    try:
        result = get_mode(args.mode).answer(answerer, request)
    except RuntimeError as exc:
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
    print(f"\n[{result.searched}]", file=out)
    for i, c in enumerate(result.citations, start=1):
        quotes = [c.text[sp.start:sp.end] for s in (ev.sentences if ev else ()) if s.supported
                  for sp in s.spans if sp.chunk_id == c.chunk_id]
        shown = " … ".join(dict.fromkeys(" ".join(q.split()) for q in quotes)) or c.snippet
        print(f"  [{i}] {c.label}: “{shown}”", file=out)
    for c in result.also_searched:
        print(f"  also searched, not cited: {c.label}: {c.snippet}", file=out)
    for d in result.drafts:
        print(f"  draft score {d.score:+.2f} (draft {d.draft_logprob:.1f}, consistency {d.consistency:.1f}, "
              f"reflection {d.reflection:.2f}): {d.answer!r}", file=out)
    s = result.stats
    times = {"retrieve": round(s.retrieval.seconds, 3), "total": round(s.total_s, 3)}
    if s.generation is not None:
        times |= {"prefill": round(s.generation.prefill_seconds, 3), "decode": round(s.generation.decode_seconds, 3)}
    if s.grounded is not None:
        times |= {"draft": round(s.grounded.draft_s, 3), "verify": round(s.grounded.verify_s, 3)}
    print(f"  supported={result.supported} timing_s={times}", file=out)
