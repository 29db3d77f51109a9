"""Run the control plane as a child process (for `make run`, tests and benchmarks).

``stop()`` takes it away and ``start()`` brings it back on the same port and database,
so clients can be exercised while the control plane is down. With ``restart_on_exit``
(``make run``), a control plane that exits on its own (a crash: a native library can
abort the process) is started again on the same port and database, and the restart is
logged; clients ride through the gap on their cached routing.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.exceptions import LocalFleetError
from streamplane.local.fleet import free_ports

log = logging.getLogger(__name__)
_WATCH_INTERVAL_S = 0.5


def free_port() -> int:
    """A free loopback port below the ephemeral range: a client retrying a stopped control
    plane on a port inside it can be given that port as its own source port, connect to
    itself and hold it, so the control plane cannot start there again."""
    return free_ports(1)[0]


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
        restart_on_exit: bool = False,
    ) -> None:
        # Absolute: the process runs in it, and a relative database path would be read
        # from there (it made a nested copy of the directory tree, silently).
        state_dir = state_dir.resolve()
        state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir = state_dir
        self.port = port or free_port()
        self.token = token or secrets.token_urlsafe(24)
        self.db_url = db_url or f"sqlite:///{state_dir / 'control-plane.db'}"
        self.log_file = state_dir / "control-plane.log"
        self.log_level = log_level
        self.extra_args = list(extra_args)  # more `serve` options, e.g. ["--health"]
        self._proc: subprocess.Popen[bytes] | None = None
        self.restart_on_exit = restart_on_exit
        self.restarts = 0  # times it was started again after exiting on its own
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()  # start and stop against the watcher

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
        with self._lock:
            self._start(timeout_s)
            if self.restart_on_exit and self._watcher is None:
                self._watcher = threading.Thread(
                    target=self._watch, name="sp-control-plane-watch", daemon=True
                )
                self._watcher.start()

    def _watch(self) -> None:
        """Start the control plane again whenever it exits without ``stop()``."""
        while True:
            time.sleep(_WATCH_INTERVAL_S)
            with self._lock:
                proc = self._proc
                if proc is None:  # stopped on purpose (or a restart failed)
                    self._watcher = None
                    return
                if proc.poll() is None:
                    continue
                tail = self._log_tail()
                log.warning(
                    "control plane exited with code %s (%s): starting it again on %s",
                    proc.returncode,
                    tail,
                    self.url,
                )
                self._proc = None
                try:
                    self._start(30.0)
                    self.restarts += 1
                except LocalFleetError as exc:
                    log.error("control plane restart failed: %s", exc)

    def _log_tail(self, lines: int = 5) -> str:
        try:
            tail = self.log_file.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return "no log"
        return " | ".join(tail) or "no log"

    def _start(self, timeout_s: float) -> None:
        if self.running:
            return
        args = [
            sys.executable, "-m", "streamplane.cli", "control-plane", "serve",
            "--db", self.db_url, "--host", "127.0.0.1", "--port", str(self.port),
            "--token", self.token, "--no-import-local", "--log-level", self.log_level,
        ]  # fmt: skip
        args += self.extra_args
        with self.log_file.open("ab") as out:
            self._proc = subprocess.Popen(
                args,
                cwd=self.state_dir,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                raise LocalFleetError(f"control plane exited at start: {self._log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        self._stop(kill=False)
        raise LocalFleetError(f"control plane did not answer on {self.url} in {timeout_s:.0f}s")

    def stop(self, kill: bool = False) -> None:
        """Take it away (not restarted: ``start()`` brings it back)."""
        with self._lock:
            self._stop(kill)

    def _stop(self, kill: bool) -> None:
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
