"""Instructions the consuming thread runs per good record, clean vs 1% poison, on the
real stack (valgrind's callgrind counts them; wall-clock pairs on a small shared
machine move by +-10-20%, instruction counts do not).

    .venv/bin/python bench/poison_instructions.py [--records 600000] [--handler json|int]
        [--cache-sim [--ll-kib N]] [--variant as-shipped|no-dlq-write|no-retries|...]
        [--keep-dumps DIR]

A local stack (one Kafka cluster, the control plane) is started and a stream filled;
then each side (clean, then poisoned) runs ``client_throughput.stream_consume`` in a
child process under ``valgrind --tool=callgrind --separate-threads=yes``. The counters
are zeroed at the first record and dumped after the last good one
(``callgrind_control``), so start-up and close are left out; only the main thread's
count is read. Valgrind slows the process ~50x, so the consumer's clocks are
stretched by the same factor (retry backoff, housekeeping interval, dlq batch interval,
commit interval) and the Assigner is off (its leases would lapse). The printed ratio
is clean/poisoned instructions per good record: what the consuming thread's own work
predicts for the good-record throughput ratio (target >= 0.95). The window must be
long against a pill's life: a pill lives ~0.25 s (two backoffs, then its dead letter's
batch and ack), stretched here to ~7.5 s, ~25,000 records at valgrind's ~3,300 per
second, and the pills of a window's last ~25,000 records are counted without their
retries and dead letters. Measured (int handler): ~31,000-50,000 instructions more per
pill with 40,000 records (the old default), ~41,000 and ~66,000 in two runs with
200,000, ~70,500 and ~73,400 in two with 600,000 (the default: ~5 minutes per side
with the JSON handler). Not counted: the broker, librdkafka's threads, and cache or
scheduling effects (``client_throughput.py`` measures the whole).

Both sides run a full collection just before the counters are zeroed. A fresh process
carries its imports' objects as pending in the collector's oldest generation, and
whether the first full collection of them fell in a side's window was luck: one in the
poisoned window added ~44,000 instructions per pill (a quarter of the count). A
running consumer's pills set off few: on the real stack, 1,000,000 JSON records with
1% poison, started after a collection, promoted ~3,000 objects to the oldest generation
and set off no full collection (89-99 young and 8 middle collections, 17-24 ms in all,
against 8 young ones, 2-4 ms, clean).

``--cache-sim`` also simulates the caches (first level, and a last level of
``--ll-kib`` KiB: the host's 32 MiB is shared with the broker, librdkafka's threads and
other machines, which the simulation does not see) and prints read and write misses
per good record. Instructions are not what a pill costs in time: counted this way
(int handler, 600,000 records, a 2 MiB last level) a pill is ~5.4 clean records'
worth of instructions but ~20 of first-level misses (~1,100 read and ~420 write misses
more per pill, against ~75 per clean record) and ~13 of last-level ones, and ~20 is
what it costs in the consuming thread's CPU on the real stack. ``--variant`` runs the
poisoned side under one of ``poison_breakdown.py``'s variants; ``--keep-dumps``
keeps callgrind's files (``callgrind_annotate`` them to see where misses go).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import types
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import client_throughput as bench
from _stack import local_stack
from poison_breakdown import VARIANTS
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer

# poison_breakdown's variants by command-line name ("no retries, no dlq write" ->
# "no-retries-no-dlq-write").
VARIANT_OF = {name.replace(",", "").replace(" ", "-"): make for name, make in VARIANTS.items()}
STRETCH = 30  # the consumer's clocks, stretched for valgrind's slowdown


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--handler", choices=["json", "int"], default="json")
    ap.add_argument("--cache-sim", action="store_true", help="also count cache misses")
    ap.add_argument(
        "--ll-kib",
        type=int,
        help="with --cache-sim: the simulated last-level cache's size (default: the host's)",
    )
    ap.add_argument("--keep-dumps", type=Path, help="keep callgrind's dumps in this directory")
    ap.add_argument(
        "--variant",
        choices=sorted(VARIANT_OF),
        default="as-shipped",
        help="the poisoned side's variant of the pill path (bench/poison_breakdown.py's)",
    )
    ap.add_argument("--child", nargs=4, metavar=("SIDE", "URL", "TOKEN", "STREAM"))
    args = ap.parse_args()
    if args.child:
        side, url, token, stream = args.child
        consume_side(side, url, token, stream, args.records, args.handler, args.variant)
        return
    if args.ll_kib and not args.cache_sim:
        ap.error("--ll-kib needs --cache-sim")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind (with callgrind_control) is needed: apt-get install valgrind")
    value_of = bench.log_event if args.handler == "json" else bench.number_record
    with local_stack() as stack, tempfile.TemporaryDirectory() as scratch:
        dumps = args.keep_dumps or Path(scratch)
        dumps.mkdir(parents=True, exist_ok=True)
        stream = f"bench-instr-{uuid.uuid4().hex[:6]}"
        stack.client.create_stream(stream, "local-a", partitions=bench.PARTITIONS)
        with StreamProducer(stream, stack.client) as p:
            for i in range(args.records):
                p.send(value_of(i), key=str(i).encode())
        per_good: dict[str, dict[str, float]] = {}
        for side in ("clean", "poison"):
            out = dumps / f"cg.{side}"
            cmd = [
                "valgrind",
                "--tool=callgrind",
                "--separate-threads=yes",
                *(["--cache-sim=yes"] if args.cache_sim else []),
                *([f"--LL={args.ll_kib * 1024},16,64"] if args.ll_kib else []),
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--records",
                str(args.records),
                "--handler",
                args.handler,
                "--variant",
                args.variant,
                "--child",
                side,
                stack.control_plane.url,
                stack.control_plane.token or "",
                stream,
            ]
            print(f"{side}: running under callgrind ...", flush=True)
            subprocess.run(cmd, check=True, capture_output=True)
            dump = Path(f"{out}.1-01")  # the dump after zeroing, thread 1 (main)
            if not dump.exists():
                sys.exit(f"no callgrind dump for the {side} run")
            good = args.records - (args.records // bench.POISON_EVERY if side == "poison" else 0)
            per_good[side] = {e: count / good for e, count in main_thread_totals(dump).items()}
        pills = args.records // bench.POISON_EVERY

        def per_pill(event: str) -> tuple[float, float, float]:
            """``event`` per good record clean and poisoned, and the extra per pill."""
            clean, poisoned = per_good["clean"][event], per_good["poison"][event]
            return clean, poisoned, (poisoned - clean) * (args.records - pills) / pills

        clean, poisoned, extra = per_pill("Ir")
        print(
            f"{args.handler} handler, {args.records:,} records, poisoned side {args.variant}, "
            f"consuming thread: clean "
            f"{clean:,.0f} instructions per good record, 1% poison {poisoned:,.0f} "
            f"(~{extra:,.0f} more per pill) -> ratio {clean / poisoned:.3f} (target >= 0.95)"
        )
        if args.cache_sim:
            for event, what in (
                ("D1mr", "first-level data read misses"),
                ("D1mw", "first-level data write misses"),
                ("DLmr", "last-level data read misses"),
                ("DLmw", "last-level data write misses"),
            ):
                clean, poisoned, extra = per_pill(event)
                print(
                    f"  {what} per good record: clean {clean:,.2f}, 1% poison "
                    f"{poisoned:,.2f} (~{extra:,.0f} more per pill)"
                )


def main_thread_totals(dump: Path) -> dict[str, int]:
    """The dump's totals by event name (``Ir``: instructions; ``D1mr``: first-level
    data-cache read misses, with ``--cache-sim``)."""
    events: list[str] = []
    with open(dump) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("totals:"):
                return dict(zip(events, map(int, line.split()[1:]), strict=True))
    raise ValueError(f"no totals in {dump}")


def consume_side(
    side: str, url: str, token: str, stream: str, n: int, handler: str, variant: str
) -> None:
    """The child: one stream_consume under callgrind, counters zeroed at the first
    record and dumped after the last good one (the poisoned side under ``variant``)."""
    import streamplane.client.consumer as consumer_module
    from streamplane.client.consumer import StreamConsumer

    def control(flag: str) -> None:
        subprocess.run(
            ["callgrind_control", flag, str(os.getpid())], check=True, capture_output=True
        )

    def zero() -> None:
        gc.collect()  # start both windows with nothing pending (the docstring)
        control("-z")

    class OnAppend(list[object]):
        def __init__(self, action: Callable[[], None]) -> None:
            super().__init__()
            self.action = action

        def append(self, item: object) -> None:
            self.action()
            super().append(item)

    class DumpOnRecord(dict[int, list[tuple[float, float, float]]]):
        def setdefault(self, key: int, default: object = None) -> list[tuple[float, float, float]]:
            return super().setdefault(key, OnAppend(lambda: control("-d")))  # type: ignore[arg-type]

    def stretched_consumer(
        stack: object, stream: str, group_prefix: str, max_attempts: int = 3
    ) -> StreamConsumer:
        return StreamConsumer(
            stream,
            f"{group_prefix}-{uuid.uuid4().hex[:6]}",
            client,
            max_attempts=max_attempts,
            retry_backoff=0.05 * STRETCH,
            max_retry_backoff=30.0 * STRETCH,
            commit_interval_s=1.0 * STRETCH,
            assigner=False,
        )

    client = ControlPlaneClient(url, token=token or None)
    consumer_module._HOUSEKEEPING_INTERVAL_S *= STRETCH
    consumer_module._DLQ_BATCH_INTERVAL_S *= STRETCH
    bench.bench_consumer = stretched_consumer
    bench.broker_cpu_s = lambda stack: 0.0  # the broker is not in this process
    bench.STARTUP = OnAppend(zero)  # type: ignore[assignment]  # first record: zero
    bench.CPU_PER_GOOD_US = DumpOnRecord()  # last good record: dump
    parse = bench.number_in_event if handler == "json" else bench.number_of
    poison_every = bench.POISON_EVERY if side == "poison" else 0
    stack = types.SimpleNamespace(client=client)
    with VARIANT_OF[variant]() if side == "poison" else nullcontext():
        bench.stream_consume(stack, stream, n, poison_every=poison_every, parse=parse)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
