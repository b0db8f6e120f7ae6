"""The Gradio page, on the app layer (``localrag.app``); ``localrag.launch`` serves it with the API.

Submodules: ``handlers`` (testable chat and settings logic), ``documents`` (the Documents tab), ``sources``
(a citation opened at its page, heading or lines), ``render`` (messages and
Markdown), ``settings`` (the side panel's knobs as one value), ``uploads`` (safe staging),
``layout`` (the Gradio page). Gradio is only imported by ``layout``, so handlers are testable
without it.
"""
