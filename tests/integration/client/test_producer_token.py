"""A producer's API token, checked when it opens: a wrong one is an error before any
record is written (an exploratory run: `generate --token wrong` warned that the
heartbeat was refused, produced all 500 records unseen by the sealer, and exited 0)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import Unauthorized
from streamplane.kafka.clients import make_consumer
from streamplane.local.control_plane_process import ControlPlaneProcess
from tests.integration.controlplane.test_cli import one_error_line, run_cli

pytestmark = pytest.mark.integration


def records_in(control_plane: ControlPlaneProcess, stream: str) -> int:
    with control_plane.client() as cp:
        table = cp.routing(stream)
        clusters = {c["name"]: c["bootstrap"] for c in cp.list_clusters()}
    total = 0
    for seg in table.readable():
        consumer = make_consumer(clusters[seg.cluster], "sp-test-ends")
        try:
            for p in range(seg.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(seg.topic, p), 10)
                total += high - low
        finally:
            consumer.close()
    return total


def test_a_wrong_token_fails_the_producer_at_open(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    wrong = ControlPlaneClient(control_plane.url, token="wrong")
    with pytest.raises(Unauthorized, match="wrong API token"):
        StreamProducer(stream, control_plane=wrong).open()
    args = ["--stream", stream, "--token", "wrong", "--duration", "1", "--rate", "500"]
    line = one_error_line(run_cli(control_plane, "generate", *args))
    assert "wrong API token" in line
    assert records_in(control_plane, stream) == 0


def test_without_a_token_the_producer_writes_and_says_the_sealer_cannot_see_it(
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    anonymous = ControlPlaneClient(control_plane.url)
    with (
        caplog.at_level(logging.WARNING, logger="streamplane.client.producer_heartbeat"),
        StreamProducer(stream, control_plane=anonymous) as producer,
    ):
        producer.send(b"x")
    assert "refused" in caplog.text and "missing API token" in caplog.text
    assert records_in(control_plane, stream) == 1


def test_a_closed_producer_is_no_longer_live_at_once(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    """A closed producer stayed among the stream's live producers for
    ``producer_liveness`` (the sealer waited for it); it deregisters at close now."""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    with control_plane.client() as cp:
        producer = StreamProducer(stream, control_plane=cp).open()
        producer.send(b"x")
        assert producer.heartbeat.producer_id in cp.segments(stream)["producers"]
        producer.close()
        assert cp.segments(stream)["producers"] == {}
