"""A lane added to a live stream, on the real fleet: consumers of every lane that are
running (a group of two, through the Assigner) read it without a restart, and a
producer opened before sends to it at once. Nothing is lost."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any

from streamplane.client.consumer import StreamConsumer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from tests.waiting import wait_for


def test_running_consumers_read_a_lane_added_through_the_api(
    control_plane: Any, stream_factory: Any
) -> None:
    client: ControlPlaneClient = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    group = f"g-{uuid.uuid4().hex[:6]}"
    seen: list[tuple[str, bytes]] = []
    seen_lock = threading.Lock()
    stop = threading.Event()
    members = [StreamConsumer(stream, group, client) for _ in range(2)]  # lanes=None

    def consume(consumer: StreamConsumer) -> None:
        with consumer:
            while not stop.is_set():
                for msg in consumer.poll_batch(500, 0.2):
                    assert msg.value is not None
                    with seen_lock:
                        seen.append((msg.lane, msg.value))
                    msg.ack()

    threads = [threading.Thread(target=consume, args=(m,), daemon=True) for m in members]
    for thread in threads:
        thread.start()
    sent: list[tuple[str, bytes]] = []
    try:
        with StreamProducer(stream, client) as early:  # opened before the lane exists
            for i in range(300):
                for lane in ("realtime", "bulk"):
                    early.send(f"{lane}-{i}".encode(), key=str(i).encode(), lane=lane)
                    sent.append((lane, f"{lane}-{i}".encode()))
            early.flush()
            wait_for("the records before the lane is added", lambda: len(seen) >= 600, 60)

            table = client.add_lane(stream, "priority", before="bulk")
            assert table.lanes == ("realtime", "priority", "bulk")
            for i in range(1000):  # at once: before its routing watch may have told it
                early.send(f"priority-{i}".encode(), key=str(i).encode(), lane="priority")
                sent.append(("priority", f"priority-{i}".encode()))
            early.flush()
        with StreamProducer(stream, client) as late:  # opened after it
            for i in range(1000, 2000):
                late.send(f"priority-{i}".encode(), key=str(i).encode(), lane="priority")
                sent.append(("priority", f"priority-{i}".encode()))
                late.send(f"bulk-{i}".encode(), key=str(i).encode(), lane="bulk")
                sent.append(("bulk", f"bulk-{i}".encode()))

        wait_for("every record sent, read", lambda: len(set(seen)) >= len(sent), 120)
        stop.set()
        for thread in threads:
            thread.join(30)
    finally:
        stop.set()
    assert set(seen) == set(sent)  # 0 lost
    assert Counter(lane for lane, _ in set(seen)) == {
        "realtime": 300,
        "bulk": 1300,
        "priority": 2000,
    }
    assert all(m._lanes == ["realtime", "priority", "bulk"] for m in members)
    described = client.describe_group(group)
    assert described["lanes"] == ["realtime", "priority", "bulk"]
    assert described["units"] == 6  # 2 partitions of each lane
