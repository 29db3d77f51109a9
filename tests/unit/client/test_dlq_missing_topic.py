"""A dlq partition whose topic is missing on a cluster that answers is told apart from
one whose cluster does not answer (an exploratory run: `dlq list` said
"sp.r9.dlq.e5[0] (the cluster does not answer)" of a topic that was missing)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import streamplane.client.dlq as dlq
from streamplane.client.dlq import list_dead_letters, replay_dead_letters
from streamplane.client.partition_state import PartitionKey
from streamplane.core.routing import SegmentState
from streamplane.exceptions import KafkaError
from tests.unit.client.test_dlq_replay import (
    DlqPartition,
    FakeClient,
    FakeConsumer,
    FakeProducer,
    dlq_segment,
)

GONE = PartitionKey("a", "sp.s.dlq.e5", 0)  # its topic is missing on a, which answers
SILENT = PartitionKey("b", "sp.s.dlq.e6", 0)  # b does not answer


class Admin:
    """End offsets as the fake clusters tell them: ``topics`` per cluster; a cluster
    in ``down`` raises."""

    topics: ClassVar[dict[str, dict[str, dict[int, int]]]] = {}
    down: ClassVar[set[str]] = set()

    def __init__(self, bootstrap: str) -> None:
        self.cluster = bootstrap

    def end_offsets(self, topic: str, timeout: float) -> dict[int, int]:
        if self.cluster in self.down:
            raise KafkaError(f"{self.cluster} does not answer")
        return self.topics.get(self.cluster, {}).get(topic, {})  # {}: no such topic


class Unfinished:
    """A listing's consumer that reads nothing and could not finish ``unread``."""

    def __init__(self, unread: list[PartitionKey]) -> None:
        self.unread = unread

    def __enter__(self) -> Unfinished:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def poll(self, timeout: float) -> None:
        return None

    def unfinished_partitions(self) -> list[PartitionKey]:
        return self.unread


@pytest.fixture
def clusters(monkeypatch: pytest.MonkeyPatch) -> Any:
    Admin.topics, Admin.down = {"a": {}}, {"b"}
    monkeypatch.setattr(dlq, "KafkaAdmin", Admin)
    return FakeClient(
        [
            dlq_segment("a", GONE.topic),
            dlq_segment("b", SILENT.topic, state=SegmentState.SEALED, sealed_end_offsets={0: 3}),
        ]
    )


def test_a_listing_says_which_unread_partitions_have_no_topic(
    monkeypatch: pytest.MonkeyPatch, clusters: Any
) -> None:
    monkeypatch.setattr(dlq, "StreamConsumer", lambda *a, **k: Unfinished([GONE, SILENT]))
    listing = list_dead_letters(clusters, "s", idle_s=0.1)
    assert listing.unread == [GONE, SILENT]
    assert listing.missing == {GONE}


def test_a_replay_says_that_the_topic_is_missing(
    monkeypatch: pytest.MonkeyPatch, clusters: Any
) -> None:
    monkeypatch.setattr(dlq, "take_over_legacy_progress", lambda *a, **k: frozenset())
    log = DlqPartition(0, cluster="a")
    monkeypatch.setattr(dlq, "StreamConsumer", lambda *a, **k: FakeConsumer(log))
    monkeypatch.setattr(dlq, "StreamProducer", lambda *a, **k: FakeProducer(log))
    client: Any = FakeClient([dlq_segment("a", GONE.topic), dlq_segment("b", SILENT.topic)])
    with pytest.raises(KafkaError) as raised:
        replay_dead_letters(client, "s", idle_s=0.1)
    assert str(raised.value) == (
        "replayed 0 records, but 1 of the dlq partitions on b could not be read: "
        "sp.s.dlq.e6[0] (their cluster does not answer, or another replay holds them); "
        "1 of the dlq partitions on a could not be read: sp.s.dlq.e5[0] (the topic is "
        "missing: the cluster answers without it): replay again"
    )
