"""scripts/setup.sh's install stamps, build flags, patched build and editable install, run against a fake
virtualenv (no pip, no apt, no network); and the `localrag` command of the virtualenv that runs the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# logs its arguments; `pip download DIR` leaves an sdist-shaped tarball in DIR; llama_cpp counts as
# importable unless FAKE_LLAMA_MISSING is set; `pip install -e .` puts the localrag command beside it
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$CALLS"
case "$*" in
  *"import llama_cpp"*) [ -z "$FAKE_LLAMA_MISSING" ] ;;
  *"pip install"*"-e ."*) touch "$(dirname "$0")/localrag"; chmod +x "$(dirname "$0")/localrag" ;;
  *"pip download"*)
    dir=$(echo "$*" | sed 's/.* -d //; s/ .*//')
    mkdir -p "$dir/llama_cpp_python-0.3.36/vendor/llama.cpp"
    tar czf "$dir/llama_cpp_python-0.3.36.tar.gz" -C "$dir" llama_cpp_python-0.3.36
    rm -rf "$dir/llama_cpp_python-0.3.36" ;;
esac
"""
# stands in for scripts/patches/: a patch that applies to the fake sdist's vendored llama.cpp
FAKE_PATCH = """--- /dev/null
+++ b/PATCHED
@@ -0,0 +1 @@
+patched
"""


def _checkout(tmp_path: Path) -> Path:
    """setup.sh and the requirements files in a folder whose .venv/bin/python only logs its arguments."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    (repo / "localrag").mkdir()
    shutil.copy(ROOT / "localrag" / "cpu_flags.py", repo / "localrag" / "cpu_flags.py")
    for name in ("requirements.txt", "requirements-dev.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, repo / name)
    (repo / "scripts" / "patches").mkdir()
    (repo / "scripts" / "patches" / "fake.patch").write_text(FAKE_PATCH)
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


def _append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


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
    _append(repo / "requirements.txt", "# changed\n")
    assert _setup(repo) == 1  # a changed requirements.txt installs again, for either script
    assert _setup(repo, "--dev") == 1
    assert _setup(repo) == 0


def test_runtime_install_does_not_satisfy_the_dev_setup(tmp_path):
    repo = _checkout(tmp_path)
    assert _setup(repo) == 1
    assert _setup(repo, "--dev") == 1  # the test tools are still missing
    _append(repo / "requirements-dev.txt", "# changed\n")
    assert _setup(repo, "--dev") == 1
    assert _setup(repo) == 0  # only the dev file changed


def _built(repo: Path) -> bool:
    """Whether the last setup.sh run built llama-cpp-python (from its patched sdist)."""
    calls = (repo / "calls.log").read_text().splitlines()
    return any(line.startswith("-m pip download") and "llama-cpp-python==" in line for line in calls) and \
        any("--force-reinstall" in line and "llama_cpp_python-" in line for line in calls)


def test_other_build_flags_build_llama_cpp_python_again(tmp_path):
    repo = _checkout(tmp_path)
    assert _setup(repo) == 1 and _built(repo)  # a first install builds it, patched, with this CPU's flags
    flags = (repo / ".venv" / ".localrag-cmake-args").read_text().split()
    assert "-DGGML_NATIVE=OFF" in flags or not flags  # the record llama_programs builds with
    assert _setup(repo) == 0 and not _built(repo)
    assert _setup(repo, CMAKE_ARGS="-DGGML_CUDA=on") == 1 and _built(repo)  # a GPU build
    assert (repo / ".venv" / ".localrag-cmake-args").read_text().split() == ["-DGGML_CUDA=on"]
    assert _setup(repo, CMAKE_ARGS="-DGGML_CUDA=on") == 0 and not _built(repo)


def test_a_changed_patch_builds_again_and_other_requirements_do_not(tmp_path):
    repo = _checkout(tmp_path)
    assert _setup(repo) == 1 and _built(repo)
    _append(repo / "requirements.txt", "# changed\n")
    assert _setup(repo) == 1 and not _built(repo)  # the same llama-cpp-python build: kept
    _append(repo / "scripts" / "patches" / "fake.patch", "+more\n")
    assert _setup(repo) == 1 and _built(repo)  # another patch: built again
    assert _setup(repo) == 0 and not _built(repo)


def test_a_venv_without_the_build_record_or_without_llama_cpp_is_built_again(tmp_path):
    """A virtualenv set up before the patch has no build record: its llama-cpp-python is unpatched."""
    repo = _checkout(tmp_path)
    assert _setup(repo) == 1 and _built(repo)
    (repo / ".venv" / ".localrag-llama-build").unlink()
    _append(repo / "requirements.txt", "# changed\n")
    assert _setup(repo) == 1 and _built(repo)
    _append(repo / "requirements.txt", "# changed again\n")
    assert _setup(repo, FAKE_LLAMA_MISSING="1") == 1 and _built(repo)


def _installed_editable(repo: Path) -> bool:
    """Whether the last setup.sh run installed the project itself (editable, without dependencies)."""
    return any(line.startswith("-m pip install") and "--no-deps" in line and line.endswith("-e .")
               for line in (repo / "calls.log").read_text().splitlines())


def test_the_project_is_installed_editable_once_and_again_when_pyproject_changes(tmp_path):
    repo = _checkout(tmp_path)
    _setup(repo, "--dev")
    assert _installed_editable(repo) and (repo / ".venv" / "bin" / "localrag").is_file()
    _setup(repo)  # scripts/run.sh after scripts/test.sh: the command is there
    assert not _installed_editable(repo)
    _setup(repo, "--dev")
    assert not _installed_editable(repo)
    _append(repo / "pyproject.toml", "# changed\n")
    assert _setup(repo) == 0 and _installed_editable(repo)  # the project again, not the requirements
    (repo / ".venv" / "bin" / "localrag").unlink()
    _setup(repo, "--dev")
    assert _installed_editable(repo)
    moved = tmp_path / "moved"
    shutil.copytree(repo, moved, symlinks=True)
    _setup(moved)  # another checkout: the editable install must read its code, not the old one's
    assert _installed_editable(moved)


def test_the_localrag_command_of_this_virtualenv_parses_its_subcommands():
    """scripts/setup.sh installs the project editable, so .venv/bin/localrag exists beside the python
    that runs the tests (``python -m localrag`` needs no install and keeps working)."""
    command = Path(sys.executable).parent / "localrag"
    assert command.is_file(), f"{command} is missing: run scripts/setup.sh (it installs the project editable)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for args in (["--help"], ["ask", "--help"]):
        out = subprocess.run([str(command), *args], capture_output=True, text=True, timeout=120, env=env,
                             cwd=ROOT.parent)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("usage: localrag" + (" ask" if args[0] == "ask" else "")), out.stdout[:200]
    module = subprocess.run([sys.executable, "-m", "localrag", "ask", "--help"], capture_output=True, text=True,
                            timeout=120, env=env, cwd=ROOT)
    assert module.returncode == 0 and module.stdout.startswith("usage: localrag ask"), module.stderr
