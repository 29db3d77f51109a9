"""The fast path of ``peek_low_watermark_timestamp`` answers (or raises) as ``peek_header``."""

from __future__ import annotations

import base64

from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.core.commitlog import peek_header, peek_low_watermark_timestamp
from streamplane.exceptions import CodecError


def _reference(metadata: str | None) -> object:
    try:
        header = peek_header(metadata)
    except CodecError:
        return CodecError
    return None if header is None else header.low_watermark_timestamp_ms


def _fast(metadata: str | None) -> object:
    try:
        return peek_low_watermark_timestamp(metadata)
    except CodecError:
        return CodecError


@settings(max_examples=3000, deadline=None, database=None)
@given(
    flags=st.sampled_from([0, 1, 2, 4, 8, 9, 12, 15, 16, 0x80, 0xFF]),
    ts=st.one_of(st.just(bytes(6)), st.binary(min_size=6, max_size=6)),
    rest=st.binary(min_size=8, max_size=8),
    tail=st.text(alphabet="AZaz09-_+/=!", max_size=8),
    prefix=st.sampled_from(["sp1:", "sp2:", "sp01:", "SP1:", "", "x"]),
)
def test_fast_path_agrees_with_peek_header(
    flags: int, ts: bytes, rest: bytes, tail: str, prefix: str
) -> None:
    header = base64.urlsafe_b64encode(bytes([flags]) + ts + rest).decode()
    metadata = prefix + header + tail
    assert _fast(metadata) == _reference(metadata)


@given(st.one_of(st.none(), st.text(max_size=40)))
def test_any_text_agrees(metadata: str | None) -> None:
    assert _fast(metadata) == _reference(metadata)
    if metadata is not None:
        assert _fast("sp1:" + metadata) == _reference("sp1:" + metadata)
