"""`dlq replay` on a real fleet: a run is bounded to the dead letters present when it
starts, and commits each batch it replays.

- A group that rejects what replay sends back (max_attempts=1) fed the letters back to
  the dlq lane faster than replay's idle timeout: replay never ended (1,000 letters
  replayed ~98 times in 45 s, the dlq growing without bound).
- Replay acked each batch but committed only every second: a replay killed mid-way
  sent a quarter of what it had replayed again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streamplane.client.consumer import StreamConsumer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.dlq import replay_dead_letters
from streamplane.kafka.clients import consumer_config, producer_config
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from tests.waiting import wait_for


def dead_letters(bootstrap: str, dlq_topic: str, first: int, n: int) -> None:
    """``n`` dead letters of the realtime lane, values ``first`` .. ``first + n - 1``."""
    producer = Producer(producer_config(bootstrap))
    for i in range(first, first + n):
        producer.produce(dlq_topic, b"%d" % i, headers=[("sp-dlq-lane", b"realtime")])
    assert producer.flush(60) == 0


def end_offset(bootstrap: str, topic: str) -> int:
    c = Consumer(consumer_config(bootstrap, "sp-test-ends"))
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        c.close()


def replayed_from(bootstrap: str, topic: str) -> list[int]:
    """The dlq offset each copy on ``topic`` (partition 0) was replayed from, in order."""
    end = end_offset(bootstrap, topic)
    c = Consumer(consumer_config(bootstrap, "sp-test-copies"))
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[int] = []
    deadline = time.monotonic() + 60
    try:
        position = 0
        while position < end and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                position = m.offset() + 1  # type: ignore[operator]
                origin = dict(m.headers() or []).get("sp-replayed-from")
                if origin is not None:
                    assert isinstance(origin, bytes)
                    out.append(int(origin.decode().rsplit(":", 1)[1]))
    finally:
        c.close()
    assert position == end, f"read {topic} to {position} of {end}"
    return out


def replay_group(stream: str) -> str:
    """``stream``'s replay group, as ``streamplane.core.routing.dlq_replay_group`` names
    it (spelled out: the name is what Kafka keeps the group's commits under)."""
    return f"sp-dlq-replay.{stream}"


class Committed:
    """The offset ``group`` (a stream's replay group, say) has committed on a dlq
    partition."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.tp = TopicPartition(topic, 0)
        self.client = Consumer(consumer_config(bootstrap, group))

    def __call__(self) -> int:
        (tp,) = self.client.committed([self.tp], timeout=10)
        return int(tp.offset)

    def close(self) -> None:
        self.client.close()


def topics(client: ControlPlaneClient, stream: str) -> tuple[str, str]:
    """The stream's dlq and realtime topics, once the Assigner hands partitions out.

    (For a little more than a lease after the control plane starts, it gives each
    member only what the member claims: a replay started then gets nothing to read
    and ends, idle, having replayed nothing; so does one started while the lease of
    a killed replay's member runs.)"""
    with StreamConsumer(stream, f"probe-{uuid.uuid4().hex[:8]}", client, lanes=["dlq"]) as c:
        wait_for("the Assigner to hand partitions out", lambda: c.poll(0.1) or c.assignment(), 30)
    table = client.routing(stream)
    return table.active("dlq").topic, table.active("realtime").topic


def test_replay_ends_while_a_group_rejects_what_it_replays(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """A group with max_attempts=1 rejects every record of the lane while replay runs:
    each copy is back in the dlq lane within a fraction of a second. Replay must end
    having replayed exactly the 1,000 dead letters present when it started, each once,
    and leave the newer ones for the next run (the group's committed offset stays at the
    first of them). (Before, it never ended while the group ran.)"""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    bootstrap = fleet.bootstrap("local-a")
    dlq_topic, lane_topic = topics(client, stream)
    dead_letters(bootstrap, dlq_topic, 0, 1000)

    stop = threading.Event()
    rejected = 0

    def reject_everything() -> None:
        nonlocal rejected
        with StreamConsumer(stream, "rejects-all", client, lanes=["realtime"], max_attempts=1) as c:
            while not stop.is_set():
                for msg in c.poll_batch(500, 0.1):
                    msg.nack("rejected by the test")
                    rejected += 1

    rejector = threading.Thread(target=reject_everything, daemon=True)
    rejector.start()
    outcome: dict[str, Any] = {}

    def run_replay() -> None:
        try:
            outcome["replayed"] = replay_dead_letters(client, stream).replayed
        except BaseException as exc:
            outcome["error"] = exc

    started = time.monotonic()
    replayer = threading.Thread(target=run_replay, daemon=True)
    replayer.start()
    replayer.join(30)
    took = time.monotonic() - started
    ended = not replayer.is_alive()
    if ended:
        wait_for("every copy rejected", lambda: rejected >= 1000, 30)
    stop.set()  # (the old replay ends once nothing comes back for 2 s)
    rejector.join(30)
    replayer.join(60)
    assert ended, f"replay still running after {took:.0f} s; {rejected} records rejected"
    assert "error" not in outcome, outcome
    assert outcome["replayed"] == 1000
    copies = replayed_from(bootstrap, lane_topic)
    assert sorted(copies) == list(range(1000)), "each letter present at the start, once"
    assert rejected == 1000

    # The letters the group sent back meanwhile are the next run's.
    committed = Committed(bootstrap, dlq_topic, replay_group(stream))
    try:
        assert committed() == 1000
    finally:
        committed.close()
    assert end_offset(bootstrap, dlq_topic) == 2000  # each copy, rejected once
    assert replay_dead_letters(client, stream).replayed == 1000
    assert sorted(replayed_from(bootstrap, lane_topic)) == sorted(
        [*range(1000), *range(1000, 2000)]
    )


def test_replay_leaves_dead_letters_that_arrive_while_it_runs(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """37 dead letters written while the replay of 1,200 runs are left for the next
    run, which replays exactly them; the first run says how many it left."""
    from streamplane.client.dlq import ReplayResult, replay_dead_letters

    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    bootstrap = fleet.bootstrap("local-a")
    dlq_topic, lane_topic = topics(client, stream)
    dead_letters(bootstrap, dlq_topic, 0, 1200)

    def write_more(k: int) -> None:
        if k == 500:
            dead_letters(bootstrap, dlq_topic, 1200, 37)

    assert replay_dead_letters(client, stream, progress=write_more) == ReplayResult(1200, 37)
    assert sorted(replayed_from(bootstrap, lane_topic)) == list(range(1200))
    assert replay_dead_letters(client, stream) == ReplayResult(37, 0)
    assert sorted(replayed_from(bootstrap, lane_topic)) == list(range(1237))


def test_replay_commits_each_batch(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """Each batch's acks are committed before the next batch is read: the committed
    offset of the stream's replay group has reached each batch's end when its progress is told. A
    replay of 1,200 interrupted after the second batch leaves exactly 200 to the next.
    (Before, it committed once a second: a run killed mid-way replayed up to a
    second's worth again.)"""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    bootstrap = fleet.bootstrap("local-a")
    dlq_topic, lane_topic = topics(client, stream)
    dead_letters(bootstrap, dlq_topic, 0, 1200)
    committed = Committed(bootstrap, dlq_topic, replay_group(stream))
    seen: list[tuple[int, int]] = []

    def interrupted(k: int) -> None:
        seen.append((k, committed()))
        if k == 1000:
            raise Interrupted

    try:
        with pytest.raises(Interrupted):
            replay_dead_letters(client, stream, progress=interrupted)
        assert seen == [(500, 500), (1000, 1000)]
        assert replay_dead_letters(client, stream).replayed == 200
        assert committed() == 1200
    finally:
        committed.close()
    assert sorted(replayed_from(bootstrap, lane_topic)) == list(range(1200))


class Interrupted(Exception):
    pass


KILLED_REPLAY = """
import os, signal, sys
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.dlq import replay_dead_letters

url, token, stream = sys.argv[1:4]

def progress(k):
    print(k, flush=True)
    if k >= 1000:
        os.kill(os.getpid(), signal.SIGKILL)

replay_dead_letters(ControlPlaneClient(url, token=token), stream, progress=progress)
"""


def run_killed_replay(
    control_plane: ControlPlaneProcess, stream: str
) -> subprocess.CompletedProcess[str]:
    """A replay of ``stream`` in a process killed (SIGKILL) once it has sent 1,000."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPLANE_")}
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_REPLAY, control_plane.url, control_plane.token, stream],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return proc


def test_a_killed_replay_sends_at_most_its_last_batch_again(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """kill -9 of a replay of 1,200 right after its second batch: the next replay sends
    exactly the other 200, so no letter is replayed twice. (Before, the two batches
    were not committed yet: the next replay sent all 1,200 again.)"""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    bootstrap = fleet.bootstrap("local-a")
    dlq_topic, lane_topic = topics(client, stream)
    dead_letters(bootstrap, dlq_topic, 0, 1200)
    proc = run_killed_replay(control_plane, stream)
    assert proc.stdout.split() == ["500", "1000"]
    time.sleep(3.0)  # the killed member's lease (1.5 s) runs out: its units move on
    assert replay_dead_letters(client, stream).replayed == 200
    assert sorted(replayed_from(bootstrap, lane_topic)) == list(range(1200))
