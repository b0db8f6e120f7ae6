"""``python -m localrag ask``: answer one question over the indexed documents.

    python -m localrag ask "what does my contract say about termination?" --mode plain
    python -m localrag ask "..." --mode rasd [--draft smollm2-135m-instruct]
    python -m localrag ask "..." --mode specrag [--verifier gemma3-270m] --json
    python -m localrag ask "..." --collection work --k 8

Modes: ``plain`` / ``rasd`` stuff the top-k chunks into one prompt (``rasd`` adds the
lossless speedup); ``specrag`` is Speculative RAG (drafts from chunk subsets, verified).
"""

from __future__ import annotations

import json
import sys

from localrag.answer import MODES, AnswerResult
from localrag.config import ModelConfig, SpecRagConfig

DEFAULT_VERIFIER = "gemma3-270m"


def add_cli(sub) -> None:
    from localrag.cli import add_model_args, add_sampling_args

    p = sub.add_parser("ask", help="answer a question from your documents")
    p.add_argument("question")
    p.add_argument("--mode", choices=MODES, default="plain")
    p.add_argument("--collection", default=None, help="document collection (default: 'default')")
    p.add_argument("--k", type=int, default=5, help="chunks stuffed into the prompt (plain/rasd)")
    p.add_argument("--index-dir", default=None, help="index folder (default: docs_index/ or LOCALRAG_INDEX_DIR)")
    p.add_argument("--verifier", default=DEFAULT_VERIFIER, help="specrag verifier model (any vocabulary)")
    p.add_argument("--draft", default=None, help="rasd draft model (must share the target's vocabulary)")
    p.add_argument("--n", type=int, default=None, help="specrag: chunks retrieved (default 10)")
    p.add_argument("--clusters", type=int, default=None, help="specrag: k clusters = chunks per draft (default 2)")
    p.add_argument("--drafts", type=int, default=None, help="specrag: m drafts (default 5)")
    add_model_args(p)
    add_sampling_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    p.set_defaults(func=cmd_ask)


def build_answerer(args):
    """Engine (+ verifier / draft as the mode needs) and the document index, from CLI args."""
    from localrag.answer import Answerer
    from localrag.cli import model_config
    from localrag.engine import Engine
    from localrag.rag import DocumentIndex, IndexConfig

    engine = Engine.load(model_config(args))
    verifier = draft = None
    if args.mode == "specrag" and args.verifier and args.verifier != args.model:
        verifier = Engine.load(ModelConfig(model=args.verifier, n_ctx=4096, n_batch=1024,
                                           n_gpu_layers=args.gpu_layers, n_threads=args.threads))
    if args.mode == "rasd" and args.draft:
        from localrag.spec import load_draft

        draft = load_draft(engine.backend, args.draft)
    index = DocumentIndex(IndexConfig.from_env(collection=args.collection, index_dir=args.index_dir))
    changes = {key: val for key, val in (("n", args.n), ("k", args.clusters), ("m", args.drafts)) if val}
    spec = SpecRagConfig().with_(**changes)
    return Answerer(engine, index, verifier=verifier, rasd_draft=draft, specrag_config=spec)


def cmd_ask(args) -> int:
    from localrag.cli import generation_config
    from localrag.models import ModelError

    try:
        answerer = build_answerer(args)
    except (ModelError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    gen = generation_config(args)
    result = None
    try:
        for item in answerer.stream(args.question, [], args.mode, gen, k=args.k, collection=args.collection):
            if isinstance(item, AnswerResult):
                result = item
            elif not args.json:
                print(item, end="", flush=True)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    assert result is not None
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
        return 0
    print()
    print_details(result)
    return 0


def print_details(result: AnswerResult) -> None:
    """Sources, drafts and timing after a streamed answer (to stderr, so stdout is the answer)."""
    out = sys.stderr
    print(f"\n[{result.searched}]", file=out)
    for i, c in enumerate(result.citations, start=1):
        print(f"  [{i}] {c.label}: {c.snippet}", file=out)
    for d in result.drafts:
        print(f"  draft score {d.score:+.2f} (draft {d.draft_logprob:.1f}, consistency {d.consistency:.1f}, "
              f"reflection {d.reflection:.2f}): {d.answer!r}", file=out)
    times = {k: round(v, 3) for k, v in result.stats.items() if k.endswith("_s") and isinstance(v, float)}
    print(f"  supported={result.supported} timing={times}", file=out)
