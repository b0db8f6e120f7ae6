"""llama.cpp's own C++ programs (``llama-server``, ``llama-lookup``, ``llama-bench``,
``llama-speculative-simple``), built on demand, all in one build.

They are built from the llama.cpp sources that the installed llama-cpp-python vendors (its sdist
from PyPI), with the CPU flags ``scripts/setup.sh`` built the Python package with (recorded in the
virtualenv), so the programs run the same kernels as our own llama.cpp backend. Each program is
built once and cached under ``default_cache_dir() / "llama.cpp" / "<version>-<flags hash>" / "bin"``:

    exe = llama_programs(["llama-server"])["llama-server"]    # minutes on 2 cores the first time
    tools = llama_programs(["llama-lookup", "llama-bench"])   # BuildUnavailable if it cannot build

Invariants: a program is in the cache only once it was built whole (built in a scratch folder,
then moved into ``bin/`` with an atomic rename); one build runs at a time per cache folder (a file
lock; a second process waits, then finds the program there); the server is built without its web
UI and without downloading the prebuilt one (no hub is ever reached).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path

import llama_cpp

from localrag.config import default_cache_dir
from localrag.cpu_flags import detected_flags

__all__ = ["PROGRAMS", "BuildUnavailable", "build_dir", "cmake_flags", "llama_programs"]

# one build makes them all: the libraries are the build's cost, so a program asked for later would
# pay it again (measured: 15 min of wall time for two more programs on 2 loaded cores)
PROGRAMS = ("llama-server", "llama-lookup", "llama-bench", "llama-speculative-simple")
# the flags scripts/setup.sh built llama-cpp-python with (it writes them here)
SETUP_FLAGS = Path(sys.prefix) / ".localrag-cmake-args"
# only the programs asked for and the libraries they link are built (cmake --build --target); no
# tests, no curl or TLS, and the server without its web UI: LLAMA_USE_PREBUILT_UI would download it
BUILD_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_COMMON=ON",
               "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
               "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF")


class BuildUnavailable(RuntimeError):
    """A llama.cpp program cannot be built here (no compiler or cmake, no network for the sdist,
    a failed build). Its message is one line naming the cause and the build log."""


def cmake_flags() -> tuple[str, ...]:
    """CMAKE_ARGS as given, else the flags setup.sh built llama-cpp-python with, else this CPU's."""
    given = os.environ.get("CMAKE_ARGS", "").split()
    if given:
        return tuple(given)
    if SETUP_FLAGS.exists():
        return tuple(SETUP_FLAGS.read_text().split())
    return detected_flags()


def build_dir() -> Path:
    """Cache folder of this llama-cpp-python version and these flags."""
    key = hashlib.sha1(" ".join(cmake_flags() + BUILD_FLAGS).encode()).hexdigest()[:10]
    return default_cache_dir() / "llama.cpp" / f"{llama_cpp.__version__}-{key}"


def llama_programs(names: Iterable[str], build: bool = True) -> dict[str, Path]:
    """Paths of the named programs (of PROGRAMS), building the missing ones first (when ``build``).
    Raises BuildUnavailable."""
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        raise ValueError(f"not a llama.cpp program this builds: {', '.join(unknown)} (one of {', '.join(PROGRAMS)})")
    root = build_dir()
    paths = {name: root / "bin" / name for name in names}
    if all(p.exists() for p in paths.values()):
        return paths
    if not build:
        missing = ", ".join(n for n, p in paths.items() if not p.exists())
        raise BuildUnavailable(f"llama.cpp's {missing} is not built under {root}")
    tools = [what for what, exe in (("cmake", "cmake"), ("a C compiler", "cc"), ("a C++ compiler", "c++"))
             if shutil.which(os.environ.get(exe.upper().replace("+", "X"), exe)) is None]
    if tools:
        raise BuildUnavailable(f"no {' or '.join(tools)} on PATH: cannot build llama.cpp's {', '.join(names)}")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building waits here, then finds its work done
        if not all(p.exists() for p in paths.values()):
            _build(root, [n for n in PROGRAMS if not (root / "bin" / n).exists()])
    return paths


def _build(root: Path, targets: list[str]) -> None:
    """pip download the sdist, extract its vendor/llama.cpp, CMake-build ``targets`` in a scratch
    folder beside root and move each program into root/bin (a half build never counts)."""
    version = llama_cpp.__version__
    work = Path(tempfile.mkdtemp(prefix="build-", dir=root.parent))
    log = root.parent / f"build-{root.name}.log"
    what = ", ".join(targets)
    print(f"[llama.cpp] building {version} ({what}) under {root}; takes minutes; log {log}", file=sys.stderr)
    try:
        with log.open("a") as out:
            def run(cmd: list[str]) -> None:
                out.write("$ " + " ".join(cmd) + "\n")
                out.flush()
                if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode:
                    raise BuildUnavailable(f"building llama.cpp's {what} failed at {cmd[0]} {cmd[1]}: see {log}")

            run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", "-d",
                 str(work), f"llama-cpp-python=={version}"])
            sdists = sorted(work.glob("llama_cpp_python-*.tar.gz"))
            if not sdists:
                raise BuildUnavailable(f"pip found no llama-cpp-python {version} sdist: see {log}")
            src = _extract_vendored(sdists[0], work / "src")
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            run(["cmake", "-S", str(src), "-B", str(work / "build"), *gen, *BUILD_FLAGS, *cmake_flags()])
            run(["cmake", "--build", str(work / "build"), "--target", *targets, "-j", str(os.cpu_count() or 1)])
        (root / "bin").mkdir(parents=True, exist_ok=True)
        for target in targets:
            staged = root / "bin" / f".{target}.new"
            shutil.copy2(work / "build" / "bin" / target, staged)
            os.replace(staged, root / "bin" / target)
        (root / "bin" / "build.json").write_text(json.dumps(
            {"llama_cpp_python": version, "flags": list(BUILD_FLAGS + cmake_flags()),
             "programs": sorted(p.name for p in (root / "bin").iterdir() if p.name in PROGRAMS)}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _extract_vendored(sdist: Path, dest: Path) -> Path:
    """Extract only <sdist>/vendor/llama.cpp (the sdist also carries the Python package)."""
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        prefix = f"{top}/vendor/llama.cpp/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        tar.extractall(dest, members=members, filter="data")
    return dest / top / "vendor" / "llama.cpp"
