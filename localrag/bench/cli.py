"""``python -m localrag bench ...``: each benchmark module adds its own sub-subcommand."""

from __future__ import annotations

from localrag.bench import (
    api,
    followup,
    grounding,
    ingest,
    kernels,
    pipeline,
    plain,
    prompts,
    qa,
    repetition,
    retrieval,
    speed,
)

BENCH_MODULES = (plain, kernels, ingest, pipeline, retrieval, followup, speed, qa, grounding, prompts, repetition, api)


def add_cli(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="run a benchmark and print ratios")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for module in BENCH_MODULES:
        module.add_bench_cli(bench_sub)
