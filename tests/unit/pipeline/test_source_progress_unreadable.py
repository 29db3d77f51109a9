"""startingOffsets=committed while the group's coordinator does not answer (its broker
is down): the partitions wait, and the log says so once per cause, and once more when
the group's progress can be read again. No Spark, no broker: stand-ins for the
driver's consumer and commit store."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from streamplane.exceptions import KafkaError
from streamplane.pipeline.planning import PartitionKey
from streamplane.pipeline.source import StreamplaneStreamReader
from tests.unit.pipeline.test_source_unavailable import (
    KEYS,
    SOURCE_LOG,
    TABLE,
    StandInConsumer,
    reader_with,
)


class StandInStore:
    """The group's commit store on one cluster: committed offsets, or an error."""

    def __init__(self, committed: dict[int, int]) -> None:
        self.committed = committed
        self.failing: KafkaError | None = None

    def load(self, tps: Sequence[tuple[str, int]], timeout_s: float = 30.0) -> dict[Any, Any]:
        if self.failing is not None:
            raise self.failing
        return {(t, p): (None, self.committed.get(p)) for t, p in tps}


def joined(reader: StreamplaneStreamReader) -> dict[PartitionKey, int]:
    return {i.key: i.join_offset for i in reader._partition_infos(TABLE, "committed")}


def test_an_unreadable_group_progress_is_told_once_per_cause_and_its_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = reader_with(StandInConsumer({0: 100, 1: 200, 2: 300}))
    store = StandInStore({0: 40, 1: 50, 2: 60})
    reader._stores["local-a"] = store  # type: ignore[assignment]
    timed_out = KafkaError("read committed offsets: Local: Timed out", code="_TIMED_OUT")
    not_coordinator = KafkaError(
        "read committed offsets: Broker: Not coordinator", code="NOT_COORDINATOR"
    )
    with caplog.at_level(logging.WARNING, logger=SOURCE_LOG):
        store.failing = timed_out
        for _ in range(5):
            assert joined(reader) == {}  # they wait: not joined at their beginning
        store.failing = not_coordinator
        for _ in range(3):
            assert joined(reader) == {}
        store.failing = None
        assert joined(reader) == {KEYS[0]: 40, KEYS[1]: 50, KEYS[2]: 60}
        assert joined(reader) == {KEYS[0]: 40, KEYS[1]: 50, KEYS[2]: 60}
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        unreadable(timed_out),
        unreadable(not_coordinator),
        "committed offsets of group g on local-a readable again: the waiting partitions join "
        "at the group's progress",
    ]


def unreadable(exc: KafkaError) -> str:
    return (
        f"committed offsets of group g on local-a unreadable ({exc}; its coordinator's broker "
        "may be down): the partitions first seen there wait, asked again every micro-batch, "
        "and join at the group's progress once it is read"
    )
