"""What a poison pill costs the consuming thread, in Python opcodes (no Kafka).

    .venv/bin/python bench/poison_cost.py [--records 60000]

Wall-clock ratios on a small shared machine move by +-20% between identical runs, so
this counts instead: a StreamConsumer is fed pre-built fetches (6 partitions, 1,000
records per fetch), its clock is virtual (2.5 us per record fetched, so retries come
due as they would at ~400,000 records/s) and its dead letters go through a real
StreamProducer to a stand-in for the dlq lane's Kafka producer, which acknowledges
them at the next poll. Every Python opcode the consuming thread runs is counted
(``sys.settrace`` opcode events), once with every record good and once with 1% poison
pills (nacked, retried twice, dead-lettered, as in client_throughput.py). The consumer
is the unit tests' one (tests/unit/client/harness.py). It prints the
opcodes per clean record, the extra opcodes per pill, the functions they go to, and
the good-record ratio that these counts alone predict. Work in C (librdkafka, the dlq
produce, the broker) is not counted: client_throughput.py measures the whole.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import Message

import streamplane.client.consumer as consumer_module

# The consumer without Kafka that the unit tests use (tests/unit/client/harness.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.unit.client.harness import KEY, Clock, DlqBroker, stand_in_consumer

PARTITIONS = 6
POISON_EVERY = 100


def fetches(records: int) -> list[list[Message]]:
    per_partition = records // PARTITIONS
    step = 1000 // PARTITIONS
    out = []
    for start in range(0, per_partition, step):
        batch = []
        for p in range(PARTITIONS):
            for o in range(start, min(start + step, per_partition)):
                n = o * PARTITIONS + p
                batch.append(
                    Message(
                        topic=KEY.topic, partition=p, offset=o, value=b"%d" % n, timestamp=(1, o)
                    )
                )
        out.append(batch)
    return out


def consume(
    batches: list[list[Message]], poison: bool, clock: Clock, trace: bool = True
) -> tuple[int, collections.Counter[str], float]:
    """Consume every batch; returns the good records, the opcodes per function (when
    traced) and the thread's CPU seconds."""
    c = stand_in_consumer(
        DlqBroker(ack_at_poll=True, keep_written=False),
        PARTITIONS,
        max_attempts=3,
        retry_backoff=0.05,
    )
    pending = iter(batches)

    def fetch(timeout: float) -> None:
        batch = next(pending, None)
        if batch is None:
            clock.now += timeout  # only retries left: let them come due
            return
        clock.now += len(batch) * 2.5e-6
        c._accept(KEY.cluster, batch)

    c._fetch = fetch  # type: ignore[method-assign]
    total = sum(len(b) for b in batches)
    target = total - (-(-total // POISON_EVERY) if poison else 0)  # numbers 0, 100, ... are pills
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"] += 1
        return tracer

    good = 0
    if trace:
        sys.settrace(tracer)
    cpu = time.thread_time()
    try:
        while good < target or (poison and c.stats["dlq"] < total - target):
            for m in c.poll_batch(500, 0.5):
                number = int(m.value or b"0")  # the handler's work, in both runs
                if number % POISON_EVERY == 0 and poison:  # the same test in both runs
                    m.nack("poison")
                    continue
                good += 1
                m.ack()
    finally:
        cpu = time.thread_time() - cpu
        sys.settrace(None)
    return good, counts, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument(
        "--cpu-runs",
        type=int,
        default=0,
        help="also time this many untraced clean/poisoned pairs (thread CPU, median ratio)",
    )
    args = ap.parse_args()
    clock = Clock()
    consumer_module.time = clock  # type: ignore[assignment,attr-defined]
    batches = fetches(args.records)
    good_clean, clean, _ = consume(batches, False, clock)
    good_poison, poisoned, _ = consume(batches, True, clock)
    pills = good_clean - good_poison
    per_record = clean.total() / good_clean
    per_pill = (poisoned.total() - clean.total()) / pills
    predicted = (POISON_EVERY - 1) / POISON_EVERY / (1 + per_pill / (POISON_EVERY * per_record))
    print(f"clean: {per_record:.0f} opcodes per record; 1% poison: {per_pill:.0f} extra per pill")
    print(
        f"predicted good-record ratio from these counts alone: {predicted:.3f} "
        "(target >= 0.95; C work not counted)"
    )
    extra = collections.Counter({k: poisoned[k] - clean[k] for k in poisoned})
    for name, n in extra.most_common(24):
        print(f"  {n / pills:7.1f}  {name}")
    if args.cpu_runs:
        cpu_ratios(batches, clock, args.cpu_runs)


def cpu_ratios(batches: list[list[Message]], clock: Clock, runs: int) -> None:
    """Untraced: the consuming thread's CPU per good record, clean vs poisoned, in
    alternating pairs (C work of the client itself included; no broker, no librdkafka)."""
    ratios = []
    per_good: dict[bool, list[float]] = {False: [], True: []}
    for i in range(runs):
        for poison in (False, True) if i % 2 == 0 else (True, False):
            good, _, cpu = consume(batches, poison, clock, trace=False)
            per_good[poison].append(cpu / good * 1e6)
        ratios.append(per_good[False][-1] / per_good[True][-1])
    clean_us = statistics.median(per_good[False])
    poisoned_us = statistics.median(per_good[True])
    print(
        f"untraced CPU per good record, {runs} pairs: clean {clean_us:.3f} us, "
        f"1% poison {poisoned_us:.3f} us -> ratio {statistics.median(ratios):.3f} "
        f"(pairs {min(ratios):.3f}-{max(ratios):.3f}; target >= 0.95)"
    )


if __name__ == "__main__":
    main()
