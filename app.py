"""localrag launcher: parse arguments, build the engine, serve the UI.

    python app.py                      # bundled default model on http://127.0.0.1:7860
    python app.py --port 8000 --model gemma3-270m --index-dir ~/my_index --data-dir ~/localrag_data

The UI binds 127.0.0.1 unless --host says otherwise; --share is off by default.
All the work happens in the localrag package (localrag.ui); this file stays thin.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a model hub at run time
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch threads must not spin against llama.cpp's

from localrag.ui import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
