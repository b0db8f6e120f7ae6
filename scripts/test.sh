#!/usr/bin/env bash
# Quick start, command 2: set up (first run only, with test tools) and run the whole test suite.
#   scripts/test.sh [pytest options]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/python -m ruff check .
# In CI (CI=true, as .ci/run sets) a missing component (a llama.cpp build, Chromium, our patch, a C
# compiler) fails instead of skipping, and only a missing GPU may skip (tests/conftest.py).
require=()
[[ "${CI:-}" =~ ^(1|true|yes)$ ]] && require=(--require-all)
set +e
.venv/bin/python -m pytest ${require[@]+"${require[@]}"} "$@"
rc=$?
set -e
# pytest exits 5 when no test was collected (e.g. a -k filter matched nothing): not a failure of the code.
[[ $rc == 5 ]] && { echo "no tests collected"; exit 0; }
exit $rc
