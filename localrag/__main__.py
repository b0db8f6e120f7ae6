"""Command line: ``localrag <command> ...`` (or ``python -m localrag <command> ...``).

Each area of the engine contributes its own subcommands through an
``add_cli(subparsers)`` function; this module only assembles them. ``pyproject.toml`` installs
``main`` as the ``localrag`` command (``scripts/setup.sh``: an editable install into .venv).

    localrag models
    localrag generate "The capital of France is" --json
    localrag chat
"""

from __future__ import annotations

import argparse
import sys

from localrag.api import cli as api_cli
from localrag.bench import cli as bench_cli
from localrag.cli import ask, core
from localrag.rag import cli as rag_cli
from localrag.rag import watch_cli

# Each module defines add_cli(subparsers); each subcommand sets `func(args) -> int`.
CLI_MODULES = (core, rag_cli, watch_cli, bench_cli, ask, api_cli)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="localrag", description="Chat with your own documents, on this machine.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in CLI_MODULES:
        module.add_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
