"""The Gradio page builds over the fake services, and the launcher's arguments."""

from __future__ import annotations

from pathlib import Path

from localrag.launch import parse_args


def test_parse_args_defaults_are_private():
    cfg = parse_args([])
    assert (cfg.host, cfg.port, cfg.share) == ("127.0.0.1", 7860, False)
    assert cfg.model.model == "qwen2.5-coder-1.5b-instruct"  # the default answer model


def test_parse_args_dirs(tmp_path):
    cfg = parse_args(["--host", "0.0.0.0", "--port", "8000", "--index-dir", str(tmp_path / "i"),
                      "--data-dir", str(tmp_path / "d"), "--model", "gemma3-270m", "--gpu-layers", "0"])
    assert cfg.index_dir == (tmp_path / "i").resolve() and cfg.data_dir == Path(tmp_path / "d").resolve()
    assert (cfg.host, cfg.port, cfg.model.model, cfg.model.n_gpu_layers) == ("0.0.0.0", 8000, "gemma3-270m", 0)


def test_page_builds(make_services):
    import gradio as gr

    from localrag.ui.layout import build_app

    demo = build_app(make_services())
    assert isinstance(demo, gr.Blocks)
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"chatbot", "question", "send", "stop", "regenerate", "history", "upload-files", "upload-folder",
            "collection", "doc-list", "mode", "mode-note", "draft", "stats-plot", "watch-path", "watch-add",
            "watch-list", "unwatch-pick", "unwatch-delete", "unwatch"} <= ids


def test_parse_args_api(monkeypatch):
    monkeypatch.delenv("LOCALRAG_API_KEY", raising=False)
    cfg = parse_args([])
    assert cfg.api and cfg.api_key is None and cfg.host == "127.0.0.1"
    assert parse_args(["--api-key", "k1"]).api_key == "k1"
    assert not parse_args(["--no-api"]).api
    assert not parse_args(["--share"]).api  # a public link must not carry the API
    monkeypatch.setenv("LOCALRAG_API_KEY", "from-env")
    assert parse_args([]).api_key == "from-env" and parse_args(["--api-key", "k2"]).api_key == "k2"
