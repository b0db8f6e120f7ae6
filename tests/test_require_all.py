"""A green CI run skipped nothing but missing hardware (tests/conftest.py): under ``--require-all``
(``scripts/test.sh`` passes it when CI=true, as ``.ci/run`` sets) a missing component fails its test
with the reason, any other skip fails the run at its end, and the summary counts the skips. Each
case runs a real pytest session over tests/conftest.py and a few tests that skip.

Run: .venv/bin/python -m pytest tests/test_require_all.py -q
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ALLOWED_SKIPS, allowed_skip

ROOT = Path(__file__).resolve().parents[1]

TESTS = '''
import pytest
from conftest import require_or_skip

def test_without_a_gpu():
    pytest.skip("gpu: needs a CUDA or MPS device")

def test_without_avx512():
    pytest.skip("cpu: llama.cpp was built without AVX-512")

def test_in_a_browser():
    require_or_skip("/nowhere/chromium not installed")

def test_that_runs():
    pass
'''


def run_session(tmp_path: Path, tests: str, *args: str, ci: str | None = None) -> tuple[int, str]:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(tests)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "LOCALRAG_REQUIRE_ALL")}
    env["PYTHONPATH"] = str(ROOT)
    if ci is not None:
        env["CI"] = ci
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout + out.stderr


def test_the_only_skips_allowed_are_missing_hardware():
    assert set(ALLOWED_SKIPS) == {"gpu:", "cpu:"}
    assert allowed_skip("Skipped: gpu: needs a CUDA or MPS device") and allowed_skip("cpu: no AVX-512")
    assert not allowed_skip("Skipped: llama-server: the build failed (log: /tmp/x)")
    assert not allowed_skip("/usr/bin/chromium not installed; the gpu tests need one")


def test_outside_ci_a_missing_component_skips_with_its_reason(tmp_path):
    rc, out = run_session(tmp_path, TESTS, "-rs")
    assert rc == 0, out
    assert "1 passed, 3 skipped" in out and "/nowhere/chromium not installed" in out
    assert "skips: 3 (2 for missing hardware: gpu:, cpu:)" in out


@pytest.mark.parametrize("how", ["option", "CI=true"])
def test_in_ci_a_missing_component_fails_with_its_reason(tmp_path, how):
    args, ci = (("--require-all",), None) if how == "option" else ((), "true")
    rc, out = run_session(tmp_path, TESTS, *args, ci=ci)
    assert rc == 1, out
    assert "1 failed, 1 passed, 2 skipped" in out
    assert "missing component (--require-all / CI=true): /nowhere/chromium not installed" in out
    assert "skips: 2 (2 for missing hardware" in out and "skip(s) under --require-all" not in out


def test_in_ci_any_other_skip_fails_the_run_and_is_listed(tmp_path):
    tests = TESTS + '''
def test_skipped_by_hand():
    pytest.skip("GGUF conversion cache disabled")

@pytest.mark.skipif(True, reason="not on this system")
def test_skipped_by_a_marker():
    pass
'''
    rc, out = run_session(tmp_path, tests.replace('require_or_skip("/nowhere/chromium not installed")', "pass"),
                          "--require-all")
    assert rc == 1, out
    assert "2 passed, 4 skipped" in out
    assert "FAILED: 2 skip(s) under --require-all / CI=true" in out
    assert "test_skipped_by_hand: GGUF conversion cache disabled" in out
    assert "test_skipped_by_a_marker: not on this system" in out
