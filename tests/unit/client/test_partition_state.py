from __future__ import annotations

import sys
import threading

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
        s.settle([o])
    p = s.progress(now_ms=5000)
    assert p.low_watermark == 3
    assert list(p.settled) == [5, 6, 9]
    assert p.low_watermark_timestamp_ms == 1003  # ingestion time of the record at offset 3
    assert s.base == 3


def test_caught_up_has_no_timestamp() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 4))
    for o in range(4):
        s.settle([o])
    p = s.progress(now_ms=5000)
    assert p.low_watermark == 4
    assert p.low_watermark_timestamp_ms is None


def test_gaps_in_offsets_are_settled() -> None:
    s = PartitionState(KEY, "realtime", 0)
    assert s.on_fetch(0, 1)
    assert s.on_fetch(5, 1)  # offsets 1..4 do not exist (compaction, markers)
    assert s.gaps_settled == 4  # counted, for partition_states()
    s.settle([0])
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
    assert s.nack([10]) == [3]


def test_duplicate_ack_is_ignored_and_rejected_marked() -> None:
    s = PartitionState(KEY, "bulk", 1)
    fetched(s, range(0, 3))
    assert s.settle([1], rejected=True) == 1
    assert s.settle([1]) == 0
    s.settle([0])
    p = s.progress(now_ms=1)
    assert p.low_watermark == 2
    assert s.unsettled() == 1


def test_queued_acks_apply_in_runs_out_of_order_and_once() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 10))
    for o in (9, 3, 4, 2, 0, 3, 7):  # out of order, one duplicate
        s.ack(o)
    assert s.in_flight == 10  # queued, not applied yet
    assert s.apply_acks() == 6
    assert s.acked == 6
    assert s.unsettled() == 4  # 1, 5, 6, 8
    assert list(s.settled) == [0, 2, 3, 4, 7, 9]
    s.ack(9)  # already settled: not counted twice
    assert s.apply_acks() == 0
    p = s.progress(now_ms=1)
    assert p.low_watermark == 1
    assert p.low_watermark_timestamp_ms == 1001


def test_acks_from_other_threads_are_never_lost_while_applied() -> None:
    """Handler threads ack while the consuming thread folds the queue: every ack lands
    exactly once (the queue is taken by slice and del, never swapped for a new list)."""
    s = PartitionState(KEY, "realtime", 0)
    total = 40_000
    fetched(s, range(total))

    def ack_every_fourth(first: int) -> None:
        for o in range(first, total, 4):
            s.ack(o)

    threads = [threading.Thread(target=ack_every_fourth, args=(k,)) for k in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for t in threads:
            t.start()
        applied = 0
        while any(t.is_alive() for t in threads):
            applied += s.apply_acks()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    applied += s.apply_acks()
    assert applied == total
    assert s.unsettled() == 0
    assert list(s.settled.ranges()) == [(0, total)]


def test_progress_applies_queued_acks_and_clears_retry_counts() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 3))
    s.nack([1])
    s.ack(0)
    s.ack_retry(1)  # its redelivery
    s.ack(2)
    p = s.progress(now_ms=1)
    assert p.low_watermark == 3
    assert p.retries == {}
    assert s.attempts == {}
    assert s.unsettled() == 0


def test_ingestion_times_follow_the_in_flight_window_past_a_stuck_record() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 50_000))
    for o in range(1, 50_000):  # offset 0 is stuck (retrying); the rest flow past it
        s.ack(o)
    p = s.progress(now_ms=1)
    assert p.low_watermark == 0
    assert p.low_watermark_timestamp_ms == 1000
    assert s.unsettled() == 1
    assert len(s.times) <= 2 * s.unsettled() + 1024  # not every fetched record
    fetched(s, range(50_000, 50_010))
    s.ack(0)
    p = s.progress(now_ms=2)
    assert p.low_watermark == 50_000
    assert p.low_watermark_timestamp_ms == 51_000
    assert s.times.offsets() == list(range(50_000, 50_010))


def test_acks_forget_the_retry_counts_of_acked_records_only() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 10))
    for o in (2, 5, 7):
        s.nack([o])
    for o in (0, 1, 3):
        s.ack(o)
    for o in (2, 7):  # redeliveries
        s.ack_retry(o)
    assert s.apply_acks() == 5
    assert s.attempts == {5: 1}  # still retrying: its count is kept
    assert s.parked == {5}


def test_a_parked_record_holds_the_low_watermark_while_acks_fold_past_it() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 10))
    assert s.nack([4]) == [1]
    for o in range(10):
        if o != 4:
            s.ack(o)
    assert s.apply_acks() == 9  # the parked record is not counted as settled
    assert list(s.settled.ranges()) == [(0, 10)]  # one run: no split at the retry
    assert s.unsettled() == 1 and s.acked == 9
    p = s.progress(now_ms=1)
    assert p.low_watermark == 4
    assert list(p.settled) == [5, 6, 7, 8, 9]
    assert p.retries == {4: 1}
    assert p.low_watermark_timestamp_ms == 1004
    assert s.nack([4]) == [2]  # a second attempt: parked once
    assert s.parking == []
    assert s.settle([4], rejected=True) == 1  # dead-lettered
    assert s.settle([4]) == 0
    assert s.unsettled() == 0 and s.parked == set()
    p = s.progress(now_ms=2)
    assert p.low_watermark == 10 and p.retries == {}


def test_a_retry_acked_leaves_the_parked_set() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 3))
    s.nack([1])
    s.ack(0)
    s.ack(2)
    assert s.apply_acks() == 2
    s.ack_retry(1)  # the redelivery succeeded
    assert s.apply_acks() == 1
    assert s.acked == 3 and s.unsettled() == 0
    assert s.parked == set() and s.attempts == {}
    assert s.progress(now_ms=1).low_watermark == 3


def test_settling_a_parked_record_before_its_parking_is_folded() -> None:
    """A dead letter's delivery report can arrive before the next apply_acks."""
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 4))
    s.nack([2])
    assert s.settle([2], rejected=True) == 1
    for o in (0, 1, 3):
        s.ack(o)
    assert s.apply_acks() == 3
    assert s.unsettled() == 0
    p = s.progress(now_ms=1)
    assert p.low_watermark == 4
    assert list(s.rejected) == []  # below the low watermark now


def test_a_parked_stuck_record_keeps_its_ingestion_time_when_trimmed() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 50_000))
    s.nack([0])
    for o in range(1, 50_000):
        s.ack(o)
    p = s.progress(now_ms=1)
    assert p.low_watermark == 0
    assert p.low_watermark_timestamp_ms == 1000
    assert len(s.times) <= 2 * s.unsettled() + 1024
    p = s.progress(now_ms=2)  # trimmed again: the parked record's time is still known
    assert p.low_watermark_timestamp_ms == 1000


def test_nack_counts_a_batch_in_order_and_parks_each_offset_once() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 10))
    assert s.nack([7, 2]) == [1, 1]
    assert s.nack([2, 5, 7]) == [2, 1, 2]  # retries nacked again, and a first nack
    assert s.parked == {2, 5, 7}
    assert sorted(s.parking) == [2, 5, 7]  # each parked once
    assert s.attempts == {2: 2, 5: 1, 7: 2}


def test_settle_a_batch_of_dead_letters() -> None:
    """Parked (retried) and never-parked (rejected at once) records, a duplicate and an
    offset below the low watermark, settled in one call."""
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 10))
    for o in (0, 1):
        s.ack(o)
    s.nack([3, 6])
    assert s.progress(now_ms=1).low_watermark == 2
    assert s.settle([6, 3, 8, 6, 1], rejected=True) == 3  # 1 is below the watermark
    assert s.settle([8], rejected=True) == 0  # settled already
    assert s.parked == set() and s.attempts == {}
    assert s.unsettled() == 10 - 2 - 3
    for o in (2, 4, 5, 7, 9):
        s.ack(o)
    assert s.progress(now_ms=2).low_watermark == 10
    assert s.unsettled() == 0


def test_a_restored_retry_count_is_forgotten_once_its_record_is_acked() -> None:
    committed = PartitionProgress(low_watermark=10, commit_time_ms=1, retries={10: 2, 12: 1})
    s = PartitionState(KEY, "realtime", 0)
    s.restore(committed, 10)
    fetched(s, range(10, 14))
    for o in (10, 11, 13):  # first deliveries here: acked through the plain queue
        s.ack(o)
    p = s.progress(now_ms=2)
    assert p.low_watermark == 12 and p.retries == {12: 1}
    assert s.attempts == {12: 1}


def test_a_record_parked_for_its_dead_letter_does_not_split_the_acks_around_it() -> None:
    s = PartitionState(KEY, "realtime", 0)
    fetched(s, range(0, 6))
    s.park([2])  # rejected on its first delivery: no attempt counted
    s.park([2])
    for o in (0, 1, 3, 4, 5):
        s.ack(o)
    assert s.apply_acks() == 5
    assert list(s.settled.ranges()) == [(0, 6)]  # one run
    assert s.parked == {2} and s.attempts == {}
    assert s.unsettled() == 1
    assert s.progress(now_ms=1).low_watermark == 2  # held until its dead letter is in
    assert s.settle([2], rejected=True) == 1
    assert s.unsettled() == 0 and s.parked == set()
    assert s.progress(now_ms=2).low_watermark == 6
