"""The server options the app's launchers share (``python app.py`` and ``python -m localrag serve``):
where to bind, which model, which folders, the API key, how many may wait, the largest file; turned
into one AppConfig.

    p = argparse.ArgumentParser(); add_server_args(p, default_port=7860)
    cfg = server_config(p.parse_args())
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

from localrag.app.config import AppConfig
from localrag.backends.endpoint import EndpointConfig
from localrag.config import ModelConfig
from localrag.rag.config import IndexConfig

API_KEY_ENV = "LOCALRAG_API_KEY"
ENGINE_KEY_ENV = "LOCALRAG_ENGINE_KEY"


def add_server_args(p: argparse.ArgumentParser, default_port: int) -> None:
    """The options both launchers take."""
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
    p.add_argument("--max-file-mb", type=int, default=None, metavar="MB",
                   help=f"refuse uploaded and ingested files over this size (default {IndexConfig.max_file_mb}; "
                        "0 = no limit)")
    add_endpoint_args(p)


def add_endpoint_args(p: argparse.ArgumentParser) -> None:
    """--engine-url/--engine-model/--engine-key: the answer model on an OpenAI-compatible server."""
    p.add_argument("--engine-url", default=None, metavar="URL",
                   help="answer with the model of an OpenAI-compatible server (llama-server, vLLM, Ollama, "
                        "LM Studio: http://host:port/v1) instead of loading --model here")
    p.add_argument("--engine-model", default="", metavar="NAME",
                   help="the model name to ask the server for (default: the first it lists)")
    p.add_argument("--engine-key", default=None, metavar="KEY",
                   help=f"the server's API key ({ENGINE_KEY_ENV})")
    p.add_argument("--engine-timeout", type=float, default=120.0, metavar="S",
                   help="the longest wait for the server's next bytes, seconds")


def endpoint_config(a: argparse.Namespace) -> EndpointConfig | None:
    """The serving engine the options name (None: the model is loaded here). ValueError for a bad URL."""
    if not a.engine_url:
        return None
    return EndpointConfig(a.engine_url, model=a.engine_model, api_key=a.engine_key or os.environ.get(ENGINE_KEY_ENV),
                          timeout_s=a.engine_timeout)


def server_config(a: argparse.Namespace) -> AppConfig:
    cfg = AppConfig(host=a.host, port=a.port, model=ModelConfig(model=a.model, n_gpu_layers=a.gpu_layers),
                    api_key=a.api_key or os.environ.get(API_KEY_ENV) or None, max_waiting=a.max_waiting,
                    endpoint=endpoint_config(a))
    if a.index_dir:
        cfg = replace(cfg, index=cfg.index.with_(index_dir=a.index_dir.expanduser().resolve()))
    if a.max_file_mb is not None:  # ValueError below 0
        cfg = replace(cfg, index=cfg.index.with_(max_file_mb=a.max_file_mb))
    if a.data_dir:
        cfg = replace(cfg, data_dir=a.data_dir.expanduser().resolve())
    return cfg
