"""The CPU flags llama.cpp is built with: AVX-512 where the CPU reports it, never AMX or native."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from localrag.cpu_flags import PORTABLE, detected_flags

ROOT = Path(__file__).resolve().parents[1]

# flags lines of real CPUs (trimmed to the features that matter)
EPYC_GENOA = "processor : 0\nflags : fpu sse2 avx f16c fma avx2 bmi2 avx512f avx512dq avx512bw avx512vl " \
             "avx512vbmi avx512_vnni avx512_bf16 avx_vnni\n"
SAPPHIRE_RAPIDS = EPYC_GENOA.replace("\n", " amx_tile amx_int8 amx_bf16\n", 1)
ZEN3 = "flags : fpu sse2 avx f16c fma avx2 bmi2\n"
HALF_AVX512 = "flags : avx avx2 fma f16c bmi2 avx512f avx512_vnni\n"  # no bw/dq/vl: not usable


def test_avx512_family_is_enabled_where_the_cpu_has_it():
    flags = detected_flags(EPYC_GENOA, machine="x86_64")
    assert flags[: len(PORTABLE)] == PORTABLE
    assert {"-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON",
            "-DGGML_AVX_VNNI=ON"} <= set(flags)


def test_amx_and_native_are_never_enabled():
    flags = detected_flags(SAPPHIRE_RAPIDS, machine="x86_64")
    assert "-DGGML_NATIVE=OFF" in flags
    assert not [f for f in flags if "AMX" in f or "NATIVE=ON" in f]


def test_an_avx2_cpu_gets_the_portable_set():
    assert detected_flags(ZEN3, machine="x86_64") == PORTABLE


def test_avx512_extensions_need_the_foundation_set():
    assert detected_flags(HALF_AVX512, machine="x86_64") == PORTABLE


def test_portable_and_other_machines():
    assert detected_flags(EPYC_GENOA, machine="x86_64", portable=True) == PORTABLE
    assert detected_flags(EPYC_GENOA, machine="aarch64") == ()
    assert detected_flags(EPYC_GENOA, machine="arm64") == ()


def test_setup_runs_it_as_a_script_with_no_dependencies():
    """scripts/setup.sh calls it with the bare system Python (-I: no site-packages, no cwd)."""
    out = subprocess.run([sys.executable, "-I", str(ROOT / "localrag" / "cpu_flags.py")], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == list(detected_flags())
    portable = subprocess.run([sys.executable, "-I", str(ROOT / "localrag" / "cpu_flags.py"), "--portable"],
                              capture_output=True, text=True, check=True).stdout.split()
    assert portable == (list(PORTABLE) if out else [])
