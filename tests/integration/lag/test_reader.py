"""OffsetsReader against a real cluster: decoding commits, deletions, resuming."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from streamplane.core.commitlog import PartitionProgress, encode
from streamplane.lag.reader import CommitState, LogEnds, OffsetsReader
from streamplane.local.fleet import FleetDescriptor
from tests.integration.lag.conftest import commit, unique
from tests.waiting import wait_for


def _read_until(reader: OffsetsReader, key: tuple[str, str, int], offset: int) -> CommitState:
    def probe() -> CommitState | None:
        reader.poll(0.2)
        state = reader.commits().get(key)
        return state if state is not None and state.offset == offset else None

    return wait_for(f"commit {key} at {offset}", probe, 20.0)


def test_reads_decodes_and_resumes_from_the_snapshot(
    fleet: FleetDescriptor, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = fleet.bootstrap("local-a")
    topic = topic_factory("local-a", partitions=2)
    group, foreign = unique("g.sp"), unique("g.foreign")
    progress = PartitionProgress(
        low_watermark=3, commit_time_ms=1_700_000_000_000, low_watermark_timestamp_ms=1_699_000
    )
    commit(bootstrap, group, topic, 0, 3, encode(progress).metadata)
    commit(bootstrap, foreign, topic, 1, 5, "some other client")
    snapshot = tmp_path / "local-a.json"

    reader = OffsetsReader("local-a", bootstrap, snapshot_path=snapshot)
    try:
        assert reader.open() == []
        state = _read_until(reader, (group, topic, 0), 3)
        assert state.low_watermark_ts_ms == 1_699_000 and state.streamplane
        other = _read_until(reader, (foreign, topic, 1), 5)
        assert other.low_watermark_ts_ms is None and not other.streamplane
        wait_for(
            "the reader caught up",
            lambda: reader.poll(0.1) is not None and reader.status.caught_up,
            20.0,
        )
        cold = reader.status
        assert not cold.resumed_from_snapshot and cold.catch_up_s is not None
        assert reader.save_snapshot()
    finally:
        reader.close()

    commit(bootstrap, group, topic, 0, 4)  # after the snapshot
    again = OffsetsReader("local-a", bootstrap, snapshot_path=snapshot)
    try:
        replayed = again.open()
        assert {e.key for e in replayed} >= {(group, topic, 0), (foreign, topic, 1)}
        assert again.status.resumed_from_snapshot
        _read_until(again, (group, topic, 0), 4)
        wait_for(
            "the resumed reader caught up",
            lambda: again.poll(0.1) is not None and again.status.caught_up,
            20.0,
        )
        # Only what was committed since the snapshot is read again.
        assert again.status.records_read < max(cold.records_read, 2)
        print(
            f"\ncold read: {cold.records_read} records in {cold.catch_up_s:.3f}s; "
            f"resumed: {again.status.records_read} records in {again.status.catch_up_s:.3f}s"
        )
    finally:
        again.close()


def test_log_ends(fleet: FleetDescriptor, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("local-a", partitions=2)
    log_ends = LogEnds(fleet.bootstrap("local-a"))
    # A partition whose leader is not known yet (a topic just created) is left out and
    # asked again at the next poll: within a few polls both are there.

    def both() -> dict[tuple[str, int], int]:
        ends = log_ends.fetch([(topic, 0), (topic, 1), ("nope", 0)])
        return ends if len(ends) == 2 else {}

    ends = wait_for(f"the log ends of both partitions of {topic}", both, 10, every=0.2)
    assert ends == {(topic, 0): 0, (topic, 1): 0}
