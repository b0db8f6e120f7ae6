"""scripts/setup.sh's install stamps and build flags, run against a fake virtualenv (no pip, no apt,
no network)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from localrag.cpu_flags import detected_flags

ROOT = Path(__file__).resolve().parents[1]

# logs its arguments; llama_cpp counts as installed only when FAKE_LLAMA_INSTALLED is set
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$CALLS"
case "$*" in *find_spec*) [ -n "$FAKE_LLAMA_INSTALLED" ] ;; esac
"""


def _checkout(tmp_path: Path) -> Path:
    """setup.sh and the requirements files in a folder whose .venv/bin/python only logs its arguments."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    (repo / "localrag").mkdir()
    shutil.copy(ROOT / "localrag" / "cpu_flags.py", repo / "localrag" / "cpu_flags.py")
    for name in ("requirements.txt", "requirements-dev.txt"):
        shutil.copy(ROOT / name, repo / name)
    _script(repo / ".venv" / "bin" / "python", FAKE_PYTHON)
    # Shims: Tesseract and the chromium font "installed", not root (so no apt-get), apt-get refused.
    bin_dir = tmp_path / "bin"
    _script(bin_dir / "tesseract", "#!/bin/sh\nexit 0\n")
    _script(bin_dir / "dpkg", "#!/bin/sh\nexit 0\n")
    _script(bin_dir / "id", "#!/bin/sh\necho 1000\n")
    _script(bin_dir / "apt-get", "#!/bin/sh\necho 'apt-get called' >&2\nexit 1\n")
    return repo


def _script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _setup(repo: Path, *args: str, **env_vars: str) -> int:
    """Run setup.sh once; how many `pip install -r` it ran."""
    calls = repo / "calls.log"
    calls.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS", "LOCALRAG_PORTABLE_BUILD")}
    env.update(env_vars, CALLS=str(calls), PATH=f"{repo.parent / 'bin'}:{os.environ['PATH']}")
    out = subprocess.run(["bash", str(repo / "scripts" / "setup.sh"), *args], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "apt-get called" not in out.stderr
    return sum(1 for line in calls.read_text().splitlines() if line.startswith("-m pip install") and " -r " in line)


def test_dev_install_also_satisfies_the_runtime_setup(tmp_path):
    repo = _checkout(tmp_path)
    assert _setup(repo, "--dev") == 1  # scripts/test.sh: installs both files
    assert _setup(repo) == 0  # scripts/run.sh afterwards: nothing to install
    assert _setup(repo, "--dev") == 0
    with (repo / "requirements.txt").open("a") as f:
        f.write("# changed\n")
    assert _setup(repo) == 1  # a changed requirements.txt installs again, for either script
    assert _setup(repo, "--dev") == 1
    assert _setup(repo) == 0


def test_runtime_install_does_not_satisfy_the_dev_setup(tmp_path):
    repo = _checkout(tmp_path)
    assert _setup(repo) == 1
    assert _setup(repo, "--dev") == 1  # the test tools are still missing
    with (repo / "requirements-dev.txt").open("a") as f:
        f.write("# changed\n")
    assert _setup(repo, "--dev") == 1
    assert _setup(repo) == 0  # only the dev file changed


def _rebuilt(repo: Path) -> bool:
    """Whether the last setup.sh run built llama-cpp-python again on its own."""
    return any("--force-reinstall" in line and "llama-cpp-python==" in line
               for line in (repo / "calls.log").read_text().splitlines())


def test_other_build_flags_build_llama_cpp_python_again(tmp_path):
    repo = _checkout(tmp_path)
    assert _setup(repo) == 1 and not _rebuilt(repo)  # a first install builds with the flags already
    flags = (repo / ".venv" / ".localrag-cmake-args").read_text().split()
    assert "-DGGML_NATIVE=OFF" in flags or not flags  # the record llama_programs builds with
    assert _setup(repo) == 0
    assert _setup(repo, CMAKE_ARGS="-DGGML_CUDA=on") == 1 and _rebuilt(repo)  # a GPU build
    assert (repo / ".venv" / ".localrag-cmake-args").read_text().split() == ["-DGGML_CUDA=on"]
    assert _setup(repo, CMAKE_ARGS="-DGGML_CUDA=on") == 0


def test_a_venv_from_before_the_flags_record_is_rebuilt_for_this_cpu(tmp_path):
    """An install without a record was the portable x86-64-v3 build: it is built again where this
    CPU has more."""
    repo = _checkout(tmp_path)
    assert _setup(repo, LOCALRAG_PORTABLE_BUILD="1") == 1 and not _rebuilt(repo)
    (repo / ".venv" / ".localrag-cmake-args").unlink()
    assert _setup(repo, FAKE_LLAMA_INSTALLED="1") == 1
    assert _rebuilt(repo) == (detected_flags() != detected_flags(portable=True))
