"""MCP tools over the same documents and model: ``search_documents``, ``ask_documents`` and
``add_documents``, served over streamable HTTP at ``/mcp`` by the official ``mcp`` package, in the
API's process.

    {"mcpServers": {"localrag": {"url": "http://127.0.0.1:7860/mcp",
                                 "headers": {"Authorization": "Bearer <key>"}}}}

``ask_documents`` takes its turn in the shared generation queue like any other request, and is
computed on the shared generation thread; a full line is a tool error saying so. ``add_documents``
stages and ingests like the page and ``POST /v1/documents`` (``localrag.app.uploads``); the mcp
package runs these sync tools on a worker thread, off the event loop, and refuses a request body
over 4 MiB (larger files go through ``POST /v1/documents``).
"""

from __future__ import annotations

import base64
import binascii
import io

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from localrag.api.answering import ChatReply, answer_chat, check_request
from localrag.api.errors import ApiError
from localrag.api.responses import usage_block
from localrag.api.schemas import parse_chat
from localrag.app.services import DEFAULT_COLLECTION, Services
from localrag.app.serving import QueueFull
from localrag.app.uploads import Upload, add_documents, collection_error
from localrag.rag.store import StoreUnavailable

MAX_K = 20


def build_mcp(services: Services) -> MCPServer:
    server = MCPServer(name="localrag", log_level="WARNING", instructions=(
        "Search and ask the user's own documents, indexed locally by localrag. search_documents "
        "returns matching passages with their source; ask_documents answers a question from them "
        "with citations; add_documents adds files to a collection."))

    @server.tool()
    def search_documents(query: str, collection: str = DEFAULT_COLLECTION, k: int = 5) -> dict:
        """Find the passages of the user's documents that best match `query` (hybrid dense + BM25
        search). Returns up to `k` hits, each with its source label (file, page or lines), text and score."""
        if not query.strip():
            raise ToolError("query is empty")
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}")
        _known_collection(services, collection)
        services.ensure_embedder()
        hits = services.index(collection).search(query, k)
        return {"collection": collection, "query": query,
                "hits": [{"source": h.citation(), "file": h.file, "text": h.text, "score": h.fused_score}
                         for h in hits]}

    @server.tool()
    def ask_documents(question: str, collection: str = DEFAULT_COLLECTION, mode: str = "plain") -> dict:
        """Answer `question` from the user's documents in `collection` with the local model.
        mode: plain (standard RAG), speedup (the same answer, decoded faster) or grounded (drafts
        scored by a verifier; says so when the documents do not answer). Returns the answer, its
        citations and the speed stats."""
        if services.engine is None:
            raise ToolError(f"no model is loaded: {services.engine_error}")
        try:
            req = parse_chat({"model": services.engine.model_name, "collection": collection, "mode": mode,
                              "messages": [{"role": "user", "content": question}]})
            chosen = check_request(services, req)
            ticket = services.queue.submit(owner="mcp")
        except QueueFull as exc:
            raise ToolError(f"{exc}; retry later") from None
        except ApiError as exc:
            raise ToolError(exc.message) from None
        try:
            if not services.queue.wait_turn(ticket):
                raise ToolError("cancelled")
            answer = services.generation.call(
                lambda: next(item for item in answer_chat(services, req, chosen, ticket) if isinstance(item, ChatReply)))
        except ApiError as exc:
            raise ToolError(exc.message) from None
        finally:
            services.queue.release(ticket)
        grounding = answer.grounding.to_dict() if answer.grounding is not None else {}
        return {"answer": answer.text, "mode": answer.stats.mode, **grounding, "usage": usage_block(answer)}

    @server.tool(name="add_documents")
    def add_documents_tool(files: list[dict], collection: str = DEFAULT_COLLECTION) -> dict:
        """Add files to the user's documents in `collection` (made if new), indexed for search and ask.
        Each file is {"name": "notes.md", "content": "<text>"} or {"name": "report.pdf",
        "content_base64": "<bytes in base64>"}. Returns each file's outcome: added, unchanged,
        replaced or failed (with the error), and its chunks."""
        why = collection_error(collection)
        if why:
            raise ToolError(f"invalid collection: {why}")
        uploads = [_upload(i, f) for i, f in enumerate(files)]
        if not uploads:
            raise ToolError("no files: give at least one {\"name\", \"content\"}")
        try:
            return add_documents(services, uploads, collection).to_dict()
        except StoreUnavailable as exc:
            raise ToolError(f"the document index is unavailable: {exc}") from None

    return server


def _upload(i: int, file: dict) -> Upload:
    """One file of add_documents as an Upload; ToolError naming what is wrong with it."""
    name = file.get("name") if isinstance(file, dict) else None
    if not isinstance(name, str) or not name.strip():
        raise ToolError(f"files[{i}] needs a \"name\"")
    given = [k for k in ("content", "content_base64") if k in file]
    if len(given) != 1 or not isinstance(file[given[0]], str):
        raise ToolError(f"files[{i}] ({name}) needs exactly one of \"content\" (text) or \"content_base64\"")
    if given[0] == "content":
        data = file["content"].encode("utf-8")
    else:
        try:
            data = base64.b64decode(file["content_base64"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolError(f"files[{i}] ({name}): content_base64 is not base64: {exc}") from None
    return Upload(name, io.BytesIO(data), len(data))


def _known_collection(services: Services, collection: str) -> None:
    known = services.collections()
    if collection not in known:
        raise ToolError(f"collection {collection!r} does not exist; collections: {', '.join(known)}")
