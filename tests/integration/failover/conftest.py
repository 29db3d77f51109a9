"""A dedicated fleet and control plane for failover tests (brokers get killed here).

- ``fo_fleet``: its own LocalFleet of two single-broker clusters, local-a and local-b
  (not the session's shared ``fleet``: these tests kill and restart brokers);
- ``fo_control_plane``: its own control plane (subprocess, SQLite) with health checks on
  (probe every 0.5 s, down after 2 s), sealing on, both clusters registered with each
  other as ``standby``;
- ``fo_stream``: makes uniquely named streams on it.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition
from confluent_kafka import KafkaError as RawKafkaError

from streamplane.client.consumer import StreamConsumer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import NotFound
from streamplane.kafka.clients import make_consumer
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetSpec, LocalFleet
from tests.waiting import wait_for

HEALTH_ARGS = (
    "--health",
    "--health-interval", "0.5",
    "--health-threshold", "2.0",
    "--seal-grace", "10",
)  # fmt: skip


@pytest.fixture(scope="package")
def fo_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    data_dir = tmp_path_factory.mktemp("failover-fleet")
    fleet = LocalFleet(data_dir)
    fleet.up(FleetSpec(data_dir=data_dir, clusters=2, heap_mb=384))
    yield fleet
    fleet.down(purge=True)


@contextlib.contextmanager
def failover_control_plane(
    data_dir: Path, fleet: LocalFleet, *extra_args: str
) -> Iterator[ControlPlaneProcess]:
    """A control plane on ``fleet`` with ``HEALTH_ARGS`` (and ``extra_args``), both
    clusters registered as each other's standby and healthy."""
    cp = ControlPlaneProcess(
        data_dir,
        token=f"tok-{uuid.uuid4().hex}",
        extra_args=(*HEALTH_ARGS, *extra_args),
        log_level="info",
    )
    cp.start()
    try:
        desc = fleet.descriptor()
        with cp.client() as client:
            client.register_cluster("local-a", desc.bootstrap("local-a"), {"standby": "local-b"})
            client.register_cluster("local-b", desc.bootstrap("local-b"), {"standby": "local-a"})
            wait_for("both clusters healthy", lambda: all_healthy(client), 30, every=0.2)
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="package")
def fo_control_plane(
    tmp_path_factory: pytest.TempPathFactory, fo_fleet: LocalFleet
) -> Iterator[ControlPlaneProcess]:
    with failover_control_plane(tmp_path_factory.mktemp("failover-cp"), fo_fleet) as cp:
        yield cp


@pytest.fixture
def fo_client(fo_control_plane: ControlPlaneProcess) -> Iterator[ControlPlaneClient]:
    with fo_control_plane.client(timeout=30) as client:
        yield client


@pytest.fixture
def fo_stream(fo_control_plane: ControlPlaneProcess) -> Iterator[Callable[..., str]]:
    created: list[str] = []

    def make(cluster: str = "local-a", partitions: int = 3, **kwargs: Any) -> str:
        name = f"fo-{uuid.uuid4().hex[:8]}"
        with fo_control_plane.client(timeout=60) as client:
            client.create_stream(name, cluster, partitions=partitions, **kwargs)
        created.append(name)
        return name

    yield make
    with fo_control_plane.client(timeout=60) as client:
        for name in created:
            with contextlib.suppress(NotFound, Exception):
                client.delete_stream(name)


def all_healthy(client: ControlPlaneClient) -> bool:
    return all(c["health"] == "ok" for c in client.cluster_health()["clusters"])


def segment_states(client: ControlPlaneClient, stream: str) -> dict[str, str]:
    return {s.topic: s.state.value for s in client.routing(stream).segments}


class Ack(NamedTuple):
    """Where a delivery report said a record was written (``offset`` None: the report
    gave none, which is how a write lost on a partition not yet open was reported)."""

    topic: str
    partition: int
    offset: int | None


@dataclass
class LoadedProducer:
    """A StreamProducer in a thread at ``rate`` records/s; ids are "<n>" values.

    ``acked`` are the ids whose delivery callbacks reported success, with where Kafka
    said it wrote them.
    """

    producer: StreamProducer
    rate: float
    acked: dict[int, Ack] = field(default_factory=dict)
    failed: int = 0
    sent: int = 0
    stopped_at: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> LoadedProducer:
        self._thread = threading.Thread(target=self._run, name="loaded-producer", daemon=True)
        self._thread.start()
        return self

    def _callback(self, n: int) -> Callable[[RawKafkaError | None, Message], None]:
        def done(err: RawKafkaError | None, msg: Message) -> None:
            with self._lock:
                if err is None:
                    self.acked[n] = Ack(msg.topic() or "", msg.partition() or 0, msg.offset())
                else:
                    self.failed += 1

        return done

    def _run(self) -> None:
        start = time.monotonic()
        n = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while n < due and not self._stop.is_set():
                self.producer.send(
                    str(n).encode(), key=str(n % 97).encode(), on_delivery=self._callback(n)
                )
                n += 1
                self.sent = n
            self.producer.poll(0)
            time.sleep(0.005)

    def stop(self, flush_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.stopped_at = time.monotonic()
        with contextlib.suppress(Exception):
            self.producer.flush(flush_s)


def consume_ids(
    client: ControlPlaneClient,
    stream: str,
    group: str,
    want: set[int],
    timeout: float,
    members: int = 1,
    trace: ConsumeTrace | None = None,
) -> tuple[set[int], int]:
    """Consume until every id in ``want`` was seen (or timeout): (ids, duplicates).

    ``trace`` (optional) collects where each id was read and every member's partition
    states at the end, to explain a loss."""
    seen: set[int] = set()
    dups = 0
    lock = threading.Lock()
    stop = threading.Event()

    def member() -> None:
        nonlocal dups
        with StreamConsumer(stream, group, control_plane=client, commit_interval_s=0.5) as c:
            while not stop.is_set():
                msg = c.poll(0.2)
                if msg is None:
                    continue
                n = int(msg.value or b"-1")
                with lock:
                    if n in seen:
                        dups += 1
                    seen.add(n)
                    if trace is not None:
                        trace.read_at.setdefault(n, []).append(
                            (msg.topic, msg.partition, msg.offset)
                        )
                msg.ack()
            c.commit()
            if trace is not None:
                with lock:
                    trace.states.extend(c.partition_states())

    threads = [threading.Thread(target=member, daemon=True) for _ in range(members)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with lock:
                if want <= seen:
                    break
            time.sleep(0.2)
        time.sleep(1.5)  # a last commit round
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    return seen, dups


@dataclass
class ConsumeTrace:
    """What ``consume_ids`` saw: id -> [(topic, partition, offset)] and, per partition a
    member read, its state when the member stopped."""

    read_at: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)
    states: list[dict[str, Any]] = field(default_factory=list)

    def explain(
        self,
        client: ControlPlaneClient,
        stream: str,
        missing: Sequence[int],
        acked: Mapping[int, Ack],
    ) -> str:
        """Where each missing id was acknowledged and what Kafka holds there now, where
        it is found in Kafka (if anywhere), what was read around it, and the reading
        member's state of its partition."""
        where = locate_ids(client, stream, set(missing))
        lines = []
        for n in missing[:10]:
            ack = acked[n]
            held = held_at(client, stream, ack)
            lines.append(f"id {n} acknowledged at {ack}; Kafka holds there: {held}")
            if n not in where:
                lines.append(f"id {n}: not found in any topic of the stream")
                continue
            topic, partition, offset = where[n]
            near = sorted(
                o
                for reads in self.read_at.values()
                for t, p, o in reads
                if (t, p) == (topic, partition) and abs(o - offset) <= 3
            )
            state = [s for s in self.states if (s["topic"], s["partition"]) == (topic, partition)]
            lines.append(f"id {n} at {topic}[{partition}]@{offset}; read nearby {near}; {state}")
        return "\n".join(lines)


def held_at(client: ControlPlaneClient, stream: str, ack: Ack) -> str:
    """The partition's watermarks and the record at the acknowledged offset."""
    try:
        return _held_at(client, stream, ack)
    except Exception as exc:  # a diagnostic must not hide the loss it explains
        return f"not readable ({exc!r})"


def _held_at(client: ControlPlaneClient, stream: str, ack: Ack) -> str:
    table = client.routing(stream)
    cluster = next(s.cluster for s in table.segments if s.topic == ack.topic)
    c = make_consumer(client.cluster_bootstrap(cluster), f"held-{uuid.uuid4().hex[:6]}")
    try:
        tp = TopicPartition(ack.topic, ack.partition)
        low, high = c.get_watermark_offsets(tp, timeout=10)
        if ack.offset is None:
            return f"[{low}, {high}) (the report gave no offset)"
        tp.offset = ack.offset
        c.assign([tp])
        for m in c.consume(1, 5.0):
            if m.error() is None:
                return f"[{low}, {high}) and at {m.offset()}: {m.value()!r}"
        return f"[{low}, {high}) and nothing read at {ack.offset}"
    finally:
        c.close()


def locate_ids(
    client: ControlPlaneClient, stream: str, ids: set[int]
) -> dict[int, tuple[str, int, int]]:
    """(topic, partition, offset) of each id in the stream's readable lane topics."""
    found: dict[int, tuple[str, int, int]] = {}
    table = client.routing(stream)
    for seg in table.segments:
        if seg.lane == "dlq" or seg.state.value in ("retired", "lost"):
            continue
        c = make_consumer(
            client.cluster_bootstrap(seg.cluster),
            f"locate-{uuid.uuid4().hex[:6]}",
            {"enable.partition.eof": True},
        )
        try:
            c.assign(
                [TopicPartition(seg.topic, p, OFFSET_BEGINNING) for p in range(seg.partitions)]
            )
            eof: set[int] = set()
            deadline = time.monotonic() + 30
            while len(eof) < seg.partitions and time.monotonic() < deadline:
                for m in c.consume(500, 0.5):
                    err = m.error()
                    if err is not None:
                        if err.code() == RawKafkaError._PARTITION_EOF:
                            eof.add(m.partition() or 0)
                        continue
                    n = int(m.value() or b"-1")
                    if n in ids:
                        found[n] = (seg.topic, m.partition() or 0, m.offset() or 0)
        finally:
            c.close()
    return found


def producer_for(client: ControlPlaneClient, stream: str, **extra: Any) -> StreamProducer:
    return StreamProducer(
        stream, control_plane=client, extra_config=extra or None, delivery_reports="all"
    ).open()


__all__: Sequence[str] = ()
