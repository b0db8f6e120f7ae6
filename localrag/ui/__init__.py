"""The Gradio page, on the app layer (``localrag.app``); ``localrag.launch`` serves it with the API.

Submodules: ``handlers`` (testable chat / document / settings logic), ``render`` (messages and
Markdown), ``settings`` (the side panel's knobs as one value), ``uploads`` (safe staging),
``layout`` (the Gradio page). Gradio is only imported by ``layout``, so handlers are testable
without it.
"""
