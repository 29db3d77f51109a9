"""Group members run as child processes by bench/reassignment.py and
bench/assigner_saturation.py.

    python _members.py streamplane URL TOKEN STREAM GROUP [BUSY_US [COUNT_FILE [no-backlog]]]
    python _members.py kafka BOOTSTRAP TOPIC GROUP PROTOCOL STATE_FILE

The streamplane member spends BUSY_US microseconds of CPU on each record (default 0) and
writes how many it handled to COUNT_FILE every second; ``no-backlog`` makes it report no
backlog to the Assigner (as clients did before they reported it). The Kafka member
writes its current assignment to STATE_FILE after every rebalance.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def streamplane_member(
    url: str,
    token: str,
    stream: str,
    group: str,
    busy_us: str = "0",
    count_file: str = "",
    backlog: str = "backlog",
) -> None:
    import threading

    from streamplane.client.consumer import StreamConsumer, StreamMessage
    from streamplane.client.control_plane import ControlPlaneClient

    busy_s = float(busy_us) / 1e6
    handled = [0]

    def handle(msg: StreamMessage) -> None:
        if busy_s:
            end = time.thread_time() + busy_s
            while time.thread_time() < end:
                pass
        handled[0] += 1

    def write_count() -> None:
        while True:
            time.sleep(1.0)
            tmp = Path(count_file).with_suffix(".tmp")
            tmp.write_text(str(handled[0]))
            tmp.replace(count_file)

    if count_file:
        threading.Thread(target=write_count, daemon=True).start()
    if backlog == "no-backlog":
        StreamConsumer._backlog = lambda self, state: 0  # type: ignore[method-assign]
    StreamConsumer(stream, group, ControlPlaneClient(url, token=token)).run(handle)


def kafka_member(bootstrap: str, topic: str, group: str, protocol: str, state: str) -> None:
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "log_level": 0,
    }
    if protocol == "classic":
        conf["partition.assignment.strategy"] = "cooperative-sticky"
    consumer = Consumer(conf)
    path = Path(state)
    held: set[int] = set()  # both protocols here hand out assignments incrementally

    def write() -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"partitions": sorted(held), "time": time.time()}))
        tmp.replace(path)

    def assigned(_c: Any, parts: Any) -> None:
        held.update(tp.partition for tp in parts)
        write()

    def revoked(_c: Any, parts: Any) -> None:
        held.difference_update(tp.partition for tp in parts)
        write()

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    while True:
        consumer.poll(0.1)


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    if kind == "streamplane":
        streamplane_member(*args)
    else:
        kafka_member(*args)
