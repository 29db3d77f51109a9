"""kill -9 of a consumer, and commit state larger than offset.metadata.max.bytes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import StreamProducer
from streamplane.core.commitlog import decode
from streamplane.kafka.admin import KafkaAdmin
from streamplane.local.fleet import ClusterInfo
from tests.waiting import wait_for

from .conftest import TINY_METADATA_BYTES
from .records import consume_until, produce_numbers

HERE = Path(__file__).parent


def committed_state(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    admin = KafkaAdmin(bootstrap).raw()
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {
        (tp.topic, tp.partition): (tp.offset, tp.metadata or "")
        for tp in fut.result(10).topic_partitions
        if tp.offset >= 0
    }


def test_kill_9_then_restart_loses_nothing_and_skips_settled(
    control_plane: Any, stream_factory: Any, fleet: Any, tmp_path: Path
) -> None:
    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=3)
    total = 30_000
    produce_numbers(client, stream, total)

    group = f"g-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "first.txt"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "consumer_process.py"),
            control_plane.url,
            control_plane.token,
            stream,
            group,
            str(out),
        ],
        env={**os.environ, "PYTHONPATH": str(HERE.parents[2])},
    )
    try:
        wait_for(
            f"the consumer process to handle {total // 2} records",
            lambda: out.exists() and out.read_text().count("\n") >= total // 2,
            60,
            every=0.1,
        )
        time.sleep(0.7)  # let at least one commit with holes happen
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    # What the group had committed when it died: offsets below the low watermark and the
    # settled ranges in the metadata must never be handed out again.
    settled_at_kill: set[tuple[int, int]] = set()
    for (_topic, partition), (offset, metadata) in committed_state(
        fleet.bootstrap("local-a"), group
    ).items():
        settled_at_kill.update((partition, o) for o in range(offset))
        progress = decode(metadata).progress
        assert progress is not None and progress.low_watermark == offset
        settled_at_kill.update((partition, o) for o in progress.settled)
    assert settled_at_kill, "the killed consumer committed nothing"

    first = [tuple(map(int, line.split())) for line in out.read_text().splitlines() if line]
    first_values = {v for _, _, v in first}

    second: list[tuple[int, int, int]] = []
    with StreamConsumer(stream, group, client) as consumer:

        def handle(msg: StreamMessage) -> None:
            second.append((msg.partition, msg.offset, int(msg.value or b"-1")))
            msg.ack()

        consume_until(
            consumer, lambda: first_values | {v for *_, v in second} >= set(range(total)), handle
        )

    redelivered = [(p, o) for p, o, v in second if v in first_values]
    print(
        f"first consumer handled {len(first)}, settled at kill {len(settled_at_kill)}, "
        f"redelivered after restart {len(redelivered)}"
    )
    assert first_values | {v for *_, v in second} == set(range(total))
    assert not [r for r in redelivered if r in settled_at_kill]
    assert consumer.restored_skips() > 0 or not [p for p, _ in settled_at_kill]


def _scattered_acks_then_restart(
    client: Any, stream: str, bootstrap: str
) -> tuple[dict[str, int], str]:
    """10,000 random acks above a stuck record 0; then a restart of the same group.

    Returns the commit store's stats and the committed metadata; asserts that the
    restarted member gets exactly the records that were not acked.
    """
    total = 20_001
    with StreamProducer(stream, client) as producer:
        for i in range(total):
            producer.send(str(i).encode())
        producer.flush()

    rng = random.Random(7)
    to_ack = set(rng.sample(range(1, total), 10_000))  # record 0 is stuck: never acked
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = StreamConsumer(
        stream,
        group,
        client,
        max_attempts=1000,
        retry_backoff=60.0,
        max_retry_backoff=120.0,
        max_in_flight=30_000,
    )
    handled: set[int] = set()
    with consumer:

        def handle(msg: StreamMessage) -> None:
            n = int(msg.value or b"-1")
            handled.add(n)
            if n in to_ack:
                msg.ack()
            elif n == 0:
                msg.nack("stuck")

        consume_until(consumer, lambda: len(handled) >= total, handle)
        consumer.commit()
        stats = dict(next(iter(consumer._commit_stores.values())).stats)

    [(offset, metadata)] = [
        v for (t, _), v in committed_state(bootstrap, group).items() if ".realtime." in t
    ]
    assert offset == 0

    # A restart restores the state (from the side topic if it spilled): acked records
    # are skipped, everything else is handed out again.
    again: set[int] = set()
    with StreamConsumer(stream, group, client) as restarted:

        def handle2(msg: StreamMessage) -> None:
            again.add(int(msg.value or b"-1"))
            msg.ack()

        consume_until(restarted, lambda: len(again) >= total - len(to_ack), handle2)
        time.sleep(1.0)
        while (m := restarted.poll(0.5)) is not None:
            again.add(int(m.value or b"-1"))
    assert again == set(range(total)) - to_ack
    return stats, metadata


def test_scattered_acks_fit_the_default_budget(
    control_plane: Any, stream_factory: Any, fleet: Any
) -> None:
    stream = stream_factory(cluster="local-b", partitions=1, lanes=("realtime",))
    stats, metadata = _scattered_acks_then_restart(
        control_plane.client(), stream, fleet.bootstrap("local-b")
    )
    print(f"10,000 scattered acks: metadata {len(metadata)} bytes of 4095")
    assert stats["spills"] == 0
    assert len(metadata) < 4096
    progress = decode(metadata).progress
    assert progress is not None and len(progress.settled) == 10_000


def test_scattered_acks_overflow_spills_and_restores(
    control_plane: Any, stream_factory: Any, tiny_cluster: ClusterInfo
) -> None:
    stream = stream_factory(cluster="tiny", partitions=1, lanes=("realtime",))
    stats, metadata = _scattered_acks_then_restart(
        control_plane.client(), stream, tiny_cluster.bootstrap
    )
    assert stats["spills"] >= 1
    assert 0 < stats["max_metadata_bytes"] < TINY_METADATA_BYTES  # the broker refuses ==
    assert len(metadata) < TINY_METADATA_BYTES
    decoded = decode(metadata)
    assert decoded.spill is not None and decoded.truncated
