"""Start the app: parse arguments, load the model with visible progress, serve the page.

    python app.py [--host 127.0.0.1] [--port 7860] [--model NAME|PATH] [--gpu-layers N]
                  [--index-dir DIR] [--data-dir DIR] [--share]

A model that fails to load does not stop the app: the page opens with the error
shown and a model picker to load another one.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from localrag.config import AppConfig, ModelConfig
from localrag.models import ModelError


def parse_args(argv: list[str] | None = None) -> AppConfig:
    p = argparse.ArgumentParser(description="localrag: chat with your documents, locally")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--share", action="store_true", help="create a public Gradio share link (off by default)")
    p.add_argument("--model", default=ModelConfig().model, help="registry name or .gguf path")
    p.add_argument("--gpu-layers", type=int, default=-1, help="-1 = all layers on the GPU when there is one")
    p.add_argument("--index-dir", type=Path, default=None, help="Chroma index + manifest (LOCALRAG_INDEX_DIR)")
    p.add_argument("--data-dir", type=Path, default=None, help="chat history + uploads (LOCALRAG_DATA_DIR)")
    a = p.parse_args(argv)
    cfg = AppConfig(host=a.host, port=a.port, share=a.share,
                    model=ModelConfig(model=a.model, n_gpu_layers=a.gpu_layers))
    if a.index_dir:
        cfg = replace(cfg, index_dir=a.index_dir.expanduser().resolve())
    if a.data_dir:
        cfg = replace(cfg, data_dir=a.data_dir.expanduser().resolve())
    return cfg


def _step(n: int, total: int, text: str) -> float:
    print(f"[localrag {n}/{total}] {text}", flush=True)
    return time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    t = _step(1, 4, f"loading model {cfg.model.model} …")
    # Imported after the first progress line: the engine, Chroma and Gradio take ~6 s to import on
    # a 2-core machine (python -X importtime -c "import localrag.ui.layout"), and the person who
    # started the app should see at once that it is starting.
    from localrag.engine import Engine
    from localrag.ui.services import Services

    engine, error = None, ""
    try:
        engine = Engine.load(cfg.model)
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

    threading.Thread(target=warm, name="localrag-warm", daemon=True).start()
    _step(3, 4, "building the page …")
    from localrag.ui.layout import CSS, THEME, build_app  # Gradio: see the first import above

    demo = build_app(services)
    _step(4, 4, f"serving on http://{cfg.host}:{cfg.port}" + (" (+ public share link)" if cfg.share else ""))
    demo.queue(default_concurrency_limit=2).launch(server_name=cfg.host, server_port=cfg.port, share=cfg.share,
                                                   theme=THEME, css=CSS, show_error=False, quiet=False)
    return 0
