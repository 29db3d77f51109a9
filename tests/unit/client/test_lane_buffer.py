"""A lane's buffer: fetched runs and lists of retries that came due together."""

from __future__ import annotations

from typing import Any, cast

from streamplane.client.consumer import StreamMessage, _LaneBuffer, _Run
from streamplane.client.partition_state import PartitionKey, PartitionState

KEPT = PartitionKey("local-a", "sp.s.realtime.e1", 0)
GIVEN_UP = PartitionKey("local-a", "sp.s.realtime.e1", 1)


def run_of(key: PartitionKey, offsets: range) -> _Run:
    state = PartitionState(key, "realtime", 0)
    raw: list[Any] = [object() for _ in offsets]
    return _Run(cast(Any, None), state, raw, 0, offsets.start)


def test_drop_forgets_given_up_partitions_in_runs_and_in_retry_lists() -> None:
    kept, given_up = run_of(KEPT, range(0, 5)), run_of(GIVEN_UP, range(0, 3))
    buf = _LaneBuffer()
    buf.add_run(kept)
    buf.add_run(given_up)
    retries = [
        StreamMessage(kept, kept.messages[0], 0),
        StreamMessage(given_up, given_up.messages[1], 1),
        StreamMessage(kept, kept.messages[2], 2),
    ]
    buf.add_retries(retries)
    only_given_up = [StreamMessage(given_up, given_up.messages[2], 2)]
    buf.add_retries(only_given_up)
    assert buf.size == 5 + 3 + 3 + 1

    buf.drop({GIVEN_UP})

    assert buf.size == 5 + 2
    assert len(buf.entries) == 2  # the list left empty is gone
    run, left = buf.entries
    assert run is kept
    assert isinstance(left, list) and [m.offset for m in left] == [0, 2]
