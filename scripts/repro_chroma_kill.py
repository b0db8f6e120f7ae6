"""Reproduce, with chromadb alone, the damaged vector index a SIGKILL leaves (docs/design.md,
"The vector graph after a crash"). Needs a C compiler (for the kill shim) and Linux.

    .venv/bin/python scripts/repro_chroma_kill.py [FOLDER]

1. A collection saved every 4 records (hnsw:batch_size 4, hnsw:sync_threshold 4) gets 20 vectors.
2. A child process adds 2 and deletes 2 (one log chunk of 4 records, one save) and is SIGKILLed the
   moment Chroma opens the collection's ``index_metadata.pickle`` for writing: the graph files hold
   the add and the delete, the id map and the saved sequence number do not.
3. A fresh process: the first call fails ("Failed to apply logs to the hnsw segment writer": the
   replayed delete finds its label deleted already); the next one succeeds. Adding 4 vectors then
   hands out graph labels the 2 added ids still hold, and those ids return a vector not theirs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SHIM = Path(__file__).resolve().parents[1] / "tests" / "rag" / "killat.c"
OPEN = textwrap.dedent("""
    import sys, numpy as np, chromadb
    from chromadb.config import Settings
    client = chromadb.PersistentClient(path=sys.argv[1], settings=Settings(anonymized_telemetry=False))
    col = client.get_or_create_collection("repro", embedding_function=None, metadata={
        "hnsw:space": "cosine", "hnsw:batch_size": 4, "hnsw:sync_threshold": 4})
    vec = lambda seed, n: np.random.default_rng(seed).normal(size=(n, 8)).astype("float32")
""")
STEPS = {
    "fill": "col.add(ids=[f'a{i}' for i in range(20)], embeddings=vec(0, 20))",
    "delete": "col.add(ids=['c0', 'c1'], embeddings=vec(2, 2)); col.delete(ids=['a3', 'a4'])",
    "after": textwrap.dedent("""
        try:
            col.count()
        except Exception as exc:
            print("first call after the kill:", exc)
        print("second call:", col.count(), "records")
        col.add(ids=[f'b{i}' for i in range(4)], embeddings=vec(1, 4))
        truth = dict(zip([f'a{i}' for i in range(20)] + ['c0', 'c1'], list(vec(0, 20)) + list(vec(2, 2))))
        truth = {i: v for i, v in truth.items() if i not in ('a3', 'a4')}
        got = col.get(ids=list(truth), include=["embeddings"])
        wrong = [i for i, e in zip(got["ids"], got["embeddings"]) if not np.allclose(e / np.linalg.norm(e),
                 truth[i] / np.linalg.norm(truth[i]), atol=1e-4)]
        print("ids whose stored vector is now another's:", wrong)
    """),
}


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="chroma-kill-"))
    shim = folder / "killat.so"
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM), "-ldl"], check=True)
    db = str(folder / "db")

    def step(name: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", OPEN + STEPS[name], db], text=True, capture_output=True,
                              env=dict(os.environ, ANONYMIZED_TELEMETRY="False", **env))

    step("fill")
    killed = step("delete", LD_PRELOAD=str(shim), KILL_AT_OPEN="index_metadata.pickle")
    print(f"delete: exit status {killed.returncode} ({killed.stderr.strip()})")
    print(step("after").stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
