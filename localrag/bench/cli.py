"""``python -m localrag bench ...``: each suite module adds its own sub-subcommand."""

from __future__ import annotations

from localrag.bench import (
    api,
    followup,
    grounding,
    ingest,
    ingest_pipeline,
    judge,
    kernels,
    plain,
    prompts,
    qa,
    repetition,
    search,
    soak,
    speed,
    ttft,
)

SUITES = (plain, kernels, ingest, ingest_pipeline, search, followup, speed, qa, grounding, prompts, repetition, api,
          ttft, soak, judge)


def add_cli(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="run a benchmark and print ratios")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for module in SUITES:
        module.add_bench_cli(bench_sub)
