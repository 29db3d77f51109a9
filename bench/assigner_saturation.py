"""The Assigner with every member reading a backlog flat out: does it leave them be?

    .venv/bin/python bench/assigner_saturation.py [--records 1000000] [--seconds 60]
        [--busy-us 50] [--runs 1]

Two groups of three member processes read the same 12-partition backlog at the same
time (so the host's noise falls on both alike), each member spending ``--busy-us`` of
CPU a record: six busy processes on a shared host, every one of them saturated, each
getting the scheduler's share of CPU. The members of one group report their backlog to
the Assigner (the client as it is); the baseline group's members report none, as
clients did before (their Assigner only sees records/s and CPU, and reads a member with
a larger CPU share as overloaded). Printed per group, over the observed seconds after
both groups settled: generations (assignment changes), units moved, records handled per
second; and the ratios against the baseline.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _stack import Stack, local_stack
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import NotFound

HERE = Path(__file__).parent
MEMBERS = str(HERE / "_members.py")
ENV = {**os.environ, "PYTHONPATH": str(HERE)}
PARTITIONS = 12
MEMBERS_PER_GROUP = 3


def snapshot(stack: Stack, group: str) -> tuple[int, dict[str, str]]:
    """The group's generation and each unit's holder."""
    try:
        doc = stack.client.describe_group(group)
    except NotFound:
        return -1, {}
    return int(doc["generation"]), {u: m["member_id"] for m in doc["members"] for u in m["units"]}


def handled(files: list[Path]) -> int:
    total = 0
    for f in files:
        with contextlib.suppress(FileNotFoundError, ValueError):
            total += int(f.read_text() or 0)
    return total


def one_run(stack: Stack, stream: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    cp = stack.control_plane
    groups = {"reports backlog": "backlog", "baseline (no backlog)": "no-backlog"}
    names = {label: f"sat-{uuid.uuid4().hex[:6]}" for label in groups}
    with tempfile.TemporaryDirectory() as tmp:
        files = {
            label: [Path(tmp) / f"{label[:4]}-{i}.count" for i in range(3)] for label in groups
        }
        procs = [
            subprocess.Popen(
                [sys.executable, MEMBERS, "streamplane", cp.url, cp.token, stream,
                 names[label], str(args.busy_us), str(f), mode],
                env=ENV,
            )
            for label, mode in groups.items()
            for f in files[label]
        ]  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:  # both groups: every unit held, by all three members
                snaps = {label: snapshot(stack, names[label]) for label in groups}
                if all(
                    len(owners) == PARTITIONS and len(set(owners.values())) == MEMBERS_PER_GROUP
                    for _, owners in snaps.values()
                ):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"groups did not settle: {snaps}")
                time.sleep(0.2)
            time.sleep(3.0)  # the first load reports; then observe
            start = {label: snapshot(stack, names[label]) for label in groups}
            counted = {label: handled(files[label]) for label in groups}
            moves = dict.fromkeys(groups, 0)
            last = {label: owners for label, (_, owners) in start.items()}
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.seconds:
                time.sleep(1.0)
                for label in groups:
                    _, owners = snapshot(stack, names[label])
                    moves[label] += sum(
                        1 for u, m in owners.items() if last[label].get(u) not in (None, m)
                    )
                    last[label] = owners | {u: m for u, m in last[label].items() if u not in owners}
            elapsed = time.monotonic() - t0
            result = {}
            for label in groups:
                generation, _ = snapshot(stack, names[label])
                result[label] = {
                    "generations": generation - start[label][0],
                    "moved": moves[label],
                    "rate": (handled(files[label]) - counted[label]) / elapsed,
                }
            return result
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--busy-us", type=float, default=50.0)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with local_stack() as stack:
        runs = []
        for run in range(args.runs):
            stream = f"sat{run}"
            stack.client.create_stream(stream, "local-a", lanes=["bulk"], partitions=PARTITIONS)
            t = time.monotonic()
            with StreamProducer(stream, stack.client) as producer:
                value = b"x" * 100
                for i in range(args.records):
                    producer.send(value, key=b"%d" % i)
            took = time.monotonic() - t
            print(f"run {run + 1}: {args.records:,} records produced in {took:.1f} s; "
                  f"observing {args.seconds:g} s", flush=True)  # fmt: skip
            result = one_run(stack, stream, args)
            for label, r in result.items():
                print(f"  {label:<22} generations {r['generations']:>3.0f}  units moved "
                      f"{r['moved']:>3.0f}  records/s {r['rate']:>8,.0f}", flush=True)  # fmt: skip
            runs.append(result)
        ours, base = "reports backlog", "baseline (no backlog)"

        def med(label: str, key: str) -> float:
            return statistics.median(r[label][key] for r in runs)

        print(f"median over {len(runs)} run(s): units moved {med(ours, 'moved'):.0f} vs "
              f"{med(base, 'moved'):.0f} (baseline), generations {med(ours, 'generations'):.0f} "
              f"vs {med(base, 'generations'):.0f}; records/s ratio "
              f"{statistics.median(r[ours]['rate'] / r[base]['rate'] for r in runs):.2f}"
        )  # fmt: skip


if __name__ == "__main__":
    main()
