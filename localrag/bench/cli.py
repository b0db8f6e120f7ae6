"""``python -m localrag bench ...``: each benchmark module adds its own sub-subcommand."""

from __future__ import annotations

import importlib

BENCH_MODULES = (
    "localrag.bench.plain",
    "localrag.bench.ingest",
    "localrag.bench.retrieval",
    "localrag.bench.speed",
    "localrag.bench.qa",
)


def add_cli(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="run a benchmark and print ratios")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for name in BENCH_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.add_bench_cli(bench_sub)
