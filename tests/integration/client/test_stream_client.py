"""StreamProducer and StreamConsumer against the real local fleet and control plane."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import Record, StreamProducer
from streamplane.exceptions import (
    ConfigError,
    ControlPlaneUnavailable,
    NotFound,
    ProduceError,
    RecordTooLarge,
)
from tests.waiting import wait_for

from .records import consume_until, produce_numbers, read_dead_letters


def test_round_trip_with_lanes_and_acks(control_plane: Any, stream_factory: Any) -> None:
    client: ControlPlaneClient = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=3)
    with StreamProducer(stream, client) as producer:
        for i in range(500):
            producer.send(f"bulk-{i}".encode(), key=str(i).encode(), lane="bulk")
        for i in range(500):
            producer.send(f"rt-{i}".encode(), key=str(i).encode(), lane="realtime")
        producer.flush()

    seen: list[tuple[str, bytes]] = []
    batches: list[list[str]] = []  # the lanes of each batch, in the order handed out
    group = f"g-{uuid.uuid4().hex[:6]}"
    with StreamConsumer(stream, group, client) as consumer:
        deadline = time.monotonic() + 120
        while len(seen) < 1000 and time.monotonic() < deadline:
            batch = consumer.poll_batch(1000, 0.2)
            for msg in batch:
                assert msg.value is not None
                seen.append((msg.lane, msg.value))
                msg.ack()
            if batch:
                batches.append([msg.lane for msg in batch])
    assert Counter(lane for lane, _ in seen) == {"realtime": 500, "bulk": 500}
    # Records of both lanes buffered together are handed out realtime first. Which
    # records are buffered together is up to the fetches (a realtime partition whose
    # fetch answers later comes after the bulk records before it; the lanes may not
    # meet in a batch at all): tests/unit/client/test_lane_priority.py pins the order.
    for lanes in batches:
        first_bulk = lanes.index("bulk") if "bulk" in lanes else len(lanes)
        assert set(lanes[first_bulk:]) <= {"bulk"}, lanes

    # A restarted member of the same group has nothing left to do.
    with StreamConsumer(stream, group, client) as again:
        assert again.poll(2.0) is None


def test_poison_pills_go_to_dlq_with_provenance(control_plane: Any, stream_factory: Any) -> None:
    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=4)
    total, poison_every = 100_000, 100  # the acceptance figure: 100,000 with 1% poison
    produce_numbers(client, stream, total, key_of=lambda i: i % 97)

    good: set[int] = set()
    deliveries: dict[int, list[tuple[int, str | None]]] = {}  # pill -> (attempts, last_error)

    def handler(msg: StreamMessage) -> None:
        n = int(msg.value or b"-1")
        if n % poison_every == 0:
            deliveries.setdefault(n, []).append((msg.attempts, msg.last_error))
            raise ValueError(f"poison {n}")
        good.add(n)

    stop = threading.Event()
    consumer = StreamConsumer(
        stream, f"g-{uuid.uuid4().hex[:6]}", client, max_attempts=3, retry_backoff=0.02
    )
    worker = threading.Thread(
        target=consumer.run, args=(handler,), kwargs={"stop": stop, "concurrency": 4}
    )
    worker.start()
    poison = total // poison_every
    try:
        wait_for(
            f"{total - poison} records handled and {poison} dead-lettered",
            lambda: len(good) >= total - poison and consumer.stats["dlq"] >= poison,
            120,
            every=0.2,
        )
    finally:
        stop.set()
        worker.join(30)
        consumer.close()
    assert len(good) == total - poison
    assert consumer.stats["dlq"] == poison
    # A redelivery carries the attempts before it and the error of the one before.
    assert deliveries[0] == [(0, None), (1, "ValueError: poison 0"), (2, "ValueError: poison 0")]

    dlq_seen = read_dead_letters(client, stream, poison)
    assert set(dlq_seen) == set(range(0, total, poison_every))
    prov = dlq_seen[0]
    assert prov["stream"] == stream and prov["lane"] == "realtime" and prov["cluster"] == "local-a"
    assert prov["attempts"] == "3"
    assert "poison 0" in prov["error"]
    assert {"topic", "partition", "offset", "first-seen-ms"} <= set(prov)


def test_non_retryable_errors_go_to_the_dlq_at_once_and_the_rest_are_retried(
    control_plane: Any, stream_factory: Any
) -> None:
    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    total = 2000
    produce_numbers(client, stream, total)

    handled: list[int] = []  # list.append: safe from the handler threads

    def handler(msg: StreamMessage) -> None:
        n = int(msg.value or b"-1")
        handled.append(n)
        if n % 10 == 0:
            raise ValueError(f"undecodable {n}")  # no retry can cure it
        if n % 10 == 5 and msg.attempts == 0:
            raise RuntimeError("flaky")  # the retry succeeds

    stop = threading.Event()
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = StreamConsumer(stream, group, client, max_attempts=3, retry_backoff=0.02)
    worker = threading.Thread(
        target=consumer.run,
        args=(handler,),
        kwargs={"stop": stop, "concurrency": 2, "non_retryable": (ValueError,)},
    )
    worker.start()
    pills = total // 10
    try:
        wait_for(
            f"{total - pills} records acked and {pills} dead-lettered",
            lambda: consumer.stats["acked"] >= total - pills and consumer.stats["dlq"] >= pills,
            120,
            every=0.1,
        )
    finally:
        stop.set()
        worker.join(30)
        consumer.close()
    deliveries = Counter(handled)
    assert {n for n in deliveries if n % 10 == 0} == set(range(0, total, 10))
    assert all(deliveries[n] == 1 for n in range(0, total, 10))  # never retried
    assert all(deliveries[n] == 2 for n in range(5, total, 10))  # retried once
    assert consumer.stats["dlq"] == pills and consumer.stats["acked"] == total - pills

    dead = read_dead_letters(client, stream, pills)
    assert set(dead) == set(range(0, total, 10))
    assert dead[30]["attempts"] == "1"
    assert dead[30]["error"] == "non-retryable ValueError: undecodable 30"
    with StreamConsumer(stream, group, client) as again:  # everything settled
        assert again.poll(2.0) is None


def test_nacks_queued_just_before_close_are_dead_lettered(
    control_plane: Any, stream_factory: Any
) -> None:
    """A nack is only queued; close() must still apply it: a record that reached
    max_attempts is dead-lettered and settled, not redelivered after a restart."""
    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    produce_numbers(client, stream, 20)

    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = StreamConsumer(stream, group, client, max_attempts=1)
    held: list[StreamMessage] = []
    deadline = time.monotonic() + 60
    while len(held) < 20 and time.monotonic() < deadline:
        held.extend(consumer.poll_batch(20, 0.5))
    assert len(held) == 20
    for msg in held:  # no poll after these: only close() can apply them
        if int(msg.value or b"-1") % 4 == 0:
            msg.nack("bad record")
        else:
            msg.ack()
    consumer.close()
    assert consumer.stats["dlq"] == 5

    dead = read_dead_letters(client, stream, 5)
    assert set(dead) == {0, 4, 8, 12, 16}
    assert {provenance["attempts"] for provenance in dead.values()} == {"1"}
    # Everything settled before the restart: the group has nothing left to do.
    with StreamConsumer(stream, group, client) as again:
        assert again.poll(2.0) is None


def test_routing_change_while_producing(control_plane: Any, stream_factory: Any) -> None:
    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    sent = 0
    with StreamProducer(stream, client) as producer:
        for _ in range(2000):
            producer.send(str(sent).encode())
            sent += 1
        changed_at = time.monotonic()
        table = client.failover(stream, "local-b", reason="test")
        while producer.epoch < table.epoch and time.monotonic() - changed_at < 10:
            producer.send(str(sent).encode())
            sent += 1
            time.sleep(0.001)
        switched = producer.switched_at(table.epoch)
        assert switched is not None, "the producer never took the new routing"
        switch_s = switched - changed_at
        for _ in range(2000):
            producer.send(str(sent).encode())
            sent += 1
        producer.flush()
    assert producer.epoch == table.epoch
    print(f"producer on the new segment {switch_s * 1000:.0f} ms after the failover call")
    assert switch_s < 5.0  # generous bound; the figure itself is reported by the bench

    got: set[int] = set()
    clusters: Counter[str] = Counter()
    with StreamConsumer(stream, f"g-{uuid.uuid4().hex[:6]}", client) as consumer:

        def handle(msg: StreamMessage) -> None:
            got.add(int(msg.value or b"-1"))
            clusters[msg.cluster] += 1
            msg.ack()

        consume_until(consumer, lambda: len(got) >= sent, handle)
    assert got == set(range(sent))
    assert clusters["local-a"] >= 2000 and clusters["local-b"] >= 2000


def test_bad_input(control_plane: Any, stream_factory: Any) -> None:
    client = control_plane.client()
    with pytest.raises(NotFound):
        StreamProducer("no-such-stream", client).open()
    with pytest.raises(NotFound):
        StreamConsumer("no-such-stream", "g", client).open()
    stream = stream_factory(cluster="local-a", partitions=1)
    bad_producer = StreamProducer(stream, client, lane="nope")
    with pytest.raises(ConfigError, match="no lane"):
        bad_producer.open()
    bad_consumer = StreamConsumer(stream, "g", client, lanes=["nope"])
    with pytest.raises(ConfigError, match="no lane"):
        bad_consumer.open()
    # A failed open leaves no routing watch behind (it would outlive the stream).
    assert bad_producer._watcher._stop.is_set() and bad_consumer._watcher._stop.is_set()
    with (
        StreamProducer(stream, client, max_record_bytes=1000) as producer,
        pytest.raises(RecordTooLarge),
    ):
        producer.send(b"x" * 1001)
    unreachable = ControlPlaneClient("http://127.0.0.1:9", token="x", timeout=1.0)
    with pytest.raises(ControlPlaneUnavailable):
        StreamProducer(stream, unreachable).open()


@pytest.mark.parametrize("way", ["poll", "iterate", "run"])
def test_slow_handler_still_commits_on_time(
    control_plane: Any, stream_factory: Any, fleet: Any, way: str
) -> None:
    """A 20 ms handler, 3 s: commits keep up whichever way records are taken. Iteration
    and a sequential ``run`` handed out a whole fetch (up to 500 records) per poll and
    committed only between them: with a 0.12 s handler, once a minute."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    from streamplane.kafka.admin import KafkaAdmin

    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=1, lanes=("realtime",))
    with StreamProducer(stream, client) as producer:
        for i in range(2000):
            producer.send(str(i).encode())
    group = f"g-{uuid.uuid4().hex[:6]}"
    handled = 0

    def handle(msg: StreamMessage) -> None:
        nonlocal handled
        time.sleep(0.02)  # a slow handler: ~150 records in 3 s, less than one fetch
        handled += 1

    with StreamConsumer(stream, group, client, commit_interval_s=0.5) as consumer:
        deadline = time.monotonic() + 3.0
        if way == "poll":
            while time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None:
                    handle(msg)
                    msg.ack()
        elif way == "iterate":
            for msg in consumer:
                handle(msg)
                msg.ack()
                if time.monotonic() >= deadline:
                    break
        else:
            stop = threading.Event()
            threading.Timer(3.0, stop.set).start()
            consumer.run(handle, stop=stop)
        admin = KafkaAdmin(fleet.bootstrap("local-a")).raw()
        fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        committed = [tp.offset for tp in fut.result(10).topic_partitions if tp.offset >= 0]
        assert handled < 250
        assert committed and committed[0] >= handled // 2  # commits kept up while handling


def test_records_with_their_own_callback_are_counted_too(
    control_plane: Any, stream_factory: Any
) -> None:
    from streamplane.client.metrics import METRICS

    stream = stream_factory(cluster="local-a", partitions=1, lanes=("realtime",))
    reports: list[object] = []
    with StreamProducer(stream, control_plane.client(), delivery_reports="all") as producer:
        for i in range(10):
            producer.send(str(i).encode(), on_delivery=lambda err, _msg: reports.append(err))
        producer.send(b"no callback")
        producer.flush()
    assert reports == [None] * 10
    assert METRICS.delivered[(stream, "realtime")] == 11
    assert METRICS.produced[(stream, "realtime")] == 11


def test_failures_only_reports_count_acks_and_surface_errors(
    control_plane: Any, stream_factory: Any
) -> None:
    """The default producer has librdkafka report failed deliveries only: acks are
    counted as sent - failed - queued, and failures still reach the caller."""
    from streamplane.client.metrics import METRICS

    stream = stream_factory(cluster="local-a", partitions=2, lanes=("realtime",))
    client = control_plane.client()
    statistics = {"statistics.interval.ms": 100}
    with StreamProducer(stream, client, extra_config=statistics) as producer:
        for i in range(2500):  # past two of the reports made every 1,000 sends
            producer.send(str(i).encode(), key=str(i).encode())
        with pytest.raises(ConfigError, match="delivery_reports='all'"):
            producer.send(b"x", on_delivery=lambda err, msg: None)
        producer.flush()
        assert METRICS.produced[(stream, "realtime")] == 2500
        assert METRICS.delivered[(stream, "realtime")] == 2500
        # librdkafka's latency windows account for every record once.
        latency = METRICS.produce_latency[(stream,)]
        deadline = time.monotonic() + 10
        while latency.count < 2500 and time.monotonic() < deadline:
            producer.poll(0.1)
        assert latency.count == 2500
    # Every record timing out (nothing listens at the bootstrap address): flush raises
    # and nothing is counted as acknowledged.
    unreachable = {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 50}
    failing = StreamProducer(stream, client, extra_config=unreachable).open()
    for i in range(10):
        failing.send(str(i).encode())
    with pytest.raises(ProduceError, match="10 records could not be delivered"):
        failing.flush(10)
    failing.close()
    assert METRICS.produce_errors[(stream, "realtime")] == 10
    assert METRICS.delivered[(stream, "realtime")] == 2500


def test_send_batch_queues_a_lane_s_records_in_order_and_names_the_ones_too_large(
    control_plane: Any, stream_factory: Any
) -> None:
    from streamplane.client.metrics import METRICS

    stream = stream_factory(cluster="local-a", partitions=1, lanes=("realtime",))
    client = control_plane.client()
    records: list[Record] = [(str(i).encode(), b"k", [("n", str(i).encode())]) for i in range(5)]
    records.insert(2, (b"x" * 64, None, None))  # over the bound below
    with StreamProducer(stream, client, max_record_bytes=32) as producer:
        sent = producer.send_batch(records)
        assert sent.too_large == [2] and sent.topic == producer.active_topic()
        producer.flush()
    assert METRICS.delivered[(stream, "realtime")] == 5

    seen: list[tuple[bytes | None, object]] = []
    with StreamConsumer(stream, f"g-{uuid.uuid4().hex[:6]}", client) as consumer:

        def handle(msg: StreamMessage) -> None:
            seen.append((msg.value, msg.headers))
            msg.ack()

        consume_until(consumer, lambda: len(seen) >= 5, handle)
    assert seen == [(str(i).encode(), [("n", str(i).encode())]) for i in range(5)]


@pytest.mark.parametrize("concurrency", [1, 4])
def test_close_from_another_thread_stops_run(
    control_plane: Any, stream_factory: Any, concurrency: int
) -> None:
    """``close()`` while ``run()`` polls on another thread: run returns, close returns,
    no error. (Before, closing the librdkafka client under run's consume call hung in 2
    of 7 tries, and otherwise run's thread died with "the committer is stopped".)"""
    client: ControlPlaneClient = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    produce_numbers(client, stream, 2000)
    for attempt in range(3):  # a different moment of the poll each time
        _close_while_running(client, stream, concurrency, pause=0.1 * attempt)


def _close_while_running(
    client: ControlPlaneClient, stream: str, concurrency: int, pause: float
) -> None:
    handled = threading.Event()
    errors: list[BaseException] = []
    consumer = StreamConsumer(stream, f"g-{uuid.uuid4().hex[:6]}", client)

    def run() -> None:
        try:
            consumer.run(lambda _msg: handled.set(), concurrency=concurrency)
        except BaseException as exc:  # reported by the test, not by the thread
            errors.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert handled.wait(60), "run() handled nothing"
    time.sleep(pause)
    closer = threading.Thread(target=consumer.close, daemon=True)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "close() hung"
    runner.join(10)
    assert not runner.is_alive(), "run() went on after close()"
    assert not errors, errors


def test_unfinished_partitions_names_a_partition_read_only_in_part(
    control_plane: Any, stream_factory: Any
) -> None:
    """A reader that stopped before a partition's end (here held by its in-flight
    window, as a cluster that stops answering mid-read holds it) is told so: the dlq's
    list and replay report such partitions instead of a short read as complete."""
    client: ControlPlaneClient = control_plane.client()
    stream = stream_factory(cluster="local-a", lanes=("default",), partitions=1)
    with StreamProducer(stream, client) as producer:
        for i in range(20):  # one record batch each: a fetch of one batch holds one record
            producer.send(b"%d" % i, lane="dlq")
            producer.flush()
    one_batch_a_fetch = {
        "max.partition.fetch.bytes": 1,
        "fetch.max.bytes": 1000,
        "message.max.bytes": 1000,
    }
    with StreamConsumer(
        stream,
        f"g-{uuid.uuid4().hex[:6]}",
        client,
        lanes=["dlq"],
        read_only=True,
        max_in_flight=3,
        extra_config=one_batch_a_fetch,
    ) as reader:
        held: list[StreamMessage] = []
        deadline = time.monotonic() + 30
        while len(held) < 3 and time.monotonic() < deadline:
            held += reader.poll_batch(10, 0.5)
        held += reader.poll_batch(10, 1.0)  # paused at its window: nothing more comes
        assert 3 <= len(held) < 20, len(held)
        dlq_partition = [k for k in reader.assignment() if k.topic.startswith(f"sp.{stream}.dlq")]
        assert reader.unfinished_partitions() == dlq_partition
        for msg in held:
            msg.ack()
        read = len(held)
        deadline = time.monotonic() + 30
        while read < 20 and time.monotonic() < deadline:
            for msg in reader.poll_batch(10, 0.5):
                msg.ack()
                read += 1
        assert read == 20
        assert reader.unfinished_partitions() == []


def test_realtime_does_not_wait_behind_a_bulk_backlog(
    control_plane: Any, stream_factory: Any
) -> None:
    """Realtime records sent while the consumer works through a bulk backlog are handed
    out next, not after the backlog the client had already fetched (the lanes used to
    share one fetch queue per cluster: realtime came after every bulk record in it)."""
    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    backlog = 30_000
    with StreamProducer(stream, client) as producer:
        for i in range(backlog):
            producer.send(b"%d" % i, key=b"%d" % (i % 16), lane="bulk")
    handled: list[str] = []
    realtime_sent_at: int | None = None  # bulk records handled when realtime was sent
    with (
        StreamConsumer(stream, f"g-{uuid.uuid4().hex[:6]}", client) as consumer,
        StreamProducer(stream, client, lane="realtime") as realtime,
    ):
        deadline = time.monotonic() + 120
        while handled.count("realtime") < 20 and time.monotonic() < deadline:
            batch = consumer.poll_batch(500, 0.2)
            for msg in batch:
                handled.append(msg.lane)
                msg.ack()
            if batch:
                time.sleep(0.05)  # a slow application: the backlog takes seconds
            if realtime_sent_at is None and len(handled) >= 1_000:
                # The client has prefetched much of the backlog by now.
                for i in range(20):
                    realtime.send(b"rt-%d" % i)
                realtime.flush()
                realtime_sent_at = len(handled)
    assert realtime_sent_at is not None and handled.count("realtime") == 20
    last_realtime = len(handled) - handled[::-1].index("realtime")
    bulk_after_send = handled[realtime_sent_at:last_realtime].count("bulk")
    # What was buffered or handed out while they reached the client (~1,000 here), not
    # the rest of the backlog the client had prefetched (29,000 before).
    print(f"\n{bulk_after_send} bulk records handled between the realtime send and its last")
    assert bulk_after_send < backlog // 2, f"{bulk_after_send} bulk records went first"


def test_a_producer_bound_above_the_streams_is_refused(
    control_plane: Any, stream_factory: Any
) -> None:
    """A record above the stream's bound could never be dead-lettered (the dlq lane has
    the same bound): a consumer rejecting it had it handed back forever."""
    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=1, max_record_bytes=1000)
    with pytest.raises(ConfigError, match=r"above the bound of stream .* \(1000 bytes\)"):
        StreamProducer(stream, client, max_record_bytes=100_000).open()
    for bad in ("10", 0):
        with pytest.raises(ConfigError, match="max_record_bytes must be a positive int"):
            StreamProducer(stream, client, max_record_bytes=bad)  # type: ignore[arg-type]
    with StreamProducer(stream, client, max_record_bytes=500) as producer:
        with pytest.raises(RecordTooLarge):
            producer.send(b"x" * 600)
        with pytest.raises(TypeError, match="bytes, str or None, not int and NoneType"):
            producer.send(123)  # type: ignore[arg-type]
