"""Documents from other tools: ``POST /v1/documents`` adds files to a collection, ``GET
/v1/documents`` lists one. The same staging and ingest as the page (``localrag.app.uploads``):
safe names, nothing written outside the data directory, the per-file size limit, the index's
write lock; the API key guards them like every /v1 route.

    curl -H "Authorization: Bearer $KEY" -F files=@notes.md -F files=@report.pdf -F collection=work \\
         http://127.0.0.1:8000/v1/documents
    -> {"collection": "work", "files": [{"name": "notes.md", "outcome": "added", "chunks": 12},
                                        {"name": "report.pdf", "outcome": "failed", "chunks": 0,
                                         "error": "not a PDF: ..."}]}
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile
from starlette.types import Message

from localrag.api.errors import ApiError
from localrag.app.services import DEFAULT_COLLECTION, Services
from localrag.app.uploads import Upload, add_documents, collection_error, document_name
from localrag.rag.store import StoreUnavailable

MAX_FILES = 32  # per request
FORM_OVERHEAD = 1 << 20  # what a request may carry besides its files (part headers, the collection field)


def build_documents_router(services: Services) -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.post("/documents")
    async def add(request: Request) -> JSONResponse:
        if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
            raise ApiError(400, "send multipart/form-data: one 'files' part per file and an optional 'collection' "
                                "field (curl -F files=@notes.md -F collection=work)", param="files")
        limit = request_limit(services)
        declared = request.headers.get("content-length")
        if limit and declared and declared.isdigit() and int(declared) > limit:
            raise too_large(limit)
        capped = Request(request.scope, capped_receive(request.receive, limit))
        async with capped.form(max_files=MAX_FILES) as form:  # files spooled; closed when done
            collection = form.get("collection", DEFAULT_COLLECTION)
            if not isinstance(collection, str) or collection_error(collection.strip()):
                why = collection_error(collection.strip()) if isinstance(collection, str) else "not a text field"
                raise ApiError(400, f"invalid collection: {why}", param="collection")
            parts = form.getlist("files")
            if not parts:
                raise ApiError(400, "no files: send each file as a 'files' part (curl -F files=@notes.md)",
                               param="files")
            if not all(isinstance(p, UploadFile) for p in parts):
                raise ApiError(400, "every 'files' part must be a file (with a filename)", param="files")
            uploads = [Upload(p.filename or "upload", p.file, p.size or 0) for p in parts]
            try:
                result = await run_in_threadpool(add_documents, services, uploads, collection.strip())
            except StoreUnavailable as exc:
                raise ApiError(503, f"the document index is unavailable: {exc}", code="index_unavailable") from None
        return JSONResponse(result.to_dict())

    @router.get("/documents")
    async def listing(collection: str = DEFAULT_COLLECTION) -> JSONResponse:
        why = collection_error(collection)
        if why:
            raise ApiError(400, f"invalid collection: {why}", param="collection")
        known = await run_in_threadpool(services.collections)
        if collection not in known:
            raise ApiError(404, f"collection {collection!r} does not exist; collections: {', '.join(known)}",
                           code="collection_not_found", param="collection")
        docs = await run_in_threadpool(lambda: services.index(collection).list_documents())
        return JSONResponse({"collection": collection, "documents": [
            {"name": document_name(d.path, services.uploads_dir), "chunks": d.chunks, "status": d.status,
             **({"error": d.reason} if d.reason else {})} for d in docs]})

    return router


def request_limit(services: Services) -> int:
    """The largest upload request: MAX_FILES files at the per-file limit (0: no limit)."""
    per_file = services.config.index.max_file_mb * 2**20
    return per_file * MAX_FILES + FORM_OVERHEAD if per_file else 0


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"upload over {limit // 2**20} MB: at most {MAX_FILES} files of the per-file limit "
                         "(max_file_mb) per request; send the rest in another", code="request_too_large")


def capped_receive(receive: Callable[[], Awaitable[Message]], limit: int) -> Callable[[], Awaitable[Message]]:
    """``receive`` that refuses (413) a body streamed past ``limit`` bytes (0: no limit)."""
    seen = 0

    async def capped() -> Message:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if limit and seen > limit:
            raise too_large(limit)
        return message

    return capped
