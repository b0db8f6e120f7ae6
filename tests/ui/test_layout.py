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


def test_an_upload_leaves_no_empty_file_in_the_temp_folder(make_services):
    """Gradio's File opened an empty temp file per uploaded file and dropped it (eight of them after
    eight uploads); the page's drop zones hand over the upload without one, and an ingest deletes the
    upload's own temp copy."""
    from gradio.data_classes import FileData, ListFiles

    from localrag.ui.documents import DocsController
    from localrag.ui.layout import build_app

    s = make_services()
    demo = build_app(s)
    temp = s.config.upload_temp_dir
    for elem_id in ("upload-files", "upload-folder"):
        box = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)
        box.GRADIO_CACHE = str(temp)  # as under the app, which points GRADIO_TEMP_DIR there
        upload = temp / f"9f3c1e{elem_id}" / "notes.md"  # where Gradio's upload route puts a file
        upload.parent.mkdir(parents=True)
        upload.write_text(f"# Notes\n\nThe falcon nests on the ridge ({elem_id}).\n")
        paths = box.preprocess(ListFiles(root=[FileData(path=str(upload), orig_name="notes.md")]))
        assert paths == [str(upload)]
        assert [p for p in temp.rglob("*") if p.is_file()] == [upload]  # no empty tmp* file beside it
        final = list(DocsController(s).ingest(paths, "default"))[-1]
        assert final.done and "failed" in final.summary
        assert [p for p in temp.rglob("*") if p.is_file()] == []  # the temp copy is gone once staged
