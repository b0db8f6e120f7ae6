"""The vector graph's health: every stored vector reachable by a query with itself, and the repairs.

    found = sweep(store, space)                     # batched self-queries over the whole space
    left = repair_unreachable(store, space, found.unreachable)
    rebuild(store, manifest, space, embedder)       # a fresh collection, every text embedded again

Why this exists (docs/design.md, "The vector graph after a crash"): Chroma keeps each collection's
vectors in an HNSW graph, and a stored vector can stop being reachable from the graph's entry
point while its record stays. Two causes were measured with chromadb 1.5.9:

- *Unreachable nodes.* HNSW prunes a node's in-links as later nodes arrive; a node whose every
  in-link was pruned is found by no query, not even its own vector. Without any crash, 1 of 6,258
  chunks of near-duplicate prose ended so; after a writer was killed inside Chroma's index save and
  the next process replayed the log into the saved graph, 3 and 4 of about 6,260.
- *A damaged index.* A kill after the graph's files are saved but before their id map is, followed
  by deletes in the replayed log, makes Chroma fail the replay ("Failed to apply logs to the hnsw
  segment writer") once per process and then hand out labels other ids still hold: vectors are
  overwritten silently. Nothing stored can be trusted then; only a rebuild from the texts helps.

A node is *reachable* when a query with its own stored vector returns its id among the top
``SWEEP_K``, or returns only vectors identical to it (copies of one text tie at distance 0, and
only ``SWEEP_K`` of them fit). A re-added node gets a fresh slot and is linked from its neighbours
anew; what stays unreachable after ``READD_ROUNDS`` re-adds is fixed by a rebuild that copies the
stored vectors into a fresh collection.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from localrag.rag.embed import Embedder
from localrag.rag.manifest import Manifest
from localrag.rag.store import READ_PAGE, ChromaStore

SWEEP_K = 10  # neighbours asked for per self-query
SAME = 1e-4  # cosine distance below which two vectors are the same vector
QUERY_BATCH = 500  # self-queries per Chroma query call
READD_ROUNDS = 3  # re-adds of what stays unreachable before the space is rebuilt
WRITE_BATCH = 256  # records per add while rebuilding


@dataclass
class Sweep:
    """One pass over a space: how many vectors it holds, which ids no self-query reaches, which
    ids share one stored vector with a different text (a damaged index), and the time it took."""

    n: int = 0
    unreachable: list[str] = field(default_factory=list)
    collided: list[str] = field(default_factory=list)
    seconds: float = 0.0


def pages(store: ChromaStore, space: str, include: list[str]) -> Iterator[dict]:
    """The space's records, READ_PAGE at a time (each page read in its own short session)."""
    offset = 0
    while True:
        with store.session():
            col = store.collection(space, create=False)
            if col is None:
                return
            page = col.get(include=include, limit=READ_PAGE, offset=offset)
        if not page["ids"]:
            return
        yield page
        offset += len(page["ids"])


def sweep(store: ChromaStore, space: str) -> Sweep:
    """Query every stored vector with itself (batched) and group the stored vectors by value."""
    t0 = time.perf_counter()
    found = Sweep()
    texts_by_vector: dict[bytes, set[str]] = defaultdict(set)
    ids_by_vector: dict[bytes, list[str]] = defaultdict(list)
    for page in pages(store, space, ["embeddings", "metadatas"]):
        vectors = np.asarray(page["embeddings"], dtype=np.float32)
        found.n += len(page["ids"])
        for cid, vec, meta in zip(page["ids"], vectors, page["metadatas"], strict=True):
            key = vec.tobytes()
            texts_by_vector[key].add((meta or {}).get("text_hash", cid))
            ids_by_vector[key].append(cid)
        for start in range(0, len(vectors), QUERY_BATCH):
            ids = page["ids"][start : start + QUERY_BATCH]
            with store.session():
                col = store.collection(space, create=False)
                res = col.query(query_embeddings=vectors[start : start + QUERY_BATCH],
                                n_results=min(SWEEP_K, col.count()), include=["distances"])
            for cid, hits, dists in zip(ids, res["ids"], res["distances"], strict=True):
                crowded = len(hits) == SWEEP_K and dists[-1] <= SAME  # identical copies filled the top k
                if cid not in hits and not crowded:
                    found.unreachable.append(cid)
    # Different texts never embed to the same bits; one stored vector under several texts means
    # Chroma's id map gave one graph slot to several ids.
    found.collided = sorted(cid for key, texts in texts_by_vector.items() if len(texts) > 1
                            for cid in ids_by_vector[key])
    found.seconds = time.perf_counter() - t0
    return found


def readd(store: ChromaStore, space: str, ids: list[str]) -> None:
    """Delete these records and add them again with their own stored vectors (fresh graph slots)."""
    for start in range(0, len(ids), WRITE_BATCH):
        batch = ids[start : start + WRITE_BATCH]
        with store.session():
            col = store.collection(space, create=False)
            got = col.get(ids=batch, include=["embeddings", "documents", "metadatas"])
            col.delete(ids=got["ids"])
            col.add(ids=got["ids"], embeddings=np.asarray(got["embeddings"], dtype=np.float32),
                    documents=got["documents"], metadatas=got["metadatas"])


def still_unreachable(store: ChromaStore, space: str, ids: list[str]) -> list[str]:
    """Which of ``ids`` no self-query reaches now."""
    left = []
    for start in range(0, len(ids), QUERY_BATCH):
        batch = ids[start : start + QUERY_BATCH]
        with store.session():
            col = store.collection(space, create=False)
            got = col.get(ids=batch, include=["embeddings"])
            res = col.query(query_embeddings=np.asarray(got["embeddings"], dtype=np.float32),
                            n_results=min(SWEEP_K, col.count()), include=["distances"])
        for cid, hits, dists in zip(got["ids"], res["ids"], res["distances"], strict=True):
            if cid not in hits and not (len(hits) == SWEEP_K and dists[-1] <= SAME):
                left.append(cid)
    return left


def repair_unreachable(store: ChromaStore, space: str, ids: list[str]) -> list[str]:
    """Re-add unreachable records until a self-query reaches them (at most READD_ROUNDS times);
    returns the ids still unreachable."""
    left = list(ids)
    for _ in range(READD_ROUNDS):
        if not left:
            break
        readd(store, space, left)
        left = still_unreachable(store, space, left)
    return left


Progress = Callable[[int, int], None]  # (records copied, records in all)


def rebuild(store: ChromaStore, manifest: Manifest, space: str, embedder: Embedder | None,
            progress: Progress | None = None) -> int:
    """Copy ``space`` into a fresh Chroma collection and put it in the old one's place; returns how
    many records it holds. ``embedder``: embed every text again (a damaged index, whose stored
    vectors cannot be trusted); None copies the stored vectors (a graph whose re-adds did not stick).

    Crash-safe through the manifest's rebuild state: while 'copying', the old collection is intact
    and a crash leaves a partial copy that ``finish_rebuild`` drops; once 'copied', the copy is whole
    and ``finish_rebuild`` completes the swap."""
    tmp = rebuild_name(space)
    with store.session():
        if tmp in store.space_names():
            store.client().delete_collection(tmp)
    manifest.set_rebuild(space, "copying")
    with store.session():
        total = store.collection(space, create=False).count()
    done = 0
    include = ["documents", "metadatas"] + ([] if embedder is not None else ["embeddings"])
    if embedder is not None:
        embedder.clear_cache()  # vectors primed from the damaged space must not come back
    for page in pages(store, space, include):
        for start in range(0, len(page["ids"]), WRITE_BATCH):
            ids = page["ids"][start : start + WRITE_BATCH]
            docs = page["documents"][start : start + WRITE_BATCH]
            metas = page["metadatas"][start : start + WRITE_BATCH]
            if embedder is not None:
                vectors = embedder.embed(list(docs))
            else:
                vectors = np.asarray(page["embeddings"][start : start + WRITE_BATCH], dtype=np.float32)
            with store.session():
                store.collection(tmp).add(ids=ids, embeddings=vectors, documents=docs, metadatas=metas)
            done += len(ids)
            if progress is not None:
                progress(done, total)
    manifest.set_rebuild(space, "copied")
    finish_rebuild(store, manifest, space)
    return done


def finish_rebuild(store: ChromaStore, manifest: Manifest, space: str) -> None:
    """Complete or undo a rebuild that a crash interrupted (see ``rebuild``)."""
    state = manifest.space_state(space).rebuild
    tmp = rebuild_name(space)
    with store.session():
        names = store.space_names()
        if state == "copying" and tmp in names:  # a partial copy: the old collection still counts
            store.client().delete_collection(tmp)
        elif state == "copied" and tmp in names:
            if space in names:
                store.client().delete_collection(space)
            store.collection(tmp).modify(name=space)
            store.forget(space)
    if state == "copied":
        manifest.rebuilt(space)
    elif state:
        manifest.set_rebuild(space, "")


def rebuild_name(space: str) -> str:
    return f"{space}.rebuild"


Say = Callable[[str], None]  # a progress line for a person ("repairing the vector index: ...")


def probe(store: ChromaStore, space: str) -> None:
    """Touch the space, so a damaged vector index is reported (``ChromaStore.collection``)."""
    with store.session():
        store.collection(space, create=False)


def heal(store: ChromaStore, manifest: Manifest, space: str, embedder: Embedder | None,
         say: Say | None = None) -> list[str]:
    """Before anything is written to ``space``: finish a rebuild a crash interrupted, and rebuild a
    space whose vector index Chroma called damaged (writing to it would overwrite other ids'
    vectors). ``embedder``: the space's own model (None: copy stored vectors). Returns what it did."""
    done = []
    if manifest.space_state(space).rebuild:
        finish_rebuild(store, manifest, space)
        done.append("finished a rebuild of the vector index that a crash interrupted")
    probe(store, space)
    reason = manifest.space_state(space).damaged
    if reason:
        n = rebuild(store, manifest, space, embedder, _progress(say, "rebuilding the damaged vector index"))
        done.append(f"rebuilt the damaged vector index ({n} chunks embedded again; Chroma said: {reason})")
    return done


def repair_graph(store: ChromaStore, manifest: Manifest, space: str, embedder: Embedder | None,
                 say: Say | None = None) -> tuple[Sweep, list[str]]:
    """Sweep ``space`` and repair it: unreachable vectors re-added (a rebuild from the stored vectors
    when re-adding does not reach them), collided vectors rebuilt from their texts. Returns the
    sweep and what was done."""
    if say is not None:
        say("checking that every stored vector can be found")
    found = sweep(store, space)
    done = []
    if found.collided:
        manifest.mark_damaged(space, f"{len(found.collided)} chunks share a stored vector with another text")
        n = rebuild(store, manifest, space, embedder, _progress(say, "rebuilding the damaged vector index"))
        done.append(f"rebuilt the vector index: {len(found.collided)} chunks shared a stored vector with "
                    f"another text ({n} chunks embedded again)")
    elif found.unreachable:
        left = repair_unreachable(store, space, found.unreachable)
        done.append(f"re-added {len(found.unreachable)} vector(s) no query could reach")
        if left:
            n = rebuild(store, manifest, space, None, _progress(say, "rebuilding the vector index"))
            done.append(f"rebuilt the vector index from its {n} stored vectors ({len(left)} stayed unreachable "
                        "after re-adding)")
    manifest.swept(space)
    return found, done


def _progress(say: Say | None, what: str) -> Progress | None:
    if say is None:
        return None
    return lambda done, total: say(f"{what}: {done} of {total} chunks")
