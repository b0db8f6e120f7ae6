"""``python -m localrag serve``: the API and MCP tools without the UI.

    localrag serve [--host 127.0.0.1] [--port 8000] [--model NAME|PATH] [--index-dir DIR]
                   [--data-dir DIR] [--api-key KEY] [--max-file-mb MB]

Binds 127.0.0.1 unless --host says otherwise. With --api-key (or LOCALRAG_API_KEY), every call
must carry ``Authorization: Bearer KEY``. The folders the collections watch (``python -m localrag
watch``) are synced at start and followed until exit.
"""

from __future__ import annotations

import sys

from localrag.app.options import add_server_args, server_config


def add_cli(sub) -> None:
    p = sub.add_parser("serve", help="serve the OpenAI-compatible API and the MCP tools (no UI)")
    add_server_args(p, default_port=8000)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args) -> int:
    try:
        cfg = server_config(args)
    except ValueError as exc:  # a bad --engine-url
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"[localrag] loading model {cfg.model.model} …" if cfg.endpoint is None
          else f"[localrag] connecting to the serving engine {cfg.endpoint.base} …", flush=True)
    # Imported here, after the first line: FastAPI, uvicorn and the mcp package would add ~2 s to
    # every other `python -m localrag` command (measured on 2 cores: `python -c "import
    # localrag.__main__"` 2.6-3.3 s, with `localrag.api.app` imported too 4.7-4.9 s).
    from localrag.api.app import create_app, run
    from localrag.app.services import LOAD_ERRORS, Services, open_engine

    try:
        engine = open_engine(cfg)
    except LOAD_ERRORS as exc:
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
