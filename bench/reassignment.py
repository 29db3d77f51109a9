"""How fast a dead member's work moves: the Assigner vs Kafka's own consumer groups.

    .venv/bin/python bench/reassignment.py [--runs 10] [--kafka-runs 2]

Three members consume a 6-partition stream; one is killed with SIGKILL; we time until
the others own all of its partitions. streamplane: leases from the Assigner (lease
1.5 s, heartbeat every 0.3 s). Baseline: confluent-kafka consumer groups with default
settings (session.timeout.ms 45 s), the classic protocol (cooperative-sticky) and the
consumer protocol (KIP-848). Prints p50/p99 (streamplane) and each run (Kafka).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _stack import Stack, local_stack
from streamplane.exceptions import NotFound
from streamplane.kafka.admin import KafkaAdmin

HERE = Path(__file__).parent
MEMBERS = str(HERE / "_members.py")
ENV = {**os.environ, "PYTHONPATH": str(HERE)}


def owners(stack: Stack, group: str) -> dict[str, set[str]]:
    try:
        doc = stack.client.describe_group(group)
    except NotFound:
        return {}
    return {m["member_id"]: set(m["units"]) for m in doc["members"]}


def wait(pred: object, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        if time.monotonic() > end:
            raise TimeoutError
        time.sleep(0.01)


def streamplane_run(stack: Stack, stream: str) -> float:
    group = f"g-{uuid.uuid4().hex[:6]}"
    cp = stack.control_plane
    procs = [
        subprocess.Popen([sys.executable, MEMBERS, "streamplane", cp.url, cp.token, stream, group],
                         env=ENV)
        for _ in range(3)
    ]  # fmt: skip
    try:
        wait(lambda: len(o := owners(stack, group)) == 3 and all(o.values()))
        victim = procs[0]
        units = next(u for m, u in owners(stack, group).items() if f"-{victim.pid}-" in m)
        victim.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        wait(lambda: units <= {u for m, us in owners(stack, group).items()
                               if f"-{victim.pid}-" not in m for u in us})  # fmt: skip
        return time.monotonic() - t0
    finally:
        for p in procs:
            p.kill()
            p.wait()


def kafka_run(bootstrap: str, topic: str, protocol: str) -> float:
    group = f"k-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        files = [Path(tmp) / f"m{i}.json" for i in range(3)]
        procs = [
            subprocess.Popen([sys.executable, MEMBERS, "kafka", bootstrap, topic, group, protocol,
                              str(f)], env=ENV)
            for f in files
        ]  # fmt: skip

        def parts(f: Path) -> list[int]:
            try:
                return list(json.loads(f.read_text())["partitions"])
            except (OSError, ValueError):
                return []

        try:
            wait(lambda: all(parts(f) for f in files)
                 and sorted(p for f in files for p in parts(f)) == list(range(6)))  # fmt: skip
            procs[0].send_signal(signal.SIGKILL)
            t0 = time.monotonic()
            wait(lambda: sorted(p for f in files[1:] for p in parts(f)) == list(range(6)), 180)
            return time.monotonic() - t0
        finally:
            for p in procs:
                p.kill()
                p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--kafka-runs", type=int, default=2)
    ap.add_argument("--skip-streamplane", action="store_true", help="Only the Kafka baseline.")
    args = ap.parse_args()
    with local_stack() as stack:
        stack.client.create_stream("reassign", "local-a", lanes=["realtime"], partitions=6)
        ours = [1.0] if args.skip_streamplane else []
        for i in range(0 if args.skip_streamplane else args.runs):
            ours.append(streamplane_run(stack, "reassign"))
            print(f"streamplane run {i + 1}: {ours[-1] * 1000:.0f} ms", flush=True)
        ours.sort()
        p99 = ours[min(len(ours) - 1, int(len(ours) * 0.99))]
        print(
            f"streamplane Assigner: p50 {statistics.median(ours) * 1000:.0f} ms, "
            f"p99 {p99 * 1000:.0f} ms over {len(ours)} kill -9 runs (target p99 < 2000 ms)"
        )
        bootstrap = stack.fleet.bootstrap("local-a")
        KafkaAdmin(bootstrap).create_topics([("reassign.raw", 6, 1, {})])
        for protocol in ("classic", "consumer"):
            runs = [kafka_run(bootstrap, "reassign.raw", protocol) for _ in range(args.kafka_runs)]
            print(
                f"Kafka group ({protocol} protocol, defaults): "
                + ", ".join(f"{r:.1f} s" for r in runs)
                + f" -> {statistics.median(runs) / statistics.median(ours):.0f}x streamplane's p50",
                flush=True,
            )


if __name__ == "__main__":
    main()
