"""The app's launcher (above the UI and the API, which never import each other): parse arguments, load the model with visible progress, serve the page, the
OpenAI-compatible API and the MCP tools from one process (one model, one index, one queue).

    python app.py [--host 127.0.0.1] [--port 7860] [--model NAME|PATH] [--gpu-layers N]
                  [--index-dir DIR] [--data-dir DIR] [--api-key KEY] [--no-api] [--share]

    http://127.0.0.1:7860/        the page
    http://127.0.0.1:7860/v1      the API (``localrag.api``)
    http://127.0.0.1:7860/mcp     the MCP tools

A model that fails to load does not stop the app: the page opens with the error
shown and a model picker to load another one. Gradio receives uploads under
``<data dir>/tmp`` (GRADIO_TEMP_DIR), not in the system's shared temp folder. The folders
the collections watch are synced at start (catching what changed while the app was down)
and followed until it exits.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import threading
import time
from dataclasses import replace

from localrag.app.config import AppConfig
from localrag.app.options import add_server_args, server_config
from localrag.models import ModelError

EXIT_GRACE_S = 2.0  # after closing, how long the process may take to end by itself


def parse_args(argv: list[str] | None = None) -> AppConfig:
    p = argparse.ArgumentParser(description="localrag: chat with your documents, locally")
    add_server_args(p, default_port=7860)
    p.add_argument("--share", action="store_true", help="create a public Gradio share link (off by default)")
    p.add_argument("--no-api", action="store_true", help="serve the page only (no /v1 API, no /mcp tools)")
    a = p.parse_args(argv)
    try:
        cfg = server_config(a)
    except ValueError as exc:  # a bad --engine-url
        p.error(str(exc))
    # a public share link never exposes the API (it goes through Gradio's own launch)
    return replace(cfg, share=a.share, api=not a.no_api and not a.share)


def _step(n: int, total: int, text: str) -> float:
    print(f"[localrag {n}/{total}] {text}", flush=True)
    return time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    # Gradio reads GRADIO_TEMP_DIR when it is imported: uploads land under our data dir, where
    # ingest removes them once staged, never in the system's temp folder shared with other apps.
    cfg.upload_temp_dir.mkdir(parents=True, exist_ok=True)
    os.environ["GRADIO_TEMP_DIR"] = str(cfg.upload_temp_dir.resolve())
    t = _step(1, 4, f"loading model {cfg.model.model} …" if cfg.endpoint is None
              else f"connecting to the serving engine {cfg.endpoint.base} …")
    # Imported after the first progress line: the engine, Chroma and Gradio take ~6 s to import on
    # a 2-core machine (python -X importtime -c "import localrag.ui.layout"), and the person who
    # started the app should see at once that it is starting.
    from localrag.app.services import Services, open_engine

    engine, error = None, ""
    try:
        engine = open_engine(cfg)
        print(f"[localrag 1/4] model {engine.model_name} ready in {time.perf_counter() - t:.1f} s", flush=True)
    except (ModelError, OSError, RuntimeError, ValueError) as exc:
        error = str(exc)
        print(f"[localrag 1/4] error: {error} (the UI opens anyway; pick another model there)",
              file=sys.stderr, flush=True)
    _step(2, 4, f"data in {cfg.data_dir}, index in {cfg.index_dir}")
    services = Services(cfg, engine=engine, engine_error=error)

    def warm() -> None:  # the embedding model loads in the background, so the first upload is quick
        try:
            t0 = time.perf_counter()
            services.ensure_embedder()
            print(f"[localrag] embedding model ready in {time.perf_counter() - t0:.1f} s", flush=True)
        except Exception as exc:
            print(f"[localrag] embedding model failed to load: {exc}", file=sys.stderr, flush=True)
        try:  # the cheap part of `python -m localrag check`: a warning on the page when unhealthy
            if services.check_index():
                print(f"[localrag] {services.index_health}", file=sys.stderr, flush=True)
        except Exception as exc:
            print(f"[localrag] the index check failed: {exc}", file=sys.stderr, flush=True)
        try:  # the watched folders, each synced first (catching what changed while the app was down)
            n = services.start_watching()
            if n:
                print(f"[localrag] following {n} watched folder(s), each synced first", flush=True)
        except Exception as exc:  # the app still serves; they are synced at the next start
            print(f"[localrag] watched folders not followed: {exc}", file=sys.stderr, flush=True)
        # the modes' one-time work (Speedup times the models once per machine), in line like an
        # answer, so that no one's first Speedup answer waits for it
        for note in services.warm_up():
            print(f"[localrag] {note}", flush=True)
        try:  # the chunk caches of documents added while the app was down (if the user reads with reuse)
            n = services.warm_cached_collections()
            if n:
                print(f"[localrag] warming the chunk cache of {n} collection(s) while the model is idle", flush=True)
        except Exception as exc:
            print(f"[localrag] the chunk cache is not warmed: {exc}", file=sys.stderr, flush=True)

    threading.Thread(target=warm, name="localrag-warm", daemon=True).start()
    _step(3, 4, "building the page …")
    import gradio as gr

    from localrag.ui.layout import CSS, HEAD, THEME, build_app  # Gradio: see the first import above

    demo = build_app(services).queue(default_concurrency_limit=2)
    try:
        if not cfg.api:  # --no-api, or --share: a public link must not expose the API without a key
            _step(4, 4, f"serving the page on http://{cfg.host}:{cfg.port}" + (
                " (+ public share link; the API and MCP tools are off with --share)" if cfg.share else ""))
            signal.signal(signal.SIGTERM, signal.default_int_handler)  # like Ctrl-C: Gradio closes, we clean up
            demo.launch(server_name=cfg.host, server_port=cfg.port, share=cfg.share, theme=THEME, css=CSS,
                        head=HEAD, show_error=False, quiet=False)
            return 0
        from localrag.api.app import create_app, run  # FastAPI and mcp: see the first import above

        app = gr.mount_gradio_app(create_app(services, host=cfg.host, api_key=cfg.api_key), demo, path="/",
                                  theme=THEME, css=CSS, head=HEAD, show_error=False)
        url = f"http://{cfg.host}:{cfg.port}"
        _step(4, 4, f"serving on {url} (page), {url}/v1 (OpenAI-compatible API), {url}/mcp (MCP tools)"
              + (" with an API key" if cfg.api_key else ""))
        run(app, cfg.host, cfg.port)
        return 0
    finally:
        services.close()  # the answer under way stops, the folder watchers stop
        _exit_soon()


def _exit_soon() -> None:
    """Once the app is closed, the process ends within EXIT_GRACE_S. Two things held it: the
    interpreter's last garbage collection over the whole heap (Gradio, Chroma, the models: ~3 s on
    2 cores), which frozen objects skip; and a page's worker thread still inside one step of an
    answer (a chunk of a long prompt's reading: seconds), which nothing would save any more (the
    page is gone; SQLite and the index are crash-safe), so after the grace the process ends anyway."""
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    timer = threading.Timer(EXIT_GRACE_S, os._exit, args=(0,))
    timer.daemon = True  # a process that ends by itself first ends it too
    timer.start()

