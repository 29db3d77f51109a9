"""__consumer_offsets codec: hand-written vectors from Kafka's schemas, encoder tables,
garbage, and hypothesis round trips."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.core.offsets_topic import (
    GroupMetadataKey,
    GroupMetadataRecord,
    OffsetCommit,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetTombstone,
    UnknownKey,
    UnknownRecord,
    decode_key,
    decode_record,
    decode_value,
    encode_commit,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from streamplane.exceptions import CodecError

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")

# --- hand-written vectors (written from OffsetCommitKey/Value.json, not from the encoder)

KEY_V1 = bytes.fromhex("0001 0002 6731 0001 74 00000003")  # g1 / t / 3
KEY_V0 = bytes.fromhex("0000 0002 6731 0001 74 00000003")
KEY_V2 = bytes.fromhex("0002 0003 677270")  # group metadata of "grp"
OFFSET_42 = "000000000000002a"
TS_1000 = "00000000000003e8"

VALUE_VECTORS = [
    # v0: offset, metadata "ab", commit ts
    (
        "0000" + OFFSET_42 + "0002" + "6162" + TS_1000,
        OffsetCommitValue(42, None, "ab", 1000, None, 0),
    ),
    # v1: offset, null metadata, commit ts, expire ts 2000
    (
        "0001" + OFFSET_42 + "ffff" + TS_1000 + "00000000000007d0",
        OffsetCommitValue(42, None, None, 1000, 2000, 1),
    ),
    # v2: like v0, empty metadata
    ("0002" + OFFSET_42 + "0000" + TS_1000, OffsetCommitValue(42, None, "", 1000, None, 2)),
    # v3: offset, leader epoch 5, metadata "ab", commit ts
    (
        "0003" + OFFSET_42 + "00000005" + "0002" + "6162" + TS_1000,
        OffsetCommitValue(42, 5, "ab", 1000, None, 3),
    ),
    # v3: leader epoch -1 means unknown
    (
        "0003" + OFFSET_42 + "ffffffff" + "0000" + TS_1000,
        OffsetCommitValue(42, None, "", 1000, None, 3),
    ),
    # v4: compact "ab" (length + 1 = 3), no tagged fields
    (
        "0004" + OFFSET_42 + "00000005" + "03" + "6162" + TS_1000 + "00",
        OffsetCommitValue(42, 5, "ab", 1000, None, 4),
    ),
    # v4: compact null (0) and empty (1)
    (
        "0004" + OFFSET_42 + "00000005" + "00" + TS_1000 + "00",
        OffsetCommitValue(42, 5, None, 1000, None, 4),
    ),
    (
        "0004" + OFFSET_42 + "00000005" + "01" + TS_1000 + "00",
        OffsetCommitValue(42, 5, "", 1000, None, 4),
    ),
    # v4: 126 bytes -> one varint byte 0x7f
    (
        "0004" + OFFSET_42 + "00000005" + "7f" + "6d" * 126 + TS_1000 + "00",
        OffsetCommitValue(42, 5, "m" * 126, 1000, None, 4),
    ),
    # v4: 127 bytes -> length + 1 = 128 = varint 80 01 (where Burrow reads one byte)
    (
        "0004" + OFFSET_42 + "00000005" + "8001" + "6d" * 127 + TS_1000 + "00",
        OffsetCommitValue(42, 5, "m" * 127, 1000, None, 4),
    ),
    # v4: 200 bytes -> 201 = c9 01, and the topic id as tag 0 (16 bytes)
    (
        "0004"
        + OFFSET_42
        + "ffffffff"
        + "c901"
        + "6d" * 200
        + TS_1000
        + "01"
        + "00"
        + "10"
        + TOPIC_ID.hex,
        OffsetCommitValue(42, None, "m" * 200, 1000, None, 4, TOPIC_ID),
    ),
    # v4: 3,000 bytes -> 3001 = b9 17; topic id and an unknown tag 5 (skipped)
    (
        "0004"
        + OFFSET_42
        + "00000007"
        + "b917"
        + "78" * 3000
        + TS_1000
        + "02"
        + "00"
        + "10"
        + TOPIC_ID.hex
        + "05"
        + "03"
        + "abcdef",
        OffsetCommitValue(42, 7, "x" * 3000, 1000, None, 4, TOPIC_ID),
    ),
    # v4: only an unknown tag
    (
        "0004" + OFFSET_42 + "00000005" + "03" + "6162" + TS_1000 + "01" + "07" + "00",
        OffsetCommitValue(42, 5, "ab", 1000, None, 4),
    ),
]


@pytest.mark.parametrize(("hex_value", "expected"), VALUE_VECTORS)
def test_decode_value_hand_written(hex_value: str, expected: OffsetCommitValue) -> None:
    assert decode_value(bytes.fromhex(hex_value)) == expected


@pytest.mark.parametrize(("hex_value", "expected"), VALUE_VECTORS)
def test_encoder_matches_hand_written_bytes(hex_value: str, expected: OffsetCommitValue) -> None:
    unknown = [(5, bytes.fromhex("abcdef"))] if "0503abcdef" in hex_value else []
    if hex_value.endswith("010700"):
        unknown = [(7, b"")]
    encoded = encode_offset_commit_value(
        expected.offset,
        expected.metadata,
        expected.commit_timestamp_ms,
        version=expected.version,
        leader_epoch=expected.leader_epoch,
        expire_timestamp_ms=expected.expire_timestamp_ms,
        topic_id=expected.topic_id,
        unknown_tagged_fields=unknown,
    )
    assert encoded.hex() == hex_value


def test_decode_key_hand_written() -> None:
    assert decode_key(KEY_V1) == OffsetCommitKey("g1", "t", 3, 1)
    assert decode_key(KEY_V0) == OffsetCommitKey("g1", "t", 3, 0)
    assert decode_key(KEY_V2) == GroupMetadataKey("grp")
    assert encode_offset_commit_key("g1", "t", 3) == KEY_V1
    assert encode_offset_commit_key("g1", "t", 3, version=0) == KEY_V0
    assert encode_group_metadata_key("grp") == KEY_V2


def test_decode_record_hand_written() -> None:
    value = bytes.fromhex(VALUE_VECTORS[10][0])
    assert decode_record(KEY_V1, value) == OffsetCommit(
        "g1", "t", 3, 42, None, "m" * 200, 1000, None, 4, TOPIC_ID
    )


def test_non_ascii_names_and_metadata() -> None:
    key = encode_offset_commit_key("grüppe", "tópico-日本", 0)
    value = encode_offset_commit_value(1, "métadonnées ✓" * 20, 5, version=4)
    record = decode_record(key, value)
    assert isinstance(record, OffsetCommit)
    assert (record.group, record.topic, record.metadata) == (
        "grüppe",
        "tópico-日本",
        "métadonnées ✓" * 20,
    )


# --- every key and value version through the encoders -----------------------------


@pytest.mark.parametrize("key_version", [0, 1])
@pytest.mark.parametrize(
    ("value_version", "leader_epoch", "expire", "topic_id"),
    [
        (0, None, None, None),
        (1, None, 99, None),
        (1, None, None, None),
        (2, None, None, None),
        (3, 12, None, None),
        (3, None, None, None),
        (4, 12, None, None),
        (4, 0, None, TOPIC_ID),
    ],
)
@pytest.mark.parametrize("metadata", [None, "", "short", "z" * 127, "w" * 3000])
def test_encode_decode_every_version(
    key_version: int,
    value_version: int,
    leader_epoch: int | None,
    expire: int | None,
    topic_id: uuid.UUID | None,
    metadata: str | None,
) -> None:
    commit = OffsetCommit(
        "group-a", "orders", 7, 123_456_789_012, leader_epoch, metadata, 1_700_000_000_123,
        expire, value_version, topic_id,
    )  # fmt: skip
    key, value = encode_commit(commit, key_version=key_version)
    assert decode_record(key, value) == commit
    assert decode_key(key) == OffsetCommitKey("group-a", "orders", 7, key_version)
    decoded = decode_value(value)
    assert decoded is not None
    assert decoded.version == value_version
    assert decoded.metadata == metadata


def test_v4_with_3000_byte_metadata() -> None:
    metadata = "s" * 3000
    value = encode_offset_commit_value(10, metadata, 20, version=4, leader_epoch=3)
    assert value[14:16] == bytes([0xB9, 0x17])  # 3001 as an unsigned varint
    decoded = decode_value(value)
    assert decoded == OffsetCommitValue(10, 3, metadata, 20, None, 4)


# --- tombstones, group metadata, unknown keys -------------------------------------


def test_offset_tombstone() -> None:
    assert decode_record(KEY_V1, None) == OffsetTombstone("g1", "t", 3)
    assert decode_value(None) is None


def test_group_metadata_records() -> None:
    value = bytes.fromhex("0003" + "0008" + "636f6e73756d6572" + "00000005")  # truncated body
    record = decode_record(KEY_V2, value)
    assert record == GroupMetadataRecord("grp", 3, value)
    assert not record.is_tombstone
    deleted = decode_record(KEY_V2, None)
    assert deleted == GroupMetadataRecord("grp", None, None)
    assert isinstance(deleted, GroupMetadataRecord)
    assert deleted.is_tombstone


@pytest.mark.parametrize(
    "key",
    [
        bytes.fromhex("0003" + "0003677270"),  # ConsumerGroupMetadataKey (KIP-848)
        bytes.fromhex("0004" + "0003677270" + "0001" + "61"),
        bytes.fromhex("000a"),  # no payload at all
        bytes.fromhex("7fff" + "00"),
        bytes.fromhex("ffff" + "deadbeef"),
    ],
)
def test_unknown_key_versions_are_skipped(key: bytes) -> None:
    version = int.from_bytes(key[:2], "big", signed=True)
    assert decode_key(key) == UnknownKey(version, key)
    assert decode_record(key, b"\x00\x01garbage") == UnknownRecord(version, key, b"\x00\x01garbage")
    assert decode_record(key, None) == UnknownRecord(version, key, None)


def test_buffer_types_are_accepted() -> None:
    value = bytes.fromhex(VALUE_VECTORS[3][0])
    expected = decode_record(KEY_V1, value)
    assert decode_record(bytearray(KEY_V1), memoryview(value)) == expected
    assert decode_value(bytearray(value)) == VALUE_VECTORS[3][1]


# --- garbage -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (b"", "too short"),
        (b"\x00", "too short"),
        (b"\x00\x01\x00", "truncated"),
        (KEY_V1[:-1], "does not fit"),
        (KEY_V1 + b"\x00", "does not fit"),
        (bytes.fromhex("0001 ffff 0001 74 00000003"), "group length -1"),
        (bytes.fromhex("0001 0010 6731"), "group length 16"),
        (bytes.fromhex("0001 0002 6731 fffe 00000003"), "topic length -2"),
        (bytes.fromhex("0001 0002 ff31 0001 74 00000003"), "UTF-8"),
        (bytes.fromhex("0002 0005 677270"), "group length 5"),
        (bytes.fromhex("0002 0002 c328"), "UTF-8"),
    ],
)
def test_garbage_keys(key: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        decode_record(key, None)
    with pytest.raises(CodecError):
        decode_key(key)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "truncated"),
        ("00", "truncated"),
        ("0005" + OFFSET_42 + "0000" + TS_1000, "unknown offset commit value version 5"),
        ("ffff" + OFFSET_42, "unknown offset commit value version -1"),
        ("0003" + OFFSET_42 + "00000005" + "0020" + "6162" + TS_1000, "metadata of 32 bytes"),
        ("0003" + OFFSET_42 + "00000005" + "fffe" + TS_1000, "metadata length -2"),
        ("0003" + OFFSET_42 + "00000005" + "0002" + "ff61" + TS_1000, "UTF-8"),
        ("0000" + OFFSET_42 + "0000" + TS_1000 + "00", "1 trailing byte"),
        ("0004" + OFFSET_42 + "00000005", "truncated"),
        ("0004" + OFFSET_42 + "00000005" + "ffffffffff7f", "longer than 5 bytes"),
        ("0004" + OFFSET_42 + "00000005" + "ffffffff1f", "does not fit 32 bits"),
        ("0004" + OFFSET_42 + "00000005" + "c9", "truncated unsigned varint"),
        ("0004" + OFFSET_42 + "00000005" + "01" + TS_1000, "truncated unsigned varint"),
        ("0004" + OFFSET_42 + "00000005" + "01" + TS_1000 + "01000f" + "00" * 15, "expected 16"),
        ("0004" + OFFSET_42 + "00000005" + "01" + TS_1000 + "010510" + "00" * 4, "overruns"),
        ("0004" + OFFSET_42 + "00000005" + "01" + TS_1000 + "02" + "0500", "truncated"),
        ("0004" + OFFSET_42 + "00000005" + "01" + TS_1000 + "00" + "00", "trailing"),
    ],
)
def test_garbage_values(value: str, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        decode_record(KEY_V1, bytes.fromhex(value))
    with pytest.raises(CodecError):
        decode_value(bytes.fromhex(value))


@pytest.mark.parametrize(("hex_value", "_expected"), VALUE_VECTORS)
def test_every_strict_prefix_of_a_value_is_rejected(
    hex_value: str, _expected: OffsetCommitValue
) -> None:
    value = bytes.fromhex(hex_value)
    for cut in range(len(value)):
        with pytest.raises(CodecError):
            decode_value(value[:cut])


def test_every_strict_prefix_of_a_key_is_rejected() -> None:
    for key in (KEY_V0, KEY_V1, KEY_V2):
        for cut in range(len(key)):
            with pytest.raises(CodecError):
                decode_key(key[:cut])


def test_wrong_types_and_missing_key() -> None:
    with pytest.raises(CodecError, match="without a key"):
        decode_record(None, b"")  # type: ignore[arg-type]
    with pytest.raises(CodecError, match="must be bytes"):
        decode_value("0003")  # type: ignore[arg-type]
    with pytest.raises(CodecError, match="must be bytes"):
        decode_record(KEY_V1, "x")  # type: ignore[arg-type]


def test_group_metadata_value_too_short() -> None:
    with pytest.raises(CodecError, match="group metadata value too short"):
        decode_record(KEY_V2, b"\x00")


@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=64)))
@settings(max_examples=500)
def test_random_bytes_raise_only_codec_error(key: bytes, value: bytes | None) -> None:
    with contextlib.suppress(CodecError):
        decode_record(key, value)


@given(st.binary(min_size=15, max_size=80))
def test_random_v4_bodies_raise_only_codec_error(body: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode_value(b"\x00\x04" + body)


# --- encoder errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": 5}, "0-4"),
        ({"version": 2, "leader_epoch": 1}, "no leader epoch"),
        ({"version": 3, "expire_timestamp_ms": 1}, "no expire timestamp"),
        ({"version": 3, "topic_id": TOPIC_ID}, "no tagged fields"),
        ({"version": 3, "leader_epoch": 2**31}, "cannot encode"),
    ],
)
def test_encoder_rejects_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(CodecError, match=message):
        encode_offset_commit_value(1, "m", 2, **kwargs)  # type: ignore[arg-type]


def test_encoder_rejects_oversized_strings_and_bad_keys() -> None:
    with pytest.raises(CodecError, match="more than 32767"):
        encode_offset_commit_value(1, "x" * 40_000, 2, version=4)
    with pytest.raises(CodecError, match="more than 32767"):
        encode_offset_commit_value(1, "x" * 40_000, 2, version=3)
    with pytest.raises(CodecError, match="0 or 1"):
        encode_offset_commit_key("g", "t", 0, version=2)
    with pytest.raises(CodecError, match="cannot encode"):
        encode_offset_commit_key("g", "t", 2**31)


# --- hypothesis round trips ------------------------------------------------------------

names = st.text(max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
metadata = st.one_of(st.none(), st.text(max_size=200), st.text(min_size=1000, max_size=4000))


@st.composite
def commits(draw: st.DrawFn) -> OffsetCommit:
    version = draw(st.integers(0, 4))
    epoch = draw(st.one_of(st.none(), st.integers(0, 2**31 - 1))) if version >= 3 else None
    expire = None
    if version == 1:
        expire = draw(st.one_of(st.none(), int64.filter(lambda x: x != -1)))
    topic_id = draw(st.one_of(st.none(), st.uuids())) if version == 4 else None
    return OffsetCommit(
        draw(names), draw(names), draw(int32), draw(int64), epoch, draw(metadata),
        draw(int64), expire, version, topic_id,
    )  # fmt: skip


@given(commits(), st.integers(0, 1))
@settings(max_examples=300)
def test_round_trip(commit: OffsetCommit, key_version: int) -> None:
    key, value = encode_commit(commit, key_version=key_version)
    assert decode_record(key, value) == commit


@given(
    commits().filter(lambda c: c.value_version == 4),
    st.lists(st.tuples(st.integers(1, 2**20), st.binary(max_size=300)), max_size=4),
)
def test_unknown_tagged_fields_are_skipped(
    commit: OffsetCommit, unknown: list[tuple[int, bytes]]
) -> None:
    value = encode_offset_commit_value(
        commit.offset,
        commit.metadata,
        commit.commit_timestamp_ms,
        version=4,
        leader_epoch=commit.leader_epoch,
        topic_id=commit.topic_id,
        unknown_tagged_fields=unknown,
    )
    key = encode_offset_commit_key(commit.group, commit.topic, commit.partition)
    assert decode_record(key, value) == commit


@given(st.text(max_size=40), st.integers(0, 2**15 - 1))
def test_group_metadata_key_round_trip(group: str, value_version: int) -> None:
    key = encode_group_metadata_key(group)
    assert decode_key(key) == GroupMetadataKey(group)
    value = value_version.to_bytes(2, "big") + b"rest"
    assert decode_record(key, value) == GroupMetadataRecord(group, value_version, value)
