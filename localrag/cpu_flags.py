"""The CMake flags that build llama.cpp for this CPU: portable x86-64-v3 plus the AVX-512 family
the CPU reports, never AMX and never ``-march=native``.

Why not native: llama.cpp's ``GGML_NATIVE`` turns on AMX tile instructions wherever the CPU has
them, and a VM whose kernel does not grant AMX state dies of SIGILL on the first matmul. Each
AVX-512 flag is enabled only when ``/proc/cpuinfo`` lists it, so the build runs here and on any
machine with the same flags. Standard library only: ``scripts/setup.sh`` runs this file with the
system Python before the virtualenv has anything installed.

    python3 localrag/cpu_flags.py              # the flags for this CPU, one line
    python3 localrag/cpu_flags.py --portable   # x86-64-v3 only (a build to copy to other machines)
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

__all__ = ["AVX512_FLAGS", "PORTABLE", "detected_flags"]

# x86-64-v3 (AVX2, FMA, F16C, BMI2): every x86 CPU of the last decade
PORTABLE = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
            "-DGGML_BMI2=ON")
# /proc/cpuinfo flag -> the GGML option that uses it (llama.cpp's ggml/CMakeLists.txt names); AVX-512
# needs the foundation set (f, bw, dq, vl) before any extension counts
AVX512_BASE = ("avx512f", "avx512bw", "avx512dq", "avx512vl")
AVX512_FLAGS = {"avx512vbmi": "-DGGML_AVX512_VBMI=ON", "avx512_vnni": "-DGGML_AVX512_VNNI=ON",
                "avx512_bf16": "-DGGML_AVX512_BF16=ON"}
# AVX-VNNI (the 256-bit VEX form) is separate from AVX-512 VNNI; llama.cpp uses either
AVX_VNNI = ("avx_vnni", "-DGGML_AVX_VNNI=ON")


def cpu_features(cpuinfo: str) -> set[str]:
    """The feature names of the first ``flags`` line of a /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def detected_flags(cpuinfo: str | None = None, machine: str | None = None,
                   portable: bool = False) -> tuple[str, ...]:
    """CMake flags for a CPU described by ``cpuinfo`` (default: this one's /proc/cpuinfo) on
    ``machine`` (default: this one). () off x86-64 (ARM and Apple builds pick their own)."""
    if (machine or platform.machine()) not in ("x86_64", "AMD64"):
        return ()
    if portable:
        return PORTABLE
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    have = cpu_features(cpuinfo)
    flags = list(PORTABLE)
    if all(f in have for f in AVX512_BASE):
        flags.append("-DGGML_AVX512=ON")
        flags += [option for feature, option in AVX512_FLAGS.items() if feature in have]
    if AVX_VNNI[0] in have:
        flags.append(AVX_VNNI[1])
    return tuple(flags)  # never -DGGML_AMX_*: see the module docstring


if __name__ == "__main__":
    print(" ".join(detected_flags(portable="--portable" in sys.argv[1:])))
