"""llama.cpp's ``llama-server`` as a child process: an OpenAI-compatible endpoint on this machine.

    with LlamaServer(LlamaServerConfig(model=resolve("smollm2-135m-instruct").path, parallel=2)) as server:
        engine = EndpointEngine(server.endpoint())          # localrag.backends.endpoint
        print(engine.chat([{"role": "user", "content": "Hi"}]).run().text)

The program is built on demand from the llama.cpp that llama-cpp-python vendors, with the same CPU
flags, and cached (``localrag.llamacpp_build``; minutes the first time). ``start()`` returns once
``/health`` answers 200 (the model is loaded), and raises :class:`LlamaServerError` with the last
line of the server's log if it exits first or is not up in time. The server's output goes to a
log file (``log_path``), never to a pipe that could fill and block it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from localrag.backends.endpoint import EndpointConfig
from localrag.llamacpp_build import llama_programs

__all__ = ["LlamaServer", "LlamaServerConfig", "LlamaServerError", "free_port"]

# llama-server reads settings from these environment variables too; the config alone decides
SERVER_ENV_PREFIXES = ("LLAMA_ARG_", "LLAMA_API_KEY")


class LlamaServerError(RuntimeError):
    """llama-server could not be started; one line, with its log's last line and the log's path."""


@dataclass(frozen=True)
class LlamaServerConfig:
    """How to run llama-server. ``parallel``: its slots, the requests it decodes together (they
    share the ``n_ctx`` context). ``alias``: the model name it lists (default: the file's name).
    ``port`` 0: a free port of ``host``."""

    model: Path | str
    host: str = "127.0.0.1"
    port: int = 0
    n_ctx: int = 2048
    threads: int = 2
    parallel: int = 1
    api_key: str | None = None
    alias: str | None = None
    extra_args: tuple[str, ...] = ()
    start_timeout_s: float = 120.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LlamaServer:
    """One llama-server process (see the module docstring)."""

    def __init__(self, config: LlamaServerConfig, exe: Path | None = None) -> None:
        self.config = config
        self.exe = exe
        self.port = config.port or 0
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        """The OpenAI base URL (``http://host:port/v1``)."""
        return f"http://{self.config.host}:{self.port}/v1"

    def endpoint(self, **overrides) -> EndpointConfig:
        """An EndpointConfig for this server (its key and model name; ``overrides`` win)."""
        fields = {"url": self.url, "model": self.config.alias or Path(self.config.model).name,
                  "api_key": self.config.api_key} | overrides
        return EndpointConfig(**fields)

    def command(self) -> list[str]:
        cfg = self.config
        exe = self.exe or llama_programs(["llama-server"])["llama-server"]
        cmd = [str(exe), "-m", str(cfg.model), "--host", cfg.host, "--port", str(self.port), "-c", str(cfg.n_ctx),
               "-t", str(cfg.threads), "-tb", str(cfg.threads), "-np", str(cfg.parallel), "--no-webui"]
        if cfg.api_key:
            cmd += ["--api-key", cfg.api_key]
        if cfg.alias:
            cmd += ["-a", cfg.alias]
        return cmd + list(cfg.extra_args)

    def start(self) -> LlamaServer:
        if self.proc is not None:
            raise RuntimeError("this LlamaServer was started already")
        if not Path(self.config.model).is_file():
            raise LlamaServerError(f"no model file {self.config.model}")
        self.port = self.config.port or free_port(self.config.host)
        cmd = self.command()
        fd, log = tempfile.mkstemp(prefix=f"llama-server-{self.port}-", suffix=".log")
        self.log_path = Path(log)
        env = {k: v for k, v in os.environ.items() if not k.startswith(SERVER_ENV_PREFIXES)}
        with os.fdopen(fd, "w") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        health = f"http://{self.config.host}:{self.port}/health"
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                if self.proc.poll() is not None:
                    raise LlamaServerError(f"llama-server exited with {self.proc.returncode} while starting: "
                                           f"{self.log_tail()} (log {self.log_path})")
                try:
                    if client.get(health).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise LlamaServerError(f"llama-server was not up within {self.config.start_timeout_s:g} s: "
                                           f"{self.log_tail()} (log {self.log_path})")
                time.sleep(0.1)

    def log_tail(self) -> str:
        """The last non-empty line of the server's log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the server dies at once, mid-answer (tests of what a client then sees)."""
        if self.running:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; the log file is kept."""
        if not self.running:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> LlamaServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
