"""The local control plane started with restart_on_exit (`make run`) comes back after a
crash, on the same port and database; a deliberate stop is not undone."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from streamplane.local.control_plane_process import ControlPlaneProcess


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_a_crashed_control_plane_is_started_again(tmp_path: Path) -> None:
    cp = ControlPlaneProcess(tmp_path / "cp", restart_on_exit=True)
    cp.start()
    try:
        with cp.client() as client:
            client.register_cluster("kept", "127.0.0.1:1", {"env": "test"})
        crashed = cp.pid
        assert crashed is not None
        os.kill(crashed, signal.SIGKILL)  # as a native abort would end it
        assert wait_until(lambda: cp.restarts == 1 and cp.running, 60), "not restarted"
        assert cp.pid != crashed
        with cp.client() as client:
            assert [c["name"] for c in client.list_clusters()] == ["kept"]  # same database
        cp.stop()
        time.sleep(1.5)  # three watch intervals
        assert not cp.running and cp.restarts == 1  # a stop is not a crash
        cp.start()  # and start brings it back, watched again
        again = cp.pid
        assert again is not None
        os.kill(again, signal.SIGKILL)
        assert wait_until(lambda: cp.restarts == 2 and cp.running, 60), "not restarted again"
    finally:
        cp.stop()
