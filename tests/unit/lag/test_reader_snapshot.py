"""The reader's pure parts: snapshot round trip and commit metadata classification."""

from __future__ import annotations

import pytest

from streamplane.core.commitlog import PartitionProgress, encode
from streamplane.core.offsets_topic import OffsetCommit
from streamplane.exceptions import CodecError
from streamplane.lag.reader import CommitState, OffsetsSnapshot, commit_state


def _commit(metadata: str | None, offset: int = 10) -> OffsetCommit:
    return OffsetCommit("g", "t", 0, offset, None, metadata, 1_700_000_000_000, None, 3, None)


def test_snapshot_round_trip() -> None:
    snap = OffsetsSnapshot(
        "cluster-id",
        {0: 12, 7: 3},
        {
            ("g", "t", 0): CommitState(5, 1_000, 900, True),
            ("other.group", "sp.s.realtime.e1", 3): CommitState(7, 2_000, None, False),
        },
        saved_ms=42,
    )
    assert OffsetsSnapshot.from_json(snap.to_json()) == snap


@pytest.mark.parametrize(
    "text", ["", "{}", "[]", '{"version": 99}', '{"version": 1, "positions": {"x": 1}}']
)
def test_a_bad_snapshot_is_a_codec_error(text: str) -> None:
    with pytest.raises(CodecError):
        OffsetsSnapshot.from_json(text)


def test_streamplane_metadata_gives_the_low_watermark_timestamp() -> None:
    progress = PartitionProgress(
        low_watermark=10, commit_time_ms=1_700_000_000_000, low_watermark_timestamp_ms=1_699_999
    )
    state = commit_state(_commit(encode(progress).metadata))
    assert state == CommitState(10, 1_700_000_000_000, 1_699_999, True)


def test_caught_up_streamplane_metadata_has_no_timestamp() -> None:
    progress = PartitionProgress(low_watermark=10, commit_time_ms=1_700_000_000_000)
    assert commit_state(_commit(encode(progress).metadata)) == CommitState(
        10, 1_700_000_000_000, None, True
    )


@pytest.mark.parametrize("metadata", [None, "", "hello", "sp1:!!!!", "sp1:AA"])
def test_foreign_or_malformed_metadata_has_no_timestamp(metadata: str | None) -> None:
    state = commit_state(_commit(metadata))
    assert state.low_watermark_ts_ms is None
    assert state.streamplane is False
