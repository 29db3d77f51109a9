"""Where the good-record throughput lost to 1% poison pills goes, on the real stack.

    .venv/bin/python bench/poison_breakdown.py [--records 200000] [--runs 12]

The same interleaved comparison as ``client_throughput.py`` (a clean and a poisoned
consumer of one stream, JSON-event handler, turns of 5,000 good records), under
variants of the poisoned path:

- ``as shipped``: nacked, retried twice, dead-lettered (the dlq write, its delivery
  report, then the record settles);
- ``no dlq write``: the same, except that a record that runs out of attempts is
  settled at once instead of being written to the dlq lane. Not a mode of the
  client (it would lose the record): it only prices the dead-letter write;
- ``no retries``: ``max_attempts=1``, so a pill goes to the dlq lane on its first nack
  (prices the two retries).

Each round runs every variant once, in a rotated order (without rotation, the variant
that ran first in every round measured ~2-3% lower than it did rotated). It
prints each variant's median ratio of per-pair good-record rates (poisoned / clean) and
of consuming-thread CPU per good record (clean / poisoned).
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import client_throughput as bench
from _stack import Stack, local_stack
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import StreamProducer


def _settle_without_dlq(
    consumer: StreamConsumer, letters: list[tuple[StreamMessage, str, int]]
) -> None:
    for msg, _reason, _attempts in letters:
        msg._run.state.settle([msg.offset], rejected=True)
    consumer.stats["rejected"] += len(letters)


@contextmanager
def no_dlq_write() -> Iterator[None]:
    shipped = StreamConsumer._dead_letters
    StreamConsumer._dead_letters = _settle_without_dlq  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        StreamConsumer._dead_letters = shipped  # type: ignore[method-assign]


@contextmanager
def no_retries() -> Iterator[None]:
    shipped = bench.bench_consumer

    def one_attempt(
        stack: Stack, stream: str, group_prefix: str, max_attempts: int = 1
    ) -> StreamConsumer:
        return shipped(stack, stream, group_prefix, max_attempts)

    bench.bench_consumer = one_attempt
    try:
        yield
    finally:
        bench.bench_consumer = shipped


VARIANTS: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "as shipped": nullcontext,
    "no dlq write": no_dlq_write,
    "no retries": no_retries,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=12)
    args = ap.parse_args()
    n = args.records
    names = list(VARIANTS)
    with local_stack() as stack:
        stream = f"bench-breakdown-{uuid.uuid4().hex[:6]}"
        stack.client.create_stream(stream, "local-a", partitions=bench.PARTITIONS)
        with StreamProducer(stream, stack.client) as p:
            for i in range(n):
                p.send(bench.log_event(i), key=str(i).encode())
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for round_ in range(args.runs + 1):  # round 0 warms up
            k = round_ % len(names)
            for name in names[k:] + names[:k]:
                with VARIANTS[name]():
                    clean, poisoned, clean_cpu, poisoned_cpu = bench.interleaved_poison(
                        stack, stream, n, bench.number_in_event, bench.TURN_RECORDS
                    )
                if round_:
                    results[name].append((poisoned / clean, clean_cpu / poisoned_cpu))
            if round_:
                print(f"round {round_}/{args.runs}", flush=True)
    print(f"1% poison, JSON-event handler, {n:,} records, {args.runs} interleaved pairs each:")
    for name in names:
        ratios = [r for r, _ in results[name]]
        cpu = statistics.median(c for _, c in results[name])
        print(
            f"  {name:13s} good-record ratio {statistics.median(ratios):.3f} "
            f"(pairs {min(ratios):.2f}-{max(ratios):.2f}), consuming-thread CPU ratio {cpu:.3f}"
        )


if __name__ == "__main__":
    main()
