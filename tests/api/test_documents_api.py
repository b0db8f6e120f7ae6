"""Adding documents from other tools: ``POST /v1/documents`` with a real HTTP client (httpx, multipart),
the ``add_documents`` MCP tool with the ``mcp`` package's client session, against a real server
(``python -m localrag serve`` with an API key and a 1 MB per-file limit, the bundled model, a real
index). An uploaded file is then found and cited by ``ask`` through the API.

Run: HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/api/test_documents_api.py -q
"""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest
from fpdf import FPDF
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from openai import OpenAI

from tests.api.conftest import MODEL, Server

pytestmark = pytest.mark.slow

KEY = "upload-key-for-tests"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIGHTHOUSE = ("Notes on the Varnholt lighthouse.\n\nThe keeper of the Varnholt lighthouse is Odile Brask. "
              "She lights the lamp every evening at dusk.\n")
FERRY = "The ferry to Skarholm leaves at nine. The ferry captain is Joakim Lund.\n"


@pytest.fixture(scope="module")
def uploads_server(docs_index):
    s = Server(docs_index, "--api-key", KEY, "--max-file-mb", "1").start()
    yield s
    s.stop()


def post(server, files, collection=None, headers=AUTH) -> httpx.Response:
    data = {"collection": collection} if collection is not None else {}
    with httpx.Client(base_url=server.base, timeout=600) as h:
        return h.post("/v1/documents", files=[("files", f) for f in files], data=data, headers=headers)


def outcomes(r: httpx.Response) -> dict[str, tuple[str, str]]:
    assert r.status_code == 200, r.text
    return {f["name"]: (f["outcome"], f.get("error", "")) for f in r.json()["files"]}


def corrupt_pdf() -> bytes:
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(text="a valid pdf that will be damaged " * 2)
    data = bytes(pdf.output())
    return data[:9] + bytes(reversed(data[9:]))


def test_an_uploaded_file_is_found_and_cited_by_ask(uploads_server):
    r = post(uploads_server, [("lighthouse.txt", LIGHTHOUSE.encode(), "text/plain")], "harbour")
    assert r.json()["collection"] == "harbour"
    [file] = r.json()["files"]
    assert file["name"] == "lighthouse.txt" and file["outcome"] == "added" and file["chunks"] >= 1
    assert "error" not in file
    listed = httpx.get(uploads_server.url + "/documents", params={"collection": "harbour"}, headers=AUTH).json()
    assert listed == {"collection": "harbour",
                      "documents": [{"name": "lighthouse.txt", "chunks": file["chunks"], "status": "indexed"}]}
    c = OpenAI(base_url=uploads_server.url, api_key=KEY, max_retries=0, timeout=600)
    answer = c.chat.completions.create(model=MODEL, temperature=0, max_tokens=24,
                                       messages=[{"role": "user", "content": "Who is the keeper of the Varnholt lighthouse?"}],
                                       extra_body={"collection": "harbour", "k": 1})
    grounding = answer.model_extra["localrag"]
    assert 'collection "harbour"' in grounding["searched"]
    assert "Odile Brask" in answer.choices[0].message.content
    [cited] = grounding["citations"]  # the uploaded file, at the passage that supports the answer
    assert cited["label"] == "lighthouse.txt lines 1-3" and cited["file"].endswith("/uploads/harbour/lighthouse.txt")
    assert any("Odile Brask" in span["text"] for span in cited["spans"]) and not grounding["also_searched"]


def test_the_same_file_again_is_unchanged_and_a_changed_one_replaced(uploads_server):
    ferry = [("ferry.txt", FERRY.encode(), "text/plain")]
    assert outcomes(post(uploads_server, ferry, "boats")) == {"ferry.txt": ("added", "")}
    assert outcomes(post(uploads_server, ferry, "boats")) == {"ferry.txt": ("unchanged", "")}
    edited = [("ferry.txt", FERRY.replace("nine", "ten").encode(), "text/plain")]
    assert outcomes(post(uploads_server, edited, "boats")) == {"ferry.txt": ("replaced", "")}
    listed = httpx.get(uploads_server.url + "/documents", params={"collection": "boats"}, headers=AUTH).json()
    assert [d["name"] for d in listed["documents"]] == ["ferry.txt"]
    staged = uploads_server.tmp / "data" / "uploads" / "boats" / "ferry.txt"
    assert "ten" in staged.read_text()


def test_a_name_cannot_escape_the_data_dir(uploads_server):
    tmp = uploads_server.tmp
    names = ["../../etc/escaped.txt", "..\\..\\win-escaped.txt", "/abs/rooted.txt"]
    got = outcomes(post(uploads_server, [(n, b"The escape attempt was contained.\n", "text/plain") for n in names],
                        "escape"))
    assert got == {"escaped.txt": ("added", ""), "win-escaped.txt": ("added", ""), "rooted.txt": ("added", "")}
    folder = tmp / "data" / "uploads" / "escape"
    assert sorted(p.name for p in folder.iterdir()) == ["escaped.txt", "rooted.txt", "win-escaped.txt"]
    assert not (tmp / "etc").exists() and not (tmp.parent / "etc" / "escaped.txt").exists()
    assert not (tmp / "data" / "etc").exists()


def test_an_oversize_file_and_a_corrupt_pdf_fail_alone(uploads_server):
    big = b"All work and no play makes a dull archive.\n" * 40_000  # 1.7 MB, over --max-file-mb 1
    r = post(uploads_server, [("big.txt", big, "text/plain"), ("broken.pdf", corrupt_pdf(), "application/pdf"),
                              ("good.txt", FERRY.encode(), "text/plain")], "mixed")
    got = outcomes(r)
    assert [f["name"] for f in r.json()["files"]] == ["big.txt", "broken.pdf", "good.txt"]  # the order sent
    assert got["big.txt"][0] == "failed" and "over the per-file limit of 1 MB" in got["big.txt"][1]
    assert got["broken.pdf"][0] == "failed" and "PDF" in got["broken.pdf"][1]
    assert got["good.txt"] == ("added", "")
    assert not (uploads_server.tmp / "data" / "uploads" / "mixed" / "big.txt").exists()  # refused, not kept


def test_the_api_key_and_bad_requests_are_refused_with_a_reason(uploads_server):
    note = [("note.txt", b"A note that must not be added.\n", "text/plain")]
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = post(uploads_server, note, "locked", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(uploads_server.url + "/documents", headers=headers).status_code == 401
    assert not (uploads_server.tmp / "data" / "uploads" / "locked").exists()
    bad = post(uploads_server, note, "../etc")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "collection"
    assert "collection names are letters, digits" in bad.json()["error"]["message"]
    with httpx.Client(base_url=uploads_server.base, timeout=60, headers=AUTH) as h:
        as_json = h.post("/v1/documents", json={"files": ["x"]})
        assert as_json.status_code == 400 and "multipart/form-data" in as_json.json()["error"]["message"]
        empty = h.post("/v1/documents", data={"collection": "default"}, files={"other": ("x.txt", b"x")})
        assert empty.status_code == 400 and "no files" in empty.json()["error"]["message"]
        unknown = h.get("/v1/documents", params={"collection": "never-made"})
        assert unknown.status_code == 404 and "does not exist" in unknown.json()["error"]["message"]


def test_a_request_over_its_limit_is_refused_with_413(uploads_server):
    """--max-file-mb 1: a request carries at most 32 files of 1 MB (and 1 MB of form); a body streamed past
    that is refused as it arrives (one that declares more, at once, as /v1/chat/completions does)."""
    boundary = "b0undary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"collection\"\r\n\r\nhuge\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"huge.txt\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()
    line = b"a line of a very long file\n" * 4096
    n = 33 * 2**20 // len(line) + 1  # just past the limit: the server stops reading there
    tail = f"\r\n--{boundary}--\r\n".encode()

    def streamed():
        yield head
        for _ in range(n):
            yield line
        yield tail

    headers = {**AUTH, "Content-Type": f"multipart/form-data; boundary={boundary}"}
    with httpx.Client(base_url=uploads_server.base, timeout=600, headers=headers) as h:
        r = h.post("/v1/documents", content=streamed())  # chunked: no Content-Length to refuse it by
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "request_too_large" and "33 MB" in r.json()["error"]["message"]
    assert not (uploads_server.tmp / "data" / "uploads" / "huge").exists()


def test_an_mcp_client_adds_documents(uploads_server):
    async def session():
        async with create_mcp_http_client(headers=AUTH) as http, \
                streamable_http_client(uploads_server.base + "/mcp", http_client=http) as (read, write), \
                ClientSession(read, write) as s:
            await s.initialize()
            tools = {t.name: t for t in (await s.list_tools()).tools}
            files = [{"name": "../mcp-notes.md", "content": "# Beacon\n\nThe beacon on Ormsund is painted green.\n"},
                     {"name": "broken.pdf", "content_base64": base64.b64encode(corrupt_pdf()).decode()}]
            added = await s.call_tool("add_documents", {"files": files, "collection": "mcp"})
            again = await s.call_tool("add_documents", {"files": files[:1], "collection": "mcp"})
            found = await s.call_tool("search_documents", {"query": "what colour is the Ormsund beacon",
                                                           "collection": "mcp", "k": 1})
            bad = await s.call_tool("add_documents", {"files": [{"name": "x.txt", "content_base64": "%%%"}]})
            badcoll = await s.call_tool("add_documents", {"files": files[:1], "collection": "no/slash"})
            return tools, added, again, found, bad, badcoll

    tools, added, again, found, bad, badcoll = asyncio.run(session())
    assert set(tools["add_documents"].input_schema["properties"]) == {"files", "collection"}
    assert not added.is_error
    result = json.loads(added.content[0].text)
    assert result["collection"] == "mcp"
    first, second = result["files"]
    assert (first["name"], first["outcome"]) == ("mcp-notes.md", "added") and first["chunks"] >= 1
    assert (second["name"], second["outcome"]) == ("broken.pdf", "failed") and "PDF" in second["error"]
    assert [f["outcome"] for f in json.loads(again.content[0].text)["files"]] == ["unchanged"]
    hit = json.loads(found.content[0].text)["hits"][0]
    assert "mcp-notes.md" in hit["source"] and "painted green" in hit["text"]
    assert (uploads_server.tmp / "data" / "uploads" / "mcp" / "mcp-notes.md").is_file()
    assert bad.is_error and "not base64" in bad.content[0].text
    assert badcoll.is_error and "invalid collection" in badcoll.content[0].text
