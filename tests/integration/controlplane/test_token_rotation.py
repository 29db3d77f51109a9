"""Rotating the API token (a platform operator's exploratory run): restarting the control
plane with a new ``--token`` refused every running client at once, and a consumer whose
heartbeats were refused handed out nothing for good, raising nothing, while its lag read
OK. Now a replica accepts the old token as ``--previous-token`` while clients move, and a
consumer whose token is refused raises ``Unauthorized`` once its lease has run out."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.exceptions import Unauthorized
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from tests.integration.client.records import produce_numbers
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

OLD, NEW = f"old-{uuid.uuid4().hex}", f"new-{uuid.uuid4().hex}"


class Restartable:
    """One control plane (port and store kept) started again with other tokens."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.port: int | None = None
        self.process: ControlPlaneProcess | None = None

    def start(self, token: str, *previous: str) -> ControlPlaneProcess:
        if self.process is not None:
            self.process.stop()
        args = ["--no-health"] + [a for t in previous for a in ("--previous-token", t)]
        self.process = ControlPlaneProcess(
            self.state_dir, port=self.port, token=token, extra_args=args
        )
        self.process.start()
        self.port = self.process.port
        return self.process


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[Restartable]:
    cp = Restartable(tmp_path / "cp")
    yield cp
    if cp.process is not None:
        cp.process.stop()


def test_a_rotation_with_the_old_token_kept_moves_clients_without_a_stop(
    restartable: Restartable, fleet: FleetDescriptor
) -> None:
    cp = restartable.start(OLD)
    with cp.client() as admin:
        admin.register_cluster("local-a", fleet.clusters["local-a"].bootstrap)
        stream = f"rot-{uuid.uuid4().hex[:8]}"
        admin.create_stream(stream, "local-a", partitions=2)
    old_client = ControlPlaneClient(cp.url, token=OLD)
    handled: set[int] = set()
    raised: list[BaseException] = []
    stop = threading.Event()
    consumer = StreamConsumer(stream, "g-rot", old_client)

    def handle(msg: StreamMessage) -> None:
        handled.add(int(msg.value or b"-1"))

    def run() -> None:
        try:
            with consumer:
                consumer.run(handle, stop=stop)
        except BaseException as exc:
            raised.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        produce_numbers(old_client, stream, 100)
        wait_for("the first 100 records handled", lambda: len(handled) >= 100, 60)

        # Step 1: the new token, the old one kept: the old client goes on.
        restartable.start(NEW, OLD)
        produce_numbers(old_client, stream, 200)  # numbers 0..199: 100..199 are new
        wait_for("200 records handled", lambda: len(handled) >= 200, 60)
        assert not raised, raised
        stranger = ControlPlaneClient(cp.url, token="not-a-token-of-ours")
        with stranger, pytest.raises(Unauthorized):
            stranger.create_stream(f"x-{uuid.uuid4().hex[:8]}", "local-a")

        # Step 2: the old token dropped before the client moved: the consumer says so.
        restartable.start(NEW)
        runner.join(60)  # a hang guard: before, run() handed out nothing for good
        assert not runner.is_alive(), "run() went on with its token refused"
        assert len(raised) == 1 and isinstance(raised[0], Unauthorized), raised
        assert "refuses this consumer's heartbeats" in str(raised[0])
        assert "--previous-token" in str(raised[0])
    finally:
        stop.set()
        runner.join(10)
        old_client.close()
    assert handled == set(range(200))
