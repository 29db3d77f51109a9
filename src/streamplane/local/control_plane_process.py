"""Run the control plane as a child process (for `make run`, tests and benchmarks).

``stop()`` takes it away and ``start()`` brings it back on the same port and database,
so clients can be exercised while the control plane is down.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.exceptions import LocalFleetError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlPlaneProcess:
    """``streamplane control-plane serve`` on loopback, over a SQLite file (or ``db_url``)."""

    def __init__(
        self,
        state_dir: Path,
        port: int | None = None,
        token: str | None = None,
        db_url: str | None = None,
        log_level: str = "warning",
        extra_args: Sequence[str] = (),
    ) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir = state_dir
        self.port = port or free_port()
        self.token = token or secrets.token_urlsafe(24)
        self.db_url = db_url or f"sqlite:///{state_dir / 'control-plane.db'}"
        self.log_file = state_dir / "control-plane.log"
        self.log_level = log_level
        self.extra_args = list(extra_args)  # more `serve` options, e.g. ["--health"]
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def client(self, timeout: float = 10.0) -> ControlPlaneClient:
        return ControlPlaneClient(self.url, token=self.token, timeout=timeout)

    def start(self, timeout_s: float = 30.0) -> None:
        if self.running:
            return
        args = [
            sys.executable, "-m", "streamplane.cli", "control-plane", "serve",
            "--db", self.db_url, "--host", "127.0.0.1", "--port", str(self.port),
            "--token", self.token, "--no-import-local", "--log-level", self.log_level,
        ]  # fmt: skip
        args += self.extra_args
        with self.log_file.open("ab") as log:
            self._proc = subprocess.Popen(
                args,
                cwd=self.state_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = self.log_file.read_text(errors="replace").strip().splitlines()[-5:]
                raise LocalFleetError(f"control plane exited at start: {' | '.join(tail)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise LocalFleetError(f"control plane did not answer on {self.url} in {timeout_s:.0f}s")

    def stop(self, kill: bool = False) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        if kill:
            proc.kill()
        else:
            proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
