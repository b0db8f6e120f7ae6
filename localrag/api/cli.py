"""``python -m localrag serve``: the API and MCP tools without the UI.

    python -m localrag serve [--host 127.0.0.1] [--port 8000] [--model NAME|PATH] [--index-dir DIR]
                             [--data-dir DIR] [--api-key KEY]

Binds 127.0.0.1 unless --host says otherwise. With --api-key (or LOCALRAG_API_KEY), every call
must carry ``Authorization: Bearer KEY``. The folders the collections watch (``python -m localrag
watch``) are synced at start and followed until exit.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from localrag.config import AppConfig, ModelConfig

API_KEY_ENV = "LOCALRAG_API_KEY"


def add_cli(sub) -> None:
    p = sub.add_parser("serve", help="serve the OpenAI-compatible API and the MCP tools (no UI)")
    add_server_args(p, default_port=8000)
    p.set_defaults(func=cmd_serve)


def add_server_args(p: argparse.ArgumentParser, default_port: int) -> None:
    """The options `serve` takes (the host, port, model and folders are app.py's too)."""
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=default_port)
    p.add_argument("--model", default=ModelConfig().model, help="registry name or .gguf path")
    p.add_argument("--gpu-layers", type=int, default=-1, help="-1 = all layers on the GPU when there is one")
    p.add_argument("--index-dir", type=Path, default=None, help="Chroma index + manifest (LOCALRAG_INDEX_DIR)")
    p.add_argument("--data-dir", type=Path, default=None, help="chat history + uploads (LOCALRAG_DATA_DIR)")
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on every API and MCP call ({API_KEY_ENV})")
    p.add_argument("--max-waiting", type=int, default=AppConfig().max_waiting,
                   help="requests that may wait for the model; more are refused with 429")


def server_config(a: argparse.Namespace) -> AppConfig:
    cfg = AppConfig(host=a.host, port=a.port, model=ModelConfig(model=a.model, n_gpu_layers=a.gpu_layers),
                    api_key=a.api_key or os.environ.get(API_KEY_ENV) or None, max_waiting=a.max_waiting)
    if a.index_dir:
        cfg = replace(cfg, index_dir=a.index_dir.expanduser().resolve())
    if a.data_dir:
        cfg = replace(cfg, data_dir=a.data_dir.expanduser().resolve())
    return cfg


def cmd_serve(args) -> int:
    cfg = server_config(args)
    print(f"[localrag] loading model {cfg.model.model} …", flush=True)
    # Imported here, after the first line: FastAPI, uvicorn and the mcp package would add ~2 s to
    # every other `python -m localrag` command (measured on 2 cores: `python -c "import
    # localrag.__main__"` 2.6-3.3 s, with `localrag.api.app` imported too 4.7-4.9 s).
    from localrag.api.app import create_app, run
    from localrag.engine import Engine
    from localrag.models import ModelError
    from localrag.ui.services import Services

    try:
        engine = Engine.load(cfg.model)
    except (ModelError, OSError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    services = Services(cfg, engine=engine)
    try:
        if services.check_index():  # the cheap part of `python -m localrag check`
            print(f"[localrag] {services.index_health}", file=sys.stderr, flush=True)
        n = services.start_watching()  # each remembered folder is synced first, on the watcher's thread
        app = create_app(services, host=cfg.host, api_key=cfg.api_key)
        print(f"[localrag] API on http://{cfg.host}:{cfg.port}/v1, MCP tools on http://{cfg.host}:{cfg.port}/mcp"
              + (" (API key required)" if cfg.api_key else "")
              + (f"; following {n} watched folder(s)" if n else ""), flush=True)
        run(app, cfg.host, cfg.port)
    finally:
        services.close()  # the folder watchers stop (a running sync ends at its next step)
    return 0
