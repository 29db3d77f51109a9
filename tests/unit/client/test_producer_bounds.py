"""What the producer takes and how large its batches grow, without Kafka.

Found by an exploratory user run: on a stream created with a small record bound (its
topics take the bound + 64 KiB), the producer let a batch grow to 1 MiB; the broker
refused each such batch whole ("Message size too large": 5,000 records of 900 bytes on
a 1,000-byte stream, none written). And a few unclear errors: a record's size that
left out its headers, a ``send_batch`` that raised a raw ``TypeError`` part way
without counting what it had queued, a dict value passed the bound by its ``len``, a
closed producer that was opened by ``send`` (a heartbeat to the control plane) to say
it was closed.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import pytest

import streamplane.client.producer as producer_module
from streamplane.client.producer import StreamProducer
from streamplane.controlplane.service import topic_config
from streamplane.core.routing import new_routing_table
from streamplane.exceptions import ProduceError, RecordTooLarge
from tests.unit.client.harness import Unreachable
from tests.unit.client.test_producer_close import unanswered_producer


class _Captured:
    """Stands in for confluent-kafka's Producer: keeps the configuration it was made with."""

    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        _Captured.made.append(conf)

    def __len__(self) -> int:
        return 0


def _config_of(monkeypatch: pytest.MonkeyPatch, stream_bound: int, **kwargs: Any) -> dict[str, Any]:
    """The librdkafka configuration a producer of a stream with ``stream_bound`` makes."""
    monkeypatch.setattr(producer_module, "Producer", _Captured)
    _Captured.made = []
    producer = StreamProducer("s", None, **kwargs)  # type: ignore[arg-type]
    producer._bootstraps["local-a"] = "127.0.0.1:9"
    producer._stream_bound = stream_bound  # as ``open`` reads it from the stream
    if producer._max_record_bytes is None:
        producer._max_record_bytes = stream_bound
    producer._apply(new_routing_table("s", ["realtime"], "local-a", 1))
    (conf,) = _Captured.made
    return conf


@pytest.mark.parametrize("bound", [1, 1000, 4096, 60_000, 200_000, 1_000_000])
def test_a_batch_never_outgrows_what_the_streams_topics_take(
    monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    """Below the topics' max.message.bytes as the control plane sets it, with a margin
    (librdkafka counts a batch uncompressed; the broker checks it as sent)."""
    limit = int(topic_config({}, bound)["max.message.bytes"])
    conf = _config_of(monkeypatch, bound)
    assert conf["batch.size"] <= limit - 1024
    assert conf["batch.size"] <= limit - limit // 64
    assert conf["batch.size"] >= min(1 << 20, limit // 2)  # not shrunk for nothing


def test_a_producer_bound_below_the_streams_batches_to_the_streams_topics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conf = _config_of(monkeypatch, 1000, max_record_bytes=500)
    assert conf["batch.size"] <= int(topic_config({}, 1000)["max.message.bytes"]) - 1024


@pytest.mark.parametrize("bound", [1 << 20, 2 << 20, 64 << 20])
def test_batches_are_not_shrunk_at_the_default_bound_or_above(
    monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    """Throughput at the default bound (1 MiB: its topics take 1 MiB + 64 KiB) is kept:
    1 MiB batches, as before."""
    assert _config_of(monkeypatch, bound)["batch.size"] == 1 << 20


def test_larger_batches_asked_for_stop_below_the_topics_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = int(topic_config({}, 1 << 20)["max.message.bytes"])
    conf = _config_of(monkeypatch, 1 << 20, max_batch_bytes=4 << 20)
    assert limit // 2 < conf["batch.size"] <= limit - limit // 64


def test_the_control_plane_and_the_producer_share_the_topics_limit() -> None:
    from streamplane.core.routing import topic_max_message_bytes

    for bound in (1, 1000, 1 << 20, 1 << 30):
        limit = topic_max_message_bytes(bound)
        assert topic_config({}, bound)["max.message.bytes"] == str(limit)
        assert producer_module.batch_bytes(1 << 20, bound) < limit


def test_a_record_too_large_with_its_headers_counts_them() -> None:
    """It said "record of 1 bytes exceeds the producer's message.max.bytes"."""
    producer = unanswered_producer()
    with pytest.raises(
        RecordTooLarge,
        match=r"record of 2000002 bytes with its headers \(1 of key and value, 2000001 of "
        r"headers\) exceeds the producer's message.max.bytes of 1114112 bytes",
    ):
        producer.send(b"x", headers=[("h", b"y" * 2_000_000)])
    sent = producer.send_batch([(b"x", None, [("h", b"y" * 2_000_000)])])
    assert sent.too_large == [0]
    producer.close(0.1)  # nothing was queued


@pytest.mark.parametrize(
    ("value", "named"),
    [({"a": 1}, "dict"), (bytearray(b"xy"), "bytearray"), (123, "int"), ([1, 2], "list")],
)
def test_a_value_of_another_type_is_a_clear_type_error(value: Any, named: str) -> None:
    """A dict passed the bound by its ``len`` and failed in confluent-kafka ("a
    bytes-like object is required")."""
    producer = unanswered_producer()
    with pytest.raises(
        TypeError, match=f"^send: value and key are bytes, str or None, not {named} and NoneType$"
    ):
        producer.send(value)
    with pytest.raises(TypeError, match=f"not bytes and {named}$"):
        producer.send(b"v", key=value)
    assert producer._counts["sp.s14.realtime.e1"].sent == 0
    producer.close(0.1)


def test_send_batch_refuses_a_value_of_another_type_and_counts_what_it_queued() -> None:
    """It raised ``TypeError: object of type 'int' has no len()`` after queueing the
    records before it, which were not counted as sent."""
    producer = unanswered_producer()
    producer._max_record_bytes = 1000
    records: list[Any] = [
        (b"a", None, None),
        (b"y" * 2000, None, None),  # over the bound: not queued
        ("z", b"k", None),
        (5, None, None),
        (b"never", None, None),
    ]
    with pytest.raises(
        TypeError,
        match=r"^send_batch \(record 3; 2 records queued before it\): value and key are "
        r"bytes, str or None, not int and NoneType$",
    ):
        producer.send_batch(records)
    counts = producer._counts["sp.s14.realtime.e1"]
    assert counts.sent == 2
    sent = producer.send_batch([(b"b", "k", None), ("é" * 600, None, None)])
    assert sent.too_large == [1]  # 1,200 bytes of UTF-8
    assert counts.sent == 3
    with contextlib.suppress(ProduceError):  # its brokers never answer: 3 given up on
        producer.close(0.1)


def test_a_producer_closed_before_it_was_opened_is_not_opened_by_send() -> None:
    """``send`` opened it first (fetching the routing, sending a heartbeat), then
    raised "the producer is closed"."""
    control_plane = Unreachable()
    producer = StreamProducer("s", control_plane)  # type: ignore[arg-type]
    producer.close()
    for call in (
        lambda: producer.send(b"x"),
        lambda: producer.send_batch([(b"x", None, None)]),
        lambda: producer.active_topic(),
        producer.open,
    ):
        with pytest.raises(ProduceError, match="the producer is closed"):
            call()
    assert control_plane.calls == []
    assert producer._watcher._thread is None and producer.heartbeat._thread is None


def test_switched_at_is_the_first_routing_at_or_after_an_epoch() -> None:
    """Routing changes in quick succession (a failover at epoch 10, a seal at 11) can reach
    a producer as one table: it never writes with epoch 10 itself. Benchmarks and the main
    job looked up ``epoch_switch_times[10]`` and failed with a KeyError."""
    producer = StreamProducer("s", None)  # type: ignore[arg-type]
    producer.epoch_switch_times.update({1: 100.0, 9: 200.0, 11: 300.0})
    assert producer.switched_at(10) == 300.0
    assert producer.switched_at(9) == 200.0
    assert producer.switched_at(12) is None
