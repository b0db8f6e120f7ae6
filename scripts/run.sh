#!/usr/bin/env bash
# Quick start, command 1: set up (first run only) and launch the app on the bundled default model.
#   scripts/run.sh [app.py options: --host --port --model --index-dir ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
HF_HUB_OFFLINE=1 exec .venv/bin/python app.py "$@"
