"""CommitStore's life cycle, without a broker: a closed store makes no side producer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from streamplane.client import commit_store
from streamplane.client.commit_store import CommitStore
from streamplane.exceptions import KafkaError


def test_closed_store_sets_up_no_side_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []

    class NoAdmin:  # reaching for the cluster after close would be the bug
        def __init__(self, bootstrap: str) -> None:
            made.append(bootstrap)

        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"admin.{name} called on a closed store")

    monkeypatch.setattr(commit_store, "KafkaAdmin", NoAdmin)
    store = CommitStore(None, "127.0.0.1:1", "orders", "g")  # type: ignore[arg-type]
    assert store.side_topic == "sp.orders.__commitlog"
    store.close()
    with pytest.raises(KafkaError, match="closed"):
        store._producer()
    assert made == []
    store._set_up_side()  # the background set-up, run after close: quiet, nothing made
    assert made == []


def test_a_budget_read_while_the_cluster_is_down_is_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The brokers' offset.metadata.max.bytes unreadable at start: Kafka's default
    stands in, and the real value is read once the brokers answer (a cluster set lower
    than 4096 would otherwise refuse every larger commit for good)."""
    answers: list[str | None] = [None, None, "512"]  # None: the cluster does not answer
    reads: list[int] = []

    class Admin:
        def __init__(self, bootstrap: str) -> None:
            pass

        def metadata(self) -> SimpleNamespace:
            reads.append(1)
            if answers[0] is None:
                answers.pop(0)
                raise KafkaError("list metadata: Local: Broker transport failure")
            return SimpleNamespace(brokers={1: None})

        def describe_broker_configs(self, broker_id: int) -> dict[str, str]:
            value = answers[0]
            assert value is not None
            return {"offset.metadata.max.bytes": value}

    monkeypatch.setattr(commit_store, "KafkaAdmin", Admin)
    store = CommitStore(None, "127.0.0.1:1", "orders", "g")  # type: ignore[arg-type]
    assert store.metadata_budget() == 4095  # the fallback
    assert store.metadata_budget() == 4095 and len(reads) == 1  # not before the retry time
    store._budget_retry_at = 0.0  # the 30 s are over
    assert store.metadata_budget() == 4095 and len(reads) == 2  # read again: still down
    assert store._budget_retry_at > 0.0  # and the next try is 30 s away again
    store._budget_retry_at = 0.0
    assert store.metadata_budget() == 511  # the cluster answers: its real budget
    assert store.metadata_budget() == 511 and len(reads) == 3  # and it is not read again
