"""The commit-log codec: table tests, properties, garbage, and golden vectors.

Golden vectors live in ``golden/commitlog/*.json``: an input state and the exact
metadata (or blob) it encodes to. They pin the sp1 wire format: if one fails, the
format drifted. Change them only together with a new format version.
"""

from __future__ import annotations

import base64
import json
import random
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from streamplane.core.commitlog import (
    DEFAULT_MAX_BYTES,
    FULL_MAGIC,
    HEADER_SIZE,
    METADATA_PREFIX,
    OFFSET_LIMIT,
    TIMESTAMP_MAX_MS,
    CommitHeader,
    DecodedCommit,
    EncodedProgress,
    PartitionProgress,
    SpillPointer,
    decode,
    decode_full,
    encode,
    encode_complete,
    encode_full,
    encode_spill_pointer,
    is_streamplane_metadata,
    peek_header,
    peek_low_watermark_timestamp,
)
from streamplane.core.rangeset import RangeSet
from streamplane.exceptions import CodecError, ConfigError

GOLDEN_DIR = Path(__file__).parent / "golden" / "commitlog"
T0 = 1_700_000_000_000  # a commit time, ms

SETTINGS = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


def progress(
    lw: int,
    settled: Sequence[tuple[int, int]] = (),
    *,
    rejected: Sequence[tuple[int, int]] = (),
    retries: dict[int, int] | None = None,
    ts: int | None = None,
    commit: int = T0,
) -> PartitionProgress:
    return PartitionProgress(
        low_watermark=lw,
        commit_time_ms=commit,
        settled=RangeSet(settled),
        rejected=RangeSet(rejected),
        retries=retries or {},
        low_watermark_timestamp_ms=ts,
    )


# --------------------------------------------------------------------------------------
# JSON form of a progress (golden files)
# --------------------------------------------------------------------------------------


def progress_to_json(p: PartitionProgress) -> dict[str, Any]:
    return {
        "low_watermark": p.low_watermark,
        "commit_time_ms": p.commit_time_ms,
        "low_watermark_timestamp_ms": p.low_watermark_timestamp_ms,
        "settled": [list(r) for r in p.settled.ranges()],
        "rejected": [list(r) for r in p.rejected.ranges()],
        "retries": [[o, a] for o, a in p.retries.items()],
    }


def progress_from_json(d: dict[str, Any]) -> PartitionProgress:
    return PartitionProgress(
        low_watermark=d["low_watermark"],
        commit_time_ms=d["commit_time_ms"],
        low_watermark_timestamp_ms=d["low_watermark_timestamp_ms"],
        settled=RangeSet((s, e) for s, e in d["settled"]),
        rejected=RangeSet((s, e) for s, e in d["rejected"]),
        retries={o: a for o, a in d["retries"]},
    )


# --------------------------------------------------------------------------------------
# Table tests
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "p",
    [
        progress(0),
        progress(42, ts=T0 - 5_000),
        progress(1000, [(1001, 1005), (1007, 1008)], rejected=[(1007, 1008)], retries={1000: 3}),
        progress(7, [(9, 10)], retries={7: 1, 8: 250, 10: 2}, ts=-1),
        progress(2**62, [(2**62 + 1, 2**62 + 4000), (2**62 + 9000, 2**62 + 9001)]),
        progress(
            OFFSET_LIMIT - 3, [(OFFSET_LIMIT - 1, OFFSET_LIMIT)], retries={OFFSET_LIMIT - 2: 9}
        ),
        progress(5, ts=TIMESTAMP_MAX_MS, commit=-(2**47)),
        progress(10, [(11 + 2 * i, 12 + 2 * i) for i in range(500)]),  # bitset wins
        progress(10, [(20 + 1000 * i, 520 + 1000 * i) for i in range(50)]),  # runs win
    ],
    ids=[
        "empty",
        "caught-up-ts",
        "stuck",
        "retries-around",
        "big-offsets",
        "int64-edge",
        "ts-edges",
        "alternating",
        "sparse-runs",
    ],
)
def test_roundtrip_table(p: PartitionProgress) -> None:
    result = encode(p)
    assert result.fits and not result.truncated and result.horizon is None
    assert result.size == len(result.metadata) == result.required_bytes
    assert result.metadata.isascii() and result.metadata.startswith(METADATA_PREFIX)
    decoded = decode(result.metadata)
    assert decoded.progress == p
    assert decoded.is_streamplane and decoded.format_version == 1
    assert not decoded.truncated and decoded.spill is None
    assert peek_low_watermark_timestamp(result.metadata) == p.low_watermark_timestamp_ms
    header = peek_header(result.metadata)
    assert header is not None and header.commit_time_ms == p.commit_time_ms
    assert decode_full(encode_full(p)) == p


def test_caught_up_metadata_is_tiny() -> None:
    result = encode(progress(123_456_789, ts=T0 - 10))
    assert result.size <= 40


@pytest.mark.parametrize(
    ("base", "settled", "rejected", "retries", "expected"),
    [
        # nothing settled: the low watermark stays at the base
        (10, [], [], {}, progress(10)),
        # the contiguous prefix advances it; state below it goes
        (10, [(5, 12), (13, 15)], [], {12: 2, 3: 1}, progress(12, [(13, 15)], retries={12: 2})),
        # rejected offsets are settled too, and the mark is kept above the watermark
        (10, [(10, 11)], [(11, 12), (14, 15)], {}, progress(12, [(14, 15)], rejected=[(14, 15)])),
        # retry counts for settled offsets or non-positive counts are dropped
        (0, [(2, 3)], [], {2: 4, 1: 0, 5: 2}, progress(0, [(2, 3)], retries={5: 2})),
        # all settled: caught up, the watermark is one past the top
        (0, [(0, 100)], [(50, 51)], {}, progress(100)),
    ],
)
def test_from_settled(
    base: int,
    settled: list[tuple[int, int]],
    rejected: list[tuple[int, int]],
    retries: dict[int, int],
    expected: PartitionProgress,
) -> None:
    live = RangeSet(settled)
    got = PartitionProgress.from_settled(
        base, live, commit_time_ms=T0, rejected=RangeSet(rejected), retries=retries
    )
    assert got == expected
    assert live == RangeSet(settled)  # the live state is not touched


def test_from_settled_timestamps() -> None:
    stamps = {12: T0 - 700, 13: -1}
    got = PartitionProgress.from_settled(
        10, RangeSet([(10, 12)]), commit_time_ms=T0, timestamp_for=stamps.get
    )
    assert got.low_watermark == 12 and got.low_watermark_timestamp_ms == T0 - 700
    got = PartitionProgress.from_settled(
        10, RangeSet([(10, 13)]), commit_time_ms=T0, timestamp_for=stamps.get
    )
    assert got.low_watermark_timestamp_ms is None  # Kafka's -1: unknown
    got = PartitionProgress.from_settled(
        0, RangeSet(), commit_time_ms=2**60, timestamp_for=lambda _: 2**60
    )
    assert got.low_watermark_timestamp_ms == TIMESTAMP_MAX_MS  # clamped, never stalls
    assert got.commit_time_ms == TIMESTAMP_MAX_MS


def test_progress_helpers() -> None:
    p = progress(10, [(12, 14)], retries={10: 2})
    assert p.is_settled(9) and not p.is_settled(10) and p.is_settled(12)
    assert not p.is_settled(14)
    assert p.attempts(10) == 2 and p.attempts(11) == 0


def test_progress_owns_its_sets() -> None:
    live = RangeSet([(5, 6)])
    p = PartitionProgress(low_watermark=0, commit_time_ms=T0, settled=live)
    live.add(9)
    assert 9 not in p.settled


@pytest.mark.parametrize(
    "make",
    [
        lambda: progress(-1),
        lambda: progress(OFFSET_LIMIT),
        lambda: progress(10, [(10, 12)]),  # the low watermark itself cannot be settled
        lambda: progress(10, [(5, 7)]),
        lambda: progress(10, [(11, 12)], rejected=[(12, 13)]),  # rejected but not settled
        lambda: progress(10, [(11, 12)], retries={11: 1}),  # retry count for a settled one
        lambda: progress(10, retries={9: 1}),
        lambda: progress(10, retries={12: 0}),
        lambda: progress(10, ts=2**47),
        lambda: progress(10, commit=-(2**47) - 1),
        lambda: progress(OFFSET_LIMIT - 2, [(OFFSET_LIMIT - 1, OFFSET_LIMIT + 1)]),
        lambda: SpillPointer(partition=-1, offset=0, checksum=b"\0" * 8),
        lambda: SpillPointer(partition=0, offset=-1, checksum=b"\0" * 8),
        lambda: SpillPointer(partition=0, offset=0, checksum=b"\0" * 4),
        lambda: PartitionProgress.from_settled(-1, RangeSet(), commit_time_ms=T0),
    ],
)
def test_invalid_states(make: Callable[[], object]) -> None:
    with pytest.raises(ConfigError):
        make()


def test_budget_too_small() -> None:
    with pytest.raises(ConfigError):
        encode(progress(5), max_bytes=10)
    with pytest.raises(ConfigError):
        encode(progress(5), max_bytes=0)


# --------------------------------------------------------------------------------------
# Overflow: truncation and spill
# --------------------------------------------------------------------------------------


def scattered(lw: int, n: int, max_gap: int = 3) -> PartitionProgress:
    """Random short runs above a stuck record (hardly compressible), with some retries."""
    rng = random.Random(n)
    settled = []
    position = lw + 2
    for _ in range(n):
        start = position + rng.randrange(1, max_gap + 1)
        position = start + rng.randrange(1, 4)
        settled.append((start, position))
    retries = {lw: 4, lw + 2: 1}
    return progress(lw, settled, rejected=settled[::7], retries=retries, ts=T0 - 60_000)


def assert_prefix_of(decoded: DecodedCommit, original: PartitionProgress) -> None:
    """A truncated decode keeps exactly the state below its horizon, nothing more."""
    got = decoded.progress
    assert got is not None and decoded.truncated and decoded.horizon is not None
    h = decoded.horizon
    assert got.low_watermark == original.low_watermark
    assert got.low_watermark_timestamp_ms == original.low_watermark_timestamp_ms
    assert got.commit_time_ms == original.commit_time_ms
    expected_settled = original.settled.copy()
    expected_rejected = original.rejected.copy()
    for s in (expected_settled, expected_rejected):
        for x in [x for x in s if x >= h]:
            s.discard(x)
    assert got.settled == expected_settled
    assert got.rejected == expected_rejected
    assert got.settled.issubset(original.settled)  # never claims an unsettled offset
    assert dict(got.retries) == {o: a for o, a in original.retries.items() if o < h}
    assert decoded.dropped_settled == len(original.settled) - len(got.settled)
    assert decoded.dropped_retries == len(original.retries) - len(got.retries)


def test_truncation_keeps_the_bottom() -> None:
    p = scattered(5_000, 3_000, max_gap=200)  # 3,000 ranges too far apart for a bitset
    result = encode(p)
    assert result.truncated and not result.fits
    assert result.size <= DEFAULT_MAX_BYTES < result.required_bytes
    assert result.dropped_settled > 0
    decoded = decode(result.metadata)
    assert decoded.horizon == result.horizon
    assert decoded.dropped_settled == result.dropped_settled
    assert decoded.dropped_retries == result.dropped_retries
    assert_prefix_of(decoded, p)
    assert decoded.progress is not None and len(decoded.progress.settled) > 1000
    # the lag monitor still finds the timestamps
    assert peek_low_watermark_timestamp(result.metadata) == T0 - 60_000
    header = peek_header(result.metadata)
    assert header is not None and header.truncated and header.commit_time_ms == T0


def test_minimal_budget_keeps_only_the_watermark() -> None:
    p = scattered(9, 50)
    result = encode(p, max_bytes=60)
    assert result.truncated and result.size <= 60
    decoded = decode(result.metadata)
    assert_prefix_of(decoded, p)
    assert decoded.progress is not None
    assert peek_low_watermark_timestamp(result.metadata) == T0 - 60_000


def test_spill_pointer_roundtrip() -> None:
    p = scattered(5_000, 3_000, max_gap=200)
    blob = encode_full(p)
    assert blob.startswith(FULL_MAGIC)
    pointer = SpillPointer.for_blob(partition=7, offset=123_456, blob=blob)
    result = encode_spill_pointer(p, pointer)
    assert result.truncated and result.size <= DEFAULT_MAX_BYTES
    decoded = decode(result.metadata)
    assert decoded.spill == pointer and decoded.spill.matches(blob)
    assert not decoded.spill.matches(blob + b"x")
    assert_prefix_of(decoded, p)
    assert decode_full(blob) == p
    header = peek_header(result.metadata)
    assert header is not None and header.spilled
    # a small state rides complete alongside the pointer
    small = progress(3, [(5, 6)], ts=T0)
    result = encode_spill_pointer(small, SpillPointer.for_blob(0, 0, encode_full(small)))
    assert result.fits
    decoded = decode(result.metadata)
    assert decoded.progress == small and decoded.spill is not None and not decoded.truncated


def test_full_blob_rejects_partial_forms_and_garbage() -> None:
    p = progress(3, [(5, 6)])
    blob = encode_full(p)
    with pytest.raises(CodecError):
        decode_full(b"XXXX" + blob[4:])
    with pytest.raises(CodecError):
        decode_full(blob[:-1])
    # a truncated metadata frame relabelled as a full blob is refused
    frame = base64.urlsafe_b64decode(_pad(encode(scattered(9, 50), max_bytes=80).metadata[4:]))
    with pytest.raises(CodecError):
        decode_full(FULL_MAGIC + frame)


def test_full_blob_bounded_inflation() -> None:
    p = progress(0, [(1 + 2 * i, 2 + 2 * i) for i in range(100_000)])
    blob = encode_full(p)
    assert len(blob) < 1_000
    with pytest.raises(CodecError):
        decode_full(blob, max_body_bytes=1_000)
    assert decode_full(blob) == p


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------


@st.composite
def progress_states(draw: st.DrawFn, max_ranges: int = 60) -> PartitionProgress:
    lw = draw(st.one_of(st.integers(0, 2_000), st.integers(0, 2**62)))
    small = st.integers(0, 4)
    gap = draw(st.sampled_from([small, st.integers(0, 200), st.integers(0, 10**9)]))
    length = draw(st.sampled_from([st.integers(1, 3), st.integers(1, 5_000)]))
    pairs = draw(st.lists(st.tuples(gap, length), max_size=max_ranges))
    settled = RangeSet()
    position = lw + 1
    for g, n in pairs:
        start = position + g
        if start + n > OFFSET_LIMIT:
            break
        settled.add_range(start, start + n)
        position = start + n  # may touch the next range: RangeSet merges
    rejected = RangeSet()
    for start, end in settled.ranges():
        if draw(st.integers(0, 3)) == 0:
            a = draw(st.integers(start, end - 1))
            rejected.add_range(a, draw(st.integers(a + 1, end)))
    top = min(position + 10, OFFSET_LIMIT)
    retry_offsets = draw(
        st.lists(st.one_of(st.just(lw), st.integers(lw, top - 1)), max_size=30, unique=True)
    )
    retries = {o: draw(st.integers(1, 100_000)) for o in retry_offsets if o not in settled}
    timestamp = st.integers(-(2**47), 2**47 - 1)
    return PartitionProgress(
        low_watermark=lw,
        commit_time_ms=draw(st.one_of(st.just(T0), timestamp)),
        settled=settled,
        rejected=rejected,
        retries=retries,
        low_watermark_timestamp_ms=draw(st.one_of(st.none(), st.just(T0 - 1), timestamp)),
    )


@SETTINGS
@given(progress_states())
def test_property_roundtrip(p: PartitionProgress) -> None:
    result = encode(p, max_bytes=1 << 20)
    assert result.fits
    assert result.metadata.isascii()
    assert decode(result.metadata).progress == p
    assert decode_full(encode_full(p)) == p
    assert peek_low_watermark_timestamp(result.metadata) == p.low_watermark_timestamp_ms


@SETTINGS
@given(progress_states(max_ranges=200), st.integers(128, 700), st.booleans())
def test_property_budget_is_never_exceeded(p: PartitionProgress, budget: int, spill: bool) -> None:
    if spill:
        pointer = SpillPointer.for_blob(3, 2**40, encode_full(p))
        result = encode_spill_pointer(p, pointer, max_bytes=budget)
    else:
        result = encode(p, max_bytes=budget)
    assert result.size <= budget
    decoded = decode(result.metadata)
    assert (decoded.spill is not None) is spill
    assert decoded.truncated is result.truncated
    if result.truncated:
        assert_prefix_of(decoded, p)
        assert result.required_bytes > budget
    else:
        assert decoded.progress == p
    header = peek_header(result.metadata)
    assert header is not None
    assert header.low_watermark_timestamp_ms == p.low_watermark_timestamp_ms
    assert header.commit_time_ms == p.commit_time_ms


@SETTINGS
@given(progress_states(max_ranges=200), st.integers(128, 2000))
def test_property_encode_complete_is_encode_when_it_fits(p: PartitionProgress, budget: int) -> None:
    """``encode_complete`` gives what ``encode`` gives when the complete state fits the
    budget, and None (no truncated form) when it does not."""
    complete = encode_complete(p, max_bytes=budget)
    full = encode(p, max_bytes=budget)
    if full.truncated:
        assert complete is None
    else:
        assert complete == full


@SETTINGS
@given(st.text(max_size=80))
def test_property_foreign_or_codec_error(text: str) -> None:
    try:
        decoded = decode(text)
    except CodecError:
        assert is_streamplane_metadata(text)
        return
    if not is_streamplane_metadata(text):
        assert decoded.progress is None and peek_header(text) is None


@SETTINGS
@given(st.binary(max_size=200))
def test_property_random_frames_never_crash(payload: bytes) -> None:
    # random bytes in a frame whose check is right: only the body parser stands guard
    for flags in (0x00, 0x01, 0x02, 0x04, 0x0E):
        frame = _frame_with_check(bytes([flags]) + bytes(12), payload)
        try:
            decoded = decode(METADATA_PREFIX + _b64(frame))
        except CodecError:
            continue
        assert decoded.progress is not None


@SETTINGS
@given(progress_states(max_ranges=20), st.data())
def test_property_corruption_is_detected(p: PartitionProgress, data: st.DataObject) -> None:
    metadata = encode(p).metadata
    i = data.draw(st.integers(len(METADATA_PREFIX), len(metadata) - 1))
    replacement = data.draw(st.sampled_from("AQgw_-9z"))
    assume(metadata[i] != replacement)
    corrupted = metadata[:i] + replacement + metadata[i + 1 :]
    try:
        decoded = decode(corrupted)
    except CodecError:
        return
    # a 16-bit check lets through about 1 in 65,536; then it must still be valid state
    assert decoded.progress is not None


# --------------------------------------------------------------------------------------
# Garbage and foreign metadata
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "metadata",
    [None, "", "hello", "AAECAw==", "{'json': 1}", "s", "sp", "sp1", "SP1:AAAA", " sp1:AAAA"],
)
def test_foreign_metadata(metadata: str | None) -> None:
    assert not is_streamplane_metadata(metadata)
    decoded = decode(metadata)
    assert decoded.progress is None and not decoded.is_streamplane
    assert peek_header(metadata) is None
    assert peek_low_watermark_timestamp(metadata) is None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _pad(text: str) -> str:
    return text + "=" * (-len(text) % 4)


def _frame_with_check(head13: bytes, payload: bytes) -> bytes:
    check = zlib.crc32(payload, zlib.crc32(head13)) & 0xFFFF
    return head13 + check.to_bytes(2, "big") + payload


GOOD = encode(progress(10, [(12, 14)], retries={10: 2}, ts=T0 - 1)).metadata
GOOD_FRAME = base64.urlsafe_b64decode(_pad(GOOD[len(METADATA_PREFIX) :]))


def _zstd(body: bytes) -> bytes:
    params = zstandard.ZstdCompressionParameters.from_level(
        3, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_content_size=False
    )
    result: bytes = zstandard.ZstdCompressor(compression_params=params).compress(body)
    return result


@pytest.mark.parametrize(
    "metadata",
    [
        "sp1:",
        "sp1:A",
        "sp1:AAAA",
        "sp1:" + "A" * 20,  # header only
        "sp1:!!!!" + GOOD[8:],  # not base64
        "sp1:" + GOOD[4:] + "==",  # padding is not allowed
        "sp1:" + GOOD[4:] + "A",  # impossible length
        "sp2:" + GOOD[4:],  # unknown version
        "sp01:" + GOOD[4:],  # not the canonical spelling of version 1
        "sp1:" + GOOD[4:-1] + ("B" if GOOD[-1] == "A" else "A"),  # check fails
        GOOD[:-4],  # truncated string
        "sp1:" + _b64(_frame_with_check(b"\x10" + bytes(12), b"\x00\x00\x00\x00")),  # flag
        "sp1:"
        + _b64(
            _frame_with_check(b"\x00" + b"\x00\x00\x00\x00\x00\x01" + bytes(6), b"\x00\x00\x00\x00")
        ),
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x00\x00\x00\x00\x00")),  # trailing byte
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x00\x03\x00\x00")),  # unknown kind
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x80\x00\x00\x00\x00")),  # overlong
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x00\x01\x05\x00\x00\x00\x00")),
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x00\x02\x09\xff\x00\x00\x00")),  # bits
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x00\x00\x01\x00\x00\x00")),  # rejected
        # packed ranges: no code at all, stray bits after the codes, k out of range
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x00\x03\x01\x00\x00\x01\x00\x00\x00")),
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x00\x03\x01\x00\x00\x01\xff\x00\x00")),
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x00\x03\x01\x40\x00\x01\xc0\x00\x00")),
        "sp1:" + _b64(_frame_with_check(bytes(13), b"\x00\x03\x05\x00\x00\x01\xff\x00\x00")),
        "sp1:" + _b64(_frame_with_check(b"\x01" + bytes(12), b"\x28\xb5garbage")),  # zstd
        # a decompression bomb: 2 MiB of zeros in a few bytes
        "sp1:" + _b64(_frame_with_check(b"\x01" + bytes(12), _zstd(bytes(2 << 20)))),
        # truncated form holding state above its horizon
        "sp1:"
        + _b64(_frame_with_check(b"\x02" + bytes(12), b"\x00\x01\x00\x00\x01\x01\x00\x00\x00\x00")),
    ],
)
def test_garbage_raises_codec_error(metadata: str) -> None:
    assert is_streamplane_metadata(metadata)
    with pytest.raises(CodecError):
        decode(metadata)


@pytest.mark.parametrize("metadata", ["sp1:", "sp1:AAAA", "sp1:" + "A" * 19, "sp9:" + GOOD[4:]])
def test_peek_rejects_broken_headers(metadata: str) -> None:
    with pytest.raises(CodecError):
        peek_header(metadata)


def test_peek_reads_only_the_header() -> None:
    # the body is garbage but the header is intact: the lag monitor still gets its data
    broken = GOOD[: len(METADATA_PREFIX) + 20] + "____"
    assert peek_low_watermark_timestamp(broken) == T0 - 1
    assert peek_header(broken) == CommitHeader(
        low_watermark_timestamp_ms=T0 - 1,
        commit_time_ms=T0,
        compressed=False,
        truncated=False,
        spilled=False,
    )
    with pytest.raises(CodecError):
        decode(broken)


def test_header_layout() -> None:
    assert len(GOOD_FRAME) > HEADER_SIZE
    assert GOOD_FRAME[0] == 0x08  # only the timestamp flag
    assert int.from_bytes(GOOD_FRAME[1:7], "big", signed=True) == T0 - 1
    assert int.from_bytes(GOOD_FRAME[7:13], "big", signed=True) == T0


# --------------------------------------------------------------------------------------
# Scenarios from the bench: they must fit 4 KiB with room to spare
# --------------------------------------------------------------------------------------


def test_bench_scenarios_fit() -> None:
    stuck = progress(0, [(1 + 2 * i, 2 + 2 * i) for i in range(10_000)], retries={0: 5}, ts=T0)
    hundred = progress(0, [(1 + 1000 * i, 1 + 1000 * i + 37 * (i % 9 + 1)) for i in range(100)])
    holes = RangeSet([(1, 50_001)])
    for i in range(500):
        holes.discard(1 + 100 * i + (i * 37) % 100)
    dense = PartitionProgress(low_watermark=0, commit_time_ms=T0, settled=holes)
    for p, limit in [(stuck, 100), (hundred, 500), (dense, 1_000)]:
        result = encode(p)
        assert result.fits and result.size < limit
        assert decode(result.metadata).progress == p


# --------------------------------------------------------------------------------------
# Golden vectors
# --------------------------------------------------------------------------------------


def golden_files() -> list[Path]:
    return sorted(GOLDEN_DIR.glob("*.json"))


def test_golden_vectors_exist() -> None:
    assert len(golden_files()) >= 6


@pytest.mark.parametrize("path", golden_files(), ids=lambda p: p.stem)
def test_golden_vector(path: Path) -> None:
    vector = json.loads(path.read_text())
    p = progress_from_json(vector["progress"])
    expected = vector["expected"]
    form = vector["form"]
    if form == "full":
        blob = bytes.fromhex(expected["blob_hex"])
        assert encode_full(p) == blob
        assert decode_full(blob) == p
        return
    result: EncodedProgress
    if form == "spill":
        s = vector["spill"]
        pointer = SpillPointer(
            partition=s["partition"], offset=s["offset"], checksum=bytes.fromhex(s["checksum"])
        )
        assert pointer == SpillPointer.for_blob(s["partition"], s["offset"], encode_full(p))
        result = encode_spill_pointer(p, pointer, max_bytes=vector["max_bytes"])
    else:
        result = encode(p, max_bytes=vector["max_bytes"])
    assert result.metadata == expected["metadata"]
    assert result.truncated is expected["truncated"]
    assert result.horizon == expected["horizon"]
    assert result.dropped_settled == expected["dropped_settled"]
    assert result.dropped_retries == expected["dropped_retries"]
    decoded = decode(expected["metadata"])
    assert decoded.progress == progress_from_json(expected["decoded"])
    assert decoded.truncated is expected["truncated"]
    assert decoded.horizon == expected["horizon"]
    assert decoded.dropped_settled == expected["dropped_settled"]
    assert decoded.dropped_retries == expected["dropped_retries"]
    assert peek_low_watermark_timestamp(expected["metadata"]) == p.low_watermark_timestamp_ms


@pytest.mark.parametrize(
    ("body", "settled"),
    [
        # varint runs: one range, gap 2 from low_watermark + 1, length 3 + 1
        (b"\x05\x01\x01\x02\x03\x00\x00", [(8, 12)]),
        # bitset of span 5: bits 0, 1 and 4 -> offsets 6, 7, 10
        (b"\x05\x02\x05\x13\x00\x00", [(6, 8), (10, 11)]),
        # packed, k = 0 for both: '1' (gap 0) '1' (length 1), zero padding
        (b"\x00\x03\x01\x00\x00\x01\xc0\x00\x00", [(1, 2)]),
        # packed, k_gap 0, k_length 2: gap '011' = 2, length '101' = 1 + 1
        (b"\x00\x03\x01\x00\x02\x01\x74\x00\x00", [(3, 5)]),
    ],
    ids=["runs", "bitset", "packed-k0", "packed-k2"],
)
def test_hand_made_sections(body: bytes, settled: list[tuple[int, int]]) -> None:
    decoded = decode("sp1:" + _b64(_frame_with_check(bytes(13), body)))
    assert decoded.progress is not None
    assert list(decoded.progress.settled.ranges()) == settled
