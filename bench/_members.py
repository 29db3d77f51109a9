"""Group members run as child processes by bench/reassignment.py.

    python _members.py streamplane URL TOKEN STREAM GROUP
    python _members.py kafka BOOTSTRAP TOPIC GROUP PROTOCOL STATE_FILE

The Kafka member writes its current assignment to STATE_FILE after every rebalance.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def streamplane_member(url: str, token: str, stream: str, group: str) -> None:
    from streamplane.client.consumer import StreamConsumer, StreamMessage
    from streamplane.client.control_plane import ControlPlaneClient

    def handle(msg: StreamMessage) -> None:
        pass

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
