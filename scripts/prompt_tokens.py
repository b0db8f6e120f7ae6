"""Where the app's prompt tokens go (issue 53's "fewer prompt tokens that carry nothing"): over
``bench grounding``'s SQuAD report questions and collection, the app's search (k=5) and prompt
(``rag_messages``, the app's instructions), counted with the default model's tokenizer.

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python scripts/prompt_tokens.py [N]
"""

from __future__ import annotations

import json
import statistics
import sys

from localrag.answer import RAG_INSTRUCTIONS, rag_messages
from localrag.bench.grounding import setup


def main(n: int) -> None:
    s = setup("squad", None, "report", n, 0, "plain", None, "target", None, instructions=RAG_INSTRUCTIONS)
    engine = s.answerer.engine

    def count(text: str) -> int:
        return len(engine.backend.tokenize(text))

    parts: dict[str, list[int]] = {k: [] for k in ("total", "chunk_text", "labels", "instructions", "question", "template")}
    for r in s.records:
        hits = s.answerer.search(r.qa.question, 5, None).hits
        row = {"total": len(engine.chat_tokens(rag_messages(r.qa.question, hits, []))),
               "chunk_text": sum(count(" " + h.text.strip()) for h in hits),
               "labels": sum(count(f"[{i}] ({h.citation()})") for i, h in enumerate(hits, 1)),
               "instructions": count(RAG_INSTRUCTIONS + "\n\nSources:\n"),
               "question": count(r.qa.question)}
        row["template"] = row["total"] - sum(v for k, v in row.items() if k != "total")
        for k, v in row.items():
            parts[k].append(v)
    print(json.dumps({k: {"median": statistics.median(v), "mean": round(statistics.mean(v), 1)}
                      for k, v in parts.items()}, indent=1))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
