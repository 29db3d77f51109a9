"""Decoder and encoder for the records of Kafka's ``__consumer_offsets`` topic.

Pure: bytes in, frozen dataclasses out. No Kafka client, no I/O.

Wire format (big-endian; "string" = int16 length + UTF-8 bytes, -1 = null), from
Kafka's ``group-coordinator/src/main/resources/common/message/*.json``::

    key    int16 version, then
           0, 1   OffsetCommitKey     group string, topic string, partition int32
           2      GroupMetadataKey    group string
           other  a record type we do not know (newer group types): skipped
    value  null = tombstone, else int16 version, then (OffsetCommitValue)
           0, 2   offset int64, metadata string, commit_ts int64
           1      offset int64, metadata string, commit_ts int64, expire_ts int64
           3      offset int64, leader_epoch int32, metadata string, commit_ts int64
           4      offset int64, leader_epoch int32, metadata COMPACT string
                  (unsigned varint of length + 1, 0 = null), commit_ts int64,
                  tagged fields: unsigned varint count, then per field an unsigned
                  varint tag, an unsigned varint size and the bytes.
                  Tag 0 is the topic id (uuid, 16 bytes, KAFKA-19141); others are skipped.

Kafka itself rejects value versions it does not know (KAFKA-18672): so do we, with a
``CodecError``. Unknown *key* versions are data, not errors: ``decode_record`` returns an
``UnknownRecord`` and the caller moves on. Group metadata values are not decoded beyond
their version: a ``GroupMetadataRecord`` carries the raw bytes.

Burrow reads the v4 compact length as a single byte, so metadata of 127 bytes or more
comes out wrong there; here the varint is read in full (streamplane's metadata is
usually longer than that).

A leader epoch of -1 (Kafka's "unknown") and a v1 expire timestamp of -1 come out as
None. Truncated, overlong or malformed bytes raise ``CodecError`` saying where.

Hot path: ``decode_record`` on an offset commit does a handful of precompiled
``struct`` unpacks, two or three slices and UTF-8 decodes, and builds one object
(through the slot descriptors, skipping the frozen ``__init__``'s per-field
``object.__setattr__``). The encoders build synthetic records for tests and benchmarks.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from streamplane.exceptions import CodecError

__all__ = [
    "BytesLike",
    "GroupMetadataKey",
    "GroupMetadataRecord",
    "OffsetCommit",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "OffsetTombstone",
    "OffsetsRecord",
    "UnknownKey",
    "UnknownRecord",
    "decode_key",
    "decode_record",
    "decode_value",
    "encode_commit",
    "encode_group_metadata_key",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
]

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSIONS = (0, 1, 2, 3, 4)
TOPIC_ID_TAG = 0

_MAX_STRING_BYTES = 0x7FFF  # int16 length; Kafka applies the same bound to compact strings

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I64_PAIR = struct.Struct(">qq")
_KEY_HEAD = struct.Struct(">hh")  # key version, group length
_V0_HEAD = struct.Struct(">hqh")  # version, offset, metadata length (v0, v1, v2)
_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_V4_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch (compact length follows)


# --- results ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Key versions 0 and 1: one committed offset of (group, topic, partition)."""

    group: str
    topic: str
    partition: int
    version: int = 1


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Key version 2: the metadata (generation, members) of a classic group."""

    group: str
    version: int = GROUP_METADATA_KEY_VERSION


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key version this decoder does not know (e.g. KIP-848 consumer-group records)."""

    version: int
    raw: bytes


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """An offset commit value, any version.

    ``leader_epoch`` is None before v3 or when Kafka wrote -1; ``expire_timestamp_ms``
    only exists in v1; ``topic_id`` only in v4, and only when the broker wrote tag 0.
    """

    offset: int
    leader_epoch: int | None
    metadata: str | None
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None
    version: int = 3
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """A committed offset, key and value together."""

    group: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    metadata: str | None
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None
    value_version: int = 3
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class OffsetTombstone:
    """The offset of (group, topic, partition) was deleted (expired, or group deleted)."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """A group metadata record, not decoded: its value version and raw bytes.

    ``value_version`` and ``value`` are None for a tombstone (the group was deleted).
    """

    group: str
    value_version: int | None
    value: bytes | None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclass(frozen=True, slots=True)
class UnknownRecord:
    """A record whose key version is unknown: skip it."""

    key_version: int
    key: bytes
    value: bytes | None


OffsetsRecord = OffsetCommit | OffsetTombstone | GroupMetadataRecord | UnknownRecord
BytesLike = bytes | bytearray | memoryview


# --- decoding --------------------------------------------------------------------------


def _as_bytes(data: object, what: str) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    if data is None:
        raise CodecError(f"__consumer_offsets record without a {what}")
    raise CodecError(f"__consumer_offsets {what} must be bytes, not {type(data).__name__}")


def _parse_key(key: bytes) -> tuple[int, str, str, int]:
    """Return (version, group, topic, partition); topic is "" and partition -1 for v2.

    Unknown versions come back as (version, "", "", -1) without further parsing.
    """
    n = len(key)
    if n < 2:
        raise CodecError(f"__consumer_offsets key too short to hold a version: {n} byte(s)")
    if n < 4:
        version = _I16.unpack_from(key)[0]
        if version in OFFSET_COMMIT_KEY_VERSIONS or version == GROUP_METADATA_KEY_VERSION:
            raise CodecError(f"truncated __consumer_offsets key v{version}: {n} bytes")
        return version, "", "", -1
    version, glen = _KEY_HEAD.unpack_from(key)
    if version == 0 or version == 1:
        pos = 4 + glen
        if glen < 0 or pos + 2 > n:
            raise CodecError(
                f"bad offset commit key v{version}: group length {glen} in a {n}-byte key"
            )
        tlen = _I16.unpack_from(key, pos)[0]
        tpos = pos + 2
        end = tpos + tlen
        if tlen < 0 or end + 4 != n:
            raise CodecError(
                f"bad offset commit key v{version}: topic length {tlen} at byte {pos} "
                f"does not fit a {n}-byte key"
            )
        try:
            group = key[4:pos].decode()
            topic = key[tpos:end].decode()
        except UnicodeDecodeError as exc:
            raise CodecError(f"offset commit key v{version} is not valid UTF-8: {exc}") from None
        return version, group, topic, _I32.unpack_from(key, end)[0]
    if version == GROUP_METADATA_KEY_VERSION:
        if glen < 0 or 4 + glen != n:
            raise CodecError(f"bad group metadata key: group length {glen} in a {n}-byte key")
        try:
            return version, key[4:].decode(), "", -1
        except UnicodeDecodeError as exc:
            raise CodecError(f"group metadata key is not valid UTF-8: {exc}") from None
    return version, "", "", -1


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Kafka's unsigned varint (at most 5 bytes, < 2**32): return (value, next position)."""
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise CodecError(f"truncated unsigned varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            raise CodecError(f"unsigned varint longer than 5 bytes ending at byte {pos}")
    if result > 0xFFFFFFFF:
        raise CodecError(f"unsigned varint {result} does not fit 32 bits")
    return result, pos


def _read_tagged_fields(buf: bytes, pos: int) -> tuple[uuid.UUID | None, int]:
    """Read a tagged-field section: keep tag 0 (topic id), skip the others."""
    n = len(buf)
    count, pos = _read_uvarint(buf, pos)
    topic_id = None
    for _ in range(count):
        tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        end = pos + size
        if end > n:
            raise CodecError(
                f"tagged field {tag} of {size} bytes at byte {pos} overruns a {n}-byte value"
            )
        if tag == TOPIC_ID_TAG:
            if size != 16:
                raise CodecError(f"topic id tagged field has {size} bytes, expected 16")
            topic_id = uuid.UUID(bytes=buf[pos:end])
        pos = end
    return topic_id, pos


_ValueTuple = tuple[int, int, int | None, str | None, int, int | None, uuid.UUID | None]


def _parse_value(value: bytes) -> _ValueTuple:
    """Return (version, offset, leader_epoch, metadata, commit_ts, expire_ts, topic_id)."""
    n = len(value)
    try:
        version = _I16.unpack_from(value)[0]
        expire: int | None = None
        topic_id: uuid.UUID | None = None
        if version == 3:
            _, offset, epoch, mlen = _V3_HEAD.unpack_from(value)
            pos = 16
        elif version == 4:
            _, offset, epoch = _V4_HEAD.unpack_from(value)
            if n < 15:
                raise CodecError(f"truncated offset commit value v4: {n} bytes")
            mlen = value[14]
            pos = 15
            if mlen >= 0x80:  # 127+ bytes of metadata: a second varint byte (Burrow reads one)
                if n > 15 and value[15] < 0x80:
                    mlen = (mlen & 0x7F) | (value[15] << 7)
                    pos = 16
                else:
                    mlen, pos = _read_uvarint(value, 14)
            mlen -= 1  # compact: length + 1, so 0 -> -1 (null)
        elif version == 0 or version == 1 or version == 2:
            _, offset, mlen = _V0_HEAD.unpack_from(value)
            epoch = -1
            pos = 12
        else:
            raise CodecError(
                f"unknown offset commit value version {version} (known: 0-4); "
                "is this a group metadata value?"
            )
        if mlen >= 0:
            end = pos + mlen
            if end > n:
                raise CodecError(
                    f"truncated offset commit value v{version}: metadata of {mlen} bytes "
                    f"at byte {pos}, value has {n}"
                )
            metadata: str | None = value[pos:end].decode()
            pos = end
        elif mlen == -1:
            metadata = None
        else:
            raise CodecError(f"bad offset commit value v{version}: metadata length {mlen}")
        if version == 1:
            commit_ts, expire = _I64_PAIR.unpack_from(value, pos)
            pos += 16
            if expire == -1:
                expire = None
        else:
            commit_ts = _I64.unpack_from(value, pos)[0]
            pos += 8
        if version == 4:
            if pos < n and value[pos] == 0:
                pos += 1  # no tagged fields: the common case
            else:
                topic_id, pos = _read_tagged_fields(value, pos)
    except struct.error:
        raise CodecError(f"truncated offset commit value ({n} bytes): {value[:32].hex()}") from None
    except UnicodeDecodeError as exc:
        raise CodecError(f"offset commit metadata is not valid UTF-8: {exc}") from None
    if pos != n:
        raise CodecError(
            f"offset commit value v{version} has {n - pos} trailing byte(s) after byte {pos}"
        )
    return version, offset, (epoch if epoch >= 0 else None), metadata, commit_ts, expire, topic_id


def decode_key(key: BytesLike) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    """Decode a ``__consumer_offsets`` key. Unknown versions give an ``UnknownKey``."""
    raw = _as_bytes(key, "key")
    version, group, topic, partition = _parse_key(raw)
    if version == 0 or version == 1:
        return OffsetCommitKey(group, topic, partition, version)
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(group)
    return UnknownKey(version, raw)


def decode_value(value: BytesLike | None) -> OffsetCommitValue | None:
    """Decode an offset commit value (versions 0-4); None (a tombstone) gives None."""
    if value is None:
        return None
    version, offset, epoch, metadata, commit_ts, expire, topic_id = _parse_value(
        _as_bytes(value, "value")
    )
    return OffsetCommitValue(offset, epoch, metadata, commit_ts, expire, version, topic_id)


def decode_record(key: BytesLike, value: BytesLike | None) -> OffsetsRecord:
    """Decode one ``__consumer_offsets`` record.

    Returns an ``OffsetCommit``, an ``OffsetTombstone``, a ``GroupMetadataRecord`` or,
    for key versions this decoder does not know, an ``UnknownRecord`` (skip it).
    Raises ``CodecError`` on truncated or malformed bytes.
    """
    raw_key = key if type(key) is bytes else _as_bytes(key, "key")
    kversion, group, topic, partition = _parse_key(raw_key)
    if kversion == 0 or kversion == 1:
        if value is None:
            return OffsetTombstone(group, topic, partition)
        raw = value if type(value) is bytes else _as_bytes(value, "value")
        vversion, offset, epoch, metadata, commit_ts, expire, topic_id = _parse_value(raw)
        return _new_offset_commit(
            group, topic, partition, offset, epoch, metadata, commit_ts, expire, vversion, topic_id
        )
    if kversion == GROUP_METADATA_KEY_VERSION:
        if value is None:
            return GroupMetadataRecord(group, None, None)
        raw = _as_bytes(value, "value")
        if len(raw) < 2:
            raise CodecError(f"group metadata value too short: {len(raw)} byte(s)")
        return GroupMetadataRecord(group, _I16.unpack_from(raw)[0], raw)
    return UnknownRecord(kversion, raw_key, None if value is None else _as_bytes(value, "value"))


def _fast_constructor_for_offset_commit() -> Any:
    """Build ``OffsetCommit`` objects without the frozen ``__init__``'s per-field
    ``object.__setattr__`` calls (about twice as fast; the object is the same)."""
    setters = [OffsetCommit.__dict__[f.name].__set__ for f in fields(OffsetCommit)]
    if len(setters) != 10:  # keep in step with the dataclass
        raise AssertionError("OffsetCommit fields changed: update _new_offset_commit")
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9 = setters
    new = object.__new__

    def make(
        group: str,
        topic: str,
        partition: int,
        offset: int,
        leader_epoch: int | None,
        metadata: str | None,
        commit_timestamp_ms: int,
        expire_timestamp_ms: int | None,
        value_version: int,
        topic_id: uuid.UUID | None,
    ) -> OffsetCommit:
        obj = new(OffsetCommit)
        s0(obj, group)
        s1(obj, topic)
        s2(obj, partition)
        s3(obj, offset)
        s4(obj, leader_epoch)
        s5(obj, metadata)
        s6(obj, commit_timestamp_ms)
        s7(obj, expire_timestamp_ms)
        s8(obj, value_version)
        s9(obj, topic_id)
        return obj

    return make


_new_offset_commit: Callable[
    [str, str, int, int, int | None, str | None, int, int | None, int, uuid.UUID | None],
    OffsetCommit,
] = _fast_constructor_for_offset_commit()


# --- encoding --------------------------------------------------------------------------


def _encode_string(s: str | None, what: str) -> bytes:
    if s is None:
        return b"\xff\xff"
    data = s.encode()
    if len(data) > _MAX_STRING_BYTES:
        raise CodecError(f"{what} is {len(data)} bytes, more than {_MAX_STRING_BYTES}")
    return _I16.pack(len(data)) + data


def _encode_uvarint(n: int) -> bytes:
    if not 0 <= n <= 0xFFFFFFFF:
        raise CodecError(f"unsigned varint out of range: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode_compact_string(s: str | None, what: str) -> bytes:
    if s is None:
        return b"\x00"
    data = s.encode()
    if len(data) > _MAX_STRING_BYTES:
        raise CodecError(f"{what} is {len(data)} bytes, more than {_MAX_STRING_BYTES}")
    return _encode_uvarint(len(data) + 1) + data


def encode_offset_commit_key(group: str, topic: str, partition: int, *, version: int = 1) -> bytes:
    """Encode an offset commit key (version 0 or 1; both have the same layout)."""
    if version not in OFFSET_COMMIT_KEY_VERSIONS:
        raise CodecError(f"offset commit key version must be 0 or 1, not {version}")
    try:
        return (
            _I16.pack(version)
            + _encode_string(group, "group")
            + _encode_string(topic, "topic")
            + _I32.pack(partition)
        )
    except struct.error as exc:
        raise CodecError(f"cannot encode offset commit key: {exc}") from None


def encode_group_metadata_key(group: str) -> bytes:
    """Encode a group metadata key (version 2)."""
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _encode_string(group, "group")


def encode_offset_commit_value(
    offset: int,
    metadata: str | None,
    commit_timestamp_ms: int,
    *,
    version: int = 3,
    leader_epoch: int | None = None,
    expire_timestamp_ms: int | None = None,
    topic_id: uuid.UUID | None = None,
    unknown_tagged_fields: Sequence[tuple[int, bytes]] = (),
) -> bytes:
    """Encode an offset commit value of any version (0-4).

    Fields a version does not have must be left at their defaults. ``topic_id`` and
    ``unknown_tagged_fields`` (tag, bytes) pairs are v4 tagged fields, written in tag order.
    """
    if version not in OFFSET_COMMIT_VALUE_VERSIONS:
        raise CodecError(f"offset commit value version must be 0-4, not {version}")
    if leader_epoch is not None and version < 3:
        raise CodecError(f"offset commit value v{version} has no leader epoch")
    if expire_timestamp_ms is not None and version != 1:
        raise CodecError(f"offset commit value v{version} has no expire timestamp")
    if (topic_id is not None or unknown_tagged_fields) and version < 4:
        raise CodecError(f"offset commit value v{version} has no tagged fields")
    epoch = -1 if leader_epoch is None else leader_epoch
    try:
        parts = [_I16.pack(version), _I64.pack(offset)]
        if version >= 3:
            parts.append(_I32.pack(epoch))
        if version == 4:
            parts.append(_encode_compact_string(metadata, "metadata"))
        else:
            parts.append(_encode_string(metadata, "metadata"))
        parts.append(_I64.pack(commit_timestamp_ms))
        if version == 1:
            parts.append(_I64.pack(-1 if expire_timestamp_ms is None else expire_timestamp_ms))
        if version == 4:
            tagged = list(unknown_tagged_fields)
            if topic_id is not None:
                tagged.append((TOPIC_ID_TAG, topic_id.bytes))
            tagged.sort(key=lambda f: f[0])
            parts.append(_encode_uvarint(len(tagged)))
            for tag, data in tagged:
                parts += (_encode_uvarint(tag), _encode_uvarint(len(data)), data)
    except struct.error as exc:
        raise CodecError(f"cannot encode offset commit value v{version}: {exc}") from None
    return b"".join(parts)


def encode_commit(commit: OffsetCommit, *, key_version: int = 1) -> tuple[bytes, bytes]:
    """Encode an ``OffsetCommit`` as a (key, value) pair, value in ``commit.value_version``."""
    key = encode_offset_commit_key(
        commit.group, commit.topic, commit.partition, version=key_version
    )
    value = encode_offset_commit_value(
        commit.offset,
        commit.metadata,
        commit.commit_timestamp_ms,
        version=commit.value_version,
        leader_epoch=commit.leader_epoch,
        expire_timestamp_ms=commit.expire_timestamp_ms,
        topic_id=commit.topic_id,
    )
    return key, value
