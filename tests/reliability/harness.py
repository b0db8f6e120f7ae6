"""Helpers of the reliability suite: child processes running this checkout, and a real
``chroma run`` server that a test can SIGKILL and restart on the same data folder."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The document generators and the consistency check are shared with tests/rag.
sys.path.insert(0, str(ROOT / "tests" / "rag"))


def child_env(**extra: str) -> dict[str, str]:
    """Environment of a child process running this checkout (one torch thread: the machine is small)."""
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **extra)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ChromaServer:
    """A real ``chroma run`` on 127.0.0.1, started, SIGKILLed and restarted on the same data folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        exe = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
        assert exe, "the chroma CLI ships with the chromadb package"
        self.exe = exe

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.exe, "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, ANONYMIZED_TELEMETRY="False"),
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "chroma server did not start"
                assert self.proc.poll() is None, "chroma server exited"
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: the server dies mid-whatever, as a crash or an OOM kill would."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None
