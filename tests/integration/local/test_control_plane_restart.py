"""The local control plane started with restart_on_exit (`make run`) comes back after a
crash, on the same port and database; a deliberate stop is not undone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from streamplane.local.control_plane_process import ControlPlaneProcess
from tests.waiting import wait_for


def test_a_crashed_control_plane_is_started_again(tmp_path: Path) -> None:
    cp = ControlPlaneProcess(tmp_path / "cp", restart_on_exit=True)
    cp.start()
    try:
        with cp.client() as client:
            client.register_cluster("kept", "127.0.0.1:1", {"env": "test"}, force=True)
        crashed = cp.pid
        assert crashed is not None
        os.kill(crashed, signal.SIGKILL)  # as a native abort would end it
        wait_for("the crashed control plane restarted", lambda: cp.restarts == 1 and cp.running, 60)
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
        wait_for("the control plane restarted again", lambda: cp.restarts == 2 and cp.running, 60)
    finally:
        cp.stop()
