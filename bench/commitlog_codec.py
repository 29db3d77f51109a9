"""Commit-log codec: encoded size against Confluent Parallel Consumer, and throughput.

Baseline: a Python port of Parallel Consumer's offset-map encoding (see
``pc_baseline_metadata``): over the offsets from the committed base to the highest
succeeded one it builds a BitSet and a run-length encoding of incomplete/complete
runs (v1 with 16-bit fields when they fit, v2 with 32-bit fields), adds their zstd
(level 3, streaming frame) variants when none is under 200 bytes, keeps the smallest,
prefixes the encoding's magic byte and base64-encodes it (standard alphabet, padded).
Parallel Consumer carries only the settled map; ours also carries both timestamps,
retry counts and rejected marks, which cost nothing when empty.

Scenarios:
  (a) a stuck record at the low watermark, every other offset settled over 20,000
      offsets (10,000 scattered acks);
  (b) 100 settled ranges of random lengths and gaps (seeded);
  (c) a 50,000-offset settled window with 1% holes (seeded);
  (d) 3,000 random short ranges spread over ~600,000 offsets: over 4 KiB for both.
      Parallel Consumer drops its map and stalls; we keep the bottom of the state.

    .venv/bin/python bench/commitlog_codec.py [--runs 7]
"""

from __future__ import annotations

import argparse
import base64
import random
import statistics
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import zstandard

from streamplane.core.commitlog import (
    DEFAULT_MAX_BYTES,
    HEADER_SIZE,
    METADATA_PREFIX,
    PartitionProgress,
    decode,
    encode,
    peek_low_watermark_timestamp,
)
from streamplane.core.rangeset import RangeSet

T0 = 1_700_000_000_000
_FIXED_CHARS = len(METADATA_PREFIX) + HEADER_SIZE * 4 // 3

# --------------------------------------------------------------------------------------
# Baseline: Parallel Consumer's OffsetMapCodecManager / OffsetSimultaneousEncoder
# --------------------------------------------------------------------------------------

_PC_MAGIC = {  # OffsetEncoding magic bytes
    "BitSet": b"l",
    "BitSetV2": b"o",
    "RunLength": b"n",
    "RunLengthV2": b"e",
    "BitSetCompressed": b"a",
    "BitSetV2Compressed": b"s",
    "RunLengthCompressed": b"J",
    "RunLengthV2Compressed": b"p",
}
_PC_COMPRESS_THRESHOLD = 200  # LARGE_ENCODED_SIZE_THRESHOLD_BYTES
_SHORT_MAX = 32_767


def _pc_zstd(data: bytes) -> bytes:
    # zstd-jni's ZstdOutputStream: level 3, magic, no content size, no checksum
    params = zstandard.ZstdCompressionParameters.from_level(
        3, write_content_size=False, write_checksum=False
    )
    compressed: bytes = zstandard.ZstdCompressor(compression_params=params).compress(data)
    return compressed


def pc_baseline_metadata(base: int, settled: RangeSet) -> str:
    """Parallel Consumer's metadata for committed offset ``base`` and these settled ones."""
    settled = settled.copy()
    settled.remove_below(base)
    if settled.is_empty():
        return ""  # nothing above the base: PC commits an empty map
    highest = settled.highest
    assert highest is not None
    length = highest - base + 1  # lengthBetweenBaseAndHighOffset
    encodings: dict[str, bytes] = {}
    # BitSet: set bits are completed offsets; the length is written first, and the
    # ByteBuffer is one byte longer than the bits (PC serialises the whole buffer).
    bits = bytearray((length + 7) // 8)
    for start, end in settled.ranges():
        for offset in range(start, end):
            relative = offset - base
            bits[relative >> 3] |= 1 << (relative & 7)
    bitset = bytes(bits).rstrip(b"\0")  # java.util.BitSet.toByteArray
    pad = bytes((length + 7) // 8 - len(bitset) + 1)
    if length <= _SHORT_MAX:
        encodings["BitSet"] = struct.pack(">h", length) + bitset + pad
    encodings["BitSetV2"] = struct.pack(">i", length) + bitset + pad
    # RunLength: alternating runs, incomplete first (the base is always incomplete)
    runs: list[int] = []
    position = base
    for start, end in settled.ranges():
        runs.append(start - position)
        runs.append(end - start)
        position = end
    if all(run <= _SHORT_MAX for run in runs):
        encodings["RunLength"] = b"".join(struct.pack(">h", run) for run in runs)
    encodings["RunLengthV2"] = b"".join(struct.pack(">i", run) for run in runs)
    if all(len(data) >= _PC_COMPRESS_THRESHOLD for data in encodings.values()):
        for name, data in list(encodings.items()):
            encodings[name + "Compressed"] = _pc_zstd(data)
    name, data = min(encodings.items(), key=lambda item: len(item[1]))
    return base64.b64encode(_PC_MAGIC[name] + data).decode("ascii")


# --------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    progress: PartitionProgress


def scenarios() -> list[Scenario]:
    rng = random.Random(20_240_601)
    stuck = RangeSet((1 + 2 * i, 2 + 2 * i) for i in range(10_000))
    hundred = RangeSet()
    position = 1
    for _ in range(100):
        position += rng.randrange(1, 200)
        length = rng.randrange(1, 500)
        hundred.add_range(position, position + length)
        position += length
    dense = RangeSet([(1, 50_001)])
    for hole in rng.sample(range(2, 50_001), 500):
        dense.discard(hole)
    over = RangeSet()
    position = 1
    for _ in range(3_000):
        position += rng.randrange(2, 400)
        length = rng.randrange(1, 4)
        over.add_range(position, position + length)
        position += length
    return [
        Scenario("a", "10k scattered acks, stuck record", _progress(stuck)),
        Scenario("b", "100 ranges", _progress(hundred)),
        Scenario("c", "50k window, 1% holes", _progress(dense)),
        Scenario("d", "3k random ranges (over 4 KiB)", _progress(over)),
    ]


def _progress(settled: RangeSet) -> PartitionProgress:
    return PartitionProgress(
        low_watermark=0,
        commit_time_ms=T0,
        settled=settled,
        low_watermark_timestamp_ms=T0 - 30_000,
    )


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


def per_second(fn: Callable[[], object], *, runs: int, ops: int = 1, min_s: float = 0.05) -> float:
    """Median operations per second over ``runs`` timed batches."""
    loops = 1
    while True:  # size a batch to take at least min_s
        t = time.perf_counter()
        for _ in range(loops):
            fn()
        if time.perf_counter() - t >= min_s:
            break
        loops *= 2
    rates = []
    for _ in range(runs):
        t = time.perf_counter()
        for _ in range(loops):
            fn()
        rates.append(loops * ops / (time.perf_counter() - t))
    return statistics.median(rates)


def _fmt_rate(rate: float) -> str:
    if rate >= 1e6:
        return f"{rate / 1e6:.2f}M/s"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f}k/s"
    return f"{rate:.0f}/s"


def add_patterns() -> list[tuple[str, list[int]]]:
    rng = random.Random(7)
    n = 100_000
    in_order = list(range(n))
    jittered = []
    for block in range(0, n, 64):  # acks arrive out of order within 64 in-flight records
        window = list(range(block, min(block + 64, n)))
        rng.shuffle(window)
        jittered.extend(window)
    scattered = rng.sample(range(2 * n), n)
    return [
        ("in order", in_order),
        ("shuffled in 64-record windows", jittered),
        ("random", scattered),
    ]


def _fill_rangeset(offsets: list[int]) -> None:
    s = RangeSet()
    add = s.add
    for offset in offsets:
        add(offset)


def _fill_set(offsets: list[int]) -> None:
    s: set[int] = set()
    add = s.add
    for offset in offsets:
        add(offset)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed batches per figure")
    args = parser.parse_args()
    runs = args.runs

    print("Encoded size of the full state (bytes of metadata; the broker's budget is 4096)")
    header = f"{'scenario':<38}{'ranges':>7}{'ours':>7}{'PC':>8}{'PC/ours':>9}  notes"
    print(header)
    print("-" * len(header))
    results = []
    for sc in scenarios():
        ours = encode(sc.progress)
        pc = pc_baseline_metadata(sc.progress.low_watermark, sc.progress.settled)
        notes = []
        if ours.truncated:
            kept = len(sc.progress.settled) - ours.dropped_settled
            total = len(sc.progress.settled)
            notes.append(
                f"ours commits a truncated {ours.size:,}-byte metadata keeping {kept:,}"
                f" of {total:,} settled"
            )
        if len(pc) > DEFAULT_MAX_BYTES:
            notes.append("PC over 4096: map dropped, consumer stalls")
        results.append((sc, ours))
        full = ours.required_bytes
        print(
            f"({sc.key}) {sc.title:<34}{sc.progress.settled.range_count:>7,}"
            f"{full:>7,}{len(pc):>8,}{len(pc) / full:>8.1f}x  {'; '.join(notes)}"
        )

    print(
        f"ours includes {_FIXED_CHARS} fixed chars ('sp1:' + 15-byte header: both timestamps,"
        " flags, check); PC carries no timestamps"
    )
    print()
    print(f"Throughput (median of {runs} runs)")
    header = f"{'scenario':<38}{'encode':>11}{'decode':>11}{'peek ts':>11}{'PC encode*':>12}"
    print(header)
    print("-" * len(header))
    for sc, ours in results:
        metadata = ours.metadata
        p = sc.progress
        enc = per_second(lambda p=p: encode(p), runs=runs)  # type: ignore[misc]
        dec = per_second(lambda m=metadata: decode(m), runs=runs)  # type: ignore[misc]
        peek = per_second(lambda m=metadata: peek_low_watermark_timestamp(m), runs=runs)  # type: ignore[misc]
        pc_enc = per_second(
            lambda p=p: pc_baseline_metadata(p.low_watermark, p.settled),  # type: ignore[misc]
            runs=runs,
        )
        print(
            f"({sc.key}) {sc.title:<34}{_fmt_rate(enc):>11}{_fmt_rate(dec):>11}"
            f"{_fmt_rate(peek):>11}{_fmt_rate(pc_enc):>12}"
        )
    print("* the baseline is this file's Python port, timed for reference only")

    print()
    print(f"RangeSet.add vs set.add, 100,000 adds (median of {runs} runs)")
    header = f"{'pattern':<32}{'RangeSet':>12}{'set':>12}{'set/RangeSet':>14}{'ranges':>9}"
    print(header)
    print("-" * len(header))
    for name, offsets in add_patterns():
        ours_rate = per_second(lambda o=offsets: _fill_rangeset(o), runs=runs, ops=len(offsets))  # type: ignore[misc]
        set_rate = per_second(lambda o=offsets: _fill_set(o), runs=runs, ops=len(offsets))  # type: ignore[misc]
        final = RangeSet.from_offsets(offsets)
        print(
            f"{name:<32}{_fmt_rate(ours_rate):>12}{_fmt_rate(set_rate):>12}"
            f"{set_rate / ours_rate:>13.2f}x{final.range_count:>9,}"
        )


if __name__ == "__main__":
    main()
