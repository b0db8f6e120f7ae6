"""The app layer: what the page, the HTTP API, the MCP tools and ``serve`` share.

``services.Services`` (the object graph: the target and its ``Answerer``, the indexes, the history,
the queue, the generation thread, the folder watcher), ``config.AppConfig`` (one frozen value from
the launcher down), ``serving`` (the queue and the generation thread), ``history`` (chats in SQLite).
The UI and the API both import it; neither imports the other.
"""
