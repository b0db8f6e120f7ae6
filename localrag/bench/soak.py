"""A soak of the server: many clients streaming at once for a long while, over the OpenAI API and
MCP, against the project's own ``python -m localrag serve`` on a free loopback port.

    python -m localrag bench soak [--clients 8] [--minutes 30] [--model NAME|PATH] [--seed 0] [--json]

First three small generated collections are ingested into a throwaway index; the server is then
started on it (127.0.0.1 only) and follows the third collection's folder. Every distinct request
is asked alone (the lone twins), then ``--clients`` clients send requests for ``--minutes``: a third
of them (every third client) over MCP (``ask_documents`` and ``search_documents``, each session
reused for a few calls), the others as streamed chat completions over a mix of modes (every mode
the model allows) and collections, some closing the connection after the first piece. Alongside,
a file of the watched folder is added or rewritten every ``--ingest-every`` seconds. No request
starts after the deadline or past ``--max-requests``. Every request is then asked alone again,
and the server is stopped.

Reported: errors (with examples); p50 and p95 time to first token and to the end; the server's
resident memory and open descriptors over time (sampled every ``--sample-every`` seconds: after the
warm-up, at the end with no client connected, and the least-squares slope per minute of the load's
samples after the warm-up); and whether each greedy answer equals its lone twin. The requests on
the changed collection are not compared (its answers may change with it); the newest write must be
found by a search once the load is over.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import httpx
import numpy as np
import psutil

from localrag.bench.api import ServerProcess
from localrag.bench.common import fmt, output, table
from localrag.bench.soak_load import (
    REQUEST_TIMEOUT_S,
    Churn,
    Load,
    Outcome,
    Probe,
    Sample,
    ask_alone,
    mcp_client,
    openai_client,
    sample,
    sampler,
)
from localrag.config import ModelConfig
from localrag.models import BUNDLED, CHUNKED
from localrag.modes import MODES

CHURN = "soak-churn"
COLLECTIONS = {  # collection: ({file: text}, questions)
    "soak-harbour": ({
        "harbour.md": "# The harbour\n\nThe harbour master Ines Varga keeps the log of every ship that enters the "
                      "port. The blue ferry Aurora leaves for the island at seven in the morning and returns at six "
                      "in the evening. The lighthouse on the north pier was painted red in 2021.\n",
        "ferry.md": "# Ferry fares\n\nA single ticket on the Aurora costs four euros; children under twelve travel "
                    "free. Bicycles are carried on the lower deck for one euro.\n"},
        ("What time does the blue ferry leave for the island?", "Who keeps the harbour log?",
         "How much does a single ferry ticket cost?")),
    "soak-garden": ({
        "garden.txt": "Notes on the community garden.\n\nThe community garden grows tomatoes, beans and sunflowers. "
                      "Watering happens every Tuesday and Saturday morning. The garden keeps three beehives behind "
                      "the shed.\n",
        "compost.md": "# Compost\n\nThe compost heap is turned on the first Sunday of each month by Tomas Brandt. "
                      "Kitchen scraps go in the green bin by the gate.\n"},
        ("Which days is the garden watered?", "How many beehives does the garden keep?",
         "Who turns the compost heap?")),
}
CHURN_QUESTION = "What did the tide marker read at dawn?"
CHAT_QUESTION = "Name three colours."  # no collection: the model answers from the messages alone


def add_bench_cli(sub) -> None:
    p = sub.add_parser("soak", help="many streaming clients (OpenAI API and MCP) against serve for a long while")
    p.add_argument("--model", default=ModelConfig().model, help="registry name (or its unique start) or .gguf path")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--minutes", type=float, default=30.0, help="how long requests keep being started")
    p.add_argument("--max-requests", type=int, default=100_000, help="no request starts past this many")
    p.add_argument("--seed", type=int, default=0, help="the clients' choices of request and disconnect")
    p.add_argument("--modes", default=",".join(MODES), help="the modes asked (those the model allows)")
    p.add_argument("--questions", type=int, default=2, help="questions per collection (at most 3)")
    p.add_argument("--max-tokens", type=int, default=48, help="max_tokens of the streamed answers")
    p.add_argument("--disconnect-rate", type=float, default=0.15,
                   help="share of streamed requests closed by their client after the first piece")
    p.add_argument("--ingest-every", type=float, default=20.0, help="seconds between writes to the watched folder")
    p.add_argument("--sample-every", type=float, default=5.0, help="seconds between samples of the server")
    p.add_argument("--warmup-minutes", type=float, default=None,
                   help="samples before this are left out of the slope (default: a quarter, at most 5)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_soak)


def cmd_soak(args) -> int:
    problem = check_args(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped from outside: still stop the server
    result = run_soak(args)
    output(result, args.json, print_soak)
    return 0 if not result["errors"]["count"] else 1


def check_args(args) -> str:
    if args.clients < 1:
        return "--clients must be at least 1"
    if args.minutes <= 0 or args.sample_every <= 0 or args.ingest_every <= 0:
        return "--minutes, --sample-every and --ingest-every must be positive"
    if not 1 <= args.questions <= 3:
        return "--questions must be 1, 2 or 3"
    unknown = [m for m in args.modes.split(",") if m not in MODES]
    if unknown or not args.modes:
        return f"--modes: unknown {', '.join(unknown)}; choose among {', '.join(MODES)}"
    if not 0 <= args.disconnect_rate <= 1:
        return "--disconnect-rate must be between 0 and 1"
    return ""


def log(message: str) -> None:
    """A line of progress on stderr (the report goes to stdout)."""
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def model_name(arg: str) -> str:
    """A registry name, also from its unique start (``smollm2``); anything else as given."""
    names = [*BUNDLED, *CHUNKED]
    starts = [n for n in names if n.startswith(arg)]
    return starts[0] if arg not in names and len(starts) == 1 and not Path(arg).exists() else arg


def probes(questions: int, max_tokens: int, modes: list[str]) -> list[Probe]:
    """Every distinct request of the soak."""
    out = [Probe("openai", CHAT_QUESTION, None, "plain", max_tokens),
           Probe("openai", CHURN_QUESTION, CHURN, "plain", max_tokens, compared=False),
           Probe("mcp-search", CHURN_QUESTION, CHURN, compared=False)]
    for collection, (_, asked) in COLLECTIONS.items():
        for i, question in enumerate(asked[:questions]):
            out += [Probe("openai", question, collection, mode, max_tokens) for mode in modes]
            out += [Probe("mcp-ask", question, collection, modes[i % len(modes)]),
                    Probe("mcp-search", question, collection)]
    return out


def make_collections(folder: Path, churn: Churn) -> None:
    """The collections ingested before the server starts; the churned one is watched by it."""
    from localrag.rag import DocumentIndex, IndexConfig

    for collection, (files, _) in COLLECTIONS.items():
        src = folder / "docs" / collection
        src.mkdir(parents=True)
        for name, text in files.items():
            (src / name).write_text(text)
        index = DocumentIndex(IndexConfig(index_dir=folder / "index", collection=collection))
        index.ingest([src])
        index.close()
    churn.write()
    index = DocumentIndex(IndexConfig(index_dir=folder / "index", collection=CHURN))
    index.ingest([churn.folder])
    index.watch(churn.folder)
    index.close()


def run_soak(args) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="localrag-soak-"))
    model = model_name(args.model)
    churn = Churn(folder / "docs" / CHURN, args.ingest_every)
    churn.folder.mkdir(parents=True)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    server = None
    try:
        make_collections(folder, churn)
        server = ServerProcess(model, folder=folder)
        server.wait_ready(timeout=1800)  # a shared, loaded machine can take minutes
        result = asyncio.run(soak(args, server, churn))
    finally:
        if server is not None:
            server.stop()
        exit_code = server.proc.returncode if server is not None else None
        shutil.rmtree(folder, ignore_errors=True)
    if exit_code != 0:
        result["errors"]["count"] += 1
        result["errors"]["examples"].append(f"the server exited with {exit_code} when stopped")
    return {"model": model, "date": date, "clients": args.clients, "minutes": args.minutes, "seed": args.seed,
            "server_exit_code": exit_code, **result}


async def soak(args, server: ServerProcess, churn: Churn) -> dict:
    base = server.url
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        model = (await http.get("/v1/models")).json()["data"][0]["id"]
    proc = psutil.Process(server.proc.pid)
    samples: list[Sample] = []
    phase = ["lone-before"]
    t0 = time.monotonic()  # moved to the load's start below
    stop_sampling = asyncio.Event()
    sampling = asyncio.create_task(sampler(proc, args.sample_every, t0, lambda: phase[0], samples, stop_sampling))

    pool = probes(args.questions, args.max_tokens, args.modes.split(","))
    before: dict[str, Outcome] = {}
    left_out: dict[str, str] = {}  # mode: why the server refused it
    errors: list[str] = []
    for n, probe in enumerate(pool, 1):
        if probe.mode in left_out:
            continue
        outcome = await ask_alone(base, model, probe)
        log(f"alone before the load {n}/{len(pool)}: {probe.key} {outcome.end_s or 0:.1f} s {outcome.error[:100]}")
        if f"mode {probe.mode} is unavailable" in outcome.error:
            left_out[probe.mode] = outcome.error  # a mode this model does not allow (400, or the tool's error)
        elif outcome.error:
            errors.append(f"alone before the load: {probe.key}: {outcome.error}")
        before[probe.key] = outcome
    pool = [p for p in pool if p.mode not in left_out and not before[p.key].error]

    quiet_before = sample(proc, 0.0, "lone-before")
    load = Load(base, model, [p for p in pool if p.channel == "openai"], [p for p in pool if p.channel != "openai"],
                deadline=time.monotonic() + args.minutes * 60, max_requests=args.max_requests,
                disconnect_rate=args.disconnect_rate, seed=args.seed, progress=log)
    shift = time.monotonic() - t0  # the samples' clock starts at the load
    for s in samples:
        s.t_s -= shift
    t0 += shift
    sampling.cancel()
    stop_sampling = asyncio.Event()
    phase[0] = "load"
    sampling = asyncio.create_task(sampler(proc, args.sample_every, t0, lambda: phase[0], samples, stop_sampling))
    stop_churn = asyncio.Event()
    churning = asyncio.create_task(churn.run(stop_churn))
    log(f"load: {args.clients} clients for {args.minutes:g} min")
    clients = [asyncio.create_task(mcp_client(load, i) if i % 3 == 2 else openai_client(load, i))
               for i in range(args.clients)]
    done, pending = await asyncio.wait(clients, timeout=args.minutes * 60 + REQUEST_TIMEOUT_S)
    for task in pending:
        task.cancel()
    cut = len(pending)
    log(f"load over: {len(load.outcomes)} requests, {sum(bool(o.error) for o in load.outcomes)} failed")
    load_s = time.monotonic() - t0
    stop_churn.set()
    await churning
    await asyncio.sleep(2)  # the server closes the connections the clients closed
    phase[0] = "end"
    quiet_end = sample(proc, time.monotonic() - t0, "end")
    found_after = await find_newest_write(base, model, churn)

    phase[0] = "lone-after"
    log(f"newest write found after {found_after} s; asking each request alone again")
    after = {p.key: await ask_alone(base, model, p) for p in pool}
    stop_sampling.set()
    await sampling
    samples.append(quiet_end)

    errors += [f"{o.probe.key}: {o.error}" for o in load.outcomes if o.error]
    errors += [f"alone after the load: {k}: {o.error}" for k, o in after.items() if o.error]
    errors += [f"a client stopped on {t.exception()!r}" for t in done if t.exception() is not None]
    if cut:
        errors.append(f"{cut} client(s) still running {REQUEST_TIMEOUT_S:.0f} s after the deadline, cancelled")
    if found_after is None:
        errors.append(f"the newest write to {CHURN} ({churn.last_word}) was not found by a search")
    warmup = args.warmup_minutes if args.warmup_minutes is not None else min(5.0, args.minutes / 4)
    return {"load_s": load_s, "modes": [m for m in args.modes.split(",") if m not in left_out], "modes_left_out": left_out,
            "requests": counts(load.outcomes, args.clients), "latency_s": latencies(load.outcomes),
            "equality": equality(load.outcomes, before, after),
            "server": resources(samples, warmup, quiet_before, quiet_end),
            "ingest": {"collection": CHURN, "writes": churn.writes, "every_s": args.ingest_every,
                       "newest_found_after_s": found_after},
            "errors": {"count": len(errors), "examples": errors[:10]},
            "samples": [asdict(s) for s in samples]}


async def find_newest_write(base: str, model: str, churn: Churn, timeout_s: float = 120) -> float | None:
    """Seconds until a search of the churned collection finds the newest write's word (None: not in time)."""
    probe = Probe("mcp-search", churn.last_word, CHURN, compared=False)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        outcome = await ask_alone(base, model, probe)
        if not outcome.error and churn.last_word in outcome.text:
            return time.monotonic() - t0
        await asyncio.sleep(2)
    return None


def counts(outcomes: list[Outcome], clients: int) -> dict:
    by = {ch: sum(o.probe.channel == ch for o in outcomes) for ch in ("openai", "mcp-ask", "mcp-search")}
    modes = {}
    for o in outcomes:
        if o.probe.channel != "mcp-search":
            modes[o.probe.mode] = modes.get(o.probe.mode, 0) + 1
    collections = {}
    for o in outcomes:
        name = o.probe.collection or "(none)"
        collections[name] = collections.get(name, 0) + 1
    return {"total": len(outcomes), **by, "disconnected": sum(o.disconnected for o in outcomes),
            "failed": sum(bool(o.error) for o in outcomes), "by_mode": modes, "by_collection": collections,
            "openai_clients": sum(i % 3 != 2 for i in range(clients)),
            "mcp_clients": sum(i % 3 == 2 for i in range(clients))}


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    return {"n": len(values), "p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95)),
            "max": max(values)}


def latencies(outcomes: list[Outcome]) -> dict:
    ok = [o for o in outcomes if not o.error]
    return {"openai_ttft": percentiles([o.ttft_s for o in ok if o.probe.channel == "openai"]),
            "openai_end": percentiles([o.end_s for o in ok if o.probe.channel == "openai" and not o.disconnected]),
            "mcp_ask_end": percentiles([o.end_s for o in ok if o.probe.channel == "mcp-ask"]),
            "mcp_search_end": percentiles([o.end_s for o in ok if o.probe.channel == "mcp-search"])}


def equality(outcomes: list[Outcome], before: dict[str, Outcome], after: dict[str, Outcome]) -> dict:
    """Each complete answer under load against its lone twin (asked before the load), and each lone
    answer after the load against the same before it."""
    checked = [o for o in outcomes if o.probe.compared and not o.disconnected and not o.error]
    differ = [o for o in checked if o.text != before[o.probe.key].text]
    lone = [k for k, o in after.items() if before[k].probe.compared and not o.error]
    drifted = [k for k in lone if after[k].text != before[k].text]
    examples = [{"request": o.probe.key, "alone": before[o.probe.key].text[:200], "under_load": o.text[:200]}
                for o in differ[:5]]
    examples += [{"request": k, "alone": before[k].text[:200], "alone_after": after[k].text[:200]}
                 for k in drifted[:5]]
    return {"under_load_equal": len(checked) - len(differ), "under_load_compared": len(checked),
            "after_equal": len(lone) - len(drifted), "after_compared": len(lone),
            "not_compared_churned": sum(not o.probe.compared for o in outcomes),
            "not_compared_disconnected": sum(o.disconnected for o in outcomes), "examples": examples}


def slope_per_min(points: list[Sample], key: str) -> float | None:
    """Least-squares slope of ``key`` against time, per minute."""
    if len(points) < 3:
        return None
    t = np.array([p.t_s / 60 for p in points])
    return float(np.polyfit(t, np.array([getattr(p, key) for p in points], dtype=float), 1)[0])


def resources(samples: list[Sample], warmup_min: float, quiet_before: Sample, quiet_end: Sample) -> dict:
    warm = [s for s in samples if s.phase == "load" and s.t_s >= warmup_min * 60]
    start = warm[0] if warm else None

    def one(key: str) -> dict:
        load = [getattr(s, key) for s in samples if s.phase == "load"]
        return {"quiet_before_load": getattr(quiet_before, key), "after_warmup": getattr(start, key, None),
                "end": getattr(quiet_end, key), "slope_per_min": slope_per_min(warm, key),
                "min": min(load, default=None), "max": max(load, default=None)}

    return {"warmup_min": warmup_min, "samples_after_warmup": len(warm), "rss_mib": one("rss_mib"), "fds": one("fds")}


def print_soak(r: dict) -> None:
    q, lat, eq, srv = r["requests"], r["latency_s"], r["equality"], r["server"]
    print(f"soak {r['date']}: model {r['model']}, {r['clients']} clients ({q['openai_clients']} OpenAI streaming, "
          f"{q['mcp_clients']} MCP), {r['load_s'] / 60:.1f} min of load, seed {r['seed']}")
    left = "; ".join(f"{m} left out ({why[:80]})" for m, why in r["modes_left_out"].items())
    print(f"modes {', '.join(r['modes'])}" + (f"; {left}" if left else ""))
    print(f"requests: {q['total']} ({q['openai']} OpenAI streamed, {q['mcp-ask']} MCP ask, {q['mcp-search']} MCP "
          f"search), {q['disconnected']} closed by the client after the first piece, {q['failed']} failed")
    print("  by mode: " + ", ".join(f"{k} {v}" for k, v in q["by_mode"].items())
          + "; by collection: " + ", ".join(f"{k} {v}" for k, v in q["by_collection"].items()))
    print()
    rows = [(name, s["n"], fmt(s["p50"], ".2f"), fmt(s["p95"], ".2f"), fmt(s["max"], ".2f"))
            for name, s in (("OpenAI time to first token", lat["openai_ttft"]), ("OpenAI time to the end", lat["openai_end"]),
                            ("MCP ask_documents", lat["mcp_ask_end"]), ("MCP search_documents", lat["mcp_search_end"]))]
    print(table([("latency (s)", 28), ("n", 5), ("p50", 8), ("p95", 8), ("max", 8)], rows))
    print()
    print(f"server process (sampled every few s; warm-up {srv['warmup_min']:.1f} min, "
          f"{srv['samples_after_warmup']} samples after it):")
    rows = [(name, fmt(v["quiet_before_load"], fm), fmt(v["after_warmup"], fm), fmt(v["end"], fm),
             fmt(v["slope_per_min"], "+.3f"), f"{fmt(v['min'], fm)}-{fmt(v['max'], fm)}")
            for name, v, fm in (("RSS (MiB)", srv["rss_mib"], ".1f"), ("open descriptors", srv["fds"], "d"))]
    print(table([("", 17), ("idle before", 12), ("after warm-up", 14), ("end (idle)", 11), ("slope/min", 10),
                 ("range under load", 17)], rows))
    print(timeline(r["samples"]))
    print()
    print(f"greedy answers equal to the same request alone: under load {eq['under_load_equal']}/"
          f"{eq['under_load_compared']}; alone after the load {eq['after_equal']}/{eq['after_compared']} "
          f"(not compared: {eq['not_compared_churned']} on {r['ingest']['collection']}, which the ingest changes; "
          f"{eq['not_compared_disconnected']} closed early)")
    for ex in eq["examples"]:
        print(f"  DIFFERENT {ex}")
    found = r["ingest"]["newest_found_after_s"]
    print(f"ingest alongside: {r['ingest']['writes']} writes to {r['ingest']['collection']} (every "
          f"{r['ingest']['every_s']:g} s); the newest found by a search after the load: "
          + ("no" if found is None else f"yes ({found:.1f} s)"))
    print(f"server stopped with exit code {r['server_exit_code']}")
    print(f"errors: {r['errors']['count']}")
    for e in r["errors"]["examples"]:
        print(f"  {e[:300]}")


def timeline(samples: list[dict], rows: int = 10) -> str:
    """RSS and descriptors at about ``rows`` evenly spaced moments of the load."""
    load = [s for s in samples if s["phase"] in ("load", "end")]
    if not load:
        return ""
    picks = sorted({round(i * (len(load) - 1) / max(rows - 1, 1)) for i in range(rows)})
    return "  over time: " + "  ".join(f"{load[i]['t_s'] / 60:.1f}m {load[i]['rss_mib']:.0f}MiB/{load[i]['fds']}fd"
                                       for i in picks)
