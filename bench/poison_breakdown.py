"""Where the good-record throughput lost to 1% poison pills goes, on the real stack.

    .venv/bin/python bench/poison_breakdown.py [--records 1000000] [--runs 5]
        [--handler int|json] [--method sequential|interleaved|steps]

A clean run and poisoned runs of one stream under variants of the poisoned path:

- ``as shipped``: nacked, retried twice, dead-lettered (the dlq write, its delivery
  report, then the record settles);
- ``no dlq write``: the same, except that a record that runs out of attempts is
  settled at once instead of being written to the dlq lane. Not a mode of the
  client (it would lose the record): it only prices the dead-letter write;
- ``no retries``: ``max_attempts=1``, so a pill goes to the dlq lane on its first nack
  (prices the two retries);
- ``no retries, no dlq write``: one nack, then settled at once (what is left is the
  nack itself and a record settled out of order).

``sequential`` (the default, the yardstick of ``client_throughput.py``): each round
runs the clean consumer and every variant one after another, in a rotated order, each
reading the whole stream in a new group. It prints each variant's median good-record
rate; its consuming-thread CPU per good record, and what that comes to per pill
against the clean run, with the garbage collector's share of it (wall time in
collections, any thread, from the consumer's open to its close); and the consuming
thread's busy share (its CPU over the run's wall time: below ~90%, it was
descheduled or waiting, e.g. on a lock inside the Kafka client, and the wall-clock
rate is lower than its CPU alone explains). ``interleaved``: each variant runs
``client_throughput``'s interleaved comparison (a clean and a poisoned consumer in
turns) and prints the median ratios. Rotating matters: without it, the variant that
ran first in every round measured ~2-3% lower than it did rotated. ``steps``: clean and
as-shipped runs in turns, the consuming thread's CPU split by the client's step
(fetching, handing out, folding acks, counting nacks, the dlq writer, commits, each
without the steps it calls) and the collector's time by generation, per good record
and per pill; the application's share is what is left outside ``poll_batch`` (the
handler, ``ack``, ``nack``). The timers add ~1 us per timed call, so the steps called
per fetch read high; the per-pill differences are the figures to read.
"""

from __future__ import annotations

import argparse
import collections
import gc
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TypeVar

import client_throughput as bench
from _stack import Stack, local_stack
from _stats import describe_ratios
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.dlq_writer import DlqWriter
from streamplane.client.partition_state import PartitionState
from streamplane.client.producer import StreamProducer

Parse = Callable[[bytes | None], int]
T = TypeVar("T")


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


@contextmanager
def no_retries_no_dlq_write() -> Iterator[None]:
    with no_retries(), no_dlq_write():
        yield


VARIANTS: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "as shipped": nullcontext,
    "no dlq write": no_dlq_write,
    "no retries": no_retries,
    "no retries, no dlq write": no_retries_no_dlq_write,
}
CLEAN = "clean"


def rotated_rounds(names: list[str], runs: int, measure: Callable[[str], T]) -> dict[str, list[T]]:
    """``measure(name)`` for every name in ``runs`` rounds, after a warm-up round that is
    not kept; each round starts one name further on."""
    results: dict[str, list[T]] = {name: [] for name in names}
    for round_ in range(runs + 1):
        k = round_ % len(names)
        for name in names[k:] + names[:k]:
            result = measure(name)
            if round_:
                results[name].append(result)
        if round_:
            print(f"round {round_}/{runs}", flush=True)
    return results


@contextmanager
def collections_timed() -> Iterator[list[float]]:
    """Seconds spent in garbage collections while inside (one element, filled at exit)."""
    spent = [0.0]
    started = [0.0]

    def on_collection(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - started[0]

    gc.callbacks.append(on_collection)
    try:
        yield spent
    finally:
        gc.callbacks.remove(on_collection)


def sequential(stack: Stack, stream: str, n: int, runs: int, parse: Parse) -> None:
    def measure(name: str) -> tuple[float, float, float, float]:
        """(good records per second, consuming-thread CPU per good record, us of garbage
        collection per good record, the consuming thread's busy share)"""
        poison_every = 0 if name == CLEAN else bench.POISON_EVERY
        with nullcontext() if name == CLEAN else VARIANTS[name](), collections_timed() as gc_s:
            rate = bench.stream_consume(stack, stream, n, poison_every, parse)
        cpu, _broker, busy = bench.CPU_PER_GOOD_US.pop(poison_every)[-1]
        return rate, cpu, gc_s[0] / bench.good_records(n, poison_every) * 1e6, busy

    names = [CLEAN, *VARIANTS]
    results = rotated_rounds(names, runs, measure)

    def median(name: str, field: int) -> float:
        return statistics.median(r[field] for r in results[name])

    clean_rate, clean_cpu, clean_gc = (median(CLEAN, f) for f in range(3))
    per_pill = bench.POISON_EVERY - 1  # good records per pill
    print(f"1% poison, {n:,} records, {runs} sequential runs each (medians):")
    for name in names:
        rate, cpu, gc_us, busy = (median(name, f) for f in range(4))
        print(
            f"  {name:25s} {rate:9,.0f} good rec/s (x{rate / clean_rate:.2f}), consuming-thread "
            f"CPU {cpu:.3f} us per good record (+{(cpu - clean_cpu) * per_pill:.1f} us per pill, "
            f"of which GC {(gc_us - clean_gc) * per_pill:+.1f}), busy {busy:.0%}"
        )
    for name in VARIANTS:  # per round, against the clean run of the same round
        cpu_ratios = [c[1] / v[1] for c, v in zip(results[CLEAN], results[name], strict=True)]
        print(f"  {name:25s} consuming-thread CPU ratio {describe_ratios(cpu_ratios)}")


def interleaved(stack: Stack, stream: str, n: int, runs: int, parse: Parse) -> None:
    def measure(name: str) -> tuple[float, float]:
        """(good-record rate ratio poisoned / clean, CPU ratio clean / poisoned)"""
        with VARIANTS[name]():
            clean, poisoned, clean_cpu, poisoned_cpu = bench.interleaved_poison(
                stack, stream, n, parse, bench.TURN_RECORDS, reject_pills=False
            )
        return poisoned / clean, clean_cpu / poisoned_cpu

    names = list(VARIANTS)
    results = rotated_rounds(names, runs, measure)
    print(f"1% poison, {n:,} records, {runs} interleaved pairs each:")
    for name in names:
        ratios = [r for r, _ in results[name]]
        cpu = statistics.median(c for _, c in results[name])
        print(
            f"  {name:25s} good-record ratio {statistics.median(ratios):.3f} "
            f"(pairs {min(ratios):.2f}-{max(ratios):.2f}), consuming-thread CPU ratio {cpu:.3f}"
        )


# The steps ``steps`` times: (class, method). Each is timed without the timed steps
# (and collections) it calls.
TIMED_STEPS: list[tuple[type, str]] = [
    (StreamConsumer, "poll_batch"),
    (StreamConsumer, "_take"),
    (StreamConsumer, "_fetch"),
    (StreamConsumer, "_accept"),
    (StreamConsumer, "_housekeeping"),
    (StreamConsumer, "_flow_control"),
    (StreamConsumer, "_apply_acks"),
    (StreamConsumer, "_apply_nacks"),
    (StreamConsumer, "_release_due_retries"),
    (StreamConsumer, "_settle_dead_letters"),
    (StreamConsumer, "_commit"),
    (PartitionState, "apply_acks"),
    (PartitionState, "settle"),
    (PartitionState, "progress"),
    (DlqWriter, "_send"),
    (DlqWriter, "_batch_done"),
    (StreamProducer, "poll"),
]


class StepTimer:
    """Consuming-thread CPU by step: each timed method's own time (without the timed
    methods it calls), and collections by generation (without them in any step)."""

    def __init__(self) -> None:
        self.own: collections.defaultdict[str, float] = collections.defaultdict(float)
        self._stack: list[list[float]] = []  # [start, time in timed callees] per frame
        self._thread = threading.get_ident()

    def _enter(self) -> None:
        self._stack.append([time.thread_time(), 0.0])

    def _leave(self, name: str) -> None:
        start, inner = self._stack.pop()
        spent = time.thread_time() - start
        self.own[name] += spent - inner
        if self._stack:
            self._stack[-1][1] += spent

    def _timed(self, cls: type, method: str) -> Callable[..., object]:
        shipped = getattr(cls, method)
        name = f"{cls.__name__}.{method}"

        def timed(*args: object, **kwargs: object) -> object:
            if threading.get_ident() != self._thread:
                return shipped(*args, **kwargs)
            self._enter()
            try:
                return shipped(*args, **kwargs)
            finally:
                self._leave(name)

        return timed

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._enter()
        else:
            self._leave(f"collector, generation {info['generation']}")

    @contextmanager
    def installed(self) -> Iterator[None]:
        shipped = [(cls, method, getattr(cls, method)) for cls, method in TIMED_STEPS]
        for cls, method in TIMED_STEPS:
            setattr(cls, method, self._timed(cls, method))
        gc.callbacks.append(self._on_collection)
        try:
            yield
        finally:
            gc.callbacks.remove(self._on_collection)
            for cls, method, original in shipped:
                setattr(cls, method, original)


def steps(stack: Stack, stream: str, n: int, runs: int, parse: Parse) -> None:
    def measure(name: str) -> dict[str, float]:
        """Consuming-thread CPU (us) per good record, by step."""
        poison_every = 0 if name == CLEAN else bench.POISON_EVERY
        timer = StepTimer()
        with timer.installed():
            bench.stream_consume(stack, stream, n, poison_every, parse)
        cpu, _broker, _busy = bench.CPU_PER_GOOD_US.pop(poison_every)[-1]
        good = bench.good_records(n, poison_every)
        by_step = {step: s / good * 1e6 for step, s in timer.own.items()}
        # What is left outside the client's steps: the handler, ack, nack, the loop.
        by_step["application (handler, ack, nack)"] = cpu - sum(by_step.values())
        return by_step

    results = rotated_rounds([CLEAN, "as shipped"], runs, measure)
    per_pill = bench.POISON_EVERY - 1  # good records per pill

    def median(name: str, step: str) -> float:
        return statistics.median(r.get(step, 0.0) for r in results[name])

    names = sorted({step for r in results["as shipped"] for step in r})
    rows = [(step, median(CLEAN, step), median("as shipped", step)) for step in names]
    rows.sort(key=lambda row: row[1] - row[2])
    print(f"1% poison, {n:,} records, {runs} runs each (medians), consuming-thread CPU:")
    print(f"  {'step':45s} {'clean':>8s} {'poisoned':>9s}  us per good record; extra per pill")
    for step, clean, poisoned in rows:
        extra = (poisoned - clean) * per_pill
        print(f"  {step:45s} {clean:8.3f} {poisoned:9.3f}  {extra:+6.2f} us")
    clean_total = sum(row[1] for row in rows)
    poisoned_total = sum(row[2] for row in rows)
    print(
        f"  {'all':45s} {clean_total:8.3f} {poisoned_total:9.3f}  "
        f"{(poisoned_total - clean_total) * per_pill:+6.2f} us"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--handler", choices=["int", "json"], default="int")
    ap.add_argument(
        "--method", choices=["sequential", "interleaved", "steps"], default="sequential"
    )
    args = ap.parse_args()
    value_of, parse = (
        (bench.number_record, bench.number_of)
        if args.handler == "int"
        else (bench.log_event, bench.number_in_event)
    )
    with local_stack() as stack:
        stream = f"bench-breakdown-{uuid.uuid4().hex[:6]}"
        stack.client.create_stream(stream, "local-a", partitions=bench.PARTITIONS)
        with StreamProducer(stream, stack.client) as p:
            for i in range(args.records):
                p.send(value_of(i), key=str(i).encode())
        method = {"sequential": sequential, "interleaved": interleaved, "steps": steps}[args.method]
        print(f"{args.handler} handler:")
        method(stack, stream, args.records, args.runs, parse)


if __name__ == "__main__":
    main()
