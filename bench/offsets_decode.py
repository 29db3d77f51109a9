"""``__consumer_offsets`` decoding into the lag model: offset commits per second, one core.

Target: 100,000 commits/s (the control plane follows every cluster's offsets topic in
near real time on one core). There is no library baseline: no Python library decodes
value v4 (NOTES), and Burrow (Go) misreads its compact strings of 127+ bytes.

Data: 1,000,000 offset commits over 100,000 partitions (1,000 groups x 10 topics x 10
partitions, one group per topic), 10 commit rounds in shuffled order, offsets and
commit times advancing. Keys v1; values half v3, half v4 (1 in 8 of those with the
topic-id tagged field). Metadata: 30% foreign groups (null, empty, or 20-80 characters
of client text), 70% streamplane ``sp1:`` metadata produced by
``streamplane.core.commitlog.encode`` for 0 to 2,000 settled ranges (about 30 to 3,000
characters). Records are built in chunks of 100,000 outside the timed region, to
bound memory; end offsets are observed between chunks, also untimed.

Timed, per run (CPU time of this process; wall time in brackets, the machine is shared):

  decode           ``decode_record`` alone
  decode+model     ``decode_record``, then ``LagModel.observe_commit`` with the low
                   watermark handed over alongside (as the commit-log codec extracts it)
  full             ``decode_record`` + ``commitlog.peek_low_watermark_timestamp(metadata)``
                   + ``observe_commit``: what the control plane does per record

Prints the median of the runs against the target.

    .venv/bin/python bench/offsets_decode.py [--runs 3] [--records 1000000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from streamplane.core.commitlog import PartitionProgress, encode, peek_low_watermark_timestamp
from streamplane.core.lag import LagModel
from streamplane.core.offsets_topic import (
    OffsetCommit,
    decode_record,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from streamplane.core.rangeset import RangeSet

TARGET_PER_S = 100_000
GROUPS, TOPICS, PARTITIONS = 1_000, 10, 10
CHUNK = 100_000
T0 = 1_700_000_000_000
SEED = 20_240_601


@dataclass
class Chunk:
    keys: list[bytes]
    values: list[bytes]
    low_watermarks: list[int | None]
    end_offsets: list[tuple[str, int, int]]
    observed_ms: int


def metadata_pool(rng: random.Random) -> list[tuple[str | None, int | None]]:
    """(metadata, low-watermark timestamp) pairs: 30% foreign, 70% streamplane."""
    pool: list[tuple[str | None, int | None]] = []
    for i in range(60):  # foreign clients
        text = None if i % 6 == 0 else "" if i % 6 == 1 else "x" * rng.randint(20, 80)
        pool.append((text, None))
    for ranges in [0, 1, 3, 8, 20, 40, 80, 150, 250, 400, 600, 900, 1300, 2000] * 10:
        settled = RangeSet()
        offset = 1_001
        for _ in range(ranges):
            offset += rng.randint(1, 40)
            length = rng.randint(1, 12)
            settled.update(RangeSet([(offset, offset + length)]))
            offset += length
        lw_ts = T0 - rng.randint(0, 60_000)
        progress = PartitionProgress(
            low_watermark=1_000,
            commit_time_ms=T0,
            settled=settled,
            low_watermark_timestamp_ms=lw_ts,
        )
        pool.append((encode(progress).metadata, lw_ts))
    return pool


def names() -> list[tuple[str, str, int]]:
    return [
        (f"svc-{g:04d}.consumer", f"stream-{g:04d}-{t}", p)
        for g in range(GROUPS)
        for t in range(TOPICS)
        for p in range(PARTITIONS)
    ]


def build_chunk(
    index: int,
    partitions: list[tuple[str, str, int]],
    keys: list[bytes],
    pool: list[tuple[str | None, int | None]],
) -> Chunk:
    rng = random.Random(SEED + index)
    order = list(range(len(partitions)))
    rng.shuffle(order)
    commit_ms = T0 + index * 30_000
    values, lws = [], []
    topic_id = uuid.UUID(int=index + 1)
    for n, i in enumerate(order):
        metadata, lw = pool[(i * 7 + index) % len(pool)]
        offset = 1_000 * index + i % 997
        version = 3 + (n & 1)
        values.append(
            encode_offset_commit_value(
                offset,
                metadata,
                commit_ms + n // 100,
                version=version,
                leader_epoch=index,
                topic_id=topic_id if version == 4 and n % 8 == 1 else None,
            )
        )
        lws.append(lw)
    ends = [(t, p, 1_000 * index + 2_000) for (_, t, p) in partitions]
    return Chunk([keys[i] for i in order], values, lws, ends, commit_ms - 1)


def describe(pool: list[tuple[str | None, int | None]], sample: Chunk) -> None:
    lengths = sorted(len((m or "").encode()) for m, _ in pool)
    long = sum(1 for x in lengths if x >= 127) / len(lengths)
    v4 = sum(1 for v in sample.values if v[1] == 4) / len(sample.values)
    sizes = sorted(len(v) for v in sample.values)
    print(
        f"metadata pool: {len(pool)} strings, median {statistics.median(lengths):.0f} B, "
        f"max {lengths[-1]} B, {long:.0%} of them >= 127 B (Burrow's v4 limit)"
    )
    print(
        f"values: {v4:.0%} v4, median {statistics.median(sizes):.0f} B, "
        f"mean {statistics.mean(sizes):.0f} B, max {sizes[-1]} B"
    )


class Pipeline:
    """One way of consuming the records; its lag model persists across the chunks of a
    run."""

    def __init__(self) -> None:
        self.model = LagModel()

    def before_chunk(self, chunk: Chunk) -> None:
        """Untimed: the end offsets polled since the previous chunk."""
        observe = self.model.observe_end_offset
        for topic, partition, end in chunk.end_offsets:
            observe(topic, partition, end, chunk.observed_ms)


def decode_only(_: Pipeline, chunk: Chunk) -> int:
    decode = decode_record
    n = 0
    for key, value in zip(chunk.keys, chunk.values, strict=True):
        if type(decode(key, value)) is OffsetCommit:
            n += 1
    return n


def with_model(pipeline: Pipeline, chunk: Chunk) -> int:
    decode = decode_record
    observe = pipeline.model.observe_commit
    n = 0
    for key, value, lw in zip(chunk.keys, chunk.values, chunk.low_watermarks, strict=True):
        r = decode(key, value)
        if type(r) is OffsetCommit:
            observe(r.group, r.topic, r.partition, r.offset, r.commit_timestamp_ms, lw)
            n += 1
    return n


def full(pipeline: Pipeline, chunk: Chunk) -> int:
    decode = decode_record
    observe = pipeline.model.observe_commit
    peek = peek_low_watermark_timestamp
    n = 0
    for key, value in zip(chunk.keys, chunk.values, strict=True):
        r = decode(key, value)
        if type(r) is OffsetCommit:
            lw = peek(r.metadata) if r.metadata else None
            observe(r.group, r.topic, r.partition, r.offset, r.commit_timestamp_ms, lw)
            n += 1
    return n


MODES: dict[str, Callable[[Pipeline, Chunk], int]] = {
    "decode": decode_only,
    "decode+model": with_model,
    "full": full,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    chunks = max(1, args.records // CHUNK)

    pool = metadata_pool(random.Random(SEED))
    partitions = names()
    keys = [encode_offset_commit_key(g, t, p) for g, t, p in partitions]
    print(
        f"{chunks * CHUNK:,} offset commits over {len(partitions):,} partitions, "
        f"{args.runs} runs (median reported)"
    )
    cpu: dict[str, list[float]] = {name: [] for name in MODES}
    wall: dict[str, list[float]] = {name: [] for name in MODES}
    for run in range(args.runs):
        pipelines = {name: Pipeline() for name in MODES}
        spent_cpu = dict.fromkeys(MODES, 0.0)
        spent_wall = dict.fromkeys(MODES, 0.0)
        for index in range(chunks):
            chunk = build_chunk(index, partitions, keys, pool)
            if run == 0 and index == 0:
                describe(pool, chunk)
            for name, mode in MODES.items():
                pipeline = pipelines[name]
                pipeline.before_chunk(chunk)
                c0, w0 = time.process_time(), time.perf_counter()
                seen = mode(pipeline, chunk)
                spent_cpu[name] += time.process_time() - c0
                spent_wall[name] += time.perf_counter() - w0
                if seen != len(chunk.keys):
                    raise SystemExit(f"{name}: {seen} commits decoded of {len(chunk.keys)}")
            del chunk
        for name in MODES:
            cpu[name].append(chunks * CHUNK / spent_cpu[name])
            wall[name].append(chunks * CHUNK / spent_wall[name])
        tracked = len(pipelines["full"].model)
        print(
            f"run {run + 1}: "
            + ", ".join(f"{name} {cpu[name][-1]:,.0f}/s" for name in MODES)
            + f" ({tracked:,} partitions tracked)"
        )

    print(f"\n{'mode':<15} {'commits/s (cpu)':>16} {'(wall)':>10} {'vs target':>10}")
    for name in MODES:
        rate = statistics.median(cpu[name])
        print(
            f"{name:<15} {rate:>16,.0f} {statistics.median(wall[name]):>10,.0f} "
            f"{rate / TARGET_PER_S:>9.2f}x"
        )
    print(f"target: {TARGET_PER_S:,} commits/s on one core (ratio = measured / target)")


if __name__ == "__main__":
    main()
