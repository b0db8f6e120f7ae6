"""The Gradio app. ``main`` is what ``python app.py`` runs.

    from localrag.ui import main
    main(["--port", "7861", "--index-dir", "/tmp/idx"])

Submodules: ``services`` (models, indexes, modes), ``handlers`` (testable chat /
document / settings logic), ``render`` (messages and Markdown), ``uploads``
(safe staging), ``layout`` (the Gradio page), ``launch`` (arguments, startup).
Gradio is only imported by ``layout``, so handlers are testable without it.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from localrag.ui.launch import main as _main

    return _main(argv)


__all__ = ["main"]
