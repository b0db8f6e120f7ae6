"""Plant defects in a Chroma space's saved HNSW graph, for the tests of ``python -m localrag check``.

Chroma (1.5.9) saves each space's graph as hnswlib files in ``<index>/chroma/<segment>/``:
``header.bin``, ``data_level0.bin`` (per element: its level-0 neighbour list, its vector, its
label), ``length.bin`` (vector norms), ``link_lists.bin`` (per element: the byte size of its
upper-level lists, then those lists) and ``index_metadata.pickle`` (chunk id <-> label). ``persist_every_write`` makes a space whose graph is saved after every add,
so what is on disk is the whole graph; ``cut_off`` then removes one node from every neighbour
list: a node no query can reach, exactly what HNSW leaves when all of a node's in-links are pruned.
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

# header.bin: int version, then size_t offsetLevel0, max_elements, cur_element_count,
# size_data_per_element, label_offset, offsetData, int maxlevel, uint enterpoint, size_t maxM, maxM0, M
HEADER = struct.Struct("<iQQQQQQiIQQQ")


def persist_every_write(index) -> None:
    """Create ``index``'s Chroma space before its first ingest, saved to disk after every add."""
    with index.store.session():
        index.store.client().get_or_create_collection(
            index.space, embedding_function=index.embedder,
            metadata={"hnsw:space": "cosine", "hnsw:search_ef": 100, "hnsw:batch_size": 2, "hnsw:sync_threshold": 2,
                      "localrag_collection": index.config.collection, "embedding_model": index.emb_fp},
        )


def save_whole_graph(index) -> None:
    """Make the saved graph hold every stored vector. Chroma saves after each log chunk of
    ``hnsw:batch_size`` records that brings ``sync_threshold`` new ones, so an odd last record may
    wait in the log (to be replayed, and linked, at the next open): pad records are added until the
    save covers everything, then deleted (a delete replayed at open adds no links)."""
    import numpy as np

    stored = index.store.ids(index.space)
    pads = []
    with index.store.session():
        col = index.store.collection(index.space)
        for n in range(4):
            if stored <= _saved_ids(index.dir):
                break
            pads.append(f"pad:{n}")
            col.add(ids=[pads[-1]], embeddings=np.full((1, index.embedder.dimension), -1.0, dtype=np.float32),
                    documents=["pad"], metadatas=[{"ver": "pad"}])
        assert stored <= _saved_ids(index.dir), "Chroma did not save the graph"
        if pads:
            col.delete(ids=pads)


def _saved_ids(index_dir: Path) -> set[str]:
    found: set[str] = set()
    for meta in Path(index_dir, "chroma").glob("*/index_metadata.pickle"):
        with open(meta, "rb") as fh:
            found |= set(pickle.load(fh)["id_to_label"])
    return found


def segment_of(index_dir: Path, chunk_id: str) -> Path:
    """The segment folder whose id map holds ``chunk_id``."""
    for meta in Path(index_dir, "chroma").glob("*/index_metadata.pickle"):
        with open(meta, "rb") as fh:
            if chunk_id in pickle.load(fh)["id_to_label"]:
                return meta.parent
    raise LookupError(f"{chunk_id} is in no saved HNSW segment under {index_dir}")


def level0_only(index_dir: Path, chunk_ids: list[str]) -> list[str]:
    """Those of ``chunk_ids`` whose node lives on level 0 alone (no upper-level links to undo)."""
    seg = segment_of(index_dir, chunk_ids[0])
    labels, levels = _read(seg)
    out = []
    with open(seg / "index_metadata.pickle", "rb") as fh:
        id_to_label = pickle.load(fh)["id_to_label"]
    for cid in chunk_ids:
        internal = labels.index(id_to_label[cid])
        if levels[internal] == 0:
            out.append(cid)
    return out


def cut_off(index_dir: Path, chunk_id: str) -> None:
    """Remove ``chunk_id``'s node (a level-0 one) from every other node's level-0 neighbour list."""
    seg = segment_of(index_dir, chunk_id)
    with open(seg / "index_metadata.pickle", "rb") as fh:
        label = pickle.load(fh)["id_to_label"][chunk_id]
    labels, levels = _read(seg)
    target = labels.index(label)
    assert levels[target] == 0, "only a level-0 node can be cut off by editing data_level0.bin"
    head = HEADER.unpack_from((seg / "header.bin").read_bytes())
    size, m0 = head[4], head[10]
    data = bytearray((seg / "data_level0.bin").read_bytes())
    for i in range(len(labels)):
        at = i * size
        (count,) = struct.unpack_from("<H", data, at)
        links = list(struct.unpack_from(f"<{count}I", data, at + 4))
        if target in links:
            links.remove(target)
            struct.pack_into("<H", data, at, len(links))
            struct.pack_into(f"<{m0}I", data, at + 4, *(links + [0] * (m0 - len(links))))
    (seg / "data_level0.bin").write_bytes(bytes(data))


def _read(seg: Path) -> tuple[list[int], list[int]]:
    """(label of each element, how many upper levels it has) from the saved files."""
    head = HEADER.unpack_from((seg / "header.bin").read_bytes())
    count, size, label_offset, m = head[3], head[4], head[5], head[11]
    data = (seg / "data_level0.bin").read_bytes()
    labels = [struct.unpack_from("<Q", data, i * size + label_offset)[0] for i in range(count)]
    links, at, levels = (seg / "link_lists.bin").read_bytes(), 0, []
    for _ in range(count):
        (n_bytes,) = struct.unpack_from("<I", links, at)
        levels.append(n_bytes // (4 * m + 4))
        at += 4 + n_bytes
    assert at == len(links), "link_lists.bin is not laid out as expected"
    return labels, levels
