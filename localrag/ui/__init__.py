"""The Gradio app. ``main`` is what ``python app.py`` runs.

    from localrag.ui import main
    main(["--port", "7861", "--index-dir", "/tmp/idx"])

Submodules: ``services`` (models, indexes, modes), ``handlers`` (testable chat /
document / settings logic), ``render`` (messages and Markdown), ``uploads``
(safe staging), ``history`` (chats in SQLite), ``layout`` (the Gradio page), ``launch``
(arguments, startup).
Gradio is only imported by ``layout``, so handlers are testable without it.
"""

from __future__ import annotations

from localrag.ui.launch import main

__all__ = ["main"]
