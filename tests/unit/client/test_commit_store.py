"""CommitStore's life cycle, without a broker: a closed store makes no side producer."""

from __future__ import annotations

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
