"""scripts/setup.sh's install stamps, run against a fake virtualenv (no pip, no apt, no network)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$CALLS"
"""


def _checkout(tmp_path: Path) -> Path:
    """setup.sh and the requirements files in a folder whose .venv/bin/python only logs its arguments."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
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


def _setup(repo: Path, *args: str) -> int:
    """Run setup.sh once; how many `pip install -r` it ran."""
    calls = repo / "calls.log"
    calls.write_text("")
    env = dict(os.environ, CALLS=str(calls), PATH=f"{repo.parent / 'bin'}:{os.environ['PATH']}")
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
