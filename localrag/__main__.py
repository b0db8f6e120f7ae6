"""Command line: ``python -m localrag <command> ...``.

Each area of the engine contributes its own subcommands through an
``add_cli(subparsers)`` function; this module only assembles them.

    python -m localrag models
    python -m localrag generate "The capital of France is" --json
    python -m localrag chat
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that define add_cli(subparsers). Each subcommand sets `func(args) -> int`.
CLI_MODULES = (
    "localrag.cli",
    "localrag.rag.cli",
    "localrag.bench.cli",
    "localrag.answer_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m localrag", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in CLI_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # an area not present in this checkout
            if exc.name != name:
                raise
            continue
        module.add_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
