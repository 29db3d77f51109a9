from __future__ import annotations

from streamplane.client.partition_state import PartitionKey, PartitionState
from streamplane.core.commitlog import PartitionProgress, decode, encode
from streamplane.core.rangeset import RangeSet

KEY = PartitionKey("local-a", "sp.s.realtime.e1", 0)


def fetched(state: PartitionState, offsets: range, ts: int = 1000) -> list[int]:
    return [o for o in offsets if state.on_fetch(o, ts + o)]


def test_low_watermark_advances_over_contiguous_acks_only() -> None:
    s = PartitionState(KEY, "realtime", 0)
    assert fetched(s, range(0, 10)) == list(range(10))
    for o in (0, 1, 2, 5, 6, 9):
        s.settle(o)
    p = s.progress(now_ms=5000)
    assert p.low_watermark == 3
    assert list(p.settled) == [5, 6, 9]
    assert p.low_watermark_timestamp_ms == 1003  # ingestion time of the record at offset 3
    assert s.base == 3


def test_caught_up_has_no_timestamp() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 4))
    for o in range(4):
        s.settle(o)
    p = s.progress(now_ms=5000)
    assert p.low_watermark == 4
    assert p.low_watermark_timestamp_ms is None


def test_gaps_in_offsets_are_settled() -> None:
    s = PartitionState(KEY, "realtime", 0)
    assert s.on_fetch(0, 1)
    assert s.on_fetch(5, 1)  # offsets 1..4 do not exist (compaction, markers)
    s.settle(0)
    assert s.progress(now_ms=1).low_watermark == 5


def test_restore_skips_settled_and_keeps_retries() -> None:
    committed = PartitionProgress(
        low_watermark=10,
        commit_time_ms=1,
        settled=RangeSet([(12, 15)]),
        retries={10: 2},
    )
    decoded = decode(encode(committed).metadata).progress
    s = PartitionState(KEY, "realtime", 0)
    s.restore(decoded, 10)
    delivered = fetched(s, range(10, 17))
    assert delivered == [10, 11, 15, 16]
    assert s.restored_skips == 3
    assert s.attempts[10] == 2
    assert s.bump_attempts(10) == 3


def test_duplicate_ack_is_ignored_and_rejected_marked() -> None:
    s = PartitionState(KEY, "bulk", 1)
    fetched(s, range(0, 3))
    assert s.settle(1, rejected=True)
    assert not s.settle(1)
    s.settle(0)
    p = s.progress(now_ms=1)
    assert p.low_watermark == 2
    assert s.unsettled() == 1
