"""localrag launcher: parse arguments, build the engine, serve the UI.

    python app.py                      # bundled default model on http://127.0.0.1:7860
    python app.py --port 8000 --model gemma3-270m --index-dir ~/my_index --data-dir ~/localrag_data

The UI binds 127.0.0.1 unless --host says otherwise; --share is off by default.
All the work happens in the localrag package (localrag.launch); this file stays thin.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a model hub at run time
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
# OpenMP workers (torch's and llama.cpp's) spin only briefly before sleeping: the embedder and the
# chat model must not spin against each other on a small machine, yet a fully passive wait costs
# llama.cpp ~25% of its decode speed on tiny models (measured: 86 vs 60 tok/s, SmolLM2, 2 cores).
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

from localrag.launch import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
