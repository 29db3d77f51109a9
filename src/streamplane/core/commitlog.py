"""The commit-log codec: per-partition progress in a Kafka commit's metadata string.

Per (group, topic, partition) a consumer commits the **low watermark** (the lowest
offset not yet settled) as the Kafka offset, so plain Kafka semantics stay true and
resuming from it is always safe. Everything above it travels in the commit *metadata*
string: the settled ranges, the rejected marks, the retry counts, and the ingestion
timestamp of the record at the low watermark (the lag monitor reads it from
``__consumer_offsets``). ``PartitionProgress`` is that state; this module turns it
into a metadata string and back. It is pure: no I/O, no clock, no threads.

Wire format (version 1; the full byte layout is in ``docs/commit-log.md``)::

    metadata = "sp1:" + base64url-without-padding(frame)       (pure ASCII)
    frame    = header (15 bytes, fixed) + payload
    header   = flags u8 | low-watermark timestamp i48 BE | commit time i48 BE
               | check u16 BE (low 16 bits of CRC-32 over flags..commit time + payload)
    payload  = body, or a magic-less zstd frame of body when flag ZSTD is set
    body     = uvarint low_watermark
               [SPILL]     uvarint side partition, uvarint side offset, 8-byte checksum
               [TRUNCATED] uvarint horizon - low_watermark, uvarint dropped settled,
                           uvarint dropped retries
               section settled, section rejected   (both relative to low_watermark + 1)
               uvarint n, n x (uvarint offset delta, uvarint attempts - 1)    retries
    section  = u8 kind, then by kind (ranges as (gap, length) pairs, gap counted from
               the lowest start the range could have, length minus one):
               0 empty
               1 runs:   uvarint n, n x (uvarint gap, uvarint length - 1)
               2 bitset: uvarint span, ceil(span / 8) bytes, bit i (LSB first) = offset
                         low_watermark + 1 + i
               3 packed: uvarint n, u8 k_gap, u8 k_length, uvarint size, size bytes of
                         n x (gap, length - 1) as Exp-Golomb codes of order k, MSB first

The header is 15 bytes, a multiple of 3, so its base64 is exactly the first 20
characters after the prefix: ``peek_header`` reads both timestamps from those without
touching the body. Per section the encoder keeps the smallest of runs, bitset and
packed runs (Exp-Golomb bit codes, for ranges too irregular for a bitset); the whole body
is zstd-compressed only when that is smaller.

Overflow policy (``offset.metadata.max.bytes``, 4096 by default). The codec never drops
state silently and never stalls:

1. ``encode`` returns the complete state whenever it fits the budget.
2. When it does not fit, ``encode`` returns a **truncated** metadata that keeps the
   state below a *horizon* offset, from the bottom up, as much as fits: settled ranges,
   rejected marks and retry counts above the horizon are dropped (a range crossing it
   is cut). This is always safe: the committed offset is still the true low watermark
   and a dropped settled offset is merely redelivered, never lost. The metadata says it
   is truncated and how many settled offsets and retry counts it dropped; the result
   (``EncodedProgress``) says the same to the caller, with the size the full state
   needs. A dropped retry count restarts that record's attempts from zero.
3. For the loss-free path the Kafka adapter writes ``encode_full(progress)`` (no budget)
   to a compacted side topic and commits ``encode_spill_pointer(...)``: a metadata that
   points at that record (side partition, offset, checksum of the blob) and carries the
   truncated prefix too, so a reader that cannot fetch the side record still resumes
   safely. Deciding *when* to spill is the adapter's job; ``encode_complete`` tells
   it, without the truncation search, whether the complete state fits.
4. The low-watermark timestamp and the commit time are in the fixed header of every
   form, truncated or spilled, so the lag monitor always finds them.

Decoding: ``decode`` returns a ``DecodedCommit``; metadata that is not streamplane's
(``""``, ``None``, another client's text) gives a *foreign* result, not an exception,
while streamplane metadata that does not decode raises ``CodecError``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import operator
import re
import zlib
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate, compress, repeat
from types import MappingProxyType

import zstandard

from streamplane.core.rangeset import RangeSet
from streamplane.exceptions import CodecError, ConfigError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FORMAT_VERSION",
    "FULL_MAGIC",
    "METADATA_PREFIX",
    "CommitHeader",
    "DecodedCommit",
    "EncodedProgress",
    "PartitionProgress",
    "SpillPointer",
    "decode",
    "decode_full",
    "encode",
    "encode_full",
    "encode_spill_pointer",
    "is_streamplane_metadata",
    "peek_header",
    "peek_low_watermark_timestamp",
]

FORMAT_VERSION = 1
METADATA_PREFIX = f"sp{FORMAT_VERSION}:"
FULL_MAGIC = b"SPF1"
"""Leading bytes of an ``encode_full`` blob (the value written to the side topic)."""
DEFAULT_MAX_BYTES = 4096
"""The broker's default ``offset.metadata.max.bytes``."""

HEADER_SIZE = 15
_HEADER_CHARS = HEADER_SIZE * 4 // 3
_CHECKED_HEADER = 13  # flags and both timestamps; the check covers them and the payload

_FLAG_ZSTD = 0x01
_FLAG_TRUNCATED = 0x02
_FLAG_SPILL = 0x04
_FLAG_LW_TIMESTAMP = 0x08
_KNOWN_FLAGS = _FLAG_ZSTD | _FLAG_TRUNCATED | _FLAG_SPILL | _FLAG_LW_TIMESTAMP

_KIND_EMPTY = 0
_KIND_RUNS = 1
_KIND_BITSET = 2
_KIND_PACKED = 3

TIMESTAMP_MIN_MS = -(1 << 47)
TIMESTAMP_MAX_MS = (1 << 47) - 1
OFFSET_LIMIT = 1 << 63  # Kafka offsets are int64: every offset is below this
SPILL_CHECKSUM_SIZE = 8

MAX_METADATA_BODY_BYTES = 1 << 20
"""Largest decompressed body a metadata string may carry (bounds zstd bombs)."""
DEFAULT_MAX_FULL_BODY_BYTES = 256 << 20
"""Default bound on the decompressed body of a spilled ``encode_full`` blob."""
_FIRST_TRY_BODY_BYTES = 64 << 10  # decompress into a small buffer first
_MAX_WINDOW = 8 << 20  # the largest zstd window our encoder uses

# zstd is tried only for bodies this long or longer (shorter never wins); the level
# drops for large bodies so that a budget search over a huge state stays cheap.
_ZSTD_MIN_BODY = 24
_ZSTD_LEVEL = 19
_ZSTD_LEVEL_LARGE = 9
_ZSTD_LARGE_BODY = 8 << 10

_PREFIX_RE = re.compile(r"sp([0-9]{1,4}):")
_BASE64URL_RE = re.compile(r"[A-Za-z0-9_-]*")


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PartitionProgress:
    """What a consumer has settled in one partition, as committed.

    - ``low_watermark``: the committed Kafka offset, the lowest offset not yet settled.
    - ``settled``: settled offsets strictly above the low watermark (rejected ones too).
    - ``rejected``: the settled offsets that were settled by rejection (a subset).
    - ``retries``: attempts so far per unsettled offset ``>= low_watermark``.
    - ``low_watermark_timestamp_ms``: ingestion time of the record at the low
      watermark; None when caught up or unknown.
    - ``commit_time_ms``: when this progress was committed (the caller's clock).

    The instance owns copies of the given sets; invariants are checked on
    construction (``ConfigError``).
    """

    low_watermark: int
    commit_time_ms: int
    settled: RangeSet = field(default_factory=RangeSet)
    rejected: RangeSet = field(default_factory=RangeSet)
    retries: Mapping[int, int] = field(default_factory=dict)
    low_watermark_timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        lw = self.low_watermark
        if not 0 <= lw < OFFSET_LIMIT:
            raise ConfigError(f"low watermark {lw} is not a Kafka offset")
        _check_timestamp("commit_time_ms", self.commit_time_ms)
        if self.low_watermark_timestamp_ms is not None:
            _check_timestamp("low_watermark_timestamp_ms", self.low_watermark_timestamp_ms)
        settled = self.settled.copy()
        rejected = self.rejected.copy()
        if settled:
            lowest = settled.lowest
            highest = settled.highest
            assert lowest is not None and highest is not None
            if lowest <= lw:
                raise ConfigError(f"settled offset {lowest} is not above the low watermark {lw}")
            if highest >= OFFSET_LIMIT:
                raise ConfigError(f"settled offset {highest} is not a Kafka offset")
        if not rejected.issubset(settled):
            raise ConfigError("rejected offsets must be settled too")
        retries = dict(sorted(self.retries.items()))
        if retries:
            offsets = list(retries)
            if not lw <= offsets[0] <= offsets[-1] < OFFSET_LIMIT:
                offset = offsets[0] if offsets[0] < lw else offsets[-1]
                raise ConfigError(f"retry count for offset {offset} below the low watermark {lw}")
            if any(settled.contains_each(offsets)):
                offset = next(o for o in offsets if o in settled)
                raise ConfigError(f"retry count for settled offset {offset}")
            if min(retries.values()) < 1:
                offset, attempts = min(retries.items(), key=operator.itemgetter(1))
                raise ConfigError(f"retry count {attempts} for offset {offset} is not positive")
        object.__setattr__(self, "settled", settled)
        object.__setattr__(self, "rejected", rejected)
        object.__setattr__(self, "retries", MappingProxyType(retries))

    @classmethod
    def from_settled(
        cls,
        next_offset_base: int,
        settled: RangeSet,
        *,
        commit_time_ms: int,
        rejected: RangeSet | None = None,
        retries: Mapping[int, int] | None = None,
        timestamp_for: Callable[[int], int | None] | None = None,
    ) -> PartitionProgress:
        """Progress from a consumer's live state.

        ``next_offset_base`` is the previous low watermark (every offset below it is
        settled). The low watermark advances over the contiguous settled prefix;
        state at or below it is dropped. Rejected offsets count as settled. Retry
        counts for offsets that are settled, below the new low watermark or not
        positive are dropped. ``timestamp_for(offset)`` gives the ingestion time of a
        record if known (e.g. ``in_flight_timestamps.get``); a negative answer (Kafka's
        -1) means unknown, and values beyond the 48-bit range are clamped.
        """
        if next_offset_base < 0:
            raise ConfigError(f"offset base {next_offset_base} is negative")
        above = settled.copy()
        if rejected is not None:
            above.update(rejected)
        lw = above.first_missing(next_offset_base)
        above.remove_below(lw)
        rejected_above = RangeSet()
        if rejected is not None:
            rejected_above = rejected.copy()
            rejected_above.remove_below(lw)
        kept_retries: dict[int, int] = {}
        if retries:
            offsets = list(retries)
            for offset, settled_now in zip(offsets, above.contains_each(offsets), strict=True):
                if not settled_now and offset >= lw:
                    attempts = retries[offset]
                    if attempts > 0:
                        kept_retries[offset] = attempts
        timestamp = timestamp_for(lw) if timestamp_for is not None else None
        if timestamp is not None:
            timestamp = None if timestamp < 0 else min(timestamp, TIMESTAMP_MAX_MS)
        return cls(
            low_watermark=lw,
            commit_time_ms=max(TIMESTAMP_MIN_MS, min(commit_time_ms, TIMESTAMP_MAX_MS)),
            settled=above,
            rejected=rejected_above,
            retries=kept_retries,
            low_watermark_timestamp_ms=timestamp,
        )

    def is_settled(self, offset: int) -> bool:
        """True when a restarted consumer must skip ``offset``."""
        return offset < self.low_watermark or offset in self.settled

    def attempts(self, offset: int) -> int:
        """Attempts recorded so far for ``offset`` (0 when none)."""
        return self.retries.get(offset, 0)


def _check_timestamp(name: str, value: int) -> None:
    if not TIMESTAMP_MIN_MS <= value <= TIMESTAMP_MAX_MS:
        raise ConfigError(f"{name} {value} is outside the signed 48-bit range")


@dataclass(frozen=True)
class SpillPointer:
    """Where the full state was written: a record of the compacted side topic."""

    partition: int
    offset: int
    checksum: bytes  # SPILL_CHECKSUM_SIZE bytes of BLAKE2b over the encode_full blob

    def __post_init__(self) -> None:
        if not 0 <= self.partition < 1 << 31:
            raise ConfigError(f"side-topic partition {self.partition} is out of range")
        if not 0 <= self.offset < OFFSET_LIMIT:
            raise ConfigError(f"side-topic offset {self.offset} is not a Kafka offset")
        if len(self.checksum) != SPILL_CHECKSUM_SIZE:
            raise ConfigError(f"spill checksum must be {SPILL_CHECKSUM_SIZE} bytes")

    @classmethod
    def for_blob(cls, partition: int, offset: int, blob: bytes) -> SpillPointer:
        """A pointer to ``blob`` (an ``encode_full`` result) stored at partition/offset."""
        return cls(partition=partition, offset=offset, checksum=_spill_checksum(blob))

    def matches(self, blob: bytes) -> bool:
        """True when ``blob`` is the state this pointer was made for."""
        return _spill_checksum(blob) == self.checksum


def _spill_checksum(blob: bytes) -> bytes:
    return hashlib.blake2b(blob, digest_size=SPILL_CHECKSUM_SIZE).digest()


@dataclass(frozen=True)
class EncodedProgress:
    """An encoded metadata string and what it carries.

    ``truncated`` means the metadata alone does not carry the complete state: every
    settled offset, rejected mark and retry count at or above ``horizon`` was dropped
    (``dropped_settled`` settled offsets, ``dropped_retries`` retry counts).
    ``required_bytes`` is the metadata length the complete state needs in this form.
    """

    metadata: str
    truncated: bool
    dropped_settled: int
    dropped_retries: int
    horizon: int | None
    required_bytes: int

    @property
    def fits(self) -> bool:
        """True when the complete state fit in the budget."""
        return not self.truncated

    @property
    def size(self) -> int:
        """Length of the metadata in bytes (ASCII: one byte per character)."""
        return len(self.metadata)


@dataclass(frozen=True)
class CommitHeader:
    """The fixed header of a streamplane metadata string."""

    low_watermark_timestamp_ms: int | None
    commit_time_ms: int
    compressed: bool
    truncated: bool
    spilled: bool


@dataclass(frozen=True)
class DecodedCommit:
    """The result of ``decode``.

    ``progress`` is None for *foreign* metadata (not written by streamplane).
    When ``truncated``, ``progress`` holds the state below ``horizon`` only.
    """

    progress: PartitionProgress | None
    format_version: int | None = None
    truncated: bool = False
    horizon: int | None = None
    dropped_settled: int = 0
    dropped_retries: int = 0
    spill: SpillPointer | None = None

    @property
    def is_streamplane(self) -> bool:
        return self.progress is not None


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------


class _Flat:
    """A progress flattened into parallel lists, prepared once per encode call."""

    __slots__ = (
        "commit_time_ms",
        "lw",
        "lw_timestamp",
        "r_ends",
        "r_starts",
        "retry_attempts",
        "retry_offsets",
        "s_ends",
        "s_prefix",
        "s_starts",
        "settled_total",
    )

    def __init__(self, progress: PartitionProgress) -> None:
        self.lw: int = progress.low_watermark
        self.lw_timestamp: int | None = progress.low_watermark_timestamp_ms
        self.commit_time_ms: int = progress.commit_time_ms
        self.s_starts: list[int]
        self.s_ends: list[int]
        self.r_starts: list[int]
        self.r_ends: list[int]
        self.s_starts, self.s_ends = progress.settled.bounds()
        self.r_starts, self.r_ends = progress.rejected.bounds()
        self.retry_offsets: list[int] = list(progress.retries)  # sorted by construction
        self.retry_attempts: list[int] = list(progress.retries.values())
        self.settled_total: int = len(progress.settled)
        self.s_prefix: list[int] = list(
            accumulate(map(operator.sub, self.s_ends, self.s_starts), initial=0)
        )

    def kept_settled(self, horizon: int) -> int:
        k = bisect_left(self.s_starts, horizon)
        kept = self.s_prefix[k]
        if k and self.s_ends[k - 1] > horizon:
            kept -= self.s_ends[k - 1] - horizon
        return kept


_plus_one = (1).__add__
_minus_one = (-1).__add__


def _put_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_uvarint_pairs(out: bytearray, firsts: list[int], seconds: list[int]) -> None:
    """``firsts[0], seconds[0], firsts[1], ...`` as uvarints; one slice assignment
    each when every value fits in a byte (the usual case)."""
    if max(firsts) < 0x80 and max(seconds) < 0x80:
        pairs = bytearray(2 * len(firsts))
        pairs[0::2] = firsts
        pairs[1::2] = seconds
        out += pairs
    else:
        for first, second in zip(firsts, seconds, strict=True):
            _put_uvarint(out, first)
            _put_uvarint(out, second)


def _uvarint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _clip(starts: list[int], ends: list[int], horizon: int) -> tuple[list[int], list[int]]:
    k = bisect_left(starts, horizon)
    kept_starts = starts[:k]
    kept_ends = ends[:k]
    if k and kept_ends[-1] > horizon:
        kept_ends[-1] = horizon
    return kept_starts, kept_ends


def _varint_bytes(histogram: Counter[int]) -> int:
    """Total uvarint size of values whose bit lengths are counted in ``histogram``."""
    return sum(count * max(1, (bits + 6) // 7) for bits, count in histogram.items())


def _golomb_order(values: list[int], histogram: Counter[int]) -> tuple[int, int]:
    """The Exp-Golomb order ``k`` that packs ``values`` smallest, and their bit count.

    A value ``v`` of bit length ``b`` costs ``k + 1`` bits when ``b <= k`` and about
    ``2b - k - 1`` otherwise (2 more when ``v + 2**k`` carries into a new bit); ``k``
    is chosen on that estimate from the histogram, then the cost is counted exactly.
    """
    top = max(histogram)
    best_k = 0
    best_cost = -1
    for k in range(top + 1):
        cost = 0
        for bits, count in histogram.items():
            cost += count * (k + 1 if bits <= k else 2 * bits - k - 1)
        if best_cost < 0 or cost < best_cost:
            best_k, best_cost = k, cost
    offset = 1 << best_k
    exact = 2 * sum(map(int.bit_length, [v + offset for v in values]))
    return best_k, exact - len(values) * (best_k + 1)


def _golomb_codes(values: list[int], k: int) -> list[str]:
    """Exp-Golomb order-k codes: ``v + 2**k`` in binary after as many zeros as it has
    bits beyond ``k + 1``. Gaps and lengths repeat a lot: each distinct value is
    formatted once."""
    offset = 1 << k
    zeros = k + 1
    table = {}
    for v in set(values):
        w = v + offset
        table[v] = "0" * (w.bit_length() - zeros) + format(w, "b")
    return list(map(table.__getitem__, values))


def _put_section(out: bytearray, origin: int, starts: list[int], ends: list[int]) -> None:
    n = len(starts)
    if not n:
        out.append(_KIND_EMPTY)
        return
    # gap: distance from the lowest start the range could have (origin, or one past
    # the previous range's end, since ranges never touch); length is stored minus one.
    lowest_starts = [origin]
    lowest_starts += map(_plus_one, ends[:-1])
    gaps = list(map(operator.sub, starts, lowest_starts))
    lengths = list(map(operator.sub, ends, map(_plus_one, starts)))
    gap_bits = Counter(map(int.bit_length, gaps))
    length_bits = Counter(map(int.bit_length, lengths))
    header = _uvarint_size(n)
    runs_size = header + _varint_bytes(gap_bits) + _varint_bytes(length_bits)
    span = ends[-1] - origin
    bitset_size = _uvarint_size(span) + (span + 7) // 8
    best = min(runs_size, bitset_size)
    # Exp-Golomb packing costs at least one bit per value: skip it when it cannot win
    packed: tuple[int, int, int] | None = None
    if header + 2 + (2 * n + 7) // 8 < best:
        gap_k, gap_cost = _golomb_order(gaps, gap_bits)
        length_k, length_cost = _golomb_order(lengths, length_bits)
        packed_bytes = (gap_cost + length_cost + 7) // 8
        if header + 2 + _uvarint_size(packed_bytes) + packed_bytes < best:
            packed = (gap_k, length_k, packed_bytes)
    if packed is not None:
        gap_k, length_k, packed_bytes = packed
        out.append(_KIND_PACKED)
        _put_uvarint(out, n)
        out.append(gap_k)
        out.append(length_k)
        _put_uvarint(out, packed_bytes)
        codes = _golomb_codes(gaps, gap_k)
        interleaved = [""] * (2 * n)
        interleaved[0::2] = codes
        interleaved[1::2] = _golomb_codes(lengths, length_k)
        text = "".join(interleaved)
        text += "0" * (8 * packed_bytes - len(text))
        out += int(text, 2).to_bytes(packed_bytes, "big")
    elif bitset_size < runs_size:
        out.append(_KIND_BITSET)
        _put_uvarint(out, span)
        # '0' * gap + '1' * length per range, lowest offset first
        holes = list(map(operator.sub, starts, [origin, *ends[:-1]]))
        pieces = [""] * (2 * n)
        pieces[0::2] = map("0".__mul__, holes)
        pieces[1::2] = map("1".__mul__, map(operator.sub, ends, starts))
        text = "".join(pieces)[::-1]  # int() reads the most significant digit first
        out += int(text, 2).to_bytes((span + 7) // 8, "little")
    else:
        out.append(_KIND_RUNS)
        _put_uvarint(out, n)
        _put_uvarint_pairs(out, gaps, lengths)


def _body(flat: _Flat, horizon: int | None, spill: SpillPointer | None) -> bytes:
    lw = flat.lw
    s_starts, s_ends = flat.s_starts, flat.s_ends
    r_starts, r_ends = flat.r_starts, flat.r_ends
    retry_offsets, retry_attempts = flat.retry_offsets, flat.retry_attempts
    out = bytearray()
    _put_uvarint(out, lw)
    if spill is not None:
        _put_uvarint(out, spill.partition)
        _put_uvarint(out, spill.offset)
        out += spill.checksum
    if horizon is not None:
        s_starts, s_ends = _clip(s_starts, s_ends, horizon)
        r_starts, r_ends = _clip(r_starts, r_ends, horizon)
        m = bisect_left(retry_offsets, horizon)
        retry_offsets, retry_attempts = retry_offsets[:m], retry_attempts[:m]
        _put_uvarint(out, horizon - lw)
        _put_uvarint(out, flat.settled_total - flat.kept_settled(horizon))
        _put_uvarint(out, len(flat.retry_offsets) - m)
    _put_section(out, lw + 1, s_starts, s_ends)
    _put_section(out, lw + 1, r_starts, r_ends)
    _put_uvarint(out, len(retry_offsets))
    if retry_offsets:
        # per retry: the gap from the previous one (or the low watermark), attempts - 1
        gaps = list(map(operator.sub, retry_offsets, [lw, *map(_plus_one, retry_offsets)]))
        _put_uvarint_pairs(out, gaps, list(map(_minus_one, retry_attempts)))
    return bytes(out)


def _compressor(body_size: int) -> zstandard.ZstdCompressor:
    level = _ZSTD_LEVEL if body_size <= _ZSTD_LARGE_BODY else _ZSTD_LEVEL_LARGE
    params = zstandard.ZstdCompressionParameters.from_level(
        level,
        source_size=body_size,
        format=zstandard.FORMAT_ZSTD1_MAGICLESS,
        write_content_size=False,
        write_checksum=False,
        write_dict_id=False,
    )
    return zstandard.ZstdCompressor(compression_params=params)


def _frame(
    flags: int, lw_timestamp: int | None, commit_time_ms: int, body: bytes
) -> tuple[bytes, int]:
    """Header + payload; also returns the body length (the decompressed size)."""
    payload = body
    if len(body) >= _ZSTD_MIN_BODY:
        compressed = _compressor(len(body)).compress(body)
        if len(compressed) < len(body):
            payload = compressed
            flags |= _FLAG_ZSTD
    if lw_timestamp is not None:
        flags |= _FLAG_LW_TIMESTAMP
    head = (
        bytes((flags,))
        + (lw_timestamp or 0).to_bytes(6, "big", signed=True)
        + commit_time_ms.to_bytes(6, "big", signed=True)
    )
    check = zlib.crc32(payload, zlib.crc32(head)) & 0xFFFF
    return head + check.to_bytes(2, "big") + payload, len(body)


def _to_metadata(frame: bytes) -> str:
    return METADATA_PREFIX + base64.urlsafe_b64encode(frame).rstrip(b"=").decode("ascii")


def _metadata_chars(frame_bytes: int) -> int:
    return len(METADATA_PREFIX) + (4 * frame_bytes + 2) // 3


def _encode(
    progress: PartitionProgress, spill: SpillPointer | None, max_bytes: int, *, truncate: bool
) -> EncodedProgress | None:
    """The metadata for ``progress`` within ``max_bytes``: complete when it fits, else
    (``truncate``) the longest prefix that fits, or (not ``truncate``) None."""
    if max_bytes < 1:
        raise ConfigError(f"metadata budget {max_bytes} is not positive")
    flat = _Flat(progress)
    base_flags = _FLAG_SPILL if spill is not None else 0

    def attempt(horizon: int | None) -> tuple[bytes, bool]:
        flags = base_flags if horizon is None else base_flags | _FLAG_TRUNCATED
        body = _body(flat, horizon, spill)
        frame, body_size = _frame(flags, flat.lw_timestamp, flat.commit_time_ms, body)
        fits = _metadata_chars(len(frame)) <= max_bytes and body_size <= MAX_METADATA_BODY_BYTES
        return frame, fits

    full, fits = attempt(None)
    required = _metadata_chars(len(full))
    if fits:
        return EncodedProgress(
            metadata=_to_metadata(full),
            truncated=False,
            dropped_settled=0,
            dropped_retries=0,
            horizon=None,
            required_bytes=required,
        )
    if not truncate:
        return None
    # Keep the state below a horizon, as high as fits: candidates are the points where
    # the kept state changes. The size grows about evenly with the kept state, so the
    # search interpolates where it crosses the budget (the Illinois variant of regula
    # falsi: an end kept twice in a row has its size pulled halfway to the budget, so
    # the bracket closes from both sides), bisecting whenever that does not halve the
    # bracket: a few attempts instead of a bisection's log2(candidates), each encoding
    # the body. `best` always holds a frame that fits.
    lw = flat.lw
    points = {lw, lw + 1}
    points.update(flat.s_starts)
    points.update(flat.s_ends)
    points.update(flat.retry_offsets)
    points.update(offset + 1 for offset in flat.retry_offsets)
    candidates = sorted(points)
    best, fits = attempt(lw)
    if not fits:
        raise ConfigError(
            f"metadata budget {max_bytes} is too small even for the low watermark alone"
        )
    lo, hi = 0, len(candidates)  # candidates[lo] fits; hi does not (len: the full state)
    lo_size, hi_size = float(_metadata_chars(len(best))), float(required)
    kept = 0  # +1: lo was kept by the last attempts, -1: hi was
    interpolate = True
    while hi - lo > 1:
        width = hi - lo
        if interpolate and hi_size > lo_size:
            mid = lo + int((max_bytes - lo_size) * width / (hi_size - lo_size))
            mid = min(max(mid, lo + 1), hi - 1)
        else:
            mid = (lo + hi) // 2
        frame, fits = attempt(candidates[mid])
        size = _metadata_chars(len(frame))
        if fits:
            lo, lo_size, best = mid, size, frame
            if kept < 0:  # hi kept again: pull its size towards the budget
                hi_size = (hi_size + max_bytes) / 2
            kept = -1
        else:
            hi, hi_size = mid, size
            if kept > 0:
                lo_size = (lo_size + max_bytes) / 2
            kept = 1
        interpolate = hi - lo <= width // 2
    horizon = candidates[lo]
    return EncodedProgress(
        metadata=_to_metadata(best),
        truncated=True,
        dropped_settled=flat.settled_total - flat.kept_settled(horizon),
        dropped_retries=len(flat.retry_offsets) - bisect_left(flat.retry_offsets, horizon),
        horizon=horizon,
        required_bytes=required,
    )


def encode(progress: PartitionProgress, max_bytes: int = DEFAULT_MAX_BYTES) -> EncodedProgress:
    """The metadata string for ``progress``, at most ``max_bytes`` long.

    Carries the complete state when it fits, else a truncated prefix (see the module
    docstring). ``ConfigError`` when ``max_bytes`` cannot hold even the header and the
    low watermark (any budget of 128 or more always can).
    """
    encoded = _encode(progress, None, max_bytes, truncate=True)
    assert encoded is not None
    return encoded


def encode_complete(
    progress: PartitionProgress, max_bytes: int = DEFAULT_MAX_BYTES
) -> EncodedProgress | None:
    """The metadata carrying the complete ``progress`` when it fits ``max_bytes``, else
    None, without the search for the longest prefix that fits (``encode`` makes it):
    for a caller that spills whatever does not fit.
    """
    return _encode(progress, None, max_bytes, truncate=False)


def encode_spill_pointer(
    progress: PartitionProgress, pointer: SpillPointer, max_bytes: int = DEFAULT_MAX_BYTES
) -> EncodedProgress:
    """A metadata string pointing at the full state spilled to the side topic.

    Also carries as much of ``progress`` as fits (from the bottom up), so a reader that
    cannot fetch the side record still resumes safely.
    """
    encoded = _encode(progress, pointer, max_bytes, truncate=True)
    assert encoded is not None
    return encoded


def encode_full(progress: PartitionProgress) -> bytes:
    """The complete state as a binary blob, without a budget (for the side topic)."""
    frame, _ = _frame(
        0,
        progress.low_watermark_timestamp_ms,
        progress.commit_time_ms,
        _body(_Flat(progress), None, None),
    )
    return FULL_MAGIC + frame


# --------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------


def is_streamplane_metadata(metadata: str | None) -> bool:
    """True when ``metadata`` claims to be streamplane's (any format version)."""
    return metadata is not None and _PREFIX_RE.match(metadata) is not None


def _version_of(metadata: str) -> int | None:
    match = _PREFIX_RE.match(metadata)
    if match is None:
        return None
    if match.group(0) != METADATA_PREFIX:  # another version, or a non-canonical "sp01:"
        raise CodecError(f"unsupported commit-log format {match.group(0)!r}")
    return FORMAT_VERSION


def _b64decode(text: str) -> bytes:
    if len(text) % 4 == 1 or _BASE64URL_RE.fullmatch(text) is None:
        raise CodecError("commit metadata is not unpadded URL-safe base64")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise CodecError(f"commit metadata is not base64: {exc}") from None
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii") != text:
        raise CodecError("commit metadata is not canonical base64")
    return data


def _parse_header(head: bytes) -> CommitHeader:
    flags = head[0]
    if flags & ~_KNOWN_FLAGS:
        raise CodecError(f"unknown flags {flags:#04x} in commit metadata")
    lw_timestamp: int | None = int.from_bytes(head[1:7], "big", signed=True)
    if not flags & _FLAG_LW_TIMESTAMP:
        if lw_timestamp:
            raise CodecError("low-watermark timestamp set without its flag")
        lw_timestamp = None
    return CommitHeader(
        low_watermark_timestamp_ms=lw_timestamp,
        commit_time_ms=int.from_bytes(head[7:13], "big", signed=True),
        compressed=bool(flags & _FLAG_ZSTD),
        truncated=bool(flags & _FLAG_TRUNCATED),
        spilled=bool(flags & _FLAG_SPILL),
    )


def peek_header(metadata: str | None) -> CommitHeader | None:
    """The fixed header (both timestamps, flags) without decoding the body.

    None for foreign metadata; ``CodecError`` when a streamplane header is malformed.
    The check over the body is not verified here (``decode`` does).
    """
    if metadata is None or _version_of(metadata) is None:
        return None
    start = len(METADATA_PREFIX)
    text = metadata[start : start + _HEADER_CHARS]
    if len(text) < _HEADER_CHARS:
        raise CodecError("commit metadata is shorter than its header")
    return _parse_header(_b64decode(text))


_HEADER_TEXT = re.compile(re.escape(METADATA_PREFIX) + f"([A-Za-z0-9_-]{{{_HEADER_CHARS}}})")
_URLSAFE_TO_STANDARD = str.maketrans("-_", "+/")
_NO_TIMESTAMP = bytes(6)


def peek_low_watermark_timestamp(metadata: str | None) -> int | None:
    """Ingestion time of the record at the low watermark, for the lag monitor.

    None when caught up, unknown, or the metadata is foreign.
    """
    # Fast path (called once per commit read from __consumer_offsets): a well-formed
    # version-1 header decodes with one match and one base64 call. Anything else --
    # foreign text, another version, a malformed header -- takes the general path,
    # which decides (and raises) exactly as ``peek_header`` does.
    if metadata is not None and (m := _HEADER_TEXT.match(metadata)) is not None:
        head = binascii.a2b_base64(m.group(1).translate(_URLSAFE_TO_STANDARD))
        flags = head[0]
        if not flags & ~_KNOWN_FLAGS:
            if flags & _FLAG_LW_TIMESTAMP:
                return int.from_bytes(head[1:7], "big", signed=True)
            if head[1:7] == _NO_TIMESTAMP:
                return None
    header = peek_header(metadata)
    return None if header is None else header.low_watermark_timestamp_ms


def _decompress(payload: bytes, limit: int) -> bytes:
    # Our frames never declare a content size (and so are never single-segment): a
    # frame that does is foreign, and refusing it keeps a forged size from steering
    # the allocation. Output is bounded by `limit`, the window by _MAX_WINDOW.
    if not payload or payload[0] & 0xE0:
        raise CodecError("commit body is not a streamplane zstd frame")
    decompressor = zstandard.ZstdDecompressor(
        max_window_size=_MAX_WINDOW, format=zstandard.FORMAT_ZSTD1_MAGICLESS
    )
    first_try = min(limit, _FIRST_TRY_BODY_BYTES)
    for size in (first_try, limit) if limit > first_try else (first_try,):
        try:
            body: bytes = decompressor.decompress(payload, max_output_size=size)
        except zstandard.ZstdError:
            continue
        except MemoryError:
            break
        return body
    raise CodecError(f"commit body is corrupt or inflates beyond {limit} bytes")


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def uvarint(self) -> int:
        data = self.data
        pos = self.pos
        if pos >= len(data):
            raise CodecError("commit body ends inside a number")
        byte = data[pos]
        if byte < 0x80:
            self.pos = pos + 1
            return byte
        value = 0
        shift = 0
        while True:
            if pos >= len(data):
                raise CodecError("commit body ends inside a number")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 63:
                raise CodecError("number too long in commit body")
        if byte == 0:
            raise CodecError("non-canonical number in commit body")
        self.pos = pos
        return value

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise CodecError("commit body is shorter than it claims")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def remaining(self) -> int:
        return len(self.data) - self.pos


def _read_golomb(bits: str, pos: int, k: int) -> tuple[int, int]:
    one = bits.find("1", pos)
    if one < 0:
        raise CodecError("packed ranges end early in commit body")
    end = 2 * one - pos + k + 1  # as many bits after the leading zeros, plus k + 1
    if end > len(bits):
        raise CodecError("packed ranges end early in commit body")
    return int(bits[one:end], 2) - (1 << k), end


def _ranges_from_pairs(origin: int, gaps: list[int], lengths: list[int]) -> RangeSet:
    # lowest_start[k + 1] = end[k] + 1 = lowest_start[k] + gap[k] + length[k] + 2
    steps = [gap + length + 2 for gap, length in zip(gaps, lengths, strict=True)]
    lowest_starts = accumulate(steps, initial=origin)
    starts = list(map(operator.add, lowest_starts, gaps))
    ends = [start + length + 1 for start, length in zip(starts, lengths, strict=True)]
    return _checked_ranges(starts, ends)


def _checked_ranges(starts: list[int], ends: list[int]) -> RangeSet:
    if ends[-1] > OFFSET_LIMIT:
        raise CodecError("offset beyond the int64 range in commit body")
    return RangeSet.from_bounds(starts, ends)


def _read_section(reader: _Reader, origin: int) -> RangeSet:
    kind = reader.take(1)[0]
    if kind == _KIND_EMPTY:
        return RangeSet()
    if kind == _KIND_RUNS:
        n = reader.uvarint()
        if n == 0 or 2 * n > reader.remaining():
            raise CodecError(f"commit body claims {n} ranges it does not hold")
        pos = reader.pos
        chunk = reader.data[pos : pos + 2 * n]
        if max(chunk) < 0x80:  # every varint is one byte
            gaps: list[int] = list(chunk[0::2])
            lengths: list[int] = list(chunk[1::2])
            reader.pos = pos + 2 * n
        else:
            gaps = []
            lengths = []
            for _ in range(n):
                gaps.append(reader.uvarint())
                lengths.append(reader.uvarint())
        return _ranges_from_pairs(origin, gaps, lengths)
    if kind == _KIND_PACKED:
        n = reader.uvarint()
        gap_k, length_k = reader.take(2)
        size = reader.uvarint()
        if n == 0 or gap_k > 63 or length_k > 63 or 2 * n > 8 * size:
            raise CodecError("malformed packed ranges in commit body")
        chunk = reader.take(size)
        bits = format(int.from_bytes(chunk, "big"), "b").zfill(8 * size)
        gaps = []
        lengths = []
        pos = 0
        for _ in range(n):
            gap, pos = _read_golomb(bits, pos, gap_k)
            gaps.append(gap)
            length, pos = _read_golomb(bits, pos, length_k)
            lengths.append(length)
        if len(bits) - pos >= 8 or "1" in bits[pos:]:
            raise CodecError("packed ranges have stray bits in commit body")
        return _ranges_from_pairs(origin, gaps, lengths)
    if kind == _KIND_BITSET:
        span = reader.uvarint()
        if span == 0:
            raise CodecError("empty bitset in commit body")
        value = int.from_bytes(reader.take((span + 7) // 8), "little")
        if value.bit_length() != span:
            raise CodecError("bitset length does not match its bits")
        # runs of ones between single zeros; piece i starts at sum(len(p) + 1 for p before)
        pieces = format(value, "b")[::-1].split("0")
        sizes = list(map(len, pieces))
        positions = accumulate(map(operator.add, sizes, repeat(1)), initial=origin)
        starts = list(compress(positions, sizes))
        ends = list(map(operator.add, starts, filter(None, sizes)))
        return _checked_ranges(starts, ends)
    raise CodecError(f"unknown range encoding {kind} in commit body")


@dataclass(frozen=True)
class _Body:
    progress: PartitionProgress
    spill: SpillPointer | None
    horizon: int | None
    dropped_settled: int
    dropped_retries: int


def _parse_frame(frame: bytes, *, limit: int, allow_partial: bool) -> tuple[CommitHeader, _Body]:
    if len(frame) < HEADER_SIZE + 1:
        raise CodecError("commit frame is too short")
    header = _parse_header(frame[:HEADER_SIZE])
    payload = frame[HEADER_SIZE:]
    check = zlib.crc32(payload, zlib.crc32(frame[:_CHECKED_HEADER])) & 0xFFFF
    if check != int.from_bytes(frame[_CHECKED_HEADER:HEADER_SIZE], "big"):
        raise CodecError("commit metadata fails its check")
    if not allow_partial and (header.truncated or header.spilled):
        raise CodecError("a full-state blob must not be truncated or spilled")
    body = _decompress(payload, limit) if header.compressed else payload
    if len(body) > limit:
        raise CodecError(f"commit body is longer than {limit} bytes")
    reader = _Reader(body)
    try:
        lw = reader.uvarint()
        spill = None
        if header.spilled:
            spill = SpillPointer(
                partition=reader.uvarint(),
                offset=reader.uvarint(),
                checksum=reader.take(SPILL_CHECKSUM_SIZE),
            )
        horizon = None
        dropped_settled = dropped_retries = 0
        if header.truncated:
            horizon = lw + reader.uvarint()
            dropped_settled = reader.uvarint()
            dropped_retries = reader.uvarint()
        settled = _read_section(reader, lw + 1)
        rejected = _read_section(reader, lw + 1)
        n = reader.uvarint()
        if 2 * n > reader.remaining():
            raise CodecError(f"commit body claims {n} retry counts it does not hold")
        retries: dict[int, int] = {}
        previous = lw - 1
        for _ in range(n):
            previous += reader.uvarint() + 1
            retries[previous] = reader.uvarint() + 1
        if reader.remaining():
            raise CodecError("trailing bytes after the commit body")
        if horizon is not None and (
            (settled and settled.highest is not None and settled.highest >= horizon)
            or (retries and previous >= horizon)
        ):
            raise CodecError("truncated commit holds state above its horizon")
        progress = PartitionProgress(
            low_watermark=lw,
            commit_time_ms=header.commit_time_ms,
            settled=settled,
            rejected=rejected,
            retries=retries,
            low_watermark_timestamp_ms=header.low_watermark_timestamp_ms,
        )
    except ConfigError as exc:
        raise CodecError(f"commit body is inconsistent: {exc}") from None
    return header, _Body(progress, spill, horizon, dropped_settled, dropped_retries)


def decode(metadata: str | None) -> DecodedCommit:
    """Decode a commit's metadata string.

    Foreign metadata (``None``, ``""``, another client's text) gives a result whose
    ``progress`` is None. Streamplane metadata that does not decode, or from an
    unsupported format version, raises ``CodecError``.
    """
    if metadata is None:
        return DecodedCommit(progress=None)
    version = _version_of(metadata)
    if version is None:
        return DecodedCommit(progress=None)
    frame = _b64decode(metadata[len(METADATA_PREFIX) :])
    header, body = _parse_frame(frame, limit=MAX_METADATA_BODY_BYTES, allow_partial=True)
    return DecodedCommit(
        progress=body.progress,
        format_version=version,
        truncated=header.truncated,
        horizon=body.horizon,
        dropped_settled=body.dropped_settled,
        dropped_retries=body.dropped_retries,
        spill=body.spill,
    )


def decode_full(
    blob: bytes, *, max_body_bytes: int = DEFAULT_MAX_FULL_BODY_BYTES
) -> PartitionProgress:
    """Decode an ``encode_full`` blob (read back from the side topic)."""
    if not blob.startswith(FULL_MAGIC):
        raise CodecError("not a streamplane full-state blob")
    _, body = _parse_frame(blob[len(FULL_MAGIC) :], limit=max_body_bytes, allow_partial=False)
    return body.progress
