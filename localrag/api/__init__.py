"""The OpenAI-compatible HTTP API and the MCP tools, served over the same models, indexes and
generation queue as the UI.

    python -m localrag serve [--host 127.0.0.1] [--port 8000] [--model NAME|PATH] [--index-dir DIR] [--api-key KEY]
    python app.py                     # the UI at /, the API at /v1, the MCP tools at /mcp, one process

Submodules: ``schemas`` (requests, validated), ``answering`` (one request in its turn),
``responses`` (OpenAI bodies), ``routes`` (/v1), ``documents`` (/v1/documents: add and list files),
``mcp_tools`` (/mcp), ``app`` (the server, the API key), ``cli`` (``serve``), ``errors`` (the OpenAI
error shape).
"""
