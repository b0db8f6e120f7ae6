"""Shared test setup: offline model hubs, real bundled models loaded once per session, and the
rule that a missing component fails a CI run instead of skipping (``require_or_skip``)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
# torch's OpenMP pool spins while idle; on a 2-core machine shared with llama.cpp's threads that
# makes every forward 10x slower. Passive waiting costs nothing measurable when cores are free.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from typing import NoReturn  # noqa: E402

import pytest  # noqa: E402

from localrag.config import ModelConfig  # noqa: E402


@pytest.fixture(scope="session")
def smollm2():
    """The bundled default model in our llama.cpp backend (2 threads, 4k context)."""
    from localrag.backends.llamacpp import LlamaCppBackend

    be = LlamaCppBackend(ModelConfig(model="smollm2-135m-instruct", n_ctx=4096))
    yield be
    be.close()


@pytest.fixture(scope="session")
def smollm2_engine(smollm2):
    from localrag.engine import Engine

    return Engine(smollm2)


# --- skips a green run may hold --------------------------------------------------------------
# A skip is green, so a broken build, a missing browser or a lost patch would pass CI as skips.
# Under ``--require-all`` (``scripts/test.sh`` passes it when CI=true) a missing component fails
# its test (``require_or_skip``), and the run fails at its end if any test skipped for a reason
# other than a missing piece of hardware: these prefixes.
ALLOWED_SKIPS = {
    "gpu:": "no CUDA or Metal device (tests/hf/test_hf_gpu.py)",
    "cpu:": "a build for a CPU without AVX-512 has no AVX-512 kernel to test (tests/test_repack_kernel.py)",
}
_REQUIRE_ALL = "LOCALRAG_REQUIRE_ALL"  # set from the option, so every copy of this module reads it


def require_all() -> bool:
    """Whether a missing component fails: ``--require-all``, or CI=true in the environment."""
    return os.environ.get(_REQUIRE_ALL) == "1" or os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_or_skip(reason: str) -> NoReturn:
    """A component the test needs is missing (``reason`` says which and why): a failure under
    ``require_all()``, else a skip with the reason. Works at module level too."""
    if require_all():  # (from None: called in an except clause, the reason says it all)
        raise pytest.fail.Exception(f"missing component (--require-all / CI=true): {reason}", pytrace=False) from None
    pytest.skip(reason, allow_module_level=True)


def allowed_skip(reason: str) -> bool:
    return reason.removeprefix("Skipped: ").startswith(tuple(ALLOWED_SKIPS))  # as pytest reports it


def pytest_addoption(parser):
    parser.addoption("--require-all", action="store_true", default=False,
                     help="a missing component (llama.cpp build, Chromium, patch, compiler) fails instead of "
                          "skipping, and the run fails on any skip but a missing GPU's (implied by CI=true)")


def pytest_configure(config):
    if config.getoption("--require-all"):
        os.environ[_REQUIRE_ALL] = "1"


_skips: list[tuple[str, str]] = []  # (test id, reason) of every skip of this session


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _record_skip(report)


def pytest_collectreport(report):
    if report.skipped:
        _record_skip(report)


def _record_skip(report) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    _skips.append((report.nodeid, reason.removeprefix("Skipped: ")))


def pytest_sessionfinish(session, exitstatus):
    if require_all() and any(not allowed_skip(r) for _, r in _skips) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    bad = [(node, r) for node, r in _skips if not allowed_skip(r)]
    terminalreporter.write_line(f"skips: {len(_skips)} ({len(_skips) - len(bad)} for missing hardware: "
                                f"{', '.join(ALLOWED_SKIPS)})")
    if bad and require_all():
        terminalreporter.write_line(f"FAILED: {len(bad)} skip(s) under --require-all / CI=true, "
                                    "where only missing hardware may skip:", red=True, bold=True)
        for node, reason in bad:
            terminalreporter.write_line(f"  {node}: {reason}", red=True)
